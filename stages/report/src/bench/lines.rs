//! Reading the benchmark files: every `*.jsonl` of the bench folder (and of the stage's
//! `inputs:`), one JSON object a line, each kept with the `file:line` it came from; what
//! cannot be read is a note, never an error.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// One benchmark line and where it came from.
#[derive(Debug, Clone)]
pub struct BenchLine {
    /// `results/bench/train.jsonl:3`.
    pub source: String,
    pub value: Value,
}

/// Reads every `*.jsonl` file (sorted by path) and returns its object lines; what cannot be
/// read is a note.
pub fn read(files: &[PathBuf], root: &Path, notes: &mut Vec<String>) -> Vec<BenchLine> {
    let mut files = files.to_vec();
    files.sort();
    files.dedup();
    let mut out = Vec::new();
    for f in files {
        let name = f
            .strip_prefix(root)
            .unwrap_or(&f)
            .to_string_lossy()
            .replace('\\', "/");
        // The bench folder is the user's: regular files only (a FIFO would block the open),
        // bounded as every lines file is.
        let text = match pipeline_bounded::read_to_string(
            &f,
            pipeline_metrics::MAX_LINES_BYTES,
            "a benchmark lines file",
        ) {
            Ok(t) => t,
            Err(e) => {
                notes.push(format!("{name}: cannot be read ({}); left out", e.reason()));
                continue;
            }
        };
        let mut bad = 0;
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            match serde_json::from_str::<Value>(line) {
                Ok(v) if v.is_object() => out.push(BenchLine {
                    source: format!("{name}:{}", i + 1),
                    value: v,
                }),
                _ => bad += 1,
            }
        }
        if bad > 0 {
            notes.push(format!(
                "{name}: {bad} line(s) are not JSON objects (a human summary?); skipped"
            ));
        }
    }
    out
}

/// The `*.jsonl` files of a folder (not recursive), if it exists.
pub fn list(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "jsonl"))
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreadable_lines_are_notes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("a.jsonl"),
            "{\"bench\": \"infer\"}\nnot json\n\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("b.txt"), "x").unwrap();
        let files = list(dir.path());
        assert_eq!(files.len(), 1);
        let mut notes = Vec::new();
        let lines = read(&files, dir.path(), &mut notes);
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0].source, "a.jsonl:1");
        assert!(notes[0].contains("1 line(s)"), "{notes:?}");
    }
}
