//! Submission: re-attaching to the jobs of an interrupted run, writing a job's directory,
//! `sbatch` with a retry after transient errors, and resubmission.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

use tracing::{info, warn};

use super::judge::ALIVE;
use super::{Job, POLL_MIN, Tracker};
use crate::error::chain_text;
use crate::executor::JobSettings;
use crate::executor::instance::{InstanceSpec, SpecDep};
use crate::executor::slurm::commands;
use crate::executor::slurm::script::{Attempt, sbatch_args};
use crate::executor::slurm::{Submission, orphans};
use crate::manifest::JobEntry;
use crate::workspace::dir_name;

impl Tracker<'_, '_> {
    /// Sorts the jobs of interrupted runs: those still alive (or finished with a marker) whose
    /// instance this run may submit are kept for re-attaching; the rest are cancelled now.
    pub(super) fn adopt_orphans(&mut self) {
        let left = orphans::take(&self.p.ws, &self.summary.run_id);
        if left.is_empty() {
            return;
        }
        let ids: Vec<String> = left.iter().map(|j| j.job_id.clone()).collect();
        let seen = match commands::poll(self.source, &ids) {
            Ok(s) => s,
            Err(e) => {
                warn!("cannot ask Slurm about the jobs of an interrupted run: {e}");
                HashMap::new()
            }
        };
        let p = self.p;
        let wanted: Vec<&str> = self
            .settings
            .keys()
            .map(|&i| p.plan.instances[i].name.as_str())
            .collect();
        let mut cancel = Vec::new();
        for j in left {
            let attempt = Attempt {
                dir: j.attempt.clone(),
            };
            let alive = seen
                .get(&j.job_id)
                .is_some_and(|s| ALIVE.contains(&s.state.as_str()));
            let usable = alive || attempt.exit_code() == Some(0);
            if usable && wanted.contains(&j.instance.as_str()) {
                info!(job = %j.job_id, instance = %j.instance, "a job of an interrupted run may be re-attached");
                self.orphans
                    .insert((j.instance.clone(), j.fingerprint.clone()), j);
            } else {
                if alive {
                    cancel.push(j.job_id.clone());
                }
                self.forget(j, "cancelled: left by an interrupted run and not needed");
            }
        }
        self.cancel(
            &cancel,
            "left by an interrupted run, not needed by this one",
        );
    }

    pub(super) fn submit(&mut self, sub: Submission) {
        let p = self.p;
        let inst = &p.plan.instances[sub.index];
        let Some(s) = self.settings.get(&sub.index).cloned() else {
            return;
        };
        let key = (inst.name.clone(), sub.fingerprint.clone());
        if let Some(orphan) = self.orphans.remove(&key) {
            self.reattach(sub, s, orphan);
            return;
        }
        self.cancel_stale(&inst.name);
        let attempt = self.new_attempt(&inst.name, &sub.fingerprint);
        let job = Job::new(sub, s, attempt, None, 0, "SUBMITTING");
        if self.cancelled_all {
            self.fail(
                job,
                "CANCELLED",
                "not submitted: the run was interrupted".into(),
            );
            return;
        }
        self.prepare_and_sbatch(job);
    }

    /// Writes the job's directory and submits it; a job that cannot be prepared fails.
    fn prepare_and_sbatch(&mut self, mut job: Job) {
        let spec = self.spec(&job);
        if let Err(e) = job.attempt.prepare(&spec, &self.exe) {
            self.fail(
                job,
                "NOT SUBMITTED",
                format!("preparing the job: {}", chain_text(&e)),
            );
            return;
        }
        self.sbatch(&mut job);
        self.place(job);
    }

    /// Tracks a job an interrupted run left running for this very instance and fingerprint
    /// instead of submitting it again.
    fn reattach(&mut self, sub: Submission, s: JobSettings, orphan: JobEntry) {
        let inst = &self.p.plan.instances[sub.index];
        eprintln!(
            "re-attached to Slurm job {} ({}), left running by an interrupted run",
            orphan.job_id, inst.name
        );
        let attempt = Attempt {
            dir: orphan.attempt.clone(),
        };
        self.entries.push(JobEntry {
            state: "re-attached".into(),
            ..orphan.clone()
        });
        self.dirty = true;
        let index = sub.index;
        let job = Job::new(sub, s, attempt, Some(orphan.job_id), 1, "re-attached");
        self.jobs.insert(index, job);
        self.interval = POLL_MIN;
        self.next_poll = Instant::now();
    }

    /// Cancels the jobs of an interrupted run for this instance but another fingerprint: stale.
    fn cancel_stale(&mut self, instance: &str) {
        let stale: Vec<(String, String)> = self
            .orphans
            .keys()
            .filter(|(name, _)| name == instance)
            .cloned()
            .collect();
        let mut ids = Vec::new();
        for k in stale {
            if let Some(j) = self.orphans.remove(&k) {
                ids.push(j.job_id.clone());
                self.forget(j, "cancelled: its instance has a new fingerprint");
            }
        }
        self.cancel(&ids, "their instance has a new fingerprint");
    }

    /// A fresh job directory: `jobs/<instance>/<fingerprint>-<pid>-<seq>` under the state dir.
    fn new_attempt(&mut self, instance: &str, fingerprint: &str) -> Attempt {
        self.seq += 1;
        Attempt {
            dir: self
                .p
                .ws
                .state
                .join("jobs")
                .join(dir_name(instance))
                .join(format!("{fingerprint}-{}-{}", std::process::id(), self.seq)),
        }
    }

