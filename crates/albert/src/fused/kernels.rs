//! The slice kernels of the fused training ops ([`super::tracked`]): tanh-GELU out of place and
//! its derivative, the softmax's backward, log-softmax (the losses') forward and backward,
//! LayerNorm forward and backward.
//!
//! Why: under autodiff burn records tanh-GELU as six ops, softmax as five (with a scalar `expf`)
//! and LayerNorm as nine, each a pass over the tensor forward and one or more backward. Each
//! kernel here is one pass (two for LayerNorm's row statistics), compiled per [`CpuLevel`] by
//! [`multiversion!`]. As in the parent module, nothing uses `mul_add` and every running sum keeps
//! 16 lanes, so every level computes the same bits.

use super::{CpuLevel, GELU_C1, GELU_C3, exp, gelu, max_lanes, sum_lanes};

/// `Σ a·b` in 16 lanes (see [`super::max_lanes`] for why lanes).
#[inline(always)]
fn dot_lanes(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0_f32; 16];
    let (mut ca, mut cb) = (a.chunks_exact(16), b.chunks_exact(16));
    for (x, y) in (&mut ca).zip(&mut cb) {
        for i in 0..16 {
            acc[i] += x[i] * y[i];
        }
    }
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    acc.iter().sum::<f32>() + tail
}

/// `y = gelu(x)`: the forward under autodiff, where `x` is kept for the backward.
#[inline(always)]
fn gelu_into_slice(x: &[f32], y: &mut [f32]) {
    for (y, x) in y.iter_mut().zip(x) {
        *y = gelu(*x);
    }
}

/// `g ← g · gelu'(x)`, with `gelu(x) = x·s`, `s = σ(z)`, `z = C1·x + C3·x³`:
/// `gelu'(x) = s + x·s·(1 − s)·(C1 + 3·C3·x²)`.
#[inline(always)]
fn gelu_grad_slice(x: &[f32], g: &mut [f32]) {
    for (g, x) in g.iter_mut().zip(x) {
        let x = *x;
        let x2 = x * x;
        let s = 1.0 / (1.0 + exp(-(x * (GELU_C1 + GELU_C3 * x2))));
        let dz = GELU_C1 + 3.0 * GELU_C3 * x2;
        *g *= s + x * s * (1.0 - s) * dz;
    }
}

/// The gradient of `softmax(S·scale + bias)` with respect to `S`, row by row, from the
/// probabilities `p` and their gradient `g` (overwritten): `scale·p·(g − Σ g·p)`.
#[inline(always)]
fn softmax_grad_slice(p: &[f32], g: &mut [f32], row: usize, scale: f32) {
    for (p, g) in p.chunks_exact(row).zip(g.chunks_exact_mut(row)) {
        let dot = dot_lanes(p, g);
        for (g, p) in g.iter_mut().zip(p) {
            *g = scale * *p * (*g - dot);
        }
    }
}

/// Row-wise `log_softmax` of `v` in place (rows of `row` values): `x − max − ln Σ exp(x − max)`.
#[inline(always)]
fn log_softmax_slice(v: &mut [f32], row: usize) {
    for r in v.chunks_exact_mut(row) {
        let max = max_lanes(r);
        let mut acc = [0.0_f32; 16];
        let mut chunks = r.chunks_exact_mut(16);
        for c in &mut chunks {
            for i in 0..16 {
                c[i] -= max;
                acc[i] += exp(c[i]);
            }
        }
        let mut tail = 0.0;
        for e in chunks.into_remainder() {
            *e -= max;
            tail += exp(*e);
        }
        let lse = (acc.iter().sum::<f32>() + tail).ln();
        for e in r.iter_mut() {
            *e -= lse;
        }
    }
}

/// The gradient of `log_softmax` from its output `y` and the output's gradient `g`
/// (overwritten), row by row: `g − exp(y)·Σ g`.
#[inline(always)]
fn log_softmax_grad_slice(y: &[f32], g: &mut [f32], row: usize) {
    for (y, g) in y.chunks_exact(row).zip(g.chunks_exact_mut(row)) {
        let sum = sum_lanes(g);
        for (g, y) in g.iter_mut().zip(y) {
            *g -= exp(*y) * sum;
        }
    }
}

/// LayerNorm over rows of `gamma.len()` values: `x` becomes `x̂ = (x − mean)·rstd` (kept for
/// the backward), `y = x̂·γ + β`, `rstd` gets each row's `1/√(var + ε)` (biased variance).
#[inline(always)]
fn layer_norm_slice(
    x: &mut [f32],
    y: &mut [f32],
    rstd: &mut [f32],
    gamma: &[f32],
    beta: &[f32],
    eps: f32,
) {
    let d = gamma.len();
    let rows = x.chunks_exact_mut(d).zip(y.chunks_exact_mut(d));
    for ((x, y), rstd) in rows.zip(rstd.iter_mut()) {
        let mean = sum_lanes(x) / d as f32;
        for e in x.iter_mut() {
            *e -= mean;
        }
        let var = dot_lanes(x, x) / d as f32;
        let r = 1.0 / (var + eps).sqrt();
        *rstd = r;
        for (((x, y), g), b) in x.iter_mut().zip(y.iter_mut()).zip(gamma).zip(beta) {
            *x *= r;
            *y = *x * g + b;
        }
    }
}

