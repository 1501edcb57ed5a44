//! `pipeline bench` through the binary: its refusals of bad shapes, precisions, devices and
//! flags, padded rows, a step's phases, and the `tch` build's diagnostics (CUDA syncs counted,
//! libtorch operators counted by call path, torch's profiler's trace, a profiler range, the
//! largest batch that fits), each of which the flex build refuses, saying why.

/// A benchmark of zero rows, tokens, steps or runs is a mistake in the command line (exit 2
/// naming the flag), not a division by zero.
#[test]
fn bench_refuses_empty_shapes() {
    for (cmd, flag) in [
        ("train", "--batch"),
        ("train", "--steps"),
        ("infer", "--seq"),
        ("infer", "--runs"),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_pipeline"))
            .args(["bench", cmd, "--model", "tiny", flag, "0"])
            .output()
            .expect("running pipeline");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{cmd} {flag} 0: {stderr}");
        assert!(
            stderr.contains(&format!("{flag} must be at least 1")),
            "{stderr}"
        );
    }
}

/// An unknown `--precision` or `--device` is a mistake in the command line: exit 2, naming it.
#[test]
fn bench_refuses_unknown_precision_and_device() {
    for (flag, value, says) in [
        (
            "--precision",
            "fp16",
            "--precision \"fp16\": expected fp32 or bf16",
        ),
        ("--device", "gpu7", "--device:"),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_pipeline"))
            .args(["bench", "train", "--model", "tiny", flag, value])
            .output()
            .expect("running pipeline");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {stderr}");
        assert!(stderr.contains(says), "{stderr}");
    }
}

/// `--tokens`: none (exit 2), more than the row holds (exit 1, both numbers named), and on
/// `bench finetune`, which has no padded rows (exit 2); a padded train bench runs and says so.
#[test]
fn bench_padded_rows_are_checked_and_run() {
    let bench = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_pipeline"))
            .args(["bench"])
            .args(args)
            .args([
                "--model",
                "tiny",
                "--vocab-size",
                "64",
                "--runs",
                "1",
                "--steps",
                "1",
            ])
            .output()
            .expect("running pipeline");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        (
            out.status.code(),
            text + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let (code, text) = bench(&["train", "--tokens", "0"]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("--tokens must be at least 1"), "{text}");
    let (code, text) = bench(&["infer", "--seq", "8", "--tokens", "9"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("--tokens 9 exceeds --seq 8"), "{text}");
    let (code, text) = bench(&["finetune", "--seq", "8", "--tokens", "4"]);
    assert_eq!(code, Some(2), "{text}");
    assert!(
        text.contains("--tokens is for bench train and infer"),
        "{text}"
    );
    let (code, text) = bench(&["train", "--batch", "2", "--seq", "16", "--tokens", "6"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("batch 2 × seq 16 (6 real tokens)"), "{text}");
}

/// `--phases`: a train bench's JSON carries the step's phases, which add up to the step; the
/// other benchmarks refuse the flag (exit 2).
#[test]
fn bench_train_times_the_phases_of_a_step() {
    let bench = |cmd: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_pipeline"))
            .args([
                "bench",
                cmd,
                "--model",
                "tiny",
                "--vocab-size",
                "64",
                "--batch",
                "2",
            ])
            .args([
                "--seq", "16", "--runs", "1", "--steps", "2", "--phases", "--json",
            ])
            .output()
            .expect("running pipeline")
    };
    let out = bench("train");
    assert!(out.status.success(), "{out:?}");
    let line: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let p = &line["phases"];
    let seconds = |k: &str| p[k].as_f64().unwrap_or_else(|| panic!("{k} in {line}"));
    assert!(
        seconds("forward_s") > 0.0 && seconds("step_s") > 0.0,
        "{line}"
    );
    let sum = seconds("forward_s") + seconds("backward_s") + seconds("optimizer_s");
    assert!((sum - seconds("step_s")).abs() < 1e-9, "{line}");
    // The host's own shares: until each call returned, never longer than the call waited for
    // (each repetition's is a prefix of its whole, so the medians keep the order).
    let host = seconds("forward_host_s") + seconds("backward_host_s") + seconds("optimizer_host_s");
    assert!((host - seconds("step_host_s")).abs() < 1e-9, "{line}");
    for part in ["forward", "step"] {
        let (h, w) = (
            seconds(&format!("{part}_host_s")),
            seconds(&format!("{part}_s")),
        );
        assert!(h > 0.0 && h <= w, "{part}: host {h} against {w}: {line}");
    }
    assert_eq!(p["repetitions"], 2);
    for cmd in ["infer", "finetune"] {
        let out = bench(cmd);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("--phases is for bench train"), "{err}");
    }
}

/// `--count-syncs`: the flex build says it needs the `tch` one, before it builds anything; the
/// `tch` build counts the timed steps of `bench train` and of both heads of `bench finetune`,
/// 0 a step on libtorch's CPU (no device to wait for), in the JSON's `cuda_syncs_per_step`
/// (and no `cuda_first_sync_site`); `bench infer` refuses the flag (exit 2).
#[test]
fn bench_train_and_finetune_count_cuda_syncs_in_the_tch_build_only() {
    let bench = |cmd: &str, device: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_pipeline"))
            .args(["bench", cmd, "--model", "tiny", "--vocab-size", "64"])
            .args(["--batch", "2", "--seq", "16", "--runs", "1", "--steps", "2"])
            .args(["--device", device, "--count-syncs", "--json"])
            .output()
            .expect("running pipeline")
    };
    for cmd in ["train", "finetune"] {
        if cfg!(feature = "tch") {
            let out = bench(cmd, "tch-cpu");
            assert!(out.status.success(), "{cmd}: {out:?}");
            let line: serde_json::Value =
                serde_json::from_slice(&out.stdout).expect("one JSON object");
            assert_eq!(line["cuda_syncs_per_step"], 0.0, "{line}");
            assert!(
                line["cuda_first_sync_site"].is_null(),
                "no sync, no site: {line}"
            );
        } else {
            let out = bench(cmd, "cpu");
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{cmd}: {err}");
            assert!(err.contains("needs the `tch` build"), "{err}");
            assert!(out.stdout.is_empty(), "no result line");
        }
    }
    let out = bench("infer", "cpu");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--count-syncs is for bench train and bench finetune, not bench infer"),
        "{err}"
    );
}

