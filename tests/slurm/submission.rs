//! What is submitted and how: an impossible request, concurrent matrix instances, one scancel
//! for all on SIGTERM, no leak of an enclosing allocation's variables, mistakes refused before
//! anything runs, and the controller's overhead benchmark (issue 15, ignored by default).

use super::*;

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
