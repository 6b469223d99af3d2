//! Unit tests of the backend: errors, registration, TTL, merging, snapshot order and
//! copy-on-write sharing.

use crate::backend::Tables;
use crate::HashMapBackend;
use statekit_core::keygroup::subtask_for_key_group;
use statekit_core::{
    key_group_for_key, AggregateFn, BackendConfig, Entry, KeyGroupRange, KeyedStateBackend, KeyedStateView,
    ManualClock, MemoryView, OwnedEntry, StateDescriptor, StateError, StateFunctions, StateHandle, TtlConfig,
    TtlUpdateType, TypeSchema,
};
use std::ops::ControlFlow;
use std::sync::Arc;

type R = Result<(), StateError>;
/// (user key, value, timestamp) of a snapshot entry.
type Seen = (Option<Vec<u8>>, Vec<u8>, Option<i64>);

fn backend(max_p: u32) -> (HashMapBackend, Arc<ManualClock>) {
    let clock = ManualClock::new(0);
    let cfg = BackendConfig::for_subtask(max_p, 1, 0)
        .expect("config")
        .with_clock(clock.clone());
    (HashMapBackend::new(cfg).expect("backend"), clock)
}

fn i64_of(b: &[u8]) -> i64 {
    i64::from_be_bytes(b.try_into().expect("8 bytes"))
}

fn sum_fn() -> StateFunctions {
    StateFunctions::Reduce(Arc::new(|a: &[u8], b: &[u8]| {
        (i64_of(a).wrapping_add(i64_of(b))).to_be_bytes().to_vec()
    }))
}

/// (count, sum) accumulator over i64 inputs.
fn count_sum_fn() -> StateFunctions {
    StateFunctions::Aggregate(AggregateFn {
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
    })
}

fn value_desc(name: &str) -> StateDescriptor {
    StateDescriptor::value(name, TypeSchema::Bytes, TypeSchema::Bytes).with_namespace(TypeSchema::Bytes)
}
fn list_desc(name: &str) -> StateDescriptor {
    StateDescriptor::list(name, TypeSchema::Bytes, TypeSchema::Bytes).with_namespace(TypeSchema::Bytes)
}
fn map_desc(name: &str) -> StateDescriptor {
    StateDescriptor::map(name, TypeSchema::Bytes, TypeSchema::Bytes, TypeSchema::Bytes)
        .with_namespace(TypeSchema::Bytes)
}
fn reducing_desc(name: &str) -> StateDescriptor {
    StateDescriptor::reducing(name, TypeSchema::Bytes, TypeSchema::I64).with_namespace(TypeSchema::Bytes)
}
fn aggregating_desc(name: &str) -> StateDescriptor {
    StateDescriptor::aggregating(
        name,
        TypeSchema::Bytes,
        TypeSchema::Tuple(vec![TypeSchema::I64, TypeSchema::I64]),
    )
    .with_namespace(TypeSchema::Bytes)
}

fn get(b: &mut HashMapBackend, h: StateHandle, key: &[u8], ns: &[u8]) -> Option<Vec<u8>> {
    let mut out = vec![0xAA; 3];
    let found = b.get(h, key, ns, &mut out).expect("get");
    if found {
        Some(out)
    } else {
        assert!(out.is_empty(), "out is cleared when absent");
        None
    }
}

fn map_all(b: &mut HashMapBackend, h: StateHandle, key: &[u8], ns: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut v = Vec::new();
    let n = b
        .map_for_each(h, key, ns, &mut |k, x| v.push((k.to_vec(), x.to_vec())))
        .expect("map_for_each");
    assert_eq!(n, v.len());
    v
}

fn collect(view: &dyn KeyedStateView) -> Vec<OwnedEntry> {
    MemoryView::collect(view, view.key_group_range())
        .expect("collect")
        .entries()
        .to_vec()
}

/// A key that lands in subtask `index` of `p` at max parallelism `max_p`.
fn key_for_subtask(max_p: u32, p: u32, index: u32) -> Vec<u8> {
    (0u32..)
        .map(|i| format!("key-{i}").into_bytes())
        .find(|k| subtask_for_key_group(max_p, p, key_group_for_key(k, max_p)) == index)
        .expect("some key")
}

#[test]
fn invalid_configs_are_rejected() {
    let mut cfg = BackendConfig::for_subtask(128, 1, 0).expect("config");
    cfg.max_parallelism = 0;
    assert!(matches!(
        HashMapBackend::new(cfg),
        Err(StateError::InvalidParallelism(_))
    ));
    let mut cfg = BackendConfig::for_subtask(128, 1, 0).expect("config");
    cfg.key_group_range = KeyGroupRange::new(100, 200);
    assert!(matches!(
        HashMapBackend::new(cfg),
        Err(StateError::InvalidParallelism(_))
    ));
    let mut cfg = BackendConfig::for_subtask(128, 1, 0).expect("config");
    cfg.key_group_range = KeyGroupRange::EMPTY;
    assert!(HashMapBackend::new(cfg).is_ok());
}

