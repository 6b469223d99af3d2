//! Discarding a subsumed checkpoint never leaves one that looks complete but misses files:
//! `_metadata` goes first. (Found by the word count's SIGKILL test: a kill in the middle of
//! `remove_dir_all` of a subsumed checkpoint left its `_metadata` with some data files gone.)
//!
//! A storage whose directory deletion fails half-way (it deletes one data file, then errors)
//! stands in for the kill; after the failed discard the old checkpoint must not be listed as
//! complete, and every checkpoint that is listed must verify.

use statekit_checkpoint::CheckpointStore;
use statekit_core::storage::{HookedStorage, LocalStorage, Storage, StorageError, StorageHooks};
use statekit_core::{BackendConfig, KeyedStateBackend, StateDescriptor, StateFunctions, TypeSchema};
use statekit_hashmap::HashMapBackend;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// When `break_dir_deletion` is set, `delete_dir_all` deletes one data file of the directory
/// (not `_metadata`) and then fails, as a crash would leave it.
#[derive(Debug)]
struct HalfDeleting {
    break_dir_deletion: AtomicBool,
}

impl StorageHooks for HalfDeleting {
    fn delete_dir_all(&self, inner: &dyn Storage, dir: &str) -> Result<(), StorageError> {
        if !self.break_dir_deletion.load(Ordering::SeqCst) {
            return inner.delete_dir_all(dir);
        }
        if let Some(e) = inner
            .list(dir)?
            .into_iter()
            .find(|e| !e.is_dir && e.name != "_metadata")
        {
            inner.delete_file(&format!("{dir}/{}", e.name))?;
        }
        Err(StorageError::Io {
            path: inner.describe(dir),
            source: std::io::Error::other("injected: killed in the middle of deleting the directory"),
        })
    }
}

#[test]
fn a_discard_cut_short_leaves_no_complete_looking_checkpoint() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let storage = Arc::new(HookedStorage::new(
        Arc::new(LocalStorage::new(tmp.path())),
        HalfDeleting {
            break_dir_deletion: AtomicBool::new(false),
        },
    ));
    let root: Arc<dyn Storage> = storage.clone();
    let store = CheckpointStore::open(root, "0123456789abcdef0123456789abcdef", 1).expect("store");
    let mut b = HashMapBackend::new(BackendConfig::for_subtask(128, 1, 0).expect("cfg")).expect("backend");
    let h = b
        .register(
            StateDescriptor::value("v", TypeSchema::Bytes, TypeSchema::Bytes),
            StateFunctions::None,
        )
        .expect("register");
    let checkpoint = |b: &mut HashMapBackend, id: u64| {
        for k in 0..200u32 {
            b.put(h, &k.to_be_bytes(), &[], &id.to_be_bytes()).expect("put");
        }
        let writer = store.begin(id).expect("begin");
        writer.register_operator("op", 1, 128).expect("register");
        let view = b.snapshot(id).expect("snapshot");
        writer
            .write_subtask("op", 0, Some(view.as_ref()), None, false)
            .expect("write");
        writer
    };
    let w = checkpoint(&mut b, 1);
    store.complete(w).expect("complete 1");

    // Checkpoint 2 subsumes 1; deleting 1's directory is cut short.
    let w = checkpoint(&mut b, 2);
    storage.hooks().break_dir_deletion.store(true, Ordering::SeqCst);
    let r = store.complete(w);
    storage.hooks().break_dir_deletion.store(false, Ordering::SeqCst);
    assert!(r.is_err(), "the injected failure surfaces");
    let complete: Vec<u64> = store.completed().expect("completed").iter().map(|c| c.id).collect();
    assert!(
        !complete.contains(&1),
        "checkpoint 1 lost data files but still looks complete: {complete:?}"
    );
    for id in complete {
        let reader = store.reader(id).expect("reader");
        let report = reader.verify().expect("verify");
        assert!(report.problems.is_empty(), "checkpoint {id}: {:?}", report.problems);
    }
    // Checkpoint 2 itself was committed before the discard and restores.
    let reader = store.reader(2).expect("checkpoint 2");
    let mut restored = HashMapBackend::new(BackendConfig::for_subtask(128, 1, 0).expect("cfg")).expect("backend");
    reader.restore_keyed("op", &mut restored).expect("restore");
    let h2 = restored.handle("v").expect("state");
    let mut out = Vec::new();
    assert!(restored.get(h2, &7u32.to_be_bytes(), &[], &mut out).expect("get"));
    assert_eq!(out, 2u64.to_be_bytes());
}
