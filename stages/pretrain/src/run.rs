//! One pretraining run, from its start (or its last checkpoint) to the exported model: the step
//! loop with its progress line and `metrics.jsonl`, the evaluations and checkpoints it
//! schedules, each timed, and the artifact it leaves.

use std::fs::OpenOptions;
use std::io::Write;
use std::time::Instant;

use anyhow::Context;
use pipeline_albert::device::ResolvedDevice;
use pipeline_albert::train::{Checkpoint, remove_checkpoint};
use pipeline_albert::{AlbertConfig, AlbertForPreTraining, hf};
use pipeline_engine::stage::StageContext;
use pipeline_metrics::PretrainRecord;
use pipeline_shards::{BatchReader, BatchReaderConfig, Prefetch, ReaderPosition};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::auto_batch::FoundBatch;
use crate::data::Data;
use crate::metrics::{
    MetricsLog, Timings, eval_line, eval_summary, floor_sentence, round, sop_floor_sentence,
    sop_sentence, sop_trend, step_line, time_split,
};
use crate::params::PretrainParams;
use crate::snapshots;
use crate::trainer::{EvalStats, StepStats, Trainer};

/// What a checkpoint holds besides the weights and the optimiser.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct TrainState {
    /// Optimiser steps done.
    step: u64,
    /// `None` until the first checkpoint.
    position: Option<ReaderPosition>,
    tokens_seen: u64,
    padded_tokens_seen: u64,
    #[serde(flatten)]
    timings: Timings,
    last_eval: Option<EvalStats>,
    /// The lowest held-out SOP loss so far and its step ([`sop_trend`]); a checkpoint written
    /// before it was kept resumes without it.
    #[serde(default)]
    sop_lowest: Option<(u64, f64)>,
    /// The config the run trains (a resumed run must build the same model).
    config: AlbertConfig,
}

/// Training batches read ahead of the step: two keep one ready while the next is decoded.
const READ_AHEAD: usize = 2;

/// The run in progress.
pub struct TrainingRun<'a> {
    ctx: &'a StageContext<'a>,
    p: &'a PretrainParams,
    data: &'a Data,
    trainer: Trainer,
    /// The training batches, read [`READ_AHEAD`] ahead on a thread of their own.
    reader: Prefetch,
    state: TrainState,
    checkpoint: Checkpoint,
    metrics: MetricsLog,
    device_name: String,
    /// The GPU's model, when it trains on one ([`ResolvedDevice::model`]).
    device_model: Option<String>,
    /// What `batch_size: auto` chose; `None` for a number.
    auto_batch: Option<FoundBatch>,
    resumed_from: Option<u64>,
    started: Instant,
    /// Tokens and start of the current `log_interval` window, for the tokens/s of the log.
    window: (Instant, u64),
    /// The steps read back since the last training line, for the next one.
    interval: Vec<StepStats>,
}

