//! The checkpoint coordinator: triggers checkpoints between two records, runs their
//! asynchronous part on background threads, completes them in order and notifies the job;
//! takes savepoints; the store keeps the retained number of completed checkpoints.

use crate::{AsyncSnapshot, RuntimeError};
use statekit_checkpoint::{CheckpointStore, SnapshotWriter};
use statekit_core::storage::Storage;
use statekit_snapshot::Snapshot;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a job does for its checkpoints; [`CheckpointCoordinator`] calls it.
///
/// A checkpoint `N` is taken between two records, so state, source offsets and sink output
/// agree (as with aligned barriers):
/// 1. [`Checkpointed::snapshot`], the *synchronous part*: registers the job's operators on
///    the writer, pre-commits every sink, cuts every keyed backend ([`crate::KeyedCut::take`])
///    and copies operator state, returning what is left to write;
/// 2. the *asynchronous part* ([`AsyncSnapshot::write`]) runs on a thread of its own while
///    the job processes more records;
/// 3. [`CheckpointStore::complete`] commits `_metadata` atomically — the checkpoint exists —
///    and deletes the checkpoints beyond the retained number;
/// 4. [`Checkpointed::checkpoint_complete`], *notify complete*: sinks commit their
///    transactions up to `N`, backends release what the subsumed checkpoints held.
///
/// A checkpoint that fails is aborted (its directory and new shared files deleted) and the
/// job hears [`Checkpointed::checkpoint_aborted`].
pub trait Checkpointed {
    /// The synchronous part of snapshot `writer` (a checkpoint or a savepoint, id
    /// [`SnapshotWriter::checkpoint_id`]); `finished` says the job's input has ended (a final
    /// snapshot), which the source records.
    fn snapshot(&mut self, writer: &SnapshotWriter, finished: bool) -> Result<AsyncSnapshot, RuntimeError>;

    /// Checkpoint `id` (or savepoint `id`) is durable; `subsumed` are the checkpoints it
    /// replaced in the store.
    fn checkpoint_complete(&mut self, id: u64, subsumed: &[u64]) -> Result<(), RuntimeError>;

    /// Checkpoint `id` failed and was deleted.
    fn checkpoint_aborted(&mut self, id: u64) -> Result<(), RuntimeError>;
}

/// A checkpoint between its synchronous part and its completion.
struct InFlight {
    id: u64,
    task: std::thread::JoinHandle<(SnapshotWriter, Result<(), RuntimeError>)>,
}

/// A savepoint written by [`CheckpointCoordinator::savepoint`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompletedSavepoint {
    /// Its id (taken from the coordinator's sequence of checkpoint ids).
    pub id: u64,
    /// Its directory, relative to the storage it was written to.
    pub dir: String,
}

/// Triggers, runs and completes the checkpoints of one job run (see [`Checkpointed`]).
pub struct CheckpointCoordinator {
    store: Option<CheckpointStore>,
    job_id: String,
    next_id: u64,
    completed: u64,
    max_concurrent: usize,
    in_flight: VecDeque<InFlight>,
    last_trigger: Instant,
}

impl std::fmt::Debug for CheckpointCoordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckpointCoordinator")
            .field("job_id", &self.job_id)
            .field("next_id", &self.next_id)
            .field("completed", &self.completed)
            .field("in_flight", &self.in_flight.len())
            .finish()
    }
}

impl CheckpointCoordinator {
    /// Checkpoints into `store` (its retention applies), the first with id `first_id` — one
    /// more than the id of the snapshot the job was restored from, or 1.
    pub fn new(store: CheckpointStore, first_id: u64) -> Self {
        let job_id = store.job_id().to_string();
        Self::with(Some(store), job_id, first_id)
    }

    /// A coordinator that takes savepoints only (a job without checkpoints): every
    /// [`CheckpointCoordinator::trigger`] is refused ([`RuntimeError::CheckpointsOff`]).
    pub fn savepoints_only(job_id: &str, first_id: u64) -> Self {
        Self::with(None, job_id.to_string(), first_id)
    }

