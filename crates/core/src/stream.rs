//! The narrow waist: a keyed snapshot read as one stream of entries in key-group order.
//!
//! Backends produce it ([`crate::KeyedStateBackend::snapshot`]) and consume it
//! ([`crate::KeyedStateBackend::restore`]); the savepoint format stores it; tools read it.
//! Rescaling is a filter on key-group ranges.

use crate::error::{EntryProblem, StateError};
use crate::keygroup::KeyGroupRange;
use crate::state::{KeyedStateKind, StateDescriptor};
use std::cmp::Ordering;
use std::ops::ControlFlow;

/// One entry of a keyed snapshot.
///
/// * value, reducing and aggregating states: one entry per (key, namespace);
/// * list states: one entry per element, in list order;
/// * map states: one entry per user key, with `user_key` set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry<'a> {
    /// Index of the state in [`KeyedStateView::states`].
    pub state: u32,
    /// Serialized key.
    pub key: &'a [u8],
    /// Serialized namespace.
    pub namespace: &'a [u8],
    /// Map user key (map states only).
    pub user_key: Option<&'a [u8]>,
    /// Serialized value, list element, map value or accumulator.
    pub value: &'a [u8],
    /// Last-update timestamp (ms) for states with TTL; `None` otherwise.
    pub timestamp: Option<i64>,
}

impl Entry<'_> {
    /// The canonical order of entries within a key group: by state index, then key, then
    /// namespace, then user key, each compared as unsigned bytes. List elements of one
    /// (key, namespace) compare equal and keep their list order.
    pub fn canonical_cmp(&self, other: &Entry<'_>) -> Ordering {
        self.state
            .cmp(&other.state)
            .then_with(|| self.key.cmp(other.key))
            .then_with(|| self.namespace.cmp(other.namespace))
            .then_with(|| self.user_key.cmp(&other.user_key))
    }
}

/// A visitor over entries: [`ControlFlow::Break`] stops the walk (the visit returns it, and
/// reads nothing more), an error fails it.
pub type EntryVisitor<'v> = dyn FnMut(&Entry<'_>) -> Result<ControlFlow<()>, StateError> + 'v;

