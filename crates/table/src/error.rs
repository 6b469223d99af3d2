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
    /// A file could not be written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
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
            | TableError::Unsupported { .. } => ErrorKind::Caller,
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
