//! The Arrow schema of a shard (the public contract described in `SCHEMA.md`) and its checks.
//!
//! Readers look columns up by name, not by position, so a file whose columns were reordered (for
//! instance rewritten by pyarrow or polars) still reads; extra columns are ignored.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use arrow_schema::{DataType, Field, Schema};

use crate::error::{Result, ShardError};

/// Schema metadata key naming the format.
pub const FORMAT_KEY: &str = "format";
/// The value of [`FORMAT_KEY`] in every shard.
pub const FORMAT: &str = "albert-pretraining-instances";
/// Schema metadata key holding the format version.
pub const VERSION_KEY: &str = "version";
/// The format version this crate writes and reads.
pub const VERSION: &str = "1";
/// Rows per Arrow record batch inside a shard (the last batch of a shard may be shorter).
pub const ROWS_PER_RECORD_BATCH: usize = 1024;
/// Footer (not schema) metadata key with the shard's row count: lets the training reader size an
/// epoch without decoding every shard. Optional; readers count rows when it is absent.
pub const FOOTER_NUM_ROWS: &str = "num_rows";
/// Footer metadata key with the shard's total token count (sum of `length`). Optional.
pub const FOOTER_NUM_TOKENS: &str = "num_tokens";

/// A shard's schema metadata: `format`, `version` and what the writer's caller recorded, in key
/// order (so that it prints and serialises the same way every time).
pub type Metadata = BTreeMap<String, String>;

/// Column names, in the order the writer lays them out.
pub mod columns {
    /// Token ids, `list<int32>`.
    pub const INPUT_IDS: &str = "input_ids";
    /// Segment ids, `list<int8>`.
    pub const TOKEN_TYPE_IDS: &str = "token_type_ids";
    /// Token count, `int32`.
    pub const LENGTH: &str = "length";
    /// Masked positions, `list<int32>`.
    pub const MASKED_POSITIONS: &str = "masked_positions";
    /// The original ids at the masked positions, `list<int32>`.
    pub const MASKED_IDS: &str = "masked_ids";
    /// Sentence-order label, `int8`.
    pub const SENTENCE_ORDER_LABEL: &str = "sentence_order_label";
}

/// A list type whose items are `item` (nullable, as `pyarrow.list_(pa.int32())` makes it, so
/// that the type prints as `list<item: int32>` and compares equal to pyarrow's default).
fn list_of(item: DataType) -> DataType {
    DataType::List(Arc::new(Field::new_list_field(item, true)))
}

/// The expected type of every column, in writer order.
fn expected_columns() -> [(&'static str, DataType); 6] {
    [
        (columns::INPUT_IDS, list_of(DataType::Int32)),
        (columns::TOKEN_TYPE_IDS, list_of(DataType::Int8)),
        (columns::LENGTH, DataType::Int32),
        (columns::MASKED_POSITIONS, list_of(DataType::Int32)),
        (columns::MASKED_IDS, list_of(DataType::Int32)),
        (columns::SENTENCE_ORDER_LABEL, DataType::Int8),
    ]
}

/// The shard schema with `format`/`version` and the caller's `metadata` as schema metadata.
///
/// Errors if `metadata` tries to set `format` or `version` (reserved: they identify the layout).
pub fn shard_schema(metadata: &Metadata) -> Result<Schema> {
    for key in [FORMAT_KEY, VERSION_KEY] {
        if metadata.contains_key(key) {
            return Err(ShardError::ReservedKey { key });
        }
    }
    let fields: Vec<Field> = expected_columns()
        .into_iter()
        .map(|(name, ty)| Field::new(name, ty, false))
        .collect();
    let mut meta: HashMap<String, String> = metadata
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    meta.insert(FORMAT_KEY.to_string(), FORMAT.to_string());
    meta.insert(VERSION_KEY.to_string(), VERSION.to_string());
    Ok(Schema::new_with_metadata(fields, meta))
}

/// Positions of the six columns in a file's schema (columns are found by name).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ColumnIndex {
    /// Column of `input_ids`.
    pub input_ids: usize,
    /// Column of `token_type_ids`.
    pub token_type_ids: usize,
    /// Column of `length`.
    pub length: usize,
    /// Column of `masked_positions`.
    pub masked_positions: usize,
    /// Column of `masked_ids`.
    pub masked_ids: usize,
    /// Column of `sentence_order_label`.
    pub sentence_order_label: usize,
}

