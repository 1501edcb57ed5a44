//! Tables 2 and 3: our pretraining runs beside albert_zh's, and our fine-tuning runs (LCQMC,
//! XNLI, any other task) beside the published ones, each with the sentence that says what was
//! run.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::deps::{Dep, get};
use crate::published::{Published, TaskPublished};
use crate::sizes::round;
use crate::table::{Col, Fmt, Table, thousands};

/// A fraction (0.791) or a percentage (79.1) as a percentage with 2 decimals.
fn percent(x: Option<f64>) -> Option<f64> {
    x.filter(|x| x.is_finite())
        .map(|x| if x <= 1.0 { x * 100.0 } else { x })
        .map(|x| round(x, 2))
}

/// `E 64, H 128, L 4` from a metrics `config`.
fn dims(config: &Value) -> Option<String> {
    let n = |k: &str| config.get(k).and_then(Value::as_u64);
    Some(format!(
        "E {}, H {}, L {}",
        n("embedding_size")?,
        n("hidden_size")?,
        n("num_hidden_layers")?
    ))
}

/// `flex · 2 threads · fp32`.
fn hardware(d: &Dep) -> Option<String> {
    let device = d.str(&["device"])?;
    let mut parts = vec![device];
    if let Some(t) = d.u64(&["threads"]) {
        parts.push(format!("{t} thread{}", if t == 1 { "" } else { "s" }));
    }
    if let Some(p) = d.str(&["precision"]) {
        parts.push(p);
    }
    Some(parts.join(" · "))
}

/// What the instances of a matrix stage differ in: `share_type (all, none)`.
fn varying(deps: &[&Dep]) -> String {
    let keys: BTreeSet<&String> = deps.iter().flat_map(|d| d.coords.keys()).collect();
    keys.iter()
        .map(|k| {
            let vals: BTreeSet<String> = deps
                .iter()
                .filter_map(|d| d.coords.get(*k))
                .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
                .collect();
            format!("{k} ({})", vals.into_iter().collect::<Vec<_>>().join(", "))
        })
        .collect::<Vec<_>>()
        .join(" and ")
}

// ---------------------------------------------------------------------------------------------
// Pretraining

