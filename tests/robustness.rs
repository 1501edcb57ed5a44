//! Robustness of the store: `kill -9` in the middle of a stage, a deleted or corrupted sled
//! index, corrupted artifacts (`verify`), a second run while one holds the workspace, `gc`,
//! and the shape of `show --json`.

mod common;
#[path = "robustness/crash_recovery.rs"]
mod crash_recovery;
#[path = "robustness/sharing_and_gc.rs"]
mod sharing_and_gc;

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

/// Long enough for a loaded 2-core CI machine to start the binary and reach the marker.
const MARKER_TIMEOUT: Duration = Duration::from_secs(60);

/// A `pipeline` process started in its own process group, killed (with its whole group) if
/// the test panics before it is waited for, so no stage outlives a failed test.
struct Bg {
    child: Option<Child>,
}

impl Bg {
    fn spawn(ws: &Ws, args: &[&str]) -> Bg {
        let child = ws
            .command(args)
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting the pipeline binary in the background");
        Bg { child: Some(child) }
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().expect("not waited for yet").id()
    }

    /// `kill -9 -PGID`: the binary and every stage command it started.
    fn kill_group(&self) {
        let st = kill_9_group(self.pid()).expect("running kill");
        assert!(st.success(), "kill -9 -{} failed", self.pid());
    }

    /// Waits for the process (at most `timeout`) and returns what it printed.
    fn wait(&mut self, timeout: Duration) -> (std::process::ExitStatus, Output) {
        let mut child = self.child.take().expect("waited for twice");
        let start = Instant::now();
        while child.try_wait().expect("polling the child").is_none() {
            if start.elapsed() > timeout {
                let _ = kill_9_group(child.id());
                let _ = child.wait();
                panic!("the background `pipeline` did not finish within {timeout:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = child
            .wait_with_output()
            .expect("collecting the child's output");
        let status = out.status;
        let output = Output {
            code: status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        };
        (status, output)
    }
}

/// `kill -s KILL -- -PGID`. (procps' `kill -9 -PGID`, without `--`, takes the group for an
/// option, kills nothing and still exits 0.)
fn kill_9_group(pgid: u32) -> std::io::Result<std::process::ExitStatus> {
    Command::new("kill")
        .args(["-s", "KILL", "--", &format!("-{pgid}")])
        .status()
}

impl Drop for Bg {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = kill_9_group(child.id());
            let _ = child.wait();
        }
    }
}

/// Every file below `dir` (relative paths), sorted; empty if `dir` does not exist.
fn files_under(dir: &Path) -> Vec<String> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(base, &p, out);
            } else {
                out.push(p.strip_prefix(base).unwrap().to_string_lossy().into_owned());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

fn assert_all_cached(v: &Value, names: &[&str]) {
    for n in names {
        assert_status(v, n, "cached");
    }
    assert_eq!(v["counts"]["ran"], 0, "{v:#}");
    assert_eq!(v["counts"]["cached"], names.len(), "{v:#}");
}
