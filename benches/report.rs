//! The benchmark report: every statekit figure printed beside its anchor measured in the
//! same run, as a ratio. Timings are for reading, never for pass/fail.
//!
//! ```text
//! cargo run --release -p statekit-benches --bin report -- [--keys N] [--state-mb MB] [--dir DIR] [--skip-io]
//!                                                            [--rocksdb | --skip-rocksdb] [--skip-changelog]
//! ```
//!
//! `--rocksdb` runs only the RocksDB section (the RocksDB backend beside raw `rocksdb` doing
//! the same work on the same bytes); it also runs by default, after the others.
//!
//! `--checkpoints` runs only the checkpoint section: about 1 GB of RocksDB state
//! (`--checkpoint-state-mb`), a full (canonical) checkpoint, then rounds of 1% churn followed
//! by an incremental (native) checkpoint — bytes uploaded and wall time of each beside the
//! full one, and beside `fs::copy` + fsync of the database's files — then restores of the
//! native checkpoint and of a canonical savepoint of the same state into RocksDB.
//!
//! `--changelog` runs only the changelog section (it also runs by default, last; `--skip-changelog`
//! leaves it out, `--skip-rocksdb` its RocksDB half): the log writer's append throughput beside
//! a `BufWriter<File>` + `sync_all` of the same bytes; then, over the heap backend and over
//! RocksDB, about 1 GB of state (`--checkpoint-state-mb`, default 1000 here) loaded through the
//! changelog, one materialization, and rounds (`--checkpoint-rounds`, default 5 here) of 1% churn
//! followed by a changelog checkpoint — time and log bytes beside a full canonical heap
//! checkpoint of the same state, resp. an incremental native checkpoint of a plain RocksDB
//! backend given the same keys, values and churn — and restores of the last changelog
//! checkpoint (materialization + tail) beside restores of a full canonical checkpoint of the
//! same state, with the space amplification of the log.

mod changelog;
mod flink;
mod flink_ckpt;

use statekit_benches as w;
use statekit_core::storage::{LocalStorage, Storage};
use statekit_core::{KeyGroupRange, KeyedStateBackend};
use statekit_format::{write_keyed_file, Compression, KeyedFileReader, WriteOptions};
use std::collections::HashMap;
use std::fs::File;
use std::hint::black_box;
use std::time::{Duration, Instant};

struct Opts {
    keys: usize,
    state_mb: u64,
    dir: Option<String>,
    skip_io: bool,
    rounds: usize,
    /// Run only the RocksDB section.
    rocksdb_only: bool,
    skip_rocksdb: bool,
    /// Run only the RocksDB checkpoint section (incremental vs full, restores).
    checkpoints_only: bool,
    /// Run only the changelog section.
    changelog_only: bool,
    /// Leave the changelog section out of the full report.
    skip_changelog: bool,
    /// State size of the checkpoint and changelog sections (None: 1024 MB, resp. 1000 MB).
    checkpoint_state_mb: Option<u64>,
    /// Incremental rounds of the checkpoint and changelog sections (None: 12, resp. 5).
    checkpoint_rounds: Option<usize>,
    /// RocksDB's level-0 compaction trigger in the checkpoint section (None: the profile's).
    l0_trigger: Option<i32>,
    /// Run only the section beside real Flink (its StateBench and heap footprint).
    flink_only: bool,
    /// With `--flink`: statekit's side only, Flink not run (for profiling; prints no ratios).
    ours_only: bool,
    /// With `--flink`: rounds of StateBench, each Flink's run then ours (heap, RocksDB) in
    /// fresh processes; every case's ratio is the median of the rounds' ratios.
    flink_rounds: usize,
    /// Rounds of CheckpointBench (each Flink's, then ours).
    ck_rounds: usize,
    /// Run only the checkpoint half of the section beside real Flink (its CheckpointBench).
    flink_checkpoints_only: bool,
    /// With `--flink`: leave the checkpoint half out.
    skip_flink_checkpoints: bool,
    /// Keys, value bytes and checkpoints of the CheckpointBench pairing.
    ck_keys: usize,
    ck_value_bytes: usize,
    ck_checkpoints: usize,
    /// Only these CheckpointBench configs (empty: all).
    ck_configs: Vec<String>,
    /// Run only the growth of checkpoint time with the state (these key counts).
    ck_growth: Option<Vec<usize>>,
}

