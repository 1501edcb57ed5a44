//! `pipeline plot STAGE… --metric KEY`: one metric's curves from several instances'
//! `metrics.jsonl`, overlaid in one SVG, drawn by the figures crate the report draws its
//! figures with (pipeline_figures), so that both look alike.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;
use pipeline_engine::UserError;
use pipeline_engine::error::suggestion;
use pipeline_engine::inspect;
use pipeline_figures::{Figure, Series};
use serde_json::Value;

use crate::global::Global;
use crate::sanitize;

#[derive(Debug, Args)]
#[command(after_help = "Examples:
  pipeline plot pretrain --metric eval_mlm_accuracy            every pretrain instance
  pipeline plot 'pretrain@share_type=all' 'pretrain@share_type=none' --metric loss -o loss.svg
  pipeline plot finetune_lcqmc --metric dev_accuracy            per epoch")]
pub struct PlotArgs {
    /// Stages or instances; each instance's latest artifact gives one curve.
    #[arg(required = true)]
    pub stages: Vec<String>,
    /// The metrics.jsonl key to plot (`loss`, `eval_mlm_accuracy`, `dev_accuracy`, …).
    #[arg(long, value_name = "KEY")]
    pub metric: String,
    /// The x axis: a metrics.jsonl key (default: `step`, or `epoch` where lines have no step).
    #[arg(long, value_name = "KEY")]
    pub x: Option<String>,
    /// The SVG to write (default: METRIC.svg in the current directory).
    #[arg(short, long, value_name = "FILE.svg")]
    pub output: Option<PathBuf>,
}

/// One instance's `metrics.jsonl` lines.
struct Curve {
    instance: String,
    lines: Vec<Value>,
}

pub fn plot(global: &Global, a: &PlotArgs) -> Result<ExitCode> {
    let p = crate::global::load(global)?;
    let found = inspect::artifacts(&p, &a.stages, true);
    for n in &a.stages {
        if !found
            .iter()
            .any(|f| f.manifest.stage == *n || f.manifest.instance == *n)
        {
            p.plan.select(std::slice::from_ref(n))?;
            return Err(UserError::new(format!("`{n}` has no artifact yet"))
                .with_help(format!("`pipeline run {n}` makes one"))
                .into());
        }
    }
    let mut curves: Vec<Curve> = Vec::new();
    for f in &found {
        let path =
            pipeline_engine::metrics::full_record(&f.dir, pipeline_engine::metrics::METRICS_JSONL);
        if let Some(lines) = read_lines(&path) {
            curves.push(Curve {
                instance: f.manifest.instance.clone(),
                lines,
            });
        }
    }
    if curves.is_empty() {
        return Err(UserError::new(format!(
            "no artifact of {} has a metrics.jsonl (the pretrain and finetune stages write one)",
            a.stages.join(", ")
        ))
        .into());
    }
    let x = x_key(&curves, a.x.as_deref(), &a.metric)?;
    let figure = figure(&curves, &x, &a.metric);
    let out = a
        .output
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("{}.svg", a.metric.replace(['/', '\\'], "_"))));
    std::fs::write(&out, figure.svg()?).with_context(|| format!("writing {}", out.display()))?;
    if !global.quiet {
        // The series are named by the manifests' instances: escaped and cut.
        let name = |s: &Series| sanitize::cell(&s.label, sanitize::NAME);
        let drawn: Vec<String> = figure
            .series
            .iter()
            .filter(|s| !s.points.is_empty())
            .map(|s| format!("{} ({} points)", name(s), s.points.len()))
            .collect();
        let metric = sanitize::cell(&a.metric, sanitize::NAME);
        println!(
            "wrote {}: {metric} against {}: {}",
            sanitize::line(&out.display().to_string()),
            sanitize::cell(&x, sanitize::NAME),
            drawn.join(", ")
        );
        for s in figure.series.iter().filter(|s| s.points.is_empty()) {
            println!("  {} has no `{metric}` in its metrics.jsonl", name(s));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The lines of a `metrics.jsonl` that are JSON objects; `None` if there is no file, or
/// none that can be read: it is read with the shared bounded reader (a regular file, at most
/// `MAX_LINES_BYTES`), and one that is a FIFO, a device or too large is left out with a
/// warning naming it, as `pipeline metrics` leaves out a `metrics.json` that is not JSON.
fn read_lines(path: &Path) -> Option<Vec<Value>> {
    let text = match pipeline_engine::metrics::read_lines_text(path) {
        Ok(text) => text,
        Err(e) if e.is_not_found() => return None,
        Err(e) => {
            tracing::warn!("left out: {}", sanitize::message(&e.to_string()));
            return None;
        }
    };
    Some(
        text.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(Value::is_object)
            .collect(),
    )
}

/// The x key: the one asked for, else `step`, else `epoch`; the metric must be in some line
/// that has it.
fn x_key(curves: &[Curve], asked: Option<&str>, metric: &str) -> Result<String, UserError> {
    let lines = || curves.iter().flat_map(|c| c.lines.iter());
    let has = |k: &str| lines().any(|l| l.get(k).is_some_and(Value::is_number));
    let x = match asked {
        Some(x) => x.to_string(),
        None if has("step") => "step".into(),
        None => "epoch".into(),
    };
    let keys = || {
        let mut k: Vec<&str> = lines()
            .filter_map(Value::as_object)
            .flat_map(|o| {
                o.iter()
                    .filter(|(_, v)| v.is_number())
                    .map(|(k, _)| k.as_str())
            })
            .collect();
        k.sort_unstable();
        k.dedup();
        k
    };
    if !has(&x) {
        return Err(UserError::new(format!(
            "no metrics.jsonl line has a number `{x}` for the x axis"
        ))
        .with_help(suggestion(&x, &keys())));
    }
    let both = lines().any(|l| {
        l.get(&x).is_some_and(Value::is_number) && l.get(metric).is_some_and(Value::is_number)
    });
    if !both {
        return Err(
            UserError::new(format!("no metrics.jsonl line has a number `{metric}`"))
                .with_help(suggestion(metric, &keys())),
        );
    }
    Ok(x)
}

/// One series per instance. Curves of few points (evaluations, epochs) get markers; an
/// accuracy or F1 within [0, 1] gets the unit range.
fn figure(curves: &[Curve], x: &str, metric: &str) -> Figure {
    let series: Vec<Series> = curves
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mut points: Vec<(f64, f64)> = c
                .lines
                .iter()
                .filter_map(|l| Some((l.get(x)?.as_f64()?, l.get(metric)?.as_f64()?)))
                .filter(|(x, y)| x.is_finite() && y.is_finite())
                .collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            Series {
                label: c.instance.clone(),
                points,
                marked: false,
                colour: i,
            }
        })
        .collect();
    let most = series.iter().map(|s| s.points.len()).max().unwrap_or(0);
    let ratio = metric.contains("accuracy") || metric.contains("f1");
    let unit_range = ratio
        && series
            .iter()
            .flat_map(|s| s.points.iter())
            .all(|p| (0.0..=1.0).contains(&p.1));
    Figure {
        file: String::new(),
        title: format!("{metric} against {x}"),
        x_desc: x.to_string(),
        y_desc: metric.to_string(),
        series: series
            .into_iter()
            .map(|s| Series {
                marked: most <= 40,
                ..s
            })
            .collect(),
        unit_range,
        x_from_zero: x == "step",
        // Every series is drawn alike: no line style to explain.
        caption: None,
    }
}
