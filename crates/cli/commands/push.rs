//! `pipeline push`: the targets' artifacts (all in the local store if none) uploaded to a
//! remote store; what the local store does not hold is named, not an error.

use std::collections::HashSet;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Result;
use pipeline_engine::exec::{self, Status};
use pipeline_engine::index::Index;
use pipeline_engine::manifest::Manifest;
use serde_json::json;

use crate::global::{Global, load};
use crate::remote::{TransferArgs, progress, required, to_anyhow};

/// Uploads what the local store holds of the targets; a missing one is a note, not a failure.
pub fn push(global: &Global, args: &TransferArgs) -> Result<ExitCode> {
    let t0 = Instant::now();
    let p = load(global)?;
    let remote = required(&p, args.remote.as_deref(), true)?;
    let selected = p.plan.select(&args.targets)?;
    let mut index = Index::open_read_only(&p.ws);
    let outcomes = exec::predict(&p, &mut index, &selected, &HashSet::new())?;
    drop(index);
    let mut artifacts: Vec<(PathBuf, Manifest)> = Vec::new();
    let mut absent = Vec::new();
    for o in &outcomes {
        match (o.status, &o.artifact) {
            (Status::Fresh, Some(dir)) => match Manifest::read(dir) {
                Some(m) => artifacts.push((dir.clone(), m)),
                None => absent.push(o.instance.as_str()),
            },
            _ => absent.push(o.instance.as_str()),
        }
    }
    let report = remote
        .push(&artifacts, progress(global, args.json))
        .map_err(to_anyhow)?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "remote": remote.describe(), "report": report, "not_in_store": absent,
                "seconds": t0.elapsed().as_secs_f64(),
            }))?
        );
    } else if !global.quiet {
        println!(
            "pushed {} artifact{} to {} ({} objects, {:.1} MB; {} objects and {} artifacts already there) in {:.2}s",
            report.manifests_sent,
            if report.manifests_sent == 1 { "" } else { "s" },
            remote.describe(),
            report.objects_sent,
            report.bytes_sent as f64 / 1e6,
            report.objects_present,
            report.already_there,
            t0.elapsed().as_secs_f64()
        );
    }
    if !absent.is_empty() && !args.json {
        eprintln!(
            "note: not in the local store (`pipeline run` makes them): {}",
            absent.join(", ")
        );
    }
    Ok(ExitCode::SUCCESS)
}
