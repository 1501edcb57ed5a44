//! What a loaded protocol holds: the examples of each split (of the task's kind), the splits,
//! and the summary metrics.json records.

use std::collections::HashSet;
use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use super::{DevSpec, ProtocolSpec};
use crate::c3::C3Example;
use crate::error::TaskError;
use crate::group_split;
use crate::read::{
    ChoiceExample, FileReport, PairExample, ScoredPairExample, SingleExample, TagExample,
    read_choice_file, read_pair_file, read_scored_pair_file, read_single_file, read_tag_file,
};
use crate::split::{self, Stream};
use crate::squad::SquadExample;
use crate::task::{Task, TaskKind};

/// The examples of a split, of the task's kind.
#[derive(Debug, Clone, PartialEq)]
pub enum Examples {
    /// Sentence pairs (LCQMC, AFQMC, the NLI sets, `pair`).
    Pair(Vec<PairExample>),
    /// Multiple-choice lines of a JSONL file (`choice`).
    Choice(Vec<ChoiceExample>),
    /// Single texts (ChnSentiCorp, SMP2020-EWECT, `single`).
    Single(Vec<SingleExample>),
    /// Tagged sentences (MSRA NER, `tagging`).
    Tagging(Vec<TagExample>),
    /// Questions on contexts with answer spans (CMRC 2018, SQuAD v1).
    Span(Vec<SquadExample>),
    /// Multiple-choice questions on contexts (C3).
    ReadingChoice(Vec<C3Example>),
    /// Sentence pairs with a score (`sts_b`, `pair_regression`).
    PairRegression(Vec<ScoredPairExample>),
}

/// `$body` with `$v` bound to the examples of whatever kind `$ex` holds.
macro_rules! each {
    ($ex:expr, $v:ident => $body:expr) => {
        match $ex {
            Examples::Pair($v) => $body,
            Examples::Choice($v) => $body,
            Examples::Single($v) => $body,
            Examples::Tagging($v) => $body,
            Examples::Span($v) => $body,
            Examples::ReadingChoice($v) => $body,
            Examples::PairRegression($v) => $body,
        }
    };
}

/// What the splits need of one example, whatever its kind: each kind's example type answers
/// for itself, beside its definition, so that [`Examples`] asks rather than matches.
pub trait SplitExample {
    /// Appends its gold class ids: one (a class, a choice), one per character (a tagged
    /// sentence), or none (a span, a scored pair).
    fn push_labels(&self, out: &mut Vec<usize>);

    /// Its stratum in the seeded held-out and capped draws, so that a held-out set has the
    /// mix train has.
    fn stratum(&self) -> usize;

    /// Its texts joined by tabs (labels left out): what an overlap between splits counts.
    fn texts_key(&self) -> String;

    /// The text fields of `examples` for the pretraining corpus ([`crate::texts`]), one list
    /// per example, in order, labels left out; `None` for a kind whose texts the corpus does
    /// not take.
    fn corpus_texts(examples: &[Self]) -> Option<Vec<Vec<String>>>
    where
        Self: Sized;
}

/// The example type of one task kind: what that kind's module reads out of [`Examples`]. With
/// it a kind asks for its own examples by type ([`Examples::of`]) and gets a typed error, not
/// an empty list, from a split of another kind.
pub trait KindExample: SplitExample + Clone + Sized {
    /// The kind whose splits hold examples of this type.
    const KIND: TaskKind;

    /// The examples, if `examples` is of [`KindExample::KIND`].
    fn slice(examples: &Examples) -> Option<&[Self]>;

    /// Examples of this type as a split's.
    fn wrap(examples: Vec<Self>) -> Examples;
}

/// `$ty` is the example type of `Examples::$variant` and `TaskKind::$variant`.
macro_rules! kind_example {
    ($($variant:ident => $ty:ty),* $(,)?) => {$(
        impl KindExample for $ty {
            const KIND: TaskKind = TaskKind::$variant;

            fn slice(examples: &Examples) -> Option<&[Self]> {
                match examples {
                    Examples::$variant(v) => Some(v),
                    _ => None,
                }
            }

            fn wrap(examples: Vec<Self>) -> Examples {
                Examples::$variant(examples)
            }
        }
    )*};
}

