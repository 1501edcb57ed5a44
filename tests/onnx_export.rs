//! `pipeline model export --to onnx`: a model of every head (random weights, several layouts)
//! is exported, run by onnxruntime on token ids of two shapes (the batch and sequence axes are
//! dynamic), and its outputs compared with ours within 1e-4.
//!
//! onnxruntime is Python's: the test uses `PIPELINE_ONNX_PYTHON` (a python with onnxruntime
//! and numpy, e.g. a virtual environment's), else `python3`, and skips the comparison with a
//! note where neither imports onnxruntime. The export itself is checked either way.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use burn::tensor::{Device, Tensor};
use pipeline_albert::hf;
use pipeline_albert::model::AlbertInput;
use pipeline_albert::{
    Activation, AlbertConfig, AlbertForMultipleChoice, AlbertForQuestionAnswering,
    AlbertForSequenceClassification, AlbertForTokenClassification, Layout, LnType, ShareType,
};
use serde_json::{Value, json};

/// Runs the exported model on the feeds in argv[2] (a JSON list of {input name: nested
/// list}); prints a JSON list of {output name: {"shape": [...], "values": [...]}}.
const RUN_ORT: &str = r#"
import json, sys
import numpy as np
import onnxruntime as ort
opts = ort.SessionOptions()
opts.intra_op_num_threads = 1
sess = ort.InferenceSession(sys.argv[1], opts, providers=["CPUExecutionProvider"])
names = [o.name for o in sess.get_outputs()]
results = []
for feed in json.load(open(sys.argv[2])):
    arrays = {k: np.array(v, dtype=np.int64) for k, v in feed.items()}
    outs = sess.run(None, arrays)
    results.append({n: {"shape": list(o.shape), "values": o.reshape(-1).tolist()}
                    for n, o in zip(names, outs)})
print(json.dumps(results))
"#;

/// A python that imports onnxruntime and numpy, or `None` with a printed note.
fn python() -> Option<String> {
    let candidates = std::env::var("PIPELINE_ONNX_PYTHON")
        .into_iter()
        .chain(["python3".to_string()]);
    for python in candidates {
        let ok = Command::new(&python)
            .args(["-c", "import onnxruntime, numpy"])
            .output()
            .is_ok_and(|o| o.status.success());
        if ok {
            return Some(python);
        }
    }
    eprintln!(
        "note: no python with onnxruntime and numpy (set PIPELINE_ONNX_PYTHON, or \
         `pip install onnxruntime numpy`): skipping the onnxruntime comparison"
    );
    None
}

fn config(share: ShareType, act: Activation, layout: Layout, ln: LnType) -> AlbertConfig {
    let mut c = AlbertConfig::named("tiny").unwrap();
    c.vocab_size = 60;
    c.embedding_size = 12;
    c.hidden_size = 24;
    c.num_attention_heads = 4;
    c.intermediate_size = 40;
    c.num_hidden_layers = 3;
    c.max_position_embeddings = 32;
    // Wider than 0.02, so that logits are far from 0 and a wrong op shows.
    c.initializer_range = 0.3;
    (c.share_type, c.hidden_act, c.layout, c.ln_type) = (share, act, layout, ln);
    c
}

/// One head under test, loaded back as ours.
enum Model {
    Classifier(AlbertForSequenceClassification),
    Tagger(AlbertForTokenClassification),
    Span(AlbertForQuestionAnswering),
    Choice(AlbertForMultipleChoice),
}

/// A random model of `arch` saved in `dir` (with a vocab.txt), and loaded back as we run it.
fn make(dir: &Path, arch: &str, c: &AlbertConfig) -> Model {
    let d = Device::flex();
    let labels: Vec<String> = ["neg", "neu", "pos"].map(String::from).to_vec();
    match arch {
        "AlbertForSequenceClassification" => {
            let m = AlbertForSequenceClassification::new(c, 3, 0.0, &d);
            hf::save_classifier(dir, c, &m, &labels).unwrap();
        }
        "AlbertForTokenClassification" => {
            let m = AlbertForTokenClassification::new(c, 3, 0.0, &d);
            hf::save_token_classifier(dir, c, &m, &labels).unwrap();
        }
        "AlbertForQuestionAnswering" => {
            let m = AlbertForQuestionAnswering::new(c, &d);
            hf::save_question_answering(dir, c, &m).unwrap();
        }
        _ => {
            let m = AlbertForMultipleChoice::new(c, 0.0, &d);
            hf::save_multiple_choice(dir, c, &m).unwrap();
        }
    }
    std::fs::write(dir.join("vocab.txt"), "[PAD]\n[UNK]\n[CLS]\n[SEP]\n").unwrap();
    // Ours as `pipeline predict` loads it: from the saved files.
    match arch {
        "AlbertForSequenceClassification" => {
            Model::Classifier(hf::load_classifier(dir, &d).unwrap().1)
        }
        "AlbertForTokenClassification" => {
            Model::Tagger(hf::load_token_classifier(dir, &d).unwrap().1)
        }
        "AlbertForQuestionAnswering" => {
            Model::Span(hf::load_question_answering(dir, &d).unwrap().1)
        }
        _ => Model::Choice(hf::load_multiple_choice(dir, &d).unwrap().1),
    }
}

