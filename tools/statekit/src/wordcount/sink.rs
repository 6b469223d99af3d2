//! A file sink with the three delivery guarantees.
//!
//! **Exactly-once** is a two-phase commit tied to checkpoints. Lines written between
//! checkpoint N-1 and N go to a transaction file `DIR/.pending/part-<N>-<subtask>-<run>`. At
//! checkpoint N the file is flushed and fsynced and its name is stored in the sink's operator
//! state (*pre-commit*). When checkpoint N completes, the file is renamed to
//! `DIR/part-<N>-<subtask>-<run>` (*commit*). A job restored from checkpoint N commits the
//! transactions recorded in it (a crash between completion and rename loses nothing), then
//! deletes every other pending file (transactions of checkpoints that never completed), so
//! committed output never holds a line twice or misses one.
//!
//! **At-least-once** and **at-most-once** write visible part files directly; a restart
//! replays (duplicates) or skips (loss) records.

use anyhow::{bail, Context, Result};
use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// Name of the hidden directory holding uncommitted transactions.
pub const PENDING_DIR: &str = ".pending";

/// The delivery guarantee of a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
#[allow(clippy::enum_variant_names)] // the names are the standard terms
pub enum Guarantee {
    /// Checkpoints + two-phase-commit sink: no loss, no duplicates.
    ExactlyOnce,
    /// Checkpoints, sink writes directly: no loss, duplicates after a failure.
    AtLeastOnce,
    /// No checkpoints; the source commits its position ahead of processing: loss after a failure.
    AtMostOnce,
}

struct Txn {
    checkpoint_id: u64,
    name: String,
    out: BufWriter<File>,
}

/// One sink subtask.
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

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("cannot fsync {}", dir.display()))
}

impl FileSink {
    /// A sink subtask writing into `dir`; `next_checkpoint` is the id of the next checkpoint.
    pub fn new(dir: &Path, subtask: u32, run: &str, guarantee: Guarantee, next_checkpoint: u64) -> Result<Self> {
        fs::create_dir_all(dir.join(PENDING_DIR))
            .with_context(|| format!("cannot create output directory {}", dir.display()))?;
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

    /// Writes one output line.
    pub fn write_line(&mut self, line: &str) -> Result<()> {
        if self.current.is_none() {
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
                .with_context(|| format!("cannot open {}", path.display()))?;
            self.current = Some(Txn {
                checkpoint_id: seq,
                name: path
                    .file_name()
                    .map(|n| n.to_string_lossy().to_string())
                    .unwrap_or_default(),
                // Transactions buffer freely (nothing is visible before the commit); direct
                // writes reach the file line by line, as a non-transactional sink does.
                out: BufWriter::with_capacity(
                    if self.guarantee == Guarantee::ExactlyOnce {
                        64 * 1024
                    } else {
                        0
                    },
                    file,
                ),
            });
        }
        if let Some(txn) = self.current.as_mut() {
            txn.out.write_all(line.as_bytes())?;
            txn.out.write_all(b"\n")?;
        }
        Ok(())
    }

    /// Checkpoint `checkpoint_id` is being taken: make the open transaction durable and
    /// return every pre-committed, uncommitted transaction (the sink's state) as the absolute
    /// path of its pending file — as Flink's file sink records its committables — so a
    /// restore commits each where it was written, even when the restored job writes to
    /// another directory.
    pub fn pre_commit(&mut self, checkpoint_id: u64) -> Result<Vec<String>> {
        if let Some(mut txn) = self.current.take() {
            txn.out.flush()?;
            txn.out.get_ref().sync_all()?;
            if self.guarantee == Guarantee::ExactlyOnce {
                self.pending.push((txn.checkpoint_id, txn.name));
            }
        }
        self.next_checkpoint = checkpoint_id + 1;
        let pending = std::path::absolute(self.dir.join(PENDING_DIR))
            .with_context(|| format!("cannot resolve {}", self.dir.display()))?;
        Ok(self
            .pending
            .iter()
            .map(|(_, n)| pending.join(n).display().to_string())
            .collect())
    }

    /// Checkpoint `checkpoint_id` completed: commit every transaction up to it.
    pub fn commit_up_to(&mut self, checkpoint_id: u64) -> Result<()> {
        let (done, keep): (Vec<_>, Vec<_>) = self.pending.drain(..).partition(|(id, _)| *id <= checkpoint_id);
        self.pending = keep;
        for (_, name) in &done {
            commit(&self.dir, name)?;
        }
        if !done.is_empty() {
            sync_dir(&self.dir)?;
        }
        Ok(())
    }

    /// Flushes (at-least-once / at-most-once runs that end without a checkpoint).
    pub fn flush(&mut self) -> Result<()> {
        if let Some(txn) = self.current.as_mut() {
            txn.out.flush()?;
        }
        Ok(())
    }
}

/// Commits one pre-committed transaction (idempotent: an already committed one is skipped).
pub fn commit(dir: &Path, name: &str) -> Result<()> {
    if name.contains('/') || name.starts_with('.') {
        bail!("invalid transaction name {name:?} in the sink state");
    }
    let from = dir.join(PENDING_DIR).join(name);
    let to = dir.join(name);
    if from.exists() {
        fs::rename(&from, &to).with_context(|| format!("cannot commit {}", from.display()))?;
    } else if !to.exists() {
        // Neither pending nor committed where it was written: committed earlier and since
        // removed by someone else (a transaction leaves `.pending/` only by its rename).
        // Nothing to redo, but that output is gone.
        eprintln!(
            "warning: transaction {name} was committed before but {} no longer exists: that output was removed",
            to.display()
        );
    }
    Ok(())
}

/// Recovery at job start: commits the transactions a restored snapshot recorded — each in
/// the directory it was written to (the absolute pending path the state holds; a bare name,
/// as older snapshots hold, in `dir`) — then aborts (deletes) every other pending transaction
/// of `dir`. Returns (committed, aborted).
pub fn recover(dir: &Path, restored_pending: &[String]) -> Result<(usize, usize)> {
    fs::create_dir_all(dir.join(PENDING_DIR))
        .with_context(|| format!("cannot create output directory {}", dir.display()))?;
    for entry in restored_pending {
        if !entry.contains('/') {
            commit(dir, entry)?;
            continue;
        }
        // `<output>/.pending/<name>`, absolute: nothing else is accepted from a snapshot.
        let p = Path::new(entry);
        let (Some(name), Some(pending)) = (p.file_name(), p.parent()) else {
            bail!("invalid transaction {entry:?} in the sink state");
        };
        let output = pending
            .parent()
            .filter(|_| p.is_absolute() && pending.file_name() == Some(PENDING_DIR.as_ref()));
        let Some(output) = output else {
            bail!("invalid transaction {entry:?} in the sink state: not <output>/{PENDING_DIR}/<name>");
        };
        commit(output, &name.to_string_lossy())?;
    }
    let mut aborted = 0;
    let pending_dir = dir.join(PENDING_DIR);
    for e in fs::read_dir(&pending_dir).with_context(|| format!("cannot list {}", pending_dir.display()))? {
        let e = e?;
        fs::remove_file(e.path()).with_context(|| format!("cannot abort {}", e.path().display()))?;
        aborted += 1;
    }
    sync_dir(dir)?;
    Ok((restored_pending.len(), aborted))
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
}
