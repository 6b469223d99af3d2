//! The types fixtures (`fixtures/flink/flink-1.20.5-types/`, made by a real Flink 1.20.5 with
//! `fixtures/flink/gen/`): every value of every `expected.json` — tuples, POJOs, rows, enums,
//! arrays, lists, maps, Either, every boxed primitive, TTL'd values, lists and maps with
//! their last-access timestamps, Long and Tuple keys, window contents under TimeWindow
//! namespaces, user and window timers, operator list and union state and broadcast state —
//! comes back from the canonical, heap-native and compressed savepoints, decoded into
//! statekit values by the schemas the reader derives.

use serde_json::{json, Value as Json};
use statekit_core::{decode_value, KeyGroupRange, OperatorStateData, TypeSchema, Value};
use statekit_flink::{FlinkOpenOptions, FlinkSnapshot};
use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/flink/flink-1.20.5-types")
}

/// The fixtures whose keyed state is a key-group stream (with RocksDB: the native one too).
const FIXTURES: [&str; 5] = [
    "savepoint-hashmap-canonical",
    "savepoint-hashmap-canonical-compressed",
    "savepoint-rocksdb-canonical",
    "savepoint-hashmap-native",
    "savepoint-hashmap-native-compressed",
];

fn json_of(v: &Value) -> Json {
    match v {
        Value::Bytes(b) => json!(format!(
            "0x{}",
            b.iter().map(|x| format!("{x:02x}")).collect::<String>()
        )),
        Value::Unit => Json::Null,
        Value::Bool(b) => json!(b),
        Value::I32(x) => json!(x),
        Value::I64(x) => json!(x),
        Value::U64(x) => json!(x),
        // The shortest decimal that reads back as this f32 (not its f64 widening).
        Value::F32(x) => format!("{x:e}").parse::<f64>().map_or(Json::Null, |f| json!(f)),
        Value::F64(x) => json!(x),
        Value::Str(s) => json!(s),
        Value::List(items) | Value::Tuple(items) => Json::Array(items.iter().map(json_of).collect()),
        Value::Struct(fields) => Json::Object(fields.iter().map(|(k, v)| (k.clone(), json_of(v))).collect()),
        Value::Option(None) => Json::Null,
        Value::Option(Some(v)) => json_of(v),
    }
}

fn decoded(schema: &TypeSchema, bytes: &[u8]) -> Json {
    json_of(&decode_value(schema, bytes).unwrap_or_else(|e| panic!("{schema}: {e}")))
}

/// Our rendering in expected.json's words: a map value is an object, an Either is
/// `{"left": x}` or `{"right": y}`, a Kryo value is opaque.
fn normalise(value_type: &str, v: Json) -> Json {
    if value_type.starts_with("Map<") {
        let pairs = v.as_array().expect("map as pairs").clone();
        return Json::Object(
            pairs
                .into_iter()
                .map(|p| (p[0].as_str().expect("key").to_string(), p[1].clone()))
                .collect(),
        );
    }
    if value_type.starts_with("Either<") {
        let o = v.as_object().expect("either");
        return Json::Object(
            o.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        );
    }
    if value_type.contains("Kryo") {
        assert!(v.as_str().is_some_and(|s| s.starts_with("0x") && s.len() > 4), "{v}");
        return json!("opaque");
    }
    v
}

#[derive(Default)]
struct Got {
    /// uid → state → rows of (key, namespace, user key, value, timestamp).
    keyed: BTreeMap<String, BTreeMap<String, Vec<Json>>>,
    /// uid → the error reading its keyed state gave.
    errors: BTreeMap<String, String>,
}

/// The `_metadata` and expected file of a fixture name: `dir` for a savepoint,
/// `dir/chk-N` for checkpoint N of a checkpoint fixture.
fn paths(fixture: &str) -> (PathBuf, PathBuf) {
    match fixture.split_once("/chk-") {
        Some((dir, n)) => {
            let jobs = root().join(dir).join("checkpoints");
            let job = std::fs::read_dir(&jobs)
                .expect("checkpoints")
                .map(|e| e.expect("entry").path())
                .find(|p| p.is_dir() && p.file_name().is_some_and(|n| n != "shared" && n != "taskowned"))
                .expect("job");
            (
                job.join(format!("chk-{n}/_metadata")),
                root().join(dir).join(format!("expected-chk-{n}.json")),
            )
        }
        None => (
            root().join(fixture).join("savepoint/_metadata"),
            root().join(fixture).join("expected.json"),
        ),
    }
}

