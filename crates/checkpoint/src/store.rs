//! The checkpoints of one job: `<base>/<job-id>/chk-<N>/`.

use crate::error::{CheckpointError, InvalidRequest};
use crate::layout::{checkpoint_dir_name, parse_checkpoint_dir_name, SHARED_DIR, TASK_OWNED_DIR};
use crate::reader::SnapshotReader;
use crate::registry::{RestoreMode, SharedStateRegistry};
use crate::writer::SnapshotWriter;
use statekit_core::storage::{join, Storage, SubdirStorage};
use statekit_format::{
    read_metadata, FileRef, FileResolver, FileScope, SnapshotKind, SnapshotMetadata, WriteOptions, METADATA_FILE_NAME,
};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// A completed checkpoint.
#[derive(Clone, Debug)]
pub struct CompletedCheckpoint {
    /// Its id.
    pub id: u64,
    /// Its directory, relative to the store's storage.
    pub dir: String,
    /// Its metadata.
    pub metadata: SnapshotMetadata,
}

/// One `chk-<N>` directory as found on storage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointListing {
    /// The id from the directory name.
    pub id: u64,
    /// The directory, relative to the store's storage.
    pub dir: String,
    /// True when `_metadata` exists and decodes: the checkpoint completed.
    pub complete: bool,
    /// Why it is not complete (no `_metadata`, or a damaged one).
    pub problem: Option<String>,
}

/// The deletions a completed checkpoint made possible (see
/// [`CheckpointStore::complete_deferred`]): subsumed checkpoints and the shared files no
/// retained checkpoint references any more.
#[derive(Debug)]
#[must_use = "a Cleanup deletes nothing until it is run"]
pub struct Cleanup {
    store: CheckpointStore,
    id: u64,
    subsumed: Vec<u64>,
    delete: Vec<String>,
}

impl Cleanup {
    /// The checkpoints the new one subsumed (their files go when the cleanup runs).
    pub fn subsumed(&self) -> &[u64] {
        &self.subsumed
    }

    /// Shared files to delete.
    pub fn files(&self) -> usize {
        self.delete.len()
    }

    /// Deletes the subsumed checkpoints' directories and the unreferenced shared files.
    /// Returns every checkpoint id it discarded (the subsumed ones, plus older checkpoints of
    /// the job beyond the retained count that the store had not seen).
    pub fn run(self) -> Result<Vec<u64>, CheckpointError> {
        let store = &self.store;
        let mut subsumed = Vec::new();
        for old in &self.subsumed {
            store.discard_subsumed(*old)?;
            subsumed.push(*old);
        }
        store.delete_files(&self.delete);
        // Checkpoints of this job the registry never saw (written elsewhere after the store
        // was opened) are still bounded by the retained count.
        let all = store.completed()?;
        if all.len() > store.retained {
            let live = store.lock().registry.retained();
            for old in &all[..all.len() - store.retained] {
                if !live.contains(&old.id) {
                    discard_dir(store.storage.as_ref(), &old.dir)?;
                    subsumed.push(old.id);
                }
            }
        }
        if !subsumed.is_empty() {
            tracing::debug!(
                id = self.id,
                ?subsumed,
                deleted = self.delete.len(),
                "subsumed checkpoints deleted"
            );
        }
        Ok(subsumed)
    }
}

/// A file's identity, the storage holding it and its path there.
type Located = (String, Arc<dyn Storage>, String);

/// The snapshot a job was restored from, as the store tracks it.
#[derive(Debug)]
struct Restored {
    id: u64,
    mode: RestoreMode,
    /// Storage rooted at the restored snapshot's directory.
    dir: Arc<dyn Storage>,
    /// Identities of its files.
    files: Vec<String>,
}

/// What the store knows about shared files: the registry's decisions and where each file is.
#[derive(Debug)]
struct Shared {
    registry: SharedStateRegistry,
    /// File identity → (storage, path) to delete it.
    locations: BTreeMap<String, (Arc<dyn Storage>, String)>,
    restored: Option<Restored>,
}

