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
//! [`Arc::make_mut`] on the one shard they touch, so after a snapshot (which holds clones of
//! these `Arc`s) a write copies at most one shard, and each shard at most once per snapshot.

use hashbrown::hash_table::Entry as TableEntry;
use hashbrown::HashTable;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;

/// Shards hold up to about this many entries before they split.
pub(crate) const MAX_SHARD_LEN: usize = 1024;

/// Shards never split beyond this local depth (guards against degenerate hashes; a
/// directory of `2^MAX_DEPTH` slots is the worst case).
const MAX_DEPTH: u8 = 20;

/// Bits of the hash used for the directory start here; hashbrown uses the low bits for the
/// bucket and the top 7 bits for its tag, so the middle bits are free.
const DIR_SHIFT: u32 = 32;

const HASH_SEED: u64 = 0x5eed_57a7_e0b1_0c55;

/// Hash of a composite `(key, namespace)`, the same for owned and borrowed forms.
#[inline]
pub(crate) fn hash_key_ns(key: &[u8], namespace: &[u8]) -> u64 {
    let mut h = foldhash::fast::FixedState::with_seed(HASH_SEED).build_hasher();
    h.write(key);
    h.write_usize(key.len());
    h.write(namespace);
    h.finish()
}

/// Longest `key ‖ namespace` kept inline in a slot.
const KEY_INLINE: usize = 29;

/// The composite key bytes: `key` followed by `namespace`, inline when short.
#[derive(Clone, Debug)]
enum KeyBuf {
    Inline {
        len: u8,
        key_len: u8,
        data: [u8; KEY_INLINE],
    },
    Heap {
        key_len: u32,
        bytes: Box<[u8]>,
    },
}

impl KeyBuf {
    #[inline]
    fn new(key: &[u8], namespace: &[u8]) -> Self {
        let len = key.len() + namespace.len();
        if len <= KEY_INLINE {
            let mut data = [0u8; KEY_INLINE];
            data[..key.len()].copy_from_slice(key);
            data[key.len()..len].copy_from_slice(namespace);
            KeyBuf::Inline {
                len: len as u8,
                key_len: key.len() as u8,
                data,
            }
        } else {
            let mut bytes = Vec::with_capacity(len);
            bytes.extend_from_slice(key);
            bytes.extend_from_slice(namespace);
            KeyBuf::Heap {
                key_len: u32::try_from(key.len()).expect("keys are shorter than 4 GiB"),
                bytes: bytes.into_boxed_slice(),
            }
        }
    }

    /// `(key, namespace)`.
    #[inline]
    fn parts(&self) -> (&[u8], &[u8]) {
        match self {
            KeyBuf::Inline { len, key_len, data } => data[..usize::from(*len)].split_at(usize::from(*key_len)),
            KeyBuf::Heap { key_len, bytes } => bytes.split_at(*key_len as usize),
        }
    }
}

/// One stored `(key, namespace) → value` pair.
#[derive(Clone, Debug)]
pub(crate) struct Slot<V> {
    key: KeyBuf,
    /// The stored value.
    pub(crate) value: V,
}

