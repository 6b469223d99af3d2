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
    /// The request does not fit the snapshot (unknown uid, parallelism out of range, …).
    #[error("{0}")]
    Invalid(String),
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
            CheckpointError::Invalid(_) | CheckpointError::NotASnapshot { .. } => ErrorKind::Caller,
        }
    }
}
