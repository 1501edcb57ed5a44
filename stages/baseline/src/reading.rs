//! Reading-comprehension baselines without a model, as pure functions: what a fine-tuned model
//! on CMRC 2018 and C3 must beat.
//!
//! CMRC 2018 (span extraction), after the sliding-window baseline of the SQuAD paper (Rajpurkar
//! et al. 2016, §5, after Richardson et al. 2013, MCTest), on characters since Chinese has no
//! spaces and CMRC's metric scores characters:
//!
//! - [`sliding_window`]: the context window as long as the question (in content characters)
//!   whose characters match the question's most, each match weighted by Richardson's inverse
//!   count `ln(1 + 1/count in the context)` so that rare characters count more; the window
//!   itself is the answer;
//! - [`best_sentence`]: the sentence (cut after `。！？；!?;` and newlines) sharing the most
//!   weight of distinct question characters; the sentence is the answer.
//!
//! Both return byte ranges of the context (the answer is a substring, trimmed of surrounding
//! whitespace and punctuation, which CMRC's metric removes anyway), scored with CMRC's EM/F1 by
//! the caller. They measure how far locating the question's words gets; neither can answer.
//!
//! C3 (multiple choice):
//!
//! - [`choice_overlap`]: the choice with the highest share of its distinct content characters
//!   found in the context or the question (the first on a tie);
//! - [`MajorityPosition`]: the answer position most frequent in training, among the question's
//!   real choices.
//!
//! Padding choices (C3 pads to 4) are never predicted. "Content" characters are those neither
//! whitespace nor punctuation (Unicode P* and ASCII punctuation, as the tokenizer and CMRC's
//! metric treat them).

use std::collections::{HashMap, HashSet};
use std::ops::Range;

use pipeline_tasks::c3::{C3_CHOICES, C3Example};

fn is_content(c: char) -> bool {
    !(c.is_whitespace() || c.is_ascii_punctuation() || is_unicode_punctuation(c))
}

/// Unicode P* (general punctuation and the CJK and full-width forms C3 and CMRC use).
fn is_unicode_punctuation(c: char) -> bool {
    matches!(c as u32,
        0x2010..=0x2027 | 0x2030..=0x205E | 0x3001..=0x3003 | 0x3008..=0x3011 | 0x3014..=0x301F
        | 0xFF01..=0xFF0F | 0xFF1A..=0xFF20 | 0xFF3B..=0xFF40 | 0xFF5B..=0xFF65 | 0x00A1 | 0x00A7
        | 0x00AB | 0x00B6 | 0x00B7 | 0x00BB | 0x00BF | 0x30FB | 0xFE30..=0xFE4F)
}

/// Richardson et al.'s inverse count of each character of `text`: `ln(1 + 1/count)`.
fn inverse_counts(text: &str) -> HashMap<char, f64> {
    let mut counts: HashMap<char, usize> = HashMap::new();
    for c in text.chars().filter(|&c| is_content(c)) {
        *counts.entry(c).or_default() += 1;
    }
    counts
        .into_iter()
        .map(|(c, n)| (c, (1.0 + 1.0 / n as f64).ln()))
        .collect()
}

/// The context window (as many characters as the question has content characters) with the
/// highest inverse-count-weighted number of question characters; bytes of `context`. Empty
/// only for an empty context.
pub fn sliding_window(context: &str, question: &str) -> Range<usize> {
    let q: HashSet<char> = question.chars().filter(|&c| is_content(c)).collect();
    let ic = inverse_counts(context);
    let chars: Vec<(usize, char)> = context.char_indices().collect();
    let weight = |c: char| if q.contains(&c) { ic[&c] } else { 0.0 };
    let w = q.len().clamp(1, chars.len().max(1));
    let (mut best, mut best_at, mut sum) = (f64::NEG_INFINITY, 0, 0.0);
    for i in 0..chars.len() {
        sum += weight(chars[i].1);
        if i >= w {
            sum -= weight(chars[i - w].1);
        }
        // Strictly better only: the first window on a tie. (The running sum's rounding is the
        // same for equal windows, since it adds and removes the same terms in order.)
        if i + 1 >= w && sum > best + 1e-12 {
            (best, best_at) = (sum, i + 1 - w);
        }
    }
    let start = chars.get(best_at).map_or(context.len(), |c| c.0);
    let end = chars.get(best_at + w).map_or(context.len(), |c| c.0);
    trim(context, start..end)
}

