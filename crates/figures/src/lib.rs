//! SVG figures of the pipeline's runs: a [`Figure`] is a title, two axis names and its
//! [`Series`] (lines of `(x, y)` points), and [`Figure::svg`] draws it. The report stage draws
//! its standard figures with it ([`pretraining`]: loss, MLM and SOP accuracy against steps for
//! every pretrain instance, training lines thin, evaluations with markers, the MLM accuracy
//! with its no-context floor; [`finetune`]: each fine-tuning task's dev accuracy per epoch;
//! its own test-accuracy curves), and `pipeline plot` overlays one metric of several
//! instances, so that both look alike.
//!
//! The drawing is plotters' SVG backend with its built-in text metrics, so the bytes depend
//! only on the data: no SVG is written by hand here. Only the legend is laid out here (and
//! drawn with plotters' text and path elements), because plotters' own series legend sits
//! inside the plotting area, over the curves. It goes in a strip under the chart, where it
//! hides no curve: two columns when every label fits half the width, else one, and a label
//! too long for the whole width is cut with `…` (the full names are in the tables beside each
//! figure). What thin and marked lines mean is the figure's own `caption`, since it differs
//! between figures.

#![warn(missing_docs)]

use pipeline_engine::error::printable;
use plotters::coord::Shift;
use plotters::prelude::*;

mod floor;
mod runs;

pub use runs::{Run, finetune, pretraining};

const WIDTH: u32 = 760;
/// Height of the chart itself (axes, labels, curves); the legend strip is added under it.
const CHART_H: u32 = 376;

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
    /// The legend's text (the report uses the instance name); series that share a colour
    /// share one legend entry, the first one's label.
    pub label: String,
    /// `(x, y)` in the axes' units, in x order (the line joins them as given); an empty
    /// series draws nothing.
    pub points: Vec<(f64, f64)>,
    /// Evaluations: drawn with markers and a thicker line.
    pub marked: bool,
    /// The colour's index into an 8-colour Okabe–Ito palette (taken modulo 8): one per
    /// instance, so an instance's training and evaluation lines match.
    pub colour: usize,
}

/// A figure: title, axis names, its series.
#[derive(Debug, Clone)]
pub struct Figure {
    /// Where the SVG goes, relative to the report's folder (`plots/pretrain_loss.svg`).
    pub file: String,
    /// The heading drawn above the chart.
    pub title: String,
    /// The x axis's label (`step`, `epoch`, `pretraining tokens seen (millions; …)`).
    pub x_desc: String,
    /// The y axis's label (`loss`, `MLM accuracy`, `dev accuracy (model-selection split)`).
    pub y_desc: String,
    /// The lines, drawn in order (later ones on top).
    pub series: Vec<Series>,
    /// Accuracies: y within [0, 1], rounded out to tenths.
    pub unit_range: bool,
    /// The x axis starts at 0 (steps), else at the first point (epochs).
    pub x_from_zero: bool,
    /// A line above the legend saying what the line styles mean, when the figure has both.
    pub caption: Option<String>,
}

/// The caption of figures whose thin lines are training batches and marked lines evaluations.
pub const TRAINING_CAPTION: &str =
    "thin line: training batches · line with markers: held-out evaluations";

/// Legend text size, and where its entries start.
const LEGEND_FONT: f64 = 13.0;
const LEGEND_X: i32 = 70;
/// The line sample and the gap before the label.
const SAMPLE: i32 = 26;
const ROW_H: i32 = 18;

/// Estimated width in pixels of `text` at `size`: wide (CJK) characters an em, others 0.6 em.
/// A fixed rule, not the viewer's font: the SVG is laid out the same everywhere.
fn text_width(text: &str, size: f64) -> f64 {
    text.chars()
        .map(|c| if (c as u32) < 0x1100 { 0.6 } else { 1.0 })
        .sum::<f64>()
        * size
}

/// `text`, cut with `…` to fit `width` pixels.
fn fit(text: &str, width: f64, size: f64) -> String {
    if text_width(text, size) <= width {
        return text.to_string();
    }
    let mut out = String::new();
    for c in text.chars() {
        if text_width(&format!("{out}{c}…"), size) > width {
            break;
        }
        out.push(c);
    }
    format!("{}…", out.trim_end())
}

/// Where each legend entry goes: `(column x, row)` and its (fitted) label; the number of rows.
fn legend_layout(labels: &[String]) -> (Vec<(i32, i32, String)>, i32) {
    let full = (WIDTH as i32 - LEGEND_X - SAMPLE - 12) as f64;
    let column = (WIDTH as i32 - LEGEND_X) / 2;
    let half = (column - SAMPLE - 12) as f64;
    let two_columns = labels.iter().all(|l| text_width(l, LEGEND_FONT) <= half);
    let mut out = Vec::new();
    for (i, label) in labels.iter().enumerate() {
        let i = i as i32;
        if two_columns {
            out.push((LEGEND_X + column * (i % 2), i / 2, label.clone()));
        } else {
            out.push((LEGEND_X, i, fit(label, full, LEGEND_FONT)));
        }
    }
    let rows = out.iter().map(|e| e.1 + 1).max().unwrap_or(0);
    (out, rows)
}

