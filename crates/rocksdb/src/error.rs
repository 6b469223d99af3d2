//! Errors of the RocksDB backend, carried inside [`StateError::Other`].

use statekit_core::StateError;

/// What went wrong below the [`KeyedStateBackend`](statekit_core::KeyedStateBackend) trait.
/// Backend methods return it wrapped in [`StateError::Other`]; downcast to inspect it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RocksDbError {
    /// RocksDB itself reported an error.
    #[error("rocksdb {context}: {source}")]
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
