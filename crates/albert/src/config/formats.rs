//! The two config file formats as serde structs: brightmart/albert_zh's and
//! google-research/albert's JSON (BERT's fields plus ALBERT's), and transformers'
//! `AlbertConfig` (`config.json`). A struct's fields and its format's list of fields without
//! effect are every key the format may hold: any other key is an error with the closest known
//! one, because a silently ignored `num_hidden_group` (sic) would train another model.
//!
//! Both formats also carry our own `share_type` and `ln_type` (what the groups cannot say:
//! attention-only or ffn-only sharing, pre-LN) and `layout` (Google's when absent, which is what
//! both formats describe).

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::{Activation, AlbertConfig, ConfigError, Layout, LnType, ShareType, suggestion};
use pipeline_params::{Count, Number, Text, from_object, struct_fields};

/// The fields both formats have (BERT's, ALBERT's groups, and ours).
#[derive(Debug, Deserialize)]
struct Common {
    vocab_size: Option<Count>,
    embedding_size: Option<Count>,
    hidden_size: Option<Count>,
    num_hidden_layers: Option<Count>,
    num_attention_heads: Option<Count>,
    intermediate_size: Option<Count>,
    hidden_act: Option<Text>,
    hidden_dropout_prob: Option<Number>,
    attention_probs_dropout_prob: Option<Number>,
    max_position_embeddings: Option<Count>,
    type_vocab_size: Option<Count>,
    initializer_range: Option<Number>,
    layer_norm_eps: Option<Number>,
    num_hidden_groups: Option<Count>,
    inner_group_num: Option<Count>,
    share_type: Option<Text>,
    ln_type: Option<Text>,
    layout: Option<Text>,
}

/// An albert_zh / google-research/albert config file. Without `embedding_size` it is a BERT
/// config (E = H, no sharing). (Its parts are read one by one rather than `#[serde(flatten)]`ed:
/// through a flatten, serde_path_to_error loses the key a bad value is at.)
#[derive(Debug)]
struct AlbertZhFile {
    common: Common,
    variants: Variants,
}

/// google-research/albert's variants of the architecture: only the plain one is supported.
#[derive(Debug, Deserialize)]
struct Variants {
    net_structure_type: Option<Value>,
    gap_size: Option<Value>,
    num_memory_blocks: Option<Value>,
    down_scale_factor: Option<Value>,
}

/// The sizes an albert_zh file may leave out (the rest are required).
const ALBERT_ZH_DEFAULTS: &[(&str, usize)] = &[("type_vocab_size", 2)];

/// BERT-era fields with no effect on ALBERT.
const ALBERT_ZH_IGNORED: &[&str] = &[
    "directionality",
    "pooler_fc_size",
    "pooler_num_attention_heads",
    "pooler_num_fc_layers",
    "pooler_size_per_head",
    "pooler_type",
];

/// transformers' `AlbertConfig`; absent fields take its defaults.
#[derive(Debug)]
struct HfFile {
    common: Common,
    position: Position,
}

/// transformers' `position_embedding_type`: only `absolute` is supported.
#[derive(Debug, Deserialize)]
struct Position {
    position_embedding_type: Option<Text>,
}

/// transformers' `AlbertConfig` defaults (albert-xxlarge's sizes).
const HF_DEFAULTS: &[(&str, usize)] = &[
    ("vocab_size", 30000),
    ("embedding_size", 128),
    ("hidden_size", 4096),
    ("num_hidden_layers", 12),
    ("num_attention_heads", 64),
    ("intermediate_size", 16384),
    ("max_position_embeddings", 512),
    ("type_vocab_size", 2),
];

