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
//! | `share_type`, `ln_type`, `layout`, `embedding_size`, `hidden_size`, `num_hidden_layers`, `num_attention_heads`, `intermediate_size`, `hidden_act`, … (`pipeline_albert::config::override_keys`) | from `model` | override one field of the model config (`vocab_size` comes from the vocabulary; `layout: albert_zh` is albert_zh's own embedding block and MLM head) |
//! | `init_from` | none | a Hugging Face ALBERT checkpoint directory to continue pretraining from, or a TensorFlow checkpoint (albert_zh's or google-research/albert's: directory, prefix or .index, with albert_config.json and vocab.txt beside it) |
//! | `device` | `auto` | `auto`, `cpu`, `flex`, `tch-cpu`, `cuda:N` (`tch` builds only) |
//! | `precision` | `fp32` | `fp32`, or `bf16`: mixed precision as `torch.autocast` does it, the matrix products (projections, both attention products, the MLM decoder) in bfloat16 on float32 master weights, LayerNorm, softmax, GELU and the losses in float32; libtorch devices only (`tch-cpu`, `cuda:N`), refused on `flex` |
//! | `steps` | 1000 | optimiser steps |
//! | `batch_size` | 32 | rows per micro-batch, or `auto`: on a GPU the largest power of two whose training steps fit its memory (probed once, recorded in the work area and `metrics.json`; see `auto_batch`), on a CPU 32 |
//! | `grad_accum_steps` | 1 | micro-batches per optimiser step |
//! | `effective_batch_size` | `batch_size × grad_accum_steps` | rows per optimiser step, instead of `grad_accum_steps`: the accumulation follows from it and `batch_size`, so with `batch_size: auto` every device trains the same recipe |
//! | `optimizer` | `lamb` | `lamb` or `adamw` |
//! | `learning_rate` | 1e-3 | peak learning rate |
//! | `warmup_steps` | steps/10 | linear warmup, then linear decay to 0 |
//! | `weight_decay` | 0.01 | not applied to LayerNorm or bias |
//! | `beta_1`, `beta_2`, `epsilon` | 0.9, 0.999, 1e-6 | |
//! | `max_grad_norm` | 1.0 | clip the global gradient norm; 0 disables |
//! | `eval_interval` | steps/5 | evaluate every this many steps (and at the end) |
//! | `eval_batches` | `auto` | batches per evaluation: `auto` spends about 8 % of the training time on all evaluations together (see `eval_batches_for`), 0 = the whole eval shard, or a number |
//! | `checkpoint_interval` | steps/10 (≤ 500) | save a checkpoint every this many steps |
//! | `log_interval` | 10 | a `metrics.jsonl` line every this many steps |
//! | `seed` | 12345 | initialisation, data order, dropout |
//! | `pad_to_max` | false | pad every batch to `max_seq_length` (fixed shapes) |
//! | `sop` | `true` | train the sentence-order head beside the masked LM; `false` trains the masked LM alone (ALBERT's SOP ablation): the SOP head and the pooler stay as initialised, and no SOP loss or accuracy is reported |
//! | `save_steps` | none | also export the model at these steps (e.g. `[500, 1000]`) under `steps/<N>/`: intermediate checkpoints for `finetune`'s `pretrain_step`, the accuracy-versus-pretraining-tokens curve |
//!
//! # Output
//!
//! `config.json`, `model.safetensors` (transformers' `AlbertForPreTraining` layout), `vocab.txt`,
//! `tokenizer.json`, `metrics.jsonl` (one line per `log_interval` steps and per evaluation), the
//! same scalars as a TensorBoard event file (`events.out.tfevents.0.pipeline`; while the stage
//! runs, a live one in its work area) and `metrics.json` (the model, the run, the final evaluation, throughput of the training steps
//! alone, and the seconds and share of the wall time spent training, evaluating and saving
//! checkpoints).
//!
//! # Speed
//!
//! On a CPU each batch is split into one micro-batch per core, trained in parallel and their
//! gradients summed (`pipeline_albert::parallel`); the step equals the whole batch's. With
//! dropout on, or on a GPU, one worker.
//!
//! # Resume
//!
//! Every `checkpoint_interval` steps the model, the optimiser state, the step, the data reader's
//! position and the metrics so far are saved in the stage's work area (`.pipeline/work/…`, kept
//! while the fingerprint stays the same). A run that is killed or fails continues from there when
//! `pipeline run` runs it again; a non-finite loss stops the stage naming the step, and the last
//! good checkpoint stays.

#![warn(missing_docs)]

pub mod api;
mod auto_batch;
mod batch_search;
mod data;
mod metrics;
mod on_device;
mod params;
mod run;
pub mod snapshots;
pub mod trainer;

use std::path::Path;

use pipeline_albert::device::{self, ResolvedDevice};
use pipeline_engine::stage::{Stage, StageContext};
use serde_json::{Map, Value};

pub use data::{Data, initial_model};
pub use params::{EVAL_BUDGET, ParamError, PretrainParams, known_params};
use run::TrainingRun;

/// The `pretrain` stage kind.
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

    fn validate(&self, params: &Map<String, Value>, _spec: &Value) -> Result<(), ParamError> {
        // Paths are checked at run time, against the workspace root.
        PretrainParams::parse(params, Path::new(".")).map(|_| ())
    }

    fn run(&self, ctx: &StageContext) -> anyhow::Result<()> {
        let p = PretrainParams::parse(ctx.params, ctx.root)?;
        run(ctx, &p)
    }
}

/// The stage: find the data, pick the device, build (or load) the model, train it from its
/// last checkpoint to the end, export it.
fn run(ctx: &StageContext, p: &PretrainParams) -> anyhow::Result<()> {
    let data = Data::from_deps(ctx)?;
    let device = training_device(p)?;
    let (config, model) = initial_model(p, data.vocab_size, &device.device.clone().autodiff())?;
    let model = (config, model.with_precision(p.precision));
    data.check_fits(&model.0)?;
    let (p, batch) = auto_batch::resolve(ctx.work_dir, p, &data, (&model.0, &model.1), &device)?;
    let mut training = TrainingRun::start(ctx, &p, &data, model, device, batch)?;
    training.train()?;
    training.export()
}

/// The device the `device` param names, refusing a precision it cannot train in.
fn training_device(p: &PretrainParams) -> anyhow::Result<ResolvedDevice> {
    let device = device::resolve(p.device)?;
    p.precision
        .on(&device)
        .map_err(|e| anyhow::anyhow!("param `precision`: {e}"))?;
    Ok(device)
}
