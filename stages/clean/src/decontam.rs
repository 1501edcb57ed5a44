//! Decontamination: finding corpus paragraphs that contain a text a model is selected or
//! reported on (a fine-tuning task's dev or test text), so that pretraining never reads it.
//!
//! Both sides are normalised by the clean stage's own [`Normalizer`] first, so a test text
//! matches its corpus copy however either was written (full-width digits, Traditional script,
//! stray whitespace). Then, in characters:
//!
//! - a text shorter than `min_chars` is not matched: such a text ("好评", "为什么") occurs
//!   everywhere and says nothing about a leak; these are counted (`too_short`);
//! - a text shorter than `window` matches a paragraph that contains it whole;
//! - a longer text matches a paragraph that shares a `window`-character piece with it, the
//!   pieces taken every `window / 2` characters (and one at its end): so a paragraph holding the
//!   whole text, or any passage of it of `window + window / 2 - 1` characters or more, matches.
//!
//! Memory stays bounded by hashing: the index holds one 64-bit hash per short text and per piece
//! of a long one (about `2 / window` of the held-out characters), never the texts. A paragraph
//! is checked with rolling polynomial hashes modulo the Mersenne prime 2^61 − 1 (two passes,
//! `min_chars` and `window` wide); the chance that two different strings share a hash is about
//! 2^-61 per comparison, so over 10^8 corpus windows against 10^6 keys a false match has odds
//! of about one in 20,000. Hand-written rather than an Aho–Corasick automaton (the
//! `aho-corasick` crate): an automaton over every window of 10^5 held-out texts would hold the
//! texts themselves, tens of times over.

use std::collections::HashMap;

use pipeline_text::normalize::Normalizer;
use serde::{Deserialize, Serialize};

/// The Mersenne prime 2^61 − 1.
const P: u64 = (1 << 61) - 1;
/// The hash's base: a fixed odd number below P, so that hashes are the same on every run.
const BASE: u64 = 0x1F3D_5B79_A4C2_E687 % P;

fn mul(a: u64, b: u64) -> u64 {
    let x = a as u128 * b as u128;
    let r = ((x >> 61) as u64) + ((x as u64) & P);
    if r >= P { r - P } else { r }
}

/// Prefix hashes of a character sequence: `hash(i, j)` of any slice in O(1).
struct Prefix<'a> {
    pre: Vec<u64>,
    pow: &'a [u64],
}

impl<'a> Prefix<'a> {
    fn new(chars: &[char], pow: &'a [u64]) -> Prefix<'a> {
        let mut pre = Vec::with_capacity(chars.len() + 1);
        pre.push(0);
        let mut h = 0u64;
        for &c in chars {
            // +1: no character hashes to 0, so leading NULs still count.
            h = (mul(h, BASE) + c as u64 + 1) % P;
            pre.push(h);
        }
        Prefix { pre, pow }
    }

    /// The hash of characters `i..j` (`j - i` at most the longest power held).
    fn hash(&self, i: usize, j: usize) -> u64 {
        let sub = mul(self.pre[i], self.pow[j - i]);
        (self.pre[j] + P - sub) % P
    }
}

fn hash_chars(chars: &[char]) -> u64 {
    chars
        .iter()
        .fold(0u64, |h, &c| (mul(h, BASE) + c as u64 + 1) % P)
}

/// A text shorter than `window`, found by the hash of its first `min_chars` characters.
#[derive(Debug, Clone, Copy)]
struct Short {
    len: u32,
    hash: u64,
    source: u32,
}

/// How many held-out texts a source gave, for metrics.json.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct SourceCounts {
    /// Distinct held-out texts (after normalisation).
    pub texts: u64,
    /// Of which shorter than `min_chars`, not matched.
    pub too_short: u64,
    /// Corpus (or task-text) paragraphs dropped because they contain one of its texts.
    pub paragraphs_dropped: u64,
}

/// A source of held-out texts (a task) and its counts.
#[derive(Debug, Clone)]
pub struct Source {
    pub name: String,
    /// The files its texts came from, as given.
    pub files: Vec<String>,
    pub counts: SourceCounts,
}

