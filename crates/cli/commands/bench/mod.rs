//! `pipeline bench train|infer|finetune|maxbatch`: throughput of the model on synthetic batches
//! of fixed shape, and the largest training batch a device holds, comparable with
//! `benches/hf_baseline.py` (same configs, batch, sequence length, masked positions, FLOPs
//! formula and batch search). Timings are medians over runs after warm-up steps; peak RSS is
//! the process's high-water mark.
//!
//! The benchmarks themselves are the stages' API ([`stage_pretrain::api`] for train, infer and
//! maxbatch's search, [`stage_finetune::api::bench`] for finetune); this module holds the flags
//! they share, turns them into their [`BenchSpec`] and prints what they measured, one line for
//! people or one JSON object; each benchmark is a module of its own.

use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, Subcommand};
use pipeline_albert::ShareType;
use pipeline_albert::device::DeviceChoice;
use pipeline_albert::op_tally::most_called;
use stage_pretrain::api::BenchSpec;

pub mod finetune;
pub mod infer;
pub mod maxbatch;
pub mod train;

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Training steps (forward, backward, LAMB) of AlbertForPreTraining: tokens/s, model
    /// FLOP/s (MFU on a GPU), peak RSS.
    Train(BenchArgs),
    /// AlbertModel forward passes: sentences/s, peak RSS.
    Infer(BenchArgs),
    /// Fine-tuning steps (AdamW) of the span-extraction head (AlbertForQuestionAnswering)
    /// beside the sequence-classification head at the same shapes, alternately: tokens/s of
    /// each and the median of the per-round ratios (--masked is not used).
    Finetune(BenchArgs),
    /// The largest training batch (AlbertForPreTraining, LAMB, two steps a size) whose steps
    /// fit the device's memory: doubling from 1 to the first size that runs out of memory,
    /// then halving the gap to --granularity, each size `bench train` in a process of its own
    /// (a CPU needs --max-batch). The search `benches/hf_baseline.py maxbatch` runs for
    /// transformers.
    Maxbatch(MaxBatchArgs),
}

/// `bench maxbatch`'s flags.
#[derive(Debug, Args)]
pub struct MaxBatchArgs {
    #[command(flatten)]
    pub of: ModelArgs,
    /// The most rows tried (default on a GPU: 16384; a CPU needs one).
    #[arg(long, value_name = "N")]
    pub max_batch: Option<usize>,
    /// Stop when the largest size that fits and the smallest that does not are at most this
    /// many rows apart.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub granularity: usize,
}

/// What every benchmark takes: the model, the rows' length, the device and precision, and
/// the output's form.
#[derive(Debug, Args)]
pub struct ModelArgs {
    /// An albert_zh size (tiny, small, base, large, xlarge, xxlarge) or a config JSON.
    #[arg(long, default_value = "tiny")]
    pub model: String,
    /// Override the config's share_type (all, attention, ffn, none).
    #[arg(long)]
    pub share_type: Option<String>,
    /// Override the config's vocab_size.
    #[arg(long)]
    pub vocab_size: Option<usize>,
    #[arg(long, default_value_t = 128)]
    pub seq: usize,
    /// Masked positions per row (train and maxbatch).
    #[arg(long, default_value_t = 20)]
    pub masked: usize,
    /// auto, cpu, flex, tch-cpu or cuda:N.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// fp32, or bf16 mixed precision (libtorch devices: cuda:N, tch-cpu).
    #[arg(long, default_value = "fp32")]
    pub precision: String,
    /// One JSON object on stdout.
    #[arg(long)]
    pub json: bool,
}

