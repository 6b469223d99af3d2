//! [`MapValue`]: the user-key → value entries of one map state `(key, namespace)`.
//!
//! Most maps in keyed state are small (a handful of user keys per key). A `BTreeMap` costs a
//! ~600-byte leaf allocation even for one entry, so small maps are a vector sorted by user
//! key (one allocation of the entries' size, a linear scan to find a key); past
//! [`SMALL_MAX`] entries the map becomes a `BTreeMap`. Both iterate in ascending user-key
//! order, as `map_for_each` and the snapshot's canonical order need.

use crate::backend::Cell;
use crate::bytes::{bytes_eq, Bytes};
use std::collections::{btree_map, BTreeMap};

/// Largest map kept as a sorted vector.
pub(crate) const SMALL_MAX: usize = 16;

/// The entries of one map, ascending by user key.
#[derive(Clone, Debug)]
pub(crate) enum MapValue {
    /// At most [`SMALL_MAX`] entries, sorted by user key, keys unique.
    Small(Vec<(Bytes, Cell)>),
    /// Larger maps.
    Tree(BTreeMap<Bytes, Cell>),
}

impl Default for MapValue {
    fn default() -> Self {
        MapValue::Small(Vec::new())
    }
}

impl MapValue {
    /// An empty map (allocates nothing).
    #[inline]
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Number of entries.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        match self {
            MapValue::Small(v) => v.len(),
            MapValue::Tree(m) => m.len(),
        }
    }

    /// True when there are no entries.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The cell of `user_key`.
    #[inline]
    pub(crate) fn get(&self, user_key: &[u8]) -> Option<&Cell> {
        match self {
            MapValue::Small(v) => v.iter().find(|(k, _)| bytes_eq(k, user_key)).map(|(_, c)| c),
            MapValue::Tree(m) => m.get(user_key),
        }
    }

    /// The cell of `user_key`, mutably.
    #[inline]
    pub(crate) fn get_mut(&mut self, user_key: &[u8]) -> Option<&mut Cell> {
        match self {
            MapValue::Small(v) => v.iter_mut().find(|(k, _)| bytes_eq(k, user_key)).map(|(_, c)| c),
            MapValue::Tree(m) => m.get_mut(user_key),
        }
    }

    /// Sets `user_key` to `value` stamped `ts`, reusing the existing cell's buffer.
    #[inline]
    pub(crate) fn put(&mut self, user_key: &[u8], ts: i64, value: &[u8]) {
        match self.get_mut(user_key) {
            Some(cell) => cell.set(ts, value),
            None => self.insert_new(Bytes::new(user_key), Cell::new(ts, value)),
        }
    }

    /// Inserts or replaces an entry.
    pub(crate) fn insert(&mut self, user_key: Bytes, cell: Cell) {
        match self.get_mut(&user_key) {
            Some(c) => *c = cell,
            None => self.insert_new(user_key, cell),
        }
    }

    /// Inserts an entry whose user key is absent.
    fn insert_new(&mut self, user_key: Bytes, cell: Cell) {
        match self {
            MapValue::Small(v) if v.len() < SMALL_MAX => {
                let at = v.partition_point(|(k, _)| k.as_slice() < user_key.as_slice());
                if v.capacity() == 0 {
                    // Most maps hold a single user key: no room for four.
                    v.reserve_exact(1);
                }
                v.insert(at, (user_key, cell));
            }
            MapValue::Small(v) => {
                let mut m: BTreeMap<Bytes, Cell> = std::mem::take(v).into_iter().collect();
                m.insert(user_key, cell);
                *self = MapValue::Tree(m);
            }
            MapValue::Tree(m) => {
                m.insert(user_key, cell);
            }
        }
    }

    /// Removes `user_key`, returning its cell.
    pub(crate) fn remove(&mut self, user_key: &[u8]) -> Option<Cell> {
        match self {
            MapValue::Small(v) => {
                let at = v.iter().position(|(k, _)| bytes_eq(k, user_key))?;
                Some(v.remove(at).1)
            }
            MapValue::Tree(m) => m.remove(user_key),
        }
    }

    /// Keeps the entries for which `f` returns true; `f` may modify the cell.
    pub(crate) fn retain(&mut self, mut f: impl FnMut(&Bytes, &mut Cell) -> bool) {
        match self {
            MapValue::Small(v) => v.retain_mut(|(k, c)| f(k, c)),
            MapValue::Tree(m) => m.retain(|k, c| f(k, c)),
        }
    }

    /// The entries in ascending user-key order.
    #[inline]
    pub(crate) fn iter(&self) -> Iter<'_> {
        match self {
            MapValue::Small(v) => Iter::Small(v.iter()),
            MapValue::Tree(m) => Iter::Tree(m.iter()),
        }
    }

    /// Heap bytes held beyond the table slot (an estimate for the B-tree).
    pub(crate) fn heap_bytes(&self) -> usize {
        use std::mem::size_of;
        match self {
            MapValue::Small(v) => {
                v.capacity() * size_of::<(Bytes, Cell)>()
                    + v.iter()
                        .map(|(k, c)| k.heap_bytes() + c.bytes.heap_bytes())
                        .sum::<usize>()
            }
            MapValue::Tree(m) => {
                // A B-tree entry: key and value in a node, nodes about 2/3 full.
                const ENTRY: usize = (size_of::<Bytes>() + size_of::<Cell>()) * 3 / 2;
                m.iter()
                    .map(|(k, c)| ENTRY + k.heap_bytes() + c.bytes.heap_bytes())
                    .sum()
            }
        }
    }
}

