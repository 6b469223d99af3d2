//! Registering a snapshot's tables in a DataFusion session: one schema per operator uid,
//! holding its keyed states (scanned on demand) and operator states (small: built at once),
//! and the `states` and `operators` listings in the default schema.

use crate::scan::{ScanStats, StateTable};
use crate::QueryError;
use arrow_array::{ArrayRef, BooleanArray, RecordBatch, StringArray, UInt32Array, UInt64Array};
use arrow_schema::{DataType, Field, Schema};
use datafusion::catalog::{CatalogProvider, MemorySchemaProvider, SchemaProvider};
use datafusion::datasource::MemTable;
use datafusion::prelude::SessionContext;
use statekit_snapshot::Snapshot;
use std::sync::Arc;

/// Registers every table of `reader`'s snapshot in `ctx`.
pub(crate) fn register(ctx: &SessionContext, reader: &Snapshot, stats: &Arc<ScanStats>) -> Result<(), QueryError> {
    let catalog = ctx
        .catalog("datafusion")
        .ok_or_else(|| datafusion::error::DataFusionError::Plan("no default catalog".into()))?;
    let meta = reader.metadata();
    for op in &meta.operators {
        let schema = Arc::new(MemorySchemaProvider::new());
        for desc in &op.keyed_states {
            let table = StateTable::new(reader.clone(), &op.uid, desc, stats.clone())?;
            schema.register_table(desc.name.clone(), Arc::new(table))?;
        }
        if !op.operator_states.is_empty() {
            let stored = (0..op.subtasks.len() as u32)
                .map(|i| reader.stored_operator_state(&op.uid, i))
                .collect::<Result<Vec<_>, _>>()
                .map_err(statekit_table::TableError::Snapshot)?;
            for desc in &op.operator_states {
                let batch = statekit_table::operator_state_batch(desc, &stored)?;
                let table = MemTable::try_new(batch.schema(), vec![vec![batch]])?;
                let name = if op.keyed_states.iter().any(|d| d.name == desc.name) {
                    format!("{}.operator", desc.name)
                } else {
                    desc.name.clone()
                };
                schema.register_table(name, Arc::new(table))?;
            }
        }
        catalog.register_schema(&op.uid, schema)?;
    }
    ctx.register_table("states", Arc::new(states_table(reader)?))?;
    ctx.register_table("operators", Arc::new(operators_table(reader)?))?;
    // Operators stored by id only (Flink before 2.0) answer to the uid whose hash is their id
    // too, as in every other command: `"word-count"."count"` without `--flink-uid`.
    let unnamed = meta
        .operators
        .iter()
        .filter(|o| o.uid == o.operator_id.to_string())
        .map(|o| (o.operator_id, o.uid.clone()))
        .collect();
    ctx.register_catalog(
        "datafusion",
        Arc::new(ByUidHash {
            inner: catalog,
            unnamed,
        }),
    );
    Ok(())
}

/// The default catalog, whose operator schemas also answer to a uid whose hash is the id of
/// an operator stored by id only.
#[derive(Debug)]
struct ByUidHash {
    inner: Arc<dyn CatalogProvider>,
    /// Operator id → the schema it is registered as (the id's hex).
    unnamed: std::collections::HashMap<statekit_core::OperatorId, String>,
}

impl CatalogProvider for ByUidHash {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn schema_names(&self) -> Vec<String> {
        self.inner.schema_names()
    }

    fn schema(&self, name: &str) -> Option<Arc<dyn SchemaProvider>> {
        self.inner.schema(name).or_else(|| {
            let registered = self.unnamed.get(&statekit_core::OperatorId::from_uid(name))?;
            self.inner.schema(registered)
        })
    }

    fn register_schema(
        &self,
        name: &str,
        schema: Arc<dyn SchemaProvider>,
    ) -> datafusion::error::Result<Option<Arc<dyn SchemaProvider>>> {
        self.inner.register_schema(name, schema)
    }

    fn deregister_schema(
        &self,
        name: &str,
        cascade: bool,
    ) -> datafusion::error::Result<Option<Arc<dyn SchemaProvider>>> {
        self.inner.deregister_schema(name, cascade)
    }
}

