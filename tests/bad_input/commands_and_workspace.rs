//! Mistakes outside the file's stages: targets and `show` of what does not exist, an unwritable
//! workspace or state directory, pipeline files that are empty, not UTF-8 or missing, stage kinds
//! and outputs, GPU requests, and flag values, for every command.

use super::*;

#[test]
fn run_of_a_target_that_does_not_exist() {
    let ws = Ws::new(GOOD);
    let out = bad(&ws, &["run", "--json", "nope"]);
    says(
        &out,
        &["there is no stage or instance named `nope`", "pipeline dag"],
    );
    let out = bad(&ws, &["run", "--json", "trian"]);
    says(
        &out,
        &[
            "there is no stage or instance named `trian`",
            "did you mean `train`?",
        ],
    );
    assert!(
        !ws.path(".pipeline/runs").exists() || files_in(&ws.path(".pipeline/runs")) == 0,
        "a bad target started a run"
    );
}

fn files_in(dir: &Path) -> usize {
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}

#[test]
fn show_of_a_stage_that_does_not_exist() {
    let ws = Ws::new(GOOD);
    let out = bad(&ws, &["show", "nope", "--json"]);
    says(&out, &["`nope`"]);
    let out = bad(&ws, &["show", "reprot"]);
    says(&out, &["`reprot`", "did you mean `report`?"]);
}

#[test]
fn show_of_a_matrix_stage_asks_for_an_instance() {
    let ws = Ws::new("stages:\n  t:\n    cmd: echo\n    matrix: {x: [1, 2]}\n");
    let out = bad(&ws, &["show", "t", "--json"]);
    says(
        &out,
        &["`t` has several matrix instances", "t@x=1", "t@x=2"],
    );
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

#[test]
fn unwritable_workspace_directory() {
    let ws = Ws::new(GOOD);
    let root = ws.root().to_path_buf();
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o555)).unwrap();
    let out = ws.run(&["run", "--json"]);
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
    if is_root() {
        // root writes through the permission bits; `state_dir_that_is_a_file` covers this case.
        eprintln!("running as root: not checking the read-only workspace");
        out.assert_no_panic();
        return;
    }
    check_bad(&out);
    says(
        &out,
        &[
            "cannot write the workspace state directory",
            ".pipeline",
            "Permission denied",
        ],
    );
}

#[test]
fn state_dir_that_is_a_file() {
    // What an unwritable workspace looks like even to root: `.pipeline` cannot be a directory.
    let ws = Ws::new(GOOD);
    ws.write(".pipeline", "not a directory");
    let out = bad(&ws, &["run", "--json"]);
    says(
        &out,
        &["cannot write the workspace state directory", ".pipeline"],
    );
    // The read-only views still answer.
    let st = ws.json(&["status"], 0);
    assert_status(&st, "train", "stale");
}

#[test]
fn empty_pipeline_file() {
    let ws = Ws::new("");
    let out = bad(&ws, &["run", "--json"]);
    says(&out, &["pipeline.yaml", "the file is empty", "stages:"]);
    let ws = Ws::new("# only a comment\n");
    let out = bad(&ws, &["run", "--json"]);
    says(&out, &["pipeline.yaml", "the file is empty"]);
}

#[test]
fn pipeline_file_without_stages() {
    let ws = Ws::new("vars: {a: 1}\nstages:\n");
    let out = bad(&ws, &["run", "--json"]);
    says(&out, &["pipeline.yaml", "no stages are declared"]);
}

#[test]
fn pipeline_file_with_invalid_utf8() {
    let ws = Ws::new("");
    ws.write(
        "pipeline.yaml",
        b"stages:\n  a:\n    cmd: \"echo \xff\xfe\"\n".as_slice(),
    );
    let out = bad(&ws, &["run", "--json"]);
    says(
        &out,
        &[&format!("{}:3:", ws.file().display()), "not valid UTF-8"],
    );
}

