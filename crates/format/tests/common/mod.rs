//! Strategies shared by the integration tests.
#![allow(dead_code)]

use proptest::prelude::*;
use statekit_core::{
    KeyGroupRange, KeyedStateKind, MemoryView, OperatorId, OperatorStateData, OperatorStateDescriptor,
    OperatorStateMode, OperatorStateSnapshot, OwnedEntry, StateDescriptor, TtlConfig, TtlUpdateType, TypeSchema,
};
use statekit_format::{
    Compression, FileRef, FileScope, OperatorMetadata, SnapshotFormat, SnapshotKind, SnapshotMetadata, SubtaskMetadata,
    WriteOptions,
};
use std::collections::{BTreeMap, BTreeSet};

pub fn arb_schema() -> impl Strategy<Value = TypeSchema> {
    let leaf = prop_oneof![
        Just(TypeSchema::Bytes),
        Just(TypeSchema::Unit),
        Just(TypeSchema::Bool),
        Just(TypeSchema::I32),
        Just(TypeSchema::I64),
        Just(TypeSchema::U64),
        Just(TypeSchema::F32),
        Just(TypeSchema::F64),
        Just(TypeSchema::Utf8),
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            inner.clone().prop_map(|t| TypeSchema::List(Box::new(t))),
            inner.clone().prop_map(|t| TypeSchema::Option(Box::new(t))),
            proptest::collection::vec(inner.clone(), 0..4).prop_map(TypeSchema::Tuple),
            proptest::collection::vec(("[a-zé_]{0,6}", inner), 0..3).prop_map(TypeSchema::Struct),
        ]
    })
}

pub fn arb_kind() -> impl Strategy<Value = KeyedStateKind> {
    prop::sample::select(KeyedStateKind::ALL.to_vec())
}

pub fn arb_ttl() -> impl Strategy<Value = Option<TtlConfig>> {
    proptest::option::of((1u64..u64::MAX, any::<bool>()).prop_map(|(ttl_ms, r)| TtlConfig {
        ttl_ms,
        update_type: if r {
            TtlUpdateType::OnReadAndWrite
        } else {
            TtlUpdateType::OnCreateAndWrite
        },
    }))
}

/// A descriptor named `name`, well-formed for its kind (user-key schema exactly for maps).
pub fn arb_descriptor(name: String) -> impl Strategy<Value = StateDescriptor> {
    (
        arb_kind(),
        arb_schema(),
        arb_schema(),
        arb_schema(),
        arb_schema(),
        arb_ttl(),
    )
        .prop_map(move |(kind, key, ns, value, uk, ttl)| StateDescriptor {
            name: name.clone(),
            kind,
            key_schema: key,
            namespace_schema: ns,
            value_schema: value,
            user_key_schema: (kind == KeyedStateKind::Map).then_some(uk),
            ttl,
        })
}

pub fn arb_descriptors(max: usize) -> impl Strategy<Value = Vec<StateDescriptor>> {
    (1..=max).prop_flat_map(|n| (0..n).map(|i| arb_descriptor(format!("state-{i}"))).collect::<Vec<_>>())
}

fn small_bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    // A small alphabet so that keys, namespaces and user keys repeat.
    proptest::collection::vec(prop::sample::select(vec![0u8, 1, 2, 0x7f, 0x80, 0xff]), 0..max)
}

/// Raw entry material: (key group seed, state seed, key, namespace, user key, value, timestamp).
type RawEntry = (u32, u32, Vec<u8>, Vec<u8>, Vec<u8>, Vec<u8>, i64);

