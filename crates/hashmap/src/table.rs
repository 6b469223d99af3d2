//! The per-key-group table: an extendible hash table whose shards are copy-on-write.
//!
//! A [`KgTable`] maps a composite `(key, namespace)` to a value `V`. It is split into
//! *shards*, each a [`hashbrown::HashTable`] of at most about [`MAX_SHARD_LEN`] entries behind
//! an [`Arc`]. A directory of `2^global_depth` slots, indexed by hash bits 32.., maps each
//! hash to its shard (classic extendible hashing: a shard of local depth `d` is referenced by
//! `2^(global_depth - d)` slots). A full shard splits in two on the next insert into it, so
//! no single operation ever rehashes or copies more than one shard.
//!
//! Cloning a `KgTable` clones the directory and the shard [`Arc`]s only. Mutations go through
//! copy-on-write ([`crate::cow::make_mut`], `Arc::make_mut` semantics) on the one shard they
//! touch, so after a snapshot (which holds clones of these `Arc`s) a write copies at most one
//! shard, and each shard at most once per snapshot.
//!
//! Operations look entries up with a [`Probe`]: the borrowed key and namespace and the key's
//! murmur3 hash (the one that picks its key group) spread over 64 bits and mixed with the
//! namespace.

use crate::bytes::{bytes_eq, copy_short};
use crate::cow::make_mut;
use hashbrown::hash_table::Entry as TableEntry;
use hashbrown::HashTable;
use statekit_core::hash::murmur3_x86_32;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;

/// Shards hold up to this many entries before they split: 7/8 of 1024, hashbrown's capacity
/// at 1024 buckets, so a shard never grows to 2048 buckets just before it splits.
pub(crate) const MAX_SHARD_LEN: usize = 896;

/// Shards never split beyond this local depth (guards against degenerate hashes; a
/// directory of `2^MAX_DEPTH` slots is the worst case).
const MAX_DEPTH: u8 = 20;

/// Bits of the hash used for the directory start here; hashbrown uses the low bits for the
/// bucket and the top 7 bits for its tag, so the middle bits are free.
pub(crate) const DIR_SHIFT: u32 = 32;

/// Whether a split of a shard on directory bit `bit` ([`ShardTable::split_off`]) moves the
/// entry of `hash` to the new shard.
#[inline(always)]
pub(crate) fn splits_away(hash: u64, bit: u64) -> bool {
    (hash >> DIR_SHIFT) & bit != 0
}

const NS_SEED: u64 = 0x5eed_57a7_e0b1_0c55;

/// The key's murmur3 hash: the one that also picks its key group
/// ([`statekit_core::key_group_for_key`]), so an operation hashes the key bytes once.
#[inline(always)]
pub(crate) fn key_hash(key: &[u8]) -> u32 {
    // The common `Long` key without the generic loops.
    match <&[u8; 8]>::try_from(key) {
        Ok(k) => statekit_core::hash::murmur3_x86_32_of8(k, 0),
        Err(_) => murmur3_x86_32(key, 0),
    }
}

