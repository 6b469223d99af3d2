//! Tables back into a savepoint — the bootstrap use: Parquet (or Arrow IPC) files laid out
//! as [`crate::export_snapshot`] writes them, typed by a schema file (`statekit schema`),
//! become a canonical savepoint. Keys go to their key groups by the project's rule; rows are
//! sorted with bounded memory ([`statekit_migrate::EntrySorter`]); the output appears
//! complete or not at all ([`statekit_migrate::OutputTarget`]).

use crate::export::path_part;
use crate::{arrow_type, TableError};
use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type, TimestampMillisecondType, UInt16Type,
    UInt32Type, UInt64Type, UInt8Type,
};
use arrow_array::{Array, RecordBatch};
use arrow_schema::DataType;
use statekit_checkpoint::SnapshotWriter;
use statekit_core::schema::{encode_value, Value};
use statekit_core::storage::{LocalStorage, Storage};
use statekit_core::{
    Entry, EntryVisitor, KeyGroupAssigner, KeyGroupRange, KeyedStateKind, KeyedStateView, OperatorStateData,
    OperatorStateDescriptor, OperatorStateMode, OperatorStateSnapshot, StateDescriptor, StateError, TypeSchema,
};
use statekit_format::{SnapshotKind, WriteOptions};
use statekit_migrate::{EntrySorter, JobSchema, OutputTarget, SortedEntries};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How [`import_tables`] builds the savepoint.
#[derive(Clone, Debug)]
pub struct ImportOptions {
    /// Parallelism of every operator (default: the schema's, else 1).
    pub parallelism: Option<u32>,
    /// Max parallelism of every operator (default: the schema's). The `key_group` column,
    /// when present, is checked against the schema's max parallelism; keys are placed under
    /// this one.
    pub max_parallelism: Option<u32>,
    /// Memory for sorting rows into key-group order, in bytes (beyond it, sorted runs spill
    /// to a directory beside the output).
    pub memory: usize,
    /// How data files are written.
    pub write: WriteOptions,
    /// Replace an existing output (a snapshot or an empty directory only).
    pub force: bool,
    /// The time (ms since the epoch) a row of a state with TTL counts as written when its
    /// table has no `expires_at` column.
    pub now_ms: i64,
    /// Job id of the savepoint (32 hex characters; default: the tables' `_tables.json`'s,
    /// else zeros).
    pub job_id: Option<String>,
}

impl Default for ImportOptions {
    /// The schema's parallelism, 256 MiB to sort, LZ4, no replacing, now.
    fn default() -> Self {
        ImportOptions {
            parallelism: None,
            max_parallelism: None,
            memory: 256 << 20,
            write: WriteOptions::default(),
            force: false,
            now_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
            job_id: None,
        }
    }
}

/// One state imported.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ImportedState {
    /// The operator's uid.
    pub uid: String,
    /// The state.
    pub state: String,
    /// Whether it is keyed or operator state.
    pub scope: crate::TableScope,
    /// The table files read.
    pub files: Vec<PathBuf>,
    /// Rows read.
    pub rows: u64,
}

/// What [`import_tables`] wrote.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ImportSummary {
    /// The savepoint.
    pub output: PathBuf,
    /// Every state of the schema, with the rows its tables gave.
    pub states: Vec<ImportedState>,
    /// Keyed entries written.
    pub entries: u64,
    /// Sorted runs spilled to disk (0: everything fit in memory).
    pub spilled_runs: usize,
}

