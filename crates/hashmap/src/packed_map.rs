//! Packed tables for map states whose entries share one shape.
//!
//! A map state's key-group table starts *packed*, the way RocksDB lays a map out: one slot per
//! map entry, `key ‖ namespace ‖ user key ‖ [timestamp] ‖ value`, in the open-addressing
//! shards of [`crate::packed`] (24 bytes for a `MapState<Long, Long>` under `Long` keys). An
//! entry is placed by the hash of its key and namespace only, so every entry of one map
//! shares its probe start and lies on the probe path of its map; its control tag mixes in its
//! user key ([`map_tag_hash`](crate::packed::map_tag_hash)), so `map_get` is one probe that
//! compares only the slot of its user key. Iterating a map walks that path, collecting the
//! slots of its key and namespace whatever their tags, then orders them by user key.
//!
//! Map entries of one key are clustered that way, so a map may not grow long in a packed table:
//! the entry that would make a map longer than [`MAX_PACKED_MAP`], like the first entry of
//! another shape (or one too long to pack), converts the key group's table to general slots
//! for good ([`MapTable::General`]: a [`MapValue`] per key and namespace, a sorted vector or a
//! B-tree). Adding a TTL to a state packed without timestamps converts too.

use crate::backend::Cell;
use crate::bytes::{bytes_eq, copy_short, Bytes};
use crate::map::MapValue;
use crate::packed::{map_tag_hash, CellRef, PackedShard, Shape};
use crate::table::{Dir, KgTable, Probe};

/// Most entries one map may have in a packed table.
pub(crate) const MAX_PACKED_MAP: usize = 16;

/// One map entry, borrowed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MapEntryRef<'a> {
    pub(crate) key: &'a [u8],
    pub(crate) namespace: &'a [u8],
    pub(crate) user_key: &'a [u8],
    pub(crate) cell: CellRef<'a>,
}

/// The table of a map state in one key group: packed while every entry has one shape and no
/// map is long, general slots otherwise. See the module docs.
#[derive(Clone, Debug)]
pub(crate) enum MapTable {
    /// One slot per map entry (no shape yet while the table is empty and unshaped).
    Packed(Option<Shape>, Dir<PackedShard>),
    /// A [`MapValue`] per (key, namespace).
    General(KgTable<MapValue>),
}

impl Default for MapTable {
    fn default() -> Self {
        MapTable::Packed(None, Dir::default())
    }
}

/// The bytes of a packed slot's user key.
#[inline(always)]
fn user_key_of(shape: Shape, s: &[u8]) -> &[u8] {
    &s[shape.key_len()..shape.ts_at()]
}

/// The entry in a packed slot's bytes.
fn entry_of(shape: Shape, s: &[u8]) -> MapEntryRef<'_> {
    let kl = shape.key_only_len();
    MapEntryRef {
        key: &s[..kl],
        namespace: &s[kl..shape.key_len()],
        user_key: user_key_of(shape, s),
        cell: PackedShard::cell(shape, s),
    }
}

impl MapTable {
    /// True when the table holds no entry.
    pub(crate) fn is_empty(&self) -> bool {
        match self {
            MapTable::Packed(_, d) => d.len() == 0,
            MapTable::General(t) => t.len() == 0,
        }
    }

    /// Number of map entries.
    #[cfg(test)]
    pub(crate) fn entry_count(&self) -> usize {
        match self {
            MapTable::Packed(_, d) => d.len(),
            MapTable::General(t) => t.iter().map(|s| s.value.len()).sum(),
        }
    }

    /// Number of (key, namespace) maps with at least one entry.
    pub(crate) fn maps(&self) -> usize {
        match self {
            MapTable::Packed(Some(shape), d) => {
                let kn = shape.key_len();
                let mut keys: Vec<&[u8]> = d
                    .tables()
                    .flat_map(|t| t.full_slots().map(move |i| &t.slot(i)[..kn]))
                    .collect();
                keys.sort_unstable();
                keys.dedup();
                keys.len()
            }
            MapTable::Packed(None, _) => 0,
            MapTable::General(t) => t.len(),
        }
    }

