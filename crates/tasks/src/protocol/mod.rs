//! Protocols: which files a fine-tune trains on, selects the model on (dev) and reports on
//! (evaluation sets), with the held-out fraction, the seed and the caps, as stage params.
//!
//! The shared data has no LCQMC or XNLI train split, so the protocol is part of the experiment
//! and is written into metrics.json ([`Protocol::summary`]): the files as the params name them,
//! what each held (rows, examples, bad rows by reason with sample lines, examples per class),
//! the split sizes, the seed and the fraction.
//!
//! [`ProtocolSpec::from_params`] parses and checks the params without touching a file (for the
//! stage's `validate`); [`ProtocolSpec::load`] reads the files. The param shape is documented
//! in the crate docs.
//!
//! Loading goes: read every file (train, dev files, evaluation sets; each file must pass
//! `max_bad_fraction`) → drop train examples that are also dev or evaluation examples
//! (`drop_eval_overlap`) → hold out `dev_fraction` → cap train (`max_train_examples`) → cap
//! dev and evaluation sets (`max_eval_examples`). Each step has its own random stream, so the
//! held-out dev set does not change when a cap does.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::error::TaskError;
use crate::params::{self, check_keys, show};
use crate::task::Task;

mod examples;
mod load;
mod reading;

pub use examples::{
    Examples, KindExample, Protocol, ProtocolSummary, Split, SplitExample, SplitSummary, WrongKind,
};

/// The params a protocol reads; the finetune stage adds its own training params to these.
pub const PARAMS: &[&str] = &[
    "task",
    "train",
    "dev",
    "dev_fraction",
    "test",
    "eval",
    "split_seed",
    "max_train_examples",
    "max_eval_examples",
    "max_bad_fraction",
    "drop_eval_overlap",
    "test_fraction",
];

/// `split_seed` when the params leave it out.
pub const DEFAULT_SPLIT_SEED: u64 = 12345;

/// `max_bad_fraction` when the params leave it out: 1 % of a file's rows may be bad. The
/// shared benchmark files have none, so anything more means a wrong format, not noise.
pub const DEFAULT_MAX_BAD_FRACTION: f64 = 0.01;

/// Eval set names that would clash with the train and dev splits in metrics.json.
const RESERVED_NAMES: &[&str] = &["train", "dev"];

/// One data file of a split, with its own format if it differs from the task's.
#[derive(Debug, Clone, PartialEq)]
pub struct FileSpec {
    /// As given in the params (relative paths are relative to the workspace root).
    pub path: String,
    /// The file's format (`format: cmnli`); `None`: the task's.
    pub format: Option<Task>,
}

/// Where the dev (model-selection) set comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum DevSpec {
    /// Its own file(s).
    Files(Vec<FileSpec>),
    /// A stratified, seeded share of the train examples, held out of training.
    Fraction(f64),
}

/// A named evaluation set (`test`, `xnli_dev`, …): its files are read and concatenated.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalSpec {
    /// The set's name in metrics.json (not `train` or `dev`).
    pub name: String,
    /// Its files, in order.
    pub files: Vec<FileSpec>,
}

/// A protocol as the params define it; nothing read yet.
#[derive(Debug, Clone, PartialEq)]
pub struct ProtocolSpec {
    /// The task: its labels and the default format of every file.
    pub task: Task,
    /// The training files (`train`).
    pub train: Vec<FileSpec>,
    /// The model-selection set: `dev` files or a `dev_fraction` of train.
    pub dev: DevSpec,
    /// In the order given (`test` first, then `eval` as a list in order, or as a map by name).
    pub eval: Vec<EvalSpec>,
    /// Seed of the held-out sets and the caps' subsamples ([`DEFAULT_SPLIT_SEED`] by default).
    pub split_seed: u64,
    /// Cap on the train examples, a stratified seeded subsample; `None`: all.
    pub max_train_examples: Option<usize>,
    /// Cap on dev and on each evaluation set (smoke runs only); `None`: all.
    pub max_eval_examples: Option<usize>,
    /// The share of a file's rows that may be bad before loading fails
    /// ([`DEFAULT_MAX_BAD_FRACTION`] by default).
    pub max_bad_fraction: f64,
    /// Drop train examples whose texts are those of a dev or evaluation example.
    pub drop_eval_overlap: bool,
    /// Reading comprehension only: the share of the train files' articles (documents) held
    /// out as the evaluation set `test`, beside `dev_fraction`'s for dev (both by group, see
    /// [`crate::group_split`]).
    pub test_fraction: Option<f64>,
}

/// A param that is present and not `null` (`--set stage.max_train_examples=null` unsets it).
fn get<'a>(params: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    params.get(key).filter(|v| !v.is_null())
}

