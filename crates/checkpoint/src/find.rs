//! Finding snapshot directories under a directory on the local filesystem.

use crate::layout::parse_checkpoint_dir_name;
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
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    for d in dirs {
        walk(&d, depth - 1, out);
    }
}
