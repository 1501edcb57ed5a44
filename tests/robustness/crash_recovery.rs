//! The store after a crash: `kill -9` in the middle of a stage (the rerun recovers, `gc` clears
//! the leftovers), a deleted or corrupted sled index (rebuilt from the manifests, nothing
//! reruns), a corrupted artifact (quarantined by `verify`, remade by `run`).

use super::*;

/// `a` is quick. `b` (dep a) writes a partial file and a checkpoint into $PIPELINE_WORK,
/// touches `started_b` and sleeps 30 s, unless the file `quick` exists in the workspace;
/// then it writes its real output, noting whether it found the checkpoint of the killed
/// attempt. The `quick` switch is outside the fingerprint, so both attempts are the same
/// fingerprint.
const KILLABLE: &str = r#"
stages:
  a:
    cmd: "echo a > $PIPELINE_OUT/a.txt"
  b:
    deps: [a]
    cmd: |
      if [ -e "$PIPELINE_WORK/ckpt" ]; then resumed=yes; else resumed=no; fi
      if [ ! -e quick ]; then
        echo partial > "$PIPELINE_OUT/partial.txt"
        echo checkpoint > "$PIPELINE_WORK/ckpt"
        touch started_b
        sleep 30
      fi
      cat "$PIPELINE_DEP_A/a.txt" > "$PIPELINE_OUT/b.txt"
      echo "resumed=$resumed" >> "$PIPELINE_OUT/b.txt"
"#;

#[test]
fn kill_9_mid_stage_then_rerun_recovers() {
    let ws = Ws::new(KILLABLE);
    let mut bg = Bg::spawn(&ws, &["run", "--json"]);
    wait_for(&ws.path("started_b"), MARKER_TIMEOUT);
    let pid = bg.pid();
    bg.kill_group();
    let (exit, killed) = bg.wait(Duration::from_secs(30));
    assert_eq!(
        exit.signal(),
        Some(9),
        "the run was not killed by SIGKILL\n{}",
        killed.describe()
    );

    // The store is readable and says what is missing.
    let st = ws.json(&["status"], 0);
    assert_eq!(
        st["running"],
        Value::Null,
        "a dead run is reported as running: {st:#}"
    );
    assert_eq!(status(&st, "a"), "fresh", "{st:#}");
    assert_eq!(status(&st, "b"), "stale", "{st:#}");
    assert_reason(&st, "b", "never ran");
    let b_fp = entry(&st, "b")["fingerprint"].clone();
    assert!(
        b_fp.is_string(),
        "b's fingerprint should be known once a is fresh: {st:#}"
    );

    // Nothing of the killed attempt counts as an artifact.
    let artifacts = ws.path(".pipeline/artifacts");
    let files = files_under(&artifacts);
    assert!(
        !files
            .iter()
            .any(|f| f.starts_with("b/") || f.ends_with("partial.txt")),
        "the killed attempt left something in the artifact store: {files:?}"
    );

    // `runs` marks the killed run as interrupted.
    let runs = ws.json(&["runs"], 0);
    let list = runs["runs"].as_array().expect("runs list");
    assert_eq!(list.len(), 1, "{runs:#}");
    assert_eq!(list[0]["status"], "interrupted", "{runs:#}");
    assert_eq!(list[0]["pid"], pid, "{runs:#}");

    // Re-run (quickly this time): a is cached, b runs to completion.
    ws.write("quick", "");
    let v = ws.run_ok(&[]);
    assert_status(&v, "a", "cached");
    assert_status(&v, "b", "ran");
    assert_reason(&v, "b", "never ran");
    assert_eq!(
        entry(&v, "b")["fingerprint"],
        b_fp,
        "same inputs, same fingerprint: {v:#}"
    );
    let b = artifact(&v, "b");
    // The re-run of the same fingerprint found the checkpoint the killed attempt left in
    // $PIPELINE_WORK, and its output holds only what the complete attempt wrote.
    assert_eq!(read(b.join("b.txt")), "a\nresumed=yes\n");
    let outputs: Vec<String> = files_under(&b)
        .into_iter()
        .filter(|f| !f.starts_with(".log/"))
        .collect();
    assert_eq!(
        outputs,
        ["MANIFEST.json", "b.txt"],
        "b's artifact holds more than its output"
    );
    let tmp_left = files_under(&ws.path(".pipeline/tmp"));
    assert!(
        tmp_left.is_empty(),
        "leftovers of the killed run remain in .pipeline/tmp: {tmp_left:?}"
    );

    let ver = ws.json(&["verify"], 0);
    assert_eq!(ver["ok"], true, "{ver:#}");
    assert_eq!(ver["checked"], 2, "{ver:#}");
    assert_eq!(ver["corrupt"], json!([]), "{ver:#}");

    let v = ws.run_ok(&[]);
    assert_all_cached(&v, &["a", "b"]);

    let runs = ws.json(&["runs"], 0);
    let statuses: Vec<&str> = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    assert_eq!(
        statuses,
        ["ok", "ok", "interrupted"],
        "newest first: {runs:#}"
    );
}

