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
    Corrupt(String),
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
