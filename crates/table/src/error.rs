//! The errors of building tables.

use statekit_core::ErrorKind;

/// What can go wrong turning state into tables.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    /// A stored key, namespace, user key or value does not decode by the state's schema.
    #[error("state {state:?}, key group {key_group}, row {row}: column {column}: {reason}")]
    Undecodable {
        /// The state.
        state: String,
        /// The entry's key group.
        key_group: u32,
        /// The row within the state's table (counted from 0 over every batch).
        row: u64,
        /// The column (`key`, `namespace`, `user_key` or `value`).
        column: &'static str,
        /// Why.
        reason: String,
    },
    /// The snapshot has no operator or state of that name.
    #[error("no {what} in the snapshot")]
    Unknown {
        /// What was asked for.
        what: String,
    },
    /// The output directory exists and is not empty.
    #[error("{}: exists and is not empty", path.display())]
    OutputExists {
        /// The directory.
        path: std::path::PathBuf,
    },
    /// The snapshot could not be read.
    #[error(transparent)]
    Snapshot(#[from] statekit_snapshot::SnapshotError),
    /// Writing to (or listing) the output's storage failed (an object store).
    #[error(transparent)]
    Storage(#[from] statekit_core::storage::StorageError),
    /// The view has no state of that name.
    #[error("no state {state:?}")]
    UnknownState {
        /// The name asked for.
        state: String,
    },
    /// Reading the snapshot failed.
    #[error(transparent)]
    State(#[from] statekit_core::StateError),
    /// Writing a Parquet file failed.
    #[error("{}: {source}", path.display())]
    Parquet {
        /// The file.
        path: std::path::PathBuf,
        /// The writer's error.
        #[source]
        source: parquet::errors::ParquetError,
    },
    /// Writing an Arrow IPC or JSON lines file failed.
    #[error("{}: {source}", path.display())]
    Write {
        /// The file.
        path: std::path::PathBuf,
        /// The writer's error.
        #[source]
        source: arrow_schema::ArrowError,
    },
    /// An option this format or table cannot take (snappy for Arrow IPC, compressed JSON
    /// lines, …).
    #[error("not supported: {what}")]
    Unsupported {
        /// What was asked for.
        what: String,
    },
    /// A table file does not fit the schema: a missing column, a type that cannot hold the
    /// schema's, a value that does not fit, a duplicate key, a file that is not Parquet.
    #[error("{}{}{}: {reason}", path.display(), row.map(|r| format!(", row {r}")).unwrap_or_default(), column.as_ref().map(|c| format!(", column {c}")).unwrap_or_default())]
    BadTable {
        /// The file.
        path: std::path::PathBuf,
        /// The row (counted from 0 in the file), when one is at fault.
        row: Option<u64>,
        /// The column, when one is at fault.
        column: Option<String>,
        /// Why.
        reason: String,
    },
    /// A table file (or the tables' `_tables.json`) that is not a regular file — a FIFO, a
    /// device, a socket, a directory — refused before it is read: opening a FIFO waits for a
    /// writer, a device never ends. A symlink is followed; what it points to must be a
    /// regular file.
    #[error("{}: {what}, not a regular file (a table file must be a regular file)", path.display())]
    NotAFile {
        /// The file.
        path: std::path::PathBuf,
        /// What it is instead ("a FIFO", "a device", "a socket", "a directory").
        what: &'static str,
    },
    /// An import's operator state would take more than `--memory`: operator state is held
    /// whole (as Apache Flink holds it on restore), not sorted through spill files like keyed
    /// rows.
    #[error("{}, row {row}: operator state {state:?} needs more than {limit} bytes (--memory, at least 64 MiB): operator state is held in memory whole; raise --memory, or keep this data in keyed state", path.display())]
    OperatorStateTooLarge {
        /// The table file being read when the budget ran out.
        path: std::path::PathBuf,
        /// Its row (counted from 0 in the file).
        row: u64,
        /// The operator state.
        state: String,
        /// The budget, in bytes.
        limit: usize,
    },
    /// Planning or writing the savepoint failed (a bad schema, an existing output, …).
    #[error(transparent)]
    Migrate(#[from] Box<statekit_migrate::MigrateError>),
    /// Writing the savepoint failed.
    #[error(transparent)]
    Checkpoint(#[from] statekit_checkpoint::CheckpointError),
    /// A file could not be written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// `finish-shards` of an export: a shard's manifest is missing, or the manifests do not
    /// fit together (another N, another snapshot, a subtask twice or not at all).
    #[error("{}: {reason}", output.display())]
    Shards {
        /// The export's output.
        output: std::path::PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Arrow refused the arrays built (a bug of this crate, reported rather than a panic).
    #[error("state {state:?}: building an Arrow batch: {source}")]
    Arrow {
        /// The state.
        state: String,
        /// Arrow's error.
        #[source]
        source: arrow_schema::ArrowError,
    },
}

/// Boxed: a migration error is large, and every table result carries this one.
impl From<statekit_migrate::MigrateError> for TableError {
    fn from(e: statekit_migrate::MigrateError) -> Self {
        TableError::Migrate(Box::new(e))
    }
}

impl TableError {
    /// What kind of failure this is: undecodable bytes are corrupt data (or a schema that
    /// does not describe them), an unknown state the caller's mistake, I/O by its error;
    /// an Arrow or Parquet failure is this crate's own.
    pub fn kind(&self) -> ErrorKind {
        match self {
            TableError::Undecodable { .. } => ErrorKind::Corrupt,
            TableError::UnknownState { .. }
            | TableError::Unknown { .. }
            | TableError::OutputExists { .. }
            | TableError::Unsupported { .. }
            | TableError::Shards { .. }
            | TableError::NotAFile { .. }
            | TableError::OperatorStateTooLarge { .. }
            | TableError::BadTable { .. } => ErrorKind::Caller,
            TableError::Migrate(e) => e.kind(),
            TableError::Storage(e) => e.kind(),
            TableError::Checkpoint(e) => e.kind(),
            TableError::Write {
                source: arrow_schema::ArrowError::IoError(_, e),
                ..
            } => ErrorKind::of_io(e),
            TableError::Snapshot(e) => e.kind(),
            TableError::State(e) => e.kind(),
            TableError::Io { source, .. } => ErrorKind::of_io(source),
            TableError::Parquet { .. } | TableError::Arrow { .. } | TableError::Write { .. } => ErrorKind::Internal,
        }
    }
}

impl statekit_core::HasErrorKind for TableError {
    fn kind(&self) -> statekit_core::ErrorKind {
        TableError::kind(self)
    }
}
