//! Tests of the batch reader: padding, masks and weights, lengths, limits, shuffling and
//! resuming, on shards the parent module's fixtures write.

use super::*;

#[test]
fn batch_padding_masks_and_weights() {
    let dir = tempfile::tempdir().unwrap();
    let a = inst(10, 5, 2); // positions [2] only: 5 tokens → positions 2 (step 2, < 4)
    let b = inst(11, 11, 3);
    let infos = write(dir.path(), "t", 10, &[a.clone(), b.clone()]);
    let mut r =
        BatchReader::eval(&paths(dir.path(), &infos), BatchReaderConfig::new(4, 64, 4)).unwrap();
    let batch = r.next_batch().unwrap().unwrap();
    assert_eq!(
        (batch.batch_size, batch.seq_len, batch.max_predictions),
        (2, 16, 4)
    );
    assert_eq!(batch.tokens, 16);
    for (row, i) in [&a, &b].into_iter().enumerate() {
        let n = i.input_ids.len();
        let s = row * 16;
        let ids: Vec<i64> = i.input_ids.iter().map(|&t| t as i64).collect();
        assert_eq!(&batch.input_ids[s..s + n], ids.as_slice());
        assert!(batch.input_ids[s + n..s + 16].iter().all(|&t| t == 0));
        assert!(batch.attention_mask[s..s + n].iter().all(|&t| t == 1));
        assert!(batch.attention_mask[s + n..s + 16].iter().all(|&t| t == 0));
        let types: Vec<i64> = i.token_type_ids.iter().map(|&t| t as i64).collect();
        assert_eq!(&batch.token_type_ids[s..s + n], types.as_slice());
        assert!(batch.token_type_ids[s + n..s + 16].iter().all(|&t| t == 0));
        let m = i.masked_positions.len();
        let s = row * 4;
        let pos: Vec<i64> = i.masked_positions.iter().map(|&p| p as i64).collect();
        let ids: Vec<i64> = i.masked_ids.iter().map(|&p| p as i64).collect();
        assert_eq!(&batch.masked_positions[s..s + m], pos.as_slice());
        assert_eq!(&batch.masked_ids[s..s + m], ids.as_slice());
        assert!(batch.masked_positions[s + m..s + 4].iter().all(|&t| t == 0));
        assert!(batch.masked_ids[s + m..s + 4].iter().all(|&t| t == 0));
        assert!(batch.masked_weights[s..s + m].iter().all(|&w| w == 1.0));
        assert!(batch.masked_weights[s + m..s + 4].iter().all(|&w| w == 0.0));
    }
    assert_eq!(
        batch.predictions,
        (a.masked_positions.len() + b.masked_positions.len()) as u64
    );
    assert_eq!(batch.sentence_order_labels, [0, 1]);
    assert!(r.next_batch().unwrap().is_none());
    assert!(r.next_batch().unwrap().is_none());
}

#[test]
fn seq_len_rounds_up_caps_and_pads_to_max() {
    let dir = tempfile::tempdir().unwrap();
    let infos = write(
        dir.path(),
        "t",
        10,
        &[inst(0, 17, 0), inst(1, 3, 0), inst(2, 30, 0)],
    );
    let files = paths(dir.path(), &infos);
    let lens = |c: BatchReaderConfig| -> Vec<usize> {
        BatchReader::eval(&files, c)
            .unwrap()
            .map(|b| b.unwrap().seq_len)
            .collect()
    };
    assert_eq!(lens(BatchReaderConfig::new(1, 64, 4)), [24, 8, 32]);
    assert_eq!(lens(BatchReaderConfig::new(1, 30, 4)), [24, 8, 30]);
    assert_eq!(lens(BatchReaderConfig::new(2, 64, 4)), [24, 32]);
    let to_max = BatchReaderConfig {
        pad_to_max: true,
        ..BatchReaderConfig::new(2, 40, 4)
    };
    assert_eq!(lens(to_max), [40, 40]);
}

#[test]
fn rows_over_the_limits_are_errors_naming_the_shard() {
    let dir = tempfile::tempdir().unwrap();
    let infos = write(dir.path(), "t", 10, &[inst(0, 5, 0), inst(1, 20, 3)]);
    let files = paths(dir.path(), &infos);
    let e = format!(
        "{:#}",
        BatchReader::eval(&files, BatchReaderConfig::new(1, 16, 8))
            .unwrap()
            .next()
            .unwrap()
            .unwrap_err()
    );
    assert!(
        e.contains("t-00000.arrow") && e.contains("row 1") && e.contains("max_seq_length 16"),
        "{e}"
    );
    let mut r = BatchReader::eval(&files, BatchReaderConfig::new(1, 32, 2)).unwrap();
    let e = format!("{:#}", r.next_batch().unwrap_err());
    assert!(
        e.contains("t-00000.arrow") && e.contains("max_predictions_per_seq 2"),
        "{e}"
    );
    assert!(
        r.next_batch().unwrap().is_none(),
        "a failed reader stays finished"
    );
}

