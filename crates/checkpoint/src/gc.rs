//! Garbage collection of a checkpoint base directory on the local filesystem: finds the files
//! no complete snapshot references (left by crashes, aborted uploads, interrupted writes) and
//! deletes them on request — never a referenced file, never anything outside the base.
//!
//! Two rules keep it safe on hostile or unusual trees:
//! * **Files are compared by identity, not by name.** A reference and a candidate are the same
//!   file when they are the same inode (device + inode number), whatever path spells them
//!   (`base/../base`, the base through a symlink, a hard link, an absolute reference written
//!   by another job).
//! * **Deletion never follows a symlink.** Candidates are found by walking real directories
//!   below the canonical base; symlinks and other non-regular files are listed as skipped,
//!   never deleted or descended into. [`apply_gc`] re-checks every file of the plan before
//!   deleting any (each is reached component by component with `O_NOFOLLOW`, and must still be
//!   the inode the plan found) and refuses the whole plan if one fails.
//!
//! Reading is more generous than deleting: snapshots reached through symlinks are still read,
//! because every reference they add only protects more files.

use crate::error::{CheckpointError, OrphanMoved};
use crate::layout::{parse_checkpoint_dir_name, DSTL_DIR, SHARED_DIR, TASK_OWNED_DIR};
use crate::reader::SnapshotReader;
use statekit_format::METADATA_FILE_NAME;
use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};
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
    /// Below a temporary a statekit run made (an output written under a hidden name, an
    /// export's staging directory, a sort's spill directory) whose process is gone: a killed
    /// `convert`, `rewrite`, `import` or `export` ([`statekit_core::temp`]).
    DeadRunLeftover,
}

impl OrphanReason {
    /// A short description.
    pub fn as_str(self) -> &'static str {
        match self {
            OrphanReason::UnreferencedShared => "shared file no complete checkpoint references",
            OrphanReason::IncompleteCheckpoint => "file of an incomplete checkpoint",
            OrphanReason::UnreferencedInCheckpoint => "file its checkpoint's _metadata does not reference",
            OrphanReason::DeadRunLeftover => "file of a killed statekit run's temporary directory",
        }
    }
}

/// The identity of a file on the local filesystem: device and inode number. Two paths name
/// the same file exactly when their identities are equal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FileId {
    /// Device number.
    pub dev: u64,
    /// Inode number.
    pub ino: u64,
}

impl FileId {
    fn of(md: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        FileId {
            dev: md.dev(),
            ino: md.ino(),
        }
    }
}

/// A file `gc` would delete.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Orphan {
    /// The file, below the canonical base directory.
    pub path: PathBuf,
    /// Its identity when the plan was made; [`apply_gc`] deletes it only if the path still
    /// names this file.
    pub id: FileId,
    /// Its size.
    pub bytes: u64,
    /// Why it is garbage.
    pub reason: OrphanReason,
}

/// What [`plan_gc`] found.
#[derive(Clone, Debug, Default)]
pub struct GcPlan {
    /// The base directory, canonical (every symlink in the given path resolved).
    pub base: PathBuf,
    /// Complete snapshots whose references were collected.
    pub snapshots: usize,
    /// Distinct files they reference.
    pub referenced: usize,
    /// Files to delete.
    pub orphans: Vec<Orphan>,
    /// Orphans younger than the minimum age: left alone (a running job may be writing them).
    pub too_young: Vec<Orphan>,
    /// Unreferenced files of `shared/`, `taskowned/` and `dstl/` left alone because some
    /// snapshot under the base could not be read ([`GcPlan::unreadable`]): it might
    /// reference them (a newer format version, a damaged `_metadata` that can be repaired).
    pub held_back: Vec<Orphan>,
    /// Snapshots whose `_metadata` could not be read: their directories are left alone.
    pub unreadable: Vec<(PathBuf, String)>,
    /// Entries where gc looks for garbage that it left alone because they are not regular
    /// files or real directories (symlinks, FIFOs, sockets, devices), with what they are; on
    /// an object store, keys that are not valid paths (an empty, `.` or `..` segment), which
    /// are never deleted while the rest is collected.
    pub skipped: Vec<(PathBuf, String)>,
    /// `chk-N/` directories without `_metadata` that hold no file at all (a checkpoint that
    /// failed before writing anything), and empty temporary directories of killed statekit
    /// runs, older than the minimum age: removed with the directories inside them, so `ls`
    /// stops listing them.
    pub empty_dirs: Vec<PathBuf>,
}