fn parse() -> Opts {
    let mut o = Opts {
        keys: 1_000_000,
        state_mb: 512,
        dir: None,
        skip_io: false,
        rounds: 3,
        rocksdb_only: false,
        skip_rocksdb: false,
        checkpoints_only: false,
        changelog_only: false,
        skip_changelog: false,
        checkpoint_state_mb: None,
        checkpoint_rounds: None,
        l0_trigger: None,
        flink_only: false,
        ours_only: false,
        flink_rounds: 5,
        ck_rounds: 5,
        flink_checkpoints_only: false,
        skip_flink_checkpoints: false,
        ck_keys: 1_000_000,
        ck_value_bytes: 1000,
        ck_checkpoints: 5,
        ck_configs: Vec::new(),
        ck_growth: None,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let val = || args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--keys" => {
                o.keys = val().parse().expect("--keys N");
                i += 1;
            }
            "--state-mb" => {
                o.state_mb = val().parse().expect("--state-mb MB");
                i += 1;
            }
            "--dir" => {
                o.dir = Some(val());
                i += 1;
            }
            "--rounds" => {
                o.rounds = val().parse().expect("--rounds N");
                i += 1;
            }
            "--skip-io" => o.skip_io = true,
            "--checkpoints" => o.checkpoints_only = true,
            "--checkpoint-state-mb" => {
                o.checkpoint_state_mb = Some(val().parse().expect("--checkpoint-state-mb MB"));
                i += 1;
            }
            "--l0-trigger" => {
                o.l0_trigger = Some(val().parse().expect("--l0-trigger N"));
                i += 1;
            }
            "--checkpoint-rounds" => {
                o.checkpoint_rounds = Some(val().parse().expect("--checkpoint-rounds N"));
                i += 1;
            }
            "--rocksdb" => o.rocksdb_only = true,
            "--flink" => o.flink_only = true,
            "--ours-only" => o.ours_only = true,
            "--ck-rounds" => {
                o.ck_rounds = val().parse::<usize>().expect("--ck-rounds N").max(1);
                i += 1;
            }
            "--flink-rounds" => {
                o.flink_rounds = val().parse::<usize>().expect("--flink-rounds N").max(1);
                i += 1;
            }
            "--flink-checkpoints" => o.flink_checkpoints_only = true,
            "--skip-flink-checkpoints" => o.skip_flink_checkpoints = true,
            "--ck-keys" => {
                o.ck_keys = val().parse().expect("--ck-keys N");
                i += 1;
            }
            "--ck-value-bytes" => {
                o.ck_value_bytes = val().parse().expect("--ck-value-bytes B");
                i += 1;
            }
            "--ck-growth" => {
                o.ck_growth = Some(
                    val()
                        .split(',')
                        .map(|k| k.trim().parse().expect("--ck-growth K1,K2,..."))
                        .collect(),
                );
                i += 1;
            }
            "--ck-config" => {
                o.ck_configs.push(val());
                i += 1;
            }
            "--ck-checkpoints" => {
                o.ck_checkpoints = val().parse::<usize>().expect("--ck-checkpoints N").max(1);
                i += 1;
            }
            "--skip-rocksdb" => o.skip_rocksdb = true,
            "--changelog" => o.changelog_only = true,
            "--skip-changelog" => o.skip_changelog = true,
            "-h" | "--help" => {
                println!(
                    "usage: report [--keys N] [--state-mb MB] [--dir DIR] [--rounds N] [--skip-io] [--rocksdb | --skip-rocksdb] [--skip-changelog]\n       report --checkpoints [--checkpoint-state-mb MB] [--checkpoint-rounds N] [--l0-trigger N] [--dir DIR]\n       report --changelog [--checkpoint-state-mb MB] [--checkpoint-rounds N] [--rounds N] [--skip-rocksdb] [--dir DIR]\n       report --flink [--keys N] [--dir DIR] [--flink-rounds N] [--ck-rounds N] [--ours-only] [--skip-rocksdb] [--skip-flink-checkpoints]   (real Flink beside statekit: needs java 17; fetches Flink's jars once)\n       report --flink-checkpoints [--ck-keys N] [--ck-value-bytes B] [--ck-checkpoints N] [--ck-config NAME]... [--ck-rounds N] [--dir DIR] [--ours-only] [--skip-rocksdb]   (the checkpoint half alone)\n       report --ck-growth 100000,1000000,4000000 [--ck-value-bytes B] [--ck-checkpoints N] [--dir DIR]   (incremental and changelog checkpoint time as the state grows; statekit only)"
                );
                std::process::exit(0);
            }
            other => panic!("unknown argument {other}"),
        }
        i += 1;
    }
    o
}

fn best<F: FnMut() -> Duration>(rounds: usize, mut f: F) -> Duration {
    (0..rounds.max(1)).map(|_| f()).min().unwrap_or_default()
}

/// Where the benchmarks write: `--dir`, else `$CARGO_TARGET_DIR`, else `/var/tmp`.
/// Where the report's scratch directories go: `--dir` (created when missing), else the cargo
/// target directory or `/var/tmp`.
fn base_dir(o: &Opts) -> std::path::PathBuf {
    let dir = match &o.dir {
        Some(d) => std::path::PathBuf::from(d),
        None => std::path::PathBuf::from(std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "/var/tmp".into())),
    };
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("report: cannot create {}: {e}", dir.display());
        std::process::exit(2);
    }
    dir
}

fn mops(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64() / 1e6
}

fn mbps(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64() / 1e6
}

fn row(name: &str, ours: f64, anchor_name: &str, anchor: f64, unit: &str, target: f64) {
    let ratio = ours / anchor;
    println!(
        "  {name:<28} {ours:>9.2} {unit:<6}  {anchor_name:<26} {anchor:>9.2} {unit:<6}  {ratio:>6.2}x  (target >= {target:.2}x) {}",
        if ratio >= target { "ok" } else { "BELOW TARGET" }
    );
}