/// The held-out texts of every source, hashed.
pub struct HeldOut {
    min_chars: usize,
    window: usize,
    /// Powers of the base up to `window`.
    pow: Vec<u64>,
    short: HashMap<u64, Vec<Short>>,
    /// Piece hash → the first source that has it.
    long: HashMap<u64, u32>,
    /// The sources, in the order first given.
    pub sources: Vec<Source>,
}

impl HeldOut {
    /// An empty index; `2 ≤ min_chars ≤ window`.
    pub fn new(min_chars: usize, window: usize) -> HeldOut {
        let mut pow = vec![1u64; window + 1];
        for i in 1..=window {
            pow[i] = mul(pow[i - 1], BASE);
        }
        HeldOut {
            min_chars,
            window,
            pow,
            short: HashMap::new(),
            long: HashMap::new(),
            sources: Vec::new(),
        }
    }

    /// Whether no text is indexed.
    pub fn is_empty(&self) -> bool {
        self.short.is_empty() && self.long.is_empty()
    }

    /// Adds a source's texts from `files`, normalised by `normalizer` (duplicates counted
    /// once). A name given before (a task both in `task_text` and `exclude_texts_of`) adds to
    /// that source.
    pub fn add_source<'t>(
        &mut self,
        name: &str,
        files: &[String],
        texts: impl IntoIterator<Item = &'t str>,
        normalizer: &Normalizer,
    ) {
        let source = match self.sources.iter().position(|s| s.name == name) {
            Some(i) => i,
            None => {
                self.sources.push(Source {
                    name: name.to_string(),
                    files: Vec::new(),
                    counts: SourceCounts::default(),
                });
                self.sources.len() - 1
            }
        };
        for f in files {
            if !self.sources[source].files.contains(f) {
                self.sources[source].files.push(f.clone());
            }
        }
        let mut counts = SourceCounts::default();
        let mut seen = std::collections::HashSet::new();
        let source = source as u32;
        for text in texts {
            let norm = normalizer.normalize(text);
            let chars: Vec<char> = norm.trim().chars().collect();
            if chars.is_empty() || !seen.insert(hash_chars(&chars)) {
                continue;
            }
            counts.texts += 1;
            if chars.len() < self.min_chars {
                counts.too_short += 1;
            } else if chars.len() < self.window {
                self.short
                    .entry(hash_chars(&chars[..self.min_chars]))
                    .or_default()
                    .push(Short {
                        len: chars.len() as u32,
                        hash: hash_chars(&chars),
                        source,
                    });
            } else {
                for start in piece_starts(chars.len(), self.window) {
                    self.long
                        .entry(hash_chars(&chars[start..start + self.window]))
                        .or_insert(source);
                }
            }
        }
        let c = &mut self.sources[source as usize].counts;
        c.texts += counts.texts;
        c.too_short += counts.too_short;
    }

    /// The source of a held-out text that `paragraph` (normalised) contains, if any.
    pub fn find(&self, paragraph: &str) -> Option<usize> {
        if self.is_empty() {
            return None;
        }
        let chars: Vec<char> = paragraph.chars().collect();
        let n = chars.len();
        if n < self.min_chars {
            return None;
        }
        let prefix = Prefix::new(&chars, &self.pow);
        if !self.short.is_empty() {
            for i in 0..=n - self.min_chars {
                let Some(candidates) = self.short.get(&prefix.hash(i, i + self.min_chars)) else {
                    continue;
                };
                for s in candidates {
                    let end = i + s.len as usize;
                    if end <= n && prefix.hash(i, end) == s.hash {
                        return Some(s.source as usize);
                    }
                }
            }
        }
        if !self.long.is_empty() && n >= self.window {
            for i in 0..=n - self.window {
                if let Some(&source) = self.long.get(&prefix.hash(i, i + self.window)) {
                    return Some(source as usize);
                }
            }
        }
        None
    }

    /// Counts a dropped paragraph against its source.
    pub fn count_drop(&mut self, source: usize) {
        if let Some(s) = self.sources.get_mut(source) {
            s.counts.paragraphs_dropped += 1;
        }
    }
}

