//! Truncation safety of the changelog under random schedules, through a real
//! `CheckpointStore` on a local directory (real files, real deletions).
//!
//! A harness runs 1–3 changelog subtasks (over the heap backend) of one operator with three
//! states (value, list, map; keys spread over the key groups) and interleaves, at random:
//! state updates; checkpoint begin / complete / abort with several checkpoints pending at once
//! (a newer one may complete first: the older is then superseded); completion notifications
//! delivered late; retention 1–3 (subsumption); forced and policy materializations (a small
//! `max_tail_bytes`); injected upload and materialization failures (a fault-injecting
//! `Storage` wrapper that fails the next creates of log files, or the next materialization of
//! one log); restores from a random retained checkpoint — a failover inside the job, or a new
//! job in CLAIM or NO_CLAIM mode — possibly to another parallelism; and *settles*
//! (materialize, checkpoint, until every older checkpoint is subsumed).
//!
//! Checked after every step:
//! * (a) every file any complete checkpoint under the base directory references (walking its
//!   `_metadata`: materialized parts and tail log files) exists, is not a temporary file and
//!   verifies in full (`KeyedFileReader::verify`, `LogFileReader::verify`, and the snapshot's
//!   own `verify`);
//! * (b) restoring each of them (at a parallelism of its own, into plain heap backends through
//!   `restore_into`) gives exactly the `BTreeMap` model of the state at its barrier;
//! * (c) after a settle — R+1 rounds of (update every subtask, materialize every subtask, one
//!   more update each, checkpoint) — the job's `dstl/` and `taskowned/` hold at most R × P files
//!   each (R retained checkpoints, P subtasks: each retained checkpoint references one
//!   materialization per subtask and a one-change-set tail per subtask, uploaded in ≤ P files;
//!   everything older is truncated, subsumed and deleted);
//! * (d) an injected upload failure (every attempt of one upload fails) fails at most the one
//!   checkpoint whose tail it carried: checkpoints already durable complete, and the next
//!   checkpoint — which uploads the failed change sets again — completes. No other checkpoint
//!   ever fails.
//!
//! A fixed, long deterministic sequence runs too, and asserts it covered every kind of step.
//! `lost_completion_notification_before_failover`: a subtask disposed before it hears of a
//! completed checkpoint keeps that checkpoint's files.

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use statekit_changelog::{ChangelogBackend, ChangelogCut, ChangelogStorage, LogFileReader, Materializer, UploadConfig};
use statekit_checkpoint::{parse_checkpoint_dir_name, CheckpointStore, RestoreMode, SnapshotReader, SnapshotWriter};
use statekit_core::storage::{HookedStorage, LocalStorage, Storage, StorageError, StorageHooks, StorageWriter};
use statekit_core::{
    BackendConfig, KeyGroupRange, KeyedStateBackend, StateDescriptor, StateFunctions, StateHandle, TypeSchema,
};
use statekit_format::{ChangelogKeyedHandle, KeyedFileReader, METADATA_FILE_NAME};
use statekit_hashmap::HashMapBackend;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const UID: &str = "op";
const MAX_P: u32 = 16;
/// Keys `k0` … `k31`: every key the harness ever writes (reads scan them all).
const KEYS: u8 = 32;
/// Upload attempts per upload (an injected failure fails this many creates).
const MAX_ATTEMPTS: u32 = 2;

// ---------------------------------------------------------------------------------------
// Fault injection

/// Hooks failing on request: the next `fail_uploads` creates of log files (`…/dstl/…`), and the
/// next create of a materialization whose name contains `fail_materialization` (a log id: one
/// backend's materialization).
#[derive(Debug)]
struct Faulty {
    fail_uploads: AtomicU32,
    fail_materialization: Mutex<Option<String>>,
}

fn injected(path: &str) -> StorageError {
    StorageError::Io {
        path: path.to_string(),
        source: std::io::Error::other("injected failure"),
    }
}

impl StorageHooks for Faulty {
    fn create(&self, inner: &dyn Storage, path: &str) -> Result<Box<dyn StorageWriter>, StorageError> {
        if path.contains("/dstl/")
            && self
                .fail_uploads
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| v.checked_sub(1))
                .is_ok()
        {
            return Err(injected(path));
        }
        if path.contains("/taskowned/") {
            let mut m = self.fail_materialization.lock().unwrap_or_else(|p| p.into_inner());
            if m.as_deref().is_some_and(|log| path.contains(log)) {
                *m = None;
                return Err(injected(path));
            }
        }
        inner.create(path)
    }
}

/// The local filesystem through [`Faulty`] hooks.
type FaultyStorage = HookedStorage<Faulty>;

// ---------------------------------------------------------------------------------------
// The model

/// The operator's state: value `v`, list `l`, map `m`, by key (no namespaces).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Model {
    v: BTreeMap<Vec<u8>, Vec<u8>>,
    l: BTreeMap<Vec<u8>, Vec<Vec<u8>>>,
    m: BTreeMap<Vec<u8>, BTreeMap<Vec<u8>, Vec<u8>>>,
}

