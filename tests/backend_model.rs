//! Model-based test over a backend factory: random operation sequences over all five keyed
//! state kinds (with and without TTL, on a `ManualClock`), several namespaces and many key
//! groups run against a cluster of subtasks and against a plain `BTreeMap` model; at random
//! points the cluster is snapshotted, rescaled to a random new parallelism
//! (1..=min(max parallelism, 8)) and restored from all old snapshots, and its whole content
//! is compared with the model.
//!
//! The cluster's subtasks are built by a factory per backend kind: all heap (`heap_*`), all
//! RocksDB (`rocksdb_*`; there, two rescales in three go through native checkpoint files), or
//! a random kind per subtask at every rescale (`mixed_*`), so snapshots of one backend are
//! restored into the other at a random parallelism, and one job may even run both kinds side
//! by side.
//!
//! RocksDB is slower than the heap: `BACKEND_MODEL_CASES` (default 12) sets the number of
//! proptest cases of the RocksDB and mixed tests, `MODEL_CASES` (default 256) those of the
//! heap test.

use proptest::prelude::*;
use statekit_changelog::{restore_into, ChangelogStorage, MaterializationPolicy, ReplayClock, UploadConfig};
use statekit_checkpoint::{CheckpointStore, SnapshotReader};
use statekit_core::keygroup::subtask_for_key_group;
use statekit_core::state::KeyedStateKind;
use statekit_core::storage::{LocalStorage, MemoryStorage, Storage};
use statekit_core::{
    key_group_for_key, AggregateFn, BackendConfig, Clock, KeyedStateView, ManualClock, MemoryView, OwnedEntry,
    StateDescriptor, StateError, StateFunctions, StateHandle, TtlConfig, TtlUpdateType, TypeSchema,
};
use statekit_core::{KeyGroupRange, KeyedStateBackend};
use statekit_rocksdb::NativeSnapshotView;
use statekit_tests::{AnyBackend, BackendKind, ChangelogEnv};
use std::collections::BTreeMap;
use std::sync::Arc;

const KEYS: usize = 24;
const NAMESPACES: [&[u8]; 3] = [b"", b"w1", b"w2"];
const USER_KEYS: [&[u8]; 5] = [b"a", b"b", b"bb", b"c", b""];
const TTL_MS: u64 = 50;
const MAX_PARALLELISMS: [u32; 4] = [1, 7, 128, 300];

/// Keys of a few bytes, and some too long to be stored inline.
fn key(k: usize) -> Vec<u8> {
    if k % 4 == 3 {
        format!("a-key-long-enough-to-live-on-the-heap-{k}").into_bytes()
    } else {
        format!("key-{k}").into_bytes()
    }
}

// ---------------------------------------------------------------------------------------
// States and functions

fn ttl(update_type: TtlUpdateType) -> Option<TtlConfig> {
    Some(TtlConfig {
        ttl_ms: TTL_MS,
        update_type,
    })
}

/// The states of every case: each kind without TTL, then each kind with TTL.
fn specs() -> Vec<(StateDescriptor, StateFunctions)> {
    use TtlUpdateType::*;
    let kinds: [(KeyedStateKind, Option<TtlConfig>); 10] = [
        (KeyedStateKind::Value, None),
        (KeyedStateKind::List, None),
        (KeyedStateKind::Map, None),
        (KeyedStateKind::Reducing, None),
        (KeyedStateKind::Aggregating, None),
        (KeyedStateKind::Value, ttl(OnCreateAndWrite)),
        (KeyedStateKind::List, ttl(OnReadAndWrite)),
        (KeyedStateKind::Map, ttl(OnReadAndWrite)),
        (KeyedStateKind::Reducing, ttl(OnCreateAndWrite)),
        (KeyedStateKind::Aggregating, ttl(OnReadAndWrite)),
    ];
    kinds
        .iter()
        .enumerate()
        .map(|(i, &(kind, ttl))| {
            let name = format!("{kind}-{i}");
            let (desc, f) = match kind {
                KeyedStateKind::Value => (
                    StateDescriptor::value(&name, TypeSchema::Utf8, TypeSchema::Bytes),
                    StateFunctions::None,
                ),
                KeyedStateKind::List => (
                    StateDescriptor::list(&name, TypeSchema::Utf8, TypeSchema::Bytes),
                    StateFunctions::None,
                ),
                KeyedStateKind::Map => (
                    StateDescriptor::map(&name, TypeSchema::Utf8, TypeSchema::Bytes, TypeSchema::Bytes),
                    StateFunctions::None,
                ),
                KeyedStateKind::Reducing => (
                    StateDescriptor::reducing(&name, TypeSchema::Utf8, TypeSchema::I64),
                    StateFunctions::Reduce(Arc::new(|a: &[u8], b: &[u8]| reduce(a, b))),
                ),
                KeyedStateKind::Aggregating => (
                    StateDescriptor::aggregating(
                        &name,
                        TypeSchema::Utf8,
                        TypeSchema::Tuple(vec![TypeSchema::I64, TypeSchema::I64]),
                    ),
                    StateFunctions::Aggregate(AggregateFn {
                        add: Arc::new(|acc: Option<&[u8]>, x: &[u8]| agg_add(acc, x)),
                        merge: Arc::new(|a: &[u8], b: &[u8]| agg_merge(a, b)),
                    }),
                ),
            };
            let mut desc = desc.with_namespace(TypeSchema::Bytes);
            desc.ttl = ttl;
            (desc, f)
        })
        .collect()
}

fn i64_of(b: &[u8]) -> i64 {
    i64::from_be_bytes(b.try_into().expect("8 bytes"))
}

/// Reduce: wrapping i64 sum.
fn reduce(a: &[u8], b: &[u8]) -> Vec<u8> {
    i64_of(a).wrapping_add(i64_of(b)).to_be_bytes().to_vec()
}

/// Aggregate: (count, sum) accumulator of i64 inputs.
fn agg_add(acc: Option<&[u8]>, x: &[u8]) -> Vec<u8> {
    let (c, s) = acc.map_or((0, 0), |a| (i64_of(&a[..8]), i64_of(&a[8..])));
    [c.wrapping_add(1).to_be_bytes(), s.wrapping_add(i64_of(x)).to_be_bytes()].concat()
}

fn agg_merge(a: &[u8], b: &[u8]) -> Vec<u8> {
    [
        i64_of(&a[..8]).wrapping_add(i64_of(&b[..8])).to_be_bytes(),
        i64_of(&a[8..]).wrapping_add(i64_of(&b[8..])).to_be_bytes(),
    ]
    .concat()
}

