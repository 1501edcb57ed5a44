//! What `verify` and `gc` do with entries of the store they did not make, and output digests
//! checked (issue 31, classes 2 and 3). An entry is the store's only when its name, its kind (a
//! directory, no symlink on the way) and a marker or its own manifest say so
//! (`crates/engine/src/owned.rs`); everything else is listed as left alone and stays, through
//! `verify` and `gc` alike. An artifact of the store's whose manifest does not hold together (an
//! output digest that is not its files', a reserved name, a path twice, an unreadable manifest)
//! is corrupt: quarantined, exit 1, and made again by the next run.

use super::*;

/// A fingerprint-shaped name no run of these pipelines gives.
const STRANGER_FP: &str = "0123456789abcdef0123456789abcdef";

/// Runs `ONE_STAGE` and returns its artifact directory.
fn committed(c: &Case) -> PathBuf {
    let v = c.ws.json(&["run"], 0);
    PathBuf::from(stage_json(&v, "a")["artifact"].as_str().unwrap())
}

/// `verify --json` under the limits: asserts the exit code and returns the report.
fn verify_json(c: &Case, code: i32) -> Value {
    let out = c.run(&["verify", "--json"]);
    out.expect_code(code);
    out.json()
}

/// The `left_alone` entries of a verify report whose path ends with `tail`, with their reason.
fn left_alone<'a>(report: &'a Value, tail: &str) -> Vec<&'a str> {
    report["left_alone"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["path"].as_str().unwrap().ends_with(tail))
        .map(|l| l["why"].as_str().unwrap())
        .collect()
}

/// Edits the artifact's MANIFEST.json in place.
fn edit_manifest(dir: &Path, edit: impl FnOnce(&mut Value)) {
    let path = dir.join("MANIFEST.json");
    let mut m: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    edit(&mut m);
    std::fs::write(&path, serde_json::to_vec_pretty(&m).unwrap()).unwrap();
}

/// After a corrupt artifact was quarantined: it is gone from the store, the next run makes it
/// again with its honest content, and `gc` empties the quarantine.
fn remade_after_quarantine(c: &Case, dir: &Path, report: &Value) {
    assert!(!dir.exists(), "the corrupt artifact is still in the store");
    let moved = PathBuf::from(report["corrupt"][0]["quarantined_to"].as_str().unwrap());
    assert!(
        moved.starts_with(c.ws.path(".pipeline/quarantine")),
        "{report:#}"
    );
    let v = c.ws.json(&["run"], 0);
    assert_eq!(stage_json(&v, "a")["status"], "ran", "{v:#}");
    assert_eq!(std::fs::read_to_string(dir.join("a.txt")).unwrap(), "a\n");
    expect(&c.run(&["gc"]), 0, "removed");
    assert!(!moved.exists(), "gc left the quarantined copy");
}

#[test]
fn store_notes_folder_in_artifacts_is_left_alone_by_verify_and_gc() {
    let c = Case::new(ONE_STAGE);
    let dir = committed(&c);
    // In the instance folder the store made, and in one it did not.
    c.ws.write(".pipeline/artifacts/a/notes/todo.txt", "my notes\n");
    c.ws.write(".pipeline/artifacts/mine/notes/todo.txt", "more notes\n");
    let notes = snapshot(&c.ws.path(".pipeline/artifacts"));

    let out = c.run(&["verify"]);
    expect(&out, 0, "left alone: ");
    assert!(
        out.stdout.contains("its name is not one the store gives"),
        "{}",
        out.describe()
    );
    assert!(
        out.stdout
            .contains("1 artifacts: 0 corrupt; left alone 2 entries"),
        "{}",
        out.describe()
    );
    let report = verify_json(&c, 0);
    assert_eq!(report["ok"], true);
    assert_eq!(report["checked"], 1);
    assert_eq!(left_alone(&report, "a/notes").len(), 1, "{report:#}");
    assert_eq!(left_alone(&report, "mine/notes").len(), 1, "{report:#}");
    assert!(
        snapshot(&c.ws.path(".pipeline/artifacts")) == notes,
        "verify changed artifacts/"
    );

    // Nothing references a's artifact any more: gc removes it, and only it.
    c.ws.set_yaml("stages:\n  z:\n    cmd: 'true'\n");
    let gc = c.run(&["gc"]);
    expect(&gc, 0, "removed 1 directory");
    assert!(gc.stdout.contains("notes alone"), "{}", gc.describe());
    assert!(!dir.exists());
    for f in ["a/notes/todo.txt", "mine/notes/todo.txt"] {
        let path = c.ws.path(&format!(".pipeline/artifacts/{f}"));
        assert!(path.is_file(), "gc removed {f}");
    }
    c.finish();
}

