//! Variables: `vars:` with `--set` overrides, resolved in dependency order (loops refused),
//! and the `${vars.x}` / `${params.x}` substitution in params, matrix axes, inputs and commands.

use serde_json::{Map, Value};

use super::{Overrides, display_value};
use crate::config::{Located, PipelineFile};
use crate::error::{UserError, suggestion};
use crate::yaml::Mark;

pub(super) fn resolve_vars(
    file: &PipelineFile,
    overrides: &Overrides,
) -> Result<Map<String, Value>, UserError> {
    let mut raw: Vec<(Located<String>, Value)> = file
        .vars
        .iter()
        .map(|(k, v)| (k.clone(), v.to_json()))
        .collect();
    for (name, value) in &overrides.items {
        if let Some((_, v)) = raw.iter_mut().find(|(k, _)| k.value == *name) {
            *v = value.clone();
        }
    }
    // Vars may refer to other vars; resolve on demand, refusing loops.
    fn resolve(
        file: &PipelineFile,
        raw: &[(Located<String>, Value)],
        name: &str,
        done: &mut Map<String, Value>,
        active: &mut Vec<String>,
    ) -> Result<(), UserError> {
        if done.contains_key(name) {
            return Ok(());
        }
        let (key, value) = raw
            .iter()
            .find(|(k, _)| k.value == name)
            .expect("caller checks");
        if active.iter().any(|a| a == name) {
            active.push(name.to_string());
            return Err(file.error_at(
                key.mark,
                format!("vars refer to each other in a loop: {}", active.join(" → ")),
            ));
        }
        active.push(name.to_string());
        let mut refs = Vec::new();
        collect_var_refs(value, &mut refs);
        for r in refs {
            if raw.iter().any(|(k, _)| k.value == r) {
                resolve(file, raw, &r, done, active)?;
            }
        }
        let v = subst_value(file, key.mark, value.clone(), done)?;
        active.pop();
        done.insert(name.to_string(), v);
        Ok(())
    }
    let mut done = Map::new();
    for (k, _) in &raw {
        resolve(file, &raw, &k.value, &mut done, &mut Vec::new())?;
    }
    Ok(done)
}

/// A matrix axis's values: the list as written, or the list of the var it names
/// (`pretrain_step: ${vars.save_steps}`), which must hold scalars.
pub(super) fn matrix_values(
    file: &PipelineFile,
    axis: &Located<String>,
    items: &[crate::yaml::Node],
    vars: &Map<String, Value>,
) -> Result<Vec<Value>, UserError> {
    let mut values = Vec::new();
    for item in items {
        match subst_value(file, item.mark, item.to_json(), vars)? {
            Value::Array(list) => {
                if let Some(bad) = list.iter().find(|v| v.is_array() || v.is_object()) {
                    return Err(file.error_at(
                        item.mark,
                        format!(
                            "matrix axis `{}`: the var's values must be scalars, found {bad}",
                            axis.value
                        ),
                    ));
                }
                if list.is_empty() {
                    return Err(file.error_at(
                        item.mark,
                        format!("matrix axis `{}`: the var's list is empty", axis.value),
                    ));
                }
                values.extend(list);
            }
            Value::Object(_) => {
                return Err(file
                    .error_at(
                        item.mark,
                        format!(
                            "matrix axis `{}` must be a list of values; the var holds a map",
                            axis.value
                        ),
                    )
                    .with_help("give the var a list: `NAME: [a, b]`"));
            }
            v => values.push(v),
        }
    }
    Ok(values)
}

fn collect_var_refs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => {
            let mut rest = s.as_str();
            while let Some(start) = rest.find("${vars.") {
                let after = &rest[start + 7..];
                if let Some(end) = after.find('}') {
                    out.push(after[..end].to_string());
                    rest = &after[end..];
                } else {
                    break;
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|i| collect_var_refs(i, out)),
        Value::Object(map) => map.values().for_each(|i| collect_var_refs(i, out)),
        _ => {}
    }
}

/// Substitutes `${vars.x}` in every string of `value`. A string that is exactly one reference
/// takes the var's type (so `lr: ${vars.lr}` stays a number).
pub(super) fn subst_value(
    file: &PipelineFile,
    mark: Mark,
    value: Value,
    vars: &Map<String, Value>,
) -> Result<Value, UserError> {
    Ok(match value {
        Value::String(s) => {
            if let Some(name) = s.strip_prefix("${vars.").and_then(|r| r.strip_suffix('}'))
                && !name.contains('}')
                && let Some(v) = vars.get(name)
            {
                return Ok(v.clone());
            }
            Value::String(subst_str(file, mark, &s, vars, None)?)
        }
        Value::Array(items) => Value::Array(
            items
                .into_iter()
                .map(|i| subst_value(file, mark, i, vars))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| Ok((k, subst_value(file, mark, v, vars)?)))
                .collect::<Result<_, UserError>>()?,
        ),
        other => other,
    })
}

/// `text` as one word of `sh`: in single quotes, each `'` written as `'\''`.
pub fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// Substitutes `${vars.x}` and (where `params` is given) `${params.x}`, as they are or, with
/// `:q` (`${params.x:q}`), quoted as one shell word; any other `${…}` is left for the shell.
/// The plain form is spliced into `sh -c` as text (docs/cli-contract.md says so).
pub fn subst_str(
    file: &PipelineFile,
    mark: Mark,
    text: &str,
    vars: &Map<String, Value>,
    params: Option<&Map<String, Value>>,
) -> Result<String, UserError> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            rest = "";
            break;
        };
        let written = &after[..end];
        // `${params.x:q}`: the value as one shell word (single-quoted), for `cmd`.
        let (reference, quoted) = match written.strip_suffix(":q") {
            Some(r) if r.starts_with("vars.") || r.starts_with("params.") => (r, true),
            _ => (written, false),
        };
        let (table, name, scope) = if let Some(n) = reference.strip_prefix("vars.") {
            (Some(vars), n, "var")
        } else if let Some(n) = reference.strip_prefix("params.") {
            match params {
                Some(p) => (Some(p), n, "param"),
                None => {
                    return Err(file
                        .error_at(mark, format!("`${{{reference}}}` cannot be used here"))
                        .with_help("`${params.x}` works in `cmd`; elsewhere use `${vars.x}`"));
                }
            }
        } else {
            (None, reference, "")
        };
        match table {
            Some(t) => match t.get(name) {
                Some(v) if quoted => out.push_str(&shell_quote(&display_value(v))),
                Some(v) => out.push_str(&display_value(v)),
                None => {
                    let names: Vec<&str> = t.keys().map(String::as_str).collect();
                    return Err(file
                        .error_at(
                            mark,
                            format!("undefined {scope} `{name}` in `${{{reference}}}`"),
                        )
                        .with_help(suggestion(name, &names)));
                }
            },
            None => {
                out.push_str("${");
                out.push_str(written);
                out.push('}');
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}
