//! Native RocksDB checkpoints through a real `CheckpointStore` on the local filesystem:
//! incremental uploads, sharing and deletion of shared files, aborts, restore (with
//! rescaling) and the three restore modes — ending with a property test over random schedules
//! of checkpoint / complete / abort / compaction / restore in every mode.

use proptest::prelude::*;
use statekit_checkpoint::{CheckpointStore, RestoreMode, SnapshotReader, SnapshotWriter};
use statekit_core::storage::{LocalStorage, Storage};
use statekit_core::{
    BackendConfig, KeyedStateBackend, KeyedStateView, MemoryView, StateDescriptor, StateFunctions, TypeSchema,
};
use statekit_format::{FileScope, SnapshotFormat};
use statekit_rocksdb::{RocksDbBackend, RocksDbOptions};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

const UID: &str = "counter";
const MAX_P: u32 = 64;

fn options() -> RocksDbOptions {
    // Small write buffers: every checkpoint flushes its changes into new small table files.
    statekit_tests::test_rocksdb_options().with_write_buffer_bytes(256 << 10)
}

fn descriptors() -> [StateDescriptor; 2] {
    [
        StateDescriptor::value("count", TypeSchema::Utf8, TypeSchema::I64),
        StateDescriptor::list("seen", TypeSchema::Utf8, TypeSchema::Bytes),
    ]
}

/// One subtask of a job of parallelism `p` (no state registered: restores register).
fn backend(p: u32, i: u32) -> RocksDbBackend {
    backend_with(p, i, options())
}

fn backend_with(p: u32, i: u32, options: RocksDbOptions) -> RocksDbBackend {
    RocksDbBackend::new(BackendConfig::for_subtask(MAX_P, p, i).expect("config"), options).expect("backend")
}

fn register(b: &mut RocksDbBackend) {
    for d in descriptors() {
        b.register(d, StateFunctions::None).expect("register");
    }
}

fn key(k: u32) -> Vec<u8> {
    format!("word-{k}").into_bytes()
}

/// What the job holds: key → (count, seen list).
type Model = BTreeMap<Vec<u8>, (i64, Vec<Vec<u8>>)>;

/// A job: its subtasks and the model of what they hold.
struct Job {
    p: u32,
    subtasks: Vec<RocksDbBackend>,
    model: Model,
}

impl Job {
    fn new(p: u32) -> Self {
        let subtasks = (0..p)
            .map(|i| {
                let mut b = backend(p, i);
                register(&mut b);
                b
            })
            .collect();
        Job {
            p,
            subtasks,
            model: BTreeMap::new(),
        }
    }

    fn owner(&self, k: &[u8]) -> usize {
        statekit_tests::owner(k, MAX_P, self.p)
    }

    /// Counts `keys` once more and appends a marker to their lists.
    fn update(&mut self, keys: impl IntoIterator<Item = u32>, marker: u8) {
        for k in keys {
            let kb = key(k);
            let o = self.owner(&kb);
            let b = &mut self.subtasks[o];
            let (count, seen) = (b.handle("count").expect("count"), b.handle("seen").expect("seen"));
            let mut out = Vec::new();
            let n = if b.get(count, &kb, b"", &mut out).expect("get") {
                i64::from_be_bytes(out.as_slice().try_into().expect("i64"))
            } else {
                0
            } + 1;
            b.put(count, &kb, b"", &n.to_be_bytes()).expect("put");
            b.add(seen, &kb, b"", &[marker; 40]).expect("add");
            let m = self.model.entry(kb).or_default();
            m.0 = n;
            m.1.push(vec![marker; 40]);
        }
    }

    /// Checks that the subtasks hold exactly the model.
    fn check(&mut self) {
        let mut got: Model = BTreeMap::new();
        for b in &mut self.subtasks {
            let view = b.snapshot(0).expect("snapshot");
            let mv = MemoryView::collect(view.as_ref(), view.key_group_range()).expect("collect");
            for e in mv.entries() {
                let slot = got.entry(e.key.clone()).or_default();
                match e.state {
                    0 => slot.0 = i64::from_be_bytes(e.value.as_slice().try_into().expect("i64")),
                    _ => slot.1.push(e.value.clone()),
                }
            }
        }
        assert_eq!(got, self.model, "restored state differs from the model");
    }

