//! Model-based test through the real savepoint files: random operations on every keyed state
//! kind and on operator state, savepoints written with `SnapshotWriter` at random points and
//! restored with `SnapshotReader` at a random new parallelism, compared with a `BTreeMap`
//! model after every restore.

use proptest::prelude::*;
use statekit_checkpoint::{SnapshotReader, SnapshotWriter};
use statekit_core::storage::{MemoryStorage, Storage};
use statekit_core::{
    AggregateFn, BackendConfig, KeyedStateBackend, KeyedStateView, ManualClock, MemoryView, OperatorStateData,
    OperatorStateDescriptor, OperatorStateMode, OperatorStateStore, StateDescriptor, StateFunctions, StateHandle,
    TtlConfig, TypeSchema,
};
use statekit_hashmap::HashMapBackend;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

const TTL_MS: u64 = 1_000;
const UID: &str = "op";

#[derive(Clone, Debug, PartialEq, Eq)]
enum M {
    Value(Vec<u8>, i64),
    List(Vec<Vec<u8>>),
    Map(BTreeMap<Vec<u8>, Vec<u8>>),
}

#[derive(Clone, Debug)]
enum Op {
    Put { state: usize, key: u16, ns: u8, v: u8 },
    Add { state: usize, key: u16, ns: u8, v: u8 },
    Clear { state: usize, key: u16, ns: u8 },
    MapPut { key: u16, ns: u8, uk: u8, v: u8 },
    MapRemove { key: u16, ns: u8, uk: u8 },
    OperatorAdd { v: u8 },
    Advance { ms: u16 },
    Savepoint { parallelism: u32 },
}

// States: 0 value, 1 list, 2 map, 3 reducing (sum), 4 aggregating (count,sum), 5 value with TTL.
fn descriptors() -> Vec<StateDescriptor> {
    let ns = TypeSchema::U64;
    vec![
        StateDescriptor::value("value", TypeSchema::Bytes, TypeSchema::Bytes).with_namespace(ns.clone()),
        StateDescriptor::list("list", TypeSchema::Bytes, TypeSchema::Bytes).with_namespace(ns.clone()),
        StateDescriptor::map("map", TypeSchema::Bytes, TypeSchema::Bytes, TypeSchema::Bytes).with_namespace(ns.clone()),
        StateDescriptor::reducing("sum", TypeSchema::Bytes, TypeSchema::I64).with_namespace(ns.clone()),
        StateDescriptor::aggregating(
            "avg",
            TypeSchema::Bytes,
            TypeSchema::Tuple(vec![TypeSchema::I64, TypeSchema::I64]),
        )
        .with_namespace(ns.clone()),
        StateDescriptor::value("ttl", TypeSchema::Bytes, TypeSchema::Bytes)
            .with_namespace(ns)
            .with_ttl(TtlConfig::new(TTL_MS)),
    ]
}

fn i64_of(b: &[u8]) -> i64 {
    i64::from_be_bytes(b.try_into().expect("8 bytes"))
}

fn functions(i: usize) -> StateFunctions {
    match i {
        3 => StateFunctions::Reduce(Arc::new(|a: &[u8], b: &[u8]| {
            (i64_of(a) + i64_of(b)).to_be_bytes().to_vec()
        })),
        4 => StateFunctions::Aggregate(AggregateFn {
            add: Arc::new(|acc: Option<&[u8]>, input: &[u8]| {
                let (c, s) = acc.map_or((0, 0), |a| (i64_of(&a[..8]), i64_of(&a[8..])));
                [(c + 1).to_be_bytes(), (s + i64_of(input)).to_be_bytes()].concat()
            }),
            merge: Arc::new(|a: &[u8], b: &[u8]| {
                [
                    (i64_of(&a[..8]) + i64_of(&b[..8])).to_be_bytes(),
                    (i64_of(&a[8..]) + i64_of(&b[8..])).to_be_bytes(),
                ]
                .concat()
            }),
        }),
        _ => StateFunctions::None,
    }
}

