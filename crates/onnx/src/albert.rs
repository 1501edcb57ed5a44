//! The ALBERT backbone as ONNX nodes, read off our burn modules ([`pipeline_albert::model`]) so
//! that the graph computes what `pipeline predict` computes, op for op:
//!
//! - embeddings: word, position (a slice of the table as long as the input) and token-type
//!   rows gathered and summed, LayerNorm; albert_zh's layout projects the words to H first,
//!   Google's projects the normalised sum E→H (`embedding_hidden_mapping_in`);
//! - each layer: self-attention (`softmax(QKᵀ·scale + mask bias)·V`, the mask bias `-1e9` where
//!   `attention_mask` is 0, as ours), the feed-forward block with the config's activation, and
//!   the LayerNorms after each residual sum (post-LN) or on each block's input (pre-LN);
//! - shared blocks are written once as initializers and read by every layer that uses them
//!   (layer `i` uses attention block `i % attentions` and feed-forward block `i % ffns`, as
//!   [`pipeline_albert::model::AlbertEncoder::forward`] does), so a shared model's file is as
//!   small as its checkpoint;
//! - the pooler (`tanh(dense(h[CLS]))`), for the heads that read it.
//!
//! Linear weights are stored `[in, out]` (burn's layout, `MatMul`'s order) under Hugging Face's
//! names, so an initializer is found by the name its tensor has in `model.safetensors`.

use burn::module::Param;
use burn::nn::{LayerNorm, Linear};
use burn::tensor::Tensor;
use pipeline_albert::model::{AlbertAttention, AlbertEmbeddings, AlbertFfn};
use pipeline_albert::{Activation, Albert, AlbertConfig, Layout, LnType};

use crate::ExportError;
use crate::graph::Graph;
use crate::proto::{AttributeProto, FLOAT};

/// The three `[rows, sequence]` int64 values the backbone reads.
pub struct Inputs {
    /// Token ids.
    pub ids: String,
    /// Segment ids.
    pub types: String,
    /// 1 for a token, 0 for padding.
    pub mask: String,
}

/// A linear layer's initializers.
pub(crate) struct LinearW {
    weight: String,
    bias: Option<String>,
}

/// A LayerNorm's initializers.
struct NormW {
    gamma: String,
    beta: String,
}

struct AttentionW {
    query: LinearW,
    key: LinearW,
    value: LinearW,
    dense: LinearW,
    norm: NormW,
    heads: usize,
}

struct FfnW {
    ffn: LinearW,
    output: LinearW,
    norm: NormW,
}

/// A tensor's values, row-major, and its shape.
fn values<const D: usize>(name: &str, t: Tensor<D>) -> Result<(Vec<usize>, Vec<f32>), ExportError> {
    let dims = t.dims().to_vec();
    let data = t
        .into_data()
        .convert::<f32>()
        .try_into_vec::<f32>()
        .map_err(|e| ExportError::Tensor {
            name: name.into(),
            message: format!("{e:?}"),
        })?;
    Ok((dims, data))
}

/// Adds `param` as the initializer `name`.
fn param<const D: usize>(
    g: &mut Graph,
    name: &str,
    p: &Param<Tensor<D>>,
) -> Result<String, ExportError> {
    let (dims, data) = values(name, p.val())?;
    Ok(g.weight(name, &dims, &data))
}

pub(crate) fn linear_weights(
    g: &mut Graph,
    name: &str,
    l: &Linear,
) -> Result<LinearW, ExportError> {
    Ok(LinearW {
        weight: param(g, &format!("{name}.weight"), &l.weight)?,
        bias: match &l.bias {
            Some(b) => Some(param(g, &format!("{name}.bias"), b)?),
            None => None,
        },
    })
}

fn norm_w(g: &mut Graph, name: &str, n: &LayerNorm, width: usize) -> Result<NormW, ExportError> {
    let gamma = param(g, &format!("{name}.weight"), &n.gamma)?;
    let beta = match &n.beta {
        Some(b) => param(g, &format!("{name}.bias"), b)?,
        // LayerNormalization's bias is optional, but a zero one keeps every norm alike.
        None => g.weight(&format!("{name}.bias"), &[width], &vec![0.0; width]),
    };
    Ok(NormW { gamma, beta })
}

/// `x·W + b`.
pub(crate) fn linear_op(g: &mut Graph, l: &LinearW, x: &str) -> String {
    let y = g.op("MatMul", &[x, &l.weight], vec![]);
    match &l.bias {
        Some(b) => g.op("Add", &[&y, b], vec![]),
        None => y,
    }
}

