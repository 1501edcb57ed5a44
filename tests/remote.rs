//! Remotes: `push`, `pull`, `run` with a remote as its cache, `status` saying "in remote",
//! `gc --remote`; against a directory remote always and against moto's S3 server (DVC's own
//! S3 test server, `pip install "moto[server]"`) where it starts.

mod common;
mod remote_support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use remote_support::*;

/// `seq 1 50000`: numbers.txt of [`SMALL`]'s `a` and `c`.
fn seq_numbers() -> Vec<u8> {
    Command::new("seq")
        .args(["1", "50000"])
        .output()
        .unwrap()
        .stdout
}

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
    // numbers.txt of a and c is one object, fetched once.
    let t = &v["transfer"];
    assert_eq!(t["bytes_fetched"], t["bytes"], "{v:#}");
    let numbers = seq_numbers().len() as u64;
    assert!(
        t["bytes"].as_u64().unwrap() + numbers <= v["bytes"].as_u64().unwrap(),
        "{v:#}"
    );
    assert!(
        !b.path(".pipeline/tmp/downloads").exists(),
        "the download area is emptied once its objects are committed"
    );
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
    let numbers = blake3::hash(&seq_numbers()).to_hex().to_string();
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
        let tmp: Vec<_> = std::fs::read_dir(b.path(".pipeline/tmp"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            tmp.iter().all(|n| n == "downloads"),
            "no staging directory is left: {tmp:?}"
        );
        // The verified objects stay for the next pull; nothing of the corrupt one does.
        assert!(
            !downloads(&b).iter().any(|(n, _)| n.starts_with(&numbers)),
            "{:?}",
            downloads(&b)
        );
        // A run with the remote falls back to running the stage.
        let v = b.run_ok(&["c", "--remote", &remote]);
        assert_status(&v, "c", "ran");
        // `gc` removes what the failed pull left in the download area.
        assert!(!downloads(&b).is_empty());
        b.json(&["gc"], 0);
        assert!(!b.path(".pipeline/tmp/downloads").exists());
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

#[test]
fn status_takes_remote_and_no_remote() {
    let store = tempfile::tempdir().unwrap();
    let remote = store.path().display().to_string();
    let a = Ws::new(SMALL);
    a.run_ok(&[]);
    a.json(&["push", "--remote", &remote], 0);

    let b = Ws::new(&format!("remotes:\n  nfs: {remote}\n{SMALL}"));
    let in_remote = |args: &[&str], env: &[(&str, String)]| {
        let s = json_env(&b, &[&["status"], args].concat(), env, 0);
        status(&s, "b") == "in-remote"
    };
    // No PIPELINE_REMOTE: the flag, else the file's one remote (its default).
    assert!(in_remote(&["--remote", &remote], &[]));
    assert!(in_remote(&["--remote", "nfs"], &[]));
    assert!(in_remote(&[], &[]));
    assert!(!in_remote(&["--no-remote"], &[]));
    let none = [("PIPELINE_REMOTE", "none".to_string())];
    assert!(
        !in_remote(&[], &none),
        "PIPELINE_REMOTE=none asks no remote"
    );
    assert!(in_remote(&["--remote", "nfs"], &none), "the flag wins");
    let elsewhere = tempfile::tempdir().unwrap();
    let other = [("PIPELINE_REMOTE", elsewhere.path().display().to_string())];
    assert!(
        !in_remote(&[], &other),
        "the environment overrides the file"
    );

    let out = run_env(&b, &["status", "--remote", "nsf"], &[]);
    out.expect_code(2).assert_no_panic();
    assert!(
        out.stderr.contains("did you mean `nfs`"),
        "{}",
        out.describe()
    );
    let out = run_env(&b, &["status", "--remote", "nfs", "--no-remote"], &[]);
    out.expect_code(2);
}

#[test]
fn a_pull_killed_midway_is_resumed_without_refetching() {
    // 48 files of 2 MB: long enough on a directory remote to be killed in the middle.
    let yaml = r#"
stages:
  big:
    cmd: "for i in $(seq 1 48); do head -c 2000000 /dev/urandom > $PIPELINE_OUT/f$i; done"
  tiny:
    cmd: "echo tiny > $PIPELINE_OUT/t.txt"
"#;
    let store = tempfile::tempdir().unwrap();
    let remote = store.path().display().to_string();
    let a = Ws::new(yaml);
    a.run_ok(&["big"]);
    a.json(&["push", "--remote", &remote], 0);

    let b = Ws::new(yaml);
    let mut child = b
        .command(&["pull", "--remote", &remote])
        .env_remove("PIPELINE_REMOTE")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let whole = |ws: &Ws| {
        downloads(ws)
            .iter()
            .filter(|(n, _)| !n.ends_with(".partial"))
            .count()
    };
    while whole(&b) == 0 && t0.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(1));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    if artifact_count(&b) > 0 {
        eprintln!("note: the first pull finished before it was killed");
        return;
    }
    let arrived: u64 = downloads(&b).iter().map(|(_, len)| len).sum();
    let complete = whole(&b);
    assert!(complete > 0);
    eprintln!("killed with {complete} whole objects and {arrived} bytes in the download area");
    // A run's start clears tmp/ of what killed runs left, but not the download area.
    let before = downloads(&b);
    b.run_ok(&["tiny", "--no-remote"]);
    assert_eq!(downloads(&b), before);

    let v = b.json(&["pull", "--remote", &remote], 0);
    assert_eq!(v["pulled"].as_array().unwrap().len(), 1, "{v:#}");
    let t = &v["transfer"];
    let n = |k: &str| t[k].as_u64().unwrap();
    // Nothing that arrived is fetched again: whole objects, and the start of those cut.
    assert_eq!(n("bytes_fetched") + arrived, n("bytes"), "{v:#}");
    assert!(
        n("objects_fetched") + complete as u64 <= n("objects"),
        "{v:#}"
    );
    assert!(!b.path(".pipeline/tmp/downloads").exists());
    let v = b.run_ok(&["big", "--no-remote"]);
    assert_eq!(v["counts"]["ran"], 0, "{v:#}");
    let (here, there) = (artifact(&v, "big"), a.run_ok(&["big"]));
    for i in [1, 24, 48] {
        let f = format!("f{i}");
        assert_eq!(
            digest(&here.join(&f)),
            digest(&artifact(&there, "big").join(&f))
        );
    }
}

