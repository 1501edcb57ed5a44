//! Plan-time checks for inputs that would otherwise be silently wrong: two matrix values or two
//! instances with one name, two deps behind one `PIPELINE_DEP_…` variable. Each is an error at
//! the line of `pipeline.yaml` that causes it.

use std::collections::HashMap;

use serde_json::Value;

use super::Instance;
use super::coords::display_value;
use crate::config::{Located, PipelineFile, StageDecl};
use crate::error::UserError;
use crate::stages::cmd::dep_env_vars;

/// Two values of a matrix axis that name the same instance: equal (`5` twice) or written
/// differently with the same text (`1` and `"1"`).
pub(super) fn distinct_values(
    file: &PipelineFile,
    decl: &StageDecl,
    axis: &Located<String>,
    values: &[Value],
) -> Result<(), UserError> {
    let mut seen: HashMap<String, &Value> = HashMap::with_capacity(values.len());
    for v in values {
        let Some(first) = seen.insert(display_value(v), v) else {
            continue;
        };
        let what = if first == v {
            format!("lists {} twice", display_value(v))
        } else {
            format!(
                "lists {first} and {v}, which name the same instance `{}@{}={}`",
                decl.name.value,
                axis.value,
                display_value(v)
            )
        };
        return Err(file
            .error_at(
                axis.mark,
                format!(
                    "matrix axis `{}` of stage `{}` {what}",
                    axis.value, decl.name.value
                ),
            )
            .with_help("each value makes one instance: list it once"));
    }
    Ok(())
}

/// No two instances share a name (values such as `a,b=c` could otherwise make one from two
/// axes).
pub(super) fn unique_names(file: &PipelineFile, instances: &[Instance]) -> Result<(), UserError> {
    let mut seen: HashMap<&str, usize> = HashMap::with_capacity(instances.len());
    for (i, inst) in instances.iter().enumerate() {
        if let Some(first) = seen.insert(&inst.name, i) {
            let first = &instances[first];
            return Err(file
                .error_at(
                    inst.mark,
                    format!(
                        "two instances are named `{}` (from stages `{}` and `{}`)",
                        inst.name, first.stage, inst.stage
                    ),
                )
                .with_help("matrix values may not contain `,` or `=` in a way that makes names equal; change one value"));
        }
    }
    Ok(())
}

/// A `cmd` sees each dep as `PIPELINE_DEP_<NAME>` (upper-cased, other characters as `_`), and
/// a lone expanded dep also under its stage's name ([`dep_env_vars`]); two deps behind one
/// variable would give the command one of them without a word.
pub(super) fn dep_env_names(
    file: &PipelineFile,
    decl: &StageDecl,
    instance: &str,
    deps: &[usize],
    instances: &[Instance],
) -> Result<(), UserError> {
    let names: Vec<(&str, &str)> = deps
        .iter()
        .map(|&d| (instances[d].name.as_str(), instances[d].stage.as_str()))
        .collect();
    let mut seen: HashMap<String, usize> = HashMap::with_capacity(deps.len());
    for (var, i) in dep_env_vars(&names) {
        let Some(first) = seen.insert(var.clone(), i) else {
            continue;
        };
        if names[first].0 == names[i].0 {
            continue;
        }
        let (other, name) = (names[first].0, names[i].0);
        let mark = decl
            .deps
            .iter()
            .find(|x| x.value == names[i].1)
            .map_or(decl.name.mark, |x| x.mark);
        return Err(file
            .error_at(
                mark,
                format!("stage `{instance}`: deps `{other}` and `{name}` would both be ${var}"),
            )
            .with_help("the variable keeps ASCII letters and digits and turns every other character into `_`, and a dep that is the one instance of its stage is also seen under the stage's name; rename one of the stages or values"));
    }
    Ok(())
}
