//! Pretraining checked against transformers step by step (issue 13, section 1): our
//! [`Trainer`] (the stage's step: micro-batches per core, gradient accumulation, global-norm
//! clipping, the warmup/decay schedule, the optimiser with its no-decay group) and
//! transformers' `AlbertForPreTraining` in torch start from the same weights, see the same
//! batches (synthetic instances written to a shard and read back by our `BatchReader`), fp32,
//! no dropout, and must agree on the loss of every step and on the final weights.
//!
//! AdamW is compared with `torch.optim.AdamW`, LAMB with google-research/albert's
//! `LAMBOptimizer` transcribed into tests/fixtures/train_reference.py (transformers has none).
//! bf16 mixed precision is compared with transformers under `torch.autocast` (libtorch
//! devices only). Without a Python that has torch and transformers the tests train ours only
//! and say so.
//! `ALBERT_TEST_DEVICE` picks our side's device (default `flex`; `tch-cpu` in a `tch` build
//! checks libtorch's fused ops the same way).

#[path = "../../../tests/fixtures/train_reference.rs"]
mod reference;

use std::collections::BTreeMap;
use std::path::Path;

use burn::module::Module;
use pipeline_albert::model::MatmulPrecision;
use pipeline_albert::train::{OptimConfig, OptimizerKind};
use pipeline_albert::{Activation, AlbertConfig, AlbertForPreTraining, hf};
use pipeline_shards::rng::SplitMix64;
use pipeline_shards::{Batch, BatchReader, BatchReaderConfig, Instance, ShardWriter};
use reference::{OurStep, Tolerance, bf16_or_skip, compare, job, run_reference, test_device};
use serde_json::{Value, json};
use stage_pretrain::trainer::Trainer;

const VOCAB: usize = 100;
const MASK_ID: u32 = 4;
const SEQ: usize = 16;
const MAX_PREDICTIONS: usize = 4;
const BATCH: usize = 4;
/// Batches accumulated per optimiser step (exercises the accumulation path).
const ACCUM: usize = 2;
const STEPS: u64 = 30;

fn config() -> AlbertConfig {
    let mut c = AlbertConfig::named("tiny").unwrap();
    c.vocab_size = VOCAB;
    c.embedding_size = 16;
    c.hidden_size = 32;
    c.num_attention_heads = 4;
    c.intermediate_size = 64;
    c.num_hidden_layers = 2;
    c.max_position_embeddings = 32;
    c.hidden_act = Activation::GeluNew;
    c.hidden_dropout_prob = 0.0;
    c.attention_probs_dropout_prob = 0.0;
    c
}

/// A number in `0..n` from `rng` by modulo, as these synthetic data were always drawn
/// (`SplitMix64::below`, Lemire's method, would draw other data).
fn below(rng: &mut SplitMix64, n: u64) -> u64 {
    rng.next_u64() % n
}

/// `[CLS] a [SEP] b [SEP]` instances of varying length (so batches carry padding), 1 to 4
/// masked positions each (so rows weigh differently in the MLM mean), 80 % of them `[MASK]`.
fn instances(n: usize, seed: u64) -> Vec<Instance> {
    let mut rng = SplitMix64::new(seed);
    (0..n)
        .map(|_| {
            let len = 7 + below(&mut rng, (SEQ - 6) as u64) as usize; // 7..=SEQ
            let len_a = 1 + below(&mut rng, (len - 4) as u64) as usize;
            let mut ids = vec![2u32];
            ids.extend((0..len_a).map(|_| 5 + below(&mut rng, VOCAB as u64 - 5) as u32));
            ids.push(3);
            ids.extend((0..len - len_a - 3).map(|_| 5 + below(&mut rng, VOCAB as u64 - 5) as u32));
            ids.push(3);
            let types: Vec<u8> = (0..len).map(|i| u8::from(i > len_a + 1)).collect();
            let wanted = 1 + below(&mut rng, MAX_PREDICTIONS as u64) as usize;
            let mut positions: Vec<u32> = Vec::new();
            while positions.len() < wanted {
                let p = 1 + below(&mut rng, (len - 1) as u64) as u32;
                if ids[p as usize] > 4 && !positions.contains(&p) {
                    positions.push(p);
                }
            }
            positions.sort_unstable();
            let masked_ids: Vec<u32> = positions.iter().map(|&p| ids[p as usize]).collect();
            for &p in &positions {
                if below(&mut rng, 10) < 8 {
                    ids[p as usize] = MASK_ID;
                }
            }
            Instance {
                input_ids: ids,
                token_type_ids: types,
                masked_positions: positions,
                masked_ids,
                sentence_order_label: below(&mut rng, 2) as u8,
            }
        })
        .collect()
}

/// The batches of every step, read by the stage's reader from a shard of synthetic instances.
fn batches(dir: &Path) -> Vec<Vec<Batch>> {
    let needed = STEPS as usize * ACCUM * BATCH;
    let mut w = ShardWriter::create(dir, "train", needed, BTreeMap::new()).unwrap();
    for i in instances(needed, 11) {
        w.write(&i).unwrap();
    }
    let files: Vec<_> = w
        .finish()
        .unwrap()
        .iter()
        .map(|s| dir.join(&s.file))
        .collect();
    let config = BatchReaderConfig {
        seed: 5,
        ..BatchReaderConfig::new(BATCH, SEQ, MAX_PREDICTIONS)
    };
    let mut reader = BatchReader::open(&files, config).unwrap();
    (0..STEPS)
        .map(|_| {
            (0..ACCUM)
                .map(|_| reader.next_batch().unwrap().unwrap())
                .collect()
        })
        .collect()
}

