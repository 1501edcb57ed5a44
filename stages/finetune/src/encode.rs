//! Encoded rows to padded batches of model input. How texts become rows is the kinds'
//! ([`pipeline_tasks::kinds::encode`]), re-exported here under its old paths.

use burn::tensor::Device;
use pipeline_albert::AlbertInput;

pub use pipeline_tasks::kinds::encode::{Encoded, Encoder, Encoding, PairEncoder};

/// Rows padded to the longest in the batch (rounded up to 8) as model input.
pub fn batch_input(rows: &[&Encoded], device: &Device) -> AlbertInput {
    let seq = padded_length(rows);
    let n = rows.len();
    let mut ids = vec![0i64; n * seq];
    let mut types = vec![0i64; n * seq];
    let mut mask = vec![0i64; n * seq];
    for (r, row) in rows.iter().enumerate() {
        for (j, (&id, &t)) in row.ids.iter().zip(&row.types).enumerate() {
            ids[r * seq + j] = id as i64;
            types[r * seq + j] = t as i64;
            mask[r * seq + j] = 1;
        }
    }
    AlbertInput::from_rows(n, seq, ids, types, mask, device)
}

/// The sequence length [`batch_input`] pads `rows` to.
pub fn padded_length(rows: &[&Encoded]) -> usize {
    let longest = rows.iter().map(|r| r.ids.len()).max().unwrap_or(1);
    longest.div_ceil(8) * 8
}
