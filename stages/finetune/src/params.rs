//! The training params of the `finetune` stage (the data protocol's params are
//! `pipeline_tasks`'s): a serde struct with the defaults the crate docs list, checked, with
//! errors that name the param.

use std::path::{Path, PathBuf};

use pipeline_albert::device::DeviceChoice;
use pipeline_albert::train::{OptimConfig, OptimizerKind};
use pipeline_engine::ParamError;
use pipeline_tasks::span_features::SpanConfig;
use pipeline_tasks::{Task, TaskKind};
use serde::Deserialize;
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
    "doc_stride",
    "max_query_length",
    "max_answer_length",
    "n_best_size",
];

/// The span-extraction params (tasks `cmrc2018`, `squad`).
const SPAN_PARAMS: &[&str] = &[
    "doc_stride",
    "max_query_length",
    "max_answer_length",
    "n_best_size",
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
    /// Span extraction: the windows and the decoding (`max_seq_length` is the window's
    /// length); the defaults, unchecked, for the other kinds.
    pub span: SpanConfig,
}

/// The params as given, typed (defaults for those left out; `null` means left out). Checked
/// and combined into [`TrainParams`] by [`TrainParams::parse`].
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Given {
    init: Option<String>,
    init_from: Option<String>,
    pretrain_step: Option<u64>,
    device: String,
    epochs: u64,
    batch_size: u64,
    eval_batch_size: u64,
    learning_rate: f64,
    optimizer: String,
    weight_decay: f64,
    warmup_fraction: f64,
    max_grad_norm: f64,
    max_seq_length: Option<u64>,
    dropout: f64,
    hidden_dropout: f64,
    seed: u64,
    group_by_length: bool,
    doc_stride: Option<u64>,
    max_query_length: Option<u64>,
    max_answer_length: Option<u64>,
    n_best_size: Option<u64>,
}

impl Default for Given {
    fn default() -> Self {
        Given {
            init: None,
            init_from: None,
            pretrain_step: None,
            device: "auto".into(),
            epochs: 3,
            batch_size: 32,
            eval_batch_size: 64,
            learning_rate: 1e-4,
            optimizer: "adamw".into(),
            weight_decay: 0.01,
            warmup_fraction: 0.1,
            max_grad_norm: 1.0,
            max_seq_length: None,
            dropout: 0.1,
            hidden_dropout: 0.0,
            seed: 42,
            group_by_length: true,
            doc_stride: None,
            max_query_length: None,
            max_answer_length: None,
            n_best_size: None,
        }
    }
}

/// What a param of the wrong type is told: serde's message does not name the param.
fn type_error(key: &str, v: &Value) -> String {
    match key {
        "init_from" => format!("init_from must be a path, not {v}"),
        "init" | "device" | "optimizer" => format!("{key} must be a string, not {v}"),
        "pretrain_step" => format!(
            "pretrain_step must be a step number the pretrain dep saved (its save_steps), not {v}"
        ),
        "group_by_length" => format!("group_by_length must be true or false, not {v}"),
        "epochs" | "batch_size" | "eval_batch_size" | "max_seq_length" | "seed" | "doc_stride"
        | "max_query_length" | "max_answer_length" | "n_best_size" => {
            format!("{key} must be a non-negative integer, not {v}")
        }
        _ => format!("{key} must be a number, not {v}"),
    }
}

/// `key`'s value at least `min`.
fn at_least(key: &str, v: u64, min: u64) -> Result<u64, String> {
    if v < min {
        return Err(format!("{key} must be at least {min} (got {v})"));
    }
    Ok(v)
}

impl Given {
    /// The training params of `p` (the protocol's are left out), `null` meaning "left out".
    fn of(p: &Map<String, Value>) -> Result<Given, String> {
        let own: Map<String, Value> = p
            .iter()
            .filter(|(k, v)| TRAIN_PARAMS.contains(&k.as_str()) && !v.is_null())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        serde_json::from_value(Value::Object(own.clone())).map_err(|e| {
            // Try each param alone to say which one is wrong, in today's words.
            own.iter()
                .find(|(k, v)| {
                    let one = Map::from_iter([(k.to_string(), (*v).clone())]);
                    serde_json::from_value::<Given>(Value::Object(one)).is_err()
                })
                .map(|(k, v)| type_error(k, v))
                .unwrap_or_else(|| e.to_string())
        })
    }

