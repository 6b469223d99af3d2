//! The job of the changelog crash test (`tests/changelog_crash.rs`, child program
//! `tests/examples/changelog_crash_child.rs`): a deterministic workload on changelog subtasks
//! over the heap or the RocksDB backend, checkpointing into a real [`CheckpointStore`] through
//! a *slowed* storage (some log uploads and materializations sleep in the middle of writing
//! and before their commit, announcing it on stdout, so a SIGKILL can land inside them).
//!
//! Record `i` goes to key `key-(i mod KEYS)`: it puts a 64-byte payload determined by `i` into
//! value state `last`, keeps the last three record numbers of the key in list state `recent`
//! (`list_update`), and puts `i` under user key `i mod 5` in map state `seen`. The state after
//! `n` records is [`expected`]`(n)`; every checkpoint records its `n` in the `records`
//! property of its `_metadata`.

use statekit_changelog::{ChangelogBackend, ChangelogStorage, Materializer, UploadConfig};
use statekit_checkpoint::{CheckpointStore, SnapshotReader};
use statekit_core::storage::{
    HookedStorage, LocalStorage, PreparedFile, Storage, StorageError, StorageHooks, StorageWriter,
};
use statekit_core::{BackendConfig, KeyedStateBackend, StateDescriptor, StateFunctions, StateHandle, TypeSchema};
use statekit_hashmap::HashMapBackend;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Operator uid.
pub const UID: &str = "counter";
/// The job id (every incarnation restarts the same job).
pub const JOB: &str = "0123456789abcdef0123456789abcdef";
/// Max parallelism.
pub const MAX_P: u32 = 32;
/// Parallelism.
pub const P: u32 = 2;
/// Distinct keys.
pub const KEYS: u64 = 300;
/// Records between checkpoints.
pub const CHECKPOINT_EVERY: u64 = 100;
/// Completed checkpoints retained.
pub const RETAINED: usize = 2;
/// The `_metadata` property holding the number of records a checkpoint covers.
pub const RECORDS_PROPERTY: &str = "records";
/// How long a slowed write sleeps (twice per slowed file: mid-write and before the commit).
pub const SLOW: Duration = Duration::from_millis(150);
/// A child stops on its own after this long (in case nobody kills it).
pub const CHILD_LIFETIME: Duration = Duration::from_secs(120);

/// Which backend the changelog wraps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delegate {
    /// The heap backend.
    Heap,
    /// The RocksDB backend (working directories under `<dir>/rocksdb`).
    RocksDb,
}

impl Delegate {
    /// `heap` or `rocksdb`.
    pub fn as_str(self) -> &'static str {
        match self {
            Delegate::Heap => "heap",
            Delegate::RocksDb => "rocksdb",
        }
    }

    /// Parses [`Delegate::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "heap" => Some(Delegate::Heap),
            "rocksdb" => Some(Delegate::RocksDb),
            _ => None,
        }
    }
}

/// The checkpoint base directory under the test's directory.
pub fn checkpoint_base(dir: &Path) -> PathBuf {
    dir.join("checkpoints")
}

/// Where RocksDB working directories go under the test's directory.
pub fn rocksdb_dir(dir: &Path) -> PathBuf {
    dir.join("rocksdb")
}

// ---------------------------------------------------------------------------------------
// The slowed storage

/// The local filesystem, where every third log file (`…/dstl/…`) and every second
/// materialization (`…/taskowned/…`) is written slowly: it prints `slow-upload <path>` or
/// `slow-materialization <path>` when created, then sleeps [`SLOW`] after its second write
/// (with what was written so far flushed to the temporary file) and again before its commit
/// (fsync and rename). It offers prepared files (a checkpoint's upload is written in place into
/// one), and every second write into one is slow too: `slow-prepared-write <name>`, half the
/// bytes, [`SLOW`], the rest, [`SLOW`] before its commit (`fdatasync`). With `slow` false it is
/// plain local storage.
#[derive(Debug)]
pub struct Slow {
    slow: bool,
    uploads: AtomicU64,
    materializations: AtomicU64,
    prepared_writes: Arc<AtomicU64>,
}

/// Local storage rooted at `root`, slowed by [`Slow`] hooks.
pub fn slow_storage(root: &Path, slow: bool) -> HookedStorage<Slow> {
    HookedStorage::new(
        Arc::new(LocalStorage::new(root)),
        Slow {
            slow,
            uploads: AtomicU64::new(0),
            materializations: AtomicU64::new(0),
            prepared_writes: Arc::new(AtomicU64::new(0)),
        },
    )
}

