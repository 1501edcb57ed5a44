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
//! the count a step and where the first sync came from ([`SyncTally`]: its call stack, captured
//! inside torch's synchronising call).
//!
//! The mode is the process's, so one count runs at a time; c10's warning handler is the calling
//! thread's (`ThreadWarningHandler` in libc10), so only the syncs made on the thread that runs
//! the counted work are counted. One made on another thread (on CUDA, torch's autograd runs the
//! backward of the ops it differentiates on its device thread) is printed there as torch's
//! warning, "called a synchronizing CUDA operation", on stderr. On libtorch's CPU the count is
//! 0 (there is no device to wait for); the flex build has no libtorch to ask.

use std::backtrace::Backtrace;

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
    let mut tally = SyncTally::default();
    let result = tally.count(f)?;
    Ok((result, tally.total()))
}

/// Synchronisations counted over any number of stretches of work (a bench's timed steps, each
/// counted apart), and the call stack of the first of them all.
///
/// Why the stack: a count says that a step waits, not what waits. torch's warning names only
/// its own check (`c10::cuda::warn_or_error_on_sync`), and the op that called it can be any of
/// the step's hundreds; a GPU is lent for minutes, so the run that finds a sync has to say
/// where it is. Only the first is captured: a capture walks the stack (tens of microseconds),
/// and every later step of a bench makes the same calls.
#[derive(Debug, Default)]
pub struct SyncTally {
    total: u64,
    first_site: Option<String>,
}

impl SyncTally {
    /// Runs `f` with the syncs it makes counted into this tally; `f`'s result.
    pub fn count<T>(&mut self, f: impl FnOnce() -> T) -> Result<T, SyncCountError> {
        let counting = Counting::start(self.first_site.is_none())?;
        let result = f();
        let (n, site) = counting.finish();
        self.total += n;
        if self.first_site.is_none() {
            self.first_site = site.map(|bt| call_site(&bt.to_string()));
        }
        Ok(result)
    }

    /// The syncs counted so far.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The first sync's call stack, from torch's check of the mode outwards, one frame a line
    /// (`None` while none was counted).
    pub fn first_site(&self) -> Option<&str> {
        self.first_site.as_deref()
    }
}

/// The frames most frames of a site are cut to: from torch's check to the step's code and
/// beyond, without the runtime's start-up below `main`.
const SITE_FRAMES: usize = 40;

/// A captured stack as a site: the frames from torch's check of the mode
/// (`warn_or_error_on_sync`) outwards, dropping the capture's own frames above it and Rust's
/// standard library's (closure calls, thread starts: placed under `/rustc/`), at most
/// [`SITE_FRAMES`], each `symbol (file:line)` on a line of its own. C++ symbols stay mangled
/// (`c++filt` reads them).
fn call_site(backtrace: &str) -> String {
    let frames = frames(backtrace);
    let from = frames
        .iter()
        .position(|f| f.contains("warn_or_error_on_sync"))
        .unwrap_or(0);
    frames[from..]
        .iter()
        .filter(|f| !f.contains("(/rustc/"))
        .take(SITE_FRAMES)
        .cloned()
        .collect::<Vec<_>>()
        .join("\n")
}

/// The frames of `std::backtrace::Backtrace`'s text: each `N: symbol` line with the `at
/// file:line` line under it, if any, joined as `symbol (file:line)`.
fn frames(backtrace: &str) -> Vec<String> {
    let mut frames: Vec<String> = Vec::new();
    for line in backtrace.lines().map(str::trim) {
        if let Some(at) = line.strip_prefix("at ") {
            if let Some(last) = frames.last_mut() {
                last.push_str(&format!(" ({at})"));
            }
        } else if let Some((index, symbol)) = line.split_once(": ")
            && index.chars().all(|c| c.is_ascii_digit())
        {
            frames.push(symbol.to_owned());
        }
    }
    frames
}

/// A count running: stopped by [`Counting::finish`], or on the way out of a panic, so that the
/// mode and c10's handler never stay changed.
struct Counting {
    finished: bool,
}

impl Counting {
    /// With `capture`, the stack of the first sync is kept.
    fn start(capture: bool) -> Result<Self, SyncCountError> {
        imp::start(capture)?;
        Ok(Counting { finished: false })
    }

