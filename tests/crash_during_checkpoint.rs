//! A child process writing checkpoints is killed with SIGKILL at random moments; afterwards
//! the newest complete checkpoint must read back exactly and verify clean, and the
//! half-written one must not be reported as complete.

use statekit_checkpoint::CheckpointStore;
use statekit_core::storage::{LocalStorage, Storage};
use statekit_core::KeyedStateBackend;
use statekit_tests::{backends, kill_when, test_child, value_state};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

const CHILD_ENV: &str = "STATEKIT_CRASH_CHILD_DIR";
const JOB: &str = "0123456789abcdef0123456789abcdef";
const KEYS: u32 = 60_000;
const MAX_P: u32 = 128;
const P: u32 = 2;

fn value_for(checkpoint: u64, key: u32) -> Vec<u8> {
    let mut v = format!("cp{checkpoint}-key{key}-").into_bytes();
    v.resize(200, b'x');
    v
}

/// The child: writes checkpoints 1, 2, 3, … forever, each holding `value_for(id, key)`.
fn child(dir: &str) {
    let storage: Arc<dyn Storage> = Arc::new(LocalStorage::new(dir));
    let store = CheckpointStore::open(storage, JOB, 2).expect("store");
    let start = store.latest_completed().expect("latest").map_or(1, |c| c.id + 1);
    let mut bs = backends(MAX_P, P);
    let handles: Vec<_> = bs.iter_mut().map(|b| value_state(b, "v")).collect();
    for id in start.. {
        for key in 0..KEYS {
            let k = key.to_be_bytes();
            let o = statekit_tests::owner(&k, MAX_P, P);
            bs[o].put(handles[o], &k, &[], &value_for(id, key)).expect("put");
        }
        let writer = store.begin(id).expect("begin");
        println!("begin {id}");
        writer.register_operator("counter", P, MAX_P).expect("register");
        for (i, b) in bs.iter_mut().enumerate() {
            let view = b.snapshot(id).expect("snapshot");
            writer
                .write_subtask("counter", i as u32, Some(view.as_ref()), None, false)
                .expect("write");
        }
        store.complete(writer).expect("complete");
        println!("completed {id}");
    }
}

#[test]
fn killed_writer_leaves_previous_checkpoint_intact() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        child(&dir);
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().to_str().expect("utf8 path").to_string();
    let mut saw_incomplete = 0;
    let rounds = 6;
    for round in 0..rounds {
        let mut child = test_child("killed_writer_leaves_previous_checkpoint_intact")
            .env(CHILD_ENV, &dir)
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn child");
        // Wait until the child completed at least one checkpoint in this round and started
        // the next one, then kill it a few milliseconds into writing that checkpoint (or, in
        // some rounds, at a random later moment).
        let mut completed = false;
        let delay = if round % 3 == 2 {
            rand::random::<u64>() % 300
        } else {
            rand::random::<u64>() % 8
        };
        let at = |line: &str| {
            completed |= line.starts_with("completed");
            completed && line.starts_with("begin")
        };
        kill_when(&mut child, at, Duration::from_millis(delay));

        let storage: Arc<dyn Storage> = Arc::new(LocalStorage::new(&dir));
        let store = CheckpointStore::open(storage, JOB, 2).expect("store");
        let listing = store.list().expect("list");
        let latest = store
            .latest_completed()
            .expect("latest")
            .expect("a completed checkpoint");
        for l in &listing {
            if !l.complete {
                saw_incomplete += 1;
                assert!(
                    l.id > latest.id,
                    "an incomplete checkpoint older than the latest complete one"
                );
            }
        }
        // The newest complete checkpoint is intact: every byte verifies and the content is
        // exactly what was written for that id.
        let reader = store.reader(latest.id).expect("reader");
        let report = reader.verify().expect("verify");
        assert!(report.problems.is_empty(), "problems: {:?}", report.problems);
        let mut restored = backends(MAX_P, 1).pop().expect("backend");
        reader.restore_keyed("counter", &mut restored).expect("restore");
        let h = restored.handle("v").expect("state");
        let mut buf = Vec::new();
        for key in 0..KEYS {
            assert!(restored.get(h, &key.to_be_bytes(), &[], &mut buf).expect("get"));
            assert_eq!(buf, value_for(latest.id, key), "checkpoint {} key {key}", latest.id);
        }
    }
    assert!(
        saw_incomplete > 0,
        "no kill landed in the middle of a checkpoint in {rounds} rounds; the test did not exercise the crash path"
    );
}
