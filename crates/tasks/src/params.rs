//! Small helpers for reading typed values out of the stage's JSON params with errors that name
//! the param's path (`train[1].format.labels[0]`) and suggest the closest key for a typo.

use serde_json::{Map, Value};

use crate::error::TaskError;

/// A short rendering of a JSON value for error messages.
pub(crate) fn show(v: &Value) -> String {
    let s = match v {
        Value::String(s) => format!("\"{s}\""),
        other => other.to_string(),
    };
    if s.chars().count() > 60 {
        let cut: String = s.chars().take(57).collect();
        format!("{cut}…")
    } else {
        s
    }
}

pub(crate) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a map",
    }
}

/// Rejects keys of `map` not in `allowed`, with the closest allowed one as a hint.
pub(crate) fn check_keys(
    map: &Map<String, Value>,
    allowed: &[&str],
    at: &str,
) -> Result<(), TaskError> {
    for key in map.keys() {
        if !allowed.contains(&key.as_str()) {
            let hint = closest(key, allowed)
                .map(|c| format!(" (did you mean `{c}`?)"))
                .unwrap_or_default();
            return Err(TaskError::param(
                at,
                format!("unknown key `{key}`{hint}; allowed: {}", allowed.join(", ")),
            ));
        }
    }
    Ok(())
}

/// The allowed name nearest to `name`, if it is near enough to be a plausible typo (the
/// pipeline's one measure).
pub(crate) fn closest<'a>(name: &str, allowed: &[&'a str]) -> Option<&'a str> {
    pipeline_params::closest(name, allowed.iter().copied())
}

pub(crate) fn string(v: &Value, at: &str) -> Result<String, TaskError> {
    match v {
        Value::String(s) if !s.trim().is_empty() => Ok(s.clone()),
        Value::String(_) => Err(TaskError::param(at, "is empty")),
        other => Err(TaskError::param(
            at,
            format!(
                "expected a string, got {} {}",
                type_name(other),
                show(other)
            ),
        )),
    }
}

pub(crate) fn boolean(v: &Value, at: &str) -> Result<bool, TaskError> {
    v.as_bool().ok_or_else(|| {
        TaskError::param(
            at,
            format!("expected true or false, got {} {}", type_name(v), show(v)),
        )
    })
}

/// A non-negative integer (YAML `3`; also `3.0`, which some YAML emitters write).
pub(crate) fn count(v: &Value, at: &str) -> Result<usize, TaskError> {
    let n = v.as_u64().or_else(|| {
        v.as_f64()
            .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f <= u32::MAX as f64)
            .map(|f| f as u64)
    });
    n.and_then(|n| usize::try_from(n).ok()).ok_or_else(|| {
        TaskError::param(
            at,
            format!(
                "expected a non-negative integer, got {} {}",
                type_name(v),
                show(v)
            ),
        )
    })
}

pub(crate) fn number(v: &Value, at: &str) -> Result<f64, TaskError> {
    v.as_f64().filter(|f| f.is_finite()).ok_or_else(|| {
        TaskError::param(
            at,
            format!("expected a number, got {} {}", type_name(v), show(v)),
        )
    })
}

pub(crate) fn object<'a>(v: &'a Value, at: &str) -> Result<&'a Map<String, Value>, TaskError> {
    v.as_object().ok_or_else(|| {
        TaskError::param(
            at,
            format!("expected a map, got {} {}", type_name(v), show(v)),
        )
    })
}