/// The checkpoints of one job, under `<storage>/<job-id>/`.
///
/// The store decides which files may be deleted: every completed checkpoint's shared and
/// absolute references are registered in a [`SharedStateRegistry`]; when checkpoints are
/// subsumed (beyond the retained count), their directories and every shared file no retained
/// checkpoint references any more are deleted. [`CheckpointStore::restored`] tells it which
/// snapshot the job was restored from and in which [`RestoreMode`]. Clones share the state.
#[derive(Debug, Clone)]
pub struct CheckpointStore {
    storage: Arc<dyn Storage>,
    job_id: String,
    retained: usize,
    options: WriteOptions,
    shared: Arc<Mutex<Shared>>,
}

/// Identities among `files` that other complete checkpoints in the job directory of the
/// snapshot `reader` reads also reference.
fn sibling_references(reader: &SnapshotReader, files: &[String]) -> Result<Vec<String>, CheckpointError> {
    let Some(job) = reader.resolver().job().cloned() else {
        return Ok(Vec::new());
    };
    let own = reader.storage().absolute_path("");
    let wanted: std::collections::BTreeSet<&String> = files.iter().collect();
    let mut out = std::collections::BTreeSet::new();
    for e in job.list("")? {
        if !e.is_dir || parse_checkpoint_dir_name(&e.name).is_none() {
            continue;
        }
        if own.is_some() && job.absolute_path(&e.name) == own {
            continue;
        }
        if !job.exists(&join(&e.name, METADATA_FILE_NAME))? {
            continue;
        }
        // An unreadable sibling protects nothing; `verify` reports it.
        let Ok(sibling) = SnapshotReader::open_in(job.clone(), &e.name, Some("")) else {
            continue;
        };
        for f in sibling.referenced_files()? {
            if wanted.contains(&f.identity) {
                out.insert(f.identity);
            }
        }
    }
    Ok(out.into_iter().collect())
}

