//! Engine overhead benchmark: `cargo bench --bench engine`.
//!
//! Prints the figures issue 2 sets targets for, measured on the release `pipeline` binary:
//! - no-op `pipeline run` of a 7-stage DAG (target ≤ 20 ms, issue 12),
//! - no-op run of 1,000 `cmd` stages (target ≤ 300 ms),
//! - first-run overhead per stage beyond the commands themselves (target ≤ 10 ms),
//! - blake3 hashing throughput on a large file (target ≥ 1 GB/s).
//!
//! `BENCH_HASH_MB` sets the size of the hashed file (default 1024).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn pipeline(dir: &Path, args: &[&str]) -> Duration {
    let t0 = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_pipeline"))
        .arg("-f")
        .arg(dir.join("pipeline.yaml"))
        .args(args)
        .arg("--quiet")
        .output()
        .expect("running pipeline");
    let took = t0.elapsed();
    assert!(
        out.status.success(),
        "pipeline {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    took
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn seven_stage_dag(dir: &Path) {
    std::fs::create_dir_all(dir.join("data")).unwrap();
    for i in 0..3 {
        std::fs::write(
            dir.join(format!("data/part{i}.txt")),
            "一二三\n".repeat(10_000),
        )
        .unwrap();
    }
    let yaml = r#"
vars: {data: data}
stages:
  clean:   {cmd: "cat ${vars.data}/*.txt > $PIPELINE_OUT/corpus.txt", inputs: ["${vars.data}/*.txt"]}
  vocab:   {cmd: "head -c 100 $PIPELINE_DEP_CLEAN/corpus.txt > $PIPELINE_OUT/vocab.txt", deps: [clean]}
  mask:    {cmd: "wc -c $PIPELINE_DEP_CLEAN/corpus.txt > $PIPELINE_OUT/n", deps: [clean, vocab], params: {seed: 1}}
  pretrain: {cmd: "cp $PIPELINE_DEP_MASK/n $PIPELINE_OUT/model", deps: [mask], params: {lr: 0.001}}
  finetune_lcqmc: {cmd: "cp $PIPELINE_DEP_PRETRAIN/model $PIPELINE_OUT/m", deps: [pretrain]}
  finetune_xnli:  {cmd: "cp $PIPELINE_DEP_PRETRAIN/model $PIPELINE_OUT/m", deps: [pretrain]}
  report:  {cmd: "echo '{}' > $PIPELINE_OUT/metrics.json", deps: [finetune_lcqmc, finetune_xnli]}
"#;
    std::fs::write(dir.join("pipeline.yaml"), yaml).unwrap();
}

fn thousand_stages(dir: &Path) -> Vec<String> {
    let mut yaml = String::from("stages:\n");
    let mut cmds = Vec::new();
    for i in 0..1000 {
        let cmd = format!("echo {i} > $PIPELINE_OUT/out.txt");
        // A few long chains and many independent stages, as a large sweep looks.
        let deps = if i % 10 == 0 {
            String::new()
        } else {
            format!(", deps: [s{}]", i - 1)
        };
        yaml.push_str(&format!("  s{i}: {{cmd: \"{cmd}\"{deps}}}\n"));
        cmds.push(cmd);
    }
    std::fs::write(dir.join("pipeline.yaml"), yaml).unwrap();
    cmds
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else to parse.
    let tmp = tempfile::tempdir().unwrap();

    let seven = tmp.path().join("seven");
    seven_stage_dag(&seven);
    pipeline(&seven, &["run"]);
    let noop7 = median((0..21).map(|_| pipeline(&seven, &["run"])).collect());
    println!(
        "no-op run, 7-stage DAG:        {} (median of 21; target ≤ 20 ms)",
        ms(noop7)
    );

    let big = tmp.path().join("thousand");
    std::fs::create_dir_all(&big).unwrap();
    let cmds = thousand_stages(&big);
    let out = tempfile::tempdir().unwrap();
    let t0 = Instant::now();
    for cmd in &cmds {
        let status = Command::new("sh")
            .arg("-c")
            .arg(cmd)
            .env("PIPELINE_OUT", out.path())
            .status()
            .unwrap();
        assert!(status.success());
    }
    let commands_alone = t0.elapsed();
    let first = pipeline(&big, &["run", "--jobs", "1"]);
    let per_stage = (first.saturating_sub(commands_alone)).as_secs_f64() * 1000.0 / 1000.0;
    println!(
        "first run, 1,000 cmd stages:   {} with --jobs 1; the commands alone take {} → {per_stage:.2} ms overhead per stage (target ≤ 10 ms)",
        ms(first),
        ms(commands_alone)
    );
    let noop1000 = median((0..7).map(|_| pipeline(&big, &["run"])).collect());
    println!(
        "no-op run, 1,000 cmd stages:   {} (median of 7; target ≤ 300 ms)",
        ms(noop1000)
    );
    let status1000 = median((0..5).map(|_| pipeline(&big, &["status"])).collect());
    println!(
        "status, 1,000 cmd stages:      {} (median of 5)",
        ms(status1000)
    );

    let mb: usize = std::env::var("BENCH_HASH_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    let file = tmp.path().join("big.bin");
    {
        use std::io::Write;
        let mut f = std::io::BufWriter::new(std::fs::File::create(&file).unwrap());
        let chunk: Vec<u8> = (0..1 << 20)
            .map(|i: u32| (i.wrapping_mul(2654435761) >> 24) as u8)
            .collect();
        for _ in 0..mb {
            f.write_all(&chunk).unwrap();
        }
    }
    pipeline_engine::hash::hash_file(&file).unwrap();
    let runs: Vec<Duration> = (0..5)
        .map(|_| {
            let t0 = Instant::now();
            pipeline_engine::hash::hash_file(&file).unwrap();
            t0.elapsed()
        })
        .collect();
    let best = median(runs);
    let gbs = (mb as f64 * 1048576.0) / best.as_secs_f64() / 1e9;
    println!(
        "hashing a {mb} MiB file:        {gbs:.2} GB/s (page cache warm, median of 5; target ≥ 1 GB/s)"
    );
}
