//! A workspace in use: a second run is refused while the first holds it (status and show still
//! answer), `gc` removes only what nothing references, and the shape of `show --json`.

use super::*;

/// `quick` is instant; `slow` touches `started_slow` and waits for the file `go` (at most a
/// minute, so it never hangs a broken test run).
const TWO_SPEEDS: &str = r#"
stages:
  quick:
    cmd: "echo q > $PIPELINE_OUT/q.txt"
  slow:
    cmd: "touch started_slow; i=0; while [ ! -e go ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; echo s > $PIPELINE_OUT/s.txt"
"#;

#[test]
fn second_run_is_refused_while_status_and_show_still_answer() {
    let ws = Ws::new(TWO_SPEEDS);
    let q = ws.run_ok(&["quick"]);
    assert_status(&q, "quick", "ran");

    let mut bg = Bg::spawn(&ws, &["run", "--json"]);
    wait_for(&ws.path("started_slow"), MARKER_TIMEOUT);
    let pid = bg.pid();

    let second = ws.run(&["run"]);
    second.expect_code(2).assert_no_panic();
    assert!(
        second.stderr.contains(&format!("another run (pid {pid}")),
        "{}",
        second.describe()
    );
    assert!(
        second.stderr.contains("holds this workspace"),
        "{}",
        second.describe()
    );
    // The other writers are refused the same way.
    for cmd in [["verify", "--json"], ["gc", "--json"]] {
        let out = ws.run(&cmd);
        out.expect_code(2).assert_no_panic();
        assert!(
            out.stderr.contains("holds this workspace"),
            "{}",
            out.describe()
        );
    }

    let st = ws.json(&["status"], 0);
    assert!(
        st["running"].is_object(),
        "status does not report the run in progress: {st:#}"
    );
    assert_eq!(st["running"]["pid"], pid, "{st:#}");
    assert!(st["running"]["started"].is_string(), "{st:#}");
    assert_eq!(status(&st, "quick"), "fresh", "{st:#}");
    assert_eq!(status(&st, "slow"), "stale", "{st:#}");

    let show = ws.json(&["show", "quick"], 0);
    assert_eq!(show["stage"], "quick", "{show:#}");
    assert_eq!(show["status"], "fresh", "{show:#}");
    assert!(
        same_path(
            Path::new(show["artifact"].as_str().unwrap()),
            &artifact(&q, "quick")
        ),
        "{show:#}"
    );
    let runs = ws.json(&["runs"], 0);
    assert_eq!(runs["runs"][0]["status"], "running", "{runs:#}");

    ws.write("go", "");
    let (exit, out) = bg.wait(Duration::from_secs(120));
    assert!(exit.success(), "the first run failed\n{}", out.describe());
    out.assert_no_panic();
    let v = out.json();
    assert_eq!(v["ok"], true, "{v:#}");
    assert_status(&v, "quick", "cached");
    assert_status(&v, "slow", "ran");
    assert_eq!(read(artifact(&v, "slow").join("s.txt")), "s\n");

    let st = ws.json(&["status"], 0);
    assert_eq!(st["running"], Value::Null, "{st:#}");
    // The workspace is free again.
    assert_all_cached(&ws.run_ok(&[]), &["quick", "slow"]);
}

fn with_x(x: &str) -> String {
    r#"
stages:
  a:
    cmd: "echo ${params.x} > $PIPELINE_OUT/a.txt"
    params: {x: X}
"#
    .replace("X", x)
}

