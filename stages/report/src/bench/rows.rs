//! The throughput table's rows before they are ordered: one per benchmark line of a kind the
//! table shows (ours, transformers', albert_zh's; a `cpu_compare` summary gives two), one per
//! pretraining run, and two per fine-tuning task (training and inference, the mean of its
//! runs). The line formats are listed in [`super`].

use serde_json::Value;

use pipeline_metrics::FinetuneRecord;

use super::lines::BenchLine;
use crate::deps::Dep;

pub(super) fn s(v: &Value, k: &str) -> Option<String> {
    match v.get(k)? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

pub(super) fn u(v: &Value, k: &str) -> Option<u64> {
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

pub(super) fn device_class(device: &str) -> &'static str {
    if device.contains("cuda") {
        "cuda"
    } else {
        "cpu"
    }
}

/// A row before it goes into the table.
#[derive(Debug, Clone, Default)]
pub(super) struct Row {
    pub(super) what: &'static str,
    pub(super) implementation: String,
    pub(super) ours: bool,
    pub(super) model: Option<String>,
    pub(super) device: Option<String>,
    /// The vector level our CPU kernels ran with, `isa (host isa_host)` when forced lower.
    pub(super) isa: Option<String>,
    pub(super) precision: Option<String>,
    pub(super) threads: Option<u64>,
    pub(super) batch: Option<u64>,
    pub(super) seq: Option<u64>,
    pub(super) value: Option<f64>,
    pub(super) unit: &'static str,
    pub(super) tflops: Option<f64>,
    pub(super) mfu: Option<f64>,
    /// Ours ÷ transformers measured in the same run (cpu_compare's median of rounds).
    pub(super) same_run_ratio: Option<f64>,
    /// The round of a GPU sitting's benchmarks that measured it (the line's `call`): ours and
    /// transformers' of one round ran one after the other, so they are compared with each
    /// other, not with another round's.
    pub(super) call: Option<u64>,
    pub(super) source: String,
}

impl Row {
    /// Whether the row is transformers', in either attention.
    pub(super) fn is_transformers(&self) -> bool {
        !self.ours && self.implementation.starts_with("transformers")
    }

    /// What must be equal for ours and transformers' to be compared.
    pub(super) fn key(&self) -> Option<String> {
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

/// A data preparation line (`instances_per_s`): ours (`mask`) or albert_zh's script.
fn data_preparation(v: &Value, bench: &str, ips: f64, base: Row) -> Row {
    let albert_zh = bench.contains("albert_zh") || bench.contains("python");
    Row {
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
    }
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
        call: u(v, "call"),
        ..Row::default()
    };
    if let Some(ips) = f(v, "instances_per_s") {
        return Some(data_preparation(v, &bench, ips, base));
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
            implementation: transformers(v),
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

/// transformers' implementation as the table names it: its attention when not its default
/// SDPA (`benches/gpu.sh` runs both, and ours is compared with the faster).
fn transformers(v: &Value) -> String {
    match s(v, "attn").as_deref() {
        Some("eager") => "transformers (eager attention)".into(),
        _ => "transformers".into(),
    }
}

/// The benchmark lines as rows, and how many were of kinds the table does not show.
pub(super) fn bench_rows(lines: &[BenchLine]) -> (Vec<Row>, usize) {
    let mut rows: Vec<Row> = Vec::new();
    let mut skipped = 0;
    for l in lines {
        match s(&l.value, "bench").as_deref() {
            Some("cpu_compare") => {
                rows.extend(from_compare(l));
                continue;
            }
            // Memory, not throughput: the max-batch table's.
            Some("maxbatch" | "hf_maxbatch") => continue,
            _ => {}
        }
        match from_bench(l) {
            Some(r) => rows.push(r),
            None => skipped += 1,
        }
    }
    (rows, skipped)
}

/// A pretraining run's own training throughput.
pub(super) fn pretrain_row(d: &Dep) -> Row {
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
pub(super) fn finetune_rows(finetune: &[&Dep]) -> Vec<Row> {
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
