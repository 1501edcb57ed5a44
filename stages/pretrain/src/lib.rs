//! The `pretrain` stage kind: ALBERT pretraining on the `mask` stage's Arrow shards (MLM on the
//! masked positions + sentence-order prediction), with LAMB, linear warmup and decay, global-norm
//! clipping, gradient accumulation, periodic evaluation on the held-out shard, checkpoints that a
//! killed run resumes from, and a Hugging Face export.
//!
//! Deps: a `mask` artifact (`shard-*.arrow`, `eval-*.arrow`) and a `vocab` artifact
//! (`vocab.txt`, `tokenizer.json`).
//!
//! # Params
//!
//! | param | default | what |
//! |---|---|---|
//! | `model` | `tiny` | albert_zh size (`tiny`, `small`, `base`, `large`, `xlarge`, `xxlarge`) or a config JSON (albert_zh or Hugging Face) relative to the workspace |
//! | `share_type`, `ln_type`, `embedding_size`, `hidden_size`, `num_hidden_layers`, `num_attention_heads`, `intermediate_size`, `hidden_act`, … | from `model` | override one field of the model config (`vocab_size` comes from the vocabulary) |
//! | `init_from` | none | a Hugging Face ALBERT checkpoint directory to continue pretraining from |
//! | `device` | `auto` | `auto`, `cpu`, `flex`, `tch-cpu`, `cuda:N` (`tch` builds only) |
//! | `precision` | `fp32` | `fp32`; `bf16` is reserved for CUDA mixed precision and refused until it exists |
//! | `steps` | 1000 | optimiser steps |
//! | `batch_size` | 32 | rows per micro-batch |
//! | `grad_accum_steps` | 1 | micro-batches per optimiser step |
//! | `optimizer` | `lamb` | `lamb` or `adamw` |
//! | `learning_rate` | 1e-3 | peak learning rate |
//! | `warmup_steps` | steps/10 | linear warmup, then linear decay to 0 |
//! | `weight_decay` | 0.01 | not applied to LayerNorm or bias |
//! | `beta_1`, `beta_2`, `epsilon` | 0.9, 0.999, 1e-6 | |
//! | `max_grad_norm` | 1.0 | clip the global gradient norm; 0 disables |
//! | `eval_interval` | steps/5 | evaluate every this many steps (and at the end) |
//! | `eval_batches` | 0 | cap on eval batches; 0 = the whole eval shard |
//! | `checkpoint_interval` | steps/10 (≤ 500) | save a checkpoint every this many steps |
//! | `log_interval` | 10 | a `metrics.jsonl` line every this many steps |
//! | `seed` | 12345 | initialisation, data order, dropout |
//! | `pad_to_max` | false | pad every batch to `max_seq_length` (fixed shapes) |
//!
//! # Output
//!
//! `config.json`, `model.safetensors` (transformers' `AlbertForPreTraining` layout), `vocab.txt`,
//! `tokenizer.json`, `metrics.jsonl` (one line per `log_interval` steps and per evaluation) and
//! `metrics.json` (the model, the run, the final evaluation, throughput).
//!
//! # Resume
//!
//! Every `checkpoint_interval` steps the model, the optimiser state, the step, the data reader's
//! position and the metrics so far are saved in the stage's work area (`.pipeline/work/…`, kept
//! while the fingerprint stays the same). A run that is killed or fails continues from there when
//! `pipeline run` runs it again; a non-finite loss stops the stage naming the step, and the last
//! good checkpoint stays.

mod params;
pub mod trainer;

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};
use pipeline_albert::device::{self, ResolvedDevice};
use pipeline_albert::train::{Checkpoint, remove_checkpoint};
use pipeline_albert::{AlbertConfig, AlbertForPreTraining, hf};
use pipeline_engine::stage::{Stage, StageContext};
use pipeline_shards::{
    BatchReader, BatchReaderConfig, ReaderPosition, list_shards, shard_metadata,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

pub use params::{Precision, PretrainParams, known_params};
use trainer::{EvalStats, StepStats, Trainer};

pub struct PretrainStage;

impl Stage for PretrainStage {
    fn kind(&self) -> &'static str {
        "pretrain"
    }

    fn code_version(&self) -> &'static str {
        env!("STAGE_CODE_VERSION")
    }

    fn known_params(&self) -> &'static [&'static str] {
        known_params()
    }

    fn validate(&self, params: &Map<String, Value>, _spec: &Value) -> Result<(), String> {
        // Paths are checked at run time, against the workspace root.
        PretrainParams::parse(params, Path::new(".")).map(|_| ())
    }

    fn run(&self, ctx: &StageContext) -> anyhow::Result<()> {
        let p = PretrainParams::parse(ctx.params, ctx.root).map_err(anyhow::Error::msg)?;
        run(ctx, &p)
    }
}

