//! `MANIFEST.json`: what an artifact directory holds (files, sizes, digests), how it was made
//! (the fingerprint's components) and the run record. Manifests on disk are the source of
//! truth; the sled index can always be rebuilt from them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The manifest's file name, at the top of every artifact directory (not part of the output
/// digest: it is written after the files are hashed).
pub const MANIFEST: &str = "MANIFEST.json";
/// Logs (and a stage's full metrics) live inside the artifact under this name; it is not part of
/// the output digest.
pub use pipeline_metrics::LOG_DIR;
/// The manifest layout's version. A manifest of another version is not read (the artifact
/// counts as missing), and the version is hashed into every fingerprint, so changing it
/// re-runs everything rather than misreading old artifacts.
pub const FORMAT: u32 = 1;

/// Everything a fingerprint is computed from. Kept in the manifest so that `status` can say
/// which part changed.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Components {
    /// The stage kind (`cmd`, `pretrain`, ...).
    pub kind: String,
    /// The kind's code digest ([`crate::stage::Stage::code_version`]).
    pub code_version: String,
    /// The instance's params after substitution, its matrix coordinates included.
    pub params: serde_json::Map<String, Value>,
    /// What the kind needs besides params: `{"cmd": ..., "outs": [...]}` for `cmd`, null for
    /// the other kinds.
    pub spec: Value,
    /// Input file → blake3.
    pub inputs: BTreeMap<String, String>,
    /// Dep instance → its output digest.
    pub deps: BTreeMap<String, String>,
}

impl Components {
    /// The fingerprint: the first 32 hex digits (128 bits) of blake3 over the canonical JSON
    /// of [`FORMAT`] and these components.
    pub fn fingerprint(&self) -> String {
        // serde_json's maps are sorted, so this serialisation is canonical.
        let bytes = serde_json::to_vec(&(FORMAT, self)).unwrap_or_default();
        blake3::hash(&bytes).to_hex()[..32].to_string()
    }
}

/// One file of an artifact, as the manifest lists it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FileEntry {
    /// The path relative to the artifact directory, `/`-separated (always UTF-8).
    pub path: String,
    /// Length in bytes.
    pub size: u64,
    /// The blake3 digest of the bytes, hex.
    pub blake3: String,
}

/// One execution of one stage instance.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StageRecord {
    /// The `pipeline run` it belonged to ([`RunSummary::run_id`]).
    pub run_id: String,
    /// The instance name (`pretrain@share_type=all`).
    pub instance: String,
    /// The stage it is an instance of.
    pub stage: String,
    /// The fingerprint it ran for.
    pub fingerprint: String,
    /// "ok" or "failed".
    pub status: String,
    /// When it started (RFC 3339, milliseconds, UTC; see [`now_string`]).
    pub started: String,
    /// When it was committed or failed, in the same form.
    pub finished: String,
    /// Wall-clock milliseconds from start to commit or failure (for a cluster job, from its
    /// first submission).
    pub duration_ms: u64,
    /// Why it ran: what made it stale (`never ran`, `param lr changed 0.1 → 0.2`) or `forced`.
    #[serde(default)]
    pub reasons: Vec<String>,
    /// The failure, with its causes (`None` when it succeeded).
    #[serde(default)]
    pub error: Option<String>,
    /// The artifact directory (ok) or the kept log directory (failed).
    pub dir: PathBuf,
    /// The cluster job that ran it (absent for local runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<JobInfo>,
}

/// How a cluster job of an instance went: `pipeline show` prints it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct JobInfo {
    /// The executor that ran it (`slurm`).
    pub executor: String,
    /// The scheduler's id of the job (the last one after a resubmission).
    pub job_id: String,
    /// The scheduler's final state, with the reason (`COMPLETED`, `FAILED exit 3`, `TIMEOUT`).
    pub state: String,
    /// The node it ran on, when known.
    #[serde(default)]
    pub node: Option<String>,
    /// Submission to start, when the job started.
    #[serde(default)]
    pub queue_wait_ms: Option<u64>,
    /// Start to end, when the job started.
    #[serde(default)]
    pub run_ms: Option<u64>,
    /// Jobs submitted for this instance (more than one after a retry).
    #[serde(default)]
    pub attempts: u32,
}

