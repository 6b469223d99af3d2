//! Checkpoint, savepoint and restore costs beside real Flink's CheckpointBench (the oracle's
//! `run.sh ckbench K V`), on the same workload in the same run: `K` `Long` keys (8 bytes,
//! big-endian, as Flink's `LongSerializer` writes them) with a `V`-byte value each (the key,
//! a 4-byte phase, an incompressible tail), one subtask of max parallelism 128; a checkpoint
//! after the load, then before each of the next ones 1% of the keys (distinct, from a fixed
//! seed) get a new value; 5 checkpoints. Configs as Flink's: `hashmap` (full checkpoints),
//! `rocksdb-incremental`, `rocksdb-full` (every file of the database each time),
//! `changelog-hashmap` and `changelog-rocksdb` (log-only checkpoints, no materialization);
//! restores of the last checkpoint; canonical and native savepoints of the final state and a
//! restore of the canonical one.
//!
//! What differs, and is printed: Flink writes to the page cache without fsync; statekit
//! fsyncs every file it commits. Flink's restore is job submission → first record (it prints
//! the same job's start without state, `baseline`, which every restore includes); ours is the
//! backend's restore alone, shown beside both.

use crate::changelog::{full_checkpoint, ms, native_checkpoint, write_canonical, Cl, MAX_P, UID};
use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};
use statekit_benches as w;
use statekit_checkpoint::{CheckpointStore, SnapshotReader, SnapshotWriter};
use statekit_core::storage::{LocalStorage, Storage};
use statekit_core::{KeyGroupRange, KeyedStateBackend, StateDescriptor, StateFunctions, StateHandle, TypeSchema};
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

const JOB: &str = "c0ffee00c0ffee00c0ffee00c0ffee00";

/// The workload's shape (Flink's CheckpointBench defaults but for `keys` and `value_bytes`).
#[derive(Clone, Copy)]
pub struct Shape {
    /// Keys loaded.
    pub keys: usize,
    /// Bytes of each value.
    pub value_bytes: usize,
    /// Checkpoints (the first after the load).
    pub checkpoints: usize,
}

impl Shape {
    fn churn(&self) -> usize {
        (self.keys / 100).max(1)
    }

    /// Key `i` as `LongSerializer` writes it.
    fn key(i: usize) -> [u8; 8] {
        (i as i64).to_be_bytes()
    }

    /// The value of key `i` in `phase`: the key, the phase, then an incompressible tail.
    fn value(&self, i: usize, phase: u32, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&Self::key(i));
        out.extend_from_slice(&phase.to_be_bytes());
        let mut rng = StdRng::seed_from_u64(((i as u64) << 8) ^ u64::from(phase));
        let start = out.len();
        out.resize(self.value_bytes.max(start), 0);
        if let Some(tail) = out.get_mut(start..) {
            rng.fill_bytes(tail);
        }
    }

    /// The keys rewritten before checkpoint `phase + 1` (distinct, from a fixed seed).
    fn churned(&self, phase: u32) -> Vec<usize> {
        let mut rng = StdRng::seed_from_u64(4242 + u64::from(phase));
        rand::seq::index::sample(&mut rng, self.keys, self.churn().min(self.keys)).into_vec()
    }
}

fn value_desc() -> StateDescriptor {
    StateDescriptor::value("payload", TypeSchema::Bytes, TypeSchema::Bytes)
}

/// What Flink's CheckpointBench printed: `(config, row)` → milliseconds (and bytes where it
/// gives them), its header, and the baseline job start.
pub struct FlinkCk {
    header: String,
    version: String,
    /// `(config, "1".."5" | "restore" | "savepoint-canonical" | …)` → (ms, bytes).
    rows: BTreeMap<(String, String), (f64, u64)>,
}

