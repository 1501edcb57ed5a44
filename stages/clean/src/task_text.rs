//! The fine-tuning tasks the clean stage reads: `task_text` (their train texts join the corpus,
//! task-adaptive pretraining) and `exclude_texts_of` (their dev and test texts must never enter
//! it). Each entry is a fine-tuning protocol in the map form the finetune and baseline stages
//! take (`{task: chnsenticorp, train: …, dev: …, test: …}`), parsed and loaded by
//! [`pipeline_tasks::ProtocolSpec`], the finetune stage's own loader: pipeline.yaml passes the
//! same vars to both, so the texts added are exactly those fine-tuning trains on (after
//! `drop_eval_overlap`, the held-out `dev_fraction` and `max_train_examples`) and cannot drift
//! from them.
//!
//! Why params of `clean` rather than a stage kind of their own: the task texts must go through
//! the same normalisation, sentence splitting, length filters, deduplication against the corpus
//! and decontamination as the corpus, in the same pass, and be counted in the same metrics;
//! a separate stage would repeat the first four or hand `clean` files it cannot tell apart from
//! the corpus.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use pipeline_params::ParamError;
use pipeline_tasks::{ProtocolSpec, texts};
use pipeline_text::corpus::Document;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One entry of `task_text` or `exclude_texts_of`.
#[derive(Debug, Clone)]
pub struct TaskEntry {
    /// `name`, or the task's name: the key in metrics.json.
    pub name: String,
    /// The protocol, as finetune parses it.
    pub spec: ProtocolSpec,
}

/// The keys of an entry: the protocol's, and `name`.
fn entry_keys() -> Vec<&'static str> {
    std::iter::once("name")
        .chain(pipeline_tasks::known_params().iter().copied())
        .collect()
}

/// The closest key, for a "did you mean" (the engine's one measure).
fn suggestion(key: &str, allowed: &[&str]) -> String {
    pipeline_engine::error::closest(key, allowed.iter().copied())
        .map(|a| format!(" (did you mean `{a}`?)"))
        .unwrap_or_default()
}

/// Parses `param` (a list of protocol maps; null or absent: none) without reading a file.
pub fn parse_entries(v: &Value, param: &str) -> Result<Vec<TaskEntry>, ParamError> {
    let items = match v {
        Value::Null => return Ok(Vec::new()),
        Value::Array(items) => items,
        other => {
            return Err(format!(
                "param `{param}` must be a list of fine-tuning protocols such as \
                 [{{task: chnsenticorp, train: …, dev: …, test: …}}], not {other}"
            )
            .into());
        }
    };
    let allowed = entry_keys();
    let mut out: Vec<TaskEntry> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let at = format!("{param}[{i}]");
        let map = item.as_object().ok_or_else(|| {
            format!("param `{at}` must be a protocol map (task, train, dev or dev_fraction, test …), not {item}")
        })?;
        if let Some(key) = map.keys().find(|k| !allowed.contains(&k.as_str())) {
            return Err(format!(
                "param `{at}`: unknown key `{key}`{}; an entry takes the protocol's keys ({}) \
                 and `name`; training params such as epochs belong to the finetune stage",
                suggestion(key, &allowed),
                pipeline_tasks::known_params().join(", ")
            )
            .into());
        }
        let mut protocol: Map<String, Value> = map.clone();
        let name = match protocol.remove("name") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if !s.trim().is_empty() => Some(s.trim().to_string()),
            Some(other) => {
                return Err(format!("param `{at}.name` must be a name, not {other}").into());
            }
        };
        let spec =
            ProtocolSpec::from_params(&protocol).map_err(|e| format!("param `{at}`: {e}"))?;
        let name = name.unwrap_or_else(|| spec.task.name().to_string());
        if out.iter().any(|e| e.name == name) {
            return Err(format!(
                "param `{at}`: a second entry named `{name}`; give one of them a `name` (e.g. \
                 `name: {name}_2`), the key its counts get in metrics.json"
            )
            .into());
        }
        out.push(TaskEntry { name, spec });
    }
    Ok(out)
}