    pub(super) fn spec(&self, job: &Job) -> InstanceSpec {
        let inst = &self.p.plan.instances[job.sub.index];
        InstanceSpec {
            instance: inst.name.clone(),
            stage: inst.stage.clone(),
            kind: inst.kind.clone(),
            fingerprint: job.sub.fingerprint.clone(),
            params: inst.params.clone(),
            spec: inst.spec.clone(),
            root: self.p.plan.root.clone(),
            inputs: inst.inputs.iter().map(|f| f.path.clone()).collect(),
            deps: job
                .sub
                .deps
                .iter()
                .map(|d| SpecDep {
                    instance: d.instance.clone(),
                    stage: d.stage.clone(),
                    kind: d.kind.clone(),
                    coords: d.coords.clone(),
                    dir: d.dir.clone(),
                })
                .collect(),
            out: job.attempt.out(),
            log: job.attempt.log(),
            work: self.p.ws.work_dir(&inst.name, &job.sub.fingerprint),
        }
    }

    /// Submits (or resubmits) a job; a transient error schedules another try.
    pub(super) fn sbatch(&mut self, job: &mut Job) {
        let p = self.p;
        let inst = &p.plan.instances[job.sub.index];
        let args = sbatch_args(&job.s, &job.attempt, &inst.name, &self.p.plan.root);
        job.line = commands::command_line("sbatch", &args);
        let _ = std::fs::remove_file(job.attempt.marker());
        let t0 = Instant::now();
        let result = commands::sbatch(&args);
        self.stats.sbatch_calls += 1;
        self.stats.sbatch_ms += t0.elapsed().as_secs_f64() * 1000.0;
        match result {
            Ok(id) => {
                info!(stage = %inst.name, job = %id, "submitted");
                job.sub.bar.set_message(format!("Slurm job {id} submitted"));
                job.id = Some(id.clone());
                job.attempts += 1;
                job.submitted = SystemTime::now();
                job.state = "PENDING".into();
                job.retry_at = None;
                job.trouble_since = None;
                job.unknown_since = None;
                job.ended_since = None;
                job.hopeless_since = None;
                self.entries.push(JobEntry {
                    instance: inst.name.clone(),
                    fingerprint: job.sub.fingerprint.clone(),
                    job_id: id,
                    state: "PENDING".into(),
                    done: false,
                    attempt: job.attempt.dir.clone(),
                });
                self.dirty = true;
                self.interval = POLL_MIN;
            }
            Err(e) if e.transient => {
                let since = *job.trouble_since.get_or_insert_with(Instant::now);
                let wait = (since.elapsed() / 2)
                    .clamp(Duration::from_millis(500), Duration::from_secs(30));
                warn!(
                    "sbatch for {} failed, retrying in {wait:?}: {}",
                    inst.name, e.message
                );
                job.id = None;
                job.retry_at = Some(Instant::now() + wait);
                job.state = "SUBMITTING".into();
            }
            Err(e) => {
                job.id = None;
                job.retry_at = None;
                job.state = format!("REJECTED: {}", e.message);
            }
        }
    }

    /// Puts a job just submitted in flight, or fails it when sbatch refused it.
    pub(super) fn place(&mut self, job: Job) {
        if job.id.is_none() && job.retry_at.is_none() {
            let msg = job.state.trim_start_matches("REJECTED: ").to_string();
            let line = job.line.clone();
            self.fail(
                job,
                "REJECTED",
                format!("sbatch rejected the job: {msg}\n  sbatch line: {line}"),
            );
            return;
        }
        self.stats.max_in_flight = self.stats.max_in_flight.max(self.jobs.len() + 1);
        self.next_poll = Instant::now().min(self.next_poll);
        self.jobs.insert(job.sub.index, job);
    }

    pub(super) fn resubmit_due(&mut self) {
        let now = Instant::now();
        let due: Vec<usize> = self
            .jobs
            .iter()
            .filter(|(_, j)| j.retry_at.is_some_and(|t| t <= now))
            .map(|(&i, _)| i)
            .collect();
        for i in due {
            let Some(mut job) = self.jobs.remove(&i) else {
                continue;
            };
            if job
                .trouble_since
                .is_some_and(|t| t.elapsed() > job.s.unknown_timeout)
            {
                let line = job.line.clone();
                self.fail(
                    job,
                    "NOT SUBMITTED",
                    format!(
                        "sbatch kept failing for the unknown-state timeout\n  sbatch line: {line}"
                    ),
                );
                continue;
            }
            self.sbatch(&mut job);
            self.place(job);
        }
    }
}

impl Job {
    /// A job as submission starts it (`attempts` 0, no id) or as re-attaching finds it.
    fn new(
        sub: Submission,
        s: JobSettings,
        attempt: Attempt,
        id: Option<String>,
        attempts: u32,
        state: &str,
    ) -> Job {
        Job {
            line: String::new(),
            sub,
            s,
            attempt,
            id,
            submitted: SystemTime::now(),
            first: Instant::now(),
            attempts,
            state: state.into(),
            node: None,
            hopeless_since: None,
            unknown_since: None,
            ended_since: None,
            retry_at: None,
            trouble_since: None,
        }
    }
}