struct Job {
    max_p: u32,
    backends: Vec<HashMapBackend>,
    handles: Vec<Vec<StateHandle>>,
    op_states: Vec<OperatorStateStore>,
}

fn op_descs() -> Vec<OperatorStateDescriptor> {
    let mk = |name: &str, mode| OperatorStateDescriptor {
        name: name.into(),
        mode,
        value_schema: TypeSchema::Bytes,
        key_schema: (mode == OperatorStateMode::Broadcast).then_some(TypeSchema::Bytes),
    };
    vec![
        mk("offsets", OperatorStateMode::List),
        mk("all", OperatorStateMode::Union),
        mk("rules", OperatorStateMode::Broadcast),
    ]
}

impl Job {
    fn new(max_p: u32, p: u32, clock: Arc<ManualClock>) -> Self {
        let mut backends = Vec::new();
        let mut handles = Vec::new();
        let mut op_states = Vec::new();
        for i in 0..p {
            let cfg = BackendConfig::for_subtask(max_p, p, i)
                .expect("cfg")
                .with_clock(clock.clone());
            let mut b = HashMapBackend::new(cfg).expect("backend");
            handles.push(
                descriptors()
                    .into_iter()
                    .enumerate()
                    .map(|(j, d)| b.register(d, functions(j)).expect("register"))
                    .collect(),
            );
            backends.push(b);
            let mut os = OperatorStateStore::new();
            for d in op_descs() {
                os.register(d).expect("register op state");
            }
            op_states.push(os);
        }
        Job {
            max_p,
            backends,
            handles,
            op_states,
        }
    }

    fn owner(&self, key: &[u8]) -> usize {
        statekit_tests::owner(key, self.max_p, self.backends.len() as u32)
    }
}

fn key_bytes(k: u16) -> Vec<u8> {
    format!("key-{k}").into_bytes()
}

type Model = BTreeMap<(usize, Vec<u8>, Vec<u8>), M>;

fn ns_bytes(ns: u8) -> Vec<u8> {
    u64::from(ns).to_be_bytes().to_vec()
}

fn expected_view(model: &Model, now: i64) -> BTreeMap<(usize, Vec<u8>, Vec<u8>), M> {
    model
        .iter()
        .filter(|((s, _, _), m)| match m {
            M::Value(_, ts) if *s == 5 => !TtlConfig::new(TTL_MS).is_expired(*ts, now),
            M::List(l) => !l.is_empty(),
            M::Map(m) => !m.is_empty(),
            _ => true,
        })
        .map(|((s, k, n), m)| {
            let m = match m {
                M::Value(v, _) => M::Value(v.clone(), 0),
                other => other.clone(),
            };
            ((*s, k.clone(), n.clone()), m)
        })
        .collect()
}

/// Reads the whole keyed state of a job through its snapshot views.
fn actual_view(job: &mut Job) -> BTreeMap<(usize, Vec<u8>, Vec<u8>), M> {
    let names: Vec<String> = descriptors().into_iter().map(|d| d.name).collect();
    let mut out: BTreeMap<(usize, Vec<u8>, Vec<u8>), M> = BTreeMap::new();
    let mut seen_keys: BTreeMap<Vec<u8>, usize> = BTreeMap::new();
    for (i, b) in job.backends.iter_mut().enumerate() {
        let view = b.snapshot(0).expect("snapshot");
        let collected = MemoryView::collect(view.as_ref(), view.key_group_range()).expect("collect");
        for e in collected.entries() {
            if let Some(prev) = seen_keys.insert(e.key.clone(), i) {
                assert_eq!(prev, i, "key {:?} held by two subtasks", e.key);
            }
            let name = &collected.states()[e.state as usize].name;
            let s = names.iter().position(|n| n == name).expect("known state");
            let slot = out.entry((s, e.key.clone(), e.namespace.clone()));
            match (s, e.user_key.as_ref()) {
                (1, _) => match slot.or_insert_with(|| M::List(Vec::new())) {
                    M::List(l) => l.push(e.value.clone()),
                    _ => unreachable!(),
                },
                (2, Some(uk)) => match slot.or_insert_with(|| M::Map(BTreeMap::new())) {
                    M::Map(m) => {
                        m.insert(uk.clone(), e.value.clone());
                    }
                    _ => unreachable!(),
                },
                _ => {
                    slot.or_insert(M::Value(e.value.clone(), 0));
                }
            }
        }
    }
    out
}

