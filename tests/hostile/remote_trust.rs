//! A shared remote as untrusted input (issue 31, classes 1, 3 and 4): links, folders, FIFOs and
//! foreign files planted in a directory remote, which `gc --remote` leaves alone (and never
//! deletes through); poisoned manifests (an output digest that is not the digest of the file
//! list, a reserved name, a path twice, one object under 10^5 paths, more bytes than the disk
//! has), which `pull` refuses before anything is written while `run` falls back to running
//! locally; and a 4 GiB manifest and FIFOs, refused in bounded memory and time.
//!
//! Each case pushes one honest artifact from a producer workspace to a fresh directory remote,
//! plants or poisons, and runs the binary in a second workspace under the memory and time
//! limits; it asserts the exit code and the message, that what was planted in the remote (and
//! what its links point to, outside) is as it was, and (`Case::finish`) that the workspace's
//! store verifies and nothing outside the workspace changed.

use super::*;
use common::{entry, status};

const YAML: &str = "stages:\n  a:\n    cmd: \"echo honest > $PIPELINE_OUT/a.txt\"\n";

/// A refusal of a remote's artifact takes no longer than this (a debug build on 2 cores).
const QUICK: Duration = Duration::from_secs(20);

/// A directory remote holding the honest artifact of [`YAML`], and a fresh workspace.
struct Remote {
    case: Case,
    dir: tempfile::TempDir,
}

impl Remote {
    fn new() -> Remote {
        let dir = tempfile::tempdir().unwrap();
        let producer = Ws::new(YAML);
        producer.run_ok(&["--no-remote"]);
        let arg = dir.path().display().to_string();
        let v = producer.json(&["push", "--remote", &arg], 0);
        assert_eq!(v["report"]["manifests_sent"], 1, "{v:#}");
        Remote {
            case: Case::new(YAML),
            dir,
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn arg(&self) -> String {
        self.path().display().to_string()
    }

    /// `pipeline ARGS --remote <this remote>` under the limits, within `limit`.
    fn run(&self, args: &[&str], limit: Duration) -> Output {
        let remote = self.arg();
        let t0 = Instant::now();
        let out = self.case.run(&[args, &["--remote", &remote]].concat());
        assert!(t0.elapsed() < limit, "{args:?} took {:?}", t0.elapsed());
        out
    }

    /// The manifest file of `a` on the remote.
    fn manifest(&self) -> PathBuf {
        let fps = std::fs::read_dir(self.path().join("manifests")).unwrap();
        let fp = fps.flatten().next().unwrap().path();
        fp.join("a.json")
    }

    /// Rewrites `a`'s remote manifest with `edit`, compact (as a hostile writer may).
    fn poison(&self, edit: impl FnOnce(&mut Value)) {
        let file = self.manifest();
        let mut v: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        edit(&mut v);
        std::fs::write(&file, serde_json::to_vec(&v).unwrap()).unwrap();
    }

    /// Puts `bytes` on the remote as an object; its digest.
    fn put_object(&self, bytes: &[u8]) -> String {
        let d = blake3::hash(bytes).to_hex().to_string();
        let dir = self.path().join("objects").join(&d[..2]);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(&d[2..]), bytes).unwrap();
        d
    }

    /// The object file of `a.txt`'s honest bytes.
    fn honest_object(&self) -> PathBuf {
        let d = blake3::hash(b"honest\n").to_hex().to_string();
        self.path().join("objects").join(&d[..2]).join(&d[2..])
    }

    /// Nothing entered the store: no artifact, no staging directory, no download area (where
    /// `area` is false; a refused object leaves the area with the objects verified before it,
    /// for the next pull, but nothing of itself).
    fn nothing_written(&self, area: bool) {
        let ws = &self.case.ws;
        let count = |rel: &str| std::fs::read_dir(ws.path(rel)).map_or(0, |d| d.count());
        assert_eq!(count(".pipeline/artifacts"), 0, "an artifact was committed");
        let tmp: Vec<String> = std::fs::read_dir(ws.path(".pipeline/tmp"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            tmp.iter()
                .all(|n| !n.starts_with("pull-") && (area || n != "downloads")),
            "{tmp:?}"
        );
        let honest = blake3::hash(b"honest\n").to_hex().to_string();
        let downloads = std::fs::read_dir(ws.path(".pipeline/tmp/downloads"));
        for e in downloads.into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            assert!(!name.starts_with(&honest), "{name} was kept");
        }
        let s = self.case.ws.json(&["status", "--no-remote"], 0);
        assert_ne!(status(&s, "a"), "fresh", "{s:#}");
    }

    /// `run` with the remote warns about it and runs `a` here, from honest bytes.
    fn run_falls_back(&self, needle: &str) {
        let out = self.run(&["run", "--json"], TIME);
        expect(&out, 0, needle);
        assert!(out.stderr.contains("running it here"), "{}", out.describe());
        let v = out.json();
        assert_eq!(entry(&v, "a")["status"], "ran", "{v:#}");
        let a = common::artifact(&v, "a").join("a.txt");
        assert_eq!(std::fs::read_to_string(a).unwrap(), "honest\n");
    }

    /// The remote's entries under `rels` (links as their targets, FIFOs by kind only: reading
    /// one would block), for before/after checks.
    fn planted(&self, rels: &[&str]) -> BTreeMap<PathBuf, (String, Vec<u8>)> {
        fn go(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, (String, Vec<u8>)>) {
            for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let path = e.path();
                let rel = path.strip_prefix(root).unwrap().to_path_buf();
                let kind = e.file_type().unwrap();
                let entry = if kind.is_symlink() {
                    let target = std::fs::read_link(&path).unwrap();
                    ("link".into(), target.to_string_lossy().as_bytes().to_vec())
                } else if kind.is_dir() {
                    go(root, &path, out);
                    ("dir".into(), Vec::new())
                } else if kind.is_file() {
                    ("file".into(), std::fs::read(&path).unwrap())
                } else {
                    ("other".into(), Vec::new())
                };
                out.insert(rel, entry);
            }
        }
        let mut all = BTreeMap::new();
        go(self.path(), self.path(), &mut all);
        all.retain(|p, _| rels.iter().any(|r| p.to_string_lossy().starts_with(r)));
        assert!(!all.is_empty(), "nothing planted under {rels:?}");
        all
    }