    /// The value of `user_key` in the map of the 8-byte key `key` (no namespace) placed by
    /// `hash`, when the table is packed as [`Shape::is_word_map`]; `Err` when it is not (the
    /// caller then takes the general path).
    #[inline(always)]
    pub(crate) fn get_word(&self, key: &[u8; 8], user_key: &[u8; 8], hash: u64) -> Result<Option<[u8; 8]>, ()> {
        match self {
            MapTable::Packed(Some(shape), d) if shape.is_word_map() => {
                let Some(t) = d.shard(hash) else {
                    return Ok(None);
                };
                let found = t.probe_pair::<false>(
                    u64::from_ne_bytes(*key),
                    u64::from_ne_bytes(*user_key),
                    hash,
                    map_tag_hash(hash, user_key),
                );
                Ok(found.ok().and_then(|i| t.word(i, 16)))
            }
            _ => Err(()),
        }
    }

    /// Sets `user_key` of the map of the 8-byte key `key` (no namespace) placed by `hash` to
    /// the 8-byte `value`, when the table is packed as [`Shape::is_word_map`] and the map may
    /// take the entry without being counted (see [`MapTable::put`]); `Err` otherwise (the
    /// caller then takes the general path).
    #[inline(always)]
    pub(crate) fn put_word(&mut self, key: &[u8; 8], user_key: &[u8; 8], hash: u64, value: [u8; 8]) -> Result<(), ()> {
        let MapTable::Packed(Some(shape), d) = self else {
            return Err(());
        };
        let shape = *shape;
        if !shape.is_word_map() {
            return Err(());
        }
        let (t, len) = d.shard_for_insert(hash, || PackedShard::for_len(shape, 0));
        let tag_hash = map_tag_hash(hash, user_key);
        let i = match t.probe_pair::<true>(u64::from_ne_bytes(*key), u64::from_ne_bytes(*user_key), hash, tag_hash) {
            Ok(i) => i,
            Err(on_path) if on_path < MAX_PACKED_MAP => {
                let i = t.claim_tagged(hash, tag_hash);
                *len += 1;
                if let Some(k) = t.word_mut(i, 0) {
                    k.copy_from_slice(key);
                }
                if let Some(u) = t.word_mut(i, 8) {
                    u.copy_from_slice(user_key);
                }
                i
            }
            Err(_) => return Err(()),
        };
        if let Some(v) = t.word_mut(i, 16) {
            v.copy_from_slice(&value);
        }
        Ok(())
    }