fn state_ops(o: &Opts) {
    let n = o.keys;
    println!("\n== keyed state operations: {n} keys, 16-byte keys, random order, 1 thread ==");
    let keys = w::keys(n, 7);
    let order = w::keys(n, 7); // same keys, same shuffle; re-shuffled below
    let mut order = order;
    {
        use rand::seq::SliceRandom;
        use rand::SeedableRng;
        order.shuffle(&mut rand::rngs::StdRng::seed_from_u64(99));
    }

    // ValueState get + update.
    let mut b = w::backend();
    let h = w::value_state(&mut b);
    w::value_get_update(&mut b, h, &keys);
    let mut m: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
    w::plain_value_get_update(&mut m, &keys);
    let ours = best(o.rounds, || {
        let t = Instant::now();
        black_box(w::value_get_update(&mut b, h, &order));
        t.elapsed()
    });
    let anchor = best(o.rounds, || {
        let t = Instant::now();
        black_box(w::plain_value_get_update(&mut m, &order));
        t.elapsed()
    });
    row(
        "ValueState get+update",
        mops(n, ours),
        "HashMap<Vec,Vec> get+update",
        mops(n, anchor),
        "M op/s",
        0.3,
    );
    drop(b);
    drop(m);

    // MapState put + get.
    let ours = best(o.rounds, || {
        let mut b = w::backend();
        let h = w::map_state(&mut b);
        let t = Instant::now();
        black_box(w::map_put_get(&mut b, h, &order));
        t.elapsed()
    });
    let anchor = best(o.rounds, || {
        let mut m: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
        let t = Instant::now();
        black_box(w::plain_map_put_get(&mut m, &order));
        t.elapsed()
    });
    row(
        "MapState put+get",
        mops(n, ours),
        "HashMap<Vec,Vec> insert+get",
        mops(n, anchor),
        "M op/s",
        0.3,
    );

    // ListState add (two passes: create, then append).
    let ours = best(o.rounds, || {
        let mut b = w::backend();
        let h = w::list_state(&mut b);
        let t = Instant::now();
        w::list_add(&mut b, h, &order);
        w::list_add(&mut b, h, &keys);
        t.elapsed()
    });
    let anchor = best(o.rounds, || {
        let mut m: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
        let t = Instant::now();
        w::plain_list_add(&mut m, &order);
        w::plain_list_add(&mut m, &keys);
        t.elapsed()
    });
    row(
        "ListState add",
        mops(2 * n, ours),
        "HashMap<Vec,Vec> append",
        mops(2 * n, anchor),
        "M op/s",
        0.3,
    );
}

fn copy_and_sync(src: &std::path::Path, dst: &std::path::Path) -> Duration {
    let _ = std::fs::remove_file(dst);
    let t = Instant::now();
    std::fs::copy(src, dst).expect("copy");
    File::open(dst).expect("open").sync_all().expect("fsync");
    let d = t.elapsed();
    std::fs::remove_file(dst).expect("rm");
    d
}

fn copy_plain(src: &std::path::Path, dst: &std::path::Path) -> Duration {
    let _ = std::fs::remove_file(dst);
    let t = Instant::now();
    std::fs::copy(src, dst).expect("copy");
    let d = t.elapsed();
    std::fs::remove_file(dst).expect("rm");
    d
}

fn savepoint_io(o: &Opts) {
    let value_len = 496usize;
    let n = ((o.state_mb * 1_000_000) / (value_len as u64 + 16)) as usize;
    let tmp = tempfile::tempdir_in(base_dir(o)).expect("tempdir");
    let storage = LocalStorage::new(tmp.path());
    let mut b = w::backend();
    let h = w::value_state(&mut b);
    let state_bytes = w::fill(&mut b, h, n, value_len, 3);
    println!(
        "\n== savepoint write and read+verify: {n} entries, {:.0} MB of state (16 B keys, {value_len} B values, half random) in {} ==",
        state_bytes as f64 / 1e6,
        tmp.path().display()
    );
    println!(
        "  anchors: std::fs::copy of the written file (+ fsync of the copy, as our writer fsyncs), page cache warm"
    );
    for (label, compression) in [("none", Compression::None), ("lz4", Compression::Lz4)] {
        let opts = WriteOptions {
            compression,
            ..WriteOptions::default()
        };
        let path = format!("sp-{label}.skd");
        let mut file_bytes = 0;
        let write = best(o.rounds, || {
            let t = Instant::now();
            let view = b.snapshot(1).expect("snapshot");
            let info = write_keyed_file(view.as_ref(), KeyGroupRange::all(128), &storage, &path, &opts).expect("write");
            file_bytes = info.file.size;
            t.elapsed()
        });
        let src = tmp.path().join(&path);
        let dst = tmp.path().join("copy.bin");
        let anchor_w = best(o.rounds, || copy_and_sync(&src, &dst));
        let anchor_w_plain = best(o.rounds, || copy_plain(&src, &dst));
        let read = best(o.rounds, || {
            let t = Instant::now();
            let r = KeyedFileReader::open(&storage, &path, Some(file_bytes)).expect("open");
            let rep = r.verify().expect("verify");
            black_box(rep.entries);
            t.elapsed()
        });
        let anchor_r = best(o.rounds, || copy_plain(&src, &dst));
        println!(
            "  [{label}] file {:.0} MB ({:.2} of state)",
            file_bytes as f64 / 1e6,
            file_bytes as f64 / state_bytes as f64
        );
        row(
            &format!("write ({label})"),
            mbps(state_bytes, write),
            "fs::copy + fsync",
            mbps(file_bytes, anchor_w),
            "MB/s",
            0.5,
        );
        row(
            &format!("write ({label}), no-fsync anchor"),
            mbps(state_bytes, write),
            "fs::copy (no fsync)",
            mbps(file_bytes, anchor_w_plain),
            "MB/s",
            0.5,
        );
        row(
            &format!("read+verify ({label})"),
            mbps(state_bytes, read),
            "fs::copy",
            mbps(file_bytes, anchor_r),
            "MB/s",
            0.5,
        );
        let restore = best(1, || {
            let r = KeyedFileReader::open(&storage, &path, Some(file_bytes)).expect("open");
            let mut nb = w::backend();
            let t = Instant::now();
            nb.restore(&[&r]).expect("restore");
            t.elapsed()
        });
        println!(
            "  {:<28} {:>9.2} MB/s   ({:.2} s for the whole state)",
            format!("restore into hashmap ({label})"),
            mbps(state_bytes, restore),
            restore.as_secs_f64()
        );
        storage.delete_file(&path).expect("rm");
    }
}