/// Runs the oracle's CheckpointBench for `shape` (all configs) with its scratch space in `dir`.
pub fn run_ckbench(shape: Shape, dir: &Path) -> Result<FlinkCk, String> {
    let scratch = dir.join("flink-ckbench");
    std::fs::create_dir_all(&scratch).map_err(|e| format!("{}: {e}", scratch.display()))?;
    let heap = if shape.keys * shape.value_bytes > 200_000_000 {
        "6g"
    } else {
        "4g"
    };
    let opts = format!("-Dckbench.checkpoints={} -Dckbench.churn=0.01", shape.checkpoints);
    let args = [
        "ckbench".to_string(),
        shape.keys.to_string(),
        shape.value_bytes.to_string(),
    ];
    let env = [
        ("CKBENCH_DIR", scratch.as_os_str()),
        ("HEAP", OsStr::new(heap)),
        ("BENCH_OPTS", OsStr::new(&opts)),
    ];
    let text = crate::flink::run_oracle("CheckpointBench", &args, &env);
    let _ = std::fs::remove_dir_all(&scratch);
    parse_ckbench(&text?)
}

/// Parses CheckpointBench's output (`#` lines are details; the first names the versions).
pub fn parse_ckbench(text: &str) -> Result<FlinkCk, String> {
    let header = text
        .lines()
        .find(|l| l.starts_with("# ckbench: "))
        .ok_or_else(|| "CheckpointBench printed no header".to_string())?
        .trim_start_matches("# ckbench: ")
        .to_string();
    let version = header
        .split(',')
        .next()
        .unwrap_or("?")
        .trim_start_matches("flink ")
        .to_string();
    let mut rows = BTreeMap::new();
    // `# <config> baseline (empty state, no restore): submit->open A ms, submit->first record B ms`
    for line in text
        .lines()
        .filter(|l| l.starts_with("# ") && l.contains(" baseline ("))
    {
        let config = line.split_whitespace().nth(1).unwrap_or("?");
        let first_record = line
            .split("submit->first record ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse::<f64>().ok());
        if let Some(b) = first_record {
            rows.insert((config.to_string(), "baseline".to_string()), (b, 0));
        }
    }
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let num = |i: usize| f.get(i).and_then(|s| s.parse::<f64>().ok());
        if let ([config, row, ..], Some(t)) = (f.as_slice(), num(2)) {
            let bytes = num(3).unwrap_or(0.0) as u64;
            rows.insert((config.to_string(), row.to_string()), (t, bytes));
        }
    }
    if rows.is_empty() {
        return Err("CheckpointBench printed no results".into());
    }
    Ok(FlinkCk { header, version, rows })
}

impl FlinkCk {
    fn get(&self, config: &str, row: &str) -> Option<(f64, u64)> {
        self.rows.get(&(config.to_string(), row.to_string())).copied()
    }
}

/// Our figures for one config, in Flink's row names.
#[derive(Default)]
struct Ours {
    rows: BTreeMap<String, (f64, u64)>,
}

impl Ours {
    fn put(&mut self, row: &str, d: Duration, bytes: u64) {
        self.rows.insert(row.to_string(), (ms(d), bytes));
    }
}

/// Loads the workload into `b`.
fn load(shape: &Shape, b: &mut dyn KeyedStateBackend, h: StateHandle) -> Duration {
    let mut v = Vec::with_capacity(shape.value_bytes);
    let t = Instant::now();
    for i in 0..shape.keys {
        shape.value(i, 0, &mut v);
        b.put(h, &Shape::key(i), &[], &v).expect("put");
    }
    t.elapsed()
}

/// Rewrites the churned keys of `phase` in `b`.
fn churn(shape: &Shape, phase: u32, b: &mut dyn KeyedStateBackend, h: StateHandle) {
    let mut v = Vec::with_capacity(shape.value_bytes);
    for i in shape.churned(phase) {
        shape.value(i, phase, &mut v);
        b.put(h, &Shape::key(i), &[], &v).expect("put");
    }
}

