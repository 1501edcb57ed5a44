//! Hostile input and faults, end to end through the binary (issue 20; SECURITY.md states what
//! is guaranteed). Every case runs `pipeline` under an address-space limit (`ulimit -v`) and a
//! wall-clock limit, and asserts the exit code and the message; every case then checks that
//! `pipeline verify` finds the store clean and that a directory outside the workspace (which
//! some cases link into the store or into outputs) is byte for byte as it was.
//!
//! Cases are grouped by the class of issue 20 they belong to (yaml, store, process, outputs,
//! plan, costs, model, small) and by what else a hostile user tries (cli, inputs, names).

mod common;
#[path = "hostile/data.rs"]
mod data;
#[path = "hostile/fuzz.rs"]
mod fuzz;
#[path = "hostile/reads.rs"]
mod reads;
#[path = "hostile/records.rs"]
mod records;
#[path = "hostile/remote_trust.rs"]
mod remote_trust;
#[path = "hostile/store_trust.rs"]
mod store_trust;
#[path = "hostile/terminal.rs"]
mod terminal;

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{BIN, Output, Ws};
use serde_json::Value;

/// Address space one run of the binary may map (KiB). The binary reserves ~1 GiB of address
/// space for thread stacks and allocator arenas on a 2-core machine; the "billion laughs" file
/// needed 21 GB before the YAML limits.
const MEM_KIB: u64 = 3 << 20;
/// Wall-clock limit of one run (a debug build on 2 cores); cases assert tighter bounds where
/// the point is time.
const TIME: Duration = Duration::from_secs(60);
/// Anything the binary prints for one refusal stays below this (a 200 KB line is not echoed).
const MAX_OUTPUT: usize = 64 << 10;

/// A file tree as (relative path → kind and bytes), without following links.
type Tree = BTreeMap<PathBuf, (String, Vec<u8>)>;

fn snapshot(root: &Path) -> Tree {
    fn go(root: &Path, dir: &Path, out: &mut Tree) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let path = e.path();
            let rel = path.strip_prefix(root).unwrap().to_path_buf();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&path).unwrap();
                out.insert(
                    rel,
                    ("link".into(), target.to_string_lossy().as_bytes().to_vec()),
                );
            } else if meta.is_dir() {
                out.insert(rel, ("dir".into(), Vec::new()));
                go(root, &path, out);
            } else {
                out.insert(
                    rel,
                    ("file".into(), std::fs::read(&path).unwrap_or_default()),
                );
            }
        }
    }
    let mut out = Tree::new();
    go(root, root, &mut out);
    out
}

/// One hostile case: a workspace, and a directory outside it that must not change.
struct Case {
    ws: Ws,
    outside: tempfile::TempDir,
    before: Tree,
}

impl Case {
    fn new(yaml: &str) -> Case {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("keep.txt"), "not the pipeline's\n").unwrap();
        std::fs::create_dir_all(outside.path().join("sub/deeper")).unwrap();
        std::fs::write(outside.path().join("sub/deeper/data.bin"), [7u8; 4096]).unwrap();
        let before = snapshot(outside.path());
        let ws = Ws::new(yaml);
        // `verify` needs a pipeline file that loads; this one is no `*.yaml`, so `gc` does not
        // take it for a second pipeline of the workspace.
        ws.write(".hostile-verify", "stages:\n  noop:\n    cmd: 'true'\n");
        Case {
            ws,
            outside,
            before,
        }
    }

    fn out(&self) -> &Path {
        self.outside.path()
    }

    /// `pipeline -f pipeline.yaml ARGS` under the limits.
    fn run(&self, args: &[&str]) -> Output {
        self.run_file(&self.ws.file(), args)
    }

    fn run_file(&self, file: &Path, args: &[&str]) -> Output {
        let mut cmd = limited();
        cmd.arg("-f")
            .arg(file)
            .args(args)
            .current_dir(self.ws.root());
        run_bounded(cmd, TIME)
    }

    /// Runs, and asserts the exit code, that `needle` is in what it printed, and that what it
    /// printed is bounded.
    fn expect(&self, args: &[&str], code: i32, needle: &str) -> Output {
        let out = self.run(args);
        expect(&out, code, needle);
        out
    }

    /// The store is clean and nothing outside the workspace changed.
    fn finish(self) {
        let verify = self.run_file(&self.ws.path(".hostile-verify"), &["verify", "--json"]);
        verify.expect_code(0);
        assert_eq!(verify.json()["ok"], true, "{}", verify.describe());
        assert!(
            snapshot(self.out()) == self.before,
            "a file outside the workspace changed"
        );
    }
}

/// The binary under `ulimit -v`.
fn limited() -> Command {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!("ulimit -v {MEM_KIB} && exec \"$0\" \"$@\""))
        .arg(BIN)
        .env_remove("RUST_LOG")
        .env("RUST_BACKTRACE", "0");
    cmd
}

/// Runs `cmd`, killing it after `limit`, and collects what it printed.
fn run_bounded(mut cmd: Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting the binary");
    let mut so = child.stdout.take().unwrap();
    let mut se = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = so.read_to_end(&mut b);
        b
    });
    let t_err = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = se.read_to_end(&mut b);
        b
    });
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            panic!("the binary ran longer than {limit:?}: {cmd:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let out = Output {
        code: status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&t_out.join().unwrap()).into_owned(),
        stderr: String::from_utf8_lossy(&t_err.join().unwrap()).into_owned(),
    };
    out.assert_no_panic();
    assert!(
        !out.stderr.contains("memory allocation") && !out.stderr.contains("out of memory"),
        "ran out of memory under ulimit -v\n{}",
        out.describe()
    );
    out
}

