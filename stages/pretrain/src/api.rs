//! The pretrain stage's public API for the `pipeline` binary: the throughput of the model this
//! stage trains, on synthetic batches of fixed shape ([`pipeline_shards::synthetic`]), with
//! the same configs, batch, sequence length, masked positions and FLOPs formula as
//! `benches/hf_baseline.py`.
//!
//! - [`bench_train`]: the stage's own training step ([`Trainer`]: forward, backward, LAMB, one
//!   micro-batch per core on a CPU): tokens/s, model FLOP/s, MFU on a GPU;
//! - [`bench_infer`]: forward passes of the encoder (`AlbertModel`), as `pipeline predict`
//!   runs them: sentences/s;
//! - [`largest_fitting`]: the search for the largest batch that fits, given a probe of one size
//!   (`pipeline bench maxbatch` probes each size with `pipeline bench train` in a process of
//!   its own).
//!
//! Timings are medians over [`BenchSpec::runs`] runs of [`BenchSpec::steps`] steps after
//! [`BenchSpec::warmup`] untimed ones; the peak RSS is the process's high-water mark.

use burn::tensor::Device;
use std::collections::BTreeMap;
use std::time::Instant;

use pipeline_albert::bench::{BenchHost, median, peak_rss, timed_runs};
use pipeline_albert::cuda_sync::SyncTally;
use pipeline_albert::model::{AlbertInput, MatmulPrecision};
use pipeline_albert::parallel::{DataParallel, split_rows};
use pipeline_albert::train::{OptimConfig, OptimizerKind};
use pipeline_albert::{Albert, AlbertConfig, AlbertForPreTraining};
use pipeline_shards::rng::SplitMix64;
use pipeline_shards::{Batch, synthetic};

pub use crate::batch_search::{Found, Tried, largest_fitting};
pub use pipeline_albert::bench::{BenchError, BenchSpec, Timing};

use crate::trainer::Trainer;

/// The seed of the synthetic batches (the same rows in every benchmark of a shape).
const DATA_SEED: u64 = 7;

/// What [`bench_train`] measured.
#[derive(Debug, Clone)]
pub struct TrainBench {
    /// The model config trained (the spec's, with its overrides).
    pub config: AlbertConfig,
    /// Where it ran.
    pub host: BenchHost,
    /// The timed runs.
    pub timing: Timing,
    /// The median of the runs' seconds per step.
    pub seconds_per_step: f64,
    /// Tokens trained per second at the median.
    pub tokens_per_s: f64,
    /// Model FLOPs (the config's training FLOPs formula) per second at the median, in TFLOP/s.
    pub model_tflops_per_s: f64,
    /// On a GPU: the model FLOP/s over [`BenchSpec::peak_tflops`].
    pub mfu: Option<f64>,
    /// The process's peak RSS after the runs.
    pub peak_rss_bytes: u64,
    /// Micro-batches trained at once (one per core on a CPU).
    pub data_parallel_workers: usize,
    /// With [`BenchSpec::phases`]: the step's phases timed apart.
    pub phases: Option<StepPhases>,
    /// With [`BenchSpec::count_syncs`]: the CUDA synchronisations a timed step made, on
    /// average (the runs' read-backs of the losses not counted).
    pub syncs_per_step: Option<f64>,
    /// With [`BenchSpec::count_syncs`] and a sync counted: the first one's call stack, from
    /// torch's check outwards, a frame a line ([`SyncTally::first_site`]).
    pub first_sync_site: Option<String>,
    /// With [`BenchSpec::count_ops`]: the libtorch operators one step called, by call path
    /// ([`pipeline_albert::op_tally`]).
    pub ops_per_step: Option<BTreeMap<String, u64>>,
}

/// A training step's phases, each timed apart with the device synchronised after it: the
/// median seconds of [`BenchSpec::steps`] repetitions each. What a GPU's step time is spent on,
/// found the way a profile without counters finds it: by timing the step with parts left out
/// and taking differences. Each figure counts the host's dispatch and the device's kernels,
/// and one wait for the device that a queued step does not make.
///
/// Each part is also timed on the host alone ([`PhaseTime::host`]): until its call returns,
/// before the wait. On a GPU that is the host's queueing of the part's kernels (the device
/// runs them meanwhile), so a part whose host time is near its whole time is host-bound, and
/// one whose host time is far below it waits for the device. The 2026-11-30 H200 sitting
/// measured `tiny` 256 × 128's forward at 13–14 ms in float32, TF32 and bf16 alike, longer than
/// its backward in bf16 (2.4 ms): which of the two it is, these times say. On a CPU the host
/// does the arithmetic itself, and host and whole times are the same but for the wait's own.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepPhases {
    /// The batch's upload and the forward pass with its autodiff graph, the losses included.
    pub forward: PhaseTime,
    /// The same and the backward pass: the gradients, summed over the micro-batches.
    pub forward_backward: PhaseTime,
    /// The whole step: the above, the clipping by the global norm and the optimiser's update.
    pub step: PhaseTime,
}