impl GcPlan {
    /// Bytes of [`GcPlan::orphans`].
    pub fn orphan_bytes(&self) -> u64 {
        self.orphans.iter().map(|o| o.bytes).fold(0, u64::saturating_add)
    }
}

fn io_err(path: &Path, e: std::io::Error) -> CheckpointError {
    CheckpointError::Io {
        path: path.display().to_string(),
        source: e,
    }
}

/// Why a non-regular, non-directory entry is left alone, for [`GcPlan::skipped`].
fn skipped_reason(ft: std::fs::FileType) -> String {
    if ft.is_symlink() {
        "a symlink: gc never follows or deletes symlinks".to_string()
    } else {
        format!("{}, not a regular file", statekit_core::storage::file_type_name(ft))
    }
}

/// The entries of a real directory with their `lstat` metadata (symlinks are not followed);
/// a missing directory has none.
fn entries(dir: &Path) -> Result<Vec<(PathBuf, std::fs::Metadata)>, CheckpointError> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err(dir, e)),
    };
    let mut out = Vec::new();
    for e in rd {
        let e = e.map_err(|e| io_err(dir, e))?;
        let path = e.path();
        match std::fs::symlink_metadata(&path) {
            Ok(md) => out.push((path, md)),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => return Err(io_err(&path, err)),
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// Every regular file below the real directory `dir`, descending only into real directories;
/// everything else is recorded in `skipped`.
fn files_below(
    dir: &Path,
    out: &mut Vec<(PathBuf, std::fs::Metadata)>,
    skipped: &mut Vec<(PathBuf, String)>,
) -> Result<(), CheckpointError> {
    for (path, md) in entries(dir)? {
        if md.is_dir() {
            files_below(&path, out, skipped)?;
        } else if md.is_file() {
            out.push((path, md));
        } else {
            skipped.push((path, skipped_reason(md.file_type())));
        }
    }
    Ok(())
}

/// The real directories below `dir` (symlinks are not followed), at any depth.
fn dirs_below(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = entries(dir) else { return };
    for (path, md) in entries {
        if md.is_dir() {
            dirs_below(&path, out);
            out.push(path);
        }
    }
}

/// True for the names gc looks into inside a job directory.
fn is_gc_dir_name(name: &str) -> bool {
    name == SHARED_DIR || name == TASK_OWNED_DIR || name == DSTL_DIR || parse_checkpoint_dir_name(name).is_some()
}

/// Finds the garbage under the checkpoint base directory `base` (`<base>/<job-id>/…`).
///
/// Every complete snapshot under `base` (checkpoints of every job, and any savepoint kept
/// there) counts: a file any of them references — by relative, shared or absolute reference,
/// however the path is spelled — is never garbage. Candidates are the regular files of each
/// job's `shared/`, `taskowned/` and `dstl/`, of `chk-N/` directories without `_metadata`, and
/// files of complete `chk-N/` directories their `_metadata` does not mention, found by walking
/// real directories below the canonical base only (see the module documentation). Candidates
/// modified less than `min_age` ago are reported separately and not deleted: a running job may
/// be writing them. Snapshots outside `base` that reference files inside it are not seen; keep
/// such jobs' checkpoints under one base. While any snapshot under `base` cannot be read,
/// unreferenced shared files are held back ([`GcPlan::held_back`]), not deleted.
pub fn plan_gc(base: &Path, min_age: Duration) -> Result<GcPlan, CheckpointError> {
    if !base.is_dir() {
        return Err(CheckpointError::NotASnapshot {
            path: base.display().to_string(),
            reason: "not a directory".into(),
        });
    }
    let base = std::fs::canonicalize(base).map_err(|e| io_err(base, e))?;
    let mut plan = GcPlan {
        base: base.clone(),
        ..GcPlan::default()
    };
    let mut referenced: BTreeSet<FileId> = BTreeSet::new();
    // Any entry named `_metadata` (a FIFO too) marks a snapshot directory: one that does not
    // read is left alone as unreadable rather than taken for an incomplete checkpoint.
    let snapshots: Vec<PathBuf> = crate::find::find_snapshot_dirs(&base, 4)
        .into_iter()
        .filter(|d| d.has_metadata)
        .map(|d| d.path)
        .collect();
    let mut complete: BTreeSet<PathBuf> = BTreeSet::new();
    let mut protect = |path: &Path| {
        // A reference to a file that does not exist protects nothing; every existing one is
        // protected by identity (stat follows symlinks: the file itself, not a link to it).
        if let Ok(md) = std::fs::metadata(path) {
            referenced.insert(FileId::of(&md));
        }
    };
    for dir in &snapshots {
        // Unchecked: a structurally inconsistent snapshot still protects what it references.
        match SnapshotReader::open_unchecked(dir).and_then(|r| r.referenced_files()) {
            Ok(files) => {
                plan.snapshots += 1;
                complete.insert(dir.clone());
                protect(&dir.join(METADATA_FILE_NAME));
                for f in files {
                    protect(Path::new(&f.identity));
                }
            }
            Err(e) => plan.unreadable.push((dir.clone(), e.to_string())),
        }
    }
    plan.referenced = referenced.len();
    let unreadable: BTreeSet<PathBuf> = plan.unreadable.iter().map(|(p, _)| p.clone()).collect();
    let now = SystemTime::now();
    let mut jobs = Vec::new();
    for (path, md) in entries(&base)? {
        if md.is_dir() {
            jobs.push(path);
        } else if md.file_type().is_symlink() && entries_look_like_job(&path) {
            plan.skipped.push((path, skipped_reason(md.file_type())));
        }
    }
    for job in jobs {
        let mut candidates: Vec<(PathBuf, std::fs::Metadata, OrphanReason)> = Vec::new();
        for (dir, md) in entries(&job)? {
            let name = dir
                .file_name()
                .map(|n| n.to_string_lossy().to_string())
                .unwrap_or_default();
            if !is_gc_dir_name(&name) {
                continue;
            }
            if !md.is_dir() {
                if !md.is_file() {
                    plan.skipped.push((dir, skipped_reason(md.file_type())));
                }
                continue;
            }
            let reason = if parse_checkpoint_dir_name(&name).is_none() {
                OrphanReason::UnreferencedShared
            } else if unreadable.contains(&dir) {
                continue;
            } else if complete.contains(&dir) {
                OrphanReason::UnreferencedInCheckpoint
            } else {
                OrphanReason::IncompleteCheckpoint
            };
            let mut files = Vec::new();
            let skipped_before = plan.skipped.len();
            files_below(&dir, &mut files, &mut plan.skipped)?;
            if reason == OrphanReason::IncompleteCheckpoint && files.is_empty() && plan.skipped.len() == skipped_before
            {
                let age = md
                    .modified()
                    .ok()
                    .and_then(|m| now.duration_since(m).ok())
                    .unwrap_or_default();
                if age >= min_age {
                    plan.empty_dirs.push(dir);
                }
                continue;
            }
            candidates.extend(files.into_iter().map(|(p, m)| (p, m, reason)));
        }
        for (path, md, reason) in candidates {
            let id = FileId::of(&md);
            if referenced.contains(&id) {
                continue;
            }
            let orphan = Orphan {
                path,
                id,
                bytes: md.len(),
                reason,
            };
            let age = md
                .modified()
                .ok()
                .and_then(|m| now.duration_since(m).ok())
                .unwrap_or_default();
            plan.classify(orphan, age < min_age);
        }
    }
    plan_leftovers(&mut plan, &referenced, now, min_age)?;
    plan.sort();
    Ok(plan)
}

/// Adds the temporaries killed statekit runs left under the plan's base: their files as
/// [`OrphanReason::DeadRunLeftover`] orphans (unless a snapshot references them), empty ones
/// as [`GcPlan::empty_dirs`].
fn plan_leftovers(
    plan: &mut GcPlan,
    referenced: &BTreeSet<FileId>,
    now: SystemTime,
    min_age: Duration,
) -> Result<(), CheckpointError> {
    let age_of = |md: &std::fs::Metadata| {
        md.modified()
            .ok()
            .and_then(|m| now.duration_since(m).ok())
            .unwrap_or_default()
    };
    for l in crate::find::find_dead_leftovers(&plan.base, 4) {
        let Ok(md) = std::fs::symlink_metadata(&l.path) else {
            continue;
        };
        let mut files = Vec::new();
        if md.is_dir() {
            let skipped_before = plan.skipped.len();
            files_below(&l.path, &mut files, &mut plan.skipped)?;
            if files.is_empty() && plan.skipped.len() == skipped_before && age_of(&md) >= min_age {
                plan.empty_dirs.push(l.path.clone());
            }
        } else if md.is_file() {
            files.push((l.path.clone(), md));
        }
        for (path, md) in files {
            let id = FileId::of(&md);
            if referenced.contains(&id) {
                continue;
            }
            let young = age_of(&md) < min_age;
            plan.classify(
                Orphan {
                    path,
                    id,
                    bytes: md.len(),
                    reason: OrphanReason::DeadRunLeftover,
                },
                young,
            );
        }
    }
    Ok(())
}

impl GcPlan {
    /// Files an orphan: left alone when `young` (a running job may be writing it) or, for a
    /// shared file, while some snapshot is unreadable (it might reference it); else deleted.
    fn classify(&mut self, orphan: Orphan, young: bool) {
        if young {
            self.too_young.push(orphan);
        } else if orphan.reason == OrphanReason::UnreferencedShared && !self.unreadable.is_empty() {
            self.held_back.push(orphan);
        } else {
            self.orphans.push(orphan);
        }
    }

    fn sort(&mut self) {
        self.empty_dirs.sort();
        self.orphans.sort_by(|a, b| a.path.cmp(&b.path));
        self.too_young.sort_by(|a, b| a.path.cmp(&b.path));
        self.held_back.sort_by(|a, b| a.path.cmp(&b.path));
        self.skipped.sort();
    }
}

/// True when the directory a symlink points to looks like a job directory (so the symlink is
/// worth reporting as skipped; other symlinks in the base are none of gc's business).
fn entries_look_like_job(link: &Path) -> bool {
    std::fs::read_dir(link).is_ok_and(|rd| {
        rd.filter_map(|e| e.ok())
            .any(|e| is_gc_dir_name(&e.file_name().to_string_lossy()))
    })
}

/// A directory opened without following a symlink at any step below the base.
struct Dir(rustix::fd::OwnedFd);

impl Dir {
    fn open_base(base: &Path) -> std::io::Result<Dir> {
        use rustix::fs::{Mode, OFlags};
        let fd = rustix::fs::open(
            base,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Dir(fd))
    }

    fn open_child(&self, name: &std::ffi::OsStr) -> std::io::Result<Dir> {
        use rustix::fs::{Mode, OFlags};
        let fd = rustix::fs::openat(
            &self.0,
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Dir(fd))
    }
}

/// Splits `path` into its directory components below `base` and its file name; `None` when
/// it is not strictly below `base` or has components other than plain names.
fn below_base<'a>(base: &Path, path: &'a Path) -> Option<(Vec<&'a std::ffi::OsStr>, &'a std::ffi::OsStr)> {
    let rel = path.strip_prefix(base).ok()?;
    let mut parts = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(n) => parts.push(n),
            _ => return None,
        }
    }
    let name = parts.pop()?;
    Some((parts, name))
}

