//! [`Problem`]: one thing wrong with a snapshot or a file, as verification lists it.

use crate::error::FormatError;
use statekit_core::storage::StorageError;
use statekit_core::ErrorKind;
use std::fmt;

/// One thing wrong with a snapshot, a data file or a log file, as the verifiers list it
/// (`statekit_snapshot::verify`, the changelog's tail walk, [`crate::verify_snapshot`]).
///
/// A problem names the file (as [`statekit_core::storage::Storage::describe`] shows it, or as
/// the caller named it; `_metadata` for the snapshot's metadata), the byte offset and the field
/// where the bad bytes start when they are known, what is wrong, and, when the file alone does
/// not say which part of the snapshot refers to it, where the reference sits (`operator
/// "counter", subtask 0, tail[3]`).
///
/// Its [`Display`](fmt::Display) is the one line `statekit verify` prints:
/// `file: offset N: field: reason (where)`, leaving out what is unknown.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Problem {
    /// The file.
    pub file: String,
    /// Byte offset in the file where the bad field starts, when known.
    pub offset: Option<u64>,
    /// The field (`block.crc32`, `change_set.sqn`, `operators[1].subtasks[0].keyed.path`),
    /// when known.
    pub field: Option<String>,
    /// What is wrong.
    pub reason: String,
    /// Where in the snapshot the file is referenced, when the file does not say.
    pub context: Option<String>,
    /// Whether the bytes are corrupt, of an unsupported version, missing, or could not be read
    /// (a transient failure: reading again may succeed).
    pub kind: ErrorKind,
}

impl Problem {
    /// A problem at a known offset and field of `file`, of corrupt data.
    pub fn corrupt(file: impl Into<String>, offset: u64, field: impl Into<String>, reason: impl Into<String>) -> Self {
        Problem {
            file: file.into(),
            offset: Some(offset),
            field: Some(field.into()),
            reason: reason.into(),
            context: None,
            kind: ErrorKind::Corrupt,
        }
    }

    /// A problem of `file` as a whole (no offset or field known).
    pub fn of_file(file: impl Into<String>, reason: impl Into<String>, kind: ErrorKind) -> Self {
        Problem {
            file: file.into(),
            offset: None,
            field: None,
            reason: reason.into(),
            context: None,
            kind,
        }
    }

    /// The same problem, saying where in the snapshot the file is referenced.
    #[must_use]
    pub fn within(mut self, context: impl Into<String>) -> Self {
        self.context = Some(context.into());
        self
    }

    /// The problem an error describes; `file` names the file being read when the error does
    /// not name one itself.
    pub fn from_error(e: &FormatError, file: &str) -> Self {
        let kind = e.kind();
        let p = |file: &str, offset: Option<u64>, field: Option<&str>, reason: String| Problem {
            file: file.to_string(),
            offset,
            field: field.map(str::to_string),
            reason,
            context: None,
            kind,
        };
        match e {
            FormatError::Corrupt {
                file,
                offset,
                field,
                reason,
            } => p(file, Some(*offset), Some(field), reason.clone()),
            // The version and the magic have fixed places in every statekit file.
            FormatError::UnsupportedVersion { file, found, supported } => p(
                file,
                Some(4),
                Some("header.version"),
                format!("unsupported format version {found} (this build reads {supported})"),
            ),
            FormatError::BadMagic { file, what } => p(
                file,
                Some(0),
                Some("header.magic"),
                format!("not a statekit {what} file (bad magic)"),
            ),
            FormatError::Storage(s) => Self::from_storage(s, kind),
            FormatError::Unresolvable { scope, path, reason } => {
                p(path, None, None, format!("cannot resolve this {scope} file: {reason}"))
            }
            other => p(file, None, None, other.to_string()),
        }
    }

    fn from_storage(e: &StorageError, kind: ErrorKind) -> Self {
        let (file, reason) = match e {
            StorageError::NotFound(path) => (path.clone(), "not found".to_string()),
            StorageError::InvalidPath(path) => (path.clone(), "invalid storage path".to_string()),
            StorageError::NotAFile { path, found } => (path.clone(), format!("is {found}, not a regular file")),
            StorageError::Truncated { path, had } => (
                path.clone(),
                format!("the file was truncated by another program while it was being read (it had {had} bytes when opened)"),
            ),
            StorageError::Io { path, source } => (path.clone(), source.to_string()),
            other => (String::new(), other.to_string()),
        };
        Problem::of_file(file, reason, kind)
    }
}

impl From<&FormatError> for Problem {
    fn from(e: &FormatError) -> Self {
        Problem::from_error(e, e.file().unwrap_or(""))
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.file.is_empty() {
            write!(f, "{}: ", self.file)?;
        }
        if let Some(o) = self.offset {
            write!(f, "offset {o}: ")?;
        }
        if let Some(field) = &self.field {
            write!(f, "{field}: ")?;
        }
        f.write_str(&self.reason)?;
        if let Some(c) = &self.context {
            write!(f, " ({c})")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_leaves_out_what_is_unknown() {
        let p = Problem::corrupt("a/0.keyed", 40, "block.crc32", "checksum mismatch");
        assert_eq!(p.to_string(), "a/0.keyed: offset 40: block.crc32: checksum mismatch");
        assert_eq!(
            p.clone().within("operator \"op\", subtask 0").to_string(),
            "a/0.keyed: offset 40: block.crc32: checksum mismatch (operator \"op\", subtask 0)"
        );
        let e = FormatError::BadMagic {
            file: "x".into(),
            what: "changelog",
        };
        let p = Problem::from(&e);
        assert_eq!(
            p.to_string(),
            "x: offset 0: header.magic: not a statekit changelog file (bad magic)"
        );
        assert_eq!(p.kind, ErrorKind::Corrupt);
        let e = FormatError::Storage(StorageError::NotFound("dir/f".into()));
        assert_eq!(Problem::from(&e).to_string(), e.to_string());
        assert_eq!(Problem::from(&e).kind, ErrorKind::NotFound);
        let e = FormatError::UnsupportedVersion {
            file: "m".into(),
            found: 9,
            supported: 1,
        };
        assert_eq!(
            Problem::from(&e).to_string(),
            "m: offset 4: header.version: unsupported format version 9 (this build reads 1)"
        );
        assert_eq!(Problem::from(&e).kind, ErrorKind::Unsupported);
    }
}
