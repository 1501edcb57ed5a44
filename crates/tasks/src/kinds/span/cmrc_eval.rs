//! EM and F1 of span-extraction answers exactly as CMRC 2018's official evaluation script
//! computes them (ymcui/cmrc2018, `squad-style-data/cmrc2018_evaluate.py`, "v5 - special",
//! 2019), so that our figures sit beside the published ones:
//!
//! - both texts are lower-cased and stripped;
//! - F1: [`mixed_segmentation`] splits a text into CJK characters (U+4E00..U+9FA5) one by one
//!   and NLTK word tokens for the runs between them, dropping the script's punctuation set
//!   ([`is_punctuation`]); F1 comes from the longest common *contiguous* run of tokens (the
//!   script's `find_lcs`), precision over the prediction's tokens and recall over the answer's;
//! - EM: the texts equal once that punctuation is removed ([`remove_punctuation`]);
//! - each figure is the maximum over the gold answers, and the corpus figures are percentages
//!   over all questions, an unanswered one counting 0 (the script's `evaluate`).
//!
//! The script is Python 2, and its `nltk.word_tokenize` then was nltk 3.4.5's (the last for
//! Python 2): an extended `TreebankWordTokenizer`, run after punkt's sentence splitter. What
//! is reproduced here is that tokenizer with Python 2's regex semantics (`\d`, `\s`, `\b`
//! ASCII unless the pattern is Unicode) on each run as one line, i.e. `word_tokenize(run,
//! preserve_line=True)`: punkt's English model, which only matters where a run holds a period
//! followed by a space and more text ("Mr. Smith went. He came"), is a trained model that
//! cannot be rewritten here. The test (`crates/tasks/tests/cmrc_eval_parity.rs`) runs the
//! official script itself under Python 2.7 with nltk 3.4.5 and that one patch.
//!
//! Known, deliberate departures (characters absent from CMRC 2018): case mapping follows
//! Rust's Unicode tables rather than Python 2.7's Unicode 5.2 ones, and Python 2's Unicode
//! `\w` is taken as `char::is_alphanumeric` or `_`.

use std::collections::HashMap;
use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};

/// The script's `sp_char`: the punctuation it drops before comparing. Its list also holds
/// "……" (two characters), which a single character never equals, so `…` is kept, as there.
const PUNCTUATION: &[char] = &[
    '-', ':', '_', '*', '^', '/', '\\', '~', '`', '+', '=', '，', '。', '：', '？', '！', '“', '”',
    '；', '’', '《', '》', '·', '、', '「', '」', '（', '）', '－', '～', '『', '』',
];

/// Whether the official script drops `c` (its `sp_char`).
pub fn is_punctuation(c: char) -> bool {
    PUNCTUATION.contains(&c)
}

/// The script's test for a Chinese character, `[\u4e00-\u9fa5]`.
fn is_cjk(c: char) -> bool {
    ('\u{4e00}'..='\u{9fa5}').contains(&c)
}

/// Python 2's `unicode.isspace` (what `strip()` and `split()` use): Unicode's white space plus
/// the information separators U+001C..U+001F and U+180E (a space in Unicode 5.2).
fn is_py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c) || c == '\u{180e}'
}

/// `str(s).decode('utf-8').lower().strip()`: Python 2's lower case is the simple, one
/// character mapping (`İ` → `i`), which is the first character of Rust's full one.
fn normalise(text: &str) -> String {
    let lower: String = text
        .chars()
        .map(|c| c.to_lowercase().next().unwrap_or(c))
        .collect();
    lower.trim_matches(is_py_space).to_string()
}

/// The script's `remove_punctuation`: normalised, then without [`is_punctuation`] characters
/// (stripped before they go, so "abc -" keeps its space).
pub fn remove_punctuation(text: &str) -> String {
    normalise(text)
        .chars()
        .filter(|&c| !is_punctuation(c))
        .collect()
}

/// The script's `mixed_segmentation`: each CJK character a token, the runs between them
/// tokenized by NLTK; with `remove_punct`, punctuation is dropped without ending a run
/// ("a-b" is one run "ab"), and without it, it is a token of its own that ends one.
pub fn mixed_segmentation(text: &str, remove_punct: bool) -> Vec<String> {
    let mut out = Vec::new();
    let mut run = String::new();
    for c in normalise(text).chars() {
        if remove_punct && is_punctuation(c) {
            continue;
        }
        if is_cjk(c) || is_punctuation(c) {
            if !run.is_empty() {
                out.extend(word_tokenize(&run));
                run.clear();
            }
            out.push(c.to_string());
        } else {
            run.push(c);
        }
    }
    if !run.is_empty() {
        out.extend(word_tokenize(&run));
    }
    out
}