/// The phase each checked key must show after `checkpoints` checkpoints, for 2000 keys.
fn expected(shape: &Shape) -> BTreeMap<usize, u32> {
    let step = (shape.keys / 2000).max(1);
    let mut want: BTreeMap<usize, u32> = (0..shape.keys).step_by(step).map(|i| (i, 0)).collect();
    for phase in 1..shape.checkpoints as u32 {
        for i in shape.churned(phase) {
            if let Some(p) = want.get_mut(&i) {
                *p = phase;
            }
        }
    }
    want
}

/// Checks the sampled keys of a restored backend byte for byte.
fn check(shape: &Shape, b: &mut dyn KeyedStateBackend, what: &str) {
    let h = b
        .handle("payload")
        .unwrap_or_else(|| panic!("{what}: no state payload"));
    let (mut got, mut want) = (Vec::new(), Vec::new());
    for (i, phase) in expected(shape) {
        assert!(
            b.get(h, &Shape::key(i), &[], &mut got).expect("get"),
            "{what}: key {i} missing"
        );
        shape.value(i, phase, &mut want);
        assert_eq!(got, want, "{what}: key {i}");
    }
}

/// A checkpoint store in a fresh directory under `base`.
fn store(base: &Path, name: &str) -> (PathBuf, CheckpointStore) {
    let dir = base.join(name);
    let _ = std::fs::remove_dir_all(&dir);
    let root: Arc<dyn Storage> = Arc::new(LocalStorage::new(&dir));
    (dir, CheckpointStore::open(root, JOB, 2).expect("store"))
}

/// A canonical savepoint of `b` under `base`: (time, bytes, its directory).
fn canonical_savepoint(base: &Path, b: &mut dyn KeyedStateBackend) -> (Duration, u64, PathBuf) {
    let root: Arc<dyn Storage> = Arc::new(LocalStorage::new(base));
    let t = Instant::now();
    let writer = SnapshotWriter::new_savepoint(root, "", JOB, 99).expect("savepoint writer");
    write_canonical(&writer, 99, b);
    let dir = base.join(writer.dir());
    writer.finish().expect("finish");
    (t.elapsed(), crate::tree_bytes(&dir), dir)
}

/// A native savepoint of `b` under `base`: (time, bytes).
fn native_savepoint(base: &Path, b: &mut w::RocksDbBackend) -> (Duration, u64) {
    let root: Arc<dyn Storage> = Arc::new(LocalStorage::new(base));
    let t = Instant::now();
    let writer = SnapshotWriter::new_savepoint(root, "", JOB, 98).expect("savepoint writer");
    writer.register_operator(UID, 1, MAX_P).expect("register");
    let cut = b.native_snapshot(98).expect("cut");
    let handle = cut
        .upload(&writer.native_target(UID, 0).expect("target"))
        .expect("upload");
    writer
        .add_native_subtask(UID, 0, handle, b.descriptors(), None, false)
        .expect("add");
    drop(cut);
    let dir = base.join(writer.dir());
    writer.finish().expect("finish");
    b.notify_checkpoint_aborted(98).expect("notify");
    (t.elapsed(), crate::tree_bytes(&dir))
}

/// Restores the canonical snapshot at `dir` (`uid`'s keyed state) into `b`.
/// (RocksDB: flushed, so the restored state is in its table files as after a native restore.)
fn restore_canonical(dir: &Path, p: &mut Plain) -> Duration {
    let t = Instant::now();
    let reader = SnapshotReader::open(dir).expect("open");
    reader.restore_keyed(UID, p.b()).expect("restore");
    if let Plain::Rocks(b) = p {
        b.flush().expect("flush");
    }
    t.elapsed()
}

/// A heap or a RocksDB backend.
enum Plain {
    Heap(statekit_hashmap::HashMapBackend),
    Rocks(Box<w::RocksDbBackend>),
}

