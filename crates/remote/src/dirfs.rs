//! A directory remote's files, listed, opened and removed without ever following a link.
//!
//! object_store's `LocalFileSystem` lists with walkdir's `follow_links(true)`, opens an object
//! with a plain `open` (a FIFO blocks it forever) and deletes whatever path it resolves. A
//! directory remote sits on a shared disk that every member of a lab can write, so one link
//! planted under `objects/` made `gc --remote` delete files elsewhere on the machine, and one
//! FIFO hung `pull` and `run` (issue 31). Here, every folder from the remote's root down is
//! opened relative to the one above it with `O_NOFOLLOW | O_DIRECTORY` (`openat`), so a link
//! anywhere on the way is refused rather than followed, and a rename between a check and the
//! use cannot redirect it; a file is opened with `O_NOFOLLOW | O_NONBLOCK` and checked to be a
//! regular file through its handle, and removed with `unlinkat` in the folder so pinned.

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path as LocalPath;
use std::time::SystemTime;

use object_store::path::Path;

/// What a listing says of one regular file.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Meta {
    /// Its size, in bytes.
    pub size: u64,
    /// When it was last written.
    pub modified: SystemTime,
}

/// A listing of one top folder (`objects`, `manifests`) of a remote.
#[derive(Debug, Default)]
pub(crate) struct Listing {
    /// The regular files two folders down (`top/xx/name`), but the staging files of unfinished
    /// uploads (`name#n`).
    pub files: HashMap<Path, Meta>,
    /// What is there but is not such a file: a link, a folder where a file belongs, a FIFO, a
    /// file where a folder belongs, a name that is not UTF-8 (shown lossily). Never descended
    /// into, never removed.
    pub odd: Vec<String>,
}

/// Whether a file name is object_store's staging name of an unfinished upload, `<name>#<n>`.
pub(crate) fn is_staging(name: &str) -> bool {
    name.split_once('#')
        .is_some_and(|(_, n)| !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()))
}

/// Lists `root/top` two levels down, without following any link (see [`Listing`]). An absent
/// `top` is an empty listing.
pub(crate) fn list(root: &LocalPath, top: &str) -> io::Result<Listing> {
    let mut out = Listing::default();
    let top_dir = root.join(top);
    match std::fs::symlink_metadata(&top_dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e),
        Ok(m) if !m.is_dir() => {
            out.odd.push(top.to_string());
            return Ok(out);
        }
        Ok(_) => {}
    }
    for (a, a_kind) in entries(&top_dir)? {
        let rel_a = format!("{top}/{}", a.to_string_lossy());
        let Some(a) = a.to_str().filter(|_| a_kind.is_dir()) else {
            out.odd.push(rel_a);
            continue;
        };
        for (b, b_kind) in entries(&top_dir.join(a))? {
            let rel = format!("{rel_a}/{}", b.to_string_lossy());
            match b.to_str() {
                Some(name) if b_kind.is_file() && is_staging(name) => {}
                Some(_) if b_kind.is_file() => {
                    let m = std::fs::symlink_metadata(top_dir.join(a).join(&b))?;
                    let meta = Meta {
                        size: m.len(),
                        modified: m.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                    };
                    out.files.insert(Path::from(rel), meta);
                }
                _ => out.odd.push(rel),
            }
        }
    }
    out.odd.sort();
    Ok(out)
}

/// The entries of `dir` with their own kinds (a link is a link, not what it points to).
fn entries(dir: &LocalPath) -> io::Result<Vec<(std::ffi::OsString, std::fs::FileType)>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        out.push((e.file_name(), e.file_type()?));
    }
    out.sort_by(|x, y| x.0.cmp(&y.0));
    Ok(out)
}

fn c_name(name: &str) -> io::Result<CString> {
    CString::new(name).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in a name"))
}

/// `rel`'s folders opened one inside the other from `root`, none through a link; returns the
/// last folder and the file name in it.
fn parent_of(root: &LocalPath, rel: &str) -> io::Result<(OwnedFd, CString)> {
    let mut parts: Vec<&str> = rel.split('/').collect();
    let name = parts
        .pop()
        .filter(|n| !n.is_empty() && *n != "." && *n != "..");
    let name = name.ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
    // The root is the remote as configured (canonicalised when opened): trusted, so followed.
    let mut dir = OwnedFd::from(File::open(root)?);
    for part in parts {
        if part.is_empty() || part == "." || part == ".." {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a plain path",
            ));
        }
        let c = c_name(part)?;
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: `dir` is an open descriptor and `c` a NUL-terminated name; the descriptor
        // returned, when valid, is owned by nobody else.
        let fd = unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), flags) };
        if fd < 0 {
            return Err(not_followed(&dir, &c, io::Error::last_os_error()));
        }
        // SAFETY: `fd` was just returned by openat and is valid.
        dir = unsafe { OwnedFd::from_raw_fd(fd) };
    }
    Ok((dir, c_name(name)?))
}

