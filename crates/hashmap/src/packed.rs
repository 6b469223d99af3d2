//! Packed tables for value, reducing and aggregating states whose entries share one shape.
//!
//! Most states are typed: every key, namespace and value of a state serializes to the same
//! number of bytes (`Long` keys, `VoidNamespace`, `Long` or `Double` values, fixed tuples).
//! A key group's table of such a state keeps its entries *packed*: each slot is exactly
//! `key ‖ namespace ‖ [timestamp] ‖ value` with no lengths, pointers or padding — 16 bytes for
//! a `ValueState<Long>` under `Long` keys, where a general slot ([`crate::table::Slot`]) takes
//! 64. Denser tables hold more of the state in the CPU caches, and memory per entry falls to
//! about a quarter.
//!
//! The shape (the three lengths and whether a timestamp is kept) is fixed by the table's first
//! entry. The first entry of another shape converts that key group's table to general slots
//! for good ([`SingleTable::Slots`]), so states with variable-length data behave exactly as
//! before, one conversion per key group.
//!
//! A shard of a packed table ([`PackedShard`]) is an open-addressing table of its own:
//! control bytes in groups of eight (empty, deleted, or full with seven bits of the hash),
//! probed group by group from a start chosen by the hash's low 32 bits with a multiply (so a
//! table may have any number of groups, not only a power of two), and matched eight at a time
//! with word arithmetic. Tables are rebuilt at 15/16 full to about 7/10, so they stay between
//! those loads instead of hashbrown's 7/16 to 7/8 after doubling: a smaller table keeps more
//! of itself in the CPU caches and TLB, which the lookups of a large state wait on (design
//! note 0002, "Denser value tables"). Map tables, whose entries of one map share a probe start
//! (so groups probed linearly cluster sooner), are kept at 1/2 to 3/4. The shards sit under
//! the same copy-on-write directory as every other table ([`crate::table::Dir`]).

use crate::backend::Cell;
use crate::bytes::{bytes_eq, copy_short, Bytes};
use crate::table::{hash_key_ns, splits_away, Dir, KgTable, Probe, ShardTable};

/// Longest `key ‖ namespace` of a packed entry.
const MAX_PACKED_KEY: usize = 32;
/// Entries a packed shard holds before it splits: 3.5 Ki, four times a general shard's. Packed
/// slots are small (a shard of 16-byte slots copies 80 KB when a snapshot shares it), and fewer,
/// larger shards keep their headers and directories in cache: `value_get_update` 5.7–6.5 →
/// 6.2–8.3 M/s and `map_get_put` 3.5–4.1 → 4.4–4.6 M/s against 896 (1 M keys); 14 Ki gained
/// little more for four times the copy.
const PACKED_SHARD_LEN: usize = 3584;

/// Longest value of a packed entry.
const MAX_PACKED_VALUE: usize = 32;

/// Control bytes: an empty slot, a deleted one; a full slot is `FULL | 7 bits of the hash`.
const EMPTY: u8 = 0x00;
const DELETED: u8 = 0x01;
const FULL: u8 = 0x80;
const LO: u64 = 0x0101_0101_0101_0101;
const HI: u64 = 0x8080_8080_8080_8080;

/// Bytes of a word that are zero: the lowest flagged byte is exact; a flag above a true zero
/// byte may be false (borrow), which only costs a key comparison where it is used.
#[inline(always)]
fn zero_bytes(w: u64) -> u64 {
    w.wrapping_sub(LO) & !w & HI
}

/// The lengths every entry of a packed table has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Shape {
    key: u8,
    namespace: u8,
    /// The user key's length in a map state's table (0 in a single-value table).
    pub(crate) user_key: u8,
    value: u8,
    /// Whether a timestamp (8 bytes) is kept: the state has TTL.
    ttl: bool,
    /// A map state's table: entries are tagged by their user key too ([`map_tag_hash`]).
    map: bool,
    /// Derived, kept for the lookup path: where the value starts, the slot's width, and
    /// whether keys compare as one word (an 8-byte key, no namespace, not a map).
    value_at: u8,
    width: u8,
    word_key: bool,
    /// Derived: `word_key` with an 8-byte value and no timestamp (the word fast paths'
    /// single-value shape), and the same for a map with an 8-byte user key.
    word_value: bool,
    word_map: bool,
}

