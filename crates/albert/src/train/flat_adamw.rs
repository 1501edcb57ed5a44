//! AdamW's rule for the [`super::FlatOptimizer`]: burn's `AdamW` (decoupled weight decay, the
//! moments' bias correction at each parameter's own step count) over the flat vector in ~20 of
//! burn's tensor ops, whatever the number of parameters; its state burn's [`AdamWState`].
//!
//! The arithmetic is burn's, op for op, so that the weights match its per-parameter steps:
//! `w·(1 − lr·wd) − lr · (m / c₁) / (√(v / c₂) + ε)` with `c = 1 − βᵗ` in float32. What differs
//! between parameters (the weight decay, 0 for LayerNorm and biases; `t`, when a parameter
//! missed steps) reaches the elements as a `[3, parameters]` table uploaded each step and
//! gathered along the flat vector.

use burn::optim::{AdamWState, AdaptiveMomentumState, RecordState, StateSink, StateSource};
use burn::tensor::{Device, Tensor, TensorData};

use super::flat_layout::{Layout, Moments, by_rank};

/// AdamW's hyper-parameters; the parameters excluded from weight decay (LayerNorm and biases)
/// get none.
#[derive(Debug, Clone)]
pub struct FlatAdamW {
    /// The first moment's decay.
    pub beta_1: f32,
    /// The second moment's decay.
    pub beta_2: f32,
    /// Added to the corrected second moment's root.
    pub epsilon: f32,
    /// Decoupled weight decay of the others.
    pub weight_decay: f32,
}

impl FlatAdamW {
    /// A parameter's weight decay, the one row of the layout's table.
    pub(super) fn per_param(&self, excluded: bool) -> Vec<f32> {
        vec![if excluded { 0.0 } else { self.weight_decay }]
    }

    /// One step of every parameter `layout` lays out.
    pub(super) fn step(
        &self,
        lr: f64,
        [w, g]: [Tensor<1>; 2],
        (m, v): (Tensor<1>, Tensor<1>),
        layout: &mut Layout,
    ) -> [Tensor<1>; 3] {
        let (b1, b2) = (self.beta_1, self.beta_2);
        let m = m.mul_scalar(b1).add(g.clone().mul_scalar(1.0 - b1));
        let v = v.mul_scalar(b2).add(g.square().mul_scalar(1.0 - b2));
        let [keep, c1, c2] = self.per_element(lr, layout, &w.device());
        let update = m
            .clone()
            .div(c1)
            .div(v.clone().div(c2).sqrt().add_scalar(self.epsilon));
        let w = w.mul(keep).sub(update.mul_scalar(lr));
        [w, m, v]
    }

    /// What each element is multiplied or divided by: `1 − lr·wd` (the decay) and the two bias
    /// corrections `1 − β₁ᵗ`, `1 − β₂ᵗ` of its parameter, `t` counting this step.
    fn per_element(&self, lr: f64, layout: &mut Layout, device: &Device) -> [Tensor<1>; 3] {
        let decay = &layout.per_param_values;
        let times: Vec<i32> = layout
            .slots
            .iter()
            .map(|s| i32::try_from(s.time + 1).unwrap_or(i32::MAX))
            .collect();
        // As burn computes them: the decay in f64, the corrections in f32.
        let keep = decay.iter().map(|&wd| (1.0 - lr * f64::from(wd)) as f32);
        let c1 = times.iter().map(|&t| 1.0 - self.beta_1.powi(t));
        let c2 = times.iter().map(|&t| 1.0 - self.beta_2.powi(t));
        let table: Vec<f32> = keep.chain(c1).chain(c2).collect();
        let parameters = times.len();
        let table = crate::upload::floats::<2>(TensorData::new(table, [3, parameters]), device);
        let segments = layout.segments(device);
        let n = segments.dims()[0];
        let rows = table.select(1, segments).split(1, 0);
        let mut rows = rows.into_iter().map(|r| r.reshape([n]));
        let mut next = || rows.next().unwrap_or_else(|| Tensor::zeros([n], device));
        [next(), next(), next()]
    }
}

/// `moments` as burn's [`AdamWState`] of its rank records it (ranks 1 to 4; the caller checks).
pub(super) fn flatten(prefix: &str, moments: Moments, sink: &mut StateSink) {
    fn at<const D: usize>(prefix: &str, m: Moments, sink: &mut StateSink) -> Option<()> {
        let (time, moment_1, moment_2) = m.shaped::<D>();
        let state = AdamWState::<D> {
            momentum: AdaptiveMomentumState {
                time,
                moment_1,
                moment_2,
                max_moment_2: None,
            },
        };
        state.state_flatten(prefix, sink);
        Some(())
    }
    let _ = by_rank!(moments.dims.len(), at(prefix, moments, sink));
}

/// The [`AdamWState`] of rank `rank` recorded under `prefix`, as flat moments; `None` when it
/// is incomplete, of a rank this crate's models do not have, or AMSGrad's (which this crate
/// never configures).
pub(super) fn unflatten(
    prefix: &str,
    rank: usize,
    source: &mut StateSource,
    device: &Device,
) -> Option<Moments> {
    fn at<const D: usize>(prefix: &str, src: &mut StateSource, dev: &Device) -> Option<Moments> {
        let state = AdamWState::<D>::state_unflatten(prefix, src, dev)?.momentum;
        if state.max_moment_2.is_some() {
            return None;
        }
        Some(Moments::from_shaped(
            state.time,
            state.moment_1,
            state.moment_2,
        ))
    }
    by_rank!(rank, at(prefix, source, device))
}
