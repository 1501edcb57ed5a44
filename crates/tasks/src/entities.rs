//! Entities from tag sequences, and entity-level precision, recall and F1 (overall and per type)
//! with token accuracy, computed exactly as seqeval 1.2 computes them in its default mode
//! (`f1_score(y_true, y_pred)` without `mode="strict"`, the conlleval-compatible one):
//!
//! - an entity starts at `B-X`, or at an `I-X` that does not continue an entity of type X (an
//!   `I-` after `O` or after another type starts one: it is not dropped);
//! - it ends before `O`, before `B-`, and before a change of type;
//! - sentences are scored as one stream with an `O` between them (what seqeval does to a list
//!   of lists), so no entity crosses a sentence;
//! - a predicted entity is correct when its type, start and end are all the gold ones.
//!
//! The chunking rules are seqeval's `end_of_chunk` / `start_of_chunk` transcribed whole (its
//! IOBES cases included), so that any tag sequence, not only well-formed BIO, gets seqeval's
//! entities. Written here rather than called because seqeval is Python; the tests compare the
//! two on random sequences (`crates/tasks/tests/seqeval_parity.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::iter::once;

use serde::{Deserialize, Serialize};

/// One entity of a sentence: tokens `start..end` of type `kind`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Entity {
    /// `PER` of `B-PER`; `_` for a tag without a type (`B`), as seqeval names it.
    pub kind: String,
    /// The first token.
    pub start: usize,
    /// One past the last token.
    pub end: usize,
}

/// Inputs that cannot be scored (a bug in the caller: gold and predictions come from the same
/// sentences).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntityError {
    /// Gold and predictions hold different numbers of sentences.
    #[error("{gold} gold sentences but {predicted} predicted ones")]
    SentenceCount {
        /// Gold sentences.
        gold: usize,
        /// Predicted sentences.
        predicted: usize,
    },
    /// A sentence with different numbers of gold and predicted tags.
    #[error("sentence {index}: {gold} gold tags but {predicted} predicted ones")]
    SentenceLength {
        /// The sentence's 0-based position.
        index: usize,
        /// Its gold tags.
        gold: usize,
        /// Its predicted tags.
        predicted: usize,
    },
    /// No sentence, or only empty ones: nothing to score.
    #[error("no tokens to evaluate")]
    Empty,
}

/// Precision, recall and F1 of one entity type (or of all pooled), with the counts they come
/// from. A ratio whose denominator is 0 is 0, as seqeval's default `zero_division` gives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EntityPrf {
    /// `correct / predicted`, in [0, 1].
    pub precision: f64,
    /// `correct / gold`, in [0, 1].
    pub recall: f64,
    /// The harmonic mean of precision and recall, in [0, 1].
    pub f1: f64,
    /// Gold entities (seqeval's `support`).
    pub gold: usize,
    /// Predicted entities.
    pub predicted: usize,
    /// Predicted entities with the gold type, start and end.
    pub correct: usize,
}

impl EntityPrf {
    fn from_counts(gold: usize, predicted: usize, correct: usize) -> Self {
        let precision = ratio(correct, predicted);
        let recall = ratio(correct, gold);
        EntityPrf {
            precision,
            recall,
            f1: harmonic(precision, recall),
            gold,
            predicted,
            correct,
        }
    }
}

/// Everything a tagger's evaluation reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EntityScores {
    /// All types pooled: seqeval's `precision_score`, `recall_score`, `f1_score` (default
    /// `average="micro"`), the figure NER papers report.
    pub micro: EntityPrf,
    /// The unweighted mean of the per-type precision, recall and F1 (`average="macro"`; the
    /// counts are the sums); 0 when there is no type at all.
    #[serde(rename = "macro")]
    pub macro_avg: EntityPrf,
    /// Per type, over the types in gold or predictions (seqeval's `classification_report` rows).
    pub per_type: BTreeMap<String, EntityPrf>,
    /// Share of tokens whose predicted tag is the gold tag (seqeval's `accuracy_score`, `O`
    /// included).
    pub token_accuracy: f64,
    /// Tokens (tags) scored, over all sentences.
    pub tokens: usize,
    /// Sentences scored.
    pub sentences: usize,
}

fn ratio(num: usize, den: usize) -> f64 {
    if den == 0 {
        0.0
    } else {
        num as f64 / den as f64
    }
}

fn harmonic(p: f64, r: f64) -> f64 {
    if p + r == 0.0 {
        0.0
    } else {
        2.0 * p * r / (p + r)
    }
}

/// A tag as seqeval's `get_entities` splits it: its first character, and the type after the
/// first `-` of the rest (the rest itself without a `-`; `_` when empty). An empty tag, which
/// seqeval cannot take, is read as `O`.
fn split_tag(tag: &str) -> (char, &str) {
    let mut chars = tag.chars();
    let Some(prefix) = chars.next() else {
        return ('O', "_");
    };
    let rest = chars.as_str();
    let kind = rest.split_once('-').map_or(rest, |(_, kind)| kind);
    (prefix, if kind.is_empty() { "_" } else { kind })
}

