//! [`AlbertLamb`] over all of a model's parameters at once: the weights and gradients laid end
//! to end in one vector, the moments kept that way between steps, and one fused op
//! (`crate::fused::lamb_flat_step`) for the whole update, each parameter's trust ratio and weight
//! decay included. The arithmetic is [`AlbertLamb`]'s; the checkpoint file is the one burn's
//! `ModuleOptimizer` writes for it, so a run resumes on either.
//!
//! Why: burn's `ModuleOptimizer` steps one parameter at a time, and on libtorch each step of
//! one tensor is 15 aten calls (8 for a bias or LayerNorm tensor): ~400 for `tiny`'s ~33
//! tensors, each a kernel launch that the host pays for on a GPU. A profile of the host's cost
//! per step (`benches/host_overhead.sh`, 2026-11-29) put the optimiser at 24 % of it, 94 % in
//! those calls. Here a step is two `cat`s, ~20 aten calls and a split into views, whatever the
//! number of tensors. On flex the per-parameter kernels are already one pass each, and the
//! copies into and out of the flat vector would only add to them: `OptimConfig::build` uses
//! this on libtorch alone.

use std::collections::HashMap;
use std::path::Path;

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param, ParamGroup, ParamId};
use burn::optim::{GradientsParams, LambState, RecordState, StateSink, StateSource};
use burn::store::RecordError;
use burn::tensor::{Device, Int, Shape, Tensor, TensorData};

use super::AlbertLamb;
use super::clip::clip_scale;
use crate::fused::{LambStep, lamb_applies, lamb_flat_step};

/// The scalar under which burn's `ModuleOptimizer` records each parameter's rank (its private
/// `RANK_KEY`), written and read here so that the two read each other's files.
const RANK_KEY: &str = "__rank";

/// LAMB with one instance of [`AlbertLamb`] for the parameters in `excluded` (LayerNorm and
/// biases: no weight decay, no trust ratio) and one for the others, stepped as one vector.
#[derive(Debug, Clone)]
pub struct FlatLamb {
    decayed: AlbertLamb,
    excluded: AlbertLamb,
    exclusions: ParamGroup,
    /// The moments of the parameters the last step updated, in that step's order.
    flat: Option<Flat>,
    /// The moments of any other parameter: loaded from a checkpoint, or left out of the last
    /// step (no gradient), as burn keeps the state of a parameter it did not step.
    parked: HashMap<ParamId, Moments>,
}

/// One parameter's state, its moments as flat vectors.
#[derive(Debug, Clone)]
struct Moments {
    /// The module path it was found at, which picks its group when burn loads the file.
    path: Option<String>,
    dims: Vec<usize>,
    /// Steps taken (burn's `LambState::time`).
    time: usize,
    m: Tensor<1>,
    v: Tensor<1>,
}

/// The moments of a run of parameters end to end, and what the fused step needs to know of
/// each: its length, weight decay and trust-ratio switch.
#[derive(Debug, Clone)]
struct Flat {
    slots: Vec<Slot>,
    lengths: Tensor<1, Int>,
    /// `[2, parameters]`: weight decay, trust ratio on (1) or off (0).
    per_param: Tensor<2>,
    m: Tensor<1>,
    v: Tensor<1>,
}

/// One parameter's place in a [`Flat`].
#[derive(Debug, Clone)]
struct Slot {
    id: ParamId,
    path: String,
    dims: Vec<usize>,
    time: usize,
}

impl Slot {
    fn len(&self) -> usize {
        self.dims.iter().product()
    }
}

impl FlatLamb {
    /// `excluded` steps the parameters `exclusions` matches by id or path, as burn's
    /// `ModuleOptimizer::with_group` would; `decayed` the others. The betas and epsilon are
    /// `decayed`'s for all.
    pub fn new(decayed: AlbertLamb, excluded: AlbertLamb, exclusions: ParamGroup) -> FlatLamb {
        FlatLamb {
            decayed,
            excluded,
            exclusions,
            flat: None,
            parked: HashMap::new(),
        }
    }

    /// One step of every parameter of `module` that has a gradient in `grads`, at learning
    /// rate `lr`; the others keep their value and state.
    ///
    /// # Panics
    /// On parameters that are not float32 on flex or libtorch, which this crate never trains.
    pub fn step<M: Module>(&mut self, lr: f64, module: M, grads: GradientsParams) -> M {
        self.step_flat(lr, module, grads, None).0
    }

