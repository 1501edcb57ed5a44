//! What a kind needs to serve a fine-tuned model of its own: the shape of the requests it takes
//! ([`InputSpec`]), the measure a request's length is checked with ([`Limits`]), and the model
//! and batching a prediction runs on ([`Run`]). The kinds' modules hold what differs (which
//! fields, which length limit, how inputs become rows and predictions); the finetune stage's
//! `Predictor` asks its model's kind, so a new kind is served by its own module and no `match`
//! on the kind elsewhere.
//!
//! The model is a [`Model`]: what the kinds need of it (its tokenizer, its labels, the head's
//! [`Outputs`] on a split), so that the kinds hold no model code and build without one; the
//! finetune stage implements it on its loaded models.

use std::path::Path;

use super::{Head, Kind, KindError, Outputs, decode_outputs};
use crate::kinds::encode::Encoder;
use crate::kinds::features::EncodedSplit;
use crate::kinds::io::{InputError, PredictionShape};

/// What a request to a model of one kind carries, and what it gets back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputSpec {
    /// The [`crate::kinds::io::Input`] fields it takes, all required, in the order a missing one is
    /// named.
    pub fields: &'static [&'static str],
    /// Those fields as an error message names them (`` `text_a` and `text_b` ``).
    pub usage: &'static str,
    /// What the model is, in an error message's words (`a sentence-pair regressor`).
    pub model: &'static str,
    /// The [`crate::kinds::io::Prediction`] it gives for each input.
    pub predicts: PredictionShape,
}

/// The lengths one input is checked against: a row of `max_seq_length` tokens, or, for the
/// kinds that cut a text into windows, at most `max_text_chars` characters.
pub struct Limits<'a> {
    /// The model's tokenizer.
    pub encoder: &'a Encoder,
    /// Tokens per row, `[CLS]` and `[SEP]`s included.
    pub max_seq_length: usize,
    /// The longest text cut into windows, in characters.
    pub max_text_chars: usize,
}

impl Limits<'_> {
    /// The tokens of an (optional) text.
    pub fn tokens(&self, text: &Option<String>) -> usize {
        self.encoder.tokens(text.as_deref().unwrap_or("")).len()
    }

    /// `n` tokens of one row (`field` the texts in it), or why they do not fit: a row is not
    /// cut in prediction, since cutting it would change the answer unseen.
    pub fn row(&self, field: &str, n: usize, why: &'static str) -> Result<usize, InputError> {
        match n > self.max_seq_length {
            true => Err(InputError::TooLong {
                field: field.into(),
                length: n,
                unit: "tokens",
                limit: self.max_seq_length,
                why,
            }),
            false => Ok(n),
        }
    }

    /// The characters of a text cut into windows, or why it is too long.
    pub fn text(&self, field: &str, text: &Option<String>) -> Result<usize, InputError> {
        let n = text.as_deref().map_or(0, |t| t.chars().count());
        match n > self.max_text_chars {
            true => Err(InputError::TooLong {
                field: field.into(),
                length: n,
                unit: "characters",
                limit: self.max_text_chars,
                why: "",
            }),
            false => Ok(n),
        }
    }
}

/// A fine-tuned model as the kinds serve it: its tokenizer and labels, and its head's outputs
/// on the features of a split, its workers, device and progress its own.
pub trait Model: Sync {
    /// The directory it was loaded from (named in errors).
    fn dir(&self) -> &Path;

    /// Its head.
    fn head(&self) -> Head;

    /// The head's name in errors: transformers' architecture.
    fn head_name(&self) -> &'static str;

    /// The tokenizer its rows are made with.
    fn encoder(&self) -> &Encoder;

    /// The class or tag names in id order (none for a span extractor).
    fn labels(&self) -> &[String];

    /// The head's outputs on every feature of `split`, in order, `batch_size` rows a forward
    /// pass.
    fn outputs(&self, split: &EncodedSplit, batch_size: usize) -> Outputs;
}

/// One prediction's model and batching: a kind encodes its inputs, runs them here, and shapes
/// the predictions.
pub struct Run<'a> {
    /// The fine-tuned model, its tokenizer and labels.
    pub model: &'a dyn Model,
    /// Rows a forward pass.
    pub batch_size: usize,
}

impl Run<'_> {
    /// `kind`'s predictions, one per example of `split` (encoded by `kind`), `batch_size`
    /// features a forward pass; a model whose head gives another kind's outputs is a
    /// [`KindError`].
    pub fn predict<K: Kind>(
        &self,
        kind: &K,
        split: &EncodedSplit,
        batch_size: usize,
    ) -> Result<Vec<K::Prediction>, KindError> {
        decode_outputs(kind, split, self.model.outputs(split, batch_size))
    }

    /// The error of a model whose head is not the one `expected` (`a sequence classifier`).
    pub fn wrong_head(&self, expected: &str) -> anyhow::Error {
        anyhow::anyhow!(
            "{}: a {} model, where {expected} was expected",
            self.model.dir().display(),
            self.model.head_name()
        )
    }
}

#[cfg(test)]
mod tests {
    use crate::TaskKind;

    use super::*;
    use crate::kinds::encode::tests::encoder;
    use crate::kinds::io::{Input, Prediction};
    use crate::kinds::of;

