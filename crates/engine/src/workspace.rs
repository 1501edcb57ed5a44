//! The `.pipeline/` directory of a workspace: where artifacts, temporary run directories,
//! work areas, kept logs, run summaries and the index live, and the lock that lets one
//! `pipeline run` at a time write to them.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::UserError;

/// Whether this process may create entries in `dir`: access(2) with `W_OK | X_OK`, which
/// checks the mode bits, ACLs and a read-only mount without creating (or deleting) anything.
fn writable(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    // SAFETY: `path` is a NUL-terminated string that outlives the call; access reads it only.
    match unsafe { libc::access(path.as_ptr(), libc::W_OK | libc::X_OK) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// Where a pipeline's state lives: the paths of `.pipeline/` and its folders. Making one
/// touches nothing on disk; [`Workspace::ensure`] creates the folders.
#[derive(Debug, Clone)]
pub struct Workspace {
    /// The directory of `pipeline.yaml` (canonical where it exists); relative inputs and
    /// `cmd` stages' working directory are taken from here.
    pub root: PathBuf,
    /// `<root>/.pipeline`, the only place the store writes to or deletes from.
    pub state: PathBuf,
}

/// Who holds the workspace, as written into `.pipeline/lock`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LockInfo {
    /// The holding process.
    pub pid: u32,
    /// When it took the lock (RFC 3339, milliseconds, UTC).
    pub started: String,
    /// What holds it: a run's command line, or `pipeline gc`, `pipeline verify`,
    /// `pipeline pull`.
    pub command: String,
}

/// Held for the whole of a `pipeline run`; the OS releases it if the process dies.
pub struct RunLock {
    _file: File,
    /// What was written into the lock file for a second run to print.
    pub info: LockInfo,
}

impl Workspace {
    /// The workspace rooted at `root` (the directory of `pipeline.yaml`).
    pub fn new(root: &Path) -> Workspace {
        Workspace {
            root: root.to_path_buf(),
            state: root.join(".pipeline"),
        }
    }

    /// `.pipeline/artifacts`: committed artifacts, `<instance>/<fingerprint>/`.
    pub fn artifacts(&self) -> PathBuf {
        self.state.join("artifacts")
    }
    /// The artifact directory of one instance at one fingerprint (the instance name through
    /// [`dir_name`]); it exists once a run of it was committed.
    pub fn artifact_dir(&self, instance: &str, fingerprint: &str) -> PathBuf {
        self.artifacts().join(dir_name(instance)).join(fingerprint)
    }
    /// `.pipeline/tmp`: the directories runs write into before committing; what a killed run
    /// left there is cleared by the next run.
    pub fn tmp(&self) -> PathBuf {
        self.state.join("tmp")
    }
    /// Scratch space of one (instance, fingerprint) that survives a failed or killed attempt,
    /// so a long stage can checkpoint there and resume.
    pub fn work_dir(&self, instance: &str, fingerprint: &str) -> PathBuf {
        self.state
            .join("work")
            .join(dir_name(instance))
            .join(fingerprint)
    }
    /// `.pipeline/failed`: the logs and record of failed attempts, `<instance>/<run>/`.
    pub fn failed(&self) -> PathBuf {
        self.state.join("failed")
    }
    /// `.pipeline/runs`: one summary per `pipeline run`, `<run_id>.json` (colons as dashes).
    pub fn runs(&self) -> PathBuf {
        self.state.join("runs")
    }
    /// `.pipeline/quarantine`: artifacts `pipeline verify` found corrupt, moved aside rather
    /// than deleted.
    pub fn quarantine(&self) -> PathBuf {
        self.state.join("quarantine")
    }
    /// `.pipeline/index`: the sled database (run records, latest fingerprints, file-hash
    /// cache), rebuildable from the manifests.
    pub fn index_path(&self) -> PathBuf {
        self.state.join("index")
    }
    fn lock_path(&self) -> PathBuf {
        self.state.join("lock")
    }

    /// Creates `.pipeline/` and its folders, and checks that this process may write in each
    /// (one that exists read-only made the first stage fail with exit 1 instead of the
    /// command being refused with exit 2), or says why it cannot.
    pub fn ensure(&self) -> Result<(), UserError> {
        let dirs = [self.artifacts(), self.tmp(), self.failed(), self.runs()];
        for dir in dirs.iter().chain([&self.state]) {
            std::fs::create_dir_all(dir)
                .and_then(|()| writable(dir))
                .map_err(|e| {
                    UserError::new(format!(
                        "cannot write the workspace state directory {}: {e}",
                        dir.display()
                    ))
                    .with_help(format!(
                        "`pipeline` keeps its artifacts in {}; make sure it is a writable \
                         directory",
                        self.state.display()
                    ))
                })?;
        }
        Ok(())
    }

    /// Takes the run lock, or reports who has it.
    pub fn lock(&self, command: &str) -> Result<RunLock, UserError> {
        let path = self.lock_path();
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| {
                UserError::new(format!(
                    "cannot open the workspace lock {}: {e}",
                    path.display()
                ))
            })?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                // The holder writes its details right after locking; give it a moment.
                let mut holder = None;
                for _ in 0..10 {
                    holder = self.holder_info();
                    if holder.is_some() {
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                let who = match holder {
                    Some(h) => format!("pid {}, started {}", h.pid, h.started),
                    None => "pid unknown".to_string(),
                };
                return Err(UserError::new(format!("another run ({who}) holds this workspace ({})", self.root.display()))
                    .with_help("wait for it to finish (`pipeline status` shows its progress), or stop that process"));
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(UserError::new(format!(
                    "cannot lock the workspace {}: {e}",
                    path.display()
                )));
            }
        }
        let info = LockInfo {
            pid: std::process::id(),
            started: crate::manifest::now_string(),
            command: command.to_string(),
        };
        let text = serde_json::to_string(&info).unwrap_or_default();
        let written = file
            .set_len(0)
            .and_then(|_| file.rewind())
            .and_then(|_| file.write_all(text.as_bytes()));
        if let Err(e) = written {
            return Err(UserError::new(format!(
                "cannot write the workspace lock {}: {e}",
                path.display()
            )));
        }
        Ok(RunLock { _file: file, info })
    }

    /// The run holding the workspace now, if any. Does not take the lock, so it never gets in
    /// a starting run's way.
    pub fn holder(&self) -> Option<LockInfo> {
        let info = self.holder_info()?;
        let alive = Path::new(&format!("/proc/{}", info.pid)).exists();
        let locked = File::open(self.lock_path())
            .is_ok_and(|f| matches!(f.try_lock_shared(), Err(std::fs::TryLockError::WouldBlock)));
        (alive && locked).then_some(info)
    }

    fn holder_info(&self) -> Option<LockInfo> {
        let mut text = String::new();
        File::open(self.lock_path())
            .ok()?
            .read_to_string(&mut text)
            .ok()?;
        serde_json::from_str(&text).ok()
    }
}

/// An instance name as a directory name: matrix values may hold `/` or spaces.
pub fn dir_name(instance: &str) -> String {
    let mut out = String::with_capacity(instance.len());
    for c in instance.chars() {
        if c.is_alphanumeric() || "._@=,+-".contains(c) {
            out.push(c);
        } else {
            for b in c.to_string().bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dir_names_are_safe() {
        assert_eq!(dir_name("train@share_type=all"), "train@share_type=all");
        assert_eq!(dir_name("t@path=a/b c"), "t@path=a%2Fb%20c");
    }

    #[test]
    fn second_lock_names_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path());
        ws.ensure().unwrap();
        let held = ws.lock("run").unwrap();
        let err = ws.lock("run").err().unwrap();
        assert!(
            err.message
                .contains(&format!("another run (pid {}", held.info.pid)),
            "{err}"
        );
        assert!(err.message.contains("holds this workspace"));
        assert_eq!(ws.holder().unwrap().pid, std::process::id());
        drop(held);
        assert!(ws.holder().is_none());
        ws.lock("run").unwrap();
    }
}
