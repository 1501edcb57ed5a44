//! The throughput table itself: its columns, the rows in order (data preparation, training,
//! fine-tuning, inference; benchmarks before our stages' runs) and ours ÷ transformers where
//! both measured the same shape.

use super::lines::BenchLine;
use super::rows::{Row, bench_rows, finetune_rows, pretrain_row};
use crate::deps::Dep;
use crate::sizes::round;
use crate::table::{Cell, Table, cells};

/// The throughput table: the benchmark lines (ours beside transformers' on the same shape),
/// then our stages' own runs, with ours ÷ transformers where both measured the same shape.
pub fn throughput(lines: &[BenchLine], pretrain: &[&Dep], finetune: &[&Dep]) -> Table {
    let mut t = Table::new(
        "throughput",
        "Throughput",
        crate::data::columns("throughput"),
    );
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
        t.notes
            .push(crate::data::text("throughput.note_stage_rows").into());
    }
    t
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
    use serde_json::{Value, json};

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
}
