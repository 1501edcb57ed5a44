//! The two TSV classification formats, sentence pairs ([`PairFormat`]) and single texts
//! ([`SingleFormat`]): their columns, labels and label aliases, and the checks both share.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::{Map, Value};

use super::{Column, column, label_string};
use crate::error::TaskError;
use crate::params::{self, check_keys, show};

pub(super) const PAIR_KEYS: &[&str] = &[
    "name",
    "text_a",
    "text_b",
    "label",
    "header",
    "columns",
    "labels",
    "label_map",
];

pub(super) const SINGLE_KEYS: &[&str] = &[
    "name",
    "text",
    "label",
    "header",
    "columns",
    "labels",
    "label_map",
];

/// A tab-separated sentence-pair file format with its labels.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairFormat {
    /// The built-in it came from (`lcqmc`, `xnli`, …) or `pair`.
    pub name: String,
    /// The first text's column.
    pub text_a: Column,
    /// The second text's column.
    pub text_b: Column,
    /// The raw label's column.
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

/// A tab-separated single-text file format with its labels (ChnSentiCorp, SMP2020-EWECT, or
/// any `label \t text` file): the same fields as [`PairFormat`] with one text column.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SingleFormat {
    /// The built-in it came from (`chnsenticorp`, `smp2020_ewect`) or `single`.
    pub name: String,
    /// The text's column.
    pub text: Column,
    /// The raw label's column.
    pub label: Column,
    /// As [`PairFormat::header`].
    pub header: bool,
    /// As [`PairFormat::columns`].
    pub columns: Option<usize>,
    /// As [`PairFormat::labels`].
    pub labels: Vec<String>,
    /// As [`PairFormat::label_map`].
    pub label_map: BTreeMap<String, String>,
}

/// What the pair and single formats have in common, seen field by field.
pub(crate) struct ClassView<'a> {
    pub name: &'a str,
    /// The text columns in order (`text_a`, `text_b`, or `text`) then `label`.
    pub columns: Vec<(&'static str, &'a Column)>,
    pub header: bool,
    pub column_count: Option<usize>,
    pub labels: &'a [String],
    pub label_map: &'a BTreeMap<String, String>,
}

impl PairFormat {
    pub(crate) fn view(&self) -> ClassView<'_> {
        ClassView {
            name: &self.name,
            columns: vec![
                ("text_a", &self.text_a),
                ("text_b", &self.text_b),
                ("label", &self.label),
            ],
            header: self.header,
            column_count: self.columns,
            labels: &self.labels,
            label_map: &self.label_map,
        }
    }

    pub(crate) fn apply(&mut self, map: &Map<String, Value>, at: &str) -> Result<(), TaskError> {
        check_keys(map, PAIR_KEYS, at)?;
        let keys = ["text_a", "text_b", "label"];
        let slots = [&mut self.text_a, &mut self.text_b, &mut self.label];
        apply_columns(map, at, &keys, slots, &mut self.header)?;
        apply_labels(
            map,
            at,
            &mut self.columns,
            &mut self.labels,
            &mut self.label_map,
        )
    }

    pub(crate) fn validate(&self, at: &str) -> Result<(), TaskError> {
        self.view().validate(at)
    }

    /// The raw strings (labels and `label_map` keys) this format accepts, with the label each
    /// one means.
    pub fn accepted_labels(&self) -> impl Iterator<Item = (&str, &str)> {
        accepted(&self.labels, &self.label_map)
    }

    /// The class id of a raw label in this format's own label order.
    pub fn label_id(&self, raw: &str) -> Option<usize> {
        label_id(&self.labels, &self.label_map, raw)
    }
}

impl SingleFormat {
    pub(crate) fn view(&self) -> ClassView<'_> {
        ClassView {
            name: &self.name,
            columns: vec![("text", &self.text), ("label", &self.label)],
            header: self.header,
            column_count: self.columns,
            labels: &self.labels,
            label_map: &self.label_map,
        }
    }

    pub(crate) fn apply(&mut self, map: &Map<String, Value>, at: &str) -> Result<(), TaskError> {
        check_keys(map, SINGLE_KEYS, at)?;
        let keys = ["text", "label"];
        let slots = [&mut self.text, &mut self.label];
        apply_columns(map, at, &keys, slots, &mut self.header)?;
        apply_labels(
            map,
            at,
            &mut self.columns,
            &mut self.labels,
            &mut self.label_map,
        )
    }

    pub(crate) fn validate(&self, at: &str) -> Result<(), TaskError> {
        self.view().validate(at)
    }

    /// As [`PairFormat::accepted_labels`].
    pub fn accepted_labels(&self) -> impl Iterator<Item = (&str, &str)> {
        accepted(&self.labels, &self.label_map)
    }

    /// As [`PairFormat::label_id`].
    pub fn label_id(&self, raw: &str) -> Option<usize> {
        label_id(&self.labels, &self.label_map, raw)
    }
}

