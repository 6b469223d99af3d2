//! The error type of the state model and backends.

use crate::keygroup::KeyGroupRange;
use crate::state::KeyedStateKind;

/// Errors from backends and the state model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// A parallelism or max parallelism is out of bounds.
    #[error("invalid parallelism: {0}")]
    InvalidParallelism(String),
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
    Incompatible(String),
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
    Restore(String),
    /// A snapshot or stream failed to read or write.
    #[error("snapshot I/O: {0}")]
    Snapshot(String),
    /// An I/O error.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, with the path.
        context: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Any other error from a component behind the trait (a format reader, a storage).
    #[error(transparent)]
    Other(Box<dyn std::error::Error + Send + Sync>),
}

impl StateError {
    /// Wraps an I/O error with context.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        StateError::Io {
            context: context.into(),
            source,
        }
    }
}
