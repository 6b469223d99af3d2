//! Typed errors of reading Flink's files.

use statekit_core::ErrorKind;

/// What went wrong reading a Flink snapshot.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FlinkError {
    /// Bytes that do not decode as Flink wrote them: truncated, bit-flipped, or inconsistent.
    #[error("{}offset {offset}: {field}: {reason}", file_prefix(file))]
    Corrupt {
        /// The file (or `_metadata`) being read.
        file: String,
        /// Byte offset in it where the bad field starts.
        offset: u64,
        /// The field being read.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// Well-formed data this reader does not handle (a format version, a handle kind).
    #[error("{}offset {offset}: {field}: unsupported: {what}", file_prefix(file))]
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
    /// The heap layout's values with no length (Kryo, Avro, a user's serializer) are found
    /// by a search for where each ends; it spent its budget (proportional to the size of the
    /// key group's part and of the whole stream) before proving the split. The bytes may be
    /// sound; reading them would cost more than their size warrants.
    #[error("{0}")]
    SearchBudget(Box<BudgetSpent>),
    /// The path is not a Flink snapshot.
    #[error("{path}: not a Flink snapshot: {reason}")]
    NotFlink {
        /// The path given.
        path: String,
        /// Why not.
        reason: String,
    },
    /// A file handle that leads outside what the snapshot may read: a savepoint's outside its
    /// directory, a checkpoint's outside its job directory, its job's changelog directory
    /// and the places named with `--flink-root` (on an object store: another bucket or
    /// prefix). The file it names is not opened.
    #[error("{metadata}: file handle {handle:?} is outside the snapshot: {rule}")]
    Outside {
        /// The `_metadata` file holding the handle.
        metadata: String,
        /// The handle's path as `_metadata` records it.
        handle: String,
        /// Why it is refused: what is wrong with it and the rule it breaks.
        rule: String,
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

/// Where and why a search for the end of values without a length (Flink's heap layout) spent
/// its budget ([`FlinkError::SearchBudget`]; boxed: the error stays small).
#[derive(Debug)]
pub struct BudgetSpent {
    /// The stream's file.
    pub file: String,
    /// Where the first value with no length of the key group's part starts.
    pub offset: u64,
    /// The state (`state "name"`).
    pub field: String,
    /// The key group.
    pub key_group: u32,
    /// The values' serializer.
    pub class: String,
    /// The trials the budget held.
    pub trials: u64,
    /// What the budget was for (the key group's part, or the whole stream).
    pub scope: String,
}

impl std::fmt::Display for BudgetSpent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: offset {}: {}: key group {}: the search for where values of {} end (they have no length in the heap layout) spent its budget of {} trials for {}; a canonical savepoint of the job has lengths",
            self.file, self.offset, self.field, self.key_group, self.class, self.trials, self.scope
        )
    }
}

/// `file: `, or nothing for bytes of no file of their own (a record inside a stream whose
/// file the caller names), so no message reads `: offset …`.
fn file_prefix(file: &str) -> String {
    if file.is_empty() {
        String::new()
    } else {
        format!("{file}: ")
    }
}

impl FlinkError {
    /// Whether the data is damaged, needs another reader, the call was wrong, or a retry
    /// may help.
    pub fn kind(&self) -> ErrorKind {
        match self {
            FlinkError::Corrupt { .. } => ErrorKind::Corrupt,
            FlinkError::Unsupported { .. } | FlinkError::SearchBudget(_) => ErrorKind::Unsupported,
            FlinkError::NotFlink { .. } => ErrorKind::Caller,
            // A reference the snapshot may not follow: damaged or hostile data (or a moved
            // checkpoint whose new place `--flink-root` should name).
            FlinkError::Outside { .. } => ErrorKind::Corrupt,
            FlinkError::Io { source, .. } => match source.kind() {
                std::io::ErrorKind::NotFound => ErrorKind::NotFound,
                std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::InvalidInput => ErrorKind::Caller,
                _ => ErrorKind::Transient,
            },
        }
    }
}

impl statekit_core::HasErrorKind for FlinkError {
    fn kind(&self) -> statekit_core::ErrorKind {
        FlinkError::kind(self)
    }
}

impl FlinkError {
    /// The problem in the format layer's words (file, offset, field, reason), as `verify`
    /// lists the problems of every family.
    pub fn into_problem(self) -> statekit_format::FormatError {
        use FlinkError as F;
        match self {
            F::Corrupt {
                file,
                offset,
                field,
                reason,
            } => statekit_format::FormatError::Corrupt {
                file,
                offset,
                field,
                reason,
            },
            F::Unsupported {
                file,
                offset,
                field,
                what,
            } => statekit_format::FormatError::Corrupt {
                file,
                offset,
                field,
                reason: format!("unsupported: {what}"),
            },
            F::Outside { metadata, handle, rule } => statekit_format::FormatError::Corrupt {
                file: metadata,
                offset: 0,
                field: "file handle".into(),
                reason: format!("{handle:?} is outside the snapshot: {rule}"),
            },
            other => {
                let (file, reason) = match &other {
                    F::Io { path, source } => (path.clone(), source.to_string()),
                    F::NotFlink { path, reason } => (path.clone(), reason.clone()),
                    _ => (String::new(), other.to_string()),
                };
                statekit_format::FormatError::Corrupt {
                    file,
                    offset: 0,
                    field: "file".into(),
                    reason,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::FlinkError;

    #[test]
    fn bytes_of_no_file_read_without_an_empty_file_name() {
        let e = FlinkError::Corrupt {
            file: String::new(),
            offset: 3,
            field: "value".into(),
            reason: "too short".into(),
        };
        assert_eq!(e.to_string(), "offset 3: value: too short");
        let e = FlinkError::Corrupt {
            file: "f".into(),
            offset: 3,
            field: "value".into(),
            reason: "too short".into(),
        };
        assert_eq!(e.to_string(), "f: offset 3: value: too short");
    }
}
