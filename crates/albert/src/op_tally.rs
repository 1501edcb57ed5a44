//! Which of libtorch's operators a stretch of work calls, how often, from where and on what:
//! torch's RecordFunction observers (what `torch.profiler` records), counted by call path.
//!
//! Why: on a GPU nearly every operator that is not a view is a kernel, and the 2026-11-30
//! profile of a `base` 32 × 512 bf16 step spent ~7 of its 35 ms in copies (113), float32 adds
//! (258) and bf16 casts (147) whose callers a kernel profile does not name. `op_tally.cpp`
//! counts each operator under the path of the operators it was called inside, outermost first
//! (`aten::to > aten::_to_copy > aten::copy_`), with the type and shape of its first tensor
//! (`[BFloat16 32x512x768]`, `strided` when not contiguous): the shape says which tensor of the
//! model it is, the path which call made it. It runs on libtorch's CPU as on CUDA (the ops a
//! step calls are the same, bar the attention kernel torch picks), so a copy can be found and
//! removed without a GPU. `pipeline bench train --count-ops` reports one step's.
//!
//! `benches/op_count.sh` counts the same calls by name from outside the process (uprobes), for
//! ours against transformers' Python; this one needs neither root nor a second program, and
//! says where a call came from.
//!
//! The observers are the process's: one count runs at a time. The flex build has no libtorch to
//! ask.

use std::collections::BTreeMap;

use thiserror::Error;

/// Why operators could not be counted.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum OpCountError {
    /// A build without the `tch` feature.
    #[error("counting libtorch's operators needs the `tch` build (scripts/build-tch.sh)")]
    NeedsTch,
    /// A count already runs.
    #[error("libtorch's operators are already being counted")]
    AlreadyCounting,
}

/// `f`'s result and the operators it called: each call path with its calls, in path order.
/// Every thread's calls count while `f` runs (torch's autograd engine runs a CUDA backward on
/// a thread of its own).
pub fn count_ops<T>(f: impl FnOnce() -> T) -> Result<(T, BTreeMap<String, u64>), OpCountError> {
    imp::start(false)?;
    let result = f();
    Ok((result, imp::stop()))
}

/// [`count_ops`] of the calling thread's calls alone: what other threads run meanwhile (tests
/// side by side in one process) is not counted. On libtorch's CPU a backward runs on the
/// thread that asked for it, so a forward and backward there are counted whole.
pub fn count_ops_here<T>(
    f: impl FnOnce() -> T,
) -> Result<(T, BTreeMap<String, u64>), OpCountError> {
    imp::start(true)?;
    let result = f();
    Ok((result, imp::stop()))
}

/// Whether [`count_ops`] can count here: its error when it cannot, before any work is done.
pub fn available() -> Result<(), OpCountError> {
    count_ops_here(|| ()).map(|_| ())
}

/// Holds the counting tests of this crate one at a time: one count runs at once in a process.
#[cfg(all(test, feature = "tch"))]
pub(crate) fn one_count_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static COUNTING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    COUNTING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The `n` paths called most, most first (ties in path order), as `(path, calls)`.
pub fn most_called(counts: &BTreeMap<String, u64>, n: usize) -> Vec<(&str, u64)> {
    let mut rows: Vec<(&str, u64)> = counts.iter().map(|(k, &v)| (k.as_str(), v)).collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    rows.truncate(n);
    rows
}

#[cfg(feature = "tch")]
mod imp {
    use std::collections::BTreeMap;
    use std::ffi::{CStr, c_char, c_int, c_long, c_void};

    use super::OpCountError;

    type OpSink = extern "C" fn(sink: *mut c_void, key: *const c_char, calls: c_long);

    unsafe extern "C" {
        fn pipeline_op_count_start(this_thread_only: c_int) -> c_int;
        fn pipeline_op_count_stop(each: OpSink, sink: *mut c_void) -> c_int;
    }

    pub(super) fn start(this_thread_only: bool) -> Result<(), OpCountError> {
        // SAFETY: a plain int argument; the C++ side guards its state with a mutex.
        match unsafe { pipeline_op_count_start(c_int::from(this_thread_only)) } {
            0 => Ok(()),
            _ => Err(OpCountError::AlreadyCounting),
        }
    }

