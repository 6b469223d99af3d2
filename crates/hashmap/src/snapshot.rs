//! [`HashMapSnapshot`]: the frozen view a [`HashMapBackend`](crate::HashMapBackend) snapshot
//! returns.

use crate::backend::{Cell, Tables, Ttl};
use crate::bytes::prefetch;
use crate::packed::EntryRef;
use crate::packed_map::{MapEntryRef, MapTable};
use crate::table::{KgTable, Slot};
use statekit_core::stream::{debug_snapshot, key_prefix};
use statekit_core::{Entry, EntryVisitor, KeyGroupRange, KeyGroupScheme, KeyedStateView, StateDescriptor, StateError};
use std::fmt;
use std::ops::ControlFlow;

/// A frozen snapshot of a [`HashMapBackend`](crate::HashMapBackend).
///
/// It shares the backend's tables at the moment of the cut (copy-on-write: the backend
/// copies a shard before changing it while this view holds it), so it is cheap to take and
/// safe to read from another thread while the backend keeps processing. Entries whose TTL had
/// expired at the cut are left out. [`KeyedStateView::visit_key_group`] sorts the key
/// group's entries into canonical order on the calling thread.
pub struct HashMapSnapshot {
    pub(crate) checkpoint_id: u64,
    pub(crate) max_parallelism: u32,
    pub(crate) scheme: KeyGroupScheme,
    pub(crate) range: KeyGroupRange,
    pub(crate) now_ms: i64,
    pub(crate) states: Vec<StateDescriptor>,
    pub(crate) tables: Vec<Tables>,
}

impl fmt::Debug for HashMapSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug_snapshot(f, "HashMapSnapshot", self.checkpoint_id, self.now_ms, self)
    }
}

/// The slots of one table that pass `keep`, sorted by (key, namespace) ([`in_key_order`]).
fn sorted<V>(table: &KgTable<V>, keep: impl Fn(&V) -> bool) -> Vec<(u64, &Slot<V>)> {
    in_key_order(table.iter().filter(|s| keep(&s.value)), |s| {
        (s.key(), s.namespace(), &[][..])
    })
}

/// `items` sorted by (key, namespace, user key) as `parts` gives them (the user key empty
/// but in map states), each with its key's [`key_prefix`].
///
/// The sort compares the prefixes as integers first, so it touches the entries (and calls
/// `memcmp`) only for keys that share their first eight bytes; comparing entry bytes for
/// every pair was most of the cost of a visit.
fn in_key_order<T>(
    items: impl Iterator<Item = T>,
    parts: impl for<'x> Fn(&'x T) -> (&'x [u8], &'x [u8], &'x [u8]),
) -> Vec<(u64, T)> {
    let mut sorted: Vec<(u64, T)> = items.map(|t| (key_prefix(parts(&t).0), t)).collect();
    sorted.sort_unstable_by(|(pa, a), (pb, b)| pa.cmp(pb).then_with(|| parts(a).cmp(&parts(b))));
    sorted
}

/// How many entries ahead [`HashMapSnapshot`]'s visit prefetches values.
const PREFETCH_AHEAD: usize = 8;

/// A packed table's entry, borrowed, as [`visit_packed`] hands it out.
trait PackedEntry<'a>: Copy {
    /// The entry of state `state`, with its TTL stamp when the state has a TTL (`ttl`).
    fn entry(self, state: u32, ttl: bool) -> Entry<'a>;
}

impl<'a> PackedEntry<'a> for EntryRef<'a> {
    #[inline]
    fn entry(self, state: u32, ttl: bool) -> Entry<'a> {
        Entry {
            state,
            key: self.key,
            namespace: self.namespace,
            user_key: None,
            value: self.cell.bytes,
            timestamp: ttl.then_some(self.cell.ts),
        }
    }
}

impl<'a> PackedEntry<'a> for MapEntryRef<'a> {
    #[inline]
    fn entry(self, state: u32, ttl: bool) -> Entry<'a> {
        Entry {
            user_key: Some(self.user_key),
            ..EntryRef {
                key: self.key,
                namespace: self.namespace,
                cell: self.cell,
            }
            .entry(state, ttl)
        }
    }
}