/// The data the stage trains on, found in its deps.
pub struct Data {
    pub train: Vec<PathBuf>,
    pub eval: Vec<PathBuf>,
    pub max_seq_length: usize,
    pub max_predictions: usize,
    pub vocab_dir: PathBuf,
    pub vocab_size: usize,
}

impl Data {
    pub fn find(mask_dir: &Path, vocab_dir: &Path) -> anyhow::Result<Data> {
        let train = list_shards(mask_dir, "shard")?;
        if train.is_empty() {
            bail!(
                "{} has no training shards (shard-00000.arrow, …): is the dep a `mask` stage's \
                 artifact?",
                mask_dir.display()
            );
        }
        let eval = list_shards(mask_dir, "eval")?;
        let meta = shard_metadata(&train[0])?;
        let number = |key: &str| -> anyhow::Result<usize> {
            meta.get(key).and_then(|v| v.parse().ok()).with_context(|| {
                format!("{}: the shard metadata has no `{key}`", train[0].display())
            })
        };
        let vocab_file = vocab_dir.join("vocab.txt");
        let vocab_size = std::fs::read_to_string(&vocab_file)
            .with_context(|| format!("reading {} (the `vocab` dep)", vocab_file.display()))?
            .lines()
            .count();
        if let Ok(shard_vocab) = number("vocab_size")
            && shard_vocab != vocab_size
        {
            bail!(
                "the shards were made with a vocabulary of {shard_vocab} tokens but {} has \
                 {vocab_size}: the `mask` and `pretrain` stages must use the same `vocab` dep",
                vocab_file.display()
            );
        }
        let max_seq_length = number("max_seq_length")?;
        let max_predictions = number("max_predictions_per_seq")?;
        Ok(Data {
            train,
            eval,
            max_seq_length,
            max_predictions,
            vocab_dir: vocab_dir.to_path_buf(),
            vocab_size,
        })
    }

    pub fn reader_config(&self, p: &PretrainParams) -> BatchReaderConfig {
        BatchReaderConfig {
            batch_size: p.batch_size,
            max_seq_length: self.max_seq_length,
            max_predictions_per_seq: self.max_predictions,
            seed: p.seed,
            shuffle: true,
            drop_last: true,
            pad_to_max: p.pad_to_max,
            epochs: None,
        }
    }
}

/// The model config and initial weights the params ask for.
pub fn initial_model(
    p: &PretrainParams,
    data_vocab: usize,
    device: &burn::tensor::Device,
) -> anyhow::Result<(AlbertConfig, AlbertForPreTraining)> {
    match &p.init_from {
        Some(dir) => {
            let (config, model) = hf::load_pretraining(dir, device)
                .with_context(|| format!("param `init_from`: {}", dir.display()))?;
            if config.vocab_size != data_vocab {
                bail!(
                    "init_from {} has vocab_size {} but the vocabulary has {data_vocab} tokens",
                    dir.display(),
                    config.vocab_size
                );
            }
            Ok((config, model))
        }
        None => {
            let config = p
                .model_config(Some(data_vocab))
                .map_err(anyhow::Error::msg)?;
            // The seed decides the initial weights.
            device.seed(p.seed);
            let model = AlbertForPreTraining::new(&config, device);
            Ok((config, model))
        }
    }
}

/// What a checkpoint holds besides the weights and the optimiser.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct TrainState {
    /// Optimiser steps done.
    step: u64,
    /// `None` until the first checkpoint.
    position: Option<ReaderPosition>,
    tokens_seen: u64,
    padded_tokens_seen: u64,
    train_seconds: f64,
    last_eval: Option<EvalStats>,
    /// The config the run trains (a resumed run must build the same model).
    config: AlbertConfig,
}