    /// The cell of `user_key` in `p`'s map.
    #[inline(always)]
    pub(crate) fn get(&self, p: &Probe<'_>, user_key: &[u8]) -> Option<CellRef<'_>> {
        match self {
            MapTable::Packed(Some(shape), d) => {
                let shape = *shape;
                if !shape.keys_fit(p) || user_key.len() != usize::from(shape.user_key) {
                    return None;
                }
                let t = d.shard(p.hash())?;
                let i = t.find_tagged(p, map_tag_hash(p.hash(), user_key), |s| {
                    bytes_eq(user_key_of(shape, s), user_key)
                })?;
                Some(PackedShard::cell(shape, t.slot(i)))
            }
            MapTable::Packed(None, _) => None,
            MapTable::General(t) => t.get(p).and_then(|m| m.get(user_key)).map(|c| CellRef {
                ts: c.ts,
                bytes: c.bytes.as_slice(),
            }),
        }
    }

    /// Sets `user_key` of `p`'s map to `value` stamped `ts` (kept when `ttl`), creating the
    /// entry (and the map) if needed. A shard shared with a snapshot is copied first.
    #[inline(always)]
    pub(crate) fn put(&mut self, p: &Probe<'_>, user_key: &[u8], ts: i64, value: &[u8], ttl: bool) {
        if let MapTable::Packed(shape, d) = self {
            let shape = match *shape {
                Some(s) => s,
                None => match Shape::of_map(p, user_key, value, ttl) {
                    Some(s) => *shape.insert(s),
                    None => return self.convert_to_general().put_general(p, user_key, ts, value),
                },
            };
            if shape.map_fits(p, user_key, value, ttl) {
                let (t, len) = d.shard_for_insert(p.hash(), || PackedShard::for_len(shape, 0));
                let tag_hash = map_tag_hash(p.hash(), user_key);
                let on_path = match t.find_tagged_or_path(p, tag_hash, |s| bytes_eq(user_key_of(shape, s), user_key)) {
                    Ok(i) => {
                        PackedShard::write_cell(shape, t.slot_mut(i), ts, value);
                        return;
                    }
                    Err(full) => full,
                };
                // A map's entries all lie on its probe path: when that path holds fewer full
                // slots than a map may have entries, the map need not be counted (counting
                // reads every slot on the path, a cache miss per group: a third of `map_put`'s
                // time at 1 M keys when it ran whenever the path was longer than one group).
                let mut in_map = 0;
                if on_path >= MAX_PACKED_MAP {
                    t.walk_all(p, |_, _| in_map += 1);
                }
                if in_map < MAX_PACKED_MAP {
                    let i = t.claim_tagged(p.hash(), tag_hash);
                    t.write(i, p, ts, value);
                    copy_short(&mut t.slot_mut(i)[shape.key_len()..shape.ts_at()], user_key);
                    *len += 1;
                    return;
                }
            }
        }
        self.convert_to_general().put_general(p, user_key, ts, value)
    }

    /// [`MapTable::put`] on general slots.
    fn put_general(&mut self, p: &Probe<'_>, user_key: &[u8], ts: i64, value: &[u8]) {
        if let MapTable::General(t) = self {
            let (map, _) = t.get_or_insert_with(p, MapValue::new);
            map.put(user_key, ts, value);
        }
    }

    /// Re-stamps an existing entry (TTL refreshed on read).
    pub(crate) fn set_ts(&mut self, p: &Probe<'_>, user_key: &[u8], ts: i64) {
        match self {
            MapTable::Packed(Some(shape), d) => {
                let shape = *shape;
                if !shape.ttl() || !shape.keys_fit(p) || user_key.len() != usize::from(shape.user_key) {
                    return;
                }
                let Some(t) = d.shard_mut(p.hash()) else {
                    return;
                };
                let tag_hash = map_tag_hash(p.hash(), user_key);
                if let Some(i) = t.find_tagged(p, tag_hash, |s| bytes_eq(user_key_of(shape, s), user_key)) {
                    let s = t.slot_mut(i);
                    let at = shape.ts_at();
                    s[at..at + 8].copy_from_slice(&ts.to_le_bytes());
                }
            }
            MapTable::Packed(None, _) => {}
            MapTable::General(t) => {
                if let Some(c) = t.get_mut(p).and_then(|m| m.get_mut(user_key)) {
                    c.ts = ts;
                }
            }
        }
    }

    /// Removes `user_key` from `p`'s map (and the map when it is left empty), returning the
    /// removed entry's timestamp. Copies nothing when the entry is absent.
    pub(crate) fn remove(&mut self, p: &Probe<'_>, user_key: &[u8]) -> Option<i64> {
        match self {
            MapTable::Packed(Some(shape), d) => {
                let shape = *shape;
                if !shape.keys_fit(p) || user_key.len() != usize::from(shape.user_key) {
                    return None;
                }
                let i = d
                    .shard(p.hash())?
                    .find_tagged(p, map_tag_hash(p.hash(), user_key), |s| {
                        bytes_eq(user_key_of(shape, s), user_key)
                    })?;
                let t = d.shard_mut(p.hash())?;
                let ts = PackedShard::cell(shape, t.slot(i)).ts;
                t.vacate(i);
                d.count(-1);
                Some(ts)
            }
            MapTable::Packed(None, _) => None,
            MapTable::General(t) => {
                t.get(p)?.get(user_key)?;
                let map = t.get_mut(p)?;
                let cell = map.remove(user_key)?;
                if map.is_empty() {
                    t.remove(p);
                }
                Some(cell.ts)
            }
        }
    }

    /// Whether `p`'s map has an entry for which `f` holds (in no particular order).
    pub(crate) fn any(&self, p: &Probe<'_>, mut f: impl FnMut(CellRef<'_>) -> bool) -> bool {
        match self {
            MapTable::Packed(Some(shape), d) => {
                let shape = *shape;
                let mut any = false;
                if let Some(t) = d.shard(p.hash()).filter(|_| shape.keys_fit(p)) {
                    t.walk_all(p, |_, s| any = any || f(PackedShard::cell(shape, s)));
                }
                any
            }
            MapTable::Packed(None, _) => false,
            MapTable::General(t) => t.get(p).is_some_and(|m| {
                m.iter().any(|(_, c)| {
                    f(CellRef {
                        ts: c.ts,
                        bytes: c.bytes.as_slice(),
                    })
                })
            }),
        }
    }

