//! One-pass element-wise functions for inference on burn's CPU backend (flex): the tanh-GELU
//! of the feed-forward blocks and the softmax of attention (its scale and padding bias folded in).
//!
//! Why: flex evaluates a composed expression one op at a time, each op a pass over the whole
//! tensor, and computes `exp` with the scalar libm call. The tanh-GELU on a `[batch·seq, 4H]`
//! activation is six such passes plus a scalar `exp` per element: a quarter of an inference
//! forward of albert_zh tiny (measured 2026-11-24: the same model with ReLU ran 1.3× faster).
//! Here each is one pass over the values, in place, with an `exp` that the compiler
//! vectorises. Only where no gradient is recorded: under autodiff the model keeps burn's ops,
//! whose backward burn derives. Both belong in burn (a SIMD `exp` in flex's element-wise
//! kernels and a tanh-GELU op); until burn has them, this module is the difference.
//!
//! `exp` here is Cephes' `expf` (range reduction by ln 2, a degree-6 polynomial): within
//! 2 ulp of libm's over the range that matters, so outputs match burn's ops to ~1e-7.

use burn::tensor::{Device, Tensor, TensorData};

/// What the fused functions return: the result, or the input handed back (boxed: a tensor
/// is large, and this path is the rare one) for the caller to compute with burn's ops.
pub type Fused<const D: usize> = Result<Tensor<D>, Box<Tensor<D>>>;

/// `x` with its values changed in place by `f(values, last_dim)` when `x` is an untracked
/// f32 tensor on flex; `Err(x)` otherwise (the caller then uses burn's ops).
fn map_in_place<const D: usize>(x: Tensor<D>, f: impl FnOnce(&mut [f32], usize)) -> Fused<D> {
    if D == 0 || x.is_tracked() || x.device().without_autodiff() != Device::flex() {
        return Err(Box::new(x));
    }
    let last = x.dims()[D - 1];
    let device = x.device();
    // Unique and contiguous (what the model hands over): burn moves the buffer out, no copy.
    let mut data: TensorData = x.into_data();
    if let Ok(values) = data.as_mut_slice::<f32>() {
        f(values, last);
        Ok(Tensor::from_data(data, &device))
    } else {
        Err(Box::new(Tensor::from_data(data, &device)))
    }
}

/// `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))` (Hugging Face's `gelu_new`, albert_zh's
/// `gelu`), or `Err(x)` when burn's ops must compute it (see the module docs).
pub fn gelu_tanh<const D: usize>(x: Tensor<D>) -> Fused<D> {
    map_in_place(x, |v, _| dispatch_gelu(v))
}

/// `softmax(scores·scale + bias)` over the last dimension of `[batch, heads, q, k]` attention
/// scores, with `bias` `[batch, 1, 1, k]` (the padding mask), or `Err(scores)` when burn's ops
/// must compute it. Folding the scale and the bias in saves two passes over the scores.
pub fn attention_probs(scores: Tensor<4>, scale: f32, bias: &Tensor<4>) -> Fused<4> {
    let [b, _, _, k] = scores.dims();
    if bias.dims() != [b, 1, 1, k] || bias.is_tracked() {
        return Err(Box::new(scores));
    }
    let Ok(bias) = bias.clone().into_data().try_into_vec::<f32>() else {
        return Err(Box::new(scores));
    };
    let rows_per_batch = scores.dims()[1] * scores.dims()[2];
    map_in_place(scores, |v, row| {
        if row > 0 {
            dispatch_softmax(v, row, scale, &bias, rows_per_batch)
        }
    })
}

const LOG2E: f32 = std::f32::consts::LOG2_E;
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
/// 1.5·2²³: adding and subtracting it rounds an f32 of magnitude < 2²² to the nearest integer
/// with plain arithmetic, which vectorises where `round` may not.
const ROUND: f32 = 12_582_912.0;

#[inline(always)]
fn exp(x: f32) -> f32 {
    // Below -87.3 the result is subnormal (and 0 is as good); above 88.3, 2ⁿ overflows.
    let x = x.clamp(-87.3, 88.3);
    let n = (x * LOG2E + ROUND) - ROUND;
    let r = x - n * LN2_HI - n * LN2_LO;
    let mut p = 1.987_569_2e-4_f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5; // Cephes' 5.0000001201e-1, as an f32
    let y = p * r * r + r + 1.0;
    y * f32::from_bits(((n as i32 + 127) << 23) as u32)
}

#[inline(always)]
fn gelu_slice(v: &mut [f32]) {
    const C1: f32 = 1.595_769_2; // 2·√(2/π)
    const C3: f32 = C1 * 0.044715;
    for e in v.iter_mut() {
        let x = *e;
        // x·σ(2·√(2/π)·(x + 0.044715·x³)) is the tanh form, exactly.
        *e = x / (1.0 + exp(-(x * (C1 + C3 * x * x))));
    }
}