/// Builds a canonical savepoint at `out` from the tables under `tables` (`<uid>/<state>/*`
/// as [`crate::export_snapshot`] lays them out: `.parquet` or `.arrow` files; a state
/// without a directory starts empty), typed by `schema`. Columns are found by name: `key`,
/// `namespace` (when the namespace type is not `unit`), `user_key` (map), `value`; optional
/// `key_group` (checked), `index` (orders a list's elements), `expires_at` (TTL: the
/// timestamp is `expires_at − ttl`); operator state tables have `subtask`, with `index` or
/// `key` (broadcast). Column types must hold the schema's types without loss (a wider
/// integer than the file's is fine, a string for an integer is not).
///
/// A row that does not fit is an error naming file, row and column, and nothing is written.
/// `progress` is called with the rows each batch read.
pub fn import_tables(
    tables: &Path,
    schema: &JobSchema,
    out: &Path,
    options: &ImportOptions,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<ImportSummary, TableError> {
    // Every descriptor first: a bad schema writes nothing.
    let operators = prepare(schema, options)?;
    let (job_id, checkpoint_id) = job_ids(tables, options);
    let target = OutputTarget::check(tables, out, options.force)?;
    let storage: Arc<dyn Storage> = Arc::new(LocalStorage::new(target.parent()));
    let spill = target.parent().join(format!("{}.spill", target.temp_name()));
    // Removed on every way out: success, error, or a panic unwinding through here.
    let spill_guard = RemoveDir(&spill);
    let job = Job {
        operators: &operators,
        job_id: &job_id,
        checkpoint_id,
    };
    let result = import_into(
        tables,
        &job,
        storage.clone(),
        target.temp_name(),
        &spill,
        options,
        progress,
    );
    drop(spill_guard);
    let (states, entries, spilled_runs) = match result {
        Ok(r) => r,
        Err(e) => {
            let _ = storage.delete_dir_all(target.temp_name());
            return Err(e);
        }
    };
    target.publish()?;
    Ok(ImportSummary {
        output: out.to_path_buf(),
        states,
        entries,
        spilled_runs,
    })
}

/// [`import_tables`] to an output at any [`Location`](statekit_core::location::Location): a
/// local path as [`import_tables`]; on an object store the savepoint is written straight under
/// the output prefix, data files first and `_metadata` last, only if none is there — complete
/// exactly when `_metadata` exists; a failed run deletes what it wrote. An existing output (any
/// object under the prefix) is refused unless [`ImportOptions::force`], which replaces only a
/// snapshot (its objects are deleted first). Rows are sorted in a local temporary directory.
pub fn import_to(
    tables: &Path,
    schema: &JobSchema,
    out: &statekit_core::location::Location,
    options: &ImportOptions,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<ImportSummary, TableError> {
    use statekit_core::location::Location;
    let (storage, prefix, url) = match out {
        Location::Local(p) => return import_tables(tables, schema, p, options, progress),
        Location::Stored { storage, path, url } => (storage.clone(), path.clone(), url.clone()),
    };
    let shown = PathBuf::from(&url);
    let operators = prepare(schema, options)?;
    let (job_id, checkpoint_id) = job_ids(tables, options);
    if prefix.is_empty() {
        return Err(TableError::Unsupported {
            what: format!("{url}: the output needs a key prefix below the bucket"),
        });
    }
    let existing = storage.list(&prefix)?;
    if !existing.is_empty() {
        if !options.force {
            return Err(TableError::OutputExists { path: shown });
        }
        // Only a snapshot statekit wrote, and nothing else under the prefix, is replaced.
        statekit_migrate::check_stored_replaceable(storage.as_ref(), &prefix, &shown)?;
        storage.delete_dir_all(&prefix)?;
    }
    let scratch = crate::scratch_dir("import")?;
    let job = Job {
        operators: &operators,
        job_id: &job_id,
        checkpoint_id,
    };
    let (states, entries, spilled_runs) = match import_into(
        tables,
        &job,
        storage.clone(),
        &prefix,
        &scratch.path().join("spill"),
        options,
        progress,
    ) {
        Ok(r) => r,
        Err(
            e @ TableError::Checkpoint(statekit_checkpoint::CheckpointError::Storage(
                statekit_core::storage::StorageError::AlreadyExists(_),
            )),
        ) => return Err(e),
        Err(e) => {
            let _ = storage.delete_dir_all(&prefix);
            return Err(e);
        }
    };
    Ok(ImportSummary {
        output: shown,
        states,
        entries,
        spilled_runs,
    })
}

/// The least operator state an import holds before refusing more: `--memory` bounds operator
/// state too, but never below this.
const OPERATOR_STATE_FLOOR: usize = 64 << 20;

/// A directory removed (with everything in it) when this is dropped.
struct RemoveDir<'p>(&'p Path);

impl Drop for RemoveDir<'_> {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(self.0);
    }
}

/// One operator of the schema, checked: its schema, keyed and operator state descriptors,
/// parallelism, max parallelism and id.
type Prepared<'s> = (
    &'s statekit_migrate::schema::OperatorSchema,
    Vec<StateDescriptor>,
    Vec<OperatorStateDescriptor>,
    u32,
    u32,
    statekit_core::OperatorId,
);

/// The savepoint being imported.
struct Job<'a, 's> {
    operators: &'a [Prepared<'s>],
    job_id: &'a str,
    checkpoint_id: u64,
}

/// Every descriptor of `schema`, checked before anything is written (a bad schema writes
/// nothing).
fn prepare<'s>(schema: &'s JobSchema, options: &ImportOptions) -> Result<Vec<Prepared<'s>>, TableError> {
    let mut operators = Vec::new();
    for op in &schema.operators {
        let keyed = op
            .keyed_states
            .iter()
            .map(|s| s.to_descriptor().map_err(TableError::from))
            .collect::<Result<Vec<_>, _>>()?;
        let operator = op
            .operator_states
            .iter()
            .map(|s| s.to_descriptor().map_err(TableError::from))
            .collect::<Result<Vec<_>, _>>()?;
        let max_p = options.max_parallelism.unwrap_or(op.max_parallelism);
        let p = options.parallelism.or(op.parallelism).unwrap_or(1);
        statekit_core::keygroup::check_parallelism(p, max_p).map_err(|e| TableError::Unsupported {
            what: format!("operator {:?}: {e}", op.uid),
        })?;
        // The exported operator's id is kept (Apache Flink matches state to operators by id).
        let id = match &op.operator_id {
            None => statekit_core::OperatorId::from_uid(&op.uid),
            Some(id) => id.parse().map_err(|_| TableError::Unsupported {
                what: format!("operator {:?}: operator id {id:?} is not 32 hex digits", op.uid),
            })?,
        };
        operators.push((op, keyed, operator, p, max_p, id));
    }
    Ok(operators)
}

/// The savepoint's job id and checkpoint id: the options', else the tables' `_tables.json`'s,
/// else zeros and 1.
fn job_ids(tables: &Path, options: &ImportOptions) -> (String, u64) {
    let listed = read_listing(tables);
    let job_id = options
        .job_id
        .clone()
        .or_else(|| listed.as_ref().and_then(|l| l.0.clone()))
        .unwrap_or_else(|| "0".repeat(32));
    (job_id, listed.as_ref().and_then(|l| l.1).unwrap_or(1))
}

