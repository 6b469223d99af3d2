//! Writing one snapshot (checkpoint or savepoint).

use crate::error::{CheckpointError, InvalidRequest};
use crate::layout::new_savepoint_dir_name;
use crate::layout::SHARED_DIR;
use statekit_core::storage::SubdirStorage;
use statekit_core::storage::{join, Storage};
use statekit_core::{
    keygroup, KeyGroupRange, KeyGroupScheme, KeyedStateView, OperatorId, OperatorStateDescriptor,
    OperatorStateSnapshot, StateDescriptor,
};
use statekit_format::{
    encode_metadata, transcode_keyed_file, write_keyed_file, write_operator_file, ChangelogKeyedHandle, FileRef,
    FileScope, KeyedFileReader, KeyedHandle, KeyedStats, NativeKeyedHandle, NativeTarget, OperatorMetadata,
    SnapshotFormat, SnapshotKind, SnapshotMetadata, SubtaskMetadata, WriteOptions, METADATA_FILE_NAME,
};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

#[derive(Debug)]
struct SubtaskResult {
    meta: SubtaskMetadata,
    keyed_states: Vec<StateDescriptor>,
    operator_states: Vec<OperatorStateDescriptor>,
}

/// The keyed part of a subtask's state.
enum KeyedPart<'a> {
    /// A view to write as a canonical keyed data file.
    View(Option<&'a dyn KeyedStateView>),
    /// A canonical keyed data file to rewrite block by block, with these states.
    Transcode(&'a KeyedFileReader, Vec<StateDescriptor>),
    /// A native handle already uploaded, with its states.
    Native(NativeKeyedHandle, Vec<StateDescriptor>),
    /// A changelog handle (materializations and log tail already durable), with its states.
    Changelog(ChangelogKeyedHandle, Vec<StateDescriptor>),
}

#[derive(Debug)]
struct OperatorBuilder {
    uid: String,
    id: OperatorId,
    parallelism: u32,
    max_parallelism: u32,
    /// The operator's key-group scheme: set by [`SnapshotWriter::set_key_group_scheme`] or
    /// by the first view written; statekit's if neither.
    scheme: Option<KeyGroupScheme>,
    subtasks: Vec<Option<SubtaskResult>>,
}

/// Writes one checkpoint or savepoint directory.
///
/// Register every operator, let each subtask write its state with
/// [`SnapshotWriter::write_subtask`] (callable from several threads at once; this is the
/// asynchronous part of a checkpoint), then [`SnapshotWriter::finish`] commits `_metadata`.
/// Until then the directory holds no `_metadata` and is not a complete snapshot.
#[derive(Debug)]
pub struct SnapshotWriter {
    storage: Arc<dyn Storage>,
    dir: String,
    kind: SnapshotKind,
    checkpoint_id: u64,
    job_id: String,
    timestamp_ms: i64,
    options: WriteOptions,
    properties: BTreeMap<String, String>,
    operators: Mutex<Vec<OperatorBuilder>>,
    /// The job directory (checkpoints of a [`crate::CheckpointStore`]): where shared files go.
    job_storage: Option<Arc<dyn Storage>>,
}

impl SnapshotWriter {
    /// A writer for the snapshot directory `dir` (relative to `storage`), which is created.
    pub fn new(
        storage: Arc<dyn Storage>,
        dir: &str,
        kind: SnapshotKind,
        checkpoint_id: u64,
        job_id: &str,
    ) -> Result<Self, CheckpointError> {
        storage.create_dir_all(dir)?;
        let timestamp_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        let mut properties = BTreeMap::new();
        properties.insert("writer".to_string(), format!("statekit {}", env!("CARGO_PKG_VERSION")));
        Ok(SnapshotWriter {
            storage,
            dir: dir.to_string(),
            kind,
            checkpoint_id,
            job_id: job_id.to_string(),
            timestamp_ms,
            options: WriteOptions::default(),
            properties,
            operators: Mutex::new(Vec::new()),
            job_storage: None,
        })
    }

    /// Sets the job directory (storage rooted at it), so native snapshots may put files in
    /// its `shared/` directory and share them between checkpoints.
    pub fn with_job_storage(mut self, job: Arc<dyn Storage>) -> Self {
        self.job_storage = Some(job);
        self
    }

    /// The snapshot kind.
    pub fn kind(&self) -> SnapshotKind {
        self.kind
    }

    /// Where subtask `index` of operator `uid` uploads the files of a native keyed snapshot:
    /// exclusive files under `<operator id>-<index>-native/` in the snapshot directory; shared
    /// files (checkpoints of a store only) in the job's `shared/`. Savepoints get no shared
    /// target: they are self-contained.
    pub fn native_target(&self, uid: &str, index: u32) -> Result<NativeTarget, CheckpointError> {
        let (id, parallelism, _) = self.operator_shape(uid)?;
        if index >= parallelism {
            return Err(InvalidRequest::SubtaskPastParallelism {
                uid: uid.to_string(),
                index,
                parallelism,
            }
            .into());
        }
        let snapshot: Arc<dyn Storage> = Arc::new(SubdirStorage::new(self.storage.clone(), &self.dir)?);
        let job = match self.kind {
            SnapshotKind::Savepoint => None,
            SnapshotKind::Checkpoint => self.job_storage.clone(),
        };
        Ok(NativeTarget {
            snapshot,
            exclusive_dir: format!("{id}-{index}-native"),
            job,
            shared_dir: SHARED_DIR.to_string(),
        })
    }

    /// Records subtask `index` of operator `uid` whose keyed state is a native handle (written
    /// through [`SnapshotWriter::native_target`]); `states` are the backend's state
    /// descriptors. Operator state and `finished` as in [`SnapshotWriter::write_subtask`].
    pub fn add_native_subtask(
        &self,
        uid: &str,
        index: u32,
        handle: NativeKeyedHandle,
        states: Vec<StateDescriptor>,
        operator: Option<&OperatorStateSnapshot>,
        finished: bool,
    ) -> Result<SubtaskMetadata, CheckpointError> {
        if self.kind == SnapshotKind::Savepoint {
            if let Some(f) = handle.files.iter().find(|f| f.file.scope != FileScope::Exclusive) {
                return Err(InvalidRequest::SavepointSharesFile {
                    uid: uid.to_string(),
                    index,
                    file: f.name.clone(),
                    scope: f.file.scope.as_str(),
                }
                .into());
            }
        }
        self.record_subtask(uid, index, KeyedPart::Native(handle, states), operator, finished)
    }

    /// Records subtask `index` of operator `uid` whose keyed state is a changelog handle
    /// (materializations and log tail, already durable); `states` are the backend's state
    /// descriptors. Savepoints take canonical state instead.
    pub fn add_changelog_subtask(
        &self,
        uid: &str,
        index: u32,
        handle: ChangelogKeyedHandle,
        states: Vec<StateDescriptor>,
        operator: Option<&OperatorStateSnapshot>,
        finished: bool,
    ) -> Result<SubtaskMetadata, CheckpointError> {
        if self.kind == SnapshotKind::Savepoint {
            return Err(InvalidRequest::SavepointChangelog {
                uid: uid.to_string(),
                index,
            }
            .into());
        }
        self.record_subtask(uid, index, KeyedPart::Changelog(handle, states), operator, finished)
    }

    /// Native keyed handles recorded so far (for cleaning up after an abort).
    pub fn native_handles(&self) -> Vec<NativeKeyedHandle> {
        self.lock()
            .iter()
            .flat_map(|o| o.subtasks.iter().flatten())
            .filter_map(|s| s.meta.keyed.native().cloned())
            .collect()
    }

    /// A writer for a new savepoint directory `savepoint-<job6>-<random>` under `parent`.
    pub fn new_savepoint(
        storage: Arc<dyn Storage>,
        parent: &str,
        job_id: &str,
        checkpoint_id: u64,
    ) -> Result<Self, CheckpointError> {
        let mut name = join(parent, &new_savepoint_dir_name(job_id));
        while storage.exists(&name)? {
            name = join(parent, &new_savepoint_dir_name(job_id));
        }
        Self::new(storage, &name, SnapshotKind::Savepoint, checkpoint_id, job_id)
    }

    /// Sets how data files are written (compression, block size).
    pub fn with_options(mut self, options: WriteOptions) -> Self {
        self.options = options;
        self
    }

    /// Records a free-form property in `_metadata`.
    pub fn set_property(&mut self, key: &str, value: &str) {
        self.properties.insert(key.to_string(), value.to_string());
    }

    /// The snapshot directory, relative to the storage.
    pub fn dir(&self) -> &str {
        &self.dir
    }

    /// The storage written to.
    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.storage
    }

    /// The checkpoint id.
    pub fn checkpoint_id(&self) -> u64 {
        self.checkpoint_id
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<OperatorBuilder>> {
        self.operators.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Declares an operator by uid with its parallelism and max parallelism; its id is the
    /// uid's hash ([`OperatorId::from_uid`]).
    pub fn register_operator(&self, uid: &str, parallelism: u32, max_parallelism: u32) -> Result<(), CheckpointError> {
        self.register_operator_with_id(uid, OperatorId::from_uid(uid), parallelism, max_parallelism)
    }

    /// [`SnapshotWriter::register_operator`] with the operator id given: a rewrite keeps
    /// the ids of its input's operators (Apache Flink matches state to operators by id, and
    /// a Flink 1.x snapshot names operators by id alone).
    pub fn register_operator_with_id(
        &self,
        uid: &str,
        id: OperatorId,
        parallelism: u32,
        max_parallelism: u32,
    ) -> Result<(), CheckpointError> {
        keygroup::check_parallelism(parallelism, max_parallelism)?;
        let mut ops = self.lock();
        if ops.iter().any(|o| o.uid == uid) {
            return Err(InvalidRequest::RegisteredTwice { uid: uid.to_string() }.into());
        }
        if let Some(other) = ops.iter().find(|o| o.id == id) {
            return Err(InvalidRequest::IdCollision {
                uid: uid.to_string(),
                other: other.uid.clone(),
                id,
            }
            .into());
        }
        ops.push(OperatorBuilder {
            uid: uid.to_string(),
            id,
            parallelism,
            max_parallelism,
            scheme: None,
            subtasks: (0..parallelism).map(|_| None).collect(),
        });
        Ok(())
    }

    /// Records the rule that put operator `uid`'s keys in their key groups (statekit's
    /// unless set, or learnt from the first subtask view written): a conversion of Apache
    /// Flink state keeps Flink's. Fails when a subtask already written says otherwise.
    pub fn set_key_group_scheme(&self, uid: &str, scheme: KeyGroupScheme) -> Result<(), CheckpointError> {
        let mut ops = self.lock();
        let op = ops
            .iter_mut()
            .find(|o| o.uid == uid)
            .ok_or_else(|| CheckpointError::from(InvalidRequest::NotRegistered { uid: uid.to_string() }))?;
        agree_scheme(uid, &mut op.scheme, scheme)
    }

    /// Declares an operator all of whose subtasks have finished and hold no state.
    pub fn register_finished_operator(
        &self,
        uid: &str,
        parallelism: u32,
        max_parallelism: u32,
    ) -> Result<(), CheckpointError> {
        self.register_operator(uid, parallelism, max_parallelism)?;
        for i in 0..parallelism {
            self.write_subtask(uid, i, None, None, true)?;
        }
        Ok(())
    }

    fn operator_shape(&self, uid: &str) -> Result<(OperatorId, u32, u32), CheckpointError> {
        self.lock()
            .iter()
            .find(|o| o.uid == uid)
            .map(|o| (o.id, o.parallelism, o.max_parallelism))
            .ok_or_else(|| CheckpointError::from(InvalidRequest::NotRegistered { uid: uid.to_string() }))
    }

    /// [`Self::operator_shape`] of an operator that has a subtask `index`.
    fn subtask_shape(&self, uid: &str, index: u32) -> Result<(OperatorId, u32, u32), CheckpointError> {
        let shape = self.operator_shape(uid)?;
        if index >= shape.1 {
            return Err(InvalidRequest::SubtaskPastParallelism {
                uid: uid.to_string(),
                index,
                parallelism: shape.1,
            }
            .into());
        }
        Ok(shape)
    }

    /// Writes the state of subtask `index` of operator `uid`: its keyed state (the
    /// frozen view of its backend) and its operator state. `finished` records that the
    /// subtask's input had ended. Safe to call from several threads at once.
    pub fn write_subtask(
        &self,
        uid: &str,
        index: u32,
        keyed: Option<&dyn KeyedStateView>,
        operator: Option<&OperatorStateSnapshot>,
        finished: bool,
    ) -> Result<SubtaskMetadata, CheckpointError> {
        self.record_subtask(uid, index, KeyedPart::View(keyed), operator, finished)
    }

    /// Writes subtask `index` of operator `uid` with its keyed state copied block by block
    /// from the canonical keyed data file `keyed` ([`statekit_format::transcode_keyed_file`]:
    /// blocks recompressed with this writer's codec, records not re-encoded), its states
    /// named as in `states` (same kinds, in the file's order). The file must hold exactly the
    /// subtask's key groups under the operator's max parallelism. Operator state and
    /// `finished` as in [`SnapshotWriter::write_subtask`].
    pub fn write_subtask_transcoded(
        &self,
        uid: &str,
        index: u32,
        keyed: &KeyedFileReader,
        states: Vec<StateDescriptor>,
        operator: Option<&OperatorStateSnapshot>,
        finished: bool,
    ) -> Result<SubtaskMetadata, CheckpointError> {
        self.record_subtask(uid, index, KeyedPart::Transcode(keyed, states), operator, finished)
    }

    /// Records subtask `index` of operator `uid` from data files the caller has already put
    /// in the snapshot directory (for example hard links of another snapshot's files, which
    /// are immutable once committed): `keyed` and `operator` name them relative to the
    /// directory, with their sizes, and `keyed_states` / `operator_states` are the states each
    /// file holds. The subtask's key groups are its range under the registered parallelism;
    /// the files are not read (they must hold state of that range, with the operator's max
    /// parallelism). Safe to call from several threads at once.
    pub fn add_existing_subtask(
        &self,
        uid: &str,
        index: u32,
        keyed: Option<(FileRef, KeyedStats, Vec<StateDescriptor>)>,
        operator: Option<(FileRef, Vec<OperatorStateDescriptor>)>,
        finished: bool,
    ) -> Result<SubtaskMetadata, CheckpointError> {
        let (_, parallelism, max_parallelism) = self.subtask_shape(uid, index)?;
        let (keyed_ref, keyed_stats, keyed_states) = match keyed {
            Some((f, stats, states)) => (Some(f), Some(stats), states),
            None => (None, None, Vec::new()),
        };
        let (operator_ref, operator_states) = match operator {
            Some((f, states)) => (Some(f), states),
            None => (None, Vec::new()),
        };
        let meta = SubtaskMetadata {
            index,
            key_groups: KeyGroupRange::for_subtask(max_parallelism, parallelism, index),
            finished,
            keyed: keyed_ref.map_or(KeyedHandle::None, KeyedHandle::Canonical),
            keyed_stats,
            operator: operator_ref,
        };
        self.store_subtask(uid, index, meta, keyed_states, operator_states)
    }

    /// Records a written subtask (once).
    fn store_subtask(
        &self,
        uid: &str,
        index: u32,
        meta: SubtaskMetadata,
        keyed_states: Vec<StateDescriptor>,
        operator_states: Vec<OperatorStateDescriptor>,
    ) -> Result<SubtaskMetadata, CheckpointError> {
        let mut ops = self.lock();
        let op = ops
            .iter_mut()
            .find(|o| o.uid == uid)
            .ok_or_else(|| CheckpointError::from(InvalidRequest::NotRegistered { uid: uid.to_string() }))?;
        let slot = op.subtasks.get_mut(index as usize).ok_or_else(|| {
            CheckpointError::from(InvalidRequest::NoSubtask {
                uid: uid.to_string(),
                index,
            })
        })?;
        if slot.is_some() {
            return Err(InvalidRequest::WrittenTwice {
                uid: uid.to_string(),
                index,
            }
            .into());
        }
        *slot = Some(SubtaskResult {
            meta: meta.clone(),
            keyed_states,
            operator_states,
        });
        Ok(meta)
    }

    fn record_subtask(
        &self,
        uid: &str,
        index: u32,
        keyed: KeyedPart<'_>,
        operator: Option<&OperatorStateSnapshot>,
        finished: bool,
    ) -> Result<SubtaskMetadata, CheckpointError> {
        let (id, parallelism, max_parallelism) = self.subtask_shape(uid, index)?;
        let range = KeyGroupRange::for_subtask(max_parallelism, parallelism, index);
        let mut keyed_states = Vec::new();
        let mut keyed_stats = None;
        let keyed_handle = match keyed {
            KeyedPart::View(Some(view)) if !view.states().is_empty() => {
                if view.max_parallelism() != max_parallelism {
                    return Err(InvalidRequest::BackendMaxParallelism {
                        uid: uid.to_string(),
                        index,
                        backend: view.max_parallelism(),
                        operator: max_parallelism,
                    }
                    .into());
                }
                self.set_key_group_scheme(uid, view.key_group_scheme())?;
                let name = format!("{id}-{index}-keyed.skd");
                let info = write_keyed_file(
                    view,
                    range,
                    self.storage.as_ref(),
                    &join(&self.dir, &name),
                    &self.options,
                )?;
                keyed_states = view.states().to_vec();
                keyed_stats = Some(KeyedStats::from_info(&info));
                KeyedHandle::Canonical(FileRef {
                    scope: FileScope::Exclusive,
                    path: name,
                    size: info.file.size,
                })
            }
            KeyedPart::View(_) => KeyedHandle::None,
            KeyedPart::Transcode(file, states) => {
                if file.max_parallelism() != max_parallelism || file.key_group_range() != range {
                    return Err(InvalidRequest::FileKeyGroups {
                        uid: uid.to_string(),
                        index,
                        file: file.file_name().to_string(),
                        file_range: file.key_group_range(),
                        file_max_parallelism: file.max_parallelism(),
                        range,
                        max_parallelism,
                    }
                    .into());
                }
                let name = format!("{id}-{index}-keyed.skd");
                let info = transcode_keyed_file(
                    file,
                    &states,
                    self.storage.as_ref(),
                    &join(&self.dir, &name),
                    &self.options,
                )?;
                keyed_states = states;
                keyed_stats = Some(KeyedStats::from_info(&info));
                KeyedHandle::Canonical(FileRef {
                    scope: FileScope::Exclusive,
                    path: name,
                    size: info.file.size,
                })
            }
            KeyedPart::Native(handle, states) => {
                keyed_states = states;
                KeyedHandle::Native(handle)
            }
            KeyedPart::Changelog(handle, states) => {
                keyed_states = states;
                KeyedHandle::Changelog(handle)
            }
        };
        let mut operator_states = Vec::new();
        let operator_ref = match operator {
            Some(snap) if !snap.is_empty() => {
                let name = format!("{id}-{index}-operator.sko");
                let file = write_operator_file(snap, self.storage.as_ref(), &join(&self.dir, &name), &self.options)?;
                operator_states = snap.states.iter().map(|(d, _)| d.clone()).collect();
                Some(FileRef {
                    scope: FileScope::Exclusive,
                    path: name,
                    size: file.size,
                })
            }
            _ => None,
        };
        let meta = SubtaskMetadata {
            index,
            key_groups: range,
            finished,
            keyed: keyed_handle,
            keyed_stats,
            operator: operator_ref,
        };
        self.store_subtask(uid, index, meta, keyed_states, operator_states)
    }

    /// Builds the metadata (every registered subtask must have been written) without
    /// committing it.
    pub fn metadata(&self) -> Result<SnapshotMetadata, CheckpointError> {
        self.build_metadata(false)
    }

    /// The metadata of the subtasks written so far (the others left out): what one shard of
    /// a snapshot written by several independent tasks records, to be merged into the
    /// snapshot's `_metadata` by a final step.
    pub fn partial_metadata(&self) -> Result<SnapshotMetadata, CheckpointError> {
        self.build_metadata(true)
    }

    fn build_metadata(&self, partial: bool) -> Result<SnapshotMetadata, CheckpointError> {
        let ops = self.lock();
        let mut operators = Vec::with_capacity(ops.len());
        for op in ops.iter() {
            let mut keyed_states: Vec<StateDescriptor> = Vec::new();
            let mut operator_states: Vec<OperatorStateDescriptor> = Vec::new();
            let mut subtasks = Vec::with_capacity(op.subtasks.len());
            for (i, s) in op.subtasks.iter().enumerate() {
                let s = match s.as_ref() {
                    Some(s) => s,
                    None if partial => continue,
                    None => {
                        return Err(InvalidRequest::NotReported {
                            uid: op.uid.clone(),
                            index: i,
                        }
                        .into())
                    }
                };
                for d in &s.keyed_states {
                    match keyed_states.iter().find(|x| x.name == d.name) {
                        Some(x) => x
                            .check_compatible(d)
                            .map_err(|reason| InvalidRequest::SubtasksDisagree {
                                uid: op.uid.clone(),
                                index: i,
                                reason,
                            })?,
                        None => keyed_states.push(d.clone()),
                    }
                }
                for d in &s.operator_states {
                    match operator_states.iter().find(|x| x.name == d.name) {
                        Some(x) if x.mode != d.mode => {
                            return Err(InvalidRequest::OperatorStateModes {
                                uid: op.uid.clone(),
                                state: d.name.clone(),
                                first: x.mode,
                                other: d.mode,
                                index: i,
                            }
                            .into())
                        }
                        Some(_) => {}
                        None => operator_states.push(d.clone()),
                    }
                }
                subtasks.push(s.meta.clone());
            }
            operators.push(OperatorMetadata {
                uid: op.uid.clone(),
                operator_id: op.id,
                parallelism: op.parallelism,
                max_parallelism: op.max_parallelism,
                finished: subtasks.iter().all(|s| s.finished),
                key_group_scheme: op.scheme.unwrap_or_default(),
                keyed_states,
                operator_states,
                subtasks,
            });
        }
        let subtasks = || operators.iter().flat_map(|o| &o.subtasks);
        let format = if subtasks().any(|s| s.keyed.native().is_some()) {
            SnapshotFormat::Native
        } else if subtasks().any(|s| s.keyed.changelog().is_some()) {
            SnapshotFormat::Changelog
        } else {
            SnapshotFormat::Canonical
        };
        Ok(SnapshotMetadata {
            kind: self.kind,
            format,
            checkpoint_id: self.checkpoint_id,
            job_id: self.job_id.clone(),
            timestamp_ms: self.timestamp_ms,
            properties: self.properties.clone(),
            operators,
        })
    }

    /// Commits `_metadata` atomically and only if none is there ([`Storage::put_new`]: a
    /// fsynced temporary file hard-linked into place on local disk, a conditional `PUT` on an
    /// object store), so of two writers racing for one directory exactly one completes it.
    /// From this moment the snapshot is complete.
    pub fn finish(self) -> Result<SnapshotMetadata, CheckpointError> {
        let meta = self.metadata()?;
        let bytes = encode_metadata(&meta);
        self.storage.put_new(&join(&self.dir, METADATA_FILE_NAME), &bytes)?;
        tracing::debug!(dir = %self.storage.describe(&self.dir), "snapshot committed");
        Ok(meta)
    }

    /// Gives up: deletes the directory and everything written so far.
    pub fn abort(self) -> Result<(), CheckpointError> {
        self.storage.delete_dir_all(&self.dir)?;
        Ok(())
    }
}

/// Records `scheme` as an operator's, or checks it agrees with the one recorded.
fn agree_scheme(
    uid: &str,
    recorded: &mut Option<KeyGroupScheme>,
    scheme: KeyGroupScheme,
) -> Result<(), CheckpointError> {
    match *recorded {
        None => *recorded = Some(scheme),
        Some(s) if s == scheme => {}
        Some(s) => {
            return Err(InvalidRequest::SchemeMismatch {
                uid: uid.to_string(),
                operator: s,
                subtask: scheme,
            }
            .into())
        }
    }
    Ok(())
}
