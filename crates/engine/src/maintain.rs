//! Upkeep of the artifact store: `gc` removes what nothing references, `verify` re-hashes
//! every artifact and moves corrupt ones into quarantine. Both write, so the caller holds the
//! workspace lock.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::Pipeline;
use crate::error::{FingerprintError, MaintainError, UserError};
use crate::exec::{hash_tree, predict};
use crate::index::{Index, list_artifacts};
use crate::manifest::{LOG_DIR, MANIFEST, Manifest, now_string};
use crate::workspace::dir_name;
use crate::yaml::NodeValue;

/// An entry `gc` removed (or, with `--dry-run`, would remove).
#[derive(Debug, Serialize)]
pub struct Removed {
    /// The instance whose artifact or work area it was; `(killed run)` for a leftover in
    /// `tmp/`, `(quarantined)` for an entry of the quarantine.
    pub instance: String,
    /// The artifact's fingerprint, or the entry's name where it has none.
    pub fingerprint: String,
    /// The entry.
    pub path: PathBuf,
    /// Its size: the files under it, in bytes.
    pub bytes: u64,
}

/// What `gc` did.
#[derive(Debug, Serialize)]
pub struct GcReport {
    /// Whether nothing was removed (`--dry-run`): `removed` is then what would go.
    pub dry_run: bool,
    /// The entries removed.
    pub removed: Vec<Removed>,
    /// Artifacts kept because a pipeline file references them.
    pub kept: usize,
    /// The sum of the removed entries' sizes, in bytes.
    pub bytes_freed: u64,
    /// The other pipeline files of the workspace whose artifacts were kept too.
    pub other_files: Vec<PathBuf>,
    /// Entries under `.pipeline/` the store did not make (or symlinks), with why they stayed.
    pub left_alone: Vec<String>,
}

/// An artifact is referenced if it is the latest of an instance, or what the instance's current
/// fingerprint would fetch, in this pipeline or in any other pipeline file of the workspace
/// (the `*.yaml`/`*.yml` beside it that declare `stages:`; they share `.pipeline/`). Everything
/// else the store made goes, with stale work areas, leftovers of killed runs and the
/// quarantine; what it did not make (see [`crate::owned`]) stays and is listed as left alone.
pub fn gc(p: &Pipeline, index: &mut Index, dry_run: bool) -> Result<GcReport, MaintainError> {
    let others = other_pipelines(p)?;
    let mut keep: HashSet<(String, String)> = HashSet::new();
    for q in std::iter::once(p).chain(others.iter()) {
        referenced(q, index, &mut keep)?;
    }
    let mut report = GcReport {
        dry_run,
        removed: Vec::new(),
        kept: 0,
        bytes_freed: 0,
        other_files: others.iter().map(|q| q.plan.file.path.clone()).collect(),
        left_alone: Vec::new(),
    };
    for (dir, fp) in list_artifacts(&p.ws) {
        let instance_dir = parent_name(&dir);
        if keep.contains(&(instance_dir.clone(), fp.clone())) {
            report.kept += 1;
            continue;
        }
        let instance = Manifest::read(&dir)
            .map(|m| m.instance)
            .unwrap_or(instance_dir);
        remove(p, &mut report, instance, fp, dir, dry_run);
    }
    let work = p.ws.state.join("work");
    for (dir, fp) in two_levels(&work) {
        let instance_dir = parent_name(&dir);
        if !keep.contains(&(instance_dir.clone(), fp.clone())) {
            let what = format!("{instance_dir} (work area)");
            remove(p, &mut report, what, fp, dir, dry_run);
        }
    }
    // The gc holds the run lock, so everything the store made in tmp/ is the leftover of a
    // killed run.
    for entry in std::fs::read_dir(p.ws.tmp())
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().into_owned();
        remove(
            p,
            &mut report,
            "(killed run)".into(),
            name,
            entry.path(),
            dry_run,
        );
    }
    for (dir, name) in two_levels(&p.ws.quarantine()) {
        remove(p, &mut report, "(quarantined)".into(), name, dir, dry_run);
    }
    if !dry_run {
        for parent in [p.ws.artifacts(), work, p.ws.quarantine()] {
            crate::owned::remove_empty_folders(&parent);
        }
    }
    Ok(report)
}

