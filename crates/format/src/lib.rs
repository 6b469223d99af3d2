//! # statekit-format
//!
//! The on-disk format of statekit snapshots (canonical format v1), specified byte by byte in
//! `docs/format.md`:
//! * `_metadata`: the [`SnapshotMetadata`] of a checkpoint or savepoint
//!   ([`encode_metadata`], [`decode_metadata`], [`read_metadata`]);
//! * keyed data files: the canonical [`statekit_core::Entry`] stream of one subtask, in
//!   blocks with CRC32 and optional lz4/zstd compression, indexed by key group so a reader
//!   of one key-group range touches only those bytes; read through `memmap2`
//!   ([`write_keyed_file`], [`KeyedFileReader`]);
//! * operator state files ([`write_operator_file`], [`read_operator_file`]);
//! * [`verify_snapshot`], which checks a whole snapshot directory and lists every problem;
//! * [`Cursor`] (and [`le_u32`], [`le_u64`]): the bounds-checked reading every decoder here is
//!   built on, public so other formats (the changelog's log files and records) decode the same
//!   way.
//!
//! Every decoder is total: bad bytes give a [`FormatError`] naming the file, offset and
//! field, never a panic, and no length read from a file is trusted before it has been
//! checked against the bytes that remain. The decoder modules deny
//! `clippy::indexing_slicing`.
//!
//! ```
//! use statekit_core::storage::MemoryStorage;
//! use statekit_core::{KeyGroupRange, KeyedStateView, MemoryView, OwnedEntry, StateDescriptor, TypeSchema};
//! use statekit_format::{write_keyed_file, KeyedFileReader, WriteOptions};
//!
//! let states = vec![StateDescriptor::value("count", TypeSchema::Utf8, TypeSchema::I64)];
//! let entry = OwnedEntry {
//!     key_group: 3,
//!     state: 0,
//!     key: b"alice".to_vec(),
//!     namespace: vec![],
//!     user_key: None,
//!     value: 7i64.to_be_bytes().to_vec(),
//!     timestamp: None,
//! };
//! let view = MemoryView::new(8, KeyGroupRange::all(8), states, vec![entry]);
//! let storage = MemoryStorage::new();
//! let info = write_keyed_file(&view, KeyGroupRange::all(8), &storage, "op/0.keyed", &WriteOptions::default())?;
//! assert_eq!(info.entries, 1);
//! let reader = KeyedFileReader::open(&storage, "op/0.keyed", Some(info.file.size))?;
//! reader.verify()?;
//! let mut seen = Vec::new();
//! let _ = reader.visit_key_group(3, &mut |e| {
//!     seen.push(e.key.to_vec());
//!     Ok(std::ops::ControlFlow::Continue(()))
//! })?;
//! assert_eq!(seen, vec![b"alice".to_vec()]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod block;
mod container;
mod error;
mod keyed;
pub mod metadata;
mod metadata_codec;
mod operator;
mod pipeline;
mod problem;
mod resolve;
mod verify;
mod wire;

pub use block::{Compression, WriteOptions};
pub use container::FORMAT_VERSION;
pub use error::{EntryRefused, FormatError, WriteProblem};
pub use keyed::{
    transcode_keyed_file, write_keyed_file, KeyGroupInfo, KeyedFileInfo, KeyedFileReader, StateStats, VerifyReport,
};
pub use metadata::{
    ChangelogKeyedHandle, FileRef, FileScope, KeyGroupStats, KeyedHandle, KeyedStats, LogSegmentRef, MaterializedPart,
    NativeFile, NativeKeyedHandle, NativeStateStats, NativeStats, OperatorMetadata, SnapshotFormat, SnapshotKind,
    SnapshotMetadata, SubtaskMetadata, METADATA_FILE_NAME,
};
pub use metadata_codec::{decode_metadata, encode_metadata, read_metadata, write_metadata};
pub use operator::{decode_operator_file, read_operator_file, write_operator_file};
pub use problem::Problem;
pub use resolve::{
    FileResolver, NativeTarget, ResolvedChangelogHandle, ResolvedFile, ResolvedNativeFile, ResolvedNativeHandle,
};
pub use verify::{check_metadata, verify_snapshot, verify_snapshot_files, SnapshotVerifyReport};
pub use wire::{decode_state_descriptor, encode_state_descriptor, le_u32, le_u64, read_state_descriptor, Cursor};