#[test]
fn store_artifacts_symlinked_to_a_scratch_disk_keeps_another_projects_folders() {
    let c = Case::new(ONE_STAGE);
    let scratch = tempfile::tempdir().unwrap();
    let s = scratch.path();
    std::fs::create_dir_all(s.join("other-project/results")).unwrap();
    std::fs::write(s.join("other-project/results/table.csv"), "x,y\n1,2\n").unwrap();
    std::fs::create_dir_all(s.join(format!("other-project/{STRANGER_FP}"))).unwrap();
    std::fs::write(
        s.join(format!("other-project/{STRANGER_FP}/w.bin")),
        [1u8; 1000],
    )
    .unwrap();
    std::fs::create_dir_all(s.join("empty-of-someone")).unwrap();
    std::fs::write(s.join("README"), "shared scratch\n").unwrap();
    std::os::unix::fs::symlink(c.out(), s.join("outside-link")).unwrap();
    let before = snapshot(s);
    std::fs::create_dir_all(c.ws.path(".pipeline")).unwrap();
    std::os::unix::fs::symlink(s, c.ws.path(".pipeline/artifacts")).unwrap();

    let dir = committed(&c);
    let report = verify_json(&c, 0);
    assert_eq!(report["checked"], 1, "{report:#}");
    for tail in [
        "other-project/results",
        &format!("other-project/{STRANGER_FP}"),
    ] {
        assert_eq!(left_alone(&report, tail).len(), 1, "{tail}: {report:#}");
    }
    assert!(
        left_alone(&report, "README")[0].contains("not a folder"),
        "{report:#}"
    );
    assert!(
        left_alone(&report, "outside-link")[0].contains("symlink"),
        "{report:#}"
    );

    c.ws.set_yaml("stages:\n  z:\n    cmd: 'true'\n");
    expect(&c.run(&["gc"]), 0, "removed 1 directory");
    assert!(!dir.exists());
    assert!(
        snapshot(s) == before,
        "verify or gc changed the scratch disk"
    );
    c.finish();
}

#[test]
fn store_fingerprint_named_folder_in_an_unmarked_folder_is_left_alone() {
    let c = Case::new(ONE_STAGE);
    committed(&c);
    let rel = format!(".pipeline/artifacts/stranger/{STRANGER_FP}/data.txt");
    c.ws.write(&rel, "not an artifact\n");
    let out = c.run(&["verify"]);
    expect(
        &out,
        0,
        "no .pipeline-owned marker in it or its instance folder",
    );
    assert!(out.stdout.contains("0 corrupt"), "{}", out.describe());
    c.ws.set_yaml("stages:\n  z:\n    cmd: 'true'\n");
    let gc = c.run(&["gc"]);
    expect(&gc, 0, "did not make it");
    assert_eq!(
        std::fs::read_to_string(c.ws.path(&rel)).unwrap(),
        "not an artifact\n"
    );
    c.finish();
}

#[test]
fn store_half_written_artifact_in_a_marked_folder_is_quarantined() {
    let c = Case::new(ONE_STAGE);
    committed(&c);
    // The store made the instance folder `a`: a fingerprint-named folder in it without a
    // manifest is a commit cut short, the store's own, and corrupt.
    let half = c.ws.path(&format!(".pipeline/artifacts/a/{STRANGER_FP}"));
    std::fs::create_dir_all(&half).unwrap();
    std::fs::write(half.join("a.txt"), "half\n").unwrap();
    let out = c.run(&["verify"]);
    expect(&out, 1, "MANIFEST.json is missing");
    assert!(
        out.stdout.contains("2 artifacts: 1 corrupt"),
        "{}",
        out.describe()
    );
    assert!(!half.exists());
    expect(&c.run(&["gc"]), 0, "(quarantined)");
    c.finish();
}

