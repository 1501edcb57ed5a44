//! Class 2 of issue 20: no file outside the store is deleted, whatever is linked into it, and
//! `gc` keeps what any pipeline file of the workspace uses.

use super::*;

#[test]
fn store_tmp_symlinked_to_scratch_keeps_foreign_files() {
    let c = Case::new(ONE_STAGE);
    std::fs::create_dir_all(c.ws.path(".pipeline")).unwrap();
    std::os::unix::fs::symlink(c.out(), c.ws.path(".pipeline/tmp")).unwrap();
    c.run(&["run"]).expect_code(0);
    c.run(&["run"]).expect_code(0);
    let gc = c.run(&["gc"]);
    expect(&gc, 0, "left");
    assert!(gc.stdout.contains("keep.txt"), "{}", gc.describe());
    c.finish();
}

#[test]
fn store_work_symlinked_to_scratch_keeps_foreign_files() {
    let c = Case::new(ONE_STAGE);
    std::fs::create_dir_all(c.ws.path(".pipeline")).unwrap();
    std::os::unix::fs::symlink(c.out(), c.ws.path(".pipeline/work")).unwrap();
    c.run(&["run"]).expect_code(0);
    c.run(&["gc"]).expect_code(0);
    c.finish();
}

#[test]
fn store_symlink_planted_in_artifacts_is_left_alone() {
    let c = Case::new(ONE_STAGE);
    c.run(&["run"]).expect_code(0);
    std::fs::create_dir_all(c.ws.path(".pipeline/artifacts/evil")).unwrap();
    std::os::unix::fs::symlink(c.out(), c.ws.path(".pipeline/artifacts/evil/0123")).unwrap();
    let gc = c.run(&["gc"]);
    expect(&gc, 0, "symlink");
    // verify lists the planted link as left alone (the store never makes a symlink) and
    // leaves it, and its target, where they are.
    let v = c.run_file(&c.ws.path(".hostile-verify"), &["verify"]);
    expect(&v, 0, "left alone");
    assert!(std::fs::symlink_metadata(c.ws.path(".pipeline/artifacts/evil/0123")).is_ok());
    c.run(&["gc"]).expect_code(0);
    c.finish();
}

#[test]
fn store_foreign_directory_in_work_is_left_alone() {
    let c = Case::new(ONE_STAGE);
    c.run(&["run"]).expect_code(0);
    c.ws.write(".pipeline/work/someone/else/notes.txt", "mine");
    let gc = c.run(&["gc"]);
    expect(&gc, 0, "did not make it");
    assert!(c.ws.path(".pipeline/work/someone/else/notes.txt").exists());
    c.finish();
}

#[test]
fn store_gc_keeps_what_another_pipeline_file_uses() {
    let c = Case::new(ONE_STAGE);
    c.ws.write(
        "other.yaml",
        "stages:\n  b:\n    cmd: 'echo b > $PIPELINE_OUT/b.txt'\n",
    );
    c.run(&["run"]).expect_code(0);
    let other = c.ws.path("other.yaml");
    c.run_file(&other, &["run"]).expect_code(0);
    let gc = c.run_file(&other, &["gc"]);
    expect(&gc, 0, "pipeline.yaml uses too");
    let v = c.ws.json(&["status"], 0);
    assert_eq!(stage_json(&v, "a")["status"], "fresh", "{v:#}");
    c.finish();
}

#[test]
fn store_gc_stops_when_another_pipeline_file_is_broken() {
    let c = Case::new(ONE_STAGE);
    c.run(&["run"]).expect_code(0);
    c.ws.write(
        "broken.yml",
        "stages:\n  b:\n    cmd: x\n    deps: [nope]\n",
    );
    c.ws.set_yaml("stages:\n  z:\n    cmd: 'true'\n");
    c.expect(&["gc"], 2, "gc cannot tell which artifacts");
    assert!(c.ws.path(".pipeline/artifacts/a").exists());
    c.finish();
}

#[test]
fn store_gc_dry_run_removes_nothing() {
    let c = Case::new(ONE_STAGE);
    c.run(&["run"]).expect_code(0);
    c.ws.set_yaml("stages:\n  z:\n    cmd: 'true'\n");
    let before = snapshot(&c.ws.path(".pipeline/artifacts"));
    c.expect(&["gc", "--dry-run"], 0, "would remove");
    assert!(snapshot(&c.ws.path(".pipeline/artifacts")) == before);
    c.expect(&["gc"], 0, "removed");
    c.finish();
}

