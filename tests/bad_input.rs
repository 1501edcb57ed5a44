//! Bad input: every mistake in `pipeline.yaml`, a flag, a target or the workspace exits with
//! code 2, does not panic, prints nothing on stdout (not even with `--json`) and says on
//! stderr what is wrong and where: the file, `LINE:COL`, and the key, stage or var.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};

use common::*;

/// Runs `args`, asserts the bad-input contract and returns the output.
fn bad(ws: &Ws, args: &[&str]) -> Output {
    let out = ws.run(args);
    check_bad(&out);
    out
}

fn check_bad(out: &Output) {
    out.expect_code(2);
    out.assert_no_panic();
    assert!(
        out.stderr.starts_with("error: "),
        "stderr does not start with `error: `\n{}",
        out.describe()
    );
    assert!(
        out.stdout.trim().is_empty(),
        "something was printed on stdout\n{}",
        out.describe()
    );
}

/// Asserts that stderr holds every one of `needles`.
fn says(out: &Output, needles: &[&str]) {
    for n in needles {
        assert!(
            out.stderr.contains(n),
            "stderr lacks {n:?}\n{}",
            out.describe()
        );
    }
}

/// `<path of pipeline.yaml>:LINE:COL: `, how an error in the file starts.
fn at(ws: &Ws, line: usize, col: usize) -> String {
    format!("{}:{line}:{col}: ", ws.file().display())
}

/// A pipeline that is fine, for the flag and target mistakes.
const GOOD: &str = r#"
vars: {nap: 0}
stages:
  train:
    cmd: "echo ${params.lr} > $PIPELINE_OUT/lr.txt"
    params: {lr: 1}
  report:
    cmd: "cat $PIPELINE_DEP_TRAIN/lr.txt > $PIPELINE_OUT/r.txt"
    deps: [train]
"#;

#[test]
fn yaml_syntax_error_has_line_and_column() {
    let ws = Ws::new("stages:\n  a:\n    cmd: echo: x: y\n  b:\n    cmd: echo\n");
    let out = bad(&ws, &["run", "--json"]);
    says(
        &out,
        &[
            &at(&ws, 3, 14),
            "YAML syntax error",
            "mapping values are not allowed",
        ],
    );
    // The offending line is quoted under the message.
    says(&out, &["3 |     cmd: echo: x: y"]);
}

#[test]
fn yaml_unclosed_flow_list_is_a_syntax_error() {
    let ws = Ws::new("stages:\n  a:\n    cmd: echo\n    deps: [a, b\n");
    let out = bad(&ws, &["run", "--json"]);
    says(&out, &["YAML syntax error"]);
    // Some line is named (yaml-rust2 reports the end of the file, not the open `[`).
    let prefix = format!("error: {}:", ws.file().display());
    let rest = out
        .stderr
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("no file position\n{}", out.describe()));
    assert!(
        rest.starts_with(|c: char| c.is_ascii_digit()),
        "no line number\n{}",
        out.describe()
    );
}

#[test]
fn tab_indentation_is_a_syntax_error() {
    let ws = Ws::new("stages:\n\ta:\n    cmd: echo\n");
    let out = bad(&ws, &["run"]);
    says(&out, &[&at(&ws, 2, 2), "YAML syntax error", "tabs"]);
}

#[test]
fn unknown_top_level_key_suggests_stages() {
    let ws = Ws::new("stage:\n  a:\n    cmd: echo\n");
    let out = bad(&ws, &["run", "--json"]);
    says(
        &out,
        &[
            &at(&ws, 1, 1),
            "unknown top-level key `stage`",
            "did you mean `stages`?",
        ],
    );
}

#[test]
fn unknown_stage_key_suggests_deps() {
    let ws = Ws::new("stages:\n  b:\n    cmd: echo\n  a:\n    cmd: echo\n    dep: [b]\n");
    let out = bad(&ws, &["run", "--json"]);
    says(
        &out,
        &[
            &at(&ws, 6, 5),
            "unknown key `dep` in stage `a`",
            "did you mean `deps`?",
        ],
    );
}

