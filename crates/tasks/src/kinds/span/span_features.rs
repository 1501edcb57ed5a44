//! Span-extraction features and their decoding, as transformers' question-answering example
//! builds them (`examples/pytorch/question-answering/run_qa.py`: `prepare_train_features`,
//! `prepare_validation_features`; `utils_qa.py`: `postprocess_qa_predictions`), over any
//! tokenizer: the caller gives token ids and byte offsets into the context, so this crate does
//! not depend on the tokenizer's.
//!
//! - Input: `[CLS] question [SEP] context-window [SEP]`, token types 0 for the first part and
//!   1 for the window and its `[SEP]`. The question is cut to `max_query_length` tokens (as
//!   BERT's `run_squad.py` does; `run_qa.py` has no such cut and fails on a question longer than
//!   the window), so every window holds at least `max_seq_length - max_query_length - 3` context
//!   tokens.
//! - Windows: the context's tokens in windows as long as fits, each starting `doc_stride`
//!   tokens before the previous one ended (the `stride` of the Hugging Face tokenizer's
//!   overflowing tokens: `doc_stride` is the overlap, not the step), the last one ending with
//!   the context.
//! - Training labels: the answer's first and last token positions in a window that holds the
//!   whole answer (by `run_qa.py`'s offset rule: the last token starting at or before the
//!   answer's start, the first token ending at or after its end), else both at `[CLS]`
//!   (position 0).
//! - Decoding: over all windows of an example, the pair start ≤ end of context tokens, at most
//!   `max_answer_length` tokens long, with the highest start + end logit; its text is the
//!   context from the start token's first byte to the end token's last, so the answer is always
//!   exactly a substring of the context. `postprocess_qa_predictions` approximates the search
//!   with the 20 best starts × 20 best ends of each window; this enumerates every pair (at most
//!   window × `max_answer_length` = 12,800 a window at the defaults, microseconds beside the
//!   encoder), so the best pair is exact, and where run_qa finds a pair ours scores as high or
//!   higher. The n-best list (`n_best_size`) is kept with softmax probabilities over it, as
//!   run_qa's, with a span found in two overlapping windows listed once (its best score).
//!
//! Defaults ([`SpanConfig::default`]): `max_seq_length` 256, `doc_stride` 64, `max_query_length`
//! 64, `max_answer_length` 50, `n_best_size` 20, chosen for the CPU by counting on CMRC 2018 dev
//! (3,219 questions; contexts of 478 tokens and questions of 16 on average with the
//! bert-base-chinese vocabulary, lower-cased WordPiece as the vocab stage builds it; measured
//! 2026-11-25): 256/64 makes 9,363 windows, 2.40 M padded tokens per epoch, the same as
//! run_qa's 384/128 (6,327 windows, 2.43 M), with a third fewer attention-score entries
//! (0.61 against 0.93 · 10⁹) and 2.25× less attention memory a window, and fewer positions
//! beyond the 128 our pretraining trains; 256/128 would cost 26 % more tokens (11,967 windows,
//! 3.06 M). Every first gold answer is whole in some window at 256/64 (3,219 of 3,219: an
//! answer of up to `doc_stride` + 1 tokens always is, a property tested below), and 3,218 of
//! them start and end on token boundaries. `max_answer_length` 50 (run_qa: 30) covers 3,187 of
//! the 3,219 (99.0 %) in tokens.

use std::collections::HashMap;
use std::ops::Range;

/// The feature and decoding parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SpanConfig {
    /// Tokens of a feature, `[CLS] question [SEP] window [SEP]` (unpadded, at most this).
    pub max_seq_length: usize,
    /// Context tokens two consecutive windows share (the overlap, not the step).
    pub doc_stride: usize,
    /// Question tokens kept; the rest is cut.
    pub max_query_length: usize,
    /// The longest answer decoded, in context tokens.
    pub max_answer_length: usize,
    /// Answers kept per example in the n-best list.
    pub n_best_size: usize,
}

