//! The one place that decides what the store may delete.
//!
//! People point `.pipeline/tmp` or `.pipeline/work` at a scratch disk with a symlink, and such
//! a disk holds other things too; so "it is under `.pipeline/`" is not proof that the store made
//! it. Every directory the store creates for a run is marked: a temporary run directory holds a
//! [`MARK`] file itself; an instance's folder in `work/`, `artifacts/`, `failed/`,
//! `quarantine/` and `jobs/` holds one, and the entries the store makes inside it (one per
//! fingerprint or run) are the store's. [`remove`] deletes an entry only with that proof, never a
//! symlink, and never anything outside `.pipeline/`; `std::fs::remove_dir_all` does not follow
//! symlinks inside what it deletes. An artifact committed before markers existed is still
//! recognised by its `MANIFEST.json`.

use std::path::{Component, Path};

use crate::manifest::Manifest;
use crate::workspace::Workspace;

/// The file that marks a directory as made by the store.
pub const MARK: &str = ".pipeline-owned";

/// The folders of `.pipeline/` whose entries the store creates and removes.
const AREAS: &[&str] = &["tmp", "work", "artifacts", "failed", "quarantine", "jobs"];

/// Why an entry was left alone.
#[derive(Debug, thiserror::Error)]
#[error("left {path} alone: {why}")]
pub struct Refused {
    /// The entry that was not deleted, as displayed.
    pub path: String,
    /// The reason, in words (a symlink, outside `.pipeline/`, no marker, or the failed
    /// deletion's own error).
    pub why: String,
}

/// Creates `dir` (a temporary run directory) and marks it as the store's.
pub fn create_marked(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    mark(dir)
}

/// Creates `dir` (an entry of an instance's folder: `work/<instance>/<fingerprint>`) and marks
/// the instance's folder, which makes the entry the store's.
pub fn create_in_marked(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    match dir.parent() {
        Some(parent) => mark(parent),
        None => Ok(()),
    }
}

/// Marks an existing directory as made by the store.
pub fn mark(dir: &Path) -> std::io::Result<()> {
    let marker = dir.join(MARK);
    if std::fs::symlink_metadata(&marker).is_ok() {
        return Ok(());
    }
    std::fs::write(
        marker,
        "made by `pipeline`: entries of this directory may be removed by `pipeline gc`\n",
    )
}

/// Whether [`remove`] would delete `path` (`gc --dry-run`).
pub fn may_remove(ws: &Workspace, path: &Path) -> Result<(), Refused> {
    let refuse = |why: &str| Refused {
        path: path.display().to_string(),
        why: why.to_string(),
    };
    entry_depth(ws, path).map_err(|why| refuse(&why))?;
    match std::fs::symlink_metadata(path) {
        Ok(meta) => check(ws, path, &meta)
            .map(|_| ())
            .map_err(|why| refuse(&why)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(refuse(&e.to_string())),
    }
}

/// Deletes `path` if the store made it (it, or a folder between it and the store folder, holds
/// the marker); a path that does not exist is fine.
pub fn remove(ws: &Workspace, path: &Path) -> Result<(), Refused> {
    let refuse = |why: &str| Refused {
        path: path.display().to_string(),
        why: why.to_string(),
    };
    entry_depth(ws, path).map_err(|why| refuse(&why))?;
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(refuse(&e.to_string())),
    };
    check(ws, path, &meta).map_err(|why| refuse(&why))?;
    let removed = if meta.is_dir() {
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    };
    removed.map_err(|e| refuse(&format!("removing it failed: {e}")))
}

/// Whether the store may delete `path`, and if not, why.
fn check(ws: &Workspace, path: &Path, meta: &std::fs::Metadata) -> Result<usize, String> {
    let depth = entry_depth(ws, path)?;
    if meta.file_type().is_symlink() {
        return Err("it is a symlink (the store never makes one)".into());
    }
    // Below the area folder (which may be a symlink to a scratch disk) nothing on the way may
    // be a symlink: deleting `tmp/x/link/y` would delete outside the store.
    let below_area: Vec<&Path> = path.ancestors().take(depth - 1).collect();
    if below_area
        .iter()
        .any(|a| std::fs::symlink_metadata(a).is_ok_and(|m| m.file_type().is_symlink()))
    {
        return Err("a folder on its path is a symlink".into());
    }
    if below_area.iter().any(|a| is_marked(a)) {
        return Ok(depth);
    }
    let parts: Vec<_> = path.components().rev().take(depth).collect();
    if depth == 3
        && parts[2].as_os_str() == "artifacts"
        && Manifest::read(path)
            .is_some_and(|m| Some(m.fingerprint.as_str()) == parts[0].as_os_str().to_str())
    {
        return Ok(depth);
    }
    Err(format!(
        "the store did not make it (no {MARK} marker); remove it yourself if it is not needed"
    ))
}

