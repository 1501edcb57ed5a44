//! ALBERT as burn modules, written once against burn's runtime `Device` (flex, or libtorch with
//! the `tch` feature): factorised embeddings, an encoder whose attention and feed-forward blocks
//! are shared across layers as `share_type` says, post-LN or pre-LN, the pooler, and the
//! pretraining heads (MLM with the decoder tied to the word embeddings, SOP). The fine-tuning
//! heads are in [`crate::heads`] (re-exported here under their old paths).
//!
//! Field names follow Hugging Face's `AlbertForPreTraining` where they can, so that
//! [`crate::hf`] maps checkpoints with a handful of rules. Read [`AlbertEncoder::forward`] for the
//! sharing and [`AlbertLayerOps::forward`] for where LayerNorm sits.

use burn::module::{Module, Param};
use burn::nn::{
    Dropout, DropoutConfig, Embedding, EmbeddingConfig, Initializer, LayerNorm, LayerNormConfig,
    Linear, LinearConfig,
};
use burn::tensor::activation::log_softmax;
use burn::tensor::{DType, Device, FloatDType, Int, Tensor};

use crate::config::{Activation, AlbertConfig, LnType};

mod attention;
mod cls_only;
mod corruption;
mod encoder;
mod input;
mod ops;
mod precision;
#[cfg(test)]
mod tests;
pub use crate::heads::{
    AlbertForMultipleChoice, AlbertForQuestionAnswering, AlbertForSequenceClassification,
    AlbertForTokenClassification, SpanLogits,
};
pub use attention::AlbertAttention;
pub use corruption::mlm_by_corruption;
pub use encoder::AlbertEncoder;
pub use input::AlbertInput;
use ops::{activate, decode, linear_rows, linear_rows_to, norm};
pub use ops::{gelu_tanh, gelu_tanh_composed};
pub use precision::{MatmulPrecision, NoBf16, UnknownPrecision};

pub(crate) fn linear(d_in: usize, d_out: usize, c: &AlbertConfig, device: &Device) -> Linear {
    // transformers initialises weights N(0, initializer_range) and biases with zeros.
    let mut l = LinearConfig::new(d_in, d_out)
        .with_initializer(Initializer::Normal {
            mean: 0.0,
            std: c.initializer_range,
        })
        .init(device);
    l.bias = Some(Param::from_tensor(Tensor::zeros([d_out], device)));
    l
}

/// `l` applied to `[batch, seq, d]` as one `[batch·seq, d]` matrix product. burn keeps a
/// `[32, 128, d]` input as 32 batched products with the weight broadcast (a rule tuned for GPU
/// tiles), which on a CPU packs the weight once per row block and gives the backward 32 small
/// products; folding the batch into the rows is one large, efficient product each way.
pub fn dense(l: &Linear, x: Tensor<3>) -> Tensor<3> {
    dense_in(MatmulPrecision::Fp32, l, x)
}

/// `l` applied to `[n, d]` rows in `precision`: burn's own `Linear` in float32 (the path these
/// small layers, the pooler and the heads, always took, kept bit for bit), the fused bf16
/// product under bf16 mixed precision, as `torch.autocast` runs every `nn.Linear`.
fn linear_in(precision: MatmulPrecision, l: &Linear, x: Tensor<2>) -> Tensor<2> {
    match precision {
        MatmulPrecision::Fp32 => l.forward(x),
        MatmulPrecision::Bf16 => ops::linear_rows(precision, l, x),
    }
}

/// [`dense`] with its product in `precision`, the result in float32.
pub fn dense_in(precision: MatmulPrecision, l: &Linear, x: Tensor<3>) -> Tensor<3> {
    dense_to(precision, l, x, FloatDType::F32)
}

/// [`dense_in`] for a result that only feeds another product, the attention core or the
/// activation between the feed-forward's two products: left in
/// [`MatmulPrecision::between_products`]'s dtype (bf16 under bf16, see `precision`).
fn dense_between_products(precision: MatmulPrecision, l: &Linear, x: Tensor<3>) -> Tensor<3> {
    dense_to(precision, l, x, precision.between_products())
}

