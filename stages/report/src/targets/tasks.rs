//! The targets read off named tasks' fine-tuning rows of the main pretraining run: pretrained
//! against random init, pretrained against the baselines on the same data, and the number of
//! pretraining budgets on each task's curve. The tasks, counts and margins are the spec's.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use super::spec::{AtLeast, BeatsRandomInit, TaskSpec as Task};
use super::{Rows, Status, Target};
use crate::deps::Dep;
use crate::finetune_runs::{resolve, resolve_entry, train_data};
use crate::recipes::{self, Effect};
use crate::seeds::{self, MeanSd};

/// `five`, `3`: small counts in words, as a sentence states them.
fn words(n: usize) -> String {
    const WORDS: [&str; 11] = [
        "no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    ];
    WORDS
        .get(n)
        .map_or_else(|| n.to_string(), |w| w.to_string())
}

/// `Every one of the five tasks`, or the one task's title.
fn every(tasks: &[Task]) -> String {
    match tasks {
        [one] => one.title.clone(),
        _ => format!("Every one of the {} tasks", words(tasks.len())),
    }
}

impl Task {
    fn has_data(&self, train_data: &str) -> bool {
        self.data
            .as_ref()
            .is_none_or(|d| train_data.contains(d.as_str()))
    }

    /// The main run's effect on this task (its first stage on the task's data), with both
    /// pretrained and random-init runs.
    fn effect<'a>(&self, rows: &Rows<'a>) -> Option<Effect<'a>> {
        let main = rows.main?;
        recipes::effects(&main.instance, rows.finetune)
            .into_iter()
            .find(|e| {
                e.task == self.name
                    && self.has_data(&e.train_data)
                    && !e.pretrained.is_empty()
                    && !e.random.is_empty()
            })
    }
}

/// `85.20 ± 0.40 vs random init 80.10 ± 0.50 (+5.10; 2 sd = 1.00, 3 seeds)`.
fn describe(e: &Effect, by_sd: f64) -> String {
    let cell = |m: Option<MeanSd>| seeds::cell(m, 2).unwrap_or("–".into());
    let mut s = format!(
        "`{}` {} vs random init {}",
        e.stage,
        cell(e.pretrained_test()),
        cell(e.random_test())
    );
    if let Some(d) = e.diff() {
        let _ = write!(s, " ({d:+.2}");
        if let Some(t) = e.margin(by_sd) {
            let _ = write!(s, "; {by_sd} sd = {t:.2}");
        }
        let _ = write!(s, ", {} seeds)", e.seeds());
    }
    s
}

/// Whether an effect passes, and why or why not in a few words.
fn verdict(e: &Effect, spec: &BeatsRandomInit) -> (bool, String) {
    let (by_sd, min_seeds) = (spec.by_sd.0, spec.min_seeds.usize());
    if e.seeds() < min_seeds {
        (false, format!("fewer than {min_seeds} seeds on a side"))
    } else if e.beyond(by_sd) == Some(true) {
        (true, format!("more than {by_sd} sd"))
    } else if e.margin(by_sd).is_none() {
        (false, "no sd to compare with".into())
    } else {
        (false, format!("not more than {by_sd} sd"))
    }
}

