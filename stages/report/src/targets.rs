//! The targets of an experiment, as the report's `targets` param states them ([`spec`]), read
//! off the report's rows: which were met, which missed, which could not be judged (their runs are
//! not among the report's deps, or the deps' records do not carry the figure a target needs). The
//! README's first paragraph says it, the missed targets first; the `targets` table gives each
//! target's evidence. No targets stated, no paragraph and no table.
//!
//! Each kind of target is judged here, the same for every experiment: a threshold on the main
//! pretraining run's final evaluation (below), pretrained against random init and against the
//! baselines on named tasks and the points of each task's curve ([`tasks`]), the span of the GPU
//! work ([`device_time`]), a figure of a row of the experiment's own tables ([`cell`]).

mod cell;
mod device_time;
pub mod spec;
mod tasks;

use std::fmt::Write as _;

use serde_json::Value;

use crate::deps::Dep;
use crate::table::{Table, duration, thousands};
use spec::{Bound, Claim, TargetSpec};

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
    pub key: String,
    pub what: String,
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
    /// The experiment's own tables (`tables`) that were built, for `cell` claims.
    pub tables: &'a [Table],
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

/// `mlm_accuracy` → `MLM accuracy`: the evaluation's figures are named `<head>_<measure>`.
fn label(metric: &str) -> String {
    match metric.split_once('_') {
        Some((head, rest)) => format!("{} {}", head.to_uppercase(), rest.replace('_', " ")),
        None => metric.to_string(),
    }
}

/// `mlm_accuracy` → `MLM`, for a figure in percent.
fn head(metric: &str) -> String {
    metric
        .split_once('_')
        .map_or(metric, |(h, _)| h)
        .to_uppercase()
}

/// Accuracies are recorded as fractions and shown in percent.
fn is_fraction(metric: &str) -> bool {
    metric.ends_with("accuracy")
}

/// A bound as the target states it: `30 %` (at least), `≤ 3.5` (at most).
fn bound_text(b: &Bound) -> String {
    let (x, at_most) = match (b.at_least, b.at_most) {
        (Some(x), _) => (x.0, false),
        (None, x) => (x.map_or(f64::NAN, |x| x.0), true),
    };
    // Rounded to a millionth so that 0.3 reads 30, not 30.000000000000004.
    let shown = |x: f64| (x * 1e6).round() / 1e6;
    let figure = match is_fraction(&b.metric.0) {
        true => format!("{} %", shown(x * 100.0)),
        false => shown(x).to_string(),
    };
    if at_most {
        format!("≤ {figure}")
    } else {
        figure
    }
}

