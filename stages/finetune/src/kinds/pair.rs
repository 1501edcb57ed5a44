//! Sentence-pair classification (LCQMC, AFQMC, XNLI, …): `[CLS] a [SEP] b [SEP]`,
//! `AlbertForSequenceClassification`.

use pipeline_tasks::{Examples, TaskKind};

use super::{Decoded, Head, Kind, classify};
use crate::data::EncodedSplit;
use crate::encode::Encoder;

/// The pair kind.
pub struct Pairs;

impl Kind for Pairs {
    fn kind(&self) -> TaskKind {
        TaskKind::Pair
    }

    fn head(&self, labels: &[String]) -> Head {
        Head::Classes(labels.len())
    }

    fn encode(&self, name: &str, examples: &Examples, encoder: &Encoder) -> EncodedSplit {
        let v = examples.as_pairs().unwrap_or_default();
        EncodedSplit::classes(
            name,
            v.iter()
                .map(|e| vec![encoder.encode(&e.text_a, &e.text_b)])
                .collect(),
            v.iter().map(|e| e.label).collect(),
        )
    }

    fn prediction_rows(
        &self,
        name: &str,
        examples: &Examples,
        decoded: &Decoded,
        labels: &[String],
        out: &mut String,
    ) {
        let v = examples.as_pairs().unwrap_or_default();
        let rows = v
            .iter()
            .map(|e| (e.line, e.text_a.clone(), e.text_b.clone(), e.label));
        classify::rows(name, rows, decoded, labels, out);
    }
}