fn accepted<'a>(
    labels: &'a [String],
    label_map: &'a BTreeMap<String, String>,
) -> impl Iterator<Item = (&'a str, &'a str)> {
    labels.iter().map(|l| (l.as_str(), l.as_str())).chain(
        label_map
            .iter()
            .map(|(raw, to)| (raw.as_str(), to.as_str())),
    )
}

fn label_id(labels: &[String], label_map: &BTreeMap<String, String>, raw: &str) -> Option<usize> {
    let raw = raw.trim();
    let label = label_map.get(raw).map(String::as_str).unwrap_or(raw);
    labels.iter().position(|l| l == label)
}

/// The column overrides of a map (`text_a: 1`, `label: gold`), and `header`: without a header a
/// built-in's column names fall back to its positions (the order of `keys`), since names only
/// make sense with a header.
fn apply_columns<const N: usize>(
    map: &Map<String, Value>,
    at: &str,
    keys: &[&str; N],
    slots: [&mut Column; N],
    header: &mut bool,
) -> Result<(), TaskError> {
    let mut slots = slots;
    for (key, slot) in keys.iter().zip(slots.iter_mut()) {
        if let Some(v) = map.get(*key) {
            **slot = column(v, &format!("{at}.{key}"))?;
        }
    }
    if let Some(v) = map.get("header") {
        *header = params::boolean(v, &format!("{at}.header"))?;
        if !*header {
            for (i, (key, slot)) in keys.iter().zip(slots.iter_mut()).enumerate() {
                if matches!(**slot, Column::Name(_)) && !map.contains_key(*key) {
                    **slot = Column::Index(i);
                }
            }
        }
    }
    Ok(())
}

/// `columns`, `labels` and `label_map` of a map.
fn apply_labels(
    map: &Map<String, Value>,
    at: &str,
    columns: &mut Option<usize>,
    labels: &mut Vec<String>,
    label_map: &mut BTreeMap<String, String>,
) -> Result<(), TaskError> {
    if let Some(v) = map.get("columns") {
        *columns = Some(params::count(v, &format!("{at}.columns"))?);
    }
    if let Some(v) = map.get("labels") {
        *labels = label_list(v, &format!("{at}.labels"))?;
        // The built-in aliases refer to the built-in labels; keep only those that still make
        // sense.
        label_map.retain(|_, to| labels.contains(to));
    }
    if let Some(v) = map.get("label_map") {
        let at = format!("{at}.label_map");
        let m = params::object(v, &at)?;
        for (raw, to) in m {
            let to = label_string(to, &format!("{at}.{raw}"))?;
            label_map.insert(raw.trim().to_string(), to);
        }
    }
    Ok(())
}

/// A list of labels (order = class ids).
pub(crate) fn label_list(v: &Value, at: &str) -> Result<Vec<String>, TaskError> {
    let list = v.as_array().ok_or_else(|| {
        TaskError::param(
            at,
            format!(
                "expected a list of labels (order = class ids), got {}",
                show(v)
            ),
        )
    })?;
    list.iter()
        .enumerate()
        .map(|(i, l)| label_string(l, &format!("{at}[{i}]")))
        .collect()
}

/// Labels present, at least 2, none twice.
pub(crate) fn check_label_list(labels: &[String], name: &str, at: &str) -> Result<(), TaskError> {
    if labels.is_empty() {
        return Err(TaskError::param(
            format!("{at}.labels"),
            format!(
                "task {name} needs `labels`, the class labels in class-id order \
                 (e.g. labels: [\"0\", \"1\"])"
            ),
        ));
    }
    if labels.len() < 2 {
        return Err(TaskError::param(
            format!("{at}.labels"),
            format!("{labels:?}: a classification task needs at least 2 labels"),
        ));
    }
    let mut seen = BTreeSet::new();
    for l in labels {
        if !seen.insert(l) {
            return Err(TaskError::param(
                format!("{at}.labels"),
                format!("label `{l}` is listed twice"),
            ));
        }
    }
    Ok(())
}

impl ClassView<'_> {
    fn validate(&self, at: &str) -> Result<(), TaskError> {
        check_label_list(self.labels, self.name, at)?;
        self.check_label_map(at)?;
        check_columns(&self.columns, self.header, self.column_count, at)
    }

    fn check_label_map(&self, at: &str) -> Result<(), TaskError> {
        for (raw, to) in self.label_map {
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
        Ok(())
    }
}

/// Column names need a header; no two fields in one column; indices within `columns`.
pub(crate) fn check_columns(
    cols: &[(&str, &Column)],
    header: bool,
    column_count: Option<usize>,
    at: &str,
) -> Result<(), TaskError> {
    for (key, col) in cols {
        if let Column::Name(n) = col
            && !header
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
    for i in 0..cols.len() {
        for j in i + 1..cols.len() {
            if cols[i].1 == cols[j].1 {
                return Err(TaskError::param(
                    format!("{at}.{}", cols[j].0),
                    format!("is the same {} as {}", cols[j].1, cols[i].0),
                ));
            }
        }
    }
    if let Some(n) = column_count {
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
