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
}

impl SnapshotReader {
    /// Opens a snapshot on the local filesystem by its directory or its `_metadata` file.
    ///
    /// `_metadata` must decode and be structurally sound ([`statekit_format::check_metadata`]:
    /// consistent parallelism and key-group ranges, no file referenced by two subtasks, a
    /// self-contained savepoint, …), so nothing restores, dumps or compares half of a
    /// snapshot that `verify` rejects.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, CheckpointError> {
        Self::open_impl(path.as_ref(), true)
    }

    /// Opens a snapshot like [`SnapshotReader::open`] without the structural checks, for
    /// [`SnapshotReader::verify`] to list every problem of a snapshot `open` refuses. Nothing
    /// but verification should act on what it returns.
    pub fn open_unchecked(path: impl AsRef<Path>) -> Result<Self, CheckpointError> {
        Self::open_impl(path.as_ref(), false)
    }

    fn open_impl(path: &Path, checked: bool) -> Result<Self, CheckpointError> {
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
        })
    }

    /// Opens the snapshot at `location`: a local path as [`SnapshotReader::open`] (a
    /// directory or its `_metadata` file); on a storage (an object store), the snapshot
    /// directory or its `_metadata` object, with shared files resolved against the enclosing
    /// directory (the job directory of a checkpoint). Reading `_metadata` is one request.
    pub fn open_location(location: &statekit_core::location::Location) -> Result<Self, CheckpointError> {
        Self::open_location_impl(location, true)
    }

    /// [`SnapshotReader::open_location`] without the structural checks (for `verify`).
    pub fn open_location_unchecked(location: &statekit_core::location::Location) -> Result<Self, CheckpointError> {
        Self::open_location_impl(location, false)
    }

    fn open_location_impl(
        location: &statekit_core::location::Location,
        checked: bool,
    ) -> Result<Self, CheckpointError> {
        use statekit_core::location::Location;
        if let Location::Local(p) = location {
            return Self::open_impl(p, checked);
        }
        Self::from_stored_metadata(&StoredMetadata::fetch(location)?, checked)
    }

    /// The statekit snapshot whose `_metadata` [`StoredMetadata::fetch`] began to read (the
    /// rest of it is fetched here: one request for a small file, as a whole read would be).
    pub fn from_stored_metadata(m: &StoredMetadata, checked: bool) -> Result<Self, CheckpointError> {
        m.fetch_all()?;
        let metadata = decode_stored(m.blob.as_ref(), &m.storage.describe(METADATA_FILE_NAME), checked)?;
        Ok(SnapshotReader {
            storage: m.storage.clone(),
            resolver: m.resolver()?,
            metadata,
        })
    }

    /// The snapshot in directory `dir` of `storage` (one read of its `_metadata`, checked or
    /// only decoded); shared files resolve against `job_dir`, absolute ones on the local file
    /// system when `local_absolute`.
    fn open_stored(
        storage: Arc<dyn Storage>,
        dir: &str,
        job_dir: Option<&str>,
        checked: bool,
        local_absolute: bool,
    ) -> Result<Self, CheckpointError> {
        let snap: Arc<dyn Storage> = Arc::new(SubdirStorage::new(storage.clone(), dir)?);
        let mut resolver = FileResolver::new(snap.clone());
        if local_absolute {
            resolver = resolver.with_local_absolute();
        }
        if let Some(j) = job_dir {
            resolver = resolver.with_job(Arc::new(SubdirStorage::new(storage, j)?));
        }
        let blob = snap
            .open(METADATA_FILE_NAME)
            .map_err(statekit_format::FormatError::from)?;
        let metadata = decode_stored(blob.as_ref(), &snap.describe(METADATA_FILE_NAME), checked)?;
        Ok(SnapshotReader {
            storage: snap,
            resolver,
            metadata,
        })
    }

    /// Opens the snapshot in directory `dir` of `storage`; shared files resolve against
    /// `job_dir` when given.
    pub fn open_in(storage: Arc<dyn Storage>, dir: &str, job_dir: Option<&str>) -> Result<Self, CheckpointError> {
        Self::open_stored(storage, dir, job_dir, true, true)
    }

    /// The snapshot's metadata.
    pub fn metadata(&self) -> &SnapshotMetadata {
        &self.metadata
    }

    /// Storage rooted at the snapshot directory.
    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.storage
    }

    /// The operator with this uid (`statekit_snapshot::Snapshot::operator` also resolves
    /// operator ids and the uids of operators stored by id only).
    pub fn operator(&self, uid: &str) -> Result<&OperatorMetadata, CheckpointError> {
        self.metadata
            .operator(uid)
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
        let s = op.subtasks.get(index as usize).ok_or_else(|| {
            CheckpointError::from(InvalidRequest::NoStoredSubtask {
                uid: uid.to_string(),
                subtasks: op.subtasks.len(),
                index,
            })
        })?;
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

/// Decodes the `_metadata` in `blob` (named `file`): checked ([`statekit_format::check_metadata`]),
/// a failed check first telling a damaged download from a damaged file
/// ([`statekit_core::storage::check_intact`]); or only decoded, for `verify`.
fn decode_stored(
    blob: &dyn statekit_core::storage::Blob,
    file: &str,
    checked: bool,
) -> Result<SnapshotMetadata, CheckpointError> {
    if !checked {
        return Ok(statekit_format::decode_metadata(blob.bytes(), file)?);
    }
    let r = statekit_format::check_metadata(blob.bytes(), file);
    if r.is_err() {
        statekit_core::storage::check_intact(blob, file).map_err(statekit_format::FormatError::from)?;
    }
    Ok(r?)
}
