//! `pipeline bench finetune`: fine-tuning steps of the span-extraction head beside the
//! sequence-classification head at the same shapes, alternately, on synthetic rows
//! ([`stage_finetune::api::bench`]); the line also says when and at which commit it ran.

use std::process::ExitCode;

use anyhow::Result;
use serde_json::json;
use stage_finetune::api::bench::{FinetuneBench, bench_finetune};

use super::{BenchArgs, report, spec};

/// `pipeline bench finetune`: training tokens/s of the span-extraction head beside the
/// sequence-classification head's, same model, batch and sequence length, measured A B A B.
pub fn finetune(args: &BenchArgs) -> Result<ExitCode> {
    super::refuse_train_only(args, "finetune")?;
    if args.tokens.is_some() {
        // Fine-tuning pads a batch to its longest row, and the synthetic rows are all as long.
        return Err(
            pipeline_engine::UserError::new("--tokens is for bench train and infer")
                .with_help("bench finetune times full rows of --seq tokens")
                .into(),
        );
    }
    let r = bench_finetune(&spec(args)?)?;
    let date = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let commit = commit();
    let value = json!({
        "bench": "finetune", "model": args.of.model, "share_type": r.config.share_type.name(),
        "device": r.host.device, "batch": args.batch, "seq": args.of.seq, "steps": args.steps,
        "runs": args.runs, "warmup": args.warmup,
        "threads": r.host.threads,
        "classification_tokens_per_s": r.classification_tokens_per_s,
        "span_tokens_per_s": r.span_tokens_per_s,
        "runs_classification_tokens_per_s": r.runs_classification_tokens_per_s,
        "runs_span_tokens_per_s": r.runs_span_tokens_per_s,
        "span_over_classification": r.span_over_classification,
        "runs_span_over_classification": r.runs_span_over_classification,
        "order": "alternating, classification then span in each round",
        "peak_rss_bytes": r.peak_rss_bytes, "date": date, "commit": commit,
        "data_parallel_workers": r.data_parallel_workers,
        "cuda_syncs_per_step": r.syncs_per_step, "cuda_first_sync_site": r.first_sync_site,
        "torch_ops_per_step": r.ops_per_step,
    });
    report(&args.of, value, human(args, &r, &date, commit.as_deref()))
}

/// The human line of `bench finetune`.
fn human(args: &BenchArgs, r: &FinetuneBench, date: &str, commit: Option<&str>) -> String {
    format!(
        "finetune {} on {}: batch {} × seq {}: classification {:.0} tokens/s, span extraction \
         {:.0} tokens/s (medians of {} runs × {} steps, alternating); span / classification \
         {:.3} (median of the per-round ratios), peak RSS {:.2} GB; {date}{}{}{}",
        args.of.model,
        r.host.device,
        args.batch,
        args.of.seq,
        r.classification_tokens_per_s,
        r.span_tokens_per_s,
        args.runs,
        args.steps,
        r.span_over_classification,
        r.peak_rss_bytes as f64 / 1e9,
        commit.map(|c| format!(", commit {c}")).unwrap_or_default(),
        super::syncs_text(r.syncs_per_step, r.first_sync_site.as_deref()),
        super::ops_text(r.ops_per_step.as_ref())
    )
}

/// The commit of the working directory (`git rev-parse --short HEAD`), when there is one.
fn commit() -> Option<String> {
    let out = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}
