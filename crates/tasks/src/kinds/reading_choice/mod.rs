//! Multiple choice on a context (C3): `AlbertForMultipleChoice` scoring one row per choice,
//! `[CLS] context [SEP] question [SEP] choice [SEP]`, the context first as CLUE's C3 baseline
//! builds it ([`Encoder::encode_context_choice`], with its truncation: the longest of context,
//! choice and question is cut first).
//!
//! Every question has 4 rows: one with fewer real choices is padded with empty ones, as CLUE
//! does, and trained as CLUE trains them (a padding row is never the answer, so the loss pushes
//! it down). The padding is never predicted: the decoded probabilities are the softmax over
//! the real choices only (a padding choice gets 0), so the prediction is
//! [`crate::c3::best_real_choice`] of the scores (tested below). Scored by accuracy,
//! the classes being the answer positions `0` … `3`.
//!
//! Questions whose context had to be cut to fit `max_seq_length` are counted with their ids
//! in metrics.json's `encoding` block (`context_truncated`): C3's documents run to hundreds of
//! characters, and a cut context may have lost the answer's evidence.

use std::fmt::Write as _;

pub mod c3;

use c3::{C3_CHOICES, C3Example};

use crate::TaskKind;
use crate::kinds::argmax;
use crate::kinds::encode::Encoder;
use crate::kinds::features::{EncodeNotes, EncodedSplit, Targets};
use crate::kinds::io::{ChoicePrediction, Input, InputError, Prediction, PredictionShape};
use crate::kinds::{Head, InputSpec, Kind, Limits, Run, Scores, classify, clean_tsv};

/// The multiple-choice reading kind.
pub struct ReadingChoices;

/// The features of C3 questions (in `predict`, `answer` may be any real choice).
pub fn encode_questions(name: &str, examples: &[C3Example], encoder: &Encoder) -> EncodedSplit {
    let mut notes = EncodeNotes::default();
    let rows = examples
        .iter()
        .map(|e| {
            let rows: Vec<_> = e
                .choices
                .iter()
                .map(|c| encoder.encode_context_choice(&e.context, &e.question, c))
                .collect();
            if rows.iter().any(|(_, cut)| *cut) {
                notes.record("context_truncated", &e.id);
            }
            rows.into_iter().map(|(r, _)| r).collect()
        })
        .collect();
    EncodedSplit {
        name: name.into(),
        examples: examples.len(),
        rows,
        targets: Targets::Classes(examples.iter().map(|e| e.answer).collect()),
        decoding: Box::new(RealChoices(
            examples.iter().map(|e| e.real_choices).collect(),
        )),
        notes,
    }
}

/// The real choices of each question (the rest of its rows are padding, never predicted).
#[derive(Debug, Clone, PartialEq)]
pub struct RealChoices(pub Vec<usize>);

/// The choice probabilities of one question renormalised over its `real` choices, the
/// padding's set to 0 (the head's softmax ran over all 4).
pub fn mask_padding(p: &[f32], real: usize) -> Vec<f32> {
    let total: f32 = p.iter().take(real).sum();
    p.iter()
        .enumerate()
        .map(|(i, &x)| {
            if i >= real {
                0.0
            } else if total > 0.0 {
                x / total
            } else {
                x
            }
        })
        .collect()
}

impl Kind for ReadingChoices {
    const KIND: TaskKind = TaskKind::ReadingChoice;
    type Example = C3Example;
    type Features = RealChoices;
    type Output = Vec<f32>;
    type Prediction = Vec<f32>;

    fn head(&self, _labels: &[String]) -> Head {
        Head::Choice
    }

    fn encode(&self, name: &str, examples: &[C3Example], encoder: &Encoder) -> EncodedSplit {
        encode_questions(name, examples, encoder)
    }

    fn decode(&self, real: &RealChoices, outputs: Vec<Vec<f32>>) -> Vec<Vec<f32>> {
        outputs
            .iter()
            .zip(&real.0)
            .map(|(p, &r)| mask_padding(p, r))
            .collect()
    }

    fn score(
        &self,
        split: &EncodedSplit,
        _real: &RealChoices,
        predictions: &[Vec<f32>],
        labels: &[String],
    ) -> anyhow::Result<Scores> {
        classify::score(split, predictions, labels)
    }

    fn prediction_header(&self, labels: &[String]) -> String {
        let mut text = String::from("set\tid\tcontext\tquestion\tchoices\tgold\tpredicted");
        for l in labels {
            let _ = write!(text, "\tp_{l}");
        }
        text
    }

