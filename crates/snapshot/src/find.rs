//! Finding snapshots under a directory and the latest complete checkpoint.

use crate::error::SnapshotError;
use crate::open::Snapshot;
use statekit_checkpoint::{find_snapshot_dirs, CheckpointStore};
use statekit_core::location::Location;
use statekit_format::{FileScope, SnapshotMetadata, METADATA_FILE_NAME};
use std::path::{Path, PathBuf};

/// The reason [`FoundSnapshot::problem`] gives for a `chk-N` directory without `_metadata`.
pub const INCOMPLETE: &str = "no _metadata: incomplete";

/// A snapshot directory found by [`find_snapshots`] (only `_metadata` files are read).
#[derive(Clone, Debug)]
pub struct FoundSnapshot {
    /// The directory.
    pub path: PathBuf,
    /// True when its `_metadata` reads and is structurally sound.
    pub complete: bool,
    /// Why it is not complete: [`INCOMPLETE`] for a checkpoint without `_metadata`, else the
    /// error reading it (the snapshot is broken).
    pub problem: Option<String>,
    /// Its metadata, when complete.
    pub meta: Option<SnapshotMetadata>,
    /// Every file the snapshot references (shared ones too), plus `_metadata`.
    pub bytes: u64,
    /// What the snapshot wrote itself (for an incremental checkpoint: what it uploaded).
    pub own_bytes: u64,
    /// Bytes inside its directory.
    pub dir_bytes: u64,
}

impl FoundSnapshot {
    /// With its byte totals: what `meta` references plus `_metadata`, or (when it does not
    /// read) everything in the directory.
    fn new(
        path: PathBuf,
        complete: bool,
        problem: Option<String>,
        meta: Option<SnapshotMetadata>,
        md_bytes: u64,
        dir_bytes: u64,
    ) -> Self {
        let (bytes, own_bytes) = match &meta {
            Some(m) => {
                let (t, o) = referenced_bytes(m);
                (t.saturating_add(md_bytes), o.saturating_add(md_bytes))
            }
            None => (dir_bytes, dir_bytes),
        };
        FoundSnapshot {
            path,
            complete,
            problem,
            meta,
            bytes,
            own_bytes,
            dir_bytes,
        }
    }

    /// True when the directory has a `_metadata` that does not read (damaged, a newer
    /// version, not a regular file): a broken snapshot rather than an incomplete one.
    pub fn is_broken(&self) -> bool {
        !self.complete && self.problem.as_deref() != Some(INCOMPLETE)
    }
}

/// Every snapshot under `dir`, `depth` levels down, in path order: complete ones with their
/// metadata, `chk-N` directories without `_metadata` (incomplete), and directories whose
/// `_metadata` does not read (broken, with the reason).
pub fn find_snapshots(dir: &Path, depth: usize) -> Vec<FoundSnapshot> {
    find_snapshot_dirs(dir, depth)
        .into_iter()
        .map(|d| {
            let (complete, problem, meta) = if d.has_metadata {
                match Snapshot::open(&d.path) {
                    Ok(r) => (true, None, Some(r.metadata().clone())),
                    Err(e) => (false, Some(e.to_string()), None),
                }
            } else {
                (false, Some(INCOMPLETE.to_string()), None)
            };
            let dir_bytes = dir_size(&d.path);
            let md_bytes = std::fs::metadata(d.path.join(METADATA_FILE_NAME)).map_or(0, |m| m.len());
            FoundSnapshot::new(d.path, complete, problem, meta, md_bytes, dir_bytes)
        })
        .collect()
}

