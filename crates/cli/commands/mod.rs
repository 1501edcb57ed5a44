//! One module per command of the `pipeline` binary, as cargo and uv lay theirs out: each
//! takes its parsed arguments, makes its call into the engine (or a stage's API) and prints
//! text or JSON. [`dispatch`] picks the module for the command line clap parsed.

use std::process::ExitCode;

use anyhow::Result;

use crate::args::{Cli, Command};

pub mod bench;
pub mod dag;
pub mod diff;
pub mod exp;
pub mod gc;
pub mod metrics;
pub mod model;
pub mod plot;
pub mod predict;
pub mod pull;
pub mod push;
pub mod run;
pub mod run_instance;
pub mod runs;
pub mod serve;
pub mod show;
pub mod status;
pub mod verify;

/// Runs the command `cli` holds; its exit code, or the error `main` prints (exit 2 for a
/// mistake in the input, 1 otherwise).
pub fn dispatch(cli: &Cli) -> Result<ExitCode> {
    let global = &cli.global;
    match &cli.command {
        Command::Run(args) => run::run(global, args),
        Command::Status {
            targets,
            json,
            remote,
        } => status::status(global, targets, *json, remote),
        Command::Dag { format, json } => dag::dag(global, *format, *json),
        Command::Show { stage, json } => show::show(global, stage, *json),
        Command::Runs { limit, json } => runs::runs(global, *limit, *json),
        Command::Metrics {
            stages,
            latest,
            json,
        } => metrics::metrics(global, stages, *latest, *json),
        Command::Exp(cmd) => exp::dispatch(global, cmd),
        Command::Diff(args) => diff::diff(global, args),
        Command::Plot(args) => plot::plot(global, args),
        Command::Gc {
            dry_run,
            json,
            remote,
        } => gc::gc(global, *dry_run, *json, remote),
        Command::Push(args) => push::push(global, args),
        Command::Pull(args) => pull::pull(global, args),
        Command::Verify { json } => verify::verify(global, *json),
        Command::Model(cmd) => model::model(global, cmd),
        Command::Predict(args) => predict::predict(global, args),
        Command::Serve(args) => serve::serve(global, args),
        Command::Bench(cmd) => bench::bench(cmd),
        Command::RunInstance { spec } => run_instance::run_instance(spec),
    }
}
