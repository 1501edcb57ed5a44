//! Sentence-pair regression (STS-B style: `sts_b`, `pair_regression`), the whole kind in one
//! module: its format, its example and the reader of its files, and how it is fine-tuned and
//! served.
//!
//! - **Format**: `text_a \t text_b \t score`, no header, exactly 3 columns, the score a finite
//!   number (STS-B's 0–5). The file says everything, so the format is its name alone; a task
//!   map may give nothing but `name`.
//! - **Reading**: a row is bad when it has another column count (`column_count`), an empty
//!   text (`empty_text`), a score that is not a finite number (`bad_score`), or is not valid
//!   UTF-8; bad rows are counted as every reader counts them and the caller's
//!   `max_bad_fraction` decides.
//! - **Fine-tuning**: `[CLS] a [SEP] b [SEP]`, `AlbertForSequenceClassification` with one
//!   output trained on the mean squared error (the head transformers trains STS-B with,
//!   `problem_type: regression`); the prediction is that output, the score; the metrics are
//!   Pearson's r (the one the best epoch is chosen by and the report's headline) and
//!   Spearman's ρ, with the MSE.
//! - **Serving**: a request is a pair (`text_a`, `text_b`) whose row fits the model; its
//!   prediction is the score.

use std::fmt::Write as _;
use std::io::BufRead;
use std::path::Path;

use serde::Serialize;
use serde_json::{Map, Value};

use super::pair::{pair_input, row_cost};
use super::{Head, InputSpec, Kind, Limits, Run, Scores, clean_tsv};
use crate::TaskKind;
use crate::correlation::RegressionMetrics;
use crate::error::TaskError;
use crate::kinds::encode::Encoder;
use crate::kinds::features::{EncodeNotes, EncodedSplit, Targets};
use crate::kinds::io::{Input, InputError, Prediction, PredictionShape, ScorePrediction};
use crate::params::check_keys;
use crate::protocol::SplitExample;
use crate::read::{BadReason, FileReport, Lines, Parsed, collect, open, quote};

/// The built-in names of the kind: `sts_b` (STS-B and its Chinese translations) and the
/// generic `pair_regression`, the same format.
pub const REGRESSION_NAMES: [&str; 2] = ["sts_b", "pair_regression"];

/// A scored sentence-pair format.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ScoredPairFormat {
    /// `sts_b` or `pair_regression`.
    pub name: String,
}

impl ScoredPairFormat {
    /// The format `name` if it is one of [`REGRESSION_NAMES`].
    pub(crate) fn named(name: &str) -> Option<ScoredPairFormat> {
        REGRESSION_NAMES.contains(&name).then(|| ScoredPairFormat {
            name: name.to_string(),
        })
    }

    /// A task map of this format may hold only `name`: columns, header and labels are fixed.
    pub(crate) fn apply(&self, map: &Map<String, Value>, at: &str) -> Result<(), TaskError> {
        check_keys(map, &["name"], at)
    }
}

/// A sentence pair with a gold similarity score.
#[derive(Debug, Clone, PartialEq)]
pub struct ScoredPairExample {
    /// The first text, trimmed, never empty.
    pub text_a: String,
    /// The second text, trimmed, never empty.
    pub text_b: String,
    /// The gold score, finite.
    pub score: f32,
    /// Which file of the split it came from (index into the protocol's files).
    pub file: usize,
    /// Its 1-based line in that file.
    pub line: usize,
}

/// A scored pair has no classes; its stratum is its score's band, the integer part (STS-B's
/// 0–5 bands, so that a held-out set spans the scores train does; a negative score in band 0,
/// strata being indices).
impl SplitExample for ScoredPairExample {
    fn push_labels(&self, _out: &mut Vec<usize>) {}

    fn stratum(&self) -> usize {
        self.score.max(0.0).floor() as usize
    }

    fn texts_key(&self) -> String {
        format!("{}\t{}", self.text_a, self.text_b)
    }

    fn corpus_texts(_examples: &[Self]) -> Option<Vec<Vec<String>>> {
        // The clean stage takes the classification and reading kinds' texts; scored pairs are
        // not among them (as before this kind existed), so asking is an error there.
        None
    }
}

