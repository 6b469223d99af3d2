//! The error type of the state model and backends, and the [`ErrorKind`] every statekit
//! library error reports.

use crate::keygroup::KeyGroupRange;
use crate::schema::TypeSchema;
use crate::state::{KeyedStateKind, OperatorStateMode};

/// What kind of failure an error is, so an engine can act on it without matching messages
/// (in the manner of slatedb's `ErrorKind`): every library error of statekit has a `kind()`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Stored bytes are damaged or inconsistent (a checksum, a length, a reference): retrying
    /// does not help; another copy of the data might.
    Corrupt,
    /// The data is fine but needs a newer or differently built reader (a format version, a
    /// backend this build lacks).
    Unsupported,
    /// The request does not fit (an unknown uid or state, a parallelism out of range, the
    /// wrong state kind, a path that is not a snapshot): fix the call.
    Caller,
    /// A file or object that should exist does not.
    NotFound,
    /// An I/O failure that may succeed when retried (interrupted, timed out, out of space, a
    /// network store's hiccup).
    Transient,
    /// Anything else (a bug, or an error of a component statekit does not classify).
    Internal,
}

impl ErrorKind {
    /// The kind of an I/O error.
    pub fn of_io(e: &std::io::Error) -> ErrorKind {
        use std::io::ErrorKind as K;
        match e.kind() {
            K::NotFound => ErrorKind::NotFound,
            K::InvalidInput | K::PermissionDenied | K::AlreadyExists | K::IsADirectory | K::NotADirectory => {
                ErrorKind::Caller
            }
            K::InvalidData | K::UnexpectedEof => ErrorKind::Corrupt,
            K::Unsupported => ErrorKind::Unsupported,
            _ => ErrorKind::Transient,
        }
    }

    /// The kind of an error met as `dyn Error` (an `anyhow` chain, a `source()`): the first
    /// error of this crate ([`StateError`], [`StorageError`](crate::storage::StorageError)), boxed
    /// [`KindedError`] or I/O error found in its source chain tells; otherwise [`ErrorKind::Internal`]. Errors of the crates above travel as
    /// [`KindedError`]s and tell their own kind ([`HasErrorKind`]); a caller that holds an
    /// error of a crate above as `dyn Error` downcasts it to that crate's type.
    pub fn of_dyn(e: &(dyn std::error::Error + 'static)) -> ErrorKind {
        let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
        while let Some(err) = cur {
            if let Some(k) = kind_of_core(err) {
                return k;
            }
            cur = err.source();
        }
        ErrorKind::Internal
    }
}

/// An error that says what kind of failure it is. Every library error type of statekit
/// implements it (each also has an inherent `kind()` of the same meaning, so callers need not
/// import this trait); it is how an error boxed into [`StateError::Other`] keeps its kind
/// without any registry.
pub trait HasErrorKind {
    /// What kind of failure this is.
    fn kind(&self) -> ErrorKind;
}

/// A library error that can travel boxed (in [`StateError::Other`]) and still say its kind:
/// any `Error + HasErrorKind + Send + Sync + 'static`. Downcast it to the concrete type with
/// [`downcast_ref`](#method.downcast_ref).
pub trait KindedError: std::error::Error + HasErrorKind + Send + Sync + 'static {}

impl<E: std::error::Error + HasErrorKind + Send + Sync + 'static> KindedError for E {}

impl dyn KindedError {
    /// The error as its concrete type `T`, if it is one.
    pub fn downcast_ref<T: std::error::Error + 'static>(&self) -> Option<&T> {
        let e: &(dyn std::error::Error + 'static) = self;
        e.downcast_ref::<T>()
    }

    /// Whether the error is a `T`.
    pub fn is<T: std::error::Error + 'static>(&self) -> bool {
        self.downcast_ref::<T>().is_some()
    }
}

/// A boxed [`KindedError`] is an error itself (its message and source are the boxed one's).
impl std::error::Error for Box<dyn KindedError> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        (**self).source()
    }
}

impl<T: HasErrorKind + ?Sized> HasErrorKind for Box<T> {
    fn kind(&self) -> ErrorKind {
        (**self).kind()
    }
}

impl HasErrorKind for std::io::Error {
    fn kind(&self) -> ErrorKind {
        ErrorKind::of_io(self)
    }
}

