//! Exports of small random models of every head and layout: the graph is well formed, its
//! signature is the one documented, shared blocks are written once, and the files land.

use std::collections::HashSet;
use std::path::Path;

use burn::tensor::Device;
use pipeline_albert::hf;
use pipeline_albert::{
    Activation, AlbertConfig, AlbertForMultipleChoice, AlbertForQuestionAnswering,
    AlbertForSequenceClassification, AlbertForTokenClassification, Layout, LnType, ShareType,
};
use prost::Message;

use super::*;

fn tiny() -> AlbertConfig {
    let mut c = AlbertConfig::named("tiny").unwrap();
    c.vocab_size = 40;
    c.embedding_size = 8;
    c.hidden_size = 16;
    c.num_attention_heads = 4;
    c.intermediate_size = 24;
    c.num_hidden_layers = 3;
    c.max_position_embeddings = 32;
    c
}

/// A random model of `architecture` saved in `dir`, with a vocab.txt beside it.
fn save(dir: &Path, architecture: &str, c: &AlbertConfig) {
    let d = Device::flex();
    let labels: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
    match architecture {
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
    std::fs::write(dir.join("vocab.txt"), "[PAD]\n[UNK]\n").unwrap();
}

/// The exported model, decoded back.
fn decoded(out: &Path) -> proto::ModelProto {
    let bytes = std::fs::read(out.join("model.onnx")).unwrap();
    proto::ModelProto::decode(bytes.as_slice()).unwrap()
}

#[test]
fn every_head_exports_a_well_formed_graph_with_its_signature() {
    let tmp = tempfile::tempdir().unwrap();
    for arch in ARCHITECTURES {
        let src = tmp.path().join(arch);
        save(&src, arch, &tiny());
        let out = tmp.path().join(format!("{arch}.onnx"));
        let r = export(&src, &out).unwrap();
        let model = decoded(&out);
        let graph = model.graph.as_ref().unwrap();
        graph::check(graph).unwrap();
        assert_eq!(model.opset_import[0].version, 17);
        assert_eq!(r.nodes, graph.node.len());
        let inputs: Vec<&str> = graph.input.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(inputs, ["input_ids", "attention_mask", "token_type_ids"]);
        let outputs: Vec<&str> = graph.output.iter().map(|v| v.name.as_str()).collect();
        let expected: &[&str] = match *arch {
            "AlbertForQuestionAnswering" => &["start_logits", "end_logits"],
            _ => &["logits"],
        };
        assert_eq!(outputs, expected, "{arch}");
        let rank = r.inputs[0].shape.len();
        assert_eq!(
            rank,
            if *arch == "AlbertForMultipleChoice" {
                3
            } else {
                2
            }
        );
        assert_eq!(r.inputs[0].shape[0], "batch");
        assert_eq!(r.copied, ["config.json", "vocab.txt"]);
        assert_eq!(r.missing, ["tokenizer.json"]);
        assert!(out.join("vocab.txt").is_file() && out.join("config.json").is_file());
        let names: HashSet<&str> = graph.node.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names.len(), graph.node.len(), "node names are unique");
    }
}

#[test]
fn shared_blocks_are_written_once_and_unshared_ones_per_layer() {
    let tmp = tempfile::tempdir().unwrap();
    let mut counts = Vec::new();
    for share in [ShareType::All, ShareType::None, ShareType::Attention] {
        let mut c = tiny();
        c.share_type = share;
        let src = tmp.path().join(format!("{share:?}"));
        save(&src, "AlbertForSequenceClassification", &c);
        let out = tmp.path().join(format!("{share:?}.onnx"));
        let r = export(&src, &out).unwrap();
        let graph = decoded(&out).graph.unwrap();
        let queries = graph
            .initializer
            .iter()
            .filter(|t| t.name.ends_with("attention.query.weight"))
            .count();
        let ffns = graph
            .initializer
            .iter()
            .filter(|t| t.name.ends_with(".ffn.weight"))
            .count();
        counts.push((queries, ffns));
        // Every layer reads its blocks: as many LayerNormalizations either way.
        let norms = graph
            .node
            .iter()
            .filter(|n| n.op_type == "LayerNormalization")
            .count();
        assert_eq!(norms, 1 + 2 * c.num_hidden_layers, "{share:?}");
        let parameters = c.parameter_count().backbone as usize + 16 * 3 + 3;
        assert_eq!(r.parameters, parameters, "{share:?}: every weight once");
    }
    assert_eq!(counts, [(1, 1), (3, 3), (1, 3)]);
}

#[test]
fn every_activation_and_layout_exports() {
    let tmp = tempfile::tempdir().unwrap();
    let variants = [
        (Activation::Gelu, Layout::Google, LnType::Postln, "Erf"),
        (Activation::GeluNew, Layout::AlbertZh, LnType::Preln, "Tanh"),
        (Activation::Relu, Layout::Google, LnType::Postln, "Relu"),
    ];
    for (i, (act, layout, ln, op)) in variants.into_iter().enumerate() {
        let mut c = tiny();
        (c.hidden_act, c.layout, c.ln_type) = (act, layout, ln);
        let src = tmp.path().join(format!("m{i}"));
        save(&src, "AlbertForTokenClassification", &c);
        let out = tmp.path().join(format!("m{i}.onnx"));
        export(&src, &out).unwrap();
        let graph = decoded(&out).graph.unwrap();
        assert!(graph.node.iter().any(|n| n.op_type == op), "{act:?}: {op}");
        let projected = graph
            .initializer
            .iter()
            .any(|t| t.name == "albert.embeddings.word_embeddings_2");
        assert_eq!(projected, layout == Layout::AlbertZh);
    }
}

#[test]
fn bad_inputs_and_outputs_are_errors_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let e = export(&tmp.path().join("nothing"), &tmp.path().join("o")).unwrap_err();
    assert!(matches!(e, ExportError::Model(_)), "{e}");
    assert!(e.to_string().contains("config.json"), "{e}");

    let pretrained = tmp.path().join("pretrained");
    let c = tiny();
    let m = pipeline_albert::AlbertForPreTraining::new(&c, &Device::flex());
    hf::save_pretraining(&pretrained, &c, &m).unwrap();
    let e = export(&pretrained, &tmp.path().join("o"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("config.json") && e.contains("AlbertForPreTraining") && e.contains("no ONNX"),
        "{e}"
    );
    assert!(!tmp.path().join("o").exists(), "nothing is left behind");
    let config = pretrained.join("config.json");
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
    json.as_object_mut().unwrap().remove("architectures");
    std::fs::write(&config, json.to_string()).unwrap();
    let e = export(&pretrained, &tmp.path().join("o"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("no architecture is named"), "{e}");

    let src = tmp.path().join("classifier");
    save(&src, "AlbertForSequenceClassification", &c);
    let full = tmp.path().join("full");
    std::fs::create_dir(&full).unwrap();
    std::fs::write(full.join("keep.txt"), "mine").unwrap();
    let e = export(&src, &full).unwrap_err();
    assert!(matches!(e, ExportError::NotEmpty(_)), "{e}");
    assert_eq!(
        std::fs::read_to_string(full.join("keep.txt")).unwrap(),
        "mine"
    );
    // An empty directory is taken.
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    export(&src, &empty).unwrap();
    assert!(empty.join("model.onnx").is_file());
}
