//! Handing operator state to every new subtask reads each stored file once (issue 10,
//! point 10: `dump` and the inspector opened every subtask's file once per subtask, p² opens).

use statekit_checkpoint::{SnapshotReader, SnapshotWriter};
use statekit_core::storage::{Blob, DirEntry, MemoryStorage, Storage, StorageError, StorageWriter};
use statekit_core::{OperatorStateData, OperatorStateDescriptor, OperatorStateMode, OperatorStateSnapshot, TypeSchema};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Memory storage counting `open` calls.
#[derive(Debug, Default)]
struct CountingStorage {
    inner: MemoryStorage,
    opens: AtomicUsize,
}

impl Storage for CountingStorage {
    fn describe(&self, path: &str) -> String {
        self.inner.describe(path)
    }
    fn create(&self, path: &str) -> Result<Box<dyn StorageWriter>, StorageError> {
        self.inner.create(path)
    }
    fn open(&self, path: &str) -> Result<Arc<dyn Blob>, StorageError> {
        self.opens.fetch_add(1, Ordering::Relaxed);
        self.inner.open(path)
    }
    fn exists(&self, path: &str) -> Result<bool, StorageError> {
        self.inner.exists(path)
    }
    fn list(&self, dir: &str) -> Result<Vec<DirEntry>, StorageError> {
        self.inner.list(dir)
    }
    fn delete_file(&self, path: &str) -> Result<(), StorageError> {
        self.inner.delete_file(path)
    }
    fn delete_dir_all(&self, dir: &str) -> Result<(), StorageError> {
        self.inner.delete_dir_all(dir)
    }
    fn create_dir_all(&self, dir: &str) -> Result<(), StorageError> {
        self.inner.create_dir_all(dir)
    }
}

#[test]
fn every_stored_file_is_read_once_for_all_new_subtasks() {
    let p = 16u32;
    let storage = Arc::new(CountingStorage::default());
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
    storage.opens.store(0, Ordering::Relaxed);
    let all = reader.operator_states("source", p).expect("operator states");
    assert_eq!(all.len(), p as usize);
    assert_eq!(
        storage.opens.load(Ordering::Relaxed),
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