#[test]
fn missing_pipeline_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nowhere.yaml");
    let run = |args: &[&str], cwd: &Path| {
        let o = Command::new(BIN)
            .args(args)
            .current_dir(cwd)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        Output {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    };
    let out = run(
        &["-f", missing.to_str().unwrap(), "run", "--json"],
        dir.path(),
    );
    check_bad(&out);
    says(
        &out,
        &[missing.to_str().unwrap(), "No such file", "-f FILE"],
    );
    // No -f and no ./pipeline.yaml.
    let out = run(&["status", "--json"], dir.path());
    check_bad(&out);
    says(&out, &["pipeline.yaml", "No such file"]);
}

#[test]
fn unknown_stage_kind() {
    let ws = Ws::new("stages:\n  a:\n    kind: tokenise\n");
    let out = bad(&ws, &["run", "--json"]);
    says(
        &out,
        &[
            &at(&ws, 3, 11),
            "unknown stage kind `tokenise` in stage `a`",
            "cmd",
        ],
    );
}

#[test]
fn stage_with_neither_kind_nor_cmd() {
    let ws = Ws::new("stages:\n  a:\n    desc: does nothing\n");
    let out = bad(&ws, &["run", "--json"]);
    says(
        &out,
        &[&at(&ws, 2, 3), "stage `a` has neither `kind` nor `cmd`"],
    );
}

#[test]
fn empty_cmd() {
    let ws = Ws::new("stages:\n  a:\n    cmd: \"  \"\n");
    let out = bad(&ws, &["run", "--json"]);
    says(
        &out,
        &["pipeline.yaml:2:3: ", "stage `a`", "`cmd` is empty"],
    );
}

#[test]
fn outs_outside_the_output_dir() {
    let ws = Ws::new("stages:\n  a:\n    cmd: echo\n    outs: [../escape.txt]\n");
    let out = bad(&ws, &["run", "--json"]);
    says(
        &out,
        &[
            &at(&ws, 4, 12),
            "`outs` entry `../escape.txt` must be a path inside $PIPELINE_OUT",
        ],
    );
}

#[test]
fn invalid_stage_name() {
    let ws = Ws::new("stages:\n  a.b:\n    cmd: echo\n");
    let out = bad(&ws, &["run", "--json"]);
    says(&out, &[&at(&ws, 2, 3), "invalid stage name `a.b`"]);
}

#[test]
fn stage_needing_more_gpus_than_the_run_has() {
    let ws = Ws::new("stages:\n  big:\n    cmd: echo\n    resources: {gpu: 2}\n");
    let out = bad(&ws, &["run", "--json"]);
    says(&out, &["stage `big` needs 2 GPU(s)", "--gpus"]);
}

#[test]
fn every_command_refuses_a_broken_file() {
    let ws = Ws::new("stages:\n  a:\n    cmd: echo\n    dep: [b]\n");
    for args in [
        &["run", "--dry-run", "--json"][..],
        &["status", "--json"],
        &["dag", "--json"],
        &["show", "a", "--json"],
        &["runs", "--json"],
        &["metrics", "--json"],
        &["gc", "--json"],
        &["verify", "--json"],
    ] {
        let out = bad(&ws, args);
        says(&out, &[&at(&ws, 4, 5), "unknown key `dep`"]);
    }
    assert!(
        !ws.path(".pipeline").exists(),
        "a broken file still created the state directory"
    );
}

#[test]
fn bad_flag_values_are_usage_errors() {
    let ws = Ws::new(GOOD);
    let out = ws.run(&["run", "--jobs", "many"]);
    out.expect_code(2).assert_no_panic();
    assert!(out.stderr.contains("--jobs"), "{}", out.describe());
    let out = ws.run(&["dag", "--format", "svg"]);
    out.expect_code(2).assert_no_panic();
    assert!(out.stderr.contains("svg"), "{}", out.describe());
}
