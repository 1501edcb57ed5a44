//! The fused ops' entry points on burn's tensors: whether a tensor is one the ops take, and a
//! call of each [`FusedOps`] op through burn's dispatch backend.

use burn::backend::Dispatch;
use burn::tensor::{DType, Device, Int, Tensor};

use super::FusedOps;
use crate::fused::lamb::FlatLambStep;

/// Whether `t` is non-empty float32 on flex or libtorch (under autodiff or not): the fused
/// ops apply. Not empty: the kernels walk rows of the last dimension, which must then be at
/// least one wide. (A `tch` build has only these two backends, so not flex is libtorch.)
pub(in crate::fused) fn applies<const D: usize>(t: &Tensor<D>) -> bool {
    let backend = cfg!(feature = "tch") || t.device().without_autodiff() == Device::flex();
    D > 0 && t.dims().iter().all(|&n| n > 0) && t.dtype() == DType::F32 && backend
}

/// Whether `t` is a float32 or bf16 tensor with no empty dimension on libtorch: what the
/// fused ops take there under bf16 mixed precision, whose products' results stay bf16 until
/// they meet float32 again (`crate::model::precision`).
pub(in crate::fused) fn on_libtorch<const D: usize>(t: &Tensor<D>) -> bool {
    let libtorch = cfg!(feature = "tch") && t.device().without_autodiff() != Device::flex();
    let dtype = matches!(t.dtype(), DType::F32 | DType::BF16);
    D > 0 && t.dims().iter().all(|&n| n > 0) && dtype && libtorch
}

/// [`FusedOps::fused_gelu_tanh`] on a tensor [`applies`] (or, on libtorch, [`on_libtorch`])
/// accepts.
pub(in crate::fused) fn gelu_tanh<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    Tensor::from_dispatch(<Dispatch as FusedOps>::fused_gelu_tanh(x.into_dispatch()))
}

/// [`FusedOps::fused_attention_softmax`] on tensors [`applies`] accepts.
pub(in crate::fused) fn attention_softmax(
    scores: Tensor<4>,
    bias: Tensor<4>,
    scale: f32,
) -> Tensor<4> {
    Tensor::from_dispatch(<Dispatch as FusedOps>::fused_attention_softmax(
        scores.into_dispatch(),
        bias.into_dispatch(),
        scale,
    ))
}

/// [`FusedOps::fused_attention`] on tensors [`applies`] accepts.
pub(in crate::fused) fn attention(
    [q, k, v]: [Tensor<3>; 3],
    bias: Tensor<4>,
    heads: usize,
    scale: f32,
) -> Tensor<3> {
    Tensor::from_dispatch(<Dispatch as FusedOps>::fused_attention(
        q.into_dispatch(),
        k.into_dispatch(),
        v.into_dispatch(),
        bias.into_dispatch(),
        heads,
        scale,
    ))
}

/// [`FusedOps::fused_attention_packed`] on libtorch tensors of one dtype.
pub(in crate::fused) fn attention_packed(
    qkv: Tensor<3>,
    bias: Tensor<4>,
    heads: usize,
    scale: f32,
) -> Tensor<3> {
    Tensor::from_dispatch(<Dispatch as FusedOps>::fused_attention_packed(
        qkv.into_dispatch(),
        bias.into_dispatch(),
        heads,
        scale,
    ))
}

/// [`FusedOps::fused_linear`] on tensors [`applies`] accepts.
pub(in crate::fused) fn linear(
    x: Tensor<2>,
    w: Tensor<2>,
    b: Tensor<1>,
    transposed: bool,
) -> Tensor<2> {
    Tensor::from_dispatch(<Dispatch as FusedOps>::fused_linear(
        x.into_dispatch(),
        w.into_dispatch(),
        b.into_dispatch(),
        transposed,
    ))
}

/// [`FusedOps::fused_linear_bf16`] on libtorch tensors (`x` float32 or bf16, `w` and `b`
/// float32).
pub(in crate::fused) fn linear_bf16(
    [x, w]: [Tensor<2>; 2],
    b: Tensor<1>,
    transposed: bool,
    bf16_out: bool,
) -> Tensor<2> {
    Tensor::from_dispatch(<Dispatch as FusedOps>::fused_linear_bf16(
        x.into_dispatch(),
        w.into_dispatch(),
        b.into_dispatch(),
        transposed,
        bf16_out,
    ))
}

/// [`FusedOps::fused_shared_operand`] of a float32 weight on libtorch or flex.
pub(in crate::fused) fn shared_operand(w: Tensor<2>, bf16: bool) -> Tensor<2> {
    Tensor::from_dispatch(<Dispatch as FusedOps>::fused_shared_operand(
        w.into_dispatch(),
        bf16,
    ))
}

/// [`FusedOps::fused_log_softmax`] on a tensor [`applies`] (or, on libtorch, [`on_libtorch`])
/// accepts.
pub(in crate::fused) fn log_softmax<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    Tensor::from_dispatch(<Dispatch as FusedOps>::fused_log_softmax(x.into_dispatch()))
}

/// [`FusedOps::fused_lamb`] on tensors [`applies`] accepts: the new weight and moments.
pub(in crate::fused) fn lamb<const D: usize>(
    [w, g, m, v]: [Tensor<D>; 4],
    hyper: [f32; 6],
) -> [Tensor<D>; 3] {
    let (w, m, v) = <Dispatch as FusedOps>::fused_lamb(
        w.into_dispatch(),
        g.into_dispatch(),
        m.into_dispatch(),
        v.into_dispatch(),
        hyper,
    );
    [w, m, v].map(Tensor::from_dispatch)
}

/// The new weights and moments of many parameters laid end to end in `w` (gradient `g`,
/// moments `m`, `v`, zeros at the first step), as one op: what [`lamb_step`](super::lamb_step)
/// computes for each parameter, with each element's parameter in `segments` (`[elements]`,
/// read on libtorch; flex takes an empty one), each parameter's length in `host_lengths` and its
/// weight decay and trust-ratio switch (1 or 0) in the rows of `per_param` `[2, parameters]`;
/// `step`'s own
/// `weight_decay` and `layer_adaptation` are not used. The caller checks
/// [`lamb_applies`](super::lamb_applies) on `w` and `g` first.
pub fn lamb_flat_step(
    [w, g]: [Tensor<1>; 2],
    (m, v): (Tensor<1>, Tensor<1>),
    segments: &Tensor<1, Int>,
    host_lengths: Vec<i64>,
    per_param: &Tensor<2>,
    step: &crate::fused::LambStep,
) -> [Tensor<1>; 3] {
    let (w, m, v) = <Dispatch as FusedOps>::fused_lamb_flat(
        w.into_dispatch(),
        g.into_dispatch(),
        m.into_dispatch(),
        v.into_dispatch(),
        segments.clone().into_dispatch(),
        per_param.clone().into_dispatch(),
        FlatLambStep {
            hyper: step.packed(),
            lengths: host_lengths,
        },
    );
    [w, m, v].map(Tensor::from_dispatch)
}

/// [`FusedOps::fused_layer_norm`] on tensors [`applies`] accepts.
pub(in crate::fused) fn layer_norm<const D: usize>(
    x: Tensor<D>,
    gamma: Tensor<1>,
    beta: Tensor<1>,
    epsilon: f32,
) -> Tensor<D> {
    Tensor::from_dispatch(<Dispatch as FusedOps>::fused_layer_norm(
        x.into_dispatch(),
        gamma.into_dispatch(),
        beta.into_dispatch(),
        epsilon,
    ))
}