    /// Takes native checkpoint `id` of every subtask; returns the writer (not completed) and
    /// the model of the state at the cut.
    fn native_checkpoint(&mut self, store: &CheckpointStore, id: u64) -> (SnapshotWriter, Model) {
        let writer = store.begin(id).expect("begin");
        writer.register_operator(UID, self.p, MAX_P).expect("register");
        let cuts: Vec<_> = self
            .subtasks
            .iter_mut()
            .map(|b| b.native_snapshot(id).expect("cut"))
            .collect();
        let at_cut = self.model.clone();
        // Processing continues while the files are uploaded.
        self.update(0..5, 0xEE);
        for (i, cut) in cuts.iter().enumerate() {
            let target = writer.native_target(UID, i as u32).expect("target");
            let handle = cut.upload(&target).expect("upload");
            writer
                .add_native_subtask(UID, i as u32, handle, descriptors().to_vec(), None, false)
                .expect("add");
        }
        (writer, at_cut)
    }

    fn complete(&mut self, store: &CheckpointStore, writer: SnapshotWriter) -> Vec<u64> {
        let id = writer.checkpoint_id();
        let (_, subsumed) = store.complete(writer).expect("complete");
        for b in &mut self.subtasks {
            b.notify_checkpoint_complete(id).expect("notify");
        }
        subsumed
    }

    fn abort(&mut self, store: &CheckpointStore, writer: SnapshotWriter) {
        let id = writer.checkpoint_id();
        store.abort(writer).expect("abort");
        for b in &mut self.subtasks {
            b.notify_checkpoint_aborted(id).expect("notify");
        }
    }

    /// A new job of parallelism `p` restored from `reader` (native), reusing the restored
    /// files when `reuse`.
    fn restore(reader: &SnapshotReader, p: u32, reuse: bool, model: Model) -> Self {
        let subtasks = (0..p)
            .map(|i| {
                let mut b = backend(p, i);
                let handles = reader.native_handles(UID, b.key_group_range()).expect("handles");
                b.restore_native(&handles, reuse).expect("restore native");
                register(&mut b);
                b
            })
            .collect();
        let mut job = Job { p, subtasks, model };
        job.check();
        job
    }
}

/// Every regular file under `dir`, with its bytes.
fn files_under(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let listed = statekit_core::storage::files_below(&LocalStorage::new(dir), "").expect("list");
    listed
        .into_iter()
        .map(|(name, _)| {
            let p = dir.join(name);
            let bytes = std::fs::read(&p).expect("read");
            (p, bytes)
        })
        .collect()
}

/// Absolute paths of every file the completed checkpoints of `store` reference.
fn referenced(store: &CheckpointStore, base: &Path) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    for c in store.completed().expect("completed") {
        let reader = SnapshotReader::open(base.join(&c.dir)).expect("open");
        for f in reader.referenced_files().expect("files") {
            out.insert(PathBuf::from(f.identity));
        }
    }
    out
}

fn open_store(base: &Path, job: &str, retained: usize) -> CheckpointStore {
    let storage: Arc<dyn Storage> = Arc::new(LocalStorage::new(base));
    CheckpointStore::open(storage, job, retained).expect("store")
}

