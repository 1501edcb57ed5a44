//! How many times a stretch of work makes the host wait for a CUDA device: torch's sync debug
//! mode, counted.
//!
//! Why: a training step that waits for the device (a value read back, a copy from pageable
//! memory, an explicit synchronise) stops the host from queueing the next step while the device
//! still runs this one, and on a GPU that is where a step's fixed cost can hide. On a CPU the
//! reads can be counted (`benches/op_count.sh` counts `_local_scalar_dense`), but a copy's
//! synchronisation exists only on CUDA. torch flags every such call itself when its sync debug
//! mode is on (`torch.cuda.set_sync_debug_mode("warn")`); `cuda_sync.cpp` turns that mode on
//! and counts the warnings instead of printing them. `pipeline bench train --count-syncs` reports
//! the count a step.
//!
//! The mode is the process's, so one count runs at a time; c10's warning handler is the calling
//! thread's (`ThreadWarningHandler` in libc10), so only the syncs made on the thread that runs
//! the counted work are counted. One made on another thread (on CUDA, torch's autograd runs the
//! backward of the ops it differentiates on its device thread) is printed there as torch's
//! warning, "called a synchronizing CUDA operation", on stderr. On libtorch's CPU the count is
//! 0 (there is no device to wait for); the flex build has no libtorch to ask.

use thiserror::Error;

/// Why synchronisations could not be counted.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SyncCountError {
    /// A build without the `tch` feature.
    #[error("counting CUDA synchronisations needs the `tch` build (scripts/build-tch.sh)")]
    NeedsTch,
    /// libtorch's CUDA library is not loaded, so there is no sync debug mode to set.
    #[error(
        "libtorch's CUDA library (libc10_cuda) is not loaded: no sync debug mode to count with"
    )]
    NoCudaLibrary,
    /// A count already runs.
    #[error("CUDA synchronisations are already being counted")]
    AlreadyCounting,
}

/// Whether [`count_syncs`] can count here: its error when it cannot, before any work is done.
pub fn available() -> Result<(), SyncCountError> {
    count_syncs(|| ()).map(|_| ())
}

/// `f`'s result and how many synchronising CUDA calls it made (torch's sync debug mode, as
/// warnings counted and not printed); every other warning of libtorch's is printed as before.
pub fn count_syncs<T>(f: impl FnOnce() -> T) -> Result<(T, u64), SyncCountError> {
    let counting = Counting::start()?;
    let result = f();
    Ok((result, counting.finish()))
}

/// A count running: stopped by [`Counting::finish`], or on the way out of a panic, so that the
/// mode and c10's handler never stay changed.
struct Counting {
    finished: bool,
}

impl Counting {
    fn start() -> Result<Self, SyncCountError> {
        imp::start()?;
        Ok(Counting { finished: false })
    }

    fn finish(mut self) -> u64 {
        self.finished = true;
        imp::stop()
    }
}

impl Drop for Counting {
    fn drop(&mut self) {
        if !self.finished {
            imp::stop();
        }
    }
}

#[cfg(feature = "tch")]
mod imp {
    use std::ffi::{c_int, c_long};

    use super::SyncCountError;

    unsafe extern "C" {
        fn pipeline_sync_count_start() -> c_int;
        fn pipeline_sync_count_stop() -> c_long;
    }

    pub(super) fn start() -> Result<(), SyncCountError> {
        // SAFETY: no arguments; the C side checks its own state.
        match unsafe { pipeline_sync_count_start() } {
            0 => Ok(()),
            1 => Err(SyncCountError::NoCudaLibrary),
            _ => Err(SyncCountError::AlreadyCounting),
        }
    }

    pub(super) fn stop() -> u64 {
        // SAFETY: as above; -1 (no count running) cannot happen after a `start` that succeeded.
        u64::try_from(unsafe { pipeline_sync_count_stop() }).unwrap_or(0)
    }
}

#[cfg(not(feature = "tch"))]
mod imp {
    use super::SyncCountError;

    pub(super) fn start() -> Result<(), SyncCountError> {
        Err(SyncCountError::NeedsTch)
    }

    pub(super) fn stop() -> u64 {
        0
    }
}

