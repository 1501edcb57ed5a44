//! The flat optimiser against burn's `ModuleOptimizer` of the same optimiser, LAMB
//! ([`super::AlbertLamb`]) and AdamW, on a small ALBERT: the same weights after a few steps
//! (one of which leaves some parameters without a gradient, so that their step counts differ),
//! and checkpoints that either one writes and the other resumes from. On flex the flat LAMB
//! runs the per-parameter kernels segment by segment and the flat AdamW burn's ops in burn's
//! order, so the weights must be the same bits; on libtorch (`ALBERT_TEST_DEVICE=tch-cpu`)
//! LAMB's two norms of each parameter are one segmented sum instead of `norm()`, so they agree
//! to rounding.

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::{Device, Tensor, TensorData};

use super::{OptimConfig, OptimizerKind, TrainingOptimizer};
use crate::{AlbertConfig, AlbertForPreTraining};

/// The device under test (`ALBERT_TEST_DEVICE`, else flex), with autodiff.
fn device() -> Device {
    crate::device::under_test().autodiff()
}

/// The largest difference the two optimisers may show, relative to the largest weight.
fn tolerance(device: &Device) -> f32 {
    if device.clone().without_autodiff() == Device::flex() {
        0.0
    } else {
        1e-5
    }
}

/// Both optimisers: every test runs for each.
const KINDS: [OptimizerKind; 2] = [OptimizerKind::Lamb, OptimizerKind::Adamw];

fn config(optimizer: OptimizerKind) -> OptimConfig {
    OptimConfig {
        optimizer,
        learning_rate: 1e-2,
        weight_decay: 0.01,
        beta_1: 0.9,
        beta_2: 0.999,
        epsilon: 1e-6,
        warmup_steps: 0,
        total_steps: 10,
        max_grad_norm: 0.0,
    }
}

/// A small ALBERT whose `[H, H]` matrices start at zero, so that their first trust ratio is
/// google's 1 (a zero weight norm).
fn model(device: &Device) -> AlbertForPreTraining {
    let mut c = AlbertConfig::named("tiny").expect("tiny");
    (c.vocab_size, c.hidden_size, c.num_attention_heads) = (40, 16, 2);
    (c.intermediate_size, c.embedding_size, c.num_hidden_layers) = (24, 8, 2);
    AlbertForPreTraining::new(&c, device).map(&mut ZeroSquare(16))
}

struct ZeroSquare(usize);

impl ModuleMapper for ZeroSquare {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let (id, t, mapper) = param.consume();
        let t = if t.dims().iter().all(|&d| d == self.0) && D == 2 {
            t.zeros_like().require_grad()
        } else {
            t
        };
        Param::from_mapped_value(id, t, mapper)
    }
}

/// Pseudo-random gradients for every parameter of `m` (the same for the same `step`), none for
/// the pooler's when `skip_pooler`. Not from the device's generator: tests running at the same
/// time draw from it in an order that changes from run to run.
fn grads(m: &AlbertForPreTraining, step: u64, skip_pooler: bool) -> GradientsParams {
    struct Random {
        grads: GradientsParams,
        path: Vec<String>,
        skip_pooler: bool,
        state: u64,
    }
    impl ModuleVisitor for Random {
        fn enter_module(&mut self, name: &str, _: &str) {
            self.path.push(name.to_string());
        }
        fn exit_module(&mut self, _: &str, _: &str) {
            self.path.pop();
        }
        fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<D>>) {
            if self.skip_pooler && self.path.iter().any(|s| s == "pooler") {
                return;
            }
            let w = p.val().inner();
            let n = w.shape().num_elements();
            let values: Vec<f32> = (0..n)
                .map(|_| {
                    // A 64-bit LCG (Knuth's MMIX constants); the top bits as a value in [-1, 1).
                    self.state = self
                        .state
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    (self.state >> 40) as f32 / (1u64 << 23) as f32 - 1.0
                })
                .collect();
            let g = Tensor::<D>::from_data(TensorData::new(values, w.shape()), &w.device());
            self.grads.register(p.id, g);
        }
    }
    let mut random = Random {
        grads: GradientsParams::new(),
        path: Vec::new(),
        skip_pooler,
        state: step + 1,
    };
    m.visit(&mut random);
    random.grads
}

/// Every parameter's values, in the module's order.
fn values(m: &AlbertForPreTraining) -> Vec<f32> {
    struct All(Vec<f32>);
    impl ModuleVisitor for All {
        fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<D>>) {
            let data = p.val().into_data().convert::<f32>();
            self.0.extend(data.iter::<f32>());
        }
    }
    let mut all = All(Vec::new());
    m.visit(&mut all);
    all.0
}

/// The largest difference between `a`'s and `b`'s weights, relative to the largest weight.
fn worst(a: &AlbertForPreTraining, b: &AlbertForPreTraining) -> f32 {
    let (a, b) = (values(a), values(b));
    assert_eq!(a.len(), b.len());
    let scale = a.iter().fold(0f32, |s, x| s.max(x.abs()));
    let diff = a
        .iter()
        .zip(&b)
        .fold(0f32, |d, (x, y)| d.max((x - y).abs()));
    diff / scale
}

/// `steps` steps of `opt` from `m`; the second one leaves the pooler without a gradient.
fn train(
    opt: &mut TrainingOptimizer,
    mut m: AlbertForPreTraining,
    steps: std::ops::Range<u64>,
) -> AlbertForPreTraining {
    for step in steps {
        let g = grads(&m, step, step == 1);
        // Both kinds share the schedule.
        m = opt.step(config(OptimizerKind::Lamb).lr_at(step), m, g);
    }
    m
}

fn per_parameter(kind: OptimizerKind) -> TrainingOptimizer {
    TrainingOptimizer::PerParameter(config(kind).build_per_parameter())
}

