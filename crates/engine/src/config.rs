//! The `pipeline.yaml` schema: what a user may write, checked key by key with the position of
//! every mistake. Variable expansion, matrices and the DAG come later, in [`crate::plan`].

use std::path::{Path, PathBuf};

use crate::error::{UserError, suggestion};
use crate::executor::config::{self as executor_config, ExecutorDecl};
/// A value from the file and where it was written (defined beside the YAML tree it comes from).
pub use crate::yaml::Located;
use crate::yaml::{self, Mark, Node};

mod nodes;
mod stage;

use nodes::Cx;

const TOP_KEYS: &[&str] = &["vars", "stages", "executor", "remotes"];

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
