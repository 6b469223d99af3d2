//! The changelog section of the report (`report --changelog`): checkpoints of a
//! [`ChangelogBackend`] over the heap and RocksDB backends beside the checkpoints they
//! replace (a full canonical heap checkpoint; an incremental native RocksDB checkpoint of a
//! plain RocksDB backend given the same keys, values and churn), the log writer's append
//! throughput beside a plain buffered file write of the same bytes, and restores of the
//! changelog checkpoints (materialization + tail) beside restores of full canonical
//! checkpoints of the same state into the same backend kind.

use crate::{base_dir, mbps, settle, Opts};
use rand::{RngCore, SeedableRng};
use statekit_benches as w;
use statekit_changelog::{
    restore_into, Change, ChangelogBackend, ChangelogStorage, MaterializationPolicy, Materializer, Op, UploadConfig,
};
use statekit_checkpoint::{CheckpointStore, SnapshotWriter};
use statekit_core::storage::{LocalStorage, Storage};
use statekit_core::{
    key_group_for_key, BackendConfig, KeyGroupRange, KeyedStateBackend, StateDescriptor, StateError, StateFunctions,
    StateHandle, TypeSchema,
};
use statekit_hashmap::HashMapBackend;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) const UID: &str = "op";
pub(crate) const MAX_P: u32 = 128;
const VALUE_LEN: usize = 1000;
const JOB: &str = "0123456789abcdef0123456789abcdef";
const ANCHOR_JOB: &str = "fedcba9876543210fedcba9876543210";
/// Every this many keys (by index) one is spot-checked after each restore.
const SAMPLE: usize = 997;

fn cfg() -> BackendConfig {
    BackendConfig::for_subtask(MAX_P, 1, 0).expect("config")
}

fn value_desc() -> StateDescriptor {
    StateDescriptor::value("v", TypeSchema::Bytes, TypeSchema::Bytes)
}

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

fn median<T: Copy + Ord>(v: &[T]) -> T {
    let mut s = v.to_vec();
    s.sort();
    s[s.len() / 2]
}

fn max<T: Copy + Ord + Default>(v: &[T]) -> T {
    v.iter().copied().max().unwrap_or_default()
}

/// `ours / anchor` as a percentage, with an upper-bound target.
fn pct_line(what: &str, ours: (f64, f64), anchor: f64, target_pct: Option<f64>) {
    let (med, mx) = (100.0 * ours.0 / anchor, 100.0 * ours.1 / anchor);
    let verdict = match target_pct {
        Some(t) => format!(
            "(target <= {t:.0}%) {}",
            if med <= t && mx <= t {
                "ok"
            } else if med <= t {
                "ok at the median, max ABOVE TARGET"
            } else {
                "ABOVE TARGET"
            }
        ),
        None => "(no target)".to_string(),
    };
    println!("  {what:<34} median {med:>7.2}%   max {mx:>7.2}%   {verdict}");
}

/// Regular files (and their bytes) directly in `dir`.
fn dir_files(dir: &Path) -> (usize, u64) {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter_map(|e| e.metadata().ok())
                .filter(|m| m.is_file())
                .fold((0, 0), |(n, b), m| (n + 1, b + m.len()))
        })
        .unwrap_or((0, 0))
}

/// The keys, the churn, and the expected values of a sample of the keys (kept up to date
/// through the churn, for the spot checks after each restore).
struct Workload {
    keys: Vec<[u8; 16]>,
    churn: usize,
    expected: BTreeMap<usize, Vec<u8>>,
}

impl Workload {
    fn new(state_mb: u64) -> Self {
        let n = ((state_mb * 1_000_000) / (VALUE_LEN as u64 + 16)).max(1) as usize;
        Workload {
            keys: w::keys(n, 5),
            churn: (n / 100).max(1),
            expected: BTreeMap::new(),
        }
    }

    fn n(&self) -> usize {
        self.keys.len()
    }

    fn state_bytes(&self) -> u64 {
        (self.n() * (VALUE_LEN + 16)) as u64
    }

    /// Puts every key with its (seeded) random value; the same values on every call.
    fn load(&mut self, b: &mut dyn KeyedStateBackend, h: StateHandle) -> Duration {
        let mut rng = rand::rngs::StdRng::seed_from_u64(17);
        let mut value = vec![0u8; VALUE_LEN];
        let t = Instant::now();
        for (i, k) in self.keys.iter().enumerate() {
            rng.fill_bytes(&mut value);
            b.put(h, k, &[], &value).expect("put");
            if i % SAMPLE == 0 {
                self.expected.insert(i, value.clone());
            }
        }
        t.elapsed()
    }

