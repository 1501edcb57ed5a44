//! The fused training ops against burn's composed ops on autodiff flex: the forward values and
//! every gradient, on random inputs, with a random weighting of the output (a plain sum would
//! give the softmax a zero gradient and hide a wrong backward). The kernels run at the active
//! level; `kernels_tests.rs` checks that every level computes the same bits. In a `tch` build
//! with `ALBERT_TEST_DEVICE=tch-cpu` (or `cuda:0`) the autodiff tests run on that device, and
//! check libtorch's fused ops (`torch.rs`) the same way.

use burn::module::Param;
use burn::nn::LayerNormConfig;
use burn::tensor::{Device, Distribution, Tensor};

use super::*;

/// `max |a − b| ≤ 1e-5·max |b|` (relative to the tensor's scale).
fn assert_close<const D: usize>(a: Tensor<D>, b: Tensor<D>, what: &str) {
    let scale = b.clone().abs().max().into_scalar::<f32>().max(1e-12);
    let diff = (a - b).abs().max().into_scalar::<f32>();
    assert!(
        diff <= 1e-5 * scale,
        "{what}: differs by {diff} (scale {scale})"
    );
}

/// A fresh leaf with the values of `t`, for the composed path's own graph.
fn leaf<const D: usize>(t: &Tensor<D>) -> Tensor<D> {
    Tensor::from_data(t.to_data(), &t.device()).require_grad()
}

/// The device under test (`ALBERT_TEST_DEVICE`, else flex), with autodiff.
fn autodiff() -> Device {
    let device = crate::device::under_test().autodiff();
    device.seed(23);
    device
}

#[test]
fn gelu_values_and_gradient_match_burns_ops() {
    let device = autodiff();
    let x = Tensor::<3>::random([3, 7, 50], Distribution::Normal(0.0, 3.0), &device).require_grad();
    let w = Tensor::<3>::random([3, 7, 50], Distribution::Normal(0.0, 1.0), &device);
    assert!(applies(&x));
    let fused = super::super::gelu_tanh_op(x.clone()).expect("tracked: the fused op");
    assert!(fused.is_tracked());
    let x2 = leaf(&x);
    let composed = crate::model::gelu_tanh_composed(x2.clone());
    assert_close(fused.clone(), composed.clone(), "gelu");

    let g1 = (fused * w.clone()).sum().backward();
    let g2 = (composed * w).sum().backward();
    let (d1, d2) = (
        x.grad(&g1).expect("a gradient"),
        x2.grad(&g2).expect("a gradient"),
    );
    assert_close(d1, d2, "gelu's gradient");
}

#[test]
fn attention_softmax_values_and_gradient_match_burns_ops() {
    let device = autodiff();
    let shape = [2, 3, 5, 40];
    let scores = Tensor::<4>::random(shape, Distribution::Normal(0.0, 3.0), &device).require_grad();
    let w = Tensor::<4>::random(shape, Distribution::Normal(0.0, 1.0), &device);
    let mask = Tensor::<2>::random([2, 40], Distribution::Bernoulli(0.7), &device);
    let bias = (mask.neg().add_scalar(1.0) * -1e9).reshape([2, 1, 1, 40]);
    let fused = super::super::attention_probs_tracked(scores.clone(), 0.3, &bias).expect("fused");
    assert!(fused.is_tracked());
    let s2 = leaf(&scores);
    let composed = burn::tensor::activation::softmax(s2.clone().mul_scalar(0.3) + bias, 3);
    assert_close(fused.clone(), composed.clone(), "softmax");

    let g1 = (fused * w.clone()).sum().backward();
    let g2 = (composed * w).sum().backward();
    let d1 = scores.grad(&g1).expect("a gradient");
    let d2 = s2.grad(&g2).expect("a gradient");
    assert!(
        d2.clone().abs().max().into_scalar::<f32>() > 1e-3,
        "a gradient to compare"
    );
    assert_close(d1, d2, "softmax's gradient");
}

