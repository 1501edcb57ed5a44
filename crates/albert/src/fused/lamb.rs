//! One step of google-research/albert's LAMB for one parameter as one op: on flex two passes
//! over the weight, its gradient and the two moments; on libtorch a dozen aten calls with no
//! burn op between them. `crate::train::AlbertLamb` says what the step computes.
//!
//! Why: written with burn's tensor ops the step is 22 ops a parameter (moments, root, division,
//! weight decay, two norms, the trust ratio and its guard, the update), each a pass over the
//! tensor on flex and a dispatch through burn on libtorch. On flex that was ~30 ms of a training
//! step of `tiny` on one core while the other waited (`perf`, AVX2, 2026-11-29: 1.6 % of the
//! samples, all on the main thread); fused, a step is 1.019× faster at AVX-512 and 1.011× at
//! AVX2 (medians of three alternating rounds against the build before, same day). On a GPU it
//! was ~700 small ops a step of `tiny`, each paid for on the host (not measured yet).

use burn::backend::autodiff::checkpoint::{base::Checkpointer, strategy::CheckpointStrategy};
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops};
use burn::backend::flex::FlexTensor;
use burn::backend::tensor::FloatTensor;
use burn::backend::{Autodiff, Backend};

use super::CpuLevel;
use super::flex_values::{contiguous, owned, values};

/// The step's hyperparameters, in the order [`Self::packed`] gives them to the backend op.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LambStep {
    /// The learning rate of this step.
    pub lr: f32,
    /// The first moment's decay.
    pub beta_1: f32,
    /// The second moment's decay.
    pub beta_2: f32,
    /// Added to the second moment's root.
    pub epsilon: f32,
    /// `weight_decay · w` added to the update.
    pub weight_decay: f32,
    /// Whether the trust ratio `|w| / |update|` scales the update.
    pub layer_adaptation: bool,
}

impl LambStep {
    /// As the backend op takes them (`layer_adaptation` as 1 or 0).
    pub(super) fn packed(&self) -> [f32; 6] {
        let adapt = if self.layer_adaptation { 1.0 } else { 0.0 };
        [
            self.lr,
            self.beta_1,
            self.beta_2,
            self.epsilon,
            self.weight_decay,
            adapt,
        ]
    }

    /// From [`Self::packed`].
    pub(super) fn unpacked(p: [f32; 6]) -> LambStep {
        LambStep {
            lr: p[0],
            beta_1: p[1],
            beta_2: p[2],
            epsilon: p[3],
            weight_decay: p[4],
            layer_adaptation: p[5] != 0.0,
        }
    }

    /// The trust ratio from the squared norms of the weight and the update: `|w| / |u|`, 1
    /// when either is 0 or the ratio is off.
    fn ratio(&self, w2: f32, u2: f32) -> f32 {
        if self.layer_adaptation && w2 > 0.0 && u2 > 0.0 {
            w2.sqrt() / u2.sqrt()
        } else {
            1.0
        }
    }
}

/// What a step of the flat LAMB takes besides its tensors: the step's values as
/// [`LambStep::packed`] gives them, and each parameter's length in the flat vector's order, on
/// the host, so that no backend waits for the device to learn where a parameter ends.
#[derive(Debug, Clone, PartialEq)]
pub struct FlatLambStep {
    pub(super) hyper: [f32; 6],
    pub(super) lengths: Vec<i64>,
}

/// The moments in place and `norms ← [Σ w², Σ u²]` with `u = m / (√v + ε) + wd·w` (16 lanes
/// each, as the other kernels sum).
#[inline(always)]
fn moments_slice(
    w: &[f32],
    g: &[f32],
    m: &mut [f32],
    v: &mut [f32],
    h: &[f32; 6],
    norms: &mut [f32; 2],
) {
    let (b1, b2, eps, wd) = (h[1], h[2], h[3], h[4]);
    let (mut w2, mut u2) = ([0.0_f32; 16], [0.0_f32; 16]);
    for (i, (((w, g), m), v)) in w
        .iter()
        .zip(g)
        .zip(m.iter_mut())
        .zip(v.iter_mut())
        .enumerate()
    {
        *m = *m * b1 + *g * (1.0 - b1);
        *v = *v * b2 + *g * *g * (1.0 - b2);
        let u = *m / (v.sqrt() + eps) + wd * *w;
        w2[i % 16] += *w * *w;
        u2[i % 16] += u * u;
    }
    *norms = [w2.iter().sum(), u2.iter().sum()];
}