/// Opens the directory holding `o` (component by component, never following a symlink) and
/// checks that `o`'s name there is still a regular file with the plan's identity.
fn locate_orphan(base: &Path, o: &Orphan) -> Result<Option<(Dir, std::ffi::OsString)>, OrphanMoved> {
    use rustix::fs::{AtFlags, FileType};
    let (dirs, name) = below_base(base, &o.path).ok_or(OrphanMoved::NotBelowBase)?;
    let mut dir = Dir::open_base(base).map_err(OrphanMoved::Base)?;
    for d in dirs {
        dir = match dir.open_child(d) {
            Ok(next) => next,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(OrphanMoved::NotADirectory {
                    name: d.to_os_string(),
                    source,
                })
            }
        };
    }
    let st = match rustix::fs::statat(&dir.0, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(e) => return Err(OrphanMoved::Stat(e.into())),
    };
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(OrphanMoved::NotAFile);
    }
    let id = FileId {
        dev: st.st_dev as u64,
        ino: st.st_ino as u64,
    };
    if id != o.id || st.st_size as u64 != o.bytes {
        return Err(OrphanMoved::Replaced);
    }
    Ok(Some((dir, name.to_os_string())))
}

/// Deletes the orphans of `plan` — call it right after [`plan_gc`], whose plan was computed
/// from every `_metadata` under the base directory — then removes the `chk-N/` directories
/// (and directories inside them) left empty. Files already gone are skipped. Returns the
/// files and bytes deleted.
///
/// Every orphan is checked before any is deleted: it must lie below the plan's base, be
/// reachable from it through real directories only (no symlink at any step), and still be the
/// regular file the plan found. If one is not, the whole plan is refused and nothing is
/// deleted. Deletion itself goes through directory handles opened the same way, so a
/// directory swapped for a symlink meanwhile is not followed.
pub fn apply_gc(plan: &GcPlan) -> Result<(usize, u64), CheckpointError> {
    let base = &plan.base;
    if base.as_os_str().is_empty() || !base.is_absolute() {
        return Err(CheckpointError::GcWithoutBase);
    }
    for o in &plan.orphans {
        if let Err(why) = locate_orphan(base, o) {
            return Err(CheckpointError::GcRefused {
                orphan: o.path.clone(),
                why: Box::new(why),
                base: base.clone(),
            });
        }
    }
    let mut n = 0;
    let mut bytes = 0u64;
    let mut dirs: BTreeSet<PathBuf> = BTreeSet::new();
    for o in &plan.orphans {
        let located = locate_orphan(base, o).map_err(|why| CheckpointError::GcStopped {
            orphan: o.path.clone(),
            why: Box::new(why),
            deleted: n,
            base: base.clone(),
        })?;
        if let Some((dir, name)) = located {
            match rustix::fs::unlinkat(&dir.0, &name, rustix::fs::AtFlags::empty()) {
                Ok(()) => {
                    n += 1;
                    bytes = bytes.saturating_add(o.bytes);
                }
                Err(rustix::io::Errno::NOENT) => {}
                Err(e) => return Err(io_err(&o.path, e.into())),
            }
        }
        if o.reason == OrphanReason::DeadRunLeftover {
            // The directories from the file up to the temporary's own (none when the file
            // is the temporary): never a directory above it.
            let up: Vec<&Path> = o
                .path
                .ancestors()
                .skip(1)
                .take_while(|p| p.starts_with(base) && *p != base.as_path())
                .collect();
            if let Some(root) = up.iter().position(|p| {
                p.file_name()
                    .is_some_and(|n| statekit_core::temp::is_dead_leftover(&n.to_string_lossy()))
            }) {
                dirs.extend(up.iter().take(root + 1).map(|p| p.to_path_buf()));
            }
        } else if o.reason != OrphanReason::UnreferencedShared {
            let mut d = o.path.parent();
            while let Some(p) = d.filter(|p| p.starts_with(base) && *p != base.as_path()) {
                dirs.insert(p.to_path_buf());
                if p.file_name()
                    .is_some_and(|n| parse_checkpoint_dir_name(&n.to_string_lossy()).is_some())
                {
                    break;
                }
                d = p.parent();
            }
        }
    }
    // Empty incomplete checkpoints: their directories (and empty ones inside) go too.
    for d in &plan.empty_dirs {
        let mut below = Vec::new();
        dirs_below(d, &mut below);
        dirs.insert(d.clone());
        dirs.extend(below);
    }
    // Deepest first; only empty real directories go (removing a non-empty one fails).
    let mut dirs: Vec<PathBuf> = dirs.into_iter().collect();
    dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    for d in dirs {
        let Some((parents, name)) = below_base(base, &d) else {
            continue;
        };
        let Ok(mut dir) = Dir::open_base(base) else { continue };
        let mut reachable = true;
        for p in parents {
            match dir.open_child(p) {
                Ok(next) => dir = next,
                Err(_) => {
                    reachable = false;
                    break;
                }
            }
        }
        if reachable {
            let _ = rustix::fs::unlinkat(&dir.0, name, rustix::fs::AtFlags::REMOVEDIR);
        }
    }
    Ok((n, bytes))
}

