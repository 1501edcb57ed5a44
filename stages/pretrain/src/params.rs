//! The `pretrain` stage's params: the model (a named albert_zh size or a config file, plus
//! per-field overrides such as `share_type`: [`override_keys`]), the optimisation, the schedule of
//! evaluations and checkpoints, and the device. Read with serde into [`StageParams`] (defaults on
//! the fields, unknown keys refused), then checked, with errors that name the param.

use std::path::{Path, PathBuf};

use pipeline_albert::AlbertConfig;
use pipeline_albert::config::NAMED_CONFIGS;
use pipeline_albert::config::override_keys;
use pipeline_albert::device::DeviceChoice;
use pipeline_albert::model::MatmulPrecision;
use pipeline_albert::train::{OptimConfig, OptimizerKind};
pub use pipeline_params::ParamError;
use pipeline_params::{Count, Flag, Number, Text, from_object, struct_fields};
use serde::Deserialize;
use serde_json::{Map, Value};

/// The stage's own params as written (the model fields are [`override_keys`]); a field left
/// out, or null, takes the default here. Those whose default depends on `steps` are `None`.
#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct StageParams {
    model: Text,
    init_from: Option<PathText>,
    device: Text,
    precision: Text,
    batch_size: BatchSize,
    /// Default 1, or `effective_batch_size / batch_size`.
    grad_accum_steps: Option<Count>,
    effective_batch_size: Option<Count>,
    steps: Count,
    learning_rate: Number,
    /// Default `steps / 10`.
    warmup_steps: Option<Count>,
    weight_decay: Number,
    optimizer: Text,
    beta_1: Number,
    beta_2: Number,
    epsilon: Number,
    max_grad_norm: Number,
    /// Default `steps / 5`.
    eval_interval: Option<Count>,
    eval_batches: EvalBatches,
    /// Default `steps / 10`, at most 500.
    checkpoint_interval: Option<Count>,
    log_interval: Count,
    seed: Count,
    pad_to_max: Flag,
    save_steps: StepList,
    sop: Flag,
}

impl Default for StageParams {
    fn default() -> Self {
        let text = |s: &str| Text(s.to_string());
        StageParams {
            model: text("tiny"),
            init_from: None,
            device: text("auto"),
            precision: text("fp32"),
            batch_size: BatchSize(Some(32)),
            grad_accum_steps: None,
            effective_batch_size: None,
            steps: Count(1000),
            learning_rate: Number(1e-3),
            warmup_steps: None,
            weight_decay: Number(0.01),
            optimizer: text("lamb"),
            beta_1: Number(0.9),
            beta_2: Number(0.999),
            epsilon: Number(1e-6),
            max_grad_norm: Number(1.0),
            eval_interval: None,
            eval_batches: EvalBatches(None),
            checkpoint_interval: None,
            log_interval: Count(10),
            seed: Count(12345),
            pad_to_max: Flag(false),
            save_steps: StepList(Vec::new()),
            sop: Flag(true),
        }
    }
}

/// A path param (relative to the workspace root).
#[derive(Debug, Deserialize)]
#[serde(try_from = "Value")]
struct PathText(String);

impl TryFrom<Value> for PathText {
    type Error = String;
    fn try_from(v: Value) -> Result<Self, String> {
        match v {
            Value::String(s) => Ok(PathText(s)),
            v => Err(format!("must be a path, not {v}")),
        }
    }
}

/// `batch_size`: a number of rows, or `auto` (`None`).
#[derive(Debug, Deserialize)]
#[serde(try_from = "Value")]
struct BatchSize(Option<u64>);

impl TryFrom<Value> for BatchSize {
    type Error = String;
    fn try_from(v: Value) -> Result<Self, String> {
        match v {
            Value::String(s) if s == "auto" => Ok(BatchSize(None)),
            v => v.as_u64().map(|n| BatchSize(Some(n))).ok_or_else(|| {
                format!(
                    "must be a number of rows or auto (the largest power of two that fits the \
                     device), not {v}"
                )
            }),
        }
    }
}

/// `eval_batches`: `auto` (`None`) or a number of batches.
#[derive(Debug, Deserialize)]
#[serde(try_from = "Value")]
struct EvalBatches(Option<u64>);