impl<V> Slot<V> {
    #[inline]
    fn new(key: &[u8], namespace: &[u8], value: V) -> Self {
        Slot {
            key: KeyBuf::new(key, namespace),
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

    #[inline]
    fn matches(&self, key: &[u8], namespace: &[u8]) -> bool {
        let (k, n) = self.key.parts();
        k == key && n == namespace
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

/// A shard: one hash table and its local depth.
#[derive(Clone, Debug)]
pub(crate) struct Shard<V> {
    depth: u8,
    table: HashTable<Slot<V>>,
}

impl<V> Shard<V> {
    fn new(depth: u8) -> Self {
        Shard {
            depth,
            table: HashTable::new(),
        }
    }
}

/// The table of one state in one key group. See the module docs.
#[derive(Clone, Debug)]
pub(crate) struct KgTable<V> {
    /// `2^global_depth` slots, each an index into `shards`.
    dir: Vec<u32>,
    global_depth: u8,
    shards: Vec<Arc<Shard<V>>>,
    len: usize,
}

impl<V> Default for KgTable<V> {
    fn default() -> Self {
        // Empty until the first insert: a backend owning thousands of key groups pays
        // nothing for the empty ones.
        KgTable {
            dir: Vec::new(),
            global_depth: 0,
            shards: Vec::new(),
            len: 0,
        }
    }
}

impl<V> KgTable<V> {
    #[inline]
    fn shard_index(&self, hash: u64) -> Option<usize> {
        let mask = (1u64 << self.global_depth) - 1;
        self.dir.get(((hash >> DIR_SHIFT) & mask) as usize).map(|&s| s as usize)
    }

    /// Number of `(key, namespace)` entries.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Number of shards (for tests and stats).
    #[cfg(test)]
    pub(crate) fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// The shard `Arc`s (for tests checking sharing).
    #[cfg(test)]
    pub(crate) fn shard_arcs(&self) -> &[Arc<Shard<V>>] {
        &self.shards
    }

    /// Looks up `(key, namespace)` whose hash is `hash`.
    #[inline]
    pub(crate) fn get(&self, hash: u64, key: &[u8], namespace: &[u8]) -> Option<&V> {
        self.shards[self.shard_index(hash)?]
            .table
            .find(hash, |s| s.matches(key, namespace))
            .map(|s| &s.value)
    }

    /// Every slot, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Slot<V>> + '_ {
        self.shards.iter().flat_map(|s| s.table.iter())
    }
}

impl<V: Clone> KgTable<V> {
    /// Mutable access to an existing value. Copies the shard first if a snapshot shares it,
    /// but only when the entry exists.
    #[inline]
    pub(crate) fn get_mut(&mut self, hash: u64, key: &[u8], namespace: &[u8]) -> Option<&mut V> {
        let si = self.shard_index(hash)?;
        self.shards[si].table.find(hash, |s| s.matches(key, namespace))?;
        Arc::make_mut(&mut self.shards[si])
            .table
            .find_mut(hash, |s| s.matches(key, namespace))
            .map(|s| &mut s.value)
    }

    /// Mutable access to the value, inserting `make()` first when absent. The returned
    /// flag is true when the entry was created.
    #[inline]
    pub(crate) fn get_or_insert_with(
        &mut self,
        hash: u64,
        key: &[u8],
        namespace: &[u8],
        make: impl FnOnce() -> V,
    ) -> (&mut V, bool) {
        let mut si = match self.shard_index(hash) {
            Some(si) => si,
            None => {
                self.dir.push(0);
                self.shards.push(Arc::new(Shard::new(0)));
                0
            }
        };
        if self.shards[si].table.len() >= MAX_SHARD_LEN && self.shards[si].depth < MAX_DEPTH {
            self.split(si);
            si = self.shard_index(hash).expect("a shard after the split");
        }
        let shard = Arc::make_mut(&mut self.shards[si]);
        match shard.table.entry(hash, |s| s.matches(key, namespace), Slot::hash) {
            TableEntry::Occupied(o) => (&mut o.into_mut().value, false),
            TableEntry::Vacant(v) => {
                self.len += 1;
                (&mut v.insert(Slot::new(key, namespace, make())).into_mut().value, true)
            }
        }
    }

    /// Removes `(key, namespace)`, returning its value. Shares nothing new when absent.
    pub(crate) fn remove(&mut self, hash: u64, key: &[u8], namespace: &[u8]) -> Option<V> {
        let si = self.shard_index(hash)?;
        self.shards[si].table.find(hash, |s| s.matches(key, namespace))?;
        let shard = Arc::make_mut(&mut self.shards[si]);
        let (slot, _) = shard
            .table
            .find_entry(hash, |s| s.matches(key, namespace))
            .ok()?
            .remove();
        self.len -= 1;
        Some(slot.value)
    }

    /// Keeps the slots for which `f` returns true, visiting (and so copying, if shared)
    /// every shard. `f` may modify the value.
    pub(crate) fn retain_mut(&mut self, mut f: impl FnMut(&mut V) -> bool) {
        let mut len = 0;
        for shard in &mut self.shards {
            if shard.table.is_empty() {
                continue;
            }
            let shard = Arc::make_mut(shard);
            shard.table.retain(|s| f(&mut s.value));
            len += shard.table.len();
        }
        self.len = len;
    }

    /// Splits shard `si` in two on the next hash bit, doubling the directory if needed.
    fn split(&mut self, si: usize) {
        let depth = self.shards[si].depth;
        if depth == self.global_depth {
            self.dir.extend_from_within(..);
            self.global_depth += 1;
        }
        let new_index = self.shards.len() as u32;
        let bit = 1u64 << depth;
        let old = Arc::make_mut(&mut self.shards[si]);
        old.depth = depth + 1;
        let mut moved = Shard::new(depth + 1);
        for slot in old.table.extract_if(|s| (s.hash() >> DIR_SHIFT) & bit != 0) {
            moved.table.insert_unique(slot.hash(), slot, Slot::hash);
        }
        old.table.shrink_to_fit(Slot::hash);
        self.shards.push(Arc::new(moved));
        for (j, slot) in self.dir.iter_mut().enumerate() {
            if *slot as usize == si && (j as u64) & bit != 0 {
                *slot = new_index;
            }
        }
        tracing::trace!(
            shards = self.shards.len(),
            global_depth = self.global_depth,
            "split shard"
        );
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
            let h = hash_key_ns(&k, b"ns");
            let (v, created) = t.get_or_insert_with(h, &k, b"ns", || i);
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
            assert_eq!(t.get(hash_key_ns(&k, b"ns"), &k, b"ns"), Some(&i));
            assert_eq!(t.get(hash_key_ns(&k, b"nt"), &k, b"nt"), None);
        }
        // Directory consistency: every slot points at a shard whose entries hash there.
        let mask = (1u64 << t.global_depth) - 1;
        for (j, &s) in t.dir.iter().enumerate() {
            let shard = &t.shards[s as usize];
            let lmask = (1u64 << shard.depth) - 1;
            for slot in shard.table.iter() {
                assert_eq!((slot.hash() >> DIR_SHIFT) & lmask, (j as u64) & lmask);
                assert!((((slot.hash() >> DIR_SHIFT) & mask) as usize) < t.dir.len());
            }
        }
        for i in (0..n).step_by(2) {
            let k = key(i);
            assert_eq!(t.remove(hash_key_ns(&k, b"ns"), &k, b"ns"), Some(i));
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
            let s = Slot::new(k, n, ());
            assert_eq!((s.key(), s.namespace()), (k, n));
            assert!(s.matches(k, n));
            assert_eq!(s.hash(), hash_key_ns(k, n));
            assert_eq!(s.key_heap_bytes() > 0, k.len() + n.len() > KEY_INLINE);
        }
    }

    #[test]
    fn empty_table_has_no_shards() {
        let mut t: KgTable<u8> = KgTable::default();
        assert_eq!(t.shard_count(), 0);
        let h = hash_key_ns(b"k", b"");
        assert_eq!(t.get(h, b"k", b""), None);
        assert_eq!(t.get_mut(h, b"k", b""), None);
        assert_eq!(t.remove(h, b"k", b""), None);
        assert_eq!(t.iter().count(), 0);
        t.get_or_insert_with(h, b"k", b"", || 1);
        assert_eq!(t.shard_count(), 1);
        assert_eq!(t.get(h, b"k", b""), Some(&1));
    }

    #[test]
    fn composite_key_boundary_matters() {
        let mut t: KgTable<u8> = KgTable::default();
        t.get_or_insert_with(hash_key_ns(b"ab", b"c"), b"ab", b"c", || 1);
        assert_eq!(t.get(hash_key_ns(b"a", b"bc"), b"a", b"bc"), None);
        t.get_or_insert_with(hash_key_ns(b"a", b"bc"), b"a", b"bc", || 2);
        assert_eq!(t.get(hash_key_ns(b"ab", b"c"), b"ab", b"c"), Some(&1));
        assert_eq!(t.get(hash_key_ns(b"a", b"bc"), b"a", b"bc"), Some(&2));
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn clone_shares_shards_and_writes_copy_one() {
        let mut t: KgTable<u32> = KgTable::default();
        for i in 0..10_000u32 {
            let k = key(i);
            t.get_or_insert_with(hash_key_ns(&k, b""), &k, b"", || i);
        }
        let frozen = t.clone();
        let shards = t.shard_count();
        assert!(shards > 4);
        let k = key(77);
        *t.get_mut(hash_key_ns(&k, b""), &k, b"").expect("present") = 1_000_000;
        let copied = t
            .shard_arcs()
            .iter()
            .zip(frozen.shard_arcs())
            .filter(|(a, b)| !Arc::ptr_eq(a, b))
            .count();
        assert_eq!(copied, 1);
        assert_eq!(frozen.get(hash_key_ns(&k, b""), &k, b""), Some(&77));
        assert_eq!(t.get(hash_key_ns(&k, b""), &k, b""), Some(&1_000_000));
        // Reading or removing an absent key copies nothing.
        let absent = key(99_999);
        assert!(t.get_mut(hash_key_ns(&absent, b""), &absent, b"").is_none());
        assert!(t.remove(hash_key_ns(&absent, b""), &absent, b"").is_none());
        let copied = t
            .shard_arcs()
            .iter()
            .zip(frozen.shard_arcs())
            .filter(|(a, b)| !Arc::ptr_eq(a, b))
            .count();
        assert_eq!(copied, 1);
    }
}
