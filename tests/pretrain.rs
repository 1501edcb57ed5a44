//! The `pretrain` stage and the `model` commands through the binary, on the bundled fixtures
//! with a very small model: the artifact (Hugging Face export, metrics), resume after `kill -9`,
//! a NaN loss, bad input, and `pipeline model forward|info` against the transformers fixtures.

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

fn repo() -> &'static str {
    env!("CARGO_MANIFEST_DIR")
}

/// clean → vocab → mask → pretrain on the fixtures, with a model small enough for seconds.
fn yaml(pretrain_params: &str) -> String {
    format!(
        r#"{data}  pretrain:
    kind: pretrain
    deps: [mask, vocab]
    params:
      model: tiny
      hidden_size: 32
      num_attention_heads: 2
      intermediate_size: 64
      embedding_size: 16
      num_hidden_layers: 2
      batch_size: 8
      learning_rate: 0.005
      log_interval: 1
{pretrain_params}
"#,
        data = fixture_data_stages_yaml()
    )
}

fn json_file(path: impl AsRef<Path>) -> Value {
    let path = path.as_ref();
    serde_json::from_str(&read(path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn checkpoint_state(ws: &Ws) -> Option<PathBuf> {
    let work = ws.path(".pipeline/work");
    let dirs = std::fs::read_dir(&work).ok()?;
    for d in dirs.flatten() {
        for sub in std::fs::read_dir(d.path()).ok()?.flatten() {
            let p = sub.path().join("checkpoint/state.json");
            if p.is_file() {
                return Some(p);
            }
            let p = d.path().join("checkpoint/state.json");
            if p.is_file() {
                return Some(p);
            }
        }
    }
    None
}

#[test]
fn pretrain_trains_evaluates_and_exports_a_model_the_model_commands_read() {
    let ws = Ws::new(&yaml(
        "      steps: 30\n      eval_interval: 10\n      warmup_steps: 3",
    ));
    let v = ws.run_ok(&["pretrain"]);
    let dir = artifact(&v, "pretrain");
    for f in [
        "config.json",
        "model.safetensors",
        "vocab.txt",
        "tokenizer.json",
        "metrics.json",
        "metrics.jsonl",
    ] {
        assert!(dir.join(f).is_file(), "the artifact has no {f}");
    }
    // The full record (timings included) is in the log directory; metrics.json is the same
    // without the timings (pipeline_metrics).
    let m = json_file(dir.join(".log/metrics.json"));
    assert_eq!(m["steps"], 30);
    assert_eq!(
        m["config"]["vocab_size"], 1291,
        "vocab_size comes from the vocabulary"
    );
    assert_eq!(m["share_type"], "all");
    let eval = &m["eval"];
    for k in ["mlm_accuracy", "sop_accuracy"] {
        let x = eval[k].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&x), "{k} = {x}");
    }
    assert!(eval["instances"].as_u64().unwrap() > 0);
    assert!(m["tokens_per_s"].as_f64().unwrap() > 0.0);
    // The loss goes down: the last logged training loss is below the first.
    let lines: Vec<Value> = read(dir.join("metrics.jsonl"))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let losses: Vec<f64> = lines.iter().filter_map(|l| l["loss"].as_f64()).collect();
    assert_eq!(losses.len(), 30, "one line per step with log_interval 1");
    assert!(
        losses[25..].iter().sum::<f64>() / 5.0 < losses[..5].iter().sum::<f64>() / 5.0,
        "the training loss did not go down: {losses:?}"
    );
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.get("eval_mlm_accuracy").is_some())
            .count(),
        3
    );
    let config = json_file(dir.join("config.json"));
    assert_eq!(config["architectures"][0], "AlbertForPreTraining");
    assert_eq!(config["model_type"], "albert");

    // `pipeline model info` reads it, by stage name and by directory.
    let info = ws.json(&["model", "info", "--stage", "pretrain"], 0);
    assert_eq!(info["config"]["hidden_size"], 32);
    assert_eq!(info["hf_compatible"], true);
    let dir_s = dir.to_string_lossy().to_string();
    let text = ws.run(&["model", "info", "--model", &dir_s]);
    text.expect_code(0);
    assert!(text.stdout.contains("parameters:"), "{}", text.stdout);

    // `pipeline model forward` on two padded rows.
    ws.write(
        "in.json",
        r#"{"input_ids": [[2, 10, 11, 3, 12, 3], [2, 20, 3, 21, 3, 0]],
            "token_type_ids": [[0, 0, 0, 0, 1, 1], [0, 0, 0, 1, 1, 0]],
            "attention_mask": [[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0]]}"#,
    );
    let out = ws.run(&[
        "model", "forward", "--stage", "pretrain", "--input", "in.json", "--output", "out.json",
    ]);
    out.expect_code(0).assert_no_panic();
    let o = json_file(ws.path("out.json"));
    let logits = o["prediction_logits"].as_array().unwrap();
    assert_eq!(logits.len(), 2);
    assert_eq!(logits[0].as_array().unwrap().len(), 6);
    assert_eq!(logits[0][0].as_array().unwrap().len(), 1291);
    assert_eq!(o["sop_logits"][1].as_array().unwrap().len(), 2);
    assert_eq!(o["last_hidden_state"][0][0].as_array().unwrap().len(), 32);
}

