//! Pretraining instances as Arrow IPC shards: the schema (a public contract, also in
//! `SCHEMA.md`), the [`ShardWriter`] the `mask` stage streams into, [`read_shard`] for tests and
//! small sets, and the shuffling, padding, resumable [`BatchReader`] the `pretrain` stage
//! trains from.
//!
//! # Schema (format `albert-pretraining-instances`, version `1`)
//!
//! Each shard is an Arrow IPC **file** (`pyarrow.ipc.open_file`, `polars.read_ipc`),
//! uncompressed, in record batches of 1,024 rows (the last may be shorter). One row is one
//! instance `[CLS] A [SEP] B [SEP]`:
//!
//! | column | Arrow type | meaning |
//! |---|---|---|
//! | `input_ids` | `list<int32>` | token ids incl. `[CLS]`/`[SEP]`, unpadded; masked positions hold their replacement |
//! | `token_type_ids` | `list<int8>` | 0 for `[CLS] A [SEP]`, 1 for `B [SEP]`; as long as `input_ids` |
//! | `length` | `int32` | number of tokens (= `len(input_ids)`); padding and attention mask are the reader's job |
//! | `masked_positions` | `list<int32>` | strictly ascending positions into `input_ids` |
//! | `masked_ids` | `list<int32>` | the original token id at each masked position |
//! | `sentence_order_label` | `int8` | 0 = A then B in document order, 1 = swapped (HF's `sentence_order_label`) |
//!
//! No column has nulls. List items are the default nullable `item` field, so types print as
//! pyarrow's `list<item: int32>`. Schema metadata (string key/values): `format` =
//! `albert-pretraining-instances`, `version` = `1`, plus whatever the writer's caller passes
//! (the `mask` stage records e.g. its vocabulary size, `max_seq_length` and
//! `max_predictions_per_seq`). The IPC footer's custom metadata also carries `num_rows` and
//! `num_tokens` (optional, for sizing an epoch without decoding).
//!
//! Files are named `{prefix}-00000.arrow`, `{prefix}-00001.arrow`, …; a shard holds
//! `instances_per_shard` rows except the last. A writer that receives no instance writes no file.
//!
//! # Batches
//!
//! [`BatchReader`] yields [`Batch`]es of row-major `i64` arrays (`f32` masked weights) padded
//! with 0: `[batch, seq_len]` for tokens, `[batch, max_predictions_per_seq]` for the masked-LM
//! targets. `seq_len` is the batch's longest row rounded up to a multiple of 8 (tensor-core
//! friendly, and fewer distinct shapes to compile), capped at `max_seq_length`; or
//! `max_seq_length` itself with `pad_to_max`. The order is seeded per (seed, epoch, shard) and
//! independent of thread count; a [`ReaderPosition`] resumes it exactly. [`Prefetch`] runs a
//! reader on a thread of its own, a few batches ahead of the training step.

#![warn(missing_docs)]

mod batch;
mod error;
mod prefetch;
mod read;
pub mod rng;
pub mod schema;
pub mod synthetic;
mod writer;

pub use batch::{Batch, BatchReader, BatchReaderConfig, ReaderPosition};
pub use error::{InstanceError, ShardError};
pub use prefetch::Prefetch;
pub use read::{list_shards, read_shard, shard_instances, shard_metadata};
pub use schema::Metadata;
pub use writer::{Instance, ShardInfo, ShardWriter, validate_instance};

#[cfg(test)]
mod tests;