    fn finish(self) {
        self.case.finish();
    }
}

fn touch_old(path: &Path) {
    let ok = Command::new("touch")
        .args(["-h", "-d", "3 hours ago"])
        .arg(path)
        .status()
        .unwrap();
    assert!(ok.success());
}

fn mkfifo(path: &Path) {
    let _ = std::fs::remove_file(path);
    let ok = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(ok.success());
}

fn left_alone(v: &Value) -> Vec<String> {
    let list = v["report"]["left_alone"].as_array().unwrap();
    list.iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Class 1: `gc --remote` deletes only what it wrote, never through a link.

#[test]
fn remote_gc_leaves_a_symlinked_object_and_its_target() {
    let r = Remote::new();
    let fake = "ab".to_string() + &"c".repeat(62);
    let dir = r.path().join("objects/ab");
    std::fs::create_dir_all(&dir).unwrap();
    // Named like an object, pointing at the member's own file; and one named otherwise.
    std::os::unix::fs::symlink(r.case.out().join("keep.txt"), dir.join(&fake[2..])).unwrap();
    std::os::unix::fs::symlink(r.case.out().join("sub"), dir.join("other")).unwrap();
    touch_old(&dir.join(&fake[2..]));
    let before = r.planted(&["objects/ab"]);
    // The default --min-age, as a member types it.
    let out = r.run(&["gc"], QUICK);
    expect(&out, 0, &format!("left alone objects/ab/{}", &fake[2..]));
    assert!(
        out.stdout.contains("left alone objects/ab/other"),
        "{}",
        out.describe()
    );
    let v = r.run(&["gc", "--min-age", "0s", "--json"], QUICK);
    expect(&v, 0, "left_alone");
    let listed = left_alone(&v.json());
    assert!(
        listed.contains(&format!("objects/ab/{}", &fake[2..])),
        "{listed:?}"
    );
    assert_eq!(r.planted(&["objects/ab"]), before, "a planted link changed");
    r.finish();
}

#[test]
fn remote_gc_leaves_symlinked_manifests_and_manifest_folders() {
    let mut r = Remote::new();
    let real = r.manifest();
    let fp = "0123456789abcdef0123456789abcdef";
    let dir = r.path().join("manifests").join(fp);
    std::fs::create_dir_all(&dir).unwrap();
    let target = r.case.out().join("sub/deeper/data.bin");
    std::os::unix::fs::symlink(&target, dir.join("a.json")).unwrap();
    // A whole fingerprint folder that is a link to the member's folder, which holds a file
    // named like a manifest.
    let fp2 = "fedcba9876543210fedcba9876543210";
    std::fs::write(r.case.out().join("sub/x.json"), "{}").unwrap();
    touch_old(&r.case.out().join("sub/x.json"));
    r.case.before = snapshot(r.case.out());
    let link = r.path().join("manifests").join(fp2);
    std::os::unix::fs::symlink(r.case.out().join("sub"), link).unwrap();
    let before = r.planted(&["manifests/0123", "manifests/fedc"]);
    let out = r.run(&["gc", "--min-age", "0s", "--json"], QUICK);
    expect(&out, 0, "left_alone");
    let listed = left_alone(&out.json());
    assert!(
        listed.contains(&format!("manifests/{fp}/a.json")),
        "{listed:?}"
    );
    assert!(listed.contains(&format!("manifests/{fp2}")), "{listed:?}");
    assert_eq!(r.planted(&["manifests/0123", "manifests/fedc"]), before);
    // The real manifest (no local artifact holds it, older than 0s) did go.
    assert!(!real.exists(), "{}", out.describe());
    r.finish();
}

#[test]
fn remote_gc_never_deletes_through_a_symlinked_object_folder() {
    let mut r = Remote::new();
    // objects/ab -> the member's folder, which holds a file named like an object's tail.
    let tail = "d".repeat(62);
    let mine = r.case.out().join("sub/deeper");
    std::fs::write(mine.join(&tail), b"the member's own file").unwrap();
    touch_old(&mine.join(&tail));
    r.case.before = snapshot(r.case.out());
    std::os::unix::fs::symlink(&mine, r.path().join("objects/ab")).unwrap();
    for args in [
        &["gc", "--min-age", "0s"][..],
        &["gc", "--min-age", "0s", "--all"][..],
    ] {
        let out = r.run(args, QUICK);
        expect(&out, 0, "left alone objects/ab ");
        assert!(!out.stdout.contains(&tail), "{}", out.describe());
    }
    assert!(mine.join(&tail).exists(), "deleted through the link");
    assert!(r.path().join("objects/ab").is_symlink());
    r.finish();
}

#[test]
fn remote_gc_leaves_a_folder_and_a_fifo_named_like_objects() {
    let r = Remote::new();
    let d = blake3::hash(b"gone").to_hex().to_string();
    let folder = r.path().join("objects").join(&d[..2]).join(&d[2..]);
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(folder.join("inside.txt"), b"someone's").unwrap();
    let e = blake3::hash(b"fifo").to_hex().to_string();
    std::fs::create_dir_all(r.path().join("objects").join(&e[..2])).unwrap();
    let fifo = r.path().join("objects").join(&e[..2]).join(&e[2..]);
    mkfifo(&fifo);
    touch_old(&folder);
    let planted = [&folder, &fifo].map(|p| p.strip_prefix(r.path()).unwrap().display().to_string());
    let planted: Vec<&str> = planted.iter().map(String::as_str).collect();
    let before = r.planted(&planted);
    let out = r.run(&["gc", "--min-age", "0s", "--json"], QUICK);
    expect(&out, 0, "left_alone");
    let listed = left_alone(&out.json());
    for p in [&folder, &fifo] {
        let rel = p.strip_prefix(r.path()).unwrap().display().to_string();
        assert!(listed.contains(&rel), "{rel} not in {listed:?}");
    }
    assert_eq!(r.planted(&planted), before);
    r.finish();
}

#[test]
fn remote_gc_leaves_foreign_names_and_still_removes_orphans() {
    let r = Remote::new();
    let orphan = r.put_object(b"an orphan the tool wrote\n");
    let upper = blake3::hash(b"upper").to_hex().to_string().to_uppercase();
    let fp = r.manifest().parent().unwrap().to_path_buf();
    let foreign = [
        r.path().join("objects/ab/notes.txt"),
        r.path().join("objects").join(&upper[..2]).join(&upper[2..]),
        fp.join("a.json.bak"),
        r.path().join("manifests/readme.txt"),
        r.path().join("objects/readme.txt"),
    ];
    for f in &foreign {
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, b"a colleague's file").unwrap();
    }
    for f in foreign.iter().map(PathBuf::as_path).chain([fp.as_path()]) {
        touch_old(f);
    }
    let orphan_file = r
        .path()
        .join("objects")
        .join(&orphan[..2])
        .join(&orphan[2..]);
    touch_old(&orphan_file);
    let out = r.run(&["gc", "--min-age", "0s", "--json"], QUICK);
    expect(&out, 0, "left_alone");
    let v = out.json();
    let listed = left_alone(&v);
    for f in &foreign {
        let rel = f.strip_prefix(r.path()).unwrap().display().to_string();
        assert!(listed.contains(&rel), "{rel} not in {listed:?}");
        assert_eq!(std::fs::read(f).unwrap(), b"a colleague's file");
    }
    let objects = v["report"]["objects"].as_array().unwrap();
    assert!(
        objects
            .iter()
            .any(|o| o.as_str().unwrap().ends_with(&orphan[2..])),
        "{v:#}"
    );
    assert!(!orphan_file.exists(), "the tool's own orphan is removed");
    r.finish();
}