/// The table hash of a composite `(key, namespace)` given the key's [`key_hash`], the same
/// for owned and borrowed forms. The key hash is already murmur3's finalised output, so one
/// multiply by an odd 64-bit constant spreads it over 64 bits (its low bits alone are the key
/// group's, constant in a table; the probe start takes bits 0..32 scaled, so mostly their top,
/// the directory bits 32.. and the control tag the top 7, all of which the multiply's carries
/// fill from every bit of the key hash). A non-empty namespace is folded in with foldhash.
/// Flink's heap backend does the same: its `CopyOnWriteStateMap` mixes the key's `hashCode`
/// (the one that picks the key group) with the namespace's. (Until 2026-12-05 murmur3's
/// 64-bit finaliser spread it: two multiplies and three shifts more on the way from the key
/// to its first cache miss; without them StateBench's `value_get` runs 23–45 % faster, design
/// note 0002.)
#[inline(always)]
pub(crate) fn table_hash(key_hash: u32, namespace: &[u8]) -> u64 {
    let ns = if namespace.is_empty() {
        0
    } else {
        let mut h = foldhash::fast::FixedState::with_seed(NS_SEED).build_hasher();
        h.write(namespace);
        h.finish()
    };
    (u64::from(key_hash) ^ ns).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// Hash of a composite `(key, namespace)` from its bytes (tests and rehashing).
#[inline]
pub(crate) fn hash_key_ns(key: &[u8], namespace: &[u8]) -> u64 {
    table_hash(key_hash(key), namespace)
}

/// Longest `key ‖ namespace` kept inline in a slot.
const KEY_INLINE: usize = 29;

/// `key ‖ namespace` stored inline.
#[derive(Clone, Copy, Debug)]
struct InlineKey {
    len: u8,
    key_len: u8,
    data: [u8; KEY_INLINE],
}

impl InlineKey {
    #[inline(always)]
    fn new(key: &[u8], namespace: &[u8]) -> Option<Self> {
        let len = key.len() + namespace.len();
        if len > KEY_INLINE {
            return None;
        }
        let mut data = [0u8; KEY_INLINE];
        copy_short(&mut data[..key.len()], key);
        copy_short(&mut data[key.len()..len], namespace);
        Some(InlineKey {
            len: len as u8,
            key_len: key.len() as u8,
            data,
        })
    }
}

/// The composite key bytes: `key` followed by `namespace`, inline when short.
#[derive(Clone, Debug)]
enum KeyBuf {
    Inline(InlineKey),
    Heap { key_len: u32, bytes: Box<[u8]> },
}

impl KeyBuf {
    #[inline]
    fn of(p: &Probe<'_>) -> Self {
        match InlineKey::new(p.key, p.namespace) {
            Some(k) => KeyBuf::Inline(k),
            None => {
                let mut bytes = Vec::with_capacity(p.key.len() + p.namespace.len());
                bytes.extend_from_slice(p.key);
                bytes.extend_from_slice(p.namespace);
                KeyBuf::Heap {
                    key_len: u32::try_from(p.key.len()).expect("keys are shorter than 4 GiB"),
                    bytes: bytes.into_boxed_slice(),
                }
            }
        }
    }

    /// `(key, namespace)`.
    #[inline]
    fn parts(&self) -> (&[u8], &[u8]) {
        match self {
            KeyBuf::Inline(k) => k.data[..usize::from(k.len)].split_at(usize::from(k.key_len)),
            KeyBuf::Heap { key_len, bytes } => bytes.split_at(*key_len as usize),
        }
    }
}

/// A `(key, namespace)` being looked up: the borrowed bytes and the table hash.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Probe<'a> {
    key: &'a [u8],
    namespace: &'a [u8],
    hash: u64,
}

impl<'a> Probe<'a> {
    /// The key.
    #[inline(always)]
    pub(crate) fn key(&self) -> &'a [u8] {
        self.key
    }

    /// The namespace.
    #[inline(always)]
    pub(crate) fn namespace(&self) -> &'a [u8] {
        self.namespace
    }

    /// The table hash.
    #[inline(always)]
    pub(crate) fn hash(&self) -> u64 {
        self.hash
    }

    /// A probe for `(key, namespace)`.
    #[inline]
    pub(crate) fn new(key: &'a [u8], namespace: &'a [u8]) -> Self {
        Self::with_key_hash(key, namespace, key_hash(key))
    }

    /// A probe for `(key, namespace)` whose [`key_hash`] is already known.
    #[inline(always)]
    pub(crate) fn with_key_hash(key: &'a [u8], namespace: &'a [u8], key_hash: u32) -> Self {
        Probe {
            key,
            namespace,
            hash: table_hash(key_hash, namespace),
        }
    }
}

/// One stored `(key, namespace) → value` pair.
///
/// Aligned to a cache line: a value slot is exactly 64 bytes, and with hashbrown's default
/// 16-byte bucket alignment most slots would straddle two lines (two misses per lookup on a
/// table larger than the cache).
#[derive(Clone, Debug)]
#[repr(align(64))]
pub(crate) struct Slot<V> {
    key: KeyBuf,
    /// The stored value.
    pub(crate) value: V,
}

