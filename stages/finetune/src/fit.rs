//! The epochs of a fine-tuning run: each trains on the whole training split in
//! length-grouped batches, then evaluates on the dev split; the epoch with the best dev
//! score (accuracy; entity F1 for tagging; F1 for spans) is kept (its weights, dev scores
//! and predictions).

use std::time::Instant;

use anyhow::bail;
use burn::module::Module;
use burn::tensor::Device;
use pipeline_albert::parallel::DataParallel;
use serde::Serialize;

use crate::data::{EncodedSplit, Targets, epoch_batches};
use crate::encode::{Encoded, pad_length};
use crate::kinds::{AnyKind, Decoded, KindError, Scores};
use crate::params::TrainParams;
use crate::predict::outputs;
use crate::task_model::TaskModel;
use crate::train::{FineTuner, Gold, StepResult, read_steps};

/// One epoch, as `metrics.jsonl` and `metrics.json`'s history record it.
#[derive(Debug, Clone, Serialize)]
pub struct EpochRecord {
    /// Counted from 1.
    pub epoch: usize,
    /// The mean training loss over the epoch's examples (each step's mean weighted by its
    /// batch's size).
    pub train_loss: f64,
    /// Of examples (of labelled characters, tagging; of windows whose start and end are both
    /// right, spans).
    pub train_accuracy: f64,
    /// Classification kinds and tagging (absent for spans).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dev_accuracy: Option<f64>,
    /// Binary F1 of a two-class task; a span task's F1 (what its best epoch is chosen by).
    pub dev_f1: Option<f64>,
    /// Macro-averaged F1 over the labels; absent for spans.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dev_macro_f1: Option<f64>,
    /// Tagging: the entity F1 on dev (what the best epoch is chosen by).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dev_entity_f1: Option<f64>,
    /// Spans: the exact match on dev.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dev_exact_match: Option<f64>,
    /// How the model's dev predictions spread over the labels (a model stuck on one class
    /// shows here first); absent for spans.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dev_predicted: Vec<usize>,
    /// Wall-clock seconds of the epoch's training steps (the dev evaluation not included).
    pub seconds: f64,
    /// The learning rate of the epoch's last step (warmup, then linear decay).
    pub learning_rate: f64,
    /// The mean global gradient norm before clipping over the epoch's steps.
    pub grad_norm: f64,
    /// Real (unpadded) training tokens a second over the epoch.
    pub tokens_per_s: f64,
}

/// The epoch with the best dev score: its weights (without autodiff), dev scores and dev
/// predictions.
pub struct BestEpoch {
    /// Counted from 1; the first of equal scores.
    pub epoch: usize,
    /// Its weights, on the device without autodiff: what is saved and evaluated.
    pub model: TaskModel,
    /// Its dev scores (metrics.json's `dev`).
    pub dev_scores: Scores,
    /// Its dev predictions, one per example (the dev rows of predictions.tsv).
    pub dev_decoded: Decoded,
}

/// What the epochs left.
pub struct Fit {
    /// The epoch kept.
    pub best: BestEpoch,
    /// Every epoch, in order (metrics.jsonl).
    pub history: Vec<EpochRecord>,
    /// Optimiser steps taken over all epochs.
    pub steps: u64,
    /// Seconds spent in training steps over all epochs (dev evaluations not included).
    pub train_seconds: f64,
    /// Tokens of the training batches as padded: each batch's longest feature, rounded up to
    /// 8, times its features.
    pub padded_tokens: u64,
    /// Real tokens of the training batches (a feature's longest row), over all epochs;
    /// against `padded_tokens`, metrics.json's `padding_share`.
    pub tokens: u64,
}

/// The predictions of `model` for every example of `split`, in order.
pub fn predict_split(
    kind: &dyn AnyKind,
    model: &TaskModel,
    split: &EncodedSplit,
    p: &TrainParams,
    workers: &DataParallel,
    device: &Device,
) -> Result<Decoded, KindError> {
    let out = outputs(model, split, p.eval_batch_size, workers, device, &|_| {});
    kind.decode(split, out)
}

/// Steps between two reads of the training steps' losses: each read waits for the device to
/// finish every step queued, so reading each step kept a GPU idle while the host prepared the
/// next; 32 steps bound the steps a loss that is not finite goes unnoticed (the run stops at
/// the read, naming the step).
const READ_EVERY: usize = 32;

/// Running sums of one epoch's training, fed steps on the device and read [`READ_EVERY`]
/// steps at a time.
#[derive(Default)]
struct EpochSums {
    loss: f64,
    correct: f64,
    counted: f64,
    examples: usize,
    grad_norm: f64,
    steps: usize,
    tokens: u64,
    learning_rate: f64,
    /// Steps not read yet.
    pending: Vec<StepResult>,
    /// Of each pending step: its number, its examples and its learning rate.
    pending_at: Vec<(u64, usize, f64)>,
}

