//! [`HashMapBackend`]: the keyed state backend over per-key-group copy-on-write tables.

use crate::bytes::{bytes_eq, copy_short, Bytes};
use crate::packed::SingleTable;
use crate::packed_map::MapTable;
use crate::snapshot::HashMapSnapshot;
use crate::table::{key_hash, KgTable, Probe, Slot};
use statekit_core::keygroup::check_max_parallelism;
use statekit_core::state::KeyedStateKind;
use statekit_core::stream::check_entry_shape;
use statekit_core::{
    BackendConfig, Clock, Entry, KeyGroupAssigner, KeyGroupRange, KeyGroupScheme, KeyedStateBackend, KeyedStateView,
    StateDescriptor, StateError, StateFunctions, StateHandle,
};
use std::collections::HashMap;
use std::fmt;
use std::ops::ControlFlow;
use std::sync::Arc;

/// A stored value, list element or map value with its last-update timestamp (0 and unused
/// for states without TTL).
#[derive(Clone, Debug)]
pub(crate) struct Cell {
    pub(crate) ts: i64,
    pub(crate) bytes: Bytes,
}

impl Cell {
    #[inline]
    pub(crate) fn new(ts: i64, bytes: &[u8]) -> Self {
        Cell {
            ts,
            bytes: Bytes::new(bytes),
        }
    }

    /// Overwrites the bytes, reusing the buffer.
    #[inline]
    pub(crate) fn set(&mut self, ts: i64, bytes: &[u8]) {
        self.ts = ts;
        self.bytes.set(bytes);
    }
}

/// A reduce or accumulator-merge function.
type MergeFn = dyn Fn(&[u8], &[u8]) -> Vec<u8> + Send + Sync;

/// The elements of one list.
pub(crate) type ListValue = Vec<Cell>;
/// The entries of one map, ordered by user key.
pub(crate) use crate::map::MapValue;

/// The per-key-group tables of one state (index = key group − range start).
#[derive(Clone, Debug)]
pub(crate) enum Tables {
    /// Value, reducing and aggregating states (packed while their entries share a shape).
    Single(Vec<SingleTable>),
    /// List states.
    List(Vec<KgTable<ListValue>>),
    /// Map states (packed while their entries share a shape and maps are short).
    Map(Vec<MapTable>),
}

impl Tables {
    fn new(kind: KeyedStateKind, key_groups: usize) -> Self {
        fn tables<T: Default>(n: usize) -> Vec<T> {
            (0..n).map(|_| T::default()).collect()
        }
        match kind {
            KeyedStateKind::List => Tables::List(tables(key_groups)),
            KeyedStateKind::Map => Tables::Map(tables(key_groups)),
            _ => Tables::Single(tables(key_groups)),
        }
    }

    fn len(&self) -> usize {
        fn sum<V>(t: &[KgTable<V>]) -> usize {
            t.iter().map(|t| t.len()).sum()
        }
        match self {
            Tables::Single(t) => t.iter().map(|t| t.len()).sum(),
            Tables::List(t) => sum(t),
            Tables::Map(t) => t.iter().map(|t| t.maps()).sum(),
        }
    }

    /// Applies `f` to every cell's timestamp (value, list element, map value); drops cells
    /// for which it returns false, and (key, namespace) entries left empty.
    fn retain_cells(&mut self, mut f: impl FnMut(&mut i64) -> bool) {
        fn each<V: Clone>(t: &mut [KgTable<V>], mut keep: impl FnMut(&mut V) -> bool) {
            for t in t.iter_mut().filter(|t| t.len() > 0) {
                t.retain_mut(&mut keep);
            }
        }
        match self {
            Tables::Single(t) => {
                for t in t.iter_mut().filter(|t| t.len() > 0) {
                    t.retain_ts(&mut f);
                }
            }
            Tables::List(t) => each(t, |l| {
                l.retain_mut(|c| f(&mut c.ts));
                !l.is_empty()
            }),
            Tables::Map(t) => {
                for t in t.iter_mut().filter(|t| !t.is_empty()) {
                    t.retain_cells(&mut f);
                }
            }
        }
    }
}

/// One registered state.
struct Registered {
    desc: StateDescriptor,
    functions: StateFunctions,
    tables: Tables,
}

/// TTL context of one operation (shared with the other backends).
pub(crate) use statekit_core::TtlContext as Ttl;

use statekit_core::state::accepts::{ADDABLE, LIST, MAP, MERGEABLE, SINGLE};

#[cold]
#[inline(never)]
fn unknown_state(h: StateHandle) -> StateError {
    StateError::UnknownState(format!("handle {}", h.0))
}

#[cold]
#[inline(never)]
fn out_of_range(key_group: u32, range: KeyGroupRange) -> StateError {
    StateError::KeyGroupOutOfRange { key_group, range }
}

/// Removes the probed entry from the table without copying anything when it is absent.
#[inline]
fn remove_entry<V: Clone>(t: &mut KgTable<V>, p: &Probe<'_>) -> Option<V> {
    t.get(p)?;
    t.remove(p)
}

/// Sets `out` (empty) to an 8-byte value: one word store when `out` has room.
#[inline(always)]
fn set_word(out: &mut Vec<u8>, word: [u8; 8]) {
    if out.capacity() >= 8 {
        // SAFETY: `out` has room for 8 bytes (checked above), written here as one unaligned
        // store before its length covers them (`out` is empty, so nothing is overwritten).
        unsafe {
            out.as_mut_ptr().cast::<[u8; 8]>().write_unaligned(word);
            out.set_len(8);
        }
    } else {
        out.extend_from_slice(&word);
    }
}

/// Sets `out` (empty) to `bytes`: up to 32 bytes as one fixed-size copy, no `memcpy` call.
#[inline(always)]
fn set_short(out: &mut Vec<u8>, bytes: &[u8]) {
    let n = bytes.len();
    if n <= 32 {
        let mut buf = [0u8; 32];
        copy_short(&mut buf[..n], bytes);
        out.extend_from_slice(&buf);
        out.truncate(n);
    } else {
        out.extend_from_slice(bytes);
    }
}

