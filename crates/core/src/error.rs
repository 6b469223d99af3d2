//! The error type of the state model and backends, and the [`ErrorKind`] every statekit
//! library error reports.

use crate::keygroup::KeyGroupRange;
use crate::state::KeyedStateKind;

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

    /// The kind of a boxed error from a component behind a trait: the first statekit error
    /// (or I/O error) found in its source chain tells; otherwise [`ErrorKind::Internal`].
    pub fn of_dyn(e: &(dyn std::error::Error + 'static)) -> ErrorKind {
        let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
        while let Some(err) = cur {
            if let Some(k) = classify_hook(err) {
                return k;
            }
            cur = err.source();
        }
        ErrorKind::Internal
    }
}

/// A function telling the [`ErrorKind`] of the error types of one crate (`None` for others).
pub type KindClassifier = fn(&(dyn std::error::Error + 'static)) -> Option<ErrorKind>;

static CLASSIFIERS: std::sync::RwLock<Vec<KindClassifier>> = std::sync::RwLock::new(Vec::new());

/// Registers `f` so [`ErrorKind::of_dyn`] (and so [`StateError::kind`] of a
/// [`StateError::Other`]) can tell the kind of a crate's own error types when they travel
/// boxed. Crates above `core` call it where their errors enter `StateError::Other`;
/// registering the same function twice is a no-op.
pub fn register_kind_classifier(f: KindClassifier) {
    let mut v = CLASSIFIERS.write().unwrap_or_else(|p| p.into_inner());
    if !v.iter().any(|g| std::ptr::fn_addr_eq(*g, f)) {
        v.push(f);
    }
}

fn classify_hook(err: &(dyn std::error::Error + 'static)) -> Option<ErrorKind> {
    if let Some(e) = err.downcast_ref::<StateError>() {
        return Some(e.kind());
    }
    if let Some(e) = err.downcast_ref::<crate::storage::StorageError>() {
        return Some(e.kind());
    }
    if let Some(e) = err.downcast_ref::<std::io::Error>() {
        return Some(ErrorKind::of_io(e));
    }
    let v = CLASSIFIERS.read().unwrap_or_else(|p| p.into_inner());
    v.iter().find_map(|f| f(err))
}

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
            StateError::Io { source, .. } => ErrorKind::of_io(source),
            StateError::Other(e) => ErrorKind::of_dyn(e.as_ref()),
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