/// seqeval's `end_of_chunk`: whether an entity ended between the previous and this token.
fn end_of_chunk(prev_tag: char, tag: char, prev_type: &str, kind: &str) -> bool {
    matches!(prev_tag, 'E' | 'S')
        || (matches!(prev_tag, 'B' | 'I') && matches!(tag, 'B' | 'S' | 'O'))
        || (prev_tag != 'O' && prev_tag != '.' && prev_type != kind)
}

/// seqeval's `start_of_chunk`: whether an entity starts at this token.
fn start_of_chunk(prev_tag: char, tag: char, prev_type: &str, kind: &str) -> bool {
    matches!(tag, 'B' | 'S')
        || (matches!(prev_tag, 'E' | 'S' | 'O') && matches!(tag, 'E' | 'I'))
        || (tag != 'O' && tag != '.' && prev_type != kind)
}

/// seqeval's `get_entities` over a stream of tags: `(type, first, last)` with `last`
/// inclusive, offsets into the stream. An `O` is appended, as seqeval does, to close the last
/// entity.
fn chunks<'a>(tags: impl Iterator<Item = &'a str>) -> Vec<(&'a str, usize, usize)> {
    let (mut prev_tag, mut prev_type, mut begin) = ('O', "", 0);
    let mut out = Vec::new();
    for (i, tag) in tags.chain(once("O")).enumerate() {
        let (prefix, kind) = split_tag(tag);
        if end_of_chunk(prev_tag, prefix, prev_type, kind) {
            out.push((prev_type, begin, i - 1));
        }
        if start_of_chunk(prev_tag, prefix, prev_type, kind) {
            begin = i;
        }
        (prev_tag, prev_type) = (prefix, kind);
    }
    out
}

/// The entities of one sentence's tags, in order.
pub fn entities<S: AsRef<str>>(tags: &[S]) -> Vec<Entity> {
    chunks(tags.iter().map(AsRef::as_ref))
        .into_iter()
        .map(|(kind, first, last)| Entity {
            kind: kind.to_string(),
            start: first,
            end: last + 1,
        })
        .collect()
}

/// The entities of all sentences, by type, as `(first, last)` offsets into the stream that
/// joins the sentences with an `O` between them (seqeval's flattening).
fn entities_by_type<S: AsRef<str>>(
    sentences: &[Vec<S>],
) -> BTreeMap<&str, BTreeSet<(usize, usize)>> {
    let stream = sentences
        .iter()
        .flat_map(|s| s.iter().map(AsRef::as_ref).chain(once("O")));
    let mut by_type: BTreeMap<&str, BTreeSet<(usize, usize)>> = BTreeMap::new();
    for (kind, first, last) in chunks(stream) {
        by_type.entry(kind).or_default().insert((first, last));
    }
    by_type
}

fn check<S: AsRef<str>>(gold: &[Vec<S>], predicted: &[Vec<S>]) -> Result<usize, EntityError> {
    if gold.len() != predicted.len() {
        return Err(EntityError::SentenceCount {
            gold: gold.len(),
            predicted: predicted.len(),
        });
    }
    for (index, (g, p)) in gold.iter().zip(predicted).enumerate() {
        if g.len() != p.len() {
            return Err(EntityError::SentenceLength {
                index,
                gold: g.len(),
                predicted: p.len(),
            });
        }
    }
    match gold.iter().map(Vec::len).sum() {
        0 => Err(EntityError::Empty),
        tokens => Ok(tokens),
    }
}