    /// The new values of round `r`: 1% of the keys (as `rocksdb_checkpoints` picks them).
    fn churn_batch(&mut self, r: usize) -> Vec<(usize, Vec<u8>)> {
        let n = self.n();
        let mut rng = rand::rngs::StdRng::seed_from_u64(1000 + r as u64);
        let batch: Vec<(usize, Vec<u8>)> = (0..self.churn)
            .map(|i| {
                let mut v = vec![0u8; VALUE_LEN];
                rng.fill_bytes(&mut v);
                ((r * self.churn * 7 + i * 97) % n, v)
            })
            .collect();
        for (i, v) in &batch {
            if i % SAMPLE == 0 {
                self.expected.insert(*i, v.clone());
            }
        }
        batch
    }

    fn apply(&self, b: &mut dyn KeyedStateBackend, h: StateHandle, batch: &[(usize, Vec<u8>)]) {
        for (i, v) in batch {
            b.put(h, &self.keys[*i], &[], v).expect("put");
        }
    }

    /// Every sampled key holds its expected value; returns how many were checked.
    fn spot_check(&self, b: &mut dyn KeyedStateBackend, what: &str) -> usize {
        let h = b.handle("v").unwrap_or_else(|| panic!("{what}: state v missing"));
        let mut out = Vec::new();
        for (i, v) in &self.expected {
            assert!(
                b.get(h, &self.keys[*i], &[], &mut out).expect("get"),
                "{what}: key #{i} missing"
            );
            assert_eq!(&out, v, "{what}: key #{i} has the wrong value");
        }
        self.expected.len()
    }
}

/// A changelog backend, its job's checkpoint store and upload service.
pub(crate) struct Cl<D: KeyedStateBackend> {
    pub(crate) store: CheckpointStore,
    storage: ChangelogStorage,
    job: Arc<dyn Storage>,
    job_dir: PathBuf,
    pub(crate) b: Option<ChangelogBackend<D>>,
    h: StateHandle,
    pub(crate) id: u64,
    /// Log bytes uploaded up to the end of the previous checkpoint.
    uploaded: u64,
}

/// One changelog checkpoint.
pub(crate) struct ClCheckpoint {
    pub(crate) total: Duration,
    sync: Duration,
    tail_wait: Duration,
    commit: Duration,
    cleanup: Duration,
    /// Log bytes uploaded since the previous checkpoint (the churn's pre-emptive uploads
    /// and the checkpoint's own).
    pub(crate) log_bytes: u64,
    tail_bytes: u64,
    tail_records: u64,
}

impl<D: KeyedStateBackend> Cl<D> {
    pub(crate) fn new(dir: &Path, make: &dyn Fn(BackendConfig) -> Result<D, StateError>) -> Self {
        let root: Arc<dyn Storage> = Arc::new(LocalStorage::new(dir.join("checkpoints")));
        let store = CheckpointStore::open(root, JOB, 2).expect("store");
        let job = store.job_storage().expect("job storage");
        let storage = ChangelogStorage::for_job(job.clone(), UploadConfig::default()).expect("changelog storage");
        let mut cl = Cl {
            store,
            storage,
            job,
            job_dir: dir.join("checkpoints").join(JOB),
            b: None,
            h: StateHandle(0),
            id: 0,
            uploaded: 0,
        };
        let mut b = cl.fresh(make);
        cl.h = b.register(value_desc(), StateFunctions::None).expect("register");
        cl.b = Some(b);
        cl
    }

    /// A new changelog backend of this job (materializing only when told to).
    pub(crate) fn fresh(&self, make: &dyn Fn(BackendConfig) -> Result<D, StateError>) -> ChangelogBackend<D> {
        let policy = MaterializationPolicy {
            interval: None,
            max_tail_bytes: None,
            max_failures: 3,
        };
        ChangelogBackend::new(
            cfg(),
            &self.storage,
            Materializer::new(self.job.clone(), policy, 0),
            make,
        )
        .expect("changelog backend")
    }

    pub(crate) fn b(&mut self) -> &mut ChangelogBackend<D> {
        self.b.as_mut().expect("backend")
    }

