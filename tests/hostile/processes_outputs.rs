//! Classes 3 and 4 of issue 20: nothing committed changes and every child process ends with its
//! run; special files among a stage's outputs (links, FIFOs, devices, odd names) are refused.

use super::*;

#[test]
fn process_background_writer_cannot_change_a_committed_artifact() {
    let c = Case::new(
        "stages:\n  a:\n    cmd: '(for i in 1 2 3 4 5 6 7 8 9 10; do sleep 0.1; echo $i >> $PIPELINE_OUT/log.txt; done) & echo 0 > $PIPELINE_OUT/log.txt'\n",
    );
    c.run(&["run"]).expect_code(0);
    std::thread::sleep(Duration::from_millis(1500));
    c.finish();
}

#[test]
fn process_sigterm_ends_the_stage_processes() {
    for signal in ["TERM", "INT"] {
        // `pid` appears whole (a rename): read half-written, it failed to parse under load.
        let c = Case::new(
            "stages:\n  a:\n    cmd: 'sleep 300 & echo $! > pid.tmp && mv pid.tmp pid; sleep 300'\n  b:\n    cmd: 'true'\n    deps: [a]\n",
        );
        let mut cmd = limited();
        cmd.arg("-f")
            .arg(c.ws.file())
            .args(["run"])
            .current_dir(c.ws.root());
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        common::wait_for(&c.ws.path("pid"), Duration::from_secs(30));
        let bg: i32 = std::fs::read_to_string(c.ws.path("pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let t0 = Instant::now();
        Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(child.id().to_string())
            .status()
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "{signal}: {:?}",
            t0.elapsed()
        );
        assert_ne!(out.status.code(), Some(0));
        std::thread::sleep(Duration::from_millis(200));
        let alive =
            std::fs::read_to_string(format!("/proc/{bg}/stat")).is_ok_and(|s| !s.contains(") Z "));
        assert!(
            !alive,
            "{signal}: the stage's background process {bg} outlived the run"
        );
        let runs = c.ws.json(&["runs"], 0);
        assert_eq!(runs["runs"][0]["status"], "interrupted", "{runs:#}");
        c.finish();
    }
}

#[test]
fn process_stage_killed_by_a_signal_is_a_failure() {
    let c = Case::new("stages:\n  a:\n    cmd: 'kill -9 $$'\n");
    c.expect(&["run"], 1, "killed by a signal");
    c.finish();
}

// ---------------------------------------------------------------------------------------------
// Class 4: special files in outputs.

fn output_refused(cmd: &str, needle: &str) {
    let c = Case::new(&format!("stages:\n  a:\n    cmd: '{cmd}'\n"));
    let t0 = Instant::now();
    c.expect(&["run"], 1, needle);
    assert!(t0.elapsed() < Duration::from_secs(20));
    c.finish();
}

#[test]
fn outputs_symlink_to_dev_zero_is_refused() {
    output_refused(
        "ln -s /dev/zero $PIPELINE_OUT/zero",
        "is a symlink (to /dev/zero)",
    );
}

#[test]
fn outputs_fifo_is_refused() {
    output_refused("mkfifo $PIPELINE_OUT/pipe", "`pipe` is a FIFO");
}

#[test]
fn outputs_symlink_to_a_directory_outside_is_refused() {
    let c = Case::new("stages:\n  a:\n    cmd: 'ln -s \"$OUTSIDE\" $PIPELINE_OUT/outside'\n");
    let mut cmd = limited();
    cmd.arg("-f")
        .arg(c.ws.file())
        .arg("run")
        .current_dir(c.ws.root())
        .env("OUTSIDE", c.out());
    expect(&run_bounded(cmd, TIME), 1, "`outside` is a symlink");
    c.finish();
}

#[test]
fn outputs_dangling_symlink_is_refused() {
    output_refused(
        "ln -s /nonexistent/x $PIPELINE_OUT/dangling",
        "is a symlink",
    );
}

#[test]
fn outputs_nested_symlink_is_named_with_its_path() {
    output_refused(
        "mkdir -p $PIPELINE_OUT/d/e && ln -s /etc $PIPELINE_OUT/d/e/etc",
        "`d/e/etc` is a symlink",
    );
}

#[test]
fn outputs_device_node_is_refused_or_not_creatable() {
    // mknod needs privileges; where it works the output is refused.
    let c = Case::new("stages:\n  a:\n    cmd: 'mknod $PIPELINE_OUT/null c 1 3 || exit 7'\n");
    let out = c.run(&["run"]);
    out.expect_code(1);
    let all = format!("{}{}", out.stdout, out.stderr);
    assert!(
        all.contains("is a device file") || all.contains("status 7"),
        "{}",
        out.describe()
    );
    c.finish();
}

#[test]
fn outputs_non_utf8_name_is_refused() {
    output_refused(
        "touch \"$PIPELINE_OUT/$(printf \"\\377\")\"",
        "not valid UTF-8",
    );
}

#[test]
fn outputs_reserved_names_are_refused() {
    output_refused("echo {} > $PIPELINE_OUT/MANIFEST.json", "reserved");
}

#[test]
fn outputs_removing_pipeline_out_fails_the_stage() {
    output_refused("rm -rf $PIPELINE_OUT", "listing");
}

#[test]
fn outputs_many_files_and_deep_directories_commit() {
    let c = Case::new(
        "stages:\n  a:\n    cmd: 'cd $PIPELINE_OUT && for i in $(seq 1 2000); do echo $i > f$i; done && mkdir -p $(printf \"d/%.0s\" $(seq 1 150)) && echo deep > $(printf \"d/%.0s\" $(seq 1 150))x'\n",
    );
    c.run(&["run"]).expect_code(0);
    c.finish();
}
