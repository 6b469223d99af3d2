//! The change-record report (`statekit_snapshot::changes`): a small log file written here is
//! walked (every operation, an undeclared state, undecodable bytes), filtered and stopped; the
//! records are checked as typed data and as the JSON they serialise to (keys in name order);
//! the changelog checkpoint fixture is walked in replay order; bad requests and damaged files
//! are typed errors, with nothing listed before a damaged file's error.

use serde_json::{json, Value as Json};
use statekit_changelog::file::{ChangeSetBuffer, LogCompression, LogFileWriter, LogId};
use statekit_changelog::{Change, Op, ReadKind};
use statekit_core::location::Location;
use statekit_core::storage::LocalStorage;
use statekit_core::{ErrorKind, KeyGroupRange, StateDescriptor, TypeSchema};
use statekit_snapshot::changes::{
    declared_key_schema, is_log_file, key_schema, unwritten_prepared, walk_changes, walk_log_file_changes,
    ChangeFilter, ChangeRecord, ChangesError, ListedOp, RecordBody,
};
use statekit_snapshot::Snapshot;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

const LOG: LogId = LogId([0x11; 16]);

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/v1")
}

fn changelog_checkpoint(name: &str) -> PathBuf {
    fixtures().join(name).join("c4a9e10f0c4a9e10f0c4a9e10f0c4a9e/chk-3")
}

const I64_42: &[u8] = &42i64.to_be_bytes();
const I64_7: &[u8] = &7i64.to_be_bytes();
const U64_1: &[u8] = &1u64.to_be_bytes();
const U64_2: &[u8] = &2u64.to_be_bytes();
const U64_3: &[u8] = &3u64.to_be_bytes();

/// `t.skcl` in `dir`: one change set of log [`LOG`], sequence number 5, declaring `count`
/// (value), `recent` (list) and `followers` (map), with every operation, a state no metadata
/// record declares (id 9) and a value that does not decode.
fn log_file(dir: &Path) -> PathBuf {
    let mut cs = ChangeSetBuffer::new();
    cs.push_metadata(0, &StateDescriptor::value("count", TypeSchema::Utf8, TypeSchema::I64));
    cs.push_metadata(1, &StateDescriptor::list("recent", TypeSchema::Utf8, TypeSchema::U64));
    cs.push_metadata(
        2,
        &StateDescriptor::map("followers", TypeSchema::Utf8, TypeSchema::Utf8, TypeSchema::I64),
    );
    let change = |state: u32, time: Option<i64>, key: &'static [u8], op: Op<'static>| Change {
        state,
        time,
        key,
        namespace: b"",
        op,
    };
    let map_entry = Op::Read {
        kind: ReadKind::MapEntry,
        user_key: b"bob",
    };
    let get = Op::Read {
        kind: ReadKind::Get,
        user_key: b"",
    };
    let changes = [
        (2, change(0, None, b"alpha", Op::Put(I64_42))),
        (
            2,
            change(
                2,
                None,
                b"alpha",
                Op::MapPut {
                    user_key: b"bob",
                    value: I64_7,
                },
            ),
        ),
        (3, change(1, Some(1000), b"beta", Op::SetList(vec![U64_1, U64_2]))),
        (3, change(2, None, b"beta", map_entry)),
        (3, change(0, None, b"beta", get)),
        (4, change(9, None, b"gamma", Op::Put(b"\x01"))),
        (4, change(0, None, b"delta", Op::Put(b"\x01\x02"))),
        (5, change(1, None, b"zeta", Op::MergeList(vec![b""]))),
        (5, change(2, None, b"eps", Op::MapRemove(b"bob"))),
        (5, change(1, None, b"eps", Op::AddElement(U64_3))),
        (5, change(0, None, b"eps", Op::Clear)),
    ];
    for (kg, c) in &changes {
        cs.push_change(*kg, c);
    }
    let storage = LocalStorage::new(dir);
    let mut w = LogFileWriter::create(&storage, "t.skcl", [0xa7; 16], 0, LogCompression::None).expect("create");
    w.append(&cs.seal(LOG, 5)).expect("append");
    w.finish().expect("finish");
    dir.join("t.skcl")
}

