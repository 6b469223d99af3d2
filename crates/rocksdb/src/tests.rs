//! Unit tests: errors, TTL, merging, the key layout, snapshots, the working directory.

use crate::layout::{
    apply_list_operands, encode_value, list_operands, prefix_successor, push_add_operand, push_element,
    push_list_operand, split_value, KeyLayout, ListElements,
};
use crate::{Compression, Profile, RocksDbBackend, RocksDbError, RocksDbOptions};
use proptest::prelude::*;
use statekit_core::{
    key_group_for_key, AggregateFn, BackendConfig, KeyGroupRange, KeyedStateBackend, KeyedStateView, ManualClock,
    MemoryView, OwnedEntry, StateDescriptor, StateError, StateFunctions, StateHandle, TtlConfig, TtlUpdateType,
    TypeSchema,
};
use std::sync::Arc;

fn i64_of(b: &[u8]) -> i64 {
    i64::from_be_bytes(b.try_into().expect("8 bytes"))
}

fn sum() -> StateFunctions {
    StateFunctions::Reduce(Arc::new(|a: &[u8], b: &[u8]| {
        (i64_of(a) + i64_of(b)).to_be_bytes().to_vec()
    }))
}

fn count_sum() -> StateFunctions {
    StateFunctions::Aggregate(AggregateFn {
        add: Arc::new(|acc: Option<&[u8]>, x: &[u8]| {
            let (c, s) = acc.map_or((0, 0), |a| (i64_of(&a[..8]), i64_of(&a[8..])));
            [(c + 1).to_be_bytes(), (s + i64_of(x)).to_be_bytes()].concat()
        }),
        merge: Arc::new(|a: &[u8], b: &[u8]| {
            [
                (i64_of(&a[..8]) + i64_of(&b[..8])).to_be_bytes(),
                (i64_of(&a[8..]) + i64_of(&b[8..])).to_be_bytes(),
            ]
            .concat()
        }),
    })
}

fn backend_with(max_p: u32, p: u32, i: u32, clock: Arc<ManualClock>) -> RocksDbBackend {
    let cfg = BackendConfig::for_subtask(max_p, p, i)
        .expect("config")
        .with_clock(clock);
    RocksDbBackend::new(cfg, RocksDbOptions::default()).expect("backend")
}

fn backend() -> (RocksDbBackend, Arc<ManualClock>) {
    let clock = ManualClock::new(1_000);
    (backend_with(128, 1, 0, clock.clone()), clock)
}

/// Registers one state of each kind: value, list, map, reducing, aggregating.
fn all_kinds(b: &mut RocksDbBackend, ttl: Option<TtlConfig>) -> [StateHandle; 5] {
    let t = |d: StateDescriptor| match ttl {
        Some(t) => d.with_ttl(t),
        None => d,
    };
    [
        b.register(
            t(StateDescriptor::value("v", TypeSchema::Bytes, TypeSchema::Bytes)),
            StateFunctions::None,
        ),
        b.register(
            t(StateDescriptor::list("l", TypeSchema::Bytes, TypeSchema::Bytes)),
            StateFunctions::None,
        ),
        b.register(
            t(StateDescriptor::map(
                "m",
                TypeSchema::Bytes,
                TypeSchema::Bytes,
                TypeSchema::Bytes,
            )),
            StateFunctions::None,
        ),
        b.register(
            t(StateDescriptor::reducing("r", TypeSchema::Bytes, TypeSchema::I64)),
            sum(),
        ),
        b.register(
            t(StateDescriptor::aggregating(
                "a",
                TypeSchema::Bytes,
                TypeSchema::Tuple(vec![TypeSchema::I64, TypeSchema::I64]),
            )),
            count_sum(),
        ),
    ]
    .map(|r| r.expect("register"))
}

/// Writes `n` keys named by `key` into the states of [`all_kinds`]: a value, a two-element
/// list in namespace `n`, a map entry, and `i` added to the reducing and aggregating states.
fn fill_all_kinds(b: &mut RocksDbBackend, [v, l, m, r, a]: [StateHandle; 5], n: u32, key: impl Fn(u32) -> String) {
    for i in 0..n {
        let k = key(i).into_bytes();
        b.put(v, &k, b"", &k).expect("put");
        b.add(l, &k, b"n", b"e").expect("add");
        b.add(l, &k, b"n", b"f").expect("add");
        b.map_put(m, &k, b"", b"u", &k).expect("put");
        b.add(r, &k, b"", &be(i.into())).expect("add");
        b.add(a, &k, b"", &be(i.into())).expect("add");
    }
}

fn get(b: &mut RocksDbBackend, h: StateHandle, k: &[u8], n: &[u8]) -> Option<Vec<u8>> {
    let mut out = vec![9, 9, 9];
    let found = b.get(h, k, n, &mut out).expect("get");
    if !found {
        assert!(out.is_empty(), "get must clear the output when absent");
    }
    found.then_some(out)
}

fn map_get(b: &mut RocksDbBackend, h: StateHandle, k: &[u8], n: &[u8], u: &[u8]) -> Option<Vec<u8>> {
    let mut out = vec![9];
    let found = b.map_get(h, k, n, u, &mut out).expect("map_get");
    found.then_some(out)
}

fn map_all(b: &mut RocksDbBackend, h: StateHandle, k: &[u8], n: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut got = Vec::new();
    let count = b
        .map_for_each(h, k, n, &mut |u, v| got.push((u.to_vec(), v.to_vec())))
        .expect("map_for_each");
    assert_eq!(count, got.len());
    got
}

fn entries(view: &dyn KeyedStateView) -> Vec<OwnedEntry> {
    MemoryView::collect(view, view.key_group_range())
        .expect("collect")
        .entries()
        .to_vec()
}

fn be(v: i64) -> Vec<u8> {
    v.to_be_bytes().to_vec()
}

// ---------------------------------------------------------------------------------------
// Basic operations of every kind

#[test]
fn every_kind_round_trips() {
    let (mut b, _) = backend();
    let [v, l, m, r, a] = all_kinds(&mut b, None);
    b.put(v, b"k", b"n", b"value").expect("put");
    assert_eq!(get(&mut b, v, b"k", b"n"), Some(b"value".to_vec()));
    assert_eq!(get(&mut b, v, b"k", b"other-ns"), None);
    b.put(v, b"k", b"n", b"").expect("put empty");
    assert_eq!(
        get(&mut b, v, b"k", b"n"),
        Some(Vec::new()),
        "an empty value is a value"
    );

    // Elements of every length class, including the LEB128 boundaries and the byte Flink
    // uses as its list delimiter.
    let elems: Vec<Vec<u8>> = [0usize, 1, 127, 128, 300, 16_384]
        .iter()
        .map(|&n| (0..n).map(|i| if i % 3 == 0 { b',' } else { i as u8 }).collect())
        .collect();
    for e in &elems {
        b.add(l, b"k", b"", e).expect("add");
    }
    assert_eq!(b.list_get(l, b"k", b"").expect("list"), elems);
    b.list_update(l, b"k", b"", &[b"x", b"", b"yz"]).expect("update");
    assert_eq!(
        b.list_get(l, b"k", b"").expect("list"),
        vec![b"x".to_vec(), vec![], b"yz".to_vec()]
    );
    b.add(l, b"k", b"", b"w").expect("add");
    assert_eq!(b.list_get(l, b"k", b"").expect("list").len(), 4);
    b.list_update(l, b"k", b"", &[]).expect("update to empty");
    assert!(!b.contains(l, b"k", b"").expect("contains"));

    for uk in [&b"b"[..], b"", b"a\x00", b"a", b"\xff"] {
        b.map_put(m, b"k", b"n", uk, uk).expect("map_put");
    }
    b.map_put(m, b"k", b"n2", b"zz", b"other namespace").expect("map_put");
    b.map_put(m, b"k\x00", b"n", b"zz", b"other key").expect("map_put");
    let got = map_all(&mut b, m, b"k", b"n");
    let keys: Vec<&[u8]> = got.iter().map(|(u, _)| u.as_slice()).collect();
    assert_eq!(
        keys,
        vec![&b""[..], b"a", b"a\x00", b"b", b"\xff"],
        "ascending user keys, nothing else"
    );
    assert_eq!(map_get(&mut b, m, b"k", b"n", b"a\x00"), Some(b"a\x00".to_vec()));
    assert!(b.map_remove(m, b"k", b"n", b"a").expect("remove"));
    assert!(!b.map_remove(m, b"k", b"n", b"a").expect("remove again"));
    assert_eq!(map_get(&mut b, m, b"k", b"n", b"a"), None);
    b.clear(m, b"k", b"n").expect("clear map");
    assert!(map_all(&mut b, m, b"k", b"n").is_empty());
    assert_eq!(
        map_all(&mut b, m, b"k", b"n2").len(),
        1,
        "clear touches one namespace only"
    );
    assert_eq!(
        map_all(&mut b, m, b"k\x00", b"n").len(),
        1,
        "clear touches one key only"
    );

    b.add(r, b"k", b"", &be(5)).expect("add");
    b.add(r, b"k", b"", &be(7)).expect("add");
    assert_eq!(get(&mut b, r, b"k", b""), Some(be(12)));
    b.put(r, b"k", b"", &be(1)).expect("put on reducing");
    b.add(r, b"k", b"", &be(1)).expect("add");
    assert_eq!(get(&mut b, r, b"k", b""), Some(be(2)));

    b.add(a, b"k", b"", &be(10)).expect("add");
    b.add(a, b"k", b"", &be(20)).expect("add");
    assert_eq!(get(&mut b, a, b"k", b""), Some([be(2), be(30)].concat()));
    b.clear(a, b"k", b"").expect("clear");
    assert_eq!(get(&mut b, a, b"k", b""), None);
}