impl Plain {
    fn new(heap: bool, opts: &w::RocksDbOptions) -> Self {
        if heap {
            Plain::Heap(w::backend())
        } else {
            Plain::Rocks(Box::new(w::rocksdb_backend(opts)))
        }
    }

    fn b(&mut self) -> &mut dyn KeyedStateBackend {
        match self {
            Plain::Heap(b) => b,
            Plain::Rocks(b) => b.as_mut(),
        }
    }
}

/// `hashmap`, `rocksdb-incremental`, `rocksdb-full`: checkpoints, restore of the last one,
/// savepoints (the first two) and the canonical savepoint's restore.
fn plain_config(config: &str, shape: &Shape, base: &Path) -> Ours {
    let mut ours = Ours::default();
    let rocks_opts = w::rocksdb_options(&base.join("rocksdb-work"));
    let heap = config == "hashmap";
    let incremental = config == "rocksdb-incremental";
    let mut p = Plain::new(heap, &rocks_opts);
    let h = p.b().register(value_desc(), StateFunctions::None).expect("register");
    load(shape, p.b(), h);
    let (store_dir, store) = store(base, &format!("{config}-checkpoints"));
    for n in 1..=shape.checkpoints as u64 {
        if n > 1 {
            churn(shape, n as u32 - 1, p.b(), h);
        }
        let (d, bytes) = match &mut p {
            Plain::Heap(b) => full_checkpoint(&store, n, b),
            Plain::Rocks(b) => {
                let (d, up, _) = native_checkpoint(&store, n, b, incremental);
                (d, up)
            }
        };
        ours.put(&n.to_string(), d, bytes);
    }
    // Restore of the last checkpoint into a fresh backend of the same kind.
    let reader = store.reader(shape.checkpoints as u64).expect("reader");
    let mut r = Plain::new(heap, &rocks_opts);
    let t = Instant::now();
    match &mut r {
        Plain::Heap(b) => reader.restore_keyed(UID, b).expect("restore"),
        Plain::Rocks(b) => {
            let hs = reader.native_handles(UID, KeyGroupRange::all(MAX_P)).expect("handles");
            b.restore_native(&hs, false).expect("restore native");
        }
    }
    ours.put("restore", t.elapsed(), 0);
    check(shape, r.b(), config);
    drop(r);
    drop(reader);
    drop(store);
    let _ = std::fs::remove_dir_all(&store_dir);
    if config != "rocksdb-full" {
        let sp_base = base.join(format!("{config}-savepoints"));
        std::fs::create_dir_all(&sp_base).expect("savepoint dir");
        let (d, bytes, sp) = canonical_savepoint(&sp_base, p.b());
        ours.put("savepoint-canonical", d, bytes);
        match &mut p {
            // The heap backend's own format is the canonical one: its native savepoint is
            // the canonical savepoint.
            Plain::Heap(_) => ours.put("savepoint-native", d, bytes),
            Plain::Rocks(b) => {
                let (d, bytes) = native_savepoint(&sp_base, b);
                ours.put("savepoint-native", d, bytes);
            }
        }
        drop(p);
        let mut r = Plain::new(heap, &rocks_opts);
        let d = restore_canonical(&sp, &mut r);
        ours.put("savepoint-canonical-restore", d, 0);
        check(shape, r.b(), "canonical savepoint");
        let _ = std::fs::remove_dir_all(&sp_base);
    }
    ours
}