/// The length of the longest common contiguous run of tokens (the script's `find_lcs`).
fn longest_common_run(a: &[String], b: &[String]) -> usize {
    let mut best = 0;
    let mut prev = vec![0usize; b.len() + 1];
    for x in a {
        let mut row = vec![0usize; b.len() + 1];
        for (j, y) in b.iter().enumerate() {
            if x == y {
                row[j + 1] = prev[j] + 1;
                best = best.max(row[j + 1]);
            }
        }
        prev = row;
    }
    best
}

/// F1 (0..1) of `prediction` against the best of `answers` (the script's `calc_f1_score`;
/// 0 without answers, where the script would fail).
pub fn f1<S: AsRef<str>>(answers: &[S], prediction: &str) -> f64 {
    let predicted = mixed_segmentation(prediction, true);
    answers
        .iter()
        .map(|answer| {
            let gold = mixed_segmentation(answer.as_ref(), true);
            let common = longest_common_run(&gold, &predicted);
            if common == 0 {
                return 0.0;
            }
            let precision = common as f64 / predicted.len() as f64;
            let recall = common as f64 / gold.len() as f64;
            2.0 * precision * recall / (precision + recall)
        })
        .fold(0.0, f64::max)
}

/// Whether `prediction` matches one of `answers` exactly once punctuation is removed (the
/// script's `calc_em_score`).
pub fn exact_match<S: AsRef<str>>(answers: &[S], prediction: &str) -> bool {
    let predicted = remove_punctuation(prediction);
    answers
        .iter()
        .any(|a| remove_punctuation(a.as_ref()) == predicted)
}

/// The corpus figures the script prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CmrcScores {
    /// Mean EM over all questions, in percent.
    pub em: f64,
    /// Mean F1 over all questions, in percent.
    pub f1: f64,
    /// `(em + f1) / 2`, the script's `AVERAGE`.
    pub average: f64,
    /// Questions scored (unanswered ones included).
    pub total: usize,
    /// Questions without a prediction (counted as 0).
    pub skipped: usize,
}

/// One gold question: its id and its reference answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GoldQuestion {
    /// The question's id, the key of its prediction.
    pub id: String,
    /// The gold answer texts; its EM and F1 are the maximum over them.
    pub answers: Vec<String>,
}

/// The script's `evaluate`: every gold question scored against `predictions[id]` (the id
/// stripped, as the script does), a missing prediction counting 0. All zero without questions.
pub fn evaluate(gold: &[GoldQuestion], predictions: &HashMap<String, String>) -> CmrcScores {
    let (mut em, mut f1_sum, mut skipped) = (0usize, 0.0f64, 0usize);
    for q in gold {
        match predictions.get(q.id.trim_matches(is_py_space)) {
            Some(p) => {
                f1_sum += f1(&q.answers, p);
                em += usize::from(exact_match(&q.answers, p));
            }
            None => skipped += 1,
        }
    }
    let percent = |x: f64| {
        if gold.is_empty() {
            0.0
        } else {
            100.0 * x / gold.len() as f64
        }
    };
    let (em, f1) = (percent(em as f64), percent(f1_sum));
    CmrcScores {
        em,
        f1,
        average: (em + f1) * 0.5,
        total: gold.len(),
        skipped,
    }
}

