//! Sentence-pair classification (LCQMC, AFQMC, XNLI, …): `[CLS] a [SEP] b [SEP]`,
//! `AlbertForSequenceClassification`.

use pipeline_tasks::{PairExample, TaskKind};

use super::{Head, Kind, Scores, classify};
use crate::data::EncodedSplit;
use crate::encode::Encoder;

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
}
