//! brightmart/albert_zh's own embedding block and MLM head ([`Layout::AlbertZh`]).
//!
//! albert_zh's `modeling.py` factorises the embeddings differently from google-research/albert
//! (and transformers' `AlbertForPreTraining`):
//!
//! - `embedding_lookup_factorized`: the word embeddings `[V, E]` are projected to H by
//!   `word_embeddings_2` `[E, H]` — a plain matmul, no bias — *before* position and token-type
//!   embeddings (both `[·, H]`) are added and LayerNorm (width H) applied. The encoder then
//!   starts at width H: there is no `embedding_hidden_mapping_in`.
//! - `run_pretraining.py`'s `get_masked_lm_output`: the transform dense is H→H and its
//!   LayerNorm H wide; the logits are `(x · word_embeddings_2ᵀ) · word_embeddingsᵀ + bias`.
//!
//! The encoder, pooler and SOP head are the same in both layouts, so the model keeps one set
//! of modules and this file supplies the pieces that differ; [`crate::model`] calls them.

use burn::module::Param;
use burn::nn::Initializer;
use burn::tensor::{Device, Tensor};

use crate::config::{AlbertConfig, Layout};
use crate::model::Albert;

/// The width at which embeddings are summed and normalised, and of the MLM transform: E in
/// Google's layout, H in albert_zh's.
pub fn embedding_width(c: &AlbertConfig) -> usize {
    match c.layout {
        Layout::Google => c.embedding_size,
        Layout::AlbertZh => c.hidden_size,
    }
}

/// `word_embeddings_2` `[E, H]` (truncated-normal in albert_zh; normal here, as every other
/// weight of ours), or `None` in Google's layout.
pub fn new_projection(c: &AlbertConfig, device: &Device) -> Option<Param<Tensor<2>>> {
    (c.layout == Layout::AlbertZh).then(|| {
        Initializer::Normal {
            mean: 0.0,
            std: c.initializer_range,
        }
        .init([c.embedding_size, c.hidden_size], device)
    })
}

/// `[batch, seq, E]` word embeddings → `[batch, seq, H]` through `projection` (as one 2-D
/// product, like [`crate::model::dense`]); unchanged without one.
pub fn project_words(words: Tensor<3>, projection: Option<&Param<Tensor<2>>>) -> Tensor<3> {
    match projection {
        None => words,
        Some(p) => {
            let [b, s, e] = words.dims();
            let w = p.val();
            let [_, h] = w.dims();
            words.reshape([b * s, e]).matmul(w).reshape([b, s, h])
        }
    }
}

impl Albert {
    /// albert_zh's `word_embeddings_2` `[E, H]`, which its MLM head applies transposed before
    /// decoding with the word embeddings; `None` in Google's layout.
    pub fn mlm_projection(&self) -> Option<Tensor<2>> {
        self.embeddings.word_embeddings_2.as_ref().map(|p| p.val())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{AlbertForPreTraining, AlbertInput};
    use burn::module::Module;

    fn tiny(layout: Layout) -> AlbertConfig {
        let mut c = AlbertConfig::named("tiny").unwrap();
        c.vocab_size = 50;
        c.hidden_size = 24;
        c.num_attention_heads = 4;
        c.intermediate_size = 32;
        c.embedding_size = 8;
        c.num_hidden_layers = 2;
        c.max_position_embeddings = 16;
        c.layout = layout;
        c
    }

    #[test]
    fn albert_zh_layout_has_its_own_shapes_and_parameter_count() {
        let device = Device::flex();
        let c = tiny(Layout::AlbertZh);
        let m = AlbertForPreTraining::new(&c, &device);
        let e = &m.albert.embeddings;
        assert_eq!(e.word_embeddings_2.as_ref().unwrap().dims(), [8, 24]);
        assert_eq!(e.position_embeddings.weight.dims(), [16, 24]);
        assert!(m.albert.encoder.embedding_hidden_mapping_in.is_none());
        assert_eq!(m.predictions.dense.weight.dims(), [24, 24]);
        assert_eq!(m.num_params() as u64, c.parameter_count().total);
        let g = tiny(Layout::Google);
        assert_eq!(
            AlbertForPreTraining::new(&g, &device).num_params() as u64,
            g.parameter_count().total
        );
        let note = c.hf_compatible().unwrap_err().to_string();
        assert!(note.contains("albert_zh"), "{note}");
        let json = c.to_hf_json("AlbertForPreTraining");
        assert_eq!(json["layout"], "albert_zh");
        assert_eq!(AlbertConfig::from_json(&json).unwrap(), c);
    }

    #[test]
    fn albert_zh_mlm_logits_go_through_the_projection() {
        let device = Device::flex();
        let c = tiny(Layout::AlbertZh);
        let m = AlbertForPreTraining::new(&c, &device);
        let x = AlbertInput::from_rows(1, 3, vec![2, 7, 3], vec![0; 3], vec![1; 3], &device);
        let (logits, sop, out) = m.forward_all(&x);
        assert_eq!(logits.dims(), [1, 3, 50]);
        assert_eq!(sop.dims(), [1, 2]);
        // The same logits by hand: transform, LayerNorm, ·W2ᵀ, ·Wordᵀ, + bias.
        let h = out.last_hidden_state.reshape([3, 24]);
        let t = m
            .predictions
            .layer_norm
            .forward(crate::model::gelu_tanh(m.predictions.dense.forward(h)));
        let by_hand = t
            .matmul(m.albert.mlm_projection().unwrap().transpose())
            .matmul(m.albert.word_embeddings().transpose())
            + m.predictions.bias.val().reshape([1, 50]);
        let diff = (logits.reshape([3, 50]) - by_hand)
            .abs()
            .max()
            .into_scalar::<f32>();
        assert!(diff < 1e-5, "{diff}");
    }
}
