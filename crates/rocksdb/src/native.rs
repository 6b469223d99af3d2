//! Native snapshots: the database's own files as a checkpoint or savepoint
//! (`docs/design/0005-native-checkpoints.md`).
//!
//! * [`RocksDbBackend::native_snapshot`](crate::RocksDbBackend::native_snapshot) is the
//!   synchronous cut: flush, then a RocksDB checkpoint (hard links) into a directory beside the
//!   working database, returned as a [`NativeCut`].
//! * [`NativeCut::upload`] is the asynchronous part: SST files not uploaded by a completed
//!   checkpoint go to the job's `shared/` directory, SSTs that were are referenced again, the
//!   other files (`MANIFEST`, `CURRENT`, `OPTIONS`) go to the snapshot's own directory. It
//!   returns the [`NativeKeyedHandle`] recorded in `_metadata`.
//! * [`RocksDbBackend::restore_native`](crate::RocksDbBackend::restore_native) rebuilds a
//!   database from handles, at any parallelism.
//! * [`NativeSnapshotView`] reads a handle as the canonical entry stream without a database
//!   open for writing (tools, conversion, verification).

use crate::error::Corruption;
use crate::error::RocksDbError;
use crate::layout::KeyLayout;
use crate::options::RocksDbOptions;
use crate::snapshot::{corrupt, visit_state, SliceCursor};
use statekit_core::error::NativeChecksum;
use statekit_core::storage::Storage;
use statekit_core::{EntryVisitor, KeyGroupRange, KeyedStateView, RestoreError, StateDescriptor, StateError};
use statekit_format::{
    FileRef, FileScope, NativeFile, NativeKeyedHandle, NativeStats, NativeTarget, ResolvedNativeFile,
    ResolvedNativeHandle,
};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Write};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The backend name native handles of this crate carry.
pub const BACKEND_NAME: &str = "rocksdb";
/// The data layout native handles of this crate carry (`docs/rocksdb-layout.md`; the list
/// merge operator's name is part of it).
pub const LAYOUT_NAME: &str = "statekit-rocksdb-v1";
/// The database's directory inside a backend's working directory.
pub(crate) const DB_DIR: &str = "db";

const COPY_BUFFER: usize = 1 << 20;

/// A file uploaded by a checkpoint, which a later checkpoint may reference again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Reusable {
    pub(crate) file: FileRef,
    pub(crate) crc32: u32,
}

/// Which SST files were uploaded by which checkpoint: pending until the checkpoint completes,
/// then confirmed (Flink's `uploadedSstFiles`). Only confirmed files are reused.
#[derive(Debug, Default)]
pub(crate) struct Uploads {
    pending: BTreeMap<u64, BTreeMap<String, Reusable>>,
    confirmed: BTreeMap<String, Reusable>,
}

impl Uploads {
    /// Checkpoint `id` completed: its files become the confirmed set.
    pub(crate) fn complete(&mut self, id: u64) {
        if let Some(files) = self.pending.remove(&id) {
            self.confirmed = files;
        }
        self.pending.retain(|k, _| *k > id);
    }

    /// Checkpoint `id` was aborted: its files are never reused.
    pub(crate) fn abort(&mut self, id: u64) {
        self.pending.remove(&id);
    }

    /// Replaces the confirmed set (after a restore).
    pub(crate) fn set_confirmed(&mut self, files: BTreeMap<String, Reusable>) {
        self.pending.clear();
        self.confirmed = files;
    }

    pub(crate) fn confirmed(&self) -> BTreeMap<String, Reusable> {
        self.confirmed.clone()
    }

    fn record(&mut self, id: u64, files: BTreeMap<String, Reusable>) {
        self.pending.insert(id, files);
    }
}

/// One file of a cut.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CutFile {
    /// Local name (`000012.sst`, `MANIFEST-000005`, …).
    pub name: String,
    /// Size in bytes.
    pub size: u64,
}

impl CutFile {
    /// Table files are immutable and may be shared between checkpoints.
    pub fn is_shareable(&self) -> bool {
        self.name.ends_with(".sst")
    }
}

