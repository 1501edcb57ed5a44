//! The attention block's two softmax paths: burn's ops under autodiff, the fused kernel (scale
//! and padding bias folded in) when untracked. Both must compute the same attention. The packed
//! Q, K and V product, per layer and once for layers sharing a block. And the pretraining
//! loss's gather of the masked positions against the logits of every position.

use burn::module::Module;
use burn::tensor::activation::softmax;
use burn::tensor::{Device, Distribution, Tensor, TensorData};

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

/// On libtorch Q, K and V come from one product with the three weights concatenated and go
/// into SDPA as views of it: the same context as three products and three inputs, and the same
/// gradients for each of the three layers' weights and biases, in float32 (to 1e-5) and in
/// bf16 (the products' roundings are the same, the sums' order may differ).
#[cfg(feature = "tch")]
#[test]
fn packed_projections_attend_as_three_separate_ones() {
    use burn::tensor::FloatDType;
    let tch_cpu = crate::device::resolve(crate::device::DeviceChoice::TchCpu);
    let device = tch_cpu
        .expect("a tch build has libtorch's CPU")
        .device
        .autodiff();
    device.seed(12);
    let c = AlbertConfig::named("tiny").expect("tiny is a known size");
    let normal = Distribution::Normal(0.0, 1.0);
    let mut attention = AlbertAttention::new(&c, &device);
    let layers = [
        &mut attention.query,
        &mut attention.key,
        &mut attention.value,
    ];
    random_biases(layers, &device);
    let [b, s, h] = [2, 7, c.hidden_size];
    let x = Tensor::<3>::random([b, s, h], normal, &device);
    let mask: Vec<i64> = (0..b * s).map(|i| i64::from(i % 5 != 4)).collect();
    let zeros = vec![0; b * s];
    let bias = AlbertInput::from_rows(b, s, zeros.clone(), zeros, mask, &device).attention_bias();
    let w = Tensor::<3>::random([b, s, h], normal, &device);
    for (p, bound) in [(MatmulPrecision::Fp32, 1e-5), (MatmulPrecision::Bf16, 1e-2)] {
        let mut attention = attention.clone();
        attention.precision = p;
        assert!(crate::fused::packs_attention(
            &x,
            &bias,
            attention.num_heads
        ));
        let packed = attention
            .packed_context(&x, &bias, None)
            .expect("packed on libtorch");
        let packed = dense_in(p, &attention.dense, packed);
        // The block takes that path.
        let attended = attention.attend(x.clone(), bias.clone()).into_data();
        assert_eq!(attended, packed.to_data(), "{p:?}");
        let three = dense_in(
            p,
            &attention.dense,
            attention.context(x.clone(), bias.clone(), true),
        );
        let g1 = (packed.clone() * w.clone()).sum().backward();
        let g2 = (three.clone() * w.clone()).sum().backward();
        let close = |a: Tensor<3>, e: Tensor<3>, what: &str| {
            let [a, e] = [a, e].map(|t| t.cast(FloatDType::F32));
            let scale = e.clone().abs().max().into_scalar::<f32>();
            let diff = (a - e).abs().max().into_scalar::<f32>();
            assert!(
                diff <= bound * scale,
                "{p:?} {what}: {diff} (scale {scale})"
            );
        };
        close(packed, three, "context");
        // Each gradient against the largest of its kind over the three layers: the key's bias
        // has an exact gradient of 0 (softmax ignores a shift of a query's scores), so its own
        // scale is rounding noise.
        let layers = [&attention.query, &attention.key, &attention.value];
        let weights = layers.map(|l| {
            let dw = |g: &_| l.weight.grad(g).expect("dW").cast(FloatDType::F32);
            (dw(&g1).reshape([-1]), dw(&g2).reshape([-1]))
        });
        let biases = layers.map(|l| {
            let db = |g: &_| l.bias.as_ref().expect("a bias").grad(g).expect("db");
            (db(&g1).cast(FloatDType::F32), db(&g2).cast(FloatDType::F32))
        });
        for (what, pairs) in [("weights", weights), ("biases", biases)] {
            let scale = pairs
                .iter()
                .map(|(_, e)| e.clone().abs().max().into_scalar::<f32>())
                .fold(0.0, f32::max);
            for (name, (a, e)) in ["query", "key", "value"].into_iter().zip(pairs) {
                let diff = (a - e).abs().max().into_scalar::<f32>();
                assert!(
                    diff <= bound * scale,
                    "{p:?} {name} {what}: {diff} (scale {scale})"
                );
            }
        }
    }
}