impl TryFrom<Value> for EvalBatches {
    type Error = String;
    fn try_from(v: Value) -> Result<Self, String> {
        match v {
            Value::String(s) if s == "auto" => Ok(EvalBatches(None)),
            v => v.as_u64().map(|n| EvalBatches(Some(n))).ok_or_else(|| {
                format!("must be auto, 0 (the whole eval shard) or a number of batches, not {v}")
            }),
        }
    }
}

/// `save_steps`: a list, whose items are checked against `steps` by [`save_steps`].
#[derive(Debug, Deserialize)]
#[serde(try_from = "Value")]
struct StepList(Vec<Value>);

impl TryFrom<Value> for StepList {
    type Error = String;
    fn try_from(v: Value) -> Result<Self, String> {
        match v {
            Value::Array(a) => Ok(StepList(a)),
            v => Err(format!(
                "must be a list of step numbers such as [500, 1000], not {v}"
            )),
        }
    }
}

/// Every param the kind takes: the stage's own, then the model fields.
pub fn known_params() -> &'static [&'static str] {
    static ALL: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    ALL.get_or_init(|| {
        struct_fields::<StageParams>()
            .iter()
            .chain(override_keys())
            .copied()
            .collect()
    })
}

/// The share of a run's training time that `eval_batches: auto` spends on evaluation.
pub const EVAL_BUDGET: f64 = 0.08;

/// The params, checked.
#[derive(Debug, Clone)]
pub struct PretrainParams {
    /// `model:` as given: a named size or a path.
    pub model: String,
    /// The config file when `model` is a path (resolved against the workspace root).
    pub model_file: Option<PathBuf>,
    /// The model fields the params set (see [`override_keys`]).
    pub overrides: Map<String, Value>,
    /// A checkpoint to continue pretraining from (resolved against the workspace root).
    pub init_from: Option<PathBuf>,
    /// The device asked for.
    pub device: DeviceChoice,
    /// `device:` as given.
    pub device_name: String,
    /// The matrix products' dtype: float32, or bf16 mixed precision (libtorch devices only).
    pub precision: MatmulPrecision,
    /// Rows per micro-batch. Under `batch_size: auto`, the CPU's choice until
    /// [`PretrainParams::with_micro_batch`] sets the one found on a GPU.
    pub batch_size: usize,
    /// Micro-batches per optimiser step.
    pub grad_accum_steps: usize,
    /// `batch_size: auto`: what the micro-batch is chosen under; `None` for a number.
    pub auto_batch: Option<AutoBatch>,
    /// The optimiser, its schedule and the number of steps (`total_steps`).
    pub optim: OptimConfig,
    /// Evaluate every this many steps (and at the end).
    pub eval_interval: u64,
    /// Batches per evaluation; `None` (the default, `auto`) sizes evaluations to the budget of
    /// [`PretrainParams::eval_batches_for`]; `Some(0)` is the whole eval shard.
    pub eval_batches: Option<u64>,
    /// Save a checkpoint every this many steps.
    pub checkpoint_interval: u64,
    /// A `metrics.jsonl` line every this many steps.
    pub log_interval: u64,
    /// Initialisation, data order, dropout.
    pub seed: u64,
    /// Pad every batch to `max_seq_length`.
    pub pad_to_max: bool,
    /// Steps (ascending, each below `steps`) at which the model is also exported, under
    /// `steps/<N>/` of the artifact, for fine-tuning intermediate checkpoints.
    pub save_steps: Vec<u64>,
    /// Train the sentence-order head (ALBERT's MLM + SOP); `false` trains the masked LM alone
    /// (the SOP ablation of the ALBERT paper's Table 5).
    pub sop: bool,
}

/// `batch_size: auto`: the micro-batch is the largest power of two that fits the device
/// (`crate::auto_batch`), divides `effective_batch_size` when one is given, and is at most
/// [`AUTO_BATCH_MAX`] rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AutoBatch {
    /// Rows per optimiser step, when the params fix them: the accumulation makes up the rest.
    pub effective: Option<usize>,
}

/// The largest micro-batch `batch_size: auto` tries without an `effective_batch_size`. Why a
/// bound at all: the probe costs two steps per size tried, and a micro-batch is the optimiser's
/// batch unless accumulation is asked for, so an unbounded one would change the recipe with
/// the GPU's memory.
pub const AUTO_BATCH_MAX: usize = 4096;

