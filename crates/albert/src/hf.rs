//! Hugging Face checkpoints in and out: a directory with `config.json` and `model.safetensors`
//! (or `pytorch_model.bin`), read and written with burn-store.
//!
//! Our module paths differ from transformers' in three places, which the key rules below map
//! both ways: transformers nests every layer in `albert_layer_groups.{g}.albert_layers.0`, where
//! we keep flat `attentions.{i}` / `ffns.{i}` lists (so that attention and feed-forward blocks
//! can be shared independently); it spells LayerNorm `LayerNorm`; and it wraps the SOP linear in
//! `sop_classifier.classifier`. PyTorch's `[out, in]` linear weights and `weight`/`bias`
//! LayerNorm names are burn-store's adapters' job.
//!
//! transformers 5 writes the MLM decoder neither as weight (tied to the word embeddings) nor as
//! bias (tied to `predictions.bias`); older checkpoints carry both. Reading accepts both, and
//! writing does what transformers 5 does.
//!
//! The per-position heads (token classification, question answering) sit on transformers'
//! `AlbertModel` without its pooler: their checkpoints have no `albert.pooler.*`, so loading
//! them does not ask for it and saving them does not write it.
//!
//! What goes wrong is an [`HfError`]: a directory without `config.json` or weights, a config
//! the weights do not fit, tensors missing or of another shape, a file that cannot be written.

use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::store::{
    ApplyResult, BurnToPyTorchAdapter, KeyRemapper, ModuleSnapshot, PyTorchToBurnAdapter,
    PytorchStore, SafetensorsStore,
};
use burn::tensor::Device;

use crate::config::AlbertConfig;
use crate::heads::{
    AlbertForMultipleChoice, AlbertForQuestionAnswering, AlbertForSequenceClassification,
    AlbertForTokenClassification,
};
use crate::model::{Albert, AlbertForPreTraining};

mod error;

pub use error::HfError;

/// The result of reading or writing a model directory.
pub type Result<T, E = HfError> = std::result::Result<T, E>;

/// transformers' names → ours (applied when reading).
const FROM_HF: &[(&str, &str)] = &[
    (
        r"^albert\.encoder\.albert_layer_groups\.(\d+)\.albert_layers\.0\.attention\.",
        "albert.encoder.attentions.${1}.",
    ),
    (
        r"^albert\.encoder\.albert_layer_groups\.(\d+)\.albert_layers\.0\.(ffn|ffn_output|full_layer_layer_norm)\.",
        "albert.encoder.ffns.${1}.${2}.",
    ),
    (r"\.LayerNorm\.", ".layer_norm."),
    (r"^sop_classifier\.classifier\.", "sop_classifier."),
];

/// Ours → transformers' names (applied when writing).
const TO_HF: &[(&str, &str)] = &[
    (
        r"^albert\.encoder\.attentions\.(\d+)\.",
        "albert.encoder.albert_layer_groups.${1}.albert_layers.0.attention.",
    ),
    (
        r"^albert\.encoder\.ffns\.(\d+)\.",
        "albert.encoder.albert_layer_groups.${1}.albert_layers.0.",
    ),
    (r"\.layer_norm\.", ".LayerNorm."),
    (r"^sop_classifier\.", "sop_classifier.classifier."),
];

/// Tensors a checkpoint may hold that we do not load: the tied decoder, and buffers older
/// transformers saved.
const IGNORED: &[&str] = &[
    "predictions.decoder.weight",
    "predictions.decoder.bias",
    "albert.embeddings.position_ids",
];

fn remapper(rules: &[(&str, &str)]) -> KeyRemapper {
    KeyRemapper::from_patterns(rules.to_vec()).expect("the key rules are valid regexes")
}

/// The weights file of a checkpoint directory: `model.safetensors`, else `pytorch_model.bin`.
pub fn weights_file(dir: &Path) -> Result<PathBuf> {
    for name in ["model.safetensors", "pytorch_model.bin"] {
        let p = dir.join(name);
        if p.is_file() {
            return Ok(p);
        }
    }
    Err(HfError::NoWeights {
        dir: dir.to_path_buf(),
    })
}

