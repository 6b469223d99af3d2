//! The error type of the snapshot layer.

use statekit_changelog::ChangelogError;
use statekit_checkpoint::CheckpointError;
use statekit_core::{ErrorKind, HasErrorKind, StateError};
use statekit_format::FormatError;

/// Errors of opening, reading and restoring snapshots of any kind.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotError {
    /// The snapshot could not be opened or read (not a snapshot, bad `_metadata`, a damaged
    /// data file).
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// A file does not decode.
    #[error(transparent)]
    Format(#[from] FormatError),
    /// A backend failed.
    #[error(transparent)]
    State(#[from] StateError),
    /// The changelog failed.
    #[error(transparent)]
    Changelog(#[from] ChangelogError),
    /// An Apache Flink snapshot could not be read (bad `_metadata`, a damaged or missing
    /// state file, a form statekit does not read).
    #[error(transparent)]
    Flink(#[from] statekit_flink::FlinkError),
    /// A tool that works on statekit's own files (native or changelog handles) was given a
    /// snapshot of another family.
    #[error("{snapshot}: {what} are read from statekit's own snapshots only")]
    NotStatekitFiles {
        /// The snapshot directory.
        snapshot: String,
        /// What was asked for.
        what: String,
    },
    /// Native files of one backend cannot restore into another (a caller mistake: choose the
    /// snapshot's backend, or convert to a canonical savepoint first).
    #[error("{snapshot} is a native {backend} snapshot: it restores into a {backend} backend only (or take a canonical savepoint to switch backends)")]
    NativeNeedsItsBackend {
        /// The snapshot directory.
        snapshot: String,
        /// The backend whose files it holds.
        backend: String,
    },
    /// The snapshot needs a backend this build was compiled without.
    #[error("operator {uid:?} holds native {backend} state; this build has no `rocksdb` feature")]
    BackendNotBuilt {
        /// The operator.
        uid: String,
        /// The backend.
        backend: String,
    },
    /// Restoring one subtask's changelog state (for a view of it) failed.
    #[error("operator {uid:?}, subtask {subtask}: restoring its changelog state: {source}")]
    ChangelogView {
        /// The operator.
        uid: String,
        /// The subtask.
        subtask: u32,
        /// The cause.
        #[source]
        source: StateError,
    },
}

impl SnapshotError {
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            SnapshotError::Checkpoint(e) => e.kind(),
            SnapshotError::Format(e) => e.kind(),
            SnapshotError::State(e) => e.kind(),
            SnapshotError::Changelog(e) => e.kind(),
            SnapshotError::Flink(e) => e.kind(),
            SnapshotError::NativeNeedsItsBackend { .. } => ErrorKind::Caller,
            SnapshotError::NotStatekitFiles { .. } => ErrorKind::Unsupported,
            SnapshotError::BackendNotBuilt { .. } => ErrorKind::Unsupported,
            SnapshotError::ChangelogView { source, .. } => source.kind(),
        }
    }
}

impl HasErrorKind for SnapshotError {
    fn kind(&self) -> ErrorKind {
        SnapshotError::kind(self)
    }
}

impl From<SnapshotError> for StateError {
    fn from(e: SnapshotError) -> Self {
        match e {
            SnapshotError::State(s) => s,
            other => StateError::Other(Box::new(other)),
        }
    }
}
