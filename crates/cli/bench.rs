//! `pipeline bench train|infer|finetune`: throughput of the model on synthetic batches of fixed
//! shape, comparable with `benches/hf_baseline.py` (same configs, batch, sequence length, masked
//! positions and FLOPs formula). Timings are medians over runs after warm-up steps; peak RSS
//! is the process's high-water mark.
//!
//! `finetune` times the finetune stage's own training step (`FineTuner`, AdamW, one
//! micro-batch per core) with a sequence-classification head and with the span-extraction head
//! (`AlbertForQuestionAnswering`) on the same batches, alternately (A B A B …: each round times
//! one run of each), and reports the median of the per-round ratios of their tokens/s, so that
//! a drift of the machine (another job, thermal) shows in both and cancels in the ratio.

use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Result, bail};
use pipeline_albert::cpu_level::CpuLevel;
use pipeline_albert::device::{DeviceChoice, ResolvedDevice, has_bf16, resolve};
use pipeline_albert::model::{AlbertInput, MatmulPrecision};
use pipeline_albert::parallel::DataParallel;
use pipeline_albert::train::{OptimConfig, OptimizerKind};
use pipeline_albert::{AlbertConfig, AlbertForPreTraining};
use pipeline_shards::Batch;
use pipeline_shards::rng::SplitMix64;
use serde_json::json;
use stage_pretrain::trainer::Trainer;

use crate::args::BenchArgs;

mod finetune;
pub use finetune::finetune;

fn model_config(args: &BenchArgs) -> Result<AlbertConfig> {
    for (flag, value) in [
        ("--batch", args.batch),
        ("--seq", args.seq),
        ("--steps", args.steps),
        ("--runs", args.runs),
    ] {
        if value == 0 {
            return Err(
                pipeline_engine::UserError::new(format!("{flag} must be at least 1"))
                    .with_help("a benchmark needs at least one row, token, step and run")
                    .into(),
            );
        }
    }
    let mut c = if args.model.contains('/') || args.model.ends_with(".json") {
        AlbertConfig::from_file(std::path::Path::new(&args.model))?
    } else {
        AlbertConfig::named(&args.model)?
    };
    if let Some(v) = args.vocab_size {
        c.vocab_size = v;
    }
    if let Some(s) = &args.share_type {
        c.share_type = pipeline_albert::ShareType::parse(s)?;
    }
    c.validate()?;
    if args.seq > c.max_position_embeddings {
        bail!(
            "--seq {} exceeds the model's {} positions",
            args.seq,
            c.max_position_embeddings
        );
    }
    Ok(c)
}

/// A number in `0..n` from `rng` by modulo, as these synthetic data were always drawn
/// (`SplitMix64::below`, Lemire's method, would draw other data).
fn below(rng: &mut SplitMix64, n: u64) -> u64 {
    rng.next_u64() % n
}

/// A full batch of `batch × seq` real tokens with `masked` distinct masked positions per row.
fn synthetic_batch(
    c: &AlbertConfig,
    batch: usize,
    seq: usize,
    masked: usize,
    rng: &mut SplitMix64,
) -> Batch {
    let v = c.vocab_size as u64;
    let mut input_ids = Vec::with_capacity(batch * seq);
    let mut token_type_ids = Vec::with_capacity(batch * seq);
    let mut masked_positions = Vec::with_capacity(batch * masked);
    let mut masked_ids = Vec::with_capacity(batch * masked);
    for _ in 0..batch {
        let half = seq / 2;
        for j in 0..seq {
            input_ids.push((5 + below(rng, v - 5)) as i64);
            token_type_ids.push(i64::from(j >= half));
        }
        let mut picked: Vec<i64> = Vec::with_capacity(masked);
        while picked.len() < masked.min(seq.saturating_sub(2)) {
            let p = 1 + below(rng, (seq - 2) as u64) as i64;
            if !picked.contains(&p) {
                picked.push(p);
            }
        }
        picked.sort_unstable();
        for p in picked {
            masked_positions.push(p);
            masked_ids.push((5 + below(rng, v - 5)) as i64);
        }
    }
    let m = masked_positions.len() / batch;
    Batch {
        batch_size: batch,
        seq_len: seq,
        max_predictions: m,
        input_ids,
        attention_mask: vec![1; batch * seq],
        token_type_ids,
        masked_weights: vec![1.0; batch * m],
        masked_positions,
        masked_ids,
        sentence_order_labels: (0..batch).map(|_| below(rng, 2) as i64).collect(),
        tokens: (batch * seq) as u64,
        predictions: (batch * m) as u64,
    }
}

/// CPU seconds (user + system, all threads) and minor page faults of this process so far.
fn cpu_usage() -> (f64, u64) {
    // SAFETY: getrusage writes into the struct it is given and nothing else.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return (f64::NAN, 0);
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    (secs(u.ru_utime) + secs(u.ru_stime), u.ru_minflt as u64)
}

/// How busy the cores were over a timed section: CPU seconds per wall second (2.0 = both
/// cores of a 2-core machine all the time), and the page faults taken meanwhile.
struct Busy {
    start: (f64, u64),
    wall: Instant,
}