fn read(fixture: &str) -> (Json, Got, FlinkSnapshot) {
    let (md, expected) = paths(fixture);
    let want: Json = serde_json::from_str(&std::fs::read_to_string(expected).expect("read")).expect("json");
    let uids: Vec<String> = want["operators"]
        .as_array()
        .expect("operators")
        .iter()
        .map(|o| o["uid"].as_str().expect("uid").to_string())
        .collect();
    let snap = FlinkSnapshot::open(
        &md,
        &FlinkOpenOptions {
            uids: uids.clone(),
            ..Default::default()
        },
    )
    .expect("open");
    let mut got = Got::default();
    for op in &snap.metadata().operators {
        let uid = snap.display_uid(op);
        let views = match snap.keyed_views(op, KeyGroupRange::new(0, op.max_parallelism - 1)) {
            Ok(v) => v,
            Err(e) => {
                got.errors.insert(uid.clone(), e.to_string());
                continue;
            }
        };
        for v in views {
            let states = v.states().to_vec();
            for kg in v.key_group_range() {
                let r = v
                .visit_range(KeyGroupRange::new(kg, kg), &mut |e| {
                    let d = &states[e.state as usize];
                    let row = json!({
                        "key": decoded(&d.key_schema, e.key),
                        "namespace": decoded(&d.namespace_schema, e.namespace),
                        "user_key": e.user_key.map(|u| decoded(d.user_key_schema.as_ref().expect("user key schema"), u)),
                        "value": decoded(&d.value_schema, e.value),
                        "timestamp": e.timestamp,
                        "key_group": kg,
                    });
                    got.keyed.entry(uid.clone()).or_default().entry(d.name.clone()).or_default().push(row);
                    Ok(ControlFlow::Continue(()))
                })
                ;
                if let Err(e) = r {
                    got.errors.entry(uid.clone()).or_insert_with(|| e.to_string());
                }
            }
        }
    }
    (want, got, snap)
}

