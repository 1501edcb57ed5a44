//! Texts to token ids, as albert_zh's `run_classifier.py`
//! and `run_ner.py` build their inputs: `[CLS] a [SEP] b [SEP]` with BERT's longest-first
//! truncation for pairs, `[CLS] text [SEP]` (token types 0) for single texts, for tagging
//! the word pieces of each character (see [`crate::kinds::tagging`] for the windows), for C3
//! `[CLS] context [SEP] question [SEP] choice [SEP]` as CLUE's baseline builds it, and for span
//! extraction the tokens with their offsets ([`crate::kinds::span`] makes the windows).

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use pipeline_text::vocab::Vocab;
use pipeline_text::wordpiece::{TokenizeWithOffsets, load_tokenizer};

use crate::TaskKind;
use crate::span_features::{SpanConfig, Specials};

/// Tokens per row when no param or flag says otherwise (span extraction: its window,
/// [`SpanConfig::default`]'s).
pub const DEFAULT_MAX_SEQ_LENGTH: usize = 128;

/// How examples become rows: tokens per row and, for span extraction, the windows. Resolved in
/// one place for training (the finetune stage's `TrainParams::encoding`) and for prediction
/// ([`Encoding::for_prediction`]), capped there at the model's positions, and handed whole to
/// the encoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Encoding {
    /// Tokens per row, `[CLS]` and `[SEP]`s included.
    pub max_seq_length: usize,
    /// Span extraction's windows and decoding (its `max_seq_length` is the same).
    pub span: SpanConfig,
}

impl Encoding {
    /// What a fine-tuned model of `kind` predicts with: rows of `max_seq_length` tokens
    /// (default [`DEFAULT_MAX_SEQ_LENGTH`], or [`SpanConfig::default`]'s window for span
    /// extraction), no more than `max_positions`; the span windows fitted to that length
    /// ([`SpanConfig::for_length`]).
    pub fn for_prediction(
        kind: TaskKind,
        max_seq_length: Option<usize>,
        max_positions: usize,
    ) -> Encoding {
        let default = match crate::kinds::of(kind).span_windows() {
            true => SpanConfig::default().max_seq_length,
            false => DEFAULT_MAX_SEQ_LENGTH,
        };
        let n = max_seq_length.unwrap_or(default).min(max_positions);
        Encoding {
            max_seq_length: n,
            span: SpanConfig::for_length(n),
        }
    }
}

/// The tokenizer of a model directory and the special ids.
pub struct Encoder {
    tokenizer: Box<dyn TokenizeWithOffsets>,
    /// The model directory's `vocab.txt`: the special ids, and its size checked against the
    /// model's `vocab_size`.
    pub vocab: Arc<Vocab>,
    /// Tokens per row, special tokens included: pairs, single texts and choices are cut to
    /// it, tagging windows are this long at most.
    pub max_seq_length: usize,
    /// The windows of span extraction (its `max_seq_length` is the window's length).
    pub span: SpanConfig,
}

/// The name the sentence-pair stage gave the encoder; every kind uses the one type.
pub type PairEncoder = Encoder;

/// One encoded row: ids and segment ids, unpadded.
#[derive(Debug, Clone, PartialEq)]
pub struct Encoded {
    /// Token ids, `[CLS]` first.
    pub ids: Vec<u32>,
    /// Token type (segment) ids, 0 or 1, as many as `ids`.
    pub types: Vec<u8>,
}

impl Encoder {
    /// The tokenizer in `dir` (`vocab.txt` + `tokenizer.json`, as the vocab and pretrain stages
    /// write them), making rows as `encoding` says.
    pub fn load(dir: &Path, encoding: Encoding) -> anyhow::Result<Encoder> {
        let Encoding {
            max_seq_length,
            span,
        } = encoding;
        if max_seq_length < 5 {
            anyhow::bail!(
                "max_seq_length = {max_seq_length} is too small: [CLS] a [SEP] b [SEP] needs at least 5"
            );
        }
        let (vocab, tokenizer) = load_tokenizer(dir)
            .with_context(|| format!("loading the tokenizer of {}", dir.display()))?;
        Ok(Encoder {
            tokenizer,
            vocab,
            max_seq_length,
            span,
        })
    }