/// The kind of `err` when it is one of this crate's errors or an I/O error.
fn kind_of_core(err: &(dyn std::error::Error + 'static)) -> Option<ErrorKind> {
    if let Some(e) = err.downcast_ref::<StateError>() {
        return Some(e.kind());
    }
    if let Some(e) = err.downcast_ref::<crate::storage::StorageError>() {
        return Some(e.kind());
    }
    if let Some(e) = err.downcast_ref::<Box<dyn KindedError>>() {
        return Some(e.kind());
    }
    err.downcast_ref::<std::io::Error>().map(ErrorKind::of_io)
}

/// How a state registration (or a use of a state) does not fit the state registered before.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Incompatibility {
    /// Registered again as another kind.
    #[error("state {state:?} is {now} but was registered as {registered}")]
    Kind {
        /// The state.
        state: String,
        /// Its kind now.
        now: KeyedStateKind,
        /// Its recorded kind.
        registered: KeyedStateKind,
    },
    /// Registered again with another key, namespace or value schema.
    #[error("state {state:?}: {part} schema {now} is not the recorded {recorded}")]
    Schema {
        /// The state.
        state: String,
        /// `key`, `namespace` or `value`.
        part: &'static str,
        /// The schema now (boxed, as the next: state results stay small).
        now: Box<TypeSchema>,
        /// The recorded schema.
        recorded: Box<TypeSchema>,
    },
    /// Registered again with another map user-key schema.
    #[error("state {state:?}: map user-key schema differs")]
    UserKeySchema {
        /// The state.
        state: String,
    },
    /// Functions of another kind than the state's (a reduce function for a list state).
    #[error("state {state:?} is a {kind} state and cannot take {functions} functions")]
    Functions {
        /// The state.
        state: String,
        /// Its kind.
        kind: KeyedStateKind,
        /// The functions given (`Reduce(..)`, `Aggregate(..)`).
        functions: &'static str,
    },
    /// Keys of another type than the backend's other states, under a key-group scheme that
    /// hashes them by type (Flink's).
    #[error("state {state:?} has {key_schema} keys, but this backend's states are keyed by another type")]
    KeyType {
        /// The state.
        state: String,
        /// Its key schema.
        key_schema: TypeSchema,
    },
    /// More states than handles.
    #[error("too many states")]
    TooManyStates,
    /// An operator state registered again in another mode.
    #[error("operator state {state:?} is {now} but was registered as {registered}")]
    OperatorStateMode {
        /// The state.
        state: String,
        /// Its mode now.
        now: OperatorStateMode,
        /// Its recorded mode.
        registered: OperatorStateMode,
    },
    /// A list operation on an operator state that is not a list.
    #[error("{state:?} is not a list state")]
    NotAList {
        /// The state.
        state: String,
    },
    /// A broadcast operation on an operator state that is not broadcast.
    #[error("{state:?} is not a broadcast state")]
    NotBroadcast {
        /// The state.
        state: String,
    },
}

impl Incompatibility {
    /// What kind of failure this is: always the caller's.
    pub fn kind(&self) -> ErrorKind {
        ErrorKind::Caller
    }
}

impl HasErrorKind for Incompatibility {
    fn kind(&self) -> ErrorKind {
        ErrorKind::Caller
    }
}

/// Why a snapshot or stream failed to read or write ([`StateError::Stream`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StreamProblem {
    /// A file a snapshot names is not a regular file (a FIFO, a device, a directory).
    #[error("{file}: is {found}, not a regular file")]
    NotAFile {
        /// The file.
        file: String,
        /// What it is.
        found: String,
    },
    /// A file a native snapshot lists was never uploaded.
    #[error("{path}: not uploaded")]
    NotUploaded {
        /// The file.
        path: String,
    },
    /// A key found in an input key group its key-group rule does not map to: damage (a
    /// rescale by splitting would otherwise lose it).
    #[error("key group {key_group} (max parallelism {max_parallelism}) holds a key of key group {belongs}: the input is damaged")]
    MisplacedKey {
        /// The key group read.
        key_group: u32,
        /// Its max parallelism.
        max_parallelism: u32,
        /// The key group the key belongs to.
        belongs: u32,
    },
    /// A record of a sort's run does not decode (a damaged spill file).
    #[error("re-bucketing: a record of key group {key_group} does not decode")]
    UndecodableRunRecord {
        /// The key group being read.
        key_group: u32,
    },
    /// A worker thread panicked (`what`: which work, e.g. "a re-bucketing").
    #[error("{what} thread panicked")]
    ThreadPanicked {
        /// Which work the thread did.
        what: &'static str,
    },
    /// A form of native snapshot statekit does not read.
    #[error("native snapshot of subtask {subtask}: {reason}")]
    UnsupportedNative {
        /// The subtask.
        subtask: u32,
        /// What the reader of RocksDB's files does not support.
        reason: String,
    },
    /// A reader of another format failed to decode a stream (damage where it is read; the
    /// boxed error says its own kind).
    #[error("{0}")]
    Reader(Box<dyn KindedError>),
}

