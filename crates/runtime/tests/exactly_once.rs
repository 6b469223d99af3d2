//! The example's keyed job (`examples/keyed_job.rs`) failed midway — at every word, with
//! and without a checkpoint in flight — and restored from the latest completed checkpoint:
//! the committed output holds every count exactly once. A crash between a checkpoint's
//! completion and its sink's commit, committed by the restore. A savepoint round trip through
//! the coordinator, and its refusal of checkpoints without a store.

#[path = "../examples/keyed_job.rs"]
mod keyed_job;

use keyed_job::{committed, run, TEXT};
use statekit_runtime::statekit_checkpoint::SnapshotWriter;
use statekit_runtime::statekit_core::storage::LocalStorage;
use statekit_runtime::statekit_core::ErrorKind;
use statekit_runtime::statekit_snapshot::Snapshot;
use statekit_runtime::*;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// `(w,1)` … `(w,n_w)` for every word of `text`, sorted.
fn exactly_once(text: &str) -> Vec<String> {
    let mut seen: HashMap<&str, u32> = HashMap::new();
    let mut want: Vec<String> = text
        .split(' ')
        .map(|w| {
            let n = seen.entry(w).or_insert(0);
            *n += 1;
            format!("({w},{n})")
        })
        .collect();
    want.sort();
    want
}

fn words() -> u64 {
    TEXT.split(' ').count() as u64
}

#[test]
fn a_failure_at_any_word_then_a_restore_commits_every_count_once() {
    for every in [1, 4, 5] {
        for fail_at in 1..=words() {
            let dir = tempfile::tempdir().expect("tempdir");
            let failed = run(dir.path(), TEXT, every, Guarantee::ExactlyOnce, Some(fail_at));
            let e = failed.expect_err("the injected failure");
            assert!(e.to_string().contains("injected failure"), "{e}");
            // A checkpoint the failing word triggered never completed (the coordinator went
            // with the failure): the restore goes back to an earlier one.
            let latest = open_latest_checkpoint(&dir.path().join("ck")).expect("latest");
            let latest = latest.map_or(0, |r| r.metadata().checkpoint_id);
            assert!(
                latest <= (fail_at - 1) / every,
                "every {every}, failed at {fail_at}: {latest}"
            );
            run(dir.path(), TEXT, every, Guarantee::ExactlyOnce, None).expect("restored run");
            assert_eq!(
                committed(dir.path()).expect("output"),
                exactly_once(TEXT),
                "every {every}, failed at {fail_at}"
            );
        }
    }
}

#[test]
fn several_failures_in_a_row_still_commit_every_count_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    for fail_at in [6, 3, 5, 2] {
        assert!(run(dir.path(), TEXT, 3, Guarantee::ExactlyOnce, Some(fail_at)).is_err());
    }
    run(dir.path(), TEXT, 3, Guarantee::ExactlyOnce, None).expect("restored run");
    assert_eq!(committed(dir.path()).expect("output"), exactly_once(TEXT));
}

/// The check bites: without the two-phase commit, the replay after a failure duplicates
/// output.
#[test]
fn at_least_once_duplicates_after_a_failure() {
    let dir = tempfile::tempdir().expect("tempdir");
    assert!(run(dir.path(), TEXT, 4, Guarantee::AtLeastOnce, Some(10)).is_err());
    run(dir.path(), TEXT, 4, Guarantee::AtLeastOnce, None).expect("restored run");
    let lines = committed(dir.path()).expect("output");
    assert!(lines.len() > exactly_once(TEXT).len(), "{lines:?}");
}

/// A job of one source: its offset state only.
struct SourceOnly(SourceOffsets);

impl Checkpointed for SourceOnly {
    fn snapshot(&mut self, w: &SnapshotWriter, finished: bool) -> Result<AsyncSnapshot, RuntimeError> {
        w.register_operator("source", 1, 128)?;
        let mut part = AsyncSnapshot::new();
        part.push(
            SubtaskSnapshot::new("source", 0)
                .operator_state(self.0.snapshot())
                .finished(finished),
        );
        Ok(part)
    }
    fn checkpoint_complete(&mut self, _: u64, _: &[u64]) -> Result<(), RuntimeError> {
        Ok(())
    }
    fn checkpoint_aborted(&mut self, _: u64) -> Result<(), RuntimeError> {
        Ok(())
    }
}