    /// Waits until every change set handed to the uploader is durable (between the
    /// checkpoints of a running job the continuous uploads have time to finish); returns how
    /// long that took.
    pub(crate) fn settle_uploads(&self) -> Duration {
        let t = Instant::now();
        let wr = self.b.as_ref().expect("backend").writer();
        loop {
            let (_, sets) = wr.tail_size();
            let active = usize::from(wr.active_records() > 0);
            let uploaded = wr.segments(wr.lowest(), u64::MAX).len();
            if sets <= active + uploaded {
                return t.elapsed();
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn dstl(&self) -> (usize, u64) {
        dir_files(&self.job_dir.join("dstl"))
    }

    /// A changelog checkpoint: cut, wait for the tail, `_metadata` commit (then the
    /// subsumed checkpoints' deletions, timed apart). `STATEKIT_CK_DETAIL` set: prints the
    /// split on standard error.
    pub(crate) fn checkpoint(&mut self) -> ClCheckpoint {
        self.id += 1;
        let id = self.id;
        let b = self.b.as_mut().expect("backend");
        let t = Instant::now();
        let writer = self.store.begin(id).expect("begin");
        writer.register_operator(UID, 1, MAX_P).expect("register");
        let cut = b.checkpoint(id).expect("cut");
        let sync = t.elapsed();
        let handle = cut.finish().expect("tail durable");
        let tail_wait = t.elapsed() - sync;
        let (tail_bytes, tail_records) = (handle.tail_bytes(), handle.tail_records());
        writer
            .add_changelog_subtask(UID, 0, handle, b.descriptors(), None, false)
            .expect("add");
        let (_, cleanup) = self.store.complete_deferred(writer).expect("complete");
        let total = t.elapsed();
        b.notify_checkpoint_complete(id).expect("notify");
        let t = Instant::now();
        for s in cleanup.run().expect("cleanup") {
            b.notify_checkpoint_subsumed(s).expect("notify subsumed");
        }
        let cleanup = t.elapsed();
        let now = self.storage.stats().bytes;
        let log_bytes = now - self.uploaded;
        self.uploaded = now;
        if std::env::var_os("STATEKIT_CK_DETAIL").is_some() {
            eprintln!(
                "# changelog checkpoint {id}: cut {:.1} ms, tail durable {:.1} ms (the log: {tail_bytes} B, {tail_records} records), commit {:.1} ms, {log_bytes} B uploaded since the last, {} prepared files used so far",
                ms(sync),
                ms(tail_wait),
                ms(total - sync - tail_wait),
                self.storage.stats().prepared_files_used
            );
        }
        ClCheckpoint {
            total,
            sync,
            tail_wait,
            commit: total - sync - tail_wait,
            cleanup,
            log_bytes,
            tail_bytes,
            tail_records,
        }
    }
}

/// A full (canonical) checkpoint of `b` into `store`: (wall time without the subsumed
/// checkpoints' deletion, bytes written).
pub(crate) fn full_checkpoint(store: &CheckpointStore, id: u64, b: &mut dyn KeyedStateBackend) -> (Duration, u64) {
    let t = Instant::now();
    let writer = store.begin(id).expect("begin");
    let bytes = write_canonical(&writer, id, b);
    let (_, cleanup) = store.complete_deferred(writer).expect("complete");
    let d = t.elapsed();
    cleanup.run().expect("cleanup");
    (d, bytes)
}

/// Registers the one operator in `writer` and writes `b`'s snapshot `id` as its subtask in the
/// canonical format; returns the keyed file's bytes.
pub(crate) fn write_canonical(writer: &SnapshotWriter, id: u64, b: &mut dyn KeyedStateBackend) -> u64 {
    writer.register_operator(UID, 1, MAX_P).expect("register");
    let view = b.snapshot(id).expect("snapshot");
    let meta = writer
        .write_subtask(UID, 0, Some(view.as_ref()), None, false)
        .expect("write");
    meta.keyed.canonical().map_or(0, |f| f.size)
}

/// A native checkpoint of `b`: cut + upload (+ `_metadata`); `incremental`: the files of
/// completed checkpoints are referenced, not uploaded again. Returns (time, bytes uploaded, bytes
/// in all). `STATEKIT_CK_DETAIL` set: prints the cut / upload / commit split on standard error.
pub(crate) fn native_checkpoint(
    store: &CheckpointStore,
    id: u64,
    b: &mut w::RocksDbBackend,
    incremental: bool,
) -> (Duration, u64, u64) {
    let t = Instant::now();
    let writer = store.begin(id).expect("begin");
    writer.register_operator(UID, 1, MAX_P).expect("register");
    let cut = b.native_snapshot(id).expect("cut");
    let t_cut = t.elapsed();
    let handle = cut
        .upload(&writer.native_target(UID, 0).expect("target"))
        .expect("upload");
    let t_up = t.elapsed();
    let (up, total) = (handle.uploaded_bytes, handle.total_bytes());
    writer
        .add_native_subtask(UID, 0, handle, b.descriptors(), None, false)
        .expect("add");
    let (_, cleanup) = store.complete_deferred(writer).expect("complete");
    let d = t.elapsed();
    if std::env::var_os("STATEKIT_CK_DETAIL").is_some() {
        eprintln!(
            "# native checkpoint {id}: cut {:.1} ms, upload {:.1} ms, commit {:.1} ms",
            ms(t_cut),
            ms(t_up - t_cut),
            ms(d - t_up)
        );
    }
    if incremental {
        b.notify_checkpoint_complete(id).expect("notify");
    } else {
        // Not confirmed: the next checkpoint shares nothing with this one (Flink's full
        // RocksDB checkpoint copies every file each time).
        b.notify_checkpoint_aborted(id).expect("notify");
    }
    cleanup.run().expect("cleanup");
    (d, up, total)
}

/// What each changelog checkpoint is measured against.
trait Anchor<D: KeyedStateBackend> {
    /// The anchor checkpoint, for the report.
    fn name(&self) -> &'static str;
    /// Loads the workload into the anchor's own backend, if it has one.
    fn load(&mut self, _wl: &mut Workload) {}
    /// Applies a round's churn to the anchor's own backend, if it has one.
    fn churn(&mut self, _wl: &Workload, _batch: &[(usize, Vec<u8>)]) {}
    /// Lets background work finish before the checkpoints; returns how long it took.
    fn settle(&mut self, _cl: &ChangelogBackend<D>) -> Duration {
        Duration::ZERO
    }
    /// One anchor checkpoint right after the changelog one: (wall time, bytes written).
    fn checkpoint(&mut self, cl: &mut ChangelogBackend<D>) -> (Duration, u64);
    /// Makes sure a full canonical checkpoint of the current state exists (before the
    /// changelog backend is dropped).
    fn prepare_restore(&mut self, _cl: &mut ChangelogBackend<D>) {}
    /// Restores that full canonical checkpoint into a fresh backend of the same kind:
    /// (wall time, the restored backend).
    fn restore(&mut self) -> (Duration, Box<dyn KeyedStateBackend>);
}

/// Heap: a full checkpoint of the same state, the canonical write of the delegate's snapshot.
struct HeapAnchor {
    _dir: tempfile::TempDir,
    store: CheckpointStore,
    id: u64,
}

impl HeapAnchor {
    fn new(base: &Path) -> Self {
        let dir = tempfile::tempdir_in(base).expect("tempdir");
        let root: Arc<dyn Storage> = Arc::new(LocalStorage::new(dir.path()));
        HeapAnchor {
            store: CheckpointStore::open(root, ANCHOR_JOB, 1).expect("anchor store"),
            _dir: dir,
            id: 0,
        }
    }
}

impl Anchor<HashMapBackend> for HeapAnchor {
    fn name(&self) -> &'static str {
        "full checkpoint (canonical, lz4)"
    }

    fn checkpoint(&mut self, cl: &mut ChangelogBackend<HashMapBackend>) -> (Duration, u64) {
        self.id += 1;
        // The changelog backend's snapshot is its delegate's (the heap backend's).
        full_checkpoint(&self.store, self.id, cl)
    }

    fn restore(&mut self) -> (Duration, Box<dyn KeyedStateBackend>) {
        let reader = self.store.reader(self.id).expect("reader");
        let t = Instant::now();
        let mut b = w::backend();
        reader.restore_keyed(UID, &mut b).expect("restore canonical");
        (t.elapsed(), Box::new(b))
    }
}

/// RocksDB: a plain RocksDB backend with the same keys, values and churn, checkpointed
/// natively and incrementally (as `rocksdb_checkpoints` does).
struct RocksAnchor {
    opts: w::RocksDbOptions,
    b: Option<w::RocksDbBackend>,
    h: StateHandle,
    _dir: tempfile::TempDir,
    store: CheckpointStore,
    id: u64,
    /// The full canonical checkpoint for the restore anchor.
    full_id: u64,
}

impl RocksAnchor {
    fn new(base: &Path, opts: &w::RocksDbOptions) -> Self {
        let dir = tempfile::tempdir_in(base).expect("tempdir");
        let root: Arc<dyn Storage> = Arc::new(LocalStorage::new(dir.path()));
        let mut b = w::rocksdb_backend(opts);
        let h = b.register(value_desc(), StateFunctions::None).expect("register");
        RocksAnchor {
            opts: opts.clone(),
            b: Some(b),
            h,
            store: CheckpointStore::open(root, ANCHOR_JOB, 2).expect("anchor store"),
            _dir: dir,
            id: 0,
            full_id: 0,
        }
    }

    fn native(&mut self) -> (Duration, u64, u64) {
        self.id += 1;
        native_checkpoint(&self.store, self.id, self.b.as_mut().expect("anchor backend"), true)
    }
}

impl Anchor<w::RocksDbBackend> for RocksAnchor {
    fn name(&self) -> &'static str {
        "incremental native RocksDB checkpoint"
    }

    fn load(&mut self, wl: &mut Workload) {
        let h = self.h;
        let b = self.b.as_mut().expect("anchor backend");
        let load = wl.load(b, h);
        b.flush().expect("flush");
        let settled = settle(b);
        let (d, up, _) = self.native();
        println!(
            "  anchor: a plain RocksDB backend loaded with the same keys and values ({:.1} s, compactions settled {:.1} s later); its first native checkpoint uploads every file: {:.3} s, {:.1} MB",
            load.as_secs_f64(),
            settled.as_secs_f64(),
            d.as_secs_f64(),
            mb(up)
        );
    }

    fn churn(&mut self, wl: &Workload, batch: &[(usize, Vec<u8>)]) {
        let h = self.h;
        wl.apply(self.b.as_mut().expect("anchor backend"), h, batch);
    }

    fn settle(&mut self, cl: &ChangelogBackend<w::RocksDbBackend>) -> Duration {
        settle(self.b.as_ref().expect("anchor backend")) + settle(cl.delegate())
    }

    fn checkpoint(&mut self, _cl: &mut ChangelogBackend<w::RocksDbBackend>) -> (Duration, u64) {
        let (d, up, _) = self.native();
        (d, up)
    }

    fn prepare_restore(&mut self, _cl: &mut ChangelogBackend<w::RocksDbBackend>) {
        self.id += 1;
        self.full_id = self.id;
        let mut b = self.b.take().expect("anchor backend");
        let (d, bytes) = full_checkpoint(&self.store, self.full_id, &mut b);
        println!(
            "  (for the restore anchor: a full canonical checkpoint of the plain RocksDB backend, same state: {:.3} s, {:.1} MB)",
            d.as_secs_f64(),
            mb(bytes)
        );
    }

    fn restore(&mut self) -> (Duration, Box<dyn KeyedStateBackend>) {
        let reader = self.store.reader(self.full_id).expect("reader");
        let t = Instant::now();
        let mut b = w::rocksdb_backend(&self.opts);
        reader.restore_keyed(UID, &mut b).expect("restore canonical");
        b.flush().expect("flush");
        (t.elapsed(), Box::new(b))
    }
}

/// Checkpoints and restore of one delegate kind; `finish` completes a restore the way the
/// anchor's restore is completed (RocksDB: flush).
fn section<D: KeyedStateBackend>(
    o: &Opts,
    label: &str,
    base: &Path,
    make: &dyn Fn(BackendConfig) -> Result<D, StateError>,
    finish: &dyn Fn(&D),
    anchor: &mut dyn Anchor<D>,
    targets: (&str, f64),
) {
    let rounds = o.checkpoint_rounds.unwrap_or(5).max(1);
    let mut wl = Workload::new(o.checkpoint_state_mb.unwrap_or(1000));
    let tmp = tempfile::tempdir_in(base).expect("tempdir");
    let mut cl = Cl::new(tmp.path(), make);
    println!(
        "\n== changelog checkpoints over {label}: {} keys x {VALUE_LEN} B random values = {:.0} MB of state, 1 subtask, {rounds} rounds of 1% churn, in {} ==",
        wl.n(),
        mb(wl.state_bytes()),
        tmp.path().display()
    );
    let h = cl.h;
    let load = wl.load(cl.b(), h);
    let drained = cl.settle_uploads();
    let load_log = cl.storage.stats();
    println!(
        "  loaded through the changelog in {:.1} s ({:.0} MB/s; {:.0} MB of log in {} files, the last uploaded {:.2} s after the last put)",
        load.as_secs_f64(),
        mbps(wl.state_bytes(), load),
        mb(load_log.bytes),
        load_log.files,
        drained.as_secs_f64()
    );
    let (dstl_files, dstl_bytes) = cl.dstl();
    let t = Instant::now();
    cl.b().materialize_now().expect("materialize");
    let mat_time = t.elapsed();
    let after = cl.storage.stats();
    let (files_left, bytes_left) = cl.dstl();
    let (_, taskowned) = dir_files(&cl.job_dir.join("taskowned"));
    println!(
        "  one materialization after the load: {:.3} s, {:.1} MB ({:.0} MB/s); truncation then deleted {} log files ({:.0} MB): dstl/ {dstl_files} files {:.0} MB -> {files_left} files {:.1} MB",
        mat_time.as_secs_f64(),
        mb(taskowned),
        mbps(taskowned, mat_time),
        after.deleted_files - load_log.deleted_files,
        mb(dstl_bytes - bytes_left),
        mb(dstl_bytes),
        mb(bytes_left)
    );
    anchor.load(&mut wl);
    cl.uploaded = cl.storage.stats().bytes;
    println!(
        "  anchor: {} of the same state, right after each changelog checkpoint; before each pair the uploads the churn started (and RocksDB's compactions) are let finish, as between the checkpoints of a running job",
        anchor.name()
    );
    println!("  changelog checkpoint time = sync part + wait for the tail + _metadata commit; bytes = log uploaded since the previous checkpoint");
    let mut ours: Vec<(Duration, u64)> = Vec::new();
    let mut theirs: Vec<(Duration, u64)> = Vec::new();
    let mut last = None;
    for r in 0..rounds {
        let batch = wl.churn_batch(r);
        wl.apply(cl.b(), h, &batch);
        anchor.churn(&wl, &batch);
        drop(batch);
        let waited = cl.settle_uploads() + anchor.settle(cl.b.as_ref().expect("backend"));
        let c = cl.checkpoint();
        let (at, ab) = anchor.checkpoint(cl.b());
        println!(
            "  round {:>2}: changelog {:>8.1} ms {:>7.2} MB  (sync {:.1} ms, tail {:.1} ms, commit {:.1} ms; tail {:.1} MB / {} records since the materialization; then {:.1} ms deleting what it subsumed; waited {:.2} s before)  |  anchor {:>8.1} ms {:>8.2} MB",
            r + 1,
            ms(c.total),
            mb(c.log_bytes),
            ms(c.sync),
            ms(c.tail_wait),
            ms(c.commit),
            mb(c.tail_bytes),
            c.tail_records,
            ms(c.cleanup),
            waited.as_secs_f64(),
            ms(at),
            mb(ab)
        );
        ours.push((c.total, c.log_bytes));
        theirs.push((at, ab));
        last = Some(c);
    }
    let last = last.expect("rounds");
    let t_ours: Vec<Duration> = ours.iter().map(|x| x.0).collect();
    let b_ours: Vec<u64> = ours.iter().map(|x| x.1).collect();
    let t_theirs: Vec<Duration> = theirs.iter().map(|x| x.0).collect();
    let b_theirs: Vec<u64> = theirs.iter().map(|x| x.1).collect();
    println!(
        "  changelog checkpoint: median {:.1} ms, max {:.1} ms; {:.2} MB median, {:.2} MB max    anchor: median {:.1} ms, max {:.1} ms; {:.2} MB median",
        ms(median(&t_ours)),
        ms(max(&t_ours)),
        mb(median(&b_ours)),
        mb(max(&b_ours)),
        ms(median(&t_theirs)),
        ms(max(&t_theirs)),
        mb(median(&b_theirs))
    );
    let anchor_t = median(&t_theirs).as_secs_f64();
    pct_line(
        &format!("changelog / {}, time", targets.0),
        (median(&t_ours).as_secs_f64(), max(&t_ours).as_secs_f64()),
        anchor_t,
        Some(targets.1),
    );
    pct_line(
        &format!("changelog / {}, bytes", targets.0),
        (median(&b_ours) as f64, max(&b_ours) as f64),
        median(&b_theirs).max(1) as f64,
        None,
    );

    // Restores: the last changelog checkpoint (materialization + tail) into a fresh backend,
    // and a full canonical checkpoint of the same state into the same kind.
    anchor.prepare_restore(cl.b());
    drop(cl.b.take());
    let reader = cl.store.reader(cl.id).expect("reader");
    let hs = reader
        .changelog_handles(UID, KeyGroupRange::all(MAX_P))
        .expect("changelog handles");
    let tail_bytes: u64 = hs.iter().map(|h| h.handle.tail_bytes()).sum();
    let mat_bytes: u64 = hs.iter().flat_map(|h| &h.materialized).map(|f| f.size).sum();
    let tail_files: std::collections::BTreeSet<&str> =
        hs.iter().flat_map(|h| &h.tail).map(|f| f.path.as_str()).collect();
    let t = Instant::now();
    let mut restored = cl.fresh(make);
    let stats = restored.restore_changelog(&hs, true).expect("changelog restore");
    finish(restored.delegate());
    let restore_time = t.elapsed();
    let checked = wl.spot_check(&mut restored, "changelog restore");
    assert_eq!(stats.records, last.tail_records, "replayed records vs the tail's");
    assert!(
        stats.records >= (rounds * wl.churn) as u64,
        "the tail holds every churned value"
    );
    drop(restored);
    // The tail alone, replayed into an empty backend: the replay rate by itself.
    let mut tail_only = hs.clone();
    for h in &mut tail_only {
        h.handle.materialized.clear();
        h.materialized.clear();
    }
    let mut plain = make(cfg()).expect("backend");
    let t = Instant::now();
    let tail_stats = restore_into(&mut plain, None, KeyGroupRange::all(MAX_P), &tail_only).expect("replay");
    let replay_time = t.elapsed();
    drop(plain);
    let (anchor_time, mut anchor_b) = anchor.restore();
    wl.spot_check(anchor_b.as_mut(), "canonical restore");
    drop(anchor_b);
    let (dstl_n, dstl_b) = cl.dstl();
    println!(
        "  restore of changelog checkpoint {} into a fresh backend ({label}; 1 materialization + {} change sets in {} log files): {:.3} s; {} records replayed ({:.0} records/s over the whole restore); read {:.1} MB materialization + {:.1} MB tail",
        cl.id,
        stats.change_sets,
        tail_files.len(),
        restore_time.as_secs_f64(),
        stats.records,
        stats.records as f64 / restore_time.as_secs_f64(),
        mb(mat_bytes),
        mb(tail_bytes)
    );
    println!(
        "    the tail alone, replayed into an empty backend: {:.3} s, {:.0} records/s ({:.0} MB/s of log)",
        replay_time.as_secs_f64(),
        tail_stats.records as f64 / replay_time.as_secs_f64(),
        mbps(tail_bytes, replay_time)
    );
    println!(
        "  anchor: restore of a full canonical checkpoint of the same state into {label}: {:.3} s    changelog / canonical restore {:.2}x (no target); {checked} sampled keys checked in both",
        anchor_time.as_secs_f64(),
        restore_time.as_secs_f64() / anchor_time.as_secs_f64()
    );
    println!(
        "  space amplification: log referenced / materialized = {:.1} / {:.1} MB = {:.3}; dstl/ on disk ({dstl_n} files, {:.1} MB) / materialized = {:.3}",
        mb(tail_bytes),
        mb(mat_bytes),
        tail_bytes as f64 / mat_bytes.max(1) as f64,
        mb(dstl_b),
        dstl_b as f64 / mat_bytes.max(1) as f64
    );
}

/// The writer's appends (~100 B changes) until durable, beside a `BufWriter<File>` writing
/// the same bytes + `sync_all`.
fn append_throughput(o: &Opts, base: &Path) {
    let n = 2_000_000usize;
    let tmp = tempfile::tempdir_in(base).expect("tempdir");
    let root: Arc<dyn Storage> = Arc::new(LocalStorage::new(tmp.path()));
    let storage = ChangelogStorage::new(root.clone(), "dstl", UploadConfig::default()).expect("storage");
    let keys = w::keys(n, 11);
    let kgs: Vec<u32> = keys.iter().map(|k| key_group_for_key(k, MAX_P)).collect();
    let mut noise = vec![0u8; 1 << 20];
    rand::rngs::StdRng::seed_from_u64(3).fill_bytes(&mut noise);
    let value_len = 84;
    let value = |i: usize| &noise[(i * 131) % (noise.len() - value_len)..][..value_len];
    let desc = value_desc();
    println!(
        "\n== changelog append throughput: {n} changes (16 B key, {value_len} B value: a put record of ~100 B), 1 writer, in {} ==",
        tmp.path().display()
    );
    println!("  path measured: ChangelogWriter::append of every change, then persist + wait (durable: every log file fsynced); the uploader batches them into files in the background");
    let mut bytes = 0u64;
    let mut files = 0u64;
    let ours = (0..o.rounds.max(1))
        .map(|_| {
            let before = storage.stats();
            let mut wr = storage.writer();
            let t = Instant::now();
            wr.append_metadata(0, &desc);
            for (i, k) in keys.iter().enumerate() {
                wr.append(
                    kgs[i],
                    &Change {
                        state: 0,
                        time: None,
                        key: k,
                        namespace: &[],
                        op: Op::Put(value(i)),
                    },
                );
            }
            wr.persist(0).expect("persist").wait().expect("durable");
            let d = t.elapsed();
            let after = storage.stats();
            bytes = after.bytes - before.bytes;
            files = after.files - before.files;
            // Nothing references them: truncation deletes the files.
            wr.truncate(u64::MAX);
            d
        })
        .min()
        .unwrap_or_default();
    let chunk = (bytes as usize / n).max(1);
    let path = tmp.path().join("raw.bin");
    let anchor = (0..o.rounds.max(1))
        .map(|_| {
            let _ = std::fs::remove_file(&path);
            let t = Instant::now();
            let f = std::fs::File::create(&path).expect("create");
            let mut bw = std::io::BufWriter::new(f);
            let mut left = bytes as usize;
            let mut i = 0;
            while left > 0 {
                let len = chunk.min(left);
                let off = (i * 131) % (noise.len() - len);
                bw.write_all(&noise[off..off + len]).expect("write");
                left -= len;
                i += 1;
            }
            let f = bw.into_inner().expect("flush");
            f.sync_all().expect("fsync");
            t.elapsed()
        })
        .min()
        .unwrap_or_default();
    let _ = std::fs::remove_file(&path);
    let (ours_mb, anchor_mb) = (mbps(bytes, ours), mbps(bytes, anchor));
    let ratio = ours_mb / anchor_mb;
    println!(
        "  {:<36} {:>8.1} MB/s {:>6.2} M changes/s   ({:.1} MB in {files} log files, {:.3} s)",
        "writer append + persist + wait",
        ours_mb,
        n as f64 / ours.as_secs_f64() / 1e6,
        mb(bytes),
        ours.as_secs_f64()
    );
    println!(
        "  {:<36} {:>8.1} MB/s {:>6.2} M writes/s    (the same bytes in {chunk} B writes, {:.3} s)",
        "anchor: BufWriter<File> + sync_all",
        anchor_mb,
        n as f64 / anchor.as_secs_f64() / 1e6,
        anchor.as_secs_f64()
    );
    println!(
        "  writer / raw buffered write: {ratio:.2}x  (target >= 0.50x) {}",
        if ratio >= 0.5 { "ok" } else { "BELOW TARGET" }
    );
}

/// The changelog section: append throughput, then checkpoints and restores over the heap
/// backend and (unless `--skip-rocksdb`) over RocksDB.
pub(crate) fn changelog(o: &Opts) {
    let base = base_dir(o);
    append_throughput(o, &base);
    let mut heap = HeapAnchor::new(&base);
    section(
        o,
        "the heap backend",
        &base,
        &HashMapBackend::new,
        &|_| {},
        &mut heap,
        ("full", 10.0),
    );
    drop(heap);
    if !o.skip_rocksdb {
        let opts = w::rocksdb_options(&base);
        let mut rocks = RocksAnchor::new(&base, &opts);
        section(
            o,
            "RocksDB",
            &base,
            &|c| w::RocksDbBackend::new(c, opts.clone()),
            &|b| b.flush().expect("flush"),
            &mut rocks,
            ("incremental", 50.0),
        );
    }
    println!("  (Flink's own checkpoint costs on the same machine, same run: `report --flink-checkpoints`)");
}
