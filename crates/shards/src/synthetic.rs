//! Synthetic batches of fixed shape for benchmarks: every row full (no padding) or, with
//! [`pad_rows`], the same rows followed by padding; random token ids, `[CLS] a [SEP] b [SEP]`
//! token types, distinct masked positions. The values mean nothing; the shapes and the work a
//! step does on them are those of a real batch.

use crate::Batch;
use crate::rng::SplitMix64;

/// The ids below this are the special tokens (`[PAD]`, `[UNK]`, `[CLS]`, `[SEP]`, `[MASK]` in
/// albert_zh's vocabularies); random ids are drawn above them.
const FIRST_ORDINARY_ID: u64 = 5;

/// A number in `0..n` from `rng` by modulo, as these synthetic data were always drawn
/// (`SplitMix64::below`, Lemire's method, would draw other data and make benchmark rows
/// before and after a change of this code differ in their inputs).
pub fn below(rng: &mut SplitMix64, n: u64) -> u64 {
    rng.next_u64() % n
}

/// A batch of `batch × seq` real tokens from a vocabulary of `vocab_size` ids, with
/// `masked` distinct masked positions per row (at most `seq − 2`: never `[CLS]` nor the last
/// `[SEP]`) and a random sentence-order label per row.
///
/// # Panics
///
/// When `vocab_size` is not above the special ids, or `batch` or `seq` is 0 (a caller's
/// mistake: a benchmark's shape is checked where it is given).
pub fn batch(
    vocab_size: usize,
    batch: usize,
    seq: usize,
    masked: usize,
    rng: &mut SplitMix64,
) -> Batch {
    assert!(batch > 0 && seq > 0, "a synthetic batch of {batch} × {seq}");
    assert!(
        vocab_size as u64 > FIRST_ORDINARY_ID,
        "a vocabulary of {vocab_size} ids has no ordinary token"
    );
    let ordinary = vocab_size as u64 - FIRST_ORDINARY_ID;
    let mut input_ids = Vec::with_capacity(batch * seq);
    let mut token_type_ids = Vec::with_capacity(batch * seq);
    let mut masked_positions = Vec::with_capacity(batch * masked);
    let mut masked_ids = Vec::with_capacity(batch * masked);
    for _ in 0..batch {
        let half = seq / 2;
        for j in 0..seq {
            input_ids.push((FIRST_ORDINARY_ID + below(rng, ordinary)) as i64);
            token_type_ids.push(i64::from(j >= half));
        }
        for p in masked_row(seq, masked, rng) {
            masked_positions.push(p);
            masked_ids.push((FIRST_ORDINARY_ID + below(rng, ordinary)) as i64);
        }
    }
    let m = masked_positions.len() / batch;
    Batch {
        batch_size: batch,
        seq_len: seq,
        max_predictions: m,
        input_ids,
        attention_mask: vec![1; batch * seq],
        token_type_ids,
        masked_weights: vec![1.0; batch * m],
        masked_positions,
        masked_ids,
        sentence_order_labels: (0..batch).map(|_| below(rng, 2) as i64).collect(),
        tokens: (batch * seq) as u64,
        predictions: (batch * m) as u64,
    }
}

/// `b`'s rows followed by `[PAD]` (id 0, token type 0, attention mask 0) up to `seq` tokens
/// each: short texts padded to a fixed length, as fine-tuning and `predict` batches are. The
/// masked positions stay inside the real tokens; `tokens` still counts only those.
///
/// Why a benchmark needs it: padded keys take other paths than real ones (the attention
/// mask's −1e9 bias); a softmax that left them tiny but non-zero slowed training on padded
/// data 3.7× while full rows ran fast.
///
/// # Panics
///
/// When `seq` is shorter than `b`'s rows (a caller's mistake: checked where it is given).
pub fn pad_rows(b: Batch, seq: usize) -> Batch {
    let real = b.seq_len;
    assert!(seq >= real, "padding rows of {real} tokens to {seq}");
    let pad = |v: Vec<i64>, value: i64| -> Vec<i64> {
        v.chunks(real.max(1))
            .flat_map(|row| {
                row.iter()
                    .copied()
                    .chain(std::iter::repeat_n(value, seq - real))
            })
            .collect()
    };
    Batch {
        seq_len: seq,
        input_ids: pad(b.input_ids, 0),
        attention_mask: pad(b.attention_mask, 0),
        token_type_ids: pad(b.token_type_ids, 0),
        ..b
    }
}