#[test]
fn every_expected_value_of_every_types_fixture() {
    let mut fixtures = FIXTURES.to_vec();
    if cfg!(feature = "rocksdb") {
        fixtures.push("savepoint-rocksdb-native");
    }
    fixtures.extend([
        "checkpoint-changelog-hashmap/chk-1",
        "checkpoint-changelog-hashmap/chk-2",
        "checkpoint-changelog-hashmap-materialized/chk-1",
        "checkpoint-changelog-hashmap-materialized/chk-2",
    ]);
    for fixture in fixtures {
        let (want, got, snap) = read(fixture);
        let mut checked = 0;
        // A changelog without a materialized part does not hold the key type: a Tuple key
        // cannot be told, and the read says so. (A Kryo value in the heap layout has no
        // length either; the reader finds its end by search, and reads it.)
        let log_only = fixture.starts_with("checkpoint-") && !fixture.ends_with("materialized/chk-2");
        for (uid, e) in &got.errors {
            let expected = log_only && uid == "tuple-keyed" && e.contains("the key type is not in the log");
            assert!(expected, "{fixture} {uid}: {e}");
        }
        assert_eq!(got.errors.is_empty(), !log_only, "{fixture}");
        for (uid, states) in want["keyed_state"].as_object().expect("keyed") {
            if got.errors.contains_key(uid) {
                continue;
            }
            for (name, st) in states.as_object().expect("states") {
                let vt = st["value_type"].as_str().expect("value type");
                let kind = st["kind"].as_str().expect("kind");
                let ours = got
                    .keyed
                    .get(uid)
                    .and_then(|s| s.get(name))
                    .unwrap_or_else(|| panic!("{fixture}: {uid}/{name} missing"));
                // Expected rows in our shape: a list is one row per element.
                let mut expect = Vec::new();
                for e in st["entries"].as_array().expect("entries") {
                    let base = |value: Json, ts: Option<&Json>| {
                        json!({
                            "key": e["key"], "namespace": e["namespace"],
                            "user_key": e.get("user_key").cloned().unwrap_or(Json::Null),
                            "value": value, "timestamp": ts.cloned().unwrap_or(Json::Null),
                            "key_group": e["key_group"],
                        })
                    };
                    if kind == "LIST" {
                        let ts = e.get("ttl_last_access_timestamps").and_then(Json::as_array);
                        for (n, x) in e["value"].as_array().expect("list").iter().enumerate() {
                            expect.push(base(x.clone(), ts.and_then(|t| t.get(n))));
                        }
                    } else if vt.contains("Kryo") {
                        expect.push(base(json!("opaque"), None));
                    } else {
                        expect.push(base(e["value"].clone(), e.get("ttl_last_access_timestamp")));
                    }
                }
                let mut ours: Vec<Json> = ours
                    .iter()
                    .map(|r| {
                        let mut r = r.clone();
                        r["value"] = normalise(vt, r["value"].take());
                        r
                    })
                    .collect();
                let key = |j: &Json| j.to_string();
                // Lists keep their order per key; other rows are compared as sets.
                if kind != "LIST" {
                    ours.sort_by_key(key);
                    expect.sort_by_key(key);
                } else {
                    ours.sort_by_key(|r| (r["key_group"].as_u64(), r["key"].to_string()));
                    expect.sort_by_key(|r| (r["key_group"].as_u64(), r["key"].to_string()));
                }
                assert_eq!(ours, expect, "{fixture}: {uid}/{name}");
                checked += expect.len();
            }
        }
        // Timers: `_timer_state/{event,processing}_<service>`, one row per timer.
        for (uid, t) in want["timers"].as_object().expect("timers") {
            if got.errors.contains_key(uid) {
                continue;
            }
            let service = t["timer_service"].as_str().expect("service");
            for kind in ["event", "processing"] {
                let mut expect: Vec<(String, i64)> = Vec::new();
                for (k, ts) in t[kind].as_object().expect("timers") {
                    for x in ts.as_array().expect("list") {
                        expect.push((k.clone(), x.as_i64().expect("ts")));
                    }
                }
                let name = format!("_timer_state/{kind}_{service}");
                let mut ours: Vec<(String, i64)> = got
                    .keyed
                    .get(uid)
                    .and_then(|s| s.get(&name))
                    .map(|rows| {
                        rows.iter()
                            .map(|r| {
                                (
                                    r["key"].as_str().expect("key").to_string(),
                                    r["value"].as_i64().expect("ts"),
                                )
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                ours.sort();
                expect.sort();
                assert_eq!(ours, expect, "{fixture}: {uid} {name}");
                checked += expect.len();
            }
        }
        // Operator and broadcast state.
        for section in ["operator_state", "broadcast_state"] {
            for (uid, states) in want[section].as_object().expect("section") {
                let op = snap
                    .metadata()
                    .operators
                    .iter()
                    .find(|o| snap.display_uid(o) == *uid)
                    .unwrap_or_else(|| panic!("{uid}"));
                for (name, st) in states.as_object().expect("states") {
                    for (sub, want_sub) in st["subtasks"].as_object().expect("subtasks") {
                        let s = snap
                            .operator_state(op, sub.parse().expect("index"))
                            .expect("operator state");
                        let (d, data) = s.states.iter().find(|(d, _)| d.name == *name).expect("state");
                        let ours = match data {
                            OperatorStateData::List(items) => {
                                Json::Array(items.iter().map(|b| decoded(&d.value_schema, b)).collect())
                            }
                            OperatorStateData::Broadcast(m) => Json::Object(
                                m.iter()
                                    .map(|(k, v)| {
                                        let k = decoded(d.key_schema.as_ref().expect("key schema"), k);
                                        (k.as_str().expect("string key").to_string(), decoded(&d.value_schema, v))
                                    })
                                    .collect(),
                            ),
                        };
                        assert_eq!(&ours, want_sub, "{fixture}: {uid}/{name} subtask {sub}");
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 100, "{fixture}: {checked}");
    }
}
