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
//!
//! The NLI order is XNLI's `label_map.json` (contradiction 0, entailment 1, neutral 2), and
//! every NLI task also accepts XNLI's `contradictory` as `contradiction`. For binary tasks class
//! 1 is the positive class of F1.
//!
//! Class labels belong to the task: when the files of a protocol have their own formats
//! (`format: cmnli` under `task: xnli`), a format's labels must be labels of the task, and rows
//! get the task's class ids.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::TaskError;
use crate::params::{self, check_keys, closest, show};

/// The three NLI classes in XNLI's `label_map.json` order.
pub const NLI_LABELS: [&str; 3] = ["contradiction", "entailment", "neutral"];

/// The two classes of LCQMC and AFQMC (`1` = same meaning, the positive class).
pub const BINARY_LABELS: [&str; 2] = ["0", "1"];

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
];

const PAIR_KEYS: &[&str] = &[
    "name",
    "text_a",
    "text_b",
    "label",
    "header",
    "columns",
    "labels",
    "label_map",
];
const CHOICE_KEYS: &[&str] = &["name", "num_choices"];

/// Where a field is in a TSV row: a 0-based index, or a column name looked up in the header.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Column {
    Index(usize),
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

/// A tab-separated sentence-pair file format with its labels.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairFormat {
    /// The built-in it came from (`lcqmc`, `xnli`, …) or `pair`.
    pub name: String,
    pub text_a: Column,
    pub text_b: Column,
    pub label: Column,
    /// Whether the first line is a header row (skipped; names columns given by name).
    pub header: bool,
    /// The exact number of columns a row must have; `None`: the header's count when there is
    /// a header, else enough for the highest index.
    pub columns: Option<usize>,
    /// Class labels; a label's position is its class id.
    pub labels: Vec<String>,
    /// Other raw spellings of labels: raw string → one of `labels`.
    pub label_map: BTreeMap<String, String>,
}

/// A multiple-choice JSONL format (see [`crate::read`] for the line format).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChoiceFormat {
    pub name: String,
    /// The number of choices every line must have; `None`: whatever the first line has.
    pub num_choices: Option<usize>,
}

/// A task: a file format and its classes.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Task {
    Pair(PairFormat),
    Choice(ChoiceFormat),
}

/// Sentence-pair classification or multiple choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskKind {
    Pair,
    Choice,
}

impl fmt::Display for TaskKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TaskKind::Pair => "pair",
            TaskKind::Choice => "choice",
        })
    }
}

fn strings(labels: &[&str]) -> Vec<String> {
    labels.iter().map(|s| s.to_string()).collect()
}

fn three_columns(name: &str, labels: &[&str], header: bool) -> PairFormat {
    let nli = labels == NLI_LABELS;
    PairFormat {
        name: name.to_string(),
        // The XNLI header names its columns; find them by name so that a file with its columns
        // in another order still reads right, and a wrong header is an error.
        text_a: if header {
            Column::Name("text_a".into())
        } else {
            Column::Index(0)
        },
        text_b: if header {
            Column::Name("text_b".into())
        } else {
            Column::Index(1)
        },
        label: if header {
            Column::Name("label".into())
        } else {
            Column::Index(2)
        },
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

/// The built-in defaults for `name`, `pair` with no labels yet.
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
        _ => return None,
    })
}

