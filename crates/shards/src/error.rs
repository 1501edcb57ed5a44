//! What can go wrong with a shard, its writer or the batch reader: [`ShardError`], one enum that
//! callers can match on, and [`InstanceError`] for an instance that cannot be stored.
//!
//! The messages name the file (and the row) and say what to do, as the stages print them; a
//! wrapped I/O or Arrow error is the [`std::error::Error::source`], so `{:#}` through `anyhow`
//! prints `context: cause` as before these were typed.

use std::io;
use std::num::ParseIntError;
use std::path::PathBuf;

use arrow_schema::{ArrowError, DataType};

use crate::schema::{FOOTER_NUM_ROWS, FORMAT, FORMAT_KEY, VERSION, VERSION_KEY};

/// The crate's result type.
pub type Result<T, E = ShardError> = std::result::Result<T, E>;

/// Why a shard could not be written, read or batched.
#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    /// A shard file could not be opened: missing, or not a regular file (a FIFO would block
    /// the open). The reader's error names the shard; it is part of this text, not a source
    /// printed again after it.
    #[error("cannot open shard {0}")]
    Open(pipeline_bounded::ReadError),
    /// The file is not an Arrow IPC file (or its footer is missing).
    #[error(
        "{}: not a readable Arrow IPC file (truncated, or the writer was not finished?)",
        path.display()
    )]
    NotArrow {
        /// The shard.
        path: PathBuf,
        /// Arrow's reason.
        #[source]
        source: ArrowError,
    },
    /// A record batch of the file could not be decoded.
    #[error("{}: cannot decode a record batch", path.display())]
    Decode {
        /// The shard.
        path: PathBuf,
        /// Arrow's reason.
        #[source]
        source: ArrowError,
    },
    /// The footer's row count is not a number.
    #[error("{}: footer metadata `{FOOTER_NUM_ROWS}` is {value:?}, not a count", path.display())]
    FooterRows {
        /// The shard.
        path: PathBuf,
        /// What the footer holds.
        value: String,
        /// Why it does not parse.
        #[source]
        source: ParseIntError,
    },
    /// The directory of shards could not be listed.
    #[error("cannot list shard directory {}", dir.display())]
    ListDir {
        /// The directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The writer's caller tried to set `format` or `version` in the schema metadata.
    #[error("shard metadata key `{key}` is reserved (the writer sets it); rename that key")]
    ReservedKey {
        /// `format` or `version`.
        key: &'static str,
    },
    /// The schema's `format` is another format's.
    #[error(
        "{}: schema metadata `{FORMAT_KEY}` is {found:?}, expected {FORMAT:?}: this is not a \
         shard of ALBERT pretraining instances",
        path.display()
    )]
    WrongFormat {
        /// The file.
        path: PathBuf,
        /// Its `format`.
        found: String,
    },
    /// The schema has no `format`: not a file of this crate.
    #[error(
        "{}: schema metadata has no `{FORMAT_KEY}` key (expected {FORMAT:?}): this is not a \
         shard written by pipeline-shards",
        path.display()
    )]
    NoFormat {
        /// The file.
        path: PathBuf,
    },
    /// A shard of another format version.
    #[error(
        "{}: shard format version {found:?}, but this reader supports version {VERSION:?}: \
         re-run the `mask` stage with this build to regenerate the shards",
        path.display()
    )]
    WrongVersion {
        /// The file.
        path: PathBuf,
        /// Its `version`.
        found: String,
    },
    /// The schema has no `version`.
    #[error("{}: schema metadata has no `{VERSION_KEY}` key", path.display())]
    NoVersion {
        /// The file.
        path: PathBuf,
    },
    /// A column of the schema is absent.
    #[error("{}: missing column `{column}` (expected type {expected})", path.display())]
    MissingColumn {
        /// The file.
        path: PathBuf,
        /// The column's name.
        column: &'static str,
        /// The type it should have.
        expected: DataType,
    },
    /// A column has another type than the schema's.
    #[error("{}: column `{column}` has type {found}, expected {expected}", path.display())]
    ColumnType {
        /// The file.
        path: PathBuf,
        /// The column's name.
        column: &'static str,
        /// Its type in the file.
        found: DataType,
        /// The type it should have.
        expected: DataType,
    },
    /// A column's data is not what its schema type promises (wrong array type, nulls).
    #[error("{}: column `{column}` {problem}", path.display())]
    BadColumn {
        /// The file.
        path: PathBuf,
        /// The column's name.
        column: &'static str,
        /// What is wrong, e.g. "has 2 nulls".
        problem: String,
    },
    /// A row breaks an invariant of the schema (lengths, positions, label, negative ids).
    #[error("{}: row {row}: {problem}", path.display())]
    BadRow {
        /// The file.
        path: PathBuf,
        /// The row, 0-based, in file order.
        row: usize,
        /// What is wrong.
        problem: String,
    },
    /// A row is longer than the reader's `max_seq_length`.
    #[error(
        "{}: row {row} has {tokens} tokens, more than max_seq_length {max}: the reader's \
         max_seq_length must be at least the mask stage's",
        path.display()
    )]
    TooLong {
        /// The file.
        path: PathBuf,
        /// The row, 0-based, in file order.
        row: usize,
        /// Its tokens.
        tokens: usize,
        /// The reader's `max_seq_length`.
        max: usize,
    },
    /// A row has more masked positions than the reader's `max_predictions_per_seq`.
    #[error(
        "{}: row {row} has {predictions} masked positions, more than max_predictions_per_seq \
         {max}: the reader's max_predictions_per_seq must be at least the mask stage's",
        path.display()
    )]
    TooManyPredictions {
        /// The file.
        path: PathBuf,
        /// The row, 0-based, in file order.
        row: usize,
        /// Its masked positions.
        predictions: usize,
        /// The reader's `max_predictions_per_seq`.
        max: usize,
    },
    /// The writer was asked for shards of no instance.
    #[error("instances_per_shard must be at least 1 (got 0)")]
    NoInstancesPerShard,
    /// The shard prefix is not a plain file name.
    #[error("shard prefix {prefix:?} must be a non-empty file name without path separators")]
    BadPrefix {
        /// The prefix given.
        prefix: String,
    },
    /// The shard directory could not be created.
    #[error("cannot create shard directory {}", dir.display())]
    CreateDir {
        /// The directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The writer was given an instance it cannot store (a bug in the caller). The problem is
    /// part of the message, not a `source`: it is this crate's own check, and tests and logs
    /// read the two together.
    #[error("instance {index} (0-based) given to the shard writer: {problem}")]
    BadInstance {
        /// How many instances the writer had taken before it.
        index: u64,
        /// What is wrong with it.
        problem: InstanceError,
    },
    /// A shard file could not be created.
    #[error("cannot create shard file {}", path.display())]
    CreateFile {
        /// The shard.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The IPC header of a new shard could not be written.
    #[error("cannot write the header of {}", path.display())]
    WriteHeader {
        /// The shard.
        path: PathBuf,
        /// Why.
        #[source]
        source: ArrowError,
    },
    /// A record batch could not be written.
    #[error("cannot write to shard {}", path.display())]
    Write {
        /// The shard.
        path: PathBuf,
        /// Why.
        #[source]
        source: ArrowError,
    },
    /// A shard's footer could not be written.
    #[error("cannot finish shard {}", path.display())]
    Finish {
        /// The shard.
        path: PathBuf,
        /// Why.
        #[source]
        source: ArrowError,
    },
    /// Arrow refused the columns of a record batch being built.
    #[error(transparent)]
    BuildBatch(ArrowError),
    /// A [`crate::BatchReaderConfig`] value out of range (the message names it).
    #[error("{0}")]
    Config(&'static str),
    /// The batch reader was given an empty file list.
    #[error("the batch reader was given no shard files")]
    NoFiles,
    /// A shard holds more rows than the reader can index.
    #[error("{}: {rows} rows, more than one shard may hold ({})", path.display(), u32::MAX)]
    TooManyRows {
        /// The shard.
        path: PathBuf,
        /// Its rows.
        rows: u64,
    },
    /// An endless reader over shards without instances would never yield a batch.
    #[error("the {files} shard files hold no instances")]
    NoInstances {
        /// How many files it was given.
        files: usize,
    },
    /// An endless `drop_last` reader over fewer instances than one batch would never yield one.
    #[error(
        "the shards hold {instances} instances, fewer than one batch of {batch_size} with \
         drop_last: lower batch_size or give more data"
    )]
    LessThanABatch {
        /// Instances in all the shards.
        instances: u64,
        /// The batch size.
        batch_size: usize,
    },
    /// The thread of a [`crate::Prefetch`] could not be started.
    #[error("cannot start the batch-reading thread")]
    Thread(#[source] std::io::Error),
    /// The thread of a [`crate::Prefetch`] panicked (a bug): its batches end there.
    #[error("the batch-reading thread panicked: {0}")]
    ThreadPanicked(String),
    /// A saved [`crate::ReaderPosition`] does not fit these shards or this config.
    #[error("cannot resume: {0}")]
    Resume(String),
    /// A shard's rows differ from the count its footer gave when the reader opened.
    #[error(
        "{}: holds {rows} rows but its footer said {footer}: the file changed while being read, \
         or its footer is wrong",
        path.display()
    )]
    RowsChanged {
        /// The shard.
        path: PathBuf,
        /// Rows decoded.
        rows: usize,
        /// Rows the footer said.
        footer: u64,
    },
    /// A state the code should never reach.
    #[error("internal error: {0}")]
    Internal(&'static str),
}

