//! Pretraining instances from one tokenized document, as google-research/albert's
//! `create_pretraining_data.py` builds them, with the one change the SOP objective asks for: B
//! never starts in another document than the one A ends in (`pairs`).
//!
//! A document is a list of sentences, each a run of token ids with a flag per token saying
//! whether it continues the word before it (a `##` piece, or a character inside a jieba word).
//! Sentences are packed into chunks up to a target length; a chunk is split into segments A and
//! B at a sentence boundary (or inside a sentence where the chunk has no boundary inside one
//! document: `pairs` says why); with probability ½ A and B are swapped
//! (`sentence_order_label` 1). Masking picks n-grams of whole words with p(n) ∝ 1/n until
//! `masked_lm_prob` of the tokens (at most `max_predictions_per_seq`) are chosen, and replaces
//! each chosen token with [MASK] 80 % of the time, a random token 10 %, itself 10 %.

use pipeline_shards::Instance;
use rand::Rng;
use rand::seq::SliceRandom;

use crate::pairs::{Segment, split_chunk};

/// The masking and packing parameters (the `mask` stage's params, checked).
#[derive(Debug, Clone)]
pub struct Recipe {
    /// Tokens per instance, `[CLS]` and two `[SEP]` included.
    pub max_seq_length: usize,
    /// At most this many masked positions.
    pub max_predictions_per_seq: usize,
    /// Share of tokens to mask.
    pub masked_lm_prob: f64,
    /// How often the target length is drawn shorter than the maximum.
    pub short_seq_prob: f64,
    /// Longest masked span, in words.
    pub max_ngram: usize,
    /// Packed input (`pack`): a remainder shorter than half the target joins the chunk before
    /// it (and is truncated with it) instead of making a short, mostly padded instance. A and
    /// B still meet inside one of the packed documents (`pairs`).
    pub pack: bool,
}

/// The special ids masking needs, and the ids a random replacement may take.
#[derive(Debug, Clone)]
pub struct Specials {
    /// The id of `[CLS]`.
    pub cls: u32,
    /// The id of `[SEP]`.
    pub sep: u32,
    /// The id of `[MASK]`.
    pub mask: u32,
    /// Ordinary tokens (no [PAD]/[UNK]/[CLS]/[SEP]/[MASK]/[unused…]): the "10 % random".
    pub random_pool: Vec<u32>,
    /// The ids of the sentence-final marks the SOP floor reads ([`crate::sop_floor`]), sorted.
    pub sentence_final: Vec<u32>,
}

/// One tokenized document: `ids` and `continues` of all sentences end to end, and where each
/// sentence ends in them.
#[derive(Debug, Clone, Default)]
pub struct TokenizedDoc {
    /// Token ids of all sentences, end to end.
    pub ids: Vec<u32>,
    /// Per token: whether it continues the word before it (a `##` piece or the rest of a jieba word).
    pub continues: Vec<bool>,
    /// Where each sentence ends in `ids` (exclusive).
    pub sentence_ends: Vec<usize>,
    /// Packed documents (`append`): the sentences each joined document after the first starts
    /// with, ascending. A sentence-order pair is never cut there.
    pub document_starts: Vec<usize>,
}

impl TokenizedDoc {
    /// Appends a sentence (an empty one is skipped).
    pub fn push_sentence(&mut self, ids: &[u32], continues: &[bool]) {
        if ids.is_empty() {
            return;
        }
        self.ids.extend_from_slice(ids);
        self.continues.extend_from_slice(continues);
        self.sentence_ends.push(self.ids.len());
    }

    /// Appends another document's sentences (packing short documents into one).
    pub fn append(&mut self, other: &TokenizedDoc) {
        let first = self.sentence_ends.len();
        if first > 0 {
            self.document_starts.push(first);
        }
        let joined = other.document_starts.iter().map(|s| s + first);
        self.document_starts.extend(joined);
        let offset = self.ids.len();
        self.ids.extend_from_slice(&other.ids);
        self.continues.extend_from_slice(&other.continues);
        self.sentence_ends
            .extend(other.sentence_ends.iter().map(|e| e + offset));
    }

    /// Whether sentence `i` starts a joined document (never the first sentence).
    pub(crate) fn starts_document(&self, i: usize) -> bool {
        self.document_starts.binary_search(&i).is_ok()
    }

