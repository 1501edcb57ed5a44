//! Downstream accuracy against pretraining tokens seen, the curve no published ALBERT table
//! has: the fine-tuning runs of one task grouped by protocol and backbone, one point per
//! pretraining budget (random init is 0 tokens, intermediate `save_steps` models fine-tuned with
//! `pretrain_step`, the final model), test accuracy as the mean over seeds. A line fitted on
//! the pretrained points (accuracy linear in log tokens) says where the trend would cross the
//! best baseline: an extrapolation, marked as such.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use pipeline_figures::{Figure, Series};

use crate::deps::Dep;
use crate::finetune_runs::{resolve, resolve_entry, train_data};
use crate::seeds::{self, MeanSd};
use crate::sizes::round;
use crate::table::{Cell, Table, cells};

/// One budget of one line: the runs fine-tuned from the same pretraining point.
pub struct Point {
    pub step: u64,
    pub tokens: u64,
    pub test: MeanSd,
}

/// One line: a protocol (its training data) and a backbone (the pretrain instance).
pub struct Line {
    pub train_data: String,
    pub backbone: String,
    pub points: Vec<Point>,
}

impl Line {
    fn label(&self) -> String {
        format!("{} · {}", self.train_data, self.backbone)
    }

    /// The label in the figure's legend: the backbone, and the training data when the figure
    /// has several protocols, shortened to its first file (the table beside the figure has
    /// them whole).
    fn legend(&self, several_protocols: bool) -> String {
        if several_protocols {
            format!("{} · {}", short_data(&self.train_data), self.backbone)
        } else {
            self.backbone.clone()
        }
    }
}

/// `afqmc/train.tsv + lcqmc/dev.tsv` → `afqmc/train.tsv + 1 more`.
fn short_data(train_data: &str) -> String {
    let files: Vec<&str> = train_data.split(" + ").collect();
    match files.len() {
        0 | 1 => train_data.to_string(),
        n => format!("{} + {} more", files[0], n - 1),
    }
}

/// What the figure's two line styles are.
pub const CURVE_CAPTION: &str =
    "line with markers: our runs (mean over seeds) · thin line: the best baseline, same data";

/// The lines of a task's fine-tuning runs (those that say how far their backbone was
/// pretrained), points in token order. Lines with a single budget are left out: they are
/// the table's rows already.
pub fn lines(runs: &[&Dep]) -> Vec<Line> {
    // (train data, backbone) → tokens seen → (step, test accuracy of each seed)
    type Budgets = BTreeMap<u64, (u64, Vec<Option<f64>>)>;
    let mut by_point: BTreeMap<(String, String), Budgets> = BTreeMap::new();
    for d in runs {
        let r = d.finetune();
        let Some(tokens) = r.pretraining.and_then(|p| p.tokens_seen) else {
            continue;
        };
        let step = r.pretraining.and_then(|p| p.step).unwrap_or(0);
        let data = r
            .protocol
            .as_ref()
            .and_then(train_data)
            .unwrap_or_else(|| "?".into());
        let backbone = r.pretrain_instance.clone().unwrap_or_else(|| "?".into());
        by_point
            .entry((data, backbone))
            .or_default()
            .entry(tokens)
            .or_insert((step, Vec::new()))
            .1
            .push(resolve(d).test);
    }
    by_point
        .into_iter()
        .filter(|(_, points)| points.len() > 1)
        .map(|((train_data, backbone), points)| Line {
            train_data,
            backbone,
            points: points
                .into_iter()
                .filter_map(|(tokens, (step, tests))| {
                    Some(Point {
                        step,
                        tokens,
                        test: seeds::mean_sd(tests)?,
                    })
                })
                .collect(),
        })
        .collect()
}

/// The best baseline's test accuracy and name among `baselines` on the same training data.
fn best_baseline(baselines: &[&Dep], data: &str) -> Option<(f64, String)> {
    let mut best: Option<(f64, String)> = None;
    for d in baselines {
        let record = d.baseline();
        if record.protocol.as_ref().and_then(train_data).as_deref() != Some(data) {
            continue;
        }
        for e in record.baselines.iter().flatten() {
            let Some(test) = resolve_entry(e).test else {
                continue;
            };
            if best.as_ref().is_none_or(|(b, _)| test > *b) {
                let name = e.name.as_deref().unwrap_or("?");
                best = Some((test, name.to_string()));
            }
        }
    }
    best
}

