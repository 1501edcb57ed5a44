//! One optimisation step and one evaluation pass, without the stage around them (the `pipeline
//! bench train` command and the tests drive it directly).

use anyhow::bail;
use burn::module::Module;
use burn::optim::{GradientsAccumulator, GradientsParams};
use burn::tensor::{Device, Int, Tensor, TensorData};
use pipeline_albert::parallel::{DataParallel, replica};
use pipeline_albert::train::{OptimConfig, TrainingOptimizer};
use pipeline_albert::{AlbertConfig, AlbertForPreTraining, AlbertInput, MlmTargets, upload};
use pipeline_shards::{Batch, BatchReader};
use serde::{Deserialize, Serialize};

use crate::on_device;

/// A shards [`Batch`] as tensors on `device`, copied there without waiting for it ([`upload`]);
/// with `mask_id` the forward pass also counts its MLM predictions by corruption.
pub fn batch_tensors(
    b: &Batch,
    device: &Device,
    mask_id: Option<u32>,
) -> (AlbertInput, MlmTargets, Tensor<1, Int>) {
    let (n, s, m) = (b.batch_size, b.seq_len, b.max_predictions);
    let input = AlbertInput::from_rows(
        n,
        s,
        b.input_ids.clone(),
        b.token_type_ids.clone(),
        b.attention_mask.clone(),
        device,
    );
    let mlm = MlmTargets {
        positions: upload::ints(TensorData::new(b.masked_positions.clone(), [n, m]), device),
        ids: upload::ints(TensorData::new(b.masked_ids.clone(), [n, m]), device),
        weights: upload::floats(TensorData::new(b.masked_weights.clone(), [n, m]), device),
        mask_id,
    };
    let sop = upload::ints(
        TensorData::new(b.sentence_order_labels.clone(), [n]),
        device,
    );
    (input, mlm, sop)
}

/// What one optimisation step did.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StepStats {
    /// The training loss (masked LM + sentence order; the masked LM's alone without SOP).
    pub loss: f64,
    /// The masked-LM loss.
    pub mlm_loss: f64,
    /// The sentence-order loss.
    pub sop_loss: f64,
    /// Correct masked-token predictions and their number, over the step's batches.
    pub mlm_correct: f64,
    /// Masked positions.
    pub predictions: u64,
    /// Correct sentence-order predictions.
    pub sop_correct: f64,
    /// Rows trained on.
    pub rows: u64,
    /// Real (unpadded) tokens, and tokens including padding.
    pub tokens: u64,
    /// Tokens including padding.
    pub padded_tokens: u64,
    /// The global gradient norm before clipping.
    pub grad_norm: f64,
    /// The learning rate of the step.
    pub lr: f64,
    /// Model FLOPs of the step (for MFU).
    pub flops: f64,
}

impl StepStats {
    /// The steps of one logging interval as one line: the losses and the gradient norm are
    /// their means over the steps, the counts (correct predictions, positions, rows, tokens,
    /// FLOPs) their sums, so accuracies are over every batch of the interval; the learning
    /// rate is the last step's.
    pub fn over(steps: &[StepStats]) -> StepStats {
        let n = steps.len().max(1) as f64;
        let mut sum = StepStats::default();
        for s in steps {
            sum.loss += s.loss / n;
            sum.mlm_loss += s.mlm_loss / n;
            sum.sop_loss += s.sop_loss / n;
            sum.grad_norm += s.grad_norm / n;
            sum.mlm_correct += s.mlm_correct;
            sum.predictions += s.predictions;
            sum.sop_correct += s.sop_correct;
            sum.rows += s.rows;
            sum.tokens += s.tokens;
            sum.padded_tokens += s.padded_tokens;
            sum.flops += s.flops;
            sum.lr = s.lr;
        }
        sum
    }
}

/// Evaluation on the held-out shard.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EvalStats {
    /// Mean masked-LM loss.
    pub mlm_loss: f64,
    /// Share of masked tokens predicted right.
    pub mlm_accuracy: f64,
    /// Mean sentence-order loss.
    pub sop_loss: f64,
    /// Share of sentence orders predicted right.
    pub sop_accuracy: f64,
    /// Instances evaluated.
    pub instances: u64,
    /// Masked positions evaluated.
    pub predictions: u64,
    /// The MLM accuracy by the corruption each masked position's input shows; `None` when
    /// the trainer knows no `[MASK]` id (and in a checkpoint written before it was counted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mlm_by_corruption: Option<ByCorruption>,
}

