//! One function per subcommand: load the pipeline, ask the engine, print text or JSON.

use std::collections::BTreeSet;
use std::collections::HashSet;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Result;
use pipeline_engine::exec::{self, RunOptions, Status};
use pipeline_engine::index::Index;
use pipeline_engine::{Pipeline, inspect};
use serde_json::json;
use unicode_width::UnicodeWidthStr;

use crate::args::{BenchCommand, Cli, Command, DagFormat, ExecutorArg, ModelCommand, RunArgs};
use crate::global::{Global, load, print_json};
use crate::report::{TermReporter, outcome_line};
use crate::sanitize;
use pipeline_engine::executor::config::ExecutorKind;

pub fn dispatch(cli: &Cli) -> Result<ExitCode> {
    let global = &cli.global;
    match &cli.command {
        Command::Run(args) => run(global, args),
        Command::Status {
            targets,
            json,
            remote,
        } => status(global, targets, *json, remote),
        Command::Dag { format, json } => dag(global, *format, *json),
        Command::Show { stage, json } => show(global, stage, *json),
        Command::Runs { limit, json } => runs(global, *limit, *json),
        Command::Metrics {
            stages,
            latest,
            json,
        } => metrics(global, stages, *latest, *json),
        Command::Exp(cmd) => crate::exp::dispatch(global, cmd),
        Command::Diff(args) => crate::diff::diff(global, args),
        Command::Plot(args) => crate::plot::plot(global, args),
        Command::Gc {
            dry_run,
            json,
            remote,
        } if remote.remote.is_some() => crate::remote::gc(global, remote, *dry_run, *json),
        Command::Gc { dry_run, json, .. } => crate::upkeep::gc(global, *dry_run, *json),
        Command::Push(args) => crate::remote::push(global, args),
        Command::Pull(args) => crate::remote::pull(global, args),
        Command::Verify { json } => crate::upkeep::verify(global, *json),
        Command::Model(ModelCommand::Forward {
            source,
            input,
            output,
            device,
        }) => crate::model::forward(global, source, input, output, device),
        Command::Model(ModelCommand::Info { source, json }) => {
            crate::model::info(global, source, *json)
        }
        Command::Model(ModelCommand::Import {
            from,
            out,
            config,
            vocab,
            json,
        }) => crate::tf::import(
            global,
            from,
            out,
            config.as_deref(),
            vocab.as_deref(),
            *json,
        ),
        Command::Model(ModelCommand::Export(args)) => crate::export::export(global, args),
        Command::Predict(args) => crate::predict::predict(global, args),
        Command::Serve(args) => crate::serve::serve(global, args),
        Command::Bench(BenchCommand::Train(args)) => crate::bench::train(args),
        Command::Bench(BenchCommand::Infer(args)) => crate::bench::infer(args),
        Command::Bench(BenchCommand::Finetune(args)) => crate::bench::finetune(args),
        Command::RunInstance { spec } => Ok(
            match pipeline_engine::executor::instance::run_spec(&crate::global::registry(), spec) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) if e.user_error().is_some() => return Err(e.into()),
                Err(e) => {
                    let text = pipeline_engine::error::chain_text(&e);
                    eprintln!("error: {}", crate::sanitize::message(&text));
                    ExitCode::from(1)
                }
            },
        ),
    }
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