/// The maximum of `v`, in 16 independent lanes so that it vectorises (a single running
/// maximum is a loop-carried dependency the compiler keeps scalar).
#[inline(always)]
fn max_lanes(v: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; 16];
    let mut chunks = v.chunks_exact(16);
    for c in &mut chunks {
        for i in 0..16 {
            acc[i] = if c[i] > acc[i] { c[i] } else { acc[i] };
        }
    }
    let tail = chunks.remainder().iter().copied();
    acc.into_iter()
        .chain(tail)
        .fold(f32::NEG_INFINITY, f32::max)
}

/// The sum of `v` in 16 lanes (see [`max_lanes`]).
#[inline(always)]
fn sum_lanes(v: &[f32]) -> f32 {
    let mut acc = [0.0_f32; 16];
    let mut chunks = v.chunks_exact(16);
    for c in &mut chunks {
        for i in 0..16 {
            acc[i] += c[i];
        }
    }
    acc.iter().sum::<f32>() + chunks.remainder().iter().sum::<f32>()
}

/// Row-wise softmax of `v` (rows of `row` values) after `x·scale + bias`, where rows
/// `[n·rows_per_batch, (n+1)·rows_per_batch)` take bias row `n`.
#[inline(always)]
fn softmax_slice(v: &mut [f32], row: usize, scale: f32, bias: &[f32], rows_per_batch: usize) {
    for (i, r) in v.chunks_exact_mut(row).enumerate() {
        let start = (i / rows_per_batch) * row;
        let Some(bias) = bias.get(start..start + row) else {
            return;
        };
        for (e, b) in r.iter_mut().zip(bias) {
            *e = *e * scale + b;
        }
        let max = max_lanes(r);
        for e in r.iter_mut() {
            *e = exp(*e - max);
        }
        let inv = 1.0 / sum_lanes(r);
        for e in r.iter_mut() {
            *e *= inv;
        }
    }
}

/// The widest vector unit the CPU has, chosen at run time: the binary is built for baseline
/// x86-64 (SSE2), where these loops would run four lanes at a time.
macro_rules! multiversion {
    ($dispatch:ident, $body:ident, ($($arg:ident: $ty:ty),*)) => {
        fn $dispatch($($arg: $ty),*) {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx2,fma")]
                unsafe fn avx512($($arg: $ty),*) {
                    $body($($arg),*)
                }
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2($($arg: $ty),*) {
                    $body($($arg),*)
                }
                if std::is_x86_feature_detected!("avx512f") {
                    // SAFETY: the CPU has the features the function is compiled for.
                    return unsafe { avx512($($arg),*) };
                }
                if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                    // SAFETY: as above.
                    return unsafe { avx2($($arg),*) };
                }
            }
            $body($($arg),*)
        }
    };
}

multiversion!(dispatch_gelu, gelu_slice, (v: &mut [f32]));
multiversion!(
    dispatch_softmax,
    softmax_slice,
    (v: &mut [f32], row: usize, scale: f32, bias: &[f32], rows_per_batch: usize)
);

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::Distribution;

    #[test]
    fn exp_is_within_a_few_ulp_of_libm() {
        let mut x = -87.0_f32;
        while x < 88.0 {
            let (a, b) = (exp(x), x.exp());
            assert!(((a - b) / b).abs() < 3e-7, "exp({x}) = {a}, libm {b}");
            x += 0.0137;
        }
        assert_eq!(exp(-200.0), exp(-87.3));
        assert!(exp(200.0).is_finite());
    }

    #[test]
    fn gelu_and_softmax_match_burns_ops() {
        let device = Device::flex();
        device.seed(5);
        let x = Tensor::<3>::random([3, 7, 50], Distribution::Normal(0.0, 3.0), &device);
        let fused = gelu_tanh(x.clone()).expect("flex, untracked");
        let composed = crate::model::gelu_tanh_composed(x.clone());
        let diff = (fused - composed).abs().max().into_scalar::<f32>();
        assert!(diff < 1e-5, "gelu differs by {diff}");

        let scores = Tensor::<4>::random([2, 3, 5, 40], Distribution::Normal(0.0, 3.0), &device);
        let mask = Tensor::<2>::random([2, 40], Distribution::Bernoulli(0.7), &device);
        let bias = (mask.neg().add_scalar(1.0) * -1e9).reshape([2, 1, 1, 40]);
        let fused = attention_probs(scores.clone(), 0.3, &bias).expect("flex, untracked");
        let composed = burn::tensor::activation::softmax(scores.mul_scalar(0.3) + bias, 3);
        let diff = (fused - composed).abs().max().into_scalar::<f32>();
        assert!(diff < 1e-6, "attention probabilities differ by {diff}");
    }

    #[test]
    fn tracked_tensors_are_left_to_burn() {
        let device = Device::flex().autodiff();
        let x = Tensor::<2>::ones([2, 3], &device).require_grad();
        assert!(gelu_tanh(x).is_err());
        let scores = Tensor::<4>::ones([1, 1, 2, 3], &device).require_grad();
        let bias = Tensor::<4>::zeros([1, 1, 1, 3], &device);
        assert!(attention_probs(scores, 1.0, &bias).is_err());
    }
}
