//! TensorFlow 1 checkpoints of google-research/albert and brightmart/albert_zh, in and out.
//!
//! The tensors are read and written with `pipeline-tfckpt` (no TensorFlow). This module knows
//! the two naming schemes and maps them onto transformers' names — the names our
//! `model.safetensors` uses (see [`crate::hf`]) — one tensor at a time:
//!
//! - Google's (`bert/encoder/transformer/group_0/inner_group_0/attention_1/self/query/kernel`, …;
//!   also albert_zh's `*_google` releases) is transformers' `AlbertForPreTraining` one to one;
//!   transformers' `load_tf_weights_in_albert` is the reference for the mapping.
//! - albert_zh's own (`bert/embeddings/word_embeddings_2`, `bert/encoder/layer_shared/…`) has
//!   another embedding block and MLM head: [`Layout::AlbertZh`].
//!
//! TF kernels are stored `[in, out]`, PyTorch's linear weights `[out, in]`: kernels are
//! transposed both ways; embeddings, LayerNorms and `cls/seq_relationship/output_weights`
//! (already `[2, H]`) are not. [`import`] and [`export`] do the file work; [`detect`] reads
//! the architecture from names and shapes alone (the index is enough).

mod export;
mod import;

use std::collections::BTreeSet;

use anyhow::{Result, bail};
use pipeline_tfckpt::Checkpoint;

use crate::config::{AlbertConfig, Layout, ShareType};

pub use export::{ExportReport, export};
pub use import::{ImportReport, ModelDir, TfInfo, find_config, import, inspect};

/// One weight: its TF name, its transformers name, whether the TF tensor is a kernel stored
/// transposed, and its TF shape as the config says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapped {
    pub tf: String,
    pub hf: String,
    pub transpose: bool,
    pub shape: Vec<usize>,
    /// Which part of the model it belongs to (heads are optional on export).
    pub part: Part,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Backbone,
    MlmHead,
    SopHead,
}

/// What the names and shapes of a checkpoint say about the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detected {
    pub layout: Layout,
    pub share_type: ShareType,
    /// Distinct encoder blocks (groups, or albert_zh's `layer_N`).
    pub blocks: usize,
    pub vocab_size: usize,
    pub embedding_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub max_position_embeddings: usize,
    pub type_vocab_size: usize,
}

const ZH_PROJECTION: &str = "bert/embeddings/word_embeddings_2";
const GOOGLE_MAPPING: &str = "bert/encoder/embedding_hidden_mapping_in/kernel";

