//! The attention core `softmax(Q·Kᵀ·scale + bias)·V` as one op on flex, for
//! [`super::tracked`]'s fused attention: per batch row and head, two gemms and the softmax
//! forward, four gemms and the softmax's backward backward.
//!
//! Why: burn runs it as two batched products whose outputs flex allocates zeroed and then
//! copies (see [`super::dense`]), with the heads split out of `[batch, seq, H]` and merged back
//! by strided copies, each again backward. Here Q, K and V are read in place from the
//! projections' `[batch, seq, H]` rows (one head is a column block at row stride H), and the
//! context and the three gradients are written the same way: no copies, no zeroed buffers
//! beyond the outputs. The probabilities are kept for the backward, as burn's softmax keeps them.

use burn::backend::TensorMetadata;
use burn::backend::flex::FlexTensor;

use super::dense::{Mat, gemm_strided};
use super::flex_values::{contiguous, tensor, values};
use super::{CpuLevel, kernels, softmax_at};

/// `[batch, seq, H]` split into `heads` heads of width `d`.
#[derive(Debug, Clone, Copy)]
struct Dims {
    b: usize,
    s: usize,
    h: usize,
    heads: usize,
    d: usize,
}

impl Dims {
    fn of(q: &FlexTensor, heads: usize) -> Dims {
        let shape = q.shape();
        let (b, s, h) = (shape[0], shape[1], shape[2]);
        Dims {
            b,
            s,
            h,
            heads,
            d: h / heads.max(1),
        }
    }

    /// Every (batch row, head) with the offset of its first value in `[batch, seq, H]` and of
    /// its `[seq, seq]` block of probabilities.
    fn blocks(self) -> impl Iterator<Item = (usize, usize, usize)> {
        let Dims { b, s, h, heads, d } = self;
        (0..b).flat_map(move |bi| {
            (0..heads).map(move |hd| (bi, bi * s * h + hd * d, (bi * heads + hd) * s * s))
        })
    }

    /// One head of a `[batch, seq, H]` tensor, as a `[seq, d]` matrix.
    fn head<'a>(&self, values: &'a [f32], offset: usize) -> Mat<'a> {
        Mat::strided(values, offset, self.s, self.d, self.h)
    }
}

/// One head of one batch row: `block ← softmax(Q·Kᵀ·scale + bias)` (`[seq, seq]`), then its
/// context `P·V` written into the head's columns of `ctx` `[batch, seq, H]`.
fn head_forward(
    dims: Dims,
    [qv, kv, vv]: [&[f32]; 3],
    bias: &[f32],
    (off, block): (usize, &mut [f32]),
    ctx: &mut [f32],
    scale: f32,
    level: CpuLevel,
) {
    let s = dims.s;
    gemm_strided(block, s, false, dims.head(qv, off), dims.head(kv, off).t());
    softmax_at(level, block, s, scale, bias, s);
    gemm_strided(
        &mut ctx[off..],
        dims.h,
        false,
        Mat::new(block, s, s),
        dims.head(vv, off),
    );
}

/// The context `[batch, seq, H]` and the probabilities `[batch, heads, seq, seq]` (kept for
/// the backward).
pub(super) fn forward(
    q: &FlexTensor,
    k: &FlexTensor,
    v: &FlexTensor,
    bias: &FlexTensor,
    heads: usize,
    scale: f32,
) -> (FlexTensor, FlexTensor) {
    let dims = Dims::of(q, heads);
    let Dims { b, s, h, .. } = dims;
    let [q, k, v, bias] = [q, k, v, bias].map(|t| contiguous(t.clone()));
    let qkv = [values(&q), values(&k), values(&v)];
    let bv = values(&bias);
    let (mut p, mut ctx) = (vec![0.0; b * heads * s * s], vec![0.0; b * s * h]);
    let level = CpuLevel::active();
    for (bi, off, poff) in dims.blocks() {
        let block = &mut p[poff..poff + s * s];
        let bias = &bv[bi * s..(bi + 1) * s];
        head_forward(dims, qkv, bias, (off, block), &mut ctx, scale, level);
    }
    (
        tensor(ctx, [b, s, h].into()),
        tensor(p, [b, heads, s, s].into()),
    )
}

/// The context `[batch, seq, H]` alone, at `level` (inference: no backward, so one `[seq, seq]`
/// block of probabilities is reused for every head, and stays in cache).
pub(super) fn forward_context(
    [q, k, v, bias]: [&FlexTensor; 4],
    heads: usize,
    scale: f32,
    level: CpuLevel,
) -> FlexTensor {
    let dims = Dims::of(q, heads);
    let Dims { b, s, h, .. } = dims;
    let [q, k, v, bias] = [q, k, v, bias].map(|t| contiguous(t.clone()));
    let qkv = [values(&q), values(&k), values(&v)];
    let bv = values(&bias);
    let (mut block, mut ctx) = (vec![0.0; s * s], vec![0.0; b * s * h]);
    for (bi, off, _) in dims.blocks() {
        let bias = &bv[bi * s..(bi + 1) * s];
        head_forward(dims, qkv, bias, (off, &mut block), &mut ctx, scale, level);
    }
    tensor(ctx, [b, s, h].into())
}

/// The gradients of Q, K and V (`[batch, seq, H]` each) from the context's `g`.
pub(super) fn backward(
    [q, k, v, p]: [&FlexTensor; 4],
    g: FlexTensor,
    heads: usize,
    scale: f32,
) -> [FlexTensor; 3] {
    let dims = Dims::of(q, heads);
    let Dims { b, s, h, .. } = dims;
    let [q, k, v, p, g] = [q, k, v, p, &g].map(|t| contiguous(t.clone()));
    let (qv, kv, vv, pv, gv) = (values(&q), values(&k), values(&v), values(&p), values(&g));
    let (mut dq, mut dk, mut dv) = (
        vec![0.0; b * s * h],
        vec![0.0; b * s * h],
        vec![0.0; b * s * h],
    );
    let mut ds = vec![0.0; s * s];
    for (_, off, poff) in dims.blocks() {
        let block = &pv[poff..poff + s * s];
        let probs = Mat::new(block, s, s);
        let go = dims.head(gv, off);
        // dP = G·Vᵀ, dV = Pᵀ·G, then dS from dP in place.
        gemm_strided(&mut ds, s, false, go, dims.head(vv, off).t());
        gemm_strided(&mut dv[off..], h, false, probs.t(), go);
        kernels::softmax_grad(block, &mut ds, s, scale);
        // dQ = dS·K, dK = dSᵀ·Q.
        let dsm = Mat::new(&ds, s, s);
        gemm_strided(&mut dq[off..], h, false, dsm, dims.head(kv, off));
        gemm_strided(&mut dk[off..], h, false, dsm.t(), dims.head(qv, off));
    }
    [dq, dk, dv].map(|x| tensor(x, [b, s, h].into()))
}
