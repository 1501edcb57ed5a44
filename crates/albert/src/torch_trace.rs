//! A timeline of a stretch of work from torch's own profiler (Kineto, what `torch.profiler`
//! records), saved as a Chrome trace: each libtorch operator's start and end on the host and,
//! on CUDA, each kernel on the device and each runtime call that launched it, with user ranges
//! ([`range`]) around the parts of a step.
//!
//! Why: a step of `tiny` at 256 × 128 on the H200 takes 14–18 ms where its kernels need a few
//! (MFU 6–8 %), and its forward pass alone took 13–14 ms in float32, TF32 and bf16 alike. An
//! operator count ([`crate::op_tally`]) says what is called, a kernel profile (ncu) what the
//! device ran; neither says where the host's milliseconds go: in torch's operators, in the
//! launches, or between them (burn's autodiff and our own code). The trace has the host's
//! time line itself, so the gaps between operators are measured, not inferred. Nsight Systems,
//! which would give it from outside, is not on the lent GPU machine; torch's profiler is in
//! the libtorch the binary already loads. `benches/trace_summary.py` sums a trace by range.
//!
//! The flex build has no libtorch to ask. One trace runs at a time (torch's profiler is the
//! process's).

use std::path::Path;

use thiserror::Error;

/// Why a trace could not be taken.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TraceError {
    /// A build without the `tch` feature.
    #[error("torch's profiler needs the `tch` build (scripts/build-tch.sh)")]
    NeedsTch,
    /// torch's profiler refused to start or stop, or the trace could not be saved.
    #[error("torch's profiler: {0}")]
    Torch(String),
    /// The trace's file cannot be written (torch's profiler only logs that, and goes on).
    #[error("cannot write the trace to {path}: {reason}")]
    Write {
        /// The file asked for.
        path: String,
        /// What the system or the profiler said.
        reason: String,
    },
}

/// `f`'s result, with torch's profiler recording while it runs and its trace saved to `path`
/// (Chrome's JSON trace format) after it. Work `f` queues on a CUDA device and does not wait
/// for is recorded on the host but not on the device: `f` waits for what it wants seen.
pub fn trace<T>(path: &Path, f: impl FnOnce() -> T) -> Result<T, TraceError> {
    ready(path)?;
    imp::start()?;
    let result = f();
    imp::stop(path)?;
    match std::fs::metadata(path) {
        Ok(m) if m.len() > 0 => Ok(result),
        _ => Err(unwritable(
            path,
            "torch's profiler wrote nothing there".into(),
        )),
    }
}

/// Whether a [`trace`] to `path` can be taken: the `tch` build, and a file that can be
/// created there (it is, empty). Checked before any work: torch's profiler, when it cannot
/// open its file, logs a line and returns as if it had saved the trace.
pub fn ready(path: &Path) -> Result<(), TraceError> {
    available()?;
    std::fs::File::create(path).map_err(|e| unwritable(path, e.to_string()))?;
    Ok(())
}

fn unwritable(path: &Path, reason: String) -> TraceError {
    TraceError::Write {
        path: path.display().to_string(),
        reason,
    }
}

/// Whether [`trace`] can record here: its error when it cannot (the flex build), before any
/// work is done.
pub fn available() -> Result<(), TraceError> {
    if cfg!(feature = "tch") {
        Ok(())
    } else {
        Err(TraceError::NeedsTch)
    }
}

/// `f`'s result, inside a user range named `name` on this thread: in a trace ([`trace`]), a
/// span over what `f` calls, as Python's `torch.profiler.record_function(name)`. Outside a
/// trace (or in the flex build) it costs next to nothing.
pub fn range<T>(name: &str, f: impl FnOnce() -> T) -> T {
    imp::begin(name);
    let result = f();
    imp::end();
    result
}

#[cfg(feature = "tch")]
mod imp {
    use std::ffi::{CString, c_char, c_int};
    use std::path::Path;

    use super::TraceError;

    unsafe extern "C" {
        fn pipeline_trace_start(error: *mut c_char, error_len: usize) -> c_int;
        fn pipeline_trace_stop(path: *const c_char, error: *mut c_char, error_len: usize) -> c_int;
        fn pipeline_trace_range_begin(name: *const c_char);
        fn pipeline_trace_range_end();
    }

    /// The message of a shim that returned non-zero.
    fn torch_error(error: &[c_char]) -> TraceError {
        TraceError::Torch(crate::fused::shim_error(error).to_string())
    }