#[test]
fn store_symlinks_named_like_artifacts_are_left_alone() {
    let c = Case::new(ONE_STAGE);
    let dir = committed(&c);
    let instance = dir.parent().unwrap();
    std::os::unix::fs::symlink(c.out(), instance.join(STRANGER_FP)).unwrap();
    std::os::unix::fs::symlink(instance, c.ws.path(".pipeline/artifacts/evil")).unwrap();
    let report = verify_json(&c, 0);
    assert_eq!(report["checked"], 1, "{report:#}");
    assert!(
        left_alone(&report, STRANGER_FP)[0].contains("it is a symlink"),
        "{report:#}"
    );
    assert!(
        left_alone(&report, "evil")[0].contains("symlink"),
        "{report:#}"
    );
    c.ws.set_yaml("stages:\n  z:\n    cmd: 'true'\n");
    expect(&c.run(&["gc"]), 0, "symlink");
    // The artifact went; the links and what they point to stay.
    assert!(!dir.exists());
    let link = instance.join(STRANGER_FP);
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert!(std::fs::symlink_metadata(c.ws.path(".pipeline/artifacts/evil")).is_ok());
    c.finish();
}

#[test]
fn store_regular_file_where_an_artifact_folder_should_be_is_left_alone() {
    let c = Case::new(ONE_STAGE);
    let dir = committed(&c);
    let file = dir.parent().unwrap().join(STRANGER_FP);
    std::fs::write(&file, "a file, not an artifact\n").unwrap();
    c.ws.write(".pipeline/artifacts/README.txt", "what these are\n");
    let out = c.run(&["verify"]);
    expect(&out, 0, "it is a regular file, not a directory");
    assert!(out.stdout.contains("README.txt"), "{}", out.describe());
    c.ws.set_yaml("stages:\n  z:\n    cmd: 'true'\n");
    expect(&c.run(&["gc"]), 0, "it is a regular file");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "a file, not an artifact\n"
    );
    assert!(c.ws.path(".pipeline/artifacts/README.txt").is_file());
    c.finish();
}

#[test]
fn store_gc_leaves_foreign_entries_of_every_store_folder() {
    let c = Case::new(ONE_STAGE);
    committed(&c);
    // A folder the store made (work/a, marked), holding what it did not make; unmarked ones,
    // one with a fingerprint's name; and entries of tmp/ that are no run's.
    let fp_work = c.ws.path(&format!(".pipeline/work/someone/{STRANGER_FP}"));
    std::fs::create_dir_all(&fp_work).unwrap();
    std::fs::write(fp_work.join("ckpt"), "someone's").unwrap();
    c.ws.write(".pipeline/work/a/notes/n.txt", "n");
    c.ws.write(".pipeline/quarantine/x/notes/n.txt", "n");
    c.ws.write(".pipeline/tmp/notes.txt", "n");
    c.ws.write(".pipeline/tmp/my-scratch/n.txt", "n");
    let before: Vec<Tree> = ["work", "quarantine", "tmp"]
        .iter()
        .map(|a| snapshot(&c.ws.path(&format!(".pipeline/{a}"))))
        .collect();
    let gc = c.run(&["gc"]);
    expect(&gc, 0, "did not make it");
    let after: Vec<Tree> = ["work", "quarantine", "tmp"]
        .iter()
        .map(|a| snapshot(&c.ws.path(&format!(".pipeline/{a}"))))
        .collect();
    assert!(before == after, "gc changed what the store did not make");
    c.finish();
}

#[test]
fn verify_output_digest_that_is_not_the_files_is_quarantined() {
    let c = Case::new(ONE_STAGE);
    let dir = committed(&c);
    // What a poisoned remote serves: other bytes, listed with their own digest and size, under
    // the honest output digest (which dependants' fingerprints take in).
    std::fs::write(dir.join("a.txt"), "evil\n").unwrap();
    let evil = blake3::hash(b"evil\n").to_hex().to_string();
    edit_manifest(&dir, |m| {
        m["files"][0]["blake3"] = evil.clone().into();
        m["files"][0]["size"] = 5.into();
    });
    let t0 = Instant::now();
    let out = c.run(&["verify"]);
    expect(&out, 1, "is not the digest of the listed files");
    assert!(out.stdout.contains("1 corrupt"), "{}", out.describe());
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
    // What verify printed was moved; the JSON report of a second check finds it gone.
    assert_eq!(verify_json(&c, 0)["checked"], 0);
    let v = c.ws.json(&["run"], 0);
    assert_eq!(stage_json(&v, "a")["status"], "ran", "{v:#}");
    assert_eq!(std::fs::read_to_string(dir.join("a.txt")).unwrap(), "a\n");
    expect(&c.run(&["gc"]), 0, "(quarantined)");
    c.finish();
}

