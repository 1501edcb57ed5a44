//! One-pass element-wise functions for inference on burn's CPU backend (flex): the tanh-GELU
//! and the exact (erf) GELU of the feed-forward blocks and the softmax of attention (its scale
//! and padding bias folded in).
//!
//! Why: flex evaluates a composed expression one op at a time, each op a pass over the whole
//! tensor, and computes `exp` with the scalar libm call. The tanh-GELU on a `[batch·seq, 4H]`
//! activation is six such passes plus a scalar `exp` per element: a quarter of an inference
//! forward of albert_zh tiny (measured 2026-11-24: the same model with ReLU ran 1.3× faster).
//! Here each is one pass over the values, in place, with an `exp` that the compiler
//! vectorises. The dense layers and the whole attention core are burn backend-extension ops
//! (`tracked`; products in `dense` and `attention`) in inference and training alike: one gemm
//! per layer starting from the bias, and per head two gemms around the fused softmax. Under
//! autodiff (training) GELU, the softmax, the losses' log-softmax and LayerNorm are such ops
//! too, each with a hand-written backward (kernels in `kernels`): one pass each way instead of
//! burn's op-by-op decomposition. All of it belongs in burn (a SIMD `exp` in flex's element-wise
//! kernels, fused GELU/softmax/LayerNorm ops with their backward, products written into an
//! output that starts as the bias); until burn has them, this module is the difference.
//!
//! Each function is compiled for the x86-64 baseline, AVX2 + FMA and AVX-512 and runs at the
//! level [`CpuLevel::active`] chooses at run time (`PIPELINE_CPU_LEVEL` forces one); every
//! level computes the same bits.
//!
//! `exp` here is Cephes' `expf` (range reduction by ln 2, a degree-6 polynomial): within
//! 2 ulp of libm's over the range that matters, so outputs match burn's ops to ~1e-7.

use burn::nn::LayerNorm;
use burn::tensor::{Device, FloatDType, Tensor, TensorData};

use crate::cpu_level::CpuLevel;

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

/// [`attention_probs`] for tracked scores on flex (training): one op in the autodiff graph
/// with a fused backward (no gradient reaches `bias`, which must be untracked); `Err(scores)`
/// for anything else.
pub fn attention_probs_tracked(scores: Tensor<4>, scale: f32, bias: &Tensor<4>) -> Fused<4> {
    let [b, _, _, k] = scores.dims();
    let applies = scores.is_tracked() && tracked::applies(&scores) && tracked::applies(bias);
    if !applies || bias.dims() != [b, 1, 1, k] || bias.is_tracked() {
        return Err(Box::new(scores));
    }
    Ok(tracked::attention_softmax(scores, bias.clone(), scale))
}

/// `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))` (Hugging Face's `gelu_new`, albert_zh's
/// `gelu`), or `Err(x)` when burn's ops must compute it (see the module docs).
pub fn gelu_tanh<const D: usize>(x: Tensor<D>) -> Fused<D> {
    map_in_place(x, |v, _| gelu_at(CpuLevel::active(), v))
}

/// `0.5·x·(1 + erf(x/√2))` (Hugging Face's `gelu`), or `Err(x)` when burn's ops must compute
/// it: one vectorised pass instead of burn's passes with a scalar libm `erff` (see `erf`).
pub fn gelu_erf<const D: usize>(x: Tensor<D>) -> Fused<D> {
    map_in_place(x, |v, _| erf::gelu_erf_in_place(v))
}

/// [`gelu_tanh`] as one fused op: on flex for a tracked float32 tensor (training: one op in
/// the autodiff graph with a fused backward; untracked, [`gelu_tanh`] runs in place), on
/// libtorch for any float32 or bf16 tensor (torch's `gelu` kernel, and its backward when
/// tracked; bf16 is the activation between the feed-forward block's two products under mixed
/// precision, as autocast leaves it, where burn's composed ops would round each step to
/// bf16); `Err(x)` for anything else.
pub fn gelu_tanh_op<const D: usize>(x: Tensor<D>) -> Fused<D> {
    if (x.is_tracked() && tracked::applies(&x)) || tracked::on_libtorch(&x) {
        Ok(tracked::gelu_tanh(x))
    } else {
        Err(Box::new(x))
    }
}

