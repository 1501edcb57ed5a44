//! The one walker over a stage's output (and over a committed artifact, for `verify`): an
//! output is regular files in directories, nothing else.
//!
//! A symlink is refused rather than followed or stored: followed, one to `/dev/zero` or a FIFO
//! hangs the hash and one to a directory outside makes the digest cover files the store does
//! not hold; stored as a link, the artifact would still depend on what it points to. Devices,
//! FIFOs and sockets are refused for the same reason, and so are names that are not UTF-8 (two
//! of them could print, and be recorded, as the same name). The error names the path.

use std::path::{Path, PathBuf};

use rayon::prelude::*;

use crate::error::StoreError;
use crate::hash::hash_file;
use crate::manifest::FileEntry;

/// Every file under `dir` with its size and digest, sorted by path; an entry that is not a
/// regular file or a directory is an error naming it.
pub fn hash_tree(dir: &Path) -> Result<Vec<FileEntry>, StoreError> {
    let mut paths = Vec::new();
    walk(dir, dir, &mut paths)?;
    let mut files: Vec<FileEntry> = paths
        .par_iter()
        .map(|(rel, full)| -> Result<FileEntry, StoreError> {
            let size = std::fs::symlink_metadata(full)?.len();
            Ok(FileEntry {
                path: rel.clone(),
                size,
                blake3: hash_file(full).map_err(|source| StoreError::Hash {
                    path: rel.clone(),
                    source,
                })?,
            })
        })
        .collect::<Result<_, _>>()?;
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(files)
}

/// Collects the regular files under `dir` as (path relative to `base`, full path).
fn walk(base: &Path, dir: &Path, out: &mut Vec<(String, PathBuf)>) -> Result<(), StoreError> {
    let entries = std::fs::read_dir(dir).map_err(|source| StoreError::List {
        dir: dir.to_path_buf(),
        source,
    })?;
    for entry in entries {
        let entry = entry?;
        let path = entry.path();
        let rel = path.strip_prefix(base).unwrap_or(&path);
        let Some(rel_str) = rel.to_str() else {
            return Err(StoreError::NotUtf8 {
                name: rel.to_string_lossy().into_owned(),
            });
        };
        // `DirEntry::file_type` does not follow symlinks.
        let kind = entry.file_type()?;
        if kind.is_dir() {
            walk(base, &path, out)?;
        } else if kind.is_file() {
            out.push((rel_str.to_string(), path));
        } else {
            return Err(special(rel_str, &path, kind));
        }
    }
    Ok(())
}

/// What is wrong with a special file in an output, and what to do instead.
fn special(rel: &str, path: &Path, kind: std::fs::FileType) -> StoreError {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_symlink() {
        let target = std::fs::read_link(path)
            .map(|t| t.display().to_string())
            .unwrap_or_else(|_| "?".into());
        return StoreError::Symlink {
            path: rel.to_string(),
            target,
        };
    }
    let what = if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_block_device() || kind.is_char_device() {
        "a device file"
    } else {
        "not a regular file"
    };
    StoreError::Special {
        path: rel.to_string(),
        what,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regular_files_hash_and_special_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir_all(d.join("sub")).unwrap();
        std::fs::write(d.join("sub/a.txt"), "a").unwrap();
        let files = hash_tree(d).unwrap();
        assert_eq!(files.len(), 1);
        assert_eq!(files[0].path, "sub/a.txt");

        std::os::unix::fs::symlink("/dev/zero", d.join("sub/zero")).unwrap();
        let e = hash_tree(d).unwrap_err().to_string();
        assert!(e.contains("`sub/zero` is a symlink (to /dev/zero)"), "{e}");
        std::fs::remove_file(d.join("sub/zero")).unwrap();

        std::os::unix::net::UnixListener::bind(d.join("sock")).unwrap();
        let e = hash_tree(d).unwrap_err().to_string();
        assert!(e.contains("`sock` is a socket"), "{e}");
    }
}
