use statekit_core::storage::StorageError;
use statekit_core::{ErrorKind, StateError};
use statekit_format::FormatError;

/// Errors of the checkpoint lifecycle.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// A snapshot file could not be read or written.
    #[error(transparent)]
    Format(#[from] FormatError),
    /// Storage failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// A backend failed.
    #[error(transparent)]
    State(#[from] StateError),
    /// The snapshot has no operator with this uid.
    #[error("{snapshot}: no operator with uid {uid:?} (the snapshot has {known:?})")]
    UnknownOperator {
        /// The snapshot's `_metadata`.
        snapshot: String,
        /// The uid asked for.
        uid: String,
        /// The uids it has.
        known: Vec<String>,
    },
    /// The shared-state registry refused a step of checkpoint `id`.
    #[error("checkpoint {id}: {source}")]
    Registry {
        /// The checkpoint.
        id: u64,
        /// Why.
        #[source]
        source: crate::registry::RegistryError,
    },
    /// An I/O error on a local path (gc's walk and deletions).
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A gc plan was refused, as a whole or from one file on: a file left the base directory,
    /// is reached through a symlink, or changed since the plan was made.
    #[error("{0}")]
    GcRefused(String),
    /// Another request that does not fit (parallelism out of range, an operator registered
    /// twice or not at all, a subtask index past the parallelism, …): a caller mistake.
    #[error("{0}")]
    Invalid(String),
    /// Reading an Apache Flink snapshot failed.
    #[error(transparent)]
    Flink(#[from] statekit_flink::FlinkError),
    /// The snapshot is one statekit can list but not yet read this part of (the state data
    /// of an Apache Flink snapshot).
    #[error("{snapshot}: {what}")]
    Unsupported {
        /// The snapshot's `_metadata`.
        snapshot: String,
        /// What cannot be read yet.
        what: String,
    },
    /// The path is not a checkpoint or savepoint.
    #[error("{path}: {reason}")]
    NotASnapshot {
        /// The path given.
        path: String,
        /// Why it was rejected.
        reason: String,
    },
}

impl CheckpointError {
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            CheckpointError::Format(e) => e.kind(),
            CheckpointError::Storage(e) => e.kind(),
            CheckpointError::State(e) => e.kind(),
            CheckpointError::Invalid(_)
            | CheckpointError::NotASnapshot { .. }
            | CheckpointError::UnknownOperator { .. } => ErrorKind::Caller,
            CheckpointError::Registry { source, .. } => source.kind(),
            CheckpointError::Io { source, .. } => ErrorKind::of_io(source),
            CheckpointError::GcRefused(_) => ErrorKind::Transient,
            CheckpointError::Flink(e) => e.kind(),
            CheckpointError::Unsupported { .. } => ErrorKind::Unsupported,
        }
    }
}

impl statekit_core::HasErrorKind for CheckpointError {
    fn kind(&self) -> statekit_core::ErrorKind {
        CheckpointError::kind(self)
    }
}