impl EpochSums {
    /// Adds one step: its real tokens now, the rest when it is read (at once every
    /// [`READ_EVERY`] steps); a step read with a loss that is not finite is the error.
    fn add(
        &mut self,
        r: StepResult,
        (step, examples): (u64, usize),
        tokens: u64,
        learning_rate: f64,
        epoch: usize,
    ) -> anyhow::Result<()> {
        self.tokens += tokens;
        self.pending.push(r);
        self.pending_at.push((step, examples, learning_rate));
        if self.pending.len() >= READ_EVERY {
            self.read(epoch)?;
        }
        Ok(())
    }

    /// Reads the pending steps in one go and adds them: their loss (a mean over the batch,
    /// weighted by its examples), accuracy counts and gradient norm; the learning rate is the
    /// last step's. The first with a loss that is not finite stops training with the
    /// learning rate that caused it.
    fn read(&mut self, epoch: usize) -> anyhow::Result<()> {
        let values = read_steps(&std::mem::take(&mut self.pending));
        for (v, (step, examples, learning_rate)) in values.iter().zip(self.pending_at.drain(..)) {
            if !v.loss.is_finite() {
                bail!(
                    "epoch {epoch}, step {}: the loss is {} (learning rate {learning_rate:.3e}); \
                     training stopped: lower learning_rate",
                    step + 1,
                    v.loss,
                );
            }
            self.grad_norm += v.grad_norm;
            self.steps += 1;
            self.learning_rate = learning_rate;
            self.loss += v.loss * examples as f64;
            self.correct += v.correct;
            self.counted += v.counted;
            self.examples += examples;
        }
        Ok(())
    }
}

/// One optimiser step on a batch (row indices of `train`) with its gold targets, left on the
/// device; gold the model's head does not train on stops training with both named.
fn train_batch(
    tuner: &mut FineTuner,
    train: &EncodedSplit,
    batch: &[usize],
    step: u64,
) -> anyhow::Result<StepResult> {
    let rows: Vec<&[Encoded]> = batch.iter().map(|&i| &train.rows[i][..]).collect();
    Ok(match &train.targets {
        Targets::Classes(c) => {
            let classes: Vec<usize> = batch.iter().map(|&i| c[i]).collect();
            tuner.try_step(step, &rows, Gold::Classes(&classes))
        }
        Targets::Tags(t) => {
            let tags: Vec<&[i64]> = batch.iter().map(|&i| &t[i][..]).collect();
            tuner.try_step(step, &rows, Gold::Tags(&tags))
        }
        Targets::Spans(s) => {
            let spans: Vec<(usize, usize)> = batch.iter().map(|&i| s[i]).collect();
            tuner.try_step(step, &rows, Gold::Spans(&spans))
        }
        Targets::Scores(s) => {
            let scores: Vec<f32> = batch.iter().map(|&i| s[i]).collect();
            tuner.try_step(step, &rows, Gold::Scores(&scores))
        }
    }?)
}

/// The task being fitted: its kind and labels (tags).
#[derive(Clone, Copy)]
pub struct Task<'a> {
    /// How its examples are encoded, decoded and scored.
    pub kind: &'static dyn AnyKind,
    /// The protocol's labels (for tagging, the tags), in id order.
    pub labels: &'a [String],
}

/// Trains `p.epochs` epochs on `train`, selecting on `dev`; `log` gets a line per epoch,
/// `progress` the steps done.
pub fn fit(
    task: Task,
    tuner: &mut FineTuner,
    p: &TrainParams,
    (train, dev): (&EncodedSplit, &EncodedSplit),
    log: &dyn Fn(&str),
    progress: &dyn Fn(u64),
) -> anyhow::Result<Fit> {
    let Task { kind, labels } = task;
    let lengths: Vec<usize> = (0..train.rows.len()).map(|i| train.length(i)).collect();
    let eval_device = tuner.device.clone().without_autodiff();
    let (mut history, mut best) = (Vec::new(), None::<BestEpoch>);
    let (mut step, mut train_seconds, mut padded_tokens, mut tokens) = (0u64, 0.0, 0u64, 0u64);
    for epoch in 1..=p.epochs {
        let t0 = Instant::now();
        let epoch_seed = p.seed ^ (epoch as u64).wrapping_mul(0x2545_F491_4F6C_DD1D);
        let mut sums = EpochSums::default();
        for batch in epoch_batches(&lengths, p.batch_size, epoch_seed, p.group_by_length) {
            tuner.device.seed(p.seed.wrapping_add(step));
            let r = train_batch(tuner, train, &batch, step)?;
            let longest = batch.iter().map(|&i| lengths[i]).max().unwrap_or(0);
            padded_tokens += (pad_length(longest, &tuner.device) * batch.len()) as u64;
            let batch_tokens = batch.iter().map(|&i| lengths[i] as u64).sum::<u64>();
            tokens += batch_tokens;
            let lr = tuner.optim_config.lr_at(step);
            sums.add(r, (step, batch.len()), batch_tokens, lr, epoch)?;
            step += 1;
            progress(step);
        }
        // The epoch's time includes the device's work: the read waits for its last step.
        sums.read(epoch)?;
        let seconds = t0.elapsed().as_secs_f64();
        train_seconds += seconds;
        let model = tuner.model.valid();
        let dev_decoded = predict_split(kind, &model, dev, p, &tuner.parallel, &eval_device)?;
        let dev_scores = kind
            .score(dev, &dev_decoded, labels)
            .map_err(|e| anyhow::anyhow!("dev metrics: {e}"))?;
        let record = record(epoch, &sums, &dev_scores, labels.len(), seconds);
        log(&serde_json::to_string(&record)?);
        if best
            .as_ref()
            .is_none_or(|b| dev_scores.selection() > b.dev_scores.selection())
        {
            best = Some(BestEpoch {
                epoch,
                model,
                dev_scores,
                dev_decoded,
            });
        }
        history.push(record);
    }
    let Some(best) = best else {
        bail!("no epoch was trained");
    };
    Ok(Fit {
        best,
        history,
        steps: step,
        train_seconds,
        padded_tokens,
        tokens,
    })
}

