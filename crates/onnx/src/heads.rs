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

use burn::nn::Linear;
use burn::tensor::Device;
use pipeline_albert::hf;
use pipeline_albert::{
    AlbertConfig, AlbertForMultipleChoice, AlbertForQuestionAnswering,
    AlbertForSequenceClassification, AlbertForTokenClassification,
};
use serde::Serialize;

use crate::ExportError;
use crate::albert::{Inputs, backbone, linear_op, linear_weights, pooler, shape_range};
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
    let x = Inputs { ids, types, mask };
    let outputs = match head {
        Head::Classifier(m) => {
            let hidden = backbone(g, &m.albert, c, &x)?;
            let pooled = pooler(g, &m.albert, &hidden)?;
            let logits = dense(g, &pooled, &m.classifier, "classifier")?;
            let d = [Dim::Named("batch"), Dim::Fixed(m.num_labels())];
            vec![output(g, &logits, "logits", &d)]
        }
        Head::Tagger(m) => {
            let hidden = backbone(g, &m.albert, c, &x)?;
            let logits = dense(g, &hidden, &m.classifier, "classifier")?;
            let d = [
                Dim::Named("batch"),
                Dim::Named("sequence"),
                Dim::Fixed(m.num_labels()),
            ];
            vec![output(g, &logits, "logits", &d)]
        }
        Head::Span(m) => span(g, m, c, &x)?,
        Head::Choice(m) => choice_head(g, m, c, &x)?,
    };
    Ok(Signature { inputs, outputs })
}

fn output(g: &mut Graph, value: &str, name: &str, dims: &[Dim]) -> TensorSpec {
    g.output(value, name, FLOAT, dims);
    TensorSpec::new(name, FLOAT, dims)
}

/// A head's linear layer `l` (initializers named `name.*`) on `x`.
fn dense(g: &mut Graph, x: &str, l: &Linear, name: &str) -> Result<String, ExportError> {
    let w = linear_weights(g, name, l)?;
    g.set_scope(name);
    Ok(linear_op(g, &w, x))
}

/// `qa_outputs` on every position, split into start and end logits `[batch, sequence]`.
fn span(
    g: &mut Graph,
    m: &AlbertForQuestionAnswering,
    c: &AlbertConfig,
    x: &Inputs,
) -> Result<Vec<TensorSpec>, ExportError> {
    let hidden = backbone(g, &m.albert, c, x)?;
    let logits = dense(g, &hidden, &m.qa_outputs, "qa_outputs")?;
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
    x: &Inputs,
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
    let hidden = backbone(g, &m.albert, c, &flat_inputs)?;
    let pooled = pooler(g, &m.albert, &hidden)?;
    let scores = dense(g, &pooled, &m.classifier, "classifier")?;
    let logits = g.op("Reshape", &[&scores, &batch_choices], vec![]);
    let dims = [Dim::Named("batch"), Dim::Named("choices")];
    Ok(vec![output(g, &logits, "logits", &dims)])
}
