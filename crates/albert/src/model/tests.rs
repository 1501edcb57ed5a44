//! The attention block's two softmax paths: burn's ops under autodiff, the fused kernel (scale
//! and padding bias folded in) when untracked. Both must compute the same attention.

use burn::module::Module;
use burn::tensor::{Device, Distribution, Tensor};

use super::*;

/// A tracked pass (training: burn's softmax) and an untracked one (inference: the fused
/// softmax) of the same block on the same input agree to rounding, with padding in the mask;
/// and the tracked one has gradients for the query and key weights.
#[test]
fn tracked_and_untracked_attention_agree() {
    let device = Device::flex().autodiff();
    device.seed(11);
    let c = AlbertConfig::named("tiny").expect("tiny is a known size");
    let attention = AlbertAttention::new(&c, &device);
    let [b, s, h] = [2, 9, c.hidden_size];
    let x = Tensor::<3>::random([b, s, h], Distribution::Normal(0.0, 1.0), &device);
    let mask: Vec<i64> = (0..b * s).map(|i| i64::from(i % 7 != 5)).collect();
    let zeros = vec![0; b * s];
    let input = AlbertInput::from_rows(b, s, zeros.clone(), zeros, mask, &device);
    let bias = input.attention_bias();

    let tracked = attention.attend(x.clone(), bias.clone());
    assert!(tracked.is_tracked());
    let untracked = attention.clone().no_grad().attend(x, bias);
    assert!(!untracked.is_tracked());
    let diff = (tracked.clone().detach() - untracked)
        .abs()
        .max()
        .into_scalar::<f32>();
    assert!(
        diff < 1e-5,
        "tracked and untracked attention differ by {diff}"
    );

    let grads = tracked.sum().backward();
    for (name, weight) in [("query", &attention.query), ("key", &attention.key)] {
        let grad = weight.weight.grad(&grads).expect("a gradient");
        let norm = grad.abs().sum().into_scalar::<f32>();
        assert!(norm > 0.0, "no gradient reaches the {name} weights");
    }
}

/// Inference on plain flex (the fused dense layers and attention core) against the block
/// computed from burn's own ops (`Linear::forward`, heads split and merged, burn's softmax):
/// the same attention to ~1e-5 relative, with padding in the mask.
#[test]
fn untracked_fused_attention_block_matches_burns_ops() {
    let device = Device::flex();
    device.seed(13);
    let c = AlbertConfig::named("tiny").expect("tiny is a known size");
    let attention = AlbertAttention::new(&c, &device);
    let [b, s, h] = [3, 11, c.hidden_size];
    let x = Tensor::<3>::random([b, s, h], Distribution::Normal(0.0, 1.0), &device);
    let mask: Vec<i64> = (0..b * s).map(|i| i64::from(i % 5 != 3)).collect();
    let zeros = vec![0; b * s];
    let input = AlbertInput::from_rows(b, s, zeros.clone(), zeros, mask, &device);
    let bias = input.attention_bias();
    let fused = attention.attend(x.clone(), bias.clone());

    let (heads, d) = (attention.num_heads, h / attention.num_heads);
    let project = |l: &burn::nn::Linear, t: Tensor<3>| l.forward(t);
    let split = |t: Tensor<3>| t.reshape([b, s, heads, d]).swap_dims(1, 2);
    let [q, k, v] =
        [&attention.query, &attention.key, &attention.value].map(|l| split(project(l, x.clone())));
    let scores = q
        .matmul(k.swap_dims(2, 3))
        .mul_scalar(1.0 / (d as f64).sqrt());
    let probs = softmax(scores + bias, 3);
    let context = probs.matmul(v).swap_dims(1, 2).reshape([b, s, h]);
    let composed = project(&attention.dense, context);

    let scale = composed.clone().abs().max().into_scalar::<f32>();
    let diff = (fused - composed).abs().max().into_scalar::<f32>();
    assert!(
        diff <= 1e-5 * scale,
        "fused and composed attention differ by {diff} (scale {scale})"
    );
}

/// The exact GELU: fused when untracked on flex, burn's `gelu` (libm `erff`) when tracked; the
/// two agree to ~1e-6 over the activations' range (σ = 4: the tails included).
#[test]
fn exact_gelu_fused_and_burns_agree() {
    let device = Device::flex().autodiff();
    device.seed(17);
    let x = Tensor::<2>::random([37, 129], Distribution::Normal(0.0, 4.0), &device);
    let fused = ops::activate(x.clone(), Activation::Gelu);
    let tracked = ops::activate(x.require_grad(), Activation::Gelu);
    assert!(!fused.is_tracked() && tracked.is_tracked());
    let diff = (fused - tracked.detach()).abs().max().into_scalar::<f32>();
    assert!(diff < 2e-6, "fused and burn's exact GELU differ by {diff}");
}
