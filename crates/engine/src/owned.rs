//! The one place that decides what the store may delete or move.
//!
//! People point `.pipeline/tmp`, `work` or `artifacts` at a scratch disk with a symlink, and
//! such a disk holds other things too (a user's notes, another project's data); so "it is under
//! `.pipeline/`" is not proof that the store made it. The rule, the same for every deletion
//! (a run clearing `tmp/`, `gc`, the cluster executor) and for `verify`'s quarantine: an entry
//! is the store's only when it is recognised by where it is, by its name *and* by its kind:
//!
//! - **where**: an entry of a store folder ([`AREAS`]) inside `.pipeline/`, at the depth the
//!   store makes entries there: `tmp/<entry>`, and `<area>/<instance>/<entry>` in the others;
//! - **kind**: a directory, never a symlink, with no symlink between it and the store folder
//!   (the store folder itself may be a symlink to a scratch disk);
//! - **name**: of the shape the store gives: a fingerprint (32 lowercase hex digits) in
//!   `artifacts/` and `work/`; in `tmp/` a run's `<instance>-<fingerprint>-<pid>`, a pull's
//!   `pull-<pid>-<nanos>` or the `downloads` area; in `failed/` a run id
//!   (`2025-01-31T09-15-02.123Z`, with `-job<id>` for a cluster job); in `quarantine/`
//!   `<fingerprint>-<run id>`; in `jobs/` `<fingerprint>-<pid>-<n>`; and the
//!   `.<name>.incoming-<pid>` copy a commit or quarantine across filesystems leaves beside
//!   an entry of `artifacts/` or `quarantine/`;
//! - **proof**: the [`MARK`] file, in a `tmp/` entry itself, or in the instance folder the
//!   store made for a deeper entry (or in the entry); an artifact is also recognised by its
//!   own `MANIFEST.json` naming its folder's fingerprint (artifacts committed before markers).
//!   A `tmp/` entry that is empty needs none: a run or pull killed between making its
//!   directory and marking it leaves one, and it goes by `std::fs::remove_dir`, which removes
//!   only an empty directory, so nothing in it can be lost.
//!
//! An entry that fails any of these is left in place and reported (`gc` and `verify` list it
//! as left alone). [`recognise`] applies the rule, [`remove`] deletes only what it accepts
//! (`std::fs::remove_dir_all` does not follow symlinks inside what it deletes), and an empty
//! instance folder goes only when it holds nothing but its marker.

mod names;

pub use names::is_fingerprint;

use std::path::{Component, Path, PathBuf};

use crate::manifest::Manifest;
use crate::workspace::Workspace;

/// The file that marks a directory as made by the store.
pub const MARK: &str = ".pipeline-owned";

/// The folders of `.pipeline/` whose entries the store creates and removes.
pub const AREAS: &[&str] = &["tmp", "work", "artifacts", "failed", "quarantine", "jobs"];

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

/// Whether [`remove`] would delete `path` (`gc --dry-run`); a path that does not exist is fine.
pub fn may_remove(ws: &Workspace, path: &Path) -> Result<(), Refused> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => entry_parts(ws, path)
            .map(|_| ())
            .map_err(|why| refused(path, why)),
        _ => match recognise(ws, path) {
            Err(NotOwned::NoProof { in_tmp: true, .. }) if is_empty_dir(path) => Ok(()),
            other => other.map_err(|why| refused(path, why)),
        },
    }
}

/// Deletes `path` if the store made it ([`recognise`]), or if it is an empty `tmp/` entry of a
/// store name (see the module doc); a path that does not exist is fine.
pub fn remove(ws: &Workspace, path: &Path) -> Result<(), Refused> {
    let removed = match recognise(ws, path) {
        Err(NotOwned::NoProof { in_tmp: true, .. }) => {
            may_remove(ws, path)?;
            // Not remove_dir_all: should a file have appeared in it since, it stays.
            std::fs::remove_dir(path)
        }
        _ => {
            may_remove(ws, path)?;
            std::fs::remove_dir_all(path)
        }
    };
    match removed {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(refused(path, format!("removing it failed: {e}")))
        }
        _ => Ok(()),
    }
}

