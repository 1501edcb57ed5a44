//! `pipeline model export`: a model directory in another format — a TensorFlow 1 checkpoint
//! (`--to tf`) or an ONNX graph (`--to onnx`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Result, bail};
use clap::Args;
use pipeline_albert::tf;
use pipeline_engine::UserError;

use crate::global::Global;
use crate::model_source::{ModelSource, input_error, model_dir};

/// `pipeline model export`'s arguments.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  pipeline model export --to tf --model models/albert_tiny_zh --out albert_tiny_zh_tf
  pipeline model export --to onnx --stage finetune_chnsenticorp --out chnsenticorp_onnx")]
pub struct ExportArgs {
    /// The format to write: tf (a TensorFlow 1 checkpoint in the layout the model came from,
    /// with albert_config.json and vocab.txt) or onnx (a fine-tuned model as model.onnx for
    /// onnxruntime, opset 17, dynamic batch and sequence axes, with config.json, vocab.txt and
    /// tokenizer.json beside it; no Python needed).
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
        "tf" => tf_checkpoint(global, &args.source, &args.out, args.json),
        "onnx" => onnx(global, args),
        other => bail!("cannot export to {other}: the formats are tf and onnx"),
    }
}

/// `--to tf`: a TensorFlow 1 checkpoint in the layout the model came from; every failure is
/// the input's or the output's (exit code 2, the file named).
fn tf_checkpoint(
    global: &Global,
    src: &ModelSource,
    out: &Path,
    json_out: bool,
) -> Result<ExitCode> {
    let dir = model_dir(global, src)?;
    let r = tf::export(&dir, out).map_err(input_error)?;
    if json_out {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        println!(
            "wrote {} ({} layout, {} tensors, {:.1} MB) with albert_config.json and the \
             checkpoint file; TensorFlow reads it with tf.train.load_checkpoint(\"{}\")",
            r.prefix.display(),
            r.layout,
            r.tensors_written,
            r.bytes_written as f64 / 1e6,
            out.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `--to onnx`: every failure but an internal one is the input's or the output's (a model
/// directory without a task head, a missing file, a non-empty --out): exit code 2, the file
/// named.
fn onnx(global: &Global, args: &ExportArgs) -> Result<ExitCode> {
    let dir = model_dir(global, &args.source)?;
    let r = pipeline_onnx::export(&dir, &args.out).map_err(|e| match e {
        pipeline_onnx::ExportError::Graph(_) => anyhow::Error::from(e),
        e => UserError::new(e.to_string()).into(),
    })?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(ExitCode::SUCCESS);
    }
    let shapes = |specs: &[pipeline_onnx::TensorSpec]| {
        specs
            .iter()
            .map(|s| format!("{} {}", s.name, shape(&s.shape)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "wrote {} ({}, opset {}, {} nodes, {} parameters, {:.1} MB)",
        r.model.display(),
        r.architecture,
        r.opset,
        r.nodes,
        r.parameters,
        r.bytes as f64 / 1e6
    );
    println!("inputs:  {} (int64)", shapes(&r.inputs));
    println!("outputs: {} (float32)", shapes(&r.outputs));
    println!("copied:  {}", r.copied.join(", "));
    if !r.missing.is_empty() {
        println!(
            "note:    {} has no {}: the model runs on token ids, but the directory holds no \
             tokenizer for text",
            dir.display(),
            r.missing.join(" or ")
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `[batch, sequence, 3]`.
fn shape(dims: &[serde_json::Value]) -> String {
    let dims: Vec<String> = dims
        .iter()
        .map(|d| match d {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect();
    format!("[{}]", dims.join(", "))
}
