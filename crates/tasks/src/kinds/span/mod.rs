//! Span extraction (CMRC 2018, any SQuAD v1 file): `AlbertForQuestionAnswering` on windows of
//! `[CLS] question [SEP] context-window [SEP]`, as transformers' `run_qa.py` builds them
//! ([`crate::span_features`], which also says why the defaults are 256/64 on a CPU).
//!
//! - Training: every window of every question, labelled with the first gold answer that is a
//!   span of the context (its first and last token), or `[CLS]` where the window does not hold
//!   it whole; the loss is transformers' mean of the start and end cross-entropies.
//! - Decoding: the best start ≤ end pair of context tokens, at most `max_answer_length` long,
//!   over all windows of a question, mapped back to the context's characters: the answer is
//!   always exactly a substring of the context.
//! - Scores: EM and F1 as CMRC 2018's official script computes them ([`cmrc_eval`]), the
//!   maximum over the gold answers; the best epoch is chosen by F1.
//!
//! What encoding cannot serve whole is counted in metrics.json's `encoding` block with every
//! question id: `answer_in_no_window` (the answer is longer than a window's context, so no
//! window is labelled with it), `answer_longer_than_max_answer_length` (the decoder can never
//! return it whole), `no_answer_span` (no gold answer is a span of the context: scored, not
//! trained on), `encoding_error` (the tokenizer's offsets were unusable; the question gets no
//! prediction). The reader's own counts (answers repaired, not in the context, dropped
//! questions) are in the protocol's file reports.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

pub mod cmrc_eval;
pub mod span_features;
pub mod squad;

use crate::{SpanMetricsBlock, TaskKind};
use cmrc_eval::GoldQuestion;
use span_features::{
    SpanConfig, SpanFeature, TokenizedContext, answer_tokens, char_range, decode, encode_with,
};
use squad::SquadExample;

use crate::kinds::encode::{Encoded, Encoder};
use crate::kinds::features::{EncodeNotes, EncodedSplit, Targets};
use crate::kinds::io::{AnswerPrediction, Input, InputError, Prediction, PredictionShape};
use crate::kinds::{Head, InputSpec, Kind, Limits, Run, Scores, SpanAnswer, clean_tsv};

/// The span-extraction kind.
pub struct Spans;

/// What decoding a span split needs: the windows (one per feature) and, per question, its id,
/// context, the context's tokens and the gold answers.
#[derive(Debug, Clone, PartialEq)]
pub struct SpanSplit {
    /// One window per feature, in the split's feature order; each names its question.
    pub features: Vec<SpanFeature>,
    /// Per question: its id, which the scoring matches predictions and gold answers by.
    pub ids: Vec<String>,
    /// Per question: its context, which every answer is a substring of.
    pub contexts: Vec<Arc<str>>,
    /// Per question: its context's tokens and their byte ranges (empty where encoding
    /// failed).
    pub tokens: Vec<TokenizedContext>,
    /// Per question: the gold answers' texts; empty for a question without any (not scored),
    /// as in `predict`.
    pub gold: Vec<Vec<String>>,
    /// The window and decoding parameters the features were built with.
    pub config: SpanConfig,
}