/// How many components `path` has below `.pipeline/` (checked lexically: an entry of a store
/// folder, no `..`), or why it is not such an entry.
fn entry_depth(ws: &Workspace, path: &Path) -> Result<usize, String> {
    let rel = path
        .strip_prefix(&ws.state)
        .map_err(|_| format!("it is not inside {}", ws.state.display()))?;
    let parts: Vec<&str> = rel
        .components()
        .map(|c| match c {
            Component::Normal(n) => n.to_str().unwrap_or("\u{0}"),
            _ => "\u{0}",
        })
        .collect();
    if parts.len() < 2 || parts.contains(&"\u{0}") || !AREAS.contains(&parts[0]) {
        return Err("it is not an entry of a store folder".into());
    }
    Ok(parts.len())
}

fn is_marked(dir: &Path) -> bool {
    std::fs::symlink_metadata(dir.join(MARK)).is_ok_and(|m| m.is_file())
}

/// Removes the instance folders of `area` that hold their marker and nothing else (after
/// `gc`). An empty folder without the marker is not ours: `area` may be a symlink to a
/// scratch disk where someone else keeps an empty directory.
pub fn remove_empty_folders(area: &Path) {
    for e in std::fs::read_dir(area).into_iter().flatten().flatten() {
        let dir = e.path();
        let Ok(meta) = std::fs::symlink_metadata(&dir) else {
            continue;
        };
        if meta.is_dir() && holds_only_its_mark(&dir) {
            let _ = std::fs::remove_file(dir.join(MARK));
            let _ = std::fs::remove_dir(&dir);
        }
    }
}

fn holds_only_its_mark(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    let names: Vec<_> = entries.flatten().take(2).map(|e| e.file_name()).collect();
    names.len() == 1 && names[0] == MARK && is_marked(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_marked_entries_inside_the_store_go() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path());
        let scratch = dir.path().join("scratch");
        std::fs::create_dir_all(scratch.join("theirs")).unwrap();
        std::fs::create_dir_all(&ws.state).unwrap();
        std::os::unix::fs::symlink(&scratch, ws.tmp()).unwrap();

        // Not made by the store: refused, even though it is reachable under .pipeline/tmp.
        let theirs = ws.tmp().join("theirs");
        let e = remove(&ws, &theirs).unwrap_err();
        assert!(e.why.contains("did not make it"), "{e}");
        assert!(scratch.join("theirs").exists());

        // Made by the store (through the symlink): removed.
        let mine = ws.tmp().join("run-1");
        create_marked(&mine).unwrap();
        remove(&ws, &mine).unwrap();
        assert!(!scratch.join("run-1").exists());

        // A symlink entry, an area the store does not own, a path outside: refused.
        std::os::unix::fs::symlink(&scratch, ws.tmp().join("link")).unwrap();
        assert!(remove(&ws, &ws.tmp().join("link")).is_err());
        assert!(remove(&ws, &ws.state.join("index")).is_err());
        assert!(remove(&ws, &scratch).is_err());
        assert!(remove(&ws, &ws.state.join("tmp/../../scratch")).is_err());

        // An entry of a marked instance folder.
        let work = ws.work_dir("a", "f00");
        create_in_marked(&work).unwrap();
        remove(&ws, &work).unwrap();
        assert!(!work.exists());
        remove_empty_folders(&ws.state.join("work"));
        assert!(!ws.state.join("work/a").exists());
    }

    #[test]
    fn empty_folders_without_the_mark_stay() {
        let dir = tempfile::tempdir().unwrap();
        let area = dir.path().join("area");
        std::fs::create_dir_all(area.join("foreign")).unwrap();
        create_marked(&area.join("ours")).unwrap();
        std::fs::create_dir_all(area.join("marker-is-a-dir").join(MARK)).unwrap();
        remove_empty_folders(&area);
        assert!(
            area.join("foreign").is_dir(),
            "an empty foreign folder stays"
        );
        assert!(area.join("marker-is-a-dir").join(MARK).is_dir());
        assert!(!area.join("ours").exists());
    }
}