/// Token ids of `rows` rows of `seq` tokens (row `r` padded after `seq - r` tokens), the
/// second half of each row segment 1.
fn feed(rows: usize, seq: usize, vocab: usize, seed: usize) -> [Vec<i64>; 3] {
    let mut ids = Vec::new();
    let mut mask = Vec::new();
    let mut types = Vec::new();
    for r in 0..rows {
        let len = seq.saturating_sub(r).max(1);
        for p in 0..seq {
            let real = p < len;
            ids.push(if real {
                ((r * 31 + p * 7 + seed) % vocab) as i64
            } else {
                0
            });
            mask.push(real as i64);
            types.push((real && p >= len / 2) as i64);
        }
    }
    [ids, mask, types]
}

fn flat<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data()
        .convert::<f32>()
        .try_into_vec::<f32>()
        .unwrap()
}

/// Our outputs on `rows × seq` ids (`choices` rows a question for the choice head), by name.
fn ours(
    m: &Model,
    rows: usize,
    seq: usize,
    x: &[Vec<i64>; 3],
    choices: usize,
) -> Vec<(String, Vec<f32>)> {
    let d = Device::flex();
    let input = AlbertInput::from_rows(rows, seq, x[0].clone(), x[2].clone(), x[1].clone(), &d);
    match m {
        Model::Classifier(m) => vec![("logits".into(), flat(m.forward(&input)))],
        Model::Tagger(m) => vec![("logits".into(), flat(m.forward(&input)))],
        Model::Span(m) => {
            let s = m.forward(&input);
            vec![
                ("start_logits".into(), flat(s.start_logits)),
                ("end_logits".into(), flat(s.end_logits)),
            ]
        }
        Model::Choice(m) => vec![("logits".into(), flat(m.forward(&input, choices)))],
    }
}

/// Nests a flat row-major list into `dims`.
fn nest(values: &[i64], dims: &[usize]) -> Value {
    match dims {
        [_] => json!(values),
        [n, rest @ ..] => {
            let step = values.len() / n;
            Value::Array(values.chunks(step).map(|c| nest(c, rest)).collect())
        }
        [] => json!(values[0]),
    }
}

fn export(src: &Path, out: &Path) -> Value {
    let o = Command::new(common::BIN)
        .args(["model", "export", "--to", "onnx", "--model"])
        .arg(src)
        .arg("--out")
        .arg(out)
        .arg("--json")
        .output()
        .expect("running pipeline");
    let out = common::Output {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into(),
        stderr: String::from_utf8_lossy(&o.stderr).into(),
    };
    out.expect_code(0);
    out.json()
}

struct Case {
    arch: &'static str,
    config: AlbertConfig,
}

fn cases() -> Vec<Case> {
    use Activation::*;
    let g = Layout::Google;
    vec![
        Case {
            arch: "AlbertForSequenceClassification",
            config: config(ShareType::All, GeluNew, g, LnType::Postln),
        },
        Case {
            arch: "AlbertForSequenceClassification",
            config: config(ShareType::None, Gelu, g, LnType::Postln),
        },
        Case {
            arch: "AlbertForSequenceClassification",
            config: config(ShareType::Attention, Relu, Layout::AlbertZh, LnType::Preln),
        },
        Case {
            arch: "AlbertForTokenClassification",
            config: config(ShareType::All, GeluNew, g, LnType::Postln),
        },
        Case {
            arch: "AlbertForQuestionAnswering",
            config: config(ShareType::Ffn, Gelu, g, LnType::Postln),
        },
        Case {
            arch: "AlbertForMultipleChoice",
            config: config(ShareType::All, GeluNew, Layout::AlbertZh, LnType::Postln),
        },
    ]
}

