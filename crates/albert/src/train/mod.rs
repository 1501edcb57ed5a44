//! What pretraining and fine-tuning share: the optimiser (LAMB as google-research/albert
//! computes it, or AdamW as torch does, with weight decay kept off LayerNorm and bias
//! parameters), the learning-rate schedule (linear warmup then linear
//! decay), gradient clipping by the global norm (burn's own clipping works per tensor), and
//! checkpoints that a killed run resumes from.

mod checkpoint;
mod clip;
mod flat;
mod flat_adamw;
mod flat_lamb;
mod flat_layout;
#[cfg(test)]
mod flat_tests;
mod optimizer;

use burn::module::ParamGroup;
use burn::optim::{AdamWConfig, LambState, LearningRate, ModuleOptimizer, Optimizer};
use burn::tensor::{Device, Tensor};
use serde::{Deserialize, Serialize};

pub use checkpoint::{Checkpoint, CheckpointError, remove_checkpoint};
pub use clip::{clip_global_norm, clip_scale, global_grad_norm};
pub use flat::FlatOptimizer;
use flat_adamw::FlatAdamW;
use flat_lamb::FlatLamb;
pub use optimizer::TrainingOptimizer;

/// Which optimiser.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OptimizerKind {
    /// Layer-wise adaptive moments (You et al., 2019): what ALBERT pretrains with.
    Lamb,
    /// Adam with decoupled weight decay: the usual fine-tuning optimiser.
    Adamw,
}

impl OptimizerKind {
    /// The optimiser an `optimizer:` param names (`adam` is AdamW too).
    pub fn parse(s: &str) -> Result<OptimizerKind, OptimError> {
        match s {
            "lamb" => Ok(OptimizerKind::Lamb),
            "adamw" | "adam" => Ok(OptimizerKind::Adamw),
            other => Err(OptimError::UnknownOptimizer(other.to_string())),
        }
    }
}

/// An optimiser param out of its range.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OptimError {
    /// Not `lamb` or `adamw`.
    #[error("unknown optimizer {0:?}: expected lamb or adamw")]
    UnknownOptimizer(String),
    /// Zero, negative or not finite.
    #[error("learning_rate = {0} must be a positive number")]
    LearningRate(f64),
    /// A beta outside `[0, 1)`.
    #[error("beta_1 and beta_2 must be in [0, 1)")]
    Betas,
    /// A negative weight decay or clipping norm.
    #[error("weight_decay and max_grad_norm must be ≥ 0")]
    Negative,
    /// `total_steps` is 0.
    #[error("the number of training steps must be at least 1")]
    NoSteps,
}

/// For callers whose errors are still strings (the engine's `Stage::validate`).
impl From<OptimError> for String {
    fn from(e: OptimError) -> String {
        e.to_string()
    }
}

/// An optimiser param out of its range.
impl From<OptimError> for pipeline_params::ParamError {
    fn from(e: OptimError) -> Self {
        pipeline_params::ParamError(e.to_string())
    }
}

/// The optimisation hyper-parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OptimConfig {
    /// LAMB or AdamW.
    pub optimizer: OptimizerKind,
    /// The peak learning rate.
    pub learning_rate: f64,
    /// Decoupled weight decay (not on LayerNorm and biases).
    pub weight_decay: f64,
    /// The first moment's decay.
    pub beta_1: f64,
    /// The second moment's decay.
    pub beta_2: f64,
    /// Added to the second moment's root.
    pub epsilon: f64,
    /// Steps of linear warmup.
    pub warmup_steps: u64,
    /// Steps in all (the decay reaches 0 there).
    pub total_steps: u64,
    /// Clip gradients so that their global L2 norm is at most this; 0 disables.
    pub max_grad_norm: f64,
}

/// Parameters exempt from weight decay: biases and LayerNorm scales and shifts (BERT's and
/// ALBERT's `exclude_from_weight_decay = ["LayerNorm", "layer_norm", "bias"]`).
pub const NO_DECAY_REGEX: &str = r"(\.bias$|^bias$|layer_norm)";

/// The parameters [`NO_DECAY_REGEX`] names.
fn no_decay_group() -> ParamGroup {
    ParamGroup::from_regex(NO_DECAY_REGEX).expect("a valid regex")
}

