//! The targets of this experiment, read off the report's rows: which were met, which missed,
//! which could not be judged (their runs are not among the report's deps, or the deps' records
//! do not carry the figure a target needs). The README's first paragraph says it, the missed
//! targets first; the `targets` table gives each target's evidence.
//!
//! The targets, read off the main pretraining run (see [`crate::recipes::main_pretrain`]):
//!
//! 1. `pretraining`: its final evaluation's MLM accuracy ≥ 30 % and SOP accuracy ≥ 70 %;
//! 2. `random_init`: on every one of the five tasks (ChnSentiCorp, SMP2020-EWECT, MSRA NER,
//!    LCQMC under the AFQMC protocol, XNLI), pretrained beats random init of the same
//!    architecture by more than twice the larger seed sd, with 3 seeds or more on each side;
//! 3. `baselines`: on at least three of them, pretrained also beats every baseline on the same
//!    data;
//! 4. `curve`: test score against pretraining tokens at 3 pretraining budgets or more on every
//!    task (the curve stages' intermediate models and the final one);
//! 5. `device_time`: the GPU work within a wall-clock span of 12 minutes.

mod device_time;
mod tasks;

use std::fmt::Write as _;

use serde_json::Value;

use crate::deps::Dep;
use crate::runs::percent;
use crate::table::{Col, Table, duration, thousands};

/// Seeds each side of a pretrained-against-random comparison needs.
pub const MIN_SEEDS: usize = 3;
/// The final evaluation's MLM accuracy the main run must reach, percent.
pub const MIN_MLM_ACCURACY: f64 = 30.0;
/// The final evaluation's SOP accuracy the main run must reach, percent.
pub const MIN_SOP_ACCURACY: f64 = 70.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Met,
    Missed,
    /// The runs are there, but their records do not carry the figures the target needs.
    NotMeasured,
    /// Its runs are not among the report's deps.
    NotRun,
}

impl Status {
    fn word(self) -> &'static str {
        match self {
            Status::Met => "met",
            Status::Missed => "missed",
            Status::NotMeasured => "not measured",
            Status::NotRun => "not run",
        }
    }

    /// The words that open the status's list in the README's first paragraph.
    fn heading(self) -> &'static str {
        match self {
            Status::Met => "Met",
            Status::Missed => "Missed",
            Status::NotMeasured => "Not measured by the report",
            Status::NotRun => "Not run",
        }
    }

    /// The status of a target judged part by part (`None`: a part that could not be judged,
    /// for want of `unjudged`): a part that fails misses the target whatever the others are.
    fn of_parts(parts: &[Option<bool>], unjudged: Status) -> Status {
        if parts.contains(&Some(false)) {
            Status::Missed
        } else if parts.is_empty() || parts.contains(&None) {
            unjudged
        } else {
            Status::Met
        }
    }
}

pub struct Target {
    pub key: &'static str,
    pub what: &'static str,
    pub status: Status,
    /// The deciding figures in a few words, for the README's first paragraph.
    pub brief: String,
    /// The figures behind the status, in a sentence.
    pub evidence: String,
}

impl Target {
    /// `met`, `missed`, `not measured` or `not run`.
    pub fn status_word(&self) -> &'static str {
        self.status.word()
    }
}

/// What the report's rows hold, for the targets.
pub struct Rows<'a> {
    pub main: Option<&'a Dep>,
    pub pretrain: &'a [&'a Dep],
    pub finetune: &'a [&'a Dep],
    pub baselines: &'a [&'a Dep],
}

/// `5,000,000 tokens seen on cuda:0 in 3m 20s wall`: what the run trained on, where, and how
/// long, as its record says (the device as the run recorded it: the records name no GPU model).
fn run_facts(d: &Dep) -> String {
    let r = d.pretrain();
    let tokens = r
        .tokens_seen
        .map_or("tokens seen not recorded".into(), |t| {
            format!("{} tokens seen", thousands(t as i64))
        });
    let device = d
        .device()
        .map_or("an unrecorded device".into(), |x| format!("`{x}`"));
    let wall = r.wall_seconds.map_or("wall time not recorded".into(), |w| {
        format!("{} wall", duration(w))
    });
    format!("{tokens} on {device}, {wall}")
}