// ---------------------------------------------------------------------------------------------
// Class 3: a pulled artifact is checked as a committed one is, before anything is written.

#[test]
fn remote_poisoned_output_digest_is_refused_and_run_falls_back() {
    let r = Remote::new();
    // Other bytes, whose object is honest (its digest matches), under the honest-looking
    // manifest: the output digest and the fingerprint are the producer's.
    let poison = r.put_object(b"poison\n");
    r.poison(|v| {
        v["manifest"]["files"][0]["blake3"] = poison.clone().into();
        v["manifest"]["files"][0]["size"] = 7.into();
    });
    let out = r.run(&["pull"], QUICK);
    expect(&out, 1, "is not the digest of the listed files");
    assert!(
        out.stderr.contains("a.json"),
        "names the manifest: {}",
        out.describe()
    );
    r.nothing_written(false);
    r.run_falls_back("is not the digest of the listed files");
    r.finish();
}

#[test]
fn remote_manifest_naming_a_reserved_file_is_refused() {
    let r = Remote::new();
    r.poison(|v| {
        let files = v["manifest"]["files"].as_array_mut().unwrap();
        let mut reserved = files[0].clone();
        reserved["path"] = "MANIFEST.json".into();
        files.push(reserved);
        let set: Vec<(String, String)> = files
            .iter()
            .map(|f| {
                (
                    f["path"].as_str().unwrap().into(),
                    f["blake3"].as_str().unwrap().into(),
                )
            })
            .collect();
        v["manifest"]["output_digest"] = digest_of_set(&set).into();
    });
    let out = r.run(&["pull"], QUICK);
    expect(
        &out,
        1,
        "\"MANIFEST.json\" is a name the store reserves for itself",
    );
    assert!(
        !out.stderr.contains("output digest"),
        "the digest was right: {}",
        out.describe()
    );
    r.nothing_written(false);
    r.run_falls_back("reserves");
    r.finish();
}

