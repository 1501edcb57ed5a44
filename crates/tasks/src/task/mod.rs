//! Task definitions: what a data file looks like (columns, header, label strings) and which
//! classes a task has, in a fixed order that defines the class ids.
//!
//! A task is given in params either by name (`task: lcqmc`) or as a map that starts from a
//! built-in and overrides some of its fields (`task: {name: lcqmc, header: true}`), or defines
//! a generic pair task:
//!
//! ```yaml
//! task:
//!   name: pair
//!   text_a: sentence1        # a header column name, or a 0-based index
//!   text_b: sentence2
//!   label: gold_label
//!   header: true
//!   labels: [contradiction, entailment, neutral]   # order = class ids 0, 1, 2
//!   label_map: {contradictory: contradiction}      # raw label -> one of `labels`
//! ```
//!
//! | name | format | labels (ids 0, 1, …) |
//! |---|---|---|
//! | `lcqmc`, `afqmc` | `text_a \t text_b \t 0/1`, no header, 3 columns | `0`, `1` |
//! | `xnli` | header `text_a \t text_b \t label`, columns found by name | `contradiction`, `entailment`, `neutral` |
//! | `cmnli`, `ocnli`, `cnsd_snli` | `text_a \t text_b \t label`, no header, 3 columns | `contradiction`, `entailment`, `neutral` |
//! | `pair` | `text_a`, `text_b`, `label` (default 0, 1, 2), `header` (default false), `columns`, `labels` (required), `label_map` | as given |
//! | `choice` | JSONL, see [`crate::read`] | the answer index `0` … `N-1` |
//! | `chnsenticorp` | single text: header `label \t text_a` | `negative` (raw `0`), `positive` (raw `1`) |
//! | `smp2020_ewect` | single text: header `label \t text_a` | `neutral`, `angry`, `happy`, `sad`, `fear`, `surprise` (raw `0` … `5`, as its `labels.json` names them) |
//! | `single` | `text` (default 0), `label` (default 1), `header` (default false), `columns`, `labels` (required), `label_map` | as given |
//! | `msra_ner` | tagging: header `text_a \t label`, characters and BIO tags separated by spaces | `O`, `B-LOC`, `I-LOC`, `B-PER`, `I-PER`, `B-ORG`, `I-ORG` (its `label2id.json`) |
//! | `tagging` | `layout` (`tsv`: a sentence per line, the default; `conll`: a character and its tag per line, blank line between sentences), `text` (default 0), `label` (default 1), `header` (tsv only, default false), and `labels` (the tags in id order) or `label2id` (a label2id.json path) | as given |
//! | `cmrc2018`, `squad` | span extraction: SQuAD v1 JSON ([`crate::squad`]); `cmrc2018` is CMRC 2018, `squad` any other file of that shape | none: the answer is a span of the context |
//! | `c3` | multiple-choice reading comprehension: C3's JSON ([`crate::c3`]), 2–4 choices padded to 4 | the answer position `0` … `3` |
//! | `sts_b`, `pair_regression` | sentence-pair regression: `text_a \t text_b \t score`, no header, 3 columns, the score a number ([`crate::read::read_scored_pairs`]) | none: the label is the score |
//!
//! The NLI order is XNLI's `label_map.json` (contradiction 0, entailment 1, neutral 2), and
//! every NLI task also accepts XNLI's `contradictory` as `contradiction`. For binary tasks class
//! 1 is the positive class of F1.
//!
//! A generic single-text task: `task: {name: single, text: 1, label: 0, header: true, labels:
//! [negative, positive], label_map: {"0": negative, "1": positive}}`. A generic tagging task:
//! `task: {name: tagging, layout: conll, labels: [O, B-PER, I-PER]}`.
//!
//! Class labels belong to the task: when the files of a protocol have their own formats
//! (`format: cmnli` under `task: xnli`), a format's labels must be labels of the task, and rows
//! get the task's class ids.

pub(crate) mod classify;

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;
use serde_json::Value;

use crate::error::TaskError;
pub use crate::kinds::choice::ChoiceFormat;
pub use crate::kinds::pair::PairFormat;
pub use crate::kinds::pair_regression::{REGRESSION_NAMES, ScoredPairFormat};
pub use crate::kinds::single::SingleFormat;
pub use crate::kinds::tagging::{MSRA_TAGS, TagFormat, TagLayout, check_tags, tags_from_label2id};
use crate::params::{self, closest, show};
pub(crate) use classify::ClassView;

/// The three NLI classes in XNLI's `label_map.json` order.
pub const NLI_LABELS: [&str; 3] = ["contradiction", "entailment", "neutral"];