/// Bytes of every regular file below `dir`.
fn tree_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => tree_bytes(&e.path()),
                    Ok(m) => m.len(),
                    Err(_) => 0,
                })
                .sum()
        })
        .unwrap_or(0)
}

/// `fs::copy` + fsync of every file of a RocksDB checkpoint of the backend (the upload of a
/// full native checkpoint without any statekit code): the anchor of checkpoint time.
fn copy_db_files(b: &mut w::RocksDbBackend, dst: &std::path::Path) -> (Duration, u64) {
    let cut = b.native_snapshot(u64::MAX).expect("cut");
    std::fs::create_dir_all(dst).expect("mkdir");
    let cut_dir = cut.dir().to_path_buf();
    let t = Instant::now();
    let mut bytes = 0;
    for f in cut.files() {
        let to = dst.join(&f.name);
        bytes += std::fs::copy(cut_dir.join(&f.name), &to).expect("copy");
        File::open(&to).expect("open").sync_all().expect("fsync");
    }
    let d = t.elapsed();
    drop(cut);
    std::fs::remove_dir_all(dst).expect("rm");
    (d, bytes)
}

/// Waits until the database has no flush or compaction running or pending; returns how long.
fn settle(b: &w::RocksDbBackend) -> Duration {
    let t = Instant::now();
    // A compaction may be scheduled a moment after the write that triggers it.
    std::thread::sleep(Duration::from_millis(50));
    while b.background_work_pending().expect("properties") {
        std::thread::sleep(Duration::from_millis(20));
    }
    t.elapsed()
}

