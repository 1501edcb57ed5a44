//! A safetensors file's header, read and checked without reading any tensor: 8 bytes of
//! header length, then a JSON object of `name → {dtype, shape, data_offsets}`.
//!
//! Model files are not trusted: a truncated or garbled file, or a `config.json` whose sizes do
//! not match the weights (an absurd `vocab_size` once aborted with an allocation failure before
//! anything looked at the weights), is refused here, before a model of that config is
//! allocated. The `safetensors` crate (a dependency, for TF import) checks the same offsets in
//! `SafeTensors::read_metadata`, but only over a buffer of the whole file, and says which
//! check failed without the sizes a user needs; the format is two fields, so the header alone
//! is read here. A refused file is a [`SafetensorsError`] that names it and what is wrong.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use serde::Deserialize;

use crate::config::AlbertConfig;

mod error;

pub use error::{SafetensorsError, TensorSize};

/// The result of reading or checking a weights file.
pub type Result<T, E = SafetensorsError> = std::result::Result<T, E>;

/// Headers above this are refused unread (real ones are a few tens of kilobytes).
const MAX_HEADER: u64 = 100 << 20;

/// One tensor as the header describes it.
#[derive(Debug, Clone, Deserialize)]
pub struct TensorInfo {
    /// The element type as safetensors names it (`F32`, `BF16`, …).
    pub dtype: String,
    /// Its dimensions.
    pub shape: Vec<u64>,
    /// Its bytes, `[start, end)`, counted from the end of the header.
    pub data_offsets: (u64, u64),
}

/// What the header of a weights file says.
#[derive(Debug, Clone)]
pub struct Header {
    /// Every tensor, by name.
    pub tensors: BTreeMap<String, TensorInfo>,
    /// Bytes of the file, header included.
    pub file_bytes: u64,
}

/// Bytes per element of a safetensors dtype.
fn dtype_bytes(dtype: &str) -> Option<u64> {
    Some(match dtype {
        "F64" | "I64" | "U64" => 8,
        "F32" | "I32" | "U32" => 4,
        "F16" | "BF16" | "I16" | "U16" => 2,
        "I8" | "U8" | "BOOL" | "F8_E4M3" | "F8_E5M2" => 1,
        _ => return None,
    })
}

/// Reads and checks the header of `file`: its length fits the file, it is JSON, and every
/// tensor's bytes lie within the file and match its shape and dtype.
pub fn read(file: &Path) -> Result<Header> {
    // The shared reader's open: regular files only, and a FIFO refused without blocking. The
    // header alone is read (bounded by MAX_HEADER), never the tensors.
    let mut f = pipeline_bounded::open(file).map_err(SafetensorsError::Open)?;
    let size = f.metadata()?.len();
    let mut len = [0u8; 8];
    if size < 8 || f.read_exact(&mut len).is_err() {
        return Err(SafetensorsError::TooShort {
            path: file.to_path_buf(),
            size,
        });
    }
    let header = u64::from_le_bytes(len);
    if header == 0 || header > size - 8 || header > MAX_HEADER {
        return Err(SafetensorsError::HeaderLength {
            path: file.to_path_buf(),
            header,
            size,
        });
    }
    let mut text = vec![0u8; header as usize];
    f.read_exact(&mut text)?;
    let mut json: BTreeMap<String, serde_json::Value> =
        serde_json::from_slice(&text).map_err(|source| SafetensorsError::HeaderJson {
            path: file.to_path_buf(),
            source,
        })?;
    json.remove("__metadata__");
    let data = size - 8 - header;
    let mut tensors = BTreeMap::new();
    for (name, value) in json {
        let t: TensorInfo = match serde_json::from_value(value) {
            Ok(t) => t,
            Err(source) => {
                return Err(SafetensorsError::MalformedTensor {
                    path: file.to_path_buf(),
                    tensor: name,
                    source,
                });
            }
        };
        check_tensor(file, &name, &t, data)?;
        tensors.insert(name, t);
    }
    Ok(Header {
        tensors,
        file_bytes: size,
    })
}

fn check_tensor(file: &Path, name: &str, t: &TensorInfo, data: u64) -> Result<()> {
    let (start, end) = t.data_offsets;
    if start > end || end > data {
        return Err(SafetensorsError::OutOfBounds {
            path: file.to_path_buf(),
            tensor: name.to_string(),
            start,
            end,
            data,
        });
    }
    // An unknown dtype is left to the loader; a shape whose size overflows is never right.
    let Some(width) = dtype_bytes(&t.dtype) else {
        return Ok(());
    };
    let bytes = t.shape.iter().try_fold(width, |acc, &d| acc.checked_mul(d));
    if bytes != Some(end - start) {
        return Err(SafetensorsError::TensorSize(Box::new(TensorSize {
            path: file.to_path_buf(),
            tensor: name.to_string(),
            dtype: t.dtype.clone(),
            shape: t.shape.clone(),
            need: bytes,
            bytes: end - start,
        })));
    }
    Ok(())
}