/// A label given in YAML may be a number (`labels: [0, 1]`); it means its decimal spelling.
fn label_string(v: &Value, at: &str) -> Result<String, TaskError> {
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

fn column(v: &Value, at: &str) -> Result<Column, TaskError> {
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
    /// A complete built-in task by name (`lcqmc`, `xnli`, `choice`, …); `None` for an unknown
    /// name and for `pair`, which needs its labels.
    pub fn builtin(name: &str) -> Option<Task> {
        defaults(name).filter(|t| t.validate("task").is_ok())
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
            task.apply(map, at)?;
        }
        task.validate(at)?;
        Ok(task)
    }

    fn apply(&mut self, map: &Map<String, Value>, at: &str) -> Result<(), TaskError> {
        match self {
            Task::Choice(c) => {
                check_keys(map, CHOICE_KEYS, at)?;
                if let Some(v) = map.get("num_choices") {
                    c.num_choices = Some(params::count(v, &format!("{at}.num_choices"))?);
                }
            }
            Task::Pair(p) => {
                check_keys(map, PAIR_KEYS, at)?;
                for (key, slot) in [
                    ("text_a", &mut p.text_a),
                    ("text_b", &mut p.text_b),
                    ("label", &mut p.label),
                ] {
                    if let Some(v) = map.get(key) {
                        *slot = column(v, &format!("{at}.{key}"))?;
                    }
                }
                if let Some(v) = map.get("header") {
                    p.header = params::boolean(v, &format!("{at}.header"))?;
                    // A built-in's fixed column count still holds; its column names only make
                    // sense with a header, so fall back to the built-in positions without one.
                    if !p.header {
                        for (slot, i) in [(&mut p.text_a, 0), (&mut p.text_b, 1), (&mut p.label, 2)]
                        {
                            if matches!(slot, Column::Name(_)) && !map.contains_key(key_of(i)) {
                                *slot = Column::Index(i);
                            }
                        }
                    }
                }
                if let Some(v) = map.get("columns") {
                    p.columns = Some(params::count(v, &format!("{at}.columns"))?);
                }
                if let Some(v) = map.get("labels") {
                    let at = format!("{at}.labels");
                    let list = v.as_array().ok_or_else(|| {
                        TaskError::param(
                            &at,
                            format!(
                                "expected a list of labels (order = class ids), got {}",
                                show(v)
                            ),
                        )
                    })?;
                    p.labels = list
                        .iter()
                        .enumerate()
                        .map(|(i, l)| label_string(l, &format!("{at}[{i}]")))
                        .collect::<Result<_, _>>()?;
                    // The built-in aliases refer to the built-in labels; keep only those that
                    // still make sense.
                    p.label_map.retain(|_, to| p.labels.contains(to));
                }
                if let Some(v) = map.get("label_map") {
                    let at = format!("{at}.label_map");
                    let m = params::object(v, &at)?;
                    for (raw, to) in m {
                        let to = label_string(to, &format!("{at}.{raw}"))?;
                        p.label_map.insert(raw.trim().to_string(), to);
                    }
                }
            }
        }
        Ok(())
    }

    /// Checks that the task is complete and consistent.
    pub fn validate(&self, at: &str) -> Result<(), TaskError> {
        match self {
            Task::Choice(c) => {
                if let Some(n) = c.num_choices
                    && n < 2
                {
                    return Err(TaskError::param(
                        format!("{at}.num_choices"),
                        format!("{n}: a choice task needs at least 2 choices"),
                    ));
                }
                Ok(())
            }
            Task::Pair(p) => p.validate(at),
        }
    }

    /// `lcqmc`, `xnli`, `pair`, `choice`, …
    pub fn name(&self) -> &str {
        match self {
            Task::Pair(p) => &p.name,
            Task::Choice(c) => &c.name,
        }
    }

    pub fn kind(&self) -> TaskKind {
        match self {
            Task::Pair(_) => TaskKind::Pair,
            Task::Choice(_) => TaskKind::Choice,
        }
    }

    /// The class labels in class-id order; `None` for a choice task, whose classes are the
    /// answer positions `0` … `N-1` once N is known (see [`choice_labels`]).
    pub fn labels(&self) -> Option<&[String]> {
        match self {
            Task::Pair(p) => Some(&p.labels),
            Task::Choice(_) => None,
        }
    }
}

fn key_of(i: usize) -> &'static str {
    ["text_a", "text_b", "label"][i]
}

/// The class labels of a choice task with `n` choices: `"0"` … `"n-1"`.
pub fn choice_labels(n: usize) -> Vec<String> {
    (0..n).map(|i| i.to_string()).collect()
}

