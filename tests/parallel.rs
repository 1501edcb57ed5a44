//! Scheduling: independent stages overlap within --jobs, GPU stages hold a GPU token, and
//! matrix stages expand into instances.

mod common;

use std::path::Path;

use common::*;
use serde_json::{Value, json};

/// A stage body that records when it started and ended (nanoseconds since the epoch).
const TIMED: &str = "date +%s%N > $PIPELINE_OUT/start; sleep 0.6; date +%s%N > $PIPELINE_OUT/end";

fn two_timed_stages(extra: &str) -> String {
    format!(
        "stages:\n  one:\n    cmd: \"echo one > $PIPELINE_OUT/name; {TIMED}\"\n{extra}  two:\n    cmd: \"echo two > $PIPELINE_OUT/name; {TIMED}\"\n{extra}"
    )
}

/// (start, end) in nanoseconds, read from the artifact.
fn span(v: &Value, instance: &str) -> (u128, u128) {
    let dir = artifact(v, instance);
    let num = |f: &str| -> u128 {
        read(dir.join(f))
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("{instance}/{f}: {e}"))
    };
    (num("start"), num("end"))
}

fn overlap(a: (u128, u128), b: (u128, u128)) -> bool {
    a.0 < b.1 && b.0 < a.1
}

#[test]
fn independent_stages_overlap_with_two_jobs() {
    let ws = Ws::new(&two_timed_stages(""));
    let v = ws.run_ok(&["--jobs", "2"]);
    let (a, b) = (span(&v, "one"), span(&v, "two"));
    assert!(
        overlap(a, b),
        "stages did not run in parallel: one={a:?} two={b:?}"
    );
}

#[test]
fn one_job_runs_stages_one_at_a_time() {
    let ws = Ws::new(&two_timed_stages(""));
    let v = ws.run_ok(&["--jobs", "1"]);
    let (a, b) = (span(&v, "one"), span(&v, "two"));
    assert!(
        !overlap(a, b),
        "stages overlapped with --jobs 1: one={a:?} two={b:?}"
    );
}

#[test]
fn gpu_stages_never_overlap() {
    let ws = Ws::new(&two_timed_stages("    resources: {gpu: 1}\n"));
    let v = ws.run_ok(&["--jobs", "4"]);
    let (a, b) = (span(&v, "one"), span(&v, "two"));
    assert!(
        !overlap(a, b),
        "two gpu:1 stages overlapped with one GPU token: one={a:?} two={b:?}"
    );
}

#[test]
fn gpu_stages_overlap_with_two_gpu_tokens() {
    let ws = Ws::new(&two_timed_stages("    resources: {gpu: 1}\n"));
    let v = ws.run_ok(&["--jobs", "4", "--gpus", "2"]);
    let (a, b) = (span(&v, "one"), span(&v, "two"));
    assert!(
        overlap(a, b),
        "gpu stages did not overlap with --gpus 2: one={a:?} two={b:?}"
    );
}

#[test]
fn a_dependent_starts_after_its_dep_finished() {
    let yaml = format!(
        "stages:\n  first:\n    cmd: \"{TIMED}\"\n  second:\n    cmd: \"{TIMED}; cat $PIPELINE_DEP_FIRST/end > /dev/null\"\n    deps: [first]\n"
    );
    let ws = Ws::new(&yaml);
    let v = ws.run_ok(&["--jobs", "4"]);
    let (a, b) = (span(&v, "first"), span(&v, "second"));
    assert!(
        a.1 <= b.0,
        "second started before first ended: first={a:?} second={b:?}"
    );
}

const MATRIX: &str = r#"
stages:
  train:
    matrix: {share_type: [all, ffn]}
    params: {lr: 0.1}
    cmd: |
      printf '%s' "$PIPELINE_PARAMS" > "$PIPELINE_OUT/params.json"
      printf '%s' "$PIPELINE_STAGE" > "$PIPELINE_OUT/stage.txt"
      echo "model-${params.share_type}" > "$PIPELINE_OUT/model.txt"
  eval:
    deps: [train]
    cmd: |
      cat "$PIPELINE_DEP_TRAIN_SHARE_TYPE_${params.share_type}" 2>/dev/null
      env | grep '^PIPELINE_DEP_' | sort > "$PIPELINE_OUT/deps.txt"
      printf '%s' "$PIPELINE_PARAMS" > "$PIPELINE_OUT/params.json"
  report:
    deps: [eval]
    aggregate: true
    cmd: |
      env | grep '^PIPELINE_DEP_' | sort > "$PIPELINE_OUT/deps.txt"
      printf '%s' "$PIPELINE_PARAMS" > "$PIPELINE_OUT/params.json"
"#;