/// Where a long text's pieces start: every `window / 2` characters, and at its end.
fn piece_starts(len: usize, window: usize) -> Vec<usize> {
    let stride = (window / 2).max(1);
    let last = len - window;
    let mut starts: Vec<usize> = (0..=last).step_by(stride).collect();
    if starts.last() != Some(&last) {
        starts.push(last);
    }
    starts
}

#[cfg(test)]
mod tests {
    use super::*;
    use pipeline_text::normalize::NormalizeOptions;
    use proptest::prelude::*;

    fn normalizer() -> Normalizer {
        Normalizer::new(NormalizeOptions::default()).unwrap()
    }

    fn index(texts: &[&str]) -> HeldOut {
        let mut h = HeldOut::new(4, 8);
        h.add_source("task", &[], texts.iter().copied(), &normalizer());
        h
    }

    #[test]
    fn short_texts_match_whole_and_only_whole() {
        let h = index(&["这家酒店很好", "好的"]);
        assert_eq!(h.find("我觉得这家酒店很好，下次再来"), Some(0));
        assert_eq!(h.find("这家酒店很差"), None);
        // Too short to match: counted, never found.
        assert_eq!(h.sources[0].counts.too_short, 1);
        assert_eq!(h.find("好的好的"), None);
    }

    #[test]
    fn long_texts_match_a_long_shared_passage() {
        // 20 characters, window 8: pieces at 0, 4, 8, 12.
        let long = "甲乙丙丁戊己庚辛壬癸子丑寅卯辰巳午未申酉";
        let h = index(&[long]);
        assert_eq!(h.find(&format!("前言{long}后记")), Some(0));
        // Any 8 + 4 - 1 = 11 characters of it are caught.
        assert_eq!(h.find("前丁戊己庚辛壬癸子丑寅卯后"), Some(0));
        // A short passage is not.
        assert_eq!(h.find("前丁戊己庚辛后"), None);
    }

    #[test]
    fn both_sides_are_normalised() {
        // Full-width digits and Traditional characters in the corpus.
        let h = index(&["价格是123元很便宜"]);
        assert_eq!(
            h.find("他说價格是１２３元很便宜啊"),
            None,
            "not normalised yet"
        );
        let n = normalizer();
        assert_eq!(h.find(&n.normalize("他说價格是１２３元很便宜啊")), Some(0));
    }

    #[test]
    fn sources_are_told_apart_and_counted() {
        let mut h = HeldOut::new(4, 8);
        let n = normalizer();
        h.add_source(
            "a",
            &["a.tsv".into()],
            ["第一个测试文本", "第一个测试文本"],
            &n,
        );
        h.add_source("b", &["b.tsv".into()], ["第二个测试文本"], &n);
        h.add_source("a", &["a2.tsv".into()], ["第三个测试文本"], &n);
        assert_eq!(h.sources.len(), 2, "a name given twice is one source");
        assert_eq!(h.sources[0].counts.texts, 2, "duplicates count once");
        assert_eq!(h.sources[0].files, ["a.tsv", "a2.tsv"]);
        assert_eq!(h.find("xx第二个测试文本"), Some(1));
        assert_eq!(h.find("xx第三个测试文本"), Some(0));
        h.count_drop(1);
        assert_eq!(h.sources[1].counts.paragraphs_dropped, 1);
    }

    proptest! {
        /// Against `str::contains`: a short text is found exactly when the paragraph holds it.
        #[test]
        fn short_matching_is_containment(
            text in "[甲乙丙丁]{4,7}",
            para in "[甲乙丙丁]{0,30}",
        ) {
            let h = index(&[&text]);
            prop_assert_eq!(h.find(&para).is_some(), para.contains(&text));
        }

        /// A long text inside any paragraph is always found.
        #[test]
        fn a_contained_long_text_is_found(
            text in "[甲乙丙丁戊己]{8,40}",
            before in "[甲乙丙丁]{0,10}",
            after in "[甲乙丙丁]{0,10}",
        ) {
            let h = index(&[&text]);
            let para = format!("{before}{text}{after}");
            prop_assert_eq!(h.find(&para), Some(0));
        }
    }
}
