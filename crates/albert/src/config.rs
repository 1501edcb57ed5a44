//! The model's hyper-parameters, read from the three places they come from: brightmart/albert_zh
//! and google-research/albert JSON files, Hugging Face `config.json` (`AlbertConfig`), and the
//! pretrain stage's params. Unknown or inconsistent fields are errors, because a silently
//! ignored `num_hidden_group` (sic) would train a different model than the one asked for.

use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// The feed-forward (and MLM head) activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Activation {
    /// The exact GELU, `x·Φ(x)` with the error function (Hugging Face's `gelu`).
    Gelu,
    /// The tanh approximation `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))` (Hugging Face's
    /// `gelu_new`; what the TensorFlow code of google-research/albert and albert_zh calls `gelu`).
    GeluNew,
    Relu,
}

impl Activation {
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
    pub const ALL: [ShareType; 4] = [
        ShareType::None,
        ShareType::Attention,
        ShareType::Ffn,
        ShareType::All,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ShareType::All => "all",
            ShareType::Attention => "attention",
            ShareType::Ffn => "ffn",
            ShareType::None => "none",
        }
    }

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
    pub fn name(self) -> &'static str {
        match self {
            LnType::Postln => "postln",
            LnType::Preln => "preln",
        }
    }

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
    pub fn name(self) -> &'static str {
        match self {
            Layout::Google => "google",
            Layout::AlbertZh => "albert_zh",
        }
    }

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

/// An invalid or unsupported model configuration, with what to do about it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct ConfigError {
    pub message: String,
}

impl ConfigError {
    pub fn new(message: impl Into<String>) -> ConfigError {
        ConfigError {
            message: message.into(),
        }
    }

    fn in_file(self, path: &Path) -> ConfigError {
        ConfigError::new(format!("{}: {}", path.display(), self.message))
    }
}

/// ALBERT's hyper-parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AlbertConfig {
    pub vocab_size: usize,
    /// E: the factorised embedding width (V×E + E×H instead of V×H).
    pub embedding_size: usize,
    /// H.
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub hidden_act: Activation,
    pub max_position_embeddings: usize,
    pub type_vocab_size: usize,
    pub layer_norm_eps: f64,
    pub initializer_range: f64,
    pub hidden_dropout_prob: f64,
    pub attention_probs_dropout_prob: f64,
    pub share_type: ShareType,
    pub ln_type: LnType,
    /// Google's (= transformers') embeddings and MLM head, or albert_zh's.
    #[serde(default)]
    pub layout: Layout,
}

/// The sizes of albert_zh's published configs, for `model: tiny` and friends in pipeline.yaml
/// (the same numbers as `../shared/datasets/albert_zh_configs/albert_config_*.json`).
pub const NAMED_CONFIGS: &[&str] = &["tiny", "small", "base", "large", "xlarge", "xxlarge"];

impl AlbertConfig {
    /// albert_zh's configuration of that name (`tiny`, `small`, `base`, `large`, `xlarge`,
    /// `xxlarge`): vocabulary 21,128, E 128, post-LN except xxlarge, full sharing, no dropout.
    pub fn named(name: &str) -> Result<AlbertConfig, ConfigError> {
        let (h, layers, heads, inter, ln) = match name {
            "tiny" => (312, 4, 12, 1248, LnType::Postln),
            "small" => (384, 6, 12, 1536, LnType::Postln),
            "base" => (768, 12, 12, 3072, LnType::Postln),
            "large" => (1024, 24, 16, 4096, LnType::Postln),
            "xlarge" => (2048, 24, 32, 8192, LnType::Postln),
            "xxlarge" => (4096, 12, 64, 16384, LnType::Preln),
            other => {
                return Err(ConfigError::new(format!(
                    "unknown model {other:?}: expected one of {} or a path to a config JSON{}",
                    NAMED_CONFIGS.join(", "),
                    suggestion(other, NAMED_CONFIGS)
                )));
            }
        };
        Ok(AlbertConfig {
            vocab_size: 21128,
            embedding_size: 128,
            hidden_size: h,
            num_hidden_layers: layers,
            num_attention_heads: heads,
            intermediate_size: inter,
            hidden_act: Activation::GeluNew,
            max_position_embeddings: 512,
            type_vocab_size: 2,
            layer_norm_eps: 1e-12,
            initializer_range: 0.02,
            hidden_dropout_prob: 0.0,
            attention_probs_dropout_prob: 0.0,
            share_type: ShareType::All,
            ln_type: ln,
            layout: Layout::Google,
        })
    }

