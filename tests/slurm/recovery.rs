//! What the executor recovers from: a node going down (the retry resumes from the work
//! directory), a killed controller (the next run re-attaches, or cancels a job whose
//! fingerprint changed), requeues, jobs gone from squeue or unknown, transient controller errors.

use super::*;

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