#[test]
fn wrong_kind_errors() -> R {
    let (mut b, _) = backend(128);
    let v = b.register(value_desc("v"), StateFunctions::None)?;
    let l = b.register(list_desc("l"), StateFunctions::None)?;
    let m = b.register(map_desc("m"), StateFunctions::None)?;
    let mut out = Vec::new();
    let wrong = |r: Result<(), StateError>| assert!(matches!(r, Err(StateError::WrongKind { .. })), "{r:?}");
    wrong(b.get(l, b"k", b"", &mut out).map(drop));
    wrong(b.get(m, b"k", b"", &mut out).map(drop));
    wrong(b.put(l, b"k", b"", b"x"));
    wrong(b.add(v, b"k", b"", b"x"));
    wrong(b.add(m, b"k", b"", b"x"));
    wrong(b.list_update(v, b"k", b"", &[b"x"]));
    wrong(b.list_for_each(m, b"k", b"", &mut |_| ()).map(drop));
    wrong(b.map_put(v, b"k", b"", b"u", b"x"));
    wrong(b.map_put(l, b"k", b"", b"u", b"x"));
    wrong(b.map_get(l, b"k", b"", b"u", &mut out).map(drop));
    wrong(b.map_remove(v, b"k", b"", b"u").map(drop));
    wrong(b.map_for_each(v, b"k", b"", &mut |_, _| ()).map(drop));
    wrong(b.merge_namespaces(v, b"k", b"t", &[b"s"]));
    wrong(b.merge_namespaces(m, b"k", b"t", &[b"s"]));
    match b.get(l, b"k", b"", &mut out) {
        Err(StateError::WrongKind { state, actual, .. }) => {
            assert_eq!(state, "l");
            assert_eq!(actual, statekit_core::KeyedStateKind::List);
        }
        other => panic!("{other:?}"),
    }
    // Clear works on every kind; nothing was written by the failed calls.
    for h in [v, l, m] {
        b.clear(h, b"k", b"")?;
    }
    assert_eq!(b.entry_count(), 0);
    Ok(())
}

#[test]
fn unknown_handle() {
    let (mut b, _) = backend(128);
    let mut out = Vec::new();
    assert!(matches!(
        b.get(StateHandle(0), b"k", b"", &mut out),
        Err(StateError::UnknownState(_))
    ));
    assert!(matches!(
        b.put(StateHandle(3), b"k", b"", b"v"),
        Err(StateError::UnknownState(_))
    ));
    assert!(b.handle("nope").is_none());
}

#[test]
fn out_of_range_keys() -> R {
    let clock = ManualClock::new(0);
    let cfg = BackendConfig::for_subtask(128, 2, 0)?.with_clock(clock);
    let mut b = HashMapBackend::new(cfg)?;
    let v = b.register(value_desc("v"), StateFunctions::None)?;
    let l = b.register(list_desc("l"), StateFunctions::None)?;
    let m = b.register(map_desc("m"), StateFunctions::None)?;
    let mine = key_for_subtask(128, 2, 0);
    let other = key_for_subtask(128, 2, 1);
    b.put(v, &mine, b"", b"x")?;
    let kg = key_group_for_key(&other, 128);
    let check = |r: Result<(), StateError>| match r {
        Err(StateError::KeyGroupOutOfRange { key_group, range }) => {
            assert_eq!(key_group, kg);
            assert_eq!(range, KeyGroupRange::new(0, 63));
        }
        other => panic!("{other:?}"),
    };
    let mut out = Vec::new();
    check(b.put(v, &other, b"", b"x"));
    check(b.get(v, &other, b"", &mut out).map(drop));
    check(b.clear(v, &other, b""));
    check(b.add(l, &other, b"", b"x"));
    check(b.map_put(m, &other, b"", b"u", b"x"));
    check(b.map_get(m, &other, b"", b"u", &mut out).map(drop));
    check(b.contains(v, &other, b"").map(drop));
    assert_eq!(b.entry_count(), 1);
    Ok(())
}

#[test]
fn missing_functions() -> R {
    let (mut b, _) = backend(128);
    let r = b.register(reducing_desc("r"), StateFunctions::None)?;
    let a = b.register(aggregating_desc("a"), StateFunctions::None)?;
    let one = 1i64.to_be_bytes();
    assert!(matches!(b.add(r, b"k", b"", &one), Err(StateError::MissingFunction(n)) if n == "r"));
    assert!(matches!(b.add(a, b"k", b"", &one), Err(StateError::MissingFunction(n)) if n == "a"));
    assert!(matches!(
        b.merge_namespaces(r, b"k", b"t", &[b"s"]),
        Err(StateError::MissingFunction(_))
    ));
    assert!(matches!(
        b.merge_namespaces(a, b"k", b"t", &[b"s"]),
        Err(StateError::MissingFunction(_))
    ));
    // put needs no function.
    b.put(r, b"k", b"", &one)?;
    // Registering again supplies the function and keeps the handle and the data.
    assert_eq!(b.register(reducing_desc("r"), sum_fn())?, r);
    b.add(r, b"k", b"", &one)?;
    assert_eq!(get(&mut b, r, b"k", b""), Some(2i64.to_be_bytes().to_vec()));
    // Registering again without functions keeps the registered ones.
    assert_eq!(b.register(reducing_desc("r"), StateFunctions::None)?, r);
    b.add(r, b"k", b"", &one)?;
    assert_eq!(get(&mut b, r, b"k", b""), Some(3i64.to_be_bytes().to_vec()));
    Ok(())
}

#[test]
fn incompatible_registration() -> R {
    let (mut b, _) = backend(128);
    let v = b.register(value_desc("s"), StateFunctions::None)?;
    assert_eq!(b.register(value_desc("s"), StateFunctions::None)?, v);
    assert!(matches!(
        b.register(list_desc("s"), StateFunctions::None),
        Err(StateError::Incompatible(_))
    ));
    let other_value = StateDescriptor::value("s", TypeSchema::Bytes, TypeSchema::I64).with_namespace(TypeSchema::Bytes);
    assert!(matches!(
        b.register(other_value, StateFunctions::None),
        Err(StateError::Incompatible(_))
    ));
    // Functions of the wrong kind.
    assert!(matches!(
        b.register(value_desc("v2"), sum_fn()),
        Err(StateError::Incompatible(_))
    ));
    assert!(matches!(
        b.register(reducing_desc("r"), count_sum_fn()),
        Err(StateError::Incompatible(_))
    ));
    assert!(matches!(
        b.register(aggregating_desc("a"), sum_fn()),
        Err(StateError::Incompatible(_))
    ));
    assert_eq!(b.descriptors().len(), 1);
    assert_eq!(b.handle("s"), Some(v));
    // TTL may change on re-registration.
    let with_ttl = value_desc("s").with_ttl(TtlConfig::new(10));
    assert_eq!(b.register(with_ttl.clone(), StateFunctions::None)?, v);
    assert_eq!(b.descriptors(), vec![with_ttl]);
    Ok(())
}

