//! The span-extraction table (CMRC 2018): our runs, the baselines and the published rows, each
//! with exact match and F1 (CMRC 2018's official script's figures, %) on a dev and a test
//! split. Our blocks are read through [`SpanMetricsBlock`], the type the finetune and baseline
//! stages write.
//!
//! Ours and the published rows are not on the same data: the shared CMRC 2018 has no train
//! split and no test answers, so our runs train on 80 % of dev's articles, select on 10 % and
//! report on the other 10 % (the protocol sentence above the table says so); the published
//! rows trained on CMRC's train set (10k questions) and report the official dev and test
//! sets (CLUE's on its 2k-question subset of test).

use pipeline_metrics::BaselineEntry;
use pipeline_tasks::SpanMetricsBlock;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::deps::Dep;
use crate::finetune_runs::{init_cell, model_cell, train_data, train_examples, with_mean};
use crate::published::{TaskPublished, TaskRow};
use crate::seeds::{self, MeanSd};
use crate::sizes::round;
use crate::table::{Cell, Table, cells};

/// EM and F1 (%) of a span block, `None` for a block of another shape.
fn em_f1(v: Option<&Value>) -> Option<(f64, f64)> {
    let b = SpanMetricsBlock::deserialize(v?).ok()?;
    Some((round(100.0 * b.exact_match, 2), round(100.0 * b.f1, 2)))
}

/// EM and F1 (%) of one split, when the run has it.
type EmF1 = Option<(f64, f64)>;

/// The dev (model-selection) and test blocks of a run, or of one baseline entry.
fn dev_test(dev: Option<&Value>, eval: Option<&Map<String, Value>>) -> (EmF1, EmF1) {
    let dev = dev.filter(|v| !v.is_null());
    (em_f1(dev), em_f1(eval.and_then(|e| e.get("test"))))
}

/// `65.5 / 84.5`, each figure `mean ± sd` over seeds when there are several.
fn pair_cell(em: Option<MeanSd>, f1: Option<MeanSd>) -> Option<String> {
    Some(format!("{} / {}", seeds::cell(em, 2)?, seeds::cell(f1, 2)?))
}

/// `65.5 (64.4) / 84.5 (84.0)`: a published best (average).
fn published_cell(
    em: Option<f64>,
    em_mean: Option<f64>,
    f1: Option<f64>,
    f1_mean: Option<f64>,
) -> Option<String> {
    Some(format!(
        "{} / {}",
        with_mean(em, em_mean, 1)?,
        with_mean(f1, f1_mean, 1)?
    ))
}

/// Our runs (seeds folded), the baselines, then the published rows.
pub fn span_table(
    task: &str,
    title: &str,
    deps: &[&Dep],
    baselines: &[&Dep],
    published: Option<&TaskPublished>,
) -> Table {
    let mut t = Table::new(task, title, crate::data::columns("span"));
    let mut ours: Vec<&Dep> = deps.to_vec();
    ours.sort_by_key(|d| {
        let rank = usize::from(d.finetune().init.as_deref() != Some("pretrained"));
        (d.stage.clone(), rank, d.instance.clone())
    });
    let scores: [seeds::Score; 4] = [
        &|d| score(d, false, false),
        &|d| score(d, false, true),
        &|d| score(d, true, false),
        &|d| score(d, true, true),
    ];
    for (g, stats) in seeds::fold(&ours, &scores) {
        t.push(our_row(&g, stats));
    }
    let mut sorted: Vec<&&Dep> = baselines.iter().collect();
    sorted.sort_by_key(|d| d.instance.clone());
    for d in sorted {
        for e in d.baseline().baselines.iter().flatten() {
            t.push(baseline_row(d, e));
        }
    }
    for r in published.map(|p| &p.rows[..]).unwrap_or_default() {
        t.push(published_row(r));
    }
    t.notes.push(crate::data::text("span.note_em_f1").into());
    t
}

/// EM or F1 (%) of a run's dev (model-selection) or test block.
fn score(d: &Dep, test: bool, f1: bool) -> Option<f64> {
    let r = d.finetune();
    let (dev, t) = dev_test(r.dev.as_ref(), r.eval.as_ref());
    let (em, f) = if test { t } else { dev }?;
    Some(if f1 { f } else { em })
}

