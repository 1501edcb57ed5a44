//! Multiple choice: one `[CLS] prompt [SEP] choice [SEP]` row per choice,
//! `AlbertForMultipleChoice` scoring them against each other. In `predictions.tsv` the
//! choices are `text_b`, joined by ` | `.

use pipeline_tasks::{Examples, TaskKind};

use super::{Decoded, Head, Kind, classify};
use crate::data::EncodedSplit;
use crate::encode::Encoder;

/// The multiple-choice kind.
pub struct Choices;

impl Kind for Choices {
    fn kind(&self) -> TaskKind {
        TaskKind::Choice
    }

    fn head(&self, _labels: &[String]) -> Head {
        Head::Choice
    }

    fn encode(&self, name: &str, examples: &Examples, encoder: &Encoder) -> EncodedSplit {
        let v = examples.as_choices().unwrap_or_default();
        EncodedSplit::classes(
            name,
            v.iter()
                .map(|e| {
                    e.choices
                        .iter()
                        .map(|c| encoder.encode(&e.prompt, c))
                        .collect()
                })
                .collect(),
            v.iter().map(|e| e.answer).collect(),
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
        let v = examples.as_choices().unwrap_or_default();
        let rows = v
            .iter()
            .map(|e| (e.line, e.prompt.clone(), e.choices.join(" | "), e.answer));
        classify::rows(name, rows, decoded, labels, out);
    }
}
