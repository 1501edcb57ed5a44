//! The fine-tuning heads as ONNX nodes on the backbone, with the graph's inputs and outputs:
//!
//! | head (config.json's `architectures`) | inputs | outputs |
//! | --- | --- | --- |
//! | `AlbertForSequenceClassification` | `[batch, sequence]` | `logits` `[batch, labels]` |
//! | `AlbertForTokenClassification` | `[batch, sequence]` | `logits` `[batch, sequence, labels]` |
//! | `AlbertForQuestionAnswering` | `[batch, sequence]` | `start_logits`, `end_logits` `[batch, sequence]` |
//! | `AlbertForMultipleChoice` | `[batch, choices, sequence]` | `logits` `[batch, choices]` |
//!
//! The inputs are `input_ids`, `attention_mask` and `token_type_ids`, int64, as transformers'
//! ONNX exports name them; `batch`, `sequence` and `choices` are dynamic axes.

use std::path::Path;

use burn::tensor::Device;
use pipeline_albert::hf;
use pipeline_albert::{
    AlbertConfig, AlbertForMultipleChoice, AlbertForQuestionAnswering,
    AlbertForSequenceClassification, AlbertForTokenClassification,
};
use serde::Serialize;

use crate::ExportError;
use crate::albert::{Inputs, backbone, shape_range};
use crate::graph::Graph;
use crate::proto::{AttributeProto, Dim, FLOAT, INT64};

/// The architectures the exporter writes.
pub const ARCHITECTURES: &[&str] = &[
    "AlbertForSequenceClassification",
    "AlbertForTokenClassification",
    "AlbertForQuestionAnswering",
    "AlbertForMultipleChoice",
];

/// A fine-tuned model, its head as config.json's `architectures` names it.
pub enum Head {
    /// Logits per class of a sequence (or one score for a regressor).
    Classifier(AlbertForSequenceClassification),
    /// Logits per tag of every position.
    Tagger(AlbertForTokenClassification),
    /// Start and end logits of every position.
    Span(AlbertForQuestionAnswering),
    /// A score per choice.
    Choice(AlbertForMultipleChoice),
}

/// A graph input or output: its name, element type and dimensions (a name for a dynamic one).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TensorSpec {
    /// The value's name.
    pub name: String,
    /// `int64` or `float32`.
    pub dtype: &'static str,
    /// Each dimension: a number, or the dynamic axis' name.
    pub shape: Vec<serde_json::Value>,
}

impl TensorSpec {
    fn new(name: &str, elem_type: i32, dims: &[Dim]) -> TensorSpec {
        TensorSpec {
            name: name.into(),
            dtype: if elem_type == INT64 {
                "int64"
            } else {
                "float32"
            },
            shape: dims
                .iter()
                .map(|d| match d {
                    Dim::Fixed(n) => serde_json::json!(n),
                    Dim::Named(s) => serde_json::json!(s),
                })
                .collect(),
        }
    }
}

/// Loads the model in `dir` with the head config.json's `architectures` names, on the CPU.
pub fn load(dir: &Path, architecture: &str) -> Result<(AlbertConfig, Head), ExportError> {
    let device = Device::flex();
    Ok(match architecture {
        "AlbertForSequenceClassification" => {
            let (c, m) = hf::load_classifier(dir, &device)?;
            (c, Head::Classifier(m))
        }
        "AlbertForTokenClassification" => {
            let (c, m) = hf::load_token_classifier(dir, &device)?;
            (c, Head::Tagger(m))
        }
        "AlbertForQuestionAnswering" => {
            let (c, m) = hf::load_question_answering(dir, &device)?;
            (c, Head::Span(m))
        }
        "AlbertForMultipleChoice" => {
            let (c, m) = hf::load_multiple_choice(dir, &device)?;
            (c, Head::Choice(m))
        }
        other => {
            return Err(ExportError::Architecture {
                path: dir.join("config.json"),
                found: other.to_string(),
            });
        }
    })
}

/// The graph's inputs and outputs, as declared.
pub struct Signature {
    /// `input_ids`, `attention_mask`, `token_type_ids`.
    pub inputs: Vec<TensorSpec>,
    /// The head's outputs.
    pub outputs: Vec<TensorSpec>,
}

const INPUT_NAMES: [&str; 3] = ["input_ids", "attention_mask", "token_type_ids"];