impl OptimConfig {
    /// The optimiser for parameters on `device`: one instance with weight decay for the weight
    /// matrices and embeddings, one without for [`NO_DECAY_REGEX`]. On libtorch it steps all
    /// parameters as one vector ([`FlatOptimizer`]: the same arithmetic in a few kernels
    /// instead of a dozen per tensor); on flex burn's `ModuleOptimizer` steps one parameter at
    /// a time.
    pub fn build(&self, device: &Device) -> TrainingOptimizer {
        if device.clone().without_autodiff() == Device::flex() {
            return TrainingOptimizer::PerParameter(self.build_per_parameter());
        }
        TrainingOptimizer::Flat(Box::new(self.build_flat()))
    }

    /// The optimiser as a [`FlatOptimizer`], on any device (what [`Self::build`] picks on
    /// libtorch).
    pub fn build_flat(&self) -> FlatOptimizer {
        let rule = match self.optimizer {
            OptimizerKind::Lamb => {
                let (decayed, excluded) = self.lamb_groups();
                flat::FlatRule::Lamb(FlatLamb { decayed, excluded })
            }
            OptimizerKind::Adamw => flat::FlatRule::AdamW(FlatAdamW {
                beta_1: self.beta_1 as f32,
                beta_2: self.beta_2 as f32,
                epsilon: self.epsilon as f32,
                weight_decay: self.weight_decay as f32,
            }),
        };
        FlatOptimizer::new(rule, no_decay_group())
    }

    /// burn's `ModuleOptimizer`, one parameter at a time (what [`Self::build`] picks on flex).
    pub fn build_per_parameter(&self) -> ModuleOptimizer {
        match self.optimizer {
            OptimizerKind::Lamb => {
                let (with, without) = self.lamb_groups();
                ModuleOptimizer::from(with).with_group(no_decay_group(), without, None)
            }
            OptimizerKind::Adamw => {
                let with = AdamWConfig::new()
                    .with_beta_1(self.beta_1 as f32)
                    .with_beta_2(self.beta_2 as f32)
                    .with_epsilon(self.epsilon as f32)
                    .with_weight_decay(self.weight_decay as f32);
                let without = with.clone().with_weight_decay(0.0);
                with.init()
                    .with_group(no_decay_group(), without.build(), None)
            }
        }
    }

    /// LAMB for the weight matrices and embeddings, and for [`NO_DECAY_REGEX`]'s parameters.
    fn lamb_groups(&self) -> (AlbertLamb, AlbertLamb) {
        let with = AlbertLamb {
            beta_1: self.beta_1 as f32,
            beta_2: self.beta_2 as f32,
            epsilon: self.epsilon as f32,
            weight_decay: self.weight_decay as f32,
            layer_adaptation: true,
        };
        // google's exclude_from_layer_adaptation defaults to the weight-decay exclusions: no
        // decay and no trust ratio for LayerNorm and biases.
        let without = AlbertLamb {
            weight_decay: 0.0,
            layer_adaptation: false,
            ..with.clone()
        };
        (with, without)
    }

    /// The learning rate for optimiser step `step` (0-based): linear warmup over
    /// `warmup_steps`, then linear decay to 0 at `total_steps`, as BERT and ALBERT schedule it.
    pub fn lr_at(&self, step: u64) -> f64 {
        let lr = self.learning_rate;
        if step < self.warmup_steps {
            return lr * (step + 1) as f64 / self.warmup_steps as f64;
        }
        let decay_steps = self.total_steps.saturating_sub(self.warmup_steps).max(1);
        let left = self.total_steps.saturating_sub(step) as f64;
        lr * (left / decay_steps as f64).clamp(0.0, 1.0)
    }

    /// Checks that every hyper-parameter is in its range.
    pub fn validate(&self) -> Result<(), OptimError> {
        if !(self.learning_rate > 0.0 && self.learning_rate.is_finite()) {
            return Err(OptimError::LearningRate(self.learning_rate));
        }
        if !(0.0..1.0).contains(&self.beta_1) || !(0.0..1.0).contains(&self.beta_2) {
            return Err(OptimError::Betas);
        }
        let non_negative = |x: f64| !x.is_nan() && x >= 0.0;
        if !non_negative(self.weight_decay) || !non_negative(self.max_grad_norm) {
            return Err(OptimError::Negative);
        }
        if self.total_steps == 0 {
            return Err(OptimError::NoSteps);
        }
        Ok(())
    }
}

