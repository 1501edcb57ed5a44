//! The device-time target: the wall-clock span of the experiment's GPU work, from the start
//! of the first stage that ran on a GPU to the finish of the last, read off the deps' own
//! records. A dep carries its finish time (`record.finished` of its manifest) and its own wall
//! time (`wall_seconds` of its metrics), not its start: a stage's start is taken as its finish
//! less its wall time, which leaves out only the engine's work before the stage's body began.
//! Where a GPU stage lacks either figure the span is not measured, rather than guessed. The
//! longest span allowed is the spec's (`device_time: {minutes: 12}`).

use super::{Rows, Status, Target};
use crate::deps::Dep;
use crate::table::duration;

/// Whether a dep ran on a GPU (`cuda`, `cuda:0`, …: the device its record names).
fn on_gpu(d: &Dep) -> bool {
    d.device().is_some_and(|x| x.starts_with("cuda"))
}

/// Seconds since the Unix epoch of a UTC time as the engine writes its run records:
/// `2026-11-27T10:00:00.123Z` (RFC 3339, `Z`, fraction optional; humantime, the engine's own
/// writer of them). Anything else is `None`: the records come from other machines, and a time
/// we cannot read is not one we may assume.
fn parse_utc(s: &str) -> Option<f64> {
    // humantime takes an empty fraction (`10:00:00.Z`), which no writer of ours makes.
    if s.ends_with(".Z") {
        return None;
    }
    let t = humantime::parse_rfc3339(s).ok()?;
    Some(t.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs_f64())
}

/// One GPU stage's interval, seconds since the epoch.
struct Interval<'a> {
    dep: &'a Dep,
    start: f64,
    finish: f64,
    wall: f64,
}

fn interval(d: &Dep) -> Option<Interval<'_>> {
    let finish = parse_utc(d.finished.as_deref()?)?;
    let wall = d.wall_seconds().filter(|w| w.is_finite() && *w >= 0.0)?;
    Some(Interval {
        dep: d,
        start: finish - wall,
        finish,
        wall,
    })
}

fn target(max_span: f64, status: Status, brief: String, evidence: String) -> Target {
    Target {
        key: String::new(),
        what: format!(
            "Device time: the GPU work (pretraining and fine-tuning) within a wall-clock span \
             of {} minutes",
            max_span / 60.0
        ),
        status,
        brief,
        evidence,
    }
}

/// The span of every pretraining and fine-tuning stage among the deps that ran on a GPU, against
/// `max_span` seconds.
pub(super) fn device_time(rows: &Rows, max_span: f64) -> Target {
    let all: Vec<&Dep> = rows.pretrain.iter().chain(rows.finetune).copied().collect();
    let gpu: Vec<&Dep> = all.iter().copied().filter(|d| on_gpu(d)).collect();
    if gpu.is_empty() {
        let mut devices: Vec<String> = all.iter().filter_map(|d| d.device()).collect();
        devices.sort();
        devices.dedup();
        return target(
            max_span,
            Status::NotRun,
            "no stage ran on a GPU".into(),
            format!(
                "no pretraining or fine-tuning run on a GPU among the report's deps (devices \
                 recorded: {})",
                if devices.is_empty() {
                    "none".into()
                } else {
                    devices.join(", ")
                }
            ),
        );
    }
    let intervals: Vec<Interval> = gpu.iter().filter_map(|d| interval(d)).collect();
    if intervals.len() < gpu.len() {
        let lacking: Vec<&str> = gpu
            .iter()
            .filter(|d| interval(d).is_none())
            .map(|d| d.instance.as_str())
            .collect();
        return target(
            max_span,
            Status::NotMeasured,
            format!(
                "{} of {} GPU stages without times",
                lacking.len(),
                gpu.len()
            ),
            format!(
                "not measured by the report: {} of the {} stages that ran on a GPU have no \
                 readable finish time or wall time in their records (first: `{}`), so the span \
                 cannot be read off them",
                lacking.len(),
                gpu.len(),
                lacking[0]
            ),
        );
    }
    measured(&intervals, max_span)
}