/// Why [`crate::validate_instance`] refuses an instance.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InstanceError {
    /// More tokens than an Int32 offset can index.
    #[error("input_ids has {tokens} tokens, more than Int32 can index")]
    TooManyTokens {
        /// Its tokens.
        tokens: usize,
    },
    /// A token id above `i32::MAX`.
    #[error("token id {id} does not fit the Int32 `input_ids` column")]
    TokenIdTooLarge {
        /// The id.
        id: u32,
    },
    /// `token_type_ids` and `input_ids` differ in length.
    #[error("token_type_ids has {types} entries but input_ids has {tokens}")]
    TypeIdsLength {
        /// Entries of `token_type_ids`.
        types: usize,
        /// Entries of `input_ids`.
        tokens: usize,
    },
    /// A token type other than 0 or 1.
    #[error("token type {value}: token_type_ids must be 0 (segment A) or 1 (segment B)")]
    BadTokenType {
        /// The value.
        value: u8,
    },
    /// `masked_positions` and `masked_ids` differ in length.
    #[error("{positions} masked positions but {ids} masked ids")]
    MaskedLengths {
        /// Entries of `masked_positions`.
        positions: usize,
        /// Entries of `masked_ids`.
        ids: usize,
    },
    /// Two masked positions out of order (or repeated).
    #[error("masked_positions must be strictly ascending, found {first} then {then}")]
    PositionsNotAscending {
        /// The earlier position.
        first: u32,
        /// The one after it.
        then: u32,
    },
    /// A masked position past the last token.
    #[error("masked position {position} is outside the {tokens} tokens of input_ids")]
    PositionOutside {
        /// The position.
        position: u32,
        /// Tokens in `input_ids`.
        tokens: usize,
    },
    /// A masked id above `i32::MAX`.
    #[error("masked id {id} does not fit the Int32 `masked_ids` column")]
    MaskedIdTooLarge {
        /// The id.
        id: u32,
    },
    /// A sentence-order label other than 0 or 1.
    #[error("sentence_order_label is {label}, must be 0 (in order) or 1 (swapped)")]
    BadLabel {
        /// The label.
        label: u8,
    },
}