    /// [`Self::step`] with the gradients clipped to the global norm `max_norm` first (0: not
    /// clipped) as `super::clip_global_norm` clips them, and the norm before clipping (`None`
    /// when no parameter has a gradient), without a read-back.
    pub fn step_clipped<M: Module>(
        &mut self,
        lr: f64,
        module: M,
        grads: GradientsParams,
        max_norm: f64,
    ) -> (M, Option<Tensor<1>>) {
        self.step_flat(lr, module, grads, Some(max_norm))
    }

    /// The step, with the norm and the clipping when `clip` is `Some(max_norm)`.
    fn step_flat<M: Module>(
        &mut self,
        lr: f64,
        module: M,
        mut grads: GradientsParams,
        clip: Option<f64>,
    ) -> (M, Option<Tensor<1>>) {
        let mut found = Found {
            grads: &mut grads,
            path: Vec::new(),
            slots: Vec::new(),
            weights: Vec::new(),
            gradients: Vec::new(),
        };
        module.visit(&mut found);
        let Found {
            slots,
            weights,
            gradients,
            ..
        } = found;
        if slots.is_empty() {
            return (module, None);
        }
        let (w, mut g) = (Tensor::cat(weights, 0), Tensor::cat(gradients, 0));
        assert!(
            lamb_applies(&w, &g),
            "the flat LAMB steps float32 parameters on flex or libtorch"
        );
        let norm = clip.map(|max_norm| {
            let norm = g.clone().square().sum().sqrt();
            if max_norm > 0.0 {
                g = g.clone() * clip_scale(norm.clone(), max_norm);
            }
            norm
        });
        let mut flat = self.lay_out(slots, &w.device());
        let [w, m, v] = lamb_flat_step(
            [w, g],
            (flat.m, flat.v),
            &flat.lengths,
            &flat.per_param,
            &self.step_hyper(lr),
        );
        (flat.m, flat.v) = (m, v);
        let sizes = flat.slots.iter().map(Slot::len).collect();
        let values = flat
            .slots
            .iter_mut()
            .zip(w.split_with_sizes(sizes, 0))
            .map(|(slot, value)| {
                slot.time += 1;
                (slot.id, value)
            })
            .collect();
        self.flat = Some(flat);
        (module.map(&mut Updated { values }), norm)
    }

    /// The step's learning rate and moments' hyper-parameters (each parameter's weight decay
    /// and trust-ratio switch are in [`Flat::per_param`]).
    fn step_hyper(&self, lr: f64) -> LambStep {
        LambStep {
            lr: lr as f32,
            beta_1: self.decayed.beta_1,
            beta_2: self.decayed.beta_2,
            epsilon: self.decayed.epsilon,
            weight_decay: 0.0,
            layer_adaptation: false,
        }
    }

    /// The flat moments for `slots` in their order: the last step's as they are when the same
    /// parameters come in the same order (every step of a run), else laid out anew from each
    /// parameter's own state (zeros for one never stepped).
    fn lay_out(&mut self, slots: Vec<Slot>, device: &Device) -> Flat {
        let last = self.flat.take();
        if let Some(flat) = last {
            if flat
                .slots
                .iter()
                .map(|s| s.id)
                .eq(slots.iter().map(|s| s.id))
            {
                return flat;
            }
            self.park(flat);
        }
        self.unpark(slots, device)
    }

    /// Each parameter of `flat` back to its own state in [`Self::parked`].
    fn park(&mut self, flat: Flat) {
        self.parked.extend(per_param(flat));
    }

