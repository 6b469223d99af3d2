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
    /// At least one subtask's keyed state is a backend's native files
    /// ([`NativeKeyedHandle`]); such state restores only into that backend.
    Native,
    /// At least one subtask's keyed state is a changelog handle ([`ChangelogKeyedHandle`]):
    /// canonical materializations plus a log tail to replay (any backend, through the
    /// changelog crate).
    Changelog,
}

impl SnapshotFormat {
    /// `canonical` or `native`.
    pub fn as_str(self) -> &'static str {
        match self {
            SnapshotFormat::Canonical => "canonical",
            SnapshotFormat::Native => "native",
            SnapshotFormat::Changelog => "changelog",
        }
    }
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
    /// Anywhere on the local filesystem; the path is absolute. Written only in checkpoints, for
    /// files of a snapshot the job was restored from (CLAIM or LEGACY restore mode) that it
    /// keeps referencing; savepoints never hold absolute references.
    Absolute,
    /// An object on an object store, by URL (`s3://bucket/key`): a changelog's log files under
    /// a `dstl.dfs.base-path` on an object store, or files of a restored snapshot on one that
    /// a checkpoint keeps referencing. Resolved through the process's
    /// [`UrlResolver`](statekit_core::location::UrlResolver); like absolute references, written
    /// only in checkpoints.
    Url,
}

impl FileScope {
    /// `exclusive`, `shared`, `absolute` or `url`.
    pub fn as_str(self) -> &'static str {
        match self {
            FileScope::Exclusive => "exclusive",
            FileScope::Shared => "shared",
            FileScope::Absolute => "absolute",
            FileScope::Url => "url",
        }
    }

    /// True for references outside the snapshot's own job directory (absolute and URL).
    pub fn is_external(self) -> bool {
        matches!(self, FileScope::Absolute | FileScope::Url)
    }
}

/// A reference to a data file.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FileRef {
    /// Which directory `path` is relative to.
    pub scope: FileScope,
    /// Relative, `/`-separated path (an absolute path for [`FileScope::Absolute`], a URL for
    /// [`FileScope::Url`]).
    pub path: String,
    /// Size in bytes, checked when the file is opened (detects truncation and swaps).
    pub size: u64,
}

impl FileRef {
    /// A reference to `path` of `storage` that resolves from anywhere: by absolute path on
    /// the local filesystem, by URL on an object store; `None` for a storage that has
    /// neither (memory).
    pub fn external(storage: &dyn statekit_core::storage::Storage, path: &str, size: u64) -> Option<FileRef> {
        if let Some(p) = storage.absolute_path(path) {
            return Some(FileRef {
                scope: FileScope::Absolute,
                path: p.display().to_string(),
                size,
            });
        }
        storage.url(path).map(|url| FileRef {
            scope: FileScope::Url,
            path: url,
            size,
        })
    }
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

/// How a subtask's keyed state is stored: at most one form, by construction.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum KeyedHandle {
    /// The subtask had no keyed state.
    #[default]
    None,
    /// A canonical keyed data file.
    Canonical(FileRef),
    /// A backend's native files (a native snapshot).
    Native(NativeKeyedHandle),
    /// Materializations plus a changelog tail (the subtask ran the changelog).
    Changelog(ChangelogKeyedHandle),
}

impl KeyedHandle {
    /// True when the subtask had no keyed state.
    pub fn is_none(&self) -> bool {
        matches!(self, KeyedHandle::None)
    }

    /// The canonical keyed data file, when the state is one.
    pub fn canonical(&self) -> Option<&FileRef> {
        match self {
            KeyedHandle::Canonical(f) => Some(f),
            _ => None,
        }
    }

    /// The native files, when the state is a native snapshot.
    pub fn native(&self) -> Option<&NativeKeyedHandle> {
        match self {
            KeyedHandle::Native(n) => Some(n),
            _ => None,
        }
    }

    /// The changelog handle, when the subtask ran the changelog.
    pub fn changelog(&self) -> Option<&ChangelogKeyedHandle> {
        match self {
            KeyedHandle::Changelog(c) => Some(c),
            _ => None,
        }
    }

