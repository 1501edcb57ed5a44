//! Sentence-pair regression (STS-B style: `sts_b`, `pair_regression`): `[CLS] a [SEP] b [SEP]`,
//! `AlbertForSequenceClassification` with one output trained on the mean squared error (the
//! head transformers trains STS-B with, `problem_type: regression`); the prediction is that
//! output, the score; the metrics are Pearson's r (the one the best epoch is chosen by and the
//! report's headline) and Spearman's ρ, with the MSE.

use std::fmt::Write as _;

use pipeline_tasks::correlation::RegressionMetrics;
use pipeline_tasks::{ScoredPairExample, TaskKind};

use super::pair::{pair_input, row_cost};
use super::{Head, InputSpec, Kind, Limits, Run, Scores, clean_tsv};
use crate::api::{Input, InputError, Prediction, PredictionShape, ScorePrediction};
use crate::data::{EncodeNotes, EncodedSplit, Targets};
use crate::encode::Encoder;

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
        let split = self.encode("predict", &pairs, &run.model.encoder);
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