/// The main run's final evaluation against the MLM and SOP thresholds.
fn pretraining(rows: &Rows) -> Target {
    let what = "Pretraining: final eval MLM accuracy ≥ 30 % and SOP accuracy ≥ 70 %";
    let Some(main) = rows.main else {
        return Target {
            key: "pretraining",
            what,
            status: Status::NotRun,
            brief: "no main pretraining run".into(),
            evidence: "no pretraining run with fine-tuning runs among the report's deps".into(),
        };
    };
    let r = main.pretrain();
    let eval = |k: &str| {
        r.eval
            .as_ref()
            .and_then(|e| e.get(k))
            .and_then(Value::as_f64)
    };
    let mlm = percent(eval("mlm_accuracy"));
    let sop = percent(eval("sop_accuracy"));
    // An MLM-only run trains no sentence-order head: its SOP target is missed, not unmeasured.
    let mlm_only = r.sop == Some(false);
    let parts = [
        mlm.map(|m| m >= MIN_MLM_ACCURACY),
        sop.map(|s| s >= MIN_SOP_ACCURACY)
            .or(mlm_only.then_some(false)),
    ];
    let figure = |name: &str, x: Option<f64>| match x {
        Some(x) => format!("{name} {x:.2} %"),
        None if name == "SOP" && mlm_only => "no SOP accuracy (an MLM-only run)".into(),
        None => format!("no {name} accuracy in its record"),
    };
    let brief = format!("{}, {}", figure("MLM", mlm), figure("SOP", sop));
    let instances = eval("instances").map_or(String::new(), |n| {
        format!(" on {} held-out instances", thousands(n as i64))
    });
    Target {
        key: "pretraining",
        what,
        status: Status::of_parts(&parts, Status::NotMeasured),
        evidence: format!(
            "`{}` ({}): final evaluation{instances}: {brief} (targets {MIN_MLM_ACCURACY:.0} % \
             and {MIN_SOP_ACCURACY:.0} %)",
            main.instance,
            run_facts(main)
        ),
        brief,
    }
}

/// Every target, in the order the experiment states them.
pub fn targets(rows: &Rows) -> Vec<Target> {
    vec![
        pretraining(rows),
        tasks::random_init(rows),
        tasks::baselines(rows),
        tasks::curve(rows),
        device_time::device_time(rows),
    ]
}

/// The README's first paragraph: which targets were missed (first, so that a miss is never
/// buried), which could not be measured or were not run, which were met, each with its
/// deciding figures.
pub fn paragraph(targets: &[Target], main: Option<&Dep>) -> String {
    let mut out = String::from("**Targets of this experiment, read off the rows of this report");
    if let Some(m) = main {
        let _ = write!(
            out,
            " (main pretraining run `{}`: {})",
            m.instance,
            run_facts(m)
        );
    }
    out.push_str(":**");
    for s in [
        Status::Missed,
        Status::NotMeasured,
        Status::NotRun,
        Status::Met,
    ] {
        let of: Vec<String> = targets
            .iter()
            .filter(|t| t.status == s)
            .map(|t| format!("{} ({})", t.what, t.brief))
            .collect();
        if !of.is_empty() {
            let _ = write!(
                out,
                " {} ({} of {}): {}.",
                s.heading(),
                of.len(),
                targets.len(),
                of.join("; ")
            );
        }
    }
    out.push_str(" The evidence for each is in [Targets](#targets).");
    out
}

