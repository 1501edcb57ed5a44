//! Parity with Hugging Face transformers: the tiny random checkpoints in
//! `tests/fixtures/hf_albert/` (made by `tests/fixtures/make_hf_albert.py`) must give the
//! outputs transformers gave within 1e-4, and our export must load back in transformers with
//! the same outputs (checked when a Python with torch and transformers is available).
//!
//! `ALBERT_TEST_DEVICE` picks the device as the `device` param does (default `flex`); CI runs
//! these tests again with `ALBERT_TEST_DEVICE=tch-cpu` in a `tch` build.

use std::path::{Path, PathBuf};
use std::process::Command;

use burn::tensor::{Device, Tensor};
use pipeline_albert::hf;
use pipeline_albert::model::AlbertInput;
use serde_json::Value;

/// The device under test: `ALBERT_TEST_DEVICE` (`flex`, `tch-cpu`, `cuda:0`…), else flex.
fn test_device() -> Device {
    let name = std::env::var("ALBERT_TEST_DEVICE").unwrap_or_else(|_| "flex".into());
    let choice = pipeline_albert::device::DeviceChoice::parse(&name)
        .unwrap_or_else(|e| panic!("ALBERT_TEST_DEVICE: {e}"));
    let resolved = pipeline_albert::device::resolve(choice)
        .unwrap_or_else(|e| panic!("ALBERT_TEST_DEVICE={name}: {e}"));
    eprintln!("testing on {}", resolved.name);
    resolved.device
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/hf_albert")
}

struct Io {
    json: Value,
}

impl Io {
    fn load(dir: &Path) -> Io {
        let text = std::fs::read_to_string(dir.join("io.json")).unwrap();
        Io {
            json: serde_json::from_str(&text).unwrap(),
        }
    }

    fn rows(&self, key: &str) -> (usize, usize, Vec<i64>) {
        let rows = self.json[key].as_array().unwrap();
        let seq = rows[0].as_array().unwrap().len();
        let flat = rows
            .iter()
            .flat_map(|r| r.as_array().unwrap().iter().map(|v| v.as_i64().unwrap()))
            .collect();
        (rows.len(), seq, flat)
    }

    fn input(&self, device: &Device) -> AlbertInput {
        let (b, s, ids) = self.rows("input_ids");
        let (_, _, types) = self.rows("token_type_ids");
        let (_, _, mask) = self.rows("attention_mask");
        AlbertInput::from_rows(b, s, ids, types, mask, device)
    }

    fn floats(&self, key: &str) -> Vec<f32> {
        fn flatten(v: &Value, out: &mut Vec<f32>) {
            match v {
                Value::Array(a) => a.iter().for_each(|x| flatten(x, out)),
                Value::Number(n) => out.push(n.as_f64().unwrap() as f32),
                other => panic!("unexpected {other}"),
            }
        }
        let mut out = Vec::new();
        flatten(&self.json[key], &mut out);
        out
    }
}

fn max_diff<const D: usize>(actual: Tensor<D>, expected: &[f32]) -> f32 {
    let actual: Vec<f32> = actual
        .into_data()
        .convert::<f32>()
        .try_into_vec::<f32>()
        .unwrap();
    assert_eq!(actual.len(), expected.len(), "output sizes differ");
    actual
        .iter()
        .zip(expected)
        .map(|(a, e)| (a - e).abs())
        .fold(0.0, f32::max)
}

fn check_pretraining(variant: &str) -> (PathBuf, Io) {
    let device = test_device();
    let dir = fixtures().join(variant);
    let io = Io::load(&dir);
    let (_, model) = hf::load_pretraining(&dir, &device).unwrap();
    let (logits, sop, out) = model.forward_all(&io.input(&device));
    for (name, diff) in [
        (
            "prediction_logits",
            max_diff(logits, &io.floats("prediction_logits")),
        ),
        ("sop_logits", max_diff(sop, &io.floats("sop_logits"))),
        (
            "last_hidden_state",
            max_diff(out.last_hidden_state, &io.floats("last_hidden_state")),
        ),
        (
            "pooler_output",
            max_diff(out.pooler_output, &io.floats("pooler_output")),
        ),
    ] {
        assert!(diff < 1e-4, "{variant}: {name} differs by {diff}");
        eprintln!("{variant}: {name} max |diff| = {diff:.2e}");
    }
    (dir, io)
}

#[test]
fn gelu_matches_transformers() {
    check_pretraining("gelu");
}

#[test]
fn gelu_new_matches_transformers() {
    check_pretraining("gelu_new");
}

#[test]
fn relu_matches_transformers() {
    check_pretraining("relu");
}

#[test]
fn unshared_layers_match_transformers() {
    check_pretraining("no_sharing");
}

#[test]
fn checkpoints_with_the_decoder_keys_load_too() {
    check_pretraining("gelu_decoder_keys");
}

