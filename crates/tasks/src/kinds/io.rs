//! What the finetune stage's `Predictor` takes and gives: one [`Input`] per example, in the JSON shape
//! `pipeline predict --json` echoes, and one [`Prediction`] per example, in the shape it prints.
//! Both are plain data so that the command line, `pipeline serve` and a caller of the library
//! read and write the same objects.

use std::collections::BTreeMap;

use crate::TaskKind;
use serde::{Deserialize, Serialize};

/// One example to predict. Which fields a model takes depends on its task kind
/// ([`Input::usage`]): `text` (single-text classification, tagging), `text_a` + `text_b`
/// (pair classification, pair regression), `context` + `question` (span extraction),
/// `question` + `choices` (multiple choice; with `context` for C3). A field the kind does not
/// use is an error rather than ignored: a pair sent to a single-text model is a mistake.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// The text of a single-text classifier or a tagger.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The first text of a pair.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text_a: Option<String>,
    /// The second text of a pair.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text_b: Option<String>,
    /// The passage a span is extracted from, or a C3 question's dialogue or text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// The question (span extraction, C3) or a multiple-choice prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<String>,
    /// The options of a multiple-choice question, 2 to 4, in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub choices: Option<Vec<String>>,
}

impl Input {
    /// A single text (to classify or tag).
    pub fn text(text: impl Into<String>) -> Input {
        Input {
            text: Some(text.into()),
            ..Input::default()
        }
    }

    /// A sentence pair.
    pub fn pair(a: impl Into<String>, b: impl Into<String>) -> Input {
        Input {
            text_a: Some(a.into()),
            text_b: Some(b.into()),
            ..Input::default()
        }
    }

    /// A question on a context (span extraction).
    pub fn question(context: impl Into<String>, question: impl Into<String>) -> Input {
        Input {
            context: Some(context.into()),
            question: Some(question.into()),
            ..Input::default()
        }
    }

    /// A multiple-choice question, with its context for a C3 model.
    pub fn choice(
        context: Option<String>,
        question: impl Into<String>,
        choices: Vec<String>,
    ) -> Input {
        Input {
            context,
            question: Some(question.into()),
            choices: Some(choices),
            ..Input::default()
        }
    }

    /// The fields a model of `kind` takes, as an error message names them (the kind's own
    /// words: [`crate::kinds::InputSpec`]).
    pub fn usage(kind: TaskKind) -> &'static str {
        crate::kinds::of(kind).input().usage
    }

    /// What a model of `kind` is, in an error message's words.
    pub fn model_words(kind: TaskKind) -> &'static str {
        crate::kinds::of(kind).input().model
    }

    /// The fields that are set, by name.
    pub fn given(&self) -> Vec<&'static str> {
        let fields = [
            ("text", self.text.is_some()),
            ("text_a", self.text_a.is_some()),
            ("text_b", self.text_b.is_some()),
            ("context", self.context.is_some()),
            ("question", self.question.is_some()),
            ("choices", self.choices.is_some()),
        ];
        fields
            .iter()
            .filter(|(_, set)| *set)
            .map(|(n, _)| *n)
            .collect()
    }
}

/// Why an [`Input`] cannot be predicted by a model. Its message names the field, so that a
/// server can return it as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    /// A field the model's kind needs is absent.
    #[error("missing field `{field}`: {} takes {usage}", Input::model_words(*kind))]
    Missing {
        /// The field.
        field: &'static str,
        /// The model's kind.
        kind: TaskKind,
        /// [`Input::usage`].
        usage: &'static str,
    },
    /// A field the model's kind does not use.
    #[error("field `{field}` is not used by {}, which takes {usage}", Input::model_words(*kind))]
    Unexpected {
        /// The field.
        field: &'static str,
        /// The model's kind.
        kind: TaskKind,
        /// [`Input::usage`].
        usage: &'static str,
    },
    /// A text that is empty or only whitespace.
    #[error("field `{field}` is empty")]
    Empty {
        /// The field (`choices[1]` for an option).
        field: String,
    },
    /// Not 2 to 4 options.
    #[error("field `choices` has {given} options; give 2 to 4")]
    Choices {
        /// How many were given.
        given: usize,
    },
    /// Longer than the model takes.
    #[error("field `{field}` is {length} {unit} long; this model takes at most {limit}{why}")]
    TooLong {
        /// The field, or the fields together (`text_a + text_b`).
        field: String,
        /// Its length.
        length: usize,
        /// `tokens` or `characters`.
        unit: &'static str,
        /// The most the model takes.
        limit: usize,
        /// Why the limit is what it is.
        why: &'static str,
    },
}

/// What a model predicted for one example: the shape depends on its task kind. Serialised as
/// the JSON object `pipeline predict --json` prints for one example, the input's texts echoed.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Prediction {
    /// A single-text or pair classifier's class.
    Class(ClassPrediction),
    /// A pair regressor's score.
    Score(ScorePrediction),
    /// A tagger's tags and the entities they make.
    Tags(TagPrediction),
    /// A span extractor's answer.
    Answer(AnswerPrediction),
    /// A multiple-choice model's choice.
    Choice(ChoicePrediction),
}

impl Prediction {
    /// Which shape it is.
    pub fn shape(&self) -> PredictionShape {
        match self {
            Prediction::Class(_) => PredictionShape::Class,
            Prediction::Score(_) => PredictionShape::Score,
            Prediction::Tags(_) => PredictionShape::Tags,
            Prediction::Answer(_) => PredictionShape::Answer,
            Prediction::Choice(_) => PredictionShape::Choice,
        }
    }
}