/// LAMB as google-research/albert's `lamb_optimizer.py` (and albert_zh's copy) computes it,
/// which is what ALBERT was pretrained with. It differs from burn's `Lamb` in two ways that
/// matter:
///
/// - no bias correction of the moments: the update is `m / (sqrt(v) + epsilon)` with the raw
///   moments (burn divides them by `1 - beta^t`);
/// - `layer_adaptation` (the trust ratio `|w| / |update|`, 1 when either norm is 0) can be
///   switched off, as google's `exclude_from_layer_adaptation` does for the parameters excluded
///   from weight decay (LayerNorm and biases). burn applies the ratio to every tensor: a bias
///   or LayerNorm shift that starts at zero moves by `lr·|update|` at the first step and then
///   by at most `lr·|w|` per step, so it stays near zero for the whole run.
///
/// The state is burn's [`LambState`], so checkpoints keep their layout.
#[derive(Debug, Clone)]
pub struct AlbertLamb {
    /// The first moment's decay.
    pub beta_1: f32,
    /// The second moment's decay.
    pub beta_2: f32,
    /// Added to the second moment's root.
    pub epsilon: f32,
    /// Added to the update as `weight_decay · w`, before the trust ratio.
    pub weight_decay: f32,
    /// Whether the trust ratio `|w| / |update|` scales the update.
    pub layer_adaptation: bool,
}

impl Optimizer for AlbertLamb {
    type State<const D: usize> = LambState<D>;

    fn step<const D: usize>(
        &self,
        lr: LearningRate,
        tensor: Tensor<D>,
        grad: Tensor<D>,
        state: Option<LambState<D>>,
    ) -> (Tensor<D>, Option<LambState<D>>) {
        if crate::fused::lamb_applies(&tensor, &grad) {
            self.fused_step(lr, tensor, grad, state)
        } else {
            self.composed_step(lr, tensor, grad, state)
        }
    }

    fn to_device<const D: usize>(mut state: LambState<D>, device: &Device) -> LambState<D> {
        state.moment_1 = state.moment_1.to_device(device);
        state.moment_2 = state.moment_2.to_device(device);
        state
    }
}

impl AlbertLamb {
    /// [`Optimizer::step`] in burn's tensor ops, on any backend and dtype.
    fn composed_step<const D: usize>(
        &self,
        lr: LearningRate,
        tensor: Tensor<D>,
        grad: Tensor<D>,
        state: Option<LambState<D>>,
    ) -> (Tensor<D>, Option<LambState<D>>) {
        let (b1, b2) = (self.beta_1, self.beta_2);
        let state = match state {
            Some(s) => LambState {
                time: s.time + 1,
                moment_1: s.moment_1.mul_scalar(b1) + grad.clone().mul_scalar(1.0 - b1),
                moment_2: s.moment_2.mul_scalar(b2) + grad.square().mul_scalar(1.0 - b2),
            },
            None => LambState {
                time: 1,
                moment_1: grad.clone().mul_scalar(1.0 - b1),
                moment_2: grad.square().mul_scalar(1.0 - b2),
            },
        };
        let mut update = state
            .moment_1
            .clone()
            .div(state.moment_2.clone().sqrt().add_scalar(self.epsilon));
        if self.weight_decay != 0.0 {
            update = update + tensor.clone().mul_scalar(self.weight_decay);
        }
        if self.layer_adaptation {
            let w_norm = tensor.clone().square().sum().sqrt();
            let u_norm = update.clone().square().sum().sqrt();
            let valid = w_norm
                .clone()
                .greater_scalar(0.0)
                .bool_and(u_norm.clone().greater_scalar(0.0));
            let ratio = w_norm.div(u_norm.clamp_min(f32::MIN_POSITIVE));
            let ratio = ratio.ones_like().mask_where(valid, ratio);
            update = update.mul(ratio.unsqueeze());
        }
        (tensor - update.mul_scalar(lr), Some(state))
    }

