//! The `finetune` stage kind: sentence-pair classification (LCQMC, AFQMC, XNLI and the other
//! Chinese NLI sets, or any TSV), single-text classification (ChnSentiCorp, SMP2020-EWECT, or
//! any TSV), token classification (MSRA NER, or any tagging file in TSV or CoNLL layout),
//! multiple choice (any JSONL; C3 with its contexts), and span extraction (CMRC 2018, any
//! SQuAD v1 file), from a pretrained ALBERT, from random weights (the "no pretraining"
//! baseline), or from a Hugging Face checkpoint. Every kind goes through the same stage, the
//! shape of which [`kinds`] describes: a kind is one module there.
//!
//! The data protocol (train files, a dev file or a held-out fraction, named evaluation sets,
//! bad-row handling) is `pipeline_tasks`'s; see that crate for its params. The training params:
//!
//! | param | default | what |
//! |---|---|---|
//! | `init` | `pretrained` | `pretrained` (the `pretrain` dep's weights), `random` (its architecture and vocabulary, fresh weights), or `checkpoint` (with `init_from`) |
//! | `pretrain_step` | none | with `init: pretrained`, fine-tune the model the `pretrain` dep saved at this step (one of its `save_steps`) instead of its final one: a matrix over it gives downstream accuracy against pretraining tokens |
//! | `init_from` | none | a Hugging Face ALBERT directory (config.json, model.safetensors or pytorch_model.bin, vocab.txt, tokenizer.json), or a TensorFlow checkpoint of albert_zh or google-research/albert (directory, prefix or .index; albert_config.json and vocab.txt beside it) |
//! | `device` | `auto` | `auto`, `cpu`, `flex`, `tch-cpu`, `cuda:N` |
//! | `precision` | `fp32` | `fp32`, or `bf16`: mixed precision as `torch.autocast` does it, the matrix products (encoder, pooler, head) in bfloat16 on float32 master weights, LayerNorm, softmax, GELU and the loss in float32; libtorch devices only (`tch-cpu`, `cuda:N`), refused on `flex`; dev and the evaluation sets are predicted in it too |
//! | `epochs` | 3 | passes over the training set; the best on dev (accuracy; entity F1 for tagging; F1 for span extraction) is kept |
//! | `batch_size` | 32 | |
//! | `eval_batch_size` | 64 | |
//! | `learning_rate` | 1e-4 | peak learning rate (albert_zh: 1e-4 … 2e-5) |
//! | `optimizer` | `adamw` | `adamw` or `lamb` |
//! | `weight_decay` | 0.01 | not applied to LayerNorm or bias |
//! | `warmup_fraction` | 0.1 | share of the steps with linear warmup, then linear decay |
//! | `max_grad_norm` | 1.0 | global-norm clipping; 0 disables |
//! | `max_seq_length` | 128 (256 for span extraction) | `[CLS] a [SEP] b [SEP]`, longest-first truncation; `[CLS] text [SEP]` cut at the end; for tagging, the window length (longer sentences are split into overlapping windows and merged back); for C3, `[CLS] context [SEP] question [SEP] choice [SEP]` cut longest-first; for span extraction the window's length |
//! | `doc_stride` | 64 | span extraction: the overlap of consecutive windows of a context, in tokens |
//! | `max_query_length` | 64 | span extraction: the question is cut to this many tokens |
//! | `max_answer_length` | 50 | span extraction: the longest answer decoded, in tokens |
//! | `n_best_size` | 20 | span extraction: the candidates the answer's probability is a softmax over |
//! | `dropout` | 0.1 | dropout before the classifier |
//! | `hidden_dropout` | 0.0 | dropout inside the encoder (albert_zh: none) |
//! | `seed` | 42 | classifier initialisation, example order, dropout |
//! | `group_by_length` | true | batch examples of similar length together (less padding; each batch is still a random draw) |
//!
//! Output: `config.json` + `model.safetensors` (`AlbertForSequenceClassification`,
//! `AlbertForTokenClassification` (with `id2label`), `AlbertForMultipleChoice` or
//! `AlbertForQuestionAnswering` layout, `finetuning_task` the task's name),
//! `vocab.txt`, `tokenizer.json`, `predictions.tsv` (every dev and evaluation example: texts,
//! gold, predicted, probabilities; for tagging the characters and the gold and predicted tags),
//! `metrics.json` (protocol, per-epoch history, dev and evaluation metrics; see
//! docs/metrics.md) and `metrics.jsonl` (one line per epoch).
//!
//! On a CPU each batch is split into one micro-batch per core, the classifier's dropout masks
//! drawn on one thread in a fixed order, so that runs are reproducible (`train`).

