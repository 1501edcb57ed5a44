//! Running a plan: ready instances run in parallel within `--jobs` CPU slots and `--gpus` GPU
//! tokens; each writes into a temporary directory that becomes its artifact only when it
//! succeeded (manifest written, then one rename), so a crash never leaves a half-written
//! artifact that counts as done.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Instant;

use anyhow::Context;
use indicatif::ProgressBar;
use rayon::prelude::*;
use serde::Serialize;
use tracing::{info, warn};

use crate::Pipeline;
use crate::error::UserError;
use crate::fingerprint::{Freshness, components, freshness, own_changes};
use crate::hash::{digest_of_set, hash_file};
use crate::index::Index;
use crate::manifest::{
    Components, FileEntry, LOG_DIR, MANIFEST, Manifest, RunStage, RunSummary, StageRecord,
    now_string,
};
use crate::stage::{DepArtifact, StageContext};
use crate::workspace::dir_name;

#[derive(Debug, Clone)]
pub struct RunOptions {
    pub jobs: usize,
    pub gpus: u32,
    /// Instances to re-run even if cached.
    pub force: HashSet<usize>,
    pub fail_fast: bool,
    pub targets: Vec<String>,
    /// `--executor`: overrides `executor.kind` of pipeline.yaml (`local` forces every stage
    /// local).
    pub executor: Option<crate::executor::config::ExecutorKind>,
    /// `--jobs` as given: caps the cluster jobs in flight (none: no cap).
    pub max_in_flight: Option<usize>,
    /// A remote store asked for a stale instance's artifact before it runs.
    pub remote: Option<std::sync::Arc<dyn crate::remote::RemoteCache>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    Ran,
    Cached,
    Failed,
    Skipped,
    /// `--dry-run`/`status`: would run.
    WouldRun,
    Fresh,
}

impl Status {
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

#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub instance: String,
    pub stage: String,
    pub status: Status,
    pub reasons: Vec<String>,
    pub fingerprint: Option<String>,
    pub duration_ms: Option<u64>,
    pub artifact: Option<PathBuf>,
    pub log: Option<PathBuf>,
    pub error: Option<String>,
}

/// How the executor tells the outside world what happens (the CLI draws progress bars).
pub trait Reporter: Sync {
    /// A stage starts; returns the bar the stage may feed.
    fn started(&self, instance: &str, reasons: &[String]) -> ProgressBar;
    fn finished(&self, outcome: &Outcome);
}

/// Reports nothing (library use and tests).
pub struct Silent;

impl Reporter for Silent {
    fn started(&self, _: &str, _: &[String]) -> ProgressBar {
        ProgressBar::hidden()
    }
    fn finished(&self, _: &Outcome) {}
}

pub struct RunResult {
    pub run_id: String,
    pub outcomes: Vec<Outcome>,
    pub index_note: Option<String>,
}

impl RunResult {
    pub fn ok(&self) -> bool {
        !self
            .outcomes
            .iter()
            .any(|o| matches!(o.status, Status::Failed | Status::Skipped))
    }
    pub fn counts(&self) -> BTreeMap<String, usize> {
        let mut counts: BTreeMap<String, usize> = ["ran", "cached", "failed", "skipped"]
            .iter()
            .map(|s| (s.to_string(), 0))
            .collect();
        for o in &self.outcomes {
            *counts.entry(o.status.as_str().to_string()).or_default() += 1;
        }
        counts
    }
}

