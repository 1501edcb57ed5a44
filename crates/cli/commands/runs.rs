//! `pipeline runs`: the history of `pipeline run`, newest first, with each run's counts,
//! targets, cause of failure and cluster jobs.

use std::process::ExitCode;

use anyhow::Result;
use pipeline_engine::inspect;
use serde_json::json;

use crate::console::job_line;
use crate::global::{Global, load, print_json};
use crate::sanitize;

pub fn runs(global: &Global, limit: usize, json: bool) -> Result<ExitCode> {
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