/// Removes the probed value without copying anything when it is absent.
#[inline]
fn remove_single(t: &mut SingleTable, p: &Probe<'_>) -> Option<Cell> {
    t.get(p)?;
    t.remove(p)
}

/// Mutable access to an existing entry, copying (shared) structure only when it exists.
#[inline]
fn existing_mut<'t, V: Clone>(t: &'t mut KgTable<V>, p: &Probe<'_>) -> Option<&'t mut V> {
    t.get(p)?;
    t.get_mut(p)
}

/// `a % d` for a fixed `d` with two multiplications instead of a division (Lemire, Kaser
/// and Kurz, "Faster remainder by direct computation", 2019; exact for all 32-bit `a` and
/// `d`). The key group of every operation is a remainder by the max parallelism.
#[derive(Clone, Copy, Debug)]
struct FastMod {
    magic: u64,
    d: u32,
}

impl FastMod {
    fn new(d: u32) -> Self {
        assert!(d > 0, "modulus must be positive");
        FastMod {
            // For d = 1 this wraps to 0, and every remainder comes out 0, as it should.
            magic: (u64::MAX / u64::from(d)).wrapping_add(1),
            d,
        }
    }

    #[inline(always)]
    fn rem(self, a: u32) -> u32 {
        let low = self.magic.wrapping_mul(u64::from(a));
        ((u128::from(low) * u128::from(self.d)) >> 64) as u32
    }
}

/// Longest key whose key hash and key group [`LastKey`] remembers.
const LAST_KEY_MAX: usize = 32;

/// The last key an operation located, with its key hash and table index. Records usually
/// touch one key several times in a row (a value `get` then `put`, a map `put` then `get`,
/// several states of the same key), and these then hash the key and compute its key group
/// once. Both are pure functions of the key bytes (the max parallelism and the range never
/// change), so the memo needs no invalidation.
#[derive(Clone, Copy, Debug)]
struct LastKey {
    /// Length of the key, `usize::MAX` when none is remembered.
    len: usize,
    bytes: [u8; LAST_KEY_MAX],
    key_hash: u32,
    idx: u32,
}

impl LastKey {
    const NONE: LastKey = LastKey {
        len: usize::MAX,
        bytes: [0; LAST_KEY_MAX],
        key_hash: 0,
        idx: 0,
    };

    /// The remembered `(key hash, table index)` when `key` is the remembered key.
    #[inline(always)]
    fn get(&self, key: &[u8]) -> Option<(u32, u32)> {
        if key.len() == self.len && bytes_eq(key, &self.bytes[..key.len()]) {
            Some((self.key_hash, self.idx))
        } else {
            None
        }
    }

    #[inline(always)]
    fn set(&mut self, key: &[u8], key_hash: u32, idx: u32) {
        if key.len() <= LAST_KEY_MAX {
            copy_short(&mut self.bytes[..key.len()], key);
            self.len = key.len();
            self.key_hash = key_hash;
            self.idx = idx;
        }
    }
}

/// The heap keyed state backend. See the [crate docs](crate) for the design.
///
/// ```
/// use statekit_core::{BackendConfig, KeyedStateBackend, StateDescriptor, StateFunctions, TypeSchema};
/// use statekit_hashmap::HashMapBackend;
///
/// let mut backend = HashMapBackend::new(BackendConfig::for_subtask(128, 1, 0)?)?;
/// let count = backend.register(
///     StateDescriptor::value("count", TypeSchema::Utf8, TypeSchema::I64),
///     StateFunctions::None,
/// )?;
/// backend.put(count, b"alice", b"", &7i64.to_be_bytes())?;
/// let mut out = Vec::new();
/// assert!(backend.get(count, b"alice", b"", &mut out)?);
/// assert_eq!(out, 7i64.to_be_bytes());
///
/// // A frozen view; the backend may keep changing while another thread reads it.
/// let view = backend.snapshot(1)?;
/// backend.put(count, b"alice", b"", &8i64.to_be_bytes())?;
/// let copy = statekit_core::MemoryView::collect(view.as_ref(), view.key_group_range())?;
/// assert_eq!(copy.entries()[0].value, 7i64.to_be_bytes());
/// # Ok::<(), statekit_core::StateError>(())
/// ```
pub struct HashMapBackend {
    max_parallelism: u32,
    /// `key hash % max_parallelism`.
    key_group_of: FastMod,
    range: KeyGroupRange,
    /// `range.start()` and `range.len()`, for the per-operation range check.
    range_start: u32,
    range_len: u32,
    /// `range_len` under statekit's rule, 0 under Flink's: the word fast paths place keys by
    /// the key hash alone, and under Flink's rule every key then takes the general path, so
    /// the fast path carries no branch for the rule.
    word_range_len: u32,
    clock: Arc<dyn Clock>,
    states: Vec<Registered>,
    names: HashMap<String, StateHandle>,
    last: LastKey,
    /// The key-group rule ([`BackendConfig::key_group_scheme`]).
    scheme: KeyGroupScheme,
    /// Flink's rule fixed to the states' key type (set when the first state registers);
    /// `None` under statekit's rule, which reuses the key hash (the hot path: kept apart).
    flink_groups: Option<Box<KeyGroupAssigner>>,
}

impl fmt::Debug for HashMapBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HashMapBackend")
            .field("max_parallelism", &self.max_parallelism)
            .field("key_group_range", &self.range)
            .field("states", &self.states.iter().map(|s| &s.desc.name).collect::<Vec<_>>())
            .field("entries", &self.entry_count())
            .finish()
    }
}

/// The key group of `key` under Flink's rule: off the hot path of statekit's rule, which the
/// key hash serves.
#[cold]
#[inline(never)]
fn flink_key_group(a: &KeyGroupAssigner, key: &[u8]) -> Result<u32, StateError> {
    a.key_group(key).map_err(|e| StateError::Other(Box::new(e)))
}

