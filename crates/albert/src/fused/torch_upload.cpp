// A host tensor in pinned (page-locked) memory, asked for as torch wants it since 2.5: without
// a device. tch 0.22's `pin_memory` always passes one, and every such call prints torch's
// deprecation warning for `pin_memory(device)` and for the `is_pinned(device)` it makes; the
// H200 sitting of 2026-11-30 printed 3,960 of them. See torch_upload.rs.
#include <ATen/ATen.h>

#include "torch_error.h"

extern "C" int pipeline_pin_memory(const at::Tensor *host, at::Tensor **pinned, char *error,
                                   size_t error_len) {
  try {
    *pinned = new at::Tensor(host->pin_memory());
    return 0;
  } catch (const std::exception &e) {
    return pipeline_report_error(e, error, error_len);
  }
}