#[test]
fn shuffle_is_a_permutation_per_epoch_and_differs_across_epochs() {
    let dir = tempfile::tempdir().unwrap();
    let files = three_shards(dir.path());
    let c = BatchReaderConfig {
        drop_last: false,
        epochs: Some(3),
        ..cfg(5)
    };
    let mut r = BatchReader::open(&files, c).unwrap();
    assert_eq!((r.instances_per_epoch(), r.batches_per_epoch()), (17, 4));
    let mut epochs: Vec<Vec<u32>> = Vec::new();
    for _ in 0..3 {
        let mut seen = Vec::new();
        let sizes: Vec<usize> = (0..4)
            .map(|_| {
                let b = r.next_batch().unwrap().unwrap();
                seen.extend(row_ids(&b));
                b.batch_size
            })
            .collect();
        assert_eq!(sizes, [5, 5, 5, 2]);
        let set: BTreeSet<u32> = seen.iter().copied().collect();
        assert_eq!(set, (0..17).collect(), "every instance exactly once");
        assert_eq!(seen.len(), 17);
        epochs.push(seen);
    }
    assert!(r.next_batch().unwrap().is_none());
    assert_ne!(epochs[0], epochs[1]);
    assert_ne!(epochs[0], (0..17).collect::<Vec<_>>(), "shuffled");
}

#[test]
fn drop_last_and_endless() {
    let dir = tempfile::tempdir().unwrap();
    let files = three_shards(dir.path());
    let mut r = BatchReader::open(&files, cfg(5)).unwrap();
    assert_eq!(r.batches_per_epoch(), 3);
    for _ in 0..30 {
        let b = r.next_batch().unwrap().unwrap();
        assert_eq!(b.batch_size, 5);
        let ids = row_ids(&b);
        assert_eq!(ids.iter().collect::<BTreeSet<_>>().len(), 5);
    }
    // 30 batches of 3 per epoch: ten epochs done.
    let p = r.position();
    assert_eq!((p.epoch, p.batches), (9, 30));

    // Endless readers that could never fill a batch are refused up front.
    let e = BatchReader::open(&files, cfg(18))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("fewer than one batch"), "{e}");
    let eval = BatchReader::eval(&files, cfg(18)).unwrap();
    assert_eq!(
        eval.map(|b| b.unwrap().batch_size).collect::<Vec<_>>(),
        [17]
    );
}

#[test]
fn eval_is_one_pass_in_file_order() {
    let dir = tempfile::tempdir().unwrap();
    let files = three_shards(dir.path());
    let ids: Vec<u32> = BatchReader::eval(&files, cfg(4))
        .unwrap()
        .flat_map(|b| row_ids(&b.unwrap()))
        .collect();
    assert_eq!(ids, (0..17).collect::<Vec<_>>());
}

#[test]
fn same_seed_same_batches_other_seed_other_order() {
    let dir = tempfile::tempdir().unwrap();
    let files = three_shards(dir.path());
    let take = |seed: u64| -> Vec<Batch> {
        let mut r = BatchReader::open(&files, BatchReaderConfig { seed, ..cfg(3) }).unwrap();
        (0..12).map(|_| r.next_batch().unwrap().unwrap()).collect()
    };
    assert_eq!(take(1), take(1));
    let ids = |bs: Vec<Batch>| bs.iter().flat_map(row_ids).collect::<Vec<_>>();
    assert_ne!(ids(take(1)), ids(take(2)));
}

#[test]
fn resume_continues_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let files = three_shards(dir.path());
    for c in [
        cfg(3),
        BatchReaderConfig {
            drop_last: false,
            ..cfg(4)
        },
        BatchReaderConfig {
            shuffle: false,
            ..cfg(5)
        },
    ] {
        let mut full = BatchReader::open(&files, c.clone()).unwrap();
        let all: Vec<Batch> = (0..20)
            .map(|_| full.next_batch().unwrap().unwrap())
            .collect();
        for k in [0, 1, 2, 4, 5, 6, 11] {
            let mut r = BatchReader::open(&files, c.clone()).unwrap();
            for _ in 0..k {
                r.next_batch().unwrap().unwrap();
            }
            let saved = serde_json::to_string(&r.position()).unwrap();
            drop(r);
            let pos: ReaderPosition = serde_json::from_str(&saved).unwrap();
            assert_eq!(pos.batches, k as u64);
            let mut resumed = BatchReader::resume(&files, c.clone(), &pos).unwrap();
            for (i, want) in all[k..].iter().enumerate() {
                let got = resumed.next_batch().unwrap().unwrap();
                assert_eq!(
                    &got,
                    want,
                    "config {c:?}: batch {} after resuming at {k}",
                    k + i
                );
            }
        }
    }
}

#[test]
fn resume_checks_the_position_fits() {
    let dir = tempfile::tempdir().unwrap();
    let files = three_shards(dir.path());
    let mut r = BatchReader::open(&files, cfg(3)).unwrap();
    r.next_batch().unwrap().unwrap();
    let pos = r.position();
    let other_seed = BatchReaderConfig { seed: 8, ..cfg(3) };
    let e = BatchReader::resume(&files, other_seed, &pos)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("seed"), "{e}");
    let e = BatchReader::resume(&files[..2], cfg(3), &pos)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("same shard files"), "{e}");
}

#[test]
fn resume_after_the_last_epoch_yields_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let files = three_shards(dir.path());
    let c = BatchReaderConfig {
        epochs: Some(2),
        ..cfg(5)
    };
    let mut r = BatchReader::open(&files, c.clone()).unwrap();
    assert_eq!(r.by_ref().count(), 6);
    let mut again = BatchReader::resume(&files, c, &r.position()).unwrap();
    assert!(again.next_batch().unwrap().is_none());
}
