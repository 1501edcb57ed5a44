//! What can go wrong reading or writing a Hugging Face model directory: [`HfError`], which
//! callers can match on. Every message names the directory or file and, where it can, says what
//! to do; a wrapped error is the `source` where the message used to be a context over it, so
//! `{:#}` through `anyhow` prints what it printed before this was typed.

use std::path::PathBuf;

use crate::config::ConfigError;
use crate::safetensors_header::SafetensorsError;

#[cfg(doc)]
use super::MAX_CONFIG_BYTES;

/// Why a model directory could not be read, loaded into a model, or written.
#[derive(Debug, thiserror::Error)]
pub enum HfError {
    /// The directory has neither `model.safetensors` nor `pytorch_model.bin`.
    #[error(
        "{} has no model.safetensors or pytorch_model.bin: a model directory holds config.json \
         and one of them (a pretrain or finetune artifact, or a Hugging Face checkpoint)",
        dir.display()
    )]
    NoWeights {
        /// The model directory.
        dir: PathBuf,
    },
    /// The directory has no `config.json`.
    #[error(
        "{} has no config.json: is it a model directory (a pretrain or finetune artifact, or a \
         Hugging Face ALBERT checkpoint)?",
        dir.display()
    )]
    NoConfig {
        /// The model directory.
        dir: PathBuf,
    },
    /// `config.json` could not be read: not a regular file (a FIFO, a device such as
    /// `/dev/zero`), larger than [`MAX_CONFIG_BYTES`] ("larger than 16 MiB, the limit for a
    /// model's config.json"), or an I/O error. The shared reader's message names the file.
    #[error(transparent)]
    ReadConfig(pipeline_bounded::ReadError),
    /// `config.json` is not JSON.
    #[error("{}:{}:{}: not valid JSON: {error}", path.display(), error.line(), error.column())]
    ConfigJson {
        /// The `config.json`.
        path: PathBuf,
        /// Why, with its line and column (part of the message, as it always was).
        error: serde_json::Error,
    },
    /// `config.json` is JSON but not a valid ALBERT config.
    #[error("{}: {error}", path.display())]
    Config {
        /// The `config.json`.
        path: PathBuf,
        /// Why (part of the message, as it always was).
        error: ConfigError,
    },
    /// The weights file is unreadable or does not fit `config.json` (checked before a model of
    /// that config is allocated).
    #[error(transparent)]
    Weights(#[from] SafetensorsError),
    /// A classifier's `config.json` says neither how many labels it has nor their names.
    #[error(
        "{}: config.json has no id2label or num_labels: is it a fine-tuned classifier? (a \
         pretrain artifact has no classifier head; fine-tune it first)",
        dir.display()
    )]
    NoNumLabels {
        /// The model directory.
        dir: PathBuf,
    },
    /// More classes than the weights file can hold a classifier for (checked before one is
    /// allocated).
    #[error(
        "{}/config.json: {labels} labels need a {labels} × {hidden} classifier, more than {} \
         holds ({bytes} bytes): is config.json's num_labels or id2label this model's?",
        dir.display(),
        file.display()
    )]
    TooManyLabels {
        /// The model directory.
        dir: PathBuf,
        /// The number of classes config.json gives.
        labels: usize,
        /// The model's hidden size.
        hidden: usize,
        /// The weights file.
        file: PathBuf,
        /// Its size.
        bytes: u64,
    },
    /// Tensors of the file whose shapes differ from the model's (as burn-store reports them
    /// after loading).
    #[error(
        "{}: {count} tensor(s) do not fit the model, e.g. {}. Is the checkpoint from another \
         config (vocabulary, sizes, share_type)?",
        file.display(),
        examples.join("; ")
    )]
    Unfit {
        /// The weights file.
        file: PathBuf,
        /// How many tensors do not fit.
        count: usize,
        /// burn-store's description of the first (at most 5) of them.
        examples: Vec<String>,
    },
    /// Tensors the model (with the heads this load requires) has but the file lacks.
    #[error(
        "{}: {count} tensor(s) missing, e.g. {}.{}",
        file.display(),
        examples.join(", "),
        missing_hint(*heads_only)
    )]
    Missing {
        /// The weights file.
        file: PathBuf,
        /// How many are missing.
        count: usize,
        /// Our module paths of the first (at most 5) of them.
        examples: Vec<String>,
        /// Whether only heads are missing, not the backbone (`albert.*`): a checkpoint for
        /// another task.
        heads_only: bool,
    },
    /// Tensors of the file that the model does not have.
    #[error(
        "{}: {count} tensor(s) the model does not have, e.g. {}. Is the checkpoint from another \
         config (share_type, number of layers) or architecture?",
        file.display(),
        examples.join(", ")
    )]
    Unexpected {
        /// The weights file.
        file: PathBuf,
        /// How many the model does not have.
        count: usize,
        /// Our module paths of the first (at most 5) of them.
        examples: Vec<String>,
    },
    /// burn-store refused the load on shape mismatches.
    #[error(
        "{}: {count} tensor(s) have other shapes than config.json says, e.g.{first}}}. Is the \
         checkpoint from another config (vocabulary, sizes, share_type)?",
        file.display()
    )]
    Shapes {
        /// The weights file.
        file: PathBuf,
        /// How many mismatches burn-store reported.
        count: usize,
        /// burn-store's description of the first, without its closing brace.
        first: String,
    },
    /// burn-store could not read the weights for any other reason.
    #[error("{}: cannot read the weights: {message}", file.display())]
    Load {
        /// The weights file.
        file: PathBuf,
        /// burn-store's reason.
        message: String,
    },
    /// A classifier was asked of a directory whose weights have no classifier head.
    #[error(
        "{} holds no classifier head: `pipeline predict` needs a fine-tuned model",
        dir.display()
    )]
    NoClassifierHead {
        /// The model directory.
        dir: PathBuf,
        /// The load's error, which names the missing or unfit classifier tensors.
        #[source]
        source: Box<HfError>,
    },
    /// The old weights file in the way could not be removed.
    #[error("cannot replace {}", path.display())]
    Replace {
        /// The weights file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// burn-store could not write the weights.
    #[error("cannot write {}: {message}", path.display())]
    WriteWeights {
        /// The weights file.
        path: PathBuf,
        /// burn-store's reason (part of the message, as it always was).
        message: String,
    },
    /// `config.json` could not be written.
    #[error("cannot write {}", path.display())]
    WriteConfig {
        /// The `config.json`.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The output directory could not be created (its message only, as it always was).
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// `config.json` could not be serialised.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

/// What [`HfError::Missing`] suggests: a checkpoint for another task when only heads are
/// missing, else not an ALBERT checkpoint of this config.
fn missing_hint(heads_only: bool) -> &'static str {
    if heads_only {
        " The backbone is there but not these heads: is it a checkpoint for another task (a \
         fine-tuned classifier, or a bare AlbertModel)?"
    } else {
        " Is it an ALBERT checkpoint with this config.json?"
    }
}