/// The sentence sharing the most inverse-count weight of distinct question characters; bytes
/// of `context`. Empty only for an empty context.
pub fn best_sentence(context: &str, question: &str) -> Range<usize> {
    let q: HashSet<char> = question.chars().filter(|&c| is_content(c)).collect();
    let ic = inverse_counts(context);
    let (mut best, mut best_span) = (f64::NEG_INFINITY, 0..context.len());
    for span in sentences(context) {
        let s: HashSet<char> = context[span.clone()].chars().collect();
        let score: f64 = q.intersection(&s).map(|c| ic[c]).sum();
        if score > best + 1e-12 {
            (best, best_span) = (score, span);
        }
    }
    trim(context, best_span)
}

/// Sentences of `text`, each ending after `。！？；!?;` or a newline (the last may end without).
fn sentences(text: &str) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, c) in text.char_indices() {
        if matches!(c, '。' | '！' | '？' | '；' | '!' | '?' | ';' | '\n') {
            out.push(start..i + c.len_utf8());
            start = i + c.len_utf8();
        }
    }
    if start < text.len() {
        out.push(start..text.len());
    }
    out
}

/// `span` without the non-content characters at its ends (unchanged when it has no content).
fn trim(text: &str, span: Range<usize>) -> Range<usize> {
    let s = &text[span.clone()];
    let Some(first) = s.char_indices().find(|&(_, c)| is_content(c)) else {
        return span;
    };
    let last = s.char_indices().rfind(|&(_, c)| is_content(c));
    let end = last.map_or(s.len(), |(i, c)| i + c.len_utf8());
    span.start + first.0..span.start + end
}

/// The real choice with the highest share of its distinct content characters found in the
/// context or the question; the first on a tie.
pub fn choice_overlap(ex: &C3Example) -> usize {
    let seen: HashSet<char> = ex.context.chars().chain(ex.question.chars()).collect();
    let share = |choice: &str| {
        let own: HashSet<char> = choice.chars().filter(|&c| is_content(c)).collect();
        if own.is_empty() {
            return 0.0;
        }
        own.iter().filter(|c| seen.contains(c)).count() as f64 / own.len() as f64
    };
    let mut best = 0;
    let mut best_share = f64::NEG_INFINITY;
    for (i, choice) in ex.choices.iter().enumerate().take(ex.real_choices) {
        let s = share(choice);
        if s > best_share {
            (best, best_share) = (i, s);
        }
    }
    best
}

/// The most frequent answer position in training, by position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MajorityPosition {
    /// Training questions whose answer is at each position (0 to 3).
    pub counts: [usize; C3_CHOICES],
}

impl MajorityPosition {
    /// Counts the answer positions of `train`.
    pub fn fit(train: &[&C3Example]) -> MajorityPosition {
        let mut counts = [0; C3_CHOICES];
        for ex in train {
            counts[ex.answer] += 1;
        }
        MajorityPosition { counts }
    }