    /// Where the weights come from: `init` and `init_from` together.
    fn init(&self, root: &Path) -> Result<Init, String> {
        let init_from = self.init_from.as_ref().map(|s| root.join(s));
        Ok(match (self.init.as_deref(), init_from) {
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
        })
    }

    /// The span windows and decoding: the defaults ([`SpanConfig::default`], chosen for the
    /// CPU: see `pipeline_tasks::span_features`) with the params given, checked for a span
    /// task; refused for another task.
    fn span(&self, kind: Option<TaskKind>) -> Result<(u64, SpanConfig), String> {
        let given = [
            self.doc_stride,
            self.max_query_length,
            self.max_answer_length,
            self.n_best_size,
        ];
        if kind != Some(TaskKind::Span) {
            if let Some((k, _)) = SPAN_PARAMS.iter().zip(given).find(|(_, v)| v.is_some()) {
                return Err(format!(
                    "{k} is a span-extraction param (tasks cmrc2018, squad), not one of this task"
                ));
            }
            return Ok((self.max_seq_length.unwrap_or(128), SpanConfig::default()));
        }
        let d = SpanConfig::default();
        let n = |v: Option<u64>, default: usize| v.map_or(default, |v| v as usize);
        let cfg = SpanConfig {
            max_seq_length: n(self.max_seq_length, d.max_seq_length),
            doc_stride: n(self.doc_stride, d.doc_stride),
            max_query_length: n(self.max_query_length, d.max_query_length),
            max_answer_length: n(self.max_answer_length, d.max_answer_length),
            n_best_size: n(self.n_best_size, d.n_best_size),
        };
        cfg.validate().map_err(|e| e.to_string())?;
        Ok((cfg.max_seq_length as u64, cfg))
    }
}

/// The kind of the params' `task`, when it is a task (the protocol's parser says what is wrong
/// with it otherwise).
fn task_kind(p: &Map<String, Value>) -> Option<TaskKind> {
    Task::from_value(p.get("task")?, "task")
        .ok()
        .map(|t| t.kind())
}

impl TrainParams {
    /// Parses and checks the training params of `p` (other keys are the protocol's); the
    /// error names the param, and the engine adds where in pipeline.yaml it is.
    pub fn parse(p: &Map<String, Value>, root: &Path) -> Result<TrainParams, ParamError> {
        Self::parse_text(p, root).map_err(ParamError)
    }