#[test]
fn value_reducing_aggregating_basics() -> R {
    let (mut b, _) = backend(7);
    let v = b.register(value_desc("v"), StateFunctions::None)?;
    let r = b.register(reducing_desc("r"), sum_fn())?;
    let a = b.register(aggregating_desc("a"), count_sum_fn())?;
    assert_eq!(get(&mut b, v, b"k", b"n"), None);
    b.put(v, b"k", b"n", b"hello")?;
    b.put(v, b"k", b"m", b"other")?;
    assert_eq!(get(&mut b, v, b"k", b"n"), Some(b"hello".to_vec()));
    b.put(v, b"k", b"n", b"hi")?;
    assert_eq!(get(&mut b, v, b"k", b"n"), Some(b"hi".to_vec()));
    assert!(b.contains(v, b"k", b"n")?);
    b.clear(v, b"k", b"n")?;
    assert!(!b.contains(v, b"k", b"n")?);
    assert_eq!(get(&mut b, v, b"k", b"m"), Some(b"other".to_vec()));

    for x in [5i64, -2, 10] {
        b.add(r, b"k", b"", &x.to_be_bytes())?;
        b.add(a, b"k", b"", &x.to_be_bytes())?;
    }
    assert_eq!(get(&mut b, r, b"k", b""), Some(13i64.to_be_bytes().to_vec()));
    let acc = get(&mut b, a, b"k", b"").expect("acc");
    assert_eq!((i64_of(&acc[..8]), i64_of(&acc[8..])), (3, 13));
    Ok(())
}

#[test]
fn list_and_map_basics() -> R {
    let (mut b, _) = backend(128);
    let l = b.register(list_desc("l"), StateFunctions::None)?;
    let m = b.register(map_desc("m"), StateFunctions::None)?;
    b.add(l, b"k", b"", b"a")?;
    b.add(l, b"k", b"", b"b")?;
    assert_eq!(b.list_get(l, b"k", b"")?, vec![b"a".to_vec(), b"b".to_vec()]);
    b.list_update(l, b"k", b"", &[b"x", b"yy", b"z"])?;
    assert_eq!(
        b.list_get(l, b"k", b"")?,
        vec![b"x".to_vec(), b"yy".to_vec(), b"z".to_vec()]
    );
    b.list_update(l, b"k", b"", &[b"q"])?;
    assert_eq!(b.list_get(l, b"k", b"")?, vec![b"q".to_vec()]);
    b.list_update(l, b"k", b"", &[])?;
    assert!(b.list_get(l, b"k", b"")?.is_empty());
    assert!(!b.contains(l, b"k", b"")?);

    for uk in [b"c", b"a", b"b"] {
        b.map_put(m, b"k", b"", uk, &[uk[0], uk[0]])?;
    }
    b.map_put(m, b"k", b"", b"a", b"A")?;
    assert_eq!(
        map_all(&mut b, m, b"k", b""),
        vec![
            (b"a".to_vec(), b"A".to_vec()),
            (b"b".to_vec(), b"bb".to_vec()),
            (b"c".to_vec(), b"cc".to_vec())
        ]
    );
    let mut out = Vec::new();
    assert!(b.map_get(m, b"k", b"", b"b", &mut out)?);
    assert_eq!(out, b"bb");
    assert!(!b.map_get(m, b"k", b"", b"z", &mut out)?);
    assert!(out.is_empty());
    assert!(b.map_remove(m, b"k", b"", b"b")?);
    assert!(!b.map_remove(m, b"k", b"", b"b")?);
    assert!(b.map_remove(m, b"k", b"", b"a")?);
    assert!(b.map_remove(m, b"k", b"", b"c")?);
    assert!(!b.contains(m, b"k", b"")?);
    assert_eq!(b.entry_count(), 0, "a map emptied by removals leaves no entry");
    Ok(())
}