/// LayerNormalization over the last axis.
fn norm(g: &mut Graph, n: &NormW, x: &str, eps: f64) -> String {
    let attrs = vec![
        AttributeProto::int("axis", -1),
        AttributeProto::float("epsilon", eps as f32),
    ];
    g.op("LayerNormalization", &[x, &n.gamma, &n.beta], attrs)
}

/// The backbone on `inputs`: the last hidden state, `[rows, sequence, H]`.
pub fn backbone(
    g: &mut Graph,
    albert: &Albert,
    c: &AlbertConfig,
    inputs: &Inputs,
) -> Result<String, ExportError> {
    g.set_scope("embeddings");
    let embedded = embeddings(g, &albert.embeddings, c, inputs)?;
    g.set_scope("encoder");
    // The encoder runs on `[rows·sequence, width]`: a linear layer on a 2-D value is one Gemm
    // with its bias in onnxruntime (MatMul+Add fusion), where a 3-D one leaves a separate Add
    // over the whole activation after every projection.
    let width = match c.layout {
        Layout::Google => c.embedding_size,
        Layout::AlbertZh => c.hidden_size,
    };
    let flat = g.ints(&[-1, width as i64]);
    let embedded = g.op("Reshape", &[&embedded, &flat], vec![]);
    let mut x = match &albert.encoder.embedding_hidden_mapping_in {
        Some(l) => {
            let w = linear_weights(g, "albert.encoder.embedding_hidden_mapping_in", l)?;
            linear_op(g, &w, &embedded)
        }
        None => embedded,
    };
    let bias = attention_bias(g, &inputs.mask);
    let attentions = attention_blocks(g, &albert.encoder.attentions, c)?;
    let ffns = ffn_blocks(g, &albert.encoder.ffns, c)?;
    let seq = g.op("Shape", &[&inputs.ids], shape_range(1, 2));
    let splits: Vec<String> = attentions
        .iter()
        .map(|a| head_split(g, &seq, a.heads, c.hidden_size))
        .collect();
    for i in 0..c.num_hidden_layers {
        g.set_scope(&format!("encoder/layer.{i}"));
        let a = &attentions[i % attentions.len()];
        let f = &ffns[i % ffns.len()];
        let split = &splits[i % splits.len()];
        x = layer(g, a, f, &x, &bias, split, c);
    }
    // Back to `[rows, sequence, H]` for the heads.
    g.set_scope("encoder");
    let rows_seq = g.op("Shape", &[&inputs.ids], vec![]);
    let h = g.ints(&[c.hidden_size as i64]);
    let unflat = g.op(
        "Concat",
        &[&rows_seq, &h],
        vec![AttributeProto::int("axis", 0)],
    );
    Ok(g.op("Reshape", &[&x, &unflat], vec![]))
}

/// The shape `[-1, sequence, heads, d]` that splits `[rows·sequence, H]` into heads (rows is
/// what is left over, so one shape serves every batch).
fn head_split(g: &mut Graph, seq: &str, heads: usize, hidden: usize) -> String {
    let rest = g.ints(&[-1]);
    let per_head = g.ints(&[heads as i64, (hidden / heads) as i64]);
    g.op(
        "Concat",
        &[&rest, seq, &per_head],
        vec![AttributeProto::int("axis", 0)],
    )
}

/// The pooler on the last hidden state: `tanh(dense(h[CLS]))`, `[rows, H]`.
pub fn pooler(g: &mut Graph, albert: &Albert, hidden: &str) -> Result<String, ExportError> {
    g.set_scope("pooler");
    let w = linear_weights(g, "albert.pooler", &albert.pooler)?;
    let zero = g.int_scalar(0);
    let cls = g.op(
        "Gather",
        &[hidden, &zero],
        vec![AttributeProto::int("axis", 1)],
    );
    let dense = linear_op(g, &w, &cls);
    Ok(g.op("Tanh", &[&dense], vec![]))
}

