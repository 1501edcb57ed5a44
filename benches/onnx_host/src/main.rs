//! The exported ONNX model hosted without Python, as an app on a phone or a small server would
//! host it: onnxruntime's C API through the `ort` crate, the shared library opened at run time.
//!
//! It measures what benches/onnx_bench.py's `time` measures for the Python host — the median
//! latency of one sequence over `--runs` calls after 10 warm-up calls, one intra-op and one
//! inter-op thread, sequential, every graph optimisation — and the process's peak RSS
//! (getrusage's ru_maxrss) at three points: at the start (the bare Rust process), once
//! onnxruntime's library is loaded and its environment built (the host's own share, what
//! onnx_bench.py reports as `rss_before_model_mb`), and once the session exists. The inputs
//! come from a feed file written by `onnx_bench.py feed`, with the outputs the Python host gave
//! for them; the largest difference from those is printed, so a run also checks that both hosts
//! compute the same thing. One JSON line on stdout.
//!
//! ```text
//! onnx_host MODEL --feed FEED.json [--lib LIBONNXRUNTIME] [--runs N]
//!           [--no-arena] [--no-mem-pattern] [--no-prepacking] [--initializers-outside-arena]
//! ```
//!
//! `--lib` defaults to ORT_DYLIB_PATH. The four memory switches are onnxruntime's session
//! options that trade speed for memory; none is set by default, as onnx_bench.py sets none.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, anyhow, bail};
use ort::environment::Environment;
use ort::ep;
use ort::session::Session;
use ort::session::builder::{GraphOptimizationLevel, SessionBuilder};
use ort::value::Tensor;
use serde::Deserialize;

/// Calls before the timed ones, as onnx_bench.py makes them.
const WARMUP: usize = 10;

/// onnxruntime's session options that lower memory, each off unless asked for.
#[derive(Debug, Default, PartialEq)]
struct MemoryOptions {
    /// DisableCpuMemArena: allocate activations with malloc instead of a growing arena.
    no_arena: bool,
    /// DisableMemPattern: do not plan one block for all activations from the first run.
    no_mem_pattern: bool,
    /// session.disable_prepacking: keep weights as stored instead of adding MLAS-packed copies.
    no_prepacking: bool,
    /// session.use_device_allocator_for_initializers: weights outside the arena.
    initializers_outside_arena: bool,
}

impl MemoryOptions {
    /// The switches that are on, by their command-line names, for the JSON line.
    fn names(&self) -> Vec<&'static str> {
        [
            (self.no_arena, "no-arena"),
            (self.no_mem_pattern, "no-mem-pattern"),
            (self.no_prepacking, "no-prepacking"),
            (
                self.initializers_outside_arena,
                "initializers-outside-arena",
            ),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect()
    }
}

#[derive(Debug, PartialEq)]
struct Args {
    model: PathBuf,
    feed: PathBuf,
    lib: PathBuf,
    runs: usize,
    memory: MemoryOptions,
}

/// Parses the command line; `env_lib` is ORT_DYLIB_PATH's value, the default for `--lib`.
fn parse_args(mut args: impl Iterator<Item = String>, env_lib: Option<String>) -> Result<Args> {
    let (mut model, mut feed, mut lib, mut runs) = (None, None, env_lib, 200);
    let mut memory = MemoryOptions::default();
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| anyhow!("{name} needs a value"));
        match arg.as_str() {
            "--feed" => feed = Some(value("--feed")?),
            "--lib" => lib = Some(value("--lib")?),
            "--runs" => {
                let text = value("--runs")?;
                runs = text
                    .parse()
                    .with_context(|| format!("--runs {text}: not a count"))?;
                if runs == 0 {
                    bail!("--runs must be at least 1");
                }
            }
            "--no-arena" => memory.no_arena = true,
            "--no-mem-pattern" => memory.no_mem_pattern = true,
            "--no-prepacking" => memory.no_prepacking = true,
            "--initializers-outside-arena" => memory.initializers_outside_arena = true,
            flag if flag.starts_with("--") => bail!("unknown option {flag}"),
            path if model.is_none() => model = Some(path.to_string()),
            extra => bail!("unexpected argument {extra}"),
        }
    }
    Ok(Args {
        model: model.ok_or_else(|| anyhow!("no MODEL given"))?.into(),
        feed: feed.ok_or_else(|| anyhow!("no --feed FILE given"))?.into(),
        lib: lib
            .ok_or_else(|| anyhow!("no --lib given and ORT_DYLIB_PATH is not set"))?
            .into(),
        runs,
        memory,
    })
}