fn our_row(g: &seeds::SeedGroup<'_>, stats: [Option<MeanSd>; 4]) -> Vec<(&'static str, Cell)> {
    let d = g.first();
    let r = d.finetune();
    let [dev_em, dev_f1, test_em, test_f1] = stats;
    cells! {
        source: "ours",
        model: model_cell(d),
        init: init_cell(d),
        train_data: r.protocol.as_ref().and_then(train_data),
        parameters: r.parameters,
        seeds: g.runs.len() as u64,
        dev_em: seeds::mean2(dev_em),
        dev_f1: seeds::mean2(dev_f1),
        dev_f1_sd: seeds::sd2(dev_f1),
        dev_md: pair_cell(dev_em, dev_f1),
        test_em: seeds::mean2(test_em),
        test_f1: seeds::mean2(test_f1),
        test_f1_sd: seeds::sd2(test_f1),
        test_md: pair_cell(test_em, test_f1),
        epochs: seeds::epochs_cell(g),
        train_examples: train_examples(r.protocol.as_ref()),
        run: g.name(),
    }
}

fn baseline_row(d: &Dep, e: &BaselineEntry) -> Vec<(&'static str, Cell)> {
    let (dev, test) = dev_test(e.dev.as_ref(), e.eval.as_ref());
    let protocol = &d.baseline().protocol;
    let name = e.name.as_deref().unwrap_or("?");
    let one = |x: Option<(f64, f64)>| x.map(|(em, f1)| format!("{em:.2} / {f1:.2}"));
    cells! {
        source: "baseline",
        model: e.description.as_deref().unwrap_or(name),
        train_data: protocol.as_ref().and_then(train_data),
        dev_em: dev.map(|x| x.0),
        dev_f1: dev.map(|x| x.1),
        dev_md: one(dev),
        test_em: test.map(|x| x.0),
        test_f1: test.map(|x| x.1),
        test_md: one(test),
        train_examples: train_examples(protocol.as_ref()),
        run: format!("{}/{name}", d.instance),
    }
}

fn published_row(r: &TaskRow) -> Vec<(&'static str, Cell)> {
    cells! {
        source: "published",
        model: r.model.as_str(),
        dev_em: r.dev_em,
        dev_f1: r.dev,
        dev_em_mean: r.dev_em_mean,
        dev_f1_mean: r.dev_mean,
        dev_md: published_cell(r.dev_em, r.dev_em_mean, r.dev, r.dev_mean),
        test_em: r.test_em,
        test_f1: r.test,
        test_em_mean: r.test_em_mean,
        test_f1_mean: r.test_mean,
        test_md: published_cell(r.test_em, r.test_em_mean, r.test, r.test_mean),
        note: r.note.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deps::DepKind;
    use crate::published::Published;
    use serde_json::json;

    fn dep(instance: &str, seed: u64, metrics: Value) -> Dep {
        Dep::new(
            &format!("{instance},seed={seed}"),
            DepKind::Finetune,
            metrics,
        )
    }

    fn block(em: f64, f1: f64) -> Value {
        json!({"examples": 10, "exact_match": em, "f1": f1, "unanswered": 0})
    }

    #[test]
    fn ours_baselines_and_published_rows_have_em_and_f1() {
        let runs: Vec<Dep> = [(1, 0.40, 0.60), (2, 0.50, 0.70)]
            .iter()
            .map(|&(seed, em, f1)| {
                dep(
                    "finetune_cmrc2018@init=pretrained",
                    seed,
                    json!({"task": "cmrc2018", "init": "pretrained", "epochs": 2, "best_epoch": 2,
                           "dev": block(em, f1), "eval": {"test": block(em - 0.1, f1 - 0.1)}}),
                )
            })
            .collect();
        let base = Dep {
            kind: DepKind::Baseline,
            ..dep(
                "baseline_cmrc2018",
                0,
                json!({"task": "cmrc2018", "baselines": [{"name": "sliding_window",
                       "description": "sliding window", "dev": block(0.0, 0.2),
                       "eval": {"test": block(0.01, 0.25)}}]}),
            )
        }
        .reparse();
        let p = Published::load().unwrap();
        let runs: Vec<&Dep> = runs.iter().collect();
        let t = span_table("cmrc2018", "CMRC 2018", &runs, &[&base], p.task("cmrc2018"));
        let md = t.markdown().unwrap();
        assert!(md.contains("| ours |"), "{md}");
        assert!(md.contains("45.00 ± 7.07 / 65.00 ± 7.07"), "{md}");
        assert!(md.contains("| baseline | sliding window |"), "{md}");
        assert!(md.contains("0.00 / 20.00"), "{md}");
        assert!(
            md.contains("| published | BERT |") && md.contains("65.5 (64.4) / 84.5 (84.0)"),
            "{md}"
        );
        assert!(md.contains("ALBERT-tiny"), "{md}");
    }
}