    /// Reads a config file of any of the three kinds (see [`AlbertConfig::from_json`]).
    pub fn from_file(path: &Path) -> Result<AlbertConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigError::new(format!(
                "cannot read the model config {}: {e}",
                path.display()
            ))
        })?;
        let value: Value = serde_json::from_str(&text).map_err(|e| {
            ConfigError::new(format!(
                "{}:{}:{}: not valid JSON: {e}",
                path.display(),
                e.line(),
                e.column()
            ))
        })?;
        AlbertConfig::from_json(&value).map_err(|e| e.in_file(path))
    }

    /// A config from JSON: Hugging Face's `config.json` when it has `model_type` (or
    /// `architectures`), else an albert_zh / google-research/albert file.
    ///
    /// Differences between the two that matter: albert_zh's `gelu` is the tanh approximation
    /// (its TensorFlow code computes it so) and becomes [`Activation::GeluNew`], while Hugging
    /// Face's `gelu` is the exact one; a file without `embedding_size` is a BERT config (E = H,
    /// no sharing). Our own fields `share_type` and `ln_type` are read from both.
    pub fn from_json(value: &Value) -> Result<AlbertConfig, ConfigError> {
        let obj = value
            .as_object()
            .ok_or_else(|| ConfigError::new("a model config must be a JSON object"))?;
        if obj.contains_key("model_type") || obj.contains_key("architectures") {
            AlbertConfig::from_hf(obj)
        } else {
            AlbertConfig::from_albert_zh(obj)
        }
    }

    fn from_albert_zh(obj: &Map<String, Value>) -> Result<AlbertConfig, ConfigError> {
        check_keys(obj, ALBERT_ZH_KEYS, "albert_zh")?;
        for (key, expected) in [
            ("net_structure_type", 0),
            ("gap_size", 0),
            ("num_memory_blocks", 0),
            ("down_scale_factor", 1),
        ] {
            if let Some(v) = obj.get(key)
                && v.as_u64() != Some(expected)
            {
                return Err(ConfigError::new(format!(
                    "{key} = {v} is not supported (only the plain ALBERT architecture, {key} = {expected})"
                )));
            }
        }
        let hidden = req_usize(obj, "hidden_size")?;
        let bert_style = !obj.contains_key("embedding_size");
        let act = match req_str(obj, "hidden_act")? {
            // The TF code of google-research/albert and albert_zh defines `gelu` as the tanh
            // approximation.
            "gelu" | "gelu_new" => Activation::GeluNew,
            "gelu_exact" => Activation::Gelu,
            "relu" => Activation::Relu,
            other => return Err(unknown_act(other)),
        };
        let layers = req_usize(obj, "num_hidden_layers")?;
        let share = match obj.get("share_type").and_then(Value::as_str) {
            Some(s) => ShareType::parse(s)?,
            None if bert_style => ShareType::None,
            None => share_from_groups(obj, layers, true)?,
        };
        let ln = match obj.get("ln_type").and_then(Value::as_str) {
            Some(s) => LnType::parse(s)?,
            None => LnType::Postln,
        };
        let config = AlbertConfig {
            vocab_size: req_usize(obj, "vocab_size")?,
            embedding_size: opt_usize(obj, "embedding_size")?.unwrap_or(hidden),
            hidden_size: hidden,
            num_hidden_layers: layers,
            num_attention_heads: req_usize(obj, "num_attention_heads")?,
            intermediate_size: req_usize(obj, "intermediate_size")?,
            hidden_act: act,
            max_position_embeddings: req_usize(obj, "max_position_embeddings")?,
            type_vocab_size: opt_usize(obj, "type_vocab_size")?.unwrap_or(2),
            layer_norm_eps: opt_f64(obj, "layer_norm_eps")?.unwrap_or(1e-12),
            initializer_range: opt_f64(obj, "initializer_range")?.unwrap_or(0.02),
            hidden_dropout_prob: opt_f64(obj, "hidden_dropout_prob")?.unwrap_or(0.0),
            attention_probs_dropout_prob: opt_f64(obj, "attention_probs_dropout_prob")?
                .unwrap_or(0.0),
            share_type: share,
            ln_type: ln,
            layout: layout_of(obj)?,
        };
        config.validate()?;
        Ok(config)
    }

    fn from_hf(obj: &Map<String, Value>) -> Result<AlbertConfig, ConfigError> {
        if let Some(t) = obj.get("model_type").and_then(Value::as_str)
            && t != "albert"
        {
            return Err(ConfigError::new(format!(
                "model_type is {t:?}, not \"albert\": only ALBERT checkpoints can be loaded"
            )));
        }
        check_keys(obj, HF_KEYS, "Hugging Face AlbertConfig")?;
        let act = match obj
            .get("hidden_act")
            .and_then(Value::as_str)
            .unwrap_or("gelu_new")
        {
            "gelu" => Activation::Gelu,
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Activation::GeluNew,
            "relu" => Activation::Relu,
            other => return Err(unknown_act(other)),
        };
        if let Some(p) = obj.get("position_embedding_type").and_then(Value::as_str)
            && p != "absolute"
        {
            return Err(ConfigError::new(format!(
                "position_embedding_type {p:?} is not supported (only \"absolute\")"
            )));
        }
        let layers = opt_usize(obj, "num_hidden_layers")?.unwrap_or(12);
        let share = match obj.get("share_type").and_then(Value::as_str) {
            Some(s) => ShareType::parse(s)?,
            None => share_from_groups(obj, layers, false)?,
        };
        let ln = match obj.get("ln_type").and_then(Value::as_str) {
            Some(s) => LnType::parse(s)?,
            None => LnType::Postln,
        };
        // Defaults are transformers' AlbertConfig defaults (albert-xxlarge sizes).
        let config = AlbertConfig {
            vocab_size: opt_usize(obj, "vocab_size")?.unwrap_or(30000),
            embedding_size: opt_usize(obj, "embedding_size")?.unwrap_or(128),
            hidden_size: opt_usize(obj, "hidden_size")?.unwrap_or(4096),
            num_hidden_layers: layers,
            num_attention_heads: opt_usize(obj, "num_attention_heads")?.unwrap_or(64),
            intermediate_size: opt_usize(obj, "intermediate_size")?.unwrap_or(16384),
            hidden_act: act,
            max_position_embeddings: opt_usize(obj, "max_position_embeddings")?.unwrap_or(512),
            type_vocab_size: opt_usize(obj, "type_vocab_size")?.unwrap_or(2),
            layer_norm_eps: opt_f64(obj, "layer_norm_eps")?.unwrap_or(1e-12),
            initializer_range: opt_f64(obj, "initializer_range")?.unwrap_or(0.02),
            hidden_dropout_prob: opt_f64(obj, "hidden_dropout_prob")?.unwrap_or(0.0),
            attention_probs_dropout_prob: opt_f64(obj, "attention_probs_dropout_prob")?
                .unwrap_or(0.0),
            share_type: share,
            ln_type: ln,
            layout: layout_of(obj)?,
        };
        config.validate()?;
        Ok(config)
    }

    /// Applies pipeline.yaml overrides (`share_type: ffn`, `hidden_size: 128`, …) on top of a
    /// base config; unknown keys are errors with the closest valid name.
    pub fn with_overrides(mut self, overrides: &Map<String, Value>) -> Result<Self, ConfigError> {
        for (key, v) in overrides {
            let usize_of = |v: &Value| {
                v.as_u64().map(|n| n as usize).ok_or_else(|| {
                    ConfigError::new(format!("{key} must be a non-negative integer, not {v}"))
                })
            };
            let f64_of = |v: &Value| {
                v.as_f64()
                    .ok_or_else(|| ConfigError::new(format!("{key} must be a number, not {v}")))
            };
            let str_of = |v: &Value| {
                v.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| ConfigError::new(format!("{key} must be a string, not {v}")))
            };
            match key.as_str() {
                "vocab_size" => self.vocab_size = usize_of(v)?,
                "embedding_size" => self.embedding_size = usize_of(v)?,
                "hidden_size" => self.hidden_size = usize_of(v)?,
                "num_hidden_layers" => self.num_hidden_layers = usize_of(v)?,
                "num_attention_heads" => self.num_attention_heads = usize_of(v)?,
                "intermediate_size" => self.intermediate_size = usize_of(v)?,
                "max_position_embeddings" => self.max_position_embeddings = usize_of(v)?,
                "type_vocab_size" => self.type_vocab_size = usize_of(v)?,
                "layer_norm_eps" => self.layer_norm_eps = f64_of(v)?,
                "initializer_range" => self.initializer_range = f64_of(v)?,
                "hidden_dropout_prob" => self.hidden_dropout_prob = f64_of(v)?,
                "attention_probs_dropout_prob" => self.attention_probs_dropout_prob = f64_of(v)?,
                "share_type" => self.share_type = ShareType::parse(&str_of(v)?)?,
                "ln_type" => self.ln_type = LnType::parse(&str_of(v)?)?,
                "layout" => self.layout = Layout::parse(&str_of(v)?)?,
                "hidden_act" => {
                    self.hidden_act = match str_of(v)?.as_str() {
                        "gelu" => Activation::Gelu,
                        "gelu_new" => Activation::GeluNew,
                        "relu" => Activation::Relu,
                        other => return Err(unknown_act(other)),
                    }
                }
                other => {
                    return Err(ConfigError::new(format!(
                        "unknown model field {other:?}{}",
                        suggestion(other, OVERRIDE_KEYS)
                    )));
                }
            }
        }
        self.validate()?;
        Ok(self)
    }

    /// Checks that the sizes fit together.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (name, v) in [
            ("vocab_size", self.vocab_size),
            ("embedding_size", self.embedding_size),
            ("hidden_size", self.hidden_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("intermediate_size", self.intermediate_size),
            ("max_position_embeddings", self.max_position_embeddings),
            ("type_vocab_size", self.type_vocab_size),
        ] {
            if v == 0 {
                return Err(ConfigError::new(format!("{name} must be at least 1")));
            }
        }
        if !self.hidden_size.is_multiple_of(self.num_attention_heads) {
            return Err(ConfigError::new(format!(
                "hidden_size {} is not divisible by num_attention_heads {}: each head gets \
                 hidden_size / num_attention_heads dimensions",
                self.hidden_size, self.num_attention_heads
            )));
        }
        for (name, p) in [
            ("hidden_dropout_prob", self.hidden_dropout_prob),
            (
                "attention_probs_dropout_prob",
                self.attention_probs_dropout_prob,
            ),
        ] {
            if !(0.0..1.0).contains(&p) {
                return Err(ConfigError::new(format!("{name} = {p} must be in [0, 1)")));
            }
        }
        if self.layer_norm_eps.is_nan() || self.layer_norm_eps <= 0.0 {
            return Err(ConfigError::new("layer_norm_eps must be positive"));
        }
        if self.initializer_range.is_nan() || self.initializer_range <= 0.0 {
            return Err(ConfigError::new("initializer_range must be positive"));
        }
        Ok(())
    }

    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }

    /// Whether `transformers`' `AlbertForPreTraining` can load this model as it is: post-LN,
    /// and sharing that its `num_hidden_groups` expresses (all, or none).
    pub fn hf_compatible(&self) -> Result<(), String> {
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
            Err(problems.join("; "))
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
        if self.layout == Layout::AlbertZh {
            // word_embeddings_2 (E×H, no bias) replaces the biased projection; position and
            // token-type embeddings and both LayerNorms are H wide; the MLM dense is H→H.
            let embeddings = word_embeddings + e * h + p * h + t * h + 2 * h;
            let encoder = n_attn as u64 * attention_block + n_ffn as u64 * ffn_block;
            let mlm_head = h * h + h + 2 * h + v;
            return ParameterCount {
                word_embeddings,
                embeddings,
                encoder,
                pooler,
                mlm_head,
                sop_head,
                backbone: embeddings + encoder + pooler,
                total: embeddings + encoder + pooler + mlm_head + sop_head,
            };
        }
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
}