/// Writes the savepoint of `job` from `tables` into `dir` of `storage`, sorting through
/// `spill` (created, and removed by the caller), and commits its `_metadata`. On an error
/// the writer's files are deleted where it can; the caller removes the rest.
fn import_into(
    tables: &Path,
    job: &Job<'_, '_>,
    storage: Arc<dyn Storage>,
    dir: &str,
    spill: &Path,
    options: &ImportOptions,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<(Vec<ImportedState>, u64, usize), TableError> {
    let operators = job.operators;
    let mut writer = SnapshotWriter::new(storage, dir, SnapshotKind::Savepoint, job.checkpoint_id, job.job_id)?
        .with_options(options.write);
    writer.set_property("imported-from", &tables.display().to_string());
    let result = (|| {
        std::fs::create_dir_all(spill).map_err(|e| TableError::Io {
            path: spill.to_path_buf(),
            source: e,
        })?;
        let mut states = Vec::new();
        let mut entries = 0;
        let mut spilled_runs = 0;
        for (n, (op, keyed, operator, p, max_p, id)) in operators.iter().enumerate() {
            writer.register_operator_with_id(&op.uid, *id, *p, *max_p)?;
            // Keys go where the exported state's rule put them (Apache Flink's for Flink state).
            writer.set_key_group_scheme(&op.uid, op.key_group_scheme)?;
            let op_dir = tables.join(path_part(&op.uid));
            let mut sorter = EntrySorter::new(keyed, *max_p, options.memory, spill, &n.to_string())
                .with_key_group_scheme(op.key_group_scheme);
            for (si, desc) in keyed.iter().enumerate() {
                let files = table_files(&op_dir.join(path_part(&desc.name)))?;
                let mut rows = 0;
                for f in &files {
                    rows += read_keyed(
                        f,
                        desc,
                        si as u32,
                        op.key_group_scheme.assigner(&desc.key_schema, op.max_parallelism),
                        options.now_ms,
                        &mut sorter,
                        progress,
                    )?;
                }
                states.push(ImportedState {
                    uid: op.uid.clone(),
                    state: desc.name.clone(),
                    scope: crate::TableScope::Keyed,
                    files,
                    rows,
                });
            }
            let mut stored: Vec<OperatorStateSnapshot> = Vec::new();
            // Bytes of operator state held (all of it is, until the operator is written), at
            // most --memory but never less than 64 MiB (a tiny --memory is about sorting).
            let mut held = 0usize;
            let operator_budget = options.memory.max(OPERATOR_STATE_FLOOR);
            for desc in operator {
                let mut dir = op_dir.join(path_part(&desc.name));
                if keyed.iter().any(|d| d.name == desc.name) {
                    dir = op_dir.join(path_part(&format!("{}.operator", desc.name)));
                }
                let files = table_files(&dir)?;
                let mut rows = 0;
                for f in &files {
                    rows += read_operator(f, desc, &mut stored, (&mut held, operator_budget), progress)?;
                }
                states.push(ImportedState {
                    uid: op.uid.clone(),
                    state: desc.name.clone(),
                    scope: crate::TableScope::Operator,
                    files,
                    rows,
                });
            }
            // Every subtask the tables named holds every state (possibly empty), then the
            // states are redistributed to the new parallelism by Flink's rules.
            for s in &mut stored {
                for desc in operator {
                    if !s.states.iter().any(|(d, _)| d.name == desc.name) {
                        s.states.push((desc.clone(), empty_data(desc)));
                    }
                }
                s.states
                    .sort_by_key(|(d, _)| operator.iter().position(|o| o.name == d.name));
            }
            // At the tables' own parallelism each subtask keeps its rows (as a restore at
            // the same parallelism would); at another, Flink's rules redistribute them.
            let old_p = op.parallelism.map_or(stored.len(), |n| n as usize).max(stored.len());
            let op_states = if stored.is_empty() {
                Vec::new()
            } else if old_p == *p as usize {
                stored.resize_with(old_p, || OperatorStateSnapshot {
                    states: operator.iter().map(|d| (d.clone(), empty_data(d))).collect(),
                });
                stored
            } else {
                statekit_core::redistribute(&stored, *p)?
            };
            let sorted = sorter.finish()?;
            entries += sorted.entries();
            spilled_runs += sorted.spilled();
            write_operator(&writer, &op.uid, *p, *max_p, &sorted, &op_states)?;
        }
        Ok((states, entries, spilled_runs))
    })();
    let r = match result {
        Ok(r) => r,
        Err(e) => {
            let _ = writer.abort();
            return Err(e);
        }
    };
    writer.finish()?;
    Ok(r)
}

/// The job id and checkpoint id of an export's `_tables.json`, if there is one.
fn read_listing(tables: &Path) -> Option<(Option<String>, Option<u64>)> {
    // Read only a regular file (a FIFO would block): anything else is no listing.
    let (file, _) = statekit_core::storage::open_regular_file(&tables.join("_tables.json")).ok()?;
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(file, 64 << 20), &mut bytes).ok()?;
    let doc: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    let first = doc.get("tables")?.as_array()?.first()?.get("metadata")?;
    Some((
        first
            .get("statekit.job_id")
            .and_then(|v| v.as_str())
            .map(str::to_string),
        first
            .get("statekit.checkpoint_id")
            .and_then(|v| v.as_str())
            .and_then(|v| v.parse().ok()),
    ))
}

/// The `.parquet` and `.arrow` files of a table directory, by name; none when it is absent.
fn table_files(dir: &Path) -> Result<Vec<PathBuf>, TableError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(TableError::Io {
                path: dir.to_path_buf(),
                source: e,
            })
        }
    };
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            !p.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.'))
                && p.extension().is_some_and(|x| x == "parquet" || x == "arrow")
        })
        .collect();
    files.sort();
    // Every file is checked before any is read: a FIFO would block the open, a device never
    // ends. `metadata` follows a symlink (a link to a regular file is read), without opening.
    for f in &files {
        check_regular(f)?;
    }
    Ok(files)
}

