//! Why a weights file was refused before any model was built from it: [`SafetensorsError`],
//! which callers can match on. Every message names the file; a wrapped error is the `source`
//! where the message used to be a context over it, so `{:#}` through `anyhow` prints what it
//! printed before this was typed.

use std::path::PathBuf;

use crate::config::ShareType;

/// Why a weights file's header could not be read, or does not fit a config.
#[derive(Debug, thiserror::Error)]
pub enum SafetensorsError {
    /// The file could not be opened: missing, or not a regular file (a FIFO would block the
    /// open, `/dev/zero`'s header length would be read as 0). The reader's error names the
    /// file; it is part of this text, not a source printed again after it.
    #[error("cannot open {0}")]
    Open(pipeline_bounded::ReadError),
    /// The file's size or header could not be read once it was open (its message only, as it
    /// always was).
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The file is too short to hold the 8 bytes of header length.
    #[error("{}: not a safetensors file ({size} bytes; it may be truncated)", path.display())]
    TooShort {
        /// The weights file.
        path: PathBuf,
        /// Its size in bytes.
        size: u64,
    },
    /// The header length is 0, longer than the file, or above the 100 MiB a header may take.
    #[error(
        "{}: not a valid safetensors file (header of {header} bytes in a file of {size}); it may \
         be truncated or corrupt",
        path.display()
    )]
    HeaderLength {
        /// The weights file.
        path: PathBuf,
        /// The header length the file's first 8 bytes give, in bytes.
        header: u64,
        /// The file's size in bytes.
        size: u64,
    },
    /// The header is not a JSON object.
    #[error("{}: the safetensors header is not valid JSON", path.display())]
    HeaderJson {
        /// The weights file.
        path: PathBuf,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// A tensor's entry lacks `dtype`, `shape` or `data_offsets`, or has them of another type.
    #[error("{}: tensor `{tensor}` in the header is malformed", path.display())]
    MalformedTensor {
        /// The weights file.
        path: PathBuf,
        /// The tensor's name.
        tensor: String,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// A tensor's bytes run past the end of the file (or end before they start).
    #[error(
        "{}: truncated: tensor `{tensor}` lies at bytes {start}..{end} but the file has {data} \
         bytes of tensors",
        path.display()
    )]
    OutOfBounds {
        /// The weights file.
        path: PathBuf,
        /// The tensor's name.
        tensor: String,
        /// Its first byte, counted from the end of the header.
        start: u64,
        /// One past its last byte, counted likewise.
        end: u64,
        /// Bytes of the file after the header.
        data: u64,
    },
    /// A tensor's bytes are not as many as its shape and dtype take (boxed: the largest
    /// variant by far).
    #[error(transparent)]
    TensorSize(Box<TensorSize>),
    /// A tensor whose shape the config fixes has another shape.
    #[error(
        "{}: config.json says {what} = {expected:?} but the weights have `{tensor}` of shape \
         {shape:?}; the weights are of another config",
        path.display()
    )]
    ConfigShape {
        /// The weights file.
        path: PathBuf,
        /// The config fields the shape is made of, e.g. `vocab_size × embedding_size`.
        what: &'static str,
        /// The shape those fields give.
        expected: Vec<u64>,
        /// The tensor's transformers name.
        tensor: String,
        /// Its shape in the file.
        shape: Vec<u64>,
    },
    /// No word embeddings under transformers' name: not an ALBERT checkpoint as transformers
    /// names it.
    #[error(
        "{}: the weights have no `{}`: not an ALBERT checkpoint in transformers' names",
        path.display(),
        super::WORDS
    )]
    NoWordEmbeddings {
        /// The weights file.
        path: PathBuf,
    },
    /// Fewer attention or feed-forward blocks than `num_hidden_layers` and `share_type` use.
    #[error(
        "{}: config.json says num_hidden_layers = {layers} with share_type {share_type}, which \
         uses {need} {what} block(s), but the weights have {have}; the weights are of another \
         config",
        path.display()
    )]
    TooFewBlocks {
        /// The weights file.
        path: PathBuf,
        /// The config's `num_hidden_layers`.
        layers: usize,
        /// The config's `share_type`.
        share_type: ShareType,
        /// `attention` or `feed-forward`.
        what: &'static str,
        /// Blocks of that kind the config uses.
        need: usize,
        /// Blocks of that kind the file holds.
        have: usize,
    },
    /// The safetensors file holds fewer values than the backbone of the config has parameters.
    #[error(
        "{}: config.json implies {need} backbone parameters ({sizes}) but the weights hold \
         {held} values; the weights are of another config",
        path.display()
    )]
    TooFewValues {
        /// The weights file.
        path: PathBuf,
        /// The backbone's parameters (saturating at `u64::MAX`).
        need: u64,
        /// The config's sizes, as the message gives them.
        sizes: String,
        /// The values of all the file's tensors together.
        held: u64,
    },
    /// A weights file other than safetensors could not be looked at.
    #[error("cannot read {}", path.display())]
    Metadata {
        /// The weights file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A weights file other than safetensors is smaller than the backbone of the config takes
    /// at 2 bytes a value.
    #[error(
        "{}: config.json implies a backbone of {values} values ({sizes}), which needs at least \
         {need} bytes of weights, but the file has {size}",
        path.display()
    )]
    TooSmall {
        /// The weights file.
        path: PathBuf,
        /// The backbone's parameters (saturating at `u64::MAX`).
        values: u64,
        /// The config's sizes, as the message gives them.
        sizes: String,
        /// The bytes they take at 2 bytes a value.
        need: u64,
        /// The file's size in bytes.
        size: u64,
    },
}

/// A tensor of the header whose byte range does not match its shape and dtype.
#[derive(Debug, thiserror::Error)]
#[error(
    "{}: tensor `{tensor}` ({dtype} {shape:?}) should take {} bytes but the header gives it \
     {bytes}",
    path.display(),
    need.map_or("more than 2^64".to_string(), |b| b.to_string())
)]
pub struct TensorSize {
    /// The weights file.
    pub path: PathBuf,
    /// The tensor's name.
    pub tensor: String,
    /// Its dtype, as safetensors names it.
    pub dtype: String,
    /// Its shape.
    pub shape: Vec<u64>,
    /// The bytes its shape and dtype take; `None` when that overflows `u64`.
    pub need: Option<u64>,
    /// The bytes the header gives it.
    pub bytes: u64,
}
