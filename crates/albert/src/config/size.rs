//! What a config implies beyond its fields: whether transformers can run the model, the
//! `config.json` we write for it, its parameter counts and its FLOPs per step.

use serde::Serialize;
use serde_json::{Value, json};

use super::{AlbertConfig, Layout, LnType, ShareType};

/// Why transformers' `AlbertForPreTraining` cannot run a model faithfully: each problem, said
/// with what it changes; shown joined by "; ".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(into = "String")]
#[error("{}", .problems.join("; "))]
pub struct HfIncompatible {
    /// One sentence per difference.
    pub problems: Vec<String>,
}

impl From<HfIncompatible> for String {
    fn from(e: HfIncompatible) -> String {
        e.to_string()
    }
}

impl AlbertConfig {
    /// Whether `transformers`' `AlbertForPreTraining` can load this model as it is: post-LN,
    /// and sharing that its `num_hidden_groups` expresses (all, or none).
    pub fn hf_compatible(&self) -> Result<(), HfIncompatible> {
        let mut problems = Vec::new();
        if self.ln_type == LnType::Preln {
            problems.push(
                "ln_type preln: transformers' ALBERT is post-LN only; it would load the \
                 weights but compute a different function"
                    .to_string(),
            );
        }
        if self.layout == Layout::AlbertZh {
            problems.push(
                "layout albert_zh: brightmart/albert_zh's embeddings (word_embeddings_2, \
                 position and token-type embeddings at width H) and MLM head (decoding through \
                 word_embeddings_2ᵀ) are not AlbertForPreTraining's"
                    .to_string(),
            );
        }
        if matches!(self.share_type, ShareType::Attention | ShareType::Ffn) {
            problems.push(format!(
                "share_type {}: transformers shares whole layers (num_hidden_groups), not the \
                 attention or feed-forward block alone",
                self.share_type
            ));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(HfIncompatible { problems })
        }
    }

    /// `config.json` as transformers' `AlbertConfig` writes it, plus our `share_type` and
    /// `ln_type`, and a note when transformers cannot run the model faithfully.
    pub fn to_hf_json(&self, architecture: &str) -> Value {
        let (groups, _) = self.share_type.blocks(self.num_hidden_layers);
        let mut v = json!({
            "architectures": [architecture],
            "model_type": "albert",
            "vocab_size": self.vocab_size,
            "embedding_size": self.embedding_size,
            "hidden_size": self.hidden_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_hidden_groups": if self.share_type == ShareType::None { self.num_hidden_layers } else { groups },
            "inner_group_num": 1,
            "num_attention_heads": self.num_attention_heads,
            "intermediate_size": self.intermediate_size,
            "hidden_act": self.hidden_act.hf_name(),
            "hidden_dropout_prob": self.hidden_dropout_prob,
            "attention_probs_dropout_prob": self.attention_probs_dropout_prob,
            "max_position_embeddings": self.max_position_embeddings,
            "type_vocab_size": self.type_vocab_size,
            "initializer_range": self.initializer_range,
            "layer_norm_eps": self.layer_norm_eps,
            "position_embedding_type": "absolute",
            "pad_token_id": 0,
            "share_type": self.share_type.name(),
            "ln_type": self.ln_type.name(),
        });
        if self.layout != Layout::Google
            && let Some(obj) = v.as_object_mut()
        {
            obj.insert("layout".into(), json!(self.layout.name()));
        }
        if let Err(why) = self.hf_compatible()
            && let Some(obj) = v.as_object_mut()
        {
            obj.insert(
                "pipeline_note".into(),
                json!(format!(
                    "transformers cannot load this model faithfully: {why}. Load it with \
                     `pipeline model forward`."
                )),
            );
        }
        v
    }

