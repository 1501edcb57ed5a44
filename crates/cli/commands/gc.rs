//! `pipeline gc`: artifacts nothing references removed from the local store, or with
//! `--remote`, from a remote store. What is removed, kept, left alone is decided by
//! `pipeline_engine::maintain` (and crates/remote); everything printed here came from disk,
//! from manifests or from a shared remote, so it goes through the sanitiser.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use clap::Args;
use pipeline_engine::index::Index;
use pipeline_engine::maintain;
use pipeline_remote::GcOptions;
use serde_json::json;

use crate::global::{Global, load, print_json};
use crate::remote::{required, to_anyhow};
use crate::sanitize;

/// `pipeline gc --remote [NAME|URL] [--all]`.
#[derive(Debug, Args)]
pub struct GcRemote {
    /// Trim the remote instead of the local store: remove the artifacts the local store does
    /// not hold and the objects no remaining manifest names.
    #[arg(long, value_name = "NAME|URL", num_args = 0..=1, default_missing_value = "")]
    pub remote: Option<String>,
    /// With --remote: keep every artifact the remote has; remove only objects no manifest
    /// names (left by killed pushes, or by artifacts removed by hand).
    #[arg(long, requires = "remote")]
    pub all: bool,
    /// With --remote: leave objects and manifests younger than this, which a push in progress
    /// may be about to name (e.g. 1h, 30m, 0s).
    #[arg(long, requires = "remote", default_value = "1h", value_parser = humantime::parse_duration)]
    pub min_age: Duration,
}

/// Trims the local store, or the remote one `--remote` names.
pub fn gc(global: &Global, dry_run: bool, json: bool, args: &GcRemote) -> Result<ExitCode> {
    match args.remote {
        Some(_) => remote(global, args, dry_run, json),
        None => local(global, dry_run, json),
    }
}

/// Trims the local store.
fn local(global: &Global, dry_run: bool, json: bool) -> Result<ExitCode> {
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

/// `--remote`: trims the remote store instead.
fn remote(global: &Global, args: &GcRemote, dry_run: bool, json: bool) -> Result<ExitCode> {
    let p = load(global)?;
    let flag = args.remote.as_deref().filter(|r| !r.is_empty());
    let remote = required(&p, flag, false)?;
    let opts = GcOptions {
        all: args.all,
        dry_run,
        min_age: args.min_age,
    };
    let report = remote.gc(&p.ws, &opts).map_err(to_anyhow)?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(
                &json!({ "remote": remote.describe(), "dry_run": dry_run, "report": report })
            )?
        );
        return Ok(ExitCode::SUCCESS);
    }
    let verb = if dry_run { "would remove" } else { "removed" };
    for path in report.manifests.iter().chain(&report.objects) {
        println!("{verb} {path}");
    }
    for path in &report.uploads {
        println!("{verb} {path} (an unfinished upload)");
    }
    for path in &report.left_alone {
        // A name from a shared remote: its control characters escaped.
        let path = sanitize::line(path);
        println!("left alone {path} (not a file pipeline writes there)");
    }
    if let Some(note) = &report.note {
        eprintln!("note: {note}");
    }
    println!(
        "{verb} {} manifests and {} objects ({:.1} MB) from {}; kept {} manifests and {} objects ({} unreferenced but younger than --min-age)",
        report.manifests.len(),
        report.objects.len(),
        report.bytes as f64 / 1e6,
        remote.describe(),
        report.kept_manifests,
        report.kept_objects,
        report.too_young
    );
    Ok(ExitCode::SUCCESS)
}
