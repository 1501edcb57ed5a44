//! Where things live on a remote, and what a remote manifest holds.

use object_store::path::Path;
use pipeline_engine::manifest::{FileEntry, LOG_DIR, Manifest};
use pipeline_engine::workspace::dir_name;
use serde::{Deserialize, Serialize};

pub const OBJECTS: &str = "objects";
pub const MANIFESTS: &str = "manifests";
/// Bumped when the layout changes; a remote manifest of another format is not read.
pub const FORMAT: u32 = 1;

/// An artifact on the remote: the local MANIFEST.json as the run wrote it, and the digests of
/// its log files (which are not part of the output digest, but a colleague wants to read them).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RemoteManifest {
    /// The version of the layout it was written with; one other than this crate's is not read
    /// (a pull takes such an artifact as absent).
    pub format: u32,
    /// The artifact's MANIFEST.json; its `record.dir` is the directory of the machine that
    /// pushed it (a pull rewrites it).
    pub manifest: Manifest,
    /// The files of the artifact's log directory, paths relative to it; empty when it had none.
    #[serde(default)]
    pub logs: Vec<FileEntry>,
}

impl RemoteManifest {
    /// Every file of the artifact: its path inside the artifact directory, size and digest.
    pub fn files(&self) -> impl Iterator<Item = (String, &FileEntry)> {
        let outputs = self.manifest.files.iter().map(|f| (f.path.clone(), f));
        let logs = self
            .logs
            .iter()
            .map(|f| (format!("{LOG_DIR}/{}", f.path), f));
        outputs.chain(logs)
    }

    /// The blake3 digest of every file, as [`RemoteManifest::files`] gives them (a digest
    /// comes once per file that holds it).
    pub fn digests(&self) -> impl Iterator<Item = &str> {
        self.files().map(|(_, f)| f.blake3.as_str())
    }
}

/// `objects/ab/cdef…`: two levels, so that no directory of a filesystem remote holds millions
/// of entries.
pub fn object_path(digest: &str) -> Path {
    let (a, b) = digest.split_at(2.min(digest.len()));
    Path::from(format!("{OBJECTS}/{a}/{b}"))
}

/// The digest an object path names: `objects/<2 hex>/<62 hex>`, lowercase, as
/// [`object_path`] writes it (`None` for anything else, under `objects/` or not).
pub fn digest_of(path: &Path) -> Option<String> {
    let [top, a, b] = three_parts(path)?;
    let plain = top == OBJECTS && is_lower_hex(&a, 2) && is_lower_hex(&b, 62);
    plain.then(|| format!("{a}{b}"))
}

/// Whether `path` is named as the tool names a manifest it writes:
/// `manifests/<32 hex fingerprint>/<name>.json`, as [`manifest_path`] writes it.
pub fn is_manifest_name(path: &Path) -> bool {
    let Some([top, fp, file]) = three_parts(path) else {
        return false;
    };
    let stem = file.strip_suffix(".json").unwrap_or("");
    top == MANIFESTS
        && is_lower_hex(&fp, FINGERPRINT_LEN)
        && !stem.is_empty()
        && !file.contains(['#', '%'])
}

/// A fingerprint's length in hex digits ([`pipeline_engine::manifest::Components::fingerprint`]).
const FINGERPRINT_LEN: usize = 32;

fn three_parts(path: &Path) -> Option<[String; 3]> {
    let mut parts = path.parts().map(|p| p.as_ref().to_string());
    let three = [parts.next()?, parts.next()?, parts.next()?];
    parts.next().is_none().then_some(three)
}

fn is_lower_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

/// The store's own rules for a manifest's digests and paths, which a remote manifest must
/// meet too.
pub use pipeline_engine::manifest::{is_digest, is_inside};

/// `manifests/<fingerprint>/<instance>.json`. The instance is written as the local store writes
/// its directory name, or as a digest when that name holds a character object keys avoid (`%`).
pub fn manifest_path(instance: &str, fingerprint: &str) -> Path {
    let name = dir_name(instance);
    let key = if name.contains('%') {
        format!("h-{}", &blake3::hash(instance.as_bytes()).to_hex()[..32])
    } else {
        name
    };
    Path::from(format!("{MANIFESTS}/{fingerprint}/{key}.json"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_paths_round_trip() {
        let d = blake3::hash(b"x").to_hex().to_string();
        assert_eq!(digest_of(&object_path(&d)), Some(d));
        assert_eq!(digest_of(&Path::from("objects/ab/c#1")), None);
        assert_eq!(digest_of(&Path::from("manifests/ab/cd")), None);
    }

    /// Whether `gc --remote` may remove `path` when nothing keeps it: one of the names the
    /// tool gives what it writes. (The listing it comes from holds regular files only: a link
    /// or folder is never removed whatever its name.)
    fn is_tool_name(path: &Path) -> bool {
        digest_of(path).is_some() || is_manifest_name(path)
    }

    #[test]
    fn only_the_tools_own_names_may_be_removed() {
        let d = blake3::hash(b"x").to_hex().to_string();
        let fp = "0123456789abcdef0123456789abcdef";
        for ok in [
            format!("objects/{}/{}", &d[..2], &d[2..]),
            format!("manifests/{fp}/train@share_type=all.json"),
            format!("manifests/{fp}/h-{}.json", &d[..32]),
        ] {
            assert!(is_tool_name(&Path::from(ok.as_str())), "{ok}");
        }
        for bad in [
            format!("objects/{}/{}", &d[..3], &d[3..]),
            format!("objects/{}/{}", &d[..2], d[2..].to_uppercase()),
            format!("objects/{}/{}x", &d[..2], &d[2..]),
            format!("objects/{}/{}/x", &d[..2], &d[2..]),
            format!("objects/{}/{}#1", &d[..2], &d[2..]),
            "objects/ab/notes.txt".to_string(),
            format!("manifests/{fp}/a.json.bak"),
            format!("manifests/{fp}/.json"),
            format!("manifests/{fp}x/a.json"),
            format!("manifests/{fp}/a#1.json"),
            format!("manifests/{fp}/sub/a.json"),
            format!("manifests/{}/a.json", &d[..2]),
            format!("other/{}/{}", &d[..2], &d[2..]),
        ] {
            assert!(!is_tool_name(&Path::from(bad.as_str())), "{bad}");
        }
    }

    #[test]
    fn manifest_file_names_stay_inside() {
        assert!(is_inside("model/weights.safetensors"));
        for bad in ["", "../x", "a/../../x", "/etc/passwd", "./"] {
            assert!(!is_inside(bad), "{bad}");
        }
        assert!(!is_digest("../../x"));
    }

    #[test]
    fn manifest_paths_are_plain_keys() {
        assert_eq!(
            manifest_path("train@share_type=all", "f00").as_ref(),
            "manifests/f00/train@share_type=all.json"
        );
        let odd = manifest_path("t@path=a/b c", "f00");
        assert!(odd.as_ref().starts_with("manifests/f00/h-"), "{odd}");
        assert_eq!(odd, Path::from(odd.as_ref()));
    }
}