/// A task entry's texts, loaded.
pub struct Loaded {
    pub name: String,
    /// The protocol's files as the params give them.
    pub files: Vec<String>,
    /// Train examples as text fields (empty for an `exclude_texts_of` entry).
    pub train: Vec<Vec<String>>,
    /// Dev and evaluation texts.
    pub held_out: Vec<String>,
}

/// Loads an entry's protocol (evaluation caps lifted: every held-out text counts); with
/// `train`, its train texts too.
pub fn load(entry: &TaskEntry, root: &Path, train: bool) -> anyhow::Result<Loaded> {
    let protocol = texts::uncapped(&entry.spec)
        .load(root)
        .with_context(|| format!("reading the texts of task `{}`", entry.name))?;
    Ok(Loaded {
        name: entry.name.clone(),
        files: entry.spec.paths().iter().map(|p| p.to_string()).collect(),
        train: if train {
            texts::train_texts(&protocol)?
        } else {
            Vec::new()
        },
        held_out: texts::held_out_texts(&protocol)?,
    })
}

/// Every file the entries read, resolved against `root`: inputs that are these are task files,
/// not corpus.
pub fn task_files(entries: &[&TaskEntry], root: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = entries
        .iter()
        .flat_map(|e| e.spec.paths())
        .map(|p| canonical(&root.join(p)))
        .collect();
    out.sort();
    out.dedup();
    out
}

pub fn canonical(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

/// A task's train examples as documents (one per example, its fields as paragraphs), under
/// the name of the task's first train file.
pub fn documents(loaded: &Loaded) -> Vec<Document> {
    let file: Arc<Path> = Arc::from(Path::new(
        loaded.files.first().map_or("task", String::as_str),
    ));
    loaded
        .train
        .iter()
        .enumerate()
        .map(|(i, fields)| Document {
            paragraphs: fields.clone(),
            file: file.clone(),
            line: i as u64 + 1,
        })
        .collect()
}

/// What a `task_text` entry added, for metrics.json.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskTextCounts {
    /// The protocol's files, as given.
    pub files: Vec<String>,
    /// Train examples (one document each).
    pub examples: u64,
    /// Their text fields.
    pub texts: u64,
    /// Characters before cleaning.
    pub chars_in: u64,
    /// Documents kept.
    pub documents_out: u64,
    /// Their characters after cleaning.
    pub chars_out: u64,
    /// Their sentences after cleaning.
    pub sentences_out: u64,
    /// Documents dropped, by the clean stage's reasons.
    pub dropped: BTreeMap<String, u64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<Vec<TaskEntry>, String> {
        parse_entries(&v, "task_text").map_err(|e| e.0)
    }

    #[test]
    fn entries_take_the_protocol_map_and_a_name() {
        let e = parse(json!([
            {"task": "chnsenticorp", "train": "c/train.tsv", "dev": "c/dev.tsv",
             "test": "c/test.tsv", "max_train_examples": null},
            {"task": "lcqmc", "train": "l/dev.tsv", "dev_fraction": 0.1, "name": "lcqmc_dev"},
        ]))
        .unwrap();
        assert_eq!(e[0].name, "chnsenticorp");
        assert_eq!(e[1].name, "lcqmc_dev");
        assert_eq!(
            e[0].spec.paths(),
            ["c/train.tsv", "c/dev.tsv", "c/test.tsv"]
        );
        assert!(parse(Value::Null).unwrap().is_empty());
    }

    #[test]
    fn bad_entries_name_the_entry() {
        for (v, want) in [
            (json!("chnsenticorp"), "must be a list"),
            (json!([3]), "`task_text[0]` must be a protocol map"),
            (
                json!([{"task": "chnsenticorp", "train": "a", "dev": "b", "epochs": 3}]),
                "unknown key `epochs`",
            ),
            (
                json!([{"task": "chnsenticorp", "trian": "a"}]),
                "did you mean `train`?",
            ),
            (
                json!([{"task": "chnsenticorp", "train": "a"}]),
                "task_text[0]",
            ),
            (
                json!([{"task": "lcqmc", "train": "a", "dev_fraction": 0.1},
                       {"task": "lcqmc", "train": "b", "dev_fraction": 0.1}]),
                "a second entry named `lcqmc`",
            ),
        ] {
            let e = parse(v.clone()).unwrap_err();
            assert!(e.contains(want), "{v}: {e}");
        }
    }
}
