//! The one shape every task kind fills in. A fine-tuning run goes
//!
//! **read** (files → examples) → **encode** (examples → features: model rows,
//! targets, and what maps a prediction back to its example) → head (the [`Head`] the kind
//! trains, the finetune stage's model) → **decode** (the head's outputs on the features
//! → one prediction per example) → **score** (metrics.json's blocks) → **write** (the rows of
//! `predictions.tsv`; `pipeline predict` uses the same encode and decode).
//!
//! A kind is one module (a file, or a folder for the larger ones) holding all of it: its
//! format, its example and the reader of its files, and its [`Kind`] with its own types (its
//! example, the head's output for one feature, its prediction for one example). The kinds are
//! [`pair`] (sentence pairs),
//! [`single`] (single texts), [`choice`] (multiple choice), [`tagging`] (token
//! classification, NER), [`span`] (span extraction, CMRC 2018) and [`reading_choice`]
//! (multiple choice on a context, C3) and [`pair_regression`] (a score per sentence pair,
//! STS-B style); [`of`] registers them. The stage, the training loop and
//! the evaluation are the same for all of them and hold a kind as [`AnyKind`], whose one
//! implementation (`erased`) converts the values every kind shares to the kind's types, a
//! value of another kind being a [`KindError`]: a feature's target ([`crate::kinds::features::Targets`])
//! picks the loss, the model's head its outputs, and the kind's [`Kind::Features`] how they
//! map back to examples.
//!
//! A kind also serves its fine-tuned models ([`serving`]): the request fields it takes, the
//! length check of one request, how requests become predictions, and which saved models are
//! of it ([`from_config`]). The finetune stage's `Predictor` asks the kind, so outside this
//! module a kind is named only where it is registered ([`of`], [`from_config`]'s order; and
//! outside the kinds, `TaskKind` and `Task` in [`crate::task`], `Examples` in
//! [`crate::protocol`], and the baselines of each kind).
//!
//! The kinds hold no model: a prediction asks a [`Model`] (the finetune stage's loaded model)
//! for its head's outputs, so the kinds build, and are tested, without burn.

pub mod choice;
pub mod classify;
pub mod encode;
mod erased;
pub mod features;
pub mod io;
pub mod pair;
pub mod pair_regression;
pub mod reading_choice;
pub mod serving;
pub mod single;
pub mod span;
pub mod tagging;

use std::any::Any;
use std::ops::Range;

use crate::correlation::RegressionMetrics;
use crate::entities::EntityScores;
use crate::{KindExample, Metrics, MetricsBlock, SpanMetricsBlock, TaskKind};

pub use erased::{AnyKind, FeatureOutput, KindError, decode_outputs};
pub use serving::{InputSpec, Limits, Model, Run};

use crate::kinds::encode::Encoder;
use crate::kinds::features::EncodedSplit;
use crate::kinds::io::{Input, InputError, Prediction};

/// The head a kind trains and exports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Head {
    /// `AlbertForSequenceClassification` with this many classes.
    Classes(usize),
    /// `AlbertForMultipleChoice`.
    Choice,
    /// `AlbertForTokenClassification` with this many tags.
    Tags(usize),
    /// `AlbertForQuestionAnswering`: a start and an end score at every position.
    Span,
    /// `AlbertForSequenceClassification` with one output, trained as a regressor.
    Score,
}

/// What the head gives for each feature of a split.
pub enum Outputs {
    /// Class (or choice) probabilities, one vector per feature; a regressor's one score.
    Rows(Vec<Vec<f32>>),
    /// Tag probabilities at each position of each feature (the row's real positions).
    Positions(Vec<Vec<Vec<f32>>>),
    /// Start and end logits at each real position of each feature.
    Spans(Vec<(Vec<f32>, Vec<f32>)>),
}

/// One predicted answer span of a context.
#[derive(Debug, Clone, PartialEq)]
pub struct SpanAnswer {
    /// `&context[bytes]`, exactly.
    pub text: String,
    /// Characters of the context (as SQuAD's `answer_start`), end exclusive.
    pub chars: Range<usize>,
    /// Bytes of the context, end exclusive, on character boundaries.
    pub bytes: Range<usize>,
    /// Softmax of the start + end score over the n-best list.
    pub probability: f32,
    /// Start logit + end logit.
    pub score: f32,
}

