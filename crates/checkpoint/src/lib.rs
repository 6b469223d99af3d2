//! # statekit-checkpoint
//!
//! What an engine drives to take and restore checkpoints and savepoints:
//!
//! * the directory layout (Flink's): `<dir>/<job-id>/chk-<N>/_metadata`, `<dir>/<job-id>/shared/`,
//!   `<dir>/<job-id>/taskowned/`, and savepoints in `savepoint-<job6>-<12 hex>/` directories;
//! * [`SnapshotWriter`]: subtasks write their state files (possibly from several threads at
//!   once), then [`SnapshotWriter::finish`] commits `_metadata` atomically (temp file, fsync,
//!   rename, directory fsync) — a directory without `_metadata` is never a complete snapshot;
//! * [`CheckpointStore`]: checkpoint ids, completion, retention of the newest N, listing;
//! * [`SnapshotReader`]: opens a checkpoint or savepoint by path and hands each new subtask
//!   the state it owns at any parallelism (keyed state by key-group range, operator state
//!   redistributed as in Flink);
//! * the shared-file registry ([`SharedStateRegistry`], driven by [`CheckpointStore`]) and the
//!   restore modes ([`RestoreMode`]); [`plan_gc`] / [`apply_gc`] find and delete files no
//!   complete snapshot references.

mod error;
mod find;
mod gc;
mod layout;
mod reader;
mod registry;
mod store;
mod writer;

pub use error::{CheckpointError, InvalidRequest, OrphanMoved};
pub use find::{
    find_dead_leftovers, find_snapshot_dirs, find_snapshot_dirs_in, has_metadata, SnapshotDir, StoredSnapshotDir,
};
pub use gc::{apply_gc, apply_gc_at, plan_gc, plan_gc_at, FileId, GcPlan, Orphan, OrphanReason};
pub use layout::{
    checkpoint_dir_name, new_job_id, new_savepoint_dir_name, parse_checkpoint_dir_name, DSTL_DIR, JOB_ID_HEX_LEN,
    SHARED_DIR, TASK_OWNED_DIR,
};
pub use reader::{resolve_snapshot_path, ReferencedFile, SnapshotReader, StoredMetadata};
pub use registry::{Decision, RegistryError, RestoreMode, SharedStateRegistry};
pub use store::{CheckpointListing, CheckpointStore, Cleanup, CompletedCheckpoint};
pub use writer::SnapshotWriter;