/// The hash whose top bits tag a map entry's control byte: the entry's placement hash (of its
/// key and namespace, shared by every entry of its map) mixed with its user key, so a lookup
/// compares only the slot of its user key, not every entry of the map.
#[inline(always)]
pub(crate) fn map_tag_hash(hash: u64, user_key: &[u8]) -> u64 {
    use std::hash::BuildHasher;
    match <&[u8; 8]>::try_from(user_key) {
        // The common 8-byte user key (`Long`): two multiply rounds (the tag is the top 7 bits,
        // which the first multiply's carries alone would leave correlated between user keys
        // that differ only in their first bytes).
        Ok(u) => {
            let x = (hash ^ u64::from_ne_bytes(*u)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            (x ^ (x >> 32)).wrapping_mul(0xbf58_476d_1ce4_e5b9)
        }
        Err(_) => foldhash::fast::FixedState::with_seed(hash).hash_one(user_key),
    }
}

impl Shape {
    /// A shape from its lengths (each at most 32, key + namespace + user key at most 32).
    fn new(key: u8, namespace: u8, user_key: u8, value: u8, ttl: bool, map: bool) -> Shape {
        let value_at = key + namespace + user_key + if ttl { 8 } else { 0 };
        Shape {
            key,
            namespace,
            user_key,
            value,
            ttl,
            map,
            value_at,
            width: value_at + value,
            word_key: key == 8 && namespace == 0 && !map,
            word_value: key == 8 && namespace == 0 && !map && value == 8 && !ttl,
            word_map: map && key == 8 && namespace == 0 && user_key == 8 && value == 8 && !ttl,
        }
    }

    /// The shape of an entry, when it is short enough to pack.
    #[inline]
    fn of(p: &Probe<'_>, value: &[u8], ttl: bool) -> Option<Shape> {
        Self::packable(p, &[], value, ttl, false)
    }

    /// The shape of a map entry, when it is short enough to pack.
    #[inline]
    pub(crate) fn of_map(p: &Probe<'_>, user_key: &[u8], value: &[u8], ttl: bool) -> Option<Shape> {
        Self::packable(p, user_key, value, ttl, true)
    }

    /// The shape of an entry of either kind (a single-value one has no user key), when it is
    /// short enough to pack.
    #[inline(always)]
    fn packable(p: &Probe<'_>, user_key: &[u8], value: &[u8], ttl: bool, map: bool) -> Option<Shape> {
        if p.key().len() + p.namespace().len() + user_key.len() > MAX_PACKED_KEY || value.len() > MAX_PACKED_VALUE {
            return None;
        }
        Some(Shape::new(
            p.key().len() as u8,
            p.namespace().len() as u8,
            user_key.len() as u8,
            value.len() as u8,
            ttl,
            map,
        ))
    }

    /// Whether a map entry has this shape.
    #[inline(always)]
    pub(crate) fn map_fits(self, p: &Probe<'_>, user_key: &[u8], value: &[u8], ttl: bool) -> bool {
        user_key.len() == usize::from(self.user_key) && self.fits(p, value, ttl)
    }

    /// Whether this is the shape of `MapState<Long, Long>` under `Long` keys without
    /// namespace or TTL: 24-byte slots of three words, key, user key and value.
    #[inline(always)]
    pub(crate) fn is_word_map(self) -> bool {
        self.word_map
    }

    /// Whether the table keeps timestamps.
    #[inline(always)]
    pub(crate) fn ttl(self) -> bool {
        self.ttl
    }

    /// Whether an entry has this shape.
    #[inline(always)]
    fn fits(self, p: &Probe<'_>, value: &[u8], ttl: bool) -> bool {
        self.keys_fit(p) && value.len() == usize::from(self.value) && ttl == self.ttl
    }

    /// Whether a probe's key and namespace have this shape's lengths.
    #[inline(always)]
    pub(crate) fn keys_fit(self, p: &Probe<'_>) -> bool {
        p.key().len() == usize::from(self.key) && p.namespace().len() == usize::from(self.namespace)
    }

    /// Length of the key.
    #[inline(always)]
    pub(crate) fn key_only_len(self) -> usize {
        usize::from(self.key)
    }

    /// Length of `key ‖ namespace`, the part that places an entry.
    #[inline(always)]
    pub(crate) fn key_len(self) -> usize {
        usize::from(self.key) + usize::from(self.namespace)
    }

    /// Where the timestamp (with TTL) or else the value starts: after the user key.
    #[inline(always)]
    pub(crate) fn ts_at(self) -> usize {
        self.key_len() + usize::from(self.user_key)
    }

    #[inline(always)]
    fn value_at(self) -> usize {
        usize::from(self.value_at)
    }

    #[inline(always)]
    fn width(self) -> usize {
        usize::from(self.width)
    }
}

/// A stored value read from either kind of table: its bytes and its timestamp (0 without TTL).
#[derive(Clone, Copy, Debug)]
pub(crate) struct CellRef<'a> {
    pub(crate) ts: i64,
    pub(crate) bytes: &'a [u8],
}

/// One entry of a single-value table, borrowed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct EntryRef<'a> {
    pub(crate) key: &'a [u8],
    pub(crate) namespace: &'a [u8],
    pub(crate) cell: CellRef<'a>,
}

/// One shard of a packed table: see the module docs.
#[derive(Clone, Debug)]
pub(crate) struct PackedShard {
    shape: Shape,
    /// Control bytes, eight per word (byte `i % 8` of word `i / 8` is slot `i`'s).
    ctrl: Vec<u64>,
    /// `8 × ctrl.len()` slots of `shape.width()` bytes.
    slots: Vec<u8>,
    len: usize,
    deleted: usize,
}

impl PackedShard {
    /// An empty shard with room for `n` entries at about 7/10 load (a map table's at 1/2).
    pub(crate) fn for_len(shape: Shape, n: usize) -> Self {
        let groups = if shape.map { n * 2 } else { n * 10 / 7 }.div_ceil(8).max(1);
        PackedShard {
            shape,
            ctrl: vec![0; groups],
            slots: vec![0; groups * 8 * shape.width()],
            len: 0,
            deleted: 0,
        }
    }

    /// The group probing starts at: the hash's low 32 bits scaled to the group count (the
    /// directory uses bits 32.., the control byte the top 7).
    #[inline(always)]
    fn first_group(&self, hash: u64) -> usize {
        (((hash & 0xffff_ffff) * self.ctrl.len() as u64) >> 32) as usize
    }

    #[inline(always)]
    fn tag(hash: u64) -> u8 {
        FULL | (hash >> 57) as u8
    }

    /// The bytes of slot `i`.
    #[inline(always)]
    pub(crate) fn slot(&self, i: usize) -> &[u8] {
        let w = self.shape.width();
        &self.slots[i * w..(i + 1) * w]
    }

    #[inline(always)]
    pub(crate) fn slot_mut(&mut self, i: usize) -> &mut [u8] {
        let w = self.shape.width();
        &mut self.slots[i * w..(i + 1) * w]
    }

    #[inline(always)]
    fn set_ctrl(&mut self, i: usize, c: u8) {
        let word = &mut self.ctrl[i / 8];
        let shift = (i % 8) * 8;
        *word = (*word & !(0xff << shift)) | (u64::from(c) << shift);
    }

    /// The slot holding `p` (whose lengths fit the shape).
    #[inline(always)]
    fn find(&self, p: &Probe<'_>) -> Option<usize> {
        if self.shape.word_key {
            // The common shape (a `Long` key, no namespace): compare one word.
            let mut k = [0u8; 8];
            k.copy_from_slice(p.key().get(..8)?);
            return self.find_word(u64::from_ne_bytes(k), p.hash());
        }
        self.find_tagged(p, p.hash(), |_| true)
    }

    /// Starts loading the first slots of group `g` while its control word is read: the slot
    /// an entry is found in is most often in the group its probe starts at, so its cache miss
    /// then overlaps the control word's instead of following it.
    #[inline(always)]
    fn prefetch_group(&self, g: usize) {
        // Two lines: the group's first 128 bytes (eight 16-byte slots, five of 24 bytes).
        crate::bytes::prefetch_two_lines(&self.slots, g * 8 * self.shape.width());
    }

