//! One façade over every on-disk family of snapshots: [`Snapshot`].
//!
//! statekit reads two families of checkpoints and savepoints — its own (canonical data files,
//! a backend's native files, changelog handles) and Apache Flink's (every Flink snapshot kind
//! 1.15 to 2.3) — and speaks one shape of both: the metadata model
//! ([`SnapshotMetadata`]: operators by uid → states → subtasks), each operator's keyed state
//! as key-group-ordered entry streams ([`KeyedStateView`]) and its operator state
//! ([`OperatorStateSnapshot`]). A family is an adapter to that shape, a [`SnapshotSource`];
//! [`Snapshot::open`] recognizes the family from `_metadata`'s first bytes and opens it with
//! its adapter, so a command that holds a [`Snapshot`] never asks which family it has.
//!
//! Operators are addressed the same way in every family ([`Snapshot::operator`]): by uid; by
//! operator id (32 hex digits, as `show` prints it); or by a uid whose hash is the id (Flink
//! before 2.0 keeps ids only, and the uids a job declares — `--flink-uid`,
//! [`OpenOptions::uids`] — name its operators once, when the snapshot is opened).

use crate::describe::Description;
use crate::error::SnapshotError;
use crate::family::{FlinkSource, StatekitSource};
use statekit_checkpoint::SnapshotReader;
use statekit_core::location::Location;
use statekit_core::storage::Storage;
use statekit_core::{KeyGroupRange, KeyedStateView, OperatorId, OperatorStateSnapshot};
use statekit_format::{OperatorMetadata, SnapshotMetadata, SnapshotVerifyReport};
use std::fmt;
use std::path::Path;
use std::sync::Arc;

/// How to open a snapshot, whatever its family.
#[derive(Clone, Debug, Default)]
pub struct OpenOptions {
    /// Open without `_metadata`'s structural checks, for `verify` to list every problem of a
    /// snapshot a checked open refuses. Nothing but verification should act on what opens so.
    pub unchecked: bool,
    /// Uids the job declares (`--flink-uid`): an operator stored by id only (Flink before
    /// 2.0) whose id is one's hash is named by it, in every command.
    pub uids: Vec<String>,
    /// `OLD=NEW` prefixes for absolute paths of a snapshot that was moved (`--flink-root`);
    /// each `NEW` is also a place its files may be read from.
    pub roots: Vec<(String, String)>,
    /// Read what the state data declares beyond `_metadata` (a Flink snapshot's keyed and
    /// operator state descriptors, from the heads of its state streams) while opening.
    pub state_schema: bool,
}

/// An on-disk family of snapshots.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// statekit's own: canonical data files, native backend files, changelog handles.
    Statekit,
    /// Apache Flink's own savepoints and checkpoints.
    Flink,
}

impl Family {
    /// The family's name as tools print it.
    pub fn name(self) -> &'static str {
        match self {
            Family::Statekit => "statekit",
            Family::Flink => "Apache Flink",
        }
    }
}

/// A snapshot of one family, opened: the adapter every family implements.
///
/// The methods take an operator already resolved by [`Snapshot::operator`].
pub trait SnapshotSource: Send + Sync + fmt::Debug {
    /// The family.
    fn family(&self) -> Family;
    /// The metadata model: operators by uid → states → subtasks → files.
    fn metadata(&self) -> &SnapshotMetadata;
    /// Storage rooted at the snapshot directory.
    fn storage(&self) -> &Arc<dyn Storage>;
    /// One view per subtask of `op` overlapping `range`, in key-group order.
    fn keyed_views(
        &self,
        op: &OperatorMetadata,
        range: KeyGroupRange,
    ) -> Result<Vec<Box<dyn KeyedStateView>>, SnapshotError>;
    /// The operator state subtask `index` of `op` stored, as written (not redistributed).
    fn stored_operator_state(&self, op: &OperatorMetadata, index: u32) -> Result<OperatorStateSnapshot, SnapshotError>;
    /// Checks every byte of the snapshot's own files.
    fn verify(&self) -> Result<SnapshotVerifyReport, SnapshotError>;
    /// The parts of its states' entries statekit keeps as bytes (values of types it does not
    /// decode), each with the serializer that wrote it; empty when every value is typed.
    fn opaque_parts(&self) -> Result<Vec<OpaquePart>, SnapshotError> {
        Ok(Vec::new())
    }
    /// statekit's reader of the snapshot's files, for the tools that handle statekit's files as
    /// files (copy, link, collect garbage, replay a changelog); `None` for other families.
    fn statekit_files(&self) -> Option<&SnapshotReader> {
        None
    }
    /// What the snapshot holds, from its metadata (what `show` prints), with what the family's
    /// own metadata says beyond the model.
    fn describe(&self) -> Description {
        Description::of(self.metadata(), None)
    }
}

