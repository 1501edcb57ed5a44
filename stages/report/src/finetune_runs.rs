//! Table 3: our fine-tuning runs of one task (LCQMC, XNLI, any other) beside the published
//! ones, seeds folded into mean ± sd, and the sentence that says what data they used.

use pipeline_tasks::MetricsBlock;
use serde::Deserialize;
use serde_json::Value;

use pipeline_metrics::BaselineEntry;
use serde_json::Map;

use crate::deps::Dep;
use crate::published::TaskPublished;
use crate::runs::{dims, percent};
use crate::seeds::{self, MeanSd};
use crate::sizes::round;
use crate::table::{Cell, Table, cells, thousands};

pub use crate::protocol_sentence::protocol_sentence_as;

/// The evaluation set reported as "dev" or "test": `test`, `xnli_test`, ….
fn eval_set<'a>(eval: Option<&'a Map<String, Value>>, suffix: &str) -> Option<(String, &'a Value)> {
    let eval = eval?;
    eval.iter()
        .find(|(k, _)| k.as_str() == suffix)
        .or_else(|| {
            eval.iter()
                .find(|(k, _)| k.ends_with(&format!("_{suffix}")))
        })
        .map(|(k, v)| (k.clone(), v))
}

/// The figure of a metrics block (metrics.json's `dev` or one of `eval`), read through the
/// type the finetune and baseline stages write: accuracy, or entity F1 for a tagger. A block
/// of another shape (an older artifact) falls back to its `accuracy`.
fn accuracy(v: &Value) -> Option<f64> {
    match MetricsBlock::deserialize(v) {
        Ok(b) => percent(Some(b.headline())),
        Err(_) => percent(v.get("accuracy").and_then(Value::as_f64)),
    }
}

/// Which numbers of a fine-tuning run go in the Dev and Test columns, and what they are.
pub struct Resolved {
    pub dev: Option<f64>,
    /// `xnli_dev`, or `held-out` when Dev is the model-selection split.
    pub dev_set: Option<String>,
    pub test: Option<f64>,
    pub test_set: Option<String>,
    pub selection: Option<f64>,
}

/// [`resolve_scores`] of a fine-tuning run.
pub fn resolve(d: &Dep) -> Resolved {
    let r = d.finetune();
    resolve_scores(r.dev.as_ref(), r.eval.as_ref())
}

/// [`resolve_scores`] of one method of a baseline stage.
pub fn resolve_entry(e: &BaselineEntry) -> Resolved {
    resolve_scores(e.dev.as_ref(), e.eval.as_ref())
}

/// The Dev and Test figures of a run's `dev` block (the model-selection split) and `eval`
/// blocks (by set name).
pub fn resolve_scores(dev: Option<&Value>, eval: Option<&Map<String, Value>>) -> Resolved {
    let selection = dev.filter(|v| !v.is_null()).and_then(accuracy);
    let (dev, dev_set) = match eval_set(eval, "dev") {
        Some((name, v)) => (accuracy(v), Some(name)),
        None => (selection, selection.map(|_| "held-out".to_string())),
    };
    let (test, test_set) = match eval_set(eval, "test") {
        Some((name, v)) => (accuracy(v), Some(name)),
        None => (None, None),
    };
    Resolved {
        dev,
        dev_set,
        test,
        test_set,
        selection,
    }
}

fn init_label(init: Option<&str>) -> String {
    match init {
        Some("pretrained") => "pretrained".into(),
        Some("random") => "none (random init)".into(),
        Some("checkpoint") => "checkpoint".into(),
        Some(other) => other.into(),
        None => "?".into(),
    }
}

/// `89.4 (88.4)`: a published best with its average over runs, when the source gives one.
pub fn with_mean(best: Option<f64>, mean: Option<f64>, decimals: usize) -> Option<String> {
    match (best, mean) {
        (None, _) => None,
        (Some(b), None) => Some(format!("{b:.decimals$}")),
        (Some(b), Some(m)) => Some(format!("{b:.decimals$} ({m:.decimals$})")),
    }
}

