//! The optimiser a trainer holds: burn's `ModuleOptimizer`, which steps one parameter at a time
//! (on flex), or [`FlatOptimizer`], which steps them all as one vector (on libtorch). Both save
//! the same checkpoint file.

use std::path::Path;

use burn::module::Module;
use burn::optim::{GradientsParams, ModuleOptimizer};
use burn::store::RecordError;
use burn::tensor::Tensor;

use super::clip::clip_global_norm;
use super::flat::FlatOptimizer;

/// The optimiser [`super::OptimConfig::build`] chose for a device.
#[derive(Clone)]
pub enum TrainingOptimizer {
    /// One parameter at a time.
    PerParameter(ModuleOptimizer),
    /// All parameters at once (boxed: its tensors make it ~1 kB).
    Flat(Box<FlatOptimizer>),
}

impl TrainingOptimizer {
    /// One step of `module` with `grads` at learning rate `lr`.
    pub fn step<M: Module>(&mut self, lr: f64, module: M, grads: GradientsParams) -> M {
        match self {
            TrainingOptimizer::PerParameter(o) => o.step(lr, module, grads),
            TrainingOptimizer::Flat(o) => o.step(lr, module, grads),
        }
    }

    /// [`Self::step`] with the gradients clipped to the global norm `max_norm` first (0: not
    /// clipped), and that norm before clipping, both without a read-back (`None` when no
    /// parameter has a gradient). The flat optimiser clips its one flat gradient: a few ops in all
    /// instead of three per tensor.
    pub fn step_clipped<M: Module>(
        &mut self,
        lr: f64,
        module: M,
        grads: GradientsParams,
        max_norm: f64,
    ) -> (M, Option<Tensor<1>>) {
        match self {
            TrainingOptimizer::PerParameter(o) => {
                let (grads, norm) = clip_global_norm(&module, grads, max_norm);
                (o.step(lr, module, grads), norm)
            }
            TrainingOptimizer::Flat(o) => o.step_clipped(lr, module, grads, max_norm),
        }
    }

    /// Writes the state to `path` (a burnpack file).
    pub fn save(&self, path: &Path) -> Result<(), RecordError> {
        match self {
            TrainingOptimizer::PerParameter(o) => o.save(path),
            TrainingOptimizer::Flat(o) => o.save(path),
        }
    }

    /// The same optimiser with the state [`Self::save`] wrote to `path`, by either variant.
    pub fn load(self, path: &Path) -> Result<TrainingOptimizer, RecordError> {
        Ok(match self {
            TrainingOptimizer::PerParameter(o) => TrainingOptimizer::PerParameter(o.load(path)?),
            TrainingOptimizer::Flat(o) => TrainingOptimizer::Flat(Box::new(o.load(path)?)),
        })
    }
}
