//! `pipeline status`: for each stage instance, fresh or stale and why, a run in progress and
//! its cluster jobs, and (with a remote) which stale instances the remote holds.

use std::process::ExitCode;

use anyhow::Result;
use pipeline_engine::exec::Status;
use pipeline_engine::inspect;
use serde_json::json;

use crate::console::{job_line, outcome_line};
use crate::global::{Global, load, print_json};
use crate::sanitize;

pub fn status(
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