#[test]
fn merge_namespaces_all_kinds() -> R {
    let (mut b, _) = backend(128);
    let l = b.register(list_desc("l"), StateFunctions::None)?;
    let r = b.register(reducing_desc("r"), sum_fn())?;
    let a = b.register(aggregating_desc("a"), count_sum_fn())?;
    b.add(l, b"k", b"t", b"t1")?;
    b.add(l, b"k", b"s1", b"a1")?;
    b.add(l, b"k", b"s1", b"a2")?;
    b.add(l, b"k", b"s2", b"b1")?;
    b.add(l, b"other", b"s1", b"keep")?;
    b.merge_namespaces(l, b"k", b"t", &[b"s1", b"missing", b"s2", b"t"])?;
    let all: Vec<Vec<u8>> = [&b"t1"[..], b"a1", b"a2", b"b1"].iter().map(|x| x.to_vec()).collect();
    assert_eq!(b.list_get(l, b"k", b"t")?, all);
    assert!(b.list_get(l, b"k", b"s1")?.is_empty());
    assert!(b.list_get(l, b"k", b"s2")?.is_empty());
    assert_eq!(b.list_get(l, b"other", b"s1")?, vec![b"keep".to_vec()]);
    // Into an absent target.
    b.merge_namespaces(l, b"k", b"new", &[b"t"])?;
    assert_eq!(b.list_get(l, b"k", b"new")?, all);
    assert!(!b.contains(l, b"k", b"t")?);

    for (ns, x) in [(&b"t"[..], 1i64), (b"s1", 10), (b"s1", 20), (b"s2", 100)] {
        b.add(r, b"k", ns, &x.to_be_bytes())?;
        b.add(a, b"k", ns, &x.to_be_bytes())?;
    }
    b.merge_namespaces(r, b"k", b"t", &[b"s1", b"s2"])?;
    b.merge_namespaces(a, b"k", b"t", &[b"s1", b"s2"])?;
    assert_eq!(get(&mut b, r, b"k", b"t"), Some(131i64.to_be_bytes().to_vec()));
    let acc = get(&mut b, a, b"k", b"t").expect("acc");
    assert_eq!((i64_of(&acc[..8]), i64_of(&acc[8..])), (4, 131));
    for h in [r, a] {
        assert_eq!(get(&mut b, h, b"k", b"s1"), None);
        assert_eq!(get(&mut b, h, b"k", b"s2"), None);
    }
    // Sources only, absent target: the merged sources.
    b.merge_namespaces(r, b"k", b"fresh", &[b"t"])?;
    assert_eq!(get(&mut b, r, b"k", b"fresh"), Some(131i64.to_be_bytes().to_vec()));
    // Nothing to merge leaves the target alone.
    b.merge_namespaces(r, b"k", b"fresh", &[b"none"])?;
    assert_eq!(get(&mut b, r, b"k", b"fresh"), Some(131i64.to_be_bytes().to_vec()));
    Ok(())
}

#[test]
fn ttl_visibility_and_snapshots() -> R {
    let (mut b, clock) = backend(128);
    let ttl = TtlConfig::new(100);
    let v = b.register(value_desc("v").with_ttl(ttl), StateFunctions::None)?;
    let plain = b.register(value_desc("plain"), StateFunctions::None)?;
    let l = b.register(list_desc("l").with_ttl(ttl), StateFunctions::None)?;
    let m = b.register(map_desc("m").with_ttl(ttl), StateFunctions::None)?;
    let r = b.register(reducing_desc("r").with_ttl(ttl), sum_fn())?;
    b.put(v, b"k", b"", b"x")?;
    b.put(plain, b"k", b"", b"p")?;
    b.add(l, b"k", b"", b"old")?;
    b.map_put(m, b"k", b"", b"u1", b"old")?;
    b.add(r, b"k", b"", &5i64.to_be_bytes())?;
    clock.set(50);
    b.add(l, b"k", b"", b"new")?;
    b.map_put(m, b"k", b"", b"u2", b"new")?;

    let early = b.snapshot(1)?;
    clock.set(99);
    assert_eq!(get(&mut b, v, b"k", b""), Some(b"x".to_vec()));
    clock.set(100);
    assert_eq!(get(&mut b, v, b"k", b""), None);
    assert!(!b.contains(v, b"k", b"")?);
    assert_eq!(get(&mut b, plain, b"k", b""), Some(b"p".to_vec()));
    assert_eq!(b.list_get(l, b"k", b"")?, vec![b"new".to_vec()]);
    assert_eq!(map_all(&mut b, m, b"k", b""), vec![(b"u2".to_vec(), b"new".to_vec())]);
    let mut out = Vec::new();
    assert!(!b.map_get(m, b"k", b"", b"u1", &mut out)?);
    assert!(
        !b.map_remove(m, b"k", b"", b"u1")?,
        "removing an expired entry reports absent"
    );
    // Reducing over an expired value starts afresh.
    b.add(r, b"k", b"", &7i64.to_be_bytes())?;
    assert_eq!(get(&mut b, r, b"k", b""), Some(7i64.to_be_bytes().to_vec()));

    // The early snapshot still holds everything, with timestamps for TTL states only.
    let e = collect(early.as_ref());
    let find = |state: u32| -> Vec<Seen> {
        e.iter()
            .filter(|x| x.state == state)
            .map(|x| (x.user_key.clone(), x.value.clone(), x.timestamp))
            .collect()
    };
    assert_eq!(find(v.0), vec![(None, b"x".to_vec(), Some(0))]);
    assert_eq!(find(plain.0), vec![(None, b"p".to_vec(), None)]);
    assert_eq!(
        find(l.0),
        vec![(None, b"old".to_vec(), Some(0)), (None, b"new".to_vec(), Some(50))]
    );
    assert_eq!(
        find(m.0),
        vec![
            (Some(b"u1".to_vec()), b"old".to_vec(), Some(0)),
            (Some(b"u2".to_vec()), b"new".to_vec(), Some(50))
        ]
    );
    assert_eq!(find(r.0), vec![(None, 5i64.to_be_bytes().to_vec(), Some(0))]);

    // A snapshot at 120 drops what expired by then.
    clock.set(120);
    let late = b.snapshot(2)?;
    let e = collect(late.as_ref());
    let summary: Vec<(u32, Vec<u8>, Option<i64>)> = e.iter().map(|x| (x.state, x.value.clone(), x.timestamp)).collect();
    assert_eq!(
        summary,
        vec![
            (plain.0, b"p".to_vec(), None),
            (l.0, b"new".to_vec(), Some(50)),
            (m.0, b"new".to_vec(), Some(50)),
            (r.0, 7i64.to_be_bytes().to_vec(), Some(100)),
        ]
    );

    // Restore keeps timestamps: at 160 the list element of t=50 is still there, at 150+ not.
    let (mut b2, clock2) = backend(128);
    clock2.set(120);
    b2.restore(&[late.as_ref()])?;
    let l2 = b2.handle("l").expect("l");
    assert_eq!(b2.list_get(l2, b"k", b"")?, vec![b"new".to_vec()]);
    clock2.set(150);
    assert!(b2.list_get(l2, b"k", b"")?.is_empty());
    let e2 = collect(b2.snapshot(3)?.as_ref());
    assert_eq!(e2.iter().map(|x| x.state).collect::<Vec<_>>(), vec![plain.0, r.0]);
    assert_eq!(e2[1].timestamp, Some(100));
    Ok(())
}