/// What `onnx_bench.py feed` writes: the inputs flattened (shape [1, seq]) and the outputs the
/// Python host computed for them.
#[derive(Debug, Deserialize)]
struct Feed {
    seq: usize,
    inputs: BTreeMap<String, Vec<i64>>,
    outputs: BTreeMap<String, Vec<f64>>,
}

/// The process's peak resident set so far in MB, as onnx_bench.py reads it (Linux reports
/// ru_maxrss in KiB).
fn peak_rss_mb() -> f64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a whole rusage into the pointer it is given and nothing else.
    let status = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
    if status != 0 {
        return f64::NAN;
    }
    // SAFETY: getrusage returned 0, so it filled the struct (zeroed before in any case).
    let usage = unsafe { usage.assume_init() };
    usage.ru_maxrss as f64 / 1024.0
}

/// The process's resident set now in MB (/proc/self/statm's second field, in pages): beside
/// the peak it shows how much of the peak was transient.
fn current_rss_mb() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|statm| statm.split_whitespace().nth(1)?.parse::<f64>().ok());
    match pages {
        Some(pages) if page > 0 => pages * page as f64 / (1024.0 * 1024.0),
        _ => f64::NAN,
    }
}

/// The loaded onnxruntime's version ("1.32.0"), from its OrtGetApiBase as ort reads it when
/// it loads the library (ort does not hand the string on).
fn runtime_version(lib: &std::path::Path) -> Result<String> {
    // SAFETY: the library is already loaded by ort::init_from, so opening it again only takes
    // a reference to it and runs no initialisers; OrtGetApiBase has this signature in every
    // onnxruntime release, and the version string it hands out is static and NUL-terminated.
    unsafe {
        let library = libloading::Library::new(lib)?;
        let get_base: libloading::Symbol<unsafe extern "C" fn() -> *const ort::sys::OrtApiBase> =
            library.get(b"OrtGetApiBase")?;
        let base = get_base();
        if base.is_null() {
            bail!("{}: OrtGetApiBase returned null", lib.display());
        }
        let version = ((*base).GetVersionString)();
        Ok(std::ffi::CStr::from_ptr(version)
            .to_string_lossy()
            .into_owned())
    }
}

/// The session options onnx_bench.py sets, then the memory switches asked for.
fn configure(builder: SessionBuilder, memory: &MemoryOptions) -> ort::Result<SessionBuilder> {
    let mut builder = builder
        .with_intra_threads(1)?
        .with_inter_threads(1)?
        .with_parallel_execution(false)?
        .with_optimization_level(GraphOptimizationLevel::All)?;
    if memory.no_arena {
        // Registering the CPU provider is how ort calls DisableCpuMemArena; without it the
        // session falls back to the CPU provider with the arena on, as in Python.
        builder = builder
            .with_execution_providers([ep::CPU::default().with_arena_allocator(false).build()])?;
    }
    if memory.no_mem_pattern {
        builder = builder.with_memory_pattern(false)?;
    }
    if memory.no_prepacking {
        builder = builder.with_prepacking(false)?;
    }
    if memory.initializers_outside_arena {
        builder = builder.with_device_allocated_initializers()?;
    }
    Ok(builder)
}