/// `gc` says (crates/engine/src/maintain.rs) that besides unreferenced artifacts it removes
/// "stale work areas, leftovers of killed runs and the quarantine". A killed run leaves its
/// half-written output in `.pipeline/tmp/`; only the next `run` clears it today.
#[test]
fn gc_removes_the_leftovers_of_a_killed_run() {
    let ws = Ws::new(KILLABLE);
    let mut bg = Bg::spawn(&ws, &["run", "--json"]);
    wait_for(&ws.path("started_b"), MARKER_TIMEOUT);
    bg.kill_group();
    bg.wait(Duration::from_secs(30));
    let tmp = ws.path(".pipeline/tmp");
    let before = files_under(&tmp);
    assert!(
        before.iter().any(|f| f.ends_with("partial.txt")),
        "the killed attempt was expected to leave its partial output in .pipeline/tmp: {before:?}"
    );

    let gc = ws.json(&["gc"], 0);
    let left = files_under(&tmp);
    assert!(
        left.is_empty(),
        "gc left the killed run's temporary files: {left:?}\n{gc:#}"
    );
    assert!(gc["bytes_freed"].as_u64().unwrap() > 0, "{gc:#}");

    // The work area of b's current fingerprint is not a leftover: the re-run resumes from it.
    ws.write("quick", "");
    let v = ws.run_ok(&[]);
    assert_status(&v, "a", "cached");
    assert_eq!(read(artifact(&v, "b").join("b.txt")), "a\nresumed=yes\n");
}

const CHAIN: &str = r#"
stages:
  a:
    cmd: "echo hello > $PIPELINE_OUT/a.txt"
  b:
    deps: [a]
    cmd: "cat $PIPELINE_DEP_A/a.txt > $PIPELINE_OUT/b.txt; echo b >> $PIPELINE_OUT/b.txt"
"#;

#[test]
fn deleted_index_is_rebuilt_from_the_manifests() {
    let ws = Ws::new(CHAIN);
    let first = ws.run_ok(&[]);
    let index = ws.path(".pipeline/index");
    assert!(index.is_dir(), "no sled index at {}", index.display());

    std::fs::remove_dir_all(&index).unwrap();
    // Read-only commands cope without it.
    let st = ws.json(&["status"], 0);
    assert_eq!(status(&st, "a"), "fresh", "{st:#}");
    assert_eq!(status(&st, "b"), "fresh", "{st:#}");

    let out = ws.run(&["run", "--json"]);
    out.expect_code(0).assert_no_panic();
    let v = out.json();
    assert_all_cached(&v, &["a", "b"]);
    assert_eq!(
        entry(&v, "b")["fingerprint"],
        entry(&first, "b")["fingerprint"]
    );
    assert!(
        out.stderr.contains("rebuil"),
        "the rebuild of the index is not mentioned\n{}",
        out.describe()
    );
    assert!(index.is_dir(), "the index was not recreated");

    // Text mode says it too, and nothing is lost.
    std::fs::remove_dir_all(&index).unwrap();
    let out = ws.run(&["run"]);
    out.expect_code(0).assert_no_panic();
    assert!(
        out.stderr.contains("rebuil"),
        "the rebuild of the index is not mentioned\n{}",
        out.describe()
    );
    assert!(out.stdout.contains("0 ran, 2 cached"), "{}", out.describe());

    // Once rebuilt, the index is used as is.
    let out = ws.run(&["run", "--json"]);
    out.expect_code(0).assert_no_panic();
    assert_all_cached(&out.json(), &["a", "b"]);
    assert!(
        !out.stderr.contains("rebuil"),
        "the index was rebuilt twice\n{}",
        out.describe()
    );
}

