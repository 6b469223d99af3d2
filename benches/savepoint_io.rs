//! Criterion benches of savepoint write and read+verify against std::fs::copy.
#![allow(missing_docs)] // criterion_group! generates undocumented items

use criterion::{Criterion, Throughput};
use statekit_benches as w;
use statekit_core::storage::LocalStorage;
use statekit_core::{KeyGroupRange, KeyedStateBackend};
use statekit_format::{write_keyed_file, KeyedFileReader, WriteOptions};

const KEYS: usize = 100_000;
const VALUE: usize = 496;

fn bench(c: &mut Criterion) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let storage = LocalStorage::new(tmp.path());
    let mut b = w::backend();
    let h = w::value_state(&mut b);
    let bytes = w::fill(&mut b, h, KEYS, VALUE, 5);
    let opts = WriteOptions::default();
    let mut g = c.benchmark_group("savepoint");
    g.throughput(Throughput::Bytes(bytes));
    g.bench_function("write_lz4", |bch| {
        bch.iter(|| {
            let view = b.snapshot(1).expect("snapshot");
            write_keyed_file(view.as_ref(), KeyGroupRange::all(128), &storage, "sp.skd", &opts).expect("write")
        })
    });
    let view = b.snapshot(1).expect("snapshot");
    let info = write_keyed_file(view.as_ref(), KeyGroupRange::all(128), &storage, "sp.skd", &opts).expect("write");
    g.bench_function("read_verify_lz4", |bch| {
        bch.iter(|| {
            KeyedFileReader::open(&storage, "sp.skd", Some(info.file.size))
                .expect("open")
                .verify()
                .expect("verify")
        })
    });
    let src = tmp.path().join("sp.skd");
    let dst = tmp.path().join("copy.bin");
    g.bench_function("anchor_fs_copy", |bch| {
        bch.iter(|| std::fs::copy(&src, &dst).expect("copy"))
    });
    g.finish();
}

statekit_benches::bench_main!(bench);
