//! Golden files: a fixture report's tables compared byte for byte with the copy committed under
//! `tests/golden/<name>/`, so that a change to how the report is built (generic tables, texts
//! moved into data) shows that the published tables carry the same numbers.
//! `REPORT_GOLDEN_WRITE=1` rewrites the copy (then review its diff).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn golden_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name)
}

/// The tables' CSV and JSON files among `files` (by path), the ones the golden copy holds.
fn tables(files: &BTreeMap<String, Vec<u8>>) -> BTreeMap<&str, &[u8]> {
    files
        .iter()
        .filter(|(k, _)| {
            !k.contains('/')
                && (k.ends_with(".csv") || k.ends_with(".json"))
                && *k != "metrics.json"
        })
        .map(|(k, v)| (k.as_str(), v.as_slice()))
        .collect()
}

/// Asserts that the tables of `files` are the golden copy `name` (or writes it).
pub fn check(name: &str, files: &BTreeMap<String, Vec<u8>>) {
    let dir = golden_dir(name);
    let ours = tables(files);
    if std::env::var_os("REPORT_GOLDEN_WRITE").is_some() {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for (f, bytes) in &ours {
            std::fs::write(dir.join(f), bytes).unwrap();
        }
        return;
    }
    let mut golden: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    golden.sort();
    let names: Vec<String> = ours.keys().map(|k| k.to_string()).collect();
    assert_eq!(
        names, golden,
        "the report writes other tables than the golden copy"
    );
    for (f, bytes) in ours {
        let want = std::fs::read(dir.join(f)).unwrap();
        assert!(
            want == bytes,
            "{f} differs from tests/golden/{name}/{f}:\n{}",
            String::from_utf8_lossy(bytes)
        );
    }
}
