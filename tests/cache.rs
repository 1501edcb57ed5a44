//! Caching and the `run` contract: what re-runs and why, targets, --force, --set, --dry-run,
//! the environment a `cmd` stage sees, metrics, and failures.

mod common;

use std::time::Duration;

use common::*;
use serde_json::json;

/// a → b, and c on its own. `a` writes its param x, `b` copies a's output and adds its param y.
fn chain(x: &str, y: &str) -> String {
    r#"
stages:
  a:
    cmd: "echo ${params.x} > $PIPELINE_OUT/a.txt"
    params: {x: X}
  b:
    cmd: "cat $PIPELINE_DEP_A/a.txt > $PIPELINE_OUT/b.txt; echo ${params.y} >> $PIPELINE_OUT/b.txt"
    deps: [a]
    params: {y: Y}
  c:
    cmd: "echo c > $PIPELINE_OUT/c.txt"
"#
    .replace("X", x)
    .replace("Y", y)
}

#[test]
fn first_run_runs_everything_second_run_is_all_cached() {
    let ws = Ws::new(&chain("1", "1"));
    let v = ws.run_ok(&[]);
    for s in ["a", "b", "c"] {
        assert_status(&v, s, "ran");
        assert_reason(&v, s, "never ran");
    }
    assert_eq!(
        v["counts"],
        json!({"ran": 3, "cached": 0, "failed": 0, "skipped": 0})
    );
    assert_eq!(v["dry_run"], false);
    assert_eq!(read(artifact(&v, "b").join("b.txt")), "1\n1\n");

    let v = ws.run_ok(&[]);
    for s in ["a", "b", "c"] {
        assert_status(&v, s, "cached");
    }
    assert_eq!(v["counts"]["ran"], 0);
    assert_eq!(v["counts"]["cached"], 3);
}

#[test]
fn changing_one_param_reruns_only_that_stage_and_affected_dependents() {
    let ws = Ws::new(&chain("1", "1"));
    ws.run_ok(&[]);

    // A param of the leaf: only the leaf re-runs.
    ws.set_yaml(&chain("1", "2"));
    let v = ws.run_ok(&[]);
    assert_status(&v, "a", "cached");
    assert_status(&v, "b", "ran");
    assert_reason(&v, "b", "param y changed 1 → 2");
    assert_status(&v, "c", "cached");
    assert_eq!(read(artifact(&v, "b").join("b.txt")), "1\n2\n");

    // A param of the root whose output changes: root and its dependent re-run, c does not.
    ws.set_yaml(&chain("5", "2"));
    let v = ws.run_ok(&[]);
    assert_status(&v, "a", "ran");
    assert_reason(&v, "a", "param x changed 1 → 5");
    assert_status(&v, "b", "ran");
    assert_reason(&v, "b", "dep a produced new output");
    assert_status(&v, "c", "cached");
    assert_eq!(read(artifact(&v, "b").join("b.txt")), "5\n2\n");
}

#[test]
fn params_added_and_removed_are_reasons() {
    let yaml = |params: &str| {
        r#"
stages:
  a:
    cmd: "echo a > $PIPELINE_OUT/a.txt"
    params: PARAMS
"#
        .replace("PARAMS", params)
    };
    let ws = Ws::new(&yaml("{x: 1}"));
    ws.run_ok(&[]);
    ws.set_yaml(&yaml("{x: 1, extra: 3}"));
    let v = ws.run_ok(&[]);
    assert_status(&v, "a", "ran");
    assert_reason(&v, "a", "param extra added");
    ws.set_yaml(&yaml("{extra: 3}"));
    let v = ws.run_ok(&[]);
    assert_status(&v, "a", "ran");
    assert_reason(&v, "a", "param x removed");
}

#[test]
fn early_cutoff_identical_output_keeps_dependent_cached() {
    let yaml = |x: &str| {
        r#"
stages:
  a:
    cmd: "echo constant > $PIPELINE_OUT/a.txt"
    params: {x: X}
  b:
    cmd: "cat $PIPELINE_DEP_A/a.txt > $PIPELINE_OUT/b.txt"
    deps: [a]
"#
        .replace("X", x)
    };
    let ws = Ws::new(&yaml("1"));
    ws.run_ok(&[]);
    ws.set_yaml(&yaml("2"));
    let v = ws.run_ok(&[]);
    assert_status(&v, "a", "ran");
    assert_reason(&v, "a", "param x changed");
    assert_status(&v, "b", "cached");
}

