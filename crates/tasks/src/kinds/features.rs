//! The protocol's examples as token ids, and the order they are trained in: a seeded shuffle
//! per epoch, and batches of examples of similar length so that a batch pads to little more
//! than its own examples (sentence pairs vary from ~15 to 128 tokens; padding every row to a
//! batch's longest wasted a third of the fine-tuning compute on XNLI).
//!
//! The shuffle draws from the workspace's one generator (`pipeline_shards::rng::SplitMix64`)
//! but bounds its numbers by `%`, not by the generator's `below`: that is how fine-tuning's own
//! copy of SplitMix64 drew them before, and a different draw would change every fine-tuning
//! run's example order.

use std::any::Any;

use pipeline_shards::rng::SplitMix64;

use crate::encode::Encoded;
use crate::kinds::KindError;

/// Encoded examples of one split, as features: the model rows of each (one for a pair, a
/// single text, a tagging window or a span window; N for a choice question), the target each
/// is trained towards, and what maps the head's outputs on the features back to examples.
pub struct EncodedSplit {
    /// The split's name: `train`, `dev`, or an evaluation set's (metrics.json's keys).
    pub name: String,
    /// The model rows of each feature, unpadded: one, or one per choice of a question.
    pub rows: Vec<Vec<Encoded>>,
    /// One target per feature.
    pub targets: Targets,
    /// What maps the head's outputs on the features back to one prediction per example: the
    /// kind's own [`crate::kinds::Kind::Features`], boxed so that the stage holds the splits
    /// of every kind alike ([`EncodedSplit::features`] unboxes it).
    pub decoding: Box<dyn Any + Send + Sync>,
    /// How many examples the features came from.
    pub examples: usize,
    /// Examples the encoding could not serve whole, by cause (e.g. `answer_in_no_window`),
    /// with their ids: metrics.json's `encoding` block.
    pub notes: EncodeNotes,
}

/// What each feature is trained towards.
#[derive(Debug, Clone, PartialEq)]
pub enum Targets {
    /// A class (or the right choice) per feature.
    Classes(Vec<usize>),
    /// A tag at each position of each feature, −100 where the loss ignores it (special tokens,
    /// the non-first pieces of a character).
    Tags(Vec<Vec<i64>>),
    /// The answer's start and end positions in each feature (both 0, `[CLS]`, where the
    /// window does not hold the whole answer).
    Spans(Vec<(usize, usize)>),
    /// A gold score per feature (sentence-pair regression).
    Scores(Vec<f32>),
}

impl Targets {
    /// The class ids of split `split`'s features, or the error of a split encoded with other
    /// targets.
    pub fn classes(&self, split: &str) -> Result<&[usize], KindError> {
        match self {
            Targets::Classes(c) => Ok(c),
            _ => Err(shape(split, "targets", "classes", self.shape())),
        }
    }

    /// The gold scores of split `split`'s features, or the error of a split encoded with
    /// other targets.
    pub fn scores(&self, split: &str) -> Result<&[f32], KindError> {
        match self {
            Targets::Scores(s) => Ok(s),
            _ => Err(shape(split, "targets", "scores", self.shape())),
        }
    }

    fn shape(&self) -> &'static str {
        match self {
            Targets::Classes(_) => "classes",
            Targets::Tags(_) => "tags",
            Targets::Spans(_) => "answer spans",
            Targets::Scores(_) => "scores",
        }
    }
}

/// A split's `what` of shape `found` where `expected` was needed.
fn shape(
    split: &str,
    what: &'static str,
    expected: &'static str,
    found: &'static str,
) -> KindError {
    KindError::Shape {
        split: split.to_string(),
        what,
        expected,
        found,
    }
}

/// Examples set aside or served in part while encoding, by cause, with every id.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct EncodeNotes(pub std::collections::BTreeMap<&'static str, Vec<String>>);

impl EncodeNotes {
    /// Notes example `id` under `cause` (`answer_in_no_window`, `encoding_error`, …).
    pub fn record(&mut self, cause: &'static str, id: &str) {
        self.0.entry(cause).or_default().push(id.to_string());
    }

    /// How many examples were noted under `cause` (0 for a cause never noted).
    pub fn count(&self, cause: &str) -> usize {
        self.0.get(cause).map_or(0, Vec::len)
    }

    /// Whether every example was served whole (metrics.json then has no `encoding` entry for
    /// the split).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `{cause: {count, ids}}` for metrics.json.
    pub fn to_json(&self) -> serde_json::Value {
        self.0
            .iter()
            .map(|(k, ids)| {
                (
                    k.to_string(),
                    serde_json::json!({"count": ids.len(), "ids": ids}),
                )
            })
            .collect::<serde_json::Map<_, _>>()
            .into()
    }
}