/// One phase's median seconds: with the device waited for, and until its call returned.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PhaseTime {
    /// From the call to the end of the wait for the device after it.
    pub whole: f64,
    /// From the call to its return, before the wait: the host's own share.
    pub host: f64,
}

impl StepPhases {
    /// The backward pass's share: forward and backward less the forward.
    pub fn backward(&self) -> f64 {
        self.forward_backward.whole - self.forward.whole
    }

    /// The clipping's and the optimiser's share: the step less forward and backward.
    pub fn optimizer(&self) -> f64 {
        self.step.whole - self.forward_backward.whole
    }

    /// The backward pass's share of the host's time: forward and backward less the forward.
    pub fn backward_host(&self) -> f64 {
        self.forward_backward.host - self.forward.host
    }

    /// The clipping's and the optimiser's share of the host's time.
    pub fn optimizer_host(&self) -> f64 {
        self.step.host - self.forward_backward.host
    }
}

/// What [`bench_infer`] measured.
#[derive(Debug, Clone)]
pub struct InferBench {
    /// The model config run.
    pub config: AlbertConfig,
    /// Where it ran.
    pub host: BenchHost,
    /// The timed runs (seconds per batch).
    pub timing: Timing,
    /// The median of the runs' seconds per batch.
    pub seconds_per_batch: f64,
    /// Rows per second at the median.
    pub sentences_per_s: f64,
    /// Model FLOPs (the config's inference FLOPs formula) per second, in TFLOP/s.
    pub model_tflops_per_s: f64,
    /// The process's peak RSS after the runs.
    pub peak_rss_bytes: u64,
    /// Parts the batch ran in, each on a core of its own ([`BenchSpec::split`]), or 1.
    pub chunks: usize,
}

/// Training steps of `AlbertForPreTraining` with the stage's [`Trainer`] on one synthetic
/// batch, queued on the device and read back once per timed run, as the stage reads them
/// once per log line.
pub fn bench_train(spec: &BenchSpec) -> Result<TrainBench, BenchError> {
    let c = spec.model_config()?;
    let dev = spec.resolve_device()?;
    let precision = spec.precision_on(&dev)?;
    if spec.count_syncs {
        pipeline_albert::cuda_sync::available()?;
    }
    if spec.count_ops {
        pipeline_albert::op_tally::available()?;
    }
    if let Some(path) = &spec.trace {
        pipeline_albert::torch_trace::ready(path)?;
    }
    if spec.profile_range {
        if !dev.is_gpu {
            return Err(BenchError::ProfilerRangeNotGpu(dev.name.clone()));
        }
        pipeline_albert::cuda_profiler::available()?;
    }
    let mut trainer = bench_trainer(&c, dev.device.clone().autodiff(), precision);
    let (batch, seq) = (spec.batch.get(), spec.seq.get());
    let data = synthetic_batch(&c, spec, spec.masked)?;
    let (timing, syncs) = time_training(&mut trainer, &data, spec)?;
    let first_sync_site = syncs
        .as_ref()
        .and_then(|t| t.first_site().map(str::to_owned));
    let steps_timed = (spec.runs.get() * spec.steps.get()) as f64;
    let phases = match spec.phases {
        true => Some(time_phases(&mut trainer, &data, spec)?),
        false => None,
    };
    let ops_per_step = match spec.count_ops {
        // After every step so far (the optimiser's bias correction divides by 1 − β^step).
        true => {
            let phase_steps = if spec.phases { spec.steps.get() } else { 0 };
            let step = spec.warmup + spec.runs.get() * spec.steps.get() + phase_steps;
            Some(count_step_ops(&mut trainer, &data, step as u64)?)
        }
        false => None,
    };
    if let Some(path) = &spec.trace {
        let done = spec.warmup + spec.runs.get() * spec.steps.get();
        let later = if spec.phases { spec.steps.get() } else { 0 } + usize::from(spec.count_ops);
        trace_phases(&mut trainer, &data, (done + later) as u64, path)?;
    }
    let s = timing.median();
    let flops = c.training_flops(batch, seq, spec.masked);
    Ok(TrainBench {
        host: BenchHost::of(&dev),
        seconds_per_step: s,
        tokens_per_s: spec.tokens() as f64 / s,
        model_tflops_per_s: flops / s / 1e12,
        mfu: dev.is_gpu.then(|| flops / s / (spec.peak_tflops * 1e12)),
        peak_rss_bytes: peak_rss(),
        data_parallel_workers: trainer.parallel.workers(),
        phases,
        syncs_per_step: syncs.map(|t| t.total() as f64 / steps_timed),
        first_sync_site,
        ops_per_step,
        timing,
        config: c,
    })
}

