//! Round trips: random views, operator snapshots and metadata through the format and back.

mod common;

use common::*;
use proptest::prelude::*;
use statekit_core::storage::{LocalStorage, MemoryStorage, Storage};
use statekit_core::{
    KeyGroupRange, KeyedStateView, MemoryView, OperatorStateData, OperatorStateDescriptor, OperatorStateMode,
    OperatorStateSnapshot, TypeSchema,
};
use statekit_format::*;
use std::collections::BTreeMap;
use std::ops::ControlFlow;

fn check_view_round_trip(view: &MemoryView, opts: &WriteOptions, sub: KeyGroupRange) -> Result<(), TestCaseError> {
    let storage = MemoryStorage::new();
    let info = write_keyed_file(view, KeyGroupRange::all(view.max_parallelism()), &storage, "a/kd", opts)
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let reader = KeyedFileReader::open(&storage, "a/kd", Some(info.file.size)).expect("open");
    prop_assert_eq!(reader.info(), &info);
    prop_assert_eq!(reader.states(), view.states());
    prop_assert_eq!(reader.max_parallelism(), view.max_parallelism());
    prop_assert_eq!(reader.key_group_range(), view.key_group_range());
    let report = reader.verify().expect("verify");
    prop_assert_eq!(report.entries, view.entries().len() as u64);
    prop_assert_eq!(report.bytes, info.file.size);
    prop_assert_eq!(info.entries, view.entries().len() as u64);
    let per_state: Vec<u64> = (0..view.states().len() as u32)
        .map(|s| view.entries().iter().filter(|e| e.state == s).count() as u64)
        .collect();
    prop_assert_eq!(info.states.iter().map(|s| s.entries).collect::<Vec<_>>(), per_state);

    let all = MemoryView::collect(&reader, KeyGroupRange::all(view.max_parallelism())).expect("collect");
    prop_assert_eq!(all.entries(), view.entries());
    // A sub-range reads exactly the sub-range.
    let got = MemoryView::collect(&reader, sub).expect("collect sub");
    let want = MemoryView::collect(view, sub).expect("collect sub");
    prop_assert_eq!(got.entries(), want.entries());
    prop_assert_eq!(got.key_group_range(), want.key_group_range());
    // Writing only the sub-range gives a file holding only it.
    let info2 = write_keyed_file(view, sub, &storage, "a/sub", opts).expect("write sub");
    let r2 = KeyedFileReader::open(&storage, "a/sub", Some(info2.file.size)).expect("open sub");
    r2.verify().expect("verify sub");
    prop_assert_eq!(r2.key_group_range(), sub.intersection(&view.key_group_range()));
    let got = MemoryView::collect(&r2, KeyGroupRange::all(view.max_parallelism())).expect("collect");
    prop_assert_eq!(got.entries(), want.entries());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn keyed_round_trip(view in arb_view(), opts in arb_options(), a in any::<u32>(), b in any::<u32>()) {
        let m = view.max_parallelism();
        let sub = KeyGroupRange::new((a % m).min(b % m), (a % m).max(b % m));
        check_view_round_trip(&view, &opts, sub)?;
    }

    #[test]
    fn keyed_round_trip_every_codec(view in arb_view()) {
        for compression in [Compression::None, Compression::Lz4, Compression::Zstd { level: 3 }] {
            let opts = WriteOptions { compression, block_size: 97 };
            check_view_round_trip(&view, &opts, KeyGroupRange::all(view.max_parallelism()))?;
        }
    }

    #[test]
    fn operator_round_trip(snap in arb_operator_snapshot(), opts in arb_options()) {
        let storage = MemoryStorage::new();
        let f = write_operator_file(&snap, &storage, "op/o", &opts).expect("write");
        prop_assert_eq!(f.scope, FileScope::Exclusive);
        prop_assert_eq!(f.path.as_str(), "op/o");
        prop_assert_eq!(f.size, storage.open("op/o").expect("open").bytes().len() as u64);
        let back = read_operator_file(&storage, "op/o", Some(f.size)).expect("read");
        prop_assert_eq!(back, snap);
    }

    #[test]
    fn metadata_round_trip(meta in arb_metadata()) {
        let bytes = encode_metadata(&meta);
        let back = decode_metadata(&bytes, "_metadata").expect("decode");
        prop_assert_eq!(&back, &meta);
        prop_assert_eq!(encode_metadata(&back), bytes);
    }
}

