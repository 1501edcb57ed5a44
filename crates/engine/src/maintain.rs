//! Upkeep of the artifact store: `gc` removes what nothing references, `verify` re-hashes
//! every artifact and moves corrupt ones into quarantine. Both write, so the caller holds the
//! workspace lock. Both touch only what [`crate::owned::recognise`] says the store made; what
//! else sits in the store's folders (a user's notes, another project's data on a shared scratch
//! disk that a store folder links to) is listed as left alone and stays.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::Pipeline;
use crate::error::{FingerprintError, MaintainError, UserError};
use crate::exec::{hash_tree, predict};
use crate::index::Index;
use crate::manifest::{LOG_DIR, MANIFEST, Manifest, ManifestError, now_string};
use crate::workspace::{Workspace, dir_name};
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
    let (entries, odd) = artifact_entries(&p.ws);
    report.left_alone.extend(
        odd.iter()
            .map(|l| format!("left {} alone: {}", l.path.display(), l.why)),
    );
    for dir in entries {
        let instance_dir = parent_name(&dir);
        let fp = file_name(&dir);
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
    // Asked first, so that a foreign tree (a whole scratch disk) is not walked for its size.
    if let Err(refused) = crate::owned::may_remove(&p.ws, &path) {
        report.left_alone.push(refused.to_string());
        return;
    }
    let bytes = dir_size(&path);
    if !dry_run && let Err(refused) = crate::owned::remove(&p.ws, &path) {
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

/// The name of the entry `path`, as text.
fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Every entry two levels down in `artifacts/` (`<instance>/<entry>`, of any kind: a file or a
/// symlink there is for [`crate::owned::recognise`] to refuse, not to be skipped), sorted, the
/// instance folders' markers left out; and what sits in `artifacts/` itself that is not a
/// folder (a symlink, a file), which holds no artifact of the store's and is not entered.
fn artifact_entries(ws: &Workspace) -> (Vec<PathBuf>, Vec<LeftAlone>) {
    let mut entries = Vec::new();
    let mut odd = Vec::new();
    for instance in sorted_entries(&ws.artifacts()) {
        match std::fs::symlink_metadata(&instance) {
            Ok(m) if m.is_dir() => {}
            Ok(m) => {
                let what = if m.file_type().is_symlink() {
                    "a symlink (the store never makes one)"
                } else {
                    "not a folder"
                };
                odd.push(LeftAlone {
                    path: instance,
                    why: format!(
                        "the store did not make it: it is {what}; remove it yourself if it is not needed"
                    ),
                });
                continue;
            }
            Err(_) => continue,
        }
        entries.extend(
            sorted_entries(&instance)
                .into_iter()
                .filter(|e| e.file_name().is_none_or(|n| n != crate::owned::MARK)),
        );
    }
    (entries, odd)
}

/// The entries of `dir` (none when it cannot be listed), sorted.
fn sorted_entries(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .collect();
    out.sort();
    out
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
    /// What differs, one line each ("x.bin changed (blake3 … expected …)", "y is missing",
    /// what [`Manifest::inconsistencies`] finds), at most [`MAX_PROBLEMS`] and a count of the
    /// rest.
    pub problems: Vec<String>,
    /// Where it is now, under `.pipeline/quarantine/`.
    pub quarantined_to: PathBuf,
}

/// An entry of the store's folders that the store did not make, left where it was.
#[derive(Debug, Serialize)]
pub struct LeftAlone {
    /// The entry.
    pub path: PathBuf,
    /// Why it is not the store's, in words ("the store did not make it: it is a symlink …").
    pub why: String,
}

/// What `verify` found.
#[derive(Debug, Serialize)]
pub struct VerifyReport {
    /// Whether every artifact matched its manifest (entries left alone do not count: they
    /// are not artifacts).
    pub ok: bool,
    /// How many artifacts were checked.
    pub checked: usize,
    /// The ones that did not, now quarantined.
    pub corrupt: Vec<Corrupt>,
    /// Entries of `.pipeline/artifacts/` the store did not make (see [`crate::owned`]): not
    /// checked, not moved.
    pub left_alone: Vec<LeftAlone>,
}

/// The most problem lines kept for one corrupt artifact: a manifest listing a million files
/// that are all missing is one artifact to quarantine, not a million lines to print.
pub const MAX_PROBLEMS: usize = 20;

/// Re-hashes every artifact the store made against its manifest, and checks the manifest
/// itself ([`Manifest::inconsistencies`]: its output digest recomputed, reserved names and
/// duplicates); moves the ones that differ into `.pipeline/quarantine/` so that the next run
/// makes them again. An artifact folder in an instance folder the store made is the store's
/// even without a manifest (a commit cut short), so it is corrupt. What the store did not make
/// is listed as left alone and stays. An artifact that cannot be moved stops it.
pub fn verify(p: &Pipeline) -> Result<VerifyReport, MaintainError> {
    let (entries, left_alone) = artifact_entries(&p.ws);
    let mut report = VerifyReport {
        ok: true,
        checked: 0,
        corrupt: Vec::new(),
        left_alone,
    };
    for dir in entries {
        if let Err(why) = crate::owned::recognise(&p.ws, &dir) {
            report.left_alone.push(LeftAlone {
                path: dir,
                why: why.to_string(),
            });
            continue;
        }
        let fp = file_name(&dir);
        if !crate::owned::is_fingerprint(&fp) {
            // The `.<fingerprint>.incoming-<pid>` copy of a commit that was killed: not an
            // artifact; `gc` removes it.
            continue;
        }
        report.checked += 1;
        let problems = check(&dir, &fp);
        if problems.is_empty() {
            continue;
        }
        report.ok = false;
        report.corrupt.push(quarantine(p, dir, fp, problems)?);
    }
    Ok(report)
}

/// Moves the corrupt artifact `dir` into `.pipeline/quarantine/<instance>/<fp>-<now>`.
fn quarantine(
    p: &Pipeline,
    dir: PathBuf,
    fp: String,
    problems: Vec<String>,
) -> Result<Corrupt, MaintainError> {
    let instance_dir = parent_name(&dir);
    // The manifest's instance only where it names this folder: a manifest is read from disk,
    // and what it says is not printed unless it matches what the store laid out.
    let instance = Manifest::read(&dir)
        .map(|m| m.instance)
        .filter(|i| dir_name(i) == instance_dir)
        .unwrap_or_else(|| instance_dir.clone());
    let dest =
        p.ws.quarantine()
            .join(&instance_dir)
            .join(format!("{fp}-{}", now_string().replace(':', "-")));
    if let Err(source) = crate::exec::move_entry(&p.ws, &dir, &dest) {
        return Err(MaintainError::Quarantine { dir, source });
    }
    Ok(Corrupt {
        instance,
        fingerprint: fp,
        problems,
        quarantined_to: dest,
    })
}

/// What differs between the artifact in `dir` and its manifest, and what is wrong with the
/// manifest itself, one line each (at most [`MAX_PROBLEMS`] and a count); empty when nothing.
fn check(dir: &Path, fp: &str) -> Vec<String> {
    let m = match Manifest::load(dir) {
        Ok(m) => m,
        Err(ManifestError::Read(e)) if e.is_not_found() => {
            return vec![format!(
                "{MANIFEST} is missing (a commit that did not finish)"
            )];
        }
        Err(e) => return vec![e.to_string()],
    };
    let mut problems = m.inconsistencies();
    if m.fingerprint != fp {
        problems.push(format!(
            "the manifest is for fingerprint {}, not {fp}",
            prefix(&m.fingerprint, 40)
        ));
    }
    match hash_tree(dir) {
        Ok(actual) => problems.extend(differences(&m, &actual)),
        Err(e) => {
            let e = crate::error::chain_text(&e);
            problems.push(format!("cannot read the artifact: {e}"));
        }
    }
    if problems.len() > MAX_PROBLEMS {
        let more = problems.len() - MAX_PROBLEMS;
        problems.truncate(MAX_PROBLEMS);
        problems.push(format!("… and {more} more"));
    }
    problems
}

/// The files of `actual` (the artifact as hashed now) that differ from what `m` lists.
fn differences(m: &Manifest, actual: &[crate::manifest::FileEntry]) -> Vec<String> {
    let mut problems = Vec::new();
    // The manifest and the logs are not part of the output; a manifest that lists them is
    // named by its own check, so they are not looked for either.
    let reserved = |p: &str| p == MANIFEST || p == LOG_DIR || p.starts_with(&format!("{LOG_DIR}/"));
    let actual: HashMap<&str, (&u64, &str)> = actual
        .iter()
        .filter(|f| !reserved(&f.path))
        .map(|f| (f.path.as_str(), (&f.size, f.blake3.as_str())))
        .collect();
    for f in m.files.iter().filter(|f| !reserved(&f.path)) {
        match actual.get(f.path.as_str()) {
            None => problems.push(format!("{} is missing", prefix(&f.path, 200))),
            Some((size, digest)) if **size != f.size || *digest != f.blake3 => {
                problems.push(format!(
                    "{} changed (blake3 {} expected {})",
                    f.path,
                    prefix(digest, 12),
                    prefix(&f.blake3, 12)
                ));
            }
            _ => {}
        }
    }
    let listed: HashSet<&str> = m.files.iter().map(|f| f.path.as_str()).collect();
    let mut unlisted: Vec<&&str> = actual.keys().filter(|p| !listed.contains(**p)).collect();
    unlisted.sort();
    for path in unlisted {
        problems.push(format!("{path} is not in the manifest"));
    }
    problems
}

/// At most `n` characters of `s` (a name or digest from a manifest, which may be anything).
fn prefix(s: &str, n: usize) -> &str {
    s.char_indices().nth(n).map_or(s, |(i, _)| &s[..i])
}