/// The content of `MANIFEST.json`: one committed artifact.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    /// [`FORMAT`] when it was written.
    pub format: u32,
    /// The instance the artifact belongs to.
    pub instance: String,
    /// The instance's stage.
    pub stage: String,
    /// The fingerprint, also the artifact directory's name.
    pub fingerprint: String,
    /// What the fingerprint was computed from (`status` diffs these to say why a stage is
    /// stale).
    pub components: Components,
    /// Every output file, sorted by path; the logs in [`LOG_DIR`] and the manifest itself
    /// are not listed.
    pub files: Vec<FileEntry>,
    /// [`crate::hash::digest_of_set`] over `files`' paths and digests: what dependents'
    /// fingerprints take in, so that identical output keeps them cached.
    pub output_digest: String,
    /// The run that made the artifact.
    pub record: StageRecord,
}

/// The most bytes of a `MANIFEST.json` read. A manifest takes ~150 bytes per listed file, so
/// 64 MiB is over 400,000 files, more than any stage writes; a larger one (or `/dev/zero` linked
/// in its place) is refused before it is read whole, where `std::fs::read` once took 1.9 GB.
pub const MANIFEST_LIMIT: u64 = 64 << 20;

/// The most bytes of an artifact's metrics record read. The largest a stage writes is
/// pretrain's, one small object per logged point (about 100 bytes): 64 MiB is over 600,000
/// points. Parsed into a `serde_json::Value` it takes a few times its size in memory.
pub const METRICS_LIMIT: u64 = 64 << 20;

/// Why an artifact's `MANIFEST.json` was not read ([`Manifest::load`]). Each message names the
/// file and says what is wrong once (the cause's text is part of it, not a separate source).
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// It is missing, not a regular file (a FIFO, a directory), over [`MANIFEST_LIMIT`], or
    /// could not be read.
    #[error(transparent)]
    Read(#[from] pipeline_bounded::ReadError),
    /// It is not JSON of a manifest's shape.
    #[error("{}: not a valid manifest ({error})", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// What the JSON parser said (line and column).
        error: serde_json::Error,
    },
    /// It was written in another layout ([`FORMAT`]).
    #[error("{}: manifest format {found}, this version reads format {FORMAT}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// The format it declares.
        found: u32,
    },
}

impl Manifest {
    /// The manifest of the artifact directory `dir`; `None` when it is missing, unreadable,
    /// not valid or of another [`FORMAT`] ([`Manifest::load`] says which).
    pub fn read(dir: &Path) -> Option<Manifest> {
        Manifest::load(dir).ok()
    }

    /// The manifest of the artifact directory `dir`, read bounded ([`MANIFEST_LIMIT`]; a FIFO
    /// in its place is refused at once, not waited on), or why it could not be.
    pub fn load(dir: &Path) -> Result<Manifest, ManifestError> {
        let path = dir.join(MANIFEST);
        let bytes = pipeline_bounded::read(&path, MANIFEST_LIMIT, "an artifact manifest")?;
        let m: Manifest = serde_json::from_slice(&bytes).map_err(|error| ManifestError::Json {
            path: path.clone(),
            error,
        })?;
        if m.format != FORMAT {
            return Err(ManifestError::Format {
                path,
                found: m.format,
            });
        }
        Ok(m)
    }

    /// What is wrong with the manifest on its own, without reading the files it lists: a path
    /// that leaves the artifact (empty, absolute, `..`), names the manifest, the log directory
    /// or the store's marker, or comes twice, a digest that is not 64 hex digits, and an output
    /// digest that is not [`crate::hash::digest_of_set`] of the listed files. One line each;
    /// empty when it is sound. A manifest from elsewhere (a remote) is checked with this before
    /// anything it names is committed, and `verify` checks every local one with it, so that
    /// bytes served under an honest-looking output digest are caught.
    pub fn inconsistencies(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for f in &self.files {
            if let Some(why) = unfit_path(&f.path) {
                problems.push(format!("{:?} {why}", truncated(&f.path)));
            } else if !seen.insert(f.path.as_str()) {
                problems.push(format!("{:?} is listed twice", truncated(&f.path)));
            }
            if !is_digest(&f.blake3) {
                problems.push(format!(
                    "{:?} has a digest that is not a blake3 digest",
                    truncated(&f.path)
                ));
            }
        }
        let digest = crate::hash::digest_of_set(
            self.files
                .iter()
                .map(|f| (f.path.as_str(), f.blake3.as_str())),
        );
        if digest != self.output_digest {
            problems.push(format!(
                "the output digest {} is not the digest of the listed files ({})",
                truncated(&self.output_digest),
                &digest[..12]
            ));
        }
        problems
    }