    /// Calls `f` with every entry of `p`'s map in ascending user-key order; returns how many.
    pub(crate) fn for_each(&self, p: &Probe<'_>, mut f: impl FnMut(&[u8], CellRef<'_>)) -> usize {
        match self {
            MapTable::Packed(Some(shape), d) => {
                let shape = *shape;
                if !shape.keys_fit(p) {
                    return 0;
                }
                let Some(t) = d.shard(p.hash()) else {
                    return 0;
                };
                let mut slots: Vec<&[u8]> = Vec::new();
                t.walk_all(p, |_, s| slots.push(s));
                slots.sort_unstable_by(|a, b| user_key_of(shape, a).cmp(user_key_of(shape, b)));
                for s in &slots {
                    f(user_key_of(shape, s), PackedShard::cell(shape, s));
                }
                slots.len()
            }
            MapTable::Packed(None, _) => 0,
            MapTable::General(t) => match t.get(p) {
                Some(map) => {
                    for (k, c) in map {
                        f(
                            k.as_slice(),
                            CellRef {
                                ts: c.ts,
                                bytes: c.bytes.as_slice(),
                            },
                        );
                    }
                    map.len()
                }
                None => 0,
            },
        }
    }

    /// Applies `f` to the timestamp of every entry of `p`'s map; drops the entries for which
    /// it returns false (and the map when none is left).
    pub(crate) fn retain_map(&mut self, p: &Probe<'_>, mut f: impl FnMut(&mut i64) -> bool) {
        match self {
            MapTable::Packed(Some(shape), d) => {
                let shape = *shape;
                if !shape.ttl() || !shape.keys_fit(p) {
                    return;
                }
                let Some(t) = d.shard_mut(p.hash()) else {
                    return;
                };
                let mut slots = Vec::new();
                t.walk_all(p, |i, _| slots.push(i));
                let removed = t.retain_ts_of(slots, &mut f);
                d.count(-(removed as isize));
            }
            MapTable::Packed(None, _) => {}
            MapTable::General(t) => {
                let Some(map) = t.get_mut(p) else {
                    return;
                };
                map.retain(|_, c| f(&mut c.ts));
                if map.is_empty() {
                    t.remove(p);
                }
            }
        }
    }

    /// Removes `p`'s whole map; true when it had entries. Copies nothing when it had none.
    pub(crate) fn remove_map(&mut self, p: &Probe<'_>) -> bool {
        if !self.any(p, |_| true) {
            return false;
        }
        match self {
            MapTable::Packed(_, d) => {
                let Some(t) = d.shard_mut(p.hash()) else {
                    return false;
                };
                let mut slots = Vec::new();
                t.walk_all(p, |i, _| slots.push(i));
                for &i in &slots {
                    t.vacate(i);
                }
                d.count(-(slots.len() as isize));
                true
            }
            MapTable::General(t) => t.remove(p).is_some(),
        }
    }

    /// Applies `f` to every entry's timestamp; drops the entries for which it returns false,
    /// and maps left empty. A packed table without timestamps becomes general slots first.
    pub(crate) fn retain_cells(&mut self, mut f: impl FnMut(&mut i64) -> bool) {
        if let MapTable::Packed(Some(shape), _) = self {
            if !shape.ttl() {
                self.convert_to_general();
            }
        }
        match self {
            MapTable::Packed(Some(_), d) => {
                d.retain_shards(|t| {
                    let full: Vec<usize> = t.full_slots().collect();
                    t.retain_ts_of(full, &mut f);
                    crate::table::ShardTable::len(t)
                });
            }
            MapTable::Packed(None, _) => {}
            MapTable::General(t) => t.retain_mut(|m| {
                m.retain(|_, c| f(&mut c.ts));
                !m.is_empty()
            }),
        }
    }

    /// Every entry, in no particular order.
    pub(crate) fn entries(&self) -> Box<dyn Iterator<Item = MapEntryRef<'_>> + '_> {
        match self {
            MapTable::Packed(Some(shape), d) => {
                let shape = *shape;
                Box::new(
                    d.tables()
                        .flat_map(move |t| t.full_slots().map(move |i| entry_of(shape, t.slot(i)))),
                )
            }
            MapTable::Packed(None, _) => Box::new(std::iter::empty()),
            MapTable::General(t) => Box::new(t.iter().flat_map(|s| {
                s.value.iter().map(move |(k, c)| MapEntryRef {
                    key: s.key(),
                    namespace: s.namespace(),
                    user_key: k.as_slice(),
                    cell: CellRef {
                        ts: c.ts,
                        bytes: c.bytes.as_slice(),
                    },
                })
            })),
        }
    }

    /// A rough estimate of the heap bytes held, given a general slot's size.
    pub(crate) fn approx_bytes(&self, slot_bytes: usize) -> usize {
        match self {
            MapTable::Packed(_, d) => d.tables().map(PackedShard::heap_bytes).sum(),
            MapTable::General(t) => t
                .iter()
                .map(|s| slot_bytes + s.key_heap_bytes() + s.value.heap_bytes())
                .sum(),
        }
    }

    /// Converts a packed table to general slots (for good) and returns it.
    #[cold]
    #[inline(never)]
    fn convert_to_general(&mut self) -> &mut Self {
        if let MapTable::Packed(..) = self {
            let mut t: KgTable<MapValue> = KgTable::default();
            for e in self.entries() {
                let p = Probe::new(e.key, e.namespace);
                let (map, _) = t.get_or_insert_with(&p, MapValue::new);
                map.insert(
                    Bytes::new(e.user_key),
                    Cell {
                        ts: e.cell.ts,
                        bytes: Bytes::new(e.cell.bytes),
                    },
                );
            }
            tracing::trace!(maps = t.len(), "packed map table converted to slots");
            *self = MapTable::General(t);
        }
        self
    }

    /// Whether the table is packed (tests).
    #[cfg(test)]
    pub(crate) fn is_packed(&self) -> bool {
        matches!(self, MapTable::Packed(..))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[derive(Clone, Debug)]
    enum Op {
        Put(u16, u8, u8),
        /// A put of another shape (a longer value): converts the table.
        PutOdd(u16, u8),
        /// Puts user keys 0..=MAX_PACKED_MAP into one map: one too many to stay packed.
        Fill(u16),
        Remove(u16, u8),
        RemoveMap(u16),
        Get(u16, u8),
        ForEach(u16),
        /// Clone the table (a snapshot) and check the clone after later writes.
        Freeze,
        /// Drop the entries with an odd timestamp (TTL tables).
        Retain,
        /// The same in one map.
        RetainMap(u16),
    }

    fn op() -> impl Strategy<Value = Op> {
        // Keys from a range a few shards wide, so splits, rebuilds and tombstones all occur;
        // user keys from a range that keeps most maps short.
        let k = 0u16..1500;
        let uk = 0u8..6;
        prop_oneof![
            30 => (k.clone(), uk.clone(), any::<u8>()).prop_map(|(k, u, v)| Op::Put(k, u, v)),
            1 => (k.clone(), uk.clone()).prop_map(|(k, u)| Op::PutOdd(k, u)),
            1 => k.clone().prop_map(Op::Fill),
            10 => (k.clone(), uk.clone()).prop_map(|(k, u)| Op::Remove(k, u)),
            2 => k.clone().prop_map(Op::RemoveMap),
            8 => (k.clone(), uk).prop_map(|(k, u)| Op::Get(k, u)),
            3 => k.clone().prop_map(Op::ForEach),
            1 => Just(Op::Freeze),
            1 => Just(Op::Retain),
            1 => k.prop_map(Op::RetainMap),
        ]
    }

    /// (key ‖ namespace, user key) → (timestamp, value).
    type Model = BTreeMap<(Vec<u8>, Vec<u8>), (i64, Vec<u8>)>;

    fn contents(t: &MapTable, ttl: bool) -> Model {
        t.entries()
            .map(|e| {
                (
                    ([e.key, e.namespace].concat(), e.user_key.to_vec()),
                    (if ttl { e.cell.ts } else { 0 }, e.cell.bytes.to_vec()),
                )
            })
            .collect()
    }

    proptest! {
        /// A map table behaves like a map from (key, namespace, user key) to (timestamp,
        /// value), packed or converted; maps iterate in user-key order; a clone taken before
        /// writes never changes.
        #[test]
        fn behaves_like_a_map_of_maps(
            ops in proptest::collection::vec(op(), 1..3000),
            ttl in any::<bool>(),
            convert in proptest::bool::weighted(0.25),
            long in any::<bool>(),
        ) {
            // Two-byte keys in a namespace, or eight-byte keys without one.
            let (ns, key_of) = crate::packed::tests::test_keys(long);
            let kns = |k: u16| [&key_of(k)[..], ns].concat();
            let mut t = MapTable::default();
            let mut model = Model::new();
            let mut frozen: Vec<(MapTable, Model)> = Vec::new();
            let stamp = |v: i64| if ttl { v } else { 0 };
            for (n, op) in ops.into_iter().enumerate() {
                let now = n as i64;
                match op {
                    Op::Put(k, u, v) => {
                        let key = key_of(k);
                        t.put(&Probe::new(&key, ns), &[u], now, &[v; 8], ttl);
                        model.insert((kns(k), vec![u]), (stamp(now), vec![v; 8]));
                    }
                    Op::PutOdd(..) | Op::Fill(_) if !convert => {}
                    Op::PutOdd(k, u) => {
                        let key = key_of(k);
                        t.put(&Probe::new(&key, ns), &[u], now, b"a longer value", ttl);
                        model.insert((kns(k), vec![u]), (stamp(now), b"a longer value".to_vec()));
                        // Still packed only while every entry has this one shape.
                        prop_assert!(!t.is_packed() || model.values().all(|c| c.1.len() == 14));
                    }
                    Op::Fill(k) => {
                        let key = key_of(k);
                        for u in 0..=MAX_PACKED_MAP as u8 {
                            t.put(&Probe::new(&key, ns), &[u], now, &[u; 8], ttl);
                            model.insert((kns(k), vec![u]), (stamp(now), vec![u; 8]));
                        }
                        prop_assert!(!t.is_packed());
                    }
                    Op::Remove(k, u) => {
                        let key = key_of(k);
                        let got = t.remove(&Probe::new(&key, ns), &[u]).map(stamp);
                        let want = model.remove(&(kns(k), vec![u])).map(|c| c.0);
                        prop_assert_eq!(got, want);
                    }
                    Op::RemoveMap(k) => {
                        let key = key_of(k);
                        let had = t.remove_map(&Probe::new(&key, ns));
                        let before = model.len();
                        model.retain(|(kn, _), _| *kn != kns(k));
                        prop_assert_eq!(had, model.len() < before);
                    }
                    Op::Get(k, u) => {
                        let key = key_of(k);
                        let got = t.get(&Probe::new(&key, ns), &[u]).map(|c| (stamp(c.ts), c.bytes.to_vec()));
                        prop_assert_eq!(got.as_ref(), model.get(&(kns(k), vec![u])));
                        // Another user-key length or namespace is never found.
                        prop_assert!(t.get(&Probe::new(&key, ns), &[u, 0]).is_none());
                        prop_assert!(t.get(&Probe::new(&key, b"nt"), &[u]).is_none());
                    }
                    Op::ForEach(k) => {
                        let key = key_of(k);
                        let mut got = Vec::new();
                        let n = t.for_each(&Probe::new(&key, ns), |u, c| got.push((u.to_vec(), stamp(c.ts), c.bytes.to_vec())));
                        let want: Vec<(Vec<u8>, i64, Vec<u8>)> = model
                            .iter()
                            .filter(|((kn, _), _)| *kn == kns(k))
                            .map(|((_, u), (ts, v))| (u.clone(), *ts, v.clone()))
                            .collect();
                        prop_assert_eq!(n, want.len());
                        prop_assert_eq!(got, want);
                    }
                    Op::Freeze => frozen.push((t.clone(), model.clone())),
                    Op::Retain => {
                        if ttl {
                            t.retain_cells(|ts| *ts % 2 == 0);
                            model.retain(|_, (ts, _)| *ts % 2 == 0);
                        }
                    }
                    Op::RetainMap(k) => {
                        if ttl {
                            let key = key_of(k);
                            t.retain_map(&Probe::new(&key, ns), |ts| *ts % 2 == 0);
                            model.retain(|(kn, _), (ts, _)| *kn != kns(k) || *ts % 2 == 0);
                        }
                    }
                }
                prop_assert_eq!(t.entry_count(), model.len());
            }
            let maps: std::collections::BTreeSet<&Vec<u8>> = model.keys().map(|(kn, _)| kn).collect();
            prop_assert_eq!(t.maps(), maps.len());
            // Every entry is found by probing (a broken probe chain would hide some).
            for ((kn, u), c) in &model {
                let (key, kns) = kn.split_at(kn.len() - ns.len());
                let got = t.get(&Probe::new(key, kns), u).map(|c| (stamp(c.ts), c.bytes.to_vec()));
                prop_assert_eq!(got.as_ref(), Some(c));
            }
            prop_assert_eq!(contents(&t, ttl), model);
            for (f, m) in &frozen {
                prop_assert_eq!(&contents(f, ttl), m);
            }
        }
    }

    #[test]
    fn small_maps_of_one_shape_stay_packed_and_small() {
        let mut t = MapTable::default();
        for k in 0..20_000u64 {
            for u in 0..3u64 {
                t.put(
                    &Probe::new(&k.to_be_bytes(), b""),
                    &u.to_be_bytes(),
                    0,
                    &k.to_le_bytes(),
                    false,
                );
            }
        }
        assert!(t.is_packed());
        assert_eq!(t.entry_count(), 60_000);
        assert_eq!(t.maps(), 20_000);
        // Control byte and 24-byte slot per bucket, at 1/2 to 3/4 load.
        let per_entry = t.approx_bytes(0) as f64 / 60_000.0;
        assert!(per_entry < 25.0 / 0.48, "{per_entry} bytes per entry");
        let mut seen = Vec::new();
        t.for_each(&Probe::new(&7u64.to_be_bytes(), b""), |u, c| {
            seen.push((u.to_vec(), c.bytes.to_vec()))
        });
        let want: Vec<(Vec<u8>, Vec<u8>)> = (0..3u64)
            .map(|u| (u.to_be_bytes().to_vec(), 7u64.to_le_bytes().to_vec()))
            .collect();
        assert_eq!(seen, want);
    }
}
