//! The data stages (`clean`, `vocab`, `mask`) through the binary: the default `pipeline.yaml`
//! on the bundled fixtures (artifacts, metrics, caching, early cutoff), determinism across
//! thread counts, bad input, the real corpora when `PIPELINE_DATA_ROOT` points at them, and the
//! artifacts as Python users open them (Hugging Face `tokenizers`, pyarrow, polars; each
//! skipped with a note when python3 lacks the package).

#[path = "data_stages/bad_input.rs"]
mod bad_input;
mod common;
#[path = "data_stages/default_on_fixtures.rs"]
mod default_on_fixtures;
#[path = "data_stages/determinism.rs"]
mod determinism;
#[path = "data_stages/python_artifacts.rs"]
mod python_artifacts;
#[path = "data_stages/real_corpora.rs"]
mod real_corpora;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::*;
use serde_json::{Value, json};

fn repo() -> &'static str {
    env!("CARGO_MANIFEST_DIR")
}

fn fixtures() -> String {
    format!("{}/datasets/fixtures", repo())
}

/// The repository's default `pipeline.yaml`, in a fresh temporary workspace.
fn default_ws() -> Ws {
    Ws::new(&read(format!("{}/pipeline.yaml", repo())))
}

fn json_file(path: impl AsRef<Path>) -> Value {
    let path = path.as_ref();
    serde_json::from_str(&read(path))
        .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

fn metrics(dir: &Path) -> Value {
    json_file(dir.join("metrics.json"))
}

fn f64_of(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn u64_of(v: &Value) -> u64 {
    v.as_u64()
        .unwrap_or_else(|| panic!("not an unsigned integer: {v}"))
}

fn assert_within(what: &str, v: f64, lo: f64, hi: f64) {
    assert!(
        (lo..=hi).contains(&v),
        "{what} = {v}, expected within [{lo}, {hi}]"
    );
}

/// The files of an artifact as its MANIFEST.json lists them: path → (size, blake3).
fn manifest_files(dir: &Path) -> BTreeMap<String, (u64, String)> {
    let m = json_file(dir.join("MANIFEST.json"));
    m["files"]
        .as_array()
        .unwrap_or_else(|| panic!("no files in the manifest of {}: {m:#}", dir.display()))
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_string(),
                (
                    u64_of(&f["size"]),
                    f["blake3"].as_str().unwrap().to_string(),
                ),
            )
        })
        .collect()
}

/// The plain files of `dir` (no dot files), sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()))
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    names.sort();
    names
}

/// Asserts the file is an Arrow IPC file (magic at both ends).
fn assert_arrow_file(path: &Path) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    assert!(
        bytes.len() > 12 && bytes.starts_with(b"ARROW1") && bytes.ends_with(b"ARROW1"),
        "{} is not an Arrow IPC file",
        path.display()
    );
}

/// `pipeline run ARGS... --json` with extra environment variables, expecting success.
fn run_ok_env(ws: &Ws, args: &[&str], env: &[(&str, &str)]) -> Value {
    let mut cmd = ws.command(&["run"]);
    cmd.args(args).arg("--json").stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("starting the pipeline binary");
    let out = Output {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    out.expect_code(0);
    out.assert_no_panic();
    let v = out.json();
    assert_eq!(v["ok"], true, "run reported ok=false: {v:#}");
    v
}

/// The data root of the shared datasets, from `PIPELINE_DATA_ROOT`; `None` (with a note) when
/// unset or not a directory.
fn real_data_root() -> Option<PathBuf> {
    match std::env::var_os("PIPELINE_DATA_ROOT") {
        Some(p) if Path::new(&p).is_dir() => Some(PathBuf::from(p)),
        Some(p) => {
            println!(
                "note: PIPELINE_DATA_ROOT={} is not a directory: skipping the real-data test",
                Path::new(&p).display()
            );
            None
        }
        None => {
            println!(
                "note: PIPELINE_DATA_ROOT is not set (e.g. ../shared/datasets): skipping the real-data test"
            );
            None
        }
    }
}