fn file_entry(v: &Value, at: &str) -> Result<FileSpec, TaskError> {
    match v {
        Value::String(_) => Ok(FileSpec {
            path: params::string(v, at)?,
            format: None,
        }),
        Value::Object(m) => {
            check_keys(m, &["path", "format"], at)?;
            let path = m.get("path").ok_or_else(|| {
                TaskError::param(at, "a file entry needs `path` (and optionally `format`)")
            })?;
            Ok(FileSpec {
                path: params::string(path, &format!("{at}.path"))?,
                format: m
                    .get("format")
                    .map(|f| Task::from_value(f, &format!("{at}.format")))
                    .transpose()?,
            })
        }
        other => Err(TaskError::param(
            at,
            format!(
                "expected a path or {{path, format}}, got {} {}",
                params::type_name(other),
                show(other)
            ),
        )),
    }
}

/// A path, a `{path, format}` entry, or a list of them.
fn files(v: &Value, at: &str) -> Result<Vec<FileSpec>, TaskError> {
    match v {
        Value::Array(list) => {
            if list.is_empty() {
                return Err(TaskError::param(at, "the list of files is empty"));
            }
            list.iter()
                .enumerate()
                .map(|(i, e)| file_entry(e, &format!("{at}[{i}]")))
                .collect()
        }
        other => Ok(vec![file_entry(other, at)?]),
    }
}

fn eval_name(name: &str, at: &str) -> Result<String, TaskError> {
    let name = name.trim();
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
    {
        return Err(TaskError::param(
            at,
            format!(
                "evaluation set name `{name}` must be letters, digits, `_`, `-` or `.` (it \
                 names the set's metrics and predictions)"
            ),
        ));
    }
    if RESERVED_NAMES.contains(&name) {
        return Err(TaskError::param(
            at,
            format!(
                "`{name}` is the name of the {name} split; call the evaluation set something \
                 else (`test`, `xnli_dev`, …)"
            ),
        ));
    }
    Ok(name.to_string())
}

/// `eval`: a map name → files, or a list of `{name, files}` / `{name, path, format}`.
fn eval_sets(v: &Value) -> Result<Vec<EvalSpec>, TaskError> {
    match v {
        Value::Object(m) => {
            if m.contains_key("path") || m.contains_key("files") {
                return Err(TaskError::param(
                    "eval",
                    "give each evaluation set a name: `eval: {test: PATH}` or \
                     `eval: [{name: test, path: PATH}]`",
                ));
            }
            // By name, so the order does not depend on how the JSON map was built.
            let mut names: Vec<&String> = m.keys().collect();
            names.sort();
            names
                .into_iter()
                .map(|name| {
                    let at = format!("eval.{name}");
                    Ok(EvalSpec {
                        name: eval_name(name, &at)?,
                        files: files(&m[name], &at)?,
                    })
                })
                .collect()
        }
        Value::Array(list) => list
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let at = format!("eval[{i}]");
                let m = params::object(e, &at)?;
                check_keys(m, &["name", "files", "path", "format"], &at)?;
                let name = m
                    .get("name")
                    .ok_or_else(|| TaskError::param(&at, "an evaluation set needs a `name`"))?;
                let name = eval_name(&params::string(name, &format!("{at}.name"))?, &at)?;
                let files = match (m.get("files"), m.get("path")) {
                    (Some(f), None) => {
                        if m.contains_key("format") {
                            return Err(TaskError::param(
                                &at,
                                "`format` goes with `path`; with `files`, give each file its \
                                 own `{path, format}`",
                            ));
                        }
                        files(f, &format!("{at}.files"))?
                    }
                    (None, Some(_)) => {
                        let mut entry = m.clone();
                        entry.remove("name");
                        vec![file_entry(&Value::Object(entry), &at)?]
                    }
                    _ => {
                        return Err(TaskError::param(
                            &at,
                            "an evaluation set needs either `files` or `path`",
                        ));
                    }
                };
                Ok(EvalSpec { name, files })
            })
            .collect(),
        other => Err(TaskError::param(
            "eval",
            format!(
                "expected a map of named evaluation sets (`eval: {{test: PATH}}`), got {} {}",
                params::type_name(other),
                show(other)
            ),
        )),
    }
}

fn fraction(v: &Value, at: &str, open_low: bool, open_high: bool) -> Result<f64, TaskError> {
    let f = params::number(v, at)?;
    let ok_low = if open_low { f > 0.0 } else { f >= 0.0 };
    let ok_high = if open_high { f < 1.0 } else { f <= 1.0 };
    if !(ok_low && ok_high) {
        let range = format!(
            "{}0, 1{}",
            if open_low { "(" } else { "[" },
            if open_high { ")" } else { "]" }
        );
        return Err(TaskError::param(at, format!("{f} must be in {range}")));
    }
    Ok(f)
}