#[test]
fn incremental_checkpoints_upload_only_new_files_and_shared_files_die_with_their_last_user() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let base = tmp.path();
    let store = open_store(base, "job-a", 2);
    let mut job = Job::new(2);
    // No background compaction: each checkpoint adds exactly its flushes (with compactions,
    // a level-0 compaction between two checkpoints rewrites what it overlaps).
    for (i, b) in job.subtasks.iter_mut().enumerate() {
        *b = backend_with(2, i as u32, options().with_auto_compactions(false));
        register(b);
    }
    job.update(0..20_000, 1);

    let (w, _) = job.native_checkpoint(&store, 1);
    let meta1 = w.metadata().expect("metadata");
    job.complete(&store, w);
    let handles1: Vec<_> = meta1.operators[0]
        .subtasks
        .iter()
        .filter_map(|s| s.keyed.native().cloned())
        .collect();
    assert_eq!(meta1.format, SnapshotFormat::Native);
    assert_eq!(handles1.len(), 2);
    for h in &handles1 {
        assert_eq!(
            h.uploaded_bytes,
            h.total_bytes(),
            "the first checkpoint uploads everything"
        );
        for f in &h.files {
            let shared = f.name.ends_with(".sst");
            assert_eq!(f.file.scope == FileScope::Shared, shared, "{f:?}");
        }
    }

    // 1% of the keys change: the next checkpoint uploads a small fraction.
    job.update(0..200, 2);
    let (w, _) = job.native_checkpoint(&store, 2);
    let meta2 = w.metadata().expect("metadata");
    job.complete(&store, w);
    let (total, uploaded): (u64, u64) = meta2.operators[0]
        .subtasks
        .iter()
        .filter_map(|s| s.keyed.native())
        .fold((0, 0), |(t, u), h| (t + h.total_bytes(), u + h.uploaded_bytes));
    assert!(
        uploaded * 10 < total,
        "incremental checkpoint uploaded {uploaded} of {total} bytes"
    );
    let reused: Vec<_> = meta2.operators[0]
        .subtasks
        .iter()
        .filter_map(|s| s.keyed.native())
        .flat_map(|h| &h.files)
        .filter(|f| handles1.iter().flat_map(|h| &h.files).any(|g| g.file == f.file))
        .collect();
    assert!(!reused.is_empty(), "checkpoint 2 reuses checkpoint 1's table files");

    // Compaction rewrites everything; two more checkpoints subsume 1 and 2.
    for b in &job.subtasks {
        b.compact().expect("compact");
    }
    job.update(40..80, 3);
    let (w, _) = job.native_checkpoint(&store, 3);
    assert_eq!(job.complete(&store, w), vec![1]);
    let (w, model) = job.native_checkpoint(&store, 4);
    assert_eq!(job.complete(&store, w), vec![2]);
    assert!(!base.join("job-a/chk-1").exists() && !base.join("job-a/chk-2").exists());

    // Exactly the files of checkpoints 3 and 4 remain in shared/: nothing referenced was
    // deleted, nothing unreferenced is left.
    let live = referenced(&store, base);
    let shared: BTreeSet<PathBuf> = files_under(&base.join("job-a/shared")).into_keys().collect();
    let live_shared: BTreeSet<PathBuf> = live
        .iter()
        .filter(|p| p.starts_with(base.join("job-a/shared")))
        .cloned()
        .collect();
    assert_eq!(shared, live_shared);
    for p in &live {
        assert!(p.is_file(), "{} is referenced but missing", p.display());
    }

    // Restore the latest at the same and at other parallelisms (clipping, merging handles).
    let reader = store.reader(4).expect("reader");
    assert!(reader.verify().expect("verify").is_ok());
    for p in [1, 2, 3, 5] {
        Job::restore(&reader, p, false, model.clone());
    }
}

#[test]
fn aborted_checkpoints_delete_their_uploads_and_are_never_reused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let base = tmp.path();
    let store = open_store(base, "job", 1);
    let mut job = Job::new(1);
    job.update(0..2_000, 1);
    let (w, _) = job.native_checkpoint(&store, 1);
    let shared1: BTreeSet<String> = shared_paths(&w);
    job.complete(&store, w);
    job.update(0..500, 2);
    let (w, _) = job.native_checkpoint(&store, 2);
    let new_in_2: BTreeSet<String> = shared_paths(&w).difference(&shared1).cloned().collect();
    assert!(!new_in_2.is_empty(), "checkpoint 2 uploaded new table files");
    job.abort(&store, w);
    assert!(!base.join("job/chk-2").exists());
    for p in &new_in_2 {
        assert!(!base.join("job").join(p).exists(), "aborted upload {p} left behind");
    }
    let (w, model) = job.native_checkpoint(&store, 3);
    let in_3 = shared_paths(&w);
    job.complete(&store, w);
    assert!(
        in_3.is_disjoint(&new_in_2),
        "checkpoint 3 references files of the aborted checkpoint 2"
    );
    assert!(!in_3.is_disjoint(&shared1), "checkpoint 3 reuses checkpoint 1's files");
    let reader = store.reader(3).expect("reader");
    assert!(reader.verify().expect("verify").is_ok());
    Job::restore(&reader, 1, false, model);
}