#[test]
fn ttl_refresh_on_read() -> R {
    let (mut b, clock) = backend(128);
    let ttl = TtlConfig {
        ttl_ms: 100,
        update_type: TtlUpdateType::OnReadAndWrite,
    };
    let v = b.register(value_desc("v").with_ttl(ttl), StateFunctions::None)?;
    let l = b.register(list_desc("l").with_ttl(ttl), StateFunctions::None)?;
    let m = b.register(map_desc("m").with_ttl(ttl), StateFunctions::None)?;
    let vw = b.register(value_desc("vw").with_ttl(TtlConfig::new(100)), StateFunctions::None)?;
    b.put(v, b"k", b"", b"x")?;
    b.put(vw, b"k", b"", b"x")?;
    b.add(l, b"k", b"", b"e")?;
    b.map_put(m, b"k", b"", b"u", b"x")?;
    b.map_put(m, b"k", b"", b"w", b"y")?;
    clock.set(90);
    assert!(get(&mut b, v, b"k", b"").is_some());
    assert!(get(&mut b, vw, b"k", b"").is_some());
    assert_eq!(b.list_get(l, b"k", b"")?.len(), 1);
    let mut out = Vec::new();
    assert!(b.map_get(m, b"k", b"", b"u", &mut out)?);
    clock.set(150);
    assert!(get(&mut b, v, b"k", b"").is_some(), "refreshed at 90");
    assert!(
        get(&mut b, vw, b"k", b"").is_none(),
        "write-only TTL is not refreshed by reads"
    );
    assert_eq!(b.list_get(l, b"k", b"")?.len(), 1);
    assert_eq!(map_all(&mut b, m, b"k", b""), vec![(b"u".to_vec(), b"x".to_vec())]);
    let snap = collect(b.snapshot(1)?.as_ref());
    assert!(snap.iter().all(|e| e.timestamp == Some(150)), "{snap:?}");
    assert_eq!(snap.len(), 3);
    Ok(())
}

#[test]
fn ttl_added_later_stamps_existing_entries() -> R {
    let (mut b, clock) = backend(128);
    let v = b.register(value_desc("v"), StateFunctions::None)?;
    b.put(v, b"k", b"", b"x")?;
    clock.set(1_000);
    b.register(value_desc("v").with_ttl(TtlConfig::new(100)), StateFunctions::None)?;
    clock.set(1_050);
    assert_eq!(get(&mut b, v, b"k", b""), Some(b"x".to_vec()));
    let snap = collect(b.snapshot(1)?.as_ref());
    assert_eq!(snap[0].timestamp, Some(1_000));
    clock.set(1_100);
    assert_eq!(get(&mut b, v, b"k", b""), None);
    Ok(())
}

#[test]
fn purge_expired_removes_entries() -> R {
    let (mut b, clock) = backend(16);
    let v = b.register(value_desc("v").with_ttl(TtlConfig::new(10)), StateFunctions::None)?;
    let l = b.register(list_desc("l").with_ttl(TtlConfig::new(10)), StateFunctions::None)?;
    for i in 0..100u32 {
        b.put(v, &i.to_be_bytes(), b"", b"x")?;
        b.add(l, &i.to_be_bytes(), b"", b"x")?;
    }
    clock.set(5);
    b.add(l, &0u32.to_be_bytes(), b"", b"y")?;
    assert_eq!(b.entry_count(), 200);
    clock.set(10);
    assert_eq!(b.purge_expired(), 199);
    assert_eq!(b.entry_count(), 1);
    assert_eq!(b.list_get(l, &0u32.to_be_bytes(), b"")?, vec![b"y".to_vec()]);
    Ok(())
}

/// Checks the canonical order of every key group of a view, and returns its entries.
fn assert_canonical(view: &dyn KeyedStateView) -> Vec<OwnedEntry> {
    let mut all = Vec::new();
    for kg in view.key_group_range() {
        let mut prev: Option<OwnedEntry> = None;
        let _ = view
            .visit_key_group(kg, &mut |e: &Entry<'_>| {
                assert_eq!(key_group_for_key(e.key, view.max_parallelism()), kg);
                if let Some(p) = &prev {
                    assert_ne!(
                        p.as_entry().canonical_cmp(e),
                        std::cmp::Ordering::Greater,
                        "{p:?} before {e:?}"
                    );
                }
                prev = Some(OwnedEntry::from_entry(kg, e));
                all.push(OwnedEntry::from_entry(kg, e));
                Ok(ControlFlow::Continue(()))
            })
            .expect("visit");
    }
    all
}