/// One prediction per example, as the kind that decoded them made them: its own
/// `Vec<Kind::Prediction>` (class probabilities, tag ids, answer spans), boxed so that the
/// stage holds every kind's alike; [`Decoded::get`] unboxes it.
pub struct Decoded {
    predictions: Box<dyn Any + Send + Sync>,
    len: usize,
}

impl std::fmt::Debug for Decoded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decoded")
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

impl Decoded {
    /// `predictions`, one per example.
    pub fn new<P: Any + Send + Sync>(predictions: Vec<P>) -> Decoded {
        Decoded {
            len: predictions.len(),
            predictions: Box::new(predictions),
        }
    }

    /// The predictions as `P`s, or the error of another kind's (`split` names them).
    pub fn get<P: Any>(&self, split: &str) -> Result<&[P], KindError> {
        match self.predictions.downcast_ref::<Vec<P>>() {
            Some(v) => Ok(v),
            None => Err(KindError::Shape {
                split: split.to_string(),
                what: "predictions",
                expected: std::any::type_name::<P>(),
                found: "another kind's",
            }),
        }
    }

    /// How many examples.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no examples.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The metrics of one split: the class metrics (for tagging: over characters, each tag a
/// class) and, for tagging, the entity scores; or, for span extraction, EM and F1; or, for
/// regression, Pearson's and Spearman's correlations.
#[derive(Debug, Clone)]
pub struct Scores {
    /// Accuracy, F1, macro-F1 and the confusion matrix; `None` for span extraction.
    pub classes: Option<Metrics>,
    /// Tagging: entity precision, recall and F1 (seqeval's default mode); `None` otherwise.
    pub entities: Option<EntityScores>,
    /// Span extraction: CMRC 2018's EM and F1; `None` otherwise.
    pub spans: Option<SpanMetricsBlock>,
    /// Regression: Pearson, Spearman and the MSE; `None` otherwise.
    pub regression: Option<RegressionMetrics>,
}

impl Scores {
    /// A classification kind's scores (a tagger's with its entities).
    pub fn classes(classes: Metrics, entities: Option<EntityScores>) -> Scores {
        Scores {
            classes: Some(classes),
            entities,
            spans: None,
            regression: None,
        }
    }

    /// A span kind's scores.
    pub fn spans(spans: SpanMetricsBlock) -> Scores {
        Scores {
            classes: None,
            entities: None,
            spans: Some(spans),
            regression: None,
        }
    }

    /// A regression kind's scores.
    pub fn regression(metrics: RegressionMetrics) -> Scores {
        Scores {
            classes: None,
            entities: None,
            spans: None,
            regression: Some(metrics),
        }
    }

    /// What the best epoch is chosen by: accuracy, entity F1 for tagging, F1 for spans,
    /// Pearson's r for regression (−1, the worst, where it is undefined: constant
    /// predictions).
    pub fn selection(&self) -> f64 {
        if let Some(r) = &self.regression {
            return r.pearson.unwrap_or(-1.0);
        }
        match (&self.spans, &self.entities, &self.classes) {
            (Some(s), _, _) => s.f1,
            (_, Some(e), _) => e.micro.f1,
            (_, _, Some(c)) => c.accuracy,
            _ => 0.0,
        }
    }

    /// The headline figure of the report: as [`Scores::selection`].
    pub fn headline(&self) -> f64 {
        self.selection()
    }

    /// The metrics.json block (docs/metrics.md).
    pub fn to_json(&self) -> serde_json::Value {
        if let Some(r) = &self.regression {
            return serde_json::to_value(r).unwrap_or_default();
        }
        match (&self.spans, &self.classes) {
            (Some(s), _) => s.to_json(),
            (None, Some(c)) => MetricsBlock::new(c, self.entities.clone()).to_json(),
            (None, None) => serde_json::Value::Null,
        }
    }

