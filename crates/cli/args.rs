//! The command line, as clap parses it: the global options and the top-level commands. A
//! command's own arguments (a struct or a subcommand enum) sit beside its code in
//! `commands/<command>.rs`.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::commands::dag::DagFormat;
use crate::global::Global;

const EXAMPLES: &str = "\
Examples:
  pipeline run                      run every stage that is not up to date
  pipeline run mask --dry-run       what would run for `mask`, and why
  pipeline run --set data=../shared/datasets
  pipeline run train --set train.lr=2e-4 --force
  pipeline status                   fresh or stale, and why, for each stage
  pipeline show train --json        params, inputs, outputs, metrics of the latest run
  pipeline metrics                  every stage's metrics.json across runs
  pipeline exp show pretrain        the pretrain instances side by side: params that differ, metrics
  pipeline diff pretrain~1 pretrain what changed between pretrain's last two artifacts
  pipeline plot pretrain --metric eval_mlm_accuracy   the curves overlaid in eval_mlm_accuracy.svg

State lives in .pipeline/ beside pipeline.yaml; `pipeline gc` trims it.";

/// A declarative, cached experiment pipeline (built for ALBERT pretraining and fine-tuning).
///
/// `pipeline.yaml` declares stages, their deps, inputs and params. `pipeline run` executes
/// only the stages whose kind, code, params, inputs or deps' outputs changed since they last
/// ran; everything else is served from the artifact cache in `.pipeline/`.
#[derive(Debug, Parser)]
#[command(name = "pipeline", version, after_help = EXAMPLES, propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the targets (stage or instance names) and what they need; all stages if none.
    Run(crate::commands::run::RunArgs),
    /// Say for each stage whether it is fresh, and if not, why. Works during a run.
    Status {
        /// Only these stages and what they need.
        targets: Vec<String>,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: crate::remote::StatusRemote,
    },
    /// Print the DAG of stage instances.
    Dag {
        #[arg(long, value_enum, default_value_t = DagFormat::Text)]
        format: DagFormat,
        #[arg(long)]
        json: bool,
    },
    /// Params, inputs, outputs, metrics, timings and log path of an instance's latest run.
    Show {
        /// A stage name (if it has one instance) or an instance name (`train@lr=0.1`).
        stage: String,
        #[arg(long)]
        json: bool,
    },
    /// The history of `pipeline run`, newest first.
    Runs {
        #[arg(long, default_value_t = 20)]
        limit: usize,
        #[arg(long)]
        json: bool,
    },
    /// A table of each stage instance's metrics.json across runs.
    Metrics {
        /// Only these stages (or instances).
        stages: Vec<String>,
        /// Only the artifact each instance produced last.
        #[arg(long)]
        latest: bool,
        #[arg(long)]
        json: bool,
    },
    /// Compare experiments: `exp show`, a table of instances (or runs) with the params that
    /// differ and their metrics.
    #[command(subcommand)]
    Exp(crate::commands::exp::ExpCommand),
    /// What differs between two artifacts (two instances, or one at two runs): params, inputs,
    /// code version, deps, outputs, and metrics with their deltas.
    Diff(crate::commands::diff::DiffArgs),
    /// Overlay one metric's curves (from metrics.jsonl) of several instances in one SVG.
    Plot(crate::commands::plot::PlotArgs),
    /// Remove artifacts that nothing references (old fingerprints, removed stages); with
    /// --remote, trim the remote store instead.
    Gc {
        /// List what would be removed without removing it.
        #[arg(long)]
        dry_run: bool,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: crate::commands::gc::GcRemote,
    },
    /// Upload the targets' artifacts (all in the local store if none) to a remote store.
    Push(crate::remote::TransferArgs),
    /// Bring the targets' artifacts at the current fingerprints from a remote store.
    Pull(crate::remote::TransferArgs),
    /// Re-hash every artifact; move corrupt ones to .pipeline/quarantine (exit 1 if any).
    Verify {
        #[arg(long)]
        json: bool,
    },
    /// Look at a model directory (a pretrain or finetune artifact, or a Hugging Face ALBERT
    /// checkpoint): its outputs on given ids, or its config and size.
    #[command(subcommand)]
    Model(crate::commands::model::ModelCommand),
    /// Predict with a fine-tuned model (a `finetune` stage's artifact): classify a pair or a
    /// text, tag a text, answer a question from a context (span extraction), or pick a choice
    /// (C3); one example on the command line or a file of them.
    Predict(crate::commands::predict::PredictArgs),
    /// Serve a fine-tuned model over HTTP/JSON: the inputs and outputs of `predict --json`,
    /// requests batched together, every queue and size bounded, Prometheus metrics.
    Serve(crate::commands::serve::ServeArgs),
    /// Measure training or inference throughput on synthetic batches of a fixed shape
    /// (compare with `benches/hf_baseline.py`).
    #[command(subcommand)]
    Bench(crate::commands::bench::BenchCommand),
    /// Run one stage instance from the spec `pipeline run` wrote (what a cluster job runs);
    /// exit 0 when it succeeded. Not meant to be typed.
    #[command(name = "run-instance", hide = true)]
    RunInstance {
        #[arg(value_name = "SPEC.json")]
        spec: PathBuf,
    },
}
