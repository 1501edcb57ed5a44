//! The token-classification (tagging) formats: MSRA NER's `text_a \t label` rows, characters
//! and tags each separated by spaces, and CoNLL-style two-column files (one character and its
//! tag per line, a blank line between sentences). The tag set is given (`labels`) or read from
//! a `label2id.json` (`{"O": 0, "B-LOC": 1, …}`) when the protocol is loaded.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::TaskError;
use crate::params::{self, check_keys};
use crate::task::classify::{check_columns, label_list};
use crate::task::{Column, column};

pub(super) const TAGGING_KEYS: &[&str] = &[
    "name", "layout", "text", "label", "header", "labels", "label2id",
];

/// The tags of MSRA NER in its `label2id.json` order.
pub const MSRA_TAGS: [&str; 7] = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER", "B-ORG", "I-ORG"];

/// How a tagging file lays out its sentences.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TagLayout {
    /// One sentence per line: a text column of space-separated characters and a label column
    /// of as many space-separated tags.
    Tsv,
    /// One character per line (`text` and `label` are whitespace-separated columns, by
    /// default 0 and 1), a blank line between sentences.
    Conll,
}

/// A tagging file format and its tag set.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TagFormat {
    /// The built-in it came from (`msra_ner`) or `tagging`.
    pub name: String,
    /// A sentence per row, or a character per line.
    pub layout: TagLayout,
    /// The characters' column (TSV: a row's cell of space-separated characters; CoNLL: a
    /// line's whitespace-separated field, an index).
    pub text: Column,
    /// The tags' column, as `text`.
    pub label: Column,
    /// Whether the first line is a header row (TSV layout only).
    pub header: bool,
    /// The tags in id order; empty when they come from `label2id`.
    pub labels: Vec<String>,
    /// A `label2id.json` (relative to the workspace root) holding the tags and their ids, when
    /// `labels` is not given.
    pub label2id: Option<String>,
}

impl TagFormat {
    /// MSRA NER as the shared data has it.
    pub(crate) fn msra() -> TagFormat {
        TagFormat {
            name: "msra_ner".into(),
            layout: TagLayout::Tsv,
            text: Column::Name("text_a".into()),
            label: Column::Name("label".into()),
            header: true,
            labels: MSRA_TAGS.iter().map(|s| s.to_string()).collect(),
            label2id: None,
        }
    }

    /// The generic task, tags to be given.
    pub(crate) fn generic() -> TagFormat {
        TagFormat {
            name: "tagging".into(),
            layout: TagLayout::Tsv,
            text: Column::Index(0),
            label: Column::Index(1),
            header: false,
            labels: Vec::new(),
            label2id: None,
        }
    }

    pub(crate) fn apply(&mut self, map: &Map<String, Value>, at: &str) -> Result<(), TaskError> {
        check_keys(map, TAGGING_KEYS, at)?;
        if let Some(v) = map.get("layout") {
            self.layout = match params::string(v, &format!("{at}.layout"))?.trim() {
                "tsv" => TagLayout::Tsv,
                "conll" => TagLayout::Conll,
                other => {
                    return Err(TaskError::param(
                        format!("{at}.layout"),
                        format!(
                            "unknown layout `{other}`: tsv (a sentence per line) or conll (a \
                             character per line)"
                        ),
                    ));
                }
            };
        }
        for (key, slot) in [("text", &mut self.text), ("label", &mut self.label)] {
            if let Some(v) = map.get(key) {
                *slot = column(v, &format!("{at}.{key}"))?;
            }
        }
        if let Some(v) = map.get("header") {
            self.header = params::boolean(v, &format!("{at}.header"))?;
            if !self.header {
                for (i, (key, slot)) in [("text", &mut self.text), ("label", &mut self.label)]
                    .into_iter()
                    .enumerate()
                {
                    if matches!(slot, Column::Name(_)) && !map.contains_key(key) {
                        *slot = Column::Index(i);
                    }
                }
            }
        }
        if let Some(v) = map.get("labels") {
            self.labels = label_list(v, &format!("{at}.labels"))?;
            self.label2id = None;
        }
        if let Some(v) = map.get("label2id") {
            self.label2id = Some(params::string(v, &format!("{at}.label2id"))?);
            if !map.contains_key("labels") {
                self.labels.clear();
            }
        }
        Ok(())
    }

    pub(crate) fn validate(&self, at: &str) -> Result<(), TaskError> {
        match (&self.label2id, self.labels.is_empty()) {
            (Some(_), false) => {
                return Err(TaskError::param(
                    format!("{at}.label2id"),
                    "give either `labels` (the tags in id order) or `label2id` (a \
                     label2id.json), not both",
                ));
            }
            (None, true) => {
                return Err(TaskError::param(
                    format!("{at}.labels"),
                    format!(
                        "task {} needs its tags: `labels: [O, B-PER, I-PER, …]` (order = ids) \
                         or `label2id: PATH` (a label2id.json)",
                        self.name
                    ),
                ));
            }
            _ => {}
        }
        if !self.labels.is_empty() {
            check_tags(&self.labels, &format!("{at}.labels"))?;
        }
        if self.layout == TagLayout::Conll && self.header {
            return Err(TaskError::param(
                format!("{at}.header"),
                "a CoNLL file has no header row (leave header out)",
            ));
        }
        let cols = [("text", &self.text), ("label", &self.label)];
        check_columns(&cols, self.header, None, at)
    }

    /// The tag id of a raw tag.
    pub fn tag_id(&self, raw: &str) -> Option<usize> {
        self.labels.iter().position(|l| l == raw)
    }
}

/// A tag set: at least 2 tags, none twice, none with whitespace (tags are separated by it).
pub fn check_tags(tags: &[String], at: &str) -> Result<(), TaskError> {
    if tags.len() < 2 {
        return Err(TaskError::param(
            at,
            format!("{tags:?}: a tagging task needs at least 2 tags (O and one entity tag)"),
        ));
    }
    for (i, t) in tags.iter().enumerate() {
        if t.chars().any(char::is_whitespace) {
            return Err(TaskError::param(
                format!("{at}[{i}]"),
                format!("tag `{t}` holds whitespace, which separates tags"),
            ));
        }
        if tags[..i].contains(t) {
            return Err(TaskError::param(at, format!("tag `{t}` is listed twice")));
        }
    }
    Ok(())
}

/// The tags of a `label2id.json` (`{"O": 0, "B-LOC": 1, …}`) in id order; the ids must be
/// 0 … n-1.
pub fn tags_from_label2id(text: &str, path: &str) -> Result<Vec<String>, TaskError> {
    let bad = |m: String| TaskError::param("task.label2id", format!("{path}: {m}"));
    let map: Map<String, Value> =
        serde_json::from_str(text).map_err(|e| bad(format!("not a JSON map of tag to id: {e}")))?;
    let mut slots: Vec<Option<String>> = vec![None; map.len()];
    for (tag, id) in &map {
        let i = id
            .as_u64()
            .and_then(|i| usize::try_from(i).ok())
            .filter(|&i| i < map.len())
            .ok_or_else(|| {
                bad(format!(
                    "the id of `{tag}` is {id}; ids must be 0 … {}",
                    map.len().saturating_sub(1)
                ))
            })?;
        if let Some(other) = slots[i].replace(tag.clone()) {
            return Err(bad(format!("`{other}` and `{tag}` both have id {i}")));
        }
    }
    let tags: Vec<String> = slots.into_iter().flatten().collect();
    check_tags(&tags, "task.label2id")?;
    Ok(tags)
}