/// The features of `examples` (questions on contexts; gold answers optional, as in `predict`).
pub fn encode_questions(name: &str, examples: &[SquadExample], encoder: &Encoder) -> EncodedSplit {
    let cfg = encoder.span;
    let mut notes = EncodeNotes::default();
    let mut s = SpanSplit {
        features: Vec::new(),
        ids: Vec::new(),
        contexts: Vec::new(),
        tokens: Vec::new(),
        gold: Vec::new(),
        config: cfg,
    };
    let tokenize =
        |t: &str, ids: &mut Vec<u32>, st: &mut Vec<u32>| encoder.tokens_with_offsets(t, ids, st);
    for (i, e) in examples.iter().enumerate() {
        let target = e.target();
        if target.is_none() && !e.answers.is_empty() {
            notes.record("no_answer_span", &e.id);
        }
        let (ctx, features) = match encode_with(
            tokenize,
            i,
            &e.question,
            &e.context,
            target,
            encoder.specials(),
            &cfg,
        ) {
            Ok(x) => x,
            Err(_) => {
                notes.record("encoding_error", &e.id);
                let none = TokenizedContext {
                    ids: Vec::new(),
                    spans: Vec::new(),
                };
                (none, Vec::new())
            }
        };
        if let Some(t) = target {
            check_target(&e.id, t, &ctx, &features, &cfg, &mut notes);
        }
        s.features.extend(features);
        s.ids.push(e.id.clone());
        s.contexts.push(e.context.clone());
        s.tokens.push(ctx);
        s.gold
            .push(e.gold_texts().into_iter().map(str::to_string).collect());
    }
    let rows = s
        .features
        .iter()
        .map(|f| {
            vec![Encoded {
                ids: f.input_ids.clone(),
                types: f.token_type_ids.iter().map(|&t| t as u8).collect(),
            }]
        })
        .collect();
    let targets = s
        .features
        .iter()
        .map(|f| (f.start_position, f.end_position))
        .collect();
    EncodedSplit {
        name: name.into(),
        examples: examples.len(),
        rows,
        targets: Targets::Spans(targets),
        decoding: Box::new(s),
        notes,
    }
}

/// Notes an answer no window is labelled with, or one longer than the decoder returns.
fn check_target(
    id: &str,
    target: &std::ops::Range<usize>,
    ctx: &TokenizedContext,
    features: &[SpanFeature],
    cfg: &SpanConfig,
    notes: &mut EncodeNotes,
) {
    if !features.iter().any(SpanFeature::has_answer) {
        notes.record("answer_in_no_window", id);
    }
    if let Some((s, e)) = answer_tokens(&ctx.spans, 0..ctx.ids.len(), target)
        && e + 1 - s > cfg.max_answer_length
    {
        notes.record("answer_longer_than_max_answer_length", id);
    }
}

/// The best answer of every question from its windows' logits.
pub fn decode_answers(s: &SpanSplit, logits: &[(Vec<f32>, Vec<f32>)]) -> Vec<Option<SpanAnswer>> {
    let mut windows: Vec<Vec<usize>> = vec![Vec::new(); s.ids.len()];
    for (k, f) in s.features.iter().enumerate() {
        if let Some(w) = windows.get_mut(f.example) {
            w.push(k);
        }
    }
    windows
        .iter()
        .enumerate()
        .map(|(i, ks)| {
            let features: Vec<&SpanFeature> = ks.iter().map(|&k| &s.features[k]).collect();
            let lg: Vec<(&[f32], &[f32])> = ks
                .iter()
                .filter_map(|&k| logits.get(k))
                .map(|(a, b)| (&a[..], &b[..]))
                .collect();
            if lg.len() != features.len() {
                return None;
            }
            let best = decode(&features, &lg, &s.tokens[i], &s.config).ok()?;
            let c = best.into_iter().next()?;
            let context = &s.contexts[i];
            Some(SpanAnswer {
                text: context.get(c.span.clone())?.to_string(),
                chars: char_range(context, &c.span),
                bytes: c.span,
                probability: c.probability,
                score: c.score,
            })
        })
        .collect()
}

/// EM and F1 of `answers` against the split's gold, as CMRC 2018's script computes them.
pub fn score_answers(s: &SpanSplit, answers: &[Option<SpanAnswer>]) -> SpanMetricsBlock {
    let gold: Vec<GoldQuestion> = s
        .ids
        .iter()
        .zip(&s.gold)
        .filter(|(_, g)| !g.is_empty())
        .map(|(id, g)| GoldQuestion {
            id: id.clone(),
            answers: g.clone(),
        })
        .collect();
    let predictions: HashMap<String, String> = s
        .ids
        .iter()
        .zip(answers)
        .filter_map(|(id, a)| Some((id.clone(), a.as_ref()?.text.clone())))
        .collect();
    SpanMetricsBlock::from_scores(&cmrc_eval::evaluate(&gold, &predictions))
}

