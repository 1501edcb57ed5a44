//! Reading shards back: whole-shard decoding with full validation ([`read_shard`] for tests and
//! small evaluation sets; the training reader uses the same loader), row counts, and listing the
//! shards of a directory.
//!
//! A shard is decoded into flat column vectors (all rows' tokens end to end plus offsets), so a
//! row is a few slices and reading one costs no allocation.

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use arrow_array::{Array, Int8Array, Int32Array, ListArray, RecordBatch};
use arrow_ipc::reader::FileReader;

use crate::error::{Result, ShardError};
use crate::schema::{ColumnIndex, FOOTER_NUM_ROWS, Metadata, check_schema, columns};
use crate::writer::Instance;

/// Opens a shard and checks its schema. The shard (an artifact's file, which a `cmd` dep may
/// have made) is opened with the shared reader's open: a FIFO there is refused rather than
/// waited on, a device rather than read. It is not read whole: Arrow reads its footer and then
/// the batches, each checked against the schema.
fn open(path: &Path) -> Result<(FileReader<BufReader<File>>, ColumnIndex)> {
    let f = pipeline_bounded::open(path).map_err(ShardError::Open)?;
    let reader =
        FileReader::try_new(BufReader::with_capacity(1 << 20, f), None).map_err(|source| {
            ShardError::NotArrow {
                path: path.to_path_buf(),
                source,
            }
        })?;
    let cols = check_schema(&reader.schema(), path)?;
    Ok((reader, cols))
}

/// The number of instances in a shard: from the footer's `num_rows` when the writer recorded it,
/// else by decoding the record batches. Also checks the schema.
pub fn shard_instances(path: &Path) -> Result<u64> {
    let (reader, _) = open(path)?;
    if let Some(n) = reader.custom_metadata().get(FOOTER_NUM_ROWS) {
        return n.parse::<u64>().map_err(|source| ShardError::FooterRows {
            path: path.to_path_buf(),
            value: n.clone(),
            source,
        });
    }
    let mut rows = 0u64;
    for batch in reader {
        rows += decoded(batch, path)?.num_rows() as u64;
    }
    Ok(rows)
}

/// A shard's schema metadata (`format`, `version`, and what the writer's caller recorded, e.g.
/// the `mask` stage's `vocab_size`, `max_seq_length` and `max_predictions_per_seq`), read from
/// the footer without decoding any row. Also checks the schema.
pub fn shard_metadata(path: &Path) -> Result<Metadata> {
    let (reader, _) = open(path)?;
    Ok(metadata_of(&reader))
}

/// The schema metadata of an open shard, in key order.
fn metadata_of(reader: &FileReader<BufReader<File>>) -> Metadata {
    reader
        .schema()
        .metadata()
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// A record batch as the reader gave it, its error naming the shard.
fn decoded(
    batch: std::result::Result<RecordBatch, arrow_schema::ArrowError>,
    path: &Path,
) -> Result<RecordBatch> {
    batch.map_err(|source| ShardError::Decode {
        path: path.to_path_buf(),
        source,
    })
}

/// The shards `{prefix}-NNNNN.arrow` directly in `dir`, sorted by name (the order the writer
/// numbered them): the file list to give [`crate::BatchReader`]. Other files (another prefix,
/// e.g. the `eval` shards beside the `shard` ones) are left out.
pub fn list_shards(dir: &Path, prefix: &str) -> Result<Vec<PathBuf>> {
    let list_error = |source| ShardError::ListDir {
        dir: dir.to_path_buf(),
        source,
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(list_error)? {
        let entry = entry.map_err(list_error)?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let number = name
            .strip_prefix(prefix)
            .and_then(|r| r.strip_prefix('-'))
            .and_then(|r| r.strip_suffix(".arrow"));
        if number.is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            && entry.path().is_file()
        {
            files.push(entry.path());
        }
    }
    files.sort();
    Ok(files)
}

/// Limits a row must respect (the training reader's `max_seq_length` and
/// `max_predictions_per_seq`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// The longest row the reader pads to.
    pub max_seq_length: usize,
    /// The most masked positions a row may have.
    pub max_predictions_per_seq: usize,
}

/// One row of a decoded shard.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Row<'a> {
    /// Token ids.
    pub ids: &'a [i32],
    /// Segment ids, one per token.
    pub types: &'a [i8],
    /// Masked positions, ascending.
    pub positions: &'a [i32],
    /// The original id at each masked position.
    pub masked: &'a [i32],
    /// Sentence-order label.
    pub label: i8,
}

