//! The one reader of files the tool does not trust: remote manifests and objects, metrics
//! records, `predict`'s inputs, a model directory's JSON files, task and vocabulary files.
//!
//! Three things go wrong with a plain `std::fs::read` on such a path, each seen in practice: a
//! FIFO blocks the `open` forever (no writer ever comes), `/dev/zero` or a file still growing
//! reads until memory runs out, and a multi-gigabyte file is allocated whole before anything
//! can say it is not what was expected. So a path is opened with `O_NONBLOCK` (which makes the
//! open of a FIFO return at once and is ignored for regular files), checked to be a regular
//! file through the opened handle (no race with a rename between a `stat` and the `open`),
//! refused unread if its size is over the limit, and otherwise read through `take(limit + 1)`,
//! so that the read ends one byte past the limit whatever the file grows to meanwhile. Every
//! error names the file; the size error names the limit too.
//!
//! The standard library has no non-blocking open and no crate on crates.io does these three
//! things together, so they are written here once (with libc's flag constant).

#![warn(missing_docs)]

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Why a file was not read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The path is a directory, FIFO, socket or device, not a regular file.
    #[error("{}: not a regular file (it is {kind})", path.display())]
    NotRegular {
        /// The file.
        path: PathBuf,
        /// What it is instead, in words ("a directory", "a FIFO", …).
        kind: &'static str,
    },
    /// The file holds more than the limit (or is still growing past it).
    #[error("{}: larger than {}, the limit for {what}", path.display(), size_text(*limit))]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The limit, in bytes.
        limit: u64,
        /// What the file was read as ("a remote manifest", "a metrics record", …).
        what: &'static str,
    },
    /// The file's bytes are not UTF-8 text.
    #[error("{}: not UTF-8 text (invalid byte at offset {offset})", path.display())]
    NotUtf8 {
        /// The file.
        path: PathBuf,
        /// The offset of the first invalid byte.
        offset: usize,
    },
    /// Opening or reading failed (it does not exist, permission denied, an I/O error).
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

impl ReadError {
    /// Whether the file was not there (a caller may take that as "absent", not as an error).
    pub fn is_not_found(&self) -> bool {
        matches!(self, ReadError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }

    /// What is wrong, without the path: for an error type that names the file its own way
    /// (`file: tensor x: message`), so that the path is not printed twice.
    pub fn reason(&self) -> String {
        match self {
            ReadError::NotRegular { kind, .. } => format!("not a regular file (it is {kind})"),
            ReadError::TooLarge { limit, what, .. } => {
                format!("larger than {}, the limit for {what}", size_text(*limit))
            }
            ReadError::NotUtf8 { offset, .. } => {
                format!("not UTF-8 text (invalid byte at offset {offset})")
            }
            ReadError::Io { source, .. } => source.to_string(),
        }
    }
}

/// Sizes in the unit a reader thinks in: `16 MiB`, `4 KiB`, `900 B`.
pub fn size_text(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

/// Opens `path` for reading if it is a regular file, without blocking on a FIFO. A symlink is
/// followed like any path (one to a regular file is read; one to a FIFO or device is refused
/// like the FIFO or device); callers that must not follow links check that first.
pub fn open(path: &Path) -> Result<File, ReadError> {
    let io = |source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(io)?;
    let kind = file.metadata().map_err(io)?.file_type();
    if !kind.is_file() {
        return Err(ReadError::NotRegular {
            path: path.to_path_buf(),
            kind: kind_text(&kind),
        });
    }
    Ok(file)
}

/// The bytes of the regular file `path`, at most `limit` of them; `what` names the kind of
/// file in the error when it holds more ("a remote manifest").
pub fn read(path: &Path, limit: u64, what: &'static str) -> Result<Vec<u8>, ReadError> {
    let file = open(path)?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    // A regular file's size is known before a byte is read: one over the limit is refused at
    // once. Read up to `limit + 1` instead, it filled a buffer of `limit` bytes that then
    // doubled for the last byte: refusing a 100 MB checkpoint index took 153 MB (19 MB
    // without the read), refusing a 100 MB metrics.json in the report 128 MB more.
    if size > limit {
        return Err(ReadError::TooLarge {
            path: path.to_path_buf(),
            limit,
            what,
        });
    }
    // One byte of room past the size, so that finding the end needs no second allocation.
    let mut bytes = Vec::with_capacity(size as usize + 1);
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|source| ReadError::Io {
            path: path.to_path_buf(),
            source,
        })?;
    if bytes.len() as u64 > limit {
        return Err(ReadError::TooLarge {
            path: path.to_path_buf(),
            limit,
            what,
        });
    }
    Ok(bytes)
}

/// [`read`], as UTF-8 text.
pub fn read_to_string(path: &Path, limit: u64, what: &'static str) -> Result<String, ReadError> {
    String::from_utf8(read(path, limit, what)?).map_err(|e| ReadError::NotUtf8 {
        path: path.to_path_buf(),
        offset: e.utf8_error().valid_up_to(),
    })
}

fn kind_text(kind: &std::fs::FileType) -> &'static str {
    if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else {
        "not a file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_file_within_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("a.json");
        std::fs::write(&f, b"{}").unwrap();
        assert_eq!(read(&f, 2, "a test file").unwrap(), b"{}");
        assert_eq!(read_to_string(&f, 10, "a test file").unwrap(), "{}");
    }