/// The libtorch operators one more step calls as it is queued (its losses' read-back left
/// out), by call path.
fn count_step_ops(
    trainer: &mut Trainer,
    data: &Batch,
    step: u64,
) -> Result<BTreeMap<String, u64>, BenchError> {
    let batches = std::slice::from_ref(data);
    let ((), ops) = pipeline_albert::op_tally::count_ops(|| trainer.enqueue(step, batches))?;
    trainer
        .flush()
        .map_err(|e| step_error("the counted step".to_string(), e))?;
    Ok(ops)
}

/// Torch's profiler's trace of a forward pass, a forward and backward, and two whole steps from
/// step `step` on, each in a range of its name and waited for (the two steps together: the
/// second queued while the device runs the first, as in training), saved to `path`.
fn trace_phases(
    trainer: &mut Trainer,
    data: &Batch,
    step: u64,
    path: &std::path::Path,
) -> Result<(), BenchError> {
    use pipeline_albert::torch_trace::{range, trace};
    let batches = std::slice::from_ref(data);
    let sync = waiter(&trainer.device, "the traced phases");
    sync()?;
    trace(path, || {
        range("pipeline::forward", || drop(trainer.forward_only(data)));
        sync()?;
        range("pipeline::forward_backward", || {
            drop(trainer.gradients(0, batches))
        });
        sync()?;
        for k in 0..2 {
            range("pipeline::step", || trainer.enqueue(step + k, batches));
        }
        trainer
            .flush()
            .map(drop)
            .map_err(|e| step_error("the traced steps".to_string(), e))
    })?
}

/// The pretraining model from seed 1, in `precision`, and its trainer.
fn bench_trainer(c: &AlbertConfig, ad: Device, precision: MatmulPrecision) -> Trainer {
    ad.seed(1);
    let model = AlbertForPreTraining::new(c, &ad).with_precision(precision);
    Trainer::new(c.clone(), model, bench_optim(), ad)
}