/// A `metrics.jsonl` line.
fn step_line(step: u64, s: &StepStats, tokens_per_s: f64, elapsed: f64) -> Value {
    let p = s.predictions.max(1) as f64;
    json!({
        "step": step,
        "loss": round(s.loss),
        "mlm_loss": round(s.mlm_loss),
        "sop_loss": round(s.sop_loss),
        "mlm_accuracy": round(s.mlm_correct / p),
        "sop_accuracy": round(s.sop_correct / s.rows.max(1) as f64),
        "lr": s.lr,
        "grad_norm": round(s.grad_norm),
        "tokens_per_s": tokens_per_s.round(),
        "elapsed_s": round(elapsed),
    })
}

fn eval_line(step: u64, e: &EvalStats) -> Value {
    json!({
        "step": step,
        "eval_mlm_loss": round(e.mlm_loss),
        "eval_mlm_accuracy": round(e.mlm_accuracy),
        "eval_sop_loss": round(e.sop_loss),
        "eval_sop_accuracy": round(e.sop_accuracy),
    })
}

fn round(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

/// Keeps the lines of `path` up to step `step` (a resumed run redoes the steps after its
/// checkpoint and would otherwise log them twice).
fn truncate_metrics(path: &Path, step: u64) -> anyhow::Result<()> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Ok(());
    };
    let kept: String = text
        .lines()
        .filter(|l| {
            serde_json::from_str::<Value>(l)
                .ok()
                .and_then(|v| v["step"].as_u64())
                .is_some_and(|s| s <= step)
        })
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(path, kept)?;
    Ok(())
}

fn append_line(path: &Path, v: &Value) -> anyhow::Result<()> {
    let mut f = OpenOptions::new().create(true).append(true).open(path)?;
    writeln!(f, "{v}")?;
    Ok(())
}

/// A test hook: `PIPELINE_FAULT_NAN_AT_STEP=N` makes step N's loss NaN, so that the NaN
/// handling can be tested end to end without a diverging model.
fn fault_injected(step: u64) -> bool {
    std::env::var("PIPELINE_FAULT_NAN_AT_STEP")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .is_some_and(|n| n == step)
}