/// The synchronous part of a native snapshot: a consistent set of the database's files in a
/// private directory (removed when the cut is dropped). [`NativeCut::upload`] writes them to
/// checkpoint storage, on any thread, while the backend keeps processing.
pub struct NativeCut {
    pub(crate) checkpoint_id: u64,
    pub(crate) backend_id: String,
    pub(crate) clock_ms: i64,
    pub(crate) dir: PathBuf,
    pub(crate) files: Vec<CutFile>,
    pub(crate) reusable: BTreeMap<String, Reusable>,
    /// CRC32 of files the backend wrote itself and ingested, by name in the cut.
    pub(crate) known_crcs: std::collections::HashMap<String, u32>,
    pub(crate) stats: NativeStats,
    pub(crate) uploads: Arc<Mutex<Uploads>>,
    /// Keeps the working directory (and so `dir`) alive.
    pub(crate) _inner: Arc<crate::db::Inner>,
}

impl std::fmt::Debug for NativeCut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativeCut")
            .field("checkpoint_id", &self.checkpoint_id)
            .field("dir", &self.dir)
            .field("files", &self.files.len())
            .field("reusable", &self.reusable.len())
            .finish()
    }
}

impl Drop for NativeCut {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            tracing::warn!(dir = %self.dir.display(), error = %e, "could not remove a native cut directory");
        }
    }
}

fn storage_err(e: statekit_core::storage::StorageError) -> StateError {
    StateError::Other(Box::new(e))
}