#[test]
fn snapshot_view_is_in_canonical_order() -> R {
    let (mut b, _) = backend(4);
    let m = b.register(map_desc("m"), StateFunctions::None)?;
    let v = b.register(value_desc("v"), StateFunctions::None)?;
    let l = b.register(list_desc("l"), StateFunctions::None)?;
    // Keys and namespaces that are prefixes of each other, in scrambled insertion order.
    let keys: Vec<Vec<u8>> = (0..300u32)
        .rev()
        .map(|i| format!("{}", i * 7919 % 1000).into_bytes())
        .collect();
    let namespaces: [&[u8]; 4] = [b"b", b"", b"ab", b"a"];
    for (i, k) in keys.iter().enumerate() {
        for ns in namespaces {
            b.put(v, k, ns, &[i as u8])?;
            b.map_put(m, k, ns, format!("u{}", (i * 3) % 7).as_bytes(), b"1")?;
            b.map_put(m, k, ns, b"a", b"2")?;
            // List elements keep insertion order even though they are not sorted.
            for e in [b"z", b"a", b"m"] {
                b.add(l, k, ns, e)?;
            }
        }
    }
    let view = b.snapshot(7)?;
    assert_eq!(view.states().len(), 3);
    assert_eq!(view.states()[0].name, "m");
    let all = assert_canonical(view.as_ref());
    assert_eq!(all.len(), keys.len() * 4 * (1 + 2 + 3));
    // List elements in list order.
    let first_list: Vec<&[u8]> = all
        .iter()
        .filter(|e| e.state == l.0)
        .take(3)
        .map(|e| &e.value[..])
        .collect();
    assert_eq!(first_list, vec![b"z", b"a", b"m"]);
    // MemoryView agrees with the direct walk, entry for entry.
    assert_eq!(collect(view.as_ref()), all);
    // Out-of-range key groups are empty.
    let mut n = 0;
    let _ = view.visit_key_group(99, &mut |_| {
        n += 1;
        Ok(ControlFlow::Continue(()))
    })?;
    assert_eq!(n, 0);
    let _ = m;
    Ok(())
}

#[test]
fn snapshot_is_isolated_and_copies_only_touched_shards() -> R {
    let (mut b, _) = backend(2);
    let v = b.register(value_desc("v"), StateFunctions::None)?;
    let l = b.register(list_desc("l"), StateFunctions::None)?;
    // Enough entries for a dozen packed shards per key group.
    for i in 0..60_000u32 {
        b.put(v, &i.to_be_bytes(), b"", &i.to_le_bytes())?;
    }
    b.add(l, b"k", b"", b"e1")?;
    let before = collect(b.snapshot(0)?.as_ref());
    let view = b.snapshot_view(1);
    assert_eq!(view.checkpoint_id(), 1);
    // Overwrite one key, add and clear others (all of the state's one shape, so its tables
    // stay packed).
    b.put(v, &5u32.to_be_bytes(), b"", b"chgd")?;
    b.clear(v, &6u32.to_be_bytes(), b"")?;
    b.put(v, b"new!", b"", b"xxxx")?;
    b.add(l, b"k", b"", b"e2")?;
    assert_eq!(collect(&view), before);

    // Sharing: only the shards written to were copied.
    let Tables::Single(live) = b.tables_for_test(0) else {
        panic!()
    };
    let Tables::Single(frozen) = view.tables_for_test(0) else {
        panic!()
    };
    assert!(live.iter().chain(frozen).all(|t| t.is_packed()));
    let mut shared = 0;
    let mut copied = 0;
    for (a, f) in live.iter().zip(frozen) {
        for (x, y) in a.shard_addresses().iter().zip(f.shard_addresses()) {
            if *x == y {
                shared += 1;
            } else {
                copied += 1;
            }
        }
    }
    assert!(copied <= 3, "copied {copied}");
    assert!(shared >= 10, "shared {shared}");
    drop(view);
    // With the snapshot gone, writes copy nothing: the shards' Arcs are unique again.
    let Tables::Single(live) = b.tables_for_test(0) else {
        panic!()
    };
    assert!(live.iter().all(|t| t.shards_unique()));
    Ok(())
}

#[test]
fn restore_rescales_and_filters() -> R {
    let clock = ManualClock::new(0);
    let mut old = Vec::new();
    for i in 0..2 {
        let cfg = BackendConfig::for_subtask(16, 2, i)?.with_clock(clock.clone());
        let mut b = HashMapBackend::new(cfg)?;
        let v = b.register(value_desc("v"), StateFunctions::None)?;
        let m = b.register(map_desc("m"), StateFunctions::None)?;
        for k in 0..200u32 {
            let key = k.to_be_bytes();
            if b.key_group_range().contains(key_group_for_key(&key, 16)) {
                b.put(v, &key, b"", &key)?;
                b.map_put(m, &key, b"ns", b"u", &key)?;
            }
        }
        old.push(b.snapshot(1)?);
    }
    let views: Vec<&dyn KeyedStateView> = old.iter().map(|v| v.as_ref()).collect();
    let mut total = 0;
    for i in 0..3 {
        let cfg = BackendConfig::for_subtask(16, 3, i)?.with_clock(clock.clone());
        let mut b = HashMapBackend::new(cfg)?;
        // A state registered before the restore keeps its handle.
        let m = b.register(map_desc("m"), StateFunctions::None)?;
        b.restore(&views)?;
        assert_eq!(b.handle("m"), Some(m));
        let v = b.handle("v").expect("v");
        assert_eq!(b.descriptors().len(), 2);
        for k in 0..200u32 {
            let key = k.to_be_bytes();
            let mine = b.key_group_range().contains(key_group_for_key(&key, 16));
            let mut out = Vec::new();
            match b.get(v, &key, b"", &mut out) {
                Ok(found) => {
                    assert!(mine && found);
                    assert_eq!(out, key);
                    assert!(b.map_get(m, &key, b"ns", b"u", &mut out)?);
                }
                Err(StateError::KeyGroupOutOfRange { .. }) => assert!(!mine),
                Err(e) => return Err(e),
            }
        }
        total += b.entry_count();
    }
    assert_eq!(total, 400);

    // Restoring from a view of another max parallelism fails.
    let (mut b, _) = backend(32);
    assert!(matches!(b.restore(&views), Err(StateError::Restore(_))));
    // An incompatible registered state fails the restore.
    let (mut b, _) = backend(16);
    b.register(list_desc("v"), StateFunctions::None)?;
    assert!(matches!(b.restore(&views), Err(StateError::Incompatible(_))));
    Ok(())
}

