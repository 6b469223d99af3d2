//! # statekit-snapshot
//!
//! The library layer above the backends: whatever snapshot a user points at — a canonical
//! savepoint, a native RocksDB savepoint or incremental checkpoint, a changelog checkpoint,
//! an Apache Flink savepoint or checkpoint — this crate opens it the same way:
//!
//! * [`Snapshot`] ([`open`]): the one handle, over one adapter per on-disk family
//!   ([`SnapshotSource`]); [`Snapshot::keyed_views`] gives an operator's keyed state as
//!   key-group-ordered entry streams ([`statekit_core::KeyedStateView`]), the narrow waist
//!   every tool reads ([`keyed_views`] is statekit's own family's);
//! * [`open_keyed`]: a backend of the caller's choice ([`BackendChoice`], optionally under the
//!   changelog: [`ChangelogSetup`]) restored from any snapshot kind at any parallelism;
//! * [`find_snapshots`] and [`latest_checkpoint`]: what lies under a directory;
//! * [`describe()`]: what a snapshot holds, from `_metadata` alone (operators, states, types,
//!   sizes, format, changelog summary), as a [`Description`] a tool renders;
//! * [`EntryCursor`] ([`cursor`]): one keyed state's entries, seekable and filtered, read
//!   as a walk, as pages or by search, a damaged key group reported and skipped;
//! * [`diff`]: the differences between any two snapshots, streamed to a sink key group by key
//!   group (design `docs/design/0007-diff.md`).
//!
//! The `rocksdb` feature adds the RocksDB backend and native RocksDB snapshots; without it a
//! native snapshot is an error ([`SnapshotError::BackendNotBuilt`]), and nothing builds RocksDB.
//!
//! Runnable example (an engine restoring "whatever snapshot the user points at" into a heap
//! backend, at any parallelism): `cargo run -p statekit-snapshot --example restore_any -- PATH UID`.

mod backend;
pub mod changes;
pub mod cursor;
pub mod describe;
pub mod diff;
mod error;
mod family;
mod find;
pub mod open;
pub mod verify;
mod views;

pub use backend::{open_keyed, BackendChoice, ChangelogSetup, KeyedBackend, RestoreFrom};
pub use cursor::{CursorError, EntryCursor, EntryFilter, KeyedEntries};
pub use describe::{describe, Description};
pub use error::SnapshotError;
pub use find::{
    find_snapshots, find_snapshots_at, latest_checkpoint, latest_checkpoint_at, referenced_bytes, FoundSnapshot,
    INCOMPLETE,
};
pub use open::{Family, OpenOptions, Snapshot, SnapshotSource};
pub use verify::{verify_location, verify_location_with, verify_path, verify_path_with, verify_snapshot, Verification};
pub use views::{keyed_views, stored_as, StoredAs};