#[test]
fn deps_of_the_wrong_type() {
    let ws = Ws::new("stages:\n  a:\n    cmd: echo\n    deps: 5\n");
    let out = bad(&ws, &["run", "--json"]);
    says(
        &out,
        &[
            &at(&ws, 4, 11),
            "`deps` of stage `a`",
            "must be a list of strings, found a number",
        ],
    );
}

#[test]
fn params_of_the_wrong_type() {
    let ws = Ws::new("stages:\n  a:\n    cmd: echo\n    params: [1, 2]\n");
    let out = bad(&ws, &["run", "--json"]);
    says(
        &out,
        &[
            &at(&ws, 4, 13),
            "`params` of stage `a`",
            "must be a mapping, found a list",
        ],
    );
}

#[test]
fn matrix_axis_that_is_not_a_list() {
    let ws = Ws::new("stages:\n  a:\n    cmd: echo\n    matrix: {lr: 0.1}\n");
    let out = bad(&ws, &["run", "--json"]);
    says(
        &out,
        &[
            &at(&ws, 4, 18),
            "matrix axis `lr` of stage `a`",
            "must be a list of values",
            "lr: [a, b]",
        ],
    );
}

#[test]
fn a_stage_that_is_not_a_mapping() {
    let ws = Ws::new("stages:\n  a: 5\n");
    let out = bad(&ws, &["run", "--json"]);
    says(
        &out,
        &[
            &at(&ws, 2, 6),
            "stage `a` must be a mapping, found a number",
        ],
    );
}

#[test]
fn unknown_dep_suggests_the_closest_stage() {
    let ws =
        Ws::new("stages:\n  train:\n    cmd: echo\n  eval:\n    cmd: echo\n    deps: [trian]\n");
    let out = bad(&ws, &["run", "--json"]);
    says(
        &out,
        &[
            &at(&ws, 6, 12),
            "stage `eval` depends on `trian`, which is not a stage",
            "did you mean `train`?",
        ],
    );
}

#[test]
fn a_cycle_is_printed_with_arrows() {
    let ws = Ws::new(
        "stages:\n  a:\n    cmd: echo\n    deps: [c]\n  b:\n    cmd: echo\n    deps: [a]\n  c:\n    cmd: echo\n    deps: [b]\n",
    );
    let out = bad(&ws, &["run", "--json"]);
    says(&out, &["pipeline.yaml:", "cycle"]);
    // Whichever stage the cycle is printed from, it goes round all three and back.
    let line = out.stderr.lines().next().unwrap();
    let cycle = line.rsplit(": ").next().unwrap();
    let names: Vec<&str> = cycle.split(" → ").collect();
    assert_eq!(
        names.len(),
        4,
        "not a printed cycle of three stages: {line}"
    );
    assert_eq!(
        names.first(),
        names.last(),
        "the cycle does not close: {line}"
    );
    for s in ["a", "b", "c"] {
        assert!(
            names.contains(&s),
            "stage {s} missing from the cycle: {line}"
        );
    }
}

#[test]
fn a_stage_depending_on_itself() {
    let ws = Ws::new("stages:\n  a:\n    cmd: echo\n    deps: [a]\n");
    let out = bad(&ws, &["run", "--json"]);
    says(&out, &[&at(&ws, 4, 12), "stage `a` depends on itself"]);
}

#[test]
fn duplicate_stage_name_names_both_lines() {
    let ws = Ws::new("stages:\n  a:\n    cmd: echo 1\n  a:\n    cmd: echo 2\n");
    let out = bad(&ws, &["run", "--json"]);
    says(
        &out,
        &[
            &at(&ws, 4, 3),
            "duplicate stage `a`",
            "first defined on line 2",
        ],
    );
}

#[test]
fn undefined_var_is_named_with_a_suggestion() {
    let ws = Ws::new("vars: {data: d}\nstages:\n  a:\n    cmd: cat ${vars.dta}/x\n");
    let out = bad(&ws, &["run", "--json"]);
    says(
        &out,
        &[
            &at(&ws, 4, 10),
            "undefined var `dta`",
            "${vars.dta}",
            "did you mean `data`?",
        ],
    );
}

