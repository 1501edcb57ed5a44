//! [`Instance`] and the [`ShardWriter`] that the `mask` stage streams instances into.
//!
//! Rows are buffered into record batches of [`ROWS_PER_RECORD_BATCH`] and written through
//! `arrow_ipc::writer::FileWriter` (the IPC *file* format, uncompressed); a shard file is closed
//! as soon as it holds `instances_per_shard` rows, so memory is one record batch whatever the
//! corpus size. Every instance is checked before it is written: a malformed row is a bug in the
//! caller and must not reach the trainer.

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::builder::OffsetBufferBuilder;
use arrow_array::{ArrayRef, Int8Array, Int32Array, ListArray, RecordBatch};
use arrow_ipc::writer::FileWriter;
use arrow_schema::{DataType, Field, SchemaRef};
use serde::{Deserialize, Serialize};

use crate::error::{InstanceError, Result, ShardError};
use crate::schema::{
    FOOTER_NUM_ROWS, FOOTER_NUM_TOKENS, Metadata, ROWS_PER_RECORD_BATCH, shard_schema,
};

/// One ALBERT pretraining instance: `[CLS] A [SEP] B [SEP]` with its masked-LM targets and
/// sentence-order label. See `SCHEMA.md` for each field's meaning.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Instance {
    /// Token ids including `[CLS]` and the two `[SEP]`s, unpadded; masked positions already hold
    /// their replacement (`[MASK]`, a random id, or the original).
    pub input_ids: Vec<u32>,
    /// 0 for `[CLS] A [SEP]`, 1 for `B [SEP]`; as long as `input_ids`.
    pub token_type_ids: Vec<u8>,
    /// Strictly ascending positions into `input_ids`.
    pub masked_positions: Vec<u32>,
    /// The original token id at each masked position.
    pub masked_ids: Vec<u32>,
    /// 0 = A then B in document order, 1 = swapped.
    pub sentence_order_label: u8,
}

/// What one finished shard holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardInfo {
    /// File name (no directory), e.g. `train-00000.arrow`.
    pub file: String,
    /// Rows in the file.
    pub instances: u64,
    /// Sum of the rows' lengths.
    pub tokens: u64,
}

/// The column buffers of the record batch being filled.
#[derive(Default)]
struct RowBuffer {
    ids: Vec<i32>,
    id_lens: Vec<usize>,
    types: Vec<i8>,
    lengths: Vec<i32>,
    positions: Vec<i32>,
    masked: Vec<i32>,
    mask_lens: Vec<usize>,
    labels: Vec<i8>,
}

impl RowBuffer {
    fn rows(&self) -> usize {
        self.labels.len()
    }

    /// Appends an already validated instance.
    fn push(&mut self, inst: &Instance) {
        let n = inst.input_ids.len();
        self.ids.extend(inst.input_ids.iter().map(|&t| t as i32));
        self.id_lens.push(n);
        self.types
            .extend(inst.token_type_ids.iter().map(|&t| t as i8));
        self.lengths.push(n as i32);
        self.positions
            .extend(inst.masked_positions.iter().map(|&p| p as i32));
        self.masked
            .extend(inst.masked_ids.iter().map(|&t| t as i32));
        self.mask_lens.push(inst.masked_positions.len());
        self.labels.push(inst.sentence_order_label as i8);
    }

    /// Moves the buffered rows into a record batch, leaving the buffer empty.
    fn take_batch(&mut self, schema: &SchemaRef) -> Result<RecordBatch> {
        fn list(values: ArrayRef, lens: &[usize], item: DataType) -> ArrayRef {
            let mut offsets = OffsetBufferBuilder::<i32>::new(lens.len());
            for &l in lens {
                offsets.push_length(l);
            }
            let field = Arc::new(Field::new_list_field(item, true));
            Arc::new(ListArray::new(field, offsets.finish(), values, None))
        }
        let ids: ArrayRef = Arc::new(Int32Array::from(std::mem::take(&mut self.ids)));
        let types: ArrayRef = Arc::new(Int8Array::from(std::mem::take(&mut self.types)));
        let positions: ArrayRef = Arc::new(Int32Array::from(std::mem::take(&mut self.positions)));
        let masked: ArrayRef = Arc::new(Int32Array::from(std::mem::take(&mut self.masked)));
        let columns: Vec<ArrayRef> = vec![
            list(ids, &self.id_lens, DataType::Int32),
            list(types, &self.id_lens, DataType::Int8),
            Arc::new(Int32Array::from(std::mem::take(&mut self.lengths))),
            list(positions, &self.mask_lens, DataType::Int32),
            list(masked, &self.mask_lens, DataType::Int32),
            Arc::new(Int8Array::from(std::mem::take(&mut self.labels))),
        ];
        self.id_lens.clear();
        self.mask_lens.clear();
        RecordBatch::try_new(schema.clone(), columns).map_err(ShardError::BuildBatch)
    }
}

