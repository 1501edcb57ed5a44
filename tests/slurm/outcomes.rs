//! How a stage's job ends under Slurm and what the run records: the default pipeline against a
//! local run, a failing stage, sbatch's rejection, a cancellation from outside, a time limit.

use super::*;

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