/// [`dense_in`] with the result in `out` where the fused bf16 product runs.
fn dense_to(precision: MatmulPrecision, l: &Linear, x: Tensor<3>, out: FloatDType) -> Tensor<3> {
    let [b, s, d] = x.dims();
    let y = linear_rows_to(precision, l, x.reshape([b * s, d]), out);
    let [_, o] = y.dims();
    y.reshape([b, s, o])
}

fn layer_norm(d: usize, c: &AlbertConfig, device: &Device) -> LayerNorm {
    LayerNormConfig::new(d)
        .with_epsilon(c.layer_norm_eps)
        .init(device)
}

fn embedding(n: usize, d: usize, c: &AlbertConfig, device: &Device) -> Embedding {
    EmbeddingConfig::new(n, d)
        .with_initializer(Initializer::Normal {
            mean: 0.0,
            std: c.initializer_range,
        })
        .init(device)
}

/// Word, position and token-type embeddings of width E, summed and normalised (albert_zh's
/// layout: the words projected to H by `word_embeddings_2` first, the rest at width H).
#[derive(Module, Debug)]
pub struct AlbertEmbeddings {
    /// `[V, E]`: a row per token id.
    pub word_embeddings: Embedding,
    /// `[E, H]`, albert_zh's layout only (see [`crate::albert_zh_layout`]).
    pub word_embeddings_2: Option<Param<Tensor<2>>>,
    /// A row per position, up to `max_position_embeddings`.
    pub position_embeddings: Embedding,
    /// A row per segment (`type_vocab_size`, 2).
    pub token_type_embeddings: Embedding,
    /// Normalises the sum of the three.
    pub layer_norm: LayerNorm,
    /// Dropout after the LayerNorm (`hidden_dropout_prob`).
    pub dropout: Dropout,
    /// The LayerNorms' ε (`layer_norm_eps`), which burn's `LayerNorm` keeps private.
    #[module(skip)]
    pub layer_norm_eps: f64,
}

impl AlbertEmbeddings {
    /// Freshly initialised embeddings of config `c` (see [`AlbertConfig::initializer_range`]).
    pub fn new(c: &AlbertConfig, device: &Device) -> Self {
        // albert_zh's layout sums and normalises at width H.
        let width = crate::albert_zh_layout::embedding_width(c);
        AlbertEmbeddings {
            word_embeddings: embedding(c.vocab_size, c.embedding_size, c, device),
            word_embeddings_2: crate::albert_zh_layout::new_projection(c, device),
            position_embeddings: embedding(c.max_position_embeddings, width, c, device),
            token_type_embeddings: embedding(c.type_vocab_size, width, c, device),
            layer_norm: layer_norm(width, c, device),
            dropout: DropoutConfig::new(c.hidden_dropout_prob).init(),
            layer_norm_eps: c.layer_norm_eps,
        }
    }

    /// `[batch, seq]` ids → `[batch, seq, E]`.
    pub fn forward(&self, input_ids: Tensor<2, Int>, token_type_ids: Tensor<2, Int>) -> Tensor<3> {
        let [_, seq] = input_ids.dims();
        let device = input_ids.device();
        // `arange` is made on the device by burn-tch (`arange_step` is not: see forward_pretrain).
        let positions = Tensor::<1, Int>::arange(0..seq as i64, &device).reshape([1, seq]);
        let words = crate::albert_zh_layout::project_words(
            self.word_embeddings.forward(input_ids),
            self.word_embeddings_2.as_ref(),
        );
        let x = words
            + self.position_embeddings.forward(positions)
            + self.token_type_embeddings.forward(token_type_ids);
        self.dropout
            .forward(norm(&self.layer_norm, x, self.layer_norm_eps))
    }
}