#![warn(missing_docs)]

pub mod api;
pub mod data;
pub mod encode;
pub mod fit;
// The kinds (encode, decode, score, serve) hold no model code: they live with the tasks,
// here under their old path.
pub use pipeline_tasks::kinds;
pub mod outputs;
pub mod params;
pub mod predict;
pub mod task_model;
pub mod train;

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::time::Instant;

use anyhow::bail;
use pipeline_albert::device::{self, ResolvedDevice};
use pipeline_albert::parallel::DataParallel;
use pipeline_engine::ParamError;
use pipeline_engine::stage::{Stage, StageContext};
use pipeline_metrics::FinetuneRecord;
use pipeline_tasks::{Protocol, ProtocolSpec};
use serde_json::{Map, Value, json};

use data::EncodedSplit;
use encode::Encoder;
use fit::{Fit, Task, fit, predict_split};
use kinds::AnyKind;
use outputs::{Predictions, scores_json};
pub use params::{Init, TrainParams};
use params::{known, train_params};
use task_model::{Source, TaskModel, check_vocab};
use train::FineTuner;

/// The `finetune` stage kind (registered as `finetune`): see the module docs.
pub struct FinetuneStage;

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

    fn validate(&self, params: &Map<String, Value>, _spec: &Value) -> Result<(), ParamError> {
        TrainParams::parse(params, Path::new("."))?;
        let protocol: Map<String, Value> = params
            .iter()
            .filter(|(k, _)| !train_params().contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        ProtocolSpec::from_params(&protocol).map_err(|e| e.to_string())?;
        Ok(())
    }

    fn run(&self, ctx: &StageContext) -> anyhow::Result<()> {
        let train = TrainParams::parse(ctx.params, ctx.root)?;
        let protocol_params: Map<String, Value> = ctx
            .params
            .iter()
            .filter(|(k, _)| pipeline_tasks::known_params().contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let spec = ProtocolSpec::from_params(&protocol_params)?;
        for warning in spec.undeclared(ctx.instance, ctx.root, ctx.inputs) {
            tracing::warn!("{warning}");
        }
        run(ctx, &train, &spec)
    }
}

/// The stage: read the protocol, build the model from its source, fine-tune it epoch by epoch
/// keeping the best on dev, evaluate that on every evaluation set, and write the artifact.
fn run(ctx: &StageContext, p: &TrainParams, spec: &ProtocolSpec) -> anyhow::Result<()> {
    let started = Instant::now();
    let log = |line: &str| stage_log(ctx, line);
    let device = device::resolve(p.device)?;
    p.precision
        .on(&device)
        .map_err(|e| anyhow::anyhow!("param `precision`: {e}"))?;
    let protocol = load_protocol(ctx, spec, &log)?;
    let kind = kinds::of(spec.task.kind());
    let source = Source::of(ctx, p)?;
    let ad = device.device.clone().autodiff();
    ad.seed(p.seed);
    let head = kind.head(&protocol.labels);
    let (config, model) = TaskModel::with_head(&source, p, head, &ad)?;
    let encoder = task_encoder(&source, p, &config, spec)?;
    check_vocab(&source.dir, encoder.vocab.len(), &config)?;
    let sets = Sets::encode(kind, &protocol, &encoder)?;
    let total_steps = (sets.train.rows.len().div_ceil(p.batch_size) * p.epochs) as u64;
    let mut tuner = FineTuner::new(
        model,
        p.optim_config(total_steps),
        ad,
        config.hidden_size,
        p.hidden_dropout > 0.0,
    );
    let setup = Setup {
        p,
        protocol: &protocol,
        config: &config,
        source: &source,
        device: &device,
        sets: &sets,
    };
    announce(ctx, &setup, &tuner, total_steps, &log);
    let task = Task {
        kind,
        labels: &protocol.labels,
    };
    let fitted = fit_watched(ctx, task, &mut tuner, p, &sets, &log)?;
    let evaluated = evaluate_sets(&fitted, &protocol, &sets, p, &tuner.parallel, &device, &log)?;
    std::fs::write(ctx.out_dir.join("predictions.tsv"), &evaluated.predictions)?;
    write_model(
        ctx,
        spec.task.name(),
        &fitted,
        &config,
        &protocol.labels,
        &source,
    )?;
    let mut record = summary(&setup, &tuner, &fitted, evaluated, started)?;
    add_encoding(&mut record, &sets, &encoder, spec.task.kind())?;
    let metrics = serde_json::to_value(record)?;
    pipeline_metrics::write_metrics(ctx.out_dir, ctx.log_dir, &metrics)?;
    Ok(())
}

/// The encoder of the model's vocabulary, for sequences of at most `max_seq_length` tokens
/// (and no more than the model has positions); span tasks check their window settings.
fn task_encoder(
    source: &Source,
    p: &TrainParams,
    config: &pipeline_albert::AlbertConfig,
    spec: &ProtocolSpec,
) -> anyhow::Result<Encoder> {
    let encoder = Encoder::load(&source.dir, p.encoding(config.max_position_embeddings))?;
    if kinds::of(spec.task.kind()).span_windows() {
        encoder.span.validate().map_err(|e| {
            anyhow::anyhow!(
                "the model has {} positions: {e}",
                config.max_position_embeddings
            )
        })?;
    }
    Ok(encoder)
}

/// [`fit`] with each epoch's line also in a live TensorBoard file in the work area (issue 25),
/// so that `tensorboard --logdir .pipeline/work` shows a fine-tuning run in progress; the
/// artifact's copy is rebuilt from metrics.jsonl when the stage ends (`write_model`).
fn fit_watched(
    ctx: &StageContext,
    task: Task,
    tuner: &mut FineTuner,
    p: &TrainParams,
    sets: &Sets,
    log: &dyn Fn(&str),
) -> anyhow::Result<Fit> {
    let live = std::cell::RefCell::new(live_events(ctx));
    let log_epoch = |line: &str| {
        log(line);
        if let Some(w) = live.borrow_mut().as_mut() {
            write_live_event(w, line);
        }
    };
    fit(
        task,
        tuner,
        p,
        (&sets.train, &sets.dev),
        &log_epoch,
        &|step| ctx.progress.set_position(step),
    )
}

/// A new live event file in the work area; none (with a warning) where it cannot be made:
/// watching is a convenience, never a reason to fail a run.
fn live_events(ctx: &StageContext) -> Option<pipeline_tbevents::EventWriter> {
    let path = ctx.work_dir.join(pipeline_tbevents::FILE_NAME);
    pipeline_tbevents::EventWriter::create(&path, pipeline_tbevents::now())
        .map_err(|e| tracing::warn!(target: "finetune", "no live TensorBoard events: {e}"))
        .ok()
}

/// One epoch line of metrics.jsonl as an event (its numeric fields as scalars at its epoch).
fn write_live_event(w: &mut pipeline_tbevents::EventWriter, line: &str) {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
        return;
    };
    if let Some((step, values)) = pipeline_tbevents::scalars_of_line(&v, "epoch")
        && let Err(e) = w.scalars(step, pipeline_tbevents::now(), &values)
    {
        tracing::warn!(target: "finetune", "live TensorBoard events: {e}");
    }
}