/// What `status` and `run --dry-run` say: for each selected instance, fresh or not and why,
/// without running anything.
pub fn predict(
    p: &Pipeline,
    index: &mut Index,
    selected: &[usize],
    force: &HashSet<usize>,
) -> anyhow::Result<Vec<Outcome>> {
    let mut outputs: HashMap<usize, Option<String>> = HashMap::new();
    let mut out = Vec::new();
    for &i in selected {
        let inst = &p.plan.instances[i];
        let pending: Vec<&str> = inst
            .deps
            .iter()
            .filter(|d| outputs.get(d).is_none_or(|o| o.is_none()))
            .map(|d| p.plan.instances[*d].name.as_str())
            .collect();
        let mut outcome = Outcome {
            instance: inst.name.clone(),
            stage: inst.stage.clone(),
            status: Status::WouldRun,
            reasons: Vec::new(),
            fingerprint: None,
            duration_ms: None,
            artifact: None,
            log: None,
            error: None,
        };
        if !pending.is_empty() {
            let partial = components(inst, &p.registry, index, BTreeMap::new())?;
            outcome.reasons = own_changes(&p.ws, index, inst, &partial);
            outcome
                .reasons
                .extend(pending.iter().map(|d| format!("dep {d} will run")));
            outputs.insert(i, None);
        } else {
            let comps = components(inst, &p.registry, index, dep_outputs(p, inst, &outputs))?;
            outcome.fingerprint = Some(comps.fingerprint());
            match freshness(&p.ws, index, inst, &comps) {
                Freshness::Fresh { dir, manifest } if !force.contains(&i) => {
                    outcome.status = Status::Fresh;
                    outcome.artifact = Some(dir);
                    outputs.insert(i, Some(manifest.output_digest));
                }
                Freshness::Fresh { .. } => {
                    outcome.reasons = vec!["forced".into()];
                    outputs.insert(i, None);
                }
                Freshness::Stale { reasons } => {
                    outcome.reasons = reasons;
                    outputs.insert(i, None);
                }
            }
        }
        out.push(outcome);
    }
    Ok(out)
}

fn dep_outputs(
    p: &Pipeline,
    inst: &crate::plan::Instance,
    outputs: &HashMap<usize, Option<String>>,
) -> BTreeMap<String, String> {
    inst.deps
        .iter()
        .map(|d| {
            (
                p.plan.instances[*d].name.clone(),
                outputs.get(d).cloned().flatten().unwrap_or_default(),
            )
        })
        .collect()
}

enum State {
    Waiting,
    Running,
    Done { output: String, dir: PathBuf },
    Failed,
    Skipped,
}

/// A finished instance, from a local thread or a cluster executor.
#[allow(clippy::type_complexity)]
pub(crate) struct JobResult {
    pub(crate) index: usize,
    pub(crate) started: String,
    pub(crate) elapsed_ms: u64,
    pub(crate) result: Result<(Manifest, PathBuf), (String, PathBuf, StageRecord)>,
}

