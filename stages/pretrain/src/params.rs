//! The `pretrain` stage's params: the model (a named albert_zh size or a config file, plus
//! per-field overrides such as `share_type`), the optimisation, the schedule of evaluations and
//! checkpoints, and the device. Parsed with errors that name the param.

use std::path::{Path, PathBuf};

use pipeline_albert::AlbertConfig;
use pipeline_albert::config::NAMED_CONFIGS;
use pipeline_albert::device::DeviceChoice;
use pipeline_albert::train::{OptimConfig, OptimizerKind};
use serde_json::{Map, Value};

/// Model fields a param may override (the rest of [`KNOWN_PARAMS`] are the stage's own).
pub const MODEL_FIELDS: &[&str] = &[
    "vocab_size",
    "embedding_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "max_position_embeddings",
    "type_vocab_size",
    "layer_norm_eps",
    "initializer_range",
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "share_type",
    "ln_type",
    "hidden_act",
];

const STAGE_PARAMS: &[&str] = &[
    "model",
    "init_from",
    "device",
    "precision",
    "batch_size",
    "grad_accum_steps",
    "steps",
    "learning_rate",
    "warmup_steps",
    "weight_decay",
    "optimizer",
    "beta_1",
    "beta_2",
    "epsilon",
    "max_grad_norm",
    "eval_interval",
    "eval_batches",
    "checkpoint_interval",
    "log_interval",
    "seed",
    "pad_to_max",
    "save_steps",
];

/// Every param the kind takes.
pub fn known_params() -> &'static [&'static str] {
    static ALL: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    ALL.get_or_init(|| STAGE_PARAMS.iter().chain(MODEL_FIELDS).copied().collect())
}

/// Numeric precision of training.
/// The share of a run's training time that `eval_batches: auto` spends on evaluation.
pub const EVAL_BUDGET: f64 = 0.08;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    Fp32,
    /// bfloat16 activations and matmuls with fp32 master weights (CUDA only).
    Bf16,
}

/// The params, checked.
#[derive(Debug, Clone)]
pub struct PretrainParams {
    /// `model:` as given: a named size or a path.
    pub model: String,
    /// The config file when `model` is a path (resolved against the workspace root).
    pub model_file: Option<PathBuf>,
    pub overrides: Map<String, Value>,
    pub init_from: Option<PathBuf>,
    pub device: DeviceChoice,
    pub device_name: String,
    pub precision: Precision,
    pub batch_size: usize,
    pub grad_accum_steps: usize,
    pub optim: OptimConfig,
    pub eval_interval: u64,
    /// Batches per evaluation; `None` (the default, `auto`) sizes evaluations to the budget of
    /// [`PretrainParams::eval_batches_for`]; `Some(0)` is the whole eval shard.
    pub eval_batches: Option<u64>,
    pub checkpoint_interval: u64,
    pub log_interval: u64,
    pub seed: u64,
    pub pad_to_max: bool,
    /// Steps (ascending, each below `steps`) at which the model is also exported, under
    /// `steps/<N>/` of the artifact, for fine-tuning intermediate checkpoints.
    pub save_steps: Vec<u64>,
}

/// `save_steps`: a list of distinct step numbers in `1 .. steps` (sorted here), or nothing.
fn save_steps(p: &Map<String, Value>, steps: u64) -> Result<Vec<u64>, String> {
    let list = match p.get("save_steps") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(a)) => a,
        Some(v) => {
            return Err(format!(
                "save_steps must be a list of step numbers such as [500, 1000], not {v}"
            ));
        }
    };
    let mut out = Vec::with_capacity(list.len());
    for v in list {
        let n = v
            .as_u64()
            .filter(|n| (1..steps).contains(n))
            .ok_or_else(|| {
                format!(
                    "save_steps: {v} is not a step of this run: each must be an integer from 1 \
                     to {} (the final model, step {steps}, is always exported)",
                    steps.saturating_sub(1)
                )
            })?;
        out.push(n);
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

fn get_u64(p: &Map<String, Value>, key: &str, default: u64) -> Result<u64, String> {
    match p.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v
            .as_u64()
            .ok_or_else(|| format!("{key} must be a non-negative integer, not {v}")),
    }
}

fn get_f64(p: &Map<String, Value>, key: &str, default: f64) -> Result<f64, String> {
    match p.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v
            .as_f64()
            .ok_or_else(|| format!("{key} must be a number, not {v}")),
    }
}