/// LayerNorm's backward from `x̂`, `rstd` and `γ`: `g` (the output's gradient) becomes the
/// input's, `rstd·(g·γ − mean(g·γ) − x̂·mean(g·γ·x̂))`; `dgamma += Σ_rows g·x̂`,
/// `dbeta += Σ_rows g` (both zeroed by the caller).
#[inline(always)]
fn layer_norm_grad_slice(
    xhat: &[f32],
    rstd: &[f32],
    gamma: &[f32],
    g: &mut [f32],
    dgamma: &mut [f32],
    dbeta: &mut [f32],
) {
    let d = gamma.len();
    let rows = xhat.chunks_exact(d).zip(g.chunks_exact_mut(d));
    for ((xhat, g), r) in rows.zip(rstd) {
        for (((g, x), dg), db) in g
            .iter_mut()
            .zip(xhat)
            .zip(dgamma.iter_mut())
            .zip(dbeta.iter_mut())
        {
            *dg += *g * x;
            *db += *g;
        }
        for (g, w) in g.iter_mut().zip(gamma) {
            *g *= w;
        }
        let a = sum_lanes(g) / d as f32;
        let b = dot_lanes(g, xhat) / d as f32;
        for (g, x) in g.iter_mut().zip(xhat) {
            *g = r * (*g - a - x * b);
        }
    }
}

multiversion!(gelu_into_at, gelu_into_slice, (x: &[f32], y: &mut [f32]));
multiversion!(gelu_grad_at, gelu_grad_slice, (x: &[f32], g: &mut [f32]));
multiversion!(
    softmax_grad_at,
    softmax_grad_slice,
    (p: &[f32], g: &mut [f32], row: usize, scale: f32)
);
multiversion!(log_softmax_at, log_softmax_slice, (v: &mut [f32], row: usize));
multiversion!(
    log_softmax_grad_at,
    log_softmax_grad_slice,
    (y: &[f32], g: &mut [f32], row: usize)
);
multiversion!(
    layer_norm_at,
    layer_norm_slice,
    (x: &mut [f32], y: &mut [f32], rstd: &mut [f32], gamma: &[f32], beta: &[f32], eps: f32)
);
multiversion!(
    layer_norm_grad_at,
    layer_norm_grad_slice,
    (
        xhat: &[f32],
        rstd: &[f32],
        gamma: &[f32],
        g: &mut [f32],
        dgamma: &mut [f32],
        dbeta: &mut [f32]
    )
);

/// `gelu(x)` into `y`, at the active level.
pub(super) fn gelu_into(x: &[f32], y: &mut [f32]) {
    gelu_into_at(CpuLevel::active(), x, y)
}

/// `g ← g·gelu'(x)`, at the active level.
pub(super) fn gelu_grad(x: &[f32], g: &mut [f32]) {
    gelu_grad_at(CpuLevel::active(), x, g)
}

/// The softmax's backward over rows of `row` values, at the active level.
pub(super) fn softmax_grad(p: &[f32], g: &mut [f32], row: usize, scale: f32) {
    softmax_grad_at(CpuLevel::active(), p, g, row, scale)
}

/// Row-wise `log_softmax` in place, at the active level.
pub(super) fn log_softmax(v: &mut [f32], row: usize) {
    log_softmax_at(CpuLevel::active(), v, row)
}

/// `log_softmax`'s backward, at the active level.
pub(super) fn log_softmax_grad(y: &[f32], g: &mut [f32], row: usize) {
    log_softmax_grad_at(CpuLevel::active(), y, g, row)
}

/// LayerNorm's forward (see [`layer_norm_slice`]), at the active level.
pub(super) fn layer_norm(
    x: &mut [f32],
    y: &mut [f32],
    rstd: &mut [f32],
    gamma: &[f32],
    beta: &[f32],
    eps: f32,
) {
    layer_norm_at(CpuLevel::active(), x, y, rstd, gamma, beta, eps)
}

/// LayerNorm's backward (see [`layer_norm_grad_slice`]), at the active level.
pub(super) fn layer_norm_grad(
    xhat: &[f32],
    rstd: &[f32],
    gamma: &[f32],
    g: &mut [f32],
    dgamma: &mut [f32],
    dbeta: &mut [f32],
) {
    layer_norm_grad_at(CpuLevel::active(), xhat, rstd, gamma, g, dgamma, dbeta)
}

#[cfg(test)]
#[path = "kernels_tests.rs"]
mod tests;
