//! Reading a snapshot and handing state to (possibly rescaled) subtasks.

use crate::error::{CheckpointError, InvalidRequest};
use statekit_core::storage::{Storage, SubdirStorage};
use statekit_core::{keygroup, redistribute, KeyGroupRange, KeyedStateBackend, KeyedStateView, OperatorStateSnapshot};
use statekit_format::{
    read_metadata, read_operator_file, verify_snapshot_files, FileRef, FileResolver, KeyedFileReader, OperatorMetadata,
    ResolvedChangelogHandle, ResolvedFile, ResolvedNativeFile, ResolvedNativeHandle, SnapshotMetadata,
    SnapshotVerifyReport, METADATA_FILE_NAME,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Resolves a snapshot pointer: a snapshot directory, or its `_metadata` file. Returns the
/// directory.
pub fn resolve_snapshot_path(path: &Path) -> Result<PathBuf, CheckpointError> {
    let shown = path.display().to_string();
    let md = std::fs::metadata(path).map_err(|e| CheckpointError::NotASnapshot {
        path: shown.clone(),
        reason: e.to_string(),
    })?;
    if md.is_dir() {
        match std::fs::metadata(path.join(METADATA_FILE_NAME)) {
            Ok(m) if m.is_file() => {}
            Ok(m) => {
                return Err(CheckpointError::NotASnapshot {
                    path: shown,
                    reason: format!(
                        "its {METADATA_FILE_NAME} is {}, not a regular file",
                        statekit_core::storage::file_type_name(m.file_type())
                    ),
                })
            }
            Err(_) => {
                return Err(CheckpointError::NotASnapshot {
                    path: shown,
                    reason: format!("no {METADATA_FILE_NAME} file (not a snapshot, or an incomplete one)"),
                })
            }
        }
        Ok(path.to_path_buf())
    } else if !md.is_file() {
        // A FIFO or device named as `_metadata` is refused by its type: opening it to read
        // its magic would wait for a writer forever.
        Err(CheckpointError::NotASnapshot {
            path: shown,
            reason: format!(
                "it is {}, not a regular file",
                statekit_core::storage::file_type_name(md.file_type())
            ),
        })
    } else {
        let parent = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        Ok(parent.to_path_buf())
    }
}

/// Whether the file starts with the magic number of Flink's `_metadata`.
fn is_flink_file(path: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 4];
    // Opened as a regular file only: a FIFO would block the open.
    statekit_core::storage::open_regular_file(path)
        .ok()
        .is_some_and(|(mut f, _)| f.read_exact(&mut head).is_ok() && statekit_flink::is_flink_metadata(&head))
}

/// A file a snapshot references, located.
#[derive(Clone, Debug)]
pub struct ReferencedFile {
    /// The reference as `_metadata` records it.
    pub file: FileRef,
    /// Its identity ([`FileResolver::identity`]): the absolute path for local files.
    pub identity: String,
    /// The storage holding it.
    pub storage: Arc<dyn Storage>,
    /// Its path inside `storage`.
    pub path: String,
}

/// An open checkpoint or savepoint.
#[derive(Debug, Clone)]
pub struct SnapshotReader {
    storage: Arc<dyn Storage>,
    resolver: FileResolver,
    metadata: SnapshotMetadata,
    /// Set when the snapshot is Apache Flink's own (its `_metadata` mapped into `metadata`).
    flink: Option<Arc<statekit_flink::FlinkSnapshot>>,
}