/// Refuses `path` unless it is (or a symlink leads to) a regular file, without opening it.
fn check_regular(path: &Path) -> Result<(), TableError> {
    let md = std::fs::metadata(path).map_err(|e| TableError::Io {
        path: path.to_path_buf(),
        source: e,
    })?;
    if md.is_file() {
        Ok(())
    } else {
        Err(TableError::NotAFile {
            path: path.to_path_buf(),
            what: statekit_core::storage::file_type_name(md.file_type()),
        })
    }
}

/// Calls `f` with every batch of the Parquet or Arrow IPC file `path`.
fn read_batches(path: &Path, mut f: impl FnMut(&RecordBatch) -> Result<(), TableError>) -> Result<(), TableError> {
    let bad = |reason: String| TableError::BadTable {
        path: path.to_path_buf(),
        row: None,
        column: None,
        reason,
    };
    // Non-blocking open, then the file type: a FIFO swapped in since the listing cannot block.
    let (file, _) = statekit_core::storage::open_regular_file(path).map_err(|e| match e {
        statekit_core::storage::OpenFileError::NotAFile(what) => TableError::NotAFile {
            path: path.to_path_buf(),
            what,
        },
        statekit_core::storage::OpenFileError::Io(source) => TableError::Io {
            path: path.to_path_buf(),
            source,
        },
    })?;
    if path.extension().is_some_and(|x| x == "arrow") {
        let reader = arrow_ipc::reader::FileReader::try_new(file, None)
            .map_err(|e| bad(format!("not an Arrow IPC file: {e}")))?;
        for b in reader {
            f(&b.map_err(|e| bad(e.to_string()))?)?;
        }
    } else {
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
            .map_err(|e| bad(format!("not a Parquet file: {e}")))?
            .with_batch_size(8192)
            .build()
            .map_err(|e| bad(e.to_string()))?;
        for b in reader {
            f(&b.map_err(|e| bad(e.to_string()))?)?;
        }
    }
    Ok(())
}

/// A column of a batch, checked against the schema type it must hold.
struct Column<'b> {
    name: &'static str,
    array: &'b dyn Array,
    schema: TypeSchema,
}

/// Finds column `name` of `batch` and checks that its type holds `schema` values; `None`
/// when absent and `required` is false.
fn column<'b>(
    path: &Path,
    batch: &'b RecordBatch,
    name: &'static str,
    schema: &TypeSchema,
    required: bool,
    first_row: u64,
) -> Result<Option<Column<'b>>, TableError> {
    let Some(array) = batch.column_by_name(name) else {
        if required {
            return Err(TableError::BadTable {
                path: path.to_path_buf(),
                row: None,
                column: Some(name.into()),
                reason: format!("missing (the schema's {schema} column)"),
            });
        }
        return Ok(None);
    };
    if !holds(array.data_type(), schema) {
        return Err(TableError::BadTable {
            path: path.to_path_buf(),
            row: Some(first_row),
            column: Some(name.into()),
            reason: format!(
                "type {} cannot hold the schema's {schema} (Arrow {})",
                array.data_type(),
                arrow_type(schema).0
            ),
        });
    }
    Ok(Some(Column {
        name,
        array: array.as_ref(),
        schema: schema.clone(),
    }))
}

/// Whether Arrow values of `t` convert to `schema` values without loss.
fn holds(t: &DataType, schema: &TypeSchema) -> bool {
    use DataType as D;
    match schema {
        TypeSchema::Option(inner) => holds(t, inner),
        TypeSchema::Unit => matches!(t, D::Null),
        TypeSchema::Bool => matches!(t, D::Boolean),
        TypeSchema::I32 => matches!(t, D::Int8 | D::Int16 | D::Int32 | D::UInt8 | D::UInt16),
        TypeSchema::I64 => matches!(
            t,
            D::Int8 | D::Int16 | D::Int32 | D::Int64 | D::UInt8 | D::UInt16 | D::UInt32
        ),
        TypeSchema::U64 => matches!(t, D::UInt8 | D::UInt16 | D::UInt32 | D::UInt64),
        TypeSchema::F32 => matches!(t, D::Float32),
        TypeSchema::F64 => matches!(t, D::Float32 | D::Float64),
        TypeSchema::Utf8 => matches!(t, D::Utf8 | D::LargeUtf8 | D::Utf8View),
        TypeSchema::Bytes => matches!(t, D::Binary | D::LargeBinary | D::BinaryView | D::FixedSizeBinary(_)),
        TypeSchema::List(item) => match t {
            D::List(f) | D::LargeList(f) => holds(f.data_type(), item),
            _ => false,
        },
        TypeSchema::Tuple(items) => match t {
            D::Struct(fields) => {
                fields.len() == items.len() && fields.iter().zip(items).all(|(f, s)| holds(f.data_type(), s))
            }
            _ => false,
        },
        TypeSchema::Struct(items) => match t {
            D::Struct(fields) => items.iter().all(|(n, s)| {
                fields
                    .iter()
                    .find(|f| f.name() == n)
                    .is_some_and(|f| holds(f.data_type(), s))
            }),
            _ => false,
        },
    }
}

