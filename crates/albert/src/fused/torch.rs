//! The fused ops on libtorch (`tch` builds): each is torch's own fused kernel forward —
//! scaled-dot-product attention, `layer_norm`, the tanh `gelu`, `log_softmax`, `addmm` — and
//! torch's own backward kernels for that one op.
//!
//! Why: burn's libtorch backend runs a composed expression one aten op at a time, and burn's
//! autodiff records and replays each of them, so a training step of `tiny` on a GPU is a long
//! train of small kernel launches (the LayerNorm alone is a dozen forward and more backward;
//! the attention materialises its scores, scales, masks, softmaxes and multiplies, each once
//! more backward). That is what kept a step at twice transformers' time on the H100
//! (`docs/gpu.md`). Here each op is one node in burn's graph and, on CUDA, one or two kernels
//! each way: the attention is torch's SDPA (memory-efficient or flash kernels on a GPU, the
//! fused CPU kernel on libtorch's CPU), as transformers' `sdpa` attention is.
//!
//! The backward, two ways. The linear layers, the GELU and the loss's `log_softmax` are
//! differentiated by hand ([`Saved::vjp`]): two products and a column sum for a linear layer,
//! torch's `gelu_backward` and `_log_softmax_backward_data` kernels for the others, called
//! directly. The attention and LayerNorm, whose backward kernels `tch` 0.22 does not wrap
//! (`native_layer_norm_backward`, the SDPA variants' backward, which differ by kernel), run
//! their forward under torch's autograd on detached copies of the inputs that require a
//! gradient (`tch::with_grad`), and the op's node keeps that small torch graph; the backward
//! hands torch's autograd `g` as the output's gradient (`torch_vjp`, the `torch::autograd::grad`
//! call tch does not wrap) and gets the vector-Jacobian products from torch's native backward
//! kernels. The price is a call into torch's autograd engine per op backward.

// burn marks its libtorch backend deprecated; it is the one that builds offline (device.rs).
#![allow(deprecated)]

use burn::backend::autodiff::checkpoint::{base::Checkpointer, strategy::CheckpointStrategy};
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::libtorch::TchTensor;
use burn::backend::tensor::{FloatTensor, IntTensor};
use burn::backend::{Autodiff, LibTorch};
use tch::{Kind, Tensor};

use super::lamb::FlatLambStep;
use super::torch_attention::{attention, packed_attention};
use super::torch_products::{
    Precision, addmm_to_float, mm_to_float, weight_factors, weight_gradient,
};
use super::torch_shared::{WeightSum, keep_first, weight_sum};
use super::torch_upload::upload;
use super::torch_vjp::vjp;
use super::tracked::FusedOps;

/// `softmax(scores·scale + bias)` over the last dimension.
fn attention_softmax(scores: &Tensor, bias: &Tensor, scale: f32) -> Tensor {
    (scores * f64::from(scale) + bias).softmax(-1, scores.kind())
}

/// `x·W + b` (`x·Wᵀ + b` when `transposed`) in one `addmm`.
fn linear(x: &Tensor, w: &Tensor, b: &Tensor, transposed: bool) -> Tensor {
    if transposed {
        b.addmm(x, &w.tr())
    } else {
        b.addmm(x, w)
    }
}

/// `t` in bf16: `t` itself when it is bf16 already (an activation between two products),
/// else a fresh copy (a float32 input, or a weight's master copy).
fn to_bf16(t: &TchTensor) -> TchTensor {
    if t.tensor.kind() == Kind::BFloat16 {
        t.clone()
    } else {
        TchTensor::new(t.tensor.to_kind(Kind::BFloat16))
    }
}

/// `x·W` (`x·Wᵀ` when `transposed`) of bf16 operands plus `b`: with `bf16_out`, one `addmm`
/// in bf16 with the bias rounded to bf16, as autocast runs `nn.Linear`; without, in float32
/// ([`addmm_to_float`]: one product on CUDA).
fn linear_bf16(xb: &Tensor, wb: &Tensor, b: &Tensor, transposed: bool, bf16_out: bool) -> Tensor {
    if bf16_out {
        return linear(xb, wb, &b.to_kind(Kind::BFloat16), transposed);
    }
    if transposed {
        addmm_to_float(b, xb, &wb.tr())
    } else {
        addmm_to_float(b, xb, wb)
    }
}