impl HashMapBackend {
    /// A backend for `config`: checks the max parallelism and that the key-group range lies
    /// within it.
    pub fn new(config: BackendConfig) -> Result<Self, StateError> {
        check_max_parallelism(config.max_parallelism)?;
        let range = config.key_group_range;
        if !range.is_empty() && range.end_exclusive() > config.max_parallelism {
            return Err(StateError::InvalidParallelism(
                statekit_core::error::ParallelismError::RangeExceedsMax {
                    range,
                    max_parallelism: config.max_parallelism,
                },
            ));
        }
        tracing::debug!(max_parallelism = config.max_parallelism, %range, "new heap keyed state backend");
        Ok(HashMapBackend {
            max_parallelism: config.max_parallelism,
            key_group_of: FastMod::new(config.max_parallelism),
            scheme: config.key_group_scheme,
            flink_groups: None,
            range,
            range_start: range.start(),
            range_len: range.len(),
            word_range_len: match config.key_group_scheme {
                KeyGroupScheme::Statekit => range.len(),
                KeyGroupScheme::Flink => 0,
            },
            clock: config.clock,
            states: Vec::new(),
            names: HashMap::new(),
            last: LastKey::NONE,
        })
    }

    /// The clock used for TTL.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Number of stored (state, key, namespace) entries, over all states and key groups,
    /// including TTL-expired ones not purged yet. O(#states × #key groups).
    pub fn entry_count(&self) -> usize {
        self.states.iter().map(|s| s.tables.len()).sum()
    }

    /// A rough estimate of the heap bytes held by keys, namespaces, values and their
    /// per-entry overhead. Walks every entry: O(#entries).
    pub fn approx_bytes(&self) -> usize {
        use std::mem::size_of;
        // A hash table slot plus its control byte, at hashbrown's 7/8 maximum load.
        fn slot<V>() -> usize {
            (size_of::<Slot<V>>() + 1) * 8 / 7
        }
        const CELL: usize = size_of::<Cell>();
        let mut total = 0;
        for st in &self.states {
            match &st.tables {
                Tables::Single(t) => {
                    total += t.iter().map(|t| t.approx_bytes(slot::<Cell>())).sum::<usize>();
                }
                Tables::List(t) => {
                    for s in t.iter().flat_map(|t| t.iter()) {
                        total += slot::<ListValue>() + s.key_heap_bytes() + s.value.capacity() * CELL;
                        total += s.value.iter().map(|c| c.bytes.heap_bytes()).sum::<usize>();
                    }
                }
                Tables::Map(t) => {
                    total += t.iter().map(|t| t.approx_bytes(slot::<MapValue>())).sum::<usize>();
                }
            }
        }
        total
    }

    /// True when (key, namespace) holds a visible value, list element or map entry. Does not
    /// refresh TTL timestamps.
    pub fn contains(&self, state: StateHandle, key: &[u8], namespace: &[u8]) -> Result<bool, StateError> {
        let (i, idx, kh) = self.locate(state, key)?;
        let st = &self.states[i];
        let ttl = self.ttl_of(&st.desc);
        let p = Probe::with_key_hash(key, namespace, kh);
        Ok(match &st.tables {
            Tables::Single(t) => t[idx].get(&p).is_some_and(|c| ttl.live(c.ts)),
            Tables::List(t) => t[idx].get(&p).is_some_and(|l| l.iter().any(|c| ttl.live(c.ts))),
            Tables::Map(t) => t[idx].any(&p, |c| ttl.live(c.ts)),
        })
    }

    /// Drops every TTL-expired value, list element and map entry now. Touches (and so,
    /// while a snapshot is alive, copies) every non-empty shard of every TTL state. Returns
    /// the number of (state, key, namespace) entries removed entirely.
    pub fn purge_expired(&mut self) -> usize {
        let now = self.clock.now_ms();
        let mut removed = 0;
        for st in &mut self.states {
            if st.desc.ttl.is_none() {
                continue;
            }
            let ttl = Ttl { cfg: st.desc.ttl, now };
            let before = st.tables.len();
            st.tables.retain_cells(|ts| ttl.live(*ts));
            removed += before - st.tables.len();
        }
        removed
    }

    /// The frozen view [`KeyedStateBackend::snapshot`] returns, as its concrete type.
    pub fn snapshot_view(&self, checkpoint_id: u64) -> HashMapSnapshot {
        let now = if self.states.iter().any(|s| s.desc.ttl.is_some()) {
            self.clock.now_ms()
        } else {
            0
        };
        HashMapSnapshot {
            checkpoint_id,
            max_parallelism: self.max_parallelism,
            scheme: self.scheme,
            range: self.range,
            now_ms: now,
            states: self.states.iter().map(|s| s.desc.clone()).collect(),
            tables: self.states.iter().map(|s| s.tables.clone()).collect(),
        }
    }

    /// Checks the handle and the key's key group: `(state index, table index, key hash)`.
    /// The key hash is the murmur3 that picks the key group
    /// ([`statekit_core::key_group_for_key`]); the tables reuse it, so the key is hashed once.
    #[inline(always)]
    fn locate(&self, h: StateHandle, key: &[u8]) -> Result<(usize, usize, u32), StateError> {
        let i = h.0 as usize;
        if i >= self.states.len() {
            return Err(unknown_state(h));
        }
        let (kh, idx) = self.key_group_index(key)?;
        Ok((i, idx as usize, kh))
    }

    /// [`Self::locate`] through the [`LastKey`] memo.
    #[inline(always)]
    fn locate_mut(&mut self, h: StateHandle, key: &[u8]) -> Result<(usize, usize, u32), StateError> {
        let i = h.0 as usize;
        if i >= self.states.len() {
            return Err(unknown_state(h));
        }
        let (kh, idx) = match self.last.get(key) {
            Some(hit) => hit,
            None => {
                let (kh, idx) = self.key_group_index(key)?;
                self.last.set(key, kh, idx);
                (kh, idx)
            }
        };
        Ok((i, idx as usize, kh))
    }

