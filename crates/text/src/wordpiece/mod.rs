//! The fast BERT-style tokenizer.
//!
//! [`WordPiece`] is BERT's `BasicTokenizer` followed by its `WordpieceTokenizer`, written to give
//! exactly the ids (and token start offsets) of the Hugging Face `tokenizers` pipeline that
//! [`crate::hf`] builds for the same vocabulary and lower-casing flag (`BertNormalizer` +
//! `BertPreTokenizer` + `WordPiece`), only much faster on Chinese text:
//!
//! - cleaning: drop `\0`, U+FFFD and control characters (categories Cc, Cf, Co except `\t \n
//!   \r`); whitespace separates words;
//! - CJK ideographs (the code point ranges of BERT's `_is_chinese_char`) are words of their own;
//! - when lower-casing: NFD, drop non-spacing marks (Mn), lower-case (BERT's `do_lower_case`);
//! - words are split on whitespace and punctuation (ASCII 33–47, 58–64, 91–96, 123–126 and the
//!   Unicode P* categories);
//! - each word: greedy longest-match-first word pieces, `##` before continuations, and the
//!   whole word becomes `[UNK]` when a piece cannot be matched or it is longer than 100 chars;
//! - the literal special tokens (`[CLS]`, `[MASK]`, …) in the text are matched as such, as the
//!   Hugging Face tokenizer does for its added special tokens.
//!
//! Speed comes from a per-character table over the Basic Multilingual Plane that says, for the
//! given lower-casing flag, what the normaliser and pre-tokeniser do with that character (drop
//! it, separate on it, isolate it as one token whose id is precomputed, keep it, map it to one
//! other character) and from looking word pieces up as `&str` slices in hash maps, so the common
//! case allocates nothing. The Unicode tables are those of the crates `tokenizers` itself uses
//! (`unicode_categories`, `unicode-normalization-alignments`, and the standard library for
//! lower-casing and whitespace), so that the two agree on every character.
//!
//! [`TokenizeWithOffsets`] is what the mask stage uses; [`load_tokenizer`] picks this fast
//! tokenizer for WordPiece artifacts of the vocab stage and the Hugging Face one otherwise.

mod basic;
mod fx;

use std::path::Path;
use std::sync::Arc;

use unicode_categories::UnicodeCategories;
use unicode_normalization_alignments::char::{canonical_combining_class, decompose_canonical};

use crate::hf::TokenizerError;
use crate::vocab::Vocab;
use basic::{SCRATCH, basic_tokenize, is_bert_whitespace, is_dropped};
pub use basic::{basic_words, is_chinese_char, is_punctuation};
use fx::FxMap;

/// Longest word (in characters, after normalisation) that WordPiece splits; longer ones are
/// `[UNK]`, as in BERT.
pub const MAX_INPUT_CHARS_PER_WORD: usize = 100;

/// The prefix of word pieces that continue a word.
pub const CONTINUING_SUBWORD_PREFIX: &str = "##";

/// A tokenizer that gives, for each token, its id and the byte offset in the text where the
/// token's text starts (special tokens `[CLS]`/`[SEP]` are not added).
pub trait TokenizeWithOffsets: Send + Sync {
    /// Appends the ids of `text`'s tokens to `ids` and their start byte offsets to `starts`.
    fn encode_with_offsets(&self, text: &str, ids: &mut Vec<u32>, starts: &mut Vec<u32>);
}

/// The largest `tokenizer.json` read, the bound of `vocab.txt` too: ours for a 21,128-token
/// vocabulary is under 1 MB, a 2.5·10^5-token Unigram one some 20 MB.
pub const MAX_TOKENIZER_JSON_BYTES: u64 = 64 << 20;

