//! Errors of the RocksDB backend, carried inside [`StateError::Other`].

use statekit_core::{ErrorKind, HasErrorKind, StateError};

/// What went wrong below the [`KeyedStateBackend`](statekit_core::KeyedStateBackend) trait.
/// Backend methods return it wrapped in [`StateError::Other`]; downcast to inspect it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RocksDbError {
    /// RocksDB itself reported an error.
    #[error("rocksdb {context}: {}", tidy(source.as_ref()))]
    Db {
        /// What the backend was doing.
        context: String,
        /// RocksDB's error.
        #[source]
        source: rocksdb::Error,
    },
    /// Stored bytes do not follow the layout of `docs/rocksdb-layout.md`.
    #[error("corrupt RocksDB state: {0}")]
    Corrupt(Box<Corruption>),
    /// The backend was disposed of; it cannot be used any more.
    #[error("the RocksDB backend was disposed of")]
    Disposed,
    /// A helper thread of the backend panicked (a bug).
    #[error("the {thread} thread panicked")]
    ThreadPanicked {
        /// Which thread (`"memtable flush"`).
        thread: &'static str,
    },
    /// Reading a native snapshot's RocksDB files failed below their contents (the file
    /// system): neither damage nor an unsupported feature, which are reported as such.
    #[error(transparent)]
    NativeFiles {
        /// The file reader's error.
        #[from]
        source: statekit_rocksdb_files::Error,
    },
}

/// How stored RocksDB state (or a native snapshot of it) does not follow the layout of
/// `docs/rocksdb-layout.md` ([`RocksDbError::Corrupt`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Corruption {
    /// A column family the database listed is gone.
    #[error("column family {name:?} vanished")]
    ColumnFamilyVanished {
        /// Its name.
        name: String,
    },
    /// A column family of a native snapshot without a state in `_metadata`.
    #[error("subtask {subtask}: column family {column_family:?} has no state descriptor in _metadata")]
    NoDescriptor {
        /// The subtask.
        subtask: u32,
        /// The column family.
        column_family: String,
    },
    /// A state without its column family.
    #[error("no column family for state {state:?}")]
    NoColumnFamily {
        /// The state.
        state: String,
    },
    /// A native file whose CRC32 is not the recorded one.
    #[error(transparent)]
    NativeChecksum(statekit_core::error::NativeChecksum),
    /// Damage the native file reader found.
    #[error("native snapshot of subtask {subtask}: {error}")]
    NativeFiles {
        /// The subtask.
        subtask: u32,
        /// The reader's error.
        error: statekit_rocksdb_files::Error,
    },
    /// A key shorter than its key-group prefix.
    #[error("key of {len} bytes has no key-group prefix")]
    NoKeyGroupPrefix {
        /// The key's length.
        len: usize,
    },
    /// A key's key or namespace part without its terminator.
    #[error("{part} part of a stored key is not terminated")]
    Unterminated {
        /// `key` or `namespace`.
        part: &'static str,
    },
    /// A TTL'd value shorter than its timestamp.
    #[error("TTL value of {len} bytes is shorter than its timestamp")]
    ShortTtlValue {
        /// The value's length.
        len: usize,
    },
    /// A LEB128 length cut off.
    #[error("length is cut off")]
    LengthCutOff,
    /// A LEB128 length past 64 bits.
    #[error("length overflows 64 bits")]
    LengthOverflow,
    /// A TTL'd list element shorter than its timestamp.
    #[error("list element shorter than its timestamp")]
    ShortElement,
    /// A list element longer than the rest of the value.
    #[error("list element of {len} bytes runs past the value")]
    ElementPastValue {
        /// The element's length.
        len: u64,
    },
    /// An empty list merge operand.
    #[error("empty list merge operand")]
    EmptyOperand,
    /// A list merge operand longer than the rest.
    #[error("list merge operand runs past its end")]
    OperandPastEnd,
    /// A list merge operand of an unknown tag or shape.
    #[error("bad list merge operand (tag {tag}, {len} bytes)")]
    BadOperand {
        /// Its tag.
        tag: u8,
        /// Its length.
        len: u64,
    },
    /// A native subtask's key outside the subtask's key groups.
    #[error("subtask {subtask}: state {state:?} holds key group {key_group}, outside the subtask's range {range}")]
    OutsideRange {
        /// The subtask.
        subtask: u32,
        /// The state.
        state: String,
        /// The key's group.
        key_group: u32,
        /// The subtask's key groups.
        range: statekit_core::KeyGroupRange,
    },
    /// A native subtask's entry that does not decode by its schemas.
    #[error("subtask {subtask}: entry {index} in key-group order: {problem}")]
    Entry {
        /// The subtask.
        subtask: u32,
        /// The entry's index in key-group order.
        index: u64,
        /// What is wrong with it.
        problem: statekit_core::EntryProblem,
    },
    /// A key of another key group inside a key group's range.
    #[error("state {state:?}: key of key group {found} inside the range of key group {key_group}")]
    ForeignKeyGroup {
        /// The state.
        state: String,
        /// The key's group.
        found: u32,
        /// The group being read.
        key_group: u32,
    },
    /// Bytes after the namespace of a key of a state other than a map.
    #[error("state {state:?}: {len} bytes after the namespace of a {kind} state's key")]
    BytesAfterNamespace {
        /// The state.
        state: String,
        /// How many.
        len: usize,
        /// The state's kind.
        kind: statekit_core::KeyedStateKind,
    },
}

