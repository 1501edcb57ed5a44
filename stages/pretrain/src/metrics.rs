//! What the stage writes about itself: `metrics.jsonl` lines (training every `log_interval`
//! steps, and each evaluation) and the same scalars as TensorBoard events beside them, kept
//! consistent across a resume, and the final `metrics.json` (the model, the run, the last
//! evaluation, throughput and where the wall time went). The schemas are in docs/metrics.md.
//!
//! Each evaluation is read against the mask dep's no-context floor ([`Floor`]): the accuracy
//! an encoder reaches from label frequencies and copying visible tokens alone. A run "above
//! the floor" has learned to use context.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use pipeline_metrics::SopTrend;
use pipeline_tbevents::EventWriter;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::trainer::{EvalStats, StepStats};

/// Seconds spent in each part of the stage, kept across a resume.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Timings {
    /// Optimiser steps only (what tokens/s is computed from).
    pub train_seconds: f64,
    pub eval_seconds: f64,
    pub checkpoint_seconds: f64,
}

/// A `metrics.jsonl` line for a training step; without `sop` (MLM only) it has no SOP loss or
/// accuracy: the head is not trained, and its chance-level figures would read as a result.
pub fn step_line(step: u64, s: &StepStats, tokens_per_s: f64, elapsed: f64, sop: bool) -> Value {
    let p = s.predictions.max(1) as f64;
    let mut line = json!({
        "step": step,
        "loss": round(s.loss),
        "mlm_loss": round(s.mlm_loss),
        "sop_loss": round(s.sop_loss),
        "mlm_accuracy": round(s.mlm_correct / p),
        "sop_accuracy": round(s.sop_correct / s.rows.max(1) as f64),
        "lr": s.lr,
        "grad_norm": round(s.grad_norm),
        "tokens_per_s": tokens_per_s.round(),
        "elapsed_s": round(elapsed),
    });
    if !sop {
        drop_keys(&mut line, &["sop_loss", "sop_accuracy"]);
    }
    line
}

fn drop_keys(v: &mut Value, keys: &[&str]) {
    if let Some(m) = v.as_object_mut() {
        for k in keys {
            m.remove(*k);
        }
    }
}

/// A `metrics.jsonl` line for an evaluation (without SOP figures when `sop` is off), with the
/// MLM accuracy by corruption (`eval_mlm_accuracy_mask`, `_random`, `_kept`) when it was
/// counted.
pub fn eval_line(step: u64, e: &EvalStats, seconds: f64, sop: bool) -> Value {
    let mut line = json!({
        "step": step,
        "eval_mlm_loss": round(e.mlm_loss),
        "eval_mlm_accuracy": round(e.mlm_accuracy),
        "eval_sop_loss": round(e.sop_loss),
        "eval_sop_accuracy": round(e.sop_accuracy),
        "eval_instances": e.instances,
        "eval_seconds": round(seconds),
    });
    if let (Some(split), Some(m)) = (&e.mlm_by_corruption, line.as_object_mut()) {
        for (kind, a) in [
            ("mask", &split.mask),
            ("random", &split.random),
            ("kept", &split.kept),
        ] {
            m.insert(
                format!("eval_mlm_accuracy_{kind}"),
                json!(round(a.accuracy)),
            );
        }
    }
    if !sop {
        drop_keys(&mut line, &["eval_sop_loss", "eval_sop_accuracy"]);
    }
    line
}

/// The final evaluation as metrics.json's `eval` (without SOP figures when `sop` is off),
/// with the floor it is read against and the verdict ([`Floor::verdict`]): `floor` and
/// `above_floor` are `null` when the mask dep records no floor.
pub fn eval_summary(e: Option<&EvalStats>, sop: bool, floor: Option<&Floor>) -> Value {
    let mut v = serde_json::to_value(e).unwrap_or(Value::Null);
    if !sop {
        drop_keys(&mut v, &["sop_loss", "sop_accuracy"]);
    }
    if let (Some(e), Some(m)) = (e, v.as_object_mut()) {
        m.insert("floor".into(), json!(floor));
        m.insert("floor_margin".into(), json!(FLOOR_MARGIN));
        m.insert(
            "above_floor".into(),
            json!(floor.map(|f| f.verdict(e.mlm_accuracy))),
        );
    }
    v
}