/// LayerNorm over the last dimension.
fn layer_norm(x: &Tensor, gamma: &Tensor, beta: &Tensor, eps: f32) -> Tensor {
    let d = *x
        .size()
        .last()
        .expect("LayerNorm of a tensor with dimensions");
    x.layer_norm([d], Some(gamma), Some(beta), f64::from(eps), true)
}

impl FusedOps for LibTorch {
    fn fused_gelu_tanh(x: TchTensor) -> TchTensor {
        TchTensor::new(x.tensor.gelu("tanh"))
    }

    fn fused_attention_softmax(scores: TchTensor, bias: TchTensor, scale: f32) -> TchTensor {
        TchTensor::new(attention_softmax(&scores.tensor, &bias.tensor, scale))
    }

    fn fused_attention(
        q: TchTensor,
        k: TchTensor,
        v: TchTensor,
        bias: TchTensor,
        heads: usize,
        scale: f32,
    ) -> TchTensor {
        TchTensor::new(attention(
            &q.tensor,
            &k.tensor,
            &v.tensor,
            &bias.tensor,
            heads,
            scale,
        ))
    }

    fn fused_attention_packed(
        qkv: TchTensor,
        bias: TchTensor,
        heads: usize,
        scale: f32,
    ) -> TchTensor {
        TchTensor::new(packed_attention(&qkv.tensor, &bias.tensor, heads, scale))
    }

    fn fused_linear(x: TchTensor, w: TchTensor, b: TchTensor, transposed: bool) -> TchTensor {
        TchTensor::new(linear(&x.tensor, &w.tensor, &b.tensor, transposed))
    }

    fn fused_linear_bf16(
        x: TchTensor,
        w: TchTensor,
        b: TchTensor,
        transposed: bool,
        bf16_out: bool,
    ) -> TchTensor {
        let (xb, wb) = (to_bf16(&x), to_bf16(&w));
        let y = linear_bf16(&xb.tensor, &wb.tensor, &b.tensor, transposed, bf16_out);
        TchTensor::new(y)
    }

    fn fused_shared_operand(w: TchTensor, bf16: bool) -> TchTensor {
        super::torch_shared::cast(w, bf16)
    }

    fn fused_log_softmax(x: TchTensor) -> TchTensor {
        TchTensor::new(x.tensor.log_softmax(-1, Kind::Float))
    }

    fn fused_layer_norm(x: TchTensor, gamma: TchTensor, beta: TchTensor, eps: f32) -> TchTensor {
        TchTensor::new(layer_norm(&x.tensor, &gamma.tensor, &beta.tensor, eps))
    }

    fn fused_lamb(
        w: TchTensor,
        g: TchTensor,
        m: TchTensor,
        v: TchTensor,
        hyper: [f32; 6],
    ) -> (TchTensor, TchTensor, TchTensor) {
        let tensors = [&w.tensor, &g.tensor, &m.tensor, &v.tensor];
        let (w, m, v) = tch::no_grad(|| super::lamb::step_torch(tensors, hyper));
        (TchTensor::new(w), TchTensor::new(m), TchTensor::new(v))
    }

    fn fused_lamb_flat(
        w: TchTensor,
        g: TchTensor,
        m: TchTensor,
        v: TchTensor,
        segments: TchTensor,
        per_param: TchTensor,
        step: FlatLambStep,
    ) -> (TchTensor, TchTensor, TchTensor) {
        let tensors = [&w.tensor, &g.tensor, &m.tensor, &v.tensor];
        let per = [&segments.tensor, &per_param.tensor];
        let (w, m, v) = tch::no_grad(|| super::lamb::step_torch_flat(tensors, per, &step));
        (TchTensor::new(w), TchTensor::new(m), TchTensor::new(v))
    }