#[test]
fn reregistering_returns_the_same_handle_and_keeps_data() {
    let (mut b, _) = backend();
    let [v, ..] = all_kinds(&mut b, None);
    b.put(v, b"k", b"", b"x").expect("put");
    let again = b
        .register(
            StateDescriptor::value("v", TypeSchema::Bytes, TypeSchema::Bytes),
            StateFunctions::None,
        )
        .expect("register again");
    assert_eq!(again, v);
    assert_eq!(b.handle("v"), Some(v));
    assert_eq!(b.descriptors().len(), 5);
    assert_eq!(get(&mut b, v, b"k", b""), Some(b"x".to_vec()));
}

#[test]
fn a_state_named_default_uses_the_default_column_family() {
    let (mut b, _) = backend();
    let h = b
        .register(
            StateDescriptor::list("default", TypeSchema::Bytes, TypeSchema::Bytes),
            StateFunctions::None,
        )
        .expect("register");
    b.add(h, b"k", b"", b"1").expect("add");
    b.add(h, b"k", b"", b"2").expect("add");
    assert_eq!(
        b.list_get(h, b"k", b"").expect("list"),
        vec![b"1".to_vec(), b"2".to_vec()]
    );
}

// ---------------------------------------------------------------------------------------
// Errors

#[test]
fn errors_match_the_heap_backend() {
    let (mut b, _) = backend();
    let [v, l, m, r, a] = all_kinds(&mut b, None);
    let mut out = Vec::new();
    let wrong = |r: Result<(), StateError>, expected: &str| match r {
        Err(StateError::WrongKind { expected: e, .. }) => assert_eq!(e, expected),
        other => panic!("expected WrongKind({expected}), got {other:?}"),
    };
    const SINGLE: &str = "a value, reducing or aggregating state";
    const LIST: &str = "a list state";
    const MAP: &str = "a map state";
    const ADDABLE: &str = "a list, reducing or aggregating state";
    for h in [l, m] {
        wrong(b.get(h, b"k", b"", &mut out).map(drop), SINGLE);
        wrong(b.put(h, b"k", b"", b"x"), SINGLE);
    }
    for h in [v, m] {
        wrong(b.add(h, b"k", b"", b"x"), ADDABLE);
        wrong(b.merge_namespaces(h, b"k", b"t", &[b"s"]), ADDABLE);
    }
    for h in [v, m, r, a] {
        wrong(b.list_for_each(h, b"k", b"", &mut |_| {}).map(drop), LIST);
        wrong(b.list_update(h, b"k", b"", &[b"x"]), LIST);
    }
    for h in [v, l, r, a] {
        wrong(b.map_get(h, b"k", b"", b"u", &mut out).map(drop), MAP);
        wrong(b.map_put(h, b"k", b"", b"u", b"x"), MAP);
        wrong(b.map_remove(h, b"k", b"", b"u").map(drop), MAP);
        wrong(b.map_for_each(h, b"k", b"", &mut |_, _| {}).map(drop), MAP);
    }
    // Clear and contains work on every kind.
    for h in [v, l, m, r, a] {
        b.clear(h, b"k", b"").expect("clear");
        assert!(!b.contains(h, b"k", b"").expect("contains"));
    }

    assert!(matches!(
        b.get(StateHandle(99), b"k", b"", &mut out),
        Err(StateError::UnknownState(_))
    ));
    assert!(matches!(
        b.contains(StateHandle(5), b"k", b""),
        Err(StateError::UnknownState(_))
    ));

    // Reducing/aggregating without functions.
    let r2 = b
        .register(
            StateDescriptor::reducing("r2", TypeSchema::Bytes, TypeSchema::I64),
            StateFunctions::None,
        )
        .expect("register");
    assert!(matches!(
        b.add(r2, b"k", b"", &be(1)),
        Err(StateError::MissingFunction(_))
    ));
    assert!(matches!(
        b.merge_namespaces(r2, b"k", b"t", &[b"s"]),
        Err(StateError::MissingFunction(_))
    ));
    let a2 = b
        .register(
            StateDescriptor::aggregating("a2", TypeSchema::Bytes, TypeSchema::I64),
            StateFunctions::None,
        )
        .expect("register");
    assert!(matches!(
        b.add(a2, b"k", b"", &be(1)),
        Err(StateError::MissingFunction(_))
    ));
    // Registering the function later makes it work.
    b.register(
        StateDescriptor::reducing("r2", TypeSchema::Bytes, TypeSchema::I64),
        sum(),
    )
    .expect("register function");
    b.add(r2, b"k", b"", &be(1)).expect("add");

    // Incompatible registrations.
    let inc = |r: Result<StateHandle, StateError>| assert!(matches!(r, Err(StateError::Incompatible(_))), "{r:?}");
    inc(b.register(
        StateDescriptor::list("v", TypeSchema::Bytes, TypeSchema::Bytes),
        StateFunctions::None,
    ));
    inc(b.register(
        StateDescriptor::value("v", TypeSchema::Utf8, TypeSchema::Bytes),
        StateFunctions::None,
    ));
    inc(b.register(StateDescriptor::value("x", TypeSchema::Bytes, TypeSchema::Bytes), sum()));
    inc(b.register(
        StateDescriptor::reducing("y", TypeSchema::Bytes, TypeSchema::I64),
        count_sum(),
    ));
}

#[test]
fn keys_outside_the_range_are_rejected() {
    let clock = ManualClock::new(0);
    let mut b = backend_with(128, 4, 1, clock);
    let [v, l, m, ..] = all_kinds(&mut b, None);
    let range = b.key_group_range();
    let foreign = (0..1000u32)
        .map(|i| format!("key-{i}").into_bytes())
        .find(|k| !range.contains(key_group_for_key(k, 128)))
        .expect("a foreign key");
    let oor = |r: Result<(), StateError>| assert!(matches!(r, Err(StateError::KeyGroupOutOfRange { .. })), "{r:?}");
    oor(b.put(v, &foreign, b"", b"x"));
    oor(b.get(v, &foreign, b"", &mut Vec::new()).map(drop));
    oor(b.add(l, &foreign, b"", b"x"));
    oor(b.clear(m, &foreign, b""));
    oor(b.map_put(m, &foreign, b"", b"u", b"x"));
    oor(b.contains(v, &foreign, b"").map(drop));
}

#[test]
fn bad_configs_are_rejected() {
    let cfg = |m: u32, r: KeyGroupRange| BackendConfig {
        max_parallelism: m,
        key_group_range: r,
        clock: ManualClock::new(0),
        key_group_scheme: Default::default(),
    };
    let err = |c: BackendConfig| RocksDbBackend::new(c, RocksDbOptions::default()).expect_err("must fail");
    assert!(matches!(
        err(cfg(0, KeyGroupRange::EMPTY)),
        StateError::InvalidParallelism(_)
    ));
    assert!(matches!(
        err(cfg(40_000, KeyGroupRange::all(10))),
        StateError::InvalidParallelism(_)
    ));
    assert!(matches!(
        err(cfg(8, KeyGroupRange::new(4, 8))),
        StateError::InvalidParallelism(_)
    ));
}

