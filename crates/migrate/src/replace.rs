//! What `--force` may replace: only a snapshot this tool may own.
//!
//! A directory (or object-store prefix) that merely contains a file named `_metadata` is not
//! a snapshot: Spark, Dask and pyarrow write `_metadata` beside the Parquet files of a
//! dataset. An existing output is replaced only when it is empty, or when it is recognisably
//! a statekit snapshot and nothing else: its `_metadata` decodes as statekit's snapshot
//! metadata, every reference in it is inside the directory, and every file below the
//! directory is `_metadata` or a file that `_metadata` references (directories only as the
//! parents of such files; no symbolic links, FIFOs or other special files). Anything else is
//! refused before anything is deleted, naming the first entry that is not the snapshot's.

use crate::error::MigrateError;
use statekit_core::storage::Storage;
use statekit_format::{FileScope, METADATA_FILE_NAME};
use std::collections::BTreeSet;
use std::path::Path;

/// One entry below the directory to replace, by its path relative to the directory.
#[derive(Debug)]
struct Found {
    path: String,
    /// A regular file (directories are not listed); `Some(kind)` names what else it is.
    other: Option<&'static str>,
}

/// Checks that the local directory `dir` (the existing output, shown as `shown`) may be
/// replaced: empty, or a statekit snapshot and nothing else (see the module docs). Symbolic
/// links are never followed.
pub fn check_local_replaceable(dir: &Path, shown: &Path) -> Result<(), MigrateError> {
    let mut found = Vec::new();
    let mut stack = vec![String::new()];
    let mut entries_seen = 0usize;
    while let Some(rel) = stack.pop() {
        let here = if rel.is_empty() {
            dir.to_path_buf()
        } else {
            dir.join(&rel)
        };
        let rd = std::fs::read_dir(&here).map_err(|e| MigrateError::io(&here, e))?;
        for e in rd {
            let e = e.map_err(|e| MigrateError::io(&here, e))?;
            entries_seen += 1;
            if entries_seen > MAX_ENTRIES {
                return Err(not_replaceable(
                    shown,
                    format!("it holds more than {MAX_ENTRIES} entries, more than a snapshot statekit writes"),
                ));
            }
            let name = e.file_name().to_string_lossy().into_owned();
            let path = if rel.is_empty() { name } else { format!("{rel}/{name}") };
            let ft = e.file_type().map_err(|err| MigrateError::io(e.path(), err))?;
            if ft.is_dir() {
                stack.push(path);
            } else if ft.is_file() {
                found.push(Found { path, other: None });
            } else {
                found.push(Found {
                    path,
                    other: Some(statekit_core::storage::file_type_name(ft)),
                });
            }
        }
    }
    if entries_seen == 0 {
        return Ok(());
    }
    let metadata = match std::fs::symlink_metadata(dir.join(METADATA_FILE_NAME)) {
        Ok(md) if md.is_file() => {
            check_metadata_size(shown, md.len())?;
            let p = dir.join(METADATA_FILE_NAME);
            Some(std::fs::read(&p).map_err(|e| MigrateError::io(&p, e))?)
        }
        _ => None,
    };
    check_entries(shown, metadata.as_deref(), &found)
}

/// Checks that the prefix `dir` of `storage` (an object store's existing output, shown as
/// `shown`) may be replaced: empty, or a statekit snapshot and nothing else.
pub fn check_stored_replaceable(storage: &dyn Storage, dir: &str, shown: &Path) -> Result<(), MigrateError> {
    let files =
        statekit_core::storage::files_below(storage, dir).map_err(statekit_checkpoint::CheckpointError::from)?;
    if files.is_empty() {
        return Ok(());
    }
    if files.len() > MAX_ENTRIES {
        return Err(not_replaceable(
            shown,
            format!("it holds more than {MAX_ENTRIES} objects, more than a snapshot statekit writes"),
        ));
    }
    let strip = |p: &str| -> String {
        if dir.is_empty() {
            p.to_string()
        } else {
            p.strip_prefix(dir)
                .map(|r| r.trim_start_matches('/'))
                .unwrap_or(p)
                .to_string()
        }
    };
    let found: Vec<Found> = files
        .iter()
        .map(|(p, _)| Found {
            path: strip(p),
            other: None,
        })
        .collect();
    let metadata = if found.iter().any(|f| f.path == METADATA_FILE_NAME) {
        let meta_path = statekit_core::storage::join(dir, METADATA_FILE_NAME);
        let size = files.iter().find(|(p, _)| *p == meta_path).map_or(0, |(_, e)| e.size);
        check_metadata_size(shown, size)?;
        let blob = storage
            .open(&meta_path)
            .map_err(statekit_checkpoint::CheckpointError::from)?;
        Some(blob.bytes().to_vec())
    } else {
        None
    };
    check_entries(shown, metadata.as_deref(), &found)
}

