//! The heads of the real Flink fixtures' state streams (keyed: canonical savepoint, heap
//! checkpoint, RocksDB meta, changelog materialization; operator: list, union, broadcast)
//! decode to the states `expected*.json` lists, with their kinds and types; damaged heads fail
//! with an error naming the file and an offset, never a panic.

mod common;

use statekit_flink::{
    decode_keyed_proxy, decode_operator_proxy, BackendStateType, FlinkOpenOptions, FlinkSnapshot, FlinkType,
    KeyedHandle,
};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/flink/flink-1.20.5")
}

/// (`_metadata`, its expected.json) for every fixture snapshot.
fn snapshots() -> Vec<(PathBuf, serde_json::Value)> {
    let mut out = Vec::new();
    for f in std::fs::read_dir(root()).expect("fixtures") {
        let dir = f.expect("entry").path();
        for e in std::fs::read_dir(&dir).expect("fixture") {
            let p = e.expect("entry").path();
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
            if !(name.starts_with("expected") && name.ends_with(".json")) {
                continue;
            }
            let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).expect("read")).expect("json");
            let md = v["metadata_file"].as_str().map(|m| dir.join(m)).unwrap_or_else(|| {
                // Checkpoints: expected-chk-N.json ↔ checkpoints/<job>/chk-N/_metadata.
                let n = name.trim_start_matches("expected-").trim_end_matches(".json");
                let jobs = dir.join("checkpoints");
                let job = std::fs::read_dir(&jobs)
                    .expect("jobs")
                    .next()
                    .expect("a job")
                    .expect("entry")
                    .path();
                job.join(n).join("_metadata")
            });
            out.push((md, v));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[test]
fn every_state_head_decodes_to_the_expected_states() {
    let snaps = snapshots();
    assert_eq!(snaps.len(), 11);
    for (md, want) in snaps {
        let snap = FlinkSnapshot::open(&md, &FlinkOpenOptions::default()).unwrap_or_else(|e| panic!("{e}"));
        let ids = common::operator_labels(&want);
        let mut keyed_seen: BTreeMap<(String, String), (String, String, String)> = BTreeMap::new();
        let mut operator_seen: BTreeMap<(String, String), String> = BTreeMap::new();
        for op in &snap.metadata().operators {
            let label = ids
                .get(&op.id.to_string())
                .cloned()
                .unwrap_or_else(|| op.id.to_string());
            for s in &op.subtasks {
                for h in &s.managed_operator {
                    let bytes = snap.read_stream(&h.stream).expect("operator stream");
                    let p = decode_operator_proxy(&bytes, "op").unwrap_or_else(|e| panic!("{}: {e}", md.display()));
                    for m in p.states.iter().chain(&p.broadcast) {
                        let mode = m
                            .options
                            .get("OPERATOR_STATE_DISTRIBUTION_MODE")
                            .cloned()
                            .unwrap_or_default();
                        let ty = match m.backend_type {
                            BackendStateType::Broadcast => format!(
                                "{}->{}",
                                m.serializer("KEY_SERIALIZER").map(FlinkType::name).unwrap_or_default(),
                                m.serializer("VALUE_SERIALIZER")
                                    .map(FlinkType::name)
                                    .unwrap_or_default()
                            ),
                            _ => m
                                .serializer("VALUE_SERIALIZER")
                                .map(FlinkType::name)
                                .unwrap_or_default(),
                        };
                        operator_seen.insert((label.clone(), m.name.clone()), format!("{mode} {ty}"));
                    }
                }
                let Some(k) = &s.managed_keyed else { continue };
                let mut heads = Vec::new();
                collect_heads(k, &mut heads);
                for h in heads {
                    let bytes = snap.read_stream(h).expect("keyed stream");
                    let p = decode_keyed_proxy(&bytes, "keyed").unwrap_or_else(|e| panic!("{}: {e}", md.display()));
                    assert_eq!(p.key, FlinkType::String);
                    for m in &p.states {
                        if m.backend_type == BackendStateType::PriorityQueue {
                            assert!(m.name.starts_with("_timer_state/"), "{}", m.name);
                            assert!(matches!(m.serializer("VALUE_SERIALIZER"), Some(FlinkType::Timer(..))));
                            continue;
                        }
                        let kind = m.keyed_state_type().unwrap_or_default().to_string();
                        let value = m.serializer("VALUE_SERIALIZER").expect("value serializer");
                        let ns = m.serializer("NAMESPACE_SERIALIZER").expect("namespace").name();
                        let value = match (kind.as_str(), value) {
                            ("LIST", FlinkType::List(e)) => e.name(),
                            ("MAP", FlinkType::Map(k, v)) => format!("Map<{},{}>", k.name(), v.name()),
                            (_, v) => v.name(),
                        };
                        keyed_seen.insert((label.clone(), m.name.clone()), (kind, value, ns));
                    }
                }
            }
        }
        // Every expected keyed state, with its kind and types (a changelog checkpoint without
        // a materialization has its state meta infos in the log, not in a stream head).
        let log_only = snap.metadata().operators.iter().flat_map(|o| &o.subtasks).any(|s| {
            matches!(&s.managed_keyed, Some(KeyedHandle::Changelog { materialized, .. }) if materialized.is_empty())
        });
        if log_only {
            assert!(keyed_seen.is_empty());
        }
        for (label, states) in want["keyed_state"]
            .as_object()
            .expect("keyed_state")
            .iter()
            .filter(|_| !log_only)
        {
            for (name, st) in states.as_object().expect("states") {
                let got = keyed_seen
                    .get(&(label.clone(), name.clone()))
                    .unwrap_or_else(|| panic!("{}: {label}/{name} not found in {keyed_seen:?}", md.display()));
                assert_eq!(got.0, st["kind"].as_str().expect("kind"), "{label}/{name}");
                // "Long (sum of seq)": the type, then a note.
                let vt = st["value_type"].as_str().expect("value type");
                let want_value = vt.split(" (").next().unwrap_or(vt).replace(' ', "");
                assert_eq!(got.1.replace(' ', ""), want_value, "{label}/{name}");
                assert_eq!(got.2, st["namespace"].as_str().expect("namespace"), "{label}/{name}");
            }
        }
        for section in ["operator_state", "broadcast_state"] {
            for (label, states) in want[section].as_object().expect("section") {
                for (name, st) in states.as_object().expect("states") {
                    let got = operator_seen
                        .get(&(label.clone(), name.clone()))
                        .unwrap_or_else(|| panic!("{}: {label}/{name} not in {operator_seen:?}", md.display()));
                    let ty = match st["element_type"].as_str() {
                        Some(t) => t.to_string(),
                        None => format!(
                            "{}->{}",
                            st["key_type"].as_str().expect("key"),
                            st["value_type"].as_str().expect("value")
                        ),
                    };
                    assert_eq!(
                        got,
                        &format!("{} {ty}", st["mode"].as_str().expect("mode")),
                        "{label}/{name}"
                    );
                }
            }
        }
    }
}

/// The streams that start with a keyed proxy: canonical and heap key-group streams, RocksDB
/// meta streams, and changelog materializations.
fn collect_heads<'a>(k: &'a KeyedHandle, out: &mut Vec<&'a statekit_flink::StreamHandle>) {
    match k {
        KeyedHandle::KeyGroups(g) => out.push(&g.stream),
        KeyedHandle::Incremental(i) => out.push(&i.meta),
        KeyedHandle::Changelog { materialized, .. } => {
            for m in materialized {
                collect_heads(m, out);
            }
        }
        _ => {}
    }
}

