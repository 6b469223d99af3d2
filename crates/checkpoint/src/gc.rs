//! Garbage collection of a checkpoint base directory on the local filesystem: finds the files
//! no complete snapshot references (left by crashes, aborted uploads, interrupted writes) and
//! deletes them on request — never a referenced file.

use crate::error::CheckpointError;
use crate::layout::{parse_checkpoint_dir_name, DSTL_DIR, SHARED_DIR, TASK_OWNED_DIR};
use crate::reader::SnapshotReader;
use statekit_format::METADATA_FILE_NAME;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// Why a file is garbage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OrphanReason {
    /// In a job's `shared/`, `taskowned/` or `dstl/`, and no complete checkpoint references it.
    UnreferencedShared,
    /// In a `chk-N/` directory without a readable `_metadata`: a checkpoint that never
    /// completed (or was discarded after a CLAIM restore).
    IncompleteCheckpoint,
    /// In a complete `chk-N/` directory, but its `_metadata` does not reference it (e.g. a
    /// temporary file of an interrupted write).
    UnreferencedInCheckpoint,
}

impl OrphanReason {
    /// A short description.
    pub fn as_str(self) -> &'static str {
        match self {
            OrphanReason::UnreferencedShared => "shared file no complete checkpoint references",
            OrphanReason::IncompleteCheckpoint => "file of an incomplete checkpoint",
            OrphanReason::UnreferencedInCheckpoint => "file its checkpoint's _metadata does not reference",
        }
    }
}

/// A file `gc` would delete.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Orphan {
    /// The file.
    pub path: PathBuf,
    /// Its size.
    pub bytes: u64,
    /// Why it is garbage.
    pub reason: OrphanReason,
}

/// What [`plan_gc`] found.
#[derive(Clone, Debug, Default)]
pub struct GcPlan {
    /// Complete snapshots whose references were collected.
    pub snapshots: usize,
    /// Distinct files they reference.
    pub referenced: usize,
    /// Files to delete.
    pub orphans: Vec<Orphan>,
    /// Orphans younger than the minimum age: left alone (a running job may be writing them).
    pub too_young: Vec<Orphan>,
    /// Snapshots whose `_metadata` could not be read: their directories are left alone.
    pub unreadable: Vec<(PathBuf, String)>,
}

impl GcPlan {
    /// Bytes of [`GcPlan::orphans`].
    pub fn orphan_bytes(&self) -> u64 {
        self.orphans.iter().map(|o| o.bytes).sum()
    }
}

fn io_err(path: &Path, e: std::io::Error) -> CheckpointError {
    CheckpointError::Invalid(format!("{}: {e}", path.display()))
}

/// Every regular file below `dir`.
fn files_below(dir: &Path, out: &mut Vec<(PathBuf, std::fs::Metadata)>) -> Result<(), CheckpointError> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err(dir, e)),
    };
    for e in rd {
        let e = e.map_err(|e| io_err(dir, e))?;
        let md = std::fs::symlink_metadata(e.path()).map_err(|err| io_err(&e.path(), err))?;
        if md.is_dir() {
            files_below(&e.path(), out)?;
        } else {
            out.push((e.path(), md));
        }
    }
    Ok(())
}

/// True when `dir` looks like a job directory (`shared/`, `taskowned/` or a `chk-N/` inside).
fn is_job_dir(dir: &Path) -> bool {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return false;
    };
    rd.filter_map(|e| e.ok()).any(|e| {
        let name = e.file_name().to_string_lossy().to_string();
        e.path().is_dir()
            && (name == SHARED_DIR || name == TASK_OWNED_DIR || parse_checkpoint_dir_name(&name).is_some())
    })
}

/// Snapshot directories (holding `_metadata`) below `dir`, at most `depth` levels down.
fn snapshot_dirs(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    if dir.join(METADATA_FILE_NAME).is_file() {
        out.push(dir.to_path_buf());
        return;
    }
    if depth == 0 {
        return;
    }
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    let mut dirs: Vec<PathBuf> = rd
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    for d in dirs {
        snapshot_dirs(&d, depth - 1, out);
    }
}