/// Whether `dir` is a directory with nothing in it.
fn is_empty_dir(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_none())
}

fn refused(path: &Path, why: impl std::fmt::Display) -> Refused {
    Refused {
        path: path.display().to_string(),
        why: why.to_string(),
    }
}

/// Why an entry is not the store's ([`recognise`]); its text reads after "left alone: ".
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NotOwned {
    /// The path is not below `.pipeline/`.
    #[error("it is not inside {}", state.display())]
    Outside {
        /// The store's folder.
        state: PathBuf,
    },
    /// Below `.pipeline/`, but not at the depth of an entry of a store folder (or not UTF-8).
    #[error("it is not an entry of a store folder")]
    NotAnEntry,
    /// Its metadata could not be read (the OS error, in words).
    #[error("{0}")]
    Unreadable(String),
    /// A symlink, which the store never makes.
    #[error("{UNMADE}: it is a symlink (the store never makes one){REMOVE_IT}")]
    Symlink,
    /// A file, FIFO, socket or device where the store makes directories.
    #[error("{UNMADE}: it is {kind}, not a directory{REMOVE_IT}")]
    NotADirectory {
        /// What it is, in words.
        kind: &'static str,
    },
    /// A folder between it and the store folder is a symlink.
    #[error("{UNMADE}: a folder on its path is a symlink{REMOVE_IT}")]
    LinkOnPath,
    /// Its name is not of a shape the store gives entries of its folder.
    #[error(
        "{UNMADE}: its name is not one the store gives an entry of {area}/ ({shape}){REMOVE_IT}"
    )]
    Name {
        /// The store folder (`artifacts`, `tmp`, …).
        area: String,
        /// The names the store gives there, in words.
        shape: &'static str,
    },
    /// Neither the marker nor (for an artifact) a manifest of its own.
    #[error("{UNMADE}: no {MARK} marker {}{}{REMOVE_IT}",
        if *in_tmp { "in it" } else { "in it or its instance folder" },
        if *artifact { ", and no MANIFEST.json of its own" } else { "" })]
    NoProof {
        /// An entry of `tmp/` (the marker is in the entry itself).
        in_tmp: bool,
        /// An entry of `artifacts/` (a manifest would have done).
        artifact: bool,
    },
}

const UNMADE: &str = "the store did not make it";
const REMOVE_IT: &str = "; remove it yourself if it is not needed";

/// Whether the store made `path` (the rule in the module doc), and if not, why in words that
/// read after "left alone: ": "the store did not make it: its name is not ...".
pub fn recognise(ws: &Workspace, path: &Path) -> Result<(), NotOwned> {
    let parts = entry_parts(ws, path)?;
    let meta = std::fs::symlink_metadata(path).map_err(|e| NotOwned::Unreadable(e.to_string()))?;
    if meta.file_type().is_symlink() {
        return Err(NotOwned::Symlink);
    }
    if !meta.is_dir() {
        let kind = kind_text(&meta.file_type());
        return Err(NotOwned::NotADirectory { kind });
    }
    // Below the area folder (which may be a symlink to a scratch disk) nothing on the way may
    // be a symlink: deleting `work/x/y` with `x` a link would delete outside the store.
    let below_area: Vec<&Path> = path.ancestors().take(parts.len() - 1).collect();
    if below_area
        .iter()
        .skip(1)
        .any(|a| std::fs::symlink_metadata(a).is_ok_and(|m| m.file_type().is_symlink()))
    {
        return Err(NotOwned::LinkOnPath);
    }
    let (area, name) = (parts[0], parts[parts.len() - 1]);
    if !names::fits(area, name) {
        return Err(NotOwned::Name {
            area: area.to_string(),
            shape: names::shape(area),
        });
    }
    if below_area.iter().any(|a| is_marked(a)) || (area == "artifacts" && own_manifest(path, name))
    {
        return Ok(());
    }
    Err(NotOwned::NoProof {
        in_tmp: area == "tmp",
        artifact: area == "artifacts",
    })
}