/// `changelog-hashmap`, `changelog-rocksdb`: log-only checkpoints (no materialization), then
/// a restore of the last one (the whole log replayed).
fn changelog_config<D: KeyedStateBackend + 'static>(
    config: &str,
    shape: &Shape,
    base: &Path,
    make: &dyn Fn(statekit_core::BackendConfig) -> Result<D, statekit_core::StateError>,
) -> Ours {
    let mut ours = Ours::default();
    let dir = base.join(config);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let mut cl = Cl::new(&dir, make);
    // Cl registers its own value state ("v"); the workload goes into "payload" of the same
    // backend.
    let h = cl.b().register(value_desc(), StateFunctions::None).expect("register");
    load(shape, cl.b(), h);
    for n in 1..=shape.checkpoints as u64 {
        if n > 1 {
            churn(shape, n as u32 - 1, cl.b(), h);
        }
        // A running job's continuous uploads have finished before its next checkpoint, as
        // Flink's have when CheckpointBench triggers one.
        cl.settle_uploads();
        let c = cl.checkpoint();
        ours.put(&n.to_string(), c.total, c.log_bytes);
    }
    drop(cl.b.take());
    let reader = cl.store.reader(cl.id).expect("reader");
    let hs = reader
        .changelog_handles(UID, KeyGroupRange::all(MAX_P))
        .expect("changelog handles");
    let t = Instant::now();
    let mut restored = cl.fresh(make);
    restored.restore_changelog(&hs, true).expect("changelog restore");
    ours.put("restore", t.elapsed(), 0);
    check(shape, &mut restored, config);
    drop(restored);
    drop(reader);
    drop(cl);
    let _ = std::fs::remove_dir_all(&dir);
    ours
}

/// Our side of one CheckpointBench config.
fn run_config(config: &str, shape: &Shape, base: &Path) -> Ours {
    match config {
        "changelog-hashmap" => changelog_config(config, shape, base, &|c| statekit_hashmap::HashMapBackend::new(c)),
        "changelog-rocksdb" => {
            let opts = w::rocksdb_options(&base.join("rocksdb-work"));
            changelog_config(config, shape, base, &move |c| w::RocksDbBackend::new(c, opts.clone()))
        }
        _ => plain_config(config, shape, base),
    }
}

const CONFIGS: [&str; 5] = [
    "hashmap",
    "rocksdb-incremental",
    "rocksdb-full",
    "changelog-hashmap",
    "changelog-rocksdb",
];