/// A random, well-formed view: max parallelism, a range, states of every kind (with and without
/// TTL, maps, namespaces), entries shaped for their state, no duplicates except list elements.
pub fn arb_view() -> impl Strategy<Value = MemoryView> {
    (1u32..=40, any::<(u32, u32)>(), arb_descriptors(5)).prop_flat_map(|(maxp, (a, b), states)| {
        let (s, e) = (a % maxp, b % maxp);
        let range = KeyGroupRange::new(s.min(e), s.max(e));
        let entry = (
            any::<u32>(),
            any::<u32>(),
            small_bytes(4),
            small_bytes(3),
            small_bytes(3),
            proptest::collection::vec(any::<u8>(), 0..40),
            any::<i64>(),
        );
        let entries = proptest::collection::vec(entry, 0..120);
        (Just(maxp), Just(range), Just(states), entries)
            .prop_map(|(maxp, range, states, raw)| build_view(maxp, range, states, raw))
    })
}

pub fn build_view(maxp: u32, range: KeyGroupRange, states: Vec<StateDescriptor>, raw: Vec<RawEntry>) -> MemoryView {
    let mut seen = BTreeSet::new();
    let mut entries = Vec::new();
    for (kg, st, key, ns, uk, value, ts) in raw {
        let key_group = range.start() + kg % range.len().max(1);
        let state = st % states.len() as u32;
        let d = &states[state as usize];
        let user_key = (d.kind == KeyedStateKind::Map).then_some(uk);
        if d.kind != KeyedStateKind::List && !seen.insert((key_group, state, key.clone(), ns.clone(), user_key.clone()))
        {
            continue;
        }
        entries.push(OwnedEntry {
            key_group,
            state,
            key,
            namespace: ns,
            user_key,
            value,
            timestamp: d.ttl.map(|_| ts),
        });
    }
    MemoryView::new(maxp, range, states, entries)
}

pub fn arb_compression() -> impl Strategy<Value = Compression> {
    prop_oneof![
        Just(Compression::None),
        Just(Compression::Lz4),
        (-3i32..=5).prop_map(|level| Compression::Zstd { level }),
    ]
}

pub fn arb_options() -> impl Strategy<Value = WriteOptions> {
    (
        arb_compression(),
        prop_oneof![Just(0usize), 1usize..300, Just(64 * 1024)],
    )
        .prop_map(|(compression, block_size)| WriteOptions {
            compression,
            block_size,
        })
}

pub fn arb_operator_descriptor(name: String) -> impl Strategy<Value = OperatorStateDescriptor> {
    (0u8..3, arb_schema(), arb_schema()).prop_map(move |(m, v, k)| {
        let mode = OperatorStateMode::from_code(m).unwrap_or(OperatorStateMode::List);
        OperatorStateDescriptor {
            name: name.clone(),
            mode,
            value_schema: v,
            key_schema: (mode == OperatorStateMode::Broadcast).then_some(k),
        }
    })
}

pub fn arb_operator_snapshot() -> impl Strategy<Value = OperatorStateSnapshot> {
    (0usize..5)
        .prop_flat_map(|n| {
            (0..n)
                .map(|i| {
                    (
                        arb_operator_descriptor(format!("op-state-{i}")),
                        proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..30), 0..40),
                        proptest::collection::btree_map(
                            small_bytes(6),
                            proptest::collection::vec(any::<u8>(), 0..30),
                            0..20,
                        ),
                    )
                })
                .collect::<Vec<_>>()
        })
        .prop_map(|states| OperatorStateSnapshot {
            states: states
                .into_iter()
                .map(|(d, list, map)| {
                    let data = if d.mode == OperatorStateMode::Broadcast {
                        OperatorStateData::Broadcast(map)
                    } else {
                        OperatorStateData::List(list)
                    };
                    (d, data)
                })
                .collect(),
        })
}

fn arb_file_ref() -> impl Strategy<Value = FileRef> {
    (0u8..4, "[a-z0-9_-]{1,6}(/[a-zA-Z0-9_.-]{0,4}[a-z]){0,2}", any::<u64>()).prop_map(
        |(scope, path, size)| match scope {
            0 => FileRef {
                scope: FileScope::Exclusive,
                path,
                size,
            },
            1 => FileRef {
                scope: FileScope::Shared,
                path,
                size,
            },
            2 => FileRef {
                scope: FileScope::Absolute,
                path: format!("/{path}"),
                size,
            },
            _ => FileRef {
                scope: FileScope::Url,
                path: format!("s3://bucket-1/{path}"),
                size,
            },
        },
    )
}

