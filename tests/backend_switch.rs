//! Switching backends through canonical savepoints.
//!
//! * The same operations on a heap and a RocksDB backend produce the same `KeyedStateView`
//!   stream, so `write_keyed_file` of both views gives identical bytes (random operations
//!   over every kind, TTL, namespaces and key groups; 1- and 2-byte key-group prefixes).
//! * A savepoint written with `SnapshotWriter` from RocksDB subtasks restores with
//!   `SnapshotReader::restore_keyed` into heap subtasks at another parallelism, and the
//!   reverse, with the same contents (through snapshots and through the state API).

use proptest::prelude::*;
use statekit_checkpoint::{SnapshotReader, SnapshotWriter};
use statekit_core::storage::{MemoryStorage, Storage};
use statekit_core::{
    key_group_for_key, AggregateFn, BackendConfig, KeyGroupRange, KeyedStateBackend, KeyedStateView, ManualClock,
    MemoryView, OwnedEntry, StateDescriptor, StateFunctions, StateHandle, TtlConfig, TtlUpdateType, TypeSchema,
};
use statekit_format::{write_keyed_file, Compression, WriteOptions};
use statekit_tests::{AnyBackend, BackendKind};
use std::sync::Arc;

fn i64_of(b: &[u8]) -> i64 {
    i64::from_be_bytes(b.try_into().expect("8 bytes"))
}

/// Value, list, map, reducing, aggregating; then the same five with TTL.
fn specs() -> Vec<(StateDescriptor, StateFunctions)> {
    let reduce = || {
        StateFunctions::Reduce(Arc::new(|a: &[u8], b: &[u8]| {
            i64_of(a).wrapping_add(i64_of(b)).to_be_bytes().to_vec()
        }))
    };
    let agg = || {
        StateFunctions::Aggregate(AggregateFn {
            add: Arc::new(|acc: Option<&[u8]>, x: &[u8]| {
                let s = acc.map_or(0, i64_of);
                s.wrapping_add(i64_of(x)).wrapping_mul(3).to_be_bytes().to_vec()
            }),
            merge: Arc::new(|a: &[u8], b: &[u8]| i64_of(a).wrapping_sub(i64_of(b)).to_be_bytes().to_vec()),
        })
    };
    let mut out = Vec::new();
    for ttl in [
        None,
        Some(TtlConfig {
            ttl_ms: 40,
            update_type: TtlUpdateType::OnReadAndWrite,
        }),
    ] {
        let sfx = if ttl.is_some() { "-ttl" } else { "" };
        let ns = TypeSchema::Bytes;
        let mut v = vec![
            (
                StateDescriptor::value(&format!("value{sfx}"), TypeSchema::Bytes, TypeSchema::Bytes),
                StateFunctions::None,
            ),
            (
                StateDescriptor::list(&format!("list{sfx}"), TypeSchema::Bytes, TypeSchema::Bytes),
                StateFunctions::None,
            ),
            (
                StateDescriptor::map(
                    &format!("map{sfx}"),
                    TypeSchema::Bytes,
                    TypeSchema::Bytes,
                    TypeSchema::Bytes,
                ),
                StateFunctions::None,
            ),
            (
                StateDescriptor::reducing(&format!("sum{sfx}"), TypeSchema::Bytes, TypeSchema::I64),
                reduce(),
            ),
            (
                StateDescriptor::aggregating(&format!("agg{sfx}"), TypeSchema::Bytes, TypeSchema::I64),
                agg(),
            ),
        ];
        for (d, _) in &mut v {
            *d = d.clone().with_namespace(ns.clone());
            d.ttl = ttl;
        }
        out.extend(v);
    }
    out
}

#[derive(Clone, Debug)]
enum Op {
    Put {
        s: u8,
        k: u16,
        n: u8,
        v: u8,
    },
    Add {
        s: u8,
        k: u16,
        n: u8,
        v: u8,
    },
    Get {
        s: u8,
        k: u16,
        n: u8,
    },
    MapPut {
        s: u8,
        k: u16,
        n: u8,
        u: u8,
        v: u8,
    },
    MapRemove {
        s: u8,
        k: u16,
        n: u8,
        u: u8,
    },
    ListUpdate {
        s: u8,
        k: u16,
        n: u8,
        len: u8,
    },
    Clear {
        s: u8,
        k: u16,
        n: u8,
    },
    Merge {
        s: u8,
        k: u16,
        target: u8,
        sources: Vec<u8>,
    },
    Advance {
        ms: u8,
    },
}

