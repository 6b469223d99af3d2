//! The write-back cache in front of RocksDB for point reads and writes.
//!
//! Every `get`, `put` and `delete` of one stored key (value, reducing and aggregating states,
//! map entries, list reads) goes through it. A read that misses caches what RocksDB answered
//! (also "absent") while there is room; a write to a cached key, or to any key while there is
//! room, only changes the cached entry and marks it dirty, so read-modify-write of a key (the
//! word count's pattern) touches RocksDB's memtable skiplist once per cache lifetime instead of
//! twice per record, and a later read of a blind write is a hit. A write that finds no room
//! goes straight to RocksDB; a delete of a key not cached too.
//!
//! Dirty entries reach RocksDB in one [`rocksdb::WriteBatch`], each state's in key order,
//! whenever anything else looks at or writes RocksDB directly — scans, merges, batches,
//! ingestion, and the synchronous part of a snapshot or checkpoint — so RocksDB holds exactly
//! the backend's state at each of those points. The cache never grows past its byte budget:
//! when it is full, reads that miss go on to RocksDB without being cached, and once as many
//! of them have missed as the cache holds entries (it no longer holds the working set) it is
//! written back and emptied (`docs/design/0016-beside-flink.md`).

use foldhash::fast::FixedState;
use statekit_core::stream::key_prefix;
use std::collections::HashMap;

/// Entries larger than this (key + value) are never cached: they go straight to RocksDB.
pub(crate) const MAX_CACHED_ENTRY: usize = 1024;

/// Bytes charged per cached entry on top of its key and value: the table slot (40 bytes at a
/// load of 7/8 or less) and two allocations' headers and rounding.
const ENTRY_OVERHEAD: usize = 96;

/// One cached stored key: its stored value (`None`: absent or deleted) and whether RocksDB
/// has yet to see it.
pub(crate) struct Slot {
    pub(crate) value: Option<Box<[u8]>>,
    pub(crate) dirty: bool,
}

/// Cached entries of every state, by state index, within a byte budget.
pub(crate) struct WriteBack {
    limit: usize,
    bytes: usize,
    dirty: usize,
    /// Most key and value bytes the dirty entries may hold before they are written back.
    dirty_limit: usize,
    /// Key and value bytes of the dirty entries.
    dirty_bytes: usize,
    /// Reads that missed while the cache was full, since it was last emptied.
    misses_while_full: usize,
    /// Writes of uncached keys that found the cache full, since it was last emptied.
    writes_while_full: usize,
    states: Vec<HashMap<Box<[u8]>, Slot, FixedState>>,
}

/// A dirty entry being written back: its key's [`key_prefix`], key and value.
type Dirty<'a> = (u64, &'a [u8], Option<&'a [u8]>);

fn cost(key: &[u8], value: Option<&[u8]>) -> usize {
    data(key, value) + ENTRY_OVERHEAD
}

/// The bytes an entry writes into RocksDB: its key and value.
fn data(key: &[u8], value: Option<&[u8]>) -> usize {
    key.len() + value.map_or(0, <[u8]>::len)
}

impl WriteBack {
    /// A cache of at most `limit` bytes (0: off, every call goes to RocksDB) whose dirty
    /// entries hold at most `dirty_limit` bytes of keys and values.
    pub(crate) fn new(limit: usize, dirty_limit: usize) -> Self {
        WriteBack {
            limit,
            bytes: 0,
            dirty: 0,
            dirty_limit,
            dirty_bytes: 0,
            misses_while_full: 0,
            writes_while_full: 0,
            states: Vec::new(),
        }
    }

    /// Whether the cache is on.
    #[inline]
    pub(crate) fn enabled(&self) -> bool {
        self.limit > 0
    }

    /// Whether an entry of this size may be cached.
    #[inline]
    pub(crate) fn admits(&self, key: &[u8], value: Option<&[u8]>) -> bool {
        self.enabled() && key.len() + value.map_or(0, <[u8]>::len) <= MAX_CACHED_ENTRY
    }

    /// The cached slot of `key` in state `s`.
    #[inline]
    pub(crate) fn lookup(&self, s: usize, key: &[u8]) -> Option<&Slot> {
        self.states.get(s).and_then(|m| m.get(key))
    }

    /// Whether anything is waiting to be written.
    pub(crate) fn has_dirty(&self) -> bool {
        self.dirty > 0
    }

    /// Key and value bytes of the dirty entries.
    pub(crate) fn dirty_bytes(&self) -> usize {
        self.dirty_bytes
    }

    /// Whether the cache is over its budget (the caller then writes it back and empties it).
    pub(crate) fn over_budget(&self) -> bool {
        self.bytes > self.limit
    }

    /// Whether the dirty entries hold more than their limit (the caller then writes them
    /// back, keeping them cached).
    pub(crate) fn dirty_over_limit(&self) -> bool {
        self.dirty_bytes > self.dirty_limit
    }

    /// Whether an entry of this size fits in the budget now.
    pub(crate) fn has_room(&self, key: &[u8], value: Option<&[u8]>) -> bool {
        self.bytes + cost(key, value) <= self.limit
    }

    /// Counts a read that missed while the cache was full; true once as many have missed as
    /// the cache holds entries (it should then be written back and emptied).
    pub(crate) fn missed_while_full(&mut self) -> bool {
        self.misses_while_full += 1;
        self.misses_while_full > self.entries()
    }

