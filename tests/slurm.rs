//! End-to-end tests of the Slurm executor on a real single-node Slurm (slurmctld + slurmd +
//! munge; `../shared/tools/slurm-single-node.sh start`, which `.ci/run` calls). Where no Slurm
//! answers (and none can be started), every test prints a note and passes without checking.
//!
//! The tests share one node (and some take it down), so they run one at a time.

mod common;
#[path = "slurm/outcomes.rs"]
mod outcomes;
#[path = "slurm/recovery.rs"]
mod recovery;
#[path = "slurm/submission.rs"]
mod submission;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// Settings every test's `executor:` block starts with: poll often, give up quickly.
const EXEC: &str = "executor:\n  kind: slurm\n  poll_max: 1s\n  pending_timeout: 4s\n  unknown_timeout: 20s\n  fs_wait: 5s\n";

static SERIAL: Mutex<()> = Mutex::new(());

/// Holds the node for one test; `None` (after printing why) where Slurm is not available.
fn slurm() -> Option<MutexGuard<'static, ()>> {
    static UP: OnceLock<Result<String, String>> = OnceLock::new();
    let up = UP.get_or_init(|| {
        if node_state().is_some() {
            return Ok(node_name());
        }
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/tools/slurm-single-node.sh");
        if script.exists() {
            let _ = Command::new(&script).arg("start").stdout(Stdio::null()).status();
        }
        match node_state() {
            Some(_) => Ok(node_name()),
            None => Err("no Slurm cluster answers `sinfo` and `slurm-single-node.sh start` did not bring one up".into()),
        }
    });
    match up {
        Ok(_) => {
            let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
            // A test that failed half-way may have left the node down or jobs queued.
            resume_node();
            cancel_leftovers();
            Some(guard)
        }
        Err(why) => {
            eprintln!("note: skipping a Slurm test: {why}");
            None
        }
    }
}

/// Cancels the jobs of this file's workspaces still queued (names start with `pipeline:`).
fn cancel_leftovers() {
    let Ok(out) = Command::new("squeue").args(["-h", "-o", "%i %j"]).output() else {
        return;
    };
    let ids: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter(|(_, name)| name.starts_with("pipeline:"))
        .map(|(id, _)| id.to_string())
        .collect();
    if !ids.is_empty() {
        let _ = Command::new("scancel").args(&ids).status();
    }
}

fn node_state() -> Option<String> {
    let out = Command::new("sinfo")
        .args(["-h", "-N", "-o", "%T"])
        .output()
        .ok()?;
    let s = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !s.is_empty()).then_some(s)
}

fn node_name() -> String {
    let out = Command::new("sinfo")
        .args(["-h", "-N", "-o", "%N"])
        .output();
    out.map(|o| {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .next()
            .unwrap_or("")
            .trim()
            .to_string()
    })
    .unwrap_or_default()
}

fn resume_node() {
    let node = node_name();
    let state = node_state().unwrap_or_default();
    if state.contains("down") || state.contains("drain") {
        let _ = Command::new("scontrol")
            .args(["update", &format!("nodename={node}"), "state=resume"])
            .status();
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(20) {
            let s = node_state().unwrap_or_default();
            if s.starts_with("idle") || s.starts_with("mixed") || s.starts_with("alloc") {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

fn scontrol(args: &[&str]) {
    let st = Command::new("scontrol")
        .args(args)
        .status()
        .expect("running scontrol");
    assert!(st.success(), "scontrol {args:?} failed");
}

/// `squeue`'s state of job `id` (`None` once it has left squeue).
fn squeue_state(id: &str) -> Option<String> {
    let out = Command::new("squeue")
        .args(["-h", "-t", "all", "-j", id, "-o", "%T"])
        .output()
        .ok()?;
    let s = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (!s.is_empty()).then_some(s)
}

/// Waits until `f` returns something; panics after `timeout`.
fn until<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let t0 = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(t0.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The job ids in the run records (`pipeline runs --json`), newest run first.
fn job_ids(ws: &Ws, instance: &str) -> Vec<String> {
    let v = ws.json(&["runs"], 0);
    let mut ids = Vec::new();
    for r in v["runs"].as_array().unwrap() {
        for j in r["jobs"].as_array().into_iter().flatten() {
            if j["instance"] == instance {
                ids.push(j["job_id"].as_str().unwrap().to_string());
            }
        }
    }
    ids
}

/// A `pipeline` process in the background, in its own process group.
struct Bg(Option<Child>);

impl Bg {
    fn spawn(ws: &Ws, args: &[&str]) -> Bg {
        let child = ws
            .command(args)
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting pipeline");
        Bg(Some(child))
    }
    fn pid(&self) -> u32 {
        self.0.as_ref().unwrap().id()
    }
    fn signal(&self, sig: &str) {
        let st = Command::new("kill")
            .args(["-s", sig, &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
    }
    fn wait(&mut self, timeout: Duration) -> Output {
        let mut child = self.0.take().unwrap();
        let t0 = Instant::now();
        while child.try_wait().unwrap().is_none() {
            if t0.elapsed() > timeout {
                let _ = child.kill();
                panic!("the background pipeline did not finish within {timeout:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = child.wait_with_output().unwrap();
        Output {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

impl Drop for Bg {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// (path → blake3) of every output file of every artifact in a run's JSON, by instance.
fn outputs(v: &Value) -> Vec<(String, String, Value)> {
    let mut out = Vec::new();
    for s in v["stages"].as_array().unwrap() {
        let dir = PathBuf::from(s["artifact"].as_str().unwrap());
        let m: Value = serde_json::from_str(&read(dir.join("MANIFEST.json"))).unwrap();
        out.push((
            s["instance"].as_str().unwrap().to_string(),
            s["fingerprint"].as_str().unwrap().to_string(),
            m["files"].clone(),
        ));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}
