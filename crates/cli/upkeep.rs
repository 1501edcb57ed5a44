//! `pipeline gc` and `pipeline verify`: the store's upkeep, printed. What is removed, kept,
//! left alone or quarantined is decided by `pipeline_engine::maintain`; everything printed
//! here came from disk or from manifests, so it goes through the sanitiser.

use std::process::ExitCode;

use anyhow::Result;
use pipeline_engine::index::Index;
use pipeline_engine::maintain;

use crate::global::Global;
use crate::global::{load, print_json};
use crate::sanitize;

pub(crate) fn gc(global: &Global, dry_run: bool, json: bool) -> Result<ExitCode> {
    let p = load(global)?;
    p.ws.ensure()?;
    let _lock = p.ws.lock("pipeline gc")?;
    let mut index = Index::open_for_run(&p.ws)?;
    let report = maintain::gc(&p, &mut index, dry_run)?;
    if json {
        print_json(&report)?;
        return Ok(ExitCode::SUCCESS);
    }
    let verb = if dry_run { "would remove" } else { "removed" };
    for f in &report.other_files {
        println!(
            "kept what {} uses too (it shares this workspace)",
            f.display()
        );
    }
    // Entry names come from disk (a scratch disk's folders, a manifest's instance): escaped.
    for why in &report.left_alone {
        println!("{}", sanitize::line(why));
    }
    for r in &report.removed {
        println!(
            "{verb} {} {} ({} bytes)",
            sanitize::line(&r.instance),
            sanitize::line(&r.path.display().to_string()),
            r.bytes
        );
    }
    println!(
        "{verb} {} director{} ({:.1} MB); kept {} artifacts",
        report.removed.len(),
        if report.removed.len() == 1 {
            "y"
        } else {
            "ies"
        },
        report.bytes_freed as f64 / 1e6,
        report.kept
    );
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn verify(global: &Global, json: bool) -> Result<ExitCode> {
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