/// The feed-forward block with its LayerNorm (`ffn`, `ffn_output`, `full_layer_layer_norm`).
#[derive(Module, Debug)]
pub struct AlbertFfn {
    /// `[H, I]`: up to the feed-forward width.
    pub ffn: Linear,
    /// `[I, H]`: back to the residual stream.
    pub ffn_output: Linear,
    /// The LayerNorm around the block (after the residual sum, or on the input in preln).
    pub full_layer_layer_norm: LayerNorm,
    /// Dropout on the block's output (`hidden_dropout_prob`).
    pub dropout: Dropout,
    /// The activation between the two projections (`hidden_act`).
    #[module(skip)]
    pub activation: Activation,
    /// The dtype of the two projections.
    #[module(skip)]
    pub precision: MatmulPrecision,
    /// The LayerNorms' ε (`layer_norm_eps`), which burn's `LayerNorm` keeps private.
    #[module(skip)]
    pub layer_norm_eps: f64,
}

impl AlbertFfn {
    /// A freshly initialised feed-forward block of config `c`.
    pub fn new(c: &AlbertConfig, device: &Device) -> Self {
        AlbertFfn {
            ffn: linear(c.hidden_size, c.intermediate_size, c, device),
            ffn_output: linear(c.intermediate_size, c.hidden_size, c, device),
            full_layer_layer_norm: layer_norm(c.hidden_size, c, device),
            dropout: DropoutConfig::new(c.hidden_dropout_prob).init(),
            activation: c.hidden_act,
            precision: MatmulPrecision::Fp32,
            layer_norm_eps: c.layer_norm_eps,
        }
    }

    /// The block's LayerNorm.
    fn norm(&self, x: Tensor<3>) -> Tensor<3> {
        norm(&self.full_layer_layer_norm, x, self.layer_norm_eps)
    }

    /// This block as one forward pass of the layers sharing it uses it: both projections'
    /// weights made once for the pass ([`ops::share_in_pass`]).
    pub(super) fn for_pass(&self) -> Self {
        let mut block = self.clone();
        for l in [&mut block.ffn, &mut block.ffn_output] {
            ops::share_in_pass(l, self.precision);
        }
        block
    }

    /// The two projections and the activation; no residual, no LayerNorm.
    pub fn transform(&self, x: Tensor<3>) -> Tensor<3> {
        let p = self.precision;
        let x = activate(dense_between_products(p, &self.ffn, x), self.activation);
        self.dropout.forward(dense_in(p, &self.ffn_output, x))
    }
}

/// One layer's worth of blocks (borrowed from the encoder's shared or per-layer lists).
pub struct AlbertLayerOps<'a> {
    /// The layer's attention block.
    pub attention: &'a AlbertAttention,
    /// The layer's feed-forward block.
    pub ffn: &'a AlbertFfn,
    /// Where the LayerNorms sit (after each residual sum, or on each block's input).
    pub ln_type: LnType,
    /// The attention block's Q, K and V weights and biases packed side by side, when the
    /// encoder packed them once for all the layers sharing the block
    /// ([`AlbertAttention::pack_qkv`]); `None`: the block packs them itself where it needs them.
    pub packed_qkv: Option<&'a (Tensor<2>, Tensor<1>)>,
}

impl AlbertLayerOps<'_> {
    /// `[batch, seq, H]` → `[batch, seq, H]`: attention then feed-forward, each with its
    /// residual and LayerNorm; `bias` is the `[batch, 1, 1, seq]` attention mask bias.
    pub fn forward(&self, x: Tensor<3>, bias: Tensor<4>) -> Tensor<3> {
        let (attn, ffn) = (self.attention, self.ffn);
        match self.ln_type {
            // transformers' AlbertLayer: LN after each residual sum.
            LnType::Postln => {
                let a = attn.norm(x.clone() + attn.attend_packed(x, bias, self.packed_qkv));
                ffn.norm(a.clone() + ffn.transform(a))
            }
            // albert_zh's preln: LN on each block's input, the residual stream left alone.
            LnType::Preln => {
                let a = x.clone() + attn.attend_packed(attn.norm(x), bias, self.packed_qkv);
                a.clone() + ffn.transform(ffn.norm(a))
            }
        }
    }
}