/// What a walk of the log file lists with `filter` (at most `max` records), as JSON text; each
/// record's serialisation has its keys in name order already (what a sorted map prints).
fn listed(path: &Path, filter: &ChangeFilter, max: usize) -> Vec<String> {
    let mut out = Vec::new();
    walk_log_file_changes(&Location::Local(path.to_path_buf()), "t.skcl", filter, &mut |r| {
        let text = serde_json::to_string(r).expect("serialises");
        let sorted = serde_json::to_value(r).expect("serialises").to_string();
        assert_eq!(text, sorted, "keys in name order");
        check_typed(r);
        out.push(text);
        if out.len() == max {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    })
    .expect("walks");
    out
}

/// The typed record agrees with its JSON.
fn check_typed(r: &ChangeRecord<'_>) {
    let j = serde_json::to_value(r).expect("serialises");
    assert_eq!(r.origin.subtask, None);
    assert_eq!(r.origin.log, LOG);
    assert_eq!(r.origin.sqn, 5);
    match &r.body {
        RecordBody::Metadata { state_id, descriptor } => {
            assert_eq!(j["state"], json!(descriptor.name));
            assert_eq!(j["state_id"], json!(state_id));
            assert!(j["key_group"].is_null());
        }
        RecordBody::Change(c) => {
            assert_eq!(j["op"], json!(c.op_name));
            assert_eq!(j["key_group"], json!(c.key_group));
            assert_eq!(j["key"], serde_json::to_value(c.key.decoded()).expect("serialises"));
        }
    }
}

#[test]
fn a_log_file_walks_as_typed_records_and_their_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = log_file(dir.path());
    let all = listed(&path, &ChangeFilter::default(), usize::MAX);
    let log = "11".repeat(16);
    let at = |i: usize| -> Json { serde_json::from_str(&all[i]).expect("json") };
    assert_eq!(all.len(), 14, "{all:#?}");
    let offset = at(0)["offset"].as_u64().expect("offset");
    // The metadata records first, then the key groups ascending, each in its order.
    assert_eq!(
        all[0],
        format!(
            r#"{{"descriptor":{{"key":"string","kind":"value","namespace":"unit","ttl_ms":null,"user_key":null,"value":"i64"}},"file":"t.skcl","key_group":null,"log":"{log}","offset":{offset},"op":"metadata","sqn":5,"state":"count","state_id":0,"subtask":null}}"#
        )
    );
    assert_eq!(
        all[3],
        format!(
            r#"{{"file":"t.skcl","key":"alpha","key_group":2,"log":"{log}","namespace":null,"offset":{offset},"op":"put","sqn":5,"state":"count","state_id":0,"subtask":null,"value":42}}"#
        )
    );
    assert_eq!(
        (at(4)["op"].clone(), at(4)["user_key"].clone(), at(4)["value"].clone()),
        (json!("map-put"), json!("bob"), json!(7))
    );
    assert_eq!(
        (at(5)["elements"].clone(), at(5)["time_ms"].clone()),
        (json!([1, 2]), json!(1000))
    );
    assert_eq!(
        (at(6)["read"].clone(), at(6)["user_key"].clone()),
        (json!("map-entry"), json!("bob"))
    );
    // A read of a value has no user key.
    assert_eq!(at(7)["read"], json!("get"));
    assert!(at(7).get("user_key").is_none(), "{}", all[7]);
    // A state no metadata record declared: its parts as bytes, no name.
    assert_eq!(
        (
            at(8)["state"].clone(),
            at(8)["state_id"].clone(),
            at(8)["key"].clone(),
            at(8)["value"].clone()
        ),
        (Json::Null, json!(9), json!("0x67616d6d61"), json!("0x01"))
    );
    // Bytes that do not decode: their hex and why.
    assert_eq!(at(9)["value"]["hex"], json!("0102"));
    assert!(
        at(9)["value"]["error"].as_str().is_some_and(|e| e.contains("i64")),
        "{}",
        all[9]
    );
    assert_eq!(at(10)["sources"], json!([null]));
    assert_eq!(at(11)["user_key"], json!("bob"));
    assert_eq!(at(12)["element"], json!(3));
    assert_eq!(
        all[13],
        format!(
            r#"{{"file":"t.skcl","key":"eps","key_group":5,"log":"{log}","namespace":null,"offset":{offset},"op":"clear","sqn":5,"state":"count","state_id":0,"subtask":null}}"#
        )
    );
}

#[test]
fn filters_and_a_visitor_that_stops() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = log_file(dir.path());
    let ops = |filter: ChangeFilter| -> Vec<String> {
        listed(&path, &filter, usize::MAX)
            .iter()
            .map(|t| {
                serde_json::from_str::<Json>(t).expect("json")["op"]
                    .as_str()
                    .unwrap_or("")
                    .to_string()
            })
            .collect()
    };
    // Key groups: no metadata records.
    assert_eq!(
        ops(ChangeFilter {
            key_groups: Some(KeyGroupRange::new(3, 3)),
            ..ChangeFilter::default()
        }),
        ["set-list", "read", "read"]
    );
    // A state: its declaration and its changes.
    assert_eq!(
        ops(ChangeFilter {
            state: Some("followers".into()),
            ..ChangeFilter::default()
        }),
        ["metadata", "map-put", "read", "map-remove"]
    );
    // A key: its changes only.
    assert_eq!(
        ops(ChangeFilter {
            key: Some(b"eps".to_vec()),
            ..ChangeFilter::default()
        }),
        ["map-remove", "add-element", "clear"]
    );
    // The visitor's break ends the walk.
    assert_eq!(listed(&path, &ChangeFilter::default(), 2).len(), 2);
}