#[test]
fn local_storage_round_trip_and_truncation() {
    let dir = tempfile::tempdir().expect("tempdir");
    let storage = LocalStorage::new(dir.path());
    let view = sample_view();
    let info = write_keyed_file(
        &view,
        KeyGroupRange::all(16),
        &storage,
        "x/keyed",
        &WriteOptions::default(),
    )
    .expect("write");
    let reader = KeyedFileReader::open(&storage, "x/keyed", Some(info.file.size)).expect("open");
    reader.verify().expect("verify");
    assert_eq!(
        MemoryView::collect(&reader, KeyGroupRange::all(16))
            .expect("collect")
            .entries(),
        view.entries()
    );
    // A wrong expected size is reported as corruption naming the file.
    let e = KeyedFileReader::open(&storage, "x/keyed", Some(info.file.size + 1)).expect_err("size");
    let msg = e.to_string();
    assert!(
        msg.contains("x/keyed") && msg.contains("file size") && msg.contains("truncated"),
        "{msg}"
    );
    // A missing file is a storage error.
    assert!(matches!(
        KeyedFileReader::open(&storage, "x/none", None),
        Err(FormatError::Storage(_))
    ));
}

fn sample_view() -> MemoryView {
    use statekit_core::{OwnedEntry, StateDescriptor, TtlConfig};
    let states = vec![
        StateDescriptor::value("count", TypeSchema::Utf8, TypeSchema::I64),
        StateDescriptor::list("events", TypeSchema::Utf8, TypeSchema::Bytes).with_ttl(TtlConfig::new(1000)),
        StateDescriptor::map("m", TypeSchema::Utf8, TypeSchema::Utf8, TypeSchema::I64).with_namespace(TypeSchema::I64),
    ];
    let mut entries = Vec::new();
    for i in 0..200u32 {
        let key = format!("key-{i}").into_bytes();
        let kg = statekit_core::key_group_for_key(&key, 16);
        entries.push(OwnedEntry {
            key_group: kg,
            state: 0,
            key: key.clone(),
            namespace: vec![],
            user_key: None,
            value: i64::from(i).to_be_bytes().to_vec(),
            timestamp: None,
        });
        for j in 0..3 {
            entries.push(OwnedEntry {
                key_group: kg,
                state: 1,
                key: key.clone(),
                namespace: vec![],
                user_key: None,
                value: vec![j; 10],
                timestamp: Some(1_000 + i64::from(j)),
            });
            entries.push(OwnedEntry {
                key_group: kg,
                state: 2,
                key: key.clone(),
                namespace: 5i64.to_be_bytes().to_vec(),
                user_key: Some(format!("uk{j}").into_bytes()),
                value: vec![j],
                timestamp: None,
            });
        }
    }
    MemoryView::new(16, KeyGroupRange::all(16), states, entries)
}

#[test]
fn writer_rejects_bad_input() {
    use statekit_core::{OwnedEntry, StateDescriptor};
    let storage = MemoryStorage::new();
    let states = vec![StateDescriptor::value("v", TypeSchema::Bytes, TypeSchema::Bytes)];
    let e = |key: &[u8]| OwnedEntry {
        key_group: 0,
        state: 0,
        key: key.to_vec(),
        namespace: vec![],
        user_key: None,
        value: vec![],
        timestamp: None,
    };
    // Duplicate (state, key, namespace) for a value state.
    let view = MemoryView::new(1, KeyGroupRange::all(1), states.clone(), vec![e(b"a"), e(b"a")]);
    let err = write_keyed_file(&view, KeyGroupRange::all(1), &storage, "f", &WriteOptions::default()).expect_err("dup");
    assert!(err.to_string().contains("duplicate"), "{err}");
    assert!(!storage.exists("f").expect("exists"), "nothing committed on failure");
    // Wrong shape: a timestamp on a state without TTL.
    let mut bad = e(b"a");
    bad.timestamp = Some(1);
    let view = MemoryView::new(1, KeyGroupRange::all(1), states.clone(), vec![bad]);
    assert!(write_keyed_file(&view, KeyGroupRange::all(1), &storage, "f", &WriteOptions::default()).is_err());
    // Duplicate state names.
    let view = MemoryView::new(
        1,
        KeyGroupRange::all(1),
        vec![states[0].clone(), states[0].clone()],
        vec![],
    );
    assert!(write_keyed_file(&view, KeyGroupRange::all(1), &storage, "f", &WriteOptions::default()).is_err());
    // Operator data that does not fit the mode.
    let snap = OperatorStateSnapshot {
        states: vec![(
            OperatorStateDescriptor {
                name: "b".into(),
                mode: OperatorStateMode::Broadcast,
                value_schema: TypeSchema::Bytes,
                key_schema: Some(TypeSchema::Bytes),
            },
            OperatorStateData::List(vec![]),
        )],
    };
    assert!(write_operator_file(&snap, &storage, "o", &WriteOptions::default()).is_err());
    let mut ok = snap.clone();
    ok.states[0].1 = OperatorStateData::Broadcast(BTreeMap::new());
    write_operator_file(&ok, &storage, "o", &WriteOptions::default()).expect("empty broadcast");
    assert_eq!(read_operator_file(&storage, "o", None).expect("read"), ok);
}