impl Busy {
    fn start() -> Busy {
        Busy {
            start: cpu_usage(),
            wall: Instant::now(),
        }
    }

    fn stop(self) -> (f64, u64) {
        let (cpu, faults) = cpu_usage();
        let wall = self.wall.elapsed().as_secs_f64().max(1e-9);
        (
            (cpu - self.start.0) / wall,
            faults.saturating_sub(self.start.1),
        )
    }
}

/// The process's peak resident set size in bytes (Linux), or 0.
pub fn peak_rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn report(args: &BenchArgs, value: serde_json::Value, human: String) -> Result<ExitCode> {
    if args.json {
        println!("{}", serde_json::to_string(&value)?);
    } else {
        println!("{human}");
    }
    Ok(ExitCode::SUCCESS)
}

/// The device `--device` names.
fn device(args: &BenchArgs) -> Result<ResolvedDevice> {
    Ok(resolve(DeviceChoice::parse(&args.device)?)?)
}

/// What the timed runs measured: seconds per step of each run, and how busy the cores were.
struct Timing {
    per_step: Vec<f64>,
    cpu_per_wall: f64,
    page_faults: u64,
}

/// `args.runs` runs of `args.steps` calls of `step`, each run's seconds per call.
fn timed_runs(args: &BenchArgs, step: &mut dyn FnMut() -> Result<()>) -> Result<Timing> {
    let mut per_step = Vec::new();
    let busy = Busy::start();
    for _ in 0..args.runs {
        let t0 = Instant::now();
        for _ in 0..args.steps {
            step()?;
        }
        per_step.push(t0.elapsed().as_secs_f64() / args.steps as f64);
    }
    let (cpu_per_wall, page_faults) = busy.stop();
    Ok(Timing {
        per_step,
        cpu_per_wall,
        page_faults,
    })
}

/// `--precision` on the resolved device: bf16 only where the backend has bf16 products.
fn matmul_precision(args: &BenchArgs, dev: &ResolvedDevice) -> Result<MatmulPrecision> {
    Ok(match args.precision.as_str() {
        "fp32" => MatmulPrecision::Fp32,
        "bf16" if has_bf16(&dev.device) => MatmulPrecision::Bf16,
        "bf16" => bail!(
            "--precision bf16 needs a libtorch device (--device tch-cpu or cuda:N); {} has no \
             bf16 products",
            dev.name
        ),
        other => bail!("--precision {other}: expected fp32 or bf16"),
    })
}

/// The pretraining optimiser the bench steps with: LAMB at a constant rate (no warmup, a
/// schedule far longer than any bench), so every timed step does the same work.
fn pretrain_optim() -> OptimConfig {
    OptimConfig {
        optimizer: OptimizerKind::Lamb,
        learning_rate: 1e-4,
        weight_decay: 0.01,
        beta_1: 0.9,
        beta_2: 0.999,
        epsilon: 1e-6,
        warmup_steps: 0,
        total_steps: 1_000_000,
        max_grad_norm: 1.0,
    }
}

pub fn train(args: &BenchArgs) -> Result<ExitCode> {
    let c = model_config(args)?;
    let dev = device(args)?;
    let precision = matmul_precision(args, &dev)?;
    let ad = dev.device.clone().autodiff();
    ad.seed(1);
    let model = AlbertForPreTraining::new(&c, &ad).with_precision(precision);
    let mut trainer = Trainer::new(c.clone(), model, pretrain_optim(), ad);
    let mut rng = SplitMix64::new(7);
    let batch = synthetic_batch(&c, args.batch, args.seq, args.masked, &mut rng);
    let mut step = 0u64;
    for _ in 0..args.warmup {
        trainer
            .step(step, std::slice::from_ref(&batch))
            .map_err(|e| anyhow::anyhow!("warm-up step: {e}"))?;
        step += 1;
    }
    let mut queued = 0;
    let Timing {
        per_step,
        cpu_per_wall,
        page_faults,
    } = timed_runs(args, &mut || {
        // As the pretrain stage trains: steps are queued on the device and their losses read
        // back once, here at the end of each timed run (the stage: once per log line), so a
        // GPU is not made to wait for the host after every step and the run's time still
        // covers all of its work.
        trainer.enqueue(step, std::slice::from_ref(&batch));
        step += 1;
        queued += 1;
        if queued == args.steps {
            queued = 0;
            trainer
                .flush()
                .map_err(|e| anyhow::anyhow!("steps up to {step}: {e}"))?;
        }
        Ok(())
    })?;
    let s = median(per_step.clone());
    let tokens = (args.batch * args.seq) as f64;
    let flops = c.training_flops(args.batch, args.seq, args.masked);
    let mfu = dev.is_gpu.then(|| flops / s / (args.peak_tflops * 1e12));
    let rss = peak_rss();
    let value = json!({
        "bench": "train", "model": args.model, "share_type": c.share_type.name(),
        "device": dev.name, "device_model": dev.model, "precision": args.precision, "batch": args.batch, "seq": args.seq,
        "masked": args.masked, "steps": args.steps, "runs": args.runs,
        "threads": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        "seconds_per_step": s, "runs_seconds_per_step": per_step,
        "tokens_per_s": tokens / s, "model_tflops_per_s": flops / s / 1e12,
        "mfu": mfu, "peak_rss_bytes": rss, "parameters": c.parameter_count().total,
        "cpu_seconds_per_wall_second": cpu_per_wall, "page_faults": page_faults,
        "data_parallel_workers": trainer.parallel.workers(),
        // The vector level of our CPU kernels, and the host's best (burn's matrix products
        // use the host's best whatever the level): rows from different hosts stay apart.
        "isa": (!dev.is_gpu).then(|| CpuLevel::active().name()),
        "isa_host": (!dev.is_gpu).then(|| CpuLevel::detected().name()),
    });
    let human = format!(
        "train {} (share {}) on {}: batch {} × seq {} ({} masked): {:.3} s/step (median of {} runs × {} steps) = {:.0} tokens/s, {:.3} model TFLOP/s{}, {:.2} CPU-s per wall-s, peak RSS {:.2} GB",
        args.model,
        c.share_type,
        dev.name,
        args.batch,
        args.seq,
        args.masked,
        s,
        args.runs,
        args.steps,
        tokens / s,
        flops / s / 1e12,
        mfu.map(|m| format!(" (MFU {:.1}%)", m * 100.0))
            .unwrap_or_default(),
        cpu_per_wall,
        rss as f64 / 1e9
    );
    report(args, value, human)
}

