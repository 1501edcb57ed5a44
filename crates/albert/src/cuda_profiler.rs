//! A profiler's capture range around a stretch of work: the CUDA runtime's `cudaProfilerStart`
//! and `cudaProfilerStop`, as `torch.cuda.profiler.start()`/`stop()` call them.
//!
//! Why: a kernel profile of `pipeline bench train` under Nsight Compute held every kernel of
//! the process (the 2026-11-30 sitting's `kernels.txt`: building the model, a warm-up step and
//! the timed step, 1,306 launches), so no figure in it was a step's own. With the timed runs in
//! a range, `ncu --profile-from-start off` records those alone, and skips replaying the rest.
//!
//! Found by symbol in the CUDA runtime libtorch has loaded (`dlsym`), as `cuda_sync.cpp` finds
//! torch's sync debug mode: a build against a CPU-only libtorch, or the flex build, has no CUDA
//! runtime to link, and says so when asked for a range.

use std::ffi::{CStr, c_int};

use thiserror::Error;

/// Why a profiler range could not be opened.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ProfilerRangeError {
    /// No CUDA runtime in the process (the flex build, or a CPU-only libtorch).
    #[error("the CUDA runtime (libcudart) is not loaded: no profiler range to open")]
    NoRuntime,
    /// The runtime refused, e.g. without a GPU or its driver.
    #[error("cudaProfilerStart failed with CUDA error {0} (is there a GPU and its driver?)")]
    Start(i32),
}

/// `cudaError_t cudaProfilerStart(void)` and `cudaProfilerStop`.
type ProfilerCall = unsafe extern "C" fn() -> c_int;

/// The runtime's `name`, when the process has loaded it.
fn runtime_call(name: &CStr) -> Option<ProfilerCall> {
    // SAFETY: dlsym with a NUL-terminated name; the pointer it returns, when not null, is that
    // function of the CUDA runtime, whose C signature is `cudaError_t (void)`.
    unsafe {
        let found = libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr());
        (!found.is_null()).then(|| std::mem::transmute::<*mut libc::c_void, ProfilerCall>(found))
    }
}

/// Whether a range can be opened here at all: the runtime's two calls are loaded.
pub fn available() -> Result<(), ProfilerRangeError> {
    calls().map(|_| ())
}

fn calls() -> Result<(ProfilerCall, ProfilerCall), ProfilerRangeError> {
    let start = runtime_call(c"cudaProfilerStart");
    let stop = runtime_call(c"cudaProfilerStop");
    start.zip(stop).ok_or(ProfilerRangeError::NoRuntime)
}

/// `f` run inside a profiler range, which is closed again on the way out (a panic included).
pub fn in_range<T>(f: impl FnOnce() -> T) -> Result<T, ProfilerRangeError> {
    let (start, stop) = calls()?;
    // SAFETY: the runtime's own function, no arguments.
    let code = unsafe { start() };
    if code != 0 {
        return Err(ProfilerRangeError::Start(code));
    }
    let _close = Close(stop);
    Ok(f())
}

/// Closes the range when dropped.
struct Close(ProfilerCall);

impl Drop for Close {
    fn drop(&mut self) {
        // SAFETY: as for the start; a failed stop leaves nothing to undo.
        unsafe { (self.0)() };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without a CUDA runtime (the flex build's tests) no range opens; with one but no GPU (a
    /// CUDA libtorch on this machine: error 35, no driver) the runtime's refusal comes back as
    /// an error, and `f` is not run. On a machine with a GPU, `f` runs inside the range.
    #[test]
    fn a_range_opens_only_where_the_runtime_can_profile() {
        let mut ran = false;
        match in_range(|| ran = true) {
            Err(ProfilerRangeError::NoRuntime) => {
                assert_eq!(available(), Err(ProfilerRangeError::NoRuntime));
                assert!(!ran);
            }
            Err(ProfilerRangeError::Start(code)) => {
                assert_ne!(code, 0);
                assert_eq!(available(), Ok(()));
                assert!(!ran, "not run outside a range");
            }
            Ok(()) => assert!(ran),
        }
    }
}