    fn fused_upload_int(x: TchTensor, cuda: Option<usize>) -> TchTensor {
        upload(x, cuda)
    }

    fn fused_upload_float(x: TchTensor, cuda: Option<usize>) -> TchTensor {
        upload(x, cuda)
    }
}

/// One fused op's torch graph: the detached inputs it was computed from, whether each gets a
/// gradient, and its output, still attached to them.
///
/// Every tensor here shares burn's storage count with the tensor burn holds (`from_existing`):
/// burn-tch writes into a tensor in place when it thinks nobody else reads it, and torch saved
/// these for the backward (the SDPA and the softmaxes keep their output, LayerNorm and GELU
/// their input), so a write would change the gradient (torch stops it: "modified by an
/// inplace operation", which is how the tests found it).
#[derive(Debug, Clone)]
struct TorchGraph {
    inputs: Vec<(TchTensor, bool)>,
    output: TchTensor,
}

/// The backward of any op here: torch's autograd over the graph the forward kept.
#[derive(Debug)]
struct TorchBackward;

impl<const N: usize> Backward<LibTorch, N> for TorchBackward {
    type State = TorchGraph;

    fn backward(self, ops: Ops<TorchGraph, N>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<LibTorch>(&ops.node);
        let TorchGraph { inputs, output } = ops.state;
        let wanted: Vec<(usize, &Tensor)> = (0..N)
            .filter(|&i| ops.parents[i].is_some() && inputs[i].1)
            .map(|i| (i, &inputs[i].0.tensor))
            .collect();
        if wanted.is_empty() {
            return;
        }
        // torch's own backward kernels, seeded with g itself (in the output's dtype: under
        // bf16 an op's gradient may arrive in float32).
        let g = same_kind(&grad.tensor, &output.tensor);
        let leaves: Vec<&Tensor> = wanted.iter().map(|(_, t)| *t).collect();
        let results = tch::with_grad(|| vjp(&output.tensor, &g, &leaves))
            .unwrap_or_else(|e| panic!("torch's backward of a fused op: {e}"));
        for ((i, _), result) in wanted.into_iter().zip(results) {
            if let Some(parent) = &ops.parents[i] {
                grads.register::<LibTorch>(parent.id, TchTensor::new(result));
            }
        }
    }
}

/// What an op differentiated by hand kept for its backward ([`Saved::vjp`]). Each tensor is a
/// clone of burn's, sharing its storage count, for the reason [`TorchGraph`] gives.
#[derive(Debug, Clone)]
enum Saved {
    /// `x·W + b` (`x·Wᵀ + b` when `transposed`): its input and weight.
    Linear {
        x: TchTensor,
        w: TchTensor,
        transposed: bool,
    },
    /// [`Saved::Linear`] in bf16 mixed precision: the bf16 operands the product multiplied
    /// (the weight's a fresh copy; the input's a copy when it came in float32, burn's own when
    /// it came in bf16) and the input's dtype, which its gradient goes back to.
    LinearBf16 {
        xb: TchTensor,
        wb: TchTensor,
        transposed: bool,
        x_kind: Kind,
    },
    /// The tanh GELU: its input.
    GeluTanh { x: TchTensor },
    /// `log_softmax` over the last dimension: its float32 output and the input's dtype, which
    /// the gradient goes back to.
    LogSoftmax { output: TchTensor, input_kind: Kind },
}

/// `g` in the dtype of `like` (under bf16 an op's gradient may arrive in float32).
fn same_kind(g: &Tensor, like: &Tensor) -> Tensor {
    if g.kind() == like.kind() {
        g.shallow_clone()
    } else {
        g.to_kind(like.kind())
    }
}

