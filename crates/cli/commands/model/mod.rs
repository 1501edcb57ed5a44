//! `pipeline model forward|info|import|export`: a model directory (a pretrain or finetune
//! artifact, a Hugging Face ALBERT checkpoint, a TensorFlow 1 checkpoint) looked at, run,
//! imported or written in another format from outside the pipeline; one module per
//! subcommand.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Subcommand;

use crate::global::Global;
use crate::model_source::ModelSource;

pub mod export;
pub mod forward;
pub mod import;
pub mod info;

#[derive(Debug, Subcommand)]
pub enum ModelCommand {
    /// Run AlbertForPreTraining on token ids: IN.json has `input_ids` (and optionally
    /// `token_type_ids`, `attention_mask`) as lists of lists of ints; OUT.json gets
    /// `prediction_logits` (batch × seq × vocab), `sop_logits` (batch × 2),
    /// `last_hidden_state` and `pooler_output`, as transformers names them.
    Forward {
        #[command(flatten)]
        source: ModelSource,
        #[arg(long, value_name = "IN.json")]
        input: PathBuf,
        #[arg(long, value_name = "OUT.json")]
        output: PathBuf,
        /// auto, cpu, flex, tch-cpu or cuda:N.
        #[arg(long, default_value = "cpu")]
        device: String,
    },
    /// The config, parameter count and size of a model.
    Info {
        #[command(flatten)]
        source: ModelSource,
        #[arg(long)]
        json: bool,
    },
    /// Import a TensorFlow 1 checkpoint (google-research/albert's or brightmart/albert_zh's,
    /// with albert_config*.json and vocab.txt beside it, as they ship) into a model directory:
    /// config.json, model.safetensors, vocab.txt, tokenizer.json. No TensorFlow needed.
    #[command(after_help = "Examples:
  pipeline model import --from albert_tiny_zh/ --out models/albert_tiny_zh
  pipeline model import --from ckpt/model.ckpt-125000 --config albert_config.json --out models/mine")]
    Import {
        /// The checkpoint: a directory with a `checkpoint` file, a prefix
        /// (…/model.ckpt-125000) or its .index file.
        #[arg(long, value_name = "CKPT")]
        from: PathBuf,
        /// The new model directory (must not exist, or be empty).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// The model config (default: albert_config*.json beside the checkpoint).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// The vocabulary (default: vocab.txt beside the checkpoint).
        #[arg(long, value_name = "FILE")]
        vocab: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// Write a model directory in another format: a TensorFlow 1 checkpoint (`--to tf`) or an
    /// ONNX graph that onnxruntime runs (`--to onnx`).
    Export(export::ExportArgs),
}

/// Runs the `model` subcommand `cmd` holds.
pub fn model(global: &Global, cmd: &ModelCommand) -> Result<ExitCode> {
    match cmd {
        ModelCommand::Forward {
            source,
            input,
            output,
            device,
        } => forward::forward(global, source, input, output, device),
        ModelCommand::Info { source, json } => info::info(global, source, *json),
        ModelCommand::Import {
            from,
            out,
            config,
            vocab,
            json,
        } => import::import(
            global,
            from,
            out,
            config.as_deref(),
            vocab.as_deref(),
            *json,
        ),
        ModelCommand::Export(args) => export::export(global, args),
    }
}