/// The config of a checkpoint directory: read bounded, its sizes checked against
/// [`AlbertConfig::validate`]'s limits, and the weights file checked to fit it, all before any
/// model of it is allocated.
pub fn read_config(dir: &Path) -> Result<AlbertConfig> {
    let config = read_config_file(dir)?;
    // Before any model of this config is allocated: the weights must be able to fill it.
    if let Ok(weights) = weights_file(dir) {
        crate::safetensors_header::check_weights(&weights, &config)?;
    }
    Ok(config)
}

/// The largest `config.json` read (a real one is under 2 KB; one with a 10^5-label
/// `id2label` is a few MB).
pub const MAX_CONFIG_BYTES: u64 = 16 << 20;

/// A model directory's `config.json` as JSON, read with the shared bounded reader: a FIFO or
/// device in its place (`config.json -> /dev/zero`) is refused without being read, and a file
/// over [`MAX_CONFIG_BYTES`] (or one still growing past it) is refused after reading one byte
/// more than the limit. A directory without one is [`HfError::NoConfig`]. Callers that need
/// fields [`AlbertConfig`] does not keep (`architectures`, `id2label`, `finetuning_task`) read
/// them here rather than from the file.
pub fn read_config_json(dir: &Path) -> Result<serde_json::Value> {
    let path = dir.join("config.json");
    let bytes =
        pipeline_bounded::read(&path, MAX_CONFIG_BYTES, "a model's config.json").map_err(|e| {
            if e.is_not_found() {
                HfError::NoConfig {
                    dir: dir.to_path_buf(),
                }
            } else {
                HfError::ReadConfig(e)
            }
        })?;
    serde_json::from_slice(&bytes).map_err(|error| HfError::ConfigJson { path, error })
}

fn read_config_file(dir: &Path) -> Result<AlbertConfig> {
    let json = read_config_json(dir)?;
    AlbertConfig::from_json(&json).map_err(|error| HfError::Config {
        path: dir.join("config.json"),
        error,
    })
}

/// Which heads a loader expects besides the backbone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Heads {
    /// Only `albert.*` is read; heads in the file are ignored (initialising a classifier
    /// from a pretrained model).
    BackboneOnly,
    /// Everything the module has must be in the file.
    All,
    /// Everything but the backbone's pooler, which transformers' per-position heads lack.
    AllButPooler,
}

/// The pooler's tensors (`albert.pooler.weight`, `.bias`), the same in both namings.
const POOLER: &str = "albert.pooler.";

impl Heads {
    /// Whether a tensor the module has must be in the file.
    fn requires(self, path: &str) -> bool {
        match self {
            Heads::BackboneOnly => path.starts_with("albert."),
            Heads::All => true,
            Heads::AllButPooler => !path.starts_with(POOLER),
        }
    }

    /// Whether a tensor in the file that the module lacks is an error.
    fn rejects_extra(self, path: &str) -> bool {
        self != Heads::BackboneOnly || path.starts_with("albert.")
    }
}

/// Loads `module`'s tensors from `file`, and turns burn-store's report into an error a user can
/// act on: missing tensors, shape mismatches (a checkpoint of another config), unexpected ones.
fn load_into<M: Module + ModuleSnapshot + Clone>(
    module: &mut M,
    file: &Path,
    heads: Heads,
) -> Result<()> {
    let is_safetensors = file.extension().is_some_and(|e| e == "safetensors");
    let result: ApplyResult = if is_safetensors {
        check_safetensors_header(file)?;
        let mut store = SafetensorsStore::from_file(file)
            .with_from_adapter(PyTorchToBurnAdapter)
            .remap(remapper(FROM_HF))
            .allow_partial(true);
        module
            .load_from(&mut store)
            .map_err(|e| load_error(file, &e.to_string()))?
    } else {
        // PytorchStore applies the PyTorch → burn adapter itself.
        let mut store = PytorchStore::from_file(file)
            .remap(remapper(FROM_HF))
            .allow_partial(true);
        module
            .load_from(&mut store)
            .map_err(|e| load_error(file, &e.to_string()))?
    };
    check_applied(&result, file, heads)?;
    // Loaded tensors come back without gradient tracking; training them needs it.
    *module = module.clone().set_require_grad(true);
    Ok(())
}

