//! One state's entries into Arrow record batches of bounded size.

use crate::arrow_types::{array_of, state_schema, Columns};
use crate::TableError;
use arrow_array::builder::{BinaryBuilder, StringBuilder};
use arrow_array::{ArrayRef, Int32Array, Int64Array, RecordBatch, TimestampMillisecondArray, UInt64Array};
use arrow_schema::SchemaRef;
use statekit_core::schema::{decode_value, Value, ValueDecodeError};
use statekit_core::{Entry, StateDescriptor, TypeSchema};
use std::sync::Arc;

/// Turns the entries of one state, in the order a view streams them (key group by key group,
/// canonical order within one), into [`RecordBatch`]es of [`state_schema`], `batch_rows` rows
/// each (the last may be shorter). Memory is one batch of decoded rows.
pub struct StateBatches {
    desc: StateDescriptor,
    schema: SchemaRef,
    columns: Columns,
    batch_rows: usize,
    /// Rows handed out in earlier batches.
    rows_before: u64,
    key_groups: Vec<i32>,
    keys: ColumnBuf,
    namespaces: Vec<Value>,
    user_keys: ColumnBuf,
    indexes: Vec<i64>,
    values: ColumnBuf,
    expires: Vec<i64>,
    /// The list the last element belonged to (key group, key, namespace) and its index.
    last_list: Option<(u32, Vec<u8>, Vec<u8>, i64)>,
}

impl std::fmt::Debug for StateBatches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateBatches")
            .field("state", &self.desc.name)
            .field("batch_rows", &self.batch_rows)
            .field("buffered", &self.key_groups.len())
            .finish()
    }
}

impl StateBatches {
    /// Batches of `desc`'s table, `batch_rows` rows each (at least 1).
    pub fn new(desc: &StateDescriptor, batch_rows: usize) -> Self {
        StateBatches {
            desc: desc.clone(),
            schema: Arc::new(state_schema(desc)),
            columns: Columns::of(desc),
            batch_rows: batch_rows.max(1),
            rows_before: 0,
            key_groups: Vec::new(),
            keys: ColumnBuf::for_schema(&desc.key_schema),
            namespaces: Vec::new(),
            user_keys: ColumnBuf::for_schema(desc.user_key_schema.as_ref().unwrap_or(&TypeSchema::Bytes)),
            indexes: Vec::new(),
            values: ColumnBuf::for_schema(&desc.value_schema),
            expires: Vec::new(),
            last_list: None,
        }
    }