/// `w ← w − scale·u`, `u` recomputed from the updated moments and the old `w` (`h` packed,
/// `scale` = lr · ratio in `h[0]`).
#[inline(always)]
fn apply_slice(w: &mut [f32], m: &[f32], v: &[f32], h: &[f32; 6]) {
    let (scale, eps, wd) = (h[0], h[3], h[4]);
    for ((w, m), v) in w.iter_mut().zip(m).zip(v) {
        let u = *m / (v.sqrt() + eps) + wd * *w;
        *w -= scale * u;
    }
}

multiversion!(
    moments_at,
    moments_slice,
    (w: &[f32], g: &[f32], m: &mut [f32], v: &mut [f32], h: &[f32; 6], norms: &mut [f32; 2])
);
multiversion!(apply_at, apply_slice, (w: &mut [f32], m: &[f32], v: &[f32], h: &[f32; 6]));

/// The step on flex: the new weight and moments (written in place where nothing else holds
/// them).
pub(super) fn step_flex(
    [w, g, m, v]: [FlexTensor; 4],
    packed: [f32; 6],
) -> (FlexTensor, FlexTensor, FlexTensor) {
    let h = LambStep::unpacked(packed);
    let level = CpuLevel::active();
    let g = contiguous(g);
    let (mut w, mut m, mut v) = (owned(w), owned(m), owned(v));
    let mut norms = [0.0; 2];
    moments_at(
        level,
        values(&w),
        values(&g),
        m.storage_mut::<f32>(),
        v.storage_mut::<f32>(),
        &packed,
        &mut norms,
    );
    let mut apply = packed;
    apply[0] = h.lr * h.ratio(norms[0], norms[1]);
    apply_at(
        level,
        w.storage_mut::<f32>(),
        values(&m),
        values(&v),
        &apply,
    );
    (w, m, v)
}

/// The step on libtorch, out of place (burn may still hold the inputs), no read-back.
///
/// Written in as few aten calls as give the same arithmetic (15 with the trust ratio, 8 without
/// weight decay or ratio, against 19 and 9 before): on a GPU each call is a kernel launch paid
/// on the host, for every parameter tensor, every step. `where(min(|w|, |u|) > 0, |w|/|u|, 1)` is
/// google's nested `tf.where` in four calls (the quotient's inf or NaN when `|u|` is 0 is never
/// selected), and the update is one `addcmul` with `−lr·ratio`.
#[cfg(feature = "tch")]
pub(super) fn step_torch(
    [w, g, m, v]: [&tch::Tensor; 4],
    packed: [f32; 6],
) -> (tch::Tensor, tch::Tensor, tch::Tensor) {
    let h = LambStep::unpacked(packed);
    let (b1, b2) = (f64::from(h.beta_1), f64::from(h.beta_2));
    // lerp: m + (1 − b1)(g − m) = b1·m + (1 − b1)·g.
    let m = m.lerp(g, 1.0 - b1);
    let v = v.lerp(&g.square(), 1.0 - b2);
    let denom = v.sqrt() + f64::from(h.epsilon);
    // u = wd·w + m / (√v + ε).
    let u = if h.weight_decay == 0.0 {
        &m / &denom
    } else {
        (w * f64::from(h.weight_decay)).addcdiv(&m, &denom)
    };
    let lr = f64::from(h.lr);
    let w = if h.layer_adaptation {
        let (wn, un) = (w.norm(), u.norm());
        let valid = wn.minimum(&un).gt(0.0);
        let ratio = (&wn / &un).where_scalarother(&valid, 1.0);
        w.addcmul(&u, &(ratio * -lr))
    } else {
        w - u * lr
    };
    (w, m, v)
}