    /// A cheap health check used on every run: each listed file is there, a regular file (not
    /// followed through a link) with its size. `verify` re-hashes the bytes. A committed
    /// output holds only regular files, so a FIFO or a link swapped in for an empty file is
    /// damage: taken as present, it hung the dependants that read it.
    pub fn files_present(&self, dir: &Path) -> bool {
        self.files.iter().all(|f| {
            std::fs::symlink_metadata(dir.join(&f.path))
                .is_ok_and(|m| m.is_file() && m.len() == f.size)
        })
    }

    /// The artifact's metrics, timings included (the full record in its log directory when
    /// there, see [`crate::metrics`]); one that is not JSON, not a regular file or over
    /// [`METRICS_LIMIT`] is left out with a warning.
    pub fn metrics(&self, dir: &Path) -> Option<Value> {
        let path = crate::metrics::full_record(dir, crate::metrics::METRICS);
        let bytes = match pipeline_bounded::read(&path, METRICS_LIMIT, "a metrics record") {
            Ok(bytes) => bytes,
            Err(e) if e.is_not_found() => return None,
            Err(e) => {
                tracing::warn!("{e}; its metrics are left out");
                return None;
            }
        };
        serde_json::from_slice(&bytes)
            .map_err(|e| {
                tracing::warn!(
                    "{}: not valid JSON ({e}); its metrics are left out",
                    path.display()
                )
            })
            .ok()
    }
}

/// A `pipeline run` invocation, kept in `.pipeline/runs/<run_id>.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunSummary {
    /// The run's start time as [`now_string`] gives it, which also names the file (colons as
    /// dashes) and orders the runs.
    pub run_id: String,
    /// The controller's process id: a "running" summary whose process no longer holds the
    /// workspace is shown as interrupted.
    pub pid: u32,
    /// When the run started (the same text as `run_id`).
    pub started: String,
    /// When it ended; `None` while it runs (or when it was killed).
    pub finished: Option<String>,
    /// "running", "ok", "failed" (or "interrupted" when shown for a run whose process died).
    pub status: String,
    /// The targets as given on the command line; empty means every stage.
    pub targets: Vec<String>,
    /// Instances by outcome: `ran`, `cached`, `failed` and `skipped` always, zero included;
    /// empty until the run ends.
    pub counts: BTreeMap<String, usize>,
    /// Each selected instance and how it went; empty until the run ends.
    pub stages: Vec<RunStage>,
    /// Cluster jobs of the run (job ids, so that the next run can find them after a crash).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<JobEntry>,
    /// The first stage error of a run that did not succeed (a full disk shows here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
}

/// One cluster job of a run, as the run record keeps it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct JobEntry {
    /// The instance the job runs.
    pub instance: String,
    /// The fingerprint it runs for.
    pub fingerprint: String,
    /// The scheduler's job id.
    pub job_id: String,
    /// The scheduler's state as last seen (`PENDING (Resources)`, `RUNNING`, ...), or how the
    /// job ended.
    pub state: String,
    /// Whether the controller is done with it.
    #[serde(default)]
    pub done: bool,
    /// The job's temporary directory (on the store's filesystem).
    pub attempt: PathBuf,
}

/// How an instance ended in a run, or stands in a prediction (kept in the run summary as
/// [`RunStage::status`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    /// It ran and its output was committed.
    Ran,
    /// Its artifact was already in the store, or pulled from a remote.
    Cached,
    /// It ran and failed (or could not be fingerprinted).
    Failed,
    /// It did not start: a dep failed, the run was interrupted, or `--fail-fast`.
    Skipped,
    /// `--dry-run`/`status`: would run.
    WouldRun,
    /// `--dry-run`/`status`: its artifact is in the store.
    Fresh,
}

