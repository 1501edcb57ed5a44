//! Exact and near-duplicate document detection, deterministic and without keeping texts.
//!
//! - **Exact**: a 128-bit blake3 digest of the (normalised) text.
//! - **Near**: the Jaccard similarity of the documents' sets of character 5-shingles
//!   (whitespace ignored), found in two steps:
//!   1. *candidates* by LSH banding over a 64-value MinHash signature computed by
//!      one-permutation hashing with optimal densification (Shrivastava, ICML 2017): each
//!      shingle is hashed once and lands in one of 64 bins; an empty bin borrows the value of
//!      the first filled bin of its own fixed probe sequence. [`BANDS`] = 16 bands of [`ROWS`]
//!      = 4 values: a pair with Jaccard 0.8 shares a band with probability
//!      1 − (1 − 0.8⁴)¹⁶ ≈ 0.9998, one with 0.7 with 0.988, one with 0.6 with 0.89;
//!   2. *verification* with a bottom-k sketch (the [`SKETCH_K`] smallest shingle hashes):
//!      exact for documents of up to 128 distinct shingles, and for longer ones an estimate with
//!      the accuracy of 128 independent permutations (standard deviation ≤ 0.045). The densified
//!      signature alone is too noisy for short texts (a review of 50 characters fills about 30
//!      bins), which is why it only proposes candidates.
//!
//!   Both come from one hash per character, instead of 128 for classic MinHash.
//!
//! [`Deduplicator`] sees documents in input order: the first of a group of duplicates is kept.
//! It stores, per kept document, the 16-byte digest, the sketch (at most 512 bytes) and 16 band
//! keys (under 1 KB in all), never the text. Seeds are constants: the same input gives the same
//! verdicts on every machine and thread count.
//!
//! Fingerprinting is independent per document and can run in parallel; only
//! [`Deduplicator::check`] must run in order.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

// The SplitMix64 finaliser: every input bit affects every output bit.
use pipeline_shards::rng::mix;

/// Bins of the one-permutation MinHash signature used for banding.
pub const NUM_HASHES: usize = 64;
/// LSH bands; `BANDS * ROWS == NUM_HASHES`.
pub const BANDS: usize = 16;
/// Values per band.
pub const ROWS: usize = 4;
/// Shingle hashes kept for verification.
pub const SKETCH_K: usize = 128;
/// Characters per shingle.
pub const SHINGLE_CHARS: usize = 5;
/// Documents kept per band key beyond the first: bounds the work on very common bands (short
/// texts that share a stock phrase), at the cost of missing a few near-duplicates among them.
const MAX_BUCKET: usize = 32;

/// A one-permutation MinHash signature.
pub type Signature = [u32; NUM_HASHES];

/// The 128-bit blake3 digest of a text.
pub fn exact_hash(text: &str) -> u128 {
    let digest = blake3::hash(text.as_bytes());
    let mut first = [0u8; 16];
    first.copy_from_slice(&digest.as_bytes()[..16]);
    u128::from_le_bytes(first)
}

/// The 64-bit hashes of a text's character 5-shingles (whitespace ignored), in text order,
/// appended to `out`; a text shorter than a shingle is one shingle.
pub fn shingle_hashes(text: &str, out: &mut Vec<u64>) {
    const MASK: u128 = (1 << (21 * SHINGLE_CHARS)) - 1;
    let mut window: u128 = 0;
    let mut n = 0usize;
    for c in text.chars() {
        if c.is_whitespace() {
            continue;
        }
        // Unicode scalars fit in 21 bits: 5 of them in 105.
        window = ((window << 21) | c as u128) & MASK;
        n += 1;
        if n >= SHINGLE_CHARS {
            out.push(hash_window(window));
        }
    }
    if (1..SHINGLE_CHARS).contains(&n) {
        // Mark the length so that `ab` and `\0ab` differ.
        out.push(hash_window(window | ((n as u128) << 110)));
    }
}