/// Keys with zero and 0xFF bytes (the RocksDB escape), short and long.
fn key(k: u16) -> Vec<u8> {
    match k % 4 {
        0 => k.to_be_bytes().to_vec(),
        1 => vec![0, (k >> 8) as u8, 0, k as u8],
        2 => format!("key-{k}").into_bytes(),
        _ => [&[0xFF; 3][..], format!("a-long-key-{k}-with-some-padding").as_bytes()].concat(),
    }
}

fn ns(n: u8) -> Vec<u8> {
    [&b""[..], b"\x00", b"w", b"w\x00\xff"][usize::from(n % 4)].to_vec()
}

fn user_key(u: u8) -> Vec<u8> {
    [&b""[..], b"\x00", b"a", b"a\x00", b"b", b"\xff\xff"][usize::from(u % 6)].to_vec()
}

/// Applies one op to a backend (errors from ops that do not fit the state are ignored: the
/// state is unchanged by them on both backends).
fn apply(b: &mut dyn KeyedStateBackend, hs: &[StateHandle], clock: &ManualClock, op: &Op) {
    let h = |s: &u8| hs[usize::from(*s) % hs.len()];
    let be = |v: &u8| (i64::from(*v) - 100).to_be_bytes().to_vec();
    let mut out = Vec::new();
    let _ = match op {
        Op::Put { s, k, n, v } => b.put(h(s), &key(*k), &ns(*n), &be(v)),
        Op::Add { s, k, n, v } => b.add(h(s), &key(*k), &ns(*n), &be(v)),
        Op::Get { s, k, n } => b.get(h(s), &key(*k), &ns(*n), &mut out).map(drop),
        Op::MapPut { s, k, n, u, v } => {
            b.map_put(h(s), &key(*k), &ns(*n), &user_key(*u), &vec![*v; usize::from(*v % 20)])
        }
        Op::MapRemove { s, k, n, u } => b.map_remove(h(s), &key(*k), &ns(*n), &user_key(*u)).map(drop),
        Op::ListUpdate { s, k, n, len } => {
            let elems: Vec<Vec<u8>> = (0..*len).map(|i| vec![i; usize::from(i) * 37]).collect();
            let refs: Vec<&[u8]> = elems.iter().map(|e| e.as_slice()).collect();
            b.list_update(h(s), &key(*k), &ns(*n), &refs)
        }
        Op::Clear { s, k, n } => b.clear(h(s), &key(*k), &ns(*n)),
        Op::Merge { s, k, target, sources } => {
            let srcs: Vec<Vec<u8>> = sources.iter().map(|n| ns(*n)).collect();
            let refs: Vec<&[u8]> = srcs.iter().map(|s| s.as_slice()).collect();
            b.merge_namespaces(h(s), &key(*k), &ns(*target), &refs)
        }
        Op::Advance { ms } => {
            clock.advance(i64::from(*ms));
            Ok(())
        }
    };
}

fn op() -> impl Strategy<Value = Op> {
    let s = 0u8..10;
    let k = 0u16..400;
    let n = 0u8..4;
    prop_oneof![
        6 => (s.clone(), k.clone(), n.clone(), any::<u8>()).prop_map(|(s, k, n, v)| Op::Put { s, k, n, v }),
        8 => (s.clone(), k.clone(), n.clone(), any::<u8>()).prop_map(|(s, k, n, v)| Op::Add { s, k, n, v }),
        3 => (s.clone(), k.clone(), n.clone()).prop_map(|(s, k, n)| Op::Get { s, k, n }),
        6 => (s.clone(), k.clone(), n.clone(), 0u8..6, any::<u8>()).prop_map(|(s, k, n, u, v)| Op::MapPut { s, k, n, u, v }),
        2 => (s.clone(), k.clone(), n.clone(), 0u8..6).prop_map(|(s, k, n, u)| Op::MapRemove { s, k, n, u }),
        2 => (s.clone(), k.clone(), n.clone(), 0u8..5).prop_map(|(s, k, n, len)| Op::ListUpdate { s, k, n, len }),
        2 => (s.clone(), k.clone(), n.clone()).prop_map(|(s, k, n)| Op::Clear { s, k, n }),
        3 => (s, k, n.clone(), proptest::collection::vec(n, 0..3))
            .prop_map(|(s, k, target, sources)| Op::Merge { s, k, target, sources }),
        2 => (0u8..30).prop_map(|ms| Op::Advance { ms }),
    ]
}

