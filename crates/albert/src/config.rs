//! The model's hyper-parameters, read from the three places they come from: brightmart/albert_zh
//! and google-research/albert JSON files, Hugging Face `config.json` (`AlbertConfig`), and the
//! pretrain stage's params. Unknown or inconsistent fields are errors, because a silently
//! ignored `num_hidden_group` (sic) would train a different model than the one asked for.
//!
//! Split by job: `kinds` (the discrete choices: activation, sharing, LayerNorm placement,
//! layout), `formats` (the two file formats), `overrides` (the params' per-field overrides),
//! `size` (what a config implies: transformers compatibility, `config.json`, parameter counts,
//! FLOPs). The typed JSON fields they are read with are `pipeline-params`'.

mod formats;
mod kinds;
mod overrides;
mod size;

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use kinds::{Activation, Layout, LnType, ShareType};
pub use overrides::override_keys;
pub use size::{HfIncompatible, ParameterCount};

/// An invalid or unsupported model configuration, with what to do about it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct ConfigError {
    /// What is wrong, and what to do about it.
    pub message: String,
}

impl ConfigError {
    /// An error that says `message`.
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
    /// V.
    pub vocab_size: usize,
    /// E: the factorised embedding width (V×E + E×H instead of V×H).
    pub embedding_size: usize,
    /// H.
    pub hidden_size: usize,
    /// Encoder layers (applications of the shared blocks).
    pub num_hidden_layers: usize,
    /// Attention heads; H must be a multiple.
    pub num_attention_heads: usize,
    /// The feed-forward width.
    pub intermediate_size: usize,
    /// The feed-forward and MLM-head activation.
    pub hidden_act: Activation,
    /// Rows of the position embeddings (the longest input).
    pub max_position_embeddings: usize,
    /// Rows of the token-type embeddings.
    pub type_vocab_size: usize,
    /// LayerNorm's epsilon.
    pub layer_norm_eps: f64,
    /// Standard deviation of the initial weights.
    pub initializer_range: f64,
    /// Dropout on embeddings and sub-layer outputs.
    pub hidden_dropout_prob: f64,
    /// Dropout on attention probabilities.
    pub attention_probs_dropout_prob: f64,
    /// Cross-layer parameter sharing.
    pub share_type: ShareType,
    /// Where LayerNorm sits.
    pub ln_type: LnType,
    /// Google's (= transformers') embeddings and MLM head, or albert_zh's.
    #[serde(default)]
    pub layout: Layout,
}

/// The sizes of albert_zh's published configs, for `model: tiny` and friends in pipeline.yaml
/// (the same numbers as `../shared/datasets/albert_zh_configs/albert_config_*.json`).
pub const NAMED_CONFIGS: &[&str] = &["tiny", "small", "base", "large", "xlarge", "xxlarge"];

