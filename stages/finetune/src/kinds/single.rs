//! Single-text classification (ChnSentiCorp, SMP2020-EWECT, any `label \t text` file):
//! `[CLS] text [SEP]` with token types 0, `AlbertForSequenceClassification` as for pairs.
//! `predictions.tsv` keeps the pair columns, `text_b` empty, so one reader serves both.

use pipeline_tasks::{Examples, TaskKind};

use super::{Decoded, Head, Kind, classify};
use crate::data::EncodedSplit;
use crate::encode::Encoder;

/// The single-text kind.
pub struct Singles;

impl Kind for Singles {
    fn kind(&self) -> TaskKind {
        TaskKind::Single
    }

    fn head(&self, labels: &[String]) -> Head {
        Head::Classes(labels.len())
    }

    fn encode(&self, name: &str, examples: &Examples, encoder: &Encoder) -> EncodedSplit {
        let v = examples.as_singles().unwrap_or_default();
        EncodedSplit::classes(
            name,
            v.iter()
                .map(|e| vec![encoder.encode_single(&e.text)])
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
        let v = examples.as_singles().unwrap_or_default();
        let rows = v
            .iter()
            .map(|e| (e.line, e.text.clone(), String::new(), e.label));
        classify::rows(name, rows, decoded, labels, out);
    }
}
