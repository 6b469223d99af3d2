//! Finding the file a [`FileRef`] names.

use crate::error::FormatError;
use crate::metadata::{FileRef, FileScope};
use statekit_core::storage::{LocalStorage, Storage};
use std::path::Path;
use std::sync::Arc;

/// Resolves [`FileRef`]s of one snapshot to (storage, path): exclusive files against the
/// snapshot directory, shared files against the job directory, absolute files against the
/// local filesystem root.
#[derive(Clone, Debug)]
pub struct FileResolver {
    snapshot: Arc<dyn Storage>,
    job: Option<Arc<dyn Storage>>,
    absolute: Option<Arc<dyn Storage>>,
}

impl FileResolver {
    /// Exclusive files only (shared and absolute references do not resolve).
    pub fn new(snapshot: Arc<dyn Storage>) -> Self {
        FileResolver {
            snapshot,
            job: None,
            absolute: None,
        }
    }

    /// The snapshot directory `dir` on the local filesystem: shared files resolve against its
    /// parent (the job directory of a checkpoint), absolute ones against `/`. A file of the
    /// snapshot or job directory that leads out of it through a symlink is refused when read
    /// ([`LocalStorage::confined`]).
    pub fn local(dir: &Path) -> Self {
        FileResolver {
            // Confined: a reference read through a symlink that leads out is refused.
            snapshot: Arc::new(LocalStorage::confined(dir)),
            job: dir
                .parent()
                .map(|p| Arc::new(LocalStorage::confined(p)) as Arc<dyn Storage>),
            absolute: Some(Arc::new(LocalStorage::new("/"))),
        }
    }

    /// Sets the storage shared files resolve against (rooted at the job directory).
    pub fn with_job(mut self, job: Arc<dyn Storage>) -> Self {
        self.job = Some(job);
        self
    }

    /// Lets absolute references resolve on the local filesystem.
    pub fn with_local_absolute(mut self) -> Self {
        self.absolute = Some(Arc::new(LocalStorage::new("/")));
        self
    }

    /// The storage rooted at the snapshot directory.
    pub fn snapshot(&self) -> &Arc<dyn Storage> {
        &self.snapshot
    }

    /// The storage rooted at the job directory, when known.
    pub fn job(&self) -> Option<&Arc<dyn Storage>> {
        self.job.as_ref()
    }

    /// The storage holding `file` and the file's path inside it.
    pub fn resolve(&self, file: &FileRef) -> Result<(Arc<dyn Storage>, String), FormatError> {
        let unresolved = |why: &str| FormatError::Unresolvable {
            scope: file.scope.as_str(),
            path: file.path.clone(),
            reason: why.to_string(),
        };
        match file.scope {
            FileScope::Exclusive => Ok((self.snapshot.clone(), file.path.clone())),
            FileScope::Shared => self.job.clone().map(|s| (s, file.path.clone())).ok_or_else(|| {
                unresolved("the job directory is unknown (open the checkpoint inside its job directory)")
            }),
            FileScope::Absolute => {
                let rel = file
                    .path
                    .strip_prefix('/')
                    .ok_or_else(|| unresolved("an absolute reference must start with '/'"))?;
                self.absolute
                    .clone()
                    .map(|s| (s, rel.to_string()))
                    .ok_or_else(|| unresolved("absolute references resolve only on the local filesystem"))
            }
            FileScope::Url => match statekit_core::location::resolve_url(&file.path) {
                Ok(statekit_core::location::Location::Stored { storage, path, .. }) => Ok((storage, path)),
                Ok(statekit_core::location::Location::Local(_)) => Err(unresolved("not an object-store URL")),
                Err(e) => Err(unresolved(&e.to_string())),
            },
        }
    }

    /// A stable identity of `file` for comparing references across snapshots: its absolute
    /// local path when the storage is local, else the storage's description of it.
    pub fn identity(&self, file: &FileRef) -> Result<String, FormatError> {
        let (storage, path) = self.resolve(file)?;
        Ok(match storage.absolute_path(&path) {
            Some(p) => p.display().to_string(),
            None => storage.describe(&path),
        })
    }
}

/// Where a backend writes the files of a native keyed snapshot (see
/// [`crate::NativeKeyedHandle`]).
#[derive(Clone, Debug)]
pub struct NativeTarget {
    /// Storage rooted at the snapshot directory.
    pub snapshot: Arc<dyn Storage>,
    /// Directory (relative to `snapshot`) for the subtask's exclusive files.
    pub exclusive_dir: String,
    /// Storage rooted at the job directory, for files shared between checkpoints; `None` for
    /// savepoints, which are self-contained (every file exclusive).
    pub job: Option<Arc<dyn Storage>>,
    /// Directory (relative to `job`) for shared files (`shared`).
    pub shared_dir: String,
}

/// One file of a native handle, resolved for reading.
#[derive(Clone, Debug)]
pub struct ResolvedNativeFile {
    /// The file as the handle records it.
    pub file: crate::NativeFile,
    /// The storage holding it.
    pub storage: Arc<dyn Storage>,
    /// Its path inside `storage`.
    pub path: String,
}

impl ResolvedNativeFile {
    /// The file's absolute local path, when its storage is the local filesystem.
    pub fn absolute_path(&self) -> Option<std::path::PathBuf> {
        self.storage.absolute_path(&self.path)
    }
}

/// A subtask's native keyed handle with every file resolved, handed to a backend to restore
/// from or to read.
#[derive(Clone, Debug)]
pub struct ResolvedNativeHandle {
    /// The subtask that wrote it.
    pub subtask: u32,
    /// The key groups it holds.
    pub key_groups: statekit_core::KeyGroupRange,
    /// Max parallelism of its operator.
    pub max_parallelism: u32,
    /// The keyed states of its operator (the database may hold a subset).
    pub states: Vec<statekit_core::StateDescriptor>,
    /// The handle.
    pub handle: crate::NativeKeyedHandle,
    /// Its files, in the handle's order.
    pub files: Vec<ResolvedNativeFile>,
}

/// A file of a changelog handle, resolved for reading.
#[derive(Clone, Debug)]
pub struct ResolvedFile {
    /// The storage holding it.
    pub storage: Arc<dyn Storage>,
    /// Its path inside `storage`.
    pub path: String,
    /// Its size as recorded.
    pub size: u64,
}

/// A subtask's changelog handle with every file resolved, handed to the changelog crate to
/// restore from or to read.
#[derive(Clone, Debug)]
pub struct ResolvedChangelogHandle {
    /// The subtask that wrote it.
    pub subtask: u32,
    /// The key groups it holds.
    pub key_groups: statekit_core::KeyGroupRange,
    /// Max parallelism of its operator.
    pub max_parallelism: u32,
    /// The keyed states of its operator.
    pub states: Vec<statekit_core::StateDescriptor>,
    /// The handle.
    pub handle: crate::ChangelogKeyedHandle,
    /// Its materializations' files, in the handle's order.
    pub materialized: Vec<ResolvedFile>,
    /// Its tail's log files, per tail entry, in the handle's order.
    pub tail: Vec<ResolvedFile>,
}
