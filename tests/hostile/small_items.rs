//! Class 8 of issue 20: the smaller items (quoting, metrics, a full disk, other filesystems,
//! store writes that fail mid-run).

use super::*;

#[test]
fn small_quoted_params_are_one_shell_word() {
    let c = Case::new(
        "stages:\n  a:\n    cmd: 'printf %s ${params.msg:q} > $PIPELINE_OUT/m.txt'\n    params: {msg: \"it's; echo pwned > /tmp/x $(id)\"}\n",
    );
    let out = c.run(&["run", "--json"]);
    out.expect_code(0);
    let dir = stage_json(&out.json(), "a")["artifact"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        std::fs::read_to_string(Path::new(&dir).join("m.txt")).unwrap(),
        "it's; echo pwned > /tmp/x $(id)"
    );
    c.finish();
}

#[test]
fn small_invalid_metrics_json_is_warned_about() {
    let c =
        Case::new("stages:\n  a:\n    cmd: 'echo \"{not json\" > $PIPELINE_OUT/metrics.json'\n");
    c.expect(&["run"], 0, "metrics.json is not valid JSON");
    c.expect(&["metrics"], 0, "not valid JSON");
    c.finish();
}

#[test]
fn small_disk_full_shows_its_cause() {
    let c = Case::new("stages:\n  a:\n    cmd: 'head -c 1 /dev/zero > /dev/full'\n");
    c.expect(&["run"], 1, "No space left on device");
    let runs = c.run(&["runs"]);
    expect(&runs, 0, "failed");
    assert!(!runs.stdout.contains("interrupted"), "{}", runs.describe());
    assert!(runs.stdout.contains("cause:"), "{}", runs.describe());
    c.finish();
}

/// A one-stage case whose `.pipeline/artifacts` links to a directory on another filesystem
/// (`/dev/shm`), with that directory; `None`, with a note, where there is no such filesystem.
fn artifacts_on_another_filesystem() -> Option<(Case, tempfile::TempDir)> {
    use std::os::unix::fs::MetadataExt;
    let shm = Path::new("/dev/shm");
    let Ok(scratch) = tempfile::tempdir_in(shm) else {
        eprintln!("skipped: no /dev/shm");
        return None;
    };
    let c = Case::new(ONE_STAGE);
    if std::fs::metadata(shm).unwrap().dev() == std::fs::metadata(c.ws.root()).unwrap().dev() {
        eprintln!("skipped: /dev/shm is on the workspace's filesystem");
        return None;
    }
    std::fs::create_dir_all(c.ws.path(".pipeline")).unwrap();
    std::os::unix::fs::symlink(scratch.path(), c.ws.path(".pipeline/artifacts")).unwrap();
    Some((c, scratch))
}

#[test]
fn small_artifacts_on_another_filesystem_commit() {
    let Some((c, _scratch)) = artifacts_on_another_filesystem() else {
        return;
    };
    c.run(&["run"]).expect_code(0);
    let v = c.ws.json(&["status"], 0);
    assert_eq!(stage_json(&v, "a")["status"], "fresh", "{v:#}");
    c.finish();
}

#[test]
fn small_verify_quarantines_across_filesystems() {
    let Some((c, _scratch)) = artifacts_on_another_filesystem() else {
        return;
    };
    let v = c.ws.json(&["run"], 0);
    let dir = PathBuf::from(stage_json(&v, "a")["artifact"].as_str().unwrap());
    std::fs::write(dir.join("a.txt"), "tampered").unwrap();
    // A link planted in the artifact is moved as a link, not followed.
    std::os::unix::fs::symlink("/dev/zero", dir.join("zero")).unwrap();
    let out = c.run_file(&c.ws.path(".hostile-verify"), &["verify", "--json"]);
    out.expect_code(1);
    let moved = PathBuf::from(out.json()["corrupt"][0]["quarantined_to"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(moved.join("a.txt")).unwrap(),
        "tampered"
    );
    assert!(
        std::fs::symlink_metadata(moved.join("zero"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert!(!dir.exists(), "the corrupt artifact left the store");
    c.run(&["run"]).expect_code(0);
    c.run(&["gc"]).expect_code(0);
    c.finish();
}

#[test]
fn small_store_write_failing_mid_run_records_its_cause() {
    // sled buffers its writes, so a full disk reaches a run as a failed index write at sled's
    // open or flush; the reliable way to fail that write here is another process holding the
    // index's lock when the run first writes to it (a re-run opens sled only then).
    let c = Case::new(ONE_STAGE);
    c.run(&["run"]).expect_code(0);
    c.ws.set_yaml("stages:\n  a:\n    cmd: 'echo b > $PIPELINE_OUT/a.txt'\n");
    let mut holder = Command::new("flock");
    holder
        .args([
            "-x",
            "-o",
            ".pipeline/index/db",
            "-c",
            "touch locked; exec sleep 60",
        ])
        .current_dir(c.ws.root())
        .process_group(0);
    let mut holder = holder.spawn().expect("flock(1) from util-linux");
    common::wait_for(&c.ws.path("locked"), Duration::from_secs(30));
    let out = c.run(&["run"]);
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{}", holder.id())])
        .status();
    let _ = holder.wait();
    expect(&out, 1, "held by another process");
    let runs = c.run(&["runs", "--json"]);
    runs.expect_code(0);
    let last = &runs.json()["runs"][0];
    assert_eq!(last["status"], "failed", "{last:#}");
    let cause = last["cause"].as_str().unwrap_or_default();
    assert!(cause.contains("held by another process"), "{last:#}");
    expect(&c.run(&["runs"]), 0, "cause: the index");
    c.run(&["run"]).expect_code(0);
    c.finish();
}

#[test]
fn small_predict_refuses_empty_texts_before_loading_a_model() {
    let c = Case::new(ONE_STAGE);
    // No model at all: the text is refused first.
    c.ws.write("not-a-model/readme.txt", "x");
    c.expect(
        &["predict", "--model", "not-a-model", ""],
        2,
        "text 1 on the command line is empty",
    );
    c.expect(
        &["predict", "--model", "not-a-model", "好", " \t"],
        2,
        "text 2 on the command line is empty",
    );
    c.finish();
}