/// Masked-LM accuracy at the positions whose input is `[MASK]`, a random token, and the label
/// itself (kept), read off the batch: input `[MASK]`; else input = label; else random.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ByCorruption {
    /// Positions whose input is `[MASK]`.
    pub mask: Accuracy,
    /// Positions whose input is another token than the label.
    pub random: Accuracy,
    /// Positions whose input is the label.
    pub kept: Accuracy,
}

/// Correct predictions over some masked positions.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Accuracy {
    /// Share predicted right (0 without positions).
    pub accuracy: f64,
    /// Positions evaluated.
    pub predictions: u64,
}

impl ByCorruption {
    /// From the summed `[correct mask, random, kept, count mask, random, kept]` of the passes.
    fn from_sums(sums: &[f64; 6]) -> ByCorruption {
        let of = |k: usize| Accuracy {
            accuracy: sums[k] / sums[k + 3].max(1.0),
            predictions: sums[k + 3].round() as u64,
        };
        ByCorruption {
            mask: of(0),
            random: of(1),
            kept: of(2),
        }
    }
}

/// Why a step was refused.
#[derive(Debug)]
pub struct NonFinite {
    /// The step refused (the 0-based index [`Trainer::step`] was given).
    pub step: u64,
    /// Which value (`loss`, `gradient norm`, …).
    pub what: &'static str,
    /// Its value.
    pub value: f64,
}

impl std::fmt::Display for NonFinite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the {} is {}", self.what, self.value)
    }
}

/// The model, its optimiser and the step function.
pub struct Trainer {
    /// The model's config.
    pub config: AlbertConfig,
    /// The model being trained.
    pub model: AlbertForPreTraining,
    /// Its optimiser.
    pub optim: TrainingOptimizer,
    /// The optimiser's settings and schedule.
    pub optim_config: OptimConfig,
    /// The autodiff device the model lives on.
    pub device: Device,
    /// One micro-batch per core on a CPU (see [`Trainer::new`]).
    pub parallel: DataParallel,
    /// Whether the sentence-order loss is trained (`true` from [`Trainer::new`]); without it
    /// the loss is the masked LM's alone, so the SOP head and the pooler get no gradient.
    pub sop: bool,
    /// The vocabulary's `[MASK]` id: with it, evaluations report the MLM accuracy by
    /// corruption ([`EvalStats::mlm_by_corruption`]); `None` from [`Trainer::new`].
    pub mask_id: Option<u32>,
    /// A test hook: this step's (0-based) MLM loss is multiplied by NaN on the device, so that
    /// the refusal of a non-finite step is exercised end to end (NaN gradients, a NaN update,
    /// the roll-back). `None` from [`Trainer::new`].
    pub nan_at_step: Option<u64>,
    /// Steps enqueued and not yet read.
    pending: Vec<Pending>,
    /// The model and optimiser as the last flush found them, taken at the first step after it.
    last_good: Option<(AlbertForPreTraining, TrainingOptimizer)>,
}

/// A step whose values are still on the device.
struct Pending {
    step: u64,
    /// What the host knows of the step (rows, tokens, learning rate, FLOPs).
    stats: StepStats,
    /// [`on_device::STEP_VALUES`] values.
    values: Tensor<1>,
}

impl Trainer {
    /// A trainer of `model` with `optim_config`, on `device` (autodiff).
    pub fn new(
        config: AlbertConfig,
        model: AlbertForPreTraining,
        optim_config: OptimConfig,
        device: Device,
    ) -> Trainer {
        Trainer {
            optim: optim_config.build(&device),
            parallel: data_parallel_for(&config, &device),
            config,
            model,
            optim_config,
            device,
            sop: true,
            mask_id: None,
            nan_at_step: None,
            pending: Vec::new(),
            last_good: None,
        }
    }