impl PairFormat {
    fn validate(&self, at: &str) -> Result<(), TaskError> {
        if self.labels.is_empty() {
            return Err(TaskError::param(
                format!("{at}.labels"),
                format!(
                    "task {} needs `labels`, the class labels in class-id order \
                     (e.g. labels: [\"0\", \"1\"])",
                    self.name
                ),
            ));
        }
        if self.labels.len() < 2 {
            return Err(TaskError::param(
                format!("{at}.labels"),
                format!(
                    "{:?}: a classification task needs at least 2 labels",
                    self.labels
                ),
            ));
        }
        let mut seen = BTreeSet::new();
        for l in &self.labels {
            if !seen.insert(l) {
                return Err(TaskError::param(
                    format!("{at}.labels"),
                    format!("label `{l}` is listed twice"),
                ));
            }
        }
        for (raw, to) in &self.label_map {
            if raw.is_empty() {
                return Err(TaskError::param(
                    format!("{at}.label_map"),
                    "a raw label cannot be empty",
                ));
            }
            if !self.labels.contains(to) {
                return Err(TaskError::param(
                    format!("{at}.label_map.{raw}"),
                    format!(
                        "maps to `{to}`, which is not one of the labels ({})",
                        self.labels.join(", ")
                    ),
                ));
            }
            if self.labels.contains(raw) && raw != to {
                return Err(TaskError::param(
                    format!("{at}.label_map.{raw}"),
                    format!("`{raw}` is itself a label; mapping it to `{to}` is ambiguous"),
                ));
            }
        }
        let cols = [
            ("text_a", &self.text_a),
            ("text_b", &self.text_b),
            ("label", &self.label),
        ];
        for (key, col) in cols {
            if let Column::Name(n) = col
                && !self.header
            {
                return Err(TaskError::param(
                    format!("{at}.{key}"),
                    format!(
                        "column name `{n}` needs a header row: set header: true, or give a \
                         0-based index"
                    ),
                ));
            }
        }
        for i in 0..3 {
            for j in i + 1..3 {
                if cols[i].1 == cols[j].1 {
                    return Err(TaskError::param(
                        format!("{at}.{}", cols[j].0),
                        format!("is the same {} as {}", cols[j].1, cols[i].0),
                    ));
                }
            }
        }
        if let Some(n) = self.columns {
            for (key, col) in cols {
                if let Column::Index(i) = col
                    && *i >= n
                {
                    return Err(TaskError::param(
                        format!("{at}.{key}"),
                        format!("index {i} is past the {n} columns of `columns: {n}`"),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The raw strings (labels and `label_map` keys) this format accepts, with the label each
    /// one means.
    pub fn accepted_labels(&self) -> impl Iterator<Item = (&str, &str)> {
        self.labels.iter().map(|l| (l.as_str(), l.as_str())).chain(
            self.label_map
                .iter()
                .map(|(raw, to)| (raw.as_str(), to.as_str())),
        )
    }

    /// The class id of a raw label in this format's own label order.
    pub fn label_id(&self, raw: &str) -> Option<usize> {
        let raw = raw.trim();
        let label = self.label_map.get(raw).map(String::as_str).unwrap_or(raw);
        self.labels.iter().position(|l| l == label)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn err(v: Value) -> String {
        Task::from_value(&v, "task").unwrap_err().to_string()
    }

    #[test]
    fn builtins_have_the_documented_labels() {
        let Some(Task::Pair(l)) = Task::builtin("lcqmc") else {
            panic!()
        };
        assert_eq!(l.labels, ["0", "1"]);
        assert!(!l.header);
        assert_eq!(l.columns, Some(3));
        let Some(Task::Pair(x)) = Task::builtin("xnli") else {
            panic!()
        };
        assert_eq!(x.labels, ["contradiction", "entailment", "neutral"]);
        assert!(x.header);
        assert_eq!(x.text_a, Column::Name("text_a".into()));
        assert_eq!(x.label_id("contradictory"), Some(0));
        assert_eq!(x.label_id("entailment"), Some(1));
        assert_eq!(x.label_id(" neutral "), Some(2));
        assert_eq!(x.label_id("-"), None);
        for n in ["cmnli", "ocnli", "cnsd_snli"] {
            let Some(Task::Pair(p)) = Task::builtin(n) else {
                panic!()
            };
            assert_eq!(p.labels, NLI_LABELS);
            assert!(!p.header);
        }
        assert!(Task::builtin("pair").is_none(), "pair needs labels");
        assert!(Task::builtin("nope").is_none());
        assert_eq!(Task::builtin("choice").unwrap().kind(), TaskKind::Choice);
    }

    #[test]
    fn generic_pair_with_names_numbers_and_a_label_map() {
        let t = Task::from_value(
            &json!({"name": "pair", "text_a": "s1", "text_b": "s2", "label": "y",
                    "header": true, "labels": [0, 1], "label_map": {"yes": 1, "no": "0"}}),
            "task",
        )
        .unwrap();
        let Task::Pair(p) = t else { panic!() };
        assert_eq!(p.labels, ["0", "1"]);
        assert_eq!(p.label_id("yes"), Some(1));
        assert_eq!(p.label_id("no"), Some(0));
        assert_eq!(p.text_b, Column::Name("s2".into()));
        assert_eq!(p.columns, None);
    }

    #[test]
    fn overriding_a_builtin() {
        let Task::Pair(p) =
            Task::from_value(&json!({"name": "lcqmc", "header": true}), "t").unwrap()
        else {
            panic!()
        };
        assert!(p.header);
        assert_eq!(p.labels, ["0", "1"]);
        // xnli without a header falls back to positions.
        let Task::Pair(p) =
            Task::from_value(&json!({"name": "xnli", "header": false}), "t").unwrap()
        else {
            panic!()
        };
        assert_eq!(p.label, Column::Index(2));
        // Relabelling drops aliases whose target is gone.
        let Task::Pair(p) = Task::from_value(
            &json!({"name": "cmnli", "labels": ["entailment", "neutral", "contradiction"]}),
            "t",
        )
        .unwrap() else {
            panic!()
        };
        assert_eq!(p.label_id("contradictory"), Some(2));
    }

    #[test]
    fn errors_name_the_param() {
        assert!(
            err(json!("lcqcm")).contains("did you mean `lcqmc`"),
            "{}",
            err(json!("lcqcm"))
        );
        assert!(err(json!("pair")).contains("param `task.labels`"));
        assert!(err(json!({"name": "pair", "labels": ["a"]})).contains("at least 2"));
        assert!(err(json!({"name": "pair", "labels": ["a", "a"]})).contains("twice"));
        let e = err(json!({"name": "pair", "labels": ["a", "b"], "lables": []}));
        assert!(
            e.contains("unknown key `lables` (did you mean `labels`?)"),
            "{e}"
        );
        let e = err(json!({"name": "pair", "labels": ["a", "b"], "text_a": "s1"}));
        assert!(
            e.contains("param `task.text_a`") && e.contains("header: true"),
            "{e}"
        );
        let e = err(json!({"name": "pair", "labels": ["a", "b"], "text_b": 0}));
        assert!(e.contains("same column 0 as text_a"), "{e}");
        let e = err(json!({"name": "pair", "labels": ["a", "b"], "label_map": {"c": "d"}}));
        assert!(
            e.contains("param `task.label_map.c`") && e.contains("not one of"),
            "{e}"
        );
        let e = err(json!({"name": "lcqmc", "label": 5}));
        assert!(e.contains("past the 3 columns"), "{e}");
        assert!(err(json!({"labels": ["a"]})).contains("needs `name`"));
        assert!(err(json!(3)).contains("expected a task name"));
        let e = err(json!({"name": "choice", "num_choices": 1}));
        assert!(e.contains("param `task.num_choices`"), "{e}");
        let e = err(json!({"name": "choice", "labels": ["a", "b"]}));
        assert!(e.contains("unknown key `labels`"), "{e}");
    }
}