    fn with(store: Option<CheckpointStore>, job_id: String, first_id: u64) -> Self {
        CheckpointCoordinator {
            store,
            job_id,
            next_id: first_id,
            completed: 0,
            max_concurrent: 1,
            in_flight: VecDeque::new(),
            last_trigger: Instant::now(),
        }
    }

    /// Lets up to `n` checkpoints run their asynchronous part at once (Flink's
    /// `execution.checkpointing.max-concurrent-checkpoints`; default 1, at least 1).
    pub fn with_max_concurrent(mut self, n: usize) -> Self {
        self.max_concurrent = n.max(1);
        self
    }

    /// The checkpoint store (`None` for [`CheckpointCoordinator::savepoints_only`]).
    pub fn store(&self) -> Option<&CheckpointStore> {
        self.store.as_ref()
    }

    /// The id the next checkpoint or savepoint gets.
    pub fn next_id(&self) -> u64 {
        self.next_id
    }

    /// How many checkpoints this coordinator completed.
    pub fn completed(&self) -> u64 {
        self.completed
    }

    /// How many checkpoints are between their synchronous part and completion.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Time since the last checkpoint was triggered (or since the coordinator was made): for
    /// a checkpoint interval.
    pub fn since_last_trigger(&self) -> Duration {
        self.last_trigger.elapsed()
    }

    /// Takes the next checkpoint: its synchronous part now, its asynchronous part on a thread
    /// of its own while the job goes on. Beyond the concurrency limit the oldest running one
    /// is completed first. Returns the checkpoint's id.
    pub fn trigger<J: Checkpointed + ?Sized>(&mut self, job: &mut J) -> Result<u64, RuntimeError> {
        self.start(job, false)
    }

    /// Takes a final checkpoint (the source records that its input ended) and completes every
    /// running checkpoint, this one included, before returning.
    pub fn trigger_final<J: Checkpointed + ?Sized>(&mut self, job: &mut J) -> Result<u64, RuntimeError> {
        let id = self.start(job, true)?;
        self.drain(job)?;
        Ok(id)
    }

    fn start<J: Checkpointed + ?Sized>(&mut self, job: &mut J, finished: bool) -> Result<u64, RuntimeError> {
        while self.in_flight.len() >= self.max_concurrent {
            self.complete_oldest(job)?;
        }
        let store = self.store.as_ref().ok_or(RuntimeError::CheckpointsOff)?;
        let id = self.next_id;
        self.next_id += 1;
        self.last_trigger = Instant::now();
        let writer = store.begin(id)?;
        let part = match job.snapshot(&writer, finished) {
            Ok(p) => p,
            Err(e) => return Err(self.abort(job, writer, id, e)),
        };
        let task = std::thread::Builder::new()
            .name(format!("checkpoint-{id}"))
            .spawn(move || {
                let r = part.write(&writer);
                (writer, r)
            })
            .map_err(RuntimeError::io("cannot start a checkpoint thread"))?;
        self.in_flight.push_back(InFlight { id, task });
        Ok(id)
    }

    /// Completes every checkpoint whose asynchronous part has finished, oldest first, without
    /// waiting; returns how many completed.
    pub fn poll<J: Checkpointed + ?Sized>(&mut self, job: &mut J) -> Result<usize, RuntimeError> {
        let mut n = 0;
        while self.in_flight.front().is_some_and(|f| f.task.is_finished()) {
            self.complete_oldest(job)?;
            n += 1;
        }
        Ok(n)
    }

    /// Waits for every running checkpoint and completes it.
    pub fn drain<J: Checkpointed + ?Sized>(&mut self, job: &mut J) -> Result<(), RuntimeError> {
        while !self.in_flight.is_empty() {
            self.complete_oldest(job)?;
        }
        Ok(())
    }