impl<V> Slot<V> {
    #[inline]
    fn new(p: &Probe<'_>, value: V) -> Self {
        Slot {
            key: KeyBuf::of(p),
            value,
        }
    }

    /// The key bytes.
    #[inline]
    pub(crate) fn key(&self) -> &[u8] {
        self.key.parts().0
    }

    /// The namespace bytes.
    #[inline]
    pub(crate) fn namespace(&self) -> &[u8] {
        self.key.parts().1
    }

    /// True when this slot holds `p`'s key and namespace. Compares with overlapping
    /// fixed-size loads, no `memcmp` call, and nothing built per lookup.
    #[inline(always)]
    fn matches(&self, p: &Probe<'_>) -> bool {
        match &self.key {
            KeyBuf::Inline(k) => {
                let (kl, len) = (usize::from(k.key_len), usize::from(k.len));
                kl == p.key.len()
                    && len == kl + p.namespace.len()
                    && bytes_eq(&k.data[..kl], p.key)
                    && bytes_eq(&k.data[kl..len], p.namespace)
            }
            KeyBuf::Heap { key_len, bytes } => {
                let (k, n) = bytes.split_at(*key_len as usize);
                k == p.key && n == p.namespace
            }
        }
    }

    #[inline]
    fn hash(&self) -> u64 {
        let (k, n) = self.key.parts();
        hash_key_ns(k, n)
    }

    /// Heap bytes of the key part (0 when inline).
    pub(crate) fn key_heap_bytes(&self) -> usize {
        match &self.key {
            KeyBuf::Inline { .. } => 0,
            KeyBuf::Heap { bytes, .. } => bytes.len(),
        }
    }
}

/// What a directory needs of the table inside a shard.
pub(crate) trait ShardTable: Clone {
    /// Entries a shard holds before it splits.
    const MAX_LEN: usize = MAX_SHARD_LEN;
    /// Entries held.
    fn len(&self) -> usize;
    /// Moves the entries whose hash has `bit` set in its directory bits (`hash >>
    /// DIR_SHIFT`) into a new table, which it returns; the rest stay. Both come out sized for
    /// what they hold.
    fn split_off(&mut self, bit: u64) -> Self;
}

/// A shard: one table and its local depth.
#[derive(Clone, Debug)]
pub(crate) struct Shard<T> {
    depth: u8,
    pub(crate) table: T,
}

/// The extendible-hashing directory of one state in one key group: copy-on-write shards of
/// at most [`MAX_SHARD_LEN`] entries (see the module docs). `T` is the table inside a shard:
/// hashbrown slots ([`KgTable`]) or a packed table (`crate::packed`).
#[derive(Clone, Debug)]
pub(crate) struct Dir<T> {
    /// `2^global_depth` slots, each an index into `shards` and that shard's address.
    dir: Vec<DirSlot<T>>,
    global_depth: u8,
    shards: Vec<Arc<Shard<T>>>,
    len: usize,
}

/// A directory slot: the index of its shard in `shards`, and the shard's address, so that a
/// lookup goes from the directory to the shard without loading its `Arc` first (one dependent
/// load fewer on the way from a key to its first cache miss).
///
/// Invariant, kept by every `&mut` method of [`Dir`]: `ptr == Arc::as_ptr(&shards[index])`.
/// The `Arc` in `shards` keeps the shard alive while the directory holds it, and nothing
/// replaces or copies it without repointing the slots that name it ([`writable`]).
#[derive(Debug)]
struct DirSlot<T> {
    index: u32,
    ptr: *const Shard<T>,
}

impl<T> Clone for DirSlot<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for DirSlot<T> {}

// SAFETY: a `DirSlot` is a shared reference in all but name to a shard owned (through its
// `Arc`) by the same `Dir`; sending or sharing it is sending or sharing `&Shard<T>`, which
// `Arc<Shard<T>>`'s own bounds (`T: Send + Sync`) allow.
unsafe impl<T: Send + Sync> Send for DirSlot<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Sync for DirSlot<T> {}

