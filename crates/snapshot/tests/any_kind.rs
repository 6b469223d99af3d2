//! Library-level tests of the layer above the backends: every snapshot kind of the golden
//! fixtures opens as key-group views and restores through `open_keyed`, at the parallelism it
//! was written with and rescaled, to exactly the entries its views hold; the finder tells
//! complete, incomplete and broken snapshots apart.

use statekit_checkpoint::RestoreMode;
use statekit_core::{BackendConfig, KeyGroupRange, KeyedStateView, MemoryView, OwnedEntry};
use statekit_snapshot::Snapshot;
use statekit_snapshot::{
    find_snapshots, latest_checkpoint, open_keyed, stored_as, BackendChoice, RestoreFrom, StoredAs,
};
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/v1")
        .join(name)
}

fn changelog_checkpoint() -> PathBuf {
    fixture("changelog-checkpoint/c4a9e10f0c4a9e10f0c4a9e10f0c4a9e/chk-3")
}

/// The entries of `view` in `range` whose state has no TTL in `_metadata` (what a restore
/// keeps of TTL state depends on the clock; the fixtures' TTL data is long expired).
fn lasting(reader: &Snapshot, uid: &str, view: &dyn KeyedStateView, range: KeyGroupRange) -> Vec<OwnedEntry> {
    let meta = &reader.operator(uid).expect("operator").keyed_states;
    let names: Vec<String> = view.states().iter().map(|s| s.name.clone()).collect();
    MemoryView::collect(view, range)
        .expect("collect")
        .entries()
        .iter()
        .filter(|e| {
            names
                .get(e.state as usize)
                .and_then(|n| meta.iter().find(|m| &m.name == n))
                .is_some_and(|m| m.ttl.is_none())
        })
        .cloned()
        .collect()
}

/// Every entry (of states without TTL) the snapshot's views hold for operator `uid`.
fn view_entries(reader: &Snapshot, uid: &str) -> Vec<OwnedEntry> {
    let max_p = reader.operator(uid).expect("operator").max_parallelism;
    let all = KeyGroupRange::all(max_p);
    let mut out = Vec::new();
    for v in reader.keyed_views(uid, all).expect("views") {
        out.extend(lasting(reader, uid, v.as_ref(), all));
    }
    out
}

/// Every entry (of states without TTL) after restoring operator `uid` into `p` backends of
/// `choice`.
fn restored_entries(reader: &Snapshot, uid: &str, choice: &BackendChoice, p: u32) -> Vec<OwnedEntry> {
    let max_p = reader.operator(uid).expect("operator").max_parallelism;
    let mut out = Vec::new();
    for i in 0..p {
        let config = BackendConfig::for_subtask(max_p, p, i).expect("config");
        let from = RestoreFrom {
            snapshot: reader,
            uid,
            mode: RestoreMode::NoClaim,
        };
        let mut b = open_keyed(choice, config, None, Some(from)).expect("restore");
        let b = b.as_dyn();
        let range = b.key_group_range();
        let view = b.snapshot(1).expect("snapshot");
        out.extend(lasting(reader, uid, view.as_ref(), range));
    }
    out
}