    /// [`Self::find`] for 8-byte keys without a namespace. (The probe loop is written out here
    /// and in [`Self::probe`]: one loop shared through a closure cost `get` 12–16 more
    /// instructions, callgrind.)
    #[inline(always)]
    pub(crate) fn find_word(&self, key: u64, hash: u64) -> Option<usize> {
        let groups = self.ctrl.len();
        let w = self.shape.width();
        let tag = LO * u64::from(Self::tag(hash));
        let mut g = self.first_group(hash);
        self.prefetch_group(g);
        for _ in 0..groups {
            let word = *self.ctrl.get(g)?;
            let mut m = zero_bytes(word ^ tag);
            while m != 0 {
                let i = g * 8 + (m.trailing_zeros() / 8) as usize;
                let s = self.slots.get(i * w..i * w + 8)?;
                let mut b = [0u8; 8];
                b.copy_from_slice(s);
                if u64::from_ne_bytes(b) == key {
                    return Some(i);
                }
                m &= m - 1;
            }
            if zero_bytes(word) != 0 {
                return None;
            }
            g += 1;
            if g == groups {
                g = 0;
            }
        }
        None
    }

    /// The slot holding `p` (whose lengths fit the shape), tagged by `tag_hash`, whose bytes
    /// satisfy `rest` (a map table's user key; always true in a single-value table).
    #[inline(always)]
    pub(crate) fn find_tagged(&self, p: &Probe<'_>, tag_hash: u64, rest: impl Fn(&[u8]) -> bool) -> Option<usize> {
        self.probe_tagged::<false>(p, tag_hash, rest).ok()
    }

    /// [`Self::find_tagged`], or when there is no such slot, the number of full slots on the
    /// probe path of `p` (a bound on the entries of its map, all of which lie on that path).
    #[inline(always)]
    pub(crate) fn find_tagged_or_path(
        &self,
        p: &Probe<'_>,
        tag_hash: u64,
        rest: impl Fn(&[u8]) -> bool,
    ) -> Result<usize, usize> {
        self.probe_tagged::<true>(p, tag_hash, rest)
    }

    /// The probe of [`Self::find_tagged`]: `p`'s key and namespace, and `rest`.
    #[inline(always)]
    fn probe_tagged<const COUNT: bool>(
        &self,
        p: &Probe<'_>,
        tag_hash: u64,
        rest: impl Fn(&[u8]) -> bool,
    ) -> Result<usize, usize> {
        let (kl, nl) = (usize::from(self.shape.key), usize::from(self.shape.namespace));
        self.probe::<COUNT>(p.hash(), tag_hash, |s| {
            bytes_eq(&s[..kl], p.key()) && bytes_eq(&s[kl..kl + nl], p.namespace()) && rest(s)
        })
    }

    /// The slot on the probe path of `hash` tagged by `tag_hash` whose bytes satisfy
    /// `matches`; `Err` holds the full slots on the path when `COUNT`, else 0.
    #[inline(always)]
    fn probe<const COUNT: bool>(
        &self,
        hash: u64,
        tag_hash: u64,
        matches: impl Fn(&[u8]) -> bool,
    ) -> Result<usize, usize> {
        let groups = self.ctrl.len();
        let mut full = 0;
        let tag = LO * u64::from(Self::tag(tag_hash));
        let mut g = self.first_group(hash);
        self.prefetch_group(g);
        for _ in 0..groups {
            let word = self.ctrl[g];
            let mut m = zero_bytes(word ^ tag);
            while m != 0 {
                let i = g * 8 + (m.trailing_zeros() / 8) as usize;
                if matches(self.slot(i)) {
                    return Ok(i);
                }
                m &= m - 1;
            }
            if COUNT {
                full += (word & HI).count_ones() as usize;
            }
            if zero_bytes(word) != 0 {
                return Err(full);
            }
            g += 1;
            if g == groups {
                g = 0;
            }
        }
        Err(full)
    }

    /// In a table of [`Shape::is_word_map`], the slot of `key` and `user_key` (as native
    /// words) tagged by `tag_hash`, or (when `COUNT`) the full slots on the probe path of
    /// `hash`: [`Self::find_tagged_or_path`] comparing two words instead of a probe's bytes.
    #[inline(always)]
    pub(crate) fn probe_pair<const COUNT: bool>(
        &self,
        key: u64,
        user_key: u64,
        hash: u64,
        tag_hash: u64,
    ) -> Result<usize, usize> {
        // The slot's first 16 bytes as one 128-bit word: key, then user key.
        let mut pair = [0u8; 16];
        pair[..8].copy_from_slice(&key.to_ne_bytes());
        pair[8..].copy_from_slice(&user_key.to_ne_bytes());
        self.probe::<COUNT>(hash, tag_hash, |s| s.get(..16) == Some(pair.as_slice()))
    }

    /// The bytes of slot `i` as a `[u8; N]` window from `at`, writable (a packed shape's
    /// word; `None` past the end, which a valid index never is).
    #[inline(always)]
    pub(crate) fn word_mut(&mut self, i: usize, at: usize) -> Option<&mut [u8]> {
        let w = self.shape.width();
        self.slots.get_mut(i * w + at..i * w + at + 8)
    }

    /// The 8 bytes of slot `i` from `at`.
    #[inline(always)]
    pub(crate) fn word(&self, i: usize, at: usize) -> Option<[u8; 8]> {
        let w = self.shape.width();
        self.slots.get(i * w + at..i * w + at + 8)?.try_into().ok()
    }

