//! SIGKILL in the middle of changelog uploads and materializations.
//!
//! A child process (`statekit_tests::changelog_crash`, also runnable by hand as
//! `tests/examples/changelog_crash_child.rs`) runs a deterministic workload on two changelog
//! subtasks — over the heap backend, then over RocksDB — checkpointing every 100 records into
//! a real `CheckpointStore` (2 retained), uploading log files continuously and materializing
//! often, through a storage where some uploads and materializations are slow (they sleep
//! mid-write and before their fsync + rename, after printing a marker), and so are some writes
//! into prepared files (mid-write and before their fdatasync). The parent waits for a
//! marker — of a slow upload, of a slow materialization, or just a completed checkpoint — and
//! kills the child with SIGKILL a random moment later. Then:
//!
//! * every complete checkpoint verifies, every file it references (materializations and tail
//!   log files) exists, is not a temporary file and verifies in full, and restoring it gives
//!   exactly the state after the number of records it covers (recorded in its `_metadata`);
//! * every other file in the job directory (a half-written temporary file, an upload or a
//!   materialization nothing references, an incomplete checkpoint) is listed by `plan_gc`, and
//!   `plan_gc` lists nothing referenced; after `apply_gc` the checkpoints still restore and
//!   nothing is left to collect;
//! * the job restarts from the newest checkpoint (in this process), goes on and checkpoints
//!   again successfully; the next child restarts from that checkpoint.
//!
//! Over all rounds, kills must have left partial files of all three kinds (a log upload, a
//! materialization, and a checkpoint's upload being written in place into a prepared file), or
//! the test did not exercise what it is for.

use statekit_changelog::LogFileReader;
use statekit_checkpoint::{apply_gc, plan_gc, CheckpointStore, OrphanReason, SnapshotReader};
use statekit_core::storage::{LocalStorage, Storage};
use statekit_core::KeyGroupRange;
use statekit_format::{KeyedFileReader, METADATA_FILE_NAME};
use statekit_tests::changelog_crash::{
    checkpoint_base, child_main, expected, read_model, records_of, register, rocksdb_dir, Delegate, Job,
    CHECKPOINT_EVERY, JOB, MAX_P, RETAINED, SLOW, UID,
};
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::Arc;
use std::time::{Duration, Instant};

const CHILD_ENV: &str = "STATEKIT_CHANGELOG_CRASH_CHILD";
const TEST_NAME: &str = "sigkill_mid_upload_and_mid_materialization_leaves_restorable_checkpoints";
/// Rounds per delegate: kills after a slow upload, a slow materialization, anywhere; twice.
const ROUNDS: usize = 8;

/// Where a round kills the child.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KillPoint {
    Upload,
    Materialization,
    /// Inside a checkpoint's upload written in place into a prepared file.
    PreparedWrite,
    Anywhere,
}

/// Kills the child if the test fails while it runs.
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What the kills left behind, over all rounds.
#[derive(Debug, Default)]
struct Seen {
    /// Temporary (half-written or not yet renamed) files in `dstl/` and `taskowned/`.
    temp_uploads: usize,
    temp_materializations: usize,
    /// Complete files nothing references, in `dstl/` and `taskowned/`.
    unreferenced_uploads: usize,
    /// Of those in `dstl/`: prepared files a kill interrupted while a checkpoint's upload was
    /// written into them (padded, not all zeros), and spares never written (all zeros).
    interrupted_prepared: usize,
    unused_prepared: usize,
    unreferenced_materializations: usize,
    /// Incomplete checkpoint directories, and their files.
    incomplete_checkpoints: usize,
    incomplete_checkpoint_files: usize,
    /// Checkpoints checked (verified and restored).
    checkpoints: usize,
}

fn is_temp(path: &Path) -> bool {
    path.file_name()
        .map(|n| n.to_string_lossy())
        .is_some_and(|n| n.starts_with('.') || n.ends_with(".tmp"))
}

fn files_below(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        if e.path().is_dir() {
            files_below(&e.path(), out);
        } else {
            out.push(e.path());
        }
    }
}

