//! Sentence-pair classification (LCQMC, AFQMC, XNLI, …): `[CLS] a [SEP] b [SEP]`,
//! `AlbertForSequenceClassification`.

use crate::{PairExample, TaskKind};

use super::{Head, InputSpec, Kind, Limits, Run, Scores, classify};
use crate::kinds::encode::Encoder;
use crate::kinds::features::EncodedSplit;
use crate::kinds::io::{Input, InputError, Prediction, PredictionShape};

/// The pair kind.
pub struct Pairs;

impl Kind for Pairs {
    const KIND: TaskKind = TaskKind::Pair;
    type Example = PairExample;
    type Features = ();
    type Output = Vec<f32>;
    type Prediction = Vec<f32>;

    fn head(&self, labels: &[String]) -> Head {
        Head::Classes(labels.len())
    }

    fn encode(&self, name: &str, examples: &[PairExample], encoder: &Encoder) -> EncodedSplit {
        EncodedSplit::classes(
            name,
            examples
                .iter()
                .map(|e| vec![encoder.encode(&e.text_a, &e.text_b)])
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
        examples: &[PairExample],
        predictions: &[Vec<f32>],
        labels: &[String],
        out: &mut String,
    ) {
        let rows = examples
            .iter()
            .map(|e| (e.line, e.text_a.clone(), e.text_b.clone(), e.label));
        classify::rows(name, rows, predictions, labels, out);
    }

    fn input(&self) -> InputSpec {
        pair_input("a sentence-pair classifier", PredictionShape::Class)
    }

    fn input_cost(&self, input: &Input, limits: &Limits) -> Result<usize, InputError> {
        row_cost(input, limits)
    }

    fn predict_inputs(&self, inputs: Vec<Input>, run: &Run) -> anyhow::Result<Vec<Prediction>> {
        classify::predict(inputs, run)
    }

    /// Any sequence classifier no other kind recognises: every one was a pair classifier
    /// before single texts, and a model without `finetuning_task` still is.
    fn recognises(&self, _architecture: &str, _named: Option<TaskKind>) -> bool {
        true
    }
}

/// What a sentence-pair model (the pair regressor too) takes, `text_a` and `text_b`; `model`
/// is what it is, giving `predicts`.
pub fn pair_input(model: &'static str, predicts: PredictionShape) -> InputSpec {
    InputSpec {
        fields: &["text_a", "text_b"],
        usage: "`text_a` and `text_b`",
        model,
        predicts,
    }
}

/// The tokens of a pair's one row, which must fit `max_seq_length`.
pub fn row_cost(input: &Input, limits: &Limits) -> Result<usize, InputError> {
    let n = limits.tokens(&input.text_a) + limits.tokens(&input.text_b) + 3;
    limits.row("text_a + text_b", n, " with [CLS] and two [SEP]s")
}
