//! libtorch's fused ops without autodiff (inference) against burn's composed ops on libtorch's
//! CPU, and the head padding of the GPU attention path. Their autodiff side runs in
//! `tracked_tests.rs` with `ALBERT_TEST_DEVICE=tch-cpu`.

use burn::tensor::{DType, Device, Distribution, FloatDType, Tensor};

use super::*;
use crate::fused::torch_attention::{attention_at_width, padded_head_width};

/// `max |a − b| ≤ 1e-5·max |b|`.
fn assert_close<const D: usize>(a: Tensor<D>, b: Tensor<D>, what: &str) {
    let scale = b.clone().abs().max().into_scalar::<f32>().max(1e-12);
    let diff = (a - b).abs().max().into_scalar::<f32>();
    assert!(
        diff <= 1e-5 * scale,
        "{what}: differs by {diff} (scale {scale})"
    );
}

fn libtorch_cpu() -> Device {
    let device = Device::libtorch();
    device.seed(37);
    device
}

/// A padding mask's additive bias `[b, 1, 1, s]`: 0 for kept keys, -1e9 for padded ones.
fn padding_bias(b: usize, s: usize, device: &Device) -> Tensor<4> {
    let mask = Tensor::<2>::random([b, s], Distribution::Bernoulli(0.7), device);
    (mask.neg().add_scalar(1.0) * -1e9).reshape([b, 1, 1, s])
}

#[test]
fn untracked_attention_is_sdpa_and_matches_burns_ops() {
    let device = libtorch_cpu();
    let normal = Distribution::Normal(0.0, 1.0);
    for [b, s, heads, d] in [[2, 9, 3, 4], [3, 37, 12, 26]] {
        let (h, scale) = (heads * d, 1.0 / (d as f32).sqrt());
        let [q, k, v] = [0; 3].map(|_| Tensor::<3>::random([b, s, h], normal, &device));
        let bias = padding_bias(b, s, &device);
        let split = |t: &Tensor<3>| t.clone().reshape([b, s, heads, d]).swap_dims(1, 2);
        let scores = split(&q)
            .matmul(split(&k).swap_dims(2, 3))
            .mul_scalar(scale);
        let probs = burn::tensor::activation::softmax(scores + bias.clone(), 3);
        let composed = probs.matmul(split(&v)).swap_dims(1, 2).reshape([b, s, h]);
        let fused = crate::fused::attention_core([&q, &k, &v], &bias, heads, scale);
        let fused = fused.expect("libtorch, float32: the fused op");
        assert!(!fused.is_tracked());
        assert_close(
            fused,
            composed,
            &format!("attention [{b}, {s}, {heads}×{d}]"),
        );
    }
}

#[test]
fn untracked_linear_matches_burns_ops_both_ways_round() {
    let device = libtorch_cpu();
    let normal = Distribution::Normal(0.0, 1.0);
    for transposed in [false, true] {
        let (n, d_in, d_out) = (11, 7, 5);
        let x = Tensor::<2>::random([n, d_in], normal, &device);
        let stored = if transposed {
            [d_out, d_in]
        } else {
            [d_in, d_out]
        };
        let w = Tensor::<2>::random(stored, normal, &device);
        let b = Tensor::<1>::random([d_out], normal, &device);
        let fused = crate::fused::linear(&x, &w, &b, transposed).expect("fused");
        let used = if transposed { w.transpose() } else { w };
        let composed = x.matmul(used) + b.reshape([1, d_out]);
        assert_close(
            fused,
            composed,
            &format!("linear, transposed: {transposed}"),
        );
    }
}

/// Untracked (inference, evaluation) the tanh GELU is torch's kernel too: in float32 the
/// composed formula's values, and on a bf16 input (the activation between the feed-forward's
/// products under mixed precision) a bf16 result within one rounding of float32's, where burn's
/// composed ops would round each of their five steps.
#[test]
fn untracked_gelu_is_torchs_kernel_in_float32_and_bf16() {
    let device = libtorch_cpu();
    let x = Tensor::<2>::random([13, 40], Distribution::Normal(0.0, 3.0), &device);
    let fused = crate::fused::gelu_tanh_op(x.clone()).expect("libtorch: the fused op");
    let composed = crate::model::gelu_tanh_composed(x.clone());
    assert_close(fused.clone(), composed, "gelu");
    let in_bf16 = crate::fused::gelu_tanh_op(x.cast(FloatDType::BF16)).expect("bf16");
    assert_eq!(in_bf16.dtype(), DType::BF16);
    assert_within_bf16(in_bf16.cast(FloatDType::F32), fused, "gelu in bf16");
}