    /// One optimiser step over `batches`, read back at once: [`Trainer::enqueue`] then
    /// [`Trainer::flush`] (one host synchronisation per step; the stage reads once per
    /// `log_interval` steps instead). A non-finite loss or gradient norm refuses the step and
    /// leaves the model as it was before it.
    pub fn step(&mut self, step: u64, batches: &[Batch]) -> Result<StepStats, NonFinite> {
        self.enqueue(step, batches);
        let mut stats = self.flush()?;
        Ok(stats.pop().unwrap_or_default())
    }

    /// One optimiser step over `batches` (gradient accumulation: each batch's loss is scaled
    /// by `1/len`, their gradients summed), with global-norm clipping, without reading anything
    /// back: its losses, counts and gradient norm stay on the device until [`Trainer::flush`].
    /// Each batch is split into one micro-batch per core ([`DataParallel`]); a micro-batch's
    /// MLM loss is weighted by its share of the batch's masked positions and its SOP loss by
    /// its share of the rows, so the gradient is the whole batch's, whatever the split.
    ///
    /// The update is applied even when it is not finite: the flush that finds it rolls the
    /// model and the optimiser back (see [`Trainer::flush`]).
    pub fn enqueue(&mut self, step: u64, batches: &[Batch]) {
        if self.last_good.is_none() {
            // Tensors are shared, not copied: holding the state costs no memory until the
            // update replaces it, and then one copy of the weights and the moments.
            self.last_good = Some((self.model.clone(), self.optim.clone()));
        }
        let lr = self.optim_config.lr_at(step);
        let (grads, values, stats) = self.gradients(step, batches);
        let stats = StepStats { lr, ..stats };
        let (model, norm) = self.optim.step_clipped(
            lr,
            self.model.clone(),
            grads,
            self.optim_config.max_grad_norm,
        );
        self.model = model;
        let values = match (values, norm) {
            (Some(v), Some(n)) => Tensor::cat(vec![v, n], 0),
            // No batch or no gradient: nothing to report, and NaN refuses the step.
            _ => Tensor::full([on_device::STEP_VALUES], f64::NAN, &self.device),
        };
        self.pending.push(Pending {
            step,
            stats,
            values,
        });
    }

    /// The step without its update: forward and backward of each of `batches` (each batch's
    /// loss scaled by `1/len`), the gradients summed, the step's values on the device (`None`
    /// without a batch) and what the host knows of it (its learning rate left at 0).
    pub fn gradients(
        &self,
        step: u64,
        batches: &[Batch],
    ) -> (GradientsParams, Option<Tensor<1>>, StepStats) {
        let mut stats = StepStats::default();
        let mut accumulator = GradientsAccumulator::<AlbertForPreTraining>::new();
        let mut values: Option<Tensor<1>> = None;
        for b in batches {
            let (grads, v) = self.backward(step, b, 1.0 / batches.len() as f64);
            accumulator.accumulate(&self.model, grads);
            values = Some(match values {
                Some(acc) => acc + v,
                None => v,
            });
            stats.predictions += b.predictions;
            stats.rows += b.batch_size as u64;
            stats.tokens += b.tokens;
            stats.padded_tokens += (b.batch_size * b.seq_len) as u64;
            stats.flops += self
                .config
                .training_flops(b.batch_size, b.seq_len, b.max_predictions);
        }
        (accumulator.grads(), values, stats)
    }

    /// The forward pass of one batch as a training step runs it (split the same way, the
    /// autodiff graph recorded) and nothing after it: each micro-batch's training loss, still
    /// on the device. `pipeline bench train --phases` times it apart from the backward.
    pub fn forward_only(&self, b: &Batch) -> Vec<Tensor<1>> {
        let parts = self.micro_batches(b);
        let weights = LossWeights {
            sop_trained: self.sop,
            ..LossWeights::default()
        };
        let (model, device, split) = (&self.model, &self.device, parts.len() > 1);
        self.parallel.map(parts.len(), |k| {
            let losses =
                |m: &AlbertForPreTraining| micro_batch_losses(m, &parts[k], device, weights).0;
            // As the step's backward does: a replica per worker only when the batch is split.
            if split {
                losses(&replica(model))
            } else {
                losses(model)
            }
        })
    }

    /// `b` split into one micro-batch per worker.
    fn micro_batches(&self, b: &Batch) -> Vec<Batch> {
        self.parallel
            .split(b.batch_size)
            .into_iter()
            .map(|rows| b.rows(rows))
            .collect()
    }