/// Whether the artifact `dir` holds a manifest (a regular file, read bounded) for the
/// fingerprint `name`.
fn own_manifest(dir: &Path, name: &str) -> bool {
    std::fs::symlink_metadata(dir.join(crate::manifest::MANIFEST)).is_ok_and(|m| m.is_file())
        && Manifest::read(dir).is_some_and(|m| m.fingerprint == name)
}

/// The components of `path` below `.pipeline/` (checked lexically: an entry of a store folder
/// at the depth the store makes entries there, no `..`), or why it is not such an entry.
fn entry_parts<'p>(ws: &Workspace, path: &'p Path) -> Result<Vec<&'p str>, NotOwned> {
    let rel = path
        .strip_prefix(&ws.state)
        .map_err(|_| NotOwned::Outside {
            state: ws.state.clone(),
        })?;
    let parts: Vec<&str> = rel
        .components()
        .map(|c| match c {
            Component::Normal(n) => n.to_str().unwrap_or("\u{0}"),
            _ => "\u{0}",
        })
        .collect();
    let depth = match parts.first() {
        Some(&"tmp") => 2,
        _ => 3,
    };
    if parts.len() != depth || parts.contains(&"\u{0}") || !AREAS.contains(&parts[0]) {
        return Err(NotOwned::NotAnEntry);
    }
    Ok(parts)
}

