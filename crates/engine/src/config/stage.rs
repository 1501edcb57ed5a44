//! One entry of `stages:`: its name, its keys (`kind`, `cmd`, `deps`, `inputs`, `params`,
//! `outs`, `matrix`, `resources`, `aggregate`, `desc`, `executor`) and the rules between them
//! (a stage has a `kind` or a `cmd`; `cmd:` and `outs:` belong to `cmd` stages only), checked
//! into a [`StageDecl`].

use super::nodes::Cx;
use super::{MatrixAxis, Resources, StageDecl};
use crate::error::{UserError, suggestion};
use crate::executor::config::{self as executor_config, ExecutorDecl};
use crate::yaml::{Located, Mark, Node, NodeValue};

const STAGE_KEYS: &[&str] = &[
    "kind",
    "cmd",
    "deps",
    "inputs",
    "params",
    "outs",
    "matrix",
    "resources",
    "aggregate",
    "desc",
    "executor",
];
const RESOURCE_KEYS: &[&str] = &["gpu", "cpu", "mem", "time"];

impl Cx<'_> {
    pub(super) fn stage(&self, name: Located<String>, body: &Node) -> Result<StageDecl, UserError> {
        let valid = !name.value.is_empty()
            && name
                .value
                .chars()
                .all(|c| c.is_alphanumeric() || c == '_' || c == '-');
        if !valid {
            return Err(self.err(name.mark, format!("invalid stage name `{}`", name.value)).with_help(
                "stage names use letters, digits, `_` and `-` (`@` and `.` are reserved for matrix instances and `--set stage.param`)",
            ));
        }
        let what = format!("stage `{}`", name.value);
        let entries = self.map(body, &what)?;
        let mut kind = None;
        let mut stage = StageDecl {
            name: name.clone(),
            kind: Located {
                value: String::new(),
                mark: name.mark,
            },
            cmd: None,
            deps: Vec::new(),
            inputs: Vec::new(),
            params: Vec::new(),
            outs: Vec::new(),
            matrix: Vec::new(),
            resources: Resources::default(),
            aggregate: None,
            desc: None,
            executor: ExecutorDecl::default(),
        };
        for (key, value) in entries {
            if key.value == "kind" {
                kind = Some(self.string(value, &format!("`kind` of {what}"))?);
            } else {
                self.stage_key(&mut stage, &key, value, &what)?;
            }
        }
        stage.kind = self.stage_kind(kind, &stage, name.mark, &what)?;
        Ok(stage)
    }

    /// Sets the field of `stage` that `key` names (every key but `kind`).
    fn stage_key(
        &self,
        stage: &mut StageDecl,
        key: &Located<String>,
        value: &Node,
        what: &str,
    ) -> Result<(), UserError> {
        let field = format!("`{}` of {what}", key.value);
        match key.value.as_str() {
            "cmd" => stage.cmd = Some(self.string(value, &field)?),
            "deps" => stage.deps = self.strings(value, &field)?,
            "inputs" => stage.inputs = self.strings(value, &field)?,
            "outs" => stage.outs = self.strings(value, &field)?,
            "desc" => stage.desc = Some(self.string(value, &field)?.value),
            "params" => {
                if !value.is_null() {
                    stage.params = self
                        .map(value, &field)?
                        .into_iter()
                        .map(|(k, v)| (k, v.clone()))
                        .collect();
                }
            }
            "matrix" => stage.matrix = self.matrix(value, &field, what)?,
            "executor" => {
                stage.executor = executor_config::parse_block(
                    self.path,
                    self.source,
                    value,
                    &format!("`executor` of {what}"),
                )?;
            }
            "resources" => self.resources(value, &field, what, &mut stage.resources)?,
            "aggregate" => match value.to_json() {
                serde_json::Value::Bool(b) => stage.aggregate = Some(b),
                _ => {
                    return Err(self.err(
                        value.mark,
                        format!("{field} must be true or false, found {}", value.type_name()),
                    ));
                }
            },
            other => {
                return Err(self
                    .err(key.mark, format!("unknown key `{other}` in {what}"))
                    .with_help(format!(
                        "{} (stage keys: {})",
                        suggestion(other, STAGE_KEYS),
                        STAGE_KEYS.join(", ")
                    )));
            }
        }
        Ok(())
    }

    /// A stage's `matrix:`: axes of non-empty lists of scalars.
    fn matrix(&self, value: &Node, field: &str, what: &str) -> Result<Vec<MatrixAxis>, UserError> {
        let mut matrix = Vec::new();
        for (axis, values) in self.map(value, field)? {
            // `share_type: ${vars.shares}`: the var's list, expanded when the plan is built.
            if values
                .scalar_text()
                .is_some_and(|t| t.starts_with("${vars.") && t.ends_with('}'))
            {
                matrix.push((axis, vec![values.clone()]));
                continue;
            }
            let NodeValue::Seq(items) = &values.value else {
                return Err(self
                    .err(
                        values.mark,
                        format!(
                            "matrix axis `{}` of {what} must be a list of values, found {}",
                            axis.value,
                            values.type_name()
                        ),
                    )
                    .with_help(format!(
                        "write `{0}: [a, b]`, or `{0}: ${{vars.NAME}}` for a var that holds a list",
                        axis.value
                    )));
            };
            if items.is_empty() {
                return Err(self.err(
                    values.mark,
                    format!("matrix axis `{}` of {what} is empty", axis.value),
                ));
            }
            if let Some(bad) = items
                .iter()
                .find(|i| !matches!(i.value, NodeValue::Scalar { .. }))
            {
                return Err(self.err(
                    bad.mark,
                    format!("matrix values must be scalars, found {}", bad.type_name()),
                ));
            }
            matrix.push((axis, items.to_vec()));
        }
        Ok(matrix)
    }

    /// A stage's `resources:` (`gpu`, `cpu` counts; `mem`, `time` for cluster jobs) into
    /// `resources`.
    fn resources(
        &self,
        value: &Node,
        field: &str,
        what: &str,
        resources: &mut Resources,
    ) -> Result<(), UserError> {
        for (res, amount) in self.map(value, field)? {
            let rfield = format!("resource `{}` of {what}", res.value);
            if res.value == "mem" {
                let mb = amount.scalar_text().and_then(executor_config::parse_mem);
                resources.mem = Some(mb.ok_or_else(|| {
                    executor_config::mem_error(self.path, self.source, amount, &rfield)
                })?);
                continue;
            }
            if res.value == "time" {
                let secs = amount.scalar_text().and_then(executor_config::parse_time);
                resources.time = Some(secs.ok_or_else(|| {
                    executor_config::time_error(self.path, self.source, amount, &rfield)
                })?);
                continue;
            }
            let Some(n) = amount.to_json().as_u64().filter(|n| *n <= 1024) else {
                return Err(self.err(
                    amount.mark,
                    format!(
                        "resource `{}` must be a whole number from 0 to 1024, found {}",
                        res.value,
                        amount
                            .scalar_text()
                            .map_or(amount.type_name().to_string(), |t| format!("`{t}`"))
                    ),
                ));
            };
            match res.value.as_str() {
                "gpu" => resources.gpu = n as u32,
                "cpu" => resources.cpu = (n as u32).max(1),
                other => {
                    return Err(self
                        .err(res.mark, format!("unknown resource `{other}` in {what}"))
                        .with_help(suggestion(other, RESOURCE_KEYS)));
                }
            }
        }
        Ok(())
    }

    /// The stage's kind: `kind:`, or `cmd` when only `cmd:` is given; `cmd:` and `outs:`
    /// belong to `cmd` stages only.
    fn stage_kind(
        &self,
        kind: Option<Located<String>>,
        stage: &StageDecl,
        name_mark: Mark,
        what: &str,
    ) -> Result<Located<String>, UserError> {
        let kind = match (kind, &stage.cmd) {
            (Some(k), _) => k,
            (None, Some(cmd)) => Located {
                value: "cmd".into(),
                mark: cmd.mark,
            },
            (None, None) => {
                return Err(self.err(name_mark, format!("{what} has neither `kind` nor `cmd`"))
                    .with_help("add `cmd: \"...\"` to run a shell command, or `kind: NAME` for a built-in stage"));
            }
        };
        if kind.value == "cmd" && stage.cmd.is_none() {
            return Err(self.err(
                kind.mark,
                format!("{what} is of kind `cmd` but has no `cmd:`"),
            ));
        }
        if kind.value != "cmd" && stage.cmd.is_some() {
            return Err(self.err(
                stage.cmd.as_ref().map_or(name_mark, |c| c.mark),
                format!(
                    "{what} has `cmd:` but is of kind `{}`; only `cmd` stages run a command",
                    kind.value
                ),
            ));
        }
        if kind.value != "cmd" && !stage.outs.is_empty() {
            return Err(self.err(
                stage.outs[0].mark,
                format!(
                    "`outs` is for `cmd` stages; `{}` stages declare their own outputs",
                    kind.value
                ),
            ));
        }
        Ok(kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PipelineFile;
    use std::path::Path;

    fn parse(text: &str) -> Result<PipelineFile, UserError> {
        PipelineFile::parse(Path::new("pipeline.yaml"), text.to_string())
    }

    #[test]
    fn reads_a_full_stage() {
        let p = parse(
            "vars: {data: d}\nstages:\n  a:\n    cmd: echo\n    deps: [b]\n    inputs: x.txt\n    params: {lr: 0.1}\n    matrix: {m: [1, 2]}\n    resources: {gpu: 1}\n  b:\n    cmd: echo\n",
        )
        .unwrap();
        let a = &p.stages[0];
        assert_eq!(a.kind.value, "cmd");
        assert_eq!(a.deps[0].value, "b");
        assert_eq!(a.inputs[0].value, "x.txt");
        assert_eq!(a.matrix[0].1.len(), 2);
        assert_eq!(
            a.resources,
            Resources {
                cpu: 1,
                gpu: 1,
                ..Resources::default()
            }
        );
    }

    #[test]
    fn unknown_key_suggests_the_closest() {
        let e = parse("stages:\n  a:\n    cmd: echo\n    dep: [b]\n").unwrap_err();
        assert_eq!(e.location.unwrap().1, Mark { line: 4, col: 5 });
        assert!(e.help.unwrap().contains("did you mean `deps`?"));
    }
}