impl Status {
    /// The status as `--json` and the run summary spell it (`would-run`).
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ran => "ran",
            Status::Cached => "cached",
            Status::Failed => "failed",
            Status::Skipped => "skipped",
            Status::WouldRun => "would-run",
            Status::Fresh => "fresh",
        }
    }
}

/// One instance of a run, as its summary keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunStage {
    /// The instance name.
    pub instance: String,
    /// `ran`, `cached`, `failed` or `skipped`.
    pub status: Status,
    /// `None` when none could be computed (a dep failed, an input could not be read).
    pub fingerprint: Option<String>,
    /// Wall-clock milliseconds of an instance that ran (or failed running); `None` when it was
    /// cached or skipped.
    pub duration_ms: Option<u64>,
}

/// Now, as RFC 3339 in UTC with milliseconds (`2025-01-31T09:15:02.123Z`): the form of every
/// time stamp in records and summaries, and of run ids.
pub fn now_string() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

/// Why `path` cannot be a file of an artifact: it must be relative, plain (no `.`, `..`, root),
/// not empty, and not one of the names the store itself writes there.
fn unfit_path(path: &str) -> Option<&'static str> {
    let first = Path::new(path).components().next().map(|c| c.as_os_str());
    if !is_inside(path) {
        Some("is not a relative path inside the artifact")
    } else if path == MANIFEST || first == Some(LOG_DIR.as_ref()) || path == crate::owned::MARK {
        Some("is a name the store reserves for itself")
    } else {
        None
    }
}

/// Whether `s` is a blake3 digest as the store writes it (64 hex digits): a manifest from
/// elsewhere is not trusted to name files with anything else.
pub fn is_digest(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|c| c.is_ascii_hexdigit())
}

/// Whether `path` (a file of a manifest) stays inside its artifact's directory: relative,
/// without `..`, not empty.
pub fn is_inside(path: &str) -> bool {
    !path.is_empty()
        && Path::new(path)
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)))
}

