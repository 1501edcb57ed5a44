//! The training params of the `finetune` stage (the data protocol's params are
//! `pipeline_tasks`'s): a serde struct with the defaults the crate docs list, checked, with
//! errors that name the param.

use std::path::{Path, PathBuf};

use pipeline_albert::device::DeviceChoice;
use pipeline_albert::model::MatmulPrecision;
use pipeline_albert::train::{OptimConfig, OptimizerKind};
use pipeline_engine::ParamError;
use pipeline_params::{Count, Flag, Number, Text};
use pipeline_tasks::span_features::SpanConfig;
use pipeline_tasks::{Task, TaskKind};
use serde::Deserialize;
use serde_json::{Map, Value};

/// The training params' keys: [`Given`]'s fields, so that the list is written once.
pub(crate) fn train_params() -> &'static [&'static str] {
    pipeline_params::struct_fields::<Given>()
}

/// The span-extraction params (tasks `cmrc2018`, `squad`).
const SPAN_PARAMS: &[&str] = &[
    "doc_stride",
    "max_query_length",
    "max_answer_length",
    "n_best_size",
];

/// Every param the kind takes: the training params, then the protocol's.
pub fn known() -> &'static [&'static str] {
    static ALL: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    ALL.get_or_init(|| {
        train_params()
            .iter()
            .chain(pipeline_tasks::known_params())
            .copied()
            .collect()
    })
}

/// Where the initial weights come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Init {
    /// `pretrained` (the default): the weights the `pretrain` dep saved.
    Pretrained,
    /// `random`: the `pretrain` dep's architecture and vocabulary with fresh weights (the
    /// "no pretraining" baseline).
    Random,
    /// `checkpoint`: the model directory `init_from` names (a Hugging Face ALBERT directory
    /// or a TensorFlow checkpoint), joined to the workspace root.
    Checkpoint(PathBuf),
}

impl Init {
    /// Its value of the `init` param (`pretrained`, `random`, `checkpoint`), as metrics.json
    /// records it.
    pub fn name(&self) -> &'static str {
        match self {
            Init::Pretrained => "pretrained",
            Init::Random => "random",
            Init::Checkpoint(_) => "checkpoint",
        }
    }
}

pub use pipeline_tasks::kinds::encode::{DEFAULT_MAX_SEQ_LENGTH, Encoding};

/// The training params, checked.
#[derive(Debug, Clone)]
pub struct TrainParams {
    /// Where the initial weights come from (`init`, `init_from`).
    pub init: Init,
    /// With `init: pretrained`, one of the `pretrain` dep's `save_steps` instead of its final
    /// model.
    pub pretrain_step: Option<u64>,
    /// Where it trains (`auto`, `cpu`, `flex`, `tch-cpu`, `cuda:N`).
    pub device: DeviceChoice,
    /// The encoder's matrix products: float32, or bf16 mixed precision (libtorch devices only).
    pub precision: MatmulPrecision,
    /// Passes over the training split, ≥ 1; the best on dev is kept.
    pub epochs: usize,
    /// Training examples per optimiser step, ≥ 1.
    pub batch_size: usize,
    /// Examples per batch when predicting dev and the evaluation sets, ≥ 1.
    pub eval_batch_size: usize,
    /// The peak learning rate, > 0.
    pub learning_rate: f64,
    /// AdamW or LAMB.
    pub optimizer: OptimizerKind,
    /// Weight decay, not applied to LayerNorm or bias.
    pub weight_decay: f64,
    /// The share of the steps with linear warmup, in [0, 1]; linear decay after.
    pub warmup_fraction: f64,
    /// The global gradient norm is clipped to this; 0 disables clipping.
    pub max_grad_norm: f64,
    /// Tokens per row, ≥ 5 (span extraction: the window's length); [`TrainParams::encoding`]
    /// caps it at the model's `max_position_embeddings`.
    pub max_seq_length: usize,
    /// Dropout before the classifier, in [0, 1) (none on the span head).
    pub dropout: f64,
    /// Dropout inside the encoder, in [0, 1) (albert_zh fine-tunes without).
    pub hidden_dropout: f64,
    /// Seeds the classifier's initialisation, the example order and dropout.
    pub seed: u64,
    /// Batch examples of similar length together (fewer padding tokens per batch).
    pub group_by_length: bool,
    /// Span extraction: the windows and the decoding (`max_seq_length` is the window's
    /// length); the defaults, unchecked, for the other kinds.
    pub span: SpanConfig,
}