/// Streams `input` (described as `from`) into `out` (described as `to`; `None`: read only),
/// returning (bytes, CRC32).
fn stream_crc(
    input: &mut dyn Read,
    from: &str,
    mut out: Option<&mut dyn Write>,
    to: &str,
) -> Result<(u64, u32), StateError> {
    let mut hasher = crc32fast::Hasher::new();
    let mut buf = vec![0u8; COPY_BUFFER];
    let mut size = 0u64;
    loop {
        let n = input
            .read(&mut buf)
            .map_err(|e| StateError::io(format!("read {from}"), e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        size += n as u64;
        if let Some(out) = out.as_mut() {
            out.write_all(&buf[..n])
                .map_err(|e| StateError::io(format!("write {to}"), e))?;
        }
    }
    Ok((size, hasher.finalize()))
}

fn open_file(path: &Path, shown: &str) -> Result<File, StateError> {
    use statekit_core::storage::{open_regular_file, OpenFileError};
    match open_regular_file(path) {
        Ok((file, _)) => Ok(file),
        Err(OpenFileError::Io(e)) => Err(StateError::io(format!("open {shown}"), e)),
        Err(OpenFileError::NotAFile(found)) => Err(StateError::Stream(statekit_core::StreamProblem::NotAFile {
            file: shown.to_string(),
            found: found.to_string(),
        })),
    }
}

/// Puts a local file into `storage`; returns (size, CRC32). A table file (`linkable`: RocksDB
/// never writes to one after creating it, and syncs it first) is hard-linked when `storage`
/// is local on the same file system, and its directory is recorded in `linked_dirs` to be
/// fsynced; anything else is copied (temp name, fsync, rename). `known`: the file's CRC32
/// as the backend wrote it (a linked file is then not read; a copied one must match it).
fn upload_file(
    src: &Path,
    storage: &dyn Storage,
    path: &str,
    linkable: bool,
    known: Option<u32>,
    linked_dirs: &mut Vec<PathBuf>,
) -> Result<(u64, u32), StateError> {
    if let (true, Some(dst)) = (linkable, storage.absolute_path(path)) {
        if let Some(parent) = dst.parent() {
            std::fs::create_dir_all(parent).map_err(|e| StateError::io(format!("create {}", parent.display()), e))?;
            if std::fs::hard_link(src, &dst).is_ok() {
                if !linked_dirs.iter().any(|d| d == parent) {
                    linked_dirs.push(parent.to_path_buf());
                }
                if let Some(crc) = known {
                    let md =
                        std::fs::metadata(&dst).map_err(|e| StateError::io(format!("stat {}", dst.display()), e))?;
                    return Ok((md.len(), crc));
                }
                // Mapped (the storage's guarded map), not read: no copy of the file.
                let blob = storage.open(path).map_err(storage_err)?;
                return Ok((blob.bytes().len() as u64, crc32fast::hash(blob.bytes())));
            }
        }
    }
    let from = src.display().to_string();
    let mut input = open_file(src, &from)?;
    let mut out = storage.create(path).map_err(storage_err)?;
    let (_, crc) = stream_crc(&mut input, &from, Some(&mut out), &storage.describe(path))?;
    if let Some(k) = known.filter(|k| *k != crc) {
        return Err(StateError::Restore(RestoreError::ChangedSinceWritten {
            file: from,
            crc,
            recorded: k,
        }));
    }
    let size = out.commit().map_err(storage_err)?;
    Ok((size, crc))
}

/// A random name for a shared file.
fn shared_name(local: &str) -> String {
    let v: u128 = rand::random();
    let ext = Path::new(local).extension().and_then(|e| e.to_str()).unwrap_or("sst");
    format!("{v:032x}.{ext}")
}

impl NativeCut {
    /// The checkpoint the cut was taken for.
    pub fn checkpoint_id(&self) -> u64 {
        self.checkpoint_id
    }

    /// The directory holding the cut's files (removed when the cut is dropped).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The cut's files.
    pub fn files(&self) -> &[CutFile] {
        &self.files
    }

    /// Bytes of all files.
    pub fn total_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }

    /// Writes the cut to checkpoint storage and returns the handle for `_metadata`.
    ///
    /// With a shared target (checkpoints of a store), a table file that a completed
    /// checkpoint uploaded is referenced again and not copied; other table files go to
    /// `target.shared_dir` under random names; every other file goes to
    /// `target.exclusive_dir`. Without one (savepoints) every file is exclusive. Table files
    /// are hard-linked when the storage is local and on the cut's file system (they are
    /// immutable and already synced; their directories are fsynced); other files, and table
    /// files that cannot be linked, are written under temporary names, fsynced and renamed.
    /// On failure the shared files this call wrote are deleted again.
    pub fn upload(&self, target: &NativeTarget) -> Result<NativeKeyedHandle, StateError> {
        let mut written_shared: Vec<String> = Vec::new();
        let result = self.upload_inner(target, &mut written_shared);
        if result.is_err() {
            if let Some(job) = &target.job {
                for p in &written_shared {
                    let _ = job.delete_file(p);
                }
            }
        }
        result
    }

    fn upload_inner(&self, target: &NativeTarget, written: &mut Vec<String>) -> Result<NativeKeyedHandle, StateError> {
        let mut files = Vec::with_capacity(self.files.len());
        let mut linked_dirs: Vec<PathBuf> = Vec::new();
        let mut uploaded_bytes = 0;
        let mut shared_now: BTreeMap<String, Reusable> = BTreeMap::new();
        // Where each file goes: reused from a completed checkpoint, or uploaded to (storage,
        // path, scope).
        enum Dest<'a> {
            Reused(FileRef, u32),
            Upload(&'a dyn Storage, String, FileScope, bool),
        }
        let mut dests: Vec<Dest<'_>> = Vec::with_capacity(self.files.len());
        for f in &self.files {
            dests.push(match (&target.job, f.is_shareable()) {
                (Some(job), true) => match self.reusable.get(&f.name).filter(|r| r.file.size == f.size) {
                    Some(r) => Dest::Reused(r.file.clone(), r.crc32),
                    None => {
                        let path = statekit_core::storage::join(&target.shared_dir, &shared_name(&f.name));
                        written.push(path.clone());
                        Dest::Upload(job.as_ref(), path, FileScope::Shared, true)
                    }
                },
                _ => Dest::Upload(
                    target.snapshot.as_ref(),
                    statekit_core::storage::join(&target.exclusive_dir, &f.name),
                    FileScope::Exclusive,
                    f.is_shareable(),
                ),
            });
        }
        // Local storage: one after another (table files are hard-linked, cheap). A remote
        // store: TRANSFER_THREADS uploads at a time.
        let remote = target.snapshot.absolute_path("").is_none();
        let upload =
            |(f, d): &(&CutFile, &Dest<'_>), dirs: &mut Vec<PathBuf>| -> Result<Option<(u64, u32)>, StateError> {
                match d {
                    Dest::Reused(..) => Ok(None),
                    Dest::Upload(storage, path, _, linkable) => {
                        let src = self.dir.join(&f.name);
                        let known = self.known_crcs.get(&f.name).copied();
                        upload_file(&src, *storage, path, *linkable, known, dirs).map(Some)
                    }
                }
            };
        let pairs: Vec<(&CutFile, &Dest<'_>)> = self.files.iter().zip(dests.iter()).collect();
        let done: Vec<Option<(u64, u32)>> = if remote {
            in_parallel(&pairs, |p| upload(p, &mut Vec::new()))?
        } else {
            pairs
                .iter()
                .map(|p| upload(p, &mut linked_dirs))
                .collect::<Result<_, _>>()?
        };
        for ((f, d), up) in pairs.into_iter().zip(done) {
            let (file, crc32) = match (d, up) {
                (Dest::Reused(file, crc), _) => (file.clone(), *crc),
                (Dest::Upload(_, path, scope, _), Some((size, crc))) => {
                    uploaded_bytes += size;
                    (
                        FileRef {
                            scope: *scope,
                            path: path.clone(),
                            size,
                        },
                        crc,
                    )
                }
                (Dest::Upload(_, path, ..), None) => {
                    return Err(StateError::Stream(statekit_core::StreamProblem::NotUploaded {
                        path: path.to_string(),
                    }));
                }
            };
            if file.scope != FileScope::Exclusive {
                shared_now.insert(
                    f.name.clone(),
                    Reusable {
                        file: file.clone(),
                        crc32,
                    },
                );
            }
            files.push(NativeFile {
                name: f.name.clone(),
                file,
                crc32,
            });
        }
        // Linked files are durable (RocksDB synced them); their names are once their
        // directories are.
        for d in &linked_dirs {
            statekit_core::storage::sync_dir(d).map_err(|e| StateError::io(format!("sync {}", d.display()), e))?;
        }
        if target.job.is_some() {
            self.uploads
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .record(self.checkpoint_id, shared_now);
        }
        tracing::debug!(
            checkpoint = self.checkpoint_id,
            files = files.len(),
            uploaded_bytes,
            total_bytes = self.total_bytes(),
            "native snapshot uploaded"
        );
        Ok(NativeKeyedHandle {
            backend: BACKEND_NAME.to_string(),
            layout: LAYOUT_NAME.to_string(),
            backend_id: self.backend_id.clone(),
            checkpoint_id: self.checkpoint_id,
            clock_ms: self.clock_ms,
            files,
            uploaded_bytes,
            stats: self.stats.clone(),
        })
    }
}

/// Write buffer of [`write_native`]'s scratch database.
const SCRATCH_WRITE_BUFFER: usize = 1 << 20;

/// What [`write_native`] wrote.
#[derive(Clone, Debug)]
pub struct NativeWritten {
    /// The handle to record in `_metadata` (`statekit_checkpoint::SnapshotWriter::add_native_subtask`).
    pub handle: NativeKeyedHandle,
    /// The states the database holds (one column family each), in the view's order.
    pub states: Vec<StateDescriptor>,
    /// Entries written.
    pub entries: u64,
}

/// Writes `view`'s key groups in `range` as a native RocksDB snapshot at `target`, built the
/// way RocksDB is bulk-loaded: a fresh database in a scratch directory (under
/// `options.local_dir`) gets its column families, the entries go into sorted SST files that
/// are ingested — written on `threads` threads at once (0: one per core), each a share of the
/// key groups — and the database's files are uploaded as for a checkpoint
/// ([`NativeCut::upload`]).
///
/// `clock_ms` is the time the handle records: TTL-expired data is judged against it, on
/// the way in and by every reader of the handle. Pass `i64::MIN` to keep every entry the
/// view holds (a conversion leaves expiry to the job that restores it).
pub fn write_native(
    view: &dyn KeyedStateView,
    range: KeyGroupRange,
    clock_ms: i64,
    checkpoint_id: u64,
    options: &RocksDbOptions,
    target: &NativeTarget,
    threads: usize,
) -> Result<NativeWritten, StateError> {
    use statekit_core::KeyedStateBackend;
    let threads = match threads {
        0 => std::thread::available_parallelism().map_or(1, usize::from),
        n => n,
    };
    let config = statekit_core::BackendConfig {
        max_parallelism: view.max_parallelism(),
        key_group_range: range,
        clock: statekit_core::ManualClock::new(clock_ms),
        key_group_scheme: view.key_group_scheme(),
    };
    // The scratch database's memtables only take what is too small to go into an SST file
    // and live until the cut's flush: a small write buffer spares allocating (and zeroing)
    // a full-size memtable and its bloom filter per state.
    let mut options = options.clone();
    options.write_buffer_bytes = options.write_buffer_bytes.min(SCRATCH_WRITE_BUFFER);
    let mut backend = crate::RocksDbBackend::new(config, options)?;
    let entries = backend.bulk_load(view, threads)?;
    let states = backend.descriptors();
    let cut = backend.native_snapshot(checkpoint_id)?;
    let handle = cut.upload(target)?;
    drop(cut);
    backend.dispose();
    Ok(NativeWritten {
        handle,
        states,
        entries,
    })
}

/// Checks that `handle` was written by this crate with the same layout and max parallelism.
pub(crate) fn check_handle(handle: &ResolvedNativeHandle, max_parallelism: u32) -> Result<(), StateError> {
    let h = &handle.handle;
    if h.backend != BACKEND_NAME {
        return Err(StateError::Restore(RestoreError::NativeBackend {
            subtask: handle.subtask,
            backend: h.backend.clone(),
        }));
    }
    if h.layout != LAYOUT_NAME {
        return Err(StateError::Restore(RestoreError::NativeLayout {
            subtask: handle.subtask,
            layout: h.layout.clone(),
            expected: LAYOUT_NAME,
        }));
    }
    if handle.max_parallelism != max_parallelism {
        return Err(StateError::Restore(RestoreError::NativeMaxParallelism {
            subtask: handle.subtask,
            snapshot: handle.max_parallelism,
            backend: max_parallelism,
        }));
    }
    if !h.files.iter().any(|f| f.name == "CURRENT") {
        return Err(StateError::Restore(RestoreError::NoCurrentFile {
            subtask: handle.subtask,
        }));
    }
    Ok(())
}

/// Copies a resolved file to `dst`, checking its size and CRC32.
fn copy_checked(f: &ResolvedNativeFile, dst: &Path) -> Result<(), StateError> {
    let shown = f.storage.describe(&f.path);
    let to = dst.display().to_string();
    let (size, crc) = if let Some(abs) = f.absolute_path() {
        let mut out = File::create(dst).map_err(|e| StateError::io(format!("create {to}"), e))?;
        stream_crc(&mut open_file(&abs, &shown)?, &shown, Some(&mut out), &to)?
    } else {
        // A remote file is streamed into place, then checked from the local copy (still in
        // the page cache): never held in memory whole.
        f.storage.download(&f.path, dst).map_err(storage_err)?;
        stream_crc(&mut open_file(dst, &to)?, &shown, None, &to)?
    };
    check_size(f, &shown, size)?;
    check_crc_value(f, &shown, crc)
}

/// Checks a restored file's CRC32 `crc` against the handle's.
fn check_crc_value(f: &ResolvedNativeFile, shown: &str, crc: u32) -> Result<(), StateError> {
    NativeChecksum::check(shown, &f.file.name, f.file.crc32, crc)
        .map_err(|e| StateError::Restore(RestoreError::NativeChecksum(e)))
}

/// Checks the CRC32 of the local file `path` against the handle's.
fn check_crc(f: &ResolvedNativeFile, shown: &str, path: &Path) -> Result<(), StateError> {
    let (_, crc) = stream_crc(&mut open_file(path, shown)?, shown, None, "")?;
    check_crc_value(f, shown, crc)
}

fn check_size(f: &ResolvedNativeFile, shown: &str, size: u64) -> Result<(), StateError> {
    if size != f.file.file.size {
        return Err(StateError::Restore(RestoreError::NativeSize {
            file: shown.to_string(),
            name: f.file.name.clone(),
            size,
            recorded: f.file.file.size,
        }));
    }
    Ok(())
}

/// Puts every file of `handle` into `dir` under its local name: table files are hard-linked
/// when the storage is local and linking works (RocksDB never writes to a table file; its
/// compactions only unlink), everything else is copied (RocksDB appends to the `MANIFEST`,
/// and a restored snapshot must not change). Every file's size and CRC32 is checked, so a
/// damaged snapshot fails here, not at some later read. Returns the bytes copied (not
/// linked).
pub(crate) fn assemble(handle: &ResolvedNativeHandle, dir: &Path) -> Result<u64, StateError> {
    std::fs::create_dir_all(dir).map_err(|e| StateError::io(format!("create {}", dir.display()), e))?;
    let mut copied = 0;
    let mut remote: Vec<&ResolvedNativeFile> = Vec::new();
    let mut linked: Vec<(&ResolvedNativeFile, PathBuf)> = Vec::new();
    for f in &handle.files {
        let dst = dir.join(&f.file.name);
        let shown = f.storage.describe(&f.path);
        if f.absolute_path().is_none() {
            remote.push(f);
            continue;
        }
        if f.file.name.ends_with(".sst") {
            if let Some(abs) = f.absolute_path() {
                let md = std::fs::metadata(&abs).map_err(|e| StateError::io(format!("stat {shown}"), e))?;
                check_size(f, &shown, md.len())?;
                if std::fs::hard_link(&abs, &dst).is_ok() {
                    linked.push((f, dst));
                    continue;
                }
            }
        }
        copy_checked(f, &dst)?;
        copied += f.file.file.size;
    }
    // RocksDB checks blocks only when it reads them: linked files are checked whole now,
    // TRANSFER_THREADS at a time, so damage is an error of the restore, not of some later read.
    in_parallel(&linked, |(f, dst)| check_crc(f, &f.storage.describe(&f.path), dst))?;
    // Files on a remote store: downloaded TRANSFER_THREADS at a time.
    in_parallel(&remote, |f| copy_checked(f, &dir.join(&f.file.name)))?;
    copied += remote.iter().map(|f| f.file.file.size).sum::<u64>();
    Ok(copied)
}

/// Files a native snapshot moves to or from a remote store at once.
const TRANSFER_THREADS: usize = 4;

/// Runs `f` on every item, [`TRANSFER_THREADS`] at a time; the results in order, or the
/// first error (the others stop taking new items).
fn in_parallel<T: Sync, R: Send>(
    items: &[T],
    f: impl Fn(&T) -> Result<R, StateError> + Sync,
) -> Result<Vec<R>, StateError> {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    if items.len() <= 1 {
        return items.iter().map(&f).collect();
    }
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let results: Vec<std::sync::Mutex<Option<Result<R, StateError>>>> =
        items.iter().map(|_| std::sync::Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..TRANSFER_THREADS.min(items.len()) {
            s.spawn(|| {
                while !failed.load(Ordering::Relaxed) {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let (Some(item), Some(slot)) = (items.get(i), results.get(i)) else {
                        return;
                    };
                    let r = f(item);
                    if r.is_err() {
                        failed.store(true, Ordering::Relaxed);
                    }
                    *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
                }
            });
        }
    });
    let results: Vec<Option<Result<R, StateError>>> = results
        .into_iter()
        .map(|m| m.into_inner().unwrap_or_else(|p| p.into_inner()))
        .collect();
    // The first failure is the one reported; items never started only follow one.
    if let Some(pos) = results.iter().position(|r| matches!(r, Some(Err(_)))) {
        if let Some(Some(Err(e))) = results.into_iter().nth(pos) {
            return Err(e);
        }
        return Err(StateError::Restore(RestoreError::TransferFailed));
    }
    Ok(results.into_iter().flatten().flatten().collect())
}

/// A native handle read as a [`KeyedStateView`] by the safe-Rust RocksDB file reader
/// (`statekit-rocksdb-files`): the files are read in place (mapped, or downloaded), never
/// handed to RocksDB's C++, which trusts them; nothing is written. Every file's size and
/// CRC32 is checked in full when the view opens, and every block's checksum when it is read.
/// A key group's entries are read from the data blocks that may hold it, in canonical
/// order; data whose TTL had expired at the cut ([`NativeKeyedHandle::clock_ms`]) is left
/// out, as a canonical snapshot would.
pub struct NativeSnapshotView {
    /// Each state's column family (in handle order), `None` when the database has none.
    families: Vec<Option<statekit_rocksdb_files::ColumnFamilyReader>>,
    max_parallelism: u32,
    range: KeyGroupRange,
    layout: KeyLayout,
    now_ms: i64,
    states: Vec<StateDescriptor>,
    copied_bytes: u64,
    subtask: u32,
}

impl std::fmt::Debug for NativeSnapshotView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativeSnapshotView")
            .field("max_parallelism", &self.max_parallelism)
            .field("key_group_range", &self.range)
            .field("states", &self.states.iter().map(|s| &s.name).collect::<Vec<_>>())
            .finish()
    }
}