#[test]
fn gc_removes_only_unreferenced_artifacts() {
    let ws = Ws::new(&with_x("1"));
    let old = artifact(&ws.run_ok(&[]), "a");
    ws.set_yaml(&with_x("2"));
    let v = ws.run_ok(&[]);
    assert_status(&v, "a", "ran");
    let new = artifact(&v, "a");
    let new_fp = entry(&v, "a")["fingerprint"].clone();
    assert!(!same_path(&old, &new));

    let dry = ws.json(&["gc", "--dry-run"], 0);
    assert_eq!(dry["dry_run"], true, "{dry:#}");
    let removed = dry["removed"].as_array().expect("removed list");
    assert_eq!(removed.len(), 1, "{dry:#}");
    assert_eq!(removed[0]["instance"], "a", "{dry:#}");
    assert!(
        same_path(Path::new(removed[0]["path"].as_str().unwrap()), &old),
        "{dry:#}"
    );
    assert!(removed[0]["bytes"].as_u64().unwrap() > 0, "{dry:#}");
    assert!(old.is_dir(), "gc --dry-run removed {}", old.display());
    assert!(new.is_dir());

    let gc = ws.json(&["gc"], 0);
    assert_eq!(gc["dry_run"], false, "{gc:#}");
    let removed = gc["removed"].as_array().expect("removed list");
    assert_eq!(removed.len(), 1, "{gc:#}");
    assert!(
        same_path(Path::new(removed[0]["path"].as_str().unwrap()), &old),
        "{gc:#}"
    );
    let freed = gc["bytes_freed"].as_u64().expect("bytes_freed");
    assert!(freed > 0, "{gc:#}");
    assert_eq!(
        freed,
        removed
            .iter()
            .map(|r| r["bytes"].as_u64().unwrap())
            .sum::<u64>(),
        "{gc:#}"
    );
    assert!(!old.exists(), "gc left {}", old.display());
    assert!(
        new.is_dir(),
        "gc removed the current artifact {}",
        new.display()
    );
    assert_eq!(read(new.join("a.txt")), "2\n");

    let v = ws.run_ok(&[]);
    assert_status(&v, "a", "cached");
    assert_eq!(entry(&v, "a")["fingerprint"], new_fp);
    let again = ws.json(&["gc"], 0);
    assert_eq!(again["removed"], json!([]), "{again:#}");
    assert_eq!(again["bytes_freed"], 0, "{again:#}");
    assert_eq!(ws.json(&["verify"], 0)["ok"], true);
}

#[test]
fn show_json_has_stage_fingerprint_status_artifact_and_metrics() {
    let ws = Ws::new(
        r#"
stages:
  score:
    cmd: "echo '{\"acc\": 0.5, \"loss\": {\"train\": 1.25}}' > $PIPELINE_OUT/metrics.json"
    params: {seed: 7}
  later:
    deps: [score]
    cmd: "echo later > $PIPELINE_OUT/later.txt"
"#,
    );
    // Before any run: stale, nothing to show yet.
    let s = ws.json(&["show", "score"], 0);
    assert_eq!(s["stage"], "score", "{s:#}");
    assert_eq!(s["status"], "stale", "{s:#}");
    assert_eq!(s["artifact"], Value::Null, "{s:#}");
    assert_eq!(s["metrics"], Value::Null, "{s:#}");

    let v = ws.run_ok(&["score"]);
    let s = ws.json(&["show", "score"], 0);
    for key in ["stage", "fingerprint", "status", "artifact", "metrics"] {
        assert!(s.get(key).is_some(), "show --json lacks `{key}`: {s:#}");
    }
    assert_eq!(s["stage"], "score");
    assert_eq!(s["fingerprint"], entry(&v, "score")["fingerprint"], "{s:#}");
    assert_eq!(s["status"], "fresh", "{s:#}");
    let a = PathBuf::from(s["artifact"].as_str().expect("artifact path"));
    assert!(a.is_absolute(), "artifact is not absolute: {}", a.display());
    assert!(same_path(&a, &artifact(&v, "score")), "{s:#}");
    assert_eq!(
        s["metrics"],
        json!({"acc": 0.5, "loss": {"train": 1.25}}),
        "{s:#}"
    );
    assert_eq!(s["params"], json!({"seed": 7}), "{s:#}");

    // A stage whose dep is fresh but which never ran itself.
    let l = ws.json(&["show", "later"], 0);
    assert_eq!(l["stage"], "later");
    assert_eq!(l["status"], "stale", "{l:#}");
    assert_eq!(l["artifact"], Value::Null, "{l:#}");
    assert!(l["fingerprint"].is_string(), "{l:#}");
    assert_eq!(l["deps"], json!(["score"]), "{l:#}");
}
