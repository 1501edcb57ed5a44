//! One optimisation step and one evaluation pass, without the stage around them (the `pipeline
//! bench train` command and the tests drive it directly).

use anyhow::bail;
use burn::module::Module;
use burn::optim::{GradientsAccumulator, GradientsParams, ModuleOptimizer};
use burn::tensor::{Device, Int, Tensor, TensorData};
use pipeline_albert::train::{OptimConfig, clip_global_norm};
use pipeline_albert::{AlbertConfig, AlbertForPreTraining, AlbertInput, MlmTargets};
use pipeline_shards::{Batch, BatchReader};
use serde::{Deserialize, Serialize};

/// A shards [`Batch`] as tensors on `device`.
pub fn batch_tensors(b: &Batch, device: &Device) -> (AlbertInput, MlmTargets, Tensor<1, Int>) {
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
        positions: Tensor::from_data(TensorData::new(b.masked_positions.clone(), [n, m]), device),
        ids: Tensor::from_data(TensorData::new(b.masked_ids.clone(), [n, m]), device),
        weights: Tensor::from_data(TensorData::new(b.masked_weights.clone(), [n, m]), device),
    };
    let sop = Tensor::from_data(
        TensorData::new(b.sentence_order_labels.clone(), [n]),
        device,
    );
    (input, mlm, sop)
}

/// What one optimisation step did.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StepStats {
    pub loss: f64,
    pub mlm_loss: f64,
    pub sop_loss: f64,
    /// Correct masked-token predictions and their number, over the step's batches.
    pub mlm_correct: f64,
    pub predictions: u64,
    pub sop_correct: f64,
    pub rows: u64,
    /// Real (unpadded) tokens, and tokens including padding.
    pub tokens: u64,
    pub padded_tokens: u64,
    pub grad_norm: f64,
    pub lr: f64,
    /// Model FLOPs of the step (for MFU).
    pub flops: f64,
}

/// Evaluation on the held-out shard.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EvalStats {
    pub mlm_loss: f64,
    pub mlm_accuracy: f64,
    pub sop_loss: f64,
    pub sop_accuracy: f64,
    pub instances: u64,
    pub predictions: u64,
}

/// Why a step was refused.
#[derive(Debug)]
pub struct NonFinite {
    pub what: &'static str,
    pub value: f64,
}

impl std::fmt::Display for NonFinite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the {} is {}", self.what, self.value)
    }
}

/// The model, its optimiser and the step function.
pub struct Trainer {
    pub config: AlbertConfig,
    pub model: AlbertForPreTraining,
    pub optim: ModuleOptimizer,
    pub optim_config: OptimConfig,
    /// The autodiff device the model lives on.
    pub device: Device,
}

impl Trainer {
    pub fn new(
        config: AlbertConfig,
        model: AlbertForPreTraining,
        optim_config: OptimConfig,
        device: Device,
    ) -> Trainer {
        Trainer {
            optim: optim_config.build(),
            config,
            model,
            optim_config,
            device,
        }
    }

    /// One optimiser step over `batches` (gradient accumulation: each batch's loss is scaled
    /// by `1/len`, their gradients summed), with global-norm clipping. A non-finite loss or
    /// gradient norm refuses the step and leaves the model as it was.
    pub fn step(&mut self, step: u64, batches: &[Batch]) -> Result<StepStats, NonFinite> {
        let lr = self.optim_config.lr_at(step);
        let scale = 1.0 / batches.len() as f64;
        let mut stats = StepStats {
            lr,
            ..Default::default()
        };
        let mut accumulator = GradientsAccumulator::<AlbertForPreTraining>::new();
        for b in batches {
            let (input, mlm, sop) = batch_tensors(b, &self.device);
            let out = self.model.forward_pretrain(&input, &mlm, sop);
            let grads = out.loss.clone().mul_scalar(scale).backward();
            accumulator.accumulate(&self.model, GradientsParams::from_grads(grads, &self.model));
            // One read-back of the five scalars.
            let scalars = Tensor::cat(
                vec![
                    out.loss.detach(),
                    out.mlm_loss.detach(),
                    out.sop_loss.detach(),
                    out.mlm_correct,
                    out.sop_correct,
                ],
                0,
            )
            .into_data()
            .convert::<f64>()
            .try_into_vec::<f64>()
            .unwrap_or_default();
            if let [loss, mlm, sop, mc, sc] = scalars[..] {
                stats.loss += loss * scale;
                stats.mlm_loss += mlm * scale;
                stats.sop_loss += sop * scale;
                stats.mlm_correct += mc;
                stats.sop_correct += sc;
            }
            stats.predictions += b.predictions;
            stats.rows += b.batch_size as u64;
            stats.tokens += b.tokens;
            stats.padded_tokens += (b.batch_size * b.seq_len) as u64;
            stats.flops += self
                .config
                .training_flops(b.batch_size, b.seq_len, b.max_predictions);
        }
        if !stats.loss.is_finite() {
            return Err(NonFinite {
                what: "loss",
                value: stats.loss,
            });
        }
        let grads = accumulator.grads();
        let (grads, norm) = clip_global_norm(&self.model, grads, self.optim_config.max_grad_norm);
        stats.grad_norm = norm;
        if !norm.is_finite() {
            return Err(NonFinite {
                what: "gradient norm",
                value: norm,
            });
        }
        self.model = self.optim.step(lr, self.model.clone(), grads);
        Ok(stats)
    }

    /// MLM and SOP loss and accuracy over `reader` (one pass), at most `max_batches` batches
    /// (0: all). Runs without autodiff and without dropout.
    pub fn evaluate(&self, mut reader: BatchReader, max_batches: u64) -> anyhow::Result<EvalStats> {
        let model = self.model.valid();
        let device = self.device.clone().without_autodiff();
        let mut sums = EvalStats::default();
        let (mut mlm_loss, mut sop_loss, mut mlm_correct, mut sop_correct) = (0.0, 0.0, 0.0, 0.0);
        let mut batches = 0u64;
        while let Some(b) = reader.next_batch()? {
            let (input, mlm, sop) = batch_tensors(&b, &device);
            let out = model.forward_pretrain(&input, &mlm, sop);
            let v = Tensor::cat(
                vec![out.mlm_loss, out.sop_loss, out.mlm_correct, out.sop_correct],
                0,
            )
            .into_data()
            .convert::<f64>()
            .try_into_vec::<f64>()
            .unwrap_or_default();
            if let [ml, sl, mc, sc] = v[..] {
                mlm_loss += ml * b.predictions as f64;
                sop_loss += sl * b.batch_size as f64;
                mlm_correct += mc;
                sop_correct += sc;
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
        Ok(sums)
    }

    /// The model without autodiff, for export.
    pub fn inference_model(&self) -> AlbertForPreTraining {
        self.model.valid()
    }
}

/// The number of parameters burn counts in `model` (a check on [`AlbertConfig::parameter_count`]).
pub fn counted_params<M: Module>(model: &M) -> usize {
    model.num_params()
}