/// Stored keys and values, in key order.
type StoredEntries = Vec<(Vec<u8>, Vec<u8>)>;

/// A storage blob as the file reader's shared bytes.
struct BlobBytes(Arc<dyn statekit_core::storage::Blob>);

impl AsRef<[u8]> for BlobBytes {
    fn as_ref(&self) -> &[u8] {
        self.0.bytes()
    }
}

/// The file reader's error as a state error (damage, or what it does not read).
fn files_err(subtask: u32, e: statekit_rocksdb_files::Error) -> StateError {
    match e.kind() {
        statekit_rocksdb_files::ErrorKind::Corrupt => corrupt(Corruption::NativeFiles { subtask, error: e }),
        statekit_rocksdb_files::ErrorKind::Unsupported => {
            StateError::Stream(statekit_core::StreamProblem::UnsupportedNative {
                subtask,
                reason: e.to_string(),
            })
        }
        _ => crate::error::RocksDbError::from(e).into(),
    }
}

/// The list state's merge operator (as RocksDB applies it): operands appended to the list.
fn merge_lists(_key: &[u8], existing: Option<&[u8]>, operands: &[&[u8]]) -> Result<Vec<u8>, String> {
    crate::layout::apply_list_operands(existing, operands.iter().copied()).map_err(|e| e.to_string())
}