impl Saved {
    /// The vector-Jacobian products with `g` of the inputs that `wanted(i)` asks for, in the
    /// op's input order: the two products and the column sum of a linear layer, torch's own
    /// `gelu_backward` and `_log_softmax_backward_data` kernels. A linear layer's weight
    /// gradient goes into `weight_sum` instead where that is given (the running sum of the
    /// layers sharing the weight, `super::torch_shared`), and comes back `None`.
    fn vjp(
        &self,
        g: &Tensor,
        wanted: impl Fn(usize) -> bool,
        weight_sum: Option<&Tensor>,
    ) -> Vec<Option<Tensor>> {
        match self {
            Saved::Linear { x, w, transposed } => {
                let (x, w) = (&x.tensor, &w.tensor);
                let g = same_kind(g, x);
                let dx = wanted(0).then(|| if *transposed { g.mm(w) } else { g.mm(&w.tr()) });
                let dw = wanted(1)
                    .then(|| {
                        let (a, b) = weight_factors(&g, x, *transposed);
                        weight_gradient(&a, &b, weight_sum, Precision::Float)
                    })
                    .flatten();
                let db = wanted(2).then(|| g.sum_dim_intlist([0_i64].as_slice(), false, g.kind()));
                vec![dx, dw, db]
            }
            Saved::LinearBf16 {
                xb,
                wb,
                transposed,
                x_kind,
            } => {
                // As the composed casts differentiate: the products of bf16 operands, the
                // input's gradient in the input's dtype, the weight's in float32 (each written
                // so by the product on CUDA: `mm_to_float`); the bias's, `g` summed in float32
                // (a bf16 sum over thousands of rows would round).
                let (gb, xb, wb) = (g.to_kind(Kind::BFloat16), &xb.tensor, &wb.tensor);
                let dx = wanted(0).then(|| {
                    let w_side = if *transposed {
                        wb.shallow_clone()
                    } else {
                        wb.tr()
                    };
                    match x_kind {
                        Kind::Float => mm_to_float(&gb, &w_side),
                        kind => gb.mm(&w_side).to_kind(*kind),
                    }
                });
                let dw = wanted(1)
                    .then(|| {
                        let (a, b) = weight_factors(&gb, xb, *transposed);
                        weight_gradient(&a, &b, weight_sum, Precision::Bf16)
                    })
                    .flatten();
                let db =
                    wanted(2).then(|| g.sum_dim_intlist([0_i64].as_slice(), false, Kind::Float));
                vec![dx, dw, db]
            }
            Saved::GeluTanh { x } => {
                let x = &x.tensor;
                vec![wanted(0).then(|| x.gelu_backward(&same_kind(g, x), "tanh"))]
            }
            Saved::LogSoftmax { output, input_kind } => {
                let out = &output.tensor;
                let g = same_kind(g, out);
                vec![wanted(0).then(|| {
                    // In float32, then cast: CUDA's kernel takes a float32 gradient for a
                    // narrower input only for fp16 and refused bf16 (the 2026-11-29 sitting:
                    // "expected input and grad types to match").
                    Tensor::internal_log_softmax_backward_data(&g, out, -1, out.kind())
                        .to_kind(*input_kind)
                })]
            }
        }
    }
}

/// The backward of the ops differentiated by hand: [`Saved::vjp`], no torch autograd.
#[derive(Debug)]
struct DirectBackward;

impl<const N: usize> Backward<LibTorch, N> for DirectBackward {
    type State = Saved;

    fn backward(self, ops: Ops<Saved, N>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<LibTorch>(&ops.node);
        let wanted = |i: usize| ops.parents[i].is_some();
        // A linear layer's weight (input 1) may be one several layers share.
        let weight = match ops.state {
            Saved::Linear { .. } | Saved::LinearBf16 { .. } => ops.parents[1].as_ref(),
            _ => None,
        };
        let sum = weight.map_or(WeightSum::Alone, |w| weight_sum(w.id));
        let into = match &sum {
            WeightSum::Into(running) => Some(running),
            _ => None,
        };
        let results = tch::no_grad(|| ops.state.vjp(&grad.tensor, wanted, into));
        for (parent, result) in ops.parents.iter().zip(results) {
            if let (Some(parent), Some(result)) = (parent, result) {
                if matches!(sum, WeightSum::First(id) if id == parent.id) {
                    keep_first(parent.id, &result);
                }
                grads.register::<LibTorch>(parent.id, TchTensor::new(result));
            }
        }
    }
}

