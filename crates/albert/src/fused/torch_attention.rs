//! The attention core on libtorch: torch's scaled-dot-product attention (SDPA) over the heads
//! of Q, K and V, given as three `[batch, seq, H]` tensors or packed in one `[batch, seq, 3H]`,
//! with the head width padded to what the fused GPU kernels take.

use tch::Tensor;

/// `[batch, seq, H]` as `[batch, heads, seq, d]` (a view).
fn split_heads(t: &Tensor, heads: i64) -> Tensor {
    let (b, s, h) = t.size3().expect("attention inputs are [batch, seq, H]");
    t.view([b, s, heads, h / heads]).transpose(1, 2)
}

/// The head width torch's fused GPU attention kernels take: a multiple of 8. `tiny`'s 26
/// (312 / 12) is not, and SDPA then falls back to its materialised math path on CUDA; zero
/// columns added to Q, K and V change no score (the scale stays 1/√26) and only add zero
/// columns to the context, which are cut off.
pub(super) fn padded_head_width(d: i64, device: tch::Device) -> i64 {
    if device.is_cuda() && d % 8 != 0 {
        (d + 7) / 8 * 8
    } else {
        d
    }
}

/// `softmax(Q·Kᵀ·scale + bias)·V` of `heads` heads side by side in `[batch, seq, H]`, by
/// torch's scaled-dot-product attention; `bias` `[batch, 1, 1, seq]` is the additive mask.
pub(super) fn attention(
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
pub(super) fn attention_at_width(
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

/// [`attention`] of Q, K and V packed side by side in `qkv` `[batch, seq, 3H]`: the three are
/// views (`unbind` of `[batch, seq, 3, H]`), so under torch's autograd the backward gathers
/// their three gradients into one `[batch, seq, 3H]` with a single `stack`.
pub(super) fn packed_attention(qkv: &Tensor, bias: &Tensor, heads: usize, scale: f32) -> Tensor {
    let (b, s, h3) = qkv
        .size3()
        .expect("packed attention input is [batch, seq, 3H]");
    let parts = qkv.view([b, s, 3, h3 / 3]).unbind(2);
    attention(&parts[0], &parts[1], &parts[2], bias, heads, scale)
}
