//! How a run touches the store besides the stage itself: committing an output (one rename,
//! or copy-then-rename across filesystems), clearing what killed runs left in `tmp/`, and the
//! run summary in `runs/`.

use std::path::Path;

use tracing::{info, warn};

use crate::error::StoreError;
use crate::manifest::RunSummary;
use crate::workspace::Workspace;

/// A `metrics.json` that is not JSON, or too large to be read as one, is committed as written,
/// but `pipeline metrics` cannot show it: say so when it is made rather than leaving it out
/// silently later. Read bounded, as every reader of it is: a stage may write a 4 GB file there.
pub(super) fn warn_bad_metrics(instance: &str, out_dir: &Path) {
    let path = out_dir.join("metrics.json");
    let bytes =
        match pipeline_bounded::read(&path, crate::manifest::METRICS_LIMIT, "a metrics record") {
            Ok(bytes) => bytes,
            Err(e) if e.is_not_found() => return,
            Err(e) => {
                warn!("stage {instance}: {e}; `pipeline metrics` will leave it out");
                return;
            }
        };
    if let Err(e) = serde_json::from_slice::<serde_json::Value>(&bytes) {
        warn!(
            "stage {instance}: metrics.json is not valid JSON ({e}); `pipeline metrics` will leave it out"
        );
    }
}

/// Moves a finished output into place. An artifact already there (a `--force` re-run) is moved
/// aside first; a crash in between leaves no artifact, and the next run makes it again.
///
/// When `.pipeline/artifacts` is on another filesystem than `.pipeline/tmp` (a symlink to
/// another mount), a rename cannot cross it (EXDEV): the output is copied next to `dest`
/// first, and that copy renamed into place, so the commit stays one rename.
pub fn commit(out_dir: &Path, dest: &Path, tmp: &Path) -> Result<(), StoreError> {
    if let Some(parent) = dest.parent() {
        crate::owned::create_marked(parent).map_err(|source| StoreError::CreateDir {
            dir: parent.to_path_buf(),
            source,
        })?;
    }
    if dest.exists() {
        let old = tmp.join("replaced");
        if let Err(e) = std::fs::rename(dest, &old) {
            if !crosses_devices(&e) {
                return Err(StoreError::MoveAside {
                    dest: dest.to_path_buf(),
                    source: e,
                });
            }
            std::fs::remove_dir_all(dest).map_err(|source| StoreError::RemoveOld {
                dest: dest.to_path_buf(),
                source,
            })?;
        }
    }
    match std::fs::rename(out_dir, dest) {
        Err(e) if crosses_devices(&e) => copy_then_rename(out_dir, dest),
        other => other.map_err(|source| StoreError::Commit {
            dest: dest.to_path_buf(),
            source,
        }),
    }
}

/// Whether a rename failed because it would cross filesystems (EXDEV).
fn crosses_devices(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::CrossesDevices
}

/// Copies `out_dir` beside `dest` (a `.NAME.incoming-PID` folder), then renames the copy into
/// place: a commit across filesystems that is still one rename.
fn copy_then_rename(out_dir: &Path, dest: &Path) -> Result<(), StoreError> {
    let name = dest
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    let staging = dest.with_file_name(format!(".{name}.incoming-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&staging);
    if let Err(source) = copy_tree(out_dir, &staging) {
        return Err(StoreError::CopyAcross { staging, source });
    }
    std::fs::rename(&staging, dest).map_err(|source| StoreError::Commit {
        dest: dest.to_path_buf(),
        source,
    })
}

/// Copies directories and regular files, and a symlink as a link (never followed: a corrupt
/// artifact that `verify` moves aside may hold one pointing at `/dev/zero` or outside); a
/// FIFO, socket or device is an error. A committed output holds none of these (it was walked
/// by [`crate::outputs`]).
fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    let kind = std::fs::symlink_metadata(from)?.file_type();
    if kind.is_symlink() {
        return std::os::unix::fs::symlink(std::fs::read_link(from)?, to);
    }
    if kind.is_file() {
        return std::fs::copy(from, to).map(|_| ());
    }
    if !kind.is_dir() {
        return Err(std::io::Error::other(format!(
            "{} is not a regular file, directory or symlink",
            from.display()
        )));
    }
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        copy_tree(&entry.path(), &to.join(entry.file_name()))?;
    }
    Ok(())
}