    /// The table's schema.
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// Adds entry `e` of key group `key_group` (an entry of this state: the caller filters
    /// by [`Entry::state`]); returns a batch once `batch_rows` rows are buffered.
    pub fn push(&mut self, key_group: u32, e: &Entry<'_>) -> Result<Option<RecordBatch>, TableError> {
        let row = self.rows_before + self.key_groups.len() as u64;
        let decode = |column: &'static str, schema: &TypeSchema, bytes: &[u8]| {
            decode_value(schema, bytes).map_err(|err| TableError::Undecodable {
                state: self.desc.name.clone(),
                key_group,
                row,
                column,
                reason: err.to_string(),
            })
        };
        let column_err = |column: &'static str, reason: String| TableError::Undecodable {
            state: self.desc.name.clone(),
            key_group,
            row,
            column,
            reason,
        };
        let namespace = if self.columns.namespace {
            Some(decode("namespace", &self.desc.namespace_schema, e.namespace)?)
        } else {
            None
        };
        let user_key = if self.columns.user_key {
            let bytes = e
                .user_key
                .ok_or_else(|| column_err("user_key", "a map entry without a user key".into()))?;
            Some(bytes)
        } else {
            None
        };
        // Every cell is read (checked and decoded, once) before anything is appended, so a
        // failed row leaves no partial row behind.
        let uk_schema = self.desc.user_key_schema.as_ref().unwrap_or(&TypeSchema::Bytes);
        let key = read_cell(&self.desc.key_schema, e.key).map_err(|r| column_err("key", r.to_string()))?;
        let user_key = match user_key {
            Some(u) => Some(read_cell(uk_schema, u).map_err(|r| column_err("user_key", r.to_string()))?),
            None => None,
        };
        let value = read_cell(&self.desc.value_schema, e.value).map_err(|r| column_err("value", r.to_string()))?;
        let expires = match (self.desc.ttl, e.timestamp) {
            (Some(ttl), Some(ts)) => Some(ts.saturating_add(i64::try_from(ttl.ttl_ms).unwrap_or(i64::MAX))),
            (Some(_), None) => {
                return Err(TableError::Undecodable {
                    state: self.desc.name.clone(),
                    key_group,
                    row,
                    column: "expires_at",
                    reason: "an entry of a state with TTL without its timestamp".into(),
                })
            }
            _ => None,
        };
        if self.columns.index {
            let index = match &mut self.last_list {
                Some((kg, k, n, i)) if *kg == key_group && k.as_slice() == e.key && n.as_slice() == e.namespace => {
                    *i += 1;
                    *i
                }
                _ => {
                    self.last_list = Some((key_group, e.key.to_vec(), e.namespace.to_vec(), 0));
                    0
                }
            };
            self.indexes.push(index);
        }
        self.key_groups.push(i32::try_from(key_group).unwrap_or(i32::MAX));
        self.keys.append(key);
        if let Some(n) = namespace {
            self.namespaces.push(n);
        }
        if let Some(u) = user_key {
            self.user_keys.append(u);
        }
        self.values.append(value);
        if let Some(x) = expires {
            self.expires.push(x);
        }
        if self.key_groups.len() >= self.batch_rows {
            return self.flush().map(Some);
        }
        Ok(None)
    }

    /// The rows still buffered, as a last batch (`None` when there are none).
    pub fn finish(&mut self) -> Result<Option<RecordBatch>, TableError> {
        if self.key_groups.is_empty() {
            return Ok(None);
        }
        self.flush().map(Some)
    }

    fn flush(&mut self) -> Result<RecordBatch, TableError> {
        let arrow = |source| TableError::Arrow {
            state: self.desc.name.clone(),
            source,
        };
        let col = |schema: &TypeSchema, values: &[Value]| {
            let refs: Vec<Option<&Value>> = values.iter().map(Some).collect();
            array_of(schema, &refs)
        };
        let mut arrays: Vec<ArrayRef> = vec![Arc::new(Int32Array::from(std::mem::take(&mut self.key_groups)))];
        arrays.push(self.keys.finish(&self.desc.key_schema).map_err(arrow)?);
        if self.columns.namespace {
            arrays.push(col(&self.desc.namespace_schema, &self.namespaces).map_err(arrow)?);
        }
        if self.columns.user_key {
            let schema = self.desc.user_key_schema.clone().unwrap_or(TypeSchema::Bytes);
            arrays.push(self.user_keys.finish(&schema).map_err(arrow)?);
        }
        if self.columns.index {
            arrays.push(Arc::new(Int64Array::from(std::mem::take(&mut self.indexes))));
        }
        arrays.push(self.values.finish(&self.desc.value_schema).map_err(arrow)?);
        if self.columns.expires_at {
            arrays.push(Arc::new(
                TimestampMillisecondArray::from(std::mem::take(&mut self.expires)).with_timezone("UTC"),
            ));
        }
        let rows = arrays.first().map_or(0, |a| a.len());
        self.namespaces.clear();
        self.rows_before += rows as u64;
        RecordBatch::try_new(self.schema.clone(), arrays).map_err(arrow)
    }
}

/// One column's values while a batch is built: top-level byte strings, strings and integers
/// appended straight from their stored bytes (no decoded value, no allocation per row); any
/// other type as decoded values.
enum ColumnBuf {
    Binary(BinaryBuilder),
    Utf8(StringBuilder),
    I64(Vec<i64>),
    I32(Vec<i32>),
    U64(Vec<u64>),
    Values(Vec<Value>),
}

impl ColumnBuf {
    fn for_schema(schema: &TypeSchema) -> Self {
        match schema {
            TypeSchema::Bytes => ColumnBuf::Binary(BinaryBuilder::new()),
            TypeSchema::Utf8 => ColumnBuf::Utf8(StringBuilder::new()),
            TypeSchema::I64 => ColumnBuf::I64(Vec::new()),
            TypeSchema::I32 => ColumnBuf::I32(Vec::new()),
            TypeSchema::U64 => ColumnBuf::U64(Vec::new()),
            _ => ColumnBuf::Values(Vec::new()),
        }
    }