fn kind_text(kind: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_file() {
        "a regular file"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device file"
    } else {
        "neither a file nor a directory"
    }
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

    const FP: &str = "0123456789abcdef0123456789abcdef";

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
        let name = format!("a-{FP}-1");
        let mine = ws.tmp().join(&name);
        create_marked(&mine).unwrap();
        remove(&ws, &mine).unwrap();
        assert!(!scratch.join(&name).exists());

        // Marked, but not a name the store gives: refused.
        create_marked(&ws.tmp().join("run-1")).unwrap();
        let e = remove(&ws, &ws.tmp().join("run-1")).unwrap_err();
        assert!(e.why.contains("its name is not one the store gives"), "{e}");

        // A symlink entry, an area the store does not own, a path outside: refused.
        std::os::unix::fs::symlink(&scratch, ws.tmp().join("link")).unwrap();
        assert!(remove(&ws, &ws.tmp().join("link")).is_err());
        assert!(remove(&ws, &ws.state.join("index")).is_err());
        assert!(remove(&ws, &scratch).is_err());
        assert!(remove(&ws, &ws.state.join("tmp/../../scratch")).is_err());

        // An entry of a marked instance folder.
        let work = ws.work_dir("a", FP);
        create_in_marked(&work).unwrap();
        remove(&ws, &work).unwrap();
        assert!(!work.exists());
        remove_empty_folders(&ws.state.join("work"));
        assert!(!ws.state.join("work/a").exists());
    }

    #[test]
    fn an_artifact_is_recognised_by_name_kind_and_proof() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path());
        let unmarked = ws.artifacts().join("notes");
        let why = |p: &Path| recognise(&ws, p).unwrap_err().to_string();

        // A fingerprint-named folder in an instance folder the store did not make.
        std::fs::create_dir_all(unmarked.join(FP)).unwrap();
        assert!(why(&unmarked.join(FP)).contains("no .pipeline-owned marker"));
        // ... recognised by its own manifest for that fingerprint.
        let m = format!("{{\"format\": 1, \"fingerprint\": \"{FP}\"}}");
        std::fs::write(unmarked.join(FP).join("MANIFEST.json"), m).unwrap();
        assert!(why(&unmarked.join(FP)).contains("no MANIFEST.json of its own"));
        let record = serde_json::json!({"run_id": "", "instance": "a", "stage": "a",
            "fingerprint": FP, "status": "ok", "started": "", "finished": "", "duration_ms": 0,
            "dir": ""});
        let m = serde_json::json!({"format": 1, "instance": "a", "stage": "a", "fingerprint": FP,
            "components": {"kind": "cmd", "code_version": "", "params": {}, "spec": null,
                "inputs": {}, "deps": {}},
            "files": [], "output_digest": "", "record": record});
        std::fs::write(unmarked.join(FP).join("MANIFEST.json"), m.to_string()).unwrap();
        assert_eq!(recognise(&ws, &unmarked.join(FP)), Ok(()));
        // ... but not by one for another fingerprint.
        let other = unmarked.join(FP.replace('0', "f"));
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(other.join("MANIFEST.json"), m.to_string()).unwrap();
        assert!(why(&other).contains("no MANIFEST.json of its own"));

        // In a marked instance folder: recognised, also without a manifest (a half-written one).
        let ours = ws.artifact_dir("a", FP);
        create_in_marked(&ours).unwrap();
        assert_eq!(recognise(&ws, &ours), Ok(()));
        let notes = ours.parent().unwrap().join("notes");
        std::fs::create_dir(&notes).unwrap();
        assert!(why(&notes).contains("its name is not one the store gives"));
        // Too deep, too shallow.
        assert!(why(&ours.join("sub")).contains("not an entry of a store folder"));
        assert!(why(ours.parent().unwrap()).contains("not an entry of a store folder"));

        // A file and a symlink where an artifact folder would be.
        let file = ws.artifact_dir("b", FP);
        create_in_marked(file.parent().unwrap().join("x").as_path()).unwrap();
        std::fs::write(&file, "x").unwrap();
        assert!(why(&file).contains("it is a regular file"));
        let link = ws.artifact_dir("c", FP);
        create_in_marked(link.parent().unwrap().join("x").as_path()).unwrap();
        std::os::unix::fs::symlink(&ours, &link).unwrap();
        assert!(why(&link).contains("it is a symlink"));
        assert!(remove(&ws, &link).is_err() && ours.exists());

        // A marked instance folder reached through a symlink below the area.
        std::os::unix::fs::symlink(ours.parent().unwrap(), ws.artifacts().join("d")).unwrap();
        assert!(why(&ws.artifacts().join("d").join(FP)).contains("a folder on its path"));
        assert!(remove(&ws, &ws.artifacts().join("d").join(FP)).is_err() && ours.exists());
    }

    /// A pull or run killed between making its `tmp/` directory and marking it leaves it
    /// empty and unmarked: the next run's clearing removes it; with anything in it, or with a
    /// name the store does not give, it stays.
    #[test]
    fn an_empty_unmarked_tmp_entry_of_a_store_name_goes_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path());
        let killed = ws.tmp().join("pull-12-1732770000123456789");
        std::fs::create_dir_all(&killed).unwrap();
        may_remove(&ws, &killed).unwrap();
        remove(&ws, &killed).unwrap();
        assert!(!killed.exists());

        let holding = ws.tmp().join(format!("a-{FP}-7"));
        std::fs::create_dir_all(&holding).unwrap();
        std::fs::write(holding.join("notes.txt"), "a user's").unwrap();
        let e = remove(&ws, &holding).unwrap_err();
        assert!(e.why.contains("no .pipeline-owned marker"), "{e}");
        assert!(holding.join("notes.txt").exists());

        let foreign = ws.tmp().join("scratch");
        std::fs::create_dir_all(&foreign).unwrap();
        assert!(remove(&ws, &foreign).is_err() && foreign.is_dir());
        let deeper = ws.work_dir("a", FP);
        std::fs::create_dir_all(&deeper).unwrap();
        assert!(
            remove(&ws, &deeper).is_err() && deeper.is_dir(),
            "only tmp/ entries"
        );
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
