//! Helpers of tests/remote.rs: commands with the test's own environment (and, for the long
//! test, its own copy of the binary), what a directory remote and a download area hold, and
//! moto's S3 server (DVC's own S3 test server, `pip install "moto[server]"`), started on
//! 127.0.0.1 at a free port with one bucket and killed on drop; where python3 or moto is missing
//! the S3 cases skip with a note.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::*;

/// `pipeline ARGS --json` in `ws` with `env` set (and no PIPELINE_REMOTE but the test's).
pub fn json_env(ws: &Ws, args: &[&str], env: &[(&str, String)], code: i32) -> Value {
    let out = run_env(ws, &[args, &["--json"]].concat(), env);
    out.expect_code(code).assert_no_panic();
    out.json()
}

/// `pipeline ARGS` in `ws` with `env` set (and no PIPELINE_REMOTE but the test's).
pub fn run_env(ws: &Ws, args: &[&str], env: &[(&str, String)]) -> Output {
    run_bin(Path::new(BIN), ws, args, env)
}

/// As [`run_env`], with another copy of the binary.
pub fn run_bin(bin: &Path, ws: &Ws, args: &[&str], env: &[(&str, String)]) -> Output {
    let mut cmd = Command::new(bin);
    cmd.arg("-f")
        .arg(ws.file())
        .args(args)
        .current_dir(ws.root())
        .env_remove("RUST_LOG");
    cmd.env_remove("PIPELINE_REMOTE").stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("starting the pipeline binary");
    Output {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Every object file of a directory remote (staging files of unfinished uploads excluded).
pub fn objects(remote: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for sub in std::fs::read_dir(remote.join("objects"))
        .into_iter()
        .flatten()
        .flatten()
    {
        for f in std::fs::read_dir(sub.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            if !f.file_name().to_string_lossy().contains('#') {
                out.push(f.path());
            }
        }
    }
    out.sort();
    out
}

pub fn manifests(remote: &Path) -> usize {
    std::fs::read_dir(remote.join("manifests"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|d| std::fs::read_dir(d.path()).map_or(0, |e| e.count()))
        .sum()
}

pub fn artifact_count(ws: &Ws) -> usize {
    std::fs::read_dir(ws.path(".pipeline/artifacts"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|d| std::fs::read_dir(d.path()).map_or(0, |e| e.count()))
        .sum()
}

/// The files of a workspace's download area (`.pipeline/tmp/downloads`) but its marker: each
/// one's name and length.
pub fn downloads(ws: &Ws) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = std::fs::read_dir(ws.path(".pipeline/tmp/downloads"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| {
            let len = e.metadata().map_or(0, |m| m.len());
            (e.file_name().to_string_lossy().into_owned(), len)
        })
        .filter(|(name, _)| !name.starts_with(".pipeline-owned"))
        .collect();
    out.sort();
    out
}

/// The blake3 digest of a file, as the store writes it.
pub fn digest(path: &Path) -> String {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    blake3::hash(&bytes).to_hex().to_string()
}

/// A copy of the `pipeline` binary that no build replaces while a long test runs: a `cargo
/// build` in the same checkout meanwhile (another crate's tests, an edit) relinks
/// target/debug/pipeline, and a binary with other stage code has other code versions, so other
/// fingerprints. A hard link is enough: cargo and the linker replace the file (a new inode),
/// never write into the old one; where a link cannot be made, a copy.
pub struct PinnedBinary {
    dir: tempfile::TempDir,
}

impl PinnedBinary {
    pub fn new() -> PinnedBinary {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let pinned = dir.path().join("pipeline");
        if std::fs::hard_link(BIN, &pinned).is_err() {
            std::fs::copy(BIN, &pinned).unwrap();
        }
        PinnedBinary { dir }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.path().join("pipeline")
    }
}

/// A file bigger than one part (16 MiB) and a small one.
const PARTS: &str = r#"
stages:
  model:
    cmd: "head -c 17000000 /dev/urandom > $PIPELINE_OUT/model.bin; echo small > $PIPELINE_OUT/small.txt"
"#;

/// `PARTS` pushed to `remote`, pulled into a fresh workspace, compared digest by digest; a
/// push whose file changed after it was hashed aborts its multipart upload.
pub fn multipart_round_trip(remote: &str, env: &[(&str, String)]) -> Ws {
    let a = Ws::new(PARTS);
    let made = artifact(&a.run_ok(&[]), "model");
    let v = json_env(&a, &["push", "--remote", remote], env, 0);
    assert_eq!(v["report"]["multipart"], 1, "{v:#}");
    let b = Ws::new(PARTS);
    let v = json_env(&b, &["pull", "--remote", remote], env, 0);
    assert_eq!(v["pulled"].as_array().unwrap().len(), 1, "{v:#}");
    let v = json_env(&b, &["run", "--no-remote"], env, 0);
    assert_eq!(v["counts"]["ran"], 0, "{v:#}");
    let pulled = artifact(&v, "model");
    for f in ["model.bin", "small.txt"] {
        assert_eq!(digest(&pulled.join(f)), digest(&made.join(f)), "{f}");
    }

    // Same size, other bytes: the digest check after the last part fails the push. (Another
    // command, so another fingerprint: the remote does not have this artifact.)
    let c = Ws::new(&PARTS.replace("echo small", "echo other"));
    let model = artifact(&c.run_ok(&[]), "model").join("model.bin");
    let mut bytes = std::fs::read(&model).unwrap();
    bytes[16_000_000] ^= 1;
    std::fs::write(&model, bytes).unwrap();
    let out = run_env(&c, &["push", "--remote", remote], env);
    out.expect_code(1).assert_no_panic();
    assert!(
        out.stderr.contains("changed since it was hashed"),
        "{}",
        out.describe()
    );
    c
}

/// Every file under `dir`.
pub fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// Two workspaces push the same artifacts at the same moment: both succeed, the remote is whole.
pub fn concurrent_pushes(remote: &str, env: &[(&str, String)]) {
    let yaml = r#"
stages:
  shared:
    cmd: "for i in $(seq 1 16); do seq $i 400000 > $PIPELINE_OUT/f$i; done"
"#;
    let (a, b) = (Ws::new(yaml), Ws::new(yaml));
    a.run_ok(&[]);
    b.run_ok(&[]);
    let start = |ws: &Ws| {
        let mut cmd = ws.command(&["push", "--remote", remote, "--json"]);
        cmd.env_remove("PIPELINE_REMOTE");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (pa, pb) = (start(&a), start(&b));
    for p in [pa, pb] {
        let out = p.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let c = Ws::new(yaml);
    let v = json_env(&c, &["pull", "--remote", remote], env, 0);
    assert_eq!(v["pulled"].as_array().unwrap().len(), 1, "{v:#}");
    let v = json_env(&c, &["run"], env, 0);
    assert_eq!(v["counts"]["ran"], 0, "{v:#}");
}

/// `--set`s that shrink the default pipeline to what a test can afford on 2 cores while it
/// keeps every stage kind: the fixture data, tiny budgets, caps on the examples (for the vars
/// the file has), and each stage's own matrix axes narrowed to their first value (an axis an
/// instance shares with its deps is the dep's: narrowing `pretrain.share_type` narrows its
/// fine-tunings). Read from the plan, so that stages added to pipeline.yaml are narrowed too.
pub fn default_pipeline_sets(bin: &Path, ws: &Ws, yaml: &str) -> Vec<String> {
    let repo = env!("CARGO_MANIFEST_DIR");
    let mut sets = vec![
        format!("data={repo}/datasets/fixtures"),
        "pretrain_steps=2".into(),
        "pretrain_save_steps=[1]".into(),
        "finetune_epochs=1".into(),
    ];
    for var in yaml.lines().filter_map(|l| l.strip_prefix("  ")) {
        if let Some((name, _)) = var.split_once(": ")
            && !name.starts_with(' ')
            && (name.ends_with("_max_train_examples") || name.ends_with("_max_eval_examples"))
        {
            sets.push(format!("{name}=32"));
        }
    }
    let as_args = |sets: &[String]| -> Vec<String> {
        sets.iter()
            .flat_map(|s| ["--set".to_string(), s.clone()])
            .collect()
    };
    let dag = |args: &[String]| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = run_bin(bin, ws, &[&["dag"], &args[..], &["--json"]].concat(), &[]);
        out.expect_code(0);
        out.json()
    };
    let kinds = |dag: &Value| -> std::collections::BTreeSet<String> {
        let stages = dag["stages"].as_array().unwrap();
        stages.iter().map(|i| i["kind"].to_string()).collect()
    };
    let full = dag(&as_args(&sets));
    let axes = |name: &str| -> Vec<(String, String)> {
        let Some((_, rest)) = name.split_once('@') else {
            return Vec::new();
        };
        rest.split(',')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let mut narrowed = std::collections::BTreeMap::new();
    for i in full["stages"].as_array().unwrap() {
        let inherited: Vec<String> = i["deps"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|d| axes(d.as_str().unwrap()).into_iter().map(|(k, _)| k))
            .collect();
        for (k, v) in axes(i["instance"].as_str().unwrap()) {
            if !inherited.contains(&k) {
                let stage = i["stage"].as_str().unwrap().to_string();
                narrowed.entry((stage, k)).or_insert(v);
            }
        }
    }
    sets.extend(narrowed.iter().map(|((st, k), v)| format!("{st}.{k}={v}")));
    let args = as_args(&sets);
    assert_eq!(kinds(&dag(&args)), kinds(&full), "every stage kind stays");
    args
}

/// moto's S3 server on 127.0.0.1 at a free port, with one bucket; killed on drop.
pub struct Moto {
    child: Child,
    pub port: u16,
    pub bucket: String,
}

impl Moto {
    pub fn start() -> Option<Moto> {
        let port = TcpListener::bind("127.0.0.1:0")
            .ok()?
            .local_addr()
            .ok()?
            .port();
        let child = Command::new("python3")
            .args([
                "-m",
                "moto.server",
                "-H",
                "127.0.0.1",
                "-p",
                &port.to_string(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let Ok(child) = child else {
            eprintln!("note: no python3: the S3 cases are skipped");
            return None;
        };
        let mut moto = Moto {
            child,
            port,
            bucket: "pipeline-test".into(),
        };
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(30) {
            if let Ok(Some(_)) = moto.child.try_wait() {
                break;
            }
            if moto
                .request("PUT", &format!("/{}", moto.bucket), b"")
                .is_some_and(|s| s.starts_with("HTTP/1.1 200"))
            {
                return Some(moto);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        eprintln!(
            "note: moto's S3 server did not start (pip install \"moto[server]\"): the S3 cases are skipped"
        );
        None
    }

    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", "test".into()),
            ("AWS_SECRET_ACCESS_KEY", "test".into()),
            ("AWS_REGION", "us-east-1".into()),
            (
                "AWS_ENDPOINT_URL",
                format!("http://127.0.0.1:{}", self.port),
            ),
        ]
    }

    /// Runs `code` with `s3` a boto3 client of this server and `bucket` its bucket (boto3 comes
    /// with moto); what it prints. Panics when the script fails.
    pub fn boto3(&self, code: &str) -> String {
        let script = format!(
            "import boto3\ns3 = boto3.client('s3', endpoint_url='http://127.0.0.1:{}', aws_access_key_id='test', aws_secret_access_key='test', region_name='us-east-1')\nbucket = '{}'\n{code}",
            self.port, self.bucket
        );
        let out = Command::new("python3")
            .args(["-c", &script])
            .output()
            .expect("starting python3");
        assert!(
            out.status.success(),
            "boto3 script failed: {}\n{script}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// One plain HTTP/1.1 request (moto does not check signatures); the response's head.
    fn request(&self, method: &str, path: &str, body: &[u8]) -> Option<String> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            self.port,
            body.len()
        );
        s.write_all(head.as_bytes()).ok()?;
        s.write_all(body).ok()?;
        let mut out = Vec::new();
        s.read_to_end(&mut out).ok()?;
        Some(String::from_utf8_lossy(&out).into_owned())
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
