//! A fine-tuned ALBERT written as an ONNX graph that onnxruntime runs (`pipeline model export
//! --to onnx`): `model.onnx` beside the directory's `config.json`, `vocab.txt` and
//! `tokenizer.json`, so that the exported directory is all a deployment needs.
//!
//! **Why natively.** The other way, transformers' exporter (`optimum-cli export onnx`) on our
//! transformers-format export, needs Python, torch and transformers at export time (gigabytes,
//! and a version of each that must understand the checkpoint), traces the model through
//! PyTorch (so a layout transformers lacks — albert_zh's embeddings, pre-LN, attention-only
//! sharing — cannot be exported at all), and writes its own tokenizer files. Writing the graph
//! here from the same modules `pipeline predict` runs ([`albert`], [`heads`]) needs nothing
//! but this binary, exports every model this tool fine-tunes, and keeps the tokenizer files the
//! model was trained with. The handful of ONNX protobuf messages are derived with prost from
//! `onnx.proto`'s field numbers ([`proto`]); no protoc, no generated code.
//!
//! **What that gives up.** The graph is written as the model computes, op by op: no graph
//! optimisation at export (fused attention, folded constants, fp16). onnxruntime applies its
//! own fusions when it loads the model (LayerNorm, GELU, MatMul+Add), and its offline
//! transformer optimiser or `quantize_dynamic` can be run on the file afterwards.
//!
//! The graph: inputs `input_ids`, `attention_mask`, `token_type_ids` (int64, dynamic `batch`
//! and `sequence` axes; `[batch, choices, sequence]` for multiple choice), opset
//! [`proto::OPSET`], the weights as initializers in the one file (no external data: a model
//! under 2 GB fits in it; a larger one is refused with [`ExportError::TooLarge`]).

pub mod albert;
pub mod graph;
pub mod heads;
pub mod proto;

use std::path::{Path, PathBuf};

use pipeline_albert::hf::{self, HfError};
use serde::Serialize;

pub use heads::{ARCHITECTURES, TensorSpec};

/// Why an export failed: the model directory's fault (named), the output's, or a bug.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The model directory: no config.json or weights, a config the weights do not fit...
    /// (the message names the file).
    #[error(transparent)]
    Model(#[from] HfError),
    /// config.json names no architecture the exporter writes.
    #[error(
        "{}: {}; the ONNX export takes a fine-tuned model, one of {} (a pretraining \
         checkpoint has no task head to export)",
        path.display(),
        if found.is_empty() { "no architecture is named (`architectures`)".to_string() }
        else { format!("architecture {found} has no ONNX export") },
        ARCHITECTURES.join(", ")
    )]
    Architecture {
        /// The config.json.
        path: PathBuf,
        /// What its `architectures` says (empty when it has none).
        found: String,
    },
    /// The output directory exists and has files in it.
    #[error("{} is not empty: give a new directory (or an empty one) for the ONNX model", .0.display())]
    NotEmpty(PathBuf),
    /// A file could not be written, copied or moved into place.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A weight could not be read back as f32 values.
    #[error("cannot read the weight {name}: {message}")]
    Tensor {
        /// The initializer it was for.
        name: String,
        /// burn's reason.
        message: String,
    },
    /// The model is over protobuf's 2 GB limit for one message.
    #[error(
        "the ONNX model would be {bytes} bytes, over the 2 GB a single ONNX file may hold \
         (a model this large needs external data, which this exporter does not write)"
    )]
    TooLarge {
        /// Its size.
        bytes: u64,
    },
    /// The graph is not well formed: a bug in the exporter.
    #[error("internal error, the exported graph is not well formed: {0}")]
    Graph(#[from] graph::GraphError),
}

/// The files a usable model directory keeps beside the graph (those the source has).
pub const COMPANION_FILES: &[&str] = &[
    "config.json",
    "vocab.txt",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
];

/// protobuf's limit on one message.
const MAX_MODEL_BYTES: u64 = (2 << 30) - 1;

/// What an export wrote.
#[derive(Debug, Clone, Serialize)]
pub struct Exported {
    /// The graph file (`out/model.onnx`).
    pub model: PathBuf,
    /// The head, as config.json's `architectures` names it.
    pub architecture: String,
    /// The ONNX operator set.
    pub opset: i64,
    /// The graph's inputs.
    pub inputs: Vec<TensorSpec>,
    /// The graph's outputs.
    pub outputs: Vec<TensorSpec>,
    /// Nodes in the graph.
    pub nodes: usize,
    /// Weight values written (shared blocks once).
    pub parameters: usize,
    /// The size of model.onnx.
    pub bytes: u64,
    /// The files copied beside it.
    pub copied: Vec<String>,
    /// The companion files the source directory lacks (the tokenizer, when it has none).
    pub missing: Vec<String>,
}