#[test]
fn undefined_var_without_any_vars() {
    let ws = Ws::new("stages:\n  a:\n    cmd: echo ${vars.nope}\n");
    let out = bad(&ws, &["run", "--json"]);
    says(&out, &[&at(&ws, 3, 10), "undefined var `nope`"]);
}

#[test]
fn undefined_param_is_named() {
    let ws = Ws::new("stages:\n  a:\n    cmd: echo ${params.nope}\n    params: {nop: 1}\n");
    let out = bad(&ws, &["run", "--json"]);
    says(
        &out,
        &[
            &at(&ws, 3, 10),
            "undefined param `nope`",
            "did you mean `nop`?",
        ],
    );
}

#[test]
fn params_reference_outside_cmd() {
    let ws = Ws::new("stages:\n  a:\n    cmd: echo\n    inputs: [\"${params.x}\"]\n");
    let out = bad(&ws, &["run", "--json"]);
    says(
        &out,
        &[&at(&ws, 4, 14), "`${params.x}` cannot be used here"],
    );
}

#[test]
fn vars_referring_to_each_other_in_a_loop() {
    let ws = Ws::new(
        "vars: {a: \"${vars.b}\", b: \"${vars.a}\"}\nstages:\n  s:\n    cmd: echo ${vars.a}\n",
    );
    let out = bad(&ws, &["run", "--json"]);
    says(
        &out,
        &[
            "pipeline.yaml:1:",
            "vars refer to each other in a loop",
            " → ",
        ],
    );
}

#[test]
fn glob_input_matching_nothing() {
    let ws = Ws::new("stages:\n  a:\n    cmd: echo\n    inputs: [\"data/*.csv\"]\n");
    ws.write("data/readme.txt", "not a csv");
    let out = bad(&ws, &["run", "--json"]);
    says(
        &out,
        &[
            &at(&ws, 4, 14),
            "input pattern `data/*.csv` matches no file",
        ],
    );
}

#[test]
fn missing_input_file() {
    let ws = Ws::new("stages:\n  a:\n    cmd: echo\n    inputs: [data/in.txt]\n");
    let out = bad(&ws, &["run", "--json"]);
    says(
        &out,
        &[&at(&ws, 4, 14), "input `data/in.txt` does not exist"],
    );
    // Also for the read-only views.
    let out = bad(&ws, &["status", "--json"]);
    says(&out, &["input `data/in.txt` does not exist"]);
}

#[test]
fn set_of_an_unknown_var() {
    let ws = Ws::new(GOOD);
    let out = bad(&ws, &["run", "--json", "--set", "nope=1"]);
    says(
        &out,
        &["--set nope", "there is no var named `nope`", "STAGE.PARAM"],
    );
    let out = bad(&ws, &["run", "--set", "nop=1"]);
    says(
        &out,
        &["there is no var named `nop`", "did you mean `nap`?"],
    );
}

#[test]
fn set_of_an_unknown_param_of_a_stage() {
    let ws = Ws::new(GOOD);
    let out = bad(&ws, &["run", "--json", "--set", "train.nope=1"]);
    says(
        &out,
        &[
            "--set train.nope",
            "stage `train` has no parameter `nope`",
            "lr",
        ],
    );
}

#[test]
fn set_of_a_param_of_an_unknown_stage() {
    let ws = Ws::new(GOOD);
    let out = bad(&ws, &["run", "--json", "--set", "nostage.x=1"]);
    says(
        &out,
        &["--set nostage.x", "there is no stage named `nostage`"],
    );
    let out = bad(&ws, &["status", "--set", "trian.lr=1"]);
    says(
        &out,
        &["there is no stage named `trian`", "did you mean `train`?"],
    );
}

#[test]
fn set_without_a_value() {
    let ws = Ws::new(GOOD);
    let out = bad(&ws, &["run", "--json", "--set", "nap"]);
    says(&out, &["--set nap", "expected NAME=VALUE"]);
}

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