/// A line in the stage's log (and the tracing log).
fn stage_log(ctx: &StageContext, line: &str) {
    tracing::info!(target: "finetune", "{}: {line}", ctx.instance);
    let _ = OpenOptions::new()
        .create(true)
        .append(true)
        .open(ctx.log_dir.join("finetune.log"))
        .and_then(|mut f| writeln!(f, "{line}"));
}

/// The protocol's examples, with the bad rows of each file logged.
fn load_protocol(
    ctx: &StageContext,
    spec: &ProtocolSpec,
    log: &dyn Fn(&str),
) -> anyhow::Result<Protocol> {
    let protocol: Protocol = spec.load(ctx.root)?;
    for f in protocol.files.iter().filter(|f| f.bad.total > 0) {
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
    if protocol.train.examples.is_empty() {
        bail!("the protocol has no training examples");
    }
    Ok(protocol)
}

/// The protocol's splits, encoded.
struct Sets {
    train: EncodedSplit,
    dev: EncodedSplit,
    eval: Vec<EncodedSplit>,
}

impl Sets {
    fn encode(
        kind: &dyn AnyKind,
        protocol: &Protocol,
        encoder: &Encoder,
    ) -> Result<Sets, kinds::KindError> {
        Ok(Sets {
            train: kind.encode("train", &protocol.train.examples, encoder)?,
            dev: kind.encode("dev", &protocol.dev.examples, encoder)?,
            eval: protocol
                .eval
                .iter()
                .map(|s| kind.encode(&s.name, &s.examples, encoder))
                .collect::<Result<_, _>>()?,
        })
    }
}

/// What a run trains with once its model and data are ready: what the opening log line and
/// the record both say.
struct Setup<'a> {
    p: &'a TrainParams,
    protocol: &'a Protocol,
    config: &'a pipeline_albert::AlbertConfig,
    source: &'a Source,
    device: &'a ResolvedDevice,
    sets: &'a Sets,
}

