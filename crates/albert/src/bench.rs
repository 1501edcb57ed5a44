//! What the model benchmarks share (`pipeline bench train|infer|finetune`, whose bodies are in
//! the pretrain and finetune stages' API modules): the benchmark's model, shape and schedule
//! as one typed [`BenchSpec`], its model config and device, and the timing: runs of steps
//! ([`timed_runs`]), how busy the cores were meanwhile, the median and the peak RSS, and
//! where it ran ([`BenchHost`]).
//!
//! Timings are medians over runs after warm-up steps, comparable with
//! `benches/hf_baseline.py`; peak RSS is the process's high-water mark.

use std::num::NonZeroUsize;
use std::path::Path;
use std::time::Instant;

use crate::config::{AlbertConfig, ConfigError, ShareType};
use crate::cpu_level::CpuLevel;
use crate::device::{DeviceChoice, DeviceError, ResolvedDevice, resolve};
use crate::model::MatmulPrecision;

/// A benchmark's model, batch shape, schedule and device: the flags of `pipeline bench`,
/// typed (their names appear in this module's error messages).
#[derive(Debug, Clone)]
pub struct BenchSpec {
    /// An albert_zh size (`tiny` … `xxlarge`) or a config JSON (a path: it holds a `/` or
    /// ends in `.json`).
    pub model: String,
    /// Overrides the config's `share_type`.
    pub share_type: Option<ShareType>,
    /// Overrides the config's `vocab_size`.
    pub vocab_size: Option<usize>,
    /// Rows per batch.
    pub batch: NonZeroUsize,
    /// Tokens per row, padding included.
    pub seq: NonZeroUsize,
    /// Real tokens per row, the rest `[PAD]` with attention mask 0 (short texts padded to
    /// `seq`); `None`: every row full. Train and infer only.
    pub real_tokens: Option<NonZeroUsize>,
    /// Masked positions per row (pretraining steps only).
    pub masked: usize,
    /// Steps (or batches) timed per run.
    pub steps: NonZeroUsize,
    /// Timed runs; results are their medians.
    pub runs: NonZeroUsize,
    /// Untimed steps before the first run.
    pub warmup: usize,
    /// The device to run on.
    pub device: DeviceChoice,
    /// The matrix products' dtype (bf16 only on a device with bf16 products).
    pub precision: MatmulPrecision,
    /// The device's dense peak in TFLOP/s, for the model FLOP utilisation on a GPU.
    pub peak_tflops: f64,
    /// Inference only: the batch as one chunk per core, in parallel (what `pipeline predict`
    /// does on a CPU).
    pub split: bool,
    /// Training only: after the timed runs, also time a step's phases apart (forward; forward
    /// and backward; the whole step), the device synchronised after each.
    pub phases: bool,
    /// Training and fine-tuning only: count the CUDA synchronisations the timed steps make
    /// ([`crate::cuda_sync`]), the runs' own read-backs left out.
    pub count_syncs: bool,
    /// Training and fine-tuning only: after the timed runs, count the libtorch operators one
    /// more step calls, by call path ([`crate::op_tally`]).
    pub count_ops: bool,
    /// Training only, on CUDA: the timed runs inside a profiler range
    /// ([`crate::cuda_profiler`]), so that `ncu --profile-from-start off` records their kernels
    /// and nothing else.
    pub profile_range: bool,
    /// Training only: after the timed runs, a trace of a step's phases by torch's profiler
    /// ([`crate::torch_trace`]), saved to this file.
    pub trace: Option<std::path::PathBuf>,
}