/// A prepared file of [`Slow`] storage.
#[derive(Debug)]
struct SlowPrepared {
    inner: Box<dyn PreparedFile>,
    path: String,
    slow: bool,
    writes: Arc<AtomicU64>,
    slowed: bool,
}

impl PreparedFile for SlowPrepared {
    fn capacity(&self) -> u64 {
        self.inner.capacity()
    }
    fn age(&self) -> Duration {
        self.inner.age()
    }
    fn refresh(&mut self) -> Result<(), StorageError> {
        self.inner.refresh()
    }
    fn write_at(&mut self, offset: u64, buf: &[u8]) -> Result<(), StorageError> {
        self.slowed = self.slow && self.writes.fetch_add(1, Ordering::Relaxed) % 2 == 1;
        if !self.slowed {
            return self.inner.write_at(offset, buf);
        }
        marker(&format!("slow-prepared-write {}", self.path));
        let (a, b) = buf.split_at(buf.len() / 2);
        self.inner.write_at(offset, a)?;
        std::thread::sleep(SLOW);
        self.inner.write_at(offset + a.len() as u64, b)
    }
    fn commit(self: Box<Self>) -> Result<(), StorageError> {
        if self.slowed {
            std::thread::sleep(SLOW);
        }
        self.inner.commit()
    }
}

struct SlowWriter {
    inner: Box<dyn StorageWriter>,
    writes: u32,
}

impl Write for SlowWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.writes += 1;
        if self.writes == 3 {
            self.inner.flush()?;
            std::thread::sleep(SLOW);
        }
        self.inner.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

impl StorageWriter for SlowWriter {
    fn commit(mut self: Box<Self>) -> Result<u64, StorageError> {
        let _ = self.inner.flush();
        std::thread::sleep(SLOW);
        self.inner.commit()
    }
}

/// Prints one marker line (and flushes, so the parent sees it at once); exits when nobody
/// reads them any more (the parent is gone).
fn marker(line: &str) {
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
        std::process::exit(1);
    }
}

impl StorageHooks for Slow {
    fn create(&self, inner: &dyn Storage, path: &str) -> Result<Box<dyn StorageWriter>, StorageError> {
        let w = inner.create(path)?;
        let slow = self.slow
            && if path.contains("/dstl/") {
                self.uploads.fetch_add(1, Ordering::Relaxed) % 3 == 2
            } else if path.contains("/taskowned/") {
                self.materializations.fetch_add(1, Ordering::Relaxed) % 2 == 1
            } else {
                false
            };
        if !slow {
            return Ok(w);
        }
        marker(&format!(
            "{} {path}",
            if path.contains("/dstl/") {
                "slow-upload"
            } else {
                "slow-materialization"
            }
        ));
        Ok(Box::new(SlowWriter { inner: w, writes: 0 }))
    }

    fn prepare(
        &self,
        inner: &dyn Storage,
        path: &str,
        size: u64,
    ) -> Result<Option<Box<dyn PreparedFile>>, StorageError> {
        Ok(inner.prepare(path, size)?.map(|f| {
            Box::new(SlowPrepared {
                inner: f,
                path: path.to_string(),
                slow: self.slow,
                writes: self.prepared_writes.clone(),
                slowed: false,
            }) as Box<dyn PreparedFile>
        }))
    }
}

// ---------------------------------------------------------------------------------------
// The workload and its model

/// The states: `last` (value), `recent` (list), `seen` (map).
pub fn descriptors() -> [StateDescriptor; 3] {
    [
        StateDescriptor::value("last", TypeSchema::Utf8, TypeSchema::Bytes),
        StateDescriptor::list("recent", TypeSchema::Utf8, TypeSchema::I64),
        StateDescriptor::map("seen", TypeSchema::Utf8, TypeSchema::Bytes, TypeSchema::I64),
    ]
}

/// The key of record `i`.
pub fn key(i: u64) -> Vec<u8> {
    format!("key-{:04}", i % KEYS).into_bytes()
}

/// The 64-byte payload of record `i`.
pub fn payload(i: u64) -> Vec<u8> {
    crate::xorshift_bytes(i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03, 64)
}

/// The state of one key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyState {
    /// `last`.
    pub last: Option<Vec<u8>>,
    /// `recent`.
    pub recent: Vec<Vec<u8>>,
    /// `seen`.
    pub seen: BTreeMap<Vec<u8>, Vec<u8>>,
}

