//! The safe-Rust RocksDB file reader (`statekit-rocksdb-files`): tables, MANIFESTs and a
//! whole tiny database of untrusted bytes. Byte 0 of the input selects the mode:
//!
//! * `0`: the rest is a table (SST file): `read_table` and `table_layout` never panic, and
//!   never allocate past the limits; a table that reads has its point entries in strictly
//!   increasing internal-key order, and `table_layout` of it succeeds too;
//! * `1`: the rest is a MANIFEST: `log_records` and `read_manifest` never panic; a MANIFEST
//!   that reads has its records' edits in a consistent state (files numbered once);
//! * `2`: a tiny database: byte 1 is a count `n` (at most 4) of tables, each a 4-byte
//!   little-endian length and its bytes, the rest the MANIFEST. CURRENT names the MANIFEST;
//!   the tables take the numbers of the MANIFEST's live files in ascending order. Opening it
//!   and reading every column family (merging operands as Flink's list state does) never
//!   panics; keys read come out strictly increasing.
#![no_main]

use libfuzzer_sys::fuzz_target;
use statekit_rocksdb_files::{log_records, read_manifest, read_table, table_layout, Db, DbFile, FileData, Limits};

/// Small limits: a block may not make the reader allocate more than a few MiB.
const LIMITS: Limits = Limits {
    max_block_bytes: 1 << 20,
    max_table_bytes: 8 << 20,
};

fn join(_key: &[u8], existing: Option<&[u8]>, ops: &[&[u8]]) -> Result<Vec<u8>, String> {
    Ok(statekit_rocksdb_files::string_append(existing, ops, b','))
}

fn table(data: &[u8]) {
    let read = read_table("000001.sst", data, None, &LIMITS);
    let layout = table_layout("000001.sst", data, &LIMITS);
    if let Ok(t) = read {
        assert!(layout.is_ok(), "a table that reads has a layout");
        for w in t.entries.windows(2) {
            let (a, b) = (&w[0], &w[1]);
            let ord = a
                .user_key
                .cmp(&b.user_key)
                .then(b.sequence.cmp(&a.sequence))
                .then(b.kind.type_byte().cmp(&a.kind.type_byte()));
            assert!(ord.is_lt(), "entries out of order: {a:?} {b:?}");
        }
    }
}

fn manifest(data: &[u8]) {
    let _ = log_records("MANIFEST-000001", data);
    if let Ok(m) = read_manifest("MANIFEST-000001", data) {
        let mut numbers: Vec<u64> = m
            .column_families
            .values()
            .flat_map(|c| c.files.values().map(|f| f.number))
            .collect();
        let n = numbers.len();
        numbers.sort_unstable();
        numbers.dedup();
        assert_eq!(numbers.len(), n, "a file is live twice");
    }
}

fn database(data: &[u8]) {
    let Some((&n, mut rest)) = data.split_first() else {
        return;
    };
    let mut tables = Vec::new();
    for _ in 0..(n % 5) {
        let Some((len, tail)) = rest.split_first_chunk::<4>() else {
            return;
        };
        let len = u32::from_le_bytes(*len) as usize;
        let Some((t, tail)) = tail.split_at_checked(len) else {
            return;
        };
        tables.push(t.to_vec());
        rest = tail;
    }
    let mut numbers: Vec<u64> = match read_manifest("MANIFEST-000001", rest) {
        Ok(m) => m
            .column_families
            .values()
            .flat_map(|c| c.files.values().map(|f| f.number))
            .collect(),
        Err(_) => Vec::new(),
    };
    numbers.sort_unstable();
    let mut files = vec![
        DbFile {
            name: "CURRENT".into(),
            display: "CURRENT".into(),
            data: FileData::Bytes(b"MANIFEST-000001\n".to_vec()),
        },
        DbFile {
            name: "MANIFEST-000001".into(),
            display: "MANIFEST-000001".into(),
            data: FileData::Bytes(rest.to_vec()),
        },
    ];
    for (num, t) in numbers.iter().zip(tables) {
        let name = format!("{num:06}.sst");
        files.push(DbFile {
            display: name.clone(),
            name,
            data: FileData::Bytes(t),
        });
    }
    let Ok(db) = Db::open(files, LIMITS) else {
        return;
    };
    let names: Vec<String> = db.column_families().map(|c| c.name.clone()).collect();
    for name in names {
        if let Ok(entries) = db.read_column_family(&name, &join) {
            for w in entries.windows(2) {
                assert!(w[0].0 < w[1].0, "keys out of order in {name:?}");
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 3 {
        0 => table(rest),
        1 => manifest(rest),
        _ => database(rest),
    }
});
