//! An optimiser over all of a model's parameters at once: the weights and gradients laid end
//! to end in one vector, the moments kept that way between steps, and the update done on the
//! whole vector, each parameter's own settings (weight decay, LAMB's trust ratio, AdamW's bias
//! correction at its own step count) included. The arithmetic is that of [`AlbertLamb`]
//! (`super::flat_lamb`) or burn's `AdamW` (`super::flat_adamw`); the checkpoint file is the
//! one burn's `ModuleOptimizer` writes for them, so a run resumes on either.
//!
//! Why: burn's `ModuleOptimizer` steps one parameter at a time, and on libtorch each step of
//! one tensor is 15 aten calls for LAMB (8 for a bias or LayerNorm tensor), a dozen for AdamW:
//! ~400 for `tiny`'s ~33 tensors, each a kernel launch that the host pays for on a GPU. A
//! profile of the host's cost per step (`benches/host_overhead.sh`, 2026-11-29) put the
//! optimiser at 24 % of it, 94 % in those calls. Here a step is two `cat`s, ~20 calls and a
//! split into views, whatever the number of tensors. On flex the per-parameter kernels are
//! already one pass each, and the copies into and out of the flat vector would only add to
//! them: `OptimConfig::build` uses this on libtorch alone.

use std::collections::HashMap;
use std::path::Path;

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param, ParamGroup, ParamId};
use burn::optim::{GradientsParams, StateSink, StateSource};
use burn::store::RecordError;
use burn::tensor::{Device, Shape, Tensor, TensorData};

use super::clip::clip_scale;
use super::flat_adamw::FlatAdamW;
use super::flat_lamb::FlatLamb;
use super::flat_layout::{Layout, Moments, Slot};

/// The scalar under which burn's `ModuleOptimizer` records each parameter's rank (its private
/// `RANK_KEY`), written and read here so that the two read each other's files.
const RANK_KEY: &str = "__rank";

/// The update a [`FlatOptimizer`] makes: what it keeps of each parameter, how it steps the
/// flat vector, and how it records each parameter's state.
#[derive(Debug, Clone)]
pub(super) enum FlatRule {
    /// google-research/albert's LAMB.
    Lamb(FlatLamb),
    /// burn's AdamW.
    AdamW(FlatAdamW),
}

impl FlatRule {
    /// The values the step needs of one parameter, one per row of [`Layout::per_param`]; it is
    /// one of the group excluded from weight decay when `excluded`.
    fn per_param(&self, excluded: bool) -> Vec<f32> {
        match self {
            FlatRule::Lamb(r) => r.per_param(excluded),
            FlatRule::AdamW(r) => r.per_param(excluded),
        }
    }

    /// The new weights and moments of the parameters `layout` lays out, at learning rate `lr`.
    fn step(
        &self,
        lr: f64,
        [w, g]: [Tensor<1>; 2],
        (m, v): (Tensor<1>, Tensor<1>),
        layout: &mut Layout,
    ) -> [Tensor<1>; 3] {
        match self {
            FlatRule::Lamb(r) => r.step(lr, [w, g], (m, v), layout),
            FlatRule::AdamW(r) => r.step(lr, [w, g], (m, v), layout),
        }
    }

    /// `moments` as burn's optimiser state records it under `prefix`.
    fn flatten(&self, prefix: &str, moments: Moments, sink: &mut StateSink) {
        match self {
            FlatRule::Lamb(_) => super::flat_lamb::flatten(prefix, moments, sink),
            FlatRule::AdamW(_) => super::flat_adamw::flatten(prefix, moments, sink),
        }
    }

    /// The state of rank `rank` recorded under `prefix`; `None` when it is incomplete.
    fn unflatten(
        &self,
        prefix: &str,
        rank: usize,
        source: &mut StateSource,
        device: &Device,
    ) -> Option<Moments> {
        match self {
            FlatRule::Lamb(_) => super::flat_lamb::unflatten(prefix, rank, source, device),
            FlatRule::AdamW(_) => super::flat_adamw::unflatten(prefix, rank, source, device),
        }
    }
}

/// An optimiser that steps all parameters as one vector by its rule (LAMB or AdamW), the parameters
/// that `exclusions` matches (LayerNorm and biases) by the rule's excluded settings.
#[derive(Debug, Clone)]
pub struct FlatOptimizer {
    rule: FlatRule,
    exclusions: ParamGroup,
    /// The moments of the parameters the last step updated, in that step's order.
    flat: Option<Flat>,
    /// The moments of any other parameter: loaded from a checkpoint, or left out of the last
    /// step (no gradient), as burn keeps the state of a parameter it did not step.
    parked: HashMap<ParamId, Moments>,
}

