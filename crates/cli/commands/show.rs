//! `pipeline show`: an instance's params, inputs, outputs, metrics, timings, cluster job and
//! log path, from its latest run.

use std::process::ExitCode;

use anyhow::Result;
use pipeline_engine::inspect;

use crate::global::{Global, load, print_json};
use crate::sanitize;

pub fn show(global: &Global, stage: &str, json: bool) -> Result<ExitCode> {
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
