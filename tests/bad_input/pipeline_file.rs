//! Mistakes inside `pipeline.yaml` and in `--set`: syntax, unknown keys (with the one "did you
//! mean"), wrong types, deps and cycles, vars and params, inputs that match nothing.

use super::*;

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