    /// Each kind measures a request as the Predictor did when it matched on the kind: a row of
    /// tokens for the classifiers and the regressor, characters for the windowed texts.
    #[test]
    fn each_kind_measures_its_requests() {
        let e = encoder(16);
        let limits = Limits {
            encoder: &e,
            max_seq_length: 16,
            max_text_chars: 20,
        };
        let pair = Input::pair("我喜欢汤", "喝汤");
        let n = limits.tokens(&pair.text_a) + limits.tokens(&pair.text_b) + 3;
        assert_eq!(of(TaskKind::Pair).input_cost(&pair, &limits), Ok(n));
        assert_eq!(
            of(TaskKind::PairRegression).input_cost(&pair, &limits),
            Ok(n)
        );
        let text = Input::text("妈妈做的汤");
        assert_eq!(of(TaskKind::Tagging).input_cost(&text, &limits), Ok(5 + 2));
        let long = Input::text("汤".repeat(30));
        let err = of(TaskKind::Tagging)
            .input_cost(&long, &limits)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "field `text` is 30 characters long; this model takes at most 20"
        );
        let err = of(TaskKind::Single).input_cost(&long, &limits).unwrap_err();
        assert!(
            err.to_string()
                .ends_with("tokens long; this model takes at most 16 with [CLS] and [SEP]"),
            "{err}"
        );
        let q = Input::choice(Some("上下文".into()), "汤", vec!["是".into(), "否".into()]);
        let per_row = 3 + limits.tokens(&q.question) + 4;
        let rows = of(TaskKind::ReadingChoice).input_cost(&q, &limits);
        assert_eq!(rows, Ok(2 * per_row.min(16)));
    }

    /// A model whose head gives fixed outputs: what the kinds' serving is tested against,
    /// without a network.
    struct Fixed {
        encoder: Encoder,
        head: Head,
        rows: Vec<Vec<f32>>,
        labels: Vec<String>,
    }

    impl Model for Fixed {
        fn dir(&self) -> &Path {
            Path::new("fixed")
        }

        fn head(&self) -> Head {
            self.head
        }

        fn head_name(&self) -> &'static str {
            "fixed-output"
        }

        fn encoder(&self) -> &Encoder {
            &self.encoder
        }

        fn labels(&self) -> &[String] {
            &self.labels
        }

        fn outputs(&self, split: &EncodedSplit, _batch_size: usize) -> Outputs {
            Outputs::Rows(self.rows.iter().take(split.rows.len()).cloned().collect())
        }
    }

    fn fixed(head: Head, rows: Vec<Vec<f32>>) -> Fixed {
        Fixed {
            encoder: encoder(16),
            head,
            rows,
            labels: vec!["0".into(), "1".into()],
        }
    }

    /// A classifier's requests become its labels' probabilities and the argmax label, texts
    /// echoed; a regressor's its one output, unsquashed; each kind takes only its own head.
    #[test]
    fn requests_become_predictions_through_the_model() {
        let model = fixed(Head::Classes(2), vec![vec![0.2, 0.8], vec![0.7, 0.3]]);
        let run = Run {
            model: &model,
            batch_size: 8,
        };
        let inputs = vec![Input::pair("我喜欢汤", "喝汤"), Input::pair("汤", "雨")];
        let got = of(TaskKind::Pair).predict_inputs(inputs, &run).unwrap();
        let Prediction::Class(first) = &got[0] else {
            panic!("{got:?}");
        };
        assert_eq!((first.label.as_str(), first.index), ("1", 1));
        assert_eq!(first.text_a.as_deref(), Some("我喜欢汤"));
        assert_eq!(first.by_label["0"], 0.2);
        assert!(matches!(&got[1], Prediction::Class(c) if c.label == "0"));

        let regressor = fixed(Head::Score, vec![vec![3.25]]);
        let run = Run {
            model: &regressor,
            batch_size: 8,
        };
        let got = of(TaskKind::PairRegression)
            .predict_inputs(vec![Input::pair("猫在睡觉", "猫睡着了")], &run)
            .unwrap();
        assert!(
            matches!(&got[0], Prediction::Score(s) if s.score == 3.25 && s.text_b == "猫睡着了")
        );
        let err = of(TaskKind::Pair)
            .predict_inputs(vec![Input::pair("汤", "雨")], &run)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "fixed: a fixed-output model, where a sequence classifier was expected"
        );
    }

    /// The words of every kind's errors, as they were.
    #[test]
    fn each_kind_names_its_fields_and_itself() {
        let input = |k| of(k).input();
        assert_eq!(
            input(TaskKind::PairRegression).model,
            "a sentence-pair regressor"
        );
        assert_eq!(input(TaskKind::PairRegression).fields, ["text_a", "text_b"]);
        assert_eq!(
            input(TaskKind::PairRegression).predicts,
            PredictionShape::Score
        );
        assert_eq!(input(TaskKind::Pair).model, "a sentence-pair classifier");
        assert_eq!(
            input(TaskKind::ReadingChoice).usage,
            "`context`, `question` and `choices` (2 to 4)"
        );
        assert_eq!(input(TaskKind::Choice).fields, ["question", "choices"]);
        assert_eq!(input(TaskKind::Span).predicts, PredictionShape::Answer);
    }
}
