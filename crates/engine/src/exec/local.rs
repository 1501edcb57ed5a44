//! One instance run here, in a thread of `pipeline run`: into a temporary directory, hashed,
//! given its manifest and committed; on failure its logs are kept under `.pipeline/failed/` and
//! the partial output is thrown away.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;

use super::store::{commit, warn_bad_metrics};
use super::{Committed, Failure, Ready};
use crate::Pipeline;
use crate::hash::digest_of_set;
use crate::manifest::{LOG_DIR, MANIFEST, Manifest, StageRecord, now_string};
use crate::outputs::hash_tree;
use crate::plan::Instance;
use crate::stage::StageContext;
use crate::workspace::dir_name;

/// Where one attempt writes.
struct Dirs {
    tmp: PathBuf,
    out: PathBuf,
    log: PathBuf,
    work: PathBuf,
}

/// Runs instance `i` as `ready` describes and commits its output.
pub(super) fn execute(
    p: &Pipeline,
    i: usize,
    ready: &Ready,
    run_id: &str,
    started: &str,
) -> Result<Committed, Box<Failure>> {
    let inst = &p.plan.instances[i];
    let t0 = Instant::now();
    let tmp = p.ws.tmp().join(format!(
        "{}-{}-{}",
        dir_name(&inst.name),
        ready.fp,
        std::process::id()
    ));
    let dirs = Dirs {
        out: tmp.join("out"),
        log: tmp.join("log"),
        work: p.ws.work_dir(&inst.name, &ready.fp),
        tmp,
    };
    let mut record = StageRecord {
        run_id: run_id.to_string(),
        instance: inst.name.clone(),
        stage: inst.stage.clone(),
        fingerprint: ready.fp.clone(),
        status: "ok".into(),
        started: started.to_string(),
        finished: String::new(),
        duration_ms: 0,
        reasons: ready.reasons.clone(),
        error: None,
        dir: PathBuf::new(),
        job: None,
    };
    match attempt(p, inst, ready, &dirs, &mut record, t0) {
        Ok(done) => Ok(done),
        Err(e) => Err(Box::new(keep_failed(p, inst, &dirs, record, &e, t0))),
    }
}

fn attempt(
    p: &Pipeline,
    inst: &Instance,
    ready: &Ready,
    dirs: &Dirs,
    record: &mut StageRecord,
    t0: Instant,
) -> anyhow::Result<Committed> {
    let _ = crate::owned::remove(&p.ws, &dirs.tmp);
    crate::owned::create_marked(&dirs.tmp)
        .and_then(|_| crate::owned::create_in_marked(&dirs.work))
        .with_context(|| format!("creating {}", dirs.tmp.display()))?;
    for d in [&dirs.out, &dirs.log] {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    let kind = p.registry.get(&inst.kind).context("unknown kind")?;
    let inputs: Vec<PathBuf> = inst.inputs.iter().map(|f| f.path.clone()).collect();
    let ctx = StageContext {
        instance: &inst.name,
        stage: &inst.stage,
        params: &inst.params,
        spec: &inst.spec,
        root: &p.plan.root,
        out_dir: &dirs.out,
        work_dir: &dirs.work,
        log_dir: &dirs.log,
        inputs: &inputs,
        deps: &ready.deps,
        progress: &ready.bar,
    };
    // A panic in a stage fails that stage, not the whole run (as in a cluster job).
    crate::executor::instance::run_stage(kind.as_ref(), &ctx)?;
    let files = hash_tree(&dirs.out)?;
    warn_bad_metrics(&inst.name, &dirs.out);
    let output_digest = digest_of_set(files.iter().map(|f| (f.path.as_str(), f.blake3.as_str())));
    std::fs::rename(&dirs.log, dirs.out.join(LOG_DIR))
        .context("moving the logs into the artifact")?;
    let dest = p.ws.artifact_dir(&inst.name, &ready.fp);
    record.finished = now_string();
    record.duration_ms = t0.elapsed().as_millis() as u64;
    record.dir = dest.clone();
    let manifest = Manifest {
        format: crate::manifest::FORMAT,
        instance: inst.name.clone(),
        stage: inst.stage.clone(),
        fingerprint: ready.fp.clone(),
        components: ready.comps.clone(),
        files,
        output_digest,
        record: record.clone(),
    };
    std::fs::write(
        dirs.out.join(MANIFEST),
        serde_json::to_vec_pretty(&manifest)?,
    )
    .context("writing MANIFEST.json")?;
    commit(&dirs.out, &dest, &dirs.tmp)?;
    let _ = crate::owned::remove(&p.ws, &dirs.tmp);
    let _ = crate::owned::remove(&p.ws, &dirs.work);
    Ok((manifest, dest))
}

/// Keeps the failed attempt's logs and record under `.pipeline/failed/<instance>/<run>/`.
fn keep_failed(
    p: &Pipeline,
    inst: &Instance,
    dirs: &Dirs,
    mut record: StageRecord,
    e: &anyhow::Error,
    t0: Instant,
) -> Failure {
    let error = crate::error::anyhow_text(e);
    record.status = "failed".into();
    record.error = Some(error.clone());
    record.finished = now_string();
    record.duration_ms = t0.elapsed().as_millis() as u64;
    let kept =
        p.ws.failed()
            .join(dir_name(&inst.name))
            .join(record.run_id.replace(':', "-"));
    let _ = crate::owned::create_marked(kept.parent().unwrap_or(Path::new(".")));
    let _ = crate::owned::remove(&p.ws, &kept);
    if std::fs::rename(&dirs.log, &kept).is_err() {
        let _ = std::fs::create_dir_all(&kept);
    }
    record.dir = kept.clone();
    let _ = std::fs::write(
        kept.join("record.json"),
        serde_json::to_vec_pretty(&record).unwrap_or_default(),
    );
    let _ = crate::owned::remove(&p.ws, &dirs.tmp);
    Failure {
        error,
        log: kept,
        record,
    }
}