/// The losses' log-softmax reads bf16 logits (the MLM decoder's under mixed precision) and
/// works in float32: the result is float32 and the very values of the logits read up first;
/// tracked, the logits' gradient goes back in bf16, within its rounding of float32's.
#[test]
fn log_softmax_reads_bf16_logits_and_returns_float32() {
    let device = libtorch_cpu().autodiff();
    let logits = Tensor::<2>::random([9, 300], Distribution::Normal(0.0, 4.0), &device);
    let logits = logits.cast(FloatDType::BF16).require_grad();
    let w = Tensor::<2>::random([9, 300], Distribution::Default, &device);
    let fused = crate::fused::log_softmax_op(logits.clone()).expect("libtorch: the fused op");
    assert_eq!(fused.dtype(), DType::F32);
    let read_up = logits.clone().cast(FloatDType::F32).detach().require_grad();
    let exact = crate::fused::log_softmax_op(read_up.clone()).expect("float32");
    assert_eq!(fused.to_data(), exact.to_data());

    let g1 = (fused * w.clone()).sum().backward();
    let g2 = (exact * w).sum().backward();
    let d16 = logits.grad(&g1).expect("a gradient");
    assert_eq!(d16.dtype(), DType::BF16);
    let d32 = read_up.grad(&g2).expect("a gradient");
    assert_within_bf16(d16.cast(FloatDType::F32), d32, "the logits' gradient");
    let untracked = crate::fused::log_softmax_op(logits.inner()).expect("untracked");
    assert_eq!(untracked.dtype(), DType::F32);
}

/// What the GPU path does with `tiny`'s 26-wide heads: padded to 32 with zero columns, the
/// context is the same (run here on the CPU, where the padding is otherwise off).
#[test]
fn zero_padded_heads_give_the_same_context() {
    let (b, s, heads, d) = (2i64, 13i64, 3usize, 26i64);
    let h = heads as i64 * d;
    let opts = (Kind::Float, tch::Device::Cpu);
    let [q, k, v] = [0; 3].map(|_| tch::Tensor::randn([b, s, h], opts));
    let bias = tch::Tensor::zeros([b, 1, 1, s], opts);
    let _ = bias.narrow(3, s - 4, 4).fill_(-1e9);
    let scale = 1.0 / (d as f32).sqrt();
    let plain = attention_at_width([&q, &k, &v], &bias, heads, scale, d);
    let padded = attention_at_width([&q, &k, &v], &bias, heads, scale, 32);
    assert_eq!(padded.size(), vec![b, s, h]);
    let diff = (&plain - &padded).abs().max().double_value(&[]);
    assert!(diff < 1e-5, "padding changed the context by {diff}");
    assert_eq!(padded_head_width(26, tch::Device::Cpu), 26);
    assert_eq!(padded_head_width(26, tch::Device::Cuda(0)), 32);
    assert_eq!(padded_head_width(64, tch::Device::Cuda(0)), 64);
}

/// Mixed precision: the bf16 attention core against float32 burn ops, values and the
/// gradients of Q, K and V, within bf16's precision (8 bits of mantissa: 2⁻⁸ ≈ 0.4 %, a few
/// roundings deep); its context left in bf16 for the output projection; and Q, K, V that come
/// in bf16 already (the projections' bf16 results) give the same context.
#[test]
fn bf16_attention_tracks_float32_within_bf16_precision() {
    let device = Device::libtorch().autodiff();
    device.seed(41);
    let normal = Distribution::Normal(0.0, 1.0);
    let [b, s, heads, d] = [2, 11, 3, 8];
    let (h, scale) = (heads * d, 1.0 / (d as f32).sqrt());
    let qkv = [0; 3].map(|_| Tensor::<3>::random([b, s, h], normal, &device).require_grad());
    let w = Tensor::<3>::random([b, s, h], normal, &device);
    let bias = padding_bias(b, s, &device);
    let [q, k, v] = &qkv;
    let fused = crate::fused::attention_core_bf16([q, k, v], &bias, heads, scale).expect("bf16");
    assert_eq!(fused.dtype(), DType::BF16);
    let [qb, kb, vb] = qkv.each_ref().map(|t| t.clone().cast(FloatDType::BF16));
    let from_bf16 = crate::fused::attention_core_bf16([&qb, &kb, &vb], &bias, heads, scale);
    let from_bf16 = from_bf16.expect("bf16 inputs").cast(FloatDType::F32);
    let fused = fused.cast(FloatDType::F32);
    assert_eq!(from_bf16.into_data(), fused.to_data(), "bf16 Q, K, V");
    let exact = crate::fused::attention_core([q, k, v], &bias, heads, scale).expect("f32");
    let g1 = (fused.clone() * w.clone()).sum().backward();
    let g2 = (exact.clone() * w).sum().backward();
    let within = |a: Tensor<3>, e: Tensor<3>, what: &str| {
        let scale = e.clone().abs().max().into_scalar::<f32>();
        let diff = (a - e).abs().max().into_scalar::<f32>();
        assert!(
            diff <= 3e-2 * scale,
            "{what}: differs by {diff} (scale {scale})"
        );
    };
    let rounding = (fused.clone() - exact.clone())
        .abs()
        .max()
        .into_scalar::<f32>();
    assert!(rounding > 1e-6, "the products ran in float32, not bf16");
    within(fused, exact, "bf16 context");
    for (name, t) in ["dq", "dk", "dv"].into_iter().zip(&qkv) {
        let (a, e) = (t.grad(&g1).expect("grad"), t.grad(&g2).expect("grad"));
        within(a, e, name);
    }
    let flex = Tensor::<3>::ones([1, 2, 4], &Device::flex());
    let flex_bias = Tensor::<4>::zeros([1, 1, 1, 2], &Device::flex());
    let refused = crate::fused::attention_core_bf16([&flex, &flex, &flex], &flex_bias, 2, 1.0);
    assert!(refused.is_none(), "flex has no bf16 products");
}

