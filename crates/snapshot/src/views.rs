//! The keyed state of a snapshot's operator as entry streams, whatever its format.

use crate::error::SnapshotError;
use statekit_changelog::{restore_into, ReplayClock};
use statekit_checkpoint::SnapshotReader;
use statekit_core::{
    BackendConfig, Clock, EntryVisitor, KeyGroupRange, KeyGroupScheme, KeyedStateBackend, KeyedStateView,
    StateDescriptor, StateError, SystemClock,
};
use statekit_hashmap::HashMapBackend;
use std::ops::ControlFlow;
use std::sync::Arc;

/// How an operator's keyed state is stored in a snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoredAs {
    /// Canonical keyed data files (restore into any backend, at any parallelism).
    Canonical,
    /// A backend's native files (RocksDB): restore into that backend, or read as views.
    Native,
    /// Changelog handles: materializations plus a log tail to replay.
    Changelog,
}

/// How operator `uid`'s keyed state is stored in the snapshot `reader` opened.
pub fn stored_as(reader: &SnapshotReader, uid: &str) -> Result<StoredAs, SnapshotError> {
    Ok(if reader.is_changelog(uid)? {
        StoredAs::Changelog
    } else if reader.is_native(uid)? {
        StoredAs::Native
    } else {
        StoredAs::Canonical
    })
}

/// One view per subtask of operator `uid` overlapping `range`, in key-group order: canonical
/// keyed data files, native RocksDB files opened read-only (nothing is written to the
/// snapshot), and changelog state restored into a heap backend (materializations plus the
/// tail replayed, as a restore would see it). Streaming the views one after the other gives
/// the operator's entries in key-group order — the narrow waist every command reads.
pub fn keyed_views(
    reader: &SnapshotReader,
    uid: &str,
    range: KeyGroupRange,
) -> Result<Vec<Box<dyn KeyedStateView>>, SnapshotError> {
    let scheme = reader.operator(uid)?.key_group_scheme;
    let mut views: Vec<Box<dyn KeyedStateView>> = Vec::new();
    for r in reader.keyed_readers(uid, range)? {
        views.push(Box::new(r));
    }
    let native = reader.native_handles(uid, range)?;
    if let Some(first) = native.first() {
        #[cfg(feature = "rocksdb")]
        {
            let _ = first;
            for h in &native {
                views.push(Box::new(statekit_rocksdb::NativeSnapshotView::open(
                    h,
                    &statekit_rocksdb::RocksDbOptions::default(),
                )?));
            }
        }
        #[cfg(not(feature = "rocksdb"))]
        return Err(SnapshotError::BackendNotBuilt {
            uid: uid.to_string(),
            backend: first.handle.backend.clone(),
        });
    }
    for h in reader.changelog_handles(uid, range)? {
        let r = h.key_groups.intersection(&range);
        if r.is_empty() {
            continue;
        }
        let view = restore_changelog(&h, r, reader.metadata().timestamp_ms, scheme).map_err(|source| {
            SnapshotError::ChangelogView {
                uid: uid.to_string(),
                subtask: h.subtask,
                source,
            }
        })?;
        views.push(Box::new(view));
    }
    // Subtask order is key-group order: sort so entries stream in key-group order.
    views.sort_by_key(|v| v.key_group_range().start());
    // Data files do not record the rule their keys follow; the operator does.
    Ok(views
        .into_iter()
        .map(|view| -> Box<dyn KeyedStateView> {
            if view.key_group_scheme() == scheme {
                view
            } else {
                Box::new(Placed { view, scheme })
            }
        })
        .collect())
}

/// The changelog state of one subtask in `range`, restored into a heap backend on a
/// [`ReplayClock`]: replayed TTL data keeps its recorded timestamps, and the view is cut at
/// the checkpoint's time (`at_ms`, or the last replayed record's if later), so what had
/// expired by then is left out, as a canonical checkpoint taken then would leave it out.
fn restore_changelog(
    h: &statekit_format::ResolvedChangelogHandle,
    range: KeyGroupRange,
    at_ms: i64,
    scheme: KeyGroupScheme,
) -> Result<RestoredView, StateError> {
    let clock = ReplayClock::new(Arc::new(SystemClock));
    let config = BackendConfig {
        max_parallelism: h.max_parallelism,
        key_group_range: range,
        clock: clock.clone(),
        key_group_scheme: scheme,
    };
    let mut backend = HashMapBackend::new(config)?;
    restore_into(&mut backend, Some(&clock), range, std::slice::from_ref(h))?;
    clock.pin(clock.now_ms().max(at_ms));
    let view = backend.snapshot(0)?;
    Ok(RestoredView { view, range })
}

/// A restored backend's snapshot.
struct RestoredView {
    view: Arc<dyn KeyedStateView>,
    range: KeyGroupRange,
}

impl KeyedStateView for RestoredView {
    fn max_parallelism(&self) -> u32 {
        self.view.max_parallelism()
    }
    fn key_group_scheme(&self) -> KeyGroupScheme {
        self.view.key_group_scheme()
    }
    fn key_group_range(&self) -> KeyGroupRange {
        self.range
    }
    fn states(&self) -> &[StateDescriptor] {
        self.view.states()
    }
    fn visit_key_group(&self, key_group: u32, visitor: &mut EntryVisitor<'_>) -> Result<ControlFlow<()>, StateError> {
        self.view.visit_key_group(key_group, visitor)
    }
}

/// A view of a data file that does not record its key-group rule, with the rule its
/// operator records.
struct Placed {
    view: Box<dyn KeyedStateView>,
    scheme: KeyGroupScheme,
}

impl KeyedStateView for Placed {
    fn max_parallelism(&self) -> u32 {
        self.view.max_parallelism()
    }
    fn key_group_range(&self) -> KeyGroupRange {
        self.view.key_group_range()
    }
    fn key_group_scheme(&self) -> KeyGroupScheme {
        self.scheme
    }
    fn states(&self) -> &[StateDescriptor] {
        self.view.states()
    }
    fn visit_key_group(&self, key_group: u32, visitor: &mut EntryVisitor<'_>) -> Result<ControlFlow<()>, StateError> {
        self.view.visit_key_group(key_group, visitor)
    }
    fn visit_range(&self, range: KeyGroupRange, visitor: &mut EntryVisitor<'_>) -> Result<ControlFlow<()>, StateError> {
        self.view.visit_range(range, visitor)
    }
}
