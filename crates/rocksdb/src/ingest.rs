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
use std::collections::HashMap;
use std::os::unix::fs::{FileExt, MetadataExt};
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

/// What an [`Ingest`] writes into: the database (through write batches, or SST files it
/// ingests), or SST files only, written with these options.
enum Target<'s> {
    Db(&'s Store),
    Files(&'s rocksdb::Options),
}

/// A finished SST file of a bulk load.
#[derive(Debug)]
pub(crate) struct SstFile {
    /// The state (column family index) it belongs to.
    pub(crate) state: usize,
    pub(crate) path: PathBuf,
    /// Which file it is (ingestion moves it by a hard link: the identity stays).
    pub(crate) id: FileId,
    /// CRC32 of its bytes, taken as they were written.
    pub(crate) crc32: u32,
}

/// The identity of a file's content on a local file system: device, inode, size and
/// modification time. A hard link keeps it; a file written anew, even into a reused inode,
/// gets another modification time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct FileId {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
}

impl FileId {
    /// The identity of a file from its metadata.
    pub(crate) fn of(md: &std::fs::Metadata) -> Self {
        FileId {
            dev: md.dev(),
            ino: md.ino(),
            size: md.len(),
            mtime_ns: i128::from(md.mtime()) * 1_000_000_000 + i128::from(md.mtime_nsec()),
        }
    }
}

/// The CRC32 of the SST files a backend ingested, by file identity, so that a native
/// checkpoint uploading one of them need not read it back: `SstFileWriter` drops a file
/// from the page cache as it writes it, and reading it again costs a disk read of all of it.
pub(crate) type WrittenCrcs = std::sync::Mutex<HashMap<FileId, u32>>;

/// The SST files of one bulk load.
struct Files<'s> {
    dir: PathBuf,
    /// The open writer of each state (by state index), with its file.
    open: Vec<Option<Open<'s>>>,
    /// Finished files, per state in key order.
    done: Vec<SstFile>,
    /// Scratch for reading written bytes back.
    buf: Vec<u8>,
    /// Roll over to a new file past this size.
    file_bytes: u64,
    /// Files created so far (names them).
    created: u64,
    /// Read finished files back into the page cache ([`Open::finish`]).
    read_ahead: bool,
}

/// An SST file being written.
struct Open<'s> {
    writer: SstFileWriter<'s>,
    path: PathBuf,
    /// A read-only descriptor of the file: its bytes are hashed as they are written, and
    /// its writeback started as it grows (RocksDB's `bytes_per_sync` does not reach
    /// `SstFileWriter` through the C API).
    file: std::fs::File,
    /// Bytes whose writeback was started.
    synced: u64,
    /// CRC32 of the first `hashed` bytes.
    crc: crc32fast::Hasher,
    hashed: u64,
}

impl Open<'_> {
    /// Hashes the bytes written to the file since the last call (the file only grows:
    /// `SstFileWriter` appends), while they are still in the page cache.
    fn hash_written(&mut self, buf: &mut Vec<u8>) -> Result<(), StateError> {
        buf.resize(1 << 20, 0);
        loop {
            let n = self
                .file
                .read_at(buf, self.hashed)
                .map_err(|e| StateError::io(format!("read back {}", self.path.display()), e))?;
            let Some(read) = buf.get(..n).filter(|r| !r.is_empty()) else {
                return Ok(());
            };
            self.crc.update(read);
            self.hashed += n as u64;
        }
    }

    /// Finishes the file (RocksDB syncs it) and takes its CRC; `read_ahead`: then asks the
    /// kernel to read it back into the page cache, which `SstFileWriter` drops it from.
    fn finish(mut self, state: usize, buf: &mut Vec<u8>, read_ahead: bool) -> Result<SstFile, StateError> {
        self.writer
            .finish()
            .map_err(db_err(format!("finish SST file {}", self.path.display())))?;
        self.hash_written(buf)?;
        if read_ahead {
            statekit_core::storage::read_ahead(&self.file, self.hashed);
        }
        let md = self
            .file
            .metadata()
            .map_err(|e| StateError::io(format!("stat {}", self.path.display()), e))?;
        if md.len() != self.hashed {
            return Err(StateError::Restore(statekit_core::RestoreError::SstSize {
                path: self.path.clone(),
                hashed: self.hashed,
                size: md.len(),
            }));
        }
        Ok(SstFile {
            state,
            id: FileId::of(&md),
            crc32: self.crc.finalize(),
            path: self.path,
        })
    }
}