#[test]
fn model_forward_reproduces_transformers_on_its_fixture() {
    let fixture = format!("{}/tests/fixtures/hf_albert/gelu_new", repo());
    let io = json_file(format!("{fixture}/io.json"));
    let ws = Ws::new("stages: {}\n");
    let input = serde_json::json!({
        "input_ids": io["input_ids"], "token_type_ids": io["token_type_ids"],
        "attention_mask": io["attention_mask"],
    });
    ws.write("in.json", input.to_string());
    ws.run(&[
        "model", "forward", "--model", &fixture, "--input", "in.json", "--output", "out.json",
    ])
    .expect_code(0);
    let out = json_file(ws.path("out.json"));
    fn flat(v: &Value, out: &mut Vec<f64>) {
        match v {
            Value::Array(a) => a.iter().for_each(|x| flat(x, out)),
            Value::Number(n) => out.push(n.as_f64().unwrap()),
            _ => panic!("unexpected {v}"),
        }
    }
    for key in ["prediction_logits", "sop_logits", "last_hidden_state"] {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        flat(&out[key], &mut a);
        flat(&io[key], &mut b);
        assert_eq!(a.len(), b.len(), "{key}: shapes differ");
        let diff = a
            .iter()
            .zip(&b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f64::max);
        assert!(diff < 1e-4, "{key}: max |diff| {diff}");
    }
}

