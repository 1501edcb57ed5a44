//! Running a plan: ready instances run in parallel within `--jobs` CPU slots and `--gpus` GPU
//! tokens; each writes into a temporary directory that becomes its artifact only when it
//! succeeded (manifest written, then one rename), so a crash never leaves a half-written
//! artifact that counts as done.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Instant;

use indicatif::ProgressBar;
use serde::Serialize;

mod local;
mod scheduler;
mod store;

use crate::Pipeline;
use crate::error::{FingerprintError, IndexError, RunError, UserError};
use crate::fingerprint::{Freshness, components, freshness, own_changes};
use crate::index::Index;
pub use crate::manifest::Status;
use crate::manifest::{Components, Manifest, RunStage, RunSummary, StageRecord, now_string};
pub use crate::outputs::hash_tree;
use crate::stage::DepArtifact;
use scheduler::Scheduler;
use store::clear_tmp;
pub use store::{DOWNLOADS, commit};
pub(crate) use store::{move_entry, write_summary};

/// How `pipeline run` runs the selected instances (its flags).
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// CPU slots for local stages (`--jobs`, default the machine's cores; 0 counts as 1): a
    /// stage takes `resources.cpu` of them, capped at this.
    pub jobs: usize,
    /// GPU tokens for local stages (`--gpus`); a run with a local stage needing more is
    /// refused before anything starts.
    pub gpus: u32,
    /// Instances to re-run even if cached.
    pub force: HashSet<usize>,
    /// `--fail-fast`: after a failure, start nothing more.
    pub fail_fast: bool,
    /// The targets as given on the command line, for the run summary.
    pub targets: Vec<String>,
    /// `--executor`: overrides `executor.kind` of pipeline.yaml (`local` forces every stage
    /// local).
    pub executor: Option<crate::executor::config::ExecutorKind>,
    /// `--jobs` as given: caps the cluster jobs in flight (none: no cap).
    pub max_in_flight: Option<usize>,
    /// A remote store to pull stale instances from instead of running them (`--remote`;
    /// none with `--no-remote`).
    pub remote: Option<std::sync::Arc<dyn crate::remote::RemoteCache>>,
}

/// What happened to one instance in a run (or would happen, in a prediction).
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    /// The instance's name.
    pub instance: String,
    /// Its stage.
    pub stage: String,
    /// How it ended.
    pub status: Status,
    /// Why it ran or would run ("never ran", "forced", "dep x will run"), why it was skipped,
    /// or that it was pulled from a remote; empty for one found in the store.
    pub reasons: Vec<String>,
    /// Its fingerprint; `None` while a dep has yet to run, or when it could not be computed.
    pub fingerprint: Option<String>,
    /// How long it took to run and commit (for a cluster job, from its first submission), in
    /// milliseconds; `None` if it did not run.
    pub duration_ms: Option<u64>,
    /// Its artifact directory, when it has one.
    pub artifact: Option<PathBuf>,
    /// Its logs: the artifact's `.log/`, or the kept logs of a failure.
    pub log: Option<PathBuf>,
    /// Why it failed, with its causes.
    pub error: Option<String>,
}