/// The bytes an op writes for value `v` into a state of `kind`.
fn value_bytes(kind: KeyedStateKind, v: u8, is_add: bool) -> Vec<u8> {
    match kind {
        KeyedStateKind::Reducing => (i64::from(v) - 100).to_be_bytes().to_vec(),
        KeyedStateKind::Aggregating if is_add => (i64::from(v) - 100).to_be_bytes().to_vec(),
        KeyedStateKind::Aggregating => [i64::from(v % 5).to_be_bytes(), i64::from(v).to_be_bytes()].concat(),
        // Empty, short, at the inline limit (15) and beyond it.
        _ => vec![v; [0, 1, 3, 8, 15, 16, 40][usize::from(v % 7)]],
    }
}

// ---------------------------------------------------------------------------------------
// The model

type Cell = (i64, Vec<u8>);

#[derive(Clone, Debug, PartialEq)]
enum MVal {
    Single(Cell),
    List(Vec<Cell>),
    Map(BTreeMap<Vec<u8>, Cell>),
}

/// One state: (key, namespace) → content.
type StateModel = BTreeMap<(Vec<u8>, Vec<u8>), MVal>;

struct Model {
    descs: Vec<StateDescriptor>,
    states: Vec<StateModel>,
    now: i64,
}

impl Model {
    fn new(descs: Vec<StateDescriptor>) -> Self {
        Model {
            states: vec![BTreeMap::new(); descs.len()],
            descs,
            now: 0,
        }
    }

    fn refresh(&self, s: usize) -> bool {
        matches!(self.descs[s].ttl, Some(t) if t.update_type == TtlUpdateType::OnReadAndWrite)
    }

    /// Drops everything expired at `now` (the backend does it lazily; observably the same,
    /// since time only moves forward).
    fn purge(&mut self) {
        for s in 0..self.states.len() {
            if self.descs[s].ttl.is_none() {
                continue;
            }
            let (cfg, now) = (self.descs[s].ttl.expect("ttl"), self.now);
            let live = |ts: i64| !cfg.is_expired(ts, now);
            self.states[s].retain(|_, v| match v {
                MVal::Single((ts, _)) => live(*ts),
                MVal::List(l) => {
                    l.retain(|(ts, _)| live(*ts));
                    !l.is_empty()
                }
                MVal::Map(m) => {
                    m.retain(|_, (ts, _)| live(*ts));
                    !m.is_empty()
                }
            });
        }
    }

    fn kind(&self, s: usize) -> KeyedStateKind {
        self.descs[s].kind
    }

    fn get(&mut self, s: usize, k: &[u8], n: &[u8]) -> Option<Vec<u8>> {
        let (refresh, now) = (self.refresh(s), self.now);
        match self.states[s].get_mut(&(k.to_vec(), n.to_vec())) {
            Some(MVal::Single((ts, v))) => {
                if refresh {
                    *ts = now;
                }
                Some(v.clone())
            }
            _ => None,
        }
    }

    fn put(&mut self, s: usize, k: &[u8], n: &[u8], v: Vec<u8>) {
        let now = self.now;
        self.states[s].insert((k.to_vec(), n.to_vec()), MVal::Single((now, v)));
    }

    fn add(&mut self, s: usize, k: &[u8], n: &[u8], v: Vec<u8>) {
        let now = self.now;
        let kind = self.kind(s);
        let key = (k.to_vec(), n.to_vec());
        let new = match (kind, self.states[s].remove(&key)) {
            (KeyedStateKind::List, None) => MVal::List(vec![(now, v)]),
            (KeyedStateKind::List, Some(MVal::List(mut l))) => {
                l.push((now, v));
                MVal::List(l)
            }
            (KeyedStateKind::Reducing, None) => MVal::Single((now, v)),
            (KeyedStateKind::Reducing, Some(MVal::Single((_, old)))) => MVal::Single((now, reduce(&old, &v))),
            (KeyedStateKind::Aggregating, None) => MVal::Single((now, agg_add(None, &v))),
            (KeyedStateKind::Aggregating, Some(MVal::Single((_, old)))) => MVal::Single((now, agg_add(Some(&old), &v))),
            (kind, old) => unreachable!("add on {kind} holding {old:?}"),
        };
        self.states[s].insert(key, new);
    }

    fn clear(&mut self, s: usize, k: &[u8], n: &[u8]) {
        self.states[s].remove(&(k.to_vec(), n.to_vec()));
    }

    fn contains(&self, s: usize, k: &[u8], n: &[u8]) -> bool {
        self.states[s].contains_key(&(k.to_vec(), n.to_vec()))
    }

