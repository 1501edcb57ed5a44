//! Table 4: throughput. Data preparation instances/s, training tokens/s and inference
//! sentences/s, from the benchmark outputs (`*.jsonl` under the bench folder: `pipeline bench
//! train|infer --json`, `benches/hf_baseline.py train|infer`) and from our pipeline runs
//! themselves; ours beside transformers' where both measured the same shape.
//!
//! Line formats (one JSON object a line; see docs/metrics.md):
//! - `{"bench": "train", model, share_type, device, precision, batch, seq, threads,
//!   tokens_per_s, mfu, model_tflops_per_s, isa?, isa_host?, …}` and `{"bench": "infer", model,
//!   device, batch, seq, threads, sentences_per_s, isa?, isa_host?, …}`: ours (`pipeline
//!   bench`); `isa` (CPU rows) is the vector level our kernels ran with, shown as a column;
//! - `{"bench": "hf_train", config, device, dtype, batch, seq, threads, tokens_per_s,
//!   model_tflops_per_s, mfu?, …}` and `{"bench": "hf_infer", config, device, dtype, batch,
//!   seq, threads, sentences_per_s, …}`: transformers (`benches/hf_baseline.py`);
//!   `hf_maxbatch` lines are memory, not throughput, and are left out;
//! - any line with `instances_per_s` is data preparation (`{"bench": "mask", instances_per_s,
//!   threads, …}` ours; `"bench": "albert_zh_mask"` albert_zh's create_pretraining_data.py);
//! - `{"bench": "cpu_compare", what, model, batch, seq, threads, ours, transformers,
//!   ratio_median, rounds, …}`: ours and transformers run alternately by
//!   `benches/cpu_compare.py`, whose per-round lines (they carry `round` and `arm`) are left
//!   out; the ratio shown is the median of the per-round ratios, the only ratio that holds
//!   on a machine whose speed drifts.

use std::path::{Path, PathBuf};

use serde_json::Value;

use pipeline_metrics::FinetuneRecord;

use crate::deps::Dep;
use crate::sizes::round;
use crate::table::{Cell, Col, Table, cells, cols};

/// One benchmark line and where it came from.
#[derive(Debug, Clone)]
pub struct BenchLine {
    /// `results/bench/train.jsonl:3`.
    pub source: String,
    pub value: Value,
}

/// Reads every `*.jsonl` file (sorted by path) and returns its object lines; what cannot be
/// read is a note.
pub fn read(files: &[PathBuf], root: &Path, notes: &mut Vec<String>) -> Vec<BenchLine> {
    let mut files = files.to_vec();
    files.sort();
    files.dedup();
    let mut out = Vec::new();
    for f in files {
        let name = f
            .strip_prefix(root)
            .unwrap_or(&f)
            .to_string_lossy()
            .replace('\\', "/");
        // The bench folder is the user's: regular files only (a FIFO would block the open),
        // bounded as every lines file is.
        let text = match pipeline_bounded::read_to_string(
            &f,
            pipeline_metrics::MAX_LINES_BYTES,
            "a benchmark lines file",
        ) {
            Ok(t) => t,
            Err(e) => {
                notes.push(format!("{name}: cannot be read ({}); left out", e.reason()));
                continue;
            }
        };
        let mut bad = 0;
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            match serde_json::from_str::<Value>(line) {
                Ok(v) if v.is_object() => out.push(BenchLine {
                    source: format!("{name}:{}", i + 1),
                    value: v,
                }),
                _ => bad += 1,
            }
        }
        if bad > 0 {
            notes.push(format!(
                "{name}: {bad} line(s) are not JSON objects (a human summary?); skipped"
            ));
        }
    }
    out
}

/// The `*.jsonl` files of a folder (not recursive), if it exists.
pub fn list(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "jsonl"))
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

fn s(v: &Value, k: &str) -> Option<String> {
    match v.get(k)? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn u(v: &Value, k: &str) -> Option<u64> {
    v.get(k).and_then(Value::as_u64)
}

fn f(v: &Value, k: &str) -> Option<f64> {
    v.get(k).and_then(Value::as_f64).filter(|x| x.is_finite())
}

/// A line's `isa`, with the host's best level beside it when the line ran a narrower one
/// (a forced level: burn's matrix products still used the host's best).
fn isa(v: &Value) -> Option<String> {
    let isa = s(v, "isa")?;
    Some(match s(v, "isa_host") {
        Some(host) if host != isa => format!("{isa} (host {host})"),
        _ => isa,
    })
}

fn device_class(device: &str) -> &'static str {
    if device.contains("cuda") {
        "cuda"
    } else {
        "cpu"
    }
}