/// The backbone (`AlbertModel`): embeddings, encoder, pooler.
#[derive(Module, Debug)]
pub struct Albert {
    /// Token ids → `[batch, seq, E]`.
    pub embeddings: AlbertEmbeddings,
    /// `[batch, seq, E]` → `[batch, seq, H]`.
    pub encoder: AlbertEncoder,
    /// `[H, H]`: the `[CLS]` state → the pooled output (through `tanh`).
    pub pooler: Linear,
}

/// What the backbone computes.
#[derive(Debug, Clone)]
pub struct AlbertOutput {
    /// `[batch, seq, H]`.
    pub last_hidden_state: Tensor<3>,
    /// `[batch, H]`: `tanh(dense(h[CLS]))`.
    pub pooler_output: Tensor<2>,
}

impl Albert {
    /// A freshly initialised backbone of config `c`.
    pub fn new(c: &AlbertConfig, device: &Device) -> Self {
        Albert {
            embeddings: AlbertEmbeddings::new(c, device),
            encoder: AlbertEncoder::new(c, device),
            pooler: linear(c.hidden_size, c.hidden_size, c, device),
        }
    }

    /// The last hidden state of every position and the pooled `[CLS]`.
    pub fn forward(&self, input: &AlbertInput) -> AlbertOutput {
        let embedded = self
            .embeddings
            .forward(input.input_ids.clone(), input.token_type_ids.clone());
        let last_hidden_state = self.encoder.forward(embedded, input.attention_bias());
        let [b, _, h] = last_hidden_state.dims();
        let cls = last_hidden_state.clone().narrow(1, 0, 1).reshape([b, h]);
        let pooler_output = self.linear_on(&self.pooler, cls).tanh();
        AlbertOutput {
            last_hidden_state,
            pooler_output,
        }
    }

    /// `l` on `[n, d]` rows in the backbone's precision: the pooler, and the heads on top of
    /// the backbone, whose products follow it.
    pub fn linear_on(&self, l: &Linear, x: Tensor<2>) -> Tensor<2> {
        linear_in(self.precision(), l, x)
    }

    /// `l` on `[batch, seq, d]` in the backbone's precision (the heads at every position).
    pub fn dense_on(&self, l: &Linear, x: Tensor<3>) -> Tensor<3> {
        dense_in(self.precision(), l, x)
    }

    /// The word-embedding matrix `[V, E]` (the MLM decoder is tied to it).
    pub fn word_embeddings(&self) -> Tensor<2> {
        self.embeddings.word_embeddings.weight.val()
    }
}

/// The masked-LM head: H→E dense, activation, LayerNorm, then the tied decoder plus a bias.
#[derive(Module, Debug)]
pub struct MlmHead {
    /// `[H, E]` (`[H, H]` in albert_zh's layout): the transform before the decoder.
    pub dense: Linear,
    /// Normalises the transform's output.
    pub layer_norm: LayerNorm,
    /// `[V]`: added to the tied decoder's logits.
    pub bias: Param<Tensor<1>>,
    /// The transform's activation (`hidden_act`).
    #[module(skip)]
    pub activation: Activation,
    /// The dtype of the transform and of the decoder products.
    #[module(skip)]
    pub precision: MatmulPrecision,
    /// The LayerNorms' ε (`layer_norm_eps`), which burn's `LayerNorm` keeps private.
    #[module(skip)]
    pub layer_norm_eps: f64,
}

impl MlmHead {
    /// A freshly initialised head of config `c` (the bias starts at zero).
    pub fn new(c: &AlbertConfig, device: &Device) -> Self {
        // albert_zh's transform stays at width H (it projects back through word_embeddings_2ᵀ).
        let width = crate::albert_zh_layout::embedding_width(c);
        MlmHead {
            dense: linear(c.hidden_size, width, c, device),
            layer_norm: layer_norm(width, c, device),
            bias: Param::from_tensor(Tensor::zeros([c.vocab_size], device)),
            activation: c.hidden_act,
            precision: MatmulPrecision::Fp32,
            layer_norm_eps: c.layer_norm_eps,
        }
    }

