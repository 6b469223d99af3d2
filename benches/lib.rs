//! Workloads shared by the criterion benches and the `report` binary. Each workload has a
//! statekit side and an anchor side doing the same work, so the two can be timed in one run.

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use statekit_core::{BackendConfig, KeyedStateBackend, StateDescriptor, StateFunctions, StateHandle, TypeSchema};
use statekit_hashmap::HashMapBackend;
use std::collections::HashMap;

/// The `main` of a criterion bench whose figures are all made by the function `$bench`, at
/// ten samples a figure (the setting every bench here shares).
#[macro_export]
macro_rules! bench_main {
    ($bench:path) => {
        criterion::criterion_group! {
            name = benches;
            config = criterion::Criterion::default().sample_size(10);
            targets = $bench
        }
        criterion::criterion_main!(benches);
    };
}

/// The value after `name` on the command line (`--mb 256`), or `default` without it.
pub fn arg(name: &str, default: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| default.to_string())
}

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
    value_get_update_on(b, h, keys)
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

// ---------------------------------------------------------------------------------------
// RocksDB: the backend against raw `rocksdb` doing the same work on the same bytes.

pub use statekit_rocksdb::{RocksDbBackend, RocksDbOptions};

/// The options of both sides of the RocksDB comparison: the `default` profile, its working
/// directory under `dir`.
pub fn rocksdb_options(dir: &std::path::Path) -> RocksDbOptions {
    RocksDbOptions::default().with_local_dir(dir)
}

/// A single-subtask RocksDB backend (max parallelism 128).
pub fn rocksdb_backend(opts: &RocksDbOptions) -> RocksDbBackend {
    RocksDbBackend::new(BackendConfig::for_subtask(128, 1, 0).expect("config"), opts.clone()).expect("rocksdb backend")
}

