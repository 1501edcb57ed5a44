//! The tracker thread: submits the instances the run loop hands it, polls all jobs in flight
//! with one Slurm call per poll (backing off while nothing changes), judges each job by its
//! exit marker first and Slurm's state second, retries node failures and preemptions, and
//! cancels everything with one `scancel` when the controller is interrupted.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::thread::Scope;
use std::time::{Duration, Instant, SystemTime};

use tracing::{info, warn};

use super::commands::{self, Source, ToolError};
use super::script::Attempt;
use super::{Msg, Submission, finish};
use crate::Pipeline;
use crate::error::chain_text;
use crate::exec::{Failure, JobResult, write_summary};
use crate::executor::{JobSettings, interrupted};
use crate::manifest::{JobEntry, JobInfo, RunSummary, StageRecord};

const POLL_MIN: Duration = Duration::from_millis(250);
/// How often the tracker wakes: to take submissions and look for exit markers (a `stat` per
/// job in flight); a finished job waits half of it on average before it is committed.
const TICK: Duration = Duration::from_millis(40);

mod judge;
mod submit;

struct Job {
    sub: Submission,
    s: JobSettings,
    attempt: Attempt,
    id: Option<String>,
    line: String,
    submitted: SystemTime,
    first: Instant,
    attempts: u32,
    state: String,
    node: Option<String>,
    hopeless_since: Option<Instant>,
    unknown_since: Option<Instant>,
    ended_since: Option<Instant>,
    /// A (re)submission waiting after a transient sbatch error.
    retry_at: Option<Instant>,
    trouble_since: Option<Instant>,
}

pub(crate) struct Tracker<'scope, 'env> {
    scope: &'scope Scope<'scope, 'env>,
    p: &'env Pipeline,
    settings: HashMap<usize, JobSettings>,
    summary: RunSummary,
    results: Sender<JobResult>,
    exe: PathBuf,
    jobs: HashMap<usize, Job>,
    entries: Vec<JobEntry>,
    orphans: HashMap<(String, String), JobEntry>,
    source: Source,
    interval: Duration,
    next_poll: Instant,
    dirty: bool,
    cancelled_all: bool,
    seq: u64,
    stats: Stats,
}

#[derive(Default, serde::Serialize)]
struct Stats {
    polls: u64,
    poll_calls: u64,
    poll_ms: f64,
    max_in_flight: usize,
    sbatch_calls: u64,
    sbatch_ms: f64,
    judged: u64,
    /// Marker written → seen by the controller, summed over jobs.
    detect_ms: f64,
}