/// The run's opening log line, and the progress bar's style and length.
fn announce(
    ctx: &StageContext,
    s: &Setup,
    tuner: &FineTuner,
    total_steps: u64,
    log: &dyn Fn(&str),
) {
    let Setup {
        p,
        protocol,
        sets,
        source,
        device,
        ..
    } = *s;
    log(&format!(
        "{} ({}): {} train / {} dev examples, {} evaluation sets; init {} from {}; {} steps on {} \
         in {} with {} data-parallel worker(s)",
        ctx.instance,
        protocol.spec.task.name(),
        sets.train.examples,
        sets.dev.examples,
        sets.eval.len(),
        p.init.name(),
        source.dir.display(),
        total_steps,
        device.name,
        p.precision.name(),
        tuner.parallel.workers(),
    ));
    ctx.progress.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner:.cyan} {prefix:.bold} {elapsed:>4} [{bar:25.cyan/blue}] {pos}/{len} {msg} ETA {eta}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    ctx.progress.set_length(total_steps);
}

/// What the best model did on the evaluation sets.
struct Evaluated {
    /// Metrics per set, by name.
    eval: Map<String, Value>,
    /// `predictions.tsv` (dev rows included).
    predictions: String,
    /// Evaluation examples per second.
    rate: f64,
}

/// The best epoch's model on every evaluation set.
fn evaluate_sets(
    fitted: &Fit,
    protocol: &Protocol,
    sets: &Sets,
    p: &TrainParams,
    workers: &DataParallel,
    device: &ResolvedDevice,
    log: &dyn Fn(&str),
) -> anyhow::Result<Evaluated> {
    let t0 = Instant::now();
    let task = Task {
        kind: kinds::of(protocol.spec.task.kind()),
        labels: &protocol.labels,
    };
    let mut eval = Map::new();
    let mut predictions = Predictions::for_kind(task.kind, &protocol.labels);
    predictions.add_decoded("dev", &protocol.dev.examples, &fitted.best.dev_decoded)?;
    let mut rows = 0usize;
    for (set, split) in sets.eval.iter().zip(&protocol.eval) {
        let decoded = predict_split(
            task.kind,
            &fitted.best.model,
            set,
            p,
            workers,
            &device.device,
        )?;
        rows += set.rows.iter().map(Vec::len).sum::<usize>();
        let s = task.kind.score(set, &decoded, task.labels)?;
        log(&format!("{}: {}", set.name, s.summary()));
        eval.insert(set.name.clone(), scores_json(&s));
        predictions.add_decoded(&set.name, &split.examples, &decoded)?;
    }
    Ok(Evaluated {
        eval,
        predictions: predictions.into_string(),
        rate: rows as f64 / t0.elapsed().as_secs_f64().max(1e-9),
    })
}

/// The best model in the Hugging Face layout, with the tokenizer it was trained with.
fn write_model(
    ctx: &StageContext,
    task: &str,
    fitted: &Fit,
    config: &pipeline_albert::AlbertConfig,
    labels: &[String],
    source: &Source,
) -> anyhow::Result<()> {
    fitted.best.model.save(ctx.out_dir, config, labels)?;
    mark_task(ctx.out_dir, task)?;
    for f in ["vocab.txt", "tokenizer.json"] {
        let src = source.dir.join(f);
        if src.is_file() {
            std::fs::copy(&src, ctx.out_dir.join(f))?;
        }
    }
    let lines: Vec<Value> = fitted
        .history
        .iter()
        .filter_map(|r| serde_json::to_value(r).ok())
        .collect();
    pipeline_metrics::write_metrics_jsonl(ctx.out_dir, ctx.log_dir, &lines)?;
    // The same lines as TensorBoard events, one per epoch (issue 25), from the full lines (the
    // epochs' seconds and tokens/s are among the scalars), so beside them in the log directory:
    // `tensorboard --logdir` finds them there.
    pipeline_tbevents::write_from_jsonl(
        &ctx.log_dir.join(pipeline_metrics::METRICS_JSONL),
        &ctx.log_dir.join(pipeline_tbevents::FILE_NAME),
        "epoch",
    )?;
    Ok(())
}