/// How far the held-out SOP loss must have risen from the run's lowest, in nats, besides being
/// worse than ln 2, for the head to count as memorising: a few hundredths are the noise of a
/// few thousand eval pairs between evaluations.
pub const SOP_RISE: f64 = 0.05;

/// The held-out SOP loss over the run: the lowest evaluation (`lowest`: step and loss) against
/// the last, after `passes` over the training instances, and the verdict. A held-out loss
/// above ln 2 is worse than guessing 50 % for every pair: the head is confident, and wrong on
/// pairs it has not seen, while its training accuracy climbs (the 2026-11-30 H200 sitting:
/// 0.641 at step 9,240, 1.158 at 15,400, with training SOP accuracy at 84–93 %, 9.5 passes
/// over the instances, ~40 over an 11 M-token corpus). Only after a whole pass: before one,
/// nothing has been seen twice, and a rise is the noise of an early run (a 40-step dry run
/// on 64 eval pairs rose from 0.672 to 0.732).
pub fn sop_trend(
    lowest: Option<(u64, f64)>,
    last: Option<&EvalStats>,
    passes: f64,
) -> Option<SopTrend> {
    let (step, low) = lowest?;
    let last = last?.sop_loss;
    let risen = last > std::f64::consts::LN_2 && last > low + SOP_RISE;
    Some(SopTrend {
        lowest_loss: Some(round(low)),
        lowest_step: Some(step),
        final_loss: Some(round(last)),
        memorising: Some(risen && passes >= 1.0),
    })
}

/// The log's sentence when the held-out SOP loss says the head memorises ([`sop_trend`]).
pub fn sop_sentence(trend: &SopTrend) -> Option<String> {
    if trend.memorising != Some(true) {
        return None;
    }
    Some(format!(
        "the SOP head memorises: held-out SOP loss {:.4}, worse than guessing (ln 2 = 0.6931) \
         and up from {:.4} at step {}; more text, not more steps, is what it needs",
        trend.final_loss.unwrap_or(f64::NAN),
        trend.lowest_loss.unwrap_or(f64::NAN),
        trend.lowest_step.unwrap_or(0)
    ))
}

/// How far above the floor's accuracy an eval accuracy must be to count as "above the floor":
/// two points. Less could be noise of a small eval (a few thousand masked positions) or the
/// floor's own estimate; a model that uses context at all passes it early (copying plus
/// frequencies gives some 13 % on Chinese characters, context soon several times that).
pub const FLOOR_MARGIN: f64 = 0.02;

/// The eval split's floors that the mask stage recorded: its `eval.no_context_floor` (the MLM
/// accuracy and loss, in nats, of predicting from label frequencies and copying visible tokens
/// alone) and its `eval.sop_floor` (the SOP accuracy of reading only the punctuation at the
/// segments' edges).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Floor {
    /// The floor's accuracy.
    pub mlm_accuracy: f64,
    /// The floor's mean cross-entropy, in nats.
    pub mlm_loss: f64,
    /// The SOP floor's accuracy; absent for a mask artifact made before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sop_accuracy: Option<f64>,
}

impl Floor {
    /// The floors in a mask artifact's `metrics.json`; `None` when it has no MLM floor (made
    /// before the floor was recorded, or without an eval split).
    pub fn of_mask_record(record: &Value) -> Option<Floor> {
        let eval = record.get("eval")?;
        let mut floor = Floor::deserialize(eval.get("no_context_floor")?).ok()?;
        floor.sop_accuracy = eval
            .get("sop_floor")
            .and_then(|f| f.get("sop_accuracy"))
            .and_then(Value::as_f64);
        Some(floor)
    }

