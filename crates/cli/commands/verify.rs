//! `pipeline verify`: every artifact re-hashed; corrupt ones moved to `.pipeline/quarantine`
//! (exit 1 if any). What is corrupt or left alone is decided by `pipeline_engine::maintain`;
//! everything printed here came from disk or from manifests, so it goes through the sanitiser.

use std::process::ExitCode;

use anyhow::Result;
use pipeline_engine::maintain;

use crate::global::{Global, load, print_json};
use crate::sanitize;

/// Checks the store; exit 1 when an artifact was corrupt.
pub fn verify(global: &Global, json: bool) -> Result<ExitCode> {
    let p = load(global)?;
    p.ws.ensure()?;
    let _lock = p.ws.lock("pipeline verify")?;
    let report = maintain::verify(&p)?;
    if json {
        print_json(&report)?;
    } else {
        // Entry names and problems come from disk and from manifests: escaped.
        let path = |p: &std::path::Path| sanitize::line(&p.display().to_string()).into_owned();
        for l in &report.left_alone {
            println!("left alone: {} ({})", path(&l.path), sanitize::line(&l.why));
        }
        for c in &report.corrupt {
            println!(
                "corrupt {} ({}):",
                sanitize::line(&c.instance),
                sanitize::line(&c.fingerprint)
            );
            for problem in &c.problems {
                println!("  {}", sanitize::line(problem));
            }
            println!(
                "  moved to {}; `pipeline run` makes it again",
                path(&c.quarantined_to)
            );
        }
        let left = match report.left_alone.len() {
            0 => String::new(),
            1 => "; left alone 1 entry the store did not make".to_string(),
            n => format!("; left alone {n} entries the store did not make"),
        };
        println!(
            "checked {} artifacts: {} corrupt{left}",
            report.checked,
            report.corrupt.len()
        );
    }
    Ok(if report.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
