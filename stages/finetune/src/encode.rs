//! Encoded rows to padded batches of model input. How texts become rows is the kinds'
//! ([`pipeline_tasks::kinds::encode`]), re-exported here under its old paths.

use burn::tensor::Device;
use pipeline_albert::AlbertInput;

pub use pipeline_tasks::kinds::encode::{Encoded, Encoder, Encoding, PairEncoder};

/// Rows padded to the longest in the batch ([`padded_length`]) as model input.
pub fn batch_input(rows: &[&Encoded], device: &Device) -> AlbertInput {
    let seq = padded_length(rows, device);
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

/// The sequence length [`batch_input`] pads `rows` to on `device`: the longest row's, rounded
/// up to a multiple of 8 on a GPU (its matrix units take shapes in multiples of 8).
///
/// On the CPU the padding is only extra work: `pipeline bench infer --model tiny --batch 16
/// --split` did 380–398 sentences/s at 66 positions against 350–360 at 72 (three alternating
/// rounds, 2026-11-28), and `serve`'s 64-character texts are 66 tokens.
pub fn padded_length(rows: &[&Encoded], device: &Device) -> usize {
    let longest = rows.iter().map(|r| r.ids.len()).max().unwrap_or(1);
    pad_length(longest, device)
}

/// A batch whose longest row has `longest` tokens is padded to this many on `device` (see
/// [`padded_length`]).
pub fn pad_length(longest: usize, device: &Device) -> usize {
    if pipeline_albert::device::is_cpu(device) {
        longest
    } else {
        longest.div_ceil(8) * 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(n: usize) -> Encoded {
        Encoded {
            ids: (0..n as u32).collect(),
            types: vec![0; n],
        }
    }

    /// On the CPU a batch is as long as its longest row, with no rounding; shorter rows are
    /// padded with id 0 and attention mask 0.
    #[test]
    fn a_cpu_batch_is_padded_to_its_longest_row_alone() {
        let device = Device::flex();
        let (short, long) = (row(3), row(13));
        assert_eq!(padded_length(&[&short, &long], &device), 13);
        let input = batch_input(&[&short, &long], &device);
        assert_eq!(input.input_ids.dims(), [2, 13]);
        let mask = input
            .attention_mask
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
        assert_eq!(mask[..13].iter().sum::<f32>(), 3.0);
        assert_eq!(mask[13..].iter().sum::<f32>(), 13.0);
    }
}
