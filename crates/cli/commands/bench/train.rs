//! `pipeline bench train`: training steps (forward, backward, LAMB) of
//! `AlbertForPreTraining` on synthetic batches ([`stage_pretrain::api::bench_train`]): tokens/s,
//! model FLOP/s (MFU on a GPU), peak RSS.

use std::process::ExitCode;

use anyhow::Result;
use serde_json::json;
use stage_pretrain::api::{StepPhases, TrainBench, bench_train};

use super::{BenchArgs, report, spec};

/// `pipeline bench train`: training steps of `AlbertForPreTraining`.
pub fn train(args: &BenchArgs) -> Result<ExitCode> {
    let r = bench_train(&spec(args)?)?;
    report(&args.of, train_json(args, &r), train_line(args, &r))
}

fn train_json(args: &BenchArgs, r: &TrainBench) -> serde_json::Value {
    let (c, h, t) = (&r.config, &r.host, &r.timing);
    json!({
        "bench": "train", "model": args.of.model, "share_type": c.share_type.name(),
        "device": h.device, "device_model": h.device_model, "precision": args.of.precision, "batch": args.batch, "seq": args.of.seq,
        "tokens_per_row": args.tokens.unwrap_or(args.of.seq), "masked": args.of.masked, "steps": args.steps, "runs": args.runs,
        "threads": h.threads,
        "seconds_per_step": r.seconds_per_step, "runs_seconds_per_step": t.per_step,
        "tokens_per_s": r.tokens_per_s, "model_tflops_per_s": r.model_tflops_per_s,
        "mfu": r.mfu, "peak_rss_bytes": r.peak_rss_bytes, "parameters": c.parameter_count().total,
        "cpu_seconds_per_wall_second": t.cpu_per_wall, "page_faults": t.page_faults,
        "data_parallel_workers": r.data_parallel_workers,
        "isa": h.isa, "isa_host": h.isa_host,
        "cuda_syncs_per_step": r.syncs_per_step, "cuda_first_sync_site": r.first_sync_site,
        "torch_ops_per_step": r.ops_per_step, "trace": args.trace,
        "phases": r.phases.map(|p| json!({
            "forward_s": p.forward.whole, "backward_s": p.backward(), "optimizer_s": p.optimizer(),
            "step_s": p.step.whole, "repetitions": args.steps,
            "forward_host_s": p.forward.host, "backward_host_s": p.backward_host(),
            "optimizer_host_s": p.optimizer_host(), "step_host_s": p.step.host,
        })),
    })
}

/// `; phases …` with `--phases`, for the human line: each part waited for, and in brackets
/// the host's own share (until the call returned).
fn phases_text(p: Option<StepPhases>) -> String {
    p.map(|p| {
        format!(
            "; phases, each waited for (the host's own in brackets): forward {:.4} s ({:.4}), \
             backward {:.4} s ({:.4}), clipping and optimiser {:.4} s ({:.4}) of a {:.4} s \
             step ({:.4})",
            p.forward.whole,
            p.forward.host,
            p.backward(),
            p.backward_host(),
            p.optimizer(),
            p.optimizer_host(),
            p.step.whole,
            p.step.host
        )
    })
    .unwrap_or_default()
}

fn train_line(args: &BenchArgs, r: &TrainBench) -> String {
    format!(
        "train {} (share {}) on {}: batch {} × seq {}{} ({} masked): {:.3} s/step (median of {} runs × {} steps) = {:.0} tokens/s, {:.3} model TFLOP/s{}, {:.2} CPU-s per wall-s, peak RSS {:.2} GB{}{}{}",
        args.of.model,
        r.config.share_type,
        r.host.device,
        args.batch,
        args.of.seq,
        super::padding(args),
        args.of.masked,
        r.seconds_per_step,
        args.runs,
        args.steps,
        r.tokens_per_s,
        r.model_tflops_per_s,
        r.mfu
            .map(|m| format!(" (MFU {:.1}%)", m * 100.0))
            .unwrap_or_default(),
        r.timing.cpu_per_wall,
        r.peak_rss_bytes as f64 / 1e9,
        phases_text(r.phases),
        super::syncs_text(r.syncs_per_step, r.first_sync_site.as_deref()),
        super::ops_text(r.ops_per_step.as_ref())
    )
}
