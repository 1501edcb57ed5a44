//! Shared helpers for the end-to-end tests of the `pipeline` binary: a throwaway workspace
//! holding a `pipeline.yaml`, a way to run the binary against it, and accessors for the
//! `--json` outputs described in docs/cli-contract.md.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tempfile::TempDir;

pub const BIN: &str = env!("CARGO_BIN_EXE_pipeline");

/// What one invocation of the binary gave back.
#[derive(Debug)]
pub struct Output {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    /// stdout parsed as the one JSON object `--json` prints.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not one JSON object ({e})\n{}", self.describe()))
    }

    pub fn describe(&self) -> String {
        format!(
            "exit code: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.code, self.stdout, self.stderr
        )
    }

    /// Asserts the exit code, showing everything the binary printed when it is not.
    pub fn expect_code(&self, code: i32) -> &Self {
        assert_eq!(self.code, code, "unexpected exit code\n{}", self.describe());
        self
    }

    pub fn assert_no_panic(&self) -> &Self {
        assert!(
            !self.stderr.contains("panicked") && !self.stderr.contains("RUST_BACKTRACE"),
            "the binary panicked\n{}",
            self.describe()
        );
        self
    }
}

/// A temporary workspace: a directory with a `pipeline.yaml` (state goes to `.pipeline/`).
pub struct Ws {
    pub dir: TempDir,
}

impl Ws {
    pub fn new(yaml: &str) -> Ws {
        let ws = Ws {
            dir: tempfile::tempdir().expect("creating a temp dir"),
        };
        ws.set_yaml(yaml);
        ws
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn file(&self) -> PathBuf {
        self.root().join("pipeline.yaml")
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.root().join(rel)
    }

    pub fn set_yaml(&self, yaml: &str) {
        self.write("pipeline.yaml", yaml);
    }

    /// Writes `contents` to `rel` (relative to the workspace root), creating parent dirs.
    pub fn write(&self, rel: &str, contents: impl AsRef<[u8]>) {
        let path = self.path(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&path, contents).unwrap();
    }

    /// A `pipeline -f <root>/pipeline.yaml ARGS...` command, not started yet.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.arg("-f")
            .arg(self.file())
            .args(args)
            .current_dir(self.root())
            .env_remove("RUST_LOG");
        cmd
    }

    /// Runs `pipeline -f <root>/pipeline.yaml ARGS...` and waits for it.
    pub fn run(&self, args: &[&str]) -> Output {
        let out = self
            .command(args)
            .stdin(Stdio::null())
            .output()
            .expect("starting the pipeline binary");
        Output {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Runs with `--json` appended, asserts the exit code and returns the parsed output.
    pub fn json(&self, args: &[&str], code: i32) -> Value {
        let mut all: Vec<&str> = args.to_vec();
        all.push("--json");
        let out = self.run(&all);
        out.expect_code(code);
        out.assert_no_panic();
        out.json()
    }

    /// `pipeline run ARGS... --json`, expecting success.
    pub fn run_ok(&self, args: &[&str]) -> Value {
        let mut all = vec!["run"];
        all.extend_from_slice(args);
        let v = self.json(&all, 0);
        assert_eq!(v["ok"], true, "run reported ok=false: {v:#}");
        v
    }
}

/// The entry for `instance` in the "stages" list of a `run`/`status` JSON object.
pub fn entry<'a>(v: &'a Value, instance: &str) -> &'a Value {
    v["stages"]
        .as_array()
        .unwrap_or_else(|| panic!("no \"stages\" list in {v:#}"))
        .iter()
        .find(|s| s["instance"] == instance)
        .unwrap_or_else(|| panic!("no instance `{instance}` in {v:#}"))
}

pub fn has_entry(v: &Value, instance: &str) -> bool {
    v["stages"]
        .as_array()
        .is_some_and(|a| a.iter().any(|s| s["instance"] == instance))
}

/// The instance names in a "stages" list, in order.
pub fn instances(v: &Value) -> Vec<String> {
    v["stages"]
        .as_array()
        .unwrap_or_else(|| panic!("no \"stages\" list in {v:#}"))
        .iter()
        .map(|s| s["instance"].as_str().unwrap().to_string())
        .collect()
}

