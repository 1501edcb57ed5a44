//! The attention block: the query, key and value projections (one product on libtorch), the
//! attention core (a fused op where one applies, burn's ops otherwise), the output projection.

use burn::module::Module;
use burn::nn::{Dropout, DropoutConfig, LayerNorm, Linear};
use burn::tensor::activation::softmax;
use burn::tensor::{Device, Tensor};

use super::{MatmulPrecision, dense_between_products, dense_in, layer_norm, linear, norm, ops};
use crate::config::AlbertConfig;

/// The Q, K and V layers' weights `[H, 3H]` and biases `[3H]` side by side
/// ([`AlbertAttention::pack_qkv`]).
pub(super) type PackedQkv = (Tensor<2>, Tensor<1>);

/// Multi-head self-attention with its output projection and LayerNorm (`attention.*` in
/// Hugging Face's names).
#[derive(Module, Debug)]
pub struct AlbertAttention {
    /// `[H, H]`: the queries of all heads.
    pub query: Linear,
    /// `[H, H]`: the keys of all heads.
    pub key: Linear,
    /// `[H, H]`: the values of all heads.
    pub value: Linear,
    /// `[H, H]`: the heads' concatenated outputs back to the residual stream.
    pub dense: Linear,
    /// The LayerNorm around the attention (after the residual sum, or on the input in preln).
    pub layer_norm: LayerNorm,
    /// Dropout on the attention probabilities (`attention_probs_dropout_prob`).
    pub attention_dropout: Dropout,
    /// Dropout on the projected output (`hidden_dropout_prob`).
    pub output_dropout: Dropout,
    /// Attention heads; H is split evenly between them.
    #[module(skip)]
    pub num_heads: usize,
    /// The dtype of the projections and of both attention products.
    #[module(skip)]
    pub precision: MatmulPrecision,
    /// The LayerNorms' ε (`layer_norm_eps`), which burn's `LayerNorm` keeps private.
    #[module(skip)]
    pub layer_norm_eps: f64,
}

impl AlbertAttention {
    /// A freshly initialised attention block of config `c`.
    pub fn new(c: &AlbertConfig, device: &Device) -> Self {
        let h = c.hidden_size;
        AlbertAttention {
            query: linear(h, h, c, device),
            key: linear(h, h, c, device),
            value: linear(h, h, c, device),
            dense: linear(h, h, c, device),
            layer_norm: layer_norm(h, c, device),
            attention_dropout: DropoutConfig::new(c.attention_probs_dropout_prob).init(),
            output_dropout: DropoutConfig::new(c.hidden_dropout_prob).init(),
            num_heads: c.num_attention_heads,
            precision: MatmulPrecision::Fp32,
            layer_norm_eps: c.layer_norm_eps,
        }
    }

    /// The block's LayerNorm.
    pub(super) fn norm(&self, x: Tensor<3>) -> Tensor<3> {
        norm(&self.layer_norm, x, self.layer_norm_eps)
    }

    /// `softmax(QKᵀ/√d + bias)·V`, projected; no residual, no LayerNorm (the layer adds them).
    pub fn attend(&self, x: Tensor<3>, bias: Tensor<4>) -> Tensor<3> {
        self.attend_packed(x, bias, None)
    }

    /// Whether [`AlbertAttention::attend`] of `x` takes Q, K and V from one product: on
    /// libtorch, where no dropout on the probabilities applies (off autodiff, none does).
    pub fn packs(&self, x: &Tensor<3>, bias: &Tensor<4>) -> bool {
        let no_dropout = self.attention_dropout.prob == 0.0 || !x.device().is_autodiff();
        no_dropout && crate::fused::packs_attention(x, bias, self.num_heads)
    }

    /// The Q, K and V weights and biases side by side, for [`AlbertAttention::attend_packed`]:
    /// an encoder whose layers share this block packs them once a forward pass, not once a
    /// layer. `None` where a layer has no bias.
    pub fn pack_qkv(&self) -> Option<(Tensor<2>, Tensor<1>)> {
        ops::pack_qkv([&self.query, &self.key, &self.value])
    }