/// Points the directory slots of shard `si` at `ptr` (its allocation after a copy).
#[cold]
#[inline(never)]
fn point_slots<T>(dir: &mut [DirSlot<T>], si: usize, ptr: *const Shard<T>) {
    for slot in dir {
        if slot.index as usize == si {
            slot.ptr = ptr;
        }
    }
}

/// Shard `si` (`shard`, of the directory `dir`), writable: copied first if a snapshot shares
/// it, and the slots of `dir` that name it pointed at the copy.
#[inline(always)]
fn writable<'s, T: Clone>(dir: &mut [DirSlot<T>], si: usize, shard: &'s mut Arc<Shard<T>>) -> &'s mut Shard<T> {
    let before = Arc::as_ptr(shard);
    let s = make_mut(shard);
    if !std::ptr::eq(&*s, before) {
        point_slots(dir, si, &*s);
    }
    s
}

/// The table of one state in one key group, over hashbrown slots.
pub(crate) type KgTable<V> = Dir<HashTable<Slot<V>>>;

impl<T> Default for Dir<T> {
    fn default() -> Self {
        // Empty until the first insert: a backend owning thousands of key groups pays
        // nothing for the empty ones.
        Dir {
            dir: Vec::new(),
            global_depth: 0,
            shards: Vec::new(),
            len: 0,
        }
    }
}

impl<T> Dir<T> {
    #[inline(always)]
    fn slot(&self, hash: u64) -> Option<DirSlot<T>> {
        // The directory has 2^global_depth slots (none before the first insert: every index
        // is then out of range).
        let mask = self.dir.len().wrapping_sub(1);
        self.dir.get((hash >> DIR_SHIFT) as usize & mask).copied()
    }

    #[inline]
    fn shard_index(&self, hash: u64) -> Option<usize> {
        self.slot(hash).map(|s| s.index as usize)
    }

    /// Number of entries.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The table of the shard `hash` belongs to.
    #[inline]
    pub(crate) fn shard(&self, hash: u64) -> Option<&T> {
        let slot = self.slot(hash)?;
        // SAFETY: by the `DirSlot` invariant `slot.ptr` is the address of the shard in
        // `self.shards[slot.index]`, whose `Arc` keeps it alive and unchanged while `self` is
        // borrowed (only `&mut self` methods replace or write shards, and they refresh it).
        Some(unsafe { &(*slot.ptr).table })
    }

    /// Every shard's table.
    pub(crate) fn tables(&self) -> impl Iterator<Item = &T> + '_ {
        self.shards.iter().map(|s| &s.table)
    }

    /// Records entries added (positive) or removed (negative) through [`Dir::shard_mut`] or
    /// [`Dir::shard_for_insert`].
    #[inline]
    pub(crate) fn count(&mut self, added: isize) {
        self.len = self.len.saturating_add_signed(added);
    }

    /// Number of shards (for tests and stats).
    #[cfg(test)]
    pub(crate) fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// The shard `Arc`s (for tests checking sharing).
    #[cfg(test)]
    pub(crate) fn shard_arcs(&self) -> &[Arc<Shard<T>>] {
        &self.shards
    }

    /// Asserts the [`DirSlot`] invariant (tests).
    #[cfg(test)]
    pub(crate) fn check_slots(&self) {
        for (j, slot) in self.dir.iter().enumerate() {
            let shard = &self.shards[slot.index as usize];
            assert!(
                std::ptr::eq(slot.ptr, Arc::as_ptr(shard)),
                "directory slot {j} points at a stale shard"
            );
        }
    }
}

impl<T: ShardTable> Dir<T> {
    /// The table of the shard `hash` belongs to, writable: copied first if a snapshot shares
    /// it. `None` when the directory is empty.
    #[inline]
    pub(crate) fn shard_mut(&mut self, hash: u64) -> Option<&mut T> {
        let si = self.shard_index(hash)?;
        let Dir { dir, shards, .. } = self;
        shards.get_mut(si).map(|s| &mut writable(dir, si, s).table)
    }