    /// Appends the token ids of `text` and their start bytes (span extraction).
    pub fn tokens_with_offsets(&self, text: &str, ids: &mut Vec<u32>, starts: &mut Vec<u32>) {
        self.tokenizer.encode_with_offsets(text, ids, starts);
    }

    /// `[CLS]` and `[SEP]`.
    pub fn specials(&self) -> Specials {
        Specials {
            cls: self.vocab.cls_id(),
            sep: self.vocab.sep_id(),
        }
    }

    /// `[CLS] context [SEP] question [SEP] choice [SEP]`, token types 0 up to the first
    /// `[SEP]` and 1 after, as CLUE's C3 baseline (`run_c3.py`) builds a choice's row: the
    /// longest of context, choice and question loses its last token until the three fit in
    /// `max_seq_length - 4` (the context first on a tie, then the choice). Also whether the
    /// context was cut.
    pub fn encode_context_choice(
        &self,
        context: &str,
        question: &str,
        choice: &str,
    ) -> (Encoded, bool) {
        let (mut a, mut b, mut c) = (
            self.tokens(context),
            self.tokens(choice),
            self.tokens(question),
        );
        let context_tokens = a.len();
        let budget = self.max_seq_length.saturating_sub(4);
        while a.len() + b.len() + c.len() > budget {
            if a.len() >= b.len() && a.len() >= c.len() {
                a.pop();
            } else if b.len() >= a.len() && b.len() >= c.len() {
                b.pop();
            } else {
                c.pop();
            }
        }
        let (cls, sep) = (self.vocab.cls_id(), self.vocab.sep_id());
        let mut ids = Vec::with_capacity(a.len() + b.len() + c.len() + 4);
        ids.push(cls);
        ids.extend_from_slice(&a);
        ids.push(sep);
        let mut types = vec![0u8; ids.len()];
        ids.extend_from_slice(&c);
        ids.push(sep);
        ids.extend_from_slice(&b);
        ids.push(sep);
        types.resize(ids.len(), 1);
        (Encoded { ids, types }, a.len() < context_tokens)
    }

    /// The token ids of `text`.
    pub fn tokens(&self, text: &str) -> Vec<u32> {
        let mut ids = Vec::new();
        let mut starts = Vec::new();
        self.tokenizer
            .encode_with_offsets(text, &mut ids, &mut starts);
        ids
    }

    /// The word pieces of one character (a tagging unit): at least one, `[UNK]` for a unit
    /// the tokenizer drops (a control character, a lone combining mark), so that every unit
    /// has a position to be labelled at.
    pub fn pieces(&self, unit: &str) -> Vec<u32> {
        let ids = self.tokens(unit);
        if ids.is_empty() {
            vec![self.vocab.unk_id()]
        } else {
            ids
        }
    }

    /// `[CLS] a [SEP] b [SEP]`, the longer of a and b trimmed from its end until the pair fits.
    pub fn encode(&self, a: &str, b: &str) -> Encoded {
        let mut ta = self.tokens(a);
        let mut tb = self.tokens(b);
        let budget = self.max_seq_length - 3;
        while ta.len() + tb.len() > budget {
            if ta.len() > tb.len() {
                ta.pop();
            } else {
                tb.pop();
            }
        }
        let mut ids = Vec::with_capacity(ta.len() + tb.len() + 3);
        let mut types = Vec::with_capacity(ids.capacity());
        ids.push(self.vocab.cls_id());
        ids.extend_from_slice(&ta);
        ids.push(self.vocab.sep_id());
        types.resize(ids.len(), 0);
        ids.extend_from_slice(&tb);
        ids.push(self.vocab.sep_id());
        types.resize(ids.len(), 1);
        Encoded { ids, types }
    }