/// The pretraining optimiser the bench steps with: LAMB at a constant rate (no warmup, a
/// schedule far longer than any bench), so every timed step does the same work.
pub fn bench_optim() -> OptimConfig {
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

/// The warm-up steps, each read back, then the timed runs; with [`BenchSpec::count_syncs`], the
/// CUDA synchronisations the timed steps made (each step counted apart, so that the runs'
/// read-backs are not) and where the first came from; with [`BenchSpec::profile_range`], the
/// timed runs inside a profiler range.
fn time_training(
    trainer: &mut Trainer,
    data: &Batch,
    spec: &BenchSpec,
) -> Result<(Timing, Option<SyncTally>), BenchError> {
    let batches = std::slice::from_ref(data);
    let mut step = 0u64;
    for _ in 0..spec.warmup {
        trainer
            .step(step, batches)
            .map_err(|e| step_error("warm-up step".to_string(), e))?;
        step += 1;
    }
    let (mut queued, mut syncs) = (0, SyncTally::default());
    let mut timed = || {
        timed_runs(spec.runs, spec.steps, &mut || {
            // As the pretrain stage trains: steps are queued on the device and their losses read
            // back once, here at the end of each timed run (the stage: once per log line), so a
            // GPU is not made to wait for the host after every step and the run's time still
            // covers all of its work.
            if spec.count_syncs {
                syncs.count(|| trainer.enqueue(step, batches))?;
            } else {
                trainer.enqueue(step, batches);
            }
            step += 1;
            queued += 1;
            if queued == spec.steps.get() {
                queued = 0;
                trainer
                    .flush()
                    .map_err(|e| step_error(format!("steps up to {step}"), e))?;
            }
            Ok(())
        })
    };
    // The range holds the timed runs alone: building the model and the warm-up stay out of a
    // kernel profile (`ncu --profile-from-start off`).
    let timing = if spec.profile_range {
        pipeline_albert::cuda_profiler::in_range(timed)??
    } else {
        timed()?
    };
    Ok((timing, spec.count_syncs.then_some(syncs)))
}

/// The step's phases ([`StepPhases`]), after the timed runs: the forward pass alone, forward
/// and backward, then whole steps, each repetition waited for on the device.
fn time_phases(
    trainer: &mut Trainer,
    data: &Batch,
    spec: &BenchSpec,
) -> Result<StepPhases, BenchError> {
    let batches = std::slice::from_ref(data);
    let sync = waiter(&trainer.device, "phases");
    let n = spec.steps.get();
    let forward = synced_median(n, &sync, &mut || drop(trainer.forward_only(data)))?;
    let forward_backward = synced_median(n, &sync, &mut || drop(trainer.gradients(0, batches)))?;
    // The steps go on from the timed runs' count (the learning rate is constant anyway).
    let mut step = (spec.warmup + spec.runs.get() * n) as u64;
    let whole = synced_median(n, &sync, &mut || {
        trainer.enqueue(step, batches);
        step += 1;
    })?;
    trainer
        .flush()
        .map_err(|e| step_error("the phases' steps".to_string(), e))?;
    Ok(StepPhases {
        forward,
        forward_backward,
        step: whole,
    })
}

/// The median seconds of `n` calls of `f`, each waited for with `sync` (once before the first,
/// so that nothing queued earlier is counted), and the median seconds until `f` returned.
fn synced_median(
    n: usize,
    sync: &dyn Fn() -> Result<(), BenchError>,
    f: &mut dyn FnMut(),
) -> Result<PhaseTime, BenchError> {
    sync()?;
    let mut whole = Vec::with_capacity(n);
    let mut host = Vec::with_capacity(n);
    for _ in 0..n {
        let t0 = Instant::now();
        f();
        host.push(t0.elapsed().as_secs_f64());
        sync()?;
        whole.push(t0.elapsed().as_secs_f64());
    }
    Ok(PhaseTime {
        whole: median(whole),
        host: median(host),
    })
}

/// A wait for everything queued on `device`, its failure the bench's error for `what`.
fn waiter(device: &Device, what: &'static str) -> impl Fn() -> Result<(), BenchError> + use<> {
    let device = device.clone();
    move || device.sync().map_err(|e| step_error(what.to_string(), e))
}

/// A refused training step as the bench's error.
fn step_error(step: String, e: impl std::fmt::Display) -> BenchError {
    BenchError::Step {
        step,
        message: e.to_string(),
    }
}

/// Forward passes of the encoder (`AlbertModel`, seed 1) on one synthetic batch; with
/// [`BenchSpec::split`], one part of the batch per core, each on a single-threaded worker of
/// its own (what `pipeline predict` does on a CPU).
pub fn bench_infer(spec: &BenchSpec) -> Result<InferBench, BenchError> {
    let c = spec.model_config()?;
    let dev = spec.resolve_device()?;
    dev.device.seed(1);
    let model = Albert::new(&c, &dev.device);
    let (batch, seq) = (spec.batch.get(), spec.seq.get());
    let input = synthetic_input(&c, spec, &dev.device)?;
    let workers = if spec.split {
        DataParallel::per_core()
    } else {
        DataParallel::new(1)
    };
    let parts = split_input(&input, batch, workers.workers());
    let run_once = || {
        workers.map(parts.len(), |k| {
            let out = model.forward(&parts[k]);
            // Reading a value forces the computation on lazy backends.
            out.pooler_output.sum().into_scalar::<f32>()
        });
    };
    for _ in 0..spec.warmup {
        run_once();
    }
    let timing = timed_runs(spec.runs, spec.steps, &mut || {
        run_once();
        Ok(())
    })?;
    let s = timing.median();
    Ok(InferBench {
        host: BenchHost::of(&dev),
        seconds_per_batch: s,
        sentences_per_s: batch as f64 / s,
        model_tflops_per_s: c.inference_flops(batch, seq) / s / 1e12,
        peak_rss_bytes: peak_rss(),
        chunks: parts.len(),
        timing,
        config: c,
    })
}

/// The synthetic batch of `spec`'s shape: rows of [`BenchSpec::row_tokens`] real tokens with
/// `masked` masked positions each, padded to `seq`.
fn synthetic_batch(c: &AlbertConfig, spec: &BenchSpec, masked: usize) -> Result<Batch, BenchError> {
    let (batch, seq, real) = (spec.batch.get(), spec.seq.get(), spec.row_tokens()?);
    let rows = synthetic::batch(
        c.vocab_size,
        batch,
        real,
        masked,
        &mut SplitMix64::new(DATA_SEED),
    );
    Ok(synthetic::pad_rows(rows, seq))
}

/// The encoder's input for one synthetic batch without masked positions.
fn synthetic_input(
    c: &AlbertConfig,
    spec: &BenchSpec,
    device: &Device,
) -> Result<AlbertInput, BenchError> {
    let b = synthetic_batch(c, spec, 0)?;
    Ok(AlbertInput::from_rows(
        b.batch_size,
        b.seq_len,
        b.input_ids,
        b.token_type_ids,
        b.attention_mask,
        device,
    ))
}

/// `input`'s `batch` rows in at most `parts` nearly equal, non-empty parts.
fn split_input(input: &AlbertInput, batch: usize, parts: usize) -> Vec<AlbertInput> {
    split_rows(batch, parts)
        .into_iter()
        .map(|r| AlbertInput {
            input_ids: input.input_ids.clone().narrow(0, r.start, r.len()),
            token_type_ids: input.token_type_ids.clone().narrow(0, r.start, r.len()),
            attention_mask: input.attention_mask.clone().narrow(0, r.start, r.len()),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroUsize;

    use pipeline_albert::device::DeviceChoice;

    use super::*;

    fn spec(split: bool) -> BenchSpec {
        let n = |k| NonZeroUsize::new(k).expect("not 0");
        BenchSpec {
            model: "tiny".into(),
            share_type: None,
            vocab_size: Some(64),
            batch: n(3),
            seq: n(8),
            real_tokens: None,
            masked: 2,
            steps: n(1),
            runs: n(2),
            warmup: 1,
            device: DeviceChoice::Flex,
            precision: MatmulPrecision::Fp32,
            peak_tflops: 989.0,
            split,
            phases: false,
            count_syncs: false,
            count_ops: false,
            profile_range: false,
            trace: None,
        }
    }

    /// Padded rows (`--tokens`) train and infer at the row's full shape; more real tokens
    /// than the row holds is refused.
    #[test]
    fn padded_rows_train_and_infer_and_too_many_tokens_are_refused() {
        let mut padded = spec(false);
        padded.real_tokens = NonZeroUsize::new(5);
        let r = bench_train(&padded).expect("a padded bench");
        assert!((r.tokens_per_s - 24.0 / r.seconds_per_step).abs() < 1e-9 * r.tokens_per_s);
        let b = synthetic_batch(&r.config, &padded, 2).expect("a batch");
        assert_eq!(
            b.attention_mask.iter().sum::<i64>(),
            15,
            "5 real tokens in 3 rows"
        );
        assert!(
            b.masked_positions.iter().all(|&p| p < 4),
            "masked inside the real tokens"
        );
        padded.split = true;
        bench_infer(&padded).expect("a padded inference bench");
        padded.real_tokens = NonZeroUsize::new(9);
        let e = bench_train(&padded).expect_err("9 real tokens in rows of 8");
        assert_eq!(
            e.to_string(),
            "--tokens 9 exceeds --seq 8: the real tokens are part of the row"
        );
    }

    #[test]
    fn train_times_each_run_and_derives_the_rates_from_the_median() {
        let r = bench_train(&spec(false)).expect("a tiny bench");
        assert_eq!(r.timing.per_step.len(), 2);
        assert!(r.seconds_per_step > 0.0);
        assert!((r.tokens_per_s - 24.0 / r.seconds_per_step).abs() < 1e-9 * r.tokens_per_s);
        assert_eq!(r.mfu, None, "no MFU on a CPU");
        assert_eq!(r.host.isa.is_some(), !r.host.is_gpu);
        assert_eq!(r.config.vocab_size, 64);
    }

    #[test]
    fn infer_split_runs_no_more_parts_than_rows() {
        let r = bench_infer(&spec(true)).expect("a tiny bench");
        assert!((1..=3).contains(&r.chunks), "{}", r.chunks);
        assert_eq!(r.timing.per_step.len(), 2);
        assert!((r.sentences_per_s - 3.0 / r.seconds_per_batch).abs() < 1e-9 * r.sentences_per_s);
        let r = bench_infer(&spec(false)).expect("a tiny bench");
        assert_eq!(r.chunks, 1);
    }

    #[test]
    fn split_input_covers_the_rows_in_order() {
        let c = spec(false).model_config().expect("tiny");
        let mut shape = spec(false);
        (shape.batch, shape.seq) = (
            NonZeroUsize::new(5).expect("5"),
            NonZeroUsize::new(4).expect("4"),
        );
        let input = synthetic_input(&c, &shape, &Device::flex()).expect("an input");
        let parts = split_input(&input, 5, 2);
        assert_eq!(parts.len(), 2);
        let rows: Vec<usize> = parts.iter().map(|p| p.input_ids.dims()[0]).collect();
        assert_eq!(rows, vec![3, 2]);
    }
}