    /// Forward and backward of one batch, split into one micro-batch per worker: its gradients
    /// (scaled by `scale`, the batch's share of the step) and its `[MLM loss, SOP loss, MLM
    /// correct, SOP correct]` on the device, the losses weighted by the micro-batches' shares.
    fn backward(&self, step: u64, b: &Batch, scale: f64) -> (GradientsParams, Tensor<1>) {
        let parts = self.micro_batches(b);
        let device = &self.device;
        let (grads, values) = self.parallel.backward(&self.model, parts.len(), |m, k| {
            let part = &parts[k];
            let weights = LossWeights {
                mlm: scale * part.predictions as f64 / b.predictions.max(1) as f64,
                sop: scale * part.batch_size as f64 / b.batch_size.max(1) as f64,
                sop_trained: self.sop,
                poisoned: self.nan_at_step == Some(step),
            };
            micro_batch_losses(m, part, device, weights)
        });
        let values = values
            .into_iter()
            .reduce(|a, b| a + b)
            .unwrap_or_else(|| Tensor::zeros([4], device));
        (grads, values)
    }

    /// Reads the steps enqueued since the last flush in one read-back, oldest first. The first
    /// one whose loss or gradient norm is not finite is refused: the model and the optimiser go
    /// back to where they were at the last flush (the state before the first step read now),
    /// and the steps read now are dropped, as the run that calls this stops there.
    ///
    /// Why roll back rather than skip a bad update on the device with a mask: a mask would
    /// have to reach into every optimiser's state (moments and step counts) and costs a select
    /// per parameter every step, while a bad step is rare and ends the run anyway; holding the
    /// last read state costs nothing until an update replaces it.
    pub fn flush(&mut self) -> Result<Vec<StepStats>, NonFinite> {
        let pending = std::mem::take(&mut self.pending);
        let values = on_device::read_steps(pending.iter().map(|p| p.values.clone()).collect());
        let mut read = Vec::with_capacity(pending.len());
        for (p, [mlm, sop, mc, sc, norm]) in pending.into_iter().zip(values) {
            let mut stats = p.stats;
            stats.mlm_loss = mlm;
            stats.sop_loss = sop;
            stats.mlm_correct = mc;
            stats.sop_correct = sc;
            stats.grad_norm = norm;
            stats.loss = mlm + if self.sop { sop } else { 0.0 };
            let refused = [("loss", stats.loss), ("gradient norm", norm)]
                .into_iter()
                .find(|(_, v)| !v.is_finite());
            if let Some((what, value)) = refused {
                if let Some((model, optim)) = self.last_good.take() {
                    self.model = model;
                    self.optim = optim;
                }
                return Err(NonFinite {
                    step: p.step,
                    what,
                    value,
                });
            }
            read.push(stats);
        }
        self.last_good = None;
        Ok(read)
    }

    /// Whether steps wait on the device for [`Trainer::flush`].
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// MLM and SOP loss and accuracy over `reader` (one pass), at most `max_batches` batches
    /// (0: all). Runs without autodiff and without dropout, one micro-batch per core.
    pub fn evaluate(&self, mut reader: BatchReader, max_batches: u64) -> anyhow::Result<EvalStats> {
        let model = self.model.valid();
        let device = self.device.clone().without_autodiff();
        let mut sums = EvalStats::default();
        let (mut mlm_loss, mut sop_loss, mut mlm_correct, mut sop_correct) = (0.0, 0.0, 0.0, 0.0);
        let mut by_corruption = [0.0; 6];
        let mut batches = 0u64;
        while let Some(b) = reader.next_batch()? {
            let parts: Vec<Batch> = self
                .parallel
                .split(b.batch_size)
                .into_iter()
                .map(|rows| b.rows(rows))
                .collect();
            let values = self.parallel.map(parts.len(), |k| {
                let (input, mlm, sop) = batch_tensors(&parts[k], &device, self.mask_id);
                let out = model.forward_pretrain(&input, &mlm, sop);
                // The split by corruption rides on the same one read-back.
                let mut scalars =
                    vec![out.mlm_loss, out.sop_loss, out.mlm_correct, out.sop_correct];
                scalars.extend(out.mlm_by_corruption);
                read_scalars(scalars)
            });
            for (part, v) in parts.iter().zip(values) {
                if let [ml, sl, mc, sc, ref split @ ..] = v[..] {
                    mlm_loss += ml * part.predictions as f64;
                    sop_loss += sl * part.batch_size as f64;
                    mlm_correct += mc;
                    sop_correct += sc;
                    for (sum, x) in by_corruption.iter_mut().zip(split) {
                        *sum += x;
                    }
                }
            }
            sums.predictions += b.predictions;
            sums.instances += b.batch_size as u64;
            batches += 1;
            if max_batches > 0 && batches >= max_batches {
                break;
            }
        }
        if sums.instances == 0 {
            bail!("the eval shards hold no instances");
        }
        let p = sums.predictions.max(1) as f64;
        let n = sums.instances as f64;
        sums.mlm_loss = mlm_loss / p;
        sums.mlm_accuracy = mlm_correct / p;
        sums.sop_loss = sop_loss / n;
        sums.sop_accuracy = sop_correct / n;
        sums.mlm_by_corruption = self
            .mask_id
            .map(|_| ByCorruption::from_sums(&by_corruption));
        Ok(sums)
    }

