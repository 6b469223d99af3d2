use statekit_changelog::ChangelogError;
use statekit_checkpoint::CheckpointError;
use statekit_core::schema::{ValueDecodeError, ValueEncodeError};
use statekit_core::storage::StorageError;
use statekit_core::{ErrorKind, StateError};
use statekit_snapshot::SnapshotError;

/// Errors of the runtime: a checkpoint, the sink's transactions, the source's offsets. The
/// lower crates' errors travel boxed, so a `Result` of the runtime stays small.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// Checkpoint `id` failed and was aborted (nothing of it stays); `source` says why.
    #[error("checkpoint {id} failed")]
    CheckpointFailed {
        /// The checkpoint.
        id: u64,
        /// Why.
        #[source]
        source: Box<RuntimeError>,
    },
    /// The thread writing the asynchronous part of checkpoint `id` panicked.
    #[error("checkpoint {id}: its thread panicked")]
    CheckpointPanicked {
        /// The checkpoint.
        id: u64,
    },
    /// A thread writing one subtask's state panicked.
    #[error("snapshot thread panicked")]
    SnapshotPanicked,
    /// A checkpoint was asked of a coordinator made for savepoints only
    /// ([`crate::CheckpointCoordinator::savepoints_only`]).
    #[error("checkpoints are off")]
    CheckpointsOff,
    /// A native snapshot was asked of a backend that cannot take one.
    #[error("native snapshots need the RocksDB backend without the changelog")]
    NativeNeedsRocksDb,
    /// An entry of the sink's `pending-commits` state is not a transaction this sink wrote.
    #[error("invalid transaction {entry:?} in the sink state{why}")]
    InvalidTransaction {
        /// The entry as stored.
        entry: String,
        /// What is wrong with it (empty, or `": …"`).
        why: String,
    },
    /// An entry of the source's `offsets` state does not decode as (input, offset).
    #[error("source offset state has an unexpected shape")]
    OffsetShape,
    /// A committed-offset file does not hold one big-endian u64.
    #[error("{path}: expected 8 bytes")]
    OffsetFile {
        /// The file.
        path: String,
    },
    /// A source stream failed while reading.
    #[error("{name}: reading failed: {message}")]
    SourceRead {
        /// The source's name.
        name: String,
        /// The I/O error's text.
        message: String,
    },
    /// An I/O operation on a local path failed (`what` names the operation and the path).
    #[error("{what}")]
    Io {
        /// What was being done, with the path: `cannot open /out/.pending/part-…`.
        what: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Writing output failed.
    #[error(transparent)]
    Write(#[from] std::io::Error),
    /// The checkpoint store or a snapshot writer/reader failed.
    #[error(transparent)]
    Checkpoint(Box<CheckpointError>),
    /// A backend or operator state failed.
    #[error(transparent)]
    State(Box<StateError>),
    /// Opening or restoring a backend failed.
    #[error(transparent)]
    Snapshot(Box<SnapshotError>),
    /// The changelog failed to persist a checkpoint's log tail.
    #[error(transparent)]
    Changelog(Box<ChangelogError>),
    /// Storage failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// A value of operator state (a source offset, a pending transaction) does not decode.
    #[error(transparent)]
    Decode(#[from] ValueDecodeError),
    /// A value of operator state does not fit its schema (a bug of the caller).
    #[error(transparent)]
    Encode(#[from] ValueEncodeError),
    /// An error of the embedding job's own code (raised in its [`crate::Checkpointed`]
    /// hooks), carried through the coordinator unchanged.
    #[error(transparent)]
    Job(Box<dyn std::error::Error + Send + Sync>),
}

impl From<CheckpointError> for RuntimeError {
    fn from(e: CheckpointError) -> Self {
        RuntimeError::Checkpoint(Box::new(e))
    }
}

impl From<StateError> for RuntimeError {
    fn from(e: StateError) -> Self {
        RuntimeError::State(Box::new(e))
    }
}

impl From<SnapshotError> for RuntimeError {
    fn from(e: SnapshotError) -> Self {
        RuntimeError::Snapshot(Box::new(e))
    }
}

impl From<ChangelogError> for RuntimeError {
    fn from(e: ChangelogError) -> Self {
        RuntimeError::Changelog(Box::new(e))
    }
}

impl RuntimeError {
    /// Wraps an error of the job's own code ([`RuntimeError::Job`]).
    pub fn job(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        RuntimeError::Job(e.into())
    }

    /// An [`RuntimeError::Io`] for `what` (the operation and its path).
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let what = what.into();
        move |source| RuntimeError::Io { what, source }
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            RuntimeError::CheckpointFailed { source, .. } => source.kind(),
            RuntimeError::CheckpointPanicked { .. } | RuntimeError::SnapshotPanicked => ErrorKind::Internal,
            RuntimeError::CheckpointsOff | RuntimeError::NativeNeedsRocksDb | RuntimeError::Encode(_) => {
                ErrorKind::Caller
            }
            RuntimeError::InvalidTransaction { .. }
            | RuntimeError::OffsetShape
            | RuntimeError::OffsetFile { .. }
            | RuntimeError::Decode(_) => ErrorKind::Corrupt,
            RuntimeError::SourceRead { .. } => ErrorKind::Transient,
            RuntimeError::Io { source, .. } | RuntimeError::Write(source) => ErrorKind::of_io(source),
            RuntimeError::Checkpoint(e) => e.kind(),
            RuntimeError::State(e) => e.kind(),
            RuntimeError::Snapshot(e) => e.kind(),
            RuntimeError::Changelog(e) => e.kind(),
            RuntimeError::Storage(e) => e.kind(),
            // The job's own error: a runtime error inside, or the first statekit error of its
            // chain, tells.
            RuntimeError::Job(e) => match e.downcast_ref::<RuntimeError>() {
                Some(r) => r.kind(),
                None => ErrorKind::of_dyn(e.as_ref()),
            },
        }
    }
}

impl statekit_core::HasErrorKind for RuntimeError {
    fn kind(&self) -> ErrorKind {
        RuntimeError::kind(self)
    }
}

impl From<RuntimeError> for StateError {
    /// A runtime error where a backend's error is expected (a job's state code calling the
    /// runtime): the state error itself when it is one, else boxed with its kind.
    fn from(e: RuntimeError) -> Self {
        match e {
            RuntimeError::State(s) => *s,
            other => StateError::Other(Box::new(other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_follow_the_cause() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
        let failed = RuntimeError::CheckpointFailed {
            id: 3,
            source: Box::new(RuntimeError::io("cannot open x")(io)),
        };
        assert_eq!(failed.kind(), ErrorKind::NotFound);
        assert_eq!(failed.to_string(), "checkpoint 3 failed");
        assert_eq!(
            RuntimeError::job(RuntimeError::NativeNeedsRocksDb).kind(),
            ErrorKind::Caller
        );
        assert_eq!(RuntimeError::job("a job's own failure").kind(), ErrorKind::Internal);
        let boxed: StateError = RuntimeError::OffsetShape.into();
        assert_eq!(boxed.kind(), ErrorKind::Corrupt);
        // Small enough to return everywhere (clippy's result_large_err is 128 bytes).
        assert!(std::mem::size_of::<RuntimeError>() <= 64);
    }
}
