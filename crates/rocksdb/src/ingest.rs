//! Bulk loading of restored entries: the first few MiB go through one write batch (a small
//! restore costs one write), everything after into sorted SST files written with RocksDB's
//! `SstFileWriter` and ingested (`IngestExternalFile`, files moved, not copied) — the way
//! RocksDB is bulk-loaded: no memtable, no write-ahead log, no compaction of what was
//! loaded, which goes straight to the lowest free level.
//!
//! Semantics are those of writing every entry: values and map entries are puts (a later
//! view's entry replaces an earlier one, as ingested files sit above what is in the
//! database); a list is one put of its elements when the view's key groups held nothing in
//! the database before, and one append (a merge operand) otherwise, so lists met in several
//! views concatenate as they do on the heap.

use crate::backend::Store;
use crate::error::db_err;
use crate::layout::{encode_value, push_element, push_list_operand};
use rocksdb::{IngestExternalFileOptions, SstFileWriter, WriteBatch};
use statekit_core::StateError;
use std::path::PathBuf;

/// Write batches are flushed to RocksDB once they hold this many bytes; a restore that
/// outgrows one batch continues in SST files.
pub(crate) const BATCH_BYTES: usize = 4 << 20;

/// Where restored entries go.
enum Sink<'s> {
    /// One write batch (until it holds [`BATCH_BYTES`]).
    Batch(WriteBatch),
    /// SST files per state, ingested at the end.
    Files(Files<'s>),
}

/// The SST files of one bulk load.
struct Files<'s> {
    dir: PathBuf,
    /// The open writer of each state (by state index), with its file.
    open: Vec<Option<Open<'s>>>,
    /// Finished files: (state, path), per state in key order.
    done: Vec<(usize, PathBuf)>,
    /// Roll over to a new file past this size.
    file_bytes: u64,
    /// Files created so far (names them).
    created: u64,
}

/// An SST file being written.
struct Open<'s> {
    writer: SstFileWriter<'s>,
    path: PathBuf,
    /// A read-only descriptor of the file, to start its writeback as it grows (RocksDB's
    /// `bytes_per_sync` does not reach `SstFileWriter` through the C API).
    file: Option<std::fs::File>,
    /// Bytes whose writeback was started.
    synced: u64,
}

impl Open<'_> {
    /// Finishes the file (RocksDB syncs it); returns its path.
    fn finish(mut self) -> Result<PathBuf, StateError> {
        self.writer
            .finish()
            .map_err(db_err(format!("finish SST file {}", self.path.display())))?;
        Ok(self.path)
    }
}

/// Start writeback of an SST file every this many bytes.
const WRITEBACK_CHUNK: u64 = 8 << 20;

/// Bulk ingestion of restored entries of one view into the backend's database.
pub(crate) struct Ingest<'s> {
    /// The database (`None`: SST files only, handed back by [`Ingest::finish_files`]).
    store: Option<&'s Store>,
    /// The options SST files are written with.
    opts: &'s rocksdb::Options,
    sink: Sink<'s>,
    /// Whether the view's key groups held nothing before (lists are then put whole).
    fresh: bool,
    /// Where SST files go, and their size limit.
    scratch: PathBuf,
    file_bytes: u64,
    /// Scratch: the stored key of the entry being added.
    pub(crate) key: Vec<u8>,
    /// Scratch: the stored value of the entry being added (TTL states).
    val: Vec<u8>,
    /// The list being collected: (state, stamped, stored key, encoded elements).
    list: Option<(usize, bool, Vec<u8>, Vec<u8>)>,
    /// Entries added.
    pub(crate) count: usize,
}

impl<'s> Ingest<'s> {
    /// An ingestion into `store`; `fresh`: nothing is stored yet in the key groups it will
    /// write. SST files go to the new directory `scratch` (on the database's file system, so
    /// ingestion moves them), rolled over at `file_bytes`.
    pub(crate) fn new(store: &'s Store, fresh: bool, scratch: PathBuf, file_bytes: u64) -> Self {
        Self::with_sink(
            Some(store),
            &store.cf_options,
            Sink::Batch(WriteBatch::default()),
            fresh,
            scratch,
            file_bytes,
        )
    }

    fn with_sink(
        store: Option<&'s Store>,
        opts: &'s rocksdb::Options,
        sink: Sink<'s>,
        fresh: bool,
        scratch: PathBuf,
        file_bytes: u64,
    ) -> Self {
        Ingest {
            store,
            opts,
            sink,
            fresh,
            scratch,
            file_bytes: file_bytes.max(1 << 20),
            key: Vec::new(),
            val: Vec::new(),
            list: None,
            count: 0,
        }
    }

