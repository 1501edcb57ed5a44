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

mod error;
mod export;
mod import;

use std::collections::BTreeSet;

use std::path::{Path, PathBuf};

use pipeline_tfckpt::Checkpoint;

use crate::config::{AlbertConfig, Layout, ShareType};

use error::Result;
pub use error::{ShapeMismatch, TfError};
pub use export::{ExportReport, export};
pub use import::{ImportReport, ModelDir, TfInfo, find_config, import, inspect};

/// One weight: its TF name, its transformers name, whether the TF tensor is a kernel stored
/// transposed, and its TF shape as the config says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapped {
    /// The TF variable name.
    pub tf: String,
    /// transformers' parameter name.
    pub hf: String,
    /// Whether the TF tensor is a kernel (`[in, out]`), transposed into a `[out, in]` weight.
    pub transpose: bool,
    /// Its TF shape.
    pub shape: Vec<usize>,
    /// Which part of the model it belongs to (heads are optional on export).
    pub part: Part,
}

/// The part of the pretraining model a weight belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// Embeddings, encoder, pooler: what `AlbertModel` holds.
    Backbone,
    /// The masked-LM head.
    MlmHead,
    /// The sentence-order head.
    SopHead,
}

/// What the names and shapes of a checkpoint say about the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detected {
    /// Google's names or albert_zh's.
    pub layout: Layout,
    /// Whole layers shared (one block) or none.
    pub share_type: ShareType,
    /// Distinct encoder blocks (groups, or albert_zh's `layer_N`).
    pub blocks: usize,
    /// Rows of the word embeddings.
    pub vocab_size: usize,
    /// E.
    pub embedding_size: usize,
    /// H.
    pub hidden_size: usize,
    /// The feed-forward width.
    pub intermediate_size: usize,
    /// Rows of the position embeddings.
    pub max_position_embeddings: usize,
    /// Rows of the token-type embeddings.
    pub type_vocab_size: usize,
}

const ZH_PROJECTION: &str = "bert/embeddings/word_embeddings_2";
const GOOGLE_MAPPING: &str = "bert/encoder/embedding_hidden_mapping_in/kernel";

/// The layout, sharing and sizes a checkpoint's names and shapes show (its index is enough).
pub fn detect(ckpt: &Checkpoint) -> Result<Detected> {
    let index = &ckpt.index_path;
    let names: Vec<&str> = ckpt.names().collect();
    let layout = detect_layout(&names, index)?;
    let (share_type, blocks) = detect_sharing(layout, &names, index)?;
    let dims = |name: &str, rank: usize| -> Result<Vec<usize>> {
        let (_, shape) = ckpt.spec(name)?;
        if shape.len() != rank {
            return Err(TfError::Rank {
                index: index.clone(),
                tensor: name.to_string(),
                shape,
                rank,
            });
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
        }
        Layout::AlbertZh if share_type == ShareType::All => {
            "bert/encoder/layer_shared/intermediate/dense/kernel"
        }
        Layout::AlbertZh => "bert/encoder/layer_0/intermediate/dense/kernel",
    };
    Ok(Detected {
        layout,
        share_type,
        blocks,
        vocab_size: word[0],
        embedding_size: word[1],
        hidden_size: hidden,
        intermediate_size: dims(ffn, 2)?[1],
        max_position_embeddings: dims("bert/embeddings/position_embeddings", 2)?[0],
        type_vocab_size: dims("bert/embeddings/token_type_embeddings", 2)?[0],
    })
}

/// Google's names or albert_zh's (`index` names the file in messages).
fn detect_layout(names: &[&str], index: &Path) -> Result<Layout> {
    let has = |n: &str| names.contains(&n);
    let zh = has(ZH_PROJECTION) || names.iter().any(|n| n.starts_with("bert/encoder/layer_"));
    let google = has(GOOGLE_MAPPING)
        || names
            .iter()
            .any(|n| n.starts_with("bert/encoder/transformer/"));
    match (google, zh) {
        (true, false) => Ok(Layout::Google),
        (false, true) => Ok(Layout::AlbertZh),
        (true, true) => Err(TfError::AmbiguousLayout {
            index: index.to_path_buf(),
        }),
        (false, false) => Err(TfError::NotAlbert {
            index: index.to_path_buf(),
            names: names.len(),
        }),
    }
}

