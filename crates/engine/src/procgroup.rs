//! A stage's processes end with the stage.
//!
//! A `cmd` runs in a process group of its own (`sh` is its leader; whatever it starts in the
//! background inherits the group). When `sh` exits, the group is killed and reaped before the
//! output is hashed, so nothing can write into an artifact after it is committed. When
//! `pipeline run` gets SIGINT or SIGTERM (what Ctrl-C, `timeout`, Slurm and systemd send), every
//! live group gets SIGTERM, then SIGKILL after [`GRACE`]; since the groups are not the
//! terminal's foreground group, this is also what makes Ctrl-C reach them.
//!
//! A process that leaves its group on purpose (`setsid`, a double-forking daemon) escapes this;
//! SECURITY.md says so.

use std::collections::BTreeSet;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// A signal number (`libc::SIGTERM`, `libc::SIGKILL`).
pub type Signal = libc::c_int;

/// `killpg(2)`; false when no process of the group is left (ESRCH) or it cannot be signalled.
fn killpg(pgid: i32, signal: Signal) -> bool {
    // SAFETY: killpg takes two integers and touches no memory of ours.
    unsafe { libc::killpg(pgid, signal) == 0 }
}

/// How long stage processes get between SIGTERM and SIGKILL when the run is stopped.
pub const GRACE: Duration = Duration::from_secs(3);

/// How long the run loop gets, after the stages' processes are killed, to record the outcome.
const WIND_DOWN: Duration = Duration::from_secs(10);

/// Set while a run has cluster jobs: the controller must stay to cancel them.
pub static CLUSTER: AtomicBool = AtomicBool::new(false);

/// The groups of the stages running now.
static LIVE: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

/// A started command and its process group.
pub struct Group {
    child: Child,
    pgid: i32,
    ended: bool,
}

/// Starts `command` as the leader of a new process group.
pub fn spawn(command: &mut Command) -> std::io::Result<Group> {
    let child = command.process_group(0).spawn()?;
    let pgid = child.id() as i32;
    if let Ok(mut live) = LIVE.lock() {
        live.insert(pgid);
    }
    Ok(Group {
        child,
        pgid,
        ended: false,
    })
}

impl Group {
    /// Waits for the leader, then ends the rest of the group.
    pub fn wait(&mut self) -> std::io::Result<ExitStatus> {
        let status = self.child.wait();
        self.end();
        status
    }

    /// SIGKILL to the group, then waits (up to 5 s) until no process of it is left.
    fn end(&mut self) {
        if std::mem::replace(&mut self.ended, true) {
            return;
        }
        let _ = self.child.kill();
        let _ = self.child.try_wait();
        end_group(self.pgid);
        if let Ok(mut live) = LIVE.lock() {
            live.remove(&self.pgid);
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.end();
        let _ = self.child.wait();
    }
}

fn end_group(pgid: i32) {
    let t0 = Instant::now();
    // Signalling is asynchronous: wait until no process of the group runs any more. Killed
    // processes whose parent is gone stay zombies until init reaps them; they write nothing.
    while killpg(pgid, libc::SIGKILL) && group_runs(pgid) && t0.elapsed() < WAIT_EMPTY {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Whether a process of group `pgid` is alive and not a zombie (from `/proc/PID/stat`: the
/// state and the process group follow the parenthesised command name).
fn group_runs(pgid: i32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|e| {
        let name = e.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            return false;
        }
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            return false;
        };
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            return false;
        };
        let fields: Vec<&str> = rest.split_whitespace().take(3).collect();
        matches!(fields.as_slice(), [state, _ppid, pgrp]
            if *pgrp == pgid.to_string() && !matches!(*state, "Z" | "X"))
    })
}

const WAIT_EMPTY: Duration = Duration::from_secs(5);

/// Sends `signal` to every running stage's group.
pub fn signal_all(signal: Signal) {
    let groups: Vec<i32> = LIVE
        .lock()
        .map(|l| l.iter().copied().collect())
        .unwrap_or_default();
    for g in groups {
        killpg(g, signal);
    }
}

/// Catches SIGINT/SIGTERM for the rest of the process and, once one arrives, stops every
/// stage's processes (SIGTERM, then SIGKILL after [`GRACE`]). The run loop sees
/// [`crate::executor::interrupted`] and starts nothing more.
pub fn stop_groups_on_interrupt() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        crate::executor::catch_interrupts();
        let watcher = std::thread::Builder::new().name("interrupt-watcher".into());
        let spawned = watcher.spawn(|| {
            while !crate::executor::interrupted() {
                std::thread::sleep(Duration::from_millis(50));
            }
            signal_all(libc::SIGTERM);
            std::thread::sleep(GRACE);
            signal_all(libc::SIGKILL);
            // A stage that runs inside this process (pretrain, say) cannot be killed apart
            // from it: once the run loop had time to record what the signal ended, leave as the
            // default action would have. The store is crash-safe (a commit is one rename) and
            // the next run clears what is left in tmp/. A run with cluster jobs stays to cancel
            // them, as before.
            std::thread::sleep(WIND_DOWN);
            if !CLUSTER.load(Ordering::Relaxed) {
                std::process::exit(130);
            }
        });
        if let Err(e) = spawned {
            tracing::warn!("cannot watch for interrupts: {e}");
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn background_processes_end_with_the_leader() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("pid");
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!("sleep 30 & echo $! > {}", pidfile.display()));
        let mut g = spawn(&mut cmd).unwrap();
        assert!(g.wait().unwrap().success());
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // Gone (or at most a zombie about to be reaped by init).
        let alive =
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "));
        assert!(!alive, "sleep {pid} survived its stage");
    }
}