#[test]
fn disposed_backend_reports_errors_not_panics() {
    let (mut b, _) = backend();
    let [v, ..] = all_kinds(&mut b, None);
    let path = b.path().expect("path").to_path_buf();
    b.dispose();
    assert!(!path.exists(), "dispose removes the working directory");
    assert!(b.path().is_none());
    assert!(matches!(b.put(v, b"k", b"", b"x"), Err(StateError::UnknownState(_))));
    let r = b.register(
        StateDescriptor::value("new", TypeSchema::Bytes, TypeSchema::Bytes),
        StateFunctions::None,
    );
    match r {
        Err(StateError::Other(e)) => assert!(matches!(e.downcast_ref::<RocksDbError>(), Some(RocksDbError::Disposed))),
        other => panic!("{other:?}"),
    }
    assert!(b.snapshot(1).is_err());
}

// ---------------------------------------------------------------------------------------
// TTL

fn ttl(ms: u64, update_type: TtlUpdateType) -> Option<TtlConfig> {
    Some(TtlConfig {
        ttl_ms: ms,
        update_type,
    })
}

#[test]
fn ttl_values_expire_and_on_read_refreshes() {
    let (mut b, clock) = backend();
    let [v, _, _, r, a] = all_kinds(&mut b, ttl(100, TtlUpdateType::OnCreateAndWrite));
    let rw = b
        .register(
            StateDescriptor::value("rw", TypeSchema::Bytes, TypeSchema::Bytes).with_ttl(TtlConfig {
                ttl_ms: 100,
                update_type: TtlUpdateType::OnReadAndWrite,
            }),
            StateFunctions::None,
        )
        .expect("register");
    b.put(v, b"k", b"", b"x").expect("put");
    b.put(rw, b"k", b"", b"y").expect("put");
    b.add(r, b"k", b"", &be(1)).expect("add");
    b.add(a, b"k", b"", &be(1)).expect("add");
    clock.advance(60);
    assert_eq!(get(&mut b, v, b"k", b""), Some(b"x".to_vec()));
    assert_eq!(get(&mut b, rw, b"k", b""), Some(b"y".to_vec()), "read at 60 refreshes");
    b.add(r, b"k", b"", &be(1)).expect("add refreshes");
    clock.advance(60); // 120 after the first write
    assert_eq!(get(&mut b, v, b"k", b""), None, "expired at 100");
    assert!(!b.contains(v, b"k", b"").expect("contains"));
    assert_eq!(
        get(&mut b, rw, b"k", b""),
        Some(b"y".to_vec()),
        "refreshed at 60, lives to 160"
    );
    assert_eq!(get(&mut b, r, b"k", b""), Some(be(2)), "written at 60");
    assert_eq!(get(&mut b, a, b"k", b""), None);
    // An expired accumulator is not folded into.
    b.add(a, b"k", b"", &be(5)).expect("add");
    assert_eq!(get(&mut b, a, b"k", b""), Some([be(1), be(5)].concat()));
    clock.advance(100);
    b.add(r, b"k", b"", &be(7)).expect("add");
    assert_eq!(
        get(&mut b, r, b"k", b""),
        Some(be(7)),
        "an expired value is replaced, not reduced"
    );
    // The expired value was purged by the read.
    assert!(b.raw_entries(v).is_empty());
}

#[test]
fn ttl_list_elements_and_map_entries_expire_one_by_one() {
    let (mut b, clock) = backend();
    let [_, l, m, _, _] = all_kinds(&mut b, ttl(100, TtlUpdateType::OnCreateAndWrite));
    b.add(l, b"k", b"", b"old").expect("add");
    b.map_put(m, b"k", b"", b"old", b"1").expect("put");
    clock.advance(50);
    b.add(l, b"k", b"", b"new").expect("add");
    b.map_put(m, b"k", b"", b"new", b"2").expect("put");
    clock.advance(60);
    assert_eq!(b.list_get(l, b"k", b"").expect("list"), vec![b"new".to_vec()]);
    assert_eq!(map_all(&mut b, m, b"k", b""), vec![(b"new".to_vec(), b"2".to_vec())]);
    assert_eq!(map_get(&mut b, m, b"k", b"", b"old"), None);
    assert!(
        !b.map_remove(m, b"k", b"", b"old").expect("remove"),
        "expired entries do not count as removed"
    );
    let view = b.snapshot(1).expect("snapshot");
    let got = entries(view.as_ref());
    assert_eq!(got.len(), 2);
    assert!(got.iter().all(|e| e.timestamp == Some(1_050)), "{got:?}");
    clock.advance(50);
    assert!(b.list_get(l, b"k", b"").expect("list").is_empty());
    assert!(!b.contains(m, b"k", b"").expect("contains"));
    assert!(b.snapshot(2).map(|v| entries(v.as_ref())).expect("snapshot").is_empty());
    // The view taken before still holds the state at its cut.
    assert_eq!(entries(view.as_ref()).len(), 2);
}

#[test]
fn ttl_on_read_refreshes_lists_and_maps() {
    let (mut b, clock) = backend();
    let [_, l, m, _, _] = all_kinds(&mut b, ttl(100, TtlUpdateType::OnReadAndWrite));
    b.add(l, b"k", b"", b"e").expect("add");
    b.map_put(m, b"k", b"", b"u", b"v").expect("put");
    b.map_put(m, b"k", b"", b"w", b"v").expect("put");
    clock.advance(80);
    assert_eq!(b.list_get(l, b"k", b"").expect("list").len(), 1);
    assert_eq!(map_all(&mut b, m, b"k", b"").len(), 2);
    clock.advance(80);
    assert_eq!(b.list_get(l, b"k", b"").expect("list").len(), 1, "refreshed at 80");
    assert_eq!(map_get(&mut b, m, b"k", b"", b"u"), Some(b"v".to_vec()));
    clock.advance(90);
    // "u" was read at 160, "w" last at 80.
    assert_eq!(map_all(&mut b, m, b"k", b""), vec![(b"u".to_vec(), b"v".to_vec())]);
}

#[test]
fn adding_and_removing_a_ttl_restamps_stored_values() {
    let (mut b, clock) = backend();
    let [v, l, m, _, _] = all_kinds(&mut b, None);
    b.put(v, b"k", b"", b"x").expect("put");
    b.add(l, b"k", b"", b"e1").expect("add");
    b.add(l, b"k", b"", b"e2").expect("add");
    b.map_put(m, b"k", b"", b"u", b"y").expect("put");
    clock.advance(500);
    let with_ttl = |d: StateDescriptor| d.with_ttl(TtlConfig::new(100));
    b.register(
        with_ttl(StateDescriptor::value("v", TypeSchema::Bytes, TypeSchema::Bytes)),
        StateFunctions::None,
    )
    .expect("add ttl");
    b.register(
        with_ttl(StateDescriptor::list("l", TypeSchema::Bytes, TypeSchema::Bytes)),
        StateFunctions::None,
    )
    .expect("add ttl");
    b.register(
        with_ttl(StateDescriptor::map(
            "m",
            TypeSchema::Bytes,
            TypeSchema::Bytes,
            TypeSchema::Bytes,
        )),
        StateFunctions::None,
    )
    .expect("add ttl");
    // Stamped with the time of the registration (1500), not expired.
    let view = b.snapshot(1).expect("snapshot");
    let got = entries(view.as_ref());
    assert_eq!(got.len(), 4);
    assert!(got.iter().all(|e| e.timestamp == Some(1_500)), "{got:?}");
    assert_eq!(b.list_get(l, b"k", b"").expect("list").len(), 2);
    clock.advance(100);
    assert_eq!(get(&mut b, v, b"k", b""), None);
    b.add(l, b"k", b"", b"e3").expect("add");
    clock.advance(10);
    // Removing the TTL makes what was not purged visible again (as on the heap): the add at
    // 1600 dropped the two elements that had expired by then, the map entry stays.
    b.register(
        StateDescriptor::list("l", TypeSchema::Bytes, TypeSchema::Bytes),
        StateFunctions::None,
    )
    .expect("remove ttl");
    assert_eq!(b.list_get(l, b"k", b"").expect("list"), vec![b"e3".to_vec()]);
    b.register(
        StateDescriptor::map("m", TypeSchema::Bytes, TypeSchema::Bytes, TypeSchema::Bytes),
        StateFunctions::None,
    )
    .expect("remove ttl");
    assert_eq!(map_all(&mut b, m, b"k", b""), vec![(b"u".to_vec(), b"y".to_vec())]);
    let view = b.snapshot(2).expect("snapshot");
    assert!(entries(view.as_ref())
        .iter()
        .all(|e| e.timestamp.is_none() || e.state != l.0));
}