fn key(k: u8) -> Vec<u8> {
    format!("k{}", k % KEYS).into_bytes()
}

fn owner(k: &[u8], p: u32) -> usize {
    statekit_tests::owner(k, MAX_P, p)
}

/// A value of `len` bytes determined by `seed` (incompressible enough).
fn bytes(seed: u32, len: usize) -> Vec<u8> {
    statekit_tests::xorshift_bytes(u64::from(seed).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1, len)
}

fn descriptors() -> [StateDescriptor; 3] {
    [
        StateDescriptor::value("v", TypeSchema::Bytes, TypeSchema::Bytes),
        StateDescriptor::list("l", TypeSchema::Bytes, TypeSchema::Bytes),
        StateDescriptor::map("m", TypeSchema::Bytes, TypeSchema::Bytes, TypeSchema::Bytes),
    ]
}

/// Registers (or re-registers, after a restore) the three states; their handles.
fn register(b: &mut dyn KeyedStateBackend) -> [StateHandle; 3] {
    descriptors().map(|d| b.register(d, StateFunctions::None).expect("register"))
}

/// Reads the whole state of `backends` (one operator, subtask order) into a model.
fn read_model(backends: &mut [&mut dyn KeyedStateBackend]) -> Model {
    let p = backends.len() as u32;
    let mut m = Model::default();
    for k in 0..KEYS {
        let kb = key(k);
        let b = &mut *backends[owner(&kb, p)];
        let [hv, hl, hm] = [b.handle("v"), b.handle("l"), b.handle("m")].map(|h| h.expect("state registered"));
        let mut out = Vec::new();
        if b.get(hv, &kb, b"", &mut out).expect("get") {
            m.v.insert(kb.clone(), out);
        }
        let list = b.list_get(hl, &kb, b"").expect("list");
        if !list.is_empty() {
            m.l.insert(kb.clone(), list);
        }
        let mut map = BTreeMap::new();
        b.map_for_each(hm, &kb, b"", &mut |uk, v| {
            map.insert(uk.to_vec(), v.to_vec());
        })
        .expect("map");
        if !map.is_empty() {
            m.m.insert(kb, map);
        }
    }
    m
}

// ---------------------------------------------------------------------------------------
// Steps

#[derive(Clone, Debug)]
enum Step {
    /// Value put of `len_class` size (8 B, 200 B or 700 B).
    Put {
        k: u8,
        seed: u16,
        len_class: u8,
    },
    /// List add.
    Append {
        k: u8,
        seed: u16,
    },
    MapPut {
        k: u8,
        uk: u8,
        seed: u16,
    },
    MapRemove {
        k: u8,
        uk: u8,
    },
    /// Clear of state `s % 3`.
    Clear {
        s: u8,
        k: u8,
    },
    /// Starts a checkpoint (cuts every subtask; the tails upload in the background).
    Begin,
    /// Completes a pending checkpoint (aborted instead when a newer one completed); with
    /// `late % 4 == 0` the subtasks hear of it (and of what it subsumed) only at the next
    /// `Deliver` (or before the next restore).
    Complete {
        pick: u8,
        late: u8,
    },
    /// Delivers the late notifications.
    Deliver,
    Abort {
        pick: u8,
    },
    /// Waits for the tails of every pending checkpoint.
    Resolve,
    /// `materialize_now` on one subtask.
    Materialize {
        sub: u8,
    },
    /// Every subtask runs its materialization policy (`poll`).
    Poll,
    /// Every attempt of the next log upload fails.
    FailUpload,
    /// One subtask's next materialization fails (and the one after it succeeds).
    FailMaterialization {
        sub: u8,
    },
    /// One subtask's next materialization, whenever it comes (a checkpoint after a NO_CLAIM
    /// restore, a policy one, a forced one), fails.
    ArmMaterializationFailure {
        sub: u8,
    },
    /// Restores from a retained checkpoint: `mode % 3` = failover in the job, new job in
    /// CLAIM mode, new job in NO_CLAIM mode; to parallelism `1 + p % 3`.
    Restore {
        pick: u8,
        mode: u8,
        p: u8,
    },
    Settle,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        10 => (any::<u8>(), any::<u16>(), 0u8..3).prop_map(|(k, seed, len_class)| Step::Put { k, seed, len_class }),
        4 => (any::<u8>(), any::<u16>()).prop_map(|(k, seed)| Step::Append { k, seed }),
        4 => (any::<u8>(), 0u8..4, any::<u16>()).prop_map(|(k, uk, seed)| Step::MapPut { k, uk, seed }),
        2 => (any::<u8>(), 0u8..4).prop_map(|(k, uk)| Step::MapRemove { k, uk }),
        2 => (any::<u8>(), any::<u8>()).prop_map(|(s, k)| Step::Clear { s, k }),
        5 => Just(Step::Begin),
        4 => (any::<u8>(), any::<u8>()).prop_map(|(pick, late)| Step::Complete { pick, late }),
        1 => Just(Step::Deliver),
        1 => any::<u8>().prop_map(|pick| Step::Abort { pick }),
        1 => Just(Step::Resolve),
        2 => any::<u8>().prop_map(|sub| Step::Materialize { sub }),
        2 => Just(Step::Poll),
        1 => Just(Step::FailUpload),
        1 => any::<u8>().prop_map(|sub| Step::FailMaterialization { sub }),
        1 => any::<u8>().prop_map(|sub| Step::ArmMaterializationFailure { sub }),
        1 => (any::<u8>(), any::<u8>(), any::<u8>()).prop_map(|(pick, mode, p)| Step::Restore { pick, mode, p }),
        1 => Just(Step::Settle),
    ]
}

