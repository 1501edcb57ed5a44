//! The model's discrete choices: activation, cross-layer sharing, LayerNorm placement and the
//! embedding/MLM-head layout, with the names params and config files spell them with.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::ConfigError;

/// The feed-forward (and MLM head) activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Activation {
    /// The exact GELU, `x·Φ(x)` with the error function (Hugging Face's `gelu`).
    Gelu,
    /// The tanh approximation `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))` (Hugging Face's
    /// `gelu_new`; what the TensorFlow code of google-research/albert and albert_zh calls `gelu`).
    GeluNew,
    /// `max(0, x)`.
    Relu,
}

impl Activation {
    /// The name transformers' `hidden_act` gives it.
    pub fn hf_name(self) -> &'static str {
        match self {
            Activation::Gelu => "gelu",
            Activation::GeluNew => "gelu_new",
            Activation::Relu => "relu",
        }
    }
}

/// Which encoder parameters the layers share (ALBERT's cross-layer parameter sharing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShareType {
    /// One attention block and one feed-forward block for every layer (ALBERT's default).
    All,
    /// One attention block shared, a feed-forward block per layer.
    Attention,
    /// One feed-forward block shared, an attention block per layer.
    Ffn,
    /// Every layer its own parameters (BERT).
    None,
}

impl ShareType {
    /// Every sharing, from none to all.
    pub const ALL: [ShareType; 4] = [
        ShareType::None,
        ShareType::Attention,
        ShareType::Ffn,
        ShareType::All,
    ];

    /// The name params and `config.json` use.
    pub fn name(self) -> &'static str {
        match self {
            ShareType::All => "all",
            ShareType::Attention => "attention",
            ShareType::Ffn => "ffn",
            ShareType::None => "none",
        }
    }

    /// The sharing of that name (also albert_zh's `attention_only`, `ffn_only`, `not_shared`).
    pub fn parse(s: &str) -> Result<ShareType, ConfigError> {
        match s {
            "all" => Ok(ShareType::All),
            "attention" | "attention_only" => Ok(ShareType::Attention),
            "ffn" | "ffn_only" => Ok(ShareType::Ffn),
            "none" | "not_shared" => Ok(ShareType::None),
            other => Err(ConfigError::new(format!(
                "unknown share_type {other:?}: expected one of all, attention, ffn, none"
            ))),
        }
    }

    /// How many distinct attention and feed-forward blocks a model of `layers` layers holds.
    pub fn blocks(self, layers: usize) -> (usize, usize) {
        match self {
            ShareType::All => (1, 1),
            ShareType::Attention => (1, layers),
            ShareType::Ffn => (layers, 1),
            ShareType::None => (layers, layers),
        }
    }
}

impl fmt::Display for ShareType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where LayerNorm sits relative to the residual connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LnType {
    /// `x = LN(x + f(x))` (BERT, ALBERT, Hugging Face).
    Postln,
    /// `x = x + f(LN(x))` (albert_zh's `preln`): the same parameters, in another place.
    Preln,
}

impl LnType {
    /// The name params and `config.json` use.
    pub fn name(self) -> &'static str {
        match self {
            LnType::Postln => "postln",
            LnType::Preln => "preln",
        }
    }

    /// The placement of that name (also `post_ln`, `post`, `pre_ln`, `pre`).
    pub fn parse(s: &str) -> Result<LnType, ConfigError> {
        match s {
            "postln" | "post_ln" | "post" => Ok(LnType::Postln),
            "preln" | "pre_ln" | "pre" => Ok(LnType::Preln),
            other => Err(ConfigError::new(format!(
                "unknown ln_type {other:?}: expected postln or preln"
            ))),
        }
    }
}

/// Which embedding block and MLM head the model has (the encoder is the same in both).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Layout {
    /// google-research/albert's and transformers' `AlbertForPreTraining`: embeddings and their
    /// LayerNorm at width E, then a biased E→H projection; the MLM head maps H→E and decodes
    /// with the word embeddings.
    #[default]
    Google,
    /// brightmart/albert_zh's own: the word embeddings projected to H by a bias-free
    /// `word_embeddings_2` before position and token-type embeddings and LayerNorm, all at
    /// width H; the MLM head stays at H and decodes through `word_embeddings_2ᵀ` then the word
    /// embeddings (see [`crate::albert_zh_layout`]).
    AlbertZh,
}

impl Layout {
    /// The name params and `config.json` use.
    pub fn name(self) -> &'static str {
        match self {
            Layout::Google => "google",
            Layout::AlbertZh => "albert_zh",
        }
    }

    /// The layout of that name.
    pub fn parse(s: &str) -> Result<Layout, ConfigError> {
        match s {
            "google" => Ok(Layout::Google),
            "albert_zh" => Ok(Layout::AlbertZh),
            other => Err(ConfigError::new(format!(
                "unknown layout {other:?}: expected google or albert_zh"
            ))),
        }
    }
}