/// Iterator over a [`MapValue`]'s entries in ascending user-key order.
pub(crate) enum Iter<'a> {
    Small(std::slice::Iter<'a, (Bytes, Cell)>),
    Tree(btree_map::Iter<'a, Bytes, Cell>),
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a Bytes, &'a Cell);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Iter::Small(it) => it.next().map(|(k, c)| (k, c)),
            Iter::Tree(it) => it.next(),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            Iter::Small(it) => it.size_hint(),
            Iter::Tree(it) => it.size_hint(),
        }
    }
}

impl<'a> IntoIterator for &'a MapValue {
    type Item = (&'a Bytes, &'a Cell);
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(m: &MapValue) -> Vec<Vec<u8>> {
        m.iter().map(|(k, _)| k.to_vec()).collect()
    }

    #[test]
    fn behaves_like_a_btreemap_across_the_switch() {
        let mut m = MapValue::new();
        let mut model: BTreeMap<Vec<u8>, (i64, Vec<u8>)> = BTreeMap::new();
        // A deterministic mix of puts, overwrites and removes over 40 user keys, some long.
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for step in 0..4000i64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let k = (x % 40) as u8;
            let uk: Vec<u8> = if k.is_multiple_of(5) { vec![k; 20] } else { vec![k] };
            let value = step.to_be_bytes();
            if x.is_multiple_of(7) {
                assert_eq!(m.remove(&uk).map(|c| c.bytes.to_vec()), model.remove(&uk).map(|v| v.1));
            } else if x.is_multiple_of(11) {
                m.insert(Bytes::new(&uk), Cell::new(step, &value));
                model.insert(uk.clone(), (step, value.to_vec()));
            } else {
                m.put(&uk, step, &value);
                model.insert(uk.clone(), (step, value.to_vec()));
            }
            assert_eq!(m.len(), model.len());
            assert_eq!(
                m.get(&uk).map(|c| c.bytes.to_vec()),
                model.get(&uk).map(|v| v.1.clone())
            );
            if step % 97 == 0 {
                let ours: Vec<(Vec<u8>, i64, Vec<u8>)> =
                    m.iter().map(|(k, c)| (k.to_vec(), c.ts, c.bytes.to_vec())).collect();
                let theirs: Vec<(Vec<u8>, i64, Vec<u8>)> =
                    model.iter().map(|(k, (t, v))| (k.clone(), *t, v.clone())).collect();
                assert_eq!(ours, theirs);
            }
            if step == 2000 {
                m.retain(|k, _| k.len() == 1 && k[0] % 2 == 0);
                model.retain(|k, _| k.len() == 1 && k[0] % 2 == 0);
                assert_eq!(keys(&m), model.keys().cloned().collect::<Vec<_>>());
            }
        }
    }

    #[test]
    fn small_maps_stay_small_and_sorted() {
        let mut m = MapValue::new();
        for k in (0..SMALL_MAX as u8).rev() {
            m.put(&[k], 0, b"v");
        }
        assert!(matches!(m, MapValue::Small(_)));
        assert_eq!(keys(&m), (0..SMALL_MAX as u8).map(|k| vec![k]).collect::<Vec<_>>());
        m.put(b"", 0, b"v");
        assert!(matches!(m, MapValue::Tree(_)));
        assert_eq!(keys(&m)[0], b"");
        assert_eq!(m.len(), SMALL_MAX + 1);
        let mut one = MapValue::new();
        one.put(b"k", 1, b"v");
        let MapValue::Small(v) = &one else { panic!() };
        assert_eq!(v.capacity(), 1);
        one.retain(|_, c| {
            c.ts = 5;
            true
        });
        assert_eq!(one.iter().map(|(_, c)| c.ts).collect::<Vec<_>>(), vec![5]);
    }
}