/// Incremental (native) vs full (canonical) checkpoints of ~1 GB of RocksDB state with 1% of
/// the keys changed between checkpoints, and restores of both kinds into RocksDB.
fn rocksdb_checkpoints(o: &Opts) {
    use rand::{RngCore, SeedableRng};
    use statekit_checkpoint::CheckpointStore;
    let value_len = 1000usize;
    let n = ((o.checkpoint_state_mb.unwrap_or(1024) * 1_000_000) / (value_len as u64 + 16)) as usize;
    let base = base_dir(o);
    let tmp = tempfile::tempdir_in(&base).expect("tempdir");
    let mut opts = w::rocksdb_options(tmp.path());
    if let Some(t) = o.l0_trigger {
        opts.level0_compaction_trigger = t;
    }
    let mut b = w::rocksdb_backend(&opts);
    let h = b
        .register(
            statekit_core::StateDescriptor::value(
                "v",
                statekit_core::TypeSchema::Bytes,
                statekit_core::TypeSchema::Bytes,
            ),
            statekit_core::StateFunctions::None,
        )
        .expect("register");
    let keys = w::keys(n, 5);
    let mut rng = rand::rngs::StdRng::seed_from_u64(17);
    let mut value = vec![0u8; value_len];
    let t = Instant::now();
    for k in &keys {
        rng.fill_bytes(&mut value);
        b.put(h, k, &[], &value).expect("put");
    }
    b.flush().expect("flush");
    let load = t.elapsed();
    // A long-running job's database is between compactions when a checkpoint comes: let the
    // bulk load's compactions finish first, and before every checkpoint below.
    let settled = settle(&b);
    println!(
        "\n== RocksDB checkpoints: {n} keys x {value_len} B random values = {:.0} MB of state, 1 subtask, profile {} (level-0 compaction trigger {}), in {} ==",
        (n * (value_len + 16)) as f64 / 1e6,
        opts.profile,
        opts.level0_compaction_trigger,
        tmp.path().display()
    );
    println!(
        "  loaded in {:.1} s ({:.0} MB/s), compactions settled {:.1} s later; database {:.0} MB on disk",
        load.as_secs_f64(),
        mbps((n * (value_len + 16)) as u64, load),
        settled.as_secs_f64(),
        tree_bytes(b.path().expect("path")) as f64 / 1e6
    );
    println!("  before each checkpoint the database's background compactions are let finish (as between the checkpoints of a running job); their output counts as new files");
    let storage: std::sync::Arc<dyn Storage> = std::sync::Arc::new(LocalStorage::new(tmp.path().join("checkpoints")));
    let store = CheckpointStore::open(storage, "0123456789abcdef0123456789abcdef", 2).expect("store");
    let uid = "op";
    let mut id = 0u64;

    // A full checkpoint: the canonical format, every entry streamed out.
    let full = |b: &mut w::RocksDbBackend, id: u64| -> (Duration, Duration, u64) {
        let t = Instant::now();
        let writer = store.begin(id).expect("begin");
        writer.register_operator(uid, 1, 128).expect("register");
        let view = b.snapshot(id).expect("snapshot");
        let sync = t.elapsed();
        let meta = writer
            .write_subtask(uid, 0, Some(view.as_ref()), None, false)
            .expect("write");
        store.complete(writer).expect("complete");
        b.notify_checkpoint_complete(id).expect("notify");
        (t.elapsed(), sync, meta.keyed.canonical().map_or(0, |f| f.size))
    };
    // A native checkpoint: cut + upload of the files new since the last completed one.
    let native = |b: &mut w::RocksDbBackend, id: u64| -> (Duration, Duration, u64, u64, Duration) {
        let t = Instant::now();
        let writer = store.begin(id).expect("begin");
        writer.register_operator(uid, 1, 128).expect("register");
        let cut = b.native_snapshot(id).expect("cut");
        let sync = t.elapsed();
        let handle = cut
            .upload(&writer.native_target(uid, 0).expect("target"))
            .expect("upload");
        let (up, total) = (handle.uploaded_bytes, handle.total_bytes());
        writer
            .add_native_subtask(uid, 0, handle, b.descriptors(), None, false)
            .expect("add");
        let (_, cleanup) = store.complete_deferred(writer).expect("complete");
        let committed = t.elapsed();
        b.notify_checkpoint_complete(id).expect("notify");
        // Deleting what it subsumed is not part of the checkpoint (an engine runs it on an
        // I/O thread); it is timed separately.
        let t = Instant::now();
        cleanup.run().expect("cleanup");
        (committed, sync, up, total, t.elapsed())
    };

    id += 1;
    let (full_time, full_sync, full_bytes) = full(&mut b, id);
    settle(&b);
    id += 1;
    let (first_time, first_sync, first_up, _, _) = native(&mut b, id);
    let (copy_time, copy_bytes) = copy_db_files(&mut b, &tmp.path().join("copy"));
    println!(
        "  anchors: fs::copy + fsync of the database's files ({:.0} MB); the full checkpoint",
        copy_bytes as f64 / 1e6
    );
    println!(
        "  {:<44} {:>8.3} s  {:>9.1} MB written   (sync part {:.1} ms)",
        "full checkpoint (canonical, lz4)",
        full_time.as_secs_f64(),
        full_bytes as f64 / 1e6,
        full_sync.as_secs_f64() * 1e3
    );
    println!(
        "  {:<44} {:>8.3} s  {:>9.1} MB uploaded  (sync part {:.1} ms; {:.2}x the time of fs::copy+fsync)",
        "first native checkpoint (uploads every file)",
        first_time.as_secs_f64(),
        first_up as f64 / 1e6,
        first_sync.as_secs_f64() * 1e3,
        first_time.as_secs_f64() / copy_time.as_secs_f64()
    );
    println!(
        "  {:<44} {:>8.3} s  {:>9.1} MB",
        "fs::copy + fsync of the same files",
        copy_time.as_secs_f64(),
        copy_bytes as f64 / 1e6
    );

    // Rounds: 1% of the keys get new values, then an incremental checkpoint.
    let churn = (n / 100).max(1);
    let mut rounds = Vec::new();
    for r in 0..o.checkpoint_rounds.unwrap_or(12).max(1) {
        for i in 0..churn {
            let k = &keys[(r * churn * 7 + i * 97) % n];
            rng.fill_bytes(&mut value);
            b.put(h, k, &[], &value).expect("put");
        }
        let waited = settle(&b);
        id += 1;
        let (t, sync, up, total, cleanup) = native(&mut b, id);
        println!(
            "  incremental checkpoint {:>2} (1% churn: {churn} keys)  {:>8.3} s  {:>9.1} MB uploaded of {:.0} MB  (sync part {:.1} ms; then {:.0} ms deleting what it subsumed; compactions before it {:.2} s)",
            r + 1,
            t.as_secs_f64(),
            up as f64 / 1e6,
            total as f64 / 1e6,
            sync.as_secs_f64() * 1e3,
            cleanup.as_secs_f64() * 1e3,
            waited.as_secs_f64()
        );
        rounds.push((t, up));
    }
    let mut times: Vec<Duration> = rounds.iter().map(|r| r.0).collect();
    times.sort();
    let mut ups: Vec<u64> = rounds.iter().map(|r| r.1).collect();
    ups.sort();
    let (t_med, t_max) = (times[times.len() / 2], *times.last().expect("rounds"));
    let (u_med, u_max) = (ups[ups.len() / 2], *ups.last().expect("rounds"));
    let u_mean = ups.iter().sum::<u64>() / ups.len() as u64;
    // A full checkpoint of the state after churn, for the same-moment comparison.
    id += 1;
    let (full2_time, _, full2_bytes) = full(&mut b, id);
    println!(
        "  full checkpoint after the rounds               {:>8.3} s  {:>9.1} MB written",
        full2_time.as_secs_f64(),
        full2_bytes as f64 / 1e6
    );
    println!(
        "  incremental / full, bytes: median {:.2}%  mean {:.2}%  max {:.2}%   (target <= 5%)",
        100.0 * u_med as f64 / full2_bytes as f64,
        100.0 * u_mean as f64 / full2_bytes as f64,
        100.0 * u_max as f64 / full2_bytes as f64
    );
    println!(
        "  incremental / full, time:  median {:.2}%  max {:.2}%   (target <= 15%)",
        100.0 * t_med.as_secs_f64() / full2_time.as_secs_f64(),
        100.0 * t_max.as_secs_f64() / full2_time.as_secs_f64()
    );

    // Restores into a fresh RocksDB backend: the latest native checkpoint, and a canonical
    // savepoint of the same state (the full checkpoint just taken has exactly that content).
    let native_id = id - 1;
    let reader = store.reader(native_id).expect("native reader");
    let t = Instant::now();
    let mut r1 = w::rocksdb_backend(&opts);
    let hs = reader.native_handles(uid, KeyGroupRange::all(128)).expect("handles");
    r1.restore_native(&hs, false).expect("restore native");
    let native_restore = t.elapsed();
    let canonical = store.reader(id).expect("canonical reader");
    let t = Instant::now();
    let mut r2 = w::rocksdb_backend(&opts);
    canonical.restore_keyed(uid, &mut r2).expect("restore canonical");
    r2.flush().expect("flush");
    let canonical_restore = t.elapsed();
    println!(
        "  restore into RocksDB: native checkpoint {:.3} s   canonical savepoint {:.3} s   (native / canonical {:.3}x)",
        native_restore.as_secs_f64(),
        canonical_restore.as_secs_f64(),
        native_restore.as_secs_f64() / canonical_restore.as_secs_f64()
    );
    // Spot check: both restored databases answer like the source.
    let mut x = Vec::new();
    let mut y = Vec::new();
    for k in keys.iter().step_by(997) {
        let hv = r1.handle("v").expect("v");
        assert!(r1.get(hv, k, &[], &mut x).expect("get"));
        let hv = r2.handle("v").expect("v");
        assert!(r2.get(hv, k, &[], &mut y).expect("get"));
        assert_eq!(x, y);
    }
}