/// ValueState get + update (+1), as [`value_get_update`], on any backend.
pub fn value_get_update_on<B: KeyedStateBackend + ?Sized>(b: &mut B, h: StateHandle, keys: &[[u8; 16]]) -> u64 {
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

/// MapState put of user key `k[..4]` then get, as [`map_put_get`], on any backend.
pub fn map_put_get_on<B: KeyedStateBackend + ?Sized>(b: &mut B, h: StateHandle, keys: &[[u8; 16]]) -> usize {
    let mut buf = Vec::new();
    let mut n = 0;
    for k in keys {
        b.map_put(h, k, &[], &k[..4], &k[8..]).expect("put");
        n += usize::from(b.map_get(h, k, &[], &k[..4], &mut buf).expect("get"));
    }
    n
}

/// Registers ValueState<bytes, i64> "count" on any backend.
pub fn value_state_on<B: KeyedStateBackend + ?Sized>(b: &mut B) -> StateHandle {
    b.register(
        StateDescriptor::value("count", TypeSchema::Bytes, TypeSchema::I64),
        StateFunctions::None,
    )
    .expect("register")
}

/// Registers MapState<bytes, bytes, bytes> "map" on any backend.
pub fn map_state_on<B: KeyedStateBackend + ?Sized>(b: &mut B) -> StateHandle {
    b.register(
        StateDescriptor::map("map", TypeSchema::Bytes, TypeSchema::Bytes, TypeSchema::Bytes),
        StateFunctions::None,
    )
    .expect("register")
}

/// The RocksDB keys the backend stores for value-state key `k` (empty namespace) — computed
/// up front for the raw side, so raw RocksDB gets exactly the same key bytes.
pub fn rocksdb_value_keys(keys: &[[u8; 16]]) -> Vec<Vec<u8>> {
    let layout = statekit_rocksdb::layout::KeyLayout::for_max_parallelism(128);
    keys.iter()
        .map(|k| {
            let mut buf = Vec::new();
            layout.encode_key_ns(&mut buf, statekit_core::key_group_for_key(k, 128), k, &[]);
            buf
        })
        .collect()
}

/// The RocksDB keys the backend stores for map entry (`k`, user key `k[..4]`).
pub fn rocksdb_map_keys(keys: &[[u8; 16]]) -> Vec<Vec<u8>> {
    let layout = statekit_rocksdb::layout::KeyLayout::for_max_parallelism(128);
    keys.iter()
        .map(|k| {
            let mut buf = Vec::new();
            layout.encode_map_key(&mut buf, statekit_core::key_group_for_key(k, 128), k, &[], &k[..4]);
            buf
        })
        .collect()
}

/// Raw `rocksdb`: a database opened with the same RocksDB options the backend uses
/// ([`RocksDbOptions::to_rocksdb`]), one column family created the same way, the same
/// read options and write options (WAL off).
pub struct RawRocksDb {
    db: rocksdb::DB,
    cf: String,
    read: rocksdb::ReadOptions,
    write: rocksdb::WriteOptions,
    _cache: rocksdb::Cache,
    _dir: tempfile::TempDir,
}

impl RawRocksDb {
    /// Opens a fresh database under `opts.local_dir` with column family `cf`.
    pub fn open(opts: &RocksDbOptions, cf: &str) -> Self {
        let base = opts.local_dir.clone().unwrap_or_else(std::env::temp_dir);
        let dir = tempfile::Builder::new()
            .prefix("raw-rocksdb-")
            .tempdir_in(base)
            .expect("tempdir");
        let cache = rocksdb::Cache::new_lru_cache(opts.block_cache_bytes);
        let o = opts.to_rocksdb(&cache);
        let mut db = rocksdb::DB::open_cf_descriptors(
            &o,
            dir.path(),
            [rocksdb::ColumnFamilyDescriptor::new(
                rocksdb::DEFAULT_COLUMN_FAMILY_NAME,
                o.clone(),
            )],
        )
        .expect("open raw rocksdb");
        db.create_cf(cf, &o).expect("create cf");
        let mut write = rocksdb::WriteOptions::default();
        write.disable_wal(true);
        RawRocksDb {
            db,
            cf: cf.to_string(),
            read: rocksdb::ReadOptions::default(),
            write,
            _cache: cache,
            _dir: dir,
        }
    }

    /// Get + put (+1) of an 8-byte big-endian counter per stored key, in order.
    pub fn value_get_update(&self, stored_keys: &[Vec<u8>]) -> u64 {
        let cf = self.db.cf_handle(&self.cf).expect("cf");
        let mut buf = Vec::with_capacity(8);
        let mut sum = 0u64;
        for k in stored_keys {
            // Copied out, as the backend copies into the caller's buffer.
            let v = match self.db.get_pinned_cf_opt(cf, k, &self.read).expect("get") {
                Some(old) => {
                    buf.clear();
                    buf.extend_from_slice(&old);
                    i64::from_be_bytes(buf[..8].try_into().expect("8 bytes")) + 1
                }
                None => 1,
            };
            sum = sum.wrapping_add(v as u64);
            self.db.put_cf_opt(cf, k, v.to_be_bytes(), &self.write).expect("put");
        }
        sum
    }

    /// Put of `k[8..]` under each stored map key, then get it back (the value copied out,
    /// as the backend copies it into the caller's buffer).
    pub fn map_put_get(&self, stored_keys: &[Vec<u8>], keys: &[[u8; 16]]) -> usize {
        let cf = self.db.cf_handle(&self.cf).expect("cf");
        let mut buf = Vec::new();
        let mut n = 0;
        for (sk, k) in stored_keys.iter().zip(keys) {
            self.db.put_cf_opt(cf, sk, &k[8..], &self.write).expect("put");
            if let Some(v) = self.db.get_pinned_cf_opt(cf, sk, &self.read).expect("get") {
                buf.clear();
                buf.extend_from_slice(&v);
                n += 1;
            }
        }
        n
    }
}
