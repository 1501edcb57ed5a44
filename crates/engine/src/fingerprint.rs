//! Fingerprints of stage instances and the words that explain why one is stale.
//!
//! fingerprint = blake3(kind, code version, canonical params and spec, input file digests, dep
//! output digests). Deps enter by their *output* digest, not their fingerprint, so a dep that
//! re-runs and writes the same bytes leaves its dependents cached (early cutoff).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;

use crate::error::FingerprintError;
use crate::hash::{FileStamp, hash_file};
use crate::index::Index;
use crate::manifest::{Components, Manifest};
use crate::plan::{Instance, display_value};
use crate::stage::Registry;
use crate::workspace::Workspace;

/// The components of an instance's fingerprint, given its deps' output digests. Input files
/// are hashed unless the index has their digest under an unchanged stamp.
pub fn components(
    inst: &Instance,
    registry: &Registry,
    index: &mut Index,
    dep_outputs: BTreeMap<String, String>,
) -> Result<Components, FingerprintError> {
    let kind = registry
        .get(&inst.kind)
        .ok_or_else(|| FingerprintError::UnknownKind {
            kind: inst.kind.clone(),
        })?;
    let mut inputs = BTreeMap::new();
    for input in &inst.inputs {
        let meta = std::fs::metadata(&input.path).map_err(|cause| FingerprintError::Input {
            key: input.key.clone(),
            stage: inst.name.clone(),
            cause,
        })?;
        let stamp = FileStamp::of(&meta);
        let cache_key = input.path.to_string_lossy();
        let digest = match index.cached_hash(&cache_key, stamp) {
            Some(d) => d,
            None => {
                let d = hash_file(&input.path).map_err(|cause| FingerprintError::Hash {
                    key: input.key.clone(),
                    cause,
                })?;
                index.store_hash(&cache_key, stamp, &d);
                d
            }
        };
        inputs.insert(input.key.clone(), digest);
    }
    Ok(Components {
        kind: inst.kind.clone(),
        code_version: kind.code_version().to_string(),
        params: inst.params.clone(),
        spec: inst.spec.clone(),
        inputs,
        deps: dep_outputs,
    })
}

/// Whether an instance with these components has a usable artifact, and if not, why.
pub enum Freshness {
    /// The artifact of this fingerprint is in the store, its files present.
    Fresh {
        /// The artifact directory.
        dir: PathBuf,
        /// Its manifest.
        manifest: Box<Manifest>,
    },
    /// No usable artifact: the instance has to run.
    Stale {
        /// Why, in the words `status` shows ("never ran", "input corpus changed", …).
        reasons: Vec<String>,
    },
}

/// Whether the artifact of `comps`' fingerprint is in the store with its files present; if
/// not, the reasons against the instance's latest run.
pub fn freshness(ws: &Workspace, index: &Index, inst: &Instance, comps: &Components) -> Freshness {
    let fp = comps.fingerprint();
    let dir = ws.artifact_dir(&inst.name, &fp);
    if let Some(m) = Manifest::read(&dir)
        && m.fingerprint == fp
        && m.files_present(&dir)
    {
        return Freshness::Fresh {
            dir,
            manifest: Box::new(m),
        };
    }
    Freshness::Stale {
        reasons: why_stale(ws, index, inst, Some(comps), &fp),
    }
}

/// Reasons against the latest successful run of the instance. `comps` is `None` when a dep
/// has yet to run, so only the instance's own changes can be told.
pub fn why_stale(
    ws: &Workspace,
    index: &Index,
    inst: &Instance,
    comps: Option<&Components>,
    fp: &str,
) -> Vec<String> {
    let Some(latest) = index.latest(&inst.name) else {
        return vec!["never ran".into()];
    };
    if latest == fp {
        return vec!["artifact missing or corrupt".into()];
    }
    let Some(old) = Manifest::read(&ws.artifact_dir(&inst.name, &latest)) else {
        return vec!["artifact missing or corrupt".into()];
    };
    match comps {
        Some(new) => diff(&old.components, new, true),
        None => Vec::new(),
    }
}

