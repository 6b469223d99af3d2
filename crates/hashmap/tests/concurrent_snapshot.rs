//! A snapshot is read on other threads while the backend keeps being updated: the view must
//! hold exactly the state at the snapshot call, and the updates must go on while it is read.

use statekit_core::{
    key_group_for_key, BackendConfig, KeyedStateBackend, KeyedStateView, ManualClock, MemoryView, OwnedEntry,
    StateDescriptor, StateFunctions, StateHandle, TypeSchema,
};
use statekit_hashmap::HashMapBackend;
use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MAX_P: u32 = 128;
const KEYS: u64 = 4_000;
const NAMESPACES: [&[u8]; 2] = [b"", b"w"];

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A (key, namespace) pair.
type KeyNs = (Vec<u8>, Vec<u8>);

/// The contents of the three states, as plain maps over (key, namespace).
#[derive(Default, Clone)]
struct Model {
    values: BTreeMap<KeyNs, Vec<u8>>,
    lists: BTreeMap<KeyNs, Vec<Vec<u8>>>,
    maps: BTreeMap<KeyNs, BTreeMap<Vec<u8>, Vec<u8>>>,
}

impl Model {
    /// The entries a snapshot of this state holds (states 0 = value, 1 = list, 2 = map), in
    /// key-group then canonical order.
    fn entries(&self) -> Vec<OwnedEntry> {
        let e = |state: u32, (k, n): &KeyNs, user_key: Option<&Vec<u8>>, value: &Vec<u8>| OwnedEntry {
            key_group: key_group_for_key(k, MAX_P),
            state,
            key: k.clone(),
            namespace: n.clone(),
            user_key: user_key.cloned(),
            value: value.clone(),
            timestamp: None,
        };
        let mut out: Vec<OwnedEntry> = Vec::new();
        out.extend(self.values.iter().map(|(kn, v)| e(0, kn, None, v)));
        for (kn, l) in &self.lists {
            out.extend(l.iter().map(|v| e(1, kn, None, v)));
        }
        for (kn, m) in &self.maps {
            out.extend(m.iter().map(|(u, v)| e(2, kn, Some(u), v)));
        }
        out.sort_by(|a, b| {
            a.key_group
                .cmp(&b.key_group)
                .then_with(|| a.as_entry().canonical_cmp(&b.as_entry()))
        });
        out
    }
}

struct Handles {
    value: StateHandle,
    list: StateHandle,
    map: StateHandle,
}

/// Applies deterministic operation number `i` to the backend and the model.
fn apply(i: u64, b: &mut HashMapBackend, h: &Handles, m: &mut Model) {
    let r = splitmix(i);
    let key = format!("user-{}", r % KEYS).into_bytes();
    let ns = NAMESPACES[((r >> 20) & 1) as usize];
    let kn = (key.clone(), ns.to_vec());
    let v = i.to_be_bytes();
    let value = &v[..1 + (r >> 24) as usize % 8];
    match (r >> 32) % 16 {
        0..=4 => {
            b.put(h.value, &key, ns, value).expect("put");
            m.values.insert(kn, value.to_vec());
        }
        5..=7 => {
            b.add(h.list, &key, ns, value).expect("add");
            m.lists.entry(kn).or_default().push(value.to_vec());
        }
        8..=11 => {
            let uk = [(r >> 40) as u8 % 6];
            b.map_put(h.map, &key, ns, &uk, value).expect("map_put");
            m.maps.entry(kn).or_default().insert(uk.to_vec(), value.to_vec());
        }
        12 => {
            let uk = [(r >> 40) as u8 % 6];
            let existed = b.map_remove(h.map, &key, ns, &uk).expect("map_remove");
            let mm = m.maps.get_mut(&kn);
            assert_eq!(existed, mm.as_ref().is_some_and(|mm| mm.contains_key(&uk[..])));
            if let Some(mm) = mm {
                mm.remove(&uk[..]);
                if mm.is_empty() {
                    m.maps.remove(&kn);
                }
            }
        }
        13 => {
            b.clear(h.value, &key, ns).expect("clear");
            m.values.remove(&kn);
        }
        14 => {
            b.clear(h.list, &key, ns).expect("clear");
            m.lists.remove(&kn);
        }
        _ => {
            b.clear(h.map, &key, ns).expect("clear");
            m.maps.remove(&kn);
        }
    }
}