/// Loads the tokenizer of a vocab-stage artifact directory (`vocab.txt` + `tokenizer.json`):
/// our fast [`WordPiece`] when `tokenizer.json` is a BERT WordPiece tokenizer over the same
/// vocabulary, with its lower-casing flag read from the normaliser; otherwise (Unigram, or a
/// tokenizer.json we did not write) the Hugging Face tokenizer itself.
pub fn load_tokenizer(
    dir: &Path,
) -> Result<(Arc<Vocab>, Box<dyn TokenizeWithOffsets>), TokenizerError> {
    let vocab_path = dir.join("vocab.txt");
    let vocab = Arc::new(Vocab::load(&vocab_path)?);
    let json_path = dir.join("tokenizer.json");
    let text = match pipeline_bounded::read_to_string(
        &json_path,
        MAX_TOKENIZER_JSON_BYTES,
        "a tokenizer.json",
    ) {
        Ok(text) => text,
        Err(source) => {
            return Err(TokenizerError::ReadJson {
                path: json_path,
                source,
            });
        }
    };
    let json: serde_json::Value = match serde_json::from_str(&text) {
        Ok(json) => json,
        Err(source) => {
            return Err(TokenizerError::NotJson {
                path: json_path,
                source,
            });
        }
    };
    if let Some(lowercase) = crate::hf::bert_wordpiece_lowercase(&json, &vocab) {
        return Ok((vocab.clone(), Box::new(WordPiece::new(vocab, lowercase))));
    }
    // From the text read above, not the path again: the file read is the file used.
    let hf = crate::hf::HfTokenizer::from_json_text(&text, &json_path)?;
    Ok((vocab, Box::new(hf)))
}

// What the normaliser and pre-tokeniser do with one character, outside special tokens.
/// Part of a word, unchanged by normalisation.
const WORD: u8 = 0;
/// Part of a word, normalised to the single character in the aux table.
const MAP1: u8 = 1;
/// Removed without separating words (control characters; non-spacing marks when lower-casing).
const DROP: u8 = 2;
/// Separates words.
const SPACE: u8 = 3;
/// A token of its own (CJK ideograph, punctuation) whose id is in the aux table.
const ISO: u8 = 4;
/// Anything else (multi-character normalisation, combining classes to reorder): the word it is
/// in goes through the general path.
const COMPLEX: u8 = 5;
/// A non-spacing mark when lower-casing: removed, but only after canonical reordering with its
/// neighbours, so the word it is in (or starts) goes through the general path.
const MARK: u8 = 6;

/// BERT's BasicTokenizer + WordpieceTokenizer over a [`Vocab`]; see the module doc.
pub struct WordPiece {
    vocab: Arc<Vocab>,
    lowercase: bool,
    unk: u32,
    /// Pieces that may start a word (every token; words never contain `#`).
    words: FxMap,
    /// Continuation pieces, without their `##`.
    cont: FxMap,
    max_word_bytes: usize,
    max_cont_bytes: usize,
    /// Class of each BMP character (see the constants above).
    bmp_class: Box<[u8]>,
    /// For ISO: the token id; for MAP1: the character it maps to.
    bmp_aux: Box<[u32]>,
    /// The special tokens matched literally in the text, with their ids.
    specials: Vec<(Box<str>, u32)>,
}

impl std::fmt::Debug for WordPiece {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WordPiece")
            .field("vocab_size", &self.vocab.len())
            .field("lowercase", &self.lowercase)
            .finish()
    }
}