/// The params as given, typed (defaults for those left out; `null` means left out): its
/// `Default` is where the defaults are written, once; the crate docs' table shows them and a
/// test checks that it shows these (`the_docs_table_shows_the_defaults`). Checked
/// and combined into [`TrainParams`] by [`TrainParams::parse`]. A value of the wrong type is
/// "`key` must be …" in the field type's words ([`pipeline_params::from_object`]).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Given {
    init: Option<Text>,
    init_from: Option<PathText>,
    pretrain_step: Option<SavedStep>,
    device: Text,
    precision: Text,
    epochs: Count,
    batch_size: Count,
    eval_batch_size: Count,
    learning_rate: Number,
    optimizer: Text,
    weight_decay: Number,
    warmup_fraction: Number,
    max_grad_norm: Number,
    max_seq_length: Option<Count>,
    dropout: Number,
    hidden_dropout: Number,
    seed: Count,
    group_by_length: Flag,
    doc_stride: Option<Count>,
    max_query_length: Option<Count>,
    max_answer_length: Option<Count>,
    n_best_size: Option<Count>,
}

impl Default for Given {
    fn default() -> Self {
        Given {
            init: None,
            init_from: None,
            pretrain_step: None,
            device: Text("auto".into()),
            precision: Text("fp32".into()),
            epochs: Count(3),
            batch_size: Count(32),
            eval_batch_size: Count(64),
            learning_rate: Number(1e-4),
            optimizer: Text("adamw".into()),
            weight_decay: Number(0.01),
            warmup_fraction: Number(0.1),
            max_grad_norm: Number(1.0),
            max_seq_length: None,
            dropout: Number(0.1),
            hidden_dropout: Number(0.0),
            seed: Count(42),
            group_by_length: Flag(true),
            doc_stride: None,
            max_query_length: None,
            max_answer_length: None,
            n_best_size: None,
        }
    }
}

/// `init_from`: a directory, relative to the workspace root.
#[derive(Debug, Clone, Deserialize)]
#[serde(try_from = "Value")]
struct PathText(String);

impl TryFrom<Value> for PathText {
    type Error = ParamError;
    fn try_from(v: Value) -> Result<Self, ParamError> {
        match v {
            Value::String(s) => Ok(PathText(s)),
            v => Err(format!("must be a path, not {v}").into()),
        }
    }
}

/// `pretrain_step`: one of the steps the pretrain dep saved, so at least 1.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(try_from = "Value")]
struct SavedStep(u64);

impl TryFrom<Value> for SavedStep {
    type Error = ParamError;
    fn try_from(v: Value) -> Result<Self, ParamError> {
        v.as_u64().filter(|&s| s > 0).map(SavedStep).ok_or_else(|| {
            format!("must be a step number the pretrain dep saved (its save_steps), not {v}").into()
        })
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
        pipeline_params::from_own_keys(p).map_err(String::from)
    }

