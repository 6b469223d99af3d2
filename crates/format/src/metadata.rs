//! The model of a snapshot's `_metadata`: what a checkpoint or savepoint holds, organised by
//! operator uid → state name. Encoding and decoding live in [`crate::encode_metadata`] /
//! [`crate::decode_metadata`]; the byte layout is specified in `docs/format.md`.

use statekit_core::{KeyGroupRange, OperatorId, OperatorStateDescriptor, StateDescriptor};
use std::collections::BTreeMap;

/// Name of the metadata file inside a snapshot directory.
pub const METADATA_FILE_NAME: &str = "_metadata";

/// Checkpoint (automatic, for recovery) or savepoint (user-triggered, self-contained).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SnapshotKind {
    /// A checkpoint `chk-<N>`.
    Checkpoint,
    /// A savepoint.
    Savepoint,
}

/// How the state data of a snapshot is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SnapshotFormat {
    /// The backend-independent canonical format (restores into any backend).
    Canonical,
}

/// Where a referenced file lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileScope {
    /// Inside the snapshot directory (the one holding `_metadata`); the path is relative to it,
    /// so the snapshot can be moved.
    Exclusive,
    /// Shared between checkpoints of one job; the path is relative to the job directory
    /// (`<checkpoint-dir>/<job-id>/`).
    Shared,
}

/// A reference to a data file.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FileRef {
    /// Which directory `path` is relative to.
    pub scope: FileScope,
    /// Relative, `/`-separated path.
    pub path: String,
    /// Size in bytes, checked when the file is opened (detects truncation and swaps).
    pub size: u64,
}

/// The size of one key group in a keyed data file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KeyGroupStats {
    /// The key group.
    pub key_group: u32,
    /// Bytes the key group's blocks take in the file (compressed, with block headers).
    pub stored_bytes: u64,
    /// Entries (list elements and map entries count one each).
    pub entries: u64,
}

/// Statistics of one subtask's keyed state, recorded in `_metadata`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct KeyedStats {
    /// All entries.
    pub entries: u64,
    /// Uncompressed record bytes of all entries.
    pub raw_bytes: u64,
    /// Per state, in the data file's state order.
    pub states: Vec<crate::StateStats>,
    /// Per non-empty key group, ascending.
    pub key_groups: Vec<KeyGroupStats>,
}

impl KeyedStats {
    /// The statistics a data file's index holds.
    pub fn from_info(info: &crate::KeyedFileInfo) -> Self {
        KeyedStats {
            entries: info.entries,
            raw_bytes: info.raw_bytes,
            states: info.states.clone(),
            key_groups: info
                .key_groups
                .iter()
                .map(|k| KeyGroupStats {
                    key_group: k.key_group,
                    stored_bytes: k.stored_bytes,
                    entries: k.entries,
                })
                .collect(),
        }
    }
}

/// One subtask of an operator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubtaskMetadata {
    /// Subtask index, 0-based.
    pub index: u32,
    /// Key groups the subtask owned.
    pub key_groups: KeyGroupRange,
    /// The subtask had finished (a bounded input ended) when the snapshot was taken.
    pub finished: bool,
    /// Keyed state data, when the subtask had any.
    pub keyed: Option<FileRef>,
    /// Statistics of the keyed data file (entries and bytes per state and per key group), so
    /// tools can show sizes without reading data files. Present when written by statekit.
    pub keyed_stats: Option<KeyedStats>,
    /// Operator state data, when the subtask had any.
    pub operator: Option<FileRef>,
}

/// One operator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperatorMetadata {
    /// The user-chosen uid.
    pub uid: String,
    /// `OperatorId::from_uid(uid)` unless the id was given explicitly.
    pub operator_id: OperatorId,
    /// Parallelism when the snapshot was taken.
    pub parallelism: u32,
    /// Max parallelism (number of key groups).
    pub max_parallelism: u32,
    /// Every subtask had finished.
    pub finished: bool,
    /// Keyed states (union over subtasks, by name).
    pub keyed_states: Vec<StateDescriptor>,
    /// Operator states (union over subtasks, by name).
    pub operator_states: Vec<OperatorStateDescriptor>,
    /// One entry per subtask, in index order.
    pub subtasks: Vec<SubtaskMetadata>,
}

/// The whole `_metadata`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotMetadata {
    /// Checkpoint or savepoint.
    pub kind: SnapshotKind,
    /// Data layout.
    pub format: SnapshotFormat,
    /// Checkpoint id (savepoints also carry the id of the checkpoint mechanism run).
    pub checkpoint_id: u64,
    /// The job, as 32 hex characters.
    pub job_id: String,
    /// When the snapshot was taken, ms since the epoch.
    pub timestamp_ms: i64,
    /// Free-form properties (writer version, configuration); readers ignore unknown keys.
    pub properties: BTreeMap<String, String>,
    /// Operators, in the order the writer chose.
    pub operators: Vec<OperatorMetadata>,
}

impl SnapshotMetadata {
    /// The operator with this uid.
    pub fn operator(&self, uid: &str) -> Option<&OperatorMetadata> {
        self.operators.iter().find(|o| o.uid == uid)
    }
}
