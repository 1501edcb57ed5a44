//! Table 2: our pretraining runs beside albert_zh's, with the sentence that says what was run.
//! The helpers here (percentages, model dimensions, hardware) serve the fine-tuning tables too.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::deps::Dep;
use crate::published::Published;
use crate::sizes::round;
use crate::table::{Cell, Table, cells, thousands};

/// A fraction (0.791) or a percentage (79.1) as a percentage with 2 decimals.
pub(crate) fn percent(x: Option<f64>) -> Option<f64> {
    x.filter(|x| x.is_finite())
        .map(|x| if x <= 1.0 { x * 100.0 } else { x })
        .map(|x| round(x, 2))
}

/// `E 64, H 128, L 4` from a metrics `config`.
pub(crate) fn dims(config: &Value) -> Option<String> {
    let n = |k: &str| config.get(k).and_then(Value::as_u64);
    Some(format!(
        "E {}, H {}, L {}",
        n("embedding_size")?,
        n("hidden_size")?,
        n("num_hidden_layers")?
    ))
}

/// `flex · 2 threads · fp32`.
pub(crate) fn hardware(d: &Dep) -> Option<String> {
    let device = d.device()?;
    // A pretrain record names its GPU's model (another kind's record reads as none).
    let model = &d.pretrain().device_model;
    let mut parts = vec![match model {
        Some(m) => format!("{device} ({m})"),
        None => device,
    }];
    if let Some(t) = d.threads() {
        parts.push(format!("{t} thread{}", if t == 1 { "" } else { "s" }));
    }
    if let Some(p) = &d.pretrain().precision {
        parts.push(p.clone());
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

/// CPU-hours of a run: its wall time × the threads it trained on, on a CPU device; `None` on a
/// GPU (whose hours are the wall time's) or without the figures.
pub(crate) fn cpu_hours(d: &Dep) -> Option<f64> {
    let device = d.device()?;
    if device.starts_with("cuda") {
        return None;
    }
    Some(d.wall_seconds()? * d.threads()? as f64 / 3600.0)
}

pub fn pretraining(deps: &[&Dep], published: &Published, cleans: &[&Dep]) -> Table {
    let mut t = Table::new(
        "pretraining",
        "Pretraining",
        crate::data::columns("pretraining"),
    );
    for d in deps {
        t.push(our_pretraining_row(d, cleans));
    }
    for r in &published.pretraining.rows {
        t.push(published_pretraining_row(r));
    }
    if deps.iter().any(|d| !crate::recipes::recipe(d, cleans).sop) {
        t.notes
            .push(crate::data::text("pretraining.note_mlm_only").into());
    }
    if deps.iter().any(|d| d.pretrain().eval.is_none()) {
        t.notes
            .push(crate::data::text("pretraining.note_no_eval").into());
    }
    t.notes
        .extend(deps.iter().filter_map(|d| memorising_note(d)));
    t.notes.push(format!(
        "albert_zh's rows: {}. {}",
        published.pretraining.protocol, published.pretraining.note
    ));
    t
}

/// One of our pretraining runs as a row of the table.
fn our_pretraining_row(d: &Dep, cleans: &[&Dep]) -> Vec<(&'static str, Cell)> {
    let r = d.pretrain();
    let e = |k: &str| {
        r.eval
            .as_ref()
            .and_then(|e| e.get(k))
            .and_then(Value::as_f64)
    };
    let model = r.model.clone().unwrap_or_else(|| "?".into());
    let model = match r.config.as_ref().and_then(dims) {
        Some(dims) => format!("{model} ({dims})"),
        None => model,
    };
    let recipe = crate::recipes::recipe(d, cleans);
    let total = match (e("mlm_loss"), e("sop_loss")) {
        (Some(a), Some(b)) => Some(round(a + b, 4)),
        (Some(a), None) if !recipe.sop => Some(round(a, 4)),
        _ => None,
    };
    let wall = r.wall_seconds;
    cells! {
        source: "ours",
        run: d.instance.as_str(),
        model: model,
        share_type: r.share_type.clone(),
        ln_type: r.ln_type.clone(),
        parameters: r.total_parameters(),
        steps: r.steps,
        batch_size: r.rows_per_step(),
        max_seq_length: r.max_seq_length,
        tokens_seen: r.tokens_seen,
        wall_seconds: wall.map(|w| round(w, 1)),
        wall_time: wall.map(crate::table::duration).unwrap_or_default(),
        cpu_hours: cpu_hours(d).map(|h| round(h, 2)),
        tokens_per_s: r.tokens_per_s.map(|x| x.round()),
        device: hardware(d),
        mlm_accuracy: percent(e("mlm_accuracy")),
        sop_accuracy: percent(e("sop_accuracy")),
        floor_mlm_accuracy: percent(at(&r.eval, &["floor", "mlm_accuracy"])),
        vs_floor: vs_floor(r.eval.as_ref()),
        floor_sop_accuracy: percent(at(&r.eval, &["floor", "sop_accuracy"])),
        mlm_accuracy_mask: percent(by_corruption(&r.eval, "mask")),
        mlm_accuracy_random: percent(by_corruption(&r.eval, "random")),
        mlm_accuracy_kept: percent(by_corruption(&r.eval, "kept")),
        eval_mlm_loss: e("mlm_loss").map(|x| round(x, 4)),
        eval_sop_loss: e("sop_loss").map(|x| round(x, 4)),
        eval_loss: total,
        objective: recipe.objective(),
        masking: recipe.masking.clone(),
        corpus: recipe.clean.clone(),
        task_text: recipe.task_text_cell(),
    }
}

/// For a run whose SOP head memorises (the pretrain stage's `sop_trend` verdict), what its
/// held-out SOP loss did and what that means for the SOP accuracy in its row.
fn memorising_note(d: &Dep) -> Option<String> {
    let r = d.pretrain();
    let t = r.sop_trend.filter(|t| t.memorising == Some(true))?;
    let passes = r
        .epochs
        .map(|e| format!(", over {e:.1} passes over its training instances"))
        .unwrap_or_default();
    Some(format!(
        "`{}`: the held-out SOP loss rose from {:.3} (step {}) to {:.3}, worse than guessing \
         (ln 2 = 0.693){passes}: the SOP head memorises the training pairs' order rather than \
         learning sentence order, so its SOP accuracy on held-out pairs wants more text, not \
         more steps.",
        d.instance,
        t.lowest_loss?,
        thousands(t.lowest_step? as i64),
        t.final_loss?
    ))
}

/// The number at `path` inside the final evaluation, if the record has it.
fn at(eval: &Option<Value>, path: &[&str]) -> Option<f64> {
    path.iter()
        .try_fold(eval.as_ref()?, |v, k| v.get(*k))
        .and_then(Value::as_f64)
}

/// The final evaluation's MLM accuracy at the positions of one corruption (`mask`, `random`,
/// `kept`).
fn by_corruption(eval: &Option<Value>, kind: &str) -> Option<f64> {
    at(eval, &["mlm_by_corruption", kind, "accuracy"])
}

/// Where the final evaluation stands against the no-context floor: `above` as the pretrain
/// stage judged it (more than its `floor_margin` over the floor), else `below` under the floor
/// and `at` within the margin; none for a run whose mask artifact had no floor.
fn vs_floor(eval: Option<&Value>) -> Option<String> {
    let eval = eval?;
    let floor = eval.get("floor")?.get("mlm_accuracy")?.as_f64()?;
    let accuracy = eval.get("mlm_accuracy")?.as_f64()?;
    let word = match eval.get("above_floor").and_then(Value::as_bool) {
        Some(true) => "above",
        _ if accuracy < floor => "below",
        _ => "at",
    };
    Some(word.to_string())
}

/// One of albert_zh's published pretraining rows.
fn published_pretraining_row(r: &crate::published::PretrainRow) -> Vec<(&'static str, Cell)> {
    let hours = r.training_hours.map(|h| h * 3600.0);
    let estimated = if r.training_hours_estimated { "*" } else { "" };
    cells! {
        source: "albert_zh (published)",
        run: r.model.as_str(),
        model: r.config.as_str(),
        share_type: "all",
        steps: r.steps,
        batch_size: r.batch_size,
        max_seq_length: r.max_seq_length,
        wall_seconds: hours,
        wall_time: hours.map(|h| format!("{}{estimated}", crate::table::duration(h))).unwrap_or_default(),
        device: r.device.clone(),
        mlm_accuracy: r.mlm_accuracy,
        sop_accuracy: r.sop_accuracy,
        eval_loss: r.eval_loss,
    }
}

/// ` with LAMB, peak learning rate 0.003, 250 warmup steps then linear decay`.
fn optimizer_clause(o: &Value) -> String {
    let name = o
        .get("optimizer")
        .and_then(Value::as_str)
        .unwrap_or("the optimiser");
    let lr = o.get("learning_rate").and_then(Value::as_f64);
    let warm = o.get("warmup_steps").and_then(Value::as_u64);
    format!(
        " with {}{}{}",
        name.to_uppercase(),
        lr.map(|x| format!(", peak learning rate {x}"))
            .unwrap_or_default(),
        warm.map(|w| format!(", {w} warmup steps then linear decay"))
            .unwrap_or_default()
    )
}

/// What the pretraining runs were, in a sentence or two.
pub fn pretraining_sentence(deps: &[&Dep]) -> String {
    let Some(first) = deps.first() else {
        return String::new();
    };
    let r = first.pretrain();
    let mut s = format!(
        "{} pretraining run{}",
        deps.len(),
        if deps.len() == 1 { "" } else { "s" }
    );
    let model = r.model.clone().unwrap_or_else(|| "?".into());
    match &r.config {
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
    if let (Some(steps), Some(batch), Some(seq)) = (r.steps, r.rows_per_step(), r.max_seq_length) {
        s.push_str(&format!(
            " Each trained {} steps of {batch} sequences of up to {seq} tokens",
            thousands(steps as i64)
        ));
        if let (Some(inst), Some(epochs)) = (r.train_instances_per_epoch, r.epochs) {
            s.push_str(&format!(
                " ({epochs:.2} epochs over {} training instances)",
                thousands(inst as i64)
            ));
        }
        if let Some(o) = &r.optimizer {
            s.push_str(&optimizer_clause(o));
        }
        s.push('.');
    }
    if let Some(inst) = r
        .eval
        .as_ref()
        .and_then(|e| e.get("instances"))
        .and_then(Value::as_u64)
    {
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

#[cfg(test)]
mod floor_tests {
    use serde_json::json;

    use super::{by_corruption, vs_floor};

    #[test]
    fn the_floor_verdict_reads_the_evaluation() {
        let eval = |acc: f64, above: bool| {
            json!({"mlm_accuracy": acc, "above_floor": above,
                   "floor": {"mlm_accuracy": 0.15, "mlm_loss": 6.0}})
        };
        assert_eq!(vs_floor(Some(&eval(0.40, true))).as_deref(), Some("above"));
        assert_eq!(vs_floor(Some(&eval(0.16, false))).as_deref(), Some("at"));
        assert_eq!(vs_floor(Some(&eval(0.07, false))).as_deref(), Some("below"));
        // A run whose mask artifact had no floor gets no verdict.
        assert_eq!(vs_floor(Some(&json!({"mlm_accuracy": 0.4}))), None);
        assert_eq!(vs_floor(None), None);
    }

    #[test]
    fn a_memorising_sop_head_gets_a_note_saying_what_its_loss_did() {
        use crate::deps::DepKind;
        use crate::recipes::tests::dep;
        let run = |memorising: bool| {
            let trend = json!({"lowest_loss": 0.641, "lowest_step": 9240, "final_loss": 1.158,
                               "memorising": memorising});
            dep(
                "pretrain",
                DepKind::Pretrain,
                json!({"epochs": 9.48, "sop_trend": trend}),
            )
        };
        let note = super::memorising_note(&run(true)).expect("a note");
        assert_eq!(
            note,
            "`pretrain`: the held-out SOP loss rose from 0.641 (step 9,240) to 1.158, worse than \
             guessing (ln 2 = 0.693), over 9.5 passes over its training instances: the SOP head \
             memorises the training pairs' order rather than learning sentence order, so its SOP \
             accuracy on held-out pairs wants more text, not more steps."
        );
        assert_eq!(super::memorising_note(&run(false)), None);
        let older = dep("pretrain", DepKind::Pretrain, json!({"epochs": 1.0}));
        assert_eq!(super::memorising_note(&older), None);
    }

    #[test]
    fn a_runs_row_carries_both_floors_in_percent() {
        use crate::deps::DepKind;
        use crate::recipes::tests::dep;
        let run = dep(
            "pretrain",
            DepKind::Pretrain,
            json!({"eval": {"mlm_accuracy": 0.28, "sop_accuracy": 0.6031, "above_floor": true,
                            "floor": {"mlm_accuracy": 0.1416, "mlm_loss": 6.08,
                                      "sop_accuracy": 0.5395}}}),
        );
        let row = super::our_pretraining_row(&run, &[]);
        let cell = |key: &str| {
            let (_, c) = row.iter().find(|(k, _)| *k == key).expect(key);
            format!("{c:?}")
        };
        for (key, shown) in [
            ("floor_mlm_accuracy", "14.16"),
            ("floor_sop_accuracy", "53.95"),
            ("sop_accuracy", "60.31"),
        ] {
            let c = cell(key);
            assert!(c.contains(shown), "{key}: {c}");
        }
    }

    #[test]
    fn accuracy_by_corruption_is_read_when_there() {
        let eval =
            Some(json!({"mlm_by_corruption": {"kept": {"accuracy": 0.9, "predictions": 3}}}));
        assert_eq!(by_corruption(&eval, "kept"), Some(0.9));
        assert_eq!(by_corruption(&eval, "mask"), None);
    }
}
