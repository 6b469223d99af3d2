//! Random databases written by the C++ RocksDB (several column families; puts, deletes,
//! merges and range deletions; several flushes and compactions, so several tables on
//! several levels; every compression, checksum type, index kind and format version) read
//! back by this crate: the same entries in the same order as the C++ reader's.
#![allow(clippy::unwrap_used, missing_docs)]

mod common;

use common::*;
use proptest::prelude::*;

const CFS: [&str; 2] = ["a", "b"];

#[derive(Debug, Clone)]
enum Op {
    Put(usize, Vec<u8>, Vec<u8>),
    Delete(usize, Vec<u8>),
    Merge(usize, Vec<u8>, Vec<u8>),
    DeleteRange(usize, Vec<u8>, Vec<u8>),
    Flush(usize),
    Compact(usize),
}

#[derive(Debug, Clone)]
struct Config {
    compression: u8,
    checksum: u8,
    partitioned: bool,
    hash_index: bool,
    format_version: i32,
    block_size: usize,
    index_restart: i32,
    block_restart: i32,
}

fn key() -> impl Strategy<Value = Vec<u8>> {
    // Few distinct keys (so they collide across tables), of varied lengths and prefixes.
    (0u8..40, 0usize..24).prop_map(|(k, pad)| {
        let mut v = vec![b'k', k / 8, k];
        v.extend(std::iter::repeat_n(b'p', pad));
        v
    })
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..40),
        (any::<u8>(), 0usize..600).prop_map(|(b, n)| vec![b; n]),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let cf = 0usize..CFS.len();
    prop_oneof![
        6 => (cf.clone(), key(), value()).prop_map(|(c, k, v)| Op::Put(c, k, v)),
        2 => (cf.clone(), key()).prop_map(|(c, k)| Op::Delete(c, k)),
        4 => (cf.clone(), key(), value()).prop_map(|(c, k, v)| Op::Merge(c, k, v)),
        1 => (cf.clone(), key(), key()).prop_map(|(c, a, b)| if a <= b { Op::DeleteRange(c, a, b) } else { Op::DeleteRange(c, b, a) }),
        2 => cf.clone().prop_map(Op::Flush),
        1 => cf.prop_map(Op::Compact),
    ]
}

fn config() -> impl Strategy<Value = Config> {
    (
        0u8..4,
        0u8..5,
        any::<bool>(),
        any::<bool>(),
        2i32..8,
        prop_oneof![Just(128usize), Just(512), Just(4096)],
        1i32..4,
        1i32..17,
    )
        .prop_map(
            |(
                compression,
                checksum,
                partitioned,
                hash_index,
                format_version,
                block_size,
                index_restart,
                block_restart,
            )| Config {
                compression,
                checksum,
                partitioned,
                hash_index,
                format_version,
                block_size,
                index_restart,
                block_restart,
            },
        )
}

fn options(c: &Config) -> rocksdb::Options {
    let mut o = cpp_options();
    o.create_if_missing(true);
    o.create_missing_column_families(true);
    o.set_disable_auto_compactions(true);
    o.set_compression_type(match c.compression {
        0 => rocksdb::DBCompressionType::None,
        1 => rocksdb::DBCompressionType::Snappy,
        2 => rocksdb::DBCompressionType::Lz4,
        _ => rocksdb::DBCompressionType::Zstd,
    });
    let mut t = rocksdb::BlockBasedOptions::default();
    t.set_format_version(c.format_version);
    t.set_checksum_type(match c.checksum {
        0 => rocksdb::ChecksumType::NoChecksum,
        1 => rocksdb::ChecksumType::CRC32c,
        2 => rocksdb::ChecksumType::XXHash,
        3 => rocksdb::ChecksumType::XXHash64,
        _ => rocksdb::ChecksumType::XXH3,
    });
    t.set_block_size(c.block_size);
    t.set_block_restart_interval(c.block_restart);
    t.set_index_block_restart_interval(c.index_restart);
    if c.partitioned {
        t.set_index_type(rocksdb::BlockBasedIndexType::TwoLevelIndexSearch);
        t.set_metadata_block_size(64);
    }
    if c.hash_index {
        t.set_data_block_index_type(rocksdb::DataBlockIndexType::BinaryAndHash);
    }
    o.set_block_based_table_factory(&t);
    o
}

/// Writes `ops` into a new database in `dir` (every column family flushed at the end).
fn write(dir: &std::path::Path, c: &Config, ops: &[Op]) {
    let o = options(c);
    let cfs = CFS.iter().map(|n| rocksdb::ColumnFamilyDescriptor::new(*n, options(c)));
    let db = rocksdb::DB::open_cf_descriptors(&o, dir, cfs).unwrap();
    let cf = |i: usize| db.cf_handle(CFS[i]).unwrap();
    for op in ops {
        match op {
            Op::Put(i, k, v) => db.put_cf(&cf(*i), k, v).unwrap(),
            Op::Delete(i, k) => db.delete_cf(&cf(*i), k).unwrap(),
            Op::Merge(i, k, v) => db.merge_cf(&cf(*i), k, v).unwrap(),
            Op::DeleteRange(i, a, b) => db.delete_range_cf(&cf(*i), a, b).unwrap(),
            Op::Flush(i) => db.flush_cf(&cf(*i)).unwrap(),
            Op::Compact(i) => db.compact_range_cf(&cf(*i), None::<&[u8]>, None::<&[u8]>),
        }
    }
    for i in 0..CFS.len() {
        db.flush_cf(&cf(i)).unwrap();
    }
    db.flush().unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_databases_read_as_cpp_reads_them(
        c in config(),
        ops in proptest::collection::vec(op(), 1..120),
        lower in key(),
        upper in proptest::option::of(key()),
    ) {
        let tmp = tempfile::tempdir().unwrap();
        write(tmp.path(), &c, &ops);
        let cpp = cpp_read(tmp.path());
        let rust = rust_read(tmp.path()).map_err(|e| TestCaseError::fail(format!("{c:?}: {e}")))?;
        prop_assert_eq!(&rust, &cpp, "{:?}", c);
        // A key range reads only its blocks, and the same entries.
        let db = statekit_rocksdb_files::Db::open(dir_files(tmp.path()), statekit_rocksdb_files::Limits::default()).unwrap();
        for (name, all) in &cpp {
            let want: Vec<(Vec<u8>, Vec<u8>)> = all
                .iter()
                .filter(|(k, _)| *k >= lower && upper.as_ref().is_none_or(|u| k < u))
                .cloned()
                .collect();
            let got = db.column_family_reader(name).unwrap().read_range(&lower, upper.as_deref(), &join).unwrap();
            prop_assert_eq!(got, want, "{} {:?}", name, c);
        }
    }
}

/// Entries only in a live write-ahead log (written, never flushed) are not silently left
/// out: the read is refused, naming the log.
#[test]
fn a_live_write_ahead_log_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    {
        let mut o = cpp_options();
        o.create_if_missing(true);
        let db = rocksdb::DB::open(&o, tmp.path()).unwrap();
        db.put(b"flushed", b"1").unwrap();
        db.flush().unwrap();
        db.put(b"only-in-the-log", b"2").unwrap();
    }
    let cpp = cpp_read(tmp.path());
    assert_eq!(cpp["default"].len(), 2);
    let e = rust_read(tmp.path()).unwrap_err();
    assert_eq!(e.kind(), statekit_rocksdb_files::ErrorKind::Unsupported, "{e}");
    assert!(
        e.to_string().contains(".log") && e.to_string().contains("write-ahead log"),
        "{e}"
    );
}
