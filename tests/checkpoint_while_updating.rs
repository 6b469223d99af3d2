//! Processing continues while a checkpoint is written: the writer thread streams the frozen
//! snapshot into files while the task thread keeps updating every key; the files must hold
//! exactly the state at the snapshot call.

use statekit_checkpoint::CheckpointStore;
use statekit_core::storage::{LocalStorage, Storage};
use statekit_core::{KeyedStateBackend, KeyedStateView, MemoryView};
use statekit_tests::{backends, value_state};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const KEYS: u32 = 200_000;

fn value(round: u32, key: u32) -> Vec<u8> {
    let mut v = format!("r{round}k{key}").into_bytes();
    v.resize(64, b'.');
    v
}

#[test]
fn snapshot_holds_exactly_the_state_at_the_snapshot_call() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let storage: Arc<dyn Storage> = Arc::new(LocalStorage::new(tmp.path()));
    let store = CheckpointStore::open(storage, "job", 3).expect("store");
    let mut b = backends(128, 1).pop().expect("backend");
    let h = value_state(&mut b, "v");
    let l = b
        .register(
            statekit_core::StateDescriptor::list(
                "events",
                statekit_core::TypeSchema::Bytes,
                statekit_core::TypeSchema::Bytes,
            ),
            statekit_core::StateFunctions::None,
        )
        .expect("register list");
    for key in 0..KEYS {
        b.put(h, &key.to_be_bytes(), &[], &value(0, key)).expect("put");
        b.add(l, &key.to_be_bytes(), &[], b"e0").expect("add");
    }

    let view: Arc<dyn KeyedStateView> = b.snapshot(1).expect("snapshot");
    let writer = store.begin(1).expect("begin");
    writer.register_operator("op", 1, 128).expect("register");
    let done = Arc::new(AtomicBool::new(false));
    let writing = {
        let done = done.clone();
        let view = view.clone();
        std::thread::spawn(move || {
            writer
                .write_subtask("op", 0, Some(view.as_ref()), None, false)
                .expect("write");
            done.store(true, Ordering::SeqCst);
            writer
        })
    };
    // Keep processing while the checkpoint is written.
    let mut updates_during_write = 0u64;
    let mut round = 1;
    while !done.load(Ordering::SeqCst) {
        for key in (0..KEYS).step_by(97) {
            b.put(h, &key.to_be_bytes(), &[], &value(round, key)).expect("put");
            b.add(l, &key.to_be_bytes(), &[], b"later").expect("add");
            b.clear(h, &(key + 1).min(KEYS - 1).to_be_bytes(), &[]).expect("clear");
            updates_during_write += 3;
        }
        round += 1;
    }
    let writer = writing.join().expect("writer thread");
    store.complete(writer).expect("complete");
    assert!(updates_during_write > 0, "the task thread was blocked during the write");

    // The checkpoint holds round 0 exactly.
    let reader = store.reader(1).expect("reader");
    let files = reader
        .keyed_readers("op", statekit_core::KeyGroupRange::all(128))
        .expect("readers");
    assert_eq!(files.len(), 1);
    let got = MemoryView::collect(&files[0], files[0].key_group_range()).expect("collect");
    let mut values = 0;
    let mut elements = 0;
    for e in got.entries() {
        let key = u32::from_be_bytes(e.key.as_slice().try_into().expect("4-byte key"));
        match got.states()[e.state as usize].name.as_str() {
            "v" => {
                assert_eq!(e.value, value(0, key));
                values += 1;
            }
            "events" => {
                assert_eq!(e.value, b"e0");
                elements += 1;
            }
            other => panic!("unexpected state {other}"),
        }
    }
    assert_eq!((values, elements), (KEYS, KEYS));
    // And the live backend has moved on.
    let mut buf = Vec::new();
    assert!(b.get(h, &0u32.to_be_bytes(), &[], &mut buf).expect("get"));
    assert_ne!(buf, value(0, 0));
}
