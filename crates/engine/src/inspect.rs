//! Read-only views of a workspace: `status`, `show`, `runs`, `metrics`, and the artifacts with
//! their manifests that `exp show`, `diff` and `plot` compare. They never take the run lock, so
//! they answer while a run is going on.

use std::collections::HashSet;
use std::path::PathBuf;

use serde::Serialize;
use serde_json::Value;

use crate::Pipeline;
use crate::error::{InspectError, UserError};
use crate::exec::{Outcome, Status, predict};
use crate::index::{Index, list_artifacts};
use crate::manifest::{FileEntry, JobEntry, JobInfo, LOG_DIR, Manifest, RunSummary};
use crate::workspace::LockInfo;

/// What `status` shows.
#[derive(Debug, Serialize)]
pub struct StatusReport {
    /// The run in progress (who holds the workspace lock); `None` when none is.
    pub running: Option<LockInfo>,
    /// Cluster jobs of the run in progress that are not done yet.
    pub jobs: Vec<JobEntry>,
    /// Each selected instance, fresh or stale and why, in plan order.
    pub stages: Vec<Outcome>,
    /// Said when the index was read from the manifests rather than sled (a run holds it).
    #[serde(skip)]
    pub note: Option<String>,
}

/// Whether each instance of `targets` (all when empty) is fresh, and why not, without running
/// anything or taking the run lock.
pub fn status(p: &Pipeline, targets: &[String]) -> Result<StatusReport, InspectError> {
    let selected = p.plan.select(targets)?;
    let mut index = Index::open_read_only(&p.ws);
    let stages = predict(p, &mut index, &selected, &HashSet::new())?;
    let running = p.ws.holder();
    Ok(StatusReport {
        jobs: running
            .as_ref()
            .map(|h| jobs_in_flight(p, h.pid))
            .unwrap_or_default(),
        running,
        stages,
        note: index.note.take(),
    })
}

/// When a stage run started and ended.
#[derive(Debug, Serialize)]
pub struct Timings {
    /// Start, as the run record has it (RFC 3339, UTC).
    pub started: String,
    /// End, likewise.
    pub finished: String,
    /// How long it ran, in milliseconds.
    pub duration_ms: u64,
}

/// What `show` says about one instance.
#[derive(Debug, Serialize)]
pub struct ShowReport {
    /// The instance's name (`finetune@task=tnews`).
    pub stage: String,
    /// Its stage kind.
    pub kind: String,
    /// Its current fingerprint; `None` while a dep has yet to run.
    pub fingerprint: Option<String>,
    /// `fresh` or `stale`.
    pub status: &'static str,
    /// Why it is stale; empty when fresh.
    pub reasons: Vec<String>,
    /// Its current artifact when fresh, else the latest it produced; `None` if it never
    /// succeeded (or that artifact is gone).
    pub artifact: Option<PathBuf>,
    /// The artifact's `metrics.json`, if it has one.
    pub metrics: Option<Value>,
    /// The instance's params, as the plan resolved them.
    pub params: serde_json::Map<String, Value>,
    /// The artifact's input digests, by input key (empty without an artifact).
    pub inputs: std::collections::BTreeMap<String, String>,
    /// The artifact's files (empty without an artifact).
    pub outputs: Vec<FileEntry>,
    /// When the artifact's run started and ended.
    pub timings: Option<Timings>,
    /// The artifact's `.log/` directory.
    pub log: Option<PathBuf>,
    /// The instances it depends on, by name.
    pub deps: Vec<String>,
    /// The cluster job that made the artifact (job id, node, queue wait, run time).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<JobInfo>,
}