#[test]
fn purge_expired_removes_everything_expired() {
    let (mut b, clock) = backend();
    let [v, l, m, _, _] = all_kinds(&mut b, ttl(100, TtlUpdateType::OnCreateAndWrite));
    for i in 0..50u8 {
        b.put(v, &[i], b"", b"x").expect("put");
        b.add(l, &[i], b"", b"x").expect("add");
        b.map_put(m, &[i], b"", b"u", b"x").expect("put");
    }
    clock.advance(60);
    for i in 0..10u8 {
        b.add(l, &[i], b"", b"y").expect("add");
    }
    clock.advance(60);
    let removed = b.purge_expired().expect("purge");
    assert_eq!(removed, 50 + 40 + 50);
    assert!(b.raw_entries(v).is_empty());
    assert_eq!(b.raw_entries(l).len(), 10);
    assert_eq!(b.list_get(l, &[3], b"").expect("list"), vec![b"y".to_vec()]);
}

// ---------------------------------------------------------------------------------------
// Merging namespaces

#[test]
fn merge_namespaces_of_lists_reducing_and_aggregating() {
    let (mut b, _) = backend();
    let [_, l, _, r, a] = all_kinds(&mut b, None);
    b.add(l, b"k", b"t", b"t1").expect("add");
    b.add(l, b"k", b"s1", b"a").expect("add");
    b.add(l, b"k", b"s1", b"b").expect("add");
    b.add(l, b"k", b"s2", b"c").expect("add");
    b.merge_namespaces(l, b"k", b"t", &[b"s1", b"missing", b"s2", b"s1", b"t"])
        .expect("merge");
    assert_eq!(
        b.list_get(l, b"k", b"t").expect("list"),
        [&b"t1"[..], b"a", b"b", b"c"].map(<[u8]>::to_vec).to_vec()
    );
    assert!(b.list_get(l, b"k", b"s1").expect("list").is_empty());
    assert!(!b.contains(l, b"k", b"s2").expect("contains"));
    // Into an absent target.
    b.add(l, b"k", b"s3", b"d").expect("add");
    b.merge_namespaces(l, b"k", b"new", &[b"s3"]).expect("merge");
    assert_eq!(b.list_get(l, b"k", b"new").expect("list"), vec![b"d".to_vec()]);

    b.add(r, b"k", b"s1", &be(1)).expect("add");
    b.add(r, b"k", b"s2", &be(2)).expect("add");
    b.merge_namespaces(r, b"k", b"t", &[b"s1", b"s2"]).expect("merge");
    assert_eq!(get(&mut b, r, b"k", b"t"), Some(be(3)));
    b.add(r, b"k", b"s1", &be(10)).expect("add");
    b.merge_namespaces(r, b"k", b"t", &[b"s1"]).expect("merge");
    assert_eq!(get(&mut b, r, b"k", b"t"), Some(be(13)));
    assert_eq!(get(&mut b, r, b"k", b"s1"), None);

    b.add(a, b"k", b"s1", &be(1)).expect("add");
    b.add(a, b"k", b"s1", &be(2)).expect("add");
    b.add(a, b"k", b"t", &be(4)).expect("add");
    b.merge_namespaces(a, b"k", b"t", &[b"s1"]).expect("merge");
    assert_eq!(get(&mut b, a, b"k", b"t"), Some([be(3), be(7)].concat()));
    // Nothing to merge: the target stays as it is.
    b.merge_namespaces(a, b"k", b"t", &[b"nothing"]).expect("merge");
    assert_eq!(get(&mut b, a, b"k", b"t"), Some([be(3), be(7)].concat()));
}

#[test]
fn merge_namespaces_skips_expired_sources() {
    let (mut b, clock) = backend();
    let [_, l, _, r, _] = all_kinds(&mut b, ttl(100, TtlUpdateType::OnCreateAndWrite));
    b.add(l, b"k", b"s", b"old").expect("add");
    b.add(r, b"k", b"s", &be(1)).expect("add");
    b.add(r, b"k", b"t", &be(5)).expect("add");
    clock.advance(150);
    b.add(l, b"k", b"s", b"new").expect("add");
    b.add(r, b"k", b"s2", &be(2)).expect("add");
    b.merge_namespaces(l, b"k", b"t", &[b"s"]).expect("merge");
    b.merge_namespaces(r, b"k", b"t", &[b"s", b"s2"]).expect("merge");
    assert_eq!(b.list_get(l, b"k", b"t").expect("list"), vec![b"new".to_vec()]);
    assert_eq!(
        get(&mut b, r, b"k", b"t"),
        Some(be(2)),
        "expired target and source are dropped"
    );
    let view = b.snapshot(1).expect("snapshot");
    let ts: Vec<Option<i64>> = entries(view.as_ref()).iter().map(|e| e.timestamp).collect();
    assert_eq!(
        ts,
        vec![Some(1_150), Some(1_150)],
        "the kept element keeps its stamp; the merged value is new"
    );
}

// ---------------------------------------------------------------------------------------
// Snapshots and restore

#[test]
fn snapshot_is_isolated_from_later_writes_and_outlives_the_backend() {
    let (mut b, _) = backend();
    let [v, l, m, r, _] = all_kinds(&mut b, None);
    for i in 0..300u32 {
        let k = i.to_be_bytes();
        b.put(v, &k, b"", &k).expect("put");
        b.add(l, &k, b"", b"e1").expect("add");
        b.map_put(m, &k, b"n", b"u", &k).expect("put");
        b.add(r, &k, b"", &be(1)).expect("add");
    }
    b.flush().expect("flush");
    let view = b.snapshot(7).expect("snapshot");
    let before = entries(view.as_ref());
    assert_eq!(before.len(), 1_200);

    // A reader thread walks the view again and again while the task thread rewrites,
    // deletes, appends, registers a new state and flushes.
    let reader = {
        let view = Arc::clone(&view);
        let before = before.clone();
        std::thread::spawn(move || {
            for _ in 0..5 {
                assert_eq!(entries(view.as_ref()), before);
            }
        })
    };
    let extra = b
        .register(
            StateDescriptor::value("later", TypeSchema::Bytes, TypeSchema::Bytes),
            StateFunctions::None,
        )
        .expect("register");
    for round in 0..3u8 {
        for i in 0..300u32 {
            let k = i.to_be_bytes();
            b.put(v, &k, b"", &[round]).expect("put");
            b.add(l, &k, b"", &[round]).expect("add");
            b.map_put(m, &k, b"n", &[round], b"x").expect("put");
            b.add(r, &k, b"", &be(1)).expect("add");
            b.put(extra, &k, b"", b"x").expect("put");
            if i % 7 == 0 {
                b.clear(m, &k, b"n").expect("clear");
                b.clear(v, &k, b"").expect("clear");
            }
        }
        b.flush().expect("flush");
    }
    reader.join().expect("reader");
    assert_eq!(entries(view.as_ref()), before);
    assert_eq!(
        view.states().len(),
        5,
        "states registered after the cut are not in the view"
    );
    let after = b.snapshot(8).expect("snapshot");
    assert_ne!(entries(after.as_ref()), before);

    // The view keeps the database (and its directory) alive after the backend is gone.
    let path = b.path().expect("path").to_path_buf();
    drop(b);
    assert!(path.exists());
    assert_eq!(entries(view.as_ref()), before);
    drop(after);
    drop(view);
    assert!(!path.exists(), "the last view removes the working directory");
}

#[test]
fn snapshot_restores_into_another_parallelism() {
    let clock = ManualClock::new(0);
    let mut src = backend_with(300, 1, 0, clock.clone());
    let handles = all_kinds(&mut src, ttl(1_000, TtlUpdateType::OnCreateAndWrite));
    fill_all_kinds(&mut src, handles, 500, |i| format!("key-{i}"));
    let view = src.snapshot(1).expect("snapshot");
    let all = entries(view.as_ref());
    assert_eq!(all.len(), 500 * 6);
    let mut got = Vec::new();
    for i in 0..3 {
        let mut dst = backend_with(300, 3, i, clock.clone());
        dst.restore(&[view.as_ref()]).expect("restore");
        let h = dst.handle("r").expect("restored state");
        dst.register(
            StateDescriptor::reducing("r", TypeSchema::Bytes, TypeSchema::I64).with_ttl(TtlConfig::new(1_000)),
            sum(),
        )
        .expect("register function");
        let k = (0..500)
            .map(|i| format!("key-{i}").into_bytes())
            .find(|k| dst.key_group_range().contains(key_group_for_key(k, 300)))
            .expect("a key of this subtask");
        let before = get(&mut dst, h, &k, b"").expect("value");
        dst.add(h, &k, b"", &be(1)).expect("add after restore");
        assert_eq!(get(&mut dst, h, &k, b""), Some(be(i64_of(&before) + 1)));
        dst.put(h, &k, b"", &before).expect("put back");
        got.extend(entries(dst.snapshot(2).expect("snapshot").as_ref()));
    }
    assert_eq!(got, all, "rescaled subtasks hold exactly the old state, in order");
}