    /// `[n, H]` hidden states → `[n, V]` logits; `projection` is albert_zh's `word_embeddings_2`
    /// (`[E, H]`), applied transposed before the decoder as its run_pretraining.py does.
    pub fn forward(
        &self,
        hidden: Tensor<2>,
        word_embeddings: Tensor<2>,
        projection: Option<Tensor<2>>,
    ) -> Tensor<2> {
        let mp = self.precision;
        let x = activate(linear_rows(mp, &self.dense, hidden), self.activation);
        let x = norm(&self.layer_norm, x, self.layer_norm_eps);
        let x = match projection {
            Some(p) => mp.matmul(x, p.transpose()),
            None => x,
        };
        decode(mp, x, word_embeddings, self.bias.val())
    }
}

/// Masked-LM targets of a batch.
#[derive(Debug, Clone)]
pub struct MlmTargets {
    /// `[batch, m]` positions into each row (padding rows point at 0 with weight 0).
    pub positions: Tensor<2, Int>,
    /// `[batch, m]` original token ids.
    pub ids: Tensor<2, Int>,
    /// `[batch, m]` 1.0 for a real prediction, 0.0 for padding.
    pub weights: Tensor<2>,
    /// The `[MASK]` id, when the pass should also count its predictions by corruption
    /// ([`PretrainOutput::mlm_by_corruption`]); `None` (training steps) adds no op.
    pub mask_id: Option<u32>,
}

/// ALBERT with its two pretraining heads (`AlbertForPreTraining`).
#[derive(Module, Debug)]
pub struct AlbertForPreTraining {
    /// The backbone.
    pub albert: Albert,
    /// The masked-LM head.
    pub predictions: MlmHead,
    /// `[H, 2]`: the pooled `[CLS]` → in order / swapped.
    pub sop_classifier: Linear,
}

/// Losses and counts of one pretraining forward pass.
#[derive(Debug, Clone)]
pub struct PretrainOutput {
    /// MLM loss + SOP loss (scalar).
    pub loss: Tensor<1>,
    /// Mean cross-entropy over the real masked positions (scalar).
    pub mlm_loss: Tensor<1>,
    /// Mean sentence-order cross-entropy (scalar).
    pub sop_loss: Tensor<1>,
    /// Number of correctly predicted masked tokens (weighted count).
    pub mlm_correct: Tensor<1>,
    /// Number of rows whose sentence order was predicted right.
    pub sop_correct: Tensor<1>,
    /// With [`MlmTargets::mask_id`]: `[6]`, the correct predictions at masked positions whose
    /// input is `[MASK]`, a random token and the label itself (kept), then the number of each
    /// ([`mlm_by_corruption`]); `None` without it.
    pub mlm_by_corruption: Option<Tensor<1>>,
}

impl AlbertForPreTraining {
    /// A freshly initialised model of config `c`.
    pub fn new(c: &AlbertConfig, device: &Device) -> Self {
        AlbertForPreTraining {
            albert: Albert::new(c, device),
            predictions: MlmHead::new(c, device),
            sop_classifier: linear(c.hidden_size, 2, c, device),
        }
    }