    /// Where the weights come from: `init` and `init_from` together.
    fn init(&self, root: &Path) -> Result<Init, String> {
        let init_from = self.init_from.as_ref().map(|s| root.join(&s.0));
        Ok(
            match (self.init.as_ref().map(|t| t.0.as_str()), init_from) {
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
            },
        )
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
        ]
        .map(|v| v.map(|c| c.0));
        if !kind.is_some_and(|k| crate::kinds::of(k).span_windows()) {
            if let Some((k, _)) = SPAN_PARAMS.iter().zip(given).find(|(_, v)| v.is_some()) {
                return Err(format!(
                    "{k} is a span-extraction param (tasks cmrc2018, squad), not one of this task"
                ));
            }
            return Ok((
                self.max_seq_length
                    .map_or(DEFAULT_MAX_SEQ_LENGTH as u64, |c| c.0),
                SpanConfig::default(),
            ));
        }
        let d = SpanConfig::default();
        let n = |v: Option<Count>, default: usize| v.map_or(default, Count::usize);
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
        let pretrain_step = g.pretrain_step.map(|s| s.0);
        if pretrain_step.is_some() && init != Init::Pretrained {
            return Err(format!(
                "pretrain_step picks a saved step of the pretrained weights; it does not go with \
                 init: {} (remove it, or use init: pretrained)",
                init.name()
            ));
        }
        for (k, d) in [
            ("dropout", g.dropout.0),
            ("hidden_dropout", g.hidden_dropout.0),
        ] {
            if !(0.0..1.0).contains(&d) {
                return Err(format!("{k} = {d} must be in [0, 1)"));
            }
        }
        let (warmup_fraction, learning_rate) = (g.warmup_fraction.0, g.learning_rate.0);
        if !(0.0..=1.0).contains(&warmup_fraction) {
            return Err(format!(
                "warmup_fraction = {warmup_fraction} must be in [0, 1]"
            ));
        }
        if !(learning_rate > 0.0 && learning_rate.is_finite()) {
            return Err(format!(
                "learning_rate = {learning_rate} must be a positive number"
            ));
        }
        let (max_seq_length, span) = g.span(task_kind(p))?;
        Ok(TrainParams {
            init,
            pretrain_step,
            device: DeviceChoice::parse(&g.device.0)?,
            precision: g.precision.0.parse().map_err(|e| format!("{e}"))?,
            epochs: at_least("epochs", g.epochs.0, 1)? as usize,
            batch_size: at_least("batch_size", g.batch_size.0, 1)? as usize,
            eval_batch_size: at_least("eval_batch_size", g.eval_batch_size.0, 1)? as usize,
            learning_rate,
            optimizer: OptimizerKind::parse(&g.optimizer.0)?,
            weight_decay: g.weight_decay.0,
            warmup_fraction,
            max_grad_norm: g.max_grad_norm.0,
            max_seq_length: at_least("max_seq_length", max_seq_length, 5)? as usize,
            dropout: g.dropout.0,
            hidden_dropout: g.hidden_dropout.0,
            seed: g.seed.0,
            group_by_length: g.group_by_length.0,
            span,
        })
    }

    /// How the stage encodes its examples for a model of `max_positions` positions:
    /// `max_seq_length` no more than those, the span params as given (the window's length
    /// the same).
    pub fn encoding(&self, max_positions: usize) -> Encoding {
        let max_seq_length = self.max_seq_length.min(max_positions);
        Encoding {
            max_seq_length,
            span: SpanConfig {
                max_seq_length,
                ..self.span
            },
        }
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
        assert_eq!(
            err(json!({"precision": "fp16"})),
            "precision \"fp16\": expected fp32 or bf16"
        );
        assert_eq!(
            parse(json!({"precision": "bf16"})).unwrap().precision,
            MatmulPrecision::Bf16
        );
        assert!(err(json!({"task": "lcqmc", "doc_stride": 64})).contains("span-extraction"));
        assert!(err(json!({"task": "cmrc2018", "max_seq_length": 128})).contains("doc_stride"));
    }

    /// The `| \`param\` | default | what |` rows of the crate docs' table.
    fn documented_defaults() -> Vec<(String, String)> {
        include_str!("lib.rs")
            .lines()
            .filter_map(|l| l.strip_prefix("//! | `"))
            .filter_map(|row| {
                let (key, rest) = row.split_once("` | ")?;
                let default = rest.split(" | ").next()?;
                Some((key.to_string(), default.trim_matches('`').to_string()))
            })
            .collect()
    }

    #[test]
    fn the_docs_table_shows_the_defaults() {
        let p = parse(json!({})).unwrap();
        let span = parse(json!({"task": "cmrc2018"})).unwrap().span;
        let expected: Vec<(&str, String)> = vec![
            ("init", p.init.name().into()),
            (
                "pretrain_step",
                p.pretrain_step.map_or("none".into(), |s| s.to_string()),
            ),
            ("init_from", "none".into()),
            ("device", "auto".into()),
            ("precision", p.precision.name().into()),
            ("optimizer", format!("{:?}", p.optimizer).to_lowercase()),
            (
                "max_seq_length",
                format!(
                    "{} ({} for span extraction)",
                    p.max_seq_length, span.max_seq_length
                ),
            ),
            ("group_by_length", p.group_by_length.to_string()),
        ];
        let numbers: Vec<(&str, f64)> = vec![
            ("epochs", p.epochs as f64),
            ("batch_size", p.batch_size as f64),
            ("eval_batch_size", p.eval_batch_size as f64),
            ("learning_rate", p.learning_rate),
            ("weight_decay", p.weight_decay),
            ("warmup_fraction", p.warmup_fraction),
            ("max_grad_norm", p.max_grad_norm),
            ("doc_stride", span.doc_stride as f64),
            ("max_query_length", span.max_query_length as f64),
            ("max_answer_length", span.max_answer_length as f64),
            ("n_best_size", span.n_best_size as f64),
            ("dropout", p.dropout),
            ("hidden_dropout", p.hidden_dropout),
            ("seed", p.seed as f64),
        ];
        let table = documented_defaults();
        let mut keys: Vec<&str> = table.iter().map(|(k, _)| k.as_str()).collect();
        let mut params = train_params().to_vec();
        keys.sort_unstable();
        params.sort_unstable();
        assert_eq!(keys, params, "the table lists every training param");
        for (key, shown) in &table {
            if let Some((_, v)) = expected.iter().find(|(k, _)| k == key) {
                assert_eq!(shown, v, "{key}");
            } else {
                let (_, v) = numbers.iter().find(|(k, _)| k == key).unwrap();
                assert_eq!(shown.parse::<f64>().unwrap(), *v, "{key}");
            }
        }
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