impl Default for SpanConfig {
    fn default() -> Self {
        SpanConfig {
            max_seq_length: 256,
            doc_stride: 64,
            max_query_length: 64,
            max_answer_length: 50,
            n_best_size: 20,
        }
    }
}

/// Parameters or inputs that cannot make features.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpanError {
    /// A window too short for the stride: `max_seq_length` less the question and the 3
    /// special tokens leaves no more than `doc_stride` context tokens.
    #[error(
        "max_seq_length {max_seq_length} leaves {window} context tokens a window after a \
         question of max_query_length {max_query_length} and 3 special tokens, not more than \
         doc_stride {doc_stride}: raise max_seq_length or lower doc_stride / max_query_length"
    )]
    Config {
        /// [`SpanConfig::max_seq_length`].
        max_seq_length: usize,
        /// [`SpanConfig::max_query_length`].
        max_query_length: usize,
        /// [`SpanConfig::doc_stride`].
        doc_stride: usize,
        /// The context tokens a window holds, `max_seq_length - max_query_length - 3`
        /// (negative when the question alone does not fit).
        window: isize,
    },
    /// A length or count of the config that is 0.
    #[error("{what} must be at least 1")]
    Zero {
        /// The field's name (`max_answer_length`, `n_best_size`, `max_query_length`).
        what: &'static str,
    },
    /// A token's offsets that are not character boundaries of the context, fall outside it,
    /// or are out of order.
    #[error(
        "token {index}: offset {offset} is not a character boundary of the {len}-byte context, \
         or the offsets are not ascending"
    )]
    Offsets {
        /// The token's 0-based position in the context's tokens.
        index: usize,
        /// Its start byte.
        offset: usize,
        /// The context's length in bytes.
        len: usize,
    },
    /// A tokenizer's ids and offsets that differ in number.
    #[error("{ids} token ids but {offsets} offsets")]
    Lengths {
        /// Token ids.
        ids: usize,
        /// Offsets (starts or byte ranges).
        offsets: usize,
    },
    /// A window's start or end logits shorter than its input.
    #[error("window {feature}: {logits} logits for {positions} positions")]
    Logits {
        /// The window's 0-based position among the example's features.
        feature: usize,
        /// The shorter of its start and end logits' lengths.
        logits: usize,
        /// Its input positions (`input_ids.len()`).
        positions: usize,
    },
}

impl SpanConfig {
    /// The defaults at window length `max_seq_length`, the question cut and the stride
    /// shrunk where the window is too short for them (a quarter of it for the question, and
    /// half of what remains for the overlap), so that any length from 8 up makes windows:
    /// what `pipeline predict` uses at its `--max-seq-length`.
    pub fn for_length(max_seq_length: usize) -> SpanConfig {
        let d = SpanConfig::default();
        let max_query_length = d.max_query_length.min(max_seq_length / 4).max(1);
        let window = max_seq_length.saturating_sub(max_query_length + 3);
        SpanConfig {
            max_seq_length,
            max_query_length,
            doc_stride: d.doc_stride.min(window.saturating_sub(1) / 2),
            ..d
        }
    }

    /// Checks that every window can hold more than `doc_stride` context tokens.
    pub fn validate(&self) -> Result<(), SpanError> {
        for (what, v) in [
            ("max_answer_length", self.max_answer_length),
            ("n_best_size", self.n_best_size),
            ("max_query_length", self.max_query_length),
        ] {
            if v == 0 {
                return Err(SpanError::Zero { what });
            }
        }
        let window = self.max_seq_length as isize - self.max_query_length as isize - 3;
        if window <= self.doc_stride as isize {
            return Err(SpanError::Config {
                max_seq_length: self.max_seq_length,
                max_query_length: self.max_query_length,
                doc_stride: self.doc_stride,
                window,
            });
        }
        Ok(())
    }
}