/// Why a table cell does not hold a value of its column's schema.
#[derive(Debug, thiserror::Error)]
enum ColumnProblem {
    /// A null where the schema is no option.
    #[error("null, but {schema} is not an option")]
    NullNotOption { schema: TypeSchema },
    /// An integer schema on a column of another type.
    #[error("{data_type} is not an integer column")]
    NotInteger { data_type: DataType },
    /// A column of another type than the schema's (`boolean`, `float32`, `string`, …).
    #[error("not a {what} column")]
    NotA { what: &'static str },
    /// An integer outside the schema's range.
    #[error("{value} does not fit {schema}")]
    OutOfRange { value: i128, schema: TypeSchema },
    /// A struct column with fewer fields than the tuple.
    #[error("a struct with too few fields")]
    TooFewFields,
    /// A struct column without a field of the struct.
    #[error("no field {name:?}")]
    NoField { name: String },
    /// A field of a struct or tuple (by name or index).
    #[error("field {field}: {inner}")]
    Field { field: String, inner: Box<ColumnProblem> },
}

impl ColumnProblem {
    /// `self` as the problem of field `field`.
    fn in_field(self, field: String) -> ColumnProblem {
        ColumnProblem::Field {
            field,
            inner: Box::new(self),
        }
    }
}

/// The value at `row` of `array` as `schema` (whose type [`holds`] checked).
fn value_at(array: &dyn Array, row: usize, schema: &TypeSchema) -> Result<Value, ColumnProblem> {
    if let TypeSchema::Option(inner) = schema {
        return if array.is_null(row) {
            Ok(Value::Option(None))
        } else {
            Ok(Value::Option(Some(Box::new(value_at(array, row, inner)?))))
        };
    }
    if *schema == TypeSchema::Unit {
        return Ok(Value::Unit);
    }
    if array.is_null(row) {
        return Err(ColumnProblem::NullNotOption { schema: schema.clone() });
    }
    macro_rules! int {
        ($($t:ty),*) => {{
            let v: Option<i128> = None $(.or_else(|| array.as_primitive_opt::<$t>().map(|a| i128::from(a.value(row)))))*;
            v.ok_or_else(|| ColumnProblem::NotInteger { data_type: array.data_type().clone() })?
        }};
    }
    Ok(match schema {
        TypeSchema::Bool => Value::Bool(
            array
                .as_boolean_opt()
                .ok_or(ColumnProblem::NotA { what: "boolean" })?
                .value(row),
        ),
        TypeSchema::I32 | TypeSchema::I64 | TypeSchema::U64 => {
            let v = int!(Int8Type, Int16Type, Int32Type, Int64Type, UInt8Type, UInt16Type, UInt32Type, UInt64Type);
            let out_of_range = || ColumnProblem::OutOfRange {
                value: v,
                schema: schema.clone(),
            };
            match schema {
                TypeSchema::I32 => Value::I32(i32::try_from(v).map_err(|_| out_of_range())?),
                TypeSchema::I64 => Value::I64(i64::try_from(v).map_err(|_| out_of_range())?),
                _ => Value::U64(u64::try_from(v).map_err(|_| out_of_range())?),
            }
        }
        TypeSchema::F32 => Value::F32(
            array
                .as_primitive_opt::<Float32Type>()
                .ok_or(ColumnProblem::NotA { what: "float32" })?
                .value(row),
        ),
        TypeSchema::F64 => match array.as_primitive_opt::<Float64Type>() {
            Some(a) => Value::F64(a.value(row)),
            None => Value::F64(f64::from(
                array
                    .as_primitive_opt::<Float32Type>()
                    .ok_or(ColumnProblem::NotA { what: "float" })?
                    .value(row),
            )),
        },
        TypeSchema::Utf8 => Value::Str(match array.data_type() {
            DataType::Utf8 => array.as_string::<i32>().value(row).to_string(),
            DataType::LargeUtf8 => array.as_string::<i64>().value(row).to_string(),
            _ => array
                .as_string_view_opt()
                .ok_or(ColumnProblem::NotA { what: "string" })?
                .value(row)
                .to_string(),
        }),
        TypeSchema::Bytes => Value::Bytes(match array.data_type() {
            DataType::Binary => array.as_binary::<i32>().value(row).to_vec(),
            DataType::LargeBinary => array.as_binary::<i64>().value(row).to_vec(),
            DataType::FixedSizeBinary(_) => array.as_fixed_size_binary().value(row).to_vec(),
            _ => array
                .as_binary_view_opt()
                .ok_or(ColumnProblem::NotA { what: "binary" })?
                .value(row)
                .to_vec(),
        }),
        TypeSchema::List(item) => {
            let values = match array.data_type() {
                DataType::LargeList(_) => array.as_list::<i64>().value(row),
                _ => array
                    .as_list_opt::<i32>()
                    .ok_or(ColumnProblem::NotA { what: "list" })?
                    .value(row),
            };
            (0..values.len())
                .map(|i| value_at(values.as_ref(), i, item))
                .collect::<Result<Vec<_>, _>>()
                .map(Value::List)?
        }
        TypeSchema::Tuple(items) => {
            let s = array.as_struct_opt().ok_or(ColumnProblem::NotA { what: "struct" })?;
            let mut out = Vec::with_capacity(items.len());
            for (i, t) in items.iter().enumerate() {
                let c = s.columns().get(i).ok_or(ColumnProblem::TooFewFields)?;
                out.push(value_at(c.as_ref(), row, t).map_err(|e| e.in_field(i.to_string()))?);
            }
            Value::Tuple(out)
        }
        TypeSchema::Struct(items) => {
            let s = array.as_struct_opt().ok_or(ColumnProblem::NotA { what: "struct" })?;
            let mut out = Vec::with_capacity(items.len());
            for (n, t) in items {
                let c = s
                    .column_by_name(n)
                    .ok_or_else(|| ColumnProblem::NoField { name: n.clone() })?;
                out.push((
                    n.clone(),
                    value_at(c.as_ref(), row, t).map_err(|e| e.in_field(n.clone()))?,
                ));
            }
            Value::Struct(out)
        }
        TypeSchema::Option(_) | TypeSchema::Unit => Value::Unit,
    })
}

/// The stored bytes of `c` at `row` (row `number` of the file, for errors).
fn cell(path: &Path, c: &Column<'_>, row: usize, number: u64) -> Result<Vec<u8>, TableError> {
    let bad = |reason: String| TableError::BadTable {
        path: path.to_path_buf(),
        row: Some(number),
        column: Some(c.name.into()),
        reason,
    };
    let v = value_at(c.array, row, &c.schema).map_err(|p| bad(p.to_string()))?;
    encode_value(&c.schema, &v).map_err(|e| bad(e.to_string()))
}

/// Reads the keyed state table file `path` of state `desc` (index `state`) into `sorter`;
/// returns its rows.
fn read_keyed(
    path: &Path,
    desc: &StateDescriptor,
    state: u32,
    schema_groups: KeyGroupAssigner,
    now_ms: i64,
    sorter: &mut EntrySorter,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<u64, TableError> {
    let table = KeyedTable {
        path,
        desc,
        state,
        schema_key_groups: &schema_groups,
        now_ms,
    };
    let mut rows = 0u64;
    read_batches(path, |b| {
        keyed_batch_entries(&table, b, rows, &mut |e, order| {
            // Without an `index` column a list keeps the order its rows came in.
            let order = order.unwrap_or_else(|| sorter.entries());
            sorter.push(e, order).map_err(TableError::from)
        })?;
        rows += b.num_rows() as u64;
        progress(b.num_rows() as u64);
        Ok(())
    })?;
    Ok(rows)
}

/// One keyed state table being imported: what [`keyed_batch_entries`] needs besides a batch.
#[derive(Clone, Copy, Debug)]
pub struct KeyedTable<'a> {
    /// The table file (errors name it).
    pub path: &'a Path,
    /// The state.
    pub desc: &'a StateDescriptor,
    /// Its index among the operator's keyed states (the entries' [`Entry::state`]).
    pub state: u32,
    /// The schema's key-group rule (its scheme, the state's key type, its max parallelism):
    /// a `key_group` column is checked against it.
    pub schema_key_groups: &'a KeyGroupAssigner,
    /// The time (ms since the epoch) a row of a state with TTL counts as written when the
    /// table has no `expires_at` column.
    pub now_ms: i64,
}

/// Where [`keyed_batch_entries`] hands each entry, with its list order (`None`: the order the
/// rows come in).
pub type EntrySink<'s> = dyn FnMut(&Entry<'_>, Option<u64>) -> Result<(), TableError> + 's;

