//! Finding snapshot directories under a directory: on the local filesystem, or in any
//! [`Storage`] (an object store) by listings.

use crate::layout::parse_checkpoint_dir_name;
use statekit_core::storage::{join, Storage, StorageError};
use statekit_format::METADATA_FILE_NAME;
use std::path::{Path, PathBuf};

/// A directory [`find_snapshot_dirs`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotDir {
    /// The directory.
    pub path: PathBuf,
    /// True when it holds an entry named `_metadata` (of whatever kind: one that is not a
    /// readable regular file makes a broken snapshot, not a directory to search); false for a
    /// `chk-N` directory without one (an incomplete checkpoint).
    pub has_metadata: bool,
}

/// True when `dir` holds an entry named `_metadata`, whatever it is.
pub fn has_metadata(dir: &Path) -> bool {
    std::fs::symlink_metadata(dir.join(METADATA_FILE_NAME)).is_ok()
}

/// Every snapshot directory under `dir` (itself included), at most `depth` levels down, in
/// path order: directories holding `_metadata`, and `chk-N` directories without one. A
/// snapshot directory is not searched further. Symlinked directories are followed (reading
/// is harmless; `gc` never deletes through them).
pub fn find_snapshot_dirs(dir: &Path, depth: usize) -> Vec<SnapshotDir> {
    let mut out = Vec::new();
    walk(dir, depth, &mut out);
    out
}

/// Temporaries of killed statekit runs ([`statekit_core::temp`]) under `dir`, at most `depth`
/// levels down, in the directories [`find_snapshot_dirs`] searches (not inside snapshot
/// directories, and not through symlinks), in path order.
pub fn find_dead_leftovers(dir: &Path, depth: usize) -> Vec<statekit_core::temp::Leftover> {
    let mut out = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), depth)];
    while let Some((d, depth)) = stack.pop() {
        if has_metadata(&d) {
            continue;
        }
        // One listing: dead runs' temporaries are collected, other real directories searched.
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let Ok(t) = e.file_type() else { continue };
            if t.is_symlink() {
                continue;
            }
            if statekit_core::temp::is_dead_leftover(&e.file_name().to_string_lossy()) {
                out.push(statekit_core::temp::Leftover::at(e.path()));
            } else if t.is_dir() && depth > 0 {
                stack.push((e.path(), depth - 1));
            }
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

fn walk(dir: &Path, depth: usize, out: &mut Vec<SnapshotDir>) {
    let is_chk = dir
        .file_name()
        .is_some_and(|n| parse_checkpoint_dir_name(&n.to_string_lossy()).is_some());
    let has = has_metadata(dir);
    if has || is_chk {
        out.push(SnapshotDir {
            path: dir.to_path_buf(),
            has_metadata: has,
        });
        return;
    }
    if depth == 0 {
        return;
    }
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    let mut dirs: Vec<PathBuf> = rd
        .filter_map(|e| e.ok())
        // A killed run's temporary output is no snapshot (it never got its name), even
        // with a `_metadata` inside: `find_dead_leftovers` reports it.
        .filter(|e| !statekit_core::temp::is_dead_leftover(&e.file_name().to_string_lossy()))
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    for d in dirs {
        walk(&d, depth - 1, out);
    }
}

/// A directory [`find_snapshot_dirs_in`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredSnapshotDir {
    /// The directory, relative to the storage searched.
    pub path: String,
    /// The size of its `_metadata`, or `None` for a `chk-N` directory without one (an
    /// incomplete checkpoint).
    pub metadata_bytes: Option<u64>,
}

/// [`find_snapshot_dirs`] in a [`Storage`] (an object store): every directory below `dir` (itself
/// included), at most `depth` levels down, in path order, that holds `_metadata` or is a
/// `chk-N` directory; one listing per directory visited, and a snapshot directory is not
/// searched further.
pub fn find_snapshot_dirs_in(
    storage: &dyn Storage,
    dir: &str,
    depth: usize,
) -> Result<Vec<StoredSnapshotDir>, StorageError> {
    let mut out = Vec::new();
    let mut stack: Vec<(String, usize)> = vec![(dir.to_string(), depth)];
    while let Some((d, depth)) = stack.pop() {
        let entries = storage.list(&d)?;
        let metadata_bytes = entries
            .iter()
            .find(|e| !e.is_dir && e.name == METADATA_FILE_NAME)
            .map(|e| e.size);
        let name = d.rsplit('/').next().unwrap_or(&d);
        if metadata_bytes.is_some() || parse_checkpoint_dir_name(name).is_some() {
            out.push(StoredSnapshotDir {
                path: d,
                metadata_bytes,
            });
        } else if depth > 0 {
            stack.extend(
                entries
                    .iter()
                    .filter(|e| e.is_dir)
                    .map(|e| (join(&d, &e.name), depth - 1)),
            );
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}