    /// The writable table an entry of `hash` is to be inserted into, and the entry count to
    /// update: the first shard is made with `make`, and a full shard is split first.
    #[inline(always)]
    pub(crate) fn shard_for_insert(&mut self, hash: u64, make: impl FnOnce() -> T) -> (&mut T, &mut usize) {
        // The common case inline (a shard with room); the first shard and splits out of line.
        let si = match self.shard_index(hash) {
            Some(si)
                if self
                    .shards
                    .get(si)
                    .is_some_and(|s| s.table.len() < T::MAX_LEN || s.depth >= MAX_DEPTH) =>
            {
                si
            }
            _ => self.make_shard_room(hash, make),
        };
        let Dir { dir, shards, len, .. } = self;
        (&mut writable(dir, si, &mut shards[si]).table, len)
    }

    /// [`Self::shard_for_insert`]'s uncommon cases: the table's first shard, or a full shard
    /// split first. Returns the shard index for `hash`.
    #[cold]
    #[inline(never)]
    fn make_shard_room(&mut self, hash: u64, make: impl FnOnce() -> T) -> usize {
        let mut si = match self.shard_index(hash) {
            Some(si) => si,
            None => self.first_shard(make()),
        };
        if self.shards[si].table.len() >= T::MAX_LEN && self.shards[si].depth < MAX_DEPTH {
            self.split(si);
            si = self.shard_index(hash).expect("a shard after the split");
        }
        si
    }

    /// Keeps the entries of every shard for which `f` (given a writable shard table, copied
    /// first if shared) says so; `f` returns the entries left. Visits every non-empty shard.
    pub(crate) fn retain_shards(&mut self, mut f: impl FnMut(&mut T) -> usize) {
        let mut len = 0;
        let Dir { dir, shards, .. } = self;
        for (si, shard) in shards.iter_mut().enumerate() {
            if shard.table.len() == 0 {
                continue;
            }
            len += f(&mut writable(dir, si, shard).table);
        }
        self.len = len;
    }

    /// Creates the first shard of an empty table.
    #[cold]
    fn first_shard(&mut self, table: T) -> usize {
        let shard = Arc::new(Shard { depth: 0, table });
        self.dir.push(DirSlot {
            index: 0,
            ptr: Arc::as_ptr(&shard),
        });
        self.shards.push(shard);
        0
    }

    /// Splits shard `si` in two on the next hash bit, doubling the directory if needed.
    #[cold]
    #[inline(never)]
    fn split(&mut self, si: usize) {
        let depth = self.shards[si].depth;
        if depth == self.global_depth {
            self.dir.extend_from_within(..);
            self.global_depth += 1;
        }
        let new_index = self.shards.len() as u32;
        let bit = 1u64 << depth;
        let old = writable(&mut self.dir, si, &mut self.shards[si]);
        old.depth = depth + 1;
        let moved = old.table.split_off(bit);
        let moved = Arc::new(Shard {
            depth: depth + 1,
            table: moved,
        });
        let moved_ptr = Arc::as_ptr(&moved);
        self.shards.push(moved);
        for (j, slot) in self.dir.iter_mut().enumerate() {
            if slot.index as usize == si && (j as u64) & bit != 0 {
                *slot = DirSlot {
                    index: new_index,
                    ptr: moved_ptr,
                };
            }
        }
        tracing::trace!(
            shards = self.shards.len(),
            global_depth = self.global_depth,
            "split shard"
        );
    }
}

impl<V: Clone> ShardTable for HashTable<Slot<V>> {
    fn len(&self) -> usize {
        HashTable::len(self)
    }

    /// Both halves get fresh tables sized for a full shard (no tombstones, no regrowth), and
    /// each entry is hashed once.
    fn split_off(&mut self, bit: u64) -> Self {
        let mut stay = HashTable::with_capacity(MAX_SHARD_LEN);
        let mut moved = HashTable::with_capacity(MAX_SHARD_LEN);
        for slot in std::mem::take(self) {
            let hash = slot.hash();
            let side = if splits_away(hash, bit) { &mut moved } else { &mut stay };
            side.insert_unique(hash, slot, Slot::hash);
        }
        *self = stay;
        moved
    }
}