/// `--count-ops`: the flex build says it needs the `tch` one; the `tch` build puts one step's
/// operators in the JSON's `torch_ops_per_step`, by call path with the first tensor's type and
/// shape (the layers' products among them), and lists the commonest under the human line, for
/// a pretraining step and a fine-tuning one; bench infer refuses the flag (exit 2).
#[test]
fn bench_train_and_finetune_count_one_steps_libtorch_operators_in_the_tch_build_only() {
    let bench = |cmd: &str, device: &str, json: bool| {
        std::process::Command::new(env!("CARGO_BIN_EXE_pipeline"))
            .args(["bench", cmd, "--model", "tiny", "--vocab-size", "64"])
            .args(["--batch", "2", "--seq", "16", "--runs", "1", "--steps", "1"])
            .args(["--device", device, "--count-ops"])
            .args(json.then_some("--json"))
            .output()
            .expect("running pipeline")
    };
    for cmd in ["train", "finetune"] {
        if cfg!(feature = "tch") {
            let out = bench(cmd, "tch-cpu", true);
            assert!(out.status.success(), "{cmd}: {out:?}");
            let line: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON");
            let ops = line["torch_ops_per_step"].as_object().expect("a map");
            // tiny's FFN's first product (its first tensor the bias, 1248 wide) is called once
            // a layer (four) on each data-parallel worker's micro-batch.
            let workers = line["data_parallel_workers"].as_u64().expect("workers");
            let ffn = ops.get("aten::addmm [Float 1248]").and_then(|v| v.as_u64());
            assert_eq!(
                ffn,
                Some(4 * workers),
                "{cmd}: {:#?}",
                ops.keys().collect::<Vec<_>>()
            );
            let out = bench(cmd, "tch-cpu", false);
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(text.contains("libtorch operators of one step:"), "{text}");
            assert!(text.contains("the 40 commonest:\n"), "{text}");
        } else {
            let out = bench(cmd, "cpu", true);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{cmd}: {err}");
            assert!(err.contains("needs the `tch` build"), "{err}");
            assert!(out.stdout.is_empty(), "no result line");
        }
    }
    let out = bench("infer", "cpu", true);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--count-ops is for bench train and bench finetune, not bench infer"),
        "{err}"
    );
}