/// Runs `op` on `inputs` as one node of burn's graph whose backward is [`Saved::vjp`]: `op`
/// returns the output and what the backward needs (clones of the inputs it saves, or of the
/// output, so that burn sees them shared).
///
/// Why not [`tracked`] for these: its backward is a call into torch's autograd engine per op
/// (a graph task, and on CUDA a hand-off to the engine's device thread and back), for ops
/// whose backward is one to three kernels.
/// On a model as small as `tiny` the host sets a GPU step's pace, and that engine call was the
/// largest single share of the host's time (`perf` of a training step on `tch-cpu`: the
/// backward 59 % of the step, the engine's `thread_main` half of that; `docs/gpu.md`).
fn direct<C: CheckpointStrategy, const N: usize>(
    inputs: [FloatTensor<Autodiff<LibTorch, C>>; N],
    op: impl FnOnce(&[TchTensor; N]) -> (TchTensor, Saved),
) -> FloatTensor<Autodiff<LibTorch, C>> {
    let nodes = inputs.each_ref().map(|t| t.node());
    let primitives = inputs.map(|t| t.into_primitive());
    match DirectBackward
        .prepare::<C>(nodes)
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => {
            let (output, saved) = tch::no_grad(|| op(&primitives));
            prep.finish(saved, output)
        }
        OpsKind::UnTracked(prep) => prep.finish(tch::no_grad(|| op(&primitives)).0),
    }
}

/// Runs `forward` on `inputs` as one node of burn's graph: under torch's autograd when any
/// input is tracked (`constant[i]`: input `i` never gets a gradient), plainly otherwise.
fn tracked<C: CheckpointStrategy, const N: usize>(
    inputs: [FloatTensor<Autodiff<LibTorch, C>>; N],
    constant: [bool; N],
    forward: impl Fn(&[Tensor; N]) -> Tensor,
) -> FloatTensor<Autodiff<LibTorch, C>> {
    let nodes = inputs.each_ref().map(|t| t.node());
    let primitives = inputs.map(|t| t.into_primitive());
    match TorchBackward.prepare::<C>(nodes).compute_bound().stateful() {
        OpsKind::Tracked(prep) => {
            let leaves: [Tensor; N] = std::array::from_fn(|i| {
                let detached = primitives[i].tensor.detach();
                if constant[i] {
                    detached
                } else {
                    detached.set_requires_grad(true)
                }
            });
            let output = TchTensor::new(tch::with_grad(|| forward(&leaves)));
            let result = TchTensor::from_existing(output.tensor.detach(), output.storage.clone());
            let inputs = leaves
                .into_iter()
                .zip(primitives)
                .zip(constant)
                .map(|((leaf, p), c)| (TchTensor::from_existing(leaf, p.storage), !c))
                .collect();
            prep.finish(TorchGraph { inputs, output }, result)
        }
        OpsKind::UnTracked(prep) => {
            let plain: [Tensor; N] = std::array::from_fn(|i| primitives[i].tensor.shallow_clone());
            prep.finish(TchTensor::new(tch::no_grad(|| forward(&plain))))
        }
    }
}

impl<C: CheckpointStrategy> FusedOps for Autodiff<LibTorch, C> {
    fn fused_gelu_tanh(x: FloatTensor<Self>) -> FloatTensor<Self> {
        direct::<C, _>([x], |[x]| {
            let output = TchTensor::new(x.tensor.gelu("tanh"));
            (output, Saved::GeluTanh { x: x.clone() })
        })
    }

    fn fused_attention_softmax(
        scores: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        scale: f32,
    ) -> FloatTensor<Self> {
        tracked::<C, _>([scores, bias], [false, true], |[s, b]| {
            attention_softmax(s, b, scale)
        })
    }

