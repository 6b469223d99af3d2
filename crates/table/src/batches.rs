//! One state's entries into Arrow record batches of bounded size.

use crate::arrow_types::{array_of, state_schema, Columns};
use crate::TableError;
use arrow_array::{ArrayRef, Int32Array, Int64Array, RecordBatch, TimestampMillisecondArray};
use arrow_schema::SchemaRef;
use statekit_core::schema::{decode_value, Value};
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
    keys: Vec<Value>,
    namespaces: Vec<Value>,
    user_keys: Vec<Value>,
    indexes: Vec<i64>,
    values: Vec<Value>,
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
            keys: Vec::new(),
            namespaces: Vec::new(),
            user_keys: Vec::new(),
            indexes: Vec::new(),
            values: Vec::new(),
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
        let key = decode("key", &self.desc.key_schema, e.key)?;
        let namespace = if self.columns.namespace {
            Some(decode("namespace", &self.desc.namespace_schema, e.namespace)?)
        } else {
            None
        };
        let user_key = if self.columns.user_key {
            let schema = self.desc.user_key_schema.clone().unwrap_or(TypeSchema::Bytes);
            let bytes = e.user_key.ok_or_else(|| TableError::Undecodable {
                state: self.desc.name.clone(),
                key_group,
                row,
                column: "user_key",
                reason: "a map entry without a user key".into(),
            })?;
            Some(decode("user_key", &schema, bytes)?)
        } else {
            None
        };
        let value = decode("value", &self.desc.value_schema, e.value)?;
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
        self.keys.push(key);
        if let Some(n) = namespace {
            self.namespaces.push(n);
        }
        if let Some(u) = user_key {
            self.user_keys.push(u);
        }
        self.values.push(value);
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
        arrays.push(col(&self.desc.key_schema, &self.keys).map_err(arrow)?);
        if self.columns.namespace {
            arrays.push(col(&self.desc.namespace_schema, &self.namespaces).map_err(arrow)?);
        }
        if self.columns.user_key {
            let schema = self.desc.user_key_schema.clone().unwrap_or(TypeSchema::Bytes);
            arrays.push(col(&schema, &self.user_keys).map_err(arrow)?);
        }
        if self.columns.index {
            arrays.push(Arc::new(Int64Array::from(std::mem::take(&mut self.indexes))));
        }
        arrays.push(col(&self.desc.value_schema, &self.values).map_err(arrow)?);
        if self.columns.expires_at {
            arrays.push(Arc::new(
                TimestampMillisecondArray::from(std::mem::take(&mut self.expires)).with_timezone("UTC"),
            ));
        }
        let rows = self.keys.len();
        self.keys.clear();
        self.namespaces.clear();
        self.user_keys.clear();
        self.values.clear();
        self.rows_before += rows as u64;
        RecordBatch::try_new(self.schema.clone(), arrays).map_err(arrow)
    }
}