fn run(global: &Global, args: &RunArgs) -> Result<ExitCode> {
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

fn status(
    global: &Global,
    targets: &[String],
    json: bool,
    remote: &crate::remote::StatusRemote,
) -> Result<ExitCode> {
    let p = load(global)?;
    let mut report = inspect::status(&p, targets)?;
    let in_remote = crate::remote::in_remote(&p, &mut report.stages, remote)?;
    if json {
        let stages: Vec<_> = report
            .stages
            .iter()
            .map(|o| {
                json!({
                    "instance": o.instance, "stage": o.stage,
                    "status": if o.status == Status::Fresh { "fresh" }
                        else if in_remote.contains(&o.instance) { "in-remote" } else { "stale" },
                    "reasons": o.reasons, "fingerprint": o.fingerprint, "artifact": o.artifact,
                })
            })
            .collect();
        print_json(&json!({ "running": report.running, "jobs": report.jobs, "stages": stages }))?;
    } else {
        if let Some(r) = &report.running {
            println!(
                "a run is in progress (pid {}, started {})",
                r.pid,
                sanitize::cell(&r.started, sanitize::CELL)
            );
        }
        for j in &report.jobs {
            println!("  Slurm job {}", job_line(j));
        }
        for o in &report.stages {
            let line = outcome_line(o);
            match in_remote.contains(&o.instance) {
                true => println!("{}", line.replacen("   stale", "in remote", 1)),
                false => println!("{line}"),
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn dag(global: &Global, format: DagFormat, json: bool) -> Result<ExitCode> {
    let p = load(global)?;
    let insts = &p.plan.instances;
    if json {
        let stages: Vec<_> = insts
            .iter()
            .map(|i| {
                let deps: Vec<&str> = i.deps.iter().map(|d| insts[*d].name.as_str()).collect();
                json!({"instance": i.name, "stage": i.stage, "kind": i.kind, "deps": deps})
            })
            .collect();
        print_json(&json!({ "stages": stages }))?;
        return Ok(ExitCode::SUCCESS);
    }
    match format {
        DagFormat::Text => {
            // Matrix values make the names: escaped and cut, padded without `{:width$}`
            // (which panics over 65,535).
            let name = |i: usize| sanitize::cell(&insts[i].name, sanitize::NAME);
            let names: Vec<String> = (0..insts.len()).map(name).collect();
            let width = names.iter().map(|n| n.width()).max().unwrap_or(0);
            for (i, n) in insts.iter().zip(&names) {
                let deps: Vec<&str> = i.deps.iter().map(|d| names[*d].as_str()).collect();
                let arrow = if deps.is_empty() {
                    String::new()
                } else {
                    format!("  ← {}", deps.join(", "))
                };
                println!("{}  [{}]{arrow}", sanitize::pad(n, width, false), i.kind);
            }
        }
        DagFormat::Dot => {
            println!("digraph pipeline {{\n  rankdir=LR;\n  node [shape=box];");
            for i in insts {
                println!(
                    "  {:?} [label={:?}];",
                    i.name,
                    format!("{}\\n({})", i.name, i.kind)
                );
                for d in &i.deps {
                    println!("  {:?} -> {:?};", insts[*d].name, i.name);
                }
            }
            println!("}}");
        }
        DagFormat::Mermaid => {
            println!("graph LR");
            for (n, i) in insts.iter().enumerate() {
                let name = sanitize::line(&i.name).replace('"', "'");
                println!("  s{n}[\"{name} ({})\"]", i.kind);
                for d in &i.deps {
                    println!("  s{d} --> s{n}");
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn show(global: &Global, stage: &str, json: bool) -> Result<ExitCode> {
    let p = load(global)?;
    let r = inspect::show(&p, stage)?;
    if json {
        print_json(&r)?;
        return Ok(ExitCode::SUCCESS);
    }
    // The instance's name is the plan's; the rest (params, reasons quoting old values,
    // paths, digests, metrics, the job's record) was read from the store's files.
    let field = |s: &str| sanitize::cell(s, sanitize::FIELD);
    println!("stage:       {} [{}]", field(&r.stage), r.kind);
    let why = if r.reasons.is_empty() {
        String::new()
    } else {
        format!(" ({})", field(&r.reasons.join("; ")))
    };
    println!("status:      {}{why}", r.status);
    println!(
        "fingerprint: {}",
        r.fingerprint
            .as_deref()
            .map_or("- (a dep must run first)".into(), field)
    );
    if !r.deps.is_empty() {
        println!("deps:        {}", field(&r.deps.join(", ")));
    }
    println!("params:      {}", field(&serde_json::to_string(&r.params)?));
    match &r.artifact {
        None => println!(
            "artifact:    none yet (run `pipeline run {}`)",
            field(&r.stage)
        ),
        Some(dir) => print_artifact(&r, dir),
    }
    Ok(ExitCode::SUCCESS)
}

/// `show`'s lines about the artifact: when it ran, its cluster job, its files and metrics.
fn print_artifact(r: &inspect::ShowReport, dir: &std::path::Path) {
    let field = |s: &str| sanitize::cell(s, sanitize::FIELD);
    println!("artifact:    {}", field(&dir.display().to_string()));
    if let Some(t) = &r.timings {
        println!(
            "ran:         {} → {} ({:.2}s)",
            field(&t.started),
            field(&t.finished),
            t.duration_ms as f64 / 1000.0
        );
    }
    if let Some(j) = &r.job {
        let secs = |ms: Option<u64>| {
            ms.map_or("?".to_string(), |ms| format!("{:.1}s", ms as f64 / 1000.0))
        };
        println!(
            "{} job:   {} on {} ({}), queued {}, ran {}{}",
            field(&j.executor),
            field(&j.job_id),
            field(j.node.as_deref().unwrap_or("?")),
            field(&j.state),
            secs(j.queue_wait_ms),
            secs(j.run_ms),
            if j.attempts > 1 {
                format!(", {} attempts", j.attempts)
            } else {
                String::new()
            }
        );
    }
    if let Some(log) = &r.log {
        println!("log:         {}", field(&log.display().to_string()));
    }
    println!("inputs:");
    for (k, v) in &r.inputs {
        println!("  {}  {}", field(k), sanitize::prefix(v, 16));
    }
    println!("outputs:");
    for f in &r.outputs {
        let (path, digest) = (field(&f.path), sanitize::prefix(&f.blake3, 16));
        println!("  {path}  {} bytes  {digest}", f.size);
    }
    if let Some(m) = &r.metrics {
        println!("metrics:");
        for (k, v) in inspect::flatten_metrics(m) {
            println!("  {}: {}", field(&k), field(&v));
        }
    }
}

/// A cluster job in flight, as `status` and `runs` list it: id, state, instance (from the
/// run's record, escaped and cut).
fn job_line(j: &pipeline_engine::manifest::JobEntry) -> String {
    let cell = |s: &str| sanitize::cell(s, sanitize::CELL);
    format!(
        "{}  {}  {}",
        sanitize::pad(&cell(&j.job_id), 8, true),
        sanitize::pad(&cell(&j.state), 24, false),
        cell(&j.instance)
    )
}

fn runs(global: &Global, limit: usize, json: bool) -> Result<ExitCode> {
    let p = load(global)?;
    let runs = inspect::runs(&p, limit);
    if json {
        print_json(&json!({ "runs": runs }))?;
        return Ok(ExitCode::SUCCESS);
    }
    if runs.is_empty() {
        println!("no runs yet");
    }
    for r in &runs {
        // A run record is a file of the store: every text of it escaped and cut.
        let counts: Vec<String> = r
            .counts
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(k, n)| format!("{n} {}", sanitize::cell(k, sanitize::CELL)))
            .collect();
        let targets = if r.targets.is_empty() {
            "all".to_string()
        } else {
            sanitize::cell(&r.targets.join(" "), sanitize::FIELD)
        };
        println!(
            "{}  {}  {}  targets: {targets}",
            sanitize::cell(&r.run_id, sanitize::CELL),
            sanitize::pad(&sanitize::cell(&r.status, sanitize::CELL), 11, false),
            sanitize::pad(&counts.join(", "), 30, false)
        );
        if let Some(cause) = r.cause.as_deref().filter(|_| r.status != "ok") {
            println!("    cause: {}", sanitize::message(cause));
        }
        if r.status == "running" {
            for j in r.jobs.iter().filter(|j| !j.done) {
                println!("    Slurm job {}", job_line(j));
            }
        } else if !r.jobs.is_empty() {
            let ids: Vec<&str> = r.jobs.iter().map(|j| j.job_id.as_str()).collect();
            println!(
                "    Slurm jobs: {}",
                sanitize::cell(&ids.join(" "), sanitize::FIELD)
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn metrics(global: &Global, stages: &[String], latest: bool, json: bool) -> Result<ExitCode> {
    let p = load(global)?;
    let mut rows = inspect::metrics(&p, stages, latest);
    if json {
        print_json(&json!({ "rows": rows }))?;
        return Ok(ExitCode::SUCCESS);
    }
    if rows.is_empty() {
        println!("no metrics yet: stages write them to $PIPELINE_OUT/metrics.json");
        return Ok(ExitCode::SUCCESS);
    }
    // Each row's values cut to a cell as soon as they are flattened, and its record let go:
    // a 60 MB string metric is not kept twice per row.
    let flat: Vec<Vec<(String, String)>> = rows
        .iter_mut()
        .map(|r| {
            let m = std::mem::take(&mut r.metrics);
            inspect::flatten_metrics(&m)
                .into_iter()
                .map(|(k, v)| (k, sanitize::cell(&v, sanitize::CELL)))
                .collect()
        })
        .collect();
    let keys: BTreeSet<&str> = flat.iter().flatten().map(|(k, _)| k.as_str()).collect();
    // Every cell escaped and cut (a key or value of 70,000 characters once panicked the
    // `{:<w$}` padding, whose width must fit in 16 bits), then laid out by the tables' code.
    let mut headers = vec![
        "instance".to_string(),
        "fingerprint".into(),
        "finished".into(),
    ];
    headers.extend(keys.iter().map(|k| sanitize::header(k, sanitize::NAME)));
    let cells: Vec<Vec<String>> = rows
        .iter()
        .zip(&flat)
        .map(|(r, f)| {
            let mark = if r.current { "*" } else { "" };
            let mut row = vec![
                format!("{}{mark}", sanitize::cell(&r.instance, sanitize::NAME)),
                sanitize::prefix(&r.fingerprint, 8),
                sanitize::cell(&r.finished, sanitize::CELL),
            ];
            let value = |k: &&str| f.iter().find(|(fk, _)| fk == k).map(|(_, v)| v.as_str());
            row.extend(
                keys.iter()
                    .map(|k| value(k).unwrap_or_default().to_string()),
            );
            row
        })
        .collect();
    let n = headers.len();
    let table = crate::table::Table {
        headers,
        rows: cells,
        right: vec![false; n],
        ..Default::default()
    };
    print!("{}", crate::table::text(&table, None).0);
    println!("(* = the instance's latest artifact)");
    Ok(ExitCode::SUCCESS)
}