/// transformers' fields that say nothing about the architecture, and our notes.
const HF_IGNORED: &[&str] = &[
    "classifier_dropout_prob",
    "pipeline_note",
    // Where `pipeline model import` read the model from (a TF checkpoint).
    "pipeline_source",
    // transformers' PretrainedConfig fields (`model_type` is checked before).
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

/// Refuses the keys of `obj` that no part of its format knows, nor `ignored` lists (`what`
/// names the format in the message).
fn check_keys(
    obj: &Map<String, Value>,
    parts: &[&[&'static str]],
    ignored: &[&'static str],
    what: &str,
) -> Result<(), ConfigError> {
    let known: Vec<&str> = parts
        .iter()
        .copied()
        .flatten()
        .chain(ignored)
        .copied()
        .collect();
    for key in obj.keys() {
        if !known.contains(&key.as_str()) {
            return Err(ConfigError::new(format!(
                "unknown field {key:?} in an {what} config{}",
                suggestion(key, &known)
            )));
        }
    }
    Ok(())
}

/// The part `T` of a format: the keys of `obj` that are `T`'s fields, read as `T`.
fn part<T: DeserializeOwned>(obj: &Map<String, Value>) -> Result<T, ConfigError> {
    let fields = struct_fields::<T>();
    let mine: Map<String, Value> = obj
        .iter()
        .filter(|(k, _)| fields.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    from_object(&mine).map_err(ConfigError::new)
}

impl AlbertZhFile {
    fn read(obj: &Map<String, Value>) -> Result<AlbertZhFile, ConfigError> {
        let parts = [struct_fields::<Common>(), struct_fields::<Variants>()];
        check_keys(obj, &parts, ALBERT_ZH_IGNORED, "albert_zh")?;
        Ok(AlbertZhFile {
            common: part(obj)?,
            variants: part(obj)?,
        })
    }
}

impl HfFile {
    fn read(obj: &Map<String, Value>) -> Result<HfFile, ConfigError> {
        let parts = [struct_fields::<Common>(), struct_fields::<Position>()];
        check_keys(obj, &parts, HF_IGNORED, "Hugging Face AlbertConfig")?;
        Ok(HfFile {
            common: part(obj)?,
            position: part(obj)?,
        })
    }
}

impl AlbertConfig {
    /// A config from an albert_zh / google-research/albert file (see `AlbertZhFile`).
    pub(super) fn from_albert_zh(obj: &Map<String, Value>) -> Result<AlbertConfig, ConfigError> {
        let AlbertZhFile {
            mut common,
            variants,
        } = AlbertZhFile::read(obj)?;
        variants.check()?;
        let hidden = common.count(common.hidden_size, "hidden_size", ALBERT_ZH_DEFAULTS)?;
        let bert_style = common.embedding_size.is_none();
        if bert_style {
            common.embedding_size = Some(Count(hidden as u64));
        }
        let act = match common.hidden_act.as_ref().map(|t| t.0.as_str()) {
            // The TF code of google-research/albert and albert_zh defines `gelu` as the tanh
            // approximation.
            Some("gelu" | "gelu_new") => Activation::GeluNew,
            Some("gelu_exact") => Activation::Gelu,
            Some("relu") => Activation::Relu,
            Some(other) => return Err(unknown_act(other)),
            None => return Err(missing("hidden_act")),
        };
        let layers = common.count(
            common.num_hidden_layers,
            "num_hidden_layers",
            ALBERT_ZH_DEFAULTS,
        )?;
        let share = match &common.share_type {
            Some(s) => ShareType::parse(&s.0)?,
            None if bert_style => ShareType::None,
            None => common.share_from_groups(layers, true)?,
        };
        common.into_config(ALBERT_ZH_DEFAULTS, act, share)
    }

    /// A config from transformers' `config.json` (see `HfFile`).
    pub(super) fn from_hf(obj: &Map<String, Value>) -> Result<AlbertConfig, ConfigError> {
        if let Some(Value::String(t)) = obj.get("model_type")
            && t != "albert"
        {
            return Err(ConfigError::new(format!(
                "model_type is {t:?}, not \"albert\": only ALBERT checkpoints can be loaded"
            )));
        }
        let HfFile { common, position } = HfFile::read(obj)?;
        let act = match common
            .hidden_act
            .as_ref()
            .map_or("gelu_new", |t| t.0.as_str())
        {
            "gelu" => Activation::Gelu,
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Activation::GeluNew,
            "relu" => Activation::Relu,
            other => return Err(unknown_act(other)),
        };
        if let Some(Text(p)) = &position.position_embedding_type
            && p != "absolute"
        {
            return Err(ConfigError::new(format!(
                "position_embedding_type {p:?} is not supported (only \"absolute\")"
            )));
        }
        let layers = common.count(common.num_hidden_layers, "num_hidden_layers", HF_DEFAULTS)?;
        let share = match &common.share_type {
            Some(s) => ShareType::parse(&s.0)?,
            None => common.share_from_groups(layers, false)?,
        };
        common.into_config(HF_DEFAULTS, act, share)
    }
}

impl Common {
    /// A size field: its value, else its default, else "missing field".
    fn count(
        &self,
        field: Option<Count>,
        key: &str,
        defaults: &[(&str, usize)],
    ) -> Result<usize, ConfigError> {
        field
            .map(Count::usize)
            .or_else(|| defaults.iter().find(|(k, _)| *k == key).map(|(_, v)| *v))
            .ok_or_else(|| missing(key))
    }

    /// The config, sizes left out taking `defaults`, with the activation and sharing each
    /// format reads its own way; checked.
    fn into_config(
        self,
        defaults: &[(&str, usize)],
        hidden_act: Activation,
        share_type: ShareType,
    ) -> Result<AlbertConfig, ConfigError> {
        let count = |field, key| self.count(field, key, defaults);
        let number = |field: Option<Number>, default: f64| field.map_or(default, |n| n.0);
        let config = AlbertConfig {
            vocab_size: count(self.vocab_size, "vocab_size")?,
            embedding_size: count(self.embedding_size, "embedding_size")?,
            hidden_size: count(self.hidden_size, "hidden_size")?,
            num_hidden_layers: count(self.num_hidden_layers, "num_hidden_layers")?,
            num_attention_heads: count(self.num_attention_heads, "num_attention_heads")?,
            intermediate_size: count(self.intermediate_size, "intermediate_size")?,
            hidden_act,
            max_position_embeddings: count(
                self.max_position_embeddings,
                "max_position_embeddings",
            )?,
            type_vocab_size: count(self.type_vocab_size, "type_vocab_size")?,
            layer_norm_eps: number(self.layer_norm_eps, 1e-12),
            initializer_range: number(self.initializer_range, 0.02),
            hidden_dropout_prob: number(self.hidden_dropout_prob, 0.0),
            attention_probs_dropout_prob: number(self.attention_probs_dropout_prob, 0.0),
            share_type,
            ln_type: self
                .ln_type
                .as_ref()
                .map_or(Ok(LnType::Postln), |t| LnType::parse(&t.0))?,
            layout: self
                .layout
                .as_ref()
                .map_or(Ok(Layout::Google), |t| Layout::parse(&t.0))?,
        };
        config.validate()?;
        Ok(config)
    }

    /// ALBERT's `num_hidden_groups`: layer `i` uses group `⌊i·groups/layers⌋`, so 1 group is
    /// full sharing and `groups = layers` none. albert_zh's `*_google_fast` configs have more
    /// groups than layers (12 for 4): every layer still gets its own group and the rest go
    /// unused, which is `none` for a model trained from scratch (`more_groups_ok`); a checkpoint
    /// with such groups would store its layers at other indexes, so reading one is refused.
    fn share_from_groups(
        &self,
        layers: usize,
        more_groups_ok: bool,
    ) -> Result<ShareType, ConfigError> {
        let groups = self.num_hidden_groups.map_or(1, Count::usize);
        let inner = self.inner_group_num.map_or(1, Count::usize);
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
}

impl Variants {
    /// Only the plain architecture: the variants at their plain values, or absent.
    fn check(&self) -> Result<(), ConfigError> {
        for (key, value, expected) in [
            ("net_structure_type", &self.net_structure_type, 0),
            ("gap_size", &self.gap_size, 0),
            ("num_memory_blocks", &self.num_memory_blocks, 0),
            ("down_scale_factor", &self.down_scale_factor, 1),
        ] {
            if let Some(v) = value
                && v.as_u64() != Some(expected)
            {
                return Err(ConfigError::new(format!(
                    "{key} = {v} is not supported (only the plain ALBERT architecture, {key} = {expected})"
                )));
            }
        }
        Ok(())
    }
}

fn missing(key: &str) -> ConfigError {
    ConfigError::new(format!("missing field {key:?}"))
}

pub(super) fn unknown_act(name: &str) -> ConfigError {
    ConfigError::new(format!(
        "unsupported hidden_act {name:?}: expected gelu, gelu_new or relu"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
    fn messages_keep_their_wording() {
        let base = json!({"vocab_size": 10, "embedding_size": 4, "hidden_size": 8,
            "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 16,
            "hidden_act": "gelu", "max_position_embeddings": 16});
        let err = |key: &str, v: Value| {
            let mut c = base.clone();
            if v.is_null() {
                c.as_object_mut().unwrap().remove(key);
            } else {
                c[key] = v;
            }
            AlbertConfig::from_json(&c).unwrap_err().message
        };
        assert_eq!(
            err("hidden_size", json!("big")),
            "hidden_size must be a non-negative integer, not \"big\""
        );
        assert_eq!(
            err("layer_norm_eps", json!("x")),
            "layer_norm_eps must be a number, not \"x\""
        );
        assert_eq!(
            err("vocab_size", Value::Null),
            "missing field \"vocab_size\""
        );
        assert_eq!(
            err("gap_size", json!(2)),
            "gap_size = 2 is not supported (only the plain ALBERT architecture, gap_size = 0)"
        );
        // Fields without effect are accepted in their format only.
        let mut zh = base.clone();
        zh["pooler_type"] = json!("first_token_transform");
        AlbertConfig::from_json(&zh).unwrap();
        zh["torch_dtype"] = json!("float32");
        assert!(
            AlbertConfig::from_json(&zh)
                .unwrap_err()
                .message
                .starts_with("unknown field \"torch_dtype\" in an albert_zh config")
        );
    }
}
