//! `pipeline model forward`: the pretraining model's outputs (`AlbertForPreTraining`: MLM
//! and SOP logits, last hidden state, pooler output, as transformers names them) for the token
//! ids of a JSON file, written as JSON.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use burn::tensor::Tensor;
use pipeline_albert::device::{DeviceChoice, resolve};
use pipeline_albert::model::AlbertInput;
use pipeline_albert::{AlbertConfig, hf};
use serde_json::{Value, json};

use crate::global::Global;
use crate::model_source::{ModelSource, model_dir, open_model_dir};

/// Reads `key` of the input JSON as a `[batch, seq]` integer matrix.
fn matrix(v: &Value, key: &str, file: &Path) -> Result<Option<(usize, usize, Vec<i64>)>> {
    let Some(rows) = v.get(key) else {
        return Ok(None);
    };
    let rows = rows.as_array().with_context(|| {
        format!(
            "{}: `{key}` must be a list of lists of integers",
            file.display()
        )
    })?;
    let mut flat = Vec::new();
    let mut seq = None;
    for (i, row) in rows.iter().enumerate() {
        let row = row.as_array().with_context(|| {
            format!(
                "{}: `{key}[{i}]` must be a list of integers",
                file.display()
            )
        })?;
        match seq {
            None => seq = Some(row.len()),
            Some(s) if s != row.len() => bail!(
                "{}: `{key}[{i}]` has {} items but `{key}[0]` has {s}: pad every row to one length",
                file.display(),
                row.len()
            ),
            _ => {}
        }
        for (j, x) in row.iter().enumerate() {
            flat.push(x.as_i64().with_context(|| {
                format!(
                    "{}: `{key}[{i}][{j}]` is {x}, not an integer",
                    file.display()
                )
            })?);
        }
    }
    let seq = seq.unwrap_or(0);
    if rows.is_empty() || seq == 0 {
        bail!("{}: `{key}` is empty", file.display());
    }
    Ok(Some((rows.len(), seq, flat)))
}

fn tensor_json<const D: usize>(t: Tensor<D>) -> Value {
    let dims = t.dims();
    let data: Vec<f32> = t
        .into_data()
        .convert::<f32>()
        .try_into_vec::<f32>()
        .unwrap_or_default();
    fn nest(data: &[f32], dims: &[usize]) -> Value {
        if dims.len() == 1 {
            return json!(data);
        }
        let step: usize = dims[1..].iter().product();
        Value::Array(
            data.chunks(step.max(1))
                .map(|c| nest(c, &dims[1..]))
                .collect(),
        )
    }
    nest(&data, &dims)
}

/// `model forward`: the pretraining model's outputs for the token ids of a JSON file.
pub fn forward(
    global: &Global,
    src: &ModelSource,
    input: &Path,
    output: &Path,
    device: &str,
) -> Result<ExitCode> {
    let dir = model_dir(global, src)?;
    let device = resolve(DeviceChoice::parse(device)?)?;
    let rows = ForwardInput::read(input)?;
    // A TF checkpoint is imported into a temporary directory first.
    let dir = open_model_dir(&dir)?;
    let (config, model) = hf::load_pretraining(dir.path(), &device.device)?;
    rows.check(&config, input)?;
    let (b, s) = (rows.b, rows.s);
    let x = AlbertInput::from_rows(b, s, rows.ids, rows.types, rows.mask, &device.device);
    let (logits, sop, out) = model.forward_all(&x);
    let result = json!({
        "prediction_logits": tensor_json(logits),
        "sop_logits": tensor_json(sop),
        "last_hidden_state": tensor_json(out.last_hidden_state),
        "pooler_output": tensor_json(out.pooler_output),
    });
    std::fs::write(output, serde_json::to_string(&result)? + "\n")
        .with_context(|| format!("cannot write {}", output.display()))?;
    if !global.quiet {
        eprintln!(
            "wrote {} ({b}×{s} tokens through {}, device {})",
            output.display(),
            dir.path().display(),
            device.name
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The largest `model forward` input read. It is parsed whole into JSON values (about ten
/// times its size in memory for a list of small integers), and 64 MiB of token ids is some
/// 10^7 tokens, more than a forward pass on one machine takes at once.
const MAX_FORWARD_INPUT: u64 = 64 << 20;

/// The rows of `model forward`'s input file: `input_ids` (b × s), and `token_type_ids` and
/// `attention_mask` of the same shape (zeros and ones when absent).
struct ForwardInput {
    b: usize,
    s: usize,
    ids: Vec<i64>,
    types: Vec<i64>,
    mask: Vec<i64>,
}

impl ForwardInput {
    fn read(input: &Path) -> Result<ForwardInput> {
        let text = pipeline_bounded::read_to_string(input, MAX_FORWARD_INPUT, "a forward input")
            .context("cannot read the input")?;
        let v: Value = serde_json::from_str(&text).map_err(|e| {
            anyhow::anyhow!(
                "{}:{}:{}: not valid JSON: {e}",
                input.display(),
                e.line(),
                e.column()
            )
        })?;
        let (b, s, ids) = matrix(&v, "input_ids", input)?
            .with_context(|| format!("{}: no `input_ids`", input.display()))?;
        let types = match matrix(&v, "token_type_ids", input)? {
            Some((b2, s2, t)) if (b2, s2) == (b, s) => t,
            Some((b2, s2, _)) => bail!(
                "{}: token_type_ids is {b2}×{s2} but input_ids is {b}×{s}",
                input.display()
            ),
            None => vec![0; b * s],
        };
        let mask = match matrix(&v, "attention_mask", input)? {
            Some((b2, s2, m)) if (b2, s2) == (b, s) => m,
            Some((b2, s2, _)) => bail!(
                "{}: attention_mask is {b2}×{s2} but input_ids is {b}×{s}",
                input.display()
            ),
            None => vec![1; b * s],
        };
        Ok(ForwardInput {
            b,
            s,
            ids,
            types,
            mask,
        })
    }

    /// Token ids inside the vocabulary, token types inside the model's, no more positions
    /// than it has.
    fn check(&self, config: &AlbertConfig, input: &Path) -> Result<()> {
        if let Some(bad) = self
            .ids
            .iter()
            .find(|&&i| i < 0 || i as usize >= config.vocab_size)
        {
            bail!(
                "{}: token id {bad} is outside the vocabulary (0..{})",
                input.display(),
                config.vocab_size
            );
        }
        if let Some(bad) = self
            .types
            .iter()
            .find(|&&t| t < 0 || t as usize >= config.type_vocab_size)
        {
            bail!(
                "{}: token type {bad} is outside 0..{}",
                input.display(),
                config.type_vocab_size
            );
        }
        if self.s > config.max_position_embeddings {
            bail!(
                "{}: sequences of {} tokens, but the model has {} positions",
                input.display(),
                self.s,
                config.max_position_embeddings
            );
        }
        Ok(())
    }
}