/// A frozen, readable keyed snapshot: produced by a backend's snapshot, or read from files.
///
/// Implementations must yield, for each key group, the entries in the canonical order of
/// [`Entry::canonical_cmp`], and must be safe to read from another thread while the
/// backend that produced them keeps processing.
pub trait KeyedStateView: Send + Sync {
    /// Max parallelism (number of key groups) of the job that produced the state.
    fn max_parallelism(&self) -> u32;
    /// The key groups this view covers.
    fn key_group_range(&self) -> KeyGroupRange;
    /// The rule that put the view's keys in their key groups: statekit's unless the state
    /// came from Apache Flink.
    fn key_group_scheme(&self) -> crate::KeyGroupScheme {
        crate::KeyGroupScheme::Statekit
    }
    /// The states, indexed by [`Entry::state`].
    fn states(&self) -> &[StateDescriptor];
    /// Calls `visitor` for every entry of `key_group` in canonical order, until it breaks
    /// (then returns [`ControlFlow::Break`]). A key group outside
    /// [`KeyedStateView::key_group_range`] has no entries.
    fn visit_key_group(&self, key_group: u32, visitor: &mut EntryVisitor<'_>) -> Result<ControlFlow<()>, StateError>;

    /// Visits every key group of `range ∩ key_group_range()` in ascending order, until the
    /// visitor breaks.
    fn visit_range(&self, range: KeyGroupRange, visitor: &mut EntryVisitor<'_>) -> Result<ControlFlow<()>, StateError> {
        for kg in self.key_group_range().intersection(&range) {
            if self.visit_key_group(kg, visitor)?.is_break() {
                return Ok(ControlFlow::Break(()));
            }
        }
        Ok(ControlFlow::Continue(()))
    }
}

/// Implements the named accessors of [`KeyedStateView`] (and the first three of
/// [`KeyedStateBackend`](crate::KeyedStateBackend)) from the implementing struct's fields,
/// for the many views and backends that simply store what they cover:
///
/// | accessor | returns |
/// | --- | --- |
/// | `max_parallelism` | `self.max_parallelism` |
/// | `key_group_scheme` | `self.scheme` |
/// | `key_group_range` | `self.range` |
/// | `states` | `&self.states` |
///
/// Invoke it inside the trait's `impl` block, naming the accessors to implement:
///
/// ```
/// use statekit_core::{EntryVisitor, KeyGroupRange, KeyGroupScheme, KeyedStateView, StateDescriptor, StateError};
/// use std::ops::ControlFlow;
///
/// struct Empty {
///     max_parallelism: u32,
///     scheme: KeyGroupScheme,
///     range: KeyGroupRange,
///     states: Vec<StateDescriptor>,
/// }
///
/// impl KeyedStateView for Empty {
///     statekit_core::keyed_accessors!(max_parallelism, key_group_scheme, key_group_range, states);
///
///     fn visit_key_group(&self, _: u32, _: &mut EntryVisitor<'_>) -> Result<ControlFlow<()>, StateError> {
///         Ok(ControlFlow::Continue(()))
///     }
/// }
///
/// let view = Empty { max_parallelism: 128, scheme: KeyGroupScheme::Flink, range: KeyGroupRange::new(0, 63), states: vec![] };
/// assert_eq!((view.max_parallelism(), view.key_group_range().len()), (128, 64));
/// assert_eq!(view.key_group_scheme(), KeyGroupScheme::Flink);
/// ```
#[macro_export]
macro_rules! keyed_accessors {
    (@one max_parallelism) => {
        fn max_parallelism(&self) -> u32 {
            self.max_parallelism
        }
    };
    (@one key_group_scheme) => {
        fn key_group_scheme(&self) -> $crate::KeyGroupScheme {
            self.scheme
        }
    };
    (@one key_group_range) => {
        fn key_group_range(&self) -> $crate::KeyGroupRange {
            self.range
        }
    };
    (@one states) => {
        fn states(&self) -> &[$crate::StateDescriptor] {
            &self.states
        }
    };
    ($($accessor:ident),+ $(,)?) => {
        $($crate::keyed_accessors!(@one $accessor);)+
    };
}

/// The [`Debug`](std::fmt::Debug) form of a backend's frozen snapshot `view`, named `name`:
/// the checkpoint it was taken for, its max parallelism and key-group range, the clock
/// reading at the cut and its states' names (not its entries).
pub fn debug_snapshot(
    f: &mut std::fmt::Formatter<'_>,
    name: &str,
    checkpoint_id: u64,
    now_ms: i64,
    view: &dyn KeyedStateView,
) -> std::fmt::Result {
    f.debug_struct(name)
        .field("checkpoint_id", &checkpoint_id)
        .field("max_parallelism", &view.max_parallelism())
        .field("key_group_range", &view.key_group_range())
        .field("now_ms", &now_ms)
        .field("states", &view.states().iter().map(|s| &s.name).collect::<Vec<_>>())
        .finish()
}

/// The first eight bytes of `key` as a big-endian integer, zero-padded. If
/// `key_prefix(a) < key_prefix(b)` then `a < b` (as unsigned bytes): at the first differing
/// byte either both are key bytes, or the shorter key ended (padding zero) and is a prefix of
/// the other. Equal prefixes say nothing, so ties compare the keys. Sorting keys by it first
/// makes most comparisons one integer comparison instead of a `memcmp`.
///
/// ```
/// use statekit_core::stream::key_prefix;
/// assert!(key_prefix(b"user-01") < key_prefix(b"user-02"));
/// assert_eq!(key_prefix(b"user-0001"), key_prefix(b"user-0002")); // ties: compare the keys
/// ```
#[inline]
pub fn key_prefix(key: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    let n = key.len().min(8);
    a[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(a)
}

/// Checks that an entry is consistent with the kind of its state (user key present exactly
/// for maps, timestamp present exactly for TTL'd state).
pub fn check_entry_shape(states: &[StateDescriptor], e: &Entry<'_>) -> Result<(), EntryProblem> {
    let desc = entry_state(states, e)?;
    if (desc.kind == KeyedStateKind::Map) != e.user_key.is_some() {
        return Err(EntryProblem::UserKey {
            state: desc.name.clone(),
            kind: desc.kind,
            has: e.user_key.is_some(),
        });
    }
    if desc.ttl.is_some() != e.timestamp.is_some() {
        return Err(EntryProblem::Timestamp {
            state: desc.name.clone(),
            has: e.timestamp.is_some(),
        });
    }
    Ok(())
}

/// The descriptor of `e`'s state.
fn entry_state<'s>(states: &'s [StateDescriptor], e: &Entry<'_>) -> Result<&'s StateDescriptor, EntryProblem> {
    states.get(e.state as usize).ok_or(EntryProblem::StateIndex {
        index: e.state,
        states: states.len(),
    })
}

/// Checks that every part of `e` (key, namespace, user key, value) decodes by its state's
/// schemas ([`crate::decode_value`]), as a reader that renders values (`dump`) decodes them:
/// what checksums cannot tell (bytes written wrong, or rewritten with their checksums). The
/// error names the state, the part, the schema and the offset in the part.
pub fn check_entry_values(states: &[StateDescriptor], e: &Entry<'_>) -> Result<(), EntryProblem> {
    let desc = entry_state(states, e)?;
    let part = |what: &'static str, schema: &crate::TypeSchema, bytes: &[u8]| {
        // The common large parts without building a value: top-level bytes take any bytes,
        // a top-level string any UTF-8.
        match schema {
            crate::TypeSchema::Bytes => return Ok(()),
            crate::TypeSchema::Utf8 if std::str::from_utf8(bytes).is_ok() => return Ok(()),
            _ => {}
        }
        crate::decode_value(schema, bytes)
            .map(drop)
            .map_err(|decode| EntryProblem::Undecodable {
                state: desc.name.clone(),
                part: what,
                schema: schema.clone(),
                decode: Box::new(decode),
            })
    };
    part("key", &desc.key_schema, e.key)?;
    part("namespace", &desc.namespace_schema, e.namespace)?;
    if let (Some(schema), Some(bytes)) = (&desc.user_key_schema, e.user_key) {
        part("user key", schema, bytes)?;
    }
    part("value", &desc.value_schema, e.value)
}

/// An owned entry, for building views by hand (tests, generators, tools).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OwnedEntry {
    /// Key group of the key.
    pub key_group: u32,
    /// Index of the state.
    pub state: u32,
    /// Serialized key.
    pub key: Vec<u8>,
    /// Serialized namespace.
    pub namespace: Vec<u8>,
    /// Map user key.
    pub user_key: Option<Vec<u8>>,
    /// Value, element or accumulator.
    pub value: Vec<u8>,
    /// TTL timestamp.
    pub timestamp: Option<i64>,
}