/// Verifies checkpoint `reader` file by file and restores it (into heap backends at
/// parallelism `p`): exactly the state after its records. Returns the identities of the files
/// it references.
fn check_checkpoint(reader: &SnapshotReader, p: u32) -> Vec<PathBuf> {
    let id = reader.metadata().checkpoint_id;
    let report = reader.verify().expect("verify");
    assert!(report.is_ok(), "checkpoint {id}: {:?}", report.problems);
    let handles = reader
        .changelog_handles(UID, KeyGroupRange::all(MAX_P))
        .expect("changelog handles");
    for h in &handles {
        for f in &h.materialized {
            let what = f.storage.describe(&f.path);
            assert!(!is_temp(Path::new(&f.path)), "checkpoint {id} references {what}");
            KeyedFileReader::open(f.storage.as_ref(), &f.path, Some(f.size))
                .and_then(|r| r.verify())
                .unwrap_or_else(|e| panic!("checkpoint {id}: materialization {what}: {e}"));
        }
        for f in &h.tail {
            let what = f.storage.describe(&f.path);
            assert!(!is_temp(Path::new(&f.path)), "checkpoint {id} references {what}");
            LogFileReader::open(f.storage.as_ref(), &f.path, Some(f.size))
                .and_then(|r| r.verify())
                .unwrap_or_else(|e| panic!("checkpoint {id}: log file {what}: {e}"));
        }
    }
    let records = records_of(reader);
    let what = format!("checkpoint {id}: restore");
    let got = statekit_tests::restored_model(reader, (UID, MAX_P), p, &what, register, read_model);
    assert!(
        got == expected(records),
        "checkpoint {id} does not hold exactly the state after its {records} records"
    );
    reader
        .referenced_files()
        .expect("referenced files")
        .into_iter()
        .map(|f| PathBuf::from(f.identity))
        .collect()
}

/// Checks every complete checkpoint and the leftovers; collects the garbage; returns the
/// records of the newest checkpoint.
fn check_after_kill(dir: &Path, seen: &mut Seen) -> u64 {
    let base = std::path::absolute(checkpoint_base(dir)).expect("absolute");
    let storage: Arc<dyn Storage> = Arc::new(LocalStorage::new(&base));
    let store = CheckpointStore::open(storage, JOB, RETAINED).expect("store");
    let completed = store.completed().expect("completed");
    assert!(!completed.is_empty(), "no complete checkpoint");
    // Incomplete checkpoint directories: the one the kill interrupted (newer than the
    // latest), or a subsumed one whose deletion it interrupted (older). Either is garbage.
    seen.incomplete_checkpoints += store.list().expect("list").iter().filter(|l| !l.complete).count();
    let check_all = |seen: &mut Seen| {
        let mut referenced = BTreeSet::new();
        let mut latest_records = 0;
        for c in &completed {
            let reader = store.reader(c.id).expect("reader");
            referenced.extend(check_checkpoint(&reader, 1 + (c.id % 3) as u32));
            referenced.insert(base.join(&c.dir).join(METADATA_FILE_NAME));
            latest_records = records_of(&reader);
            seen.checkpoints += 1;
        }
        (referenced, latest_records)
    };
    let (referenced, records) = check_all(seen);
    // Every file no complete checkpoint references is garbage `plan_gc` lists; it lists
    // nothing referenced.
    let plan = plan_gc(&base, Duration::ZERO).expect("gc plan");
    assert!(plan.unreadable.is_empty(), "{:?}", plan.unreadable);
    assert!(plan.too_young.is_empty());
    let orphans: BTreeSet<&Path> = plan.orphans.iter().map(|o| o.path.as_path()).collect();
    let mut all = Vec::new();
    files_below(&base.join(JOB), &mut all);
    for f in &all {
        if referenced.contains(f) {
            assert!(!orphans.contains(f.as_path()), "gc would delete {}", f.display());
        } else {
            assert!(
                orphans.contains(f.as_path()),
                "{} is referenced by no complete checkpoint, but gc does not list it",
                f.display()
            );
        }
    }
    for o in &plan.orphans {
        let in_dir = |d: &str| o.path.starts_with(base.join(JOB).join(d));
        match (in_dir("dstl"), in_dir("taskowned"), is_temp(&o.path)) {
            (true, _, true) => seen.temp_uploads += 1,
            (true, _, false) => {
                seen.unreferenced_uploads += 1;
                let b = std::fs::read(&o.path).unwrap_or_default();
                if !b.is_empty() && b.iter().all(|&x| x == 0) {
                    seen.unused_prepared += 1;
                } else if b.get(8).is_some_and(|f| f & 1 != 0) {
                    seen.interrupted_prepared += 1;
                }
            }
            (_, true, true) => seen.temp_materializations += 1,
            (_, true, false) => seen.unreferenced_materializations += 1,
            _ => {}
        }
        if o.reason == OrphanReason::IncompleteCheckpoint {
            seen.incomplete_checkpoint_files += 1;
        }
    }
    apply_gc(&plan).expect("gc");
    // Nothing referenced was collected, nothing is left.
    let (after, records_after) = check_all(seen);
    assert_eq!((after, records_after), (referenced, records));
    let again = plan_gc(&base, Duration::ZERO).expect("gc plan");
    assert!(again.orphans.is_empty(), "gc left {:?}", again.orphans);
    records
}

