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
    /// The upload batch threshold is above the bytes allowed in flight.
    #[error("configuration: dstl.dfs.batch.persist-size-threshold ({threshold} bytes) must not exceed dstl.dfs.upload.max-in-flight ({max_in_flight} bytes)")]
    BatchAboveInFlight {
        /// `…batch.persist-size-threshold`, in bytes.
        threshold: usize,
        /// `…upload.max-in-flight`, in bytes.
        max_in_flight: usize,
    },
    /// No upload attempt is allowed.
    #[error("configuration: dstl.dfs.upload.max-attempts must be at least 1")]
    NoUploadAttempts,
    /// Log files outside the job directory on a storage a checkpoint cannot reference.
    #[error(
        "configuration: {dir}: log files outside the job directory must be on the local filesystem or an object store"
    )]
    LogOutsideJob {
        /// The log file, as its storage describes it.
        dir: String,
    },
    /// The uploader thread could not be started.
    #[error("changelog upload failed: cannot start the uploader thread: {0}")]
    UploaderThread(#[source] std::io::Error),
    /// A change set's upload failed after every attempt.
    #[error("changelog upload failed: change set {sqn}: {reason}")]
    Upload {
        /// The change set's sequence number.
        sqn: u64,
        /// Why the last attempt failed.
        reason: UploadFailure,
    },
    /// A persist waited for change sets that were truncated meanwhile.
    #[error("change sets from {from} were truncated (the log starts at {lowest}) before the persist completed")]
    TruncatedBeforePersist {
        /// The persist's first sequence number.
        from: u64,
        /// The log's first sequence number now.
        lowest: u64,
    },
    /// A persist from below the truncation point.
    #[error("persist from {from}: the log was truncated to {lowest}")]
    PersistBelowTruncation {
        /// The sequence number asked for.
        from: u64,
        /// The log's first sequence number.
        lowest: u64,
    },
    /// A persist from past the next sequence number.
    #[error("persist from {from}: beyond the next sequence number {next}")]
    PersistBeyondNext {
        /// The sequence number asked for.
        from: u64,
        /// The next sequence number.
        next: u64,
    },
    /// A restore met a log tail whose change set is not in its file as the checkpoint
    /// references it.
    #[error("cannot restore: {0}")]
    TailMismatch(Box<statekit_format::Problem>),
    /// More consecutive materializations failed than allowed.
    #[error("{failures} consecutive materializations failed (state.changelog.max-failures-allowed = {allowed}); last: {last}")]
    MaterializationFailures {
        /// Consecutive failures.
        failures: u32,
        /// The failures allowed.
        allowed: u32,
        /// The last failure.
        last: Box<MaterializationFailure>,
    },
}

/// Why an attempt to upload change sets failed (shared by every change set of the upload).
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum UploadFailure {
    /// No attempt was started.
    #[error("no attempt was made")]
    NoAttempt,
    /// Every attempt outlived its timeout.
    #[error("no attempt finished within {timeout:?} ({attempts} attempts)")]
    TimedOut {
        /// `dstl.dfs.upload.timeout`.
        timeout: std::time::Duration,
        /// `dstl.dfs.upload.max-attempts`.
        attempts: u32,
    },
    /// Creating or finishing the log file failed.
    #[error("{0}")]
    File(std::sync::Arc<FormatError>),
    /// Writing a change set into the log file failed.
    #[error("{file}: {source}")]
    Append {
        /// The log file, as its storage describes it.
        file: String,
        /// The failure.
        source: std::sync::Arc<std::io::Error>,
    },
}

impl UploadFailure {
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            UploadFailure::NoAttempt | UploadFailure::TimedOut { .. } => ErrorKind::Transient,
            UploadFailure::File(e) => e.kind(),
            UploadFailure::Append { source, .. } => ErrorKind::of_io(source),
        }
    }
}

impl HasErrorKind for UploadFailure {
    fn kind(&self) -> ErrorKind {
        UploadFailure::kind(self)
    }
}

/// Why a materialization failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MaterializationFailure {
    /// Writing its file failed.
    #[error("materialization {id}: {source}")]
    Write {
        /// The materialization.
        id: u64,
        /// The failure.
        source: FormatError,
    },
    /// Its thread panicked.
    #[error("the materialization thread panicked")]
    Panicked,
}

impl MaterializationFailure {
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            MaterializationFailure::Write { source, .. } => source.kind(),
            MaterializationFailure::Panicked => ErrorKind::Internal,
        }
    }
}

impl HasErrorKind for MaterializationFailure {
    fn kind(&self) -> ErrorKind {
        MaterializationFailure::kind(self)
    }
}

impl ChangelogError {
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            ChangelogError::Format(e) => e.kind(),
            ChangelogError::Record { .. } => ErrorKind::Corrupt,
            ChangelogError::Storage(e) => e.kind(),
            ChangelogError::State(e) => e.kind(),
            ChangelogError::BatchAboveInFlight { .. }
            | ChangelogError::NoUploadAttempts
            | ChangelogError::LogOutsideJob { .. }
            | ChangelogError::TruncatedBeforePersist { .. }
            | ChangelogError::PersistBelowTruncation { .. }
            | ChangelogError::PersistBeyondNext { .. }
            | ChangelogError::MaterializationFailures { .. }
            | ChangelogError::TailMismatch(_) => ErrorKind::Caller,
            ChangelogError::UploaderThread(_) | ChangelogError::Upload { .. } => ErrorKind::Transient,
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