/// Finds the garbage under the checkpoint base directory `base` (`<base>/<job-id>/…`).
///
/// Every complete snapshot under `base` (checkpoints of every job, and any savepoint kept
/// there) counts: a file any of them references — by relative, shared or absolute reference —
/// is never garbage. Candidates are the files of each job's `shared/` and `taskowned/`, of
/// `chk-N/` directories without `_metadata`, and files of complete `chk-N/` directories their
/// `_metadata` does not mention. Candidates modified less than `min_age` ago are reported
/// separately and not deleted: a running job may be writing them. Snapshots outside `base`
/// that reference files inside it are not seen; keep such jobs' checkpoints under one base.
pub fn plan_gc(base: &Path, min_age: Duration) -> Result<GcPlan, CheckpointError> {
    if !base.is_dir() {
        return Err(CheckpointError::NotASnapshot {
            path: base.display().to_string(),
            reason: "not a directory".into(),
        });
    }
    let base = std::path::absolute(base).map_err(|e| io_err(base, e))?;
    let mut plan = GcPlan::default();
    let mut referenced: BTreeSet<PathBuf> = BTreeSet::new();
    let mut snapshots = Vec::new();
    snapshot_dirs(&base, 4, &mut snapshots);
    let mut complete: BTreeSet<PathBuf> = BTreeSet::new();
    for dir in &snapshots {
        match SnapshotReader::open(dir).and_then(|r| r.referenced_files()) {
            Ok(files) => {
                plan.snapshots += 1;
                complete.insert(dir.clone());
                referenced.insert(dir.join(METADATA_FILE_NAME));
                for f in files {
                    referenced.insert(PathBuf::from(f.identity));
                }
            }
            Err(e) => plan.unreadable.push((dir.clone(), e.to_string())),
        }
    }
    plan.referenced = referenced.len();
    let unreadable: BTreeSet<PathBuf> = plan.unreadable.iter().map(|(p, _)| p.clone()).collect();
    let now = SystemTime::now();
    let mut jobs: Vec<PathBuf> = std::fs::read_dir(&base)
        .map_err(|e| io_err(&base, e))?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_dir() && is_job_dir(p))
        .collect();
    jobs.sort();
    for job in jobs {
        let mut candidates: Vec<(PathBuf, std::fs::Metadata, OrphanReason)> = Vec::new();
        for sub in [SHARED_DIR, TASK_OWNED_DIR, DSTL_DIR] {
            let mut files = Vec::new();
            files_below(&job.join(sub), &mut files)?;
            candidates.extend(files.into_iter().map(|(p, m)| (p, m, OrphanReason::UnreferencedShared)));
        }
        let rd = std::fs::read_dir(&job).map_err(|e| io_err(&job, e))?;
        for e in rd.filter_map(|e| e.ok()) {
            let name = e.file_name().to_string_lossy().to_string();
            if parse_checkpoint_dir_name(&name).is_none() || !e.path().is_dir() {
                continue;
            }
            let dir = e.path();
            if unreadable.contains(&dir) {
                continue;
            }
            let reason = if complete.contains(&dir) {
                OrphanReason::UnreferencedInCheckpoint
            } else {
                OrphanReason::IncompleteCheckpoint
            };
            let mut files = Vec::new();
            files_below(&dir, &mut files)?;
            candidates.extend(files.into_iter().map(|(p, m)| (p, m, reason)));
        }
        for (path, md, reason) in candidates {
            if referenced.contains(&path) {
                continue;
            }
            let orphan = Orphan {
                path,
                bytes: md.len(),
                reason,
            };
            let age = md
                .modified()
                .ok()
                .and_then(|m| now.duration_since(m).ok())
                .unwrap_or_default();
            if age < min_age {
                plan.too_young.push(orphan);
            } else {
                plan.orphans.push(orphan);
            }
        }
    }
    plan.orphans.sort_by(|a, b| a.path.cmp(&b.path));
    plan.too_young.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(plan)
}

/// Deletes the orphans of `plan` — call it right after [`plan_gc`], whose plan was computed
/// from every `_metadata` under the base directory — then removes the `chk-N/` directories
/// (and directories inside them) left empty. Files already gone are skipped. Returns the
/// files and bytes deleted.
pub fn apply_gc(plan: &GcPlan) -> Result<(usize, u64), CheckpointError> {
    let mut n = 0;
    let mut bytes = 0;
    let mut dirs: BTreeSet<PathBuf> = BTreeSet::new();
    for o in &plan.orphans {
        match std::fs::remove_file(&o.path) {
            Ok(()) => {
                n += 1;
                bytes += o.bytes;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(&o.path, e)),
        }
        if o.reason != OrphanReason::UnreferencedShared {
            let mut d = o.path.parent();
            while let Some(p) = d {
                if p.file_name()
                    .map(|n| parse_checkpoint_dir_name(&n.to_string_lossy()).is_some())
                    .unwrap_or(false)
                {
                    dirs.insert(p.to_path_buf());
                    break;
                }
                dirs.insert(p.to_path_buf());
                d = p.parent();
            }
        }
    }
    // Deepest first; only empty directories go (`remove_dir` fails on others).
    let mut dirs: Vec<PathBuf> = dirs.into_iter().collect();
    dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    for d in dirs {
        let _ = std::fs::remove_dir(&d);
    }
    Ok((n, bytes))
}