fn utf8(name: &str, nullable: bool) -> Field {
    Field::new(name, DataType::Utf8, nullable)
}

/// `states`: uid, state, scope (keyed / operator), kind (or mode), the types and the TTL.
fn states_table(reader: &Snapshot) -> Result<MemTable, QueryError> {
    let meta = reader.metadata();
    let mut cols: [Vec<Option<String>>; 8] = Default::default();
    let mut ttl: Vec<Option<u64>> = Vec::new();
    for op in &meta.operators {
        for d in &op.keyed_states {
            let row = [
                Some(op.uid.clone()),
                Some(d.name.clone()),
                Some("keyed".to_string()),
                Some(d.kind.to_string()),
                Some(d.key_schema.to_string()),
                Some(d.namespace_schema.to_string()),
                d.user_key_schema.as_ref().map(ToString::to_string),
                Some(d.value_schema.to_string()),
            ];
            for (c, v) in cols.iter_mut().zip(row) {
                c.push(v);
            }
            ttl.push(d.ttl.map(|t| t.ttl_ms));
        }
        for d in &op.operator_states {
            let row = [
                Some(op.uid.clone()),
                Some(d.name.clone()),
                Some("operator".to_string()),
                Some(d.mode.to_string()),
                d.key_schema.as_ref().map(ToString::to_string),
                None,
                None,
                Some(d.value_schema.to_string()),
            ];
            for (c, v) in cols.iter_mut().zip(row) {
                c.push(v);
            }
            ttl.push(None);
        }
    }
    let names = ["uid", "state", "scope", "kind", "key", "namespace", "user_key", "value"];
    let mut fields: Vec<Field> = names
        .iter()
        .map(|n| utf8(n, matches!(*n, "key" | "namespace" | "user_key")))
        .collect();
    fields.push(Field::new("ttl_ms", DataType::UInt64, true));
    let mut arrays: Vec<ArrayRef> = cols
        .into_iter()
        .map(|c| Arc::new(StringArray::from(c)) as ArrayRef)
        .collect();
    arrays.push(Arc::new(UInt64Array::from(ttl)));
    let schema = Arc::new(Schema::new(fields));
    let batch = RecordBatch::try_new(schema.clone(), arrays).map_err(|e| QueryError::DataFusion(e.into()))?;
    Ok(MemTable::try_new(schema, vec![vec![batch]])?)
}

/// `operators`: uid, operator id, parallelism, max parallelism, finished, state counts.
fn operators_table(reader: &Snapshot) -> Result<MemTable, QueryError> {
    let ops = &reader.metadata().operators;
    let schema = Arc::new(Schema::new(vec![
        utf8("uid", false),
        utf8("operator_id", false),
        Field::new("parallelism", DataType::UInt32, false),
        Field::new("max_parallelism", DataType::UInt32, false),
        Field::new("finished", DataType::Boolean, false),
        Field::new("keyed_states", DataType::UInt32, false),
        Field::new("operator_states", DataType::UInt32, false),
    ]));
    let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    let arrays: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(ops.iter().map(|o| o.uid.clone()))),
        Arc::new(StringArray::from_iter_values(
            ops.iter().map(|o| o.operator_id.to_string()),
        )),
        Arc::new(UInt32Array::from_iter_values(ops.iter().map(|o| o.parallelism))),
        Arc::new(UInt32Array::from_iter_values(ops.iter().map(|o| o.max_parallelism))),
        Arc::new(BooleanArray::from(ops.iter().map(|o| o.finished).collect::<Vec<_>>())),
        Arc::new(UInt32Array::from_iter_values(
            ops.iter().map(|o| count(o.keyed_states.len())),
        )),
        Arc::new(UInt32Array::from_iter_values(
            ops.iter().map(|o| count(o.operator_states.len())),
        )),
    ];
    let batch = RecordBatch::try_new(schema.clone(), arrays).map_err(|e| QueryError::DataFusion(e.into()))?;
    Ok(MemTable::try_new(schema, vec![vec![batch]])?)
}