#[test]
fn remote_manifest_listing_a_path_twice_is_refused() {
    let r = Remote::new();
    r.poison(|v| {
        let files = v["manifest"]["files"].as_array_mut().unwrap();
        let twice = files[0].clone();
        files.push(twice);
    });
    let out = r.run(&["pull"], QUICK);
    expect(&out, 1, "\"a.txt\" is listed twice");
    r.nothing_written(false);
    r.run_falls_back("listed twice");
    r.finish();
}

#[test]
fn remote_log_paths_leaving_the_log_folder_are_refused() {
    let r = Remote::new();
    r.poison(|v| {
        let mut log = v["manifest"]["files"][0].clone();
        log["path"] = "../../../escape.txt".into();
        v["logs"] = Value::Array(vec![log.clone(), log]);
    });
    let out = r.run(&["pull"], QUICK);
    expect(&out, 1, "is not a relative path inside the log directory");
    r.nothing_written(false);
    assert!(!r.case.ws.path("escape.txt").exists());
    r.finish();
}

#[test]
fn remote_one_object_under_100k_paths_is_refused_quickly() {
    let r = Remote::new();
    r.poison(|v| {
        let one = v["manifest"]["files"][0].clone();
        let files: Vec<Value> = (0..100_000)
            .map(|i| {
                let mut f = one.clone();
                f["path"] = format!("f{i}").into();
                f
            })
            .collect();
        v["manifest"]["files"] = Value::Array(files);
    });
    let out = r.run(&["pull"], QUICK);
    expect(
        &out,
        1,
        "it lists 100002 files, more than the 50000 a pull takes",
    );
    r.nothing_written(false);
    r.run_falls_back("more than the 50000");
    r.finish();
}

#[test]
fn remote_artifact_larger_than_the_free_disk_is_refused_before_download() {
    let r = Remote::new();
    // 512 GiB claimed (under the 1 TiB bound, over a test machine's free disk): the size is no
    // part of the output digest, so only the free-space check stands in the way.
    r.poison(|v| v["manifest"]["files"][0]["size"] = (1u64 << 39).into());
    let out = r.run(&["pull"], QUICK);
    expect(&out, 1, "MB free");
    r.nothing_written(false);
    r.run_falls_back("MB free");
    r.finish();
}

