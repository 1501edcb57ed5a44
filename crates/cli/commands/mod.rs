//! One module per command of the `pipeline` binary, as cargo and uv lay theirs out: each
//! takes its parsed arguments, makes its call into the engine (or a stage's API) and prints
//! text or JSON. [`dispatch`] picks the module for the command line clap parsed.

use std::process::ExitCode;

use anyhow::Result;

use crate::args::{BenchCommand, Cli, Command, ModelCommand};

pub mod dag;
pub mod metrics;
pub mod run;
pub mod run_instance;
pub mod runs;
pub mod show;
pub mod status;

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
        Command::Exp(cmd) => crate::exp::dispatch(global, cmd),
        Command::Diff(args) => crate::diff::diff(global, args),
        Command::Plot(args) => crate::plot::plot(global, args),
        Command::Gc {
            dry_run,
            json,
            remote,
        } if remote.remote.is_some() => crate::remote::gc(global, remote, *dry_run, *json),
        Command::Gc { dry_run, json, .. } => crate::upkeep::gc(global, *dry_run, *json),
        Command::Push(args) => crate::remote::push(global, args),
        Command::Pull(args) => crate::remote::pull(global, args),
        Command::Verify { json } => crate::upkeep::verify(global, *json),
        Command::Model(ModelCommand::Forward {
            source,
            input,
            output,
            device,
        }) => crate::model::forward(global, source, input, output, device),
        Command::Model(ModelCommand::Info { source, json }) => {
            crate::model::info(global, source, *json)
        }
        Command::Model(ModelCommand::Import {
            from,
            out,
            config,
            vocab,
            json,
        }) => crate::tf::import(
            global,
            from,
            out,
            config.as_deref(),
            vocab.as_deref(),
            *json,
        ),
        Command::Model(ModelCommand::Export(args)) => crate::export::export(global, args),
        Command::Predict(args) => crate::predict::predict(global, args),
        Command::Serve(args) => crate::serve::serve(global, args),
        Command::Bench(BenchCommand::Train(args)) => crate::bench::train(args),
        Command::Bench(BenchCommand::Infer(args)) => crate::bench::infer(args),
        Command::Bench(BenchCommand::Finetune(args)) => crate::bench::finetune(args),
        Command::RunInstance { spec } => run_instance::run_instance(spec),
    }
}
