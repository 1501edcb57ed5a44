//! A TF checkpoint (with albert_zh's `albert_config*.json` and `vocab.txt` beside it) → our
//! model directory: `config.json`, `model.safetensors`, `vocab.txt`, `tokenizer.json`.
//!
//! Everything is checked before anything is written (every tensor's presence and shape against
//! the config, the vocabulary's size), then written into a temporary directory beside `out`
//! and renamed into place: an error leaves `out` untouched.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use pipeline_tfckpt::{Checkpoint, skip_reason};
use rayon::prelude::*;
use safetensors::Dtype;
use safetensors::tensor::TensorView;
use serde::Serialize;
use serde_json::json;

use super::error::{Result, ShapeMismatch, TfError};
use super::{Detected, Mapped, Part, detect, mapping};
use crate::config::AlbertConfig;

/// What [`import`] did.
#[derive(Debug, Clone, Serialize)]
pub struct ImportReport {
    /// The checkpoint prefix read.
    pub checkpoint: PathBuf,
    /// The config file used.
    pub config_file: PathBuf,
    /// The vocabulary used.
    pub vocab_file: PathBuf,
    /// `google` or `albert_zh`.
    pub layout: &'static str,
    /// The sharing detected.
    pub share_type: &'static str,
    /// Tensors read.
    pub tensors_read: usize,
    /// Their bytes in the checkpoint.
    pub bytes_read: u64,
    /// Optimizer slots and bookkeeping, with the rule that skipped each.
    pub skipped: Vec<(String, &'static str)>,
    /// Weights that are not part of the pretraining model (a fine-tuned classifier's
    /// `output_weights`, …): left out, listed.
    pub ignored: Vec<String>,
    /// Wall time of the import.
    pub seconds: f64,
}

/// The config file beside a checkpoint: `albert_config.json`, else the one
/// `albert_config*.json` (albert_zh names them `albert_config_tiny.json`, …), else
/// `bert_config.json`.
pub fn find_config(dir: &Path) -> Result<PathBuf> {
    let exact = dir.join("albert_config.json");
    if exact.is_file() {
        return Ok(exact);
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|source| TfError::ListDir {
            dir: dir.to_path_buf(),
            source,
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("albert_config") && n.ends_with(".json"))
        })
        .collect();
    found.sort();
    match found.len() {
        1 => Ok(found.remove(0)),
        0 if dir.join("bert_config.json").is_file() => Ok(dir.join("bert_config.json")),
        0 => Err(TfError::NoConfig {
            dir: dir.to_path_buf(),
        }),
        count => Err(TfError::ManyConfigs {
            dir: dir.to_path_buf(),
            count,
        }),
    }
}