/// `NAME=VALUE` lines of an `env` dump.
fn env_lines(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn env_var(text: &str, name: &str) -> Option<String> {
    env_lines(text)
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
}

#[test]
fn matrix_expands_into_instances_and_dependents_expand_with_it() {
    let ws = Ws::new(MATRIX);
    let v = ws.run_ok(&[]);
    let mut names = instances(&v);
    names.sort();
    assert_eq!(
        names,
        [
            "eval@share_type=all",
            "eval@share_type=ffn",
            "report",
            "train@share_type=all",
            "train@share_type=ffn"
        ]
    );
    for i in [
        "train@share_type=all",
        "train@share_type=ffn",
        "eval@share_type=all",
        "eval@share_type=ffn",
        "report",
    ] {
        assert_status(&v, i, "ran");
    }
    assert_eq!(entry(&v, "train@share_type=all")["stage"], "train");
    assert_eq!(entry(&v, "eval@share_type=ffn")["stage"], "eval");
    assert_eq!(v["counts"]["ran"], 5);

    // The matrix value is a param, and the instance name is PIPELINE_STAGE.
    for st in ["all", "ffn"] {
        let inst = format!("train@share_type={st}");
        let dir = artifact(&v, &inst);
        let params: Value = serde_json::from_str(&read(dir.join("params.json"))).unwrap();
        assert_eq!(params, json!({"lr": 0.1, "share_type": st}));
        assert_eq!(read(dir.join("stage.txt")), inst);
        assert_eq!(read(dir.join("model.txt")), format!("model-{st}\n"));
    }

    // Each eval instance depends on the train instance with the same matrix value.
    for st in ["all", "ffn"] {
        let deps = read(artifact(&v, &format!("eval@share_type={st}")).join("deps.txt"));
        let var = format!("PIPELINE_DEP_TRAIN_SHARE_TYPE_{}", st.to_uppercase());
        let dir = env_var(&deps, &var)
            .unwrap_or_else(|| panic!("eval@share_type={st} lacks {var}: {deps}"));
        assert!(
            same_path(
                Path::new(&dir),
                &artifact(&v, &format!("train@share_type={st}"))
            ),
            "{var}={dir}"
        );
        let other = if st == "all" { "FFN" } else { "ALL" };
        assert!(
            env_var(&deps, &format!("PIPELINE_DEP_TRAIN_SHARE_TYPE_{other}")).is_none(),
            "eval@share_type={st} also got the other train instance: {deps}"
        );
        let params: Value = serde_json::from_str(&read(
            artifact(&v, &format!("eval@share_type={st}")).join("params.json"),
        ))
        .unwrap();
        assert_eq!(params["share_type"], st);
    }

    // The aggregate stage does not expand and gets every eval instance as a dep.
    let deps = read(artifact(&v, "report").join("deps.txt"));
    for st in ["all", "ffn"] {
        let var = format!("PIPELINE_DEP_EVAL_SHARE_TYPE_{}", st.to_uppercase());
        let dir = env_var(&deps, &var).unwrap_or_else(|| panic!("report lacks {var}: {deps}"));
        assert!(
            same_path(
                Path::new(&dir),
                &artifact(&v, &format!("eval@share_type={st}"))
            ),
            "{var}={dir}"
        );
    }
    let params: Value =
        serde_json::from_str(&read(artifact(&v, "report").join("params.json"))).unwrap();
    assert!(
        params.get("share_type").is_none(),
        "aggregate stage got a matrix param: {params}"
    );
}

#[test]
fn dag_lists_matrix_instances_and_their_deps() {
    let ws = Ws::new(MATRIX);
    let dag = ws.json(&["dag"], 0);
    let report = dag["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["instance"] == "report")
        .expect("report in dag");
    let mut deps: Vec<&str> = report["deps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_str().unwrap())
        .collect();
    deps.sort();
    assert_eq!(deps, ["eval@share_type=all", "eval@share_type=ffn"]);
    let eval = dag["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["instance"] == "eval@share_type=ffn")
        .unwrap();
    assert_eq!(eval["deps"], json!(["train@share_type=ffn"]));
    assert_eq!(eval["stage"], "eval");
    assert_eq!(eval["kind"], "cmd");
}

#[test]
fn an_instance_name_is_a_target() {
    let ws = Ws::new(MATRIX);
    let v = ws.run_ok(&["eval@share_type=ffn"]);
    let mut names = instances(&v);
    names.sort();
    assert_eq!(names, ["eval@share_type=ffn", "train@share_type=ffn"]);
    // A stage name as target selects all its instances.
    let v = ws.run_ok(&["train"]);
    let mut names = instances(&v);
    names.sort();
    assert_eq!(names, ["train@share_type=all", "train@share_type=ffn"]);
    assert_status(&v, "train@share_type=ffn", "cached");
    assert_status(&v, "train@share_type=all", "ran");
}

#[test]
fn setting_a_matrix_axis_narrows_the_instances() {
    let ws = Ws::new(MATRIX);
    let v = ws.run_ok(&["train", "--set", "train.share_type=[ffn]"]);
    assert_eq!(instances(&v), ["train@share_type=ffn"]);
}