/// The main run's final evaluation against the bounds: every bound must hold.
fn threshold(rows: &Rows, bounds: &[Bound]) -> Target {
    let what = format!(
        "Pretraining: final eval {}",
        bounds
            .iter()
            .map(|b| match b.at_least {
                Some(_) => format!("{} ≥ {}", label(&b.metric.0), bound_text(b)),
                None => format!("{} {}", label(&b.metric.0), bound_text(b)),
            })
            .collect::<Vec<_>>()
            .join(" and ")
    );
    let Some(main) = rows.main else {
        return Target {
            key: String::new(),
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
    // The floor an accuracy is read against (the mask dep's, as pretrain recorded it).
    let floor = |k: &str| {
        let f = r.eval.as_ref()?.get("floor")?.get(k)?.as_f64()?;
        Some(format!(" against a floor of {:.2} %", f * 100.0))
    };
    // An MLM-only run (`sop: false` in its record) trains no sentence-order head: a bound on its
    // SOP figures is missed, not unmeasured.
    let untrained = |m: &str| m.starts_with("sop_") && r.sop == Some(false);
    let mut parts = Vec::new();
    let mut figures = Vec::new();
    for b in bounds {
        let m = b.metric.0.as_str();
        let x = eval(m);
        let holds = |x: f64| match (b.at_least, b.at_most) {
            (Some(lo), _) => x >= lo.0,
            (None, hi) => hi.is_some_and(|hi| x <= hi.0),
        };
        parts.push(x.map(holds).or(untrained(m).then_some(false)));
        figures.push(match x {
            Some(x) if is_fraction(m) => format!(
                "{} {:.2} %{}",
                head(m),
                x * 100.0,
                floor(m).unwrap_or_default()
            ),
            Some(x) => format!("{} {x:.2}", label(m)),
            None if untrained(m) => format!("no {} (an MLM-only run)", label(m)),
            None => format!("no {} in its record", label(m)),
        });
    }
    let brief = figures.join(", ");
    let instances = eval("instances").map_or(String::new(), |n| {
        format!(" on {} held-out instances", thousands(n as i64))
    });
    let bounds_text: Vec<String> = bounds.iter().map(bound_text).collect();
    Target {
        key: String::new(),
        what,
        status: Status::of_parts(&parts, Status::NotMeasured),
        evidence: format!(
            "`{}` ({}): final evaluation{instances}: {brief} (targets {})",
            main.instance,
            run_facts(main),
            bounds_text.join(" and ")
        ),
        brief,
    }
}

/// Every target, in the order the params state them, each judged by its kind and given the
/// key and wording of its spec.
pub fn targets(specs: &[TargetSpec], rows: &Rows) -> Vec<Target> {
    specs
        .iter()
        .map(|spec| {
            let mut t = match &spec.claim {
                Claim::Threshold(bounds) => threshold(rows, bounds),
                Claim::BeatsRandomInit(b) => tasks::random_init(rows, b),
                Claim::BeatsBaselines(b) => tasks::baselines(rows, b),
                Claim::CurvePoints(c) => tasks::curve(rows, c),
                Claim::DeviceTime(d) => device_time::device_time(rows, d.minutes.0 * 60.0),
                Claim::Cell(c) => cell::cell(rows.tables, c),
            };
            t.key = spec.key.clone();
            if let Some(what) = &spec.what {
                t.what = what.clone();
            }
            t
        })
        .collect()
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
        crate::data::columns("targets"),
    );
    for x in targets {
        t.push(vec![
            ("target", x.key.clone().into()),
            ("what", x.what.clone().into()),
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

    /// The bounds of the committed experiment: MLM accuracy ≥ 30 %, SOP accuracy ≥ 70 %.
    fn pretraining(rows: &Rows) -> Target {
        let spec = json!([{"threshold": [{"metric": "mlm_accuracy", "at_least": 0.30},
                                         {"metric": "sop_accuracy", "at_least": 0.70}]}]);
        targets(&spec::parse(spec).unwrap(), rows).remove(0)
    }

    fn rows_of(main: &Dep) -> Rows<'_> {
        Rows {
            main: Some(main),
            pretrain: &[],
            finetune: &[],
            baselines: &[],
            tables: &[],
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
        let t = |key: &str, status, brief: &str| Target {
            key: key.into(),
            what: key.into(),
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
    fn the_spec_words_the_target_and_sets_its_bounds() {
        let run = main_run(
            json!({"mlm_accuracy": 0.31, "sop_accuracy": 0.7, "mlm_loss": 3.2}),
            true,
        );
        let t = pretraining(&rows_of(&run));
        assert_eq!(t.key, "threshold");
        assert_eq!(
            t.what,
            "Pretraining: final eval MLM accuracy ≥ 30 % and SOP accuracy ≥ 70 %"
        );
        assert!(
            t.evidence.ends_with("(targets 30 % and 70 %)"),
            "{}",
            t.evidence
        );
        // With the floors the run was read against, each accuracy names its own.
        let floored = main_run(
            json!({"mlm_accuracy": 0.2802, "sop_accuracy": 0.6031,
                   "floor": {"mlm_accuracy": 0.1416, "mlm_loss": 6.08, "sop_accuracy": 0.5484}}),
            true,
        );
        let t = pretraining(&rows_of(&floored));
        assert!(
            t.evidence.ends_with(
                "MLM 28.02 % against a floor of 14.16 %, SOP 60.31 % against a floor of 54.84 % \
                 (targets 30 % and 70 %)"
            ),
            "{}",
            t.evidence
        );
        let spec = |loss: f64| {
            spec::parse(json!([{"key": "loss", "what": "Low loss",
                                "threshold": {"metric": "mlm_loss", "at_most": loss}}]))
            .unwrap()
        };
        let t = targets(&spec(3.5), &rows_of(&run)).remove(0);
        assert_eq!((t.key.as_str(), t.what.as_str()), ("loss", "Low loss"));
        assert_eq!((t.status, t.brief.as_str()), (Status::Met, "MLM loss 3.20"));
        assert!(t.evidence.ends_with("(targets ≤ 3.5)"), "{}", t.evidence);
        assert_eq!(
            targets(&spec(3.0), &rows_of(&run))[0].status,
            Status::Missed
        );
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
