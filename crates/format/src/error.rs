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
    /// What was asked of a writer does not fit (a state list with a name twice, key groups
    /// past the max parallelism, a view that stops early, entries out of order, a block too
    /// large, …), or the writer failed inside: shown as a snapshot I/O failure.
    #[error("snapshot I/O: {0}")]
    Write(Box<WriteProblem>),
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

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            FormatError::Corrupt { .. } | FormatError::BadMagic { .. } | FormatError::Write(_) => ErrorKind::Corrupt,
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

/// Why writing a statekit file failed ([`FormatError::Write`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WriteProblem {
    /// The zstd level is refused.
    #[error("zstd level {level}: {error}")]
    ZstdLevel {
        /// The level.
        level: i32,
        /// zstd's error.
        error: std::io::Error,
    },
    /// zstd refused its literal compression mode.
    #[error("zstd literal compression mode: {error}")]
    ZstdLiterals {
        /// zstd's error.
        error: std::io::Error,
    },
    /// A block past the format's 4 GiB.
    #[error("a block of {len} bytes exceeds 4 GiB")]
    BlockTooLarge {
        /// Its length.
        len: usize,
    },
    /// A file header past 4 GiB.
    #[error("{file}: file header exceeds 4 GiB")]
    HeaderTooLarge {
        /// The file.
        file: String,
    },
    /// A block outside a section (a bug of the writer's caller).
    #[error("block written outside a section")]
    OutsideSection,
    /// More blocks than a section counts.
    #[error("more than 2^32 blocks in one section")]
    TooManyBlocks,
    /// The block pipeline stopped before the file was done.
    #[error("block pipeline stopped")]
    PipelineStopped,
    /// Key groups past the max parallelism.
    #[error("{file}: key groups {range} exceed max parallelism {max_parallelism}")]
    KeyGroupsPastMax {
        /// The file.
        file: String,
        /// The key groups asked for.
        range: statekit_core::KeyGroupRange,
        /// The max parallelism.
        max_parallelism: u32,
    },
    /// A state name twice in one file.
    #[error("{file}: state name {name:?} appears twice")]
    DuplicateStateName {
        /// The file.
        file: String,
        /// The name.
        name: String,
    },
    /// An operator state name twice in one file.
    #[error("{file}: operator state {name:?} appears twice")]
    DuplicateOperatorState {
        /// The file.
        file: String,
        /// The name.
        name: String,
    },
    /// Operator state data of another shape than its mode's.
    #[error("{file}: operator state {name:?} is a {mode} state but holds {holds} data")]
    OperatorStateData {
        /// The file.
        file: String,
        /// The state.
        name: String,
        /// Its mode.
        mode: statekit_core::OperatorStateMode,
        /// What its data is (`list` or `broadcast`).
        holds: &'static str,
    },
    /// The view stopped its visit before the key group's end.
    #[error("key group {key_group}: the view stopped its visit early")]
    StoppedEarly {
        /// The key group.
        key_group: u32,
    },
    /// A transcoding that does not keep the source's states.
    #[error("{file}: a transcoded file keeps the states of {from} (same number, kinds and TTLs, in order)")]
    TranscodeStates {
        /// The file written.
        file: String,
        /// The file read.
        from: String,
    },
    /// A schema nested past the bound.
    #[error(
        "{what} {name:?}: schema nested deeper than {} levels",
        statekit_core::schema::MAX_SCHEMA_DEPTH
    )]
    SchemaTooDeep {
        /// `state` or `operator state`.
        what: &'static str,
        /// Its name.
        name: String,
    },
    /// An entry the writer refuses (its shape, order or state), in one key group.
    #[error("{file}: key group {key_group}: {reason}")]
    Entry {
        /// The file.
        file: String,
        /// The key group.
        key_group: u32,
        /// Why.
        reason: EntryRefused,
    },
    /// The writer lost what it had buffered (a bug).
    #[error("{file}: key group {key_group}: internal error: {what} is not in the block buffer")]
    Lost {
        /// The file.
        file: String,
        /// The key group.
        key_group: u32,
        /// What is missing (`the previous key`, …).
        what: &'static str,
    },
}

/// Why a writer refuses an entry ([`WriteProblem::Entry`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EntryRefused {
    /// It does not fit its state ([`statekit_core::stream::check_entry_shape`]; empty when
    /// the check found nothing).
    #[error("{}", .0.as_ref().map(|p| p.to_string()).unwrap_or_default())]
    Shape(Option<statekit_core::EntryProblem>),
    /// Before the previous entry in canonical order.
    #[error("entries out of canonical order (state {state} key {key:02x?} after state {previous_state} key {previous_key:02x?})")]
    OutOfOrder {
        /// Its state index.
        state: u32,
        /// Its key.
        key: Vec<u8>,
        /// The previous entry's state index.
        previous_state: u32,
        /// The previous entry's key.
        previous_key: Vec<u8>,
    },
    /// The same cell twice, or a map's user keys out of order.
    #[error("state {state:?}: duplicate or out-of-order entry for key {key:02x?}")]
    Duplicate {
        /// The state.
        state: String,
        /// The key.
        key: Vec<u8>,
    },
    /// A state index the writer keeps no totals for.
    #[error("state index {state} has no totals")]
    NoTotals {
        /// The state index.
        state: u32,
    },
}

impl From<WriteProblem> for FormatError {
    fn from(p: WriteProblem) -> Self {
        FormatError::Write(Box::new(p))
    }
}

impl WriteProblem {
    /// What kind of failure this is (as before it was typed: damaged or unusable input).
    pub fn kind(&self) -> ErrorKind {
        ErrorKind::Corrupt
    }
}

impl statekit_core::HasErrorKind for WriteProblem {
    fn kind(&self) -> ErrorKind {
        ErrorKind::Corrupt
    }
}