/// The largest value each size may have, with why. The weights check (SECURITY.md: the file
/// must hold as many values as the config implies) does not bound them all: with
/// `share_type: all`, 1,000,000 layers share one block, so a tiny weights file passes and a
/// forward pass applies that block 10^6 times (issue 31: `predict` ran for ever). The bounds are
/// generous, 8 to 100 times the largest published model's, and finite: at most a second or so
/// per forward pass of a small model, and no product in [`AlbertConfig::parameter_count`] near
/// `u64`'s range (the largest, `num_hidden_layers · hidden_size · intermediate_size`, is under
/// 2^45).
pub const SIZE_LIMITS: &[(&str, usize, &str)] = &[
    (
        "vocab_size",
        1 << 22,
        "the largest published vocabularies have about 2.6·10^5 tokens",
    ),
    (
        "embedding_size",
        1 << 16,
        "ALBERT's E is 128; the widest published models are under 2·10^4",
    ),
    (
        "hidden_size",
        1 << 16,
        "ALBERT xxlarge's H is 4,096; the widest published models are under 2·10^4",
    ),
    (
        "num_hidden_layers",
        1 << 10,
        "ALBERT xxlarge applies its shared layer 12 times; the deepest published models have \
         about 100 layers",
    ),
    (
        "num_attention_heads",
        1 << 10,
        "ALBERT xxlarge has 64 heads; the largest published models have about 128",
    ),
    (
        "intermediate_size",
        1 << 18,
        "ALBERT xxlarge's feed-forward width is 16,384",
    ),
    (
        "max_position_embeddings",
        1 << 17,
        "ALBERT has 512 positions; the longest published contexts are about 1.3·10^5",
    ),
    ("type_vocab_size", 1 << 10, "ALBERT has 2 token types"),
];

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
    /// The file is read with the shared bounded reader (regular files only, at most
    /// [`crate::hf::MAX_CONFIG_BYTES`]), like a model directory's `config.json`.
    pub fn from_file(path: &Path) -> Result<AlbertConfig, ConfigError> {
        let text =
            pipeline_bounded::read_to_string(path, crate::hf::MAX_CONFIG_BYTES, "a model config")
                .map_err(|e| ConfigError::new(format!("cannot read the model config: {e}")))?;
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

    /// Checks that the sizes fit together.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (name, v) in self.sizes() {
            if v == 0 {
                return Err(ConfigError::new(format!("{name} must be at least 1")));
            }
        }
        self.check_sizes()?;
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

    /// Each size at most its [`SIZE_LIMITS`] bound, so that a config (a `config.json` from
    /// anywhere) can neither make a model run without end nor overflow the parameter count.
    fn check_sizes(&self) -> Result<(), ConfigError> {
        for (name, v) in self.sizes() {
            let Some(&(_, limit, why)) = SIZE_LIMITS.iter().find(|(n, ..)| *n == name) else {
                continue;
            };
            if v > limit {
                return Err(ConfigError::new(format!(
                    "{name} = {v} is more than {limit}, the most a model may have ({why})"
                )));
            }
        }
        Ok(())
    }

    /// The sizes, by field name.
    fn sizes(&self) -> [(&'static str, usize); 8] {
        [
            ("vocab_size", self.vocab_size),
            ("embedding_size", self.embedding_size),
            ("hidden_size", self.hidden_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("intermediate_size", self.intermediate_size),
            ("max_position_embeddings", self.max_position_embeddings),
            ("type_vocab_size", self.type_vocab_size),
        ]
    }

    /// The width of one attention head.
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }
}

/// " (did you mean "x"?)" for the closest known name, if it is close (the engine's measure of
/// close, so that every "did you mean" in the pipeline suggests the same names).
pub(crate) fn suggestion(word: &str, known: &[&str]) -> String {
    pipeline_engine::error::closest(word, known.iter().copied())
        .map(|k| format!(" (did you mean {k:?}?)"))
        .unwrap_or_default()
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
    fn absurd_sizes_are_refused_naming_the_field_and_the_bound() {
        let mut c = AlbertConfig::named("tiny").unwrap();
        c.num_hidden_layers = 1_000_000;
        let e = c.validate().unwrap_err().message;
        assert!(
            e.contains("num_hidden_layers = 1000000 is more than 1024"),
            "{e}"
        );
        for (name, _, _) in SIZE_LIMITS {
            let mut json = AlbertConfig::named("tiny")
                .unwrap()
                .to_hf_json("AlbertForPreTraining");
            json[*name] = serde_json::json!(1u64 << 40);
            let e = AlbertConfig::from_json(&json).unwrap_err().message;
            assert!(e.contains(&format!("{name} = {}", 1u64 << 40)), "{e}");
        }
        // The largest published configs stay within the bounds.
        assert!(AlbertConfig::named("xxlarge").unwrap().validate().is_ok());
        // And the bounds keep the parameter count far from overflowing.
        let mut big = AlbertConfig::named("tiny").unwrap();
        for (name, limit, _) in SIZE_LIMITS {
            match *name {
                "vocab_size" => big.vocab_size = *limit,
                "embedding_size" => big.embedding_size = *limit,
                "hidden_size" => big.hidden_size = *limit,
                "num_hidden_layers" => big.num_hidden_layers = *limit,
                "intermediate_size" => big.intermediate_size = *limit,
                "max_position_embeddings" => big.max_position_embeddings = *limit,
                _ => {}
            }
        }
        big.share_type = ShareType::None;
        assert!(big.parameter_count().total < 1 << 50);
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