/// The ids of the two special tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Specials {
    /// `[CLS]`, the first token; its position (0) is the label of "no answer here".
    pub cls: u32,
    /// `[SEP]`, after the question and after the window.
    pub sep: u32,
}

/// A context's tokens: ids and the byte range of each in the context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenizedContext {
    /// The token ids, in order.
    pub ids: Vec<u32>,
    /// Each token's byte range in the context, on character boundaries, starts and ends
    /// ascending.
    pub spans: Vec<Range<usize>>,
}

impl TokenizedContext {
    /// From a tokenizer that gives each token's start byte only (this workspace's
    /// `TokenizeWithOffsets`): a token ends where the next starts, or at the end of the
    /// context, less trailing whitespace. A token then also covers characters the tokenizer
    /// dropped inside or after it (control characters), which keeps every answer a substring.
    pub fn from_starts(context: &str, ids: Vec<u32>, starts: &[u32]) -> Result<Self, SpanError> {
        if ids.len() != starts.len() {
            return Err(SpanError::Lengths {
                ids: ids.len(),
                offsets: starts.len(),
            });
        }
        let mut last = 0;
        for (i, &s) in starts.iter().enumerate() {
            let s = s as usize;
            if s < last || !context.is_char_boundary(s) {
                return Err(SpanError::Offsets {
                    index: i,
                    offset: s,
                    len: context.len(),
                });
            }
            last = s;
        }
        let spans = starts
            .iter()
            .enumerate()
            .map(|(i, &s)| {
                let s = s as usize;
                let next = starts.get(i + 1).map_or(context.len(), |&n| n as usize);
                s..s + context[s..next].trim_end().len()
            })
            .collect();
        Ok(TokenizedContext { ids, spans })
    }

    /// From explicit byte ranges (a tokenizer with start and end offsets); they must be on
    /// character boundaries, with starts and ends ascending (the labelling searches them).
    pub fn from_spans(
        context: &str,
        ids: Vec<u32>,
        spans: Vec<Range<usize>>,
    ) -> Result<Self, SpanError> {
        if ids.len() != spans.len() {
            return Err(SpanError::Lengths {
                ids: ids.len(),
                offsets: spans.len(),
            });
        }
        let (mut last_start, mut last_end) = (0, 0);
        for (i, s) in spans.iter().enumerate() {
            let disordered = s.start < last_start || s.end < last_end;
            if disordered || s.end < s.start || context.get(s.clone()).is_none() {
                return Err(SpanError::Offsets {
                    index: i,
                    offset: s.start,
                    len: context.len(),
                });
            }
            (last_start, last_end) = (s.start, s.end);
        }
        Ok(TokenizedContext { ids, spans })
    }
}

/// One window of one example.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpanFeature {
    /// The example's index (the caller's numbering).
    pub example: usize,
    /// `[CLS] question [SEP] window [SEP]`, unpadded.
    pub input_ids: Vec<u32>,
    /// 0 for `[CLS] question [SEP]`, 1 for the window and its `[SEP]`; as long as `input_ids`.
    pub token_type_ids: Vec<u32>,
    /// Position in `input_ids` of the window's first context token.
    pub context_start: usize,
    /// The window: indices into the context's tokens.
    pub window: Range<usize>,
    /// Training labels: positions in `input_ids` (0, `[CLS]`, when the window does not hold
    /// the whole answer or there is none).
    pub start_position: usize,
    /// The answer's last token, as `start_position` (0 with it).
    pub end_position: usize,
}

impl SpanFeature {
    /// The context token at input position `pos`, if it is one.
    pub fn context_token(&self, pos: usize) -> Option<usize> {
        let i = pos.checked_sub(self.context_start)?;
        (i < self.window.len()).then(|| self.window.start + i)
    }

    /// Whether the window holds the answer (the labels are not `[CLS]`).
    pub fn has_answer(&self) -> bool {
        self.start_position != 0
    }
}

