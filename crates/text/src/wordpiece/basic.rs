//! BERT's `BasicTokenizer`, the Hugging Face `BertNormalizer` + `BertPreTokenizer` character by
//! character: cleaning, CJK isolation, lower-casing with accent stripping, and splitting on
//! whitespace and punctuation, with each character's offset in the text. The general path of
//! [`super::WordPiece`], the reference its tables are built from, and [`basic_words`] for
//! counting words.

use std::cell::RefCell;

use unicode_categories::UnicodeCategories;
use unicode_normalization_alignments::char::{canonical_combining_class, decompose_canonical};

/// Whether `c` is in the CJK ranges of BERT's `_is_chinese_char`.
pub fn is_chinese_char(c: char) -> bool {
    matches!(
        c as u32,
        0x4E00..=0x9FFF
            | 0x3400..=0x4DBF
            | 0x20000..=0x2A6DF
            | 0x2A700..=0x2B73F
            | 0x2B740..=0x2B81F
            | 0x2B920..=0x2CEAF
            | 0xF900..=0xFAFF
            | 0x2F800..=0x2FA1F
    )
}

/// BERT's `_is_punctuation`: ASCII punctuation and the Unicode P* categories.
pub fn is_punctuation(c: char) -> bool {
    c.is_ascii_punctuation() || c.is_punctuation()
}

/// BERT's `_is_control` as the cleaning step applies it: characters dropped from the text.
pub(super) fn is_dropped(c: char) -> bool {
    c == '\0' || c == '\u{FFFD}' || (!matches!(c, '\t' | '\n' | '\r') && c.is_other())
}

/// BERT's `_is_whitespace`.
pub(super) fn is_bert_whitespace(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r') || c.is_whitespace()
}

/// Reusable buffers of the general path, per thread so that `&self` methods need no locking.
#[derive(Default)]
pub(super) struct Scratch {
    /// Normalised characters of the current run with the byte offset in the text of the
    /// character each came from.
    chars: Vec<(char, u32)>,
    /// Decomposition buffer: (combining class, char, first char of its source's decomposition).
    decomposed: Vec<(u8, char, bool)>,
    /// Source offsets of the run's characters.
    sources: Vec<u32>,
    word: String,
    /// For each byte of `word`, the text offset of the character it came from.
    word_offsets: Vec<u32>,
}

thread_local! {
    pub(super) static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// BERT's BasicTokenizer alone (cleaning, CJK isolation, lower-casing and accent stripping when
/// `lowercase`, splitting on whitespace and punctuation): calls `on_word` with each normalised
/// word in order. Special tokens are not matched. `on_word` must not call `basic_words` itself.
pub fn basic_words(text: &str, lowercase: bool, mut on_word: impl FnMut(&str)) {
    SCRATCH.with(|scratch| {
        let mut sc = scratch.borrow_mut();
        basic_tokenize(lowercase, text, 0, &mut sc, |word, _| on_word(word));
    });
}

/// The Hugging Face `BertNormalizer` + `BertPreTokenizer`, character by character: calls
/// `on_word(word, offsets)` for each normalised word, `offsets[i]` being the offset (in `text`,
/// plus `base`) of the character that byte `i` of `word` came from.
pub(super) fn basic_tokenize(
    lowercase: bool,
    text: &str,
    base: u32,
    sc: &mut Scratch,
    mut on_word: impl FnMut(&str, &[u32]),
) {
    // Cleaning and CJK isolation: a CJK char is a run of its own; whitespace ends runs; dropped
    // characters do not.
    let mut run_start: Option<usize> = None;
    let mut end = 0;
    let mut flush = |sc: &mut Scratch, from: usize, to: usize| {
        normalize_run(lowercase, &text[from..to], base + from as u32, sc);
        split_words(sc, &mut on_word);
    };
    for (at, c) in text.char_indices() {
        end = at + c.len_utf8();
        if is_dropped(c) {
            continue;
        }
        let cjk = is_chinese_char(c);
        if cjk || is_bert_whitespace(c) {
            if let Some(from) = run_start.take() {
                flush(sc, from, at);
            }
            if cjk {
                flush(sc, at, end);
            }
            continue;
        }
        run_start.get_or_insert(at);
    }
    if let Some(from) = run_start {
        flush(sc, from, end);
    }
}

/// Normalises a run (no whitespace, each CJK char alone) into `sc.chars`: drops, NFD with
/// canonical reordering, Mn removal and lower-casing when lower-casing. Each normalised
/// char gets the text offset of a source char exactly as `tokenizers`' alignments do it:
/// the first char of a decomposition takes the next source char, the others the previous.
fn normalize_run(lowercase: bool, run: &str, base: u32, sc: &mut Scratch) {
    sc.chars.clear();
    if !lowercase {
        for (at, c) in run.char_indices() {
            if !is_dropped(c) {
                sc.chars.push((c, base + at as u32));
            }
        }
        return;
    }
    sc.decomposed.clear();
    sc.sources.clear();
    let mut pending = 0; // start of the non-starters not yet in canonical order
    for (at, c) in run.char_indices() {
        if is_dropped(c) {
            continue;
        }
        sc.sources.push(base + at as u32);
        let mut first = true;
        decompose_canonical(c, |d| {
            let ccc = canonical_combining_class(d);
            if ccc == 0 {
                sc.decomposed[pending..].sort_by_key(|k| k.0);
                pending = sc.decomposed.len() + 1;
            }
            sc.decomposed.push((ccc, d, first));
            first = false;
        });
    }
    let tail = pending.min(sc.decomposed.len());
    sc.decomposed[tail..].sort_by_key(|k| k.0);
    let mut next_source = 0;
    for &(_, d, first) in &sc.decomposed {
        let src = if first {
            next_source += 1;
            sc.sources[next_source - 1]
        } else {
            sc.sources[next_source.max(1) - 1]
        };
        if d.is_mark_nonspacing() {
            continue;
        }
        for l in d.to_lowercase() {
            sc.chars.push((l, src));
        }
    }
}

/// Splits `sc.chars` on whitespace and punctuation (each punctuation char a word) and hands
/// each word with its per-byte offsets to `on_word`.
fn split_words(sc: &mut Scratch, on_word: &mut impl FnMut(&str, &[u32])) {
    let Scratch {
        chars,
        word,
        word_offsets,
        ..
    } = sc;
    word.clear();
    word_offsets.clear();
    let mut emit = |word: &mut String, word_offsets: &mut Vec<u32>| {
        if !word.is_empty() {
            on_word(word, word_offsets);
            word.clear();
            word_offsets.clear();
        }
    };
    for &(c, off) in chars.iter() {
        if c.is_whitespace() {
            emit(word, word_offsets);
        } else if is_punctuation(c) {
            emit(word, word_offsets);
            word.push(c);
            word_offsets.extend(std::iter::repeat_n(off, c.len_utf8()));
            emit(word, word_offsets);
        } else {
            word.push(c);
            word_offsets.extend(std::iter::repeat_n(off, c.len_utf8()));
        }
    }
    emit(word, word_offsets);
}