/// The current state of one instance and what its latest successful run left.
pub fn show(p: &Pipeline, name: &str) -> Result<ShowReport, InspectError> {
    let i = match p.plan.find(name) {
        Some(i) => i,
        None => {
            let matches: Vec<&str> = p
                .plan
                .instances
                .iter()
                .filter(|i| i.stage == name)
                .map(|i| i.name.as_str())
                .collect();
            if matches.is_empty() {
                p.plan.select(&[name.to_string()])?;
                return Err(UserError::new(format!("there is no stage named `{name}`")).into());
            }
            return Err(
                UserError::new(format!("`{name}` has several matrix instances; name one"))
                    .with_help(matches.join(", "))
                    .into(),
            );
        }
    };
    let inst = &p.plan.instances[i];
    let selected = p.plan.select(std::slice::from_ref(&inst.name))?;
    let mut index = Index::open_read_only(&p.ws);
    let outcome = predict(p, &mut index, &selected, &HashSet::new())?
        .into_iter()
        .find(|o| o.instance == inst.name)
        .ok_or_else(|| InspectError::NotPredicted {
            instance: inst.name.clone(),
        })?;
    let fresh = outcome.status == Status::Fresh;
    // A fresh instance shows its current artifact; a stale one the latest it produced.
    let dir = outcome.artifact.clone().or_else(|| {
        index
            .latest(&inst.name)
            .map(|fp| p.ws.artifact_dir(&inst.name, &fp))
    });
    let manifest = dir.as_deref().and_then(Manifest::read);
    let dir = manifest.as_ref().and(dir);
    let job = manifest.as_ref().and_then(|m| m.record.job.clone());
    let (inputs, outputs, timings, metrics) = match (&manifest, &dir) {
        (Some(m), Some(d)) => (
            m.components.inputs.clone(),
            m.files.clone(),
            Some(Timings {
                started: m.record.started.clone(),
                finished: m.record.finished.clone(),
                duration_ms: m.record.duration_ms,
            }),
            m.metrics(d),
        ),
        _ => Default::default(),
    };
    Ok(ShowReport {
        stage: inst.name.clone(),
        kind: inst.kind.clone(),
        fingerprint: outcome.fingerprint.clone(),
        status: if fresh { "fresh" } else { "stale" },
        reasons: outcome.reasons,
        log: dir.as_ref().map(|d| d.join(LOG_DIR)),
        artifact: dir,
        metrics,
        params: inst.params.clone(),
        inputs,
        outputs,
        timings,
        deps: inst
            .deps
            .iter()
            .map(|d| p.plan.instances[*d].name.clone())
            .collect(),
        job,
    })
}

/// The cluster jobs the run of process `pid` has in flight, from its run record.
pub fn jobs_in_flight(p: &Pipeline, pid: u32) -> Vec<JobEntry> {
    runs(p, usize::MAX)
        .into_iter()
        .filter(|r| r.pid == pid && r.status == "running")
        .flat_map(|r| r.jobs.into_iter().filter(|j| !j.done))
        .collect()
}

/// The most bytes of one run record read. A record takes ~146 bytes per instance (measured:
/// 439 KB for a run of 3,000), so 64 MiB holds a run of over 400,000 instances; a larger file
/// (or a FIFO or `/dev/zero` linked into `runs/`) is skipped, as an unreadable one always was,
/// instead of being read whole into memory or blocking `runs` and `status` for ever.
pub const RUN_RECORD_LIMIT: u64 = 64 << 20;

/// Past `pipeline run` invocations, newest first. A record that cannot be read (over
/// [`RUN_RECORD_LIMIT`], not a regular file) or parsed is left out.
pub fn runs(p: &Pipeline, limit: usize) -> Vec<RunSummary> {
    let holder = p.ws.holder();
    let read = |path: &std::path::Path| {
        pipeline_bounded::read(path, RUN_RECORD_LIMIT, "a run record").ok()
    };
    let mut out: Vec<RunSummary> = std::fs::read_dir(p.ws.runs())
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
                .filter_map(|e| serde_json::from_slice(&read(&e.path())?).ok())
                .collect()
        })
        .unwrap_or_default();
    for r in &mut out {
        if r.status == "running" && holder.as_ref().is_none_or(|h| h.pid != r.pid) {
            r.status = "interrupted".into();
        }
    }
    out.sort_by(|a, b| b.run_id.cmp(&a.run_id));
    out.truncate(limit);
    out
}

/// One artifact's `metrics.json`, as `metrics` lists it.
#[derive(Debug, Serialize)]
pub struct MetricsRow {
    /// The instance that made it.
    pub instance: String,
    /// Its stage.
    pub stage: String,
    /// The artifact's fingerprint.
    pub fingerprint: String,
    /// The run that made it.
    pub run_id: String,
    /// When that run finished the stage.
    pub finished: String,
    /// Whether it is the artifact its instance produced last.
    pub current: bool,
    /// The metrics.
    pub metrics: Value,
}