/// How the executor tells the outside world what happens (the CLI draws progress bars).
pub trait Reporter: Sync {
    /// A stage starts; returns the bar the stage may feed.
    fn started(&self, instance: &str, reasons: &[String]) -> ProgressBar;
    /// An instance was settled: ran, cached, failed or skipped.
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

/// What a run did.
pub struct RunResult {
    /// The run's id: the time it started (RFC 3339), after which its summary in `runs/` is
    /// named.
    pub run_id: String,
    /// Each selected instance's outcome, in the order of the selection.
    pub outcomes: Vec<Outcome>,
    /// Said when the index was rebuilt from the manifests, for the CLI to show.
    pub index_note: Option<String>,
}

impl RunResult {
    /// Whether no instance failed or was skipped.
    pub fn ok(&self) -> bool {
        !self
            .outcomes
            .iter()
            .any(|o| matches!(o.status, Status::Failed | Status::Skipped))
    }
    /// How many instances ran, were cached, failed and were skipped (those four always
    /// present), by status name.
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
) -> Result<Vec<Outcome>, FingerprintError> {
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
            outcome.reasons.extend(pending_reasons(&pending));
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

/// A committed instance: its manifest and artifact directory.
pub(crate) type Committed = (Manifest, PathBuf);

/// A failed instance: the error, where its logs were kept, and its record.
pub(crate) struct Failure {
    pub(crate) error: String,
    pub(crate) log: PathBuf,
    pub(crate) record: StageRecord,
}

/// A finished instance, from a local thread or a cluster executor.
pub(crate) struct JobResult {
    pub(crate) index: usize,
    pub(crate) elapsed_ms: u64,
    pub(crate) result: Result<Committed, Box<Failure>>,
}

/// What a ready instance starts with: its fingerprint and components, its deps' artifacts,
/// why it runs, and its progress bar.
pub(crate) struct Ready {
    pub(crate) comps: Components,
    pub(crate) fp: String,
    pub(crate) deps: Vec<DepArtifact>,
    pub(crate) reasons: Vec<String>,
    pub(crate) bar: ProgressBar,
}

/// Why an instance waits on deps that will run: one reason per dep up to [`NAMED_DEPS`], else
/// how many and the first few — a report with a hundred deps would otherwise print a line of
/// kilobytes (as DVC's status does, it counts them).
fn pending_reasons(pending: &[&str]) -> Vec<String> {
    if pending.len() <= NAMED_DEPS {
        return pending
            .iter()
            .map(|d| format!("dep {d} will run"))
            .collect();
    }
    let named = pending[..NAMED_DEPS].join(", ");
    vec![format!(
        "{} deps will run ({named} and {} more)",
        pending.len(),
        pending.len() - NAMED_DEPS
    )]
}

/// How many pending deps a reason names one by one.
const NAMED_DEPS: usize = 3;

/// Runs the selected instances. The caller holds the workspace lock. A stage that fails is an
/// outcome, not an error: the run stops early only when it cannot start (a [`UserError`]) or
/// the index cannot record what happened.
pub fn run(
    p: &Pipeline,
    index: &mut Index,
    selected: &[usize],
    opts: &RunOptions,
    reporter: &dyn Reporter,
) -> Result<RunResult, RunError> {
    // Instances that run as cluster jobs (checked up front: tools on PATH, partitions).
    let remote = crate::executor::prepare(p, selected, opts.executor)?;
    check_gpus(p, selected, opts, &remote)?;
    crate::procgroup::stop_groups_on_interrupt();
    crate::procgroup::CLUSTER.store(!remote.is_empty(), std::sync::atomic::Ordering::Relaxed);
    let mut summary = start_summary(p, opts);
    let run_id = summary.run_id.clone();
    let mut sched = Scheduler::new(p, selected, opts, reporter);
    let (tx, rx) = mpsc::channel::<JobResult>();
    let mut cluster_jobs = Vec::new();

    let scoped = std::thread::scope(|scope| -> Result<(), IndexError> {
        let cluster = (!remote.is_empty()).then(|| {
            crate::executor::slurm::Cluster::start(scope, p, remote, summary.clone(), tx.clone())
        });
        let is_remote = |i: usize| cluster.as_ref().is_some_and(|c| c.runs(i));
        loop {
            // Settle everything that can be, start everything that fits.
            while let Some((i, ready)) = sched.next(index, &is_remote)? {
                match cluster.as_ref().filter(|c| c.runs(i)) {
                    Some(c) => c.submit(crate::executor::slurm::Submission {
                        index: i,
                        fingerprint: ready.fp,
                        comps: ready.comps,
                        deps: ready.deps,
                        reasons: ready.reasons,
                        started: now_string(),
                        bar: ready.bar,
                    }),
                    None => spawn_local(scope, p, i, *ready, &run_id, tx.clone()),
                }
            }
            if sched.running() == 0 {
                break;
            }
            let Ok(done) = rx.recv() else { break };
            let remote = is_remote(done.index);
            sched.finished(done, index, remote)?;
        }
        if let Some(c) = cluster {
            cluster_jobs = c.finish();
        }
        Ok(())
    });
    index.flush();

    let result = RunResult {
        run_id,
        outcomes: sched.into_outcomes(selected),
        index_note: index.note.clone(),
    };
    summary.jobs = cluster_jobs;
    // A store write that failed (the index on a full disk) ends the run here: the summary
    // says so, rather than staying "running", which `runs` shows as "interrupted".
    finish_summary(p, &mut summary, &result, scoped.as_ref().err());
    scoped?;
    Ok(result)
}

/// A local instance needing more GPUs than `--gpus` could never start.
fn check_gpus(
    p: &Pipeline,
    selected: &[usize],
    opts: &RunOptions,
    remote: &HashMap<usize, crate::executor::JobSettings>,
) -> Result<(), UserError> {
    for &i in selected {
        let inst = &p.plan.instances[i];
        if inst.resources.gpu > opts.gpus && !remote.contains_key(&i) {
            return Err(UserError::new(format!(
                "stage `{}` needs {} GPU(s) but this run has {} (--gpus)",
                inst.name, inst.resources.gpu, opts.gpus
            )));
        }
    }
    Ok(())
}

/// Runs one instance in a thread of this process and sends back how it ended.
fn spawn_local<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    p: &'scope Pipeline,
    i: usize,
    ready: Ready,
    run_id: &str,
    tx: mpsc::Sender<JobResult>,
) {
    let run_id = run_id.to_string();
    scope.spawn(move || {
        let started = now_string();
        let t0 = Instant::now();
        let result = local::execute(p, i, &ready, &run_id, &started);
        ready.bar.finish_and_clear();
        let _ = tx.send(JobResult {
            index: i,
            elapsed_ms: t0.elapsed().as_millis() as u64,
            result,
        });
    });
}

/// Clears what killed runs left and writes the summary of a run that starts now.
fn start_summary(p: &Pipeline, opts: &RunOptions) -> RunSummary {
    let run_id = now_string();
    clear_tmp(&p.ws);
    let summary = RunSummary {
        run_id: run_id.clone(),
        pid: std::process::id(),
        started: run_id,
        finished: None,
        status: "running".into(),
        targets: opts.targets.clone(),
        counts: BTreeMap::new(),
        stages: Vec::new(),
        jobs: Vec::new(),
        cause: None,
    };
    write_summary(&p.ws.runs(), &summary);
    summary
}

/// The summary of a finished run: how it ended, why if it did not succeed (`error`: what
/// stopped the run itself, else the first stage's error), and each stage.
fn finish_summary(
    p: &Pipeline,
    summary: &mut RunSummary,
    result: &RunResult,
    error: Option<&IndexError>,
) {
    summary.finished = Some(now_string());
    summary.status = if error.is_some() {
        "failed".into()
    } else if result.ok() {
        "ok".into()
    } else if crate::executor::interrupted() {
        "interrupted".into()
    } else {
        "failed".into()
    };
    let run_error = error.map(|e| crate::error::chain_text(e));
    summary.cause = run_error
        .as_deref()
        .or_else(|| result.outcomes.iter().find_map(|o| o.error.as_deref()))
        .map(|e| e.chars().take(500).collect());
    summary.counts = result.counts();
    summary.stages = result
        .outcomes
        .iter()
        .map(|o| RunStage {
            instance: o.instance.clone(),
            status: o.status,
            fingerprint: o.fingerprint.clone(),
            duration_ms: o.duration_ms,
        })
        .collect();
    write_summary(&p.ws.runs(), summary);
}

#[cfg(test)]
mod tests {
    use super::pending_reasons;

    #[test]
    fn a_few_pending_deps_are_named_many_are_counted() {
        assert_eq!(pending_reasons(&["a"]), ["dep a will run"]);
        assert_eq!(
            pending_reasons(&["a", "b", "c"]),
            ["dep a will run", "dep b will run", "dep c will run"]
        );
        let many: Vec<String> = (0..113).map(|i| format!("s{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert_eq!(
            pending_reasons(&many),
            ["113 deps will run (s0, s1, s2 and 110 more)"]
        );
    }
}
