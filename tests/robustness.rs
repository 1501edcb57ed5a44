//! Robustness of the store: `kill -9` in the middle of a stage, a deleted or corrupted sled
//! index, corrupted artifacts (`verify`), a second run while one holds the workspace, `gc`,
//! and the shape of `show --json`.

mod common;

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

/// Long enough for a loaded 2-core CI machine to start the binary and reach the marker.
const MARKER_TIMEOUT: Duration = Duration::from_secs(60);

/// A `pipeline` process started in its own process group, killed (with its whole group) if
/// the test panics before it is waited for, so no stage outlives a failed test.
struct Bg {
    child: Option<Child>,
}

impl Bg {
    fn spawn(ws: &Ws, args: &[&str]) -> Bg {
        let child = ws
            .command(args)
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting the pipeline binary in the background");
        Bg { child: Some(child) }
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().expect("not waited for yet").id()
    }

    /// `kill -9 -PGID`: the binary and every stage command it started.
    fn kill_group(&self) {
        let st = kill_9_group(self.pid()).expect("running kill");
        assert!(st.success(), "kill -9 -{} failed", self.pid());
    }

    /// Waits for the process (at most `timeout`) and returns what it printed.
    fn wait(&mut self, timeout: Duration) -> (std::process::ExitStatus, Output) {
        let mut child = self.child.take().expect("waited for twice");
        let start = Instant::now();
        while child.try_wait().expect("polling the child").is_none() {
            if start.elapsed() > timeout {
                let _ = kill_9_group(child.id());
                let _ = child.wait();
                panic!("the background `pipeline` did not finish within {timeout:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = child
            .wait_with_output()
            .expect("collecting the child's output");
        let status = out.status;
        let output = Output {
            code: status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        };
        (status, output)
    }
}

/// `kill -s KILL -- -PGID`. (procps' `kill -9 -PGID`, without `--`, takes the group for an
/// option, kills nothing and still exits 0.)
fn kill_9_group(pgid: u32) -> std::io::Result<std::process::ExitStatus> {
    Command::new("kill")
        .args(["-s", "KILL", "--", &format!("-{pgid}")])
        .status()
}

impl Drop for Bg {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = kill_9_group(child.id());
            let _ = child.wait();
        }
    }
}

/// Every file below `dir` (relative paths), sorted; empty if `dir` does not exist.
fn files_under(dir: &Path) -> Vec<String> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(base, &p, out);
            } else {
                out.push(p.strip_prefix(base).unwrap().to_string_lossy().into_owned());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

fn assert_all_cached(v: &Value, names: &[&str]) {
    for n in names {
        assert_status(v, n, "cached");
    }
    assert_eq!(v["counts"]["ran"], 0, "{v:#}");
    assert_eq!(v["counts"]["cached"], names.len(), "{v:#}");
}

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