/// `--trace FILE`: the `tch` build saves torch's profiler's trace of a step's phases there (a
/// Chrome trace holding the ranges the summary reads, the operators inside them); the flex
/// build says it needs the `tch` one and writes nothing; the other benchmarks refuse the flag
/// (exit 2).
#[test]
fn bench_train_traces_a_steps_phases_with_torchs_profiler_in_the_tch_build_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trace.json");
    let bench = |cmd: &str, device: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_pipeline"))
            .args(["bench", cmd, "--model", "tiny", "--vocab-size", "64"])
            .args(["--batch", "2", "--seq", "16", "--runs", "1", "--steps", "1"])
            .args(["--device", device, "--json", "--trace"])
            .arg(&path)
            // One data-parallel worker: torch's profiler follows the calling thread.
            .env("RAYON_NUM_THREADS", "1")
            .output()
            .expect("running pipeline")
    };
    if cfg!(feature = "tch") {
        let out = bench("train", "tch-cpu");
        assert!(out.status.success(), "{out:?}");
        let line: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON");
        assert_eq!(line["trace"], serde_json::json!(path), "{line}");
        let trace: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).expect("a JSON trace");
        let events = trace["traceEvents"].as_array().expect("traceEvents");
        let ranges: Vec<&str> = events
            .iter()
            .filter(|e| e["cat"] == "user_annotation")
            .filter_map(|e| e["name"].as_str())
            .collect();
        assert_eq!(
            ranges,
            [
                "pipeline::forward",
                "pipeline::forward_backward",
                "pipeline::step",
                "pipeline::step"
            ]
        );
        let products = events
            .iter()
            .filter(|e| e["cat"] == "cpu_op" && e["name"] == "aten::addmm")
            .count();
        assert!(products > 0, "no product in the trace");
        // A trace file that cannot be made: exit 1 naming it, before the timed runs.
        let nowhere = dir.path().join("no_such_dir").join("trace.json");
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_pipeline"))
            .args(["bench", "train", "--model", "tiny", "--vocab-size", "64"])
            .args(["--device", "tch-cpu", "--trace"])
            .arg(&nowhere)
            .output()
            .expect("running pipeline");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains("cannot write the trace to") && err.contains("no_such_dir"),
            "{err}"
        );
        assert!(out.stdout.is_empty(), "no result line");
    } else {
        let out = bench("train", "cpu");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains("torch's profiler needs the `tch` build"),
            "{err}"
        );
        assert!(!path.exists(), "no trace written");
    }
    for cmd in ["infer", "finetune"] {
        let out = bench(cmd, "cpu");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{cmd}: {err}");
        assert!(
            err.contains(&format!("--trace is for bench train, not bench {cmd}")),
            "{err}"
        );
    }
}

/// `--cuda-profiler-range`: refused on a device that is not a GPU (exit 1, before building
/// anything, naming the device), and by the other benchmarks (exit 2).
#[test]
fn bench_train_opens_a_profiler_range_only_on_a_gpu() {
    let bench = |cmd: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_pipeline"))
            .args(["bench", cmd, "--model", "tiny", "--vocab-size", "64"])
            .args(["--batch", "2", "--seq", "16", "--runs", "1", "--steps", "1"])
            .args(["--device", "cpu", "--cuda-profiler-range", "--json"])
            .output()
            .expect("running pipeline")
    };
    let out = bench("train");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("--cuda-profiler-range needs a CUDA device"),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "no result line");
    for cmd in ["infer", "finetune"] {
        let out = bench(cmd);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains("--cuda-profiler-range is for bench train"),
            "{err}"
        );
    }
}

/// `bench maxbatch`: on a CPU the search needs a cap (exit 2, saying so); within one, each
/// size runs in a child and every one fits, so the line reports the cap it reached, with the
/// keys the report reads beside transformers' `hf_maxbatch`.
#[test]
fn bench_maxbatch_needs_a_cap_on_a_cpu_and_reports_reaching_it() {
    let maxbatch = |extra: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_pipeline"))
            .args(["bench", "maxbatch", "--model", "tiny", "--vocab-size", "64"])
            .args(["--seq", "16", "--masked", "2", "--device", "cpu"])
            .args(extra)
            .output()
            .expect("running pipeline")
    };
    let out = maxbatch(&[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("give --max-batch N"), "{stderr}");
    let out = maxbatch(&["--max-batch", "5", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(line["bench"], "maxbatch");
    assert_eq!(
        line["max_batch"], 4,
        "the largest power of two within the cap: {line}"
    );
    assert_eq!(line["first_oom"], serde_json::Value::Null);
    assert_eq!(line["capped_at"], 5);
    assert_eq!(
        line["tried"],
        serde_json::json!({"1": true, "2": true, "4": true})
    );
}
