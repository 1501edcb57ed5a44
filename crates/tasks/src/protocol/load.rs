//! Loading a protocol: every file read (each must pass `max_bad_fraction`), train cleaned of
//! dev and evaluation examples, dev held out, the caps applied, the label counts taken.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use super::examples::FileRead;
use super::{DevSpec, Examples, FileSpec, Protocol, ProtocolSpec, Split};
use crate::error::TaskError;
use crate::read::FileReport;
use crate::split::{self, Stream};
use crate::task::{Task, choice_labels, tags_from_label2id};

/// Dev's own files with their ids, or the fraction of train to hold out.
type DevSource = Result<(Examples, Vec<usize>), f64>;

impl ProtocolSpec {
    /// Reads every file (relative paths from `root`, the workspace root), applies
    /// `max_bad_fraction` to each file, holds out and caps as asked.
    pub fn load(&self, root: &Path) -> Result<Protocol, TaskError> {
        if self.task.kind().is_reading() {
            return self.load_reading(root);
        }
        let mut loader = Loader {
            spec: self,
            root,
            labels: self.labels_before_reading(root)?,
            files: Vec::new(),
            num_choices: None,
        };
        // Everything is read first, so that train can be cleaned of examples that are also
        // dev or evaluation examples before anything is held out or capped.
        let (pool, train_files) = loader.read(&self.train)?;
        let dev_source: DevSource = match &self.dev {
            DevSpec::Files(files) => Ok(loader.read(files)?),
            DevSpec::Fraction(f) => Err(*f),
        };
        let mut eval = Vec::new();
        for set in &self.eval {
            let (examples, ids) = loader.read(&set.files)?;
            let n = examples.len();
            eval.push(Split::new(&set.name, examples, ids, n));
        }
        let (pool, dropped) = loader.drop_overlap(pool, &train_files, &dev_source, &eval)?;
        let (mut train, mut dev) = loader.split_dev(pool, train_files, dev_source)?;
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
            (Task::Choice(_), Some((n, _))) => choice_labels(*n),
            // The train files are never empty, and a file without examples is an error.
            (Task::Choice(_), None) => {
                return Err(TaskError::Split(
                    "the choice protocol read no examples".into(),
                ));
            }
            _ => loader.labels.clone(),
        };
        count(&mut train, &mut dev, &mut eval, labels.len());
        Ok(Protocol {
            spec: self.clone(),
            labels,
            num_choices: loader.num_choices.map(|(n, _)| n),
            files: loader.files,
            train,
            dev,
            eval,
            group_split: None,
        })
    }

    /// The class labels (tags) known before any data file is read: the task's, or those of
    /// its `label2id.json`; empty for a choice task (its N comes from the files).
    fn labels_before_reading(&self, root: &Path) -> Result<Vec<String>, TaskError> {
        match &self.task {
            Task::Tagging(t) => match &t.label2id {
                Some(path) => {
                    let resolved = resolve(root, path);
                    let text = pipeline_bounded::read_to_string(
                        &resolved,
                        MAX_LABEL2ID_BYTES,
                        "a label2id.json",
                    )
                    .map_err(|e| {
                        if e.is_not_found() {
                            TaskError::NotFound {
                                path: path.clone(),
                                resolved: resolved.clone(),
                            }
                        } else {
                            TaskError::Io {
                                path: path.clone(),
                                source: crate::error::reason(e),
                            }
                        }
                    })?;
                    tags_from_label2id(&text, path)
                }
                None => Ok(t.labels.clone()),
            },
            other => Ok(other.labels().map(<[String]>::to_vec).unwrap_or_default()),
        }
    }
}

/// The largest `label2id.json` read. MSRA NER's is 7 tags in under 100 bytes; a tag set of
/// thousands is still tens of KB, so past 1 MiB the file is not a tag map, and a device or a
/// still-growing file is not read on.
const MAX_LABEL2ID_BYTES: u64 = 1 << 20;

/// The overlap with train of dev and every evaluation set, and the label counts of every split.
pub(super) fn count(train: &mut Split, dev: &mut Split, eval: &mut [Split], classes: usize) {
    let seen = train.examples.texts();
    for s in std::iter::once(&mut *dev).chain(eval.iter_mut()) {
        s.overlap_with_train = Some(s.examples.count_in(&seen));
    }
    for s in std::iter::once(train)
        .chain(std::iter::once(dev))
        .chain(eval.iter_mut())
    {
        s.label_counts = s.examples.label_counts(classes);
    }
}