/// The step of many parameters laid end to end on flex: each segment exactly as [`step_flex`]
/// steps one parameter (the same kernels, so the same bits), with its own weight decay and
/// trust-ratio switch (`per_param`'s two rows) and its length (`step.lengths`); the weight decay
/// and trust-ratio switch of `step.hyper` are not used.
pub(super) fn step_flex_flat(
    [w, g, m, v]: [FlexTensor; 4],
    per_param: FlexTensor,
    step: &FlatLambStep,
) -> (FlexTensor, FlexTensor, FlexTensor) {
    let (level, packed) = (CpuLevel::active(), step.hyper);
    let lengths: Vec<usize> = step
        .lengths
        .iter()
        .map(|&n| usize::try_from(n).unwrap_or(0))
        .collect();
    let per_param = contiguous(per_param);
    let g = contiguous(g);
    let (mut w, mut m, mut v) = (owned(w), owned(m), owned(v));
    assert!(
        lengths.iter().sum::<usize>() == values(&w).len()
            && values(&per_param).len() == 2 * lengths.len(),
        "the segments cover the flat vector, with two values each"
    );
    let (decay, adapt) = values(&per_param).split_at(lengths.len());
    let mut start = 0;
    for (k, len) in lengths.into_iter().enumerate() {
        let r = start..start + len;
        start += len;
        let mut h = packed;
        (h[4], h[5]) = (decay[k], adapt[k]);
        let mut norms = [0.0; 2];
        moments_at(
            level,
            &values(&w)[r.clone()],
            &values(&g)[r.clone()],
            &mut m.storage_mut::<f32>()[r.clone()],
            &mut v.storage_mut::<f32>()[r.clone()],
            &h,
            &mut norms,
        );
        let lamb = LambStep::unpacked(h);
        h[0] = lamb.lr * lamb.ratio(norms[0], norms[1]);
        apply_at(
            level,
            &mut w.storage_mut::<f32>()[r.clone()],
            &values(&m)[r.clone()],
            &values(&v)[r],
            &h,
        );
    }
    (w, m, v)
}

/// The step of many parameters laid end to end on libtorch: the arithmetic of [`step_torch`]
/// over the whole vector in ~20 aten calls on the CPU and ~50 on CUDA, where each parameter's
/// norms are a sum of their own (against 15 a weight matrix and 8 a bias there). `segments`
/// (int64, `[elements]`) holds each element's parameter; `step.lengths` and the rows of
/// `per_param`, weight decay and trust-ratio switch (1 or 0), one value a parameter; the weight
/// decay and trust-ratio switch of `step.hyper` are not used.
///
/// The two norms of every parameter are segmented sums over `[w², u²]` side by side
/// ([`segment_sums`]), in a fixed order, so that a step gives the same bits every run (an
/// `index_add` would sum with atomics on CUDA). The per-parameter values reach the elements by
/// an `index_select` of `segments`, which the caller keeps between steps: made each step by
/// `repeat_interleave` of the lengths, on CUDA that kernel walks each parameter with one warp
/// (2.7 M values of `tiny`'s word embeddings, ~84 k stores in a row).
#[cfg(feature = "tch")]
pub(super) fn step_torch_flat(
    [w, g, m, v]: [&tch::Tensor; 4],
    [segments, per_param]: [&tch::Tensor; 2],
    step: &FlatLambStep,
) -> (tch::Tensor, tch::Tensor, tch::Tensor) {
    let (decay, adapt) = (per_param.select(0, 0), per_param.select(0, 1));
    let h = LambStep::unpacked(step.hyper);
    let (b1, b2) = (f64::from(h.beta_1), f64::from(h.beta_2));
    let per_element = |t: &tch::Tensor| t.index_select(0, segments);
    let m = m.lerp(g, 1.0 - b1);
    let v = v.lerp(&g.square(), 1.0 - b2);
    let denom = v.sqrt() + f64::from(h.epsilon);
    let u = (w * per_element(&decay)).addcdiv(&m, &denom);
    let squares = tch::Tensor::stack(&[w, &u], 1).square();
    let sums = segment_sums(&squares, &step.lengths);
    let norms = sums.sqrt();
    let (wn, un) = (norms.select(1, 0), norms.select(1, 1));
    let valid = wn.minimum(&un).gt(0.0).logical_and(&adapt.gt(0.0));
    let ratio = (&wn / &un).where_scalarother(&valid, 1.0);
    let w = w.addcmul(&u, &(per_element(&ratio) * -f64::from(h.lr)));
    (w, m, v)
}