/// Time spent committing outputs (in the commit threads), for the benchmark.
static COMMIT_US: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl<'scope, 'env> Tracker<'scope, 'env> {
    pub(crate) fn new(
        scope: &'scope Scope<'scope, 'env>,
        p: &'env Pipeline,
        settings: HashMap<usize, JobSettings>,
        summary: RunSummary,
        results: Sender<JobResult>,
    ) -> Self {
        let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("pipeline"));
        let source = Source::detect();
        info!("tracking Slurm jobs with {}", source.name());
        let mut t = Tracker {
            scope,
            p,
            settings,
            summary,
            results,
            exe,
            jobs: HashMap::new(),
            entries: Vec::new(),
            orphans: HashMap::new(),
            source,
            interval: POLL_MIN,
            next_poll: Instant::now(),
            dirty: false,
            cancelled_all: false,
            seq: 0,
            stats: Stats::default(),
        };
        t.adopt_orphans();
        t
    }

    /// Records an orphan as done (cancelled or gone) and removes its directory.
    fn forget(&mut self, mut j: JobEntry, state: &str) {
        let _ = crate::owned::remove(&self.p.ws, &j.attempt);
        j.state = state.to_string();
        j.done = true;
        self.entries.push(j);
        self.dirty = true;
    }

    fn cancel(&mut self, ids: &[String], why: &str) {
        if ids.is_empty() {
            return;
        }
        match commands::scancel(ids) {
            Ok(()) => info!("cancelled Slurm job(s) {} ({why})", ids.join(" ")),
            Err(e) => warn!("could not cancel Slurm job(s) {}: {e}", ids.join(" ")),
        }
    }

    pub(crate) fn run(mut self, rx: Receiver<Msg>) -> Vec<JobEntry> {
        loop {
            match rx.recv_timeout(TICK) {
                Ok(Msg::Submit(sub)) => self.submit(*sub),
                Ok(Msg::Finish) | Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => {}
            }
            let mut finish = false;
            while let Ok(msg) = rx.try_recv() {
                match msg {
                    Msg::Submit(sub) => self.submit(*sub),
                    Msg::Finish => finish = true,
                }
            }
            if interrupted() && !self.cancelled_all {
                self.cancel_all();
            }
            self.resubmit_due();
            self.check_markers();
            if !self.jobs.is_empty() && Instant::now() >= self.next_poll {
                self.poll();
            }
            self.flush_summary();
            if finish {
                break;
            }
        }
        // Jobs of an interrupted run that nothing re-attached: their instances were cached,
        // skipped or have a new fingerprint now.
        let left: Vec<JobEntry> = self.orphans.drain().map(|(_, j)| j).collect();
        let ids: Vec<String> = left.iter().map(|j| j.job_id.clone()).collect();
        self.cancel(&ids, "left by an interrupted run, not re-attached");
        for j in left {
            self.forget(
                j,
                "cancelled: left by an interrupted run and not re-attached",
            );
        }
        self.write_stats();
        self.entries
    }

    fn flush_summary(&mut self) {
        if self.dirty {
            self.dirty = false;
            let mut s = self.summary.clone();
            s.jobs = self.entries.clone();
            write_summary(&self.p.ws.runs(), &s);
        }
    }

    fn entry(&mut self, id: &str) -> Option<&mut JobEntry> {
        self.entries.iter_mut().rev().find(|e| e.job_id == id)
    }

    fn job_info(&self, job: &Job, state: &str) -> JobInfo {
        let start = job.attempt.last_start();
        let submitted = job
            .submitted
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        let ended = job.attempt.ended();
        JobInfo {
            executor: "slurm".into(),
            job_id: job.id.clone().unwrap_or_default(),
            state: state.to_string(),
            node: start.as_ref().map(|s| s.0.clone()).or(job.node.clone()),
            queue_wait_ms: start
                .as_ref()
                .map(|s| ((s.1 as f64 - submitted).max(0.0) * 1000.0) as u64),
            run_ms: match (&start, ended) {
                (Some(s), Some(e)) => Some(((e - s.1 as f64).max(0.0) * 1000.0) as u64),
                _ => None,
            },
            attempts: job.attempts,
        }
    }

    fn record(&self, job: &Job, state: &str) -> StageRecord {
        let inst = &self.p.plan.instances[job.sub.index];
        StageRecord {
            run_id: self.summary.run_id.clone(),
            instance: inst.name.clone(),
            stage: inst.stage.clone(),
            fingerprint: job.sub.fingerprint.clone(),
            status: "ok".into(),
            started: job.sub.started.clone(),
            finished: String::new(),
            duration_ms: job.first.elapsed().as_millis() as u64,
            reasons: job.sub.reasons.clone(),
            error: None,
            dir: PathBuf::new(),
            job: Some(self.job_info(job, state)),
        }
    }

    fn mark_entry(&mut self, job: &Job, state: &str) {
        if let Some(id) = job.id.clone()
            && let Some(e) = self.entry(&id)
        {
            e.state = state.to_string();
            e.done = true;
        }
        self.dirty = true;
    }

    /// Commits in a thread of its own: hashing a large output must not hold up polling.
    fn succeed(&mut self, job: Job) {
        job.sub.bar.finish_and_clear();
        self.mark_entry(&job, "COMPLETED");
        let record = self.record(&job, "COMPLETED");
        let p = self.p;
        let tx = self.results.clone();
        self.scope.spawn(move || {
            let t0 = Instant::now();
            let result = finish::commit_job(
                p,
                &job.attempt,
                &job.sub.comps,
                &job.sub.fingerprint,
                record.clone(),
                job.s.fs_wait,
            );
            COMMIT_US.fetch_add(
                t0.elapsed().as_micros() as u64,
                std::sync::atomic::Ordering::Relaxed,
            );
            let result = result.map_err(|e| {
                let mut record = record;
                record.status = "failed".into();
                record.error = Some(chain_text(&e));
                let kept = finish::keep_failed(p, &job.attempt, &mut record);
                let _ = crate::owned::remove(&p.ws, &job.attempt.dir);
                Box::new(Failure {
                    error: chain_text(&e),
                    log: kept,
                    record,
                })
            });
            let _ = tx.send(JobResult {
                index: job.sub.index,
                elapsed_ms: job.first.elapsed().as_millis() as u64,
                result,
            });
        });
    }

    fn fail(&mut self, job: Job, state: &str, error: String) {
        job.sub.bar.finish_and_clear();
        self.mark_entry(&job, state);
        let mut record = self.record(&job, state);
        record.status = "failed".into();
        record.error = Some(error.clone());
        let kept = finish::keep_failed(self.p, &job.attempt, &mut record);
        let _ = crate::owned::remove(&self.p.ws, &job.attempt.dir);
        let _ = self.results.send(JobResult {
            index: job.sub.index,
            elapsed_ms: job.first.elapsed().as_millis() as u64,
            result: Err(Box::new(Failure {
                error,
                log: kept,
                record,
            })),
        });
    }

    /// SIGINT/SIGTERM: one `scancel` for every job in flight (and any left by an interrupted
    /// run), each failed as cancelled.
    fn cancel_all(&mut self) {
        self.cancelled_all = true;
        let mut ids: Vec<String> = self.jobs.values().filter_map(|j| j.id.clone()).collect();
        ids.extend(self.orphans.values().map(|j| j.job_id.clone()));
        if !ids.is_empty() {
            match commands::scancel(&ids) {
                Ok(()) => eprintln!(
                    "interrupted: cancelled {} Slurm job(s) with one scancel: {}{}",
                    ids.len(),
                    ids[..ids.len().min(20)].join(" "),
                    if ids.len() > 20 { " ..." } else { "" }
                ),
                Err(e) => eprintln!("interrupted: could not cancel the Slurm jobs: {e}"),
            }
        }
        let indices: Vec<usize> = self.jobs.keys().copied().collect();
        for i in indices {
            if let Some(job) = self.jobs.remove(&i) {
                let id = job.id.clone().unwrap_or_else(|| "(not submitted)".into());
                self.fail(
                    job,
                    "CANCELLED",
                    format!("Slurm job {id}: CANCELLED (the controller was interrupted)"),
                );
            }
        }
    }

    /// `PIPELINE_SLURM_STATS=FILE`: the tracker's own figures, for the benchmark.
    fn write_stats(&self) {
        let Some(path) = std::env::var_os("PIPELINE_SLURM_STATS") else {
            return;
        };
        let (utime, stime, children) = own_cpu_ms();
        let json = serde_json::json!({
            "source": self.source.name(),
            "polls": self.stats.polls,
            "poll_calls": self.stats.poll_calls,
            "poll_ms": self.stats.poll_ms,
            "max_in_flight": self.stats.max_in_flight,
            "sbatch_calls": self.stats.sbatch_calls,
            "sbatch_ms": self.stats.sbatch_ms,
            "judged": self.stats.judged,
            "detect_ms": self.stats.detect_ms,
            "commit_ms": COMMIT_US.load(std::sync::atomic::Ordering::Relaxed) as f64 / 1000.0,
            "children_cpu_ms": children,
            "slurm_calls": commands::CALLS.load(std::sync::atomic::Ordering::Relaxed),
            "controller_cpu_ms": utime + stime,
        });
        let _ = std::fs::write(path, json.to_string());
    }
}

fn describe(e: &ToolError) -> String {
    format!(
        "{} failed: {}",
        e.line.split(' ').next().unwrap_or("slurm"),
        e.message
    )
}

/// The controller's own CPU time (user, system) and that of the tools it waited for
/// (sbatch, squeue, ...) in ms, from /proc/self/stat (100 ticks a second).
fn own_cpu_ms() -> (f64, f64, f64) {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return (0.0, 0.0, 0.0);
    };
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 of stat(5), counted from after the command name (field 3 is index 0).
    let tick = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0) * 10.0;
    (tick(11), tick(12), tick(13) + tick(14))
}
