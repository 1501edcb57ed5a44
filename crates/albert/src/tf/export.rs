//! Our model directory → a TF checkpoint in the layout the model has (Google's names, or
//! albert_zh's), with `albert_config.json`, `vocab.txt` and the `checkpoint` file beside it, so
//! that TensorFlow code (albert_zh's `run_classifier.py` with `init_checkpoint`, or
//! `tf.train.load_checkpoint`) takes it as it takes a published release.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use pipeline_tfckpt::{DType, Writer, write_checkpoint_file};
use safetensors::{Dtype, SafeTensors};
use serde::Serialize;
use serde_json::{Value, json};

use super::error::{Result, TfError};
use super::import::parts_present;
use super::mapping;
use crate::config::{Activation, AlbertConfig, ShareType};

/// What [`export`] wrote.
#[derive(Debug, Clone, Serialize)]
pub struct ExportReport {
    /// The checkpoint prefix written (`out/model.ckpt`).
    pub prefix: PathBuf,
    /// `google` or `albert_zh`.
    pub layout: &'static str,
    /// Tensors in the checkpoint.
    pub tensors_written: usize,
    /// Their bytes.
    pub bytes_written: u64,
    /// transformers-named tensors of the model with no TF counterpart (none expected).
    pub left_out: Vec<String>,
}

/// albert_zh's / google-research/albert's `albert_config.json` for `c`.
pub fn albert_config_json(c: &AlbertConfig) -> Value {
    let (groups, _) = c.share_type.blocks(c.num_hidden_layers);
    json!({
        "attention_probs_dropout_prob": c.attention_probs_dropout_prob,
        "hidden_act": match c.hidden_act {
            // The TF code's `gelu` is the tanh form.
            Activation::GeluNew => "gelu",
            Activation::Gelu => "gelu_exact",
            Activation::Relu => "relu",
        },
        "hidden_dropout_prob": c.hidden_dropout_prob,
        "embedding_size": c.embedding_size,
        "hidden_size": c.hidden_size,
        "initializer_range": c.initializer_range,
        "intermediate_size": c.intermediate_size,
        "max_position_embeddings": c.max_position_embeddings,
        "num_attention_heads": c.num_attention_heads,
        "num_hidden_layers": c.num_hidden_layers,
        "num_hidden_groups": if c.share_type == ShareType::None { c.num_hidden_layers } else { groups },
        "inner_group_num": 1,
        "type_vocab_size": c.type_vocab_size,
        "vocab_size": c.vocab_size,
        "layer_norm_eps": c.layer_norm_eps,
        "ln_type": c.ln_type.name(),
    })
}

/// The largest `model.safetensors` exported. The export holds the whole file (the checkpoint
/// is written from it): albert_zh's xxlarge is 0.9 GB in f32, so 16 GiB is far past any ALBERT,
/// and a device (refused anyway: regular files only) or a file still growing is not read on.
const MAX_WEIGHTS_BYTES: u64 = 16 << 30;

