//! `MANIFEST.json`: what an artifact directory holds (files, sizes, digests), how it was made
//! (the fingerprint's components) and the run record. Manifests on disk are the source of
//! truth; the sled index can always be rebuilt from them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub const MANIFEST: &str = "MANIFEST.json";
/// Logs (and a stage's full metrics) live inside the artifact under this name; it is not part of
/// the output digest.
pub use pipeline_metrics::LOG_DIR;
pub const FORMAT: u32 = 1;

/// Everything a fingerprint is computed from. Kept in the manifest so that `status` can say
/// which part changed.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Components {
    pub kind: String,
    pub code_version: String,
    pub params: serde_json::Map<String, Value>,
    pub spec: Value,
    /// Input file → blake3.
    pub inputs: BTreeMap<String, String>,
    /// Dep instance → its output digest.
    pub deps: BTreeMap<String, String>,
}

impl Components {
    pub fn fingerprint(&self) -> String {
        // serde_json's maps are sorted, so this serialisation is canonical.
        let bytes = serde_json::to_vec(&(FORMAT, self)).unwrap_or_default();
        blake3::hash(&bytes).to_hex()[..32].to_string()
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FileEntry {
    pub path: String,
    pub size: u64,
    pub blake3: String,
}

/// One execution of one stage instance.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StageRecord {
    pub run_id: String,
    pub instance: String,
    pub stage: String,
    pub fingerprint: String,
    /// "ok" or "failed".
    pub status: String,
    pub started: String,
    pub finished: String,
    pub duration_ms: u64,
    #[serde(default)]
    pub reasons: Vec<String>,
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
    pub executor: String,
    pub job_id: String,
    /// The scheduler's final state, with the reason (`COMPLETED`, `FAILED exit 3`, `TIMEOUT`).
    pub state: String,
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

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    pub instance: String,
    pub stage: String,
    pub fingerprint: String,
    pub components: Components,
    pub files: Vec<FileEntry>,
    pub output_digest: String,
    pub record: StageRecord,
}

impl Manifest {
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
    pub run_id: String,
    pub pid: u32,
    pub started: String,
    pub finished: Option<String>,
    /// "running", "ok", "failed" (or "interrupted" when shown for a run whose process died).
    pub status: String,
    pub targets: Vec<String>,
    pub counts: BTreeMap<String, usize>,
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
    pub instance: String,
    pub fingerprint: String,
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

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunStage {
    pub instance: String,
    pub status: String,
    pub fingerprint: Option<String>,
    pub duration_ms: Option<u64>,
}

pub fn now_string() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}