/// The whole state, by key (keys without state absent).
pub type Model = BTreeMap<Vec<u8>, KeyState>;

/// The state after records `0..n`.
pub fn expected(n: u64) -> Model {
    let mut m = Model::new();
    for i in 0..n {
        let s = m.entry(key(i)).or_default();
        s.last = Some(payload(i));
        s.recent.push(i.to_be_bytes().to_vec());
        if s.recent.len() > 3 {
            s.recent.remove(0);
        }
        s.seen.insert(vec![(i % 5) as u8], i.to_be_bytes().to_vec());
    }
    m
}

/// Reads every key's state from `backends` (subtasks of parallelism `backends.len()`).
pub fn read_model(backends: &mut [&mut dyn KeyedStateBackend]) -> Model {
    let p = backends.len() as u32;
    let mut m = Model::new();
    for k in 0..KEYS {
        let kb = key(k);
        let b = &mut *backends[crate::owner(&kb, MAX_P, p)];
        let [hl, hr, hs] = ["last", "recent", "seen"].map(|n| b.handle(n).expect("state registered"));
        let mut s = KeyState::default();
        let mut out = Vec::new();
        if b.get(hl, &kb, &[], &mut out).expect("get") {
            s.last = Some(out);
        }
        s.recent = b.list_get(hr, &kb, &[]).expect("list");
        b.map_for_each(hs, &kb, &[], &mut |uk, v| {
            s.seen.insert(uk.to_vec(), v.to_vec());
        })
        .expect("map");
        if s != KeyState::default() {
            m.insert(kb, s);
        }
    }
    m
}

/// Registers the states; their handles.
pub fn register(b: &mut dyn KeyedStateBackend) -> [StateHandle; 3] {
    descriptors().map(|d| b.register(d, StateFunctions::None).expect("register"))
}

// ---------------------------------------------------------------------------------------
// The job

/// A changelog subtask over either delegate.
pub type Subtask = ChangelogBackend<Box<dyn KeyedStateBackend>>;

/// One incarnation of the job: its store, upload service and subtasks, and the number of
/// records processed.
pub struct Job {
    /// The checkpoint store.
    pub store: CheckpointStore,
    storage: ChangelogStorage,
    job_dir: Arc<dyn Storage>,
    delegate: Delegate,
    rocksdb: PathBuf,
    /// The subtasks.
    pub subtasks: Vec<Subtask>,
    handles: Vec<[StateHandle; 3]>,
    /// Records processed.
    pub records: u64,
    next_id: u64,
    /// Print `begin` / `completed` markers (the child does).
    announce: bool,
}

fn upload_config() -> UploadConfig {
    UploadConfig {
        persist_delay: Duration::from_millis(2),
        preemptive_persist_threshold: 4 << 10,
        // Shorter than a slowed upload: slow uploads get a hedged second attempt.
        timeout: Duration::from_millis(250),
        retry_delay: Duration::from_millis(10),
        ..UploadConfig::default()
    }
}

impl Job {
    /// Opens the job under `dir` (slowed storage and markers on stdout when `slow`) and restores its newest
    /// complete checkpoint, if any (the records it covers come from its `_metadata`).
    pub fn start(dir: &Path, delegate: Delegate, slow: bool) -> Job {
        let base = checkpoint_base(dir);
        std::fs::create_dir_all(&base).expect("checkpoint base");
        let storage: Arc<dyn Storage> = Arc::new(slow_storage(&base, slow));
        let store = CheckpointStore::open(storage, JOB, RETAINED).expect("store");
        let job_dir = store.job_storage().expect("job storage");
        let changelog = ChangelogStorage::for_job(job_dir.clone(), upload_config()).expect("changelog storage");
        let mut job = Job {
            store,
            storage: changelog,
            job_dir,
            delegate,
            rocksdb: rocksdb_dir(dir),
            subtasks: Vec::new(),
            handles: Vec::new(),
            records: 0,
            next_id: 1,
            announce: slow,
        };
        let latest = job.store.latest_completed().expect("latest");
        let reader = latest.as_ref().map(|c| job.store.reader(c.id).expect("reader"));
        for i in 0..P {
            let mut b = job.subtask(i);
            if let Some(r) = &reader {
                let hs = r.changelog_handles(UID, b.key_group_range()).expect("handles");
                b.restore_changelog(&hs, true).expect("restore");
            }
            job.handles.push(register(&mut b));
            job.subtasks.push(b);
        }
        if let (Some(c), Some(r)) = (latest, reader) {
            job.records = records_of(&r);
            job.next_id = c.id + 1;
        }
        job
    }

