//! The one shape every task kind fills in. A fine-tuning run goes
//!
//! reader (`pipeline_tasks`: files → examples) → **encode** (examples → features: model rows,
//! targets, and what maps a prediction back to its example) → head (the [`Head`] the kind
//! trains, [`crate::task_model::TaskModel`]) → **decode** (the head's outputs on the features
//! → one prediction per example) → **score** (metrics.json's blocks) → **write** (the rows of
//! `predictions.tsv`; `pipeline predict` uses the same encode and decode).
//!
//! A kind is one module implementing [`Kind`]: [`pair`] (sentence pairs), [`single`] (single
//! texts), [`choice`] (multiple choice) and [`tagging`] (token classification, NER). The stage,
//! the training loop and the evaluation are the same for all of them.

pub mod choice;
pub mod classify;
pub mod pair;
pub mod single;
pub mod tagging;

use pipeline_tasks::{Examples, Metrics, MetricsBlock, TaskKind};

use crate::data::EncodedSplit;
use crate::encode::Encoder;

/// The head a kind trains and exports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Head {
    /// `AlbertForSequenceClassification` with this many classes.
    Classes(usize),
    /// `AlbertForMultipleChoice`.
    Choice,
    /// `AlbertForTokenClassification` with this many tags.
    Tags(usize),
}

/// What the head gives for each feature of a split.
pub enum Outputs {
    /// Class (or choice) probabilities, one vector per feature.
    Rows(Vec<Vec<f32>>),
    /// Tag probabilities at each position of each feature (the row's real positions).
    Positions(Vec<Vec<Vec<f32>>>),
}

/// One prediction per example.
#[derive(Debug, Clone, PartialEq)]
pub enum Decoded {
    /// Class (or choice) probabilities; the prediction is the largest.
    Classes(Vec<Vec<f32>>),
    /// A tag id for every character of the sentence.
    Tags(Vec<Vec<usize>>),
}

impl Decoded {
    /// The predicted class of each example (classification kinds; empty for tags).
    pub fn classes(&self) -> Vec<usize> {
        match self {
            Decoded::Classes(p) => p.iter().map(|q| crate::predict::argmax(q)).collect(),
            Decoded::Tags(_) => Vec::new(),
        }
    }

    /// How many examples.
    pub fn len(&self) -> usize {
        match self {
            Decoded::Classes(p) => p.len(),
            Decoded::Tags(t) => t.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The metrics of one split: the class metrics (for tagging: over characters, each tag a
/// class) and, for tagging, the entity scores.
#[derive(Debug, Clone)]
pub struct Scores {
    pub classes: Metrics,
    pub entities: Option<pipeline_tasks::entities::EntityScores>,
}

impl Scores {
    /// What the best epoch is chosen by: accuracy, or entity F1 for tagging.
    pub fn selection(&self) -> f64 {
        match &self.entities {
            Some(e) => e.micro.f1,
            None => self.classes.accuracy,
        }
    }

    /// The headline figure of the report: as [`Scores::selection`].
    pub fn headline(&self) -> f64 {
        self.selection()
    }
}

impl Scores {
    /// The metrics.json block (docs/metrics.md).
    pub fn block(&self) -> MetricsBlock {
        MetricsBlock::new(&self.classes, self.entities.clone())
    }
}

/// What a task kind supplies to the stage's one shape (see the module docs).
pub trait Kind: Sync {
    /// The kind's name in metrics.json (`pair`, `choice`, `single`, `tagging`).
    fn kind(&self) -> TaskKind;

    /// The head, given the protocol's labels.
    fn head(&self, labels: &[String]) -> Head;

    /// Examples to features.
    fn encode(&self, name: &str, examples: &Examples, encoder: &Encoder) -> EncodedSplit;

    /// The head's outputs on `split`'s features to one prediction per example.
    fn decode(&self, split: &EncodedSplit, outputs: Outputs) -> Decoded;

    /// The scores of `decoded` against `split`'s gold.
    fn score(
        &self,
        split: &EncodedSplit,
        decoded: &Decoded,
        labels: &[String],
    ) -> anyhow::Result<Scores>;

    /// The columns of `predictions.tsv` (without the line end).
    fn prediction_header(&self, labels: &[String]) -> String;

    /// The rows of set `name` in `predictions.tsv`.
    fn prediction_rows(
        &self,
        name: &str,
        examples: &Examples,
        decoded: &Decoded,
        labels: &[String],
        out: &mut String,
    );
}

/// The kind of a task.
pub fn of(kind: TaskKind) -> &'static dyn Kind {
    match kind {
        TaskKind::Pair => &pair::Pairs,
        TaskKind::Choice => &choice::Choices,
        TaskKind::Single => &single::Singles,
        TaskKind::Tagging => &tagging::Tagging,
    }
}

/// Tabs and newlines inside a text would break predictions.tsv's columns.
pub fn clean_tsv(s: &str) -> String {
    s.replace(['\t', '\n', '\r'], " ")
}