#[test]
fn log_softmax_values_and_gradient_match_burns_ops() {
    let device = autodiff();
    let x = Tensor::<2>::random([6, 300], Distribution::Normal(0.0, 4.0), &device).require_grad();
    let w = Tensor::<2>::random([6, 300], Distribution::Normal(0.0, 1.0), &device);
    let fused = super::super::log_softmax_op(x.clone()).expect("fused");
    assert!(fused.is_tracked());
    let x2 = leaf(&x);
    let composed = burn::tensor::activation::log_softmax(x2.clone(), 1);
    assert_close(fused.clone(), composed.clone(), "log_softmax");

    let g1 = (fused * w.clone()).sum().backward();
    let g2 = (composed * w).sum().backward();
    assert_close(
        x.grad(&g1).expect("dx"),
        x2.grad(&g2).expect("dx"),
        "its gradient",
    );
}

#[test]
fn layer_norm_values_and_gradients_match_burns_ops() {
    let device = autodiff();
    let d = 40;
    let mut ln = LayerNormConfig::new(d).with_epsilon(1e-5).init(&device);
    let random = |std| Tensor::<1>::random([d], Distribution::Normal(0.5, std), &device);
    ln.gamma = Param::from_tensor(random(1.0));
    ln.beta = Some(Param::from_tensor(random(0.3)));
    let x = Tensor::<3>::random([4, 6, d], Distribution::Normal(1.0, 2.0), &device).require_grad();
    let w = Tensor::<3>::random([4, 6, d], Distribution::Normal(0.0, 1.0), &device);
    let fused = super::super::layer_norm(&ln, x.clone(), 1e-5);
    assert!(fused.is_tracked());
    let x2 = leaf(&x);
    let composed = ln.forward(x2.clone());
    assert_close(fused.clone(), composed.clone(), "layer norm");

    let g1 = (fused * w.clone()).sum().backward();
    let g2 = (composed * w).sum().backward();
    let grad = |p: &Param<Tensor<1>>, g| p.grad(g).expect("a gradient");
    assert_close(x.grad(&g1).expect("dx"), x2.grad(&g2).expect("dx"), "dx");
    assert_close(grad(&ln.gamma, &g1), grad(&ln.gamma, &g2), "dγ");
    let beta = ln.beta.as_ref().expect("a bias");
    assert_close(grad(beta, &g1), grad(beta, &g2), "dβ");
}

/// Untracked tensors (the untracked kernels' case), tracked scores with a tracked bias (no
/// gradient would reach it) and empty tensors are refused.
#[test]
fn the_fused_ops_apply_only_where_they_should() {
    let device = autodiff();
    let scores = Tensor::<4>::ones([1, 1, 2, 3], &device).require_grad();
    let bias = Tensor::<4>::zeros([1, 1, 1, 3], &device).require_grad();
    assert!(super::super::attention_probs_tracked(scores, 1.0, &bias).is_err());
    // Untracked, flex's GELU runs in place (`fused::gelu_tanh`); libtorch's op takes it.
    let x = Tensor::<2>::ones([2, 3], &device);
    let on_flex = device.clone().without_autodiff() == Device::flex();
    assert_eq!(super::super::gelu_tanh_op(x).is_err(), on_flex);
    // Empty tensors (rows of width 0) stay with burn's ops, which handle them.
    let empty = Tensor::<2>::ones([2, 0], &device).require_grad();
    assert!(super::super::log_softmax_op(empty.clone()).is_err());
    let y = super::super::log_softmax_op(Tensor::<2>::ones([0, 3], &device).require_grad());
    assert!(y.is_err());
    let bias = Tensor::<4>::zeros([2, 1, 1, 0], &device);
    let scores = Tensor::<4>::ones([2, 1, 1, 0], &device).require_grad();
    assert!(super::super::attention_probs_tracked(scores, 1.0, &bias).is_err());
}