impl AlbertConfig {
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
    pub pooler: u64,
    /// MLM head: H→E dense, LayerNorm, output bias (decoder weights tied to the embeddings).
    pub mlm_head: u64,
    pub sop_head: u64,
    /// Embeddings + encoder + pooler: what `AlbertModel` holds.
    pub backbone: u64,
    /// Everything `AlbertForPreTraining` holds.
    pub total: u64,
}

/// ALBERT's `num_hidden_groups`: layer `i` uses group `⌊i·groups/layers⌋`, so 1 group is full
/// sharing and `groups = layers` none. albert_zh's `*_google_fast` configs have more groups
/// than layers (12 for 4): every layer still gets its own group and the rest go unused, which
/// is `none` for a model trained from scratch (`more_groups_ok`); a checkpoint with such groups
/// would store its layers at other indexes, so reading one is refused.
fn share_from_groups(
    obj: &Map<String, Value>,
    layers: usize,
    more_groups_ok: bool,
) -> Result<ShareType, ConfigError> {
    let groups = opt_usize(obj, "num_hidden_groups")?.unwrap_or(1);
    let inner = opt_usize(obj, "inner_group_num")?.unwrap_or(1);
    if inner != 1 {
        return Err(ConfigError::new(format!(
            "inner_group_num = {inner} is not supported (only 1, as in every published ALBERT)"
        )));
    }
    if groups == 1 {
        Ok(ShareType::All)
    } else if groups == layers || (more_groups_ok && groups > layers) {
        Ok(ShareType::None)
    } else {
        Err(ConfigError::new(format!(
            "num_hidden_groups = {groups} with {layers} layers is not supported: use 1 (all \
             layers share parameters) or {layers} (none do), or set share_type"
        )))
    }
}

