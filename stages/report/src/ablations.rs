//! The ablations table: one row per pretraining run and fine-tuning stage, the run's recipe
//! (sharing, objective, masking, task text) beside the downstream effect of its weights
//! (pretrained minus random init of the same architecture, mean ± sd over seeds), and what the
//! row changes against the main run. ALBERT's own ablations (Tables 4, 5 of the paper) asked
//! these questions at 125k steps on a TPU pod; these rows answer them at our budget, which the
//! notes state.

use crate::deps::Dep;
use crate::recipes::{self, Effect, Recipe};
use crate::seeds;
use crate::sizes::round;
use crate::table::{Cell, Table, cells, thousands};

/// `+1.23 (> 2 sd)`, `+0.30 (≤ 2 sd)`, `+0.30` without sds.
fn effect_cell(e: &Effect) -> Option<String> {
    let diff = e.diff()?;
    Some(match e.beyond_two_sd() {
        Some(true) => format!("{diff:+.2} (> 2 sd)"),
        Some(false) => format!("{diff:+.2} (≤ 2 sd)"),
        None => format!("{diff:+.2}"),
    })
}

/// One row per (pretraining run with fine-tuning runs, fine-tuning stage); `None` unless at
/// least two pretraining runs have fine-tuning runs (one run is no ablation).
pub fn ablations(
    pretrain: &[&Dep],
    finetune: &[&Dep],
    cleans: &[&Dep],
    main: Option<&Dep>,
) -> Option<Table> {
    let mut runs: Vec<(&Dep, Recipe, Vec<Effect>)> = pretrain
        .iter()
        .map(|p| {
            (
                *p,
                recipes::recipe(p, cleans),
                recipes::effects(&p.instance, finetune),
            )
        })
        .filter(|(_, _, e)| !e.is_empty())
        .collect();
    if runs.len() < 2 {
        return None;
    }
    // The main run first, then by name.
    runs.sort_by_key(|(p, _, _)| {
        (
            Some(p.instance.as_str()) != main.map(|m| m.instance.as_str()),
            p.instance.clone(),
        )
    });
    let reference = main.map(|m| recipes::recipe(m, cleans));
    let mut t = Table::new(
        "ablations",
        "Ablations: pretraining recipes and their downstream effect",
        crate::data::columns("ablations"),
    );
    for (p, r, effects) in &runs {
        let changes = changes(p, r, main, reference.as_ref());
        for e in effects {
            t.push(effect_row(p, r, &changes, e));
        }
    }
    t.notes.push(budget_note(
        &runs.iter().map(|(p, _, _)| *p).collect::<Vec<_>>(),
    ));
    t.notes.push(
        "Effect: the pretrained weights' mean test score minus that of the same architecture \
         from random weights, fine-tuned by the same stage with the same seeds; the Test columns \
         are accuracy, or entity F1 for a tagging task. A difference between two rows is an \
         ablation's effect only where both rows exceed their seeds' noise."
            .into(),
    );
    Some(t)
}

/// What a run's recipe changes against the main run's: `main`, `none (same recipe)`, the
/// differences, or `–` without a main run.
fn changes(p: &Dep, r: &Recipe, main: Option<&Dep>, reference: Option<&Recipe>) -> String {
    match reference {
        Some(_) if Some(p.instance.as_str()) == main.map(|m| m.instance.as_str()) => {
            "main".to_string()
        }
        Some(reference) => {
            let d = r.differences(reference);
            if d.is_empty() {
                "none (same recipe)".into()
            } else {
                d.join(", ")
            }
        }
        None => "–".into(),
    }
}

/// One (pretraining run, fine-tuning stage) row: the recipe, the budget, and the effect of
/// the pretrained weights against random ones.
fn effect_row(p: &Dep, r: &Recipe, changes: &str, e: &Effect) -> Vec<(&'static str, Cell)> {
    let (pre, rnd) = (e.pretrained_test(), e.random_test());
    cells! {
        pretrain: p.instance.as_str(),
        changes: changes,
        share_type: r.share_type.clone(),
        objective: r.objective(),
        masking: r.masking.clone(),
        task_text: r.task_text_cell(),
        steps: p.pretrain().steps,
        tokens_seen: p.pretrain().tokens_seen,
        task: e.task.clone(),
        stage: e.stage.clone(),
        train_data: e.train_data.clone(),
        seeds: e.pretrained.len() as u64,
        random_seeds: e.random.len() as u64,
        test: pre.map(|m| round(m.mean, 2)),
        test_sd: pre.and_then(|m| m.sd).map(|s| round(s, 2)),
        test_md: seeds::cell(pre, 2),
        random_test: rnd.map(|m| round(m.mean, 2)),
        random_test_sd: rnd.and_then(|m| m.sd).map(|s| round(s, 2)),
        random_md: seeds::cell(rnd, 2),
        effect: e.diff().map(|x| round(x, 2)),
        beyond_2sd: match e.beyond_two_sd() {
            Some(true) => "yes",
            Some(false) => "no",
            None => "–",
        },
        effect_md: effect_cell(e),
    }
}