/// What differs between two sets of components, in words.
pub fn diff(old: &Components, new: &Components, with_deps: bool) -> Vec<String> {
    let mut out = Vec::new();
    if old.kind != new.kind {
        out.push(format!("kind changed {} → {}", old.kind, new.kind));
    } else if old.code_version != new.code_version {
        out.push(format!("code of stage kind {} changed", new.kind));
    }
    if old.spec.get("cmd") != new.spec.get("cmd") {
        out.push("command changed".into());
    }
    if old.spec.get("outs") != new.spec.get("outs") {
        out.push("declared outs changed".into());
    }
    for (k, v) in &new.params {
        match old.params.get(k) {
            None => out.push(format!("param {k} added")),
            Some(o) if o != v => out.push(format!("param {k} changed {} → {}", short(o), short(v))),
            _ => {}
        }
    }
    for k in old.params.keys().filter(|k| !new.params.contains_key(*k)) {
        out.push(format!("param {k} removed"));
    }
    for (k, v) in &new.inputs {
        match old.inputs.get(k) {
            None => out.push(format!("input {k} added")),
            Some(o) if o != v => out.push(format!("input {k} changed")),
            _ => {}
        }
    }
    for k in old.inputs.keys().filter(|k| !new.inputs.contains_key(*k)) {
        out.push(format!("input {k} removed"));
    }
    if with_deps {
        for (k, v) in &new.deps {
            match old.deps.get(k) {
                None => out.push(format!("dep {k} added")),
                Some(o) if o != v => out.push(format!("dep {k} produced new output")),
                _ => {}
            }
        }
        for k in old.deps.keys().filter(|k| !new.deps.contains_key(*k)) {
            out.push(format!("dep {k} removed"));
        }
    }
    if out.is_empty() {
        out.push("fingerprint changed".into());
    }
    out
}

fn short(v: &Value) -> String {
    let s = display_value(v);
    if s.chars().count() > 40 {
        format!("{}…", s.chars().take(39).collect::<String>())
    } else {
        s
    }
}

/// Own changes of an instance whose deps have yet to run: compare everything but deps.
pub fn own_changes(
    ws: &Workspace,
    index: &Index,
    inst: &Instance,
    partial: &Components,
) -> Vec<String> {
    let Some(latest) = index.latest(&inst.name) else {
        return vec!["never ran".into()];
    };
    let Some(old) = Manifest::read(&ws.artifact_dir(&inst.name, &latest)) else {
        return Vec::new();
    };
    let mut d = diff(&old.components, partial, false);
    d.retain(|r| r != "fingerprint changed");
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn comps(lr: f64, input: &str, dep: &str) -> Components {
        Components {
            kind: "cmd".into(),
            code_version: "c1".into(),
            params: json!({"lr": lr}).as_object().unwrap().clone(),
            spec: json!({"cmd": "x"}),
            inputs: BTreeMap::from([("a.txt".to_string(), input.to_string())]),
            deps: BTreeMap::from([("clean".to_string(), dep.to_string())]),
        }
    }

    #[test]
    fn diff_says_what_changed() {
        let old = comps(1e-4, "h1", "d1");
        assert_eq!(
            diff(&old, &comps(2e-4, "h1", "d1"), true),
            ["param lr changed 0.0001 → 0.0002"]
        );
        assert_eq!(
            diff(&old, &comps(1e-4, "h2", "d1"), true),
            ["input a.txt changed"]
        );
        assert_eq!(
            diff(&old, &comps(1e-4, "h1", "d2"), true),
            ["dep clean produced new output"]
        );
        let mut new = comps(1e-4, "h1", "d1");
        new.code_version = "c2".into();
        assert_eq!(diff(&old, &new, true), ["code of stage kind cmd changed"]);
    }

    #[test]
    fn fingerprint_is_stable_and_sensitive() {
        assert_eq!(
            comps(1.0, "h", "d").fingerprint(),
            comps(1.0, "h", "d").fingerprint()
        );
        assert_ne!(
            comps(1.0, "h", "d").fingerprint(),
            comps(1.0, "h", "e").fingerprint()
        );
        assert_eq!(comps(1.0, "h", "d").fingerprint().len(), 32);
    }
}
