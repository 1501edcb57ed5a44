//! pipeline.yaml's per-field model overrides (`share_type: ffn`, `hidden_size: 128`, …) on top
//! of a named size or a config file. [`override_keys`] is the one list of the fields a stage may
//! override; the `pretrain` stage takes exactly these as params.

use serde::Deserialize;
use serde_json::{Map, Value};

use super::formats::unknown_act;
use super::{Activation, AlbertConfig, ConfigError, Layout, LnType, ShareType, suggestion};
use pipeline_params::{Count, Number, Text, from_object, struct_fields};

/// The fields an override may set, each absent or of the type its config field has.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct ModelOverrides {
    vocab_size: Given<Count>,
    embedding_size: Given<Count>,
    hidden_size: Given<Count>,
    num_hidden_layers: Given<Count>,
    num_attention_heads: Given<Count>,
    intermediate_size: Given<Count>,
    max_position_embeddings: Given<Count>,
    type_vocab_size: Given<Count>,
    layer_norm_eps: Given<Number>,
    initializer_range: Given<Number>,
    hidden_dropout_prob: Given<Number>,
    attention_probs_dropout_prob: Given<Number>,
    share_type: Given<Text>,
    ln_type: Given<Text>,
    hidden_act: Given<Text>,
    layout: Given<Text>,
}

/// A field that is absent, or present with a value of type `T`: unlike `Option`, a null is a
/// value of the wrong type (an override of `hidden_size: ~` is a mistake, not a default).
#[derive(Debug)]
struct Given<T>(Option<T>);

impl<T> Default for Given<T> {
    fn default() -> Self {
        Given(None)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Given<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        T::deserialize(d).map(|v| Given(Some(v)))
    }
}

/// The model fields a param may override, in the order of [`AlbertConfig`]'s docs.
pub fn override_keys() -> &'static [&'static str] {
    struct_fields::<ModelOverrides>()
}

impl AlbertConfig {
    /// Applies pipeline.yaml overrides (`share_type: ffn`, `hidden_size: 128`, …) on top of a
    /// base config; unknown keys are errors with the closest valid name.
    pub fn with_overrides(mut self, overrides: &Map<String, Value>) -> Result<Self, ConfigError> {
        for key in overrides.keys() {
            if !override_keys().contains(&key.as_str()) {
                return Err(ConfigError::new(format!(
                    "unknown model field {key:?}{}",
                    suggestion(key, override_keys())
                )));
            }
        }
        let o: ModelOverrides = from_object(overrides).map_err(ConfigError::new)?;
        self.apply(o)?;
        self.validate()?;
        Ok(self)
    }

    fn apply(&mut self, o: ModelOverrides) -> Result<(), ConfigError> {
        let counts = [
            (o.vocab_size, &mut self.vocab_size),
            (o.embedding_size, &mut self.embedding_size),
            (o.hidden_size, &mut self.hidden_size),
            (o.num_hidden_layers, &mut self.num_hidden_layers),
            (o.num_attention_heads, &mut self.num_attention_heads),
            (o.intermediate_size, &mut self.intermediate_size),
            (o.max_position_embeddings, &mut self.max_position_embeddings),
            (o.type_vocab_size, &mut self.type_vocab_size),
        ];
        for (value, field) in counts {
            if let Given(Some(v)) = value {
                *field = v.usize();
            }
        }
        let numbers = [
            (o.layer_norm_eps, &mut self.layer_norm_eps),
            (o.initializer_range, &mut self.initializer_range),
            (o.hidden_dropout_prob, &mut self.hidden_dropout_prob),
            (
                o.attention_probs_dropout_prob,
                &mut self.attention_probs_dropout_prob,
            ),
        ];
        for (value, field) in numbers {
            if let Given(Some(v)) = value {
                *field = v.0;
            }
        }
        if let Given(Some(Text(s))) = o.share_type {
            self.share_type = ShareType::parse(&s)?;
        }
        if let Given(Some(Text(s))) = o.ln_type {
            self.ln_type = LnType::parse(&s)?;
        }
        if let Given(Some(Text(s))) = o.layout {
            self.layout = Layout::parse(&s)?;
        }
        if let Given(Some(Text(s))) = o.hidden_act {
            self.hidden_act = match s.as_str() {
                "gelu" => Activation::Gelu,
                "gelu_new" => Activation::GeluNew,
                "relu" => Activation::Relu,
                other => return Err(unknown_act(other)),
            };
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn over(v: Value) -> Result<AlbertConfig, ConfigError> {
        let m: Map<String, Value> = serde_json::from_value(v).unwrap();
        AlbertConfig::named("tiny").unwrap().with_overrides(&m)
    }

    #[test]
    fn overrides_set_their_field_and_check_the_result() {
        let c = over(
            json!({"share_type": "ffn", "hidden_size": 128, "num_attention_heads": 4,
            "hidden_dropout_prob": 0.1, "hidden_act": "relu", "layout": "albert_zh"}),
        )
        .unwrap();
        assert_eq!(c.share_type, ShareType::Ffn);
        assert_eq!((c.hidden_size, c.num_attention_heads), (128, 4));
        assert_eq!(c.hidden_dropout_prob, 0.1);
        assert_eq!(
            (c.hidden_act, c.layout),
            (Activation::Relu, Layout::AlbertZh)
        );
        let msg = |v| over(v).unwrap_err().message;
        assert_eq!(
            msg(json!({"hidden_size": -1})),
            "hidden_size must be a non-negative integer, not -1"
        );
        assert_eq!(
            msg(json!({"hidden_size": null})),
            "hidden_size must be a non-negative integer, not null"
        );
        assert_eq!(
            msg(json!({"ln_type": null})),
            "ln_type must be a string, not null"
        );
        assert_eq!(
            msg(json!({"initializer_range": "x"})),
            "initializer_range must be a number, not \"x\""
        );
        assert!(msg(json!({"hidden_act": "swish"})).contains("unsupported hidden_act"));
        assert!(msg(json!({"hidden_size": 100})).contains("not divisible"));
    }

    #[test]
    fn the_key_list_is_the_structs() {
        assert_eq!(override_keys().len(), 16);
        assert!(override_keys().contains(&"layout"));
    }
}