    fn prediction_rows(
        &self,
        name: &str,
        examples: &[C3Example],
        predictions: &[Vec<f32>],
        _labels: &[String],
        out: &mut String,
    ) {
        for (e, p) in examples.iter().zip(predictions) {
            let choices = e.choices[..e.real_choices.min(C3_CHOICES)].join(" | ");
            let _ = write!(
                out,
                "{name}\t{}\t{}\t{}\t{}\t{}\t{}",
                clean_tsv(&e.id),
                clean_tsv(&e.context),
                clean_tsv(&e.question),
                clean_tsv(&choices),
                e.answer,
                argmax(p)
            );
            for x in p {
                let _ = write!(out, "\t{x:.6}");
            }
            out.push('\n');
        }
    }

    fn input(&self) -> InputSpec {
        InputSpec {
            fields: &["context", "question", "choices"],
            usage: "`context`, `question` and `choices` (2 to 4)",
            model: "a multiple-choice model on a context (C3)",
            predicts: PredictionShape::Choice,
        }
    }

    fn input_cost(&self, input: &Input, limits: &Limits) -> Result<usize, InputError> {
        choices_cost(input, limits)
    }

    fn predict_inputs(&self, inputs: Vec<Input>, run: &Run) -> anyhow::Result<Vec<Prediction>> {
        choose(inputs, run, |questions, encoder| {
            encode_questions("predict", questions, encoder)
        })
    }
}

/// The tokens of a choice question's rows, one per choice, each at most `max_seq_length` (a
/// row is cut to fit, the context first); the context, cut into no windows but bounded by
/// characters, is in each.
pub fn choices_cost(input: &Input, limits: &Limits) -> Result<usize, InputError> {
    let context = limits.text("context", &input.context)?;
    let n = input.choices.as_ref().map_or(0, Vec::len);
    Ok(n * (context + limits.tokens(&input.question) + 4).min(limits.max_seq_length))
}

/// Each question's choice, its rows made by `encode` from the questions as C3 questions (the
/// options trimmed and padded to 4), decoded as C3's: the padding never chosen.
pub fn choose(
    inputs: Vec<Input>,
    run: &Run,
    encode: impl Fn(&[C3Example], &Encoder) -> EncodedSplit,
) -> anyhow::Result<Vec<Prediction>> {
    let questions: Vec<C3Example> = inputs.into_iter().map(c3_question).collect();
    let split = encode(&questions, run.model.encoder());
    // Questions have up to 4 rows each: a batch of `batch_size` rows.
    let batch = (run.batch_size / C3_CHOICES).max(1);
    let probs = run.predict(&ReadingChoices, &split, batch)?;
    Ok(questions
        .into_iter()
        .zip(probs)
        .map(|(q, p)| {
            let k = argmax(&p);
            let real = q.real_choices.min(p.len());
            Prediction::Choice(ChoicePrediction {
                answer: q.choices.get(k).cloned().unwrap_or_default(),
                choices: q.choices[..q.real_choices].to_vec(),
                question: q.question,
                choice: k,
                probabilities: p[..real].to_vec(),
            })
        })
        .collect())
}

/// A choice input (its shape checked) as a C3 question, the options trimmed and padded.
fn c3_question(x: Input) -> C3Example {
    let given = x.choices.unwrap_or_default();
    let real_choices = given.len().min(C3_CHOICES);
    let mut choices: [String; C3_CHOICES] = Default::default();
    for (c, g) in choices.iter_mut().zip(given) {
        *c = g.trim().to_string();
    }
    C3Example {
        id: "question".into(),
        document: 0,
        context: x.context.unwrap_or_default(),
        question: x.question.unwrap_or_default().trim().to_string(),
        choices,
        real_choices,
        answer: 0,
        file: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::c3::best_real_choice;

    #[test]
    fn the_padding_is_never_predicted_and_the_choice_is_best_real_choice() {
        let cases: [(&[f32], usize); 4] = [
            (&[0.1, 0.2, 0.3, 0.4], 3),
            (&[0.1, 0.1, 0.1, 0.7], 2),
            (&[0.3, 0.3, 0.2, 0.2], 4),
            (&[0.0, 0.0, 0.5, 0.5], 2),
        ];
        for (p, real) in cases {
            let m = mask_padding(p, real);
            assert!(m[real..].iter().all(|&x| x == 0.0), "{m:?}");
            assert_eq!(argmax(&m), best_real_choice(p, real), "{p:?} {real}");
            if p[..real].iter().sum::<f32>() > 0.0 {
                assert!((m.iter().sum::<f32>() - 1.0).abs() < 1e-6);
            }
        }
    }
}