fn build(kind: BackendKind, max_p: u32, p: u32, i: u32, clock: &Arc<ManualClock>) -> (AnyBackend, Vec<StateHandle>) {
    let cfg = BackendConfig::for_subtask(max_p, p, i)
        .expect("config")
        .with_clock(clock.clone());
    let mut b = AnyBackend::new(kind, cfg);
    let hs = specs()
        .into_iter()
        .map(|(d, f)| b.register(d, f).expect("register"))
        .collect();
    (b, hs)
}

fn keyed_file_bytes(view: &dyn KeyedStateView, range: KeyGroupRange, compression: Compression) -> Vec<u8> {
    let storage = MemoryStorage::new();
    let opts = WriteOptions {
        compression,
        block_size: 4 << 10,
    };
    write_keyed_file(view, range, &storage, "keyed.skd", &opts).expect("write keyed file");
    storage.open("keyed.skd").expect("open").bytes().to_vec()
}

/// Runs `ops` on one heap and one RocksDB backend (same clock, same range) and checks
/// their snapshot streams and canonical files are identical. Returns the entry count.
fn same_bytes(max_p: u32, p: u32, i: u32, ops: &[Op]) -> usize {
    let clock = ManualClock::new(10_000);
    let (mut heap, hh) = build(BackendKind::Heap, max_p, p, i, &clock);
    let (mut rocks, rh) = build(BackendKind::RocksDb, max_p, p, i, &clock);
    let range = heap.key_group_range();
    for op in ops {
        // Keys outside the backend's range fail alike on both; skip them to keep ops useful.
        let k = match op {
            Op::Put { k, .. }
            | Op::Add { k, .. }
            | Op::Get { k, .. }
            | Op::MapPut { k, .. }
            | Op::MapRemove { k, .. }
            | Op::ListUpdate { k, .. }
            | Op::Clear { k, .. }
            | Op::Merge { k, .. } => Some(*k),
            Op::Advance { .. } => None,
        };
        if k.is_some_and(|k| !range.contains(key_group_for_key(&key(k), max_p))) {
            continue;
        }
        apply(&mut *heap, &hh, &clock, op);
        // The clock moves once per op, before both backends see it.
        if !matches!(op, Op::Advance { .. }) {
            apply(&mut *rocks, &rh, &clock, op);
        }
    }
    let hv = heap.snapshot(1).expect("heap snapshot");
    let rv = rocks.snapshot(1).expect("rocksdb snapshot");
    let he = MemoryView::collect(hv.as_ref(), range)
        .expect("collect")
        .entries()
        .to_vec();
    let re = MemoryView::collect(rv.as_ref(), range)
        .expect("collect")
        .entries()
        .to_vec();
    assert_eq!(re, he, "RocksDB and heap views differ");
    assert_eq!(rv.states(), hv.states());
    for c in [Compression::None, Compression::Lz4] {
        let a = keyed_file_bytes(hv.as_ref(), range, c);
        let b = keyed_file_bytes(rv.as_ref(), range, c);
        assert!(
            a == b,
            "canonical files differ ({} vs {} bytes, {c:?})",
            a.len(),
            b.len()
        );
    }
    he.len()
}

fn cases() -> u32 {
    std::env::var("BACKEND_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(12)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), max_shrink_iters: 300, ..ProptestConfig::default() })]

    #[test]
    fn canonical_files_from_both_backends_are_byte_identical(
        max_p in prop_oneof![Just(1u32), Just(128), Just(129), Just(4096)],
        p_seed in any::<u32>(),
        ops in proptest::collection::vec(op(), 1..400),
    ) {
        let p = 1 + p_seed % max_p.min(4);
        let i = (p_seed >> 8) % p;
        same_bytes(max_p, p, i, &ops);
    }
}

/// A fixed, larger run, so the comparison always covers thousands of entries.
#[test]
fn canonical_files_byte_identical_fixed_run() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &[3; 32]);
    let mut runner = TestRunner::new_with_rng(Config::default(), rng);
    let ops = proptest::collection::vec(op(), 15_000)
        .new_tree(&mut runner)
        .expect("tree")
        .current();
    for max_p in [128, 300] {
        let n = same_bytes(max_p, 1, 0, &ops);
        assert!(n > 1_000, "only {n} entries");
    }
}

// ---------------------------------------------------------------------------------------
// Savepoint switch through SnapshotWriter / SnapshotReader

const UID: &str = "op";