/// `max |a − b| ≤ 1e-2·max |b|`: a bf16 rounding of an element (2⁻⁸ relative) either way. The
/// fused op and burn's casts may accumulate a product in another order, and a last float32 bit
/// can then round to the neighbouring bf16 value; a wrong formula differs by far more.
fn assert_within_bf16<const D: usize>(a: Tensor<D>, b: Tensor<D>, what: &str) {
    let scale = b.clone().abs().max().into_scalar::<f32>().max(1e-12);
    let diff = (a - b).abs().max().into_scalar::<f32>();
    assert!(
        diff <= 1e-2 * scale,
        "{what}: differs by {diff} (scale {scale})"
    );
}

/// The bf16 linear layer as one op against burn's casts around the product
/// (`MatmulPrecision::Bf16`), tracked, both layouts of the weight: the output and the gradients
/// of the input, the weight and the bias agree, and the output is not the float32 one.
#[test]
fn bf16_linear_is_the_composed_casts_in_one_op() {
    let device = libtorch_cpu().autodiff();
    let normal = Distribution::Normal(0.0, 1.0);
    for transposed in [false, true] {
        let (n, d_in, d_out) = (33, 64, 17);
        let stored = if transposed {
            [d_out, d_in]
        } else {
            [d_in, d_out]
        };
        let x = Tensor::<2>::random([n, d_in], normal, &device).require_grad();
        let w = Tensor::<2>::random(stored, normal, &device).require_grad();
        let b = Tensor::<1>::random([d_out], normal, &device).require_grad();
        let g = Tensor::<2>::random([n, d_out], normal, &device);
        let fused = crate::fused::linear_bf16(&x, &w, &b, transposed, FloatDType::F32);
        let fused = fused.expect("libtorch: fused");
        assert!(fused.is_tracked());

        let leaf = |t: &Tensor<2>| Tensor::<2>::from_data(t.to_data(), &device).require_grad();
        let (x2, w2) = (leaf(&x), leaf(&w));
        let b2 = Tensor::<1>::from_data(b.to_data(), &device).require_grad();
        let used = if transposed {
            w2.clone().transpose()
        } else {
            w2.clone()
        };
        let composed = crate::model::MatmulPrecision::Bf16.matmul(x2.clone(), used.clone())
            + b2.clone().unsqueeze();
        let what = format!("transposed {transposed}");
        assert_within_bf16(fused.clone(), composed.clone(), &what);
        let fp32 = x2.clone().matmul(used) + b2.clone().unsqueeze();
        let off = (fused.clone() - fp32).abs().max().into_scalar::<f32>();
        assert!(off > 0.0, "{what}: the output is float32's, not bf16's");

        let g1 = (fused * g.clone()).sum().backward();
        let g2 = (composed * g).sum().backward();
        assert_within_bf16(x.grad(&g1).expect("dx"), x2.grad(&g2).expect("dx"), &what);
        assert_within_bf16(w.grad(&g1).expect("dW"), w2.grad(&g2).expect("dW"), &what);
        assert_within_bf16(b.grad(&g1).expect("db"), b2.grad(&g2).expect("db"), &what);
    }
}

