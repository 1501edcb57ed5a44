//! LAMB's rule for the [`super::FlatOptimizer`]: google-research/albert's LAMB
//! ([`AlbertLamb`]) over the flat vector in one fused op (`crate::fused::lamb_flat_step`),
//! each parameter's trust ratio and weight decay included; its state burn's [`LambState`].

use burn::optim::{LambState, RecordState, StateSink, StateSource};
use burn::tensor::{Device, Tensor};

use super::AlbertLamb;
use super::flat_layout::{Layout, Moments, by_rank};
use crate::fused::{LambStep, lamb_applies, lamb_flat_step};

/// One [`AlbertLamb`] for the parameters excluded from weight decay (LayerNorm and biases:
/// no weight decay, no trust ratio) and one for the others; the betas and epsilon are
/// `decayed`'s for all.
#[derive(Debug, Clone)]
pub struct FlatLamb {
    /// The weight matrices' and embeddings' settings.
    pub decayed: AlbertLamb,
    /// The settings of LayerNorm and biases.
    pub excluded: AlbertLamb,
}

impl FlatLamb {
    /// A parameter's weight decay and trust-ratio switch (1 or 0): the two rows
    /// `lamb_flat_step` takes.
    pub(super) fn per_param(&self, excluded: bool) -> Vec<f32> {
        let group = if excluded {
            &self.excluded
        } else {
            &self.decayed
        };
        vec![
            group.weight_decay,
            if group.layer_adaptation { 1.0 } else { 0.0 },
        ]
    }

    /// The fused step over the whole vector.
    ///
    /// # Panics
    /// On parameters that are not float32 on flex or libtorch, which this crate never trains.
    pub(super) fn step(
        &self,
        lr: f64,
        [w, g]: [Tensor<1>; 2],
        (m, v): (Tensor<1>, Tensor<1>),
        layout: &mut Layout,
    ) -> [Tensor<1>; 3] {
        assert!(
            lamb_applies(&w, &g),
            "the flat LAMB steps float32 parameters on flex or libtorch"
        );
        // Each parameter's weight decay and trust-ratio switch are in the layout's rows.
        let hyper = LambStep {
            lr: lr as f32,
            beta_1: self.decayed.beta_1,
            beta_2: self.decayed.beta_2,
            epsilon: self.decayed.epsilon,
            weight_decay: 0.0,
            layer_adaptation: false,
        };
        // libtorch gathers each parameter's values along the vector; flex walks the parameters.
        let device = w.device();
        let segments = if device.clone().without_autodiff() == Device::flex() {
            Tensor::empty([0], &device)
        } else {
            layout.segments(&device)
        };
        lamb_flat_step(
            [w, g],
            (m, v),
            &segments,
            layout.host_lengths(),
            &layout.per_param,
            &hyper,
        )
    }
}

/// `moments` as burn's [`LambState`] of its rank records it (ranks 1 to 4; the caller checks).
pub(super) fn flatten(prefix: &str, moments: Moments, sink: &mut StateSink) {
    fn at<const D: usize>(prefix: &str, m: Moments, sink: &mut StateSink) -> Option<()> {
        let (time, moment_1, moment_2) = m.shaped::<D>();
        let state = LambState::<D> {
            time,
            moment_1,
            moment_2,
        };
        state.state_flatten(prefix, sink);
        Some(())
    }
    let _ = by_rank!(moments.dims.len(), at(prefix, moments, sink));
}

/// The [`LambState`] of rank `rank` recorded under `prefix`, as flat moments; `None` when it
/// is incomplete or of a rank this crate's models do not have.
pub(super) fn unflatten(
    prefix: &str,
    rank: usize,
    source: &mut StateSource,
    device: &Device,
) -> Option<Moments> {
    fn at<const D: usize>(prefix: &str, src: &mut StateSource, dev: &Device) -> Option<Moments> {
        let state = LambState::<D>::state_unflatten(prefix, src, dev)?;
        Some(Moments::from_shaped(
            state.time,
            state.moment_1,
            state.moment_2,
        ))
    }
    by_rank!(rank, at(prefix, source, device))
}