/// The moments of a run of parameters end to end, and their layout.
#[derive(Debug, Clone)]
struct Flat {
    layout: Layout,
    m: Tensor<1>,
    v: Tensor<1>,
}

impl FlatOptimizer {
    /// The rule's excluded settings step the parameters `exclusions` matches by id or path,
    /// as burn's `ModuleOptimizer::with_group` would.
    pub(super) fn new(rule: FlatRule, exclusions: ParamGroup) -> FlatOptimizer {
        FlatOptimizer {
            rule,
            exclusions,
            flat: None,
            parked: HashMap::new(),
        }
    }

    /// One step of every parameter of `module` that has a gradient in `grads`, at learning
    /// rate `lr`; the others keep their value and state.
    ///
    /// # Panics
    /// LAMB on parameters that are not float32 on flex or libtorch, which this crate never
    /// trains.
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
        let norm = clip.map(|max_norm| {
            let norm = g.clone().square().sum().sqrt();
            if max_norm > 0.0 {
                g = g.clone() * clip_scale(norm.clone(), max_norm);
            }
            norm
        });
        let Flat { mut layout, m, v } = self.lay_out(slots, &w.device());
        let [w, m, v] = self.rule.step(lr, [w, g], (m, v), &mut layout);
        let sizes = layout.slots.iter().map(Slot::len).collect();
        let values = layout
            .slots
            .iter_mut()
            .zip(w.split_with_sizes(sizes, 0))
            .map(|(slot, value)| {
                slot.time += 1;
                (slot.id, value)
            })
            .collect();
        self.flat = Some(Flat { layout, m, v });
        (module.map(&mut Updated { values }), norm)
    }

    /// The flat moments for `slots` in their order: the last step's as they are when the same
    /// parameters come in the same order (every step of a run), else laid out anew from each
    /// parameter's own state (zeros for one never stepped).
    fn lay_out(&mut self, slots: Vec<Slot>, device: &Device) -> Flat {
        let last = self.flat.take();
        if let Some(flat) = last {
            if flat
                .layout
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
        let mut rows: Vec<Vec<f32>> = Vec::new();
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
            let excluded = self.exclusions.matches(&slot.id, Some(&slot.path));
            rows.push(self.rule.per_param(excluded));
        }
        let parameters = slots.len();
        let height = rows.first().map_or(0, Vec::len);
        // Row-major `[rows, parameters]`: each row one value of every parameter.
        let per_param: Vec<f32> = (0..height)
            .flat_map(|r| rows.iter().map(move |p| p[r]))
            .collect();
        let layout = Layout {
            slots,
            per_param: Tensor::from_data(
                TensorData::new(per_param.clone(), [height, parameters]),
                device,
            ),
            per_param_values: per_param,
            segments: None,
        };
        Flat {
            layout,
            m: Tensor::cat(ms, 0),
            v: Tensor::cat(vs, 0),
        }
    }

    /// Every parameter's state, as burn's `ModuleOptimizer` of the same optimiser saves it: a
    /// burnpack file of each parameter's state under `{id}.` (LAMB's `moment_1`, `moment_2`
    /// and `time`; AdamW's the same under `momentum.`), `{id}.__rank` and each parameter's
    /// path.
    pub fn save(&self, path: &Path) -> Result<(), RecordError> {
        let mut all = self.parked.clone();
        all.extend(self.flat.clone().into_iter().flat_map(per_param));
        let (mut tensors, mut scalars, mut paths) = (Vec::new(), Vec::new(), Vec::new());
        for (id, moments) in all {
            let prefix = id.val().to_string();
            let mut sink = StateSink::default();
            check_rank(moments.dims.len())?;
            self.rule.flatten(&prefix, moments.clone(), &mut sink);
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
    pub fn load(mut self, path: &Path) -> Result<FlatOptimizer, RecordError> {
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
            let state = self.rule.unflatten(&prefix, rank, &mut source, &device);
            if let Some(mut moments) = state {
                moments.path = paths.get(&prefix).cloned();
                self.parked.insert(ParamId::from(id), moments);
            }
        }
        Ok(self)
    }
}

/// Each parameter's own state, from `flat`.
fn per_param(flat: Flat) -> impl Iterator<Item = (ParamId, Moments)> {
    let sizes: Vec<usize> = flat.layout.slots.iter().map(Slot::len).collect();
    let ms = flat.m.split_with_sizes(sizes.clone(), 0);
    let vs = flat.v.split_with_sizes(sizes, 0);
    flat.layout
        .slots
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

/// An error for a state of a rank burn's records are not written for here (1 to 4: this
/// crate's models have no other).
fn check_rank(rank: usize) -> Result<(), RecordError> {
    if (1..=4).contains(&rank) {
        return Ok(());
    }
    Err(RecordError::Validation(format!(
        "an optimiser state of rank {rank} (1 to 4 are written)"
    )))
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