/// The one-permutation MinHash signature of a set of shingle hashes; `None` for no shingles.
pub fn minhash(hashes: &[u64]) -> Option<Box<Signature>> {
    if hashes.is_empty() {
        return None;
    }
    let mut sig = Box::new([u32::MAX; NUM_HASHES]);
    let mut filled: u64 = 0;
    for &h in hashes {
        // The top 6 bits choose the bin, the low 32 are the value.
        let bin = (h >> 58) as usize;
        let v = h as u32;
        if v < sig[bin] {
            sig[bin] = v;
        }
        filled |= 1 << bin;
    }
    densify(&mut sig, filled);
    Some(sig)
}

/// What near-duplicate search keeps of a document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sketch {
    /// LSH band keys of the MinHash signature.
    pub bands: [u64; BANDS],
    /// The [`SKETCH_K`] smallest distinct shingle hashes (their high 32 bits), ascending.
    pub bottom: Vec<u32>,
}

impl Sketch {
    /// The sketch of a text; `None` for a text with no character but whitespace.
    pub fn of(text: &str) -> Option<Sketch> {
        let mut hashes = Vec::with_capacity(text.len() / 3 + 1);
        shingle_hashes(text, &mut hashes);
        let sig = minhash(&hashes)?;
        Some(Sketch {
            bands: band_keys(&sig),
            bottom: bottom_k(&hashes),
        })
    }
}

/// The [`SKETCH_K`] smallest distinct values of the hashes' high halves, ascending.
fn bottom_k(hashes: &[u64]) -> Vec<u32> {
    let mut v: Vec<u32> = hashes.iter().map(|&h| (h >> 32) as u32).collect();
    // Sorting only a margin of the smallest is enough unless repeats fill it.
    let margin = 2 * SKETCH_K;
    if v.len() > margin {
        v.select_nth_unstable(margin - 1);
        let mut small = v[..margin].to_vec();
        small.sort_unstable();
        small.dedup();
        if small.len() >= SKETCH_K {
            small.truncate(SKETCH_K);
            return small;
        }
    }
    v.sort_unstable();
    v.dedup();
    v.truncate(SKETCH_K);
    v
}

/// Fills each empty bin from the first filled bin of its own fixed probe sequence.
fn densify(sig: &mut Signature, filled: u64) {
    if filled == u64::MAX || filled == 0 {
        return;
    }
    let table = probe_table();
    for j in 0..NUM_HASHES {
        if filled >> j & 1 == 1 {
            continue;
        }
        let from = match table[j].iter().find(|&&k| filled >> k & 1 == 1) {
            Some(&k) => k as usize,
            // Very sparse signatures only: the sequence goes on past the table.
            None => (PROBES as u64..)
                .map(|attempt| probe(j, attempt))
                .find(|&k| filled >> k & 1 == 1)
                .unwrap_or(filled.trailing_zeros() as usize),
        };
        sig[j] = sig[from];
    }
}

/// Probes precomputed per bin.
const PROBES: usize = 24;

/// The `attempt`-th bin probed to fill bin `j`.
fn probe(j: usize, attempt: u64) -> usize {
    (mix(((j as u64) << 32 | attempt) ^ 0x5851_F42D_4C95_7F2D) >> 58) as usize
}

fn probe_table() -> &'static [[u8; PROBES]; NUM_HASHES] {
    static TABLE: std::sync::OnceLock<[[u8; PROBES]; NUM_HASHES]> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = [[0u8; PROBES]; NUM_HASHES];
        for (j, row) in t.iter_mut().enumerate() {
            for (a, k) in row.iter_mut().enumerate() {
                *k = probe(j, a as u64) as u8;
            }
        }
        t
    })
}

#[inline]
fn hash_window(w: u128) -> u64 {
    let lo = (w as u64) ^ 0x243F_6A88_85A3_08D3;
    let hi = ((w >> 64) as u64) ^ 0x1319_8A2E_0370_7344;
    let m = lo as u128 * hi as u128;
    mix((m as u64) ^ (m >> 64) as u64)
}