impl OwnedEntry {
    /// Borrows it as an [`Entry`].
    pub fn as_entry(&self) -> Entry<'_> {
        Entry {
            state: self.state,
            key: &self.key,
            namespace: &self.namespace,
            user_key: self.user_key.as_deref(),
            value: &self.value,
            timestamp: self.timestamp,
        }
    }

    /// An entry of the value state `state`: `key` → `value` with no namespace, user key or
    /// timestamp, in the key group statekit's rule gives `key` at `max_parallelism`
    /// ([`crate::key_group_for_key`]).
    ///
    /// ```
    /// use statekit_core::{key_group_for_key, OwnedEntry};
    /// let e = OwnedEntry::value(0, b"k".to_vec(), b"v".to_vec(), 128);
    /// assert_eq!(e.key_group, key_group_for_key(b"k", 128));
    /// assert!(e.namespace.is_empty() && e.user_key.is_none() && e.timestamp.is_none());
    /// ```
    pub fn value(state: u32, key: Vec<u8>, value: Vec<u8>, max_parallelism: u32) -> Self {
        OwnedEntry {
            key_group: crate::key_group_for_key(&key, max_parallelism),
            state,
            key,
            namespace: Vec::new(),
            user_key: None,
            value,
            timestamp: None,
        }
    }

    /// Copies an [`Entry`] of `key_group`.
    pub fn from_entry(key_group: u32, e: &Entry<'_>) -> Self {
        OwnedEntry {
            key_group,
            state: e.state,
            key: e.key.to_vec(),
            namespace: e.namespace.to_vec(),
            user_key: e.user_key.map(<[u8]>::to_vec),
            value: e.value.to_vec(),
            timestamp: e.timestamp,
        }
    }
}