/// Runs our side of every config (`skip_rocksdb`: the heap ones only; `only`, when not
/// empty: those) and Flink's (unless `ours_only`), `rounds` times — each round Flink's
/// CheckpointBench, then ours — and prints each row beside Flink's: the median over the rounds
/// of either side's time, and the median of the rounds' ratios Flink / statekit (above 1:
/// statekit is faster), each round's ratio beside it. A checkpoint of 10 MB takes tens of
/// milliseconds here, and either side's can take twice as long once in a while (both write
/// fresh page-cache pages, which this machine's host backs anew; `docs/performance.md`): a
/// single pair says more about that than about the two implementations.
pub fn section(shape: Shape, base: &Path, ours_only: bool, skip_rocksdb: bool, only: &[String], rounds: usize) {
    let rounds = rounds.max(1);
    let configs: Vec<&str> = CONFIGS
        .iter()
        .copied()
        .filter(|c| !(skip_rocksdb && c.contains("rocksdb")) && (only.is_empty() || only.iter().any(|o| o == c)))
        .collect();
    // Per round (aligned with `ours`): Flink's result, `None` when it failed or was not run.
    let mut flinks: Vec<Option<FlinkCk>> = Vec::new();
    let mut flink_err: Option<String> = ours_only.then(|| "not run (--ours-only)".to_string());
    let mut ours: Vec<BTreeMap<&str, Ours>> = Vec::new();
    for round in 1..=rounds {
        if rounds > 1 {
            eprintln!("# CheckpointBench round {round} of {rounds}");
        }
        flinks.push(if ours_only {
            None
        } else {
            run_ckbench(shape, base).map_err(|e| flink_err = Some(e)).ok()
        });
        ours.push(configs.iter().map(|c| (*c, run_config(c, &shape, base))).collect());
    }
    let (version, header) = match (flinks.iter().flatten().next(), &flink_err) {
        (Some(f), _) => (f.version.clone(), f.header.clone()),
        (None, Some(e)) => ("-".to_string(), e.clone()),
        (None, None) => ("-".to_string(), "no result".to_string()),
    };
    println!(
        "\n== checkpoints, savepoints and restores beside real Flink {version} (its CheckpointBench, this run): {} Long keys x {} B values, 1 subtask, max parallelism 128, {} checkpoints (the first after the load, then 1% churn before each); {rounds} round(s), each Flink's run then ours ==",
        shape.keys, shape.value_bytes, shape.checkpoints
    );
    println!("  Flink: {header}");
    if let (Some(e), true) = (&flink_err, flinks.iter().any(Option::is_some)) {
        println!("  Flink failed in a round ({e}); its rows are the medians of the other rounds");
    }
    println!("  Flink's checkpoints go to the page cache without fsync; statekit fsyncs what it commits. Flink's restores are job submission -> first record (its job start without state: `baseline`); statekit's the backend's restore alone");
    println!(
        "  times: the median over the rounds; Flink/us: the median of the rounds' ratios (each round's in brackets)"
    );
    println!(
        "  {:<22} {:<30} {:>10} {:>10} {:>8}   {:>10} {:>10}",
        "config", "row", "statekit", "Flink", "Flink/us", "our MB", "Flink MB"
    );
    for config in &configs {
        let Some(rows) = ours.first().and_then(|r| r.get(config)) else {
            continue;
        };
        for row in rows.rows.keys() {
            // Per round, aligned with `theirs`.
            let mine: Vec<Option<(f64, u64)>> = ours
                .iter()
                .map(|r| r.get(config).and_then(|o| o.rows.get(row)).copied())
                .collect();
            let theirs: Vec<Option<(f64, u64)>> = flinks
                .iter()
                .map(|f| f.as_ref().and_then(|f| f.get(config, row)))
                .collect();
            let t = crate::flink::median(&mine.iter().flatten().map(|m| m.0).collect::<Vec<_>>());
            let bytes = crate::flink::median(&mine.iter().flatten().map(|m| m.1 as f64).collect::<Vec<_>>());
            let ft: Vec<f64> = theirs.iter().flatten().map(|x| x.0).collect();
            let fb = crate::flink::median(&theirs.iter().flatten().map(|x| x.1 as f64).collect::<Vec<_>>());
            // Per round: Flink's time over ours of the same round.
            let ratios: Vec<f64> = theirs
                .iter()
                .zip(&mine)
                .filter_map(|(f, m)| Some(f.as_ref()?.0 / m.as_ref()?.0))
                .collect();
            let (flink_t, ratio) = if ft.is_empty() {
                (f64::NAN, f64::NAN)
            } else {
                (crate::flink::median(&ft), crate::flink::median(&ratios))
            };
            let label = match row.parse::<u32>() {
                Ok(1) => "checkpoint 1 (after the load)".to_string(),
                Ok(n) => format!("checkpoint {n} (1% churn)"),
                Err(_) => row.clone(),
            };
            let baselines: Vec<f64> = flinks
                .iter()
                .flatten()
                .filter_map(|f| f.get(config, "baseline"))
                .map(|b| b.0)
                .collect();
            let net = if row.contains("restore") && !baselines.is_empty() && !ft.is_empty() {
                let b = crate::flink::median(&baselines);
                format!(
                    "   (Flink less its {b:.0} ms job start: {:.0} ms, {:.2}x)",
                    flink_t - b,
                    (flink_t - b) / t
                )
            } else {
                String::new()
            };
            let each = if ratios.len() > 1 {
                format!("   ({})", crate::flink::each_round(&ratios))
            } else {
                String::new()
            };
            println!(
                "  {config:<22} {label:<30} {:>8.0} ms {:>7.0} ms {:>7.2}x   {:>10.1} {:>10.1}{}{each}{net}",
                t,
                flink_t,
                ratio,
                bytes / 1e6,
                fb / 1e6,
                if ratio < 1.0 { "   BEHIND" } else { "" }
            );
        }
    }
}

