//! The training params of the `finetune` stage (the data protocol's params are
//! `pipeline_tasks`'s), checked, with the defaults the crate docs list.

use std::path::{Path, PathBuf};

use pipeline_albert::device::DeviceChoice;
use pipeline_albert::train::{OptimConfig, OptimizerKind};
use serde_json::{Map, Value};

pub(crate) const TRAIN_PARAMS: &[&str] = &[
    "init",
    "init_from",
    "pretrain_step",
    "device",
    "epochs",
    "batch_size",
    "eval_batch_size",
    "learning_rate",
    "optimizer",
    "weight_decay",
    "warmup_fraction",
    "max_grad_norm",
    "max_seq_length",
    "dropout",
    "hidden_dropout",
    "seed",
    "group_by_length",
];

pub fn known() -> &'static [&'static str] {
    static ALL: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    ALL.get_or_init(|| {
        TRAIN_PARAMS
            .iter()
            .chain(pipeline_tasks::known_params())
            .copied()
            .collect()
    })
}

/// Where the initial weights come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Init {
    Pretrained,
    Random,
    Checkpoint(PathBuf),
}

impl Init {
    pub fn name(&self) -> &'static str {
        match self {
            Init::Pretrained => "pretrained",
            Init::Random => "random",
            Init::Checkpoint(_) => "checkpoint",
        }
    }
}

/// The training params, checked.
#[derive(Debug, Clone)]
pub struct TrainParams {
    pub init: Init,
    /// With `init: pretrained`, one of the `pretrain` dep's `save_steps` instead of its final
    /// model.
    pub pretrain_step: Option<u64>,
    pub device: DeviceChoice,
    pub epochs: usize,
    pub batch_size: usize,
    pub eval_batch_size: usize,
    pub learning_rate: f64,
    pub optimizer: OptimizerKind,
    pub weight_decay: f64,
    pub warmup_fraction: f64,
    pub max_grad_norm: f64,
    pub max_seq_length: usize,
    pub dropout: f64,
    pub hidden_dropout: f64,
    pub seed: u64,
    /// Batch examples of similar length together (fewer padding tokens per batch).
    pub group_by_length: bool,
}

fn num(p: &Map<String, Value>, key: &str, default: f64) -> Result<f64, String> {
    match p.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v
            .as_f64()
            .ok_or_else(|| format!("{key} must be a number, not {v}")),
    }
}

fn count(p: &Map<String, Value>, key: &str, default: u64, min: u64) -> Result<u64, String> {
    let v = match p.get(key) {
        None | Some(Value::Null) => default,
        Some(v) => v
            .as_u64()
            .ok_or_else(|| format!("{key} must be a non-negative integer, not {v}"))?,
    };
    if v < min {
        return Err(format!("{key} must be at least {min} (got {v})"));
    }
    Ok(v)
}

impl TrainParams {
    pub fn parse(p: &Map<String, Value>, root: &Path) -> Result<TrainParams, String> {
        let init_from = match p.get("init_from") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(root.join(s)),
            Some(v) => return Err(format!("init_from must be a path, not {v}")),
        };
        let init = match (p.get("init").and_then(Value::as_str), init_from) {
            (Some("checkpoint") | None, Some(dir)) => Init::Checkpoint(dir),
            (Some("checkpoint"), None) => {
                return Err(
                    "init: checkpoint needs init_from: DIR (a Hugging Face ALBERT directory)"
                        .into(),
                );
            }
            (Some("pretrained") | None, None) => Init::Pretrained,
            (Some("random"), None) => Init::Random,
            (Some(other @ ("pretrained" | "random")), Some(_)) => {
                return Err(format!("init: {other} and init_from exclude each other"));
            }
            (Some(other), _) => {
                return Err(format!(
                    "unknown init {other:?}: expected pretrained, random or checkpoint"
                ));
            }
        };
        if let Some(v) = p.get("init")
            && !v.is_string()
        {
            return Err(format!("init must be a string, not {v}"));
        }
        let pretrain_step = match p.get("pretrain_step") {
            None | Some(Value::Null) => None,
            Some(v) => Some(v.as_u64().filter(|n| *n > 0).ok_or_else(|| {
                format!(
                    "pretrain_step must be a step number the pretrain dep saved (its \
                     save_steps), not {v}"
                )
            })?),
        };
        if pretrain_step.is_some() && init != Init::Pretrained {
            return Err(format!(
                "pretrain_step picks a saved step of the pretrained weights; it does not go with \
                 init: {} (remove it, or use init: pretrained)",
                init.name()
            ));
        }
        let dropout = num(p, "dropout", 0.1)?;
        let hidden_dropout = num(p, "hidden_dropout", 0.0)?;
        for (k, d) in [("dropout", dropout), ("hidden_dropout", hidden_dropout)] {
            if !(0.0..1.0).contains(&d) {
                return Err(format!("{k} = {d} must be in [0, 1)"));
            }
        }
        let warmup_fraction = num(p, "warmup_fraction", 0.1)?;
        if !(0.0..=1.0).contains(&warmup_fraction) {
            return Err(format!(
                "warmup_fraction = {warmup_fraction} must be in [0, 1]"
            ));
        }
        let learning_rate = num(p, "learning_rate", 1e-4)?;
        if !(learning_rate > 0.0 && learning_rate.is_finite()) {
            return Err(format!(
                "learning_rate = {learning_rate} must be a positive number"
            ));
        }
        let device_name = match p.get("device") {
            None | Some(Value::Null) => "auto",
            Some(Value::String(s)) => s.as_str(),
            Some(v) => return Err(format!("device must be a string, not {v}")),
        };
        Ok(TrainParams {
            init,
            pretrain_step,
            device: DeviceChoice::parse(device_name)?,
            epochs: count(p, "epochs", 3, 1)? as usize,
            batch_size: count(p, "batch_size", 32, 1)? as usize,
            eval_batch_size: count(p, "eval_batch_size", 64, 1)? as usize,
            learning_rate,
            optimizer: OptimizerKind::parse(
                p.get("optimizer")
                    .and_then(Value::as_str)
                    .unwrap_or("adamw"),
            )?,
            weight_decay: num(p, "weight_decay", 0.01)?,
            warmup_fraction,
            max_grad_norm: num(p, "max_grad_norm", 1.0)?,
            max_seq_length: count(p, "max_seq_length", 128, 5)? as usize,
            dropout,
            hidden_dropout,
            seed: count(p, "seed", 42, 0)?,
            group_by_length: match p.get("group_by_length") {
                None | Some(Value::Null) => true,
                Some(Value::Bool(b)) => *b,
                Some(v) => return Err(format!("group_by_length must be true or false, not {v}")),
            },
        })
    }

    /// The optimiser and schedule of a run of `total_steps` steps.
    pub fn optim_config(&self, total_steps: u64) -> OptimConfig {
        OptimConfig {
            optimizer: self.optimizer,
            learning_rate: self.learning_rate,
            weight_decay: self.weight_decay,
            beta_1: 0.9,
            beta_2: 0.999,
            // ALBERT's LAMB uses 1e-6; 1e-8 is torch's (and transformers') AdamW default.
            epsilon: if self.optimizer == OptimizerKind::Lamb {
                1e-6
            } else {
                1e-8
            },
            warmup_steps: (total_steps as f64 * self.warmup_fraction).round() as u64,
            total_steps,
            max_grad_norm: self.max_grad_norm,
        }
    }
}
