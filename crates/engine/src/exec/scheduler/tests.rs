//! Unit tests of the scheduler, driven by hand (no threads, no stages run): what starts in
//! which order, what is skipped and why, and how often instances are fingerprinted.

use std::collections::HashSet;

use super::*;
use crate::exec::{Failure, Silent};
use crate::manifest::{Manifest, StageRecord};
use crate::stage::Registry;

struct Fixture {
    _dir: tempfile::TempDir,
    p: Pipeline,
}

fn fixture(yaml: &str) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pipeline.yaml");
    std::fs::write(&path, yaml).unwrap();
    let p = Pipeline::load(&path, &[], Registry::builtin()).unwrap();
    p.ws.ensure().unwrap();
    Fixture { _dir: dir, p }
}

fn options(jobs: usize, fail_fast: bool) -> RunOptions {
    RunOptions {
        jobs,
        gpus: 0,
        force: HashSet::new(),
        fail_fast,
        targets: Vec::new(),
        executor: None,
        max_in_flight: None,
        remote: None,
    }
}

fn record(name: &str, fp: &str, status: &str) -> StageRecord {
    StageRecord {
        run_id: "r".into(),
        instance: name.into(),
        stage: name.into(),
        fingerprint: fp.into(),
        status: status.into(),
        started: "s".into(),
        finished: "f".into(),
        duration_ms: 0,
        reasons: Vec::new(),
        error: None,
        dir: PathBuf::new(),
        job: None,
    }
}

/// What a stage thread would send back: committed, or failed when `fails` names it.
fn result(p: &Pipeline, i: usize, ready: Ready, fails: &[&str]) -> JobResult {
    let name = &p.plan.instances[i].name;
    let result = if fails.contains(&name.as_str()) {
        Err(Box::new(Failure {
            error: "boom".into(),
            log: PathBuf::new(),
            record: record(name, &ready.fp, "failed"),
        }))
    } else {
        let manifest = Manifest {
            format: crate::manifest::FORMAT,
            instance: name.clone(),
            stage: name.clone(),
            fingerprint: ready.fp.clone(),
            components: ready.comps,
            files: Vec::new(),
            output_digest: format!("out-{name}"),
            record: record(name, &ready.fp, "ok"),
        };
        Ok((manifest, p.ws.artifact_dir(name, &ready.fp)))
    };
    JobResult {
        index: i,
        elapsed_ms: 1,
        result,
    }
}

/// Runs the whole selection by hand, finishing the oldest running instance each time; returns
/// the start order (instance names), the most that ran at once, the outcomes and how many
/// fingerprints were computed.
fn drive(
    f: &Fixture,
    opts: &RunOptions,
    fails: &[&str],
) -> (Vec<String>, usize, Vec<Outcome>, usize) {
    let p = &f.p;
    let selected = p.plan.select(&[]).unwrap();
    let mut index = Index::open_for_run(&p.ws).unwrap();
    let mut sched = Scheduler::new(p, &selected, opts, &Silent);
    let (mut started, mut running, mut most) = (Vec::new(), Vec::new(), 0);
    loop {
        while let Some((i, ready)) = sched.next(&mut index, &|_| false).unwrap() {
            started.push(p.plan.instances[i].name.clone());
            running.push((i, *ready));
            most = most.max(running.len());
        }
        if running.is_empty() {
            break;
        }
        let (i, ready) = running.remove(0);
        sched
            .finished(result(p, i, ready, fails), &mut index, false)
            .unwrap();
    }
    let fingerprinted = sched.fingerprinted;
    (started, most, sched.into_outcomes(&selected), fingerprinted)
}

#[test]
fn each_instance_is_fingerprinted_once_however_many_wait() {
    // 300 independent instances, a chain behind them and one aggregate: with two slots the
    // scheduler used to fingerprint every waiting instance again after each completion
    // (about 300²/2 fingerprints here); it must be one per instance.
    let values: Vec<String> = (0..300).map(|v| v.to_string()).collect();
    let yaml = format!(
        "stages:\n  a:\n    cmd: 'true'\n    matrix: {{v: [{}]}}\n  b:\n    cmd: 'true'\n    deps: [a]\n  c:\n    cmd: 'true'\n    deps: [b]\n    aggregate: true\n",
        values.join(", ")
    );
    let f = fixture(&yaml);
    let (started, most, outcomes, fingerprinted) = drive(&f, &options(2, false), &[]);
    assert_eq!(outcomes.len(), 601);
    assert_eq!(fingerprinted, 601);
    assert_eq!(started.len(), 601);
    assert!(outcomes.iter().all(|o| o.status == Status::Ran));
    assert_eq!(most, 2, "--jobs 2 runs two at a time");
    assert_eq!(started[0], "a@v=0");
    assert_eq!(started.last().map(String::as_str), Some("c"));
}

