//! A safetensors file's header, read and checked without reading any tensor: 8 bytes of
//! header length, then a JSON object of `name → {dtype, shape, data_offsets}`.
//!
//! Model files are not trusted: a truncated or garbled file, or a `config.json` whose sizes do
//! not match the weights (an absurd `vocab_size` once aborted with an allocation failure before
//! anything looked at the weights), is refused here, before a model of that config is
//! allocated. The `safetensors` crate (a dependency, for TF import) checks the same offsets in
//! `SafeTensors::read_metadata`, but only over a buffer of the whole file, and says which
//! check failed without the sizes a user needs; the format is two fields, so the header alone
//! is read here.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use anyhow::{Context, bail};
use serde::Deserialize;

use crate::config::AlbertConfig;

/// Headers above this are refused unread (real ones are a few tens of kilobytes).
const MAX_HEADER: u64 = 100 << 20;

/// One tensor as the header describes it.
#[derive(Debug, Clone, Deserialize)]
pub struct TensorInfo {
    pub dtype: String,
    pub shape: Vec<u64>,
    pub data_offsets: (u64, u64),
}

/// What the header of a weights file says.
#[derive(Debug, Clone)]
pub struct Header {
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
pub fn read(file: &Path) -> anyhow::Result<Header> {
    let mut f =
        std::fs::File::open(file).with_context(|| format!("cannot open {}", file.display()))?;
    let size = f.metadata()?.len();
    let mut len = [0u8; 8];
    if size < 8 || f.read_exact(&mut len).is_err() {
        bail!(
            "{}: not a safetensors file ({size} bytes; it may be truncated)",
            file.display()
        );
    }
    let header = u64::from_le_bytes(len);
    if header == 0 || header > size - 8 || header > MAX_HEADER {
        bail!(
            "{}: not a valid safetensors file (header of {header} bytes in a file of {size}); \
             it may be truncated or corrupt",
            file.display()
        );
    }
    let mut text = vec![0u8; header as usize];
    f.read_exact(&mut text)?;
    let mut json: BTreeMap<String, serde_json::Value> = serde_json::from_slice(&text)
        .with_context(|| {
            format!(
                "{}: the safetensors header is not valid JSON",
                file.display()
            )
        })?;
    json.remove("__metadata__");
    let data = size - 8 - header;
    let mut tensors = BTreeMap::new();
    for (name, value) in json {
        let t: TensorInfo = serde_json::from_value(value).with_context(|| {
            format!(
                "{}: tensor `{name}` in the header is malformed",
                file.display()
            )
        })?;
        check_tensor(file, &name, &t, data)?;
        tensors.insert(name, t);
    }
    Ok(Header {
        tensors,
        file_bytes: size,
    })
}

fn check_tensor(file: &Path, name: &str, t: &TensorInfo, data: u64) -> anyhow::Result<()> {
    let (start, end) = t.data_offsets;
    if start > end || end > data {
        bail!(
            "{}: truncated: tensor `{name}` lies at bytes {start}..{end} but the file has {data} \
             bytes of tensors",
            file.display()
        );
    }
    // An unknown dtype is left to the loader; a shape whose size overflows is never right.
    let Some(width) = dtype_bytes(&t.dtype) else {
        return Ok(());
    };
    let bytes = t.shape.iter().try_fold(width, |acc, &d| acc.checked_mul(d));
    if bytes != Some(end - start) {
        let need = bytes.map_or("more than 2^64".to_string(), |b| b.to_string());
        bail!(
            "{}: tensor `{name}` ({} {:?}) should take {need} bytes but the header gives it {}",
            file.display(),
            t.dtype,
            t.shape,
            end - start
        );
    }
    Ok(())
}

/// The sizes of `config` against the tensors of `header`: the embeddings must have the shapes
/// the config says, so that a model of that config is only allocated when the file can fill it.
pub fn check_config(file: &Path, header: &Header, config: &AlbertConfig) -> anyhow::Result<()> {
    let expect = [
        (
            "albert.embeddings.word_embeddings.weight",
            [config.vocab_size as u64, config.embedding_size as u64],
            "vocab_size × embedding_size",
        ),
        (
            "albert.embeddings.position_embeddings.weight",
            [
                config.max_position_embeddings as u64,
                config.embedding_size as u64,
            ],
            "max_position_embeddings × embedding_size",
        ),
    ];
    // albert_zh's TF layout projects to the hidden size before adding positions, so its
    // position table is max_position_embeddings × hidden_size (crates/albert/src/albert_zh_layout.rs).
    let also = [
        config.max_position_embeddings as u64,
        config.hidden_size as u64,
    ];
    for (name, shape, what) in expect {
        if let Some(t) = header.tensors.get(name)
            && t.shape != shape
            && !(name.ends_with("position_embeddings.weight") && t.shape == also)
        {
            bail!(
                "{}: config.json says {what} = {:?} but the weights have `{name}` of shape {:?}; \
                 the config does not belong to these weights",
                file.display(),
                shape,
                t.shape
            );
        }
    }
    Ok(())
}

/// The checks a model directory gets before a model is built from it: for `model.safetensors`
/// its header and the config's sizes against it; for any weights file, that it can hold the
/// word embeddings the config asks for (2 bytes a value at least).
pub fn check_weights(weights: &Path, config: &AlbertConfig) -> anyhow::Result<()> {
    if weights.extension().is_some_and(|e| e == "safetensors") {
        let header = read(weights)?;
        return check_config(weights, &header, config);
    }
    let size = std::fs::metadata(weights)
        .with_context(|| format!("cannot read {}", weights.display()))?
        .len();
    let need = (config.vocab_size as u64)
        .saturating_mul(config.embedding_size as u64)
        .saturating_mul(2);
    if need > size {
        bail!(
            "{}: config.json says vocab_size {} × embedding_size {}, which needs at least {need} \
             bytes of weights, but the file has {size}",
            weights.display(),
            config.vocab_size,
            config.embedding_size
        );
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
}