#[cfg_attr(not(feature = "rocksdb"), allow(dead_code))]
fn state_names(reader: &Snapshot, uid: &str, entries: &[OwnedEntry]) -> Vec<(String, Vec<u8>)> {
    // Views of different subtasks may order their states differently: compare by name.
    let states = &reader.operator(uid).expect("operator").keyed_states;
    let mut v: Vec<(String, Vec<u8>)> = entries
        .iter()
        .map(|e| {
            let name = states.get(e.state as usize).map(|s| s.name.clone()).unwrap_or_default();
            (
                name,
                [
                    e.key.clone(),
                    e.namespace.clone(),
                    e.user_key.clone().unwrap_or_default(),
                    e.value.clone(),
                ]
                .concat(),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn canonical_and_changelog_snapshots_restore_into_the_heap_backend_at_any_parallelism() {
    for (path, uid, kind) in [
        (fixture("savepoint-basic"), "word-counter", StoredAs::Canonical),
        (changelog_checkpoint(), "word-counter", StoredAs::Changelog),
    ] {
        let reader = Snapshot::open(&path).expect("open");
        assert_eq!(
            stored_as(reader.statekit_files().expect("statekit"), uid).expect("stored"),
            kind
        );
        let views = view_entries(&reader, uid);
        assert!(!views.is_empty(), "{}", path.display());
        for p in [1, 2, 3, 8] {
            let restored = restored_entries(&reader, uid, &BackendChoice::HashMap, p);
            assert_eq!(restored.len(), views.len(), "{} at parallelism {p}", path.display());
            assert_eq!(
                restored
                    .iter()
                    .map(|e| (e.key_group, e.key.clone()))
                    .collect::<std::collections::BTreeSet<_>>(),
                views.iter().map(|e| (e.key_group, e.key.clone())).collect(),
                "{} at parallelism {p}",
                path.display()
            );
        }
    }
}

#[test]
fn native_snapshots_need_their_backend() {
    let reader = Snapshot::open(fixture("native-savepoint")).expect("open");
    assert_eq!(
        stored_as(reader.statekit_files().expect("statekit"), "word-counter").expect("stored"),
        StoredAs::Native
    );
    let config = BackendConfig::for_subtask(8, 1, 0).expect("config");
    let from = RestoreFrom {
        snapshot: &reader,
        uid: "word-counter",
        mode: RestoreMode::NoClaim,
    };
    let e = open_keyed(&BackendChoice::HashMap, config, None, Some(from)).expect_err("refused");
    assert!(e.to_string().contains("native rocksdb snapshot"), "{e}");
    #[cfg(feature = "rocksdb")]
    {
        let views = view_entries(&reader, "word-counter");
        let choice = BackendChoice::RocksDb(statekit_rocksdb::RocksDbOptions::default());
        for p in [1, 3] {
            let restored = restored_entries(&reader, "word-counter", &choice, p);
            assert_eq!(
                state_names(&reader, "word-counter", &restored),
                state_names(&reader, "word-counter", &views),
                "parallelism {p}"
            );
        }
    }
}

#[test]
fn the_finder_tells_complete_incomplete_and_broken_apart() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    std::fs::create_dir_all(d.join("job/chk-7")).expect("incomplete checkpoint");
    for (name, to) in [("savepoint-basic", "sp"), ("corrupt-metadata-crc", "broken")] {
        let to = d.join(to);
        std::fs::create_dir_all(&to).expect("mkdir");
        for e in std::fs::read_dir(fixture(name)).expect("read_dir").flatten() {
            if e.path().is_file() {
                std::fs::copy(e.path(), to.join(e.file_name())).expect("copy");
            }
        }
    }
    let found = find_snapshots(d, 4);
    let by_name = |n: &str| found.iter().find(|f| f.path.ends_with(n)).expect(n);
    assert!(by_name("sp").complete && by_name("sp").meta.is_some());
    assert!(!by_name("chk-7").complete && !by_name("chk-7").is_broken());
    assert!(!by_name("broken").complete && by_name("broken").is_broken());
    assert_eq!(found.len(), 3);

    let base = fixture("changelog-checkpoint");
    let (id, path) = latest_checkpoint(&base).expect("latest").expect("a checkpoint");
    assert_eq!(id, 3);
    assert!(path.ends_with("chk-3"), "{}", path.display());
    assert_eq!(latest_checkpoint(d).expect("latest"), None);
}

#[test]
fn views_of_a_snapshot_come_in_key_group_order() {
    let reader = Snapshot::open(changelog_checkpoint()).expect("open");
    let views = reader
        .keyed_views("word-counter", KeyGroupRange::all(8))
        .expect("views");
    let starts: Vec<u32> = views.iter().map(|v| v.key_group_range().start()).collect();
    let mut sorted = starts.clone();
    sorted.sort();
    assert_eq!(starts, sorted);
}
