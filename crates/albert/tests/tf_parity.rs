//! TensorFlow checkpoints of both layouts in and out: the fixtures in `tests/fixtures/tf/`
//! (made by `tests/fixtures/make_tf_checkpoints.py` with TensorFlow) must import and compute
//! what TensorFlow computed within 1e-4; an export must read back in our reader (always), in
//! TensorFlow with the same outputs (when a Python with tensorflow is there), and an imported
//! Google-layout model must load in transformers with the same outputs (when a Python with
//! torch and transformers is there).

use std::path::{Path, PathBuf};
use std::process::Command;

use burn::tensor::{Device, Tensor};
use pipeline_albert::model::AlbertInput;
use pipeline_albert::{Layout, hf, tf};
use pipeline_tfckpt::{Checkpoint, skip_reason};
use serde_json::Value;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tf")
}

fn read_json(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn rows(v: &Value, key: &str) -> (usize, usize, Vec<i64>) {
    let rows = v[key].as_array().unwrap();
    let seq = rows[0].as_array().unwrap().len();
    let flat = rows
        .iter()
        .flat_map(|r| r.as_array().unwrap().iter().map(|x| x.as_i64().unwrap()))
        .collect();
    (rows.len(), seq, flat)
}

fn flat(v: &Value) -> Vec<f32> {
    match v {
        Value::Array(a) => a.iter().flat_map(flat).collect(),
        x => vec![x.as_f64().unwrap() as f32],
    }
}

fn values<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data()
        .convert::<f32>()
        .try_into_vec::<f32>()
        .unwrap()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Our forward on `dir` (a model directory) against `expected` (outputs.json), all four outputs.
fn assert_outputs(dir: &Path, inputs: &Value, expected: &Value, what: &str) {
    let device = Device::flex();
    let (_, model) = hf::load_pretraining(dir, &device).unwrap_or_else(|e| panic!("{what}: {e:#}"));
    let (b, s, ids) = rows(inputs, "input_ids");
    let (_, _, types) = rows(inputs, "token_type_ids");
    let (_, _, mask) = rows(inputs, "attention_mask");
    let x = AlbertInput::from_rows(b, s, ids, types, mask, &device);
    let (logits, sop, out) = model.forward_all(&x);
    for (name, ours) in [
        ("prediction_logits", values(logits)),
        ("sop_logits", values(sop)),
        ("last_hidden_state", values(out.last_hidden_state)),
        ("pooler_output", values(out.pooler_output)),
    ] {
        let d = max_diff(&ours, &flat(&expected[name]));
        assert!(d < 1e-4, "{what}: {name} differs from TensorFlow's by {d}");
        eprintln!("{what}: {name} within {d:.2e} of TensorFlow");
    }
}

#[test]
fn imported_checkpoints_compute_what_tensorflow_computed() {
    for (name, layout) in [
        ("google", Layout::Google),
        ("albert_zh", Layout::AlbertZh),
        ("albert_zh_preln", Layout::AlbertZh),
    ] {
        let src = fixtures().join(name);
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("model");
        let r = tf::import(&src, None, None, &out).unwrap_or_else(|e| panic!("{name}: {e:#}"));
        assert_eq!(r.layout, layout.name());
        let ckpt = Checkpoint::open(&src).unwrap();
        assert_eq!(r.tensors_read + r.skipped.len(), ckpt.len(), "{name}");
        assert!(r.skipped.iter().any(|(n, _)| n == "global_step"));
        assert!(r.ignored.is_empty(), "{name}: {:?}", r.ignored);
        for f in [
            "config.json",
            "model.safetensors",
            "vocab.txt",
            "tokenizer.json",
        ] {
            assert!(out.join(f).is_file(), "{name}: {f}");
        }
        let config = hf::read_config(&out).unwrap();
        assert_eq!(config.layout, layout);
        let json = read_json(&out.join("config.json"));
        assert_eq!(
            json.get("pipeline_note").is_some(),
            layout == Layout::AlbertZh,
            "{json}"
        );
        assert_outputs(
            &out,
            &read_json(&src.join("inputs.json")),
            &read_json(&src.join("outputs.json")),
            name,
        );
    }
}

/// A Python with tensorflow: `$TF_PYTHON`, else /tmp/tfvenv/bin/python, else `python3`.
fn tf_python() -> Option<PathBuf> {
    let candidates: Vec<PathBuf> = std::env::var_os("TF_PYTHON")
        .map(PathBuf::from)
        .into_iter()
        .chain([
            PathBuf::from("/tmp/tfvenv/bin/python"),
            PathBuf::from("python3"),
        ])
        .collect();
    candidates.into_iter().find(|p| {
        Command::new(p)
            .args(["-c", "import tensorflow"])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

#[test]
fn exports_read_back_in_our_reader_and_in_tensorflow() {
    let python = tf_python();
    if python.is_none() {
        eprintln!(
            "note: no Python with tensorflow (TF_PYTHON, /tmp/tfvenv): checking the exports with \
             our reader only"
        );
    }
    for (name, layout) in [
        ("google", "google"),
        ("albert_zh", "albert_zh"),
        ("albert_zh_preln", "albert_zh"),
    ] {
        let src = fixtures().join(name);
        let tmp = tempfile::tempdir().unwrap();
        let model = tmp.path().join("model");
        tf::import(&src, None, None, &model).unwrap();
        let out = tmp.path().join("tf");
        let r = tf::export(&model, &out).unwrap_or_else(|e| panic!("{name}: {e:#}"));
        assert_eq!(r.layout, layout);
        // Every weight of the original comes back bit for bit, under its own name.
        let orig = Checkpoint::open(&src).unwrap();
        let back = Checkpoint::open(&out).unwrap();
        let weights: Vec<&str> = orig.names().filter(|n| skip_reason(n).is_none()).collect();
        assert_eq!(back.names().collect::<Vec<_>>(), weights, "{name}");
        for n in &weights {
            assert_eq!(
                orig.read_f32(n).unwrap(),
                back.read_f32(n).unwrap(),
                "{name}: {n}"
            );
        }
        // The config albert_zh's scripts read, and our import of the export.
        std::fs::copy(src.join("inputs.json"), out.join("inputs.json")).unwrap();
        let again = tmp.path().join("again");
        tf::import(&out, None, None, &again).unwrap();
        assert_eq!(
            hf::read_config(&again).unwrap(),
            hf::read_config(&model).unwrap()
        );
        if let Some(py) = &python {
            let script = fixtures().join("../make_tf_checkpoints.py");
            let o = Command::new(py)
                .arg(&script)
                .arg("forward")
                .arg(&out)
                .arg(layout)
                .output()
                .unwrap();
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            let by_tf: Value = serde_json::from_slice(&o.stdout).unwrap();
            let want = read_json(&src.join("outputs.json"));
            for k in [
                "prediction_logits",
                "sop_logits",
                "last_hidden_state",
                "pooler_output",
            ] {
                let d = max_diff(&flat(&by_tf[k]), &flat(&want[k]));
                assert!(
                    d < 1e-5,
                    "{name}: TensorFlow on our export: {k} differs by {d}"
                );
            }
        }
    }
}

/// `.venv-torch` (scripts/setup-python.sh) or `$PIPELINE_PYTHON` or `python3`, with torch and
/// transformers.
fn python_with_transformers() -> Option<PathBuf> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    [
        std::env::var_os("PIPELINE_PYTHON").map(PathBuf::from),
        Some(repo.join(".venv-torch/bin/python")),
        Some(PathBuf::from("python3")),
    ]
    .into_iter()
    .flatten()
    .find(|py| {
        Command::new(py)
            .args(["-c", "import torch, transformers"])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

#[test]
fn an_imported_google_checkpoint_loads_in_transformers() {
    let Some(py) = python_with_transformers() else {
        eprintln!("skipped: no Python with torch and transformers (.venv-torch, PIPELINE_PYTHON)");
        return;
    };
    let src = fixtures().join("google");
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("model");
    tf::import(&src, None, None, &out).unwrap();
    let mut io = read_json(&src.join("inputs.json"));
    for (k, v) in read_json(&src.join("outputs.json")).as_object().unwrap() {
        io[k] = v.clone();
    }
    let io_path = tmp.path().join("io.json");
    std::fs::write(&io_path, io.to_string()).unwrap();
    let script = fixtures().join("../check_hf_export.py");
    let o = Command::new(py)
        .arg(&script)
        .arg(&out)
        .arg(&io_path)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "transformers on the imported model:\n{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}