/// Why a benchmark could not run, or stopped.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The model config cannot be read or is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The device is not in this build or not on this machine.
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// CUDA synchronisations cannot be counted in this build or process.
    #[error(transparent)]
    SyncCount(#[from] crate::cuda_sync::SyncCountError),
    /// A profiler range cannot be opened in this build or on this device.
    #[error(transparent)]
    ProfilerRange(#[from] crate::cuda_profiler::ProfilerRangeError),
    /// Operators were asked to be counted where they cannot be.
    #[error(transparent)]
    OpCount(#[from] crate::op_tally::OpCountError),
    /// A trace was asked for where torch's profiler cannot take one.
    #[error(transparent)]
    Trace(#[from] crate::torch_trace::TraceError),
    /// A profiler range asked for on a device that is not a GPU.
    #[error("--cuda-profiler-range needs a CUDA device (--device cuda:N); {0} is not one")]
    ProfilerRangeNotGpu(String),
    /// The rows are longer than the model has positions.
    #[error("--seq {seq} exceeds the model's {positions} positions")]
    SeqTooLong {
        /// Tokens per row asked for.
        seq: usize,
        /// The model's `max_position_embeddings`.
        positions: usize,
    },
    /// The rows are too short for what the benchmark trains on.
    #[error("--seq {seq}: {why}; give at least {least}")]
    SeqTooShort {
        /// Tokens per row asked for.
        seq: usize,
        /// The fewest the benchmark needs.
        least: usize,
        /// Why it needs them.
        why: &'static str,
    },
    /// More real tokens per row than the row has.
    #[error("--tokens {tokens} exceeds --seq {seq}: the real tokens are part of the row")]
    TokensOverSeq {
        /// Real tokens per row asked for.
        tokens: usize,
        /// Tokens per row.
        seq: usize,
    },
    /// Random ids are drawn above the special tokens, so the vocabulary must have more.
    #[error("--vocab-size {0}: a benchmark draws ids above the 5 special tokens; give at least 6")]
    VocabTooSmall(usize),
    /// bf16 asked for on a device without bf16 products.
    #[error(
        "--precision bf16 needs a libtorch device (--device tch-cpu or cuda:N); {device} has no \
         bf16 products"
    )]
    NoBf16 {
        /// The device's name.
        device: String,
    },
    /// A step failed (a non-finite loss, gold the head does not train on).
    #[error("{step}: {message}")]
    Step {
        /// Which step (`warm-up step`, `span step 12`).
        step: String,
        /// What went wrong.
        message: String,
    },
}

impl BenchSpec {
    /// The model config: the named size or file, with the overrides, validated, and long
    /// enough for the rows.
    pub fn model_config(&self) -> Result<AlbertConfig, BenchError> {
        let mut c = if self.model.contains('/') || self.model.ends_with(".json") {
            AlbertConfig::from_file(Path::new(&self.model))?
        } else {
            AlbertConfig::named(&self.model)?
        };
        if let Some(v) = self.vocab_size {
            c.vocab_size = v;
        }
        if let Some(s) = self.share_type {
            c.share_type = s;
        }
        c.validate()?;
        if c.vocab_size <= 5 {
            return Err(BenchError::VocabTooSmall(c.vocab_size));
        }
        if self.seq.get() > c.max_position_embeddings {
            return Err(BenchError::SeqTooLong {
                seq: self.seq.get(),
                positions: c.max_position_embeddings,
            });
        }
        Ok(c)
    }

    /// The device, resolved on this machine.
    pub fn resolve_device(&self) -> Result<ResolvedDevice, BenchError> {
        Ok(resolve(self.device)?)
    }

    /// The precision on `dev`: bf16 only where the backend has bf16 products.
    pub fn precision_on(&self, dev: &ResolvedDevice) -> Result<MatmulPrecision, BenchError> {
        self.precision
            .on(dev)
            .map_err(|e| BenchError::NoBf16 { device: e.device })
    }

    /// Real tokens per row: [`BenchSpec::real_tokens`], at most `seq`, else `seq`.
    pub fn row_tokens(&self) -> Result<usize, BenchError> {
        let seq = self.seq.get();
        match self.real_tokens.map(NonZeroUsize::get) {
            Some(tokens) if tokens > seq => Err(BenchError::TokensOverSeq { tokens, seq }),
            Some(tokens) => Ok(tokens),
            None => Ok(seq),
        }
    }

    /// Positions in one batch (`batch × seq`, padding included: the work of a step).
    pub fn tokens(&self) -> usize {
        self.batch.get() * self.seq.get()
    }
}

/// What timed runs measured: seconds per step of each run, and how busy the cores were.
#[derive(Debug, Clone, PartialEq)]
pub struct Timing {
    /// Each run's seconds per step.
    pub per_step: Vec<f64>,
    /// CPU seconds (user + system, all threads) per wall second over the runs: 2.0 = both
    /// cores of a 2-core machine all the time.
    pub cpu_per_wall: f64,
    /// Minor page faults taken during the runs.
    pub page_faults: u64,
}

impl Timing {
    /// The median of the runs' seconds per step.
    pub fn median(&self) -> f64 {
        median(self.per_step.clone())
    }
}

/// `runs` runs of `steps` calls of `step`, each run's seconds per call.
pub fn timed_runs(
    runs: NonZeroUsize,
    steps: NonZeroUsize,
    step: &mut dyn FnMut() -> Result<(), BenchError>,
) -> Result<Timing, BenchError> {
    let mut per_step = Vec::with_capacity(runs.get());
    let busy = Busy::start();
    for _ in 0..runs.get() {
        let t0 = Instant::now();
        for _ in 0..steps.get() {
            step()?;
        }
        per_step.push(t0.elapsed().as_secs_f64() / steps.get() as f64);
    }
    let (cpu_per_wall, page_faults) = busy.stop();
    Ok(Timing {
        per_step,
        cpu_per_wall,
        page_faults,
    })
}

/// The median of `v` (the mean of the middle two for an even count); NaN when empty.
pub fn median(mut v: Vec<f64>) -> f64 {
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

/// Where a benchmark ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BenchHost {
    /// The device's name (`cpu`, `cuda:0`).
    pub device: String,
    /// The GPU's model as its driver names it, when it is one.
    pub device_model: Option<String>,
    /// Whether the device is a GPU.
    pub is_gpu: bool,
    /// The threads this process may run at once (its CPU affinity).
    pub threads: usize,
    /// On a CPU, the vector level of our kernels (`cpu_level`), and the host's best: burn's
    /// matrix products use the host's best whatever the level, so rows from different hosts
    /// must stay apart.
    pub isa: Option<&'static str>,
    /// On a CPU, the host's best vector level.
    pub isa_host: Option<&'static str>,
}

impl BenchHost {
    /// The host of a benchmark on `dev`.
    pub fn of(dev: &ResolvedDevice) -> BenchHost {
        BenchHost {
            device: dev.name.clone(),
            device_model: dev.model.clone(),
            is_gpu: dev.is_gpu,
            threads: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            isa: (!dev.is_gpu).then(|| CpuLevel::active().name()),
            isa_host: (!dev.is_gpu).then(|| CpuLevel::detected().name()),
        }
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

/// The process's CPU time and page faults at the start of a timed section, and its wall clock.
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

    /// CPU seconds per wall second since the start, and the page faults taken meanwhile.
    fn stop(self) -> (f64, u64) {
        let (cpu, faults) = cpu_usage();
        let wall = self.wall.elapsed().as_secs_f64().max(1e-9);
        (
            (cpu - self.start.0) / wall,
            faults.saturating_sub(self.start.1),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> BenchSpec {
        let n = |k| NonZeroUsize::new(k).expect("not 0");
        BenchSpec {
            model: "tiny".into(),
            share_type: None,
            vocab_size: None,
            batch: n(2),
            seq: n(16),
            real_tokens: None,
            masked: 2,
            steps: n(2),
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
    fn median_of_odd_even_and_no_values() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(Vec::new()).is_nan());
    }

    #[test]
    fn model_config_takes_the_overrides() {
        let mut s = spec();
        s.vocab_size = Some(300);
        s.share_type = Some(ShareType::None);
        let c = s.model_config().expect("tiny");
        assert_eq!((c.vocab_size, c.share_type), (300, ShareType::None));
    }

    #[test]
    fn rows_longer_than_the_positions_are_refused() {
        let mut s = spec();
        let positions = s.model_config().expect("tiny").max_position_embeddings;
        s.seq = NonZeroUsize::new(positions + 1).expect("not 0");
        let e = s.model_config().expect_err("too long");
        assert_eq!(
            e.to_string(),
            format!(
                "--seq {} exceeds the model's {positions} positions",
                positions + 1
            )
        );
    }

    #[test]
    fn a_vocabulary_of_special_tokens_only_is_refused() {
        let mut s = spec();
        s.vocab_size = Some(5);
        assert!(matches!(
            s.model_config(),
            Err(BenchError::VocabTooSmall(5))
        ));
    }

    #[test]
    fn bf16_is_refused_on_flex() {
        let mut s = spec();
        s.precision = MatmulPrecision::Bf16;
        let dev = s.resolve_device().expect("flex is in every build");
        let e = s.precision_on(&dev).expect_err("flex has no bf16");
        assert!(
            e.to_string()
                .starts_with("--precision bf16 needs a libtorch device"),
            "{e}"
        );
    }

    #[test]
    fn timed_runs_call_the_step_runs_times_steps_and_stop_at_an_error() {
        let s = spec();
        let mut calls = 0;
        let t = timed_runs(s.runs, s.steps, &mut || {
            calls += 1;
            Ok(())
        })
        .expect("no error");
        assert_eq!((calls, t.per_step.len()), (6, 3));
        let mut calls = 0;
        let e = timed_runs(s.runs, s.steps, &mut || {
            calls += 1;
            if calls < 3 {
                return Ok(());
            }
            Err(BenchError::Step {
                step: "step 3".into(),
                message: "loss NaN".into(),
            })
        });
        assert_eq!(calls, 3);
        assert_eq!(e.expect_err("third").to_string(), "step 3: loss NaN");
    }

    #[test]
    fn peak_rss_is_read_on_linux() {
        if cfg!(target_os = "linux") {
            assert!(peak_rss() > 0);
        }
    }
}