/// Decoded rows in flat columns: a whole shard ([`ShardData::load`]), or the rows of the batch
/// the training reader is assembling (copied out of the shard so that a batch can span two
/// shards while only one is decoded). Row `r`'s tokens are `ids[tok_off[r]..tok_off[r + 1]]`,
/// its masked positions `positions[mask_off[r]..mask_off[r + 1]]`.
#[derive(Debug)]
pub(crate) struct ShardData {
    ids: Vec<i32>,
    types: Vec<i8>,
    tok_off: Vec<usize>,
    positions: Vec<i32>,
    masked: Vec<i32>,
    mask_off: Vec<usize>,
    labels: Vec<i8>,
}

impl Default for ShardData {
    fn default() -> Self {
        ShardData {
            ids: Vec::new(),
            types: Vec::new(),
            tok_off: vec![0],
            positions: Vec::new(),
            masked: Vec::new(),
            mask_off: vec![0],
            labels: Vec::new(),
        }
    }
}

/// The columns of one record batch, checked for type and nulls.
struct BatchColumns<'a> {
    ids: &'a [i32],
    ids_off: &'a [i32],
    types: &'a [i8],
    types_off: &'a [i32],
    positions: &'a [i32],
    positions_off: &'a [i32],
    masked: &'a [i32],
    masked_off: &'a [i32],
    lengths: &'a Int32Array,
    labels: &'a Int8Array,
}

impl<'a> BatchColumns<'a> {
    fn of(batch: &'a RecordBatch, cols: ColumnIndex, path: &Path) -> Result<Self> {
        let ids = list_column(batch, cols.input_ids, columns::INPUT_IDS, path)?;
        let types = list_column(batch, cols.token_type_ids, columns::TOKEN_TYPE_IDS, path)?;
        let positions = list_column(
            batch,
            cols.masked_positions,
            columns::MASKED_POSITIONS,
            path,
        )?;
        let masked = list_column(batch, cols.masked_ids, columns::MASKED_IDS, path)?;
        Ok(BatchColumns {
            lengths: scalar_column::<Int32Array>(batch, cols.length, columns::LENGTH, path)?,
            labels: scalar_column::<Int8Array>(
                batch,
                cols.sentence_order_label,
                columns::SENTENCE_ORDER_LABEL,
                path,
            )?,
            ids: list_values::<Int32Array>(ids, columns::INPUT_IDS, path)?,
            types: list_values::<Int8Array>(types, columns::TOKEN_TYPE_IDS, path)?,
            positions: list_values::<Int32Array>(positions, columns::MASKED_POSITIONS, path)?,
            masked: list_values::<Int32Array>(masked, columns::MASKED_IDS, path)?,
            ids_off: ids.value_offsets(),
            types_off: types.value_offsets(),
            positions_off: positions.value_offsets(),
            masked_off: masked.value_offsets(),
        })
    }

