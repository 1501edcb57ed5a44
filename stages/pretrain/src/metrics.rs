//! What the stage writes about itself: `metrics.jsonl` lines (training every `log_interval`
//! steps, and each evaluation) and the same scalars as TensorBoard events beside them, kept
//! consistent across a resume, and the final `metrics.json` (the model, the run, the last
//! evaluation, throughput and where the wall time went). The schemas are in docs/metrics.md.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

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

/// A `metrics.jsonl` line for an evaluation (without SOP figures when `sop` is off).
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
    if !sop {
        drop_keys(&mut line, &["eval_sop_loss", "eval_sop_accuracy"]);
    }
    line
}

/// The final evaluation as metrics.json's `eval` (without SOP figures when `sop` is off).
pub fn eval_summary(e: Option<&EvalStats>, sop: bool) -> Value {
    let mut v = serde_json::to_value(e).unwrap_or(Value::Null);
    if !sop {
        drop_keys(&mut v, &["sop_loss", "sop_accuracy"]);
    }
    v
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
        assert_eq!(eval_summary(Some(&e), true)["sop_accuracy"], json!(0.5));
        assert!(eval_summary(Some(&e), false).get("sop_accuracy").is_none());
        assert_eq!(eval_summary(None, false), Value::Null);
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
}