impl SnapshotReader {
    /// Opens a snapshot on the local filesystem by its directory or its `_metadata` file.
    ///
    /// `_metadata` must decode and be structurally sound ([`statekit_format::check_metadata`]:
    /// consistent parallelism and key-group ranges, no file referenced by two subtasks, a
    /// self-contained savepoint, …), so nothing restores, dumps or compares half of a
    /// snapshot that `verify` rejects.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, CheckpointError> {
        Self::open_impl(path.as_ref(), true, &statekit_flink::FlinkOpenOptions::default())
    }

    /// Opens a snapshot like [`SnapshotReader::open`]; an Apache Flink snapshot is opened
    /// with `flink` (uids to name its operators by, roots to re-root moved absolute paths).
    pub fn open_with(
        path: impl AsRef<Path>,
        flink: &statekit_flink::FlinkOpenOptions,
    ) -> Result<Self, CheckpointError> {
        Self::open_impl(path.as_ref(), true, flink)
    }

    /// Opens a snapshot like [`SnapshotReader::open`] without the structural checks, for
    /// [`SnapshotReader::verify`] to list every problem of a snapshot `open` refuses. Nothing
    /// but verification should act on what it returns.
    pub fn open_unchecked(path: impl AsRef<Path>) -> Result<Self, CheckpointError> {
        Self::open_impl(path.as_ref(), false, &statekit_flink::FlinkOpenOptions::default())
    }

    /// [`SnapshotReader::open_unchecked`] with `flink` for an Apache Flink snapshot (uids,
    /// `--flink-root` places its handles may be read from).
    pub fn open_unchecked_with(
        path: impl AsRef<Path>,
        flink: &statekit_flink::FlinkOpenOptions,
    ) -> Result<Self, CheckpointError> {
        Self::open_impl(path.as_ref(), false, flink)
    }

    fn open_impl(
        path: &Path,
        checked: bool,
        flink: &statekit_flink::FlinkOpenOptions,
    ) -> Result<Self, CheckpointError> {
        let dir = resolve_snapshot_path(path)?;
        let metadata_name = match std::fs::metadata(path) {
            Ok(md) if md.is_file() => path
                .file_name()
                .map(|n| n.to_string_lossy().to_string())
                .unwrap_or_else(|| METADATA_FILE_NAME.to_string()),
            _ => METADATA_FILE_NAME.to_string(),
        };
        let resolver = FileResolver::local(&dir);
        let storage = resolver.snapshot().clone();
        if is_flink_file(&dir.join(&metadata_name)) {
            let flink = statekit_flink::FlinkSnapshot::open(&dir.join(&metadata_name), flink)?;
            if checked {
                refuse_outside_handles(&flink)?;
            }
            return Ok(Self::from_flink(storage, resolver, flink));
        }
        let metadata = if checked {
            read_metadata(storage.as_ref(), &metadata_name)?
        } else {
            let blob = storage.open(&metadata_name)?;
            statekit_format::decode_metadata(blob.bytes(), &storage.describe(&metadata_name))?
        };
        Ok(SnapshotReader {
            storage,
            resolver,
            metadata,
            flink: None,
        })
    }

    fn from_flink(storage: Arc<dyn Storage>, resolver: FileResolver, flink: statekit_flink::FlinkSnapshot) -> Self {
        SnapshotReader {
            storage,
            resolver,
            metadata: flink.to_statekit(),
            flink: Some(Arc::new(flink)),
        }
    }

    /// The Apache Flink snapshot behind this reader, when it is one.
    pub fn flink(&self) -> Option<&statekit_flink::FlinkSnapshot> {
        self.flink.as_deref()
    }

    /// Fails with [`CheckpointError::Unsupported`] when the snapshot's state data cannot be
    /// read by statekit's own file readers (an Apache Flink snapshot: its state is read
    /// through [`SnapshotReader::flink_keyed_views`] and the operator state methods, not as
    /// statekit files), for commands that copy or rewrite data files as they are.
    pub fn check_state_readable(&self) -> Result<(), CheckpointError> {
        self.state_data("data files as statekit files (convert and rewrite copy them)")
    }

    /// Reads what state data a command needs beyond `_metadata`: for an Apache Flink
    /// snapshot, the keyed states each operator declares (names, kinds, types: they are in the
    /// heads of the state streams, not in `_metadata`), read from the first bytes of one
    /// stream per operator. Nothing for statekit's own snapshots, whose `_metadata` has them.
    /// Fails with [`CheckpointError::Unsupported`] for Flink keyed state in a form not read yet.
    pub fn load_state_schema(&mut self) -> Result<(), CheckpointError> {
        let Some(f) = self.flink.clone() else {
            return Ok(());
        };
        for (op, meta) in f.metadata().operators.iter().zip(self.metadata.operators.iter_mut()) {
            meta.keyed_states = f.keyed_descriptors(op)?;
            meta.operator_states = f.operator_descriptors(op)?;
        }
        Ok(())
    }

    /// For an Apache Flink snapshot, the parts of its operators' states that statekit keeps
    /// as bytes, by operator uid, each with the serializer that wrote it (empty for
    /// statekit's own snapshots, whose values are all typed).
    pub fn flink_opaque_parts(&self) -> Result<Vec<(String, statekit_flink::OpaquePart)>, CheckpointError> {
        let Some(f) = &self.flink else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for (op, meta) in f.metadata().operators.iter().zip(self.metadata.operators.iter()) {
            for p in f.opaque_parts(op)? {
                out.push((meta.uid.clone(), p));
            }
        }
        Ok(out)
    }

    /// For an Apache Flink snapshot, one view per subtask of operator `uid` overlapping
    /// `range` (`None` for statekit's own snapshots: their views come from
    /// [`SnapshotReader::keyed_readers`] and the native and changelog handles).
    pub fn flink_keyed_views(
        &self,
        uid: &str,
        range: KeyGroupRange,
    ) -> Result<Option<Vec<Box<dyn KeyedStateView>>>, CheckpointError> {
        let Some(f) = &self.flink else {
            return Ok(None);
        };
        let id = self.operator(uid)?.operator_id;
        let op = f
            .metadata()
            .operator(&id)
            .ok_or_else(|| CheckpointError::from(InvalidRequest::NotInFlinkSnapshot { id }))?;
        Ok(Some(f.keyed_views(op, range)?))
    }

    /// The key group `key` (in statekit's value encoding of `schema`) belongs to in
    /// operator `uid` of this snapshot, under the operator's key-group scheme (statekit's
    /// rule, or Flink's `murmurHash(hashCode)` for state that came from Apache Flink,
    /// [`OperatorMetadata::key_group_of`]). `None` when the rule needs a `hashCode` statekit
    /// cannot compute (a Flink key of another type): then every key group must be searched.
    pub fn key_group_of(&self, uid: &str, key: &[u8], schema: &statekit_core::TypeSchema) -> Option<u32> {
        self.operator(uid).ok()?.key_group_of(key, schema).ok()
    }

    /// Refuses reading state data of a Flink snapshot (not built yet).
    fn state_data(&self, what: &str) -> Result<(), CheckpointError> {
        match &self.flink {
            Some(f) => Err(CheckpointError::Unsupported {
                snapshot: f.metadata_file().display().to_string(),
                what: format!(
                    "an Apache Flink snapshot: its _metadata is read (`statekit show`), but reading its {what} is not built yet"
                ),
            }),
            None => Ok(()),
        }
    }

    /// Opens the snapshot at `location`: a local path as [`SnapshotReader::open_with`] (a
    /// directory or its `_metadata` file); on a storage (an object store), the snapshot
    /// directory or its `_metadata` object, with shared files resolved against the enclosing
    /// directory (the job directory of a checkpoint). Reading `_metadata` is one request.
    pub fn open_location(
        location: &statekit_core::location::Location,
        flink: &statekit_flink::FlinkOpenOptions,
    ) -> Result<Self, CheckpointError> {
        Self::open_location_impl(location, true, flink)
    }

    /// [`SnapshotReader::open_location`] without the structural checks (for `verify`).
    pub fn open_location_unchecked(location: &statekit_core::location::Location) -> Result<Self, CheckpointError> {
        Self::open_location_impl(location, false, &statekit_flink::FlinkOpenOptions::default())
    }

    /// [`SnapshotReader::open_location_unchecked`] with `flink` for an Apache Flink snapshot.
    pub fn open_location_unchecked_with(
        location: &statekit_core::location::Location,
        flink: &statekit_flink::FlinkOpenOptions,
    ) -> Result<Self, CheckpointError> {
        Self::open_location_impl(location, false, flink)
    }

    fn open_location_impl(
        location: &statekit_core::location::Location,
        checked: bool,
        flink: &statekit_flink::FlinkOpenOptions,
    ) -> Result<Self, CheckpointError> {
        use statekit_core::location::Location;
        if let Location::Local(p) = location {
            return Self::open_impl(p, checked, flink);
        }
        let m = StoredMetadata::fetch(location)?;
        if statekit_flink::is_flink_metadata(m.blob.bytes()) {
            let snapshot = m.open_flink(flink)?;
            if checked {
                refuse_outside_handles(&snapshot)?;
            }
            let resolver = m.resolver()?;
            return Ok(Self::from_flink(m.storage.clone(), resolver, snapshot));
        }
        Self::from_stored_metadata(&m, checked)
    }

    /// The statekit snapshot whose `_metadata` [`StoredMetadata::fetch`] began to read (the
    /// rest of it is fetched here: one request for a small file, as a whole read would be).
    pub fn from_stored_metadata(m: &StoredMetadata, checked: bool) -> Result<Self, CheckpointError> {
        m.fetch_all()?;
        let file = m.storage.describe(METADATA_FILE_NAME);
        let metadata = if checked {
            let r = statekit_format::check_metadata(m.blob.bytes(), &file);
            if r.is_err() {
                statekit_core::storage::check_intact(m.blob.as_ref(), &file)
                    .map_err(statekit_format::FormatError::from)?;
            }
            r?
        } else {
            statekit_format::decode_metadata(m.blob.bytes(), &file)?
        };
        Ok(SnapshotReader {
            storage: m.storage.clone(),
            resolver: m.resolver()?,
            metadata,
            flink: None,
        })
    }

    /// The snapshot in directory `dir` of `storage` (one read of its `_metadata`, checked or
    /// only decoded); shared files resolve against `job_dir`, absolute ones on the local file
    /// system when `local_absolute`. An Apache Flink `_metadata` opens the Flink snapshot with
    /// `flink`, its files fetched from the storage when first read
    /// ([`statekit_flink::FlinkSnapshot::open_stored`]).
    fn open_stored(
        storage: Arc<dyn Storage>,
        dir: &str,
        job_dir: Option<&str>,
        checked: bool,
        local_absolute: bool,
        flink: &statekit_flink::FlinkOpenOptions,
    ) -> Result<Self, CheckpointError> {
        let storage_root = storage.clone();
        let snap: Arc<dyn Storage> = Arc::new(SubdirStorage::new(storage.clone(), dir)?);
        let mut resolver = FileResolver::new(snap.clone());
        if local_absolute {
            resolver = resolver.with_local_absolute();
        }
        if let Some(j) = job_dir {
            resolver = resolver.with_job(Arc::new(SubdirStorage::new(storage, j)?));
        }
        // Opened by ranges (a small object comes whole with the first GET, as with `open`):
        // a Flink `_metadata` larger than statekit reads is refused by its size before its
        // bytes are fetched.
        let blob = snap
            .open_ranged(METADATA_FILE_NAME)
            .map_err(statekit_format::FormatError::from)?;
        let file = snap.describe(METADATA_FILE_NAME);
        let size = blob.bytes().len() as u64;
        blob.fetch(0, 4).map_err(statekit_format::FormatError::from)?;
        if statekit_flink::is_flink_metadata(blob.bytes()) {
            statekit_flink::check_metadata_size(size, &file)?;
        }
        blob.fetch(0, size).map_err(statekit_format::FormatError::from)?;
        if statekit_flink::is_flink_metadata(blob.bytes()) {
            // When it was written (Flink writes `_metadata` last): one listing of the directory.
            let written_ms = snap
                .list("")
                .ok()
                .and_then(|l| l.into_iter().find(|e| e.name == METADATA_FILE_NAME))
                .map_or(0, |e| e.modified_ms);
            let root = storage_root.clone();
            let flink = statekit_flink::FlinkSnapshot::open_stored(
                root,
                dir,
                &snap.describe(""),
                blob.bytes(),
                written_ms,
                flink,
            )?;
            if checked {
                refuse_outside_handles(&flink)?;
            }
            return Ok(Self::from_flink(snap, resolver, flink));
        }
        let metadata = if checked {
            let r = statekit_format::check_metadata(blob.bytes(), &file);
            if r.is_err() {
                statekit_core::storage::check_intact(blob.as_ref(), &file)
                    .map_err(statekit_format::FormatError::from)?;
            }
            r?
        } else {
            statekit_format::decode_metadata(blob.bytes(), &file)?
        };
        Ok(SnapshotReader {
            storage: snap,
            resolver,
            metadata,
            flink: None,
        })
    }

    /// Opens the snapshot in directory `dir` of `storage`; shared files resolve against
    /// `job_dir` when given.
    pub fn open_in(storage: Arc<dyn Storage>, dir: &str, job_dir: Option<&str>) -> Result<Self, CheckpointError> {
        Self::open_stored(
            storage,
            dir,
            job_dir,
            true,
            true,
            &statekit_flink::FlinkOpenOptions::default(),
        )
    }

    /// The snapshot's metadata.
    pub fn metadata(&self) -> &SnapshotMetadata {
        &self.metadata
    }

    /// Storage rooted at the snapshot directory.
    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.storage
    }

    /// The operator with this uid.
    ///
    /// In an Apache Flink snapshot, whose `_metadata` keeps only operator ids before Flink 2.0,
    /// `uid` also matches the operator whose id is the uid's hash (as Flink derives it), or
    /// whose id it is (32 hex digits).
    pub fn operator(&self, uid: &str) -> Result<&OperatorMetadata, CheckpointError> {
        let by_id = || {
            let find = |id: statekit_core::OperatorId| self.metadata.operators.iter().find(|o| o.operator_id == id);
            find(statekit_core::OperatorId::from_uid(uid)).or_else(|| uid.parse().ok().and_then(find))
        };
        self.metadata
            .operator(uid)
            .or_else(|| self.flink.as_ref().and_then(|_| by_id()))
            .ok_or_else(|| CheckpointError::UnknownOperator {
                snapshot: self.storage.describe(METADATA_FILE_NAME),
                uid: uid.to_string(),
                known: self.metadata.operators.iter().map(|o| o.uid.clone()).collect(),
            })
    }

    /// Resolves the snapshot's file references.
    pub fn resolver(&self) -> &FileResolver {
        &self.resolver
    }

    fn open_ref(&self, file: &FileRef) -> Result<(Arc<dyn Storage>, String), CheckpointError> {
        Ok(self.resolver.resolve(file)?)
    }

    /// True when some subtask of operator `uid` holds its keyed state as native files.
    pub fn is_native(&self, uid: &str) -> Result<bool, CheckpointError> {
        Ok(self.operator(uid)?.subtasks.iter().any(|s| s.keyed.native().is_some()))
    }

    /// The native keyed handles of operator `uid` whose key groups overlap `range`, with every
    /// file resolved (for a backend that restores from its native files).
    pub fn native_handles(
        &self,
        uid: &str,
        range: KeyGroupRange,
    ) -> Result<Vec<ResolvedNativeHandle>, CheckpointError> {
        let op = self.operator(uid)?;
        let mut out = Vec::new();
        for s in &op.subtasks {
            let Some(handle) = s.keyed.native() else { continue };
            if s.key_groups.intersection(&range).is_empty() {
                continue;
            }
            let mut files = Vec::with_capacity(handle.files.len());
            for f in &handle.files {
                let (storage, path) = self.open_ref(&f.file)?;
                files.push(ResolvedNativeFile {
                    file: f.clone(),
                    storage,
                    path,
                });
            }
            out.push(ResolvedNativeHandle {
                subtask: s.index,
                key_groups: s.key_groups,
                max_parallelism: op.max_parallelism,
                states: op.keyed_states.clone(),
                handle: handle.clone(),
                files,
            });
        }
        Ok(out)
    }

    /// True when some subtask of operator `uid` holds its keyed state as a changelog handle.
    pub fn is_changelog(&self, uid: &str) -> Result<bool, CheckpointError> {
        Ok(self
            .operator(uid)?
            .subtasks
            .iter()
            .any(|s| s.keyed.changelog().is_some()))
    }

    /// The changelog handles of operator `uid` whose key groups overlap `range`, with every
    /// file resolved (for the changelog crate to restore from or read).
    pub fn changelog_handles(
        &self,
        uid: &str,
        range: KeyGroupRange,
    ) -> Result<Vec<ResolvedChangelogHandle>, CheckpointError> {
        let op = self.operator(uid)?;
        let mut out = Vec::new();
        for s in &op.subtasks {
            let Some(handle) = s.keyed.changelog() else { continue };
            if s.key_groups.intersection(&range).is_empty() {
                continue;
            }
            let resolve = |f: &FileRef| -> Result<ResolvedFile, CheckpointError> {
                let (storage, path) = self.open_ref(f)?;
                Ok(ResolvedFile {
                    storage,
                    path,
                    size: f.size,
                })
            };
            out.push(ResolvedChangelogHandle {
                subtask: s.index,
                key_groups: s.key_groups,
                max_parallelism: op.max_parallelism,
                states: op.keyed_states.clone(),
                handle: handle.clone(),
                materialized: handle
                    .materialized
                    .iter()
                    .map(|m| resolve(&m.file))
                    .collect::<Result<_, _>>()?,
                tail: handle.tail.iter().map(|t| resolve(&t.file)).collect::<Result<_, _>>()?,
            });
        }
        Ok(out)
    }

    /// Every file the snapshot references (data files and native files, any scope).
    pub fn referenced_files(&self) -> Result<Vec<ReferencedFile>, CheckpointError> {
        self.state_data("files")?;
        let mut out = Vec::new();
        for op in &self.metadata.operators {
            for s in &op.subtasks {
                for f in s.files() {
                    let (storage, path) = self.open_ref(f)?;
                    let identity = self.resolver.identity(f)?;
                    out.push(ReferencedFile {
                        file: f.clone(),
                        identity,
                        storage,
                        path,
                    });
                }
            }
        }
        Ok(out)
    }

    /// Opens the keyed data files of operator `uid` whose key groups overlap `range`.
    pub fn keyed_readers(&self, uid: &str, range: KeyGroupRange) -> Result<Vec<KeyedFileReader>, CheckpointError> {
        self.state_data("keyed state")?;
        let op = self.operator(uid)?;
        let mut out = Vec::new();
        for s in &op.subtasks {
            if let Some(file) = s.keyed.canonical() {
                if !s.key_groups.intersection(&range).is_empty() {
                    let (storage, path) = self.open_ref(file)?;
                    out.push(KeyedFileReader::open(storage.as_ref(), &path, Some(file.size))?);
                }
            }
        }
        Ok(out)
    }

    /// Restores operator `uid`'s canonical keyed state into `backend`, which may own any
    /// key-group range of the same max parallelism (rescaling). Native and changelog state are
    /// refused here: `statekit_snapshot::open_keyed` (the layer above the backends) restores
    /// every snapshot kind.
    pub fn restore_keyed(&self, uid: &str, backend: &mut dyn KeyedStateBackend) -> Result<(), CheckpointError> {
        self.state_data("keyed state")?;
        let op = self.operator(uid)?;
        if backend.max_parallelism() != op.max_parallelism {
            return Err(InvalidRequest::MaxParallelism {
                uid: uid.to_string(),
                snapshot: op.max_parallelism,
                backend: backend.max_parallelism(),
            }
            .into());
        }
        if op
            .subtasks
            .iter()
            .any(|s| s.keyed.native().is_some() && !s.key_groups.intersection(&backend.key_group_range()).is_empty())
        {
            let backend_name = op
                .subtasks
                .iter()
                .find_map(|s| s.keyed.native())
                .map(|n| n.backend.clone())
                .unwrap_or_default();
            return Err(InvalidRequest::NativeState {
                metadata: self.storage.describe(METADATA_FILE_NAME),
                uid: uid.to_string(),
                backend: backend_name.to_string(),
            }
            .into());
        }
        if op
            .subtasks
            .iter()
            .any(|s| s.keyed.changelog().is_some() && !s.key_groups.intersection(&backend.key_group_range()).is_empty())
        {
            return Err(InvalidRequest::ChangelogState {
                metadata: self.storage.describe(METADATA_FILE_NAME),
                uid: uid.to_string(),
            }
            .into());
        }
        let readers = self.keyed_readers(uid, backend.key_group_range())?;
        let views: Vec<&dyn KeyedStateView> = readers.iter().map(|r| r as &dyn KeyedStateView).collect();
        backend.restore(&views)?;
        Ok(())
    }

    /// The operator state subtask `index` of `new_parallelism` gets, redistributed with
    /// Flink's rules (list split, union to all, broadcast copied). Reads every subtask's file
    /// once; to hand state to every new subtask, [`SnapshotReader::operator_states`] reads
    /// them once for all.
    pub fn operator_state(
        &self,
        uid: &str,
        new_parallelism: u32,
        index: u32,
    ) -> Result<OperatorStateSnapshot, CheckpointError> {
        if index >= new_parallelism {
            return Err(InvalidRequest::SubtaskIndex {
                index,
                parallelism: new_parallelism,
            }
            .into());
        }
        let mut all = self.operator_states(uid, new_parallelism)?;
        Ok(all.swap_remove(index as usize))
    }

    /// The operator state of every subtask of `new_parallelism`, redistributed with Flink's
    /// rules: each stored file is read once.
    pub fn operator_states(
        &self,
        uid: &str,
        new_parallelism: u32,
    ) -> Result<Vec<OperatorStateSnapshot>, CheckpointError> {
        let op = self.operator(uid)?;
        keygroup::check_parallelism(new_parallelism, op.max_parallelism)?;
        let old = (0..op.subtasks.len() as u32)
            .map(|i| self.stored_operator_state(uid, i))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(redistribute(&old, new_parallelism)?)
    }

    /// The operator state subtask `index` of operator `uid` stored, as written (not
    /// redistributed); empty when it stored none. Callers that report progress read the
    /// subtasks one by one with this and redistribute with [`statekit_core::redistribute`].
    pub fn stored_operator_state(&self, uid: &str, index: u32) -> Result<OperatorStateSnapshot, CheckpointError> {
        let op = self.operator(uid)?;
        // A Flink snapshot's metadata has a subtask per index too, so the bound is the same.
        let s = op.subtasks.get(index as usize).ok_or_else(|| {
            CheckpointError::from(InvalidRequest::NoStoredSubtask {
                uid: uid.to_string(),
                subtasks: op.subtasks.len(),
                index,
            })
        })?;
        if let Some(f) = &self.flink {
            let id = op.operator_id;
            let fop = f
                .metadata()
                .operator(&id)
                .ok_or_else(|| CheckpointError::from(InvalidRequest::NotInFlinkSnapshot { id }))?;
            return Ok(f.operator_state(fop, index)?);
        }
        Ok(match &s.operator {
            Some(file) => {
                let (storage, path) = self.open_ref(file)?;
                read_operator_file(storage.as_ref(), &path, Some(file.size))?
            }
            None => OperatorStateSnapshot::default(),
        })
    }

    /// Checks every byte of the snapshot.
    pub fn verify(&self) -> Result<SnapshotVerifyReport, CheckpointError> {
        if let Some(f) = &self.flink {
            return Ok(f.verify().into_format_report());
        }
        Ok(verify_snapshot_files(&self.resolver)?)
    }
}

