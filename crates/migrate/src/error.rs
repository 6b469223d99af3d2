//! The error type of migrations.

use statekit_checkpoint::CheckpointError;
use statekit_core::{ErrorKind, StateError};
use statekit_snapshot::SnapshotError;
use std::path::PathBuf;

/// Why a migration was refused or failed. Refusals ([`ErrorKind::Caller`]) are found while
/// planning, before anything is written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MigrateError {
    /// An edit names an operator the snapshot does not have (or one an earlier edit dropped
    /// or renamed away).
    #[error("no operator with uid {uid:?} (operators: {known:?})")]
    UnknownOperator {
        /// The uid asked for.
        uid: String,
        /// The uids there are at that point of the edits.
        known: Vec<String>,
    },
    /// An edit names an operator id the snapshot does not have.
    #[error("no operator with id {operator_id} (ids: {known:?})")]
    UnknownOperatorId {
        /// The id asked for.
        operator_id: String,
        /// The ids there are.
        known: Vec<String>,
    },
    /// An edit names a state the operator does not have.
    #[error("operator {uid:?} has no state {state:?} (states: {known:?})")]
    UnknownState {
        /// The operator.
        uid: String,
        /// The state asked for.
        state: String,
        /// The operator's keyed and operator states at that point of the edits.
        known: Vec<String>,
    },
    /// A rename onto a uid another operator already has.
    #[error("cannot rename {from:?} to {to:?}: an operator with uid {to:?} exists")]
    UidTaken {
        /// The operator renamed.
        from: String,
        /// The uid it would take.
        to: String,
    },
    /// A rename onto a state name the operator already has.
    #[error("operator {uid:?}: cannot rename state {from:?} to {to:?}: a state {to:?} exists")]
    StateNameTaken {
        /// The operator.
        uid: String,
        /// The state renamed.
        from: String,
        /// The name it would take.
        to: String,
    },
    /// A parallelism outside `1..=max parallelism`.
    #[error("operator {uid:?}: parallelism {parallelism} is outside 1..={max_parallelism} (its max parallelism)")]
    BadParallelism {
        /// The operator.
        uid: String,
        /// The parallelism asked for.
        parallelism: u32,
        /// The operator's max parallelism.
        max_parallelism: u32,
    },
    /// A max parallelism outside `1..=32768`.
    #[error("operator {uid:?}: max parallelism {max_parallelism} is outside 1..=32768")]
    BadMaxParallelism {
        /// The operator.
        uid: String,
        /// The max parallelism asked for.
        max_parallelism: u32,
    },
    /// An edit on an operator whose states are of a kind it cannot apply to (keys kept or
    /// dropped where there is no keyed state).
    #[error("{edit} {uid}: {why}")]
    NotApplicable {
        /// The edit, as its flag (`--keep-keys`).
        edit: String,
        /// The operator.
        uid: String,
        /// What the operator has instead.
        why: String,
    },
    /// An edit this build cannot apply yet.
    #[error("{what} is not supported yet")]
    NotSupported {
        /// What was asked for.
        what: String,
    },
    /// A schema file names a kind, mode or type that does not exist.
    #[error("schema: {what}: {reason}")]
    BadSchema {
        /// Which operator or state.
        what: String,
        /// Why.
        reason: String,
    },
    /// A shard number outside `0..shards`, or no shards.
    #[error("shard {shard} of {shards}: shards are numbered 0..N-1 of N >= 1")]
    InvalidShard {
        /// The shard asked for.
        shard: u32,
        /// Of how many.
        shards: u32,
    },
    /// A shard has not written its manifest yet.
    #[error("{}: shard {shard} of {shards} has not finished (no manifest): run it, then finish again", output.display())]
    ShardMissing {
        /// The output.
        output: PathBuf,
        /// The missing shard.
        shard: u32,
        /// Of how many.
        shards: u32,
    },
    /// The shards' manifests do not hold every subtask exactly once (different `--shard`
    /// counts, or a plan that changed between shards).
    #[error("{}: operator {uid:?}: the shards hold subtasks {found:?}, not each of 0..{parallelism} once", output.display())]
    ShardsIncomplete {
        /// The output.
        output: PathBuf,
        /// The operator.
        uid: String,
        /// The subtask indices found.
        found: Vec<u32>,
        /// Its parallelism.
        parallelism: u32,
    },
    /// The output exists (pass `force` to replace it).
    #[error("{}: the output exists (use --force to replace it)", path.display())]
    OutputExists {
        /// The output.
        path: PathBuf,
    },
    /// `force` replaces only an empty directory or a snapshot statekit wrote and nothing else
    /// ([`crate::check_local_replaceable`]); nothing was deleted.
    #[error("{}: not replaced: {reason} (--force replaces only an empty directory or a statekit snapshot: its _metadata and the files that references, nothing else)", path.display())]
    OutputNotReplaceable {
        /// The output.
        path: PathBuf,
        /// What in it is not the snapshot's.
        reason: String,
    },
    /// The output would overwrite, or lie inside, the input.
    #[error("{}: the output may not be the input or lie inside it ({})", output.display(), input.display())]
    OutputIsInput {
        /// The output.
        output: PathBuf,
        /// The input.
        input: PathBuf,
    },
    /// Reading the input failed.
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    /// Reading the input or writing the output failed.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// A state stream failed.
    #[error(transparent)]
    State(#[from] StateError),
    /// A file-system operation on the output failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

impl MigrateError {
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            MigrateError::UnknownOperator { .. }
            | MigrateError::UnknownOperatorId { .. }
            | MigrateError::UnknownState { .. }
            | MigrateError::UidTaken { .. }
            | MigrateError::StateNameTaken { .. }
            | MigrateError::BadParallelism { .. }
            | MigrateError::BadMaxParallelism { .. }
            | MigrateError::NotApplicable { .. }
            | MigrateError::OutputExists { .. }
            | MigrateError::InvalidShard { .. }
            | MigrateError::ShardMissing { .. }
            | MigrateError::ShardsIncomplete { .. }
            | MigrateError::OutputNotReplaceable { .. }
            | MigrateError::OutputIsInput { .. }
            | MigrateError::BadSchema { .. } => ErrorKind::Caller,
            MigrateError::NotSupported { .. } => ErrorKind::Unsupported,
            MigrateError::Snapshot(e) => e.kind(),
            MigrateError::Checkpoint(e) => e.kind(),
            MigrateError::State(e) => e.kind(),
            MigrateError::Io { source, .. } => ErrorKind::of_io(source),
        }
    }

    /// An I/O error on `path`.
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        MigrateError::Io {
            path: path.into(),
            source,
        }
    }
}

impl statekit_core::HasErrorKind for MigrateError {
    fn kind(&self) -> statekit_core::ErrorKind {
        MigrateError::kind(self)
    }
}
