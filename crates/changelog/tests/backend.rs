//! The changelog backend over the heap backend, through a real checkpoint store: checkpoints
//! restore exactly, before and after materializations, at other parallelisms.

use statekit_changelog::{ChangelogBackend, ChangelogStorage, MaterializationPolicy, Materializer, UploadConfig};
use statekit_checkpoint::{CheckpointStore, SnapshotReader};
use statekit_core::storage::{LocalStorage, Storage};
use statekit_core::{
    AggregateFn, BackendConfig, KeyedStateBackend, MemoryView, OwnedEntry, StateDescriptor, StateFunctions, TypeSchema,
};
use statekit_hashmap::HashMapBackend;
use std::sync::Arc;

const UID: &str = "op";
const MAX_P: u32 = 16;

struct Env {
    _dir: tempfile::TempDir,
    store: CheckpointStore,
    storage: ChangelogStorage,
    job: Arc<dyn Storage>,
}

fn env() -> Env {
    let dir = tempfile::tempdir().expect("tempdir");
    let storage: Arc<dyn Storage> = Arc::new(LocalStorage::new(dir.path()));
    let store = CheckpointStore::open(storage, "job", 2).expect("store");
    let job = store.job_storage().expect("job");
    let cfg = UploadConfig {
        persist_delay: std::time::Duration::from_millis(1),
        ..UploadConfig::default()
    };
    let storage = ChangelogStorage::for_job(job.clone(), cfg).expect("changelog storage");
    Env {
        _dir: dir,
        store,
        storage,
        job,
    }
}

fn agg() -> StateFunctions {
    let i = |b: &[u8]| i64::from_be_bytes(b.try_into().expect("8"));
    StateFunctions::Aggregate(AggregateFn {
        add: Arc::new(move |acc: Option<&[u8]>, x: &[u8]| {
            let a = acc.map_or(0, i);
            (a + i(x)).to_be_bytes().to_vec()
        }),
        merge: Arc::new(move |a: &[u8], b: &[u8]| (i(a) + i(b)).to_be_bytes().to_vec()),
    })
}

fn backend(e: &Env, p: u32, i: u32) -> ChangelogBackend<HashMapBackend> {
    let policy = MaterializationPolicy {
        interval: None,
        ..MaterializationPolicy::default()
    };
    ChangelogBackend::new(
        BackendConfig::for_subtask(MAX_P, p, i).expect("cfg"),
        &e.storage,
        Materializer::new(e.job.clone(), policy, u64::from(i)),
        HashMapBackend::new,
    )
    .expect("backend")
}

/// The states; namespaces are bytes (some entries are in namespace `w1`: verify decodes every
/// part by its schema).
fn register(b: &mut ChangelogBackend<HashMapBackend>) {
    b.register(
        StateDescriptor::value("v", TypeSchema::Bytes, TypeSchema::Bytes).with_namespace(TypeSchema::Bytes),
        StateFunctions::None,
    )
    .expect("v");
    b.register(
        StateDescriptor::aggregating("a", TypeSchema::Bytes, TypeSchema::I64).with_namespace(TypeSchema::Bytes),
        agg(),
    )
    .expect("a");
}

fn entries(bs: &mut [ChangelogBackend<HashMapBackend>]) -> Vec<OwnedEntry> {
    let mut out = Vec::new();
    for b in bs {
        let v = b.snapshot(0).expect("snapshot");
        out.extend_from_slice(
            MemoryView::collect(v.as_ref(), v.key_group_range())
                .expect("collect")
                .entries(),
        );
    }
    out
}

fn checkpoint(e: &Env, bs: &mut [ChangelogBackend<HashMapBackend>], id: u64) -> SnapshotReader {
    let w = e.store.begin(id).expect("begin");
    w.register_operator(UID, bs.len() as u32, MAX_P).expect("register");
    for (i, b) in bs.iter_mut().enumerate() {
        let cut = b.checkpoint(id).expect("cut");
        let h = cut.finish().expect("finish");
        w.add_changelog_subtask(UID, i as u32, h, b.descriptors(), None, false)
            .expect("add");
    }
    e.store.complete(w).expect("complete");
    for b in bs.iter_mut() {
        b.notify_checkpoint_complete(id).expect("notify");
    }
    let r = e.store.reader(id).expect("reader");
    assert!(r.verify().expect("verify").is_ok());
    r
}

fn restore(e: &Env, r: &SnapshotReader, p: u32, share: bool) -> Vec<ChangelogBackend<HashMapBackend>> {
    (0..p)
        .map(|i| {
            let mut b = backend(e, p, i);
            let hs = r.changelog_handles(UID, b.key_group_range()).expect("handles");
            b.restore_changelog(&hs, share).expect("restore");
            register(&mut b);
            b
        })
        .collect()
}

fn key(k: u32) -> Vec<u8> {
    format!("k{k}").into_bytes()
}

fn owner(k: &[u8], p: u32) -> usize {
    let kg = statekit_core::key_group_for_key(k, MAX_P);
    statekit_core::keygroup::subtask_for_key_group(MAX_P, p, kg) as usize
}

#[test]
fn aggregating_adds_after_a_restore_survive_the_next_restore() {
    let e = env();
    let mut bs: Vec<_> = (0..2).map(|i| backend(&e, 2, i)).collect();
    for b in &mut bs {
        register(b);
    }
    for k in 0..20 {
        let kb = key(k);
        let b = &mut bs[owner(&kb, 2)];
        let a = b.handle("a").expect("a");
        b.put(a, &kb, b"", &5i64.to_be_bytes()).expect("put");
    }
    let r = checkpoint(&e, &mut bs, 1);
    let before = entries(&mut bs);
    for b in &mut bs {
        b.dispose();
    }
    let mut bs = restore(&e, &r, 3, true);
    assert_eq!(entries(&mut bs), before);
    for k in 0..20 {
        let kb = key(k);
        let b = &mut bs[owner(&kb, 3)];
        let a = b.handle("a").expect("a");
        b.add(a, &kb, b"", &1i64.to_be_bytes()).expect("add");
    }
    let after = entries(&mut bs);
    let r = checkpoint(&e, &mut bs, 2);
    for b in &mut bs {
        b.dispose();
    }
    let mut bs = restore(&e, &r, 1, true);
    assert_eq!(entries(&mut bs), after);
}

#[test]
fn inherited_tails_are_replayed_only_over_their_own_key_groups() {
    let e = env();
    let mut bs = vec![backend(&e, 1, 0)];
    register(&mut bs[0]);
    for k in 0..20 {
        let kb = key(k);
        let a = bs[0].handle("a").expect("a");
        bs[0].put(a, &kb, b"w1", &5i64.to_be_bytes()).expect("put");
    }
    let r = checkpoint(&e, &mut bs, 1);
    bs[0].dispose();
    let mut bs = restore(&e, &r, 7, true);
    for k in 0..20 {
        let kb = key(k);
        let b = &mut bs[owner(&kb, 7)];
        let a = b.handle("a").expect("a");
        b.add(a, &kb, b"w1", &1i64.to_be_bytes()).expect("add");
    }
    let want = entries(&mut bs);
    for (id, (p, share)) in (2..).zip([(1, true), (1, false), (3, true), (2, false)]) {
        let r = checkpoint(&e, &mut bs, id);
        for b in &mut bs {
            b.dispose();
        }
        bs = restore(&e, &r, p, share);
        assert_eq!(entries(&mut bs), want, "restored into {p} (share {share})");
    }
}
