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
//! `TFCKPT_BENCH_KEEP` is set. (dev profile: this crate is built with opt-level 3 there, see
//! the workspace Cargo.toml, and no release build of the workspace is needed.)

use std::path::PathBuf;
use std::time::Instant;

use pipeline_tfckpt::{Checkpoint, Writer};

fn main() {
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