/// A window of a tagged sentence: which example, and for each position the character whose
/// tag it decides (its first piece, in the window that gives it the most context), if any.
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    /// The example (sentence) it comes from: its index in the split.
    pub example: usize,
    /// One per position of the window's row: the index of the character whose tag the
    /// position decides, `None` for the special tokens, a character's later pieces, and the
    /// characters another window decides.
    pub decides: Vec<Option<usize>>,
}

impl EncodedSplit {
    /// Features of a classification kind: one per example.
    pub fn classes(name: &str, rows: Vec<Vec<Encoded>>, labels: Vec<usize>) -> EncodedSplit {
        EncodedSplit {
            name: name.into(),
            examples: rows.len(),
            rows,
            targets: Targets::Classes(labels),
            decoding: Box::new(()),
            notes: EncodeNotes::default(),
        }
    }

    /// The kind's features, or the error of a split another kind encoded.
    pub fn features<F: Any>(&self) -> Result<&F, KindError> {
        self.decoding
            .downcast_ref()
            .ok_or_else(|| KindError::Shape {
                split: self.name.clone(),
                what: "features",
                expected: std::any::type_name::<F>(),
                found: "another kind's",
            })
    }

    /// An example's length: its longest row.
    pub fn length(&self, i: usize) -> usize {
        self.rows[i].iter().map(|r| r.ids.len()).max().unwrap_or(0)
    }
}

/// Fisher–Yates driven by `rng` (the order depends only on its seed).
fn shuffle<T>(rng: &mut SplitMix64, v: &mut [T]) {
    for i in (1..v.len()).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
}

/// How many batches' worth of shuffled examples are sorted by length together: large enough
/// that batches come out nearly uniform in length, small enough that a batch's examples are
/// still a random draw from the training set.
const GROUP_BATCHES: usize = 50;

/// The batches of one epoch, as example indices. The examples are shuffled with `seed`; with
/// `group_by_length`, each run of `GROUP_BATCHES` batches' worth of them is sorted by length
/// before it is cut into batches, and the batches are shuffled again, so every batch is a
/// random draw of similar-length examples and the epoch still sees every example once.
pub fn epoch_batches(
    lengths: &[usize],
    batch_size: usize,
    seed: u64,
    group_by_length: bool,
) -> Vec<Vec<usize>> {
    let mut rng = SplitMix64::new(seed);
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    shuffle(&mut rng, &mut order);
    let batch_size = batch_size.max(1);
    if group_by_length {
        for group in order.chunks_mut(batch_size * GROUP_BATCHES) {
            // Stable, so equal lengths keep their shuffled order.
            group.sort_by_key(|&i| lengths[i]);
        }
    }
    let mut batches: Vec<Vec<usize>> = order.chunks(batch_size).map(<[usize]>::to_vec).collect();
    if group_by_length {
        shuffle(&mut rng, &mut batches);
    }
    batches
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The order of the SplitMix64 copy this module had before it used the workspace's
    /// generator (computed from that code): a change here changes every fine-tuning run.
    #[test]
    fn the_epoch_order_is_pinned() {
        let lengths: Vec<usize> = (0..10).map(|i| (i * 37) % 23 + 1).collect();
        assert_eq!(
            epoch_batches(&lengths, 3, 42, true),
            [vec![7, 4, 9], vec![0, 5, 2], vec![8], vec![1, 6, 3]]
        );
        assert_eq!(
            epoch_batches(&lengths, 3, 42, false),
            [vec![0, 9, 5], vec![8, 6, 4], vec![7, 2, 1], vec![3]]
        );
    }

    #[test]
    fn every_example_once_and_batches_of_similar_length() {
        let lengths: Vec<usize> = (0..1000).map(|i| 10 + (i * 37) % 100).collect();
        for group in [false, true] {
            let batches = epoch_batches(&lengths, 32, 7, group);
            let mut seen: Vec<usize> = batches.iter().flatten().copied().collect();
            seen.sort_unstable();
            assert_eq!(seen, (0..1000).collect::<Vec<_>>(), "group {group}");
            assert!(batches.iter().all(|b| b.len() <= 32));
        }
        // Padding: the sum over batches of (longest × rows) against the real tokens.
        let padded = |batches: &[Vec<usize>]| -> usize {
            batches
                .iter()
                .map(|b| b.iter().map(|&i| lengths[i]).max().unwrap_or(0) * b.len())
                .sum()
        };
        let real: usize = lengths.iter().sum();
        let plain = padded(&epoch_batches(&lengths, 32, 7, false));
        let grouped = padded(&epoch_batches(&lengths, 32, 7, true));
        assert!(grouped < plain, "{grouped} vs {plain}");
        assert!((grouped as f64) < 1.1 * real as f64, "{grouped} vs {real}");
    }

    #[test]
    fn the_seed_decides_the_order() {
        let lengths = vec![5; 100];
        assert_eq!(
            epoch_batches(&lengths, 8, 1, true),
            epoch_batches(&lengths, 8, 1, true)
        );
        assert_ne!(
            epoch_batches(&lengths, 8, 1, true),
            epoch_batches(&lengths, 8, 2, true)
        );
    }
}