/// A batch as the reference reads it: `[rows][columns]` lists.
fn batch_json(b: &Batch) -> Value {
    let (s, m) = (b.seq_len, b.max_predictions);
    let rows =
        |v: &[i64], w: usize| -> Vec<Vec<i64>> { v.chunks(w).map(<[i64]>::to_vec).collect() };
    json!({
        "input_ids": rows(&b.input_ids, s),
        "token_type_ids": rows(&b.token_type_ids, s),
        "attention_mask": rows(&b.attention_mask, s),
        "masked_positions": rows(&b.masked_positions, m),
        "masked_ids": rows(&b.masked_ids, m),
        "masked_weights": b.masked_weights.chunks(m).map(<[f32]>::to_vec).collect::<Vec<_>>(),
        "sentence_order_labels": b.sentence_order_labels,
    })
}

fn optim(kind: OptimizerKind, learning_rate: f64) -> OptimConfig {
    OptimConfig {
        optimizer: kind,
        learning_rate,
        weight_decay: 0.01,
        beta_1: 0.9,
        beta_2: 0.999,
        epsilon: 1e-6,
        warmup_steps: 5,
        total_steps: STEPS,
        // Below the gradient norms of the first steps, so that clipping acts there and not later.
        max_grad_norm: 1.0,
    }
}

/// Trains `STEPS` steps with the stage's trainer in `precision` and compares with the
/// reference (under autocast for bf16).
fn check(name: &str, optim: OptimConfig, tol: Tolerance, precision: MatmulPrecision) {
    let _serial = reference::one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let (init_dir, ours_dir) = (tmp.path().join("init"), tmp.path().join("ours"));
    let config = config();
    let device = test_device().autodiff();
    device.seed(3);
    let model = AlbertForPreTraining::new(&config, &device);
    hf::save_pretraining(&init_dir, &config, &model.valid()).unwrap();
    let model = model.with_precision(precision);
    let steps = batches(&tmp.path().join("shards"));

    let mut trainer = Trainer::new(config.clone(), model, optim.clone(), device);
    eprintln!(
        "{name}: {} data-parallel worker(s)",
        trainer.parallel.workers()
    );
    let ours: Vec<OurStep> = steps
        .iter()
        .enumerate()
        .map(|(k, batches)| {
            let s = trainer.step(k as u64, batches).unwrap();
            OurStep {
                loss: s.loss,
                grad_norm: Some(s.grad_norm),
                lr: s.lr,
            }
        })
        .collect();
    hf::save_pretraining(&ours_dir, &config, &trainer.inference_model()).unwrap();
    assert!(
        ours.last().unwrap().loss < ours[0].loss,
        "{name}: the loss did not fall ({ours:?})"
    );

    let steps_json = steps
        .iter()
        .map(|bs| Value::Array(bs.iter().map(batch_json).collect()))
        .collect();
    let mut job = job("pretrain", &init_dir, &ours_dir, &optim, steps_json);
    job["precision"] = precision.name().into();
    if let Some(report) = run_reference(&job, tmp.path()) {
        let m = compare(name, &ours, &report, &optim, &tol);
        assert!(m.clipped_steps > 0, "{name}: clipping never acted");
    }
}

fn tolerance() -> Tolerance {
    Tolerance {
        early_loss: 1e-4,
        early_steps: 5,
        loss: 1e-3,
        grad_norm: 1e-3,
        weight_vs_moved: 1e-2,
    }
}

#[test]
fn pretraining_with_adamw_follows_transformers() {
    let optim = optim(OptimizerKind::Adamw, 5e-3);
    check("adamw", optim, tolerance(), MatmulPrecision::Fp32);
}

#[test]
fn pretraining_with_lamb_follows_googles_lamb() {
    let optim = optim(OptimizerKind::Lamb, 2e-2);
    check("lamb", optim, tolerance(), MatmulPrecision::Fp32);
}

/// bf16 mixed precision against transformers under `torch.autocast` on the CPU.
///
/// The first step, from the same weights, is where the two mixed precisions meet or not: its
/// loss agreed to 1.3e-6 (relative; libtorch 2.11, 2 x86 cores, 2026-11-29; 3.9e-6 while the
/// pooler and the SOP classifier stayed float32), where our float32 run against the same
/// autocast reference is 3.0e-5 off, so the bound of 1e-5 tells our bf16 path from float32.
/// (Leaving the activations between products in bf16, as autocast does, did not move it: at
/// the first step every bias is zero, and a bf16 product's result is then the same in either
/// dtype.) After it the runs drift apart by bf16's rounding, compounded: over 30 steps the
/// losses stayed within 7.3e-4 (bound 5e-3; 7.4e-4 with those activations in float32) and the
/// gradient norms within 0.87 % (bound 5 %; 0.94 %). The weights are held loosely (20× how far
/// the reference moved each tensor; measured 1.75, as with those activations in float32,
/// 2.4–5.0 with the float32 pooler): tensors whose gradient is at rounding level (the attention
/// key's bias, whose exact gradient is 0; the pooler under the SOP loss at chance) are moved by
/// rounding noise, which AdamW scales up to full-sized steps.
#[test]
fn pretraining_in_bf16_follows_transformers_under_autocast() {
    if !bf16_or_skip("stage-pretrain") {
        return;
    }
    let tol = Tolerance {
        early_loss: 1e-5,
        early_steps: 1,
        loss: 5e-3,
        grad_norm: 5e-2,
        weight_vs_moved: 20.0,
    };
    let optim = optim(OptimizerKind::Adamw, 5e-3);
    check("adamw-bf16", optim, tol, MatmulPrecision::Bf16);
}