fn flat(kind: OptimizerKind) -> TrainingOptimizer {
    TrainingOptimizer::Flat(Box::new(config(kind).build_flat()))
}

#[test]
fn the_flat_optimiser_steps_as_the_per_parameter_one() {
    let device = device();
    let start = model(&device);
    for kind in KINDS {
        let want = train(&mut per_parameter(kind), start.clone(), 0..4);
        let got = train(&mut flat(kind), start.clone(), 0..4);
        let worst = worst(&want, &got);
        assert!(worst <= tolerance(&device), "{kind:?} differs by {worst}");
        // The first step moved the pooler, which the second leaves out.
        let moved = train(&mut flat(kind), start.clone(), 0..1);
        assert!(worst_pooler(&start, &moved) > 0.0, "{kind:?}");
    }
}

fn worst_pooler(a: &AlbertForPreTraining, b: &AlbertForPreTraining) -> f32 {
    let (a, b) = (&a.albert.pooler.weight, &b.albert.pooler.weight);
    (a.val() - b.val()).abs().max().into_scalar::<f32>()
}

#[test]
fn checkpoints_cross_between_the_flat_and_the_per_parameter_optimiser() {
    let device = device();
    let start = model(&device);
    let dir = tempfile::tempdir().expect("a temp dir");
    let file = dir.path().join("optimizer.bpk");
    type Build = fn(OptimizerKind) -> TrainingOptimizer;
    let orders: [(&str, Build, Build); 2] = [
        ("flat, then per parameter", flat, per_parameter),
        ("per parameter, then flat", per_parameter, flat),
    ];
    for kind in KINDS {
        let want = train(&mut per_parameter(kind), start.clone(), 0..4);
        for (order, first, then) in orders {
            let mut opt = first(kind);
            // Saved after the step without the pooler: its state is kept apart then.
            let half = train(&mut opt, start.clone(), 0..2);
            opt.save(&file).expect("saved");
            let mut resumed = then(kind).load(&file).expect("loaded");
            let got = train(&mut resumed, half, 2..4);
            let worst = worst(&want, &got);
            assert!(
                worst <= tolerance(&device),
                "{kind:?}, {order}: differs by {worst}"
            );
        }
    }
}

#[test]
fn a_fresh_optimiser_differs_from_a_resumed_one() {
    // The check above can fail: without the saved moments the steps after 2 differ.
    let device = device();
    let start = model(&device);
    for kind in KINDS {
        let want = train(&mut per_parameter(kind), start.clone(), 0..4);
        let half = train(&mut flat(kind), start.clone(), 0..2);
        let got = train(&mut flat(kind), half, 2..4);
        assert!(worst(&want, &got) > 1e-4, "{kind:?}");
    }
}

#[test]
fn a_checkpoint_of_the_other_optimiser_is_not_taken_for_its_own() {
    // LAMB's state and AdamW's are recorded under other names: neither resumes the other's
    // moments (each starts afresh, as burn's loader does), so the steps after differ.
    let device = device();
    let start = model(&device);
    let dir = tempfile::tempdir().expect("a temp dir");
    let file = dir.path().join("optimizer.bpk");
    let mut lamb = flat(OptimizerKind::Lamb);
    let half = train(&mut lamb, start.clone(), 0..2);
    lamb.save(&file).expect("saved");
    let want = train(&mut flat(OptimizerKind::Adamw), half.clone(), 2..4);
    let mut adamw = flat(OptimizerKind::Adamw).load(&file).expect("loaded");
    let got = train(&mut adamw, half, 2..4);
    assert_eq!(worst(&want, &got), 0.0);
}

#[test]
fn clipped_steps_agree_with_the_per_parameter_clipping() {
    // The flat norm is one sum over all gradients, burn's path sums each tensor first: the
    // two round differently, so the norms and weights agree to rounding, on any device.
    let device = device();
    let start = model(&device);
    for kind in KINDS {
        let mut norms = Vec::new();
        let mut models = Vec::new();
        for mut opt in [per_parameter(kind), flat(kind)] {
            let mut m = start.clone();
            let mut seen = Vec::new();
            for step in 0..3 {
                let g = grads(&m, step, step == 1);
                // A bound below the random gradients' norm (~20), so that every step clips.
                let (next, norm) = opt.step_clipped(config(kind).lr_at(step), m, g, 0.5);
                m = next;
                seen.push(norm.expect("a norm").into_scalar::<f64>());
            }
            norms.push(seen);
            models.push(m);
        }
        for (a, b) in norms[0].iter().zip(&norms[1]) {
            assert!(*a > 0.5 && (a - b).abs() <= 1e-5 * a, "norms {a} and {b}");
        }
        let differs = worst(&models[0], &models[1]);
        assert!(differs <= 1e-5, "{kind:?} differs by {differs}");
        let unclipped = train(&mut flat(kind), start.clone(), 0..3);
        assert!(
            worst(&models[1], &unclipped) > 1e-4,
            "{kind:?}: the clipping changed nothing"
        );
    }
}

#[test]
fn a_damaged_optimiser_file_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let file = dir.path().join("optimizer.bpk");
    let mut opt = flat(OptimizerKind::Lamb);
    let _ = train(&mut opt, model(&device()), 0..1);
    opt.save(&file).expect("saved");
    let whole = std::fs::read(&file).expect("read");
    for damaged in [
        whole[..whole.len() / 2].to_vec(),
        b"not a burnpack file".to_vec(),
    ] {
        std::fs::write(&file, damaged).expect("written");
        assert!(flat(OptimizerKind::Lamb).load(&file).is_err());
    }
    let missing = dir.path().join("missing.bpk");
    assert!(flat(OptimizerKind::Adamw).load(&missing).is_err());
}