    /// [`KeyedHandle::canonical`], mutable.
    pub fn canonical_mut(&mut self) -> Option<&mut FileRef> {
        match self {
            KeyedHandle::Canonical(f) => Some(f),
            _ => None,
        }
    }

    /// [`KeyedHandle::native`], mutable.
    pub fn native_mut(&mut self) -> Option<&mut NativeKeyedHandle> {
        match self {
            KeyedHandle::Native(n) => Some(n),
            _ => None,
        }
    }

    /// [`KeyedHandle::changelog`], mutable.
    pub fn changelog_mut(&mut self) -> Option<&mut ChangelogKeyedHandle> {
        match self {
            KeyedHandle::Changelog(c) => Some(c),
            _ => None,
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
    /// Its keyed state: none, a canonical data file, a backend's native files, or a
    /// changelog handle.
    pub keyed: KeyedHandle,
    /// Statistics of the keyed data file (entries and bytes per state and per key group), so
    /// tools can show sizes without reading data files. Present when written by statekit.
    pub keyed_stats: Option<KeyedStats>,
    /// Operator state data, when the subtask had any.
    pub operator: Option<FileRef>,
}

impl SubtaskMetadata {
    /// Every file the subtask references: keyed data file, native files, changelog
    /// materializations and log files (each once), operator data file.
    pub fn files(&self) -> impl Iterator<Item = &FileRef> {
        let mut keyed: Vec<&FileRef> = Vec::new();
        match &self.keyed {
            KeyedHandle::None => {}
            KeyedHandle::Canonical(f) => keyed.push(f),
            KeyedHandle::Native(n) => keyed.extend(n.files.iter().map(|f| &f.file)),
            KeyedHandle::Changelog(c) => {
                for m in &c.materialized {
                    keyed.push(&m.file);
                }
                for t in &c.tail {
                    if !keyed.iter().any(|f| f.scope == t.file.scope && f.path == t.file.path) {
                        keyed.push(&t.file);
                    }
                }
            }
        }
        keyed.into_iter().chain(self.operator.iter())
    }
}

/// A materialization of a changelog backend: a canonical keyed data file of the delegate's
/// state at some sequence number, applied to `key_groups` only (narrowed like
/// [`LogSegmentRef::key_groups`] when inherited).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MaterializedPart {
    /// The keyed data file.
    pub file: FileRef,
    /// The key groups it holds.
    pub key_groups: KeyGroupRange,
    /// Its statistics (entries and bytes per state and key group).
    pub stats: Option<KeyedStats>,
}

/// One change set of a changelog tail: where it is in which log file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogSegmentRef {
    /// The log file (`docs/changelog-format.md`).
    pub file: FileRef,
    /// Offset of the change set in the file.
    pub offset: u64,
    /// Its length.
    pub length: u64,
    /// The log (backend instance) it belongs to.
    pub log: [u8; 16],
    /// Its sequence number.
    pub sqn: u64,
    /// Its records.
    pub records: u32,
    /// The key groups it is applied to: the subtask's range when it was written, narrowed to
    /// the inheriting subtask's range each time a restore passes it on (a change set of an
    /// earlier, larger subtask must not be replayed over key groups another handle covers).
    pub key_groups: KeyGroupRange,
}

/// A subtask's keyed state under the changelog: the materializations (each the state of some
/// key groups at a sequence number) and the change sets made after them, to be replayed in
/// order (filtered by key group). After a rescale a subtask inherits several materializations
/// and tails until its first own materialization.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangelogKeyedHandle {
    /// The subtask's own log.
    pub log: [u8; 16],
    /// Id of the newest materialization.
    pub materialization_id: u64,
    /// Materializations, disjoint in key groups.
    pub materialized: Vec<MaterializedPart>,
    /// Change sets to replay, in order.
    pub tail: Vec<LogSegmentRef>,
}

impl ChangelogKeyedHandle {
    /// Bytes of the tail (change sets, not whole files).
    pub fn tail_bytes(&self) -> u64 {
        self.tail.iter().map(|t| t.length).fold(0, u64::saturating_add)
    }