/// [`plan_gc`] for a checkpoint base directory at any [`Location`](statekit_core::location::Location):
/// on an object store, by listings. Objects have no inodes or symlinks there, so references
/// and candidates are compared by URL (every reference of a snapshot resolves to the object
/// it names), and an object's age is its last modification as the store lists it. An
/// [`Orphan`]'s `path` is its URL and its `id` is zero.
pub fn plan_gc_at(base: &statekit_core::location::Location, min_age: Duration) -> Result<GcPlan, CheckpointError> {
    use statekit_core::location::Location;
    use statekit_core::storage::join;
    let url = match base {
        Location::Local(p) => return plan_gc(p, min_age),
        Location::Stored { url, .. } => url.clone(),
    };
    let root_storage = base.storage()?;
    let mut plan = GcPlan {
        base: PathBuf::from(&url),
        ..GcPlan::default()
    };
    let mut referenced: BTreeSet<String> = BTreeSet::new();
    let mut complete: BTreeSet<String> = BTreeSet::new();
    let snapshots = crate::find::find_snapshot_dirs_in(root_storage.as_ref(), "", 4)?;
    for dir in snapshots.iter().filter(|d| d.metadata_bytes.is_some()).map(|d| &d.path) {
        let loc = base.join(dir);
        match SnapshotReader::open_location_unchecked(&loc).and_then(|r| r.referenced_files()) {
            Ok(files) => {
                plan.snapshots += 1;
                complete.insert(dir.clone());
                referenced.insert(root_storage.describe(&join(dir, METADATA_FILE_NAME)));
                for f in files {
                    referenced.insert(f.storage.describe(&f.path));
                }
            }
            Err(e) => plan.unreadable.push((PathBuf::from(loc.display()), e.to_string())),
        }
    }
    plan.referenced = referenced.len();
    let unreadable: BTreeSet<String> = plan.unreadable.iter().map(|(p, _)| p.display().to_string()).collect();
    let now_ms = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    // Keys no path can name (an empty, `.` or `..` segment) are never candidates: they are
    // reported as skipped, and the rest is collected.
    let mut invalid: Vec<String> = Vec::new();
    let jobs = root_storage.list_reporting("", &mut invalid)?;
    for job in jobs.into_iter().filter(|e| e.is_dir) {
        for d in root_storage
            .list_reporting(&job.name, &mut invalid)?
            .into_iter()
            .filter(|e| e.is_dir)
        {
            if !is_gc_dir_name(&d.name) {
                continue;
            }
            let dir = join(&job.name, &d.name);
            let reason = if parse_checkpoint_dir_name(&d.name).is_none() {
                OrphanReason::UnreferencedShared
            } else if unreadable.contains(&base.join(&dir).display()) {
                continue;
            } else if complete.contains(&dir) {
                OrphanReason::UnreferencedInCheckpoint
            } else {
                OrphanReason::IncompleteCheckpoint
            };
            for (p, e) in statekit_core::storage::files_below_reporting(root_storage.as_ref(), &dir, &mut invalid)? {
                let object = root_storage.describe(&p);
                if referenced.contains(&object) {
                    continue;
                }
                let orphan = Orphan {
                    path: PathBuf::from(object),
                    id: FileId { dev: 0, ino: 0 },
                    bytes: e.size,
                    reason,
                };
                let age_ms = now_ms.saturating_sub(e.modified_ms);
                // No modification time is treated as new: never delete what might be in use.
                let young = e.modified_ms == 0 || u128::try_from(age_ms).unwrap_or(0) < min_age.as_millis();
                plan.classify(orphan, young);
            }
        }
    }
    invalid.sort();
    invalid.dedup();
    plan.skipped.extend(
        invalid
            .into_iter()
            .map(|k| (PathBuf::from(k), INVALID_KEY_REASON.to_string())),
    );
    plan.sort();
    Ok(plan)
}