kind_example! {
    Pair => PairExample,
    Choice => ChoiceExample,
    Single => SingleExample,
    Tagging => TagExample,
    Span => SquadExample,
    ReadingChoice => C3Example,
    PairRegression => ScoredPairExample,
}

/// A split of one kind read as another's: a caller paired a kind's module with a protocol of
/// another kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the examples are of a {found} task, not of a {expected} task")]
pub struct WrongKind {
    /// The kind the caller asked for.
    pub expected: TaskKind,
    /// The kind the examples are of.
    pub found: TaskKind,
}

impl Examples {
    /// The kind of task the examples are of.
    pub fn kind(&self) -> TaskKind {
        each!(self, v => kind_of(v))
    }

    /// The examples as `E`s, or which kind they are of when they are not.
    pub fn of<E: KindExample>(&self) -> Result<&[E], WrongKind> {
        E::slice(self).ok_or(WrongKind {
            expected: E::KIND,
            found: self.kind(),
        })
    }

    /// No examples, of `kind`.
    pub fn empty(kind: TaskKind) -> Examples {
        match kind {
            TaskKind::Pair => Examples::Pair(Vec::new()),
            TaskKind::Choice => Examples::Choice(Vec::new()),
            TaskKind::Single => Examples::Single(Vec::new()),
            TaskKind::Tagging => Examples::Tagging(Vec::new()),
            TaskKind::Span => Examples::Span(Vec::new()),
            TaskKind::ReadingChoice => Examples::ReadingChoice(Vec::new()),
            TaskKind::PairRegression => Examples::PairRegression(Vec::new()),
        }
    }

    /// The number of examples (sentences for tagging, questions for reading comprehension).
    pub fn len(&self) -> usize {
        each!(self, v => v.len())
    }

    /// Whether there is no example.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The gold class ids, in order (a tagging example has one per character: see
    /// [`Examples::strata`] for one per sentence; a span or a scored pair has none).
    pub fn labels(&self) -> Vec<usize> {
        let mut out = Vec::new();
        each!(self, v => v.iter().for_each(|e| e.push_labels(&mut out)));
        out
    }

    /// One stratum per example for the seeded held-out and capped draws
    /// ([`SplitExample::stratum`]): the class id; for a tagging sentence, whether it holds any
    /// tag but tag 0 (`O`), so that a held-out set has the share of sentences without
    /// entities that train has; one stratum for spans; for scored pairs the score rounded
    /// down (STS-B's 0–5 bands, so a held-out set spans the scores train does).
    pub fn strata(&self) -> Vec<usize> {
        each!(self, v => v.iter().map(SplitExample::stratum).collect())
    }

    /// Examples per class id (for a tagging task: characters per tag).
    pub fn label_counts(&self, classes: usize) -> Vec<usize> {
        let mut counts = vec![0; classes];
        for l in self.labels() {
            counts[l] += 1;
        }
        counts
    }

    /// The file index of each example, in order.
    pub fn files(&self) -> Vec<usize> {
        each!(self, v => v.iter().map(|e| e.file).collect())
    }

    /// The examples at `indices`, in that order.
    pub fn select(&self, indices: &[usize]) -> Examples {
        each!(self, v => KindExample::wrap(pick(v, indices)))
    }

    /// The sentence pairs; `None` for another kind.
    pub fn as_pairs(&self) -> Option<&[PairExample]> {
        match self {
            Examples::Pair(v) => Some(v),
            _ => None,
        }
    }

    /// The multiple-choice examples; `None` for another kind.
    pub fn as_choices(&self) -> Option<&[ChoiceExample]> {
        match self {
            Examples::Choice(v) => Some(v),
            _ => None,
        }
    }

    /// The single texts; `None` for another kind.
    pub fn as_singles(&self) -> Option<&[SingleExample]> {
        match self {
            Examples::Single(v) => Some(v),
            _ => None,
        }
    }

    /// The tagged sentences; `None` for another kind.
    pub fn as_tagged(&self) -> Option<&[TagExample]> {
        match self {
            Examples::Tagging(v) => Some(v),
            _ => None,
        }
    }

    /// The span-extraction questions; `None` for another kind.
    pub fn as_spans(&self) -> Option<&[SquadExample]> {
        match self {
            Examples::Span(v) => Some(v),
            _ => None,
        }
    }

