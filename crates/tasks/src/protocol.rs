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

use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::TaskError;
use crate::params::{self, check_keys, show};
use crate::read::{ChoiceExample, FileReport, PairExample, read_choice_file, read_pair_file};
use crate::split::{self, Stream};
use crate::task::{Task, TaskKind, choice_labels};

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
    pub name: String,
    pub files: Vec<FileSpec>,
}

/// A protocol as the params define it; nothing read yet.
#[derive(Debug, Clone, PartialEq)]
pub struct ProtocolSpec {
    pub task: Task,
    pub train: Vec<FileSpec>,
    pub dev: DevSpec,
    /// In the order given (`test` first, then `eval` as a list in order, or as a map by name).
    pub eval: Vec<EvalSpec>,
    pub split_seed: u64,
    pub max_train_examples: Option<usize>,
    pub max_eval_examples: Option<usize>,
    pub max_bad_fraction: f64,
    /// Drop train examples whose texts are those of a dev or evaluation example.
    pub drop_eval_overlap: bool,
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
        let dev = match (get(params, "dev"), get(params, "dev_fraction")) {
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
        };
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
        };
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

    /// Reads every file (relative paths from `root`, the workspace root), applies
    /// `max_bad_fraction` to each file, holds out and caps as asked.
    pub fn load(&self, root: &Path) -> Result<Protocol, TaskError> {
        let mut loader = Loader {
            spec: self,
            root,
            files: Vec::new(),
            num_choices: None,
        };
        // Everything is read first, so that train can be cleaned of examples that are also
        // dev or evaluation examples before anything is held out or capped.
        let (mut pool, train_files) = loader.read(&self.train)?;
        // Ok: dev's own files; Err: the fraction of train to hold out.
        let dev_source = match &self.dev {
            DevSpec::Files(files) => Ok(loader.read(files)?),
            DevSpec::Fraction(f) => Err(*f),
        };
        let mut eval = Vec::new();
        for set in &self.eval {
            let (examples, ids) = loader.read(&set.files)?;
            let n = examples.len();
            eval.push(Split::new(&set.name, examples, ids, n));
        }

        let mut dropped = 0;
        if self.drop_eval_overlap {
            let mut held = HashSet::new();
            let dev_examples = dev_source.as_ref().ok().map(|(e, _)| e);
            for examples in dev_examples
                .into_iter()
                .chain(eval.iter().map(|s| &s.examples))
            {
                held.extend(examples.texts_iter());
            }
            let mut keep = Vec::with_capacity(pool.len());
            for (i, (text, file)) in pool.texts_iter().zip(pool.files()).enumerate() {
                if held.contains(&text) {
                    loader.files[file].dropped_eval_overlap += 1;
                    dropped += 1;
                } else {
                    keep.push(i);
                }
            }
            if keep.is_empty() {
                return Err(TaskError::Split(format!(
                    "every train example ({}) is also a dev or evaluation example; train on \
                     other files (or set drop_eval_overlap: false)",
                    describe(&loader.files, &train_files)
                )));
            }
            if dropped > 0 {
                pool = pool.select(&keep);
            }
        }
        let available = pool.len();

        let (mut train, mut dev) = match dev_source {
            Err(fraction) => {
                let (train_idx, dev_idx) =
                    split::holdout(&pool.labels(), fraction, self.split_seed).map_err(|e| {
                        TaskError::Split(format!("{e} ({})", describe(&loader.files, &train_files)))
                    })?;
                let train = Split::new("train", pool.select(&train_idx), train_files, available);
                let dev = Split {
                    held_out_from_train: true,
                    ..Split::new("dev", pool.select(&dev_idx), Vec::new(), available)
                };
                (train, dev)
            }
            Ok((examples, ids)) => {
                let n = examples.len();
                (
                    Split::new("train", pool, train_files, available),
                    Split::new("dev", examples, ids, n),
                )
            }
        };
        train.dropped_eval_overlap = dropped;
        if let Some(max) = self.max_train_examples {
            train.cap(max, self.split_seed, Stream::TrainCap);
        }
        if let Some(max) = self.max_eval_examples {
            dev.cap(max, self.split_seed, Stream::EvalCap);
            for s in &mut eval {
                s.cap(max, self.split_seed, Stream::EvalCap);
            }
        }

        let labels = match (&self.task, &loader.num_choices) {
            (Task::Pair(p), _) => p.labels.clone(),
            (Task::Choice(_), Some((n, _))) => choice_labels(*n),
            // The train files are never empty, and a file without examples is an error.
            (Task::Choice(_), None) => {
                return Err(TaskError::Split(
                    "the choice protocol read no examples".into(),
                ));
            }
        };
        let classes = labels.len();
        let seen = train.examples.texts();
        for s in std::iter::once(&mut dev).chain(eval.iter_mut()) {
            s.overlap_with_train = Some(s.examples.count_in(&seen));
        }
        for s in std::iter::once(&mut train)
            .chain(std::iter::once(&mut dev))
            .chain(eval.iter_mut())
        {
            s.label_counts = vec![0; classes];
            for l in s.examples.labels() {
                s.label_counts[l] += 1;
            }
        }
        Ok(Protocol {
            spec: self.clone(),
            labels,
            num_choices: loader.num_choices.map(|(n, _)| n),
            files: loader.files,
            train,
            dev,
            eval,
        })
    }
}