/// Why an object store key is in [`GcPlan::skipped`]: no path names it, so it is never
/// deleted.
const INVALID_KEY_REASON: &str = "not a valid path (an empty, '.' or '..' segment); never deleted";

/// [`apply_gc`] of a plan from [`plan_gc_at`]: deletes its orphans (objects below `base`) and
/// returns (objects, bytes) deleted. An orphan not below `base` refuses the whole plan.
pub fn apply_gc_at(base: &statekit_core::location::Location, plan: &GcPlan) -> Result<(usize, u64), CheckpointError> {
    use statekit_core::location::Location;
    let (storage, root, url) = match base {
        Location::Local(_) => return apply_gc(plan),
        Location::Stored { storage, path, url } => (storage, path, url),
    };
    let prefix = format!("{}/", url.trim_end_matches('/'));
    let mut keys = Vec::new();
    for o in &plan.orphans {
        let object = o.path.display().to_string();
        let rel =
            object
                .strip_prefix(&prefix)
                .filter(|r| !r.is_empty())
                .ok_or_else(|| CheckpointError::GcOutsideBase {
                    object: object.clone(),
                    base: url.clone(),
                })?;
        keys.push((statekit_core::storage::join(root, rel), o.bytes));
    }
    let (mut n, mut bytes) = (0usize, 0u64);
    for (key, b) in keys {
        storage.delete_file(&key)?;
        n += 1;
        bytes = bytes.saturating_add(b);
    }
    Ok((n, bytes))
}