    /// Calls `f` with the index and bytes of every slot holding `p`'s key and namespace,
    /// whatever their tags, in probe order. Every entry placed by `p`'s hash lies on this
    /// path: probing stops at the first group with an empty slot, which no insert passed.
    pub(crate) fn walk_all<'s>(&'s self, p: &Probe<'_>, mut f: impl FnMut(usize, &'s [u8])) {
        let groups = self.ctrl.len();
        let (kl, nl) = (usize::from(self.shape.key), usize::from(self.shape.namespace));
        let mut g = self.first_group(p.hash());
        for _ in 0..groups {
            let word = self.ctrl[g];
            let mut m = word & HI;
            while m != 0 {
                let i = g * 8 + (m.trailing_zeros() / 8) as usize;
                let s = self.slot(i);
                if bytes_eq(&s[..kl], p.key()) && bytes_eq(&s[kl..kl + nl], p.namespace()) {
                    f(i, s);
                }
                m &= m - 1;
            }
            if zero_bytes(word) != 0 {
                return;
            }
            g += 1;
            if g == groups {
                g = 0;
            }
        }
    }

    /// A free slot for a new entry of `hash`, marked full (the table is rebuilt first when
    /// the entry would take it past its load).
    #[inline(always)]
    pub(crate) fn claim(&mut self, hash: u64) -> usize {
        self.claim_tagged(hash, hash)
    }

    /// A free slot for a new entry placed by `hash` and tagged by `tag_hash`, marked full
    /// (the table is rebuilt first when the entry would take it past its load).
    #[inline(always)]
    pub(crate) fn claim_tagged(&mut self, hash: u64, tag_hash: u64) -> usize {
        if self.needs_room() {
            self.make_room();
        }
        self.claim_with(hash, Self::tag(tag_hash))
    }

    /// A free slot for a new entry placed by `hash`, given the control byte `ctrl` (a full
    /// one: its tag).
    #[inline(always)]
    fn claim_with(&mut self, hash: u64, ctrl: u8) -> usize {
        let groups = self.ctrl.len();
        let mut g = self.first_group(hash);
        loop {
            let free = !self.ctrl[g] & HI;
            if free != 0 {
                let i = g * 8 + (free.trailing_zeros() / 8) as usize;
                if (self.ctrl[g] >> ((i % 8) * 8)) as u8 == DELETED {
                    self.deleted -= 1;
                }
                self.set_ctrl(i, ctrl);
                self.len += 1;
                return i;
            }
            g += 1;
            if g == groups {
                g = 0;
            }
        }
    }

    /// Whether one more entry would take the table past 15/16 full (a map table's past 3/4;
    /// deleted slots count).
    #[inline(always)]
    fn needs_room(&self) -> bool {
        let used = (self.len + self.deleted + 1) * 16;
        if self.shape.map {
            used > self.ctrl.len() * 8 * 12
        } else {
            used > self.ctrl.len() * 8 * 15
        }
    }

    /// Rebuilds the table for its entries and one more at about 7/10 load (a map table's at 1/2).
    #[cold]
    #[inline(never)]
    fn make_room(&mut self) {
        let mut fresh = PackedShard::for_len(self.shape, self.len + 1);
        self.move_into(&mut fresh, None);
        *self = fresh;
    }

    /// Copies every entry into the empty `stay`, or into the empty `moved.0` when its
    /// placement hash has bit `moved.1` of the directory bits set (a split).
    fn move_into(&self, stay: &mut PackedShard, moved: Option<(&mut PackedShard, u64)>) {
        match self.shape.width() {
            16 => self.move_into_w::<16>(stay, moved),
            24 => self.move_into_w::<24>(stay, moved),
            _ => self.move_into_any(stay, moved),
        }
    }

    /// [`Self::move_into`] for slots of `W` bytes.
    fn move_into_w<const W: usize>(&self, stay: &mut PackedShard, mut moved: Option<(&mut PackedShard, u64)>) {
        for (g, &word) in self.ctrl.iter().enumerate() {
            let mut m = word & HI;
            while m != 0 {
                let b = (m.trailing_zeros() / 8) as usize;
                m &= m - 1;
                let i = g * 8 + b;
                let Some(bytes) = self.slots.get(i * W..i * W + W) else {
                    continue;
                };
                let hash = self.placement_hash(bytes);
                let ctrl = (word >> (b * 8)) as u8;
                let to = Self::side(stay, &mut moved, hash);
                let j = to.claim_fresh(hash, ctrl);
                if let (Some(d), Ok(src)) = (to.slots.get_mut(j * W..j * W + W), <&[u8; W]>::try_from(bytes)) {
                    d.copy_from_slice(src);
                }
            }
        }
    }

    /// [`Self::move_into`] for slots of any width.
    fn move_into_any(&self, stay: &mut PackedShard, mut moved: Option<(&mut PackedShard, u64)>) {
        for i in self.full_slots() {
            let bytes = self.slot(i);
            let hash = self.placement_hash(bytes);
            Self::side(stay, &mut moved, hash).copy_in(hash, self.ctrl_of(i), bytes);
        }
    }

    /// Where [`Self::move_into`] puts the entry of `hash`: `moved.0` when a split moves it
    /// away, else `stay`.
    #[inline(always)]
    fn side<'a>(
        stay: &'a mut PackedShard,
        moved: &'a mut Option<(&mut PackedShard, u64)>,
        hash: u64,
    ) -> &'a mut PackedShard {
        match moved {
            Some((t, bit)) if splits_away(hash, *bit) => t,
            _ => stay,
        }
    }

    /// [`Self::claim_with`] in a table being filled by [`Self::move_into`], which has no
    /// deleted slots and room for every entry.
    #[inline(always)]
    fn claim_fresh(&mut self, hash: u64, ctrl: u8) -> usize {
        let groups = self.ctrl.len();
        let mut g = self.first_group(hash);
        for _ in 0..groups {
            let Some(word) = self.ctrl.get_mut(g) else {
                break;
            };
            let free = !*word & HI;
            if free != 0 {
                let b = (free.trailing_zeros() / 8) as usize;
                *word |= u64::from(ctrl) << (b * 8);
                self.len += 1;
                return g * 8 + b;
            }
            g += 1;
            if g == groups {
                g = 0;
            }
        }
        // Not reached: the table was sized for every entry it is given.
        self.claim_with(hash, ctrl)
    }

    /// The hash that places a slot's entry: of its key and namespace.
    #[inline(always)]
    fn placement_hash(&self, s: &[u8]) -> u64 {
        let kl = usize::from(self.shape.key);
        hash_key_ns(&s[..kl], &s[kl..self.shape.key_len()])
    }

    /// Slot `i`'s control byte.
    #[inline]
    fn ctrl_of(&self, i: usize) -> u8 {
        (self.ctrl[i / 8] >> ((i % 8) * 8)) as u8
    }

    /// Inserts a copy of a slot's bytes taken from another table of the same shape, placed by
    /// `hash` and keeping its control byte `ctrl` (its tag: a map entry's mixes in its user
    /// key, which need not be hashed again).
    fn copy_in(&mut self, hash: u64, ctrl: u8, bytes: &[u8]) {
        let i = self.claim_with(hash, ctrl);
        self.slot_mut(i).copy_from_slice(bytes);
    }

    /// Writes an entry into slot `i`.
    #[inline(always)]
    pub(crate) fn write(&mut self, i: usize, p: &Probe<'_>, ts: i64, value: &[u8]) {
        let shape = self.shape;
        let kl = usize::from(shape.key);
        let s = self.slot_mut(i);
        copy_short(&mut s[..kl], p.key());
        copy_short(&mut s[kl..shape.key_len()], p.namespace());
        Self::write_cell(shape, s, ts, value);
    }

    /// Writes the timestamp (with TTL) and value of a slot.
    #[inline(always)]
    pub(crate) fn write_cell(shape: Shape, s: &mut [u8], ts: i64, value: &[u8]) {
        let at = shape.value_at();
        if shape.ttl {
            s[shape.ts_at()..at].copy_from_slice(&ts.to_le_bytes());
        }
        copy_short(&mut s[at..], value);
    }

    /// The timestamp and value of a slot's bytes.
    #[inline(always)]
    pub(crate) fn cell(shape: Shape, s: &[u8]) -> CellRef<'_> {
        let at = shape.value_at();
        let ts = if shape.ttl {
            let mut b = [0u8; 8];
            b.copy_from_slice(&s[shape.ts_at()..at]);
            i64::from_le_bytes(b)
        } else {
            0
        };
        CellRef { ts, bytes: &s[at..] }
    }

    /// The entry in a slot's bytes.
    #[inline(always)]
    fn entry(shape: Shape, s: &[u8]) -> EntryRef<'_> {
        let (kl, kn) = (usize::from(shape.key), shape.key_len());
        EntryRef {
            key: &s[..kl],
            namespace: &s[kl..kn],
            cell: Self::cell(shape, s),
        }
    }

    /// Applies `f` to the timestamps of `slots` (of a table with timestamps), writing back
    /// what it sets and emptying the slots for which it returns false; how many it emptied.
    pub(crate) fn retain_ts_of(&mut self, slots: Vec<usize>, f: &mut impl FnMut(&mut i64) -> bool) -> usize {
        let shape = self.shape;
        let mut removed = 0;
        for i in slots {
            let s = self.slot_mut(i);
            let mut ts = PackedShard::cell(shape, s).ts;
            let keep = f(&mut ts);
            s[shape.ts_at()..shape.value_at()].copy_from_slice(&ts.to_le_bytes());
            if !keep {
                self.vacate(i);
                removed += 1;
            }
        }
        removed
    }

    /// Empties slot `i`: marked empty when its group has an empty slot (no probe passes
    /// through such a group), deleted otherwise.
    pub(crate) fn vacate(&mut self, i: usize) {
        let c = if zero_bytes(self.ctrl[i / 8]) != 0 {
            EMPTY
        } else {
            DELETED
        };
        self.deleted += usize::from(c == DELETED);
        self.set_ctrl(i, c);
        self.len -= 1;
    }

    /// The indices of the full slots.
    pub(crate) fn full_slots(&self) -> impl Iterator<Item = usize> + '_ {
        self.ctrl.iter().enumerate().flat_map(|(g, &w)| {
            let mut m = w & HI;
            std::iter::from_fn(move || {
                if m == 0 {
                    return None;
                }
                let i = g * 8 + (m.trailing_zeros() / 8) as usize;
                m &= m - 1;
                Some(i)
            })
        })
    }

    /// Every entry.
    fn entries(&self) -> impl Iterator<Item = EntryRef<'_>> + '_ {
        self.full_slots().map(|i| Self::entry(self.shape, self.slot(i)))
    }

    /// Bytes held (control bytes and slots).
    pub(crate) fn heap_bytes(&self) -> usize {
        self.ctrl.len() * 8 + self.slots.len()
    }
}