/// The `_metadata` of a snapshot on a storage (an object store), its first bytes read — enough
/// for a reader to tell which family of snapshot it is — with the storages its files resolve
/// against.
pub struct StoredMetadata {
    /// The storage the location names.
    pub root: Arc<dyn Storage>,
    /// The snapshot directory inside `root` (`""`: its root).
    pub dir: String,
    /// The enclosing directory shared files resolve against (a checkpoint's job directory).
    pub job_dir: Option<String>,
    /// Storage rooted at the snapshot directory.
    pub storage: Arc<dyn Storage>,
    /// `_metadata`, opened by ranges: its first 4 bytes fetched.
    pub blob: Arc<dyn statekit_core::storage::Blob>,
}

impl std::fmt::Debug for StoredMetadata {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredMetadata")
            .field("metadata", &self.storage.describe(METADATA_FILE_NAME))
            .field("job_dir", &self.job_dir)
            .finish_non_exhaustive()
    }
}

impl StoredMetadata {
    /// Opens the `_metadata` of the snapshot directory (or `_metadata` object) `location`
    /// names and fetches its first 4 bytes (a small file comes whole with that one request).
    /// A location with no `_metadata` is [`InvalidRequest::NoMetadata`].
    pub fn fetch(location: &statekit_core::location::Location) -> Result<Self, CheckpointError> {
        use statekit_core::location::Location;
        let (root, path) = match location {
            Location::Stored { storage, path, .. } => (storage.clone(), path.clone()),
            Location::Local(p) => (
                Arc::new(statekit_core::storage::LocalStorage::new(p)) as Arc<dyn Storage>,
                String::new(),
            ),
        };
        let dir = match path.rsplit_once('/') {
            Some((d, METADATA_FILE_NAME)) => d.to_string(),
            None if path == METADATA_FILE_NAME => String::new(),
            _ => path,
        };
        let job = dir.rsplit_once('/').map_or("", |(j, _)| j).to_string();
        let job_dir = (!dir.is_empty()).then_some(job);
        let no_metadata = |e: statekit_core::storage::StorageError| -> CheckpointError {
            match e {
                statekit_core::storage::StorageError::NotFound(_) => InvalidRequest::NoMetadata {
                    location: location.display().to_string(),
                }
                .into(),
                e => statekit_format::FormatError::from(e).into(),
            }
        };
        let storage: Arc<dyn Storage> = Arc::new(SubdirStorage::new(root.clone(), &dir)?);
        let blob = storage.open_ranged(METADATA_FILE_NAME).map_err(no_metadata)?;
        blob.fetch(0, 4).map_err(no_metadata)?;
        Ok(StoredMetadata {
            root,
            dir,
            job_dir,
            storage,
            blob,
        })
    }