/// Why `name` in `dir` could not be opened as asked: a link (ELOOP or ENOTDIR under
/// `O_NOFOLLOW`), or another kind of file where a folder belongs (ENOTDIR), said in words.
fn not_followed(dir: &OwnedFd, name: &CStr, e: io::Error) -> io::Error {
    match e.raw_os_error() {
        Some(libc::ELOOP | libc::ENOTDIR) => {
            let what = kind_at(dir, name).unwrap_or("not a folder");
            io::Error::other(format!("`{}` is {what}", name.to_string_lossy()))
        }
        _ => e,
    }
}

/// What `name` in `dir` is, in words, without following it (`None` when it cannot be told).
fn kind_at(dir: &OwnedFd, name: &CStr) -> Option<&'static str> {
    stat_at(dir, name).ok().map(|st| kind_text(st.st_mode))
}

/// `fstatat` of `name` in the opened folder `dir`, never following a link.
fn stat_at(dir: &OwnedFd, name: &CStr) -> io::Result<libc::stat> {
    // SAFETY: a zeroed `stat` is a valid value of the plain C struct fstatat fills.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `dir` is open, `name` NUL-terminated, `st` a valid out-pointer.
    let r = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if r == 0 {
        Ok(st)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A file's kind (`st_mode`), in words.
fn kind_text(mode: libc::mode_t) -> &'static str {
    match mode & libc::S_IFMT {
        libc::S_IFLNK => "a symbolic link (not followed)",
        libc::S_IFDIR => "a folder",
        libc::S_IFIFO => "a FIFO",
        libc::S_IFREG => "a regular file",
        libc::S_IFSOCK => "a socket",
        _ => "a device",
    }
}

/// Opens the regular file `root/rel` for reading: no link on the way or at the end, and no
/// waiting on a FIFO (opened non-blocking, refused through its handle unless a regular file).
/// A missing file is `NotFound`.
pub(crate) fn open(root: &LocalPath, rel: &str) -> io::Result<File> {
    let (dir, name) = parent_of(root, rel)?;
    let flags = libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC;
    // SAFETY: as in `parent_of`.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags) };
    if fd < 0 {
        return Err(not_followed(&dir, &name, io::Error::last_os_error()));
    }
    // SAFETY: `fd` was just returned by openat and is valid.
    let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    let mode = file.metadata()?.mode();
    if mode & libc::S_IFMT != libc::S_IFREG {
        let what = kind_text(mode);
        return Err(io::Error::other(format!("`{rel}` is {what}")));
    }
    Ok(file)
}

/// Checks that no folder of `rel` under `root` that exists is a link (or not a folder), before
/// object_store writes `root/rel`: its `put` creates and writes through whatever the path
/// resolves to, so a link planted at `objects/ab` would have a push write files into the folder
/// it points to. (A link in the file's own place is harmless: the rename that completes a put
/// replaces the link, not its target.)
pub(crate) fn check_folders(root: &LocalPath, rel: &str) -> io::Result<()> {
    let mut parts: Vec<&str> = rel.split('/').collect();
    parts.pop();
    let mut path = root.to_path_buf();
    for part in parts {
        path.push(part);
        match std::fs::symlink_metadata(&path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
            Ok(m) if m.is_dir() => {}
            Ok(m) => {
                let what = kind_text(m.mode());
                return Err(io::Error::other(format!("`{part}` is {what}")));
            }
        }
    }
    Ok(())
}

/// What [`remove`] did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Removed {
    /// The regular file is gone.
    Yes,
    /// It was not there (any more).
    Absent,
    /// It (or a folder on the way) is no longer a regular file (a folder): left alone.
    NotPlain,
}

/// Removes the regular file `root/rel`, only if it is one when removed, in the folder reached
/// without a link (a link planted on the way or in its place is left alone, and so is its
/// target).
pub(crate) fn remove(root: &LocalPath, rel: &str) -> io::Result<Removed> {
    let (dir, name) = match parent_of(root, rel) {
        Ok(x) => x,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Removed::Absent),
        Err(e) if e.kind() == io::ErrorKind::Other => return Ok(Removed::NotPlain),
        Err(e) => return Err(e),
    };
    let st = match stat_at(&dir, &name) {
        Ok(st) => st,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Removed::Absent),
        Err(e) => return Err(e),
    };
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Ok(Removed::NotPlain);
    }
    // Between the fstatat and here the entry may have become a link or another file; unlinkat
    // without AT_REMOVEDIR removes only the entry of this folder (a link, never its target),
    // and fails on a folder.
    // SAFETY: as above.
    if unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), 0) } != 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::NotFound => Ok(Removed::Absent),
            _ => Err(e),
        };
    }
    Ok(Removed::Yes)
}