    /// Whether `mlm_accuracy` is above the floor: more than [`FLOOR_MARGIN`] over its accuracy.
    pub fn verdict(&self, mlm_accuracy: f64) -> bool {
        mlm_accuracy > self.mlm_accuracy + FLOOR_MARGIN
    }
}

/// The log's sentence about an evaluation against the floor.
pub fn floor_sentence(e: &EvalStats, floor: Option<&Floor>) -> String {
    let Some(f) = floor else {
        return "no floor verdict: the mask artifact records no no-context floor (made before \
                the mask stage recorded it)"
            .into();
    };
    let verdict = if f.verdict(e.mlm_accuracy) {
        "above the no-context floor: the model uses context"
    } else if e.mlm_accuracy < f.mlm_accuracy - FLOOR_MARGIN {
        // Early on a model predicts its most frequent label everywhere, before it has learnt
        // even to copy a visible token.
        "below the no-context floor: not even label frequencies and copying learnt yet"
    } else {
        "still at the no-context floor: nothing learnt from context yet"
    };
    format!(
        "{verdict} (eval MLM accuracy {:.4}, loss {:.4}; floor {:.4}, loss {:.4}; above means \
         more than {} points over the floor's accuracy)",
        e.mlm_accuracy,
        e.mlm_loss,
        f.mlm_accuracy,
        f.mlm_loss,
        FLOOR_MARGIN * 100.0
    )
}

/// The log's sentence about an evaluation's SOP accuracy against the SOP floor; `None` when
/// the mask artifact records none.
pub fn sop_floor_sentence(e: &EvalStats, floor: Option<&Floor>) -> Option<String> {
    let f = floor?.sop_accuracy?;
    let verdict = if e.sop_accuracy > f + FLOOR_MARGIN {
        "above the SOP floor: the model orders pairs by more than their edges' punctuation"
    } else {
        "not above the SOP floor: no better than the punctuation at the segments' edges"
    };
    Some(format!(
        "{verdict} (eval SOP accuracy {:.4}; floor {f:.4}, above means more than {} points over it)",
        e.sop_accuracy,
        FLOOR_MARGIN * 100.0
    ))
}

/// Six decimals are plenty for losses and accuracies and keep the files readable.
pub fn round(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

/// Keeps the lines of `path` up to step `step` (a resumed run redoes the steps after its
/// checkpoint and would otherwise log them twice).
pub fn truncate_metrics(path: &Path, step: u64) -> anyhow::Result<()> {
    // The stage's own file in its work folder, but kept across runs: read as every
    // metrics.jsonl is (bounded, regular files only). Not there yet: nothing to keep.
    let text = match pipeline_metrics::read_lines_text(path) {
        Ok(text) => text,
        Err(e) if e.is_not_found() => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let kept: String = text
        .lines()
        .filter(|l| {
            serde_json::from_str::<Value>(l)
                .ok()
                .and_then(|v| v["step"].as_u64())
                .is_some_and(|s| s <= step)
        })
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(path, kept)?;
    Ok(())
}

/// The lines of a `metrics.jsonl` this stage wrote (each one JSON object).
pub fn read_lines(path: &Path) -> anyhow::Result<Vec<Value>> {
    let text = pipeline_metrics::read_lines_text(path)?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l)
                .map_err(|e| anyhow::anyhow!("{}:{}: not a JSON line ({e})", path.display(), i + 1))
        })
        .collect()
}

pub fn append_line(path: &Path, v: &Value) -> anyhow::Result<()> {
    let mut f = OpenOptions::new().create(true).append(true).open(path)?;
    writeln!(f, "{v}")?;
    Ok(())
}