const ALBERT_ZH_KEYS: &[&str] = &[
    "vocab_size",
    "embedding_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "hidden_act",
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "max_position_embeddings",
    "type_vocab_size",
    "initializer_range",
    "layer_norm_eps",
    "num_hidden_groups",
    "inner_group_num",
    "share_type",
    "ln_type",
    "layout",
    // BERT-era and google-research/albert fields with no effect on ALBERT (checked or ignored).
    "directionality",
    "pooler_fc_size",
    "pooler_num_attention_heads",
    "pooler_num_fc_layers",
    "pooler_size_per_head",
    "pooler_type",
    "net_structure_type",
    "gap_size",
    "num_memory_blocks",
    "down_scale_factor",
];

const HF_KEYS: &[&str] = &[
    "vocab_size",
    "embedding_size",
    "hidden_size",
    "num_hidden_layers",
    "num_hidden_groups",
    "num_attention_heads",
    "intermediate_size",
    "inner_group_num",
    "hidden_act",
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "max_position_embeddings",
    "type_vocab_size",
    "initializer_range",
    "layer_norm_eps",
    "classifier_dropout_prob",
    "position_embedding_type",
    "share_type",
    "ln_type",
    "layout",
    "pipeline_note",
    // Where `pipeline model import` read the model from (a TF checkpoint).
    "pipeline_source",
    // transformers' PretrainedConfig fields that say nothing about the architecture.
    "architectures",
    "model_type",
    "transformers_version",
    "torch_dtype",
    "dtype",
    "pad_token_id",
    "bos_token_id",
    "eos_token_id",
    "id2label",
    "label2id",
    "num_labels",
    "problem_type",
    "output_past",
    "finetuning_task",
    "tokenizer_class",
    "use_cache",
    "_name_or_path",
    "_attn_implementation_autoset",
    "return_dict",
    "output_hidden_states",
    "output_attentions",
    "torchscript",
    "tie_word_embeddings",
    "is_decoder",
    "add_cross_attention",
    "chunk_size_feed_forward",
    "task_specific_params",
    "prefix",
    "gradient_checkpointing",
    "layer_norm_type",
    "down_scale_factor",
    "gap_size",
    "net_structure_type",
    "num_memory_blocks",
];