fn run(ctx: &StageContext, p: &PretrainParams) -> anyhow::Result<()> {
    let started = Instant::now();
    let mask = ctx
        .dep("mask")
        .context("the pretrain stage needs a `mask` dep (the shards) and a `vocab` dep: add `deps: [mask, vocab]`")?;
    let vocab = ctx
        .dep("vocab")
        .context("the pretrain stage needs a `vocab` dep: add `deps: [mask, vocab]`")?;
    let data = Data::find(&mask.dir, &vocab.dir)?;
    let ResolvedDevice {
        device,
        name: device_name,
        is_gpu,
    } = device::resolve(p.device).map_err(anyhow::Error::msg)?;
    if p.precision == Precision::Bf16 {
        // Refused rather than silently trained in fp32 under a bf16 label: mixed precision
        // has not been written or checked on a GPU yet (see README § GPU).
        bail!(
            "precision bf16 is not implemented yet ({device_name}{}); use precision: fp32",
            if is_gpu {
                ""
            } else {
                ", and it would need a CUDA device"
            }
        );
    }
    let ad = device.clone().autodiff();
    let (config, model) = initial_model(p, data.vocab_size, &ad)?;
    if data.max_seq_length > config.max_position_embeddings {
        bail!(
            "the shards hold sequences of up to {} tokens but the model has {} positions \
             (max_position_embeddings)",
            data.max_seq_length,
            config.max_position_embeddings
        );
    }
    let mut trainer = Trainer::new(config.clone(), model, p.optim.clone(), ad.clone());
    let reader_config = data.reader_config(p);
    let log_path = ctx.log_dir.join("train.log");
    let log = |line: &str| {
        tracing::info!(target: "pretrain", "{}: {line}", ctx.instance);
        let _ = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .and_then(|mut f| writeln!(f, "{line}"));
    };

    // Resume from the work area's checkpoint, if a previous attempt left one.
    let checkpoint = Checkpoint::new(ctx.work_dir.join("checkpoint"));
    let metrics_path = ctx.work_dir.join("metrics.jsonl");
    let mut state = TrainState {
        step: 0,
        position: None,
        tokens_seen: 0,
        padded_tokens_seen: 0,
        train_seconds: 0.0,
        last_eval: None,
        config: config.clone(),
    };
    let mut resumed_from = None;
    let mut reader = if checkpoint.exists() || ctx.work_dir.join("checkpoint.old").exists() {
        let (model, optim, saved): (_, _, TrainState) =
            checkpoint.load(trainer.model.clone(), trainer.optim.clone())?;
        if saved.config != config {
            bail!(
                "the checkpoint in {} was made for another model config; remove it to start over",
                checkpoint.dir.display()
            );
        }
        trainer.model = model;
        trainer.optim = optim;
        let position = saved
            .position
            .clone()
            .context("the checkpoint has no data position")?;
        let reader = BatchReader::resume(&data.train, reader_config.clone(), &position)?;
        truncate_metrics(&metrics_path, saved.step)?;
        log(&format!(
            "resumed from the checkpoint at step {} of {}",
            saved.step, p.optim.total_steps
        ));
        resumed_from = Some(saved.step);
        state = saved;
        reader
    } else {
        let _ = std::fs::remove_file(&metrics_path);
        BatchReader::open(&data.train, reader_config.clone())?
    };

    let params = config.parameter_count();
    log(&format!(
        "{}: {} parameters ({} share_type {}, {}), {} training instances per epoch, device {device_name}",
        ctx.instance,
        params.total,
        p.model,
        config.share_type,
        config.ln_type.name(),
        reader.instances_per_epoch()
    ));
    let total = p.optim.total_steps;
    ctx.progress.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner:.cyan} {prefix:.bold} {elapsed:>4} [{bar:25.cyan/blue}] {pos}/{len} {msg} ETA {eta}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    ctx.progress.set_length(total);
    ctx.progress.set_position(state.step);

    let eval_reader = |trainer: &Trainer| -> anyhow::Result<Option<EvalStats>> {
        if data.eval.is_empty() {
            return Ok(None);
        }
        let config = BatchReaderConfig {
            drop_last: false,
            ..reader_config.clone()
        };
        let reader = BatchReader::eval(&data.eval, config)?;
        Ok(Some(trainer.evaluate(reader, p.eval_batches)?))
    };
    if data.eval.is_empty() {
        log("no eval shard in the mask artifact (eval_fraction 0?): no evaluation");
    }

    let mut window = (Instant::now(), 0u64);
    while state.step < total {
        // Seeding per step makes dropout reproducible across a resume.
        ad.seed(p.seed ^ (state.step.wrapping_mul(0x9E37_79B9_7F4A_7C15)));
        let mut batches = Vec::with_capacity(p.grad_accum_steps);
        for _ in 0..p.grad_accum_steps {
            batches.push(reader.next_batch()?.context("the training reader ended")?);
        }
        let t0 = Instant::now();
        let result = if fault_injected(state.step + 1) {
            Err(trainer::NonFinite {
                what: "loss",
                value: f64::NAN,
            })
        } else {
            trainer.step(state.step, &batches)
        };
        let stats = result.map_err(|e| {
            anyhow::anyhow!(
                "step {}: {e} (learning rate {:.3e}); training stopped. The last good checkpoint \
                 ({}) stays in {}: lower learning_rate or raise warmup_steps, then run again",
                state.step + 1,
                p.optim.lr_at(state.step),
                resumed_or_saved(&checkpoint),
                checkpoint.dir.display()
            )
        })?;
        state.train_seconds += t0.elapsed().as_secs_f64();
        state.step += 1;
        state.tokens_seen += stats.tokens;
        state.padded_tokens_seen += stats.padded_tokens;
        window.1 += stats.tokens;
        let step = state.step;
        ctx.progress.set_position(step);
        if step.is_multiple_of(p.log_interval) || step == total || step == 1 {
            let rate = window.1 as f64 / window.0.elapsed().as_secs_f64().max(1e-9);
            window = (Instant::now(), 0);
            let line = step_line(step, &stats, rate, started.elapsed().as_secs_f64());
            append_line(&metrics_path, &line)?;
            ctx.progress.set_message(format!(
                "loss {:.3} · mlm acc {:.1}% · {:.0} tok/s",
                stats.loss,
                100.0 * stats.mlm_correct / stats.predictions.max(1) as f64,
                rate
            ));
            log(&line.to_string());
        }
        let eval_due =
            (p.eval_interval > 0 && step.is_multiple_of(p.eval_interval)) || step == total;
        if eval_due && let Some(e) = eval_reader(&trainer)? {
            let line = eval_line(step, &e);
            append_line(&metrics_path, &line)?;
            log(&line.to_string());
            state.last_eval = Some(e);
        }
        if step.is_multiple_of(p.checkpoint_interval) && step < total {
            state.position = Some(reader.position());
            checkpoint.save(&trainer.model, &trainer.optim, &state)?;
            log(&format!("checkpoint at step {step}"));
        }
    }

    // The artifact: the Hugging Face export, the vocabulary, the metrics.
    let out = ctx.out_dir;
    let model = trainer.inference_model();
    hf::save_pretraining(out, &config, &model)?;
    for f in ["vocab.txt", "tokenizer.json"] {
        let src = data.vocab_dir.join(f);
        if src.is_file() {
            std::fs::copy(&src, out.join(f))
                .with_context(|| format!("copying {}", src.display()))?;
        }
    }
    std::fs::copy(&metrics_path, out.join("metrics.jsonl"))?;
    let wall = started.elapsed().as_secs_f64();
    let tokens_per_s = state.tokens_seen as f64 / state.train_seconds.max(1e-9);
    let steps_flops = {
        // Model FLOPs per second over the run, from the mean padded sequence length.
        let rows = (state.step * (p.batch_size * p.grad_accum_steps) as u64).max(1) as f64;
        let mean_seq = state.padded_tokens_seen as f64 / rows;
        config.training_flops(
            p.batch_size,
            mean_seq.round() as usize,
            data.max_predictions,
        ) * (state.step * p.grad_accum_steps as u64) as f64
    };
    let metrics = json!({
        "model": p.model,
        "config": config,
        "parameters": params,
        "share_type": config.share_type.name(),
        "ln_type": config.ln_type.name(),
        "hf_compatible": config.hf_compatible().is_ok(),
        "steps": state.step,
        "batch_size": p.batch_size,
        "grad_accum_steps": p.grad_accum_steps,
        "effective_batch_size": p.batch_size * p.grad_accum_steps,
        "max_seq_length": data.max_seq_length,
        "optimizer": p.optim,
        "tokens_seen": state.tokens_seen,
        "padded_tokens_seen": state.padded_tokens_seen,
        "train_seconds": round(state.train_seconds),
        "wall_seconds": round(wall),
        "tokens_per_s": tokens_per_s.round(),
        "padded_tokens_per_s": (state.padded_tokens_seen as f64 / state.train_seconds.max(1e-9)).round(),
        "model_tflops_per_s": round(steps_flops / state.train_seconds.max(1e-9) / 1e12),
        "device": device_name,
        "precision": match p.precision { Precision::Fp32 => "fp32", Precision::Bf16 => "bf16" },
        "threads": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        "resumed_from_step": resumed_from,
        "train_instances_per_epoch": reader.instances_per_epoch(),
        "epochs": round(state.step as f64 * (p.batch_size * p.grad_accum_steps) as f64
            / reader.instances_per_epoch().max(1) as f64),
        "eval": state.last_eval,
    });
    std::fs::write(
        out.join("metrics.json"),
        serde_json::to_string_pretty(&metrics)? + "\n",
    )?;
    remove_checkpoint(&checkpoint.dir)?;
    log(&format!(
        "done: {} steps, {:.0} tokens/s, eval {}",
        state.step,
        tokens_per_s,
        state
            .last_eval
            .as_ref()
            .map(|e| format!(
                "MLM acc {:.3}, SOP acc {:.3}",
                e.mlm_accuracy, e.sop_accuracy
            ))
            .unwrap_or_else(|| "none".into())
    ));
    Ok(())
}

fn resumed_or_saved(c: &Checkpoint) -> String {
    std::fs::read_to_string(c.dir.join("state.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .and_then(|v| v["step"].as_u64())
        .map(|s| format!("step {s}"))
        .unwrap_or_else(|| "none yet".into())
}