#[test]
fn a_killed_pretraining_resumes_from_its_last_checkpoint() {
    let ws = Ws::new(&yaml(
        "      steps: 400\n      checkpoint_interval: 5\n      eval_interval: 400",
    ));
    // Data stages first, so that the kill lands in pretrain.
    ws.run_ok(&["mask"]);
    let mut child = ws
        .command(&["run", "pretrain"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let state = loop {
        if let Some(p) = checkpoint_state(&ws) {
            let s = json_file(&p);
            if s["step"].as_u64().unwrap_or(0) >= 10 {
                break p;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no checkpoint appeared"
        );
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the run ended before it was killed: {status}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let saved = json_file(&state)["step"].as_u64().unwrap();

    // Shorten the run so the test stays quick: a different `steps` would be another
    // fingerprint, so the same params run again, and must continue from the checkpoint.
    let v = ws.run_ok(&["pretrain"]);
    let dir = artifact(&v, "pretrain");
    let m = json_file(dir.join(".log/metrics.json"));
    let resumed = m["resumed_from_step"]
        .as_u64()
        .expect("the run did not resume");
    assert!(
        resumed >= saved,
        "resumed from {resumed}, the checkpoint was at {saved}"
    );
    assert_eq!(m["steps"], 400);
    let log = read(dir.join(".log/train.log"));
    assert!(
        log.contains(&format!("resumed from the checkpoint at step {resumed}")),
        "{log}"
    );
    // No step is logged twice across the two attempts.
    let steps: Vec<u64> = read(dir.join("metrics.jsonl"))
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| l.get("loss").is_some())
        .map(|l| l["step"].as_u64().unwrap())
        .collect();
    assert_eq!(steps, (1..=400).collect::<Vec<_>>());
    // The work area is cleaned after success.
    assert!(checkpoint_state(&ws).is_none());
}

#[test]
fn a_nan_loss_stops_the_stage_naming_the_step_and_keeps_the_checkpoint() {
    let ws = Ws::new(&yaml("      steps: 12\n      checkpoint_interval: 5"));
    let out = ws
        .command(&["run", "pretrain"])
        .env("PIPELINE_FAULT_NAN_AT_STEP", "7")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    // The engine prints a failed stage's error with the run's report, on stdout.
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(printed.contains("step 7: the loss is NaN"), "{printed}");
    assert!(
        printed.contains("last good checkpoint (step 5)"),
        "{printed}"
    );
    let state = checkpoint_state(&ws).expect("the checkpoint was removed");
    assert_eq!(json_file(state)["step"], 5);
    // Without the fault, the run continues from step 5 and finishes.
    let v = ws.run_ok(&["pretrain"]);
    let m = json_file(artifact(&v, "pretrain").join(".log/metrics.json"));
    assert_eq!(m["resumed_from_step"], 5);
    assert_eq!(m["steps"], 12);
}

/// `batch_size: auto` on a CPU: 32 rows unless the step's rows need a smaller power of two,
/// the accumulation follows `effective_batch_size`, and the choice is logged and recorded.
#[test]
fn auto_batch_on_a_cpu_divides_the_effective_batch_and_is_recorded() {
    let ws = Ws::new(
        &yaml("      steps: 3\n      effective_batch_size: 48")
            .replace("      batch_size: 8\n", "      batch_size: auto\n"),
    );
    let v = ws.run_ok(&["pretrain"]);
    let dir = artifact(&v, "pretrain");
    let m = json_file(dir.join(".log/metrics.json"));
    assert_eq!(
        m["batch_size"], 16,
        "the largest power of two dividing 48, at most 32"
    );
    assert_eq!(m["grad_accum_steps"], 3);
    assert_eq!(m["effective_batch_size"], 48);
    let auto = &m["batch_size_auto"];
    assert_eq!(auto["rows"], 16);
    assert_eq!(
        auto["tried"],
        serde_json::json!([]),
        "nothing probed on a CPU"
    );
    let log = read(dir.join(".log/train.log"));
    assert!(
        log.contains("batch_size auto: 16 rows per micro-batch") && log.contains("3 micro-batch"),
        "{log}"
    );
}

fn expect_failure(ws: &Ws, code: i32, needles: &[&str]) {
    let out = ws.run(&["run", "pretrain"]);
    out.expect_code(code).assert_no_panic();
    for n in needles {
        assert!(
            out.stderr.contains(n) || out.stdout.contains(n),
            "expected {n:?} in the output\n{}",
            out.describe()
        );
    }
}

#[test]
fn bad_pretrain_params_are_errors_at_their_line() {
    for (params, needle) in [
        ("      batch_size: 0", "batch_size must be at least 1"),
        (
            "      grad_accum_steps: 0",
            "grad_accum_steps must be at least 1",
        ),
        (
            "      share_type: everything",
            "unknown share_type \"everything\"",
        ),
        ("      steps: 5\n      learning_rat: 0.1", "learning_rate"),
        ("      num_attention_heads: 5", "not divisible"),
        ("      device: gpu", "unknown device \"gpu\""),
        ("      batch_size: max", "must be a number of rows or auto"),
        (
            "      effective_batch_size: 20",
            "effective_batch_size 20 is not a multiple of batch_size 8",
        ),
    ] {
        // The override replaces the base yaml's line for the same key.
        let key = params.trim().split(':').next().unwrap();
        let base: String = yaml(params)
            .lines()
            .filter(|l| !l.starts_with(&format!("      {key}: ")) || l.trim() == params.trim())
            .map(|l| format!("{l}\n"))
            .collect();
        let ws = Ws::new(&base);
        expect_failure(&ws, 2, &[needle, "pipeline.yaml"]);
    }
}

#[test]
fn bad_pretrain_inputs_are_clear_errors() {
    // A dep with no shards.
    let ws = Ws::new(&yaml("      steps: 5").replace(
        "  mask:\n    kind: mask\n    deps: [clean, vocab]\n",
        "  mask:\n    cmd: echo none > $PIPELINE_OUT/nothing.txt\n    deps: [clean, vocab]\n",
    )
    .replace(
        "    params: {max_seq_length: 64, max_predictions_per_seq: 10, dupe_factor: 1, eval_fraction: 0.1}\n",
        "",
    ));
    expect_failure(&ws, 1, &["has no training shards"]);

    // A model config whose vocabulary is not the data's.
    let ws = Ws::new(&yaml("      steps: 5").replace("model: tiny", "model: conf/model.json"));
    ws.write(
        "conf/model.json",
        r#"{"vocab_size": 100, "embedding_size": 16, "hidden_size": 32, "num_hidden_layers": 2,
            "num_attention_heads": 2, "intermediate_size": 64, "hidden_act": "gelu",
            "max_position_embeddings": 64}"#,
    );
    expect_failure(&ws, 1, &["vocab_size is 100", "1291 tokens"]);

    // Continuing from a checkpoint of another vocabulary.
    let fixture = format!("{}/tests/fixtures/hf_albert/gelu", repo());
    let ws = Ws::new(&yaml(&format!(
        "      steps: 5\n      init_from: {fixture}"
    )));
    expect_failure(&ws, 1, &["vocab_size 120", "1291 tokens"]);

    // A truncated checkpoint.
    let ws = Ws::new(&yaml("      steps: 5\n      init_from: ckpt"));
    std::fs::create_dir_all(ws.path("ckpt")).unwrap();
    std::fs::copy(
        format!("{fixture}/config.json"),
        ws.path("ckpt/config.json"),
    )
    .unwrap();
    let bytes = std::fs::read(format!("{fixture}/model.safetensors")).unwrap();
    ws.write("ckpt/model.safetensors", &bytes[..bytes.len() / 3]);
    expect_failure(&ws, 1, &["truncated", "init_from"]);

    // bf16 on a device without bf16 products (flex, what `device: flex` and a build without
    // libtorch give) is refused, not trained in fp32 under a bf16 label.
    let ws = Ws::new(&yaml(
        "      steps: 5\n      device: flex\n      precision: bf16",
    ));
    expect_failure(
        &ws,
        1,
        &["param `precision`: bf16 needs a libtorch device", "fp32"],
    );
}