#[test]
fn damaged_heads_fail_cleanly() {
    let md = root().join("savepoint-rocksdb-canonical/savepoint/_metadata");
    let snap = FlinkSnapshot::open(&md, &FlinkOpenOptions::default()).expect("open");
    let mut heads: Vec<(bool, Vec<u8>)> = Vec::new();
    for op in &snap.metadata().operators {
        for s in &op.subtasks {
            if let Some(KeyedHandle::KeyGroups(g)) = &s.managed_keyed {
                heads.push((true, snap.read_stream(&g.stream).expect("read")));
            }
            for h in &s.managed_operator {
                heads.push((false, snap.read_stream(&h.stream).expect("read")));
            }
        }
    }
    assert!(heads.len() > 4);
    for (keyed, bytes) in heads {
        let decode = |b: &[u8]| -> Result<usize, statekit_flink::FlinkError> {
            if keyed {
                decode_keyed_proxy(b, "f").map(|p| p.len)
            } else {
                decode_operator_proxy(b, "f").map(|p| p.len)
            }
        };
        let len = decode(&bytes).expect("intact");
        for cut in 0..len {
            let e = decode(&bytes[..cut]).expect_err("truncated head");
            assert!(e.to_string().starts_with("f: offset "), "{e}");
        }
        let mut b = bytes.clone();
        for pos in 0..len {
            for bit in [0u8, 4, 7] {
                b[pos] ^= 1 << bit;
                let _ = decode(&b);
                b[pos] ^= 1 << bit;
            }
        }
    }
}