/// A row before it goes into the table.
#[derive(Debug, Clone, Default)]
struct Row {
    what: &'static str,
    implementation: String,
    ours: bool,
    model: Option<String>,
    device: Option<String>,
    /// The vector level our CPU kernels ran with, `isa (host isa_host)` when forced lower.
    isa: Option<String>,
    precision: Option<String>,
    threads: Option<u64>,
    batch: Option<u64>,
    seq: Option<u64>,
    value: Option<f64>,
    unit: &'static str,
    tflops: Option<f64>,
    mfu: Option<f64>,
    /// Ours ÷ transformers measured in the same run (cpu_compare's median of rounds).
    same_run_ratio: Option<f64>,
    source: String,
}

impl Row {
    /// What must be equal for ours and transformers' to be compared.
    fn key(&self) -> Option<String> {
        let device = self.device.as_deref()?;
        let class = device_class(device);
        Some(format!(
            "{}|{}|{}|{}|{}|{}|{}",
            self.what,
            self.model.as_deref()?,
            class,
            self.precision.as_deref().unwrap_or("fp32"),
            self.batch?,
            self.seq?,
            // Threads matter on a CPU only.
            if class == "cpu" {
                self.threads.map(|t| t.to_string()).unwrap_or_default()
            } else {
                String::new()
            }
        ))
    }
}

/// Ours and transformers from one `cpu_compare` summary line.
fn from_compare(line: &BenchLine) -> Vec<Row> {
    let v = &line.value;
    let (what, unit) = match s(v, "what").as_deref() {
        Some("training") => ("training", "tokens/s"),
        Some("inference") => ("inference", "sentences/s"),
        _ => return Vec::new(),
    };
    let peer = s(v, "peer").unwrap_or_default();
    if peer != "transformers" {
        return Vec::new();
    }
    let base = Row {
        what,
        unit,
        model: s(v, "model"),
        device: Some("cpu".into()),
        isa: isa(v),
        precision: Some("fp32".into()),
        threads: u(v, "threads"),
        batch: u(v, "batch"),
        seq: u(v, "seq"),
        source: format!(
            "{} (median of {} alternating rounds)",
            line.source,
            u(v, "rounds").unwrap_or(0)
        ),
        ..Row::default()
    };
    vec![
        Row {
            implementation: "ours (pipeline bench)".into(),
            ours: true,
            value: f(v, "ours"),
            tflops: f(v, "ours_model_gflops").map(|g| g / 1e3),
            same_run_ratio: f(v, "ratio_median"),
            ..base.clone()
        },
        Row {
            implementation: "transformers".into(),
            value: f(v, "transformers"),
            ..base
        },
    ]
}

fn from_bench(line: &BenchLine) -> Option<Row> {
    let v = &line.value;
    let bench = s(v, "bench").unwrap_or_default();
    if v.get("round").is_some() && v.get("arm").is_some() {
        return None;
    }
    let base = Row {
        device: s(v, "device"),
        isa: isa(v),
        threads: u(v, "threads"),
        batch: u(v, "batch"),
        seq: u(v, "seq"),
        source: line.source.clone(),
        ..Row::default()
    };
    if let Some(ips) = f(v, "instances_per_s") {
        let albert_zh = bench.contains("albert_zh") || bench.contains("python");
        return Some(Row {
            what: "data preparation",
            implementation: if albert_zh {
                "albert_zh create_pretraining_data.py".into()
            } else {
                "ours (mask)".into()
            },
            ours: !albert_zh,
            model: s(v, "corpus").or(s(v, "model")),
            value: Some(ips),
            unit: "instances/s",
            ..base
        });
    }
    match bench.as_str() {
        "train" => Some(Row {
            what: "training",
            implementation: "ours (pipeline bench)".into(),
            ours: true,
            model: s(v, "model").map(|m| match s(v, "share_type") {
                Some(share) if share != "all" => format!("{m} (share {share})"),
                _ => m,
            }),
            precision: s(v, "precision"),
            value: f(v, "tokens_per_s"),
            unit: "tokens/s",
            tflops: f(v, "model_tflops_per_s"),
            mfu: f(v, "mfu"),
            ..base
        }),
        "hf_train" => Some(Row {
            what: "training",
            implementation: "transformers".into(),
            model: s(v, "config"),
            precision: s(v, "dtype"),
            value: f(v, "tokens_per_s"),
            unit: "tokens/s",
            tflops: f(v, "model_tflops_per_s"),
            mfu: f(v, "mfu"),
            ..base
        }),
        "infer" => Some(Row {
            what: "inference",
            implementation: "ours (pipeline bench)".into(),
            ours: true,
            model: s(v, "model"),
            precision: s(v, "precision"),
            value: f(v, "sentences_per_s"),
            unit: "sentences/s",
            ..base
        }),
        "hf_infer" => Some(Row {
            what: "inference",
            implementation: "transformers".into(),
            model: s(v, "config"),
            precision: s(v, "dtype"),
            value: f(v, "sentences_per_s"),
            unit: "sentences/s",
            ..base
        }),
        _ => None,
    }
}

