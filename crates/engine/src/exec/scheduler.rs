//! The bookkeeping of a run: which selected instances wait, are queued for slots, run, are
//! done, failed or were skipped (and why), and the CPU slots, GPU tokens and cluster jobs in
//! flight. [`super::run`] drives it: start what [`Scheduler::next`] hands out, wait for one
//! result, record it with [`Scheduler::finished`], until nothing runs.
//!
//! Every instance is fingerprinted (and its freshness checked, and the remote asked) exactly
//! once, when its last dep is done, and then either settles (cached, pulled, failed) or joins
//! the queue of its resource class. Why: the scheduler used to re-consider every waiting
//! instance after each completion, fingerprinting it and reading its artifact directory again
//! only to find no free slot, which made a first run quadratic in the instances (issue 31:
//! 1,000 trivial `cmd` instances in 8.7 s, 10,000 in 7 min 41 s). Now a completion touches its
//! dependents and the heads of the few resource classes, nothing else.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;

use tracing::info;

use super::{JobResult, Outcome, Ready, Reporter, RunOptions, Status};
use crate::Pipeline;
use crate::error::IndexError;
use crate::fingerprint::{Freshness, components, freshness};
use crate::index::Index;
use crate::manifest::{Components, LOG_DIR};
use crate::plan::Instance;
use crate::stage::DepArtifact;

#[cfg(test)]
mod tests;

enum State {
    /// Not settled and not running: deps pending, or queued for slots.
    Waiting,
    Running,
    Done {
        output: String,
        dir: PathBuf,
    },
    Failed,
    Skipped,
}

/// What an instance needs to start: CPU slots and GPU tokens for a local stage, a place
/// among the jobs in flight for a cluster one. Instances queue by it, so that finding the
/// next one that fits looks at one head per class, however many wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Need {
    Local { cpu: usize, gpu: u32 },
    Cluster,
}

/// A fingerprinted, stale instance waiting for its slots.
struct Queued {
    comps: Components,
    fp: String,
    deps: Vec<DepArtifact>,
    reasons: Vec<String>,
}

pub(super) struct Scheduler<'a> {
    p: &'a Pipeline,
    opts: &'a RunOptions,
    reporter: &'a dyn Reporter,
    /// `--jobs`, at least 1.
    jobs: usize,
    /// The selection, in its order (instances are in topological order).
    selected: Vec<usize>,
    /// Each selected instance's place in `selected`: the order ties are broken in.
    position: HashMap<usize, usize>,
    /// The selected instances that depend on each instance (once per listed dep).
    dependents: HashMap<usize, Vec<usize>>,
    /// How many of its listed deps each waiting instance still waits for.
    unmet: HashMap<usize, usize>,
    /// Positions of instances to look at now: every dep done, or one failed.
    todo: BTreeSet<usize>,
    /// Stale instances by what they need, each class by position.
    queued: BTreeMap<Need, BTreeMap<usize, Queued>>,
    state: HashMap<usize, State>,
    outcomes: HashMap<usize, Outcome>,
    cpu_used: usize,
    gpu_used: u32,
    running: usize,
    remote_running: usize,
    /// `--fail-fast` after a failure: start nothing more.
    stop: bool,
    /// Every waiting instance was skipped (interrupted, or `--fail-fast`).
    halted: bool,
    /// How many times an instance was fingerprinted: once per instance (a unit test holds
    /// it to that, the non-timed guard against the quadratic first run coming back).
    fingerprinted: usize,
}

fn outcome(inst: &Instance, status: Status) -> Outcome {
    Outcome {
        instance: inst.name.clone(),
        stage: inst.stage.clone(),
        status,
        reasons: Vec::new(),
        fingerprint: None,
        duration_ms: None,
        artifact: None,
        log: None,
        error: None,
    }
}

