//! The standard figures of a pipeline's runs, read from the records the pretrain and
//! finetune stages write: pretraining curves from `metrics.jsonl` lines (`step`, `loss`,
//! `mlm_accuracy`, `sop_accuracy`, `eval_*`), fine-tuning curves from `metrics.json`'s
//! `history` (`epoch`, `dev_accuracy`). Where a run comes from is the caller's: the report
//! implements [`Run`] for its deps.

use serde_json::Value;

use crate::floor;
use crate::{Figure, Series, TRAINING_CAPTION};

/// A run as the figures read it: its name and its records.
pub trait Run {
    /// The instance name (`pretrain@share_type=all`): the label of its series.
    fn instance(&self) -> &str;
    /// Its `metrics.jsonl` lines, the ones that parse.
    fn lines(&self) -> &[Value];
    /// Its `metrics.json` (`Null` when missing).
    fn metrics(&self) -> &Value;
    /// A pretrain run's no-context floor of MLM accuracy (`eval.floor.mlm_accuracy` of its
    /// metrics.json), where its record carries one.
    fn mlm_floor(&self) -> Option<f64>;
}

fn points(lines: &[Value], y: &str) -> Vec<(f64, f64)> {
    let mut pts: Vec<(f64, f64)> = lines
        .iter()
        .filter_map(|l| Some((l.get("step")?.as_f64()?, l.get(y)?.as_f64()?)))
        .filter(|(x, y)| x.is_finite() && y.is_finite())
        .collect();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    pts
}

/// The three pretraining figures.
pub fn pretraining<R: Run + ?Sized>(deps: &[&R]) -> Vec<Figure> {
    let spec = [
        (
            "pretrain_loss.svg",
            "Pretraining loss (MLM + SOP)",
            "loss",
            "loss",
            "eval_loss",
            false,
        ),
        (
            "pretrain_mlm_accuracy.svg",
            "Masked-LM accuracy",
            "MLM accuracy",
            "mlm_accuracy",
            "eval_mlm_accuracy",
            true,
        ),
        (
            "pretrain_sop_accuracy.svg",
            "Sentence-order prediction accuracy",
            "SOP accuracy",
            "sop_accuracy",
            "eval_sop_accuracy",
            true,
        ),
    ];
    let mut figures = Vec::new();
    for (file, title, y_desc, train_key, eval_key, unit) in spec {
        let mut series: Vec<Series> = deps
            .iter()
            .enumerate()
            .flat_map(|(i, d)| run_series(*d, i, train_key, eval_key))
            .collect();
        let mut caption = TRAINING_CAPTION.to_string();
        if train_key == "mlm_accuracy" {
            // The mask dep's no-context floor, where the runs' metrics carry it.
            let x_max = series
                .iter()
                .flat_map(|s| s.points.iter().map(|p| p.0))
                .fold(0.0, f64::max);
            let floors = floor::floor_series(deps, deps.len(), x_max);
            if !floors.is_empty() {
                caption = floor::caption();
                series.extend(floors);
            }
        }
        figures.push(Figure {
            file: format!("plots/{file}"),
            title: title.into(),
            x_desc: "step".into(),
            y_desc: y_desc.into(),
            series,
            unit_range: unit,
            x_from_zero: true,
            caption: Some(caption),
        });
    }
    figures
}

/// A run's two lines on one pretraining figure: its training lines' `train_key` (thin) and its
/// evaluations' `eval_key` (marked), both in the run's colour `i`.
fn run_series<R: Run + ?Sized>(d: &R, i: usize, train_key: &str, eval_key: &str) -> [Series; 2] {
    let train: Vec<Value> = d
        .lines()
        .iter()
        .filter(|l| l.get(train_key).is_some())
        .cloned()
        .collect();
    let eval = if eval_key == "eval_loss" {
        // The eval lines carry the two losses; their sum is comparable with `loss`.
        d.lines()
            .iter()
            .filter_map(|l| {
                Some((
                    l.get("step")?.as_f64()?,
                    l.get("eval_mlm_loss")?.as_f64()? + l.get("eval_sop_loss")?.as_f64()?,
                ))
            })
            .collect()
    } else {
        points(d.lines(), eval_key)
    };
    [
        Series {
            label: d.instance().to_string(),
            points: points(&train, train_key),
            marked: false,
            colour: i,
        },
        Series {
            label: d.instance().to_string(),
            points: eval,
            marked: true,
            colour: i,
        },
    ]
}

/// Dev accuracy per epoch for the runs of one task.
pub fn finetune<R: Run + ?Sized>(task: &str, title: &str, deps: &[&R]) -> Figure {
    let series = deps
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let pts = d
                .metrics()
                .get("history")
                .and_then(Value::as_array)
                .map(|h| {
                    h.iter()
                        .filter_map(|e| {
                            let acc = e.get("dev_accuracy")?.as_f64()?;
                            Some((
                                e.get("epoch")?.as_f64()?,
                                if acc > 1.0 { acc / 100.0 } else { acc },
                            ))
                        })
                        .collect()
                })
                .unwrap_or_default();
            Series {
                label: d.instance().to_string(),
                points: pts,
                marked: true,
                colour: i,
            }
        })
        .collect();
    Figure {
        file: format!("plots/{task}_dev_accuracy.svg"),
        title: format!("{title}: dev accuracy per epoch"),
        x_desc: "epoch".into(),
        y_desc: "dev accuracy (model-selection split)".into(),
        series,
        unit_range: true,
        x_from_zero: false,
        caption: None,
    }
}