/// A scored-pair file's examples and report.
#[derive(Debug, Clone)]
pub struct ScoredPairFile {
    /// The valid rows, in file order.
    pub examples: Vec<ScoredPairExample>,
    /// What reading found: rows, bad rows (no classes: `label_counts` is empty).
    pub report: FileReport,
}

/// Reads a scored-pair TSV file; `name` is the path as the params give it, `format` the
/// task's name (`sts_b`, `pair_regression`).
pub fn read_scored_pair_file(
    path: &Path,
    name: &str,
    format: &str,
) -> Result<ScoredPairFile, TaskError> {
    read_scored_pairs(open(path, name)?, name, format)
}

/// [`read_scored_pair_file`] from any reader.
pub fn read_scored_pairs(
    input: impl BufRead,
    name: &str,
    format: &str,
) -> Result<ScoredPairFile, TaskError> {
    let mut report = FileReport::new(name, format, 0);
    let mut lines = Lines::new(input, name);
    let examples = collect(&mut lines, &mut report, |line, _row, text| {
        Ok(parse_row(line, text))
    })?;
    if examples.is_empty() {
        return Err(report.no_examples());
    }
    Ok(ScoredPairFile { examples, report })
}

/// One data row: three cells, two non-empty texts and a finite score.
fn parse_row(line: usize, text: &str) -> Parsed<ScoredPairExample> {
    let cells: Vec<&str> = text.split('\t').map(str::trim).collect();
    let [a, b, score] = cells[..] else {
        let detail = format!("{} columns, expected 3: {}", cells.len(), quote(text));
        return Parsed::Bad(BadReason::ColumnCount, detail);
    };
    if let Some(which) = [("text_a", a), ("text_b", b)]
        .iter()
        .find_map(|(k, t)| t.is_empty().then_some(*k))
    {
        return Parsed::Bad(BadReason::EmptyText, format!("{which} is empty"));
    }
    match score.parse::<f32>() {
        Ok(s) if s.is_finite() => Parsed::Example(ScoredPairExample {
            text_a: a.to_string(),
            text_b: b.to_string(),
            score: s,
            file: 0,
            line,
        }),
        _ => Parsed::Bad(
            BadReason::BadScore,
            format!("score {} is not a finite number", quote(score)),
        ),
    }
}

/// The sentence-pair regression kind.
pub struct PairRegressions;

impl Kind for PairRegressions {
    const KIND: TaskKind = TaskKind::PairRegression;
    type Example = ScoredPairExample;
    type Features = ();
    type Output = Vec<f32>;
    type Prediction = f32;

    fn head(&self, _labels: &[String]) -> Head {
        Head::Score
    }

    fn encode(
        &self,
        name: &str,
        examples: &[ScoredPairExample],
        encoder: &Encoder,
    ) -> EncodedSplit {
        EncodedSplit {
            name: name.into(),
            examples: examples.len(),
            rows: examples
                .iter()
                .map(|e| vec![encoder.encode(&e.text_a, &e.text_b)])
                .collect(),
            targets: Targets::Scores(examples.iter().map(|e| e.score).collect()),
            decoding: Box::new(()),
            notes: EncodeNotes::default(),
        }
    }

    fn decode(&self, _features: &(), outputs: Vec<Vec<f32>>) -> Vec<f32> {
        // One output per row; a row without one (never from the one-output head) is NaN, which
        // the metrics then show rather than hide.
        outputs
            .into_iter()
            .map(|o| o.first().copied().unwrap_or(f32::NAN))
            .collect()
    }

    fn score(
        &self,
        split: &EncodedSplit,
        _features: &(),
        predictions: &[f32],
        _labels: &[String],
    ) -> anyhow::Result<Scores> {
        let gold: Vec<f64> = split
            .targets
            .scores(&split.name)?
            .iter()
            .map(|&s| f64::from(s))
            .collect();
        let predicted: Vec<f64> = predictions.iter().map(|&p| f64::from(p)).collect();
        Ok(Scores::regression(RegressionMetrics::of(&gold, &predicted)))
    }

    fn prediction_header(&self, _labels: &[String]) -> String {
        "set\tline\ttext_a\ttext_b\tgold\tpredicted".into()
    }

