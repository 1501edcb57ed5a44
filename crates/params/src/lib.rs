//! Stage params and model config files read with serde, one way for every stage kind:
//!
//! - typed JSON fields ([`Count`], [`Number`], [`Text`], [`Flag`]) whose wrong values become
//!   "`key` must be a non-negative integer, not "big"" ([`from_object`]: the key from
//!   `serde_path_to_error`, the rest from the field's type);
//! - [`struct_fields`]: a struct's field names read from its `Deserialize` impl, so that the list
//!   of keys a struct accepts is never written twice (a stage's `known_params`, a config format's
//!   keys);
//! - [`closest`]: the one measure of "did you mean" for every name the pipeline checks;
//! - [`ParamError`]: what a stage crate's params parser returns (the engine shows it with the
//!   stage's file:line:col; a misspelt key is refused earlier, at its own line, by the engine).

#![warn(missing_docs)]

use std::fmt;

use serde::de::{self, DeserializeOwned, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

/// The closest candidate to `word`, if any is close enough to be a plausible typo: at most
/// 2 edits (or a third of the candidate's length) by Damerau-Levenshtein, transpositions
/// counting one, and never a complete rewrite. Every "did you mean" of the pipeline (the
/// engine's, the model config's, the task readers', the stages' params) uses this one measure,
/// so that the same typo gets the same suggestion everywhere.
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| (strsim::damerau_levenshtein(word, c), c))
        .filter(|(d, c)| *d <= 2.max(c.len() / 3) && *d < c.len().max(word.len()))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// A param the stage cannot use, with what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParamError(pub String);

impl From<String> for ParamError {
    fn from(message: String) -> ParamError {
        ParamError(message)
    }
}

impl From<&str> for ParamError {
    fn from(message: &str) -> ParamError {
        ParamError(message.to_string())
    }
}

/// For the engine's `Stage::validate`, whose errors are strings.
impl From<ParamError> for String {
    fn from(e: ParamError) -> String {
        e.0
    }
}

/// A non-negative integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "Value")]
pub struct Count(pub u64);

/// Any JSON number.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(try_from = "Value")]
pub struct Number(pub f64);

/// A string.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "Value")]
pub struct Text(pub String);

/// `true` or `false`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "Value")]
pub struct Flag(pub bool);

impl TryFrom<Value> for Count {
    type Error = ParamError;
    fn try_from(v: Value) -> Result<Self, ParamError> {
        v.as_u64()
            .map(Count)
            .ok_or_else(|| format!("must be a non-negative integer, not {v}").into())
    }
}

impl TryFrom<Value> for Number {
    type Error = ParamError;
    fn try_from(v: Value) -> Result<Self, ParamError> {
        v.as_f64()
            .map(Number)
            .ok_or_else(|| format!("must be a number, not {v}").into())
    }
}

impl TryFrom<Value> for Text {
    type Error = ParamError;
    fn try_from(v: Value) -> Result<Self, ParamError> {
        match v {
            Value::String(s) => Ok(Text(s)),
            v => Err(format!("must be a string, not {v}").into()),
        }
    }
}

impl TryFrom<Value> for Flag {
    type Error = ParamError;
    fn try_from(v: Value) -> Result<Self, ParamError> {
        v.as_bool()
            .map(Flag)
            .ok_or_else(|| format!("must be true or false, not {v}").into())
    }
}

impl Count {
    /// The count as a `usize` (counts here are sizes and steps, far below `usize::MAX`).
    pub fn usize(self) -> usize {
        self.0 as usize
    }
}

/// `T` from a JSON object; a value of the wrong type is "`key` `T`'s message" (e.g. "hidden_size
/// must be a non-negative integer, not \"big\""). Keys are checked by the caller against
/// [`struct_fields`], so that the unknown-key message can suggest the closest one.
pub fn from_object<T: DeserializeOwned>(obj: &Map<String, Value>) -> Result<T, ParamError> {
    let value = Value::Object(obj.clone());
    serde_path_to_error::deserialize(&value)
        .map_err(|e| ParamError(format!("{} {}", e.path(), e.inner())))
}

/// `T` from the keys of `params` that are `T`'s fields ([`struct_fields`]; the others belong to
/// another parser of the same stage, such as the data protocol's), a `null` value meaning "left
/// out"; errors as [`from_object`]'s.
pub fn from_own_keys<T: DeserializeOwned>(params: &Map<String, Value>) -> Result<T, ParamError> {
    let fields = struct_fields::<T>();
    let own: Map<String, Value> = params
        .iter()
        .filter(|(k, v)| fields.contains(&k.as_str()) && !v.is_null())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    from_object(&own)
}