/// Runs the selected instances. The caller holds the workspace lock.
pub fn run(
    p: &Pipeline,
    index: &mut Index,
    selected: &[usize],
    opts: &RunOptions,
    reporter: &dyn Reporter,
) -> anyhow::Result<RunResult> {
    // Instances that run as cluster jobs (checked up front: tools on PATH, partitions).
    let remote = crate::executor::prepare(p, selected, opts.executor)?;
    for &i in selected {
        let inst = &p.plan.instances[i];
        if inst.resources.gpu > opts.gpus && !remote.contains_key(&i) {
            return Err(UserError::new(format!(
                "stage `{}` needs {} GPU(s) but this run has {} (--gpus)",
                inst.name, inst.resources.gpu, opts.gpus
            ))
            .into());
        }
    }
    let run_id = now_string();
    clear_tmp(&p.ws.tmp());
    let mut summary = RunSummary {
        run_id: run_id.clone(),
        pid: std::process::id(),
        started: run_id.clone(),
        finished: None,
        status: "running".into(),
        targets: opts.targets.clone(),
        counts: BTreeMap::new(),
        stages: Vec::new(),
        jobs: Vec::new(),
    };
    write_summary(&p.ws.runs(), &summary);

    let jobs = opts.jobs.max(1);
    let mut state: HashMap<usize, State> = selected.iter().map(|&i| (i, State::Waiting)).collect();
    let mut outcomes: HashMap<usize, Outcome> = HashMap::new();
    let mut cpu_used = 0usize;
    let mut gpu_used = 0u32;
    let mut running = 0usize;
    let mut remote_running = 0usize;
    let mut stop = false;
    let (tx, rx) = mpsc::channel::<JobResult>();
    let mut cluster_jobs = Vec::new();

    std::thread::scope(|scope| -> anyhow::Result<()> {
        let cluster = (!remote.is_empty()).then(|| {
            crate::executor::slurm::Cluster::start(scope, p, remote, summary.clone(), tx.clone())
        });
        let is_remote = |i: usize| cluster.as_ref().is_some_and(|c| c.runs(i));
        loop {
            let mut progressed = true;
            while progressed {
                progressed = false;
                for &i in selected {
                    if !matches!(state[&i], State::Waiting) {
                        continue;
                    }
                    let inst = &p.plan.instances[i];
                    let blocked = inst
                        .deps
                        .iter()
                        .find(|d| matches!(state.get(d), Some(State::Failed | State::Skipped)));
                    if let Some(&d) = blocked {
                        let reason = format!("dep {} failed", p.plan.instances[d].name);
                        let o = skipped(inst, reason);
                        reporter.finished(&o);
                        outcomes.insert(i, o);
                        state.insert(i, State::Skipped);
                        progressed = true;
                        continue;
                    }
                    if crate::executor::interrupted() {
                        let o = skipped(inst, "not started: the run was interrupted".into());
                        reporter.finished(&o);
                        outcomes.insert(i, o);
                        state.insert(i, State::Skipped);
                        progressed = true;
                        continue;
                    }
                    if stop {
                        let o = skipped(inst, "not started: --fail-fast after a failure".into());
                        reporter.finished(&o);
                        outcomes.insert(i, o);
                        state.insert(i, State::Skipped);
                        progressed = true;
                        continue;
                    }
                    let mut dep_out = BTreeMap::new();
                    let mut deps = Vec::new();
                    let mut ready = true;
                    for d in &inst.deps {
                        match state.get(d) {
                            Some(State::Done { output, dir }) => {
                                let dinst = &p.plan.instances[*d];
                                dep_out.insert(dinst.name.clone(), output.clone());
                                deps.push(DepArtifact {
                                    instance: dinst.name.clone(),
                                    stage: dinst.stage.clone(),
                                    coords: dinst.coords.clone(),
                                    dir: dir.clone(),
                                });
                            }
                            _ => ready = false,
                        }
                    }
                    if !ready {
                        continue;
                    }
                    let cpu = (inst.resources.cpu as usize).min(jobs);
                    let gpu = inst.resources.gpu;
                    let comps = match components(inst, &p.registry, index, dep_out) {
                        Ok(c) => c,
                        Err(e) => {
                            let o = failed(inst, None, format!("{e:#}"));
                            reporter.finished(&o);
                            outcomes.insert(i, o);
                            state.insert(i, State::Failed);
                            stop |= opts.fail_fast;
                            progressed = true;
                            continue;
                        }
                    };
                    let fp = comps.fingerprint();
                    let reasons = match freshness(&p.ws, index, inst, &comps) {
                        Freshness::Fresh { dir, manifest } if !opts.force.contains(&i) => {
                            index.set_latest(&inst.name, &fp)?;
                            let o = Outcome {
                                instance: inst.name.clone(),
                                stage: inst.stage.clone(),
                                status: Status::Cached,
                                reasons: Vec::new(),
                                fingerprint: Some(fp),
                                duration_ms: None,
                                artifact: Some(dir.clone()),
                                log: Some(dir.join(LOG_DIR)),
                                error: None,
                            };
                            reporter.finished(&o);
                            outcomes.insert(i, o);
                            state.insert(
                                i,
                                State::Done {
                                    output: manifest.output_digest.clone(),
                                    dir,
                                },
                            );
                            progressed = true;
                            continue;
                        }
                        Freshness::Fresh { .. } => vec!["forced".to_string()],
                        Freshness::Stale { reasons } => reasons,
                    };
                    let cache = opts.remote.as_deref().filter(|_| !opts.force.contains(&i));
                    if let Some((o, output, dir)) =
                        crate::remote::pull_instead_of_run(cache, &p.ws, index, inst, &fp)?
                    {
                        reporter.finished(&o);
                        outcomes.insert(i, o);
                        state.insert(i, State::Done { output, dir });
                        progressed = true;
                        continue;
                    }
                    if is_remote(i) {
                        // The cluster schedules resources; `--jobs` caps the jobs in flight.
                        if opts
                            .max_in_flight
                            .is_some_and(|cap| remote_running >= cap.max(1))
                        {
                            continue;
                        }
                        remote_running += 1;
                    } else {
                        // Resources: a stage may always start when nothing else runs, so one
                        // asking for more CPU slots than --jobs still runs (alone).
                        let fits = running == remote_running
                            || (cpu_used + cpu <= jobs && gpu_used + gpu <= opts.gpus);
                        if !fits || gpu_used + gpu > opts.gpus {
                            continue;
                        }
                        cpu_used += cpu;
                        gpu_used += gpu;
                    }
                    running += 1;
                    state.insert(i, State::Running);
                    info!(stage = %inst.name, fingerprint = %fp, reasons = ?reasons, "stage started");
                    let bar = reporter.started(&inst.name, &reasons);
                    outcomes.insert(
                        i,
                        Outcome {
                            instance: inst.name.clone(),
                            stage: inst.stage.clone(),
                            status: Status::Ran,
                            reasons: reasons.clone(),
                            fingerprint: Some(fp.clone()),
                            duration_ms: None,
                            artifact: None,
                            log: None,
                            error: None,
                        },
                    );
                    if let Some(c) = cluster.as_ref().filter(|c| c.runs(i)) {
                        c.submit(crate::executor::slurm::Submission {
                            index: i,
                            fingerprint: fp,
                            comps,
                            deps,
                            reasons,
                            started: now_string(),
                            bar,
                        });
                        continue;
                    }
                    let tx = tx.clone();
                    let run_id = run_id.clone();
                    scope.spawn(move || {
                        let started = now_string();
                        let t0 = Instant::now();
                        let result =
                            execute_one(p, i, &comps, &fp, deps, &run_id, &started, reasons, &bar);
                        bar.finish_and_clear();
                        let _ = tx.send(JobResult {
                            index: i,
                            started,
                            elapsed_ms: t0.elapsed().as_millis() as u64,
                            result,
                        });
                    });
                }
            }
            if running == 0 {
                break;
            }
            let Ok(done) = rx.recv() else { break };
            running -= 1;
            let inst = &p.plan.instances[done.index];
            if is_remote(done.index) {
                remote_running -= 1;
            } else {
                cpu_used -= (inst.resources.cpu as usize).min(jobs);
                gpu_used -= inst.resources.gpu;
            }
            let outcome = outcomes.get_mut(&done.index).expect("inserted at start");
            outcome.duration_ms = Some(done.elapsed_ms);
            match done.result {
                Ok((manifest, dir)) => {
                    index.add_record(&manifest.record)?;
                    index.set_latest(&inst.name, &manifest.fingerprint)?;
                    outcome.artifact = Some(dir.clone());
                    outcome.log = Some(dir.join(LOG_DIR));
                    info!(stage = %inst.name, ms = done.elapsed_ms, "stage finished");
                    state.insert(
                        done.index,
                        State::Done {
                            output: manifest.output_digest,
                            dir,
                        },
                    );
                }
                Err((error, log_dir, record)) => {
                    let _ = done.started;
                    index.add_record(&record)?;
                    info!(stage = %inst.name, error = %error, "stage failed");
                    outcome.status = Status::Failed;
                    outcome.error = Some(error);
                    outcome.log = Some(log_dir);
                    state.insert(done.index, State::Failed);
                    stop |= opts.fail_fast;
                }
            }
            reporter.finished(outcome);
        }
        if let Some(c) = cluster {
            cluster_jobs = c.finish();
        }
        Ok(())
    })?;
    index.flush();

    let outcomes: Vec<Outcome> = selected.iter().filter_map(|i| outcomes.remove(i)).collect();
    let result = RunResult {
        run_id,
        outcomes,
        index_note: index.note.clone(),
    };
    summary.finished = Some(now_string());
    summary.status = if result.ok() {
        "ok".into()
    } else {
        "failed".into()
    };
    summary.counts = result.counts();
    summary.jobs = cluster_jobs;
    summary.stages = result
        .outcomes
        .iter()
        .map(|o| RunStage {
            instance: o.instance.clone(),
            status: o.status.as_str().into(),
            fingerprint: o.fingerprint.clone(),
            duration_ms: o.duration_ms,
        })
        .collect();
    write_summary(&p.ws.runs(), &summary);
    Ok(result)
}