/// The entries of one batch of a keyed state table, as [`import_tables`] turns its rows:
/// columns found by name and checked against the state's types, each row's key, namespace,
/// user key and value encoded, its `key_group` checked, its TTL timestamp and list order
/// (`index`, else `None`: the order rows come in) taken; each entry is handed to `push`
/// (memory: one row at a time). `first_row` numbers the batch's first row in the file. A row
/// that does not fit is an error naming file, row and column — never a panic.
pub fn keyed_batch_entries(
    table: &KeyedTable<'_>,
    b: &RecordBatch,
    first_row: u64,
    push: &mut EntrySink<'_>,
) -> Result<(), TableError> {
    let KeyedTable {
        path,
        desc,
        state,
        schema_key_groups: groups,
        now_ms,
    } = *table;
    let rows = first_row;
    let has_ns = desc.namespace_schema != TypeSchema::Unit;
    let is_map = desc.kind == KeyedStateKind::Map;
    let is_list = desc.kind == KeyedStateKind::List;
    let uk_schema = desc.user_key_schema.clone().unwrap_or(TypeSchema::Bytes);
    let key = column(path, b, "key", &desc.key_schema, true, rows)?;
    let ns = column(path, b, "namespace", &desc.namespace_schema, has_ns, rows)?;
    // Only a map state has user keys: another state's `user_key` column is not read.
    let uk = if is_map {
        column(path, b, "user_key", &uk_schema, true, rows)?
    } else {
        None
    };
    let value = column(path, b, "value", &desc.value_schema, true, rows)?;
    let kg = column(path, b, "key_group", &TypeSchema::I64, false, rows)?;
    let index = column(path, b, "index", &TypeSchema::I64, false, rows)?.filter(|_| is_list);
    let expires = match (desc.ttl, b.column_by_name("expires_at")) {
        (Some(_), Some(a)) => Some(
            a.as_primitive_opt::<TimestampMillisecondType>()
                .map(|a| (a, a.len()))
                .ok_or_else(|| TableError::BadTable {
                    path: path.to_path_buf(),
                    row: Some(rows),
                    column: Some("expires_at".into()),
                    reason: format!("type {} is not a timestamp in milliseconds", a.data_type()),
                })?
                .0,
        ),
        _ => None,
    };
    let (Some(key), Some(value)) = (key, value) else {
        return Ok(());
    };
    for r in 0..b.num_rows() {
        let number = rows + r as u64;
        let k = cell(path, &key, r, number)?;
        if let Some(c) = &kg {
            let stored = value_at(c.array, r, &TypeSchema::I64).ok();
            let want = groups.key_group(&k).map_err(|e| TableError::BadTable {
                path: path.to_path_buf(),
                row: Some(number),
                column: Some("key".into()),
                reason: e.to_string(),
            })?;
            let schema_max_p = groups.max_parallelism();
            if stored != Some(Value::I64(i64::from(want))) {
                return Err(TableError::BadTable {
                    path: path.to_path_buf(),
                    row: Some(number),
                    column: Some("key_group".into()),
                    reason: format!(
                        "{} but the key belongs to key group {want} under max parallelism {schema_max_p}",
                        stored.map_or("null".into(), |v| v.to_string())
                    ),
                });
            }
        }
        let n = match &ns {
            Some(c) => cell(path, c, r, number)?,
            None => Vec::new(),
        };
        let u = match &uk {
            Some(c) => Some(cell(path, c, r, number)?),
            None => None,
        };
        let v = cell(path, &value, r, number)?;
        let timestamp = match (desc.ttl, expires) {
            (Some(ttl), Some(a)) if a.is_valid(r) => {
                Some(a.value(r).saturating_sub(i64::try_from(ttl.ttl_ms).unwrap_or(i64::MAX)))
            }
            (Some(_), Some(_)) => {
                return Err(TableError::BadTable {
                    path: path.to_path_buf(),
                    row: Some(number),
                    column: Some("expires_at".into()),
                    reason: "null".into(),
                })
            }
            (Some(_), None) => Some(now_ms),
            (None, _) => None,
        };
        let order = match &index {
            Some(c) => match value_at(c.array, r, &TypeSchema::I64) {
                Ok(Value::I64(i)) if i >= 0 => Some(i as u64),
                _ => {
                    return Err(TableError::BadTable {
                        path: path.to_path_buf(),
                        row: Some(number),
                        column: Some("index".into()),
                        reason: "not a non-negative integer".into(),
                    })
                }
            },
            None => None,
        };
        let e = Entry {
            state,
            key: &k,
            namespace: &n,
            user_key: u.as_deref(),
            value: &v,
            timestamp,
        };
        push(&e, order)?;
    }
    Ok(())
}