    /// An ingestion into SST files only (written with `opts` under the new directory
    /// `scratch`, every list put whole: the caller's key groups are empty), for a caller that
    /// ingests them itself ([`Ingest::finish_files`]); any thread may run one.
    pub(crate) fn files_only(
        opts: &'s rocksdb::Options,
        scratch: PathBuf,
        file_bytes: u64,
    ) -> Result<Self, StateError> {
        std::fs::create_dir_all(&scratch).map_err(|e| StateError::io(format!("create {}", scratch.display()), e))?;
        let files = Files::new(scratch.clone(), file_bytes);
        Ok(Self::with_sink(
            None,
            opts,
            Sink::Files(files),
            true,
            scratch,
            file_bytes,
        ))
    }

    /// Stores `self.key` → `value` (with its TTL timestamp `ts`, if the state has a TTL) in
    /// state `s`; a value without timestamp is written as it is, without a copy.
    pub(crate) fn put_value(&mut self, s: usize, ts: Option<i64>, value: &[u8]) -> Result<(), StateError> {
        self.flush_list()?;
        let (key, mut val) = (std::mem::take(&mut self.key), std::mem::take(&mut self.val));
        let r = match ts {
            None => self.write(s, Op::Put, &key, value),
            Some(_) => {
                encode_value(&mut val, ts, value);
                self.write(s, Op::Put, &key, &val)
            }
        };
        (self.key, self.val) = (key, val);
        r
    }

    /// Adds one element to the list at `self.key` of state `s`: consecutive elements of one
    /// list are collected into one write.
    pub(crate) fn list_element(
        &mut self,
        s: usize,
        stamped: bool,
        ts: Option<i64>,
        element: &[u8],
    ) -> Result<(), StateError> {
        if let Some((ls, _, lk, elems)) = &mut self.list {
            if *ls == s && *lk == self.key {
                push_element(elems, ts, element);
                return Ok(());
            }
        }
        self.flush_list()?;
        let mut elems = Vec::new();
        push_element(&mut elems, ts, element);
        self.list = Some((s, stamped, self.key.clone(), elems));
        Ok(())
    }

    /// Writes the collected list: whole when the key groups were empty, else as an append.
    fn flush_list(&mut self) -> Result<(), StateError> {
        if let Some((s, stamped, key, elems)) = self.list.take() {
            if self.fresh {
                self.write(s, Op::Put, &key, &elems)?;
            } else {
                let mut operand = Vec::with_capacity(elems.len() + 12);
                push_list_operand(&mut operand, stamped, None, &elems);
                self.write(s, Op::Merge, &key, &operand)?;
            }
        }
        Ok(())
    }

    fn write(&mut self, s: usize, op: Op, key: &[u8], val: &[u8]) -> Result<(), StateError> {
        match &mut self.sink {
            Sink::Batch(batch) => {
                let store = self
                    .store
                    .ok_or_else(|| StateError::Restore("a write batch without a database".into()))?;
                store.batch(s, |cf| match op {
                    Op::Put => cf.put(batch, key, val),
                    Op::Merge => cf.merge(batch, key, val),
                });
                if batch.size_in_bytes() >= BATCH_BYTES {
                    // Outgrown: what is batched goes in now, the rest through SST files.
                    let batch = std::mem::take(batch);
                    store.write(batch)?;
                    std::fs::create_dir_all(&self.scratch)
                        .map_err(|e| StateError::io(format!("create {}", self.scratch.display()), e))?;
                    self.sink = Sink::Files(Files::new(self.scratch.clone(), self.file_bytes));
                }
                Ok(())
            }
            Sink::Files(files) => files.write(self.opts, s, op, key, val),
        }
    }

    /// Writes what is left and ingests the SST files (removing the scratch directory);
    /// returns the SST files ingested (0: it all fit one write batch).
    pub(crate) fn finish(mut self) -> Result<u64, StateError> {
        self.flush_list()?;
        let store = self
            .store
            .ok_or_else(|| StateError::Restore("an ingestion without a database".into()))?;
        let result = match std::mem::replace(&mut self.sink, Sink::Batch(WriteBatch::default())) {
            Sink::Batch(batch) => store.write(batch).map(|()| 0),
            Sink::Files(files) => files.ingest(store),
        };
        self.remove_scratch();
        result
    }

