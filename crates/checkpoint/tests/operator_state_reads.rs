//! Handing operator state to every new subtask reads each stored file once (issue 10,
//! point 10: `dump` and the inspector opened every subtask's file once per subtask, p² opens).

use statekit_checkpoint::{SnapshotReader, SnapshotWriter};
use statekit_core::storage::{Blob, HookedStorage, MemoryStorage, Storage, StorageError, StorageHooks};
use statekit_core::{OperatorStateData, OperatorStateDescriptor, OperatorStateMode, OperatorStateSnapshot, TypeSchema};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Counts `open` calls.
#[derive(Debug, Default)]
struct CountOpens(AtomicUsize);

impl StorageHooks for CountOpens {
    fn open(&self, inner: &dyn Storage, path: &str) -> Result<Arc<dyn Blob>, StorageError> {
        self.0.fetch_add(1, Ordering::Relaxed);
        inner.open(path)
    }
}

#[test]
fn every_stored_file_is_read_once_for_all_new_subtasks() {
    let p = 16u32;
    let storage = Arc::new(HookedStorage::new(
        Arc::new(MemoryStorage::new()),
        CountOpens::default(),
    ));
    let w = SnapshotWriter::new(
        storage.clone(),
        "sp",
        statekit_format::SnapshotKind::Savepoint,
        1,
        "job",
    )
    .expect("writer");
    w.register_operator("source", p, 128).expect("register");
    let desc = OperatorStateDescriptor {
        name: "offsets".into(),
        mode: OperatorStateMode::List,
        value_schema: TypeSchema::I64,
        key_schema: None,
    };
    for i in 0..p {
        let snap = OperatorStateSnapshot {
            states: vec![(
                desc.clone(),
                OperatorStateData::List(vec![i64::from(i).to_be_bytes().to_vec()]),
            )],
        };
        w.write_subtask("source", i, None, Some(&snap), false).expect("write");
    }
    w.finish().expect("finish");
    let reader = SnapshotReader::open_in(storage.clone(), "sp", None).expect("open");
    storage.hooks().0.store(0, Ordering::Relaxed);
    let all = reader.operator_states("source", p).expect("operator states");
    assert_eq!(all.len(), p as usize);
    assert_eq!(
        storage.hooks().0.load(Ordering::Relaxed),
        p as usize,
        "one open per stored file"
    );
    // The same state as asking subtask by subtask.
    for (i, snap) in all.iter().enumerate() {
        assert_eq!(
            snap,
            &reader.operator_state("source", p, i as u32).expect("operator state")
        );
    }
}