    fn list_get(&mut self, s: usize, k: &[u8], n: &[u8]) -> Vec<Vec<u8>> {
        let (refresh, now) = (self.refresh(s), self.now);
        match self.states[s].get_mut(&(k.to_vec(), n.to_vec())) {
            Some(MVal::List(l)) => l
                .iter_mut()
                .map(|(ts, v)| {
                    if refresh {
                        *ts = now;
                    }
                    v.clone()
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    fn list_update(&mut self, s: usize, k: &[u8], n: &[u8], elems: Vec<Vec<u8>>) {
        let now = self.now;
        let key = (k.to_vec(), n.to_vec());
        if elems.is_empty() {
            self.states[s].remove(&key);
        } else {
            self.states[s].insert(key, MVal::List(elems.into_iter().map(|e| (now, e)).collect()));
        }
    }

    fn map_get(&mut self, s: usize, k: &[u8], n: &[u8], u: &[u8]) -> Option<Vec<u8>> {
        let (refresh, now) = (self.refresh(s), self.now);
        match self.states[s].get_mut(&(k.to_vec(), n.to_vec())) {
            Some(MVal::Map(m)) => m.get_mut(u).map(|(ts, v)| {
                if refresh {
                    *ts = now;
                }
                v.clone()
            }),
            _ => None,
        }
    }

    fn map_put(&mut self, s: usize, k: &[u8], n: &[u8], u: &[u8], v: Vec<u8>) {
        let now = self.now;
        match self.states[s]
            .entry((k.to_vec(), n.to_vec()))
            .or_insert_with(|| MVal::Map(BTreeMap::new()))
        {
            MVal::Map(m) => {
                m.insert(u.to_vec(), (now, v));
            }
            other => unreachable!("{other:?}"),
        }
    }

    fn map_remove(&mut self, s: usize, k: &[u8], n: &[u8], u: &[u8]) -> bool {
        let key = (k.to_vec(), n.to_vec());
        let Some(MVal::Map(m)) = self.states[s].get_mut(&key) else {
            return false;
        };
        let existed = m.remove(u).is_some();
        if m.is_empty() {
            self.states[s].remove(&key);
        }
        existed
    }

    fn map_iter(&mut self, s: usize, k: &[u8], n: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
        let (refresh, now) = (self.refresh(s), self.now);
        match self.states[s].get_mut(&(k.to_vec(), n.to_vec())) {
            Some(MVal::Map(m)) => m
                .iter_mut()
                .map(|(u, (ts, v))| {
                    if refresh {
                        *ts = now;
                    }
                    (u.clone(), v.clone())
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Flink's heap merge: fold the sources in order, then merge the result into the target
    /// (target first). Lists keep their elements' timestamps; a merged single value is
    /// written now.
    fn merge(&mut self, s: usize, k: &[u8], target: &[u8], sources: &[&[u8]]) {
        let now = self.now;
        let kind = self.kind(s);
        let tkey = (k.to_vec(), target.to_vec());
        let mut taken = Vec::new();
        for src in sources.iter().filter(|src| **src != target) {
            if let Some(v) = self.states[s].remove(&(k.to_vec(), src.to_vec())) {
                taken.push(v);
            }
        }
        if taken.is_empty() {
            return;
        }
        match kind {
            KeyedStateKind::List => {
                let mut all = match self.states[s].remove(&tkey) {
                    Some(MVal::List(l)) => l,
                    _ => Vec::new(),
                };
                for v in taken {
                    let MVal::List(l) = v else { unreachable!() };
                    all.extend(l);
                }
                self.states[s].insert(tkey, MVal::List(all));
            }
            _ => {
                let f = if kind == KeyedStateKind::Reducing {
                    reduce
                } else {
                    agg_merge
                };
                let mut merged: Option<Vec<u8>> = None;
                for v in taken {
                    let MVal::Single((_, b)) = v else { unreachable!() };
                    merged = Some(match merged {
                        None => b,
                        Some(a) => f(&a, &b),
                    });
                }
                let merged = merged.expect("non-empty");
                let new = match self.states[s].remove(&tkey) {
                    Some(MVal::Single((_, t))) => f(&t, &merged),
                    _ => merged,
                };
                self.states[s].insert(tkey, MVal::Single((now, new)));
            }
        }
    }

    /// Every entry the snapshot of a cluster must hold, in key-group then canonical order.
    fn expected_entries(&self, max_p: u32) -> Vec<OwnedEntry> {
        let mut out = Vec::new();
        for (s, entries) in self.states.iter().enumerate() {
            let with_ts = self.descs[s].ttl.is_some();
            for ((k, n), v) in entries {
                let e = |user_key: Option<&Vec<u8>>, (ts, value): &Cell| OwnedEntry {
                    key_group: key_group_for_key(k, max_p),
                    state: s as u32,
                    key: k.clone(),
                    namespace: n.clone(),
                    user_key: user_key.cloned(),
                    value: value.clone(),
                    timestamp: with_ts.then_some(*ts),
                };
                match v {
                    MVal::Single(c) => out.push(e(None, c)),
                    MVal::List(l) => out.extend(l.iter().map(|c| e(None, c))),
                    MVal::Map(m) => out.extend(m.iter().map(|(u, c)| e(Some(u), c))),
                }
            }
        }
        out.sort_by(|a, b| {
            a.key_group
                .cmp(&b.key_group)
                .then_with(|| a.as_entry().canonical_cmp(&b.as_entry()))
        });
        out
    }
}

// ---------------------------------------------------------------------------------------
// The cluster under test

/// Which backend kinds the subtasks of a cluster get.
#[derive(Clone, Copy, Debug)]
enum Kinds {
    /// Every subtask of every generation runs this kind.
    Only(BackendKind),
    /// Subtask `i` runs RocksDB when bit `i` of the generation's seed is set, else the heap.
    Mixed,
    /// Each generation (all its subtasks) runs one of heap, RocksDB, changelog over heap,
    /// changelog over RocksDB, drawn from its seed: the changelog is switched on and off
    /// across restores.
    Switch,
}

impl Kinds {
    fn kind(self, seed: u8, subtask: u32) -> BackendKind {
        match self {
            Kinds::Only(k) => k,
            Kinds::Mixed if (seed >> (subtask % 8)) & 1 == 1 => BackendKind::RocksDb,
            Kinds::Mixed => BackendKind::Heap,
            Kinds::Switch => [
                BackendKind::ChangelogHeap,
                BackendKind::ChangelogRocksDb,
                BackendKind::Heap,
                BackendKind::RocksDb,
            ][usize::from(seed >> 5) % 4],
        }
    }

    fn uses_changelog(self) -> bool {
        match self {
            Kinds::Only(k) => k.is_changelog(),
            Kinds::Mixed => false,
            Kinds::Switch => true,
        }
    }
}

/// The changelog's surroundings: a checkpoint store on the local filesystem and the upload
/// service writing into its job directory.
struct ClusterChangelog {
    _dir: tempfile::TempDir,
    env: ChangelogEnv,
    store: CheckpointStore,
    next_id: u64,
}

impl ClusterChangelog {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let storage: Arc<dyn Storage> = Arc::new(LocalStorage::new(dir.path()));
        let store = CheckpointStore::open(storage, "job", 2).expect("store");
        let job = store.job_storage().expect("job storage");
        let upload = UploadConfig {
            persist_delay: std::time::Duration::from_millis(1),
            // Small: change sets are uploaded continuously between checkpoints.
            preemptive_persist_threshold: 2 << 10,
            ..UploadConfig::default()
        };
        let storage = ChangelogStorage::for_job(job.clone(), upload).expect("changelog storage");
        let policy = MaterializationPolicy {
            interval: None,
            max_tail_bytes: Some(24 << 10),
            max_failures: 3,
        };
        ClusterChangelog {
            _dir: dir,
            env: ChangelogEnv { storage, job, policy },
            store,
            next_id: 1,
        }
    }
}

struct Cluster {
    max_p: u32,
    clock: Arc<ManualClock>,
    kinds: Kinds,
    backends: Vec<AnyBackend>,
    /// Per backend, the handle of each model state.
    handles: Vec<Vec<StateHandle>>,
    /// For clusters that run the changelog.
    cl: Option<ClusterChangelog>,
}

impl Cluster {
    fn new(max_p: u32, p: u32, clock: Arc<ManualClock>, kinds: Kinds, seed: u8) -> Self {
        let cl = kinds.uses_changelog().then(ClusterChangelog::new);
        let mut backends = Vec::new();
        let mut handles = Vec::new();
        for i in 0..p {
            let cfg = BackendConfig::for_subtask(max_p, p, i)
                .expect("config")
                .with_clock(clock.clone());
            let mut b = AnyBackend::with_changelog(kinds.kind(seed, i), cfg, cl.as_ref().map(|c| &c.env), i);
            let hs = specs()
                .into_iter()
                .map(|(d, f)| b.register(d, f).expect("register"))
                .collect();
            backends.push(b);
            handles.push(hs);
        }
        Cluster {
            max_p,
            clock,
            kinds,
            backends,
            handles,
            cl,
        }
    }

    fn p(&self) -> u32 {
        self.backends.len() as u32
    }

    fn owner(&self, k: &[u8]) -> usize {
        subtask_for_key_group(self.max_p, self.p(), key_group_for_key(k, self.max_p)) as usize
    }

    /// The backend owning `k` and the handle of state `s` there.
    fn route(&mut self, s: usize, k: &[u8]) -> (&mut AnyBackend, StateHandle) {
        let o = self.owner(k);
        (&mut self.backends[o], self.handles[o][s])
    }

    /// Snapshots every subtask; the concatenated snapshot contents (subtask order is
    /// key-group order).
    fn snapshot(&mut self, id: u64) -> (Vec<Arc<dyn KeyedStateView>>, Vec<OwnedEntry>) {
        let views: Vec<_> = self
            .backends
            .iter_mut()
            .map(|b| b.snapshot(id).expect("snapshot"))
            .collect();
        let mut all = Vec::new();
        for (i, v) in views.iter().enumerate() {
            assert_eq!(v.key_group_range(), self.backends[i].key_group_range());
            let mv = MemoryView::collect(v.as_ref(), v.key_group_range()).expect("collect");
            for e in mv.entries() {
                assert!(v.key_group_range().contains(e.key_group));
                assert_eq!(
                    key_group_for_key(&e.key, self.max_p),
                    e.key_group,
                    "entry filed under the wrong key group"
                );
            }
            all.extend_from_slice(mv.entries());
        }
        (views, all)
    }

    /// Snapshot all, build `new_p` subtasks (kinds drawn from `seed`) and restore each from
    /// all old views — or, when old and new subtasks all run RocksDB and `id % 3 != 0`, from
    /// native checkpoint files (written through a real `CheckpointStore`, on the local
    /// filesystem so table files are hard-linked when `id` is even, in memory otherwise).
    fn rescale(&mut self, model: &Model, new_p: u32, advance: i64, id: u64, seed: u8) {
        let (views, got) = self.snapshot(id);
        assert_eq!(got, model.expected_entries(self.max_p), "snapshot before rescale");
        let all_rocks_new = (0..new_p).all(|i| self.kinds.kind(seed, i) == BackendKind::RocksDb);
        let all_rocks_old = self.backends.iter().all(|b| b.kind() == BackendKind::RocksDb);
        let native = (all_rocks_new && all_rocks_old && !id.is_multiple_of(3))
            .then(|| self.native_checkpoint(id, id.is_multiple_of(2)));
        if let Some((reader, _)) = &native {
            NATIVE_RESCALES.with(|n| n.set(n.get() + 1));
            // The native files read back as exactly the snapshot's content.
            let mut from_files = Vec::new();
            for h in reader
                .native_handles(UID, KeyGroupRange::all(self.max_p))
                .expect("handles")
            {
                let view = NativeSnapshotView::open(&h, &statekit_tests::test_rocksdb_options()).expect("native view");
                let mv = MemoryView::collect(&view, view.key_group_range()).expect("collect");
                from_files.extend_from_slice(mv.entries());
            }
            assert_eq!(from_files, got, "native checkpoint content");
        }
        if advance > 0 {
            self.clock.advance(advance);
        }
        let refs: Vec<&dyn KeyedStateView> = views.iter().map(|v| v.as_ref()).collect();
        // A changelog generation restores from a changelog checkpoint.
        let changelog_reader = if self.backends.iter().all(|b| b.kind().is_changelog()) {
            Some(
                self.changelog_checkpoint(false)
                    .expect("a changelog generation checkpoints"),
            )
        } else {
            None
        };
        let mut backends = Vec::new();
        let mut handles = Vec::new();
        for i in 0..new_p {
            let cfg = BackendConfig::for_subtask(self.max_p, new_p, i)
                .expect("config")
                .with_clock(self.clock.clone());
            let kind = self.kinds.kind(seed, i);
            let env = self.cl.as_ref().map(|c| c.env.clone());
            // Changelog off: replay into a plain backend on a replay clock, which follows
            // the real clock once the replay is done.
            let replay_clock =
                (changelog_reader.is_some() && !kind.is_changelog()).then(|| ReplayClock::new(self.clock.clone()));
            let mut b = match &replay_clock {
                Some(rc) => AnyBackend::new(kind, cfg.with_clock(rc.clone())),
                None => AnyBackend::with_changelog(kind, cfg, env.as_ref(), i),
            };
            let range = b.key_group_range();
            match (&native, &changelog_reader, &mut b) {
                (Some((reader, _)), _, AnyBackend::RocksDb(r)) => {
                    let hs = reader.native_handles(UID, r.key_group_range()).expect("handles");
                    r.restore_native(&hs, id % 4 == 1).expect("native restore");
                }
                (_, Some(reader), b) => {
                    let hs = reader.changelog_handles(UID, range).expect("changelog handles");
                    match b.changelog() {
                        Some(cl) => {
                            cl.restore_changelog(&hs, seed & 1 == 0).expect("changelog restore");
                        }
                        None => {
                            let rc = replay_clock.as_ref().expect("a replay clock");
                            restore_into(&mut **b, Some(rc), range, &hs).expect("restore into a plain backend");
                            rc.follow();
                        }
                    }
                }
                _ => b.restore(&refs).expect("restore"),
            }
            // Functions are not in snapshots: register every state again (same handles).
            let hs: Vec<StateHandle> = specs()
                .into_iter()
                .map(|(d, f)| {
                    let before = b.handle(&d.name).expect("restored state");
                    let h = b.register(d, f).expect("register again");
                    assert_eq!(h, before);
                    h
                })
                .collect();
            backends.push(b);
            handles.push(hs);
        }
        // Retire the old subtasks; their snapshot views were already read.
        for b in &mut self.backends {
            b.dispose();
        }
        self.backends = backends;
        self.handles = handles;
    }

    /// A changelog checkpoint of every subtask (all changelog backends) through the store;
    /// completed (and notified) or aborted. Returns the reader of a completed one, which is
    /// verified in full.
    fn changelog_checkpoint(&mut self, abort: bool) -> Option<SnapshotReader> {
        let cl = self.cl.as_mut().expect("a changelog cluster");
        let id = cl.next_id;
        cl.next_id += 1;
        let writer = cl.store.begin(id).expect("begin");
        writer
            .register_operator(UID, self.backends.len() as u32, self.max_p)
            .expect("register");
        let mut cuts = Vec::new();
        for b in self.backends.iter_mut() {
            let states = b.descriptors();
            let cut = b.changelog().expect("changelog backend").checkpoint(id).expect("cut");
            cuts.push((cut, states));
        }
        // Processing could go on here; the handles wait for the tail uploads.
        for (i, (cut, states)) in cuts.into_iter().enumerate() {
            let handle = cut.finish().expect("tail durable");
            writer
                .add_changelog_subtask(UID, i as u32, handle, states, None, false)
                .expect("add");
        }
        if abort {
            cl.store.abort(writer).expect("abort");
            for b in self.backends.iter_mut() {
                b.notify_checkpoint_aborted(id).expect("notify aborted");
            }
            return None;
        }
        let (_, subsumed) = cl.store.complete(writer).expect("complete");
        for b in self.backends.iter_mut() {
            b.notify_checkpoint_complete(id).expect("notify");
            for s in &subsumed {
                b.notify_checkpoint_subsumed(*s).expect("notify subsumed");
            }
        }
        let reader = cl.store.reader(id).expect("reader");
        let report = reader.verify().expect("verify");
        assert!(report.is_ok(), "changelog checkpoint {id}: {:?}", report.problems);
        CHANGELOG_CHECKPOINTS.with(|n| n.set(n.get() + 1));
        Some(reader)
    }

    /// Materializes subtask `sub` now (`force`), or runs every changelog backend's policy.
    fn maintain(&mut self, sub: u8, force: bool) {
        let p = self.backends.len();
        for (i, b) in self.backends.iter_mut().enumerate() {
            let Some(cl) = b.changelog() else { continue };
            if force {
                if i == usize::from(sub) % p {
                    cl.materialize_now().expect("materialize");
                    MATERIALIZATIONS.with(|n| n.set(n.get() + 1));
                }
            } else {
                cl.poll().expect("poll");
            }
        }
    }

    /// A native checkpoint of every (RocksDB) subtask through a `CheckpointStore`; returns
    /// the reader of the completed checkpoint and the directory it lives in (if local).
    fn native_checkpoint(&mut self, id: u64, local: bool) -> (SnapshotReader, Option<tempfile::TempDir>) {
        let tmp = local.then(|| tempfile::tempdir().expect("tempdir"));
        let storage: Arc<dyn Storage> = match &tmp {
            Some(t) => Arc::new(LocalStorage::new(t.path())),
            None => Arc::new(MemoryStorage::new()),
        };
        let store = CheckpointStore::open(storage, "job", 1).expect("store");
        let writer = store.begin(id).expect("begin");
        writer.register_operator(UID, self.p(), self.max_p).expect("register");
        for (i, b) in self.backends.iter_mut().enumerate() {
            let AnyBackend::RocksDb(r) = b else {
                unreachable!("native checkpoints of RocksDB subtasks only")
            };
            let cut = r.native_snapshot(id).expect("native cut");
            let target = writer.native_target(UID, i as u32).expect("target");
            let handle = cut.upload(&target).expect("upload");
            writer
                .add_native_subtask(UID, i as u32, handle, r.descriptors(), None, false)
                .expect("add");
        }
        store.complete(writer).expect("complete");
        for b in self.backends.iter_mut() {
            b.notify_checkpoint_complete(id).expect("notify");
        }
        let reader = store.reader(id).expect("reader");
        let report = reader.verify().expect("verify");
        assert!(report.is_ok(), "{:?}", report.problems);
        (reader, tmp)
    }
}

const UID: &str = "op";

thread_local! {
    /// Rescales on this thread that went through native checkpoint files (checked by a
    /// deterministic test; each test runs on its own thread).
    static NATIVE_RESCALES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// Completed changelog checkpoints on this thread.
    static CHANGELOG_CHECKPOINTS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// Forced materializations on this thread.
    static MATERIALIZATIONS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

// ---------------------------------------------------------------------------------------
// Operations

#[derive(Clone, Debug)]
enum Op {
    Get {
        s: u8,
        k: u8,
        n: u8,
    },
    Put {
        s: u8,
        k: u8,
        n: u8,
        v: u8,
    },
    Add {
        s: u8,
        k: u8,
        n: u8,
        v: u8,
    },
    Clear {
        s: u8,
        k: u8,
        n: u8,
    },
    Contains {
        s: u8,
        k: u8,
        n: u8,
    },
    ListGet {
        s: u8,
        k: u8,
        n: u8,
    },
    ListUpdate {
        s: u8,
        k: u8,
        n: u8,
        elems: Vec<u8>,
    },
    MapGet {
        s: u8,
        k: u8,
        n: u8,
        u: u8,
    },
    MapPut {
        s: u8,
        k: u8,
        n: u8,
        u: u8,
        v: u8,
    },
    MapRemove {
        s: u8,
        k: u8,
        n: u8,
        u: u8,
    },
    MapIter {
        s: u8,
        k: u8,
        n: u8,
    },
    Merge {
        s: u8,
        k: u8,
        target: u8,
        sources: Vec<u8>,
    },
    Misroute {
        s: u8,
        k: u8,
    },
    Advance {
        ms: u8,
    },
    Rescale {
        p_seed: u8,
        advance: u8,
        kinds: u8,
    },
    /// A changelog checkpoint (no-op without the changelog), completed or aborted.
    Checkpoint {
        abort: bool,
    },
    /// Materialize one subtask now, or run the materialization policies.
    Maintain {
        sub: u8,
        force: bool,
    },
}

/// A state index: usually one of the states that fit the op (`fits`), sometimes any.
fn state_for(fits: &'static [usize]) -> impl Strategy<Value = u8> {
    prop_oneof![
        6 => proptest::sample::select(fits).prop_map(|s| s as u8),
        1 => 0u8..10,
    ]
}

const SINGLE: &[usize] = &[0, 3, 4, 5, 8, 9];
const ADDABLE: &[usize] = &[1, 3, 4, 6, 8, 9];
const LISTS: &[usize] = &[1, 6];
const MAPS: &[usize] = &[2, 7];
const ALL: &[usize] = &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9];

fn op() -> impl Strategy<Value = Op> {
    let k = 0..KEYS as u8;
    let n = 0..NAMESPACES.len() as u8;
    let u = 0..USER_KEYS.len() as u8;
    prop_oneof![
        8 => (state_for(SINGLE), k.clone(), n.clone()).prop_map(|(s, k, n)| Op::Get { s, k, n }),
        10 => (state_for(SINGLE), k.clone(), n.clone(), any::<u8>()).prop_map(|(s, k, n, v)| Op::Put { s, k, n, v }),
        14 => (state_for(ADDABLE), k.clone(), n.clone(), any::<u8>()).prop_map(|(s, k, n, v)| Op::Add { s, k, n, v }),
        3 => (state_for(ALL), k.clone(), n.clone()).prop_map(|(s, k, n)| Op::Clear { s, k, n }),
        3 => (state_for(ALL), k.clone(), n.clone()).prop_map(|(s, k, n)| Op::Contains { s, k, n }),
        5 => (state_for(LISTS), k.clone(), n.clone()).prop_map(|(s, k, n)| Op::ListGet { s, k, n }),
        3 => (state_for(LISTS), k.clone(), n.clone(), proptest::collection::vec(any::<u8>(), 0..4))
            .prop_map(|(s, k, n, elems)| Op::ListUpdate { s, k, n, elems }),
        5 => (state_for(MAPS), k.clone(), n.clone(), u.clone()).prop_map(|(s, k, n, u)| Op::MapGet { s, k, n, u }),
        10 => (state_for(MAPS), k.clone(), n.clone(), u.clone(), any::<u8>())
            .prop_map(|(s, k, n, u, v)| Op::MapPut { s, k, n, u, v }),
        4 => (state_for(MAPS), k.clone(), n.clone(), u).prop_map(|(s, k, n, u)| Op::MapRemove { s, k, n, u }),
        4 => (state_for(MAPS), k.clone(), n.clone()).prop_map(|(s, k, n)| Op::MapIter { s, k, n }),
        6 => (state_for(&[1, 3, 4, 6, 8, 9]), k.clone(), n.clone(), proptest::collection::vec(n.clone(), 0..4))
            .prop_map(|(s, k, target, sources)| Op::Merge { s, k, target, sources }),
        1 => (state_for(ALL), k).prop_map(|(s, k)| Op::Misroute { s, k }),
        8 => (0u8..40).prop_map(|ms| Op::Advance { ms }),
        2 => (any::<u8>(), prop_oneof![3 => Just(0u8), 1 => 0u8..60], any::<u8>())
            .prop_map(|(p_seed, advance, kinds)| Op::Rescale { p_seed, advance, kinds }),
        2 => prop_oneof![5 => Just(false), 1 => Just(true)].prop_map(|abort| Op::Checkpoint { abort }),
        2 => (any::<u8>(), any::<bool>()).prop_map(|(sub, force)| Op::Maintain { sub, force }),
    ]
}

fn fits(kind: KeyedStateKind, op: &Op) -> bool {
    use KeyedStateKind::*;
    match op {
        Op::Get { .. } | Op::Put { .. } => kind.is_single_value(),
        Op::Add { .. } | Op::Merge { .. } => matches!(kind, List | Reducing | Aggregating),
        Op::ListGet { .. } | Op::ListUpdate { .. } => kind == List,
        Op::MapGet { .. } | Op::MapPut { .. } | Op::MapRemove { .. } | Op::MapIter { .. } => kind == Map,
        _ => true,
    }
}

fn is_wrong_kind<T: std::fmt::Debug>(r: Result<T, StateError>) -> bool {
    matches!(r, Err(StateError::WrongKind { .. }))
}

/// Reads every (state, key, namespace) through the backend API (present or not) and
/// compares with the model; reads refresh TTL in both.
fn read_all(cluster: &mut Cluster, model: &mut Model) {
    for s in 0..model.descs.len() {
        let kind = model.kind(s);
        for k in 0..KEYS {
            let k = key(k);
            for n in NAMESPACES {
                let (b, h) = cluster.route(s, &k);
                assert_eq!(
                    b.contains(h, &k, n).expect("contains"),
                    model.contains(s, &k, n),
                    "contains s{s}"
                );
                match kind {
                    KeyedStateKind::List => {
                        let got = b.list_get(h, &k, n).expect("list_get");
                        assert_eq!(got, model.list_get(s, &k, n), "list s{s}");
                    }
                    KeyedStateKind::Map => {
                        let mut got = Vec::new();
                        b.map_for_each(h, &k, n, &mut |u, v| got.push((u.to_vec(), v.to_vec())))
                            .expect("map_for_each");
                        assert_eq!(got, model.map_iter(s, &k, n), "map s{s}");
                    }
                    _ => {
                        let mut out = Vec::new();
                        let found = b.get(h, &k, n, &mut out).expect("get");
                        assert_eq!(found.then_some(out), model.get(s, &k, n), "get s{s}");
                    }
                }
            }
        }
    }
}

fn run(kinds: Kinds, max_p: u32, p_seed: u8, ops: Vec<Op>) {
    let clock = ManualClock::new(1_000);
    let p0 = 1 + u32::from(p_seed) % max_p.min(8);
    let mut cluster = Cluster::new(max_p, p0, clock.clone(), kinds, p_seed.rotate_left(3));
    let mut model = Model::new(specs().into_iter().map(|(d, _)| d).collect());
    model.now = 1_000;
    let mut checkpoint = 0;

    for op in ops {
        model.now = clock.now_ms();
        model.purge();
        match &op {
            Op::Advance { ms } => {
                clock.advance(i64::from(*ms));
                continue;
            }
            Op::Checkpoint { abort } => {
                if cluster.backends.iter().all(|b| b.kind().is_changelog()) {
                    cluster.changelog_checkpoint(*abort);
                }
                continue;
            }
            Op::Maintain { sub, force } => {
                cluster.maintain(*sub, *force);
                continue;
            }
            Op::Rescale {
                p_seed,
                advance,
                kinds: seed,
            } => {
                checkpoint += 1;
                let new_p = 1 + u32::from(*p_seed) % max_p.min(8);
                cluster.rescale(&model, new_p, i64::from(*advance), checkpoint, *seed);
                model.now = clock.now_ms();
                model.purge();
                let (_, got) = cluster.snapshot(checkpoint * 1000);
                assert_eq!(
                    got,
                    model.expected_entries(max_p),
                    "after restore into {new_p} subtasks"
                );
                read_all(&mut cluster, &mut model);
                continue;
            }
            _ => {}
        }
        let s = match &op {
            Op::Get { s, .. }
            | Op::Put { s, .. }
            | Op::Add { s, .. }
            | Op::Clear { s, .. }
            | Op::Contains { s, .. }
            | Op::ListGet { s, .. }
            | Op::ListUpdate { s, .. }
            | Op::MapGet { s, .. }
            | Op::MapPut { s, .. }
            | Op::MapRemove { s, .. }
            | Op::MapIter { s, .. }
            | Op::Merge { s, .. }
            | Op::Misroute { s, .. } => usize::from(*s),
            Op::Advance { .. } | Op::Rescale { .. } | Op::Checkpoint { .. } | Op::Maintain { .. } => unreachable!(),
        };
        let kind = model.kind(s);
        let ok = fits(kind, &op);
        match op {
            Op::Get { k, n, .. } => {
                let (k, n) = (key(k.into()), NAMESPACES[usize::from(n)]);
                let (b, h) = cluster.route(s, &k);
                let mut out = Vec::new();
                let r = b.get(h, &k, n, &mut out);
                if ok {
                    let found = r.expect("get");
                    assert_eq!(found.then_some(out), model.get(s, &k, n));
                } else {
                    assert!(is_wrong_kind(r));
                }
            }
            Op::Put { k, n, v, .. } => {
                let (k, n) = (key(k.into()), NAMESPACES[usize::from(n)]);
                let v = value_bytes(kind, v, false);
                let (b, h) = cluster.route(s, &k);
                let r = b.put(h, &k, n, &v);
                if ok {
                    r.expect("put");
                    model.put(s, &k, n, v);
                } else {
                    assert!(is_wrong_kind(r));
                }
            }
            Op::Add { k, n, v, .. } => {
                let (k, n) = (key(k.into()), NAMESPACES[usize::from(n)]);
                let v = value_bytes(kind, v, true);
                let (b, h) = cluster.route(s, &k);
                let r = b.add(h, &k, n, &v);
                if ok {
                    r.expect("add");
                    model.add(s, &k, n, v);
                } else {
                    assert!(is_wrong_kind(r));
                }
            }
            Op::Clear { k, n, .. } => {
                let (k, n) = (key(k.into()), NAMESPACES[usize::from(n)]);
                let (b, h) = cluster.route(s, &k);
                b.clear(h, &k, n).expect("clear");
                model.clear(s, &k, n);
            }
            Op::Contains { k, n, .. } => {
                let (k, n) = (key(k.into()), NAMESPACES[usize::from(n)]);
                let (b, h) = cluster.route(s, &k);
                assert_eq!(b.contains(h, &k, n).expect("contains"), model.contains(s, &k, n));
            }
            Op::ListGet { k, n, .. } => {
                let (k, n) = (key(k.into()), NAMESPACES[usize::from(n)]);
                let (b, h) = cluster.route(s, &k);
                let r = b.list_get(h, &k, n);
                if ok {
                    assert_eq!(r.expect("list_get"), model.list_get(s, &k, n));
                } else {
                    assert!(is_wrong_kind(r));
                }
            }
            Op::ListUpdate { k, n, elems, .. } => {
                let (k, n) = (key(k.into()), NAMESPACES[usize::from(n)]);
                let elems: Vec<Vec<u8>> = elems.iter().map(|&e| value_bytes(kind, e, false)).collect();
                let refs: Vec<&[u8]> = elems.iter().map(|e| e.as_slice()).collect();
                let (b, h) = cluster.route(s, &k);
                let r = b.list_update(h, &k, n, &refs);
                if ok {
                    r.expect("list_update");
                    model.list_update(s, &k, n, elems);
                } else {
                    assert!(is_wrong_kind(r));
                }
            }
            Op::MapGet { k, n, u, .. } => {
                let (k, n, u) = (key(k.into()), NAMESPACES[usize::from(n)], USER_KEYS[usize::from(u)]);
                let (b, h) = cluster.route(s, &k);
                let mut out = Vec::new();
                let r = b.map_get(h, &k, n, u, &mut out);
                if ok {
                    let found = r.expect("map_get");
                    assert_eq!(found.then_some(out), model.map_get(s, &k, n, u));
                } else {
                    assert!(is_wrong_kind(r));
                }
            }
            Op::MapPut { k, n, u, v, .. } => {
                let (k, n, u) = (key(k.into()), NAMESPACES[usize::from(n)], USER_KEYS[usize::from(u)]);
                let v = value_bytes(kind, v, false);
                let (b, h) = cluster.route(s, &k);
                let r = b.map_put(h, &k, n, u, &v);
                if ok {
                    r.expect("map_put");
                    model.map_put(s, &k, n, u, v);
                } else {
                    assert!(is_wrong_kind(r));
                }
            }
            Op::MapRemove { k, n, u, .. } => {
                let (k, n, u) = (key(k.into()), NAMESPACES[usize::from(n)], USER_KEYS[usize::from(u)]);
                let (b, h) = cluster.route(s, &k);
                let r = b.map_remove(h, &k, n, u);
                if ok {
                    assert_eq!(r.expect("map_remove"), model.map_remove(s, &k, n, u));
                } else {
                    assert!(is_wrong_kind(r));
                }
            }
            Op::MapIter { k, n, .. } => {
                let (k, n) = (key(k.into()), NAMESPACES[usize::from(n)]);
                let (b, h) = cluster.route(s, &k);
                let mut got = Vec::new();
                let r = b.map_for_each(h, &k, n, &mut |u, v| got.push((u.to_vec(), v.to_vec())));
                if ok {
                    assert_eq!(r.expect("map_for_each"), got.len());
                    assert_eq!(got, model.map_iter(s, &k, n));
                } else {
                    assert!(is_wrong_kind(r));
                }
            }
            Op::Merge { k, target, sources, .. } => {
                let k = key(k.into());
                let target = NAMESPACES[usize::from(target)];
                let sources: Vec<&[u8]> = sources.iter().map(|&n| NAMESPACES[usize::from(n)]).collect();
                let (b, h) = cluster.route(s, &k);
                let r = b.merge_namespaces(h, &k, target, &sources);
                if ok {
                    r.expect("merge_namespaces");
                    model.merge(s, &k, target, &sources);
                } else {
                    assert!(is_wrong_kind(r));
                }
            }
            Op::Misroute { k, .. } => {
                let k = key(k.into());
                if cluster.p() > 1 {
                    let wrong = (cluster.owner(&k) + 1) % cluster.backends.len();
                    let h = cluster.handles[wrong][s];
                    let r = cluster.backends[wrong].contains(h, &k, b"");
                    assert!(matches!(r, Err(StateError::KeyGroupOutOfRange { .. })), "{r:?}");
                    let r = cluster.backends[wrong].clear(h, &k, b"");
                    assert!(matches!(r, Err(StateError::KeyGroupOutOfRange { .. })), "{r:?}");
                }
            }
            Op::Advance { .. } | Op::Rescale { .. } | Op::Checkpoint { .. } | Op::Maintain { .. } => unreachable!(),
        }
    }

    // Final comparison: snapshot contents, then every key through the API.
    model.now = clock.now_ms();
    model.purge();
    let (_, got) = cluster.snapshot(u64::MAX);
    assert_eq!(got, model.expected_entries(max_p), "final snapshot");
    read_all(&mut cluster, &mut model);
    // One more rescale to a single subtask of each kind holds everything.
    cluster.rescale(&model, 1, 0, u64::MAX - 1, 0);
    let (_, got) = cluster.snapshot(u64::MAX - 3);
    assert_eq!(
        got,
        model.expected_entries(max_p),
        "after final rescale to 1 heap subtask"
    );
    cluster.rescale(&model, 1, 0, u64::MAX - 4, 0xFF);
    let (_, got) = cluster.snapshot(u64::MAX - 2);
    assert_eq!(got, model.expected_entries(max_p), "after final rescale to 1");
}

fn cases() -> u32 {
    std::env::var("BACKEND_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(12)
}

fn ops_len() -> std::ops::Range<usize> {
    1..250
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), max_shrink_iters: 500, ..ProptestConfig::default() })]

    #[test]
    fn rocksdb_matches_model_across_rescales(
        max_p in proptest::sample::select(MAX_PARALLELISMS.to_vec()),
        p_seed in any::<u8>(),
        ops in proptest::collection::vec(op(), ops_len()),
    ) {
        run(Kinds::Only(BackendKind::RocksDb), max_p, p_seed, ops);
    }

    #[test]
    fn mixed_backends_match_model_across_rescales(
        max_p in proptest::sample::select(MAX_PARALLELISMS.to_vec()),
        p_seed in any::<u8>(),
        ops in proptest::collection::vec(op(), ops_len()),
    ) {
        run(Kinds::Mixed, max_p, p_seed, ops);
    }
}

fn heap_cases() -> u32 {
    std::env::var("MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: heap_cases(), max_shrink_iters: 2_000, ..ProptestConfig::default() })]

    #[test]
    fn heap_matches_model_across_rescales(
        max_p in proptest::sample::select(MAX_PARALLELISMS.to_vec()),
        p_seed in any::<u8>(),
        ops in proptest::collection::vec(op(), ops_len()),
    ) {
        run(Kinds::Only(BackendKind::Heap), max_p, p_seed, ops);
    }
}

/// A fixed long heap-only run, so every build exercises many rescales whatever proptest draws.
#[test]
fn heap_long_deterministic_sequence() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]);
    let mut runner = TestRunner::new_with_rng(Config::default(), rng);
    for max_p in MAX_PARALLELISMS {
        let ops = proptest::collection::vec(op(), 1500)
            .new_tree(&mut runner)
            .expect("tree")
            .current();
        let rescales = ops.iter().filter(|o| matches!(o, Op::Rescale { .. })).count();
        assert!(rescales > 5);
        run(Kinds::Only(BackendKind::Heap), max_p, 3, ops);
    }
}

/// A fixed long run per max parallelism, so every build exercises many rescales and
/// backend switches whatever proptest draws.
#[test]
fn mixed_long_deterministic_sequence() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &[11; 32]);
    let mut runner = TestRunner::new_with_rng(Config::default(), rng);
    for max_p in MAX_PARALLELISMS {
        let ops = proptest::collection::vec(op(), 600)
            .new_tree(&mut runner)
            .expect("tree")
            .current();
        let rescales = ops.iter().filter(|o| matches!(o, Op::Rescale { .. })).count();
        assert!(rescales > 3);
        run(Kinds::Mixed, max_p, 5, ops);
    }
}