/// burn-store's report of a load as the error a user can act on: tensors of the wrong shape,
/// missing (of the heads this load requires), or the model does not have.
fn check_applied(result: &ApplyResult, file: &Path, heads: Heads) -> Result<()> {
    if !result.errors.is_empty() {
        return Err(HfError::Unfit {
            file: file.to_path_buf(),
            count: result.errors.len(),
            examples: result
                .errors
                .iter()
                .take(5)
                .map(|e| e.to_string())
                .collect(),
        });
    }
    let missing: Vec<&str> = result
        .missing
        .iter()
        .map(|(p, _)| p.as_str())
        .filter(|p| heads.requires(p))
        .collect();
    if !missing.is_empty() {
        return Err(HfError::Missing {
            file: file.to_path_buf(),
            count: missing.len(),
            examples: first_five(&missing),
            heads_only: missing.iter().all(|p| !p.starts_with("albert.")),
        });
    }
    let unexpected: Vec<&str> = result
        .unused
        .iter()
        .map(String::as_str)
        .filter(|p| !IGNORED.contains(p))
        .filter(|p| heads.rejects_extra(p))
        .collect();
    if !unexpected.is_empty() {
        return Err(HfError::Unexpected {
            file: file.to_path_buf(),
            count: unexpected.len(),
            examples: first_five(&unexpected),
        });
    }
    Ok(())
}

/// The first five of `paths`, as an error names them.
fn first_five(paths: &[&str]) -> Vec<String> {
    paths.iter().take(5).map(|p| p.to_string()).collect()
}

/// burn-store lists every mismatching tensor in one line; a user needs the count, one example
/// and the likely cause.
fn load_error(file: &Path, message: &str) -> HfError {
    let mismatches = message.matches("ShapeMismatch").count();
    if mismatches > 0 {
        let first = message
            .split("ShapeMismatch")
            .nth(1)
            .and_then(|rest| rest.split('}').take(3).collect::<Vec<_>>().join("}").into())
            .unwrap_or_default();
        return HfError::Shapes {
            file: file.to_path_buf(),
            count: mismatches,
            first,
        };
    }
    HfError::Load {
        file: file.to_path_buf(),
        message: message.to_string(),
    }
}

/// A truncated or garbled safetensors file otherwise surfaces as an opaque parse error.
fn check_safetensors_header(file: &Path) -> Result<()> {
    crate::safetensors_header::read(file)?;
    Ok(())
}

fn save_from<M: Module + ModuleSnapshot>(module: &M, file: &Path, heads: Heads) -> Result<()> {
    if file.exists() {
        std::fs::remove_file(file).map_err(|source| HfError::Replace {
            path: file.to_path_buf(),
            source,
        })?;
    }
    let mut store = SafetensorsStore::from_file(file);
    if heads == Heads::AllButPooler {
        // transformers would report an unused pooler as unexpected keys.
        store = store.with_predicate(|path, _| !path.starts_with(POOLER));
    }
    let mut store = store
        .with_to_adapter(BurnToPyTorchAdapter)
        .remap(remapper(TO_HF))
        .clear_metadata()
        // transformers refuses safetensors files whose metadata lacks format = pt.
        .metadata("format", "pt");
    module
        .save_into(&mut store)
        .map_err(|e| HfError::WriteWeights {
            path: file.to_path_buf(),
            message: e.to_string(),
        })
}

fn write_config(
    dir: &Path,
    config: &AlbertConfig,
    architecture: &str,
    extra: &[(&str, serde_json::Value)],
) -> Result<()> {
    let mut json = config.to_hf_json(architecture);
    if let Some(obj) = json.as_object_mut() {
        for (k, v) in extra {
            obj.insert((*k).to_string(), v.clone());
        }
    }
    let path = dir.join("config.json");
    std::fs::write(&path, serde_json::to_string_pretty(&json)? + "\n")
        .map_err(|source| HfError::WriteConfig { path, source })
}

/// Loads an `AlbertForPreTraining` checkpoint (both heads required).
pub fn load_pretraining(
    dir: &Path,
    device: &Device,
) -> Result<(AlbertConfig, AlbertForPreTraining)> {
    let config = read_config(dir)?;
    let file = weights_file(dir)?;
    let mut model = AlbertForPreTraining::new(&config, device);
    load_into(&mut model, &file, Heads::All)?;
    Ok((config, model))
}