/// The LSH band keys of a signature (the band number is mixed in).
pub fn band_keys(sig: &Signature) -> [u64; BANDS] {
    let mut keys = [0u64; BANDS];
    for (b, key) in keys.iter_mut().enumerate() {
        let r = &sig[b * ROWS..(b + 1) * ROWS];
        let x = (r[0] as u64 | (r[1] as u64) << 32) ^ mix(b as u64 + 1);
        let y = (r[2] as u64 | (r[3] as u64) << 32) ^ 0xA409_3822_299F_31D0;
        let m = x as u128 * y as u128;
        *key = mix((m as u64) ^ (m >> 64) as u64 ^ x);
    }
    keys
}

/// The Jaccard similarity of two shingle sets estimated from their bottom-k sketches: the
/// share of the k smallest values of the union that both hold (exact when both sets have at
/// most k shingles).
pub fn jaccard_estimate(a: &[u32], b: &[u32]) -> f64 {
    let (mut i, mut j, mut taken, mut both) = (0, 0, 0usize, 0usize);
    while taken < SKETCH_K {
        match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) if x == y => {
                both += 1;
                i += 1;
                j += 1;
            }
            (Some(x), Some(y)) if x < y => i += 1,
            (Some(_), Some(_)) | (None, Some(_)) => j += 1,
            (Some(_), None) => i += 1,
            (None, None) => break,
        }
        taken += 1;
    }
    if taken == 0 {
        0.0
    } else {
        both as f64 / taken as f64
    }
}

/// The share of equal values of two one-permutation signatures (a rougher estimate).
pub fn signature_similarity(a: &Signature, b: &Signature) -> f64 {
    a.iter().zip(b.iter()).filter(|(x, y)| x == y).count() as f64 / NUM_HASHES as f64
}

/// What [`Deduplicator::check`] needs of a document; computed in parallel, checked in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    /// A 128-bit hash of the whole text: equal texts, equal hashes.
    pub exact: u128,
    /// `None` when near-duplicate detection is off, or the text is blank.
    pub sketch: Option<Sketch>,
}

impl Fingerprint {
    /// The fingerprint of `text`, with a MinHash sketch when `near`.
    pub fn new(text: &str, near: bool) -> Fingerprint {
        Fingerprint {
            exact: exact_hash(text),
            sketch: if near { Sketch::of(text) } else { None },
        }
    }
}

/// The verdict on a document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// First of its kind: kept (and remembered).
    Unique,
    /// The same text came earlier.
    Duplicate,
    /// A text with estimated Jaccard similarity ≥ the threshold came earlier.
    NearDuplicate,
}

/// Remembers the documents seen so far and judges the next one.
#[derive(Debug)]
pub struct Deduplicator {
    exact: HashSet<u128, IdBuild>,
    near: Option<NearIndex>,
}

#[derive(Debug)]
struct NearIndex {
    threshold: f64,
    /// The bottom-k sketches of kept documents, back to back …
    bottoms: Vec<u32>,
    /// … where each starts (one more than there are documents).
    starts: Vec<u32>,
    /// Band key → the first kept document with it …
    first: HashMap<u64, u32, IdBuild>,
    /// … and the next few (rarely any).
    more: HashMap<u64, Vec<u32>, IdBuild>,
    candidates: Vec<u32>,
}

impl Deduplicator {
    /// `near_threshold`: the estimated Jaccard similarity from which a document is a
    /// near-duplicate (in (0, 1]); `None` for exact duplicates only.
    pub fn new(near_threshold: Option<f64>) -> Deduplicator {
        Deduplicator {
            exact: HashSet::default(),
            near: near_threshold.map(|t| NearIndex {
                threshold: t,
                bottoms: Vec::new(),
                starts: vec![0],
                first: HashMap::default(),
                more: HashMap::default(),
                candidates: Vec::new(),
            }),
        }
    }