// ---------------------------------------------------------------------------------------------
// Class 4 (remote half): every read of the remote is bounded, and a FIFO does not block.

#[test]
fn remote_4gib_manifest_is_refused_in_bounded_memory() {
    let r = Remote::new();
    // Sparse: no disk, but a reader that takes it whole needs 4 GiB (over the 3 GiB limit).
    let f = std::fs::File::create(r.manifest()).unwrap();
    f.set_len(4 << 30).unwrap();
    drop(f);
    let out = r.run(&["pull"], QUICK);
    expect(
        &out,
        1,
        "larger than 16 MiB, the limit for a remote manifest",
    );
    assert!(out.stderr.contains("a.json"), "{}", out.describe());
    r.nothing_written(false);
    let out = r.run(&["status", "--json"], QUICK);
    expect(&out, 0, "larger than 16 MiB");
    assert_ne!(entry(&out.json(), "a")["status"], "in-remote");
    r.run_falls_back("larger than 16 MiB");
    r.finish();
}

#[test]
fn remote_fifo_in_place_of_an_object_does_not_hang() {
    let r = Remote::new();
    mkfifo(&r.honest_object());
    let out = r.run(&["pull"], QUICK);
    expect(&out, 1, "is a FIFO");
    assert!(out.stderr.contains("is corrupt"), "{}", out.describe());
    r.nothing_written(true);
    r.run_falls_back("is a FIFO");
    r.finish();
}

#[test]
fn remote_fifo_in_place_of_a_manifest_does_not_hang() {
    let r = Remote::new();
    mkfifo(&r.manifest());
    // Not a regular file: not listed, so `pull` finds nothing to pull...
    let out = r.run(&["pull", "--json"], QUICK);
    expect(&out, 0, "\"missing\"");
    assert_eq!(out.json()["pulled"].as_array().unwrap().len(), 0);
    r.nothing_written(false);
    // ...and `run`, which asks for the manifest by name, is refused it at once.
    r.run_falls_back("is a FIFO");
    r.finish();
}

#[test]
fn remote_object_that_is_a_link_is_not_followed() {
    let r = Remote::new();
    // A link to a file outside that holds the honest bytes: still not read through.
    let honest = r.case.out().join("honest.txt");
    std::fs::write(&honest, b"honest\n").unwrap();
    let mut r = r;
    r.case.before = snapshot(r.case.out());
    let object = r.honest_object();
    std::fs::remove_file(&object).unwrap();
    std::os::unix::fs::symlink(&honest, &object).unwrap();
    let out = r.run(&["pull"], QUICK);
    expect(&out, 1, "symbolic link");
    r.nothing_written(true);
    r.run_falls_back("symbolic link");
    assert!(object.is_symlink());
    r.finish();
}

/// The store's output digest of a file list, as the engine computes it.
fn digest_of_set(entries: &[(String, String)]) -> String {
    pipeline_engine::hash::digest_of_set(entries.iter().map(|(n, d)| (n.as_str(), d.as_str())))
}

#[test]
fn remote_push_never_writes_through_a_symlinked_folder() {
    let c = Case::new(YAML);
    let remote = tempfile::tempdir().unwrap();
    let d = blake3::hash(b"honest\n").to_hex().to_string();
    std::fs::create_dir_all(remote.path().join("objects")).unwrap();
    let link = remote.path().join("objects").join(&d[..2]);
    std::os::unix::fs::symlink(c.out().join("sub"), &link).unwrap();
    c.ws.run_ok(&["--no-remote"]);
    let arg = remote.path().display().to_string();
    let out = c.run(&["push", "--remote", &arg]);
    expect(&out, 1, "is a symbolic link");
    assert!(out.stderr.contains("not written"), "{}", out.describe());
    assert!(link.is_symlink());
    assert_eq!(
        std::fs::read_dir(remote.path().join("manifests")).map_or(0, |d| d.count()),
        0,
        "no manifest names what is not there"
    );
    c.finish();
}

#[test]
fn remote_gc_prints_planted_names_escaped() {
    let r = Remote::new();
    let dir = r.path().join("objects/ab");
    std::fs::create_dir_all(&dir).unwrap();
    let name = "\u{1b}]0;pwned\u{7}";
    std::fs::write(dir.join(name), b"x").unwrap();
    let out = r.run(&["gc", "--min-age", "0s", "--dry-run"], QUICK);
    expect(&out, 0, "left alone objects/ab/");
    assert!(!out.stdout.contains('\u{1b}'), "{}", out.describe());
    assert!(dir.join(name).exists());
    r.finish();
}