impl StreamProblem {
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            // A native form statekit cannot read is reported like damage where it is read (a
            // walk names that subtask's key groups and goes on), as it always was.
            StreamProblem::NotAFile { .. }
            | StreamProblem::NotUploaded { .. }
            | StreamProblem::MisplacedKey { .. }
            | StreamProblem::UndecodableRunRecord { .. }
            | StreamProblem::UnsupportedNative { .. } => ErrorKind::Corrupt,
            StreamProblem::ThreadPanicked { .. } => ErrorKind::Internal,
            // A stream another format's reader cannot decode is damage where it is read: a
            // walk reports that key group and goes on (the reader's own kind stays on the
            // boxed error for callers that ask it).
            StreamProblem::Reader(_) => ErrorKind::Corrupt,
        }
    }
}

impl HasErrorKind for StreamProblem {
    fn kind(&self) -> ErrorKind {
        StreamProblem::kind(self)
    }
}

/// Why restore input does not fit a backend ([`StateError::Restore`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RestoreError {
    /// An entry that does not fit its state ([`crate::stream::check_entry_shape`]; boxed:
    /// state results stay small).
    #[error("{0}")]
    Entry(Box<EntryProblem>),
    /// A view of another max parallelism than the backend's.
    #[error("view has max parallelism {view} but this backend has {backend}")]
    MaxParallelism {
        /// The view's.
        view: u32,
        /// The backend's.
        backend: u32,
    },
    /// An entry in the data of another key group than its key's.
    #[error("entry of key group {key_group} has a key that belongs to key group {actual}")]
    ForeignKey {
        /// The group it was filed under.
        key_group: u32,
        /// The group its key belongs to.
        actual: u32,
    },
    /// An entry of a state index the view does not list.
    #[error("entry of unknown state {state}")]
    UnknownEntryState {
        /// The entry's state index.
        state: u32,
    },
    /// A map state's entry without its user key.
    #[error("map state {state:?} entry without user key")]
    NoUserKey {
        /// The state.
        state: String,
    },
    /// A state the backend has not registered (by its name).
    #[error("state {state:?} is not registered")]
    NotRegistered {
        /// The state.
        state: String,
    },
    /// A state index the backend has not registered.
    #[error("state {state} is not registered")]
    IndexNotRegistered {
        /// The state index.
        state: usize,
    },
    /// A native restore into a backend that already has states.
    #[error("a native restore needs a fresh backend (states are already registered)")]
    NotFresh,
    /// A helper thread of the restore panicked (a bug).
    #[error("a {thread} thread panicked")]
    Panicked {
        /// Which (`bulk-load`).
        thread: &'static str,
    },
    /// One of the parallel file transfers failed without an error of its own.
    #[error("a transfer failed")]
    TransferFailed,
    /// A file that changed since its checksum was taken.
    #[error(
        "{file}: CRC32 {crc:#010x} differs from {recorded:#010x}, taken when the file was written: it changed since"
    )]
    ChangedSinceWritten {
        /// The file.
        file: String,
        /// Its CRC32 now.
        crc: u32,
        /// The CRC32 taken when it was written.
        recorded: u32,
    },
    /// Native state of another backend.
    #[error("subtask {subtask}: native state of backend {backend:?} cannot be read by the RocksDB backend")]
    NativeBackend {
        /// The subtask.
        subtask: u32,
        /// The backend that wrote it.
        backend: String,
    },
    /// Native state of another layout.
    #[error("subtask {subtask}: native layout {layout:?} is not {expected:?} (written by another statekit version?)")]
    NativeLayout {
        /// The subtask.
        subtask: u32,
        /// Its layout.
        layout: String,
        /// The layout this backend reads.
        expected: &'static str,
    },
    /// Native or changelog state of another max parallelism.
    #[error("subtask {subtask}: native state has max parallelism {snapshot} but the backend has {backend}")]
    NativeMaxParallelism {
        /// The subtask.
        subtask: u32,
        /// The state's.
        snapshot: u32,
        /// The backend's.
        backend: u32,
    },
    /// A native handle without a `CURRENT` file.
    #[error("subtask {subtask}: native handle lists no CURRENT file")]
    NoCurrentFile {
        /// The subtask.
        subtask: u32,
    },
    /// A native file whose CRC32 is not the recorded one.
    #[error(transparent)]
    NativeChecksum(NativeChecksum),
    /// A native file whose size is not the recorded one.
    #[error("{file}: native file {name:?} has {size} bytes but _metadata records {recorded} ({})", if size < recorded { "truncated" } else { "trailing data" })]
    NativeSize {
        /// The file, as its storage shows it.
        file: String,
        /// Its name in the handle.
        name: String,
        /// Its size.
        size: u64,
        /// The recorded size.
        recorded: u64,
    },
    /// An SST file whose size is not what was written.
    #[error("SST file {}: {hashed} bytes hashed while writing it, but it has {size}", path.display())]
    SstSize {
        /// The file.
        path: std::path::PathBuf,
        /// The bytes written.
        hashed: u64,
        /// Its size now.
        size: u64,
    },
    /// A write without a database (a bug).
    #[error("{what} without a database")]
    NoDatabase {
        /// `a write batch` or `an ingestion`.
        what: &'static str,
    },
    /// No SST writer for a state (a bug).
    #[error("no SST writer slot for state {state}")]
    NoSstSlot {
        /// The state index.
        state: usize,
    },
    /// Changelog state of another max parallelism.
    #[error("subtask {subtask}: changelog state of max parallelism {snapshot} into a backend of {backend}")]
    ChangelogMaxParallelism {
        /// The subtask.
        subtask: u32,
        /// The state's.
        snapshot: u32,
        /// The backend's.
        backend: u32,
    },
    /// A change of a state no metadata record declared.
    #[error("a change of state {state} that no metadata record declared")]
    UndeclaredState {
        /// The change's state id.
        state: u32,
    },
    /// Two rows with one key (a state that holds one value per key).
    #[error("state {state:?}, key group {key_group}: two rows for one key (key 0x{})", hex(key))]
    DuplicateKey {
        /// The state.
        state: String,
        /// The key group.
        key_group: u32,
        /// The key.
        key: Vec<u8>,
    },
    /// An operator state of another mode in two subtasks.
    #[error("operator state {state:?} is {first} in one subtask and {other} in another")]
    OperatorStateModes {
        /// The state.
        state: String,
        /// Its mode in one.
        first: OperatorStateMode,
        /// Its mode in the other.
        other: OperatorStateMode,
    },
}

