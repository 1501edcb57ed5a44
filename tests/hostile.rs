//! Hostile input and faults, end to end through the binary (issue 20; SECURITY.md states what
//! is guaranteed). Every case runs `pipeline` under an address-space limit (`ulimit -v`) and a
//! wall-clock limit, and asserts the exit code and the message; every case then checks that
//! `pipeline verify` finds the store clean and that a directory outside the workspace (which
//! some cases link into the store or into outputs) is byte for byte as it was.
//!
//! The cases are in `hostile/`, a module for each class of issue 20 (`yaml`, `store_cleaning`,
//! `processes_outputs`, `plan_costs`, `model_files`, `small_items`), for what else a hostile
//! user tries (`cli_inputs_names`) and for the later issues' classes (`data`, `reads`,
//! `records`, `terminal`, `fuzz`, `store_trust`, `remote_trust`); this file holds what they
//! share: the limits, `Case` and the helpers that run the binary under them.

#[path = "hostile/cli_inputs_names.rs"]
mod cli_inputs_names;
mod common;
#[path = "hostile/data.rs"]
mod data;
#[path = "hostile/fuzz.rs"]
mod fuzz;
#[path = "hostile/model_files.rs"]
mod model_files;
#[path = "hostile/plan_costs.rs"]
mod plan_costs;
#[path = "hostile/processes_outputs.rs"]
mod processes_outputs;
#[path = "hostile/reads.rs"]
mod reads;
#[path = "hostile/records.rs"]
mod records;
#[path = "hostile/remote_trust.rs"]
mod remote_trust;
#[path = "hostile/small_items.rs"]
mod small_items;
#[path = "hostile/store_cleaning.rs"]
mod store_cleaning;
#[path = "hostile/store_trust.rs"]
mod store_trust;
#[path = "hostile/terminal.rs"]
mod terminal;
#[path = "hostile/yaml.rs"]
mod yaml;

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

/// A pipeline of one stage that writes one file.
const ONE_STAGE: &str = "stages:\n  a:\n    cmd: 'echo a > $PIPELINE_OUT/a.txt'\n";

/// A safetensors file: the 8-byte little-endian header length, `header`, then `data` zero bytes.
fn safetensors(header: &str, data: usize) -> Vec<u8> {
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend(header.as_bytes());
    bytes.extend(vec![0u8; data]);
    bytes
}