/// Entity-level scores of `predicted` tags against `gold` ones, sentence by sentence (the same
/// number of sentences, each with as many predicted tags as gold ones).
pub fn score<S: AsRef<str>>(
    gold: &[Vec<S>],
    predicted: &[Vec<S>],
) -> Result<EntityScores, EntityError> {
    let tokens = check(gold, predicted)?;
    let gold_entities = entities_by_type(gold);
    let predicted_entities = entities_by_type(predicted);
    let empty = BTreeSet::new();
    let kinds: BTreeSet<&str> = gold_entities
        .keys()
        .chain(predicted_entities.keys())
        .copied()
        .collect();
    let per_type: BTreeMap<String, EntityPrf> = kinds
        .iter()
        .map(|kind| {
            let g = gold_entities.get(kind).unwrap_or(&empty);
            let p = predicted_entities.get(kind).unwrap_or(&empty);
            let prf = EntityPrf::from_counts(g.len(), p.len(), g.intersection(p).count());
            (kind.to_string(), prf)
        })
        .collect();
    let sum = |f: fn(&EntityPrf) -> usize| per_type.values().map(f).sum::<usize>();
    let micro = EntityPrf::from_counts(sum(|e| e.gold), sum(|e| e.predicted), sum(|e| e.correct));
    let mean = |f: fn(&EntityPrf) -> f64| {
        let n = per_type.len();
        if n == 0 {
            0.0
        } else {
            per_type.values().map(f).sum::<f64>() / n as f64
        }
    };
    let macro_avg = EntityPrf {
        precision: mean(|e| e.precision),
        recall: mean(|e| e.recall),
        f1: mean(|e| e.f1),
        ..micro.clone()
    };
    let right = gold
        .iter()
        .zip(predicted)
        .flat_map(|(g, p)| g.iter().zip(p))
        .filter(|(g, p)| g.as_ref() == p.as_ref())
        .count();
    Ok(EntityScores {
        micro,
        macro_avg,
        per_type,
        token_accuracy: ratio(right, tokens),
        tokens,
        sentences: gold.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    fn spans(s: &str) -> Vec<(String, usize, usize)> {
        entities(&tags(s))
            .into_iter()
            .map(|e| (e.kind, e.start, e.end))
            .collect()
    }

    fn e(kind: &str, start: usize, end: usize) -> (String, usize, usize) {
        (kind.to_string(), start, end)
    }

    #[test]
    fn bio_entities() {
        assert_eq!(
            spans("B-PER I-PER O B-LOC"),
            [e("PER", 0, 2), e("LOC", 3, 4)]
        );
        // B after B, and a type change inside a run, end an entity.
        assert_eq!(
            spans("B-PER B-PER I-LOC I-LOC"),
            [e("PER", 0, 1), e("PER", 1, 2), e("LOC", 2, 4)]
        );
        assert!(spans("O O").is_empty());
        assert!(spans("").is_empty());
    }

    #[test]
    fn an_i_without_a_b_starts_an_entity() {
        assert_eq!(spans("O I-ORG I-ORG O"), [e("ORG", 1, 3)]);
        assert_eq!(spans("I-LOC"), [e("LOC", 0, 1)]);
        assert_eq!(spans("B-PER I-LOC"), [e("PER", 0, 1), e("LOC", 1, 2)]);
    }

    #[test]
    fn seqevals_docstring_examples() {
        // seqeval's precision_score docstring: micro 2/3, macro 0.75, MISC 0.5, PER 1.0.
        let gold = vec![tags("O O B-MISC I-MISC B-MISC O O"), tags("B-PER I-PER O")];
        let predicted = vec![
            tags("O O B-MISC I-MISC B-MISC I-MISC O"),
            tags("B-PER I-PER O"),
        ];
        let s = score(&gold, &predicted).unwrap();
        assert!((s.micro.precision - 2.0 / 3.0).abs() < 1e-12);
        assert!((s.macro_avg.precision - 0.75).abs() < 1e-12);
        assert_eq!(s.per_type["MISC"].precision, 0.5);
        assert_eq!(s.per_type["PER"].f1, 1.0);
        assert_eq!(
            (s.micro.gold, s.micro.predicted, s.micro.correct),
            (3, 3, 2)
        );
        // accuracy_score's docstring pair: 0.80.
        let gold = vec![tags("O O O B-MISC I-MISC I-MISC O"), tags("B-PER I-PER O")];
        let predicted = vec![
            tags("O O B-MISC I-MISC I-MISC I-MISC O"),
            tags("B-PER I-PER O"),
        ];
        let s = score(&gold, &predicted).unwrap();
        assert!((s.token_accuracy - 0.8).abs() < 1e-12);
        assert_eq!((s.tokens, s.sentences), (10, 2));
    }

    #[test]
    fn no_entity_crosses_a_sentence() {
        let gold = vec![tags("O B-PER"), tags("I-PER O")];
        let s = score(&gold, &gold).unwrap();
        assert_eq!(s.micro.gold, 2);
        assert_eq!(s.micro.f1, 1.0);
    }

    #[test]
    fn nothing_predicted_scores_zero_not_nan() {
        let gold = vec![tags("B-LOC O")];
        let predicted = vec![tags("O O")];
        let s = score(&gold, &predicted).unwrap();
        assert_eq!(
            (s.micro.precision, s.micro.recall, s.micro.f1),
            (0.0, 0.0, 0.0)
        );
        assert_eq!(s.token_accuracy, 0.5);
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["macro"]["f1"], 0.0);
        let back: EntityScores = serde_json::from_value(json).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn mismatched_inputs_are_errors() {
        let one = vec![tags("O")];
        let two = vec![tags("O"), tags("O")];
        assert_eq!(
            score(&one, &two).unwrap_err(),
            EntityError::SentenceCount {
                gold: 1,
                predicted: 2
            }
        );
        let long = vec![tags("O O")];
        assert!(matches!(
            score(&one, &long).unwrap_err(),
            EntityError::SentenceLength { index: 0, .. }
        ));
        let empty: Vec<Vec<String>> = vec![vec![]];
        assert_eq!(score(&empty, &empty).unwrap_err(), EntityError::Empty);
    }
}