/// `T` from a stage's params, in the words of the `clean` and `vocab` stages: a value of the
/// wrong type is "param `key`: serde's message`hint(key)`" (e.g. "param `source`: unknown variant
/// `download`, expected `file` or `train` (file or train)"). Keys `T` does not have (matrix
/// coordinates inherited from deps) are ignored: the engine refuses misspelt ones at their line.
pub fn from_params<T: DeserializeOwned>(
    obj: &Map<String, Value>,
    hint: impl Fn(&str) -> &'static str,
) -> Result<T, ParamError> {
    let value = Value::Object(obj.clone());
    serde_path_to_error::deserialize(&value).map_err(|e| {
        let key = e.path().to_string();
        if key.is_empty() || key == "." {
            return ParamError(e.into_inner().to_string());
        }
        ParamError(format!("param `{key}`: {}{}", e.inner(), hint(&key)))
    })
}

/// The field names of a struct that derives `Deserialize`, as serde declares them (after
/// `rename`s). Written here rather than taken from serde-aux's `serde_introspect`, which does the
/// same in the same way, to keep that crate's chrono dependency out of the build.
pub fn struct_fields<T: DeserializeOwned>() -> &'static [&'static str] {
    let mut fields = FieldNames(&[]);
    // The deserializer answers every call with an error after noting the field names.
    let _ = T::deserialize(&mut fields);
    fields.0
}

struct FieldNames(&'static [&'static str]);

#[derive(Debug)]
struct Stop;

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("field names read")
    }
}

impl std::error::Error for Stop {}

impl de::Error for Stop {
    fn custom<M: fmt::Display>(_: M) -> Self {
        Stop
    }
}

impl<'de> Deserializer<'de> for &mut FieldNames {
    type Error = Stop;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
        Err(Stop)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Stop> {
        self.0 = fields;
        Err(Stop)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Example {
        size: Option<Count>,
        #[serde(rename = "rate")]
        _rate: Option<Number>,
        name: Option<Text>,
        on: Option<Flag>,
    }

    #[test]
    fn own_keys_only_and_null_is_left_out() {
        let obj = json!({"size": 3, "name": null, "task": "lcqmc"});
        let e: Example = from_own_keys(obj.as_object().unwrap()).unwrap();
        assert_eq!(e.size, Some(Count(3)));
        assert_eq!(e.name, None);
        let bad = json!({"size": "big", "task": 1});
        let err = from_own_keys::<Example>(bad.as_object().unwrap()).unwrap_err();
        assert_eq!(err.0, "size must be a non-negative integer, not \"big\"");
    }

    #[test]
    fn wrong_types_name_the_key() {
        let obj = |v: Value| v.as_object().unwrap().clone();
        let e = from_object::<Example>(&obj(json!({"size": "big"})))
            .unwrap_err()
            .0;
        assert_eq!(e, "size must be a non-negative integer, not \"big\"");
        let e = from_object::<Example>(&obj(json!({"rate": true})))
            .unwrap_err()
            .0;
        assert_eq!(e, "rate must be a number, not true");
        let e = from_object::<Example>(&obj(json!({"name": 3})))
            .unwrap_err()
            .0;
        assert_eq!(e, "name must be a string, not 3");
        let e = from_object::<Example>(&obj(json!({"on": "yes"})))
            .unwrap_err()
            .0;
        assert_eq!(e, "on must be true or false, not \"yes\"");
        let ok = from_object::<Example>(&obj(json!({"size": 3, "name": null}))).unwrap();
        assert_eq!((ok.size, ok.name, ok.on), (Some(Count(3)), None, None));
    }

    #[test]
    fn params_name_the_key_and_what_it_allows() {
        let obj = json!({"size": "big"});
        let e = from_params::<Example>(obj.as_object().unwrap(), |k| {
            if k == "size" { " (a whole number)" } else { "" }
        })
        .unwrap_err();
        assert_eq!(
            e.0,
            "param `size`: must be a non-negative integer, not \"big\" (a whole number)"
        );
    }

    #[test]
    fn field_names_come_from_the_struct() {
        assert_eq!(struct_fields::<Example>(), ["size", "rate", "name", "on"]);
    }
}
