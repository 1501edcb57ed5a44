//! Judging jobs: the exit marker first, then the state one Slurm call per poll reports for
//! every job in flight, mapped to ours with the reason shown.

use std::time::{Instant, SystemTime};

use tracing::warn;

use super::{Job, POLL_MIN, Tracker, describe};
use crate::executor::instance::ERROR_FILE;
use crate::executor::slurm::commands::{self, Seen, Source};

/// Pending reasons that no amount of waiting clears: the request does not fit the partition
/// or names nodes that are down. A job pending for one of them fails after `pending_timeout`.
const HOPELESS: &[&str] = &[
    "PartitionConfig",
    "PartitionNodeLimit",
    "PartitionTimeLimit",
    "ReqNodeNotAvail",
    "BadConstraints",
    "InvalidAccount",
    "InvalidQOS",
    "QOSNotAllowed",
    "AccountNotAllowed",
    "DependencyNeverSatisfied",
    "Nodes_required_for_job_are_DOWN,_DRAINED_or_reserved_for_jobs_in_higher_priority_partitions",
];

/// States in which the job is alive (or will run again under the same id).
pub(super) const ALIVE: &[&str] = &[
    "PENDING",
    "RUNNING",
    "CONFIGURING",
    "COMPLETING",
    "SUSPENDED",
    "REQUEUED",
    "REQUEUE_FED",
    "REQUEUE_HOLD",
    "RESIZING",
    "SIGNALING",
    "STAGE_OUT",
    "STOPPED",
    "RESV_DEL_HOLD",
];

impl Tracker<'_, '_> {
    /// Judges every job whose exit marker has appeared: the marker is the truth.
    pub(super) fn check_markers(&mut self) {
        let done: Vec<(usize, i32)> = self
            .jobs
            .iter()
            .filter(|(_, j)| j.id.is_some())
            .filter_map(|(&i, j)| j.attempt.exit_code().map(|c| (i, c)))
            .collect();
        for (i, code) in done {
            if let Some(job) = self.jobs.remove(&i) {
                self.judge_marker(job, code);
            }
        }
    }

    pub(super) fn judge_marker(&mut self, job: Job, code: i32) {
        self.stats.judged += 1;
        if let (Some(end), Ok(now)) = (
            job.attempt.ended(),
            SystemTime::now().duration_since(SystemTime::UNIX_EPOCH),
        ) {
            self.stats.detect_ms += ((now.as_secs_f64() - end) * 1000.0).max(0.0);
        }
        self.interval = POLL_MIN;
        if code == 0 {
            self.succeed(job);
            return;
        }
        // The stage's own error; else (the binary could not even start it) the job's stderr.
        let id = job.id.as_deref().unwrap_or("?");
        let log = job.attempt.log();
        let stage_error = match std::fs::read_to_string(log.join(ERROR_FILE)) {
            Ok(text) => text.trim().to_string(),
            Err(_) => stderr_tail(&job, id).unwrap_or_default(),
        };
        let state = format!("FAILED exit {code}");
        let error = if stage_error.is_empty() {
            format!("Slurm job {}: {state}", job.id.as_deref().unwrap_or("?"))
        } else {
            format!(
                "{stage_error} (Slurm job {}: {state})",
                job.id.as_deref().unwrap_or("?")
            )
        };
        self.fail(job, &state, error);
    }