#[test]
fn restore_rejects_misplaced_entries() -> R {
    let (mut b, _) = backend(8);
    let key = b"some key".to_vec();
    let kg = key_group_for_key(&key, 8);
    let wrong = (kg + 1) % 8;
    let view = MemoryView::new(
        8,
        KeyGroupRange::all(8),
        vec![value_desc("v")],
        vec![OwnedEntry {
            key_group: wrong,
            state: 0,
            key,
            namespace: vec![],
            user_key: None,
            value: b"x".to_vec(),
            timestamp: None,
        }],
    );
    assert!(matches!(b.restore(&[&view]), Err(StateError::Restore(_))));
    Ok(())
}

#[test]
fn dispose_clears_everything() -> R {
    let (mut b, _) = backend(8);
    let v = b.register(value_desc("v"), StateFunctions::None)?;
    b.put(v, b"k", b"", b"x")?;
    assert!(b.approx_bytes() > 0);
    let view = b.snapshot(1)?;
    b.dispose();
    assert_eq!(b.entry_count(), 0);
    assert!(b.descriptors().is_empty());
    assert!(b.handle("v").is_none());
    assert!(matches!(b.put(v, b"k", b"", b"x"), Err(StateError::UnknownState(_))));
    // A view taken before stays readable.
    assert_eq!(collect(view.as_ref()).len(), 1);
    Ok(())
}

/// Map states in both layouts — key groups packed (maps of one shape, at most 16 entries) and
/// key groups converted (a long map, or another shape) — snapshot in canonical order (key,
/// namespace, user key), restore into another backend, and read back the same.
#[test]
fn packed_and_converted_map_tables_snapshot_and_restore_alike() -> R {
    let (mut b, _) = backend(8);
    let m = b.register(map_desc("m"), StateFunctions::None)?;
    type Maps = std::collections::BTreeMap<(Vec<u8>, Vec<u8>), Vec<(Vec<u8>, Vec<u8>)>>;
    let mut want = Maps::new();
    for k in 0..400u32 {
        let key = k.to_be_bytes();
        // Every 50th key gets a long map (converting its key group), every 70th a value of
        // another length; the rest three user keys each, written in descending order.
        let n = if k % 50 == 0 { 20u8 } else { 3 };
        for u in (0..n).rev() {
            let value = if k % 70 == 0 { vec![u; 3] } else { vec![u; 8] };
            b.map_put(m, &key, b"ns", &[u, 0xee], &value)?;
            want.entry((key.to_vec(), b"ns".to_vec()))
                .or_default()
                .push((vec![u, 0xee], value));
        }
    }
    for maps in want.values_mut() {
        maps.sort();
    }
    let Tables::Map(tables) = b.tables_for_test(0) else {
        panic!()
    };
    assert!(tables.iter().any(|t| t.is_packed()) && tables.iter().any(|t| !t.is_packed()));
    let view = b.snapshot_view(1);
    let entries = collect(&view);
    // Canonical order: by key group, then key, namespace and user key.
    let order: Vec<_> = entries
        .iter()
        .map(|e| {
            (
                e.key_group,
                &e.key[..],
                &e.namespace[..],
                e.user_key.as_deref().unwrap_or_default(),
            )
        })
        .collect();
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(order, sorted);
    assert_eq!(entries.len(), want.values().map(Vec::len).sum::<usize>());
    let (mut restored, _) = backend(8);
    restored.restore(&[&view])?;
    let h = restored.handle("m").expect("restored state");
    for ((key, ns), maps) in &want {
        assert_eq!(&map_all(&mut b, m, key, ns), maps);
        assert_eq!(&map_all(&mut restored, h, key, ns), maps);
    }
    Ok(())
}

/// One operation of [`word_fast_paths_match_a_model`].
#[derive(Clone, Debug)]
enum WordOp {
    Get(u16),
    Put(u16, u8),
    MapGet(u16, u8),
    MapPut(u16, u8, u8),
    Clear(u16),
    MapRemove(u16, u8),
    /// Take a snapshot and hold it (writes then copy the shards they touch).
    Snapshot,
}

/// A key of [`word_fast_paths_match_a_model`]: mostly 8 bytes (the fast paths' shape), every
/// 37th 4 bytes; a value: mostly 8 bytes, value 255 a 3-byte one (both take the general path
/// and convert the key group's table for good).
fn word_key(k: u16) -> Vec<u8> {
    if k % 37 == 36 {
        u32::from(k).to_be_bytes().to_vec()
    } else {
        i64::from(k).to_be_bytes().to_vec()
    }
}
fn word_value(v: u8) -> Vec<u8> {
    if v == 255 {
        vec![v; 3]
    } else {
        (i64::from(v) << 40).to_be_bytes().to_vec()
    }
}

