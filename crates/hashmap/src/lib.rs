//! # statekit-hashmap
//!
//! The heap keyed-state backend: [`HashMapBackend`] keeps all keyed state in memory, in
//! hash tables split by key group, and takes snapshots without stopping processing.
//!
//! ## Layout
//!
//! For every registered state the backend holds one table per key group of its
//! [`KeyGroupRange`](statekit_core::KeyGroupRange). A table maps the composite
//! `(key, namespace)` to
//!
//! * a value with its last-update timestamp (value, reducing and aggregating states; for
//!   aggregating state the value is the accumulator),
//! * a `Vec` of timestamped elements (list states), or
//! * the user key → timestamped value entries of a map state, kept in ascending user-key
//!   order (a sorted vector up to 16 entries, a `BTreeMap` beyond), so that
//!   [`map_for_each`](statekit_core::KeyedStateBackend::map_for_each) walks user keys in
//!   order without sorting.
//!
//! Value, reducing and aggregating states whose entries all have one shape — the same key,
//! namespace and value lengths, as typed serializers give — are *packed* (`packed.rs`): a
//! slot is exactly `key ‖ namespace ‖ [timestamp] ‖ value`, 16 bytes for a
//! `ValueState<Long>` under `Long` keys, in open-addressing shards kept between 7/10 and
//! 15/16 full. The first entry of another shape turns that key group's table into the general
//! slots described next, for good.
//!
//! Map states of one shape are packed the same way (`packed_map.rs`), one slot per map entry,
//! `key ‖ namespace ‖ user key ‖ [timestamp] ‖ value` (24 bytes for a `MapState<Long, Long>`),
//! placed by the hash of the key and namespace (so a map's entries share one probe path,
//! which `map_for_each` walks and then sorts by user key) and tagged by that hash mixed with
//! the user key (so `map_get` compares one slot). A map longer than 16 entries, or an entry
//! of another shape, turns the key group's table into the general form above.
//!
//! Every operation hashes its key once: the murmur3 hash that picks the key group (see
//! [`key_group_for_key`](statekit_core::key_group_for_key)) is also, mixed with the
//! namespace, the in-table hash. Lookups compare the `(key, namespace)` against the stored
//! key bytes in place (hashbrown's `HashTable`), so reads and overwrites of an existing entry
//! allocate nothing; an overwrite reuses the value's buffer. Short data lives inside the
//! table slot (one 64-byte cache line for value states): `key ‖ namespace` up to 29 bytes,
//! values, list elements and map user keys up to 15 bytes; longer ones go to the heap.
//!
//! ## Copy-on-write snapshots
//!
//! Each per-key-group table is itself an *extendible hash table*: a small directory over
//! *shards* of at most 896 entries, every shard behind an [`Arc`](std::sync::Arc).
//!
//! * [`snapshot`](statekit_core::KeyedStateBackend::snapshot) copies each key group's
//!   directory and clones its shard `Arc`s: O(#shards) pointer copies (about one per 700
//!   entries), no entry is touched.
//! * A later write goes through copy-on-write ([`Arc::make_mut`](std::sync::Arc::make_mut)
//!   semantics) on the one shard it touches (copying ≤ 896 entries, once per snapshot).
//!   Untouched shards stay shared.
//! * Once the snapshot view is dropped, the counts fall back to one and writes copy nothing.
//! * Growth splits one full shard at a time, so no write ever rehashes a whole key group.
//! * The view ([`HashMapSnapshot`]) sorts each key group's entries into the canonical order
//!   when it is visited, on the reading thread, and drops entries whose TTL had expired at
//!   the snapshot call.
//!
//! The design and the alternatives considered are in `docs/design/0002-heap-backend.md`.
//!
//! ## TTL
//!
//! States with a [`TtlConfig`](statekit_core::TtlConfig) stamp every value, list element
//! and map entry with `clock.now_ms()` when written (and when read, for
//! [`TtlUpdateType::OnReadAndWrite`](statekit_core::TtlUpdateType)). Expired data is
//! invisible to reads, dropped by snapshots and restores, and purged lazily when touched
//! (or all at once with [`HashMapBackend::purge_expired`]).

mod backend;
mod bytes;
mod cow;
mod map;
mod packed;
mod packed_map;
mod snapshot;
mod table;
#[cfg(test)]
mod tests;

pub use backend::HashMapBackend;
pub use snapshot::HashMapSnapshot;
