//! Object storage beside `object_store` itself, on a real S3 API server on loopback (PyPI
//! `moto[server]`: `STATEKIT_MOTO` names its `moto_server`, as `scripts/test.sh` sets it):
//! upload of data files through statekit's `ObjectStorage` writer beside `object_store`'s own
//! `WriteMultipart` of the same bytes; download through statekit's ranged blob (read-ahead,
//! split requests) and whole-object `open` beside `object_store`'s `get`; and a savepoint
//! written to S3 beside the same savepoint written to local disk. Every figure beside its
//! anchor from this run. Timings are for reading, never for pass/fail.
//!
//! ```text
//! STATEKIT_MOTO=/var/tmp/statekit-venv/bin/moto_server \
//!   cargo run --release -p statekit-benches --bin s3_report -- [--mb 256] [--rounds 3]
//! ```

#[path = "../tools/statekit/tests/common/moto.rs"]
#[allow(dead_code)]
mod moto;

use object_store::{ObjectStore, ObjectStoreExt};
use statekit_benches::arg;
use statekit_checkpoint::SnapshotWriter;
use statekit_core::location::Location;
use statekit_core::storage::{LocalStorage, Storage};
use statekit_core::{key_group_for_key, KeyGroupRange, MemoryView, OwnedEntry, StateDescriptor, TypeSchema};
use std::sync::Arc;
use std::time::{Duration, Instant};

const BUCKET: &str = "statekit-bench";
const FILE_MB: usize = 64;

/// Best of `rounds` runs of `f`.
fn best(rounds: usize, mut f: impl FnMut() -> Duration) -> Duration {
    (0..rounds).map(|_| f()).min().unwrap_or_default()
}

/// Pseudo-random bytes, half of them low-entropy (as state compresses).
fn data(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x as u8) & if i % 2 == 0 { 0xff } else { 0x0f }
        })
        .collect()
}

fn line(what: &str, bytes: usize, ours: Duration, anchor_name: &str, anchor: Duration) {
    let mbs = |d: Duration| bytes as f64 / d.as_secs_f64().max(1e-9) / 1e6;
    println!(
        "  {what:<40} {:>7.0} MB/s ({:.3} s)   {anchor_name}: {:>7.0} MB/s ({:.3} s)   {:.2}x (target >= 0.80x)",
        mbs(ours),
        ours.as_secs_f64(),
        mbs(anchor),
        anchor.as_secs_f64(),
        anchor.as_secs_f64() / ours.as_secs_f64().max(1e-9)
    );
}