    /// [`Self::parse`] with the message as a `String` (the helpers it calls build them so).
    fn parse_text(p: &Map<String, Value>, root: &Path) -> Result<TrainParams, String> {
        let g = Given::of(p)?;
        let init = g.init(root)?;
        let pretrain_step = match g.pretrain_step {
            Some(0) => return Err(type_error("pretrain_step", &Value::from(0))),
            other => other,
        };
        if pretrain_step.is_some() && init != Init::Pretrained {
            return Err(format!(
                "pretrain_step picks a saved step of the pretrained weights; it does not go with \
                 init: {} (remove it, or use init: pretrained)",
                init.name()
            ));
        }
        for (k, d) in [("dropout", g.dropout), ("hidden_dropout", g.hidden_dropout)] {
            if !(0.0..1.0).contains(&d) {
                return Err(format!("{k} = {d} must be in [0, 1)"));
            }
        }
        if !(0.0..=1.0).contains(&g.warmup_fraction) {
            return Err(format!(
                "warmup_fraction = {} must be in [0, 1]",
                g.warmup_fraction
            ));
        }
        if !(g.learning_rate > 0.0 && g.learning_rate.is_finite()) {
            return Err(format!(
                "learning_rate = {} must be a positive number",
                g.learning_rate
            ));
        }
        let (max_seq_length, span) = g.span(task_kind(p))?;
        Ok(TrainParams {
            init,
            pretrain_step,
            device: DeviceChoice::parse(&g.device)?,
            epochs: at_least("epochs", g.epochs, 1)? as usize,
            batch_size: at_least("batch_size", g.batch_size, 1)? as usize,
            eval_batch_size: at_least("eval_batch_size", g.eval_batch_size, 1)? as usize,
            learning_rate: g.learning_rate,
            optimizer: OptimizerKind::parse(&g.optimizer)?,
            weight_decay: g.weight_decay,
            warmup_fraction: g.warmup_fraction,
            max_grad_norm: g.max_grad_norm,
            max_seq_length: at_least("max_seq_length", max_seq_length, 5)? as usize,
            dropout: g.dropout,
            hidden_dropout: g.hidden_dropout,
            seed: g.seed,
            group_by_length: g.group_by_length,
            span,
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<TrainParams, String> {
        TrainParams::parse(v.as_object().unwrap(), Path::new("/ws")).map_err(|e| e.0)
    }

    #[test]
    fn defaults_nulls_and_protocol_keys() {
        let p = parse(json!({"task": "lcqmc", "epochs": null, "seed": 7})).unwrap();
        assert_eq!(
            (p.epochs, p.batch_size, p.max_seq_length, p.seed),
            (3, 32, 128, 7)
        );
        assert_eq!(p.init, Init::Pretrained);
        assert!(p.group_by_length);
        let p = parse(json!({"init_from": "hf"})).unwrap();
        assert_eq!(p.init, Init::Checkpoint(PathBuf::from("/ws/hf")));
    }

    #[test]
    fn errors_name_the_param_as_before() {
        let err = |v: Value| parse(v).unwrap_err();
        assert_eq!(
            err(json!({"epochs": 0})),
            "epochs must be at least 1 (got 0)"
        );
        assert_eq!(
            err(json!({"epochs": "3"})),
            "epochs must be a non-negative integer, not \"3\""
        );
        assert_eq!(
            err(json!({"dropout": "x"})),
            "dropout must be a number, not \"x\""
        );
        assert_eq!(
            err(json!({"init_from": 3})),
            "init_from must be a path, not 3"
        );
        assert_eq!(err(json!({"init": 3})), "init must be a string, not 3");
        assert_eq!(
            err(json!({"group_by_length": 1})),
            "group_by_length must be true or false, not 1"
        );
        assert!(err(json!({"init": "random", "init_from": "x"})).contains("exclude each other"));
        assert!(err(json!({"init": "pretrianed"})).starts_with("unknown init"));
        assert!(
            err(json!({"pretrain_step": 0})).starts_with("pretrain_step must be a step number")
        );
        assert!(err(json!({"init": "random", "pretrain_step": 5})).contains("does not go with"));
        assert!(err(json!({"dropout": 1.0})).contains("must be in [0, 1)"));
        assert!(err(json!({"learning_rate": 0})).contains("positive"));
        assert!(err(json!({"task": "lcqmc", "doc_stride": 64})).contains("span-extraction"));
        assert!(err(json!({"task": "cmrc2018", "max_seq_length": 128})).contains("doc_stride"));
    }

    #[test]
    fn span_tasks_default_to_the_cpu_windows() {
        let p = parse(json!({"task": "cmrc2018"})).unwrap();
        assert_eq!(p.max_seq_length, 256);
        assert_eq!(p.span, SpanConfig::default());
        let p = parse(
            json!({"task": "squad", "max_seq_length": 128, "doc_stride": 32,
                             "max_answer_length": 30}),
        )
        .unwrap();
        assert_eq!((p.span.max_seq_length, p.span.doc_stride), (128, 32));
        assert_eq!(p.span.max_answer_length, 30);
        assert_eq!(parse(json!({"task": "c3"})).unwrap().max_seq_length, 128);
    }
}