#[test]
fn a_savepoint_without_checkpoints_restores_the_source_offset() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut job = SourceOnly(SourceOffsets::new().expect("offsets"));
    job.0.set("in", 42).expect("set");
    let mut coordinator = CheckpointCoordinator::savepoints_only("0123456789abcdef", 7);
    let e = coordinator.trigger(&mut job).expect_err("no store");
    assert_eq!(e.kind(), ErrorKind::Caller);
    let storage = Arc::new(LocalStorage::new(dir.path()));
    let sp = coordinator.savepoint(&mut job, storage, true).expect("savepoint");
    assert_eq!(sp.id, 7);
    let reader = Snapshot::open(Path::new(&dir.path().join(&sp.dir))).expect("open");
    assert_eq!(reader.metadata().checkpoint_id, 7);
    let mut restored = SourceOffsets::restore(&reader, "source", 1, 0).expect("restore");
    assert_eq!(restored.get("in").expect("get"), Some(42));
    assert!(unclaimed_operators(&reader, &["source"]).is_empty());
    assert_eq!(unclaimed_operators(&reader, &["other"]), ["source"]);
}

/// A job of one exactly-once sink whose notification can fail before the sink commits: a
/// crash between a checkpoint's completion and its commit.
struct SinkJob {
    sink: FileSink,
    crash_before_commit: bool,
}

impl Checkpointed for SinkJob {
    fn snapshot(&mut self, w: &SnapshotWriter, _: bool) -> Result<AsyncSnapshot, RuntimeError> {
        w.register_operator("sink", 1, 128)?;
        let mut part = AsyncSnapshot::new();
        part.push(SubtaskSnapshot::new("sink", 0).operator_state(self.sink.snapshot_state(w.checkpoint_id())?));
        Ok(part)
    }
    fn checkpoint_complete(&mut self, id: u64, _: &[u64]) -> Result<(), RuntimeError> {
        if self.crash_before_commit {
            return Err(RuntimeError::job("crash before the commit"));
        }
        self.sink.commit_up_to(id).map(drop)
    }
    fn checkpoint_aborted(&mut self, _: u64) -> Result<(), RuntimeError> {
        Ok(())
    }
}

/// Checkpoint 1 completes, the job dies before its sink commits: the restore commits what
/// checkpoint 1 recorded as pre-committed (and aborts what came after it).
#[test]
fn a_crash_between_completion_and_commit_is_committed_by_the_restore() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ck, out) = (dir.path().join("ck"), dir.path().join("out"));
    let store = |id: &str| {
        let storage = Arc::new(LocalStorage::new(&ck));
        statekit_runtime::statekit_checkpoint::CheckpointStore::open(storage, id, 2).expect("store")
    };
    let sink = FileSink::new(&out, 0, "run1", Guarantee::ExactlyOnce, 1).expect("sink");
    let mut job = SinkJob {
        sink,
        crash_before_commit: true,
    };
    let mut coordinator = CheckpointCoordinator::new(store("00000000000000000000000000000001"), 1);
    job.sink.write_line("(a,1)").expect("write");
    let e = coordinator.trigger_final(&mut job).expect_err("the crash");
    assert!(e.to_string().contains("crash before the commit"), "{e}");
    job.sink.write_line("(b,1)").expect("write after the checkpoint");
    job.sink
        .snapshot_state(2)
        .expect("pre-commit of a checkpoint that never completes");
    drop(job);
    assert!(committed_files(&out).is_empty(), "nothing committed before the restore");

    let reader = open_latest_checkpoint(&ck)
        .expect("latest")
        .expect("checkpoint 1 completed");
    assert_eq!(reader.metadata().checkpoint_id, 1);
    let pending = restore_pending_commits(&reader, "sink", 1).expect("pending");
    assert_eq!(pending.len(), 1, "{pending:?}");
    let recovery = FileSink::recover(&out, &pending).expect("recover");
    assert_eq!((recovery.committed, recovery.aborted), (1, 1));
    let lines: Vec<String> = committed_files(&out)
        .iter()
        .flat_map(|p| {
            std::fs::read_to_string(p)
                .expect("read")
                .lines()
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(lines, ["(a,1)"]);
}

fn committed_files(out: &Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(out)
        .expect("list")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_file())
        .collect()
}