/// The sizes of `config` against the tensors of `header`, so that a model of that config is
/// only allocated when the file can fill it: every tensor the config gives a shape (by its
/// transformers name) has that shape, the word embeddings and one attention and feed-forward
/// block are there, the file has as many blocks as `num_hidden_layers` and `share_type` ask
/// for, and it holds at least as many values as the backbone has parameters (which bounds
/// every size at once, whatever the names).
pub fn check_config(file: &Path, header: &Header, config: &AlbertConfig) -> Result<()> {
    for (name, t) in &header.tensors {
        if let Some(mut shape) = expected_shapes(name, config)
            && !shape.allowed.contains(&t.shape)
        {
            return Err(SafetensorsError::ConfigShape {
                path: file.to_path_buf(),
                what: shape.what,
                expected: shape.allowed.swap_remove(0),
                tensor: name.clone(),
                shape: t.shape.clone(),
            });
        }
    }
    check_blocks(file, header, config)?;
    let need = backbone_parameters(config);
    let held = header
        .tensors
        .values()
        .map(|t| t.shape.iter().fold(1u64, |n, &d| n.saturating_mul(d)))
        .fold(0u64, u64::saturating_add);
    if need > held {
        return Err(SafetensorsError::TooFewValues {
            path: file.to_path_buf(),
            need,
            sizes: describe(config),
            held,
        });
    }
    Ok(())
}

/// A tensor's shape as the config implies it: the first is the one named in errors.
struct Expected {
    allowed: Vec<Vec<u64>>,
    what: &'static str,
}

/// The shapes `config` gives the tensor `name` (transformers' names; PyTorch linears are
/// `[out, in]`), none for a tensor whose shape it does not fix.
fn expected_shapes(name: &str, c: &AlbertConfig) -> Option<Expected> {
    let [v, e, h, i, p, t] = [
        c.vocab_size,
        c.embedding_size,
        c.hidden_size,
        c.intermediate_size,
        c.max_position_embeddings,
        c.type_vocab_size,
    ]
    .map(|n| n as u64);
    // albert_zh's TF layout projects to the hidden size before adding positions and token
    // types, so those tables are H wide (crates/albert/src/albert_zh_layout.rs).
    let (allowed, what) = match name {
        "albert.embeddings.word_embeddings.weight" => {
            (vec![vec![v, e]], "vocab_size × embedding_size")
        }
        "albert.embeddings.position_embeddings.weight" => (
            vec![vec![p, e], vec![p, h]],
            "max_position_embeddings × embedding_size",
        ),
        "albert.embeddings.token_type_embeddings.weight" => (
            vec![vec![t, e], vec![t, h]],
            "type_vocab_size × embedding_size",
        ),
        "albert.encoder.embedding_hidden_mapping_in.weight" => {
            (vec![vec![h, e]], "hidden_size × embedding_size")
        }
        "albert.pooler.weight" => (vec![vec![h, h]], "hidden_size × hidden_size"),
        n if ATTENTION_WEIGHTS.iter().any(|s| n.ends_with(s)) => {
            (vec![vec![h, h]], "hidden_size × hidden_size")
        }
        n if n.ends_with(FFN_IN) => (vec![vec![i, h]], "intermediate_size × hidden_size"),
        n if n.ends_with(FFN_OUT) => (vec![vec![h, i]], "hidden_size × intermediate_size"),
        _ => return None,
    };
    Some(Expected { allowed, what })
}

const WORDS: &str = "albert.embeddings.word_embeddings.weight";
const ATTENTION_WEIGHTS: [&str; 4] = [
    ".attention.query.weight",
    ".attention.key.weight",
    ".attention.value.weight",
    ".attention.dense.weight",
];
const FFN_IN: &str = ".ffn.weight";
const FFN_OUT: &str = ".ffn_output.weight";

/// The word embeddings are there, and as many attention and feed-forward blocks as the config
/// uses (`share_type` shares some across `num_hidden_layers`).
fn check_blocks(file: &Path, header: &Header, config: &AlbertConfig) -> Result<()> {
    if !header.tensors.contains_key(WORDS) {
        return Err(SafetensorsError::NoWordEmbeddings {
            path: file.to_path_buf(),
        });
    }
    let count = |suffix: &str| {
        header
            .tensors
            .keys()
            .filter(|n| n.ends_with(suffix))
            .count()
    };
    let (need_attn, need_ffn) = config.share_type.blocks(config.num_hidden_layers);
    let have = [
        ("attention", count(ATTENTION_WEIGHTS[0]), need_attn),
        ("feed-forward", count(FFN_IN), need_ffn),
    ];
    for (what, have, need) in have {
        if have < need {
            return Err(SafetensorsError::TooFewBlocks {
                path: file.to_path_buf(),
                layers: config.num_hidden_layers,
                share_type: config.share_type,
                what,
                need,
                have,
            });
        }
    }
    Ok(())
}