/// The timed benchmarks' flags (train, infer, finetune).
#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(flatten)]
    pub of: ModelArgs,
    #[arg(long, default_value_t = 32)]
    pub batch: usize,
    /// Real tokens per row, the rest padding (attention mask 0), as short texts padded to
    /// --seq in fine-tuning and predict batches; default: every row full. tokens/s still
    /// counts every position (train and infer only).
    #[arg(long, value_name = "N")]
    pub tokens: Option<usize>,
    /// Steps (or batches) timed per run.
    #[arg(long, default_value_t = 10)]
    pub steps: usize,
    /// Timed runs; the median is reported.
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
    /// Untimed steps first.
    #[arg(long, default_value_t = 2)]
    pub warmup: usize,
    /// The GPU's dense peak in TFLOP/s for MFU (H100/H200 bf16: 989).
    #[arg(long, default_value_t = 989.0)]
    pub peak_tflops: f64,
    /// Infer only: run the batch as one chunk per core in parallel (what `pipeline predict`
    /// does on a CPU).
    #[arg(long)]
    pub split: bool,
    /// Train only: after the timed runs, time a step's phases apart, the device synchronised
    /// after each: the forward pass, forward and backward, the whole step. The differences are
    /// the backward's and the optimiser's share, where a GPU's step time goes.
    #[arg(long)]
    pub phases: bool,
    /// Train and finetune only: count the times the timed steps make the host wait for the
    /// CUDA device (torch's sync debug mode: a value read back, a copy from pageable memory, a
    /// synchronise), the runs' own read-backs of the losses left out. A step that waits cannot
    /// be queued while the device still runs the one before; 0 a step is the aim. The first
    /// sync's call stack is printed under the line (`cuda_first_sync_site` with --json). Needs
    /// the `tch` build; on a CPU device the count is 0.
    #[arg(long)]
    pub count_syncs: bool,
    /// Train and finetune (the classification head's step): after the timed runs, count the
    /// libtorch operators one more step calls, each under the path of the operators it was
    /// called inside (`aten::to > aten::_to_copy > aten::copy_`) with its first tensor's type
    /// and shape: on a GPU nearly every operator that is not a view is a kernel, and this says
    /// which call made a copy, a cast or an add.
    /// The 40 commonest paths are printed under the line (`torch_ops_per_step`, every path, with
    /// --json). Needs the `tch` build; runs on libtorch's CPU as on CUDA.
    #[arg(long)]
    pub count_ops: bool,
    /// Train only, on a CUDA device: run the timed steps inside a profiler range
    /// (`cudaProfilerStart`/`Stop`), so that `ncu --profile-from-start off` or `nsys profile
    /// --capture-range=cudaProfilerApi` records their kernels alone, not the model's building
    /// or the warm-up's.
    #[arg(long)]
    pub cuda_profiler_range: bool,
    /// Train only: after the timed runs, record a forward pass, a forward and backward, and two
    /// whole steps (each waited for, in ranges named `pipeline::forward`,
    /// `pipeline::forward_backward` and `pipeline::step`) with torch's own profiler, and save
    /// its trace to FILE: Chrome's JSON trace format (Perfetto opens it), every libtorch
    /// operator's span on the host and, on CUDA, every kernel's on the device.
    /// `benches/trace_summary.py FILE` says where each range's host time went: in operators,
    /// or between them. Needs the `tch` build.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<std::path::PathBuf>,
}

/// Runs the benchmark `cmd` names.
pub fn bench(cmd: &BenchCommand) -> Result<ExitCode> {
    match cmd {
        BenchCommand::Train(args) => train::train(args),
        BenchCommand::Infer(args) => infer::infer(args),
        BenchCommand::Finetune(args) => finetune::finetune(args),
        BenchCommand::Maxbatch(args) => maxbatch::maxbatch(args),
    }
}

/// The benchmark the flags describe: the shape flags at least 1 (a mistake in the command
/// line, exit 2, rather than a division by zero), the device and precision parsed.
fn spec(args: &BenchArgs) -> Result<BenchSpec> {
    Ok(BenchSpec {
        batch: at_least_one("--batch", args.batch)?,
        real_tokens: args
            .tokens
            .map(|t| at_least_one("--tokens", t))
            .transpose()?,
        steps: at_least_one("--steps", args.steps)?,
        runs: at_least_one("--runs", args.runs)?,
        warmup: args.warmup,
        peak_tflops: args.peak_tflops,
        split: args.split,
        phases: args.phases,
        count_syncs: args.count_syncs,
        count_ops: args.count_ops,
        profile_range: args.cuda_profiler_range,
        trace: args.trace.clone(),
        ..model_spec(&args.of)?
    })
}