fn word_op() -> impl proptest::strategy::Strategy<Value = WordOp> {
    use proptest::prelude::*;
    let k = 0u16..400;
    let u = 0u8..20;
    prop_oneof![
        6 => k.clone().prop_map(WordOp::Get),
        8 => (k.clone(), any::<u8>()).prop_map(|(k, v)| WordOp::Put(k, v)),
        6 => (k.clone(), u.clone()).prop_map(|(k, u)| WordOp::MapGet(k, u)),
        8 => (k.clone(), u.clone(), any::<u8>()).prop_map(|(k, u, v)| WordOp::MapPut(k, u, v)),
        1 => k.clone().prop_map(WordOp::Clear),
        2 => (k, u).prop_map(|(k, u)| WordOp::MapRemove(k, u)),
        1 => Just(WordOp::Snapshot),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::test_runner::Config { cases: 48, ..Default::default() })]

    /// The `get`/`put`/`map_get`/`map_put` paths for 8-byte keys and values in packed tables
    /// agree with a `BTreeMap` model, beside the general paths they fall back to (other key
    /// and value lengths, key groups of another subtask, held snapshots), and snapshots keep
    /// what they saw. Maps hold up to 20 user keys, past the 16 of a packed map.
    #[test]
    fn word_fast_paths_match_a_model(ops in proptest::collection::vec(word_op(), 1..600)) {
        use std::collections::BTreeMap;
        // Subtask 0 of 2: about half of the keys are another subtask's.
        let cfg = BackendConfig::for_subtask(128, 2, 0)?;
        let mut b = HashMapBackend::new(cfg)?;
        let v = b.register(StateDescriptor::value("v", TypeSchema::I64, TypeSchema::I64), StateFunctions::None)?;
        let m = b.register(
            StateDescriptor::map("m", TypeSchema::I64, TypeSchema::I64, TypeSchema::I64),
            StateFunctions::None,
        )?;
        let mine = {
            let range = b.key_group_range();
            move |key: &[u8]| range.contains(key_group_for_key(key, 128))
        };
        let mut values: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        let mut maps: BTreeMap<(Vec<u8>, Vec<u8>), Vec<u8>> = BTreeMap::new();
        let mut held = None;
        let mut out = Vec::new();
        let uk = |u: u8| i64::from(u).to_be_bytes().to_vec();
        for op in ops {
            match op {
                WordOp::Get(k) => {
                    let key = word_key(k);
                    match b.get(v, &key, b"", &mut out) {
                        Ok(found) => {
                            proptest::prop_assert!(mine(&key));
                            proptest::prop_assert_eq!(found.then(|| out.clone()), values.get(&key).cloned());
                        }
                        Err(StateError::KeyGroupOutOfRange { .. }) => proptest::prop_assert!(!mine(&key)),
                        Err(e) => return Err(e.into()),
                    }
                }
                WordOp::Put(k, x) => {
                    let key = word_key(k);
                    match b.put(v, &key, b"", &word_value(x)) {
                        Ok(()) => {
                            proptest::prop_assert!(mine(&key));
                            values.insert(key, word_value(x));
                        }
                        Err(StateError::KeyGroupOutOfRange { .. }) => proptest::prop_assert!(!mine(&key)),
                        Err(e) => return Err(e.into()),
                    }
                }
                WordOp::MapGet(k, u) => {
                    let key = word_key(k);
                    match b.map_get(m, &key, b"", &uk(u), &mut out) {
                        Ok(found) => {
                            proptest::prop_assert!(mine(&key));
                            proptest::prop_assert_eq!(found.then(|| out.clone()), maps.get(&(key, uk(u))).cloned());
                        }
                        Err(StateError::KeyGroupOutOfRange { .. }) => proptest::prop_assert!(!mine(&key)),
                        Err(e) => return Err(e.into()),
                    }
                }
                WordOp::MapPut(k, u, x) => {
                    let key = word_key(k);
                    match b.map_put(m, &key, b"", &uk(u), &word_value(x)) {
                        Ok(()) => {
                            proptest::prop_assert!(mine(&key));
                            maps.insert((key, uk(u)), word_value(x));
                        }
                        Err(StateError::KeyGroupOutOfRange { .. }) => proptest::prop_assert!(!mine(&key)),
                        Err(e) => return Err(e.into()),
                    }
                }
                WordOp::Clear(k) => {
                    let key = word_key(k);
                    if mine(&key) {
                        b.clear(v, &key, b"")?;
                        values.remove(&key);
                    }
                }
                WordOp::MapRemove(k, u) => {
                    let key = word_key(k);
                    if mine(&key) {
                        b.map_remove(m, &key, b"", &uk(u))?;
                        maps.remove(&(key, uk(u)));
                    }
                }
                WordOp::Snapshot => held = Some((b.snapshot(1)?, values.clone(), maps.clone())),
            }
        }
        // The entry counts the tables keep (a fast-path insert that forgot its count would
        // leave them behind).
        let map_keys: std::collections::BTreeSet<&Vec<u8>> = maps.keys().map(|(k, _)| k).collect();
        proptest::prop_assert_eq!(b.entry_count(), values.len() + map_keys.len());
        let Tables::Map(map_tables) = b.tables_for_test(m.0 as usize) else {
            panic!("m is a map state")
        };
        proptest::prop_assert_eq!(map_tables.iter().map(|t| t.entry_count()).sum::<usize>(), maps.len());
        // Every entry, read back through the snapshot of the end and the one held.
        let end = (b.snapshot(2)?, values, maps);
        for (view, values, maps) in held.iter().chain([&end]) {
            let mut seen_values = BTreeMap::new();
            let mut seen_maps = BTreeMap::new();
            for e in assert_canonical(view.as_ref()) {
                match e.user_key {
                    None => seen_values.insert(e.key, e.value),
                    Some(u) => seen_maps.insert((e.key, u), e.value),
                };
            }
            proptest::prop_assert_eq!(&seen_values, values);
            proptest::prop_assert_eq!(&seen_maps, maps);
        }
    }
}
