//! The fused ops under autodiff: tanh-GELU, the attention softmax (scale and padding bias folded
//! in, or the whole attention core), the losses' log-softmax, LayerNorm and the dense layers as
//! burn backend-extension ops on flex, each with a hand-written backward.
//!
//! Why: burn's autodiff records a composed expression one op at a time, so a training step runs
//! each of these as several passes forward and several more backward, with a scalar libm `expf`
//! (a third of a CPU training step at AVX2, `results/bench/cpu_avx2.md`). Here each is one op in
//! the graph: one pass forward, one backward ([`super::kernels`]). On libtorch (`tch` builds)
//! the same ops are torch's fused kernels with torch's backward (`super::torch`). Float32 only,
//! except on libtorch under bf16 mixed precision, where the attention core, the linear layers
//! and the tanh-GELU take the bf16 activations that run between two products ([`on_libtorch`]).

use burn::backend::TensorMetadata;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::ops::{Backward, OpsKind};
use burn::backend::flex::FlexTensor;
use burn::backend::tensor::{FloatTensor, IntTensor};
use burn::backend::{Autodiff, Backend, Flex, backend_extension};

use super::flex_values::{contiguous, owned, tensor, values};
use super::lamb::FlatLambStep;
use super::{attention, dense, kernels};
use backward::{
    AttentionBackward, GeluBackward, LayerNormBackward, LinearBackward, LogSoftmaxBackward,
    SoftmaxBackward,
};

/// The fused training ops, implemented for flex and libtorch (`super::torch`) and for autodiff
/// over each (nothing else: the callers check the device first, and an unlisted backend would
/// panic).
#[backend_extension(Flex, LibTorch: cfg(feature = "tch"), Autodiff)]
pub trait FusedOps: Backend {
    /// tanh-GELU (see [`super::gelu_tanh`]).
    fn fused_gelu_tanh(x: FloatTensor<Self>) -> FloatTensor<Self>;
    /// `softmax(scores·scale + bias)` over the last dimension; `bias` `[batch, 1, 1, k]`, a
    /// constant (no gradient flows to it).
    fn fused_attention_softmax(
        scores: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        scale: f32,
    ) -> FloatTensor<Self>;
    /// `softmax(Q·Kᵀ·scale + bias)·V` per head: `q`, `k`, `v` `[batch, seq, H]` (`heads`
    /// heads side by side), `bias` `[batch, 1, 1, seq]` a constant; the context `[batch, seq, H]`.
    fn fused_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        heads: usize,
        scale: f32,
    ) -> FloatTensor<Self>;
    /// [`Self::fused_attention`] of Q, K and V packed side by side in `qkv` `[batch, seq,
    /// 3H]`, the context `[batch, seq, H]` in `qkv`'s dtype. libtorch only (flex's impls
    /// panic: `super::attention_packed` checks the device).
    fn fused_attention_packed(
        qkv: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        heads: usize,
        scale: f32,
    ) -> FloatTensor<Self>;
    /// `x·W + b` for `x` `[n, d_in]`, `W` `[d_in, d_out]` (`[d_out, d_in]` when
    /// `transposed`), `b` `[d_out]`.
    fn fused_linear(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        b: FloatTensor<Self>,
        transposed: bool,
    ) -> FloatTensor<Self>;
    /// [`Self::fused_linear`] in bf16 mixed precision (`crate::model::precision`): `x`
    /// (float32 or bf16) and the float32 `W` multiplied in bf16. With `bf16_out` the result is
    /// bf16, the bias added in bf16 inside the product (autocast's `addmm`); without, it is
    /// cast back to float32 before the float32 `b` is added. The input's gradient comes back
    /// in the input's dtype, the weight's and the bias's in float32. libtorch only: flex has
    /// no bf16 products (`precision: bf16` is refused there) and its impls panic.
    fn fused_linear_bf16(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        b: FloatTensor<Self>,
        transposed: bool,
        bf16_out: bool,
    ) -> FloatTensor<Self>;
    /// A weight `w` that several linear layers share, as they take it in one pass (see
    /// [`super::shared_weight`]): cast to bf16 when `bf16`, as it is otherwise. Under autodiff
    /// on libtorch one node of the graph, whose layers' weight gradients the products sum in
    /// place (`super::torch_shared`); on flex `w` itself (flex has no bf16).
    fn fused_shared_operand(w: FloatTensor<Self>, bf16: bool) -> FloatTensor<Self>;
    /// `log_softmax` over the last dimension, in float32 (on libtorch a bf16 input is read up
    /// to float32 inside the kernel, and its gradient goes back in bf16).
    fn fused_log_softmax(x: FloatTensor<Self>) -> FloatTensor<Self>;
    /// LayerNorm over the last dimension, `(x − mean)/√(var + ε)·γ + β`.
    fn fused_layer_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f32,
    ) -> FloatTensor<Self>;
    /// One LAMB step of a parameter (`super::lamb`): the new weight and moments from the weight
    /// `w`, its gradient `g` and the moments `m`, `v`; `hyper` as `LambStep::packed` gives it.
    /// Not differentiable (an optimiser's step).
    fn fused_lamb(
        w: FloatTensor<Self>,
        g: FloatTensor<Self>,
        m: FloatTensor<Self>,
        v: FloatTensor<Self>,
        hyper: [f32; 6],
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>);
    /// [`Self::fused_lamb`] of many parameters laid end to end in `w`, `g`, `m`, `v`: each
    /// element's parameter in `segments` (int, `[elements]`; libtorch reads it, flex does not),
    /// and one value a parameter in each row of `per_param` `[2, parameters]`, its weight decay
    /// and its trust-ratio switch (1 or 0), and in `step`'s lengths (`super::lamb_flat_step`).
    fn fused_lamb_flat(
        w: FloatTensor<Self>,
        g: FloatTensor<Self>,
        m: FloatTensor<Self>,
        v: FloatTensor<Self>,
        segments: IntTensor<Self>,
        per_param: FloatTensor<Self>,
        step: FlatLambStep,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>);
    /// `x`, on libtorch's CPU, as it is (`cuda` `None`) or on CUDA device `cuda`, copied from
    /// pinned memory without waiting for the device (`crate::upload`); on flex as it is.
    fn fused_upload_int(x: IntTensor<Self>, cuda: Option<usize>) -> IntTensor<Self>;
    /// [`Self::fused_upload_int`] of a float tensor (outside the graph).
    fn fused_upload_float(x: FloatTensor<Self>, cuda: Option<usize>) -> FloatTensor<Self>;
}