fn main() {
    let mb: usize = arg("--mb", "256").parse().expect("--mb");
    let rounds: usize = arg("--rounds", "3").parse().expect("--rounds");
    let Some(server) = moto::Moto::start() else {
        eprintln!("s3_report needs STATEKIT_MOTO (the venv's moto_server; scripts/test.sh makes it)");
        std::process::exit(2);
    };
    server.create_bucket(BUCKET);
    for (k, v) in server.env() {
        std::env::set_var(k, v);
    }
    let Ok(Location::Stored { storage, .. }) = statekit_objstore::parse_location(&format!("s3://{BUCKET}")) else {
        panic!("an S3 location");
    };
    let raw: Arc<dyn ObjectStore> = Arc::new(
        object_store::aws::AmazonS3Builder::from_env()
            .with_url(format!("s3://{BUCKET}"))
            .build()
            .expect("raw client"),
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let files: Vec<Vec<u8>> = (0..mb.div_ceil(FILE_MB))
        .map(|i| data(FILE_MB.min(mb - i * FILE_MB) << 20, i as u64 + 7))
        .collect();
    let bytes: usize = files.iter().map(Vec::len).sum();
    println!(
        "statekit object storage report — release build, moto_server on 127.0.0.1; {} files, {:.0} MB; best of {rounds}",
        files.len(),
        bytes as f64 / 1e6
    );

    println!("\n== upload ==");
    let ours = best(rounds, || {
        let t = Instant::now();
        for (i, f) in files.iter().enumerate() {
            let mut w = storage.create(&format!("ours/{i}.skd")).expect("create");
            for c in f.chunks(1 << 20) {
                std::io::Write::write_all(&mut w, c).expect("write");
            }
            w.commit().expect("commit");
        }
        t.elapsed()
    });
    let anchor = best(rounds, || {
        let t = Instant::now();
        for (i, f) in files.iter().enumerate() {
            let path = object_store::path::Path::from(format!("raw/{i}.skd"));
            let store = raw.clone();
            let bytes = bytes::Bytes::copy_from_slice(f);
            rt.block_on(async move {
                let up = store.put_multipart(&path).await.expect("multipart");
                let mut w = object_store::WriteMultipart::new_with_chunk_size(up, 8 << 20);
                w.put(bytes);
                w.finish().await.expect("finish");
            });
        }
        t.elapsed()
    });
    line(
        "ObjectStorage create/write/commit",
        bytes,
        ours,
        "object_store WriteMultipart",
        anchor,
    );

    println!("\n== download ==");
    let anchor = best(rounds, || {
        let t = Instant::now();
        for i in 0..files.len() {
            let path = object_store::path::Path::from(format!("raw/{i}.skd"));
            let store = raw.clone();
            let n =
                rt.block_on(async move { store.get(&path).await.expect("get").bytes().await.expect("bytes").len() });
            std::hint::black_box(n);
        }
        t.elapsed()
    });
    let ranged = best(rounds, || {
        let t = Instant::now();
        for i in 0..files.len() {
            let b = storage.open_ranged(&format!("ours/{i}.skd")).expect("open");
            b.fetch(0, b.bytes().len() as u64).expect("fetch");
            std::hint::black_box(b.bytes().last());
        }
        t.elapsed()
    });
    line(
        "open_ranged + fetch of everything",
        bytes,
        ranged,
        "object_store get",
        anchor,
    );
    // The same request pattern through object_store alone (8 MiB ranges, 8 in flight): what
    // the server makes of ranged reads.
    let ranges_anchor = best(rounds, || {
        let t = Instant::now();
        for (i, f) in files.iter().enumerate() {
            let path = object_store::path::Path::from(format!("raw/{i}.skd"));
            let store = raw.clone();
            let len = f.len() as u64;
            let n = rt.block_on(async move {
                use futures::StreamExt;
                let ranges: Vec<std::ops::Range<u64>> = (0..len.div_ceil(8 << 20))
                    .map(|k| k * (8 << 20)..((k + 1) * (8 << 20)).min(len))
                    .collect();
                futures::stream::iter(ranges.into_iter().map(|r| {
                    let (store, path) = (store.clone(), path.clone());
                    async move { store.get_range(&path, r).await.expect("range").len() }
                }))
                .buffer_unordered(8)
                .collect::<Vec<usize>>()
                .await
                .iter()
                .sum::<usize>()
            });
            std::hint::black_box(n);
        }
        t.elapsed()
    });
    line(
        "open_ranged + fetch of everything",
        bytes,
        ranged,
        "get_range 8 MiB x8",
        ranges_anchor,
    );
    let whole = best(rounds, || {
        let t = Instant::now();
        for i in 0..files.len() {
            let b = storage.open(&format!("ours/{i}.skd")).expect("open");
            std::hint::black_box(b.bytes().len());
        }
        t.elapsed()
    });
    line("open (one GET)", bytes, whole, "object_store get", anchor);

    println!(
        "\n== a savepoint of {:.0} MB: S3 beside local disk ==",
        bytes as f64 / 1e6
    );
    let max_p = 128;
    let entries: Vec<OwnedEntry> = files
        .iter()
        .flat_map(|f| f.chunks(1000))
        .enumerate()
        .map(|(i, v)| {
            let key = (i as u64).to_be_bytes().to_vec();
            OwnedEntry {
                key_group: key_group_for_key(&key, max_p),
                state: 0,
                key,
                namespace: vec![],
                user_key: None,
                value: v.to_vec(),
                timestamp: None,
            }
        })
        .collect();
    let states = vec![StateDescriptor::value("v", TypeSchema::Bytes, TypeSchema::Bytes)];
    let view = MemoryView::new(max_p, KeyGroupRange::all(max_p), states, entries);
    let parts: Vec<MemoryView> = (0..4)
        .map(|i| MemoryView::collect(&view, KeyGroupRange::for_subtask(max_p, 4, i)).expect("part"))
        .collect();
    let write = |storage: Arc<dyn Storage>, name: &str| {
        let t = Instant::now();
        let w = SnapshotWriter::new(storage, name, statekit_format::SnapshotKind::Savepoint, 1, "job").expect("writer");
        w.register_operator("op", 4, max_p).expect("register");
        std::thread::scope(|s| {
            for (i, part) in parts.iter().enumerate() {
                let w = &w;
                s.spawn(move || w.write_subtask("op", i as u32, Some(part), None, false).expect("write"));
            }
        });
        w.finish().expect("finish");
        t.elapsed()
    };
    let tmp =
        tempfile::tempdir_in(std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "/var/tmp".into())).expect("tempdir");
    let mut n = 0;
    let local = best(rounds, || {
        n += 1;
        write(Arc::new(LocalStorage::new(tmp.path())), &format!("sp-{n}"))
    });
    let s3 = best(rounds, || {
        n += 1;
        write(storage.clone(), &format!("sp-{n}"))
    });
    println!(
        "  savepoint to S3 {:.3} s   to local disk {:.3} s   S3 takes {:.2}x as long",
        s3.as_secs_f64(),
        local.as_secs_f64(),
        s3.as_secs_f64() / local.as_secs_f64().max(1e-9)
    );
    checkpoint_section(storage, tmp.path(), mb, rounds);
}

