//! `pipeline bench finetune`: fine-tuning steps of the span-extraction head beside the
//! sequence-classification head at the same shapes, alternately, on synthetic rows.

use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Result, bail};
use burn::tensor::Device;
use pipeline_albert::AlbertConfig;
use pipeline_albert::train::{OptimConfig, OptimizerKind};
use pipeline_shards::rng::SplitMix64;
use serde_json::json;
use stage_finetune::encode::Encoded;
use stage_finetune::task_model::TaskModel;
use stage_finetune::train::{FineTuner, Gold};

use super::{below, device, median, model_config, peak_rss, report, synthetic_batch};
use crate::args::BenchArgs;

/// One head of the fine-tuning benchmark: its tuner and the gold of the synthetic batch.
struct Head {
    name: &'static str,
    tuner: FineTuner,
    classes: Vec<usize>,
    spans: Vec<(usize, usize)>,
}

impl Head {
    fn step(&mut self, step: u64, rows: &[&[Encoded]]) -> Result<()> {
        let gold = if self.spans.is_empty() {
            Gold::Classes(&self.classes)
        } else {
            Gold::Spans(&self.spans)
        };
        let r = self
            .tuner
            .try_step(step, rows, gold)
            .map_err(|e| anyhow::anyhow!("{} step {step}: {e}", self.name))?;
        if !r.loss.is_finite() {
            bail!("{} step {step}: loss {}", self.name, r.loss);
        }
        Ok(())
    }
}

/// `batch` full rows of `seq` tokens, `[CLS] a [SEP] b [SEP]` shaped (token types 1 from the
/// middle), with random ids.
fn synthetic_rows(
    c: &AlbertConfig,
    batch: usize,
    seq: usize,
    rng: &mut SplitMix64,
) -> Vec<Encoded> {
    let b = synthetic_batch(c, batch, seq, 0, rng);
    b.input_ids
        .chunks(seq)
        .zip(b.token_type_ids.chunks(seq))
        .map(|(ids, types)| Encoded {
            ids: ids.iter().map(|&x| x as u32).collect(),
            types: types.iter().map(|&t| t as u8).collect(),
        })
        .collect()
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

/// `pipeline bench finetune`: training tokens/s of the span-extraction head beside the
/// sequence-classification head's, same model, batch and sequence length, measured A B A B.
pub fn finetune(args: &BenchArgs) -> Result<ExitCode> {
    let c = model_config(args)?;
    let dev = device(args)?;
    let mut rng = SplitMix64::new(7);
    let rows = synthetic_rows(&c, args.batch, args.seq, &mut rng);
    let batch: Vec<&[Encoded]> = rows.iter().map(std::slice::from_ref).collect();
    let mut heads = finetune_heads(&c, args, &dev.device.clone().autodiff(), &mut rng);
    let timing = time_heads(&mut heads, args, &batch)?;
    let workers = heads[0].tuner.parallel.workers();
    let (value, human) = finetune_report(args, &c, &dev.name, workers, &timing);
    report(args, value, human)
}

/// The two heads on one model config, each from the same seed, with the gold of the batch.
fn finetune_heads(
    c: &AlbertConfig,
    args: &BenchArgs,
    ad: &Device,
    rng: &mut SplitMix64,
) -> [Head; 2] {
    let optim = OptimConfig {
        optimizer: OptimizerKind::Adamw,
        learning_rate: 1e-4,
        weight_decay: 0.01,
        beta_1: 0.9,
        beta_2: 0.999,
        epsilon: 1e-8,
        warmup_steps: 0,
        total_steps: 1_000_000,
        max_grad_norm: 1.0,
    };
    let tuner = |model| FineTuner::new(model, optim.clone(), ad.clone(), c.hidden_size, false);
    ad.seed(1);
    let classify = TaskModel::Pair(pipeline_albert::AlbertForSequenceClassification::new(
        c, 2, 0.1, ad,
    ));
    ad.seed(1);
    let span = TaskModel::Span(pipeline_albert::AlbertForQuestionAnswering::new(c, ad));
    [
        Head {
            name: "classification",
            tuner: tuner(classify),
            classes: (0..args.batch).map(|_| below(rng, 2) as usize).collect(),
            spans: Vec::new(),
        },
        Head {
            name: "span",
            tuner: tuner(span),
            classes: Vec::new(),
            spans: (0..args.batch)
                .map(|_| {
                    let s = 1 + below(rng, (args.seq - 2).max(1) as u64) as usize;
                    (s, (s + 3).min(args.seq - 2).max(s))
                })
                .collect(),
        },
    ]
}

/// Tokens/s of each head in each round, and each round's span / classification ratio.
struct HeadTiming {
    rates: [Vec<f64>; 2],
    ratios: Vec<f64>,
}

/// The warmup steps, then `args.runs` rounds of `args.steps` steps per head, alternating.
fn time_heads(heads: &mut [Head; 2], args: &BenchArgs, batch: &[&[Encoded]]) -> Result<HeadTiming> {
    let mut step = 0u64;
    for h in heads.iter_mut() {
        for _ in 0..args.warmup {
            h.step(step, batch)?;
            step += 1;
        }
    }
    let tokens = (args.batch * args.seq) as f64;
    let (mut rates, mut ratios) = ([Vec::new(), Vec::new()], Vec::new());
    for _ in 0..args.runs {
        let mut round = [0.0; 2];
        for (k, h) in heads.iter_mut().enumerate() {
            let t0 = Instant::now();
            for _ in 0..args.steps {
                h.step(step, batch)?;
                step += 1;
            }
            round[k] = tokens * args.steps as f64 / t0.elapsed().as_secs_f64();
            rates[k].push(round[k]);
        }
        ratios.push(round[1] / round[0]);
    }
    Ok(HeadTiming { rates, ratios })
}

/// The JSON line and the human line of `bench finetune`.
fn finetune_report(
    args: &BenchArgs,
    c: &AlbertConfig,
    device: &str,
    workers: usize,
    t: &HeadTiming,
) -> (serde_json::Value, String) {
    let ratio = median(t.ratios.clone());
    let [cls, spn] = [median(t.rates[0].clone()), median(t.rates[1].clone())];
    let date = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let commit = commit();
    let value = json!({
        "bench": "finetune", "model": args.model, "share_type": c.share_type.name(),
        "device": device, "batch": args.batch, "seq": args.seq, "steps": args.steps,
        "runs": args.runs, "warmup": args.warmup,
        "threads": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        "classification_tokens_per_s": cls, "span_tokens_per_s": spn,
        "runs_classification_tokens_per_s": t.rates[0], "runs_span_tokens_per_s": t.rates[1],
        "span_over_classification": ratio, "runs_span_over_classification": t.ratios,
        "order": "alternating, classification then span in each round",
        "peak_rss_bytes": peak_rss(), "date": date, "commit": commit,
        "data_parallel_workers": workers,
    });
    let human = format!(
        "finetune {} on {}: batch {} × seq {}: classification {:.0} tokens/s, span extraction \
         {:.0} tokens/s (medians of {} runs × {} steps, alternating); span / classification \
         {:.3} (median of the per-round ratios), peak RSS {:.2} GB; {date}{}",
        args.model,
        device,
        args.batch,
        args.seq,
        cls,
        spn,
        args.runs,
        args.steps,
        ratio,
        peak_rss() as f64 / 1e9,
        commit
            .as_deref()
            .map(|c| format!(", commit {c}"))
            .unwrap_or_default()
    );
    (value, human)
}