/// `gelu(x)`, in place when `x` is not shared.
fn gelu_forward(x: FlexTensor) -> FlexTensor {
    if x.is_unique() {
        let mut y = owned(x);
        super::gelu_at(super::CpuLevel::active(), y.storage_mut::<f32>());
        return y;
    }
    let x = contiguous(x);
    let mut y = vec![0.0; x.layout().num_elements()];
    kernels::gelu_into(values(&x), &mut y);
    tensor(y, x.shape())
}

/// `softmax(scores·scale + bias)` in place in the scores.
fn softmax_forward(scores: FlexTensor, bias: FlexTensor, scale: f32) -> FlexTensor {
    let shape = scores.shape();
    let (k, rows_per_batch) = (shape[3], shape[1] * shape[2]);
    let bias = contiguous(bias);
    let mut p = owned(scores);
    super::softmax_at(
        super::CpuLevel::active(),
        p.storage_mut::<f32>(),
        k,
        scale,
        values(&bias),
        rows_per_batch,
    );
    p
}

/// `log_softmax(x)` over the last dimension, in place when `x` is not shared.
fn log_softmax_forward(x: FlexTensor) -> FlexTensor {
    let row = x.shape()[x.shape().num_dims() - 1];
    let mut y = owned(x);
    if row > 0 {
        kernels::log_softmax(y.storage_mut::<f32>(), row);
    }
    y
}

/// What LayerNorm's forward leaves for its backward: `x̂` and each row's `1/√(var + ε)`.
#[derive(Debug, Clone)]
struct NormState {
    xhat: FlexTensor,
    rstd: Vec<f32>,
    gamma: FlexTensor,
}

/// LayerNorm's output and what its backward needs.
fn layer_norm_forward(
    x: FlexTensor,
    gamma: FlexTensor,
    beta: FlexTensor,
    eps: f32,
) -> (FlexTensor, NormState) {
    let (gamma, beta) = (contiguous(gamma), contiguous(beta));
    let d = gamma.layout().num_elements();
    let mut xhat = owned(x);
    let n = xhat.layout().num_elements();
    let (mut y, mut rstd) = (vec![0.0; n], vec![0.0; n / d.max(1)]);
    kernels::layer_norm(
        xhat.storage_mut::<f32>(),
        &mut y,
        &mut rstd,
        values(&gamma),
        values(&beta),
        eps,
    );
    let y = tensor(y, xhat.shape());
    (y, NormState { xhat, rstd, gamma })
}

