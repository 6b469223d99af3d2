//! Every native RocksDB fixture read identically by the C++ RocksDB and by this crate:
//! statekit's own native savepoint (RocksDB 10.x) and Flink 1.20's native savepoints and
//! incremental checkpoints (FRocksDB 6.20).
#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use common::*;
use statekit_flink::{decode_metadata, KeyedHandle, StreamHandle};
use statekit_rocksdb_files::{DbFile, FileData};
use std::path::{Path, PathBuf};

#[test]
fn statekit_native_savepoint_reads_as_cpp_does() {
    let root = repo_root().join("fixtures/v1/native-savepoint");
    let mut dirs = 0;
    for e in std::fs::read_dir(&root).unwrap() {
        let p = e.unwrap().path();
        if !p.is_dir() {
            continue;
        }
        let cpp = cpp_read(&p);
        let rust = rust_read(&p).unwrap();
        assert_eq!(rust, cpp, "{}", p.display());
        assert!(rust.values().map(Vec::len).sum::<usize>() > 0, "{}", p.display());
        dirs += 1;
    }
    assert_eq!(dirs, 2);
}

/// Where a Flink handle's file is in the fixture (paths of the machine that wrote it are
/// found by file name beside `_metadata` or in `../shared/`).
fn locate(dir: &Path, h: &StreamHandle) -> FileData {
    match h {
        StreamHandle::Bytes { data, .. } => FileData::Bytes(data.clone()),
        StreamHandle::Relative { path, .. } => FileData::Path(dir.join(path)),
        StreamHandle::File { path, .. } => {
            let base = path.rsplit('/').next().unwrap();
            let here = dir.join(base);
            if here.exists() {
                FileData::Path(here)
            } else {
                FileData::Path(dir.parent().unwrap().join("shared").join(base))
            }
        }
        other => panic!("unexpected handle {other:?}"),
    }
}

/// Each native handle of the `_metadata` in `dir`: its files.
fn native_dbs(dir: &Path) -> Vec<Vec<DbFile>> {
    let bytes = std::fs::read(dir.join("_metadata")).unwrap();
    let md = decode_metadata(&bytes, "_metadata").unwrap();
    let mut out = Vec::new();
    for op in &md.operators {
        for st in &op.subtasks {
            for k in st.managed_keyed.iter().chain(&st.raw_keyed) {
                if let KeyedHandle::Incremental(i) = k {
                    let files = i
                        .shared
                        .iter()
                        .chain(&i.private)
                        .map(|f| DbFile {
                            name: f.local_name.clone(),
                            display: f.local_name.clone(),
                            data: locate(dir, &f.handle),
                        })
                        .collect();
                    out.push(files);
                }
            }
        }
    }
    out
}

fn materialize(files: &[DbFile], to: &Path) {
    for f in files {
        let bytes = match &f.data {
            FileData::Bytes(b) => b.clone(),
            FileData::Path(p) => std::fs::read(p).unwrap(),
            FileData::Shared(b) => (**b).as_ref().to_vec(),
        };
        std::fs::write(to.join(&f.name), bytes).unwrap();
    }
}

fn check_flink(dir: PathBuf) {
    let dbs = native_dbs(&dir);
    assert!(!dbs.is_empty(), "{}", dir.display());
    let mut entries = 0;
    for files in dbs {
        let tmp = tempfile::tempdir().unwrap();
        materialize(&files, tmp.path());
        let cpp = cpp_read(tmp.path());
        let rust = rust_read_files(files).unwrap();
        assert_eq!(rust, cpp, "{}", dir.display());
        entries += rust.values().map(Vec::len).sum::<usize>();
    }
    assert!(entries > 0, "{}", dir.display());
}

#[test]
fn flink_native_savepoint_reads_as_cpp_does() {
    check_flink(repo_root().join("fixtures/flink/flink-1.20.5/savepoint-rocksdb-native/savepoint"));
}

#[test]
fn flink_types_native_savepoint_reads_as_cpp_does() {
    check_flink(repo_root().join("fixtures/flink/flink-1.20.5-types/savepoint-rocksdb-native/savepoint"));
}

#[test]
fn flink_incremental_checkpoints_read_as_cpp_does() {
    let base = repo_root().join(
        "fixtures/flink/flink-1.20.5/checkpoint-rocksdb-incremental/checkpoints/5eed5eed000000000000000000000004",
    );
    check_flink(base.join("chk-1"));
    check_flink(base.join("chk-2"));
}
