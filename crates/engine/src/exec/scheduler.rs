//! The bookkeeping of a run: which selected instances wait, run, are done, failed or were
//! skipped (and why), and the CPU slots, GPU tokens and cluster jobs in flight.
//! [`super::run`] drives it: settle or start every instance that can move, wait for one result,
//! record it, until nothing runs.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use tracing::info;

use super::{JobResult, Outcome, Ready, Reporter, RunOptions, Status};
use crate::Pipeline;
use crate::error::IndexError;
use crate::fingerprint::{Freshness, components, freshness};
use crate::index::Index;
use crate::manifest::LOG_DIR;
use crate::plan::Instance;
use crate::stage::DepArtifact;

enum State {
    Waiting,
    Running,
    Done { output: String, dir: PathBuf },
    Failed,
    Skipped,
}

/// What considering one instance came to.
pub(super) enum Step {
    /// It cannot move yet (deps running, no free slot) or has already moved.
    Wait,
    /// It was settled without running: cached, failed before starting, or skipped.
    Settled,
    /// It holds its slots now; the caller starts it.
    Start(Box<Ready>),
}

pub(super) struct Scheduler<'a> {
    p: &'a Pipeline,
    opts: &'a RunOptions,
    reporter: &'a dyn Reporter,
    /// `--jobs`, at least 1.
    jobs: usize,
    state: HashMap<usize, State>,
    outcomes: HashMap<usize, Outcome>,
    cpu_used: usize,
    gpu_used: u32,
    running: usize,
    remote_running: usize,
    /// `--fail-fast` after a failure: start nothing more.
    stop: bool,
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
        Scheduler {
            p,
            opts,
            reporter,
            jobs: opts.jobs.max(1),
            state: selected.iter().map(|&i| (i, State::Waiting)).collect(),
            outcomes: HashMap::new(),
            cpu_used: 0,
            gpu_used: 0,
            running: 0,
            remote_running: 0,
            stop: false,
        }
    }

    pub(super) fn running(&self) -> usize {
        self.running
    }

    /// Moves instance `i` as far as it can go now.
    pub(super) fn consider(
        &mut self,
        i: usize,
        index: &mut Index,
        remote: bool,
    ) -> Result<Step, IndexError> {
        if !matches!(self.state[&i], State::Waiting) {
            return Ok(Step::Wait);
        }
        if let Some(reason) = self.why_not_start(i) {
            self.skip(i, reason);
            return Ok(Step::Settled);
        }
        let Some((dep_out, deps)) = self.dep_artifacts(i) else {
            return Ok(Step::Wait);
        };
        let p = self.p;
        let inst = &p.plan.instances[i];
        let comps = match components(inst, &p.registry, index, dep_out) {
            Ok(c) => c,
            Err(e) => {
                self.fail(i, format!("{e:#}"));
                return Ok(Step::Settled);
            }
        };
        let fp = comps.fingerprint();
        let reasons = match freshness(&p.ws, index, inst, &comps) {
            Freshness::Fresh { dir, manifest } if !self.opts.force.contains(&i) => {
                index.set_latest(&inst.name, &fp)?;
                self.cached(i, fp, dir, manifest.output_digest);
                return Ok(Step::Settled);
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
            return Ok(Step::Settled);
        }
        if !self.take_slots(inst, remote) {
            return Ok(Step::Wait);
        }
        let bar = self.begin(i, &fp, &reasons);
        Ok(Step::Start(Box::new(Ready {
            comps,
            fp,
            deps,
            reasons,
            bar,
        })))
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
        if crate::executor::interrupted() {
            return Some("not started: the run was interrupted".into());
        }
        self.stop
            .then(|| "not started: --fail-fast after a failure".into())
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

    /// Takes the instance's CPU slots and GPU tokens (local) or a place among the cluster jobs
    /// in flight (`--jobs` caps them; the cluster schedules resources), if free.
    fn take_slots(&mut self, inst: &Instance, remote: bool) -> bool {
        if remote {
            if self
                .opts
                .max_in_flight
                .is_some_and(|cap| self.remote_running >= cap.max(1))
            {
                return false;
            }
            self.remote_running += 1;
        } else {
            let (cpu, gpu) = self.needs(inst);
            // A stage may always start when nothing else runs, so one asking for more CPU
            // slots than --jobs still runs (alone).
            let fits = self.running == self.remote_running
                || (self.cpu_used + cpu <= self.jobs && self.gpu_used + gpu <= self.opts.gpus);
            if !fits || self.gpu_used + gpu > self.opts.gpus {
                return false;
            }
            self.cpu_used += cpu;
            self.gpu_used += gpu;
        }
        self.running += 1;
        true
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
        self.state.insert(i, state);
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
        let outcome = self
            .outcomes
            .get_mut(&done.index)
            .expect("inserted at start");
        outcome.duration_ms = Some(done.elapsed_ms);
        match done.result {
            Ok((manifest, dir)) => {
                index.add_record(&manifest.record)?;
                index.set_latest(&inst.name, &manifest.fingerprint)?;
                outcome.artifact = Some(dir.clone());
                outcome.log = Some(dir.join(LOG_DIR));
                info!(stage = %inst.name, ms = done.elapsed_ms, "stage finished");
                let output = manifest.output_digest;
                self.state.insert(done.index, State::Done { output, dir });
            }
            Err(failure) => {
                index.add_record(&failure.record)?;
                info!(stage = %inst.name, error = %failure.error, "stage failed");
                outcome.status = Status::Failed;
                outcome.error = Some(failure.error);
                outcome.log = Some(failure.log);
                self.state.insert(done.index, State::Failed);
                self.stop |= self.opts.fail_fast;
            }
        }
        self.reporter.finished(outcome);
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
