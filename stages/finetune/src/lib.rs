//! The `finetune` stage kind: sentence-pair classification (LCQMC, AFQMC, XNLI and the other
//! Chinese NLI sets, or any TSV) and multiple choice, from a pretrained ALBERT, from random
//! weights (the "no pretraining" baseline), or from a Hugging Face checkpoint.
//!
//! The data protocol (train files, a dev file or a held-out fraction, named evaluation sets,
//! bad-row handling) is `pipeline_tasks`'s; see that crate for its params. The training params:
//!
//! | param | default | what |
//! |---|---|---|
//! | `init` | `pretrained` | `pretrained` (the `pretrain` dep's weights), `random` (its architecture and vocabulary, fresh weights), or `checkpoint` (with `init_from`) |
//! | `init_from` | none | a Hugging Face ALBERT directory (config.json, model.safetensors or pytorch_model.bin, vocab.txt, tokenizer.json) |
//! | `device` | `auto` | `auto`, `cpu`, `flex`, `tch-cpu`, `cuda:N` |
//! | `epochs` | 3 | passes over the training set; the best on dev is kept |
//! | `batch_size` | 32 | |
//! | `eval_batch_size` | 64 | |
//! | `learning_rate` | 1e-4 | peak learning rate (albert_zh: 1e-4 … 2e-5) |
//! | `optimizer` | `adamw` | `adamw` or `lamb` |
//! | `weight_decay` | 0.01 | not applied to LayerNorm or bias |
//! | `warmup_fraction` | 0.1 | share of the steps with linear warmup, then linear decay |
//! | `max_grad_norm` | 1.0 | global-norm clipping; 0 disables |
//! | `max_seq_length` | 128 | `[CLS] a [SEP] b [SEP]`, longest-first truncation |
//! | `dropout` | 0.1 | dropout before the classifier |
//! | `hidden_dropout` | 0.0 | dropout inside the encoder (albert_zh: none) |
//! | `seed` | 42 | classifier initialisation, example order, dropout |
//!
//! Output: `config.json` + `model.safetensors` (`AlbertForSequenceClassification` or
//! `AlbertForMultipleChoice` layout, with `id2label`), `vocab.txt`, `tokenizer.json`,
//! `predictions.tsv` (every dev and evaluation example: texts, gold, predicted, probabilities),
//! `metrics.json` (protocol, per-epoch history, dev and evaluation metrics; see
//! docs/metrics.md) and `metrics.jsonl` (one line per epoch).

pub mod encode;
pub mod predict;

use std::fmt::Write as _;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};
use burn::module::Module;
use burn::optim::GradientsParams;
use burn::tensor::{Device, Int, Tensor, TensorData};
use pipeline_albert::device::{self, DeviceChoice, ResolvedDevice};
use pipeline_albert::model::weighted_cross_entropy;
use pipeline_albert::train::{OptimConfig, OptimizerKind, clip_global_norm};
use pipeline_albert::{
    Albert, AlbertConfig, AlbertForMultipleChoice, AlbertForSequenceClassification, hf,
};
use pipeline_engine::stage::{Stage, StageContext};
use pipeline_tasks::{Examples, Metrics, Protocol, ProtocolSpec, evaluate};
use serde::Serialize;
use serde_json::{Map, Value, json};

use encode::{Encoded, PairEncoder, batch_input};
use predict::{argmax, choice_probabilities, chunks_for, pair_probabilities};

pub struct FinetuneStage;

const TRAIN_PARAMS: &[&str] = &[
    "init",
    "init_from",
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
];

fn known() -> &'static [&'static str] {
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
    fn name(&self) -> &'static str {
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
        })
    }
}

