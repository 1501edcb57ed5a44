//! Throughput of the `clean` stage on the real shared corpus (`corpus/*/*.txt` under the data
//! root, `SOURCE.txt` excluded), in MB/s of input.
//!
//! ```text
//! cargo bench -p stage-clean                       # all cores
//! RAYON_NUM_THREADS=2 cargo bench -p stage-clean   # the 2-core figure
//! CLEAN_BENCH_RUNS=5 CLEAN_BENCH_PARAMS='{"to_simplified": false}' cargo bench -p stage-clean
//! CLEAN_BENCH_OUT=/tmp/clean cargo bench -p stage-clean   # keep the last run's output there
//! ```
//!
//! The data root is `$PIPELINE_DATA_ROOT`, else `../shared/datasets` beside the repository;
//! without it the benchmark prints a note and exits.

use std::path::{Path, PathBuf};
use std::time::Instant;

use indicatif::ProgressBar;
use pipeline_engine::stage::{Stage, StageContext};
use serde_json::{Map, Value};
use stage_clean::CleanStage;

fn main() {
    // `cargo test --all-targets` runs benchmarks once as tests, without `--bench`: nothing to
    // measure then.
    if !std::env::args().any(|a| a == "--bench") {
        println!("the clean benchmark runs under `cargo bench -p stage-clean`");
        return;
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let data = std::env::var_os("PIPELINE_DATA_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo.join("../shared/datasets"));
    let inputs = corpus_files(&data);
    if inputs.is_empty() {
        println!(
            "note: no corpus under {}, nothing to measure",
            data.display()
        );
        return;
    }
    let bytes: u64 = inputs
        .iter()
        .map(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .sum();
    let params: Map<String, Value> = std::env::var("CLEAN_BENCH_PARAMS")
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or_default();
    let runs: usize = std::env::var("CLEAN_BENCH_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    println!(
        "clean: {} files, {:.1} MB, {} threads, params {}",
        inputs.len(),
        bytes as f64 / 1e6,
        rayon::current_num_threads(),
        Value::Object(params.clone())
    );
    let mut times = Vec::new();
    for run in 0..runs.max(1) {
        times.push(one_run(&data, &inputs, &params, run, bytes));
    }
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    println!(
        "clean throughput: {:.1} MB/s (median of {}), best {:.1} MB/s",
        bytes as f64 / 1e6 / median,
        times.len(),
        bytes as f64 / 1e6 / times[0]
    );
    println!(
        "{}",
        serde_json::json!({"bench": "clean", "threads": rayon::current_num_threads(),
            "bytes": bytes, "seconds": median, "mb_per_s": bytes as f64 / 1e6 / median})
    );
}

/// The corpus files under the data root, `SOURCE.txt` left out, in path order.
fn corpus_files(data: &Path) -> Vec<PathBuf> {
    let pattern = data.join("corpus/*/*.txt");
    let mut inputs: Vec<PathBuf> = glob::glob(&pattern.to_string_lossy())
        .map(|paths| paths.flatten().collect())
        .unwrap_or_default();
    inputs.retain(|p| p.file_name().is_some_and(|n| n != "SOURCE.txt"));
    inputs.sort();
    inputs
}

/// One run of the stage in a fresh directory (or `$CLEAN_BENCH_OUT`); its seconds, printed
/// with the throughput. The first run also prints what the stage counted.
fn one_run(
    data: &Path,
    inputs: &[PathBuf],
    params: &Map<String, Value>,
    run: usize,
    bytes: u64,
) -> f64 {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let keep = std::env::var_os("CLEAN_BENCH_OUT").map(PathBuf::from);
    let base = keep.clone().unwrap_or_else(|| dir.path().to_path_buf());
    if let Some(k) = &keep {
        // Only what an earlier run of this benchmark left there.
        for d in ["out", "work", "log"] {
            let _ = std::fs::remove_dir_all(k.join(d));
        }
    }
    let (out, work, log) = (base.join("out"), base.join("work"), base.join("log"));
    for d in [&out, &work, &log] {
        std::fs::create_dir_all(d).expect("creating a directory in the temporary one");
    }
    let progress = ProgressBar::hidden();
    let ctx = StageContext {
        instance: "clean",
        stage: "clean",
        params,
        spec: &Value::Null,
        root: data,
        out_dir: &out,
        work_dir: &work,
        log_dir: &log,
        inputs,
        deps: &[],
        progress: &progress,
    };
    let start = Instant::now();
    if let Err(e) = CleanStage.run(&ctx) {
        eprintln!("clean failed: {e:#}");
        std::process::exit(1);
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "run {}: {:.3} s, {:.1} MB/s",
        run + 1,
        secs,
        bytes as f64 / 1e6 / secs
    );
    if run == 0 {
        let metrics = std::fs::read_to_string(out.join("metrics.json")).unwrap_or_default();
        let m: Value = serde_json::from_str(&metrics).unwrap_or(Value::Null);
        println!(
            "documents {} → {}, chars {} → {}, sentences {}, drops {}",
            m["documents_in"],
            m["documents_out"],
            m["chars_in"],
            m["chars_out"],
            m["sentences_out"],
            m["drops"]
        );
    }
    secs
}
