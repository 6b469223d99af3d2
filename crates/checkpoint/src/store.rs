//! The checkpoints of one job: `<base>/<job-id>/chk-<N>/`.

use crate::error::CheckpointError;
use crate::layout::{checkpoint_dir_name, parse_checkpoint_dir_name, SHARED_DIR, TASK_OWNED_DIR};
use crate::reader::SnapshotReader;
use crate::writer::SnapshotWriter;
use statekit_core::storage::{join, Storage};
use statekit_format::{read_metadata, SnapshotKind, SnapshotMetadata, WriteOptions, METADATA_FILE_NAME};
use std::sync::Arc;

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

/// The checkpoints of one job, under `<storage>/<job-id>/`.
#[derive(Debug, Clone)]
pub struct CheckpointStore {
    storage: Arc<dyn Storage>,
    job_id: String,
    retained: usize,
    options: WriteOptions,
}

impl CheckpointStore {
    /// Opens (creating the directories) the checkpoint store of `job_id`, keeping the newest
    /// `retained` (≥ 1) completed checkpoints.
    pub fn open(storage: Arc<dyn Storage>, job_id: &str, retained: usize) -> Result<Self, CheckpointError> {
        if job_id.is_empty() || job_id.contains('/') {
            return Err(CheckpointError::Invalid(format!("invalid job id {job_id:?}")));
        }
        if retained == 0 {
            return Err(CheckpointError::Invalid(
                "at least one checkpoint must be retained".into(),
            ));
        }
        storage.create_dir_all(&join(job_id, SHARED_DIR))?;
        storage.create_dir_all(&join(job_id, TASK_OWNED_DIR))?;
        Ok(CheckpointStore {
            storage,
            job_id: job_id.to_string(),
            retained,
            options: WriteOptions::default(),
        })
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
                return Err(CheckpointError::Invalid(format!(
                    "checkpoint {id} is not newer than the latest completed checkpoint {}",
                    latest.id
                )));
            }
        }
        let dir = self.checkpoint_dir(id);
        // Leftovers of an earlier attempt with this id (a crash before commit) are removed.
        self.storage.delete_dir_all(&dir)?;
        Ok(
            SnapshotWriter::new(self.storage.clone(), &dir, SnapshotKind::Checkpoint, id, &self.job_id)?
                .with_options(self.options),
        )
    }

    /// Commits a checkpoint started with [`CheckpointStore::begin`], then drops completed
    /// checkpoints beyond the retained count. Returns the completed checkpoint and the ids
    /// of the checkpoints it subsumed (deleted).
    pub fn complete(&self, writer: SnapshotWriter) -> Result<(CompletedCheckpoint, Vec<u64>), CheckpointError> {
        let id = writer.checkpoint_id();
        let dir = writer.dir().to_string();
        let metadata = writer.finish()?;
        let completed = CompletedCheckpoint { id, dir, metadata };
        let mut subsumed = Vec::new();
        let all = self.completed()?;
        if all.len() > self.retained {
            for old in &all[..all.len() - self.retained] {
                self.storage.delete_dir_all(&old.dir)?;
                subsumed.push(old.id);
            }
        }
        Ok((completed, subsumed))
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