    /// `slots` laid end to end, each with its parked state (on `device`) or zeros.
    fn unpark(&mut self, mut slots: Vec<Slot>, device: &Device) -> Flat {
        let (mut ms, mut vs) = (Vec::new(), Vec::new());
        let (mut decay, mut adapt) = (Vec::new(), Vec::new());
        for slot in &mut slots {
            let n = slot.len();
            let (m, v, time) = match self.parked.remove(&slot.id) {
                Some(p) if p.m.dims() == [n] => {
                    (p.m.to_device(device), p.v.to_device(device), p.time)
                }
                other => {
                    if other.is_some() {
                        // burn's ModuleOptimizer, too, starts afresh a state it cannot use.
                        tracing::warn!("optimiser state of {} does not fit it: reset", slot.path);
                    }
                    let zeros = || Tensor::<1>::zeros([n], device);
                    (zeros(), zeros(), 0)
                }
            };
            slot.time = time;
            ms.push(m);
            vs.push(v);
            let group = if self.exclusions.matches(&slot.id, Some(&slot.path)) {
                &self.excluded
            } else {
                &self.decayed
            };
            decay.push(group.weight_decay);
            adapt.push(if group.layer_adaptation { 1.0 } else { 0.0 });
        }
        let parameters = slots.len();
        let lengths: Vec<i64> = slots.iter().map(|s| s.len() as i64).collect();
        decay.extend(adapt);
        Flat {
            slots,
            lengths: Tensor::from_data(TensorData::new(lengths, [parameters]), device),
            per_param: Tensor::from_data(TensorData::new(decay, [2, parameters]), device),
            m: Tensor::cat(ms, 0),
            v: Tensor::cat(vs, 0),
        }
    }

    /// Every parameter's state, as burn's `ModuleOptimizer` of [`AlbertLamb`] saves it: a
    /// burnpack file of `{id}.moment_1`, `{id}.moment_2`, `{id}.time`, `{id}.__rank` and each
    /// parameter's path.
    pub fn save(&self, path: &Path) -> Result<(), RecordError> {
        let mut all = self.parked.clone();
        all.extend(self.flat.clone().into_iter().flat_map(per_param));
        let (mut tensors, mut scalars, mut paths) = (Vec::new(), Vec::new(), Vec::new());
        for (id, moments) in all {
            let prefix = id.val().to_string();
            let mut sink = StateSink::default();
            flatten_state(&prefix, moments.clone(), &mut sink)?;
            scalars.push((
                format!("{prefix}.{RANK_KEY}"),
                burn_pack::Scalar::from(moments.dims.len()),
            ));
            scalars.extend(sink.scalars);
            for (name, data) in sink.tensors {
                let (bytes, shape, dtype) = data.into_parts();
                tensors.push(burn_pack::Tensor::new(
                    name,
                    dtype,
                    shape,
                    Some(id.val()),
                    bytes,
                ));
            }
            if let Some(p) = moments.path {
                paths.push((prefix, p));
            }
        }
        let mut writer = burn_pack::Writer::new(tensors);
        for (key, value) in scalars {
            writer = writer.with_scalar(&key, value);
        }
        for (key, value) in paths {
            writer = writer.with_metadata(&key, &value);
        }
        writer.write_to_file(path)?;
        Ok(())
    }

    /// `self` with the state [`Self::save`] (or burn's `ModuleOptimizer`) wrote to `path`; a
    /// parameter whose state is incomplete there starts afresh, as burn's loader does.
    pub fn load(mut self, path: &Path) -> Result<FlatLamb, RecordError> {
        let reader = burn_pack::Reader::from_file(path)?;
        let paths = reader.metadata().clone();
        let mut source = StateSource::new(reader.scalars().clone());
        let mut ranks: HashMap<u64, usize> = HashMap::new();
        for (name, value) in reader.scalars() {
            let id = name.strip_suffix(&format!(".{RANK_KEY}"));
            if let (Some(Ok(id)), Ok(rank)) = (id.map(str::parse), usize::try_from(*value)) {
                ranks.insert(id, rank);
            }
        }
        for tensor in reader.into_tensors()? {
            let (name, dtype, shape, id, bytes) = tensor.into_parts()?;
            let data = TensorData::from_bytes(bytes, shape, dtype);
            if let Some(id) = id {
                ranks.entry(id).or_insert(data.rank());
            }
            source.insert_tensor(name, data);
        }
        let device = Device::default();
        self.flat = None;
        self.parked.clear();
        for (id, rank) in ranks {
            let prefix = id.to_string();
            if let Some(mut moments) = unflatten_state(&prefix, rank, &mut source, &device) {
                moments.path = paths.get(&prefix).cloned();
                self.parked.insert(ParamId::from(id), moments);
            }
        }
        Ok(self)
    }
}