/// The shared paths the native handles of `w` reference.
fn shared_paths(w: &SnapshotWriter) -> BTreeSet<String> {
    w.native_handles()
        .iter()
        .flat_map(|h| h.files.iter())
        .filter(|f| f.file.scope == FileScope::Shared)
        .map(|f| f.file.path.clone())
        .collect()
}

#[test]
fn native_savepoint_is_self_contained_and_relocatable() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let storage: Arc<dyn Storage> = Arc::new(LocalStorage::new(tmp.path()));
    let mut job = Job::new(3);
    job.update(0..3_000, 7);
    let writer =
        SnapshotWriter::new_savepoint(storage, "savepoints", "0123456789abcdef0123456789abcdef", 9).expect("writer");
    writer.register_operator(UID, 3, MAX_P).expect("register");
    for (i, b) in job.subtasks.iter_mut().enumerate() {
        let cut = b.native_snapshot(9).expect("cut");
        let target = writer.native_target(UID, i as u32).expect("target");
        assert!(target.job.is_none(), "savepoints share nothing");
        let h = cut.upload(&target).expect("upload");
        assert!(h.files.iter().all(|f| f.file.scope == FileScope::Exclusive));
        writer
            .add_native_subtask(UID, i as u32, h, descriptors().to_vec(), None, false)
            .expect("add");
    }
    let dir = tmp.path().join(writer.dir());
    writer.finish().expect("finish");
    // Move it elsewhere: it still restores (at another parallelism) and verifies.
    let moved = tmp.path().join("moved");
    std::fs::rename(&dir, &moved).expect("rename");
    let reader = SnapshotReader::open(&moved).expect("open");
    assert_eq!(reader.metadata().format, SnapshotFormat::Native);
    let report = reader.verify().expect("verify");
    assert!(report.is_ok(), "{:?}", report.problems);
    assert!(report.files >= 9, "{} files verified", report.files);
    let model = job.model.clone();
    let mut restored = Job::restore(&reader, 2, false, model);
    restored.check();
    // A native savepoint does not restore into the heap backend.
    let mut heap =
        statekit_hashmap::HashMapBackend::new(BackendConfig::for_subtask(MAX_P, 1, 0).expect("cfg")).expect("heap");
    let err = reader.restore_keyed(UID, &mut heap).expect_err("native into heap");
    assert!(
        err.to_string().contains("restores only into a rocksdb backend"),
        "{err}"
    );
}

