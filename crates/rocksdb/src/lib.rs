//! # statekit-rocksdb
//!
//! The RocksDB keyed-state backend: [`RocksDbBackend`] keeps keyed state in an embedded
//! RocksDB database in a local working directory, so state can be larger than memory. It
//! implements [`statekit_core::KeyedStateBackend`] with exactly the semantics of the heap
//! backend (`statekit-hashmap`): the five state kinds, TTL, namespace merging, restore and
//! rescaling from any [`KeyedStateView`](statekit_core::KeyedStateView), and the same errors.
//! A savepoint written from either backend restores into either.
//!
//! ## Layout
//!
//! One column family per state, named after the state. Keys are
//! `key group (1 or 2 bytes, big-endian) ‖ key ‖ namespace [‖ map user key]`, key and
//! namespace in an order-preserving escape encoding, so a column family iterates key group
//! by key group and, within one, in the canonical entry order. Values carry an 8-byte TTL
//! timestamp when the state has a TTL; a list is a sequence of length-prefixed elements
//! appended by a merge operator without reading. Byte by byte: [`layout`] and
//! `docs/rocksdb-layout.md`.
//!
//! ## Snapshots
//!
//! [`snapshot`](statekit_core::KeyedStateBackend::snapshot) takes a RocksDB snapshot (no
//! copy, no pause) and wraps it in a [`RocksDbSnapshot`] view that shares the database, so
//! another thread can write it out while the backend keeps processing, and it stays readable
//! after the backend is disposed of. The view streams each key group in canonical order
//! straight from the iterators: no sort, memory independent of the key group's size.
//!
//! ## TTL
//!
//! As on the heap: values, list elements and map entries carry their last-update timestamp;
//! expired data is invisible to reads and left out of snapshots and restores, and is
//! removed when a read finds it, by [`RocksDbBackend::purge_expired`], or (list elements) by
//! the next read-modify-write of the list.
//!
//! ## Options
//!
//! [`RocksDbOptions`] starts from a named [`Profile`] (`default`, `spinning-disk`,
//! `flash-ssd`) and exposes the block cache, write buffers, compression, block size, bloom
//! filter and compaction knobs. The design and alternatives: `docs/design/0004-rocksdb-backend.md`.

mod backend;
mod db;
mod error;
mod ingest;
pub mod layout;
mod native;
mod options;
mod snapshot;
#[cfg(test)]
mod tests;
mod writeback;

pub use backend::RocksDbBackend;
pub use error::{Corruption, RocksDbError};
pub use native::{
    verify_native, write_native, CutFile, NativeCut, NativeSnapshotView, NativeVerifyReport, NativeWritten,
    BACKEND_NAME, LAYOUT_NAME,
};
pub use options::{Compression, Profile, RocksDbOptions};
pub use snapshot::RocksDbSnapshot;
