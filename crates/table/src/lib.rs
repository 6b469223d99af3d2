//! # statekit-table
//!
//! Keyed state as tables (`docs/design/0012-tables.md`): the entries of one state, as any
//! [`KeyedStateView`](statekit_core::KeyedStateView) streams them, become typed Arrow
//! [`RecordBatch`]es whose columns follow the state's [`TypeSchema`](statekit_core::TypeSchema)s — strings as `Utf8`,
//! numbers as their Arrow types, tuples and structs as `Struct`, lists as `List`, opaque bytes
//! as `Binary`; never a lossy string. Export to Parquet and Arrow files, import and SQL are
//! built on these batches.
//!
//! ```
//! use statekit_core::{Entry, StateDescriptor, TypeSchema};
//! use statekit_table::StateBatches;
//!
//! let desc = StateDescriptor::value("count", TypeSchema::Utf8, TypeSchema::I64);
//! let mut batches = StateBatches::new(&desc, 1024);
//! let value = 2i64.to_be_bytes();
//! let e = Entry { state: 0, key: b"a", namespace: b"", user_key: None, value: &value, timestamp: None };
//! assert!(batches.push(7, &e)?.is_none()); // not full yet
//! let batch = batches.finish()?.expect("one row");
//! assert_eq!(batch.num_rows(), 1);
//! assert_eq!(batch.schema().field(1).name(), "key");
//! # Ok::<(), statekit_table::TableError>(())
//! ```

mod arrow_types;
mod batches;
mod error;
mod export;
mod import;
mod operator_table;
mod table_file;

pub use arrow_types::{arrow_type, state_schema, Columns};
pub use batches::StateBatches;
pub use error::TableError;
pub use export::{
    export_shard_to, export_snapshot, export_to, finish_export_shards, ExportOptions, ExportShard, ExportSummary,
    ExportedTable, TableScope, EXPORT_MANIFEST_SUFFIX,
};
pub use import::{
    import_tables, import_to, keyed_batch_entries, EntrySink, ImportOptions, ImportSummary, ImportedState, KeyedTable,
};
pub use operator_table::{operator_state_batch, operator_state_schema};
pub use table_file::{
    visit_state_batches, write_state_table, write_table_file, TableCompression, TableFileOptions, TableFormat,
};

/// Re-exported: the Arrow record batch the tables are made of.
pub use arrow_array::RecordBatch;

/// A local temporary directory (removed when dropped) for staging work on its way to an
/// object store: tables exported before their upload, sort runs of an import.
/// Run-tagged ([`statekit_core::temp::scratch_dir`]): what a killed run left there is
/// removed by a later one.
pub(crate) fn scratch_dir(what: &str) -> Result<tempfile::TempDir, TableError> {
    statekit_core::temp::scratch_dir(what).map_err(|e| TableError::Io {
        path: std::env::temp_dir(),
        source: e,
    })
}
