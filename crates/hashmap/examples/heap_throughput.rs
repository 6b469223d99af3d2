//! Single-thread throughput of the heap backend against a plain
//! `std::collections::HashMap<Vec<u8>, Vec<u8>>` doing the same work.
//!
//! `cargo run --release -p statekit-hashmap --example heap_throughput [keys] [rounds]`

use statekit_core::{BackendConfig, KeyedStateBackend, StateDescriptor, StateFunctions, StateHandle, TypeSchema};
use statekit_hashmap::HashMapBackend;
use std::collections::HashMap;
use std::hint::black_box;
use std::time::Instant;

fn keys(n: usize) -> Vec<Vec<u8>> {
    // A fixed pseudo-random order so neither side walks memory sequentially.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_be_bytes().to_vec()
        })
        .collect()
}

fn rate(ops: usize, f: impl FnOnce()) -> f64 {
    let t = Instant::now();
    f();
    ops as f64 / t.elapsed().as_secs_f64()
}

fn report(name: &str, base: f64, ours: f64) {
    println!(
        "{name:<22} std HashMap {:>7.2} M ops/s   heap backend {:>7.2} M ops/s   ratio {:.2}",
        base / 1e6,
        ours / 1e6,
        ours / base
    );
}

/// Value state `v` read and updated at every key (the value's first byte set to the key's
/// index); every key must be there.
fn get_update(b: &mut HashMapBackend, v: StateHandle, keys: &[Vec<u8>], out: &mut Vec<u8>) {
    for (i, k) in keys.iter().enumerate() {
        assert!(b.get(v, k, b"", out).expect("get"));
        out[0] = i as u8;
        b.put(v, k, b"", out).expect("put");
    }
}

/// Map state `m`: user key `user_keys[i % 4]` of key `i` put to `value`, for every key.
fn map_put_all(b: &mut HashMapBackend, m: StateHandle, keys: &[Vec<u8>], user_keys: &[[u8; 4]], value: &[u8]) {
    for (i, k) in keys.iter().enumerate() {
        b.map_put(m, k, b"", &user_keys[i % 4], value).expect("map_put");
    }
}

/// The baseline's composite key of a map entry: `key` then `user_key`, into `ck`.
fn composite(ck: &mut Vec<u8>, key: &[u8], user_key: &[u8]) {
    ck.clear();
    ck.extend_from_slice(key);
    ck.extend_from_slice(user_key);
}

fn backend() -> (HashMapBackend, StateHandle, StateHandle, StateHandle) {
    let mut b = HashMapBackend::new(BackendConfig::for_subtask(128, 1, 0).expect("config")).expect("backend");
    let mut register = |d: StateDescriptor| b.register(d, StateFunctions::None).expect("register");
    let v = register(StateDescriptor::value("v", TypeSchema::Bytes, TypeSchema::Bytes));
    let m = register(StateDescriptor::map(
        "m",
        TypeSchema::Bytes,
        TypeSchema::Bytes,
        TypeSchema::Bytes,
    ));
    let l = register(StateDescriptor::list("l", TypeSchema::Bytes, TypeSchema::Bytes));
    (b, v, m, l)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let keys = keys(n);
    let value = [7u8; 8];
    let user_keys: Vec<[u8; 4]> = (0..4u32).map(|i| i.to_be_bytes()).collect();
    println!("{n} keys, {rounds} rounds, 1 thread");

    for round in 0..rounds {
        println!("round {round}");
        let (mut b, v, m, l) = backend();
        let mut out = Vec::with_capacity(64);

        // Value state: insert, then get + update of existing entries.
        let mut std_map: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
        let base_ins = rate(n, || {
            for k in &keys {
                std_map.insert(k.clone(), value.to_vec());
            }
        });
        let ours_ins = rate(n, || {
            for k in &keys {
                b.put(v, k, b"", &value).expect("put");
            }
        });
        report("value insert", base_ins, ours_ins);
        let base_gu = rate(2 * n, || {
            for (i, k) in keys.iter().enumerate() {
                let cur = std_map.get(k.as_slice()).expect("present");
                out.clear();
                out.extend_from_slice(cur);
                out[0] = i as u8;
                let slot = std_map.get_mut(k.as_slice()).expect("present");
                slot.clear();
                slot.extend_from_slice(&out);
            }
        });
        let ours = rate(2 * n, || get_update(&mut b, v, &keys, &mut out));
        report("value get+update", base_gu, ours);

        // Map state: one user key per put, composite key for the baseline.
        let mut std_map2: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
        let base = rate(n, || {
            for (i, k) in keys.iter().enumerate() {
                let mut ck = k.clone();
                ck.extend_from_slice(&user_keys[i % 4]);
                std_map2.insert(ck, value.to_vec());
            }
        });
        let ours = rate(n, || map_put_all(&mut b, m, &keys, &user_keys, &value));
        report("map put (new)", base, ours);
        let base = rate(n, || {
            let mut ck = Vec::with_capacity(16);
            for (i, k) in keys.iter().enumerate() {
                composite(&mut ck, k, &user_keys[i % 4]);
                out.clear();
                out.extend_from_slice(std_map2.get(ck.as_slice()).expect("present"));
            }
        });
        let ours = rate(n, || {
            for (i, k) in keys.iter().enumerate() {
                assert!(b.map_get(m, k, b"", &user_keys[i % 4], &mut out).expect("map_get"));
            }
        });
        report("map get", base, ours);
        let base = rate(n, || {
            let mut ck = Vec::with_capacity(16);
            for (i, k) in keys.iter().enumerate() {
                composite(&mut ck, k, &user_keys[i % 4]);
                let slot = std_map2.get_mut(ck.as_slice()).expect("present");
                slot.clear();
                slot.extend_from_slice(&value);
            }
        });
        let ours = rate(n, || map_put_all(&mut b, m, &keys, &user_keys, &value));
        report("map put (overwrite)", base, ours);

        // List state: append one element per key, twice.
        let mut std_map3: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
        let base = rate(2 * n, || {
            for _ in 0..2 {
                for k in &keys {
                    match std_map3.get_mut(k.as_slice()) {
                        Some(list) => list.extend_from_slice(&value),
                        None => {
                            std_map3.insert(k.clone(), value.to_vec());
                        }
                    }
                }
            }
        });
        let ours = rate(2 * n, || {
            for _ in 0..2 {
                for k in &keys {
                    b.add(l, k, b"", &value).expect("add");
                }
            }
        });
        report("list add", base, ours);

        // Snapshot cut cost, and get+update while the snapshot is held (every shard is
        // copied once, on its first write).
        let t = Instant::now();
        let view = b.snapshot(1).expect("snapshot");
        println!("snapshot cut: {:?} ({} entries)", t.elapsed(), b.entry_count());
        let ours = rate(2 * n, || get_update(&mut b, v, &keys, &mut out));
        report("value get+update (COW)", base_gu, ours);
        black_box(view);
        black_box((&std_map, &std_map2, &std_map3));
    }
}
