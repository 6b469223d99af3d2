//! The errors of building tables.

use statekit_core::ErrorKind;

/// What can go wrong turning state into tables.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    /// A stored key, namespace, user key or value does not decode by the state's schema.
    #[error("state {state:?}, key group {key_group}, row {row}: column {column}: {reason}")]
    Undecodable {
        /// The state.
        state: String,
        /// The entry's key group.
        key_group: u32,
        /// The row within the state's table (counted from 0 over every batch).
        row: u64,
        /// The column (`key`, `namespace`, `user_key` or `value`).
        column: &'static str,
        /// Why.
        reason: String,
    },
    /// Arrow refused the arrays built (a bug of this crate, reported rather than a panic).
    #[error("state {state:?}: building an Arrow batch: {source}")]
    Arrow {
        /// The state.
        state: String,
        /// Arrow's error.
        #[source]
        source: arrow_schema::ArrowError,
    },
}

impl TableError {
    /// What kind of failure this is: undecodable bytes are corrupt data (or a schema that
    /// does not describe them); an Arrow failure is this crate's own.
    pub fn kind(&self) -> ErrorKind {
        match self {
            TableError::Undecodable { .. } => ErrorKind::Corrupt,
            TableError::Arrow { .. } => ErrorKind::Internal,
        }
    }
}