    /// One Slurm call for every job in flight (and, for jobs that call no longer lists, one
    /// look into the job-completion log).
    pub(super) fn poll(&mut self) {
        let ids: Vec<String> = self.jobs.values().filter_map(|j| j.id.clone()).collect();
        if ids.is_empty() {
            self.next_poll = Instant::now() + self.interval;
            return;
        }
        let t0 = Instant::now();
        self.stats.polls += 1;
        self.stats.poll_calls += 1;
        let result = commands::poll(self.source, &ids);
        let mut changed = false;
        let mut cancel = Vec::new();
        match result {
            Ok(mut seen) => {
                let missing: Vec<String> = ids
                    .iter()
                    .filter(|id| !seen.contains_key(*id))
                    .cloned()
                    .collect();
                if !missing.is_empty() && self.source == (Source::Squeue { jobcomp: true }) {
                    self.stats.poll_calls += 1;
                    match commands::jobcomp(&missing) {
                        Ok(done) => seen.extend(done),
                        Err(e) => warn!("sacct -c failed: {e}"),
                    }
                }
                let indices: Vec<usize> = self.jobs.keys().copied().collect();
                for i in indices {
                    let Some(job) = self.jobs.remove(&i) else {
                        continue;
                    };
                    let Some(id) = job.id.clone() else {
                        self.jobs.insert(i, job);
                        continue;
                    };
                    if let Some(code) = job.attempt.exit_code() {
                        changed = true;
                        self.judge_marker(job, code);
                        continue;
                    }
                    match seen.get(&id) {
                        Some(s) => changed |= self.on_state(job, s, &mut cancel),
                        None => self.on_unknown(job, &format!("Slurm no longer lists job {id}")),
                    }
                }
            }
            Err(e) => {
                warn!("polling Slurm failed (retrying with backoff): {e}");
                let indices: Vec<usize> = self.jobs.keys().copied().collect();
                for i in indices {
                    if let Some(job) = self.jobs.remove(&i) {
                        if job.id.is_some() {
                            self.on_unknown(job, &describe(&e));
                        } else {
                            self.jobs.insert(i, job);
                        }
                    }
                }
            }
        }
        self.cancel(&cancel, "pending for a reason that cannot clear");
        self.stats.poll_ms += t0.elapsed().as_secs_f64() * 1000.0;
        let max = self
            .jobs
            .values()
            .map(|j| j.s.poll_max)
            .min()
            .unwrap_or(POLL_MIN)
            .max(POLL_MIN);
        self.interval = if changed {
            POLL_MIN
        } else {
            self.interval.mul_f64(1.5).min(max)
        };
        self.next_poll = Instant::now() + self.interval;
    }

    pub(super) fn on_unknown(&mut self, mut job: Job, why: &str) {
        let since = *job.unknown_since.get_or_insert_with(Instant::now);
        if since.elapsed() > job.s.unknown_timeout {
            let error = format!(
                "the state of Slurm job {} stayed unknown for {:?} ({why}; no exit marker in {})",
                job.id.as_deref().unwrap_or("?"),
                job.s.unknown_timeout,
                job.attempt.dir.display()
            );
            self.fail(job, "UNKNOWN", error);
        } else {
            self.jobs.insert(job.sub.index, job);
        }
    }

    /// Acts on a state Slurm reported for a job without a marker; true if something changed.
    pub(super) fn on_state(&mut self, mut job: Job, s: &Seen, cancel: &mut Vec<String>) -> bool {
        job.unknown_since = None;
        let id = job.id.clone().unwrap_or_default();
        let changed = self.show_state(&mut job, s, &id);
        let state = s.state.as_str();
        let slurm_requeues = job.s.requeue && matches!(state, "NODE_FAIL" | "PREEMPTED");
        let kept = if state == "PENDING" {
            self.on_pending(job, s, &id, cancel)
        } else if ALIVE.contains(&state) || slurm_requeues {
            job.hopeless_since = None;
            job.ended_since = None;
            Some(job)
        } else if matches!(state, "COMPLETED" | "FAILED") {
            self.on_ended(job, s, &id)
        } else if matches!(state, "NODE_FAIL" | "PREEMPTED" | "BOOT_FAIL") {
            self.on_node_failure(job, state, &id);
            None
        } else {
            self.on_terminal(job, s, &id);
            None
        };
        match kept {
            Some(job) => {
                self.jobs.insert(job.sub.index, job);
                changed
            }
            None => true,
        }
    }

    /// Shows the state (with the pending reason) on the job's bar and in its entry; true if it
    /// changed.
    fn show_state(&mut self, job: &mut Job, s: &Seen, id: &str) -> bool {
        let shown = if s.reason.is_empty() || s.state != "PENDING" {
            s.state.clone()
        } else {
            format!("PENDING ({})", s.reason)
        };
        let changed = shown != job.state;
        if changed {
            job.sub.bar.set_message(format!("Slurm job {id} {shown}"));
            job.state = shown.clone();
            if !s.node.is_empty() {
                job.node = Some(s.node.clone());
            }
            if let Some(e) = self.entry(id) {
                e.state = shown.clone();
            }
            self.dirty = true;
        }
        changed
    }

    /// PENDING: waits, unless for a reason no waiting clears for longer than `pending_timeout`
    /// (then the job is cancelled and fails). `None`: the job is done with.
    fn on_pending(
        &mut self,
        mut job: Job,
        s: &Seen,
        id: &str,
        cancel: &mut Vec<String>,
    ) -> Option<Job> {
        job.ended_since = None;
        let hopeless = HOPELESS.iter().any(|h| s.reason.starts_with(h));
        if !hopeless {
            job.hopeless_since = None;
            return Some(job);
        }
        if job
            .hopeless_since
            .get_or_insert_with(Instant::now)
            .elapsed()
            <= job.s.pending_timeout
        {
            return Some(job);
        }
        cancel.push(id.to_string());
        let error = format!(
            "Slurm job {id} stayed PENDING ({}) for {:?}: the cluster cannot run it as requested (check `resources` and `executor` of the stage)\n  sbatch line: {}",
            s.reason, job.s.pending_timeout, job.line
        );
        self.fail(job, &format!("PENDING ({})", s.reason), error);
        None
    }