/// `a.tsv, b.tsv` for messages about a split.
fn describe(files: &[FileReport], ids: &[usize]) -> String {
    ids.iter()
        .map(|&i| files[i].path.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A path with `.` components and doubled separators gone, to compare paths as given.
fn normal(p: &str) -> PathBuf {
    Path::new(p)
        .components()
        .filter(|c| !matches!(c, std::path::Component::CurDir))
        .collect()
}

struct Loader<'a> {
    spec: &'a ProtocolSpec,
    root: &'a Path,
    files: Vec<FileReport>,
    /// N of a choice task and the file that fixed it.
    num_choices: Option<(usize, String)>,
}

impl Loader<'_> {
    /// Reads files into one example list, registering each file's report.
    fn read(&mut self, files: &[FileSpec]) -> Result<(Examples, Vec<usize>), TaskError> {
        let mut out = match self.spec.task.kind() {
            TaskKind::Pair => Examples::Pair(Vec::new()),
            TaskKind::Choice => Examples::Choice(Vec::new()),
        };
        let mut ids = Vec::new();
        for f in files {
            let resolved = if Path::new(&f.path).is_absolute() {
                PathBuf::from(&f.path)
            } else {
                self.root.join(&f.path)
            };
            let id = self.files.len();
            let format = f.format.as_ref().unwrap_or(&self.spec.task);
            let report = match (format, &mut out) {
                (Task::Pair(p), Examples::Pair(all)) => {
                    // `labels()` of a pair task is always Some.
                    let labels = self.spec.task.labels().unwrap_or_default();
                    let r = read_pair_file(&resolved, &f.path, p, labels)?;
                    all.extend(
                        r.examples
                            .into_iter()
                            .map(|e| PairExample { file: id, ..e }),
                    );
                    r.report
                }
                (Task::Choice(c), Examples::Choice(all)) => {
                    let r = read_choice_file(&resolved, &f.path, c)?;
                    match &self.num_choices {
                        Some((n, from)) if *n != r.num_choices => {
                            return Err(TaskError::ChoiceCount {
                                path: f.path.clone(),
                                line: r.examples.first().map_or(1, |e| e.line),
                                found: r.num_choices,
                                expected: *n,
                                expected_from: from.clone(),
                            });
                        }
                        Some(_) => {}
                        None => {
                            let line = r.examples.first().map_or(1, |e| e.line);
                            self.num_choices = Some((r.num_choices, format!("{}:{line}", f.path)));
                        }
                    }
                    all.extend(
                        r.examples
                            .into_iter()
                            .map(|e| ChoiceExample { file: id, ..e }),
                    );
                    r.report
                }
                // `from_params` checked every format's kind against the task's.
                _ => {
                    return Err(TaskError::param(
                        "task",
                        format!(
                            "{}: format {} does not fit task {}",
                            f.path,
                            format.name(),
                            self.spec.task.name()
                        ),
                    ));
                }
            };
            report.check_bad_fraction(self.spec.max_bad_fraction)?;
            self.files.push(report);
            ids.push(id);
        }
        Ok((out, ids))
    }
}

/// The examples of a split, of the task's kind.
#[derive(Debug, Clone, PartialEq)]
pub enum Examples {
    Pair(Vec<PairExample>),
    Choice(Vec<ChoiceExample>),
}

