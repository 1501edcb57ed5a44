//! Host data onto a CUDA device without making the host wait: staged in libtorch's CPU memory,
//! pinned, and copied without blocking (`crate::upload` says why). The pinning is torch's
//! `pin_memory()` called from C++ (`torch_upload.cpp`), not tch's: tch 0.22 always passes the
//! deprecated device argument, and torch then prints two deprecation warnings per upload (3,960
//! lines on the 2026-11-30 H200 sitting's stderr).

// burn marks its libtorch backend deprecated; it is the one that builds offline (device.rs).
#![allow(deprecated)]

use std::ffi::{c_char, c_int};

use burn::backend::libtorch::TchTensor;
use burn::tensor::Device;
use tch::{TchError, Tensor};

use super::torch_vjp::shim_error;

// `at::Tensor*` on both sides, as in torch_vjp.rs.
type CTensor = torch_sys::C_tensor;

unsafe extern "C" {
    fn pipeline_pin_memory(
        host: *const CTensor,
        pinned: *mut *mut CTensor,
        error: *mut c_char,
        error_len: usize,
    ) -> c_int;
}

/// Where `crate::upload` stages data for a libtorch `device`: libtorch's CPU (under autodiff
/// when `device` is, so that the tensor meets the model's under the same context) and the CUDA
/// index to copy to (`None` for libtorch's CPU itself); `None` for flex.
pub(super) fn staging(device: &Device) -> Option<(Device, Option<usize>)> {
    let plain = device.clone().without_autodiff();
    let host = Device::libtorch();
    let cuda = if plain == host {
        None
    } else {
        let count = usize::try_from(tch::Cuda::device_count()).unwrap_or(0);
        Some((0..count).find(|&i| plain == Device::libtorch_cuda(i))?)
    };
    let host = if plain == *device {
        host
    } else {
        host.autodiff()
    };
    Some((host, cuda))
}

/// `x` (host memory) on CUDA device `cuda` by a non-blocking copy from pinned memory, or as it
/// is for `None`. A copy from pageable memory, as `Tensor::to` makes it, synchronises the
/// stream: the host waits there until the device has run everything queued before it. From
/// pinned memory the copy is queued like a kernel, and torch's pinned-memory allocator keeps
/// the staging buffer until the copy has run. Where pinning fails (no CUDA driver for the host
/// allocator), the plain copy.
pub(super) fn upload(x: TchTensor, cuda: Option<usize>) -> TchTensor {
    let Some(index) = cuda else {
        return x;
    };
    let device = tch::Device::Cuda(index);
    let t = &x.tensor;
    let moved = pinned(t)
        .and_then(|pinned| pinned.f_to_device_(device, t.kind(), true, false))
        .unwrap_or_else(|_| t.to_device(device));
    TchTensor::new(moved)
}

/// `host` in pinned memory (a copy, or `host` itself when it is pinned already): torch's
/// `pin_memory()` without the device argument (`torch_upload.cpp`).
fn pinned(host: &Tensor) -> Result<Tensor, TchError> {
    let mut out: *mut CTensor = std::ptr::null_mut();
    let mut error = [0 as c_char; 1024];
    // SAFETY: `host` is a live tensor borrowed for the call, `out` a slot the C side fills with
    // a fresh `at::Tensor` only when it returns 0, and `error` the buffer of the length given.
    let failed =
        unsafe { pipeline_pin_memory(host.as_ptr(), &mut out, error.as_mut_ptr(), error.len()) };
    if failed != 0 {
        return Err(shim_error(&error));
    }
    // SAFETY: a fresh `at::Tensor` the C side allocated with `new`, owned here (tch frees it).
    Ok(unsafe { Tensor::from_ptr(out) })
}

#[cfg(test)]
mod tests {
    use tch::{Kind, Tensor};

    use super::pinned;

    /// Pinning needs a CUDA driver: with one, a pinned copy of the same values; without (the
    /// CI's machines), torch's error as a `TchError`, which `upload` answers with the plain copy.
    #[test]
    fn pinning_gives_the_same_values_or_torchs_error() {
        let host = Tensor::from_slice(&[1.5f32, -2.0, 3.25]).reshape([3, 1]);
        match pinned(&host) {
            Ok(p) => {
                assert!(p.is_pinned(tch::Device::Cpu), "pinned");
                assert_eq!(p.size(), [3, 1]);
                assert_eq!(p.kind(), Kind::Float);
                assert!(p.equal(&host), "the same values");
            }
            Err(e) => {
                let message = e.to_string();
                assert!(
                    message.contains("driver") || message.contains("CUDA"),
                    "{message}"
                );
            }
        }
    }
}
