//! The two-phase-commit sink protocol, and a file sink with the three delivery guarantees.
//!
//! **The protocol** ([`TwoPhaseCommitSink`]): output written between checkpoints `N-1` and
//! `N` goes into a transaction. At checkpoint `N` the transaction is made durable and named
//! in the sink's operator state `pending-commits` (*pre-commit*,
//! [`TwoPhaseCommitSink::snapshot_state`]). When checkpoint `N` completes, every transaction
//! up to it is committed (*commit on notify*). A job restored from checkpoint `N` commits the
//! transactions recorded in it ([`restore_pending_commits`], then the sink's own recovery such
//! as [`FileSink::recover`]) — a crash between completion and commit loses nothing — and
//! aborts every other pending transaction, so committed output never holds a record twice or
//! misses one.
//!
//! **[`FileSink`]**, exactly-once: lines go to a transaction file
//! `DIR/.pending/part-<N>-<subtask>-<run>`, fsynced at pre-commit and renamed to
//! `DIR/part-<N>-<subtask>-<run>` at commit. At-least-once and at-most-once write visible part
//! files directly; a restart replays (duplicates) or skips (loss) records.

use crate::RuntimeError;
use statekit_core::{
    Codec, OperatorStateDescriptor, OperatorStateMode, OperatorStateSnapshot, OperatorStateStore, TypeSchema,
};
use statekit_snapshot::Snapshot;
use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// Name of the hidden directory holding uncommitted transactions.
pub const PENDING_DIR: &str = ".pending";

/// The operator state a two-phase-commit sink keeps: `pending-commits`, a list of the
/// pre-committed, uncommitted transactions (UTF-8, one per element).
pub fn pending_commits_descriptor() -> OperatorStateDescriptor {
    OperatorStateDescriptor {
        name: "pending-commits".into(),
        mode: OperatorStateMode::List,
        value_schema: TypeSchema::Utf8,
        key_schema: None,
    }
}

/// The sink's operator state holding `pending` ([`pending_commits_descriptor`]).
pub fn pending_commits_state(pending: &[String]) -> Result<OperatorStateSnapshot, RuntimeError> {
    let mut st = OperatorStateStore::new();
    let h = st.register(pending_commits_descriptor())?;
    st.list_update(h, pending.iter().map(|n| n.to_bytes()).collect())?;
    Ok(st.snapshot())
}

/// Every pending transaction `snapshot` recorded for sink operator `uid` (all its
/// subtasks, redistributed to `parallelism`); none when the snapshot has no such operator.
pub fn restore_pending_commits(snapshot: &Snapshot, uid: &str, parallelism: u32) -> Result<Vec<String>, RuntimeError> {
    let mut pending = Vec::new();
    if snapshot.metadata().operator(uid).is_none() {
        return Ok(pending);
    }
    for snap in snapshot.operator_states(uid, parallelism)? {
        let mut s = OperatorStateStore::from_snapshot(snap);
        let h = s.register(pending_commits_descriptor())?;
        for e in s.list(h)? {
            pending.push(String::decode(e)?);
        }
    }
    Ok(pending)
}

/// A sink that takes part in checkpoints with a two-phase commit (see the module docs).
pub trait TwoPhaseCommitSink {
    /// Checkpoint `checkpoint_id` is being taken: make the open transaction durable and
    /// return every pre-committed, uncommitted transaction — the sink's state.
    fn pre_commit(&mut self, checkpoint_id: u64) -> Result<Vec<String>, RuntimeError>;

    /// Checkpoint `checkpoint_id` completed: commit every transaction up to it. Returns the
    /// transactions found committed before whose output has since gone.
    fn commit_up_to(&mut self, checkpoint_id: u64) -> Result<Vec<LostCommit>, RuntimeError>;

    /// [`TwoPhaseCommitSink::pre_commit`] as the sink's operator state
    /// ([`pending_commits_state`]), for the synchronous part of checkpoint `checkpoint_id`.
    fn snapshot_state(&mut self, checkpoint_id: u64) -> Result<OperatorStateSnapshot, RuntimeError> {
        pending_commits_state(&self.pre_commit(checkpoint_id)?)
    }
}

/// The delivery guarantee of a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(clippy::enum_variant_names)] // the names are the standard terms
pub enum Guarantee {
    /// Checkpoints + two-phase-commit sink: no loss, no duplicates.
    ExactlyOnce,
    /// Checkpoints, sink writes directly: no loss, duplicates after a failure.
    AtLeastOnce,
    /// No checkpoints; the source commits its position ahead of processing: loss after a failure.
    AtMostOnce,
}

