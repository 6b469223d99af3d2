//! Keyed state of the real Flink canonical savepoints (heap and RocksDB, in files and inline
//! in `_metadata`) and of the heap backend's native savepoint, read through `KeyGroupsView`: every value of `expected.json`
//! (value, list, map and reducing state; non-ASCII keys included) comes back exactly, nothing
//! more; every key is in the key group and subtask Flink put it in; entries come in canonical
//! order; damaged streams fail with an error, never a panic.

mod common;

use serde_json::{json, Map, Value};
use statekit_core::{Entry, KeyGroupRange, KeyedStateKind, KeyedStateView, StateError};
use statekit_flink::{FlinkOpenOptions, FlinkSnapshot, KeyGroupsView, KeyedHandle};
use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/flink/flink-1.20.5")
}

/// The savepoints whose keyed state is a key-group stream: canonical ones, and the heap
/// backend's native savepoint (the heap checkpoint layout).
const KEY_GROUP_STREAMS: [&str; 4] = [
    "savepoint-hashmap-canonical",
    "savepoint-hashmap-canonical-inline",
    "savepoint-rocksdb-canonical",
    "savepoint-hashmap-native",
];

/// Where an entry sorts: key group, state, key, namespace, user key.
type Position = (u32, u32, Vec<u8>, Vec<u8>, Option<Vec<u8>>);

struct Read {
    /// label → state → key → value (as expected.json spells it).
    states: BTreeMap<String, BTreeMap<String, Map<String, Value>>>,
    /// key → (key group, subtask).
    placement: BTreeMap<String, (u32, u32)>,
}

/// Reads every keyed state of the snapshot whose `_metadata` is `md`, through
/// `FlinkSnapshot::keyed_views` (any handle kind).
fn read_at(md: &Path, labels: &BTreeMap<String, String>) -> Read {
    let snap = FlinkSnapshot::open(md, &FlinkOpenOptions::default()).expect("open");
    let mut r = Read {
        states: BTreeMap::new(),
        placement: BTreeMap::new(),
    };
    let mut all = Vec::new();
    for op in &snap.metadata().operators {
        let views = snap
            .keyed_views(op, KeyGroupRange::new(0, op.max_parallelism - 1))
            .unwrap_or_else(|e| panic!("{}: {e}", md.display()));
        for v in views {
            let subtask = v.key_group_range().start() * op.parallelism / op.max_parallelism;
            all.push((op.id.to_string(), subtask, v));
        }
    }
    for (id, subtask, view) in all {
        let label = labels.get(&id).cloned().unwrap_or(id);
        let states = view.states().to_vec();
        let mut last: Option<Position> = None;
        for kg in view.key_group_range() {
            let mut visit = |e: &Entry<'_>| -> Result<ControlFlow<()>, StateError> {
                let cur = (
                    kg,
                    e.state,
                    e.key.to_vec(),
                    e.namespace.to_vec(),
                    e.user_key.map(<[u8]>::to_vec),
                );
                if let Some(prev) = &last {
                    assert!(prev <= &cur, "canonical order");
                }
                last = Some(cur);
                let d = &states[e.state as usize];
                if d.name.starts_with("_timer_state/") {
                    return Ok(ControlFlow::Continue(()));
                }
                let key = String::from_utf8(e.key.to_vec()).expect("utf-8 key");
                assert!(e.namespace.is_empty(), "VoidNamespace is Unit");
                r.placement.insert(key.clone(), (kg, subtask));
                let value = match d.value_schema {
                    statekit_core::TypeSchema::I64 => json!(i64::from_be_bytes(e.value.try_into().expect("8 bytes"))),
                    statekit_core::TypeSchema::Utf8 => json!(String::from_utf8(e.value.to_vec()).expect("utf-8")),
                    ref other => panic!("unexpected schema {other}"),
                };
                let m = r
                    .states
                    .entry(label.clone())
                    .or_default()
                    .entry(d.name.clone())
                    .or_default();
                match d.kind {
                    KeyedStateKind::List => m
                        .entry(key)
                        .or_insert_with(|| json!([]))
                        .as_array_mut()
                        .expect("list")
                        .push(value),
                    KeyedStateKind::Map => {
                        let uk = String::from_utf8(e.user_key.expect("user key").to_vec()).expect("utf-8");
                        m.entry(key)
                            .or_insert_with(|| json!({}))
                            .as_object_mut()
                            .expect("map")
                            .insert(uk, value);
                    }
                    _ => {
                        assert!(m.insert(key, value).is_none(), "one value per key");
                    }
                }
                Ok(ControlFlow::Continue(()))
            };
            let _ = view.visit_range(KeyGroupRange::new(kg, kg), &mut visit).expect("visit");
        }
    }
    r
}