/// The configs whose checkpoint cost should not grow with the state: the incremental and the
/// changelog ones.
const GROWTH_CONFIGS: [&str; 3] = ["rocksdb-incremental", "changelog-hashmap", "changelog-rocksdb"];

/// How checkpoint time grows with the state at a fixed 1% churn: statekit alone (Flink's
/// CheckpointBench at 4 GB needs more heap than this machine gives a JVM beside us), the
/// median and the largest of the checkpoints after the first, for `keys` of each size.
pub fn growth(sizes: &[usize], value_bytes: usize, checkpoints: usize, base: &Path) {
    println!(
        "\n== how checkpoint time grows with the state: 1% churn before each of {} checkpoints after the first, {value_bytes} B values; statekit only ==",
        checkpoints.saturating_sub(1)
    );
    println!(
        "  {:<22} {:>12} {:>14} {:>14} {:>14} {:>13}",
        "config", "state", "median", "max", "MB each", "per churn MB"
    );
    for config in GROWTH_CONFIGS {
        let mut first: Option<f64> = None;
        for &keys in sizes {
            let shape = Shape {
                keys,
                value_bytes,
                checkpoints,
            };
            let ours = run_config(config, &shape, base);
            let mut after: Vec<(f64, u64)> = (2..=checkpoints)
                .filter_map(|n| ours.rows.get(&n.to_string()).copied())
                .collect();
            after.sort_by(|a, b| a.0.total_cmp(&b.0));
            let median = after.get(after.len() / 2).copied().unwrap_or((f64::NAN, 0));
            let max = after.last().map_or(f64::NAN, |m| m.0);
            let base_t = *first.get_or_insert(median.0);
            // The churn is 1% of the state, so it grows with it: the time per churned MB says
            // whether the cost follows the change or the state.
            let churn_mb = (shape.churn() * value_bytes) as f64 / 1e6;
            println!(
                "  {config:<22} {:>9.2} GB {:>11.1} ms {:>11.1} ms {:>14.1} {:>10.2} ms   ({:.2}x the smallest)",
                (keys * value_bytes) as f64 / 1e9,
                median.0,
                max,
                median.1 as f64 / 1e6,
                median.0 / churn_mb,
                median.0 / base_t
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_checkpointbench_output() {
        let text = "# ckbench: flink 2.3.0, java 17.0.15, K=1000 keys\n\
                    # hashmap baseline (empty state, no restore): submit->open 97 ms, submit->first record 187 ms, probes ok=0\n\
                    hashmap 1 3729 1013003892 1013003892\n\
                    hashmap savepoint-native 2166 1013005899\n\
                    hashmap restore 4825\n";
        let f = parse_ckbench(text).expect("parse");
        assert_eq!(f.version, "2.3.0");
        assert_eq!(f.get("hashmap", "1"), Some((3729.0, 1013003892)));
        assert_eq!(f.get("hashmap", "savepoint-native"), Some((2166.0, 1013005899)));
        assert_eq!(f.get("hashmap", "restore"), Some((4825.0, 0)));
        assert_eq!(f.get("hashmap", "baseline"), Some((187.0, 0)));
    }

    #[test]
    fn the_workload_is_deterministic_and_churns_one_percent() {
        let shape = Shape {
            keys: 10_000,
            value_bytes: 1000,
            checkpoints: 5,
        };
        let (mut a, mut b) = (Vec::new(), Vec::new());
        shape.value(7, 2, &mut a);
        shape.value(7, 2, &mut b);
        assert_eq!(a, b);
        assert_eq!(a.len(), 1000);
        assert_eq!(a.get(..8), Some(&7i64.to_be_bytes()[..]));
        let c = shape.churned(1);
        assert_eq!(c.len(), 100);
        let distinct: std::collections::BTreeSet<_> = c.iter().collect();
        assert_eq!(distinct.len(), 100);
        assert_eq!(shape.churned(1), c);
    }
}