/// Loads the backbone of any ALBERT checkpoint (pretraining, classifier, bare model).
pub fn load_backbone(dir: &Path, device: &Device) -> Result<(AlbertConfig, Albert)> {
    let config = read_config(dir)?;
    let file = weights_file(dir)?;
    // A wrapper with the backbone under `albert.`, so that paths line up with the file's.
    let mut holder = BackboneHolder {
        albert: Albert::new(&config, device),
    };
    load_into(&mut holder, &file, Heads::BackboneOnly)?;
    Ok((config, holder.albert))
}

#[derive(Module, Debug)]
struct BackboneHolder {
    albert: Albert,
}

/// `id2label` and `label2id` as transformers reads them (`{"0": "B-LOC"}`, `{"B-LOC": 0}`).
fn label_maps(labels: &[String]) -> [(&'static str, serde_json::Value); 2] {
    let id2label: serde_json::Map<String, serde_json::Value> = labels
        .iter()
        .enumerate()
        .map(|(i, l)| (i.to_string(), serde_json::json!(l)))
        .collect();
    let label2id: serde_json::Map<String, serde_json::Value> = labels
        .iter()
        .enumerate()
        .map(|(i, l)| (l.clone(), serde_json::json!(i)))
        .collect();
    [("id2label", id2label.into()), ("label2id", label2id.into())]
}

/// The number of classes config.json declares: the size of `id2label`, else `num_labels`.
fn num_labels(dir: &Path) -> Result<usize> {
    let raw = read_config_json(dir)?;
    raw.get("id2label")
        .and_then(|v| v.as_object())
        .map(|m| m.len())
        .or_else(|| {
            raw.get("num_labels")
                .and_then(|v| v.as_u64())
                .map(|n| n as usize)
        })
        .ok_or_else(|| HfError::NoNumLabels {
            dir: dir.to_path_buf(),
        })
}

/// [`num_labels`], checked to fit the weights `file` before a classifier of that many classes
/// is allocated: its `[labels, H]` weight must be in the file, at 2 bytes a value at least (the
/// bound SECURITY.md gives a `pytorch_model.bin`). Without it, `"num_labels": 10^12` (and no
/// `id2label`) asked for a 4 TB classifier and aborted on the allocation.
fn checked_num_labels(dir: &Path, config: &AlbertConfig, file: &Path) -> Result<usize> {
    let labels = num_labels(dir)?;
    let bytes = std::fs::metadata(file).map(|m| m.len()).unwrap_or(0);
    let needed = labels as u128 * config.hidden_size as u128 * 2;
    if needed > u128::from(bytes) {
        return Err(HfError::TooManyLabels {
            dir: dir.to_path_buf(),
            labels,
            hidden: config.hidden_size,
            file: file.to_path_buf(),
            bytes,
        });
    }
    Ok(labels)
}

/// The label names of config.json's `id2label` in id order (`None` without one, or when its
/// keys are not the ids 0..n).
pub fn read_labels(dir: &Path) -> Result<Option<Vec<String>>> {
    let raw = read_config_json(dir)?;
    let Some(map) = raw.get("id2label").and_then(|v| v.as_object()) else {
        return Ok(None);
    };
    let mut labels = vec![None; map.len()];
    for (k, v) in map {
        let (Ok(i), Some(name)) = (k.parse::<usize>(), v.as_str()) else {
            return Ok(None);
        };
        match labels.get_mut(i) {
            Some(slot) => *slot = Some(name.to_string()),
            None => return Ok(None),
        }
    }
    Ok(labels.into_iter().collect())
}

/// Loads an `AlbertForSequenceClassification` checkpoint; `None` when the directory's model
/// has no classifier head (the error then says so).
pub fn load_classifier(
    dir: &Path,
    device: &Device,
) -> Result<(AlbertConfig, AlbertForSequenceClassification)> {
    let config = read_config(dir)?;
    let file = weights_file(dir)?;
    let num_labels = checked_num_labels(dir, &config, &file)?;
    let mut model = AlbertForSequenceClassification::new(&config, num_labels, 0.0, device);
    load_into(&mut model, &file, Heads::All).map_err(|e| {
        if e.to_string().contains("classifier") {
            HfError::NoClassifierHead {
                dir: dir.to_path_buf(),
                source: Box::new(e),
            }
        } else {
            e
        }
    })?;
    Ok((config, model))
}

/// Loads an `AlbertForMultipleChoice` checkpoint.
pub fn load_multiple_choice(
    dir: &Path,
    device: &Device,
) -> Result<(AlbertConfig, AlbertForMultipleChoice)> {
    let config = read_config(dir)?;
    let file = weights_file(dir)?;
    let mut model = AlbertForMultipleChoice::new(&config, 0.0, device);
    load_into(&mut model, &file, Heads::All)?;
    Ok((config, model))
}

/// Writes `config.json` and `model.safetensors` of a pretraining model into `dir`.
pub fn save_pretraining(
    dir: &Path,
    config: &AlbertConfig,
    model: &AlbertForPreTraining,
) -> Result<()> {
    save_dir(dir, config, "AlbertForPreTraining", &[], model, Heads::All)
}

/// Creates `dir` and writes `config.json` (with `architecture` and the `extra` fields) and
/// `model.safetensors` (what `heads` keeps of `model`) into it.
fn save_dir<M: Module + ModuleSnapshot>(
    dir: &Path,
    config: &AlbertConfig,
    architecture: &str,
    extra: &[(&str, serde_json::Value)],
    model: &M,
    heads: Heads,
) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    write_config(dir, config, architecture, extra)?;
    save_from(model, &dir.join("model.safetensors"), heads)
}