impl NativeSnapshotView {
    /// Opens `handle`: checks every file's size and CRC32, reads the MANIFEST and each
    /// state's tables' footers and indexes. `options` is not used any more (no database is
    /// opened); it stays for callers.
    pub fn open(handle: &ResolvedNativeHandle, options: &RocksDbOptions) -> Result<Self, StateError> {
        let _ = options;
        check_handle(handle, handle.max_parallelism)?;
        let mut files = Vec::with_capacity(handle.files.len());
        let mut copied_bytes = 0;
        for f in &handle.files {
            let shown = f.storage.describe(&f.path);
            let blob = f.storage.open(&f.path).map_err(storage_err)?;
            check_size(f, &shown, blob.bytes().len() as u64)?;
            check_crc_value(f, &shown, crc32fast::hash(blob.bytes()))?;
            if f.absolute_path().is_none() {
                copied_bytes += f.file.file.size;
            }
            let display = if shown.ends_with(&f.file.name) {
                shown
            } else {
                format!("{shown} ({})", f.file.name)
            };
            files.push(statekit_rocksdb_files::DbFile {
                name: f.file.name.clone(),
                display,
                data: statekit_rocksdb_files::FileData::Shared(Arc::new(BlobBytes(blob))),
            });
        }
        let subtask = handle.subtask;
        let db = statekit_rocksdb_files::Db::open(files, statekit_rocksdb_files::Limits::default())
            .map_err(|e| files_err(subtask, e))?;
        for cf in db.column_families() {
            if cf.name != "default" && !handle.states.iter().any(|s| s.name == cf.name) {
                return Err(RocksDbError::from(Corruption::NoDescriptor {
                    subtask,
                    column_family: cf.name.clone(),
                })
                .into());
            }
        }
        let mut families = Vec::with_capacity(handle.states.len());
        for s in &handle.states {
            families.push(match db.column_family(&s.name) {
                Some(_) => Some(db.column_family_reader(&s.name).map_err(|e| files_err(subtask, e))?),
                None => None,
            });
        }
        Ok(NativeSnapshotView {
            families,
            max_parallelism: handle.max_parallelism,
            range: handle.key_groups,
            layout: KeyLayout::for_max_parallelism(handle.max_parallelism),
            now_ms: handle.handle.clock_ms,
            states: handle.states.clone(),
            copied_bytes,
            subtask,
        })
    }