#[test]
fn reverting_a_param_is_a_cache_hit() {
    let ws = Ws::new(&chain("1", "1"));
    let first = ws.run_ok(&[]);
    ws.set_yaml(&chain("2", "1"));
    let second = ws.run_ok(&[]);
    assert_status(&second, "a", "ran");
    assert_ne!(
        entry(&first, "a")["fingerprint"],
        entry(&second, "a")["fingerprint"]
    );

    ws.set_yaml(&chain("1", "1"));
    let third = ws.run_ok(&[]);
    assert_status(&third, "a", "cached");
    assert_status(&third, "b", "cached");
    assert_status(&third, "c", "cached");
    assert_eq!(
        entry(&first, "a")["fingerprint"],
        entry(&third, "a")["fingerprint"]
    );
    assert_eq!(read(artifact(&third, "b").join("b.txt")), "1\n1\n");
}

const WITH_INPUT: &str = r#"
stages:
  up:
    cmd: "tr a-z A-Z < data/in.txt > $PIPELINE_OUT/up.txt"
    inputs: [data/in.txt]
  down:
    cmd: "cat $PIPELINE_DEP_UP/up.txt > $PIPELINE_OUT/down.txt"
    deps: [up]
"#;

#[test]
fn touching_an_input_without_changing_bytes_reruns_nothing() {
    let ws = Ws::new(WITH_INPUT);
    ws.write("data/in.txt", "hello\n");
    ws.run_ok(&[]);
    std::thread::sleep(Duration::from_millis(1100));
    ws.write("data/in.txt", "hello\n");
    let v = ws.run_ok(&[]);
    assert_status(&v, "up", "cached");
    assert_status(&v, "down", "cached");
}

#[test]
fn changing_input_bytes_reruns_with_input_reason() {
    let ws = Ws::new(WITH_INPUT);
    ws.write("data/in.txt", "hello\n");
    ws.run_ok(&[]);
    ws.write("data/in.txt", "world\n");
    let v = ws.run_ok(&[]);
    assert_status(&v, "up", "ran");
    let rs = reasons(&v, "up");
    assert!(
        rs.iter()
            .any(|r| r.starts_with("input ") && r.contains("data/in.txt changed")),
        "expected an `input data/in.txt changed` reason: {rs:?}"
    );
    assert_status(&v, "down", "ran");
    assert_eq!(read(artifact(&v, "down").join("down.txt")), "WORLD\n");
}

#[test]
fn glob_inputs_report_added_files() {
    let yaml = r#"
stages:
  cat:
    cmd: "cat data/*.txt > $PIPELINE_OUT/all.txt"
    inputs: ["data/*.txt"]
"#;
    let ws = Ws::new(yaml);
    ws.write("data/a.txt", "a\n");
    ws.run_ok(&[]);
    ws.write("data/b.txt", "b\n");
    let v = ws.run_ok(&[]);
    assert_status(&v, "cat", "ran");
    let rs = reasons(&v, "cat");
    assert!(
        rs.iter()
            .any(|r| r.starts_with("input ") && r.contains("data/b.txt added")),
        "{rs:?}"
    );
}

#[test]
fn force_reruns_the_target_only() {
    let ws = Ws::new(&chain("1", "1"));
    ws.run_ok(&[]);
    let v = ws.run_ok(&["b", "--force"]);
    assert_status(&v, "b", "ran");
    assert_reason(&v, "b", "forced");
    assert_status(&v, "a", "cached");
    assert!(!has_entry(&v, "c"), "c is not an ancestor of b: {v:#}");

    // No target: every stage is forced.
    let v = ws.run_ok(&["--force"]);
    for s in ["a", "b", "c"] {
        assert_status(&v, s, "ran");
        assert_reason(&v, s, "forced");
    }
}