impl CheckpointStore {
    /// Opens (creating the directories) the checkpoint store of `job_id`, keeping the newest
    /// `retained` (≥ 1) completed checkpoints.
    pub fn open(storage: Arc<dyn Storage>, job_id: &str, retained: usize) -> Result<Self, CheckpointError> {
        if job_id.is_empty() || job_id.contains('/') {
            return Err(InvalidRequest::JobId {
                job_id: job_id.to_string(),
            }
            .into());
        }
        if retained == 0 {
            return Err(InvalidRequest::NothingRetained.into());
        }
        storage.create_dir_all(&join(job_id, SHARED_DIR))?;
        storage.create_dir_all(&join(job_id, TASK_OWNED_DIR))?;
        let store = CheckpointStore {
            storage,
            job_id: job_id.to_string(),
            retained,
            options: WriteOptions::default(),
            shared: Arc::new(Mutex::new(Shared {
                registry: SharedStateRegistry::new(retained),
                locations: BTreeMap::new(),
                restored: None,
            })),
        };
        // Checkpoints an earlier run of this job left: register what they reference, so the
        // files stay until they are subsumed.
        for c in store.completed()? {
            let files = store.shared_files_of(&c.metadata)?;
            let mut sh = store.lock();
            let ids: Vec<String> = files.iter().map(|(id, _, _)| id.clone()).collect();
            for (id, st, path) in files {
                sh.locations.insert(id, (st, path));
            }
            if sh.registry.begin(c.id, ids).is_ok() {
                // Older ones beyond the retained count are deleted by the next `complete`.
                let _ = sh.registry.complete(c.id);
            }
        }
        Ok(store)
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A resolver for the files of a checkpoint of this job.
    fn resolver_for(&self, dir: &str) -> Result<FileResolver, CheckpointError> {
        Ok(
            FileResolver::new(Arc::new(SubdirStorage::new(self.storage.clone(), dir)?))
                .with_job(self.job_storage()?)
                .with_local_absolute(),
        )
    }

    /// Storage rooted at the job directory.
    pub fn job_storage(&self) -> Result<Arc<dyn Storage>, CheckpointError> {
        Ok(Arc::new(SubdirStorage::new(self.storage.clone(), &self.job_id)?))
    }

    /// The shared and absolute references of a checkpoint of this job, as (identity,
    /// storage, path).
    fn shared_files_of(&self, meta: &SnapshotMetadata) -> Result<Vec<Located>, CheckpointError> {
        let resolver = self.resolver_for(&self.checkpoint_dir(meta.checkpoint_id))?;
        let mut out = Vec::new();
        for f in meta
            .operators
            .iter()
            .flat_map(|o| &o.subtasks)
            .flat_map(|s| s.files())
            .filter(|f| f.scope != FileScope::Exclusive)
        {
            out.push(Self::locate(&resolver, f)?);
        }
        Ok(out)
    }

    fn locate(resolver: &FileResolver, f: &FileRef) -> Result<Located, CheckpointError> {
        let id = resolver.identity(f)?;
        let (st, path) = resolver.resolve(f)?;
        Ok((id, st, path))
    }

    /// Records the snapshot this job was restored from and how it is owned (`mode`). Call
    /// once, before the first checkpoint begins; new checkpoint ids must be larger than the
    /// restored one.
    ///
    /// * [`RestoreMode::Claim`]: the job owns the snapshot. It counts as a retained
    ///   checkpoint; once subsumed, its files that no newer checkpoint references are deleted,
    ///   then its `_metadata` (and its directory, when nothing in it is referenced any more).
    ///   Files it references by absolute path (outside its own job directory), and files
    ///   other complete checkpoints of its job still reference, are not claimed: this job
    ///   never deletes them (claiming one checkpoint never breaks another).
    /// * [`RestoreMode::NoClaim`]: its files are never deleted, and a checkpoint that
    ///   references one is refused.
    /// * [`RestoreMode::Legacy`]: its files are never deleted but may be referenced.
    pub fn restored(&self, reader: &SnapshotReader, mode: RestoreMode) -> Result<(), CheckpointError> {
        let files = reader.referenced_files()?;
        let id = reader.metadata().checkpoint_id;
        // Claiming one checkpoint never breaks another: files its sibling checkpoints (other
        // complete checkpoints of its job) still reference are not claimed.
        let siblings = if mode == RestoreMode::Claim {
            let ids: Vec<String> = files.iter().map(|f| f.identity.clone()).collect();
            sibling_references(reader, &ids)?
        } else {
            Vec::new()
        };
        let mut sh = self.lock();
        if sh.restored.is_some() {
            return Err(InvalidRequest::RestoreRecorded.into());
        }
        let mut ids = Vec::with_capacity(files.len());
        let mut foreign = Vec::new();
        for f in files {
            ids.push(f.identity.clone());
            if f.file.scope.is_external() {
                foreign.push(f.identity.clone());
            }
            sh.locations.insert(f.identity, (f.storage, f.path));
        }
        sh.registry.restored(id, ids.clone(), mode);
        // A claimed snapshot owns its own files, not those it references in other
        // directories: they may belong to a snapshot an earlier job restored in LEGACY or
        // NO_CLAIM mode (`statekit gc` collects them once nothing references them).
        sh.registry.protect(foreign);
        sh.registry.protect(siblings);
        sh.restored = Some(Restored {
            id,
            mode,
            dir: reader.storage().clone(),
            files: ids,
        });
        tracing::debug!(id, %mode, "restored snapshot registered");
        Ok(())
    }

    /// True when `identity` (see [`FileResolver::identity`]) is referenced by a retained
    /// checkpoint (or protected as part of a restored snapshot).
    pub fn is_referenced(&self, identity: &str) -> bool {
        let sh = self.lock();
        sh.registry.is_live(identity) || sh.registry.is_protected(identity)
    }

    /// Sets how data files are written.
    pub fn with_options(mut self, options: WriteOptions) -> Self {
        self.options = options;
        self
    }

    /// The job id.
    pub fn job_id(&self) -> &str {
        &self.job_id
    }

    /// The storage.
    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.storage
    }

    /// The directory of checkpoint `id`, relative to the storage.
    pub fn checkpoint_dir(&self, id: u64) -> String {
        join(&self.job_id, &checkpoint_dir_name(id))
    }