/// The two classes of LCQMC and AFQMC (`1` = same meaning, the positive class).
pub const BINARY_LABELS: [&str; 2] = ["0", "1"];

/// ChnSentiCorp's classes: raw `0` and `1` (its README: 0 negative, 1 positive); positive is
/// class 1, the positive class of binary F1.
pub const SENTIMENT_LABELS: [&str; 2] = ["negative", "positive"];

/// SMP2020-EWECT's six classes in the order of its `labels.json` (raw `0` … `5`).
pub const EWECT_LABELS: [&str; 6] = ["neutral", "angry", "happy", "sad", "fear", "surprise"];

/// Names accepted by `task:` and `format:`.
pub const BUILTIN_TASKS: &[&str] = &[
    "lcqmc",
    "afqmc",
    "xnli",
    "cmnli",
    "ocnli",
    "cnsd_snli",
    "pair",
    "choice",
    "chnsenticorp",
    "smp2020_ewect",
    "single",
    "msra_ner",
    "tagging",
    "cmrc2018",
    "squad",
    "c3",
    "sts_b",
    "pair_regression",
];

/// Where a field is in a TSV row: a 0-based index, or a column name looked up in the header.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Column {
    /// The 0-based position of the field in the row (`text_a: 0`).
    Index(usize),
    /// The header cell that names the column (`text_a: sentence1`); needs `header: true`.
    Name(String),
}

impl fmt::Display for Column {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Column::Index(i) => write!(f, "column {i}"),
            Column::Name(n) => write!(f, "column `{n}`"),
        }
    }
}

/// A reading-comprehension format (SQuAD v1 JSON, C3 JSON): its files carry their own
/// structure, so only the name is given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReadingFormat {
    /// `cmrc2018`, `squad` or `c3`.
    pub name: String,
}

/// A task: a file format and its classes.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Task {
    /// Sentence-pair classification (LCQMC, AFQMC, the NLI sets, `pair`).
    Pair(PairFormat),
    /// Multiple choice from a JSONL file (`choice`).
    Choice(ChoiceFormat),
    /// Single-text classification (ChnSentiCorp, SMP2020-EWECT, `single`).
    Single(SingleFormat),
    /// Token classification (MSRA NER, `tagging`).
    Tagging(TagFormat),
    /// Span extraction (CMRC 2018, any SQuAD v1 file).
    Span(ReadingFormat),
    /// Multiple-choice reading comprehension on a context (C3).
    #[serde(rename = "reading_choice")]
    ReadingChoice(ReadingFormat),
    /// Sentence-pair regression, a score per pair (`sts_b`, `pair_regression`).
    #[serde(rename = "pair_regression")]
    PairRegression(ScoredPairFormat),
}

/// Sentence-pair classification, multiple choice, single-text classification, token
/// classification (tagging), span extraction, or multiple choice on a context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskKind {
    /// [`Task::Pair`].
    Pair,
    /// [`Task::Choice`].
    Choice,
    /// [`Task::Single`].
    Single,
    /// [`Task::Tagging`].
    Tagging,
    /// [`Task::Span`].
    Span,
    /// [`Task::ReadingChoice`].
    ReadingChoice,
    /// [`Task::PairRegression`].
    PairRegression,
}

impl TaskKind {
    /// `pair`, `choice`, `single`, `tagging`, `span`, `reading_choice`, `pair_regression`.
    pub fn name(self) -> &'static str {
        match self {
            TaskKind::Pair => "pair",
            TaskKind::Choice => "choice",
            TaskKind::Single => "single",
            TaskKind::Tagging => "tagging",
            TaskKind::Span => "span",
            TaskKind::ReadingChoice => "reading_choice",
            TaskKind::PairRegression => "pair_regression",
        }
    }

    /// The reading-comprehension kinds, whose protocols split their files by article or
    /// document ([`crate::group_split`]).
    pub fn is_reading(self) -> bool {
        matches!(self, TaskKind::Span | TaskKind::ReadingChoice)
    }
}

impl fmt::Display for TaskKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

fn strings(labels: &[&str]) -> Vec<String> {
    labels.iter().map(|s| s.to_string()).collect()
}

/// `raw_i → labels[i]` for files whose labels are the digits `0` … `n-1`.
fn digit_aliases(labels: &[&str]) -> BTreeMap<String, String> {
    labels
        .iter()
        .enumerate()
        .map(|(i, l)| (i.to_string(), l.to_string()))
        .collect()
}