// ---------------------------------------------------------------------------------------
// The harness

/// One job: its checkpoint store and its upload service (files under `<job>/dstl/`).
struct Job {
    name: String,
    store: CheckpointStore,
    storage: ChangelogStorage,
    dir: Arc<dyn Storage>,
}

fn upload_config() -> UploadConfig {
    UploadConfig {
        persist_delay: Duration::from_millis(1),
        // Small: change sets are uploaded continuously, between checkpoints too.
        preemptive_persist_threshold: 2 << 10,
        max_attempts: MAX_ATTEMPTS,
        retry_delay: Duration::from_millis(1),
        // No hedged attempts: an injected failure is exactly `MAX_ATTEMPTS` failed creates.
        timeout: Duration::from_secs(60),
        ..UploadConfig::default()
    }
}

fn open_job(faulty: &Arc<FaultyStorage>, name: &str, retained: usize) -> Job {
    let store = CheckpointStore::open(faulty.clone(), name, retained).expect("store");
    let dir = store.job_storage().expect("job storage");
    let storage = ChangelogStorage::for_job(dir.clone(), upload_config()).expect("changelog storage");
    Job {
        name: name.to_string(),
        store,
        storage,
        dir,
    }
}

type Backend = ChangelogBackend<HashMapBackend>;

fn new_backend(job: &Job, p: u32, i: u32) -> Backend {
    ChangelogBackend::new(
        BackendConfig::for_subtask(MAX_P, p, i).expect("config"),
        &job.storage,
        Materializer::new(job.dir.clone(), statekit_tests::tail_policy(6 << 10), u64::from(i)),
        HashMapBackend::new,
    )
    .expect("backend")
}

/// A subtask's part of a pending checkpoint: its cut, or the result of finishing it.
enum Part {
    Cut(ChangelogCut),
    Done(Result<ChangelogKeyedHandle, String>),
}

struct Pending {
    id: u64,
    writer: SnapshotWriter,
    parts: Vec<(Part, Vec<StateDescriptor>)>,
    model: Model,
    /// Its tail was being uploaded when an upload failure was injected: it may fail.
    may_fail: bool,
    /// A materialization its cut ran failed (see [`Harness::begin`]).
    materialization_failed: bool,
}

impl Pending {
    /// Waits for the tails (finishes every cut).
    fn resolve(&mut self) {
        for (part, _) in &mut self.parts {
            if let Part::Cut(_) = part {
                let Part::Cut(cut) = std::mem::replace(part, Part::Done(Err(String::new()))) else {
                    unreachable!()
                };
                *part = Part::Done(cut.finish().map_err(|e| e.to_string()));
            }
        }
    }

    fn failed(&self) -> Option<&str> {
        self.parts.iter().find_map(|(p, _)| match p {
            Part::Done(Err(e)) => Some(e.as_str()),
            _ => None,
        })
    }
}

/// What a run did (coverage of the deterministic sequence).
#[derive(Debug, Default)]
struct Counts {
    completed: usize,
    aborted: usize,
    superseded: usize,
    failed_by_injection: usize,
    survived_injection: usize,
    forced_materializations: usize,
    failed_materializations: usize,
    restores: [usize; 3],
    rescales: usize,
    settles: usize,
    max_pending: usize,
    late_notifications: usize,
    refused_no_claim: usize,
    checks: usize,
}

struct Harness {
    _tmp: tempfile::TempDir,
    base: PathBuf,
    faulty: Arc<FaultyStorage>,
    retained: usize,
    generation: u32,
    job: Job,
    backends: Vec<Backend>,
    handles: Vec<[StateHandle; 3]>,
    model: Model,
    pending: Vec<Pending>,
    next_id: u64,
    /// The model at the barrier of every checkpoint that completed, by (job, id).
    models: BTreeMap<(String, u64), Model>,
    /// Completions the subtasks have not heard of yet: (id, what it subsumed).
    late: Vec<(u64, Vec<u64>)>,
    /// Per subtask, materialization failures armed since the harness last knew one to
    /// succeed (kept below the policy's limit).
    failures: Vec<u32>,
    counts: Counts,
}

