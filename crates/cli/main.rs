//! The `pipeline` binary: parses the command line, calls the engine, prints. Exit codes:
//! 0 success, 1 a stage failed (or `verify` found corruption), 2 a mistake in the input.

mod args;
mod bench;
mod commands;
mod model;
mod predict;
mod report;

use std::process::ExitCode;

// Tensor temporaries are large and short-lived; glibc's malloc hands each one back to the
// kernel and page-faults it in again on the next step (15 % of a CPU inference pass).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::Parser;

fn main() -> ExitCode {
    let cli = args::Cli::parse();
    report::init_logging(cli.log_format);
    match commands::dispatch(&cli) {
        Ok(code) => code,
        Err(err) => {
            if let Some(user) = err.downcast_ref::<pipeline_engine::UserError>() {
                eprintln!("error: {user}");
                ExitCode::from(2)
            } else {
                eprintln!("error: {err:#}");
                ExitCode::from(1)
            }
        }
    }
}
