//! The `pipeline.yaml` schema: what a user may write, checked key by key with the position of
//! every mistake. Variable expansion, matrices and the DAG come later, in [`crate::plan`].

use std::path::{Path, PathBuf};

use crate::error::{UserError, suggestion};
use crate::executor::config::{self as executor_config, ExecutorDecl};
/// A value from the file and where it was written (defined beside the YAML tree it comes from).
pub use crate::yaml::Located;
use crate::yaml::{self, Mark, Node, NodeValue};

const TOP_KEYS: &[&str] = &["vars", "stages", "executor", "remotes"];
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

/// A `pipeline.yaml` that passed the schema checks, as written: nothing is substituted or
/// expanded yet.
#[derive(Debug, Clone)]
pub struct PipelineFile {
    /// The file as it was named (`-f`); its directory is the workspace root.
    pub path: PathBuf,
    /// The whole text, kept so that later errors can quote the offending line.
    pub source: String,
    /// `vars:` in file order, values unresolved (`${vars.x}` references and `--set` overrides
    /// are applied when the plan is built).
    pub vars: Vec<(Located<String>, Node)>,
    /// `stages:` in file order.
    pub stages: Vec<StageDecl>,
    /// Where stages run (`executor:`); see [`crate::executor`].
    pub executor: ExecutorDecl,
    /// Remote stores (`remotes:`); see [`crate::remote`].
    pub remotes: crate::remotes::Remotes,
}

/// One `matrix:` axis: its name and its values.
pub type MatrixAxis = (Located<String>, Vec<Node>);

/// One entry of `stages:` as written, before matrix expansion.
#[derive(Debug, Clone)]
pub struct StageDecl {
    /// The key under `stages:`: letters, digits, `_` and `-` (`@` and `.` are reserved for
    /// instance names and `--set STAGE.PARAM`).
    pub name: Located<String>,
    /// `kind:`, or `cmd` (at the `cmd:` line) when only `cmd:` is given; not yet checked
    /// against the registry.
    pub kind: Located<String>,
    /// The shell command of a `cmd` stage (`None` for every other kind), before `${...}`
    /// substitution.
    pub cmd: Option<Located<String>>,
    /// Names of the stages this one needs (a single string is a list of one).
    pub deps: Vec<Located<String>>,
    /// File paths and globs hashed into the fingerprint, `!PATTERN` to exclude; relative to
    /// the workspace root, before substitution.
    pub inputs: Vec<Located<String>>,
    /// `params:` in file order, values unsubstituted.
    pub params: Vec<(Located<String>, Node)>,
    /// The outputs a `cmd` stage promises under `$PIPELINE_OUT` (empty for other kinds).
    pub outs: Vec<Located<String>>,
    /// `matrix:` axes in file order; each non-empty, of scalars, or one `${vars.NAME}`.
    pub matrix: Vec<MatrixAxis>,
    /// `resources:`, defaults where not given.
    pub resources: Resources,
    /// `aggregate:`; `None` leaves it to the kind ([`crate::stage::Stage::aggregates`]).
    pub aggregate: Option<bool>,
    /// `desc:`, a note for people; the engine does not use it.
    pub desc: Option<String>,
    /// The stage's `executor:` overrides of the top-level block.
    pub executor: ExecutorDecl,
}

/// What a stage instance holds while it runs. `cpu` counts `--jobs` slots, `gpu` counts GPU
/// tokens (`--gpus`, one by default, so GPU stages never overlap).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resources {
    /// `--jobs` slots, 1 to 1024 (default 1; `cpu: 0` counts as 1); more than `--jobs` is
    /// capped to `--jobs`.
    pub cpu: u32,
    /// GPU tokens, 0 to 1024 (default 0).
    pub gpu: u32,
    /// Megabytes (`mem: 32G`); only a cluster executor uses it.
    pub mem: Option<u64>,
    /// Seconds (`time: "48:00:00"`); only a cluster executor uses it.
    pub time: Option<u64>,
}