    /// `[CLS] text [SEP]`, token types all 0, the text cut from its end to fit.
    pub fn encode_single(&self, text: &str) -> Encoded {
        let mut t = self.tokens(text);
        t.truncate(self.max_seq_length - 2);
        self.wrap(&t)
    }

    /// `[CLS] ids [SEP]` with token types 0 (the caller keeps `ids` within the length).
    pub fn wrap(&self, ids: &[u32]) -> Encoded {
        let mut out = Vec::with_capacity(ids.len() + 2);
        out.push(self.vocab.cls_id());
        out.extend_from_slice(ids);
        out.push(self.vocab.sep_id());
        Encoded {
            types: vec![0; out.len()],
            ids: out,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn encoder(max: usize) -> Encoder {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../datasets/fixtures/vocab");
        let tmp = tempfile::tempdir().unwrap();
        std::fs::copy(dir.join("vocab.txt"), tmp.path().join("vocab.txt")).unwrap();
        let vocab = Vocab::load(&tmp.path().join("vocab.txt")).unwrap();
        let tok = pipeline_text::hf::wordpiece_tokenizer(&vocab, true).unwrap();
        pipeline_text::hf::write_tokenizer_json(&tok, &tmp.path().join("tokenizer.json")).unwrap();
        let encoding = Encoding {
            max_seq_length: max,
            span: SpanConfig::for_length(max),
        };
        Encoder::load(tmp.path(), encoding).unwrap()
    }

    #[test]
    fn pairs_have_the_bert_layout_and_fit() {
        let e = encoder(12);
        let x = e.encode("我喜欢妈妈做的汤", "妈妈做的汤我很喜欢喝");
        assert_eq!(x.ids.len(), 12);
        assert_eq!(x.ids[0], e.vocab.cls_id());
        assert_eq!(*x.ids.last().unwrap(), e.vocab.sep_id());
        let sep = x.ids.iter().position(|&t| t == e.vocab.sep_id()).unwrap();
        // Longest-first: the two segments end up within one token of each other.
        let (a, b) = (sep - 1, x.ids.len() - sep - 2);
        assert!(a.abs_diff(b) <= 1, "{a} vs {b}");
        assert!(x.types[..=sep].iter().all(|&t| t == 0));
        assert!(x.types[sep + 1..].iter().all(|&t| t == 1));
        let short = e.encode("汤", "喝");
        assert_eq!(short.ids.len(), 5);
    }

    #[test]
    fn choices_are_context_question_choice_as_clue_builds_them() {
        let e = encoder(16);
        let (x, cut) = e.encode_context_choice("汤", "喝", "汤");
        let (cls, sep) = (e.vocab.cls_id(), e.vocab.sep_id());
        let tok = |t: &str| e.tokens(t)[0];
        assert_eq!(x.ids, [cls, tok("汤"), sep, tok("喝"), sep, tok("汤"), sep]);
        assert_eq!(x.types, [0, 0, 0, 1, 1, 1, 1]);
        assert!(!cut);
        // The longest (the context) is cut first, to max_seq_length - 4 tokens of text.
        let (x, cut) = e.encode_context_choice("我喜欢妈妈做的汤我很喜欢喝汤", "喝", "汤");
        assert_eq!(x.ids.len(), 16);
        assert!(cut);
        // A padding choice (empty) keeps its [SEP].
        let (x, _) = e.encode_context_choice("汤", "喝", "");
        assert_eq!(x.ids.len(), 6);
    }

    #[test]
    fn single_texts_are_cls_text_sep_with_types_0() {
        let e = encoder(6);
        let x = e.encode_single("我喜欢妈妈做的汤");
        assert_eq!(x.ids.len(), 6);
        assert_eq!(x.ids[0], e.vocab.cls_id());
        assert_eq!(x.ids[5], e.vocab.sep_id());
        assert!(x.types.iter().all(|&t| t == 0));
        assert_eq!(e.encode_single("汤").ids.len(), 3);
        // A character the tokenizer drops still gets a position.
        assert_eq!(e.pieces("\u{200b}"), [e.vocab.unk_id()]);
    }
}
