//! Operator state (list, union, broadcast) as one table per state: a row per list element or
//! broadcast entry of every subtask, with its `subtask`.

use crate::arrow_types::{array_of, field};
use crate::TableError;
use arrow_array::{ArrayRef, Int32Array, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use statekit_core::schema::{decode_value, Value};
use statekit_core::{OperatorStateData, OperatorStateDescriptor, OperatorStateMode, OperatorStateSnapshot, TypeSchema};
use std::sync::Arc;

/// The Arrow schema of operator state `desc`'s table: `subtask` (Int32), then for a list or
/// union state `index` (Int64, the element's position in its subtask's list) and `value`;
/// for a broadcast state `key` and `value`. Typed columns carry `statekit.type`.
pub fn operator_state_schema(desc: &OperatorStateDescriptor) -> Schema {
    let typed = |name: &str, t: &TypeSchema| {
        field(name, t).with_metadata([("statekit.type".to_string(), t.to_string())].into_iter().collect())
    };
    let mut fields = vec![Field::new("subtask", DataType::Int32, false)];
    match desc.mode {
        OperatorStateMode::Broadcast => {
            fields.push(typed("key", desc.key_schema.as_ref().unwrap_or(&TypeSchema::Bytes)))
        }
        OperatorStateMode::List | OperatorStateMode::Union => fields.push(Field::new("index", DataType::Int64, false)),
    }
    fields.push(typed("value", &desc.value_schema));
    Schema::new(fields)
}

/// The table of operator state `desc` over `subtasks` (each subtask's stored operator
/// state, in subtask order; a subtask without the state adds no rows), as one batch.
pub fn operator_state_batch(
    desc: &OperatorStateDescriptor,
    subtasks: &[OperatorStateSnapshot],
) -> Result<RecordBatch, TableError> {
    let key_schema = desc.key_schema.clone().unwrap_or(TypeSchema::Bytes);
    let mut subtask_col = Vec::new();
    let mut second: Vec<i64> = Vec::new();
    let mut keys: Vec<Value> = Vec::new();
    let mut values: Vec<Value> = Vec::new();
    for (i, snap) in subtasks.iter().enumerate() {
        let sub = i32::try_from(i).unwrap_or(i32::MAX);
        let Some((_, data)) = snap.states.iter().find(|(d, _)| d.name == desc.name) else {
            continue;
        };
        let decode = |column: &'static str, schema: &TypeSchema, bytes: &[u8], row: usize| {
            decode_value(schema, bytes).map_err(|err| TableError::Undecodable {
                state: desc.name.clone(),
                key_group: u32::try_from(i).unwrap_or(u32::MAX),
                row: (subtask_col.len() + row) as u64,
                column,
                reason: format!("subtask {i}: {err}"),
            })
        };
        match data {
            OperatorStateData::List(elements) => {
                let mut decoded = Vec::with_capacity(elements.len());
                for (n, e) in elements.iter().enumerate() {
                    decoded.push(decode("value", &desc.value_schema, e, n)?);
                }
                for (n, v) in decoded.into_iter().enumerate() {
                    subtask_col.push(sub);
                    second.push(n as i64);
                    values.push(v);
                }
            }
            OperatorStateData::Broadcast(map) => {
                let mut decoded = Vec::with_capacity(map.len());
                for (n, (k, v)) in map.iter().enumerate() {
                    decoded.push((
                        decode("key", &key_schema, k, n)?,
                        decode("value", &desc.value_schema, v, n)?,
                    ));
                }
                for (k, v) in decoded {
                    subtask_col.push(sub);
                    keys.push(k);
                    values.push(v);
                }
            }
        }
    }
    let arrow = |source| TableError::Arrow {
        state: desc.name.clone(),
        source,
    };
    let col = |schema: &TypeSchema, values: &[Value]| {
        let refs: Vec<Option<&Value>> = values.iter().map(Some).collect();
        array_of(schema, &refs)
    };
    let mut arrays: Vec<ArrayRef> = vec![Arc::new(Int32Array::from(subtask_col))];
    match desc.mode {
        OperatorStateMode::Broadcast => arrays.push(col(&key_schema, &keys).map_err(arrow)?),
        OperatorStateMode::List | OperatorStateMode::Union => arrays.push(Arc::new(Int64Array::from(second))),
    }
    arrays.push(col(&desc.value_schema, &values).map_err(arrow)?);
    RecordBatch::try_new(Arc::new(operator_state_schema(desc)), arrays).map_err(arrow)
}
