//! The `report` stage's params, checked with errors that name the param.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use pipeline_engine::ParamError;
use pipeline_params::{Flag, Text};
use pipeline_tasks::task::BUILTIN_TASKS;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::declared::{self, TableSpec};
use crate::targets::spec::{self, TargetSpec};

/// Every param the kind takes: the fields of the params as parsed, so the list cannot drift
/// from what [`ReportParams::parse`] accepts.
pub fn known_params() -> &'static [&'static str] {
    pipeline_params::struct_fields::<Given>()
}

/// The tables a `notes` entry may be attached to besides those of the tasks (`summary`: the top
/// of the README). A task's table is named after the task: any name `task:` accepts.
pub const NOTE_KEYS: &[&str] = &[
    "summary",
    "model_size",
    "model_size_grid",
    "pretraining",
    "ablations",
    "targets",
    "throughput",
];

/// The README's title when the `title` param is left out.
pub const DEFAULT_TITLE: &str = "ALBERT for Chinese: results";

/// The params, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportParams {
    /// Where the files are published, relative to the workspace root; `None` when
    /// `publish_dir: ""` turns publishing off.
    pub publish_dir: Option<PathBuf>,
    /// The README's first heading: one line, not blank (`DEFAULT_TITLE` when left out).
    pub title: String,
    /// The commit the results come from, printed when given.
    pub commit: Option<String>,
    /// Free text per table, keyed by a name of `NOTE_KEYS` or a task and trimmed; printed under that
    /// table (`summary`: at the top of the README). Empty when `notes` is left out.
    pub notes: BTreeMap<String, String>,
    /// Where the benchmark JSONL files are, relative to the workspace root
    /// (`<publish_dir>/bench` by default); `None` when `bench_dir: ""` or when publishing is
    /// off and no `bench_dir` is given.
    pub bench_dir: Option<PathBuf>,
    /// Whether the SVG figures are drawn and linked from the README (`true` by default).
    pub plots: bool,
    /// The pretrain instance the targets are read off (`None`: the one with the most tokens
    /// seen among those with fine-tuning runs).
    pub main_pretrain: Option<String>,
    /// The experiment's targets, judged on the rows in this order (empty: no targets section).
    pub targets: Vec<TargetSpec>,
    /// The experiment's own tables, each a section after the tasks' (see `declared.rs`).
    pub tables: Vec<TableSpec>,
}

/// The params as given, typed (`null` means left out); checked and defaulted into
/// [`ReportParams`] by [`ReportParams::parse`].
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Given {
    publish_dir: Option<Text>,
    title: Option<Text>,
    commit: Option<Commit>,
    notes: Option<Notes>,
    bench_dir: Option<Text>,
    plots: Option<Flag>,
    main_pretrain: Option<Text>,
    /// Checked by [`spec::parse`], whose errors name the entry and field.
    targets: Option<Value>,
    /// Checked by [`declared::parse`], whose errors name the entry and field.
    tables: Option<Value>,
}

/// `commit`: one word (a hash or a tag), `None` when blank; an all-digit hash arrives as a
/// YAML number.
#[derive(Debug, Deserialize)]
#[serde(try_from = "Value")]
struct Commit(Option<String>);

impl TryFrom<Value> for Commit {
    type Error = ParamError;
    fn try_from(v: Value) -> Result<Self, ParamError> {
        Ok(Commit(match v {
            Value::String(s) if s.trim().is_empty() => None,
            Value::String(s) => {
                let s = s.trim();
                if s.contains(char::is_whitespace) {
                    return Err(format!("{s:?} must be one word (a hash or a tag)").into());
                }
                Some(s.to_string())
            }
            // YAML reads an all-digit hash as a number.
            Value::Number(n) => Some(n.to_string()),
            v => return Err(format!("must be a string (a hash or a tag), not {v}").into()),
        }))
    }
}

/// `notes`: a map from a table name to a text (names and texts are checked by [`notes`]).
#[derive(Debug, Deserialize)]
#[serde(try_from = "Value")]
struct Notes(Map<String, Value>);

impl TryFrom<Value> for Notes {
    type Error = ParamError;
    fn try_from(v: Value) -> Result<Self, ParamError> {
        match v {
            Value::Object(m) => Ok(Notes(m)),
            v => Err(format!(
                "must be a map from a table name to a text ({{pretraining: \"…\"}}), not {v}"
            )
            .into()),
        }
    }
}