/// Writes `model_dir`'s model (config.json + model.safetensors) as `out/model.ckpt`.
pub fn export(model_dir: &Path, out: &Path) -> Result<ExportReport> {
    super::check_free(out, "the TF checkpoint")?;
    let config = exportable_config(model_dir)?;
    let file = model_dir.join("model.safetensors");
    let bytes = pipeline_bounded::read(&file, MAX_WEIGHTS_BYTES, "an exported model.safetensors")
        .map_err(TfError::ReadWeights)?;
    let st = SafeTensors::deserialize(&bytes).map_err(|e| TfError::NotSafetensors {
        path: file.clone(),
        message: e.to_string(),
    })?;
    let names: Vec<String> = st.names().into_iter().map(|s| s.to_string()).collect();
    let parts = parts_present(&names);

    let tmp = super::staging_dir(out, ".export-")?;
    let mut w = TensorCopier {
        st: &st,
        file: &file,
        writer: Writer::create(&tmp.path().join("model.ckpt"), 1)?,
        used: HashSet::new(),
        bytes_written: 0,
    };
    for m in mapping(&config).iter().filter(|m| parts.contains(&m.part)) {
        w.add(&m.tf, &m.hf, m.transpose, &m.shape)?;
    }
    // A fine-tuned classifier: albert_zh's run_classifier.py names it output_weights
    // [labels, H] (used transposed, like the SOP head) and output_bias.
    if let (Ok(cw), Ok(_)) = (st.tensor("classifier.weight"), st.tensor("classifier.bias")) {
        let labels = cw.shape().first().copied().unwrap_or(0);
        w.add(
            "output_weights",
            "classifier.weight",
            false,
            &[labels, config.hidden_size],
        )?;
        w.add("output_bias", "classifier.bias", false, &[labels])?;
    }
    let TensorCopier {
        writer,
        used,
        bytes_written,
        ..
    } = w;
    let tensors_written = used.len();
    writer.finish()?;
    write_checkpoint_file(tmp.path(), "model.ckpt")?;
    std::fs::write(
        tmp.path().join("albert_config.json"),
        serde_json::to_string_pretty(&albert_config_json(&config))? + "\n",
    )?;
    let vocab = model_dir.join("vocab.txt");
    if vocab.is_file() {
        super::copy(&vocab, tmp.path().join("vocab.txt"))?;
    }
    let left_out = left_out(&names, &used);
    if let Some(example) = left_out.first() {
        return Err(TfError::LeftOut {
            path: file,
            count: left_out.len(),
            layout: config.layout.name(),
            example: example.clone(),
        });
    }
    super::clear_out(out)?;
    super::publish(tmp, out, "the checkpoint")?;
    Ok(ExportReport {
        prefix: out.join("model.ckpt"),
        layout: config.layout.name(),
        tensors_written,
        bytes_written,
        left_out,
    })
}

/// The model's config, if TensorFlow has a layout for its sharing.
fn exportable_config(model_dir: &Path) -> Result<AlbertConfig> {
    let config = crate::hf::read_config(model_dir)?;
    if matches!(config.share_type, ShareType::Attention | ShareType::Ffn) {
        return Err(TfError::NoTfLayout {
            dir: model_dir.to_path_buf(),
            share_type: config.share_type,
        });
    }
    Ok(config)
}

/// The model's tensors that no TF name took (transformers' tied decoder and position ids aside).
fn left_out(names: &[String], used: &HashSet<String>) -> Vec<String> {
    names
        .iter()
        .filter(|n| !used.contains(*n) && !n.starts_with("predictions.decoder."))
        .filter(|n| *n != "albert.embeddings.position_ids")
        .cloned()
        .collect()
}

/// Copies tensors from `model.safetensors` into the checkpoint, noting which were taken.
struct TensorCopier<'a> {
    st: &'a SafeTensors<'a>,
    file: &'a Path,
    writer: Writer,
    used: HashSet<String>,
    bytes_written: u64,
}

impl TensorCopier<'_> {
    /// Writes transformers' tensor `hf` as `tf` (transposed for a kernel), checking its dtype
    /// and that its TF shape is `expect`.
    fn add(&mut self, tf: &str, hf: &str, transpose: bool, expect: &[usize]) -> Result<()> {
        let path = || self.file.to_path_buf();
        let view = self.st.tensor(hf).map_err(|_| TfError::MissingWeight {
            path: path(),
            tensor: hf.to_string(),
        })?;
        if view.dtype() != Dtype::F32 {
            return Err(TfError::NotF32 {
                path: path(),
                tensor: hf.to_string(),
                dtype: format!("{:?}", view.dtype()),
            });
        }
        let values: Vec<f32> = view
            .data()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let shape = view.shape().to_vec();
        let (shape, values) = if transpose && shape.len() == 2 {
            (
                vec![shape[1], shape[0]],
                pipeline_tfckpt::transpose(&values, shape[0], shape[1]),
            )
        } else {
            (shape, values)
        };
        if shape != expect {
            return Err(TfError::WeightShape {
                path: path(),
                tensor: hf.to_string(),
                tf: tf.to_string(),
                shape,
                expected: expect.to_vec(),
            });
        }
        self.bytes_written += values.len() as u64 * 4;
        self.used.insert(hf.to_string());
        self.writer
            .add(0, tf, DType::F32, &shape, bytemuck::cast_slice(&values))?;
        Ok(())
    }
}