/// A restore larger than one write batch goes through SST files (`crate::ingest`): every
/// kind, with TTL, comes back exactly; restoring the same view again into the non-empty
/// backend behaves as writing every entry would (values replaced, lists appended), as on the
/// heap; no SST file is left in the working directory.
#[test]
fn a_large_restore_is_ingested_from_sst_files_with_the_semantics_of_writes() {
    let clock = ManualClock::new(0);
    let mut src = backend_with(128, 1, 0, clock.clone());
    let [v, l, m, r, a] = all_kinds(&mut src, ttl(1_000_000, TtlUpdateType::OnCreateAndWrite));
    let pad = vec![7u8; 200];
    let n = 15_000u32;
    for i in 0..n {
        let k = format!("key-{i:05}").into_bytes();
        src.put(v, &k, b"", &[k.as_slice(), &pad].concat()).expect("put");
        src.add(l, &k, b"n", &pad).expect("add");
        src.add(l, &k, b"n", b"f").expect("add");
        src.map_put(m, &k, b"", b"u", &pad).expect("put");
        src.map_put(m, &k, b"", b"w", &k).expect("put");
        src.add(r, &k, b"", &be(i.into())).expect("add");
        src.add(a, &k, b"", &be(i.into())).expect("add");
    }
    let view = src.snapshot(1).expect("snapshot");
    let all = entries(view.as_ref());
    assert_eq!(all.len(), n as usize * 7);
    // Far more than one batch.
    let bytes: usize = all.iter().map(|e| e.key.len() + e.value.len()).sum();
    assert!(bytes > 2 * crate::ingest::BATCH_BYTES, "{bytes} bytes");

    let mut dst = backend_with(128, 1, 0, clock.clone());
    dst.restore(&[view.as_ref()]).expect("restore");
    assert_eq!(entries(dst.snapshot(2).expect("snapshot").as_ref()), all);
    let db = dst.path().expect("path").to_path_buf();
    let work = db.parent().expect("working dir");
    let leftovers: Vec<_> = std::fs::read_dir(work)
        .expect("list")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("ingest-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    assert!(
        dst.ingested_files >= 5,
        "one file per state at least: {}",
        dst.ingested_files
    );
    let l0 = dst.level0_files().expect("level 0");
    assert!(
        l0 <= 5,
        "ingested files go below level 0, not through the memtable: {l0} level-0 files"
    );

    // Once more into the same backend: lists are appended, everything else replaced.
    let before = dst.ingested_files;
    dst.restore(&[view.as_ref()]).expect("restore again");
    assert!(dst.ingested_files > before);
    let twice = entries(dst.snapshot(3).expect("snapshot").as_ref());
    let mut expected = Vec::new();
    let mut i = 0;
    while i < all.len() {
        let e = &all[i];
        if e.state == 1 {
            let j = all[i..]
                .iter()
                .position(|x| x.state != 1 || x.key != e.key || x.namespace != e.namespace)
                .map_or(all.len(), |p| i + p);
            expected.extend_from_slice(&all[i..j]);
            expected.extend_from_slice(&all[i..j]);
            i = j;
        } else {
            expected.push(e.clone());
            i += 1;
        }
    }
    assert_eq!(twice.len(), expected.len());
    assert_eq!(twice, expected);
}

/// A parallel bulk load (each thread the SST files of a share of the key groups, ingested
/// together) restores exactly what a plain restore does, every kind with TTL; into a backend
/// that already holds data it falls back to the plain restore (lists appended).
#[test]
fn a_parallel_bulk_load_restores_what_a_plain_restore_does() {
    let clock = ManualClock::new(0);
    let mut src = backend_with(128, 1, 0, clock.clone());
    let handles = all_kinds(&mut src, ttl(1_000_000, TtlUpdateType::OnCreateAndWrite));
    fill_all_kinds(&mut src, handles, 3_000, |i| format!("key-{i:05}"));
    let view = src.snapshot(1).expect("snapshot");
    let all = entries(view.as_ref());
    for threads in [1, 3, 200] {
        let mut dst = backend_with(128, 1, 0, clock.clone());
        let n = dst.bulk_load(view.as_ref(), threads).expect("bulk load");
        assert_eq!(n as usize, all.len(), "{threads} threads");
        assert_eq!(
            entries(dst.snapshot(2).expect("snapshot").as_ref()),
            all,
            "{threads} threads"
        );
        if threads > 1 {
            assert!(
                dst.ingested_files >= 5,
                "{threads} threads: {} files",
                dst.ingested_files
            );
        }
        let work = dst.path().expect("path").parent().expect("working dir").to_path_buf();
        assert!(
            std::fs::read_dir(&work)
                .expect("list")
                .flatten()
                .all(|e| !e.file_name().to_string_lossy().starts_with("ingest-")),
            "no scratch left"
        );
        // Again, into the now non-empty backend: a plain restore, lists appended.
        dst.bulk_load(view.as_ref(), threads).expect("again");
        let twice = entries(dst.snapshot(3).expect("snapshot").as_ref());
        assert_eq!(twice.len(), all.len() + 3_000 * 2, "{threads} threads");
    }
}

/// The CRC32 of a bulk-loaded SST file is taken as it is written (RocksDB drops the file
/// from the page cache; reading it back would read it from disk): a native cut knows the CRC
/// of every ingested file, each the CRC of the file's bytes, and uploads record it; a file
/// compacted away is forgotten, and a compacted file's CRC is computed from its bytes.
#[test]
fn bulk_loaded_files_carry_the_crc_taken_while_writing_them() {
    let clock = ManualClock::new(0);
    let mut src = backend_with(128, 1, 0, clock.clone());
    let v = src
        .register(
            StateDescriptor::value("v", TypeSchema::Bytes, TypeSchema::Bytes),
            StateFunctions::None,
        )
        .expect("register");
    // ~12 MB that does not compress: files well past the hashing lag.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut value = vec![0u8; 1024];
    for i in 0..12_000u32 {
        for b in value.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        src.put(v, format!("key-{i:05}").as_bytes(), b"", &value).expect("put");
    }
    let view = src.snapshot(1).expect("snapshot");
    let mut dst = backend_with(128, 1, 0, clock.clone());
    dst.bulk_load(view.as_ref(), 2).expect("bulk load");
    assert!(dst.ingested_files >= 2, "{} files", dst.ingested_files);
    let cut = dst.native_snapshot(2).expect("cut");
    let ssts: Vec<_> = cut
        .files()
        .iter()
        .filter(|f| f.name.ends_with(".sst"))
        .cloned()
        .collect();
    assert_eq!(ssts.len() as u64, dst.ingested_files);
    for f in &ssts {
        let bytes = std::fs::read(cut.dir().join(&f.name)).expect("read");
        assert!(bytes.len() > 2 << 20, "{}: {} bytes", f.name, bytes.len());
        assert_eq!(
            cut.known_crcs.get(&f.name),
            Some(&crc32fast::hash(&bytes)),
            "{}",
            f.name
        );
    }
    let out = tempfile::tempdir().expect("tempdir");
    let storage: Arc<dyn statekit_core::storage::Storage> =
        Arc::new(statekit_core::storage::LocalStorage::new(out.path()));
    let target = statekit_format::NativeTarget {
        snapshot: storage,
        exclusive_dir: "x".into(),
        job: None,
        shared_dir: String::new(),
    };
    let handle = cut.upload(&target).expect("upload");
    for f in &handle.files {
        let bytes = std::fs::read(out.path().join(&f.file.path)).expect("read");
        assert_eq!(f.crc32, crc32fast::hash(&bytes), "{}", f.name);
    }
    drop(cut);
    // Keys overwritten across the whole range and compacted: the ingested files are
    // rewritten, their CRCs forgotten, and the new files' CRCs computed from their bytes.
    let known_before = ssts.len();
    let dv = dst
        .register(
            StateDescriptor::value("v", TypeSchema::Bytes, TypeSchema::Bytes),
            StateFunctions::None,
        )
        .expect("register");
    for i in (0..12_000u32).step_by(100) {
        dst.put(dv, format!("key-{i:05}").as_bytes(), b"", b"new").expect("put");
    }
    dst.compact().expect("compact");
    let cut = dst.native_snapshot(3).expect("cut");
    assert!(cut.known_crcs.len() < known_before, "{:?}", cut.known_crcs);
    let written = dst.written_crc_count();
    assert_eq!(written, cut.known_crcs.len(), "forgotten once gone from the database");
    let out = tempfile::tempdir().expect("tempdir");
    let target = statekit_format::NativeTarget {
        snapshot: Arc::new(statekit_core::storage::LocalStorage::new(out.path())),
        exclusive_dir: "x".into(),
        job: None,
        shared_dir: String::new(),
    };
    for f in &cut.upload(&target).expect("upload").files {
        let bytes = std::fs::read(out.path().join(&f.file.path)).expect("read");
        assert_eq!(f.crc32, crc32fast::hash(&bytes), "{}", f.name);
    }
}

