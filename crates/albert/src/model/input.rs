//! [`AlbertInput`]: a batch's token ids and masks as tensors, and the attention bias the mask
//! becomes.

use burn::tensor::{Device, Int, Tensor, TensorData};

use crate::upload;

/// Token ids and masks for a batch, as tensors on the model's device (copied there without
/// waiting for it: [`upload`]).
#[derive(Debug, Clone)]
pub struct AlbertInput {
    /// `[batch, seq]`.
    pub input_ids: Tensor<2, Int>,
    /// `[batch, seq]`, 0/1.
    pub token_type_ids: Tensor<2, Int>,
    /// `[batch, seq]`, 1.0 for tokens, 0.0 for padding.
    pub attention_mask: Tensor<2>,
}

impl AlbertInput {
    /// From row-major `i64` arrays of shape `[batch, seq]`.
    pub fn from_rows(
        batch: usize,
        seq: usize,
        input_ids: Vec<i64>,
        token_type_ids: Vec<i64>,
        attention_mask: Vec<i64>,
        device: &Device,
    ) -> AlbertInput {
        let mask: Vec<f32> = attention_mask.iter().map(|&m| m as f32).collect();
        let shape = [batch, seq];
        AlbertInput {
            input_ids: upload::ints(TensorData::new(input_ids, shape), device),
            token_type_ids: upload::ints(TensorData::new(token_type_ids, shape), device),
            attention_mask: upload::floats(TensorData::new(mask, shape), device),
        }
    }

    /// `[batch, 1, 1, seq]`: 0 where a key may be attended, a large negative number where it is
    /// padding (transformers adds `finfo.min`; any value that underflows `exp` is the same).
    pub(crate) fn attention_bias(&self) -> Tensor<4> {
        let [b, s] = self.attention_mask.dims();
        (self.attention_mask.clone().neg().add_scalar(1.0) * -1e9).reshape([b, 1, 1, s])
    }
}