impl<'a> TrainingRun<'a> {
    /// The trainer on `device`, continued from the work area's checkpoint when a previous
    /// attempt left one; logs what is about to be trained.
    pub fn start(
        ctx: &'a StageContext<'a>,
        p: &'a PretrainParams,
        data: &'a Data,
        (config, model): (AlbertConfig, AlbertForPreTraining),
        device: ResolvedDevice,
        auto_batch: Option<FoundBatch>,
    ) -> anyhow::Result<TrainingRun<'a>> {
        let ad = device.device.clone().autodiff();
        let mut trainer = Trainer::new(config.clone(), model, p.optim.clone(), ad);
        trainer.sop = p.sop;
        trainer.mask_id = data.mask_id;
        trainer.nan_at_step = fault_injected_step().and_then(|n| n.checked_sub(1));
        let checkpoint = Checkpoint::new(ctx.work_dir.join("checkpoint"));
        let fresh = TrainState {
            step: 0,
            position: None,
            tokens_seen: 0,
            padded_tokens_seen: 0,
            timings: Timings::default(),
            last_eval: None,
            sop_lowest: None,
            config,
        };
        let resumed = if checkpoint.exists() || ctx.work_dir.join("checkpoint.old").exists() {
            Some(resume(&checkpoint, &mut trainer, &fresh.config)?)
        } else {
            None
        };
        // The reader starts where the checkpoint left the data, or at the start.
        let reader_config = data.reader_config(p);
        let reader = match resumed.as_ref().map(|s| s.position.as_ref()) {
            Some(position) => {
                let position = position.context("the checkpoint has no data position")?;
                BatchReader::resume(&data.train, reader_config, position)?
            }
            None => BatchReader::open(&data.train, reader_config)?,
        };
        let resumed_from = resumed.as_ref().map(|s| s.step);
        let mut run = TrainingRun {
            ctx,
            p,
            data,
            trainer,
            reader: Prefetch::spawn(reader, READ_AHEAD)?,
            state: resumed.unwrap_or(fresh),
            checkpoint,
            metrics: MetricsLog::new(ctx.work_dir),
            device_name: device.name,
            device_model: device.model,
            auto_batch,
            resumed_from,
            started: Instant::now(),
            window: (Instant::now(), 0),
            interval: Vec::new(),
        };
        match resumed_from {
            Some(step) => {
                run.metrics.keep_up_to(step)?;
                run.log(&format!(
                    "resumed from the checkpoint at step {step} of {}",
                    p.optim.total_steps
                ));
            }
            None => run.metrics.start_over(),
        }
        run.announce();
        Ok(run)
    }

    fn announce(&self) {
        let (p, c) = (self.p, &self.state.config);
        self.log(&format!(
            "{}: {} parameters ({} share_type {}, {}), {} training instances per epoch, device {}, \
             {} data-parallel worker(s), {} batches per evaluation",
            self.ctx.instance,
            c.parameter_count().total,
            p.model,
            c.share_type,
            c.ln_type.name(),
            self.reader.instances_per_epoch(),
            self.device_name,
            self.trainer.parallel.workers(),
            p.eval_batches_for(),
        ));
        if let Some(found) = &self.auto_batch {
            self.log(&format!(
                "{}; {} micro-batch(es) per step of {} rows",
                found.describe(),
                p.grad_accum_steps,
                p.batch_size * p.grad_accum_steps
            ));
        }
        if self.data.eval.is_empty() {
            self.log("no eval shard in the mask artifact (eval_fraction 0?): no evaluation");
        } else if self.data.floor.is_none() {
            self.log(
                "the mask artifact records no no-context floor (made before the mask stage \
                 recorded it): evaluations give no floor verdict",
            );
        }
        let progress = self.ctx.progress;
        progress.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner:.cyan} {prefix:.bold} {elapsed:>4} [{bar:25.cyan/blue}] {pos}/{len} {msg} ETA {eta}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        progress.set_length(p.optim.total_steps);
        progress.set_position(self.state.step);
    }

    /// A line in the stage's log (and the tracing log).
    fn log(&self, line: &str) {
        tracing::info!(target: "pretrain", "{}: {line}", self.ctx.instance);
        let _ = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.ctx.log_dir.join("train.log"))
            .and_then(|mut f| writeln!(f, "{line}"));
    }

    /// Steps until `steps`, with the logging, evaluations and checkpoints they are due. The
    /// steps' losses are read back only where something needs them or the model: a training
    /// line, an evaluation, a checkpoint, a snapshot, the end.
    pub fn train(&mut self) -> anyhow::Result<()> {
        self.window = (Instant::now(), 0);
        while self.state.step < self.p.optim.total_steps {
            self.step()?;
            if self.read_due() {
                self.read()?;
            }
            self.log_step_if_due()?;
            self.evaluate_if_due()?;
            self.checkpoint_if_due()?;
            self.snapshot_if_due()?;
        }
        Ok(())
    }

    /// One optimiser step, queued on the device (nothing is read back here).
    fn step(&mut self) -> anyhow::Result<()> {
        let p = self.p;
        // Seeding per step makes dropout reproducible across a resume.
        self.trainer
            .device
            .seed(p.seed ^ (self.state.step.wrapping_mul(0x9E37_79B9_7F4A_7C15)));
        let mut batches = Vec::with_capacity(p.grad_accum_steps);
        for _ in 0..p.grad_accum_steps {
            batches.push(
                self.reader
                    .next_batch()?
                    .context("the training reader ended")?,
            );
        }
        let t0 = Instant::now();
        self.trainer.enqueue(self.state.step, &batches);
        self.state.timings.train_seconds += t0.elapsed().as_secs_f64();
        let tokens: u64 = batches.iter().map(|b| b.tokens).sum();
        let padded: u64 = batches
            .iter()
            .map(|b| (b.batch_size * b.seq_len) as u64)
            .sum();
        self.state.step += 1;
        self.state.tokens_seen += tokens;
        self.state.padded_tokens_seen += padded;
        self.window.1 += tokens;
        self.ctx.progress.set_position(self.state.step);
        Ok(())
    }

    /// Whether the step just done needs the steps read back: a line, an evaluation, a
    /// checkpoint or a snapshot is due (each of them also checks the model is finite).
    fn read_due(&self) -> bool {
        let step = self.state.step;
        self.log_due()
            || self.eval_due()
            || (step.is_multiple_of(self.p.checkpoint_interval) && step < self.p.optim.total_steps)
            || self.p.save_steps.contains(&step)
    }

    /// Reads the queued steps back (the wait for the device counts as training time); a
    /// non-finite loss or gradient norm stops the run, keeping the last checkpoint.
    fn read(&mut self) -> anyhow::Result<()> {
        let t0 = Instant::now();
        let read = self.trainer.flush().map_err(|e| {
            anyhow::anyhow!(
                "step {}: {e} (learning rate {:.3e}); training stopped. The last good checkpoint \
                 ({}) stays in {}: lower learning_rate or raise warmup_steps, then run again",
                e.step + 1,
                self.p.optim.lr_at(e.step),
                resumed_or_saved(&self.checkpoint),
                self.checkpoint.dir.display()
            )
        })?;
        self.state.timings.train_seconds += t0.elapsed().as_secs_f64();
        self.interval.extend(read);
        Ok(())
    }

    fn log_due(&self) -> bool {
        let step = self.state.step;
        step.is_multiple_of(self.p.log_interval) || step == self.p.optim.total_steps || step == 1
    }

    fn eval_due(&self) -> bool {
        let step = self.state.step;
        (self.p.eval_interval > 0 && step.is_multiple_of(self.p.eval_interval))
            || step == self.p.optim.total_steps
    }

    /// The training line of the steps since the last one: their mean losses and gradient
    /// norm, their accuracies over all their batches ([`StepStats::over`]).
    fn log_step_if_due(&mut self) -> anyhow::Result<()> {
        if !self.log_due() {
            return Ok(());
        }
        let stats = StepStats::over(&std::mem::take(&mut self.interval));
        let step = self.state.step;
        let rate = self.window.1 as f64 / self.window.0.elapsed().as_secs_f64().max(1e-9);
        self.window = (Instant::now(), 0);
        let line = step_line(
            step,
            &stats,
            rate,
            self.started.elapsed().as_secs_f64(),
            self.p.sop,
        );
        self.metrics.append(&line)?;
        self.ctx.progress.set_message(format!(
            "loss {:.3} · mlm acc {:.1}% · {:.0} tok/s",
            stats.loss,
            100.0 * stats.mlm_correct / stats.predictions.max(1) as f64,
            rate
        ));
        self.log(&line.to_string());
        Ok(())
    }

    fn evaluate_if_due(&mut self) -> anyhow::Result<()> {
        let step = self.state.step;
        if !self.eval_due() || self.data.eval.is_empty() {
            return Ok(());
        }
        let t0 = Instant::now();
        let config = BatchReaderConfig {
            drop_last: false,
            ..self.data.reader_config(self.p)
        };
        let reader = BatchReader::eval(&self.data.eval, config)?;
        let e = self.trainer.evaluate(reader, self.p.eval_batches_for())?;
        let seconds = t0.elapsed().as_secs_f64();
        self.state.timings.eval_seconds += seconds;
        let line = eval_line(step, &e, seconds, self.p.sop);
        self.metrics.append(&line)?;
        self.log(&line.to_string());
        self.log(&format!(
            "step {step}: {}",
            floor_sentence(&e, self.data.floor.as_ref())
        ));
        if self.p.sop {
            self.note_sop(step, &e);
        }
        self.state.last_eval = Some(e);
        // Evaluation time is not training time: keep it out of the next tokens/s.
        self.window.0 += t0.elapsed();
        Ok(())
    }

    /// Passes over the training instances so far (fractional).
    fn passes(&self) -> f64 {
        let rows_per_step = (self.p.batch_size * self.p.grad_accum_steps) as f64;
        let per_epoch = self.reader.instances_per_epoch().max(1) as f64;
        self.state.step as f64 * rows_per_step / per_epoch
    }

    /// Keeps the lowest held-out SOP loss, and says in the log when the head memorises.
    fn note_sop(&mut self, step: u64, e: &EvalStats) {
        if self
            .state
            .sop_lowest
            .is_none_or(|(_, low)| e.sop_loss < low)
        {
            self.state.sop_lowest = Some((step, e.sop_loss));
        }
        if let Some(sentence) = sop_floor_sentence(e, self.data.floor.as_ref()) {
            self.log(&format!("step {step}: {sentence}"));
        }
        if let Some(sentence) =
            sop_trend(self.state.sop_lowest, Some(e), self.passes()).and_then(|t| sop_sentence(&t))
        {
            self.log(&format!("step {step}: {sentence}"));
        }
    }

    fn checkpoint_if_due(&mut self) -> anyhow::Result<()> {
        let step = self.state.step;
        if !step.is_multiple_of(self.p.checkpoint_interval) || step >= self.p.optim.total_steps {
            return Ok(());
        }
        let t0 = Instant::now();
        self.state.position = Some(self.reader.position());
        // The time of this save is counted before it is written, so the state on disk
        // includes it.
        let mut saved = self.state.clone();
        saved.timings.checkpoint_seconds += t0.elapsed().as_secs_f64();
        self.checkpoint
            .save(&self.trainer.model, &self.trainer.optim, &saved)?;
        self.state.timings.checkpoint_seconds += t0.elapsed().as_secs_f64();
        self.log(&format!("checkpoint at step {step}"));
        self.window.0 += t0.elapsed();
        Ok(())
    }

    /// The model as it is at one of the `save_steps` (timed as checkpoint time).
    fn snapshot_if_due(&mut self) -> anyhow::Result<()> {
        let step = self.state.step;
        if !self.p.save_steps.contains(&step) {
            return Ok(());
        }
        let t0 = Instant::now();
        snapshots::save(
            self.ctx.work_dir,
            step,
            self.state.tokens_seen,
            &self.state.config,
            &self.trainer.inference_model(),
            &self.data.vocab_dir,
        )?;
        self.state.timings.checkpoint_seconds += t0.elapsed().as_secs_f64();
        self.log(&format!("model saved at step {step} (save_steps)"));
        self.window.0 += t0.elapsed();
        Ok(())
    }

    /// The artifact: the Hugging Face export, the vocabulary, `metrics.jsonl`, its TensorBoard
    /// events and `metrics.json`; then the checkpoint is no longer needed.
    pub fn export(self) -> anyhow::Result<()> {
        let out = self.ctx.out_dir;
        let config = &self.state.config;
        hf::save_pretraining(out, config, &self.trainer.inference_model())?;
        snapshots::copy_vocabulary(&self.data.vocab_dir, out)?;
        snapshots::publish(self.ctx.work_dir, out, &self.p.save_steps)?;
        let log_dir = self.ctx.log_dir;
        let lines = crate::metrics::read_lines(&self.metrics.jsonl)?;
        pipeline_metrics::write_metrics_jsonl(out, log_dir, &lines)?;
        // The events are rebuilt from the full lines (their wall times are the lines'
        // elapsed_s, see write_from_jsonl) into the log directory beside them: they carry the
        // timings, which the digested artifact does not.
        pipeline_tbevents::write_from_jsonl(
            &log_dir.join(pipeline_metrics::METRICS_JSONL),
            &log_dir.join(pipeline_tbevents::FILE_NAME),
            "step",
        )?;
        pipeline_metrics::write_metrics(out, log_dir, &self.summary()?)?;
        remove_checkpoint(&self.checkpoint.dir)?;
        self.log(&format!(
            "done: {} steps, {:.0} tokens/s, {}, eval {}",
            self.state.step,
            self.state.tokens_seen as f64 / self.state.timings.train_seconds.max(1e-9),
            time_split(&self.state.timings, self.started.elapsed().as_secs_f64()),
            self.state
                .last_eval
                .as_ref()
                .map(|e| if self.p.sop {
                    format!(
                        "MLM acc {:.3}, SOP acc {:.3}",
                        e.mlm_accuracy, e.sop_accuracy
                    )
                } else {
                    format!("MLM acc {:.3} (MLM only)", e.mlm_accuracy)
                })
                .unwrap_or_else(|| "none".into())
        ));
        Ok(())
    }

    /// `metrics.json` (docs/metrics.md).
    fn summary(&self) -> anyhow::Result<Value> {
        let (p, s, c) = (self.p, &self.state, &self.state.config);
        let train_s = s.timings.train_seconds.max(1e-9);
        let rows_per_step = (p.batch_size * p.grad_accum_steps) as u64;
        let micro_batches = s.step * p.grad_accum_steps as u64;
        // Model FLOPs over the run, from the mean padded sequence length.
        let mean_seq = s.padded_tokens_seen as f64 / (s.step * rows_per_step).max(1) as f64;
        let flops = c.training_flops(
            p.batch_size,
            mean_seq.round() as usize,
            self.data.max_predictions,
        ) * micro_batches as f64;
        let wall = self.started.elapsed().as_secs_f64();
        let per_epoch = self.reader.instances_per_epoch();
        let record = PretrainRecord {
            model: Some(p.model.clone()),
            config: Some(serde_json::to_value(c)?),
            parameters: Some(serde_json::to_value(c.parameter_count())?),
            share_type: Some(c.share_type.name().into()),
            ln_type: Some(c.ln_type.name().into()),
            hf_compatible: Some(c.hf_compatible().is_ok()),
            steps: Some(s.step),
            batch_size: Some(p.batch_size as u64),
            grad_accum_steps: Some(p.grad_accum_steps as u64),
            effective_batch_size: Some(rows_per_step),
            batch_size_auto: self
                .auto_batch
                .as_ref()
                .map(serde_json::to_value)
                .transpose()?,
            max_seq_length: Some(self.data.max_seq_length as u64),
            optimizer: Some(serde_json::to_value(&p.optim)?),
            tokens_seen: Some(s.tokens_seen),
            padded_tokens_seen: Some(s.padded_tokens_seen),
            train_seconds: Some(round(s.timings.train_seconds)),
            eval_seconds: Some(round(s.timings.eval_seconds)),
            checkpoint_seconds: Some(round(s.timings.checkpoint_seconds)),
            wall_seconds: Some(round(wall)),
            time_split: Some(time_split(&s.timings, wall)),
            tokens_per_s: Some((s.tokens_seen as f64 / train_s).round()),
            padded_tokens_per_s: Some((s.padded_tokens_seen as f64 / train_s).round()),
            model_tflops_per_s: Some(round(flops / train_s / 1e12)),
            device: Some(self.device_name.clone()),
            device_model: self.device_model.clone(),
            precision: Some(p.precision.name().into()),
            threads: Some(std::thread::available_parallelism().map_or(1, |n| n.get()) as u64),
            data_parallel_workers: Some(self.trainer.parallel.workers() as u64),
            eval_batches: Some(p.eval_batches_for()),
            resumed_from_step: self.resumed_from,
            train_instances_per_epoch: Some(per_epoch),
            epochs: Some(round(self.passes())),
            sop: Some(p.sop),
            masking: Some(self.data.masking.clone()),
            mask_instance: self.data.mask_instance.clone(),
            clean_instance: self.data.clean_instance.clone(),
            eval: Some(eval_summary(
                s.last_eval.as_ref(),
                p.sop,
                self.data.floor.as_ref(),
            )),
            save_steps: Some(p.save_steps.clone()),
            sop_trend: p
                .sop
                .then(|| sop_trend(s.sop_lowest, s.last_eval.as_ref(), self.passes()))
                .flatten(),
        };
        Ok(serde_json::to_value(record)?)
    }
}