impl From<EntryProblem> for RestoreError {
    fn from(e: EntryProblem) -> Self {
        RestoreError::Entry(Box::new(e))
    }
}

/// Lower-case hex of `bytes`.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl RestoreError {
    /// What kind of failure this is: restore input that does not fit is the caller's
    /// (a helper thread's panic is a bug).
    pub fn kind(&self) -> ErrorKind {
        match self {
            RestoreError::Panicked { .. } => ErrorKind::Internal,
            _ => ErrorKind::Caller,
        }
    }
}

impl HasErrorKind for RestoreError {
    fn kind(&self) -> ErrorKind {
        RestoreError::kind(self)
    }
}

/// A native file whose CRC32 is not the one its handle records (found on restore,
/// [`RestoreError::NativeChecksum`], or by a verify).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{file}: native file {name:?}: checksum mismatch: recorded {recorded:#010x}, computed {computed:#010x}")]
pub struct NativeChecksum {
    /// The file, as its storage shows it.
    pub file: String,
    /// Its name in the handle.
    pub name: String,
    /// The recorded CRC32.
    pub recorded: u32,
    /// The CRC32 computed.
    pub computed: u32,
}

impl NativeChecksum {
    /// The one check of a native file's CRC32: `computed` against the `recorded` one of the
    /// file `name` (shown as `file`).
    ///
    /// ```
    /// use statekit_core::error::NativeChecksum;
    /// assert!(NativeChecksum::check("f", "000001.sst", 7, 7).is_ok());
    /// let e = NativeChecksum::check("f", "000001.sst", 7, 8).unwrap_err();
    /// assert_eq!(e.to_string(), r#"f: native file "000001.sst": checksum mismatch: recorded 0x00000007, computed 0x00000008"#);
    /// ```
    pub fn check(file: &str, name: &str, recorded: u32, computed: u32) -> Result<(), NativeChecksum> {
        if computed == recorded {
            return Ok(());
        }
        Err(NativeChecksum {
            file: file.to_string(),
            name: name.to_string(),
            recorded,
            computed,
        })
    }
}