#[test]
fn lone_log_files_are_recognised_and_declare_key_schemas() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = log_file(dir.path());
    let at = Location::Local(path.clone());
    assert!(is_log_file(&at));
    assert!(!is_log_file(&Location::Local(dir.path().to_path_buf())));
    assert_eq!(
        declared_key_schema(&at, "t.skcl", "followers").expect("declared"),
        TypeSchema::Utf8
    );
    let e = declared_key_schema(&at, "t.skcl", "nope").expect_err("undeclared");
    assert_eq!(e.to_string(), "t.skcl: no metadata record declares a state \"nope\"");
    assert_eq!(e.kind(), ErrorKind::NotFound);
    assert_eq!(unwritten_prepared(&at).expect("maps"), None);
    // A prepared spare: all zeros, no records.
    let spare = dir.path().join("spare.skcl");
    std::fs::write(&spare, vec![0u8; 4096]).expect("write");
    let spare = Location::Local(spare);
    assert_eq!(unwritten_prepared(&spare).expect("maps"), Some(4096));
    walk_log_file_changes(&spare, "spare.skcl", &ChangeFilter::default(), &mut |r| {
        panic!("a spare lists {r:?}")
    })
    .expect("walks");
    // Not a log file: the problem names file, offset and field.
    let junk = dir.path().join("junk.skcl");
    std::fs::write(&junk, b"not a log file at all").expect("write");
    let e = walk_log_file_changes(
        &Location::Local(junk),
        "junk.skcl",
        &ChangeFilter::default(),
        &mut |r| panic!("junk lists {r:?}"),
    )
    .expect_err("bad magic");
    assert!(matches!(e, ChangesError::Unreadable(_)), "{e:?}");
    assert!(e.to_string().starts_with("junk.skcl: offset 0: header.magic: "), "{e}");
}

#[test]
fn a_checkpoint_lists_its_tails_in_replay_order() {
    let snapshot = Snapshot::open(changelog_checkpoint("changelog-checkpoint")).expect("opens");
    let mut subtasks = Vec::new();
    let mut metadata = 0;
    let mut kinds = std::collections::BTreeSet::new();
    walk_changes(&snapshot, None, &ChangeFilter::default(), &mut |r| {
        subtasks.push(r.origin.subtask.expect("a subtask"));
        match &r.body {
            RecordBody::Metadata { .. } => metadata += 1,
            RecordBody::Change(c) => {
                assert!(c.state.is_some(), "{r:?}");
                kinds.insert(c.op_name);
                if let ListedOp::Put(value) = &c.op {
                    assert_eq!(value.schema, &TypeSchema::I64);
                }
            }
        }
        ControlFlow::Continue(())
    })
    .expect("walks");
    assert_eq!(subtasks.len(), 222);
    assert!(subtasks.windows(2).all(|w| w[0] <= w[1]), "subtask by subtask");
    assert_eq!(subtasks.iter().filter(|&&s| s == 0).count(), 122);
    assert_eq!(metadata, 6);
    assert!(kinds.contains("put") && kinds.contains("map-put"), "{kinds:?}");
    assert_eq!(
        key_schema(&snapshot, Some("word-counter"), "recent").expect("declared"),
        TypeSchema::Utf8
    );
    assert!(matches!(
        key_schema(&snapshot, None, "nope"),
        Err(ChangesError::NoKeyedState { .. })
    ));
}