#[test]
fn onnxruntime_gives_our_outputs_for_every_head_at_two_shapes() {
    let python = python();
    let tmp = tempfile::tempdir().unwrap();
    for (i, case) in cases().into_iter().enumerate() {
        let src = tmp.path().join(format!("model{i}"));
        let model = make(&src, case.arch, &case.config);
        let out = tmp.path().join(format!("onnx{i}"));
        let report = export(&src, &out);
        assert_eq!(report["architecture"], case.arch);
        assert_eq!(report["copied"], json!(["config.json", "vocab.txt"]));
        assert!(out.join("model.onnx").is_file() && out.join("config.json").is_file());
        let Some(python) = &python else { continue };
        compare(python, &out, &model, case.arch, case.config.vocab_size, i);
    }
}

/// onnxruntime's outputs against ours on two shapes of input.
fn compare(python: &str, out: &Path, model: &Model, arch: &str, vocab: usize, case: usize) {
    let choice = arch == "AlbertForMultipleChoice";
    // (questions or rows, choices, sequence): two batch sizes and two lengths.
    let shapes = [(2, 3, 7), (3, 2, 12)];
    let mut feeds = Vec::new();
    let mut expected = Vec::new();
    for (k, &(batch, choices, seq)) in shapes.iter().enumerate() {
        let rows = if choice { batch * choices } else { batch };
        let x = feed(rows, seq, vocab, k);
        let dims: Vec<usize> = if choice {
            vec![batch, choices, seq]
        } else {
            vec![rows, seq]
        };
        let names = ["input_ids", "attention_mask", "token_type_ids"];
        let feed: serde_json::Map<String, Value> = names
            .iter()
            .zip(&x)
            .map(|(n, v)| (n.to_string(), nest(v, &dims)))
            .collect();
        feeds.push(Value::Object(feed));
        expected.push(ours(model, rows, seq, &x, choices));
    }
    let got = run_ort(python, &out.join("model.onnx"), &Value::Array(feeds));
    for (k, outputs) in expected.iter().enumerate() {
        for (name, want) in outputs {
            let values: Vec<f32> = got[k][name]["values"]
                .as_array()
                .unwrap_or_else(|| panic!("case {case} {arch}: no output {name}: {}", got[k]))
                .iter()
                .map(|v| v.as_f64().unwrap() as f32)
                .collect();
            assert_eq!(values.len(), want.len(), "case {case} {arch} {name}: sizes");
            let diff = values
                .iter()
                .zip(want)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max);
            let scale = want.iter().map(|v| v.abs()).fold(0.0, f32::max);
            eprintln!(
                "case {case} {arch} shape {k} {name}: max |diff| {diff:.2e} (max |value| {scale:.2})"
            );
            assert!(
                diff < 1e-4,
                "case {case} {arch} shape {k} {name}: differs by {diff}"
            );
        }
    }
}

fn run_ort(python: &str, model: &Path, feeds: &Value) -> Value {
    let feeds_file: PathBuf = model.with_file_name("feeds.json");
    std::fs::write(&feeds_file, feeds.to_string()).unwrap();
    let o = Command::new(python)
        .args(["-c", RUN_ORT])
        .arg(model)
        .arg(&feeds_file)
        .output()
        .expect("starting python");
    assert!(
        o.status.success(),
        "onnxruntime failed on {}:\n{}",
        model.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("onnxruntime's outputs as JSON")
}

#[test]
fn a_model_without_a_task_head_is_refused_naming_its_config() {
    let tmp = tempfile::tempdir().unwrap();
    let c = config(
        ShareType::All,
        Activation::GeluNew,
        Layout::Google,
        LnType::Postln,
    );
    let m = pipeline_albert::AlbertForPreTraining::new(&c, &Device::flex());
    let src = tmp.path().join("pretrained");
    hf::save_pretraining(&src, &c, &m).unwrap();
    let out = tmp.path().join("out");
    let o = Command::new(common::BIN)
        .args(["model", "export", "--to", "onnx", "--model"])
        .arg(&src)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("config.json") && stderr.contains("AlbertForPreTraining"),
        "{stderr}"
    );
    assert!(!out.exists());
}