#[cfg(test)]
mod tests {
    #[cfg(not(feature = "tch"))]
    #[test]
    fn the_flex_build_says_it_needs_tch() {
        use super::*;
        assert_eq!(count_syncs(|| ()), Err(SyncCountError::NeedsTch));
        assert_eq!(available(), Err(SyncCountError::NeedsTch));
    }

    #[cfg(feature = "tch")]
    mod tch_build {
        use std::ffi::CString;
        use std::sync::Mutex;

        use std::ffi::{c_char, c_int};

        use super::super::*;

        // cuda_sync.cpp's hooks for tests.
        unsafe extern "C" {
            fn pipeline_sync_debug_mode() -> c_int;
            fn pipeline_sync_count_test_torch_sync() -> c_int;
            fn pipeline_sync_count_test_warn(message: *const c_char);
        }

        /// The mode and the handler are the process's: one test at a time.
        static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

        /// A warning issued through c10, as libtorch's code issues it.
        fn warn(message: &str) {
            let message = CString::new(message).expect("no NUL");
            // SAFETY: a NUL-terminated string that outlives the call.
            unsafe { pipeline_sync_count_test_warn(message.as_ptr()) }
        }

        /// What libtorch's CUDA code calls before it synchronises (its own check of the mode);
        /// false without libc10_cuda (a CPU-only libtorch).
        fn torch_sync() -> bool {
            // SAFETY: no arguments.
            unsafe { pipeline_sync_count_test_torch_sync() == 0 }
        }

        /// Whether this libtorch has CUDA's library (a CPU-only one has not: the tests skip).
        fn has_cuda_library() -> bool {
            // Calling it with the mode off does nothing.
            let has = torch_sync();
            if !has {
                eprintln!("skipped: this libtorch has no CUDA library (a CPU-only build)");
            }
            has
        }

        fn mode() -> i32 {
            // SAFETY: no arguments.
            unsafe { pipeline_sync_debug_mode() }
        }

        #[test]
        fn sync_warnings_are_counted_and_the_mode_is_on_only_while_counting() {
            let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
            if !has_cuda_library() {
                assert_eq!(count_syncs(|| ()), Err(SyncCountError::NoCudaLibrary));
                assert_eq!(available(), Err(SyncCountError::NoCudaLibrary));
                return;
            }
            assert_eq!(available(), Ok(()));
            // -1 here: the mode's symbol was not found where torch keeps it.
            assert_eq!(mode(), 0, "disabled before");
            torch_sync(); // not counted, nor printed: the mode is off
            let (seen, n) = count_syncs(|| {
                torch_sync();
                warn("something else entirely");
                torch_sync();
                mode()
            })
            .expect("a count");
            assert_eq!(
                (seen, n),
                (1, 2),
                "warn mode inside; two syncs, the other passed on"
            );
            assert_eq!(mode(), 0, "disabled after");
            let ((), after) = count_syncs(|| ()).expect("a count");
            assert_eq!(after, 0, "each count starts at 0");
        }

        #[test]
        fn a_sync_on_another_thread_is_not_counted() {
            let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
            if !has_cuda_library() {
                return;
            }
            let ((), n) = count_syncs(|| {
                std::thread::spawn(torch_sync).join().expect("the thread");
            })
            .expect("a count");
            assert_eq!(n, 0, "c10's handler is the calling thread's");
        }

        #[test]
        fn a_panic_inside_stops_the_count() {
            let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
            if !has_cuda_library() {
                return;
            }
            let caught = std::panic::catch_unwind(|| count_syncs(|| panic!("inside")));
            assert!(caught.is_err());
            assert_eq!(mode(), 0, "disabled again");
            assert!(count_syncs(|| ()).is_ok(), "a new count can start");
        }

        #[test]
        fn cpu_work_makes_no_sync_and_counts_do_not_nest() {
            let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
            if !has_cuda_library() {
                return;
            }
            let (nested, n) = count_syncs(|| {
                let x = tch::Tensor::from_slice(&[1.0f32, 2.0, 3.0]);
                let total = (&x * &x).sum(tch::Kind::Float).double_value(&[]);
                (count_syncs(|| ()), total)
            })
            .expect("a count");
            assert_eq!(nested, (Err(SyncCountError::AlreadyCounting), 14.0));
            assert_eq!(n, 0, "libtorch's CPU has no device to wait for");
        }
    }
}
