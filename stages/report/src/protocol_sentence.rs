//! The sentence that says what data our fine-tuning runs (or a baseline stage) used: train,
//! the dev split the best epoch was chosen on, the evaluation sets, the hyper-parameters, and
//! the caveats (an optimistic dev, capped evaluation sets, mixed protocols).

use serde_json::Value;

use crate::deps::Dep;
use crate::finetune_runs::resolve;
use crate::runs::hardware;
use crate::sizes::round;
use crate::table::thousands;

/// A reading-comprehension protocol's split by article or document: `; the best epoch chosen
/// on 357 examples of 10 % of the documents held out from them, and 406 of another 10 % held
/// out as `test` (by document, seeded: split seed 12345; our protocol)`.
fn group_sentence(p: &Value, dev: &Value, g: &Value) -> String {
    let pct = |k: &str| {
        g.get(k)
            .and_then(Value::as_f64)
            .map_or("?".into(), |f| format!("{} %", round(f * 100.0, 2)))
    };
    let unit = if p.get("kind").and_then(Value::as_str) == Some("span") {
        "articles"
    } else {
        "documents"
    };
    let seed = g.get("split_seed").and_then(Value::as_u64).unwrap_or(0);
    let test = g
        .get("test_fraction")
        .and_then(Value::as_f64)
        .filter(|f| *f > 0.0)
        .map(|_| format!(", and another {} held out as `test`", pct("test_fraction")))
        .unwrap_or_default();
    format!(
        "; the best epoch chosen on {} examples of {} of the {unit} held out from them{test} \
         (whole {unit}, so that no context is on two sides; seeded, split seed {seed}: our \
         protocol, since the data has no other labelled split)",
        count(dev),
        pct("dev_fraction")
    )
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
/// The opening words say whose protocol it is (`Ours: fine-tuned`, `Ours
/// (finetune_lcqmc_afqmc): fine-tuned`, `Baselines (baseline_xnli): fitted`).
pub fn protocol_sentence_as(deps: &[&Dep], opening: &str) -> Vec<String> {
    let Some(first) = deps.first() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let Some(p) = first.protocol() else {
        out.push("The runs' metrics.json has no `protocol`: their data is unknown.".into());
        return out;
    };
    let p = &p;
    let mut s = String::new();
    if let Some(train) = p.get("train") {
        s.push_str(&train_clause(p, train, opening));
    }
    s.push_str(&dev_clause(p));
    s.push_str(&eval_clause(p));
    s.push_str(&hyper_clause(first));
    s.push('.');
    out.push(s);
    out.extend(protocol_caveats(deps, p));
    out
}

/// `{opening} on 7,128 examples of lcqmc/dev.tsv (after dropping …), capped to …`.
fn train_clause(p: &Value, train: &Value, opening: &str) -> String {
    let mut s = format!("{opening} on {} examples of {}", count(train), files(train));
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
    s
}

/// `; the best epoch chosen on …` (a split held out from train, a dev file, or groups).
fn dev_clause(p: &Value) -> String {
    let Some(dev) = p.get("dev") else {
        return String::new();
    };
    if let Some(g) = p.get("group_split") {
        return group_sentence(p, dev, g);
    }
    let held = dev
        .get("held_out_from_train")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if !held {
        return format!(
            "; the best epoch chosen on {} examples of {}",
            count(dev),
            files(dev)
        );
    }
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
    format!(
        "; the best epoch chosen on {} examples held out from them ({frac}, stratified{seed})",
        count(dev)
    )
}

/// `; reported on xnli_dev (… examples of …), xnli_test (…)`.
fn eval_clause(p: &Value) -> String {
    let Some(evals) = p.get("eval").and_then(Value::as_array) else {
        return String::new();
    };
    if evals.is_empty() {
        return String::new();
    }
    let list: Vec<String> = evals
        .iter()
        .map(|e| {
            let name = e.get("name").and_then(Value::as_str).unwrap_or("?");
            if e.get("held_out_from_train").and_then(Value::as_bool) == Some(true) {
                format!(
                    "{name} ({} examples held out from them, as above)",
                    count(e)
                )
            } else {
                format!("{name} ({} examples of {})", count(e), files(e))
            }
        })
        .collect();
    format!("; reported on {}", list.join(", "))
}

/// ` (3 epochs, batch 32, learning rate 0.0001, max length 128, flex · 2 threads)`.
fn hyper_clause(first: &Dep) -> String {
    let r = first.finetune();
    let hyper: Vec<String> = [
        r.epochs.map(|e| format!("{e} epochs")),
        r.batch_size.map(|b| format!("batch {b}")),
        r.learning_rate.map(|lr| format!("learning rate {lr}")),
        r.max_seq_length.map(|l| format!("max length {l}")),
        hardware(first),
    ]
    .into_iter()
    .flatten()
    .collect();
    if hyper.is_empty() {
        String::new()
    } else {
        format!(" ({})", hyper.join(", "))
    }
}

/// The sentences that qualify the protocol: an optimistic dev, capped evaluation sets, runs
/// that did not share one protocol.
fn protocol_caveats(deps: &[&Dep], p: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let dev_from_selection = deps
        .iter()
        .any(|d| resolve(d).dev_set.as_deref() == Some("held-out"));
    if dev_from_selection {
        out.push(crate::data::text("task.note_held_out_dev").into());
    }
    if let Some(cap) = p.get("max_eval_examples").and_then(Value::as_u64) {
        out.push(format!(
            "The evaluation sets were capped to {} examples (a smoke run): these numbers are \
             not comparable with the published ones.",
            thousands(cap as i64)
        ));
    }
    let differ = deps.iter().any(|d| d.protocol().as_ref() != Some(p));
    if differ {
        out.push(crate::data::text("task.note_protocols_differ").into());
    }
    out
}