    /// Judges a document against those seen before; a unique one is remembered.
    pub fn check(&mut self, fp: &Fingerprint) -> Verdict {
        if !self.exact.insert(fp.exact) {
            return Verdict::Duplicate;
        }
        match (&mut self.near, &fp.sketch) {
            (Some(index), Some(sketch)) => {
                if index.check_and_insert(sketch) {
                    Verdict::NearDuplicate
                } else {
                    Verdict::Unique
                }
            }
            _ => Verdict::Unique,
        }
    }

    /// Documents remembered for near-duplicate search.
    pub fn near_len(&self) -> usize {
        self.near.as_ref().map_or(0, |n| n.starts.len() - 1)
    }
}

impl NearIndex {
    /// Whether `sketch` is near an earlier one; if not, it is added.
    fn check_and_insert(&mut self, sketch: &Sketch) -> bool {
        self.candidates.clear();
        for key in &sketch.bands {
            if let Some(&d) = self.first.get(key) {
                push_unique(&mut self.candidates, d);
                if let Some(more) = self.more.get(key) {
                    for &d in more {
                        push_unique(&mut self.candidates, d);
                    }
                }
            }
        }
        for &d in &self.candidates {
            let (start, end) = (
                self.starts[d as usize] as usize,
                self.starts[d as usize + 1] as usize,
            );
            if jaccard_estimate(&self.bottoms[start..end], &sketch.bottom) >= self.threshold {
                return true;
            }
        }
        let id = (self.starts.len() - 1) as u32;
        self.bottoms.extend_from_slice(&sketch.bottom);
        self.starts.push(self.bottoms.len() as u32);
        for &key in &sketch.bands {
            match self.first.entry(key) {
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(id);
                }
                std::collections::hash_map::Entry::Occupied(_) => {
                    let more = self.more.entry(key).or_default();
                    if more.len() < MAX_BUCKET {
                        more.push(id);
                    }
                }
            }
        }
        false
    }
}

fn push_unique(v: &mut Vec<u32>, d: u32) {
    if !v.contains(&d) {
        v.push(d);
    }
}

/// Keys here are already uniform hashes: hashing them again would be wasted work.
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x100_0000_01B3);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 ^= n;
    }

    fn write_u128(&mut self, n: u128) {
        self.0 ^= n as u64 ^ (n >> 64) as u64;
    }
}

