//! A split's examples as features: the model rows of each, the target each is trained
//! towards, and what maps the head's outputs back to examples ([`EncodedSplit`]), as a kind's
//! [`crate::kinds::Kind::encode`] makes them. The order they are trained in is the finetune
//! stage's.

use std::any::Any;

use crate::kinds::KindError;
use crate::kinds::encode::Encoded;

/// Encoded examples of one split, as features: the model rows of each (one for a pair, a
/// single text, a tagging window or a span window; N for a choice question), the target each
/// is trained towards, and what maps the head's outputs on the features back to examples.
pub struct EncodedSplit {
    /// The split's name: `train`, `dev`, or an evaluation set's (metrics.json's keys).
    pub name: String,
    /// The model rows of each feature, unpadded: one, or one per choice of a question.
    pub rows: Vec<Vec<Encoded>>,
    /// One target per feature.
    pub targets: Targets,
    /// What maps the head's outputs on the features back to one prediction per example: the
    /// kind's own [`crate::kinds::Kind::Features`], boxed so that the stage holds the splits
    /// of every kind alike ([`EncodedSplit::features`] unboxes it).
    pub decoding: Box<dyn Any + Send + Sync>,
    /// How many examples the features came from.
    pub examples: usize,
    /// Examples the encoding could not serve whole, by cause (e.g. `answer_in_no_window`),
    /// with their ids: metrics.json's `encoding` block.
    pub notes: EncodeNotes,
}

/// What each feature is trained towards.
#[derive(Debug, Clone, PartialEq)]
pub enum Targets {
    /// A class (or the right choice) per feature.
    Classes(Vec<usize>),
    /// A tag at each position of each feature, −100 where the loss ignores it (special tokens,
    /// the non-first pieces of a character).
    Tags(Vec<Vec<i64>>),
    /// The answer's start and end positions in each feature (both 0, `[CLS]`, where the
    /// window does not hold the whole answer).
    Spans(Vec<(usize, usize)>),
    /// A gold score per feature (sentence-pair regression).
    Scores(Vec<f32>),
}

impl Targets {
    /// The class ids of split `split`'s features, or the error of a split encoded with other
    /// targets.
    pub fn classes(&self, split: &str) -> Result<&[usize], KindError> {
        match self {
            Targets::Classes(c) => Ok(c),
            _ => Err(shape(split, "targets", "classes", self.shape())),
        }
    }

    /// The gold scores of split `split`'s features, or the error of a split encoded with
    /// other targets.
    pub fn scores(&self, split: &str) -> Result<&[f32], KindError> {
        match self {
            Targets::Scores(s) => Ok(s),
            _ => Err(shape(split, "targets", "scores", self.shape())),
        }
    }

    fn shape(&self) -> &'static str {
        match self {
            Targets::Classes(_) => "classes",
            Targets::Tags(_) => "tags",
            Targets::Spans(_) => "answer spans",
            Targets::Scores(_) => "scores",
        }
    }
}

/// A split's `what` of shape `found` where `expected` was needed.
fn shape(
    split: &str,
    what: &'static str,
    expected: &'static str,
    found: &'static str,
) -> KindError {
    KindError::Shape {
        split: split.to_string(),
        what,
        expected,
        found,
    }
}

/// Examples set aside or served in part while encoding, by cause, with every id.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct EncodeNotes(pub std::collections::BTreeMap<&'static str, Vec<String>>);

impl EncodeNotes {
    /// Notes example `id` under `cause` (`answer_in_no_window`, `encoding_error`, …).
    pub fn record(&mut self, cause: &'static str, id: &str) {
        self.0.entry(cause).or_default().push(id.to_string());
    }

    /// How many examples were noted under `cause` (0 for a cause never noted).
    pub fn count(&self, cause: &str) -> usize {
        self.0.get(cause).map_or(0, Vec::len)
    }

    /// Whether every example was served whole (metrics.json then has no `encoding` entry for
    /// the split).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `{cause: {count, ids}}` for metrics.json.
    pub fn to_json(&self) -> serde_json::Value {
        self.0
            .iter()
            .map(|(k, ids)| {
                (
                    k.to_string(),
                    serde_json::json!({"count": ids.len(), "ids": ids}),
                )
            })
            .collect::<serde_json::Map<_, _>>()
            .into()
    }
}

/// A window of a tagged sentence: which example, and for each position the character whose
/// tag it decides (its first piece, in the window that gives it the most context), if any.
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    /// The example (sentence) it comes from: its index in the split.
    pub example: usize,
    /// One per position of the window's row: the index of the character whose tag the
    /// position decides, `None` for the special tokens, a character's later pieces, and the
    /// characters another window decides.
    pub decides: Vec<Option<usize>>,
}

impl EncodedSplit {
    /// Features of a classification kind: one per example.
    pub fn classes(name: &str, rows: Vec<Vec<Encoded>>, labels: Vec<usize>) -> EncodedSplit {
        EncodedSplit {
            name: name.into(),
            examples: rows.len(),
            rows,
            targets: Targets::Classes(labels),
            decoding: Box::new(()),
            notes: EncodeNotes::default(),
        }
    }

    /// The kind's features, or the error of a split another kind encoded.
    pub fn features<F: Any>(&self) -> Result<&F, KindError> {
        self.decoding
            .downcast_ref()
            .ok_or_else(|| KindError::Shape {
                split: self.name.clone(),
                what: "features",
                expected: std::any::type_name::<F>(),
                found: "another kind's",
            })
    }

    /// An example's length: its longest row.
    pub fn length(&self, i: usize) -> usize {
        self.rows[i].iter().map(|r| r.ids.len()).max().unwrap_or(0)
    }
}