pub fn status<'a>(v: &'a Value, instance: &str) -> &'a str {
    entry(v, instance)["status"]
        .as_str()
        .unwrap_or_else(|| panic!("no status for `{instance}` in {v:#}"))
}

pub fn reasons(v: &Value, instance: &str) -> Vec<String> {
    entry(v, instance)["reasons"]
        .as_array()
        .unwrap_or_else(|| panic!("no reasons for `{instance}` in {v:#}"))
        .iter()
        .map(|r| r.as_str().unwrap().to_string())
        .collect()
}

/// Asserts `instance` has `expected` status in a run/status JSON object.
pub fn assert_status(v: &Value, instance: &str, expected: &str) {
    assert_eq!(
        status(v, instance),
        expected,
        "status of `{instance}` in {v:#}"
    );
}

/// Asserts some reason of `instance` starts with `prefix`.
pub fn assert_reason(v: &Value, instance: &str, prefix: &str) {
    let rs = reasons(v, instance);
    assert!(
        rs.iter().any(|r| r.starts_with(prefix)),
        "no reason of `{instance}` starts with {prefix:?}: {rs:?}\n{v:#}"
    );
}

/// The "artifact" directory of `instance` in a run JSON object (must be set).
pub fn artifact(v: &Value, instance: &str) -> PathBuf {
    let a = entry(v, instance)["artifact"]
        .as_str()
        .unwrap_or_else(|| panic!("no artifact for `{instance}` in {v:#}"));
    let p = PathBuf::from(a);
    assert!(p.is_absolute(), "artifact path is not absolute: {a}");
    p
}

pub fn read(path: impl AsRef<Path>) -> String {
    let path = path.as_ref();
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// Every file under `path` (or `path` itself when it is a file), concatenated.
pub fn read_all(path: &Path) -> String {
    if path.is_file() {
        return read(path);
    }
    let mut out = String::new();
    let mut entries: Vec<_> = std::fs::read_dir(path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        out.push_str(&read_all(&p));
    }
    out
}

pub fn same_path(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// Waits until `path` exists; panics after `timeout`.
pub fn wait_for(path: &Path, timeout: Duration) {
    let start = Instant::now();
    while !path.exists() {
        assert!(
            start.elapsed() < timeout,
            "timed out waiting for {}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `vars.data` pointing at the bundled fixtures and the data stages (`clean` → `vocab` → `mask`)
/// sized for seconds: the head of the pipeline files that the pretrain and finetune tests build.
pub fn fixture_data_stages_yaml() -> String {
    format!(
        r#"
vars:
  data: {repo}/datasets/fixtures
stages:
  clean:
    kind: clean
    inputs: ["${{vars.data}}/corpus/*/*.txt"]
    params:
      format: lines
      formats: {{"*/corpus/paragraphs/*": paragraphs, "*/corpus/wiki/*": wiki}}
  vocab:
    kind: vocab
    deps: [clean]
    inputs: ["${{vars.data}}/vocab/vocab.txt"]
    params: {{source: file, file: "${{vars.data}}/vocab/vocab.txt"}}
  mask:
    kind: mask
    deps: [clean, vocab]
    params: {{max_seq_length: 64, max_predictions_per_seq: 10, dupe_factor: 1, eval_fraction: 0.1}}
"#,
        repo = env!("CARGO_MANIFEST_DIR")
    )
}

/// The data stages and a 2-layer pretrain on the fixtures (10 steps), then `stages`: the
/// pipeline file of the fine-tuning tests.
pub fn fixture_pretrain_yaml(stages: &str) -> String {
    format!(
        r#"{data}  pretrain:
    kind: pretrain
    deps: [mask, vocab]
    params: {{model: tiny, hidden_size: 32, num_attention_heads: 2, intermediate_size: 64,
             embedding_size: 16, num_hidden_layers: 2, batch_size: 8, steps: 10,
             learning_rate: 0.005}}
{stages}
"#,
        data = fixture_data_stages_yaml()
    )
}
