//! `pipeline bench train|infer|finetune`: throughput of the model on synthetic batches of fixed
//! shape, comparable with `benches/hf_baseline.py` (same configs, batch, sequence length, masked
//! positions and FLOPs formula). Timings are medians over runs after warm-up steps; peak RSS
//! is the process's high-water mark.
//!
//! The benchmarks themselves are the stages' API ([`stage_pretrain::api`] for train and infer,
//! [`stage_finetune::api::bench`] for finetune); this module turns the flags into their
//! [`BenchSpec`] and prints what they measured, one line for people or one JSON object.

use std::num::NonZeroUsize;
use std::process::ExitCode;

use anyhow::{Result, bail};
use pipeline_albert::ShareType;
use pipeline_albert::device::DeviceChoice;
use pipeline_albert::model::MatmulPrecision;
use serde_json::json;
use stage_pretrain::api::{BenchSpec, InferBench, TrainBench, bench_infer, bench_train};

use crate::args::BenchArgs;

mod finetune;
pub use finetune::finetune;

/// The benchmark the flags describe: the shape flags at least 1 (a mistake in the command
/// line, exit 2, rather than a division by zero), the device and precision parsed.
fn spec(args: &BenchArgs) -> Result<BenchSpec> {
    let at_least_one = |flag: &str, value: usize| {
        NonZeroUsize::new(value).ok_or_else(|| {
            pipeline_engine::UserError::new(format!("{flag} must be at least 1"))
                .with_help("a benchmark needs at least one row, token, step and run")
        })
    };
    Ok(BenchSpec {
        batch: at_least_one("--batch", args.batch)?,
        seq: at_least_one("--seq", args.seq)?,
        steps: at_least_one("--steps", args.steps)?,
        runs: at_least_one("--runs", args.runs)?,
        model: args.model.clone(),
        share_type: args
            .share_type
            .as_deref()
            .map(ShareType::parse)
            .transpose()?,
        vocab_size: args.vocab_size,
        masked: args.masked,
        warmup: args.warmup,
        device: DeviceChoice::parse(&args.device)?,
        precision: match args.precision.as_str() {
            "fp32" => MatmulPrecision::Fp32,
            "bf16" => MatmulPrecision::Bf16,
            other => bail!("--precision {other}: expected fp32 or bf16"),
        },
        peak_tflops: args.peak_tflops,
        split: args.split,
    })
}

/// The JSON object with `--json`, else the human line.
fn report(args: &BenchArgs, value: serde_json::Value, human: String) -> Result<ExitCode> {
    if args.json {
        println!("{}", serde_json::to_string(&value)?);
    } else {
        println!("{human}");
    }
    Ok(ExitCode::SUCCESS)
}

/// `pipeline bench train`: training steps of `AlbertForPreTraining`.
pub fn train(args: &BenchArgs) -> Result<ExitCode> {
    let r = bench_train(&spec(args)?)?;
    report(args, train_json(args, &r), train_line(args, &r))
}

fn train_json(args: &BenchArgs, r: &TrainBench) -> serde_json::Value {
    let (c, h, t) = (&r.config, &r.host, &r.timing);
    json!({
        "bench": "train", "model": args.model, "share_type": c.share_type.name(),
        "device": h.device, "device_model": h.device_model, "precision": args.precision, "batch": args.batch, "seq": args.seq,
        "masked": args.masked, "steps": args.steps, "runs": args.runs,
        "threads": h.threads,
        "seconds_per_step": r.seconds_per_step, "runs_seconds_per_step": t.per_step,
        "tokens_per_s": r.tokens_per_s, "model_tflops_per_s": r.model_tflops_per_s,
        "mfu": r.mfu, "peak_rss_bytes": r.peak_rss_bytes, "parameters": c.parameter_count().total,
        "cpu_seconds_per_wall_second": t.cpu_per_wall, "page_faults": t.page_faults,
        "data_parallel_workers": r.data_parallel_workers,
        "isa": h.isa, "isa_host": h.isa_host,
    })
}

fn train_line(args: &BenchArgs, r: &TrainBench) -> String {
    format!(
        "train {} (share {}) on {}: batch {} × seq {} ({} masked): {:.3} s/step (median of {} runs × {} steps) = {:.0} tokens/s, {:.3} model TFLOP/s{}, {:.2} CPU-s per wall-s, peak RSS {:.2} GB",
        args.model,
        r.config.share_type,
        r.host.device,
        args.batch,
        args.seq,
        args.masked,
        r.seconds_per_step,
        args.runs,
        args.steps,
        r.tokens_per_s,
        r.model_tflops_per_s,
        r.mfu
            .map(|m| format!(" (MFU {:.1}%)", m * 100.0))
            .unwrap_or_default(),
        r.timing.cpu_per_wall,
        r.peak_rss_bytes as f64 / 1e9
    )
}

/// `pipeline bench infer`: forward passes of `AlbertModel`.
pub fn infer(args: &BenchArgs) -> Result<ExitCode> {
    let r = bench_infer(&spec(args)?)?;
    report(args, infer_json(args, &r), infer_line(args, &r))
}

fn infer_json(args: &BenchArgs, r: &InferBench) -> serde_json::Value {
    let (h, t) = (&r.host, &r.timing);
    json!({
        "bench": "infer", "model": args.model, "device": h.device, "device_model": h.device_model, "batch": args.batch,
        "seq": args.seq, "runs": args.runs, "batches_per_run": args.steps,
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
        "infer {} (AlbertModel forward) on {}: batch {} × seq {}: {:.3} s/batch (median of {} runs × {}) = {:.0} sentences/s, {:.3} model TFLOP/s, {:.2} CPU-s per wall-s, peak RSS {:.2} GB",
        args.model,
        r.host.device,
        args.batch,
        args.seq,
        r.seconds_per_batch,
        args.runs,
        args.steps,
        r.sentences_per_s,
        r.model_tflops_per_s,
        r.timing.cpu_per_wall,
        r.peak_rss_bytes as f64 / 1e9
    )
}
