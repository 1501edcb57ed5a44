//! Content digests (blake3) of files and of sets of files.

use std::io;
use std::path::Path;

/// Files at least this big are memory-mapped and hashed on all cores; smaller ones are read.
const MMAP_THRESHOLD: u64 = 1 << 20;

/// The blake3 digest of a file's bytes, as hex.
pub fn hash_file(path: &Path) -> io::Result<String> {
    let len = std::fs::metadata(path)?.len();
    let mut hasher = blake3::Hasher::new();
    if len >= MMAP_THRESHOLD {
        hasher.update_mmap_rayon(path)?;
    } else {
        hasher.update(&std::fs::read(path)?);
    }
    Ok(hasher.finalize().to_hex().to_string())
}

/// What identifies a file's state cheaply. If none of it changed, neither did the bytes (the
/// fast path that lets a no-op run skip re-hashing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    /// Length in bytes.
    pub size: u64,
    /// Modification time in nanoseconds since the Unix epoch (negative before 1970).
    pub mtime_ns: i128,
    /// Inode number: a file replaced by a rename gets a new one even with the same size and
    /// mtime.
    pub inode: u64,
}

impl FileStamp {
    /// The stamp of a file, from its metadata.
    pub fn of(meta: &std::fs::Metadata) -> FileStamp {
        use std::os::unix::fs::MetadataExt;
        FileStamp {
            size: meta.len(),
            mtime_ns: meta.mtime() as i128 * 1_000_000_000 + meta.mtime_nsec() as i128,
            inode: meta.ino(),
        }
    }

    /// A file modified within the last two seconds could change again within the same
    /// timestamp tick; its digest is not cached (git's "racy clean" problem).
    pub fn is_settled(&self) -> bool {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as i128)
            .unwrap_or(0);
        now - self.mtime_ns > 2_000_000_000
    }

    /// The 32-byte form the index stores before a cached digest: size (8 bytes), mtime (16)
    /// and inode (8), little-endian.
    pub fn to_bytes(self) -> [u8; 32] {
        let mut out = [0u8; 32];
        out[..8].copy_from_slice(&self.size.to_le_bytes());
        out[8..24].copy_from_slice(&self.mtime_ns.to_le_bytes());
        out[24..].copy_from_slice(&self.inode.to_le_bytes());
        out
    }

    /// Reads the first 32 bytes written by [`FileStamp::to_bytes`] (the rest, the digest, is
    /// the caller's); `None` when there are fewer.
    pub fn from_bytes(b: &[u8]) -> Option<FileStamp> {
        if b.len() < 32 {
            return None;
        }
        Some(FileStamp {
            size: u64::from_le_bytes(b[..8].try_into().ok()?),
            mtime_ns: i128::from_le_bytes(b[8..24].try_into().ok()?),
            inode: u64::from_le_bytes(b[24..32].try_into().ok()?),
        })
    }
}

/// One digest for a set of named digests (an artifact's output, say), independent of order.
pub fn digest_of_set<'a>(entries: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let mut sorted: Vec<(&str, &str)> = entries.into_iter().collect();
    sorted.sort();
    let mut hasher = blake3::Hasher::new();
    for (name, digest) in sorted {
        hasher.update(&(name.len() as u64).to_le_bytes());
        hasher.update(name.as_bytes());
        hasher.update(digest.as_bytes());
    }
    hasher.finalize().to_hex().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_and_large_files_hash_like_blake3() {
        let dir = tempfile::tempdir().unwrap();
        for size in [0usize, 10, (MMAP_THRESHOLD as usize) + 17] {
            let data: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
            let p = dir.path().join(format!("f{size}"));
            std::fs::write(&p, &data).unwrap();
            assert_eq!(
                hash_file(&p).unwrap(),
                blake3::hash(&data).to_hex().to_string()
            );
        }
    }

    #[test]
    fn set_digest_ignores_order_but_not_names() {
        let a = digest_of_set([("x", "1"), ("y", "2")]);
        assert_eq!(a, digest_of_set([("y", "2"), ("x", "1")]));
        assert_ne!(a, digest_of_set([("x", "2"), ("y", "1")]));
    }

    #[test]
    fn stamp_round_trips() {
        let s = FileStamp {
            size: 5,
            mtime_ns: -3,
            inode: 9,
        };
        assert_eq!(FileStamp::from_bytes(&s.to_bytes()), Some(s));
    }
}