fn get_str<'a>(p: &'a Map<String, Value>, key: &str, default: &'a str) -> Result<&'a str, String> {
    match p.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::String(s)) => Ok(s),
        Some(v) => Err(format!("{key} must be a string, not {v}")),
    }
}

impl PretrainParams {
    /// Parses and checks the params; `root` resolves relative paths (`model`, `init_from`).
    pub fn parse(p: &Map<String, Value>, root: &Path) -> Result<PretrainParams, String> {
        let model = get_str(p, "model", "tiny")?.to_string();
        let model_file = if NAMED_CONFIGS.contains(&model.as_str()) {
            None
        } else if model.contains('/') || model.ends_with(".json") {
            Some(root.join(&model))
        } else {
            // Neither a size nor a path: say which sizes there are.
            return Err(AlbertConfig::named(&model).map(|_| ()).unwrap_err().message);
        };
        let overrides: Map<String, Value> = p
            .iter()
            .filter(|(k, _)| MODEL_FIELDS.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let device_name = get_str(p, "device", "auto")?.to_string();
        let device = DeviceChoice::parse(&device_name)?;
        let precision = match get_str(p, "precision", "fp32")? {
            "fp32" => Precision::Fp32,
            "bf16" => Precision::Bf16,
            other => return Err(format!("precision {other:?}: expected fp32 or bf16")),
        };
        let batch_size = get_u64(p, "batch_size", 32)? as usize;
        if batch_size == 0 {
            return Err("batch_size must be at least 1 (got 0)".into());
        }
        let grad_accum_steps = get_u64(p, "grad_accum_steps", 1)? as usize;
        if grad_accum_steps == 0 {
            return Err("grad_accum_steps must be at least 1 (got 0)".into());
        }
        let steps = get_u64(p, "steps", 1000)?;
        if steps == 0 {
            return Err("steps must be at least 1 (got 0)".into());
        }
        let optimizer = OptimizerKind::parse(get_str(p, "optimizer", "lamb")?)?;
        let optim = OptimConfig {
            optimizer,
            learning_rate: get_f64(p, "learning_rate", 1e-3)?,
            weight_decay: get_f64(p, "weight_decay", 0.01)?,
            beta_1: get_f64(p, "beta_1", 0.9)?,
            beta_2: get_f64(p, "beta_2", 0.999)?,
            epsilon: get_f64(p, "epsilon", 1e-6)?,
            warmup_steps: get_u64(p, "warmup_steps", steps / 10)?,
            total_steps: steps,
            max_grad_norm: get_f64(p, "max_grad_norm", 1.0)?,
        };
        optim.validate()?;
        if optim.warmup_steps > steps {
            return Err(format!(
                "warmup_steps = {} is more than steps = {steps}",
                optim.warmup_steps
            ));
        }
        let params = PretrainParams {
            model,
            model_file,
            overrides,
            init_from: match p.get("init_from") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(root.join(s)),
                Some(v) => return Err(format!("init_from must be a path, not {v}")),
            },
            device,
            device_name,
            precision,
            batch_size,
            grad_accum_steps,
            optim,
            eval_interval: get_u64(p, "eval_interval", (steps / 5).max(1))?,
            eval_batches: match p.get("eval_batches") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) if s == "auto" => None,
                Some(v) => Some(v.as_u64().ok_or_else(|| {
                    format!(
                        "eval_batches must be auto, 0 (the whole eval shard) or a number of \
                         batches, not {v}"
                    )
                })?),
            },
            checkpoint_interval: get_u64(p, "checkpoint_interval", (steps / 10).clamp(1, 500))?,
            log_interval: get_u64(p, "log_interval", 10)?.max(1),
            seed: get_u64(p, "seed", 12345)?,
            pad_to_max: match p.get("pad_to_max") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(v) => return Err(format!("pad_to_max must be true or false, not {v}")),
            },
            save_steps: save_steps(p, steps)?,
        };
        // Without a file to read, the model part can be checked now (with the file, at run time).
        if params.model_file.is_none() && params.init_from.is_none() {
            params.model_config(None)?;
        }
        Ok(params)
    }

    /// The model config: the named size or the file, with the overrides applied, and the
    /// vocabulary size of the data (`vocab_size` from the `vocab` dep) unless a config file or
    /// an explicit `vocab_size` param says otherwise, which must then agree with the data.
    /// Batches per evaluation. `auto` spends about [`EVAL_BUDGET`] of the training time on all
    /// the run's evaluations together: an eval batch is a forward pass, about a third of a
    /// training step's cost, so the run can afford `EVAL_BUDGET × 3 × steps × grad_accum`
    /// batches, shared by its `steps / eval_interval` evaluations (at least one batch each).
    pub fn eval_batches_for(&self) -> u64 {
        if let Some(n) = self.eval_batches {
            return n;
        }
        let steps = self.optim.total_steps as f64;
        let evaluations = (self.optim.total_steps / self.eval_interval.max(1)).max(1) as f64;
        let affordable = EVAL_BUDGET * 3.0 * steps * self.grad_accum_steps as f64;
        ((affordable / evaluations).floor() as u64).max(1)
    }

    pub fn model_config(&self, data_vocab: Option<usize>) -> Result<AlbertConfig, String> {
        let base = match &self.model_file {
            None => AlbertConfig::named(&self.model).map_err(|e| e.message)?,
            Some(path) => AlbertConfig::from_file(path).map_err(|e| {
                format!(
                    "{} (param `model`: a named size, {} or a config file)",
                    e.message,
                    NAMED_CONFIGS.join(", ")
                )
            })?,
        };
        let explicit_vocab = self.model_file.is_some() || self.overrides.contains_key("vocab_size");
        let mut config = base
            .with_overrides(&self.overrides)
            .map_err(|e| e.message)?;
        if let Some(v) = data_vocab {
            if explicit_vocab && config.vocab_size != v {
                return Err(format!(
                    "the model's vocab_size is {} but the vocabulary has {v} tokens: use the \
                     vocabulary the model was made for, or leave vocab_size out to take the \
                     vocabulary's",
                    config.vocab_size
                ));
            }
            config.vocab_size = v;
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<PretrainParams, String> {
        PretrainParams::parse(v.as_object().unwrap(), Path::new("/tmp"))
    }

    #[test]
    fn defaults_and_overrides() {
        let p = parse(json!({"share_type": "ffn", "steps": 100})).unwrap();
        assert_eq!(p.optim.warmup_steps, 10);
        let c = p.model_config(Some(1291)).unwrap();
        assert_eq!(c.vocab_size, 1291);
        assert_eq!(c.share_type, pipeline_albert::ShareType::Ffn);
        assert_eq!(c.hidden_size, 312);
    }

    #[test]
    fn bad_params_are_named() {
        for (v, want) in [
            (json!({"batch_size": 0}), "batch_size must be at least 1"),
            (json!({"share_type": "some"}), "unknown share_type"),
            (json!({"steps": 0}), "steps must be at least 1"),
            (json!({"learning_rate": -1.0}), "learning_rate"),
            (json!({"device": "gpu"}), "unknown device"),
            (json!({"precision": "fp8"}), "precision"),
            (json!({"num_attention_heads": 7}), "not divisible"),
            (json!({"model": "tinny"}), "did you mean \"tiny\""),
            (json!({"warmup_steps": 5000, "steps": 10}), "warmup_steps"),
            (json!({"eval_batches": "all"}), "eval_batches must be auto"),
            (json!({"save_steps": 50}), "save_steps must be a list"),
            (json!({"save_steps": [0], "steps": 10}), "from 1 to 9"),
            (json!({"save_steps": [10], "steps": 10}), "the final model"),
        ] {
            let e = match parse(v.clone()) {
                Ok(p) => p.model_config(None).unwrap_err(),
                Err(e) => e,
            };
            assert!(e.contains(want), "{v}: {e}");
        }
        let p = parse(json!({"steps": 1000})).unwrap();
        // 5 evaluations share 0.08 × 3 × 1000 = 240 batches.
        assert_eq!(p.eval_batches_for(), 48);
        let p = parse(json!({"steps": 60, "save_steps": [40, 20, 40]})).unwrap();
        assert_eq!(p.save_steps, [20, 40]);
        let p = parse(json!({"steps": 60, "eval_batches": 7})).unwrap();
        assert_eq!(p.eval_batches_for(), 7);
        let p = parse(json!({"vocab_size": 100})).unwrap();
        assert!(
            p.model_config(Some(1291))
                .unwrap_err()
                .contains("1291 tokens")
        );
    }
}