/// What `pipeline model info` shows about a TF checkpoint; needs only the index.
#[derive(Debug, Clone)]
pub struct TfInfo {
    /// The checkpoint's index.
    pub checkpoint: Checkpoint,
    /// What its names and shapes say.
    pub detected: Detected,
    /// The config beside it with the detected layout and sharing, when there is one.
    pub config: Option<AlbertConfig>,
    /// That config's file.
    pub config_file: Option<PathBuf>,
    /// Optimizer slots and bookkeeping, with the rule that skips each.
    pub skipped: Vec<(String, &'static str)>,
    /// Data shards the index names that are not there.
    pub missing_shards: Vec<PathBuf>,
}

/// Reads the index and the config beside it (or `config`) and detects the architecture.
pub fn inspect(path: &Path, config: Option<&Path>) -> Result<TfInfo> {
    let checkpoint = Checkpoint::open_index(path)?;
    let detected = detect(&checkpoint)?;
    let dir = checkpoint
        .prefix
        .parent()
        .unwrap_or(Path::new("."))
        .to_path_buf();
    let config_file = match config {
        Some(c) => Some(c.to_path_buf()),
        None => find_config(&dir).ok(),
    };
    let config = match &config_file {
        Some(f) => Some(checked_config(f, &checkpoint, &detected)?),
        None => None,
    };
    let skipped = checkpoint
        .names()
        .filter_map(|n| skip_reason(n).map(|r| (n.to_string(), r)))
        .collect();
    let missing_shards = checkpoint
        .shards()
        .iter()
        .filter(|p| !p.is_file())
        .cloned()
        .collect();
    Ok(TfInfo {
        checkpoint,
        detected,
        config,
        config_file,
        skipped,
        missing_shards,
    })
}

/// The config file's model with the detected layout, every tensor's shape checked against it.
fn checked_config(file: &Path, ckpt: &Checkpoint, d: &Detected) -> Result<AlbertConfig> {
    let mut config = AlbertConfig::from_file(file)?;
    let index = || ckpt.index_path.clone();
    if config.share_type != d.share_type {
        return Err(TfError::ShareMismatch {
            config: file.to_path_buf(),
            config_share: config.share_type,
            index: index(),
            blocks: d.blocks,
            detected: d.share_type,
        });
    }
    if d.share_type != crate::ShareType::All && d.blocks != config.num_hidden_layers {
        return Err(TfError::LayerMismatch {
            config: file.to_path_buf(),
            layers: config.num_hidden_layers,
            index: index(),
            blocks: d.blocks,
        });
    }
    config.layout = d.layout;
    for t in mapping(&config) {
        let (_, shape) = ckpt.spec(&t.tf).map_err(|e| {
            if ckpt.raw_entry(&t.tf).is_none() {
                TfError::MissingTensor {
                    index: index(),
                    tensor: t.tf.clone(),
                    layout: d.layout.name(),
                }
            } else {
                TfError::Checkpoint(e)
            }
        })?;
        if shape != t.shape {
            let c = &config;
            return Err(TfError::ShapeMismatch(Box::new(ShapeMismatch {
                index: index(),
                tensor: t.tf,
                shape,
                config: file.to_path_buf(),
                expected: t.shape,
                sizes: [
                    c.vocab_size,
                    c.embedding_size,
                    c.hidden_size,
                    c.intermediate_size,
                    c.max_position_embeddings,
                ],
            })));
        }
    }
    Ok(config)
}

/// Reads the TF checkpoint at `from` and writes our model directory `out` (which must not
/// exist, or be empty). `config` and `vocab` default to the files beside the checkpoint.
pub fn import(
    from: &Path,
    config: Option<&Path>,
    vocab: Option<&Path>,
    out: &Path,
) -> Result<ImportReport> {
    let start = Instant::now();
    super::check_free(out, "the imported model")?;
    let ckpt = Checkpoint::open(from)?;
    let detected = detect(&ckpt)?;
    let dir = ckpt.prefix.parent().unwrap_or(Path::new(".")).to_path_buf();
    let config_file = match config {
        Some(c) => c.to_path_buf(),
        None => find_config(&dir)?,
    };
    let config = checked_config(&config_file, &ckpt, &detected)?;
    let vocab_file = vocab
        .map(Path::to_path_buf)
        .unwrap_or_else(|| dir.join("vocab.txt"));
    let tokens = checked_vocab(&vocab_file, &config_file, &config, &detected)?;
    let map = mapping(&config);
    let (skipped, ignored) = unmapped(&ckpt, &map);
    let tensors = read_tensors(&ckpt, &map)?;
    let bytes_read: u64 = map
        .iter()
        .map(|t| ckpt.raw_entry(&t.tf).map_or(0, |e| e.size as u64))
        .sum();

    let tmp = super::staging_dir(out, ".import-")?;
    write_safetensors(&tensors, &tmp.path().join("model.safetensors"))?;
    let mut json = config.to_hf_json("AlbertForPreTraining");
    if let Some(obj) = json.as_object_mut() {
        obj.insert(
            "pipeline_source".into(),
            json!({
                "format": "tensorflow",
                "layout": detected.layout.name(),
                "checkpoint": ckpt.prefix,
            }),
        );
    }
    std::fs::write(
        tmp.path().join("config.json"),
        serde_json::to_string_pretty(&json)? + "\n",
    )?;
    super::copy(&vocab_file, tmp.path().join("vocab.txt"))?;
    // albert_zh's and Google's Chinese models lower-case (do_lower_case=True).
    let tok = pipeline_text::hf::wordpiece_tokenizer(&tokens, true)?;
    pipeline_text::hf::write_tokenizer_json(&tok, &tmp.path().join("tokenizer.json"))?;
    super::clear_out(out)?;
    super::publish(tmp, out, "the imported model")?;
    Ok(ImportReport {
        checkpoint: ckpt.prefix.clone(),
        config_file,
        vocab_file,
        layout: detected.layout.name(),
        share_type: detected.share_type.name(),
        tensors_read: map.len(),
        bytes_read,
        skipped,
        ignored,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// A tensor as transformers names it: name, shape, values.
type HfTensor = (String, Vec<usize>, Vec<f32>);

/// The vocabulary, which must have the config's `vocab_size` tokens.
fn checked_vocab(
    vocab_file: &Path,
    config_file: &Path,
    config: &AlbertConfig,
    detected: &Detected,
) -> Result<pipeline_text::vocab::Vocab> {
    let tokens =
        pipeline_text::vocab::Vocab::load(vocab_file).map_err(|error| TfError::Vocab { error })?;
    if tokens.len() != config.vocab_size {
        return Err(TfError::VocabSize {
            vocab: vocab_file.to_path_buf(),
            tokens: tokens.len(),
            config: config_file.to_path_buf(),
            vocab_size: config.vocab_size,
            rows: detected.vocab_size,
        });
    }
    Ok(tokens)
}

/// The checkpoint's tensors that `map` does not take: optimiser slots and bookkeeping (with
/// the rule that skips each), and weights outside the pretraining model.
fn unmapped(ckpt: &Checkpoint, map: &[Mapped]) -> (Vec<(String, &'static str)>, Vec<String>) {
    let mapped: HashSet<&str> = map.iter().map(|t| t.tf.as_str()).collect();
    let mut skipped = Vec::new();
    let mut ignored = Vec::new();
    for n in ckpt.names() {
        if let Some(r) = skip_reason(n) {
            skipped.push((n.to_string(), r));
        } else if !mapped.contains(n) {
            ignored.push(n.to_string());
        }
    }
    (skipped, ignored)
}

/// Every tensor of `map`, read (checksums verified), kernels transposed, as transformers names
/// them. One tensor per core at a time: checksums and transposes are CPU work that one core
/// cannot keep up with at page-cache speed (an 888 MB checkpoint: 1.3 s of CPU on one core).
fn read_tensors(ckpt: &Checkpoint, map: &[Mapped]) -> Result<Vec<HfTensor>> {
    map.par_iter()
        .map(|t| {
            let (shape, values) = ckpt.read_f32(&t.tf)?;
            let (shape, values) = if t.transpose {
                let (rows, cols) = (shape[0], shape[1]);
                (
                    vec![cols, rows],
                    pipeline_tfckpt::transpose(&values, rows, cols),
                )
            } else {
                (shape, values)
            };
            Ok((t.hf.clone(), shape, values))
        })
        .collect()
}

/// `model.safetensors` of little-endian f32 tensors, readable by transformers.
fn write_safetensors(tensors: &[HfTensor], weights: &Path) -> Result<()> {
    let views = tensors
        .iter()
        .map(|(name, shape, values)| {
            let view = TensorView::new(Dtype::F32, shape.clone(), bytemuck::cast_slice(values))
                .map_err(|e| TfError::TensorView {
                    tensor: name.clone(),
                    message: e.to_string(),
                })?;
            Ok((name.clone(), view))
        })
        .collect::<Result<Vec<_>>>()?;
    // transformers refuses safetensors files whose metadata lacks format = pt.
    let meta = HashMap::from([("format".to_string(), "pt".to_string())]);
    safetensors::tensor::serialize_to_file(views, Some(meta), weights).map_err(|e| {
        TfError::WriteWeights {
            path: weights.to_path_buf(),
            message: e.to_string(),
        }
    })?;
    // safetensors creates the file readable by its owner only; a model directory is shared
    // like the other files beside it.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(weights, std::fs::Permissions::from_mode(0o644)).map_err(
            |source| TfError::Permissions {
                path: weights.to_path_buf(),
                source,
            },
        )?;
    }
    Ok(())
}

/// A model directory to load: the path itself for a Hugging Face directory, or a TF
/// checkpoint imported into a temporary directory (removed when this is dropped).
pub struct ModelDir {
    path: PathBuf,
    _tmp: Option<tempfile::TempDir>,
    /// The import's report, when the path was a TF checkpoint.
    pub imported: Option<ImportReport>,
}

impl ModelDir {
    /// The model directory at `path`, importing a TF checkpoint first.
    pub fn open(path: &Path) -> Result<ModelDir> {
        if !pipeline_tfckpt::is_checkpoint(path) {
            return Ok(ModelDir {
                path: path.to_path_buf(),
                _tmp: None,
                imported: None,
            });
        }
        let tmp = tempfile::Builder::new()
            .prefix("pipeline-tf-import-")
            .tempdir()
            .map_err(TfError::ImportTempDir)?;
        let dir = tmp.path().join("model");
        let report = import(path, None, None, &dir)?;
        Ok(ModelDir {
            path: dir,
            _tmp: Some(tmp),
            imported: Some(report),
        })
    }

    /// Where the model directory is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Which parts a transformers-named tensor set holds (for export).
pub(super) fn parts_present(names: &[String]) -> Vec<Part> {
    let mut parts = vec![Part::Backbone];
    if names.iter().any(|n| n == "predictions.bias") {
        parts.push(Part::MlmHead);
    }
    if names.iter().any(|n| n.starts_with("sop_classifier.")) {
        parts.push(Part::SopHead);
    }
    parts
}