/// The shapes of [`Prediction`], without the values: what a model gives (the finetune stage's
/// `Predictor::predicts`), so that a caller prints or reads by shape and a new task kind that
/// gives an existing shape needs nothing new there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PredictionShape {
    /// [`Prediction::Class`].
    Class,
    /// [`Prediction::Score`].
    Score,
    /// [`Prediction::Tags`].
    Tags,
    /// [`Prediction::Answer`].
    Answer,
    /// [`Prediction::Choice`].
    Choice,
}

/// A classifier's prediction.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClassPrediction {
    /// The single text, echoed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The pair's first text, echoed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text_a: Option<String>,
    /// The pair's second text, echoed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text_b: Option<String>,
    /// The most probable label.
    pub label: String,
    /// Its index among the model's labels.
    #[serde(skip)]
    pub index: usize,
    /// Each label's probability, in the model's label order.
    #[serde(skip)]
    pub probabilities: Vec<f32>,
    /// Each label's probability by name (what the JSON shows as `probabilities`).
    #[serde(rename = "probabilities")]
    pub by_label: BTreeMap<String, f32>,
}

/// A pair regressor's prediction.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScorePrediction {
    /// The pair's first text, echoed.
    pub text_a: String,
    /// The pair's second text, echoed.
    pub text_b: String,
    /// The model's output, not squashed.
    pub score: f32,
}

/// One entity a tagger found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FoundEntity {
    /// Its type (`PER` of `B-PER`).
    #[serde(rename = "type")]
    pub kind: String,
    /// Its first character in the text as given (0-based).
    pub start: usize,
    /// One past its last character.
    pub end: usize,
    /// The characters `start..end` of the text.
    pub text: String,
}

/// A tagger's prediction.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TagPrediction {
    /// The text, echoed.
    pub text: String,
    /// One tag per character of the text (whitespace gets the first tag, `O`).
    pub tags: Vec<String>,
    /// The entities the tags make, in order.
    pub entities: Vec<FoundEntity>,
}

/// A span extractor's prediction.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AnswerPrediction {
    /// The question, echoed (trimmed).
    pub question: String,
    /// The answer, a substring of the context; `None` for a context without any token.
    pub answer: Option<String>,
    /// Its first character in the context (as SQuAD's `answer_start`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start: Option<usize>,
    /// One past its last character.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end: Option<usize>,
    /// Softmax of start + end score over the n-best candidates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probability: Option<f32>,
    /// Start logit + end logit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub score: Option<f32>,
}

/// A multiple-choice model's prediction.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChoicePrediction {
    /// The question, echoed (trimmed).
    pub question: String,
    /// The options, echoed (trimmed).
    pub choices: Vec<String>,
    /// The index of the chosen option.
    pub choice: usize,
    /// The chosen option.
    pub answer: String,
    /// Each option's probability, in order.
    pub probabilities: Vec<f32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_field_is_refused_by_name() {
        let e = serde_json::from_str::<Input>(r#"{"txt": "a"}"#).unwrap_err();
        assert!(e.to_string().contains("unknown field `txt`"), "{e}");
        let e = serde_json::from_str::<Input>(r#"{"text": 3}"#).unwrap_err();
        assert!(e.to_string().contains("invalid type"), "{e}");
    }

    #[test]
    fn errors_name_the_field_and_what_the_model_takes() {
        let kind = TaskKind::Single;
        let usage = Input::usage(kind);
        let e = InputError::Unexpected {
            field: "text_a",
            kind,
            usage,
        };
        assert_eq!(
            e.to_string(),
            "field `text_a` is not used by a single-text classifier, which takes `text`"
        );
        let kind = TaskKind::Pair;
        let usage = Input::usage(kind);
        let e = InputError::Missing {
            field: "text_b",
            kind,
            usage,
        };
        assert_eq!(
            e.to_string(),
            "missing field `text_b`: a sentence-pair classifier takes `text_a` and `text_b`"
        );
    }

    #[test]
    fn an_input_reads_back_what_it_writes() {
        for input in [
            Input::text("这家酒店很好"),
            Input::pair("a", "b"),
            Input::question("上下文", "问题"),
            Input::choice(Some("c".into()), "q", vec!["x".into(), "y".into()]),
        ] {
            let json = serde_json::to_string(&input).unwrap();
            assert_eq!(serde_json::from_str::<Input>(&json).unwrap(), input);
        }
        assert_eq!(Input::pair("a", "b").given(), ["text_a", "text_b"]);
    }

    #[test]
    fn a_prediction_is_the_json_predict_prints() {
        let p = Prediction::Class(ClassPrediction {
            text: Some("t".into()),
            text_a: None,
            text_b: None,
            label: "1".into(),
            index: 1,
            probabilities: vec![0.25, 0.75],
            by_label: [("0".to_string(), 0.25), ("1".to_string(), 0.75)].into(),
        });
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"text": "t", "label": "1", "probabilities": {"0": 0.25, "1": 0.75}})
        );
        let none = Prediction::Answer(AnswerPrediction {
            question: "q".into(),
            answer: None,
            start: None,
            end: None,
            probability: None,
            score: None,
        });
        assert_eq!(
            serde_json::to_value(&none).unwrap(),
            serde_json::json!({"question": "q", "answer": null})
        );
    }
}