/// The parameters of the backbone a config builds (pooler and heads left out, so this is a
/// lower bound for every checkpoint of it): [`AlbertConfig::parameter_count`]'s embeddings and
/// encoder, computed saturating, since the sizes here come from an untrusted `config.json`
/// and that count's plain arithmetic overflows on them.
fn backbone_parameters(c: &AlbertConfig) -> u64 {
    let [v, e, h, i, p, t] = [
        c.vocab_size,
        c.embedding_size,
        c.hidden_size,
        c.intermediate_size,
        c.max_position_embeddings,
        c.type_vocab_size,
    ]
    .map(|n| n as u64);
    let mul = |a: u64, b: u64| a.saturating_mul(b);
    let width = crate::albert_zh_layout::embedding_width(c) as u64;
    let embeddings = [mul(v, e), mul(p, width), mul(t, width), mul(2, width)];
    let projection = mul(e, h).saturating_add(match c.layout {
        crate::config::Layout::Google => h,
        crate::config::Layout::AlbertZh => 0,
    });
    let attention = mul(4, mul(h, h).saturating_add(h)).saturating_add(mul(2, h));
    let ffn = [mul(h, i), i, mul(i, h), h, mul(2, h)];
    let (n_attn, n_ffn) = c.share_type.blocks(c.num_hidden_layers);
    let sum = |xs: &[u64]| xs.iter().fold(0u64, |a, &b| a.saturating_add(b));
    sum(&[
        sum(&embeddings),
        projection,
        mul(n_attn as u64, attention),
        mul(n_ffn as u64, sum(&ffn)),
    ])
}

fn describe(c: &AlbertConfig) -> String {
    format!(
        "vocab_size {}, embedding_size {}, hidden_size {}, intermediate_size {}, \
         num_hidden_layers {} with share_type {}",
        c.vocab_size,
        c.embedding_size,
        c.hidden_size,
        c.intermediate_size,
        c.num_hidden_layers,
        c.share_type
    )
}

/// The checks a model directory gets before a model is built from it: for `model.safetensors`
/// its header and the config's sizes against it; for any other weights file (a pickled
/// `pytorch_model.bin`, whose tensors cannot be listed without unpickling it), that it is large
/// enough for the backbone the config implies at 2 bytes a value (fp16, the smallest
/// checkpoints use).
pub fn check_weights(weights: &Path, config: &AlbertConfig) -> Result<()> {
    if weights.extension().is_some_and(|e| e == "safetensors") {
        let header = read(weights)?;
        return check_config(weights, &header, config);
    }
    let size = std::fs::metadata(weights)
        .map_err(|source| SafetensorsError::Metadata {
            path: weights.to_path_buf(),
            source,
        })?
        .len();
    let values = backbone_parameters(config);
    let need = values.saturating_mul(2);
    if need > size {
        return Err(SafetensorsError::TooSmall {
            path: weights.to_path_buf(),
            values,
            sizes: describe(config),
            need,
            size,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, header: &str, data: usize) -> std::path::PathBuf {
        let p = dir.join("model.safetensors");
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend(header.as_bytes());
        bytes.extend(vec![0u8; data]);
        std::fs::write(&p, bytes).unwrap();
        p
    }

    #[test]
    fn backbone_parameters_agree_with_the_parameter_count() {
        for name in crate::config::NAMED_CONFIGS {
            let mut c = AlbertConfig::named(name).unwrap();
            for layout in [
                crate::config::Layout::Google,
                crate::config::Layout::AlbertZh,
            ] {
                c.layout = layout;
                let count = c.parameter_count();
                assert_eq!(
                    backbone_parameters(&c),
                    count.embeddings + count.encoder,
                    "{name}"
                );
            }
        }
        let mut absurd = AlbertConfig::named("tiny").unwrap();
        absurd.hidden_size = usize::MAX / 2;
        assert_eq!(backbone_parameters(&absurd), u64::MAX);
    }

    #[test]
    fn short_garbled_and_truncated_files_say_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("model.safetensors");
        std::fs::write(&p, b"hello").unwrap();
        let e = read(&p).unwrap_err().to_string();
        assert!(e.contains("not a safetensors file (5 bytes"), "{e}");

        let p = write(dir.path(), "{not json", 0);
        assert!(format!("{:#}", read(&p).unwrap_err()).contains("not valid JSON"));

        let p = write(
            dir.path(),
            r#"{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#,
            8,
        );
        assert!(read(&p).unwrap_err().to_string().contains("truncated"));

        let p = write(
            dir.path(),
            r#"{"a":{"dtype":"F32","shape":[1000000,1000000],"data_offsets":[0,16]}}"#,
            16,
        );
        assert!(read(&p).unwrap_err().to_string().contains("should take"));

        let p = write(
            dir.path(),
            r#"{"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}"#,
            16,
        );
        assert_eq!(read(&p).unwrap().tensors["a"].shape, [2, 2]);
    }

    #[test]
    fn a_fifo_or_device_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("model.safetensors");
        let made = std::process::Command::new("mkfifo").arg(&p).status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo failed");
        let e = read(&p).unwrap_err();
        assert!(std::error::Error::source(&e).is_none());
        let e = e.to_string();
        assert!(
            e.starts_with("cannot open ")
                && e.ends_with("model.safetensors: not a regular file (it is a FIFO)"),
            "{e}"
        );
        let e = read(Path::new("/dev/zero")).unwrap_err().to_string();
        assert!(e.contains("a character device"), "{e}");
    }
}