    /// The C3 questions; `None` for another kind.
    pub fn as_reading_choices(&self) -> Option<&[C3Example]> {
        match self {
            Examples::ReadingChoice(v) => Some(v),
            _ => None,
        }
    }

    /// Each example's text fields for the pretraining corpus ([`SplitExample::corpus_texts`]);
    /// `None` for a kind whose texts the corpus does not take.
    pub fn corpus_texts(&self) -> Option<Vec<Vec<String>>> {
        each!(self, v => corpus_of(v))
    }

    /// Each example's texts joined (labels left out), for the overlap count.
    pub(super) fn texts(&self) -> HashSet<String> {
        self.texts_iter().collect()
    }

    pub(super) fn count_in(&self, seen: &HashSet<String>) -> usize {
        self.texts_iter().filter(|t| seen.contains(t)).count()
    }

    pub(super) fn texts_iter(&self) -> Box<dyn Iterator<Item = String> + '_> {
        each!(self, v => Box::new(v.iter().map(SplitExample::texts_key)))
    }
}

/// What reading one file gave besides its examples: its report and, for a choice file, its
/// number of choices and the line of its first example (every file of a protocol must have
/// the same number).
pub(super) struct FileRead {
    pub(super) report: FileReport,
    pub(super) choices: Option<(usize, usize)>,
}

impl Examples {
    /// Reads the file at `path` (`name` as the params give it) in `format` onto the end of
    /// these examples, numbered as file `id`, labels as `labels` orders them; `None` when the
    /// format is not of these examples' kind. The reading kinds (whole documents, split by
    /// group) are read apart ([`super::reading`]).
    pub(super) fn read_file(
        &mut self,
        format: &Task,
        path: &Path,
        name: &str,
        id: usize,
        labels: &[String],
    ) -> Result<Option<FileRead>, TaskError> {
        let plain = |report| {
            Some(FileRead {
                report,
                choices: None,
            })
        };
        Ok(match (format, self) {
            (Task::Pair(p), Examples::Pair(all)) => {
                let r = read_pair_file(path, name, p, labels)?;
                all.extend(
                    r.examples
                        .into_iter()
                        .map(|e| PairExample { file: id, ..e }),
                );
                plain(r.report)
            }
            (Task::Single(s), Examples::Single(all)) => {
                let r = read_single_file(path, name, s, labels)?;
                all.extend(
                    r.examples
                        .into_iter()
                        .map(|e| SingleExample { file: id, ..e }),
                );
                plain(r.report)
            }
            (Task::Tagging(t), Examples::Tagging(all)) => {
                let r = read_tag_file(path, name, t, labels)?;
                all.extend(r.examples.into_iter().map(|e| TagExample { file: id, ..e }));
                plain(r.report)
            }
            (Task::PairRegression(scored), Examples::PairRegression(all)) => {
                let r = read_scored_pair_file(path, name, &scored.name)?;
                all.extend(
                    r.examples
                        .into_iter()
                        .map(|e| ScoredPairExample { file: id, ..e }),
                );
                plain(r.report)
            }
            (Task::Choice(c), Examples::Choice(all)) => {
                let r = read_choice_file(path, name, c)?;
                let line = r.examples.first().map_or(1, |e| e.line);
                all.extend(
                    r.examples
                        .into_iter()
                        .map(|e| ChoiceExample { file: id, ..e }),
                );
                Some(FileRead {
                    report: r.report,
                    choices: Some((r.num_choices, line)),
                })
            }
            _ => None,
        })
    }
}

/// The corpus texts of examples of type `E`.
fn corpus_of<E: SplitExample>(examples: &[E]) -> Option<Vec<Vec<String>>> {
    E::corpus_texts(examples)
}

/// The kind of examples of type `E`.
fn kind_of<E: KindExample>(_: &[E]) -> TaskKind {
    E::KIND
}

fn pick<T: Clone>(v: &[T], indices: &[usize]) -> Vec<T> {
    indices.iter().map(|&i| v[i].clone()).collect()
}

