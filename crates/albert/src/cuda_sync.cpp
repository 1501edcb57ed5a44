// Counting the CUDA synchronisations a stretch of work makes, with torch's own sync debug mode
// (`torch.cuda.set_sync_debug_mode("warn")` in Python), which libtorch's C++ API exposes only
// through a CUDA header. See cuda_sync.rs for why and how the count is used.
#include <c10/util/Exception.h>

#include <dlfcn.h>

#include <string>

namespace {

// The object behind `c10::cuda::warning_state()`: a function-local static of an inline function
// in c10/cuda/CUDAFunctions.h, exported by libc10_cuda.so as a unique global symbol. Its one
// member is `SyncDebugMode sync_debug_mode` (an `enum class` over int: 0 disabled, 1 warn,
// 2 error; torch 2.11, as since torch 1.10). Found by name at run time, not through the header:
// that header includes the CUDA toolkit's `cuda_runtime_api.h`, which a CPU-only libtorch does
// not ship, and linking libc10_cuda would tie every `tch` build to a CUDA one.
constexpr const char *kWarningState = "_ZZN3c104cuda13warning_stateEvE14warning_state_";
constexpr int kDisabled = 0;
constexpr int kWarn = 1;
// What every synchronising CUDA call warns with (`c10::cuda::warn_or_error_on_sync`).
constexpr const char *kSyncWarning = "called a synchronizing CUDA operation";

int *sync_debug_mode() { return static_cast<int *>(dlsym(RTLD_DEFAULT, kWarningState)); }

// Called at a sync warning, still inside the synchronising call, so that the caller can record
// where it came from (its call stack).
using SyncHook = void (*)();

// Counts the sync warnings (calling `on_sync`, when given, at each) and passes every other
// warning on to the handler it replaced.
class SyncCounter : public c10::WarningHandler {
public:
  SyncCounter(c10::WarningHandler *next, SyncHook on_sync) : next_(next), on_sync_(on_sync) {}

  void process(const c10::Warning &warning) override {
    if (warning.msg().find(kSyncWarning) != std::string::npos) {
      ++count_;
      if (on_sync_ != nullptr) {
        on_sync_();
      }
    } else {
      next_->process(warning);
    }
  }

  long count() const { return count_; }
  c10::WarningHandler *next() const { return next_; }

private:
  c10::WarningHandler *next_;
  SyncHook on_sync_;
  long count_ = 0;
};

SyncCounter *counter = nullptr;

} // namespace

// Starts counting, calling `on_sync` (may be null) at each sync: 0; 1 when libc10_cuda is not
// loaded (no mode to set); 2 when a count is already running.
extern "C" int pipeline_sync_count_start(SyncHook on_sync) {
  int *mode = sync_debug_mode();
  if (mode == nullptr) {
    return 1;
  }
  if (counter != nullptr) {
    return 2;
  }
  counter = new SyncCounter(c10::WarningUtils::get_warning_handler(), on_sync);
  c10::WarningUtils::set_warning_handler(counter);
  *mode = kWarn;
  return 0;
}

// Stops counting and returns the count (-1 when none was running); the mode goes back to
// disabled and the handler to the one it replaced.
extern "C" long pipeline_sync_count_stop() {
  if (counter == nullptr) {
    return -1;
  }
  if (int *mode = sync_debug_mode()) {
    *mode = kDisabled;
  }
  c10::WarningUtils::set_warning_handler(counter->next());
  long n = counter->count();
  delete counter;
  counter = nullptr;
  return n;
}

// The sync debug mode now (0 disabled, 1 warn, 2 error), or -1 without libc10_cuda: for tests.
extern "C" int pipeline_sync_debug_mode() {
  int *mode = sync_debug_mode();
  return mode == nullptr ? -1 : *mode;
}

// For tests, which have no GPU to synchronise with. What every synchronising call of libtorch's
// CUDA code calls first, `c10::cuda::warn_or_error_on_sync()`: it reads the mode where torch
// reads it and warns with torch's own message (so a test finds a wrong symbol or a changed
// message). 1 without libc10_cuda.
extern "C" int pipeline_sync_count_test_torch_sync() {
  auto *sync = reinterpret_cast<void (*)()>(
      dlsym(RTLD_DEFAULT, "_ZN3c104cuda21warn_or_error_on_syncEv"));
  if (sync == nullptr) {
    return 1;
  }
  sync();
  return 0;
}

// For tests: a warning through c10 as libtorch's code issues one.
extern "C" void pipeline_sync_count_test_warn(const char *message) {
  TORCH_WARN(message);
}
