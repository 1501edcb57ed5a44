//! The figures, as SVG (plotters' SVG backend with its built-in text metrics, so the bytes
//! depend only on the data): pretraining loss, MLM accuracy and SOP accuracy against steps for
//! every pretrain instance (training lines thin, evaluations with markers), and each
//! fine-tuning task's dev accuracy per epoch.

use plotters::coord::Shift;
use plotters::prelude::*;
use serde_json::Value;

use crate::deps::Dep;

const WIDTH: u32 = 760;
const HEIGHT: u32 = 440;

/// Colour-blind-safe colours (Okabe–Ito), one per series, in instance order.
const COLOURS: [RGBColor; 8] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
    RGBColor(230, 159, 0),
    RGBColor(0, 0, 0),
    RGBColor(240, 228, 66),
];

/// One line of a figure.
#[derive(Debug, Clone)]
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
    /// Evaluations: drawn with markers and a thicker line.
    pub marked: bool,
    /// The colour's index.
    pub colour: usize,
}

/// A figure: title, axis names, its series.
#[derive(Debug, Clone)]
pub struct Figure {
    pub file: String,
    pub title: String,
    pub x_desc: String,
    pub y_desc: String,
    pub series: Vec<Series>,
    /// Accuracies: y within [0, 1], rounded out to tenths.
    pub unit_range: bool,
    /// The x axis starts at 0 (steps), else at the first point (epochs).
    pub x_from_zero: bool,
}

fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow::anyhow!("drawing a plot: {e:?}")
}

impl Figure {
    pub fn is_empty(&self) -> bool {
        self.series.iter().all(|s| s.points.is_empty())
    }

    /// The SVG text.
    pub fn svg(&self) -> anyhow::Result<String> {
        let mut out = String::new();
        {
            let root = SVGBackend::with_string(&mut out, (WIDTH, HEIGHT)).into_drawing_area();
            self.draw(&root)?;
            root.present().map_err(err)?;
        }
        Ok(out)
    }

    /// The legend entries: one per colour (an instance), in order.
    fn legend_entries(&self) -> Vec<(String, usize)> {
        let mut out: Vec<(String, usize)> = Vec::new();
        for s in &self.series {
            if !out.iter().any(|(_, c)| *c == s.colour) {
                out.push((s.label.clone(), s.colour));
            }
        }
        out
    }