    /// The most frequent training position among this question's real choices (the first on
    /// a tie).
    pub fn predict(&self, ex: &C3Example) -> usize {
        let mut best = 0;
        for i in 1..ex.real_choices.min(C3_CHOICES) {
            if self.counts[i] > self.counts[best] {
                best = i;
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c3(context: &str, question: &str, choices: &[&str], answer: usize) -> C3Example {
        let mut padded: [String; C3_CHOICES] = Default::default();
        for (p, c) in padded.iter_mut().zip(choices) {
            *p = c.to_string();
        }
        C3Example {
            id: "d#0".into(),
            document: 0,
            context: context.into(),
            question: question.into(),
            choices: padded,
            real_choices: choices.len(),
            answer,
            file: 0,
        }
    }

    const CTX: &str = "周杰出生于西安。2005年，周杰毕业于浙江大学，随后回到西安工作。他喜欢读书。";

    #[test]
    fn the_sliding_window_is_the_span_most_like_the_question() {
        let span = sliding_window(CTX, "周杰毕业于哪所大学？");
        // 9 content characters in the question: the window starting at 周杰毕业于.
        assert_eq!(&CTX[span], "周杰毕业于浙江大学");
        // Rare characters weigh more: 西 and 安 occur twice, 读 and 书 once.
        assert_eq!(&CTX[sliding_window(CTX, "读书西安")], "喜欢读书");
        assert_eq!(sliding_window("", "谁？"), 0..0);
        assert_eq!(
            &CTX[sliding_window(CTX, "？")],
            "周",
            "a question without content"
        );
        assert_eq!(
            &CTX[sliding_window(CTX, "甲乙")],
            "周杰",
            "no overlap: the first"
        );
    }

    #[test]
    fn the_best_sentence_shares_the_most_question_characters() {
        assert_eq!(
            &CTX[best_sentence(CTX, "他毕业于哪所大学？")],
            "2005年，周杰毕业于浙江大学，随后回到西安工作"
        );
        assert_eq!(&CTX[best_sentence(CTX, "他喜欢什么？")], "他喜欢读书");
        assert_eq!(
            &CTX[best_sentence(CTX, "甲？")],
            "周杰出生于西安",
            "no overlap: the first"
        );
        assert_eq!(best_sentence("", "谁？"), 0..0);
        assert_eq!(sentences("甲。乙\n丙"), [0..6, 6..10, 10..13]);
    }

    #[test]
    fn choice_overlap_never_picks_the_padding() {
        let ex = c3(
            "男：去图书馆吗？\n女：不，去银行。",
            "女的去哪儿？",
            &["医院", "银行"],
            1,
        );
        assert_eq!(choice_overlap(&ex), 1);
        // Every real choice scores 0: the first, never a padded empty one.
        let ex = c3("今天天气好。", "问什么？", &["甲", "乙", "丙"], 2);
        assert_eq!(choice_overlap(&ex), 0);
        assert_eq!(ex.mask(), [true, true, true, false]);
        // A share, not a count: the short choice fully in the text wins.
        let ex = c3("他买了面包。", "买了什么？", &["面包和牛奶鸡蛋", "面包"], 1);
        assert_eq!(choice_overlap(&ex), 1);
    }

    #[test]
    fn majority_position_keeps_to_real_choices() {
        let train = [
            c3("文", "问", &["甲", "乙", "丙", "丁"], 3),
            c3("文", "问", &["甲", "乙", "丙", "丁"], 3),
            c3("文", "问", &["甲", "乙", "丙"], 1),
            c3("文", "问", &["甲", "乙"], 0),
        ];
        let m = MajorityPosition::fit(&train.iter().collect::<Vec<_>>());
        assert_eq!(m.counts, [1, 1, 0, 2]);
        assert_eq!(m.predict(&train[0]), 3);
        assert_eq!(m.predict(&train[2]), 0, "positions 0 and 1 tie: the first");
        assert_eq!(m.predict(&train[3]), 0);
    }

    /// The C3 figures on the shared data's 80/10/10 split (split_seed 12345), frozen:
    /// `PIPELINE_DATA_ROOT=../shared/datasets cargo test -p stage-baseline reading`; skipped
    /// with a note when the data is not there.
    #[test]
    fn shared_c3_figures() {
        use pipeline_tasks::c3::{C3_DEV_FRACTION, C3_TEST_FRACTION, read_c3};
        let Some(root) = std::env::var_os("PIPELINE_DATA_ROOT") else {
            eprintln!("note: PIPELINE_DATA_ROOT is unset; skipping the C3 baseline figures");
            return;
        };
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(root);
        let Ok(f) = read_c3(&root.join("c3/dev.json")) else {
            eprintln!("note: no c3/dev.json under {}; skipping", root.display());
            return;
        };
        let s = f.split(C3_DEV_FRACTION, C3_TEST_FRACTION, 12345).unwrap();
        let of = |idx: &[usize]| idx.iter().map(|&i| &f.examples[i]).collect::<Vec<_>>();
        let majority = MajorityPosition::fit(&of(&s.train));
        assert_eq!(majority.counts, [756, 836, 826, 635]);
        let correct = |idx: &[usize], p: &dyn Fn(&C3Example) -> usize| {
            of(idx).iter().filter(|e| p(e) == e.answer).count()
        };
        // (questions, majority position right, choice overlap right) on dev and test.
        let figures: Vec<(usize, usize, usize)> = [&s.dev, &s.test]
            .iter()
            .map(|idx| {
                let m = correct(idx, &|e| majority.predict(e));
                (idx.len(), m, correct(idx, &choice_overlap))
            })
            .collect();
        eprintln!("c3 baselines (questions, majority_position, choice_overlap): {figures:?}");
        assert_eq!(figures, [(357, 82, 152), (406, 110, 165)]);
    }
}