/// plotters failed to draw a figure (into a string, so never for want of a file).
#[derive(Debug, thiserror::Error)]
#[error("drawing a plot: {0}")]
pub struct DrawError(String);

fn err<E: std::fmt::Debug>(e: E) -> DrawError {
    DrawError(format!("{e:?}"))
}

impl Figure {
    /// No series has a point: there is nothing to draw, and the report leaves the figure out.
    pub fn is_empty(&self) -> bool {
        self.series.iter().all(|s| s.points.is_empty())
    }

    /// The SVG text. Every text it holds comes through [`Figure::xml_safe`] first: plotters
    /// escapes `<`, `&` and quotes, but writes a control character as it is, and XML 1.0
    /// allows none but tab, newline and carriage return (a series named by an instance with an
    /// ESC in it made an SVG that no viewer opens).
    pub fn svg(&self) -> Result<String, DrawError> {
        let safe = self.xml_safe();
        let mut out = String::new();
        {
            let size = (WIDTH, CHART_H + safe.legend_height());
            let root = SVGBackend::with_string(&mut out, size).into_drawing_area();
            safe.draw(&root)?;
            root.present().map_err(err)?;
        }
        Ok(out)
    }

    /// The figure with its texts (title, axis names, caption, labels) escaped as the terminal
    /// output escapes them (`pipeline_engine::error::printable::line`: ESC as `\u{1b}`),
    /// which leaves no character XML forbids.
    fn xml_safe(&self) -> Figure {
        let line = |s: &str| printable::line(s).into_owned();
        Figure {
            file: self.file.clone(),
            title: line(&self.title),
            x_desc: line(&self.x_desc),
            y_desc: line(&self.y_desc),
            series: self
                .series
                .iter()
                .map(|s| Series {
                    label: line(&s.label),
                    ..s.clone()
                })
                .collect(),
            caption: self.caption.as_deref().map(line),
            ..*self
        }
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

    /// The caption, where the figure has both marked and unmarked series for it to explain.
    fn shown_caption(&self) -> Option<&String> {
        self.caption.as_ref().filter(|_| {
            self.series.iter().any(|s| s.marked) && self.series.iter().any(|s| !s.marked)
        })
    }

    /// Height of the strip under the chart that holds the caption and the legend.
    fn legend_height(&self) -> u32 {
        let labels: Vec<String> = self.legend_entries().into_iter().map(|(l, _)| l).collect();
        let rows = legend_layout(&labels).1 + i32::from(self.shown_caption().is_some());
        10 + ROW_H as u32 * rows as u32
    }

    fn draw(&self, root: &DrawingArea<SVGBackend<'_>, Shift>) -> Result<(), DrawError> {
        root.fill(&WHITE).map_err(err)?;
        // The legend goes in a strip under the chart, where it hides no curve; the figure grows
        // by its height (a fixed height overflowed with the 16 instances of a six-task report).
        let (upper, lower) = root.split_vertically(CHART_H);
        self.draw_chart(&upper)?;
        self.draw_legend(&lower)
    }

    /// The axes' ranges: the points' extent, padded; whole epochs get room for their markers,
    /// a curve against tokens starts at 0, accuracies round out to tenths.
    fn ranges(&self) -> (f64, f64, f64, f64) {
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
        if !self.x_from_zero {
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
        (x0, x1, y0, y1)
    }

    /// The chart: title, axes, mesh and one line per series (marked series bold with points).
    fn draw_chart(&self, upper: &DrawingArea<SVGBackend<'_>, Shift>) -> Result<(), DrawError> {
        let (x0, x1, y0, y1) = self.ranges();
        let epochs = !self.x_from_zero;
        let mut chart = ChartBuilder::on(upper)
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
        Ok(())
    }

    /// The strip under the chart: the caption (if any) on its first row, then the legend's
    /// entries as `legend_layout` places them.
    fn draw_legend(&self, lower: &DrawingArea<SVGBackend<'_>, Shift>) -> Result<(), DrawError> {
        let entries = self.legend_entries();
        let labels: Vec<String> = entries.iter().map(|(l, _)| l.clone()).collect();
        let (layout, _) = legend_layout(&labels);
        let font = ("sans-serif", LEGEND_FONT).into_font();
        let mut first_row = 0i32;
        if let Some(caption) = self.shown_caption() {
            let width = (WIDTH as i32 - LEGEND_X - 12) as f64;
            lower
                .draw(&Text::new(
                    fit(caption, width, LEGEND_FONT),
                    (LEGEND_X, 4),
                    font.clone().color(&RGBColor(90, 90, 90)),
                ))
                .map_err(err)?;
            first_row = 1;
        }
        for ((x, row, label), (_, colour)) in layout.into_iter().zip(&entries) {
            let colour = COLOURS[colour % COLOURS.len()];
            let y = 4 + ROW_H * (first_row + row);
            lower
                .draw(&PathElement::new(
                    vec![(x, y + 7), (x + 20, y + 7)],
                    colour.stroke_width(3),
                ))
                .map_err(err)?;
            lower
                .draw(&Text::new(label, (x + SAMPLE, y), font.clone()))
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

#[cfg(test)]
mod tests;