/// [`find_snapshots`] under any [`Location`]: on a storage (an object store), by delimited
/// listings (one per directory visited) and one read of each `_metadata`. A found snapshot's
/// `path` is its location as the user would type it (`s3://bucket/ck/job/chk-3`).
pub fn find_snapshots_at(base: &Location, depth: usize) -> Result<Vec<FoundSnapshot>, SnapshotError> {
    if let Location::Local(p) = base {
        return Ok(find_snapshots(p, depth));
    }
    let storage = base.storage().map_err(statekit_format::FormatError::from)?;
    let mut out = Vec::new();
    for d in statekit_checkpoint::find_snapshot_dirs_in(storage.as_ref(), "", depth)
        .map_err(statekit_format::FormatError::from)?
    {
        let location = base.join(&d.path);
        let dir_bytes = statekit_core::storage::files_below(storage.as_ref(), &d.path)
            .map_err(statekit_format::FormatError::from)?
            .iter()
            .fold(0u64, |t, (_, e)| t.saturating_add(e.size));
        let (complete, problem, meta) = match d.metadata_bytes {
            Some(_) => match Snapshot::open_location(&location, &Default::default()) {
                Ok(r) => (true, None, Some(r.metadata().clone())),
                Err(e) => (false, Some(e.to_string()), None),
            },
            None => (false, Some(INCOMPLETE.to_string()), None),
        };
        let path = PathBuf::from(location.display());
        let md_bytes = d.metadata_bytes.unwrap_or(0);
        out.push(FoundSnapshot::new(path, complete, problem, meta, md_bytes, dir_bytes));
    }
    Ok(out)
}

fn dir_size(p: &Path) -> u64 {
    std::fs::read_dir(p)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => dir_size(&e.path()),
                    Ok(m) => m.len(),
                    Err(_) => 0,
                })
                .fold(0, u64::saturating_add)
        })
        .unwrap_or(0)
}

/// (total bytes of every file the snapshot references, bytes this snapshot wrote itself):
/// for an incremental checkpoint the second is what it uploaded; for a changelog checkpoint
/// its own directory's files (materializations and log files are written off the checkpoint
/// path and shared; each counts once in the total).
pub fn referenced_bytes(m: &SnapshotMetadata) -> (u64, u64) {
    let (mut total, mut own) = (0u64, 0u64);
    let mut changelog_files: std::collections::BTreeSet<(&str, &str)> = std::collections::BTreeSet::new();
    for s in m.operators.iter().flat_map(|o| &o.subtasks) {
        for f in s.keyed.canonical().into_iter().chain(s.operator.iter()) {
            total = total.saturating_add(f.size);
            own = own.saturating_add(f.size);
        }
        if let Some(n) = s.keyed.native() {
            total = total.saturating_add(n.total_bytes());
            own = own.saturating_add(n.uploaded_bytes);
        }
        if let Some(c) = s.keyed.changelog() {
            let files = c
                .materialized
                .iter()
                .map(|p| &p.file)
                .chain(c.tail.iter().map(|t| &t.file));
            for f in files {
                if changelog_files.insert((f.scope.as_str(), &f.path)) {
                    total = total.saturating_add(f.size);
                    if f.scope == FileScope::Exclusive {
                        own = own.saturating_add(f.size);
                    }
                }
            }
        }
    }
    (total, own)
}

/// The newest complete checkpoint under a checkpoint base directory (`<base>/<job-id>/chk-N`,
/// any job; newest by timestamp, then id), as (checkpoint id, directory). Hidden directories
/// and `at-most-once` (the word count's offset store) are not jobs.
pub fn latest_checkpoint(base: &Path) -> Result<Option<(u64, PathBuf)>, SnapshotError> {
    if !base.is_dir() {
        return Ok(None);
    }
    let found = latest_checkpoint_at(&Location::Local(base.to_path_buf()))?;
    Ok(found.map(|(id, l)| (id, l.as_local().map(Path::to_path_buf).unwrap_or_default())))
}

/// [`latest_checkpoint`] under a checkpoint base directory at any [`Location`] (an object
/// store's prefix too: the jobs are listed, each job's `chk-N` read through its storage).
pub fn latest_checkpoint_at(base: &Location) -> Result<Option<(u64, Location)>, SnapshotError> {
    let mut best: Option<(i64, u64, String)> = None;
    let storage = base.storage().map_err(statekit_format::FormatError::from)?;
    for job in storage
        .list("")
        .map_err(statekit_format::FormatError::from)?
        .into_iter()
        .filter(|e| e.is_dir)
    {
        let job_id = job.name;
        if job_id.starts_with('.') || job_id == "at-most-once" {
            continue;
        }
        let store = CheckpointStore::open(storage.clone(), &job_id, 1)?;
        if let Some(c) = store.latest_completed()? {
            let key = (c.metadata.timestamp_ms, c.id);
            if best.as_ref().is_none_or(|b| (b.0, b.1) < key) {
                best = Some((key.0, key.1, c.dir.clone()));
            }
        }
    }
    Ok(best.map(|(_, id, dir)| (id, base.join(&dir))))
}