/// Hands the packed entries `sorted` (from [`in_key_order`]) of state `state` to `visitor`
/// in order, prefetching the value [`PREFETCH_AHEAD`] entries ahead, until the visitor
/// breaks.
#[inline]
fn visit_packed<'a, T: PackedEntry<'a>>(
    sorted: &[(u64, T)],
    state: u32,
    ttl: bool,
    visitor: &mut EntryVisitor<'_>,
) -> Result<ControlFlow<()>, StateError> {
    for (i, &(_, e)) in sorted.iter().enumerate() {
        if let Some(&(_, ahead)) = sorted.get(i + PREFETCH_AHEAD) {
            prefetch(ahead.entry(state, ttl).value);
        }
        if visitor(&e.entry(state, ttl))?.is_break() {
            return Ok(ControlFlow::Break(()));
        }
    }
    Ok(ControlFlow::Continue(()))
}

impl HashMapSnapshot {
    #[cfg(test)]
    pub(crate) fn tables_for_test(&self, state: usize) -> &Tables {
        &self.tables[state]
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

impl KeyedStateView for HashMapSnapshot {
    statekit_core::keyed_accessors!(max_parallelism, key_group_scheme, key_group_range, states);

    fn visit_key_group(&self, key_group: u32, visitor: &mut EntryVisitor<'_>) -> Result<ControlFlow<()>, StateError> {
        if !self.range.contains(key_group) {
            return Ok(ControlFlow::Continue(()));
        }
        let idx = (key_group - self.range.start()) as usize;
        for (state, (desc, tables)) in self.states.iter().zip(&self.tables).enumerate() {
            let state = state as u32;
            let ttl = Ttl {
                cfg: desc.ttl,
                now: self.now_ms,
            };
            let timestamp = |c: &Cell| desc.ttl.map(|_| c.ts);
            match tables {
                Tables::Single(t) => {
                    let entries = in_key_order(t[idx].entries().filter(|e| ttl.live(e.cell.ts)), |e: &EntryRef<'_>| {
                        (e.key, e.namespace, &[][..])
                    });
                    let visit = visit_packed(&entries, state, desc.ttl.is_some(), visitor)?;
                    if visit.is_break() {
                        return Ok(ControlFlow::Break(()));
                    }
                }
                Tables::List(t) => {
                    for &(_, slot) in &sorted(&t[idx], |l| l.iter().any(|c| ttl.live(c.ts))) {
                        for c in slot.value.iter().filter(|c| ttl.live(c.ts)) {
                            if visitor(&Entry {
                                state,
                                key: slot.key(),
                                namespace: slot.namespace(),
                                user_key: None,
                                value: c.bytes.as_slice(),
                                timestamp: timestamp(c),
                            })?
                            .is_break()
                            {
                                return Ok(ControlFlow::Break(()));
                            }
                        }
                    }
                }
                Tables::Map(t) => match &t[idx] {
                    // General slots: the maps sorted by (key, namespace), each already in
                    // user-key order.
                    MapTable::General(t) => {
                        for &(_, slot) in &sorted(t, |m| m.iter().any(|(_, c)| ttl.live(c.ts))) {
                            for (user_key, c) in slot.value.iter().filter(|(_, c)| ttl.live(c.ts)) {
                                if visitor(&Entry {
                                    state,
                                    key: slot.key(),
                                    namespace: slot.namespace(),
                                    user_key: Some(user_key.as_slice()),
                                    value: c.bytes.as_slice(),
                                    timestamp: timestamp(c),
                                })?
                                .is_break()
                                {
                                    return Ok(ControlFlow::Break(()));
                                }
                            }
                        }
                    }
                    // Packed: every map entry a slot of its own, sorted with its user key.
                    packed => {
                        let entries = in_key_order(
                            packed.entries().filter(|e| ttl.live(e.cell.ts)),
                            |e: &MapEntryRef<'_>| (e.key, e.namespace, e.user_key),
                        );
                        let visit = visit_packed(&entries, state, desc.ttl.is_some(), visitor)?;
                        if visit.is_break() {
                            return Ok(ControlFlow::Break(()));
                        }
                    }
                },
            }
        }
        Ok(ControlFlow::Continue(()))
    }
}