/// The RocksDB backend beside raw `rocksdb` (same crate, same options, same column-family
/// setup) doing the same operations on the same stored key and value bytes, precomputed for
/// the raw side: the ratio is the backend's own overhead (key-group hash, key encoding,
/// checks, dispatch).
fn rocksdb_ops(o: &Opts) {
    let n = o.keys;
    let base = base_dir(o);
    let opts = w::rocksdb_options(&base);
    println!(
        "\n== RocksDB backend vs raw rocksdb: {n} keys, 16-byte keys, random order, 1 thread, profile {}, dbs in {} ==",
        opts.profile,
        base.display()
    );
    println!("  anchors: raw `rocksdb` get_pinned/put with the same key bytes (the backend's stored keys), value bytes and options");
    let keys = w::keys(n, 7);
    let mut order = keys.clone();
    {
        use rand::seq::SliceRandom;
        use rand::SeedableRng;
        order.shuffle(&mut rand::rngs::StdRng::seed_from_u64(99));
    }

    // ValueState get + update: load every key once, then time passes in another order.
    let mut b = w::rocksdb_backend(&opts);
    let h = w::value_state_on(&mut b);
    w::value_get_update_on(&mut b, h, &keys);
    let raw = w::RawRocksDb::open(&opts, "count");
    raw.value_get_update(&w::rocksdb_value_keys(&keys));
    let stored_order = w::rocksdb_value_keys(&order);
    let (mut ours, mut anchor) = (Duration::MAX, Duration::MAX);
    for _ in 0..o.rounds.max(1) {
        // Interleaved, so both see the same machine load.
        let t = Instant::now();
        black_box(w::value_get_update_on(&mut b, h, &order));
        ours = ours.min(t.elapsed());
        let t = Instant::now();
        black_box(raw.value_get_update(&stored_order));
        anchor = anchor.min(t.elapsed());
    }
    row(
        "RocksDB ValueState get+update",
        mops(n, ours),
        "raw rocksdb get+put",
        mops(n, anchor),
        "M op/s",
        0.8,
    );
    drop(b);
    drop(raw);
    drop(stored_order);

    // MapState put + get into fresh databases.
    let stored_map = w::rocksdb_map_keys(&order);
    let (mut ours, mut anchor) = (Duration::MAX, Duration::MAX);
    for _ in 0..o.rounds.max(1) {
        let mut b = w::rocksdb_backend(&opts);
        let h = w::map_state_on(&mut b);
        let t = Instant::now();
        black_box(w::map_put_get_on(&mut b, h, &order));
        ours = ours.min(t.elapsed());
        drop(b);
        let raw = w::RawRocksDb::open(&opts, "map");
        let t = Instant::now();
        black_box(raw.map_put_get(&stored_map, &order));
        anchor = anchor.min(t.elapsed());
    }
    row(
        "RocksDB MapState put+get",
        mops(n, ours),
        "raw rocksdb put+get",
        mops(n, anchor),
        "M op/s",
        0.8,
    );
}

