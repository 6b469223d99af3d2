use statekit_core::storage::StorageError;
use statekit_core::{ErrorKind, StateError};
use statekit_core::{KeyGroupRange, KeyGroupScheme, OperatorId, OperatorStateMode};
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
    /// A gc plan without an absolute base directory.
    #[error("refusing a gc plan without an absolute base directory")]
    GcWithoutBase,
    /// A gc plan was refused as a whole, before anything was deleted: an orphan left the
    /// base directory, is reached through a symlink, or changed since the plan was made.
    #[error("refusing the whole gc plan, nothing deleted: {}: {why} (base {})", orphan.display(), base.display())]
    GcRefused {
        /// The orphan.
        orphan: std::path::PathBuf,
        /// What is wrong with it.
        why: Box<OrphanMoved>,
        /// The plan's base directory.
        base: std::path::PathBuf,
    },
    /// A gc stopped at an orphan that changed while others were being deleted.
    #[error("{}: {why}; stopped after deleting {deleted} files (base {})", orphan.display(), base.display())]
    GcStopped {
        /// The orphan.
        orphan: std::path::PathBuf,
        /// What is wrong with it.
        why: Box<OrphanMoved>,
        /// The files deleted before it.
        deleted: usize,
        /// The plan's base directory.
        base: std::path::PathBuf,
    },
    /// A gc plan of an object store with an orphan outside the base.
    #[error("refusing the whole gc plan, nothing deleted: {object} is not below {base}")]
    GcOutsideBase {
        /// The orphan's URL.
        object: String,
        /// The base's URL.
        base: String,
    },
    /// Another request that does not fit (parallelism out of range, an operator registered
    /// twice or not at all, a subtask index past the parallelism, …): a caller mistake.
    #[error("{0}")]
    Invalid(Box<InvalidRequest>),
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
            CheckpointError::GcWithoutBase => ErrorKind::Caller,
            CheckpointError::GcRefused { .. }
            | CheckpointError::GcStopped { .. }
            | CheckpointError::GcOutsideBase { .. } => ErrorKind::Transient,
        }
    }
}

impl statekit_core::HasErrorKind for CheckpointError {
    fn kind(&self) -> statekit_core::ErrorKind {
        CheckpointError::kind(self)
    }
}