impl Harness {
    fn new(retained: usize, p: u32) -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        let base = tmp.path().to_path_buf();
        let faulty = Arc::new(HookedStorage::new(
            Arc::new(LocalStorage::new(&base)),
            Faulty {
                fail_uploads: AtomicU32::new(0),
                fail_materialization: Mutex::new(None),
            },
        ));
        let job = open_job(&faulty, "job0", retained);
        let mut backends: Vec<Backend> = (0..p).map(|i| new_backend(&job, p, i)).collect();
        let handles = backends.iter_mut().map(|b| register(b)).collect();
        Harness {
            _tmp: tmp,
            base,
            faulty,
            retained,
            generation: 0,
            job,
            backends,
            handles,
            model: Model::default(),
            pending: Vec::new(),
            next_id: 1,
            models: BTreeMap::new(),
            late: Vec::new(),
            failures: vec![0; p as usize],
            counts: Counts::default(),
        }
    }

    fn p(&self) -> u32 {
        self.backends.len() as u32
    }

    /// The backend owning `k` and the handles of its states.
    fn route(&mut self, k: &[u8]) -> (&mut Backend, [StateHandle; 3]) {
        let o = owner(k, self.p());
        (&mut self.backends[o], self.handles[o])
    }

    /// A key of subtask `sub`.
    fn key_of(&self, sub: usize) -> Vec<u8> {
        (0..KEYS)
            .map(key)
            .find(|k| owner(k, self.p()) == sub)
            .expect("every subtask owns one of the keys")
    }

    fn put(&mut self, k: Vec<u8>, value: Vec<u8>) {
        let (b, [hv, _, _]) = self.route(&k);
        b.put(hv, &k, b"", &value).expect("put");
        self.model.v.insert(k, value);
    }

    fn apply(&mut self, step: &Step) {
        match *step {
            Step::Put { k, seed, len_class } => {
                let len = [8, 200, 700][usize::from(len_class % 3)];
                self.put(key(k), bytes(u32::from(seed), len));
            }
            Step::Append { k, seed } => {
                let (kb, e) = (key(k), bytes(u32::from(seed) + 70_000, 24));
                let (b, [_, hl, _]) = self.route(&kb);
                b.add(hl, &kb, b"", &e).expect("add");
                self.model.l.entry(kb).or_default().push(e);
            }
            Step::MapPut { k, uk, seed } => {
                let (kb, ukb, v) = (key(k), vec![uk], bytes(u32::from(seed) + 140_000, 40));
                let (b, [_, _, hm]) = self.route(&kb);
                b.map_put(hm, &kb, b"", &ukb, &v).expect("map_put");
                self.model.m.entry(kb).or_default().insert(ukb, v);
            }
            Step::MapRemove { k, uk } => {
                let (kb, ukb) = (key(k), vec![uk]);
                let (b, [_, _, hm]) = self.route(&kb);
                b.map_remove(hm, &kb, b"", &ukb).expect("map_remove");
                if let Some(m) = self.model.m.get_mut(&kb) {
                    m.remove(&ukb);
                    if m.is_empty() {
                        self.model.m.remove(&kb);
                    }
                }
            }
            Step::Clear { s, k } => {
                let kb = key(k);
                let (b, hs) = self.route(&kb);
                b.clear(hs[usize::from(s % 3)], &kb, b"").expect("clear");
                match s % 3 {
                    0 => drop(self.model.v.remove(&kb)),
                    1 => drop(self.model.l.remove(&kb)),
                    _ => drop(self.model.m.remove(&kb)),
                }
            }
            Step::Begin => self.begin(),
            Step::Complete { pick, late } => {
                if !self.pending.is_empty() {
                    let i = usize::from(pick) % self.pending.len();
                    self.complete(i, false, late % 4 == 0);
                }
            }
            Step::Deliver => self.deliver(),
            Step::Abort { pick } => {
                if !self.pending.is_empty() {
                    let i = usize::from(pick) % self.pending.len();
                    let p = self.pending.remove(i);
                    self.abort(p);
                }
            }
            Step::Resolve => {
                for p in &mut self.pending {
                    p.resolve();
                }
            }
            Step::Materialize { sub } => {
                let i = usize::from(sub) % self.backends.len();
                self.backends[i].materialize_now().expect("materialize");
                self.counts.forced_materializations += 1;
            }
            Step::Poll => {
                for b in &mut self.backends {
                    b.poll().expect("poll");
                }
            }
            Step::FailUpload => self.fail_upload(),
            Step::FailMaterialization { sub } => self.fail_materialization(usize::from(sub) % self.backends.len()),
            Step::ArmMaterializationFailure { sub } => {
                let sub = usize::from(sub) % self.backends.len();
                // At most one failure armed, and never more in a row than the policy allows.
                let mut armed = self.faulty.hooks().fail_materialization.lock().expect("lock");
                if armed.is_none() && self.failures[sub] < 2 {
                    *armed = Some(self.backends[sub].log().to_string());
                    self.failures[sub] += 1;
                }
            }
            Step::Restore { pick, mode, p } => self.restore(pick, mode, 1 + u32::from(p % 3)),
            Step::Settle => self.settle(),
        }
    }

    fn armed(&self) -> bool {
        self.faulty.hooks().fail_materialization.lock().expect("lock").is_some()
    }

    /// Disarms an armed materialization failure (when its materialization did not come).
    fn disarm(&mut self) {
        *self.faulty.hooks().fail_materialization.lock().expect("lock") = None;
    }

    fn begin(&mut self) {
        let id = self.next_id;
        self.next_id += 1;
        let writer = self.job.store.begin(id).expect("begin");
        writer.register_operator(UID, self.p(), MAX_P).expect("register");
        let armed = self.armed();
        let mut parts = Vec::new();
        let mut refused = None;
        for b in &mut self.backends {
            let states = b.descriptors();
            match b.checkpoint(id) {
                Ok(cut) => parts.push((Part::Cut(cut), states)),
                Err(e) => refused = Some(e.to_string()),
            }
        }
        // The first checkpoint after a NO_CLAIM restore materializes first; when that
        // materialization fails, the checkpoint cannot share nothing with the restored
        // snapshot and fails — and only then.
        let materialization_failed = armed && !self.armed();
        if let Some(e) = refused {
            assert!(materialization_failed, "checkpoint {id}: {e}");
            self.counts.refused_no_claim += 1;
            self.job.store.abort(writer).expect("abort");
            for b in &mut self.backends {
                b.notify_checkpoint_aborted(id).expect("notify aborted");
            }
            return;
        }
        self.pending.push(Pending {
            id,
            writer,
            parts,
            model: self.model.clone(),
            may_fail: false,
            materialization_failed,
        });
        self.counts.max_pending = self.counts.max_pending.max(self.pending.len());
    }

    fn abort(&mut self, p: Pending) {
        let id = p.id;
        drop(p.parts);
        self.job.store.abort(p.writer).expect("abort");
        for b in &mut self.backends {
            b.notify_checkpoint_aborted(id).expect("notify aborted");
        }
        self.counts.aborted += 1;
    }

    fn abort_all(&mut self) {
        for p in std::mem::take(&mut self.pending) {
            self.abort(p);
        }
    }

    /// Completes pending checkpoint `i` (its tails durable, `_metadata` committed, subtasks
    /// notified — now, or later when `late` — of the completion and of what it subsumed).
    /// Aborted instead when a newer checkpoint already completed (the store refuses it) or
    /// its tail upload failed (only allowed for a checkpoint whose tail an injected failure
    /// hit). Returns true when it completed.
    fn complete(&mut self, i: usize, must_succeed: bool, late: bool) -> bool {
        let mut p = self.pending.remove(i);
        p.resolve();
        if let Some(e) = p.failed() {
            assert!(
                p.may_fail && !must_succeed,
                "checkpoint {} failed although no injected failure could reach it: {e}",
                p.id
            );
            assert!(e.contains("injected failure"), "checkpoint {}: {e}", p.id);
            self.counts.failed_by_injection += 1;
            self.abort(p);
            return false;
        }
        if p.may_fail {
            self.counts.survived_injection += 1;
        }
        let latest = self.job.store.latest_completed().expect("latest").map(|c| c.id);
        if latest.is_some_and(|l| l >= p.id) {
            assert!(!must_succeed, "checkpoint {} superseded", p.id);
            self.counts.superseded += 1;
            self.abort(p);
            return false;
        }
        let Pending {
            id,
            writer,
            parts,
            model,
            materialization_failed,
            ..
        } = p;
        for (sub, (part, states)) in parts.into_iter().enumerate() {
            let Part::Done(Ok(h)) = part else {
                unreachable!("resolved")
            };
            writer
                .add_changelog_subtask(UID, sub as u32, h, states, None, false)
                .expect("add subtask");
        }
        let subsumed = match self.job.store.complete(writer) {
            Ok((_, subsumed)) => subsumed,
            Err(e) => {
                // Today the cut after a NO_CLAIM restore whose materialization failed still
                // references the restored files; the store refuses it (see `begin`).
                assert!(
                    materialization_failed && e.to_string().contains("no-claim") && !must_succeed,
                    "checkpoint {id}: {e}"
                );
                self.counts.refused_no_claim += 1;
                for b in &mut self.backends {
                    b.notify_checkpoint_aborted(id).expect("notify aborted");
                }
                return false;
            }
        };
        self.models.insert((self.job.name.clone(), id), model);
        self.counts.completed += 1;
        self.late.push((id, subsumed));
        if late {
            self.counts.late_notifications += 1;
        } else {
            self.deliver();
        }
        true
    }

    /// Notifies the subtasks of the completions not yet delivered (and what they subsumed).
    fn deliver(&mut self) {
        for (id, subsumed) in std::mem::take(&mut self.late) {
            for b in &mut self.backends {
                b.notify_checkpoint_complete(id).expect("notify complete");
                for s in &subsumed {
                    b.notify_checkpoint_subsumed(*s).expect("notify subsumed");
                }
            }
        }
    }

    /// (d): with every tail so far durable, every attempt of the next upload fails. At most
    /// the checkpoint whose tail it carried fails; the checkpoints already durable complete,
    /// and the next checkpoint does.
    fn fail_upload(&mut self) {
        for p in &mut self.pending {
            p.resolve();
        }
        self.faulty.hooks().fail_uploads.store(MAX_ATTEMPTS, Ordering::SeqCst);
        // Twice at most: the first checkpoint after a NO_CLAIM restore materializes first and
        // has an empty tail.
        for _ in 0..2 {
            for sub in 0..self.backends.len() {
                let k = self.key_of(sub);
                self.put(k, bytes(sub as u32 + 1_000_000, 64));
            }
            self.begin();
            let x = self.pending.len() - 1;
            self.pending[x].may_fail = true;
            self.pending[x].resolve();
            if self.faulty.hooks().fail_uploads.load(Ordering::SeqCst) == 0 {
                break;
            }
        }
        assert_eq!(
            self.faulty.hooks().fail_uploads.load(Ordering::SeqCst),
            0,
            "the injected failure hit no upload"
        );
        // The checkpoints that were durable before the failure are not affected.
        while !self.pending.is_empty() {
            self.complete(0, false, false);
        }
        // The next checkpoint uploads the failed change sets again and completes.
        self.begin();
        let y = self.pending.len() - 1;
        assert!(
            self.complete(y, true, false),
            "the checkpoint after a failed upload failed too"
        );
    }

    /// One subtask's next materialization fails (a failure within the limit: state stays
    /// restorable); the one after succeeds (and resets the failure count).
    fn fail_materialization(&mut self, sub: usize) {
        self.disarm();
        let log = self.backends[sub].log().to_string();
        let k = self.key_of(sub);
        self.put(k.clone(), bytes(7, 16));
        *self.faulty.hooks().fail_materialization.lock().expect("lock") = Some(log);
        self.backends[sub]
            .materialize_now()
            .expect("one failed materialization is within the limit");
        assert!(!self.armed(), "the materialization did not run");
        self.counts.failed_materializations += 1;
        self.put(k, bytes(8, 16));
        self.backends[sub].materialize_now().expect("materialize");
        self.failures[sub] = 0;
    }

    fn restore(&mut self, pick: u8, mode: u8, p: u32) {
        let completed = self.job.store.completed().expect("completed");
        if completed.is_empty() {
            return;
        }
        let id = completed[usize::from(pick) % completed.len()].id;
        let model = self.models[&(self.job.name.clone(), id)].clone();
        self.abort_all();
        // Late notifications arrive before the failover here; lost ones are
        // `lost_completion_notification_before_failover`.
        self.deliver();
        self.disarm();
        for b in &mut self.backends {
            b.dispose();
        }
        self.backends.clear();
        let reader = self.job.store.reader(id).expect("reader");
        let share = match mode % 3 {
            0 => true,
            m => {
                let mode = if m == 1 {
                    RestoreMode::Claim
                } else {
                    RestoreMode::NoClaim
                };
                self.generation += 1;
                let job = open_job(&self.faulty, &format!("job{}", self.generation), self.retained);
                job.store.restored(&reader, mode).expect("restored");
                self.job = job;
                self.next_id = id + 1;
                mode.may_reference_restored_files()
            }
        };
        self.counts.restores[usize::from(mode % 3)] += 1;
        if p != reader.operator(UID).expect("operator").parallelism {
            self.counts.rescales += 1;
        }
        let mut backends: Vec<Backend> = (0..p).map(|i| new_backend(&self.job, p, i)).collect();
        for b in &mut backends {
            let hs = reader
                .changelog_handles(UID, b.key_group_range())
                .expect("changelog handles");
            b.restore_changelog(&hs, share).expect("restore");
        }
        self.handles = backends.iter_mut().map(|b| register(b)).collect();
        self.failures = vec![0; backends.len()];
        self.backends = backends;
        let mut refs: Vec<&mut dyn KeyedStateBackend> = self
            .backends
            .iter_mut()
            .map(|b| b as &mut dyn KeyedStateBackend)
            .collect();
        assert_eq!(read_model(&mut refs), model, "restored from checkpoint {id}");
        self.model = model;
    }

    /// (c): R+1 rounds of (update every subtask, materialize every subtask, one more update
    /// each, checkpoint); then every checkpoint from before is subsumed, and the job's
    /// `dstl/` and `taskowned/` hold at most R × P files each.
    fn settle(&mut self) {
        self.abort_all();
        self.deliver();
        self.disarm();
        for round in 0..=self.retained {
            for sub in 0..self.backends.len() {
                let k = self.key_of(sub);
                self.put(k, bytes(round as u32 * 10 + sub as u32, 16));
            }
            for b in &mut self.backends {
                b.materialize_now().expect("materialize");
            }
            self.failures.iter_mut().for_each(|f| *f = 0);
            for sub in 0..self.backends.len() {
                let k = self.key_of(sub);
                self.put(k, bytes(round as u32 * 10 + sub as u32 + 5, 16));
            }
            self.begin();
            assert!(self.complete(0, true, false));
        }
        let bound = self.retained * self.backends.len();
        let job_dir = self.base.join(&self.job.name);
        for sub in ["dstl", "taskowned"] {
            let files = files_below(&job_dir.join(sub));
            assert!(
                files.len() <= bound,
                "{sub}/ holds {} files after a settle, more than retained ({}) × subtasks ({}): {files:?}",
                files.len(),
                self.retained,
                self.backends.len()
            );
        }
        self.counts.settles += 1;
    }

    /// (a) and (b) for every complete checkpoint under the base directory.
    fn check(&mut self) {
        for job in dirs(&self.base) {
            let name = job.file_name().expect("name").to_string_lossy().to_string();
            for chk in dirs(&job) {
                let Some(id) = parse_checkpoint_dir_name(&chk.file_name().expect("name").to_string_lossy()) else {
                    continue;
                };
                if !chk.join(METADATA_FILE_NAME).is_file() {
                    continue;
                }
                let model = self
                    .models
                    .get(&(name.clone(), id))
                    .unwrap_or_else(|| panic!("{name}/chk-{id} is complete but never completed"));
                check_checkpoint(&chk, model, 1 + (id as u32 + self.counts.checks as u32) % 3);
            }
        }
        self.counts.checks += 1;
    }

    /// Aborts what is pending and disposes the subtasks (the end of a run).
    fn finish(mut self) -> Counts {
        self.abort_all();
        self.deliver();
        for b in &mut self.backends {
            b.dispose();
        }
        self.check();
        self.counts
    }
}