#[test]
fn files_bigger_than_one_part_go_up_in_parts() {
    let store = tempfile::tempdir().unwrap();
    multipart_round_trip(&store.path().display().to_string(), &[]);
    // The aborted upload left no staging file.
    let staging = walk(store.path())
        .into_iter()
        .filter(|p| p.to_string_lossy().contains('#'))
        .collect::<Vec<_>>();
    assert!(staging.is_empty(), "{staging:?}");
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

    // What pushes killed midway left of their uploads (object_store's `<object>#<n>`, which
    // its listing leaves out): what is older than --min-age goes.
    let name = "c".repeat(62);
    let dir = store.path().join("objects/ab");
    std::fs::create_dir_all(&dir).unwrap();
    let (stale, young) = (dir.join(format!("{name}#1")), dir.join(format!("{name}#2")));
    std::fs::write(&stale, b"part").unwrap();
    std::fs::write(&young, b"part").unwrap();
    let touched = Command::new("touch")
        .args(["-d", "2 hours ago"])
        .arg(&stale)
        .status()
        .unwrap();
    assert!(touched.success());
    let out = a.run(&["gc", "--remote", &remote, "--dry-run"]);
    out.expect_code(0);
    let line = format!("would remove objects/ab/{name}#1 (an unfinished upload)");
    assert!(out.stdout.contains(&line), "{}", out.describe());
    assert!(!out.stdout.contains("#2"), "{}", out.describe());
    assert!(stale.exists(), "a dry run removes nothing");
    let v = a.json(&["gc", "--remote", &remote], 0);
    assert_eq!(v["report"]["uploads"].as_array().unwrap().len(), 1, "{v:#}");
    assert!(!stale.exists() && young.exists());
}