#[test]
fn bad_requests_and_damaged_tails_are_typed_errors() {
    let nothing = &mut |r: &ChangeRecord<'_>| -> ControlFlow<()> { panic!("listed {r:?}") };
    let snapshot = Snapshot::open(changelog_checkpoint("changelog-checkpoint")).expect("opens");
    let e = walk_changes(
        &snapshot,
        None,
        &ChangeFilter {
            key_groups: Some(KeyGroupRange::new(0, 8)),
            ..ChangeFilter::default()
        },
        nothing,
    )
    .expect_err("beyond the key groups");
    assert_eq!(
        e.to_string(),
        "key group 8 does not exist: operator \"word-counter\" has 8 key groups"
    );
    assert_eq!(e.kind(), ErrorKind::Caller);
    let e = walk_changes(&snapshot, Some("nope"), &ChangeFilter::default(), nothing).expect_err("no such operator");
    assert!(matches!(e, ChangesError::Snapshot(_)), "{e:?}");
    // A canonical savepoint holds no changelog state.
    let savepoint = Snapshot::open(fixtures().join("savepoint-basic")).expect("opens");
    let e = walk_changes(&savepoint, None, &ChangeFilter::default(), nothing).expect_err("no changelog");
    assert_eq!(e.to_string(), "no operator holds changelog state (format canonical)");
    assert_eq!(e.kind(), ErrorKind::Caller);
    let e =
        walk_changes(&savepoint, Some("word-counter"), &ChangeFilter::default(), nothing).expect_err("no changelog");
    assert_eq!(
        e.to_string(),
        "operator \"word-counter\" holds no changelog state (format canonical)"
    );
    // A damaged tail: an error before anything is listed.
    let damaged = Snapshot::open(changelog_checkpoint("corrupt-changelog-tail-bitflip")).expect("opens");
    let e = walk_changes(&damaged, None, &ChangeFilter::default(), nothing).expect_err("damaged");
    assert!(matches!(e, ChangesError::Unreadable(_)), "{e:?}");
    assert_eq!(e.kind(), ErrorKind::Corrupt);
    assert!(
        e.to_string().contains("offset 84: change_set.crc32: checksum mismatch"),
        "{e}"
    );
}

/// The key groups of the records `walk_changes` lists for `key` of state `count`.
fn key_groups_of_key(snapshot: &Snapshot, key: &[u8]) -> Vec<u32> {
    let filter = ChangeFilter {
        state: Some("count".into()),
        key: Some(key.to_vec()),
        ..ChangeFilter::default()
    };
    let mut kgs = Vec::new();
    walk_changes(snapshot, None, &filter, &mut |r| {
        if let RecordBody::Change(c) = &r.body {
            kgs.push(c.key_group);
        }
        ControlFlow::Continue(())
    })
    .expect("walks");
    kgs
}

/// `dump --changes --key` looks for a key in the key group the operator's key-group scheme
/// (recorded in `_metadata`) gives it, not in statekit's own rule's. (Until this change it
/// always used statekit's rule: a changelog checkpoint of state converted from Apache Flink
/// would have been searched in the wrong key group.) The fixture's keys are in statekit's
/// groups; the same checkpoint marked as following Flink's rule is searched in Flink's group
/// of the key — where its records are not.
#[test]
fn a_key_is_looked_for_in_the_key_group_of_the_operators_scheme() {
    use statekit_core::KeyGroupScheme;
    let original = changelog_checkpoint("changelog-checkpoint");
    let snapshot = Snapshot::open(&original).expect("opens");
    let op = snapshot.operator("word-counter").expect("operator");
    let max_p = op.max_parallelism;
    // A counted key the two rules place apart.
    let mut keys = Vec::new();
    walk_changes(&snapshot, None, &ChangeFilter::default(), &mut |r| {
        if let RecordBody::Change(c) = &r.body {
            if c.state == Some("count") {
                keys.push(c.key.bytes.to_vec());
            }
        }
        ControlFlow::Continue(())
    })
    .expect("walks");
    let place = |scheme: KeyGroupScheme, k: &[u8]| scheme.key_group(k, &TypeSchema::Utf8, max_p).expect("placed");
    let key = keys
        .iter()
        .find(|k| place(KeyGroupScheme::Statekit, k) != place(KeyGroupScheme::Flink, k))
        .expect("a key the rules place apart")
        .as_slice();
    let (ours, flinks) = (place(KeyGroupScheme::Statekit, key), place(KeyGroupScheme::Flink, key));
    let found = key_groups_of_key(&snapshot, key);
    assert!(!found.is_empty(), "the fixture counts {key:?}");
    assert!(found.iter().all(|&kg| kg == ours), "{found:?}");

    // The same checkpoint, its operator marked as holding Flink-placed keys.
    let dir = tempfile::tempdir().expect("tempdir");
    let job = original.parent().expect("job directory");
    let copy = dir.path().join("job");
    copy_tree(job, &copy);
    let md = copy.join("chk-3").join(statekit_format::METADATA_FILE_NAME);
    let mut meta = statekit_format::decode_metadata(&std::fs::read(&md).expect("read"), "m").expect("decode");
    for o in &mut meta.operators {
        o.key_group_scheme = KeyGroupScheme::Flink;
    }
    std::fs::write(&md, statekit_format::encode_metadata(&meta)).expect("write");
    let marked = Snapshot::open(copy.join("chk-3")).expect("opens");
    assert_eq!(
        key_groups_of_key(&marked, key),
        Vec::<u32>::new(),
        "only Flink's group {flinks} is read"
    );
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read_dir") {
        let e = e.expect("entry");
        let dest = to.join(e.file_name());
        if e.path().is_dir() {
            copy_tree(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).expect("copy");
        }
    }
}