/// A fixed RocksDB-only run: many rescales go through native checkpoints (local and in
/// memory, with and without reuse of the restored files), whatever proptest draws.
#[test]
fn rocksdb_long_deterministic_sequence_with_native_rescales() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &[12; 32]);
    let mut runner = TestRunner::new_with_rng(Config::default(), rng);
    let before = NATIVE_RESCALES.with(|n| n.get());
    for max_p in [7, 300] {
        let ops = proptest::collection::vec(op(), 500)
            .new_tree(&mut runner)
            .expect("tree")
            .current();
        run(Kinds::Only(BackendKind::RocksDb), max_p, 3, ops);
    }
    let native = NATIVE_RESCALES.with(|n| n.get()) - before;
    assert!(native >= 4, "only {native} native rescales");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), max_shrink_iters: 500, ..ProptestConfig::default() })]

    /// Through the changelog over the heap: random operations, checkpoints (some aborted),
    /// materializations, truncations, and restores at random parallelism from changelog
    /// checkpoints (sharing the restored files or not).
    #[test]
    fn changelog_over_heap_matches_model(
        max_p in proptest::sample::select(MAX_PARALLELISMS.to_vec()),
        p_seed in any::<u8>(),
        ops in proptest::collection::vec(op(), ops_len()),
    ) {
        run(Kinds::Only(BackendKind::ChangelogHeap), max_p, p_seed, ops);
    }

    /// The same over RocksDB.
    #[test]
    fn changelog_over_rocksdb_matches_model(
        max_p in proptest::sample::select(MAX_PARALLELISMS.to_vec()),
        p_seed in any::<u8>(),
        ops in proptest::collection::vec(op(), ops_len()),
    ) {
        run(Kinds::Only(BackendKind::ChangelogRocksDb), max_p, p_seed, ops);
    }

    /// Each generation picks changelog-over-heap, changelog-over-RocksDB, heap or RocksDB:
    /// switching the changelog on and off across restores keeps the state.
    #[test]
    fn switching_the_changelog_on_and_off_keeps_the_state(
        max_p in proptest::sample::select(MAX_PARALLELISMS.to_vec()),
        p_seed in any::<u8>(),
        ops in proptest::collection::vec(op(), ops_len()),
    ) {
        run(Kinds::Switch, max_p, p_seed, ops);
    }
}