#[test]
fn restore_modes_own_protect_or_detach_the_restored_files() {
    for mode in [RestoreMode::Claim, RestoreMode::NoClaim, RestoreMode::Legacy] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let base = tmp.path();
        let store_a = open_store(base, "job-a", 2);
        let mut a = Job::new(2);
        a.update(0..3_000, 1);
        let (w, _) = a.native_checkpoint(&store_a, 1);
        a.complete(&store_a, w);
        a.update(0..30, 2);
        let (w, model) = a.native_checkpoint(&store_a, 2);
        a.complete(&store_a, w);
        let restored_dir = base.join("job-a/chk-2");
        let reader = SnapshotReader::open(&restored_dir).expect("open");
        let restored_files: BTreeMap<PathBuf, Vec<u8>> = reader
            .referenced_files()
            .expect("files")
            .into_iter()
            .map(|f| {
                let p = PathBuf::from(&f.identity);
                let bytes = std::fs::read(&p).expect("read");
                (p, bytes)
            })
            .collect();
        let before_a = files_under(&base.join("job-a"));

        // Job B restores chk-2 of job A in `mode` and checkpoints on.
        let store_b = open_store(base, "job-b", 1);
        store_b.restored(&reader, mode).expect("restored");
        let mut b = Job::restore(&reader, 2, mode.may_reference_restored_files(), model);
        b.update(100..130, 3);
        let (w, _) = b.native_checkpoint(&store_b, 3);
        let first = w.metadata().expect("metadata");
        b.complete(&store_b, w);
        let abs_refs: Vec<String> = first.operators[0]
            .subtasks
            .iter()
            .filter_map(|s| s.keyed.native())
            .flat_map(|h| &h.files)
            .filter(|f| f.file.scope == FileScope::Absolute)
            .map(|f| f.file.path.clone())
            .collect();
        match mode {
            RestoreMode::NoClaim => assert!(abs_refs.is_empty(), "NO_CLAIM shares nothing: {abs_refs:?}"),
            _ => {
                assert!(
                    !abs_refs.is_empty(),
                    "{mode}: the first checkpoint reuses restored files"
                );
                for r in &abs_refs {
                    assert!(restored_files.contains_key(Path::new(r)), "{r} is not a restored file");
                }
            }
        }
        // More checkpoints with compactions: everything turns over.
        let mut model = Model::new();
        for id in 4..7 {
            for s in &b.subtasks {
                s.compact().expect("compact");
            }
            b.update(id as u32 * 10..id as u32 * 10 + 10, id as u8);
            let (w, m) = b.native_checkpoint(&store_b, id);
            b.complete(&store_b, w);
            model = m;
        }
        let b_refs = referenced(&store_b, base);
        for p in &b_refs {
            assert!(p.is_file(), "{mode}: {} is referenced but missing", p.display());
        }
        match mode {
            RestoreMode::NoClaim | RestoreMode::Legacy => {
                // Not one byte of job A changed or went missing.
                assert_eq!(
                    files_under(&base.join("job-a")),
                    before_a,
                    "{mode}: job A's files changed"
                );
            }
            RestoreMode::Claim => {
                // Job B owns chk-2: it is gone, with its files nobody references any more —
                // but not those job A's chk-1 still references (claiming one checkpoint never
                // breaks another), and chk-1 still verifies.
                assert!(
                    !restored_dir.join("_metadata").exists(),
                    "claimed checkpoint still complete"
                );
                let sibling = SnapshotReader::open(base.join("job-a/chk-1")).expect("chk-1");
                let sibling_refs: BTreeSet<PathBuf> = sibling
                    .referenced_files()
                    .expect("files")
                    .into_iter()
                    .map(|f| PathBuf::from(f.identity))
                    .collect();
                assert!(sibling.verify().expect("verify").is_ok(), "claiming chk-2 broke chk-1");
                let mut deleted = 0;
                for p in restored_files.keys() {
                    let keep = b_refs.contains(p) || sibling_refs.contains(p);
                    assert_eq!(
                        p.exists(),
                        keep,
                        "claimed file {} exists={} kept={keep}",
                        p.display(),
                        p.exists()
                    );
                    deleted += usize::from(!keep);
                }
                assert!(deleted > 0, "the claimed checkpoint's own files were deleted");
            }
        }
        // B's latest checkpoint restores exactly.
        let latest = store_b.latest_completed().expect("latest").expect("some");
        let reader = SnapshotReader::open(base.join(&latest.dir)).expect("open");
        assert!(reader.verify().expect("verify").is_ok());
        Job::restore(&reader, 1, false, model);
    }
}

#[derive(Clone, Debug)]
enum Step {
    /// Update `n` keys starting at `from`.
    Update { from: u16, n: u16 },
    /// Take a checkpoint; complete it or abort it.
    Checkpoint { complete: bool },
    /// Compact every subtask.
    Compact,
    /// A new job restores the newest complete checkpoint at parallelism `p` in `mode`.
    Restore { p: u8, mode: u8 },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0u16..2_000, 1u16..300).prop_map(|(from, n)| Step::Update { from, n }),
        4 => prop_oneof![4 => Just(true), 1 => Just(false)].prop_map(|complete| Step::Checkpoint { complete }),
        1 => Just(Step::Compact),
        1 => (1u8..4, 0u8..3).prop_map(|(p, mode)| Step::Restore { p, mode }),
    ]
}