/// The micro-batch `batch_size: auto` takes on a CPU, where nothing is probed: host memory
/// holds any batch a CPU trains at a useful speed, and more rows per micro-batch do not train
/// faster there (docs/performance.md, "Batch size on a CPU": tiny at 16 to 128 rows
/// trained at 5,400–6,100 tokens/s, the spread within a size as large as between sizes).
pub const AUTO_BATCH_CPU: usize = 32;

impl AutoBatch {
    /// The micro-batch for `fits` rows (a power of two): at most `fits`, and the largest power
    /// of two dividing the effective batch when there is one.
    pub fn micro_batch(&self, fits: usize) -> usize {
        let fits = fits.max(1);
        let pow2 = 1usize << (usize::BITS - 1 - fits.leading_zeros());
        match self.effective {
            // The lowest set bit of e is the largest power of two that divides it.
            Some(e) => pow2.min(e & e.wrapping_neg()),
            None => pow2,
        }
    }

    /// The micro-batch for `fits` rows ([`AutoBatch::micro_batch`]) and the micro-batches per
    /// optimiser step: as many as make up the effective batch, else `grad_accum`.
    pub fn split(&self, fits: usize, grad_accum: usize) -> (usize, usize) {
        let rows = self.micro_batch(fits);
        (rows, self.effective.map_or(grad_accum, |e| e / rows))
    }

    /// The most rows worth trying: the effective batch, else [`AUTO_BATCH_MAX`].
    pub fn cap(&self) -> usize {
        self.effective.unwrap_or(AUTO_BATCH_MAX)
    }
}

/// The micro-batch and accumulation the three batch params give: `batch_size` (a number, or
/// `None` for `auto`), `grad_accum_steps` and `effective_batch_size`, of which the last two
/// are exclusive (each follows from the other and `batch_size`).
fn batching(
    batch_size: Option<u64>,
    grad_accum: Option<Count>,
    effective: Option<Count>,
) -> Result<(usize, usize, Option<AutoBatch>), ParamError> {
    let grad_accum = grad_accum
        .map(|g| at_least_one("grad_accum_steps", g))
        .transpose()?;
    let effective = effective
        .map(|e| at_least_one("effective_batch_size", e))
        .transpose()?;
    if let (Some(g), Some(e)) = (grad_accum, effective) {
        return Err(format!(
            "grad_accum_steps ({g}) and effective_batch_size ({e}) are both given: each follows \
             from the other and batch_size, so give one of them"
        )
        .into());
    }
    let Some(rows) = batch_size else {
        let auto = AutoBatch {
            effective: effective.map(|e| e as usize),
        };
        let (rows, accum) = auto.split(AUTO_BATCH_CPU, grad_accum.unwrap_or(1) as usize);
        return Ok((rows, accum, Some(auto)));
    };
    let rows = at_least_one("batch_size", Count(rows))?;
    let accum = match effective {
        Some(e) if !e.is_multiple_of(rows) => {
            return Err(format!(
                "effective_batch_size {e} is not a multiple of batch_size {rows}: the rows of a \
                 step are batch_size × grad_accum_steps (or use batch_size: auto, which picks a \
                 micro-batch that divides it)"
            )
            .into());
        }
        Some(e) => e / rows,
        None => grad_accum.unwrap_or(1),
    };
    Ok((rows as usize, accum as usize, None))
}