/// `metrics.json` of every artifact (of the named stages), oldest first.
pub fn metrics(p: &Pipeline, stages: &[String], latest_only: bool) -> Vec<MetricsRow> {
    artifacts(p, stages, latest_only)
        .into_iter()
        .filter_map(|a| {
            Some(MetricsRow {
                metrics: a.metrics?,
                instance: a.manifest.instance,
                stage: a.manifest.stage,
                fingerprint: a.manifest.fingerprint,
                run_id: a.manifest.record.run_id,
                finished: a.manifest.record.finished,
                current: a.current,
            })
        })
        .collect()
}

/// One committed artifact: its manifest (how it was made, its files, its run record), its
/// `metrics.json`, and whether it is the one its instance produced last. What `metrics`,
/// `exp show`, `diff` and `plot` read.
#[derive(Debug, Clone)]
pub struct ArtifactInfo {
    /// The artifact directory.
    pub dir: PathBuf,
    /// Its `MANIFEST.json`.
    pub manifest: Manifest,
    /// Its `metrics.json`; `None` if it has none or it is not JSON.
    pub metrics: Option<Value>,
    /// Whether it is the artifact its instance produced last.
    pub current: bool,
}

/// Every artifact in the store whose stage or instance is among `names` (all if empty),
/// oldest first (by finish time, then instance); with `latest_only`, the one each instance
/// produced last.
pub fn artifacts(p: &Pipeline, names: &[String], latest_only: bool) -> Vec<ArtifactInfo> {
    let index = Index::open_read_only(&p.ws);
    let mut out = Vec::new();
    for (dir, _) in list_artifacts(&p.ws) {
        let Some(m) = Manifest::read(&dir) else {
            continue;
        };
        if !names.is_empty() && !names.iter().any(|s| *s == m.stage || *s == m.instance) {
            continue;
        }
        let current = index.latest(&m.instance).as_deref() == Some(m.fingerprint.as_str());
        if latest_only && !current {
            continue;
        }
        out.push(ArtifactInfo {
            metrics: m.metrics(&dir),
            dir,
            manifest: m,
            current,
        });
    }
    fn key(x: &ArtifactInfo) -> (&str, &str) {
        (&x.manifest.record.finished, &x.manifest.instance)
    }
    out.sort_by(|a, b| key(a).cmp(&key(b)));
    out
}

/// Nested metric objects flattened to `a.b` keys, for a table.
pub fn flatten_metrics(v: &Value) -> Vec<(String, String)> {
    fn go(prefix: &str, v: &Value, out: &mut Vec<(String, String)>) {
        match v {
            Value::Object(map) => {
                for (k, v) in map {
                    let key = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    go(&key, v, out);
                }
            }
            Value::String(s) => out.push((prefix.to_string(), s.clone())),
            other => out.push((prefix.to_string(), other.to_string())),
        }
    }
    let mut out = Vec::new();
    go("", v, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stage::Registry;

    /// A run record over the limit (sparse: no bytes written) and a FIFO in `runs/` are left
    /// out at once; the honest record beside them is listed.
    #[test]
    fn runs_skips_a_record_over_the_limit_and_a_fifo() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pipeline.yaml");
        std::fs::write(&path, "stages:\n  a:\n    cmd: \"true\"\n").unwrap();
        let p = Pipeline::load(&path, &[], Registry::builtin()).unwrap();
        p.ws.ensure().unwrap();
        let runs_dir = p.ws.runs();
        let honest = RunSummary {
            run_id: "2026-01-01T00:00:00.000Z".into(),
            pid: 1,
            started: "2026-01-01T00:00:00.000Z".into(),
            finished: None,
            status: "ok".into(),
            targets: Vec::new(),
            counts: Default::default(),
            stages: Vec::new(),
            jobs: Vec::new(),
            cause: None,
        };
        crate::exec::write_summary(&runs_dir, &honest);
        let big = std::fs::File::create(runs_dir.join("big.json")).unwrap();
        big.set_len(RUN_RECORD_LIMIT + 1).unwrap();
        let fifo = runs_dir.join("fifo.json");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo failed");
        let t0 = std::time::Instant::now();
        let listed = runs(&p, usize::MAX);
        assert!(t0.elapsed().as_secs() < 5, "took {:?}", t0.elapsed());
        let ids: Vec<&str> = listed.iter().map(|r| r.run_id.as_str()).collect();
        assert_eq!(ids, [honest.run_id.as_str()]);
    }
}