    /// Parameter counts of the pretraining model (the MLM decoder is tied to the word
    /// embeddings, so only its bias counts).
    pub fn parameter_count(&self) -> ParameterCount {
        let (v, e, h, i) = (
            self.vocab_size as u64,
            self.embedding_size as u64,
            self.hidden_size as u64,
            self.intermediate_size as u64,
        );
        let p = self.max_position_embeddings as u64;
        let t = self.type_vocab_size as u64;
        let (n_attn, n_ffn) = self.share_type.blocks(self.num_hidden_layers);
        let word_embeddings = v * e;
        let embeddings = word_embeddings + p * e + t * e + 2 * e;
        let projection = e * h + h;
        let attention_block = 4 * (h * h + h) + 2 * h;
        let ffn_block = h * i + i + i * h + h + 2 * h;
        let encoder = projection + n_attn as u64 * attention_block + n_ffn as u64 * ffn_block;
        let pooler = h * h + h;
        let mlm_head = h * e + e + 2 * e + v;
        let sop_head = 2 * h + 2;
        let (embeddings, encoder, mlm_head) = if self.layout == Layout::AlbertZh {
            // word_embeddings_2 (E×H, no bias) replaces the biased projection; position and
            // token-type embeddings and both LayerNorms are H wide; the MLM dense is H→H.
            (
                word_embeddings + e * h + p * h + t * h + 2 * h,
                n_attn as u64 * attention_block + n_ffn as u64 * ffn_block,
                h * h + h + 2 * h + v,
            )
        } else {
            (embeddings, encoder, mlm_head)
        };
        ParameterCount {
            word_embeddings,
            embeddings,
            encoder,
            pooler,
            mlm_head,
            sop_head,
            backbone: embeddings + encoder + pooler,
            total: embeddings + encoder + pooler + mlm_head + sop_head,
        }
    }

    /// Model FLOPs of one training step (forward and backward, 3× the forward's 2·MACs) on
    /// `batch` rows of `seq` tokens with `masked` MLM predictions each; a shared layer counts once
    /// per application. The MLM head counts only at the masked positions (what we compute;
    /// transformers computes it everywhere, which is not useful work). Embedding lookups are
    /// free. The formula of `benches/hf_baseline.py`, so MFU figures compare.
    pub fn training_flops(&self, batch: usize, seq: usize, masked: usize) -> f64 {
        let (b, s, m) = (batch as f64, seq as f64, masked as f64);
        let (e, h, i, v, l) = (
            self.embedding_size as f64,
            self.hidden_size as f64,
            self.intermediate_size as f64,
            self.vocab_size as f64,
            self.num_hidden_layers as f64,
        );
        let tokens = b * s;
        let per_token = e * h + l * (4.0 * h * h + 2.0 * h * i);
        6.0 * tokens * per_token
            + 6.0 * b * m * (h * e + e * v)
            + 6.0 * b * (h * h + 2.0 * h)
            + 12.0 * b * l * h * s * s
    }

    /// Model FLOPs of one `AlbertModel` forward pass (embeddings to pooler, no heads) on `batch`
    /// rows of `seq` tokens: a third of [`Self::training_flops`]'s backbone terms.
    pub fn inference_flops(&self, batch: usize, seq: usize) -> f64 {
        let (b, s) = (batch as f64, seq as f64);
        let (e, h, i, l) = (
            self.embedding_size as f64,
            self.hidden_size as f64,
            self.intermediate_size as f64,
            self.num_hidden_layers as f64,
        );
        let per_token = e * h + l * (4.0 * h * h + 2.0 * h * i);
        2.0 * b * s * per_token + 2.0 * b * h * h + 4.0 * b * l * h * s * s
    }
}

/// What [`AlbertConfig::parameter_count`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ParameterCount {
    /// V×E alone (the factorisation's saving is here).
    pub word_embeddings: u64,
    /// Word, position and token-type embeddings and their LayerNorm.
    pub embeddings: u64,
    /// The E→H projection and the distinct attention and feed-forward blocks.
    pub encoder: u64,
    /// The pooler's H→H dense.
    pub pooler: u64,
    /// MLM head: H→E dense, LayerNorm, output bias (decoder weights tied to the embeddings).
    pub mlm_head: u64,
    /// The sentence-order classifier.
    pub sop_head: u64,
    /// Embeddings + encoder + pooler: what `AlbertModel` holds.
    pub backbone: u64,
    /// Everything `AlbertForPreTraining` holds.
    pub total: u64,
}