/// The targets as a table, with their evidence.
pub fn table(targets: &[Target]) -> Table {
    let mut t = Table::new(
        "targets",
        "Targets of this experiment",
        vec![
            Col::text("target", "Target", "the target's key"),
            Col::text("what", "What", "the target as the experiment states it"),
            Col::text(
                "status",
                "Status",
                "met, missed, not measured (the deps' records do not carry the figures it \
                 needs), or not run (its runs are not among the report's deps)",
            ),
            Col::text(
                "evidence",
                "Evidence",
                "the figures the status was read from",
            ),
        ],
    );
    for x in targets {
        t.push(vec![
            ("target", x.key.into()),
            ("what", x.what.into()),
            ("status", x.status.word().into()),
            ("evidence", x.evidence.clone().into()),
        ]);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deps::DepKind;
    use crate::recipes::tests::dep;
    use serde_json::json;

    fn main_run(eval: Value, sop: bool) -> Dep {
        dep(
            "pretrain",
            DepKind::Pretrain,
            json!({"tokens_seen": 5_000_000, "parameters": {"total": 1}, "wall_seconds": 200.0,
                   "device": "cuda:0", "sop": sop, "eval": eval}),
        )
    }

    fn rows_of(main: &Dep) -> Rows<'_> {
        Rows {
            main: Some(main),
            pretrain: &[],
            finetune: &[],
            baselines: &[],
        }
    }

    #[test]
    fn pretraining_is_judged_on_both_accuracies() {
        let met = main_run(
            json!({"mlm_accuracy": 0.31, "sop_accuracy": 0.7, "instances": 1200}),
            true,
        );
        let t = pretraining(&rows_of(&met));
        assert_eq!(t.status, Status::Met, "{}", t.evidence);
        assert_eq!(t.brief, "MLM 31.00 %, SOP 70.00 %");
        assert!(
            t.evidence.starts_with(
                "`pretrain` (5,000,000 tokens seen on `cuda:0`, 3m 20s wall): final \
                 evaluation on 1,200 held-out instances: MLM 31.00 %"
            ),
            "{}",
            t.evidence
        );
        let low_sop = main_run(json!({"mlm_accuracy": 0.35, "sop_accuracy": 0.69}), true);
        assert_eq!(pretraining(&rows_of(&low_sop)).status, Status::Missed);
        // A figure that is missing cannot be met, but a figure that fails misses regardless.
        let no_sop = main_run(json!({"mlm_accuracy": 0.35}), true);
        let t = pretraining(&rows_of(&no_sop));
        assert_eq!(t.status, Status::NotMeasured);
        assert_eq!(t.brief, "MLM 35.00 %, no SOP accuracy in its record");
        let low_mlm = main_run(json!({"mlm_accuracy": 0.2}), true);
        assert_eq!(pretraining(&rows_of(&low_mlm)).status, Status::Missed);
        let mlm_only = main_run(json!({"mlm_accuracy": 0.35}), false);
        let t = pretraining(&rows_of(&mlm_only));
        assert_eq!(t.status, Status::Missed);
        assert!(t.brief.contains("an MLM-only run"), "{}", t.brief);
        let none = Rows {
            main: None,
            ..rows_of(&met)
        };
        assert_eq!(pretraining(&none).status, Status::NotRun);
    }

    #[test]
    fn the_paragraph_says_the_missed_targets_first_with_their_figures() {
        let t = |key, status, brief: &str| Target {
            key,
            what: key,
            status,
            brief: brief.into(),
            evidence: String::new(),
        };
        let targets = [
            t("a", Status::Met, "fine"),
            t("b", Status::NotMeasured, "no times"),
            t("c", Status::Missed, "MLM 20.00 %"),
            t("d", Status::NotRun, "no runs"),
        ];
        let run = main_run(json!({}), true);
        let p = paragraph(&targets, Some(&run));
        assert_eq!(
            p,
            "**Targets of this experiment, read off the rows of this report (main pretraining \
             run `pretrain`: 5,000,000 tokens seen on `cuda:0`, 3m 20s wall):** Missed (1 of \
             4): c (MLM 20.00 %). Not measured by the report (1 of 4): b (no times). Not run (1 \
             of 4): d (no runs). Met (1 of 4): a (fine). The evidence for each is in \
             [Targets](#targets)."
        );
        let table = table(&targets);
        assert_eq!(table.title, "Targets of this experiment");
        assert_eq!(table.rows.len(), 4);
    }

    #[test]
    fn parts_combine_into_one_status() {
        let of = Status::of_parts;
        assert_eq!(of(&[Some(true), Some(true)], Status::NotRun), Status::Met);
        assert_eq!(of(&[None, Some(false)], Status::NotRun), Status::Missed);
        assert_eq!(of(&[Some(true), None], Status::NotRun), Status::NotRun);
        assert_eq!(of(&[], Status::NotMeasured), Status::NotMeasured);
    }
}