/// Overwrites every file below `dir` with bytes that are no valid sled file.
fn scribble_over(dir: &Path) {
    let files = files_under(dir);
    assert!(!files.is_empty(), "nothing to corrupt in {}", dir.display());
    for f in files {
        let garbage: Vec<u8> = (0..4096u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        std::fs::write(dir.join(&f), garbage).unwrap();
    }
}

#[test]
fn corrupted_index_is_rebuilt_and_nothing_reruns() {
    let ws = Ws::new(CHAIN);
    ws.run_ok(&[]);
    let index = ws.path(".pipeline/index");

    scribble_over(&index);
    let st = ws.json(&["status"], 0);
    assert_eq!(status(&st, "a"), "fresh", "{st:#}");
    assert_eq!(status(&st, "b"), "fresh", "{st:#}");
    let out = ws.run(&["run", "--json"]);
    out.expect_code(0).assert_no_panic();
    assert_all_cached(&out.json(), &["a", "b"]);
    assert!(
        out.stderr.contains("rebuil"),
        "the rebuild of the index is not mentioned\n{}",
        out.describe()
    );

    // Only the main data file garbled (the config intact).
    let db = index.join("db");
    assert!(db.is_file(), "sled keeps its data in {}", db.display());
    std::fs::write(&db, b"garbage, not a sled log").unwrap();
    let out = ws.run(&["run", "--json"]);
    out.expect_code(0).assert_no_panic();
    assert_all_cached(&out.json(), &["a", "b"]);

    let v = ws.run_ok(&[]);
    assert_all_cached(&v, &["a", "b"]);
    let ver = ws.json(&["verify"], 0);
    assert_eq!(ver["ok"], true, "{ver:#}");
}

#[test]
fn corrupted_artifact_is_quarantined_by_verify_and_remade_by_run() {
    let ws = Ws::new(CHAIN);
    let first = ws.run_ok(&[]);
    let a_dir = artifact(&first, "a");
    let a_fp = entry(&first, "a")["fingerprint"]
        .as_str()
        .unwrap()
        .to_string();
    // Same size, other bytes: only re-hashing can tell.
    std::fs::write(a_dir.join("a.txt"), "HELLO\n").unwrap();

    let out = ws.run(&["verify", "--json"]);
    out.expect_code(1).assert_no_panic();
    let ver = out.json();
    assert_eq!(ver["ok"], false, "{ver:#}");
    assert_eq!(ver["checked"], 2, "{ver:#}");
    let corrupt = ver["corrupt"].as_array().expect("corrupt list");
    assert_eq!(corrupt.len(), 1, "only a was touched: {ver:#}");
    assert_eq!(corrupt[0]["instance"], "a", "{ver:#}");
    assert_eq!(corrupt[0]["fingerprint"], a_fp.as_str(), "{ver:#}");
    let problems: Vec<&str> = corrupt[0]["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert!(
        problems.iter().any(|p| p.contains("a.txt")),
        "the problem does not name a.txt: {problems:?}"
    );
    let q = PathBuf::from(
        corrupt[0]["quarantined_to"]
            .as_str()
            .expect("quarantined_to"),
    );
    assert!(
        q.is_absolute(),
        "quarantined_to is not absolute: {}",
        q.display()
    );
    assert!(q.is_dir(), "quarantined_to does not exist: {}", q.display());
    assert_eq!(
        read(q.join("a.txt")),
        "HELLO\n",
        "the quarantine holds the corrupt bytes"
    );
    assert!(
        !a_dir.exists(),
        "the corrupt artifact is still in place: {}",
        a_dir.display()
    );

    let st = ws.json(&["status"], 0);
    assert_eq!(status(&st, "a"), "stale", "{st:#}");
    assert_reason(&st, "a", "artifact missing or corrupt");
    assert_eq!(status(&st, "b"), "stale", "{st:#}");
    assert_reason(&st, "b", "dep a will run");

    let v = ws.run_ok(&[]);
    assert_status(&v, "a", "ran");
    assert_reason(&v, "a", "artifact missing or corrupt");
    assert_eq!(entry(&v, "a")["fingerprint"], a_fp.as_str());
    assert_eq!(read(artifact(&v, "a").join("a.txt")), "hello\n");
    // a made the same bytes again: b is served from the cache (early cutoff).
    assert_status(&v, "b", "cached");
    assert_eq!(read(artifact(&v, "b").join("b.txt")), "hello\nb\n");

    let ver = ws.json(&["verify"], 0);
    assert_eq!(ver["ok"], true, "{ver:#}");
    assert_eq!(ver["corrupt"], json!([]), "{ver:#}");
    assert_all_cached(&ws.run_ok(&[]), &["a", "b"]);
}