/// An encoder whose layers share one attention block packs its Q, K and V weights once a
/// forward pass (two `cat`s, whatever the layers), and computes what the layers packing them
/// each for itself compute: the same states, and the same gradients for the six shared
/// weights up to the order of the sums. In float32 and in bf16 mixed precision, where the pass
/// also casts each shared weight once and each layer's gradient is added into the weight's
/// float32 sum (`fused::shared_weight`).
#[cfg(feature = "tch")]
#[test]
fn a_shared_attention_block_is_packed_once_a_forward_pass() {
    let layers = AlbertConfig::named("tiny").expect("tiny").num_hidden_layers;
    for precision in [MatmulPrecision::Fp32, MatmulPrecision::Bf16] {
        let pass = |e: &AlbertEncoder, x, b| e.forward(x, b);
        packed_once_as_layer_by_layer(precision, pass, layer_by_layer, 2 * layers as u64);
    }
}

/// The encoder's layers one by one, each taking its blocks as they are (what a pass did before
/// it made the shared blocks once).
#[cfg(feature = "tch")]
fn layer_by_layer(e: &AlbertEncoder, embedded: Tensor<3>, bias: Tensor<4>) -> Tensor<3> {
    let mut x = e.project(embedded);
    for i in 0..e.num_layers {
        x = e.layer(i).forward(x, bias.clone());
    }
    x
}

/// The same for the pass that keeps `[CLS]` alone (fine-tuning's classifiers): the layers
/// before the last take the pack made once; the last one's queries are `[CLS]`'s own product.
#[cfg(feature = "tch")]
#[test]
fn a_shared_attention_block_is_packed_once_for_the_cls_pass_too() {
    let layers = AlbertConfig::named("tiny").expect("tiny").num_hidden_layers;
    packed_once_as_layer_by_layer(
        MatmulPrecision::Fp32,
        |e, x, bias| e.forward_cls(x, bias),
        |e, embedded, bias| {
            let mut x = e.project(embedded);
            for i in 0..e.num_layers - 1 {
                x = e.layer(i).forward(x, bias.clone());
            }
            e.layer(e.num_layers - 1).forward_first(x, bias)
        },
        2 * (layers - 1) as u64,
    );
}

/// `tiny`'s encoder (one shared block, random Q/K/V biases) in `precision` on libtorch's CPU,
/// each pass from the same embedded input: `hoisted` calls `cat` twice (the weights and the biases, packed
/// once) where `each` calls it `each_cats` times, with the same states and, within 1e-5, the
/// same weight gradients of the six linear layers.
#[cfg(feature = "tch")]
fn packed_once_as_layer_by_layer(
    precision: MatmulPrecision,
    hoisted: impl Fn(&AlbertEncoder, Tensor<3>, Tensor<4>) -> Tensor<3>,
    each: impl Fn(&AlbertEncoder, Tensor<3>, Tensor<4>) -> Tensor<3>,
    each_cats: u64,
) {
    use burn::tensor::FloatDType;
    let tch_cpu = crate::device::resolve(crate::device::DeviceChoice::TchCpu);
    let device = tch_cpu.expect("libtorch's CPU").device.autodiff();
    device.seed(13);
    let c = AlbertConfig::named("tiny").expect("tiny is a known size");
    let mut encoder = AlbertEncoder::new(&c, &device).with_precision(precision);
    let a = &mut encoder.attentions[0];
    random_biases([&mut a.query, &mut a.key, &mut a.value], &device);
    let [b, s] = [2, 7];
    let embedded = Tensor::<3>::random(
        [b, s, c.embedding_size],
        Distribution::Normal(0.0, 1.0),
        &device,
    );
    let zeros = vec![0; b * s];
    let bias = AlbertInput::from_rows(b, s, zeros.clone(), zeros, vec![1; b * s], &device)
        .attention_bias();
    let cats = |ops: &std::collections::BTreeMap<String, u64>| -> u64 {
        ops.iter()
            .filter(|(k, _)| k.starts_with("aten::cat") && !k.contains(" > "))
            .map(|(_, n)| n)
            .sum()
    };
    let _one = crate::op_tally::one_count_at_a_time();
    let run = |f: &dyn Fn(&AlbertEncoder, Tensor<3>, Tensor<4>) -> Tensor<3>| {
        crate::op_tally::count_ops_here(|| f(&encoder, embedded.clone(), bias.clone())).unwrap()
    };
    let ((hoisted, ops), (each, each_ops)) = (run(&hoisted), run(&each));
    assert_eq!(cats(&ops), 2, "{ops:#?}");
    assert_eq!(cats(&each_ops), each_cats);
    assert_eq!(hoisted.to_data(), each.to_data());
    let w = Tensor::<3>::random(hoisted.dims(), Distribution::Normal(0.0, 1.0), &device);
    let g1 = (hoisted * w.clone()).sum().backward();
    let g2 = (each * w).sum().backward();
    let (a, f) = (&encoder.attentions[0], &encoder.ffns[0]);
    // Q, K and V packed once; the output projection and the feed-forward's two weights made
    // once for the pass, their layers' gradients summed in place by the products.
    let weights = [
        ("query", &a.query),
        ("key", &a.key),
        ("value", &a.value),
        ("dense", &a.dense),
        ("ffn", &f.ffn),
        ("ffn_output", &f.ffn_output),
    ];
    for (name, l) in weights {
        let dw = |g: &_| l.weight.grad(g).expect("dW").cast(FloatDType::F32);
        let (x, e) = (dw(&g1), dw(&g2));
        let scale = e.clone().abs().max().into_scalar::<f32>();
        let diff = (x - e).abs().max().into_scalar::<f32>();
        assert!(diff <= 1e-5 * scale, "{name}: {diff} (scale {scale})");
    }
}