    /// Counts a write of an uncached key that found the cache full; true once they number
    /// a sixteenth of the entries the cache holds. A stream of writes to new keys (blind
    /// writes) is then better served by writing the cache back — one batch in key order,
    /// which RocksDB's memtable inserts along its last insert position — and caching anew,
    /// than by a random-order memtable insert per write, which costs a skiplist search of
    /// cache misses each (`docs/design/0016-beside-flink.md`).
    pub(crate) fn written_while_full(&mut self) -> bool {
        self.writes_while_full += 1;
        self.writes_while_full.saturating_mul(16) > self.entries()
    }

    /// Entries cached, over all states.
    fn entries(&self) -> usize {
        self.states.iter().map(HashMap::len).sum()
    }

    /// Sets `key` of state `s` to `value` (`None`: deleted), dirty or clean (just read).
    pub(crate) fn set(&mut self, s: usize, key: &[u8], value: Option<&[u8]>, dirty: bool) {
        if self.states.len() <= s {
            self.states
                .resize_with(s + 1, || HashMap::with_hasher(FixedState::default()));
        }
        let Some(map) = self.states.get_mut(s) else {
            return;
        };
        match map.get_mut(key) {
            Some(slot) => {
                self.bytes -= cost(key, slot.value.as_deref());
                self.bytes += cost(key, value);
                if slot.dirty {
                    self.dirty_bytes -= data(key, slot.value.as_deref());
                }
                if slot.dirty || dirty {
                    self.dirty_bytes += data(key, value);
                }
                match (&mut slot.value, value) {
                    (Some(old), Some(new)) if old.len() == new.len() => old.copy_from_slice(new),
                    (old, new) => *old = new.map(Box::from),
                }
                if dirty && !slot.dirty {
                    self.dirty += 1;
                }
                slot.dirty |= dirty;
            }
            None => {
                self.bytes += cost(key, value);
                self.dirty += usize::from(dirty);
                if dirty {
                    self.dirty_bytes += data(key, value);
                }
                map.insert(
                    Box::from(key),
                    Slot {
                        value: value.map(Box::from),
                        dirty,
                    },
                );
            }
        }
    }

    /// Removes `key` of state `s`, returning its slot.
    pub(crate) fn take(&mut self, s: usize, key: &[u8]) -> Option<Slot> {
        let slot = self.states.get_mut(s)?.remove(key)?;
        self.bytes -= cost(key, slot.value.as_deref());
        self.dirty -= usize::from(slot.dirty);
        if slot.dirty {
            self.dirty_bytes -= data(key, slot.value.as_deref());
        }
        Some(slot)
    }

    /// Calls `f(state, key, value)` for every dirty entry, each state's in key order.
    pub(crate) fn for_each_dirty(&self, mut f: impl FnMut(usize, &[u8], Option<&[u8]>)) {
        if self.dirty == 0 {
            return;
        }
        for (s, map) in self.states.iter().enumerate() {
            // Sorted by the keys' first eight bytes as a big-endian integer, ties by the whole
            // key: the same order as by the whole key (a shorter key is zero-padded, and a tie
            // says nothing), with one integer comparison for most pairs instead of a `memcmp`.
            let mut dirty: Vec<Dirty<'_>> = map
                .iter()
                .filter(|(_, v)| v.dirty)
                .map(|(k, v)| (key_prefix(k), &**k, v.value.as_deref()))
                .collect();
            dirty.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(b.1)));
            for (_, k, v) in dirty {
                f(s, k, v);
            }
        }
    }

    /// Marks every entry clean (RocksDB has them now).
    pub(crate) fn mark_clean(&mut self) {
        if self.dirty == 0 {
            return;
        }
        for map in &mut self.states {
            for slot in map.values_mut() {
                slot.dirty = false;
            }
        }
        self.dirty = 0;
        self.dirty_bytes = 0;
    }

    /// Forgets every entry (none may be dirty).
    pub(crate) fn clear(&mut self) {
        debug_assert_eq!(self.dirty, 0, "clearing a cache with unwritten entries");
        for m in &mut self.states {
            *m = HashMap::with_hasher(FixedState::default());
        }
        self.bytes = 0;
        self.dirty = 0;
        self.dirty_bytes = 0;
        self.misses_while_full = 0;
        self.writes_while_full = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The dirty bytes follow every way an entry changes: a dirty write, an overwrite (dirty or
    /// of a clean entry), a delete, a removal, and the write-back that marks all clean.
    #[test]
    fn dirty_bytes_are_kept_exactly() {
        let mut c = WriteBack::new(1 << 20, 100);
        c.set(0, b"k1", Some(&[0; 40]), true); // 42
        c.set(0, b"k2", Some(&[0; 40]), false); // clean: not counted
        assert!(!c.dirty_over_limit());
        c.set(0, b"k1", Some(&[0; 50]), true); // 52
        c.set(1, b"k3", Some(&[0; 46]), true); // 52 + 48 = 100
        assert!(!c.dirty_over_limit());
        c.set(0, b"k2", Some(&[0; 1]), true); // + 3 = 103
        assert!(c.dirty_over_limit());
        c.set(0, b"k2", None, true); // deleted: its key only, 102
        assert!(c.dirty_over_limit());
        let _ = c.take(1, b"k3"); // 54
        assert!(!c.dirty_over_limit());
        c.set(1, b"k4", Some(&[0; 60]), true); // 116
        assert!(c.dirty_over_limit());
        c.mark_clean();
        assert!(!c.dirty_over_limit());
        assert!(!c.has_dirty());
        // A clean entry made dirty counts again.
        c.set(1, b"k4", Some(&[0; 99]), true);
        assert!(c.dirty_over_limit());
        c.mark_clean();
        c.clear();
        assert!(!c.dirty_over_limit());
    }
}
