//! `pipeline bench maxbatch`: the largest training batch of `AlbertForPreTraining` whose steps
//! fit the device's memory, one JSON object with the keys of `benches/hf_baseline.py
//! maxbatch`'s, so that the report sets the two side by side.
//!
//! The search is [`stage_pretrain::api::largest_fitting`] (doubling, then halving the gap);
//! each size it tries is `pipeline bench train` with two steps in a process of its own, which
//! starts from an empty device as `hf_baseline.py` gets with `torch.cuda.empty_cache()`. Why
//! not in this process, catching the out-of-memory error as `batch_size: auto` does for its
//! powers of two: a caught failure left the process without the failed step's memory and, on
//! the same thread, unable to run torch's backward again (measured on `tch-cpu` under `ulimit
//! -v`, `pipeline_albert::memory` says how). `unless_out_of_memory` now recovers from both on
//! libtorch's CPU; a measurement that probes up to a dozen failures should not depend on that
//! holding on every device, and a process per size costs only its start.

use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use pipeline_albert::bench::BenchHost;
use pipeline_albert::memory::is_out_of_memory;
use serde_json::json;
use stage_pretrain::api::{Found, largest_fitting};

use super::{MaxBatchArgs, ModelArgs, at_least_one, model_spec, report};

/// The cap on a GPU when `--max-batch` is not given: `hf_baseline.py maxbatch`'s.
const GPU_CAP: usize = 1 << 14;

/// `pipeline bench maxbatch`: the flags checked, the search, its line.
pub fn maxbatch(args: &MaxBatchArgs) -> Result<ExitCode> {
    let spec = model_spec(&args.of)?;
    let config = spec.model_config()?;
    let dev = spec.resolve_device()?;
    spec.precision_on(&dev)?;
    let granularity = at_least_one("--granularity", args.granularity)?.get();
    let cap = match args.max_batch {
        Some(n) => at_least_one("--max-batch", n)?.get(),
        None if dev.is_gpu => GPU_CAP,
        None => {
            return Err(pipeline_engine::UserError::new(format!(
                "bench maxbatch on {} (a CPU) would try sizes until the host's memory ran out",
                dev.name
            ))
            .with_help("give --max-batch N to bound the search")
            .into());
        }
    };
    let start = Instant::now();
    let found = largest_fitting(cap, granularity, |rows| fits(&args.of, rows))?;
    let host = BenchHost::of(&dev);
    let searched = Searched {
        found: &found,
        cap,
        seconds: start.elapsed().as_secs_f64(),
        share: config.share_type.name(),
        device: host.device_model.as_deref().unwrap_or(&host.device),
    };
    report(
        &args.of,
        maxbatch_json(args, &searched, &host),
        maxbatch_line(args, &searched),
    )
}

/// Whether two training steps of `rows` rows fit: `pipeline bench train` (one warm-up step,
/// one timed) in a child process. A child that fails for another reason than memory is an
/// error, not a size that does not fit.
fn fits(of: &ModelArgs, rows: usize) -> Result<bool> {
    let exe = std::env::current_exe().context("finding this program to run its probes")?;
    let mut cmd = Command::new(exe);
    cmd.args([
        "bench", "train", "--steps", "1", "--runs", "1", "--warmup", "1",
    ])
    .args(["--model", &of.model, "--device", &of.device])
    .args(["--precision", &of.precision])
    .args([
        "--seq",
        &of.seq.to_string(),
        "--masked",
        &of.masked.to_string(),
    ])
    .args(["--batch", &rows.to_string()]);
    if let Some(share) = &of.share_type {
        cmd.args(["--share-type", share]);
    }
    if let Some(v) = of.vocab_size {
        cmd.args(["--vocab-size", &v.to_string()]);
    }
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .context("starting a probe (pipeline bench train)")?;
    if out.status.success() {
        tracing::info!(target: "bench", "maxbatch: {rows} rows fit");
        return Ok(true);
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    if is_out_of_memory(&stderr) {
        tracing::info!(target: "bench", "maxbatch: {rows} rows ran out of memory");
        return Ok(false);
    }
    let tail: String = stderr.lines().rev().take(6).collect::<Vec<_>>().join("\n");
    bail!(
        "the probe of {rows} rows (pipeline bench train --batch {rows}) failed ({}), and not \
         for lack of memory:\n{tail}",
        out.status
    )
}

/// What the search found, and what its line says beside it.
struct Searched<'a> {
    found: &'a Found,
    cap: usize,
    seconds: f64,
    share: &'a str,
    device: &'a str,
}

fn maxbatch_json(args: &MaxBatchArgs, s: &Searched, host: &BenchHost) -> serde_json::Value {
    let tried: serde_json::Map<String, serde_json::Value> = s
        .found
        .tried
        .iter()
        .map(|t| (t.rows.to_string(), t.fits.into()))
        .collect();
    json!({
        "bench": "maxbatch", "model": args.of.model, "share_type": s.share,
        "seq": args.of.seq, "masked": args.of.masked, "device": host.device,
        "device_model": host.device_model, "precision": args.of.precision,
        "optimizer": "LAMB", "max_batch": s.found.rows, "first_oom": s.found.first_oom,
        "capped_at": s.found.first_oom.is_none().then_some(s.cap),
        "granularity": args.granularity, "tried": tried, "seconds": s.seconds,
    })
}

fn maxbatch_line(args: &MaxBatchArgs, s: &Searched) -> String {
    let end = match s.found.first_oom {
        Some(oom) => format!("{oom} ran out of memory"),
        None => format!("nothing up to the cap of {} ran out", s.cap),
    };
    format!(
        "maxbatch {} (share {}) on {}, seq {} ({} masked), {}: {} rows fit ({end}; {} sizes \
         tried, each in a process of its own, to within {} rows, in {:.1} s)",
        args.of.model,
        s.share,
        s.device,
        args.of.seq,
        args.of.masked,
        args.of.precision,
        s.found.rows,
        s.found.tried.len(),
        args.granularity,
        s.seconds,
    )
}
