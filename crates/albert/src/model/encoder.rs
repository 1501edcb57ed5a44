//! [`AlbertEncoder`]: the E→H projection and the layers, with the sharing of their blocks.

use burn::module::Module;
use burn::nn::Linear;
use burn::tensor::{Device, Tensor};

use super::attention::PackedQkv;
use super::{AlbertAttention, AlbertFfn, AlbertLayerOps, MatmulPrecision, dense_in, linear};
use crate::config::{AlbertConfig, Layout, LnType};

/// The E→H projection and the layers. `attentions` and `ffns` hold one block when shared and
/// one per layer when not; layer `i` uses block `i % len`.
#[derive(Module, Debug)]
pub struct AlbertEncoder {
    /// E→H; `None` in albert_zh's layout, whose embeddings are H wide already.
    pub embedding_hidden_mapping_in: Option<Linear>,
    /// The attention blocks: one when shared (`all`, `attention`), one per layer otherwise.
    pub attentions: Vec<AlbertAttention>,
    /// The feed-forward blocks: one when shared (`all`, `ffn`), one per layer otherwise.
    pub ffns: Vec<AlbertFfn>,
    /// How many layers the blocks are applied as.
    #[module(skip)]
    pub num_layers: usize,
    /// Where the LayerNorms sit.
    #[module(skip)]
    pub ln_type: LnType,
    /// The dtype of the E→H projection.
    #[module(skip)]
    pub precision: MatmulPrecision,
}

impl AlbertEncoder {
    /// A freshly initialised encoder of config `c`, with as many blocks as its sharing asks.
    pub fn new(c: &AlbertConfig, device: &Device) -> Self {
        let (n_attn, n_ffn) = c.share_type.blocks(c.num_hidden_layers);
        AlbertEncoder {
            embedding_hidden_mapping_in: (c.layout == Layout::Google)
                .then(|| linear(c.embedding_size, c.hidden_size, c, device)),
            attentions: (0..n_attn)
                .map(|_| AlbertAttention::new(c, device))
                .collect(),
            ffns: (0..n_ffn).map(|_| AlbertFfn::new(c, device)).collect(),
            num_layers: c.num_hidden_layers,
            ln_type: c.ln_type,
            precision: MatmulPrecision::Fp32,
        }
    }

    /// `[batch, seq, E]` → `[batch, seq, H]`.
    pub fn forward(&self, embedded: Tensor<3>, bias: Tensor<4>) -> Tensor<3> {
        let mut x = self.project(embedded);
        let pass = self.for_pass(&x, &bias);
        for i in 0..self.num_layers {
            x = pass.layer(i).forward(x, bias.clone());
        }
        x
    }

    /// The blocks as one forward pass of `x` uses them: each block that several layers share
    /// made once for the pass, with its weights made once ([`AlbertAttention::for_pass`],
    /// [`AlbertFfn::for_pass`]) and its Q, K and V packed once where it takes them packed
    /// ([`AlbertAttention::packs`]: libtorch).
    ///
    /// Why packed once: packing is two concatenations forward and their slicing backward; done
    /// in every layer, `base`'s 12 layers sharing one block packed the same weights 12 times a
    /// step, and the backward sliced 12 gradients apart to sum them per layer (`pipeline bench
    /// train --count-ops`, `tch-cpu`: 28 `cat`s and 144 slices of the `[768, 2304]` weight a
    /// step). Packed once, the 12 layers' gradients sum in the packed weight's and are sliced
    /// once. Why the weights made once: `crate::fused::shared_weight`.
    pub(super) fn for_pass(&self, x: &Tensor<3>, bias: &Tensor<4>) -> PassBlocks<'_> {
        let shared = |blocks: usize| self.num_layers > blocks;
        let attentions = self
            .attentions
            .iter()
            .map(|a| shared(self.attentions.len()).then(|| a.for_pass(a.packs(x, bias))))
            .collect();
        let ffns = self
            .ffns
            .iter()
            .map(|f| shared(self.ffns.len()).then(|| f.for_pass()))
            .collect();
        PassBlocks {
            encoder: self,
            attentions,
            ffns,
        }
    }

    /// `[batch, seq, E]` → `[batch, seq, H]`: the E→H projection (none in albert_zh's layout).
    pub fn project(&self, embedded: Tensor<3>) -> Tensor<3> {
        match &self.embedding_hidden_mapping_in {
            Some(l) => dense_in(self.precision, l, embedded),
            None => embedded,
        }
    }

    /// Layer `i`'s blocks (block `i % len` of each list).
    pub fn layer(&self, i: usize) -> AlbertLayerOps<'_> {
        AlbertLayerOps {
            attention: &self.attentions[i % self.attentions.len()],
            ffn: &self.ffns[i % self.ffns.len()],
            ln_type: self.ln_type,
            packed_qkv: None,
        }
    }
}

/// The encoder's blocks as one forward pass uses them ([`AlbertEncoder::for_pass`]): `None`
/// for a block only one layer uses, which the layer takes as it is.
pub(super) struct PassBlocks<'a> {
    encoder: &'a AlbertEncoder,
    /// Each shared attention block for the pass, with its Q, K and V packed where they are.
    attentions: Vec<Option<(AlbertAttention, Option<PackedQkv>)>>,
    /// Each shared feed-forward block for the pass.
    ffns: Vec<Option<AlbertFfn>>,
}

impl PassBlocks<'_> {
    /// Layer `i` of the pass: [`AlbertEncoder::layer`] with the pass's blocks where it made them.
    pub(super) fn layer(&self, i: usize) -> AlbertLayerOps<'_> {
        let own = self.encoder.layer(i);
        let attention = self.attentions[i % self.attentions.len()].as_ref();
        let ffn = self.ffns[i % self.ffns.len()].as_ref();
        AlbertLayerOps {
            attention: attention.map_or(own.attention, |(a, _)| a),
            ffn: ffn.unwrap_or(own.ffn),
            packed_qkv: attention.and_then(|(_, packed)| packed.as_ref()),
            ln_type: own.ln_type,
        }
    }
}