#[test]
fn empty_view_and_empty_range() {
    let storage = MemoryStorage::new();
    let view = sample_view();
    // A range that misses the view entirely gives an empty, valid file.
    let info = write_keyed_file(&view, KeyGroupRange::EMPTY, &storage, "e", &WriteOptions::default()).expect("write");
    assert_eq!(info.entries, 0);
    assert!(info.key_groups.is_empty());
    let r = KeyedFileReader::open(&storage, "e", Some(info.file.size)).expect("open");
    assert_eq!(r.key_group_range(), KeyGroupRange::EMPTY);
    assert_eq!(r.verify().expect("verify").entries, 0);
    let mut n = 0;
    let _ = r
        .visit_range(KeyGroupRange::all(16), &mut |_| {
            n += 1;
            Ok(ControlFlow::Continue(()))
        })
        .expect("visit");
    assert_eq!(n, 0);
}

#[test]
fn visitor_errors_pass_through_unchanged() {
    let storage = MemoryStorage::new();
    let view = sample_view();
    write_keyed_file(&view, KeyGroupRange::all(16), &storage, "k", &WriteOptions::default()).expect("write");
    let r = KeyedFileReader::open(&storage, "k", None).expect("open");
    let kg = r.key_groups()[0].key_group;
    let e = r
        .visit_key_group(kg, &mut |_| Err(statekit_core::StateError::UnknownState("stop".into())))
        .expect_err("stop");
    assert!(
        matches!(e, statekit_core::StateError::UnknownState(ref s) if s == "stop"),
        "{e:?}"
    );
}

#[test]
fn reader_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<KeyedFileReader>();
}

/// A view that fails in the middle of a key group, after many blocks are in flight.
struct FailingView(MemoryView, u32);

impl KeyedStateView for FailingView {
    fn max_parallelism(&self) -> u32 {
        self.0.max_parallelism()
    }
    fn key_group_range(&self) -> KeyGroupRange {
        self.0.key_group_range()
    }
    fn states(&self) -> &[statekit_core::StateDescriptor] {
        self.0.states()
    }
    fn visit_key_group(
        &self,
        kg: u32,
        visitor: &mut statekit_core::EntryVisitor<'_>,
    ) -> Result<std::ops::ControlFlow<()>, statekit_core::StateError> {
        let flow = self.0.visit_key_group(kg, visitor)?;
        if kg == self.1 {
            return Err(statekit_core::StateError::Snapshot("source failed".into()));
        }
        Ok(flow)
    }
}

/// Storage whose writers fail once `limit` bytes were written.
#[derive(Debug)]
struct FullDisk(MemoryStorage, usize);

struct FullWriter(usize);

impl std::io::Write for FullWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if buf.len() > self.0 {
            return Err(std::io::Error::other("disk full"));
        }
        self.0 -= buf.len();
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl statekit_core::storage::StorageWriter for FullWriter {
    fn commit(self: Box<Self>) -> Result<u64, statekit_core::storage::StorageError> {
        panic!("a failed write must not be committed")
    }
}

impl Storage for FullDisk {
    fn describe(&self, path: &str) -> String {
        format!("full:/{path}")
    }
    fn create(
        &self,
        _: &str,
    ) -> Result<Box<dyn statekit_core::storage::StorageWriter>, statekit_core::storage::StorageError> {
        Ok(Box::new(FullWriter(self.1)))
    }
    fn open(
        &self,
        p: &str,
    ) -> Result<std::sync::Arc<dyn statekit_core::storage::Blob>, statekit_core::storage::StorageError> {
        self.0.open(p)
    }
    fn exists(&self, p: &str) -> Result<bool, statekit_core::storage::StorageError> {
        self.0.exists(p)
    }
    fn list(&self, p: &str) -> Result<Vec<statekit_core::storage::DirEntry>, statekit_core::storage::StorageError> {
        self.0.list(p)
    }
    fn delete_file(&self, p: &str) -> Result<(), statekit_core::storage::StorageError> {
        self.0.delete_file(p)
    }
    fn delete_dir_all(&self, p: &str) -> Result<(), statekit_core::storage::StorageError> {
        self.0.delete_dir_all(p)
    }
    fn create_dir_all(&self, p: &str) -> Result<(), statekit_core::storage::StorageError> {
        self.0.create_dir_all(p)
    }
}

#[test]
fn failures_mid_write_are_reported_and_commit_nothing() {
    let view = sample_view();
    for compression in [Compression::None, Compression::Lz4, Compression::Zstd { level: 1 }] {
        let opts = WriteOptions {
            compression,
            block_size: 64,
        };
        // The source fails.
        let storage = MemoryStorage::new();
        let failing = FailingView(view.clone(), 9);
        let e = write_keyed_file(&failing, KeyGroupRange::all(16), &storage, "f", &opts).expect_err("source");
        assert!(e.to_string().contains("source failed"), "{e}");
        assert!(!storage.exists("f").expect("exists"));
        // The disk fails.
        for limit in [0usize, 100, 5000] {
            let disk = FullDisk(MemoryStorage::new(), limit);
            let e = write_keyed_file(&view, KeyGroupRange::all(16), &disk, "f", &opts).expect_err("disk");
            assert!(e.to_string().contains("disk full"), "{e}");
        }
    }
}