/// The word count's checkpoints — `CheckpointStore::begin`, the backend's cut, the upload,
/// `complete` (`_metadata` last) — on S3 beside the same on local disk, same state, same
/// churn: a full checkpoint of the heap backend, and incremental native checkpoints of the
/// RocksDB backend after 1% of the keys changed.
fn checkpoint_section(s3: Arc<dyn Storage>, tmp: &std::path::Path, mb: usize, rounds: usize) {
    use statekit_benches as w;
    use statekit_checkpoint::CheckpointStore;
    use statekit_core::KeyedStateBackend;
    let value_len = 1000;
    let n = (mb * 1_000_000 / (value_len + 16)).max(100);
    println!(
        "\n== checkpoints as the word count takes them: {n} keys x {value_len} B = {:.0} MB of state, 1% churn between checkpoints, S3 beside local disk ==",
        (n * (value_len + 16)) as f64 / 1e6
    );
    let keys = w::keys(n, 11);
    // Half random, half repetitive (as `statekit_benches::fill`): state compresses somewhat.
    let value = |i: usize, round: usize| -> Vec<u8> {
        use rand::{Rng, SeedableRng};
        let mut v = vec![b'a'; value_len];
        let mut rng = rand::rngs::StdRng::seed_from_u64((i as u64) << 16 | round as u64);
        rng.fill(&mut v[..value_len / 2]);
        v
    };
    let churn = |b: &mut dyn KeyedStateBackend, h, round: usize| {
        for i in (0..n).filter(|i| (i + round).is_multiple_of(100)) {
            b.put(h, &keys[i], &[], &value(i, round)).expect("put");
        }
    };
    let uid = "counter";
    // One checkpoint: begin, the backend's cut and its files (`write`), complete; the time
    // until `_metadata` is committed (deleting what it subsumed runs after, untimed).
    let timed = |store: &CheckpointStore, id: u64, write: &mut dyn FnMut(&statekit_checkpoint::SnapshotWriter)| {
        let t = Instant::now();
        let writer = store.begin(id).expect("begin");
        writer.register_operator(uid, 1, 128).expect("register");
        write(&writer);
        let (_, cleanup) = store.complete_deferred(writer).expect("complete");
        let took = t.elapsed();
        cleanup.run().expect("cleanup");
        took
    };
    let mut run_id = 0u64;
    let mut store_at = |storage: &Arc<dyn Storage>| {
        run_id += 1;
        let job = format!("{:032x}", 0xbe7c_0000 + run_id);
        CheckpointStore::open(storage.clone(), &job, 2).expect("store")
    };
    let local: Arc<dyn Storage> = Arc::new(LocalStorage::new(tmp.join("checkpoints")));
    let mut rows: Vec<(&str, Duration, Duration)> = Vec::new();

    // Heap backend, full checkpoints.
    let mut heap = w::backend();
    let h = w::value_state_on(&mut heap);
    for (i, k) in keys.iter().enumerate() {
        heap.put(h, k, &[], &value(i, 0)).expect("put");
    }
    let mut heap_times = [Duration::MAX; 2];
    for (slot, storage) in [&local, &s3].into_iter().enumerate() {
        let store = store_at(storage);
        for id in 1..=rounds as u64 {
            churn(&mut heap, h, id as usize);
            let t = timed(&store, id, &mut |writer| {
                let view = heap.snapshot(id).expect("snapshot");
                writer
                    .write_subtask(uid, 0, Some(view.as_ref()), None, false)
                    .expect("write");
            });
            heap.notify_checkpoint_complete(id).expect("notify");
            heap_times[slot] = heap_times[slot].min(t);
        }
    }
    rows.push(("heap backend, full checkpoint", heap_times[0], heap_times[1]));
    drop(heap);

    // RocksDB backend, incremental native checkpoints (the first, which uploads every file,
    // is not counted); a backend of its own for each storage, loaded alike.
    let mut first = [Duration::ZERO; 2];
    let mut incr = [Duration::MAX; 2];
    for (slot, storage) in [&local, &s3].into_iter().enumerate() {
        let opts = w::rocksdb_options(&tmp.join(format!("rocksdb-{slot}")));
        let mut rocks = w::rocksdb_backend(&opts);
        let h = w::value_state_on(&mut rocks);
        for (i, k) in keys.iter().enumerate() {
            rocks.put(h, k, &[], &value(i, 0)).expect("put");
        }
        let store = store_at(storage);
        for id in 1..=(rounds as u64 + 1) {
            churn(&mut rocks, h, 1000 + id as usize);
            let t = timed(&store, id, &mut |writer| {
                let cut = rocks.native_snapshot(id).expect("cut");
                let handle = cut
                    .upload(&writer.native_target(uid, 0).expect("target"))
                    .expect("upload");
                writer
                    .add_native_subtask(uid, 0, handle, rocks.descriptors(), None, false)
                    .expect("add");
            });
            rocks.notify_checkpoint_complete(id).expect("notify");
            if id == 1 {
                first[slot] = t;
            } else {
                incr[slot] = incr[slot].min(t);
            }
        }
    }
    rows.push(("RocksDB, first native checkpoint (all files)", first[0], first[1]));
    rows.push(("RocksDB, incremental checkpoint (1% churn)", incr[0], incr[1]));
    for (what, local, s3) in rows {
        println!(
            "  {what:<46} S3 {:>8.1} ms   local disk {:>8.1} ms   S3 takes {:.2}x as long",
            s3.as_secs_f64() * 1e3,
            local.as_secs_f64() * 1e3,
            s3.as_secs_f64() / local.as_secs_f64().max(1e-9)
        );
    }
}