impl Examples {
    pub fn len(&self) -> usize {
        match self {
            Examples::Pair(v) => v.len(),
            Examples::Choice(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The gold class ids, in order.
    pub fn labels(&self) -> Vec<usize> {
        match self {
            Examples::Pair(v) => v.iter().map(|e| e.label).collect(),
            Examples::Choice(v) => v.iter().map(|e| e.answer).collect(),
        }
    }

    /// The file index of each example, in order.
    pub fn files(&self) -> Vec<usize> {
        match self {
            Examples::Pair(v) => v.iter().map(|e| e.file).collect(),
            Examples::Choice(v) => v.iter().map(|e| e.file).collect(),
        }
    }

    /// The examples at `indices`, in that order.
    pub fn select(&self, indices: &[usize]) -> Examples {
        match self {
            Examples::Pair(v) => Examples::Pair(indices.iter().map(|&i| v[i].clone()).collect()),
            Examples::Choice(v) => {
                Examples::Choice(indices.iter().map(|&i| v[i].clone()).collect())
            }
        }
    }

    pub fn as_pairs(&self) -> Option<&[PairExample]> {
        match self {
            Examples::Pair(v) => Some(v),
            Examples::Choice(_) => None,
        }
    }

    pub fn as_choices(&self) -> Option<&[ChoiceExample]> {
        match self {
            Examples::Choice(v) => Some(v),
            Examples::Pair(_) => None,
        }
    }

    /// Each example's texts joined (labels left out), for the overlap count.
    fn texts(&self) -> HashSet<String> {
        self.texts_iter().collect()
    }

    fn count_in(&self, seen: &HashSet<String>) -> usize {
        self.texts_iter().filter(|t| seen.contains(t)).count()
    }

    fn texts_iter(&self) -> Box<dyn Iterator<Item = String> + '_> {
        match self {
            Examples::Pair(v) => Box::new(v.iter().map(|e| format!("{}\t{}", e.text_a, e.text_b))),
            Examples::Choice(v) => Box::new(
                v.iter()
                    .map(|e| format!("{}\t{}", e.prompt, e.choices.join("\t"))),
            ),
        }
    }
}

/// One split of a loaded protocol: train, dev, or a named evaluation set.
#[derive(Debug, Clone, PartialEq)]
pub struct Split {
    /// `train`, `dev`, or the evaluation set's name.
    pub name: String,
    pub examples: Examples,
    /// The files read for this split (indices into [`Protocol::files`]); empty for a dev set
    /// held out of train.
    pub files: Vec<usize>,
    /// Examples there were before holding out and capping (for a held-out dev set: the train
    /// pool it came from).
    pub available: usize,
    /// Whether this is a dev set held out of the train files.
    pub held_out_from_train: bool,
    /// Examples per class id.
    pub label_counts: Vec<usize>,
    /// For dev and evaluation sets: how many examples have exactly the texts of a training
    /// example (duplicates across files, or a leak).
    pub overlap_with_train: Option<usize>,
    /// The cap applied (`max_train_examples` / `max_eval_examples`) if it removed examples.
    pub capped_to: Option<usize>,
    /// For train: examples dropped because a dev or evaluation example has the same texts
    /// (`drop_eval_overlap`).
    pub dropped_eval_overlap: usize,
}

impl Split {
    fn new(name: &str, examples: Examples, files: Vec<usize>, available: usize) -> Split {
        Split {
            name: name.to_string(),
            examples,
            files,
            available,
            held_out_from_train: false,
            label_counts: Vec::new(),
            overlap_with_train: None,
            capped_to: None,
            dropped_eval_overlap: 0,
        }
    }

    fn cap(&mut self, max: usize, seed: u64, stream: Stream) {
        if self.examples.len() > max {
            let keep = split::subsample(&self.examples.labels(), max, seed, stream);
            self.examples = self.examples.select(&keep);
            self.capped_to = Some(max);
        }
    }

    pub fn len(&self) -> usize {
        self.examples.len()
    }

    pub fn is_empty(&self) -> bool {
        self.examples.is_empty()
    }
}

/// A loaded protocol: the examples of every split and what each file held.
#[derive(Debug, Clone, PartialEq)]
pub struct Protocol {
    pub spec: ProtocolSpec,
    /// The class labels in class-id order (for a choice task `0` … `N-1`).
    pub labels: Vec<String>,
    /// N of a choice task.
    pub num_choices: Option<usize>,
    /// Every file read, in order; [`PairExample::file`] indexes it.
    pub files: Vec<FileReport>,
    pub train: Split,
    pub dev: Split,
    pub eval: Vec<Split>,
}

/// One split in [`ProtocolSummary`].
#[derive(Debug, Clone, Serialize)]
pub struct SplitSummary {
    pub name: String,
    pub examples: usize,
    pub available: usize,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub held_out_from_train: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capped_to: Option<usize>,
    pub label_counts: Vec<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overlap_with_train: Option<usize>,
    #[serde(skip_serializing_if = "is_zero")]
    pub dropped_eval_overlap: usize,
    pub files: Vec<FileReport>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// What metrics.json records of a protocol.
#[derive(Debug, Clone, Serialize)]
pub struct ProtocolSummary {
    pub task: String,
    pub kind: TaskKind,
    pub labels: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub num_choices: Option<usize>,
    pub split_seed: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dev_fraction: Option<f64>,
    pub max_train_examples: Option<usize>,
    pub max_eval_examples: Option<usize>,
    pub max_bad_fraction: f64,
    pub drop_eval_overlap: bool,
    pub train: SplitSummary,
    pub dev: SplitSummary,
    pub eval: Vec<SplitSummary>,
}

impl Protocol {
    pub fn num_classes(&self) -> usize {
        self.labels.len()
    }

    /// The path (as given) of the file an example came from.
    pub fn file_path(&self, file: usize) -> &str {
        self.files.get(file).map_or("", |f| f.path.as_str())
    }

    /// Total bad rows over every file read.
    pub fn bad_rows(&self) -> usize {
        self.files.iter().map(|f| f.bad.total).sum()
    }

    fn split_summary(&self, s: &Split) -> SplitSummary {
        SplitSummary {
            name: s.name.clone(),
            examples: s.len(),
            available: s.available,
            held_out_from_train: s.held_out_from_train,
            capped_to: s.capped_to,
            label_counts: s.label_counts.clone(),
            overlap_with_train: s.overlap_with_train,
            dropped_eval_overlap: s.dropped_eval_overlap,
            files: s.files.iter().map(|&i| self.files[i].clone()).collect(),
        }
    }

    /// The protocol as metrics.json records it.
    pub fn summary(&self) -> ProtocolSummary {
        ProtocolSummary {
            task: self.spec.task.name().to_string(),
            kind: self.spec.task.kind(),
            labels: self.labels.clone(),
            num_choices: self.num_choices,
            split_seed: self.spec.split_seed,
            dev_fraction: match self.spec.dev {
                DevSpec::Fraction(f) => Some(f),
                DevSpec::Files(_) => None,
            },
            max_train_examples: self.spec.max_train_examples,
            max_eval_examples: self.spec.max_eval_examples,
            max_bad_fraction: self.spec.max_bad_fraction,
            drop_eval_overlap: self.spec.drop_eval_overlap,
            train: self.split_summary(&self.train),
            dev: self.split_summary(&self.dev),
            eval: self.eval.iter().map(|s| self.split_summary(s)).collect(),
        }
    }

    /// [`Protocol::summary`] as JSON.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self.summary()).unwrap_or(Value::Null)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::fmt::Write as _;

    fn spec(v: Value) -> Result<ProtocolSpec, TaskError> {
        ProtocolSpec::from_params(v.as_object().expect("a map"))
    }

    fn err(v: Value) -> String {
        spec(v).unwrap_err().to_string()
    }

    /// `n` LCQMC rows, label = i % 2, each pair distinct.
    fn lcqmc_rows(n: usize, tag: &str) -> String {
        let mut s = String::new();
        for i in 0..n {
            writeln!(s, "问题{tag}{i}\t句子{tag}{i}\t{}", i % 2).unwrap();
        }
        s
    }

    fn nli_rows(n: usize, tag: &str) -> String {
        let mut s = String::new();
        for i in 0..n {
            writeln!(s, "前提{tag}{i}\t假设{tag}{i}\t{}", NLI[i % 3]).unwrap();
        }
        s
    }
    const NLI: [&str; 3] = ["contradiction", "entailment", "neutral"];

    fn dir(files: &[(&str, &str)]) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for (name, text) in files {
            let p = d.path().join(name);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        d
    }

    #[test]
    fn parses_the_lcqmc_and_xnli_shapes() {
        let s = spec(json!({
            "task": "lcqmc", "train": "d/lcqmc/dev.tsv", "dev_fraction": 0.1,
            "test": "d/lcqmc/test.tsv", "lr": 1e-4, "epochs": 3
        }))
        .unwrap();
        assert_eq!(s.dev, DevSpec::Fraction(0.1));
        assert_eq!(s.split_seed, DEFAULT_SPLIT_SEED);
        assert_eq!(s.max_bad_fraction, DEFAULT_MAX_BAD_FRACTION);
        assert_eq!(s.eval.len(), 1);
        assert_eq!(s.eval[0].name, "test");
        assert_eq!(s.paths(), ["d/lcqmc/dev.tsv", "d/lcqmc/test.tsv"]);

        let s = spec(json!({
            "task": "xnli",
            "train": [
                {"path": "d/nli_extra/cmnli/dev.tsv", "format": "cmnli"},
                {"path": "d/nli_extra/ocnli/dev.tsv", "format": "ocnli"},
                "d/more.tsv"
            ],
            "dev_fraction": 0.05, "split_seed": 7, "max_train_examples": 1000,
            "max_eval_examples": null,
            "eval": {"xnli_test": "d/xnli_zh/test.tsv", "xnli_dev": "d/xnli_zh/dev.tsv"}
        }))
        .unwrap();
        assert_eq!(s.train.len(), 3);
        assert_eq!(s.train[0].format.as_ref().unwrap().name(), "cmnli");
        assert!(s.train[2].format.is_none());
        assert_eq!(s.split_seed, 7);
        assert_eq!(s.max_train_examples, Some(1000));
        assert_eq!(s.max_eval_examples, None);
        let names: Vec<&str> = s.eval.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["xnli_dev", "xnli_test"], "a map is ordered by name");

        // The list form keeps its order; `test` comes first.
        let s = spec(json!({
            "task": "xnli", "train": "a.tsv", "dev": ["b.tsv", "c.tsv"], "test": "t.tsv",
            "eval": [{"name": "z", "path": "z.tsv", "format": "xnli"},
                     {"name": "y", "files": ["y1.tsv", {"path": "y2.tsv", "format": "cmnli"}]}]
        }))
        .unwrap();
        let names: Vec<&str> = s.eval.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["test", "z", "y"]);
        assert_eq!(s.eval[2].files.len(), 2);
        let DevSpec::Files(d) = &s.dev else { panic!() };
        assert_eq!(d.len(), 2);
        assert_eq!(
            s.paths(),
            [
                "a.tsv", "b.tsv", "c.tsv", "t.tsv", "z.tsv", "y1.tsv", "y2.tsv"
            ]
        );
    }

    #[test]
    fn param_errors_name_the_param() {
        let base = |extra: Value| {
            let mut m = json!({"task": "xnli", "train": "a.tsv", "dev_fraction": 0.1});
            for (k, v) in extra.as_object().unwrap() {
                if v.is_null() {
                    m.as_object_mut().unwrap().remove(k);
                } else {
                    m[k] = v.clone();
                }
            }
            err(m)
        };
        let cases: &[(Value, &str)] = &[
            (json!({"task": null}), "param `task`: missing"),
            (json!({"train": null}), "param `train`: missing"),
            (
                json!({"train": []}),
                "param `train`: the list of files is empty",
            ),
            (json!({"train": [3]}), "param `train[0]`: expected a path"),
            (
                json!({"train": [{"pth": "a"}]}),
                "unknown key `pth` (did you mean `path`?)",
            ),
            (json!({"dev": "b.tsv"}), "param `dev_fraction`: give either"),
            (json!({"dev_fraction": null}), "param `dev`: missing"),
            (
                json!({"dev_fraction": 1.0}),
                "param `dev_fraction`: 1 must be in (0, 1)",
            ),
            (
                json!({"dev_fraction": "x"}),
                "param `dev_fraction`: expected a number",
            ),
            (
                json!({"max_bad_fraction": 2}),
                "param `max_bad_fraction`: 2 must be in [0, 1]",
            ),
            (
                json!({"max_train_examples": 0}),
                "param `max_train_examples`: must be at least 1",
            ),
            (
                json!({"max_eval_examples": -3}),
                "param `max_eval_examples`: expected a non-negative",
            ),
            (json!({"split_seed": "abc"}), "param `split_seed`"),
            (
                json!({"drop_eval_overlap": "yes"}),
                "param `drop_eval_overlap`: expected true or false",
            ),
            (
                json!({"train": [{"path": "a.tsv", "format": "lcqmc"}]}),
                "param `train[0].format`: format lcqmc has label `0`, which task xnli lacks",
            ),
            (
                json!({"train": [{"path": "a.tsv", "format": "choice"}]}),
                "param `train[0].format`: format choice is a choice task, but task xnli is a pair task",
            ),
            (
                json!({"test": "a.tsv"}),
                "param `test[0]`: a.tsv is also a train file",
            ),
            (
                json!({"eval": {"x": "./a.tsv"}}),
                "param `eval.x[0]`: ./a.tsv is also a train file",
            ),
            (
                json!({"eval": {"dev": "b.tsv"}}),
                "`dev` is the name of the dev split",
            ),
            (json!({"eval": {"a b": "b.tsv"}}), "must be letters, digits"),
            (
                json!({"eval": {"path": "b.tsv"}}),
                "give each evaluation set a name",
            ),
            (
                json!({"eval": "b.tsv"}),
                "param `eval`: expected a map of named",
            ),
            (
                json!({"eval": [{"path": "b.tsv"}]}),
                "param `eval[0]`: an evaluation set needs a `name`",
            ),
            (
                json!({"eval": [{"name": "x"}]}),
                "needs either `files` or `path`",
            ),
            (
                json!({"eval": [{"name": "x", "files": "b.tsv", "format": "xnli"}]}),
                "`format` goes with `path`",
            ),
            (
                json!({"eval": {"test": "c.tsv"}, "test": "b.tsv"}),
                "two evaluation sets are named `test`",
            ),
            (json!({"task": "xnil"}), "did you mean `xnli`"),
        ];
        for (extra, want) in cases {
            let got = base(extra.clone());
            assert!(got.contains(want), "{extra}: got {got:?}, want {want:?}");
        }
    }

    #[test]
    fn lcqmc_protocol_holds_out_a_seeded_stratified_dev_set() {
        let d = dir(&[
            ("lcqmc/dev.tsv", &lcqmc_rows(100, "d")),
            (
                "lcqmc/test.tsv",
                &(lcqmc_rows(30, "t") + "问题d3\t句子d3\t1\n"),
            ),
        ]);
        let params = json!({"task": "lcqmc", "train": "lcqmc/dev.tsv", "dev_fraction": 0.1,
                            "test": "lcqmc/test.tsv"});
        let lines_of = |s: &Split| -> Vec<usize> {
            s.examples
                .as_pairs()
                .unwrap()
                .iter()
                .map(|e| e.line)
                .collect()
        };

        // Without dropping eval overlap: 100 = 90 + 10, stratified.
        let mut keep = params.clone();
        keep["drop_eval_overlap"] = json!(false);
        let p = spec(keep).unwrap().load(d.path()).unwrap();
        assert_eq!((p.train.len(), p.dev.len(), p.eval[0].len()), (90, 10, 31));
        assert_eq!(p.dev.label_counts, [5, 5]);
        assert_eq!(p.train.label_counts, [45, 45]);
        // The test row that repeats dev line 4 is counted if that row landed in train.
        let in_train = lines_of(&p.train).contains(&4);
        assert_eq!(p.eval[0].overlap_with_train, Some(usize::from(in_train)));
        assert_eq!(p.train.dropped_eval_overlap, 0);

        // By default that row leaves the train pool first: 99 = 89 + 10.
        let p = spec(params.clone()).unwrap().load(d.path()).unwrap();
        assert_eq!((p.train.len(), p.dev.len(), p.eval[0].len()), (89, 10, 31));
        assert_eq!(p.train.available, 99);
        assert_eq!(p.train.dropped_eval_overlap, 1);
        assert_eq!(p.files[0].dropped_eval_overlap, 1);
        assert_eq!(p.eval[0].overlap_with_train, Some(0));
        assert!(p.dev.held_out_from_train);
        assert_eq!(p.labels, ["0", "1"]);
        // Train and dev partition the rest of the file.
        let mut lines: Vec<usize> = lines_of(&p.train);
        lines.extend(lines_of(&p.dev));
        lines.sort_unstable();
        assert_eq!(lines, (1..=100).filter(|&l| l != 4).collect::<Vec<_>>());
        // Same seed, same split; another seed, another split.
        let again = spec(params.clone()).unwrap().load(d.path()).unwrap();
        assert_eq!(again.dev, p.dev);
        let mut other = params.clone();
        other["split_seed"] = json!(1);
        assert_ne!(spec(other).unwrap().load(d.path()).unwrap().dev, p.dev);
        // Files and examples point at each other.
        let test_ex = &p.eval[0].examples.as_pairs().unwrap()[0];
        assert_eq!(p.file_path(test_ex.file), "lcqmc/test.tsv");

        let j = p.to_json();
        assert_eq!(j["task"], "lcqmc");
        assert_eq!(j["kind"], "pair");
        assert_eq!(j["split_seed"], 12345);
        assert_eq!(j["dev_fraction"], 0.1);
        assert_eq!(j["drop_eval_overlap"], true);
        assert_eq!(j["train"]["examples"], 89);
        assert_eq!(j["train"]["available"], 99);
        assert_eq!(j["train"]["dropped_eval_overlap"], 1);
        assert_eq!(j["train"]["files"][0]["path"], "lcqmc/dev.tsv");
        assert_eq!(j["train"]["files"][0]["rows"], 100);
        assert_eq!(j["train"]["files"][0]["dropped_eval_overlap"], 1);
        assert_eq!(j["train"]["files"][0]["bad"]["total"], 0);
        assert_eq!(j["dev"]["held_out_from_train"], true);
        assert_eq!(j["dev"]["files"], json!([]));
        assert_eq!(j["eval"][0]["name"], "test");
        assert_eq!(j["eval"][0]["files"][0]["rows"], 31);
        assert!(
            j["eval"][0]["files"][0]
                .get("dropped_eval_overlap")
                .is_none()
        );
        assert_eq!(j["max_train_examples"], Value::Null);
    }

    #[test]
    fn train_entirely_inside_eval_is_an_error() {
        let d = dir(&[
            ("a.tsv", &lcqmc_rows(10, "a")),
            ("b.tsv", &lcqmc_rows(12, "a")),
        ]);
        let params =
            json!({"task": "lcqmc", "train": "a.tsv", "dev_fraction": 0.1, "test": "b.tsv"});
        let e = spec(params).unwrap().load(d.path()).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("every train example (a.tsv) is also a dev or evaluation example"),
            "{e}"
        );
    }