/// What `q` references: each instance's latest artifact and what its fingerprint would fetch.
fn referenced(
    q: &Pipeline,
    index: &mut Index,
    keep: &mut HashSet<(String, String)>,
) -> Result<(), FingerprintError> {
    for inst in &q.plan.instances {
        if let Some(fp) = index.latest(&inst.name) {
            keep.insert((dir_name(&inst.name), fp));
        }
    }
    let all: Vec<usize> = (0..q.plan.instances.len()).collect();
    for o in predict(q, index, &all, &HashSet::new())? {
        if let Some(fp) = o.fingerprint {
            keep.insert((dir_name(&o.instance), fp));
        }
    }
    Ok(())
}

/// The other pipeline files of the workspace: YAML files beside this one whose top level has a
/// `stages` key (in any YAML spelling: block, flow, quoted). One that does not load stops
/// `gc`: what it references cannot be known, and guessing would delete artifacts it still uses.
/// So does a `*.yaml` that cannot be read as YAML at all (too large, not UTF-8, a syntax error),
/// since it may be a pipeline file mid-edit.
fn other_pipelines(p: &Pipeline) -> Result<Vec<Pipeline>, UserError> {
    let this = p.plan.file.path.canonicalize().ok();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&p.plan.root)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|f| f.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .filter(|f| f.is_file() && f.canonicalize().ok() != this)
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let stop = |why: String| {
            UserError::new(format!(
                "gc cannot tell which artifacts {} still uses, so it removes nothing: {why}",
                f.display()
            ))
            .with_help(
                "that file shares this workspace's .pipeline/; fix it or move it to another directory, then run gc again",
            )
        };
        if !declares_stages(&f).map_err(stop)? {
            continue;
        }
        out.push(Pipeline::load(&f, &[], p.registry.clone()).map_err(|e| stop(e.message))?);
    }
    Ok(out)
}

/// Whether `file`'s top level is a mapping with a `stages` key, read with the pipeline file's
/// own bounded reader and YAML loader (a multi-gigabyte `*.yaml` beside the pipeline is not
/// read whole); an error when that cannot be told.
fn declares_stages(file: &Path) -> Result<bool, String> {
    let bytes = crate::config::read_bounded(file, crate::yaml::limits::FILE_BYTES)
        .map_err(|e| format!("it cannot be read as a pipeline file ({e})"))?;
    let text = String::from_utf8(bytes).map_err(|_| "it is not UTF-8 text".to_string())?;
    let root = crate::yaml::parse(&text).map_err(|e| {
        format!(
            "it is not YAML that can be read ({}:{}: {})",
            e.mark.line, e.mark.col, e.message
        )
    })?;
    Ok(match root.map(|r| r.value) {
        Some(NodeValue::Map(entries)) => entries
            .iter()
            .any(|(k, _)| k.scalar_text() == Some("stages")),
        _ => false,
    })
}

/// The name of `dir`'s parent folder (an instance's folder in the store).
fn parent_name(dir: &Path) -> String {
    dir.parent()
        .and_then(Path::file_name)
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Removes one entry through [`crate::owned::remove`]; an entry the store did not make is
/// reported as left alone, not removed and not an error.
fn remove(
    p: &Pipeline,
    report: &mut GcReport,
    instance: String,
    fingerprint: String,
    path: PathBuf,
    dry_run: bool,
) {
    let bytes = dir_size(&path);
    let allowed = if dry_run {
        crate::owned::may_remove(&p.ws, &path)
    } else {
        crate::owned::remove(&p.ws, &path)
    };
    if let Err(refused) = allowed {
        report.left_alone.push(refused.to_string());
        return;
    }
    report.bytes_freed += bytes;
    report.removed.push(Removed {
        instance,
        fingerprint,
        path,
        bytes,
    });
}

/// Directories two levels down (`area/<instance>/<entry>`); markers and stray files are not
/// entries.
fn two_levels(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    for a in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        for b in std::fs::read_dir(a.path()).into_iter().flatten().flatten() {
            if b.file_name() == crate::owned::MARK {
                continue;
            }
            out.push((b.path(), b.file_name().to_string_lossy().into_owned()));
        }
    }
    out
}