    /// The token range of sentence `i`.
    pub(crate) fn sentence(&self, i: usize) -> std::ops::Range<usize> {
        let start = if i == 0 { 0 } else { self.sentence_ends[i - 1] };
        start..self.sentence_ends[i]
    }
}

/// What masking did to one instance, for the metrics.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MaskStats {
    /// Masked positions.
    pub masked: u64,
    /// Of which replaced by `[MASK]`.
    pub replaced_mask: u64,
    /// Of which replaced by a random token.
    pub replaced_random: u64,
    /// Of which kept as they were.
    pub kept: u64,
    /// `ngrams[n - 1]`: how many masked spans were n words long.
    pub ngrams: Vec<u64>,
}

impl MaskStats {
    /// Adds another instance's counts.
    pub fn add(&mut self, o: &MaskStats) {
        self.masked += o.masked;
        self.replaced_mask += o.replaced_mask;
        self.replaced_random += o.replaced_random;
        self.kept += o.kept;
        if self.ngrams.len() < o.ngrams.len() {
            self.ngrams.resize(o.ngrams.len(), 0);
        }
        for (a, b) in self.ngrams.iter_mut().zip(&o.ngrams) {
            *a += b;
        }
    }
}

/// Every instance of one document for one pass over the corpus.
pub fn instances_from_document<R: Rng>(
    doc: &TokenizedDoc,
    recipe: &Recipe,
    specials: &Specials,
    rng: &mut R,
    stats: &mut MaskStats,
) -> Vec<Instance> {
    let max_num_tokens = recipe.max_seq_length - 3;
    // Mostly full-length sequences; sometimes shorter ones, so that the model also sees the
    // short inputs of fine-tuning.
    let target = if rng.random_bool(recipe.short_seq_prob) {
        rng.random_range(2..=max_num_tokens)
    } else {
        max_num_tokens
    };
    let n = doc.sentence_ends.len();
    let mut out = Vec::new();
    let mut chunk: Vec<usize> = Vec::new();
    let mut chunk_len = 0;
    for i in 0..n {
        chunk.push(i);
        chunk_len += doc.sentence(i).len();
        if i + 1 < n && chunk_len < target {
            continue;
        }
        // Packed: what is left of the document would make a short instance; it joins this one
        // (the truncation below trims the pair to fit), so that padding stays low.
        if recipe.pack && i + 1 < n && doc.ids.len() - doc.sentence_ends[i] < target / 2 {
            continue;
        }
        let pair = split_chunk(doc, &chunk, rng);
        chunk.clear();
        chunk_len = 0;
        let Some(mut pair) = pair else {
            continue;
        };
        // Drawn before trimming, as google's script does, so that an unpacked document draws
        // the stream it always did.
        let swapped = rng.random_bool(0.5);
        pair.truncate(max_num_tokens, swapped, rng);
        let (a, b) = if swapped {
            (pair.b, pair.a)
        } else {
            (pair.a, pair.b)
        };
        out.push(assemble(&a, &b, swapped, recipe, specials, rng, stats));
    }
    out
}

fn assemble<R: Rng>(
    a: &Segment,
    b: &Segment,
    swapped: bool,
    recipe: &Recipe,
    specials: &Specials,
    rng: &mut R,
    stats: &mut MaskStats,
) -> Instance {
    let len = a.len() + b.len() + 3;
    let mut input_ids = Vec::with_capacity(len);
    let mut token_type_ids = Vec::with_capacity(len);
    // Word units: (start, end) positions; [CLS]/[SEP] are never candidates, and a segment's
    // first token starts a word even if truncation cut the word it belonged to.
    let mut units: Vec<(u32, u32)> = Vec::with_capacity(len);
    input_ids.push(specials.cls);
    token_type_ids.push(0);
    for (seg, type_id) in [(a, 0u8), (b, 1u8)] {
        for (k, (&id, &cont)) in seg.ids.iter().zip(&seg.continues).enumerate() {
            let pos = input_ids.len() as u32;
            match units.last_mut() {
                Some(last) if cont && k > 0 => last.1 = pos + 1,
                _ => units.push((pos, pos + 1)),
            }
            input_ids.push(id);
            token_type_ids.push(type_id);
        }
        input_ids.push(specials.sep);
        token_type_ids.push(type_id);
    }
    let (masked_positions, masked_ids) =
        mask_ngrams(&mut input_ids, &units, recipe, specials, rng, stats);
    Instance {
        input_ids,
        token_type_ids,
        masked_positions,
        masked_ids,
        sentence_order_label: swapped as u8,
    }
}

