//! A child process taking incremental (native RocksDB) checkpoints is killed with SIGKILL in
//! the middle of one; each restart restores the newest complete checkpoint (CLAIM, NO_CLAIM
//! or LEGACY, in turn) and goes on. After every kill the newest complete checkpoint must
//! verify and restore exactly; garbage collection then lists what the killed checkpoint left
//! (its directory, its new shared files), deletes it, and the checkpoint still restores.

use statekit_checkpoint::{apply_gc, plan_gc, CheckpointStore, OrphanReason, RestoreMode};
use statekit_core::storage::{LocalStorage, Storage};
use statekit_core::{BackendConfig, KeyedStateBackend, StateDescriptor, StateFunctions, TypeSchema};
use statekit_rocksdb::RocksDbBackend;
use statekit_tests::{kill_when, test_child};
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

const CHILD_ENV: &str = "STATEKIT_INCREMENTAL_CRASH_CHILD_DIR";
const MODE_ENV: &str = "STATEKIT_INCREMENTAL_CRASH_MODE";
const KEYS: u32 = 40_000;
const MAX_P: u32 = 128;
const P: u32 = 2;
const UID: &str = "counter";

/// 200 bytes that do not compress (so uploads take long enough for kills to land in them),
/// determined by (checkpoint, key).
fn value_for(checkpoint: u64, key: u32) -> Vec<u8> {
    let mut v = format!("cp{checkpoint}-key{key}-").into_bytes();
    let mut x = checkpoint.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(key) ^ 0xD1B5_4A32_D192_ED03;
    while v.len() < 200 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.push(x as u8);
    }
    v
}

/// Checkpoint 1 writes every key; checkpoint `id > 1` rewrites the keys with
/// `key % 10 == id % 10` (10% churn). The value of `key` in checkpoint `c`:
fn expected(c: u64, key: u32) -> Vec<u8> {
    let last = (2..=c).rev().find(|id| id % 10 == u64::from(key % 10)).unwrap_or(1);
    value_for(last, key)
}

fn descriptor() -> StateDescriptor {
    StateDescriptor::value("v", TypeSchema::Bytes, TypeSchema::Bytes)
}

fn backend(p: u32, i: u32) -> RocksDbBackend {
    RocksDbBackend::new(
        BackendConfig::for_subtask(MAX_P, p, i).expect("config"),
        statekit_tests::test_rocksdb_options(),
    )
    .expect("backend")
}

/// The newest complete checkpoint of any job under `dir`: (job, id).
fn latest(dir: &str) -> Option<(String, u64)> {
    let storage: Arc<dyn Storage> = Arc::new(LocalStorage::new(dir));
    let mut best: Option<(String, u64)> = None;
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let job = e.file_name().to_string_lossy().to_string();
        let store = CheckpointStore::open(storage.clone(), &job, 2).expect("store");
        if let Some(c) = store.latest_completed().expect("latest") {
            if best.as_ref().is_none_or(|b| b.1 < c.id) {
                best = Some((job, c.id));
            }
        }
    }
    best
}

/// The child: restores the newest checkpoint (if any) in the mode from the environment, then
/// takes checkpoints forever under a new job id.
fn child(dir: &str, mode: RestoreMode) {
    let storage: Arc<dyn Storage> = Arc::new(LocalStorage::new(dir));
    let job = statekit_checkpoint::new_job_id();
    let store = CheckpointStore::open(storage.clone(), &job, 2).expect("store");
    let mut bs: Vec<RocksDbBackend> = (0..P).map(|i| backend(P, i)).collect();
    let mut start = 1;
    if let Some((old_job, id)) = latest(dir) {
        let old = CheckpointStore::open(storage, &old_job, 2).expect("old store");
        let reader = old.reader(id).expect("reader");
        store.restored(&reader, mode).expect("restored");
        for b in &mut bs {
            let hs = reader.native_handles(UID, b.key_group_range()).expect("handles");
            b.restore_native(&hs, mode.may_reference_restored_files())
                .expect("restore");
        }
        start = id + 1;
    }
    let handles: Vec<_> = bs
        .iter_mut()
        .map(|b| b.register(descriptor(), StateFunctions::None).expect("register"))
        .collect();
    for id in start.. {
        for key in 0..KEYS {
            if id > 1 && u64::from(key % 10) != id % 10 {
                continue;
            }
            let k = key.to_be_bytes();
            let o = statekit_tests::owner(&k, MAX_P, P);
            bs[o].put(handles[o], &k, &[], &value_for(id, key)).expect("put");
        }
        let writer = store.begin(id).expect("begin");
        println!("begin {id}");
        writer.register_operator(UID, P, MAX_P).expect("register");
        for (i, b) in bs.iter_mut().enumerate() {
            let cut = b.native_snapshot(id).expect("cut");
            if i == 0 {
                println!("uploading {id}");
            }
            let handle = cut
                .upload(&writer.native_target(UID, i as u32).expect("target"))
                .expect("upload");
            writer
                .add_native_subtask(UID, i as u32, handle, b.descriptors(), None, false)
                .expect("add");
        }
        store.complete(writer).expect("complete");
        for b in &mut bs {
            b.notify_checkpoint_complete(id).expect("notify");
        }
        println!("completed {id}");
    }
}

