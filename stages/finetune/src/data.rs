//! The order examples are trained in: a seeded shuffle per epoch, and batches of examples of
//! similar length so that a batch pads to little more than its own examples (sentence pairs
//! vary from ~15 to 128 tokens; padding every row to a batch's longest wasted a third of the
//! fine-tuning compute on XNLI). The encoded splits themselves are the kinds'
//! ([`pipeline_tasks::kinds::features`]), re-exported here under their old paths.
//!
//! The shuffle draws from the workspace's one generator (`pipeline_shards::rng::SplitMix64`)
//! but bounds its numbers by `%`, not by the generator's `below`: that is how fine-tuning's own
//! copy of SplitMix64 drew them before, and a different draw would change every fine-tuning
//! run's example order.

use pipeline_shards::rng::SplitMix64;

pub use pipeline_tasks::kinds::features::{EncodeNotes, EncodedSplit, Targets, Window};

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