/// How an entry does not fit its state's descriptor.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EntryProblem {
    /// A state index past the states.
    #[error("entry names state index {index} but there are {states}")]
    StateIndex {
        /// The entry's state index.
        index: u32,
        /// How many states there are.
        states: usize,
    },
    /// A user key on an entry of a state other than a map, or none on a map's.
    #[error("state {state:?} ({kind}) entry {} a user key", if *has { "has" } else { "lacks" })]
    UserKey {
        /// The state.
        state: String,
        /// Its kind.
        kind: KeyedStateKind,
        /// Whether the entry has one.
        has: bool,
    },
    /// A timestamp on an entry of a state without TTL, or none on a TTL'd state's.
    #[error("state {state:?} entry {} a TTL timestamp", if *has { "has" } else { "lacks" })]
    Timestamp {
        /// The state.
        state: String,
        /// Whether the entry has one.
        has: bool,
    },
    /// A part that does not decode by its schema.
    #[error("state {state:?}: the {part} does not decode as {schema}: offset {}: {}", decode.offset, decode.reason)]
    Undecodable {
        /// The state.
        state: String,
        /// `key`, `namespace`, `user key` or `value`.
        part: &'static str,
        /// Its schema.
        schema: TypeSchema,
        /// The decoder's error (its offset in the part and reason; boxed: entry checks stay
        /// small).
        decode: Box<crate::schema::ValueDecodeError>,
    },
}

impl EntryProblem {
    /// What kind of failure this is: bytes that do not fit their state are corrupt.
    pub fn kind(&self) -> ErrorKind {
        ErrorKind::Corrupt
    }
}

impl HasErrorKind for EntryProblem {
    fn kind(&self) -> ErrorKind {
        ErrorKind::Corrupt
    }
}

/// Why a parallelism, max parallelism or subtask index does not fit.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParallelismError {
    /// The max parallelism is 0 or above the upper bound.
    #[error("max parallelism {max_parallelism} is outside 1..={upper_bound}")]
    MaxParallelism {
        /// The max parallelism given.
        max_parallelism: u32,
        /// The largest accepted ([`crate::UPPER_BOUND_MAX_PARALLELISM`]).
        upper_bound: u32,
    },
    /// The parallelism is 0 or above the max parallelism.
    #[error("parallelism {parallelism} is outside 1..={max_parallelism} (the max parallelism)")]
    Parallelism {
        /// The parallelism given.
        parallelism: u32,
        /// The max parallelism it must not exceed.
        max_parallelism: u32,
    },
    /// A subtask index at or past the parallelism.
    #[error("subtask index {index} is not below parallelism {parallelism}")]
    SubtaskIndex {
        /// The index given.
        index: u32,
        /// The parallelism.
        parallelism: u32,
    },
    /// A backend's key-group range reaches past the max parallelism.
    #[error("key-group range {range} exceeds max parallelism {max_parallelism}")]
    RangeExceedsMax {
        /// The backend's range.
        range: KeyGroupRange,
        /// The max parallelism.
        max_parallelism: u32,
    },
    /// Operator state redistributed to no subtask.
    #[error("new parallelism must be at least 1")]
    ZeroNewParallelism,
}

/// Errors from backends and the state model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// A parallelism or max parallelism is out of bounds.
    #[error("invalid parallelism: {0}")]
    InvalidParallelism(ParallelismError),
    /// No state with this handle or name is registered.
    #[error("unknown state {0}")]
    UnknownState(String),
    /// The operation does not fit the state's kind.
    #[error("state {state:?} is a {actual} state; the operation needs {expected}")]
    WrongKind {
        /// State name.
        state: String,
        /// What the operation needs.
        expected: &'static str,
        /// The state's kind.
        actual: KeyedStateKind,
    },
    /// A state was registered again with an incompatible descriptor.
    #[error("incompatible state registration: {0}")]
    Incompatible(Incompatibility),
    /// A reducing or aggregating state is used before its function was registered.
    #[error("state {0:?} has no reduce/aggregate function registered")]
    MissingFunction(String),
    /// The key belongs to a key group this backend does not own.
    #[error("key group {key_group} of the key is outside this backend's range {range}")]
    KeyGroupOutOfRange {
        /// The key's group.
        key_group: u32,
        /// The backend's range.
        range: KeyGroupRange,
    },
    /// Restore input does not fit this backend.
    #[error("cannot restore: {0}")]
    Restore(RestoreError),
    /// A snapshot or stream failed to read or write.
    #[error("snapshot I/O: {0}")]
    Snapshot(String),
    /// A snapshot or stream failed to read or write, for a reason the library names.
    #[error("snapshot I/O: {0}")]
    Stream(StreamProblem),
    /// An I/O error.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, with the path.
        context: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Any other error from a component behind the trait (a format reader, a storage): a
    /// library error that says its own kind ([`KindedError`]; downcast it to inspect it).
    #[error(transparent)]
    Other(Box<dyn KindedError>),
}