fn run(max_p: u32, p0: u32, ops: Vec<Op>) {
    let clock = ManualClock::new(1_000_000);
    let mut job = Job::new(max_p, p0, clock.clone());
    let mut model: Model = BTreeMap::new();
    let mut op_elements: Vec<Vec<u8>> = Vec::new();
    let storage: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
    let mut savepoints = 0u64;
    for op in ops {
        let now = clock.now_ms_for_test();
        match op {
            Op::Put { state, key, ns, v } => {
                let state = [0usize, 5][state % 2];
                let k = key_bytes(key);
                let o = job.owner(&k);
                let h = job.handles[o][state];
                job.backends[o].put(h, &k, &ns_bytes(ns), &[v]).expect("put");
                model.insert((state, k, ns_bytes(ns)), M::Value(vec![v], now));
            }
            Op::Add { state, key, ns, v } => {
                let state = [1usize, 3, 4][state % 3];
                let k = key_bytes(key);
                let o = job.owner(&k);
                let h = job.handles[o][state];
                let input = if state == 1 {
                    vec![v]
                } else {
                    i64::from(v).to_be_bytes().to_vec()
                };
                job.backends[o].add(h, &k, &ns_bytes(ns), &input).expect("add");
                let slot = model.entry((state, k, ns_bytes(ns)));
                match state {
                    1 => match slot.or_insert_with(|| M::List(Vec::new())) {
                        M::List(l) => l.push(input),
                        _ => unreachable!(),
                    },
                    3 => {
                        let e = slot.or_insert(M::Value(0i64.to_be_bytes().to_vec(), 0));
                        let M::Value(cur, _) = e else { unreachable!() };
                        *cur = (i64_of(cur) + i64::from(v)).to_be_bytes().to_vec();
                    }
                    _ => {
                        let e = slot.or_insert(M::Value([0i64.to_be_bytes(), 0i64.to_be_bytes()].concat(), 0));
                        let M::Value(cur, _) = e else { unreachable!() };
                        let (c, s) = (i64_of(&cur[..8]), i64_of(&cur[8..]));
                        *cur = [(c + 1).to_be_bytes(), (s + i64::from(v)).to_be_bytes()].concat();
                    }
                }
            }
            Op::Clear { state, key, ns } => {
                let state = state % 6;
                let k = key_bytes(key);
                let o = job.owner(&k);
                let h = job.handles[o][state];
                job.backends[o].clear(h, &k, &ns_bytes(ns)).expect("clear");
                model.remove(&(state, k, ns_bytes(ns)));
            }
            Op::MapPut { key, ns, uk, v } => {
                let k = key_bytes(key);
                let o = job.owner(&k);
                let h = job.handles[o][2];
                job.backends[o]
                    .map_put(h, &k, &ns_bytes(ns), &[uk], &[v])
                    .expect("map_put");
                match model
                    .entry((2, k, ns_bytes(ns)))
                    .or_insert_with(|| M::Map(BTreeMap::new()))
                {
                    M::Map(m) => {
                        m.insert(vec![uk], vec![v]);
                    }
                    _ => unreachable!(),
                }
            }
            Op::MapRemove { key, ns, uk } => {
                let k = key_bytes(key);
                let o = job.owner(&k);
                let h = job.handles[o][2];
                job.backends[o]
                    .map_remove(h, &k, &ns_bytes(ns), &[uk])
                    .expect("map_remove");
                if let Some(M::Map(m)) = model.get_mut(&(2, k, ns_bytes(ns))) {
                    m.remove(&[uk][..]);
                }
            }
            Op::OperatorAdd { v } => {
                let sub = usize::from(v) % job.op_states.len();
                let os = &mut job.op_states[sub];
                let (l, u, b) = (
                    os.handle("offsets").expect("h"),
                    os.handle("all").expect("h"),
                    os.handle("rules").expect("h"),
                );
                os.list_add(l, &[v]).expect("add");
                os.list_add(u, &[v]).expect("add");
                os.broadcast_put(b, b"rule", &[v]).expect("put");
                op_elements.push(vec![v]);
            }
            Op::Advance { ms } => clock.advance(i64::from(ms)),
            Op::Savepoint { parallelism } => {
                savepoints += 1;
                let new_p = 1 + parallelism % max_p.min(8);
                let writer =
                    SnapshotWriter::new_savepoint(storage.clone(), "savepoints", "job", savepoints).expect("writer");
                writer
                    .register_operator(UID, job.backends.len() as u32, max_p)
                    .expect("register");
                for (i, b) in job.backends.iter_mut().enumerate() {
                    let view = b.snapshot(savepoints).expect("snapshot");
                    let ops = job.op_states[i].snapshot();
                    writer
                        .write_subtask(UID, i as u32, Some(view.as_ref()), Some(&ops), false)
                        .expect("write subtask");
                }
                let dir = writer.dir().to_string();
                writer.finish().expect("finish");
                let reader = SnapshotReader::open_in(storage.clone(), &dir, None).expect("open");
                let report = reader.verify().expect("verify");
                assert!(report.problems.is_empty(), "{:?}", report.problems);

                let mut new_job = Job::new(max_p, new_p, clock.clone());
                let mut all_lists = Vec::new();
                for i in 0..new_p {
                    reader
                        .restore_keyed(UID, &mut new_job.backends[i as usize])
                        .expect("restore keyed");
                    let ops = reader.operator_state(UID, new_p, i).expect("operator state");
                    for (d, data) in &ops.states {
                        match (d.name.as_str(), data) {
                            ("offsets", OperatorStateData::List(l)) => all_lists.extend(l.iter().cloned()),
                            ("all", OperatorStateData::List(l)) => {
                                let mut got = l.clone();
                                let mut want = op_elements.clone();
                                got.sort();
                                want.sort();
                                assert_eq!(got, want, "union state must reach every subtask whole");
                            }
                            ("rules", OperatorStateData::Broadcast(m)) => {
                                assert!(m.len() <= 1);
                            }
                            other => panic!("unexpected operator state {other:?}"),
                        }
                    }
                    // Like a user of union state (e.g. a source re-assigning partitions), each
                    // subtask keeps only its share of the union afterwards, so the model's
                    // multiset of union elements stays the same across restores.
                    let mut store = OperatorStateStore::from_snapshot(ops);
                    let u = store.handle("all").expect("union state");
                    let share: Vec<Vec<u8>> = store
                        .list(u)
                        .expect("list")
                        .iter()
                        .enumerate()
                        .filter(|(j, _)| *j as u32 % new_p == i)
                        .map(|(_, e)| e.clone())
                        .collect();
                    store.list_update(u, share).expect("update");
                    new_job.op_states[i as usize] = store;
                }
                let mut want = op_elements.clone();
                want.sort();
                all_lists.sort();
                assert_eq!(
                    all_lists, want,
                    "list state elements lost or duplicated by redistribution"
                );
                job = new_job;
                let now = clock.now_ms_for_test();
                assert_eq!(
                    actual_view(&mut job),
                    expected_view(&model, now),
                    "after restore at p={new_p}"
                );
            }
        }
    }
    let now = clock.now_ms_for_test();
    assert_eq!(actual_view(&mut job), expected_view(&model, now), "at the end");
}