/// The layout, sharing and sizes a checkpoint's names and shapes show (its index is enough).
pub fn detect(ckpt: &Checkpoint) -> Result<Detected> {
    let index = ckpt.index_path.display();
    let names: Vec<&str> = ckpt.names().collect();
    let has = |n: &str| names.contains(&n);
    let zh = has(ZH_PROJECTION) || names.iter().any(|n| n.starts_with("bert/encoder/layer_"));
    let google = has(GOOGLE_MAPPING)
        || names
            .iter()
            .any(|n| n.starts_with("bert/encoder/transformer/"));
    let layout = match (google, zh) {
        (true, false) => Layout::Google,
        (false, true) => Layout::AlbertZh,
        (true, true) => bail!(
            "{index}: holds both google-research/albert (bert/encoder/transformer/…) and \
             albert_zh (bert/encoder/layer_…, word_embeddings_2) tensors: which model is it?"
        ),
        (false, false) => bail!(
            "{index}: not an ALBERT checkpoint: no bert/encoder/transformer/… \
             (google-research/albert) nor bert/encoder/layer_shared/… (albert_zh) tensors \
             among its {} names",
            names.len()
        ),
    };
    let numbered = |prefix: &str| -> BTreeSet<usize> {
        names
            .iter()
            .filter_map(|n| n.strip_prefix(prefix))
            .filter_map(|rest| rest.split('/').next()?.parse().ok())
            .collect()
    };
    let (share_type, blocks) = match layout {
        Layout::Google => {
            let inner = numbered("bert/encoder/transformer/group_0/inner_group_");
            if inner.iter().any(|&i| i > 0) {
                bail!(
                    "{index}: inner_group_num > 1 (inner_group_{} exists), which no published \
                     ALBERT uses and this model does not support",
                    inner.last().copied().unwrap_or(0)
                );
            }
            let groups = numbered("bert/encoder/transformer/group_");
            let n = groups.len();
            if groups.iter().copied().ne(0..n) || n == 0 {
                bail!("{index}: the encoder groups are not group_0…group_N: {groups:?}");
            }
            (
                if n == 1 {
                    ShareType::All
                } else {
                    ShareType::None
                },
                n,
            )
        }
        Layout::AlbertZh => {
            if names
                .iter()
                .any(|n| n.starts_with("bert/encoder/layer_shared/"))
            {
                (ShareType::All, 1)
            } else {
                let layers = numbered("bert/encoder/layer_");
                let n = layers.len();
                if layers.iter().copied().ne(0..n) || n == 0 {
                    bail!("{index}: the encoder layers are not layer_0…layer_N: {layers:?}");
                }
                (ShareType::None, n)
            }
        }
    };
    let dims = |name: &str, rank: usize| -> Result<Vec<usize>> {
        let (_, shape) = ckpt.spec(name).map_err(anyhow::Error::new)?;
        if shape.len() != rank {
            bail!("{index}: tensor {name} has shape {shape:?}, expected {rank} dimensions");
        }
        Ok(shape)
    };
    let word = dims("bert/embeddings/word_embeddings", 2)?;
    let hidden = match layout {
        Layout::Google => dims(GOOGLE_MAPPING, 2)?[1],
        Layout::AlbertZh => dims(ZH_PROJECTION, 2)?[1],
    };
    let ffn = match layout {
        Layout::Google => {
            "bert/encoder/transformer/group_0/inner_group_0/ffn_1/intermediate/dense/kernel"
                .to_string()
        }
        Layout::AlbertZh if share_type == ShareType::All => {
            "bert/encoder/layer_shared/intermediate/dense/kernel".to_string()
        }
        Layout::AlbertZh => "bert/encoder/layer_0/intermediate/dense/kernel".to_string(),
    };
    Ok(Detected {
        layout,
        share_type,
        blocks,
        vocab_size: word[0],
        embedding_size: word[1],
        hidden_size: hidden,
        intermediate_size: dims(&ffn, 2)?[1],
        max_position_embeddings: dims("bert/embeddings/position_embeddings", 2)?[0],
        type_vocab_size: dims("bert/embeddings/token_type_embeddings", 2)?[0],
    })
}