const OVERRIDE_KEYS: &[&str] = &[
    "vocab_size",
    "embedding_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "max_position_embeddings",
    "type_vocab_size",
    "layer_norm_eps",
    "initializer_range",
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "share_type",
    "ln_type",
    "hidden_act",
    "layout",
];

/// Our own `layout` field (absent: Google's, which is what both file formats describe).
fn layout_of(obj: &Map<String, Value>) -> Result<Layout, ConfigError> {
    match obj.get("layout") {
        None | Some(Value::Null) => Ok(Layout::Google),
        Some(Value::String(s)) => Layout::parse(s),
        Some(v) => Err(ConfigError::new(format!(
            "layout must be a string, not {v}"
        ))),
    }
}

fn check_keys(obj: &Map<String, Value>, known: &[&str], what: &str) -> Result<(), ConfigError> {
    for key in obj.keys() {
        if !known.contains(&key.as_str()) {
            return Err(ConfigError::new(format!(
                "unknown field {key:?} in an {what} config{}",
                suggestion(key, known)
            )));
        }
    }
    Ok(())
}

/// ", did you mean X?" for the closest known name, if it is close.
pub(crate) fn suggestion(word: &str, known: &[&str]) -> String {
    known
        .iter()
        .map(|k| (strsim::jaro_winkler(word, k), k))
        .filter(|(score, _)| *score > 0.85)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| format!(" (did you mean {k:?}?)"))
        .unwrap_or_default()
}

