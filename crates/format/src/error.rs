//! The error type of the format crate.

use statekit_core::storage::StorageError;
use statekit_core::{ErrorKind, StateError};

/// Errors from encoding, decoding and verifying statekit files.
///
/// Every decoding error names the file (as [`statekit_core::storage::Storage::describe`] shows
/// it, or the name a caller passed), and [`FormatError::Corrupt`] also names the absolute byte
/// offset in that file and the field being read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    /// The bytes do not decode: a checksum mismatch, a length running past the end, a bad
    /// enum code, a size that disagrees with what `_metadata` recorded, …
    #[error("{file}: offset {offset}: {field}: {reason}")]
    Corrupt {
        /// The file.
        file: String,
        /// Absolute byte offset in the file where the bad field starts (for data inside a
        /// compressed block: the offset of the block header; the reason then names the
        /// position within the decompressed block).
        offset: u64,
        /// The field being read (e.g. `block.crc32`, `operators[1].subtasks[0].keyed.path`).
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The file is a statekit file of a version this build cannot read.
    #[error("{file}: unsupported format version {found} (this build reads {supported})")]
    UnsupportedVersion {
        /// The file.
        file: String,
        /// The version in the file.
        found: u32,
        /// The newest version this build reads.
        supported: u32,
    },
    /// The file does not start with the expected magic bytes.
    #[error("{file}: not a statekit {what} file (bad magic)")]
    BadMagic {
        /// The file.
        file: String,
        /// Which kind of file was expected (`metadata`, `keyed data`, `operator data`).
        what: &'static str,
    },
    /// The storage failed (file missing, I/O error, bad path).
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The state being written is unacceptable, or a visitor failed.
    #[error(transparent)]
    State(#[from] StateError),
    /// A reference cannot be followed (a shared file without a job directory, an absolute
    /// reference on a non-local storage).
    #[error("{scope} file {path:?}: {reason}")]
    Unresolvable {
        /// The reference's scope (`shared`, `absolute`).
        scope: &'static str,
        /// The path `_metadata` records.
        path: String,
        /// Why it cannot be followed.
        reason: String,
    },
}

impl FormatError {
    /// A [`FormatError::Corrupt`].
    pub fn corrupt(file: &str, offset: u64, field: impl Into<String>, reason: impl Into<String>) -> Self {
        FormatError::Corrupt {
            file: file.to_string(),
            offset,
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// An error about the input given to a writer (not about bytes on disk).
    pub(crate) fn invalid_input(reason: impl Into<String>) -> Self {
        FormatError::State(StateError::Snapshot(reason.into()))
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            FormatError::Corrupt { .. } | FormatError::BadMagic { .. } => ErrorKind::Corrupt,
            FormatError::UnsupportedVersion { .. } => ErrorKind::Unsupported,
            FormatError::Storage(e) => e.kind(),
            FormatError::State(e) => e.kind(),
            FormatError::Unresolvable { .. } => ErrorKind::Caller,
        }
    }

    /// The file the error names, when it names one.
    pub fn file(&self) -> Option<&str> {
        match self {
            FormatError::Corrupt { file, .. }
            | FormatError::UnsupportedVersion { file, .. }
            | FormatError::BadMagic { file, .. } => Some(file),
            _ => None,
        }
    }
}

impl statekit_core::HasErrorKind for FormatError {
    fn kind(&self) -> statekit_core::ErrorKind {
        FormatError::kind(self)
    }
}

/// Converts for [`statekit_core::KeyedStateView`] implementations: a [`FormatError::State`] is
/// unwrapped, anything else is boxed into [`StateError::Other`] (and can be recovered with
/// `downcast_ref::<FormatError>()`).
impl From<FormatError> for StateError {
    fn from(e: FormatError) -> Self {
        match e {
            FormatError::State(s) => s,
            other => StateError::Other(Box::new(other)),
        }
    }
}
