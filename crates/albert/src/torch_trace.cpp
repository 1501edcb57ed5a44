// A timeline of a stretch of work from torch's own profiler (Kineto, what `torch.profiler`
// records): every libtorch operator's start and end on the host, and on CUDA every kernel and
// runtime call, saved as a Chrome trace. See torch_trace.rs for why.

// As op_tally.cpp: `at::RecordFunction` has a member only without NDEBUG, and libtorch is built
// with it; the ranges below construct records in this file, so its layout must be libtorch's.
#ifndef NDEBUG
#define NDEBUG
#endif
#include <ATen/Context.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "fused/torch_error.h"

namespace {

namespace prof = torch::profiler::impl;

// The user ranges open on this thread, innermost last (`pipeline_trace_range_end` closes it).
thread_local std::vector<std::unique_ptr<at::RecordFunction>> ranges;

std::set<prof::ActivityType> activities() {
  std::set<prof::ActivityType> kinds{prof::ActivityType::CPU};
  // CUDA's kernels and runtime calls through CUPTI, where there is a CUDA device.
  if (at::hasCUDA()) {
    kinds.insert(prof::ActivityType::CUDA);
  }
  return kinds;
}

} // namespace

// Starts torch's profiler on this thread (and the threads its autograd engine hands work to):
// 0, or 1 with the reason in `error`.
extern "C" int pipeline_trace_start(char *error, size_t error_len) {
  try {
    prof::ProfilerConfig config(prof::ProfilerState::KINETO);
    auto kinds = activities();
    torch::autograd::profiler::prepareProfiler(config, kinds);
    torch::autograd::profiler::enableProfiler(config, kinds);
    return 0;
  } catch (const std::exception &e) {
    return pipeline_report_error(e, error, error_len);
  }
}

// Stops the profiler and saves what it recorded to `path` as a Chrome trace (JSON): 0, or 1
// with the reason in `error`.
extern "C" int pipeline_trace_stop(const char *path, char *error, size_t error_len) {
  try {
    auto result = torch::autograd::profiler::disableProfiler();
    if (!result) {
      throw std::runtime_error("torch's profiler was not running");
    }
    result->save(path);
    return 0;
  } catch (const std::exception &e) {
    return pipeline_report_error(e, error, error_len);
  }
}

// Opens a user range named `name` on this thread (a `record_function` block in Python): in
// the trace, a span over the operators called until `pipeline_trace_range_end`.
extern "C" void pipeline_trace_range_begin(const char *name) {
  auto record = std::make_unique<at::RecordFunction>(at::RecordScope::USER_SCOPE);
  if (record->isActive()) {
    record->before(std::string_view(name));
  }
  ranges.push_back(std::move(record));
}

// Closes the innermost range this thread opened; nothing when none is open.
extern "C" void pipeline_trace_range_end() {
  if (ranges.empty()) {
    return;
  }
  ranges.back()->end();
  ranges.pop_back();
}