fn skipped(inst: &crate::plan::Instance, reason: String) -> Outcome {
    Outcome {
        instance: inst.name.clone(),
        stage: inst.stage.clone(),
        status: Status::Skipped,
        reasons: vec![reason],
        fingerprint: None,
        duration_ms: None,
        artifact: None,
        log: None,
        error: None,
    }
}

fn failed(inst: &crate::plan::Instance, fp: Option<String>, error: String) -> Outcome {
    Outcome {
        instance: inst.name.clone(),
        stage: inst.stage.clone(),
        status: Status::Failed,
        reasons: Vec::new(),
        fingerprint: fp,
        duration_ms: None,
        artifact: None,
        log: None,
        error: Some(error),
    }
}

/// Runs one stage in a temporary directory and commits it; on failure keeps its logs under
/// `.pipeline/failed/` and throws the partial output away.
#[allow(
    clippy::too_many_arguments,
    clippy::type_complexity,
    clippy::result_large_err
)]
fn execute_one(
    p: &Pipeline,
    i: usize,
    comps: &Components,
    fp: &str,
    deps: Vec<DepArtifact>,
    run_id: &str,
    started: &str,
    reasons: Vec<String>,
    bar: &ProgressBar,
) -> Result<(Manifest, PathBuf), (String, PathBuf, StageRecord)> {
    let inst = &p.plan.instances[i];
    let t0 = Instant::now();
    let tmp = p.ws.tmp().join(format!(
        "{}-{fp}-{}",
        dir_name(&inst.name),
        std::process::id()
    ));
    let out_dir = tmp.join("out");
    let log_dir = tmp.join("log");
    let work_dir = p.ws.work_dir(&inst.name, fp);
    let mut record = StageRecord {
        run_id: run_id.to_string(),
        instance: inst.name.clone(),
        stage: inst.stage.clone(),
        fingerprint: fp.to_string(),
        status: "ok".into(),
        started: started.to_string(),
        finished: String::new(),
        duration_ms: 0,
        reasons,
        error: None,
        dir: PathBuf::new(),
        job: None,
    };
    let attempt = (|| -> anyhow::Result<(Manifest, PathBuf)> {
        let _ = std::fs::remove_dir_all(&tmp);
        for d in [&out_dir, &log_dir, &work_dir] {
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
            out_dir: &out_dir,
            work_dir: &work_dir,
            log_dir: &log_dir,
            inputs: &inputs,
            deps: &deps,
            progress: bar,
        };
        // A panic in a stage fails that stage, not the whole run (as in a cluster job).
        crate::executor::instance::run_stage(kind.as_ref(), &ctx)?;
        let files = hash_tree(&out_dir)?;
        let output_digest =
            digest_of_set(files.iter().map(|f| (f.path.as_str(), f.blake3.as_str())));
        std::fs::rename(&log_dir, out_dir.join(LOG_DIR))
            .context("moving the logs into the artifact")?;
        let dest = p.ws.artifact_dir(&inst.name, fp);
        record.finished = now_string();
        record.duration_ms = t0.elapsed().as_millis() as u64;
        record.dir = dest.clone();
        let manifest = Manifest {
            format: crate::manifest::FORMAT,
            instance: inst.name.clone(),
            stage: inst.stage.clone(),
            fingerprint: fp.to_string(),
            components: comps.clone(),
            files,
            output_digest,
            record: record.clone(),
        };
        std::fs::write(
            out_dir.join(MANIFEST),
            serde_json::to_vec_pretty(&manifest)?,
        )
        .context("writing MANIFEST.json")?;
        commit(&out_dir, &dest, &tmp)?;
        let _ = std::fs::remove_dir_all(&tmp);
        let _ = std::fs::remove_dir_all(&work_dir);
        Ok((manifest, dest))
    })();
    attempt.map_err(|e| {
        let error = format!("{e:#}");
        record.status = "failed".into();
        record.error = Some(error.clone());
        record.finished = now_string();
        record.duration_ms = t0.elapsed().as_millis() as u64;
        let kept =
            p.ws.failed()
                .join(dir_name(&inst.name))
                .join(run_id.replace(':', "-"));
        let _ = std::fs::create_dir_all(kept.parent().unwrap_or(Path::new(".")));
        let _ = std::fs::remove_dir_all(&kept);
        if std::fs::rename(&log_dir, &kept).is_err() {
            let _ = std::fs::create_dir_all(&kept);
        }
        record.dir = kept.clone();
        let _ = std::fs::write(
            kept.join("record.json"),
            serde_json::to_vec_pretty(&record).unwrap_or_default(),
        );
        let _ = std::fs::remove_dir_all(&tmp);
        (error, kept, record)
    })
}