    /// Appends a cell [`read_cell`] read for this column's schema.
    fn append(&mut self, cell: Cell<'_>) {
        match (self, cell) {
            (ColumnBuf::Binary(b), Cell::Bytes(x)) => b.append_value(x),
            (ColumnBuf::Utf8(b), Cell::Str(x)) => b.append_value(x),
            (ColumnBuf::I64(v), Cell::I64(x)) => v.push(x),
            (ColumnBuf::U64(v), Cell::U64(x)) => v.push(x),
            (ColumnBuf::I32(v), Cell::I32(x)) => v.push(x),
            (ColumnBuf::Values(v), Cell::Value(x)) => v.push(x),
            // A cell read for another schema: `read_cell` and `for_schema` agree by
            // construction, so this is never reached.
            _ => {}
        }
    }

    /// The column's array, emptying it.
    fn finish(&mut self, schema: &TypeSchema) -> Result<ArrayRef, arrow_schema::ArrowError> {
        Ok(match self {
            ColumnBuf::Binary(b) => Arc::new(b.finish()),
            ColumnBuf::Utf8(b) => Arc::new(b.finish()),
            ColumnBuf::I64(v) => Arc::new(Int64Array::from(std::mem::take(v))),
            ColumnBuf::I32(v) => Arc::new(arrow_array::Int32Array::from(std::mem::take(v))),
            ColumnBuf::U64(v) => Arc::new(UInt64Array::from(std::mem::take(v))),
            ColumnBuf::Values(v) => {
                let refs: Vec<Option<&Value>> = v.iter().map(Some).collect();
                let a = array_of(schema, &refs)?;
                v.clear();
                a
            }
        })
    }
}

/// One stored value read for its column: borrowed bytes or text, a number, or (any other
/// type) the decoded value.
enum Cell<'a> {
    Bytes(&'a [u8]),
    Str(&'a str),
    I64(i64),
    I32(i32),
    U64(u64),
    Value(Value),
}

/// Why a stored part does not read as its column's cell.
#[derive(Debug, thiserror::Error)]
enum CellError {
    /// The schema decoder's reason.
    #[error("{0}")]
    Decode(#[from] ValueDecodeError),
    /// A fixed-width value of another width (that the decoder did not reject).
    #[error("{got} bytes where {expected} were expected")]
    Width { got: usize, expected: usize },
    /// A string that is not UTF-8 (that the decoder did not reject).
    #[error("not UTF-8")]
    NotUtf8,
    /// A fixed-width slice of the wrong width (cannot happen after the width check).
    #[error("a fixed-width value of the wrong width")]
    BadWidth,
}

/// Reads the value stored as `bytes` by `schema` into the cell its [`ColumnBuf`] takes; the
/// reason, as the schema decoder gives it, when the bytes do not decode.
fn read_cell<'a>(schema: &TypeSchema, bytes: &'a [u8]) -> Result<Cell<'a>, CellError> {
    let fixed = |n: usize| -> Result<&'a [u8], CellError> {
        if bytes.len() == n {
            Ok(bytes)
        } else {
            Err(decode_value(schema, bytes).err().map_or(
                CellError::Width {
                    got: bytes.len(),
                    expected: n,
                },
                CellError::Decode,
            ))
        }
    };
    let bad_width = |_| CellError::BadWidth;
    Ok(match schema {
        TypeSchema::Bytes => Cell::Bytes(bytes),
        TypeSchema::Utf8 => Cell::Str(std::str::from_utf8(bytes).map_err(|_| {
            decode_value(schema, bytes)
                .err()
                .map_or(CellError::NotUtf8, CellError::Decode)
        })?),
        TypeSchema::I64 => Cell::I64(i64::from_be_bytes(fixed(8)?.try_into().map_err(bad_width)?)),
        TypeSchema::U64 => Cell::U64(u64::from_be_bytes(fixed(8)?.try_into().map_err(bad_width)?)),
        TypeSchema::I32 => Cell::I32(i32::from_be_bytes(fixed(4)?.try_into().map_err(bad_width)?)),
        _ => Cell::Value(decode_value(schema, bytes)?),
    })
}