/// The throughput table: the benchmark lines (ours beside transformers' on the same shape),
/// then our stages' own runs, with ours ÷ transformers where both measured the same shape.
pub fn throughput(lines: &[BenchLine], pretrain: &[&Dep], finetune: &[&Dep]) -> Table {
    let mut t = Table::new("throughput", "Throughput", throughput_columns());
    let (mut rows, skipped) = bench_rows(lines);
    rows.extend(pretrain.iter().map(|d| pretrain_row(d)));
    rows.extend(finetune_rows(finetune));
    for r in sorted(&rows) {
        t.push(cells(r, ratio(r, &rows)));
    }
    if skipped > 0 {
        t.notes.push(format!(
            "{skipped} benchmark line(s) of other kinds (hf_maxbatch: memory, not throughput; \
             isa_compare: ratios between vector levels) are left out."
        ));
    }
    if !pretrain.is_empty() || !finetune.is_empty() {
        t.notes.push(
            "Rows from our stages are the experiment's own runs (real data, padded batches \
             of varying length, evaluation excluded), not fixed-shape benchmarks: compare \
             them with each other, and the benchmark rows with transformers'."
                .into(),
        );
    }
    t
}

/// The throughput table's columns (a data table).
fn throughput_columns() -> Vec<Col> {
    cols(
        r#"
        what | What | text | data preparation, training or inference
        implementation | Implementation | text | ours, transformers, albert_zh
        model | Model | text | config (albert_zh name) or corpus
        device | Device | text | as the benchmark names it
        precision | Precision | text | fp32, bf16
        threads | Threads | int | CPU threads
        batch | Batch | int | rows per step
        seq | Seq | int | tokens per row
        value | Throughput | f1 =rate | see unit
        unit | Unit | text | instances/s, tokens/s, sentences/s, examples/s
        vs_transformers | × transformers | f2 | ours ÷ transformers on the same model, device, precision, batch, length (and threads on a CPU)
        model_tflops_per_s | Model TFLOP/s | f3 data | model FLOPs per second (the formula of benches/hf_baseline.py)
        mfu | MFU % | f1 | model FLOPs utilisation, GPU only
        // Added after the columns readers of throughput.csv already index.
        isa | ISA | text | vector instructions of our CPU kernels (baseline, avx2, avx512; the host's best in brackets when forced lower): figures from different hosts do not compare
        source | Source | text | benchmark file:line, or the stage instance
        "#,
    )
}

/// The benchmark lines as rows, and how many were of kinds the table does not show.
fn bench_rows(lines: &[BenchLine]) -> (Vec<Row>, usize) {
    let mut rows: Vec<Row> = Vec::new();
    let mut skipped = 0;
    for l in lines {
        if s(&l.value, "bench").as_deref() == Some("cpu_compare") {
            rows.extend(from_compare(l));
            continue;
        }
        match from_bench(l) {
            Some(r) => rows.push(r),
            None => skipped += 1,
        }
    }
    (rows, skipped)
}

/// A pretraining run's own training throughput.
fn pretrain_row(d: &Dep) -> Row {
    let r = d.pretrain();
    Row {
        what: "training",
        implementation: "ours (pretrain stage)".into(),
        ours: true,
        model: r.model.as_ref().map(|m| match &r.share_type {
            Some(share) if share != "all" => format!("{m} (share {share})"),
            _ => m.clone(),
        }),
        device: r.device.clone(),
        precision: r.precision.clone(),
        threads: r.threads,
        batch: r.effective_batch_size,
        seq: r.max_seq_length,
        value: r.tokens_per_s,
        unit: "tokens/s",
        tflops: r.model_tflops_per_s,
        source: d.instance.clone(),
        ..Row::default()
    }
}

/// Fine-tuning runs: one row per task and measure, the mean over its runs (they differ in
/// weights, not in shape).
fn finetune_rows(finetune: &[&Dep]) -> Vec<Row> {
    let mut by_task: std::collections::BTreeMap<String, Vec<&Dep>> = Default::default();
    for d in finetune {
        by_task
            .entry(d.task().unwrap_or_else(|| d.stage.clone()))
            .or_default()
            .push(d);
    }
    let mut rows = Vec::new();
    for (task, runs) in &by_task {
        let first = runs[0].finetune();
        let records: Vec<_> = runs.iter().map(|d| d.finetune()).collect();
        let mean = |rate: fn(&FinetuneRecord) -> Option<f64>| -> Option<f64> {
            let xs: Vec<f64> = records.iter().filter_map(|r| rate(r)).collect();
            (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
        };
        let source = if runs.len() == 1 {
            runs[0].instance.clone()
        } else {
            format!("{} ({} runs, mean)", runs[0].stage, runs.len())
        };
        let base = Row {
            ours: true,
            implementation: "ours (finetune stage)".into(),
            model: Some(task.clone()),
            device: first.device.clone(),
            threads: first.threads,
            seq: first.max_seq_length,
            source,
            ..Row::default()
        };
        rows.push(Row {
            what: "fine-tuning",
            batch: first.batch_size,
            value: mean(|r| r.train_examples_per_s),
            unit: "examples/s",
            ..base.clone()
        });
        rows.push(Row {
            what: "inference",
            value: mean(|r| r.eval_sentences_per_s),
            unit: "sentences/s",
            ..base
        });
    }
    rows
}

/// Ours ÷ transformers where the same shape was measured by both.
fn ratio(r: &Row, rows: &[Row]) -> Option<f64> {
    if !r.ours {
        return None;
    }
    if let Some(same_run) = r.same_run_ratio {
        return Some(round(same_run, 2));
    }
    let key = r.key()?;
    let theirs = rows
        .iter()
        .find(|o| o.implementation == "transformers" && o.key().as_deref() == Some(&key))?;
    Some(round(r.value? / theirs.value?, 2))
}

/// Data preparation, training, fine-tuning, inference; within each, the benchmarks first
/// (ours beside transformers'), then our stages' runs.
fn sorted(rows: &[Row]) -> Vec<&Row> {
    let order = |w: &str| match w {
        "data preparation" => 0,
        "training" => 1,
        "fine-tuning" => 2,
        _ => 3,
    };
    let stage_row = |r: &Row| r.implementation.contains("stage");
    let mut sorted: Vec<&Row> = rows.iter().collect();
    sorted.sort_by(|a, b| {
        let key = |r: &Row| {
            (
                order(r.what),
                stage_row(r),
                r.model.clone(),
                r.batch,
                r.seq,
                r.device.clone(),
                r.isa.clone(),
                r.implementation.clone(),
                r.source.clone(),
            )
        };
        key(a).cmp(&key(b))
    });
    sorted
}

fn cells(r: &Row, ratio: Option<f64>) -> Vec<(&'static str, Cell)> {
    cells! {
        what: r.what,
        implementation: r.implementation.as_str(),
        model: r.model.clone(),
        device: r.device.clone(),
        isa: r.isa.clone(),
        precision: r.precision.clone(),
        threads: r.threads,
        batch: r.batch,
        seq: r.seq,
        value: r.value.map(|x| round(x, 1)),
        unit: r.unit,
        vs_transformers: ratio,
        model_tflops_per_s: r.tflops.map(|x| round(x, 4)),
        mfu: r.mfu.map(|m| round(m * 100.0, 2)),
        source: r.source.as_str(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn line(v: Value) -> BenchLine {
        BenchLine {
            source: "results/bench/x.jsonl:1".into(),
            value: v,
        }
    }

    #[test]
    fn alternating_runs_are_quoted_by_their_median_ratio_and_rounds_left_out() {
        let lines = vec![
            line(
                json!({"bench": "train", "round": 1, "arm": "ours", "model": "tiny",
                "device": "flex", "batch": 32, "seq": 128, "threads": 2, "tokens_per_s": 9.0}),
            ),
            line(
                json!({"bench": "hf_train", "round": 1, "arm": "transformers",
                "config": "tiny", "device": "cpu", "dtype": "fp32", "batch": 32, "seq": 128,
                "threads": 2, "tokens_per_s": 1.0}),
            ),
            line(
                json!({"bench": "cpu_compare", "peer": "transformers", "what": "training",
                "model": "tiny", "batch": 32, "seq": 128, "threads": 2, "ours": 6674.0,
                "transformers": 2558.0, "ratio_median": 2.614, "rounds": 3,
                "ours_model_gflops": 217.0}),
            ),
        ];
        let t = throughput(&lines, &[], &[]);
        let json = t.json(serde_json::Map::new()).unwrap();
        let rows = json["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 2, "{rows:?}");
        let ours = rows
            .iter()
            .find(|r| r["implementation"] != "transformers")
            .unwrap();
        assert_eq!(ours["value"], 6674.0);
        // The median of the per-round ratios, not 6674 / 2558 = 2.61 recomputed from medians.
        assert_eq!(ours["vs_transformers"], 2.61);
        assert!(
            ours["source"]
                .as_str()
                .unwrap()
                .contains("median of 3 alternating rounds")
        );
    }

    #[test]
    fn ours_is_compared_with_transformers_on_the_same_shape() {
        let lines = vec![
            line(
                json!({"bench": "train", "model": "tiny", "share_type": "all",
                "device": "flex", "precision": "fp32", "batch": 32, "seq": 128,
                "threads": 2, "tokens_per_s": 3000.0, "mfu": null}),
            ),
            line(
                json!({"bench": "hf_train", "config": "tiny", "device": "cpu",
                "dtype": "fp32", "batch": 32, "seq": 128, "threads": 2,
                "tokens_per_s": 2000.0}),
            ),
            line(
                json!({"bench": "hf_train", "config": "tiny", "device": "cpu",
                "dtype": "fp32", "batch": 64, "seq": 128, "threads": 2,
                "tokens_per_s": 2100.0}),
            ),
            line(
                json!({"bench": "infer", "model": "tiny", "device": "cuda:0", "batch": 64,
                "seq": 64, "threads": 16, "sentences_per_s": 900.0}),
            ),
            line(
                json!({"bench": "hf_infer", "config": "tiny", "device": "cuda",
                "dtype": "fp32", "batch": 64, "seq": 64, "threads": 1,
                "sentences_per_s": 600.0}),
            ),
            line(json!({"bench": "hf_maxbatch", "config": "base", "max_batch": 512})),
            line(
                json!({"bench": "mask", "instances_per_s": 64564.0, "threads": 2,
                "corpus": "peoples_daily"}),
            ),
        ];
        let t = throughput(&lines, &[], &[]);
        assert_eq!(t.rows.len(), 6);
        let j = t.json(serde_json::Map::new()).unwrap();
        let rows = j["rows"].as_array().unwrap();
        assert_eq!(rows[0]["what"], "data preparation");
        let ours_train = rows
            .iter()
            .find(|r| r["implementation"] == "ours (pipeline bench)" && r["what"] == "training")
            .unwrap();
        assert_eq!(ours_train["vs_transformers"], json!(1.5));
        let ours_infer = rows
            .iter()
            .find(|r| r["implementation"] == "ours (pipeline bench)" && r["what"] == "inference")
            .unwrap();
        // On a GPU the thread count does not matter.
        assert_eq!(ours_infer["vs_transformers"], json!(1.5));
        assert!(t.notes[0].contains("hf_maxbatch"));
    }

    /// The level a CPU row ran with is a column; a forced level carries the host's beside it.
    #[test]
    fn cpu_rows_show_the_instruction_set_they_ran_on() {
        let lines = vec![
            line(
                json!({"bench": "infer", "model": "tiny", "device": "flex", "batch": 64,
                "seq": 64, "threads": 2, "sentences_per_s": 500.0,
                "isa": "avx2", "isa_host": "avx512"}),
            ),
            line(
                json!({"bench": "infer", "model": "tiny", "device": "flex", "batch": 64,
                "seq": 64, "threads": 2, "sentences_per_s": 600.0,
                "isa": "avx512", "isa_host": "avx512"}),
            ),
            line(
                json!({"bench": "infer", "model": "tiny", "device": "cuda:0", "batch": 64,
                "seq": 64, "sentences_per_s": 9000.0, "isa": null}),
            ),
        ];
        let json = throughput(&lines, &[], &[])
            .json(serde_json::Map::new())
            .unwrap();
        let isa_of = |rate: f64| {
            json["rows"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["value"] == rate)
                .map(|r| r["isa"].clone())
                .unwrap()
        };
        assert_eq!(isa_of(500.0), "avx2 (host avx512)");
        assert_eq!(isa_of(600.0), "avx512");
        assert!(isa_of(9000.0).is_null());
    }

    #[test]
    fn unreadable_lines_are_notes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("a.jsonl"),
            "{\"bench\": \"infer\"}\nnot json\n\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("b.txt"), "x").unwrap();
        let files = list(dir.path());
        assert_eq!(files.len(), 1);
        let mut notes = Vec::new();
        let lines = read(&files, dir.path(), &mut notes);
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0].source, "a.jsonl:1");
        assert!(notes[0].contains("1 line(s)"), "{notes:?}");
    }
}
