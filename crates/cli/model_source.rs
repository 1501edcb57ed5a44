//! Where a model comes from, for every command that loads one (`model`, `predict`, `serve`):
//! `--model DIR` or `--stage NAME` (the stage instance's latest artifact), and a TensorFlow 1
//! checkpoint opened as a model directory. A checkpoint's failures are the input's (a
//! missing, truncated or corrupt file, a config or vocabulary that disagrees with the
//! tensors): exit code 2, the file named.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::Args;
use pipeline_albert::tf::ModelDir;
use pipeline_engine::{UserError, inspect};

use crate::global::{Global, load};

/// Where a model comes from: a directory, or the latest artifact of a stage.
#[derive(Debug, Args)]
pub struct ModelSource {
    /// A model directory: config.json + model.safetensors (or pytorch_model.bin); or a
    /// TensorFlow checkpoint (its directory, prefix or .index) with albert_config.json and
    /// vocab.txt beside it.
    #[arg(long, value_name = "DIR", conflicts_with = "stage")]
    pub model: Option<PathBuf>,
    /// The latest artifact of this stage instance of pipeline.yaml (`pretrain@share_type=all`).
    #[arg(long, value_name = "NAME")]
    pub stage: Option<String>,
}

/// The model directory `--model DIR` or `--stage NAME` names.
pub fn model_dir(global: &Global, src: &ModelSource) -> Result<PathBuf> {
    match (&src.model, &src.stage) {
        (Some(dir), None) => Ok(dir.clone()),
        (None, Some(stage)) => {
            let p = load(global)?;
            let r = inspect::show(&p, stage)?;
            r.artifact.with_context(|| {
                format!("stage {stage} has no artifact yet: run `pipeline run {stage}` first")
            })
        }
        _ => bail!("give the model as --model DIR or --stage NAME (one of them)"),
    }
}

/// A TensorFlow checkpoint's failure (reading, importing or exporting one) as a mistake in
/// the input: exit code 2, with the whole cause chain in the message.
pub fn input_error(e: impl Into<anyhow::Error>) -> anyhow::Error {
    UserError::new(format!("{:#}", e.into())).into()
}

/// The model directory to load from `dir`: itself, or a TF checkpoint imported into a
/// temporary directory.
pub fn open_model_dir(dir: &Path) -> Result<ModelDir> {
    ModelDir::open(dir).map_err(input_error)
}