/// The target from the intervals of every GPU stage (at least one).
fn measured(intervals: &[Interval], max_span: f64) -> Target {
    let first = intervals
        .iter()
        .min_by(|a, b| a.start.total_cmp(&b.start))
        .unwrap_or(&intervals[0]);
    let last = intervals
        .iter()
        .max_by(|a, b| a.finish.total_cmp(&b.finish))
        .unwrap_or(&intervals[0]);
    let span = last.finish - first.start;
    // `+ 0.0`: an empty sum of f64 is −0.0.
    let busy = intervals.iter().map(|i| i.wall).sum::<f64>() + 0.0;
    let mut devices: Vec<String> = intervals.iter().filter_map(|i| i.dep.device()).collect();
    devices.sort();
    devices.dedup();
    target(
        max_span,
        if span <= max_span {
            Status::Met
        } else {
            Status::Missed
        },
        format!("span {}", duration(span)),
        format!(
            "{} from the start of `{}` to the finish of `{}`, over {} stages on {} (their own \
             wall times sum to {}; a stage's start is its recorded finish less its own wall \
             time; stages that did not run on a GPU, such as the data stages and the \
             baselines, are not counted)",
            duration(span),
            first.dep.instance,
            last.dep.instance,
            intervals.len(),
            devices.join(", "),
            duration(busy)
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deps::DepKind;
    use crate::recipes::tests::dep;
    use serde_json::json;

    #[test]
    fn utc_times_read_as_the_engine_writes_them() {
        assert_eq!(parse_utc("1970-01-01T00:00:00Z"), Some(0.0));
        // `date -u -d 2026-11-27T10:00:00Z +%s`.
        assert_eq!(parse_utc("2026-11-27T10:00:00Z"), Some(1_795_773_600.0));
        assert_eq!(parse_utc("2024-02-29T23:59:59Z"), Some(1_709_251_199.0));
        let ms = parse_utc("2026-11-27T10:00:00.250Z").unwrap();
        assert!((ms - 1_795_773_600.25).abs() < 1e-6, "{ms}");
        for bad in [
            "2026-11-27T10:00:00",
            "2026-11-27T10:00:00+01:00",
            "2026-11-27 10:00:00Z",
            "2026-13-27T10:00:00Z",
            "2026-11-27T10:00:00.Z",
            "2026-11-27T10:0:00Z",
            "2026-11-27T-1:00:00Z",
            "",
        ] {
            assert_eq!(parse_utc(bad), None, "{bad}");
        }
    }

    fn run(instance: &str, device: &str, finished: Option<&str>, wall: Option<f64>) -> Dep {
        let kind = if instance.starts_with("pretrain") {
            DepKind::Pretrain
        } else {
            DepKind::Finetune
        };
        let mut d = dep(
            instance,
            kind,
            json!({"device": device, "wall_seconds": wall, "task": "xnli", "history": []}),
        );
        d.finished = finished.map(str::to_string);
        d
    }

    fn judge(pretrain: &[Dep], finetune: &[Dep]) -> Target {
        let p: Vec<&Dep> = pretrain.iter().collect();
        let f: Vec<&Dep> = finetune.iter().collect();
        device_time(
            &Rows {
                main: p.first().copied(),
                pretrain: &p,
                finetune: &f,
                baselines: &[],
                tables: &[],
            },
            12.0 * 60.0,
        )
    }

    #[test]
    fn the_span_runs_from_the_first_start_to_the_last_finish_on_the_gpu() {
        // Pretraining 09:50:00–09:55:00; fine-tuning in parallel, the last done at 10:01:30.
        let pretrain = [run(
            "pretrain",
            "cuda:0",
            Some("2026-11-27T09:55:00.000Z"),
            Some(300.0),
        )];
        let mut finetune = vec![
            run(
                "ft@seed=1",
                "cuda:0",
                Some("2026-11-27T09:58:00.000Z"),
                Some(170.0),
            ),
            run(
                "ft@seed=2",
                "cuda:0",
                Some("2026-11-27T10:01:30.000Z"),
                Some(60.0),
            ),
            // A CPU run hours later is not GPU work.
            run(
                "ft@seed=3",
                "cpu",
                Some("2026-11-27T14:00:00.000Z"),
                Some(60.0),
            ),
        ];
        let t = judge(&pretrain, &finetune);
        assert_eq!(t.status, Status::Met, "{}", t.evidence);
        assert_eq!(t.brief, "span 11m 30s");
        assert!(
            t.evidence.starts_with(
                "11m 30s from the start of `pretrain` to the finish of `ft@seed=2`, over 3 \
                 stages on cuda:0 (their own wall times sum to 8m 50s"
            ),
            "{}",
            t.evidence
        );
        // Idle time between the stages counts: the span is wall-clock time, not busy time.
        finetune[1].finished = Some("2026-11-27T10:02:01Z".into());
        let t = judge(&pretrain, &finetune);
        assert_eq!(t.status, Status::Missed);
        assert_eq!(t.brief, "span 12m 01s");
    }

    #[test]
    fn a_gpu_stage_without_its_times_leaves_the_span_unmeasured() {
        let pretrain = [run(
            "pretrain",
            "cuda:0",
            Some("2026-11-27T09:55:00Z"),
            Some(300.0),
        )];
        for missing in [
            run("ft", "cuda:0", None, Some(60.0)),
            run("ft", "cuda:0", Some("2026-11-27T09:58:00Z"), None),
            run("ft", "cuda:0", Some("yesterday"), Some(60.0)),
        ] {
            let t = judge(&pretrain, &[missing]);
            assert_eq!(t.status, Status::NotMeasured);
            assert!(
                t.evidence
                    .starts_with("not measured by the report: 1 of the 2 stages that ran on a GPU"),
                "{}",
                t.evidence
            );
            assert!(t.evidence.contains("(first: `ft`)"), "{}", t.evidence);
        }
        // No GPU at all: the GPU work did not run.
        let cpu = [run(
            "pretrain",
            "flex",
            Some("2026-11-27T09:55:00Z"),
            Some(300.0),
        )];
        let t = judge(&cpu, &[]);
        assert_eq!(t.status, Status::NotRun);
        assert!(
            t.evidence.ends_with("(devices recorded: flex)"),
            "{}",
            t.evidence
        );
    }
}