/// `log_softmax` over the last dimension as one fused op, the result in float32: on flex for
/// a tracked float32 tensor (the losses in training, with a fused backward), on libtorch for
/// any float32 or bf16 one (torch's kernel, its backward when tracked; bf16 logits are read up
/// to float32 inside it, as autocast runs `log_softmax` in float32, and their gradient goes
/// back in bf16); `Err(x)` for anything else.
pub fn log_softmax_op<const D: usize>(x: Tensor<D>) -> Fused<D> {
    if (x.is_tracked() && tracked::applies(&x)) || tracked::on_libtorch(&x) {
        Ok(tracked::log_softmax(x))
    } else {
        Err(Box::new(x))
    }
}

pub use attention_ops::{attention_core, attention_core_bf16, attention_packed, packs_attention};
pub use shared::shared_weight;
pub use {lamb::LambStep, tracked::lamb_flat_step};

/// Whether [`lamb_step`] takes a weight and its gradient: float32 on flex or libtorch, same
/// shape, not empty.
pub fn lamb_applies<const D: usize>(w: &Tensor<D>, g: &Tensor<D>) -> bool {
    w.dims() == g.dims() && tracked::applies(w) && tracked::applies(g)
}

/// One step of google-research/albert's LAMB (`crate::train::AlbertLamb`) of `w` with gradient
/// `g` and moments `(m, v)` (zeros at the first step) as one op: the new weight and moments.
/// The caller checks [`lamb_applies`] first.
pub fn lamb_step<const D: usize>(
    w: Tensor<D>,
    g: Tensor<D>,
    (m, v): (Tensor<D>, Tensor<D>),
    step: &LambStep,
) -> [Tensor<D>; 3] {
    tracked::lamb([w, g, m, v], step.packed())
}

/// `x·W + b` (`x·Wᵀ + b` when `transposed`: `W` stored `[d_out, d_in]`) as one op on flex,
/// with a fused backward when training; `None` for anything else (the caller uses burn's
/// ops). Saves flex's zeroed-then-copied output buffer and the separate bias pass (see
/// `dense`), in training and inference alike.
pub fn linear(x: &Tensor<2>, w: &Tensor<2>, b: &Tensor<1>, transposed: bool) -> Option<Tensor<2>> {
    linear_applies(x, w, b, transposed)
        .then(|| tracked::linear(x.clone(), w.clone(), b.clone(), transposed))
}

/// Whether the fused dense ops take these: `x` `[n, d_in]`, `W` `[d_in, d_out]` (`[d_out,
/// d_in]` when `transposed`) and `b` `[d_out]`, all tensors the fused ops apply to.
fn linear_applies(x: &Tensor<2>, w: &Tensor<2>, b: &Tensor<1>, transposed: bool) -> bool {
    let dtypes = tracked::applies(x) && tracked::applies(w) && tracked::applies(b);
    linear_shapes(x, w, b, transposed) && dtypes
}

/// `x` `[n, d_in]`, `W` `[d_in, d_out]` (`[d_out, d_in]` when `transposed`), `b` `[d_out]`.
fn linear_shapes(x: &Tensor<2>, w: &Tensor<2>, b: &Tensor<1>, transposed: bool) -> bool {
    let ([_, d_in], [wr, wc], [d_out]) = (x.dims(), w.dims(), b.dims());
    let stored = if transposed { [wc, wr] } else { [wr, wc] };
    stored == [d_in, d_out]
}

/// [`linear`] in bf16 mixed precision (`crate::model::precision`: the product's operands in
/// bf16) as one op on libtorch, the result in `out`: bf16 with the bias added in the product,
/// or float32 with the float32 bias added after it. For `x` float32 or bf16, `w` float32 (or
/// bf16 already, a [`shared_weight`]) and float32 `b` of matching shapes there; `None`
/// elsewhere (the caller then casts with burn's ops).
///
/// Why: written with burn's ops it is six nodes of burn's graph (two casts, the product, the
/// cast back, the bias's reshape and sum), each an op forward and more backward on the host.
pub fn linear_bf16(
    x: &Tensor<2>,
    w: &Tensor<2>,
    b: &Tensor<1>,
    transposed: bool,
    out: FloatDType,
) -> Option<Tensor<2>> {
    let shapes = linear_shapes(x, w, b, transposed);
    let dtypes = tracked::on_libtorch(x) && tracked::on_libtorch(w) && tracked::applies(b);
    let bf16_out = match out {
        FloatDType::BF16 => true,
        FloatDType::F32 => false,
        _ => return None,
    };
    let operands = [x.clone(), w.clone()];
    (shapes && dtypes).then(|| tracked::linear_bf16(operands, b.clone(), transposed, bf16_out))
}