/// A part of a state's entries statekit keeps as the bytes another family wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpaquePart {
    /// The operator's uid.
    pub uid: String,
    /// The state's name.
    pub state: String,
    /// Which part of its entries: `key`, `namespace`, `user key` or `value`.
    pub part: String,
    /// The serializer that wrote it and the type it names.
    pub serializer: String,
}

/// An opened checkpoint or savepoint of any family: the one handle commands and engines hold.
/// Cheap to clone (the source is shared).
#[derive(Clone, Debug)]
pub struct Snapshot {
    source: Arc<dyn SnapshotSource>,
}

impl Snapshot {
    /// Opens the snapshot at `path` (its directory or its `_metadata` file) on the local file
    /// system, with default options.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, SnapshotError> {
        Self::open_with(path, &OpenOptions::default())
    }

    /// Opens the snapshot at `path` with `options`, by the adapter of its family.
    pub fn open_with(path: impl AsRef<Path>, options: &OpenOptions) -> Result<Self, SnapshotError> {
        Self::open_location(&Location::Local(path.as_ref().to_path_buf()), options)
    }

    /// Opens the snapshot at `location` (a local path, or a directory or `_metadata` object of
    /// a storage) with `options`, by the adapter of the family its `_metadata` starts like.
    pub fn open_location(location: &Location, options: &OpenOptions) -> Result<Self, SnapshotError> {
        let flink = statekit_flink::FlinkOpenOptions {
            uids: options.uids.clone(),
            roots: options.roots.clone(),
        };
        let checked = !options.unchecked;
        let source: Arc<dyn SnapshotSource> = match location {
            Location::Local(path) => {
                let dir = statekit_checkpoint::resolve_snapshot_path(path)?;
                let file = if path.is_file() {
                    path.to_path_buf()
                } else {
                    dir.join(statekit_format::METADATA_FILE_NAME)
                };
                if starts_like_flink(&file) {
                    let snapshot = statekit_flink::FlinkSnapshot::open(&file, &flink)?;
                    let storage = statekit_format::FileResolver::local(&dir).snapshot().clone();
                    Arc::new(FlinkSource::new(snapshot, storage, checked, options.state_schema)?)
                } else {
                    let reader = match checked {
                        true => SnapshotReader::open(path)?,
                        false => SnapshotReader::open_unchecked(path)?,
                    };
                    Arc::new(StatekitSource::new(reader))
                }
            }
            Location::Stored { .. } => {
                let m = statekit_checkpoint::StoredMetadata::fetch(location)?;
                if statekit_flink::is_flink_metadata(m.blob.bytes()) {
                    let snapshot = crate::family::open_stored_flink(&m, &flink)?;
                    Arc::new(FlinkSource::new(
                        snapshot,
                        m.storage.clone(),
                        checked,
                        options.state_schema,
                    )?)
                } else {
                    Arc::new(StatekitSource::new(SnapshotReader::from_stored_metadata(&m, checked)?))
                }
            }
        };
        Ok(Snapshot { source })
    }

    /// The statekit snapshot an already opened reader of statekit's files holds.
    pub fn from_statekit_reader(reader: SnapshotReader) -> Self {
        Snapshot {
            source: Arc::new(StatekitSource::new(reader)),
        }
    }

    /// A snapshot of a family statekit does not ship, opened by its own adapter.
    pub fn from_source(source: Arc<dyn SnapshotSource>) -> Self {
        Snapshot { source }
    }

    /// The family.
    pub fn family(&self) -> Family {
        self.source.family()
    }

    /// The metadata model.
    pub fn metadata(&self) -> &SnapshotMetadata {
        self.source.metadata()
    }

    /// Storage rooted at the snapshot directory.
    pub fn storage(&self) -> &Arc<dyn Storage> {
        self.source.storage()
    }

    /// The operator `name` addresses: its uid; its operator id (32 hex digits); or, for an
    /// operator stored by id only, a uid whose hash (as Flink derives ids from uids) is its id.
    pub fn operator(&self, name: &str) -> Result<&OperatorMetadata, SnapshotError> {
        let ops = &self.metadata().operators;
        let by_id = |id: OperatorId| ops.iter().find(|o| o.operator_id == id);
        ops.iter()
            .find(|o| o.uid == name)
            .or_else(|| name.parse().ok().and_then(by_id))
            .or_else(|| by_id(OperatorId::from_uid(name)).filter(|o| o.uid == o.operator_id.to_string()))
            .ok_or_else(|| {
                SnapshotError::Checkpoint(statekit_checkpoint::CheckpointError::UnknownOperator {
                    snapshot: self.storage().describe(statekit_format::METADATA_FILE_NAME),
                    uid: name.to_string(),
                    known: ops.iter().map(|o| o.uid.clone()).collect(),
                })
            })
    }

    /// One view per subtask of operator `name` overlapping `range`, in key-group order: the
    /// narrow waist every command reads.
    pub fn keyed_views(&self, name: &str, range: KeyGroupRange) -> Result<Vec<Box<dyn KeyedStateView>>, SnapshotError> {
        self.source.keyed_views(self.operator(name)?, range)
    }

    /// The operator state subtask `index` of operator `name` stored, as written.
    pub fn stored_operator_state(&self, name: &str, index: u32) -> Result<OperatorStateSnapshot, SnapshotError> {
        self.source.stored_operator_state(self.operator(name)?, index)
    }

    /// The operator state of every subtask of `new_parallelism`, redistributed with Flink's
    /// rules (list split, union to all, broadcast copied); each stored part is read once.
    pub fn operator_states(
        &self,
        name: &str,
        new_parallelism: u32,
    ) -> Result<Vec<OperatorStateSnapshot>, SnapshotError> {
        let op = self.operator(name)?;
        statekit_core::keygroup::check_parallelism(new_parallelism, op.max_parallelism)?;
        let old = (0..op.subtasks.len() as u32)
            .map(|i| self.source.stored_operator_state(op, i))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(statekit_core::redistribute(&old, new_parallelism)?)
    }

    /// The key group `key` (in statekit's value encoding of `schema`) belongs to in operator
    /// `name`, under the operator's key-group scheme (statekit's rule, or Flink's
    /// `murmurHash(hashCode)` for state from Apache Flink). `None` when the operator is unknown
    /// or the rule needs a `hashCode` statekit cannot compute: then every key group must be
    /// searched.
    pub fn key_group_of(&self, name: &str, key: &[u8], schema: &statekit_core::TypeSchema) -> Option<u32> {
        self.operator(name).ok()?.key_group_of(key, schema).ok()
    }

    /// What the snapshot holds (what `show` prints), from its metadata alone.
    pub fn describe(&self) -> Description {
        self.source.describe()
    }

    /// The operator state subtask `index` of `new_parallelism` gets, redistributed with
    /// Flink's rules ([`Snapshot::operator_states`]).
    pub fn operator_state(
        &self,
        name: &str,
        new_parallelism: u32,
        index: u32,
    ) -> Result<OperatorStateSnapshot, SnapshotError> {
        if index >= new_parallelism {
            return Err(statekit_checkpoint::CheckpointError::from(
                statekit_checkpoint::InvalidRequest::SubtaskIndex {
                    index,
                    parallelism: new_parallelism,
                },
            )
            .into());
        }
        let mut all = self.operator_states(name, new_parallelism)?;
        Ok(all.swap_remove(index as usize))
    }

    /// Checks every byte of the snapshot's own files.
    pub fn verify(&self) -> Result<SnapshotVerifyReport, SnapshotError> {
        self.source.verify()
    }

    /// The parts of its states' entries statekit keeps as bytes ([`SnapshotSource::opaque_parts`]).
    pub fn opaque_parts(&self) -> Result<Vec<OpaquePart>, SnapshotError> {
        self.source.opaque_parts()
    }

    /// statekit's reader of the snapshot's files, when it is statekit's own.
    pub fn statekit_files(&self) -> Option<&SnapshotReader> {
        self.source.statekit_files()
    }
}

/// Whether the local file `path` starts with the magic number of Flink's `_metadata` (opened as
/// a regular file only: a FIFO would block the open).
fn starts_like_flink(path: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 4];
    statekit_core::storage::open_regular_file(path)
        .ok()
        .is_some_and(|(mut f, _)| f.read_exact(&mut head).is_ok() && statekit_flink::is_flink_metadata(&head))
}
