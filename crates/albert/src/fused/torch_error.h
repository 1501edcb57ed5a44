// How the C++ shims (torch_vjp.cpp, torch_upload.cpp) hand a libtorch exception to Rust: its
// message copied, NUL-terminated, into the caller's buffer; the shim then returns 1.
#pragma once

#include <cstddef>
#include <cstring>
#include <exception>

inline int pipeline_report_error(const std::exception &e, char *error, size_t error_len) {
  if (error_len > 0) {
    std::strncpy(error, e.what(), error_len - 1);
    error[error_len - 1] = '\0';
  }
  return 1;
}