/// A restored snapshot a later job depends on (or not).
struct RestoredSnapshot {
    mode: RestoreMode,
    files: BTreeMap<PathBuf, Vec<u8>>,
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, max_shrink_iters: 100, ..ProptestConfig::default() })]

    /// Over random schedules: no file referenced by a complete checkpoint (of any job) is ever
    /// missing or changed; after the schedule (plus compaction and `retained` more checkpoints), every
    /// file in a job's `shared/` is referenced; NO_CLAIM and LEGACY restored snapshots never
    /// change; CLAIM'ed ones lose exactly their files nobody references; every restore is
    /// exact.
    #[test]
    fn schedules_never_lose_a_referenced_file_and_leak_nothing(
        retained in 1usize..4,
        steps in proptest::collection::vec(step(), 1..30),
    ) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let base = tmp.path();
        let mut job_no = 0;
        let mut store = open_store(base, "job-0", retained);
        let mut job = Job::new(2);
        let mut next_id = 1u64;
        let mut restored: Vec<RestoredSnapshot> = Vec::new();
        // Model of the newest completed checkpoint's content.
        let mut completed_model: Option<Model> = None;
        for s in steps {
            match s {
                Step::Update { from, n } => job.update(u32::from(from)..u32::from(from) + u32::from(n), from as u8),
                Step::Compact => {
                    for b in &job.subtasks {
                        b.compact().expect("compact");
                    }
                }
                Step::Checkpoint { complete } => {
                    let (w, at_cut) = job.native_checkpoint(&store, next_id);
                    next_id += 1;
                    if complete {
                        job.complete(&store, w);
                        completed_model = Some(at_cut);
                    } else {
                        job.abort(&store, w);
                    }
                }
                Step::Restore { p, mode } => {
                    let Some(model) = completed_model.clone() else { continue };
                    let mode = [RestoreMode::Claim, RestoreMode::NoClaim, RestoreMode::Legacy][usize::from(mode)];
                    let latest = store.latest_completed().expect("latest").expect("complete");
                    let reader = SnapshotReader::open(base.join(&latest.dir)).expect("open");
                    let files = reader
                        .referenced_files()
                        .expect("files")
                        .into_iter()
                        .map(|f| {
                            let p = PathBuf::from(&f.identity);
                            let bytes = std::fs::read(&p).expect("restored file readable");
                            (p, bytes)
                        })
                        .collect();
                    restored.push(RestoredSnapshot { mode, files });
                    job_no += 1;
                    store = open_store(base, &format!("job-{job_no}"), retained);
                    store.restored(&reader, mode).expect("restored");
                    job = Job::restore(&reader, u32::from(p), mode.may_reference_restored_files(), model);
                    // The new job restores from its own checkpoints next time.
                    completed_model = None;
                }
            }
            // Invariant: every complete checkpoint under the base directory — of the current
            // job and of every earlier one — has all its files, intact (size and CRC).
            for job_dir in std::fs::read_dir(base).expect("list").flatten() {
                for chk in std::fs::read_dir(job_dir.path()).expect("list").flatten() {
                    if !chk.path().join("_metadata").is_file() {
                        continue;
                    }
                    let reader = SnapshotReader::open(chk.path()).expect("open");
                    let report = reader.verify().expect("verify");
                    prop_assert!(report.is_ok(), "{} broken: {:?}", chk.path().display(), report.problems);
                }
            }
            for r in &restored {
                if r.mode != RestoreMode::Claim {
                    for (p, bytes) in &r.files {
                        let now = std::fs::read(p).ok();
                        prop_assert_eq!(now.as_ref(), Some(bytes), "{} of a {} restore changed", p.display(), r.mode);
                    }
                }
            }
        }
        // Turn everything over: compact, then `retained + 1` checkpoints.
        let mut last = Model::new();
        for _ in 0..=retained {
            for b in &job.subtasks {
                b.compact().expect("compact");
            }
            let (w, at_cut) = job.native_checkpoint(&store, next_id);
            next_id += 1;
            job.complete(&store, w);
            last = at_cut;
        }
        let live = referenced(&store, base);
        let job_dir = base.join(format!("job-{job_no}"));
        for p in files_under(&job_dir.join("shared")).keys() {
            prop_assert!(live.contains(p), "{} leaked: no retained checkpoint references it", p.display());
        }
        for r in &restored {
            for p in r.files.keys() {
                let protected = r.mode != RestoreMode::Claim;
                let needed = live.contains(p);
                if protected {
                    prop_assert!(p.exists(), "{} of a {} restore was deleted", p.display(), r.mode);
                }
                if needed {
                    prop_assert!(p.exists());
                }
            }
        }
        // The newest checkpoint restores exactly.
        let latest = store.latest_completed().expect("latest").expect("complete");
        let reader = SnapshotReader::open(base.join(&latest.dir)).expect("open");
        Job::restore(&reader, 2, false, last);
    }
}