pub fn pretraining(deps: &[&Dep], published: &Published) -> Table {
    let cols = vec![
        Col::text("source", "Source", "ours, or published by albert_zh"),
        Col::text("run", "Run", "our stage instance, or albert_zh's model"),
        Col::text("model", "Model", "config and its dimensions"),
        Col::text("share_type", "Sharing", "cross-layer sharing"),
        Col::text("ln_type", "LN", "post-LN or pre-LN"),
        Col::int(
            "parameters",
            "Parameters",
            "the pretraining model's parameters",
        ),
        Col::int("steps", "Steps", "optimiser steps"),
        Col::int("batch_size", "Batch", "sequences per optimiser step"),
        Col::int("max_seq_length", "Seq", "tokens per sequence, at most"),
        Col::int(
            "tokens_seen",
            "Tokens seen",
            "real (non-padding) tokens trained on",
        ),
        Col::float(
            "wall_seconds",
            "Wall time",
            0,
            "the whole stage (published: training hours × 3600)",
        )
        .data_only(),
        Col::text("wall_time", "Wall time", "readable; * albert_zh's estimate").markdown_only(),
        Col::float(
            "tokens_per_s",
            "Tokens/s",
            0,
            "real tokens per second of training steps",
        )
        .fmt(Fmt::Int),
        Col::text("device", "Hardware", "device, threads, precision"),
        Col::float(
            "mlm_accuracy",
            "MLM acc %",
            1,
            "masked-LM accuracy on the held-out eval shard (final evaluation)",
        ),
        Col::float(
            "sop_accuracy",
            "SOP acc %",
            1,
            "sentence-order accuracy on the held-out eval shard",
        ),
        Col::float("eval_mlm_loss", "MLM loss", 3, "eval masked-LM loss"),
        Col::float("eval_sop_loss", "SOP loss", 3, "eval sentence-order loss").data_only(),
        Col::float(
            "eval_loss",
            "Eval loss",
            2,
            "MLM + SOP eval loss (albert_zh's 'Loss eval')",
        ),
    ];
    let mut t = Table::new("pretraining", "Pretraining", cols);
    for d in deps {
        let m = &d.metrics;
        let eval = get(m, &["eval"]);
        let e = |k: &str| eval.and_then(|e| e.get(k)).and_then(Value::as_f64);
        let model = d.str(&["model"]).unwrap_or_else(|| "?".into());
        let model = match get(m, &["config"]).and_then(dims) {
            Some(dims) => format!("{model} ({dims})"),
            None => model,
        };
        let total = match (e("mlm_loss"), e("sop_loss")) {
            (Some(a), Some(b)) => Some(round(a + b, 4)),
            _ => None,
        };
        let wall = d.num(&["wall_seconds"]);
        t.push(vec![
            ("source", "ours".into()),
            ("run", d.instance.as_str().into()),
            ("model", model.into()),
            ("share_type", d.str(&["share_type"]).into()),
            ("ln_type", d.str(&["ln_type"]).into()),
            ("parameters", d.u64(&["parameters", "total"]).into()),
            ("steps", d.u64(&["steps"]).into()),
            (
                "batch_size",
                d.u64(&["effective_batch_size"])
                    .or(d.u64(&["batch_size"]))
                    .into(),
            ),
            ("max_seq_length", d.u64(&["max_seq_length"]).into()),
            ("tokens_seen", d.u64(&["tokens_seen"]).into()),
            ("wall_seconds", wall.map(|w| round(w, 1)).into()),
            (
                "wall_time",
                wall.map(crate::table::duration).unwrap_or_default().into(),
            ),
            (
                "tokens_per_s",
                d.num(&["tokens_per_s"]).map(|x| x.round()).into(),
            ),
            ("device", hardware(d).into()),
            ("mlm_accuracy", percent(e("mlm_accuracy")).into()),
            ("sop_accuracy", percent(e("sop_accuracy")).into()),
            ("eval_mlm_loss", e("mlm_loss").map(|x| round(x, 4)).into()),
            ("eval_sop_loss", e("sop_loss").map(|x| round(x, 4)).into()),
            ("eval_loss", total.into()),
        ]);
    }
    for r in &published.pretraining.rows {
        let hours = r.training_hours.map(|h| h * 3600.0);
        t.push(vec![
            ("source", "albert_zh (published)".into()),
            ("run", r.model.as_str().into()),
            ("model", r.config.as_str().into()),
            ("share_type", "all".into()),
            ("steps", r.steps.into()),
            ("batch_size", r.batch_size.into()),
            ("max_seq_length", r.max_seq_length.into()),
            ("wall_seconds", hours.into()),
            (
                "wall_time",
                hours
                    .map(|h| {
                        format!(
                            "{}{}",
                            crate::table::duration(h),
                            if r.training_hours_estimated { "*" } else { "" }
                        )
                    })
                    .unwrap_or_default()
                    .into(),
            ),
            ("device", r.device.clone().into()),
            ("mlm_accuracy", r.mlm_accuracy.into()),
            ("sop_accuracy", r.sop_accuracy.into()),
            ("eval_loss", r.eval_loss.into()),
        ]);
    }
    if deps.iter().any(|d| get(&d.metrics, &["eval"]).is_none()) {
        t.notes.push(
            "A run without MLM/SOP accuracy had no eval shard (mask's eval_fraction 0) or \
             never reached an evaluation."
                .into(),
        );
    }
    t.notes.push(format!(
        "albert_zh's rows: {}. {}",
        published.pretraining.protocol, published.pretraining.note
    ));
    t
}

