//! Reading throughput of a large checkpoint on a warm page cache.
//!
//! ```sh
//! cargo bench -p pipeline-tfckpt --profile dev --bench read            # 800 MB in /tmp
//! TFCKPT_BENCH_MB=200 TFCKPT_BENCH_DIR=/tmp/x cargo bench -p pipeline-tfckpt --profile dev --bench read
//! ```
//!
//! It writes a checkpoint of albert_xxlarge's shapes (H 4096, FFN 16384, one shared layer:
//! ~840 MB of float32) scaled to `TFCKPT_BENCH_MB`, reads every tensor once to warm the cache,
//! then times a second full read (index, checksums, values). The checkpoint is removed unless
//! `TFCKPT_BENCH_KEEP` is set.
//!
//! `TFCKPT_BENCH_ALBERT=1` writes instead a complete google-research/albert checkpoint of
//! albert_xxlarge's sizes (V 21128, E 128, H 4096, FFN 16384, one shared group; 0.9 GB) with
//! `albert_config.json` and a `vocab.txt`, and keeps it, for timing `pipeline model import`:
//!
//! ```sh
//! TFCKPT_BENCH_ALBERT=1 TFCKPT_BENCH_DIR=/tmp/xxlarge cargo bench -p pipeline-tfckpt --profile dev --bench read
//! pipeline model import --from /tmp/xxlarge --out /tmp/xxlarge-model    # twice: the second on a warm cache
//! ``` (dev profile: this crate is built with opt-level 3 there, see
//! the workspace Cargo.toml, and no release build of the workspace is needed.)

use std::path::PathBuf;
use std::time::Instant;

use pipeline_tfckpt::{Checkpoint, Writer};

/// albert_xxlarge's tensors in google-research/albert's names, and its config.
fn write_albert(dir: &std::path::Path) {
    let (v, e, h, i, p) = (21128usize, 128usize, 4096usize, 16384usize, 512usize);
    let g = "bert/encoder/transformer/group_0/inner_group_0";
    let mut t: Vec<(String, Vec<usize>)> = vec![
        ("bert/embeddings/word_embeddings".into(), vec![v, e]),
        ("bert/embeddings/position_embeddings".into(), vec![p, e]),
        ("bert/embeddings/token_type_embeddings".into(), vec![2, e]),
        ("cls/predictions/output_bias".into(), vec![v]),
        ("cls/seq_relationship/output_weights".into(), vec![2, h]),
        ("cls/seq_relationship/output_bias".into(), vec![2]),
    ];
    let mut dense = |name: String, n_in: usize, n_out: usize| {
        t.push((format!("{name}/kernel"), vec![n_in, n_out]));
        t.push((format!("{name}/bias"), vec![n_out]));
    };
    dense("bert/encoder/embedding_hidden_mapping_in".into(), e, h);
    for q in ["query", "key", "value"] {
        dense(format!("{g}/attention_1/self/{q}"), h, h);
    }
    dense(format!("{g}/attention_1/output/dense"), h, h);
    dense(format!("{g}/ffn_1/intermediate/dense"), h, i);
    dense(format!("{g}/ffn_1/intermediate/output/dense"), i, h);
    dense("bert/pooler/dense".into(), h, h);
    dense("cls/predictions/transform/dense".into(), h, e);
    for (name, n) in [
        ("bert/embeddings/LayerNorm".to_string(), e),
        (format!("{g}/LayerNorm"), h),
        (format!("{g}/LayerNorm_1"), h),
        ("cls/predictions/transform/LayerNorm".to_string(), e),
    ] {
        t.push((format!("{name}/gamma"), vec![n]));
        t.push((format!("{name}/beta"), vec![n]));
    }
    let mut w = Writer::create(&dir.join("model.ckpt"), 1).expect("create the checkpoint");
    let mut bytes = 0;
    for (name, shape) in &t {
        let n: usize = shape.iter().product();
        let values: Vec<f32> = (0..n)
            .map(|j| ((j % 2000) as f32 - 1000.0) * 2e-5)
            .collect();
        w.add_f32(name, shape, &values).expect("write a tensor");
        bytes += n * 4;
    }
    w.finish().expect("finish the checkpoint");
    pipeline_tfckpt::write_checkpoint_file(dir, "model.ckpt").expect("checkpoint file");
    let config = format!(
        "{{\"vocab_size\": {v}, \"embedding_size\": {e}, \"hidden_size\": {h}, \
         \"num_hidden_layers\": 12, \"num_attention_heads\": 64, \"intermediate_size\": {i}, \
         \"hidden_act\": \"gelu\", \"max_position_embeddings\": {p}, \"type_vocab_size\": 2, \
         \"num_hidden_groups\": 1, \"inner_group_num\": 1}}\n"
    );
    std::fs::write(dir.join("albert_config.json"), config).expect("config");
    let mut vocab = String::from("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n");
    for k in 5..v {
        vocab.push_str(&format!("t{k}\n"));
    }
    std::fs::write(dir.join("vocab.txt"), vocab).expect("vocab");
    println!(
        "wrote {} tensors, {:.0} MB, as {}",
        t.len(),
        bytes as f64 / 1e6,
        dir.join("model.ckpt").display()
    );
}

fn main() {
    if std::env::var_os("TFCKPT_BENCH_ALBERT").is_some() {
        let dir = std::env::var_os("TFCKPT_BENCH_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| std::env::temp_dir().join("tfckpt-xxlarge"));
        std::fs::create_dir_all(&dir).expect("create the bench directory");
        write_albert(&dir);
        return;
    }
    let mb: usize = std::env::var("TFCKPT_BENCH_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(800);
    let dir = std::env::var_os("TFCKPT_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("tfckpt-bench"));
    std::fs::create_dir_all(&dir).expect("create the bench directory");
    let prefix = dir.join("model.ckpt");
    // Tensors of 4096 × 16384 floats (256 MB) and 4096 × 4096 (64 MB) until `mb` is reached.
    let mut shapes = Vec::new();
    let mut total = 0usize;
    for i in 0.. {
        let shape = if i % 3 == 2 {
            vec![4096, 16384]
        } else {
            vec![4096, 4096]
        };
        let bytes = shape.iter().product::<usize>() * 4;
        if total + bytes > mb << 20 && !shapes.is_empty() {
            break;
        }
        total += bytes;
        shapes.push(shape);
    }
    let mut w = Writer::create(&prefix, 1).expect("create the checkpoint");
    for (i, shape) in shapes.iter().enumerate() {
        let n: usize = shape.iter().product();
        let values: Vec<f32> = (0..n).map(|j| (j % 1000) as f32 * 1e-3).collect();
        w.add_f32(&format!("bert/tensor_{i:03}/kernel"), shape, &values)
            .expect("write a tensor");
    }
    w.finish().expect("finish the checkpoint");

    let read_all = || {
        let c = Checkpoint::open(&prefix).expect("open");
        let names: Vec<String> = c.names().map(str::to_string).collect();
        let mut sum = 0.0f64;
        for n in &names {
            let (_, v) = c.read_f32(n).expect("read");
            sum += f64::from(v[v.len() / 2]);
        }
        sum
    };
    read_all();
    let t = Instant::now();
    let check = read_all();
    let s = t.elapsed().as_secs_f64();
    println!(
        "read {} tensors, {:.0} MB in {:.3} s: {:.0} MB/s (warm cache; checksum {check})",
        shapes.len(),
        total as f64 / 1e6,
        s,
        total as f64 / 1e6 / s
    );
    if std::env::var_os("TFCKPT_BENCH_KEEP").is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
}