    fn prediction_rows(
        &self,
        name: &str,
        examples: &[ScoredPairExample],
        predictions: &[f32],
        _labels: &[String],
        out: &mut String,
    ) {
        for (e, p) in examples.iter().zip(predictions) {
            let _ = writeln!(
                out,
                "{name}\t{}\t{}\t{}\t{}\t{p:.6}",
                e.line,
                clean_tsv(&e.text_a),
                clean_tsv(&e.text_b),
                e.score
            );
        }
    }

    fn input(&self) -> InputSpec {
        pair_input("a sentence-pair regressor", PredictionShape::Score)
    }

    fn input_cost(&self, input: &Input, limits: &Limits) -> Result<usize, InputError> {
        row_cost(input, limits)
    }

    /// Each pair's score, encoded and decoded as the stage's evaluation does (the gold, unknown
    /// here, NaN).
    fn predict_inputs(&self, inputs: Vec<Input>, run: &Run) -> anyhow::Result<Vec<Prediction>> {
        let pairs: Vec<ScoredPairExample> = inputs
            .into_iter()
            .enumerate()
            .map(|(i, x)| ScoredPairExample {
                text_a: x.text_a.unwrap_or_default(),
                text_b: x.text_b.unwrap_or_default(),
                score: f32::NAN,
                file: 0,
                line: i + 1,
            })
            .collect();
        let split = self.encode("predict", &pairs, run.model.encoder());
        let scores = run.predict(self, &split, run.batch_size)?;
        Ok(pairs
            .into_iter()
            .zip(scores)
            .map(|(p, score)| {
                Prediction::Score(ScorePrediction {
                    text_a: p.text_a,
                    text_b: p.text_b,
                    score,
                })
            })
            .collect())
    }
}

#[cfg(test)]
mod format_tests {
    use std::fmt::Write as _;

    use serde_json::json;

    use crate::{Examples, ProtocolSpec, ScoredPairExample, Task, TaskKind};

    #[test]
    fn both_names_are_the_regression_kind_and_take_only_a_name() {
        for name in super::REGRESSION_NAMES {
            let t = Task::from_value(&json!(name), "task").unwrap();
            assert_eq!(t.kind(), TaskKind::PairRegression);
            assert_eq!(t.name(), name);
            assert_eq!(t.labels(), None);
            assert_eq!(Task::kind_of_name(name), Some(TaskKind::PairRegression));
        }
        let e = Task::from_value(&json!({"name": "sts_b", "labels": [0, 1]}), "task");
        assert!(e.unwrap_err().to_string().contains("labels"));
        assert_eq!(TaskKind::PairRegression.name(), "pair_regression");
    }

    #[test]
    fn a_protocol_reads_scored_pairs_and_holds_out_dev() {
        let d = tempfile::tempdir().unwrap();
        let mut train = String::new();
        for i in 0..40 {
            writeln!(train, "句子甲{i}\t句子乙{i}\t{}", (i % 6) as f32 * 0.9).unwrap();
        }
        train.push_str("坏行\t没有分数\n");
        std::fs::write(d.path().join("train.tsv"), &train).unwrap();
        std::fs::write(d.path().join("test.tsv"), "猫在睡觉\t猫睡着了\t4.8\n").unwrap();
        let spec = ProtocolSpec::from_params(
            json!({"task": "sts_b", "train": "train.tsv", "dev_fraction": 0.25,
                   "test": "test.tsv", "max_bad_fraction": 0.1})
            .as_object()
            .unwrap(),
        )
        .unwrap();
        let p = spec.load(d.path()).unwrap();
        assert_eq!(p.train.len() + p.dev.len(), 40);
        assert_eq!(p.dev.len(), 10);
        assert_eq!(p.bad_rows(), 1);
        assert!(p.labels.is_empty());
        let test: &[ScoredPairExample] = p.eval[0].examples.of().unwrap();
        assert_eq!(test[0].score, 4.8);
        assert_eq!(p.eval[0].examples.kind(), TaskKind::PairRegression);
        assert!(matches!(p.dev.examples, Examples::PairRegression(_)));
        assert_eq!(p.summary().kind, TaskKind::PairRegression);
    }
}

