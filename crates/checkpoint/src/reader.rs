//! Reading a snapshot and handing state to (possibly rescaled) subtasks.

use crate::error::CheckpointError;
use statekit_core::storage::{LocalStorage, Storage, SubdirStorage};
use statekit_core::{keygroup, redistribute, KeyGroupRange, KeyedStateBackend, KeyedStateView, OperatorStateSnapshot};
use statekit_format::{
    read_metadata, read_operator_file, verify_snapshot, FileRef, FileScope, KeyedFileReader, OperatorMetadata,
    SnapshotMetadata, SnapshotVerifyReport, METADATA_FILE_NAME,
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
        if !path.join(METADATA_FILE_NAME).is_file() {
            return Err(CheckpointError::NotASnapshot {
                path: shown,
                reason: format!("no {METADATA_FILE_NAME} file (not a snapshot, or an incomplete one)"),
            });
        }
        Ok(path.to_path_buf())
    } else {
        let parent = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        Ok(parent.to_path_buf())
    }
}

/// An open checkpoint or savepoint.
#[derive(Debug, Clone)]
pub struct SnapshotReader {
    storage: Arc<dyn Storage>,
    job_storage: Option<Arc<dyn Storage>>,
    metadata: SnapshotMetadata,
}

impl SnapshotReader {
    /// Opens a snapshot on the local filesystem by its directory or its `_metadata` file.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, CheckpointError> {
        let path = path.as_ref();
        let dir = resolve_snapshot_path(path)?;
        let metadata_name = match std::fs::metadata(path) {
            Ok(md) if md.is_file() => path
                .file_name()
                .map(|n| n.to_string_lossy().to_string())
                .unwrap_or_else(|| METADATA_FILE_NAME.to_string()),
            _ => METADATA_FILE_NAME.to_string(),
        };
        let storage: Arc<dyn Storage> = Arc::new(LocalStorage::new(&dir));
        let job_storage: Option<Arc<dyn Storage>> =
            dir.parent().map(|p| Arc::new(LocalStorage::new(p)) as Arc<dyn Storage>);
        let metadata = read_metadata(storage.as_ref(), &metadata_name)?;
        Ok(SnapshotReader {
            storage,
            job_storage,
            metadata,
        })
    }

    /// Opens the snapshot in directory `dir` of `storage`; shared files resolve against
    /// `job_dir` when given.
    pub fn open_in(storage: Arc<dyn Storage>, dir: &str, job_dir: Option<&str>) -> Result<Self, CheckpointError> {
        let snap: Arc<dyn Storage> = Arc::new(SubdirStorage::new(storage.clone(), dir)?);
        let job_storage = match job_dir {
            Some(j) => Some(Arc::new(SubdirStorage::new(storage, j)?) as Arc<dyn Storage>),
            None => None,
        };
        let metadata = read_metadata(snap.as_ref(), METADATA_FILE_NAME)?;
        Ok(SnapshotReader {
            storage: snap,
            job_storage,
            metadata,
        })
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
    pub fn operator(&self, uid: &str) -> Result<&OperatorMetadata, CheckpointError> {
        self.metadata.operator(uid).ok_or_else(|| {
            let known: Vec<&str> = self.metadata.operators.iter().map(|o| o.uid.as_str()).collect();
            CheckpointError::Invalid(format!(
                "{}: no operator with uid {uid:?} (the snapshot has {known:?})",
                self.storage.describe(METADATA_FILE_NAME)
            ))
        })
    }

    fn storage_for(&self, file: &FileRef) -> Result<&dyn Storage, CheckpointError> {
        match file.scope {
            FileScope::Exclusive => Ok(self.storage.as_ref()),
            FileScope::Shared => self
                .job_storage
                .as_deref()
                .ok_or_else(|| CheckpointError::Invalid(format!("{}: shared file without a job directory", file.path))),
        }
    }

    /// Opens the keyed data files of operator `uid` whose key groups overlap `range`.
    pub fn keyed_readers(&self, uid: &str, range: KeyGroupRange) -> Result<Vec<KeyedFileReader>, CheckpointError> {
        let op = self.operator(uid)?;
        let mut out = Vec::new();
        for s in &op.subtasks {
            if let Some(file) = &s.keyed {
                if !s.key_groups.intersection(&range).is_empty() {
                    out.push(KeyedFileReader::open(
                        self.storage_for(file)?,
                        &file.path,
                        Some(file.size),
                    )?);
                }
            }
        }
        Ok(out)
    }

    /// Restores operator `uid`'s keyed state into `backend`, which may own any key-group
    /// range of the same max parallelism (rescaling).
    pub fn restore_keyed(&self, uid: &str, backend: &mut dyn KeyedStateBackend) -> Result<(), CheckpointError> {
        let op = self.operator(uid)?;
        if backend.max_parallelism() != op.max_parallelism {
            return Err(CheckpointError::Invalid(format!(
                "operator {uid:?} was snapshotted with max parallelism {} but the backend has {}; \
                 changing max parallelism needs a rewrite of the savepoint",
                op.max_parallelism,
                backend.max_parallelism()
            )));
        }
        let readers = self.keyed_readers(uid, backend.key_group_range())?;
        let views: Vec<&dyn KeyedStateView> = readers.iter().map(|r| r as &dyn KeyedStateView).collect();
        backend.restore(&views)?;
        Ok(())
    }

    /// The operator state subtask `index` of `new_parallelism` gets, redistributed with
    /// Flink's rules (list split, union to all, broadcast copied).
    pub fn operator_state(
        &self,
        uid: &str,
        new_parallelism: u32,
        index: u32,
    ) -> Result<OperatorStateSnapshot, CheckpointError> {
        let op = self.operator(uid)?;
        keygroup::check_parallelism(new_parallelism, op.max_parallelism)?;
        if index >= new_parallelism {
            return Err(CheckpointError::Invalid(format!(
                "subtask {index} is not below parallelism {new_parallelism}"
            )));
        }
        let mut old = Vec::with_capacity(op.subtasks.len());
        for s in &op.subtasks {
            old.push(match &s.operator {
                Some(file) => read_operator_file(self.storage_for(file)?, &file.path, Some(file.size))?,
                None => OperatorStateSnapshot::default(),
            });
        }
        let mut new = redistribute(&old, new_parallelism)?;
        Ok(new.swap_remove(index as usize))
    }

    /// Checks every byte of the snapshot.
    pub fn verify(&self) -> Result<SnapshotVerifyReport, CheckpointError> {
        Ok(verify_snapshot(self.storage.as_ref())?)
    }
}