#[test]
fn classifier_matches_transformers() {
    let device = test_device();
    let dir = fixtures().join("classifier_gelu_new");
    let io = Io::load(&dir);
    let (_, model) = hf::load_classifier(&dir, &device).unwrap();
    let logits = model.forward(&io.input(&device));
    let diff = max_diff(logits, &io.floats("logits"));
    assert!(diff < 1e-4, "classifier logits differ by {diff}");
}

/// A Python that can import torch and transformers: `PIPELINE_PYTHON`, the repository's
/// `.venv-torch` (scripts/setup-python.sh), or `python3`.
fn python_with_transformers() -> Option<PathBuf> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let candidates = [
        std::env::var_os("PIPELINE_PYTHON").map(PathBuf::from),
        Some(repo.join(".venv-torch/bin/python")),
        Some(PathBuf::from("python3")),
    ];
    candidates.into_iter().flatten().find(|py| {
        Command::new(py)
            .args(["-c", "import torch, transformers"])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

#[test]
fn our_export_loads_back_in_rust_and_in_transformers() {
    let device = test_device();
    for variant in ["gelu", "no_sharing"] {
        let dir = fixtures().join(variant);
        let io = Io::load(&dir);
        let (config, model) = hf::load_pretraining(&dir, &device).unwrap();
        let out = tempfile::tempdir().unwrap();
        hf::save_pretraining(out.path(), &config, &model).unwrap();

        let (config2, again) = hf::load_pretraining(out.path(), &device).unwrap();
        assert_eq!(config, config2);
        let (logits, _, _) = again.forward_all(&io.input(&device));
        assert!(max_diff(logits, &io.floats("prediction_logits")) < 1e-4);

        let Some(py) = python_with_transformers() else {
            eprintln!(
                "skipped the transformers check: no python with torch and transformers (scripts/setup-python.sh)"
            );
            continue;
        };
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/check_hf_export.py");
        let result = Command::new(&py)
            .arg(&script)
            .arg(out.path())
            .arg(dir.join("io.json"))
            .output()
            .unwrap();
        assert!(
            result.status.success(),
            "{variant}: transformers does not reproduce our export\n{}\n{}",
            String::from_utf8_lossy(&result.stdout),
            String::from_utf8_lossy(&result.stderr)
        );
    }
}

#[test]
fn broken_checkpoints_are_clear_errors() {
    let device = test_device();
    let src = fixtures().join("gelu");
    let tmp = tempfile::tempdir().unwrap();
    let copy = |name: &str| {
        std::fs::copy(src.join(name), tmp.path().join(name)).unwrap();
    };

    // No weights.
    copy("config.json");
    let e = hf::load_pretraining(tmp.path(), &device)
        .unwrap_err()
        .to_string();
    assert!(e.contains("no model.safetensors"), "{e}");

    // A truncated safetensors file.
    let bytes = std::fs::read(src.join("model.safetensors")).unwrap();
    std::fs::write(
        tmp.path().join("model.safetensors"),
        &bytes[..bytes.len() / 2],
    )
    .unwrap();
    let e = hf::load_pretraining(tmp.path(), &device)
        .unwrap_err()
        .to_string();
    assert!(e.contains("truncated"), "{e}");

    // Weights of another config (hidden size 32 in the file, 64 in config.json).
    std::fs::write(tmp.path().join("model.safetensors"), &bytes).unwrap();
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    config["hidden_size"] = 64.into();
    config["intermediate_size"] = 96.into();
    std::fs::write(tmp.path().join("config.json"), config.to_string()).unwrap();
    let e = format!(
        "{:#}",
        hf::load_pretraining(tmp.path(), &device).unwrap_err()
    );
    assert!(e.contains("another config"), "{e}");

    // A pretraining checkpoint is not a classifier.
    copy("config.json");
    let e = format!(
        "{:#}",
        hf::load_classifier(tmp.path(), &device).unwrap_err()
    );
    assert!(e.contains("classifier"), "{e}");

    // No config.json at all.
    let empty = tempfile::tempdir().unwrap();
    let e = hf::load_backbone(empty.path(), &device)
        .unwrap_err()
        .to_string();
    assert!(e.contains("no config.json"), "{e}");
}

#[test]
fn loaded_weights_train() {
    use burn::optim::GradientsParams;
    let device = test_device().autodiff();
    let dir = fixtures().join("gelu");
    let io = Io::load(&dir);
    let (config, backbone) = hf::load_backbone(&dir, &device).unwrap();
    let model = pipeline_albert::AlbertForSequenceClassification::from_backbone(
        backbone, &config, 2, 0.0, &device,
    );
    let logits = model.forward(&io.input(&device));
    let grads = logits.sum().backward();
    let grads = GradientsParams::from_grads(grads, &model);
    let word = &model.albert.embeddings.word_embeddings.weight;
    assert!(
        grads.get::<2>(word.id).is_some(),
        "no gradient for the loaded word embeddings"
    );
    let q = &model.albert.encoder.attentions[0].query.weight;
    assert!(
        grads.get::<2>(q.id).is_some(),
        "no gradient for a loaded attention weight"
    );
}