/// At most 80 characters of a name from an untrusted manifest, for a message.
fn truncated(s: &str) -> String {
    match s.char_indices().nth(80) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(path: &str, content: &str) -> FileEntry {
        FileEntry {
            path: path.into(),
            size: content.len() as u64,
            blake3: blake3::hash(content.as_bytes()).to_hex().to_string(),
        }
    }

    /// A manifest listing `files`, with the output digest they give.
    fn manifest(files: Vec<FileEntry>) -> Manifest {
        let output_digest =
            crate::hash::digest_of_set(files.iter().map(|f| (f.path.as_str(), f.blake3.as_str())));
        Manifest {
            format: FORMAT,
            instance: "a".into(),
            stage: "a".into(),
            fingerprint: "0".repeat(32),
            components: Components {
                kind: "cmd".into(),
                code_version: String::new(),
                params: serde_json::Map::new(),
                spec: Value::Null,
                inputs: BTreeMap::new(),
                deps: BTreeMap::new(),
            },
            files,
            output_digest,
            record: StageRecord {
                run_id: String::new(),
                instance: "a".into(),
                stage: "a".into(),
                fingerprint: "0".repeat(32),
                status: "ok".into(),
                started: String::new(),
                finished: String::new(),
                duration_ms: 0,
                reasons: Vec::new(),
                error: None,
                dir: PathBuf::new(),
                job: None,
            },
        }
    }

    fn only_problem(m: &Manifest, needle: &str) {
        let problems = m.inconsistencies();
        assert!(
            problems.iter().any(|p| p.contains(needle)),
            "no {needle:?} in {problems:?}"
        );
    }

    #[test]
    fn a_sound_manifest_has_no_inconsistencies() {
        let m = manifest(vec![entry("a.txt", "a"), entry("sub/b.bin", "b")]);
        assert_eq!(m.inconsistencies(), Vec::<String>::new());
        assert!(manifest(Vec::new()).inconsistencies().is_empty());
    }

    #[test]
    fn an_output_digest_that_is_not_the_files_is_found() {
        let mut m = manifest(vec![entry("a.txt", "a")]);
        // Other bytes served under the honest digest: the file's digest changed, not the output's.
        m.files[0] = entry("a.txt", "other bytes");
        only_problem(&m, "is not the digest of the listed files");
        let mut m = manifest(vec![entry("a.txt", "a")]);
        m.output_digest = "f".repeat(64);
        only_problem(&m, "is not the digest of the listed files");
    }

    #[test]
    fn reserved_names_are_found() {
        for path in [MANIFEST, ".log", ".log/x", crate::owned::MARK] {
            let m = manifest(vec![entry("a.txt", "a"), entry(path, "x")]);
            only_problem(&m, "is a name the store reserves for itself");
            assert_eq!(
                m.inconsistencies().len(),
                1,
                "{path}: {:?}",
                m.inconsistencies()
            );
        }
        assert_eq!(LOG_DIR, ".log");
        // Only the first component is reserved for the log directory.
        assert!(
            manifest(vec![entry("sub/.log", "x")])
                .inconsistencies()
                .is_empty()
        );
    }

    #[test]
    fn a_path_listed_twice_is_found() {
        let m = manifest(vec![entry("a.txt", "a"), entry("a.txt", "a")]);
        only_problem(&m, "\"a.txt\" is listed twice");
    }

    #[test]
    fn paths_leaving_the_artifact_are_found() {
        for path in ["../x", "/etc/passwd", "a/../../x", "./a", ""] {
            let m = manifest(vec![entry(path, "x")]);
            only_problem(&m, "is not a relative path inside the artifact");
        }
    }

    #[test]
    fn digests_that_are_not_blake3_are_found_without_a_panic() {
        for digest in ["", "xyz", &"g".repeat(64), &"é".repeat(32), &"a".repeat(63)] {
            let mut m = manifest(vec![entry("a.txt", "a")]);
            m.files[0].blake3 = digest.to_string();
            m.output_digest = crate::hash::digest_of_set([("a.txt", digest)]);
            only_problem(&m, "has a digest that is not a blake3 digest");
        }
    }

    #[test]
    fn long_names_are_cut_in_messages() {
        let long = "x".repeat(100_000);
        let m = manifest(vec![entry(&format!("../{long}"), "x")]);
        let problems = m.inconsistencies();
        assert!(problems.iter().all(|p| p.len() < 400), "{problems:?}");
    }

    #[test]
    fn load_refuses_what_is_not_a_manifest_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let e = Manifest::load(dir.path()).unwrap_err();
        assert!(
            matches!(&e, ManifestError::Read(r) if r.is_not_found()),
            "{e}"
        );
        std::fs::write(dir.path().join(MANIFEST), "{\"format\": 1}").unwrap();
        let e = Manifest::load(dir.path()).unwrap_err().to_string();
        assert!(e.contains("MANIFEST.json: not a valid manifest"), "{e}");
        let mut m = manifest(Vec::new());
        m.format = FORMAT + 1;
        std::fs::write(dir.path().join(MANIFEST), serde_json::to_vec(&m).unwrap()).unwrap();
        let e = Manifest::load(dir.path()).unwrap_err().to_string();
        assert!(e.contains("manifest format 2"), "{e}");
        m.format = FORMAT;
        std::fs::write(dir.path().join(MANIFEST), serde_json::to_vec(&m).unwrap()).unwrap();
        assert_eq!(
            Manifest::load(dir.path()).unwrap().fingerprint,
            m.fingerprint
        );
    }

    #[test]
    fn load_refuses_a_manifest_over_the_limit_unread() {
        let dir = tempfile::tempdir().unwrap();
        let f = std::fs::File::create(dir.path().join(MANIFEST)).unwrap();
        f.set_len(8 << 30).unwrap(); // sparse: read whole, 8 GiB
        let e = Manifest::load(dir.path()).unwrap_err().to_string();
        assert!(e.contains("larger than 64 MiB"), "{e}");
        assert!(Manifest::read(dir.path()).is_none());
    }
}
