//! The controller's side of a finished job: a job that succeeded is committed (its output
//! hashed, the manifest written, one rename into the store); one that failed keeps its logs,
//! the job script and a `record.json` with the job id and state under `.pipeline/failed/`.
//! Nothing here runs on a compute node.

use std::path::{Path, PathBuf};

use super::script::Attempt;
use crate::Pipeline;
use crate::error::JobError;
use crate::exec::{commit, hash_tree};
use crate::hash::digest_of_set;
use crate::manifest::{Components, FORMAT, LOG_DIR, MANIFEST, Manifest, StageRecord, now_string};
use crate::workspace::dir_name;

/// Waits (bounded) for the job's output directory to be visible: on a shared filesystem the
/// controller may see the marker before the files it follows.
fn wait_visible(dir: &Path, wait: std::time::Duration) -> Result<(), JobError> {
    let t0 = std::time::Instant::now();
    while !dir.is_dir() {
        if t0.elapsed() > wait {
            return Err(JobError::NotVisible {
                dir: dir.to_path_buf(),
                waited: wait,
            });
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    Ok(())
}

/// Commits a succeeded job's output into the store (hashed, its logs and the job script moved
/// into `.log/`, the manifest written, one rename); the attempt directory and the instance's
/// work directory are removed after. Returns the manifest and the artifact directory.
pub fn commit_job(
    p: &Pipeline,
    attempt: &Attempt,
    comps: &Components,
    fp: &str,
    mut record: StageRecord,
    fs_wait: std::time::Duration,
) -> Result<(Manifest, PathBuf), JobError> {
    let out = attempt.out();
    wait_visible(&out, fs_wait)?;
    for name in [MANIFEST, LOG_DIR] {
        if out.join(name).exists() {
            return Err(JobError::Reserved { name });
        }
    }
    let files = hash_tree(&out)?;
    let output_digest = digest_of_set(files.iter().map(|f| (f.path.as_str(), f.blake3.as_str())));
    // The stage's logs and the job's stdout/stderr, and how it was submitted.
    let log = attempt.log();
    let _ = std::fs::copy(attempt.script(), log.join("job.sh"));
    std::fs::rename(&log, out.join(LOG_DIR)).map_err(JobError::MoveLogs)?;
    let dest = p.ws.artifact_dir(&record.instance, fp);
    record.finished = now_string();
    record.dir = dest.clone();
    let manifest = Manifest {
        format: FORMAT,
        instance: record.instance.clone(),
        stage: record.stage.clone(),
        fingerprint: fp.to_string(),
        components: comps.clone(),
        files,
        output_digest,
        record,
    };
    std::fs::write(out.join(MANIFEST), serde_json::to_vec_pretty(&manifest)?)
        .map_err(JobError::WriteManifest)?;
    commit(&out, &dest, &attempt.dir)?;
    let _ = crate::owned::remove(&p.ws, &attempt.dir);
    let _ = crate::owned::remove(&p.ws, &p.ws.work_dir(&manifest.instance, fp));
    Ok((manifest, dest))
}

/// Keeps a failed job's logs under `.pipeline/failed/<instance>/<run>-job<id>/` with a
/// `record.json` (job id and state); returns where.
pub fn keep_failed(p: &Pipeline, attempt: &Attempt, record: &mut StageRecord) -> PathBuf {
    let job = record
        .job
        .as_ref()
        .map(|j| format!("-job{}", j.job_id))
        .unwrap_or_default();
    let kept =
        p.ws.failed()
            .join(dir_name(&record.instance))
            .join(format!("{}{job}", record.run_id.replace(':', "-")));
    let _ = crate::owned::create_marked(kept.parent().unwrap_or(Path::new(".")));
    let _ = crate::owned::remove(&p.ws, &kept);
    if std::fs::rename(attempt.log(), &kept).is_err() {
        let _ = std::fs::create_dir_all(&kept);
    }
    let _ = std::fs::copy(attempt.script(), kept.join("job.sh"));
    record.finished = now_string();
    record.dir = kept.clone();
    let _ = std::fs::write(
        kept.join("record.json"),
        serde_json::to_vec_pretty(record).unwrap_or_default(),
    );
    kept
}