/// The dense op against `x·W + b` from burn's ops, with the weight stored as used and stored
/// transposed (the MLM decoder's tied embeddings), on shapes where gemm runs on one thread and
/// on rayon's: values and the gradients of all three inputs.
#[test]
fn linear_values_and_gradients_match_burns_ops() {
    let device = autodiff();
    for (n, d_in, d_out) in [(7, 5, 3), (300, 200, 190)] {
        for transposed in [false, true] {
            let normal = Distribution::Normal(0.0, 1.0);
            let x = Tensor::<2>::random([n, d_in], normal, &device).require_grad();
            let stored = if transposed {
                [d_out, d_in]
            } else {
                [d_in, d_out]
            };
            let w = Tensor::<2>::random(stored, normal, &device).require_grad();
            let b = Tensor::<1>::random([d_out], normal, &device).require_grad();
            let g = Tensor::<2>::random([n, d_out], normal, &device);
            let fused = super::super::linear(&x, &w, &b, transposed).expect("fused");
            assert!(fused.is_tracked());
            let (x2, w2, b2) = (leaf(&x), leaf(&w), leaf(&b));
            let used = if transposed {
                w2.clone().transpose()
            } else {
                w2.clone()
            };
            let composed = x2.clone().matmul(used) + b2.clone().reshape([1, d_out]);
            let what = format!("[{n}, {d_in}]·[{d_in}, {d_out}], transposed {transposed}");
            assert_close(fused.clone(), composed.clone(), &what);

            let g1 = (fused * g.clone()).sum().backward();
            let g2 = (composed * g).sum().backward();
            assert_close(x.grad(&g1).expect("dx"), x2.grad(&g2).expect("dx"), &what);
            assert_close(w.grad(&g1).expect("dW"), w2.grad(&g2).expect("dW"), &what);
            assert_close(b.grad(&g1).expect("db"), b2.grad(&g2).expect("db"), &what);
        }
    }
}

/// The attention core against burn's ops (heads split by reshape and swap, two batched
/// products, the softmax): the context, and the gradients of Q, K and V, with padding.
#[test]
fn attention_values_and_gradients_match_burns_ops() {
    let device = autodiff();
    let ([b, s, heads, d], scale) = ([2, 9, 3, 4], 0.5);
    let h = heads * d;
    let normal = Distribution::Normal(0.0, 1.0);
    let qkv = [0; 3].map(|_| Tensor::<3>::random([b, s, h], normal, &device).require_grad());
    let g = Tensor::<3>::random([b, s, h], normal, &device);
    let mask = Tensor::<2>::random([b, s], Distribution::Bernoulli(0.7), &device);
    let bias = (mask.neg().add_scalar(1.0) * -1e9).reshape([b, 1, 1, s]);
    let [q, k, v] = &qkv;
    let fused = super::super::attention_core([q, k, v], &bias, heads, scale).expect("fused");
    assert!(fused.is_tracked());

    let leaves = qkv.clone().map(|t| leaf(&t));
    let split = |t: Tensor<3>| t.reshape([b, s, heads, d]).swap_dims(1, 2);
    let [q2, k2, v2] = leaves.clone().map(split);
    let probs = burn::tensor::activation::softmax(
        q2.matmul(k2.swap_dims(2, 3)).mul_scalar(scale) + bias,
        3,
    );
    let composed = probs.matmul(v2).swap_dims(1, 2).reshape([b, s, h]);
    assert_close(fused.clone(), composed.clone(), "attention");

    let g1 = (fused * g.clone()).sum().backward();
    let g2 = (composed * g).sum().backward();
    for (name, (t, t2)) in ["dq", "dk", "dv"].iter().zip(qkv.iter().zip(&leaves)) {
        let (d1, d2) = (
            t.grad(&g1).expect("a gradient"),
            t2.grad(&g2).expect("a gradient"),
        );
        assert_close(d1, d2, name);
    }
}