    fn subtask(&self, i: u32) -> Subtask {
        let config = BackendConfig::for_subtask(MAX_P, P, i).expect("config");
        let materializer = Materializer::new(self.job_dir.clone(), crate::tail_policy(24 << 10), u64::from(i));
        let rocksdb = self.rocksdb.clone();
        let delegate = self.delegate;
        ChangelogBackend::new(config, &self.storage, materializer, move |c| {
            Ok(match delegate {
                Delegate::Heap => Box::new(HashMapBackend::new(c)?) as Box<dyn KeyedStateBackend>,
                Delegate::RocksDb => {
                    std::fs::create_dir_all(&rocksdb).map_err(|e| statekit_core::StateError::Other(Box::new(e)))?;
                    Box::new(statekit_rocksdb::RocksDbBackend::new(
                        c,
                        crate::test_rocksdb_options().with_local_dir(&rocksdb),
                    )?)
                }
            })
        })
        .expect("subtask")
    }

    /// Processes the next record (and runs the materialization policy every 20 records).
    pub fn process(&mut self) {
        let i = self.records;
        let k = key(i);
        let o = crate::owner(&k, MAX_P, P);
        let (b, [hl, hr, hs]) = (&mut self.subtasks[o], self.handles[o]);
        b.put(hl, &k, &[], &payload(i)).expect("put");
        let mut recent = b.list_get(hr, &k, &[]).expect("list");
        recent.push(i.to_be_bytes().to_vec());
        if recent.len() > 3 {
            recent.remove(0);
        }
        let refs: Vec<&[u8]> = recent.iter().map(Vec::as_slice).collect();
        b.list_update(hr, &k, &[], &refs).expect("list update");
        b.map_put(hs, &k, &[], &[(i % 5) as u8], &i.to_be_bytes())
            .expect("map put");
        self.records += 1;
        if self.records.is_multiple_of(20) {
            for b in &mut self.subtasks {
                b.poll().expect("poll");
            }
        }
    }

    /// Takes a checkpoint of every subtask (printing `begin <id>`), completes it and
    /// notifies the subtasks (printing `completed <id> <records>`); returns its id.
    pub fn checkpoint(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let mut writer = self.store.begin(id).expect("begin");
        if self.announce {
            marker(&format!("begin {id}"));
        }
        writer.set_property(RECORDS_PROPERTY, &self.records.to_string());
        writer.register_operator(UID, P, MAX_P).expect("register");
        let cuts: Vec<_> = self
            .subtasks
            .iter_mut()
            .map(|b| (b.checkpoint(id).expect("cut"), b.descriptors()))
            .collect();
        for (i, (cut, states)) in cuts.into_iter().enumerate() {
            let h = cut.finish().expect("tail durable");
            writer
                .add_changelog_subtask(UID, i as u32, h, states, None, false)
                .expect("add");
        }
        let (_, subsumed) = self.store.complete(writer).expect("complete");
        for b in &mut self.subtasks {
            b.notify_checkpoint_complete(id).expect("notify");
            for s in &subsumed {
                b.notify_checkpoint_subsumed(*s).expect("notify subsumed");
            }
        }
        if self.announce {
            marker(&format!("completed {id} {}", self.records));
        }
        id
    }

    /// Disposes the subtasks.
    pub fn stop(mut self) {
        for b in &mut self.subtasks {
            b.dispose();
        }
    }
}

/// The records checkpoint `reader` covers.
pub fn records_of(reader: &SnapshotReader) -> u64 {
    reader
        .metadata()
        .properties
        .get(RECORDS_PROPERTY)
        .and_then(|v| v.parse().ok())
        .expect("a records property")
}

/// The child: restores the job in `dir` and runs it, checkpointing every
/// [`CHECKPOINT_EVERY`] records, until killed (or [`CHILD_LIFETIME`] passed).
pub fn child_main(dir: &Path, delegate: Delegate) {
    let mut job = Job::start(dir, delegate, true);
    marker(&format!("started {}", job.records));
    let t = Instant::now();
    while t.elapsed() < CHILD_LIFETIME {
        job.process();
        if job.records.is_multiple_of(CHECKPOINT_EVERY) {
            job.checkpoint();
        }
    }
    job.stop();
}