    /// [`Optimizer::step`] as one op (`crate::fused::lamb_step`: one pass each for the moments
    /// and the update on flex, no burn op between torch's on libtorch); the same arithmetic.
    fn fused_step<const D: usize>(
        &self,
        lr: LearningRate,
        tensor: Tensor<D>,
        grad: Tensor<D>,
        state: Option<LambState<D>>,
    ) -> (Tensor<D>, Option<LambState<D>>) {
        let (time, moments) = match state {
            Some(s) => (s.time + 1, (s.moment_1, s.moment_2)),
            None => (1, (grad.zeros_like(), grad.zeros_like())),
        };
        let step = crate::fused::LambStep {
            lr: lr as f32,
            beta_1: self.beta_1,
            beta_2: self.beta_2,
            epsilon: self.epsilon,
            weight_decay: self.weight_decay,
            layer_adaptation: self.layer_adaptation,
        };
        let [tensor, moment_1, moment_2] = crate::fused::lamb_step(tensor, grad, moments, &step);
        let state = LambState {
            time,
            moment_1,
            moment_2,
        };
        (tensor, Some(state))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AlbertConfig, AlbertForPreTraining};
    use burn::module::{Module, Param};
    use burn::optim::GradientsParams;

    fn cfg(kind: OptimizerKind) -> OptimConfig {
        OptimConfig {
            optimizer: kind,
            learning_rate: 1e-2,
            weight_decay: 0.1,
            beta_1: 0.9,
            beta_2: 0.999,
            epsilon: 1e-6,
            warmup_steps: 10,
            total_steps: 110,
            max_grad_norm: 1.0,
        }
    }

    #[test]
    fn schedule_warms_up_then_decays_to_zero() {
        let c = cfg(OptimizerKind::Lamb);
        assert!((c.lr_at(0) - 1e-3).abs() < 1e-12);
        assert!((c.lr_at(9) - 1e-2).abs() < 1e-12);
        assert!((c.lr_at(10) - 1e-2).abs() < 1e-12);
        assert!((c.lr_at(60) - 5e-3).abs() < 1e-12);
        assert_eq!(c.lr_at(110), 0.0);
        assert_eq!(c.lr_at(500), 0.0);
    }

    fn tiny() -> AlbertConfig {
        let mut c = AlbertConfig::named("tiny").unwrap();
        c.vocab_size = 50;
        c.hidden_size = 16;
        c.num_attention_heads = 2;
        c.intermediate_size = 32;
        c.embedding_size = 8;
        c.num_hidden_layers = 2;
        c
    }