    /// The training objective: MLM cross-entropy over the masked positions only (gathered before
    /// the V-wide decoder, which is where most of the head's cost is), plus SOP cross-entropy.
    pub fn forward_pretrain(
        &self,
        input: &AlbertInput,
        mlm: &MlmTargets,
        sop_labels: Tensor<1, Int>,
    ) -> PretrainOutput {
        let out = self.albert.forward(input);
        let [b, s, h] = out.last_hidden_state.dims();
        let [_, m] = mlm.positions.dims();
        let device = out.last_hidden_state.device();
        // Row offsets turn [b, m] positions into indexes of the flattened [b·s, h] states.
        // Made on the device (`arange`, then a product), not by `arange_step`: burn-tch has no
        // `int_arange_step`, and burn's default builds the values on the host and copies them
        // from pageable memory, which on CUDA makes the host wait for the device once a step.
        // Found by reading burn-backend 0.22.1 after `--count-syncs` measured one sync a step
        // on the H200 (2026-11-30); that this was the one is for the next GPU to confirm.
        let offsets = Tensor::<1, Int>::arange(0..b as i64, &device)
            .mul_scalar(s as i64)
            .reshape([b, 1]);
        let flat = (mlm.positions.clone() + offsets).reshape([b * m]);
        let gathered = out
            .last_hidden_state
            .reshape([b * s, h])
            .select(0, flat.clone());
        let logits = self.predictions.forward(
            gathered,
            self.albert.word_embeddings(),
            self.albert.mlm_projection(),
        );
        let weights = mlm.weights.clone().reshape([b * m]);
        let labels = mlm.ids.clone().reshape([b * m]);
        let (mlm_loss, hits) = cross_entropy_hits(logits, labels.clone(), weights.clone());
        let mlm_correct = (hits.clone() * weights.clone()).sum().detach();
        // The inputs at the masked positions, read on the device like the labels: the split
        // joins the one read-back of the pass's scalars.
        let mlm_by_corruption = mlm.mask_id.map(|mask_id| {
            let inputs = input.input_ids.clone().reshape([b * s]).select(0, flat);
            mlm_by_corruption(inputs, labels, weights, hits, mask_id)
        });

        let sop_logits = self
            .albert
            .linear_on(&self.sop_classifier, out.pooler_output);
        let sop_weights = Tensor::ones([b], &device);
        let (sop_loss, sop_correct) = weighted_cross_entropy(sop_logits, sop_labels, sop_weights);
        PretrainOutput {
            loss: mlm_loss.clone() + sop_loss.clone(),
            mlm_loss,
            sop_loss,
            mlm_correct,
            sop_correct,
            mlm_by_corruption,
        }
    }

    /// What transformers' `AlbertForPreTraining` returns: MLM logits at every position
    /// `[batch, seq, V]`, SOP logits `[batch, 2]`, and the backbone's outputs.
    pub fn forward_all(&self, input: &AlbertInput) -> (Tensor<3>, Tensor<2>, AlbertOutput) {
        let out = self.albert.forward(input);
        let [b, s, h] = out.last_hidden_state.dims();
        let logits = self.predictions.forward(
            out.last_hidden_state.clone().reshape([b * s, h]),
            self.albert.word_embeddings(),
            self.albert.mlm_projection(),
        );
        let [_, v] = logits.dims();
        let sop = self
            .albert
            .linear_on(&self.sop_classifier, out.pooler_output.clone());
        (logits.reshape([b, s, v]), sop, out)
    }
}

/// Mean cross-entropy of `logits` `[n, c]` against `labels` `[n]`, each row weighted
/// (weights 0 drop padding rows); also the weighted number of correct argmax predictions.
pub fn weighted_cross_entropy(
    logits: Tensor<2>,
    labels: Tensor<1, Int>,
    weights: Tensor<1>,
) -> (Tensor<1>, Tensor<1>) {
    let (loss, hits) = cross_entropy_hits(logits, labels, weights.clone());
    (loss, (hits * weights).sum().detach())
}

/// [`weighted_cross_entropy`]'s loss, and per row 1.0 where the argmax is the label (padding
/// rows included: weigh them out).
fn cross_entropy_hits(
    logits: Tensor<2>,
    labels: Tensor<1, Int>,
    weights: Tensor<1>,
) -> (Tensor<1>, Tensor<1>) {
    let [n, _] = logits.dims();
    let predicted = logits.clone().argmax(1).reshape([n]);
    let hits = predicted.equal(labels.clone()).float();
    // Float32 whatever the logits' dtype (the MLM logits are bf16 under bf16 mixed precision).
    let log_probs = crate::fused::log_softmax_op(logits).unwrap_or_else(|l| {
        let l = if l.dtype() == DType::F32 {
            *l
        } else {
            l.cast(FloatDType::F32)
        };
        log_softmax(l, 1)
    });
    let picked = log_probs.gather(1, labels.reshape([n, 1])).reshape([n]);
    let total = weights.clone().sum().clamp_min(1e-6);
    let loss = (picked * weights).sum().neg() / total;
    (loss, hits)
}