/// Writes a classifier with its label names (`id2label`/`label2id`, as transformers reads them).
pub fn save_classifier(
    dir: &Path,
    config: &AlbertConfig,
    model: &AlbertForSequenceClassification,
    labels: &[String],
) -> Result<()> {
    let extra = label_maps(labels);
    let architecture = "AlbertForSequenceClassification";
    save_dir(dir, config, architecture, &extra, model, Heads::All)
}

/// Writes a multiple-choice model.
pub fn save_multiple_choice(
    dir: &Path,
    config: &AlbertConfig,
    model: &AlbertForMultipleChoice,
) -> Result<()> {
    let architecture = "AlbertForMultipleChoice";
    save_dir(dir, config, architecture, &[], model, Heads::All)
}

/// Loads an `AlbertForTokenClassification` checkpoint (transformers' or ours; the number of
/// tags from config.json's `id2label` or `num_labels`, their names from [`read_labels`]).
pub fn load_token_classifier(
    dir: &Path,
    device: &Device,
) -> Result<(AlbertConfig, AlbertForTokenClassification)> {
    let config = read_config(dir)?;
    let file = weights_file(dir)?;
    let num_labels = checked_num_labels(dir, &config, &file)?;
    let mut model = AlbertForTokenClassification::new(&config, num_labels, 0.0, device);
    load_into(&mut model, &file, Heads::AllButPooler)?;
    Ok((config, model))
}

/// Writes a token classifier with its tag names (`id2label`/`label2id`), without the unused
/// pooler, as transformers' `AlbertForTokenClassification.save_pretrained` does.
pub fn save_token_classifier(
    dir: &Path,
    config: &AlbertConfig,
    model: &AlbertForTokenClassification,
    labels: &[String],
) -> Result<()> {
    let extra = label_maps(labels);
    let architecture = "AlbertForTokenClassification";
    save_dir(
        dir,
        config,
        architecture,
        &extra,
        model,
        Heads::AllButPooler,
    )
}

/// Loads an `AlbertForQuestionAnswering` checkpoint (transformers' or ours).
pub fn load_question_answering(
    dir: &Path,
    device: &Device,
) -> Result<(AlbertConfig, AlbertForQuestionAnswering)> {
    let config = read_config(dir)?;
    let file = weights_file(dir)?;
    let mut model = AlbertForQuestionAnswering::new(&config, device);
    load_into(&mut model, &file, Heads::AllButPooler)?;
    Ok((config, model))
}

/// Writes a span-extraction model without the unused pooler, as transformers'
/// `AlbertForQuestionAnswering.save_pretrained` does.
pub fn save_question_answering(
    dir: &Path,
    config: &AlbertConfig,
    model: &AlbertForQuestionAnswering,
) -> Result<()> {
    let architecture = "AlbertForQuestionAnswering";
    save_dir(dir, config, architecture, &[], model, Heads::AllButPooler)
}