/// Moves a finished output into place. An artifact already there (a `--force` re-run) is moved
/// aside first; a crash in between leaves no artifact, and the next run makes it again.
pub fn commit(out_dir: &Path, dest: &Path, tmp: &Path) -> anyhow::Result<()> {
    if let Some(parent) = dest.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    if dest.exists() {
        let old = tmp.join("replaced");
        std::fs::rename(dest, &old)
            .with_context(|| format!("moving the old {} aside", dest.display()))?;
    }
    std::fs::rename(out_dir, dest).with_context(|| format!("committing {}", dest.display()))?;
    Ok(())
}

/// Every file under `dir` with its size and digest, sorted by path.
pub fn hash_tree(dir: &Path) -> anyhow::Result<Vec<FileEntry>> {
    let mut paths = Vec::new();
    walk(dir, dir, &mut paths)?;
    let mut files: Vec<FileEntry> = paths
        .par_iter()
        .map(|(rel, full)| -> anyhow::Result<FileEntry> {
            let size = std::fs::metadata(full)?.len();
            Ok(FileEntry {
                path: rel.clone(),
                size,
                blake3: hash_file(full).with_context(|| format!("hashing {rel}"))?,
            })
        })
        .collect::<anyhow::Result<_>>()?;
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(files)
}

fn walk(base: &Path, dir: &Path, out: &mut Vec<(String, PathBuf)>) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            walk(base, &path, out)?;
        } else {
            let rel = path
                .strip_prefix(base)
                .unwrap_or(&path)
                .to_string_lossy()
                .into_owned();
            out.push((rel, path));
        }
    }
    Ok(())
}

/// Temporary directories left by a killed run; only called while holding the lock.
fn clear_tmp(tmp: &Path) {
    if let Ok(entries) = std::fs::read_dir(tmp) {
        for e in entries.flatten() {
            info!("removing {} left by an interrupted run", e.path().display());
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

pub(crate) fn write_summary(dir: &Path, summary: &RunSummary) {
    let path = dir.join(format!("{}.json", summary.run_id.replace(':', "-")));
    let tmp = path.with_extension("json.tmp");
    let written = serde_json::to_vec_pretty(summary)
        .map_err(std::io::Error::other)
        .and_then(|b| std::fs::write(&tmp, b))
        .and_then(|_| std::fs::rename(&tmp, &path));
    if let Err(e) = written {
        warn!("could not write the run summary {}: {e}", path.display());
    }
}