/// Reads a view key group by key group, pausing between groups, as a slow writer of a
/// checkpoint file would.
fn read_slowly(view: &dyn KeyedStateView, reverse: bool, pause: Duration) -> Vec<OwnedEntry> {
    let mut groups: Vec<u32> = view.key_group_range().iter().collect();
    if reverse {
        groups.reverse();
    }
    let mut per_group = BTreeMap::new();
    for kg in groups {
        let mut entries = Vec::new();
        let _ = view
            .visit_key_group(kg, &mut |e| {
                entries.push(OwnedEntry::from_entry(kg, e));
                Ok(ControlFlow::Continue(()))
            })
            .expect("visit");
        per_group.insert(kg, entries);
        std::thread::sleep(pause);
    }
    per_group.into_values().flatten().collect()
}

#[test]
fn snapshot_read_concurrently_with_updates() {
    let clock = ManualClock::new(0);
    let cfg = BackendConfig::for_subtask(MAX_P, 1, 0)
        .expect("config")
        .with_clock(clock);
    let mut backend = HashMapBackend::new(cfg).expect("backend");
    let h = Handles {
        value: backend
            .register(
                StateDescriptor::value("v", TypeSchema::Utf8, TypeSchema::Bytes).with_namespace(TypeSchema::Bytes),
                StateFunctions::None,
            )
            .expect("register"),
        list: backend
            .register(
                StateDescriptor::list("l", TypeSchema::Utf8, TypeSchema::Bytes).with_namespace(TypeSchema::Bytes),
                StateFunctions::None,
            )
            .expect("register"),
        map: backend
            .register(
                StateDescriptor::map("m", TypeSchema::Utf8, TypeSchema::Bytes, TypeSchema::Bytes)
                    .with_namespace(TypeSchema::Bytes),
                StateFunctions::None,
            )
            .expect("register"),
    };
    let mut model = Model::default();
    const BEFORE: u64 = 60_000;
    for i in 0..BEFORE {
        apply(i, &mut backend, &h, &mut model);
    }
    let expected = model.entries();
    assert!(expected.len() > 10_000, "{}", expected.len());

    // The cut.
    let cut = Instant::now();
    let view = backend.snapshot(1).expect("snapshot");
    let cut = cut.elapsed();

    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (done, stop) = (done.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut i = BEFORE;
            while !stop.load(Ordering::Relaxed) {
                apply(i, &mut backend, &h, &mut model);
                i += 1;
                done.store(i - BEFORE, Ordering::Relaxed);
            }
            (backend, model, h)
        })
    };
    // Let the writer get going, so the readers see a view whose tables are being changed.
    while done.load(Ordering::Relaxed) < 1_000 {
        std::thread::yield_now();
    }

    let read_start = done.load(Ordering::Relaxed);
    let started = Instant::now();
    let other_reader = {
        let view = view.clone();
        std::thread::spawn(move || read_slowly(view.as_ref(), true, Duration::from_micros(700)))
    };
    let got = read_slowly(view.as_ref(), false, Duration::from_millis(1));
    let got_reverse = other_reader.join().expect("reader");
    let read_end = done.load(Ordering::Relaxed);
    let read_time = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let (mut backend, model, _h) = writer.join().expect("writer");
    let total = done.load(Ordering::Relaxed);

    eprintln!(
        "cut {cut:?}; read {} entries in {read_time:?} while the writer did {} updates ({} in all after the cut)",
        got.len(),
        read_end - read_start,
        total
    );
    assert!(
        read_end > read_start,
        "the updater made no progress while the snapshot was read"
    );
    assert!(
        read_end - read_start >= 1_000,
        "only {} updates during the read",
        read_end - read_start
    );
    assert_eq!(got.len(), expected.len());
    assert!(got == expected, "the snapshot does not hold the state at the cut");
    assert!(got_reverse == expected, "the second reader saw something else");

    // The view is still the cut after all the writes; MemoryView agrees.
    let again = MemoryView::collect(view.as_ref(), view.key_group_range()).expect("collect");
    assert!(again.entries() == expected.as_slice());

    // And the backend holds the writer's state: nothing was lost while the view was shared.
    let now = backend.snapshot(2).expect("snapshot");
    let after = MemoryView::collect(now.as_ref(), now.key_group_range()).expect("collect");
    let want = model.entries();
    assert!(
        after.entries() == want.as_slice(),
        "state after the concurrent updates differs"
    );
    assert_ne!(want, expected, "the writer changed the state");
}