fn three_columns(name: &str, labels: &[&str], header: bool) -> PairFormat {
    let nli = labels == NLI_LABELS;
    let col = |n: &str, i| {
        if header {
            Column::Name(n.into())
        } else {
            Column::Index(i)
        }
    };
    PairFormat {
        name: name.to_string(),
        // The XNLI header names its columns; find them by name so that a file with its columns
        // in another order still reads right, and a wrong header is an error.
        text_a: col("text_a", 0),
        text_b: col("text_b", 1),
        label: col("label", 2),
        header,
        columns: Some(3),
        labels: strings(labels),
        label_map: if nli {
            BTreeMap::from([("contradictory".to_string(), "contradiction".to_string())])
        } else {
            BTreeMap::new()
        },
    }
}

/// ChnSentiCorp and SMP2020-EWECT: header `label \t text_a`, raw labels the digits.
fn sentence_builtin(name: &str, labels: &[&str]) -> SingleFormat {
    SingleFormat {
        name: name.into(),
        text: Column::Name("text_a".into()),
        label: Column::Name("label".into()),
        header: true,
        columns: Some(2),
        labels: strings(labels),
        label_map: digit_aliases(labels),
    }
}

/// The built-in defaults for `name`; `pair`, `single` and `tagging` with no labels yet.
fn defaults(name: &str) -> Option<Task> {
    Some(match name {
        "lcqmc" | "afqmc" => Task::Pair(three_columns(name, &BINARY_LABELS, false)),
        "xnli" => Task::Pair(three_columns(name, &NLI_LABELS, true)),
        "cmnli" | "ocnli" | "cnsd_snli" => Task::Pair(three_columns(name, &NLI_LABELS, false)),
        "pair" => Task::Pair(PairFormat {
            columns: None,
            labels: Vec::new(),
            label_map: BTreeMap::new(),
            ..three_columns("pair", &[], false)
        }),
        "choice" => Task::Choice(ChoiceFormat {
            name: "choice".into(),
            num_choices: None,
        }),
        "chnsenticorp" => Task::Single(sentence_builtin(name, &SENTIMENT_LABELS)),
        "smp2020_ewect" => Task::Single(sentence_builtin(name, &EWECT_LABELS)),
        "single" => Task::Single(SingleFormat {
            name: "single".into(),
            text: Column::Index(0),
            label: Column::Index(1),
            header: false,
            columns: None,
            labels: Vec::new(),
            label_map: BTreeMap::new(),
        }),
        "msra_ner" => Task::Tagging(TagFormat::msra()),
        "tagging" => Task::Tagging(TagFormat::generic()),
        "cmrc2018" | "squad" => Task::Span(ReadingFormat { name: name.into() }),
        "c3" => Task::ReadingChoice(ReadingFormat { name: name.into() }),
        _ => Task::PairRegression(ScoredPairFormat::named(name)?),
    })
}