    fn fused_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        heads: usize,
        scale: f32,
    ) -> FloatTensor<Self> {
        tracked::<C, _>(
            [q, k, v, bias],
            [false, false, false, true],
            |[q, k, v, b]| attention(q, k, v, b, heads, scale),
        )
    }

    fn fused_attention_packed(
        qkv: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        heads: usize,
        scale: f32,
    ) -> FloatTensor<Self> {
        tracked::<C, _>([qkv, bias], [false, true], |[qkv, b]| {
            packed_attention(qkv, b, heads, scale)
        })
    }

    fn fused_linear(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        b: FloatTensor<Self>,
        transposed: bool,
    ) -> FloatTensor<Self> {
        direct::<C, _>([x, w, b], |[x, w, b]| {
            let output = TchTensor::new(linear(&x.tensor, &w.tensor, &b.tensor, transposed));
            let (x, w) = (x.clone(), w.clone());
            (output, Saved::Linear { x, w, transposed })
        })
    }

    fn fused_linear_bf16(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        b: FloatTensor<Self>,
        transposed: bool,
        bf16_out: bool,
    ) -> FloatTensor<Self> {
        direct::<C, _>([x, w, b], |[x, w, b]| {
            let (xb, wb) = (to_bf16(x), to_bf16(w));
            let y = linear_bf16(&xb.tensor, &wb.tensor, &b.tensor, transposed, bf16_out);
            let x_kind = x.tensor.kind();
            let saved = Saved::LinearBf16 {
                xb,
                wb,
                transposed,
                x_kind,
            };
            (TchTensor::new(y), saved)
        })
    }

    fn fused_shared_operand(w: FloatTensor<Self>, bf16: bool) -> FloatTensor<Self> {
        super::torch_shared::operand::<C>(w, bf16)
    }

    fn fused_log_softmax(x: FloatTensor<Self>) -> FloatTensor<Self> {
        direct::<C, _>([x], |[x]| {
            let output = TchTensor::new(x.tensor.log_softmax(-1, Kind::Float));
            let input_kind = x.tensor.kind();
            (output.clone(), Saved::LogSoftmax { output, input_kind })
        })
    }

    fn fused_layer_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        eps: f32,
    ) -> FloatTensor<Self> {
        // LayerNorm stays on torch's autograd: `tch` 0.22 does not wrap
        // `native_layer_norm_backward` (its `bool[3]` argument), and the same backward in a
        // dozen of torch's ops took more host time than the engine call it saved (2 cores,
        // 2026-11-29, three alternating rounds of the host-overhead proxy in docs/gpu.md:
        // 5.3–5.6 ms a step against 4.4–5.4 ms).
        tracked::<C, _>([x, gamma, beta], [false; 3], |[x, g, b]| {
            layer_norm(x, g, b, eps)
        })
    }

    fn fused_lamb(
        w: FloatTensor<Self>,
        g: FloatTensor<Self>,
        m: FloatTensor<Self>,
        v: FloatTensor<Self>,
        hyper: [f32; 6],
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        let [w, g, m, v] = [w, g, m, v].map(|t| t.into_primitive());
        super::lamb::constants::<LibTorch, C>(LibTorch::fused_lamb(w, g, m, v, hyper))
    }

    fn fused_lamb_flat(
        w: FloatTensor<Self>,
        g: FloatTensor<Self>,
        m: FloatTensor<Self>,
        v: FloatTensor<Self>,
        segments: IntTensor<Self>,
        per_param: FloatTensor<Self>,
        step: FlatLambStep,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        let [w, g, m, v, p] = [w, g, m, v, per_param].map(|t| t.into_primitive());
        super::lamb::constants::<LibTorch, C>(LibTorch::fused_lamb_flat(
            w, g, m, v, segments, p, step,
        ))
    }

    fn fused_upload_int(x: IntTensor<Self>, cuda: Option<usize>) -> IntTensor<Self> {
        upload(x, cuda)
    }

    fn fused_upload_float(x: FloatTensor<Self>, cuda: Option<usize>) -> FloatTensor<Self> {
        super::lamb::constant::<LibTorch, C>(upload(x.into_primitive(), cuda))
    }
}

#[cfg(test)]
#[path = "torch_tests.rs"]
mod tests;
