//! The options every subcommand takes (`--file`, `--set`, `--log-format`, `--quiet`) and what
//! they resolve to: the pipeline file loaded with this binary's stage kinds. A leaf module:
//! each command's module imports it and nothing imports a command back, so the commands stay
//! apart (`scripts/import_circles.py crates/cli`).

use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, ValueEnum};
use pipeline_engine::{Pipeline, Registry};

/// The global options, flattened into every subcommand's command line.
#[derive(Debug, Args)]
pub struct Global {
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

    /// Print only errors (and the `--json` output): a failed stage's block still goes to stderr.
    #[arg(short, long, global = true)]
    pub quiet: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Every stage kind this binary knows.
pub fn registry() -> Registry {
    let mut r = Registry::builtin();
    r.register(std::sync::Arc::new(stage_clean::CleanStage));
    r.register(std::sync::Arc::new(stage_vocab::VocabStage));
    r.register(std::sync::Arc::new(stage_mask::MaskStage));
    r.register(std::sync::Arc::new(stage_pretrain::PretrainStage));
    r.register(std::sync::Arc::new(stage_finetune::FinetuneStage));
    r.register(std::sync::Arc::new(stage_baseline::BaselineStage));
    r.register(std::sync::Arc::new(stage_report::ReportStage));
    r
}

/// The pipeline file `--file` names, with the `--set` overrides.
pub fn load(global: &Global) -> Result<Pipeline> {
    Ok(Pipeline::load(&global.file, &global.set, registry())?)
}

/// `value` as pretty JSON on stdout (what `--json` prints).
pub fn print_json(value: &impl serde::Serialize) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}