fn expect(out: &Output, code: i32, needle: &str) {
    out.expect_code(code);
    let all = format!("{}{}", out.stdout, out.stderr);
    assert!(all.contains(needle), "no {needle:?} in\n{}", out.describe());
    assert!(
        all.len() < MAX_OUTPUT,
        "printed {} bytes for one refusal",
        all.len()
    );
}

/// A pipeline file that must be refused at plan time with exit 2 and `needle`.
fn refused(yaml: &str, needle: &str) {
    let c = Case::new(yaml);
    c.expect(&["status"], 2, needle);
    c.finish();
}

fn stage_json(v: &Value, instance: &str) -> Value {
    v["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["instance"] == instance)
        .cloned()
        .unwrap_or_else(|| panic!("no {instance} in {v:#}"))
}

// ---------------------------------------------------------------------------------------------
// Class 1: bounded memory for any pipeline.yaml.

#[test]
fn yaml_billion_laughs_is_refused_in_bounded_memory() {
    let mut text = String::from("vars:\n  a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for i in 1..10 {
        let prev = format!("*a{}", i - 1);
        text.push_str(&format!("  a{i}: &a{i} [{}]\n", vec![prev; 9].join(", ")));
    }
    text.push_str("stages:\n  a:\n    cmd: 'true'\n");
    let c = Case::new(&text);
    let t0 = Instant::now();
    for cmd in ["status", "dag", "run"] {
        c.expect(&[cmd], 2, "billion laughs");
    }
    assert!(t0.elapsed() < Duration::from_secs(20));
    c.expect(&["status"], 2, "pipeline.yaml:");
    c.finish();
}

#[test]
fn yaml_aliases_used_normally_still_work() {
    let c = Case::new(
        "vars:\n  sizes: &s [1, 2]\nstages:\n  a:\n    cmd: 'true'\n    matrix: {n: *s}\n",
    );
    let v = c.ws.json(&["status"], 0);
    assert_eq!(v["stages"].as_array().unwrap().len(), 2);
    c.finish();
}

#[test]
fn yaml_nested_anchors_share_rather_than_copy() {
    // 60 anchored levels around one list of 10^6 scalars (2 MB of text): each level once kept
    // its own copy of the list (60 × ~80 MB, over the address-space limit); shared, it is one.
    let levels = 60;
    let open: String = (0..levels).map(|i| format!("&l{i} [")).collect();
    let text = format!(
        "vars:\n  x: {open}{}{}\n  y: *l{}\nstages:\n  a:\n    cmd: 'true'\n",
        vec!["a"; 1_000_000].join(","),
        "]".repeat(levels),
        levels - 1
    );
    let c = Case::new(&text);
    c.run(&["status"]).expect_code(0);
    c.finish();
}

#[test]
fn yaml_deep_flow_nesting_is_refused() {
    let deep = format!("{}1{}", "[".repeat(50_000), "]".repeat(50_000));
    refused(
        &format!("vars:\n  x: {deep}\nstages:\n  a:\n    cmd: 'true'\n"),
        "deeper than 64",
    );
}

#[test]
fn yaml_deep_block_nesting_is_refused() {
    let mut text = String::from("vars:\n");
    for i in 0..80 {
        text.push_str(&format!("{}k{i}:\n", "  ".repeat(i + 1)));
    }
    text.push_str(&format!(
        "{}v\nstages:\n  a:\n    cmd: 'true'\n",
        "  ".repeat(81)
    ));
    refused(&text, "deeper than 64");
}

#[test]
fn yaml_alias_to_unknown_anchor_is_refused() {
    refused("stages:\n  a:\n    cmd: *nothing\n", "pipeline.yaml:3");
}

#[test]
fn yaml_merge_keys_are_supported() {
    let c = Case::new(
        "stages:\n  a: &base\n    cmd: 'echo merged > $PIPELINE_OUT/o.txt'\n    outs: [o.txt]\n  b:\n    <<: *base\n    cmd: 'echo own > $PIPELINE_OUT/o.txt'\n  c:\n    <<: *base\n",
    );
    let out = c.run(&["run", "--json"]);
    out.expect_code(0);
    let v = out.json();
    let read = |name: &str| {
        let dir = stage_json(&v, name)["artifact"]
            .as_str()
            .unwrap()
            .to_string();
        std::fs::read_to_string(Path::new(&dir).join("o.txt")).unwrap()
    };
    assert_eq!(read("a"), "merged\n");
    assert_eq!(read("b"), "own\n");
    assert_eq!(read("c"), "merged\n");
    c.finish();
}

#[test]
fn yaml_merge_key_of_a_scalar_is_refused() {
    refused("stages:\n  a:\n    <<: 5\n    cmd: 'true'\n", "merge key");
}

#[test]
fn yaml_file_over_the_size_limit_is_refused() {
    let mut text = String::from("stages:\n  a:\n    cmd: 'true'\n# ");
    text.push_str(&"x".repeat(5 << 20));
    refused(&text, "larger than 4 MiB");
}

#[test]
fn yaml_dev_zero_as_the_pipeline_file_is_refused() {
    let c = Case::new("stages:\n  a:\n    cmd: 'true'\n");
    let out = c.run_file(Path::new("/dev/zero"), &["status"]);
    expect(&out, 2, "larger than 4 MiB");
    c.finish();
}

#[test]
fn yaml_not_utf8_is_refused() {
    let c = Case::new("stages:\n  a:\n    cmd: 'true'\n");
    c.ws.write("pipeline.yaml", b"stages:\n  a:\n    cmd: '\xff\xfe'\n");
    c.expect(&["status"], 2, "not valid UTF-8");
    c.finish();
}

#[test]
fn yaml_error_on_a_200kb_line_is_not_echoed_whole() {
    let line = format!("{{a: [{}]}}", "x, ".repeat(70_000));
    let c = Case::new(&format!("stages: {line}\n  b: 1\n"));
    let out = c.run(&["status"]);
    out.expect_code(2);
    assert!(out.stderr.len() < 4096, "{} bytes", out.stderr.len());
    c.finish();
}

#[test]
fn yaml_huge_unknown_key_is_not_echoed_whole() {
    let key = "k".repeat(200_000);
    // An explicit key (`? KEY`): YAML refuses implicit keys over 1,024 characters itself.
    let c = Case::new(&format!(
        "stages:\n  a:\n    cmd: 'true'\n    ? {key}\n    : 1\n"
    ));
    let out = c.run(&["status"]);
    out.expect_code(2);
    assert!(out.stderr.len() < 4096, "{} bytes", out.stderr.len());
    assert!(
        out.stderr.contains("characters left out"),
        "{}",
        out.describe()
    );
    c.finish();
}

#[test]
fn yaml_set_flag_with_deep_nesting_is_taken_as_text() {
    // What YAML cannot read in `--set` is a string (a path with `: ` in it, say); the limits
    // keep that reading bounded.
    let c = Case::new("vars: {x: 1}\nstages:\n  a:\n    cmd: 'true'\n");
    let deep = format!("x={}1{}", "[".repeat(10_000), "]".repeat(10_000));
    c.run(&["--set", &deep, "status"]).expect_code(0);
    c.finish();
}

#[test]
fn yaml_shapes_that_are_not_a_pipeline_are_refused() {
    for (yaml, needle) in [
        ("", "empty"),
        ("# only a comment\n", "empty"),
        ("- a\n- b\n", "pipeline.yaml"),
        ("just a string\n", "pipeline.yaml"),
        ("stages:\n\ta:\n", "pipeline.yaml"),
        ("stages:\n  a:\n    cmd: 'unclosed\n", "pipeline.yaml"),
        ("stages: null\n", "pipeline.yaml"),
        (
            "stages:\n  a:\n    cmd: x\n  a:\n    cmd: y\n",
            "pipeline.yaml:4",
        ),
        ("stages:\n  a: [1, 2]\n", "pipeline.yaml:2"),
        ("stages:\n  a:\n    cmd: x\n    deps: [a]\n", "cycle"),
        (
            "stages:\n  a:\n    cmd: x\n    deps: [nope]\n",
            "pipeline.yaml:4",
        ),
        ("stages:\n  a:\n    cmd: '${vars.nope}'\n", "undefined var"),
        (
            "stages:\n  a:\n    cmd: x\n    outs: [../escape]\n",
            "inside $PIPELINE_OUT",
        ),
        (
            "stages:\n  a:\n    cmd: x\n    outs: [/etc/passwd]\n",
            "inside $PIPELINE_OUT",
        ),
        (
            "stages:\n  a:\n    cmd: x\n    resources: {gpu: -1}\n",
            "pipeline.yaml:4",
        ),
        (
            "stages:\n  a:\n    cmd: x\n    matrix: {n: 5}\n",
            "pipeline.yaml:4",
        ),
        (
            "stages:\n  a:\n    cmd: x\n    matrix: {n: []}\n",
            "pipeline.yaml:4",
        ),
    ] {
        refused(yaml, needle);
    }
}

// ---------------------------------------------------------------------------------------------
// Class 2: no file outside the store is deleted; gc keeps what any pipeline file uses.

const ONE_STAGE: &str = "stages:\n  a:\n    cmd: 'echo a > $PIPELINE_OUT/a.txt'\n";

#[test]
fn store_tmp_symlinked_to_scratch_keeps_foreign_files() {
    let c = Case::new(ONE_STAGE);
    std::fs::create_dir_all(c.ws.path(".pipeline")).unwrap();
    std::os::unix::fs::symlink(c.out(), c.ws.path(".pipeline/tmp")).unwrap();
    c.run(&["run"]).expect_code(0);
    c.run(&["run"]).expect_code(0);
    let gc = c.run(&["gc"]);
    expect(&gc, 0, "left");
    assert!(gc.stdout.contains("keep.txt"), "{}", gc.describe());
    c.finish();
}

#[test]
fn store_work_symlinked_to_scratch_keeps_foreign_files() {
    let c = Case::new(ONE_STAGE);
    std::fs::create_dir_all(c.ws.path(".pipeline")).unwrap();
    std::os::unix::fs::symlink(c.out(), c.ws.path(".pipeline/work")).unwrap();
    c.run(&["run"]).expect_code(0);
    c.run(&["gc"]).expect_code(0);
    c.finish();
}

#[test]
fn store_symlink_planted_in_artifacts_is_left_alone() {
    let c = Case::new(ONE_STAGE);
    c.run(&["run"]).expect_code(0);
    std::fs::create_dir_all(c.ws.path(".pipeline/artifacts/evil")).unwrap();
    std::os::unix::fs::symlink(c.out(), c.ws.path(".pipeline/artifacts/evil/0123")).unwrap();
    let gc = c.run(&["gc"]);
    expect(&gc, 0, "symlink");
    // verify lists the planted link as left alone (the store never makes a symlink) and
    // leaves it, and its target, where they are.
    let v = c.run_file(&c.ws.path(".hostile-verify"), &["verify"]);
    expect(&v, 0, "left alone");
    assert!(std::fs::symlink_metadata(c.ws.path(".pipeline/artifacts/evil/0123")).is_ok());
    c.run(&["gc"]).expect_code(0);
    c.finish();
}

#[test]
fn store_foreign_directory_in_work_is_left_alone() {
    let c = Case::new(ONE_STAGE);
    c.run(&["run"]).expect_code(0);
    c.ws.write(".pipeline/work/someone/else/notes.txt", "mine");
    let gc = c.run(&["gc"]);
    expect(&gc, 0, "did not make it");
    assert!(c.ws.path(".pipeline/work/someone/else/notes.txt").exists());
    c.finish();
}

#[test]
fn store_gc_keeps_what_another_pipeline_file_uses() {
    let c = Case::new(ONE_STAGE);
    c.ws.write(
        "other.yaml",
        "stages:\n  b:\n    cmd: 'echo b > $PIPELINE_OUT/b.txt'\n",
    );
    c.run(&["run"]).expect_code(0);
    let other = c.ws.path("other.yaml");
    c.run_file(&other, &["run"]).expect_code(0);
    let gc = c.run_file(&other, &["gc"]);
    expect(&gc, 0, "pipeline.yaml uses too");
    let v = c.ws.json(&["status"], 0);
    assert_eq!(stage_json(&v, "a")["status"], "fresh", "{v:#}");
    c.finish();
}

#[test]
fn store_gc_stops_when_another_pipeline_file_is_broken() {
    let c = Case::new(ONE_STAGE);
    c.run(&["run"]).expect_code(0);
    c.ws.write(
        "broken.yml",
        "stages:\n  b:\n    cmd: x\n    deps: [nope]\n",
    );
    c.ws.set_yaml("stages:\n  z:\n    cmd: 'true'\n");
    c.expect(&["gc"], 2, "gc cannot tell which artifacts");
    assert!(c.ws.path(".pipeline/artifacts/a").exists());
    c.finish();
}

#[test]
fn store_gc_dry_run_removes_nothing() {
    let c = Case::new(ONE_STAGE);
    c.run(&["run"]).expect_code(0);
    c.ws.set_yaml("stages:\n  z:\n    cmd: 'true'\n");
    let before = snapshot(&c.ws.path(".pipeline/artifacts"));
    c.expect(&["gc", "--dry-run"], 0, "would remove");
    assert!(snapshot(&c.ws.path(".pipeline/artifacts")) == before);
    c.expect(&["gc"], 0, "removed");
    c.finish();
}

#[test]
fn store_empty_foreign_folders_on_a_scratch_disk_stay() {
    let c = Case::new(ONE_STAGE);
    let scratch = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(c.ws.path(".pipeline")).unwrap();
    for area in ["work", "artifacts", "quarantine"] {
        std::fs::create_dir_all(scratch.path().join(area).join("someone-elses-empty")).unwrap();
        std::os::unix::fs::symlink(
            scratch.path().join(area),
            c.ws.path(&format!(".pipeline/{area}")),
        )
        .unwrap();
    }
    c.run(&["run"]).expect_code(0);
    // Another pipeline: gc removes a's artifact and then its (marked) instance folder.
    c.ws.set_yaml("stages:\n  z:\n    cmd: 'true'\n");
    expect(&c.run(&["gc"]), 0, "removed");
    for area in ["work", "artifacts", "quarantine"] {
        let foreign = scratch.path().join(area).join("someone-elses-empty");
        assert!(foreign.is_dir(), "{} was removed", foreign.display());
    }
    assert!(!scratch.path().join("artifacts/a").exists());
    c.finish();
}

#[test]
fn store_gc_sees_pipeline_files_in_every_yaml_spelling() {
    let c = Case::new(ONE_STAGE);
    c.ws.write(
        "flow.yaml",
        "{stages: {b: {cmd: 'echo b > $PIPELINE_OUT/b.txt'}}}\n",
    );
    c.ws.write(
        "quoted.yml",
        "# a comment first\n\"stages\":\n  c:\n    cmd: 'echo c > $PIPELINE_OUT/c.txt'\n",
    );
    c.ws.write("data.yaml", "labels: [a, b]\nstages_note: not a pipeline\n");
    for file in ["flow.yaml", "quoted.yml"] {
        c.run_file(&c.ws.path(file), &["run"]).expect_code(0);
    }
    c.run(&["run"]).expect_code(0);
    let gc = c.run(&["gc"]);
    expect(&gc, 0, "flow.yaml");
    assert!(gc.stdout.contains("quoted.yml"), "{}", gc.describe());
    for (file, stage) in [("flow.yaml", "b"), ("quoted.yml", "c")] {
        let v = c.run_file(&c.ws.path(file), &["status", "--json"]);
        assert_eq!(stage_json(&v.json(), stage)["status"], "fresh", "{file}");
    }
    c.finish();
}

#[test]
fn store_gc_stops_at_a_yaml_file_it_cannot_read() {
    let c = Case::new(ONE_STAGE);
    c.run(&["run"]).expect_code(0);
    c.ws.set_yaml("stages:\n  z:\n    cmd: 'true'\n");
    // A sparse 8 GiB file: read whole, it would take 8 GiB (and minutes).
    let huge = std::fs::File::create(c.ws.path("huge.yaml")).unwrap();
    huge.set_len(8 << 30).unwrap();
    let t0 = Instant::now();
    c.expect(&["gc"], 2, "larger than 4 MiB");
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
    std::fs::remove_file(c.ws.path("huge.yaml")).unwrap();
    c.ws.write("junk.yml", b"stages:\n  b:\n    cmd: '\xff\xfe'\n");
    c.expect(&["gc"], 2, "not UTF-8");
    c.ws.write("junk.yml", "stages: [unclosed\n");
    c.expect(&["gc"], 2, "gc cannot tell which artifacts");
    assert!(c.ws.path(".pipeline/artifacts/a").exists());
    std::fs::remove_file(c.ws.path("junk.yml")).unwrap();
    c.expect(&["gc"], 0, "removed");
    c.finish();
}

#[test]
fn store_pull_killed_midway_is_cleared_by_the_next_run() {
    // 3,000 files: laying them out in the pull's staging directory takes long enough to be
    // killed in the middle of it.
    let yaml = "stages:\n  many:\n    cmd: 'cd $PIPELINE_OUT && for i in $(seq 1 3000); do echo $i > f$i; done'\n";
    let remote = tempfile::tempdir().unwrap();
    let remote_arg = remote.path().display().to_string();
    let first = Case::new(yaml);
    first.run(&["run"]).expect_code(0);
    first.run(&["push", "--remote", &remote_arg]).expect_code(0);
    first.finish();

    let c = Case::new(yaml);
    let mut pull = limited();
    pull.args(["-f", "pipeline.yaml", "pull", "--remote", &remote_arg])
        .current_dir(c.ws.root())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = pull.spawn().unwrap();
    let staging = |ws: &Ws| {
        std::fs::read_dir(ws.path(".pipeline/tmp"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("pull-"))
    };
    let t0 = Instant::now();
    while !staging(&c.ws) && t0.elapsed() < TIME && child.try_wait().unwrap().is_none() {
        std::thread::sleep(Duration::from_millis(1));
    }
    let _ = child.kill(); // SIGKILL
    child.wait().unwrap();
    if !staging(&c.ws) {
        eprintln!("note: the pull finished (or had not staged) before it was killed");
    }
    c.run(&["run"]).expect_code(0);
    assert!(
        !staging(&c.ws),
        "the killed pull's staging directory outlived the next run"
    );
    c.run(&["gc"]).expect_code(0);
    c.finish();
}

// ---------------------------------------------------------------------------------------------
// Class 3: nothing committed changes; every child process ends with its run.

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

// ---------------------------------------------------------------------------------------------
// Class 5: silent wrong inputs are errors at plan time with file:line.

#[test]
fn plan_dep_names_with_one_env_variable_are_refused() {
    refused(
        "stages:\n  a-b:\n    cmd: 'true'\n  a_b:\n    cmd: 'true'\n  c:\n    cmd: 'true'\n    deps: [a-b, a_b]\n",
        "would both be $PIPELINE_DEP_A_B",
    );
}

#[test]
fn plan_dep_seen_under_its_stage_name_collides_with_a_plain_dep() {
    // `p@x=1`, the one instance of `p`, is also exported as $PIPELINE_DEP_P: so is stage `P`.
    refused(
        "stages:\n  p:\n    cmd: 'true'\n    matrix: {x: [1]}\n  P:\n    cmd: 'true'\n  c:\n    cmd: 'true'\n    deps: [p, P]\n",
        "would both be $PIPELINE_DEP_P",
    );
}

#[test]
fn plan_cjk_dep_names_of_one_length_are_refused() {
    refused(
        "stages:\n  甲乙:\n    cmd: 'true'\n  丙丁:\n    cmd: 'true'\n  c:\n    cmd: 'true'\n    deps: [甲乙, 丙丁]\n",
        "pipeline.yaml:8",
    );
}

#[test]
fn plan_matrix_values_naming_one_instance_are_refused() {
    refused(
        "stages:\n  a:\n    cmd: 'true'\n    matrix: {n: [1, \"1\"]}\n",
        "name the same instance `a@n=1`",
    );
    refused(
        "stages:\n  a:\n    cmd: 'true'\n    matrix: {n: [true, \"true\"]}\n",
        "pipeline.yaml:4",
    );
}

#[test]
fn plan_inputs_reaching_into_the_store_are_refused() {
    let c = Case::new(ONE_STAGE);
    c.run(&["run"]).expect_code(0);
    for pattern in [".pipeline/**/*", "**/*.json", "*"] {
        c.ws.set_yaml(&format!(
            "stages:\n  a:\n    cmd: 'true'\n    inputs: [\"{pattern}\"]\n"
        ));
        c.expect(&["status"], 2, "reaches into the pipeline's own store");
    }
    c.ws.set_yaml("stages:\n  a:\n    cmd: 'true'\n    inputs: [\"**/*\", \"!.pipeline/**\"]\n");
    c.run(&["status"]).expect_code(0);
    c.ws.set_yaml(ONE_STAGE);
    c.finish();
}

#[test]
fn plan_inputs_reaching_the_store_through_a_symlink_are_refused() {
    let c = Case::new(ONE_STAGE);
    let v = c.ws.json(&["run"], 0);
    let artifact = PathBuf::from(stage_json(&v, "a")["artifact"].as_str().unwrap());
    std::os::unix::fs::symlink(".pipeline", c.ws.path("data")).unwrap();
    std::os::unix::fs::symlink(artifact.join("a.txt"), c.ws.path("one-file")).unwrap();
    c.ws.write("mine/ok.txt", "a workspace file");
    std::os::unix::fs::symlink("../.pipeline/artifacts", c.ws.path("mine/store")).unwrap();
    for inputs in [
        "[data]",
        "[\"data/**/*\"]",
        "[mine]",
        "[\"mine/*\"]",
        "[one-file]",
    ] {
        c.ws.set_yaml(&format!(
            "stages:\n  a:\n    cmd: 'true'\n    inputs: {inputs}\n"
        ));
        c.expect(&["status"], 2, "reaches into the pipeline's own store");
    }
    c.ws.set_yaml("stages:\n  a:\n    cmd: 'true'\n    inputs: [mine/ok.txt]\n");
    c.run(&["status"]).expect_code(0);
    c.ws.set_yaml(ONE_STAGE);
    c.finish();
}

// ---------------------------------------------------------------------------------------------
// Class 6: costs that grew too fast.

#[test]
fn costs_ten_thousand_value_matrix_with_a_dependent_plans_quickly() {
    let values: Vec<String> = (0..10_000).map(|i| i.to_string()).collect();
    let c = Case::new(&format!(
        "stages:\n  a:\n    cmd: 'true'\n    matrix: {{n: [{}]}}\n  b:\n    cmd: 'true'\n    deps: [a]\n  c:\n    cmd: 'true'\n    deps: [b]\n    aggregate: true\n",
        values.join(", ")
    ));
    let t0 = Instant::now();
    let out = c.run(&["dag", "--json"]);
    out.expect_code(0);
    // Debug build on 2 cores; the quadratic planner took ~14 s for this in a release build.
    assert!(t0.elapsed() < Duration::from_secs(15), "{:?}", t0.elapsed());
    assert_eq!(out.json()["stages"].as_array().unwrap().len(), 20_001);
    c.finish();
}

#[test]
fn costs_failing_stage_with_one_huge_line_shows_a_bounded_tail() {
    let c = Case::new(
        "stages:\n  a:\n    cmd: 'head -c 50000000 /dev/zero | tr \"\\0\" x >&2; exit 3'\n",
    );
    let out = c.expect(&["run"], 1, "status 3");
    assert!(out.stderr.len() < 8192, "{} bytes", out.stderr.len());
    c.finish();
}

#[test]
fn costs_long_chain_of_stages_plans_quickly() {
    let mut text = String::from("stages:\n  s0:\n    cmd: 'true'\n");
    for i in 1..1500 {
        text.push_str(&format!(
            "  s{i}:\n    cmd: 'true'\n    deps: [s{}]\n",
            i - 1
        ));
    }
    let c = Case::new(&text);
    let t0 = Instant::now();
    c.run(&["status", "--json"]).expect_code(0);
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
    c.finish();
}

#[test]
fn costs_three_axis_product_plans() {
    let v: Vec<String> = (0..20).map(|i| i.to_string()).collect();
    let list = v.join(", ");
    let c = Case::new(&format!(
        "stages:\n  a:\n    cmd: 'true'\n    matrix: {{x: [{list}], y: [{list}], z: [{list}]}}\n"
    ));
    let out = c.run(&["dag", "--json"]);
    out.expect_code(0);
    assert_eq!(out.json()["stages"].as_array().unwrap().len(), 8000);
    c.finish();
}

// ---------------------------------------------------------------------------------------------
// Class 7: model files are checked before anything is allocated.

fn safetensors(header: &str, data: usize) -> Vec<u8> {
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend(header.as_bytes());
    bytes.extend(vec![0u8; data]);
    bytes
}

const CONFIG: &str = r#"{"model_type": "albert", "architectures": ["AlbertForPreTraining"], "vocab_size": 30, "embedding_size": 4, "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 16, "max_position_embeddings": 16}"#;

fn model_case(config: &str, weights: &[u8], needle: &str) {
    let c = Case::new(ONE_STAGE);
    c.ws.write("m/config.json", config);
    c.ws.write("m/model.safetensors", weights);
    let out = c.run(&["model", "info", "--model", "m"]);
    assert_ne!(out.code, 0, "{}", out.describe());
    let all = format!("{}{}", out.stdout, out.stderr);
    assert!(all.contains(needle), "no {needle:?} in\n{}", out.describe());
    assert!(!all.contains("loads as is"), "{}", out.describe());
    c.finish();
}

#[test]
fn model_five_byte_safetensors_says_what_is_wrong() {
    model_case(CONFIG, b"hello", "not a safetensors file (5 bytes");
}

#[test]
fn model_absurd_vocab_size_is_checked_against_the_weights() {
    let config = CONFIG.replace("\"vocab_size\": 30", "\"vocab_size\": 4000000");
    let weights = safetensors(
        r#"{"albert.embeddings.word_embeddings.weight":{"dtype":"F32","shape":[30,4],"data_offsets":[0,480]}}"#,
        480,
    );
    model_case(&config, &weights, "config.json says vocab_size");
}

#[test]
fn model_header_longer_than_the_file_is_refused() {
    let mut bytes = u64::MAX.to_le_bytes().to_vec();
    bytes.extend(b"{}");
    model_case(CONFIG, &bytes, "not a valid safetensors file");
}

#[test]
fn model_header_that_is_not_json_is_refused() {
    model_case(CONFIG, &safetensors("{{{{", 0), "not valid JSON");
}

#[test]
fn model_tensor_beyond_the_end_is_refused() {
    let weights = safetensors(
        r#"{"albert.embeddings.word_embeddings.weight":{"dtype":"F32","shape":[30,4],"data_offsets":[0,480]}}"#,
        100,
    );
    model_case(CONFIG, &weights, "truncated");
}

#[test]
fn model_tensor_with_a_shape_its_bytes_do_not_hold_is_refused() {
    let weights = safetensors(
        r#"{"a":{"dtype":"F32","shape":[4000000000,4000000000],"data_offsets":[0,16]}}"#,
        16,
    );
    model_case(CONFIG, &weights, "should take");
}

/// The header of a complete safetensors file for [`CONFIG`] (zeros for data), with the named
/// tensors given other shapes (or left out, for an empty shape).
fn tiny_model(changed: &[(&str, &[u64])]) -> Vec<u8> {
    let g = "albert.encoder.albert_layer_groups.0.albert_layers.0";
    let mut tensors: Vec<(String, Vec<u64>)> = vec![
        (
            "albert.embeddings.word_embeddings.weight".into(),
            vec![30, 4],
        ),
        (
            "albert.embeddings.position_embeddings.weight".into(),
            vec![16, 4],
        ),
        (
            "albert.embeddings.token_type_embeddings.weight".into(),
            vec![2, 4],
        ),
        ("albert.embeddings.LayerNorm.weight".into(), vec![4]),
        ("albert.embeddings.LayerNorm.bias".into(), vec![4]),
        (
            "albert.encoder.embedding_hidden_mapping_in.weight".into(),
            vec![8, 4],
        ),
        (
            "albert.encoder.embedding_hidden_mapping_in.bias".into(),
            vec![8],
        ),
    ];
    for w in ["query", "key", "value", "dense"] {
        tensors.push((format!("{g}.attention.{w}.weight"), vec![8, 8]));
        tensors.push((format!("{g}.attention.{w}.bias"), vec![8]));
    }
    tensors.push((format!("{g}.ffn.weight"), vec![16, 8]));
    tensors.push((format!("{g}.ffn.bias"), vec![16]));
    tensors.push((format!("{g}.ffn_output.weight"), vec![8, 16]));
    tensors.push((format!("{g}.ffn_output.bias"), vec![8]));
    for (name, shape) in changed {
        tensors.retain(|(n, _)| !n.ends_with(name));
        if !shape.is_empty() {
            tensors.push((name.to_string(), shape.to_vec()));
        }
    }
    let mut header = serde_json::Map::new();
    let mut at = 0u64;
    for (name, shape) in tensors {
        let bytes = 4 * shape.iter().product::<u64>();
        header.insert(
            name,
            serde_json::json!({"dtype": "F32", "shape": shape, "data_offsets": [at, at + bytes]}),
        );
        at += bytes;
    }
    safetensors(&Value::Object(header).to_string(), at as usize)
}

fn config_with(key: &str, value: &str) -> String {
    let mut v: Value = serde_json::from_str(CONFIG).unwrap();
    v[key] = serde_json::from_str(value).unwrap();
    v.to_string()
}

#[test]
fn model_header_without_word_embeddings_is_refused() {
    let weights = tiny_model(&[("word_embeddings.weight", &[])]);
    model_case(
        CONFIG,
        &weights,
        "have no `albert.embeddings.word_embeddings.weight`",
    );
}

#[test]
fn model_absurd_hidden_size_is_checked_against_the_weights() {
    let config = config_with("hidden_size", "65536");
    model_case(&config, &tiny_model(&[]), "hidden_size × hidden_size");
}

#[test]
fn model_absurd_intermediate_size_is_checked_against_the_weights() {
    let config = config_with("intermediate_size", "262144");
    model_case(&config, &tiny_model(&[]), "intermediate_size × hidden_size");
}

#[test]
fn model_absurd_num_hidden_layers_is_checked_against_the_weights() {
    let config = config_with("num_hidden_layers", "1000");
    let config = {
        let mut v: Value = serde_json::from_str(&config).unwrap();
        v["share_type"] = "none".into();
        v.to_string()
    };
    model_case(
        &config,
        &tiny_model(&[]),
        "num_hidden_layers = 1000 with share_type none",
    );
}

#[test]
fn model_absurd_num_attention_heads_is_refused() {
    let config = config_with("num_attention_heads", "1000");
    model_case(
        &config,
        &tiny_model(&[]),
        "not divisible by num_attention_heads",
    );
}

#[test]
fn model_absurd_size_of_a_tensor_the_file_lacks_is_refused() {
    // No position table to compare with: the parameter count the config implies catches it.
    let config = config_with("max_position_embeddings", "131072");
    let weights = tiny_model(&[("position_embeddings.weight", &[])]);
    model_case(&config, &weights, "backbone parameters");
}

#[test]
fn model_pytorch_bin_smaller_than_its_config_is_refused() {
    let c = Case::new(ONE_STAGE);
    c.ws.write("m/config.json", CONFIG);
    c.ws.write("m/pytorch_model.bin", vec![0u8; 1000]);
    let out = c.run(&["model", "info", "--model", "m"]);
    expect(
        &out,
        1,
        "needs at least 1680 bytes of weights, but the file has 1000",
    );
    c.finish();
}

#[test]
fn model_config_json_over_the_size_limit_is_refused_unread() {
    let c = Case::new(ONE_STAGE);
    c.ws.write("m/model.safetensors", tiny_model(&[]));
    // Sparse: 4 GiB read whole would not fit under the address-space limit.
    let f = std::fs::File::create(c.ws.path("m/config.json")).unwrap();
    f.set_len(4 << 30).unwrap();
    let t0 = Instant::now();
    let out = c.run(&["model", "info", "--model", "m"]);
    expect(&out, 1, "larger than 16 MiB");
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
    c.finish();
}

#[test]
fn model_config_that_is_not_json_is_refused() {
    model_case("{ nope", &safetensors("{}", 0), "not valid JSON");
}

// ---------------------------------------------------------------------------------------------
// Class 8: the smaller items.

#[test]
fn small_quoted_params_are_one_shell_word() {
    let c = Case::new(
        "stages:\n  a:\n    cmd: 'printf %s ${params.msg:q} > $PIPELINE_OUT/m.txt'\n    params: {msg: \"it's; echo pwned > /tmp/x $(id)\"}\n",
    );
    let out = c.run(&["run", "--json"]);
    out.expect_code(0);
    let dir = stage_json(&out.json(), "a")["artifact"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        std::fs::read_to_string(Path::new(&dir).join("m.txt")).unwrap(),
        "it's; echo pwned > /tmp/x $(id)"
    );
    c.finish();
}

#[test]
fn small_invalid_metrics_json_is_warned_about() {
    let c =
        Case::new("stages:\n  a:\n    cmd: 'echo \"{not json\" > $PIPELINE_OUT/metrics.json'\n");
    c.expect(&["run"], 0, "metrics.json is not valid JSON");
    c.expect(&["metrics"], 0, "not valid JSON");
    c.finish();
}

#[test]
fn small_disk_full_shows_its_cause() {
    let c = Case::new("stages:\n  a:\n    cmd: 'head -c 1 /dev/zero > /dev/full'\n");
    c.expect(&["run"], 1, "No space left on device");
    let runs = c.run(&["runs"]);
    expect(&runs, 0, "failed");
    assert!(!runs.stdout.contains("interrupted"), "{}", runs.describe());
    assert!(runs.stdout.contains("cause:"), "{}", runs.describe());
    c.finish();
}

#[test]
fn small_artifacts_on_another_filesystem_commit() {
    let shm = Path::new("/dev/shm");
    let Ok(scratch) = tempfile::tempdir_in(shm) else {
        eprintln!("skipped: no /dev/shm");
        return;
    };
    use std::os::unix::fs::MetadataExt;
    let c = Case::new(ONE_STAGE);
    if std::fs::metadata(shm).unwrap().dev() == std::fs::metadata(c.ws.root()).unwrap().dev() {
        eprintln!("skipped: /dev/shm is on the workspace's filesystem");
        return;
    }
    std::fs::create_dir_all(c.ws.path(".pipeline")).unwrap();
    std::os::unix::fs::symlink(scratch.path(), c.ws.path(".pipeline/artifacts")).unwrap();
    c.run(&["run"]).expect_code(0);
    let v = c.ws.json(&["status"], 0);
    assert_eq!(stage_json(&v, "a")["status"], "fresh", "{v:#}");
    c.finish();
}

#[test]
fn small_verify_quarantines_across_filesystems() {
    let shm = Path::new("/dev/shm");
    let Ok(scratch) = tempfile::tempdir_in(shm) else {
        eprintln!("skipped: no /dev/shm");
        return;
    };
    use std::os::unix::fs::MetadataExt;
    let c = Case::new(ONE_STAGE);
    if std::fs::metadata(shm).unwrap().dev() == std::fs::metadata(c.ws.root()).unwrap().dev() {
        eprintln!("skipped: /dev/shm is on the workspace's filesystem");
        return;
    }
    std::fs::create_dir_all(c.ws.path(".pipeline")).unwrap();
    std::os::unix::fs::symlink(scratch.path(), c.ws.path(".pipeline/artifacts")).unwrap();
    let v = c.ws.json(&["run"], 0);
    let dir = PathBuf::from(stage_json(&v, "a")["artifact"].as_str().unwrap());
    std::fs::write(dir.join("a.txt"), "tampered").unwrap();
    // A link planted in the artifact is moved as a link, not followed.
    std::os::unix::fs::symlink("/dev/zero", dir.join("zero")).unwrap();
    let out = c.run_file(&c.ws.path(".hostile-verify"), &["verify", "--json"]);
    out.expect_code(1);
    let moved = PathBuf::from(out.json()["corrupt"][0]["quarantined_to"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(moved.join("a.txt")).unwrap(),
        "tampered"
    );
    assert!(
        std::fs::symlink_metadata(moved.join("zero"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert!(!dir.exists(), "the corrupt artifact left the store");
    c.run(&["run"]).expect_code(0);
    c.run(&["gc"]).expect_code(0);
    c.finish();
}

#[test]
fn small_store_write_failing_mid_run_records_its_cause() {
    // sled buffers its writes, so a full disk reaches a run as a failed index write at sled's
    // open or flush; the reliable way to fail that write here is another process holding the
    // index's lock when the run first writes to it (a re-run opens sled only then).
    let c = Case::new(ONE_STAGE);
    c.run(&["run"]).expect_code(0);
    c.ws.set_yaml("stages:\n  a:\n    cmd: 'echo b > $PIPELINE_OUT/a.txt'\n");
    let mut holder = Command::new("flock");
    holder
        .args([
            "-x",
            "-o",
            ".pipeline/index/db",
            "-c",
            "touch locked; exec sleep 60",
        ])
        .current_dir(c.ws.root())
        .process_group(0);
    let mut holder = holder.spawn().expect("flock(1) from util-linux");
    common::wait_for(&c.ws.path("locked"), Duration::from_secs(30));
    let out = c.run(&["run"]);
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{}", holder.id())])
        .status();
    let _ = holder.wait();
    expect(&out, 1, "held by another process");
    let runs = c.run(&["runs", "--json"]);
    runs.expect_code(0);
    let last = &runs.json()["runs"][0];
    assert_eq!(last["status"], "failed", "{last:#}");
    let cause = last["cause"].as_str().unwrap_or_default();
    assert!(cause.contains("held by another process"), "{last:#}");
    expect(&c.run(&["runs"]), 0, "cause: the index");
    c.run(&["run"]).expect_code(0);
    c.finish();
}

#[test]
fn small_predict_refuses_empty_texts_before_loading_a_model() {
    let c = Case::new(ONE_STAGE);
    // No model at all: the text is refused first.
    c.ws.write("not-a-model/readme.txt", "x");
    c.expect(
        &["predict", "--model", "not-a-model", ""],
        2,
        "text 1 on the command line is empty",
    );
    c.expect(
        &["predict", "--model", "not-a-model", "好", " \t"],
        2,
        "text 2 on the command line is empty",
    );
    c.finish();
}

// ---------------------------------------------------------------------------------------------
// Beyond the classes: the command line, inputs, names.

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