    extern "C" fn collect(sink: *mut c_void, key: *const c_char, calls: c_long) {
        // SAFETY: `sink` is the `&mut BTreeMap` `stop` passed, alive for the call; `key` is a
        // NUL-terminated string the C++ side owns for the duration of this call.
        let (counts, key) = unsafe {
            (
                &mut *sink.cast::<BTreeMap<String, u64>>(),
                CStr::from_ptr(key),
            )
        };
        counts.insert(key.to_string_lossy().into_owned(), calls.max(0) as u64);
    }

    pub(super) fn stop() -> BTreeMap<String, u64> {
        let mut counts = BTreeMap::new();
        let sink = std::ptr::from_mut(&mut counts).cast::<c_void>();
        // SAFETY: `collect` matches `OpSink`, and `sink` outlives the call (it returns after
        // handing over every key).
        unsafe { pipeline_op_count_stop(collect, sink) };
        counts
    }
}

#[cfg(not(feature = "tch"))]
mod imp {
    use std::collections::BTreeMap;

    use super::OpCountError;

    pub(super) fn start(_this_thread_only: bool) -> Result<(), OpCountError> {
        Err(OpCountError::NeedsTch)
    }

    pub(super) fn stop() -> BTreeMap<String, u64> {
        BTreeMap::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn most_called_puts_the_commonest_first_and_breaks_ties_by_path() {
        let counts: BTreeMap<String, u64> = [("b", 3), ("a", 3), ("c", 9), ("d", 1)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        assert_eq!(most_called(&counts, 3), [("c", 9), ("a", 3), ("b", 3)]);
    }

    #[cfg(not(feature = "tch"))]
    #[test]
    fn the_flex_build_says_it_needs_tch() {
        assert_eq!(available(), Err(OpCountError::NeedsTch));
    }

    #[cfg(feature = "tch")]
    mod tch_build {
        use super::super::*;
        use tch::{Device, Kind, Tensor};

        #[test]
        fn each_call_is_counted_under_its_path_with_its_first_tensor() {
            let _one = one_count_at_a_time();
            let x = Tensor::ones([2, 3], (Kind::Float, Device::Cpu));
            let ((), counts) = count_ops_here(|| {
                let _ = x.to_kind(Kind::BFloat16);
                let _ = &x + &x;
                let _ = &x + &x;
                let _ = x.tr().contiguous();
            })
            .unwrap();
            assert_eq!(counts.get("aten::add [Float 2x3]"), Some(&2), "{counts:#?}");
            let cast = counts
                .keys()
                .find(|k| k.starts_with("aten::to") && k.contains("> aten::copy_ [BFloat16 2x3]"));
            assert!(cast.is_some(), "{counts:#?}");
            // A copy's first tensor is its destination; the strided source is its caller's.
            let copy = "aten::contiguous > aten::clone > aten::copy_ [Float 3x2]";
            assert_eq!(counts.get(copy), Some(&1), "{counts:#?}");
            let strided = counts.get("aten::contiguous [Float 3x2 strided]");
            assert_eq!(strided, Some(&1), "{counts:#?}");
            // Nothing is counted once the count is over, and a second count starts afresh.
            let _ = &x + &x;
            let ((), again) = count_ops_here(|| {
                let _ = &x * &x;
            })
            .unwrap();
            assert_eq!(again.keys().collect::<Vec<_>>(), ["aten::mul [Float 2x3]"]);
        }

        /// A whole-process count takes another thread's calls in (a CUDA backward's engine
        /// thread); a count of this thread's leaves them out.
        #[test]
        fn a_count_of_this_thread_leaves_other_threads_out() {
            let _one = one_count_at_a_time();
            let on_another_thread = || {
                std::thread::spawn(|| {
                    let y = Tensor::ones([5, 7], (Kind::Float, Device::Cpu));
                    let _ = &y - &y;
                })
                .join()
                .expect("the other thread");
            };
            let sub = "aten::sub [Float 5x7]";
            let ((), every) = count_ops(on_another_thread).unwrap();
            assert_eq!(every.get(sub), Some(&1), "{every:#?}");
            let ((), here) = count_ops_here(on_another_thread).unwrap();
            assert_eq!(here.get(sub), None, "{here:#?}");
            assert_eq!(
                count_ops_here(|| count_ops(|| ())).unwrap().0,
                Err(OpCountError::AlreadyCounting)
            );
        }
    }
}