fn positive_count(v: &Value, at: &str) -> Result<usize, TaskError> {
    let n = params::count(v, at)?;
    if n == 0 {
        return Err(TaskError::param(
            at,
            "must be at least 1 (leave it out, or null, for no cap)",
        ));
    }
    Ok(n)
}

/// `dev` (file(s)) or `dev_fraction` (a share of train held out): exactly one of them.
fn dev_spec(params: &Map<String, Value>) -> Result<DevSpec, TaskError> {
    Ok(match (get(params, "dev"), get(params, "dev_fraction")) {
        (Some(_), Some(_)) => {
            return Err(TaskError::param(
                "dev_fraction",
                "give either `dev` (file(s)) or `dev_fraction` (a share of train held out), \
                 not both",
            ));
        }
        (Some(d), None) => DevSpec::Files(files(d, "dev")?),
        (None, Some(f)) => DevSpec::Fraction(fraction(f, "dev_fraction", true, true)?),
        (None, None) => {
            return Err(TaskError::param(
                "dev",
                "missing: give `dev` (file(s)) or `dev_fraction` (a share of train held out, \
                 e.g. 0.1), the set the best epoch is chosen on",
            ));
        }
    })
}

/// The evaluation sets: `test` (one named test) and the named sets of `eval`, names unique.
fn eval_specs(params: &Map<String, Value>) -> Result<Vec<EvalSpec>, TaskError> {
    let mut eval = Vec::new();
    if let Some(t) = get(params, "test") {
        eval.push(EvalSpec {
            name: "test".into(),
            files: files(t, "test")?,
        });
    }
    if let Some(e) = get(params, "eval") {
        for set in eval_sets(e)? {
            if eval.iter().any(|s| s.name == set.name) {
                return Err(TaskError::param(
                    "eval",
                    format!(
                        "two evaluation sets are named `{}` (`test:` is one named test)",
                        set.name
                    ),
                ));
            }
            eval.push(set);
        }
    }
    Ok(eval)
}

impl ProtocolSpec {
    /// Parses the protocol's params (see [`PARAMS`]; other keys are left to the stage) and
    /// checks them, without reading any file.
    pub fn from_params(params: &Map<String, Value>) -> Result<ProtocolSpec, TaskError> {
        let task = get(params, "task").ok_or_else(|| {
            TaskError::param(
                "task",
                format!(
                    "missing: name the task (one of {}) or define a `pair` task",
                    crate::task::BUILTIN_TASKS.join(", ")
                ),
            )
        })?;
        let task = Task::from_value(task, "task")?;
        let train = files(
            get(params, "train")
                .ok_or_else(|| TaskError::param("train", "missing: the training file(s)"))?,
            "train",
        )?;
        let dev = dev_spec(params)?;
        let eval = eval_specs(params)?;
        let spec = ProtocolSpec {
            task,
            train,
            dev,
            eval,
            split_seed: get(params, "split_seed")
                .map(|v| params::count(v, "split_seed").map(|s| s as u64))
                .transpose()?
                .unwrap_or(DEFAULT_SPLIT_SEED),
            max_train_examples: get(params, "max_train_examples")
                .map(|v| positive_count(v, "max_train_examples"))
                .transpose()?,
            max_eval_examples: get(params, "max_eval_examples")
                .map(|v| positive_count(v, "max_eval_examples"))
                .transpose()?,
            max_bad_fraction: get(params, "max_bad_fraction")
                .map(|v| fraction(v, "max_bad_fraction", false, false))
                .transpose()?
                .unwrap_or(DEFAULT_MAX_BAD_FRACTION),
            drop_eval_overlap: get(params, "drop_eval_overlap")
                .map(|v| params::boolean(v, "drop_eval_overlap"))
                .transpose()?
                .unwrap_or(true),
            test_fraction: get(params, "test_fraction")
                .map(|v| fraction(v, "test_fraction", true, true))
                .transpose()?,
        };
        spec.check_reading()?;
        spec.check_formats()?;
        spec.check_disjoint()?;
        Ok(spec)
    }

