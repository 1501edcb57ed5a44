//! The `baseline` stage's results in the fine-tuning tables: one row per method (majority
//! class, overlap and length thresholds, n-gram logistic regressions), and the pair-length
//! analysis that shows when a protocol's training data carries a shortcut its test set does
//! not (LCQMC: we train on its dev set, whose positive pairs are longer).

use std::fmt::Write as _;

use serde_json::Value;

use pipeline_metrics::BaselineEntry;

use crate::deps::Dep;
use crate::finetune_runs::{resolve_entry, train_data, train_examples};
use crate::sizes::round;
use crate::table::{Cell, cells, thousands};

/// What a baseline fitted, in a few words for the table's note.
fn fitted(entry: &BaselineEntry) -> Option<String> {
    let fit = entry.fit.as_ref()?;
    if let Some(c) = fit.get("class").and_then(Value::as_str) {
        return Some(format!("always {c}"));
    }
    if let (Some(ts), Some(cs)) = (
        fit.get("thresholds").and_then(Value::as_array),
        fit.get("classes").and_then(Value::as_array),
    ) {
        let cls: Vec<&str> = cs.iter().filter_map(Value::as_str).collect();
        let mut s = String::new();
        for (i, c) in cls.iter().enumerate() {
            if i > 0 {
                let t = ts.get(i - 1).and_then(Value::as_f64).unwrap_or(f64::NAN);
                let _ = write!(s, " | {} | ", round(t, 3));
            }
            s.push_str(c);
        }
        return Some(format!("{s} (classes by interval)"));
    }
    let features = fit.get("features").and_then(Value::as_u64)?;
    let n = fit.get("ngram_max").and_then(Value::as_u64).unwrap_or(0);
    let alpha = fit.get("alpha").and_then(Value::as_f64);
    Some(format!(
        "{} features (1–{n}-grams), L2 alpha {}",
        thousands(features as i64),
        alpha.map_or("?".into(), |a| a.to_string())
    ))
}

/// The rows of every baseline stage, in order (stage, then method as the stage ran them).
pub fn rows(deps: &[&Dep]) -> Vec<Vec<(&'static str, Cell)>> {
    let mut sorted: Vec<&&Dep> = deps.iter().collect();
    sorted.sort_by_key(|d| d.instance.clone());
    let mut out = Vec::new();
    for d in sorted {
        let record = d.baseline();
        let protocol = record.protocol.as_ref();
        let Some(entries) = &record.baselines else {
            continue;
        };
        for e in entries {
            let r = resolve_entry(e);
            let name = e.name.as_deref().unwrap_or("?");
            let model = e.description.as_deref().unwrap_or(name).to_string();
            out.push(cells! {
                source: "baseline",
                model: model,
                train_data: protocol.and_then(train_data),
                dev: r.dev,
                dev_md: r.dev.map(|x| format!("{x:.2}")),
                test: r.test,
                test_md: r.test.map(|x| format!("{x:.2}")),
                selection_accuracy: r.selection,
                dev_set: r.dev_set,
                test_set: r.test_set,
                train_examples: train_examples(protocol),
                run: format!("{}/{name}", d.instance),
                note: fitted(e),
            });
        }
    }
    out
}

/// `0 → 23.2, 1 → 26.8` from a `length` block.
fn means(block: &Value) -> Option<(String, Vec<f64>)> {
    let m = block.get("mean_chars")?.as_object()?;
    let mut parts = Vec::new();
    let mut values = Vec::new();
    for (label, v) in m {
        let x = v.as_f64()?;
        parts.push(format!("{label} {x:.1}"));
        values.push(x);
    }
    Some((parts.join(", "), values))
}

fn accuracy_of(entry: &BaselineEntry, set: &str) -> Option<f64> {
    let r = resolve_entry(entry);
    match set {
        "dev" => r.dev,
        _ => r.test,
    }
}