impl FusedOps for Flex {
    fn fused_gelu_tanh(x: FlexTensor) -> FlexTensor {
        gelu_forward(x)
    }

    fn fused_attention_softmax(scores: FlexTensor, bias: FlexTensor, scale: f32) -> FlexTensor {
        softmax_forward(scores, bias, scale)
    }

    fn fused_attention(
        q: FlexTensor,
        k: FlexTensor,
        v: FlexTensor,
        bias: FlexTensor,
        heads: usize,
        scale: f32,
    ) -> FlexTensor {
        attention::forward_context([&q, &k, &v, &bias], heads, scale, super::CpuLevel::active())
    }

    fn fused_attention_packed(_: FlexTensor, _: FlexTensor, _: usize, _: f32) -> FlexTensor {
        unreachable!("packed attention runs on libtorch only (fused::attention_packed checks)")
    }

    fn fused_linear(x: FlexTensor, w: FlexTensor, b: FlexTensor, transposed: bool) -> FlexTensor {
        dense::forward(&x, &w, &b, transposed)
    }

    fn fused_linear_bf16(
        _: FlexTensor,
        _: FlexTensor,
        _: FlexTensor,
        _: bool,
        _: bool,
    ) -> FlexTensor {
        unreachable!("bf16 products run on libtorch only (fused::linear_bf16 checks the device)")
    }

    fn fused_shared_operand(w: FlexTensor, _: bool) -> FlexTensor {
        w
    }

    fn fused_log_softmax(x: FlexTensor) -> FlexTensor {
        log_softmax_forward(x)
    }

    fn fused_layer_norm(
        x: FlexTensor,
        gamma: FlexTensor,
        beta: FlexTensor,
        eps: f32,
    ) -> FlexTensor {
        layer_norm_forward(x, gamma, beta, eps).0
    }

    fn fused_lamb(
        w: FlexTensor,
        g: FlexTensor,
        m: FlexTensor,
        v: FlexTensor,
        hyper: [f32; 6],
    ) -> (FlexTensor, FlexTensor, FlexTensor) {
        super::lamb::step_flex([w, g, m, v], hyper)
    }

    fn fused_lamb_flat(
        w: FlexTensor,
        g: FlexTensor,
        m: FlexTensor,
        v: FlexTensor,
        _segments: FlexTensor,
        per_param: FlexTensor,
        step: FlatLambStep,
    ) -> (FlexTensor, FlexTensor, FlexTensor) {
        super::lamb::step_flex_flat([w, g, m, v], per_param, &step)
    }

    fn fused_upload_int(x: FlexTensor, _: Option<usize>) -> FlexTensor {
        x
    }

    fn fused_upload_float(x: FlexTensor, _: Option<usize>) -> FlexTensor {
        x
    }
}

impl<C: CheckpointStrategy> FusedOps for Autodiff<Flex, C> {
    fn fused_gelu_tanh(x: FloatTensor<Self>) -> FloatTensor<Self> {
        match GeluBackward
            .prepare::<C>([x.node()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let input = x.into_primitive();
                let y = gelu_forward(input.clone());
                prep.finish(input, y)
            }
            OpsKind::UnTracked(prep) => prep.finish(gelu_forward(x.into_primitive())),
        }
    }

    fn fused_attention_softmax(
        scores: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        scale: f32,
    ) -> FloatTensor<Self> {
        let bias = bias.into_primitive();
        match SoftmaxBackward
            .prepare::<C>([scores.node()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let p = softmax_forward(scores.into_primitive(), bias, scale);
                prep.finish((p.clone(), scale), p)
            }
            OpsKind::UnTracked(prep) => {
                prep.finish(softmax_forward(scores.into_primitive(), bias, scale))
            }
        }
    }

