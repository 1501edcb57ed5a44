//! What the two TSV classification formats, sentence pairs ([`crate::task::PairFormat`], the
//! pair kind's) and single texts ([`crate::task::SingleFormat`], the single kind's), share:
//! their view field by field, columns, labels and label aliases, and their checks.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use super::{Column, column, label_string};
use crate::error::TaskError;
use crate::params::{self, show};

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

pub(crate) fn accepted<'a>(
    labels: &'a [String],
    label_map: &'a BTreeMap<String, String>,
) -> impl Iterator<Item = (&'a str, &'a str)> {
    labels.iter().map(|l| (l.as_str(), l.as_str())).chain(
        label_map
            .iter()
            .map(|(raw, to)| (raw.as_str(), to.as_str())),
    )
}

pub(crate) fn label_id(
    labels: &[String],
    label_map: &BTreeMap<String, String>,
    raw: &str,
) -> Option<usize> {
    let raw = raw.trim();
    let label = label_map.get(raw).map(String::as_str).unwrap_or(raw);
    labels.iter().position(|l| l == label)
}

/// The column overrides of a map (`text_a: 1`, `label: gold`), and `header`: without a header a
/// built-in's column names fall back to its positions (the order of `keys`), since names only
/// make sense with a header.
pub(crate) fn apply_columns<const N: usize>(
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
pub(crate) fn apply_labels(
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
    pub(crate) fn validate(&self, at: &str) -> Result<(), TaskError> {
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