/// A transaction committed earlier whose output file no longer exists (someone removed it):
/// nothing to redo, but that output is gone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LostCommit {
    /// The transaction (file name).
    pub name: String,
    /// Where its committed output was.
    pub path: PathBuf,
}

impl std::fmt::Display for LostCommit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "transaction {} was committed before but {} no longer exists: that output was removed",
            self.name,
            self.path.display()
        )
    }
}

/// What [`FileSink::recover`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Restored transactions committed (or found committed already).
    pub committed: usize,
    /// Pending transactions of the directory deleted (never pre-committed in the snapshot).
    pub aborted: usize,
    /// Restored transactions whose committed output has gone.
    pub lost: Vec<LostCommit>,
}

struct Txn {
    checkpoint_id: u64,
    name: String,
    out: BufWriter<File>,
}

/// One file sink subtask: lines into part files of a directory (see the module docs).
pub struct FileSink {
    dir: PathBuf,
    subtask: u32,
    run: String,
    guarantee: Guarantee,
    next_checkpoint: u64,
    current: Option<Txn>,
    /// Pre-committed transactions (file names) not yet committed, oldest first.
    pending: Vec<(u64, String)>,
    direct_seq: u64,
}

impl std::fmt::Debug for FileSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileSink")
            .field("dir", &self.dir)
            .field("subtask", &self.subtask)
            .field("guarantee", &self.guarantee)
            .field("pending", &self.pending)
            .finish()
    }
}

fn sync_dir(dir: &Path) -> Result<(), RuntimeError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(RuntimeError::io(format!("cannot fsync {}", dir.display())))
}

fn create_output(dir: &Path) -> Result<(), RuntimeError> {
    fs::create_dir_all(dir.join(PENDING_DIR)).map_err(RuntimeError::io(format!(
        "cannot create output directory {}",
        dir.display()
    )))
}

impl FileSink {
    /// Sink subtask `subtask` writing into `dir`; `run` tags its file names (files of
    /// several runs of a job do not collide); `next_checkpoint` is the id of the next
    /// checkpoint (the transaction open now belongs to it).
    pub fn new(
        dir: &Path,
        subtask: u32,
        run: &str,
        guarantee: Guarantee,
        next_checkpoint: u64,
    ) -> Result<Self, RuntimeError> {
        create_output(dir)?;
        Ok(FileSink {
            dir: dir.to_path_buf(),
            subtask,
            run: run.to_string(),
            guarantee,
            next_checkpoint,
            current: None,
            pending: Vec::new(),
            direct_seq: 0,
        })
    }

    fn part_name(&self, seq: u64) -> String {
        format!("part-{seq:010}-{:03}-{}", self.subtask, self.run)
    }

    fn open_file(&mut self) -> Result<Txn, RuntimeError> {
        let (seq, path) = match self.guarantee {
            Guarantee::ExactlyOnce => {
                let name = self.part_name(self.next_checkpoint);
                (self.next_checkpoint, self.dir.join(PENDING_DIR).join(name))
            }
            _ => {
                self.direct_seq += 1;
                let name = format!("part-direct-{:03}-{}-{:06}", self.subtask, self.run, self.direct_seq);
                (self.next_checkpoint, self.dir.join(name))
            }
        };
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(RuntimeError::io(format!("cannot open {}", path.display())))?;
        // Transactions buffer freely (nothing is visible before the commit); direct writes
        // reach the file line by line, as a non-transactional sink does.
        let capacity = if self.guarantee == Guarantee::ExactlyOnce {
            64 * 1024
        } else {
            0
        };
        Ok(Txn {
            checkpoint_id: seq,
            name: path
                .file_name()
                .map(|n| n.to_string_lossy().to_string())
                .unwrap_or_default(),
            out: BufWriter::with_capacity(capacity, file),
        })
    }

    /// Writes one output line.
    pub fn write_line(&mut self, line: &str) -> Result<(), RuntimeError> {
        if self.current.is_none() {
            self.current = Some(self.open_file()?);
        }
        if let Some(txn) = self.current.as_mut() {
            txn.out.write_all(line.as_bytes())?;
            txn.out.write_all(b"\n")?;
        }
        Ok(())
    }

    /// Flushes (at-least-once / at-most-once runs that end without a checkpoint).
    pub fn flush(&mut self) -> Result<(), RuntimeError> {
        if let Some(txn) = self.current.as_mut() {
            txn.out.flush()?;
        }
        Ok(())
    }