trait NowForTest {
    fn now_ms_for_test(&self) -> i64;
}

impl NowForTest for Arc<ManualClock> {
    fn now_ms_for_test(&self) -> i64 {
        statekit_core::Clock::now_ms(self.as_ref())
    }
}

fn arb_op() -> impl Strategy<Value = Op> {
    let key = 0u16..200;
    let ns = 0u8..3;
    prop_oneof![
        6 => (0usize..2, key.clone(), ns.clone(), any::<u8>()).prop_map(|(state, key, ns, v)| Op::Put { state, key, ns, v }),
        6 => (0usize..3, key.clone(), ns.clone(), any::<u8>()).prop_map(|(state, key, ns, v)| Op::Add { state, key, ns, v }),
        2 => (0usize..6, key.clone(), ns.clone()).prop_map(|(state, key, ns)| Op::Clear { state, key, ns }),
        4 => (key.clone(), ns.clone(), 0u8..6, any::<u8>()).prop_map(|(key, ns, uk, v)| Op::MapPut { key, ns, uk, v }),
        2 => (key, ns, 0u8..6).prop_map(|(key, ns, uk)| Op::MapRemove { key, ns, uk }),
        2 => any::<u8>().prop_map(|v| Op::OperatorAdd { v }),
        1 => (0u16..600).prop_map(|ms| Op::Advance { ms }),
        1 => any::<u32>().prop_map(|parallelism| Op::Savepoint { parallelism }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]
    #[test]
    fn savepoint_restore_rescale_matches_model(
        max_p in prop_oneof![Just(1u32), Just(4), Just(128), Just(300)],
        p_seed in any::<u32>(),
        ops in proptest::collection::vec(arb_op(), 1..300),
    ) {
        let p0 = 1 + p_seed % max_p.min(6);
        run(max_p, p0, ops);
    }
}

#[test]
fn every_parallelism_from_one_to_max() {
    // Rescale one savepoint to every parallelism 1..=max_p and check each key lands in
    // exactly one subtask and nothing is lost.
    let max_p = 16;
    let clock = ManualClock::new(0);
    let mut job = Job::new(max_p, 3, clock.clone());
    let mut keys = BTreeSet::new();
    for k in 0..500u16 {
        let kb = key_bytes(k);
        let o = job.owner(&kb);
        let h = job.handles[o][0];
        job.backends[o]
            .put(h, &kb, &ns_bytes(0), &k.to_be_bytes())
            .expect("put");
        keys.insert(kb);
    }
    let storage: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
    let writer = SnapshotWriter::new_savepoint(storage.clone(), "", "job", 1).expect("writer");
    writer.register_operator(UID, 3, max_p).expect("register");
    for (i, b) in job.backends.iter_mut().enumerate() {
        let view = b.snapshot(1).expect("snapshot");
        writer
            .write_subtask(UID, i as u32, Some(view.as_ref()), None, false)
            .expect("write");
    }
    let dir = writer.dir().to_string();
    writer.finish().expect("finish");
    let reader = SnapshotReader::open_in(storage, &dir, None).expect("open");
    for p in 1..=max_p {
        let mut seen = BTreeSet::new();
        for i in 0..p {
            let cfg = BackendConfig::for_subtask(max_p, p, i).expect("cfg");
            let mut b = HashMapBackend::new(cfg).expect("backend");
            reader.restore_keyed(UID, &mut b).expect("restore");
            let view = b.snapshot(2).expect("snapshot");
            let got = MemoryView::collect(view.as_ref(), view.key_group_range()).expect("collect");
            for e in got.entries() {
                assert!(seen.insert(e.key.clone()), "key in two subtasks at p={p}");
            }
        }
        assert_eq!(seen, keys, "p={p}");
    }
    // More subtasks than key groups is rejected.
    assert!(reader.operator_state(UID, max_p + 1, 0).is_err());
}