/// The pretraining budget of each run, stated: steps × batch × sequence length, tokens seen.
fn budget_note(runs: &[&Dep]) -> String {
    let parts: Vec<String> = runs
        .iter()
        .map(|p| {
            let r = p.pretrain();
            let n = |x: Option<u64>| x.map_or("?".into(), |x| thousands(x as i64));
            format!(
                "`{}` {} steps × {} sequences of up to {} tokens ({} tokens seen)",
                p.instance,
                n(r.steps),
                r.rows_per_step().map_or("?".into(), |x| x.to_string()),
                n(r.max_seq_length),
                n(r.tokens_seen)
            )
        })
        .collect();
    format!("Pretraining budget: {}.", parts.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deps::DepKind;
    use crate::recipes::tests::dep;
    use serde_json::json;

    fn ft(stage: &str, pretrain: &str, init: &str, seed: u64, acc: f64) -> Dep {
        dep(
            &format!("{stage}@init={init},pretrain={pretrain},seed={seed}"),
            DepKind::Finetune,
            json!({"task": "chnsenticorp", "init": init, "pretrain_instance": pretrain,
                   "history": [],
                   "protocol": {"train": {"files": [{"path": "/d/chnsenticorp/train.tsv"}]}},
                   "eval": {"test": {"accuracy": acc}}}),
        )
    }

    #[test]
    fn rows_pair_pretrained_with_random_init_and_say_what_changed() {
        let main = dep(
            "pretrain@sop=true",
            DepKind::Pretrain,
            json!({"share_type": "all", "sop": true, "steps": 100, "batch_size": 32,
                   "max_seq_length": 128, "tokens_seen": 400000,
                   "masking": {"whole_word": true, "max_ngram": 3}}),
        );
        let mlm = dep(
            "pretrain@sop=false",
            DepKind::Pretrain,
            json!({"share_type": "all", "sop": false, "steps": 100, "tokens_seen": 400000,
                   "masking": {"whole_word": true, "max_ngram": 3}}),
        );
        let mut runs = Vec::new();
        for (p, base) in [("pretrain@sop=true", 0.80), ("pretrain@sop=false", 0.75)] {
            for seed in 1..=3u64 {
                let jitter = 0.002 * seed as f64;
                runs.push(ft("ft", p, "pretrained", seed, base + jitter));
                runs.push(ft("ft", p, "random", seed, 0.70 + jitter));
            }
        }
        let refs: Vec<&Dep> = runs.iter().collect();
        let t = ablations(&[&mlm, &main], &refs, &[], Some(&main)).unwrap();
        assert_eq!(t.key, "ablations");
        assert_eq!(t.rows.len(), 2);
        let md = t.markdown().unwrap();
        let lines: Vec<&str> = md
            .lines()
            .filter(|l| l.starts_with("| pretrain@"))
            .collect();
        assert!(
            lines[0].starts_with(
                "| pretrain@sop=true | main | all | MLM + SOP | whole-word ≤3-gram | none |"
            ),
            "{md}"
        );
        assert!(
            lines[0].contains("| 80.40 ± 0.20 | 70.40 ± 0.20 | +10.00 (> 2 sd) |"),
            "{md}"
        );
        assert!(lines[1].contains("| SOP | all | MLM only |"), "{md}");
        assert!(t.notes[0].contains("`pretrain@sop=true` 100 steps × 32 sequences of up to 128 tokens (400,000 tokens seen)"), "{}", t.notes[0]);
        let json = t.json(Default::default()).unwrap();
        assert_eq!(json["rows"][1]["effect"], json!(5.0));
        assert_eq!(json["rows"][1]["beyond_2sd"], json!("yes"));
        // One pretraining run is no ablation.
        assert!(ablations(&[&main], &refs, &[], Some(&main)).is_none());
    }
}
