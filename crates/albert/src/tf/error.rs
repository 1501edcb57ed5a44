//! What can go wrong importing, exporting or inspecting a TF checkpoint: [`TfError`], which
//! callers can match on. Every message names the file and says what to do, as the CLI prints
//! them; a wrapped error of another crate is the `source` where the message used to be a
//! context over it, so `{:#}` through `anyhow` prints what it printed before this was typed.

use std::collections::BTreeSet;
use std::path::PathBuf;

use pipeline_text::hf::TokenizerError;
use pipeline_text::vocab::VocabError;

use crate::config::{ConfigError, ShareType};
use crate::hf::HfError;

/// The crate's result type for TF checkpoints.
pub type Result<T, E = TfError> = std::result::Result<T, E>;

/// Why a TF checkpoint could not be read, checked, imported or exported.
#[derive(Debug, thiserror::Error)]
pub enum TfError {
    /// The checkpoint's index or data files (or a checkpoint being written) failed.
    #[error(transparent)]
    Checkpoint(#[from] pipeline_tfckpt::Error),
    /// The model config file is unreadable or invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The model directory to export could not be read.
    #[error(transparent)]
    Model(#[from] HfError),
    /// The tokenizer of the imported model could not be built or written.
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    /// A file of the output could not be written.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// A JSON file of the output could not be serialised.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// A tensor does not have the rank its name implies.
    #[error("{}: tensor {tensor} has shape {shape:?}, expected {rank} dimensions", index.display())]
    Rank {
        /// The checkpoint's index.
        index: PathBuf,
        /// The TF name.
        tensor: String,
        /// Its shape.
        shape: Vec<usize>,
        /// Its expected number of dimensions.
        rank: usize,
    },
    /// Both naming schemes occur in one checkpoint.
    #[error(
        "{}: holds both google-research/albert (bert/encoder/transformer/…) and albert_zh \
         (bert/encoder/layer_…, word_embeddings_2) tensors: which model is it?",
        index.display()
    )]
    AmbiguousLayout {
        /// The checkpoint's index.
        index: PathBuf,
    },
    /// Neither naming scheme occurs.
    #[error(
        "{}: not an ALBERT checkpoint: no bert/encoder/transformer/… (google-research/albert) nor \
         bert/encoder/layer_shared/… (albert_zh) tensors among its {names} names",
        index.display()
    )]
    NotAlbert {
        /// The checkpoint's index.
        index: PathBuf,
        /// How many tensor names it holds.
        names: usize,
    },
    /// The encoder blocks are not numbered 0…N without a gap.
    #[error("{}: the encoder {many} are not {one}_0…{one}_N: {found:?}", index.display())]
    BlockGap {
        /// The checkpoint's index.
        index: PathBuf,
        /// "groups" or "layers".
        many: &'static str,
        /// "group" or "layer".
        one: &'static str,
        /// The block numbers found.
        found: BTreeSet<usize>,
    },
    /// Google's layout with more than one inner group.
    #[error(
        "{}: inner_group_num > 1 (inner_group_{inner} exists), which no published ALBERT uses \
         and this model does not support",
        index.display()
    )]
    InnerGroups {
        /// The checkpoint's index.
        index: PathBuf,
        /// The highest inner group found.
        inner: usize,
    },
    /// The output directory is already in use.
    #[error("{} already exists and is not empty: give a new directory for {what}", out.display())]
    NotEmpty {
        /// The output directory.
        out: PathBuf,
        /// What was to be written there.
        what: &'static str,
    },
    /// A directory could not be created.
    #[error("cannot create {}", dir.display())]
    CreateDir {
        /// The directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The staging directory beside the output could not be created.
    #[error("cannot create a temporary directory in {}", dir.display())]
    TempDir {
        /// Its parent.
        dir: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The finished staging directory could not be renamed into place (it has been removed).
    #[error("cannot move {what} into {}: {cause}", out.display())]
    Publish {
        /// What was being written.
        what: &'static str,
        /// The output directory.
        out: PathBuf,
        /// Why (part of the message, as it always was).
        cause: std::io::Error,
    },
    /// The empty output directory could not be removed to make way for the result.
    #[error("cannot replace {}", out.display())]
    Replace {
        /// The output directory.
        out: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The directory beside the checkpoint could not be listed.
    #[error("cannot list {}", dir.display())]
    ListDir {
        /// The directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// No config file beside the checkpoint.
    #[error(
        "{}: no albert_config.json beside the checkpoint: put the model's config there (as \
         albert_zh and google-research/albert ship it) or give it with --config",
        dir.display()
    )]
    NoConfig {
        /// The checkpoint's directory.
        dir: PathBuf,
    },
    /// Several candidate config files beside the checkpoint.
    #[error(
        "{}: {count} albert_config*.json files beside the checkpoint: give the right one with \
         --config",
        dir.display()
    )]
    ManyConfigs {
        /// The checkpoint's directory.
        dir: PathBuf,
        /// How many there are.
        count: usize,
    },
    /// The config's sharing differs from the checkpoint's.
    #[error(
        "{}: the config says share_type {config_share} (num_hidden_groups) but {} holds {blocks} \
         encoder block(s) ({detected}): the config is not this checkpoint's",
        config.display(),
        index.display()
    )]
    ShareMismatch {
        /// The config file.
        config: PathBuf,
        /// Its sharing.
        config_share: ShareType,
        /// The checkpoint's index.
        index: PathBuf,
        /// Encoder blocks in the checkpoint.
        blocks: usize,
        /// The sharing they show.
        detected: ShareType,
    },
    /// The config's layer count differs from the checkpoint's unshared layers.
    #[error(
        "{}: num_hidden_layers is {layers} but {} holds {blocks} unshared layers",
        config.display(),
        index.display()
    )]
    LayerMismatch {
        /// The config file.
        config: PathBuf,
        /// Its `num_hidden_layers`.
        layers: usize,
        /// The checkpoint's index.
        index: PathBuf,
        /// Unshared layers in the checkpoint.
        blocks: usize,
    },
    /// A tensor that a checkpoint of this config has is absent.
    #[error(
        "{}: tensor {tensor} is missing (a {layout} checkpoint of this config has it)",
        index.display()
    )]
    MissingTensor {
        /// The checkpoint's index.
        index: PathBuf,
        /// The TF name.
        tensor: String,
        /// `google` or `albert_zh`.
        layout: &'static str,
    },
    /// A tensor's shape differs from the config's (boxed: the largest variant by far).
    #[error(transparent)]
    ShapeMismatch(Box<ShapeMismatch>),
    /// The vocabulary beside the checkpoint (or `--vocab`) is unusable.
    #[error(
        "{error} (the vocabulary beside the checkpoint, as albert_zh ships it; or give --vocab)"
    )]
    Vocab {
        /// Why (part of the message, as it always was).
        error: VocabError,
    },
    /// The vocabulary's size differs from the config's.
    #[error(
        "{}: {tokens} tokens but {} says vocab_size {vocab_size} (and the word embeddings have \
         {rows} rows): this vocab.txt is not the model's",
        vocab.display(),
        config.display()
    )]
    VocabSize {
        /// The vocab.txt.
        vocab: PathBuf,
        /// Its tokens.
        tokens: usize,
        /// The config file.
        config: PathBuf,
        /// The config's `vocab_size`.
        vocab_size: usize,
        /// Rows of the checkpoint's word embeddings.
        rows: usize,
    },
    /// A file could not be copied into the output.
    #[error("cannot copy {}", path.display())]
    Copy {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// `safetensors` refused a tensor.
    #[error("{tensor}: {message}")]
    TensorView {
        /// transformers' name.
        tensor: String,
        /// The library's reason.
        message: String,
    },
    /// `model.safetensors` could not be written.
    #[error("cannot write {}: {message}", path.display())]
    WriteWeights {
        /// The file.
        path: PathBuf,
        /// The library's reason.
        message: String,
    },
    /// The written weights' permissions could not be set.
    #[error("cannot set the permissions of {}", path.display())]
    Permissions {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The import's temporary model directory could not be created.
    #[error("cannot create a temporary directory for the imported checkpoint")]
    ImportTempDir(#[source] std::io::Error),
    /// The model's sharing has no TF layout.
    #[error(
        "{}: share_type {share_type} has no TensorFlow layout (google-research/albert and \
         albert_zh share whole layers, or none)",
        dir.display()
    )]
    NoTfLayout {
        /// The model directory.
        dir: PathBuf,
        /// Its sharing.
        share_type: ShareType,
    },
    /// `model.safetensors` could not be read: missing, not a regular file (a FIFO, a device),
    /// or over the export's bound. The reader's error names the file (and the limit); it is
    /// part of this text, not a source printed again after it.
    #[error("cannot read {0} (export needs model.safetensors, as the pipeline writes it)")]
    ReadWeights(pipeline_bounded::ReadError),
    /// `model.safetensors` is not a safetensors file.
    #[error("{}: not a valid safetensors file: {message}", path.display())]
    NotSafetensors {
        /// The file.
        path: PathBuf,
        /// The library's reason.
        message: String,
    },
    /// A weight that a model of this config has is absent from `model.safetensors`.
    #[error(
        "{}: tensor {tensor} is missing (a model of this config.json has it)",
        path.display()
    )]
    MissingWeight {
        /// The weights file.
        path: PathBuf,
        /// transformers' name.
        tensor: String,
    },
    /// A weight that is not `f32`.
    #[error("{}: tensor {tensor} is {dtype}, not F32", path.display())]
    NotF32 {
        /// The weights file.
        path: PathBuf,
        /// transformers' name.
        tensor: String,
        /// Its dtype, as safetensors names it.
        dtype: String,
    },
    /// A weight's shape differs from the config's.
    #[error(
        "{}: tensor {tensor} has shape {shape:?} (as {tf}) but config.json says {expected:?}",
        path.display()
    )]
    WeightShape {
        /// The weights file.
        path: PathBuf,
        /// transformers' name.
        tensor: String,
        /// The TF name it becomes.
        tf: String,
        /// Its shape (transposed for a kernel).
        shape: Vec<usize>,
        /// The TF shape the config says.
        expected: Vec<usize>,
    },
    /// Weights of the model that no TF name takes.
    #[error(
        "{}: {count} tensor(s) have no TensorFlow name in the {layout} layout, e.g. {example}",
        path.display()
    )]
    LeftOut {
        /// The weights file.
        path: PathBuf,
        /// How many.
        count: usize,
        /// `google` or `albert_zh`.
        layout: &'static str,
        /// The first of them.
        example: String,
    },
}

/// A tensor of the checkpoint whose shape is not the one its config implies.
#[derive(Debug, thiserror::Error)]
#[error(
    "{}: tensor {tensor} has shape {shape:?} but {} says {expected:?} (vocab_size {}, \
     embedding_size {}, hidden_size {}, intermediate_size {}, max_position_embeddings {}): the \
     config is not this checkpoint's",
    index.display(),
    config.display(),
    sizes[0],
    sizes[1],
    sizes[2],
    sizes[3],
    sizes[4]
)]
pub struct ShapeMismatch {
    /// The checkpoint's index.
    pub index: PathBuf,
    /// The TF name.
    pub tensor: String,
    /// Its shape in the checkpoint.
    pub shape: Vec<usize>,
    /// The config file.
    pub config: PathBuf,
    /// Its shape as the config says.
    pub expected: Vec<usize>,
    /// The config's vocab_size, embedding_size, hidden_size, intermediate_size and
    /// max_position_embeddings.
    pub sizes: [usize; 5],
}