fn dirs(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read_dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    out.sort();
    out
}

fn files_below(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.path().is_dir() {
                out.extend(files_below(&e.path()));
            } else {
                out.push(e.file_name().to_string_lossy().to_string());
            }
        }
    }
    out.sort();
    out
}

/// (a) every referenced file exists and verifies; (b) a restore at parallelism `p` equals
/// `model`.
fn check_checkpoint(dir: &Path, model: &Model, p: u32) {
    let shown = dir.display();
    let reader = SnapshotReader::open(dir).unwrap_or_else(|e| panic!("{shown}: {e}"));
    let report = reader.verify().unwrap_or_else(|e| panic!("{shown}: verify: {e}"));
    assert!(report.is_ok(), "{shown}: {:?}", report.problems);
    let handles = reader
        .changelog_handles(UID, KeyGroupRange::all(MAX_P))
        .unwrap_or_else(|e| panic!("{shown}: handles: {e}"));
    let op = reader.operator(UID).expect("operator");
    assert_eq!(
        handles.len() as u32,
        op.parallelism,
        "{shown}: a changelog handle per subtask"
    );
    for h in &handles {
        for (part, f) in h.handle.materialized.iter().zip(&h.materialized) {
            let what = f.storage.describe(&f.path);
            assert!(!is_temp(&f.path), "{shown}: references a temporary file {what}");
            let r = KeyedFileReader::open(f.storage.as_ref(), &f.path, Some(f.size))
                .unwrap_or_else(|e| panic!("{shown}: materialization {what} ({:?}): {e}", part.key_groups));
            r.verify()
                .unwrap_or_else(|e| panic!("{shown}: materialization {what}: {e}"));
        }
        for (seg, f) in h.handle.tail.iter().zip(&h.tail) {
            let what = f.storage.describe(&f.path);
            assert!(!is_temp(&f.path), "{shown}: references a temporary file {what}");
            let r = LogFileReader::open(f.storage.as_ref(), &f.path, Some(f.size))
                .unwrap_or_else(|e| panic!("{shown}: log file {what}: {e}"));
            r.verify().unwrap_or_else(|e| panic!("{shown}: log file {what}: {e}"));
            assert!(
                r.index()
                    .iter()
                    .any(|e| e.offset == seg.offset && e.sqn == seg.sqn && e.log.0 == seg.log),
                "{shown}: {what} has no change set {} at offset {}",
                seg.sqn,
                seg.offset
            );
        }
    }
    let what = format!("{shown}: restore into {p}");
    let got = statekit_tests::restored_model(&reader, (UID, MAX_P), p, &what, register, read_model);
    assert!(
        got == *model,
        "{shown}: restored at parallelism {p}:\n got {got:?}\nwant {model:?}"
    );
}