/// An empty state of `desc`'s mode.
fn empty_data(desc: &OperatorStateDescriptor) -> OperatorStateData {
    match desc.mode {
        OperatorStateMode::Broadcast => OperatorStateData::Broadcast(Default::default()),
        _ => OperatorStateData::List(Vec::new()),
    }
}

/// Reads the operator state table file `path` of `desc` into `stored` (by subtask); returns
/// its rows. List elements keep their `index` order. `budget` is (bytes held so far, the
/// limit): past it, an error rather than unbounded memory.
fn read_operator(
    path: &Path,
    desc: &OperatorStateDescriptor,
    stored: &mut Vec<OperatorStateSnapshot>,
    budget: (&mut usize, usize),
    progress: &(dyn Fn(u64) + Sync),
) -> Result<u64, TableError> {
    let (held, limit) = budget;
    let mut rows = 0u64;
    let broadcast = desc.mode == OperatorStateMode::Broadcast;
    let key_schema = desc.key_schema.clone().unwrap_or(TypeSchema::Bytes);
    let mut lists: Vec<Vec<(u64, Vec<u8>)>> = Vec::new();
    read_batches(path, |b| {
        let subtask = column(path, b, "subtask", &TypeSchema::I64, true, rows)?;
        let key = column(path, b, "key", &key_schema, broadcast, rows)?.filter(|_| broadcast);
        let index = column(path, b, "index", &TypeSchema::I64, false, rows)?.filter(|_| !broadcast);
        let value = column(path, b, "value", &desc.value_schema, true, rows)?;
        let (Some(subtask), Some(value)) = (subtask, value) else {
            return Ok(());
        };
        for r in 0..b.num_rows() {
            let number = rows + r as u64;
            let bad = |column: &str, reason: &str| TableError::BadTable {
                path: path.to_path_buf(),
                row: Some(number),
                column: Some(column.into()),
                reason: reason.into(),
            };
            let s = match value_at(subtask.array, r, &TypeSchema::I64) {
                Ok(Value::I64(s)) if (0..32_768).contains(&s) => s as usize,
                _ => return Err(bad("subtask", "not a subtask index in 0..32768")),
            };
            while stored.len() <= s {
                stored.push(OperatorStateSnapshot::default());
            }
            let v = cell(path, &value, r, number)?;
            // An element's bytes and its share of the containers holding it.
            *held = held.saturating_add(v.len() + 48);
            if *held > limit {
                return Err(TableError::OperatorStateTooLarge {
                    path: path.to_path_buf(),
                    row: number,
                    state: desc.name.clone(),
                    limit,
                });
            }
            let snap = stored.get_mut(s).ok_or_else(|| bad("subtask", "out of range"))?;
            let slot = match snap.states.iter().position(|(d, _)| d.name == desc.name) {
                Some(i) => i,
                None => {
                    snap.states.push((desc.clone(), empty_data(desc)));
                    snap.states.len() - 1
                }
            };
            if broadcast {
                let k = match &key {
                    Some(c) => cell(path, c, r, number)?,
                    None => return Err(bad("key", "missing")),
                };
                if let Some((_, OperatorStateData::Broadcast(m))) = snap.states.get_mut(slot) {
                    if m.insert(k, v).is_some() {
                        return Err(bad("key", "a duplicate broadcast key"));
                    }
                }
            } else {
                let order = match &index {
                    Some(c) => match value_at(c.array, r, &TypeSchema::I64) {
                        Ok(Value::I64(i)) if i >= 0 => i as u64,
                        _ => return Err(bad("index", "not a non-negative integer")),
                    },
                    None => number,
                };
                while lists.len() <= s {
                    lists.push(Vec::new());
                }
                if let Some(l) = lists.get_mut(s) {
                    l.push((order, v));
                }
            }
        }
        rows += b.num_rows() as u64;
        progress(b.num_rows() as u64);
        Ok(())
    })?;
    for (s, mut l) in lists.into_iter().enumerate() {
        l.sort_by_key(|(o, _)| *o);
        if let Some(snap) = stored.get_mut(s) {
            if let Some((_, OperatorStateData::List(elements))) =
                snap.states.iter_mut().find(|(d, _)| d.name == desc.name)
            {
                elements.extend(l.into_iter().map(|(_, v)| v));
            }
        }
    }
    Ok(rows)
}

