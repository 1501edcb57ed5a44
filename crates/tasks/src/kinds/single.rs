//! Single-text classification (ChnSentiCorp, SMP2020-EWECT, any `label \t text` file):
//! `[CLS] text [SEP]` with token types 0, `AlbertForSequenceClassification` as for pairs.
//! `predictions.tsv` keeps the pair columns, `text_b` empty, so one reader serves both.

use crate::{SingleExample, TaskKind};

use super::{Head, InputSpec, Kind, Limits, Run, Scores, classify};
use crate::kinds::encode::Encoder;
use crate::kinds::features::EncodedSplit;
use crate::kinds::io::{Input, InputError, Prediction, PredictionShape};

/// The single-text kind.
pub struct Singles;

impl Kind for Singles {
    const KIND: TaskKind = TaskKind::Single;
    type Example = SingleExample;
    type Features = ();
    type Output = Vec<f32>;
    type Prediction = Vec<f32>;

    fn head(&self, labels: &[String]) -> Head {
        Head::Classes(labels.len())
    }

    fn encode(&self, name: &str, examples: &[SingleExample], encoder: &Encoder) -> EncodedSplit {
        EncodedSplit::classes(
            name,
            examples
                .iter()
                .map(|e| vec![encoder.encode_single(&e.text)])
                .collect(),
            examples.iter().map(|e| e.label).collect(),
        )
    }

    fn decode(&self, _features: &(), outputs: Vec<Vec<f32>>) -> Vec<Vec<f32>> {
        classify::decode(outputs)
    }

    fn score(
        &self,
        split: &EncodedSplit,
        _features: &(),
        predictions: &[Vec<f32>],
        labels: &[String],
    ) -> anyhow::Result<Scores> {
        classify::score(split, predictions, labels)
    }

    fn prediction_header(&self, labels: &[String]) -> String {
        classify::header(labels)
    }

    fn prediction_rows(
        &self,
        name: &str,
        examples: &[SingleExample],
        predictions: &[Vec<f32>],
        labels: &[String],
        out: &mut String,
    ) {
        let rows = examples
            .iter()
            .map(|e| (e.line, e.text.clone(), String::new(), e.label));
        classify::rows(name, rows, predictions, labels, out);
    }

    fn input(&self) -> InputSpec {
        InputSpec {
            fields: &["text"],
            usage: "`text`",
            model: "a single-text classifier",
            predicts: PredictionShape::Class,
        }
    }

    fn input_cost(&self, input: &Input, limits: &Limits) -> Result<usize, InputError> {
        let n = limits.tokens(&input.text) + 2;
        limits.row("text", n, " with [CLS] and [SEP]")
    }

    fn predict_inputs(&self, inputs: Vec<Input>, run: &Run) -> anyhow::Result<Vec<Prediction>> {
        classify::predict(inputs, run)
    }
}
