//! # statekit-changelog
//!
//! The changelog (Flink's DSTL, "generic incremental checkpoints"): a wrapper around any keyed
//! state backend that also appends every state change to a durable log, uploaded
//! continuously; the backend is materialized (snapshotted) now and then, independently of
//! checkpoints, and a checkpoint is the last materialization plus the log since — so a
//! checkpoint costs what it takes to make the last few milliseconds of changes durable,
//! whatever the backend and the state size. Design: `docs/design/0006-changelog.md`; the log
//! file format, byte by byte: `docs/changelog-format.md`.
//!
//! * [`record`]: the change records (one state mutation each) and their codec;
//! * [`file`](mod@file): the log file format — header, change sets (each compressed on its own, CRC32),
//!   an index by log, sequence number and key group, trailer — with its writer and reader;
//! * [`ChangelogStorage`] / [`ChangelogWriter`]: the upload service shared by every backend of
//!   a job (one file per upload, batching, back-pressure, retries) and the per-backend log
//!   (sequence numbers, persist, truncate);
//! * [`ChangelogBackend`]: the wrapper — logging, materialization, checkpoints, restore;
//! * [`config`]: the settings under Flink's key names (old and new spellings), validated.

mod backend;
pub mod config;
mod error;
pub mod file;
mod materialize;
pub mod record;
pub mod tail;
pub mod verify;
mod writer;

pub use backend::{restore_into, ChangelogBackend, ChangelogCut, ReplayClock, ReplayStats};
pub use config::{ChangelogConfig, ConfigError, ConfigNote, ConfigProblem, StorageKind, ValueProblem};
pub use error::{ChangelogError, MaterializationFailure, UploadFailure};
pub use file::{
    ChangeSetBuffer, ChangeSetData, IndexEntry, LogCompression, LogFileReader, LogFileWriter, LogId, RecordsError,
    SealedChangeSet, FLAG_PADDED, META_KEY_GROUP,
};
pub use materialize::{MaterializationPolicy, Materializer, MATERIALIZATION_DIR};
pub use record::{Change, Op, ReadKind, Record};
pub use writer::{ChangelogStorage, ChangelogWriter, LogSegment, PendingPersist, UploadConfig, UploadStats, DSTL_DIR};