#[test]
fn restore_checks_max_parallelism_and_key_groups() {
    let (mut b, clock) = backend();
    let descs = vec![StateDescriptor::value("v", TypeSchema::Bytes, TypeSchema::Bytes)];
    let other = MemoryView::new(64, KeyGroupRange::all(64), descs.clone(), Vec::new());
    assert!(matches!(b.restore(&[&other]), Err(StateError::Restore(_))));
    let wrong_kg = (key_group_for_key(b"k", 128) + 1) % 128;
    let misfiled = MemoryView::new(
        128,
        KeyGroupRange::all(128),
        descs,
        vec![OwnedEntry {
            key_group: wrong_kg,
            state: 0,
            key: b"k".to_vec(),
            namespace: Vec::new(),
            user_key: None,
            value: b"x".to_vec(),
            timestamp: None,
        }],
    );
    assert!(matches!(b.restore(&[&misfiled]), Err(StateError::Restore(_))));
    // Expired entries are skipped on restore.
    let ttl_desc =
        vec![StateDescriptor::value("t", TypeSchema::Bytes, TypeSchema::Bytes).with_ttl(TtlConfig::new(100))];
    let e = |k: &[u8], ts| OwnedEntry {
        key_group: key_group_for_key(k, 128),
        state: 0,
        key: k.to_vec(),
        namespace: Vec::new(),
        user_key: None,
        value: b"x".to_vec(),
        timestamp: Some(ts),
    };
    let view = MemoryView::new(
        128,
        KeyGroupRange::all(128),
        ttl_desc,
        vec![e(b"old", 800), e(b"new", 950)],
    );
    let mut b2 = backend_with(128, 1, 0, clock);
    b2.restore(&[&view]).expect("restore");
    let got = entries(b2.snapshot(1).expect("snapshot").as_ref());
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].key, b"new");
    assert_eq!(got[0].timestamp, Some(950));
}

// ---------------------------------------------------------------------------------------
// Key layout

#[test]
fn key_group_prefix_is_one_byte_up_to_128_then_two() {
    for (max_p, width) in [(1u32, 1usize), (128, 1), (129, 2), (32_768, 2)] {
        let clock = ManualClock::new(0);
        let mut b = backend_with(max_p, 1, 0, clock);
        assert_eq!(b.layout().prefix_bytes(), width);
        let [v, _, m, ..] = all_kinds(&mut b, None);
        let keys: Vec<Vec<u8>> = (0..200u32).map(|i| format!("k{i}").into_bytes()).collect();
        for k in &keys {
            b.put(v, k, b"ns", b"x").expect("put");
            b.map_put(m, k, b"ns", b"user", b"x").expect("put");
        }
        let raw = b.raw_entries(v);
        assert_eq!(raw.len(), keys.len());
        let mut last_kg = 0;
        for (stored, _) in &raw {
            let d = b.layout().decode(stored).expect("decode");
            assert_eq!(d.key_group, key_group_for_key(&d.key, max_p));
            assert!(d.key_group >= last_kg, "column family iterates in key-group order");
            last_kg = d.key_group;
            let mut expect = Vec::new();
            if width == 1 {
                expect.push(d.key_group as u8);
            } else {
                expect.extend_from_slice(&(d.key_group as u16).to_be_bytes());
            }
            expect.extend_from_slice(&d.key);
            expect.extend_from_slice(&[0, 0]);
            expect.extend_from_slice(b"ns\x00\x00");
            assert_eq!(
                stored, &expect,
                "kg ‖ key ‖ 00 00 ‖ ns ‖ 00 00 (no zero bytes to escape)"
            );
        }
        for (stored, _) in b.raw_entries(m) {
            assert!(stored.ends_with(b"ns\x00\x00user"));
        }
    }
}

#[test]
fn layout_examples() {
    let l = KeyLayout::for_max_parallelism(128);
    let mut buf = Vec::new();
    l.encode_map_key(&mut buf, 5, b"a\x00b", b"", b"\x00u");
    assert_eq!(buf, b"\x05a\x00\xffb\x00\x00\x00\x00\x00u");
    let d = l.decode(&buf).expect("decode");
    assert_eq!(
        (d.key_group, &d.key[..], &d.namespace[..], &d.user_key[..]),
        (5, &b"a\x00b"[..], &b""[..], &b"\x00u"[..])
    );
    let l2 = KeyLayout::for_max_parallelism(129);
    l2.encode_key_ns(&mut buf, 300, b"", b"");
    assert_eq!(buf, b"\x01\x2c\x00\x00\x00\x00");
    for bad in [&b""[..], b"\x01abc", b"\x01a\x00\x01", b"\x01a\x00\x00b"] {
        assert!(l.decode(bad).is_err(), "{bad:?}");
    }
    assert_eq!(prefix_successor(b"\x01\xff"), Some(b"\x02".to_vec()));
    assert_eq!(prefix_successor(b"\xff\xff"), None);

    let mut v = Vec::new();
    encode_value(&mut v, Some(-2), b"xy");
    assert_eq!(v, [(-2i64).to_be_bytes().as_slice(), b"xy"].concat());
    assert_eq!(split_value(&v, true).expect("split"), (-2, &b"xy"[..]));
    assert!(split_value(b"short", true).is_err());
    let mut list = Vec::new();
    push_element(&mut list, None, &[7; 200]);
    assert_eq!(&list[..2], &[0xC8, 0x01], "LEB128 length");
    assert!(
        ListElements::new(&list[..150], false).any(|e| e.is_err()),
        "cut-off element"
    );
    assert!(
        ListElements::new(&[0xFF; 12], false).any(|e| e.is_err()),
        "overlong length"
    );
}

#[test]
fn list_operands_expire_then_append() {
    let mut base = Vec::new();
    push_element(&mut base, Some(100), b"a");
    push_element(&mut base, Some(150), b"b");
    let mut op1 = Vec::new();
    push_add_operand(&mut op1, Some((205, 100)), b"c"); // drops a (100 + 100 <= 205)
    let mut op2 = Vec::new();
    push_add_operand(&mut op2, Some((210, 100)), b"d");
    let mut moved = Vec::new();
    push_element(&mut moved, Some(50), b"old-but-moved");
    push_list_operand(&mut op2, true, Some((260, 100)), &moved); // drops b (150 + 100 <= 260)
    let decoded: Vec<_> = list_operands(&op2).collect::<Result<_, _>>().expect("operands");
    assert_eq!(decoded.len(), 2);
    assert_eq!(decoded[1].expire, Some((260, 100)));
    let all = |ops: &[&[u8]]| -> Vec<(i64, Vec<u8>)> {
        let out = apply_list_operands(Some(&base), ops.iter().copied()).expect("apply");
        ListElements::new(&out, true)
            .map(|e| e.map(|(ts, e)| (ts, e.to_vec())))
            .collect::<Result<_, _>>()
            .expect("elements")
    };
    let want = vec![
        (205, b"c".to_vec()),
        (210, b"d".to_vec()),
        (50, b"old-but-moved".to_vec()),
    ];
    assert_eq!(all(&[&op1, &op2]), want);
    // A partial merge (concatenation) gives the same result.
    assert_eq!(all(&[&[op1.clone(), op2.clone()].concat()]), want);
    // Plain appends do not expire anything.
    let mut plain = Vec::new();
    push_add_operand(&mut plain, None, b"x");
    let out = apply_list_operands(None, [&plain[..], &plain[..]].into_iter()).expect("apply");
    assert_eq!(ListElements::new(&out, false).count(), 2);
    assert!(
        apply_list_operands(None, [&[7u8, 0][..]].into_iter()).is_err(),
        "unknown tag"
    );
    assert!(
        apply_list_operands(None, [&[0u8, 5, 1][..]].into_iter()).is_err(),
        "cut off"
    );
}