#[cfg(test)]
mod reader_tests {
    use super::*;

    fn read(text: &str) -> Result<ScoredPairFile, TaskError> {
        read_scored_pairs(text.as_bytes(), "t.tsv", "sts_b")
    }

    #[test]
    fn reads_texts_scores_and_lines() {
        let f = read("我喜欢猫\t我爱猫\t4.5\n\n今天下雨\t股票涨了\t0\n").unwrap();
        assert_eq!(f.examples.len(), 2);
        assert_eq!(f.examples[0].text_a, "我喜欢猫");
        assert_eq!(f.examples[0].score, 4.5);
        assert_eq!(f.examples[1].line, 3);
        assert_eq!(f.examples[1].score, 0.0);
        assert_eq!(f.report.blank_lines, 1);
        assert_eq!(f.report.bad.total, 0);
    }

    #[test]
    fn bad_rows_are_counted_by_reason() {
        let f =
            read("甲\t乙\t3.2\n甲\t乙\n甲\t\t1\n甲\t乙\thigh\n甲\t乙\tNaN\n甲\t乙\tinf\n").unwrap();
        assert_eq!(f.examples.len(), 1);
        assert_eq!(f.report.rows, 6);
        assert_eq!(f.report.bad.total, 5);
        let by = &f.report.bad.by_reason;
        assert_eq!(by[&BadReason::ColumnCount], 1);
        assert_eq!(by[&BadReason::EmptyText], 1);
        assert_eq!(by[&BadReason::BadScore], 3);
        assert_eq!(f.report.bad.samples[0].line, 2);
    }

    #[test]
    fn a_file_without_examples_is_an_error() {
        assert!(read("甲\t乙\tx\n").is_err());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(gold: Vec<f32>) -> EncodedSplit {
        EncodedSplit {
            name: "dev".into(),
            examples: gold.len(),
            rows: vec![Vec::new(); gold.len()],
            targets: Targets::Scores(gold),
            decoding: Box::new(()),
            notes: EncodeNotes::default(),
        }
    }

    #[test]
    fn scores_are_the_correlations_and_pearson_selects() {
        let s = PairRegressions
            .score(&split(vec![0.0, 2.5, 5.0]), &(), &[1.0, 2.0, 3.0], &[])
            .unwrap();
        let r = s.regression.clone().unwrap();
        assert!((r.pearson.unwrap() - 1.0).abs() < 1e-9);
        assert!((r.spearman.unwrap() - 1.0).abs() < 1e-9);
        assert!((r.mse - (1.0 + 0.25 + 4.0) / 3.0).abs() < 1e-9);
        assert!((s.selection() - 1.0).abs() < 1e-9);
        let json = s.to_json();
        assert_eq!(json["examples"], 3);
        assert!(json["pearson"].is_number() && json["spearman"].is_number());
        assert!(s.summary().starts_with("Pearson 1.0000"));
    }

    #[test]
    fn constant_predictions_have_no_correlation_and_rank_last() {
        let s = PairRegressions
            .score(&split(vec![0.0, 5.0]), &(), &[2.0, 2.0], &[])
            .unwrap();
        assert_eq!(s.to_json()["pearson"], serde_json::Value::Null);
        assert_eq!(s.selection(), -1.0);
    }

    #[test]
    fn classes_are_not_scores() {
        let s = EncodedSplit::classes("dev", vec![Vec::new()], vec![1]);
        assert!(PairRegressions.score(&s, &(), &[1.0], &[]).is_err());
    }

    #[test]
    fn decode_takes_the_one_output_and_rows_show_gold_and_score() {
        let p = PairRegressions.decode(&(), vec![vec![3.25], vec![-0.5]]);
        assert_eq!(p, vec![3.25, -0.5]);
        let ex = ScoredPairExample {
            text_a: "我\t们".into(),
            text_b: "你们".into(),
            score: 4.5,
            file: 0,
            line: 7,
        };
        let mut out = String::new();
        PairRegressions.prediction_rows("test", &[ex], &[3.25], &[], &mut out);
        assert_eq!(out, "test\t7\t我 们\t你们\t4.5\t3.250000\n");
    }
}