/// The bytes of the files under `path` (symlinks counted as themselves, never followed).
fn dir_size(path: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    if meta.is_dir() {
        std::fs::read_dir(path)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| dir_size(&e.path()))
            .sum()
    } else {
        meta.len()
    }
}

/// An artifact whose files differ from its manifest, moved into the quarantine.
#[derive(Debug, Serialize)]
pub struct Corrupt {
    /// Its instance (from the manifest, else the artifact's folder name).
    pub instance: String,
    /// Its fingerprint (the artifact directory's name).
    pub fingerprint: String,
    /// What differs, one line each ("x.bin changed (blake3 … expected …)", "y is missing").
    pub problems: Vec<String>,
    /// Where it is now, under `.pipeline/quarantine/`.
    pub quarantined_to: PathBuf,
}

/// What `verify` found.
#[derive(Debug, Serialize)]
pub struct VerifyReport {
    /// Whether every artifact matched its manifest.
    pub ok: bool,
    /// How many artifacts were checked.
    pub checked: usize,
    /// The ones that did not, now quarantined.
    pub corrupt: Vec<Corrupt>,
}

/// Re-hashes every artifact against its manifest; moves the ones that differ into
/// `.pipeline/quarantine/` so that the next run makes them again. An artifact that cannot be
/// moved stops it.
pub fn verify(p: &Pipeline) -> Result<VerifyReport, MaintainError> {
    let mut report = VerifyReport {
        ok: true,
        checked: 0,
        corrupt: Vec::new(),
    };
    for (dir, fp) in list_artifacts(&p.ws) {
        report.checked += 1;
        let problems = check(&dir, &fp);
        if problems.is_empty() {
            continue;
        }
        let instance_dir = dir
            .parent()
            .and_then(Path::file_name)
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let instance = Manifest::read(&dir)
            .map(|m| m.instance)
            .unwrap_or_else(|| instance_dir.clone());
        let dest =
            p.ws.quarantine()
                .join(&instance_dir)
                .join(format!("{fp}-{}", now_string().replace(':', "-")));
        if let Err(source) = crate::exec::move_entry(&p.ws, &dir, &dest) {
            return Err(MaintainError::Quarantine { dir, source });
        }
        report.ok = false;
        report.corrupt.push(Corrupt {
            instance,
            fingerprint: fp,
            problems,
            quarantined_to: dest,
        });
    }
    Ok(report)
}

/// What differs between the artifact in `dir` and its manifest, one line each; empty when
/// nothing does.
fn check(dir: &Path, fp: &str) -> Vec<String> {
    let Some(m) = Manifest::read(dir) else {
        return vec!["MANIFEST.json is missing or unreadable".into()];
    };
    let mut problems = Vec::new();
    if m.fingerprint != fp {
        problems.push(format!(
            "the manifest is for fingerprint {}, not {fp}",
            m.fingerprint
        ));
    }
    let actual = match hash_tree(dir) {
        Ok(files) => files,
        Err(e) => {
            let e = crate::error::chain_text(&e);
            return vec![format!("cannot read the artifact: {e}")];
        }
    };
    let actual: HashMap<&str, (&u64, &str)> = actual
        .iter()
        .filter(|f| f.path != MANIFEST && !f.path.starts_with(&format!("{LOG_DIR}/")))
        .map(|f| (f.path.as_str(), (&f.size, f.blake3.as_str())))
        .collect();
    for f in &m.files {
        match actual.get(f.path.as_str()) {
            None => problems.push(format!("{} is missing", f.path)),
            Some((size, digest)) if **size != f.size || *digest != f.blake3 => {
                problems.push(format!(
                    "{} changed (blake3 {} expected {})",
                    f.path,
                    &digest[..12],
                    &f.blake3[..12]
                ));
            }
            _ => {}
        }
    }
    let listed: HashSet<&str> = m.files.iter().map(|f| f.path.as_str()).collect();
    for path in actual.keys().filter(|p| !listed.contains(*p)) {
        problems.push(format!("{path} is not in the manifest"));
    }
    problems
}