/// The epoch's line of `metrics.jsonl`.
fn record(
    epoch: usize,
    sums: &EpochSums,
    dev: &Scores,
    classes: usize,
    seconds: f64,
) -> EpochRecord {
    let m = dev.classes.as_ref();
    // Predicted per label: the confusion matrix's column sums.
    let dev_predicted: Vec<usize> = m
        .map(|m| {
            (0..classes)
                .map(|c| {
                    m.confusion
                        .counts
                        .iter()
                        .map(|row| row.get(c).copied().unwrap_or(0))
                        .sum()
                })
                .collect()
        })
        .unwrap_or_default();
    EpochRecord {
        epoch,
        train_loss: sums.loss / sums.examples.max(1) as f64,
        train_accuracy: sums.correct / sums.counted.max(1.0),
        dev_accuracy: m.map(|m| m.accuracy),
        dev_f1: m.and_then(|m| m.f1).or(dev.spans.as_ref().map(|s| s.f1)),
        dev_macro_f1: m.map(|m| m.macro_f1),
        dev_entity_f1: dev.entities.as_ref().map(|e| e.micro.f1),
        dev_exact_match: dev.spans.as_ref().map(|s| s.exact_match),
        dev_predicted,
        seconds,
        learning_rate: sums.learning_rate,
        grad_norm: sums.grad_norm / sums.steps.max(1) as f64,
        tokens_per_s: sums.tokens as f64 / seconds.max(1e-9),
    }
}

#[cfg(test)]
mod tests {
    use burn::tensor::{Device, Tensor};

    use super::*;

    /// A step's result on flex: its loss, correct count out of 4, gradient norm.
    fn step(loss: f32, correct: f32, norm: f32) -> StepResult {
        let one = |v: f32| Tensor::<1>::from_floats([v], &Device::flex());
        StepResult {
            loss: one(loss),
            correct: one(correct),
            counted: 4.0,
            grad_norm: one(norm),
        }
    }

    #[test]
    fn steps_are_read_in_windows_and_summed_as_each_step_was() {
        let mut sums = EpochSums::default();
        for k in 0..READ_EVERY as u64 + 2 {
            let lr = 1e-3 * (k + 1) as f64;
            sums.add(step(2.0, 3.0, 0.5), (k, 4), 10, lr, 1).unwrap();
        }
        // One window read; the two steps after it wait for the epoch's end.
        assert_eq!((sums.steps, sums.pending.len()), (READ_EVERY, 2));
        sums.read(1).unwrap();
        let n = READ_EVERY + 2;
        assert_eq!((sums.steps, sums.examples), (n, 4 * n));
        assert_eq!(sums.tokens, 10 * n as u64);
        assert_eq!((sums.loss, sums.correct), (8.0 * n as f64, 3.0 * n as f64));
        assert_eq!(
            (sums.counted, sums.grad_norm),
            (4.0 * n as f64, 0.5 * n as f64)
        );
        assert_eq!(sums.learning_rate, 1e-3 * n as f64);
    }

    #[test]
    fn a_loss_that_is_not_finite_stops_training_at_its_step_with_its_learning_rate() {
        let mut sums = EpochSums::default();
        sums.add(step(1.0, 1.0, 1.0), (6, 4), 10, 1e-4, 2).unwrap();
        sums.add(step(f32::NAN, 0.0, 1.0), (7, 4), 10, 2e-4, 2)
            .unwrap();
        sums.add(step(f32::INFINITY, 0.0, 1.0), (8, 4), 10, 3e-4, 2)
            .unwrap();
        let e = sums.read(2).unwrap_err().to_string();
        assert_eq!(
            e,
            "epoch 2, step 8: the loss is NaN (learning rate 2.000e-4); training stopped: \
             lower learning_rate"
        );
    }
}