pub(super) fn resolve(root: &Path, path: &str) -> PathBuf {
    if Path::new(path).is_absolute() {
        PathBuf::from(path)
    } else {
        root.join(path)
    }
}

/// `a.tsv, b.tsv` for messages about a split.
fn describe(files: &[FileReport], ids: &[usize]) -> String {
    ids.iter()
        .map(|&i| files[i].path.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

struct Loader<'a> {
    spec: &'a ProtocolSpec,
    root: &'a Path,
    /// The task's labels (tags); empty for a choice task.
    labels: Vec<String>,
    files: Vec<FileReport>,
    /// N of a choice task and the file that fixed it.
    num_choices: Option<(usize, String)>,
}

impl Loader<'_> {
    /// Drops the train examples whose texts are those of a dev or evaluation example (with
    /// `drop_eval_overlap`), counted per file; the pool left and how many were dropped.
    fn drop_overlap(
        &mut self,
        pool: Examples,
        train_files: &[usize],
        dev_source: &DevSource,
        eval: &[Split],
    ) -> Result<(Examples, usize), TaskError> {
        if !self.spec.drop_eval_overlap {
            return Ok((pool, 0));
        }
        let mut held = HashSet::new();
        let dev_examples = dev_source.as_ref().ok().map(|(e, _)| e);
        for examples in dev_examples
            .into_iter()
            .chain(eval.iter().map(|s| &s.examples))
        {
            held.extend(examples.texts_iter());
        }
        let mut keep = Vec::with_capacity(pool.len());
        let mut dropped = 0;
        for (i, (text, file)) in pool.texts_iter().zip(pool.files()).enumerate() {
            if held.contains(&text) {
                self.files[file].dropped_eval_overlap += 1;
                dropped += 1;
            } else {
                keep.push(i);
            }
        }
        if keep.is_empty() {
            return Err(TaskError::Split(format!(
                "every train example ({}) is also a dev or evaluation example; train on \
                 other files (or set drop_eval_overlap: false)",
                describe(&self.files, train_files)
            )));
        }
        let pool = if dropped > 0 {
            pool.select(&keep)
        } else {
            pool
        };
        Ok((pool, dropped))
    }

    /// Train and dev: dev's own files, or a seeded stratified share of the pool held out.
    fn split_dev(
        &self,
        pool: Examples,
        train_files: Vec<usize>,
        dev_source: DevSource,
    ) -> Result<(Split, Split), TaskError> {
        let available = pool.len();
        Ok(match dev_source {
            Err(fraction) => {
                let (train_idx, dev_idx) = split::holdout(
                    &pool.strata(),
                    fraction,
                    self.spec.split_seed,
                )
                .map_err(|e| {
                    TaskError::Split(format!("{e} ({})", describe(&self.files, &train_files)))
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
        })
    }

    /// Reads files into one example list, registering each file's report.
    fn read(&mut self, files: &[FileSpec]) -> Result<(Examples, Vec<usize>), TaskError> {
        let mut out = Examples::empty(self.spec.task.kind());
        let mut ids = Vec::new();
        for f in files {
            let resolved = resolve(self.root, &f.path);
            let id = self.files.len();
            let format = f.format.as_ref().unwrap_or(&self.spec.task);
            let read = out.read_file(format, &resolved, &f.path, id, &self.labels)?;
            let Some(FileRead { report, choices }) = read else {
                // `from_params` checked every format's kind against the task's.
                return Err(TaskError::param(
                    "task",
                    format!(
                        "{}: format {} does not fit task {}",
                        f.path,
                        format.name(),
                        self.spec.task.name()
                    ),
                ));
            };
            if let Some((n, line)) = choices {
                self.check_choice_count(&f.path, n, line)?;
            }
            report.check_bad_fraction(self.spec.max_bad_fraction)?;
            self.files.push(report);
            ids.push(id);
        }
        Ok((out, ids))
    }

    /// Every choice file of a protocol has the N of the first: `found` choices in file
    /// `path`, whose first example is at `line`.
    fn check_choice_count(
        &mut self,
        path: &str,
        found: usize,
        line: usize,
    ) -> Result<(), TaskError> {
        match &self.num_choices {
            Some((n, from)) if *n != found => Err(TaskError::ChoiceCount {
                path: path.to_string(),
                line,
                found,
                expected: *n,
                expected_from: from.clone(),
            }),
            Some(_) => Ok(()),
            None => {
                self.num_choices = Some((found, format!("{path}:{line}")));
                Ok(())
            }
        }
    }
}