    /// Bytes that had to be downloaded (not read in place) to open the view.
    pub fn copied_bytes(&self) -> u64 {
        self.copied_bytes
    }

    /// State `state`'s stored entries with keys in `[lower, upper)`, in key order.
    fn read(&self, state: usize, lower: &[u8], upper: Option<&[u8]>) -> Result<StoredEntries, StateError> {
        match self.families.get(state) {
            Some(Some(r)) => r
                .read_range(lower, upper, &merge_lists)
                .map_err(|e| files_err(self.subtask, e)),
            _ => Ok(Vec::new()),
        }
    }

    /// Calls `f(state name, stored key, stored value)` for every stored key of `range`, per
    /// state in handle order (raw bytes, for copying into another database); one key group
    /// at a time is held in memory.
    pub(crate) fn for_each_raw(
        &self,
        range: KeyGroupRange,
        mut f: impl FnMut(&str, &[u8], &[u8]) -> Result<(), StateError>,
    ) -> Result<(), StateError> {
        if range.is_empty() {
            return Ok(());
        }
        for (state, desc) in self.states.iter().enumerate() {
            for kg in range {
                let lower = self.layout.key_group_prefix(kg);
                let upper = self.layout.key_group_prefix(kg + 1);
                for (k, v) in self.read(state, &lower, Some(&upper))? {
                    f(&desc.name, &k, &v)?;
                }
            }
        }
        Ok(())
    }
}

