//! Beyond issue 20's classes: what else a hostile user tries on the command line, with inputs
//! (loops, FIFOs, files outside) and with names, and the store's verify and lock.

use super::*;

#[test]
fn cli_pipeline_file_that_is_missing_or_a_directory() {
    let c = Case::new(ONE_STAGE);
    expect(
        &c.run_file(&c.ws.path("nope.yaml"), &["status"]),
        2,
        "cannot read pipeline file",
    );
    expect(
        &c.run_file(c.ws.root(), &["status"]),
        2,
        "cannot read pipeline file",
    );
    c.finish();
}

#[test]
fn cli_unknown_target_flag_and_set() {
    let c = Case::new(ONE_STAGE);
    c.expect(&["run", "nope"], 2, "nope");
    c.expect(&["run", "--no-such-flag"], 2, "no-such-flag");
    c.expect(&["--set", "nope=1", "status"], 2, "nope");
    c.expect(&["--set", "novalue", "status"], 2, "novalue");
    c.finish();
}

#[test]
fn cli_state_directory_that_is_a_file() {
    let c = Case::new(ONE_STAGE);
    c.ws.write(".pipeline", "not a directory");
    c.expect(&["run"], 2, "cannot write the workspace state directory");
    std::fs::remove_file(c.ws.path(".pipeline")).unwrap();
    c.finish();
}

#[test]
fn cli_store_folder_that_is_a_dangling_symlink() {
    let c = Case::new(ONE_STAGE);
    std::fs::create_dir_all(c.ws.path(".pipeline")).unwrap();
    std::os::unix::fs::symlink("/nonexistent/scratch", c.ws.path(".pipeline/tmp")).unwrap();
    let out = c.run(&["run"]);
    assert_ne!(out.code, 0, "{}", out.describe());
    std::fs::remove_file(c.ws.path(".pipeline/tmp")).unwrap();
    c.finish();
}

#[test]
fn inputs_symlink_loop_terminates() {
    let c = Case::new("stages:\n  a:\n    cmd: 'true'\n    inputs: [data]\n");
    c.ws.write("data/a.txt", "a");
    std::os::unix::fs::symlink("..", c.ws.path("data/up")).unwrap();
    std::os::unix::fs::symlink(".", c.ws.path("data/self")).unwrap();
    let t0 = Instant::now();
    c.run(&["status"]).expect_code(0);
    assert!(t0.elapsed() < Duration::from_secs(20));
    c.finish();
}

#[test]
fn inputs_fifo_and_devices_are_not_read() {
    let c = Case::new("stages:\n  a:\n    cmd: 'true'\n    inputs: [\"data/*\", /dev/zero]\n");
    c.ws.write("data/a.txt", "a");
    assert!(
        Command::new("mkfifo")
            .arg(c.ws.path("data/fifo"))
            .status()
            .unwrap()
            .success()
    );
    let t0 = Instant::now();
    c.run(&["run"]).expect_code(0);
    assert!(t0.elapsed() < Duration::from_secs(20));
    c.finish();
}

#[test]
fn inputs_outside_the_workspace_are_read_not_changed() {
    let c = Case::new(ONE_STAGE);
    c.ws.set_yaml(&format!(
        "stages:\n  a:\n    cmd: 'cat {0}/keep.txt > $PIPELINE_OUT/copy'\n    inputs: [\"{0}/sub\"]\n",
        c.out().display()
    ));
    c.run(&["run"]).expect_code(0);
    c.run(&["gc"]).expect_code(0);
    c.finish();
}

#[test]
fn names_dot_dot_and_slashes_stay_inside_the_store() {
    for name in ["..", ".", "a/../../x", "con:colon", "with space"] {
        let c = Case::new(&format!(
            "stages:\n  \"{name}\":\n    cmd: 'echo x > $PIPELINE_OUT/x'\n"
        ));
        let out = c.run(&["run"]);
        assert!(out.code == 0 || out.code == 2, "{name}: {}", out.describe());
        c.run(&["gc"]);
        c.finish();
    }
}

#[test]
fn names_matrix_values_with_path_characters_stay_inside_the_store() {
    let c = Case::new(
        "stages:\n  a:\n    cmd: 'echo x > $PIPELINE_OUT/x'\n    matrix: {p: [\"../..\", \"/etc\", \"a b\", \"%2F\"]}\n",
    );
    c.run(&["run"]).expect_code(0);
    c.run(&["gc"]).expect_code(0);
    c.finish();
}

#[test]
fn names_very_long_stage_name_fails_cleanly() {
    let name = "n".repeat(300);
    let c = Case::new(&format!("stages:\n  {name}:\n    cmd: 'true'\n"));
    let out = c.run(&["run"]);
    assert!(
        out.code == 1 || out.code == 2 || out.code == 0,
        "{}",
        out.describe()
    );
    c.finish();
}

#[test]
fn verify_quarantines_an_artifact_changed_behind_the_stores_back() {
    let c = Case::new(ONE_STAGE);
    let v = c.ws.json(&["run"], 0);
    let dir = PathBuf::from(stage_json(&v, "a")["artifact"].as_str().unwrap());
    std::fs::write(dir.join("a.txt"), "tampered").unwrap();
    let out = c.run_file(&c.ws.path(".hostile-verify"), &["verify"]);
    out.expect_code(1);
    c.run(&["run"]).expect_code(0);
    c.run(&["gc"]).expect_code(0);
    c.finish();
}

#[test]
fn lock_second_run_is_refused_while_the_first_holds_it() {
    let c = Case::new("stages:\n  a:\n    cmd: 'touch started; sleep 3'\n");
    let mut first = c.ws.command(&["run"]);
    let child = first
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    common::wait_for(&c.ws.path("started"), Duration::from_secs(30));
    c.expect(&["run"], 2, "holds this workspace");
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    c.finish();
}