fn bytes() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(
        prop_oneof![3 => Just(0u8), 3 => Just(0xFFu8), 1 => Just(1u8), 4 => any::<u8>()],
        0..12,
    )
}

proptest! {
    #[test]
    fn layout_round_trips(kg in 0u32..32_768, key in bytes(), ns in bytes(), uk in bytes(), big in any::<bool>()) {
        let max_p = if big { 32_768 } else { 128 };
        let kg = kg % max_p;
        let l = KeyLayout::for_max_parallelism(max_p);
        let mut buf = Vec::new();
        l.encode_map_key(&mut buf, kg, &key, &ns, &uk);
        let d = l.decode(&buf).expect("decode");
        prop_assert_eq!(d.key_group, kg);
        prop_assert_eq!(&d.key, &key);
        prop_assert_eq!(&d.namespace, &ns);
        prop_assert_eq!(&d.user_key, &uk);
        let mut prefix = Vec::new();
        l.encode_key_ns(&mut prefix, kg, &key, &ns);
        prop_assert!(buf.starts_with(&prefix));
        let d = l.decode(&prefix).expect("decode");
        prop_assert!(d.user_key.is_empty());
    }

    #[test]
    fn layout_byte_order_is_the_canonical_order(
        a in (0u32..4, bytes(), bytes(), bytes()),
        b in (0u32..4, bytes(), bytes(), bytes()),
    ) {
        let l = KeyLayout::for_max_parallelism(129);
        let enc = |(kg, k, n, u): &(u32, Vec<u8>, Vec<u8>, Vec<u8>)| {
            let mut buf = Vec::new();
            l.encode_map_key(&mut buf, *kg, k, n, u);
            buf
        };
        prop_assert_eq!(enc(&a).cmp(&enc(&b)), a.cmp(&b));
        // A (key, namespace) prefix never prefixes another (key, namespace)'s entries.
        let mut pa = Vec::new();
        l.encode_key_ns(&mut pa, a.0, &a.1, &a.2);
        prop_assert_eq!(enc(&b).starts_with(&pa), (a.0, &a.1, &a.2) == (b.0, &b.1, &b.2));
    }

    #[test]
    fn list_elements_round_trip(elems in proptest::collection::vec((any::<i64>(), proptest::collection::vec(any::<u8>(), 0..300)), 0..8), stamped in any::<bool>()) {
        let mut raw = Vec::new();
        for (ts, e) in &elems {
            push_element(&mut raw, stamped.then_some(*ts), e);
        }
        let got: Vec<(i64, Vec<u8>)> = ListElements::new(&raw, stamped)
            .map(|e| e.map(|(ts, e)| (ts, e.to_vec())))
            .collect::<Result<_, _>>()
            .expect("decode");
        let want: Vec<(i64, Vec<u8>)> = elems.iter().map(|(ts, e)| (if stamped { *ts } else { 0 }, e.clone())).collect();
        prop_assert_eq!(got, want);
    }
}