    /// The value of an 8-byte key without namespace in a packed `(8-byte key, 8-byte value)`
    /// table without TTL: `Some(found)`; `None` for every other case, which
    /// [`Self::get_general`] serves. Short, so that [`KeyedStateBackend::get`] inlines into
    /// its caller's loop: at 1 M keys a `get` waits on one cache miss, and fewer instructions
    /// per `get` let the next one's miss start while this one's is outstanding.
    #[inline(always)]
    fn get_word(&mut self, state: StateHandle, key: &[u8], namespace: &[u8]) -> Option<Option<[u8; 8]>> {
        let k8 = <&[u8; 8]>::try_from(key).ok()?;
        if !namespace.is_empty() {
            return None;
        }
        let st = self.states.get(state.0 as usize)?;
        let (Tables::Single(tables), None) = (&st.tables, st.desc.ttl) else {
            return None;
        };
        let (kh, idx) = self.word_key_group_index(key)?;
        let found = tables
            .get(idx as usize)?
            .get_word(u64::from_ne_bytes(*k8), crate::table::table_hash(kh, &[]))
            .ok()?;
        self.last.set(key, kh, idx);
        Some(found)
    }

    /// [`KeyedStateBackend::map_get`] in a packed table of [`crate::packed::Shape::is_word_map`]
    /// without TTL: `None` for every other case, which [`Self::map_get_general`] serves
    /// (see [`Self::get_word`]).
    #[inline(always)]
    fn map_get_word(
        &mut self,
        state: StateHandle,
        key: &[u8],
        namespace: &[u8],
        user_key: &[u8],
    ) -> Option<Option<[u8; 8]>> {
        let k8 = <&[u8; 8]>::try_from(key).ok()?;
        let u8s = <&[u8; 8]>::try_from(user_key).ok()?;
        if !namespace.is_empty() {
            return None;
        }
        let st = self.states.get(state.0 as usize)?;
        let (Tables::Map(tables), None) = (&st.tables, st.desc.ttl) else {
            return None;
        };
        let (kh, idx) = self.word_key_group_index(key)?;
        let found = tables
            .get(idx as usize)?
            .get_word(k8, u8s, crate::table::table_hash(kh, &[]))
            .ok()?;
        self.last.set(key, kh, idx);
        Some(found)
    }

    /// [`KeyedStateBackend::map_put`] of an 8-byte value in a packed table of
    /// [`crate::packed::Shape::is_word_map`] without TTL: `None` for every other case, which
    /// [`Self::map_put_general`] serves.
    #[inline(always)]
    fn map_put_word(
        &mut self,
        state: StateHandle,
        key: &[u8],
        namespace: &[u8],
        user_key: &[u8],
        value: &[u8],
    ) -> Option<()> {
        let k8 = <&[u8; 8]>::try_from(key).ok()?;
        let u8s = <&[u8; 8]>::try_from(user_key).ok()?;
        let v8 = <[u8; 8]>::try_from(value).ok()?;
        if !namespace.is_empty() {
            return None;
        }
        let (i, idx, kh) = self.locate_mut(state, key).ok()?;
        let st = &mut self.states[i];
        let (Tables::Map(tables), None) = (&mut st.tables, st.desc.ttl) else {
            return None;
        };
        tables
            .get_mut(idx)?
            .put_word(k8, u8s, crate::table::table_hash(kh, &[]), v8)
            .ok()
    }