/// Start writeback of an SST file every this many bytes.
const WRITEBACK_CHUNK: u64 = 8 << 20;

/// Hash what was written of an SST file once it is this many bytes ahead of what was
/// hashed (`SstFileWriter` hands the file 1 MiB at a time; reading soon after finds the
/// bytes in the page cache, before RocksDB asks the kernel to drop them).
const HASH_LAG: u64 = 2 << 20;

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
        Self::with_target(Target::Db(store), fresh, scratch, file_bytes)
    }

    fn with_target(target: Target<'s>, fresh: bool, scratch: PathBuf, file_bytes: u64) -> Self {
        let (store, opts, sink) = match target {
            Target::Db(store) => (Some(store), &store.cf_options, Sink::Batch(WriteBatch::default())),
            Target::Files(opts) => (None, opts, Sink::Files(Files::new(scratch.clone(), file_bytes))),
        };
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
        Ok(Self::with_target(Target::Files(opts), true, scratch, file_bytes))
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
                let store = self.store.ok_or_else(|| {
                    StateError::Restore(statekit_core::RestoreError::NoDatabase { what: "a write batch" })
                })?;
                store.batch(s, |cf| match op {
                    Op::Put => cf.put(batch, key, val),
                    Op::Merge => cf.merge(batch, key, val),
                    Op::Delete => cf.delete(batch, key),
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
            .ok_or_else(|| StateError::Restore(statekit_core::RestoreError::NoDatabase { what: "an ingestion" }))?;
        let result = match std::mem::replace(&mut self.sink, Sink::Batch(WriteBatch::default())) {
            Sink::Batch(batch) => store.write(batch).map(|()| 0),
            Sink::Files(files) => files.ingest(store),
        };
        self.remove_scratch();
        result
    }

    /// Finishes the SST files of a [`Ingest::files_only`] ingestion and hands them over:
    /// per state in key order. The caller ingests them (moving them out of the scratch
    /// directory) and removes the directory afterwards.
    pub(crate) fn finish_files(mut self) -> Result<Vec<SstFile>, StateError> {
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
    Delete,
}

/// Writes sorted entries into SST files under the new directory `dir` (rolled over at
/// `file_bytes`) and hands the finished files back, per state in key order. `each` calls
/// its argument with every entry — state, stored key, stored value (`None`: a deletion) —
/// each state's in key order. The write-back cache's dirty entries reach RocksDB this way
/// at a checkpoint's cut. The caller removes `dir` once the files are ingested or on error.
pub(crate) fn write_sorted(
    opts: &rocksdb::Options,
    dir: PathBuf,
    file_bytes: u64,
    each: impl FnOnce(&mut dyn FnMut(usize, &[u8], Option<&[u8]>)),
) -> Result<Vec<SstFile>, StateError> {
    std::fs::create_dir_all(&dir).map_err(|e| StateError::io(format!("create {}", dir.display()), e))?;
    let mut files = Files::new(dir, file_bytes);
    // What is written back is the newest data, soon read by compactions (and by restores of
    // the checkpoints that hold it): `SstFileWriter` drops it from the page cache, meant for
    // bulk loads larger than memory; the kernel reads it back in the background.
    files.read_ahead = true;
    let mut failed = None;
    each(&mut |s, key, value| {
        if failed.is_none() {
            let r = match value {
                Some(v) => files.write(opts, s, Op::Put, key, v),
                None => files.write(opts, s, Op::Delete, key, &[]),
            };
            failed = r.err();
        }
    });
    match failed {
        Some(e) => Err(e),
        None => files.finish_open().map(|()| std::mem::take(&mut files.done)),
    }
}

impl<'s> Files<'s> {
    /// No files yet; they go to `dir`, rolled over at `file_bytes`.
    fn new(dir: PathBuf, file_bytes: u64) -> Self {
        Files {
            dir,
            open: Vec::new(),
            done: Vec::new(),
            buf: Vec::new(),
            file_bytes: file_bytes.max(1 << 20),
            created: 0,
            read_ahead: false,
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
            .ok_or_else(|| StateError::Restore(statekit_core::RestoreError::NoSstSlot { state: s }))?;
        if slot.is_none() {
            let path = self.dir.join(format!("{s}-{}.sst", self.created));
            self.created += 1;
            let writer = SstFileWriter::create(opts);
            writer
                .open(&path)
                .map_err(db_err(format!("create SST file {}", path.display())))?;
            let file = std::fs::File::open(&path).map_err(|e| StateError::io(format!("open {}", path.display()), e))?;
            *slot = Some(Open {
                writer,
                path,
                file,
                synced: 0,
                crc: crc32fast::Hasher::new(),
                hashed: 0,
            });
        }
        let Some(o) = slot.as_mut() else {
            return Ok(());
        };
        match op {
            Op::Put => o.writer.put(key, val),
            Op::Merge => o.writer.merge(key, val),
            Op::Delete => o.writer.delete(key),
        }
        .map_err(|e| db_err(format!("write SST file {}", o.path.display()))(e))?;
        let size = o.writer.file_size();
        if size.saturating_sub(o.hashed) >= HASH_LAG {
            o.hash_written(&mut self.buf)?;
        }
        if size - o.synced >= WRITEBACK_CHUNK {
            statekit_core::storage::start_writeback(&o.file, o.synced, size - o.synced);
            o.synced = size;
        }
        if size >= self.file_bytes {
            if let Some(o) = slot.take() {
                self.done.push(o.finish(s, &mut self.buf, self.read_ahead)?);
            }
        }
        Ok(())
    }

    /// Finishes the open files (into `done`).
    fn finish_open(&mut self) -> Result<(), StateError> {
        for (s, slot) in self.open.iter_mut().enumerate() {
            if let Some(o) = slot.take() {
                self.done.push(o.finish(s, &mut self.buf, self.read_ahead)?);
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

/// Ingests SST files — per state non-overlapping and in key order — moving them, one
/// ingestion per state, and records their CRC32 in the store's [`WrittenCrcs`], after writing
/// the cache back and emptying it; returns the files ingested.
pub(crate) fn ingest_files(store: &Store, files: Vec<SstFile>) -> Result<u64, StateError> {
    // Restored entries may replace cached ones: the cache is written back and emptied first.
    if !files.is_empty() {
        store.sync_and_forget()?;
    }
    ingest_files_unsynced(store, files)
}

/// [`ingest_files`] without writing the cache back first: for the cache's own write-back.
pub(crate) fn ingest_files_unsynced(store: &Store, files: Vec<SstFile>) -> Result<u64, StateError> {
    let mut opts = IngestExternalFileOptions::default();
    opts.set_move_files(true);
    let mut by_state: std::collections::BTreeMap<usize, Vec<PathBuf>> = Default::default();
    {
        let mut crcs = store.written_crcs.lock().unwrap_or_else(|p| p.into_inner());
        for f in files {
            crcs.insert(f.id, f.crc32);
            by_state.entry(f.state).or_default().push(f.path);
        }
    }
    let mut n = 0;
    for (s, paths) in by_state {
        n += paths.len() as u64;
        store.ingest(s, &opts, paths)?;
    }
    Ok(n)
}