/// What the pretraining runs were, in a sentence or two.
pub fn pretraining_sentence(deps: &[&Dep]) -> String {
    let Some(first) = deps.first() else {
        return String::new();
    };
    let m = &first.metrics;
    let n = |path: &[&str]| first.u64(path);
    let mut s = format!(
        "{} pretraining run{}",
        deps.len(),
        if deps.len() == 1 { "" } else { "s" }
    );
    let model = first.str(&["model"]).unwrap_or_else(|| "?".into());
    match get(m, &["config"]) {
        Some(c) => {
            let g = |k: &str| c.get(k).and_then(Value::as_u64).unwrap_or(0);
            s.push_str(&format!(
                " of an ALBERT from albert_zh's `{model}` config with E {}, H {}, {} layers, {} \
                 heads, FFN {} (vocabulary {})",
                g("embedding_size"),
                g("hidden_size"),
                g("num_hidden_layers"),
                g("num_attention_heads"),
                g("intermediate_size"),
                thousands(g("vocab_size") as i64)
            ));
        }
        None => s.push_str(&format!(" of `{model}`")),
    }
    let vary = varying(deps);
    if !vary.is_empty() {
        s.push_str(&format!(", one per {vary}"));
    }
    s.push('.');
    if let (Some(steps), Some(batch), Some(seq)) = (
        n(&["steps"]),
        n(&["effective_batch_size"]).or(n(&["batch_size"])),
        n(&["max_seq_length"]),
    ) {
        s.push_str(&format!(
            " Each trained {} steps of {batch} sequences of up to {seq} tokens",
            thousands(steps as i64)
        ));
        if let (Some(inst), Some(epochs)) =
            (n(&["train_instances_per_epoch"]), first.num(&["epochs"]))
        {
            s.push_str(&format!(
                " ({epochs:.2} epochs over {} training instances)",
                thousands(inst as i64)
            ));
        }
        if let Some(o) = get(m, &["optimizer"]) {
            let name = o
                .get("optimizer")
                .and_then(Value::as_str)
                .unwrap_or("the optimiser");
            let lr = o.get("learning_rate").and_then(Value::as_f64);
            let warm = o.get("warmup_steps").and_then(Value::as_u64);
            s.push_str(&format!(
                " with {}{}{}",
                name.to_uppercase(),
                lr.map(|x| format!(", peak learning rate {x}"))
                    .unwrap_or_default(),
                warm.map(|w| format!(", {w} warmup steps then linear decay"))
                    .unwrap_or_default()
            ));
        }
        s.push('.');
    }
    if let Some(inst) = n(&["eval", "instances"]) {
        s.push_str(&format!(
            " Accuracy and loss: the final evaluation on the held-out eval shard ({} \
             instances, documents never trained on).",
            thousands(inst as i64)
        ));
    }
    if let Some(h) = hardware(first) {
        s.push_str(&format!(" Hardware: {h}."));
    }
    s
}

// ---------------------------------------------------------------------------------------------
// Fine-tuning

/// The evaluation set reported as "dev" or "test": `test`, `xnli_test`, ….
fn eval_set<'a>(m: &'a Value, suffix: &str) -> Option<(String, &'a Value)> {
    let eval = get(m, &["eval"])?.as_object()?;
    eval.iter()
        .find(|(k, _)| k.as_str() == suffix)
        .or_else(|| {
            eval.iter()
                .find(|(k, _)| k.ends_with(&format!("_{suffix}")))
        })
        .map(|(k, v)| (k.clone(), v))
}