/// `metrics.jsonl` in the work area and its TensorBoard twin (`events.out.tfevents.0.pipeline`,
/// one event per line, stamped with the clock), appended line by line so that
/// `tensorboard --logdir .pipeline/work` follows the run.
pub struct MetricsLog {
    pub jsonl: PathBuf,
    events_path: PathBuf,
    /// Opened on the first line, after a resume has trimmed the file.
    events: Option<EventWriter>,
}

impl MetricsLog {
    pub fn new(work_dir: &Path) -> MetricsLog {
        MetricsLog {
            jsonl: work_dir.join("metrics.jsonl"),
            events_path: work_dir.join(pipeline_tbevents::FILE_NAME),
            events: None,
        }
    }

    /// A fresh start: what an earlier attempt logged goes.
    pub fn start_over(&mut self) {
        let _ = std::fs::remove_file(&self.jsonl);
        let _ = std::fs::remove_file(&self.events_path);
    }

    /// A resume from the checkpoint at `step`: both files keep the lines up to it.
    pub fn keep_up_to(&mut self, step: u64) -> anyhow::Result<()> {
        truncate_metrics(&self.jsonl, step)?;
        pipeline_tbevents::keep_steps_up_to(&self.events_path, step as i64)?;
        Ok(())
    }

    pub fn append(&mut self, line: &Value) -> anyhow::Result<()> {
        append_line(&self.jsonl, line)?;
        let now = pipeline_tbevents::now();
        if self.events.is_none() {
            self.events = Some(EventWriter::append(&self.events_path, now)?);
        }
        if let (Some(w), Some((step, values))) = (
            self.events.as_mut(),
            pipeline_tbevents::scalars_of_line(line, "step"),
        ) {
            w.scalars(step, now, &values)?;
        }
        Ok(())
    }
}