impl ShardTable for PackedShard {
    const MAX_LEN: usize = PACKED_SHARD_LEN;

    fn len(&self) -> usize {
        self.len
    }

    fn split_off(&mut self, bit: u64) -> Self {
        let moved_n = self
            .full_slots()
            .filter(|&i| splits_away(self.placement_hash(self.slot(i)), bit))
            .count();
        let mut stay = PackedShard::for_len(self.shape, self.len - moved_n);
        let mut moved = PackedShard::for_len(self.shape, moved_n);
        self.move_into(&mut stay, Some((&mut moved, bit)));
        *self = stay;
        moved
    }
}

/// The table of a value, reducing or aggregating state in one key group: packed while every
/// entry has one shape, general slots otherwise. See the module docs.
#[derive(Clone, Debug)]
pub(crate) enum SingleTable {
    /// Every entry has the shape (none yet while the table is empty and unshaped).
    Packed(Option<Shape>, Dir<PackedShard>),
    /// Entries of several shapes, or too long to pack.
    Slots(KgTable<Cell>),
}

impl Default for SingleTable {
    fn default() -> Self {
        SingleTable::Packed(None, Dir::default())
    }
}

impl SingleTable {
    /// Number of entries.
    pub(crate) fn len(&self) -> usize {
        match self {
            SingleTable::Packed(_, d) => d.len(),
            SingleTable::Slots(t) => t.len(),
        }
    }

    /// The 8-byte value stored for the 8-byte key `key` (no namespace) placed by `hash`, when
    /// the table is packed with exactly that shape and no timestamps; `Err` when it is not
    /// (the caller then takes the general path).
    #[inline(always)]
    pub(crate) fn get_word(&self, key: u64, hash: u64) -> Result<Option<[u8; 8]>, ()> {
        match self {
            SingleTable::Packed(Some(shape), d) if shape.word_value => {
                let Some(t) = d.shard(hash) else {
                    return Ok(None);
                };
                Ok(t.find_word(key, hash).and_then(|i| t.word(i, 8)))
            }
            _ => Err(()),
        }
    }