/// Fills `p` subtasks of `kind` with deterministic state of every kind; returns them.
fn filled_job(kind: BackendKind, max_p: u32, p: u32, clock: &Arc<ManualClock>) -> Vec<(AnyBackend, Vec<StateHandle>)> {
    let mut job: Vec<_> = (0..p).map(|i| build(kind, max_p, p, i, clock)).collect();
    let owner = |k: &[u8]| statekit_tests::owner(k, max_p, p);
    for round in 0..3u8 {
        for k in 0..600u16 {
            let kb = key(k);
            let (b, hs) = &mut job[owner(&kb)];
            let n = ns((k as u8).wrapping_add(round));
            let be = |v: i64| v.to_be_bytes().to_vec();
            for s in [0usize, 5] {
                b.put(hs[s], &kb, &n, &[round, k as u8]).expect("put");
            }
            for s in [1usize, 6] {
                b.add(hs[s], &kb, &n, &[round; 3]).expect("add");
            }
            for s in [2usize, 7] {
                b.map_put(hs[s], &kb, &n, &user_key(round.wrapping_add(k as u8)), &[k as u8])
                    .expect("map_put");
            }
            for s in [3usize, 4, 8, 9] {
                b.add(hs[s], &kb, &n, &be(i64::from(k))).expect("add");
            }
            if k % 11 == 0 {
                b.clear(hs[2], &kb, &n).expect("clear");
            }
        }
        clock.advance(15);
    }
    job
}

/// Every entry of a job, through fresh snapshots, in key-group order.
fn contents(job: &mut [(AnyBackend, Vec<StateHandle>)]) -> Vec<OwnedEntry> {
    let mut all = Vec::new();
    for (b, _) in job.iter_mut() {
        let v = b.snapshot(99).expect("snapshot");
        all.extend_from_slice(
            MemoryView::collect(v.as_ref(), v.key_group_range())
                .expect("collect")
                .entries(),
        );
    }
    all
}

fn write_savepoint(
    storage: &Arc<dyn Storage>,
    job: &mut [(AnyBackend, Vec<StateHandle>)],
    max_p: u32,
    id: u64,
) -> String {
    let writer = SnapshotWriter::new_savepoint(storage.clone(), "savepoints", "job", id).expect("writer");
    writer
        .register_operator(UID, job.len() as u32, max_p)
        .expect("register");
    // Take every cut first, then keep writing to the backends while the files are written:
    // the savepoint holds the state at the cut.
    let views: Vec<Arc<dyn KeyedStateView>> = job.iter_mut().map(|(b, _)| b.snapshot(id).expect("snapshot")).collect();
    for (b, hs) in job.iter_mut() {
        for k in 0..50u16 {
            let kb = key(k);
            if b.key_group_range().contains(key_group_for_key(&kb, max_p)) {
                b.put(hs[0], &kb, b"after-the-cut", b"written after the cut")
                    .expect("put");
            }
        }
    }
    std::thread::scope(|s| {
        for (i, v) in views.iter().enumerate() {
            let writer = &writer;
            s.spawn(move || {
                writer
                    .write_subtask(UID, i as u32, Some(v.as_ref()), None, false)
                    .expect("write subtask");
            });
        }
    });
    let dir = writer.dir().to_string();
    writer.finish().expect("finish");
    dir
}

fn restore_job(
    storage: &Arc<dyn Storage>,
    dir: &str,
    kind: BackendKind,
    max_p: u32,
    p: u32,
    clock: &Arc<ManualClock>,
) -> Vec<(AnyBackend, Vec<StateHandle>)> {
    let reader = SnapshotReader::open_in(storage.clone(), dir, None).expect("open savepoint");
    let report = reader.verify().expect("verify");
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    (0..p)
        .map(|i| {
            let cfg = BackendConfig::for_subtask(max_p, p, i)
                .expect("config")
                .with_clock(clock.clone());
            let mut b = AnyBackend::new(kind, cfg);
            reader.restore_keyed(UID, &mut *b).expect("restore keyed");
            let hs = specs()
                .into_iter()
                .map(|(d, f)| b.register(d, f).expect("register again"))
                .collect();
            (b, hs)
        })
        .collect()
}

