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
    t.notes.extend(round_medians(&rows));
    if skipped > 0 {
        t.notes.push(format!(
            "{skipped} benchmark line(s) of other kinds (isa_compare: ratios between vector \
             levels) are left out."
        ));
    }
    if !pretrain.is_empty() || !finetune.is_empty() {
        t.notes
            .push(crate::data::text("throughput.note_stage_rows").into());
    }
    t
}

/// Ours ÷ transformers where the same shape was measured by both: in the same round when the
/// row is of a sitting's round (none when transformers' failed in that round), and against the
/// fastest of transformers' rows there (SDPA or eager attention: the stricter comparison).
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
        .filter(|o| {
            o.is_transformers()
                && o.key().as_deref() == Some(&key)
                && (r.call.is_none() || o.call == r.call)
        })
        .filter_map(|o| o.value)
        .max_by(f64::total_cmp)?;
    Some(round(r.value? / theirs, 2))
}

/// For each shape measured in two or more rounds of a sitting, the median of the rounds'
/// ratios: on a GPU shared by nothing else the rounds still drift (clocks, the other
/// processes of the call), and only the ratio within a round holds.
fn round_medians(rows: &[Row]) -> Vec<String> {
    let mut by_shape: std::collections::BTreeMap<String, (String, Vec<f64>)> = Default::default();
    for r in rows.iter().filter(|r| r.ours && r.call.is_some()) {
        if let (Some(key), Some(x)) = (r.key(), ratio(r, rows)) {
            let label = || {
                format!(
                    "{} of {} on {}, {}, batch {} × {}",
                    r.what,
                    r.model.as_deref().unwrap_or("?"),
                    r.device.as_deref().unwrap_or("?"),
                    r.precision.as_deref().unwrap_or("fp32"),
                    r.batch.unwrap_or(0),
                    r.seq.unwrap_or(0)
                )
            };
            by_shape
                .entry(key)
                .or_insert_with(|| (label(), Vec::new()))
                .1
                .push(x);
        }
    }
    by_shape
        .into_values()
        .filter(|(_, x)| x.len() >= 2)
        .map(|(label, mut x)| {
            x.sort_by(f64::total_cmp);
            let n = x.len();
            let median = if n % 2 == 1 {
                x[n / 2]
            } else {
                (x[n / 2 - 1] + x[n / 2]) / 2.0
            };
            format!(
                "{label}: ours ÷ transformers {median:.2}, the median of {n} rounds ({:.2}–{:.2})",
                x[0],
                x[n - 1]
            )
        })
        .collect()
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
        assert!(
            t.notes.is_empty(),
            "the max-batch line is the other table's: {:?}",
            t.notes
        );
    }

    /// A sitting's rounds: each of ours is compared with transformers' of its own round, and
    /// the rounds' ratios are summarised by their median.
    #[test]
    fn sitting_rounds_are_compared_within_the_round_and_summarised_by_their_median() {
        let ours = |call: u64, rate: f64| {
            line(
                json!({"bench": "train", "model": "tiny", "device": "cuda:0",
                "precision": "fp32", "batch": 256, "seq": 128, "tokens_per_s": rate,
                "round": "more", "call": call}),
            )
        };
        let theirs = |call: u64, rate: f64| {
            line(
                json!({"bench": "hf_train", "config": "tiny", "device": "cuda",
                "dtype": "fp32", "batch": 256, "seq": 128, "tokens_per_s": rate,
                "round": "more", "call": call}),
            )
        };
        let lines = vec![
            ours(1, 100.0),
            theirs(1, 200.0),
            ours(2, 300.0),
            theirs(2, 200.0),
            ours(3, 240.0),
            theirs(3, 200.0),
            // Transformers failed in round 4: no ratio, rather than one against round 1.
            ours(4, 500.0),
        ];
        let t = throughput(&lines, &[], &[]);
        let j = t.json(serde_json::Map::new()).unwrap();
        let mut ratios: Vec<Value> = j["rows"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["implementation"] != "transformers")
            .map(|r| r["vs_transformers"].clone())
            .collect();
        ratios.sort_by_key(|v| v.to_string());
        assert_eq!(
            ratios,
            vec![json!(0.5), json!(1.2), json!(1.5), Value::Null],
            "{j}"
        );
        let note = t.notes.iter().find(|n| n.contains("median of 3 rounds"));
        assert!(
            note.is_some_and(|n| n
                .starts_with("training of tiny on cuda:0, fp32, batch 256 × 128")
                && n.contains("1.20")
                && n.contains("0.50–1.50")),
            "{:?}",
            t.notes
        );
    }

    /// Where transformers ran with both attentions in a round, ours is compared with the
    /// faster of the two, whichever it is, and the eager row is named as such.
    #[test]
    fn ours_is_compared_with_the_faster_of_transformers_attentions() {
        let row = |bench: &str, attn: Option<&str>, call: u64, rate: f64| {
            let mut v = json!({"bench": bench, "model": "base", "config": "base",
                "device": "cuda:0", "precision": "bf16", "dtype": "bf16", "batch": 128,
                "seq": 128, "tokens_per_s": rate, "call": call});
            if let Some(a) = attn {
                v["attn"] = json!(a);
            }
            line(v)
        };
        let lines = vec![
            row("train", None, 1, 300.0),
            row("hf_train", Some("sdpa"), 1, 200.0),
            row("hf_train", Some("eager"), 1, 250.0),
            row("train", None, 2, 300.0),
            row("hf_train", Some("eager"), 2, 100.0),
            row("hf_train", Some("sdpa"), 2, 150.0),
        ];
        let t = throughput(&lines, &[], &[]);
        let j = t.json(serde_json::Map::new()).unwrap();
        let rows = j["rows"].as_array().unwrap();
        let mut ratios: Vec<String> = rows
            .iter()
            .filter(|r| r["implementation"] == "ours (pipeline bench)")
            .map(|r| r["vs_transformers"].to_string())
            .collect();
        ratios.sort();
        assert_eq!(ratios, ["1.2", "2.0"], "{j}");
        let eager = rows
            .iter()
            .filter(|r| r["implementation"] == "transformers (eager attention)")
            .count();
        assert_eq!(eager, 2);
        assert!(
            t.notes
                .iter()
                .any(|n| n.contains("1.60, the median of 2 rounds")),
            "{:?}",
            t.notes
        );
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