impl KeyedStateView for NativeSnapshotView {
    statekit_core::keyed_accessors!(max_parallelism, key_group_range, states);

    fn visit_key_group(&self, key_group: u32, visitor: &mut EntryVisitor<'_>) -> Result<ControlFlow<()>, StateError> {
        if !self.range.contains(key_group) {
            return Ok(ControlFlow::Continue(()));
        }
        let lower = self.layout.key_group_prefix(key_group);
        let upper = self.layout.key_group_prefix(key_group + 1);
        for (state, desc) in self.states.iter().enumerate() {
            let entries = self.read(state, &lower, Some(&upper))?;
            let it = SliceCursor {
                entries: &entries,
                pos: 0,
            };
            if visit_state(self.layout, key_group, state as u32, desc, self.now_ms, it, visitor)?.is_break() {
                return Ok(ControlFlow::Break(()));
            }
        }
        Ok(ControlFlow::Continue(()))
    }
}

/// What [`verify_native`] read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NativeVerifyReport {
    /// Files checked.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Entries decoded.
    pub entries: u64,
}

/// Verifies a native handle in full: every file's size and CRC32, then every stored key and
/// value through RocksDB (block checksums on) and the layout decoder (key groups inside the
/// subtask's range, well-formed keys, values and lists).
pub fn verify_native(
    handle: &ResolvedNativeHandle,
    options: &RocksDbOptions,
) -> Result<NativeVerifyReport, StateError> {
    let mut report = NativeVerifyReport::default();
    for f in &handle.files {
        let shown = f.storage.describe(&f.path);
        let blob = f.storage.open(&f.path).map_err(storage_err)?;
        check_size(f, &shown, blob.bytes().len() as u64)?;
        let crc = crc32fast::hash(blob.bytes());
        NativeChecksum::check(&shown, &f.file.name, f.file.crc32, crc).map_err(Corruption::NativeChecksum)?;
        report.files += 1;
        report.bytes += f.file.file.size;
    }
    let view = NativeSnapshotView::open(handle, options)?;
    // Keys outside the subtask's range would be invisible to a key-group walk: look for them
    // (only the blocks below the range's first key group and above its last are read).
    let layout = view.layout;
    let range = view.range;
    let below = layout.key_group_prefix(range.start());
    let above = layout.key_group_prefix(range.end_exclusive());
    for (state, desc) in view.states.iter().enumerate() {
        let outside = view
            .read(state, &[], Some(&below))?
            .into_iter()
            .chain(view.read(state, &above, None)?)
            .next();
        if let Some((k, _)) = outside {
            let kg = layout.decode(&k)?.key_group;
            return Err(corrupt(Corruption::OutsideRange {
                subtask: handle.subtask,
                state: desc.name.clone(),
                key_group: kg,
                range,
            }));
        }
    }
    // Every part decoded by its schema, as `dump` renders it (checksums cannot tell bytes
    // written wrong, or rewritten with their checksums).
    let states = view.states.clone();
    let _ = view.visit_range(range, &mut |e| {
        report.entries += 1;
        statekit_core::stream::check_entry_values(&states, e).map_err(|problem| {
            corrupt(Corruption::Entry {
                subtask: handle.subtask,
                index: report.entries - 1,
                problem,
            })
        })?;
        Ok(ControlFlow::Continue(()))
    })?;
    Ok(report)
}