    /// Starts checkpoint `id`. Its id must be larger than every completed checkpoint's.
    pub fn begin(&self, id: u64) -> Result<SnapshotWriter, CheckpointError> {
        if let Some(latest) = self.latest_completed()? {
            if latest.id >= id {
                return Err(InvalidRequest::NotNewerThanLatest { id, latest: latest.id }.into());
            }
        }
        if let Some(r) = &self.lock().restored {
            if id <= r.id {
                return Err(InvalidRequest::NotNewerThanRestored { id, restored: r.id }.into());
            }
        }
        let dir = self.checkpoint_dir(id);
        // Leftovers of an earlier attempt with this id (a crash before commit) are removed.
        self.storage.delete_dir_all(&dir)?;
        Ok(
            SnapshotWriter::new(self.storage.clone(), &dir, SnapshotKind::Checkpoint, id, &self.job_id)?
                .with_options(self.options)
                .with_job_storage(self.job_storage()?),
        )
    }

    /// Gives up a checkpoint started with [`CheckpointStore::begin`]: deletes its directory
    /// and the shared files it uploaded that no retained checkpoint references.
    pub fn abort(&self, writer: SnapshotWriter) -> Result<(), CheckpointError> {
        let resolver = self.resolver_for(writer.dir())?;
        let mut doomed = Vec::new();
        for h in writer.native_handles() {
            for f in h.files.iter().filter(|f| f.file.scope == FileScope::Shared) {
                let (id, st, path) = Self::locate(&resolver, &f.file)?;
                if !self.is_referenced(&id) {
                    doomed.push((st, path));
                }
            }
        }
        writer.abort()?;
        for (st, path) in doomed {
            st.delete_file(&path)?;
        }
        Ok(())
    }

    /// Commits a checkpoint started with [`CheckpointStore::begin`]: registers the shared
    /// files it references, commits `_metadata`, then subsumes completed checkpoints beyond
    /// the retained count — deleting their directories and every shared file no retained
    /// checkpoint references any more. Returns the completed checkpoint and the ids it
    /// subsumed.
    ///
    /// A checkpoint that references a file of a snapshot restored in NO_CLAIM mode is refused
    /// (and nothing is committed).
    pub fn complete(&self, writer: SnapshotWriter) -> Result<(CompletedCheckpoint, Vec<u64>), CheckpointError> {
        let (completed, cleanup) = self.complete_deferred(writer)?;
        let subsumed = cleanup.run()?;
        Ok((completed, subsumed))
    }

    /// [`CheckpointStore::complete`] without the deletions: the checkpoint is committed when
    /// this returns, and the returned [`Cleanup`] deletes what it subsumed — run it on any
    /// thread, later (a crash before it runs leaves files for `statekit gc`, never a broken
    /// checkpoint). Keeps the deletion of a large subsumed checkpoint out of the checkpoint's
    /// own latency.
    pub fn complete_deferred(&self, writer: SnapshotWriter) -> Result<(CompletedCheckpoint, Cleanup), CheckpointError> {
        let id = writer.checkpoint_id();
        let dir = writer.dir().to_string();
        let meta = writer.metadata()?;
        let files = self.shared_files_of(&meta)?;
        {
            let mut sh = self.lock();
            let ids: Vec<String> = files.iter().map(|(i, _, _)| i.clone()).collect();
            sh.registry
                .begin(id, ids)
                .map_err(|source| CheckpointError::Registry { id, source })?;
            for (i, st, path) in files {
                sh.locations.entry(i).or_insert((st, path));
            }
        }
        let metadata = match writer.finish() {
            Ok(m) => m,
            Err(e) => {
                let decision = self.lock().registry.abort(id);
                if let Ok(d) = decision {
                    self.delete_files(&d.delete);
                }
                return Err(e);
            }
        };
        let decision = self
            .lock()
            .registry
            .complete(id)
            .map_err(|source| CheckpointError::Registry { id, source })?;
        let completed = CompletedCheckpoint { id, dir, metadata };
        Ok((
            completed,
            Cleanup {
                store: self.clone(),
                id,
                subsumed: decision.subsumed,
                delete: decision.delete,
            },
        ))
    }

