//! Damaged files give errors, never a panic or a huge allocation: every single-byte change
//! and every truncation of the fixtures' tables and MANIFESTs, a footer claiming a 2^40-byte
//! block, and every byte of every block changed with the block's checksum recomputed (the
//! changes RocksDB's C++ reader crashed on).
#![allow(clippy::unwrap_used, clippy::indexing_slicing, missing_docs)]

mod common;

use common::*;
use statekit_rocksdb_files::{
    decode_footer, log_records, mask_crc, read_manifest, read_table, table_layout, Db, DbFile, FileData, Limits,
    BLOCK_BASED_MAGIC,
};
use std::alloc::{GlobalAlloc, Layout, System};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The system allocator, remembering the largest single allocation.
struct Counting;
static LARGEST: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LARGEST.fetch_max(l.size(), Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        LARGEST.fetch_max(l.size(), Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        LARGEST.fetch_max(n, Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Limits small enough that a test notices an allocation the input does not justify.
const LIMITS: Limits = Limits {
    max_block_bytes: 1 << 20,
    max_table_bytes: 16 << 20,
};
/// No allocation may exceed this (the largest block the limits allow, and some).
const MOST: usize = 4 << 20;

/// Every table and MANIFEST of the fixtures (files found by content).
fn fixture_files() -> (Vec<PathBuf>, Vec<PathBuf>) {
    let mut tables = Vec::new();
    let mut manifests = Vec::new();
    let mut stack = vec![
        repo_root().join("fixtures/flink"),
        repo_root().join("fixtures/v1/native-savepoint"),
    ];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            let b = std::fs::read(&p).unwrap();
            if b.len() > 8 && b[b.len() - 8..] == BLOCK_BASED_MAGIC.to_le_bytes() {
                tables.push(p);
            } else if p.file_name().unwrap().to_string_lossy().starts_with("MANIFEST-")
                || (b.len() > 7 && log_records("m", &b).is_ok_and(|r| !r.is_empty()) && read_manifest("m", &b).is_ok())
            {
                manifests.push(p);
            }
        }
    }
    tables.sort();
    manifests.sort();
    assert!(tables.len() > 50, "{}", tables.len());
    assert!(manifests.len() > 5, "{}", manifests.len());
    (tables, manifests)
}

fn check_alloc(what: &str) {
    let most = LARGEST.load(Ordering::Relaxed);
    assert!(most <= MOST, "{what}: an allocation of {most} bytes");
}

#[test]
fn every_byte_flip_and_truncation_of_a_table_is_an_error_or_a_read() {
    let (tables, _) = fixture_files();
    let mut errors = 0u64;
    // Every byte of the smaller tables, every 7th of the larger ones.
    for p in tables.iter().take(40) {
        let good = std::fs::read(p).unwrap();
        read_table("t", &good, None, &LIMITS).unwrap();
        let step = if good.len() > 4096 { 7 } else { 1 };
        for i in (0..good.len()).step_by(step) {
            let mut b = good.clone();
            b[i] ^= 0x5a;
            errors += u64::from(read_table("t", &b, None, &LIMITS).is_err());
        }
        for n in (0..good.len()).step_by(step * 3) {
            assert!(
                read_table("t", &good[..n], None, &LIMITS).is_err(),
                "{} cut at {n}",
                p.display()
            );
        }
        check_alloc(&p.display().to_string());
    }
    assert!(errors > 1000, "{errors}");
}

/// Rewrites the checksum of the block at `off` (of `size` bytes) after a change.
fn fix_checksum(b: &mut [u8], off: usize, size: usize, checksum: statekit_rocksdb_files::ChecksumType) {
    let sum = checksum.compute(&b[off..off + size + 1]);
    b[off + size + 1..off + size + 5].copy_from_slice(&sum.to_le_bytes());
}

#[test]
fn every_block_byte_changed_under_a_recomputed_checksum_is_an_error_or_a_read() {
    let (tables, _) = fixture_files();
    let mut changes = 0u64;
    let mut errors = 0u64;
    for p in &tables {
        let good = std::fs::read(p).unwrap();
        let layout = table_layout("t", &good, &LIMITS).unwrap();
        if layout.footer.format_version >= 6 {
            continue;
        }
        let mut blocks = layout.data_blocks.clone();
        blocks.extend(layout.meta_blocks.values().copied());
        blocks.push(layout.footer.metaindex);
        blocks.extend(layout.footer.index);
        for h in blocks {
            let (off, size) = (h.offset as usize, h.size as usize);
            for i in off..off + size + 1 {
                for x in [0x01u8, 0x80, 0xff] {
                    let mut b = good.clone();
                    b[i] ^= x;
                    fix_checksum(&mut b, off, size, layout.footer.checksum);
                    changes += 1;
                    errors += u64::from(read_table("t", &b, None, &LIMITS).is_err());
                }
            }
        }
        check_alloc(&p.display().to_string());
    }
    assert!(changes > 10_000, "{changes}");
    assert!(errors > changes / 4, "{errors} of {changes}");
}

#[test]
fn a_footer_claiming_a_2_pow_40_byte_block_is_an_error() {
    let (tables, _) = fixture_files();
    for p in tables.iter().take(20) {
        let good = std::fs::read(p).unwrap();
        let f = decode_footer("t", &good).unwrap();
        let Some(index) = f.index else { continue };
        // Rewrite the footer's handles (format_version 1 to 5): metaindex, then each claim.
        for (meta_size, index_size) in [(f.metaindex.size, 1u64 << 40), (1 << 40, index.size)] {
            let mut b = good.clone();
            let start = b.len() - 53;
            let mut part = vec![b[start]];
            for v in [f.metaindex.offset, meta_size, index.offset, index_size] {
                let mut v = v;
                while v >= 0x80 {
                    part.push((v as u8) | 0x80);
                    v >>= 7;
                }
                part.push(v as u8);
            }
            part.resize(41, 0);
            b[start..start + 41].copy_from_slice(&part);
            let e = read_table("000042.sst", &b, None, &Limits::default()).unwrap_err();
            let text = e.to_string();
            assert!(
                text.contains("000042.sst") && text.contains("past the end of the file"),
                "{text}"
            );
        }
        check_alloc(&p.display().to_string());
    }
}

#[test]
fn every_manifest_byte_changed_is_an_error_or_a_read() {
    let (_, manifests) = fixture_files();
    for p in &manifests {
        let good = std::fs::read(p).unwrap();
        read_manifest("m", &good).unwrap();
        for i in 0..good.len() {
            for x in [0x01u8, 0x80, 0xff] {
                let mut b = good.clone();
                b[i] ^= x;
                let _ = read_manifest("m", &b);
                // The same change with the record's checksum recomputed (records of the
                // fixtures fit in one block: header at 0, then record after record).
                let mut pos = 0;
                while pos + 7 <= b.len() {
                    let len = usize::from(u16::from_le_bytes([b[pos + 4], b[pos + 5]]));
                    if pos + 7 + len > b.len() {
                        break;
                    }
                    let crc = mask_crc(crc32c_of(&b[pos + 6..pos + 7 + len]));
                    b[pos..pos + 4].copy_from_slice(&crc.to_le_bytes());
                    pos += 7 + len;
                }
                let _ = read_manifest("m", &b);
            }
            // Truncated: an error or the edits before the cut, never a panic.
            let _ = read_manifest("m", &good[..i]);
        }
        check_alloc(&p.display().to_string());
    }
}

fn crc32c_of(b: &[u8]) -> u32 {
    // CRC32C (Castagnoli), bitwise: the tests do not depend on the crate under test for it.
    let mut crc = !0u32;
    for &x in b {
        crc ^= u32::from(x);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82f6_3b78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[test]
fn a_damaged_database_is_an_error_naming_the_file() {
    let dir = repo_root().join("fixtures/v1/native-savepoint/6b8045dea34a1e845b5d3f58ebf57018-0-native");
    let files = dir_files(&dir);
    let sst = files.iter().find(|f| f.name.ends_with(".sst")).unwrap().clone();
    let FileData::Path(p) = &sst.data else { panic!() };
    let mut b = std::fs::read(p).unwrap();
    let n = b.len();
    b[n / 3] ^= 0x10;
    let files: Vec<DbFile> = files
        .into_iter()
        .map(|f| {
            if f.name == sst.name {
                DbFile {
                    data: FileData::Bytes(b.clone()),
                    ..f
                }
            } else {
                f
            }
        })
        .collect();
    let err = rust_read_files(files.clone()).unwrap_err();
    assert!(err.to_string().contains(&sst.display), "{err}");
    // A missing table is named too.
    let without: Vec<DbFile> = files.into_iter().filter(|f| f.name != sst.name).collect();
    let db = Db::open(without, LIMITS).unwrap();
    let names: Vec<String> = db.column_families().map(|c| c.name.clone()).collect();
    let errs: Vec<String> = names
        .iter()
        .filter_map(|n| db.read_column_family(n, &join).err())
        .map(|e| e.to_string())
        .collect();
    assert!(errs.iter().any(|e| e.contains(&sst.name)), "{errs:?}");
}
