//! The epochs of a fine-tuning run: each trains on the whole training split in
//! length-grouped batches, then evaluates on the dev split; the epoch with the best dev
//! accuracy is kept (its weights, its dev metrics and probabilities).

use std::time::Instant;

use anyhow::bail;
use burn::module::Module;
use burn::tensor::Device;
use pipeline_albert::parallel::DataParallel;
use pipeline_tasks::{Metrics, evaluate};
use serde::Serialize;

use crate::data::{EncodedSplit, epoch_batches};
use crate::encode::Encoded;
use crate::params::TrainParams;
use crate::predict::{argmax, choice_probabilities, pair_probabilities};
use crate::task_model::TaskModel;
use crate::train::FineTuner;

/// One epoch, as `metrics.jsonl` and `metrics.json`'s history record it.
#[derive(Debug, Clone, Serialize)]
pub struct EpochRecord {
    pub epoch: usize,
    pub train_loss: f64,
    pub train_accuracy: f64,
    pub dev_accuracy: f64,
    pub dev_f1: Option<f64>,
    pub dev_macro_f1: f64,
    /// How the model's dev predictions spread over the labels (a model stuck on one class
    /// shows here first).
    pub dev_predicted: Vec<usize>,
    pub seconds: f64,
}

/// The epoch with the best dev accuracy: its weights (without autodiff), dev metrics and dev
/// probabilities.
pub struct BestEpoch {
    pub epoch: usize,
    pub model: TaskModel,
    pub dev_metrics: Metrics,
    pub dev_probs: Vec<Vec<f32>>,
}

/// What the epochs left.
pub struct Fit {
    pub best: BestEpoch,
    pub history: Vec<EpochRecord>,
    pub steps: u64,
    pub train_seconds: f64,
    pub padded_tokens: u64,
    pub tokens: u64,
}

/// Class (or choice) probabilities of every example of `split`, in order.
pub fn probabilities(
    model: &TaskModel,
    split: &EncodedSplit,
    p: &TrainParams,
    workers: &DataParallel,
    device: &Device,
) -> Vec<Vec<f32>> {
    let noop = |_: usize| {};
    match model {
        TaskModel::Pair(m) => {
            let rows: Vec<Encoded> = split.rows.iter().map(|r| r[0].clone()).collect();
            pair_probabilities(m, &rows, p.eval_batch_size, workers, device, &noop)
        }
        TaskModel::Choice(m) => choice_probabilities(
            m,
            &split.rows,
            (p.eval_batch_size / 4).max(1),
            workers,
            device,
            &noop,
        ),
    }
}

/// Trains `p.epochs` epochs on `train`, selecting on `dev`; `log` gets a line per epoch,
/// `progress` the steps done.
pub fn fit(
    tuner: &mut FineTuner,
    p: &TrainParams,
    train: &EncodedSplit,
    dev: &EncodedSplit,
    labels: &[String],
    log: &dyn Fn(&str),
    progress: &dyn Fn(u64),
) -> anyhow::Result<Fit> {
    let lengths: Vec<usize> = (0..train.rows.len()).map(|i| train.length(i)).collect();
    let eval_device = tuner.device.clone().without_autodiff();
    let (mut history, mut best) = (Vec::new(), None::<BestEpoch>);
    let (mut step, mut train_seconds, mut padded_tokens, mut tokens) = (0u64, 0.0, 0u64, 0u64);
    for epoch in 1..=p.epochs {
        let t0 = Instant::now();
        let epoch_seed = p.seed ^ (epoch as u64).wrapping_mul(0x2545_F491_4F6C_DD1D);
        let (mut loss_sum, mut correct, mut seen) = (0.0, 0.0, 0usize);
        for batch in epoch_batches(&lengths, p.batch_size, epoch_seed, p.group_by_length) {
            tuner.device.seed(p.seed.wrapping_add(step));
            let rows: Vec<&[Encoded]> = batch.iter().map(|&i| &train.rows[i][..]).collect();
            let gold: Vec<usize> = batch.iter().map(|&i| train.labels[i]).collect();
            let r = tuner.step(step, &rows, &gold);
            if !r.loss.is_finite() {
                bail!(
                    "epoch {epoch}, step {}: the loss is {} (learning rate {:.3e}); training \
                     stopped: lower learning_rate",
                    step + 1,
                    r.loss,
                    tuner.optim_config.lr_at(step)
                );
            }
            let longest = batch
                .iter()
                .map(|&i| lengths[i])
                .max()
                .unwrap_or(0)
                .div_ceil(8)
                * 8;
            padded_tokens += (longest * batch.len()) as u64;
            tokens += batch.iter().map(|&i| lengths[i] as u64).sum::<u64>();
            loss_sum += r.loss * batch.len() as f64;
            correct += r.correct;
            seen += batch.len();
            step += 1;
            progress(step);
        }
        let seconds = t0.elapsed().as_secs_f64();
        train_seconds += seconds;
        let model = tuner.model.valid();
        let dev_probs = probabilities(&model, dev, p, &tuner.parallel, &eval_device);
        let dev_pred: Vec<usize> = dev_probs.iter().map(|q| argmax(q)).collect();
        let dev_metrics = evaluate(&dev.labels, &dev_pred, labels)
            .map_err(|e| anyhow::anyhow!("dev metrics: {e}"))?;
        let mut dev_predicted = vec![0usize; labels.len()];
        for &k in &dev_pred {
            dev_predicted[k.min(labels.len().saturating_sub(1))] += 1;
        }
        let record = EpochRecord {
            epoch,
            train_loss: loss_sum / seen.max(1) as f64,
            train_accuracy: correct / seen.max(1) as f64,
            dev_accuracy: dev_metrics.accuracy,
            dev_f1: dev_metrics.f1,
            dev_macro_f1: dev_metrics.macro_f1,
            dev_predicted,
            seconds,
        };
        log(&serde_json::to_string(&record)?);
        if best
            .as_ref()
            .is_none_or(|b| dev_metrics.accuracy > b.dev_metrics.accuracy)
        {
            best = Some(BestEpoch {
                epoch,
                model,
                dev_metrics,
                dev_probs,
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