/// A snapshot statekit writes has a few files per subtask: far fewer entries than this.
const MAX_ENTRIES: usize = 1_000_000;

/// statekit's own `_metadata` is small (state lives in data files); one larger than this is
/// not one the tool wrote.
const MAX_METADATA_BYTES: u64 = 256 << 20;

/// A `_metadata` larger than statekit writes is not one of its snapshots'.
fn check_metadata_size(shown: &Path, size: u64) -> Result<(), MigrateError> {
    if size > MAX_METADATA_BYTES {
        return Err(not_replaceable(
            shown,
            format!("its {METADATA_FILE_NAME} is {size} bytes, larger than statekit's snapshot metadata"),
        ));
    }
    Ok(())
}

fn not_replaceable(shown: &Path, reason: String) -> MigrateError {
    MigrateError::OutputNotReplaceable {
        path: shown.to_path_buf(),
        reason,
    }
}

/// The rule, on a listing (files with paths relative to the directory) and the bytes of its
/// `_metadata` when it has one.
fn check_entries(shown: &Path, metadata: Option<&[u8]>, found: &[Found]) -> Result<(), MigrateError> {
    if let Some(f) = found.iter().find(|f| f.other.is_some()) {
        return Err(not_replaceable(
            shown,
            format!(
                "{} is {}, which no snapshot statekit writes holds",
                f.path,
                f.other.unwrap_or("not a regular file")
            ),
        ));
    }
    let Some(bytes) = metadata else {
        return Err(not_replaceable(
            shown,
            format!("it is not empty and has no {METADATA_FILE_NAME} file: not a snapshot"),
        ));
    };
    let meta = statekit_format::decode_metadata(bytes, METADATA_FILE_NAME).map_err(|e| {
        not_replaceable(
            shown,
            format!("its {METADATA_FILE_NAME} is not statekit's snapshot metadata ({e}): a Parquet dataset's, Apache Flink's or another tool's"),
        )
    })?;
    let mut referenced: BTreeSet<&str> = BTreeSet::new();
    for op in &meta.operators {
        for s in &op.subtasks {
            for f in s.files() {
                if f.scope != FileScope::Exclusive {
                    return Err(not_replaceable(
                        shown,
                        format!(
                            "its {METADATA_FILE_NAME} references {} ({}): a checkpoint, not a self-contained savepoint",
                            f.path,
                            f.scope.as_str()
                        ),
                    ));
                }
                referenced.insert(f.path.as_str());
            }
        }
    }
    if let Some(f) = found
        .iter()
        .find(|f| f.path != METADATA_FILE_NAME && !referenced.contains(f.path.as_str()))
    {
        return Err(not_replaceable(
            shown,
            format!("{} is not a file its {METADATA_FILE_NAME} references", f.path),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(paths: &[&str]) -> Vec<Found> {
        paths
            .iter()
            .map(|p| Found {
                path: (*p).to_string(),
                other: None,
            })
            .collect()
    }

    #[test]
    fn parquet_metadata_is_not_a_snapshot() {
        // A Parquet dataset's `_metadata` starts with PAR1.
        let e = check_entries(
            Path::new("out"),
            Some(b"PAR1\x00\x00\x00\x00PAR1"),
            &found(&["_metadata", "part-0.parquet"]),
        )
        .expect_err("refused");
        assert!(e.to_string().contains("not statekit's snapshot metadata"), "{e}");
    }

    #[test]
    fn no_metadata_is_not_a_snapshot() {
        let e = check_entries(Path::new("out"), None, &found(&["README"])).expect_err("refused");
        assert!(e.to_string().contains("no _metadata"), "{e}");
    }

    #[test]
    fn special_files_are_named() {
        let f = vec![Found {
            path: "x".into(),
            other: Some("a FIFO"),
        }];
        let e = check_entries(Path::new("out"), None, &f).expect_err("refused");
        assert!(e.to_string().contains("x is a FIFO"), "{e}");
    }
}