/// `ln(x)` (LayerNorm over the last dimension, `epsilon` the one `ln` was configured with),
/// fused with its backward when `x` is tracked on flex; burn's `LayerNorm` otherwise (whose
/// untracked forward on flex is one pass already).
pub fn layer_norm<const D: usize>(ln: &LayerNorm, x: Tensor<D>, epsilon: f64) -> Tensor<D> {
    let (gamma, beta) = (ln.gamma.val(), ln.beta.as_ref().map(|b| b.val()));
    match beta {
        Some(beta)
            if x.is_tracked()
                && tracked::applies(&x)
                && tracked::applies(&gamma)
                && tracked::applies(&beta) =>
        {
            tracked::layer_norm(x, gamma, beta, epsilon as f32)
        }
        _ => ln.forward(x),
    }
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
            softmax_at(CpuLevel::active(), v, row, scale, &bias, rows_per_batch)
        }
    })
}

const LOG2E: f32 = std::f32::consts::LOG2_E;
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
/// 1.5·2²³: adding and subtracting it rounds an f32 of magnitude < 2²² to the nearest integer
/// with plain arithmetic, which vectorises where `round` may not.
const ROUND: f32 = 12_582_912.0;

/// The bits of `ROUND`: `t = y + ROUND` holds `round(y)` in the low bits of its mantissa.
const ROUND_BITS: u32 = 0x4B40_0000;

/// `eˣ`, within a few ulp of libm's from -87.3 to 88.3 and 0 below: never subnormal.
///
/// Why 0 and not the clamp's `e^-87.3`: the attention mask adds -1e9 to padded keys, so the
/// clamp made every padded probability ≈ 1.2e-38, subnormal once divided by the row's sum, and
/// each gemm that read them (P·V, and the backward's four) took the CPU's microcode path for
/// subnormal operands: the default pipeline's pretrain on the padded fixtures ran 3.7× slower
/// than burn's composed ops (2026-11-28, 197 s against 52 s; 31.9 s with the CPU flushing
/// subnormals). libm returns subnormals down to -103.9; no caller needs them.
#[inline(always)]
fn exp(x: f32) -> f32 {
    // Above 88.3, 2ⁿ overflows.
    let underflows = x < -87.3;
    let x = x.clamp(-87.3, 88.3);
    let t = x * LOG2E + ROUND;
    let n = t - ROUND;
    let r = x - n * LN2_HI - n * LN2_LO;
    let mut p = 1.987_569_2e-4_f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5; // Cephes' 5.0000001201e-1, as an f32
    let y = p * r * r + r + 1.0;
    // 2ⁿ from t's bits, n = bits(t) - ROUND_BITS (|n| ≤ 128 ≪ 2²²), by integer adds and a
    // shift: `n as i32` is a saturating cast whose NaN and range checks the compiler emits
    // lane by lane, eight scalar conversions per AVX2 vector. That made `exp` the bottleneck of
    // the GELU and softmax kernels (2026-11-28, AVX2, perf annotate of gelu_at: the scalar
    // vcvttss2si/cmovp/vpinsrd sequence held most of the samples). Same n, so the same bits.
    let scale = t.to_bits().wrapping_sub(ROUND_BITS).wrapping_add(127) << 23;
    let e = y * f32::from_bits(scale);
    if underflows { 0.0 } else { e }
}

/// 2·√(2/π): GELU's tanh form is `x·σ(C1·x + C3·x³)`.
const GELU_C1: f32 = 1.595_769_2;
/// `C1·0.044715`.
const GELU_C3: f32 = GELU_C1 * 0.044715;

/// tanh-GELU of one value: x·σ(2·√(2/π)·(x + 0.044715·x³)) is the tanh form, exactly.
#[inline(always)]
fn gelu(x: f32) -> f32 {
    x / (1.0 + exp(-(x * (GELU_C1 + GELU_C3 * x * x))))
}

