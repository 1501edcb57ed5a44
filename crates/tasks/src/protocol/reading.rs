//! Loading a reading-comprehension protocol (`cmrc2018`, `squad`, `c3`): the train files are
//! read with their own readers ([`crate::squad`], [`crate::c3`]), and dev — with
//! `test_fraction`, also the evaluation set `test` — is held out of them **by article or
//! document** ([`crate::group_split`]), so that no context is on two sides of the split.
//!
//! The shared data has labelled dev sets only (CMRC 2018's `test.json` holds `FAKE_ANSWER`
//! placeholders; C3 publishes no test answers), so the protocol pipeline.yaml gives both is a
//! fixed, seeded 80 / 10 / 10 split of dev by group: train, select (`dev`), report (`test`).
//! It is ours, and metrics.json records it (`group_split`). A labelled file of its own can
//! still be an evaluation set (`eval: {NAME: FILE}`), read and checked the same way.
//!
//! Then as for the other tasks: train questions whose context and question are those of an
//! evaluation file's are dropped (`drop_eval_overlap`), and the caps draw seeded subsamples of
//! questions (`max_train_examples`, `max_eval_examples`).

use std::path::Path;

use super::load::{count, resolve};
use super::{DevSpec, Examples, FileSpec, Protocol, ProtocolSpec, Split};
use crate::c3::{C3_CHOICES, read_c3};
use crate::error::TaskError;
use crate::group_split::split_by_group;
use crate::read::{FileReport, ReadingReport};
use crate::split::Stream;
use crate::squad::read_squad;
use crate::task::{Task, choice_labels};

/// The examples of some files, each example's group (article or document, numbered across
/// the files), and the files' ids in [`Protocol::files`].
struct Read {
    examples: Examples,
    groups: Vec<usize>,
    files: Vec<usize>,
}

impl ProtocolSpec {
    /// Reads a reading-comprehension protocol (see the module doc).
    pub(super) fn load_reading(&self, root: &Path) -> Result<Protocol, TaskError> {
        let DevSpec::Fraction(dev_fraction) = self.dev else {
            // `from_params` refuses dev files for these tasks.
            return Err(TaskError::param("dev", "give dev_fraction"));
        };
        let test_fraction = self.test_fraction.unwrap_or(0.0);
        let mut reports = Vec::new();
        let pool = self.read_reading(root, &self.train, &mut reports)?;
        let mut eval = Vec::new();
        for set in &self.eval {
            let r = self.read_reading(root, &set.files, &mut reports)?;
            let n = r.examples.len();
            eval.push(Split::new(&set.name, r.examples, r.files, n));
        }
        let (pool, dropped) = self.drop_eval_overlap(pool, &eval, &mut reports);
        let split = split_by_group(&pool.groups, dev_fraction, test_fraction, self.split_seed)
            .map_err(|e| TaskError::Split(format!("{e} ({})", describe(&reports, &pool.files))))?;
        let available = pool.examples.len();
        let held = |name: &str, idx: &[usize]| Split {
            held_out_from_train: true,
            ..Split::new(name, pool.examples.select(idx), Vec::new(), available)
        };
        let mut train = Split::new(
            "train",
            pool.examples.select(&split.train),
            pool.files.clone(),
            available,
        );
        train.dropped_eval_overlap = dropped;
        let mut dev = held("dev", &split.dev);
        if test_fraction > 0.0 {
            eval.insert(0, held("test", &split.test));
        }
        if let Some(max) = self.max_train_examples {
            train.cap(max, self.split_seed, Stream::TrainCap);
        }
        if let Some(max) = self.max_eval_examples {
            dev.cap(max, self.split_seed, Stream::EvalCap);
            for s in &mut eval {
                s.cap(max, self.split_seed, Stream::EvalCap);
            }
        }
        let choices = matches!(self.task, Task::ReadingChoice(_));
        let labels = if choices {
            choice_labels(C3_CHOICES)
        } else {
            Vec::new()
        };
        count(&mut train, &mut dev, &mut eval, labels.len());
        Ok(Protocol {
            spec: self.clone(),
            labels,
            num_choices: choices.then_some(C3_CHOICES),
            files: reports,
            train,
            dev,
            eval,
            group_split: Some(split.summary(self.split_seed, dev_fraction, test_fraction)),
        })
    }