pub fn infer(args: &BenchArgs) -> Result<ExitCode> {
    let c = model_config(args)?;
    let dev = device(args)?;
    dev.device.seed(1);
    let model = pipeline_albert::Albert::new(&c, &dev.device);
    let mut rng = SplitMix64::new(7);
    let b = synthetic_batch(&c, args.batch, args.seq, 0, &mut rng);
    let input = AlbertInput::from_rows(
        b.batch_size,
        b.seq_len,
        b.input_ids.clone(),
        b.token_type_ids.clone(),
        b.attention_mask.clone(),
        &dev.device,
    );
    let chunks = if args.split {
        rayon::current_num_threads().min(args.batch)
    } else {
        1
    };
    let parts = split_rows(&input, args.batch, chunks);
    // One chunk per core, each on its own single-threaded worker (what `predict` does).
    let workers = DataParallel::new(chunks);
    let run_once = || {
        workers.map(parts.len(), |k| {
            let out = model.forward(&parts[k]);
            // Reading a value forces the computation on lazy backends.
            out.pooler_output.sum().into_scalar::<f32>()
        });
    };
    for _ in 0..args.warmup {
        run_once();
    }
    let Timing {
        per_step: per_batch,
        cpu_per_wall,
        page_faults,
    } = timed_runs(args, &mut || {
        run_once();
        Ok(())
    })?;
    let s = median(per_batch.clone());
    let flops = c.inference_flops(args.batch, args.seq);
    let rss = peak_rss();
    let value = json!({
        "bench": "infer", "model": args.model, "device": dev.name, "device_model": dev.model, "batch": args.batch,
        "seq": args.seq, "runs": args.runs, "batches_per_run": args.steps,
        "threads": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        "seconds_per_batch": s, "runs_seconds_per_batch": per_batch,
        "sentences_per_s": args.batch as f64 / s, "peak_rss_bytes": rss,
        "model_tflops_per_s": flops / s / 1e12,
        "cpu_seconds_per_wall_second": cpu_per_wall, "page_faults": page_faults,
        "chunks": chunks,
        // The vector level of our CPU kernels, and the host's best (burn's matrix products
        // use the host's best whatever the level): rows from different hosts stay apart.
        "isa": (!dev.is_gpu).then(|| CpuLevel::active().name()),
        "isa_host": (!dev.is_gpu).then(|| CpuLevel::detected().name()),
    });
    let human = format!(
        "infer {} (AlbertModel forward) on {}: batch {} × seq {}: {:.3} s/batch (median of {} runs × {}) = {:.0} sentences/s, {:.3} model TFLOP/s, {:.2} CPU-s per wall-s, peak RSS {:.2} GB",
        args.model,
        dev.name,
        args.batch,
        args.seq,
        s,
        args.runs,
        args.steps,
        args.batch as f64 / s,
        flops / s / 1e12,
        cpu_per_wall,
        rss as f64 / 1e9
    );
    report(args, value, human)
}

/// `input`'s `batch` rows in `chunks` nearly equal parts.
fn split_rows(input: &AlbertInput, batch: usize, chunks: usize) -> Vec<AlbertInput> {
    (0..chunks)
        .map(|k| {
            let lo = k * batch / chunks;
            let hi = (k + 1) * batch / chunks;
            AlbertInput {
                input_ids: input.input_ids.clone().narrow(0, lo, hi - lo),
                token_type_ids: input.token_type_ids.clone().narrow(0, lo, hi - lo),
                attention_mask: input.attention_mask.clone().narrow(0, lo, hi - lo),
            }
        })
        .collect()
}