/// With its result left in bf16 (a product that feeds another): one `addmm` in bf16, as
/// autocast's `nn.Linear`, against burn's casts (the bias rounded to bf16 and added in bf16),
/// for a float32 input and a bf16 one (the activation between two products). The output is
/// bf16; the input's gradient comes back in the input's dtype, the weight's and the bias's in
/// float32, all within bf16's rounding of the composed ones.
#[test]
fn bf16_linear_leaves_its_result_in_bf16_and_each_gradient_in_its_inputs_dtype() {
    let device = libtorch_cpu().autodiff();
    let normal = Distribution::Normal(0.0, 1.0);
    let (n, d_in, d_out) = (33, 64, 17);
    for x_dtype in [FloatDType::F32, FloatDType::BF16] {
        // A fresh leaf with the same values (`from_data` would convert bf16 to float32).
        let leaf = |t: &Tensor<2>| t.clone().detach().require_grad();
        let x = Tensor::<2>::random([n, d_in], normal, &device).cast(x_dtype);
        let x = x.require_grad();
        let w = Tensor::<2>::random([d_in, d_out], normal, &device).require_grad();
        assert_eq!(x.dtype() == DType::BF16, x_dtype == FloatDType::BF16);
        let b = Tensor::<1>::random([d_out], normal, &device).require_grad();
        let g = Tensor::<2>::random([n, d_out], normal, &device);
        let fused = crate::fused::linear_bf16(&x, &w, &b, false, FloatDType::BF16);
        let fused = fused.expect("libtorch: fused");
        assert_eq!(fused.dtype(), DType::BF16);

        let (x2, w2) = (leaf(&x), leaf(&w));
        let b2 = b.clone().detach().require_grad();
        let bf16 = |t: Tensor<2>| t.cast(FloatDType::BF16);
        let composed = bf16(x2.clone()).matmul(bf16(w2.clone()))
            + b2.clone().cast(FloatDType::BF16).unsqueeze();
        let [fused, composed] = [fused, composed].map(|t| t.cast(FloatDType::F32));
        let what = format!("input {x_dtype:?}");
        assert_within_bf16(fused.clone(), composed.clone(), &what);

        let g1 = (fused * g.clone()).sum().backward();
        let g2 = (composed * g).sum().backward();
        let (dx, dw, db) = (x.grad(&g1), w.grad(&g1), b.grad(&g1));
        let [dx, dw] = [dx, dw].map(|t| t.expect("a gradient"));
        let db = db.expect("db");
        assert_eq!(dx.dtype(), x.dtype(), "{what}: dx");
        assert_eq!([dw.dtype(), db.dtype()], [DType::F32; 2], "{what}: dW, db");
        let f32 = |t: Tensor<2>| t.cast(FloatDType::F32);
        let dx2 = f32(x2.grad(&g2).expect("dx"));
        assert_within_bf16(f32(dx), dx2, &what);
        assert_within_bf16(dw, f32(w2.grad(&g2).expect("dW")), &what);
        assert_within_bf16(db, b2.grad(&g2).expect("db").cast(FloatDType::F32), &what);
    }
}

/// The per-parameter sums that LAMB's norms take on CUDA against torch's `segment_reduce` (what
/// the CPU runs), with a one-row segment, and a small segment after a large one (a fresh
/// bias's w² after `tiny`'s word embeddings': 2.7 M values of 0.02²), which a running sum in
/// float32 would lose (its rounding, ~6e-5 of the total 1,080, is 1,000 times the sum, 5e-8).
#[test]
fn reduced_sums_are_segment_reduces_sums() {
    use tch::{Kind, Tensor as T};
    let lengths = [1_i64, 700, 3, 296];
    let x = T::randn([1000, 2], (Kind::Float, tch::Device::Cpu)).square();
    let summed = crate::fused::lamb::reduced_sums(&x, &lengths);
    let reduced = T::segment_reduce(
        &x,
        "sum",
        Some(&T::from_slice(&lengths)),
        None,
        None,
        0,
        false,
        0.0,
    );
    assert_eq!(summed.size(), [4, 2]);
    let rel = ((&summed - &reduced).abs() / reduced.abs())
        .max()
        .double_value(&[]);
    assert!(rel < 1e-6, "{rel}");

    let big = T::full([2_700_000, 2], 4e-4, (Kind::Float, tch::Device::Cpu));
    let small = T::full([5, 2], 1e-8, (Kind::Float, tch::Device::Cpu));
    let sums = crate::fused::lamb::reduced_sums(&T::cat(&[big, small], 0), &[2_700_000, 5]);
    let last = sums.double_value(&[1, 0]);
    assert!((last - 5e-8).abs() < 5e-8 * 1e-4, "{last}");
    let first = sums.double_value(&[0, 1]);
    assert!((first - 1080.0).abs() < 1080.0 * 1e-5, "{first}");
}