/// Our runs of one task (sorted: pretrained before random init, then by instance; runs that
/// differ only in `seed` folded into one row of mean ± sd), and the published rows.
pub fn finetune(
    task: &str,
    deps: &[&Dep],
    baselines: &[&Dep],
    published: Option<&TaskPublished>,
) -> Table {
    let span = deps
        .iter()
        .chain(baselines)
        .any(|d| protocol_kind(d).as_deref() == Some("span"));
    if span {
        return crate::span_table::span_table(
            task,
            &crate::data::task_title(task),
            deps,
            baselines,
            published,
        );
    }
    let mut t = Table::new(
        task,
        &crate::data::task_title(task),
        crate::data::columns("task"),
    );
    let mut ours: Vec<&Dep> = deps.to_vec();
    ours.sort_by_key(|d| {
        let rank = match d.finetune().init.as_deref() {
            Some("pretrained") => 0,
            Some("checkpoint") => 1,
            _ => 2,
        };
        (d.stage.clone(), rank, d.instance.clone())
    });
    let scores: [seeds::Score; 4] = [
        &|d| resolve(d).dev,
        &|d| resolve(d).test,
        &|d| resolve(d).selection,
        &Dep::wall_seconds,
    ];
    for (g, stats) in seeds::fold(&ours, &scores) {
        t.push(our_row(&g, stats));
    }
    if deps
        .iter()
        .chain(baselines)
        .any(|d| protocol_kind(d).as_deref() == Some("tagging"))
    {
        t.notes.push(crate::data::text("task.note_tagging").into());
    }
    for row in crate::baselines::rows(baselines) {
        t.push(row);
    }
    if let Some(p) = published {
        for r in &p.rows {
            t.push(cells! {
                source: "published",
                model: r.model.as_str(),
                dev: r.dev,
                dev_mean: r.dev_mean,
                dev_md: with_mean(r.dev, r.dev_mean, 1),
                test: r.test,
                test_mean: r.test_mean,
                test_md: with_mean(r.test, r.test_mean, 1),
                note: r.note.clone(),
            });
        }
    }
    t
}

/// A group of seeds as a row, with the mean and sd over its runs of dev, test, selection and
/// wall time (in that order; see [`finetune`]).
fn our_row(g: &seeds::SeedGroup<'_>, stats: [Option<MeanSd>; 4]) -> Vec<(&'static str, Cell)> {
    let d = g.first();
    let r = d.finetune();
    let [dev, test, selection, wall] = stats;
    let first = resolve(d);
    // A mean wall time only when every seed has one: the table states one seed's cost.
    let wall = wall.filter(|w| w.n == g.runs.len()).map(|w| w.mean);
    let cpu_hours: Option<f64> = g.runs.iter().map(|d| crate::runs::cpu_hours(d)).sum();
    cells! {
        source: "ours",
        model: model_cell(d),
        init: init_cell(d),
        train_data: r.protocol.as_ref().and_then(train_data),
        parameters: r.parameters,
        seeds: g.runs.len() as u64,
        dev: seeds::mean2(dev),
        dev_sd: seeds::sd2(dev),
        dev_md: seeds::cell(dev, 2),
        test: seeds::mean2(test),
        test_sd: seeds::sd2(test),
        test_md: seeds::cell(test, 2),
        selection_accuracy: seeds::mean2(selection),
        dev_set: first.dev_set,
        test_set: first.test_set,
        epochs: seeds::epochs_cell(g),
        train_examples: train_examples(r.protocol.as_ref()),
        pretrain_tokens: pretrain_tokens(d),
        wall_seconds: wall.map(|w| round(w, 1)),
        wall_time: wall.map(crate::table::duration).unwrap_or_default(),
        cpu_hours: cpu_hours.map(|h| round(h, 3)),
        run: g.name(),
    }
}

/// The task kind a finetune or baseline dep's protocol names (`pair`, `span`, `tagging`, …).
pub fn protocol_kind(d: &Dep) -> Option<String> {
    d.protocol()?.get("kind")?.as_str().map(str::to_string)
}

/// Training examples of a protocol (`protocol.train.examples`).
pub fn train_examples(protocol: Option<&Value>) -> Option<u64> {
    protocol?.get("train")?.get("examples")?.as_u64()
}

/// Real tokens the run's backbone was pretrained on: 0 from random weights, `None` where
/// the run does not say (an imported checkpoint).
fn pretrain_tokens(d: &Dep) -> Option<u64> {
    let r = d.finetune();
    match r.init.as_deref() {
        Some("random") => Some(0),
        _ => r.pretraining?.tokens_seen,
    }
}

/// `ALBERT (E 128, H 312, L 4), share all` of a run.
pub fn model_cell(d: &Dep) -> String {
    let r = d.finetune();
    let share = r.share_type.as_deref().unwrap_or("?");
    match r.config.as_ref().and_then(dims) {
        Some(dims) => format!("ALBERT ({dims}), share {share}"),
        None => format!("ALBERT, share {share}"),
    }
}