/// Fixed long changelog runs (heap and RocksDB delegates, and switching), so every build
/// exercises many checkpoints, materializations and restores whatever proptest draws.
#[test]
fn changelog_long_deterministic_sequences() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &[13; 32]);
    let mut runner = TestRunner::new_with_rng(Config::default(), rng);
    let before = (
        CHANGELOG_CHECKPOINTS.with(|n| n.get()),
        MATERIALIZATIONS.with(|n| n.get()),
    );
    for (kinds, max_p) in [
        (Kinds::Only(BackendKind::ChangelogHeap), 128),
        (Kinds::Only(BackendKind::ChangelogRocksDb), 7),
        (Kinds::Switch, 300),
    ] {
        let ops = proptest::collection::vec(op(), 600)
            .new_tree(&mut runner)
            .expect("tree")
            .current();
        run(kinds, max_p, 5, ops);
    }
    let checkpoints = CHANGELOG_CHECKPOINTS.with(|n| n.get()) - before.0;
    let materializations = MATERIALIZATIONS.with(|n| n.get()) - before.1;
    assert!(
        checkpoints >= 10 && materializations >= 3,
        "{checkpoints} checkpoints, {materializations} materializations"
    );
}

/// The factory really builds both kinds, and a RocksDB-only cluster stays RocksDB.
#[test]
fn kinds_policy_builds_both_backends() {
    let clock = ManualClock::new(0);
    let c = Cluster::new(128, 8, clock.clone(), Kinds::Mixed, 0b1010_0101);
    let kinds: Vec<BackendKind> = c.backends.iter().map(|b| b.kind()).collect();
    use BackendKind::{Heap as H, RocksDb as R};
    assert_eq!(kinds, vec![R, H, R, H, H, R, H, R]);
    let c = Cluster::new(128, 3, clock, Kinds::Only(R), 0);
    assert!(c.backends.iter().all(|b| b.kind() == R));
}
