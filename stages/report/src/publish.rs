//! Writing the report: into the artifact directory, and published into a folder of the
//! workspace (`results/`) safely. Every file is written into a temporary folder beside the
//! destination first, then renamed into place one by one (a rename within a file system is
//! atomic, so a reader never sees half a file); files the report did not write (such as
//! `results/bench/`) are never touched. The report keeps the list of what it published in
//! `.report-files`, so that a file it wrote last time and no longer writes (the table of a
//! task that was dropped) is removed, and nothing else is.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use anyhow::{Context, bail};

/// The list of published files, one relative path a line.
pub const LEDGER: &str = ".report-files";

/// The largest ledger read: it lists the report's files, some tens of names (a few KB).
const MAX_LEDGER_BYTES: u64 = 1 << 20;

/// Relative file name → bytes.
pub type Files = BTreeMap<String, Vec<u8>>;

/// A safe relative path: normal components only.
fn safe(rel: &str) -> Option<PathBuf> {
    let p = Path::new(rel);
    if rel.is_empty() || p.is_absolute() {
        return None;
    }
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::Normal(s) => out.push(s),
            _ => return None,
        }
    }
    Some(out)
}

/// Whether `dest/rel` is a regular file reached without a symlink: the ledger is a file in the
/// user's folder that anyone can edit, so a name it lists is removed only when it is a plain
/// file of the folder itself. A subfolder replaced by a link to elsewhere (`plots -> ~/data`),
/// or a link in place of a file, would otherwise make the report delete what it never wrote.
fn is_plain_file_below(dest: &Path, rel: &Path) -> bool {
    let mut at = dest.to_path_buf();
    let parts: Vec<_> = rel.components().collect();
    for (i, part) in parts.iter().enumerate() {
        at.push(part);
        let Ok(meta) = std::fs::symlink_metadata(&at) else {
            return false;
        };
        let last = i + 1 == parts.len();
        if meta.file_type().is_symlink() || (last && !meta.is_file()) || (!last && !meta.is_dir()) {
            return false;
        }
    }
    !parts.is_empty()
}