/// A relative path that stays inside the workspace and is not the workspace itself or the
/// store.
fn workspace_dir(key: &str, s: &str) -> Result<PathBuf, String> {
    let path = Path::new(s);
    if path.is_absolute() {
        return Err(format!(
            "{key} {s:?} must be relative to the workspace root (the report links its files \
             relatively)"
        ));
    }
    let mut clean = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(part) => clean.push(part),
            Component::CurDir => {}
            _ => {
                return Err(format!(
                    "{key} {s:?} must stay inside the workspace (no `..`)"
                ));
            }
        }
    }
    if clean.as_os_str().is_empty() {
        return Err(format!(
            "{key} {s:?} is the workspace root: the report would overwrite the project's \
             README.md; use a folder such as `results` (or \"\" for no publishing)"
        ));
    }
    if clean.starts_with(".pipeline") || clean.starts_with(".git") {
        return Err(format!(
            "{key} {s:?} is inside {}, which the report must not write into",
            clean
                .components()
                .next()
                .map_or("", |c| c.as_os_str().to_str().unwrap_or(""))
        ));
    }
    Ok(clean)
}

/// " (did you mean "x"?)" for the closest known name, if it is close (the engine's measure).
pub(crate) fn suggestion(word: &str, known: &[&str]) -> String {
    pipeline_engine::error::closest(word, known.iter().copied())
        .map(|k| format!(" (did you mean {k:?}?)"))
        .unwrap_or_default()
}

/// `notes`: a text per table name (refused for a name that is not a table).
fn notes(given: Option<Notes>) -> Result<BTreeMap<String, String>, String> {
    let mut notes = BTreeMap::new();
    let tables: Vec<&str> = NOTE_KEYS.iter().chain(BUILTIN_TASKS).copied().collect();
    for (k, v) in given.map(|n| n.0).unwrap_or_default() {
        if !tables.contains(&k.as_str()) {
            return Err(format!(
                "notes.{k}: no such table{}; the tables are {}",
                suggestion(&k, &tables),
                tables.join(", ")
            ));
        }
        match v {
            Value::String(s) => {
                notes.insert(k, s.trim().to_string());
            }
            other => return Err(format!("notes.{k} must be a string, not {other}")),
        }
    }
    Ok(notes)
}

/// Every `cell` target names a table of `tables`.
fn cell_tables_are_declared(targets: &[TargetSpec], tables: &[TableSpec]) -> Result<(), String> {
    let keys: Vec<&str> = tables.iter().map(|t| t.key.0.as_str()).collect();
    for (i, t) in targets.iter().enumerate() {
        if let spec::Claim::Cell(c) = &t.claim
            && !keys.contains(&c.table.0.as_str())
        {
            return Err(format!(
                "targets[{i}].cell.table `{}` is not a table of `tables`{}",
                c.table.0,
                suggestion(&c.table.0, &keys)
            ));
        }
    }
    Ok(())
}

impl ReportParams {
    /// Checks the stage's params and fills in the defaults; the error names the param at fault
    /// (an unknown param, a path outside the workspace, a `notes` key that is no table).
    pub fn parse(p: &Map<String, Value>) -> Result<ReportParams, ParamError> {
        Self::parse_text(p).map_err(ParamError)
    }