/// The windows over `n` context tokens: `len` tokens each (> `overlap`), the next starting
/// `overlap` tokens before the previous one ends, the last ending at `n`. One (empty) window
/// when `n` is 0.
pub fn windows(n: usize, len: usize, overlap: usize) -> Vec<Range<usize>> {
    debug_assert!(len > overlap);
    let mut out = Vec::with_capacity(n / (len - overlap).max(1) + 1);
    out.push(0..n.min(len));
    while let Some(last) = out.last().filter(|w| w.end < n) {
        let start = last.end - overlap;
        out.push(start..(start + len).min(n));
    }
    out
}

/// The features of one example. `answer` is the gold span in context bytes (training); `None`
/// labels every window `[CLS]` (evaluation and prediction).
pub fn build_features(
    example: usize,
    question_ids: &[u32],
    context: &TokenizedContext,
    answer: Option<&Range<usize>>,
    specials: Specials,
    cfg: &SpanConfig,
) -> Result<Vec<SpanFeature>, SpanError> {
    cfg.validate()?;
    let question = &question_ids[..question_ids.len().min(cfg.max_query_length)];
    let len = cfg.max_seq_length - question.len() - 3;
    let context_start = question.len() + 2;
    let features = windows(context.ids.len(), len, cfg.doc_stride)
        .into_iter()
        .map(|window| {
            let mut input_ids = Vec::with_capacity(context_start + window.len() + 1);
            input_ids.push(specials.cls);
            input_ids.extend_from_slice(question);
            input_ids.push(specials.sep);
            input_ids.extend_from_slice(&context.ids[window.clone()]);
            input_ids.push(specials.sep);
            let mut token_type_ids = vec![0; context_start];
            token_type_ids.resize(input_ids.len(), 1);
            let (start_position, end_position) = answer
                .and_then(|a| answer_tokens(&context.spans, window.clone(), a))
                .map_or((0, 0), |(s, e)| {
                    (
                        context_start + s - window.start,
                        context_start + e - window.start,
                    )
                });
            SpanFeature {
                example,
                input_ids,
                token_type_ids,
                context_start,
                window,
                start_position,
                end_position,
            }
        })
        .collect();
    Ok(features)
}

/// Tokenizes `question` and `context` with `tokenize` (a tokenizer's "append the ids of this
/// text's tokens and their start bytes", the signature of the text crate's
/// `TokenizeWithOffsets::encode_with_offsets`) and builds the example's features; returns the
/// context's tokens too, which [`decode`] needs.
pub fn encode_with(
    tokenize: impl Fn(&str, &mut Vec<u32>, &mut Vec<u32>),
    example: usize,
    question: &str,
    context: &str,
    answer: Option<&Range<usize>>,
    specials: Specials,
    cfg: &SpanConfig,
) -> Result<(TokenizedContext, Vec<SpanFeature>), SpanError> {
    let (mut ids, mut starts) = (Vec::new(), Vec::new());
    tokenize(question, &mut ids, &mut starts);
    let question_ids = std::mem::take(&mut ids);
    starts.clear();
    tokenize(context, &mut ids, &mut starts);
    let ctx = TokenizedContext::from_starts(context, ids, &starts)?;
    let features = build_features(example, &question_ids, &ctx, answer, specials, cfg)?;
    Ok((ctx, features))
}

/// `run_qa.py`'s labels: the first and last context tokens (indices into `spans`) of `answer`
/// in `window`, or `None` when the window does not hold the whole answer.
pub fn answer_tokens(
    spans: &[Range<usize>],
    window: Range<usize>,
    answer: &Range<usize>,
) -> Option<(usize, usize)> {
    let (first, last) = (window.start, window.end.checked_sub(1)?);
    if window.is_empty() || spans[first].start > answer.start || spans[last].end < answer.end {
        return None;
    }
    // The last token that starts at or before the answer, and the first that ends at or after
    // it (both exist: `first` starts before it and `last` ends after it).
    let start = first + spans[first..=last].partition_point(|s| s.start <= answer.start) - 1;
    let end = first + spans[first..=last].partition_point(|s| s.end < answer.end);
    Some((start, end.max(start)))
}