impl Default for Resources {
    fn default() -> Self {
        Resources {
            cpu: 1,
            gpu: 0,
            mem: None,
            time: None,
        }
    }
}

impl PipelineFile {
    /// Reads and checks `path`.
    pub fn load(path: &Path) -> Result<PipelineFile, UserError> {
        let bytes = read_bounded(path, crate::yaml::limits::FILE_BYTES).map_err(|e| {
            let hint = match e.kind() {
                std::io::ErrorKind::NotFound => {
                    "run from the directory that holds pipeline.yaml, or pass -f FILE"
                }
                std::io::ErrorKind::IsADirectory => {
                    "pass the pipeline file itself: -f DIR/pipeline.yaml"
                }
                _ => "check the file's permissions",
            };
            UserError::new(format!("cannot read pipeline file {}: {e}", path.display()))
                .with_help(hint)
        })?;
        let source = String::from_utf8(bytes).map_err(|e| {
            let valid = &e.as_bytes()[..e.utf8_error().valid_up_to()];
            let line = valid.iter().filter(|&&b| b == b'\n').count() + 1;
            UserError::new(format!(
                "{}:{line}: the file is not valid UTF-8",
                path.display()
            ))
            .with_help("save pipeline.yaml as UTF-8")
        })?;
        Self::parse(path, source)
    }

    /// Checks `source`, the text of `path` (which is only used in messages and for the
    /// workspace root). Every mistake is a [`UserError`] at its line and column.
    pub fn parse(path: &Path, source: String) -> Result<PipelineFile, UserError> {
        let root = match yaml::parse(&source) {
            Ok(Some(root)) => root,
            Ok(None) => {
                return Err(
                    UserError::new(format!("{}: the file is empty", path.display()))
                        .with_help("declare at least one stage under `stages:`"),
                );
            }
            Err(e) => {
                return Err(UserError::at(
                    path,
                    &source,
                    e.mark,
                    format!("YAML syntax error: {}", e.message),
                ));
            }
        };
        let cx = Cx {
            path,
            source: &source,
        };
        let entries = cx.map(&root, "the pipeline file")?;
        let mut vars = Vec::new();
        let mut stages = Vec::new();
        let mut executor = ExecutorDecl::default();
        let mut remotes = crate::remotes::Remotes::default();
        let mut saw_stages = false;
        for (key, value) in entries {
            match key.value.as_str() {
                "vars" => {
                    if !value.is_null() {
                        vars = cx
                            .map(value, "`vars`")?
                            .into_iter()
                            .map(|(k, v)| (k, v.clone()))
                            .collect();
                    }
                }
                "executor" => {
                    executor = executor_config::parse_block(path, &source, value, "`executor`")?;
                }
                "remotes" => remotes = crate::remotes::parse_remotes(path, &source, value)?,
                "stages" => {
                    saw_stages = true;
                    if value.is_null() {
                        continue;
                    }
                    for (name, body) in cx.map(value, "`stages`")? {
                        stages.push(cx.stage(name, body)?);
                    }
                }
                other => {
                    return Err(cx
                        .err(key.mark, format!("unknown top-level key `{other}`"))
                        .with_help(format!(
                            "{} (a pipeline file has `vars:` and `stages:`)",
                            suggestion(other, TOP_KEYS)
                        )));
                }
            }
        }
        if !saw_stages || stages.is_empty() {
            return Err(UserError::new(format!("{}: no stages are declared", path.display()))
                .with_help("add a `stages:` mapping, e.g. `stages: {hello: {cmd: \"echo hi > $PIPELINE_OUT/hi.txt\"}}`"));
        }
        Ok(PipelineFile {
            path: path.to_path_buf(),
            source,
            vars,
            stages,
            executor,
            remotes,
        })
    }

    /// An error at `mark` in this file, quoting its line.
    pub fn error_at(&self, mark: Mark, message: impl Into<String>) -> UserError {
        UserError::at(&self.path, &self.source, mark, message)
    }
}