/// The job restarts from its newest checkpoint in this process, processes more records and
/// checkpoints again.
fn continue_job(dir: &Path, delegate: Delegate, records: u64) {
    // The killed process's local RocksDB directories are gone with it.
    let _ = std::fs::remove_dir_all(rocksdb_dir(dir));
    let mut job = Job::start(dir, delegate, false);
    assert_eq!(job.records, records, "restarted from the newest checkpoint");
    for _ in 0..CHECKPOINT_EVERY + 7 {
        job.process();
    }
    let id = job.checkpoint();
    let reader = job.store.reader(id).expect("reader");
    assert_eq!(records_of(&reader), records + CHECKPOINT_EVERY + 7);
    check_checkpoint(&reader, 2);
    job.stop();
}

/// Runs one child until it reaches `point`, then kills it.
fn run_and_kill(dir: &Path, delegate: Delegate, point: KillPoint) {
    let stderr_path = dir.join("child.stderr");
    let stderr = std::fs::File::create(&stderr_path).expect("child stderr");
    let child = statekit_tests::test_child(TEST_NAME)
        .env(CHILD_ENV, format!("{}|{}", delegate.as_str(), dir.display()))
        .stderr(stderr)
        .spawn()
        .expect("spawn child");
    let child_stderr = || std::fs::read_to_string(&stderr_path).unwrap_or_default();
    let mut guard = ChildGuard(child);
    let stdout = guard.0.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut completed = 0;
    loop {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("the child exited early (waiting for {point:?}):\n{}", child_stderr()))
            .expect("read line");
        completed += usize::from(line.starts_with("completed "));
        let hit = completed >= 1
            && match point {
                KillPoint::Upload => line.starts_with("slow-upload "),
                KillPoint::Materialization => line.starts_with("slow-materialization "),
                KillPoint::PreparedWrite => line.starts_with("slow-prepared-write "),
                KillPoint::Anywhere => completed >= 2 && line.starts_with("completed "),
            };
        if hit {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the child never reached {point:?}:\n{}",
            child_stderr()
        );
    }
    // A slowed file sleeps 2 × SLOW after its marker: kill within that window (or, for
    // `Anywhere`, at any moment of the next checkpoint interval).
    let window = match point {
        KillPoint::Anywhere => 3 * SLOW.as_millis() as u64,
        _ => 2 * SLOW.as_millis() as u64 - 20,
    };
    std::thread::sleep(Duration::from_millis(rand::random::<u64>() % window));
    // SAFETY: plain FFI call sending SIGKILL to our own child process.
    let rc = unsafe { libc::kill(guard.0.id() as libc::pid_t, libc::SIGKILL) };
    assert_eq!(rc, 0, "kill failed");
    guard.0.wait().expect("wait");
}

#[test]
fn sigkill_mid_upload_and_mid_materialization_leaves_restorable_checkpoints() {
    if let Ok(v) = std::env::var(CHILD_ENV) {
        let (delegate, dir) = v.split_once('|').expect("delegate|dir");
        child_main(Path::new(dir), Delegate::parse(delegate).expect("delegate"));
        return;
    }
    let mut seen = Seen::default();
    for delegate in [Delegate::Heap, Delegate::RocksDb] {
        let tmp = tempfile::tempdir().expect("tempdir");
        for round in 0..ROUNDS {
            let point = [
                KillPoint::Upload,
                KillPoint::Materialization,
                KillPoint::PreparedWrite,
                KillPoint::Anywhere,
            ][round % 4];
            run_and_kill(tmp.path(), delegate, point);
            let records = check_after_kill(tmp.path(), &mut seen);
            continue_job(tmp.path(), delegate, records);
        }
    }
    eprintln!("{seen:?}");
    assert!(
        seen.temp_uploads > 0 && seen.temp_materializations > 0 && seen.interrupted_prepared > 0,
        "no kill landed inside a log upload, inside a materialization and inside a write into a prepared file: {seen:?}"
    );
}
