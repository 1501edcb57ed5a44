//! `pipeline bench infer`: forward passes of `AlbertModel` on synthetic batches
//! ([`stage_pretrain::api::bench_infer`]): sentences/s, peak RSS.

use std::process::ExitCode;

use anyhow::Result;
use serde_json::json;
use stage_pretrain::api::{InferBench, bench_infer};

use super::{BenchArgs, report, spec};

/// `pipeline bench infer`: forward passes of `AlbertModel`.
pub fn infer(args: &BenchArgs) -> Result<ExitCode> {
    super::refuse_train_only(args, "infer")?;
    let r = bench_infer(&spec(args)?)?;
    report(&args.of, infer_json(args, &r), infer_line(args, &r))
}

fn infer_json(args: &BenchArgs, r: &InferBench) -> serde_json::Value {
    let (h, t) = (&r.host, &r.timing);
    json!({
        "bench": "infer", "model": args.of.model, "device": h.device, "device_model": h.device_model, "batch": args.batch,
        "seq": args.of.seq, "tokens_per_row": args.tokens.unwrap_or(args.of.seq), "runs": args.runs, "batches_per_run": args.steps,
        "threads": h.threads,
        "seconds_per_batch": r.seconds_per_batch, "runs_seconds_per_batch": t.per_step,
        "sentences_per_s": r.sentences_per_s, "peak_rss_bytes": r.peak_rss_bytes,
        "model_tflops_per_s": r.model_tflops_per_s,
        "cpu_seconds_per_wall_second": t.cpu_per_wall, "page_faults": t.page_faults,
        "chunks": r.chunks,
        "isa": h.isa, "isa_host": h.isa_host,
    })
}

fn infer_line(args: &BenchArgs, r: &InferBench) -> String {
    format!(
        "infer {} (AlbertModel forward) on {}: batch {} × seq {}{}: {:.3} s/batch (median of {} runs × {}) = {:.0} sentences/s, {:.3} model TFLOP/s, {:.2} CPU-s per wall-s, peak RSS {:.2} GB",
        args.of.model,
        r.host.device,
        args.batch,
        args.of.seq,
        super::padding(args),
        r.seconds_per_batch,
        args.runs,
        args.steps,
        r.sentences_per_s,
        r.model_tflops_per_s,
        r.timing.cpu_per_wall,
        r.peak_rss_bytes as f64 / 1e9
    )
}