/// Each parameter's own state, from `flat`.
fn per_param(flat: Flat) -> impl Iterator<Item = (ParamId, Moments)> {
    let sizes: Vec<usize> = flat.slots.iter().map(Slot::len).collect();
    let ms = flat.m.split_with_sizes(sizes.clone(), 0);
    let vs = flat.v.split_with_sizes(sizes, 0);
    flat.slots
        .into_iter()
        .zip(ms)
        .zip(vs)
        .map(|((slot, m), v)| {
            let moments = Moments {
                path: Some(slot.path),
                dims: slot.dims,
                time: slot.time,
                m,
                v,
            };
            (slot.id, moments)
        })
}

/// `moments` as burn's [`LambState`] of its rank records it.
fn flatten_state(prefix: &str, moments: Moments, sink: &mut StateSink) -> Result<(), RecordError> {
    fn at<const D: usize>(prefix: &str, m: Moments, sink: &mut StateSink) {
        let shape = Shape::from(m.dims);
        let state = LambState::<D> {
            time: m.time,
            moment_1: m.m.reshape(shape.clone()),
            moment_2: m.v.reshape(shape),
        };
        state.state_flatten(prefix, sink);
    }
    match moments.dims.len() {
        1 => at::<1>(prefix, moments, sink),
        2 => at::<2>(prefix, moments, sink),
        3 => at::<3>(prefix, moments, sink),
        4 => at::<4>(prefix, moments, sink),
        rank => {
            return Err(RecordError::Validation(format!(
                "an optimiser state of rank {rank} (1 to 4 are written)"
            )));
        }
    }
    Ok(())
}

/// The state of rank `rank` recorded under `prefix`, as flat moments; `None` when it is
/// incomplete or of a rank this crate's models do not have.
fn unflatten_state(
    prefix: &str,
    rank: usize,
    source: &mut StateSource,
    device: &Device,
) -> Option<Moments> {
    fn at<const D: usize>(prefix: &str, src: &mut StateSource, dev: &Device) -> Option<Moments> {
        let state = LambState::<D>::state_unflatten(prefix, src, dev)?;
        let dims = state.moment_1.dims().to_vec();
        let n = dims.iter().product::<usize>();
        Some(Moments {
            path: None,
            dims,
            time: state.time,
            m: state.moment_1.reshape([n]),
            v: state.moment_2.reshape([n]),
        })
    }
    match rank {
        1 => at::<1>(prefix, source, device),
        2 => at::<2>(prefix, source, device),
        3 => at::<3>(prefix, source, device),
        4 => at::<4>(prefix, source, device),
        _ => None,
    }
}

/// Collects, in the module's order, each parameter that has a gradient: its place, its value
/// and its gradient as flat vectors (a parameter used twice is taken once: its gradient is
/// removed at the first visit).
struct Found<'a> {
    grads: &'a mut GradientsParams,
    path: Vec<String>,
    slots: Vec<Slot>,
    weights: Vec<Tensor<1>>,
    gradients: Vec<Tensor<1>>,
}

impl ModuleVisitor for Found<'_> {
    // The path as burn's ModuleOptimizer builds it, which the no-decay group matches.
    fn enter_module(&mut self, name: &str, _container: &str) {
        self.path.push(name.to_string());
    }

    fn exit_module(&mut self, _name: &str, _container: &str) {
        self.path.pop();
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let Some(g) = self.grads.remove::<D>(param.id) else {
            return;
        };
        let w = param.val().inner();
        let dims = w.dims().to_vec();
        let n = dims.iter().product::<usize>();
        self.weights.push(w.reshape([n]));
        self.gradients.push(g.reshape([n]));
        self.slots.push(Slot {
            id: param.id,
            path: self.path.join("."),
            dims,
            time: 0,
        });
    }
}

/// Puts each stepped parameter's new value in place, with the autodiff settings it had (as
/// burn's optimisers do: gradient required, checkpointing strategy, distributed).
struct Updated {
    values: HashMap<ParamId, Tensor<1>>,
}

impl ModuleMapper for Updated {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let (id, old, mapper) = param.consume();
        let Some(value) = self.values.get(&id) else {
            return Param::from_mapped_value(id, old, mapper);
        };
        let mut new = Tensor::from_inner(value.clone().reshape(Shape::from(old.dims().to_vec())));
        if let Some(strategy) = old.gradient_checkpointing_strategy() {
            new = new.with_gradient_checkpointing_strategy(strategy);
        }
        if old.is_require_grad() {
            new = new.require_grad();
        }
        if old.is_distributed() {
            new = new.set_distributed(id);
        }
        Param::from_mapped_value(id, new, mapper)
    }
}