    /// Row `r` of the batch (row `row` of the file, for messages), checked against the schema's
    /// invariants and `limits`.
    fn row(&self, r: usize, row: usize, path: &Path, limits: Option<Limits>) -> Result<Row<'a>> {
        let bad = |problem: String| {
            Err(ShardError::BadRow {
                path: path.to_path_buf(),
                row,
                problem,
            })
        };
        let span = |off: &[i32]| (off[r] as usize, off[r + 1] as usize);
        let (a, b) = span(self.ids_off);
        let n = b - a;
        let length = self.lengths.value(r);
        if length < 0 || length as usize != n {
            return bad(format!(
                "`length` is {length} but `input_ids` has {n} tokens"
            ));
        }
        let (ta, tb) = span(self.types_off);
        if tb - ta != n {
            return bad(format!(
                "`token_type_ids` has {} entries but `input_ids` has {n}",
                tb - ta
            ));
        }
        let (pa, pb) = span(self.positions_off);
        let (ma, mb) = span(self.masked_off);
        if pb - pa != mb - ma {
            return bad(format!(
                "{} masked positions but {} masked ids",
                pb - pa,
                mb - ma
            ));
        }
        let positions = &self.positions[pa..pb];
        let mut prev = -1i64;
        for &p in positions {
            if (p as i64) <= prev || (p as usize) >= n {
                return bad(format!(
                    "masked position {p} is out of order or outside the {n} tokens (positions \
                     must be strictly ascending and < length)"
                ));
            }
            prev = p as i64;
        }
        let label = self.labels.value(r);
        if label != 0 && label != 1 {
            return bad(format!("sentence_order_label is {label}, must be 0 or 1"));
        }
        if let Some(l) = limits {
            check_limits(l, n, pb - pa, row, path)?;
        }
        Ok(Row {
            ids: &self.ids[a..b],
            types: &self.types[ta..tb],
            positions,
            masked: &self.masked[ma..mb],
            label,
        })
    }
}

/// A row of `n` tokens and `predictions` masked positions against the reader's limits.
fn check_limits(l: Limits, n: usize, predictions: usize, row: usize, path: &Path) -> Result<()> {
    if n > l.max_seq_length {
        return Err(ShardError::TooLong {
            path: path.to_path_buf(),
            row,
            tokens: n,
            max: l.max_seq_length,
        });
    }
    if predictions > l.max_predictions_per_seq {
        return Err(ShardError::TooManyPredictions {
            path: path.to_path_buf(),
            row,
            predictions,
            max: l.max_predictions_per_seq,
        });
    }
    Ok(())
}

impl ShardData {
    /// The number of rows.
    pub fn rows(&self) -> usize {
        self.labels.len()
    }

    /// Row `r`, as slices into the columns.
    pub fn row(&self, r: usize) -> Row<'_> {
        let (a, b) = (self.tok_off[r], self.tok_off[r + 1]);
        let (c, d) = (self.mask_off[r], self.mask_off[r + 1]);
        Row {
            ids: &self.ids[a..b],
            types: &self.types[a..b],
            positions: &self.positions[c..d],
            masked: &self.masked[c..d],
            label: self.labels[r],
        }
    }

    /// Token ids of all rows together.
    pub fn tokens(&self) -> usize {
        self.ids.len()
    }

    /// Masked positions of all rows together.
    pub fn predictions(&self) -> usize {
        self.positions.len()
    }

    /// Appends a copy of `row`.
    pub fn push(&mut self, row: Row<'_>) {
        self.ids.extend_from_slice(row.ids);
        self.types.extend_from_slice(row.types);
        self.tok_off.push(self.ids.len());
        self.positions.extend_from_slice(row.positions);
        self.masked.extend_from_slice(row.masked);
        self.mask_off.push(self.positions.len());
        self.labels.push(row.label);
    }

    /// Empties the rows, keeping the allocations (the reader reuses one across batches).
    pub fn clear(&mut self) {
        self.ids.clear();
        self.types.clear();
        self.tok_off.clear();
        self.tok_off.push(0);
        self.positions.clear();
        self.masked.clear();
        self.mask_off.clear();
        self.mask_off.push(0);
        self.labels.clear();
    }

    /// Decodes and validates every row of `path` (see `SCHEMA.md` for the invariants), checking
    /// `limits` too when given. Returns the data and the schema metadata.
    pub fn load(path: &Path, limits: Option<Limits>) -> Result<(Self, Metadata)> {
        let (reader, cols) = open(path)?;
        let metadata = metadata_of(&reader);
        let mut data = ShardData::default();
        for batch in reader {
            data.append(&decoded(batch, path)?, cols, path, limits)?;
        }
        Ok((data, metadata))
    }

    /// Appends one record batch, checking each row.
    fn append(
        &mut self,
        batch: &RecordBatch,
        cols: ColumnIndex,
        path: &Path,
        limits: Option<Limits>,
    ) -> Result<()> {
        let first_row = self.rows();
        let columns = BatchColumns::of(batch, cols, path)?;
        for r in 0..batch.num_rows() {
            let row = columns.row(r, first_row + r, path, limits)?;
            self.push(row);
        }
        Ok(())
    }
}