/// ALBERT's n-gram masking over word units; rewrites `ids` in place and returns the masked
/// positions (ascending) with the original ids.
fn mask_ngrams<R: Rng>(
    ids: &mut [u32],
    units: &[(u32, u32)],
    recipe: &Recipe,
    specials: &Specials,
    rng: &mut R,
    stats: &mut MaskStats,
) -> (Vec<u32>, Vec<u32>) {
    let budget = ((ids.len() as f64 * recipe.masked_lm_prob).round() as usize)
        .max(1)
        .min(recipe.max_predictions_per_seq);
    // p(n) ∝ 1/n: short spans are common, long ones rare.
    let weights: Vec<f64> = (1..=recipe.max_ngram).map(|n| 1.0 / n as f64).collect();
    let mut starts: Vec<usize> = (0..units.len()).collect();
    starts.shuffle(rng);
    let mut covered = vec![false; ids.len()];
    let mut chosen: Vec<(u32, u32)> = Vec::with_capacity(budget);
    for start in starts {
        if chosen.len() >= budget {
            break;
        }
        let max_n = recipe.max_ngram.min(units.len() - start);
        let total: f64 = weights[..max_n].iter().sum();
        let mut pick = rng.random::<f64>() * total;
        let mut n = max_n;
        for (i, w) in weights[..max_n].iter().enumerate() {
            if pick < *w {
                n = i + 1;
                break;
            }
            pick -= w;
        }
        // A span never crosses [SEP]: units on either side of it are not contiguous.
        let mut n_max_contiguous = 1;
        while n_max_contiguous < max_n
            && units[start + n_max_contiguous].0 == units[start + n_max_contiguous - 1].1
        {
            n_max_contiguous += 1;
        }
        n = n.min(n_max_contiguous);
        // Shorten the span until it fits the budget; skip it if even one word does not.
        let span_len = |n: usize| (units[start + n - 1].1 - units[start].0) as usize;
        while n > 0 && chosen.len() + span_len(n) > budget {
            n -= 1;
        }
        if n == 0 {
            continue;
        }
        let (from, to) = (units[start].0 as usize, units[start + n - 1].1 as usize);
        if covered[from..to].iter().any(|&c| c) {
            continue;
        }
        for pos in from..to {
            covered[pos] = true;
            let original = ids[pos];
            ids[pos] = if rng.random_bool(0.8) {
                stats.replaced_mask += 1;
                specials.mask
            } else if rng.random_bool(0.5) {
                stats.kept += 1;
                original
            } else {
                stats.replaced_random += 1;
                specials.random_pool[rng.random_range(0..specials.random_pool.len())]
            };
            chosen.push((pos as u32, original));
        }
        if stats.ngrams.len() < recipe.max_ngram {
            stats.ngrams.resize(recipe.max_ngram, 0);
        }
        stats.ngrams[n - 1] += 1;
    }
    chosen.sort_unstable();
    stats.masked += chosen.len() as u64;
    chosen.into_iter().unzip()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    const CLS: u32 = 101;
    const SEP: u32 = 102;
    const MASK: u32 = 103;

    fn specials() -> Specials {
        Specials {
            cls: CLS,
            sep: SEP,
            mask: MASK,
            random_pool: (1000..2000).collect(),
            sentence_final: vec![],
        }
    }

    fn recipe() -> Recipe {
        Recipe {
            max_seq_length: 64,
            max_predictions_per_seq: 10,
            masked_lm_prob: 0.15,
            short_seq_prob: 0.1,
            max_ngram: 3,
            pack: false,
        }
    }

    /// Sentences of ordinary ids (≥ 5000, so they never collide with the random pool) in words
    /// of 1–3 tokens.
    fn doc(sentence_lens: &[usize], seed: u64) -> TokenizedDoc {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut d = TokenizedDoc::default();
        let mut next = 5000;
        for &len in sentence_lens {
            let ids: Vec<u32> = (0..len)
                .map(|_| {
                    next += 1;
                    next
                })
                .collect();
            let mut continues = Vec::new();
            let mut left_in_word = 0;
            for _ in 0..len {
                if left_in_word == 0 {
                    left_in_word = rng.random_range(1..=3);
                    continues.push(false);
                } else {
                    continues.push(true);
                }
                left_in_word -= 1;
            }
            d.push_sentence(&ids, &continues);
        }
        d
    }

    fn all_instances(d: &TokenizedDoc, r: &Recipe, seed: u64) -> (Vec<Instance>, MaskStats) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut stats = MaskStats::default();
        let v = instances_from_document(d, r, &specials(), &mut rng, &mut stats);
        (v, stats)
    }

    #[test]
    fn instances_have_the_bert_layout() {
        let d = doc(&[12, 9, 20, 7, 15, 30, 11], 1);
        let (v, _) = all_instances(&d, &recipe(), 7);
        assert!(!v.is_empty());
        for inst in &v {
            assert!(inst.input_ids.len() <= 64);
            assert_eq!(inst.input_ids[0], CLS);
            assert_eq!(*inst.input_ids.last().unwrap(), SEP);
            assert_eq!(inst.input_ids.iter().filter(|&&t| t == SEP).count(), 2);
            let first_sep = inst.input_ids.iter().position(|&t| t == SEP).unwrap();
            for (i, &t) in inst.token_type_ids.iter().enumerate() {
                assert_eq!(t, u8::from(i > first_sep), "token type at {i}");
            }
            assert_eq!(inst.masked_positions.len(), inst.masked_ids.len());
            assert!(inst.masked_positions.windows(2).all(|w| w[0] < w[1]));
            for (&p, &orig) in inst.masked_positions.iter().zip(&inst.masked_ids) {
                let p = p as usize;
                assert!(p > 0 && p < inst.input_ids.len() - 1);
                assert!(orig >= 5000, "a special token was masked: {orig}");
            }
        }
    }

    #[test]
    fn order_label_one_means_b_precedes_a_in_the_document() {
        // Ids increase through the document, so the order of A and B can be read off them.
        let d = doc(&[10, 10, 10, 10, 10, 10, 10, 10], 3);
        for seed in 0..50 {
            let mut r = recipe();
            r.masked_lm_prob = 0.01;
            r.max_predictions_per_seq = 1;
            let (v, _) = all_instances(&d, &r, seed);
            for inst in v {
                // The original id at each position: masking may have replaced any of them.
                let mut orig = inst.input_ids.clone();
                for (&p, &id) in inst.masked_positions.iter().zip(&inst.masked_ids) {
                    orig[p as usize] = id;
                }
                let sep = orig.iter().position(|&t| t == SEP).unwrap();
                let (a, b) = (orig[1], orig[sep + 1]);
                assert!(sep > 1 && sep + 2 < orig.len(), "empty segment: {inst:?}");
                assert_eq!(inst.sentence_order_label == 1, a > b);
            }
        }
    }

    #[test]
    fn a_single_sentence_document_is_split_in_two() {
        let d = doc(&[40], 5);
        let (v, _) = all_instances(&d, &recipe(), 1);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].input_ids.len(), 43);
        let d = doc(&[1], 5);
        assert!(all_instances(&d, &recipe(), 1).0.is_empty());
    }

    #[test]
    fn rates_over_many_instances() {
        let mut r = recipe();
        r.max_seq_length = 128;
        r.max_predictions_per_seq = 20;
        let mut stats = MaskStats::default();
        let mut tokens = 0u64;
        let mut swapped = 0u64;
        let mut n = 0u64;
        for seed in 0..300 {
            let d = doc(&[30, 25, 40, 18, 33, 27, 35, 22, 31], seed);
            let (v, s) = all_instances(&d, &r, seed + 1000);
            stats.add(&s);
            for inst in &v {
                tokens += inst.input_ids.len() as u64;
                swapped += inst.sentence_order_label as u64;
                n += 1;
            }
        }
        let rate = stats.masked as f64 / tokens as f64;
        assert!((0.13..=0.155).contains(&rate), "mask rate {rate}");
        let m = stats.masked as f64;
        let mask = stats.replaced_mask as f64 / m;
        let kept = stats.kept as f64 / m;
        let random = stats.replaced_random as f64 / m;
        assert!((0.78..0.82).contains(&mask), "[MASK] share {mask}");
        assert!((0.085..0.115).contains(&kept), "kept share {kept}");
        assert!((0.085..0.115).contains(&random), "random share {random}");
        let sop = swapped as f64 / n as f64;
        assert!((0.44..0.56).contains(&sop), "swapped share {sop} of {n}");
        // p(n) ∝ 1/n before budget trimming: 1-grams most, then 2-, then 3-grams.
        let g = &stats.ngrams;
        assert!(
            g[0] > g[1] && g[1] > g[2] && g[2] > 0,
            "n-gram histogram {g:?}"
        );
    }

    proptest! {
        #[test]
        fn invariants_hold_for_any_document(
            lens in proptest::collection::vec(1usize..80, 1..12),
            seed in any::<u64>(),
            max_seq in 8usize..200,
            max_pred in 1usize..30,
            prob in 0.01f64..0.9,
            max_ngram in 1usize..5,
            pack in any::<bool>(),
        ) {
            let r = Recipe { max_seq_length: max_seq, max_predictions_per_seq: max_pred,
                masked_lm_prob: prob, short_seq_prob: 0.1, max_ngram, pack };
            let d = doc(&lens, seed);
            let (v, stats) = all_instances(&d, &r, seed);
            let mut masked = 0;
            for inst in &v {
                prop_assert!(inst.input_ids.len() <= max_seq);
                prop_assert!(inst.masked_positions.len() <= max_pred);
                masked += inst.masked_positions.len() as u64;
                let budget = ((inst.input_ids.len() as f64 * prob).round() as usize).max(1).min(max_pred);
                if inst.masked_positions.is_empty() {
                    // As in google's and albert_zh's scripts, a word longer than the budget is
                    // never masked in part; so no mask at all only when every word is longer.
                    let orig = &inst.input_ids;
                    let mut shortest = usize::MAX;
                    let mut run = 0;
                    for (q, &id) in orig.iter().enumerate() {
                        let special = id == CLS || id == SEP;
                        let starts = special
                            || orig[q - 1] == SEP
                            || orig[q - 1] == CLS
                            || !d.continues[(id - 5001) as usize];
                        if starts && run > 0 {
                            shortest = shortest.min(run);
                            run = 0;
                        }
                        if !special {
                            run += 1;
                        }
                    }
                    prop_assert!(shortest > budget, "no mask though a word of {shortest} fits {budget}: {inst:?}");
                }
                prop_assert!(inst.masked_positions.len() <= budget);
                for &p in &inst.masked_positions {
                    let p = p as usize;
                    prop_assert!(p > 0 && p + 1 < inst.input_ids.len());
                    prop_assert!(inst.input_ids[p] != CLS && inst.input_ids[p] != SEP);
                }
            }
            prop_assert_eq!(stats.masked, masked);
            // Same seed, same instances.
            let (again, _) = all_instances(&d, &r, seed);
            prop_assert_eq!(v, again);
        }

        #[test]
        fn whole_words_are_masked_whole(seed in any::<u64>()) {
            let d = doc(&[20, 30, 25, 18], seed);
            let mut r = recipe();
            r.max_seq_length = 128;
            r.max_predictions_per_seq = 40;
            r.masked_lm_prob = 0.3;
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut stats = MaskStats::default();
            for inst in instances_from_document(&d, &r, &specials(), &mut rng, &mut stats) {
                // Recover each position's continuation flag from the document by id.
                let cont = |id: u32| d.continues[(id - 5001) as usize];
                let masked: std::collections::HashSet<u32> = inst.masked_positions.iter().copied().collect();
                let sep = inst.input_ids.iter().position(|&t| t == SEP).unwrap();
                for &p in &inst.masked_positions {
                    let p = p as usize;
                    let orig = |q: usize| {
                        inst.masked_positions.iter().position(|&m| m as usize == q)
                            .map(|k| inst.masked_ids[k]).unwrap_or(inst.input_ids[q])
                    };
                    // The token after a masked one, if it continues the same word, is masked too.
                    let next = p + 1;
                    if next < inst.input_ids.len() - 1 && next != sep {
                        let id = orig(next);
                        let prev_id = orig(p);
                        if id == prev_id + 1 && cont(id) {
                            prop_assert!(masked.contains(&(next as u32)), "word cut after {p}");
                        }
                    }
                }
            }
        }
    }
}