/// Exports the fine-tuned model in `model_dir` (config.json naming its head, and its weights)
/// to the new directory `out`: `model.onnx` and copies of [`COMPANION_FILES`]. `out` is written
/// whole or not at all (built beside it, then renamed into place).
pub fn export(model_dir: &Path, out: &Path) -> Result<Exported, ExportError> {
    check_free(out)?;
    let raw = hf::read_config_json(model_dir)?;
    let architecture = raw["architectures"][0].as_str().unwrap_or("").to_string();
    let (config, head) = heads::load(model_dir, &architecture)?;

    let mut g = graph::Graph::new();
    let signature = heads::emit(&mut g, &head, &config)?;
    let parameters = g.parameters();
    let doc = format!(
        "{architecture} exported by pipeline from {}",
        model_dir.display()
    );
    let graph = g.finish(&architecture, &doc)?;
    let nodes = graph.node.len();
    let bytes = proto::encode(&model(graph, &architecture));
    if bytes.len() as u64 > MAX_MODEL_BYTES {
        return Err(ExportError::TooLarge {
            bytes: bytes.len() as u64,
        });
    }

    let staging = staging_dir(out)?;
    let file = staging.path().join("model.onnx");
    std::fs::write(&file, &bytes).map_err(|source| ExportError::Io { path: file, source })?;
    let (copied, missing) = copy_companions(model_dir, staging.path())?;
    publish(staging, out)?;
    Ok(Exported {
        model: out.join("model.onnx"),
        architecture,
        opset: proto::OPSET,
        inputs: signature.inputs,
        outputs: signature.outputs,
        nodes,
        parameters,
        bytes: bytes.len() as u64,
        copied,
        missing,
    })
}

/// The model file around `graph`.
fn model(graph: proto::GraphProto, architecture: &str) -> proto::ModelProto {
    proto::ModelProto {
        ir_version: proto::IR_VERSION,
        producer_name: "pipeline".into(),
        producer_version: env!("CARGO_PKG_VERSION").into(),
        domain: String::new(),
        model_version: 1,
        doc_string: String::new(),
        graph: Some(graph),
        opset_import: vec![proto::OperatorSetIdProto {
            domain: String::new(),
            version: proto::OPSET,
        }],
        metadata_props: vec![proto::StringStringEntryProto {
            key: "architecture".into(),
            value: architecture.into(),
        }],
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ExportError + '_ {
    move |source| ExportError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// `out` must not exist, or be an empty directory.
fn check_free(out: &Path) -> Result<(), ExportError> {
    let occupied = out.exists()
        && std::fs::read_dir(out)
            .map(|mut d| d.next().is_some())
            .unwrap_or(true);
    if occupied {
        return Err(ExportError::NotEmpty(out.to_path_buf()));
    }
    Ok(())
}

/// A temporary directory beside `out` (same filesystem: publishing it is one rename).
fn staging_dir(out: &Path) -> Result<tempfile::TempDir, ExportError> {
    let parent = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(io(parent))?;
    tempfile::Builder::new()
        .prefix(".onnx-export-")
        .tempdir_in(parent)
        .map_err(io(parent))
}

/// Copies the companion files `from` has into `to`; returns those copied and those missing.
fn copy_companions(from: &Path, to: &Path) -> Result<(Vec<String>, Vec<String>), ExportError> {
    let (mut copied, mut missing) = (Vec::new(), Vec::new());
    for name in COMPANION_FILES {
        let src = from.join(name);
        if src.is_file() {
            std::fs::copy(&src, to.join(name)).map_err(io(&src))?;
            copied.push(name.to_string());
        } else if matches!(*name, "vocab.txt" | "tokenizer.json") {
            // The optional transformers files are not worth a note; the tokenizer is.
            missing.push(name.to_string());
        }
    }
    Ok((copied, missing))
}

/// Moves the finished staging directory to `out` (removing the empty `out` first).
fn publish(staging: tempfile::TempDir, out: &Path) -> Result<(), ExportError> {
    if out.exists() {
        std::fs::remove_dir(out).map_err(io(out))?;
    }
    let path = staging.keep();
    std::fs::rename(&path, out).map_err(|source| {
        let _ = std::fs::remove_dir_all(&path);
        ExportError::Io {
            path: out.to_path_buf(),
            source,
        }
    })
}

#[cfg(test)]
mod tests;