/// Gives each of `layers` a bias drawn from N(0, 1): a fresh model's are zero, which would hide
/// what a bias does in the paths the tests compare.
#[cfg(feature = "tch")]
pub(super) fn random_biases<const N: usize>(layers: [&mut Linear; N], device: &Device) {
    for l in layers {
        let [_, d] = l.weight.dims();
        let bias = Tensor::random([d], Distribution::Normal(0.0, 1.0), device);
        l.bias = Some(burn::module::Param::from_tensor(bias));
    }
}

/// `forward_pretrain`'s MLM loss, which gathers each row's masked positions out of the flattened
/// states (by row offsets made on the device), is the weighted mean cross-entropy of the logits
/// `forward_all` gives at those positions of those rows: computed here on the host, with a
/// padding prediction (weight 0) that must not count.
#[test]
fn the_mlm_loss_is_taken_at_each_rows_own_masked_positions() {
    let device = crate::device::under_test();
    device.seed(17);
    let mut c = AlbertConfig::named("tiny").expect("tiny is a known size");
    c.vocab_size = 50;
    let model = AlbertForPreTraining::new(&c, &device);
    let (b, s, m) = (3, 8, 2);
    let ids: Vec<i64> = (0..b * s).map(|i| (i * 7 % 50) as i64).collect();
    let input = AlbertInput::from_rows(b, s, ids, vec![0; b * s], vec![1; b * s], &device);
    let positions = [[1i64, 6], [0, 3], [5, 0]];
    let labels = [[4i64, 9], [13, 2], [48, 0]];
    let weights = [[1.0f32, 1.0], [1.0, 1.0], [1.0, 0.0]];
    let int2 = |v: [[i64; 2]; 3]| {
        Tensor::<2, Int>::from_data(TensorData::new(v.concat(), [b, m]), &device)
    };
    let mlm = MlmTargets {
        positions: int2(positions),
        ids: int2(labels),
        weights: Tensor::from_data(TensorData::new(weights.concat(), [b, m]), &device),
        mask_id: None,
    };
    let sop = Tensor::<1, Int>::zeros([b], &device);
    let got = model
        .forward_pretrain(&input, &mlm, sop)
        .mlm_loss
        .into_scalar::<f64>();

    let (logits, _, _) = model.forward_all(&input);
    let v = c.vocab_size;
    let all = logits
        .into_data()
        .convert::<f32>()
        .try_to_vec::<f32>()
        .expect("f32");
    let (mut total, mut weight) = (0.0f64, 0.0f64);
    for r in 0..b {
        for j in 0..m {
            let at = (r * s + positions[r][j] as usize) * v;
            let row: Vec<f64> = all[at..at + v].iter().map(|&x| f64::from(x)).collect();
            let top = row.iter().cloned().fold(f64::MIN, f64::max);
            let lse = top + row.iter().map(|x| (x - top).exp()).sum::<f64>().ln();
            total += f64::from(weights[r][j]) * (lse - row[labels[r][j] as usize]);
            weight += f64::from(weights[r][j]);
        }
    }
    let want = total / weight;
    assert!(
        (got - want).abs() < 1e-4 * want.abs().max(1.0),
        "MLM loss {got}, at the rows' own positions {want}"
    );
}