    /// Records of the tail.
    pub fn tail_records(&self) -> u64 {
        self.tail
            .iter()
            .map(|t| u64::from(t.records))
            .fold(0, u64::saturating_add)
    }

    /// Bytes of the materialized files.
    pub fn materialized_bytes(&self) -> u64 {
        self.materialized
            .iter()
            .map(|m| m.file.size)
            .fold(0, u64::saturating_add)
    }
}

/// One file of a native keyed snapshot.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NativeFile {
    /// The file's name inside the backend's database directory (e.g. `000042.sst`,
    /// `MANIFEST-000005`, `CURRENT`): a plain file name, no `/`.
    pub name: String,
    /// Where the file is stored.
    pub file: FileRef,
    /// CRC32 of the whole file, computed while uploading.
    pub crc32: u32,
}

/// Approximate size of one state in a native snapshot.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NativeStateStats {
    /// State name (= column family name).
    pub name: String,
    /// Bytes of the state's table files.
    pub bytes: u64,
    /// The backend's estimate of the number of stored keys (a list counts once, a map entry
    /// once).
    pub estimated_keys: u64,
}

/// Approximate sizes of a native snapshot, from the backend's own estimates (no scan), so
/// tools can show sizes without opening the files.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct NativeStats {
    /// Per state.
    pub states: Vec<NativeStateStats>,
    /// Per key group with an estimate above zero, ascending: (key group, approximate bytes).
    pub key_groups: Vec<(u32, u64)>,
}

/// A subtask's keyed state as a backend's native files (e.g. a RocksDB database: its SST
/// files plus `MANIFEST`, `CURRENT`, `OPTIONS`). In an incremental checkpoint, files unchanged
/// since an earlier checkpoint are referenced where that checkpoint stored them (scope
/// [`FileScope::Shared`] or [`FileScope::Absolute`]); the list is always complete.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NativeKeyedHandle {
    /// The backend that wrote the files (`rocksdb`).
    pub backend: String,
    /// The backend's data layout version (`statekit-rocksdb-v1`), checked on restore.
    pub layout: String,
    /// Identifies the backend instance (32 hex characters), for tracing reuse.
    pub backend_id: String,
    /// The checkpoint for which the handle was written.
    pub checkpoint_id: u64,
    /// The backend's clock (ms) at the cut: data whose TTL had expired by then is not part
    /// of the snapshot's content (it may still be in the files until compacted away).
    pub clock_ms: i64,
    /// Every file of the database, by local name (unique).
    pub files: Vec<NativeFile>,
    /// Bytes of `files` uploaded for this checkpoint (the rest was reused).
    pub uploaded_bytes: u64,
    /// Approximate sizes.
    pub stats: NativeStats,
}

impl NativeKeyedHandle {
    /// Total bytes of all files.
    pub fn total_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.file.size).fold(0, u64::saturating_add)
    }
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
    /// The rule that put the keyed state's keys in their key groups: statekit's for state
    /// statekit took, Flink's for state that came from Apache Flink (kept through every
    /// conversion, so lookups and rescales place keys where they are).
    pub key_group_scheme: statekit_core::KeyGroupScheme,
    /// Keyed states (union over subtasks, by name).
    pub keyed_states: Vec<StateDescriptor>,
    /// Operator states (union over subtasks, by name).
    pub operator_states: Vec<OperatorStateDescriptor>,
    /// One entry per subtask, in index order.
    pub subtasks: Vec<SubtaskMetadata>,
}

impl OperatorMetadata {
    /// The operator's key-group rule for keys of `key_schema` (its scheme at its max
    /// parallelism): where a key of this operator's state is.
    pub fn key_groups(&self, key_schema: &statekit_core::TypeSchema) -> statekit_core::KeyGroupAssigner {
        self.key_group_scheme.assigner(key_schema, self.max_parallelism)
    }

    /// The key group `key` (encoded as `key_schema` says) is in, under the operator's rule.
    pub fn key_group_of(
        &self,
        key: &[u8],
        key_schema: &statekit_core::TypeSchema,
    ) -> Result<u32, statekit_core::keygroup::KeyGroupError> {
        self.key_groups(key_schema).key_group(key)
    }
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
