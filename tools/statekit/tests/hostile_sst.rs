//! Hostile RocksDB table (SST) files in a Flink native savepoint (issue 40, points 5 and 6):
//! the tools read them with the safe-Rust reader, never with RocksDB's C++, which trusted
//! them. A footer whose index handle claims a 2^40-byte block made RocksDB throw
//! `std::bad_alloc` (exit 134); a block byte changed under a recomputed checksum made it
//! crash (SIGSEGV). Now `verify` and `dump` fail cleanly with an error naming the file, and no
//! `statekit-flink-db-*` scratch directory is left in the temporary directory.

mod common;

use common::bin;
use statekit_rocksdb_files::{decode_footer, read_table, table_layout, Limits, BLOCK_BASED_MAGIC};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A copy of Flink 1.20's native RocksDB savepoint in `tmp`.
fn copy_savepoint(tmp: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/flink/flink-1.20.5/savepoint-rocksdb-native/savepoint");
    let dst = tmp.join("savepoint");
    common::copy_dir(&src, &dst);
    dst
}

/// The table files of a savepoint directory (by their magic number), by name.
fn tables(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| {
            let b = std::fs::read(p).expect("read");
            b.len() > 8 && b[b.len() - 8..] == BLOCK_BASED_MAGIC.to_le_bytes()
        })
        .collect();
    out.sort();
    assert!(out.len() > 5, "{}", dir.display());
    out
}

/// The tables of the word count's `count` state (column family `count`): `dump --uid
/// word-count --state count` reads them.
fn count_tables(dir: &Path) -> Vec<PathBuf> {
    let out: Vec<PathBuf> = tables(dir)
        .into_iter()
        .filter(|p| {
            let b = std::fs::read(p).expect("read");
            let t = read_table("t", &b, None, &Limits::default()).expect("a fixture table reads");
            t.properties.column_family_name.as_deref() == Some("count")
        })
        .collect();
    assert!(!out.is_empty(), "no table of column family count in {}", dir.display());
    out
}

fn put_varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Runs `statekit args…` with its temporary directory in `scratch` (the binary under test,
/// or `STATEKIT_HOSTILE_SST_BIN` to check these tests against another build).
fn run(scratch: &Path, args: &[&str]) -> Output {
    let exe = std::env::var("STATEKIT_HOSTILE_SST_BIN").unwrap_or_else(|_| bin().to_string());
    Command::new(exe)
        .env("TMPDIR", scratch)
        .args(args)
        .output()
        .expect("run statekit")
}

/// `verify` and `dump` of `savepoint` fail cleanly (not an abort or a signal), name `file`,
/// and leave no scratch database behind. `verify` lists a problem (exit 1); `dump` exits
/// `dump_code`: 2 (an error) when the database cannot be opened, 1 when key groups are
/// damaged (the others are dumped).
fn assert_clean_failure(savepoint: &Path, file: &Path, scratch: &Path, dump_code: i32) {
    let name = file.file_name().expect("name").to_string_lossy().into_owned();
    let sp = savepoint.to_str().expect("path");
    let dump = vec!["dump", sp, "--uid", "word-count", "--state", "count"];
    // Neither aborts (134) nor dies of a signal.
    for (args, code) in [(vec!["verify", sp], 1), (dump, dump_code)] {
        let started = std::time::Instant::now();
        let out = run(scratch, &args);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.status.code(), Some(code), "{args:?}: {:?}: {text}", out.status);
        assert!(text.contains(&name), "{args:?}: the error does not name {name}: {text}");
        assert!(started.elapsed() < std::time::Duration::from_secs(60), "{args:?}");
        let left: Vec<String> = std::fs::read_dir(scratch)
            .expect("read_dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("statekit-flink-db-"))
            .collect();
        assert!(left.is_empty(), "{args:?} left {left:?} behind");
    }
}

#[test]
fn a_footer_claiming_a_2_pow_40_byte_index_block_is_a_clean_error() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let scratch = tmp.path().join("tmp");
    std::fs::create_dir(&scratch).expect("mkdir");
    let sp = copy_savepoint(tmp.path());
    let file = count_tables(&sp).remove(0);
    let mut b = std::fs::read(&file).expect("read");
    let footer = decode_footer("t", &b).expect("footer");
    assert!(footer.format_version < 6, "{footer:?}");
    let index = footer.index.expect("index handle in the footer");
    // Footer (format_version 1 to 5): checksum type, metaindex and index handles, padding to
    // 41 bytes, format_version, magic. The index handle now claims 2^40 bytes.
    let start = b.len() - 53;
    let mut part = vec![b[start]];
    put_varint(footer.metaindex.offset, &mut part);
    put_varint(footer.metaindex.size, &mut part);
    put_varint(index.offset, &mut part);
    put_varint(1 << 40, &mut part);
    part.resize(41, 0);
    b[start..start + 41].copy_from_slice(&part);
    std::fs::write(&file, &b).expect("write");
    // The index is read when the database opens: no key group can be read.
    assert_clean_failure(&sp, &file, &scratch, 2);
}

/// A change of one byte of a data block of `good`, with the block's checksum recomputed,
/// that the block decompresses after but whose entries break: preferably a key shorter than
/// an internal key's 8-byte trailer (RocksDB's C++ reader read before such a key).
fn breaking_change(good: &[u8]) -> Option<Vec<u8>> {
    let layout = table_layout("t", good, &Limits::default()).expect("layout");
    let mut fallback = None;
    for h in &layout.data_blocks {
        let (off, size) = (h.offset as usize, h.size as usize);
        for i in off..off + size {
            for x in [0x01u8, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80] {
                let mut b = good.to_vec();
                b[i] ^= x;
                let sum = layout.footer.checksum.compute(&b[off..off + size + 1]);
                b[off + size + 1..off + size + 5].copy_from_slice(&sum.to_le_bytes());
                let Err(e) = read_table("t", &b, None, &Limits::default()) else {
                    continue;
                };
                let text = e.to_string();
                if text.contains("internal key of") {
                    return Some(b);
                }
                if fallback.is_none() && !text.contains("decompress") {
                    fallback = Some(b);
                }
            }
        }
    }
    fallback
}

#[test]
fn a_data_block_byte_changed_under_a_recomputed_checksum_is_a_clean_error() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let scratch = tmp.path().join("tmp");
    std::fs::create_dir(&scratch).expect("mkdir");
    let sp = copy_savepoint(tmp.path());
    let (file, bad) = count_tables(&sp)
        .into_iter()
        .find_map(|p| breaking_change(&std::fs::read(&p).expect("read")).map(|b| (p, b)))
        .expect("a change that breaks a block's entries");
    std::fs::write(&file, &bad).expect("write");
    // Data blocks are read key group by key group: those of the damaged block fail.
    assert_clean_failure(&sp, &file, &scratch, 1);
}
