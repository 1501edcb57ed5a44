//! A training step that runs out of memory, caught as `batch_size: auto`'s probe catches it,
//! leaves the process able to train: the failed step's memory is given back and the next steps
//! run, in a probe and on the caller's own thread.
//!
//! It needs a failed allocation that libtorch reports rather than the kernel's OOM killer: the
//! test caps this process's address space (`setrlimit(RLIMIT_AS)`, this test binary runs only
//! this test) a few GB above what it uses, on libtorch's CPU (`ALBERT_TEST_DEVICE=tch-cpu
//! scripts/build-tch.sh test -p stage-pretrain --test oom_recovery`). On flex a failed
//! allocation aborts the process, so there it skips with a note.
//!
//! Without the recovery in `pipeline_albert::memory` this failed both ways: a later step of 64
//! rows ran out of memory too (the failed step's graph kept 4.5 GB), and with that memory freed
//! the next step on the same thread crashed the process in torch's backward.

use burn::tensor::Device;
use pipeline_albert::device::{DeviceChoice, resolve};
use pipeline_albert::memory::unless_out_of_memory;
use pipeline_albert::parallel::DataParallel;
use pipeline_albert::{AlbertConfig, AlbertForPreTraining};
use pipeline_shards::rng::SplitMix64;
use pipeline_shards::synthetic;
use stage_pretrain::api::bench_optim;
use stage_pretrain::trainer::Trainer;

/// The process's virtual size and resident memory, in bytes.
fn memory() -> (u64, u64) {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("Linux's /proc");
    let pages: Vec<u64> = statm
        .split_whitespace()
        .take(2)
        .map(|p| p.parse().expect("a page count"))
        .collect();
    (pages[0] * 4096, pages[1] * 4096)
}

/// Caps this process's address space at `bytes`.
fn cap_address_space(bytes: u64) {
    let limit = libc::rlimit {
        rlim_cur: bytes,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: setrlimit reads the struct it is given and changes only this process's limit.
    let rc = unsafe { libc::setrlimit(libc::RLIMIT_AS, &limit) };
    assert_eq!(rc, 0, "setrlimit: {}", std::io::Error::last_os_error());
}

#[test]
fn a_step_that_ran_out_of_memory_leaves_the_process_able_to_train() {
    let name = std::env::var("ALBERT_TEST_DEVICE").unwrap_or_else(|_| "flex".into());
    let choice = DeviceChoice::parse(&name).expect("ALBERT_TEST_DEVICE names a device");
    let device: Device = resolve(choice).expect("the device exists").device;
    if !pipeline_albert::device::has_bf16(&device) {
        eprintln!(
            "skipped: a caught allocation failure needs libtorch (ALBERT_TEST_DEVICE=tch-cpu \
             scripts/build-tch.sh test -p stage-pretrain --test oom_recovery)"
        );
        return;
    }
    let mut c = AlbertConfig::named("tiny").expect("tiny");
    c.vocab_size = 1000;
    let ad = device.autodiff();
    ad.seed(3);
    let model = AlbertForPreTraining::new(&c, &ad);
    let step_of = |rows: usize| {
        let batch = synthetic::batch(c.vocab_size, rows, 128, 20, &mut SplitMix64::new(5));
        let mut trainer = Trainer::new(c.clone(), model.clone(), bench_optim(), ad.clone());
        trainer.parallel = DataParallel::new(1);
        move || {
            for step in 0..2 {
                let _ = trainer.step(step, std::slice::from_ref(&batch));
            }
        }
    };
    assert!(unless_out_of_memory(step_of(8)).is_some(), "8 rows fit");
    let (virtual_size, resident) = memory();
    // tiny at 128 tokens holds ~9 MB a row through a LAMB step: 2 GB more fits ~100 rows of
    // the 1,024 asked for.
    cap_address_space(virtual_size + (2 << 30));
    assert!(
        unless_out_of_memory(step_of(1024)).is_none(),
        "1,024 rows within 2 GB more"
    );
    let (_, after) = memory();
    assert!(
        after < resident + (512 << 20),
        "the failed step's memory is given back: {} MB resident before, {} MB after",
        resident >> 20,
        after >> 20
    );
    assert!(
        unless_out_of_memory(step_of(64)).is_some(),
        "64 rows fit after the failure"
    );
    // The caller's own thread never saw the failure, and trains on.
    step_of(16)();
}
