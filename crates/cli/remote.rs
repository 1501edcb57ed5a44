//! `pipeline push`, `pipeline pull`, `pipeline gc --remote`, and the remote as `run`'s cache
//! and in `status` (crates/remote does the work).

use std::collections::{HashMap, HashSet};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use clap::Args;
use pipeline_engine::exec::{self, Outcome, Status};
use pipeline_engine::index::Index;
use pipeline_engine::manifest::Manifest;
use pipeline_engine::remote::RemoteCache;
use pipeline_engine::{Pipeline, UserError};
use pipeline_remote::{GcOptions, Remote, RemoteError, RunCache};
use serde_json::json;

use crate::global::Global;
use crate::global::load;

/// `--remote` and `--no-remote` of `pipeline run`.
#[derive(Debug, Args)]
pub struct RunRemote {
    /// Look instances up in this remote (a name from pipeline.yaml's `remotes:`, a URL or a
    /// directory) before running them, and pull them instead. Default: $PIPELINE_REMOTE, else
    /// the file's default remote.
    #[arg(long, value_name = "NAME|URL")]
    pub remote: Option<String>,
    /// Use no remote.
    #[arg(long, conflicts_with = "remote")]
    pub no_remote: bool,
}

/// `--remote` and `--no-remote` of `pipeline status`.
#[derive(Debug, Args)]
pub struct StatusRemote {
    /// Say which stale instances this remote holds (a name from pipeline.yaml's `remotes:`, a
    /// URL or a directory). Default: $PIPELINE_REMOTE, else the file's default remote.
    #[arg(long, value_name = "NAME|URL")]
    pub remote: Option<String>,
    /// Ask no remote.
    #[arg(long, conflicts_with = "remote")]
    pub no_remote: bool,
}

#[derive(Debug, Args)]
pub struct TransferArgs {
    /// Stage or instance names and what they need. None: every stage.
    pub targets: Vec<String>,
    /// A name from pipeline.yaml's `remotes:`, a URL (s3://BUCKET/PREFIX) or a directory.
    /// Default: $PIPELINE_REMOTE, else the file's default remote.
    #[arg(long, value_name = "NAME|URL")]
    pub remote: Option<String>,
    #[arg(long)]
    pub json: bool,
}

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

/// A remote error as the CLI reports it: mistakes in the input exit with 2.
fn to_anyhow(e: RemoteError) -> anyhow::Error {
    if e.is_user_error() {
        let mut user = UserError::new(e.to_string());
        if let Some(help) = e.help() {
            user = user.with_help(help);
        }
        user.into()
    } else {
        e.into()
    }
}

/// The remote a command uses, if any is configured (`create`: a directory remote may be made).
fn open(p: &Pipeline, flag: Option<&str>, create: bool) -> Result<Option<Remote>, RemoteError> {
    let Some(spec) = pipeline_remote::resolve(&p.plan.file.remotes, flag)? else {
        return Ok(None);
    };
    Ok(Some(Remote::open(&spec, &p.plan.root, create)?))
}

fn required(p: &Pipeline, flag: Option<&str>, create: bool) -> Result<Remote> {
    open(p, flag, create)
        .map_err(to_anyhow)?
        .ok_or_else(|| to_anyhow(RemoteError::NoRemote))
}

fn progress(global: &Global, json: bool) -> bool {
    !global.quiet && !json && std::io::stderr().is_terminal()
}

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

