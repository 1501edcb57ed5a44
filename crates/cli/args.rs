//! The command line, as clap parses it.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

const EXAMPLES: &str = "\
Examples:
  pipeline run                      run every stage that is not up to date
  pipeline run mask --dry-run       what would run for `mask`, and why
  pipeline run --set data=../shared/datasets
  pipeline run train --set train.lr=2e-4 --force
  pipeline status                   fresh or stale, and why, for each stage
  pipeline show train --json        params, inputs, outputs, metrics of the latest run
  pipeline metrics                  every stage's metrics.json across runs

State lives in .pipeline/ beside pipeline.yaml; `pipeline gc` trims it.";

/// A declarative, cached experiment pipeline (built for ALBERT pretraining and fine-tuning).
///
/// `pipeline.yaml` declares stages, their deps, inputs and params. `pipeline run` executes
/// only the stages whose kind, code, params, inputs or deps' outputs changed since they last
/// ran; everything else is served from the artifact cache in `.pipeline/`.
#[derive(Debug, Parser)]
#[command(name = "pipeline", version, after_help = EXAMPLES, propagate_version = true)]
pub struct Cli {
    /// The pipeline file; its directory is the workspace root.
    #[arg(
        short = 'f',
        long = "file",
        global = true,
        default_value = "pipeline.yaml",
        value_name = "FILE"
    )]
    pub file: PathBuf,

    /// Override a var (`NAME=VALUE`) or a stage parameter (`STAGE.PARAM=VALUE`); repeatable.
    /// VALUE is read as YAML: `2e-4` is a number, `[all,ffn]` a list.
    #[arg(long = "set", global = true, value_name = "NAME=VALUE")]
    pub set: Vec<String>,

    /// Log format on stderr (filter with RUST_LOG, e.g. RUST_LOG=info).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Print only errors (and the `--json` output).
    #[arg(short, long, global = true)]
    pub quiet: bool,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the targets (stage or instance names) and what they need; all stages if none.
    Run(RunArgs),
    /// Say for each stage whether it is fresh, and if not, why. Works during a run.
    Status {
        /// Only these stages and what they need.
        targets: Vec<String>,
        #[arg(long)]
        json: bool,
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
    /// Remove artifacts that nothing references (old fingerprints, removed stages).
    Gc {
        /// List what would be removed without removing it.
        #[arg(long)]
        dry_run: bool,
        #[arg(long)]
        json: bool,
    },
    /// Re-hash every artifact; move corrupt ones to .pipeline/quarantine (exit 1 if any).
    Verify {
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Stage or instance names; their deps run first. None: every stage.
    pub targets: Vec<String>,
    /// Re-run the targets (every selected stage if no target is named) even if cached.
    #[arg(long)]
    pub force: bool,
    /// Say what would run and why; run nothing.
    #[arg(long, short = 'n')]
    pub dry_run: bool,
    /// How many stages may run at once (default: the number of cores).
    #[arg(long, short = 'j', value_name = "N")]
    pub jobs: Option<usize>,
    /// GPU tokens: stages with `resources: {gpu: 1}` hold one while they run.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub gpus: u32,
    /// Stop starting stages after the first failure (running ones finish).
    #[arg(long)]
    pub fail_fast: bool,
    /// Print one JSON object with every stage's outcome on stdout.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum DagFormat {
    Text,
    Dot,
    Mermaid,
}