#[inline(always)]
fn gelu_slice(v: &mut [f32]) {
    for e in v.iter_mut() {
        *e = gelu(*e);
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

/// `$dispatch(level, args)` runs `$body(args)` compiled for `level` ([`CpuLevel`]): the binary
/// is built for baseline x86-64 (SSE2), where these loops would run four lanes at a time. No
/// code here uses `mul_add` and Rust never contracts `a·b + c` into an FMA by itself, and each
/// lane keeps its own running sum whatever the vector width, so every level computes the same
/// bits (the tests check it).
macro_rules! multiversion {
    ($dispatch:ident, $body:ident, ($($arg:ident: $ty:ty),*)) => {
        fn $dispatch(level: CpuLevel, $($arg: $ty),*) {
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
                // `available` again, not only the caller's word: a level the CPU lacks would
                // fault, so none is run without the check.
                if level == CpuLevel::Avx512 && CpuLevel::Avx512.available() {
                    // SAFETY: the CPU has the features the function is compiled for.
                    return unsafe { avx512($($arg),*) };
                }
                if level == CpuLevel::Avx2 && CpuLevel::Avx2.available() {
                    // SAFETY: as above.
                    return unsafe { avx2($($arg),*) };
                }
            }
            let _ = level;
            $body($($arg),*)
        }
    };
}

multiversion!(gelu_at, gelu_slice, (v: &mut [f32]));
multiversion!(
    softmax_at,
    softmax_slice,
    (v: &mut [f32], row: usize, scale: f32, bias: &[f32], rows_per_batch: usize)
);

// After the macro: the kernels of the training ops and the exact GELU are compiled per level
// with it.
mod attention;
mod attention_ops;
mod dense;
mod erf;
mod flex_values;
mod kernels;
mod lamb;
mod shared;
#[cfg(feature = "tch")]
mod torch;
#[cfg(feature = "tch")]
mod torch_attention;
#[cfg(feature = "tch")]
mod torch_products;
#[cfg(feature = "tch")]
mod torch_shared;
#[cfg(feature = "tch")]
mod torch_upload;
#[cfg(feature = "tch")]
mod torch_vjp;
#[cfg(feature = "tch")]
pub(crate) use torch_vjp::shim_error;
// The extension names burn's libtorch backend in a `tch` build, which burn marks deprecated;
// it is the one that builds offline (as in `device`).
#[cfg_attr(feature = "tch", allow(deprecated))]
mod tracked;
pub mod upload;

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
        assert!(exp(-87.3) >= f32::MIN_POSITIVE, "exp(-87.3) is normal");
        for x in [-87.31, -100.0, -200.0, -1e9, f32::MIN] {
            assert_eq!(exp(x).to_bits(), 0, "exp({x}) flushes to +0");
        }
        assert!(exp(200.0).is_finite());
    }

    /// `exp` as it was with 2ⁿ from the saturating cast `n as i32` (scalar code on every level).
    fn exp_by_cast(x: f32) -> f32 {
        let x = x.clamp(-87.3, 88.3);
        let n = (x * LOG2E + ROUND) - ROUND;
        let r = x - n * LN2_HI - n * LN2_LO;
        let mut p = 1.987_569_2e-4_f32;
        p = p * r + 1.398_199_9e-3;
        p = p * r + 8.333_452e-3;
        p = p * r + 4.166_579_6e-2;
        p = p * r + 1.666_666_5e-1;
        p = p * r + 0.5;
        let y = p * r * r + r + 1.0;
        y * f32::from_bits(((n as i32 + 127) << 23) as u32)
    }

    /// 2ⁿ read from the bits of `x·log2(e) + ROUND` is the cast's, bit for bit, over the whole
    /// clamped range (every exponent, both ends, the clamp's top outside, signed zeros); below
    /// the range `exp` is 0 where the cast's clamp gave `e^-87.3`.
    #[test]
    fn exp_by_bits_is_exp_by_cast() {
        let by_cast = |x: f32| if x < -87.3 { 0.0 } else { exp_by_cast(x) };
        let mut x = -90.0_f32;
        while x < 90.0 {
            assert_eq!(exp(x).to_bits(), by_cast(x).to_bits(), "exp({x})");
            x += 0.000_37;
        }
        for x in [-87.3, 88.3, -0.0, 0.0, f32::MIN, f32::MAX, -1e-30, 1e-30] {
            assert_eq!(exp(x).to_bits(), by_cast(x).to_bits(), "exp({x})");
        }
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
        let bias = (mask.clone().neg().add_scalar(1.0) * -1e9).reshape([2, 1, 1, 40]);
        let fused = attention_probs(scores.clone(), 0.3, &bias).expect("flex, untracked");
        let composed = burn::tensor::activation::softmax(scores.mul_scalar(0.3) + bias, 3);
        let diff = (fused.clone() - composed).abs().max().into_scalar::<f32>();
        assert!(diff < 1e-6, "attention probabilities differ by {diff}");

        // Padded keys take exactly 0, as with libm's `expf`: a subnormal probability makes
        // every gemm that reads it slow (see `exp`).
        let probs = fused.into_data().try_to_vec::<f32>().expect("f32");
        let mask = mask.into_data().try_to_vec::<f32>().expect("f32");
        for (i, p) in probs.iter().enumerate() {
            assert!(!p.is_subnormal(), "probability {i} is subnormal: {p}");
            let (batch, key) = (i / (3 * 5 * 40), i % 40);
            if mask[batch * 40 + key] == 0.0 {
                assert_eq!(p.to_bits(), 0, "padded key {key} of batch {batch}: {p}");
            }
        }
    }

    /// Values spread over (-`spread`, `spread`) by a fixed recurrence (no RNG state shared
    /// with other tests), with the edges of `exp`'s clamp among them.
    fn values(n: usize, spread: f32) -> Vec<f32> {
        let mut x = 0x2545_f491_u32;
        let mut v: Vec<f32> = (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                (x as f32 / u32::MAX as f32 * 2.0 - 1.0) * spread
            })
            .collect();
        v.extend([0.0, -0.0, 200.0, -200.0]);
        v
    }

    /// `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))` in f64 with libm's `tanh`.
    fn gelu_reference(x: f32) -> f32 {
        let x = f64::from(x);
        let inner = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
        (0.5 * x * (1.0 + inner.tanh())) as f32
    }

    /// Every level the CPU has gives the bits of the baseline, and the baseline is within
    /// 1e-6 (relative to max(|x|, 1)) of the f64 reference, tails of every width included.
    #[test]
    fn every_available_level_computes_the_same_gelu() {
        for n in [1, 15, 16, 17, 1000, 1037] {
            let input = values(n, 12.0);
            let mut baseline = input.clone();
            gelu_at(CpuLevel::Baseline, &mut baseline);
            for (x, y) in input.iter().zip(&baseline) {
                let tolerance = 1e-6 * x.abs().max(1.0);
                let reference = gelu_reference(*x);
                assert!(
                    (y - reference).abs() <= tolerance,
                    "gelu({x}) = {y}, f64 {reference}"
                );
            }
            for level in CpuLevel::ALL.into_iter().filter(|l| l.available()) {
                let mut v = input.clone();
                gelu_at(level, &mut v);
                let same = v
                    .iter()
                    .zip(&baseline)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{level} differs from baseline on {n} values");
            }
        }
    }

    /// Every level the CPU has gives the bits of the baseline, and the baseline is within 1e-6
    /// of an f64 softmax (padding positions included), for rows narrower and wider than a vector.
    #[test]
    fn every_available_level_computes_the_same_softmax() {
        let (heads, q, scale) = (3, 5, 0.125);
        for k in [7, 16, 37, 128] {
            let batch = 2;
            let input = values(batch * heads * q * k - 4, 40.0);
            let bias: Vec<f32> = (0..batch * k)
                .map(|i| if i % 5 == 3 { -1e9 } else { 0.0 })
                .collect();
            let mut baseline = input.clone();
            softmax_at(
                CpuLevel::Baseline,
                &mut baseline,
                k,
                scale,
                &bias,
                heads * q,
            );
            for (i, (x, y)) in input.chunks(k).zip(baseline.chunks(k)).enumerate() {
                let b = &bias[(i / (heads * q)) * k..][..k];
                let z: Vec<f64> = x
                    .iter()
                    .zip(b)
                    .map(|(x, b)| f64::from(x * scale + b))
                    .collect();
                let max = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let sum: f64 = z.iter().map(|z| (z - max).exp()).sum();
                for (z, y) in z.iter().zip(y) {
                    let reference = (z - max).exp() / sum;
                    assert!(
                        (f64::from(*y) - reference).abs() < 1e-6,
                        "row {i}: {y} vs {reference}"
                    );
                }
            }
            for level in CpuLevel::ALL.into_iter().filter(|l| l.available()) {
                let mut v = input.clone();
                softmax_at(level, &mut v, k, scale, &bias, heads * q);
                let same = v
                    .iter()
                    .zip(&baseline)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{level} differs from baseline on rows of {k}");
            }
        }
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