    /// `accuracy 0.8123, F1 0.7012` for the stage's log.
    pub fn summary(&self) -> String {
        if let Some(r) = &self.regression {
            let show = |x: Option<f64>| x.map_or("undefined".into(), |v| format!("{v:.4}"));
            return format!(
                "Pearson {}, Spearman {}, MSE {:.4} on {} pairs",
                show(r.pearson),
                show(r.spearman),
                r.mse,
                r.examples
            );
        }
        if let Some(s) = &self.spans {
            return format!(
                "EM {:.4}, F1 {:.4} on {} questions",
                s.exact_match, s.f1, s.examples
            );
        }
        let Some(m) = &self.classes else {
            return "no scores".into();
        };
        format!(
            "accuracy {:.4}{}{} on {} examples",
            m.accuracy,
            m.f1.map(|f| format!(", F1 {f:.4}")).unwrap_or_default(),
            self.entities
                .as_ref()
                .map(|e| format!(", entity F1 {:.4}", e.micro.f1))
                .unwrap_or_default(),
            m.examples
        )
    }
}

/// One task kind, typed: its example, its features (what maps outputs back to examples), what
/// its head gives for one feature, and its prediction for one example are its own types, so a
/// kind's module never meets another kind's values. The stage sees kinds through [`AnyKind`], which every `Kind` is, and which converts
/// the shared values ([`crate::Examples`], [`Outputs`], [`Decoded`]) to the kind's
/// types once, with a typed [`KindError`] where they are of another kind.
pub trait Kind: Sync + 'static {
    /// The kind's name in metrics.json (`pair`, `choice`, `single`, `tagging`, `span`,
    /// `reading_choice`, `pair_regression`).
    const KIND: TaskKind;

    /// One example of a split.
    type Example: KindExample;

    /// What maps the head's outputs on a split's features back to its examples (and, for
    /// some kinds, their gold): made by [`Kind::encode`], kept boxed in the split.
    type Features: Any + Send + Sync;

    /// What the head gives for one feature.
    type Output: FeatureOutput;

    /// The prediction for one example.
    type Prediction: Any + Send + Sync;

    /// The head, given the protocol's labels.
    fn head(&self, labels: &[String]) -> Head;

    /// Examples to features (the split's `decoding` a [`Kind::Features`]).
    fn encode(&self, name: &str, examples: &[Self::Example], encoder: &Encoder) -> EncodedSplit;

    /// The head's outputs on the split's features (one each) to one prediction per example.
    fn decode(
        &self,
        features: &Self::Features,
        outputs: Vec<Self::Output>,
    ) -> Vec<Self::Prediction>;

    /// The scores of `predictions` (one per example) against `split`'s gold.
    fn score(
        &self,
        split: &EncodedSplit,
        features: &Self::Features,
        predictions: &[Self::Prediction],
        labels: &[String],
    ) -> anyhow::Result<Scores>;

    /// The columns of `predictions.tsv` (without the line end).
    fn prediction_header(&self, labels: &[String]) -> String;

    /// The rows of set `name` in `predictions.tsv`: `examples` and `predictions` are as many.
    fn prediction_rows(
        &self,
        name: &str,
        examples: &[Self::Example],
        predictions: &[Self::Prediction],
        labels: &[String],
        out: &mut String,
    );

    /// What a request to a model of this kind carries, and the prediction it gets.
    fn input(&self) -> InputSpec;

    /// The cost of `input` (its fields those of [`Kind::input`], none empty) in tokens, its
    /// rows' tokens, what a server batches by; or why it is longer than the model takes.
    fn input_cost(&self, input: &Input, limits: &Limits) -> Result<usize, InputError>;

    /// The predictions of `run`'s model for `inputs` (their fields checked), in order. The
    /// inputs' texts move into the predictions that echo them: a large file's are held once.
    fn predict_inputs(&self, inputs: Vec<Input>, run: &Run) -> anyhow::Result<Vec<Prediction>>;

    /// Whether a saved model is of this kind, its config.json naming the head `architecture`
    /// and a `finetuning_task` of kind `named` ([`from_config`] asks the kinds in turn). By
    /// default: a model fine-tuned on a task of this kind.
    fn recognises(&self, architecture: &str, named: Option<TaskKind>) -> bool {
        let _ = architecture;
        named == Some(Self::KIND)
    }