impl Kind for Spans {
    const KIND: TaskKind = TaskKind::Span;
    type Example = SquadExample;
    type Features = SpanSplit;
    type Output = (Vec<f32>, Vec<f32>);
    type Prediction = Option<SpanAnswer>;

    fn head(&self, _labels: &[String]) -> Head {
        Head::Span
    }

    fn encode(&self, name: &str, examples: &[SquadExample], encoder: &Encoder) -> EncodedSplit {
        encode_questions(name, examples, encoder)
    }

    fn decode(
        &self,
        features: &SpanSplit,
        logits: Vec<(Vec<f32>, Vec<f32>)>,
    ) -> Vec<Option<SpanAnswer>> {
        decode_answers(features, &logits)
    }

    fn score(
        &self,
        _split: &EncodedSplit,
        features: &SpanSplit,
        answers: &[Option<SpanAnswer>],
        _labels: &[String],
    ) -> anyhow::Result<Scores> {
        Ok(Scores::spans(score_answers(features, answers)))
    }

    fn prediction_header(&self, _labels: &[String]) -> String {
        "set\tid\tquestion\tgold\tpredicted\tstart\tend\tprobability".into()
    }

    fn prediction_rows(
        &self,
        name: &str,
        examples: &[SquadExample],
        answers: &[Option<SpanAnswer>],
        _labels: &[String],
        out: &mut String,
    ) {
        for (e, a) in examples.iter().zip(answers) {
            let gold = e.gold_texts().join(" | ");
            let (text, start, end, p) = match a {
                Some(a) => (
                    a.text.as_str(),
                    a.chars.start.to_string(),
                    a.chars.end.to_string(),
                    format!("{:.6}", a.probability),
                ),
                None => ("", String::new(), String::new(), String::new()),
            };
            let _ = writeln!(
                out,
                "{name}\t{}\t{}\t{}\t{}\t{start}\t{end}\t{p}",
                clean_tsv(&e.id),
                clean_tsv(&e.question),
                clean_tsv(&gold),
                clean_tsv(text)
            );
        }
    }

    fn input(&self) -> InputSpec {
        InputSpec {
            fields: &["context", "question"],
            usage: "`context` and `question`",
            model: "a span extractor",
            predicts: PredictionShape::Answer,
        }
    }

    /// The context is cut into windows, so only its characters are bounded.
    fn input_cost(&self, input: &Input, limits: &Limits) -> Result<usize, InputError> {
        Ok(limits.text("context", &input.context)? + limits.tokens(&input.question) + 3)
    }

    fn predict_inputs(&self, inputs: Vec<Input>, run: &Run) -> anyhow::Result<Vec<Prediction>> {
        answer_inputs(inputs, run)
    }

    fn recognises(&self, architecture: &str, _named: Option<TaskKind>) -> bool {
        architecture == "AlbertForQuestionAnswering"
    }

    fn span_windows(&self) -> bool {
        true
    }
}

/// Each question's answer span in its context (none for a context without any token).
fn answer_inputs(inputs: Vec<Input>, run: &Run) -> anyhow::Result<Vec<Prediction>> {
    let questions: Vec<SquadExample> = inputs
        .into_iter()
        .enumerate()
        .map(|(i, x)| SquadExample {
            id: format!("{}", i + 1),
            article: i,
            context: Arc::from(x.context.unwrap_or_default()),
            question: x.question.unwrap_or_default().trim().to_string(),
            answers: Vec::new(),
            file: 0,
        })
        .collect();
    let split = encode_questions("predict", &questions, run.model.encoder());
    let answers = run.predict(&Spans, &split, run.batch_size)?;
    Ok(questions
        .into_iter()
        .zip(answers)
        .map(|(q, a)| {
            Prediction::Answer(AnswerPrediction {
                question: q.question,
                start: a.as_ref().map(|a| a.chars.start),
                end: a.as_ref().map(|a| a.chars.end),
                probability: a.as_ref().map(|a| a.probability),
                score: a.as_ref().map(|a| a.score),
                answer: a.map(|a| a.text),
            })
        })
        .collect())
}

#[cfg(test)]
mod tests;