    #[test]
    fn refuses_one_byte_over_the_limit_naming_file_and_limit() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("big.json");
        std::fs::write(&f, vec![b'x'; 1025]).unwrap();
        let e = read(&f, 1024, "a metrics record").unwrap_err().to_string();
        assert!(e.contains("big.json"), "{e}");
        assert!(
            e.contains("larger than 1 KiB, the limit for a metrics record"),
            "{e}"
        );
    }

    #[test]
    fn a_file_over_the_limit_is_refused_before_it_is_read() {
        // Sparse, 1 TiB: read, it would take hours and all memory; its size says enough.
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("huge.json");
        std::fs::File::create(&f).unwrap().set_len(1 << 40).unwrap();
        let t0 = std::time::Instant::now();
        let e = read(&f, 16 << 20, "a remote manifest").unwrap_err();
        assert!(t0.elapsed() < std::time::Duration::from_secs(1));
        assert!(
            e.to_string()
                .ends_with("huge.json: larger than 16 MiB, the limit for a remote manifest"),
            "{e}"
        );
    }

    #[test]
    fn dev_zero_is_refused_without_reading_it() {
        let e = read(Path::new("/dev/zero"), 1 << 20, "x").unwrap_err();
        assert!(e.to_string().contains("a character device"), "{e}");
    }

    #[test]
    fn a_fifo_is_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("fifo");
        let c = std::ffi::CString::new(f.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path; mkfifo only creates the node.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = read(&f, 10, "x").unwrap_err();
        assert!(e.to_string().contains("a FIFO"), "{e}");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        assert!(
            read(&link, 10, "x")
                .unwrap_err()
                .to_string()
                .contains("a FIFO")
        );
    }

    #[test]
    fn a_directory_and_a_missing_file_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let e = read(dir.path(), 10, "x").unwrap_err();
        assert!(e.to_string().contains("a directory"), "{e}");
        let missing = read(&dir.path().join("nope"), 10, "x").unwrap_err();
        assert!(missing.is_not_found());
        assert!(missing.to_string().contains("nope"));
    }

    #[test]
    fn invalid_utf8_names_the_offset() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("t.txt");
        std::fs::write(&f, b"ab\xffc").unwrap();
        let e = read_to_string(&f, 10, "x").unwrap_err().to_string();
        assert!(e.contains("offset 2"), "{e}");
    }

    #[test]
    fn the_reason_is_the_message_without_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big");
        std::fs::write(&big, b"xx").unwrap();
        for e in [
            read(dir.path(), 10, "x").unwrap_err(),
            read(&big, 1, "a test file").unwrap_err(),
            read(&dir.path().join("nope"), 10, "x").unwrap_err(),
        ] {
            let path = match &e {
                ReadError::NotRegular { path, .. }
                | ReadError::TooLarge { path, .. }
                | ReadError::NotUtf8 { path, .. }
                | ReadError::Io { path, .. } => path.clone(),
            };
            assert_eq!(e.to_string(), format!("{}: {}", path.display(), e.reason()));
        }
    }

    #[test]
    fn sizes_read_in_their_unit() {
        assert_eq!(size_text(16 << 20), "16 MiB");
        assert_eq!(size_text(1 << 30), "1 GiB");
        assert_eq!(size_text(1500), "1500 B");
    }
}