    /// [`Self::parse`] with the message as a `String` (the helpers it calls build them so).
    fn parse_text(p: &Map<String, Value>) -> Result<ReportParams, String> {
        let g: Given = pipeline_params::from_own_keys(p).map_err(String::from)?;
        let text = |t: Option<Text>| t.map(|t| t.0);
        let publish_dir = match text(g.publish_dir) {
            None => Some(PathBuf::from("results")),
            Some(s) if s.is_empty() => None,
            Some(s) => Some(workspace_dir("publish_dir", &s)?),
        };
        let title = match text(g.title) {
            None => DEFAULT_TITLE.to_string(),
            Some(t) if t.trim().is_empty() => return Err("title must not be empty".into()),
            Some(t) if t.contains('\n') => return Err("title must be one line".into()),
            Some(t) => t,
        };
        let commit = g.commit.and_then(|c| c.0);
        let notes = notes(g.notes)?;
        let bench_dir = match text(g.bench_dir) {
            Some(s) if s.is_empty() => None,
            Some(s) => Some(workspace_dir("bench_dir", &s)?),
            None => publish_dir.as_ref().map(|d| d.join("bench")),
        };
        let plots = g.plots.is_none_or(|f| f.0);
        let main_pretrain = match text(g.main_pretrain) {
            Some(s) if s.trim().is_empty() => None,
            other => other.map(|s| s.trim().to_string()),
        };
        let targets = match g.targets {
            Some(v) => spec::parse(v).map_err(|e| e.0)?,
            None => Vec::new(),
        };
        let tables = match g.tables {
            Some(v) => declared::parse(v)?,
            None => Vec::new(),
        };
        cell_tables_are_declared(&targets, &tables)?;
        Ok(ReportParams {
            targets,
            tables,
            publish_dir,
            title,
            commit,
            notes,
            bench_dir,
            plots,
            main_pretrain,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<ReportParams, String> {
        ReportParams::parse(v.as_object().unwrap()).map_err(|e| e.0)
    }

    #[test]
    fn defaults() {
        let p = parse(json!({})).unwrap();
        assert_eq!(p.publish_dir, Some(PathBuf::from("results")));
        assert_eq!(p.bench_dir, Some(PathBuf::from("results/bench")));
        assert_eq!(p.title, DEFAULT_TITLE);
        assert_eq!(p.commit, None);
        assert!(p.plots);
        assert!(p.targets.is_empty(), "no targets unless stated");
        let off = parse(json!({"publish_dir": ""})).unwrap();
        assert_eq!(off.publish_dir, None);
        assert_eq!(off.bench_dir, None);
        let p = parse(json!({"publish_dir": "./out/report/", "commit": 1234567,
            "notes": {"lcqmc": " hello "}}))
        .unwrap();
        assert_eq!(p.publish_dir, Some(PathBuf::from("out/report")));
        assert_eq!(p.commit.as_deref(), Some("1234567"));
        assert_eq!(p.notes["lcqmc"], "hello");
    }

    #[test]
    fn bad_params_are_clear_errors() {
        let err = |v: Value| parse(v).unwrap_err();
        assert!(err(json!({"publish_dir": "/tmp/x"})).contains("relative"));
        assert!(err(json!({"publish_dir": "../x"})).contains("inside the workspace"));
        assert!(err(json!({"publish_dir": "."})).contains("workspace root"));
        assert!(err(json!({"publish_dir": ".pipeline/x"})).contains(".pipeline"));
        assert!(err(json!({"publish_dir": 3})).contains("must be a string"));
        assert!(err(json!({"title": ""})).contains("empty"));
        assert!(err(json!({"commit": "a b"})).contains("one word"));
        assert!(err(json!({"notes": "x"})).contains("map"));
        let e = err(json!({"notes": {"lcqcm": "x"}}));
        assert!(e.contains("did you mean \"lcqmc\""), "{e}");
        assert!(err(json!({"notes": {"xnli": 3}})).contains("must be a string"));
        assert!(err(json!({"plots": "yes"})).contains("true or false"));
        assert!(err(json!({"bench_dir": "../b"})).contains("bench_dir"));
        assert!(err(json!({"main_pretrain": 3})).contains("main_pretrain must be a string"));
        let p = parse(json!({"main_pretrain": "pretrain@share_type=all",
                             "notes": {"ablations": "x", "chnsenticorp": "y"}}))
        .unwrap();
        assert_eq!(p.main_pretrain.as_deref(), Some("pretrain@share_type=all"));
        let e = err(json!({"targets": [{"device_time": {"minutes": "12"}}]}));
        assert_eq!(
            e,
            "targets[0].device_time.minutes must be a number, not \"12\""
        );
        let p = parse(json!({"targets": [{"device_time": {"minutes": 12}}]})).unwrap();
        assert_eq!(p.targets[0].key, "device_time");
    }

    #[test]
    fn type_errors_are_whole_sentences_that_name_the_param() {
        let err = |v: Value| parse(v).unwrap_err();
        assert_eq!(
            err(json!({"publish_dir": 3})),
            "publish_dir must be a string, not 3"
        );
        assert_eq!(
            err(json!({"commit": "a b"})),
            "commit \"a b\" must be one word (a hash or a tag)"
        );
        assert_eq!(
            err(json!({"commit": true})),
            "commit must be a string (a hash or a tag), not true"
        );
        assert_eq!(
            err(json!({"notes": "x"})),
            "notes must be a map from a table name to a text ({pretraining: \"…\"}), not \"x\""
        );
        assert_eq!(
            err(json!({"plots": "yes"})),
            "plots must be true or false, not \"yes\""
        );
        // An all-digit hash arrives as a number; a blank commit, null or a missing key: none.
        assert_eq!(
            parse(json!({"commit": 1234567})).unwrap().commit.as_deref(),
            Some("1234567")
        );
        assert_eq!(parse(json!({"commit": "  "})).unwrap().commit, None);
        assert!(parse(json!({"commit": null, "plots": null})).unwrap().plots);
    }
}