    /// Every file with its param path, in order: train, dev, evaluation sets.
    fn entries(&self) -> Vec<(String, &FileSpec)> {
        let mut out = Vec::new();
        for (i, f) in self.train.iter().enumerate() {
            out.push((format!("train[{i}]"), f));
        }
        if let DevSpec::Files(d) = &self.dev {
            for (i, f) in d.iter().enumerate() {
                out.push((format!("dev[{i}]"), f));
            }
        }
        for set in &self.eval {
            let base = if set.name == "test" {
                "test".to_string()
            } else {
                format!("eval.{}", set.name)
            };
            for (i, f) in set.files.iter().enumerate() {
                out.push((format!("{base}[{i}]"), f));
            }
        }
        out
    }

    /// A reading-comprehension protocol holds dev (and `test_fraction`'s `test`) out of its
    /// train files by article or document; `test_fraction` belongs to it alone.
    fn check_reading(&self) -> Result<(), TaskError> {
        let reading = self.task.kind().is_reading();
        if !reading && self.test_fraction.is_some() {
            return Err(TaskError::param(
                "test_fraction",
                format!(
                    "holds a test set out of train by article or document, for the reading \
                     tasks (cmrc2018, squad, c3); task {} takes `test: FILES`",
                    self.task.name()
                ),
            ));
        }
        if reading && matches!(self.dev, DevSpec::Files(_)) {
            return Err(TaskError::param(
                "dev",
                format!(
                    "task {} holds dev out of its train files by article or document (so that \
                     no context is on both sides): give `dev_fraction` instead of dev files",
                    self.task.name()
                ),
            ));
        }
        if let (Some(_), Some(_)) = (
            self.test_fraction,
            self.eval.iter().find(|e| e.name == "test"),
        ) {
            return Err(TaskError::param(
                "test_fraction",
                "makes the evaluation set `test` out of the train files; name the other \
                 evaluation files otherwise (`eval: {NAME: FILES}`)",
            ));
        }
        Ok(())
    }

    /// Each file's format must be of the task's kind, with labels the task has.
    fn check_formats(&self) -> Result<(), TaskError> {
        for (at, f) in self.entries() {
            let Some(format) = &f.format else { continue };
            let at = format!("{at}.format");
            if format.kind() != self.task.kind() {
                return Err(TaskError::param(
                    at,
                    format!(
                        "format {} is a {} task, but task {} is a {} task",
                        format.name(),
                        format.kind(),
                        self.task.name(),
                        self.task.kind()
                    ),
                ));
            }
            if let (Some(fl), Some(tl)) = (format.labels(), self.task.labels())
                && let Some(missing) = fl.iter().find(|l| !tl.contains(l))
            {
                return Err(TaskError::param(
                    at,
                    format!(
                        "format {} has label `{missing}`, which task {} lacks (its labels: {})",
                        format.name(),
                        self.task.name(),
                        tl.join(", ")
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Training on a file that is also evaluated on (or selected on) is a mistake.
    fn check_disjoint(&self) -> Result<(), TaskError> {
        let train: HashSet<PathBuf> = self.train.iter().map(|f| normal(&f.path)).collect();
        for (at, f) in self.entries() {
            if !at.starts_with("train") && train.contains(&normal(&f.path)) {
                return Err(TaskError::param(
                    at,
                    format!(
                        "{} is also a train file; evaluating on training data measures nothing \
                         (use dev_fraction to hold part of it out)",
                        f.path
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The warnings for files the protocol reads that exist but are not among a stage's
    /// declared `inputs` (so a change to them would not re-run it): one message per file,
    /// naming the stage `instance`. The finetune and baseline stages log these.
    pub fn undeclared(&self, instance: &str, root: &Path, inputs: &[PathBuf]) -> Vec<String> {
        let declared: Vec<PathBuf> = inputs
            .iter()
            .map(|p| std::fs::canonicalize(p).unwrap_or(p.clone()))
            .collect();
        self.paths()
            .into_iter()
            .filter(|path| {
                let full = root.join(path);
                let full = std::fs::canonicalize(&full).unwrap_or(full);
                full.exists() && !declared.contains(&full)
            })
            .map(|path| {
                format!(
                    "{instance}: {path} is not among the stage's `inputs:`, so a change to it will not re-run the stage"
                )
            })
            .collect()
    }

    /// Every file the protocol reads, as given, in order (train, dev, evaluation sets), each
    /// once: what the stage's `inputs` must cover for the cache to notice a changed file.
    pub fn paths(&self) -> Vec<&str> {
        let mut seen = HashSet::new();
        self.entries()
            .into_iter()
            .map(|(_, f)| f.path.as_str())
            .filter(|p| seen.insert(*p))
            .collect()
    }
}

/// A path with `.` components and doubled separators gone, to compare paths as given.
fn normal(p: &str) -> PathBuf {
    Path::new(p)
        .components()
        .filter(|c| !matches!(c, std::path::Component::CurDir))
        .collect()
}

#[cfg(test)]
mod tests;