/// A named way to damage a file.
type Damage = (&'static str, fn(&Path));

/// A native savepoint of `job` in `dir` (returns its directory).
fn native_savepoint(job: &mut Job, storage: Arc<dyn Storage>, base: &Path) -> PathBuf {
    let writer = SnapshotWriter::new_savepoint(storage, "sp", "0123456789abcdef0123456789abcdef", 3).expect("writer");
    writer.register_operator(UID, job.p, MAX_P).expect("register");
    for (i, b) in job.subtasks.iter_mut().enumerate() {
        let cut = b.native_snapshot(3).expect("cut");
        let h = cut
            .upload(&writer.native_target(UID, i as u32).expect("target"))
            .expect("upload");
        writer
            .add_native_subtask(UID, i as u32, h, descriptors().to_vec(), None, false)
            .expect("add");
    }
    let dir = base.join(writer.dir());
    writer.finish().expect("finish");
    dir
}

/// Damage to any file of a native snapshot — a flipped byte, a truncation, a missing file —
/// is reported by `verify` naming the file, and a restore fails with an error (never a panic,
/// never a silently partial state).
#[test]
fn damaged_native_files_are_detected_by_verify_and_refused_by_restore() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let storage: Arc<dyn Storage> = Arc::new(LocalStorage::new(tmp.path()));
    let mut job = Job::new(1);
    job.update(0..3_000, 9);
    let sp = native_savepoint(&mut job, storage, tmp.path());
    // Every non-empty file (an empty write-ahead log can only go missing: tested below).
    let files: Vec<PathBuf> = files_under(&sp)
        .into_iter()
        .filter(|(p, b)| p.file_name().is_some_and(|n| n != "_metadata") && !b.is_empty())
        .map(|(p, _)| p)
        .collect();
    assert!(files.iter().any(|p| p.extension().is_some_and(|e| e == "sst")));
    let pristine: BTreeMap<PathBuf, Vec<u8>> = files_under(&sp);
    let damages: [Damage; 3] = [
        ("flipped byte", |p| {
            let mut b = std::fs::read(p).expect("read");
            let i = b.len() / 2;
            b[i] ^= 0x40;
            std::fs::write(p, b).expect("write");
        }),
        ("truncated", |p| {
            let b = std::fs::read(p).expect("read");
            std::fs::write(p, &b[..b.len() / 2]).expect("write");
        }),
        ("missing", |p| std::fs::remove_file(p).expect("rm")),
    ];
    for f in &files {
        for (what, damage) in &damages {
            damage(f);
            let name = f.file_name().expect("name").to_string_lossy().to_string();
            let reader = SnapshotReader::open(&sp).expect("metadata is intact");
            let report = reader.verify().expect("verify");
            assert!(!report.is_ok(), "{what} {name}: verify found nothing");
            assert!(
                report.problems.iter().any(|p| p.to_string().contains(&name)),
                "{what} {name}: no problem names the file: {:?}",
                report.problems
            );
            let mut b = backend(1, 0);
            let handles = reader.native_handles(UID, b.key_group_range()).expect("handles");
            let restored = b.restore_native(&handles, false);
            assert!(restored.is_err(), "{what} {name}: restore succeeded");
            let view = statekit_rocksdb::NativeSnapshotView::open(&handles[0], &options());
            if let Ok(view) = view {
                // Opening may succeed (damage inside a data block): reading must then fail.
                let read = MemoryView::collect(&view, view.key_group_range());
                let full = statekit_rocksdb::verify_native(&handles[0], &options());
                assert!(read.is_err() || full.is_err(), "{what} {name}: damage went unnoticed");
            }
            // Undo.
            for (p, bytes) in &pristine {
                std::fs::write(p, bytes).expect("restore file");
            }
        }
    }
    // Pristine again: verifies and restores.
    let reader = SnapshotReader::open(&sp).expect("open");
    assert!(reader.verify().expect("verify").is_ok());
    Job::restore(&reader, 1, false, job.model.clone());
}
