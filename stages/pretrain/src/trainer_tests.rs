//! The evaluation's accuracy by corruption, on a tiny model and hand-made instances whose
//! corruptions are known.

use std::collections::BTreeMap;

use burn::tensor::Device;
use pipeline_albert::train::{OptimConfig, OptimizerKind};
use pipeline_albert::{AlbertConfig, AlbertForPreTraining};
use pipeline_shards::{BatchReader, BatchReaderConfig, Instance, ShardWriter};

use super::*;

const MASK_ID: u32 = 4;

fn config() -> AlbertConfig {
    let mut c = AlbertConfig::named("tiny").unwrap_or_else(|e| panic!("{e}"));
    c.vocab_size = 40;
    c.embedding_size = 8;
    c.hidden_size = 16;
    c.num_attention_heads = 2;
    c.intermediate_size = 32;
    c.num_hidden_layers = 1;
    c.max_position_embeddings = 16;
    c.hidden_dropout_prob = 0.0;
    c.attention_probs_dropout_prob = 0.0;
    c
}

/// Each instance masks three positions: one `[MASK]`, one kept, one random; the last also a
/// second `[MASK]`.
fn instances(n: usize) -> Vec<Instance> {
    (0..n)
        .map(|i| {
            let extra = i + 1 == n;
            let t = 10 + i as u32;
            let mut input_ids = vec![2, MASK_ID, 11, 3, 12, 13, 30, 3];
            let mut masked_positions = vec![1, 4, 6];
            let mut masked_ids = vec![t, 12, 14];
            if extra {
                input_ids[2] = MASK_ID;
                masked_positions.insert(1, 2);
                masked_ids.insert(1, 11);
            }
            Instance {
                input_ids,
                token_type_ids: vec![0, 0, 0, 0, 1, 1, 1, 1],
                masked_positions,
                masked_ids,
                sentence_order_label: (i % 2) as u8,
            }
        })
        .collect()
}

fn reader(dir: &std::path::Path) -> BatchReader {
    let mut w = ShardWriter::create(dir, "eval", 100, BTreeMap::new()).unwrap();
    for i in instances(6) {
        w.write(&i).unwrap();
    }
    let files: Vec<_> = w
        .finish()
        .unwrap()
        .iter()
        .map(|s| dir.join(&s.file))
        .collect();
    let config = BatchReaderConfig {
        drop_last: false,
        shuffle: false,
        ..BatchReaderConfig::new(4, 8, 4)
    };
    BatchReader::eval(&files, config).unwrap()
}

#[test]
fn evaluation_counts_predictions_by_corruption_in_the_same_read() {
    let dir = tempfile::tempdir().unwrap();
    let device = Device::flex().autodiff();
    device.seed(1);
    let c = config();
    let model = AlbertForPreTraining::new(&c, &device);
    let optim = OptimConfig {
        optimizer: OptimizerKind::Lamb,
        learning_rate: 1e-3,
        weight_decay: 0.0,
        beta_1: 0.9,
        beta_2: 0.999,
        epsilon: 1e-6,
        warmup_steps: 0,
        total_steps: 1,
        max_grad_norm: 1.0,
    };
    let mut trainer = Trainer::new(c, model, optim, device);
    let plain = trainer.evaluate(reader(dir.path()), 0).unwrap();
    assert_eq!(plain.mlm_by_corruption, None);
    trainer.mask_id = Some(MASK_ID);
    let split = trainer.evaluate(reader(dir.path()), 0).unwrap();
    let by = split.mlm_by_corruption.clone().unwrap();
    // Six instances: seven [MASK] positions, six kept, six random.
    assert_eq!(
        (
            by.mask.predictions,
            by.kept.predictions,
            by.random.predictions
        ),
        (7, 6, 6)
    );
    assert_eq!(split.predictions, 19);
    // The split adds counts; the totals are the same numbers as without it.
    assert_eq!(
        (split.mlm_loss, split.mlm_accuracy),
        (plain.mlm_loss, plain.mlm_accuracy)
    );
    let correct: f64 = [&by.mask, &by.random, &by.kept]
        .iter()
        .map(|a| a.accuracy * a.predictions as f64)
        .sum();
    assert!(
        (correct - split.mlm_accuracy * 19.0).abs() < 1e-6,
        "{by:?} {split:?}"
    );
}