type IdBuild = BuildHasherDefault<IdHasher>;

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "今天下午，我们在学校的操场上举行了一场精彩的篮球比赛，同学们都非常兴奋。\
                     比赛开始以后，双方队员你来我往，比分一直咬得很紧。最后一分钟，\
                     小王投进了一个三分球，我们班终于赢得了胜利。";

    #[test]
    fn exact_hash_is_stable_and_distinguishes() {
        assert_eq!(exact_hash("一样"), exact_hash("一样"));
        assert_ne!(exact_hash("一样"), exact_hash("一样 "));
    }

    fn sketch(t: &str) -> Sketch {
        Sketch::of(t).unwrap()
    }

    #[test]
    fn sketches_are_deterministic_and_ignore_whitespace() {
        assert_eq!(sketch(A), sketch(A));
        let spaced: String = A.chars().flat_map(|c| [c, ' ']).collect();
        assert_eq!(sketch(A), sketch(&spaced));
        assert!(Sketch::of(" \n ").is_none());
        assert_eq!(sketch("短").bottom.len(), 1);
        assert_ne!(sketch("短"), sketch("长"));
        // Repeats add no shingles: a long text of distinct ones.
        let long: String = (0..400).map(|i| format!("第{i}条记录。")).collect();
        let s = sketch(&long);
        assert_eq!(s.bottom.len(), SKETCH_K);
        assert!(s.bottom.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn jaccard_estimates_track_the_true_similarity() {
        let a = sketch(A);
        // Short texts: the estimate is exact. Two characters changed near the end.
        let b = sketch(&A.replace("胜利", "比赛"));
        let true_j = {
            let set = |t: &str| {
                let mut v = Vec::new();
                shingle_hashes(t, &mut v);
                v.into_iter().collect::<HashSet<u64>>()
            };
            let (x, y) = (set(A), set(&A.replace("胜利", "比赛")));
            x.intersection(&y).count() as f64 / x.union(&y).count() as f64
        };
        assert!(A.chars().count() < SKETCH_K);
        assert!((jaccard_estimate(&a.bottom, &b.bottom) - true_j).abs() < 1e-9);
        assert!(true_j > 0.85, "{true_j}");
        let c = sketch("春天来了，河边的柳树发出了新芽。孩子们在田野里放风筝，笑声传得很远。");
        assert!(jaccard_estimate(&a.bottom, &c.bottom) < 0.05);
        assert_eq!(jaccard_estimate(&a.bottom, &a.bottom), 1.0);
        // Long texts: an estimate within a few standard deviations.
        let long_a: String = (0..400).map(|i| format!("第{i}条记录。")).collect();
        let long_b: String = (200..600).map(|i| format!("第{i}条记录。")).collect();
        let est = jaccard_estimate(&sketch(&long_a).bottom, &sketch(&long_b).bottom);
        assert!((0.2..0.5).contains(&est), "{est}");
        // The banding signature agrees roughly.
        let (mut x, mut y) = (Vec::new(), Vec::new());
        shingle_hashes(A, &mut x);
        shingle_hashes(A, &mut y);
        assert_eq!(
            signature_similarity(&minhash(&x).unwrap(), &minhash(&y).unwrap()),
            1.0
        );
    }

    #[test]
    fn dedup_keeps_the_first_and_flags_exact_and_near_copies() {
        let mut d = Deduplicator::new(Some(0.8));
        let fp = |t: &str| Fingerprint::new(t, true);
        assert_eq!(d.check(&fp(A)), Verdict::Unique);
        assert_eq!(d.check(&fp(A)), Verdict::Duplicate);
        let near = A.replace("三分球", "两分球");
        assert_eq!(d.check(&fp(&near)), Verdict::NearDuplicate);
        let other = "图书馆周末开放到晚上九点。借书需要带上借书证，每人每次最多可以借五本。";
        assert_eq!(d.check(&fp(other)), Verdict::Unique);
        assert_eq!(d.near_len(), 2);
        // Exact only.
        let mut d = Deduplicator::new(None);
        assert_eq!(d.check(&Fingerprint::new(A, false)), Verdict::Unique);
        assert_eq!(d.check(&Fingerprint::new(&near, false)), Verdict::Unique);
        assert_eq!(d.check(&Fingerprint::new(A, false)), Verdict::Duplicate);
    }

    #[test]
    fn a_strict_threshold_keeps_similar_but_different_texts() {
        let mut d = Deduplicator::new(Some(1.0));
        assert_eq!(d.check(&Fingerprint::new(A, true)), Verdict::Unique);
        let near = A.replace("三分球", "两分球");
        assert_eq!(d.check(&Fingerprint::new(&near, true)), Verdict::Unique);
    }

    #[test]
    fn many_distinct_documents_are_all_unique() {
        // A shared template with different numbers: about half the shingles in common, and
        // the noisier banding signature must not make near-duplicates of them.
        let mut d = Deduplicator::new(Some(0.8));
        let mut dups = 0;
        for i in 0..2000u32 {
            let t = format!(
                "第{i}天，小王在{}号街修好了一辆自行车。后来他把它送给了编号{}的朋友，大家都很高兴。",
                i * 37 % 101,
                i * 7919 % 100_003
            );
            if d.check(&Fingerprint::new(&t, true)) != Verdict::Unique {
                dups += 1;
            }
        }
        assert_eq!(dups, 0, "false near-duplicates");
    }
}
