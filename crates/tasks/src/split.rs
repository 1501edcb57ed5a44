//! Seeded, stratified selection of examples: the held-out dev set (`dev_fraction`) and the
//! subsamples of `max_train_examples` / `max_eval_examples`.
//!
//! A split is part of an experiment's protocol, so it must come out the same on every machine
//! and in every future build: the random numbers come from ChaCha8 (a specified, portable
//! stream; one stream per purpose, so capping train does not move the dev set), and the
//! shuffle and bounded draws are written here rather than taken from `rand::seq`, whose
//! algorithms may change between rand versions.
//!
//! Stratified: each class gives its share of the selection (largest-remainder rounding, so
//! the total is exact), so a 10 % dev set of a 50/50 data set is 50/50 too. Chosen and remaining
//! indices are returned in ascending order, i.e. in file order.

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::error::TaskError;

/// The independent random streams of a protocol, all derived from its `split_seed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u64)]
pub enum Stream {
    /// The dev set held out of train.
    Dev = 1,
    /// The `max_train_examples` subsample.
    TrainCap = 2,
    /// The `max_eval_examples` subsample (dev and each evaluation set).
    EvalCap = 3,
}

fn rng(seed: u64, stream: Stream) -> ChaCha8Rng {
    let mut r = ChaCha8Rng::seed_from_u64(seed);
    r.set_stream(stream as u64);
    r
}

/// A uniform draw from `0..n` (n > 0) without modulo bias (Lemire's multiply-and-reject).
fn below(rng: &mut ChaCha8Rng, n: u64) -> u64 {
    let threshold = n.wrapping_neg() % n;
    loop {
        let m = u128::from(rng.next_u64()) * u128::from(n);
        if (m as u64) >= threshold {
            return (m >> 64) as u64;
        }
    }
}

/// Fisher–Yates.
fn shuffle<T>(items: &mut [T], rng: &mut ChaCha8Rng) {
    for i in (1..items.len()).rev() {
        let j = below(rng, i as u64 + 1) as usize;
        items.swap(i, j);
    }
}

/// Per-class quotas that add up to `k` (≤ the total), each proportional to the class size,
/// rounded by largest remainder (ties: the lower class id first).
pub fn quotas(class_sizes: &[usize], k: usize) -> Vec<usize> {
    let n: usize = class_sizes.iter().sum();
    if n == 0 {
        return vec![0; class_sizes.len()];
    }
    let k = k.min(n);
    let exact = |c: usize| u128::from(k as u64) * u128::from(class_sizes[c] as u64);
    let mut q: Vec<usize> = (0..class_sizes.len())
        .map(|c| (exact(c) / n as u128) as usize)
        .collect();
    let mut left = k - q.iter().sum::<usize>();
    let mut order: Vec<usize> = (0..class_sizes.len()).collect();
    order.sort_by_key(|&c| (std::cmp::Reverse(exact(c) % n as u128), c));
    for c in order {
        if left == 0 {
            break;
        }
        if q[c] < class_sizes[c] {
            q[c] += 1;
            left -= 1;
        }
    }
    q
}

/// Chooses `k` of the examples (all if `k` ≥ their number), stratified by `labels`, seeded.
/// Returns (chosen, rest), both ascending.
pub fn stratified_choice(
    labels: &[usize],
    k: usize,
    seed: u64,
    stream: Stream,
) -> (Vec<usize>, Vec<usize>) {
    let classes = labels.iter().max().map_or(0, |m| m + 1);
    let mut by_class: Vec<Vec<usize>> = vec![Vec::new(); classes];
    for (i, &l) in labels.iter().enumerate() {
        by_class[l].push(i);
    }
    let sizes: Vec<usize> = by_class.iter().map(Vec::len).collect();
    let q = quotas(&sizes, k);
    let mut rng = rng(seed, stream);
    let mut chosen = Vec::with_capacity(k.min(labels.len()));
    for (members, take) in by_class.iter_mut().zip(q) {
        shuffle(members, &mut rng);
        chosen.extend_from_slice(&members[..take]);
    }
    chosen.sort_unstable();
    let mut is_chosen = vec![false; labels.len()];
    for &i in &chosen {
        is_chosen[i] = true;
    }
    let rest = (0..labels.len()).filter(|&i| !is_chosen[i]).collect();
    (chosen, rest)
}

/// The dev size for `fraction` of `n` examples: `round(fraction · n)`, at least 1 and at most
/// `n - 1`, so that neither side is empty.
pub fn holdout_size(n: usize, fraction: f64) -> usize {
    ((fraction * n as f64).round() as usize).clamp(1, n.saturating_sub(1).max(1))
}

/// Holds out `fraction` of the examples as a dev set, stratified by label, seeded.
/// Returns (train, dev) indices, both ascending; they partition `0..labels.len()`.
pub fn holdout(
    labels: &[usize],
    fraction: f64,
    seed: u64,
) -> Result<(Vec<usize>, Vec<usize>), TaskError> {
    if !(fraction > 0.0 && fraction < 1.0) {
        return Err(TaskError::Split(format!(
            "dev_fraction = {fraction} must be in (0, 1)"
        )));
    }
    if labels.len() < 2 {
        return Err(TaskError::Split(format!(
            "train has {} example(s): too few to hold out dev_fraction = {fraction}",
            labels.len()
        )));
    }
    let (dev, train) = stratified_choice(
        labels,
        holdout_size(labels.len(), fraction),
        seed,
        Stream::Dev,
    );
    Ok((train, dev))
}