impl<V> KgTable<V> {
    /// Looks up `p`.
    #[inline]
    pub(crate) fn get(&self, p: &Probe<'_>) -> Option<&V> {
        self.shard(p.hash)?.find(p.hash, |s| s.matches(p)).map(|s| &s.value)
    }

    /// Every slot, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Slot<V>> + '_ {
        self.tables().flat_map(|t| t.iter())
    }
}

impl<V: Clone> KgTable<V> {
    /// Mutable access to an existing value. Copies the shard first if a snapshot shares it,
    /// but only when the entry exists.
    #[inline]
    pub(crate) fn get_mut(&mut self, p: &Probe<'_>) -> Option<&mut V> {
        self.shard(p.hash)?.find(p.hash, |s| s.matches(p))?;
        self.shard_mut(p.hash)?
            .find_mut(p.hash, |s| s.matches(p))
            .map(|s| &mut s.value)
    }

    /// Mutable access to the value, inserting `make()` first when absent. The returned
    /// flag is true when the entry was created.
    #[inline]
    pub(crate) fn get_or_insert_with(&mut self, p: &Probe<'_>, make: impl FnOnce() -> V) -> (&mut V, bool) {
        let (table, len) = self.shard_for_insert(p.hash, HashTable::new);
        match table.entry(p.hash, |s| s.matches(p), Slot::hash) {
            TableEntry::Occupied(o) => (&mut o.into_mut().value, false),
            TableEntry::Vacant(v) => {
                *len += 1;
                (&mut v.insert(Slot::new(p, make())).into_mut().value, true)
            }
        }
    }

    /// Removes `p`, returning its value. Shares nothing new when absent.
    pub(crate) fn remove(&mut self, p: &Probe<'_>) -> Option<V> {
        self.shard(p.hash)?.find(p.hash, |s| s.matches(p))?;
        let table = self.shard_mut(p.hash)?;
        let (slot, _) = table.find_entry(p.hash, |s| s.matches(p)).ok()?.remove();
        self.count(-1);
        Some(slot.value)
    }