pub fn pull(global: &Global, args: &TransferArgs) -> Result<ExitCode> {
    let t0 = Instant::now();
    let p = load(global)?;
    let remote = required(&p, args.remote.as_deref(), false)?;
    let selected = p.plan.select(&args.targets)?;
    p.ws.ensure()?;
    let _lock = p.ws.lock("pipeline pull")?;
    let mut index = Index::open_for_run(&p.ws)?;
    let places = remote
        .locate(&p, &mut index, &selected)
        .map_err(to_anyhow)?;
    let (mut local, mut missing, mut wanted) = (0, Vec::new(), Vec::new());
    for (i, place) in places {
        match place {
            pipeline_remote::Place::Local => local += 1,
            pipeline_remote::Place::Remote(m) => wanted.push(*m),
            pipeline_remote::Place::Neither => missing.push(p.plan.instances[i].name.clone()),
        }
    }
    let bytes: u64 = wanted
        .iter()
        .flat_map(|m| m.files())
        .map(|(_, f)| f.size)
        .sum();
    let report = remote
        .pull(&p.ws, &wanted, progress(global, args.json))
        .map_err(to_anyhow)?;
    let (pulled, transfer) = (report.committed, report.transfer);
    for (m, _) in &pulled {
        index.add_record(&m.record)?;
        index.set_latest(&m.instance, &m.fingerprint)?;
    }
    index.flush();
    let names: Vec<(&str, &str)> = pulled
        .iter()
        .map(|(m, _)| (m.instance.as_str(), m.fingerprint.as_str()))
        .collect();
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "remote": remote.describe(), "pulled": names, "local": local,
                "missing": missing, "bytes": bytes, "transfer": transfer,
                "seconds": t0.elapsed().as_secs_f64(),
            }))?
        );
    } else if !global.quiet {
        for (instance, fp) in &names {
            println!("  pulled  {instance} ({fp})");
        }
        let resumed = transfer.bytes - transfer.bytes_fetched;
        println!(
            "pulled {} artifact{} ({:.1} MB; {} objects, {:.1} MB fetched{}) from {}; {} already here, {} in neither (they would run) in {:.2}s",
            names.len(),
            if names.len() == 1 { "" } else { "s" },
            bytes as f64 / 1e6,
            transfer.objects,
            transfer.bytes_fetched as f64 / 1e6,
            if resumed > 0 {
                format!(", {:.1} MB left by an earlier pull", resumed as f64 / 1e6)
            } else {
                String::new()
            },
            remote.describe(),
            local,
            missing.len(),
            t0.elapsed().as_secs_f64()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The run cache `pipeline run` hands the engine, unless `--no-remote` or none is configured.
/// A remote that cannot be opened (an unmounted directory) is a warning: the run goes on here.
pub fn run_cache(p: &Pipeline, flags: &RunRemote) -> Result<Option<Arc<dyn RemoteCache>>> {
    if flags.no_remote {
        return Ok(None);
    }
    match open(p, flags.remote.as_deref(), false) {
        Ok(r) => Ok(r.map(|r| Arc::new(RunCache::new(r)) as Arc<dyn RemoteCache>)),
        Err(e) if e.is_user_error() => Err(to_anyhow(e)),
        Err(e) => {
            tracing::warn!("{e}; running without the remote");
            Ok(None)
        }
    }
}

/// For `status`: the instances whose artifact at the current plan's fingerprint the remote has
/// (their fingerprints are filled in). A remote that cannot be reached is a warning; one that
/// is misnamed (`--remote nsf`) an error, as for `run`.
pub fn in_remote(
    p: &Pipeline,
    stages: &mut [Outcome],
    flags: &StatusRemote,
) -> Result<HashSet<String>> {
    if flags.no_remote {
        return Ok(HashSet::new());
    }
    let remote = match open(p, flags.remote.as_deref(), false) {
        Ok(r) => r,
        Err(e) if e.is_user_error() => return Err(to_anyhow(e)),
        Err(e) => {
            tracing::warn!("the remote could not be asked: {e}");
            None
        }
    };
    let found = (|| -> Result<HashMap<String, String>> {
        let Some(remote) = remote else {
            return Ok(HashMap::new());
        };
        let selected: Vec<usize> = stages
            .iter()
            .filter_map(|o| p.plan.instances.iter().position(|i| i.name == o.instance))
            .collect();
        let mut index = Index::open_read_only(&p.ws);
        let places = remote.locate(p, &mut index, &selected).map_err(to_anyhow)?;
        Ok(places
            .into_iter()
            .filter_map(|(i, place)| match place {
                pipeline_remote::Place::Remote(m) => {
                    Some((p.plan.instances[i].name.clone(), m.manifest.fingerprint))
                }
                _ => None,
            })
            .collect())
    })();
    let found = found.unwrap_or_else(|e| {
        let e = pipeline_engine::error::anyhow_text(&e);
        tracing::warn!("the remote could not be asked: {e}");
        HashMap::new()
    });
    for o in stages.iter_mut() {
        if let Some(fp) = found.get(&o.instance) {
            o.fingerprint = Some(fp.clone());
        }
    }
    Ok(found.into_keys().collect())
}

pub fn gc(global: &Global, args: &GcRemote, dry_run: bool, json: bool) -> Result<ExitCode> {
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
        let path = crate::sanitize::line(path);
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