impl HasErrorKind for StateError {
    fn kind(&self) -> ErrorKind {
        StateError::kind(self)
    }
}

impl HasErrorKind for crate::storage::StorageError {
    fn kind(&self) -> ErrorKind {
        crate::storage::StorageError::kind(self)
    }
}

impl ParallelismError {
    /// What kind of failure this is: always the caller's.
    pub fn kind(&self) -> ErrorKind {
        ErrorKind::Caller
    }
}

impl HasErrorKind for ParallelismError {
    fn kind(&self) -> ErrorKind {
        ErrorKind::Caller
    }
}

impl StateError {
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            StateError::InvalidParallelism(_)
            | StateError::UnknownState(_)
            | StateError::WrongKind { .. }
            | StateError::Incompatible(_)
            | StateError::MissingFunction(_)
            | StateError::KeyGroupOutOfRange { .. }
            | StateError::Restore(_) => ErrorKind::Caller,
            StateError::Snapshot(_) => ErrorKind::Corrupt,
            StateError::Stream(p) => p.kind(),
            StateError::Io { source, .. } => ErrorKind::of_io(source),
            StateError::Other(e) => e.kind(),
        }
    }

    /// The operation needs one of the kinds `expected` names
    /// ([`crate::state::accepts`]), but `desc` is another.
    #[cold]
    #[inline(never)]
    pub fn wrong_kind(desc: &crate::StateDescriptor, expected: &'static str) -> Self {
        StateError::WrongKind {
            state: desc.name.clone(),
            expected,
            actual: desc.kind,
        }
    }

    /// Wraps an I/O error with context.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        StateError::Io {
            context: context.into(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error of a crate above this one, as a format reader's.
    #[derive(Debug, thiserror::Error)]
    #[error("damaged block")]
    struct Damaged;

    impl HasErrorKind for Damaged {
        fn kind(&self) -> ErrorKind {
            ErrorKind::Corrupt
        }
    }

    /// A wrapper whose cause is a boxed statekit error.
    #[derive(Debug, thiserror::Error)]
    #[error("reading: {0}")]
    struct Reading(#[source] StateError);

    #[test]
    fn a_boxed_error_keeps_its_kind_without_a_registry() {
        let e = StateError::Other(Box::new(Damaged));
        assert_eq!(e.kind(), ErrorKind::Corrupt);
        assert_eq!(e.to_string(), "damaged block");
        let StateError::Other(inner) = &e else { panic!("{e:?}") };
        assert!(inner.downcast_ref::<Damaged>().is_some());
        assert!(inner.is::<Damaged>());
        assert!(!inner.is::<std::io::Error>());
        // Found in a source chain too.
        assert_eq!(ErrorKind::of_dyn(&Reading(e)), ErrorKind::Corrupt);
        let io = std::io::Error::new(std::io::ErrorKind::TimedOut, "slow");
        assert_eq!(ErrorKind::of_dyn(&io), ErrorKind::Transient);
        assert_eq!(ErrorKind::of_dyn(&std::fmt::Error), ErrorKind::Internal);
    }

    #[test]
    fn typed_causes_keep_their_messages() {
        let e = StateError::InvalidParallelism(ParallelismError::SubtaskIndex {
            index: 4,
            parallelism: 4,
        });
        assert_eq!(
            e.to_string(),
            "invalid parallelism: subtask index 4 is not below parallelism 4"
        );
        assert_eq!(e.kind(), ErrorKind::Caller);
        let e = StateError::Restore(RestoreError::DuplicateKey {
            state: "s".into(),
            key_group: 3,
            key: vec![0x0a, 0xff],
        });
        assert_eq!(
            e.to_string(),
            "cannot restore: state \"s\", key group 3: two rows for one key (key 0x0aff)"
        );
        let e = EntryProblem::UserKey {
            state: "m".into(),
            kind: KeyedStateKind::Value,
            has: true,
        };
        assert_eq!(e.to_string(), "state \"m\" (value) entry has a user key");
        assert_eq!(StateError::Restore(e.into()).kind(), ErrorKind::Caller);
    }
}
