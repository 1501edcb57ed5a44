// Counting the libtorch operators a stretch of work calls, by call path, with torch's own
// RecordFunction observers (what `torch.profiler` records, without its trace). See op_tally.rs
// for why and how the count is used.

// libtorch is built with NDEBUG, and `at::RecordFunction` has a member only without it
// (`inputs_valid_`, torch 2.11): compiled without NDEBUG, this file would read the record's
// members at other offsets than libtorch wrote them (and assert on them).
#ifndef NDEBUG
#define NDEBUG
#endif
#include <ATen/core/ivalue.h>
#include <ATen/record_function.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

// Calls counted per key, from every thread (torch's autograd engine runs a CUDA backward on a
// thread of its own).
std::mutex mu;
std::map<std::string, long> *counts = nullptr;
at::CallbackHandle handle = 0;
// The one thread whose calls count, or no thread's id (every thread's count).
std::thread::id only_thread;

// The names of the operators open on this thread, outermost first: an op called inside another
// (`aten::copy_` inside `aten::_to_copy` inside `aten::to`) is counted under the whole path.
thread_local std::vector<std::string> open_ops;

// "BFloat16 32x512x768" for the first tensor among the op's inputs, or "" when none is one.
std::string first_tensor(const at::RecordFunction &fn) {
  for (const c10::IValue &input : fn.inputs()) {
    if (!input.isTensor()) {
      continue;
    }
    const at::Tensor &t = input.toTensor();
    if (!t.defined()) {
      return "undefined";
    }
    std::ostringstream out;
    out << c10::toString(t.scalar_type()) << ' ';
    for (size_t i = 0; i < t.sizes().size(); ++i) {
      out << (i > 0 ? "x" : "") << t.sizes()[i];
    }
    if (!t.is_contiguous()) {
      out << " strided";
    }
    return out.str();
  }
  return "";
}

std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction &fn) {
  std::string key;
  for (const std::string &outer : open_ops) {
    key += outer;
    key += " > ";
  }
  key += fn.name();
  std::string tensor = first_tensor(fn);
  if (!tensor.empty()) {
    key += " [" + tensor + "]";
  }
  // Pushed on every thread, counted or not: `on_exit` pops what this pushed.
  open_ops.emplace_back(fn.name());
  std::lock_guard<std::mutex> lock(mu);
  bool counted = only_thread == std::thread::id() || only_thread == std::this_thread::get_id();
  if (counts != nullptr && counted) {
    ++(*counts)[key];
  }
  return nullptr;
}

void on_exit(const at::RecordFunction &, at::ObserverContext *) {
  if (!open_ops.empty()) {
    open_ops.pop_back();
  }
}

} // namespace

// Starts counting, the calls of every thread or, with `this_thread_only`, the calling
// thread's alone: 0; 2 when a count is already running.
extern "C" int pipeline_op_count_start(int this_thread_only) {
  std::lock_guard<std::mutex> lock(mu);
  if (counts != nullptr) {
    return 2;
  }
  counts = new std::map<std::string, long>();
  only_thread = this_thread_only != 0 ? std::this_thread::get_id() : std::thread::id();
  // Operators only (not user scopes or the autograd nodes' own records), with their inputs for
  // the first tensor's type and shape.
  handle = at::addGlobalCallback(at::RecordFunctionCallback(on_enter, on_exit)
                                     .needsInputs(true)
                                     .scopes({at::RecordScope::FUNCTION}));
  return 0;
}

// What `pipeline_op_count_stop` hands each counted key to.
using OpSink = void (*)(void *sink, const char *key, long calls);

// Stops counting and hands every key with its calls to `sink` (in key order): 0; 1 when no
// count was running.
extern "C" int pipeline_op_count_stop(OpSink each, void *sink) {
  std::map<std::string, long> *done = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (counts == nullptr) {
      return 1;
    }
    at::removeCallback(handle);
    done = counts;
    counts = nullptr;
  }
  for (const auto &[key, calls] : *done) {
    each(sink, key.c_str(), calls);
  }
  delete done;
  return 0;
}