/// `MSRA NER, XNLI`.
fn titles(tasks: &[&Task]) -> String {
    tasks
        .iter()
        .map(|t| t.title.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// `by_sd: 2` → `twice`.
fn times(by_sd: f64) -> String {
    match by_sd {
        1.0 => "once".into(),
        2.0 => "twice".into(),
        x => format!("{x} times"),
    }
}

/// Every task: pretrained beats random init by more than `by_sd` times the larger seed sd.
pub(super) fn random_init(rows: &Rows, spec: &BeatsRandomInit) -> Target {
    let mut parts = Vec::new();
    let mut evidence = Vec::new();
    let (mut failed, mut absent) = (Vec::new(), Vec::new());
    for task in &spec.tasks {
        match task.effect(rows) {
            Some(e) => {
                let (ok, why) = verdict(&e, spec);
                if !ok {
                    failed.push(task);
                }
                parts.push(Some(ok));
                let line = describe(&e, spec.by_sd.0);
                evidence.push(format!("{}: {line}: {why}", task.title));
            }
            None => {
                absent.push(task);
                parts.push(None);
                evidence.push(format!(
                    "{}: no pretrained and random-init runs of the main run",
                    task.title
                ));
            }
        }
    }
    let status = Status::of_parts(&parts, Status::NotRun);
    let brief = match status {
        Status::Met if spec.tasks.len() == 1 => format!("on {}", spec.tasks[0].title),
        Status::Met => format!("on all {}", words(spec.tasks.len())),
        Status::Missed => format!("not on {}", titles(&failed)),
        _ => format!("no runs of {}", titles(&absent)),
    };
    Target {
        key: String::new(),
        what: format!(
            "{}: pretrained beats random init of the same architecture by more than {} the \
             larger seed sd, {} seeds a side",
            every(&spec.tasks),
            times(spec.by_sd.0),
            spec.min_seeds.0
        ),
        status,
        brief,
        evidence: evidence.join(". "),
    }
}

/// The best baseline on the same data as an effect's stage (the same protocol).
fn best_baseline(rows: &Rows, e: &Effect) -> Option<(f64, String)> {
    let protocol = e.pretrained.first().and_then(|d| d.protocol())?;
    rows.baselines
        .iter()
        .filter(|b| b.protocol().as_ref() == Some(&protocol))
        .flat_map(|b| b.baseline().baselines.clone().unwrap_or_default())
        .filter_map(|m| {
            let test = resolve_entry(&m).test?;
            Some((test, m.name?))
        })
        .max_by(|a, b| a.0.total_cmp(&b.0))
}

/// At least `at_least` tasks: pretrained also beats every baseline on the same data.
pub(super) fn baselines(rows: &Rows, spec: &AtLeast) -> Target {
    let at_least = spec.at_least.usize();
    let (mut beaten, mut unjudged) = (Vec::new(), 0);
    let mut evidence = Vec::new();
    for task in &spec.tasks {
        let effect = task.effect(rows);
        let pretrained = effect.as_ref().and_then(Effect::pretrained_test);
        let best = effect.as_ref().and_then(|e| best_baseline(rows, e));
        let line = match (pretrained, best) {
            (Some(p), Some((test, name))) => {
                let above = p.mean > test;
                if above {
                    beaten.push(task);
                }
                format!(
                    "pretrained {:.2} against the best baseline {name} {test:.2}: {}",
                    p.mean,
                    if above { "beaten" } else { "not beaten" }
                )
            }
            (None, _) => {
                unjudged += 1;
                "no pretrained runs of the main run".into()
            }
            (Some(_), None) => {
                unjudged += 1;
                "no baseline on the same data".into()
            }
        };
        evidence.push(format!("{}: {line}", task.title));
    }
    let status = if beaten.len() >= at_least {
        Status::Met
    } else if beaten.len() + unjudged >= at_least {
        // The tasks it could not judge could still make up the count.
        Status::NotRun
    } else {
        Status::Missed
    };
    let mut brief = format!("beaten on {} of {}", beaten.len(), spec.tasks.len());
    if !beaten.is_empty() {
        let _ = write!(brief, ": {}", titles(&beaten));
    }
    if unjudged > 0 {
        let _ = write!(brief, "; {unjudged} without runs or a baseline");
    }
    Target {
        key: String::new(),
        what: format!(
            "On at least {} of the {} tasks pretrained also beats every baseline on the same data",
            words(at_least),
            words(spec.tasks.len())
        ),
        status,
        brief,
        evidence: evidence.join(". "),
    }
}

/// The distinct pretraining budgets (tokens seen, above 0) of the main run's fine-tuning runs
/// on a task with a test score: the final model's and those of the curve stages'
/// intermediate models. `None` without any fine-tuning run of the task from the main run.
fn budgets(rows: &Rows, task: &Task) -> Option<(BTreeSet<u64>, bool)> {
    let main = rows.main?;
    let of: Vec<&&Dep> = rows
        .finetune
        .iter()
        .filter(|d| d.task().as_deref() == Some(task.name.as_str()))
        .filter(|d| {
            let data = d.protocol().as_ref().and_then(train_data);
            task.has_data(data.as_deref().unwrap_or(""))
        })
        .filter(|d| d.finetune().pretrain_instance.as_deref() == Some(main.instance.as_str()))
        .collect();
    if of.is_empty() {
        return None;
    }
    let point = |d: &&&Dep| -> Option<u64> {
        resolve(d).test?;
        d.finetune().pretraining?.tokens_seen
    };
    let tokens: BTreeSet<u64> = of.iter().filter_map(point).collect();
    let random = tokens.contains(&0);
    Some((tokens.into_iter().filter(|t| *t > 0).collect(), random))
}

/// `1.7M, 3.4M, 5.0M`.
fn millions(tokens: &BTreeSet<u64>) -> String {
    tokens
        .iter()
        .map(|t| format!("{:.1}M", *t as f64 / 1e6))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Every task: test score against pretraining tokens at `at_least` budgets or more.
pub(super) fn curve(rows: &Rows, spec: &AtLeast) -> Target {
    let at_least = spec.at_least.usize();
    let mut parts = Vec::new();
    let mut evidence = Vec::new();
    let mut short = Vec::new();
    for task in &spec.tasks {
        let Some((tokens, random)) = budgets(rows, task) else {
            parts.push(None);
            evidence.push(format!(
                "{}: no fine-tuning runs of the main run",
                task.title
            ));
            short.push(format!("{} not run", task.title));
            continue;
        };
        let ok = tokens.len() >= at_least;
        parts.push(Some(ok));
        if !ok {
            short.push(format!("{} {}", task.title, tokens.len()));
        }
        evidence.push(format!(
            "{}: {} pretraining budget{} ({} tokens){}",
            task.title,
            tokens.len(),
            if tokens.len() == 1 { "" } else { "s" },
            if tokens.is_empty() {
                "no".into()
            } else {
                millions(&tokens)
            },
            if random { ", and random init" } else { "" }
        ));
    }
    let status = Status::of_parts(&parts, Status::NotRun);
    let brief = if short.is_empty() {
        format!(
            "{at_least} budgets or more on all {}",
            words(spec.tasks.len())
        )
    } else {
        format!("budgets: {}", short.join(", "))
    };
    Target {
        key: String::new(),
        what: format!(
            "{}: test score at ≥ {at_least} pretraining budgets (the intermediate models and the \
             final one; random init not counted) on its curve against pretraining tokens",
            every(&spec.tasks)
        ),
        status,
        brief,
        evidence: evidence.join(". "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deps::DepKind;
    use crate::recipes::tests::dep;
    use serde_json::{Value, json};

    fn protocol(task: &str) -> Value {
        let file = if task == "lcqmc" {
            "d/afqmc/train.tsv"
        } else {
            "d/x/train.tsv"
        };
        json!({"task": task, "train": {"examples": 10, "files": [{"path": file}]}})
    }

    /// A fine-tuning run of `task` from `pretrain` (its final model unless `step`).
    fn ft(task: &str, init: &str, seed: u64, step: Option<u64>, test: f64) -> Dep {
        let tokens = match (init, step) {
            ("random", _) => 0,
            (_, Some(s)) => s * 1000,
            (_, None) => 5_000_000,
        };
        let stage = if step.is_some() {
            format!("finetune_{task}_curve")
        } else {
            format!("finetune_{task}")
        };
        dep(
            &format!("{stage}@init={init},seed={seed},step={}", step.unwrap_or(0)),
            DepKind::Finetune,
            json!({"task": task, "init": init, "pretrain_instance": "pretrain",
                   "pretrain_step": step, "history": [],
                   "pretraining": {"tokens_seen": tokens},
                   "protocol": protocol(task), "eval": {"test": {"accuracy": test}}}),
        )
    }

    /// Three seeds each side: pretrained `pre`, random `rnd`, ±0.2 points of seed noise.
    fn grid(task: &str, pre: f64, rnd: f64) -> Vec<Dep> {
        let mut out = Vec::new();
        for seed in 1..=3u64 {
            let noise = 0.002 * (seed as f64 - 2.0);
            out.push(ft(task, "pretrained", seed, None, pre + noise));
            out.push(ft(task, "random", seed, None, rnd + noise));
        }
        out
    }

    fn baseline(task: &str, best: f64) -> Dep {
        dep(
            &format!("baseline_{task}"),
            DepKind::Baseline,
            json!({"task": task, "protocol": protocol(task),
                   "baselines": [{"name": "majority", "eval": {"test": {"accuracy": 0.3}}},
                                 {"name": "ngram_lr", "eval": {"test": {"accuracy": best}}}]}),
        )
    }

    fn judge(finetune: &[Dep], baselines: &[Dep]) -> Vec<Target> {
        let main = dep(
            "pretrain",
            DepKind::Pretrain,
            json!({"tokens_seen": 5_000_000, "parameters": {}}),
        );
        let ft: Vec<&Dep> = finetune.iter().collect();
        let bl: Vec<&Dep> = baselines.iter().collect();
        let rows = Rows {
            main: Some(&main),
            pretrain: &[],
            finetune: &ft,
            baselines: &bl,
            tables: &[],
        };
        let specs = super::super::spec::parse(json!([
            {"beats_random_init": {"by_sd": 2, "min_seeds": 3, "tasks": tasks()}},
            {"beats_baselines": {"at_least": 3, "tasks": tasks()}},
            {"curve_points": {"at_least": 3, "tasks": tasks()}},
        ]))
        .unwrap();
        super::super::targets(&specs, &rows)
    }

    /// The committed experiment's five tasks, LCQMC under the AFQMC protocol.
    fn tasks() -> Value {
        json!([{"task": "chnsenticorp", "title": "ChnSentiCorp"},
               {"task": "smp2020_ewect", "title": "SMP2020-EWECT"},
               {"task": "msra_ner", "title": "MSRA NER"},
               {"task": "lcqmc", "data": "afqmc", "title": "LCQMC (AFQMC protocol)"},
               {"task": "xnli", "title": "XNLI"}])
    }

    const NAMES: [&str; 5] = ["chnsenticorp", "smp2020_ewect", "msra_ner", "lcqmc", "xnli"];

    #[test]
    fn every_task_must_beat_random_init_by_two_sd() {
        let all: Vec<Dep> = NAMES.iter().flat_map(|t| grid(t, 0.8, 0.7)).collect();
        let t = &judge(&all, &[])[0];
        assert_eq!(t.status, Status::Met, "{}", t.evidence);
        assert!(
            t.evidence.contains(
                "MSRA NER: `finetune_msra_ner` 80.00 ± 0.20 vs random init 70.00 ± 0.20 \
                 (+10.00; 2 sd = 0.40, 3 seeds): more than 2 sd"
            ),
            "{}",
            t.evidence
        );
        // One task within the noise misses the target, even with another task absent.
        let mut some: Vec<Dep> = NAMES[..3].iter().flat_map(|t| grid(t, 0.8, 0.7)).collect();
        some.extend(grid("lcqmc", 0.701, 0.7));
        let t = &judge(&some, &[])[0];
        assert_eq!(t.status, Status::Missed);
        assert_eq!(t.brief, "not on LCQMC (AFQMC protocol)");
        assert!(
            t.evidence
                .contains("XNLI: no pretrained and random-init runs"),
            "{}",
            t.evidence
        );
        // Absent tasks alone: not run.
        let t = &judge(&some[..18], &[])[0];
        assert_eq!(t.status, Status::NotRun);
        assert_eq!(t.brief, "no runs of LCQMC (AFQMC protocol), XNLI");
        // Two seeds are not enough, however large the difference.
        let two: Vec<Dep> = NAMES
            .iter()
            .flat_map(|t| grid(t, 0.9, 0.5))
            .filter(|d| !d.instance.contains("seed=3"))
            .collect();
        let t = &judge(&two, &[])[0];
        assert_eq!(t.status, Status::Missed);
        assert!(t.evidence.contains("fewer than 3 seeds on a side"));
    }

    #[test]
    fn three_tasks_must_beat_every_baseline_on_the_same_data() {
        let all: Vec<Dep> = NAMES.iter().flat_map(|t| grid(t, 0.8, 0.7)).collect();
        let b = |bests: [f64; 3]| -> Vec<Dep> {
            ["chnsenticorp", "smp2020_ewect", "xnli"]
                .iter()
                .zip(bests)
                .map(|(t, best)| baseline(t, best))
                .collect()
        };
        let t = &judge(&all, &b([0.7, 0.75, 0.79]))[1];
        assert_eq!(t.status, Status::Met, "{}", t.evidence);
        assert_eq!(
            t.brief,
            "beaten on 3 of 5: ChnSentiCorp, SMP2020-EWECT, XNLI; 2 without runs or a baseline"
        );
        assert!(
            t.evidence.contains(
                "XNLI: pretrained 80.00 against the best baseline ngram_lr 79.00: beaten"
            ),
            "{}",
            t.evidence
        );
        // Two beaten, one not, two without a baseline: those two could still make it.
        let t = &judge(&all, &b([0.7, 0.75, 0.85]))[1];
        assert_eq!(t.status, Status::NotRun, "{}", t.evidence);
        // With baselines everywhere, two beaten of five is a miss.
        let mut five = b([0.7, 0.75, 0.85]);
        five.extend([baseline("msra_ner", 0.9), baseline("lcqmc", 0.9)]);
        let t = &judge(&all, &five)[1];
        assert_eq!(t.status, Status::Missed, "{}", t.evidence);
        // A baseline on other data is no comparison.
        let mut other = baseline("xnli", 0.1);
        other.metrics["protocol"]["train"]["examples"] = json!(11);
        let other = other.reparse();
        let t = &judge(&all, &[other])[1];
        assert!(t.evidence.contains("XNLI: no baseline on the same data"));
    }

    #[test]
    fn the_curve_counts_pretraining_budgets_not_random_init() {
        let mut runs: Vec<Dep> = NAMES.iter().flat_map(|t| grid(t, 0.8, 0.7)).collect();
        for task in NAMES {
            runs.push(ft(task, "pretrained", 1, Some(1000), 0.75));
        }
        let t = &judge(&runs, &[])[2];
        assert_eq!(t.status, Status::Missed);
        assert!(
            t.evidence.contains(
                "ChnSentiCorp: 2 pretraining budgets (1.0M, 5.0M tokens), and random init"
            ),
            "{}",
            t.evidence
        );
        assert!(
            t.brief.starts_with("budgets: ChnSentiCorp 2,"),
            "{}",
            t.brief
        );
        for task in NAMES {
            runs.push(ft(task, "pretrained", 1, Some(2000), 0.77));
        }
        let t = &judge(&runs, &[])[2];
        assert_eq!(t.status, Status::Met, "{}", t.evidence);
        // A run without a test score is no point.
        runs.retain(|d| {
            !d.instance
                .starts_with("finetune_xnli_curve@init=pretrained,seed=1,step=2000")
        });
        runs.push(dep(
            "finetune_xnli_curve@step=2000",
            DepKind::Finetune,
            json!({"task": "xnli", "init": "pretrained", "pretrain_instance": "pretrain",
                   "pretrain_step": 2000, "history": [],
                   "pretraining": {"tokens_seen": 2_000_000}, "protocol": protocol("xnli")}),
        ));
        let t = &judge(&runs, &[])[2];
        assert_eq!(t.status, Status::Missed);
        assert_eq!(t.brief, "budgets: XNLI 2");
        // LCQMC counts under the AFQMC protocol only.
        let lcqmc_own: Vec<Dep> = runs
            .into_iter()
            .filter(|d| d.task().as_deref() == Some("lcqmc"))
            .map(|mut d| {
                d.metrics["protocol"]["train"]["files"] = json!([{"path": "d/lcqmc/dev.tsv"}]);
                d.reparse()
            })
            .collect();
        let t = &judge(&lcqmc_own, &[])[2];
        assert!(
            t.evidence
                .contains("LCQMC (AFQMC protocol): no fine-tuning runs of the main run"),
            "{}",
            t.evidence
        );
    }

    #[test]
    fn the_margin_and_the_tasks_are_the_specs() {
        let runs = grid("xnli", 0.702, 0.7);
        let rows = |ft: &[Dep]| -> Vec<Target> {
            let main = dep("pretrain", DepKind::Pretrain, json!({"tokens_seen": 1}));
            let ft: Vec<&Dep> = ft.iter().collect();
            let rows = Rows {
                main: Some(&main),
                pretrain: &[],
                finetune: &ft,
                baselines: &[],
                tables: &[],
            };
            let specs = super::super::spec::parse(json!([
                {"key": "half", "beats_random_init": {"by_sd": 0.5, "min_seeds": 2, "tasks": ["xnli"]}},
                {"beats_random_init": {"by_sd": 2, "min_seeds": 3, "tasks": ["xnli"]}},
            ]));
            super::super::targets(&specs.unwrap(), &rows)
        };
        // +0.20 points against a seed sd of 0.20: beyond half an sd, not beyond two.
        let t = rows(&runs);
        assert_eq!(t[0].status, Status::Met, "{}", t[0].evidence);
        assert_eq!(t[0].brief, "on xnli");
        assert!(
            t[0].evidence
                .contains("0.5 sd = 0.10, 3 seeds): more than 0.5 sd"),
            "{}",
            t[0].evidence
        );
        assert_eq!(
            t[0].what,
            "xnli: pretrained beats random init of the same architecture by more than 0.5 times \
             the larger seed sd, 2 seeds a side"
        );
        assert_eq!(t[1].status, Status::Missed);
        assert!(
            t[1].evidence.ends_with("not more than 2 sd"),
            "{}",
            t[1].evidence
        );
    }
}
