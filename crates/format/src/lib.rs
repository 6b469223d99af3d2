//! # statekit-format
//!
//! The on-disk format of statekit snapshots (canonical format v1), specified byte by byte in
//! `docs/format.md`:
//! * `_metadata`: the [`SnapshotMetadata`] of a checkpoint or savepoint;
//! * keyed data files: the canonical [`statekit_core::Entry`] stream of one subtask, in
//!   blocks with CRC32 and optional lz4/zstd compression, indexed by key group so a reader
//!   of one key-group range touches only those bytes; read through `memmap2`;
//! * operator state files.
//!
//! Every decoder is total: bad bytes give a [`FormatError`] naming the file, offset and
//! field, never a panic.

pub mod metadata;

pub use metadata::{
    FileRef, FileScope, OperatorMetadata, SnapshotFormat, SnapshotKind, SnapshotMetadata, SubtaskMetadata,
    METADATA_FILE_NAME,
};