/// Least squares of accuracy on ln(tokens) over the pretrained points: `(a, b)` with
/// accuracy ≈ a + b·ln(tokens); `None` under two distinct budgets.
pub fn log_fit(points: &[(f64, f64)]) -> Option<(f64, f64)> {
    let xs: Vec<(f64, f64)> = points
        .iter()
        .filter(|(t, _)| *t > 0.0)
        .map(|(t, y)| (t.ln(), *y))
        .collect();
    let n = xs.len() as f64;
    if xs.len() < 2 {
        return None;
    }
    let mx = xs.iter().map(|p| p.0).sum::<f64>() / n;
    let my = xs.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = xs.iter().map(|p| (p.0 - mx).powi(2)).sum();
    if sxx <= 0.0 {
        return None;
    }
    let b = xs.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum::<f64>() / sxx;
    Some((my - b * mx, b))
}

/// How far past the run's own budget an extrapolated crossing is still quoted as a number.
const MAX_EXTRAPOLATION: f64 = 1000.0;

/// The sentences on where a line stands against its random init and its best baseline.
fn trend_sentence(line: &Line, baseline: Option<&(f64, String)>) -> String {
    let mut parts: Vec<String> = Vec::new();
    let last = line.points.last().filter(|l| l.tokens > 0);
    let random = line.points.iter().find(|p| p.tokens == 0);
    if let (Some(r), Some(l)) = (random, last) {
        let diff = l.test.mean - r.test.mean;
        let verdict = match (r.test.sd, l.test.sd) {
            (Some(a), Some(b)) => {
                let two_sd = 2.0 * a.max(b);
                let more = if diff > two_sd { "more" } else { "not more" };
                format!("{more} than twice the larger seed sd ({two_sd:.2})")
            }
            _ => "one seed on a side, so there is no sd to compare with".into(),
        };
        parts.push(format!(
            "the most pretrained model ({} tokens) is {diff:+.2} points from random init: {verdict}",
            millions(l.tokens as f64)
        ));
    }
    let pretrained: Vec<(f64, f64)> = line
        .points
        .iter()
        .filter(|p| p.tokens > 0)
        .map(|p| (p.tokens as f64, p.test.mean))
        .collect();
    match (log_fit(&pretrained), last) {
        (Some((a, b)), Some(l)) => {
            // `+ 0.0` turns a rounded −0.00 into 0.00.
            let per_doubling = (b * std::f64::consts::LN_2 * 100.0).round() / 100.0 + 0.0;
            let mut fit = format!(
                "fitted on the pretrained points, test accuracy moves {per_doubling:+.2} points per \
                 doubling of pretraining tokens"
            );
            if let Some((target, name)) = baseline {
                let crossing = ((target - a) / b).exp();
                let factor = crossing / l.tokens as f64;
                let _ = if l.test.mean > *target {
                    write!(
                        fit,
                        ", already above the best baseline ({name}, {target:.2})"
                    )
                } else if per_doubling <= 0.0 {
                    write!(
                        fit,
                        ": not rising, so no budget can be read off for the best baseline \
                         ({name}, {target:.2})"
                    )
                } else if factor <= MAX_EXTRAPOLATION {
                    write!(
                        fit,
                        "; at that rate it would reach the best baseline ({name}, {target:.2}) \
                         at about {} tokens, {factor:.0}× this run's (an extrapolation)",
                        millions(crossing)
                    )
                } else {
                    write!(
                        fit,
                        "; at that rate the best baseline ({name}, {target:.2}) lies more than \
                         {MAX_EXTRAPOLATION:.0}× this run's budget away, further than such a fit \
                         can say"
                    )
                };
            }
            parts.push(fit);
        }
        _ => parts.push("fewer than two pretrained budgets, so no trend is fitted".into()),
    }
    let sentences: Vec<String> = parts.iter().map(|p| capitalised(p)).collect();
    format!("{}: {}.", line.label(), sentences.join(". "))
}

