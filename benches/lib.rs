//! Workloads shared by the criterion benches and the `report` binary. Each workload has a
//! statekit side and an anchor side doing the same work, so the two can be timed in one run.

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use statekit_core::{BackendConfig, KeyedStateBackend, StateDescriptor, StateFunctions, StateHandle, TypeSchema};
use statekit_hashmap::HashMapBackend;
use std::collections::HashMap;

/// `n` distinct 16-byte keys in random order (seeded).
pub fn keys(n: usize, seed: u64) -> Vec<[u8; 16]> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut ks: Vec<[u8; 16]> = (0..n as u64)
        .map(|i| {
            let mut k = [0u8; 16];
            k[..8].copy_from_slice(&i.to_be_bytes());
            k[8..].copy_from_slice(&rng.gen::<u64>().to_le_bytes());
            k
        })
        .collect();
    ks.shuffle(&mut rng);
    ks
}

/// A single-subtask hashmap backend (max parallelism 128).
pub fn backend() -> HashMapBackend {
    HashMapBackend::new(BackendConfig::for_subtask(128, 1, 0).expect("config")).expect("backend")
}

/// Registers a ValueState<bytes, i64>.
pub fn value_state(b: &mut HashMapBackend) -> StateHandle {
    b.register(
        StateDescriptor::value("count", TypeSchema::Bytes, TypeSchema::I64),
        StateFunctions::None,
    )
    .expect("register")
}

/// Registers a MapState<bytes, bytes, bytes>.
pub fn map_state(b: &mut HashMapBackend) -> StateHandle {
    b.register(
        StateDescriptor::map("map", TypeSchema::Bytes, TypeSchema::Bytes, TypeSchema::Bytes),
        StateFunctions::None,
    )
    .expect("register")
}

/// Registers a ListState<bytes, bytes>.
pub fn list_state(b: &mut HashMapBackend) -> StateHandle {
    b.register(
        StateDescriptor::list("list", TypeSchema::Bytes, TypeSchema::Bytes),
        StateFunctions::None,
    )
    .expect("register")
}

/// ValueState get + update (+1) over every key once, in the given order.
pub fn value_get_update(b: &mut HashMapBackend, h: StateHandle, keys: &[[u8; 16]]) -> u64 {
    let mut buf = Vec::with_capacity(8);
    let mut sum = 0u64;
    for k in keys {
        let v = if b.get(h, k, &[], &mut buf).expect("get") {
            i64::from_be_bytes(buf[..8].try_into().expect("8 bytes")) + 1
        } else {
            1
        };
        sum = sum.wrapping_add(v as u64);
        b.put(h, k, &[], &v.to_be_bytes()).expect("put");
    }
    sum
}

/// The anchor: the same get + update on a plain `HashMap<Vec<u8>, Vec<u8>>`.
pub fn plain_value_get_update(m: &mut HashMap<Vec<u8>, Vec<u8>>, keys: &[[u8; 16]]) -> u64 {
    let mut buf = Vec::with_capacity(8);
    let mut sum = 0u64;
    for k in keys {
        buf.clear();
        let v = match m.get(&k[..]) {
            Some(old) => {
                buf.extend_from_slice(old);
                i64::from_be_bytes(buf[..8].try_into().expect("8 bytes")) + 1
            }
            None => 1,
        };
        sum = sum.wrapping_add(v as u64);
        match m.get_mut(&k[..]) {
            Some(slot) => {
                slot.clear();
                slot.extend_from_slice(&v.to_be_bytes());
            }
            None => {
                m.insert(k.to_vec(), v.to_be_bytes().to_vec());
            }
        }
    }
    sum
}

/// MapState: for every key, put user key `k[..4]` then get it back.
pub fn map_put_get(b: &mut HashMapBackend, h: StateHandle, keys: &[[u8; 16]]) -> usize {
    let mut buf = Vec::new();
    let mut n = 0;
    for k in keys {
        b.map_put(h, k, &[], &k[..4], &k[8..]).expect("put");
        n += usize::from(b.map_get(h, k, &[], &k[..4], &mut buf).expect("get"));
    }
    n
}

/// The anchor: a plain map keyed by key ‖ user key.
pub fn plain_map_put_get(m: &mut HashMap<Vec<u8>, Vec<u8>>, keys: &[[u8; 16]]) -> usize {
    let mut buf = Vec::new();
    let mut n = 0;
    let mut composite = Vec::with_capacity(20);
    for k in keys {
        composite.clear();
        composite.extend_from_slice(k);
        composite.extend_from_slice(&k[..4]);
        m.insert(composite.clone(), k[8..].to_vec());
        if let Some(v) = m.get(&composite) {
            buf.clear();
            buf.extend_from_slice(v);
            n += 1;
        }
    }
    n
}

/// ListState add of a 16-byte element to every key.
pub fn list_add(b: &mut HashMapBackend, h: StateHandle, keys: &[[u8; 16]]) {
    for k in keys {
        b.add(h, k, &[], k).expect("add");
    }
}

/// The anchor: append the element to a plain map's value.
pub fn plain_list_add(m: &mut HashMap<Vec<u8>, Vec<u8>>, keys: &[[u8; 16]]) {
    for k in keys {
        match m.get_mut(&k[..]) {
            Some(v) => v.extend_from_slice(k),
            None => {
                m.insert(k.to_vec(), k.to_vec());
            }
        }
    }
}

/// Fills a backend with `n` keys of `value_len`-byte pseudo-random values; returns the
/// number of state bytes (keys + values).
pub fn fill(b: &mut HashMapBackend, h: StateHandle, n: usize, value_len: usize, seed: u64) -> u64 {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut value = vec![0u8; value_len];
    let mut bytes = 0u64;
    for k in keys(n, seed) {
        rng.fill(&mut value[..]);
        // Half random, half repetitive: realistic state compresses somewhat.
        for x in value[value_len / 2..].iter_mut() {
            *x = b'a';
        }
        b.put(h, &k, &[], &value).expect("put");
        bytes += (k.len() + value.len()) as u64;
    }
    bytes
}