#[test]
fn set_overrides_a_var_and_a_stage_param() {
    let yaml = r#"
vars: {greeting: hello}
stages:
  a:
    cmd: "echo ${vars.greeting} ${params.n} > $PIPELINE_OUT/a.txt"
    params: {n: 1}
"#;
    let ws = Ws::new(yaml);
    let v = ws.run_ok(&[]);
    assert_eq!(read(artifact(&v, "a").join("a.txt")), "hello 1\n");

    let v = ws.run_ok(&["--set", "greeting=bye"]);
    assert_status(&v, "a", "ran");
    assert_eq!(read(artifact(&v, "a").join("a.txt")), "bye 1\n");

    let v = ws.run_ok(&["--set", "a.n=7"]);
    assert_status(&v, "a", "ran");
    assert_reason(&v, "a", "param n changed 1 → 7");
    assert_eq!(read(artifact(&v, "a").join("a.txt")), "hello 7\n");

    // Global flags may also come before the subcommand.
    let out = ws
        .command(&[])
        .args(["--set", "a.n=7", "run", "--json"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_status(&v, "a", "cached");

    // Without the overrides the original is a cache hit again.
    let v = ws.run_ok(&[]);
    assert_status(&v, "a", "cached");
    assert_eq!(read(artifact(&v, "a").join("a.txt")), "hello 1\n");
}

#[test]
fn set_value_is_parsed_as_yaml_scalar() {
    let yaml = r#"
stages:
  a:
    cmd: "printf '%s' \"$PIPELINE_PARAMS\" > $PIPELINE_OUT/params.json"
    params: {lr: 0.1, name: x}
"#;
    let ws = Ws::new(yaml);
    let v = ws.run_ok(&["--set", "a.lr=2e-4", "--set", "a.name=ffn"]);
    let params: serde_json::Value =
        serde_json::from_str(&read(artifact(&v, "a").join("params.json"))).unwrap();
    assert_eq!(params, json!({"lr": 0.0002, "name": "ffn"}));
}

#[test]
fn target_runs_only_it_and_its_ancestors() {
    let ws = Ws::new(&chain("1", "1"));
    let v = ws.run_ok(&["b"]);
    let mut names = instances(&v);
    names.sort();
    assert_eq!(names, ["a", "b"]);
    assert_status(&v, "a", "ran");
    assert_status(&v, "b", "ran");

    let st = ws.json(&["status"], 0);
    assert_eq!(status(&st, "a"), "fresh");
    assert_eq!(status(&st, "b"), "fresh");
    assert_eq!(status(&st, "c"), "stale");
    assert_reason(&st, "c", "never ran");
    assert!(st["running"].is_null(), "{st:#}");
}

#[test]
fn dry_run_runs_nothing() {
    let yaml = r#"
stages:
  a:
    cmd: "touch ran_a; echo a > $PIPELINE_OUT/a.txt"
    params: {x: 1}
  b:
    cmd: "touch ran_b; cat $PIPELINE_DEP_A/a.txt > $PIPELINE_OUT/b.txt"
    deps: [a]
  c:
    cmd: "touch ran_c; echo c > $PIPELINE_OUT/c.txt"
"#;
    let ws = Ws::new(yaml);
    let v = ws.run_ok(&["--dry-run"]);
    assert_eq!(v["dry_run"], true);
    for s in ["a", "b", "c"] {
        assert_status(&v, s, "would-run");
        assert_reason(&v, s, "never ran");
        assert!(entry(&v, s)["artifact"].is_null(), "{v:#}");
        assert!(
            !ws.path(&format!("ran_{s}")).exists(),
            "--dry-run ran stage {s}"
        );
    }
    let artifacts = ws.path(".pipeline/artifacts");
    let made = artifacts.is_dir() && std::fs::read_dir(&artifacts).unwrap().next().is_some();
    assert!(
        !made,
        "--dry-run created artifacts under {}",
        artifacts.display()
    );
    assert_eq!(status(&ws.json(&["status"], 0), "a"), "stale");

    // After a real run, a dry run after a change names what would run and why.
    ws.run_ok(&[]);
    std::fs::remove_file(ws.path("ran_a")).unwrap();
    ws.set_yaml(&yaml.replace("{x: 1}", "{x: 2}"));
    let v = ws.run_ok(&["-n"]);
    assert_status(&v, "a", "would-run");
    assert_reason(&v, "a", "param x changed 1 → 2");
    assert_status(&v, "b", "would-run");
    assert_reason(&v, "b", "dep a will run");
    assert_status(&v, "c", "fresh");
    assert!(!ws.path("ran_a").exists(), "--dry-run ran stage a");
}

#[test]
fn cmd_stage_sees_the_contract_environment() {
    let yaml = r#"
vars: {greeting: hi}
stages:
  prep-data:
    cmd: "echo payload > $PIPELINE_OUT/a.txt"
  b:
    deps: [prep-data]
    params: {lr: 0.5, name: hello}
    outs: [params.json, stage.txt]
    cmd: |
      printf '%s' "$PIPELINE_PARAMS" > "$PIPELINE_OUT/params.json"
      printf '%s' "$PIPELINE_STAGE" > "$PIPELINE_OUT/stage.txt"
      cat "$PIPELINE_DEP_PREP_DATA/a.txt" > "$PIPELINE_OUT/dep.txt"
      printf '%s' "$PIPELINE_DEP_PREP_DATA" > "$PIPELINE_OUT/dep_path.txt"
      echo '${params.lr} ${vars.greeting} ${params.name}' > "$PIPELINE_OUT/subst.txt"
      pwd > "$PIPELINE_OUT/pwd.txt"
      if [ -d "$PIPELINE_WORK" ]; then echo yes; else echo no; fi > "$PIPELINE_OUT/work.txt"
      echo to-stdout
"#;
    let ws = Ws::new(yaml);
    let v = ws.run_ok(&[]);
    let out = artifact(&v, "b");

    let params: serde_json::Value = serde_json::from_str(&read(out.join("params.json"))).unwrap();
    assert_eq!(params, json!({"lr": 0.5, "name": "hello"}));
    assert_eq!(read(out.join("stage.txt")), "b");
    assert_eq!(read(out.join("dep.txt")), "payload\n");
    assert!(same_path(
        std::path::Path::new(&read(out.join("dep_path.txt"))),
        &artifact(&v, "prep-data")
    ));
    assert_eq!(read(out.join("subst.txt")), "0.5 hi hello\n");
    assert!(same_path(
        std::path::Path::new(read(out.join("pwd.txt")).trim()),
        ws.root()
    ));
    assert_eq!(read(out.join("work.txt")), "yes\n");

    // The artifact layout: .pipeline/artifacts/<instance>/<fingerprint>/ with the manifest and logs.
    let fp = entry(&v, "b")["fingerprint"].as_str().unwrap();
    assert!(
        same_path(&out, &ws.path(".pipeline/artifacts/b").join(fp)),
        "{}",
        out.display()
    );
    assert!(out.join("MANIFEST.json").is_file());
    assert!(read(out.join(".log/stdout.txt")).contains("to-stdout"));
    assert!(out.join(".log/stderr.txt").is_file());

    // `show` points at the same artifact and knows the params and deps.
    let show = ws.json(&["show", "b"], 0);
    assert_eq!(show["stage"], "b");
    assert_eq!(show["kind"], "cmd");
    assert_eq!(show["fingerprint"], fp);
    assert!(same_path(
        std::path::Path::new(show["artifact"].as_str().unwrap()),
        &out
    ));
    assert_eq!(show["params"], json!({"lr": 0.5, "name": "hello"}));
    assert_eq!(show["deps"], json!(["prep-data"]));
    let outputs: Vec<&str> = show["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["path"].as_str().unwrap())
        .collect();
    assert!(
        outputs.iter().any(|p| p.ends_with("params.json")),
        "{show:#}"
    );
    assert_eq!(
        read(std::path::Path::new(show["artifact"].as_str().unwrap()).join("stage.txt")),
        "b"
    );
}

#[test]
fn metrics_json_appears_in_metrics_and_show() {
    let yaml = |acc: &str| {
        r#"
stages:
  m:
    cmd: "echo '{\"acc\": ACC}' > $PIPELINE_OUT/metrics.json"
    params: {acc: ACC}
"#
        .replace("ACC", acc)
    };
    let ws = Ws::new(&yaml("0.9"));
    let v = ws.run_ok(&[]);
    let fp1 = entry(&v, "m")["fingerprint"].clone();

    let mv = ws.json(&["metrics"], 0);
    let rows = mv["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{mv:#}");
    assert_eq!(rows[0]["instance"], "m");
    assert_eq!(rows[0]["stage"], "m");
    assert_eq!(rows[0]["metrics"], json!({"acc": 0.9}));
    assert_eq!(rows[0]["current"], true);
    assert_eq!(rows[0]["fingerprint"], fp1);
    assert_eq!(rows[0]["run_id"], v["run_id"]);

    let show = ws.json(&["show", "m"], 0);
    assert_eq!(show["metrics"], json!({"acc": 0.9}));

    // A second configuration adds a row; the latest is the current one.
    ws.set_yaml(&yaml("0.8"));
    ws.run_ok(&[]);
    let mv = ws.json(&["metrics"], 0);
    let rows = mv["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{mv:#}");
    let current: Vec<_> = rows.iter().filter(|r| r["current"] == true).collect();
    assert_eq!(current.len(), 1, "{mv:#}");
    assert_eq!(current[0]["metrics"], json!({"acc": 0.8}));
    let latest = ws.json(&["metrics", "m", "--latest"], 0);
    assert_eq!(latest["rows"].as_array().unwrap().len(), 1, "{latest:#}");
    assert_eq!(latest["rows"][0]["metrics"], json!({"acc": 0.8}));
    assert_eq!(ws.json(&["show", "m"], 0)["metrics"], json!({"acc": 0.8}));
}

const FAILING: &str = r#"
stages:
  bad:
    cmd: "echo partial > $PIPELINE_OUT/partial.txt; echo boom-message >&2; exit 3"
  child:
    cmd: "cat $PIPELINE_DEP_BAD/partial.txt > $PIPELINE_OUT/c.txt"
    deps: [bad]
  indep:
    cmd: "echo ok > $PIPELINE_OUT/ok.txt"
"#;

#[test]
fn failing_stage_skips_dependents_but_not_independent_branches() {
    let ws = Ws::new(FAILING);
    let v = ws.json(&["run"], 1);
    assert_eq!(v["ok"], false);
    assert_status(&v, "bad", "failed");
    assert_status(&v, "child", "skipped");
    assert_status(&v, "indep", "ran");
    assert_eq!(
        v["counts"],
        json!({"ran": 1, "cached": 0, "failed": 1, "skipped": 1})
    );

    let bad = entry(&v, "bad");
    assert!(bad["error"].is_string(), "a failed stage says why: {v:#}");
    // Partial output is discarded: no artifact.
    assert!(bad["artifact"].is_null(), "{v:#}");
    let art = ws.path(".pipeline/artifacts/bad");
    let kept = art.is_dir() && std::fs::read_dir(&art).unwrap().next().is_some();
    assert!(
        !kept,
        "a failed stage left an artifact under {}",
        art.display()
    );
    assert!(entry(&v, "child")["artifact"].is_null());
    // Its log is kept.
    let log = std::path::PathBuf::from(bad["log"].as_str().expect("failed stage has a log path"));
    assert!(log.exists(), "log path {} does not exist", log.display());
    assert!(
        read_all(&log).contains("boom-message"),
        "log at {} lacks the stderr text",
        log.display()
    );

    // Running again re-tries the failure; the independent branch is cached.
    let v = ws.json(&["run"], 1);
    assert_status(&v, "bad", "failed");
    assert_status(&v, "child", "skipped");
    assert_status(&v, "indep", "cached");
}

#[test]
fn fail_fast_is_accepted_and_still_reports_the_failure() {
    let ws = Ws::new(FAILING);
    let v = ws.json(&["run", "--fail-fast", "--jobs", "1"], 1);
    assert_eq!(v["ok"], false);
    assert_status(&v, "bad", "failed");
    assert_status(&v, "child", "skipped");
    assert_eq!(v["counts"]["failed"], 1);
}

#[test]
fn declared_outs_that_are_missing_fail_the_stage() {
    let yaml = r#"
stages:
  a:
    cmd: "echo x > $PIPELINE_OUT/other.txt"
    outs: [wanted.txt]
"#;
    let ws = Ws::new(yaml);
    let v = ws.json(&["run"], 1);
    assert_status(&v, "a", "failed");
    assert!(entry(&v, "a")["artifact"].is_null());
}

#[test]
fn runs_lists_history_newest_first() {
    let ws = Ws::new(&chain("1", "1"));
    let first = ws.run_ok(&[]);
    let second = ws.run_ok(&["b"]);
    let runs = ws.json(&["runs"], 0);
    let list = runs["runs"].as_array().unwrap();
    assert_eq!(list.len(), 2, "{runs:#}");
    assert_eq!(list[0]["run_id"], second["run_id"]);
    assert_eq!(list[1]["run_id"], first["run_id"]);
    assert_eq!(list[1]["counts"]["ran"], 3);
    assert_eq!(list[0]["counts"]["cached"], 2);
    let limited = ws.json(&["runs", "--limit", "1"], 0);
    assert_eq!(limited["runs"].as_array().unwrap().len(), 1);
}