/// The shard file being written.
struct OpenShard {
    writer: FileWriter<BufWriter<File>>,
    path: PathBuf,
    info: ShardInfo,
}

/// Streams [`Instance`]s into `{prefix}-00000.arrow`, `{prefix}-00001.arrow`, … in `dir`.
///
/// A shard is closed when it reaches `instances_per_shard` rows; [`ShardWriter::finish`] closes
/// the last one and must be called (a dropped writer leaves its open shard without the IPC
/// footer, unreadable). A writer that received no instance writes no file at all, and `finish`
/// returns an empty list. Existing files of the same names are overwritten; other files in `dir`
/// are left alone. [`ShardWriter::interleaved`] numbers the files of several writers in turn.
pub struct ShardWriter {
    dir: PathBuf,
    prefix: String,
    /// Files are numbered `first + k·stride` (`0, 1, 2, …` unless [`ShardWriter::interleaved`]).
    first: usize,
    stride: usize,
    instances_per_shard: usize,
    schema: SchemaRef,
    buffer: RowBuffer,
    open: Option<OpenShard>,
    done: Vec<ShardInfo>,
    written: u64,
}

impl ShardWriter {
    /// A writer into `dir` (created if missing). `metadata` becomes schema metadata of every
    /// shard, beside `format` and `version` (which it may not contain).
    pub fn create(
        dir: &Path,
        prefix: &str,
        instances_per_shard: usize,
        metadata: Metadata,
    ) -> Result<Self> {
        if instances_per_shard == 0 {
            return Err(ShardError::NoInstancesPerShard);
        }
        if prefix.is_empty() || prefix.contains(['/', '\\']) {
            return Err(ShardError::BadPrefix {
                prefix: prefix.to_string(),
            });
        }
        let schema = Arc::new(shard_schema(&metadata)?);
        std::fs::create_dir_all(dir).map_err(|source| ShardError::CreateDir {
            dir: dir.to_path_buf(),
            source,
        })?;
        Ok(Self {
            dir: dir.to_path_buf(),
            prefix: prefix.to_string(),
            first: 0,
            stride: 1,
            instances_per_shard,
            schema,
            buffer: RowBuffer::default(),
            open: None,
            done: Vec::new(),
            written: 0,
        })
    }

    /// This writer as writer `index` of `of` sharing one prefix: its files are numbered
    /// `index`, `index + of`, `index + 2·of`, …, so that the writers' files never collide and
    /// sort in turn (`{prefix}-00000` is writer 0's first, `{prefix}-00001` writer 1's first).
    pub fn interleaved(self, index: usize, of: usize) -> Self {
        Self {
            first: index,
            stride: of.max(1),
            ..self
        }
    }

    /// Appends one instance (checked: see [`validate_instance`]).
    pub fn write(&mut self, inst: &Instance) -> Result<()> {
        validate_instance(inst).map_err(|problem| ShardError::BadInstance {
            index: self.written,
            problem,
        })?;
        if self.open.is_none() {
            self.open_shard()?;
        }
        self.buffer.push(inst);
        self.written += 1;
        let full = {
            let Some(open) = self.open.as_mut() else {
                return Err(ShardError::Internal("no open shard"));
            };
            open.info.instances += 1;
            open.info.tokens += inst.input_ids.len() as u64;
            open.info.instances as usize >= self.instances_per_shard
        };
        if full {
            self.close_shard()?;
        } else if self.buffer.rows() >= ROWS_PER_RECORD_BATCH {
            self.flush_batch()?;
        }
        Ok(())
    }

