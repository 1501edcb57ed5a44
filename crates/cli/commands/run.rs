//! `pipeline run`: the targets and what they need, each stage instance run unless its kind,
//! code, params, inputs and deps' outputs are those of an artifact the store holds;
//! `--dry-run` says what would run and why, from a read-only index.

use std::collections::HashSet;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Result;
use clap::{Args, ValueEnum};
use pipeline_engine::Pipeline;
use pipeline_engine::exec::{self, RunOptions, Status};
use pipeline_engine::executor::config::ExecutorKind;
use pipeline_engine::index::Index;
use serde_json::json;

use crate::console::{TermReporter, outcome_line};
use crate::global::{Global, load, print_json};

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Stage or instance names; their deps run first. None: every stage.
    pub targets: Vec<String>,
    /// Re-run the targets (every selected stage if no target is named) even if cached.
    #[arg(long)]
    pub force: bool,
    /// Say what would run and why; run nothing.
    #[arg(long, short = 'n')]
    pub dry_run: bool,
    /// How many stages may run at once (default: the number of cores).
    #[arg(long, short = 'j', value_name = "N")]
    pub jobs: Option<usize>,
    /// GPU tokens: stages with `resources: {gpu: 1}` hold one while they run.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub gpus: u32,
    /// Stop starting stages after the first failure (running ones finish).
    #[arg(long)]
    pub fail_fast: bool,
    /// Where stages run: `slurm` submits each instance as a Slurm job, `local` runs the whole
    /// file on this machine. Default: `executor.kind` of pipeline.yaml, else local. With slurm,
    /// --jobs caps the jobs in flight (no cap by default).
    #[arg(long, value_enum, value_name = "KIND")]
    pub executor: Option<ExecutorArg>,
    /// Print one JSON object with every stage's outcome on stdout.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub remote: crate::remote::RunRemote,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ExecutorArg {
    Local,
    Slurm,
}

/// `run --dry-run`: what would run and why, from a read-only index.
fn dry_run(
    global: &Global,
    args: &RunArgs,
    p: &Pipeline,
    selected: &[usize],
    force: &HashSet<usize>,
) -> Result<ExitCode> {
    let mut index = Index::open_read_only(&p.ws);
    let outcomes = exec::predict(p, &mut index, selected, force)?;
    if args.json {
        let would = outcomes
            .iter()
            .filter(|o| o.status == Status::WouldRun)
            .count();
        print_json(&json!({
            "run_id": null, "ok": true, "dry_run": true,
            "counts": {"would-run": would, "fresh": outcomes.len() - would},
            "stages": outcomes,
        }))?;
    } else if !global.quiet {
        for o in &outcomes {
            println!("{}", outcome_line(o).replacen("   stale", "would run", 1));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs what is stale among the targets; exit 1 when a stage failed.
pub fn run(global: &Global, args: &RunArgs) -> Result<ExitCode> {
    let t0 = Instant::now();
    let p = load(global)?;
    let selected = p.plan.select(&args.targets)?;
    let force = if !args.force {
        Default::default()
    } else if args.targets.is_empty() {
        selected.iter().copied().collect()
    } else {
        p.plan.named(&args.targets)
    };
    if args.dry_run {
        return dry_run(global, args, &p, &selected, &force);
    }
    p.ws.ensure()?;
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let _lock = p.ws.lock(&command)?;
    let mut index = Index::open_for_run(&p.ws)?;
    if let Some(note) = &index.note {
        // A log line rather than a print, so that `--json` and `--quiet` runs keep it too.
        tracing::warn!("{note}");
    }
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let opts = RunOptions {
        jobs,
        gpus: args.gpus,
        force,
        fail_fast: args.fail_fast,
        targets: args.targets.clone(),
        executor: args.executor.map(|e| match e {
            ExecutorArg::Local => ExecutorKind::Local,
            ExecutorArg::Slurm => ExecutorKind::Slurm,
        }),
        max_in_flight: args.jobs,
        remote: crate::remote::run_cache(&p, &args.remote)?,
    };
    let reporter = TermReporter::new(!args.json && !global.quiet);
    let result = exec::run(&p, &mut index, &selected, &opts, &reporter)?;
    drop(index);
    let counts = result.counts();
    if args.json {
        print_json(&json!({
            "run_id": result.run_id, "ok": result.ok(), "dry_run": false,
            "counts": counts, "stages": result.outcomes,
        }))?;
    } else if !global.quiet {
        println!(
            "{} ran, {} cached, {} failed, {} skipped in {:.2}s",
            counts["ran"],
            counts["cached"],
            counts["failed"],
            counts["skipped"],
            t0.elapsed().as_secs_f64()
        );
    }
    Ok(if result.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