    /// The count and the first sync's stack, if one was captured.
    fn finish(mut self) -> (u64, Option<Backtrace>) {
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
    use std::backtrace::Backtrace;
    use std::ffi::{c_int, c_long};
    use std::sync::Mutex;

    use super::SyncCountError;

    unsafe extern "C" {
        fn pipeline_sync_count_start(on_sync: Option<extern "C" fn()>) -> c_int;
        fn pipeline_sync_count_stop() -> c_long;
    }

    /// The first sync's stack of the count running (one at a time: the mode is the process's).
    static FIRST: Mutex<Option<Backtrace>> = Mutex::new(None);

    /// Called by the C side at each sync, inside torch's synchronising call: the stack there,
    /// kept when it is the count's first. Captured, not resolved (symbols are looked up when
    /// the site is printed, once).
    extern "C" fn on_sync() {
        let mut first = FIRST.lock().unwrap_or_else(|e| e.into_inner());
        if first.is_none() {
            *first = Some(Backtrace::force_capture());
        }
    }

    pub(super) fn start(capture: bool) -> Result<(), SyncCountError> {
        let hook: Option<extern "C" fn()> = if capture { Some(on_sync) } else { None };
        // SAFETY: the hook, when given, is a plain function that lives as long as the program;
        // the C side checks its own state.
        match unsafe { pipeline_sync_count_start(hook) } {
            0 => Ok(()),
            1 => Err(SyncCountError::NoCudaLibrary),
            _ => Err(SyncCountError::AlreadyCounting),
        }
    }

    pub(super) fn stop() -> (u64, Option<Backtrace>) {
        // SAFETY: as above; -1 (no count running) cannot happen after a `start` that succeeded.
        let n = u64::try_from(unsafe { pipeline_sync_count_stop() }).unwrap_or(0);
        let first = FIRST.lock().unwrap_or_else(|e| e.into_inner()).take();
        (n, first)
    }
}

#[cfg(not(feature = "tch"))]
mod imp {
    use std::backtrace::Backtrace;

    use super::SyncCountError;

    pub(super) fn start(_capture: bool) -> Result<(), SyncCountError> {
        Err(SyncCountError::NeedsTch)
    }

    pub(super) fn stop() -> (u64, Option<Backtrace>) {
        (0, None)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_site_starts_at_torchs_check_and_puts_each_frame_with_its_place() {
        use super::call_site;
        let captured = "   0: std::backtrace::Backtrace::force_capture
             at /rustc/library/std/src/backtrace.rs:312:9
   1: pipeline_albert::cuda_sync::imp::on_sync
   2: _ZN3c104cuda21warn_or_error_on_syncEv
   3: at::native::copy_
             at aten/src/ATen/native/Copy.cpp:10:1
   4: core::ops::function::FnOnce::call_once
             at /rustc/5980761/library/core/src/ops/function.rs:250:5
   5: main";
        assert_eq!(
            call_site(captured),
            "_ZN3c104cuda21warn_or_error_on_syncEv\n\
             at::native::copy_ (aten/src/ATen/native/Copy.cpp:10:1)\nmain"
        );
        // Without torch's check among them (another path to the hook): every frame.
        let other = "   0: a\n             at x.rs:1\n  12: b";
        assert_eq!(call_site(other), "a (x.rs:1)\nb");
        let deep: String = (0..100).map(|i| format!("  {i}: f{i}\n")).collect();
        assert_eq!(call_site(&deep).lines().count(), super::SITE_FRAMES);
    }

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

        // Each keeps a frame of its own: with the call in tail position a release build jumps
        // to it, and the stack then skips the caller (this test failed so under
        // `--release`). `black_box` after the call keeps it out of tail position.
        #[inline(never)]
        fn first_caller() {
            torch_sync();
            std::hint::black_box(());
        }

        #[inline(never)]
        fn second_caller() {
            torch_sync();
            std::hint::black_box(());
        }

        #[test]
        fn the_first_syncs_stack_is_kept_from_torchs_check_to_its_caller() {
            let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
            if !has_cuda_library() {
                return;
            }
            let mut tally = SyncTally::default();
            tally.count(|| ()).expect("a count");
            assert_eq!(tally.first_site(), None, "no sync, no site");
            tally.count(first_caller).expect("a count");
            tally.count(second_caller).expect("a count");
            assert_eq!(tally.total(), 2);
            let site = tally.first_site().expect("the first sync's site");
            let top = site.lines().next().unwrap_or_default();
            assert!(top.contains("warn_or_error_on_sync"), "{site}");
            assert!(site.contains("first_caller"), "{site}");
            assert!(!site.contains("second_caller"), "only the first: {site}");
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