/// Where a run's wall time went, as `metrics.json` reports it.
pub fn time_split(t: &Timings, wall: f64) -> Value {
    let share = |x: f64| round(x / wall.max(1e-9));
    json!({
        "train_seconds": round(t.train_seconds),
        "eval_seconds": round(t.eval_seconds),
        "checkpoint_seconds": round(t.checkpoint_seconds),
        "wall_seconds": round(wall),
        "train_share": share(t.train_seconds),
        "eval_share": share(t.eval_seconds),
        "checkpoint_share": share(t.checkpoint_seconds),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_keeps_the_lines_up_to_the_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("metrics.jsonl");
        for step in [1, 10, 20, 30] {
            append_line(&path, &json!({"step": step})).unwrap();
        }
        truncate_metrics(&path, 20).unwrap();
        let steps: Vec<u64> = std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["step"]
                    .as_u64()
                    .unwrap()
            })
            .collect();
        assert_eq!(steps, vec![1, 10, 20]);
    }

    #[test]
    fn the_log_writes_events_beside_the_lines_and_a_resume_trims_both() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = MetricsLog::new(dir.path());
        for step in [1, 2, 3] {
            log.append(&json!({"step": step, "loss": step as f64 / 2.0}))
                .unwrap();
        }
        let events = dir.path().join(pipeline_tbevents::FILE_NAME);
        assert_eq!(pipeline_tbevents::scalars(&events).unwrap().len(), 3);
        let mut resumed = MetricsLog::new(dir.path());
        resumed.keep_up_to(2).unwrap();
        resumed.append(&json!({"step": 3, "loss": 9.0})).unwrap();
        let s = pipeline_tbevents::scalars(&events).unwrap();
        let got: Vec<(i64, f32)> = s.iter().map(|s| (s.step, s.value)).collect();
        assert_eq!(got, vec![(1, 0.5), (2, 1.0), (3, 9.0)]);
        assert_eq!(
            std::fs::read_to_string(&resumed.jsonl)
                .unwrap()
                .lines()
                .count(),
            3
        );
    }

    #[test]
    fn without_sop_no_sop_figure_is_written() {
        let s = StepStats {
            loss: 5.0,
            mlm_loss: 5.0,
            sop_loss: 0.69,
            ..Default::default()
        };
        assert!(step_line(1, &s, 1.0, 1.0, true).get("sop_loss").is_some());
        let line = step_line(1, &s, 1.0, 1.0, false);
        assert!(line.get("sop_loss").is_none() && line.get("sop_accuracy").is_none());
        assert_eq!(line["loss"], json!(5.0));
        let e = EvalStats {
            sop_accuracy: 0.5,
            ..Default::default()
        };
        assert!(
            eval_line(1, &e, 1.0, false)
                .get("eval_sop_accuracy")
                .is_none()
        );
        assert_eq!(
            eval_summary(Some(&e), true, None)["sop_accuracy"],
            json!(0.5)
        );
        assert!(
            eval_summary(Some(&e), false, None)
                .get("sop_accuracy")
                .is_none()
        );
        assert_eq!(eval_summary(None, false, None), Value::Null);
    }

    #[test]
    fn shares_add_up_to_the_parts() {
        let t = Timings {
            train_seconds: 90.0,
            eval_seconds: 8.0,
            checkpoint_seconds: 1.0,
        };
        let v = time_split(&t, 100.0);
        assert_eq!(v["eval_share"], json!(0.08));
        assert_eq!(v["train_share"], json!(0.9));
    }

    #[test]
    fn the_floor_is_read_from_the_mask_record_and_judged_with_its_margin() {
        let mask = json!({"eval": {"no_context_floor": {"mlm_accuracy": 0.13,
            "mlm_loss": 6.5, "predictions": 900, "mask_share": 0.8}}});
        let f = Floor::of_mask_record(&mask).unwrap();
        assert_eq!(
            (f.mlm_accuracy, f.mlm_loss, f.sop_accuracy),
            (0.13, 6.5, None)
        );
        // An older mask record, or one without an eval split: no floor.
        assert_eq!(
            Floor::of_mask_record(&json!({"eval": {"instances": 3}})),
            None
        );
        assert_eq!(Floor::of_mask_record(&json!({"eval": null})), None);
        let at = EvalStats {
            mlm_accuracy: 0.145,
            ..Default::default()
        };
        let above = EvalStats {
            mlm_accuracy: 0.16,
            ..Default::default()
        };
        let v = eval_summary(Some(&at), true, Some(&f));
        assert_eq!(v["above_floor"], json!(false));
        assert_eq!(v["floor"]["mlm_accuracy"], json!(0.13));
        assert_eq!(
            eval_summary(Some(&above), true, Some(&f))["above_floor"],
            json!(true)
        );
        assert!(floor_sentence(&at, Some(&f)).starts_with("still at the no-context floor"));
        assert!(floor_sentence(&above, Some(&f)).starts_with("above the no-context floor"));
        let below = EvalStats {
            mlm_accuracy: 0.05,
            ..Default::default()
        };
        assert!(floor_sentence(&below, Some(&f)).starts_with("below the no-context floor"));
        assert_eq!(
            eval_summary(Some(&below), true, Some(&f))["above_floor"],
            json!(false)
        );
        // Without a floor: said so, and `null` rather than a verdict.
        let none = eval_summary(Some(&above), true, None);
        assert!(none["above_floor"].is_null() && none["floor"].is_null());
        assert!(floor_sentence(&above, None).starts_with("no floor verdict"));
    }

    #[test]
    fn the_sop_floor_is_read_beside_the_mlm_floor_and_judged_with_the_same_margin() {
        let mask = json!({"eval": {
            "no_context_floor": {"mlm_accuracy": 0.14, "mlm_loss": 6.1},
            "sop_floor": {"sop_accuracy": 0.54, "pairs": 3789}}});
        let f = Floor::of_mask_record(&mask).unwrap();
        assert_eq!(f.sop_accuracy, Some(0.54));
        assert_eq!(
            eval_summary(Some(&EvalStats::default()), true, Some(&f))["floor"]["sop_accuracy"],
            json!(0.54)
        );
        let sop = |sop_accuracy| EvalStats {
            sop_accuracy,
            ..Default::default()
        };
        let at = sop_floor_sentence(&sop(0.55), Some(&f)).unwrap();
        assert!(at.starts_with("not above the SOP floor"), "{at}");
        let above = sop_floor_sentence(&sop(0.6031), Some(&f)).unwrap();
        assert!(above.starts_with("above the SOP floor"), "{above}");
        // A mask record from before the SOP floor: no sentence, and no key in the summary.
        let old = Floor::of_mask_record(&json!({"eval": {
            "no_context_floor": {"mlm_accuracy": 0.14, "mlm_loss": 6.1}}}))
        .unwrap();
        assert_eq!(sop_floor_sentence(&sop(0.6), Some(&old)), None);
        let v = eval_summary(Some(&EvalStats::default()), true, Some(&old));
        assert!(v["floor"].get("sop_accuracy").is_none(), "{v}");
    }

    #[test]
    fn eval_lines_carry_the_accuracy_by_corruption_when_it_was_counted() {
        use crate::trainer::{Accuracy, ByCorruption};
        let mut e = EvalStats::default();
        assert!(
            eval_line(1, &e, 1.0, true)
                .get("eval_mlm_accuracy_kept")
                .is_none()
        );
        let a = |accuracy| Accuracy {
            accuracy,
            predictions: 10,
        };
        e.mlm_by_corruption = Some(ByCorruption {
            mask: a(0.1),
            random: a(0.2),
            kept: a(0.9),
        });
        let line = eval_line(1, &e, 1.0, true);
        assert_eq!(line["eval_mlm_accuracy_mask"], json!(0.1));
        assert_eq!(line["eval_mlm_accuracy_random"], json!(0.2));
        assert_eq!(line["eval_mlm_accuracy_kept"], json!(0.9));
        let summary = eval_summary(Some(&e), true, None);
        assert_eq!(
            summary["mlm_by_corruption"]["kept"]["predictions"],
            json!(10)
        );
    }

    #[test]
    fn the_sop_head_memorises_when_its_held_out_loss_is_worse_than_guessing_and_has_risen() {
        let at = |sop_loss| EvalStats {
            sop_loss,
            ..Default::default()
        };
        // The 2026-11-30 sitting: lowest 0.641 at step 9,240, last 1.158.
        let t = sop_trend(Some((9240, 0.641)), Some(&at(1.158)), 9.5).unwrap();
        assert_eq!(
            (t.lowest_loss, t.lowest_step, t.final_loss, t.memorising),
            (Some(0.641), Some(9240), Some(1.158), Some(true))
        );
        let said = sop_sentence(&t).unwrap();
        assert!(
            said.contains("memorises") && said.contains("step 9240"),
            "{said}"
        );
        // Risen but still better than guessing; worse than guessing but never better (it has
        // not learnt the task, which is not memorising); within the noise of the lowest.
        for (low, last) in [(0.40, 0.60), (0.70, 0.71), (0.70, 0.74)] {
            let t = sop_trend(Some((1, low)), Some(&at(last)), 9.5).unwrap();
            assert_eq!(t.memorising, Some(false), "{low} → {last}");
            assert!(sop_sentence(&t).is_none());
        }
        // Before a whole pass over the instances nothing has been seen twice: a rise is noise
        // (the dry run of the GPU sitting, 40 steps: 0.672 at step 4, then 0.732).
        let early = sop_trend(Some((4, 0.672)), Some(&at(0.732)), 0.002).unwrap();
        assert_eq!(early.memorising, Some(false));
        assert!(sop_trend(None, Some(&at(1.0)), 9.5).is_none());
        assert!(sop_trend(Some((1, 0.6)), None, 9.5).is_none());
    }
}