    /// Commits one pre-committed transaction of `dir` (idempotent: an already committed one
    /// is skipped; one committed before and since removed is returned as lost).
    pub fn commit(dir: &Path, name: &str) -> Result<Option<LostCommit>, RuntimeError> {
        if name.contains('/') || name.starts_with('.') {
            return Err(RuntimeError::InvalidTransaction {
                entry: name.to_string(),
                why: String::new(),
            });
        }
        let from = dir.join(PENDING_DIR).join(name);
        let to = dir.join(name);
        if from.exists() {
            fs::rename(&from, &to).map_err(RuntimeError::io(format!("cannot commit {}", from.display())))?;
        } else if !to.exists() {
            // Neither pending nor committed where it was written: committed earlier and since
            // removed by someone else (a transaction leaves `.pending/` only by its rename).
            return Ok(Some(LostCommit {
                name: name.to_string(),
                path: to,
            }));
        }
        Ok(None)
    }

    /// Recovery at job start: commits the transactions a restored snapshot recorded — each
    /// in the directory it was written to (the absolute pending path the state holds; a bare
    /// name, as older snapshots hold, in `dir`) — then aborts (deletes) every other pending
    /// transaction of `dir`.
    pub fn recover(dir: &Path, restored_pending: &[String]) -> Result<Recovery, RuntimeError> {
        create_output(dir)?;
        let mut lost = Vec::new();
        for entry in restored_pending {
            let (output, name) = transaction_place(dir, entry)?;
            lost.extend(Self::commit(output, &name)?);
        }
        let mut aborted = 0;
        let pending_dir = dir.join(PENDING_DIR);
        let list = RuntimeError::io(format!("cannot list {}", pending_dir.display()));
        for e in fs::read_dir(&pending_dir).map_err(list)? {
            let e = e?;
            fs::remove_file(e.path()).map_err(RuntimeError::io(format!("cannot abort {}", e.path().display())))?;
            aborted += 1;
        }
        sync_dir(dir)?;
        Ok(Recovery {
            committed: restored_pending.len(),
            aborted,
            lost,
        })
    }
}

/// The output directory and name of a transaction of the sink state: a bare name is in
/// `dir`; anything else must be an absolute `<output>/.pending/<name>`.
fn transaction_place<'e>(dir: &'e Path, entry: &'e str) -> Result<(&'e Path, String), RuntimeError> {
    if !entry.contains('/') {
        return Ok((dir, entry.to_string()));
    }
    let invalid = |why: &str| RuntimeError::InvalidTransaction {
        entry: entry.to_string(),
        why: why.to_string(),
    };
    let p = Path::new(entry);
    let (Some(name), Some(pending)) = (p.file_name(), p.parent()) else {
        return Err(invalid(""));
    };
    let output = pending
        .parent()
        .filter(|_| p.is_absolute() && pending.file_name() == Some(PENDING_DIR.as_ref()));
    let Some(output) = output else {
        return Err(invalid(&format!(": not <output>/{PENDING_DIR}/<name>")));
    };
    Ok((output, name.to_string_lossy().to_string()))
}

impl TwoPhaseCommitSink for FileSink {
    /// Records every pre-committed transaction as the absolute path of its pending file — as
    /// Flink's file sink records its committables — so a restore commits each where it was
    /// written, even when the restored job writes to another directory.
    fn pre_commit(&mut self, checkpoint_id: u64) -> Result<Vec<String>, RuntimeError> {
        if let Some(mut txn) = self.current.take() {
            txn.out.flush()?;
            txn.out.get_ref().sync_all()?;
            if self.guarantee == Guarantee::ExactlyOnce {
                self.pending.push((txn.checkpoint_id, txn.name));
            }
        }
        self.next_checkpoint = checkpoint_id + 1;
        let pending = std::path::absolute(self.dir.join(PENDING_DIR))
            .map_err(RuntimeError::io(format!("cannot resolve {}", self.dir.display())))?;
        Ok(self
            .pending
            .iter()
            .map(|(_, n)| pending.join(n).display().to_string())
            .collect())
    }