/// Writes the task's name into the exported config.json as transformers'
/// `finetuning_task`, so that `pipeline predict` knows whether a sequence classifier takes one
/// text or two (the name's kind: `chnsenticorp` and `single` are single-text tasks).
fn mark_task(dir: &Path, task: &str) -> anyhow::Result<()> {
    let path = dir.join("config.json");
    let mut config: Map<String, Value> = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
    config.insert("finetuning_task".into(), json!(task));
    std::fs::write(&path, serde_json::to_string_pretty(&config)? + "\n")?;
    Ok(())
}

/// A span task's window parameters (`span_features`), and what encoding each split could
/// not serve whole, by cause with the example ids (`encoding`, when anything).
fn add_encoding(
    record: &mut FinetuneRecord,
    sets: &Sets,
    encoder: &Encoder,
    kind: pipeline_tasks::TaskKind,
) -> anyhow::Result<()> {
    if kinds::of(kind).span_windows() {
        record.span_features = Some(serde_json::to_value(encoder.span)?);
    }
    let notes: Map<String, Value> = std::iter::once(&sets.train)
        .chain(std::iter::once(&sets.dev))
        .chain(&sets.eval)
        .filter(|s| !s.notes.is_empty())
        .map(|s| (s.name.clone(), s.notes.to_json()))
        .collect();
    if !notes.is_empty() {
        record.encoding = Some(notes);
    }
    Ok(())
}

/// `metrics.json` (docs/metrics.md).
fn summary(
    s: &Setup,
    tuner: &FineTuner,
    fitted: &Fit,
    evaluated: Evaluated,
    started: Instant,
) -> anyhow::Result<FinetuneRecord> {
    let Setup {
        p,
        protocol,
        config,
        source,
        device,
        ..
    } = *s;
    let examples_trained = (protocol.train.examples.len() * p.epochs) as f64;
    let train_s = fitted.train_seconds.max(1e-9);
    Ok(FinetuneRecord {
        task: Some(protocol.spec.task.name().into()),
        kind: Some(protocol.spec.task.kind().name().into()),
        labels: Some(protocol.labels.clone()),
        init: Some(p.init.name().into()),
        init_from: match &p.init {
            Init::Checkpoint(d) => Some(d.display().to_string()),
            _ => None,
        },
        pretrain_instance: source.pretrain_instance.clone(),
        pretrain_step: p.pretrain_step,
        pretraining: source.pretraining,
        share_type: Some(config.share_type.name().into()),
        ln_type: Some(config.ln_type.name().into()),
        config: Some(serde_json::to_value(config)?),
        parameters: Some(burn::module::Module::num_params(&fitted.best.model) as u64),
        protocol: Some(protocol.to_json()),
        epochs: Some(p.epochs as u64),
        steps: Some(fitted.steps),
        batch_size: Some(p.batch_size as u64),
        learning_rate: Some(p.learning_rate),
        optimizer: Some(serde_json::to_value(&tuner.optim_config)?),
        max_seq_length: Some(p.encoding(config.max_position_embeddings).max_seq_length as u64),
        warmup_steps: Some(tuner.optim_config.warmup_steps),
        dropout: Some(p.dropout),
        hidden_dropout: Some(p.hidden_dropout),
        group_by_length: Some(p.group_by_length),
        seed: Some(p.seed),
        history: Some(serde_json::to_value(&fitted.history)?),
        best_epoch: Some(fitted.best.epoch as u64),
        dev: Some(scores_json(&fitted.best.dev_scores)),
        eval: Some(evaluated.eval),
        train_seconds: Some(fitted.train_seconds),
        train_examples_per_s: Some(examples_trained / train_s),
        train_tokens_per_s: Some(fitted.tokens as f64 / train_s),
        padding_share: Some(1.0 - fitted.tokens as f64 / fitted.padded_tokens.max(1) as f64),
        eval_sentences_per_s: Some(evaluated.rate),
        wall_seconds: Some(started.elapsed().as_secs_f64()),
        device: Some(device.name.clone()),
        precision: Some(p.precision.name().into()),
        data_parallel_workers: Some(tuner.parallel.workers() as u64),
        threads: Some(std::thread::available_parallelism().map_or(1, |n| n.get()) as u64),
        span_features: None,
        encoding: None,
    })
}