    /// This block as one forward pass of the layers sharing it uses it, with its Q, K and V
    /// packed once for the pass where `packs` ([`AlbertAttention::packs`]) and they have
    /// biases: each weight the pass multiplies by made once for it ([`ops::share_in_pass`];
    /// the packed one by [`crate::fused::shared_weight`]), Q, K and V one by one where not
    /// packed.
    pub(super) fn for_pass(&self, packs: bool) -> (Self, Option<PackedQkv>) {
        let bf16 = self.precision == MatmulPrecision::Bf16;
        let packed = packs
            .then(|| self.pack_qkv())
            .flatten()
            .map(|(w, b)| (crate::fused::shared_weight(w, bf16), b));
        let mut block = self.clone();
        let used = match packed {
            Some(_) => vec![&mut block.dense],
            None => vec![
                &mut block.query,
                &mut block.key,
                &mut block.value,
                &mut block.dense,
            ],
        };
        for l in used {
            ops::share_in_pass(l, self.precision);
        }
        (block, packed)
    }

    /// [`AlbertAttention::attend`] with the Q, K and V layers already packed ([`pack_qkv`]),
    /// where the packed product applies.
    ///
    /// [`pack_qkv`]: AlbertAttention::pack_qkv
    pub fn attend_packed(
        &self,
        x: Tensor<3>,
        bias: Tensor<4>,
        packed: Option<&(Tensor<2>, Tensor<1>)>,
    ) -> Tensor<3> {
        // One op on flex and libtorch where no dropout on the probabilities applies (off
        // autodiff, none does); on libtorch from one product for Q, K and V.
        let no_dropout = self.attention_dropout.prob == 0.0 || !x.device().is_autodiff();
        let context = self
            .packs(&x, &bias)
            .then(|| self.packed_context(&x, &bias, packed))
            .flatten()
            .unwrap_or_else(|| self.context(x, bias, no_dropout));
        self.output_dropout
            .forward(dense_in(self.precision, &self.dense, context))
    }

    /// `1/√d`, the scores' scale for heads of width `d` out of `h`.
    fn scale(&self, h: usize) -> f64 {
        1.0 / ((h / self.num_heads) as f64).sqrt()
    }

    /// The attention's context from Q, K and V packed in one product (`packed`, or packed
    /// here), on libtorch ([`crate::fused::attention_packed`]); `None` where that op does not
    /// apply.
    pub(super) fn packed_context(
        &self,
        x: &Tensor<3>,
        bias: &Tensor<4>,
        packed: Option<&(Tensor<2>, Tensor<1>)>,
    ) -> Option<Tensor<3>> {
        let (p, [_, _, h]) = (self.precision, x.dims());
        let own;
        let packed = match packed {
            Some(packed) => packed,
            None => {
                own = self.pack_qkv()?;
                &own
            }
        };
        let qkv = ops::packed_projection(p, packed, x, p.between_products())?;
        crate::fused::attention_packed(&qkv, bias, self.num_heads, self.scale(h) as f32)
    }

    /// The attention's context from three products: the fused core where `fused` (no dropout)
    /// and it applies, burn's ops otherwise (the scores materialised).
    pub(super) fn context(&self, x: Tensor<3>, bias: Tensor<4>, fused: bool) -> Tensor<3> {
        let [b, s, h] = x.dims();
        let (heads, p) = (self.num_heads, self.precision);
        let d = h / heads;
        let [q, k] = [&self.query, &self.key].map(|l| dense_between_products(p, l, x.clone()));
        let v = dense_between_products(p, &self.value, x);
        let scale = self.scale(h);
        let core = match p {
            MatmulPrecision::Fp32 => crate::fused::attention_core,
            MatmulPrecision::Bf16 => crate::fused::attention_core_bf16,
        };
        let fused = fused
            .then(|| core([&q, &k, &v], &bias, heads, scale as f32))
            .flatten();
        fused.unwrap_or_else(|| {
            let split = |t: Tensor<3>| t.reshape([b, s, heads, d]).swap_dims(1, 2);
            let scores = p.matmul(split(q), split(k).swap_dims(2, 3));
            // The scale stays on the scores: on the queries (5× fewer values) it was 0.99× per
            // training step (six alternating rounds, 0.97–1.02×, 2026-11-28 at AVX2).
            let probs = crate::fused::attention_probs(scores, scale as f32, &bias)
                .or_else(|s| crate::fused::attention_probs_tracked(*s, scale as f32, &bias))
                .unwrap_or_else(|scores| softmax((*scores).mul_scalar(scale) + bias, 3));
            let probs = self.attention_dropout.forward(probs);
            p.matmul(probs, split(v)).swap_dims(1, 2).reshape([b, s, h])
        })
    }
}
