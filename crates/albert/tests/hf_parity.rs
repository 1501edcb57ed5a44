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

/// The tag names of the token-classification fixture (tests/fixtures/make_hf_heads.py).
const TAGS: [&str; 7] = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"];

fn int_rows(io: &Io, key: &str, device: &Device) -> Tensor<2, burn::tensor::Int> {
    let (b, s, flat) = io.rows(key);
    Tensor::from_data(burn::tensor::TensorData::new(flat, [b, s]), device)
}

fn int_vec(io: &Io, key: &str, device: &Device) -> Tensor<1, burn::tensor::Int> {
    let v: Vec<i64> = io.json[key]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_i64().unwrap())
        .collect();
    let n = v.len();
    Tensor::from_data(burn::tensor::TensorData::new(v, [n]), device)
}

fn scalar(t: Tensor<1>) -> f32 {
    t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap()[0]
}

#[test]
fn token_classifier_matches_transformers() {
    let device = test_device();
    let dir = fixtures().join("token_classifier_gelu_new");
    let io = Io::load(&dir);
    let (_, model) = hf::load_token_classifier(&dir, &device).unwrap();
    assert_eq!(model.num_labels(), TAGS.len());
    let logits = model.forward(&io.input(&device));
    assert_eq!(logits.dims(), [3, 10, TAGS.len()]);
    let diff = max_diff(logits.clone(), &io.floats("logits"));
    eprintln!("token classifier: logits max |diff| = {diff:.2e}");
    assert!(diff < 1e-4, "token classifier logits differ by {diff}");

    // The loss ignores the −100 labels as transformers' CrossEntropyLoss does.
    let labels = int_rows(&io, "labels", &device);
    let (loss, _) = pipeline_albert::AlbertForTokenClassification::loss(logits, labels);
    let expected = io.json["loss"].as_f64().unwrap() as f32;
    let got = scalar(loss);
    assert!((got - expected).abs() < 1e-4, "loss {got} vs {expected}");
}

#[test]
fn question_answering_matches_transformers() {
    let device = test_device();
    let dir = fixtures().join("question_answering_gelu_new");
    let io = Io::load(&dir);
    let (_, model) = hf::load_question_answering(&dir, &device).unwrap();
    let out = model.forward(&io.input(&device));
    assert_eq!(out.start_logits.dims(), [3, 10]);
    for (name, t) in [
        ("start_logits", out.start_logits.clone()),
        ("end_logits", out.end_logits.clone()),
    ] {
        let diff = max_diff(t, &io.floats(name));
        eprintln!("question answering: {name} max |diff| = {diff:.2e}");
        assert!(diff < 1e-4, "{name} differ by {diff}");
    }
    let (loss, _) = pipeline_albert::AlbertForQuestionAnswering::loss(
        &out,
        int_vec(&io, "start_positions", &device),
        int_vec(&io, "end_positions", &device),
    );
    let expected = io.json["loss"].as_f64().unwrap() as f32;
    let got = scalar(loss);
    assert!((got - expected).abs() < 1e-4, "loss {got} vs {expected}");
}

#[test]
fn multiple_choice_matches_transformers() {
    let device = test_device();
    let dir = fixtures().join("multiple_choice_gelu_new");
    let io = Io::load(&dir);
    let (_, model) = hf::load_multiple_choice(&dir, &device).unwrap();
    let choices = io.json["num_choices"].as_u64().unwrap() as usize;
    let logits = model.forward(&io.input(&device), choices);
    assert_eq!(logits.dims(), [2, 3]);
    let diff = max_diff(logits.clone(), &io.floats("logits"));
    eprintln!("multiple choice: logits max |diff| = {diff:.2e}");
    assert!(diff < 1e-4, "multiple-choice logits differ by {diff}");
    // transformers' loss: the mean cross-entropy over the questions.
    let labels = int_vec(&io, "labels", &device);
    let ones = Tensor::ones([2], &device);
    let (loss, _) = pipeline_albert::model::weighted_cross_entropy(logits, labels, ones);
    let expected = io.json["loss"].as_f64().unwrap() as f32;
    let got = scalar(loss);
    assert!((got - expected).abs() < 1e-4, "loss {got} vs {expected}");
}

#[test]
fn multiple_choice_export_loads_back_in_rust_and_in_transformers() {
    let device = test_device();
    let dir = fixtures().join("multiple_choice_gelu_new");
    let io = Io::load(&dir);
    let (config, model) = hf::load_multiple_choice(&dir, &device).unwrap();
    let out = tempfile::tempdir().unwrap();
    hf::save_multiple_choice(out.path(), &config, &model).unwrap();

    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("config.json")).unwrap())
            .unwrap();
    assert_eq!(json["architectures"][0], "AlbertForMultipleChoice");
    let keys = safetensors_keys(&out.path().join("model.safetensors"));
    assert!(keys.iter().any(|k| k == "classifier.weight"), "{keys:?}");
    assert!(keys.iter().any(|k| k.contains("pooler")), "{keys:?}");

    let (_, again) = hf::load_multiple_choice(out.path(), &device).unwrap();
    let diff = max_diff(again.forward(&io.input(&device), 3), &io.floats("logits"));
    assert!(diff < 1e-4, "reloaded logits differ by {diff}");
    check_in_transformers(out.path(), &dir.join("io.json"), "multiple choice");
}

/// The tensor names of a safetensors file.
fn safetensors_keys(file: &Path) -> Vec<String> {
    let bytes = std::fs::read(file).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    header
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| *k != "__metadata__")
        .cloned()
        .collect()
}