/// Every weight of a model of `config` (its layout and sharing), TF name ↔ transformers name.
pub fn mapping(config: &AlbertConfig) -> Vec<Mapped> {
    let c = config;
    let (v, e, h, i) = (
        c.vocab_size,
        c.embedding_size,
        c.hidden_size,
        c.intermediate_size,
    );
    let w = crate::albert_zh_layout::embedding_width(c);
    let mut out = Vec::new();
    let mut add = |tf: String, hf: String, transpose: bool, shape: Vec<usize>, part: Part| {
        out.push(Mapped {
            tf,
            hf,
            transpose,
            shape,
            part,
        })
    };
    // A dense layer: kernel [in, out] transposed into weight [out, in], and the bias.
    let dense = |add: &mut dyn FnMut(String, String, bool, Vec<usize>, Part),
                 tf: &str,
                 hf: &str,
                 n_in: usize,
                 n_out: usize,
                 part: Part| {
        add(
            format!("{tf}/kernel"),
            format!("{hf}.weight"),
            true,
            vec![n_in, n_out],
            part,
        );
        add(
            format!("{tf}/bias"),
            format!("{hf}.bias"),
            false,
            vec![n_out],
            part,
        );
    };
    let norm = |add: &mut dyn FnMut(String, String, bool, Vec<usize>, Part),
                tf: &str,
                hf: &str,
                n: usize,
                part: Part| {
        add(
            format!("{tf}/gamma"),
            format!("{hf}.weight"),
            false,
            vec![n],
            part,
        );
        add(
            format!("{tf}/beta"),
            format!("{hf}.bias"),
            false,
            vec![n],
            part,
        );
    };
    let b = Part::Backbone;
    let emb = "albert.embeddings";
    add(
        "bert/embeddings/word_embeddings".into(),
        format!("{emb}.word_embeddings.weight"),
        false,
        vec![v, e],
        b,
    );
    add(
        "bert/embeddings/position_embeddings".into(),
        format!("{emb}.position_embeddings.weight"),
        false,
        vec![c.max_position_embeddings, w],
        b,
    );
    add(
        "bert/embeddings/token_type_embeddings".into(),
        format!("{emb}.token_type_embeddings.weight"),
        false,
        vec![c.type_vocab_size, w],
        b,
    );
    norm(
        &mut add,
        "bert/embeddings/LayerNorm",
        &format!("{emb}.LayerNorm"),
        w,
        b,
    );
    let (n_attn, _) = c.share_type.blocks(c.num_hidden_layers);
    match c.layout {
        Layout::Google => {
            dense(
                &mut add,
                "bert/encoder/embedding_hidden_mapping_in",
                "albert.encoder.embedding_hidden_mapping_in",
                e,
                h,
                b,
            );
        }
        Layout::AlbertZh => add(
            ZH_PROJECTION.into(),
            format!("{emb}.word_embeddings_2"),
            false,
            vec![e, h],
            b,
        ),
    }
    for g in 0..n_attn {
        let hf = format!("albert.encoder.albert_layer_groups.{g}.albert_layers.0");
        let (tf, attn, attn_out, attn_ln, ffn, ffn_out, ffn_ln) = match c.layout {
            Layout::Google => (
                format!("bert/encoder/transformer/group_{g}/inner_group_0"),
                "attention_1/self",
                "attention_1/output/dense",
                "LayerNorm",
                "ffn_1/intermediate/dense",
                "ffn_1/intermediate/output/dense",
                "LayerNorm_1",
            ),
            Layout::AlbertZh => (
                if c.share_type == ShareType::All {
                    "bert/encoder/layer_shared".to_string()
                } else {
                    format!("bert/encoder/layer_{g}")
                },
                "attention/self",
                "attention/output/dense",
                "attention/output/LayerNorm",
                "intermediate/dense",
                "output/dense",
                "output/LayerNorm",
            ),
        };
        for p in ["query", "key", "value"] {
            dense(
                &mut add,
                &format!("{tf}/{attn}/{p}"),
                &format!("{hf}.attention.{p}"),
                h,
                h,
                b,
            );
        }
        dense(
            &mut add,
            &format!("{tf}/{attn_out}"),
            &format!("{hf}.attention.dense"),
            h,
            h,
            b,
        );
        norm(
            &mut add,
            &format!("{tf}/{attn_ln}"),
            &format!("{hf}.attention.LayerNorm"),
            h,
            b,
        );
        dense(
            &mut add,
            &format!("{tf}/{ffn}"),
            &format!("{hf}.ffn"),
            h,
            i,
            b,
        );
        dense(
            &mut add,
            &format!("{tf}/{ffn_out}"),
            &format!("{hf}.ffn_output"),
            i,
            h,
            b,
        );
        norm(
            &mut add,
            &format!("{tf}/{ffn_ln}"),
            &format!("{hf}.full_layer_layer_norm"),
            h,
            b,
        );
    }
    dense(&mut add, "bert/pooler/dense", "albert.pooler", h, h, b);
    let m = Part::MlmHead;
    dense(
        &mut add,
        "cls/predictions/transform/dense",
        "predictions.dense",
        h,
        w,
        m,
    );
    norm(
        &mut add,
        "cls/predictions/transform/LayerNorm",
        "predictions.LayerNorm",
        w,
        m,
    );
    add(
        "cls/predictions/output_bias".into(),
        "predictions.bias".into(),
        false,
        vec![v],
        m,
    );
    let s = Part::SopHead;
    add(
        "cls/seq_relationship/output_weights".into(),
        "sop_classifier.classifier.weight".into(),
        false,
        vec![2, h],
        s,
    );
    add(
        "cls/seq_relationship/output_bias".into(),
        "sop_classifier.classifier.bias".into(),
        false,
        vec![2],
        s,
    );
    out
}