    /// One step with zero gradients: only weight decay moves parameters, and it must leave
    /// LayerNorm parameters and biases alone.
    #[test]
    fn weight_decay_skips_layer_norm_and_bias() {
        let lamb = cfg(OptimizerKind::Lamb);
        let optimisers = [
            (
                "lamb",
                TrainingOptimizer::PerParameter(lamb.build_per_parameter()),
            ),
            (
                "flat lamb",
                TrainingOptimizer::Flat(Box::new(lamb.build_flat())),
            ),
            ("adamw", cfg(OptimizerKind::Adamw).build(&Device::flex())),
        ];
        for (kind, mut opt) in optimisers {
            let device = Device::flex().autodiff();
            let model = AlbertForPreTraining::new(&tiny(), &device);
            let mut grads = GradientsParams::new();
            struct Zero<'a>(&'a mut GradientsParams);
            impl burn::module::ModuleVisitor for Zero<'_> {
                fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<D>>) {
                    self.0.register(p.id, p.val().zeros_like().inner());
                }
            }
            model.visit(&mut Zero(&mut grads));
            let before = model.clone();
            let after = opt.step(0.1, model, grads);
            let diff = |a: Tensor<1>, b: Tensor<1>| (a - b).abs().max().into_scalar::<f32>();
            let ln = &after.albert.embeddings.layer_norm;
            let ln0 = &before.albert.embeddings.layer_norm;
            assert_eq!(
                diff(ln.gamma.val(), ln0.gamma.val()),
                0.0,
                "{kind}: LayerNorm decayed"
            );
            let b = after.albert.pooler.bias.as_ref().unwrap().val();
            let b0 = before.albert.pooler.bias.as_ref().unwrap().val();
            assert_eq!(diff(b + 1.0, b0 + 1.0), 0.0, "{kind}: bias decayed");
            let w = after.albert.pooler.weight.val().reshape([256]);
            let w0 = before.albert.pooler.weight.val().reshape([256]);
            assert!(diff(w, w0) > 0.0, "{kind}: weights did not decay");
        }
    }

    /// google's LAMB without layer adaptation (LayerNorm and biases): Adam moments without
    /// bias correction, so a constant gradient of 1 moves a parameter by
    /// `lr·(1-β₁ᵗ)/(√(1-β₂ᵗ)+ε)` at step t. burn's LAMB applied the trust ratio here too, which
    /// froze a zero-initialised bias after its first step.
    #[test]
    fn lamb_moves_excluded_parameters_as_google_does() {
        let opt = AlbertLamb {
            beta_1: 0.9,
            beta_2: 0.999,
            epsilon: 1e-6,
            weight_decay: 0.0,
            layer_adaptation: false,
        };
        let device = Device::flex();
        let (mut b, mut state) = (Tensor::<1>::zeros([4], &device), None);
        for _ in 0..10 {
            (b, state) = opt.step(1e-2, b, Tensor::ones([4], &device), state);
        }
        let expected: f64 = (1..=10)
            .map(|t| 1e-2 * (1.0 - 0.9f64.powi(t)) / ((1.0 - 0.999f64.powi(t)).sqrt() + 1e-6))
            .sum();
        let got = b.into_data().try_to_vec::<f32>().unwrap();
        for x in got {
            assert!((f64::from(x) + expected).abs() < 1e-5, "{x} vs -{expected}");
        }
    }

    /// The fused step (one op) against the same step in burn's ops: weight and both moments
    /// over five steps, with and without weight decay and the trust ratio, on flex (and on
    /// `ALBERT_TEST_DEVICE` where that is libtorch).
    #[test]
    fn fused_lamb_matches_the_composed_step() {
        let device = crate::device::under_test();
        device.seed(43);
        let normal = burn::tensor::Distribution::Normal(0.0, 1.0);
        // The last case starts from a zero weight: its first trust ratio is google's 1.
        let cases = [
            (0.01, true, false),
            (0.0, false, false),
            (0.01, false, false),
        ];
        for (weight_decay, layer_adaptation, zero) in cases.into_iter().chain([(0.0, true, true)]) {
            let opt = AlbertLamb {
                beta_1: 0.9,
                beta_2: 0.999,
                epsilon: 1e-6,
                weight_decay,
                layer_adaptation,
            };
            let w0 = Tensor::<2>::random([37, 53], normal, &device);
            let w0 = if zero { w0.zeros_like() } else { w0 };
            assert!(crate::fused::lamb_applies(&w0, &w0));
            let (mut fused, mut composed) = ((w0.clone(), None), (w0, None));
            for step in 0..5 {
                let g = Tensor::<2>::random([37, 53], normal, &device).mul_scalar(0.1);
                let lr = 1e-2 / (step + 1) as f64;
                fused = opt.fused_step(lr, fused.0, g.clone(), fused.1);
                composed = opt.composed_step(lr, composed.0, g, composed.1);
            }
            let (f, c) = (fused.1.unwrap(), composed.1.unwrap());
            assert_eq!(f.time, c.time);
            let what = format!("wd {weight_decay}, adaptation {layer_adaptation}, zero {zero}");
            for (a, b, part) in [
                (fused.0, composed.0, "weight"),
                (f.moment_1, c.moment_1, "first moment"),
                (f.moment_2, c.moment_2, "second moment"),
            ] {
                let scale = b.clone().abs().max().into_scalar::<f32>();
                let d = (a - b).abs().max().into_scalar::<f32>();
                assert!(
                    d <= 1e-6 * scale.max(1e-12),
                    "{what}: {part} differs by {d}"
                );
            }
        }
    }

    /// With layer adaptation the step of a tensor is `lr·|w|` whatever its gradient's size.
    #[test]
    fn lamb_trust_ratio_scales_the_step_to_the_weight_norm() {
        let opt = AlbertLamb {
            beta_1: 0.9,
            beta_2: 0.999,
            epsilon: 1e-6,
            weight_decay: 0.0,
            layer_adaptation: true,
        };
        let device = Device::flex();
        let w = Tensor::<1>::from_floats([3.0, -4.0], &device);
        let g = Tensor::<1>::from_floats([1e-3, 7.0], &device);
        let (w2, _) = opt.step(0.1, w.clone(), g, None);
        let step = (w2 - w).square().sum().sqrt().into_scalar::<f32>();
        assert!((step - 0.5).abs() < 1e-5, "step {step}, expected 0.1·5");
    }
}
