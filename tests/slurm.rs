//! End-to-end tests of the Slurm executor on a real single-node Slurm (slurmctld + slurmd +
//! munge; `../shared/tools/slurm-single-node.sh start`, which `.ci/run` calls). Where no Slurm
//! answers (and none can be started), every test prints a note and passes without checking.
//!
//! The tests share one node (and some take it down), so they run one at a time.

mod common;

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

#[test]
fn the_default_pipeline_through_slurm_matches_a_local_run_and_is_then_cached() {
    let Some(_node) = slurm() else { return };
    let repo = env!("CARGO_MANIFEST_DIR");
    let yaml = format!("{}\n{EXEC}", read(format!("{repo}/pipeline.yaml")));
    // Every stage of the default pipeline, with short training and one seed and one sharing
    // type per matrix (this checks the executor, not the model).
    let mut owned = vec![
        format!("data={repo}/datasets/fixtures"),
        "pretrain_steps=4".to_string(),
        "pretrain_save_steps=[2]".to_string(),
        "finetune_epochs=1".to_string(),
        "pretrain.share_type=all".to_string(),
    ];
    let local = Ws::new(&yaml);
    let dag = local.json(&["dag"], 0);
    let mut narrowed: Vec<String> = Vec::new();
    for s in dag["stages"].as_array().unwrap() {
        let (inst, stage) = (
            s["instance"].as_str().unwrap(),
            s["stage"].as_str().unwrap(),
        );
        if inst.contains("seed=") && !narrowed.iter().any(|n| n == stage) {
            narrowed.push(stage.to_string());
            owned.push(format!("{stage}.seed=1"));
        }
    }
    let sets: Vec<&str> = owned.iter().flat_map(|s| ["--set", s.as_str()]).collect();
    let sets = sets.as_slice();
    let mut args = vec!["--executor", "local"];
    args.extend_from_slice(sets);
    let l = local.run_ok(&args);

    let cluster = Ws::new(&yaml);
    let s = cluster.run_ok(sets);
    assert_eq!(s["counts"]["failed"], 0, "{s:#}");
    // Same fingerprints, same bytes: the executor is not part of either. Timings live in each
    // artifact's log directory, which the digest leaves out (pipeline_metrics), so
    // every output file of every stage matches, pretrain's and finetune's weights and metrics
    // included (tests/reproducible.rs checks two local runs the same way).
    let (lo, so) = (outputs(&l), outputs(&s));
    assert_eq!(lo.len(), so.len());
    for (a, b) in lo.iter().zip(&so) {
        assert_eq!(a.0, b.0);
        if a.0.starts_with("report") {
            // The report prints when its deps finished (their run records): not the same.
            continue;
        }
        assert_eq!(a.1, b.1, "fingerprints of {} differ", a.0);
        assert_eq!(
            a.2, b.2,
            "outputs of {} differ between local and Slurm",
            a.0
        );
    }
    // Job stdout/stderr are kept with the artifact; `show` names the job.
    let pretrain = artifact(&s, "pretrain@share_type=all");
    let logs: Vec<String> = std::fs::read_dir(pretrain.join(".log"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        logs.iter()
            .any(|f| f.starts_with("slurm-") && f.ends_with(".out")),
        "{logs:?}"
    );
    let mut show = vec!["show", "pretrain@share_type=all"];
    show.extend_from_slice(sets);
    let out = cluster.run(&show);
    out.expect_code(0);
    assert!(out.stdout.contains("slurm job:"), "{}", out.stdout);
    assert!(out.stdout.contains("queued"), "{}", out.stdout);

    let again = cluster.run_ok(sets);
    assert_eq!(
        again["counts"]["ran"], 0,
        "a second run re-ran something: {again:#}"
    );
    assert!(
        job_ids(&cluster, "clean").len() == 1,
        "the no-op run submitted jobs"
    );
    // One cache for both executors.
    let mut args = vec!["--executor", "local"];
    args.extend_from_slice(sets);
    assert_eq!(cluster.run_ok(&args)["counts"]["ran"], 0);
}

#[test]
fn a_failing_stage_fails_with_its_exit_and_keeps_its_logs_while_others_run() {
    let Some(_node) = slurm() else { return };
    let ws = Ws::new(&format!(
        "{EXEC}stages:\n  bad:\n    cmd: \"echo oops >&2; exit 3\"\n  after:\n    cmd: \"echo x > $PIPELINE_OUT/x\"\n    deps: [bad]\n  good:\n    cmd: \"echo fine > $PIPELINE_OUT/ok\"\n"
    ));
    let v = ws.json(&["run"], 1);
    assert_status(&v, "bad", "failed");
    assert_status(&v, "after", "skipped");
    assert_status(&v, "good", "ran");
    let e = entry(&v, "bad");
    let err = e["error"].as_str().unwrap();
    assert!(
        err.contains("status 3") && err.contains("FAILED exit 1"),
        "{err}"
    );
    let log = PathBuf::from(e["log"].as_str().unwrap());
    assert!(read(log.join("stderr.txt")).contains("oops"));
    let record: Value = serde_json::from_str(&read(log.join("record.json"))).unwrap();
    assert_eq!(record["job"]["state"], "FAILED exit 1", "{record:#}");
    assert!(
        log.file_name().unwrap().to_string_lossy().contains("-job"),
        "{}",
        log.display()
    );
}

#[test]
fn an_sbatch_rejection_names_the_line_and_slurms_message_and_the_rest_goes_on() {
    let Some(_node) = slurm() else { return };
    let ws = Ws::new(&format!(
        "{EXEC}stages:\n  odd:\n    cmd: \"true\"\n    executor: {{extra: [\"--gres=nosuchthing:1\"]}}\n  good:\n    cmd: \"echo fine > $PIPELINE_OUT/ok\"\n"
    ));
    let v = ws.json(&["run"], 1);
    assert_status(&v, "good", "ran");
    let err = entry(&v, "odd")["error"].as_str().unwrap().to_string();
    assert!(err.contains("sbatch rejected the job"), "{err}");
    assert!(err.contains("sbatch line: sbatch --parsable"), "{err}");
    assert!(err.contains("--gres=nosuchthing:1"), "{err}");
    assert!(
        err.to_lowercase().contains("gres"),
        "Slurm's message is missing: {err}"
    );
}

#[test]
fn a_job_cancelled_from_outside_fails_as_cancelled() {
    let Some(_node) = slurm() else { return };
    let ws = Ws::new(&format!(
        "{EXEC}stages:\n  slow:\n    cmd: \"touch started; sleep 60\"\n"
    ));
    let mut bg = Bg::spawn(&ws, &["run", "--json"]);
    wait_for(&ws.path("started"), Duration::from_secs(60));
    let id = until("the job id", Duration::from_secs(10), || {
        job_ids(&ws, "slow").pop()
    });
    let st = Command::new("scancel").arg(&id).status().unwrap();
    assert!(st.success());
    let out = bg.wait(Duration::from_secs(60));
    out.expect_code(1);
    let v = out.json();
    let err = entry(&v, "slow")["error"].as_str().unwrap();
    assert!(err.contains(&format!("Slurm job {id}: CANCELLED")), "{err}");
}

#[test]
fn a_job_over_its_time_limit_times_out_and_its_dependents_are_skipped() {
    let Some(_node) = slurm() else { return };
    // Slurm counts limits in minutes and checks them every 30 s: this takes about a minute.
    let ws = Ws::new(&format!(
        "{EXEC}stages:\n  long:\n    cmd: \"sleep 300\"\n    resources: {{time: \"0:01\"}}\n  next:\n    cmd: \"true\"\n    deps: [long]\n"
    ));
    let t0 = Instant::now();
    let v = ws.json(&["run"], 1);
    let err = entry(&v, "long")["error"].as_str().unwrap();
    assert!(err.contains("TIMEOUT"), "{err}");
    assert_status(&v, "next", "skipped");
    assert!(t0.elapsed() < Duration::from_secs(200));
}

/// `b` checkpoints into $PIPELINE_WORK, then waits for `go`; a retry finds the checkpoint.
const RESUMABLE: &str = "stages:\n  b:\n    cmd: |\n      if [ -e \"$PIPELINE_WORK/ckpt\" ]; then resumed=yes; else resumed=no; fi\n      echo ckpt > \"$PIPELINE_WORK/ckpt\"\n      echo $resumed >> attempts\n      touch started\n      while [ ! -e go ] && [ $resumed = no ]; do sleep 0.2; done\n      echo \"resumed=$resumed\" > \"$PIPELINE_OUT/b.txt\"\n";

#[test]
fn a_node_going_down_is_retried_and_the_retry_resumes_from_the_work_directory() {
    let Some(_node) = slurm() else { return };
    let ws = Ws::new(&format!("{EXEC}{RESUMABLE}"));
    let mut bg = Bg::spawn(&ws, &["run", "--json"]);
    wait_for(&ws.path("started"), Duration::from_secs(60));
    let node = node_name();
    scontrol(&[
        "update",
        &format!("nodename={node}"),
        "state=down",
        "reason=pipeline-test",
    ]);
    std::thread::sleep(Duration::from_secs(2));
    resume_node();
    let out = bg.wait(Duration::from_secs(120));
    out.expect_code(0);
    let v = out.json();
    let b = artifact(&v, "b");
    assert_eq!(read(b.join("b.txt")), "resumed=yes\n");
    assert!(
        out.stderr.contains("NODE_FAIL; resubmitting"),
        "{}",
        out.stderr
    );
    let m: Value = serde_json::from_str(&read(b.join("MANIFEST.json"))).unwrap();
    assert_eq!(m["record"]["job"]["attempts"], 2, "{m:#}");
    assert_eq!(job_ids(&ws, "b").len(), 2);
}

#[test]
fn a_killed_controller_is_re_attached_to_its_job_by_the_next_run() {
    let Some(_node) = slurm() else { return };
    let ws = Ws::new(&format!("{EXEC}{RESUMABLE}"));
    let bg = Bg::spawn(&ws, &["run", "--json"]);
    wait_for(&ws.path("started"), Duration::from_secs(60));
    let id = until("the job id", Duration::from_secs(10), || {
        job_ids(&ws, "b").pop()
    });
    // `status` and `runs` show the job in flight.
    let st = ws.run(&["status"]);
    assert!(
        st.stdout.contains(&format!("Slurm job {id:>8}")),
        "{}",
        st.stdout
    );
    assert!(ws.run(&["runs"]).stdout.contains(&id));
    let st = Command::new("kill")
        .args(["-s", "KILL", &bg.pid().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    drop(bg);
    assert_eq!(squeue_state(&id).as_deref(), Some("RUNNING"));
    ws.write("go", "");
    let out = ws.run(&["run", "--json"]);
    out.expect_code(0);
    assert!(
        out.stderr
            .contains(&format!("re-attached to Slurm job {id}")),
        "{}",
        out.stderr
    );
    let v = out.json();
    assert_eq!(read(artifact(&v, "b").join("b.txt")), "resumed=no\n");
    assert_eq!(read(ws.path("attempts")), "no\n", "the job ran twice");
    assert_eq!(job_ids(&ws, "b").iter().filter(|j| **j == id).count(), 2);
}

#[test]
fn a_killed_controllers_job_whose_fingerprint_changed_is_cancelled() {
    let Some(_node) = slurm() else { return };
    let ws = Ws::new(&format!(
        "{EXEC}stages:\n  b:\n    cmd: \"touch started; sleep 60; echo 1 > $PIPELINE_OUT/x\"\n"
    ));
    let bg = Bg::spawn(&ws, &["run", "--json"]);
    wait_for(&ws.path("started"), Duration::from_secs(60));
    let id = until("the job id", Duration::from_secs(10), || {
        job_ids(&ws, "b").pop()
    });
    let _ = Command::new("kill")
        .args(["-s", "KILL", &bg.pid().to_string()])
        .status();
    drop(bg);
    ws.set_yaml(&format!(
        "{EXEC}stages:\n  b:\n    cmd: \"echo 2 > $PIPELINE_OUT/x\"\n"
    ));
    let v = ws.run_ok(&[]);
    assert_eq!(read(artifact(&v, "b").join("x")), "2\n");
    let state = until(
        "the old job to end",
        Duration::from_secs(30),
        || match squeue_state(&id) {
            Some(s) if s == "RUNNING" || s == "COMPLETING" => None,
            s => Some(s),
        },
    );
    assert!(
        state.as_deref().is_none_or(|s| s == "CANCELLED"),
        "{state:?}"
    );
}

#[test]
fn a_requeued_job_finishes_under_the_same_id() {
    let Some(_node) = slurm() else { return };
    let ws = Ws::new(&format!("{EXEC}  requeue: true\n{RESUMABLE}"));
    let mut bg = Bg::spawn(&ws, &["run", "--json"]);
    wait_for(&ws.path("started"), Duration::from_secs(60));
    let id = until("the job id", Duration::from_secs(10), || {
        job_ids(&ws, "b").pop()
    });
    scontrol(&["requeue", &id]);
    // Slurm holds a requeued job back for two minutes (BeginTime); let it go sooner, but not
    // at once: slurmd revokes the killed run's credential with a one-second timestamp, and a
    // relaunch within that second is refused ("Killing non-startable batch JobId=…: Job
    // credential revoked") and ends FAILED, which is what CI once met with `starttime=now`.
    until(
        "the job to be pending again",
        Duration::from_secs(20),
        || (squeue_state(&id).as_deref() == Some("PENDING")).then_some(()),
    );
    scontrol(&["update", &format!("jobid={id}"), "starttime=now+3"]);
    let out = bg.wait(Duration::from_secs(120));
    out.expect_code(0);
    let v = out.json();
    let b = artifact(&v, "b");
    assert_eq!(read(b.join("b.txt")), "resumed=yes\n");
    let m: Value = serde_json::from_str(&read(b.join("MANIFEST.json"))).unwrap();
    assert_eq!(m["record"]["job"]["job_id"], id.as_str());
    assert_eq!(job_ids(&ws, "b"), vec![id]);
}

/// A PATH where `squeue` lists nothing and `sacct` has no records: every job looks gone.
fn blind_path(ws: &Ws) -> String {
    let bin = ws.path("blind-bin");
    std::fs::create_dir_all(&bin).unwrap();
    for tool in ["squeue", "sacct"] {
        let p = bin.join(tool);
        std::fs::write(&p, "#!/bin/sh\nexit 0\n").unwrap();
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

#[test]
fn a_job_gone_from_squeue_is_judged_by_its_marker() {
    let Some(_node) = slurm() else { return };
    let ws = Ws::new(&format!(
        "{EXEC}stages:\n  ok:\n    cmd: \"sleep 2; echo 1 > $PIPELINE_OUT/x\"\n  bad:\n    cmd: \"sleep 2; exit 4\"\n"
    ));
    let out = ws
        .command(&["run", "--json"])
        .env("PATH", blind_path(&ws))
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_status(&v, "ok", "ran");
    assert_status(&v, "bad", "failed");
    let err = entry(&v, "bad")["error"].as_str().unwrap();
    assert!(err.contains("status 4"), "{err}");
}

#[test]
fn a_job_whose_state_stays_unknown_fails_after_the_timeout() {
    let Some(_node) = slurm() else { return };
    let ws = Ws::new(
        "executor:\n  kind: slurm\n  poll_max: 1s\n  unknown_timeout: 3s\nstages:\n  lost:\n    cmd: \"sleep 60\"\n",
    );
    let out = ws
        .command(&["run", "--json"])
        .env("PATH", blind_path(&ws))
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let err = entry(&v, "lost")["error"].as_str().unwrap();
    assert!(err.contains("stayed unknown"), "{err}");
    let _ = Command::new("scancel").arg("--name=pipeline:lost").status();
}

#[test]
fn transient_controller_errors_are_retried() {
    let Some(_node) = slurm() else { return };
    let ws = Ws::new(&format!(
        "{EXEC}stages:\n  a:\n    cmd: \"sleep 1; echo 1 > $PIPELINE_OUT/x\"\n"
    ));
    // squeue and sbatch fail twice each as a controller being restarted does, then work.
    let bin = ws.path("flaky-bin");
    std::fs::create_dir_all(&bin).unwrap();
    for tool in ["squeue", "sbatch"] {
        let real = common_which(tool);
        let p = bin.join(tool);
        std::fs::write(
            &p,
            format!(
                "#!/bin/sh\nn=$(cat {c} 2>/dev/null || echo 0)\nif [ \"$n\" -lt 2 ]; then echo $((n+1)) > {c}; echo '{tool}: error: Unable to contact slurm controller (connect failure)' >&2; exit 1; fi\nexec {real} \"$@\"\n",
                c = bin.join(format!("{tool}.count")).display(),
                real = real.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = ws
        .command(&["run", "--json"])
        .env("PATH", path)
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_status(&v, "a", "ran");
    assert_eq!(read(bin.join("sbatch.count")).trim(), "2");
}

fn common_which(tool: &str) -> PathBuf {
    let path = std::env::var("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(tool))
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("{tool} is not on PATH"))
}

#[test]
fn an_impossible_request_fails_after_the_bounded_wait() {
    let Some(_node) = slurm() else { return };
    let ws = Ws::new(&format!(
        "{EXEC}stages:\n  huge:\n    cmd: \"true\"\n    resources: {{cpu: 1024}}\n"
    ));
    let t0 = Instant::now();
    let v = ws.json(&["run"], 1);
    let err = entry(&v, "huge")["error"].as_str().unwrap();
    assert!(
        err.contains("PENDING (PartitionConfig)") || err.contains("PENDING (Resources"),
        "{err}"
    );
    assert!(err.contains("cannot run it as requested"), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(60));
    let id = job_ids(&ws, "huge").pop().unwrap();
    assert_ne!(
        squeue_state(&id).as_deref(),
        Some("PENDING"),
        "the job was left queued"
    );
}

#[test]
fn two_matrix_instances_run_as_concurrent_jobs() {
    let Some(_node) = slurm() else { return };
    let ws = Ws::new(&format!(
        "{EXEC}stages:\n  t:\n    matrix: {{n: [1, 2]}}\n    cmd: \"touch here-${{params.n}}; i=0; while [ ! -e here-1 ] || [ ! -e here-2 ]; do sleep 0.1; i=$((i+1)); [ $i -gt 300 ] && exit 9; done; echo ${{params.n}} > $PIPELINE_OUT/n\"\n"
    ));
    // Each instance waits until both have started: this finishes only if they overlap.
    let v = ws.run_ok(&[]);
    assert_eq!(v["counts"]["ran"], 2);
    assert_ne!(job_ids(&ws, "t@n=1"), job_ids(&ws, "t@n=2"));
}

#[test]
fn sigterm_cancels_every_job_with_one_scancel() {
    let Some(_node) = slurm() else { return };
    let ws = Ws::new(&format!(
        "{EXEC}stages:\n  s:\n    matrix: {{n: [1, 2]}}\n    cmd: \"touch started-${{params.n}}; sleep 120\"\n"
    ));
    let mut bg = Bg::spawn(&ws, &["run", "--json"]);
    wait_for(&ws.path("started-1"), Duration::from_secs(60));
    wait_for(&ws.path("started-2"), Duration::from_secs(60));
    let ids = [
        job_ids(&ws, "s@n=1").pop().unwrap(),
        job_ids(&ws, "s@n=2").pop().unwrap(),
    ];
    bg.signal("TERM");
    let out = bg.wait(Duration::from_secs(30));
    out.expect_code(1);
    assert!(
        out.stderr
            .contains("cancelled 2 Slurm job(s) with one scancel"),
        "{}",
        out.stderr
    );
    for id in &ids {
        let s = until(
            "the job to end",
            Duration::from_secs(30),
            || match squeue_state(id) {
                Some(s) if s == "RUNNING" || s == "COMPLETING" => None,
                s => Some(s),
            },
        );
        assert!(s.as_deref().is_none_or(|s| s == "CANCELLED"), "{s:?}");
    }
}

#[test]
fn slurm_variables_of_an_enclosing_allocation_do_not_leak_into_submissions() {
    let Some(_node) = slurm() else { return };
    let ws = Ws::new(&format!(
        "{EXEC}stages:\n  e:\n    cmd: \"echo $SLURM_JOB_ID > $PIPELINE_OUT/id; echo $SLURM_MEM_PER_CPU > $PIPELINE_OUT/mem\"\n    resources: {{mem: 100M}}\n"
    ));
    let out = ws
        .command(&["run", "--json"])
        .env("SLURM_JOB_ID", "999999")
        .env("SLURM_MEM_PER_CPU", "7")
        .env("SLURM_PARTITION", "nosuchpartition")
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let dir = artifact(&v, "e");
    let id = read(dir.join("id")).trim().to_string();
    assert_ne!(id, "999999");
    assert_eq!(job_ids(&ws, "e"), vec![id]);
    assert_eq!(read(dir.join("mem")).trim(), "");
}

#[test]
fn mistakes_known_up_front_exit_2_before_anything_runs() {
    // No Slurm needed for the missing-tools case.
    let ws = Ws::new(&format!("{EXEC}stages:\n  a:\n    cmd: \"touch ran\"\n"));
    let empty = ws.path("empty-bin");
    std::fs::create_dir_all(&empty).unwrap();
    let out = ws.command(&["run"]).env("PATH", &empty).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("`sbatch` is not on PATH") && err.contains("--executor local"),
        "{err}"
    );
    assert!(!ws.path("ran").exists());
    // ... and `--executor local` runs the same file here.
    let out = ws
        .command(&["run", "--executor", "local"])
        .env("PATH", format!("{}:/usr/bin:/bin", empty.display()))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let Some(_node) = slurm() else { return };
    let ws = Ws::new(
        "executor:\n  kind: slurm\n  partition: debugg\nstages:\n  a:\n    cmd: \"touch ran\"\n",
    );
    let out = ws.run(&["run"]);
    out.expect_code(2);
    assert!(
        out.stderr
            .contains("pipeline.yaml:3:14: unknown Slurm partition `debugg`"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("did you mean `debug`?"),
        "{}",
        out.stderr
    );
    assert!(!ws.path("ran").exists());
}

/// The benchmark of issue 15 (`cargo test --test slurm -- --ignored --nocapture
/// controller_overhead`): N trivial `cmd` instances (`SLURM_BENCH_N`, default 1,000) as jobs
/// that wait until all are submitted, so that all N are queued at once. Prints the
/// controller's own CPU time per job, the Slurm calls per poll, and how long a finished job
/// waits for the controller (marker seen, output committed).
#[test]
#[ignore]
fn controller_overhead() {
    let Some(_node) = slurm() else { return };
    let n: usize = std::env::var("SLURM_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let values: Vec<String> = (0..n).map(|i| i.to_string()).collect();
    let ws = Ws::new(&format!(
        "executor:\n  kind: slurm\n  poll_max: 2s\nstages:\n  t:\n    matrix: {{i: [{}]}}\n    cmd: \"while [ ! -e go ]; do sleep 0.2; done; echo ${{params.i}} > $PIPELINE_OUT/i\"\n",
        values.join(", ")
    ));
    let stats = ws.path("stats.json");
    let mut bg = Bg(Some(
        ws.command(&["run", "--json"])
            .env("PIPELINE_SLURM_STATS", &stats)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    ));
    let t0 = Instant::now();
    until("all jobs submitted", Duration::from_secs(1200), || {
        let v = ws.json(&["runs"], 0);
        let jobs = v["runs"][0]["jobs"].as_array().map_or(0, |j| j.len());
        (jobs >= n).then_some(())
    });
    let submitted = t0.elapsed();
    let queued = Command::new("squeue")
        .args(["-h", "-o", "%i"])
        .output()
        .unwrap();
    let queued = String::from_utf8_lossy(&queued.stdout).lines().count();
    ws.write("go", "");
    let out = bg.wait(Duration::from_secs(3600));
    out.expect_code(0);
    let total = t0.elapsed();
    let s: Value = serde_json::from_str(&read(&stats)).unwrap();
    let per = |k: &str| s[k].as_f64().unwrap() / n as f64;
    println!("Slurm executor, {n} cmd jobs ({}):", s["source"]);
    println!(
        "  all submitted after {:.1} s ({:.1} ms per sbatch); {queued} in squeue at once",
        submitted.as_secs_f64(),
        per("sbatch_ms")
    );
    println!(
        "  run: {:.1} s; max jobs in flight {}",
        total.as_secs_f64(),
        s["max_in_flight"]
    );
    println!(
        "  polls {}, Slurm calls for them {} ({:.2} per poll), {:.1} ms per poll",
        s["polls"],
        s["poll_calls"],
        s["poll_calls"].as_f64().unwrap() / s["polls"].as_f64().unwrap().max(1.0),
        s["poll_ms"].as_f64().unwrap() / s["polls"].as_f64().unwrap().max(1.0)
    );
    println!(
        "  controller CPU per job: {:.1} ms own + {:.1} ms in the Slurm tools it ran",
        per("controller_cpu_ms"),
        per("children_cpu_ms")
    );
    println!(
        "  a finished job waits {:.1} ms (mean) until the controller sees its marker, {:.1} ms to commit",
        per("detect_ms"),
        per("commit_ms")
    );
    assert!(s["poll_calls"].as_f64().unwrap() <= 2.0 * s["polls"].as_f64().unwrap());
}