    /// Waits for the oldest running checkpoint and completes it (or aborts it and fails).
    fn complete_oldest<J: Checkpointed + ?Sized>(&mut self, job: &mut J) -> Result<(), RuntimeError> {
        let Some(f) = self.in_flight.pop_front() else {
            return Ok(());
        };
        let (writer, result) = f
            .task
            .join()
            .map_err(|_| RuntimeError::CheckpointPanicked { id: f.id })?;
        if let Err(e) = result {
            // Nothing of a failed checkpoint stays: its directory and new shared files go.
            return Err(self.abort(job, writer, f.id, e));
        }
        let store = self.store.as_ref().ok_or(RuntimeError::CheckpointsOff)?;
        let (done, subsumed) = store.complete(writer)?;
        self.completed += 1;
        job.checkpoint_complete(done.id, &subsumed)
    }

    /// Deletes checkpoint `id`, tells the job, and returns the error that failed it.
    fn abort<J: Checkpointed + ?Sized>(
        &mut self,
        job: &mut J,
        writer: SnapshotWriter,
        id: u64,
        cause: RuntimeError,
    ) -> RuntimeError {
        let aborted = match self.store.as_ref() {
            Some(store) => store.abort(writer).map_err(RuntimeError::from),
            None => Ok(()),
        };
        match aborted.and_then(|()| job.checkpoint_aborted(id)) {
            Ok(()) => RuntimeError::CheckpointFailed {
                id,
                source: Box::new(cause),
            },
            Err(e) => e,
        }
    }

    /// Takes a savepoint into a new directory `savepoint-<job6>-<random>` of `storage`:
    /// synchronous and asynchronous part at once (after the running checkpoints completed),
    /// then the job is notified as of a completed checkpoint. Savepoints are self-contained
    /// and never deleted by the store. Needs no checkpoint store.
    pub fn savepoint<J: Checkpointed + ?Sized>(
        &mut self,
        job: &mut J,
        storage: Arc<dyn Storage>,
        finished: bool,
    ) -> Result<CompletedSavepoint, RuntimeError> {
        self.drain(job)?;
        let id = self.next_id;
        self.next_id += 1;
        let writer = SnapshotWriter::new_savepoint(storage, "", &self.job_id, id)?;
        let dir = writer.dir().to_string();
        job.snapshot(&writer, finished)?.write(&writer)?;
        writer.finish()?;
        job.checkpoint_complete(id, &[])?;
        Ok(CompletedSavepoint { id, dir })
    }

    /// Tells the store that the job was restored from `snapshot` (statekit's own files are
    /// then owned as `mode` says: claimed, shared or left alone; another family's files are
    /// never the store's). Call before the first checkpoint.
    pub fn restored(&self, snapshot: &Snapshot, mode: statekit_checkpoint::RestoreMode) -> Result<(), RuntimeError> {
        if let (Some(store), Some(files)) = (&self.store, snapshot.statekit_files()) {
            store.restored(files, mode)?;
        }
        Ok(())
    }
}

/// The operators of `snapshot` that are not among `uids` (the job's operators): their state
/// would be lost by a restore. Flink refuses such a restore unless allowed
/// (`--allowNonRestoredState`).
pub fn unclaimed_operators<'r>(snapshot: &'r Snapshot, uids: &[&str]) -> Vec<&'r str> {
    snapshot
        .metadata()
        .operators
        .iter()
        .map(|o| o.uid.as_str())
        .filter(|u| !uids.contains(u))
        .collect()
}

/// The newest complete checkpoint of any job under the checkpoint base directory `base`,
/// opened (its id is [`Snapshot::metadata`]`().checkpoint_id`); `None` when there is none
/// yet (a first start).
pub fn open_latest_checkpoint(base: &std::path::Path) -> Result<Option<Snapshot>, RuntimeError> {
    match statekit_snapshot::latest_checkpoint(base)? {
        Some((_, path)) => Ok(Some(Snapshot::open(path)?)),
        None => Ok(None),
    }
}