    #[test]
    fn xnli_protocol_mixes_formats_and_names_eval_sets() {
        let header = "text_a\ttext_b\tlabel\n";
        let d = dir(&[
            ("nli/cmnli.tsv", &nli_rows(60, "c")),
            (
                "nli/snli.tsv",
                &(nli_rows(30, "s") + "甲\t乙\tcontradictory\n坏\t行\t-\n"),
            ),
            ("xnli/dev.tsv", &(header.to_string() + &nli_rows(12, "x"))),
            ("xnli/test.tsv", &(header.to_string() + &nli_rows(15, "y"))),
        ]);
        let p = spec(json!({
            "task": "xnli",
            "train": [{"path": "nli/cmnli.tsv", "format": "cmnli"},
                      {"path": "nli/snli.tsv", "format": "cnsd_snli"}],
            "dev_fraction": 0.05, "max_bad_fraction": 0.05, "max_train_examples": 50,
            "eval": {"xnli_dev": "xnli/dev.tsv", "xnli_test": "xnli/test.tsv"}
        }))
        .unwrap()
        .load(d.path())
        .unwrap();
        assert_eq!(p.labels, NLI);
        // 60 + 31 = 91 examples, 5 % = 5 held out, then capped to 50.
        assert_eq!(p.train.available, 91);
        assert_eq!(p.dev.len(), 5);
        assert_eq!(p.train.len(), 50);
        assert_eq!(p.train.capped_to, Some(50));
        assert_eq!(p.eval.iter().map(|s| s.len()).collect::<Vec<_>>(), [12, 15]);
        assert_eq!(p.eval[1].label_counts, [5, 5, 5]);
        assert_eq!(p.files.len(), 4);
        assert_eq!(p.files[1].bad.total, 1);
        assert_eq!(p.files[1].bad.samples[0].line, 32);
        assert_eq!(p.bad_rows(), 1);
        assert!(p.files[2].header);
        let j = p.to_json();
        assert_eq!(j["train"]["files"][1]["format"], "cnsd_snli");
        assert_eq!(
            j["train"]["files"][1]["bad"]["by_reason"]["unknown_label"],
            1
        );
        assert_eq!(j["eval"][1]["name"], "xnli_test");
        assert_eq!(j["train"]["capped_to"], 50);

        // The default threshold (1 %) rejects that file: 1 of 32 rows.
        let e = spec(json!({
            "task": "xnli", "train": {"path": "nli/snli.tsv", "format": "cnsd_snli"},
            "dev": "xnli/dev.tsv"
        }))
        .unwrap()
        .load(d.path())
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("nli/snli.tsv: 1 of 32 rows are bad (3.12 %, more than max_bad_fraction = 0.01): unknown_label 1; e.g. nli/snli.tsv:32 unknown_label"),
            "{e}"
        );