/// Writes every subtask of operator `uid` (in parallel), its keyed state from `sorted`.
fn write_operator(
    writer: &SnapshotWriter,
    uid: &str,
    p: u32,
    max_p: u32,
    sorted: &SortedEntries,
    op_states: &[OperatorStateSnapshot],
) -> Result<(), TableError> {
    let threads = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .min(p as usize)
        .max(1);
    let next = std::sync::atomic::AtomicU32::new(0);
    let results: Vec<Result<(), TableError>> = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                sc.spawn(|| -> Result<(), TableError> {
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if i >= p {
                            return Ok(());
                        }
                        let range = KeyGroupRange::for_subtask(max_p, p, i);
                        let view = UniqueView {
                            inner: sorted.view(range),
                        };
                        let operator = op_states.get(i as usize).filter(|s| !s.is_empty());
                        writer.write_subtask(uid, i, Some(&view), operator, false)?;
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(TableError::State(StateError::Stream(
                        statekit_core::StreamProblem::ThreadPanicked { what: "an import" },
                    )))
                })
            })
            .collect()
    });
    results.into_iter().collect()
}

/// (state, key, namespace, user key) of an entry.
type EntryKey = (u32, Vec<u8>, Vec<u8>, Option<Vec<u8>>);

/// A sorted view that refuses two rows of one key (and namespace, and user key) of a state
/// that holds one value per key: a table with duplicate keys has no one savepoint.
struct UniqueView<'r> {
    inner: statekit_migrate::SortedView<'r>,
}

impl KeyedStateView for UniqueView<'_> {
    fn max_parallelism(&self) -> u32 {
        self.inner.max_parallelism()
    }

    fn key_group_scheme(&self) -> statekit_core::KeyGroupScheme {
        self.inner.key_group_scheme()
    }

    fn key_group_range(&self) -> KeyGroupRange {
        self.inner.key_group_range()
    }

    fn states(&self) -> &[StateDescriptor] {
        self.inner.states()
    }

    fn visit_key_group(&self, key_group: u32, visitor: &mut EntryVisitor<'_>) -> Result<ControlFlow<()>, StateError> {
        let states = self.inner.states();
        let mut last: Option<EntryKey> = None;
        self.inner.visit_key_group(key_group, &mut |e| {
            let list = states
                .get(e.state as usize)
                .is_some_and(|d| d.kind == KeyedStateKind::List);
            if !list {
                if let Some((s, k, n, u)) = &last {
                    if *s == e.state && k == e.key && n == e.namespace && u.as_deref() == e.user_key {
                        let name = states.get(e.state as usize).map_or("?", |d| d.name.as_str());
                        return Err(StateError::Restore(statekit_core::RestoreError::DuplicateKey {
                            state: name.to_string(),
                            key_group,
                            key: e.key.to_vec(),
                        }));
                    }
                }
                last = Some((
                    e.state,
                    e.key.to_vec(),
                    e.namespace.to_vec(),
                    e.user_key.map(<[u8]>::to_vec),
                ));
            }
            visitor(e)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{ArrayRef, Int64Array};

    /// A value state's table with a stray `user_key` column (of any type): the column is not
    /// read, every row is an entry without a user key (the fuzzer found such entries given to
    /// the writer, which refused them).
    #[test]
    fn a_user_key_column_of_a_value_state_is_not_read() {
        let desc = StateDescriptor::value("v", TypeSchema::I64, TypeSchema::I64);
        let col = |v: Vec<i64>| Arc::new(Int64Array::from(v)) as ArrayRef;
        let batch = RecordBatch::try_from_iter([
            ("key", col(vec![1, 2])),
            ("user_key", col(vec![3, 4])),
            ("value", col(vec![5, 6])),
        ])
        .expect("batch");
        let table = KeyedTable {
            path: Path::new("t.parquet"),
            desc: &desc,
            state: 0,
            schema_key_groups: &statekit_core::KeyGroupAssigner::statekit(128),
            now_ms: 0,
        };
        let mut seen = Vec::new();
        keyed_batch_entries(&table, &batch, 0, &mut |e, order| {
            seen.push((e.key.to_vec(), e.user_key.map(<[u8]>::to_vec), order));
            Ok(())
        })
        .expect("entries");
        assert_eq!(seen.len(), 2);
        assert!(seen.iter().all(|(_, u, o)| u.is_none() && o.is_none()), "{seen:?}");
    }
}