/// `[rows, sequence]` ids → `[rows, sequence, width]` normalised embeddings.
fn embeddings(
    g: &mut Graph,
    e: &AlbertEmbeddings,
    c: &AlbertConfig,
    inputs: &Inputs,
) -> Result<String, ExportError> {
    let prefix = "albert.embeddings";
    let words = param(
        g,
        &format!("{prefix}.word_embeddings.weight"),
        &e.word_embeddings.weight,
    )?;
    let positions = param(
        g,
        &format!("{prefix}.position_embeddings.weight"),
        &e.position_embeddings.weight,
    )?;
    let types = param(
        g,
        &format!("{prefix}.token_type_embeddings.weight"),
        &e.token_type_embeddings.weight,
    )?;
    let width = match c.layout {
        Layout::Google => c.embedding_size,
        Layout::AlbertZh => c.hidden_size,
    };
    let ln = norm_w(g, &format!("{prefix}.LayerNorm"), &e.layer_norm, width)?;
    let mut w = g.op("Gather", &[&words, &inputs.ids], vec![]);
    if let Some(p) = &e.word_embeddings_2 {
        // albert_zh's layout: the words projected to H before the sum.
        let projection = param(g, &format!("{prefix}.word_embeddings_2"), p)?;
        w = g.op("MatMul", &[&w, &projection], vec![]);
    }
    // The first `sequence` rows of the position table: positions 0..sequence.
    let seq = g.op("Shape", &[&inputs.ids], shape_range(1, 2));
    let (zero, axis) = (g.ints(&[0]), g.ints(&[0]));
    let pos = g.op("Slice", &[&positions, &zero, &seq, &axis], vec![]);
    let t = g.op("Gather", &[&types, &inputs.types], vec![]);
    let sum = g.op("Add", &[&w, &pos], vec![]);
    let sum = g.op("Add", &[&sum, &t], vec![]);
    Ok(norm(g, &ln, &sum, c.layer_norm_eps))
}

/// `Shape`'s `start` and `end` attributes: dimensions `start..end` of a value's shape.
pub fn shape_range(start: i64, end: i64) -> Vec<AttributeProto> {
    vec![
        AttributeProto::int("start", start),
        AttributeProto::int("end", end),
    ]
}

/// `[rows, sequence]` mask → `[rows, 1, 1, sequence]` bias: 0 where a key may be attended,
/// -1e9 where it is padding (ours; any value that underflows `exp` gives the same softmax).
fn attention_bias(g: &mut Graph, mask: &str) -> String {
    let m = g.op(
        "Cast",
        &[mask],
        vec![AttributeProto::int("to", FLOAT as i64)],
    );
    let one = g.float(1.0);
    let big = g.float(-1e9);
    let padding = g.op("Sub", &[&one, &m], vec![]);
    let bias = g.op("Mul", &[&padding, &big], vec![]);
    let axes = g.ints(&[1, 2]);
    g.op("Unsqueeze", &[&bias, &axes], vec![])
}

fn attention_blocks(
    g: &mut Graph,
    blocks: &[AlbertAttention],
    c: &AlbertConfig,
) -> Result<Vec<AttentionW>, ExportError> {
    let mut out = Vec::new();
    for (i, a) in blocks.iter().enumerate() {
        let p = format!("albert.encoder.albert_layer_groups.{i}.albert_layers.0.attention");
        out.push(AttentionW {
            query: linear_weights(g, &format!("{p}.query"), &a.query)?,
            key: linear_weights(g, &format!("{p}.key"), &a.key)?,
            value: linear_weights(g, &format!("{p}.value"), &a.value)?,
            dense: linear_weights(g, &format!("{p}.dense"), &a.dense)?,
            norm: norm_w(g, &format!("{p}.LayerNorm"), &a.layer_norm, c.hidden_size)?,
            heads: a.num_heads,
        });
    }
    Ok(out)
}

fn ffn_blocks(
    g: &mut Graph,
    blocks: &[AlbertFfn],
    c: &AlbertConfig,
) -> Result<Vec<FfnW>, ExportError> {
    let mut out = Vec::new();
    for (i, f) in blocks.iter().enumerate() {
        let p = format!("albert.encoder.albert_layer_groups.{i}.albert_layers.0");
        out.push(FfnW {
            ffn: linear_weights(g, &format!("{p}.ffn"), &f.ffn)?,
            output: linear_weights(g, &format!("{p}.ffn_output"), &f.ffn_output)?,
            norm: norm_w(
                g,
                &format!("{p}.full_layer_layer_norm"),
                &f.full_layer_layer_norm,
                c.hidden_size,
            )?,
        });
    }
    Ok(out)
}

