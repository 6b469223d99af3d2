//! [`RocksDbSnapshot`]: the frozen view a [`RocksDbBackend`](crate::RocksDbBackend) snapshot
//! returns.

use crate::backend::Ttl;
use crate::db::{Db, OwnedSnapshot};
use crate::error::{db_err, Corruption, RocksDbError};
use crate::layout::{split_value, DecodedKey, KeyLayout, ListElements};
use rocksdb::{DBRawIteratorWithThreadMode, ReadOptions};
use statekit_core::state::KeyedStateKind;
use statekit_core::{Entry, EntryVisitor, KeyGroupRange, KeyGroupScheme, KeyedStateView, StateDescriptor, StateError};
use std::fmt;
use std::ops::ControlFlow;

/// A frozen snapshot of a [`RocksDbBackend`](crate::RocksDbBackend): a RocksDB snapshot
/// (taking it copies nothing; the database keeps the versions it needs) plus the state
/// descriptors at the cut. It holds a share of the database, so it stays readable while the
/// backend keeps writing, from any thread, and even after the backend is disposed of.
///
/// [`KeyedStateView::visit_key_group`] iterates each state's column family over the key
/// group's prefix. The key layout sorts as the canonical order, so entries stream out in
/// canonical order without sorting or buffering; entries whose TTL had expired at the cut
/// are skipped.
pub struct RocksDbSnapshot {
    checkpoint_id: u64,
    max_parallelism: u32,
    scheme: KeyGroupScheme,
    range: KeyGroupRange,
    layout: KeyLayout,
    now_ms: i64,
    states: Vec<StateDescriptor>,
    snapshot: OwnedSnapshot,
}

impl fmt::Debug for RocksDbSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        statekit_core::stream::debug_snapshot(f, "RocksDbSnapshot", self.checkpoint_id, self.now_ms, self)
    }
}

impl RocksDbSnapshot {
    /// The same view, its keys placed by `scheme`.
    pub(crate) fn with_key_group_scheme(mut self, scheme: KeyGroupScheme) -> Self {
        self.scheme = scheme;
        self
    }

    pub(crate) fn new(
        checkpoint_id: u64,
        max_parallelism: u32,
        range: KeyGroupRange,
        layout: KeyLayout,
        now_ms: i64,
        states: Vec<StateDescriptor>,
        snapshot: OwnedSnapshot,
    ) -> Self {
        RocksDbSnapshot {
            checkpoint_id,
            max_parallelism,
            scheme: KeyGroupScheme::Statekit,
            range,
            layout,
            now_ms,
            states,
            snapshot,
        }
    }

    /// The checkpoint this snapshot was taken for.
    pub fn checkpoint_id(&self) -> u64 {
        self.checkpoint_id
    }

    /// The clock reading at the cut, against which TTL expiry is judged (0 when no state
    /// has a TTL).
    pub fn now_ms(&self) -> i64 {
        self.now_ms
    }
}

pub(crate) fn corrupt(what: Corruption) -> StateError {
    RocksDbError::from(what).into()
}

impl KeyedStateView for RocksDbSnapshot {
    statekit_core::keyed_accessors!(max_parallelism, key_group_scheme, key_group_range, states);

    fn visit_key_group(&self, key_group: u32, visitor: &mut EntryVisitor<'_>) -> Result<ControlFlow<()>, StateError> {
        if !self.range.contains(key_group) {
            return Ok(ControlFlow::Continue(()));
        }
        self.snapshot.with_dependent(|inner, snap| {
            for (state, desc) in self.states.iter().enumerate() {
                let cf = inner.db.cf_handle(&desc.name).ok_or_else(|| {
                    corrupt(Corruption::NoColumnFamily {
                        state: desc.name.clone(),
                    })
                })?;
                let ro = key_group_read_options(self.layout, key_group);
                let it = snap.raw_iterator_cf_opt(&cf, ro);
                if visit_state(self.layout, key_group, state as u32, desc, self.now_ms, it, visitor)?.is_break() {
                    return Ok(ControlFlow::Break(()));
                }
            }
            Ok(ControlFlow::Continue(()))
        })
    }
}

/// Read options for a one-off scan of `key_group`: bounded to its prefix, without filling
/// the block cache (a checkpoint or a tool should not evict the task's working set).
pub(crate) fn key_group_read_options(layout: KeyLayout, key_group: u32) -> ReadOptions {
    let mut ro = ReadOptions::default();
    ro.fill_cache(false);
    ro.set_iterate_lower_bound(layout.key_group_prefix(key_group));
    ro.set_iterate_upper_bound(layout.key_group_prefix(key_group + 1));
    ro
}