    /// Deletes a subsumed checkpoint's directory (or, for a restored snapshot this job
    /// claimed, its `_metadata` and — once nothing in it is referenced — its directory).
    fn discard_subsumed(&self, id: u64) -> Result<(), CheckpointError> {
        let restored = {
            let sh = self.lock();
            sh.restored
                .as_ref()
                .filter(|r| r.id == id)
                .map(|r| (r.mode, r.dir.clone(), r.files.clone()))
        };
        match restored {
            Some((RestoreMode::Claim, dir, files)) => {
                let still_used = {
                    let sh = self.lock();
                    files.iter().any(|f| sh.registry.is_live(f))
                };
                dir.delete_file(METADATA_FILE_NAME)?;
                if !still_used {
                    dir.delete_dir_all("")?;
                }
                tracing::debug!(id, still_used, "claimed restored snapshot discarded");
            }
            // LEGACY and NO_CLAIM snapshots are never deleted.
            Some(_) => {}
            None => discard_dir(self.storage.as_ref(), &self.checkpoint_dir(id))?,
        }
        Ok(())
    }

    fn delete_files(&self, identities: &[String]) {
        let mut sh = self.lock();
        for ident in identities {
            if let Some((st, path)) = sh.locations.remove(ident) {
                if let Err(e) = st.delete_file(&path) {
                    // Left for `statekit gc`; never a reason to fail a completed checkpoint.
                    tracing::warn!(file = %st.describe(&path), error = %e, "could not delete an unreferenced file");
                }
            }
        }
    }

    /// Every `chk-<N>` directory with its decoded metadata when complete, ascending by id.
    fn scan(&self) -> Result<Vec<(CheckpointListing, Option<SnapshotMetadata>)>, CheckpointError> {
        let mut out = Vec::new();
        for e in self.storage.list(&self.job_id)? {
            let Some(id) = parse_checkpoint_dir_name(&e.name).filter(|_| e.is_dir) else {
                continue;
            };
            let dir = join(&self.job_id, &e.name);
            let md = join(&dir, METADATA_FILE_NAME);
            let (metadata, problem) = if !self.storage.exists(&md)? {
                (None, Some(format!("no {METADATA_FILE_NAME}: incomplete")))
            } else {
                match read_metadata(self.storage.as_ref(), &md) {
                    Ok(m) => (Some(m), None),
                    Err(err) => (None, Some(err.to_string())),
                }
            };
            let listing = CheckpointListing {
                id,
                dir,
                complete: metadata.is_some(),
                problem,
            };
            out.push((listing, metadata));
        }
        out.sort_by_key(|(l, _)| l.id);
        Ok(out)
    }

    /// Every `chk-<N>` directory, ascending by id, complete or not.
    pub fn list(&self) -> Result<Vec<CheckpointListing>, CheckpointError> {
        Ok(self.scan()?.into_iter().map(|(l, _)| l).collect())
    }

    /// The completed checkpoints, ascending by id.
    pub fn completed(&self) -> Result<Vec<CompletedCheckpoint>, CheckpointError> {
        Ok(self
            .scan()?
            .into_iter()
            .filter_map(|(l, m)| {
                m.map(|metadata| CompletedCheckpoint {
                    id: l.id,
                    dir: l.dir,
                    metadata,
                })
            })
            .collect())
    }

    /// The newest completed checkpoint.
    pub fn latest_completed(&self) -> Result<Option<CompletedCheckpoint>, CheckpointError> {
        Ok(self.completed()?.pop())
    }

    /// Opens completed checkpoint `id` for restore.
    pub fn reader(&self, id: u64) -> Result<SnapshotReader, CheckpointError> {
        SnapshotReader::open_in(self.storage.clone(), &self.checkpoint_dir(id), Some(&self.job_id))
    }
}

/// Deletes a complete checkpoint's directory `_metadata` first, so a crash in the middle never
/// leaves a checkpoint that looks complete but misses files (it is then an incomplete
/// directory, which `statekit gc` removes).
fn discard_dir(storage: &dyn Storage, dir: &str) -> Result<(), CheckpointError> {
    storage.delete_file(&join(dir, METADATA_FILE_NAME))?;
    storage.delete_dir_all(dir)?;
    Ok(())
}