/// The sharing and the number of distinct encoder blocks: Google's `group_N`, albert_zh's
/// `layer_shared` or `layer_N`.
fn detect_sharing(layout: Layout, names: &[&str], index: &Path) -> Result<(ShareType, usize)> {
    let numbered = |prefix: &str| -> BTreeSet<usize> {
        names
            .iter()
            .filter_map(|n| n.strip_prefix(prefix))
            .filter_map(|rest| rest.split('/').next()?.parse().ok())
            .collect()
    };
    // Blocks `{one}_0` … `{one}_N` with no gap.
    let blocks = |prefix: &str, many: &'static str, one: &'static str| -> Result<usize> {
        let found = numbered(prefix);
        let n = found.len();
        if found.iter().copied().ne(0..n) || n == 0 {
            return Err(TfError::BlockGap {
                index: index.to_path_buf(),
                many,
                one,
                found,
            });
        }
        Ok(n)
    };
    match layout {
        Layout::Google => {
            let inner = numbered("bert/encoder/transformer/group_0/inner_group_");
            if inner.iter().any(|&i| i > 0) {
                return Err(TfError::InnerGroups {
                    index: index.to_path_buf(),
                    inner: inner.last().copied().unwrap_or(0),
                });
            }
            let n = blocks("bert/encoder/transformer/group_", "groups", "group")?;
            Ok((
                if n == 1 {
                    ShareType::All
                } else {
                    ShareType::None
                },
                n,
            ))
        }
        Layout::AlbertZh => {
            if names
                .iter()
                .any(|n| n.starts_with("bert/encoder/layer_shared/"))
            {
                Ok((ShareType::All, 1))
            } else {
                Ok((
                    ShareType::None,
                    blocks("bert/encoder/layer_", "layers", "layer")?,
                ))
            }
        }
    }
}

/// How a table row becomes tensors: a dense layer is a kernel (`[in, out]`, transposed into a
/// `[out, in]` weight) and a bias; a LayerNorm is `gamma`/`beta` as `weight`/`bias`; a plain
/// tensor keeps its name and layout.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Dense,
    Norm,
    Plain,
}

/// A size in the table, resolved against the config: V, E, H, the feed-forward width, the
/// embedding block's width W (E, or H in albert_zh's layout), positions, token types, and 2
/// (the sentence-order classes).
#[derive(Debug, Clone, Copy)]
enum Dim {
    V,
    E,
    H,
    I,
    W,
    Positions,
    Types,
    Two,
}

