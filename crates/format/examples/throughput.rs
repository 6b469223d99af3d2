//! Measures keyed-file write and read+verify throughput against `std::fs::copy` of a file of
//! the same size:
//!
//! ```text
//! cargo run --release -p statekit-format --example throughput -- [MiB] [none|lz4|zstd] [dir]
//! ```
//!
//! Entries are generated on the fly (no per-entry allocation in the source view), so the
//! numbers are the format's own cost.

use statekit_core::storage::LocalStorage;
use statekit_core::{
    Entry, EntryVisitor, KeyGroupRange, KeyedStateView, StateDescriptor, StateError, TtlConfig, TypeSchema,
};
use statekit_format::{write_keyed_file, Compression, KeyedFileReader, WriteOptions};
use std::ops::ControlFlow;
use std::time::Instant;

/// A view generating `per_kg` entries per key group: a value state, a TTL'd list state with 3
/// elements per key and a map state with 4 entries per key.
struct Synthetic {
    max_parallelism: u32,
    per_kg: u32,
    value_len: usize,
    pool: Vec<u8>,
    states: Vec<StateDescriptor>,
}

impl KeyedStateView for Synthetic {
    fn max_parallelism(&self) -> u32 {
        self.max_parallelism
    }
    fn key_group_range(&self) -> KeyGroupRange {
        KeyGroupRange::all(self.max_parallelism)
    }
    fn states(&self) -> &[StateDescriptor] {
        &self.states
    }
    fn visit_key_group(&self, kg: u32, visitor: &mut EntryVisitor<'_>) -> Result<ControlFlow<()>, StateError> {
        use std::fmt::Write;
        let mut x = u64::from(kg) * 0x9e37_79b9_7f4a_7c15 + 1;
        let keys = self.per_kg / 8;
        let mut key = String::with_capacity(32);
        for state in 0..3u32 {
            for k in 0..keys {
                key.clear();
                let _ = write!(key, "user-{kg:05}-{k:08}");
                let (n, uk): (u32, bool) = match state {
                    0 => (1, false),
                    1 => (3, false),
                    _ => (4, true),
                };
                for j in 0..n {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let off = (x % (self.pool.len() - self.value_len) as u64) as usize;
                    let ukb = [b'u', b'k', j as u8];
                    if visitor(&Entry {
                        state,
                        key: key.as_bytes(),
                        namespace: &[],
                        user_key: uk.then_some(&ukb[..]),
                        value: &self.pool[off..off + self.value_len],
                        timestamp: (state == 1).then_some(1_700_000_000_000 + i64::from(j)),
                    })?
                    .is_break()
                    {
                        return Ok(ControlFlow::Break(()));
                    }
                }
            }
        }
        Ok(ControlFlow::Continue(()))
    }
}

/// Half random, half text: compresses a little, like real values.
fn make_pool() -> Vec<u8> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    (0..(1usize << 20))
        .map(|i| {
            if i % 2 == 0 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            } else {
                b'a' + (i % 26) as u8
            }
        })
        .collect()
}

/// Storage whose files go nowhere: isolates the format's CPU cost from the disk.
#[derive(Debug)]
struct NullStorage;

struct NullWriter(u64);

impl std::io::Write for NullWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl statekit_core::storage::StorageWriter for NullWriter {
    fn commit(self: Box<Self>) -> Result<u64, statekit_core::storage::StorageError> {
        Ok(self.0)
    }
}