    /// The model without autodiff, for export.
    pub fn inference_model(&self) -> AlbertForPreTraining {
        self.model.valid()
    }
}

/// How a micro-batch's losses enter its step.
#[derive(Debug, Clone, Copy)]
struct LossWeights {
    /// The micro-batch's share of the step's masked positions (times the batch's share).
    mlm: f64,
    /// Its share of the step's rows (times the batch's share).
    sop: f64,
    /// Whether the sentence-order loss is trained ([`Trainer::sop`]).
    sop_trained: bool,
    /// The NaN test hook's step ([`Trainer::nan_at_step`]).
    poisoned: bool,
}

impl Default for LossWeights {
    fn default() -> Self {
        LossWeights {
            mlm: 1.0,
            sop: 1.0,
            sop_trained: true,
            poisoned: false,
        }
    }
}

/// One micro-batch's forward pass: its weighted training loss and its `[MLM loss, SOP loss,
/// MLM correct, SOP correct]` (the losses weighted), on the device.
fn micro_batch_losses(
    m: &AlbertForPreTraining,
    part: &Batch,
    device: &Device,
    w: LossWeights,
) -> (Tensor<1>, Tensor<1>) {
    // Training steps do not count by corruption: no op is added to them.
    let (input, mlm, sop) = batch_tensors(part, device, None);
    let out = m.forward_pretrain(&input, &mlm, sop);
    let mlm_raw = if w.poisoned {
        out.mlm_loss.mul_scalar(f64::NAN)
    } else {
        out.mlm_loss
    };
    let mlm_loss = mlm_raw.mul_scalar(w.mlm);
    let sop_loss = out.sop_loss.mul_scalar(w.sop);
    let loss = if w.sop_trained {
        mlm_loss.clone() + sop_loss.clone()
    } else {
        mlm_loss.clone()
    };
    let values = Tensor::cat(
        vec![
            mlm_loss.detach(),
            sop_loss.detach(),
            out.mlm_correct,
            out.sop_correct,
        ],
        0,
    );
    (loss, values)
}

/// One worker per core on a CPU device; one on a GPU (which parallelises each op itself) and
/// when dropout is on: dropout masks come from the device's one random stream, which
/// concurrent workers would draw from in an order that changes from run to run.
pub fn data_parallel_for(config: &AlbertConfig, device: &Device) -> DataParallel {
    let dropout = config.hidden_dropout_prob > 0.0 || config.attention_probs_dropout_prob > 0.0;
    if dropout {
        DataParallel::new(1)
    } else {
        DataParallel::for_device(device)
    }
}

/// Reads small tensors back as one `f64` vector (one read-back per micro-batch).
fn read_scalars(values: Vec<Tensor<1>>) -> Vec<f64> {
    Tensor::cat(values, 0)
        .into_data()
        .convert::<f64>()
        .try_into_vec::<f64>()
        .unwrap_or_default()
}

/// The number of parameters burn counts in `model` (a check on [`AlbertConfig::parameter_count`]).
pub fn counted_params<M: Module>(model: &M) -> usize {
    model.num_params()
}

#[cfg(test)]
#[path = "trainer_tests.rs"]
mod tests;