    /// COMPLETED or FAILED without a marker: the script ended and its marker may still be on
    /// its way through the filesystem; past the grace period the job fails. A job Slurm
    /// requeues (`requeue: true`) shows FAILED until its epilog is done.
    fn on_ended(&mut self, mut job: Job, s: &Seen, id: &str) -> Option<Job> {
        let grace = if job.s.requeue {
            job.s.fs_wait.max(std::time::Duration::from_secs(60))
        } else {
            job.s.fs_wait
        };
        if job.ended_since.get_or_insert_with(Instant::now).elapsed() <= grace {
            return Some(job);
        }
        let state = s.state.as_str();
        // Without a marker, the job's stderr tells a script that failed from one that never
        // started: Slurm refusing the launch (a revoked credential, a failed prolog) or a node
        // that cannot open the log directory leaves it empty.
        let stderr = match stderr_tail(&job, id) {
            Some(line) => format!("; its stderr ends: {line}"),
            None => format!(
                "; its stderr is empty: the script may never have started (`scontrol show job {id}` or the controller's log says why)"
            ),
        };
        let error = format!(
            "Slurm says job {id} is {state}{} but its exit marker {} did not appear within {:?} (is .pipeline on a filesystem the compute nodes share?){stderr}",
            s.exit
                .as_ref()
                .map(|e| format!(" (exit {e})"))
                .unwrap_or_default(),
            job.attempt.marker().display(),
            job.s.fs_wait
        );
        self.fail(job, state, error);
        None
    }

    /// NODE_FAIL, PREEMPTED or BOOT_FAIL: resubmitted while retries are left, else failed.
    fn on_node_failure(&mut self, mut job: Job, state: &str, id: &str) {
        if job.attempts <= job.s.retries {
            eprintln!(
                "Slurm job {id} ({}) ended {state}; resubmitting (retry {} of {}), resuming from its work directory",
                self.p.plan.instances[job.sub.index].name, job.attempts, job.s.retries
            );
            self.mark_entry(&job, state);
            self.sbatch(&mut job);
            self.place(job);
        } else {
            let error = format!(
                "Slurm job {id}: {state} (no retries left: retries {})",
                job.s.retries
            );
            self.fail(job, state, error);
        }
    }

    /// Any other end (TIMEOUT, CANCELLED, OUT_OF_MEMORY, …): the job fails, saying which.
    fn on_terminal(&mut self, job: Job, s: &Seen, id: &str) {
        let state = s.state.as_str();
        let what = match state {
            "TIMEOUT" => format!(
                "TIMEOUT (time limit {})",
                job.s
                    .time
                    .map(crate::executor::config::format_time)
                    .unwrap_or_else(|| "of the partition".into())
            ),
            "CANCELLED" if !s.reason.is_empty() => format!("CANCELLED {}", s.reason),
            _ => state.to_string(),
        };
        let error = format!("Slurm job {id}: {what}");
        self.fail(job, state, error);
    }
}

/// The last non-blank line of the job's stderr log (`slurm-<id>.err`, of every attempt of a
/// requeued job), or `None` where it is absent or blank. Only its last 4 KiB are read: a stage
/// may have written gigabytes there.
fn stderr_tail(job: &Job, id: &str) -> Option<String> {
    last_line(&job.attempt.log().join(format!("slurm-{id}.err")))
}

/// The last non-blank line of the file at `path`, read from its last 4 KiB.
fn last_line(path: &std::path::Path) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    const TAIL: u64 = 4096;
    let mut file = std::fs::File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    file.seek(SeekFrom::Start(len.saturating_sub(TAIL))).ok()?;
    let mut bytes = Vec::with_capacity(TAIL as usize);
    file.take(TAIL).read_to_end(&mut bytes).ok()?;
    String::from_utf8_lossy(&bytes)
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::last_line;

    #[test]
    fn the_last_line_of_a_log_is_read_from_its_tail() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("slurm-1.err");
        assert_eq!(last_line(&path), None, "absent");
        std::fs::write(&path, " \n\n").unwrap();
        assert_eq!(last_line(&path), None, "blank");
        let mut big = "x".repeat(1 << 20);
        big.push_str("\nerror: the stage failed\n  \n");
        std::fs::write(&path, big).unwrap();
        assert_eq!(last_line(&path).as_deref(), Some("error: the stage failed"));
    }
}