/// Why an orphan of a gc plan is no longer the file the plan found, where it found it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OrphanMoved {
    /// Its path is not below the plan's base.
    #[error("it is not below the base directory")]
    NotBelowBase,
    /// The base directory could not be opened.
    #[error("the base directory: {0}")]
    Base(#[source] std::io::Error),
    /// A directory on its path is a symlink or something else.
    #[error("{name:?} on its path is not a real directory ({source})")]
    NotADirectory {
        /// The path component.
        name: std::ffi::OsString,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
    /// Its status could not be read.
    #[error("{0}")]
    Stat(#[source] std::io::Error),
    /// It is no longer a regular file.
    #[error("it is no longer a regular file")]
    NotAFile,
    /// Another file has its name now.
    #[error("it is no longer the file the plan found (replaced since)")]
    Replaced,
}

/// A request to read or write a snapshot that does not fit it: a caller mistake
/// ([`CheckpointError::Invalid`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidRequest {
    /// A directory without `_metadata`.
    #[error(
        "{location}: no {} here: not a snapshot, or an incomplete one",
        statekit_format::METADATA_FILE_NAME
    )]
    NoMetadata {
        /// The directory given (a path or URL).
        location: String,
    },
    /// A restore into a backend of another max parallelism.
    #[error("operator {uid:?} was snapshotted with max parallelism {snapshot} but the backend has {backend}; changing max parallelism needs a rewrite of the savepoint")]
    MaxParallelism {
        /// The operator.
        uid: String,
        /// The snapshot's max parallelism.
        snapshot: u32,
        /// The backend's.
        backend: u32,
    },
    /// Native state restored as canonical state.
    #[error("{metadata}: operator {uid:?} holds native {backend} state, which restores only into a {backend} backend (statekit_snapshot::open_keyed restores any snapshot kind); take a canonical savepoint to switch backends")]
    NativeState {
        /// The snapshot's `_metadata`.
        metadata: String,
        /// The operator.
        uid: String,
        /// The backend whose files it holds.
        backend: String,
    },
    /// Changelog state restored as canonical state.
    #[error("{metadata}: operator {uid:?} holds changelog state (materializations plus a log tail): restore it with statekit_snapshot::open_keyed (any backend, with or without the changelog)")]
    ChangelogState {
        /// The snapshot's `_metadata`.
        metadata: String,
        /// The operator.
        uid: String,
    },
    /// A subtask index past the (new) parallelism.
    #[error("subtask {index} is not below parallelism {parallelism}")]
    SubtaskIndex {
        /// The index.
        index: u32,
        /// The parallelism.
        parallelism: u32,
    },
    /// A subtask the operator's metadata does not list.
    #[error("operator {uid:?} has {subtasks} subtasks, no subtask {index}")]
    NoStoredSubtask {
        /// The operator.
        uid: String,
        /// Its subtasks.
        subtasks: usize,
        /// The index asked for.
        index: u32,
    },
    /// A job id that cannot name a directory.
    #[error("invalid job id {job_id:?}")]
    JobId {
        /// The id given.
        job_id: String,
    },
    /// A store that retains no checkpoint.
    #[error("at least one checkpoint must be retained")]
    NothingRetained,
    /// A second restore recorded in one store.
    #[error("the store already recorded a restore")]
    RestoreRecorded,
    /// A checkpoint id not above the latest completed one.
    #[error("checkpoint {id} is not newer than the latest completed checkpoint {latest}")]
    NotNewerThanLatest {
        /// The id given.
        id: u64,
        /// The latest completed checkpoint.
        latest: u64,
    },
    /// A checkpoint id not above the restored one.
    #[error("checkpoint {id} is not newer than the restored checkpoint {restored}")]
    NotNewerThanRestored {
        /// The id given.
        id: u64,
        /// The restored checkpoint.
        restored: u64,
    },
    /// A subtask index past the operator's parallelism.
    #[error("operator {uid:?}: subtask {index} is not below its parallelism {parallelism}")]
    SubtaskPastParallelism {
        /// The operator.
        uid: String,
        /// The index.
        index: u32,
        /// The operator's parallelism.
        parallelism: u32,
    },
    /// A savepoint subtask with native files it does not own.
    #[error(
        "operator {uid:?}, subtask {index}: a savepoint must be self-contained, but native file {file:?} is {scope}"
    )]
    SavepointSharesFile {
        /// The operator.
        uid: String,
        /// The subtask.
        index: u32,
        /// The native file's name.
        file: String,
        /// Its scope (`shared`, `absolute`, `url`).
        scope: &'static str,
    },
    /// A savepoint subtask written as changelog state.
    #[error("operator {uid:?}, subtask {index}: a savepoint is self-contained; write the backend's canonical state, not its changelog")]
    SavepointChangelog {
        /// The operator.
        uid: String,
        /// The subtask.
        index: u32,
    },
    /// An operator uid registered twice.
    #[error("operator uid {uid:?} registered twice")]
    RegisteredTwice {
        /// The uid.
        uid: String,
    },
    /// Two uids with the same operator id.
    #[error("uids {uid:?} and {other:?} hash to the same operator id {id}")]
    IdCollision {
        /// The uid registered now.
        uid: String,
        /// The uid registered before.
        other: String,
        /// Their operator id.
        id: OperatorId,
    },
    /// An operator uid never registered.
    #[error("operator uid {uid:?} was not registered")]
    NotRegistered {
        /// The uid.
        uid: String,
    },
    /// A subtask index the writer has no slot for.
    #[error("operator {uid:?}: no subtask {index}")]
    NoSubtask {
        /// The operator.
        uid: String,
        /// The index.
        index: u32,
    },
    /// A subtask written twice.
    #[error("operator {uid:?}: subtask {index} written twice")]
    WrittenTwice {
        /// The operator.
        uid: String,
        /// The subtask.
        index: u32,
    },
    /// A subtask's backend of another max parallelism than its operator.
    #[error(
        "operator {uid:?}: subtask {index}'s backend has max parallelism {backend} but the operator has {operator}"
    )]
    BackendMaxParallelism {
        /// The operator.
        uid: String,
        /// The subtask.
        index: u32,
        /// The backend's max parallelism.
        backend: u32,
        /// The operator's.
        operator: u32,
    },
    /// A keyed file of other key groups than the subtask's.
    #[error("operator {uid:?}, subtask {index}: {file} holds key groups {file_range} of {file_max_parallelism}, not the subtask's {range} of {max_parallelism}")]
    FileKeyGroups {
        /// The operator.
        uid: String,
        /// The subtask.
        index: u32,
        /// The file's name.
        file: String,
        /// The key groups it holds.
        file_range: KeyGroupRange,
        /// Its max parallelism.
        file_max_parallelism: u32,
        /// The subtask's key groups.
        range: KeyGroupRange,
        /// The operator's max parallelism.
        max_parallelism: u32,
    },
    /// A subtask that never reported its state.
    #[error("operator {uid:?}: subtask {index} did not report its state")]
    NotReported {
        /// The operator.
        uid: String,
        /// The subtask.
        index: usize,
    },
    /// A keyed state registered differently by two subtasks.
    #[error("operator {uid:?}, subtask {index}: {reason}")]
    SubtasksDisagree {
        /// The operator.
        uid: String,
        /// The subtask that differs from the ones before.
        index: usize,
        /// How its state differs.
        reason: statekit_core::Incompatibility,
    },
    /// An operator state of another mode in two subtasks.
    #[error("operator {uid:?}: operator state {state:?} is {first} in one subtask and {other} in subtask {index}")]
    OperatorStateModes {
        /// The operator.
        uid: String,
        /// The state.
        state: String,
        /// Its mode in the subtasks before.
        first: OperatorStateMode,
        /// Its mode in this one.
        other: OperatorStateMode,
        /// The subtask.
        index: usize,
    },
    /// Subtasks of one operator with keys under different key-group schemes.
    #[error("operator {uid:?}: its keys are in {operator} key groups, but a subtask's are in {subtask} key groups")]
    SchemeMismatch {
        /// The operator.
        uid: String,
        /// The scheme recorded for it.
        operator: KeyGroupScheme,
        /// The subtask's.
        subtask: KeyGroupScheme,
    },
}

impl From<InvalidRequest> for CheckpointError {
    fn from(e: InvalidRequest) -> Self {
        CheckpointError::Invalid(Box::new(e))
    }
}

impl InvalidRequest {
    /// What kind of failure this is: always the caller's.
    pub fn kind(&self) -> ErrorKind {
        ErrorKind::Caller
    }
}

impl statekit_core::HasErrorKind for InvalidRequest {
    fn kind(&self) -> ErrorKind {
        ErrorKind::Caller
    }
}

impl statekit_core::HasErrorKind for OrphanMoved {
    fn kind(&self) -> ErrorKind {
        OrphanMoved::kind(self)
    }
}

impl OrphanMoved {
    /// What kind of failure this is: the file system changed under the plan (retry with a
    /// new plan).
    pub fn kind(&self) -> ErrorKind {
        ErrorKind::Transient
    }
}
