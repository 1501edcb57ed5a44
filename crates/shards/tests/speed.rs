//! Throughput of the writer and the readers on 100k synthetic rows of 128 tokens (20 masked).
//! Ignored by default; run `cargo test --release -p pipeline-shards --test speed -- --ignored
//! --nocapture` for the figures.

use std::collections::BTreeMap;
use std::time::Instant;

use pipeline_shards::{
    BatchReader, BatchReaderConfig, Instance, Prefetch, ShardWriter, list_shards, read_shard,
};

#[test]
#[ignore = "timing; run with --release -- --ignored --nocapture"]
fn write_and_read_100k_rows() {
    const ROWS: u32 = 100_000;
    const LEN: usize = 128;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut inst = Instance {
        input_ids: vec![0; LEN],
        token_type_ids: (0..LEN).map(|t| u8::from(t >= LEN / 2)).collect(),
        masked_positions: (0..20).map(|p| 1 + p * 6).collect(),
        masked_ids: vec![0; 20],
        sentence_order_label: 0,
    };

    let t = Instant::now();
    let mut w = ShardWriter::create(dir.path(), "train", 25_000, BTreeMap::new()).expect("writer");
    for i in 0..ROWS {
        for (k, id) in inst.input_ids.iter_mut().enumerate() {
            *id = (i + k as u32 * 31) % 21128;
        }
        inst.masked_ids.fill(i % 21128);
        inst.sentence_order_label = (i % 2) as u8;
        w.write(&inst).expect("write");
    }
    let infos = w.finish().expect("finish");
    let secs = t.elapsed().as_secs_f64();
    let bytes: u64 = infos
        .iter()
        .map(|s| std::fs::metadata(dir.path().join(&s.file)).map_or(0, |m| m.len()))
        .sum();
    println!(
        "write: {ROWS} rows in {secs:.3} s = {:.0} rows/s ({} shards, {:.1} MiB)",
        ROWS as f64 / secs,
        infos.len(),
        bytes as f64 / (1 << 20) as f64
    );

    let files = list_shards(dir.path(), "train").expect("list");
    let t = Instant::now();
    let mut n = 0;
    for f in &files {
        n += read_shard(f).expect("read").0.len();
    }
    let secs = t.elapsed().as_secs_f64();
    println!(
        "read_shard: {n} rows in {secs:.3} s = {:.0} rows/s",
        n as f64 / secs
    );

    for (name, pad_to_max) in [
        ("batches (seq_len 128)", false),
        ("batches (pad_to_max 512)", true),
    ] {
        let config = BatchReaderConfig {
            pad_to_max,
            ..BatchReaderConfig::new(128, 512, 20)
        };
        let t = Instant::now();
        let mut r = BatchReader::open(&files, config).expect("open");
        let per_epoch = r.batches_per_epoch();
        let mut rows = 0;
        for _ in 0..per_epoch {
            rows += r.next_batch().expect("batch").expect("endless").batch_size;
        }
        let secs = t.elapsed().as_secs_f64();
        println!(
            "BatchReader {name}: {rows} rows in {secs:.3} s = {:.0} rows/s",
            rows as f64 / secs
        );
    }

    // What the training loop waits for a batch of 256 rows while a step runs (here a 5 ms
    // sleep, a fast GPU step): the reader's whole time, or with the reader a thread ahead,
    // only what the step did not hide.
    let config = BatchReaderConfig::new(256, 128, 20);
    for ahead in [false, true] {
        let reader = BatchReader::open(&files, config.clone()).expect("open");
        let batches = reader.batches_per_epoch();
        let mut prefetch = ahead.then(|| Prefetch::spawn(reader, 2).expect("a thread"));
        let mut direct = BatchReader::open(&files, config.clone()).expect("open");
        let mut waited = Vec::with_capacity(batches as usize);
        for _ in 0..batches {
            let t = Instant::now();
            let batch = match prefetch.as_mut() {
                Some(p) => p.next_batch(),
                None => direct.next_batch(),
            };
            waited.push(t.elapsed().as_secs_f64() * 1e3);
            assert!(batch.expect("batch").is_some());
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // The first batch waits for the first shard in both; the rest is what reading ahead
        // can hide.
        let first = waited[0];
        let mean = waited[1..].iter().sum::<f64>() / (waited.len() - 1) as f64;
        waited.sort_by(f64::total_cmp);
        println!(
            "waiting for a batch of 256 between 5 ms steps ({}): the first {first:.1} ms, then \
             median {:.3} ms, mean {mean:.3} ms (shard decoding included)",
            if ahead { "Prefetch" } else { "BatchReader" },
            waited[waited.len() / 2],
        );
    }
}