    /// Closes the open shard and returns every shard written, in file order.
    pub fn finish(mut self) -> Result<Vec<ShardInfo>> {
        if self.open.is_some() {
            self.close_shard()?;
        }
        Ok(std::mem::take(&mut self.done))
    }

    fn open_shard(&mut self) -> Result<()> {
        let number = self.first + self.done.len() * self.stride;
        let file = format!("{}-{:05}.arrow", self.prefix, number);
        let path = self.dir.join(&file);
        let f = match File::create(&path) {
            Ok(f) => f,
            Err(source) => return Err(ShardError::CreateFile { path, source }),
        };
        let writer = match FileWriter::try_new(BufWriter::with_capacity(1 << 20, f), &self.schema) {
            Ok(w) => w,
            Err(source) => return Err(ShardError::WriteHeader { path, source }),
        };
        self.open = Some(OpenShard {
            writer,
            path,
            info: ShardInfo {
                file,
                instances: 0,
                tokens: 0,
            },
        });
        Ok(())
    }

    fn flush_batch(&mut self) -> Result<()> {
        if self.buffer.rows() == 0 {
            return Ok(());
        }
        let Some(open) = self.open.as_mut() else {
            return Err(ShardError::Internal("rows buffered without an open shard"));
        };
        let batch = self.buffer.take_batch(&self.schema)?;
        open.writer
            .write(&batch)
            .map_err(|source| ShardError::Write {
                path: open.path.clone(),
                source,
            })
    }

    fn close_shard(&mut self) -> Result<()> {
        self.flush_batch()?;
        let Some(mut open) = self.open.take() else {
            return Ok(());
        };
        open.writer
            .write_metadata(FOOTER_NUM_ROWS, open.info.instances.to_string());
        open.writer
            .write_metadata(FOOTER_NUM_TOKENS, open.info.tokens.to_string());
        if let Err(source) = open.writer.finish() {
            return Err(ShardError::Finish {
                path: open.path,
                source,
            });
        }
        self.done.push(open.info);
        Ok(())
    }
}

/// Checks that an instance can be stored and read back meaningfully: ids fit Int32,
/// `token_type_ids` is as long as `input_ids` and holds 0/1, masked positions are strictly
/// ascending and inside the sequence, one masked id per position, and the label is 0 or 1.
pub fn validate_instance(inst: &Instance) -> Result<(), InstanceError> {
    let n = inst.input_ids.len();
    if n > i32::MAX as usize {
        return Err(InstanceError::TooManyTokens { tokens: n });
    }
    if let Some(&id) = inst.input_ids.iter().find(|&&t| t > i32::MAX as u32) {
        return Err(InstanceError::TokenIdTooLarge { id });
    }
    if inst.token_type_ids.len() != n {
        return Err(InstanceError::TypeIdsLength {
            types: inst.token_type_ids.len(),
            tokens: n,
        });
    }
    if let Some(&value) = inst.token_type_ids.iter().find(|&&t| t > 1) {
        return Err(InstanceError::BadTokenType { value });
    }
    if inst.masked_positions.len() != inst.masked_ids.len() {
        return Err(InstanceError::MaskedLengths {
            positions: inst.masked_positions.len(),
            ids: inst.masked_ids.len(),
        });
    }
    if let Some(w) = inst.masked_positions.windows(2).find(|w| w[0] >= w[1]) {
        return Err(InstanceError::PositionsNotAscending {
            first: w[0],
            then: w[1],
        });
    }
    if let Some(&position) = inst.masked_positions.last()
        && position as usize >= n
    {
        return Err(InstanceError::PositionOutside {
            position,
            tokens: n,
        });
    }
    if let Some(&id) = inst.masked_ids.iter().find(|&&t| t > i32::MAX as u32) {
        return Err(InstanceError::MaskedIdTooLarge { id });
    }
    if inst.sentence_order_label > 1 {
        return Err(InstanceError::BadLabel {
            label: inst.sentence_order_label,
        });
    }
    Ok(())
}