/// One substitution of the tokenizer: a pattern and its replacement (`${n}` for groups).
struct Rule(Regex, &'static str);

fn rules(table: &[(&str, &'static str)]) -> Vec<Rule> {
    table
        .iter()
        .map(|(p, r)| {
            Rule(
                Regex::new(p).expect("the tokenizer's patterns are valid"),
                r,
            )
        })
        .collect()
}

fn apply(rules: &[Rule], mut text: String) -> String {
    for Rule(re, with) in rules {
        text = re.replace_all(&text, *with).into_owned();
    }
    text
}

// nltk 3.4.5's patterns, in its order. Python 2 compiles them without `re.U` unless noted, so
// `\d` is [0-9], `\s` [ \t\n\r\v\f] and `\S` its complement there. `$` also matches before a
// final newline in Python, which the `(\n?)$` forms keep.
static STARTING_QUOTES: LazyLock<Vec<Rule>> = LazyLock::new(|| {
    rules(&[
        ("([«“‘„]|`+)", " ${1} "), // re.U, inserted by word_tokenize
        ("^\"", "``"),
        ("(``)", " ${1} "),
        ("([ (\\[{<])(\"|'')", "${1} `` "),
    ])
});

static PUNCTUATION_RULES: LazyLock<Vec<Rule>> = LazyLock::new(|| {
    rules(&[
        // re.U, inserted by word_tokenize: `\s` is Unicode (Python 2's) here.
        (
            "([^.])(\\.)([\\])}>\"'»”’ ]*)[\\s\\x1C-\\x1F\\x{180E}]*$",
            "${1} ${2} ${3} ",
        ),
        ("([:,])([^0-9])", " ${1} ${2}"),
        ("([:,])(\\n?)$", " ${1} ${2}"),
        ("\\.\\.\\.", " ... "),
        ("[;@#$%&]", " ${0} "),
        (
            "([^.])(\\.)([\\])}>\"']*)[ \\t\\n\\r\\x0B\\x0C]*$",
            "${1} ${2}${3} ",
        ),
        ("[?!]", " ${0} "),
        ("([^'])' ", "${1} ' "),
        ("[\\]\\[(){}<>]", " ${0} "), // PARENS_BRACKETS
        ("--", " -- "),               // DOUBLE_DASHES
    ])
});

static ENDING_QUOTES: LazyLock<Vec<Rule>> = LazyLock::new(|| {
    rules(&[
        ("([»”’])", " ${1} "), // re.U, inserted by word_tokenize
        ("\"", " '' "),
        ("([^ \\t\\n\\r\\x0B\\x0C])('')", "${1} ${2} "),
        ("([^' ])('[sS]|'[mM]|'[dD]|') ", "${1} ${2} "),
        ("([^' ])('ll|'LL|'re|'RE|'ve|'VE|n't|N'T) ", "${1} ${2} "),
    ])
});

/// `nltk.word_tokenize(text, preserve_line=True)` of nltk 3.4.5 (see the module doc).
fn word_tokenize(text: &str) -> Vec<String> {
    let text = apply(&STARTING_QUOTES, text.to_string());
    let text = split_single_quotes(&text);
    let text = apply(&PUNCTUATION_RULES, text);
    let text = apply(&ENDING_QUOTES, format!(" {text} "));
    let text = split_contractions(&text);
    text.split(is_py_space)
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .collect()
}

/// Python 2's Unicode `\w`.
fn is_py_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// `(?i)(\')(?!re|ve|ll|m|t|s|d)(\w)\b` (re.U) → `\1 \2`, written out because the regex
/// crate has no look-around: a quote before a one-character word ("'a b") is split off,
/// unless what follows the quote starts like a clitic.
fn split_single_quotes(text: &str) -> String {
    const CLITICS: [&str; 7] = ["re", "ve", "ll", "m", "t", "s", "d"];
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len() + 8);
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let after = chars.get(i + 2).copied();
        let rest: String = chars[i + 1..]
            .iter()
            .take(2)
            .flat_map(|c| c.to_lowercase())
            .collect();
        let clitic = CLITICS.iter().any(|k| rest.starts_with(k));
        if c == '\'' && !clitic && next.is_some_and(is_py_word) && !after.is_some_and(is_py_word) {
            out.push('\'');
            out.push(' ');
            out.extend(next);
            i += 2;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// nltk's MacIntyre contractions, `(?i)\b(can)(not)\b` → ` can not ` and the like, with
/// Python 2's ASCII `\b` and case folding.
fn split_contractions(text: &str) -> String {
    // (leading space required, first, second, what must follow)
    const PAIRS: &[(bool, &str, &str, After)] = &[
        (false, "can", "not", After::Boundary),
        (false, "d", "'ye", After::Boundary),
        (false, "gim", "me", After::Boundary),
        (false, "gon", "na", After::Boundary),
        (false, "got", "ta", After::Boundary),
        (false, "lem", "me", After::Boundary),
        (false, "mor", "'n", After::Boundary),
        (false, "wan", "na", After::Space),
        (true, "'t", "is", After::Boundary),
        (true, "'t", "was", After::Boundary),
    ];
    PAIRS
        .iter()
        .fold(text.to_string(), |t, &(space, first, second, after)| {
            split_pair(&t, space, first, second, after)
        })
}

#[derive(Clone, Copy, PartialEq)]
enum After {
    /// `\b`: the pair ends a word.
    Boundary,
    /// `\s`: a white-space character follows, and is replaced.
    Space,
}

fn is_ascii_word(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// One contraction rule, leftmost and non-overlapping as `re.sub` goes, replaced by
/// ` first second ` in the text's own case.
fn split_pair(text: &str, space: bool, first: &str, second: &str, after: After) -> String {
    let chars: Vec<char> = text.chars().collect();
    let pattern: Vec<char> = space
        .then_some(' ')
        .into_iter()
        .chain(first.chars())
        .chain(second.chars())
        .collect();
    let n = pattern.len();
    let mut out = String::with_capacity(text.len() + 8);
    let mut i = 0;
    while i < chars.len() {
        let window = chars.get(i..i + n);
        let same = window.is_some_and(|w| {
            w.iter()
                .zip(&pattern)
                .all(|(c, p)| c.to_ascii_lowercase() == *p)
        });
        let starts = space || i == 0 || !is_ascii_word(chars[i - 1]);
        let follows = chars.get(i + n).copied();
        let ends = match after {
            After::Boundary => !follows.is_some_and(is_ascii_word),
            After::Space => follows.is_some_and(|c| " \t\n\r\x0B\x0C".contains(c)),
        };
        if same && starts && ends {
            // The text's own spelling of the two parts (the match is case-insensitive).
            let from = i + usize::from(space);
            let cut = from + first.chars().count();
            let a: String = chars[from..cut].iter().collect();
            let b: String = chars[cut..i + n].iter().collect();
            out.push_str(&format!(" {a} {b} "));
            i += n + usize::from(after == After::Space);
        } else {
            out.push(chars[i]);
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segs(s: &str) -> Vec<String> {
        mixed_segmentation(s, true)
    }

    #[test]
    fn chinese_is_split_by_character_and_english_by_word() {
        // (Outputs of the official script.) Removed punctuation does not end a run.
        assert_eq!(
            segs("光荣和ω-force"),
            ["光", "荣", "和", "ωforce"].map(String::from)
        );
        assert_eq!(
            segs("Michael Jordan，1963年"),
            ["michael", "jordan1963", "年"].map(String::from)
        );
        assert_eq!(
            mixed_segmentation("Michael Jordan，1963年", false),
            ["michael", "jordan", "，", "1963", "年"].map(String::from)
        );
        // Without removal, punctuation is a token and ends a run.
        assert_eq!(
            mixed_segmentation("a-b", false),
            ["a", "-", "b"].map(String::from)
        );
        assert_eq!(segs("a-b"), ["ab"].map(String::from));
    }

    #[test]
    fn the_treebank_rules_apply_to_runs() {
        let t = |s: &str| word_tokenize(s);
        assert_eq!(t("$3.88 (roughly)"), ["$", "3.88", "(", "roughly", ")"]);
        assert_eq!(
            t("U.S. and 1,000, ok."),
            ["U.S.", "and", "1,000", ",", "ok", "."]
        );
        assert_eq!(t("They'll cannot"), ["They", "'ll", "can", "not"]);
        assert_eq!(t("\"quoted\" 'a b"), ["``", "quoted", "''", "'", "a", "b"]);
        assert_eq!(t("15%"), ["15", "%"]);
    }

    #[test]
    fn f1_is_over_the_longest_common_run() {
        // Gold 4 tokens, prediction 3 of them contiguous plus 1 more: p = r = 3/4.
        let f = f1(&["北京大学"], "京大学生");
        assert!((f - 0.75).abs() < 1e-12, "{f}");
        assert_eq!(f1(&["北京"], "上海"), 0.0);
        assert_eq!(f1(&["北京", "北京市"], "北京市"), 1.0);
        assert_eq!(f1::<&str>(&[], "x"), 0.0);
    }

    #[test]
    fn exact_match_ignores_the_scripts_punctuation_and_case() {
        assert!(exact_match(&["《战国无双3》"], "战国无双3"));
        assert!(exact_match(&["ABC"], " abc "));
        assert!(!exact_match(&["北京"], "北京市"));
        // "…" is not in the script's set ("……" is, which no character equals).
        assert!(!exact_match(&["好…"], "好"));
    }

    #[test]
    fn evaluate_counts_unanswered_questions_as_zero() {
        let gold = vec![
            GoldQuestion {
                id: "q1".into(),
                answers: vec!["北京".into()],
            },
            GoldQuestion {
                id: "q2 ".into(),
                answers: vec!["上海".into()],
            },
        ];
        let predictions = HashMap::from([("q2".to_string(), "上海".to_string())]);
        let s = evaluate(&gold, &predictions);
        assert_eq!((s.em, s.f1, s.average), (50.0, 50.0, 50.0));
        assert_eq!((s.total, s.skipped), (2, 1));
    }
}