    /// Sets the 8-byte key `key` (no namespace) placed by `hash` to the 8-byte `value`,
    /// creating the entry if needed, when the table is packed with exactly that shape and no
    /// timestamps; `Err` when it is not (the caller then takes the general path, which also
    /// gives an empty table its shape).
    #[inline(always)]
    pub(crate) fn put_word(&mut self, key: &[u8; 8], hash: u64, value: [u8; 8]) -> Result<(), ()> {
        let SingleTable::Packed(Some(shape), d) = self else {
            return Err(());
        };
        let shape = *shape;
        if !shape.word_value {
            return Err(());
        }
        // A put writes either way, so the shard is made writable (copied if shared) before
        // the one probe.
        let (t, len) = d.shard_for_insert(hash, || PackedShard::for_len(shape, 0));
        let i = match t.find_word(u64::from_ne_bytes(*key), hash) {
            Some(i) => i,
            None => {
                let i = t.claim(hash);
                *len += 1;
                if let Some(k) = t.word_mut(i, 0) {
                    k.copy_from_slice(key);
                }
                i
            }
        };
        if let Some(v) = t.word_mut(i, 8) {
            v.copy_from_slice(&value);
        }
        Ok(())
    }

    /// The value of `p`.
    #[inline(always)]
    pub(crate) fn get(&self, p: &Probe<'_>) -> Option<CellRef<'_>> {
        match self {
            SingleTable::Packed(Some(shape), d) => {
                if !shape.keys_fit(p) {
                    return None;
                }
                let t = d.shard(p.hash())?;
                let i = t.find(p)?;
                Some(PackedShard::cell(*shape, t.slot(i)))
            }
            SingleTable::Packed(None, _) => None,
            SingleTable::Slots(t) => t.get(p).map(|c| CellRef {
                ts: c.ts,
                bytes: c.bytes.as_slice(),
            }),
        }
    }

    /// Sets `p` to `value` stamped `ts` (kept when `ttl`); true when the entry was created.
    /// A table copied by a snapshot is copied (one shard) before it changes.
    #[inline(always)]
    pub(crate) fn put(&mut self, p: &Probe<'_>, ts: i64, value: &[u8], ttl: bool) -> bool {
        if let SingleTable::Packed(shape, d) = self {
            let shape = match *shape {
                Some(s) => s,
                None => match Shape::of(p, value, ttl) {
                    Some(s) => *shape.insert(s),
                    None => return self.convert_to_slots().put_slot(p, ts, value),
                },
            };
            if shape.fits(p, value, ttl) {
                // A put writes either way, so the shard is made writable (copied if shared)
                // before the one probe.
                let (t, len) = d.shard_for_insert(p.hash(), || PackedShard::for_len(shape, 0));
                if let Some(i) = t.find(p) {
                    PackedShard::write_cell(shape, t.slot_mut(i), ts, value);
                    return false;
                }
                let i = t.claim(p.hash());
                t.write(i, p, ts, value);
                *len += 1;
                return true;
            }
        }
        self.convert_to_slots().put_slot(p, ts, value)
    }

    /// Re-stamps an existing entry (TTL refreshed on read).
    pub(crate) fn set_ts(&mut self, p: &Probe<'_>, ts: i64) {
        match self {
            SingleTable::Packed(Some(shape), d) => {
                let shape = *shape;
                if !shape.ttl || !shape.keys_fit(p) {
                    return;
                }
                if let Some(i) = d.shard(p.hash()).and_then(|t| t.find(p)) {
                    if let Some(t) = d.shard_mut(p.hash()) {
                        let s = t.slot_mut(i);
                        s[shape.ts_at()..shape.value_at()].copy_from_slice(&ts.to_le_bytes());
                    }
                }
            }
            SingleTable::Packed(None, _) => {}
            SingleTable::Slots(t) => {
                if let Some(c) = t.get_mut(p) {
                    c.ts = ts;
                }
            }
        }
    }

    /// Removes `p`, returning its value. Copies nothing when absent.
    pub(crate) fn remove(&mut self, p: &Probe<'_>) -> Option<Cell> {
        match self {
            SingleTable::Packed(Some(shape), d) => {
                let shape = *shape;
                if !shape.keys_fit(p) {
                    return None;
                }
                let i = d.shard(p.hash()).and_then(|t| t.find(p))?;
                let t = d.shard_mut(p.hash())?;
                let c = PackedShard::cell(shape, t.slot(i));
                let cell = Cell::new(c.ts, c.bytes);
                t.vacate(i);
                d.count(-1);
                Some(cell)
            }
            SingleTable::Packed(None, _) => None,
            SingleTable::Slots(t) => t.remove(p),
        }
    }

    /// Applies `f` to every entry's timestamp; drops the entries for which it returns false.
    /// A packed table without timestamps becomes general slots first when `f` may set them.
    pub(crate) fn retain_ts(&mut self, mut f: impl FnMut(&mut i64) -> bool) {
        if let SingleTable::Packed(Some(shape), _) = self {
            if !shape.ttl {
                self.convert_to_slots();
            }
        }
        match self {
            SingleTable::Packed(Some(_), d) => {
                d.retain_shards(|t| {
                    let full: Vec<usize> = t.full_slots().collect();
                    t.retain_ts_of(full, &mut f);
                    t.len()
                });
            }
            SingleTable::Packed(None, _) => {}
            SingleTable::Slots(t) => t.retain_mut(|c| f(&mut c.ts)),
        }
    }

    /// Every entry, in no particular order.
    pub(crate) fn entries(&self) -> Box<dyn Iterator<Item = EntryRef<'_>> + '_> {
        match self {
            SingleTable::Packed(Some(_), d) => Box::new(d.tables().flat_map(PackedShard::entries)),
            SingleTable::Packed(None, _) => Box::new(std::iter::empty()),
            SingleTable::Slots(t) => Box::new(t.iter().map(|s| EntryRef {
                key: s.key(),
                namespace: s.namespace(),
                cell: CellRef {
                    ts: s.value.ts,
                    bytes: s.value.bytes.as_slice(),
                },
            })),
        }
    }

    /// A rough estimate of the heap bytes held.
    pub(crate) fn approx_bytes(&self, slot_bytes: usize) -> usize {
        match self {
            SingleTable::Packed(_, d) => d.tables().map(PackedShard::heap_bytes).sum(),
            SingleTable::Slots(t) => t
                .iter()
                .map(|s| slot_bytes + s.key_heap_bytes() + s.value.bytes.heap_bytes())
                .sum(),
        }
    }

    /// Converts a packed table to general slots (for good) and returns it.
    #[cold]
    #[inline(never)]
    fn convert_to_slots(&mut self) -> &mut Self {
        if let SingleTable::Packed(_, d) = self {
            let mut t: KgTable<Cell> = KgTable::default();
            for e in d.tables().flat_map(PackedShard::entries) {
                let p = Probe::new(e.key, e.namespace);
                t.get_or_insert_with(&p, || Cell {
                    ts: e.cell.ts,
                    bytes: Bytes::new(e.cell.bytes),
                });
            }
            tracing::trace!(entries = t.len(), "packed table converted to slots");
            *self = SingleTable::Slots(t);
        }
        self
    }

    /// [`SingleTable::put`] on general slots.
    #[inline]
    fn put_slot(&mut self, p: &Probe<'_>, ts: i64, value: &[u8]) -> bool {
        let SingleTable::Slots(t) = self else {
            return false;
        };
        let (cell, created) = t.get_or_insert_with(p, || Cell::new(ts, value));
        if !created {
            cell.set(ts, value);
        }
        created
    }

    /// The shards' addresses (tests of copy-on-write sharing).
    #[cfg(test)]
    pub(crate) fn shard_addresses(&self) -> Vec<usize> {
        match self {
            SingleTable::Packed(_, d) => d
                .shard_arcs()
                .iter()
                .map(|a| std::sync::Arc::as_ptr(a) as usize)
                .collect(),
            SingleTable::Slots(t) => t
                .shard_arcs()
                .iter()
                .map(|a| std::sync::Arc::as_ptr(a) as usize)
                .collect(),
        }
    }

    /// Whether no snapshot shares any of the table's shards (tests).
    #[cfg(test)]
    pub(crate) fn shards_unique(&self) -> bool {
        match self {
            SingleTable::Packed(_, d) => d.shard_arcs().iter().all(|a| std::sync::Arc::strong_count(a) == 1),
            SingleTable::Slots(t) => t.shard_arcs().iter().all(|a| std::sync::Arc::strong_count(a) == 1),
        }
    }

    /// Whether the table is packed (tests).
    #[cfg(test)]
    pub(crate) fn is_packed(&self) -> bool {
        matches!(self, SingleTable::Packed(..))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[derive(Clone, Debug)]
    enum Op {
        Put(u16, u8),
        /// A put of another shape (a longer value): converts the table.
        PutOdd(u16),
        Remove(u16),
        Get(u16),
        /// Clone the table (a snapshot) and check the clone after later writes.
        Freeze,
        /// Drop the timestamps of entries with an odd timestamp.
        Retain,
    }

    fn op() -> impl Strategy<Value = Op> {
        // Keys from a range a few shards wide, so splits, rebuilds and tombstones all occur.
        let k = 0u16..3000;
        prop_oneof![
            30 => (k.clone(), any::<u8>()).prop_map(|(k, v)| Op::Put(k, v)),
            1 => k.clone().prop_map(Op::PutOdd),
            12 => k.clone().prop_map(Op::Remove),
            8 => k.prop_map(Op::Get),
            1 => Just(Op::Freeze),
            1 => Just(Op::Retain),
        ]
    }

    /// (key ‖ namespace) → (timestamp, value).
    type Model = BTreeMap<Vec<u8>, (i64, Vec<u8>)>;

    /// The namespace and key encoding of a model test: two-byte keys in a namespace, or
    /// eight-byte keys without one (`long`).
    pub(crate) fn test_keys(long: bool) -> (&'static [u8], impl Fn(u16) -> Vec<u8>) {
        let ns: &'static [u8] = if long { b"" } else { b"ns" };
        (ns, move |k: u16| {
            if long {
                u64::from(k).to_be_bytes().to_vec()
            } else {
                k.to_be_bytes().to_vec()
            }
        })
    }

    fn contents(t: &SingleTable) -> Model {
        t.entries()
            .map(|e| ([e.key, e.namespace].concat(), (e.cell.ts, e.cell.bytes.to_vec())))
            .collect()
    }

    proptest! {
        /// A single-value table behaves like a map from (key, namespace) to (timestamp,
        /// value), packed or converted, and a clone taken before writes never changes.
        #[test]
        fn behaves_like_a_map(
            ops in proptest::collection::vec(op(), 1..4000),
            ttl in any::<bool>(),
            convert in proptest::bool::weighted(0.25),
            long in any::<bool>(),
        ) {
            // Two-byte keys in a namespace, or eight-byte keys without one (the word compare).
            let (ns, key_of) = test_keys(long);
            let mut t = SingleTable::default();
            let mut model = Model::new();
            let mut frozen: Vec<(SingleTable, Model)> = Vec::new();
            let stamp = |v: i64| if ttl { v } else { 0 };
            for (n, op) in ops.into_iter().enumerate() {
                match op {
                    Op::Put(k, v) => {
                        let key = key_of(k);
                        let p = Probe::new(&key, ns);
                        let value = [v; 8];
                        let created = t.put(&p, n as i64, &value, ttl);
                        let old = model.insert([&key[..], ns].concat(), (stamp(n as i64), value.to_vec()));
                        prop_assert_eq!(created, old.is_none());
                    }
                    // Most cases stay packed throughout; a quarter convert somewhere.
                    Op::PutOdd(_) if !convert => {}
                    Op::PutOdd(k) => {
                        let key = key_of(k);
                        let was_empty = model.is_empty();
                        t.put(&Probe::new(&key, ns), 7, b"a longer value", ttl);
                        model.insert([&key[..], ns].concat(), (stamp(7), b"a longer value".to_vec()));
                        // Packed with this shape only when it was the first entry.
                        prop_assert!(was_empty || !t.is_packed() || model.values().all(|c| c.1.len() == 14));
                    }
                    Op::Remove(k) => {
                        let key = key_of(k);
                        let got = t.remove(&Probe::new(&key, ns)).map(|c| (c.ts, c.bytes.as_slice().to_vec()));
                        let want = model.remove(&[&key[..], ns].concat());
                        prop_assert_eq!(got.map(|(ts, v)| (stamp(ts), v)), want);
                    }
                    Op::Get(k) => {
                        let key = key_of(k);
                        let got = t.get(&Probe::new(&key, ns)).map(|c| (stamp(c.ts), c.bytes.to_vec()));
                        prop_assert_eq!(got.as_ref(), model.get(&[&key[..], ns].concat()));
                        // Another namespace or key length is never found.
                        prop_assert!(t.get(&Probe::new(&key, b"nt")).is_none());
                        prop_assert!(t.get(&Probe::new(&key[..1], ns)).is_none());
                    }
                    Op::Freeze => frozen.push((t.clone(), model.clone())),
                    Op::Retain => {
                        if ttl {
                            t.retain_ts(|ts| *ts % 2 == 0);
                            model.retain(|_, (ts, _)| *ts % 2 == 0);
                        }
                    }
                }
                prop_assert_eq!(t.len(), model.len());
            }
            // Every entry is found by probing (a broken probe chain would hide some).
            for (k, c) in &model {
                let (key, kns) = k.split_at(k.len() - ns.len());
                let got = t.get(&Probe::new(key, kns)).map(|c| (stamp(c.ts), c.bytes.to_vec()));
                prop_assert_eq!(got.as_ref(), Some(c));
            }
            let mut want = model.clone();
            want.values_mut().for_each(|c| c.0 = if ttl { c.0 } else { 0 });
            let mut got = contents(&t);
            got.values_mut().for_each(|c| c.0 = if ttl { c.0 } else { 0 });
            prop_assert_eq!(got, want);
            for (f, m) in &frozen {
                let mut got = contents(f);
                got.values_mut().for_each(|c| c.0 = if ttl { c.0 } else { 0 });
                prop_assert_eq!(&got, m);
            }
        }
    }

    #[test]
    fn a_long_value_state_of_one_shape_stays_packed_and_small() {
        let mut t = SingleTable::default();
        for k in 0..20_000u64 {
            t.put(&Probe::new(&k.to_be_bytes(), b""), 0, &k.to_le_bytes(), false);
        }
        assert!(t.is_packed());
        assert_eq!(t.len(), 20_000);
        // Control byte and 16-byte slot per bucket, at 7/10 to 15/16 load.
        let per_entry = t.approx_bytes(0) as f64 / 20_000.0;
        assert!(per_entry < 17.0 / 0.65, "{per_entry} bytes per entry");
        for k in 0..20_000u64 {
            let got = t.get(&Probe::new(&k.to_be_bytes(), b"")).map(|c| c.bytes.to_vec());
            assert_eq!(got, Some(k.to_le_bytes().to_vec()));
        }
    }

    /// Rebuilds and splits move entries with loops of their own for 16- and 24-byte slots
    /// and a general one for other widths: every entry survives them, with its timestamp.
    #[test]
    fn rebuilds_and_splits_keep_every_entry_of_every_width() {
        for (value_len, ttl) in [(8usize, false), (8, true), (4, false), (13, true)] {
            let mut t = SingleTable::default();
            let value = |k: u64| k.to_le_bytes().repeat(2)[..value_len].to_vec();
            for k in 0..20_000u64 {
                t.put(&Probe::new(&k.to_be_bytes(), b""), k as i64, &value(k), ttl);
            }
            for k in (0..20_000u64).step_by(3) {
                assert!(t.remove(&Probe::new(&k.to_be_bytes(), b"")).is_some());
            }
            for k in 20_000..30_000u64 {
                t.put(&Probe::new(&k.to_be_bytes(), b""), k as i64, &value(k), ttl);
            }
            assert!(t.is_packed());
            for k in 0..30_000u64 {
                let got = t
                    .get(&Probe::new(&k.to_be_bytes(), b""))
                    .map(|c| (c.ts, c.bytes.to_vec()));
                let want = (k >= 20_000 || k % 3 != 0).then(|| (if ttl { k as i64 } else { 0 }, value(k)));
                assert_eq!(got, want, "key {k}, value length {value_len}, ttl {ttl}");
            }
            assert_eq!(t.len(), 30_000 - 20_000usize.div_ceil(3));
        }
    }

    #[test]
    fn too_long_to_pack_starts_as_slots() {
        let mut t = SingleTable::default();
        t.put(&Probe::new(&[1; 40], b""), 0, b"v", false);
        assert!(!t.is_packed());
        assert_eq!(
            t.get(&Probe::new(&[1; 40], b"")).map(|c| c.bytes.to_vec()),
            Some(b"v".to_vec())
        );
    }
}
#[cfg(test)]
mod probe_tests {
    use super::*;

    /// A removal from a group that was full when a later entry probed past it leaves a
    /// tombstone, so that entry stays reachable.
    #[test]
    fn removal_keeps_probe_chains() {
        let shape = Shape::new(8, 0, 0, 8, false, false);
        let mut s = PackedShard::for_len(shape, 0);
        let n = 850u64;
        let mut displaced = 0;
        for k in 0..n {
            let key = k.to_be_bytes();
            let p = Probe::new(&key, b"");
            let i = s.claim(p.hash());
            displaced += usize::from(i / 8 != s.first_group(p.hash()));
            s.write(i, &p, 0, &key);
        }
        // Entries past a full group exist, so removals in full groups matter.
        assert!(displaced > 0);
        for k in (0..n).step_by(3) {
            let key = k.to_be_bytes();
            let i = s.find(&Probe::new(&key, b"")).expect("present");
            s.vacate(i);
        }
        for k in 0..n {
            let key = k.to_be_bytes();
            assert_eq!(s.find(&Probe::new(&key, b"")).is_some(), k % 3 != 0, "key {k}");
        }
    }
}