/// A [`KeyedStateView`] over owned entries held in memory. Entries are put in canonical
/// order on construction (a stable sort, so list elements keep their order).
#[derive(Clone, Debug)]
pub struct MemoryView {
    max_parallelism: u32,
    scheme: crate::KeyGroupScheme,
    range: KeyGroupRange,
    states: Vec<StateDescriptor>,
    entries: Vec<OwnedEntry>,
}

impl MemoryView {
    /// A view of `entries` (any order; entries outside `range` are dropped).
    pub fn new(
        max_parallelism: u32,
        range: KeyGroupRange,
        states: Vec<StateDescriptor>,
        mut entries: Vec<OwnedEntry>,
    ) -> Self {
        entries.retain(|e| range.contains(e.key_group));
        entries.sort_by(|a, b| {
            a.key_group
                .cmp(&b.key_group)
                .then_with(|| a.as_entry().canonical_cmp(&b.as_entry()))
        });
        MemoryView {
            max_parallelism,
            scheme: crate::KeyGroupScheme::Statekit,
            range,
            states,
            entries,
        }
    }

    /// The same view, its keys placed by `scheme` (statekit's rule unless set).
    pub fn with_key_group_scheme(mut self, scheme: crate::KeyGroupScheme) -> Self {
        self.scheme = scheme;
        self
    }

    /// Copies every entry of `view` in `range`.
    pub fn collect(view: &dyn KeyedStateView, range: KeyGroupRange) -> Result<Self, StateError> {
        let mut entries = Vec::new();
        let range = range.intersection(&view.key_group_range());
        for kg in range {
            let _ = view.visit_key_group(kg, &mut |e| {
                entries.push(OwnedEntry::from_entry(kg, e));
                Ok(ControlFlow::Continue(()))
            })?;
        }
        Ok(MemoryView {
            max_parallelism: view.max_parallelism(),
            scheme: view.key_group_scheme(),
            range,
            states: view.states().to_vec(),
            entries,
        })
    }

    /// The entries, in key-group then canonical order.
    pub fn entries(&self) -> &[OwnedEntry] {
        &self.entries
    }
}

impl KeyedStateView for MemoryView {
    crate::keyed_accessors!(max_parallelism, key_group_scheme, key_group_range, states);

    fn visit_key_group(&self, key_group: u32, visitor: &mut EntryVisitor<'_>) -> Result<ControlFlow<()>, StateError> {
        let start = self.entries.partition_point(|e| e.key_group < key_group);
        for e in self.entries[start..].iter().take_while(|e| e.key_group == key_group) {
            if visitor(&e.as_entry())?.is_break() {
                return Ok(ControlFlow::Break(()));
            }
        }
        Ok(ControlFlow::Continue(()))
    }
}

#[cfg(test)]
mod key_prefix_tests {
    use super::key_prefix;

    #[test]
    fn key_prefix_order_agrees_with_byte_order() {
        let keys: Vec<Vec<u8>> = vec![
            vec![],
            vec![0],
            vec![0, 0],
            vec![0; 8],
            vec![0; 9],
            vec![0, 0, 0, 0, 0, 0, 0, 0, 1],
            vec![0, 1],
            vec![1],
            vec![1, 0],
            vec![0x7f; 8],
            vec![0x80],
            vec![0xff; 7],
            vec![0xff; 8],
            vec![0xff; 12],
            b"user-0001".to_vec(),
            b"user-0002".to_vec(),
            b"user-01".to_vec(),
        ];
        for a in &keys {
            for b in &keys {
                let (pa, pb) = (key_prefix(a), key_prefix(b));
                if pa != pb {
                    assert_eq!(pa.cmp(&pb), a.cmp(b), "{a:?} vs {b:?}");
                }
            }
        }
    }
}