/// `pretrained (pretrain@share_type=all)`, `none (random init)`, … of a run.
pub fn init_cell(d: &Dep) -> String {
    let r = d.finetune();
    match (r.init.as_deref(), &r.pretrain_instance) {
        (Some("pretrained"), Some(p)) => match r.pretrain_step {
            Some(step) => format!("pretrained ({p}, step {step})"),
            None => format!("pretrained ({p})"),
        },
        (i, _) => init_label(i),
    }
}

/// `lcqmc/dev.tsv` or `afqmc/train.tsv + lcqmc/dev.tsv` (each file's folder and name: the
/// data root differs between machines), with the cap when there is one.
pub fn train_data(protocol: &Value) -> Option<String> {
    let files: Vec<String> = protocol
        .get("train")?
        .get("files")?
        .as_array()?
        .iter()
        .filter_map(|f| f.get("path").and_then(Value::as_str))
        .map(|p| {
            let parts: Vec<&str> = p.split('/').filter(|c| !c.is_empty()).collect();
            parts[parts.len().saturating_sub(2)..].join("/")
        })
        .collect();
    if files.is_empty() {
        return None;
    }
    let mut s = files.join(" + ");
    if let Some(cap) = protocol.get("max_train_examples").and_then(Value::as_u64) {
        s.push_str(&format!(" (≤ {})", thousands(cap as i64)));
    }
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::published::Published;
    use serde_json::json;

    fn dep(instance: &str, metrics: Value) -> Dep {
        Dep::new(instance, crate::deps::DepKind::Finetune, metrics)
    }

    #[test]
    fn dev_and_test_are_found_by_name() {
        let d = dep(
            "finetune_xnli@init=pretrained",
            json!({"dev": {"accuracy": 0.5}, "eval": {"xnli_dev": {"accuracy": 0.61},
                   "xnli_test": {"accuracy": 0.6}}}),
        );
        let r = resolve(&d);
        assert_eq!(r.dev, Some(61.0));
        assert_eq!(r.dev_set.as_deref(), Some("xnli_dev"));
        assert_eq!(r.test, Some(60.0));
        assert_eq!(r.selection, Some(50.0));
        let d = dep(
            "finetune_lcqmc@init=random",
            json!({"dev": {"accuracy": 0.7}, "eval": {"test": {"accuracy": 0.65}}}),
        );
        let r = resolve(&d);
        assert_eq!(r.dev, Some(70.0));
        assert_eq!(r.dev_set.as_deref(), Some("held-out"));
        assert_eq!(r.test_set.as_deref(), Some("test"));
    }

    #[test]
    fn published_rows_show_best_and_mean() {
        let p = Published::load().unwrap();
        let t = finetune("lcqmc", &[], &[], p.task("lcqmc"));
        let md = t.markdown().unwrap();
        assert!(
            md.contains("| published | BERT | – | – | – | – | 89.4 (88.4) | 86.9 (86.4) |"),
            "{md}"
        );
        assert!(
            md.contains("| published | ALBERT-zh-tiny | – | – | – | – | – | 85.4 |"),
            "{md}"
        );
    }

    #[test]
    fn our_rows_state_the_budget_pretraining_tokens_wall_time_and_cpu_hours() {
        let run = |init: &str, seed: u64, wall: f64| {
            let mut d = dep(
                &format!("finetune_chnsenticorp@init={init},seed={seed}"),
                json!({"init": init, "pretraining": {"tokens_seen": 5_000_000u64},
                       "wall_seconds": wall, "threads": 2, "device": "flex",
                       "dev": {"accuracy": 0.8}, "eval": {"test": {"accuracy": 0.75}}}),
            );
            d.coords.insert("init".into(), json!(init));
            d.coords.insert("seed".into(), json!(seed));
            d
        };
        let (a, b, r) = (
            run("pretrained", 1, 10.0),
            run("pretrained", 2, 20.0),
            run("random", 1, 12.0),
        );
        let t = finetune("chnsenticorp", &[&a, &b, &r], &[], None);
        let j = t.json(serde_json::Map::new()).unwrap();
        let rows = j["rows"].as_array().unwrap();
        assert_eq!(rows[0]["seeds"], 2, "{j:#}");
        assert_eq!(rows[0]["pretrain_tokens"], 5_000_000, "{j:#}");
        assert_eq!(rows[0]["wall_seconds"], 15.0, "{j:#}");
        // (10 + 20) s × 2 threads = 60 CPU-seconds.
        assert_eq!(rows[0]["cpu_hours"], 0.017, "{j:#}");
        assert_eq!(rows[1]["pretrain_tokens"], 0, "random init: {j:#}");
        assert!(
            t.markdown().unwrap().contains("5.00M"),
            "{}",
            t.markdown().unwrap()
        );
    }
}