impl<'a> Scheduler<'a> {
    pub(super) fn new(
        p: &'a Pipeline,
        selected: &[usize],
        opts: &'a RunOptions,
        reporter: &'a dyn Reporter,
    ) -> Scheduler<'a> {
        let position: HashMap<usize, usize> =
            selected.iter().enumerate().map(|(n, &i)| (i, n)).collect();
        let mut dependents: HashMap<usize, Vec<usize>> = HashMap::new();
        let mut unmet = HashMap::new();
        let mut todo = BTreeSet::new();
        for (n, &i) in selected.iter().enumerate() {
            let deps = &p.plan.instances[i].deps;
            for &d in deps {
                dependents.entry(d).or_default().push(i);
            }
            // A dep outside the selection never finishes: the instance waits, as before.
            unmet.insert(i, deps.len());
            if deps.is_empty() {
                todo.insert(n);
            }
        }
        Scheduler {
            p,
            opts,
            reporter,
            jobs: opts.jobs.max(1),
            selected: selected.to_vec(),
            position,
            dependents,
            unmet,
            todo,
            queued: BTreeMap::new(),
            state: selected.iter().map(|&i| (i, State::Waiting)).collect(),
            outcomes: HashMap::new(),
            cpu_used: 0,
            gpu_used: 0,
            running: 0,
            remote_running: 0,
            stop: false,
            halted: false,
            fingerprinted: 0,
        }
    }

    pub(super) fn running(&self) -> usize {
        self.running
    }

    /// Settles everything that can be settled now (cached, pulled, failed before starting,
    /// skipped) and hands out the next instance to start, holding its slots: the first in
    /// selection order whose slots are free. `None` when nothing can start until a running
    /// instance finishes.
    pub(super) fn next(
        &mut self,
        index: &mut Index,
        is_remote: &dyn Fn(usize) -> bool,
    ) -> Result<Option<(usize, Box<Ready>)>, IndexError> {
        while let Some(n) = self.todo.pop_first() {
            let i = self.selected[n];
            self.evaluate(i, index, is_remote(i))?;
        }
        if self.why_halt().is_some() {
            self.halt();
            return Ok(None);
        }
        Ok(self.pick())
    }

    /// Fingerprints instance `i`, whose deps are all done (or one failed), and settles or
    /// queues it.
    fn evaluate(&mut self, i: usize, index: &mut Index, remote: bool) -> Result<(), IndexError> {
        if !matches!(self.state.get(&i), Some(State::Waiting)) {
            return Ok(());
        }
        if let Some(reason) = self.why_not_start(i) {
            self.skip(i, reason);
            return Ok(());
        }
        let Some((dep_out, deps)) = self.dep_artifacts(i) else {
            return Ok(());
        };
        let p = self.p;
        let inst = &p.plan.instances[i];
        self.fingerprinted += 1;
        let comps = match components(inst, &p.registry, index, dep_out) {
            Ok(c) => c,
            Err(e) => {
                self.fail(i, format!("{e:#}"));
                return Ok(());
            }
        };
        let fp = comps.fingerprint();
        let reasons = match freshness(&p.ws, index, inst, &comps) {
            Freshness::Fresh { dir, manifest } if !self.opts.force.contains(&i) => {
                index.set_latest(&inst.name, &fp)?;
                self.cached(i, fp, dir, manifest.output_digest);
                return Ok(());
            }
            Freshness::Fresh { .. } => vec!["forced".to_string()],
            Freshness::Stale { reasons } => reasons,
        };
        // A stale instance that the remote holds is pulled instead of run (issue 25).
        let cache = self
            .opts
            .remote
            .as_deref()
            .filter(|_| !self.opts.force.contains(&i));
        if let Some((o, output, dir)) =
            crate::remote::pull_instead_of_run(cache, &p.ws, index, inst, &fp)?
        {
            self.settle(i, o, State::Done { output, dir });
            return Ok(());
        }
        let need = if remote {
            Need::Cluster
        } else {
            let (cpu, gpu) = self.needs(inst);
            Need::Local { cpu, gpu }
        };
        let queued = Queued {
            comps,
            fp,
            deps,
            reasons,
        };
        self.queued
            .entry(need)
            .or_default()
            .insert(self.position[&i], queued);
        Ok(())
    }

    /// The first queued instance, in selection order, whose slots are free, marked running.
    fn pick(&mut self) -> Option<(usize, Box<Ready>)> {
        let need = self
            .queued
            .iter()
            .filter(|(need, _)| self.fits(**need))
            .filter_map(|(need, class)| Some((*class.keys().next()?, *need)))
            .min()?
            .1;
        let class = self.queued.get_mut(&need)?;
        let (n, q) = class.pop_first()?;
        if class.is_empty() {
            self.queued.remove(&need);
        }
        self.take(need);
        let i = self.selected[n];
        let bar = self.begin(i, &q.fp, &q.reasons);
        Some((
            i,
            Box::new(Ready {
                comps: q.comps,
                fp: q.fp,
                deps: q.deps,
                reasons: q.reasons,
                bar,
            }),
        ))
    }

    /// Why nothing more starts this run: interrupted, or `--fail-fast` saw a failure.
    fn why_halt(&self) -> Option<String> {
        if crate::executor::interrupted() {
            return Some("not started: the run was interrupted".into());
        }
        self.stop
            .then(|| "not started: --fail-fast after a failure".into())
    }

    /// Skips every waiting instance, in selection order (once: after it nothing waits).
    fn halt(&mut self) {
        if self.halted {
            return;
        }
        self.halted = true;
        self.queued.clear();
        for n in 0..self.selected.len() {
            let i = self.selected[n];
            if matches!(self.state.get(&i), Some(State::Waiting))
                && let Some(reason) = self.why_not_start(i)
            {
                self.skip(i, reason);
            }
        }
        self.todo.clear();
    }

    /// Why instance `i` will not start at all: a dep failed or was skipped, the run was
    /// interrupted, or `--fail-fast` saw a failure.
    fn why_not_start(&self, i: usize) -> Option<String> {
        let instances = &self.p.plan.instances;
        let blocked = instances[i]
            .deps
            .iter()
            .find(|d| matches!(self.state.get(d), Some(State::Failed | State::Skipped)));
        if let Some(&d) = blocked {
            return Some(format!("dep {} failed", instances[d].name));
        }
        self.why_halt()
    }

    /// The deps' output digests and artifacts, once every dep is done.
    fn dep_artifacts(&self, i: usize) -> Option<(BTreeMap<String, String>, Vec<DepArtifact>)> {
        let mut dep_out = BTreeMap::new();
        let mut deps = Vec::new();
        for d in &self.p.plan.instances[i].deps {
            let Some(State::Done { output, dir }) = self.state.get(d) else {
                return None;
            };
            let dinst = &self.p.plan.instances[*d];
            dep_out.insert(dinst.name.clone(), output.clone());
            deps.push(DepArtifact {
                instance: dinst.name.clone(),
                stage: dinst.stage.clone(),
                kind: dinst.kind.clone(),
                coords: dinst.coords.clone(),
                dir: dir.clone(),
            });
        }
        Some((dep_out, deps))
    }

    /// Whether an instance of this class could take its slots now: a place among the cluster
    /// jobs in flight (`--jobs` caps them; the cluster schedules resources), or CPU slots and
    /// GPU tokens (a stage may always start when nothing else runs locally, so one asking for
    /// more CPU slots than --jobs still runs, alone; never past the GPU tokens).
    fn fits(&self, need: Need) -> bool {
        match need {
            Need::Cluster => self
                .opts
                .max_in_flight
                .is_none_or(|cap| self.remote_running < cap.max(1)),
            Need::Local { cpu, gpu } => {
                let room = self.running == self.remote_running
                    || (self.cpu_used + cpu <= self.jobs && self.gpu_used + gpu <= self.opts.gpus);
                room && self.gpu_used + gpu <= self.opts.gpus
            }
        }
    }

    /// Takes the slots of a class that [`Self::fits`].
    fn take(&mut self, need: Need) {
        match need {
            Need::Cluster => self.remote_running += 1,
            Need::Local { cpu, gpu } => {
                self.cpu_used += cpu;
                self.gpu_used += gpu;
            }
        }
        self.running += 1;
    }

    fn needs(&self, inst: &Instance) -> (usize, u32) {
        (
            (inst.resources.cpu as usize).min(self.jobs),
            inst.resources.gpu,
        )
    }

    /// Marks instance `i` running; returns the bar its stage may feed.
    fn begin(&mut self, i: usize, fp: &str, reasons: &[String]) -> indicatif::ProgressBar {
        let inst = &self.p.plan.instances[i];
        self.state.insert(i, State::Running);
        info!(stage = %inst.name, fingerprint = %fp, reasons = ?reasons, "stage started");
        let bar = self.reporter.started(&inst.name, reasons);
        let mut o = outcome(inst, Status::Ran);
        o.reasons = reasons.to_vec();
        o.fingerprint = Some(fp.to_string());
        self.outcomes.insert(i, o);
        bar
    }

    fn skip(&mut self, i: usize, reason: String) {
        let mut o = outcome(&self.p.plan.instances[i], Status::Skipped);
        o.reasons = vec![reason];
        self.settle(i, o, State::Skipped);
    }

    fn fail(&mut self, i: usize, error: String) {
        let mut o = outcome(&self.p.plan.instances[i], Status::Failed);
        o.error = Some(error);
        self.settle(i, o, State::Failed);
        self.stop |= self.opts.fail_fast;
    }

    fn cached(&mut self, i: usize, fp: String, dir: PathBuf, output: String) {
        let mut o = outcome(&self.p.plan.instances[i], Status::Cached);
        o.fingerprint = Some(fp);
        o.artifact = Some(dir.clone());
        o.log = Some(dir.join(LOG_DIR));
        self.settle(i, o, State::Done { output, dir });
    }

    fn settle(&mut self, i: usize, o: Outcome, state: State) {
        self.reporter.finished(&o);
        self.outcomes.insert(i, o);
        self.set_state(i, state);
    }

    /// Records how instance `i` stands now and tells its dependents: each whose deps are all
    /// done, or of which one failed or was skipped, is looked at next.
    fn set_state(&mut self, i: usize, state: State) {
        let done = matches!(state, State::Done { .. });
        let settled = done || matches!(state, State::Failed | State::Skipped);
        self.state.insert(i, state);
        if !settled {
            return;
        }
        for &d in self.dependents.get(&i).map(Vec::as_slice).unwrap_or(&[]) {
            if !matches!(self.state.get(&d), Some(State::Waiting)) {
                continue;
            }
            let unmet = self.unmet.entry(d).or_default();
            if done {
                *unmet = unmet.saturating_sub(1);
            }
            if !done || *unmet == 0 {
                self.todo.insert(self.position[&d]);
            }
        }
    }

    /// Records a finished instance (committed or failed) and frees its slots.
    pub(super) fn finished(
        &mut self,
        done: JobResult,
        index: &mut Index,
        remote: bool,
    ) -> Result<(), IndexError> {
        self.running -= 1;
        let inst = &self.p.plan.instances[done.index];
        if remote {
            self.remote_running -= 1;
        } else {
            let (cpu, gpu) = self.needs(inst);
            self.cpu_used -= cpu;
            self.gpu_used -= gpu;
        }
        if let Some(o) = self.outcomes.get_mut(&done.index) {
            o.duration_ms = Some(done.elapsed_ms);
        }
        // The index first: if it cannot record the instance, the run ends with the outcome
        // as it stood (ran, with its duration).
        match &done.result {
            Ok((manifest, _)) => {
                index.add_record(&manifest.record)?;
                index.set_latest(&inst.name, &manifest.fingerprint)?;
            }
            Err(failure) => index.add_record(&failure.record)?,
        }
        let Some(mut outcome) = self.outcomes.remove(&done.index) else {
            // Only instances handed out by `next` run, and each has its outcome from `begin`.
            return Ok(());
        };
        let state = match done.result {
            Ok((manifest, dir)) => {
                outcome.artifact = Some(dir.clone());
                outcome.log = Some(dir.join(LOG_DIR));
                info!(stage = %inst.name, ms = done.elapsed_ms, "stage finished");
                let output = manifest.output_digest;
                State::Done { output, dir }
            }
            Err(failure) => {
                info!(stage = %inst.name, error = %failure.error, "stage failed");
                outcome.status = Status::Failed;
                outcome.error = Some(failure.error);
                outcome.log = Some(failure.log);
                self.stop |= self.opts.fail_fast;
                State::Failed
            }
        };
        self.settle(done.index, outcome, state);
        Ok(())
    }

    /// The outcomes, in the order of `selected`.
    pub(super) fn into_outcomes(mut self, selected: &[usize]) -> Vec<Outcome> {
        selected
            .iter()
            .filter_map(|i| self.outcomes.remove(i))
            .collect()
    }
}
