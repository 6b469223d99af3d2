//! Criterion benches of keyed state operations against a plain HashMap.
#![allow(missing_docs)] // criterion_group! generates undocumented items

use criterion::{BatchSize, Criterion, Throughput};
use statekit_benches as w;
use std::collections::HashMap;

const N: usize = 100_000;

fn bench(c: &mut Criterion) {
    let keys = w::keys(N, 1);
    let mut g = c.benchmark_group("value_get_update");
    g.throughput(Throughput::Elements(N as u64));
    g.bench_function("hashmap_backend", |bch| {
        let mut b = w::backend();
        let h = w::value_state(&mut b);
        w::value_get_update(&mut b, h, &keys);
        bch.iter(|| w::value_get_update(&mut b, h, &keys));
    });
    g.bench_function("plain_hashmap", |bch| {
        let mut m: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
        w::plain_value_get_update(&mut m, &keys);
        bch.iter(|| w::plain_value_get_update(&mut m, &keys));
    });
    g.finish();

    let mut g = c.benchmark_group("map_put_get");
    g.throughput(Throughput::Elements(N as u64));
    g.bench_function("hashmap_backend", |bch| {
        bch.iter_batched(
            || {
                let mut b = w::backend();
                let h = w::map_state(&mut b);
                (b, h)
            },
            |(mut b, h)| w::map_put_get(&mut b, h, &keys),
            BatchSize::LargeInput,
        );
    });
    g.bench_function("plain_hashmap", |bch| {
        bch.iter_batched(
            HashMap::new,
            |mut m| w::plain_map_put_get(&mut m, &keys),
            BatchSize::LargeInput,
        );
    });
    g.finish();

    let mut g = c.benchmark_group("list_add");
    g.throughput(Throughput::Elements(N as u64));
    g.bench_function("hashmap_backend", |bch| {
        bch.iter_batched(
            || {
                let mut b = w::backend();
                let h = w::list_state(&mut b);
                (b, h)
            },
            |(mut b, h)| w::list_add(&mut b, h, &keys),
            BatchSize::LargeInput,
        );
    });
    g.bench_function("plain_hashmap", |bch| {
        bch.iter_batched(
            HashMap::new,
            |mut m| w::plain_list_add(&mut m, &keys),
            BatchSize::LargeInput,
        );
    });
    g.finish();
}

statekit_benches::bench_main!(bench);