/// The spec of the model flags alone: one row, one step, one run (what `bench maxbatch`
/// does not take from the spec).
fn model_spec(args: &ModelArgs) -> Result<BenchSpec> {
    Ok(BenchSpec {
        batch: NonZeroUsize::MIN,
        seq: at_least_one("--seq", args.seq)?,
        real_tokens: None,
        steps: NonZeroUsize::MIN,
        runs: NonZeroUsize::MIN,
        model: args.model.clone(),
        share_type: args
            .share_type
            .as_deref()
            .map(ShareType::parse)
            .transpose()?,
        vocab_size: args.vocab_size,
        masked: args.masked,
        warmup: 0,
        device: DeviceChoice::parse(&args.device)
            .map_err(|e| pipeline_engine::UserError::new(format!("--device: {e}")))?,
        precision: args
            .precision
            .parse()
            .map_err(|e| pipeline_engine::UserError::new(format!("--{e}")))?,
        peak_tflops: 989.0,
        split: false,
        phases: false,
        count_syncs: false,
        count_ops: false,
        profile_range: false,
        trace: None,
    })
}

/// The paths `ops_text` prints, of the hundreds a step calls: enough to hold every copy, cast
/// and add of a `base` step's layers.
const OPS_SHOWN: usize = 40;

/// With `--count-ops`: the step's operator calls and its commonest call paths, one a line.
fn ops_text(ops: Option<&BTreeMap<String, u64>>) -> String {
    let Some(ops) = ops else {
        return String::new();
    };
    let calls: u64 = ops.values().sum();
    let mut text = format!(
        "; libtorch operators of one step: {calls} calls on {} paths, the {OPS_SHOWN} commonest:",
        ops.len()
    );
    for (path, n) in most_called(ops, OPS_SHOWN) {
        text.push_str(&format!("\n    {n:>6}  {path}"));
    }
    text
}

/// `value` of `flag`, which must be at least 1.
fn at_least_one(flag: &str, value: usize) -> Result<NonZeroUsize> {
    Ok(NonZeroUsize::new(value).ok_or_else(|| {
        pipeline_engine::UserError::new(format!("{flag} must be at least 1"))
            .with_help("a benchmark needs at least one row, token, step and run")
    })?)
}

/// `--phases`, `--cuda-profiler-range` or `--trace` given to a benchmark other than train, or
/// `--count-syncs` or `--count-ops` to one other than train and finetune (`bench`).
fn refuse_train_only(args: &BenchArgs, bench: &str) -> Result<()> {
    let (flag, what) = if args.phases {
        (
            "--phases",
            "it times a training step's forward, backward and optimiser apart",
        )
    } else if args.count_syncs && bench != "finetune" {
        (
            "--count-syncs",
            "it counts the times a training or fine-tuning step waits for the device",
        )
    } else if args.count_ops && bench != "finetune" {
        (
            "--count-ops",
            "it counts the libtorch operators a training or fine-tuning step calls",
        )
    } else if args.cuda_profiler_range {
        (
            "--cuda-profiler-range",
            "it puts a training benchmark's timed steps in a profiler range",
        )
    } else if args.trace.is_some() {
        (
            "--trace",
            "it records a training step's phases with torch's profiler",
        )
    } else {
        return Ok(());
    };
    let benches = if flag == "--count-syncs" || flag == "--count-ops" {
        "bench train and bench finetune"
    } else {
        "bench train"
    };
    Err(
        pipeline_engine::UserError::new(format!("{flag} is for {benches}, not bench {bench}"))
            .with_help(what)
            .into(),
    )
}

/// `; N CUDA synchronisations a step` with `--count-syncs`, and where the first came from,
/// for the human line of `bench train` and `bench finetune`.
fn syncs_text(per_step: Option<f64>, first_site: Option<&str>) -> String {
    let Some(n) = per_step else {
        return String::new();
    };
    match first_site {
        Some(site) => format!(
            "; {n:.2} CUDA synchronisations a step, the first called from:\n    {}",
            site.replace('\n', "\n    ")
        ),
        None => format!("; {n:.2} CUDA synchronisations a step"),
    }
}

/// ` (N real tokens)` with `--tokens N`, for the human line.
fn padding(args: &BenchArgs) -> String {
    args.tokens
        .map(|t| format!(" ({t} real tokens)"))
        .unwrap_or_default()
}

/// The JSON object with `--json`, else the human line.
fn report(args: &ModelArgs, value: serde_json::Value, human: String) -> Result<ExitCode> {
    if args.json {
        println!("{}", serde_json::to_string(&value)?);
    } else {
        println!("{human}");
    }
    Ok(ExitCode::SUCCESS)
}
