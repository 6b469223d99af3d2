//! The keyed state of a snapshot's operator as entry streams, whatever its format.

#[cfg(not(feature = "rocksdb"))]
use anyhow::bail;
use anyhow::Result;
use statekit_checkpoint::SnapshotReader;
use statekit_core::{KeyGroupRange, KeyedStateView};

/// One view per subtask of operator `uid` overlapping `range`: canonical keyed data files,
/// and native RocksDB files opened read-only (nothing is written to the snapshot).
pub fn keyed_views(reader: &SnapshotReader, uid: &str, range: KeyGroupRange) -> Result<Vec<Box<dyn KeyedStateView>>> {
    let mut views: Vec<Box<dyn KeyedStateView>> = Vec::new();
    for r in reader.keyed_readers(uid, range)? {
        views.push(Box::new(r));
    }
    let native = reader.native_handles(uid, range)?;
    if !native.is_empty() {
        #[cfg(feature = "rocksdb")]
        for h in &native {
            views.push(Box::new(statekit_rocksdb::NativeSnapshotView::open(
                h,
                &statekit_rocksdb::RocksDbOptions::default(),
            )?));
        }
        #[cfg(not(feature = "rocksdb"))]
        bail!(
            "operator {uid:?} holds native {} state; this statekit was built without the `rocksdb` feature",
            native[0].handle.backend
        );
    }
    // Subtask order is key-group order: sort so entries stream in key-group order.
    views.sort_by_key(|v| v.key_group_range().start());
    Ok(views)
}