struct Cx<'a> {
    path: &'a Path,
    source: &'a str,
}

impl Cx<'_> {
    fn err(&self, mark: Mark, message: impl Into<String>) -> UserError {
        UserError::at(self.path, self.source, mark, message)
    }

    /// A mapping with string keys and no duplicates.
    fn map<'n>(
        &self,
        node: &'n Node,
        what: &str,
    ) -> Result<Vec<(Located<String>, &'n Node)>, UserError> {
        let NodeValue::Map(entries) = &node.value else {
            return Err(self.err(
                node.mark,
                format!("{what} must be a mapping, found {}", node.type_name()),
            ));
        };
        let mut out: Vec<(Located<String>, &Node)> = Vec::with_capacity(entries.len());
        for (k, v) in entries.iter() {
            let Some(name) = k.scalar_text() else {
                return Err(self.err(
                    k.mark,
                    format!("keys of {what} must be strings, found {}", k.type_name()),
                ));
            };
            if let Some((first, _)) = out.iter().find(|(f, _)| f.value == name) {
                let noun = if what == "`stages`" { "stage" } else { "key" };
                return Err(self
                    .err(k.mark, format!("duplicate {noun} `{name}` in {what}"))
                    .with_help(format!(
                        "it is first defined on line {}; rename or remove one of them",
                        first.mark.line
                    )));
            }
            out.push((
                Located {
                    value: name.to_string(),
                    mark: k.mark,
                },
                v,
            ));
        }
        Ok(out)
    }

    fn string(&self, node: &Node, what: &str) -> Result<Located<String>, UserError> {
        match &node.value {
            NodeValue::Scalar { text, .. } if !node.is_null() => Ok(Located {
                value: text.clone(),
                mark: node.mark,
            }),
            _ => Err(self.err(
                node.mark,
                format!("{what} must be a string, found {}", node.type_name()),
            )),
        }
    }

    /// A list of strings; a single string is accepted as a list of one.
    fn strings(&self, node: &Node, what: &str) -> Result<Vec<Located<String>>, UserError> {
        match &node.value {
            NodeValue::Seq(items) => items
                .iter()
                .map(|i| self.string(i, &format!("each entry of {what}")))
                .collect(),
            NodeValue::Scalar { .. } if node.is_null() => Ok(Vec::new()),
            NodeValue::Scalar { .. } if matches!(node.to_json(), serde_json::Value::String(_)) => {
                Ok(vec![self.string(node, what)?])
            }
            _ => Err(self.err(
                node.mark,
                format!(
                    "{what} must be a list of strings, found {}",
                    node.type_name()
                ),
            )),
        }
    }

    fn stage(&self, name: Located<String>, body: &Node) -> Result<StageDecl, UserError> {
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

/// A file's bytes, refused when larger than `limit` (read through `take`, so `/dev/zero` or a
/// file still growing cannot make the read unbounded).
pub(crate) fn read_bounded(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(limit + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(std::io::Error::other(format!(
            "larger than {} MiB; a pipeline file is a few kilobytes",
            limit >> 20
        )));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn duplicate_stage_names_the_first_line() {
        let e = parse("stages:\n  a:\n    cmd: x\n  a:\n    cmd: y\n").unwrap_err();
        assert!(e.message.contains("duplicate stage `a`"), "{e}");
        assert!(e.help.unwrap().contains("line 2"));
    }

    #[test]
    fn wrong_types_are_named() {
        let e = parse("stages:\n  a:\n    cmd: x\n    deps: 5\n").unwrap_err();
        assert!(
            e.message
                .contains("must be a list of strings, found a number"),
            "{e}"
        );
        let e = parse("stages:\n  a:\n    cmd: x\n    params: [1]\n").unwrap_err();
        assert!(e.message.contains("must be a mapping, found a list"), "{e}");
    }
}