    /// [`KeyedStateBackend::get`] for every case [`Self::get_word`] does not serve (and its
    /// errors).
    #[inline(never)]
    fn get_general(
        &mut self,
        state: StateHandle,
        key: &[u8],
        namespace: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<bool, StateError> {
        let (i, idx, kh) = self.locate_mut(state, key)?;
        let st = &mut self.states[i];
        let Tables::Single(tables) = &mut st.tables else {
            return Err(StateError::wrong_kind(&st.desc, SINGLE));
        };
        let p = Probe::with_key_hash(key, namespace, kh);
        if let Some(cfg) = st.desc.ttl {
            let ttl = Ttl {
                cfg: Some(cfg),
                now: self.clock.now_ms(),
            };
            return Ok(get_ttl(&mut tables[idx], &p, ttl, out));
        }
        match tables[idx].get(&p) {
            Some(cell) => {
                set_short(out, cell.bytes);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// [`KeyedStateBackend::put`] of an 8-byte value under an 8-byte key without namespace
    /// into a packed table of that shape without TTL: `None` for every other case, which
    /// [`Self::put_general`] serves (see [`Self::get_word`]).
    #[inline(always)]
    fn put_word(&mut self, state: StateHandle, key: &[u8], namespace: &[u8], value: &[u8]) -> Option<()> {
        let k8 = <&[u8; 8]>::try_from(key).ok()?;
        let v8 = <[u8; 8]>::try_from(value).ok()?;
        if !namespace.is_empty() {
            return None;
        }
        let (i, idx, kh) = self.locate_mut(state, key).ok()?;
        let st = &mut self.states[i];
        let (Tables::Single(tables), None) = (&mut st.tables, st.desc.ttl) else {
            return None;
        };
        tables
            .get_mut(idx)?
            .put_word(k8, crate::table::table_hash(kh, &[]), v8)
            .ok()
    }

    /// [`KeyedStateBackend::put`] for every case [`Self::put_word`] does not serve.
    #[inline(never)]
    fn put_general(
        &mut self,
        state: StateHandle,
        key: &[u8],
        namespace: &[u8],
        value: &[u8],
    ) -> Result<(), StateError> {
        let (st, idx, kh, ttl) = self.parts(state, key)?;
        let Tables::Single(tables) = &mut st.tables else {
            return Err(StateError::wrong_kind(&st.desc, SINGLE));
        };
        let p = Probe::with_key_hash(key, namespace, kh);
        tables[idx].put(&p, ttl.now, value, ttl.cfg.is_some());
        Ok(())
    }

    /// [`KeyedStateBackend::map_get`] for every case [`Self::map_get_word`] does not serve.
    #[inline(never)]
    fn map_get_general(
        &mut self,
        state: StateHandle,
        key: &[u8],
        namespace: &[u8],
        user_key: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<bool, StateError> {
        let (i, idx, kh) = self.locate_mut(state, key)?;
        let st = &mut self.states[i];
        let Tables::Map(tables) = &mut st.tables else {
            return Err(StateError::wrong_kind(&st.desc, MAP));
        };
        let p = Probe::with_key_hash(key, namespace, kh);
        if let Some(cfg) = st.desc.ttl {
            let ttl = Ttl {
                cfg: Some(cfg),
                now: self.clock.now_ms(),
            };
            return Ok(map_get_ttl(&mut tables[idx], &p, user_key, ttl, out));
        }
        match tables[idx].get(&p, user_key) {
            Some(cell) => {
                set_short(out, cell.bytes);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// [`KeyedStateBackend::map_put`] for every case [`Self::map_put_word`] does not serve.
    #[inline(never)]
    fn map_put_general(
        &mut self,
        state: StateHandle,
        key: &[u8],
        namespace: &[u8],
        user_key: &[u8],
        value: &[u8],
    ) -> Result<(), StateError> {
        let (st, idx, kh, ttl) = self.parts(state, key)?;
        let Tables::Map(tables) = &mut st.tables else {
            return Err(StateError::wrong_kind(&st.desc, MAP));
        };
        let p = Probe::with_key_hash(key, namespace, kh);
        tables[idx].put(&p, user_key, ttl.now, value, ttl.cfg.is_some());
        Ok(())
    }

    /// `(key hash, table index)` of a key for the word fast paths: statekit's rule only (see
    /// `word_range_len`); `None` sends the key to the general path.
    #[inline(always)]
    fn word_key_group_index(&self, key: &[u8]) -> Option<(u32, u32)> {
        let kh = key_hash(key);
        let idx = self.key_group_of.rem(kh).wrapping_sub(self.range_start);
        (idx < self.word_range_len).then_some((kh, idx))
    }

    /// `(key hash, table index)` of a key, or the out-of-range error.
    #[inline(always)]
    fn key_group_index(&self, key: &[u8]) -> Result<(u32, u32), StateError> {
        let kh = key_hash(key);
        let kg = match &self.flink_groups {
            None => self.key_group_of.rem(kh),
            Some(a) => flink_key_group(a, key)?,
        };
        let idx = kg.wrapping_sub(self.range_start);
        if idx >= self.range_len {
            return Err(out_of_range(kg, self.range));
        }
        Ok((kh, idx))
    }

    #[inline]
    fn ttl_of(&self, desc: &StateDescriptor) -> Ttl {
        Ttl::of(desc, self.clock.as_ref())
    }

    /// Resolves the handle and the key's key group, and reads the clock for TTL states:
    /// `(state, table index, key hash, TTL context)`.
    #[inline(always)]
    fn parts(&mut self, h: StateHandle, key: &[u8]) -> Result<(&mut Registered, usize, u32, Ttl), StateError> {
        let (i, idx, kh) = self.locate_mut(h, key)?;
        let ttl = self.ttl_of(&self.states[i].desc);
        Ok((&mut self.states[i], idx, kh, ttl))
    }

    /// Under Flink's key-group rule, fixes the rule to the first state's key type and checks
    /// every later state has the same (Flink keys all of an operator's states alike).
    fn fix_key_type(&mut self, descriptor: &StateDescriptor) -> Result<(), StateError> {
        if self.scheme == KeyGroupScheme::Statekit {
            return Ok(());
        }
        let assigner = self.scheme.assigner(&descriptor.key_schema, self.max_parallelism);
        match &self.flink_groups {
            None => self.flink_groups = Some(Box::new(assigner)),
            Some(a) if **a == assigner => {}
            Some(_) => {
                return Err(StateError::Incompatible(statekit_core::Incompatibility::KeyType {
                    state: descriptor.name.clone(),
                    key_schema: descriptor.key_schema.clone(),
                }))
            }
        }
        Ok(())
    }

    /// Registers a state found in a restored view: existing states are only checked for
    /// compatibility (their TTL and functions are kept).
    fn register_for_restore(&mut self, desc: &StateDescriptor) -> Result<StateHandle, StateError> {
        if let Some(&h) = self.names.get(&desc.name) {
            self.states[h.0 as usize]
                .desc
                .check_compatible(desc)
                .map_err(StateError::Incompatible)?;
            return Ok(h);
        }
        self.register(desc.clone(), StateFunctions::None)
    }
}

#[cfg(test)]
impl HashMapBackend {
    pub(crate) fn tables_for_test(&self, state: usize) -> &Tables {
        &self.states[state].tables
    }
}

/// Adds one restored entry to a state.
fn ingest(st: &mut Registered, idx: usize, e: &Entry<'_>, now: i64) -> Result<(), StateError> {
    let ts = match st.desc.ttl {
        None => 0,
        Some(cfg) => {
            let ts = e.timestamp.unwrap_or(now);
            if cfg.is_expired(ts, now) {
                return Ok(());
            }
            ts
        }
    };
    let p = Probe::new(e.key, e.namespace);
    match &mut st.tables {
        Tables::Single(t) => {
            t[idx].put(&p, ts, e.value, st.desc.ttl.is_some());
        }
        Tables::List(t) => {
            let (list, _) = t[idx].get_or_insert_with(&p, Vec::new);
            list.push(Cell::new(ts, e.value));
        }
        Tables::Map(t) => {
            let user_key = e.user_key.ok_or_else(|| {
                StateError::Restore(statekit_core::RestoreError::NoUserKey {
                    state: st.desc.name.clone(),
                })
            })?;
            t[idx].put(&p, user_key, ts, e.value, st.desc.ttl.is_some());
        }
    }
    Ok(())
}

/// `get` on a TTL state: expired values are invisible and removed; `OnReadAndWrite`
/// re-stamps what it returns.
#[inline(never)]
fn get_ttl(t: &mut SingleTable, p: &Probe<'_>, ttl: Ttl, out: &mut Vec<u8>) -> bool {
    out.clear();
    let Some(cell) = t.get(p) else {
        return false;
    };
    if !ttl.live(cell.ts) {
        t.remove(p);
        return false;
    }
    out.extend_from_slice(cell.bytes);
    if ttl.refresh_on_read() && cell.ts != ttl.now {
        t.set_ts(p, ttl.now);
    }
    true
}

/// `map_get` on a TTL state (see [`get_ttl`]); a map left empty is removed.
#[inline(never)]
fn map_get_ttl(t: &mut MapTable, p: &Probe<'_>, user_key: &[u8], ttl: Ttl, out: &mut Vec<u8>) -> bool {
    out.clear();
    let Some(cell) = t.get(p, user_key) else {
        return false;
    };
    if !ttl.live(cell.ts) {
        t.remove(p, user_key);
        return false;
    }
    out.extend_from_slice(cell.bytes);
    if ttl.refresh_on_read() && cell.ts != ttl.now {
        t.set_ts(p, user_key, ttl.now);
    }
    true
}

impl KeyedStateBackend for HashMapBackend {
    statekit_core::keyed_accessors!(max_parallelism, key_group_scheme, key_group_range);

    fn register(&mut self, descriptor: StateDescriptor, functions: StateFunctions) -> Result<StateHandle, StateError> {
        functions.check_fits(&descriptor)?;
        self.fix_key_type(&descriptor)?;
        if let Some(&h) = self.names.get(&descriptor.name) {
            let now = self.clock.now_ms();
            let st = &mut self.states[h.0 as usize];
            st.desc
                .check_compatible(&descriptor)
                .map_err(StateError::Incompatible)?;
            if st.desc.ttl.is_none() && descriptor.ttl.is_some() {
                // Entries written without TTL carry no timestamp yet: they start living now.
                st.tables.retain_cells(|ts| {
                    *ts = now;
                    true
                });
            }
            st.desc.ttl = descriptor.ttl;
            if !matches!(functions, StateFunctions::None) {
                st.functions = functions;
            }
            return Ok(h);
        }
        let h = StateHandle(
            u32::try_from(self.states.len())
                .map_err(|_| StateError::Incompatible(statekit_core::Incompatibility::TooManyStates))?,
        );
        tracing::debug!(name = %descriptor.name, kind = %descriptor.kind, handle = h.0, "register state");
        self.names.insert(descriptor.name.clone(), h);
        self.states.push(Registered {
            tables: Tables::new(descriptor.kind, self.range.len() as usize),
            desc: descriptor,
            functions,
        });
        Ok(h)
    }

    fn handle(&self, name: &str) -> Option<StateHandle> {
        self.names.get(name).copied()
    }

    fn descriptors(&self) -> Vec<StateDescriptor> {
        self.states.iter().map(|s| s.desc.clone()).collect()
    }

    #[inline(always)]
    fn get(&mut self, state: StateHandle, key: &[u8], namespace: &[u8], out: &mut Vec<u8>) -> Result<bool, StateError> {
        out.clear();
        match self.get_word(state, key, namespace) {
            Some(Some(v)) => {
                set_word(out, v);
                Ok(true)
            }
            Some(None) => Ok(false),
            None => self.get_general(state, key, namespace, out),
        }
    }

    #[inline(always)]
    fn put(&mut self, state: StateHandle, key: &[u8], namespace: &[u8], value: &[u8]) -> Result<(), StateError> {
        if self.put_word(state, key, namespace, value).is_some() {
            return Ok(());
        }
        self.put_general(state, key, namespace, value)
    }

    #[inline]
    fn add(&mut self, state: StateHandle, key: &[u8], namespace: &[u8], value: &[u8]) -> Result<(), StateError> {
        let (st, idx, kh, ttl) = self.parts(state, key)?;
        let p = Probe::with_key_hash(key, namespace, kh);
        let ts = ttl.now;
        let Registered {
            desc,
            functions,
            tables,
        } = st;
        match (desc.kind, tables) {
            (KeyedStateKind::List, Tables::List(t)) => {
                let (list, _) = t[idx].get_or_insert_with(&p, Vec::new);
                if ttl.cfg.is_some() {
                    list.retain(|c| ttl.live(c.ts));
                }
                list.push(Cell::new(ts, value));
            }
            (KeyedStateKind::Reducing, Tables::Single(t)) => {
                let StateFunctions::Reduce(reduce) = functions else {
                    return Err(StateError::MissingFunction(desc.name.clone()));
                };
                let t = &mut t[idx];
                match t.get(&p).filter(|c| ttl.live(c.ts)) {
                    Some(cell) => {
                        let reduced = reduce(cell.bytes, value);
                        t.put(&p, ts, &reduced, ttl.cfg.is_some());
                    }
                    None => {
                        t.put(&p, ts, value, ttl.cfg.is_some());
                    }
                }
            }
            (KeyedStateKind::Aggregating, Tables::Single(t)) => {
                let StateFunctions::Aggregate(agg) = functions else {
                    return Err(StateError::MissingFunction(desc.name.clone()));
                };
                let t = &mut t[idx];
                let acc = (agg.add)(t.get(&p).filter(|c| ttl.live(c.ts)).map(|c| c.bytes), value);
                t.put(&p, ts, &acc, ttl.cfg.is_some());
            }
            _ => return Err(StateError::wrong_kind(desc, ADDABLE)),
        }
        Ok(())
    }

    fn clear(&mut self, state: StateHandle, key: &[u8], namespace: &[u8]) -> Result<(), StateError> {
        let (st, idx, kh, _) = self.parts(state, key)?;
        let p = Probe::with_key_hash(key, namespace, kh);
        match &mut st.tables {
            Tables::Single(t) => {
                remove_single(&mut t[idx], &p);
            }
            Tables::List(t) => {
                remove_entry(&mut t[idx], &p);
            }
            Tables::Map(t) => {
                t[idx].remove_map(&p);
            }
        }
        Ok(())
    }

    fn list_for_each(
        &mut self,
        state: StateHandle,
        key: &[u8],
        namespace: &[u8],
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<usize, StateError> {
        let (st, idx, kh, ttl) = self.parts(state, key)?;
        let Tables::List(tables) = &mut st.tables else {
            return Err(StateError::wrong_kind(&st.desc, LIST));
        };
        let t = &mut tables[idx];
        let p = Probe::with_key_hash(key, namespace, kh);
        let Some(list) = t.get(&p) else {
            return Ok(0);
        };
        if ttl.cfg.is_none() {
            for c in list {
                f(c.bytes.as_slice());
            }
            return Ok(list.len());
        }
        let mut visible = 0;
        let mut stale = false;
        for c in list {
            if ttl.live(c.ts) {
                f(c.bytes.as_slice());
                visible += 1;
                stale |= ttl.refresh_on_read() && c.ts != ttl.now;
            } else {
                stale = true;
            }
        }
        if stale {
            if visible == 0 {
                remove_entry(t, &p);
            } else if let Some(list) = existing_mut(t, &p) {
                list.retain(|c| ttl.live(c.ts));
                if ttl.refresh_on_read() {
                    list.iter_mut().for_each(|c| c.ts = ttl.now);
                }
            }
        }
        Ok(visible)
    }

    fn list_update(
        &mut self,
        state: StateHandle,
        key: &[u8],
        namespace: &[u8],
        elements: &[&[u8]],
    ) -> Result<(), StateError> {
        let (st, idx, kh, ttl) = self.parts(state, key)?;
        let Tables::List(tables) = &mut st.tables else {
            return Err(StateError::wrong_kind(&st.desc, LIST));
        };
        let p = Probe::with_key_hash(key, namespace, kh);
        if elements.is_empty() {
            remove_entry(&mut tables[idx], &p);
            return Ok(());
        }
        let ts = ttl.now;
        let (list, _) = tables[idx].get_or_insert_with(&p, Vec::new);
        list.truncate(elements.len());
        for (i, e) in elements.iter().enumerate() {
            match list.get_mut(i) {
                Some(cell) => cell.set(ts, e),
                None => list.push(Cell::new(ts, e)),
            }
        }
        Ok(())
    }

    #[inline(always)]
    fn map_get(
        &mut self,
        state: StateHandle,
        key: &[u8],
        namespace: &[u8],
        user_key: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<bool, StateError> {
        out.clear();
        match self.map_get_word(state, key, namespace, user_key) {
            Some(Some(v)) => {
                set_word(out, v);
                Ok(true)
            }
            Some(None) => Ok(false),
            None => self.map_get_general(state, key, namespace, user_key, out),
        }
    }

    #[inline(always)]
    fn map_put(
        &mut self,
        state: StateHandle,
        key: &[u8],
        namespace: &[u8],
        user_key: &[u8],
        value: &[u8],
    ) -> Result<(), StateError> {
        if self.map_put_word(state, key, namespace, user_key, value).is_some() {
            return Ok(());
        }
        self.map_put_general(state, key, namespace, user_key, value)
    }

    fn map_remove(
        &mut self,
        state: StateHandle,
        key: &[u8],
        namespace: &[u8],
        user_key: &[u8],
    ) -> Result<bool, StateError> {
        let (st, idx, kh, ttl) = self.parts(state, key)?;
        let Tables::Map(tables) = &mut st.tables else {
            return Err(StateError::wrong_kind(&st.desc, MAP));
        };
        let p = Probe::with_key_hash(key, namespace, kh);
        Ok(tables[idx].remove(&p, user_key).is_some_and(|ts| ttl.live(ts)))
    }

    fn map_for_each(
        &mut self,
        state: StateHandle,
        key: &[u8],
        namespace: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize, StateError> {
        let (st, idx, kh, ttl) = self.parts(state, key)?;
        let Tables::Map(tables) = &mut st.tables else {
            return Err(StateError::wrong_kind(&st.desc, MAP));
        };
        let t = &mut tables[idx];
        let p = Probe::with_key_hash(key, namespace, kh);
        if ttl.cfg.is_none() {
            return Ok(t.for_each(&p, |k, c| f(k, c.bytes)));
        }
        let mut visible = 0;
        let mut stale = false;
        t.for_each(&p, |k, c| {
            if ttl.live(c.ts) {
                f(k, c.bytes);
                visible += 1;
                stale |= ttl.refresh_on_read() && c.ts != ttl.now;
            } else {
                stale = true;
            }
        });
        if stale {
            t.retain_map(&p, |ts| {
                let live = ttl.live(*ts);
                if live && ttl.refresh_on_read() {
                    *ts = ttl.now;
                }
                live
            });
        }
        Ok(visible)
    }

    fn merge_namespaces(
        &mut self,
        state: StateHandle,
        key: &[u8],
        target: &[u8],
        sources: &[&[u8]],
    ) -> Result<(), StateError> {
        let (st, idx, kh, ttl) = self.parts(state, key)?;
        let Registered {
            desc,
            functions,
            tables,
        } = st;
        let sources = sources.iter().copied().filter(|s| *s != target);
        let target = Probe::with_key_hash(key, target, kh);
        match (desc.kind, tables) {
            (KeyedStateKind::List, Tables::List(t)) => {
                let t = &mut t[idx];
                let mut moved: Vec<Cell> = Vec::new();
                for src in sources {
                    if let Some(list) = remove_entry(t, &Probe::with_key_hash(key, src, kh)) {
                        moved.extend(list.into_iter().filter(|c| ttl.live(c.ts)));
                    }
                }
                if moved.is_empty() {
                    return Ok(());
                }
                let (list, _) = t.get_or_insert_with(&target, Vec::new);
                if ttl.cfg.is_some() {
                    list.retain(|c| ttl.live(c.ts));
                }
                list.append(&mut moved);
            }
            (kind @ (KeyedStateKind::Reducing | KeyedStateKind::Aggregating), Tables::Single(t)) => {
                let merge: &MergeFn = match &*functions {
                    StateFunctions::Reduce(f) if kind == KeyedStateKind::Reducing => f.as_ref(),
                    StateFunctions::Aggregate(f) if kind == KeyedStateKind::Aggregating => f.merge.as_ref(),
                    _ => return Err(StateError::MissingFunction(desc.name.clone())),
                };
                let t = &mut t[idx];
                let mut merged: Option<Vec<u8>> = None;
                for src in sources {
                    if let Some(cell) = remove_single(t, &Probe::with_key_hash(key, src, kh)) {
                        if ttl.live(cell.ts) {
                            merged = Some(match merged {
                                None => cell.bytes.into_vec(),
                                Some(acc) => merge(&acc, cell.bytes.as_slice()),
                            });
                        }
                    }
                }
                let Some(merged) = merged else {
                    return Ok(());
                };
                let value = match t.get(&target).filter(|c| ttl.live(c.ts)) {
                    Some(cell) => merge(cell.bytes, &merged),
                    None => merged,
                };
                t.put(&target, ttl.now, &value, ttl.cfg.is_some());
            }
            _ => return Err(StateError::wrong_kind(desc, MERGEABLE)),
        }
        Ok(())
    }

    fn snapshot(&mut self, checkpoint_id: u64) -> Result<Arc<dyn KeyedStateView>, StateError> {
        let view = self.snapshot_view(checkpoint_id);
        tracing::debug!(checkpoint_id, states = self.states.len(), "heap backend snapshot cut");
        Ok(Arc::new(view))
    }

    fn restore(&mut self, views: &[&dyn KeyedStateView]) -> Result<(), StateError> {
        for view in views {
            if view.max_parallelism() != self.max_parallelism {
                return Err(StateError::Restore(statekit_core::RestoreError::MaxParallelism {
                    view: view.max_parallelism(),
                    backend: self.max_parallelism,
                }));
            }
            let view_states = view.states().to_vec();
            let mapping = view_states
                .iter()
                .map(|d| self.register_for_restore(d))
                .collect::<Result<Vec<_>, _>>()?;
            let now = self.clock.now_ms();
            let range = view.key_group_range().intersection(&self.range);
            let start = self.range.start();
            let groups = self
                .flink_groups
                .as_deref()
                .cloned()
                .unwrap_or_else(|| KeyGroupAssigner::statekit(self.max_parallelism));
            let states = &mut self.states;
            let mut count = 0usize;
            for kg in range {
                let idx = (kg - start) as usize;
                let _ = view.visit_key_group(kg, &mut |e| {
                    check_entry_shape(&view_states, e).map_err(|p| StateError::Restore(p.into()))?;
                    // Under Flink's rule for a key type statekit cannot hash, the entries
                    // keep the key groups they were given.
                    let actual = if groups.places_keys() {
                        groups
                            .key_group(e.key)
                            .map_err(|err| StateError::Other(Box::new(err)))?
                    } else {
                        kg
                    };
                    if actual != kg {
                        return Err(StateError::Restore(statekit_core::RestoreError::ForeignKey {
                            key_group: kg,
                            actual,
                        }));
                    }
                    count += 1;
                    ingest(&mut states[mapping[e.state as usize].0 as usize], idx, e, now)?;
                    Ok(ControlFlow::Continue(()))
                })?;
            }
            tracing::debug!(%range, entries = count, "restored from view");
        }
        Ok(())
    }

    fn dispose(&mut self) {
        self.states.clear();
        self.names.clear();
    }
}

#[cfg(test)]
mod fast_mod_tests {
    use super::FastMod;
    use statekit_core::{hash::murmur3_x86_32, key_group_for_key};

    #[test]
    fn fast_mod_is_exact() {
        let mut x: u32 = 0x9e37_79b9;
        let edge = [0, 1, 2, 127, 128, 32767, 32768, u32::MAX / 2, u32::MAX - 1, u32::MAX];
        for d in (1..=32768u32).chain([65535, 1 << 20, u32::MAX - 1, u32::MAX]) {
            let m = FastMod::new(d);
            for a in edge {
                assert_eq!(m.rem(a), a % d, "{a} % {d}");
            }
            for _ in 0..64 {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                assert_eq!(m.rem(x), x % d, "{x} % {d}");
            }
        }
    }

    #[test]
    fn key_groups_match_core() {
        for max_p in [1u32, 7, 128, 300, 32768] {
            let m = FastMod::new(max_p);
            for i in 0..2000u32 {
                let key = format!("key-{i}");
                assert_eq!(
                    m.rem(murmur3_x86_32(key.as_bytes(), 0)),
                    key_group_for_key(key.as_bytes(), max_p)
                );
            }
        }
    }
}

#[cfg(test)]
mod last_key_tests {
    use super::HashMapBackend;
    use statekit_core::{
        key_group_for_key, BackendConfig, KeyedStateBackend, StateDescriptor, StateError, StateFunctions, TypeSchema,
    };

    #[test]
    fn remembered_key_groups_stay_exact() -> Result<(), StateError> {
        // Subtask 1 of 2 at max parallelism 16: about half of the keys are out of range.
        let mut b = HashMapBackend::new(BackendConfig::for_subtask(16, 2, 1)?)?;
        let v = b.register(
            StateDescriptor::value("v", TypeSchema::Bytes, TypeSchema::Bytes),
            StateFunctions::None,
        )?;
        let m = b.register(
            StateDescriptor::map("m", TypeSchema::Bytes, TypeSchema::Bytes, TypeSchema::Bytes),
            StateFunctions::None,
        )?;
        let range = b.key_group_range();
        // Same-length keys, an empty key, keys at and beyond the remembered length.
        let keys: Vec<Vec<u8>> = (0..64u8)
            .map(|i| match i % 4 {
                0 => vec![i; 8],
                1 => vec![i; 32],
                2 => vec![i; 33],
                _ => vec![i; (i / 4) as usize % 3],
            })
            .collect();
        let mut out = Vec::new();
        for round in 0..3 {
            for (i, k) in keys.iter().enumerate() {
                let owned = range.contains(key_group_for_key(k, 16));
                // The same key twice in a row (remembered), then the next key.
                for _ in 0..2 {
                    let put = b.put(v, k, b"ns", &[i as u8, round]);
                    assert_eq!(put.is_ok(), owned, "key {k:?}");
                    let got = b.get(v, k, b"ns", &mut out);
                    assert_eq!(got.is_ok(), owned);
                    if owned {
                        assert_eq!(out, [i as u8, round]);
                        b.map_put(m, k, b"", b"uk", &[i as u8])?;
                        assert!(b.map_get(m, k, b"", b"uk", &mut out)?);
                        assert_eq!(out, [i as u8]);
                    } else {
                        assert!(matches!(got, Err(StateError::KeyGroupOutOfRange { .. })));
                    }
                }
            }
        }
        // Every stored entry landed in its key's key group (a snapshot visits by key group).
        let view = b.snapshot(1)?;
        for kg in range {
            let _ = view.visit_key_group(kg, &mut |e| {
                assert_eq!(key_group_for_key(e.key, 16), kg);
                Ok(std::ops::ControlFlow::Continue(()))
            })?;
        }
        Ok(())
    }
}