/// The bytes an unprivileged user may still write on the filesystem of `path` (statvfs's
/// `f_bavail` blocks of `f_frsize` bytes).
pub(crate) fn free_space(path: &LocalPath) -> io::Result<u64> {
    let c = CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in a path"))?;
    // SAFETY: a zeroed statvfs is a valid value of the plain C struct statvfs fills.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is NUL-terminated, `st` a valid out-pointer.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn mkfifo(path: &LocalPath) {
        let c = CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path; mkfifo only creates the node.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }

    /// A remote with one object, and a folder outside it holding a file.
    fn setup() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("remote");
        std::fs::create_dir_all(root.join("objects/ab")).unwrap();
        std::fs::write(root.join("objects/ab/cd"), b"obj").unwrap();
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("cd"), b"mine").unwrap();
        (tmp, root, outside)
    }

    #[test]
    fn a_listing_never_follows_a_link() {
        let (_tmp, root, outside) = setup();
        symlink(&outside, root.join("objects/ef")).unwrap();
        symlink(outside.join("cd"), root.join("objects/ab/link")).unwrap();
        std::fs::create_dir(root.join("objects/ab/dir")).unwrap();
        mkfifo(&root.join("objects/ab/fifo"));
        std::fs::write(root.join("objects/ab/x#1"), b"part").unwrap();
        let l = list(&root, "objects").unwrap();
        let files: Vec<String> = l.files.keys().map(|p| p.to_string()).collect();
        assert_eq!(files, ["objects/ab/cd"]);
        assert_eq!(
            l.odd,
            [
                "objects/ab/dir",
                "objects/ab/fifo",
                "objects/ab/link",
                "objects/ef"
            ]
        );
        assert!(list(&root, "manifests").unwrap().files.is_empty());
    }

    #[test]
    fn remove_goes_through_no_link() {
        let (_tmp, root, outside) = setup();
        symlink(&outside, root.join("objects/ef")).unwrap();
        assert_eq!(remove(&root, "objects/ef/cd").unwrap(), Removed::NotPlain);
        symlink(outside.join("cd"), root.join("objects/ab/link")).unwrap();
        assert_eq!(remove(&root, "objects/ab/link").unwrap(), Removed::NotPlain);
        std::fs::create_dir(root.join("objects/ab/dir")).unwrap();
        assert_eq!(remove(&root, "objects/ab/dir").unwrap(), Removed::NotPlain);
        assert_eq!(std::fs::read(outside.join("cd")).unwrap(), b"mine");
        assert!(root.join("objects/ab/link").is_symlink());
        assert_eq!(remove(&root, "objects/ab/cd").unwrap(), Removed::Yes);
        assert_eq!(remove(&root, "objects/ab/cd").unwrap(), Removed::Absent);
        assert_eq!(remove(&root, "objects/zz/cd").unwrap(), Removed::Absent);
    }

    #[test]
    fn open_refuses_links_and_fifos_at_once() {
        let (_tmp, root, outside) = setup();
        assert!(open(&root, "objects/ab/cd").is_ok());
        symlink(&outside, root.join("objects/ef")).unwrap();
        let e = open(&root, "objects/ef/cd").unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        mkfifo(&root.join("objects/ab/fifo"));
        let e = open(&root, "objects/ab/fifo").unwrap_err();
        assert!(e.to_string().contains("a FIFO"), "{e}");
        let e = open(&root, "objects/ab/nope").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn a_put_is_refused_a_linked_folder() {
        let (_tmp, root, outside) = setup();
        assert!(check_folders(&root, "objects/ab/new").is_ok());
        assert!(check_folders(&root, "objects/zz/new").is_ok());
        symlink(&outside, root.join("objects/ef")).unwrap();
        let e = check_folders(&root, "objects/ef/new").unwrap_err();
        assert!(e.to_string().contains("`ef` is a symbolic link"), "{e}");
    }

    #[test]
    fn free_space_is_measured() {
        let tmp = tempfile::tempdir().unwrap();
        assert!(free_space(tmp.path()).unwrap() > 0);
    }
}