#[test]
fn store_empty_foreign_folders_on_a_scratch_disk_stay() {
    let c = Case::new(ONE_STAGE);
    let scratch = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(c.ws.path(".pipeline")).unwrap();
    for area in ["work", "artifacts", "quarantine"] {
        std::fs::create_dir_all(scratch.path().join(area).join("someone-elses-empty")).unwrap();
        std::os::unix::fs::symlink(
            scratch.path().join(area),
            c.ws.path(&format!(".pipeline/{area}")),
        )
        .unwrap();
    }
    c.run(&["run"]).expect_code(0);
    // Another pipeline: gc removes a's artifact and then its (marked) instance folder.
    c.ws.set_yaml("stages:\n  z:\n    cmd: 'true'\n");
    expect(&c.run(&["gc"]), 0, "removed");
    for area in ["work", "artifacts", "quarantine"] {
        let foreign = scratch.path().join(area).join("someone-elses-empty");
        assert!(foreign.is_dir(), "{} was removed", foreign.display());
    }
    assert!(!scratch.path().join("artifacts/a").exists());
    c.finish();
}

#[test]
fn store_gc_sees_pipeline_files_in_every_yaml_spelling() {
    let c = Case::new(ONE_STAGE);
    c.ws.write(
        "flow.yaml",
        "{stages: {b: {cmd: 'echo b > $PIPELINE_OUT/b.txt'}}}\n",
    );
    c.ws.write(
        "quoted.yml",
        "# a comment first\n\"stages\":\n  c:\n    cmd: 'echo c > $PIPELINE_OUT/c.txt'\n",
    );
    c.ws.write("data.yaml", "labels: [a, b]\nstages_note: not a pipeline\n");
    for file in ["flow.yaml", "quoted.yml"] {
        c.run_file(&c.ws.path(file), &["run"]).expect_code(0);
    }
    c.run(&["run"]).expect_code(0);
    let gc = c.run(&["gc"]);
    expect(&gc, 0, "flow.yaml");
    assert!(gc.stdout.contains("quoted.yml"), "{}", gc.describe());
    for (file, stage) in [("flow.yaml", "b"), ("quoted.yml", "c")] {
        let v = c.run_file(&c.ws.path(file), &["status", "--json"]);
        assert_eq!(stage_json(&v.json(), stage)["status"], "fresh", "{file}");
    }
    c.finish();
}

#[test]
fn store_gc_stops_at_a_yaml_file_it_cannot_read() {
    let c = Case::new(ONE_STAGE);
    c.run(&["run"]).expect_code(0);
    c.ws.set_yaml("stages:\n  z:\n    cmd: 'true'\n");
    // A sparse 8 GiB file: read whole, it would take 8 GiB (and minutes).
    let huge = std::fs::File::create(c.ws.path("huge.yaml")).unwrap();
    huge.set_len(8 << 30).unwrap();
    let t0 = Instant::now();
    c.expect(&["gc"], 2, "larger than 4 MiB");
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
    std::fs::remove_file(c.ws.path("huge.yaml")).unwrap();
    c.ws.write("junk.yml", b"stages:\n  b:\n    cmd: '\xff\xfe'\n");
    c.expect(&["gc"], 2, "not UTF-8");
    c.ws.write("junk.yml", "stages: [unclosed\n");
    c.expect(&["gc"], 2, "gc cannot tell which artifacts");
    assert!(c.ws.path(".pipeline/artifacts/a").exists());
    std::fs::remove_file(c.ws.path("junk.yml")).unwrap();
    c.expect(&["gc"], 0, "removed");
    c.finish();
}

#[test]
fn store_pull_killed_midway_is_cleared_by_the_next_run() {
    // 3,000 files: laying them out in the pull's staging directory takes long enough to be
    // killed in the middle of it.
    let yaml = "stages:\n  many:\n    cmd: 'cd $PIPELINE_OUT && for i in $(seq 1 3000); do echo $i > f$i; done'\n";
    let remote = tempfile::tempdir().unwrap();
    let remote_arg = remote.path().display().to_string();
    let first = Case::new(yaml);
    first.run(&["run"]).expect_code(0);
    first.run(&["push", "--remote", &remote_arg]).expect_code(0);
    first.finish();

    let c = Case::new(yaml);
    let mut pull = limited();
    pull.args(["-f", "pipeline.yaml", "pull", "--remote", &remote_arg])
        .current_dir(c.ws.root())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = pull.spawn().unwrap();
    let staging = |ws: &Ws| {
        std::fs::read_dir(ws.path(".pipeline/tmp"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("pull-"))
    };
    let t0 = Instant::now();
    while !staging(&c.ws) && t0.elapsed() < TIME && child.try_wait().unwrap().is_none() {
        std::thread::sleep(Duration::from_millis(1));
    }
    let _ = child.kill(); // SIGKILL
    child.wait().unwrap();
    if !staging(&c.ws) {
        eprintln!("note: the pull finished (or had not staged) before it was killed");
    }
    c.run(&["run"]).expect_code(0);
    assert!(
        !staging(&c.ws),
        "the killed pull's staging directory outlived the next run"
    );
    c.run(&["gc"]).expect_code(0);
    c.finish();
}