        // XNLI's file read as an NLI file without header.
        let e = spec(json!({"task": "cmnli", "train": "xnli/test.tsv", "dev_fraction": 0.1}))
            .unwrap()
            .load(d.path())
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("xnli/test.tsv:1: looks like a header; set header: true"),
            "{e}"
        );
    }

    #[test]
    fn eval_caps_and_missing_files() {
        let d = dir(&[
            ("a.tsv", &lcqmc_rows(40, "a")),
            ("b.tsv", &lcqmc_rows(40, "b")),
        ]);
        let p = spec(json!({"task": "afqmc", "train": "a.tsv", "dev": "b.tsv",
                            "max_eval_examples": 11, "test": "b2.tsv"}))
        .unwrap();
        let e = p.load(d.path()).unwrap_err();
        assert!(
            matches!(e, TaskError::NotFound { ref path, .. } if path == "b2.tsv"),
            "{e}"
        );
        let p = spec(json!({"task": "afqmc", "train": "a.tsv", "dev": "b.tsv",
                            "max_eval_examples": 11}))
        .unwrap()
        .load(d.path())
        .unwrap();
        assert_eq!((p.train.len(), p.dev.len()), (40, 11));
        assert_eq!(p.dev.capped_to, Some(11));
        assert_eq!(p.dev.available, 40);
        assert!(!p.dev.held_out_from_train);
        assert_eq!(p.dev.overlap_with_train, Some(0));
        assert!(p.eval.is_empty());
    }

    #[test]
    fn choice_protocol() {
        let line = |p: &str, n: usize, a: usize| {
            let choices: Vec<String> = (0..n).map(|i| format!("选项{p}{i}")).collect();
            json!({"prompt": format!("问题{p}"), "choices": choices, "answer": a}).to_string()
                + "\n"
        };
        let train: String = (0..20).map(|i| line(&format!("t{i}"), 3, i % 3)).collect();
        let test: String = (0..6).map(|i| line(&format!("s{i}"), 3, i % 3)).collect();
        let four: String = (0..6).map(|i| line(&format!("f{i}"), 4, i % 4)).collect();
        let d = dir(&[
            ("train.jsonl", &train),
            ("test.jsonl", &test),
            ("four.jsonl", &four),
        ]);
        let p = spec(
            json!({"task": "choice", "train": "train.jsonl", "dev_fraction": 0.2,
                            "test": "test.jsonl"}),
        )
        .unwrap()
        .load(d.path())
        .unwrap();
        assert_eq!(p.num_choices, Some(3));
        assert_eq!(p.labels, ["0", "1", "2"]);
        assert_eq!((p.train.len(), p.dev.len(), p.eval[0].len()), (16, 4, 6));
        assert_eq!(p.to_json()["num_choices"], 3);
        let e = spec(
            json!({"task": "choice", "train": "train.jsonl", "dev_fraction": 0.2,
                            "test": "four.jsonl"}),
        )
        .unwrap()
        .load(d.path())
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "four.jsonl:1: 4 choices, but train.jsonl:1 has 3; every line of a choice task must \
             have the same number of choices"
        );
    }

    #[test]
    fn known_params_cover_the_parser() {
        // Every key the parser reads is listed, so the stage's typo check accepts it.
        for k in [
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
        ] {
            assert!(crate::known_params().contains(&k), "{k}");
        }
        assert_eq!(crate::known_params().len(), 11);
    }
}
