//! The Slurm executor: each ready instance becomes one job, submitted with `sbatch --parsable`
//! and a job script ([`script`]), tracked by one thread that polls every job in flight with one
//! Slurm call per poll ([`commands::Source`]) and backs off while nothing changes
//! ([`tracker`]). The job's exit marker is the truth about how the stage ended; Slurm's state
//! says why a job without one ended (TIMEOUT, CANCELLED, NODE_FAIL, ...). Jobs a killed
//! controller left are found again through the run records ([`orphans`]).

pub mod commands;
pub mod finish;
pub mod orphans;
pub mod script;
pub mod tracker;

use std::collections::HashMap;
use std::sync::mpsc::{self, Sender};
use std::thread::{Scope, ScopedJoinHandle};

use crate::Pipeline;
use crate::exec::JobResult;
use crate::executor::JobSettings;
use crate::manifest::{Components, JobEntry, RunSummary};
use crate::stage::DepArtifact;

/// An instance the run loop hands over: its deps are committed and it is not cached.
pub struct Submission {
    /// The instance's index in the plan.
    pub index: usize,
    /// Its fingerprint: the artifact directory the job's output is committed to.
    pub fingerprint: String,
    /// What the fingerprint was computed from, for the manifest.
    pub comps: Components,
    /// Its deps' committed artifacts, written into the job's spec.
    pub deps: Vec<DepArtifact>,
    /// Why it runs (`never ran`, `param lr changed 0.1 → 0.2`, ...), for the run record.
    pub reasons: Vec<String>,
    /// When the run loop started it (the run record's `started`).
    pub started: String,
    /// The stage's line on the terminal: it shows the job id and Slurm state.
    pub bar: indicatif::ProgressBar,
}

pub(crate) enum Msg {
    Submit(Box<Submission>),
    Finish,
}

/// The run loop's handle on the tracker thread.
pub struct Cluster<'scope> {
    tx: Sender<Msg>,
    handle: ScopedJoinHandle<'scope, Vec<JobEntry>>,
    remote: Vec<usize>,
}

impl<'scope> Cluster<'scope> {
    /// Starts the tracker for the instances in `settings`; results come back on `results` as
    /// they do from local stages.
    pub(crate) fn start<'env>(
        scope: &'scope Scope<'scope, 'env>,
        p: &'env Pipeline,
        settings: HashMap<usize, JobSettings>,
        summary: RunSummary,
        results: Sender<JobResult>,
    ) -> Cluster<'scope> {
        crate::executor::catch_interrupts();
        let mut remote: Vec<usize> = settings.keys().copied().collect();
        remote.sort_unstable();
        let (tx, rx) = mpsc::channel();
        let handle = scope.spawn(move || {
            let t = tracker::Tracker::new(scope, p, settings, summary, results);
            t.run(rx)
        });
        Cluster { tx, handle, remote }
    }

    /// Whether instance `i` runs as a job.
    pub fn runs(&self, i: usize) -> bool {
        self.remote.binary_search(&i).is_ok()
    }

    /// Hands an instance to the tracker, which submits it; how it ends comes back on the
    /// `results` channel the tracker was started with.
    pub fn submit(&self, sub: Submission) {
        let _ = self.tx.send(Msg::Submit(Box::new(sub)));
    }

    /// Stops the tracker (cancelling jobs a previous run left that nothing adopted) and returns
    /// every job of the run for its record.
    pub fn finish(self) -> Vec<JobEntry> {
        let _ = self.tx.send(Msg::Finish);
        self.handle.join().unwrap_or_default()
    }
}