/// `max` of the examples (all if there are no more), stratified by label, seeded; ascending.
pub fn subsample(labels: &[usize], max: usize, seed: u64, stream: Stream) -> Vec<usize> {
    if max >= labels.len() {
        return (0..labels.len()).collect();
    }
    stratified_choice(labels, max, seed, stream).0
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn quotas_are_exact_and_proportional() {
        assert_eq!(quotas(&[50, 50], 10), [5, 5]);
        assert_eq!(quotas(&[4402, 4400], 880), [440, 440]);
        assert_eq!(quotas(&[1, 1, 1], 2), [1, 1, 0]);
        assert_eq!(quotas(&[0, 10], 3), [0, 3]);
        assert_eq!(quotas(&[3, 7], 100), [3, 7]);
        assert_eq!(quotas(&[], 3), Vec::<usize>::new());
        assert_eq!(quotas(&[830, 830, 830], 125), [42, 42, 41]);
    }

    #[test]
    fn holdout_sizes() {
        assert_eq!(holdout_size(8802, 0.1), 880);
        assert_eq!(holdout_size(10, 0.01), 1);
        assert_eq!(holdout_size(10, 0.99), 9);
        assert_eq!(holdout_size(2, 0.5), 1);
        assert!(holdout(&[0], 0.1, 1).is_err());
        assert!(holdout(&[0, 1], 0.0, 1).is_err());
        assert!(holdout(&[0, 1], 1.0, 1).is_err());
        assert!(holdout(&[0, 1], f64::NAN, 1).is_err());
    }

    #[test]
    fn the_split_is_frozen() {
        // The protocol of published runs depends on these exact indices: a change here is a
        // change of every experiment's dev set, and must be deliberate.
        let labels: Vec<usize> = (0..20).map(|i| i % 2).collect();
        let (_, dev) = holdout(&labels, 0.25, 12345).unwrap();
        assert_eq!(dev, FROZEN_DEV);
        let mut rng = rng(7, Stream::Dev);
        let draws: Vec<u64> = (0..5).map(|_| below(&mut rng, 10)).collect();
        assert_eq!(draws, FROZEN_DRAWS);
    }
    const FROZEN_DEV: [usize; 5] = [8, 10, 15, 18, 19];
    const FROZEN_DRAWS: [u64; 5] = [9, 0, 7, 5, 0];

    #[test]
    fn streams_are_independent() {
        let labels: Vec<usize> = (0..200).map(|i| i % 3).collect();
        let a = subsample(&labels, 50, 1, Stream::TrainCap);
        let b = subsample(&labels, 50, 1, Stream::EvalCap);
        assert_ne!(a, b);
        assert_eq!(subsample(&labels, 500, 1, Stream::TrainCap).len(), 200);
    }

    proptest! {
        #[test]
        fn holdout_is_a_stratified_deterministic_partition(
            labels in prop::collection::vec(0usize..4, 2..400),
            fraction in 0.01f64..0.99,
            seed in any::<u64>(),
        ) {
            let (train, dev) = holdout(&labels, fraction, seed).unwrap();
            // A partition of 0..n, each side ascending.
            let mut all: Vec<usize> = train.iter().chain(&dev).copied().collect();
            all.sort_unstable();
            prop_assert_eq!(all, (0..labels.len()).collect::<Vec<_>>());
            prop_assert!(train.windows(2).all(|w| w[0] < w[1]));
            prop_assert!(dev.windows(2).all(|w| w[0] < w[1]));
            // The size asked for, neither side empty.
            prop_assert_eq!(dev.len(), holdout_size(labels.len(), fraction));
            prop_assert!(!train.is_empty() && !dev.is_empty());
            // Each class gives its share, within one.
            for c in 0..4 {
                let n_c = labels.iter().filter(|&&l| l == c).count();
                let d_c = dev.iter().filter(|&&i| labels[i] == c).count();
                let share = dev.len() as f64 * n_c as f64 / labels.len() as f64;
                prop_assert!((d_c as f64 - share).abs() < 1.0 + 1e-9, "class {} {} vs {}", c, d_c, share);
            }
            // Deterministic for a seed.
            prop_assert_eq!(holdout(&labels, fraction, seed).unwrap(), (train, dev));
        }

        #[test]
        fn subsample_takes_exactly_max(
            labels in prop::collection::vec(0usize..3, 0..300),
            max in 0usize..400,
            seed in any::<u64>(),
        ) {
            let s = subsample(&labels, max, seed, Stream::TrainCap);
            prop_assert_eq!(s.len(), max.min(labels.len()));
            prop_assert!(s.windows(2).all(|w| w[0] < w[1]));
            prop_assert!(s.iter().all(|&i| i < labels.len()));
            prop_assert_eq!(s, subsample(&labels, max, seed, Stream::TrainCap));
        }

        #[test]
        fn below_is_in_range(n in 1u64..u64::MAX, seed in any::<u64>()) {
            let mut r = rng(seed, Stream::Dev);
            prop_assert!(below(&mut r, n) < n);
        }
    }
}