/// A column's data that is not what the schema type promises.
fn bad_column<T>(path: &Path, column: &'static str, problem: String) -> Result<T> {
    Err(ShardError::BadColumn {
        path: path.to_path_buf(),
        column,
        problem,
    })
}

fn list_column<'a>(
    batch: &'a RecordBatch,
    i: usize,
    name: &'static str,
    path: &Path,
) -> Result<&'a ListArray> {
    let col = batch.column(i);
    let Some(list) = col.as_any().downcast_ref::<ListArray>() else {
        return bad_column(path, name, "is not a list array".into());
    };
    if list.null_count() != 0 {
        return bad_column(
            path,
            name,
            format!(
                "has {} null rows; every row needs a value",
                list.null_count()
            ),
        );
    }
    Ok(list)
}

fn list_values<'a, T: Array + PrimitiveValues + 'static>(
    list: &'a ListArray,
    name: &'static str,
    path: &Path,
) -> Result<&'a [T::Native]> {
    let Some(values) = list.values().as_any().downcast_ref::<T>() else {
        return bad_column(path, name, "has the wrong item type".into());
    };
    if values.null_count() != 0 {
        return bad_column(path, name, "has null items".into());
    }
    Ok(values.native_values())
}

fn scalar_column<'a, T: Array + 'static>(
    batch: &'a RecordBatch,
    i: usize,
    name: &'static str,
    path: &Path,
) -> Result<&'a T> {
    let Some(col) = batch.column(i).as_any().downcast_ref::<T>() else {
        return bad_column(path, name, "has the wrong type".into());
    };
    if col.null_count() != 0 {
        return bad_column(path, name, format!("has {} nulls", col.null_count()));
    }
    Ok(col)
}

/// The value slice of the two primitive array types the schema uses.
trait PrimitiveValues {
    type Native;
    fn native_values(&self) -> &[Self::Native];
}

impl PrimitiveValues for Int32Array {
    type Native = i32;
    fn native_values(&self) -> &[i32] {
        self.values()
    }
}

impl PrimitiveValues for Int8Array {
    type Native = i8;
    fn native_values(&self) -> &[i8] {
        self.values()
    }
}

/// Reads every row of a shard, checking the schema (`format`, `version`, columns and types) and
/// each row's consistency; errors name the file (and the row). Returns the instances in file
/// order and the schema metadata (including `format` and `version`).
///
/// Loads the whole shard: meant for tests and small evaluation sets; training uses
/// [`crate::BatchReader`].
pub fn read_shard(path: impl AsRef<Path>) -> Result<(Vec<Instance>, Metadata)> {
    let path = path.as_ref();
    let (data, metadata) = ShardData::load(path, None)?;
    let mut out = Vec::with_capacity(data.rows());
    for r in 0..data.rows() {
        let row = data.row(r);
        // Checked: every value came from a validated column whose types are Int32/Int8 and
        // non-negative where it matters (positions, labels); token ids are reinterpreted as the
        // writer stored them.
        out.push(Instance {
            input_ids: non_negative(row.ids, path, r, "token id")?,
            token_type_ids: non_negative(row.types, path, r, "token type")?,
            masked_positions: row.positions.iter().map(|&p| p as u32).collect(),
            masked_ids: non_negative(row.masked, path, r, "masked id")?,
            sentence_order_label: row.label as u8,
        });
    }
    Ok((out, metadata))
}

/// `values` as unsigned integers, or an error naming the row and the first negative `what`.
fn non_negative<T, U>(values: &[T], path: &Path, row: usize, what: &str) -> Result<Vec<U>>
where
    T: Copy + std::fmt::Display + TryInto<U>,
{
    values
        .iter()
        .map(|&t| {
            t.try_into().map_err(|_| ShardError::BadRow {
                path: path.to_path_buf(),
                row,
                problem: format!("negative {what} {t}"),
            })
        })
        .collect()
}