/// State operations beside real Flink's StateBench (same keys, order, cases, passes), then
/// memory per `ValueState<Long>` entry beside Flink heap's, all measured in this run.
fn flink_section(o: &Opts) {
    let n = o.keys;
    let rounds = if o.ours_only { 1 } else { o.flink_rounds.max(1) };
    let sides: [(&str, &str, f64); 2] = [("heap", "hashmap", 3.0), ("RocksDB", "rocksdb", 1.5)];
    let sides: Vec<(&str, &str, f64)> = sides
        .into_iter()
        .filter(|(ours_name, _, _)| {
            !((*ours_name == "heap" && o.rocksdb_only) || (*ours_name == "RocksDB" && o.skip_rocksdb))
        })
        .collect();
    let rocks_base = base_dir(o);
    // Each round: Flink's StateBench in a fresh JVM, then ours in fresh processes, so that each
    // pair is measured minutes apart at most; the machine's speed drifts more than that.
    let mut flink_rounds: Vec<flink::FlinkStateBench> = Vec::new();
    // ours[side][round]: that round's cases (or why it was not measured).
    let mut ours: Vec<Vec<Result<Vec<flink::CaseRate>, String>>> = vec![Vec::new(); sides.len()];
    for round in 0..rounds {
        let flink = if o.ours_only {
            Ok(flink::FlinkStateBench {
                header: "not run (--ours-only)".into(),
                version: "-".into(),
                rates: Default::default(),
            })
        } else {
            flink::run_statebench(n, &["hashmap", "rocksdb"])
        };
        match flink {
            Ok(f) => flink_rounds.push(f),
            Err(e) => {
                println!("\n== beside real Flink: not measured (round {}): {e} ==", round + 1);
                return;
            }
        }
        for (i, (_, flink_name, _)) in sides.iter().enumerate() {
            // Like Flink's StateBench in its fresh JVM, ours runs in a fresh process.
            ours[i].push(statebench_child(flink_name, n, &rocks_base));
        }
    }
    let Some(first) = flink_rounds.first() else {
        return;
    };
    println!(
        "\n== keyed state operations beside real Flink {} (its StateBench, this run): {n} Long keys, Long values, java.util.Random(42) order, 1 thread, median of 3 passes; {rounds} round{} of Flink then ours, each ratio the median of the rounds' ==",
        first.version,
        if rounds == 1 { "" } else { "s" }
    );
    println!("  Flink: {}", first.header);
    for (case, what) in flink::CASES {
        println!("  {case:<26} per key: {what}");
    }
    for (i, (ours_name, flink_name, target)) in sides.iter().enumerate() {
        let measured: Vec<&Vec<flink::CaseRate>> = ours[i].iter().filter_map(|r| r.as_ref().ok()).collect();
        if measured.len() < ours[i].len() {
            for e in ours[i].iter().filter_map(|r| r.as_ref().err()) {
                println!("  statekit {ours_name}: not measured: {e}");
            }
            continue;
        }
        println!(
            "  {:<26} {:>12} {:>12} {:>8}   (target >= {target:.1}x){}",
            "case",
            format!("statekit {ours_name}"),
            format!("Flink {flink_name}"),
            "ratio",
            if rounds > 1 { "   each round's ratio" } else { "" }
        );
        for &(case, _) in flink::CASES {
            let ours_r: Vec<f64> = measured
                .iter()
                .filter_map(|m| m.iter().find(|x| x.case == case))
                .map(|x| x.median)
                .collect();
            let flink_r: Vec<Option<f64>> = flink_rounds
                .iter()
                .map(|f| f.rates.get(&(flink_name.to_string(), case.to_string())).copied())
                .collect();
            let ratios: Vec<f64> = ours_r
                .iter()
                .zip(&flink_r)
                .filter_map(|(a, b)| b.map(|b| a / b))
                .collect();
            let ours_m = flink::median(&ours_r);
            if ratios.len() < ours_r.len() || ratios.is_empty() {
                println!(
                    "  {case:<26} {:>10.2} M {:>12} (Flink printed no figure)",
                    ours_m / 1e6,
                    "-"
                );
                continue;
            }
            let flink_m = flink::median(&flink_r.iter().flatten().copied().collect::<Vec<_>>());
            let ratio = flink::median(&ratios);
            println!(
                "  {case:<26} {:>10.2} M {:>10.2} M {:>7.2}x {}{}",
                ours_m / 1e6,
                flink_m / 1e6,
                ratio,
                if ratio >= *target { "ok" } else { "BELOW TARGET" },
                if rounds > 1 {
                    format!("   {}", flink::each_round(&ratios))
                } else {
                    String::new()
                }
            );
        }
        // The median hides a slow pass (the one that pays a write-back, say): every pass of
        // ours, and all of them together, so the table's figure can be read against them.
        println!("  statekit {ours_name}, every pass (M/s, in order) and all passes together, by round:");
        for (round, m) in measured.iter().enumerate() {
            for c in m.iter().filter(|c| c.passes.len() > 1) {
                let passes: Vec<String> = c.passes.iter().map(|r| format!("{:.2}", r / 1e6)).collect();
                println!(
                    "  {:<26} {:>5} {:>20}   together {:>6.2} M",
                    c.case,
                    format!("#{}", round + 1),
                    passes.join(" / "),
                    c.overall() / 1e6
                );
            }
        }
    }
    if !o.rocksdb_only {
        // How it scales: the heap backend on 1 and 2 threads (one subtask each, the keys split
        // by key group). Flink's StateBench runs one thread only, so this is ours alone.
        let one = flink::statebench_threads(1, n, 3);
        let two = flink::statebench_threads(2, n, 3);
        println!(
            "  heap backend on 1 and 2 threads (subtasks of their own; keys split by key group), total over threads:"
        );
        for ((case, a), (_, b)) in one.iter().zip(&two) {
            println!("  {case:<26} {:>8.2} M  {:>8.2} M  {:>5.2}x", a / 1e6, b / 1e6, b / a);
        }
    }
    if o.ours_only {
        return;
    }
    // Memory: each side in a fresh process.
    let footprint_keys = 1_000_000;
    let ours = std::env::current_exe()
        .map_err(|e| e.to_string())
        .and_then(|exe| {
            std::process::Command::new(exe)
                .args(["--footprint", &footprint_keys.to_string()])
                .output()
                .map_err(|e| e.to_string())
        })
        .ok()
        .and_then(|out| String::from_utf8_lossy(&out.stdout).trim().parse::<f64>().ok());
    let theirs = flink::flink_bytes_per_entry(footprint_keys);
    match (ours, theirs) {
        (Some(ours), Ok(theirs)) => println!(
            "  memory per entry of {footprint_keys} ValueState<Long>: statekit heap {ours:.1} B (RSS growth) vs Flink heap backend {theirs:.1} B (heap after GC): {:.2} of Flink's (target <= 0.33) {}",
            ours / theirs,
            if ours / theirs <= 1.0 / 3.0 { "ok" } else { "ABOVE TARGET" }
        ),
        (ours, theirs) => println!("  memory per entry: not measured (statekit: {ours:?}, Flink: {theirs:?})"),
    }
}