impl Stage for FinetuneStage {
    fn kind(&self) -> &'static str {
        "finetune"
    }

    fn code_version(&self) -> &'static str {
        env!("STAGE_CODE_VERSION")
    }

    fn known_params(&self) -> &'static [&'static str] {
        known()
    }

    fn validate(&self, params: &Map<String, Value>, _spec: &Value) -> Result<(), String> {
        TrainParams::parse(params, Path::new("."))?;
        let protocol: Map<String, Value> = params
            .iter()
            .filter(|(k, _)| !TRAIN_PARAMS.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        ProtocolSpec::from_params(&protocol).map_err(|e| e.to_string())?;
        Ok(())
    }

    fn run(&self, ctx: &StageContext) -> anyhow::Result<()> {
        let train = TrainParams::parse(ctx.params, ctx.root).map_err(anyhow::Error::msg)?;
        let protocol_params: Map<String, Value> = ctx
            .params
            .iter()
            .filter(|(k, _)| pipeline_tasks::known_params().contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let spec =
            ProtocolSpec::from_params(&protocol_params).map_err(|e| anyhow::anyhow!("{e}"))?;
        let declared: Vec<PathBuf> = ctx
            .inputs
            .iter()
            .map(|p| std::fs::canonicalize(p).unwrap_or(p.clone()))
            .collect();
        for path in spec.paths() {
            let full = ctx.root.join(path);
            let full = std::fs::canonicalize(&full).unwrap_or(full);
            if full.exists() && !declared.contains(&full) {
                tracing::warn!(
                    "{}: {path} is not among the stage's `inputs:`, so a change to it will not re-run the stage",
                    ctx.instance
                );
            }
        }
        run(ctx, &train, &spec)
    }
}

/// The model being fine-tuned.
#[derive(Clone)]
enum TaskModel {
    Pair(AlbertForSequenceClassification),
    Choice(AlbertForMultipleChoice),
}

impl TaskModel {
    fn valid(&self) -> TaskModel {
        match self {
            TaskModel::Pair(m) => TaskModel::Pair(m.valid()),
            TaskModel::Choice(m) => TaskModel::Choice(m.valid()),
        }
    }

    fn num_params(&self) -> usize {
        match self {
            TaskModel::Pair(m) => m.num_params(),
            TaskModel::Choice(m) => m.num_params(),
        }
    }
}

/// Encoded examples of one split: rows per example (1 for pairs, N for choice) and labels.
struct EncodedSplit {
    name: String,
    rows: Vec<Vec<Encoded>>,
    labels: Vec<usize>,
}

fn encode_split(name: &str, ex: &Examples, enc: &PairEncoder) -> EncodedSplit {
    match ex {
        Examples::Pair(v) => EncodedSplit {
            name: name.into(),
            rows: v
                .iter()
                .map(|e| vec![enc.encode(&e.text_a, &e.text_b)])
                .collect(),
            labels: v.iter().map(|e| e.label).collect(),
        },
        Examples::Choice(v) => EncodedSplit {
            name: name.into(),
            rows: v
                .iter()
                .map(|e| e.choices.iter().map(|c| enc.encode(&e.prompt, c)).collect())
                .collect(),
            labels: v.iter().map(|e| e.answer).collect(),
        },
    }
}

/// A deterministic shuffle (SplitMix64 Fisher–Yates): the order depends only on the seed.
fn shuffled(n: usize, seed: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    let mut state = seed;
    let mut next = || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    for i in (1..n).rev() {
        let j = (next() % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    order
}

fn probabilities(
    model: &TaskModel,
    split: &EncodedSplit,
    p: &TrainParams,
    device: &Device,
    chunks: usize,
) -> Vec<Vec<f32>> {
    let noop = |_: usize| {};
    match model {
        TaskModel::Pair(m) => {
            let rows: Vec<Encoded> = split.rows.iter().map(|r| r[0].clone()).collect();
            pair_probabilities(m, &rows, p.eval_batch_size, chunks, device, &noop)
        }
        TaskModel::Choice(m) => choice_probabilities(
            m,
            &split.rows,
            (p.eval_batch_size / 4).max(1),
            chunks,
            device,
            &noop,
        ),
    }
}

#[derive(Debug, Clone, Serialize)]
struct EpochRecord {
    epoch: usize,
    train_loss: f64,
    train_accuracy: f64,
    dev_accuracy: f64,
    dev_f1: Option<f64>,
    dev_macro_f1: f64,
    seconds: f64,
}

fn metrics_json(m: &Metrics) -> Value {
    json!({
        "examples": m.examples,
        "accuracy": m.accuracy,
        "f1": m.f1,
        "macro_f1": m.macro_f1,
        "confusion": {"labels": m.confusion.labels, "counts": m.confusion.counts},
    })
}

/// The epoch with the best dev accuracy so far: its weights, dev metrics and dev probabilities.
struct BestEpoch {
    epoch: usize,
    model: TaskModel,
    dev_metrics: Metrics,
    dev_probs: Vec<Vec<f32>>,
}

fn run(ctx: &StageContext, p: &TrainParams, spec: &ProtocolSpec) -> anyhow::Result<()> {
    let started = Instant::now();
    let ResolvedDevice {
        device,
        name: device_name,
        ..
    } = device::resolve(p.device).map_err(anyhow::Error::msg)?;
    let log_path = ctx.log_dir.join("finetune.log");
    let log = |line: &str| {
        tracing::info!(target: "finetune", "{}: {line}", ctx.instance);
        let _ = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .and_then(|mut f| writeln!(f, "{line}"));
    };

    // The data.
    let protocol: Protocol = spec.load(ctx.root).map_err(|e| anyhow::anyhow!("{e}"))?;
    for f in &protocol.files {
        if f.bad.total > 0 {
            log(&format!(
                "{}: {} bad rows skipped ({:?}), e.g. {}",
                f.path,
                f.bad.total,
                f.bad.by_reason,
                f.bad
                    .samples
                    .iter()
                    .take(3)
                    .map(|b| format!("line {}: {:?}", b.line, b.reason))
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
        }
    }
    if protocol.train.examples.is_empty() {
        bail!("the protocol has no training examples");
    }
    let labels = protocol.labels.clone();
    let is_choice = protocol.num_choices.is_some();

    // The starting point: the model directory with weights, config and tokenizer.
    let pretrain = ctx.dep("pretrain");
    let (source_dir, pretrain_instance) = match &p.init {
        Init::Checkpoint(dir) => (dir.clone(), None),
        Init::Pretrained | Init::Random => {
            let dep = pretrain.with_context(|| {
                format!(
                    "init: {} needs a `pretrain` dep (deps: [pretrain]) for its weights, \
                     architecture and vocabulary; or set init_from: DIR",
                    p.init.name()
                )
            })?;
            (dep.dir.clone(), Some(dep.instance.clone()))
        }
    };
    let ad = device.clone().autodiff();
    ad.seed(p.seed);
    let (mut config, backbone): (AlbertConfig, Albert) = match &p.init {
        Init::Random => {
            let c = hf::read_config(&source_dir)?;
            (
                c.clone(),
                Albert::new(&with_dropout(&c, p.hidden_dropout), &ad),
            )
        }
        _ => {
            let (c, b) = hf::load_backbone(&source_dir, &ad)
                .with_context(|| format!("loading the backbone of {}", source_dir.display()))?;
            (c, b)
        }
    };
    config = with_dropout(&config, p.hidden_dropout);
    let backbone = set_hidden_dropout(backbone, p.hidden_dropout);
    let encoder = PairEncoder::load(
        &source_dir,
        p.max_seq_length.min(config.max_position_embeddings),
    )?;
    if encoder.vocab.len() != config.vocab_size {
        bail!(
            "{}: vocab.txt has {} tokens but the model's vocab_size is {}",
            source_dir.display(),
            encoder.vocab.len(),
            config.vocab_size
        );
    }
    let mut model = if is_choice {
        TaskModel::Choice(AlbertForMultipleChoice::from_backbone(
            backbone, &config, p.dropout, &ad,
        ))
    } else {
        TaskModel::Pair(AlbertForSequenceClassification::from_backbone(
            backbone,
            &config,
            labels.len(),
            p.dropout,
            &ad,
        ))
    };

    let train_set = encode_split("train", &protocol.train.examples, &encoder);
    let dev_set = encode_split("dev", &protocol.dev.examples, &encoder);
    let eval_sets: Vec<EncodedSplit> = protocol
        .eval
        .iter()
        .map(|s| encode_split(&s.name, &s.examples, &encoder))
        .collect();
    let steps_per_epoch = train_set.rows.len().div_ceil(p.batch_size);
    let total_steps = (steps_per_epoch * p.epochs) as u64;
    let optim_config = OptimConfig {
        optimizer: p.optimizer,
        learning_rate: p.learning_rate,
        weight_decay: p.weight_decay,
        beta_1: 0.9,
        beta_2: 0.999,
        epsilon: if p.optimizer == OptimizerKind::Lamb {
            1e-6
        } else {
            1e-8
        },
        warmup_steps: (total_steps as f64 * p.warmup_fraction).round() as u64,
        total_steps,
        max_grad_norm: p.max_grad_norm,
    };
    let mut optim = optim_config.build();
    let chunks = chunks_for(&device_name);
    log(&format!(
        "{} ({}): {} train / {} dev examples, {} evaluation sets; init {} from {}; {} steps on {device_name}",
        ctx.instance,
        spec_task_name(&protocol),
        train_set.rows.len(),
        dev_set.rows.len(),
        eval_sets.len(),
        p.init.name(),
        source_dir.display(),
        total_steps
    ));
    ctx.progress.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner:.cyan} {prefix:.bold} {elapsed:>4} [{bar:25.cyan/blue}] {pos}/{len} {msg} ETA {eta}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    ctx.progress.set_length(total_steps);

    let mut history: Vec<EpochRecord> = Vec::new();
    let mut best: Option<BestEpoch> = None;
    let mut step = 0u64;
    let mut train_seconds = 0.0;
    let jsonl = ctx.out_dir.join("metrics.jsonl");
    let mut jsonl_text = String::new();
    for epoch in 1..=p.epochs {
        let t0 = Instant::now();
        let order = shuffled(
            train_set.rows.len(),
            p.seed ^ (epoch as u64).wrapping_mul(0x2545_F491_4F6C_DD1D),
        );
        let (mut loss_sum, mut correct, mut seen) = (0.0, 0.0, 0usize);
        for batch in order.chunks(p.batch_size) {
            ad.seed(p.seed.wrapping_add(step));
            let labels_t = Tensor::<1, Int>::from_data(
                TensorData::new(
                    batch
                        .iter()
                        .map(|&i| train_set.labels[i] as i64)
                        .collect::<Vec<_>>(),
                    [batch.len()],
                ),
                &ad,
            );
            let lr = optim_config.lr_at(step);
            let (next, loss_v, ok) = match model {
                TaskModel::Pair(m) => {
                    let rows: Vec<&Encoded> =
                        batch.iter().map(|&i| &train_set.rows[i][0]).collect();
                    let input = batch_input(&rows, &ad);
                    let (m, l, c) = train_step(
                        m,
                        |m| m.forward(&input),
                        labels_t,
                        &mut optim,
                        lr,
                        p.max_grad_norm,
                    );
                    (TaskModel::Pair(m), l, c)
                }
                TaskModel::Choice(m) => {
                    let n = train_set.rows[batch[0]].len();
                    let rows: Vec<&Encoded> = batch
                        .iter()
                        .flat_map(|&i| train_set.rows[i].iter())
                        .collect();
                    let input = batch_input(&rows, &ad);
                    let (m, l, c) = train_step(
                        m,
                        |m| m.forward(&input, n),
                        labels_t,
                        &mut optim,
                        lr,
                        p.max_grad_norm,
                    );
                    (TaskModel::Choice(m), l, c)
                }
            };
            if !loss_v.is_finite() {
                bail!(
                    "epoch {epoch}, step {}: the loss is {loss_v} (learning rate {lr:.3e}); training stopped: lower learning_rate",
                    step + 1,
                );
            }
            model = next;
            loss_sum += loss_v * batch.len() as f64;
            correct += ok;
            seen += batch.len();
            step += 1;
            ctx.progress.set_position(step);
        }
        let seconds = t0.elapsed().as_secs_f64();
        train_seconds += seconds;
        let eval_model = model.valid();
        let dev_probs = probabilities(&eval_model, &dev_set, p, &device, chunks);
        let dev_pred: Vec<usize> = dev_probs.iter().map(|q| argmax(q)).collect();
        let dev_metrics = evaluate(&dev_set.labels, &dev_pred, &labels)
            .map_err(|e| anyhow::anyhow!("dev metrics: {e}"))?;
        let record = EpochRecord {
            epoch,
            train_loss: loss_sum / seen.max(1) as f64,
            train_accuracy: correct / seen.max(1) as f64,
            dev_accuracy: dev_metrics.accuracy,
            dev_f1: dev_metrics.f1,
            dev_macro_f1: dev_metrics.macro_f1,
            seconds,
        };
        log(&serde_json::to_string(&record)?);
        ctx.progress.set_message(format!(
            "epoch {epoch}: loss {:.3}, dev acc {:.3}",
            record.train_loss, record.dev_accuracy
        ));
        writeln!(jsonl_text, "{}", serde_json::to_string(&record)?)?;
        let better = best
            .as_ref()
            .is_none_or(|b| dev_metrics.accuracy > b.dev_metrics.accuracy);
        if better {
            best = Some(BestEpoch {
                epoch,
                model: eval_model,
                dev_metrics,
                dev_probs,
            });
        }
        history.push(record);
    }
    let Some(BestEpoch {
        epoch: best_epoch,
        model: best_model,
        dev_metrics,
        dev_probs,
    }) = best
    else {
        bail!("no epoch was trained");
    };
    std::fs::write(&jsonl, jsonl_text)?;

    // Evaluation sets with the best epoch's weights, and predictions.tsv.
    let t_eval = Instant::now();
    let mut eval_json = Map::new();
    let mut predictions = String::from("set\tline\ttext_a\ttext_b\tgold\tpredicted");
    for l in &labels {
        write!(predictions, "\tp_{l}")?;
    }
    predictions.push('\n');
    let mut eval_rows = 0usize;
    let mut write_rows =
        |name: &str, examples: &Examples, probs: &[Vec<f32>]| -> anyhow::Result<()> {
            for (i, q) in probs.iter().enumerate() {
                let (line, a, b, gold) = match examples {
                    Examples::Pair(v) => (
                        v[i].line,
                        v[i].text_a.clone(),
                        v[i].text_b.clone(),
                        v[i].label,
                    ),
                    Examples::Choice(v) => (
                        v[i].line,
                        v[i].prompt.clone(),
                        v[i].choices.join(" | "),
                        v[i].answer,
                    ),
                };
                write!(
                    predictions,
                    "{name}\t{line}\t{}\t{}\t{}\t{}",
                    clean_tsv(&a),
                    clean_tsv(&b),
                    labels[gold],
                    labels[argmax(q)]
                )?;
                for x in q {
                    write!(predictions, "\t{x:.6}")?;
                }
                predictions.push('\n');
            }
            Ok(())
        };
    write_rows("dev", &protocol.dev.examples, &dev_probs)?;
    for (set, split) in eval_sets.iter().zip(&protocol.eval) {
        let probs = probabilities(&best_model, set, p, &device, chunks);
        eval_rows += set.rows.iter().map(Vec::len).sum::<usize>();
        let pred: Vec<usize> = probs.iter().map(|q| argmax(q)).collect();
        let m = evaluate(&set.labels, &pred, &labels)
            .map_err(|e| anyhow::anyhow!("{} metrics: {e}", set.name))?;
        log(&format!(
            "{}: accuracy {:.4}{} on {} examples",
            set.name,
            m.accuracy,
            m.f1.map(|f| format!(", F1 {f:.4}")).unwrap_or_default(),
            m.examples
        ));
        eval_json.insert(set.name.clone(), metrics_json(&m));
        write_rows(&set.name, &split.examples, &probs)?;
    }
    let eval_seconds = t_eval.elapsed().as_secs_f64();
    std::fs::write(ctx.out_dir.join("predictions.tsv"), predictions)?;

    // The model in the Hugging Face layout, with its tokenizer.
    match &best_model {
        TaskModel::Pair(m) => hf::save_classifier(ctx.out_dir, &config, m, &labels)?,
        TaskModel::Choice(m) => hf::save_multiple_choice(ctx.out_dir, &config, m)?,
    }
    for f in ["vocab.txt", "tokenizer.json"] {
        let src = source_dir.join(f);
        if src.is_file() {
            std::fs::copy(&src, ctx.out_dir.join(f))?;
        }
    }
    let examples_trained = (train_set.rows.len() * p.epochs) as f64;
    let metrics = json!({
        "task": spec_task_name(&protocol),
        "kind": if is_choice { "choice" } else { "pair" },
        "labels": labels,
        "init": p.init.name(),
        "init_from": match &p.init { Init::Checkpoint(d) => Some(d.display().to_string()), _ => None },
        "pretrain_instance": pretrain_instance,
        "share_type": config.share_type.name(),
        "ln_type": config.ln_type.name(),
        "config": config,
        "parameters": best_model.num_params(),
        "protocol": protocol.to_json(),
        "epochs": p.epochs,
        "steps": step,
        "batch_size": p.batch_size,
        "learning_rate": p.learning_rate,
        "optimizer": optim_config,
        "max_seq_length": encoder.max_seq_length,
        "warmup_steps": optim_config.warmup_steps,
        "dropout": p.dropout,
        "hidden_dropout": p.hidden_dropout,
        "seed": p.seed,
        "history": history,
        "best_epoch": best_epoch,
        "dev": metrics_json(&dev_metrics),
        "eval": eval_json,
        "train_seconds": train_seconds,
        "train_examples_per_s": examples_trained / train_seconds.max(1e-9),
        "eval_sentences_per_s": eval_rows as f64 / eval_seconds.max(1e-9),
        "wall_seconds": started.elapsed().as_secs_f64(),
        "device": device_name,
        "threads": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
    });
    std::fs::write(
        ctx.out_dir.join("metrics.json"),
        serde_json::to_string_pretty(&metrics)? + "\n",
    )?;
    Ok(())
}

/// The task's name as metrics.json reports it.
fn spec_task_name(p: &Protocol) -> String {
    p.spec.task.name().to_string()
}

/// Tabs and newlines inside a text would break predictions.tsv's columns.
fn clean_tsv(s: &str) -> String {
    s.replace(['\t', '\n', '\r'], " ")
}

fn with_dropout(c: &AlbertConfig, hidden: f64) -> AlbertConfig {
    let mut c = c.clone();
    c.hidden_dropout_prob = hidden;
    c
}

/// A loaded backbone keeps the dropout of its config file; fine-tuning sets its own.
fn set_hidden_dropout(mut albert: Albert, p: f64) -> Albert {
    use burn::nn::DropoutConfig;
    albert.embeddings.dropout = DropoutConfig::new(p).init();
    for a in &mut albert.encoder.attentions {
        a.output_dropout = DropoutConfig::new(p).init();
    }
    for f in &mut albert.encoder.ffns {
        f.dropout = DropoutConfig::new(p).init();
    }
    albert
}

/// One optimiser step of `m` on a batch: cross-entropy of `forward(m)` against `labels`,
/// global-norm clipping, the optimiser. Returns the new module, the loss and the number of
/// correct predictions; a non-finite loss returns the module unchanged.
fn train_step<M: Module + Clone>(
    m: M,
    forward: impl Fn(&M) -> Tensor<2>,
    labels: Tensor<1, Int>,
    optim: &mut burn::optim::ModuleOptimizer,
    lr: f64,
    max_grad_norm: f64,
) -> (M, f64, f64) {
    let logits = forward(&m);
    let [n, _] = logits.dims();
    let weights = Tensor::ones([n], &logits.device());
    let (loss, correct) = weighted_cross_entropy(logits, labels, weights);
    let loss_v: f64 = loss.clone().detach().into_scalar::<f64>();
    let correct: f64 = correct.into_scalar::<f64>();
    if !loss_v.is_finite() {
        return (m, loss_v, correct);
    }
    let grads = GradientsParams::from_grads(loss.backward(), &m);
    let (grads, _) = clip_global_norm(&m, grads, max_grad_norm);
    (optim.step(lr, m, grads), loss_v, correct)
}
