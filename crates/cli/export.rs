//! `pipeline model export`: a model directory in another format — a TensorFlow 1 checkpoint
//! (`--to tf`, [`crate::tf`]) or an ONNX graph (`--to onnx`).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Result, bail};
use clap::Args;

use crate::args::ModelSource;
use crate::global::Global;

/// `pipeline model export`'s arguments.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  pipeline model export --to tf --model models/albert_tiny_zh --out albert_tiny_zh_tf")]
pub struct ExportArgs {
    /// The format to write: tf (a TensorFlow 1 checkpoint in the layout the model came from,
    /// with albert_config.json and vocab.txt) or onnx.
    #[arg(long, value_parser = ["tf", "onnx"])]
    pub to: String,
    #[command(flatten)]
    pub source: ModelSource,
    /// The new directory (must not exist, or be empty).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    #[arg(long)]
    pub json: bool,
}

/// Writes the model in the format asked for.
pub fn export(global: &Global, args: &ExportArgs) -> Result<ExitCode> {
    match args.to.as_str() {
        "tf" => crate::tf::export(global, &args.source, &args.out, args.json),
        other => bail!("export to {other} is not built yet"),
    }
}