    /// Finishes the SST files of a [`Ingest::files_only`] ingestion and hands them over:
    /// (state, path), per state in key order. The caller ingests them (moving them out of
    /// the scratch directory) and removes the directory afterwards.
    pub(crate) fn finish_files(mut self) -> Result<Vec<(usize, PathBuf)>, StateError> {
        self.flush_list()?;
        let mut files = match std::mem::replace(&mut self.sink, Sink::Batch(WriteBatch::default())) {
            Sink::Files(files) => files,
            Sink::Batch(_) => return Ok(Vec::new()),
        };
        files.finish_open()?;
        // The files outlive this ingestion: its drop must not remove them.
        self.scratch = PathBuf::new();
        Ok(std::mem::take(&mut files.done))
    }

    fn remove_scratch(&self) {
        if !self.scratch.as_os_str().is_empty() && self.scratch.exists() {
            if let Err(e) = std::fs::remove_dir_all(&self.scratch) {
                tracing::warn!(dir = %self.scratch.display(), error = %e, "could not remove an ingestion directory");
            }
        }
    }
}

impl Drop for Ingest<'_> {
    /// A failed restore leaves no SST files behind.
    fn drop(&mut self) {
        if let Sink::Files(files) = &mut self.sink {
            files.open.clear();
        }
        self.remove_scratch();
    }
}

#[derive(Clone, Copy)]
enum Op {
    Put,
    Merge,
}

impl<'s> Files<'s> {
    /// No files yet; they go to `dir`, rolled over at `file_bytes`.
    fn new(dir: PathBuf, file_bytes: u64) -> Self {
        Files {
            dir,
            open: Vec::new(),
            done: Vec::new(),
            file_bytes: file_bytes.max(1 << 20),
            created: 0,
        }
    }

    fn write(
        &mut self,
        opts: &'s rocksdb::Options,
        s: usize,
        op: Op,
        key: &[u8],
        val: &[u8],
    ) -> Result<(), StateError> {
        if self.open.len() <= s {
            self.open.resize_with(s + 1, || None);
        }
        let slot = self
            .open
            .get_mut(s)
            .ok_or_else(|| StateError::Restore(format!("no SST writer slot for state {s}")))?;
        if slot.is_none() {
            let path = self.dir.join(format!("{s}-{}.sst", self.created));
            self.created += 1;
            let writer = SstFileWriter::create(opts);
            writer
                .open(&path)
                .map_err(db_err(format!("create SST file {}", path.display())))?;
            let file = std::fs::File::open(&path).ok();
            *slot = Some(Open {
                writer,
                path,
                file,
                synced: 0,
            });
        }
        let Some(o) = slot.as_mut() else {
            return Ok(());
        };
        match op {
            Op::Put => o.writer.put(key, val),
            Op::Merge => o.writer.merge(key, val),
        }
        .map_err(|e| db_err(format!("write SST file {}", o.path.display()))(e))?;
        let size = o.writer.file_size();
        if size - o.synced >= WRITEBACK_CHUNK {
            if let Some(f) = &o.file {
                statekit_core::storage::start_writeback(f, o.synced, size - o.synced);
            }
            o.synced = size;
        }
        if size >= self.file_bytes {
            if let Some(o) = slot.take() {
                self.done.push((s, o.finish()?));
            }
        }
        Ok(())
    }

    /// Finishes the open files (into `done`).
    fn finish_open(&mut self) -> Result<(), StateError> {
        for (s, slot) in self.open.iter_mut().enumerate() {
            if let Some(o) = slot.take() {
                self.done.push((s, o.finish()?));
            }
        }
        Ok(())
    }

    /// Finishes the open files and ingests all, state by state; returns the files ingested.
    fn ingest(mut self, store: &Store) -> Result<u64, StateError> {
        self.finish_open()?;
        ingest_files(store, std::mem::take(&mut self.done))
    }
}

/// Ingests SST files `(state, path)` — per state non-overlapping and in key order — moving
/// them, one ingestion per state; returns the files ingested.
pub(crate) fn ingest_files(store: &Store, files: Vec<(usize, PathBuf)>) -> Result<u64, StateError> {
    let mut opts = IngestExternalFileOptions::default();
    opts.set_move_files(true);
    let mut by_state: std::collections::BTreeMap<usize, Vec<PathBuf>> = Default::default();
    for (s, p) in files {
        by_state.entry(s).or_default().push(p);
    }
    let mut n = 0;
    for (s, paths) in by_state {
        n += paths.len() as u64;
        store.ingest(s, &opts, paths)?;
    }
    Ok(n)
}
