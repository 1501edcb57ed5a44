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

impl Manifest {
    /// The manifest of the artifact directory `dir`; `None` when it is missing, unreadable,
    /// not valid or of another [`FORMAT`].
    pub fn read(dir: &Path) -> Option<Manifest> {
        let bytes = std::fs::read(dir.join(MANIFEST)).ok()?;
        let m: Manifest = serde_json::from_slice(&bytes).ok()?;
        (m.format == FORMAT).then_some(m)
    }

    /// A cheap health check used on every run: each listed file is there with its size.
    /// `verify` re-hashes the bytes.
    pub fn files_present(&self, dir: &Path) -> bool {
        self.files
            .iter()
            .all(|f| std::fs::metadata(dir.join(&f.path)).is_ok_and(|m| m.len() == f.size))
    }

    /// The artifact's metrics, timings included (the full record in its log directory when
    /// there, see [`crate::metrics`]); one that is not JSON is left out with a warning.
    pub fn metrics(&self, dir: &Path) -> Option<Value> {
        let path = crate::metrics::full_record(dir, crate::metrics::METRICS);
        let bytes = std::fs::read(&path).ok()?;
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

/// One instance of a run, as its summary keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunStage {
    /// The instance name.
    pub instance: String,
    /// `ran`, `cached`, `failed` or `skipped`.
    pub status: String,
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