/// Moves an entry of the store to `dest` (`verify`'s quarantine): one rename, or across
/// filesystems the copy-then-rename of a commit, after which the original goes through
/// [`crate::owned::remove`] (a symlink planted in the store is moved as a link: removing the
/// link leaves its target alone).
pub(crate) fn move_entry(ws: &Workspace, from: &Path, dest: &Path) -> Result<(), StoreError> {
    if let Some(parent) = dest.parent() {
        crate::owned::create_marked(parent).map_err(|source| StoreError::CreateDir {
            dir: parent.to_path_buf(),
            source,
        })?;
    }
    match std::fs::rename(from, dest) {
        Err(e) if crosses_devices(&e) => copy_then_rename(from, dest)?,
        other => {
            return other.map_err(|source| StoreError::Move {
                from: from.to_path_buf(),
                source,
            });
        }
    }
    let is_link = std::fs::symlink_metadata(from).is_ok_and(|m| m.file_type().is_symlink());
    let removed: Result<(), Box<dyn std::error::Error + Send + Sync>> = if is_link {
        std::fs::remove_file(from).map_err(Into::into)
    } else {
        crate::owned::remove(ws, from).map_err(Into::into)
    };
    removed.map_err(|cause| StoreError::NotRemoved {
        from: from.to_path_buf(),
        dest: dest.to_path_buf(),
        cause,
    })
}

/// The folder of `tmp/` where `pipeline-remote` keeps objects that arrived from a remote,
/// verified, so that a pull or a run's fetch that was killed resumes; a run's start leaves it
/// (`pipeline gc` removes it).
pub const DOWNLOADS: &str = "downloads";

/// Temporary directories left by a killed run; only called while holding the lock. Entries
/// the store did not make stay (`.pipeline/tmp` may be a symlink to a shared scratch disk).
pub(super) fn clear_tmp(ws: &Workspace) {
    for e in std::fs::read_dir(ws.tmp()).into_iter().flatten().flatten() {
        if e.file_name() == DOWNLOADS {
            continue;
        }
        match crate::owned::remove(ws, &e.path()) {
            Ok(()) => info!("removed {} left by an interrupted run", e.path().display()),
            Err(refused) => info!("{refused}"),
        }
    }
}

/// Writes the run's summary (new file, then rename). The first write reserves
/// [`SUMMARY_RESERVE`] bytes (JSON padded with spaces), so that a run that filled the disk
/// can still overwrite its summary in place and say how it ended, instead of staying
/// "running" (which `runs` shows as "interrupted").
pub(crate) fn write_summary(dir: &Path, summary: &RunSummary) {
    let path = dir.join(format!("{}.json", summary.run_id.replace(':', "-")));
    let tmp = path.with_extension("json.tmp");
    let Ok(mut bytes) = serde_json::to_vec_pretty(summary) else {
        return;
    };
    if !path.exists() && bytes.len() < SUMMARY_RESERVE {
        bytes.resize(SUMMARY_RESERVE, b' ');
    }
    let written = std::fs::write(&tmp, &bytes).and_then(|_| std::fs::rename(&tmp, &path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        if let Err(e2) = overwrite_in_place(&path, summary) {
            warn!(
                "could not write the run summary {}: {e} ({e2})",
                path.display()
            );
        }
    }
}

const SUMMARY_RESERVE: usize = 64 << 10;

/// The summary written over the reserved bytes of the existing file (without its per-stage
/// list if that does not fit).
fn overwrite_in_place(path: &Path, summary: &RunSummary) -> std::io::Result<()> {
    use std::io::Write;
    let room = std::fs::metadata(path)?.len() as usize;
    let mut bytes = serde_json::to_vec(summary).map_err(std::io::Error::other)?;
    if bytes.len() > room {
        let mut short = summary.clone();
        short.stages.clear();
        bytes = serde_json::to_vec(&short).map_err(std::io::Error::other)?;
    }
    if bytes.len() > room {
        return Err(std::io::Error::other(
            "the summary does not fit its reserved space",
        ));
    }
    bytes.resize(room, b' ');
    let mut f = std::fs::OpenOptions::new().write(true).open(path)?;
    f.write_all(&bytes)?;
    f.sync_data()
}