fn arb_native_handle() -> impl Strategy<Value = statekit_format::NativeKeyedHandle> {
    (
        (
            "[a-z]{0,8}",
            "[a-z0-9-]{0,12}",
            "[0-9a-f]{0,32}",
            any::<u64>(),
            any::<i64>(),
        ),
        proptest::collection::btree_map("[A-Z0-9_-][A-Z0-9_.-]{0,11}", (arb_file_ref(), any::<u32>()), 0..5),
        any::<u64>(),
        proptest::collection::vec(("\\PC{0,8}", any::<(u64, u64)>()), 0..4),
        proptest::collection::btree_map(any::<u32>(), any::<u64>(), 0..6),
    )
        .prop_map(
            |((backend, layout, backend_id, checkpoint_id, clock_ms), files, uploaded_bytes, states, kgs)| {
                statekit_format::NativeKeyedHandle {
                    backend,
                    layout,
                    backend_id,
                    checkpoint_id,
                    clock_ms,
                    files: files
                        .into_iter()
                        .map(|(name, (file, crc32))| statekit_format::NativeFile { name, file, crc32 })
                        .collect(),
                    uploaded_bytes,
                    stats: statekit_format::NativeStats {
                        states: states
                            .into_iter()
                            .map(|(name, (bytes, estimated_keys))| statekit_format::NativeStateStats {
                                name,
                                bytes,
                                estimated_keys,
                            })
                            .collect(),
                        key_groups: kgs.into_iter().collect(),
                    },
                }
            },
        )
}

fn arb_subtask(index: u32) -> impl Strategy<Value = SubtaskMetadata> {
    (
        any::<(u16, u16)>(),
        any::<bool>(),
        proptest::option::of(arb_file_ref()),
        proptest::option::of(arb_file_ref()),
        proptest::option::of(arb_keyed_stats()),
        proptest::option::of(arb_native_handle()),
        proptest::option::of(arb_changelog_handle()),
    )
        .prop_map(
            move |((a, b), finished, keyed, operator, keyed_stats, native, changelog)| {
                // A subtask has at most one of a keyed data file, a native handle and a
                // changelog handle.
                let keyed = match (keyed, native, changelog) {
                    (_, Some(n), _) => statekit_format::KeyedHandle::Native(n),
                    (_, None, Some(c)) => statekit_format::KeyedHandle::Changelog(c),
                    (Some(k), None, None) => statekit_format::KeyedHandle::Canonical(k),
                    (None, None, None) => statekit_format::KeyedHandle::None,
                };
                SubtaskMetadata {
                    index,
                    key_groups: KeyGroupRange::new(u32::from(a.min(b)), u32::from(a.max(b))),
                    finished,
                    keyed,
                    keyed_stats,
                    operator,
                }
            },
        )
}

fn arb_changelog_handle() -> impl Strategy<Value = statekit_format::ChangelogKeyedHandle> {
    (
        any::<[u8; 16]>(),
        any::<u64>(),
        proptest::collection::vec(
            (
                arb_file_ref(),
                any::<(u16, u16)>(),
                proptest::option::of(arb_keyed_stats()),
            ),
            0..3,
        ),
        proptest::collection::vec(
            (
                arb_file_ref(),
                any::<(u64, u64)>(),
                any::<[u8; 16]>(),
                any::<u64>(),
                any::<u32>(),
                any::<(u16, u16)>(),
            ),
            0..4,
        ),
    )
        .prop_map(
            |(log, materialization_id, parts, tail)| statekit_format::ChangelogKeyedHandle {
                log,
                materialization_id,
                materialized: parts
                    .into_iter()
                    .map(|(file, (a, b), stats)| statekit_format::MaterializedPart {
                        file,
                        key_groups: KeyGroupRange::new(u32::from(a.min(b)), u32::from(a.max(b))),
                        stats,
                    })
                    .collect(),
                tail: tail
                    .into_iter()
                    .map(
                        |(file, (offset, length), log, sqn, records, (a, b))| statekit_format::LogSegmentRef {
                            file,
                            offset,
                            length,
                            log,
                            sqn,
                            records,
                            key_groups: KeyGroupRange::new(u32::from(a.min(b)), u32::from(a.max(b))),
                        },
                    )
                    .collect(),
            },
        )
}

