//! `benches/trace_summary.py`, which reads the trace of `pipeline bench train --trace`, on a
//! trace written here whose figures are known: an operator nested in another counts once, in
//! its caller's span; other threads' operators apart; on CUDA, the kernels a range launched,
//! matched by their runtime call's correlation id, their overlapping spans counted once. The
//! lent GPU's trace is the only real CUDA one, so its reading is checked here first. Skipped,
//! with a note, where `python3` is missing.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::{Value, json};

fn summary(trace: &Path) -> Option<Output> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/trace_summary.py");
    match Command::new("python3").arg(script).arg(trace).output() {
        Ok(out) => Some(out),
        Err(e) => {
            eprintln!("skipped: no python3 to run benches/trace_summary.py ({e})");
            None
        }
    }
}

fn span(cat: &str, name: &str, tid: u64, ts: f64, dur: f64, args: Value) -> Value {
    json!({"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur,
           "args": args})
}

/// A span of the device's side: a runtime or driver call on thread `tid`, or the kernel or copy
/// it launched (thread 0), tied by their `correlation` id.
fn device(cat: &str, name: &str, tid: u64, ts: f64, dur: f64, correlation: u64) -> Value {
    span(
        cat,
        name,
        tid,
        ts,
        dur,
        json!({ "correlation": correlation }),
    )
}

#[test]
fn a_range_is_read_into_operators_the_gaps_between_them_and_its_kernels() {
    // Microseconds. The range: 0–100 on thread 1.
    let events = vec![
        span(
            "user_annotation",
            "pipeline::forward",
            1,
            0.0,
            100.0,
            json!({}),
        ),
        span("cpu_op", "aten::addmm", 1, 10.0, 30.0, json!({})),
        // Inside addmm's span: counted in it, not again.
        span("cpu_op", "aten::copy_", 1, 15.0, 5.0, json!({})),
        span("cpu_op", "aten::mm", 1, 50.0, 20.0, json!({})),
        // After the range: not its.
        span("cpu_op", "aten::mm", 1, 150.0, 20.0, json!({})),
        // The autograd engine's thread.
        span("cpu_op", "aten::mul", 2, 60.0, 10.0, json!({})),
        // Three launches in the range (one through the driver API, as cuBLAS makes some).
        device("cuda_runtime", "cudaLaunchKernel", 1, 12.0, 4.0, 1),
        device("cuda_driver", "cuLaunchKernelEx", 1, 52.0, 4.0, 2),
        device("cuda_runtime", "cudaMemcpyAsync", 1, 11.0, 1.0, 3),
        // What they launched; the second kernel ends 20 after the range, and the copy (an
        // upload) lies inside the first kernel's span. Busy: 10 + 30.
        device("kernel", "gemm", 0, 20.0, 10.0, 1),
        device("kernel", "gemm", 0, 90.0, 30.0, 2),
        device(
            "gpu_memcpy",
            "Memcpy HtoD (Pinned -> Device)",
            0,
            21.0,
            2.0,
            3,
        ),
        // Launched by no call in the range.
        device("kernel", "other", 0, 95.0, 30.0, 9),
    ];
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.json");
    std::fs::write(&trace, json!({"traceEvents": events}).to_string()).unwrap();
    let Some(out) = summary(&trace) else { return };
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    for line in [
        "pipeline::forward: host 0.100 ms; in 2 top-level torch operators 0.050 ms, between \
         them 0.050 ms (50%); other threads' operators 0.010 ms",
        "CUDA: 3 runtime and driver calls (0.009 ms of the host), 3 kernels and copies, the \
         device busy 0.040 ms with them, the last ending 0.020 ms after the range",
        "0.030 ms      1  aten::addmm",
        "0.020 ms      1  aten::mm",
    ] {
        assert!(text.contains(line), "{line:?} not in:\n{text}");
    }
    assert!(!text.contains("aten::copy_"), "{text}");
}

#[test]
fn a_file_that_is_not_a_trace_is_named_and_refused() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("not_a_trace.json");
    std::fs::write(&trace, r#"{"events": []}"#).unwrap();
    let Some(out) = summary(&trace) else { return };
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("not_a_trace.json: no traceEvents"), "{err}");
    // A trace without the bench's ranges says so.
    std::fs::write(&trace, r#"{"traceEvents": []}"#).unwrap();
    let Some(out) = summary(&trace) else { return };
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("no pipeline:: ranges"),
        "{err}"
    );
}