    fn draw(&self, root: &DrawingArea<SVGBackend<'_>, Shift>) -> anyhow::Result<()> {
        root.fill(&WHITE).map_err(err)?;
        // The legend goes in a strip under the chart, where it hides no curve.
        let entries = self.legend_entries();
        let both_kinds =
            self.series.iter().any(|s| s.marked) && self.series.iter().any(|s| !s.marked);
        let legend_rows = entries.len().div_ceil(2) + usize::from(both_kinds);
        let legend_h = 10 + 18 * legend_rows as u32;
        let (upper, lower) = root.split_vertically(HEIGHT - legend_h);

        let points = self.series.iter().flat_map(|s| s.points.iter());
        let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
        for &(x, y) in points {
            x0 = x0.min(x);
            x1 = x1.max(x);
            y0 = y0.min(y);
            y1 = y1.max(y);
        }
        if x0 > x1 {
            (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
        }
        if x1 - x0 < 1e-9 {
            x1 = x0 + 1.0;
        }
        let epochs = !self.x_from_zero;
        if epochs {
            // Whole epochs: a little room so that the first and last markers show whole.
            x0 -= 0.1;
            x1 += 0.1;
        } else {
            x0 = x0.min(0.0);
        }
        if self.unit_range {
            y0 = ((y0 - 0.02) * 10.0).floor().clamp(0.0, 9.0) / 10.0;
            y1 = ((y1 + 0.02) * 10.0).ceil().clamp(1.0, 10.0) / 10.0;
        } else {
            let pad = ((y1 - y0) * 0.05).max(1e-3);
            y0 = (y0 - pad).max(0.0);
            y1 += pad;
        }
        let mut chart = ChartBuilder::on(&upper)
            .caption(&self.title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(56)
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(err)?;
        let x_labels = if epochs {
            ((x1 - x0).round() as usize + 1).clamp(2, 12)
        } else {
            10
        };
        chart
            .configure_mesh()
            .x_desc(&self.x_desc)
            .y_desc(&self.y_desc)
            .light_line_style(RGBColor(240, 240, 240))
            .max_light_lines(2)
            .x_labels(x_labels)
            .x_label_formatter(&|x| format_tick(*x))
            .y_label_formatter(&|y| format_tick(*y))
            .draw()
            .map_err(err)?;
        for s in &self.series {
            if s.points.is_empty() {
                continue;
            }
            let colour = COLOURS[s.colour % COLOURS.len()];
            let style = if s.marked {
                colour.stroke_width(2)
            } else {
                colour.mix(0.55).stroke_width(1)
            };
            let line = LineSeries::new(s.points.iter().copied(), style);
            let line = if s.marked { line.point_size(3) } else { line };
            chart.draw_series(line).map_err(err)?;
        }

        let font = ("sans-serif", 13).into_font();
        let mut row = 0i32;
        if both_kinds {
            lower
                .draw(&Text::new(
                    "thin line: training batches · line with markers: held-out evaluations",
                    (70, 4),
                    font.clone().color(&RGBColor(90, 90, 90)),
                ))
                .map_err(err)?;
            row = 1;
        }
        for (i, (label, colour)) in entries.iter().enumerate() {
            let colour = COLOURS[colour % COLOURS.len()];
            let x = 70 + 340 * (i % 2) as i32;
            let y = 4 + 18 * (row + (i / 2) as i32);
            lower
                .draw(&PathElement::new(
                    vec![(x, y + 7), (x + 20, y + 7)],
                    colour.stroke_width(3),
                ))
                .map_err(err)?;
            lower
                .draw(&Text::new(label.clone(), (x + 26, y), font.clone()))
                .map_err(err)?;
        }
        Ok(())
    }
}

/// `200`, `0.5`, `1.25`: no trailing zeros, integers without decimals.
fn format_tick(x: f64) -> String {
    if (x - x.round()).abs() < 1e-9 {
        format!("{}", x.round() as i64)
    } else {
        let s = format!("{x:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
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
pub fn pretraining(deps: &[&Dep]) -> Vec<Figure> {
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
        let mut series = Vec::new();
        for (i, d) in deps.iter().enumerate() {
            let train: Vec<Value> = d
                .lines
                .iter()
                .filter(|l| l.get(train_key).is_some())
                .cloned()
                .collect();
            series.push(Series {
                label: d.instance.clone(),
                points: points(&train, train_key),
                marked: false,
                colour: i,
            });
            let eval = if eval_key == "eval_loss" {
                // The eval lines carry the two losses; their sum is comparable with `loss`.
                d.lines
                    .iter()
                    .filter_map(|l| {
                        Some((
                            l.get("step")?.as_f64()?,
                            l.get("eval_mlm_loss")?.as_f64()? + l.get("eval_sop_loss")?.as_f64()?,
                        ))
                    })
                    .collect()
            } else {
                points(&d.lines, eval_key)
            };
            series.push(Series {
                label: d.instance.clone(),
                points: eval,
                marked: true,
                colour: i,
            });
        }
        figures.push(Figure {
            file: format!("plots/{file}"),
            title: title.into(),
            x_desc: "step".into(),
            y_desc: y_desc.into(),
            series,
            unit_range: unit,
            x_from_zero: true,
        });
    }
    figures
}

/// Dev accuracy per epoch for the runs of one task.
pub fn finetune(task: &str, title: &str, deps: &[&Dep]) -> Figure {
    let series = deps
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let pts = d
                .metrics
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
                label: d.instance.clone(),
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figure() -> Figure {
        Figure {
            file: "plots/x.svg".into(),
            title: "A title".into(),
            x_desc: "step".into(),
            y_desc: "loss".into(),
            series: vec![
                Series {
                    label: "a".into(),
                    points: vec![(1.0, 9.5), (10.0, 7.25), (20.0, 6.0)],
                    marked: false,
                    colour: 0,
                },
                Series {
                    label: "a (eval)".into(),
                    points: vec![(10.0, 7.5), (20.0, 6.5)],
                    marked: true,
                    colour: 0,
                },
            ],
            unit_range: false,
            x_from_zero: true,
        }
    }

    #[test]
    fn svg_output_is_deterministic() {
        let a = figure().svg().unwrap();
        let b = figure().svg().unwrap();
        assert_eq!(a, b);
        assert!(a.starts_with("<svg"), "{}", &a[..60.min(a.len())]);
        assert!(a.contains("A title") && a.contains("held-out evaluations"));
        // No data still draws axes.
        let mut empty = figure();
        empty.series.clear();
        assert!(empty.is_empty());
        assert!(empty.svg().unwrap().contains("<svg"));
        assert_eq!(format_tick(200.0), "200");
        assert_eq!(format_tick(0.5), "0.5");
        assert_eq!(format_tick(0.30000000000000004), "0.3");
    }
}