/// One row of the name table: TF name, transformers name, kind, sizes (dense: in and out; norm:
/// its width; plain: its TF shape) and part.
type Row = (&'static str, &'static str, Kind, &'static [Dim], Part);

const B: Part = Part::Backbone;

#[rustfmt::skip]
const EMBEDDINGS: &[Row] = &[
    ("bert/embeddings/word_embeddings", "albert.embeddings.word_embeddings.weight", Kind::Plain, &[Dim::V, Dim::E], B),
    ("bert/embeddings/position_embeddings", "albert.embeddings.position_embeddings.weight", Kind::Plain, &[Dim::Positions, Dim::W], B),
    ("bert/embeddings/token_type_embeddings", "albert.embeddings.token_type_embeddings.weight", Kind::Plain, &[Dim::Types, Dim::W], B),
    ("bert/embeddings/LayerNorm", "albert.embeddings.LayerNorm", Kind::Norm, &[Dim::W], B),
];

/// E → H: Google's biased dense in the encoder, albert_zh's bias-free matrix in the embeddings.
#[rustfmt::skip]
const GOOGLE_PROJECTION: Row = ("bert/encoder/embedding_hidden_mapping_in", "albert.encoder.embedding_hidden_mapping_in", Kind::Dense, &[Dim::E, Dim::H], B);
#[rustfmt::skip]
const ALBERT_ZH_PROJECTION: Row = (ZH_PROJECTION, "albert.embeddings.word_embeddings_2", Kind::Plain, &[Dim::E, Dim::H], B);

/// A row of [`BLOCK`]: (Google's name, albert_zh's name), transformers' name, kind, sizes.
type BlockRow = (
    (&'static str, &'static str),
    &'static str,
    Kind,
    &'static [Dim],
);

/// One encoder block: (Google's name, albert_zh's name) under the block's TF prefix,
/// transformers' under `albert.encoder.albert_layer_groups.{g}.albert_layers.0`.
#[rustfmt::skip]
const BLOCK: &[BlockRow] = &[
    (("attention_1/self/query", "attention/self/query"), "attention.query", Kind::Dense, &[Dim::H, Dim::H]),
    (("attention_1/self/key", "attention/self/key"), "attention.key", Kind::Dense, &[Dim::H, Dim::H]),
    (("attention_1/self/value", "attention/self/value"), "attention.value", Kind::Dense, &[Dim::H, Dim::H]),
    (("attention_1/output/dense", "attention/output/dense"), "attention.dense", Kind::Dense, &[Dim::H, Dim::H]),
    (("LayerNorm", "attention/output/LayerNorm"), "attention.LayerNorm", Kind::Norm, &[Dim::H]),
    (("ffn_1/intermediate/dense", "intermediate/dense"), "ffn", Kind::Dense, &[Dim::H, Dim::I]),
    (("ffn_1/intermediate/output/dense", "output/dense"), "ffn_output", Kind::Dense, &[Dim::I, Dim::H]),
    (("LayerNorm_1", "output/LayerNorm"), "full_layer_layer_norm", Kind::Norm, &[Dim::H]),
];

#[rustfmt::skip]
const HEADS: &[Row] = &[
    ("bert/pooler/dense", "albert.pooler", Kind::Dense, &[Dim::H, Dim::H], B),
    ("cls/predictions/transform/dense", "predictions.dense", Kind::Dense, &[Dim::H, Dim::W], Part::MlmHead),
    ("cls/predictions/transform/LayerNorm", "predictions.LayerNorm", Kind::Norm, &[Dim::W], Part::MlmHead),
    ("cls/predictions/output_bias", "predictions.bias", Kind::Plain, &[Dim::V], Part::MlmHead),
    ("cls/seq_relationship/output_weights", "sop_classifier.classifier.weight", Kind::Plain, &[Dim::Two, Dim::H], Part::SopHead),
    ("cls/seq_relationship/output_bias", "sop_classifier.classifier.bias", Kind::Plain, &[Dim::Two], Part::SopHead),
];

/// Every weight of a model of `config` (its layout and sharing), TF name ↔ transformers name:
/// the embeddings, the E → H projection, each distinct encoder block, the pooler and the heads.
pub fn mapping(config: &AlbertConfig) -> Vec<Mapped> {
    let c = config;
    let size = |d: Dim| match d {
        Dim::V => c.vocab_size,
        Dim::E => c.embedding_size,
        Dim::H => c.hidden_size,
        Dim::I => c.intermediate_size,
        Dim::W => crate::albert_zh_layout::embedding_width(c),
        Dim::Positions => c.max_position_embeddings,
        Dim::Types => c.type_vocab_size,
        Dim::Two => 2,
    };
    let mut out = Vec::new();
    let mut add = |tf: &str, hf: &str, kind: Kind, dims: &[Dim], part: Part| {
        let dims: Vec<usize> = dims.iter().map(|&d| size(d)).collect();
        out.extend(expand(tf, hf, kind, dims, part));
    };
    let projection = match c.layout {
        Layout::Google => GOOGLE_PROJECTION,
        Layout::AlbertZh => ALBERT_ZH_PROJECTION,
    };
    for &(tf, hf, kind, dims, part) in EMBEDDINGS.iter().chain([&projection]) {
        add(tf, hf, kind, dims, part);
    }
    let (n_attn, _) = c.share_type.blocks(c.num_hidden_layers);
    for g in 0..n_attn {
        let tf = match c.layout {
            Layout::Google => format!("bert/encoder/transformer/group_{g}/inner_group_0"),
            Layout::AlbertZh if c.share_type == ShareType::All => {
                "bert/encoder/layer_shared".into()
            }
            Layout::AlbertZh => format!("bert/encoder/layer_{g}"),
        };
        let hf = format!("albert.encoder.albert_layer_groups.{g}.albert_layers.0");
        for &((google, zh), name, kind, dims) in BLOCK {
            let sub = if c.layout == Layout::Google {
                google
            } else {
                zh
            };
            add(
                &format!("{tf}/{sub}"),
                &format!("{hf}.{name}"),
                kind,
                dims,
                B,
            );
        }
    }
    for &(tf, hf, kind, dims, part) in HEADS {
        add(tf, hf, kind, dims, part);
    }
    out
}

/// The tensors of one table row (see [`Kind`]).
fn expand(tf: &str, hf: &str, kind: Kind, dims: Vec<usize>, part: Part) -> Vec<Mapped> {
    let one = |tf: String, hf: String, transpose: bool, shape: Vec<usize>| Mapped {
        tf,
        hf,
        transpose,
        shape,
        part,
    };
    match kind {
        Kind::Plain => vec![one(tf.into(), hf.into(), false, dims)],
        Kind::Dense => vec![
            one(
                format!("{tf}/kernel"),
                format!("{hf}.weight"),
                true,
                dims.clone(),
            ),
            one(
                format!("{tf}/bias"),
                format!("{hf}.bias"),
                false,
                vec![dims[1]],
            ),
        ],
        Kind::Norm => vec![
            one(
                format!("{tf}/gamma"),
                format!("{hf}.weight"),
                false,
                dims.clone(),
            ),
            one(format!("{tf}/beta"), format!("{hf}.bias"), false, dims),
        ],
    }
}

/// `out` must not exist, or be an empty directory (for `what`, in the message).
fn check_free(out: &Path, what: &'static str) -> Result<()> {
    if out.exists()
        && std::fs::read_dir(out)
            .map(|mut d| d.next().is_some())
            .unwrap_or(true)
    {
        return Err(TfError::NotEmpty {
            out: out.to_path_buf(),
            what,
        });
    }
    Ok(())
}

/// A temporary directory beside `out` (same filesystem, so [`publish`] is one rename), its
/// parent created if needed.
fn staging_dir(out: &Path, prefix: &str) -> Result<tempfile::TempDir> {
    let parent = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(|source| TfError::CreateDir {
        dir: parent.to_path_buf(),
        source,
    })?;
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(parent)
        .map_err(|source| TfError::TempDir {
            dir: parent.to_path_buf(),
            source,
        })
}

/// Removes the empty directory `out` (which [`check_free`] let through) so that [`publish`]
/// can rename the result into its place.
fn clear_out(out: &Path) -> Result<()> {
    if out.exists() {
        std::fs::remove_dir(out).map_err(|source| TfError::Replace {
            out: out.to_path_buf(),
            source,
        })?;
    }
    Ok(())
}

/// Copies `from` to `to`, the error naming `from`.
fn copy(from: &Path, to: PathBuf) -> Result<()> {
    std::fs::copy(from, to).map_err(|source| TfError::Copy {
        path: from.to_path_buf(),
        source,
    })?;
    Ok(())
}

/// Moves the finished `tmp` into `out` (which the caller has emptied or checked absent); on
/// failure the temporary directory is removed and `out` is left as it was.
fn publish(tmp: tempfile::TempDir, out: &Path, what: &'static str) -> Result<()> {
    let kept = tmp.keep();
    std::fs::rename(&kept, out).map_err(|cause| {
        let _ = std::fs::remove_dir_all(&kept);
        TfError::Publish {
            what,
            out: out.to_path_buf(),
            cause,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