impl WordPiece {
    /// Builds the tokenizer and its character tables (a few milliseconds).
    pub fn new(vocab: Arc<Vocab>, lowercase: bool) -> WordPiece {
        let mut words = FxMap::default();
        let mut cont = FxMap::default();
        let (mut max_word_bytes, mut max_cont_bytes) = (0, 0);
        for (id, t) in vocab.tokens().iter().enumerate() {
            words.insert(t.as_str().into(), id as u32);
            max_word_bytes = max_word_bytes.max(t.len());
            if let Some(rest) = t.strip_prefix(CONTINUING_SUBWORD_PREFIX) {
                cont.insert(rest.into(), id as u32);
                max_cont_bytes = max_cont_bytes.max(rest.len());
            }
        }
        let specials = crate::vocab::SPECIAL_TOKENS
            .iter()
            .zip(vocab.special_ids())
            .map(|(s, id)| (Box::<str>::from(*s), id))
            .collect();
        let mut wp = WordPiece {
            unk: vocab.unk_id(),
            vocab,
            lowercase,
            words,
            cont,
            max_word_bytes,
            max_cont_bytes,
            bmp_class: Box::new([]),
            bmp_aux: Box::new([]),
            specials,
        };
        let mut class = vec![COMPLEX; 0x10000];
        let mut aux = vec![0u32; 0x10000];
        for cp in 0..0x10000u32 {
            if let Some(c) = char::from_u32(cp) {
                let (k, a) = wp.classify(c);
                class[cp as usize] = k;
                aux[cp as usize] = a;
            }
        }
        wp.bmp_class = class.into_boxed_slice();
        wp.bmp_aux = aux.into_boxed_slice();
        wp
    }

    /// The vocabulary it encodes with.
    pub fn vocab(&self) -> &Arc<Vocab> {
        &self.vocab
    }

    /// Whether it lower-cases (and strips accents) first.
    pub fn lowercase(&self) -> bool {
        self.lowercase
    }