fn arb_keyed_stats() -> impl Strategy<Value = statekit_format::KeyedStats> {
    (
        any::<(u64, u64)>(),
        proptest::collection::vec(("\\PC{0,8}", any::<(u64, u64)>()), 0..4),
        proptest::collection::btree_map(any::<u32>(), any::<(u64, u64)>(), 0..6),
    )
        .prop_map(|((entries, raw_bytes), states, kgs)| statekit_format::KeyedStats {
            entries,
            raw_bytes,
            states: states
                .into_iter()
                .map(|(name, (entries, raw_bytes))| statekit_format::StateStats {
                    name,
                    entries,
                    raw_bytes,
                })
                .collect(),
            key_groups: kgs
                .into_iter()
                .map(|(key_group, (stored_bytes, entries))| statekit_format::KeyGroupStats {
                    key_group,
                    stored_bytes,
                    entries,
                })
                .collect(),
        })
}

fn arb_operator() -> impl Strategy<Value = OperatorMetadata> {
    (
        "\\PC{0,12}",
        any::<[u8; 16]>(),
        any::<bool>(),
        1u32..=6,
        1u32..=32768,
        (any::<bool>(), any::<bool>()),
        arb_descriptors(3),
        proptest::collection::vec(arb_operator_descriptor("o".into()), 0..3),
    )
        .prop_flat_map(|(uid, id, explicit, parallelism, maxp, finished, keyed, ops)| {
            let subtasks: Vec<_> = (0..parallelism).map(arb_subtask).collect();
            (
                Just((uid, id, explicit, parallelism, maxp, finished, keyed, ops)),
                subtasks,
            )
        })
        .prop_map(
            |((uid, id, explicit, parallelism, maxp, finished, keyed, ops), subtasks)| OperatorMetadata {
                operator_id: if explicit {
                    OperatorId(id)
                } else {
                    OperatorId::from_uid(&uid)
                },
                uid,
                parallelism,
                max_parallelism: maxp,
                finished: finished.0,
                key_group_scheme: if finished.1 {
                    statekit_core::KeyGroupScheme::Flink
                } else {
                    statekit_core::KeyGroupScheme::Statekit
                },
                keyed_states: keyed,
                operator_states: ops,
                subtasks,
            },
        )
}

pub fn arb_metadata() -> impl Strategy<Value = SnapshotMetadata> {
    (
        any::<bool>(),
        any::<u64>(),
        "[0-9a-f]{32}",
        any::<i64>(),
        proptest::collection::btree_map("\\PC{0,8}", "\\PC{0,16}", 0..4),
        proptest::collection::vec(arb_operator(), 0..4),
    )
        .prop_map(
            |(sp, checkpoint_id, job_id, timestamp_ms, properties, operators)| SnapshotMetadata {
                kind: if sp {
                    SnapshotKind::Savepoint
                } else {
                    SnapshotKind::Checkpoint
                },
                format: if operators
                    .iter()
                    .flat_map(|o| &o.subtasks)
                    .any(|s| s.keyed.native().is_some())
                {
                    SnapshotFormat::Native
                } else if operators
                    .iter()
                    .flat_map(|o| &o.subtasks)
                    .any(|s| s.keyed.changelog().is_some())
                {
                    SnapshotFormat::Changelog
                } else {
                    SnapshotFormat::Canonical
                },
                checkpoint_id,
                job_id,
                timestamp_ms,
                properties: properties.into_iter().collect::<BTreeMap<_, _>>(),
                operators,
            },
        )
}
