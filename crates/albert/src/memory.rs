//! Running out of device memory as a value rather than the end of the process, for probes that
//! look for the largest batch a device holds (`batch_size: auto`).
//!
//! libtorch reports a failed allocation (CUDA's caching allocator: "CUDA out of memory"; its
//! CPU allocator: "not enough memory") as a C++ exception, which tch returns as an error and
//! burn's libtorch backend unwraps into a panic. [`unless_out_of_memory`] catches that panic
//! and only that one: any other panic carries on unwinding. PyTorch's own batch-size finders
//! (Lightning's `BatchSizeFinder`, Accelerate's `find_executable_batch_size`) carry on after
//! catching `torch.OutOfMemoryError`; here two more things are needed, both measured on
//! libtorch's CPU (tiny, seq 128, a step of 512 rows failing under `ulimit -v 9000000`):
//!
//! - **burn's autodiff graph keeps the failed step.** Its graph state is global, and the sweep
//!   that frees a graph's nodes runs at the end of a backward, which the panic skipped: the
//!   failed step's saved tensors stayed (resident memory 5.1 GB after the failure against
//!   0.5 GB before), so a step of 64 rows then failed too. After a failure, a one-element
//!   backward runs that sweep ([`sweep_autodiff_graphs`]): back to 0.53 GB, and 64, 320 and
//!   288 rows trained after it.
//! - **The failed thread cannot run torch's backward again.** With the memory swept, the next
//!   step on the thread whose backward had failed still crashed the process (SIGSEGV in
//!   torch's `Engine::compute_dependencies`), every time; on a thread of its own it did not
//!   (eight probes, two failures, no crash). PyTorch from Python recovers on the same thread,
//!   so it is something of tch's or burn's thread state after the unwind, not found. So `f` runs
//!   on a thread of its own that ends with it, and the caller's thread never sees the failure.
//!
//! `stages/pretrain/tests/oom_recovery.rs` checks both on libtorch's CPU, with a real failed
//! allocation under a capped address space. Whether CUDA needs the same has not been
//! measured; the same code runs there.
//!
//! On flex (burn's CPU backend) a failed allocation aborts the process, as Rust's allocator
//! does: nothing there can be caught, so probes run only on libtorch devices.

use std::cell::Cell;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Once;

/// How libtorch words a failed allocation: CUDA's caching allocator ("CUDA out of memory.
/// Tried to allocate …"), cuBLAS's workspace, and the CPU allocator (torch 2.11: "[enforce fail
/// at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you tried to
/// allocate … bytes", seen in this module's test; older releases said "not enough memory").
const OUT_OF_MEMORY: [&str; 4] = [
    "out of memory",
    "CUBLAS_STATUS_ALLOC_FAILED",
    "can't allocate memory",
    "not enough memory",
];

thread_local! {
    /// Whether this thread is inside [`unless_out_of_memory`]: its out-of-memory panics are
    /// expected, and the panic hook keeps them off stderr.
    static PROBING: Cell<bool> = const { Cell::new(false) };
}

/// `f()`, or `None` when it ran out of memory on a libtorch device. `f` runs on a thread of its
/// own, and after a failure burn's autodiff graphs are swept (the module docs say why). Any
/// other panic of `f` continues on the caller's thread (it is a bug or another failure, not an
/// answer to "does it fit").
pub fn unless_out_of_memory<T: Send>(f: impl FnOnce() -> T + Send) -> Option<T> {
    install_quiet_hook();
    let result = std::thread::scope(|s| {
        let probe = std::thread::Builder::new()
            .name("memory-probe".into())
            // The main thread's size: a training step's backward is as deep here as there.
            .stack_size(8 << 20)
            .spawn_scoped(s, || {
                PROBING.with(|p| p.set(true));
                panic::catch_unwind(AssertUnwindSafe(f))
            });
        match probe {
            Ok(handle) => handle.join().unwrap_or_else(Err),
            Err(e) => panic!("cannot start the thread of a memory probe: {e}"),
        }
    });
    match result {
        Ok(value) => Some(value),
        Err(payload) if is_out_of_memory(payload_text(payload.as_ref())) => {
            sweep_autodiff_graphs();
            None
        }
        Err(payload) => panic::resume_unwind(payload),
    }
}

/// Frees what burn's autodiff graphs hold for nodes nobody references any more: the sweep a
/// backward ends with, run by a backward of one element. The graph state is one for every
/// backend, so flex's backward sweeps libtorch's graphs too, without touching the device that
/// just ran out of memory.
fn sweep_autodiff_graphs() {
    use burn::tensor::{Device, Tensor};
    let x = Tensor::<1>::ones([1], &Device::flex().autodiff()).require_grad();
    let _ = x.clone().mul(x).sum().backward();
}

/// Whether a panic's message is libtorch's failed allocation.
pub fn is_out_of_memory(message: &str) -> bool {
    OUT_OF_MEMORY.iter().any(|m| message.contains(m))
}

/// The text of a panic payload (`panic!` with a literal or a formatted message).
fn payload_text(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("")
}

/// Wraps the process's panic hook once: a probing thread's out-of-memory panic prints nothing
/// (it is an answer, and the probe says what it found); every other panic goes to the hook
/// that was there before.
fn install_quiet_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            let expected =
                PROBING.with(Cell::get) && is_out_of_memory(payload_text(info.payload()));
            if !expected {
                previous(info);
            }
        }));
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_out_of_memory_panic_is_none_and_the_value_passes_through() {
        assert_eq!(unless_out_of_memory(|| 7), Some(7));
        let oom = unless_out_of_memory(|| -> u8 {
            panic!("Torch(\"CUDA out of memory. Tried to allocate 2.00 GiB\")")
        });
        assert_eq!(oom, None);
        let cpu = unless_out_of_memory(|| -> u8 {
            panic!("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes")
        });
        assert_eq!(cpu, None);
    }

    #[test]
    fn any_other_panic_carries_on() {
        let other = panic::catch_unwind(|| unless_out_of_memory(|| -> u8 { panic!("a bug") }));
        let payload = other.expect_err("the panic continues");
        assert_eq!(payload_text(payload.as_ref()), "a bug");
        assert!(!PROBING.with(Cell::get), "the flag is reset after a panic");
    }

    /// A real failed allocation on libtorch's CPU: far more than any machine has, refused at
    /// once by the allocator (nothing is touched).
    #[cfg(feature = "tch")]
    #[test]
    fn libtorch_refusing_an_allocation_is_caught() {
        use burn::tensor::Tensor;
        let device = crate::device::resolve(crate::device::DeviceChoice::TchCpu)
            .expect("a tch build has libtorch's CPU")
            .device;
        let huge = unless_out_of_memory(|| Tensor::<1>::zeros([1usize << 42], &device).dims());
        assert_eq!(huge, None);
        let small = unless_out_of_memory(|| Tensor::<1>::zeros([4], &device).dims());
        assert_eq!(small, Some([4]));
    }
}