impl statekit_core::storage::Storage for NullStorage {
    fn describe(&self, path: &str) -> String {
        format!("null:/{path}")
    }
    fn create(
        &self,
        _: &str,
    ) -> Result<Box<dyn statekit_core::storage::StorageWriter>, statekit_core::storage::StorageError> {
        Ok(Box::new(NullWriter(0)))
    }
    fn open(
        &self,
        path: &str,
    ) -> Result<std::sync::Arc<dyn statekit_core::storage::Blob>, statekit_core::storage::StorageError> {
        Err(statekit_core::storage::StorageError::NotFound(path.into()))
    }
    fn exists(&self, _: &str) -> Result<bool, statekit_core::storage::StorageError> {
        Ok(false)
    }
    fn list(&self, _: &str) -> Result<Vec<statekit_core::storage::DirEntry>, statekit_core::storage::StorageError> {
        Ok(Vec::new())
    }
    fn delete_file(&self, _: &str) -> Result<(), statekit_core::storage::StorageError> {
        Ok(())
    }
    fn delete_dir_all(&self, _: &str) -> Result<(), statekit_core::storage::StorageError> {
        Ok(())
    }
    fn create_dir_all(&self, _: &str) -> Result<(), statekit_core::storage::StorageError> {
        Ok(())
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let mib: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(512);
    let compression = match args.get(2).map(String::as_str) {
        Some("none") => Compression::None,
        Some("zstd") => Compression::Zstd { level: 1 },
        _ => Compression::Lz4,
    };
    let base = args
        .get(3)
        .cloned()
        .unwrap_or_else(|| std::env::temp_dir().display().to_string());
    let dir = tempfile::tempdir_in(base)?;
    let value_len = 100usize;
    let record = value_len + 25;
    let max_parallelism = 128u32;
    let per_kg = ((mib << 20) / record as u64 / u64::from(max_parallelism)) as u32;
    let view = Synthetic {
        max_parallelism,
        per_kg,
        value_len,
        pool: make_pool(),
        states: vec![
            StateDescriptor::value("v", TypeSchema::Utf8, TypeSchema::Bytes),
            StateDescriptor::list("l", TypeSchema::Utf8, TypeSchema::Bytes).with_ttl(TtlConfig::new(1000)),
            StateDescriptor::map("m", TypeSchema::Utf8, TypeSchema::Bytes, TypeSchema::Bytes),
        ],
    };
    let storage = LocalStorage::new(dir.path());
    let opts = WriteOptions {
        compression,
        ..WriteOptions::default()
    };

    let t = Instant::now();
    let mut src = 0u64;
    let _ = view.visit_range(KeyGroupRange::all(max_parallelism), &mut |e| {
        src += e.value.len() as u64;
        Ok(ControlFlow::Continue(()))
    })?;
    let source_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    write_keyed_file(
        &view,
        KeyGroupRange::all(max_parallelism),
        &NullStorage,
        "data.keyed",
        &opts,
    )?;
    let encode_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let info = write_keyed_file(
        &view,
        KeyGroupRange::all(max_parallelism),
        &storage,
        "data.keyed",
        &opts,
    )?;
    let write_s = t.elapsed().as_secs_f64();
    let raw_mib = info.raw_bytes as f64 / (1 << 20) as f64;
    let file_mib = info.file.size as f64 / (1 << 20) as f64;

    // A plain file as large as the raw data, and its copy.
    let plain = dir.path().join("plain");
    {
        use std::io::Write;
        let mut f = std::io::BufWriter::new(std::fs::File::create(&plain)?);
        let chunk = vec![7u8; 1 << 20];
        let mut left = info.raw_bytes;
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            f.write_all(&chunk[..n])?;
            left -= n as u64;
        }
        f.into_inner()?.sync_all()?;
    }
    let t = Instant::now();
    std::fs::copy(&plain, dir.path().join("plain.copy"))?;
    let copy_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    std::fs::copy(&plain, dir.path().join("plain.copy2"))?;
    std::fs::File::open(dir.path().join("plain.copy2"))?.sync_all()?;
    let copy_sync_s = t.elapsed().as_secs_f64();

    let t = Instant::now();
    let reader = KeyedFileReader::open(&storage, "data.keyed", Some(info.file.size))?;
    let report = reader.verify()?;
    let verify_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let mut n = 0u64;
    let mut sum = 0u64;
    let _ = reader.visit_range(KeyGroupRange::all(max_parallelism), &mut |e| {
        n += 1;
        sum = sum.wrapping_add(e.value.len() as u64);
        Ok(ControlFlow::Continue(()))
    })?;
    let visit_s = t.elapsed().as_secs_f64();
    assert_eq!(n, report.entries);

    println!(
        "entries {} raw {raw_mib:.0} MiB file {file_mib:.0} MiB ({compression:?})",
        info.entries
    );
    println!(
        "source view    {:>8.0} MiB/s raw (generating entries; {src} value bytes)",
        raw_mib / source_s
    );
    println!("fs::copy       {:>8.0} MiB/s", raw_mib / copy_s);
    println!(
        "fs::copy+fsync {:>8.0} MiB/s (writes through LocalStorage are fsynced on commit)",
        raw_mib / copy_sync_s
    );
    println!(
        "encode only    {:>8.0} MiB/s raw (write to a null storage)",
        raw_mib / encode_s
    );
    println!(
        "write          {:>8.0} MiB/s raw ({:.2}x copy)",
        raw_mib / write_s,
        copy_s / write_s
    );
    println!(
        "open+verify    {:>8.0} MiB/s raw ({:.2}x copy)",
        raw_mib / verify_s,
        copy_s / verify_s
    );
    println!(
        "visit all      {:>8.0} MiB/s raw ({:.2}x copy)",
        raw_mib / visit_s,
        copy_s / visit_s
    );
    println!(
        "verify+visit   {:>8.0} MiB/s raw ({:.2}x copy)",
        raw_mib / (verify_s + visit_s),
        copy_s / (verify_s + visit_s)
    );
    Ok(())
}