/// `save_steps`: distinct step numbers in `1 .. steps` (sorted here).
fn save_steps(list: &[Value], steps: u64) -> Result<Vec<u64>, ParamError> {
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

/// Splits an instance's params into the stage's own (nulls dropped: a null is a default) and the
/// model overrides; other keys (matrix coordinates inherited from deps) are not the stage's.
fn split(p: &Map<String, Value>) -> (Map<String, Value>, Map<String, Value>) {
    let own = struct_fields::<StageParams>();
    let pick = |keep: &dyn Fn(&str, &Value) -> bool| -> Map<String, Value> {
        p.iter()
            .filter(|(k, v)| keep(k, v))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    (
        pick(&|k, v| own.contains(&k) && !v.is_null()),
        pick(&|k, _| override_keys().contains(&k)),
    )
}

/// `at_least_one("batch_size", n)`: the value, or the error a zero gets.
fn at_least_one(name: &str, n: Count) -> Result<u64, ParamError> {
    if n.0 == 0 {
        return Err(format!("{name} must be at least 1 (got 0)").into());
    }
    Ok(n.0)
}

impl PretrainParams {
    /// Parses and checks the params; `root` resolves relative paths (`model`, `init_from`).
    pub fn parse(p: &Map<String, Value>, root: &Path) -> Result<PretrainParams, ParamError> {
        let (own, overrides) = split(p);
        let s: StageParams = from_object(&own)?;
        let model = s.model.0;
        let model_file = model_file(&model, root)?;
        let device = DeviceChoice::parse(&s.device.0)?;
        let precision: MatmulPrecision = s.precision.0.parse().map_err(|e| format!("{e}"))?;
        let (batch_size, grad_accum_steps, auto_batch) =
            batching(s.batch_size.0, s.grad_accum_steps, s.effective_batch_size)?;
        let steps = at_least_one("steps", s.steps)?;
        let optim = OptimConfig {
            optimizer: OptimizerKind::parse(&s.optimizer.0)?,
            learning_rate: s.learning_rate.0,
            weight_decay: s.weight_decay.0,
            beta_1: s.beta_1.0,
            beta_2: s.beta_2.0,
            epsilon: s.epsilon.0,
            warmup_steps: s.warmup_steps.map_or(steps / 10, |c| c.0),
            total_steps: steps,
            max_grad_norm: s.max_grad_norm.0,
        };
        optim.validate()?;
        if optim.warmup_steps > steps {
            return Err(format!(
                "warmup_steps = {} is more than steps = {steps}",
                optim.warmup_steps
            )
            .into());
        }
        let params = PretrainParams {
            model,
            model_file,
            overrides,
            init_from: s.init_from.map(|PathText(s)| root.join(s)),
            device,
            device_name: s.device.0,
            precision,
            batch_size,
            grad_accum_steps,
            auto_batch,
            optim,
            eval_interval: s.eval_interval.map_or((steps / 5).max(1), |c| c.0),
            eval_batches: s.eval_batches.0,
            checkpoint_interval: s
                .checkpoint_interval
                .map_or((steps / 10).clamp(1, 500), |c| c.0),
            log_interval: s.log_interval.0.max(1),
            seed: s.seed.0,
            pad_to_max: s.pad_to_max.0,
            save_steps: save_steps(&s.save_steps.0, steps)?,
            sop: s.sop.0,
        };
        // Without a file to read, the model part can be checked now (with the file, at run time).
        if params.model_file.is_none() && params.init_from.is_none() {
            params.model_config(None)?;
        }
        Ok(params)
    }

    /// These params with the micro-batch `batch_size: auto` takes where `rows` rows fit
    /// ([`AutoBatch::split`]): the accumulation keeps `effective_batch_size` when one is given.
    /// Params with a numeric `batch_size` stay as they are.
    pub fn with_micro_batch(&self, rows: usize) -> PretrainParams {
        let Some(auto) = self.auto_batch else {
            return self.clone();
        };
        let (rows, grad_accum_steps) = auto.split(rows, self.grad_accum_steps);
        PretrainParams {
            batch_size: rows,
            grad_accum_steps,
            ..self.clone()
        }
    }

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

    /// The model config: the named size or the file, with the overrides applied, and the
    /// vocabulary size of the data (`vocab_size` from the `vocab` dep) unless a config file or
    /// an explicit `vocab_size` param says otherwise, which must then agree with the data.
    pub fn model_config(&self, data_vocab: Option<usize>) -> Result<AlbertConfig, ParamError> {
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
                )
                .into());
            }
            config.vocab_size = v;
        }
        Ok(config)
    }
}

/// The config file `model` names, if it is a path; `None` for a named size.
fn model_file(model: &str, root: &Path) -> Result<Option<PathBuf>, ParamError> {
    if NAMED_CONFIGS.contains(&model) {
        Ok(None)
    } else if model.contains('/') || model.ends_with(".json") {
        Ok(Some(root.join(model)))
    } else {
        // Neither a size nor a path: say which sizes there are.
        Err(AlbertConfig::named(model)
            .map(|_| ())
            .unwrap_err()
            .message
            .into())
    }
}

#[cfg(test)]
#[path = "params_tests.rs"]
mod tests;