/// Runs tests/fixtures/check_hf_export.py on `dir` against the expected outputs of `io`.
fn check_in_transformers(dir: &Path, io: &Path, what: &str) {
    let Some(py) = python_with_transformers() else {
        eprintln!(
            "skipped the transformers check of {what}: no python with torch and transformers (scripts/setup-python.sh)"
        );
        return;
    };
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/check_hf_export.py");
    let result = Command::new(&py)
        .arg(&script)
        .arg(dir)
        .arg(io)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&result.stdout);
    assert!(
        result.status.success(),
        "{what}: transformers does not reproduce our export\n{stdout}\n{}",
        String::from_utf8_lossy(&result.stderr)
    );
    eprintln!("{what}: transformers reproduces our export: {stdout}");
}

#[test]
fn token_classifier_export_loads_back_in_rust_and_in_transformers() {
    let device = test_device();
    let dir = fixtures().join("token_classifier_gelu_new");
    let io = Io::load(&dir);
    let (config, model) = hf::load_token_classifier(&dir, &device).unwrap();
    let out = tempfile::tempdir().unwrap();
    let labels: Vec<String> = TAGS.iter().map(|t| t.to_string()).collect();
    hf::save_token_classifier(out.path(), &config, &model, &labels).unwrap();

    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("config.json")).unwrap())
            .unwrap();
    assert_eq!(json["architectures"][0], "AlbertForTokenClassification");
    assert_eq!(json["id2label"]["3"], "B-LOC");
    assert_eq!(json["label2id"]["I-ORG"], 6);
    assert_eq!(hf::read_labels(out.path()).unwrap(), Some(labels));
    let keys = safetensors_keys(&out.path().join("model.safetensors"));
    assert!(keys.iter().any(|k| k == "classifier.weight"), "{keys:?}");
    assert!(!keys.iter().any(|k| k.contains("pooler")), "{keys:?}");

    let (_, again) = hf::load_token_classifier(out.path(), &device).unwrap();
    let diff = max_diff(again.forward(&io.input(&device)), &io.floats("logits"));
    assert!(diff < 1e-4, "reloaded logits differ by {diff}");
    check_in_transformers(out.path(), &dir.join("io.json"), "token classifier");
}

#[test]
fn question_answering_export_loads_back_in_rust_and_in_transformers() {
    let device = test_device();
    let dir = fixtures().join("question_answering_gelu_new");
    let io = Io::load(&dir);
    let (config, model) = hf::load_question_answering(&dir, &device).unwrap();
    let out = tempfile::tempdir().unwrap();
    hf::save_question_answering(out.path(), &config, &model).unwrap();

    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("config.json")).unwrap())
            .unwrap();
    assert_eq!(json["architectures"][0], "AlbertForQuestionAnswering");
    let keys = safetensors_keys(&out.path().join("model.safetensors"));
    assert!(keys.iter().any(|k| k == "qa_outputs.weight"), "{keys:?}");
    assert!(!keys.iter().any(|k| k.contains("pooler")), "{keys:?}");

    let (_, again) = hf::load_question_answering(out.path(), &device).unwrap();
    let diff = max_diff(
        again.forward(&io.input(&device)).end_logits,
        &io.floats("end_logits"),
    );
    assert!(diff < 1e-4, "reloaded end logits differ by {diff}");
    check_in_transformers(out.path(), &dir.join("io.json"), "question answering");
}

#[test]
fn a_model_without_the_head_is_a_clear_error() {
    let device = test_device();
    // A pretraining checkpoint has the backbone but neither per-position head.
    let pretrain = fixtures().join("gelu");
    let tmp = tempfile::tempdir().unwrap();
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(pretrain.join("config.json")).unwrap())
            .unwrap();
    config["num_labels"] = 7.into();
    std::fs::write(tmp.path().join("config.json"), config.to_string()).unwrap();
    std::fs::copy(
        pretrain.join("model.safetensors"),
        tmp.path().join("model.safetensors"),
    )
    .unwrap();
    let e = format!(
        "{:#}",
        hf::load_token_classifier(tmp.path(), &device).unwrap_err()
    );
    assert!(e.contains("classifier.weight"), "{e}");
    let e = format!(
        "{:#}",
        hf::load_question_answering(tmp.path(), &device).unwrap_err()
    );
    assert!(e.contains("qa_outputs"), "{e}");
    // Nor is a tagger a span extractor.
    let tagger = fixtures().join("token_classifier_gelu_new");
    let e = format!(
        "{:#}",
        hf::load_question_answering(&tagger, &device).unwrap_err()
    );
    assert!(e.contains("qa_outputs"), "{e}");
}

#[test]
fn per_position_heads_train_from_a_pretrained_backbone() {
    use burn::optim::GradientsParams;
    let device = test_device().autodiff();
    let dir = fixtures().join("gelu");
    let io = Io::load(&dir);
    let (config, backbone) = hf::load_backbone(&dir, &device).unwrap();
    let tagger = pipeline_albert::AlbertForTokenClassification::from_backbone(
        backbone.clone(),
        &config,
        3,
        0.1,
        &device,
    );
    let logits = tagger.forward(&io.input(&device));
    let grads = GradientsParams::from_grads(logits.sum().backward(), &tagger);
    assert!(grads.get::<2>(tagger.classifier.weight.id).is_some());
    let q = &tagger.albert.encoder.attentions[0].query.weight;
    assert!(
        grads.get::<2>(q.id).is_some(),
        "no gradient into the backbone"
    );

    let reader =
        pipeline_albert::AlbertForQuestionAnswering::from_backbone(backbone, &config, &device);
    let out = reader.forward(&io.input(&device));
    let grads = GradientsParams::from_grads(out.start_logits.sum().backward(), &reader);
    assert!(grads.get::<2>(reader.qa_outputs.weight.id).is_some());
}