/// Writes `files` under `dir` (which exists).
pub fn write_all(dir: &Path, files: &Files) -> anyhow::Result<()> {
    for (rel, bytes) in files {
        let path = dir.join(safe(rel).with_context(|| format!("bad report file name {rel:?}"))?);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// Publishes `files` into `root/dir`. Returns the files removed because an earlier report
/// wrote them and this one does not.
pub fn publish(root: &Path, dir: &Path, files: &Files) -> anyhow::Result<Vec<String>> {
    let dest = root.join(dir);
    if dest.exists() && !dest.is_dir() {
        bail!("publish_dir {} exists and is not a folder", dest.display());
    }
    std::fs::create_dir_all(&dest)
        .with_context(|| format!("creating publish_dir {}", dest.display()))?;
    let parent = dest.parent().unwrap_or(root);
    let name = dest
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("results");
    let tmp = parent.join(format!(".{name}.report-tmp-{}", std::process::id()));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp)
            .with_context(|| format!("removing a stale {}", tmp.display()))?;
    }
    std::fs::create_dir_all(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    let result = (|| -> anyhow::Result<Vec<String>> {
        let mut all = files.clone();
        let listed: String = files.keys().map(|k| format!("{k}\n")).collect();
        all.insert(LEDGER.to_string(), listed.into_bytes());
        write_all(&tmp, &all)?;
        // The old ledger is in the user's folder: read bounded (a list of some tens of names;
        // a FIFO or device there is no ledger), and one that cannot be read lists nothing.
        let before: BTreeSet<String> =
            pipeline_bounded::read_to_string(&dest.join(LEDGER), MAX_LEDGER_BYTES, "a ledger")
                .map(|t| t.lines().map(str::to_string).collect())
                .unwrap_or_default();
        // The ledger goes last: until it is in place, the old one still lists the old files.
        let mut order: Vec<&String> = files.keys().collect();
        let ledger = LEDGER.to_string();
        order.push(&ledger);
        for rel in order {
            let rel_path = safe(rel).with_context(|| format!("bad report file name {rel:?}"))?;
            let to = dest.join(&rel_path);
            if let Some(p) = to.parent() {
                std::fs::create_dir_all(p).with_context(|| format!("creating {}", p.display()))?;
            }
            if to.is_dir() {
                bail!(
                    "cannot publish {}: a folder of that name is in the way",
                    to.display()
                );
            }
            std::fs::rename(tmp.join(&rel_path), &to)
                .with_context(|| format!("moving {rel} into {}", dest.display()))?;
        }
        let mut removed = Vec::new();
        for old in before.difference(&files.keys().cloned().collect()) {
            if old == LEDGER {
                continue;
            }
            let Some(rel) = safe(old) else { continue };
            let path = dest.join(&rel);
            if is_plain_file_below(&dest, &rel) {
                std::fs::remove_file(&path)
                    .with_context(|| format!("removing the stale {}", path.display()))?;
                removed.push(old.clone());
                // An emptied subfolder of ours (plots/) goes too; a non-empty one stays.
                if let Some(p) = path.parent()
                    && p != dest
                {
                    let _ = std::fs::remove_dir(p);
                }
            }
        }
        Ok(removed)
    })();
    let _ = std::fs::remove_dir_all(&tmp);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stale_name_behind_a_symlink_is_never_removed() {
        let ws = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("a.svg"), "user's").unwrap();
        std::fs::write(outside.path().join("b.md"), "user's").unwrap();
        let dest = ws.path().join("results");
        std::fs::create_dir_all(&dest).unwrap();
        std::os::unix::fs::symlink(outside.path(), dest.join("plots")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("b.md"), dest.join("b.md")).unwrap();
        std::fs::write(dest.join(LEDGER), "plots/a.svg\nb.md\nkeep.md\n").unwrap();
        let removed =
            publish(ws.path(), Path::new("results"), &files(&[("keep.md", "x")])).unwrap();
        assert!(removed.is_empty(), "{removed:?}");
        assert!(outside.path().join("a.svg").exists());
        assert!(outside.path().join("b.md").exists());
        assert!(std::fs::symlink_metadata(dest.join("b.md")).is_ok());
    }

    fn files(list: &[(&str, &str)]) -> Files {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn publishing_replaces_ours_and_keeps_the_rest() {
        let root = tempfile::tempdir().unwrap();
        let bench = root.path().join("results/bench");
        std::fs::create_dir_all(&bench).unwrap();
        std::fs::write(bench.join("train.jsonl"), "{}\n").unwrap();
        std::fs::write(root.path().join("results/notes.txt"), "mine").unwrap();

        let first = files(&[
            ("README.md", "one"),
            ("xnli.csv", "x"),
            ("plots/xnli_dev_accuracy.svg", "<svg/>"),
        ]);
        let removed = publish(root.path(), Path::new("results"), &first).unwrap();
        assert!(removed.is_empty());
        let r = root.path().join("results");
        assert_eq!(std::fs::read_to_string(r.join("README.md")).unwrap(), "one");
        assert_eq!(
            std::fs::read_to_string(r.join(LEDGER)).unwrap(),
            "README.md\nplots/xnli_dev_accuracy.svg\nxnli.csv\n"
        );

        // The next report no longer has XNLI: its files go, nothing else does.
        let second = files(&[("README.md", "two")]);
        let removed = publish(root.path(), Path::new("results"), &second).unwrap();
        assert_eq!(removed, ["plots/xnli_dev_accuracy.svg", "xnli.csv"]);
        assert_eq!(std::fs::read_to_string(r.join("README.md")).unwrap(), "two");
        assert!(!r.join("xnli.csv").exists() && !r.join("plots").exists());
        assert_eq!(
            std::fs::read_to_string(r.join("notes.txt")).unwrap(),
            "mine"
        );
        assert!(r.join("bench/train.jsonl").is_file());
        // No temporary folder is left behind.
        let leftovers: Vec<_> = std::fs::read_dir(root.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .collect();
        assert_eq!(leftovers, ["results"]);
    }

    #[test]
    fn a_tampered_ledger_cannot_delete_outside() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("results")).unwrap();
        std::fs::write(root.path().join("keep.txt"), "k").unwrap();
        std::fs::write(
            root.path().join("results").join(LEDGER),
            "../keep.txt\n/etc/passwd\nbench\n",
        )
        .unwrap();
        std::fs::create_dir_all(root.path().join("results/bench")).unwrap();
        publish(root.path(), Path::new("results"), &files(&[("a.md", "a")])).unwrap();
        assert!(root.path().join("keep.txt").exists());
        assert!(root.path().join("results/bench").is_dir());
    }

    #[test]
    fn bad_names_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        assert!(write_all(dir.path(), &files(&[("../x", "")])).is_err());
        assert!(safe("a/b.svg").is_some());
        assert!(safe("/a").is_none() && safe("").is_none() && safe("a/../b").is_none());
    }
}