/// Reads a sample of keys through the API of two jobs (possibly of different parallelism
/// and kind) and checks they answer alike.
fn same_answers(a: &mut [(AnyBackend, Vec<StateHandle>)], b: &mut [(AnyBackend, Vec<StateHandle>)], max_p: u32) {
    let (pa, pb) = (a.len() as u32, b.len() as u32);
    for k in (0..600u16).step_by(7) {
        let kb = key(k);
        let (ba, ha) = &mut a[statekit_tests::owner(&kb, max_p, pa)];
        let (bb, hb) = &mut b[statekit_tests::owner(&kb, max_p, pb)];
        for n in 0..4 {
            let n = ns(n);
            for s in [0usize, 3, 4, 5, 8, 9] {
                let (mut x, mut y) = (Vec::new(), Vec::new());
                let fx = ba.get(ha[s], &kb, &n, &mut x).expect("get");
                let fy = bb.get(hb[s], &kb, &n, &mut y).expect("get");
                assert_eq!((fx, x), (fy, y), "state {s} key {k}");
            }
            for s in [1usize, 6] {
                assert_eq!(
                    ba.list_get(ha[s], &kb, &n).expect("list"),
                    bb.list_get(hb[s], &kb, &n).expect("list")
                );
            }
            for s in [2usize, 7] {
                let (mut x, mut y) = (Vec::new(), Vec::new());
                ba.map_for_each(ha[s], &kb, &n, &mut |u, v| x.push((u.to_vec(), v.to_vec())))
                    .expect("map");
                bb.map_for_each(hb[s], &kb, &n, &mut |u, v| y.push((u.to_vec(), v.to_vec())))
                    .expect("map");
                assert_eq!(x, y, "map state {s} key {k}");
            }
        }
    }
}

#[test]
fn savepoint_from_rocksdb_restores_into_heap_and_back() {
    let max_p = 256;
    let clock = ManualClock::new(1_000_000);
    let storage: Arc<dyn Storage> = Arc::new(MemoryStorage::new());

    // RocksDB at parallelism 3 → savepoint → heap at parallelism 5.
    let mut rocks = filled_job(BackendKind::RocksDb, max_p, 3, &clock);
    let before = contents(&mut rocks);
    assert!(before.len() > 5_000, "{} entries", before.len());
    let sp1 = write_savepoint(&storage, &mut rocks, max_p, 1);
    let mut heap = restore_job(&storage, &sp1, BackendKind::Heap, max_p, 5, &clock);
    assert_eq!(contents(&mut heap), before, "heap restored from a RocksDB savepoint");

    // The heap job answers like a RocksDB job restored from the same savepoint at p=2.
    let mut rocks2 = restore_job(&storage, &sp1, BackendKind::RocksDb, max_p, 2, &clock);
    assert_eq!(contents(&mut rocks2), before);
    same_answers(&mut heap, &mut rocks2, max_p);

    // Heap at parallelism 5 → savepoint → RocksDB at parallelism 1, after more processing.
    clock.advance(20); // time moves on: more TTL entries have expired at the next cut
    for (b, hs) in heap.iter_mut() {
        for k in 0..600u16 {
            let kb = key(k);
            if b.key_group_range().contains(key_group_for_key(&kb, max_p)) {
                b.add(hs[1], &kb, b"after", b"x").expect("add");
            }
        }
    }
    let mid = contents(&mut heap);
    let sp2 = write_savepoint(&storage, &mut heap, max_p, 2);
    let mut back = restore_job(&storage, &sp2, BackendKind::RocksDb, max_p, 1, &clock);
    assert_eq!(contents(&mut back), mid, "RocksDB restored from a heap savepoint");
    same_answers(&mut heap, &mut back, max_p);

    // Savepoints of the same state from either backend hold identical keyed files. (Fresh
    // restores: the reads above refreshed TTL timestamps of `back`'s read-refreshed states.)
    let mut heap_again = restore_job(&storage, &sp2, BackendKind::Heap, max_p, 1, &clock);
    let mut rocks_again = restore_job(&storage, &sp2, BackendKind::RocksDb, max_p, 1, &clock);
    let sp3 = write_savepoint(&storage, &mut rocks_again, max_p, 3);
    let sp4 = write_savepoint(&storage, &mut heap_again, max_p, 4);
    let files = |dir: &str| -> Vec<(String, Vec<u8>)> {
        let mut out: Vec<(String, Vec<u8>)> = storage
            .list(dir)
            .expect("list")
            .into_iter()
            .filter(|e| e.name.ends_with(".skd"))
            .map(|e| {
                let path = format!("{dir}/{}", e.name);
                (e.name.clone(), storage.open(&path).expect("open").bytes().to_vec())
            })
            .collect();
        out.sort();
        out
    };
    let (f3, f4) = (files(&sp3), files(&sp4));
    assert_eq!(f3.len(), 1);
    assert!(f3 == f4, "keyed files of the same state differ between backends");
}