/// A label given in YAML may be a number (`labels: [0, 1]`); it means its decimal spelling.
pub(crate) fn label_string(v: &Value, at: &str) -> Result<String, TaskError> {
    let s = match v {
        Value::String(s) => s.trim().to_string(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        other => {
            return Err(TaskError::param(
                at,
                format!(
                    "expected a label (string or number), got {} {}",
                    params::type_name(other),
                    show(other)
                ),
            ));
        }
    };
    if s.is_empty() {
        return Err(TaskError::param(at, "a label cannot be empty"));
    }
    Ok(s)
}

pub(crate) fn column(v: &Value, at: &str) -> Result<Column, TaskError> {
    match v {
        Value::String(s) if !s.trim().is_empty() => Ok(Column::Name(s.trim().to_string())),
        Value::Number(_) => params::count(v, at).map(Column::Index),
        other => Err(TaskError::param(
            at,
            format!(
                "expected a column name or a 0-based index, got {} {}",
                params::type_name(other),
                show(other)
            ),
        )),
    }
}

impl Task {
    /// A complete built-in task by name (`lcqmc`, `xnli`, `choice`, `chnsenticorp`, …); `None`
    /// for an unknown name and for `pair`, `single` and `tagging`, which need their labels.
    pub fn builtin(name: &str) -> Option<Task> {
        defaults(name).filter(|t| t.validate("task").is_ok())
    }

    /// The kind of the built-in (or generic) task `name` (`lcqmc` → pair, `chnsenticorp` and
    /// `single` → single, `msra_ner` and `tagging` → tagging); `None` for an unknown name.
    pub fn kind_of_name(name: &str) -> Option<TaskKind> {
        defaults(name).map(|t| t.kind())
    }

    /// Parses a task from a param value: a built-in name, or a map with `name` and overrides.
    /// `at` is the param's path for error messages (`task`, `train[0].format`).
    pub fn from_value(v: &Value, at: &str) -> Result<Task, TaskError> {
        let (name, overrides) = match v {
            Value::String(s) => (s.trim().to_string(), None),
            Value::Object(map) => {
                let name = map.get("name").ok_or_else(|| {
                    TaskError::param(
                        at,
                        format!(
                            "a task map needs `name` (one of {})",
                            BUILTIN_TASKS.join(", ")
                        ),
                    )
                })?;
                let name = params::string(name, &format!("{at}.name"))?;
                (name.trim().to_string(), Some(map))
            }
            other => {
                return Err(TaskError::param(
                    at,
                    format!(
                        "expected a task name ({}) or a map with `name`, got {} {}",
                        BUILTIN_TASKS.join(", "),
                        params::type_name(other),
                        show(other)
                    ),
                ));
            }
        };
        let mut task = defaults(&name).ok_or_else(|| {
            let hint = closest(&name, BUILTIN_TASKS)
                .map(|c| format!(" (did you mean `{c}`?)"))
                .unwrap_or_default();
            TaskError::param(
                at,
                format!(
                    "unknown task `{name}`{hint}; built-in: {}, or `pair` with columns and \
                     labels",
                    BUILTIN_TASKS.join(", ")
                ),
            )
        })?;
        if let Some(map) = overrides {
            match &mut task {
                Task::Choice(c) => c.apply(map, at)?,
                Task::Pair(p) => p.apply(map, at)?,
                Task::Single(s) => s.apply(map, at)?,
                Task::Tagging(t) => t.apply(map, at)?,
                Task::PairRegression(r) => r.apply(map, at)?,
                // The files describe themselves: nothing to override.
                Task::Span(_) | Task::ReadingChoice(_) => params::check_keys(map, &["name"], at)?,
            }
        }
        task.validate(at)?;
        Ok(task)
    }

    /// Checks that the task is complete and consistent.
    pub fn validate(&self, at: &str) -> Result<(), TaskError> {
        match self {
            Task::Choice(c) => c.validate(at),
            Task::Pair(p) => p.validate(at),
            Task::Single(s) => s.validate(at),
            Task::Tagging(t) => t.validate(at),
            Task::Span(_) | Task::ReadingChoice(_) | Task::PairRegression(_) => Ok(()),
        }
    }

    /// `lcqmc`, `xnli`, `pair`, `choice`, `chnsenticorp`, `msra_ner`, …
    pub fn name(&self) -> &str {
        match self {
            Task::Pair(p) => &p.name,
            Task::Choice(c) => &c.name,
            Task::Single(s) => &s.name,
            Task::Tagging(t) => &t.name,
            Task::Span(r) | Task::ReadingChoice(r) => &r.name,
            Task::PairRegression(r) => &r.name,
        }
    }

    /// Which of the seven kinds it is: what its examples, model head and metrics are.
    pub fn kind(&self) -> TaskKind {
        match self {
            Task::Pair(_) => TaskKind::Pair,
            Task::Choice(_) => TaskKind::Choice,
            Task::Single(_) => TaskKind::Single,
            Task::Tagging(_) => TaskKind::Tagging,
            Task::Span(_) => TaskKind::Span,
            Task::ReadingChoice(_) => TaskKind::ReadingChoice,
            Task::PairRegression(_) => TaskKind::PairRegression,
        }
    }

    /// The class labels (tags, for a tagging task) in class-id order; `None` for a choice
    /// task, whose classes are the answer positions `0` … `N-1` once N is known (see
    /// [`choice_labels`]), for a tagging task whose tags come from a `label2id.json`, and for
    /// the reading tasks (a span task has no classes; C3's are [`choice_labels`] of 4), and for
    /// regression (a score, no classes).
    pub fn labels(&self) -> Option<&[String]> {
        match self {
            Task::Pair(p) => Some(&p.labels),
            Task::Single(s) => Some(&s.labels),
            Task::Tagging(t) if t.label2id.is_none() => Some(&t.labels),
            Task::Tagging(_)
            | Task::Choice(_)
            | Task::Span(_)
            | Task::ReadingChoice(_)
            | Task::PairRegression(_) => None,
        }
    }
}

/// The class labels of a choice task with `n` choices: `"0"` … `"n-1"`.
pub fn choice_labels(n: usize) -> Vec<String> {
    (0..n).map(|i| i.to_string()).collect()
}

#[cfg(test)]
mod tests;