/// The default pipeline, narrowed to the fewest instances that still hold every stage kind,
/// run once, pushed to a directory remote and to S3, pulled into fresh workspaces whose runs
/// then run nothing.
#[test]
fn the_default_pipeline_travels_to_fresh_workspaces() {
    // Every command of this test uses one binary: when a build in the same checkout relinked
    // target/debug/pipeline halfway through (with finetune's code edited, say), push found the
    // finetune instances and the report stale ("code of stage kind finetune changed").
    let pinned = PinnedBinary::new();
    let bin = pinned.path();
    let repo = env!("CARGO_MANIFEST_DIR");
    let yaml = read(format!("{repo}/pipeline.yaml"));
    let a = Ws::new(&yaml);
    let sets = default_pipeline_sets(&bin, &a, &yaml);
    let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
    let cmd = |ws: &Ws, args: &[&str], env: &[(&str, String)]| {
        let out = run_bin(&bin, ws, &[args, &sets, &["--json"]].concat(), env);
        out.expect_code(0).assert_no_panic();
        out.json()
    };
    let v = cmd(&a, &["run"], &[]);
    assert_eq!(v["counts"]["failed"], 0, "{v:#}");
    let total = v["stages"].as_array().unwrap().len();

    let store = tempfile::tempdir().unwrap();
    let mut remotes = vec![(store.path().display().to_string(), Vec::new())];
    let server = Moto::start();
    if let Some(s) = &server {
        remotes.push((format!("s3://{}/lab", s.bucket), s.env()));
    }
    for (remote, env) in &remotes {
        let v = cmd(&a, &["push", "--remote", remote], env);
        assert_eq!(v["report"]["manifests_sent"], total, "{v:#}");
        let b = Ws::new(&yaml);
        let v = cmd(&b, &["pull", "--remote", remote], env);
        assert_eq!(v["pulled"].as_array().unwrap().len(), total, "{v:#}");
        let v = cmd(&b, &["run", "--no-remote"], env);
        assert_eq!(
            v["counts"]["ran"], 0,
            "{remote}: a pulled workspace re-ran: {v:#}"
        );
        let c = Ws::new(&yaml);
        let v = cmd(&c, &["run", "--remote", remote], env);
        assert_eq!(v["counts"]["ran"], 0, "{remote}: run did not pull: {v:#}");
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
    server.boto3(&format!(
        "s3.put_object(Bucket=bucket, Key='{key}', Body=b'corrupt')"
    ));
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
    let note = v["report"]["note"].as_str().unwrap_or_default();
    assert!(note.contains("AbortIncompleteMultipartUpload"), "{v:#}");
}

#[test]
fn s3_files_bigger_than_one_part_go_up_in_parts() {
    let Some(server) = Moto::start() else { return };
    let remote = format!("s3://{}/parts", server.bucket);
    multipart_round_trip(&remote, &server.env());
    // S3 gives an object completed from parts an ETag "<md5>-<parts>".
    let etags = server.boto3(
        "for o in s3.list_objects_v2(Bucket=bucket, Prefix='parts/objects/')['Contents']:\n    print(o['Size'], o['ETag'])",
    );
    assert!(
        etags
            .lines()
            .any(|l| l.starts_with("17000000 ") && l.ends_with("-2\"")),
        "{etags}"
    );
    // The push whose file changed aborted its upload: none is left open.
    let open =
        server.boto3("print(len(s3.list_multipart_uploads(Bucket=bucket).get('Uploads', [])))");
    assert_eq!(open.trim(), "0", "unfinished multipart uploads remain");
}