fn check_latest_restores_exactly(dir: &str) -> u64 {
    let (job, id) = latest(dir).expect("a complete checkpoint");
    let storage: Arc<dyn Storage> = Arc::new(LocalStorage::new(dir));
    let store = CheckpointStore::open(storage, &job, 2).expect("store");
    let reader = store.reader(id).expect("reader");
    let report = reader.verify().expect("verify");
    assert!(report.is_ok(), "checkpoint {id}: {:?}", report.problems);
    let mut restored = backend(1, 0);
    let hs = reader.native_handles(UID, restored.key_group_range()).expect("handles");
    restored.restore_native(&hs, false).expect("restore");
    let h = restored.register(descriptor(), StateFunctions::None).expect("register");
    let mut buf = Vec::new();
    for key in 0..KEYS {
        assert!(
            restored.get(h, &key.to_be_bytes(), &[], &mut buf).expect("get"),
            "key {key} missing"
        );
        assert_eq!(buf, expected(id, key), "checkpoint {id} key {key}");
    }
    id
}

#[test]
fn killed_incremental_checkpoint_leaves_the_previous_one_intact_and_gc_finds_its_files() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        let mode = std::env::var(MODE_ENV).expect("mode").parse().expect("mode");
        child(&dir, mode);
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().to_str().expect("utf8 path").to_string();
    let rounds = 8;
    let mut orphans_seen = 0;
    let mut incomplete_seen = 0;
    for round in 0..rounds {
        let mode = [RestoreMode::Claim, RestoreMode::NoClaim, RestoreMode::Legacy][round % 3];
        let mut child =
            test_child("killed_incremental_checkpoint_leaves_the_previous_one_intact_and_gc_finds_its_files")
                .env(CHILD_ENV, &dir)
                .env(MODE_ENV, mode.as_str())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn child");
        // Wait for a completed checkpoint and the start of the next, then kill a few ms into
        // it (its flush, RocksDB checkpoint or upload).
        let mut completed = 0;
        let at = |line: &str| {
            completed += usize::from(line.starts_with("completed"));
            completed >= 2 && line.starts_with("uploading")
        };
        kill_when(&mut child, at, Duration::from_micros(rand::random::<u64>() % 4_000));

        let id = check_latest_restores_exactly(&dir);
        // What the killed checkpoint left is garbage; nothing referenced is.
        let plan = plan_gc(Path::new(&dir), Duration::ZERO).expect("gc plan");
        orphans_seen += plan.orphans.len();
        incomplete_seen += plan
            .orphans
            .iter()
            .filter(|o| o.reason == OrphanReason::IncompleteCheckpoint)
            .count();
        apply_gc(&plan).expect("gc");
        assert_eq!(
            check_latest_restores_exactly(&dir),
            id,
            "gc changed the latest checkpoint"
        );
        let again = plan_gc(Path::new(&dir), Duration::ZERO).expect("gc plan");
        assert!(again.orphans.is_empty(), "gc left orphans: {:?}", again.orphans);
    }
    eprintln!("{rounds} SIGKILLs mid-checkpoint: {orphans_seen} orphaned files found and collected ({incomplete_seen} in incomplete checkpoint directories)");
    assert!(
        orphans_seen > 0 && incomplete_seen > 0,
        "no kill landed inside an incremental checkpoint in {rounds} rounds ({orphans_seen} orphans)"
    );
}