    /// Convenience: the ids of `text`.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        let (mut ids, mut starts) = (Vec::new(), Vec::new());
        self.encode_with_offsets(text, &mut ids, &mut starts);
        ids
    }

    /// The class of `c` and its aux value (see the constants).
    fn classify(&self, c: char) -> (u8, u32) {
        if is_dropped(c) {
            return (DROP, 0);
        }
        if is_bert_whitespace(c) {
            return (SPACE, 0);
        }
        if is_chinese_char(c) {
            // A word of its own whatever its neighbours; its normalisation is one character.
            let mut buf = [0u8; 4];
            let s = c.encode_utf8(&mut buf);
            let (mut ids, mut starts) = (Vec::new(), Vec::new());
            self.general(s, 0, &mut ids, &mut starts);
            return match ids[..] {
                [id] => (ISO, id),
                _ => (COMPLEX, 0),
            };
        }
        let mut norm = Vec::with_capacity(2);
        self.normalize_char(c, &mut norm);
        match norm[..] {
            [] => (MARK, 0),
            [m] if m.is_whitespace() => (SPACE, 0),
            [m] if is_punctuation(m) => {
                let mut buf = [0u8; 4];
                let id = self.words.get(&*m.encode_utf8(&mut buf)).copied();
                (ISO, id.unwrap_or(self.unk))
            }
            [m] if self.lowercase && canonical_combining_class(m) != 0 => (COMPLEX, 0),
            [m] if m == c => (WORD, 0),
            [m] => (MAP1, m as u32),
            _ => (COMPLEX, 0),
        }
    }

    /// The normalisation of one character on its own: NFD, drop Mn, lower-case when
    /// lower-casing, else itself.
    fn normalize_char(&self, c: char, out: &mut Vec<char>) {
        if !self.lowercase {
            out.push(c);
            return;
        }
        decompose_canonical(c, |d| {
            if !d.is_mark_nonspacing() {
                out.extend(d.to_lowercase());
            }
        });
    }

    #[inline]
    fn class_of(&self, c: char) -> (u8, u32) {
        let cp = c as usize;
        if cp < 0x10000 {
            (self.bmp_class[cp], self.bmp_aux[cp])
        } else {
            self.classify(c)
        }
    }

    /// The special token that `rest` (text starting with `[`) starts with, if any.
    #[inline]
    fn special_at(&self, rest: &[u8]) -> Option<(usize, u32)> {
        self.specials
            .iter()
            .find(|(s, _)| rest.starts_with(s.as_bytes()))
            .map(|(s, id)| (s.len(), *id))
    }

    /// Word pieces of the normalised word `word`; `offset(i)` is the text offset of the
    /// character at byte `i` of `word`.
    #[inline]
    fn wordpiece<F: Fn(usize) -> u32>(
        &self,
        word: &str,
        offset: F,
        ids: &mut Vec<u32>,
        starts: &mut Vec<u32>,
    ) {
        // As in Hugging Face, the length check comes before any lookup. Cheap test first: a
        // word of at most 100 bytes has at most 100 chars.
        if word.len() > MAX_INPUT_CHARS_PER_WORD && word.chars().count() > MAX_INPUT_CHARS_PER_WORD
        {
            ids.push(self.unk);
            starts.push(offset(0));
            return;
        }
        if let Some(&id) = self.words.get(word) {
            ids.push(id);
            starts.push(offset(0));
            return;
        }
        let mark = ids.len();
        let bytes = word.as_bytes();
        let mut start = 0;
        while start < word.len() {
            let (map, max) = if start == 0 {
                (&self.words, self.max_word_bytes)
            } else {
                (&self.cont, self.max_cont_bytes)
            };
            // Pieces longer than the longest token cannot match: start below that length.
            let mut end = word.len().min(start + max);
            while end > start && !word.is_char_boundary(end) {
                end -= 1;
            }
            let mut found = None;
            while end > start {
                if let Some(&id) = map.get(&word[start..end]) {
                    found = Some(id);
                    break;
                }
                end -= 1;
                while end > start && (bytes[end] & 0xC0) == 0x80 {
                    end -= 1;
                }
            }
            match found {
                Some(id) => {
                    ids.push(id);
                    starts.push(offset(start));
                    start = end;
                }
                None => {
                    ids.truncate(mark);
                    starts.truncate(mark);
                    ids.push(self.unk);
                    starts.push(offset(0));
                    return;
                }
            }
        }
    }

    /// Tokenises a run of word characters `text[s..e]` (no separators in it as the tables
    /// see them) when it is not just a slice of the text: drops, mapped or complex characters.
    fn run_slow(&self, text: &str, s: usize, e: usize, ids: &mut Vec<u32>, starts: &mut Vec<u32>) {
        self.general(&text[s..e], s as u32, ids, starts);
    }

    /// The general tokenizer, character by character as the Hugging Face pipeline does it;
    /// offsets are relative to `text` plus `base`. Used for complex runs, to build the tables,
    /// and in tests as the reference of the fast path. Special tokens are not matched here.
    fn general(&self, text: &str, base: u32, ids: &mut Vec<u32>, starts: &mut Vec<u32>) {
        SCRATCH.with(|scratch| {
            let mut sc = scratch.borrow_mut();
            basic_tokenize(self.lowercase, text, base, &mut sc, |word, offsets| {
                self.wordpiece(word, |i| offsets[i], ids, starts)
            });
        });
    }

    /// Tokenises the run of word characters `text[s..e]`, as `kind` says.
    #[inline]
    fn run(
        &self,
        text: &str,
        s: usize,
        e: usize,
        kind: RunKind,
        ids: &mut Vec<u32>,
        starts: &mut Vec<u32>,
    ) {
        match kind {
            RunKind::Slice => self.wordpiece(&text[s..e], |i| (s + i) as u32, ids, starts),
            RunKind::AsciiLower => {
                // Lower-cased ASCII, byte for byte: offsets are unchanged.
                let mut buf = [0u8; 64];
                if e - s <= buf.len() {
                    let b = &mut buf[..e - s];
                    b.copy_from_slice(&text.as_bytes()[s..e]);
                    b.make_ascii_lowercase();
                    // ASCII lower-casing keeps the bytes valid UTF-8.
                    let w = std::str::from_utf8(b).unwrap_or_default();
                    self.wordpiece(w, |i| (s + i) as u32, ids, starts);
                } else {
                    self.run_slow(text, s, e, ids, starts);
                }
            }
            RunKind::Slow => self.run_slow(text, s, e, ids, starts),
        }
    }
}

