//! The model's operations that have a fused path on flex ([`crate::fused`]): the activations
//! (tanh-GELU; the exact GELU untracked), LayerNorm (fused with its backward under autodiff)
//! and the dense layers (one gemm each way, the bias folded in); burn's ops on other backends.

use burn::module::{Param, ParamId};
use burn::nn::{LayerNorm, Linear};
use burn::tensor::activation::{gelu, relu, sigmoid};
use burn::tensor::{FloatDType, Tensor};

use super::MatmulPrecision;
use crate::config::Activation;

pub(super) fn activate<const D: usize>(x: Tensor<D>, act: Activation) -> Tensor<D> {
    match act {
        Activation::Gelu => crate::fused::gelu_erf(x).unwrap_or_else(|x| gelu(*x)),
        Activation::GeluNew => gelu_tanh(x),
        Activation::Relu => relu(x),
    }
}

/// The tanh approximation of GELU, `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`, computed as
/// the identical `x·σ(2·√(2/π)·(x + 0.044715·x³))`: burn's `gelu_approximate` spends a quarter
/// of a CPU training step in scalar `powf` and `tanhf`. On flex one fused pass (forward, and
/// backward under autodiff), on libtorch torch's `gelu` kernel; elsewhere burn's ops, with
/// `sigmoid` one op each way.
pub fn gelu_tanh<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    crate::fused::gelu_tanh(x)
        .or_else(|x| crate::fused::gelu_tanh_op(*x))
        .unwrap_or_else(|x| gelu_tanh_composed(*x))
}

/// [`gelu_tanh`] from burn's ops (what other backends run; the fused ops' reference).
pub fn gelu_tanh_composed<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    const C1: f64 = 1.595_769_121_605_730_7; // 2·√(2/π)
    const C3: f64 = C1 * 0.044715;
    let inner = (x.clone() * x.clone()).mul_scalar(C3).add_scalar(C1) * x.clone();
    x * sigmoid(inner)
}

/// `ln(x)` with its configured `epsilon` (burn's `LayerNorm` does not expose it): one op with
/// a fused backward when training on flex ([`crate::fused::layer_norm`]).
pub(super) fn norm<const D: usize>(ln: &LayerNorm, x: Tensor<D>, epsilon: f64) -> Tensor<D> {
    crate::fused::layer_norm(ln, x, epsilon)
}

/// `l` applied to `[n, d]` rows in `precision`, the result in float32: the fused dense op
/// (float32 on flex and libtorch, bf16 on libtorch; training and inference), burn's `Linear`
/// (or the bf16 casts) otherwise.
pub(super) fn linear_rows(precision: MatmulPrecision, l: &Linear, x: Tensor<2>) -> Tensor<2> {
    linear_rows_to(precision, l, x, FloatDType::F32)
}

/// [`linear_rows`] with the result in `out` where the fused bf16 op runs (`out` is bf16 only
/// for a result that feeds another product; see [`MatmulPrecision::between_products`]).
pub(super) fn linear_rows_to(
    precision: MatmulPrecision,
    l: &Linear,
    x: Tensor<2>,
    out: FloatDType,
) -> Tensor<2> {
    if let Some(b) = &l.bias
        && let Some(y) = fused_linear(precision, &x, &l.weight.val(), &b.val(), (false, out))
    {
        return y;
    }
    precision.linear(l, x)
}

/// `l` as one forward pass of the layers sharing it uses it: its weight made once for the pass
/// ([`crate::fused::shared_weight`]: under bf16 cast once, and the layers' weight gradients
/// summed in place by their products), the bias as it is. A fresh parameter id: the copy lives
/// for the pass and is never optimised (its gradients reach the layer's own weight).
pub(super) fn share_in_pass(l: &mut Linear, precision: MatmulPrecision) {
    let bf16 = precision == MatmulPrecision::Bf16;
    let w = crate::fused::shared_weight(l.weight.val(), bf16);
    l.weight = Param::initialized(ParamId::new(), w);
}

/// The Q, K and V layers' weights `[H, 3H]` and biases `[3H]` side by side, for
/// [`packed_projection`]; `None` where a layer has no bias.
pub(super) fn pack_qkv([q, k, v]: [&Linear; 3]) -> Option<(Tensor<2>, Tensor<1>)> {
    let biases = [q, k, v].map(|l| l.bias.as_ref().map(|b| b.val()));
    let [Some(bq), Some(bk), Some(bv)] = biases else {
        return None;
    };
    let w = Tensor::cat(vec![q.weight.val(), k.weight.val(), v.weight.val()], 1);
    Some((w, Tensor::cat(vec![bq, bk, bv], 0)))
}

/// Q, K and V of `x` `[batch, seq, H]` packed side by side, `[batch, seq, 3H]`: one product
/// with the three layers' weights and biases concatenated ([`pack_qkv`]: a few small copies a
/// step, where the three products they replace each read `x`), its result in `out` under bf16.
/// `None` where the fused dense op does not apply.
pub(super) fn packed_projection(
    precision: MatmulPrecision,
    (w, b): &(Tensor<2>, Tensor<1>),
    x: &Tensor<3>,
    out: FloatDType,
) -> Option<Tensor<3>> {
    let [n, s, h] = x.dims();
    let rows = x.clone().reshape([n * s, h]);
    let y = fused_linear(precision, &rows, w, b, (false, out))?;
    let [_, o] = y.dims();
    Some(y.reshape([n, s, o]))
}

/// The fused dense op in `precision` where it applies (float32 on flex and libtorch, bf16 on
/// libtorch, its result in `out`).
fn fused_linear(
    precision: MatmulPrecision,
    x: &Tensor<2>,
    w: &Tensor<2>,
    b: &Tensor<1>,
    (transposed, out): (bool, FloatDType),
) -> Option<Tensor<2>> {
    match precision {
        MatmulPrecision::Fp32 => crate::fused::linear(x, w, b, transposed),
        MatmulPrecision::Bf16 => crate::fused::linear_bf16(x, w, b, transposed, out),
    }
}

/// The MLM decoder, `x·Eᵀ + bias` with the tied word embeddings `E` `[V, E]`, in `precision`.
pub(super) fn decode(
    precision: MatmulPrecision,
    x: Tensor<2>,
    embeddings: Tensor<2>,
    bias: Tensor<1>,
) -> Tensor<2> {
    // The logits only feed the loss's log-softmax, which reads bf16 and works in float32 (as
    // autocast leaves them): `[masked positions, V]`, the largest result of a step of `tiny`.
    let out = precision.between_products();
    if let Some(y) = fused_linear(precision, &x, &embeddings, &bias, (true, out)) {
        return y;
    }
    let [v] = bias.dims();
    precision.matmul(x, embeddings.transpose()) + bias.reshape([1, v])
}