    fn commit_up_to(&mut self, checkpoint_id: u64) -> Result<Vec<LostCommit>, RuntimeError> {
        let (done, keep): (Vec<_>, Vec<_>) = self.pending.drain(..).partition(|(id, _)| *id <= checkpoint_id);
        self.pending = keep;
        let mut lost = Vec::new();
        for (_, name) in &done {
            lost.extend(Self::commit(&self.dir, name)?);
        }
        if !done.is_empty() {
            sync_dir(&self.dir)?;
        }
        Ok(lost)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_committed(dir: &Path) -> Vec<String> {
        let mut names: Vec<_> = fs::read_dir(dir)
            .expect("list")
            .filter_map(|e| e.ok())
            .filter(|e| e.path().is_file())
            .map(|e| e.path())
            .collect();
        names.sort();
        names
            .iter()
            .flat_map(|p| {
                fs::read_to_string(p)
                    .expect("read")
                    .lines()
                    .map(String::from)
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    fn recover(dir: &Path, state: &[String]) -> Result<(usize, usize), RuntimeError> {
        FileSink::recover(dir, state).map(|r| (r.committed, r.aborted))
    }

    #[test]
    fn two_phase_commit() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut s = FileSink::new(tmp.path(), 0, "r1", Guarantee::ExactlyOnce, 1).expect("sink");
        s.write_line("(a,1)").expect("write");
        assert!(
            read_committed(tmp.path()).is_empty(),
            "nothing visible before the checkpoint"
        );
        let state = s.pre_commit(1).expect("pre-commit");
        assert_eq!(state.len(), 1);
        s.write_line("(a,2)").expect("write");
        assert!(
            read_committed(tmp.path()).is_empty(),
            "nothing visible before completion"
        );
        s.commit_up_to(1).expect("commit");
        assert_eq!(read_committed(tmp.path()), vec!["(a,1)"]);
        // Crash now: (a,2) is pending for checkpoint 2, which never completes.
        drop(s);
        let (committed, aborted) = recover(tmp.path(), &[]).expect("recover");
        assert_eq!((committed, aborted), (0, 1));
        assert_eq!(read_committed(tmp.path()), vec!["(a,1)"]);
    }

    #[test]
    fn recovery_commits_pre_committed() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut s = FileSink::new(tmp.path(), 0, "r1", Guarantee::ExactlyOnce, 1).expect("sink");
        s.write_line("(b,1)").expect("write");
        let state = s.pre_commit(1).expect("pre-commit");
        // Crash after checkpoint 1 completed but before the rename.
        drop(s);
        recover(tmp.path(), &state).expect("recover");
        assert_eq!(read_committed(tmp.path()), vec!["(b,1)"]);
        // Idempotent.
        recover(tmp.path(), &state).expect("recover again");
        assert_eq!(read_committed(tmp.path()), vec!["(b,1)"]);
        assert!(
            recover(tmp.path(), &["part-missing".into()]).is_ok(),
            "moved-away output is not an error"
        );
        assert!(recover(tmp.path(), &["../escape".into()]).is_err());
        assert!(
            recover(tmp.path(), &["/etc/passwd".into()]).is_err(),
            "not a pending file"
        );
        assert!(recover(tmp.path(), &["relative/.pending/x".into()]).is_err());
    }

    /// A restore into another output directory commits the restored transactions where they
    /// were written (the state records their paths), and aborts only its own directory's.
    #[test]
    fn recovery_into_another_directory_commits_where_written() {
        let old = tempfile::tempdir().expect("tempdir");
        let new = tempfile::tempdir().expect("tempdir");
        let mut s = FileSink::new(old.path(), 0, "r1", Guarantee::ExactlyOnce, 1).expect("sink");
        s.write_line("(c,1)").expect("write");
        let state = s.pre_commit(1).expect("pre-commit");
        assert!(
            state[0].starts_with('/') && state[0].contains("/.pending/"),
            "{state:?}"
        );
        drop(s);
        let (committed, aborted) = recover(new.path(), &state).expect("recover");
        assert_eq!((committed, aborted), (1, 0));
        assert_eq!(read_committed(old.path()), vec!["(c,1)"]);
        assert!(read_committed(new.path()).is_empty());
    }

    /// A committed transaction whose output was removed is reported, not an error.
    #[test]
    fn removed_output_is_reported_as_lost() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let r = FileSink::recover(tmp.path(), &["part-missing".into()]).expect("recover");
        assert_eq!(r.lost.len(), 1);
        assert!(r.lost[0].to_string().contains("part-missing was committed before"));
    }

    /// The sink's state round-trips through operator state.
    #[test]
    fn pending_commits_state_round_trips() {
        let state = pending_commits_state(&["/o/.pending/a".into(), "b".into()]).expect("state");
        let mut st = OperatorStateStore::from_snapshot(state);
        let h = st.register(pending_commits_descriptor()).expect("register");
        let got: Vec<String> = st
            .list(h)
            .expect("list")
            .iter()
            .map(|e| String::decode(e).expect("decode"))
            .collect();
        assert_eq!(got, ["/o/.pending/a", "b"]);
    }
}