/// Runs StateBench's workload on our `backend` (`hashmap` or `rocksdb`, Flink's names) in a
/// child process of this report (`--statebench BACKEND KEYS DIR`, [`statebench_in_child`]);
/// its cases' passes, in [`flink::CASES`]' order.
fn statebench_child(backend: &str, keys: usize, dir: &std::path::Path) -> Result<Vec<flink::CaseRate>, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = std::process::Command::new(exe)
        .args(["--statebench", backend, &keys.to_string()])
        .arg(dir)
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "the child exited with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut rates = Vec::new();
    for &(case, _) in flink::CASES {
        let line = text
            .lines()
            .find(|l| l.split_whitespace().next() == Some(case))
            .ok_or_else(|| format!("the child printed no line for {case}: {text}"))?;
        let passes: Vec<f64> = line.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
        if passes.is_empty() {
            return Err(format!("the child's line for {case} has no figures: {line}"));
        }
        rates.push(flink::CaseRate::from_passes(case, passes));
    }
    Ok(rates)
}

/// `report --statebench BACKEND KEYS DIR`: StateBench's workload on a fresh backend of ours in
/// this (child) process; one line per case: its name and every pass's rate, in order.
fn statebench_in_child(args: &[String]) {
    let backend = args.get(2).map_or("hashmap", String::as_str);
    let keys = args.get(3).and_then(|x| x.parse().ok()).unwrap_or(1_000_000);
    let dir = std::path::PathBuf::from(args.get(4).map_or("/var/tmp", String::as_str));
    let rates = if backend == "rocksdb" {
        let mut b = w::rocksdb_backend(&w::rocksdb_options(&dir));
        flink::statebench_ours(&mut b, keys, 3)
    } else {
        let mut b = w::backend();
        flink::statebench_ours(&mut b, keys, 3)
    };
    for c in rates {
        let passes: Vec<String> = c.passes.iter().map(|r| format!("{r:.1}")).collect();
        println!("{} {}", c.case, passes.join(" "));
    }
}

fn main() {
    // `report --footprint N`: the child that measures the heap backend's RSS growth alone.
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--footprint") {
        let n = args.get(2).and_then(|x| x.parse().ok()).unwrap_or(1_000_000);
        println!("{:.1}", flink::heap_bytes_per_entry(n));
        return;
    }
    if args.get(1).map(String::as_str) == Some("--statebench") {
        statebench_in_child(&args);
        return;
    }
    let o = parse();
    println!(
        "statekit benchmark report — release build, 1 thread; each figure beside its anchor from this run (best of {})",
        o.rounds
    );
    if o.checkpoints_only {
        rocksdb_checkpoints(&o);
        return;
    }
    if o.changelog_only {
        changelog::changelog(&o);
        return;
    }
    if let Some(sizes) = &o.ck_growth {
        let base = base_dir(&o);
        let dir = tempfile::tempdir_in(&base).expect("tempdir");
        flink_ckpt::growth(sizes, o.ck_value_bytes, o.ck_checkpoints, dir.path());
        return;
    }
    if o.flink_only || o.flink_checkpoints_only {
        if o.flink_only {
            flink_section(&o);
        }
        if o.flink_checkpoints_only || !o.skip_flink_checkpoints {
            let shape = flink_ckpt::Shape {
                keys: o.ck_keys,
                value_bytes: o.ck_value_bytes,
                checkpoints: o.ck_checkpoints,
            };
            let base = base_dir(&o);
            let dir = tempfile::tempdir_in(&base).expect("tempdir");
            let rounds = if o.ours_only { 1 } else { o.ck_rounds };
            flink_ckpt::section(shape, dir.path(), o.ours_only, o.skip_rocksdb, &o.ck_configs, rounds);
        }
        return;
    }
    if !o.rocksdb_only {
        state_ops(&o);
        if !o.skip_io {
            savepoint_io(&o);
        }
    }
    if !o.skip_rocksdb {
        rocksdb_ops(&o);
    }
    if !o.rocksdb_only && !o.skip_changelog {
        changelog::changelog(&o);
    }
}