/// A temporary directory beside `out` (same filesystem, so [`publish`] is one rename), its
/// parent created if needed.
fn staging_dir(out: &std::path::Path, prefix: &str) -> anyhow::Result<tempfile::TempDir> {
    use anyhow::Context;
    let parent = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    std::fs::create_dir_all(parent)
        .with_context(|| format!("cannot create {}", parent.display()))?;
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(parent)
        .with_context(|| {
            format!(
                "cannot create a temporary directory in {}",
                parent.display()
            )
        })
}

/// Moves the finished `tmp` into `out` (which the caller has emptied or checked absent); on
/// failure the temporary directory is removed and `out` is left as it was.
fn publish(tmp: tempfile::TempDir, out: &std::path::Path, what: &str) -> anyhow::Result<()> {
    let kept = tmp.keep();
    std::fs::rename(&kept, out).map_err(|e| {
        let _ = std::fs::remove_dir_all(&kept);
        anyhow::anyhow!("cannot move {what} into {}: {e}", out.display())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};

    fn shared_meta() -> Option<PathBuf> {
        let root = std::env::var_os("PIPELINE_DATA_ROOT")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/datasets")
            });
        let d = root.join("tf_checkpoint_meta");
        d.is_dir().then_some(d)
    }

    #[test]
    fn the_real_albert_tiny_zh_index_is_recognised() {
        let Some(dir) = shared_meta() else {
            eprintln!("skipped: ../shared/datasets/tf_checkpoint_meta is not there");
            return;
        };
        let ckpt = Checkpoint::open_index(&dir).unwrap();
        let d = detect(&ckpt).unwrap();
        assert_eq!(
            d,
            Detected {
                layout: Layout::AlbertZh,
                share_type: ShareType::All,
                blocks: 1,
                vocab_size: 21128,
                embedding_size: 128,
                hidden_size: 312,
                intermediate_size: 1248,
                max_position_embeddings: 512,
                type_vocab_size: 2,
            }
        );
        // Its config beside it, with the layout detected, names every tensor with its shape.
        let info = inspect(&dir, None).unwrap();
        let config = info.config.as_ref().unwrap();
        assert_eq!(config.num_hidden_layers, 4);
        assert_eq!(config.layout, Layout::AlbertZh);
        let m = mapping(config);
        assert_eq!(m.len(), ckpt.len());
        for t in &m {
            assert_eq!(ckpt.spec(&t.tf).unwrap().1, t.shape, "{}", t.tf);
        }
        assert!(info.missing_shards.len() == 1, "{:?}", info.missing_shards);
        // 4,077,130 parameters: what the index holds, counted by our config.
        let total: usize = m.iter().map(|t| t.shape.iter().product::<usize>()).sum();
        assert_eq!(total as u64, config.parameter_count().total);
    }

    #[test]
    fn the_google_mapping_is_transformers_load_tf_weights_in_albert() {
        let mut c = AlbertConfig::named("tiny").unwrap();
        c.layout = Layout::Google;
        let m = mapping(&c);
        let find = |tf: &str| m.iter().find(|x| x.tf == tf).unwrap().hf.clone();
        // The names load_tf_weights_in_albert gives these TF variables.
        assert_eq!(
            find(
                "bert/encoder/transformer/group_0/inner_group_0/ffn_1/intermediate/output/dense/kernel"
            ),
            "albert.encoder.albert_layer_groups.0.albert_layers.0.ffn_output.weight"
        );
        assert_eq!(
            find("bert/encoder/transformer/group_0/inner_group_0/LayerNorm_1/gamma"),
            "albert.encoder.albert_layer_groups.0.albert_layers.0.full_layer_layer_norm.weight"
        );
        assert_eq!(
            find("bert/encoder/transformer/group_0/inner_group_0/LayerNorm/beta"),
            "albert.encoder.albert_layer_groups.0.albert_layers.0.attention.LayerNorm.bias"
        );
        assert_eq!(
            find("cls/predictions/transform/dense/kernel"),
            "predictions.dense.weight"
        );
        assert_eq!(find("bert/pooler/dense/bias"), "albert.pooler.bias");
        // One tensor per parameter tensor of the model.
        let total: usize = m.iter().map(|t| t.shape.iter().product::<usize>()).sum();
        assert_eq!(total as u64, c.parameter_count().total);
        c.share_type = ShareType::None;
        assert!(mapping(&c).iter().any(|x| x.tf.contains("group_3/")));
    }
}
