//! Errors of the changelog.

use statekit_core::storage::StorageError;
use statekit_core::{ErrorKind, HasErrorKind, StateError};
use statekit_format::FormatError;

/// What went wrong in the changelog.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChangelogError {
    /// A log file does not decode (names file, offset, field).
    #[error(transparent)]
    Format(#[from] FormatError),
    /// One change record does not decode (`position` within the record; the caller that
    /// knows the file wraps it into [`ChangelogError::Format`]).
    #[error("change record: byte {position}: {field}: {reason}")]
    Record {
        /// Byte position within the record.
        position: usize,
        /// The field being read.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// The storage failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The delegate backend failed.
    #[error(transparent)]
    State(#[from] StateError),
    /// A configuration value is missing or invalid (names the key).
    #[error("configuration: {0}")]
    Config(String),
    /// An upload failed after every attempt.
    #[error("changelog upload failed: {0}")]
    Upload(String),
    /// A request does not fit the writer's state (a persist below the truncation point, an
    /// unknown checkpoint, …).
    #[error("{0}")]
    Invalid(String),
}

impl ChangelogError {
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            ChangelogError::Format(e) => e.kind(),
            ChangelogError::Record { .. } => ErrorKind::Corrupt,
            ChangelogError::Storage(e) => e.kind(),
            ChangelogError::State(e) => e.kind(),
            ChangelogError::Config(_) | ChangelogError::Invalid(_) => ErrorKind::Caller,
            ChangelogError::Upload(_) => ErrorKind::Transient,
        }
    }
}

impl HasErrorKind for ChangelogError {
    fn kind(&self) -> ErrorKind {
        ChangelogError::kind(self)
    }
}

impl From<ChangelogError> for StateError {
    fn from(e: ChangelogError) -> Self {
        match e {
            ChangelogError::State(s) => s,
            other => StateError::Other(Box::new(other)),
        }
    }
}
