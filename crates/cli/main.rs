//! The `pipeline` binary: parses the command line, calls the engine, prints. Exit codes:
//! 0 success, 1 a stage failed (or `verify` found corruption), 2 a mistake in the input.

mod args;
mod commands;
mod console;
mod global;
mod model_source;
mod remote;
mod sanitize;
mod table;

use std::process::ExitCode;

// Tensor temporaries are large and short-lived; glibc's malloc hands each one back to the
// kernel and page-faults it in again on the next step (15 % of a CPU inference pass). The
// `override` feature of libmimalloc-sys (Cargo.toml) makes mimalloc libtorch's malloc too.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::Parser;

/// mimalloc's `purge_delay` option (its index in `mi_option_t`, mimalloc v3).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Keeps freed memory mapped instead of returning it to the kernel after mimalloc's default
/// 10 ms: a training step frees and re-allocates the same ~1 GB of activations every second or
/// so, and each return made the next step fault the pages in and zero them again (29 % of a
/// CPU training step's time was the kernel clearing pages; measured with perf, issue 12). The
/// process keeps its peak memory until it exits, which is what a training run needs anyway.
fn keep_freed_memory() {
    // SAFETY: sets one of mimalloc's global options before any thread allocates much; mimalloc
    // documents options as settable at run time.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
}

fn main() -> ExitCode {
    keep_freed_memory();
    let cli = args::Cli::parse();
    console::init_logging(cli.global.log_format);
    match commands::dispatch(&cli) {
        Ok(code) => code,
        Err(err) => {
            // The message may quote a file (a metric name in a "did you mean", a remote's
            // manifest): escaped and bounded like everything else that came from one; each
            // text of the chain once.
            if let Some(user) = pipeline_engine::error::user_error(&err) {
                eprintln!("error: {}", sanitize::message(&user.to_string()));
                ExitCode::from(2)
            } else {
                let text = pipeline_engine::error::anyhow_text(&err);
                eprintln!("error: {}", sanitize::message(&text));
                ExitCode::from(1)
            }
        }
    }
}