proptest! {
    /// The layout decoders are total: arbitrary bytes give a value or an error, never a panic
    /// (these are the functions a reader of damaged or foreign SST files runs).
    #[test]
    fn layout_decoders_never_panic(raw in proptest::collection::vec(any::<u8>(), 0..64), big in any::<bool>(), stamped in any::<bool>()) {
        let l = KeyLayout::for_max_parallelism(if big { 32_768 } else { 128 });
        let _ = l.decode(&raw);
        let _ = split_value(&raw, stamped);
        for e in ListElements::new(&raw, stamped) {
            if e.is_err() {
                break;
            }
        }
        let _ = apply_list_operands(None, [&raw[..]].into_iter());
        let _ = apply_list_operands(Some(&raw[..]), [&raw[..], &raw[..]].into_iter());
        for op in crate::layout::list_operands(&raw) {
            if op.is_err() {
                break;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Options and the working directory

#[test]
fn profiles_parse_and_open() {
    for p in Profile::ALL {
        assert_eq!(p.name().parse::<Profile>(), Ok(p));
        let opts = RocksDbOptions::profile(p)
            .with_block_cache_bytes(8 << 20)
            .with_write_buffer_bytes(1 << 20);
        let mut b = RocksDbBackend::new(BackendConfig::for_subtask(128, 1, 0).expect("config"), opts).expect("open");
        let h = b
            .register(
                StateDescriptor::value("v", TypeSchema::Bytes, TypeSchema::Bytes),
                StateFunctions::None,
            )
            .expect("register");
        b.put(h, b"k", b"", b"x").expect("put");
        b.flush().expect("flush");
        assert_eq!(get(&mut b, h, b"k", b""), Some(b"x".to_vec()));
    }
    assert!("ssd".parse::<Profile>().is_err());
    assert_eq!("zstd".parse::<Compression>(), Ok(Compression::Zstd));
    assert_eq!(RocksDbOptions::default().profile, Profile::Default);
}

#[test]
fn working_directory_is_fresh_under_local_dir_and_removed_on_drop() {
    let base = std::env::temp_dir().join(format!("statekit-rocksdb-test-{}", std::process::id()));
    let opts = RocksDbOptions::default().with_local_dir(&base);
    let cfg = || BackendConfig::for_subtask(128, 1, 0).expect("config");
    let a = RocksDbBackend::new(cfg(), opts.clone()).expect("a");
    let b = RocksDbBackend::new(cfg(), opts).expect("b");
    let (pa, pb) = (a.path().expect("a").to_path_buf(), b.path().expect("b").to_path_buf());
    assert_ne!(pa, pb);
    assert!(pa.starts_with(&base) && pb.starts_with(&base));
    assert!(pa.join("CURRENT").exists());
    drop(a);
    assert!(!pa.exists());
    assert!(pb.exists());
    drop(b);
    assert!(!pb.exists());
    std::fs::remove_dir(&base).expect("base is empty again");
    let d = RocksDbBackend::new(cfg(), RocksDbOptions::default()).expect("default dir");
    assert!(d.path().expect("path").starts_with(std::env::temp_dir()));
}

#[test]
fn backend_and_view_are_send_and_sync_as_needed() {
    fn send<T: Send>() {}
    fn send_sync<T: Send + Sync>() {}
    send::<RocksDbBackend>();
    send_sync::<crate::RocksDbSnapshot>();
}

/// One operation of the write-back cache's differential test.
#[derive(Debug, Clone)]
enum CacheOp {
    Put(u8, u8),
    Get(u8),
    Clear(u8),
    Add(u8, u8),
    ListGet(u8),
    MapPut(u8, u8, u8),
    MapGet(u8, u8),
    MapRemove(u8, u8),
    MapIter(u8),
    Reduce(u8, u8),
    Snapshot,
    Advance,
    Flush,
}

fn cache_op() -> impl Strategy<Value = CacheOp> {
    let k = 0u8..12;
    prop_oneof![
        4 => (k.clone(), any::<u8>()).prop_map(|(k, v)| CacheOp::Put(k, v)),
        4 => k.clone().prop_map(CacheOp::Get),
        1 => k.clone().prop_map(CacheOp::Clear),
        2 => (k.clone(), any::<u8>()).prop_map(|(k, v)| CacheOp::Add(k, v)),
        2 => k.clone().prop_map(CacheOp::ListGet),
        3 => (k.clone(), 0u8..4, any::<u8>()).prop_map(|(k, u, v)| CacheOp::MapPut(k, u, v)),
        3 => (k.clone(), 0u8..4).prop_map(|(k, u)| CacheOp::MapGet(k, u)),
        1 => (k.clone(), 0u8..4).prop_map(|(k, u)| CacheOp::MapRemove(k, u)),
        1 => k.clone().prop_map(CacheOp::MapIter),
        2 => (k, any::<u8>()).prop_map(|(k, v)| CacheOp::Reduce(k, v)),
        1 => Just(CacheOp::Snapshot),
        1 => Just(CacheOp::Advance),
        1 => Just(CacheOp::Flush),
    ]
}

/// What `op` observes on `b` (the handles of [`all_kinds`]).
fn observe(b: &mut RocksDbBackend, [v, l, m, r, _]: [StateHandle; 5], clock: &ManualClock, op: &CacheOp) -> String {
    let key = |k: &u8| vec![b'k', *k];
    match op {
        CacheOp::Put(k, x) => format!("{:?}", b.put(v, &key(k), b"", &[*x; 3]).is_ok()),
        CacheOp::Get(k) => format!("{:?} {:?}", get(b, v, &key(k), b""), get(b, r, &key(k), b"")),
        CacheOp::Clear(k) => {
            for h in [v, l, m, r] {
                b.clear(h, &key(k), b"").expect("clear");
            }
            String::new()
        }
        CacheOp::Add(k, x) => format!("{:?}", b.add(l, &key(k), b"", &[*x]).is_ok()),
        CacheOp::ListGet(k) => format!("{:?}", b.list_get(l, &key(k), b"").expect("list get")),
        CacheOp::MapPut(k, u, x) => format!("{:?}", b.map_put(m, &key(k), b"", &[*u], &[*x; 2]).is_ok()),
        CacheOp::MapGet(k, u) => {
            let mut out = Vec::new();
            let found = b.map_get(m, &key(k), b"", &[*u], &mut out).expect("map get");
            format!("{found} {out:?}")
        }
        CacheOp::MapRemove(k, u) => format!("{:?}", b.map_remove(m, &key(k), b"", &[*u]).expect("remove")),
        CacheOp::MapIter(k) => {
            let mut seen = Vec::new();
            b.map_for_each(m, &key(k), b"", &mut |u, x| seen.push((u.to_vec(), x.to_vec())))
                .expect("map iter");
            format!("{seen:?}")
        }
        CacheOp::Reduce(k, x) => format!("{:?}", b.add(r, &key(k), b"", &be(i64::from(*x))).is_ok()),
        CacheOp::Snapshot => {
            let view = b.snapshot(1).expect("snapshot");
            let copy = MemoryView::collect(view.as_ref(), view.key_group_range()).expect("read view");
            format!("{:?}", copy.entries())
        }
        CacheOp::Advance => {
            clock.advance(40);
            String::new()
        }
        CacheOp::Flush => format!("{:?}", b.flush().is_ok()),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The write-back cache is invisible: a backend whose cache is off, one whose cache is so
    /// small it is written back every few operations, one whose cache never fills, and one
    /// whose every write-back at a flush goes through ingested SST files observe the same
    /// results for every operation (with and without TTL) and snapshot the same entries.
    #[test]
    fn the_write_back_cache_is_invisible(ops in proptest::collection::vec(cache_op(), 1..120), with_ttl in any::<bool>()) {
        let ttl = with_ttl.then_some(TtlConfig { ttl_ms: 100, update_type: TtlUpdateType::OnReadAndWrite });
        let mut sides = Vec::new();
        for (cache, files_from) in [(0usize, None), (200, None), (64 << 20, None), (64 << 20, Some(1))] {
            let clock = ManualClock::new(1_000);
            let cfg = BackendConfig::for_subtask(128, 1, 0).expect("config").with_clock(clock.clone());
            let mut b = RocksDbBackend::new(cfg, RocksDbOptions::default().with_write_back_cache_bytes(cache)).expect("backend");
            if let Some(bytes) = files_from {
                b.write_back_files_from(bytes);
            }
            let h = all_kinds(&mut b, ttl);
            sides.push((b, h, clock));
        }
        for (i, op) in ops.iter().enumerate() {
            let seen: Vec<String> = sides.iter_mut().map(|(b, h, c)| observe(b, *h, c, op)).collect();
            prop_assert_eq!(&seen[0], &seen[1], "op {} {:?}: cache off vs tiny cache", i, op);
            prop_assert_eq!(&seen[0], &seen[2], "op {} {:?}: cache off vs large cache", i, op);
            prop_assert_eq!(&seen[0], &seen[3], "op {} {:?}: cache off vs write-backs into files", i, op);
        }
        let last: Vec<String> = sides.iter_mut().map(|(b, h, c)| observe(b, *h, c, &CacheOp::Snapshot)).collect();
        prop_assert_eq!(&last[0], &last[1]);
        prop_assert_eq!(&last[0], &last[2]);
        prop_assert_eq!(&last[0], &last[3]);
    }
}

/// A checkpoint's write-back of a large dirty cache goes into ingested SST files — puts
/// and deletions, of keys only cached and of keys already in the database — and the
/// database then holds exactly the model's entries, in table files: the memtables are
/// empty and a native cut restores them.
#[test]
fn large_write_backs_at_a_cut_go_through_ingested_files() {
    let clock = ManualClock::new(1_000);
    let cfg = BackendConfig::for_subtask(128, 1, 0).expect("config").with_clock(clock);
    let opts = RocksDbOptions {
        write_buffer_bytes: 128 << 10,
        ..RocksDbOptions::default()
    };
    let mut b = RocksDbBackend::new(cfg, opts).expect("backend");
    let v = b
        .register(
            StateDescriptor::value("v", TypeSchema::Bytes, TypeSchema::Bytes),
            StateFunctions::None,
        )
        .expect("register");
    let mut model = std::collections::BTreeMap::new();
    let key = |i: u32| format!("key-{i:05}").into_bytes();
    for i in 0..2_000u32 {
        let value = vec![(i % 251) as u8; 100];
        b.put(v, &key(i), b"", &value).expect("put");
        model.insert(key(i), value);
    }
    b.flush().expect("first flush");
    assert_eq!(
        b.file_write_backs(),
        1,
        "2000 x 110 B dirty: over 1/64 of a 128 KiB memtable"
    );
    // Keys in the database and keys only in the cache, deleted and overwritten.
    for i in (0..3_000u32).step_by(3) {
        if i % 2 == 0 {
            b.clear(v, &key(i), b"").expect("clear");
            model.remove(&key(i));
        } else {
            let value = vec![7u8; 90];
            b.put(v, &key(i), b"", &value).expect("put");
            model.insert(key(i), value);
        }
    }
    let cut = b.native_snapshot(1).expect("cut");
    assert_eq!(b.file_write_backs(), 2);
    assert_eq!(b.memtable_entries().expect("memtable entries"), 0);
    for i in 0..3_000u32 {
        assert_eq!(get(&mut b, v, &key(i), b""), model.get(&key(i)).cloned(), "key {i}");
    }
    let view = b.snapshot(2).expect("snapshot");
    let copy = MemoryView::collect(view.as_ref(), view.key_group_range()).expect("read view");
    let mut seen: Vec<(Vec<u8>, Vec<u8>)> = copy
        .entries()
        .iter()
        .map(|e| (e.key.clone(), e.value.clone()))
        .collect();
    seen.sort();
    let want: Vec<(Vec<u8>, Vec<u8>)> = model.into_iter().collect();
    assert_eq!(seen, want);
    // No scratch directory is left behind.
    let dir = b.path().expect("path").parent().expect("working dir").to_path_buf();
    let left: Vec<String> = std::fs::read_dir(&dir)
        .expect("list")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("write-back-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    drop(cut);
}

#[test]
fn native_stats_estimate_bytes_only_for_the_key_groups_the_files_span() {
    let (mut b, _) = backend();
    let h = b
        .register(
            StateDescriptor::value("v", TypeSchema::Bytes, TypeSchema::Bytes),
            StateFunctions::None,
        )
        .expect("register");
    let mut written = std::collections::BTreeSet::new();
    for i in 0u32..20_000 {
        let k = i.to_be_bytes();
        let kg = key_group_for_key(&k, 128);
        if (5..=9).contains(&kg) {
            b.put(h, &k, &[], &[7u8; 100]).expect("put");
            written.insert(kg);
        }
    }
    let cut = b.native_snapshot(1).expect("cut");
    let stats = &cut.stats;
    let (lo, hi) = (written.first().copied(), written.last().copied());
    assert!(!stats.key_groups.is_empty());
    for (kg, bytes) in &stats.key_groups {
        assert!(
            Some(*kg) >= lo && Some(*kg) <= hi,
            "key group {kg} ({bytes} B) holds nothing"
        );
    }
    // Every table file's bytes are spread over its key groups (less rounding).
    let spread: u64 = stats.key_groups.iter().map(|g| g.1).sum();
    let files: u64 = stats.states.iter().map(|s| s.bytes).sum();
    assert!(
        spread <= files && spread + 8 >= files,
        "spread {spread} of {files} bytes"
    );
}
