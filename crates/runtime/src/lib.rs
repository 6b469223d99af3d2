//! # statekit-runtime
//!
//! What an engine that embeds statekit needs around its operators to run a job with
//! checkpoints and exactly-once output (design `docs/design/0017-runtime.md`):
//!
//! * [`CheckpointCoordinator`]: triggers checkpoints between two records, runs their
//!   *synchronous part* ([`Checkpointed::snapshot`]: backends cut with [`KeyedCut::take`],
//!   sinks pre-commit, operator state copied) and then their *asynchronous part*
//!   ([`AsyncSnapshot`]) on background threads, completes them in order through
//!   [`statekit_checkpoint::CheckpointStore::complete`] (which keeps the retained number),
//!   notifies the job of completion or abort, and takes savepoints;
//! * the two-phase-commit sink protocol ([`sink`]): [`TwoPhaseCommitSink`] pre-commits at a
//!   checkpoint into the operator state `pending-commits`, commits on notify, and a restored
//!   job commits what the snapshot recorded ([`restore_pending_commits`],
//!   [`FileSink::recover`]) and aborts the rest;
//! * source-offset bookkeeping ([`source`]): [`SourceOffsets`] keeps a source's position as
//!   operator state, so a restored job replays from exactly where its snapshot was taken.
//!
//! The lower crates are re-exported ([`statekit_core`], [`statekit_checkpoint`],
//! [`statekit_snapshot`]) so a job needs this one dependency.
//!
//! ## Usage
//!
//! A job implements [`Checkpointed`]; the coordinator calls it. Here a job with one source
//! and one exactly-once sink (the keyed part: `examples/keyed_job.rs`):
//!
//! ```
//! use statekit_runtime::statekit_checkpoint::{new_job_id, CheckpointStore, SnapshotWriter};
//! use statekit_runtime::statekit_core::storage::LocalStorage;
//! use statekit_runtime::*;
//! use std::sync::Arc;
//!
//! struct Job { offsets: SourceOffsets, sink: FileSink }
//!
//! impl Checkpointed for Job {
//!     fn snapshot(&mut self, w: &SnapshotWriter, finished: bool) -> Result<AsyncSnapshot, RuntimeError> {
//!         w.register_operator("source", 1, 128)?;
//!         w.register_operator("sink", 1, 128)?;
//!         let mut part = AsyncSnapshot::new();
//!         let sink = self.sink.snapshot_state(w.checkpoint_id())?;
//!         part.push(SubtaskSnapshot::new("sink", 0).operator_state(sink));
//!         let source = self.offsets.snapshot();
//!         part.push(SubtaskSnapshot::new("source", 0).operator_state(source).finished(finished));
//!         Ok(part)
//!     }
//!     fn checkpoint_complete(&mut self, id: u64, _: &[u64]) -> Result<(), RuntimeError> {
//!         self.sink.commit_up_to(id).map(drop)
//!     }
//!     fn checkpoint_aborted(&mut self, _: u64) -> Result<(), RuntimeError> { Ok(()) }
//! }
//!
//! # fn main() -> Result<(), RuntimeError> {
//! let dir = tempfile::tempdir()?;
//! let store = CheckpointStore::open(Arc::new(LocalStorage::new(dir.path().join("ck"))), &new_job_id(), 2)?;
//! let mut coordinator = CheckpointCoordinator::new(store, 1);
//! let out = dir.path().join("out");
//! let mut job = Job {
//!     offsets: SourceOffsets::new()?,
//!     sink: FileSink::new(&out, 0, "run1", Guarantee::ExactlyOnce, coordinator.next_id())?,
//! };
//! let mut source = WordSource::text("input", "to be or not to be");
//! while let Some(word) = source.next_word() {
//!     job.sink.write_line(&word)?;
//!     job.offsets.set("input", source.offset())?;
//!     if word == "or" {
//!         coordinator.trigger(&mut job)?; // output up to here commits once it completes
//!     }
//! }
//! coordinator.trigger_final(&mut job)?;
//! assert_eq!(coordinator.completed(), 2);
//! assert_eq!(std::fs::read_dir(&out)?.count(), 3); // two committed parts and `.pending/`
//! # Ok(())
//! # }
//! ```

mod coordinator;
mod error;
pub mod sink;
mod snapshot;
pub mod source;

pub use coordinator::{
    open_latest_checkpoint, unclaimed_operators, CheckpointCoordinator, Checkpointed, CompletedSavepoint,
};
pub use error::RuntimeError;
pub use sink::{restore_pending_commits, FileSink, Guarantee, LostCommit, Recovery, TwoPhaseCommitSink};
pub use snapshot::{AsyncSnapshot, KeyedCut, KeyedFormat, SubtaskSnapshot};
pub use source::{CommittedOffsetFile, Next, SourceOffsets, WordSource};

pub use statekit_checkpoint;
pub use statekit_core;
pub use statekit_snapshot;
