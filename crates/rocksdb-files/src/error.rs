//! Typed errors of reading RocksDB's files.

/// What went wrong reading a RocksDB file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Bytes that do not decode as RocksDB writes them: truncated, bit-flipped, a checksum
    /// that does not match, a length or offset past the end of the file, keys out of order.
    #[error("{file}: offset {offset}: {field}: {reason}")]
    Corrupt {
        /// The file being read.
        file: String,
        /// Byte offset in it where the bad field starts (in a block: the block's offset).
        offset: u64,
        /// The field being read.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// Well-formed data this reader does not handle (a compression type, a comparator, a
    /// table feature), or a limit of [`crate::Limits`] exceeded.
    #[error("{file}: offset {offset}: {field}: unsupported: {what}")]
    Unsupported {
        /// The file being read.
        file: String,
        /// Byte offset of the field.
        offset: u64,
        /// The field being read.
        field: String,
        /// What is not supported.
        what: String,
    },
    /// A file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
}

/// The class of an [`Error`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Damaged data.
    Corrupt,
    /// Data (or a size) this reader does not handle.
    Unsupported,
    /// The file system failed.
    Io,
}

impl Error {
    /// Whether the data is damaged, unsupported, or could not be read.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Corrupt { .. } => ErrorKind::Corrupt,
            Error::Unsupported { .. } => ErrorKind::Unsupported,
            Error::Io { .. } => ErrorKind::Io,
        }
    }

    /// The file the error is about.
    pub fn file(&self) -> &str {
        match self {
            Error::Corrupt { file, .. } | Error::Unsupported { file, .. } => file,
            Error::Io { path, .. } => path,
        }
    }

    pub(crate) fn corrupt(file: &str, offset: u64, field: impl Into<String>, reason: impl Into<String>) -> Error {
        Error::Corrupt {
            file: file.to_string(),
            offset,
            field: field.into(),
            reason: reason.into(),
        }
    }

    pub(crate) fn unsupported(file: &str, offset: u64, field: impl Into<String>, what: impl Into<String>) -> Error {
        Error::Unsupported {
            file: file.to_string(),
            offset,
            field: field.into(),
            what: what.into(),
        }
    }
}

/// Result of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