/// Streams the entries of one state in one key group from `it` (bounded by
/// [`key_group_read_options`]) to `visitor`, in canonical order: decodes keys, splits lists
/// into elements, skips data whose TTL had expired at `now_ms`.
pub(crate) fn visit_state(
    layout: KeyLayout,
    key_group: u32,
    state: u32,
    desc: &StateDescriptor,
    now_ms: i64,
    mut it: impl RawCursor,
    visitor: &mut EntryVisitor<'_>,
) -> Result<ControlFlow<()>, StateError> {
    let mut parts = DecodedKey::default();
    it.seek(&layout.key_group_prefix(key_group));
    let ttl = Ttl {
        cfg: desc.ttl,
        now: now_ms,
    };
    let stamped = desc.ttl.is_some();
    let timestamp = |ts: i64| desc.ttl.map(|_| ts);
    let is_map = desc.kind == KeyedStateKind::Map;
    while let Some((k, v)) = it.item() {
        layout.decode_into(k, &mut parts)?;
        if parts.key_group != key_group {
            return Err(corrupt(Corruption::ForeignKeyGroup {
                state: desc.name.clone(),
                found: parts.key_group,
                key_group,
            }));
        }
        if !is_map && !parts.user_key.is_empty() {
            return Err(corrupt(Corruption::BytesAfterNamespace {
                state: desc.name.clone(),
                len: parts.user_key.len(),
                kind: desc.kind,
            }));
        }
        let mut entry = Entry {
            state,
            key: &parts.key,
            namespace: &parts.namespace,
            user_key: is_map.then_some(&parts.user_key[..]),
            value: &[],
            timestamp: None,
        };
        if desc.kind == KeyedStateKind::List {
            for e in ListElements::new(v, stamped) {
                let (ts, element) = e?;
                if ttl.live(ts) {
                    entry.value = element;
                    entry.timestamp = timestamp(ts);
                    if visitor(&entry)?.is_break() {
                        return Ok(ControlFlow::Break(()));
                    }
                }
            }
        } else {
            let (ts, value) = split_value(v, stamped)?;
            if ttl.live(ts) {
                entry.value = value;
                entry.timestamp = timestamp(ts);
                if visitor(&entry)?.is_break() {
                    return Ok(ControlFlow::Break(()));
                }
            }
        }
        it.next();
    }
    it.status(&desc.name)?;
    Ok(ControlFlow::Continue(()))
}

/// Stored entries in key order, as [`visit_state`] reads them: RocksDB's iterator, or entries
/// already read (a native snapshot read by the safe-Rust file reader).
pub(crate) trait RawCursor {
    /// Moves to the first entry at or after `key`.
    fn seek(&mut self, key: &[u8]);
    /// The current entry, if any.
    fn item(&self) -> Option<(&[u8], &[u8])>;
    /// Moves to the next entry.
    fn next(&mut self);
    /// Whether the reads of state `name` went well.
    fn status(&self, name: &str) -> Result<(), StateError>;
}

impl RawCursor for DBRawIteratorWithThreadMode<'_, Db> {
    fn seek(&mut self, key: &[u8]) {
        DBRawIteratorWithThreadMode::seek(self, key);
    }
    fn item(&self) -> Option<(&[u8], &[u8])> {
        DBRawIteratorWithThreadMode::item(self)
    }
    fn next(&mut self) {
        DBRawIteratorWithThreadMode::next(self);
    }
    fn status(&self, name: &str) -> Result<(), StateError> {
        DBRawIteratorWithThreadMode::status(self).map_err(db_err(format!("read state {name:?}")))
    }
}

/// Entries already read, in key order.
pub(crate) struct SliceCursor<'a> {
    pub(crate) entries: &'a [(Vec<u8>, Vec<u8>)],
    pub(crate) pos: usize,
}

impl RawCursor for SliceCursor<'_> {
    fn seek(&mut self, key: &[u8]) {
        self.pos = self.entries.partition_point(|(k, _)| k.as_slice() < key);
    }
    fn item(&self) -> Option<(&[u8], &[u8])> {
        self.entries.get(self.pos).map(|(k, v)| (k.as_slice(), v.as_slice()))
    }
    fn next(&mut self) {
        self.pos += 1;
    }
    fn status(&self, _: &str) -> Result<(), StateError> {
        Ok(())
    }
}