#[test]
fn the_first_queued_instance_that_fits_starts_first() {
    // With two slots, `big` (two) cannot start beside `one`; `two`, behind it, can.
    let f = fixture(
        "stages:\n  one: {cmd: 'true'}\n  big: {cmd: 'true', resources: {cpu: 2}}\n  two: {cmd: 'true'}\n",
    );
    let (started, _, outcomes, fingerprinted) = drive(&f, &options(2, false), &[]);
    assert_eq!(started, ["one", "two", "big"]);
    assert_eq!(outcomes.len(), 3);
    assert_eq!(fingerprinted, 3);
}

#[test]
fn a_failure_skips_its_dependents_and_fail_fast_the_rest() {
    let f = fixture(
        "stages:\n  a: {cmd: 'true'}\n  b: {cmd: 'true', deps: [a]}\n  c: {cmd: 'true', deps: [b]}\n  d: {cmd: 'true'}\n",
    );
    let (_, _, outcomes, _) = drive(&f, &options(1, false), &["a"]);
    let by_name = |outcomes: &[Outcome], n: &str| {
        let o = outcomes.iter().find(|o| o.instance == n).unwrap();
        (o.status, o.reasons.clone())
    };
    assert_eq!(by_name(&outcomes, "a").0, Status::Failed);
    assert_eq!(
        by_name(&outcomes, "b"),
        (Status::Skipped, vec!["dep a failed".to_string()])
    );
    assert_eq!(
        by_name(&outcomes, "c"),
        (Status::Skipped, vec!["dep b failed".to_string()])
    );
    assert_eq!(by_name(&outcomes, "d").0, Status::Ran);

    let f =
        fixture("stages:\n  a: {cmd: 'true'}\n  b: {cmd: 'true', deps: [a]}\n  d: {cmd: 'true'}\n");
    let (started, _, outcomes, _) = drive(&f, &options(1, true), &["a"]);
    assert_eq!(started, ["a"]);
    assert_eq!(
        by_name(&outcomes, "b"),
        (Status::Skipped, vec!["dep a failed".to_string()])
    );
    assert_eq!(
        by_name(&outcomes, "d"),
        (
            Status::Skipped,
            vec!["not started: --fail-fast after a failure".to_string()]
        )
    );
}

#[test]
fn a_dependent_is_fingerprinted_with_the_digests_its_deps_finished_with() {
    // The guard for a fingerprint taken too early (before a dep's output digest is known):
    // cluster instances (`a@…`) and a local one (`l`) finish newest first, so each dependent's
    // last dep is a different one; every dependent's fingerprint must be the one computed from
    // all its deps' final digests (`out-<name>`), as a no-op run recomputes it from the store.
    let f = fixture(
        "stages:\n  a:\n    cmd: 'true'\n    matrix: {v: [1, 2, 3]}\n  l: {cmd: 'true'}\n  b:\n    cmd: 'true'\n    deps: [a, l]\n  c:\n    cmd: 'true'\n    deps: [a, b]\n    aggregate: true\n",
    );
    let p = &f.p;
    let selected = p.plan.select(&[]).unwrap();
    let mut index = Index::open_for_run(&p.ws).unwrap();
    let opts = options(1, false);
    let mut sched = Scheduler::new(p, &selected, &opts, &Silent);
    let cluster = |i: usize| p.plan.instances[i].stage == "a";
    let mut running = Vec::new();
    let mut fps = BTreeMap::new();
    loop {
        while let Some((i, ready)) = sched.next(&mut index, &cluster).unwrap() {
            fps.insert(i, ready.fp.clone());
            running.push((i, *ready));
        }
        let Some((i, ready)) = running.pop() else {
            break;
        };
        let done = result(p, i, ready, &[]);
        sched.finished(done, &mut index, cluster(i)).unwrap();
    }
    assert_eq!(fps.len(), selected.len(), "every instance ran");
    for (&i, fp) in &fps {
        let inst = &p.plan.instances[i];
        let dep_out = inst
            .deps
            .iter()
            .map(|&d| {
                let name = p.plan.instances[d].name.clone();
                (name.clone(), format!("out-{name}"))
            })
            .collect();
        let comps = components(inst, &p.registry, &mut index, dep_out).unwrap();
        assert_eq!(&comps.fingerprint(), fp, "fingerprint of {}", inst.name);
    }
}
