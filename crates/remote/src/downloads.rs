//! The download area, `.pipeline/tmp/downloads/`: objects that arrived from a remote, each
//! named by its blake3 digest once verified (`<digest>.partial` while it arrives).
//!
//! A pull stages its artifacts from here, so a file that two artifacts share is downloaded once,
//! and a pull or a run's fetch that was killed resumes with what had arrived instead of starting
//! from zero (a run's start leaves this folder of `tmp/` alone:
//! [`pipeline_engine::exec::DOWNLOADS`]). An object leaves the area when an artifact holding it
//! is committed; what a pull that never finished left stays until `pipeline gc`.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use pipeline_engine::workspace::Workspace;

use crate::{RemoteError, Result};

/// The download area of one workspace. Only a command holding the workspace lock (a pull, a
/// run) writes it, so no two processes fetch the same object at once.
#[derive(Debug)]
pub(crate) struct Area {
    dir: PathBuf,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> RemoteError + '_ {
    move |source| RemoteError::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl Area {
    /// Creates the area (marked as the store's, so that `gc` may remove it) if needed.
    pub(crate) fn open(ws: &Workspace) -> Result<Area> {
        Area::create(ws.tmp().join(pipeline_engine::exec::DOWNLOADS))
    }

    pub(crate) fn create(dir: PathBuf) -> Result<Area> {
        pipeline_engine::owned::create_marked(&dir).map_err(io_err(&dir))?;
        Ok(Area { dir })
    }

    /// Where a verified object is. `digest` was checked by [`crate::layout::is_digest`], so it
    /// names a file of this folder.
    fn path(&self, digest: &str) -> PathBuf {
        self.dir.join(digest)
    }

    pub(crate) fn partial(&self, digest: &str) -> PathBuf {
        self.dir.join(format!("{digest}.partial"))
    }

    /// Whether the object arrived (and was verified) already.
    pub(crate) fn has(&self, digest: &str, size: u64) -> bool {
        std::fs::symlink_metadata(self.path(digest)).is_ok_and(|m| m.is_file() && m.len() == size)
    }

    /// The verified `<digest>.partial` becomes `<digest>`.
    pub(crate) fn complete(&self, digest: &str) -> Result<()> {
        let to = self.path(digest);
        std::fs::rename(self.partial(digest), &to).map_err(io_err(&to))
    }

    /// Puts object `digest` at `dest`: a hard link on its first use (no bytes copied, and the
    /// area keeps it until the artifact is committed), a copy for the further uses, so that two
    /// artifacts never share a file. A filesystem without hard links gets a copy.
    pub(crate) fn place(&self, digest: &str, dest: &Path, first_use: bool) -> Result<()> {
        let src = self.path(digest);
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent).map_err(io_err(parent))?;
        }
        if first_use && std::fs::hard_link(&src, dest).is_ok() {
            return Ok(());
        }
        std::fs::copy(&src, dest).map(|_| ()).map_err(io_err(dest))
    }

    /// Removes the objects that committed artifacts now hold, and the area once it holds
    /// nothing else (objects of a pull that failed stay for the next one).
    pub(crate) fn forget(&self, digests: &HashSet<&str>) {
        for d in digests {
            let _ = std::fs::remove_file(self.path(d));
        }
        let only_mark = std::fs::read_dir(&self.dir)
            .map(|entries| {
                entries
                    .flatten()
                    .all(|e| e.file_name() == pipeline_engine::owned::MARK)
            })
            .unwrap_or(false);
        if only_mark {
            let _ = std::fs::remove_file(self.dir.join(pipeline_engine::owned::MARK));
            let _ = std::fs::remove_dir(&self.dir);
        }
    }
}
