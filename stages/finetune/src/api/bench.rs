//! Timing fine-tuning steps on synthetic batches (`pipeline bench finetune`): the stage's own
//! training step ([`FineTuner`], AdamW, one micro-batch per core on a CPU) with the
//! sequence-classification head and with the span-extraction head (`AlbertForQuestionAnswering`)
//! on the same rows, alternately (A B A B …: each round times one run of each), so that a drift
//! of the machine (another job, thermal) shows in both and cancels in their ratio.
//!
//! The encoder runs in [`BenchSpec::precision`] (bf16 on libtorch devices only), as the stage's
//! `precision` param has it; [`BenchSpec::masked`] and [`BenchSpec::split`] are not used.

use std::collections::BTreeMap;
use std::time::Instant;

use burn::tensor::Device;
use pipeline_albert::bench::{BenchHost, median, peak_rss};
use pipeline_albert::cuda_sync::SyncTally;
use pipeline_albert::model::MatmulPrecision;
use pipeline_albert::train::{OptimConfig, OptimizerKind};
use pipeline_albert::{AlbertConfig, AlbertForQuestionAnswering, AlbertForSequenceClassification};
use pipeline_shards::rng::SplitMix64;
use pipeline_shards::synthetic::{self, below};

pub use pipeline_albert::bench::{BenchError, BenchSpec};

use crate::encode::Encoded;
use crate::task_model::TaskModel;
use crate::train::{FineTuner, Gold, StepResult, read_steps};

/// What [`bench_finetune`] measured: tokens trained per second with each head.
#[derive(Debug, Clone)]
pub struct FinetuneBench {
    /// The model config both heads sit on.
    pub config: AlbertConfig,
    /// Where it ran.
    pub host: BenchHost,
    /// The sequence-classification head's tokens/s, the median over the rounds.
    pub classification_tokens_per_s: f64,
    /// The span-extraction head's tokens/s, the median over the rounds.
    pub span_tokens_per_s: f64,
    /// The classification head's tokens/s in each round.
    pub runs_classification_tokens_per_s: Vec<f64>,
    /// The span head's tokens/s in each round.
    pub runs_span_tokens_per_s: Vec<f64>,
    /// The median of the rounds' span / classification ratios.
    pub span_over_classification: f64,
    /// Each round's span / classification ratio.
    pub runs_span_over_classification: Vec<f64>,
    /// The process's peak RSS after the rounds.
    pub peak_rss_bytes: u64,
    /// Micro-batches trained at once (one per core on a CPU).
    pub data_parallel_workers: usize,
    /// With [`BenchSpec::count_syncs`]: the CUDA synchronisations a timed step of either head
    /// made, on average (the runs' read-backs of the losses not counted).
    pub syncs_per_step: Option<f64>,
    /// With [`BenchSpec::count_syncs`] and a sync counted: the first one's call stack
    /// ([`SyncTally::first_site`]).
    pub first_sync_site: Option<String>,
    /// With [`BenchSpec::count_ops`]: the libtorch operators one more step of the
    /// classification head (the grid's) calls as it is queued, by call path
    /// ([`pipeline_albert::op_tally::count_ops`]).
    pub ops_per_step: Option<BTreeMap<String, u64>>,
}

/// Training tokens/s of the span-extraction head beside the sequence-classification head's:
/// same model config, batch and sequence length, both from seed 1, measured A B A B.
pub fn bench_finetune(spec: &BenchSpec) -> Result<FinetuneBench, BenchError> {
    let c = spec.model_config()?;
    let dev = spec.resolve_device()?;
    let precision = spec.precision_on(&dev)?;
    if spec.count_syncs {
        pipeline_albert::cuda_sync::available()?;
    }
    if spec.count_ops {
        pipeline_albert::op_tally::available()?;
    }
    let (batch, seq) = (spec.batch.get(), spec.seq.get());
    if seq < 3 {
        return Err(BenchError::SeqTooShort {
            seq,
            least: 3,
            why: "the span head's answers lie between [CLS] and the last [SEP]",
        });
    }
    let mut rng = SplitMix64::new(7);
    let rows = synthetic_rows(&c, batch, seq, &mut rng);
    let examples: Vec<&[Encoded]> = rows.iter().map(std::slice::from_ref).collect();
    let ad = dev.device.clone().autodiff();
    let mut heads = heads(&c, (batch, seq), (&ad, precision), &mut rng);
    let t = time_heads(&mut heads, spec, &examples)?;
    let ops_per_step = match spec.count_ops {
        // After every step so far (AdamW's bias correction divides by 1 − β^step).
        true => {
            let step = 2 * (spec.warmup + spec.runs.get() * spec.steps.get()) as u64;
            Some(heads[0].count_step_ops(step, &examples)?)
        }
        false => None,
    };
    let [cls, span] = t.rates;
    let steps_timed = (2 * spec.runs.get() * spec.steps.get()) as f64;
    Ok(FinetuneBench {
        host: BenchHost::of(&dev),
        classification_tokens_per_s: median(cls.clone()),
        span_tokens_per_s: median(span.clone()),
        runs_classification_tokens_per_s: cls,
        runs_span_tokens_per_s: span,
        span_over_classification: median(t.ratios.clone()),
        runs_span_over_classification: t.ratios,
        peak_rss_bytes: peak_rss(),
        data_parallel_workers: heads[0].tuner.parallel.workers(),
        syncs_per_step: t.syncs.as_ref().map(|s| s.total() as f64 / steps_timed),
        first_sync_site: t.syncs.and_then(|s| s.first_site().map(str::to_owned)),
        ops_per_step,
        config: c,
    })
}