fn capitalised(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

fn millions(tokens: f64) -> String {
    if tokens >= 1e9 {
        format!("{:.1}B", tokens / 1e9)
    } else {
        format!("{:.1}M", tokens / 1e6)
    }
}

/// One point of a line: the backbone at a pretraining step, its mean test score over seeds.
fn point_row(line: &Line, p: &Point) -> Vec<(&'static str, Cell)> {
    cells! {
        train_data: line.train_data.as_str(),
        backbone: line.backbone.as_str(),
        step: p.step,
        tokens_seen: p.tokens,
        test: round(p.test.mean, 2),
        test_sd: p.test.sd.map(|s| round(s, 2)),
        test_md: seeds::cell(Some(p.test), 2),
        seeds: p.test.n as u64,
    }
}

/// A line's series for the figure (bold, with points) and, where a baseline ran on the same
/// data, the best baseline as a thin flat line across the same range.
fn line_series(
    line: &Line,
    baseline: Option<&(f64, String)>,
    several: bool,
    i: usize,
    max_tokens: f64,
) -> Vec<Series> {
    let mut series = vec![Series {
        label: line.legend(several),
        points: line
            .points
            .iter()
            .map(|p| (p.tokens as f64 / 1e6, p.test.mean / 100.0))
            .collect(),
        marked: true,
        colour: 2 * i,
    }];
    if let Some((acc, name)) = baseline {
        series.push(Series {
            label: if several {
                format!("best baseline ({name}) · {}", short_data(&line.train_data))
            } else {
                format!("best baseline ({name})")
            },
            points: vec![(0.0, acc / 100.0), (max_tokens / 1e6, acc / 100.0)],
            marked: false,
            colour: 2 * i + 1,
        });
    }
    series
}

/// The curve table, the trend sentences and the figure of one task; `None` without a line.
pub fn curve(
    task: &str,
    title: &str,
    runs: &[&Dep],
    baselines: &[&Dep],
) -> Option<(Table, Vec<String>, Figure)> {
    let lines = lines(runs);
    if lines.is_empty() {
        return None;
    }
    let mut t = Table::new(
        &format!("{task}_curve"),
        &format!("{title}: test accuracy against pretraining tokens"),
        crate::data::columns("curve"),
    );
    let mut series = Vec::new();
    let mut sentences = Vec::new();
    let max_tokens = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.tokens))
        .max()
        .unwrap_or(0) as f64;
    let several = lines
        .iter()
        .map(|l| &l.train_data)
        .collect::<std::collections::BTreeSet<_>>()
        .len()
        > 1;
    for (i, line) in lines.iter().enumerate() {
        for p in &line.points {
            t.push(point_row(line, p));
        }
        let baseline = best_baseline(baselines, &line.train_data);
        sentences.push(trend_sentence(line, baseline.as_ref()));
        series.extend(line_series(line, baseline.as_ref(), several, i, max_tokens));
    }
    let figure = Figure {
        file: format!("plots/{task}_curve.svg"),
        title: format!("{title}: test accuracy against pretraining tokens"),
        x_desc: "pretraining tokens seen (millions; 0 = random init)".into(),
        y_desc: "test accuracy (mean over seeds)".into(),
        series,
        unit_range: true,
        x_from_zero: true,
        caption: Some(CURVE_CAPTION.into()),
    };
    Some((t, sentences, figure))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deps::DepKind;
    use serde_json::json;

    fn run(stage: &str, seed: u64, step: u64, tokens: u64, test: f64) -> Dep {
        let metrics = json!({
            "task": "xnli",
            "init": if tokens == 0 { "random" } else { "pretrained" },
            "pretrain_instance": "pretrain@share_type=all",
            "pretraining": {"step": step, "tokens_seen": tokens},
            "protocol": {"train": {"files": [{"path": "/d/nli_extra/cmnli/dev.tsv"}], "examples": 100}},
            "eval": {"xnli_test": {"accuracy": test}},
        });
        let mut d = Dep::new(
            &format!("{stage}@seed={seed},step={step}"),
            DepKind::Finetune,
            metrics,
        );
        d.coords.remove("step");
        d
    }

    #[test]
    fn points_fold_seeds_and_sort_by_tokens() {
        let runs = [
            run("ft", 1, 1000, 4_000_000, 0.50),
            run("ft", 2, 1000, 4_000_000, 0.52),
            run("ft", 1, 0, 0, 0.40),
            run("ft", 2, 0, 0, 0.42),
            run("ft_curve", 1, 500, 2_000_000, 0.45),
        ];
        let refs: Vec<&Dep> = runs.iter().collect();
        let l = lines(&refs);
        assert_eq!(l.len(), 1);
        let tokens: Vec<u64> = l[0].points.iter().map(|p| p.tokens).collect();
        assert_eq!(tokens, [0, 2_000_000, 4_000_000]);
        assert!((l[0].points[2].test.mean - 51.0).abs() < 1e-9);
        assert_eq!(l[0].points[1].test.n, 1);
    }

    #[test]
    fn the_fit_extrapolates_to_the_baseline_and_says_so() {
        // 45 % at 2M tokens, 50 % at 4M: +5 points per doubling; 55 % at 8M.
        let (a, b) = log_fit(&[(0.0, 40.0), (2e6, 45.0), (4e6, 50.0)]).unwrap();
        assert!((b * std::f64::consts::LN_2 - 5.0).abs() < 1e-9);
        assert!(((55.0 - a) / b).exp() / 8e6 - 1.0 < 1e-9);
        let runs = [
            run("ft", 1, 0, 0, 0.40),
            run("ft", 1, 500, 2_000_000, 0.45),
            run("ft", 1, 1000, 4_000_000, 0.50),
        ];
        let refs: Vec<&Dep> = runs.iter().collect();
        let line = &lines(&refs)[0];
        let s = trend_sentence(line, Some(&(55.0, "ngram_lr".into())));
        assert!(s.contains("+5.00 points per doubling"), "{s}");
        assert!(s.contains("about 8.0M tokens, 2× this run's"), "{s}");
        assert!(s.contains("no sd to compare with"), "{s}");
        assert!(
            s.contains(": The most pretrained") && s.contains(". Fitted on"),
            "{s}"
        );
        let s = trend_sentence(line, Some(&(48.0, "ngram_lr".into())));
        assert!(s.contains("already above the best baseline"), "{s}");
        // A crossing a million times the budget away is not quoted as a number.
        let s = trend_sentence(line, Some(&(150.0, "ngram_lr".into())));
        assert!(s.contains("more than 1000× this run's budget away"), "{s}");
        // Seeds on both sides: the difference is weighed against twice the larger sd.
        let runs = [
            run("ft", 1, 0, 0, 0.40),
            run("ft", 2, 0, 0, 0.41),
            run("ft", 1, 1000, 4_000_000, 0.45),
            run("ft", 2, 1000, 4_000_000, 0.47),
        ];
        let refs: Vec<&Dep> = runs.iter().collect();
        let s = trend_sentence(&lines(&refs)[0], None);
        assert!(
            s.contains("+5.50 points from random init: more than twice the larger seed sd (2.83)"),
            "{s}"
        );
        assert!(s.contains("Fewer than two pretrained budgets"), "{s}");
    }

    #[test]
    fn the_figure_says_what_its_lines_are() {
        let runs = [run("ft", 1, 0, 0, 0.40), run("ft", 1, 500, 2_000_000, 0.45)];
        let refs: Vec<&Dep> = runs.iter().collect();
        let (_, _, fig) = curve("chnsenticorp", "ChnSentiCorp", &refs, &[]).unwrap();
        assert_eq!(fig.file, "plots/chnsenticorp_curve.svg");
        assert_eq!(fig.caption.as_deref(), Some(CURVE_CAPTION));
        assert!(!CURVE_CAPTION.contains("training batches"));
        // One protocol: the legend names the backbone only.
        assert_eq!(fig.series[0].label, "pretrain@share_type=all");
        assert_eq!(
            short_data("afqmc/train.tsv + lcqmc/dev.tsv"),
            "afqmc/train.tsv + 1 more"
        );
    }

    #[test]
    fn no_curve_without_two_budgets() {
        let runs = [run("ft", 1, 1000, 4_000_000, 0.5)];
        let refs: Vec<&Dep> = runs.iter().collect();
        assert!(curve("xnli", "XNLI", &refs, &[]).is_none());
    }
}