    /// Reads `files` with the task's reader, each checked against `max_bad_fraction` and for
    /// gold answers, registering each file's report in `reports`.
    fn read_reading(
        &self,
        root: &Path,
        files: &[FileSpec],
        reports: &mut Vec<FileReport>,
    ) -> Result<Read, TaskError> {
        let mut out = Read {
            examples: Examples::empty(self.task.kind()),
            groups: Vec::new(),
            files: Vec::new(),
        };
        for f in files {
            let resolved = resolve(root, &f.path);
            if !resolved.is_file() {
                return Err(TaskError::NotFound {
                    path: f.path.clone(),
                    resolved,
                });
            }
            let id = reports.len();
            // Groups are numbered across files: an article of one file is never another's.
            let base = out.groups.iter().max().map_or(0, |g| g + 1);
            let format = f.format.as_ref().unwrap_or(&self.task);
            let mut report = FileReport::new(&f.path, format.name(), 0);
            match &mut out.examples {
                Examples::Span(all) => {
                    let file = read_squad(&resolved)?;
                    file.check_bad_fraction(self.max_bad_fraction)?;
                    file.require_labels()?;
                    out.groups
                        .extend(file.groups().into_iter().map(|g| g + base));
                    all.extend(
                        file.examples
                            .into_iter()
                            .map(|e| crate::squad::SquadExample { file: id, ..e }),
                    );
                    report.rows = file.report.questions_read;
                    report.examples = file.report.questions;
                    report.bad.total = file.report.dropped.total;
                    report.reading = Some(Box::new(ReadingReport::Squad(file.report)));
                }
                Examples::ReadingChoice(all) => {
                    let file = read_c3(&resolved)?;
                    file.check_bad_fraction(self.max_bad_fraction)?;
                    out.groups
                        .extend(file.groups().into_iter().map(|g| g + base));
                    all.extend(
                        file.examples
                            .into_iter()
                            .map(|e| crate::c3::C3Example { file: id, ..e }),
                    );
                    report.rows = file.report.questions_read;
                    report.examples = file.report.questions;
                    report.bad.total = file.report.dropped.total;
                    report.label_counts = file.report.by_answer.to_vec();
                    report.reading = Some(Box::new(ReadingReport::C3(file.report)));
                }
                _ => {
                    return Err(TaskError::param(
                        "task",
                        format!("{} is not a reading-comprehension task", self.task.name()),
                    ));
                }
            }
            reports.push(report);
            out.files.push(id);
        }
        Ok(out)
    }

    /// The pool without the questions whose context and question are an evaluation file's
    /// (with `drop_eval_overlap`), counted per file; and how many were dropped.
    fn drop_eval_overlap(
        &self,
        pool: Read,
        eval: &[Split],
        reports: &mut [FileReport],
    ) -> (Read, usize) {
        if !self.drop_eval_overlap || eval.is_empty() {
            return (pool, 0);
        }
        let held: std::collections::HashSet<String> =
            eval.iter().flat_map(|s| s.examples.texts_iter()).collect();
        let mut keep = Vec::with_capacity(pool.examples.len());
        for (i, (text, file)) in pool
            .examples
            .texts_iter()
            .zip(pool.examples.files())
            .enumerate()
        {
            if held.contains(&text) {
                reports[file].dropped_eval_overlap += 1;
            } else {
                keep.push(i);
            }
        }
        let dropped = pool.examples.len() - keep.len();
        if dropped == 0 {
            return (pool, 0);
        }
        let read = Read {
            examples: pool.examples.select(&keep),
            groups: keep.iter().map(|&i| pool.groups[i]).collect(),
            files: pool.files,
        };
        (read, dropped)
    }
}

/// `a.json, b.json` for messages about a split.
fn describe(files: &[FileReport], ids: &[usize]) -> String {
    ids.iter()
        .map(|&i| files[i].path.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
#[path = "reading_tests.rs"]
mod tests;