/// One split of a loaded protocol: train, dev, or a named evaluation set.
#[derive(Debug, Clone, PartialEq)]
pub struct Split {
    /// `train`, `dev`, or the evaluation set's name.
    pub name: String,
    /// Its examples, after holding out, dropping overlap and capping.
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
    pub(super) fn new(
        name: &str,
        examples: Examples,
        files: Vec<usize>,
        available: usize,
    ) -> Split {
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

    pub(super) fn cap(&mut self, max: usize, seed: u64, stream: Stream) {
        if self.examples.len() > max {
            let keep = split::subsample(&self.examples.strata(), max, seed, stream);
            self.examples = self.examples.select(&keep);
            self.capped_to = Some(max);
        }
    }

    /// The number of examples.
    pub fn len(&self) -> usize {
        self.examples.len()
    }

    /// Whether the split has no example.
    pub fn is_empty(&self) -> bool {
        self.examples.is_empty()
    }
}

/// A loaded protocol: the examples of every split and what each file held.
#[derive(Debug, Clone, PartialEq)]
pub struct Protocol {
    /// The params it was loaded from.
    pub spec: ProtocolSpec,
    /// The class labels in class-id order (for a choice task `0` … `N-1`).
    pub labels: Vec<String>,
    /// N of a choice task.
    pub num_choices: Option<usize>,
    /// Every file read, in order; [`PairExample::file`] indexes it.
    pub files: Vec<FileReport>,
    /// The training examples.
    pub train: Split,
    /// The model-selection set: the best epoch is chosen on it.
    pub dev: Split,
    /// The named evaluation sets, in the order of [`ProtocolSpec::eval`] (a held-out `test`
    /// first).
    pub eval: Vec<Split>,
    /// A reading-comprehension protocol's split of its train files by article or document
    /// (dev and, with `test_fraction`, the evaluation set `test` held out by group).
    pub group_split: Option<group_split::SplitSummary>,
}

/// One split in [`ProtocolSummary`].
#[derive(Debug, Clone, Serialize)]
pub struct SplitSummary {
    /// [`Split::name`].
    pub name: String,
    /// Examples in the split, as used.
    pub examples: usize,
    /// [`Split::available`].
    pub available: usize,
    /// [`Split::held_out_from_train`]; left out of the JSON when false.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub held_out_from_train: bool,
    /// [`Split::capped_to`]; left out when no cap removed anything.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capped_to: Option<usize>,
    /// [`Split::label_counts`].
    pub label_counts: Vec<usize>,
    /// [`Split::overlap_with_train`]; left out for train.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overlap_with_train: Option<usize>,
    /// [`Split::dropped_eval_overlap`]; left out when 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub dropped_eval_overlap: usize,
    /// The reports of the split's own files (none for a dev set held out of train).
    pub files: Vec<FileReport>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// What metrics.json records of a protocol.
#[derive(Debug, Clone, Serialize)]
pub struct ProtocolSummary {
    /// The task's name (`lcqmc`, `pair`, `cmrc2018`, …).
    pub task: String,
    /// The task's kind.
    pub kind: TaskKind,
    /// [`Protocol::labels`].
    pub labels: Vec<String>,
    /// [`Protocol::num_choices`]; left out for the other kinds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub num_choices: Option<usize>,
    /// The seed of the held-out sets and the caps' subsamples.
    pub split_seed: u64,
    /// The share of train held out as dev; left out when dev comes from files.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dev_fraction: Option<f64>,
    /// The cap on train examples; `null`: none.
    pub max_train_examples: Option<usize>,
    /// The cap on each dev and evaluation set; `null`: none.
    pub max_eval_examples: Option<usize>,
    /// The share of a file's rows that may be bad.
    pub max_bad_fraction: f64,
    /// Whether train examples with the texts of a dev or evaluation example were dropped.
    pub drop_eval_overlap: bool,
    /// Reading comprehension: the share of the train files' articles (documents) held out as
    /// the evaluation set `test`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub test_fraction: Option<f64>,
    /// Reading comprehension: how the train files were split by group, and the sizes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_split: Option<group_split::SplitSummary>,
    /// The train split.
    pub train: SplitSummary,
    /// The dev split.
    pub dev: SplitSummary,
    /// The evaluation sets, in order.
    pub eval: Vec<SplitSummary>,
}

impl Protocol {
    /// The number of class labels (tags for a tagging task; 0 for span extraction).
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
            test_fraction: self.spec.test_fraction,
            group_split: self.group_split.clone(),
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
