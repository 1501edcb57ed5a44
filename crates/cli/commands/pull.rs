//! `pipeline pull`: the targets' artifacts at the current fingerprints brought from a remote
//! store into the local one (and its index), under the workspace's lock.

use std::process::ExitCode;
use std::time::Instant;

use anyhow::Result;
use pipeline_engine::index::Index;
use serde_json::json;

use crate::global::{Global, load};
use crate::remote::{TransferArgs, progress, required, to_anyhow};

/// Brings what the remote holds of the targets and records it in the local index.
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
