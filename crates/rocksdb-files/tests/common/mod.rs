//! Shared helpers of the tests: reading a database directory with the C++ RocksDB and with
//! this crate, and Flink's list-state merge operator.
#![allow(dead_code, clippy::unwrap_used, missing_docs)]

use statekit_rocksdb_files::{Db, DbFile, FileData, Limits};
use std::collections::BTreeMap;
use std::path::Path;

pub type Cfs = BTreeMap<String, Vec<(Vec<u8>, Vec<u8>)>>;

/// Flink's `stringappendtest`: operands joined with ','.
pub fn join(_key: &[u8], existing: Option<&[u8]>, ops: &[&[u8]]) -> Result<Vec<u8>, String> {
    Ok(statekit_rocksdb_files::string_append(existing, ops, b','))
}

fn cpp_join(_key: &[u8], existing: Option<&[u8]>, operands: &rocksdb::MergeOperands) -> Option<Vec<u8>> {
    let ops: Vec<&[u8]> = operands.iter().collect();
    join(_key, existing, &ops).ok()
}

pub fn cpp_options() -> rocksdb::Options {
    let mut opts = rocksdb::Options::default();
    opts.set_merge_operator_associative("stringappendtest", cpp_join);
    opts
}

/// Every column family of the database in `dir`, read read-only by the C++ RocksDB.
pub fn cpp_read(dir: &Path) -> Cfs {
    let opts = cpp_options();
    let names = rocksdb::DB::list_cf(&opts, dir).unwrap();
    let cfs = names
        .iter()
        .map(|c| rocksdb::ColumnFamilyDescriptor::new(c, cpp_options()));
    let db = rocksdb::DB::open_cf_descriptors_read_only(&opts, dir, cfs, false).unwrap();
    let mut out = Cfs::new();
    for n in &names {
        let cf = db.cf_handle(n).unwrap();
        let mut it = db.raw_iterator_cf(&cf);
        it.seek_to_first();
        let mut v = Vec::new();
        while it.valid() {
            v.push((it.key().unwrap().to_vec(), it.value().unwrap().to_vec()));
            it.next();
        }
        it.status().unwrap();
        out.insert(n.clone(), v);
    }
    out
}

/// The files of a database directory.
pub fn dir_files(dir: &Path) -> Vec<DbFile> {
    let mut files = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        if !e.file_type().unwrap().is_file() {
            continue;
        }
        let name = e.file_name().to_string_lossy().into_owned();
        files.push(DbFile {
            display: e.path().display().to_string(),
            name,
            data: FileData::Path(e.path()),
        });
    }
    files
}

/// Every column family of the database, read by this crate.
pub fn rust_read_files(files: Vec<DbFile>) -> Result<Cfs, statekit_rocksdb_files::Error> {
    let db = Db::open(files, Limits::default())?;
    let mut out = Cfs::new();
    let names: Vec<String> = db.column_families().map(|c| c.name.clone()).collect();
    for n in names {
        let v = db.read_column_family(&n, &join)?;
        out.insert(n, v);
    }
    Ok(out)
}

pub fn rust_read(dir: &Path) -> Result<Cfs, statekit_rocksdb_files::Error> {
    rust_read_files(dir_files(dir))
}

pub fn repo_root() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}
