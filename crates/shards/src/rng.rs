//! The workspace's one small PRNG: SplitMix64 (the reader's shuffles, the `mask` stage's
//! per-document seeds, synthetic benchmark and test data) and Fisher–Yates.
//!
//! Written out here rather than taken from `rand` on purpose: the order in which a training run
//! sees its instances is part of what makes it reproducible, and a library upgrade that changed
//! its algorithms would silently change every run. These few lines never change (a test pins
//! their output).

/// SplitMix64's output function, its finaliser: a strong 64-bit mixer in which every input bit
/// affects every output bit (also the hash of the `clean` stage's near-duplicate sketches).
#[inline]
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

/// A seed for one unit of work, from the run's seed and the unit's coordinates (e.g. a tag,
/// the epoch and the shard index): the same inputs give the same seed whatever the thread count.
pub(crate) fn derive_seed(seed: u64, parts: &[u64]) -> u64 {
    let mut h = mix(seed ^ GOLDEN);
    for &p in parts {
        h = mix(h ^ mix(p.wrapping_add(GOLDEN)));
    }
    h
}

/// One SplitMix64 step as a pure function: `mix(z + golden ratio)`, the generator's output for
/// state `z`. A strong 64-bit hash of `z`, for seeds that must not correlate with their input.
pub fn splitmix64(z: u64) -> u64 {
    mix(z.wrapping_add(GOLDEN))
}

/// SplitMix64 generator.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator whose first output is `splitmix64(seed)`.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let out = splitmix64(self.0);
        self.0 = self.0.wrapping_add(GOLDEN);
        out
    }

    /// A number in `0..n` by Lemire's multiply-shift (bias below n / 2^64: irrelevant here, and
    /// no rejection loop keeps the stream a fixed length).
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}

/// A permutation of `0..n` (Fisher–Yates driven by `seed`).
pub(crate) fn permutation(n: usize, seed: u64) -> Vec<u32> {
    let mut p: Vec<u32> = (0..n as u32).collect();
    let mut rng = SplitMix64(seed);
    for i in (1..n).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        p.swap(i, j);
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permutation_is_a_permutation_and_seeded() {
        for n in [0, 1, 2, 7, 1000] {
            let mut p = permutation(n, 42);
            assert_eq!(p, permutation(n, 42));
            p.sort_unstable();
            assert_eq!(p, (0..n as u32).collect::<Vec<_>>());
        }
        assert_ne!(permutation(100, 1), permutation(100, 2));
    }

    #[test]
    fn output_is_frozen() {
        // If this changes, every recorded training order changes: do not "fix" it casually.
        assert_eq!(permutation(8, 7), vec![7, 4, 6, 1, 2, 5, 0, 3]);
        assert_eq!(derive_seed(7, &[1, 2]), 8_874_644_468_403_505_530);
        assert_eq!(derive_seed(0, &[1, 2]), derive_seed(0, &[1, 2]));
        assert_ne!(derive_seed(0, &[1, 2]), derive_seed(0, &[2, 1]));
        // The stateless step is the generator's output for that state.
        let mut g = SplitMix64::new(7);
        assert_eq!(g.next_u64(), splitmix64(7));
        assert_eq!(g.next_u64(), splitmix64(7u64.wrapping_add(GOLDEN)));
    }
}
