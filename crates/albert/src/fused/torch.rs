//! The fused ops on libtorch (`tch` builds): each is torch's own fused kernel forward —
//! scaled-dot-product attention, `layer_norm`, the tanh `gelu`, `log_softmax`, `addmm` — and
//! torch's own autograd for that one op backward.
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
//! The backward: the forward runs under torch's autograd on detached copies of the inputs that
//! require a gradient (`tch::with_grad`), and the op's node keeps that small torch graph; the
//! backward asks torch for the gradient of `Σ output·g` with respect to those inputs, which is
//! exactly the vector-Jacobian product with `g`, through torch's native backward kernels
//! (`tch` 0.22 wraps `run_backward` but neither `native_layer_norm_backward` nor the SDPA
//! variants' backward, and the latter differ by kernel). The price is an elementwise product
//! and a sum per op backward.

// burn marks its libtorch backend deprecated; it is the one that builds offline (device.rs).
#![allow(deprecated)]

use burn::backend::autodiff::checkpoint::{base::Checkpointer, strategy::CheckpointStrategy};
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::libtorch::TchTensor;
use burn::backend::tensor::FloatTensor;
use burn::backend::{Autodiff, LibTorch};
use tch::{Kind, Tensor};

use super::tracked::FusedOps;

/// `[batch, seq, H]` as `[batch, heads, seq, d]` (a view).
fn split_heads(t: &Tensor, heads: i64) -> Tensor {
    let (b, s, h) = t.size3().expect("attention inputs are [batch, seq, H]");
    t.view([b, s, heads, h / heads]).transpose(1, 2)
}

/// The head width torch's fused GPU attention kernels take: a multiple of 8. `tiny`'s 26
/// (312 / 12) is not, and SDPA then falls back to its materialised math path on CUDA; zero
/// columns added to Q, K and V change no score (the scale stays 1/√26) and only add zero
/// columns to the context, which are cut off.
fn padded_head_width(d: i64, device: tch::Device) -> i64 {
    if device.is_cuda() && d % 8 != 0 {
        (d + 7) / 8 * 8
    } else {
        d
    }
}

/// `softmax(Q·Kᵀ·scale + bias)·V` of `heads` heads side by side in `[batch, seq, H]`, by
/// torch's scaled-dot-product attention; `bias` `[batch, 1, 1, seq]` is the additive mask.
fn attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    bias: &Tensor,
    heads: usize,
    scale: f32,
) -> Tensor {
    let (_, _, h) = q.size3().expect("attention inputs are [batch, seq, H]");
    let width = padded_head_width(h / heads as i64, q.device());
    attention_at_width([q, k, v], bias, heads, scale, width)
}

/// [`attention`] with each head's Q, K and V padded with zero columns to `dp` wide.
fn attention_at_width(
    [q, k, v]: [&Tensor; 3],
    bias: &Tensor,
    heads: usize,
    scale: f32,
    dp: i64,
) -> Tensor {
    let (b, s, h) = q.size3().expect("attention inputs are [batch, seq, H]");
    let heads = heads as i64;
    let d = h / heads;
    let split = |t: &Tensor| {
        let t = split_heads(t, heads);
        if dp == d {
            t
        } else {
            t.constant_pad_nd([0, dp - d])
        }
    };
    let mask = bias.to_kind(q.kind());
    let ctx = Tensor::scaled_dot_product_attention(
        &split(q),
        &split(k),
        &split(v),
        Some(&mask),
        0.0,
        false,
        f64::from(scale),
        false,
    );
    let ctx = if dp == d { ctx } else { ctx.narrow(3, 0, d) };
    ctx.transpose(1, 2).reshape([b, s, h])
}

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

    fn fused_linear(x: TchTensor, w: TchTensor, b: TchTensor, transposed: bool) -> TchTensor {
        TchTensor::new(linear(&x.tensor, &w.tensor, &b.tensor, transposed))
    }

    fn fused_log_softmax(x: TchTensor) -> TchTensor {
        TchTensor::new(x.tensor.log_softmax(-1, x.tensor.kind()))
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
        // Σ output·g: its gradient with respect to each input is the op's vector-Jacobian
        // product with g. Summed in float32 whatever the dtype (bf16 would round the sum).
        let objective = (&output.tensor * &grad.tensor).sum(Kind::Float);
        let leaves: Vec<&Tensor> = wanted.iter().map(|(_, t)| *t).collect();
        let results = tch::with_grad(|| Tensor::run_backward(&[objective], &leaves, false, false));
        for ((i, _), result) in wanted.into_iter().zip(results) {
            if let Some(parent) = &ops.parents[i] {
                grads.register::<LibTorch>(parent.id, TchTensor::new(result));
            }
        }
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
        tracked::<C, _>([x], [false], |[x]| x.gelu("tanh"))
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

    fn fused_linear(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        b: FloatTensor<Self>,
        transposed: bool,
    ) -> FloatTensor<Self> {
        tracked::<C, _>([x, w, b], [false; 3], |[x, w, b]| {
            linear(x, w, b, transposed)
        })
    }

    fn fused_log_softmax(x: FloatTensor<Self>) -> FloatTensor<Self> {
        tracked::<C, _>([x], [false], |[x]| x.log_softmax(-1, x.kind()))
    }

    fn fused_layer_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        eps: f32,
    ) -> FloatTensor<Self> {
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
        let (w, m, v) = LibTorch::fused_lamb(w, g, m, v, hyper);
        let constant = super::lamb::constant::<LibTorch, C>;
        (constant(w), constant(m), constant(v))
    }
}

#[cfg(test)]
#[path = "torch_tests.rs"]
mod tests;
