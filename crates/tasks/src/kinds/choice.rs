//! Multiple choice: one `[CLS] prompt [SEP] choice [SEP]` row per choice,
//! `AlbertForMultipleChoice` scoring them against each other. In `predictions.tsv` the
//! choices are `text_b`, joined by ` | `.

use crate::{ChoiceExample, TaskKind};

use super::reading_choice::{choices_cost, choose, encode_questions};
use super::{Head, InputSpec, Kind, Limits, Run, Scores, classify};
use crate::kinds::encode::Encoder;
use crate::kinds::features::EncodedSplit;
use crate::kinds::io::{Input, InputError, Prediction, PredictionShape};

/// The multiple-choice kind.
pub struct Choices;

impl Kind for Choices {
    const KIND: TaskKind = TaskKind::Choice;
    type Example = ChoiceExample;
    type Features = ();
    type Output = Vec<f32>;
    type Prediction = Vec<f32>;

    fn head(&self, _labels: &[String]) -> Head {
        Head::Choice
    }

    fn encode(&self, name: &str, examples: &[ChoiceExample], encoder: &Encoder) -> EncodedSplit {
        EncodedSplit::classes(
            name,
            examples
                .iter()
                .map(|e| {
                    e.choices
                        .iter()
                        .map(|c| encoder.encode(&e.prompt, c))
                        .collect()
                })
                .collect(),
            examples.iter().map(|e| e.answer).collect(),
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
        examples: &[ChoiceExample],
        predictions: &[Vec<f32>],
        labels: &[String],
        out: &mut String,
    ) {
        let rows = examples
            .iter()
            .map(|e| (e.line, e.prompt.clone(), e.choices.join(" | "), e.answer));
        classify::rows(name, rows, predictions, labels, out);
    }

    fn input(&self) -> InputSpec {
        InputSpec {
            fields: &["question", "choices"],
            usage: "`question` and `choices` (2 to 4)",
            model: "a multiple-choice model",
            predicts: PredictionShape::Choice,
        }
    }

    fn input_cost(&self, input: &Input, limits: &Limits) -> Result<usize, InputError> {
        choices_cost(input, limits)
    }

    /// Decoded as a C3 model's questions are, but with `[CLS] prompt [SEP] choice [SEP]` rows
    /// of the real choices only, as a `choice` model was trained.
    fn predict_inputs(&self, inputs: Vec<Input>, run: &Run) -> anyhow::Result<Vec<Prediction>> {
        choose(inputs, run, |questions, encoder| {
            let mut split = encode_questions("predict", questions, encoder);
            split.rows = questions
                .iter()
                .map(|q| {
                    let real = &q.choices[..q.real_choices];
                    real.iter()
                        .map(|c| encoder.encode(&q.question, c))
                        .collect()
                })
                .collect();
            split
        })
    }

    fn recognises(&self, architecture: &str, _named: Option<TaskKind>) -> bool {
        architecture == "AlbertForMultipleChoice"
    }
}