/// The sums of `x` `[n, k]` over consecutive runs of rows, `host_lengths` rows each (each at
/// least 1): `[segments, k]`. On the CPU torch's `segment_reduce`; on CUDA [`reduced_sums`].
///
/// Why not `segment_reduce` on CUDA: its kernel gives each segment (and column) one thread,
/// which walks the segment serially (and its checks read two values back each step, found by
/// `perf` on the CPU). `tiny`'s word embeddings are one 2.7 M-element segment,
/// and a training step took 0.18–0.20 s on an H200 whatever the batch (32 or 256 rows;
/// transformers 0.02 s), the 2026-11-29 sitting's benchmark. Nor a running sum (`cumsum`
/// along the rows, which replaced it in a4e7c25 and never ran on a GPU): torch scans a
/// dimension of a tensor that has others with one thread per column walking every row
/// (`scan_outer_dim` in ATen's `cuda/ScanUtils.cuh`; only a 1-D scan goes to cub's parallel
/// one), so two threads walked all 4 M of `tiny`'s values, the same serial walk, found by
/// reading ATen's source.
#[cfg(feature = "tch")]
fn segment_sums(x: &tch::Tensor, host_lengths: &[i64]) -> tch::Tensor {
    if x.device().is_cuda() {
        return reduced_sums(x, host_lengths);
    }
    // `unsafe_`: skips its checks that the lengths are not negative and cover `x`, a `min`
    // and an `all` read back each step (on CUDA each a wait for the device); the lengths are
    // the parameters' own, laid end to end into `x`.
    let lengths = tch::Tensor::from_slice(host_lengths);
    tch::Tensor::segment_reduce(x, "sum", Some(&lengths), None, None, 0, true, 0.0)
}

/// [`segment_sums`] as one of torch's sums a segment (over a view of its rows, no copy) and a
/// `stack`: each sum is spread over the GPU's threads in a tree, and adds in the same order
/// every run (no atomics), so a step gives the same bits every run. One kernel a parameter and
/// the stack: 33 for `tiny`'s 32 tensors, against the scan's 6.
#[cfg(feature = "tch")]
pub(super) fn reduced_sums(x: &tch::Tensor, host_lengths: &[i64]) -> tch::Tensor {
    let sums: Vec<tch::Tensor> = x
        .split_with_sizes(host_lengths, 0)
        .iter()
        .map(|rows| rows.sum_dim_intlist(0, false, None::<tch::Kind>))
        .collect();
    tch::Tensor::stack(&sums, 0)
}

/// A tensor outside the graph (no gradient flows through it), as autodiff over `B` holds it.
#[derive(Debug)]
pub(super) struct Constant;

impl<B: Backend> Backward<B, 0> for Constant {
    type State = ();

    fn backward(self, _: Ops<(), 0>, _: &mut Gradients, _: &mut Checkpointer) {}
}

/// `t` as an autodiff tensor outside the graph: an optimiser's results.
pub(super) fn constant<B: Backend, C: CheckpointStrategy>(
    t: B::FloatTensorPrimitive,
) -> FloatTensor<Autodiff<B, C>> {
    Constant.prepare::<C>([]).compute_bound().stateless(t)
}

/// A step's new weight and moments, on a backend `B`.
type Stepped<B> = (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>);

/// A LAMB step's new weight and moments as autodiff tensors outside the graph.
pub(super) fn constants<B: Backend, C: CheckpointStrategy>(
    (w, m, v): Stepped<B>,
) -> Stepped<Autodiff<B, C>> {
    let c = constant::<B, C>;
    (c(w), c(m), c(v))
}