    /// Resolves the snapshot's file references: against its directory, shared files against
    /// the enclosing one.
    pub fn resolver(&self) -> Result<FileResolver, CheckpointError> {
        let resolver = FileResolver::new(self.storage.clone());
        Ok(match &self.job_dir {
            Some(j) => resolver.with_job(Arc::new(SubdirStorage::new(self.root.clone(), j)?)),
            None => resolver,
        })
    }

    /// The Apache Flink snapshot whose `_metadata` this is: refused by its size before the
    /// rest of its bytes are fetched, then opened with `options`, its files fetched from the
    /// storage when first read ([`statekit_flink::FlinkSnapshot::open_stored`]).
    pub fn open_flink(
        &self,
        options: &statekit_flink::FlinkOpenOptions,
    ) -> Result<statekit_flink::FlinkSnapshot, CheckpointError> {
        statekit_flink::check_metadata_size(self.size(), &self.storage.describe(METADATA_FILE_NAME))?;
        self.fetch_all()?;
        Ok(statekit_flink::FlinkSnapshot::open_stored(
            self.root.clone(),
            &self.dir,
            &self.storage.describe(""),
            self.blob.bytes(),
            self.written_ms(),
            options,
        )?)
    }

    /// The size of `_metadata`.
    pub fn size(&self) -> u64 {
        self.blob.bytes().len() as u64
    }

    /// Fetches the rest of `_metadata`.
    pub fn fetch_all(&self) -> Result<(), CheckpointError> {
        self.blob
            .fetch(0, self.size())
            .map_err(statekit_format::FormatError::from)?;
        Ok(())
    }

    /// When `_metadata` was written, by the storage's listing of the snapshot directory (one
    /// request; 0 when the listing does not say). A writer writes `_metadata` last.
    pub fn written_ms(&self) -> i64 {
        self.storage
            .list("")
            .ok()
            .and_then(|l| l.into_iter().find(|e| e.name == METADATA_FILE_NAME))
            .map_or(0, |e| e.modified_ms)
    }
}

/// Refuses a Flink snapshot whose `_metadata` has a handle that leads outside it by its text
/// alone ([`statekit_flink::FlinkSnapshot::handle_problems`]), as `_metadata`'s structural
/// problems are refused: only `verify` (which opens unchecked) goes on, to list them.
fn refuse_outside_handles(flink: &statekit_flink::FlinkSnapshot) -> Result<(), CheckpointError> {
    match flink.handle_problems().into_iter().next() {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}