/// `(fixture, expected file, _metadata)` of every snapshot whose keyed state is read here.
fn snapshots() -> Vec<(String, String, PathBuf)> {
    let mut out: Vec<(String, String, PathBuf)> = KEY_GROUP_STREAMS
        .iter()
        .map(|f| {
            (
                f.to_string(),
                "expected.json".to_string(),
                root().join(f).join("savepoint/_metadata"),
            )
        })
        .collect();
    if cfg!(feature = "rocksdb") {
        out.push((
            "savepoint-rocksdb-native".into(),
            "expected.json".into(),
            root().join("savepoint-rocksdb-native/savepoint/_metadata"),
        ));
    }
    let mut checkpoints = vec![
        "checkpoint-changelog-hashmap",
        "checkpoint-changelog-hashmap-materialized",
    ];
    if cfg!(feature = "rocksdb") {
        checkpoints.push("checkpoint-rocksdb-incremental");
    }
    for f in checkpoints {
        let jobs = root().join(f).join("checkpoints");
        let job = std::fs::read_dir(&jobs)
            .expect("checkpoints")
            .map(|e| e.expect("entry").path())
            .find(|p| p.is_dir())
            .expect("job");
        for n in [1, 2] {
            out.push((
                f.to_string(),
                format!("expected-chk-{n}.json"),
                job.join(format!("chk-{n}/_metadata")),
            ));
        }
    }
    out
}

#[test]
fn every_expected_value_of_every_readable_snapshot() {
    for (fixture, expected, md) in snapshots() {
        let want: Value =
            serde_json::from_str(&std::fs::read_to_string(root().join(&fixture).join(&expected)).expect("read"))
                .expect("json");
        let labels = common::operator_labels(&want);
        let got = read_at(&md, &labels);
        let fixture = format!("{fixture}/{expected}");
        let mut checked = 0;
        for (label, states) in want["keyed_state"].as_object().expect("keyed") {
            for (name, st) in states.as_object().expect("states") {
                let values = st["values"].as_object().expect("values");
                let ours = got
                    .states
                    .get(label)
                    .and_then(|s| s.get(name))
                    .unwrap_or_else(|| panic!("{fixture}: {label}/{name} missing"));
                assert_eq!(ours, values, "{fixture}: {label}/{name}");
                checked += values.len();
            }
        }
        assert!(checked > 200, "{fixture}: {checked} values");
        for (key, p) in want["key_groups"].as_object().expect("key_groups") {
            let Some((kg, subtask)) = got.placement.get(key).copied() else {
                // A checkpoint taken before the key arrived.
                continue;
            };
            assert_eq!(kg, p["key_group"].as_u64().expect("kg") as u32, "{key}");
            assert_eq!(subtask, p["subtask"].as_u64().expect("subtask") as u32, "{key}");
        }
        if want["keyed_state"]["word-count"]["count"]["values"]
            .get("grüße")
            .is_some()
        {
            assert!(got.placement.contains_key("grüße"), "{fixture}");
        }
    }
}

#[test]
fn damaged_streams_fail_cleanly() {
    damaged("savepoint-rocksdb-canonical", false);
    damaged("savepoint-hashmap-native", true);
}

fn damaged(fixture: &str, heap: bool) {
    let md = root().join(fixture).join("savepoint/_metadata");
    let snap = FlinkSnapshot::open(&md, &FlinkOpenOptions::default()).expect("open");
    for op in &snap.metadata().operators {
        for s in &op.subtasks {
            let Some(KeyedHandle::KeyGroups(g)) = &s.managed_keyed else {
                continue;
            };
            let bytes = snap.read_stream(&g.stream).expect("stream");
            let walk = |b: Vec<u8>| -> Result<usize, String> {
                let v = KeyGroupsView::new(b, g, op.max_parallelism, "f").map_err(|e| e.to_string())?;
                let mut n = 0;
                let _ = v
                    .visit_range(v.key_group_range(), &mut |_| {
                        n += 1;
                        Ok(ControlFlow::Continue(()))
                    })
                    .map_err(|e| e.to_string())?;
                Ok(n)
            };
            let layout = KeyGroupsView::new(bytes.clone(), g, op.max_parallelism, "f").expect("view");
            assert_eq!(layout.is_heap_layout(), heap, "{fixture}");
            let full = walk(bytes.clone()).expect("intact");
            assert!(full > 0);
            for cut in (0..bytes.len()).step_by(5) {
                // A truncated stream never yields the full state silently.
                match walk(bytes[..cut].to_vec()) {
                    Ok(n) => assert!(n < full, "cut at {cut}: all {n} entries"),
                    Err(e) => assert!(e.contains("f: offset") || e.contains("f:"), "{e}"),
                }
            }
            let mut b = bytes.clone();
            for pos in (0..b.len()).step_by(3) {
                b[pos] ^= 0x41;
                let _ = walk(b.clone());
                b[pos] ^= 0x41;
            }
        }
    }
}