/// The feed's inputs as [1, seq] tensors in the order the model declares its inputs.
fn input_tensors(session: &Session, feed: &Feed) -> Result<Vec<(String, Tensor<i64>)>> {
    let mut tensors = Vec::new();
    for outlet in session.inputs() {
        let name = outlet.name();
        let values = feed
            .inputs
            .get(name)
            .with_context(|| format!("the feed has no input {name}"))?;
        if values.len() != feed.seq {
            bail!(
                "the feed's {name} has {} values, not seq = {}",
                values.len(),
                feed.seq
            );
        }
        tensors.push((
            name.to_string(),
            Tensor::from_array(([1usize, feed.seq], values.clone()))?,
        ));
    }
    Ok(tensors)
}

/// The largest absolute difference between two hosts' values of one output; a NaN on one side
/// only counts as infinite (f64::max would skip it and report agreement).
fn max_abs_diff(ours: &[f32], theirs: &[f64]) -> Result<f64> {
    if ours.len() != theirs.len() {
        bail!("{} values here, {} in the feed", ours.len(), theirs.len());
    }
    Ok(ours
        .iter()
        .zip(theirs)
        .map(|(&a, &b)| match (f64::from(a), b) {
            (a, b) if a.is_nan() && b.is_nan() => 0.0,
            (a, b) if a.is_nan() || b.is_nan() => f64::INFINITY,
            (a, b) => (a - b).abs(),
        })
        .fold(0.0, f64::max))
}

/// One call; returns the largest difference from the feed's outputs over every output.
fn run_once(session: &mut Session, inputs: &[(String, Tensor<i64>)], feed: &Feed) -> Result<f64> {
    let refs: Vec<(&str, &Tensor<i64>)> =
        inputs.iter().map(|(name, t)| (name.as_str(), t)).collect();
    let outputs = session.run(refs)?;
    let mut worst = 0.0f64;
    for (name, value) in outputs.iter() {
        let expected = feed
            .outputs
            .get(name)
            .with_context(|| format!("the feed has no output {name}"))?;
        let (_, ours) = value.try_extract_tensor::<f32>()?;
        worst = worst.max(max_abs_diff(ours, expected).with_context(|| format!("output {name}"))?);
    }
    Ok(worst)
}

/// Latency statistics in ms as onnx_bench.py computes them: median at index n/2, p90 at
/// index 0.9·n of the sorted times, and the minimum.
fn summarise(mut times_ms: Vec<f64>) -> (f64, f64, f64) {
    times_ms.sort_by(f64::total_cmp);
    let n = times_ms.len();
    (
        times_ms[n / 2],
        times_ms[(n as f64 * 0.9) as usize],
        times_ms[0],
    )
}

/// Rounds to `digits` decimals, for the JSON line.
fn round(value: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    (value * scale).round() / scale
}

fn main() -> Result<()> {
    let at_start = peak_rss_mb();
    let args = parse_args(
        std::env::args().skip(1),
        std::env::var("ORT_DYLIB_PATH").ok(),
    )?;
    let feed: Feed = serde_json::from_slice(
        &std::fs::read(&args.feed).with_context(|| format!("reading {}", args.feed.display()))?,
    )
    .with_context(|| format!("parsing {}", args.feed.display()))?;

    let environment: Environment = ort::init_from(&args.lib)
        .with_context(|| format!("loading {}", args.lib.display()))?
        .with_name("onnx_host")
        .build()?;
    let before_model = peak_rss_mb();
    let mut builder =
        configure(Session::builder(&environment)?, &args.memory).map_err(|e| anyhow!("{e}"))?;
    let mut session = builder
        .commit_from_file(&args.model)
        .map_err(|e| anyhow!("{e}"))
        .with_context(|| format!("loading {}", args.model.display()))?;
    let after_load = peak_rss_mb();

    let inputs = input_tensors(&session, &feed)?;
    let mut diff = 0.0f64;
    for _ in 0..WARMUP {
        diff = diff.max(run_once(&mut session, &inputs, &feed)?);
    }
    let times = timed_runs(&mut session, &inputs, args.runs)?;
    let (median, p90, min) = summarise(times);
    let line = serde_json::json!({
        "host": "rust (ort, C API)",
        "file": args.model.file_name().map(|n| n.to_string_lossy()),
        "seq": feed.seq, "runs": args.runs, "threads": 1,
        "median_ms": round(median, 3), "p90_ms": round(p90, 3), "min_ms": round(min, 3),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "rss_at_start_mb": round(at_start, 1),
        "rss_before_model_mb": round(before_model, 1),
        "peak_rss_after_load_mb": round(after_load, 1),
        "rss_at_end_mb": round(current_rss_mb(), 1),
        "max_abs_diff_vs_python": diff,
        "memory_options": args.memory.names(),
        "onnxruntime": runtime_version(&args.lib)?,
    });
    println!("{line}");
    Ok(())
}