    /// Keeps the slots for which `f` returns true, visiting (and so copying, if shared)
    /// every shard. `f` may modify the value.
    pub(crate) fn retain_mut(&mut self, mut f: impl FnMut(&mut V) -> bool) {
        self.retain_shards(|t| {
            t.retain(|s| f(&mut s.value));
            t.len()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u32) -> Vec<u8> {
        i.to_be_bytes().to_vec()
    }

    #[test]
    fn insert_get_remove_across_splits() {
        let mut t: KgTable<u32> = KgTable::default();
        let n = 20_000u32;
        for i in 0..n {
            let k = key(i);
            let (v, created) = t.get_or_insert_with(&Probe::new(&k, b"ns"), || i);
            assert!(created);
            assert_eq!(*v, i);
        }
        assert_eq!(t.len(), n as usize);
        assert!(t.shard_count() >= (n as usize) / MAX_SHARD_LEN);
        for shard in t.shard_arcs() {
            assert!(shard.table.len() <= MAX_SHARD_LEN);
        }
        for i in 0..n {
            let k = key(i);
            assert_eq!(t.get(&Probe::new(&k, b"ns")), Some(&i));
            assert_eq!(t.get(&Probe::new(&k, b"nt")), None);
        }
        // Directory consistency: every slot points at a shard whose entries hash there.
        let mask = (1u64 << t.global_depth) - 1;
        t.check_slots();
        for (j, s) in t.dir.iter().enumerate() {
            let shard = &t.shards[s.index as usize];
            let lmask = (1u64 << shard.depth) - 1;
            for slot in shard.table.iter() {
                assert_eq!((slot.hash() >> DIR_SHIFT) & lmask, (j as u64) & lmask);
                assert!((((slot.hash() >> DIR_SHIFT) & mask) as usize) < t.dir.len());
            }
        }
        for i in (0..n).step_by(2) {
            let k = key(i);
            assert_eq!(t.remove(&Probe::new(&k, b"ns")), Some(i));
        }
        assert_eq!(t.len(), n as usize / 2);
        assert_eq!(t.iter().count(), n as usize / 2);
    }

    #[test]
    fn slot_layout() {
        assert_eq!(std::mem::size_of::<KeyBuf>(), 32);
        let long = [9u8; 40];
        for (k, n) in [
            (&b""[..], &b""[..]),
            (b"ab", b"c"),
            (&long[..20], &long[..9]),
            (&long[..20], &long[..10]),
            (&long, b"x"),
        ] {
            let s = Slot::new(&Probe::new(k, n), ());
            assert_eq!((s.key(), s.namespace()), (k, n));
            assert!(s.matches(&Probe::new(k, n)));
            assert!(!s.matches(&Probe::new(n, k)) || k == n);
            assert_eq!(s.hash(), hash_key_ns(k, n));
            assert_eq!(s.key_heap_bytes() > 0, k.len() + n.len() > KEY_INLINE);
        }
    }

    #[test]
    fn empty_table_has_no_shards() {
        let mut t: KgTable<u8> = KgTable::default();
        assert_eq!(t.shard_count(), 0);
        let p = Probe::new(b"k", b"");
        assert_eq!(t.get(&p), None);
        assert_eq!(t.get_mut(&p), None);
        assert_eq!(t.remove(&p), None);
        assert_eq!(t.iter().count(), 0);
        t.get_or_insert_with(&p, || 1);
        assert_eq!(t.shard_count(), 1);
        assert_eq!(t.get(&p), Some(&1));
    }

    #[test]
    fn composite_key_boundary_matters() {
        let mut t: KgTable<u8> = KgTable::default();
        t.get_or_insert_with(&Probe::new(b"ab", b"c"), || 1);
        assert_eq!(t.get(&Probe::new(b"a", b"bc")), None);
        t.get_or_insert_with(&Probe::new(b"a", b"bc"), || 2);
        assert_eq!(t.get(&Probe::new(b"ab", b"c")), Some(&1));
        assert_eq!(t.get(&Probe::new(b"a", b"bc")), Some(&2));
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn clone_shares_shards_and_writes_copy_one() {
        let mut t: KgTable<u32> = KgTable::default();
        for i in 0..10_000u32 {
            let k = key(i);
            t.get_or_insert_with(&Probe::new(&k, b""), || i);
        }
        let frozen = t.clone();
        let shards = t.shard_count();
        assert!(shards > 4);
        let k = key(77);
        *t.get_mut(&Probe::new(&k, b"")).expect("present") = 1_000_000;
        let copied = |t: &KgTable<u32>| {
            t.shard_arcs()
                .iter()
                .zip(frozen.shard_arcs())
                .filter(|(a, b)| !Arc::ptr_eq(a, b))
                .count()
        };
        assert_eq!(copied(&t), 1);
        assert_eq!(frozen.get(&Probe::new(&k, b"")), Some(&77));
        assert_eq!(t.get(&Probe::new(&k, b"")), Some(&1_000_000));
        // Reading or removing an absent key copies nothing.
        let absent = key(99_999);
        assert!(t.get_mut(&Probe::new(&absent, b"")).is_none());
        assert!(t.remove(&Probe::new(&absent, b"")).is_none());
        assert_eq!(copied(&t), 1);
        // Both directories still point at their own shards (the copy at the copy).
        t.check_slots();
        frozen.check_slots();
        // Writes to every shard, inserts that split, and a retain, each after a snapshot:
        // the directory follows every copy and every split, and reads see the writes.
        let mut views = Vec::new();
        for round in 0..4u32 {
            views.push(t.clone());
            for i in (round..40_000u32).step_by(3) {
                let k = key(i);
                *t.get_or_insert_with(&Probe::new(&k, b""), || 0).0 = i + round;
            }
            t.check_slots();
            for i in (round..40_000u32).step_by(3) {
                assert_eq!(t.get(&Probe::new(&key(i), b"")), Some(&(i + round)));
            }
        }
        views.push(t.clone());
        t.retain_shards(|shard| shard.len());
        t.check_slots();
        for v in &views {
            v.check_slots();
        }
        assert_eq!(frozen.get(&Probe::new(&k, b"")), Some(&77));
    }
}