/// One head of the benchmark: its tuner and the gold of the synthetic batch.
struct Head {
    name: &'static str,
    tuner: FineTuner,
    classes: Vec<usize>,
    spans: Vec<(usize, usize)>,
}

impl Head {
    /// `steps` optimiser steps from step number `first`, their losses read once at the end
    /// (which waits for the device to finish them, so a timing around this call is of the
    /// device's work too); a loss that is not finite stops the benchmark. With `syncs`, each
    /// step's CUDA synchronisations are counted into it (the read-back is not).
    fn steps(
        &mut self,
        (first, steps): (u64, usize),
        rows: &[&[Encoded]],
        mut syncs: Option<&mut SyncTally>,
    ) -> Result<(), BenchError> {
        let results = (first..first + steps as u64)
            .map(|step| match syncs.as_deref_mut() {
                Some(tally) => tally.count(|| self.queue_step(step, rows))?,
                None => self.queue_step(step, rows),
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.read_finite(first, &results)
    }

    /// Reads the losses of the queued steps `results`, numbered from `first` (which waits for
    /// the device); a loss that is not finite is an error naming its step.
    fn read_finite(&self, first: u64, results: &[StepResult]) -> Result<(), BenchError> {
        let read = read_steps(results);
        match read.iter().enumerate().find(|(_, v)| !v.loss.is_finite()) {
            Some((k, v)) => Err(BenchError::Step {
                step: format!("{} step {}", self.name, first + k as u64),
                message: format!("loss {}", v.loss),
            }),
            None => Ok(()),
        }
    }

    /// Step number `step` on `rows` against the head's gold, queued on the device.
    fn queue_step(&mut self, step: u64, rows: &[&[Encoded]]) -> Result<StepResult, BenchError> {
        let gold = if self.spans.is_empty() {
            Gold::Classes(&self.classes)
        } else {
            Gold::Spans(&self.spans)
        };
        self.tuner
            .try_step(step, rows, gold)
            .map_err(|e| BenchError::Step {
                step: format!("{} step {step}", self.name),
                message: e.to_string(),
            })
    }

    /// The libtorch operators step number `step` calls as it is queued (its loss's read-back
    /// left out), by call path.
    fn count_step_ops(
        &mut self,
        step: u64,
        rows: &[&[Encoded]],
    ) -> Result<BTreeMap<String, u64>, BenchError> {
        let (queued, ops) = pipeline_albert::op_tally::count_ops(|| self.queue_step(step, rows))?;
        self.read_finite(step, std::slice::from_ref(&queued?))?;
        Ok(ops)
    }
}

/// `batch` full rows of `seq` tokens, `[CLS] a [SEP] b [SEP]` shaped (token types 1 from the
/// middle), with random ids: the rows of a synthetic pretraining batch.
fn synthetic_rows(
    c: &AlbertConfig,
    batch: usize,
    seq: usize,
    rng: &mut SplitMix64,
) -> Vec<Encoded> {
    let b = synthetic::batch(c.vocab_size, batch, seq, 0, rng);
    b.input_ids
        .chunks(seq)
        .zip(b.token_type_ids.chunks(seq))
        .map(|(ids, types)| Encoded {
            ids: ids.iter().map(|&x| x as u32).collect(),
            types: types.iter().map(|&t| t as u8).collect(),
        })
        .collect()
}

/// The two heads on one model config, each from seed 1, with the gold of the batch: a class
/// per row, and a span of up to four tokens inside each row (`seq` ≥ 3: between `[CLS]` and
/// the last `[SEP]`).
fn heads(
    c: &AlbertConfig,
    (batch, seq): (usize, usize),
    (ad, precision): (&Device, MatmulPrecision),
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
    let tuner = |model: TaskModel| {
        let model = model.with_precision(precision);
        FineTuner::new(model, optim.clone(), ad.clone(), c.hidden_size, false)
    };
    ad.seed(1);
    let classify = TaskModel::Pair(AlbertForSequenceClassification::new(c, 2, 0.1, ad));
    ad.seed(1);
    let span = TaskModel::Span(AlbertForQuestionAnswering::new(c, ad));
    [
        Head {
            name: "classification",
            tuner: tuner(classify),
            classes: (0..batch).map(|_| below(rng, 2) as usize).collect(),
            spans: Vec::new(),
        },
        Head {
            name: "span",
            tuner: tuner(span),
            classes: Vec::new(),
            spans: (0..batch)
                .map(|_| {
                    let s = 1 + below(rng, (seq - 2) as u64) as usize;
                    (s, (s + 3).min(seq - 2))
                })
                .collect(),
        },
    ]
}

/// Tokens/s of each head in each round, each round's span / classification ratio, and with
/// [`BenchSpec::count_syncs`] the timed steps' CUDA synchronisations.
struct HeadTiming {
    rates: [Vec<f64>; 2],
    ratios: Vec<f64>,
    syncs: Option<SyncTally>,
}

/// The warm-up steps of each head, then the rounds: the steps of one timed run per head,
/// alternating.
fn time_heads(
    heads: &mut [Head; 2],
    spec: &BenchSpec,
    rows: &[&[Encoded]],
) -> Result<HeadTiming, BenchError> {
    let mut step = 0u64;
    for h in heads.iter_mut() {
        h.steps((step, spec.warmup), rows, None)?;
        step += spec.warmup as u64;
    }
    let mut syncs = spec.count_syncs.then(SyncTally::default);
    let tokens = spec.tokens() as f64;
    let steps = spec.steps.get();
    let (mut rates, mut ratios) = ([Vec::new(), Vec::new()], Vec::new());
    for _ in 0..spec.runs.get() {
        let mut round = [0.0; 2];
        for (k, h) in heads.iter_mut().enumerate() {
            let t0 = Instant::now();
            h.steps((step, steps), rows, syncs.as_mut())?;
            step += steps as u64;
            round[k] = tokens * steps as f64 / t0.elapsed().as_secs_f64();
            rates[k].push(round[k]);
        }
        ratios.push(round[1] / round[0]);
    }
    Ok(HeadTiming {
        rates,
        ratios,
        syncs,
    })
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroUsize;

    use pipeline_albert::device::DeviceChoice;
    use pipeline_albert::model::MatmulPrecision;

    use super::*;

    fn spec() -> BenchSpec {
        let n = |k| NonZeroUsize::new(k).expect("not 0");
        BenchSpec {
            model: "tiny".into(),
            share_type: None,
            vocab_size: Some(64),
            batch: n(2),
            seq: n(8),
            real_tokens: None,
            masked: 0,
            steps: n(1),
            runs: n(3),
            warmup: 0,
            device: DeviceChoice::Flex,
            precision: MatmulPrecision::Fp32,
            peak_tflops: 989.0,
            split: false,
            phases: false,
            count_syncs: false,
            count_ops: false,
            profile_range: false,
            trace: None,
        }
    }

    #[test]
    fn each_round_times_both_heads_and_their_ratio() {
        let r = bench_finetune(&spec()).expect("a tiny bench");
        assert_eq!(r.runs_classification_tokens_per_s.len(), 3);
        assert_eq!(r.runs_span_tokens_per_s.len(), 3);
        for k in 0..3 {
            let ratio = r.runs_span_tokens_per_s[k] / r.runs_classification_tokens_per_s[k];
            assert!((r.runs_span_over_classification[k] - ratio).abs() < 1e-12);
        }
        assert_eq!(
            r.span_over_classification,
            median(r.runs_span_over_classification.clone())
        );
    }

    #[test]
    fn rows_too_short_for_a_span_are_refused() {
        let mut s = spec();
        s.seq = NonZeroUsize::new(2).expect("not 0");
        let e = bench_finetune(&s).expect_err("no room for an answer");
        assert!(
            matches!(
                e,
                BenchError::SeqTooShort {
                    seq: 2,
                    least: 3,
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn spans_lie_inside_the_rows_between_cls_and_the_last_sep() {
        let s = spec();
        let c = s.model_config().expect("tiny");
        let mut rng = SplitMix64::new(7);
        let rows = synthetic_rows(&c, 4, 6, &mut rng);
        assert!(rows.iter().all(|r| r.ids.len() == 6 && r.types.len() == 6));
        let [_, span] = heads(
            &c,
            (4, 6),
            (&Device::flex().autodiff(), MatmulPrecision::Fp32),
            &mut rng,
        );
        for (s, e) in span.spans {
            assert!(1 <= s && s <= e && e <= 4, "({s}, {e})");
        }
    }
}