/// The timed calls: only `Session::run` and its inputs' binding inside the clock, as
/// onnx_bench.py clocks `sess.run`; the outputs are dropped unread.
fn timed_runs(
    session: &mut Session,
    inputs: &[(String, Tensor<i64>)],
    runs: usize,
) -> Result<Vec<f64>> {
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Instant::now();
        let refs: Vec<(&str, &Tensor<i64>)> =
            inputs.iter().map(|(name, t)| (name.as_str(), t)).collect();
        drop(session.run(refs)?);
        times.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    Ok(times)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Result<Args> {
        parse_args(
            line.split_whitespace().map(String::from),
            Some("/lib/ort.so".into()),
        )
    }

    #[test]
    fn parses_model_feed_and_switches() {
        let parsed = args("m.onnx --feed f.json --runs 300 --no-arena --no-prepacking").unwrap();
        assert_eq!(parsed.model, PathBuf::from("m.onnx"));
        assert_eq!(parsed.feed, PathBuf::from("f.json"));
        assert_eq!(parsed.lib, PathBuf::from("/lib/ort.so"));
        assert_eq!(parsed.runs, 300);
        assert_eq!(parsed.memory.names(), ["no-arena", "no-prepacking"]);
    }

    #[test]
    fn lib_flag_overrides_the_environment_and_is_required_without_it() {
        assert_eq!(
            args("m --feed f --lib x.so").unwrap().lib,
            PathBuf::from("x.so")
        );
        let missing = parse_args(["m", "--feed", "f"].map(String::from).into_iter(), None);
        assert!(missing.unwrap_err().to_string().contains("ORT_DYLIB_PATH"));
    }

    #[test]
    fn rejects_bad_arguments() {
        for line in [
            "--feed f",
            "m",
            "m --feed f --runs 0",
            "m --feed f --runs x",
            "m n --feed f",
            "m --feed f --fast",
            "m --feed",
        ] {
            assert!(args(line).is_err(), "{line} was accepted");
        }
    }

    #[test]
    fn summarises_as_onnx_bench_does() {
        let times: Vec<f64> = (1..=10).rev().map(f64::from).collect();
        // sorted 1..=10: median at index 5 (6.0), p90 at index 9 (10.0), minimum 1.0.
        assert_eq!(summarise(times), (6.0, 10.0, 1.0));
    }

    #[test]
    fn compares_outputs_and_refuses_a_length_mismatch() {
        assert_eq!(max_abs_diff(&[1.0, 2.0], &[1.0, 2.5]).unwrap(), 0.5);
        assert!(max_abs_diff(&[1.0], &[1.0, 2.0]).is_err());
        assert_eq!(
            max_abs_diff(&[f32::NAN, 1.0], &[0.0, 1.0]).unwrap(),
            f64::INFINITY
        );
        assert_eq!(max_abs_diff(&[f32::NAN], &[f64::NAN]).unwrap(), 0.0);
    }

    #[test]
    fn resident_sets_are_positive_and_the_peak_is_not_below_now() {
        let now = current_rss_mb();
        assert!(now > 0.0);
        // ru_maxrss counts KiB and statm pages, hence the slack.
        assert!(peak_rss_mb() + 0.01 >= now);
    }
}