impl Corruption {
    /// What kind of failure this is: damaged data.
    pub fn kind(&self) -> ErrorKind {
        ErrorKind::Corrupt
    }
}

impl HasErrorKind for Corruption {
    fn kind(&self) -> ErrorKind {
        ErrorKind::Corrupt
    }
}

impl From<Corruption> for RocksDbError {
    fn from(c: Corruption) -> Self {
        RocksDbError::Corrupt(Box::new(c))
    }
}

impl From<Corruption> for StateError {
    fn from(c: Corruption) -> Self {
        RocksDbError::from(c).into()
    }
}

/// RocksDB's message without a status word it repeats (`Corruption: Corruption: IO error: …`
/// reads `Corruption: IO error: …`).
fn tidy(message: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in message.split(": ") {
        if parts.last() != Some(&part) {
            parts.push(part);
        }
    }
    parts.join(": ")
}

impl RocksDbError {
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            RocksDbError::Db { source, .. } => {
                use rocksdb::ErrorKind as K;
                match source.kind() {
                    K::Corruption => ErrorKind::Corrupt,
                    K::NotFound => ErrorKind::NotFound,
                    K::NotSupported => ErrorKind::Unsupported,
                    K::InvalidArgument | K::ColumnFamilyDropped => ErrorKind::Caller,
                    K::IOError
                    | K::Incomplete
                    | K::TimedOut
                    | K::Aborted
                    | K::Busy
                    | K::Expired
                    | K::TryAgain
                    | K::MergeInProgress
                    | K::ShutdownInProgress => ErrorKind::Transient,
                    _ => ErrorKind::Internal,
                }
            }
            RocksDbError::Corrupt(_) => ErrorKind::Corrupt,
            RocksDbError::Disposed => ErrorKind::Caller,
            RocksDbError::ThreadPanicked { .. } => ErrorKind::Internal,
            RocksDbError::NativeFiles { source } => match source.kind() {
                statekit_rocksdb_files::ErrorKind::Corrupt => ErrorKind::Corrupt,
                statekit_rocksdb_files::ErrorKind::Unsupported => ErrorKind::Unsupported,
                _ => std::error::Error::source(source)
                    .and_then(|e| e.downcast_ref::<std::io::Error>())
                    .map_or(ErrorKind::Internal, ErrorKind::of_io),
            },
        }
    }
}

impl HasErrorKind for RocksDbError {
    fn kind(&self) -> ErrorKind {
        RocksDbError::kind(self)
    }
}

impl From<RocksDbError> for StateError {
    fn from(e: RocksDbError) -> Self {
        StateError::Other(Box::new(e))
    }
}

/// Wraps a RocksDB error with what was being done.
pub(crate) fn db_err(context: impl Into<String>) -> impl FnOnce(rocksdb::Error) -> StateError {
    move |source| {
        RocksDbError::Db {
            context: context.into(),
            source,
        }
        .into()
    }
}

#[cfg(test)]
mod error_tests {
    #[test]
    fn repeated_status_words_are_said_once() {
        assert_eq!(
            super::tidy("Corruption: Corruption: IO error: x.sst: bad block"),
            "Corruption: IO error: x.sst: bad block"
        );
        assert_eq!(super::tidy("IO error: a: b"), "IO error: a: b");
    }
}
