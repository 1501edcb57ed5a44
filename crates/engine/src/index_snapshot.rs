//! A plain-file copy of the index's read side (the latest fingerprint per instance and the
//! file-hash cache), so that a `pipeline run` in which nothing runs never opens sled.
//!
//! Why: sled fsyncs its log every time it is opened (it zeroes the tail of its active segment)
//! and again when it is closed; on these disks that was 5–110 ms per fsync, most of a no-op
//! run. The snapshot is written right after a run closes sled, together with the stamp (size,
//! mtime, inode) of sled's log file at that moment. Any later open of sled changes that stamp,
//! so a snapshot is used only while sled has not been touched since it was written; otherwise
//! the index opens sled as before and writes a fresh snapshot when it closes. It is a cache:
//! deleting it, or sled changing under it, only costs the fast path.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::hash::FileStamp;

/// The file next to sled's directory.
pub fn path(index_dir: &Path) -> PathBuf {
    index_dir.with_file_name("index-snapshot.json")
}

/// sled's log file, whose stamp says whether sled changed since the snapshot.
fn sled_log(index_dir: &Path) -> PathBuf {
    index_dir.join("db")
}

fn stamp_of(path: &Path) -> Option<FileStamp> {
    std::fs::metadata(path).ok().map(|m| FileStamp::of(&m))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[derive(Serialize, Deserialize)]
struct OnDisk {
    format: u32,
    /// `FileStamp::to_bytes` of sled's log file, hex.
    sled_log: String,
    latest: HashMap<String, String>,
    /// path → (stamp bytes hex, digest).
    hashes: HashMap<String, (String, String)>,
}

/// The read side of the index, as the snapshot holds it.
pub struct Snapshot {
    /// Instance name → the fingerprint of its latest successful run.
    pub latest: HashMap<String, String>,
    /// Input path → the stamp it had when hashed and its blake3 digest (hex).
    pub hashes: HashMap<String, (FileStamp, String)>,
}

/// The snapshot, if there is one and sled has not changed since it was written.
pub fn load(index_dir: &Path) -> Option<Snapshot> {
    let text = std::fs::read(path(index_dir)).ok()?;
    let disk: OnDisk = serde_json::from_slice(&text).ok()?;
    let now = stamp_of(&sled_log(index_dir))?;
    if disk.format != 1 || unhex(&disk.sled_log)? != now.to_bytes() {
        return None;
    }
    let hashes = disk
        .hashes
        .into_iter()
        .filter_map(|(p, (s, d))| Some((p, (FileStamp::from_bytes(&unhex(&s)?)?, d))))
        .collect();
    Some(Snapshot {
        latest: disk.latest,
        hashes,
    })
}

/// Writes the snapshot for sled as it is now (closed). Failures only cost the fast path, so
/// they are logged, not returned.
pub fn save(index_dir: &Path, snapshot: &Snapshot) {
    let Some(log) = stamp_of(&sled_log(index_dir)) else {
        return;
    };
    let disk = OnDisk {
        format: 1,
        sled_log: hex(&log.to_bytes()),
        latest: snapshot.latest.clone(),
        hashes: snapshot
            .hashes
            .iter()
            .map(|(p, (s, d))| (p.clone(), (hex(&s.to_bytes()), d.clone())))
            .collect(),
    };
    let target = path(index_dir);
    let tmp = target.with_extension("json.tmp");
    let written = serde_json::to_vec(&disk)
        .map_err(std::io::Error::other)
        .and_then(|bytes| std::fs::write(&tmp, bytes))
        .and_then(|()| std::fs::rename(&tmp, &target));
    if let Err(e) = written {
        tracing::debug!(
            "could not write the index snapshot {}: {e}",
            target.display()
        );
    }
}

/// Removes the snapshot (before sled is opened for writing, so that a crash mid-run cannot
/// leave a snapshot that matches a half-written sled: belt and braces, the stamp already
/// changes when sled opens).
pub fn remove(index_dir: &Path) {
    let _ = std::fs::remove_file(path(index_dir));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_holds_until_sled_changes() {
        let dir = tempfile::tempdir().unwrap();
        let index = dir.path().join("index");
        std::fs::create_dir_all(&index).unwrap();
        std::fs::write(index.join("db"), b"sled log").unwrap();
        let stamp = FileStamp {
            size: 3,
            mtime_ns: 1_700_000_000_123_456_789,
            inode: 42,
        };
        let mut snap = Snapshot {
            latest: HashMap::from([("clean".to_string(), "abc".to_string())]),
            hashes: HashMap::new(),
        };
        snap.hashes
            .insert("data/a.txt".into(), (stamp, "digest".into()));
        save(&index, &snap);
        let back = load(&index).expect("a fresh snapshot loads");
        assert_eq!(back.latest, snap.latest);
        assert_eq!(back.hashes, snap.hashes);
        // sled writes its log: the snapshot no longer counts.
        std::fs::write(index.join("db"), b"sled log, longer now").unwrap();
        assert!(load(&index).is_none());
        // Garbage is ignored, never an error.
        std::fs::write(path(&index), b"{not json").unwrap();
        assert!(load(&index).is_none());
    }
}