/// One layer: attention then feed-forward, each with its residual and LayerNorm where
/// `ln_type` puts it ([`pipeline_albert::model::AlbertLayerOps::forward`]).
fn layer(
    g: &mut Graph,
    a: &AttentionW,
    f: &FfnW,
    x: &str,
    bias: &str,
    split: &str,
    c: &AlbertConfig,
) -> String {
    let eps = c.layer_norm_eps;
    match c.ln_type {
        LnType::Postln => {
            let attended = attend(g, a, x, bias, split, c.hidden_size);
            let sum = g.op("Add", &[x, &attended], vec![]);
            let h = norm(g, &a.norm, &sum, eps);
            let t = feed_forward(g, f, &h, c.hidden_act);
            let sum = g.op("Add", &[&h, &t], vec![]);
            norm(g, &f.norm, &sum, eps)
        }
        LnType::Preln => {
            let n = norm(g, &a.norm, x, eps);
            let attended = attend(g, a, &n, bias, split, c.hidden_size);
            let h = g.op("Add", &[x, &attended], vec![]);
            let n = norm(g, &f.norm, &h, eps);
            let t = feed_forward(g, f, &n, c.hidden_act);
            g.op("Add", &[&h, &t], vec![])
        }
    }
}

/// Multi-head self-attention, projected back to H; no residual, no LayerNorm.
fn attend(
    g: &mut Graph,
    a: &AttentionW,
    x: &str,
    bias: &str,
    split: &str,
    hidden: usize,
) -> String {
    let d = hidden / a.heads;
    // [rows·seq, H] → [rows, seq, heads, d] → [rows, heads, seq, d].
    let heads = |g: &mut Graph, l: &LinearW, perm: &[i64]| {
        let y = linear_op(g, l, x);
        let y = g.op("Reshape", &[&y, split], vec![]);
        g.op("Transpose", &[&y], vec![AttributeProto::ints("perm", perm)])
    };
    let q = heads(g, &a.query, &[0, 2, 1, 3]);
    // Keys straight to [rows, heads, d, seq]: QKᵀ without a second transpose.
    let k = heads(g, &a.key, &[0, 2, 3, 1]);
    let v = heads(g, &a.value, &[0, 2, 1, 3]);
    let scores = g.op("MatMul", &[&q, &k], vec![]);
    let scale = g.float((1.0 / (d as f64).sqrt()) as f32);
    let scores = g.op("Mul", &[&scores, &scale], vec![]);
    let scores = g.op("Add", &[&scores, bias], vec![]);
    let probs = g.op("Softmax", &[&scores], vec![AttributeProto::int("axis", -1)]);
    let context = g.op("MatMul", &[&probs, &v], vec![]);
    let context = g.op(
        "Transpose",
        &[&context],
        vec![AttributeProto::ints("perm", &[0, 2, 1, 3])],
    );
    let merge = g.ints(&[-1, hidden as i64]);
    let context = g.op("Reshape", &[&context, &merge], vec![]);
    linear_op(g, &a.dense, &context)
}

/// The feed-forward block's two projections and activation; no residual, no LayerNorm.
fn feed_forward(g: &mut Graph, f: &FfnW, x: &str, act: Activation) -> String {
    let h = linear_op(g, &f.ffn, x);
    let h = activation(g, &h, act);
    linear_op(g, &f.output, &h)
}

/// The config's activation: `gelu` exact (erf), `gelu_new` the tanh approximation
/// `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))` (written as transformers' `NewGELUActivation`,
/// the pattern onnxruntime's optimiser fuses), `relu`.
fn activation(g: &mut Graph, x: &str, act: Activation) -> String {
    let half = g.float(0.5);
    let one = g.float(1.0);
    match act {
        Activation::Relu => g.op("Relu", &[x], vec![]),
        Activation::Gelu => {
            let root2 = g.float(std::f32::consts::SQRT_2);
            let scaled = g.op("Div", &[x, &root2], vec![]);
            let erf = g.op("Erf", &[&scaled], vec![]);
            let plus = g.op("Add", &[&erf, &one], vec![]);
            let y = g.op("Mul", &[x, &plus], vec![]);
            g.op("Mul", &[&y, &half], vec![])
        }
        Activation::GeluNew => {
            let three = g.float(3.0);
            let coeff = g.float(0.044715);
            let root = g.float((2.0 / std::f64::consts::PI).sqrt() as f32);
            let cube = g.op("Pow", &[x, &three], vec![]);
            let cube = g.op("Mul", &[&cube, &coeff], vec![]);
            let inner = g.op("Add", &[x, &cube], vec![]);
            let inner = g.op("Mul", &[&inner, &root], vec![]);
            let t = g.op("Tanh", &[&inner], vec![]);
            let plus = g.op("Add", &[&t, &one], vec![]);
            let y = g.op("Mul", &[x, &half], vec![]);
            g.op("Mul", &[&y, &plus], vec![])
        }
    }
}