    fn fused_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        heads: usize,
        scale: f32,
    ) -> FloatTensor<Self> {
        let nodes = [q.node(), k.node(), v.node()];
        let [q, k, v, bias] = [q, k, v, bias].map(|t| t.into_primitive());
        match AttentionBackward
            .prepare::<C>(nodes)
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let (ctx, p) = attention::forward(&q, &k, &v, &bias, heads, scale);
                prep.finish(([q, k, v, p], heads, scale), ctx)
            }
            OpsKind::UnTracked(prep) => {
                let level = super::CpuLevel::active();
                prep.finish(attention::forward_context(
                    [&q, &k, &v, &bias],
                    heads,
                    scale,
                    level,
                ))
            }
        }
    }

    fn fused_attention_packed(
        _: FloatTensor<Self>,
        _: FloatTensor<Self>,
        _: usize,
        _: f32,
    ) -> FloatTensor<Self> {
        unreachable!("packed attention runs on libtorch only (fused::attention_packed checks)")
    }

    fn fused_linear(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        b: FloatTensor<Self>,
        transposed: bool,
    ) -> FloatTensor<Self> {
        let nodes = [x.node(), w.node(), b.node()];
        let (x, w, b) = (x.into_primitive(), w.into_primitive(), b.into_primitive());
        let y = dense::forward(&x, &w, &b, transposed);
        match LinearBackward
            .prepare::<C>(nodes)
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish((x, w, transposed), y),
            OpsKind::UnTracked(prep) => prep.finish(y),
        }
    }

    fn fused_linear_bf16(
        _: FloatTensor<Self>,
        _: FloatTensor<Self>,
        _: FloatTensor<Self>,
        _: bool,
        _: bool,
    ) -> FloatTensor<Self> {
        unreachable!("bf16 products run on libtorch only (fused::linear_bf16 checks the device)")
    }

    fn fused_shared_operand(w: FloatTensor<Self>, _: bool) -> FloatTensor<Self> {
        w
    }

    fn fused_log_softmax(x: FloatTensor<Self>) -> FloatTensor<Self> {
        match LogSoftmaxBackward
            .prepare::<C>([x.node()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let y = log_softmax_forward(x.into_primitive());
                prep.finish(y.clone(), y)
            }
            OpsKind::UnTracked(prep) => prep.finish(log_softmax_forward(x.into_primitive())),
        }
    }

    fn fused_layer_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        eps: f32,
    ) -> FloatTensor<Self> {
        let nodes = [x.node(), gamma.node(), beta.node()];
        let (x, gamma, beta) = (
            x.into_primitive(),
            gamma.into_primitive(),
            beta.into_primitive(),
        );
        match LayerNormBackward
            .prepare::<C>(nodes)
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let (y, state) = layer_norm_forward(x, gamma, beta, eps);
                prep.finish(state, y)
            }
            OpsKind::UnTracked(prep) => prep.finish(layer_norm_forward(x, gamma, beta, eps).0),
        }
    }

    fn fused_lamb(
        w: FloatTensor<Self>,
        g: FloatTensor<Self>,
        m: FloatTensor<Self>,
        v: FloatTensor<Self>,
        hyper: [f32; 6],
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        let [w, g, m, v] = [w, g, m, v].map(|t| t.into_primitive());
        super::lamb::constants::<Flex, C>(super::lamb::step_flex([w, g, m, v], hyper))
    }

    fn fused_lamb_flat(
        w: FloatTensor<Self>,
        g: FloatTensor<Self>,
        m: FloatTensor<Self>,
        v: FloatTensor<Self>,
        _segments: IntTensor<Self>,
        per_param: FloatTensor<Self>,
        step: FlatLambStep,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        let [w, g, m, v, p] = [w, g, m, v, per_param].map(|t| t.into_primitive());
        super::lamb::constants::<Flex, C>(super::lamb::step_flex_flat([w, g, m, v], p, &step))
    }

    fn fused_upload_int(x: IntTensor<Self>, _: Option<usize>) -> IntTensor<Self> {
        x
    }

    fn fused_upload_float(x: FloatTensor<Self>, _: Option<usize>) -> FloatTensor<Self> {
        super::lamb::constant::<Flex, C>(x.into_primitive())
    }
}

#[path = "flex_backward.rs"]
mod backward;
#[path = "tracked_calls.rs"]
mod calls;
pub use calls::lamb_flat_step;
pub(in crate::fused) use calls::*;

#[cfg(test)]
#[path = "tracked_tests.rs"]
mod tests;