fn unknown_act(name: &str) -> ConfigError {
    ConfigError::new(format!(
        "unsupported hidden_act {name:?}: expected gelu, gelu_new or relu"
    ))
}

fn req_usize(obj: &Map<String, Value>, key: &str) -> Result<usize, ConfigError> {
    opt_usize(obj, key)?.ok_or_else(|| ConfigError::new(format!("missing field {key:?}")))
}

fn opt_usize(obj: &Map<String, Value>, key: &str) -> Result<Option<usize>, ConfigError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_u64().map(|n| Some(n as usize)).ok_or_else(|| {
            ConfigError::new(format!("{key} must be a non-negative integer, not {v}"))
        }),
    }
}

fn opt_f64(obj: &Map<String, Value>, key: &str) -> Result<Option<f64>, ConfigError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_f64()
            .map(Some)
            .ok_or_else(|| ConfigError::new(format!("{key} must be a number, not {v}"))),
    }
}

fn req_str<'a>(obj: &'a Map<String, Value>, key: &str) -> Result<&'a str, ConfigError> {
    match obj.get(key) {
        Some(Value::String(s)) => Ok(s),
        Some(v) => Err(ConfigError::new(format!("{key} must be a string, not {v}"))),
        None => Err(ConfigError::new(format!("missing field {key:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared_configs() -> Option<std::path::PathBuf> {
        let root = std::env::var_os("PIPELINE_DATA_ROOT")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| {
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/datasets")
            });
        let dir = root.join("albert_zh_configs");
        dir.is_dir().then_some(dir)
    }

    #[test]
    fn named_configs_match_the_albert_zh_files() {
        let Some(dir) = shared_configs() else {
            eprintln!("skipped: the shared albert_zh_configs are not available");
            return;
        };
        for name in NAMED_CONFIGS {
            let file = if *name == "small" {
                dir.join("albert_config_small_google.json")
            } else {
                dir.join(format!("albert_config_{name}.json"))
            };
            let read = AlbertConfig::from_file(&file).unwrap();
            assert_eq!(read, AlbertConfig::named(name).unwrap(), "{name}");
        }
    }

    #[test]
    fn every_shared_config_parses() {
        let Some(dir) = shared_configs() else {
            eprintln!("skipped: the shared albert_zh_configs are not available");
            return;
        };
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "json") {
                let c = AlbertConfig::from_file(&path).unwrap_or_else(|e| panic!("{e}"));
                let name = path.file_name().unwrap().to_string_lossy().to_string();
                if name.contains("google_fast") {
                    assert_eq!(c.share_type, ShareType::None, "{name}: 12 groups");
                }
                if name == "bert_config.json" {
                    assert_eq!(c.embedding_size, c.hidden_size);
                    assert_eq!(c.share_type, ShareType::None);
                }
            }
        }
    }

    #[test]
    fn hf_config_round_trips() {
        for share in [ShareType::All, ShareType::None] {
            let mut c = AlbertConfig::named("tiny").unwrap();
            c.share_type = share;
            c.hidden_act = Activation::Gelu;
            let json = c.to_hf_json("AlbertForPreTraining");
            assert!(json.get("pipeline_note").is_none());
            assert_eq!(AlbertConfig::from_json(&json).unwrap(), c);
        }
        let mut c = AlbertConfig::named("tiny").unwrap();
        c.share_type = ShareType::Ffn;
        c.ln_type = LnType::Preln;
        let json = c.to_hf_json("AlbertForPreTraining");
        let note = json["pipeline_note"].as_str().unwrap();
        assert!(
            note.contains("preln") && note.contains("share_type ffn"),
            "{note}"
        );
        assert_eq!(AlbertConfig::from_json(&json).unwrap(), c);
    }

    #[test]
    fn gelu_means_different_things_in_the_two_formats() {
        let zh = json!({"vocab_size": 10, "embedding_size": 4, "hidden_size": 8,
            "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 16,
            "hidden_act": "gelu", "max_position_embeddings": 16});
        assert_eq!(
            AlbertConfig::from_json(&zh).unwrap().hidden_act,
            Activation::GeluNew
        );
        let mut hf = zh.clone();
        hf["model_type"] = json!("albert");
        assert_eq!(
            AlbertConfig::from_json(&hf).unwrap().hidden_act,
            Activation::Gelu
        );
    }

    #[test]
    fn bad_configs_are_clear_errors() {
        let base = json!({"vocab_size": 10, "embedding_size": 4, "hidden_size": 8,
            "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 16,
            "hidden_act": "gelu", "max_position_embeddings": 16});
        let err = |patch: Value| {
            let mut v = base.clone();
            for (k, x) in patch.as_object().unwrap() {
                v[k] = x.clone();
            }
            AlbertConfig::from_json(&v).unwrap_err().message
        };
        assert!(err(json!({"num_attention_heads": 3})).contains("not divisible"));
        assert!(err(json!({"num_hidden_group": 1})).contains("did you mean \"num_hidden_groups\""));
        assert!(err(json!({"hidden_act": "swish"})).contains("unsupported hidden_act"));
        assert!(err(json!({"share_type": "some"})).contains("unknown share_type"));
        assert!(err(json!({"hidden_size": "big"})).contains("non-negative integer"));
        assert!(
            err(json!({"num_hidden_groups": 3, "num_hidden_layers": 4})).contains("not supported")
        );
        assert!(err(json!({"inner_group_num": 2})).contains("inner_group_num"));
        let mut hf = base.clone();
        hf["model_type"] = json!("bert");
        assert!(
            AlbertConfig::from_json(&hf)
                .unwrap_err()
                .message
                .contains("not \"albert\"")
        );
        assert!(
            AlbertConfig::named("tinny")
                .unwrap_err()
                .message
                .contains("did you mean \"tiny\"")
        );
        let over: Map<String, Value> = serde_json::from_value(json!({"hiden_size": 3})).unwrap();
        let e = AlbertConfig::named("tiny")
            .unwrap()
            .with_overrides(&over)
            .unwrap_err();
        assert!(e.message.contains("did you mean \"hidden_size\""), "{e}");
    }

    #[test]
    fn parameter_counts_follow_the_factorisation_and_sharing() {
        // albert-base-v2 in transformers: 11,683,584 parameters in AlbertModel (V = 30,000).
        let mut c = AlbertConfig::named("base").unwrap();
        c.vocab_size = 30000;
        assert_eq!(c.parameter_count().backbone, 11_683_584);
        let t = AlbertConfig::named("tiny").unwrap().parameter_count();
        assert_eq!(t.total, t.backbone + t.mlm_head + t.sop_head);
        // Unsharing multiplies the blocks by the number of layers.
        let mut none = AlbertConfig::named("tiny").unwrap();
        none.share_type = ShareType::None;
        let n = none.parameter_count();
        let (h, i) = (312u64, 1248u64);
        let layer = 4 * (h * h + h) + 2 * h + h * i + i + i * h + h + 2 * h;
        assert_eq!(n.encoder - t.encoder, 3 * layer);
    }
}