/// How a run of word characters must be tokenised.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum RunKind {
    /// The text slice is the normalised word.
    Slice,
    /// Upper-case ASCII letters to lower, everything else as is (byte lengths unchanged).
    AsciiLower,
    /// Anything else: the general path.
    Slow,
}

impl WordPiece {
    /// The char at byte `i` (a char boundary), its length, class and aux value: ASCII from the
    /// table, the rest through [`Self::class_of`].
    #[inline(always)]
    fn char_at(&self, text: &str, i: usize) -> (char, usize, u8, u32) {
        let b = text.as_bytes()[i];
        if b < 0x80 {
            return (
                b as char,
                1,
                self.bmp_class[b as usize],
                self.bmp_aux[b as usize],
            );
        }
        let c = text[i..].chars().next().unwrap_or('\u{FFFD}');
        let (class, aux) = self.class_of(c);
        (c, c.len_utf8(), class, aux)
    }
}

impl TokenizeWithOffsets for WordPiece {
    fn encode_with_offsets(&self, text: &str, ids: &mut Vec<u32>, starts: &mut Vec<u32>) {
        let bytes = text.as_bytes();
        let mut run_start = usize::MAX; // no run
        let mut kind = RunKind::Slice;
        let mut i = 0;
        macro_rules! flush {
            ($end:expr) => {
                if run_start != usize::MAX {
                    self.run(text, run_start, $end, kind, ids, starts);
                    run_start = usize::MAX;
                    kind = RunKind::Slice;
                }
            };
        }
        while i < bytes.len() {
            let b = bytes[i];
            let (c, len, class, aux) = self.char_at(text, i);
            match class {
                WORD => {
                    if run_start == usize::MAX {
                        run_start = i;
                    }
                }
                MAP1 => {
                    if run_start == usize::MAX {
                        run_start = i;
                    }
                    let k = if b < 0x80 {
                        RunKind::AsciiLower
                    } else {
                        RunKind::Slow
                    };
                    kind = kind.max(k);
                }
                DROP => {
                    if run_start != usize::MAX {
                        kind = RunKind::Slow;
                    }
                }
                SPACE => flush!(i),
                ISO => {
                    if b == b'['
                        && let Some((n, id)) = self.special_at(&bytes[i..])
                    {
                        flush!(i);
                        ids.push(id);
                        starts.push(i as u32);
                        i += n;
                        continue;
                    }
                    flush!(i);
                    ids.push(aux);
                    starts.push(i as u32);
                }
                _ => {
                    // COMPLEX or MARK: a CJK char needing the general path alone, or part of a word.
                    if is_chinese_char(c) {
                        flush!(i);
                        self.general(&text[i..i + len], i as u32, ids, starts);
                    } else {
                        if run_start == usize::MAX {
                            run_start = i;
                        }
                        kind = RunKind::Slow;
                    }
                }
            }
            i += len;
        }
        if run_start != usize::MAX {
            self.run(text, run_start, bytes.len(), kind, ids, starts);
        }
    }
}

#[cfg(test)]
impl WordPiece {
    /// The reference path over a whole text (special tokens matched first, as the fast path).
    fn encode_reference(&self, text: &str, ids: &mut Vec<u32>, starts: &mut Vec<u32>) {
        let mut from = 0;
        let mut i = 0;
        let bytes = text.as_bytes();
        while i < bytes.len() {
            if bytes[i] == b'['
                && let Some((n, id)) = self.special_at(&bytes[i..])
            {
                self.general(&text[from..i], from as u32, ids, starts);
                ids.push(id);
                starts.push(i as u32);
                i += n;
                from = i;
                continue;
            }
            i += 1;
        }
        self.general(&text[from..], from as u32, ids, starts);
    }
}

#[cfg(test)]
mod tests;