fn accuracy(v: &Value) -> Option<f64> {
    percent(v.get("accuracy").and_then(Value::as_f64))
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

pub fn resolve(d: &Dep) -> Resolved {
    let m = &d.metrics;
    let selection = get(m, &["dev"]).and_then(accuracy);
    let (dev, dev_set) = match eval_set(m, "dev") {
        Some((name, v)) => (accuracy(v), Some(name)),
        None => (selection, selection.map(|_| "held-out".to_string())),
    };
    let (test, test_set) = match eval_set(m, "test") {
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

fn with_mean(best: Option<f64>, mean: Option<f64>, decimals: usize) -> Option<String> {
    match (best, mean) {
        (None, _) => None,
        (Some(b), None) => Some(format!("{b:.decimals$}")),
        (Some(b), Some(m)) => Some(format!("{b:.decimals$} ({m:.decimals$})")),
    }
}

pub fn task_title(task: &str) -> String {
    match task {
        "lcqmc" => "LCQMC (question matching)".into(),
        "xnli" => "XNLI (natural language inference, Chinese)".into(),
        "afqmc" => "AFQMC (question matching)".into(),
        "cmnli" => "CMNLI".into(),
        "ocnli" => "OCNLI".into(),
        "cnsd_snli" => "CNSD-SNLI".into(),
        other => other.to_uppercase(),
    }
}

/// Our runs of one task (sorted: pretrained before random init, then by instance), and the
/// published rows.
pub fn finetune(task: &str, deps: &[&Dep], published: Option<&TaskPublished>) -> Table {
    let cols = vec![
        Col::text("source", "Source", "ours, or published (full train set)"),
        Col::text(
            "model",
            "Model",
            "our model and its sharing, or the published model",
        ),
        Col::text(
            "init",
            "Pretraining",
            "pretrained (from our pretrain run), none (random init), checkpoint",
        ),
        Col::int(
            "parameters",
            "Parameters",
            "the classifier's parameters (ours)",
        ),
        Col::float("dev", "Dev", 2, "dev accuracy %: see dev_set").data_only(),
        Col::float(
            "dev_mean",
            "Dev mean",
            1,
            "published: the average over runs (the Dev column is the best)",
        )
        .data_only(),
        Col::text("dev_md", "Dev", "dev accuracy, (average)").markdown_only(),
        Col::float("test", "Test", 2, "test accuracy %: see test_set").data_only(),
        Col::float(
            "test_mean",
            "Test mean",
            1,
            "published: the average over runs",
        )
        .data_only(),
        Col::text("test_md", "Test", "test accuracy, (average)").markdown_only(),
        Col::float(
            "selection_accuracy",
            "Selection acc",
            2,
            "ours: accuracy on the model-selection split (the best epoch's)",
        ),
        Col::text(
            "dev_set",
            "Dev set",
            "ours: the evaluation set in Dev (`held-out`: the model-selection split)",
        )
        .data_only(),
        Col::text("test_set", "Test set", "ours: the evaluation set in Test").data_only(),
        Col::text("epochs", "Best epoch", "the epoch kept / epochs trained"),
        Col::int(
            "train_examples",
            "Train examples",
            "ours: training examples",
        ),
        Col::text("run", "Run", "our stage instance").data_only(),
        Col::text("note", "Note", "").data_only(),
    ];
    let mut t = Table::new(task, &task_title(task), cols);
    let mut ours: Vec<&&Dep> = deps.iter().collect();
    ours.sort_by_key(|d| {
        let init = d.str(&["init"]);
        (
            match init.as_deref() {
                Some("pretrained") => 0,
                Some("checkpoint") => 1,
                _ => 2,
            },
            d.instance.clone(),
        )
    });
    for d in ours {
        let r = resolve(d);
        let m = &d.metrics;
        let share = d.str(&["share_type"]).unwrap_or_else(|| "?".into());
        let model = match get(m, &["config"]).and_then(dims) {
            Some(dims) => format!("ALBERT ({dims}), share {share}"),
            None => format!("ALBERT, share {share}"),
        };
        let epochs = match (d.u64(&["best_epoch"]), d.u64(&["epochs"])) {
            (Some(b), Some(e)) => Some(format!("{b} / {e}")),
            (None, Some(e)) => Some(format!("– / {e}")),
            _ => None,
        };
        let init = d.str(&["init"]);
        let init_cell = match (init.as_deref(), d.str(&["pretrain_instance"])) {
            (Some("pretrained"), Some(p)) => format!("pretrained ({p})"),
            (i, _) => init_label(i),
        };
        t.push(vec![
            ("source", "ours".into()),
            ("model", model.into()),
            ("init", init_cell.into()),
            ("parameters", d.u64(&["parameters"]).into()),
            ("dev", r.dev.into()),
            ("dev_md", with_mean(r.dev, None, 2).into()),
            ("test", r.test.into()),
            ("test_md", with_mean(r.test, None, 2).into()),
            ("selection_accuracy", r.selection.into()),
            ("dev_set", r.dev_set.into()),
            ("test_set", r.test_set.into()),
            ("epochs", epochs.into()),
            (
                "train_examples",
                d.u64(&["protocol", "train", "examples"]).into(),
            ),
            ("run", d.instance.as_str().into()),
        ]);
    }
    if let Some(p) = published {
        for r in &p.rows {
            t.push(vec![
                ("source", "published".into()),
                ("model", r.model.as_str().into()),
                ("dev", r.dev.into()),
                ("dev_mean", r.dev_mean.into()),
                ("dev_md", with_mean(r.dev, r.dev_mean, 1).into()),
                ("test", r.test.into()),
                ("test_mean", r.test_mean.into()),
                ("test_md", with_mean(r.test, r.test_mean, 1).into()),
                ("note", r.note.clone().into()),
            ]);
        }
    }
    t
}

/// The files of a split, as given in the params.
fn files(split: &Value) -> String {
    let list: Vec<String> = split
        .get("files")
        .and_then(Value::as_array)
        .map(|fs| {
            fs.iter()
                .filter_map(|f| f.get("path").and_then(Value::as_str))
                .map(|p| format!("`{p}`"))
                .collect()
        })
        .unwrap_or_default();
    list.join(", ")
}

fn count(split: &Value) -> String {
    split
        .get("examples")
        .and_then(Value::as_u64)
        .map(|n| thousands(n as i64))
        .unwrap_or_else(|| "?".into())
}

/// Our protocol for one task, from the first run's `protocol` (and a note when the runs used
/// different ones).
pub fn protocol_sentence(deps: &[&Dep]) -> Vec<String> {
    let Some(first) = deps.first() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let Some(p) = get(&first.metrics, &["protocol"]) else {
        out.push("The runs' metrics.json has no `protocol`: their data is unknown.".into());
        return out;
    };
    let mut s = String::new();
    if let Some(train) = p.get("train") {
        s.push_str(&format!(
            "Ours: fine-tuned on {} examples of {}",
            count(train),
            files(train)
        ));
        let dropped: u64 = train
            .get("files")
            .and_then(Value::as_array)
            .map(|fs| {
                fs.iter()
                    .filter_map(|f| f.get("dropped_eval_overlap").and_then(Value::as_u64))
                    .sum()
            })
            .unwrap_or(0);
        if dropped > 0 {
            s.push_str(&format!(
                " (after dropping {} whose texts are in an evaluation set)",
                thousands(dropped as i64)
            ));
        }
        if let Some(cap) = p.get("max_train_examples").and_then(Value::as_u64) {
            s.push_str(&format!(", capped to {}", thousands(cap as i64)));
        }
    }
    if let Some(dev) = p.get("dev") {
        let held = dev
            .get("held_out_from_train")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        if held {
            let frac = p
                .get("dev_fraction")
                .and_then(Value::as_f64)
                .map(|f| format!("{} %", round(f * 100.0, 2)))
                .unwrap_or_else(|| "a share".into());
            let seed = p
                .get("split_seed")
                .and_then(Value::as_u64)
                .map(|s| format!(", split seed {s}"))
                .unwrap_or_default();
            s.push_str(&format!(
                "; the best epoch chosen on {} examples held out from them ({frac}, stratified{seed})",
                count(dev)
            ));
        } else {
            s.push_str(&format!(
                "; the best epoch chosen on {} examples of {}",
                count(dev),
                files(dev)
            ));
        }
    }
    if let Some(evals) = p.get("eval").and_then(Value::as_array)
        && !evals.is_empty()
    {
        let list: Vec<String> = evals
            .iter()
            .map(|e| {
                format!(
                    "{} ({} examples of {})",
                    e.get("name").and_then(Value::as_str).unwrap_or("?"),
                    count(e),
                    files(e)
                )
            })
            .collect();
        s.push_str(&format!("; reported on {}", list.join(", ")));
    }
    let hyper: Vec<String> = [
        first.u64(&["epochs"]).map(|e| format!("{e} epochs")),
        first.u64(&["batch_size"]).map(|b| format!("batch {b}")),
        first
            .num(&["learning_rate"])
            .map(|lr| format!("learning rate {lr}")),
        first
            .u64(&["max_seq_length"])
            .map(|l| format!("max length {l}")),
        hardware(first),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !hyper.is_empty() {
        s.push_str(&format!(" ({})", hyper.join(", ")));
    }
    s.push('.');
    out.push(s);
    let dev_from_selection = deps
        .iter()
        .any(|d| resolve(d).dev_set.as_deref() == Some("held-out"));
    if dev_from_selection {
        out.push(
            "Dev for our rows is the held-out model-selection split (there is no official \
             dev set among the evaluation sets), so it is optimistic: the best epoch was \
             chosen on it."
                .into(),
        );
    }
    if let Some(cap) = p.get("max_eval_examples").and_then(Value::as_u64) {
        out.push(format!(
            "The evaluation sets were capped to {} examples (a smoke run): these numbers are \
             not comparable with the published ones.",
            thousands(cap as i64)
        ));
    }
    let differ = deps
        .iter()
        .any(|d| get(&d.metrics, &["protocol"]) != Some(p));
    if differ {
        out.push(
            "The runs did not all use the same data protocol (see each run's metrics.json); \
             the sentence above is the first run's."
                .into(),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::BTreeMap;

    fn dep(instance: &str, metrics: Value) -> Dep {
        Dep {
            instance: instance.into(),
            stage: instance.split('@').next().unwrap().into(),
            coords: BTreeMap::new(),
            dir: std::path::PathBuf::new(),
            kind: crate::deps::DepKind::Finetune,
            metrics,
            lines: vec![],
            finished: None,
        }
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
        let t = finetune("lcqmc", &[], Some(&p.lcqmc));
        let md = t.markdown().unwrap();
        assert!(
            md.contains("| published | BERT | – | – | 89.4 (88.4) | 86.9 (86.4) |"),
            "{md}"
        );
        assert!(
            md.contains("| published | ALBERT-zh-tiny | – | – | – | 85.4 |"),
            "{md}"
        );
    }
}