/// A decoded answer.
#[derive(Debug, Clone, PartialEq)]
pub struct SpanCandidate {
    /// Bytes of the context; the answer is `&context[span]`.
    pub span: Range<usize>,
    /// The start logit of its first token (in the window where it scored best).
    pub start_logit: f32,
    /// The end logit of its last token (in the same window).
    pub end_logit: f32,
    /// `start_logit + end_logit`.
    pub score: f32,
    /// Softmax of the scores over the n-best list.
    pub probability: f32,
}

/// The n best answers of one example from its windows' logits (each `(start, end)` over the
/// window's input positions, padding beyond them ignored), best first; empty only when no
/// window has a context token or every score is NaN.
pub fn decode(
    features: &[&SpanFeature],
    logits: &[(&[f32], &[f32])],
    context: &TokenizedContext,
    cfg: &SpanConfig,
) -> Result<Vec<SpanCandidate>, SpanError> {
    let mut best: HashMap<Range<usize>, (f32, f32, f32)> = HashMap::new();
    for (k, (f, (start, end))) in features.iter().zip(logits).enumerate() {
        let positions = f.input_ids.len();
        if start.len() < positions || end.len() < positions {
            return Err(SpanError::Logits {
                feature: k,
                logits: start.len().min(end.len()),
                positions,
            });
        }
        let ctx = f.context_start..f.context_start + f.window.len();
        for s in ctx.clone() {
            for e in s..ctx.end.min(s + cfg.max_answer_length) {
                let score = start[s] + end[e];
                if score.is_nan() {
                    continue;
                }
                let (ts, te) = (f.context_token(s), f.context_token(e));
                let (Some(ts), Some(te)) = (ts, te) else {
                    continue;
                };
                let span = context.spans[ts].start..context.spans[te].end;
                let entry = best.entry(span).or_insert((f32::NEG_INFINITY, 0.0, 0.0));
                if score > entry.0 {
                    *entry = (score, start[s], end[e]);
                }
            }
        }
    }
    let mut list: Vec<SpanCandidate> = best
        .into_iter()
        .map(|(span, (score, start_logit, end_logit))| SpanCandidate {
            span,
            start_logit,
            end_logit,
            score,
            probability: 0.0,
        })
        .collect();
    // Best first; ties by position, so the result does not depend on hashing.
    list.sort_by(|a, b| {
        (b.score.total_cmp(&a.score))
            .then(a.span.start.cmp(&b.span.start))
            .then(a.span.end.cmp(&b.span.end))
    });
    list.truncate(cfg.n_best_size);
    softmax_into(&mut list);
    Ok(list)
}

/// `probability` = softmax of `score` over the list (log-sum-exp shifted, as run_qa's).
fn softmax_into(list: &mut [SpanCandidate]) {
    let Some(max) = list.first().map(|c| c.score) else {
        return;
    };
    let exp: Vec<f64> = list
        .iter()
        .map(|c| f64::from(c.score - max).exp())
        .collect();
    let sum: f64 = exp.iter().sum();
    for (c, e) in list.iter_mut().zip(exp) {
        c.probability = (e / sum) as f32;
    }
}

/// The character range of byte range `span` of `text` (answers are reported in characters, as
/// SQuAD's `answer_start`).
pub fn char_range(text: &str, span: &Range<usize>) -> Range<usize> {
    let start = crate::squad::char_offset(text, span.start);
    start..start + text.get(span.clone()).map_or(0, |s| s.chars().count())
}

#[cfg(test)]
#[path = "span_features_tests.rs"]
mod tests;