fn is_temp(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.starts_with('.') || name.ends_with(".tmp")
}

fn run(retained: usize, p: u32, steps: &[Step]) -> Counts {
    let mut h = Harness::new(retained, p);
    for s in steps {
        h.apply(s);
        h.check();
    }
    h.settle();
    h.check();
    h.finish()
}

/// Proptest cases: `TRUNCATION_CASES` (default 48).
fn truncation_cases() -> u32 {
    std::env::var("TRUNCATION_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(48)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: truncation_cases(), max_shrink_iters: 300, ..ProptestConfig::default() })]

    #[test]
    fn random_schedules_never_break_a_retained_checkpoint(
        retained in 1usize..=3,
        p in 1u32..=3,
        steps in proptest::collection::vec(step(), 1..80),
    ) {
        run(retained, p, &steps);
    }
}

#[test]
fn a_long_fixed_schedule_covers_every_kind_of_step() {
    let mut runner = TestRunner::deterministic();
    let steps = proptest::collection::vec(step(), 400)
        .new_tree(&mut runner)
        .expect("steps")
        .current();
    // Every kind of restore, at several points, and a superseded checkpoint, whatever the
    // generator drew.
    let steps: Vec<Step> = steps
        .into_iter()
        .enumerate()
        .map(|(i, s)| match i % 40 {
            16 | 17 => Step::Begin,
            18 => Step::Complete { pick: 1, late: 1 },
            19 => Step::Complete { pick: 0, late: 1 },
            39 => Step::Restore {
                pick: i as u8,
                mode: (i / 40) as u8,
                p: (i / 40 + 1) as u8,
            },
            _ => s,
        })
        .collect();
    let counts = run(2, 2, &steps);
    eprintln!("{counts:?}");
    assert!(counts.completed >= 40, "{counts:?}");
    assert!(counts.aborted >= 5 && counts.superseded >= 5, "{counts:?}");
    assert!(
        counts.failed_by_injection + counts.survived_injection >= 5,
        "{counts:?}"
    );
    assert!(counts.max_pending >= 3 && counts.late_notifications >= 3, "{counts:?}");
    assert!(
        counts.forced_materializations >= 5 && counts.failed_materializations >= 3,
        "{counts:?}"
    );
    assert!(
        counts.restores.iter().all(|&n| n >= 2) && counts.rescales >= 2,
        "{counts:?}"
    );
    assert!(counts.settles >= 3, "{counts:?}");
}

#[test]
fn every_subtask_owns_a_key() {
    for p in 1..=3 {
        for sub in 0..p {
            assert!((0..KEYS).map(key).any(|k| owner(&k, p) == sub as usize));
        }
    }
}

/// After a NO_CLAIM restore the first checkpoint must share nothing with the restored
/// snapshot, so it materializes first. When that materialization fails, the checkpoint fails
/// (today: its cut still lists the restored files, and the store refuses it at completion) —
/// and the next one, whose materialization succeeds, completes.
#[test]
fn a_failed_materialization_after_a_no_claim_restore_fails_that_checkpoint_only() {
    let steps = vec![
        Step::Put {
            k: 1,
            seed: 1,
            len_class: 1,
        },
        Step::Put {
            k: 2,
            seed: 2,
            len_class: 1,
        },
        Step::Begin,
        Step::Complete { pick: 0, late: 1 },
        Step::Restore { pick: 0, mode: 2, p: 0 },
        Step::ArmMaterializationFailure { sub: 0 },
        Step::Begin,
        Step::Complete { pick: 0, late: 1 },
        Step::Put {
            k: 3,
            seed: 3,
            len_class: 1,
        },
        Step::Begin,
        Step::Complete { pick: 0, late: 1 },
    ];
    let counts = run(2, 2, &steps);
    assert_eq!(counts.refused_no_claim, 1, "{counts:?}");
    assert_eq!(counts.completed, 2 + 3, "{counts:?}");
}

/// A subtask that is disposed (failover) before the notification of a checkpoint that
/// completed reaches it must not delete that checkpoint's files: notifications are best
/// effort, and the checkpoint is the one the job restores from.
///
/// (`ChangelogBackend::dispose` keeps the files of every checkpoint cut and neither aborted
/// nor subsumed; if such a checkpoint did not complete, `statekit gc` deletes them.)
#[test]
fn lost_completion_notification_before_failover() {
    let mut h = Harness::new(2, 2);
    for s in [
        Step::Put {
            k: 1,
            seed: 1,
            len_class: 1,
        },
        Step::Materialize { sub: 0 },
        Step::Put {
            k: 2,
            seed: 2,
            len_class: 1,
        },
        Step::Begin,
        Step::Complete { pick: 0, late: 0 },
    ] {
        h.apply(&s);
        h.check();
    }
    // The job fails over before the subtasks hear of checkpoint 1.
    h.late.clear();
    h.apply(&Step::Restore { pick: 0, mode: 0, p: 1 });
    h.check();
}