    /// Whether its contexts are cut into span windows
    /// ([`crate::span_features::SpanConfig`]): its window params apply, are checked
    /// against the model and recorded, and rows default to the window's length.
    fn span_windows(&self) -> bool {
        false
    }
}

/// The order a saved model's config.json is matched against the kinds ([`from_config`]): the
/// kinds an architecture alone names (a token classifier, a span extractor), a C3 model before
/// the multiple-choice architecture's `choice`, the sequence classifiers a task names, and the
/// pair kind, which takes any sequence classifier (every one was a pair classifier before
/// single texts), last.
const BY_CONFIG: [TaskKind; 7] = [
    TaskKind::Tagging,
    TaskKind::Span,
    TaskKind::ReadingChoice,
    TaskKind::Choice,
    TaskKind::Single,
    TaskKind::PairRegression,
    TaskKind::Pair,
];

/// The kind of a saved model whose config.json names the head `architecture` and a
/// `finetuning_task` of kind `named`: the first kind in [`BY_CONFIG`] that recognises it.
pub fn from_config(architecture: &str, named: Option<TaskKind>) -> TaskKind {
    BY_CONFIG
        .into_iter()
        .find(|&k| of(k).recognises(architecture, named))
        .unwrap_or(TaskKind::Pair)
}

/// The kind of a task: the one place a kind is registered.
pub fn of(kind: TaskKind) -> &'static dyn AnyKind {
    match kind {
        TaskKind::Pair => &pair::Pairs,
        TaskKind::Choice => &choice::Choices,
        TaskKind::Single => &single::Singles,
        TaskKind::Tagging => &tagging::Tagging,
        TaskKind::Span => &span::Spans,
        TaskKind::ReadingChoice => &reading_choice::ReadingChoices,
        TaskKind::PairRegression => &pair_regression::PairRegressions,
    }
}

/// The index of the largest probability, the first on a tie (as numpy's and torch's argmax,
/// and C3's `best_real_choice`).
pub fn argmax(p: &[f32]) -> usize {
    let mut best = 0;
    for (i, x) in p.iter().enumerate().skip(1) {
        if x.total_cmp(&p[best]).is_gt() {
            best = i;
        }
    }
    best
}

/// Tabs and newlines inside a text would break predictions.tsv's columns.
pub fn clean_tsv(s: &str) -> String {
    s.replace(['\t', '\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A saved model's kind is what it was before the kinds decided it themselves: the
    /// architecture names a tagger, a span extractor or (without a C3 task) a `choice` model;
    /// a sequence classifier is the kind of the task it names, a pair classifier otherwise.
    #[test]
    fn a_saved_model_is_of_the_kind_its_config_names() {
        let (tokens, qa) = ("AlbertForTokenClassification", "AlbertForQuestionAnswering");
        let (mc, seq) = ("AlbertForMultipleChoice", "AlbertForSequenceClassification");
        let cases = [
            (tokens, Some(TaskKind::Pair), TaskKind::Tagging),
            (qa, None, TaskKind::Span),
            (qa, Some(TaskKind::ReadingChoice), TaskKind::Span),
            (mc, Some(TaskKind::ReadingChoice), TaskKind::ReadingChoice),
            (mc, Some(TaskKind::Single), TaskKind::Choice),
            (mc, None, TaskKind::Choice),
            (seq, Some(TaskKind::Single), TaskKind::Single),
            (
                seq,
                Some(TaskKind::PairRegression),
                TaskKind::PairRegression,
            ),
            (seq, Some(TaskKind::Tagging), TaskKind::Pair),
            (seq, None, TaskKind::Pair),
            ("", None, TaskKind::Pair),
        ];
        for (arch, named, kind) in cases {
            assert_eq!(from_config(arch, named), kind, "{arch} {named:?}");
        }
    }

    /// Every kind is asked, once, for a saved model's kind.
    #[test]
    fn every_kind_is_in_the_config_order() {
        for kind in BY_CONFIG {
            assert_eq!(of(kind).kind(), kind);
            assert_eq!(BY_CONFIG.iter().filter(|&&k| k == kind).count(), 1);
        }
        let words: Vec<&str> = BY_CONFIG.iter().map(|&k| of(k).input().model).collect();
        assert!(words.contains(&"a sentence-pair regressor"), "{words:?}");
    }
}