/// Writes the model's graph (inputs, backbone, head, outputs) into `g`.
pub fn emit(g: &mut Graph, head: &Head, c: &AlbertConfig) -> Result<Signature, ExportError> {
    let choice = matches!(head, Head::Choice(_));
    let dims: Vec<Dim> = if choice {
        vec![
            Dim::Named("batch"),
            Dim::Named("choices"),
            Dim::Named("sequence"),
        ]
    } else {
        vec![Dim::Named("batch"), Dim::Named("sequence")]
    };
    let names = INPUT_NAMES.map(|n| g.input(n, INT64, &dims));
    let inputs = INPUT_NAMES
        .iter()
        .map(|n| TensorSpec::new(n, INT64, &dims))
        .collect();
    let [ids, mask, types] = names;
    let outputs = match head {
        Head::Classifier(m) => {
            let x = Inputs { ids, types, mask };
            let b = backbone(g, &m.albert, c, &x, true)?;
            let n = m.num_labels();
            let pooled = b.pooled.unwrap_or(b.hidden);
            let logits = classify(g, &pooled, &m.classifier, "classifier")?;
            vec![output(
                g,
                &logits,
                "logits",
                &[Dim::Named("batch"), Dim::Fixed(n)],
            )]
        }
        Head::Tagger(m) => {
            let x = Inputs { ids, types, mask };
            let b = backbone(g, &m.albert, c, &x, false)?;
            let w = crate::albert::linear_weights(g, "classifier", &m.classifier)?;
            g.set_scope("classifier");
            let logits = crate::albert::linear_op(g, &w, &b.hidden);
            let d = [
                Dim::Named("batch"),
                Dim::Named("sequence"),
                Dim::Fixed(m.num_labels()),
            ];
            vec![output(g, &logits, "logits", &d)]
        }
        Head::Span(m) => span(g, m, c, Inputs { ids, types, mask })?,
        Head::Choice(m) => choice_head(g, m, c, Inputs { ids, types, mask })?,
    };
    Ok(Signature { inputs, outputs })
}

fn output(g: &mut Graph, value: &str, name: &str, dims: &[Dim]) -> TensorSpec {
    g.output(value, name, FLOAT, dims);
    TensorSpec::new(name, FLOAT, dims)
}

/// The classifier on the pooled `[CLS]`: `[rows, outputs]`.
fn classify(
    g: &mut Graph,
    pooled: &str,
    classifier: &burn::nn::Linear,
    name: &str,
) -> Result<String, ExportError> {
    let w = crate::albert::linear_weights(g, name, classifier)?;
    g.set_scope(name);
    Ok(crate::albert::linear_op(g, &w, pooled))
}

/// `qa_outputs` on every position, split into start and end logits `[batch, sequence]`.
fn span(
    g: &mut Graph,
    m: &AlbertForQuestionAnswering,
    c: &AlbertConfig,
    x: Inputs,
) -> Result<Vec<TensorSpec>, ExportError> {
    let b = backbone(g, &m.albert, c, &x, false)?;
    let w = crate::albert::linear_weights(g, "qa_outputs", &m.qa_outputs)?;
    g.set_scope("qa_outputs");
    let logits = crate::albert::linear_op(g, &w, &b.hidden);
    // Split into equal halves along the last axis (opset 17: as many parts as outputs).
    let parts = g.op_n("Split", &[&logits], 2, vec![AttributeProto::int("axis", 2)]);
    let axis = g.ints(&[2]);
    let dims = [Dim::Named("batch"), Dim::Named("sequence")];
    let mut outputs = Vec::new();
    for (part, name) in parts.iter().zip(["start_logits", "end_logits"]) {
        let squeezed = g.op("Squeeze", &[part, &axis], vec![]);
        outputs.push(output(g, &squeezed, name, &dims));
    }
    Ok(outputs)
}

/// Every (prompt, choice) row scored: the `[batch, choices, sequence]` inputs flattened to
/// `[batch·choices, sequence]` rows, a score each, reshaped back to `[batch, choices]`.
fn choice_head(
    g: &mut Graph,
    m: &AlbertForMultipleChoice,
    c: &AlbertConfig,
    x: Inputs,
) -> Result<Vec<TensorSpec>, ExportError> {
    g.set_scope("choices");
    let seq = g.op("Shape", &[&x.ids], shape_range(2, 3));
    let minus_one = g.ints(&[-1]);
    let rows = g.op(
        "Concat",
        &[&minus_one, &seq],
        vec![AttributeProto::int("axis", 0)],
    );
    let flat = |g: &mut Graph, v: &str| g.op("Reshape", &[v, &rows], vec![]);
    let flat_inputs = Inputs {
        ids: flat(g, &x.ids),
        types: flat(g, &x.types),
        mask: flat(g, &x.mask),
    };
    let batch_choices = g.op("Shape", &[&x.ids], shape_range(0, 2));
    let b = backbone(g, &m.albert, c, &flat_inputs, true)?;
    let pooled = b.pooled.unwrap_or(b.hidden);
    let scores = classify(g, &pooled, &m.classifier, "classifier")?;
    let logits = g.op("Reshape", &[&scores, &batch_choices], vec![]);
    let dims = [Dim::Named("batch"), Dim::Named("choices")];
    Ok(vec![output(g, &logits, "logits", &dims)])
}