/// With padding, neither the attention core's output nor any of its gradients holds a
/// subnormal value: padded keys take exactly zero probability (a subnormal one made every
/// gemm of the backward take the CPU's slow path, 3.7× slower pretraining on padded data).
#[test]
fn padded_attention_has_no_subnormal_values_or_gradients() {
    let device = autodiff();
    let ([b, s, heads, d], scale) = ([2, 24, 2, 8], 0.35);
    let normal = Distribution::Normal(0.0, 1.0);
    let qkv = [0; 3].map(|_| Tensor::<3>::random([b, s, heads * d], normal, &device));
    let qkv = qkv.map(|t| t.require_grad());
    let g = Tensor::<3>::random([b, s, heads * d], normal, &device);
    let keep = Tensor::<2>::ones([b, 10], &device);
    let mask = Tensor::cat(vec![keep, Tensor::zeros([b, s - 10], &device)], 1);
    let bias = (mask.neg().add_scalar(1.0) * -1e9).reshape([b, 1, 1, s]);
    let [q, k, v] = &qkv;
    let out = super::super::attention_core([q, k, v], &bias, heads, scale).expect("fused");
    let grads = (out.clone() * g).sum().backward();
    let mut checked = vec![("output", out)];
    for (name, t) in ["dq", "dk", "dv"].into_iter().zip(&qkv) {
        checked.push((name, t.grad(&grads).expect("a gradient")));
    }
    for (name, t) in checked {
        let values = t.into_data().try_to_vec::<f32>().expect("f32");
        let subnormal = values.iter().filter(|v| v.is_subnormal()).count();
        assert_eq!(subnormal, 0, "{name}: {subnormal} subnormal values");
    }
}

/// `t`'s values as a flex primitive, for the kernels called directly.
fn primitive<const D: usize>(t: &Tensor<D>) -> FlexTensor {
    FlexTensor::from_data(t.to_data())
}

/// Inference (untracked tensors on plain flex): the dense layer, stored as used and
/// transposed, against `x·W + b` from burn's ops.
#[test]
fn untracked_linear_matches_burns_ops() {
    let device = Device::flex();
    device.seed(29);
    let normal = Distribution::Normal(0.0, 1.0);
    for (n, d_in, d_out) in [(7, 5, 3), (300, 200, 190)] {
        for transposed in [false, true] {
            let x = Tensor::<2>::random([n, d_in], normal, &device);
            let stored = if transposed {
                [d_out, d_in]
            } else {
                [d_in, d_out]
            };
            let w = Tensor::<2>::random(stored, normal, &device);
            let b = Tensor::<1>::random([d_out], normal, &device);
            let fused = super::super::linear(&x, &w, &b, transposed).expect("fused");
            assert!(!fused.is_tracked());
            let used = if transposed { w.transpose() } else { w };
            let composed = x.matmul(used) + b.reshape([1, d_out]);
            let what = format!("untracked [{n}, {d_in}]·[{d_in}, {d_out}], {transposed}");
            assert_close(fused, composed, &what);
        }
    }
}

/// Inference: the attention core's context (one probability block reused for every head)
/// against burn's ops, with padding, through the public entry and at every level the CPU has.
#[test]
fn untracked_attention_matches_burns_ops() {
    let device = Device::flex();
    device.seed(31);
    let normal = Distribution::Normal(0.0, 1.0);
    for [b, s, heads, d] in [[2, 9, 3, 4], [3, 37, 4, 16]] {
        let (h, scale) = (heads * d, 1.0 / (d as f32).sqrt());
        let [q, k, v] = [0; 3].map(|_| Tensor::<3>::random([b, s, h], normal, &device));
        let mask = Tensor::<2>::random([b, s], Distribution::Bernoulli(0.7), &device);
        let bias = (mask.neg().add_scalar(1.0) * -1e9).reshape([b, 1, 1, s]);
        let split = |t: &Tensor<3>| t.clone().reshape([b, s, heads, d]).swap_dims(1, 2);
        let probs = burn::tensor::activation::softmax(
            split(&q)
                .matmul(split(&k).swap_dims(2, 3))
                .mul_scalar(scale)
                + bias.clone(),
            3,
        );
        let composed = probs.matmul(split(&v)).swap_dims(1, 2).reshape([b, s, h]);
        let fused = super::super::attention_core([&q, &k, &v], &bias, heads, scale);
        let fused = fused.expect("fused");
        assert!(!fused.is_tracked());
        assert_close(fused, composed.clone(), "untracked attention");
        let inputs = [&q, &k, &v].map(primitive);
        let bias = primitive(&bias);
        let [qp, kp, vp] = &inputs;
        for level in super::super::CpuLevel::ALL
            .into_iter()
            .filter(|l| l.available())
        {
            let ctx = attention::forward_context([qp, kp, vp, &bias], heads, scale, level);
            let ctx = Tensor::<3>::from_data(ctx.into_data(), &device);
            assert_close(ctx, composed.clone(), &format!("attention at {level}"));
        }
    }
}