#[test]
fn verify_manifest_naming_itself_or_a_path_twice_is_quarantined() {
    for (needle, edit) in [
        (
            "\"MANIFEST.json\" is a name the store reserves for itself",
            (|m: &mut Value| {
                let mut reserved = m["files"][0].clone();
                reserved["path"] = "MANIFEST.json".into();
                m["files"].as_array_mut().unwrap().push(reserved);
            }) as fn(&mut Value),
        ),
        ("\"a.txt\" is listed twice", |m: &mut Value| {
            let again = m["files"][0].clone();
            m["files"].as_array_mut().unwrap().push(again);
        }),
        (
            "\"../a.txt\" is not a relative path inside the artifact",
            |m| {
                m["files"][0]["path"] = "../a.txt".into();
            },
        ),
        ("has a digest that is not a blake3 digest", |m| {
            m["files"][0]["blake3"] = "x".into();
        }),
    ] {
        let c = Case::new(ONE_STAGE);
        let dir = committed(&c);
        edit_manifest(&dir, edit);
        let out = c.run(&["verify", "--json"]);
        expect(&out, 1, "corrupt");
        let report = out.json();
        assert_eq!(report["ok"], false);
        let problems = report["corrupt"][0]["problems"].as_array().unwrap();
        assert!(
            problems
                .iter()
                .any(|p| p.as_str().unwrap().contains(needle)),
            "{needle}: {report:#}"
        );
        remade_after_quarantine(&c, &dir, &report);
        c.finish();
    }
}

#[test]
fn verify_huge_manifest_is_refused_in_bounded_memory() {
    let c = Case::new(ONE_STAGE);
    let dir = committed(&c);
    // Sparse: 100 MB, and then 8 GiB, that `std::fs::read` would allocate whole (the second
    // beyond the 3 GiB address-space limit the binary runs under).
    for size in [100_000_000u64, 8 << 30] {
        let f = std::fs::File::create(dir.join("MANIFEST.json")).unwrap();
        f.set_len(size).unwrap();
        let t0 = Instant::now();
        let status = c.run(&["status"]);
        expect(&status, 0, "a");
        let out = c.run(&["verify", "--json"]);
        expect(
            &out,
            1,
            "larger than 64 MiB, the limit for an artifact manifest",
        );
        assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
        remade_after_quarantine(&c, &dir, &out.json());
    }
    c.finish();
}

#[test]
fn verify_fifo_as_manifest_does_not_hang() {
    let c = Case::new(ONE_STAGE);
    let dir = committed(&c);
    let manifest = dir.join("MANIFEST.json");
    std::fs::remove_file(&manifest).unwrap();
    let made = Command::new("mkfifo").arg(&manifest).status().unwrap();
    assert!(made.success(), "mkfifo failed");
    let t0 = Instant::now();
    let status = c.run(&["status", "--json"]);
    status.expect_code(0);
    assert_ne!(stage_json(&status.json(), "a")["status"], "fresh");
    let out = c.run(&["verify", "--json"]);
    expect(&out, 1, "not a regular file (it is a FIFO)");
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
    remade_after_quarantine(&c, &dir, &out.json());
    c.finish();
}

#[test]
fn store_foreign_folder_named_with_escape_sequences_prints_escaped() {
    let c = Case::new(ONE_STAGE);
    committed(&c);
    // An OSC sequence that would retitle the terminal, as a folder name on a shared disk.
    let name = "\u{1b}]0;pwned\u{7}";
    c.ws.write(&format!(".pipeline/artifacts/a/{name}/x"), "x");
    let out = c.run(&["verify"]);
    expect(&out, 0, "left alone");
    let gc = c.run(&["gc"]);
    expect(&gc, 0, "did not make it");
    for o in [&out, &gc] {
        assert!(
            !o.stdout.contains('\u{1b}') && !o.stdout.contains('\u{7}'),
            "{}",
            o.describe()
        );
    }
    assert!(
        c.ws.path(&format!(".pipeline/artifacts/a/{name}/x"))
            .is_file()
    );
    c.finish();
}
