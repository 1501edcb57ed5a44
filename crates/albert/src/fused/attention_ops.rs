//! The attention core's entry points: which fused op takes the inputs, with the casts that
//! bf16 mixed precision needs. Q, K and V come either as three `[batch, seq, H]` tensors (flex
//! and libtorch) or, on libtorch, packed side by side in one `[batch, seq, 3H]` tensor, the
//! result of one product with the three projections' weights concatenated.

use burn::tensor::{DType, FloatDType, Tensor};

use super::tracked;

/// The attention core `softmax(Q·Kᵀ·scale + bias)·V` of `heads` heads side by side in
/// `q`, `k`, `v` `[batch, seq, H]`, as one op on flex or libtorch: with a fused backward when
/// training, the context alone when not (inference); `None` for anything else (a tracked
/// `bias`, other shapes, other backends or dtypes). On flex, per head two gemms and the
/// softmax, reading the heads in place: no split or merge copies, no zeroed-then-copied product
/// buffers (see `attention`); on libtorch, torch's scaled-dot-product attention (`torch`).
pub fn attention_core(
    qkv: [&Tensor<3>; 3],
    bias: &Tensor<4>,
    heads: usize,
    scale: f32,
) -> Option<Tensor<3>> {
    attention_applies(qkv, bias, heads).then(|| {
        let [q, k, v] = qkv.map(|t| t.clone());
        tracked::attention([q, k, v], bias.clone(), heads, scale)
    })
}

/// [`attention_core`] in bf16 mixed precision, on libtorch only: torch's SDPA on Q, K, V and
/// the mask in bf16 (its flash kernels on a GPU take nothing else), each cast only where it
/// came in float32, and the context left in bf16 for the output projection's bf16 product —
/// what transformers' `sdpa` attention does under `torch.autocast`. `None` on flex (no bf16
/// products) and wherever `attention_core` would refuse.
pub fn attention_core_bf16(
    qkv: [&Tensor<3>; 3],
    bias: &Tensor<4>,
    heads: usize,
    scale: f32,
) -> Option<Tensor<3>> {
    let applies = qkv.iter().all(|t| tracked::on_libtorch(*t)) && tracked::on_libtorch(bias);
    (applies && attention_shapes(qkv, bias, heads)).then(|| {
        let [q, k, v] = qkv.map(|t| to_bf16(t.clone()));
        tracked::attention([q, k, v], to_bf16(bias.clone()), heads, scale)
    })
}

/// `t` in bf16, without a cast (an op in burn's graph) where it is bf16 already.
fn to_bf16<const D: usize>(t: Tensor<D>) -> Tensor<D> {
    if t.dtype() == DType::BF16 {
        t
    } else {
        t.cast(FloatDType::BF16)
    }
}

/// Whether the fused attention core takes these inputs: matching `[batch, seq, H]` shapes,
/// whole heads, an untracked `[batch, 1, 1, seq]` mask, and tensors the fused ops apply to.
fn attention_applies(qkv: [&Tensor<3>; 3], bias: &Tensor<4>, heads: usize) -> bool {
    let applies = qkv.iter().all(|t| tracked::applies(*t)) && tracked::applies(bias);
    applies && attention_shapes(qkv, bias, heads)
}

/// Matching `[batch, seq, H]` shapes, whole heads and an untracked `[batch, 1, 1, seq]` mask.
fn attention_shapes([q, k, v]: [&Tensor<3>; 3], bias: &Tensor<4>, heads: usize) -> bool {
    let [b, s, h] = q.dims();
    let shapes = k.dims() == [b, s, h]
        && v.dims() == [b, s, h]
        && bias.dims() == [b, 1, 1, s]
        && heads > 0
        && h % heads == 0;
    shapes && !bias.is_tracked()
}

/// The attention core of Q, K and V packed side by side in `qkv` `[batch, seq, 3H]` (one
/// product with the query, key and value weights concatenated), on libtorch only: the three
/// are views of `qkv` into torch's SDPA, and the backward hands back one `[batch, seq, 3H]`
/// gradient for that one product's backward. In `qkv`'s dtype: float32, or bf16 under mixed
/// precision (the mask cast to match), the context in the same dtype. `None` on flex and
/// wherever the shapes do not fit (see [`attention_core`]).
///
/// Why: three projections are three products, three casts of their input under bf16, and
/// backward three more pairs of products whose input gradients burn then sums; packed, each is
/// one, with wider products (`tiny`'s 312 × 312 become 312 × 936), which on a GPU are fewer
/// kernel launches for a host that sets a small model's pace.
pub fn attention_packed(
    qkv: &Tensor<3>,
    bias: &Tensor<4>,
    heads: usize,
    scale: f32,
) -> Option<Tensor<3>> {
    let h3 = qkv.dims()[2];
    (h3.is_multiple_of(3) && torch_attention_fits(qkv, h3 / 3, bias, heads)).then(|| {
        let mask = if qkv.dtype() == DType::BF16 {
            to_bf16(bias.clone())
        } else {
            bias.clone()
        };
        tracked::attention_packed(qkv.clone(), mask, heads, scale)
    })
}

/// Whether [`attention_packed`] will take the packed Q, K and V of a block with input `x`
/// `[batch, seq, H]`, `heads` heads and mask `bias`: on libtorch, with the shapes it needs.
/// Asked before the weights are concatenated, which would be wasted elsewhere.
pub fn packs_attention(x: &Tensor<3>, bias: &Tensor<4>, heads: usize) -> bool {
    torch_attention_fits(x, x.dims()[2], bias, heads)
}

/// Whether libtorch's attention takes `heads` heads of width `h` in all from rows of `t`
/// `[batch, seq, _]` under the mask `bias`: both on libtorch, whole heads, an untracked
/// `[batch, 1, 1, seq]` mask.
fn torch_attention_fits(t: &Tensor<3>, h: usize, bias: &Tensor<4>, heads: usize) -> bool {
    let [b, s, _] = t.dims();
    let shapes = heads > 0 && h.is_multiple_of(heads) && bias.dims() == [b, 1, 1, s];
    shapes && tracked::on_libtorch(t) && tracked::on_libtorch(bias) && !bias.is_tracked()
}