/// A test hook: `PIPELINE_FAULT_NAN_AT_STEP=N` makes step N's (1-based) loss NaN on the
/// device ([`Trainer::nan_at_step`]), so that the NaN handling can be tested end to end
/// without a diverging model.
fn fault_injected_step() -> Option<u64> {
    std::env::var("PIPELINE_FAULT_NAN_AT_STEP")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
}

/// The model and optimiser of `checkpoint` put into `trainer`, and the training state saved
/// with them; an error when it was made for another model config than `config`.
fn resume(
    checkpoint: &Checkpoint,
    trainer: &mut Trainer,
    config: &AlbertConfig,
) -> anyhow::Result<TrainState> {
    let (model, optim, saved): (_, _, TrainState) =
        checkpoint.load(trainer.model.clone(), trainer.optim.clone())?;
    if &saved.config != config {
        anyhow::bail!(
            "the checkpoint in {} was made for another model config; remove it to start over",
            checkpoint.dir.display()
        );
    }
    trainer.model = model;
    trainer.optim = optim;
    Ok(saved)
}

fn resumed_or_saved(c: &Checkpoint) -> String {
    // A checkpoint of this stage's own work folder, but read as every record is (bounded).
    pipeline_metrics::read_record::<Value>(&c.dir.join("state.json"))
        .ok()
        .and_then(|v| v["step"].as_u64())
        .map(|s| format!("step {s}"))
        .unwrap_or_else(|| "none yet".into())
}