/// The pair-length paragraph of one baseline stage: mean characters per class in the training
/// split and the evaluation sets, what a length threshold fitted on train scores, and — for a
/// two-class task — whether the training data's length gap is one the test set lacks.
pub fn length_analysis(d: &Dep) -> Option<String> {
    let record = d.baseline();
    let length = record.length.as_ref()?;
    let (train_text, train_vals) = means(length.get("train")?)?;
    let mut s = format!(
        "Pair length (characters of both texts, mean per class) in `{}`'s data: train {train_text}",
        d.stage
    );
    let mut test_vals = None;
    for (name, block) in length {
        if name == "train" || name == "dev" {
            continue;
        }
        if let Some((text, vals)) = means(block) {
            let _ = write!(s, "; {name} {text}");
            if name == "test" || name.ends_with("_test") {
                test_vals = Some(vals);
            }
        }
    }
    s.push('.');
    let entry = record
        .baselines
        .as_ref()?
        .iter()
        .find(|e| e.name.as_deref() == Some("length"));
    if let Some(e) = entry {
        let train = e
            .train
            .as_ref()
            .and_then(|b| b.get("accuracy"))
            .and_then(Value::as_f64)
            .map(|a| a * 100.0);
        let pct = |x: Option<f64>| x.map_or("?".into(), |x| format!("{x:.1} %"));
        let _ = write!(
            s,
            " A length threshold fitted on the training pairs scores {} on them, {} on the \
             held-out dev split and {} on test.",
            pct(train),
            pct(accuracy_of(e, "dev")),
            pct(accuracy_of(e, "test"))
        );
    }
    if let (2, Some(test)) = (train_vals.len(), test_vals)
        && test.len() == 2
    {
        let gap_train = train_vals[1] - train_vals[0];
        let gap_test = test[1] - test[0];
        if gap_train.abs() >= 1.0 && gap_test.abs() < gap_train.abs() / 2.0 {
            let _ = write!(
                s,
                " The training pairs of class {} are {:.1} characters longer than the others, \
                 the test pairs {:.1}: a shortcut that model selection on held-out training \
                 data rewards and the test set does not, so the held-out Dev column is \
                 optimistic for models that learn it.",
                if gap_train > 0.0 { "1" } else { "0" },
                gap_train.abs(),
                gap_test.abs()
            );
        }
    }
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn dep(metrics: Value) -> Dep {
        Dep::new("baseline_lcqmc", crate::deps::DepKind::Baseline, metrics)
    }

    fn metrics() -> Value {
        json!({
            "task": "lcqmc", "labels": ["0", "1"],
            "protocol": {"train": {"examples": 7921, "files": [{"path": "../shared/datasets/lcqmc/dev.tsv"}]}},
            "baselines": [
                {"name": "majority", "description": "majority class", "fit": {"class": "1"},
                 "train": {"accuracy": 0.55}, "dev": {"accuracy": 0.55},
                 "eval": {"test": {"accuracy": 0.5}}},
                {"name": "length", "description": "pair-length threshold",
                 "fit": {"thresholds": [24.5], "classes": ["0", "1"]},
                 "train": {"accuracy": 0.6}, "dev": {"accuracy": 0.59},
                 "eval": {"test": {"accuracy": 0.51}}}
            ],
            "length": {
                "train": {"mean_chars": {"0": 23.2, "1": 26.8}},
                "dev": {"mean_chars": {"0": 23.0, "1": 27.0}},
                "test": {"mean_chars": {"0": 22.0, "1": 22.4}}
            }
        })
    }

    #[test]
    fn one_row_per_method_with_what_it_fitted() {
        let d = dep(metrics());
        let rows = rows(&[&d]);
        assert_eq!(rows.len(), 2);
        let cell = |r: &Vec<(&str, Cell)>, k: &str| {
            r.iter().find(|(key, _)| *key == k).map(|(_, c)| c.clone())
        };
        assert_eq!(cell(&rows[0], "source"), Some(Cell::from("baseline")));
        assert_eq!(cell(&rows[0], "test"), Some(Cell::Float(50.0)));
        assert_eq!(
            cell(&rows[0], "train_data"),
            Some(Cell::from("lcqmc/dev.tsv"))
        );
        assert_eq!(
            cell(&rows[1], "note"),
            Some(Cell::from("0 | 24.5 | 1 (classes by interval)"))
        );
        assert_eq!(
            cell(&rows[1], "run"),
            Some(Cell::from("baseline_lcqmc/length"))
        );
    }

    #[test]
    fn the_length_paragraph_names_the_shortcut_only_when_test_lacks_it() {
        let s = length_analysis(&dep(metrics())).unwrap();
        assert!(s.contains("train 0 23.2, 1 26.8"), "{s}");
        assert!(
            s.contains("60.0 % on them, 59.0 % on the held-out dev split and 51.0 % on test"),
            "{s}"
        );
        assert!(
            s.contains("3.6 characters longer") && s.contains("the test pairs 0.4"),
            "{s}"
        );
        let mut m = metrics();
        m["length"]["test"] = json!({"mean_chars": {"0": 22.0, "1": 25.6}});
        let s = length_analysis(&dep(m)).unwrap();
        assert!(!s.contains("shortcut"), "{s}");
    }
}