/// Checks `schema` (read from `path`) against the contract: the `format` and `version` metadata,
/// then every column's presence and type. Returns where each column is.
pub(crate) fn check_schema(schema: &Schema, path: &Path) -> Result<ColumnIndex> {
    let meta = schema.metadata();
    let path = || path.to_path_buf();
    match meta.get(FORMAT_KEY) {
        Some(f) if f == FORMAT => {}
        Some(f) => {
            return Err(ShardError::WrongFormat {
                path: path(),
                found: f.clone(),
            });
        }
        None => return Err(ShardError::NoFormat { path: path() }),
    }
    match meta.get(VERSION_KEY) {
        Some(v) if v == VERSION => {}
        Some(v) => {
            return Err(ShardError::WrongVersion {
                path: path(),
                found: v.clone(),
            });
        }
        None => return Err(ShardError::NoVersion { path: path() }),
    }
    let mut idx = [0usize; 6];
    for (slot, (column, expected)) in idx.iter_mut().zip(expected_columns()) {
        let Ok(i) = schema.index_of(column) else {
            return Err(ShardError::MissingColumn {
                path: path(),
                column,
                expected,
            });
        };
        let found = schema.field(i).data_type();
        if !same_type(found, &expected) {
            return Err(ShardError::ColumnType {
                path: path(),
                column,
                found: found.clone(),
                expected,
            });
        }
        *slot = i;
    }
    Ok(ColumnIndex {
        input_ids: idx[0],
        token_type_ids: idx[1],
        length: idx[2],
        masked_positions: idx[3],
        masked_ids: idx[4],
        sentence_order_label: idx[5],
    })
}

/// Type equality that ignores a list item's field name and nullability (writers differ on
/// those: pyarrow says `item`, polars says `item` too but others use `element`).
fn same_type(got: &DataType, want: &DataType) -> bool {
    match (got, want) {
        (DataType::List(g), DataType::List(w)) => g.data_type() == w.data_type(),
        _ => got == want,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_has_format_version_and_caller_metadata() {
        let mut m = BTreeMap::new();
        m.insert("vocab_size".to_string(), "21128".to_string());
        let s = shard_schema(&m).unwrap();
        assert_eq!(s.metadata()[FORMAT_KEY], FORMAT);
        assert_eq!(s.metadata()[VERSION_KEY], VERSION);
        assert_eq!(s.metadata()["vocab_size"], "21128");
        assert_eq!(s.fields().len(), 6);
        assert_eq!(
            s.field(0).data_type().to_string(),
            "List(Int32)",
            "list item field is the default nullable `item`"
        );
        check_schema(&s, Path::new("x.arrow")).unwrap();
    }

    #[test]
    fn reserved_keys_are_rejected() {
        let mut m = BTreeMap::new();
        m.insert("version".to_string(), "2".to_string());
        let e = shard_schema(&m).unwrap_err().to_string();
        assert!(e.contains("reserved"), "{e}");
    }

    #[test]
    fn check_names_file_and_problem() {
        let s = shard_schema(&BTreeMap::new()).unwrap();
        let mut meta = s.metadata().clone();
        meta.insert(VERSION_KEY.into(), "7".into());
        let wrong = Schema::new_with_metadata(s.fields().clone(), meta.clone());
        let e = check_schema(&wrong, Path::new("d/a.arrow"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("d/a.arrow") && e.contains("\"7\""), "{e}");

        meta.insert(VERSION_KEY.into(), VERSION.into());
        let fields: Vec<_> = s
            .fields()
            .iter()
            .filter(|f| f.name() != columns::MASKED_IDS)
            .cloned()
            .collect();
        let missing = Schema::new_with_metadata(fields, meta.clone());
        let e = check_schema(&missing, Path::new("b.arrow"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("b.arrow") && e.contains("missing column `masked_ids`"),
            "{e}"
        );

        let mut fields: Vec<Field> = s.fields().iter().map(|f| f.as_ref().clone()).collect();
        fields[2] = Field::new(columns::LENGTH, DataType::Int64, false);
        let typed = Schema::new_with_metadata(fields, meta);
        let e = check_schema(&typed, Path::new("c.arrow"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("`length` has type Int64"), "{e}");
    }
}