    pub(super) fn start() -> Result<(), TraceError> {
        let mut error = [0 as c_char; 1024];
        // SAFETY: `error` is a buffer of the length given, which the shim fills only on failure.
        match unsafe { pipeline_trace_start(error.as_mut_ptr(), error.len()) } {
            0 => Ok(()),
            _ => Err(torch_error(&error)),
        }
    }

    pub(super) fn stop(path: &Path) -> Result<(), TraceError> {
        let path = CString::new(path.to_string_lossy().as_bytes())
            .map_err(|_| TraceError::Torch(format!("{}: a NUL in the path", path.display())))?;
        let mut error = [0 as c_char; 1024];
        // SAFETY: a NUL-terminated path alive for the call, and an error buffer as in `start`.
        match unsafe { pipeline_trace_stop(path.as_ptr(), error.as_mut_ptr(), error.len()) } {
            0 => Ok(()),
            _ => Err(torch_error(&error)),
        }
    }

    pub(super) fn begin(name: &str) {
        // A name with a NUL in it is cut there: it only labels a span.
        let name = CString::new(name.split('\0').next().unwrap_or_default()).unwrap_or_default();
        // SAFETY: a NUL-terminated name, copied by torch before the call returns.
        unsafe { pipeline_trace_range_begin(name.as_ptr()) }
    }

    pub(super) fn end() {
        // SAFETY: no arguments; the shim does nothing when this thread opened no range.
        unsafe { pipeline_trace_range_end() }
    }
}

#[cfg(not(feature = "tch"))]
mod imp {
    use std::path::Path;

    use super::TraceError;

    pub(super) fn start() -> Result<(), TraceError> {
        Err(TraceError::NeedsTch)
    }

    pub(super) fn stop(_path: &Path) -> Result<(), TraceError> {
        Ok(())
    }

    pub(super) fn begin(_name: &str) {}

    pub(super) fn end() {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(not(feature = "tch"))]
    #[test]
    fn the_flex_build_says_it_needs_tch() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trace.json");
        assert_eq!(trace(&path, || ()), Err(TraceError::NeedsTch));
        assert!(!path.exists());
        // A range outside a trace is only the call.
        assert_eq!(range("step", || 7), 7);
    }

    #[cfg(feature = "tch")]
    #[test]
    fn a_trace_holds_the_operators_and_the_ranges_around_them() {
        use tch::{Device, Kind, Tensor};
        let _one = crate::op_tally::one_count_at_a_time();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trace.json");
        let x = Tensor::ones([4, 4], (Kind::Float, Device::Cpu));
        let sum = trace(&path, || {
            range("pipeline::forward", || {
                x.mm(&x).sum(Kind::Float).double_value(&[])
            })
        })
        .unwrap();
        assert_eq!(sum, 64.0);
        let text = std::fs::read_to_string(&path).unwrap();
        let json: serde_json::Value = serde_json::from_str(&text).expect("a JSON trace");
        let events = json["traceEvents"].as_array().expect("traceEvents");
        let named = |name: &str, cat: &str| {
            events
                .iter()
                .find(|e| e["name"] == name && e["cat"] == cat)
                .unwrap_or_else(|| panic!("no {cat} event {name} in {text}"))
        };
        let span = named("pipeline::forward", "user_annotation");
        let mm = named("aten::mm", "cpu_op");
        // The operator lies inside the range, on the same thread.
        let (t, d) = (
            |e: &serde_json::Value| e["ts"].as_f64().unwrap(),
            |e: &serde_json::Value| e["dur"].as_f64().unwrap(),
        );
        assert!(
            t(mm) >= t(span) && t(mm) + d(mm) <= t(span) + d(span),
            "{span} {mm}"
        );
        assert_eq!(span["tid"], mm["tid"]);
        // A second trace starts afresh: the first range is not in it.
        let again = dir.path().join("again.json");
        trace(&again, || drop(x.sum(Kind::Float))).unwrap();
        let text = std::fs::read_to_string(&again).unwrap();
        assert!(
            !text.contains("pipeline::forward") && text.contains("aten::sum"),
            "{text}"
        );
        // A file that cannot be made is an error before the work, naming it.
        let nowhere = dir.path().join("no_such_dir").join("trace.json");
        let mut ran = false;
        let err = trace(&nowhere, || ran = true).unwrap_err();
        assert!(matches!(err, TraceError::Write { .. }), "{err}");
        assert!(err.to_string().contains("no_such_dir"), "{err}");
        assert!(!ran, "the work ran");
    }
}