/// `masked` distinct positions in `1..seq − 1` (fewer when the row has fewer), ascending.
fn masked_row(seq: usize, masked: usize, rng: &mut SplitMix64) -> Vec<i64> {
    let mut picked: Vec<i64> = Vec::with_capacity(masked);
    while picked.len() < masked.min(seq.saturating_sub(2)) {
        let p = 1 + below(rng, (seq - 2) as u64) as i64;
        if !picked.contains(&p) {
            picked.push(p);
        }
    }
    picked.sort_unstable();
    picked
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_ids_and_types_are_those_of_a_full_batch() {
        let b = batch(100, 3, 8, 2, &mut SplitMix64::new(7));
        assert_eq!((b.batch_size, b.seq_len, b.max_predictions), (3, 8, 2));
        assert_eq!(b.input_ids.len(), 24);
        assert!(b.input_ids.iter().all(|&i| (5..100).contains(&i)));
        assert_eq!(&b.token_type_ids[..8], &[0, 0, 0, 0, 1, 1, 1, 1]);
        assert_eq!(b.attention_mask, vec![1; 24]);
        assert_eq!((b.tokens, b.predictions), (24, 6));
        assert_eq!(b.masked_ids.len(), 6);
        assert!(b.sentence_order_labels.iter().all(|&l| l == 0 || l == 1));
    }

    #[test]
    fn padded_rows_keep_their_tokens_and_end_in_padding() {
        let full = batch(100, 3, 5, 2, &mut SplitMix64::new(7));
        let b = pad_rows(full.clone(), 8);
        assert_eq!((b.batch_size, b.seq_len, b.tokens), (3, 8, 15));
        for (k, row) in b.input_ids.chunks(8).enumerate() {
            assert_eq!(&row[..5], &full.input_ids[k * 5..k * 5 + 5]);
            assert_eq!(&row[5..], &[0, 0, 0]);
        }
        for row in b.attention_mask.chunks(8) {
            assert_eq!(row, &[1, 1, 1, 1, 1, 0, 0, 0]);
        }
        assert_eq!(&b.token_type_ids[..8], &[0, 0, 1, 1, 1, 0, 0, 0]);
        assert_eq!(b.masked_positions, full.masked_positions);
        assert_eq!(pad_rows(full.clone(), 5).input_ids, full.input_ids);
    }

    #[test]
    fn masked_positions_are_distinct_ascending_and_inside_the_row() {
        let b = batch(50, 4, 10, 8, &mut SplitMix64::new(1));
        for row in b.masked_positions.chunks(b.max_predictions) {
            assert!(row.windows(2).all(|w| w[0] < w[1]), "{row:?}");
            assert!(row.iter().all(|&p| (1..9).contains(&p)), "{row:?}");
        }
    }

    #[test]
    fn more_masked_positions_than_the_row_has_are_capped() {
        let b = batch(50, 2, 4, 20, &mut SplitMix64::new(3));
        assert_eq!(b.max_predictions, 2);
        assert_eq!(b.masked_positions, vec![1, 2, 1, 2]);
    }

    #[test]
    fn the_same_seed_gives_the_same_batch() {
        let a = batch(1000, 2, 16, 3, &mut SplitMix64::new(7));
        let b = batch(1000, 2, 16, 3, &mut SplitMix64::new(7));
        assert_eq!(a.input_ids, b.input_ids);
        assert_eq!(a.masked_positions, b.masked_positions);
        assert_eq!(a.sentence_order_labels, b.sentence_order_labels);
    }
}
