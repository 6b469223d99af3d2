//! A small storage abstraction for checkpoint and savepoint files: the local filesystem
//! here, object stores (S3, GCS, Azure) in `statekit-objstore`. Paths are relative,
//! `/`-separated, and never contain `..`.
//!
//! Writers are crash-safe: [`Storage::create`] writes to a hidden temporary name, and
//! [`StorageWriter::commit`] fsyncs the data, renames it into place and fsyncs the
//! directory, so a reader sees either nothing or the whole file. (On an object store an
//! object appears only when its upload completes, which gives the same guarantee without a
//! rename.) A snapshot is complete when its `_metadata` exists, and `_metadata` is written last.

use memmap2::Mmap;
use std::collections::BTreeMap;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Errors from a [`Storage`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StorageError {
    /// The path does not exist.
    #[error("{0}: not found")]
    NotFound(String),
    /// The path is not acceptable (absolute, `..`, empty component).
    #[error("{0}: invalid storage path")]
    InvalidPath(String),
    /// The path exists but is not a regular file (a directory, a FIFO, a device, a socket):
    /// refused before it is opened, so a FIFO cannot block a reader forever.
    #[error("{path}: is {found}, not a regular file")]
    NotAFile {
        /// The full path, as the user would type it.
        path: String,
        /// What it is ([`file_type_name`]).
        found: &'static str,
    },
    /// The file was truncated by another program while it was being read.
    #[error(
        "{path}: the file was truncated by another program while it was being read (it had {had} bytes when opened)"
    )]
    Truncated {
        /// The full path, as the user would type it.
        path: String,
        /// Its size when it was opened.
        had: u64,
    },
    /// A file that must be new exists already ([`Storage::put_new`]): another writer got there
    /// first.
    #[error("{0}: already exists (another writer created it first)")]
    AlreadyExists(String),
    /// A request to a remote object store failed (after its retries, when `transient`).
    #[error("{path}: {message}")]
    Remote {
        /// The object's URL (`s3://bucket/key`).
        path: String,
        /// The HTTP status the store answered, when it answered.
        status: Option<u16>,
        /// True when retrying later may succeed (a timeout, a refused connection, 5xx).
        transient: bool,
        /// What failed, as the store's client reported it.
        message: String,
    },
    /// An I/O error on a path.
    #[error("{path}: {source}")]
    Io {
        /// The full path, as the user would type it.
        path: String,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

impl StorageError {
    /// What kind of failure this is.
    pub fn kind(&self) -> crate::ErrorKind {
        use crate::ErrorKind;
        match self {
            StorageError::NotFound(_) => ErrorKind::NotFound,
            StorageError::InvalidPath(_) | StorageError::NotAFile { .. } | StorageError::AlreadyExists(_) => {
                ErrorKind::Caller
            }
            StorageError::Truncated { .. } => ErrorKind::Transient,
            StorageError::Remote { transient: true, .. } => ErrorKind::Transient,
            StorageError::Remote {
                status: Some(401 | 403 | 400 | 405),
                ..
            } => ErrorKind::Caller,
            StorageError::Remote { .. } => ErrorKind::Internal,
            StorageError::Io { source, .. } => ErrorKind::of_io(source),
        }
    }
}

/// The bytes of a stored file (memory-mapped for local files).
pub trait Blob: Send + Sync {
    /// The whole file.
    fn bytes(&self) -> &[u8];

    /// Tells the blob that `len` bytes from `offset` will not be read again soon. A
    /// memory-mapped file drops those pages from the process's resident memory (the kernel's
    /// page cache keeps them); the bytes stay readable, a later read faults them back in.
    /// Readers call it after each key group, so reading a file much larger than RAM keeps the
    /// resident set at about one key group. Default: nothing.
    fn release(&self, _offset: usize, _len: usize) {}

    /// True when the file was truncated by another program while it was mapped, so some of
    /// the bytes read are zeros, not the file's: a reader whose read failed (a checksum, a
    /// length) checks this to report the truncation rather than damage. Default: false.
    fn truncated(&self) -> bool {
        false
    }

    /// Makes `len` bytes from `offset` readable through [`Blob::bytes`]. A blob from
    /// [`Storage::open_ranged`] may hold only what was fetched (a remote object read by
    /// ranges: the rest reads as zeros until fetched); readers call this before reading a
    /// range. Every other blob holds the whole file: the default does nothing.
    fn fetch(&self, _offset: u64, _len: u64) -> Result<(), StorageError> {
        Ok(())
    }
}

/// [`StorageError::Truncated`] when `blob` reports that its file was truncated while mapped
/// (`file` names it): readers call it when a read fails, so a truncation is reported as such,
/// not as damage. (Bytes past a truncation read as zeros, which always fail a checksum.)
pub fn check_intact(blob: &dyn Blob, file: &str) -> Result<(), StorageError> {
    if blob.truncated() {
        Err(StorageError::Truncated {
            path: file.to_string(),
            had: blob.bytes().len() as u64,
        })
    } else {
        Ok(())
    }
}

/// A read-only map of a local file, guarded against the file's truncation while mapped
/// (`SIGBUS`; see the `mapguard` module).
struct MappedFile {
    // Declared first: unregistered before the map is unmapped.
    #[cfg(target_os = "linux")]
    guard: crate::mapguard::MapGuard,
    map: Mmap,
    /// The file, to tell a truncation that did not fault (inside the last page, which the
    /// kernel zero-fills past the end) by its size.
    path: PathBuf,
}

impl MappedFile {
    fn new(map: Mmap, path: PathBuf) -> Self {
        MappedFile {
            #[cfg(target_os = "linux")]
            guard: crate::mapguard::MapGuard::register(map.as_ptr(), map.len()),
            map,
            path,
        }
    }
}

impl Blob for MappedFile {
    fn bytes(&self) -> &[u8] {
        &self.map
    }

    fn release(&self, offset: usize, len: usize) {
        self.map.release(offset, len);
    }

    fn truncated(&self) -> bool {
        #[cfg(target_os = "linux")]
        if self.guard.truncated() {
            return true;
        }
        fs::metadata(&self.path).is_ok_and(|md| md.len() < self.map.len() as u64)
    }
}

impl Blob for Vec<u8> {
    fn bytes(&self) -> &[u8] {
        self
    }
}

impl Blob for Mmap {
    fn bytes(&self) -> &[u8] {
        self
    }

    #[cfg(unix)]
    fn release(&self, offset: usize, len: usize) {
        let offset = offset.min(self.len());
        let len = len.min(self.len() - offset);
        if len == 0 {
            return;
        }
        // SAFETY: the map is a read-only, shared mapping of a file (`Mmap::map`): dropping its
        // pages loses nothing — a later read of them faults the file's bytes back in.
        let r = unsafe { self.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, offset, len) };
        if let Err(e) = r {
            tracing::debug!(error = %e, "madvise(DONTNEED) failed");
        }
    }
}

/// One entry of a directory listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// The entry's name (no `/`).
    pub name: String,
    /// True for directories.
    pub is_dir: bool,
    /// Size in bytes (0 for directories).
    pub size: u64,
    /// Last modification, milliseconds since the epoch (0 when unknown).
    pub modified_ms: i64,
}

/// A file being written; nothing is visible under its final name until `commit`.
pub trait StorageWriter: Write + Send {
    /// Makes the file durable and visible under its final name; returns its size.
    fn commit(self: Box<Self>) -> Result<u64, StorageError>;
}

/// A file prepared ahead of its use ([`Storage::prepare`]): it exists under its final name,
/// `capacity` bytes long, every byte zero and durable. Writing into it and
/// [`PreparedFile::commit`] (`fdatasync`) change no file system metadata — no block is
/// allocated, the size stays — so the commit waits for no journal commit, and it does not queue
/// behind other writers' syncs on the same file system the way a new file's `fsync`, rename and
/// directory `fsync` do.
///
/// Its content until committed is whatever was written (zeros at first): a reader must not be
/// pointed at it before the commit returns. Dropped uncommitted, the file is deleted.
pub trait PreparedFile: Send + fmt::Debug {
    /// Its size: how much can be written into it.
    fn capacity(&self) -> u64;
    /// How long ago it was prepared or last [refreshed](PreparedFile::refresh) (garbage
    /// collectors leave young files alone: an old spare may have been taken for an orphan).
    fn age(&self) -> std::time::Duration;
    /// Marks it modified now (its mtime), so a garbage collector that spares files younger than
    /// some age spares it again; [`PreparedFile::age`] counts from here.
    fn refresh(&mut self) -> Result<(), StorageError>;
    /// Writes `buf` at `offset`; `offset + buf.len()` must not exceed the capacity.
    fn write_at(&mut self, offset: u64, buf: &[u8]) -> Result<(), StorageError>;
    /// Makes what was written durable (`fdatasync`) and checks the file is still the one under
    /// its name (a garbage collector may have deleted it).
    fn commit(self: Box<Self>) -> Result<(), StorageError>;
}

/// Where checkpoint and savepoint files live.
pub trait Storage: Send + Sync + fmt::Debug {
    /// The full location of `path`, for messages (e.g. `/data/chk/job/chk-3/_metadata`).
    fn describe(&self, path: &str) -> String;
    /// Starts writing `path` (parents are created). Replaces an existing file on commit.
    fn create(&self, path: &str) -> Result<Box<dyn StorageWriter>, StorageError>;
    /// Reads a whole file.
    fn open(&self, path: &str) -> Result<Arc<dyn Blob>, StorageError>;
    /// Opens a file to be read by ranges: the caller [`Blob::fetch`]es each range before it
    /// reads it, so a remote object is read only where needed (a key group's blocks, not the
    /// whole file). Default: [`Storage::open`] (local files are mapped, every byte is there).
    fn open_ranged(&self, path: &str) -> Result<Arc<dyn Blob>, StorageError> {
        self.open(path)
    }
    /// True when a file or directory exists at `path`.
    fn exists(&self, path: &str) -> Result<bool, StorageError>;
    /// The entries of a directory (`""` is the root), sorted by name. A missing directory
    /// lists as empty.
    fn list(&self, dir: &str) -> Result<Vec<DirEntry>, StorageError>;
    /// [`Storage::list`], adding to `invalid` the entries it left out because their names
    /// are not valid paths (an object store's keys with an empty, `.` or `..` segment, which
    /// no path can name: they are never read or deleted), as [`Storage::describe`] would show
    /// them. [`Storage::list`] itself leaves them out silently (or fails, on a store that
    /// cannot step over them). Default: `list`, nothing invalid.
    fn list_reporting(&self, dir: &str, invalid: &mut Vec<String>) -> Result<Vec<DirEntry>, StorageError> {
        let _ = invalid;
        self.list(dir)
    }
    /// Deletes one file; a missing file is not an error.
    fn delete_file(&self, path: &str) -> Result<(), StorageError>;
    /// Deletes a directory and everything below it; a missing directory is not an error.
    fn delete_dir_all(&self, dir: &str) -> Result<(), StorageError>;
    /// Creates a directory and its parents.
    fn create_dir_all(&self, dir: &str) -> Result<(), StorageError>;

    /// The absolute local filesystem path of `path`, when this storage is the local
    /// filesystem (so the file can be hard-linked, or referenced from another snapshot by an
    /// absolute path); `None` otherwise.
    fn absolute_path(&self, _path: &str) -> Option<PathBuf> {
        None
    }

    /// The URL of `path` (`s3://bucket/key`) when this storage is an object store whose
    /// objects can be referenced from a snapshot elsewhere (resolved again through
    /// [`crate::location::resolve_url`]); `None` otherwise.
    fn url(&self, _path: &str) -> Option<String> {
        None
    }

    /// Copies `path` into the local file `dst` (created or truncated; not synced: a working
    /// copy, e.g. a native snapshot's files restored into a database directory); returns its
    /// size. Default: [`Storage::open`] and one write. An object store streams the object
    /// into the file without holding it in memory.
    fn download(&self, path: &str, dst: &Path) -> Result<u64, StorageError> {
        let blob = self.open(path)?;
        fs::write(dst, blob.bytes()).map_err(|e| StorageError::Io {
            path: dst.display().to_string(),
            source: e,
        })?;
        Ok(blob.bytes().len() as u64)
    }

    /// Writes a whole file atomically if none is at `path`, else fails with
    /// [`StorageError::AlreadyExists`] (a snapshot's `_metadata`: two writers racing for one
    /// checkpoint directory cannot both complete it). Stores that can create conditionally do
    /// so in one step (an object store's `If-None-Match: *`, a local hard link); the default
    /// checks, then writes.
    fn put_new(&self, path: &str, bytes: &[u8]) -> Result<u64, StorageError> {
        if self.exists(path)? {
            return Err(StorageError::AlreadyExists(self.describe(path)));
        }
        self.put_atomic(path, bytes)
    }

    /// Prepares `path` to be written in place later ([`PreparedFile`]): creates it, `size`
    /// zero bytes, durable under its name. Its directory must exist (a preparation running
    /// late must not recreate a directory deleted meanwhile). `Ok(None)` when this storage cannot (the default; an
    /// object store has no in-place writes) — the caller writes through [`Storage::create`].
    fn prepare(&self, _path: &str, _size: u64) -> Result<Option<Box<dyn PreparedFile>>, StorageError> {
        Ok(None)
    }

    /// Writes a whole file atomically.
    fn put_atomic(&self, path: &str, bytes: &[u8]) -> Result<u64, StorageError> {
        let mut w = self.create(path)?;
        w.write_all(bytes).map_err(|e| StorageError::Io {
            path: self.describe(path),
            source: e,
        })?;
        w.commit()
    }
}

/// Checks a relative storage path.
pub fn check_path(path: &str) -> Result<(), StorageError> {
    let bad = path.starts_with('/')
        || path.contains('\\')
        || path.split('/').any(|c| c == ".." || c == ".")
        || (!path.is_empty() && path.split('/').any(str::is_empty));
    if bad {
        Err(StorageError::InvalidPath(path.to_string()))
    } else {
        Ok(())
    }
}

/// Every file below `dir` of `storage` (its subdirectories too), as (path, entry), by listings.
pub fn files_below(storage: &dyn Storage, dir: &str) -> Result<Vec<(String, DirEntry)>, StorageError> {
    files_below_reporting(storage, dir, &mut Vec::new())
}

/// [`files_below`], adding to `invalid` the keys below `dir` that are not valid paths
/// ([`Storage::list_reporting`]).
pub fn files_below_reporting(
    storage: &dyn Storage,
    dir: &str,
    invalid: &mut Vec<String>,
) -> Result<Vec<(String, DirEntry)>, StorageError> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_string()];
    while let Some(d) = dirs.pop() {
        for e in storage.list_reporting(&d, invalid)? {
            let p = join(&d, &e.name);
            if e.is_dir {
                dirs.push(p);
            } else {
                files.push((p, e));
            }
        }
    }
    Ok(files)
}

/// Downloads every object below `prefix` of `storage` into the local directory `local`
/// (created; the same relative paths), one object at a time, each streamed into its file
/// ([`Storage::download`]); returns the bytes downloaded. A working copy for commands that read
/// a tree of files (an import's tables): nothing is synced.
pub fn download_tree(storage: &dyn Storage, prefix: &str, local: &Path) -> Result<u64, StorageError> {
    let io = |p: &Path, e: io::Error| StorageError::Io {
        path: p.display().to_string(),
        source: e,
    };
    let prefix = prefix.trim_end_matches('/');
    fs::create_dir_all(local).map_err(|e| io(local, e))?;
    let mut total = 0;
    for (key, _) in files_below(storage, prefix)? {
        let rel = key.strip_prefix(prefix).unwrap_or(&key).trim_start_matches('/');
        let dst = local.join(rel);
        if let Some(parent) = dst.parent() {
            fs::create_dir_all(parent).map_err(|e| io(parent, e))?;
        }
        total += storage.download(&key, &dst)?;
    }
    Ok(total)
}

/// Uploads every file below the local directory `local` to `prefix` of `storage` (the same
/// relative paths), `threads` files at a time, then the file `last` (relative to `local`)
/// alone and only if no object has its name ([`Storage::put_new`]): on a store without rename
/// that last object is what makes the upload complete (a snapshot's `_metadata`, an export's
/// `_tables.json`). On any failure the objects this call wrote are deleted again (best effort;
/// others under `prefix`, another writer's, are left alone) and the first error is returned.
/// Returns the bytes uploaded.
pub fn upload_tree(
    local: &Path,
    storage: &dyn Storage,
    prefix: &str,
    last: &str,
    threads: usize,
) -> Result<u64, StorageError> {
    let io = |p: &Path, e: io::Error| StorageError::Io {
        path: p.display().to_string(),
        source: e,
    };
    let mut files = Vec::new();
    let mut dirs = vec![local.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in fs::read_dir(&d).map_err(|e| io(&d, e))? {
            let e = e.map_err(|e| io(&d, e))?;
            let p = e.path();
            if e.file_type().map_err(|err| io(&p, err))?.is_dir() {
                dirs.push(p);
            } else if p != local.join(last) {
                files.push(p);
            }
        }
    }
    let key_of = |p: &Path| -> Result<String, StorageError> {
        let rel = p
            .strip_prefix(local)
            .map_err(|_| io(p, io::Error::other("outside the tree being uploaded")))?;
        Ok(join(prefix, &rel.to_string_lossy().replace('\\', "/")))
    };
    let uploaded: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let upload = |p: &Path| -> Result<u64, StorageError> {
        let key = key_of(p)?;
        let mut w = storage.create(&key)?;
        let mut f = File::open(p).map_err(|e| io(p, e))?;
        io::copy(&mut f, &mut w).map_err(|e| io(p, e))?;
        let n = w.commit()?;
        uploaded.lock().unwrap_or_else(|p| p.into_inner()).push(key);
        Ok(n)
    };
    let next = AtomicU64::new(0);
    let total = AtomicU64::new(0);
    let first_error: std::sync::Mutex<Option<StorageError>> = std::sync::Mutex::new(None);
    let failed = || first_error.lock().map(|e| e.is_some()).unwrap_or(true);
    std::thread::scope(|s| {
        for _ in 0..threads.clamp(1, 16).min(files.len()) {
            s.spawn(|| {
                while !failed() {
                    let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                    let Some(p) = files.get(i) else {
                        return;
                    };
                    match upload(p) {
                        Ok(n) => {
                            total.fetch_add(n, Ordering::Relaxed);
                        }
                        Err(e) => {
                            if let Ok(mut slot) = first_error.lock() {
                                slot.get_or_insert(e);
                            }
                        }
                    }
                }
            });
        }
    });
    let result = match first_error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(e) => Err(e),
        None => {
            let lp = local.join(last);
            fs::read(&lp)
                .map_err(|e| io(&lp, e))
                .and_then(|bytes| storage.put_new(&join(prefix, last), &bytes))
        }
    };
    match result {
        Ok(n) => Ok(total.into_inner() + n),
        Err(e) => {
            for key in uploaded.into_inner().unwrap_or_else(|p| p.into_inner()) {
                let _ = storage.delete_file(&key);
            }
            Err(e)
        }
    }
}

/// Joins two relative paths with `/`.
pub fn join(a: &str, b: &str) -> String {
    match (a.is_empty(), b.is_empty()) {
        (true, _) => b.to_string(),
        (_, true) => a.to_string(),
        _ => format!("{a}/{b}"),
    }
}

/// Files under a directory on the local filesystem.
#[derive(Clone, Debug)]
pub struct LocalStorage {
    root: PathBuf,
    /// Files are read only inside `root` ([`LocalStorage::confined`]).
    confined: bool,
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

impl LocalStorage {
    /// Storage rooted at `root` (which need not exist yet).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        LocalStorage {
            root: root.into(),
            confined: false,
        }
    }

    /// Storage rooted at `root` whose files are read only inside it: a file that leads out
    /// of it through a symlink is refused when opened, as `..` and absolute paths are refused
    /// by every local storage (the directory a snapshot's references are relative to).
    pub fn confined(root: impl Into<PathBuf>) -> Self {
        LocalStorage {
            root: root.into(),
            confined: true,
        }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Refuses a file (`p`, named `path`) that leads out of the root through a symlink: a
    /// snapshot's reference reads only inside the directory it is relative to, as `check_path`
    /// keeps `..` and absolute paths out (issue 40). A file that does not exist is left to the
    /// open to report.
    fn refuse_symlink_out(&self, path: &str, p: &Path) -> Result<(), StorageError> {
        if let (Ok(root), Ok(target)) = (fs::canonicalize(&self.root), fs::canonicalize(p)) {
            if !target.starts_with(&root) {
                return Err(StorageError::NotAFile {
                    path: self.describe(path),
                    found: "a symlink that leads out of the directory it is read from",
                });
            }
        }
        Ok(())
    }

    fn path(&self, rel: &str) -> Result<PathBuf, StorageError> {
        check_path(rel)?;
        Ok(if rel.is_empty() {
            self.root.clone()
        } else {
            self.root.join(rel)
        })
    }

    fn io(&self, rel: &str, e: io::Error) -> StorageError {
        if e.kind() == io::ErrorKind::NotFound {
            StorageError::NotFound(self.describe(rel))
        } else {
            StorageError::Io {
                path: self.describe(rel),
                source: e,
            }
        }
    }
}

/// What a file type is, in words for messages: "a directory", "a FIFO", "a symlink", ….
pub fn file_type_name(ft: fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if ft.is_fifo() {
            return "a FIFO";
        } else if ft.is_socket() {
            return "a socket";
        } else if ft.is_block_device() || ft.is_char_device() {
            return "a device";
        }
    }
    if ft.is_dir() {
        "a directory"
    } else if ft.is_symlink() {
        "a symlink"
    } else if ft.is_file() {
        "a regular file"
    } else {
        "not a regular file"
    }
}

/// Why [`open_regular_file`] failed.
#[derive(Debug)]
pub enum OpenFileError {
    /// The open (or stat) failed.
    Io(io::Error),
    /// The path is not a regular file; the words say what it is ([`file_type_name`]).
    NotAFile(&'static str),
}

/// Opens a regular file for reading, refusing anything else: a FIFO or device is opened
/// non-blocking (so `open` cannot wait forever for a writer) and then rejected by its file
/// type, as is a directory. Follows symlinks, as `open` does.
pub fn open_regular_file(path: &Path) -> Result<(File, fs::Metadata), OpenFileError> {
    let mut opts = OpenOptions::new();
    opts.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.custom_flags(libc::O_NONBLOCK);
    }
    let file = opts.open(path).map_err(OpenFileError::Io)?;
    let md = file.metadata().map_err(OpenFileError::Io)?;
    if !md.is_file() {
        return Err(OpenFileError::NotAFile(file_type_name(md.file_type())));
    }
    Ok((file, md))
}

/// Fsyncs a directory so a rename or create inside it is durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

struct LocalWriter {
    file: io::BufWriter<File>,
    tmp: PathBuf,
    dest: PathBuf,
    display: String,
    committed: bool,
    /// Bytes handed to the file so far, and how many of them writeback was started for.
    written: u64,
    writeback_started: u64,
}

/// Buffer for small writes; a write at least this large goes to the file directly.
const WRITE_BUFFER: usize = 64 << 10;

/// Start writeback of every this many bytes while a file is written (like RocksDB's
/// `bytes_per_sync`), so the final fsync finds little left to do and the disk works while the
/// writer encodes.
const WRITEBACK_CHUNK: u64 = 8 << 20;

impl LocalWriter {
    fn note_written(&mut self, n: usize) -> io::Result<()> {
        self.written += n as u64;
        if self.written - self.writeback_started >= WRITEBACK_CHUNK {
            self.file.flush()?;
            start_writeback(
                self.file.get_ref(),
                self.writeback_started,
                self.written - self.writeback_started,
            );
            self.writeback_started = self.written;
        }
        Ok(())
    }
}

/// Asks the kernel to start writing `[offset, offset+len)` of `file` to disk without waiting
/// (`sync_file_range(SYNC_FILE_RANGE_WRITE)` on Linux; nothing elsewhere). For writers that
/// fsync at the end: the disk works while they produce, and the final sync finds little left.
/// Any descriptor of the file will do, a read-only one too. Failure is ignored (it only
/// means no early writeback).
#[cfg(target_os = "linux")]
pub fn start_writeback(file: &File, offset: u64, len: u64) {
    use std::os::unix::io::AsRawFd;
    // SAFETY: sync_file_range only reads its integer arguments; the descriptor is valid for
    // the lifetime of `file`. Failure only means no early writeback; fsync still follows.
    unsafe {
        libc::sync_file_range(
            file.as_raw_fd(),
            offset as libc::off64_t,
            len as libc::off64_t,
            libc::SYNC_FILE_RANGE_WRITE,
        );
    }
}

/// Asks the kernel to start writing a range of `file` to disk (nothing on this platform).
#[cfg(not(target_os = "linux"))]
pub fn start_writeback(_file: &File, _offset: u64, _len: u64) {}

/// Asks the kernel to read the first `len` bytes of `file` into the page cache in the
/// background (`posix_fadvise(WILLNEED)`): for a file just written by a writer that dropped
/// it from the cache, and soon to be read. Linux reads at most the device's largest request
/// per call, so the range is asked for in pieces of [`READ_AHEAD_PIECE`]. Failure is ignored
/// (it only means the bytes are read when they are needed).
#[cfg(target_os = "linux")]
pub fn read_ahead(file: &File, len: u64) {
    use std::os::unix::io::AsRawFd;
    let mut at = 0;
    while at < len {
        let n = (len - at).min(READ_AHEAD_PIECE);
        // SAFETY: posix_fadvise only reads its integer arguments; the descriptor is valid for
        // the lifetime of `file`.
        let r = unsafe {
            libc::posix_fadvise(
                file.as_raw_fd(),
                at as libc::off_t,
                n as libc::off_t,
                libc::POSIX_FADV_WILLNEED,
            )
        };
        if r != 0 {
            return;
        }
        at += n;
    }
}

/// The piece of a file [`read_ahead`] asks the kernel for at once.
pub const READ_AHEAD_PIECE: u64 = 1 << 20;

/// Asks the kernel to read `file` into the page cache (nothing on this platform).
#[cfg(not(target_os = "linux"))]
pub fn read_ahead(_file: &File, _len: u64) {}

impl Write for LocalWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.file.write(buf)?;
        self.note_written(n)?;
        Ok(n)
    }
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.file.write_all(buf)?;
        self.note_written(buf.len())
    }
    /// Large vectored writes (a batch of blocks) go straight to the file as one `writev`,
    /// without a copy into the buffer.
    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        let n = self.file.write_vectored(bufs)?;
        self.note_written(n)?;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

impl StorageWriter for LocalWriter {
    fn commit(mut self: Box<Self>) -> Result<u64, StorageError> {
        let display = self.display.clone();
        let err = |e| StorageError::Io {
            path: display.clone(),
            source: e,
        };
        self.file.flush().map_err(err)?;
        let file = self.file.get_ref();
        file.sync_all().map_err(err)?;
        let size = file.metadata().map_err(err)?.len();
        fs::rename(&self.tmp, &self.dest).map_err(err)?;
        if let Some(parent) = self.dest.parent() {
            sync_dir(parent).map_err(err)?;
        }
        self.committed = true;
        Ok(size)
    }
}

impl Drop for LocalWriter {
    fn drop(&mut self) {
        if !self.committed {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

/// A [`PreparedFile`] on the local filesystem.
#[cfg(unix)]
#[derive(Debug)]
struct LocalPrepared {
    file: File,
    dest: PathBuf,
    display: String,
    capacity: u64,
    prepared: std::time::Instant,
    committed: bool,
}

#[cfg(unix)]
impl LocalPrepared {
    fn io(&self, e: io::Error) -> StorageError {
        StorageError::Io {
            path: self.display.clone(),
            source: e,
        }
    }

    /// True while its name still names this file (not deleted or replaced since).
    fn still_named(&self) -> io::Result<bool> {
        use std::os::unix::fs::MetadataExt;
        let ours = self.file.metadata()?;
        match fs::metadata(&self.dest) {
            Ok(named) => Ok((ours.dev(), ours.ino()) == (named.dev(), named.ino())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }
}

#[cfg(unix)]
impl PreparedFile for LocalPrepared {
    fn capacity(&self) -> u64 {
        self.capacity
    }

    fn age(&self) -> std::time::Duration {
        self.prepared.elapsed()
    }

    fn refresh(&mut self) -> Result<(), StorageError> {
        self.file
            .set_modified(std::time::SystemTime::now())
            .map_err(|e| self.io(e))?;
        self.prepared = std::time::Instant::now();
        Ok(())
    }

    fn write_at(&mut self, offset: u64, buf: &[u8]) -> Result<(), StorageError> {
        use std::os::unix::fs::FileExt;
        let end = offset.checked_add(buf.len() as u64);
        if end.is_none_or(|e| e > self.capacity) {
            return Err(self.io(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} bytes at {offset} do not fit a prepared file of {} bytes",
                    buf.len(),
                    self.capacity
                ),
            )));
        }
        self.file.write_all_at(buf, offset).map_err(|e| self.io(e))
    }

    fn commit(mut self: Box<Self>) -> Result<(), StorageError> {
        // Data only: an fsync would also write the inode's new mtime, through the journal.
        self.file.sync_data().map_err(|e| self.io(e))?;
        if !self.still_named().map_err(|e| self.io(e))? {
            return Err(StorageError::NotFound(format!(
                "{} (the prepared file was deleted or replaced before it was committed)",
                self.display
            )));
        }
        self.committed = true;
        Ok(())
    }
}

#[cfg(unix)]
impl Drop for LocalPrepared {
    fn drop(&mut self) {
        // Only if the name is still this file.
        if !self.committed && self.still_named().unwrap_or(false) {
            let _ = fs::remove_file(&self.dest);
        }
    }
}

impl Storage for LocalStorage {
    /// Writes `size` zeros to a temporary file, fsyncs it, renames it to `path` and fsyncs the
    /// directory: every block is allocated and initialised, so writes into the file later are
    /// overwrites (`fallocate` would leave unwritten extents, whose first write is a metadata
    /// change).
    #[cfg(unix)]
    fn prepare(&self, path: &str, size: u64) -> Result<Option<Box<dyn PreparedFile>>, StorageError> {
        let dest = self.path(path)?;
        let parent = dest.parent().unwrap_or(&self.root).to_path_buf();
        let tmp = parent.join(format!(
            ".prepared.{}.{}.tmp",
            std::process::id(),
            TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let made = (|| -> io::Result<File> {
            let mut f = OpenOptions::new().read(true).write(true).create_new(true).open(&tmp)?;
            let zeros = vec![0u8; (1 << 20).min(usize::try_from(size).unwrap_or(usize::MAX)).max(1)];
            let mut left = size;
            while left > 0 {
                let n = left.min(zeros.len() as u64) as usize;
                f.write_all(&zeros[..n])?;
                left -= n as u64;
            }
            f.sync_all()?;
            fs::rename(&tmp, &dest)?;
            sync_dir(&parent)?;
            Ok(f)
        })();
        match made {
            Ok(file) => Ok(Some(Box::new(LocalPrepared {
                file,
                dest,
                display: self.describe(path),
                capacity: size,
                prepared: std::time::Instant::now(),
                committed: false,
            }))),
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                Err(self.io(path, e))
            }
        }
    }

    fn absolute_path(&self, path: &str) -> Option<PathBuf> {
        let p = self.path(path).ok()?;
        std::path::absolute(p).ok()
    }

    fn describe(&self, path: &str) -> String {
        if path.is_empty() {
            self.root.display().to_string()
        } else {
            self.root.join(path).display().to_string()
        }
    }

    fn create(&self, path: &str) -> Result<Box<dyn StorageWriter>, StorageError> {
        let dest = self.path(path)?;
        let name = dest
            .file_name()
            .ok_or_else(|| StorageError::InvalidPath(path.to_string()))?
            .to_string_lossy()
            .to_string();
        let parent = dest.parent().unwrap_or(&self.root).to_path_buf();
        fs::create_dir_all(&parent).map_err(|e| self.io(path, e))?;
        let tmp = parent.join(format!(
            ".{name}.{}.{}.tmp",
            std::process::id(),
            TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| self.io(path, e))?;
        Ok(Box::new(LocalWriter {
            file: io::BufWriter::with_capacity(WRITE_BUFFER, file),
            tmp,
            dest,
            display: self.describe(path),
            committed: false,
            written: 0,
            writeback_started: 0,
        }))
    }

    /// A temporary file (written, fsynced) hard-linked to its name: `link` fails when the
    /// name exists, so of two writers exactly one succeeds; then the directory is fsynced. On
    /// a file system without hard links: a check, then rename.
    fn put_new(&self, path: &str, bytes: &[u8]) -> Result<u64, StorageError> {
        let dest = self.path(path)?;
        let parent = dest.parent().unwrap_or(&self.root).to_path_buf();
        fs::create_dir_all(&parent).map_err(|e| self.io(path, e))?;
        let tmp = parent.join(format!(
            ".new.{}.{}.tmp",
            std::process::id(),
            TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let written = (|| -> io::Result<()> {
            let mut f = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
            f.write_all(bytes)?;
            f.sync_all()
        })();
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            return Err(self.io(path, e));
        }
        let linked = fs::hard_link(&tmp, &dest);
        let _ = fs::remove_file(&tmp);
        match linked {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                return Err(StorageError::AlreadyExists(self.describe(path)));
            }
            Err(_) => {
                // No hard links here (some network or FAT file systems).
                if dest.exists() {
                    return Err(StorageError::AlreadyExists(self.describe(path)));
                }
                return self.put_atomic(path, bytes);
            }
        }
        sync_dir(&parent).map_err(|e| self.io(path, e))?;
        Ok(bytes.len() as u64)
    }

    fn open(&self, path: &str) -> Result<Arc<dyn Blob>, StorageError> {
        let p = self.path(path)?;
        if self.confined {
            self.refuse_symlink_out(path, &p)?;
        }
        let (file, md) = open_regular_file(&p).map_err(|e| match e {
            OpenFileError::Io(e) => self.io(path, e),
            OpenFileError::NotAFile(found) => StorageError::NotAFile {
                path: self.describe(path),
                found,
            },
        })?;
        let len = md.len();
        if len == 0 {
            return Ok(Arc::new(Vec::new()));
        }
        // SAFETY: the file is opened read-only. statekit never modifies a committed file in
        // place (writers go through a temporary name and rename), so the mapping is not
        // changed underneath us by statekit itself; another program truncating it is survived
        // by the map guard (`MappedFile`, `mapguard`), which readers consult via
        // `Blob::truncated`.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| self.io(path, e))?;
        Ok(Arc::new(MappedFile::new(map, p)))
    }

    fn exists(&self, path: &str) -> Result<bool, StorageError> {
        Ok(self.path(path)?.exists())
    }

    fn list(&self, dir: &str) -> Result<Vec<DirEntry>, StorageError> {
        let p = self.path(dir)?;
        let rd = match fs::read_dir(&p) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(self.io(dir, e)),
        };
        let mut out = Vec::new();
        for entry in rd {
            let entry = entry.map_err(|e| self.io(dir, e))?;
            let md = match entry.metadata() {
                Ok(md) => md,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(self.io(dir, e)),
            };
            let modified_ms = md
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_millis() as i64)
                .unwrap_or(0);
            out.push(DirEntry {
                name: entry.file_name().to_string_lossy().to_string(),
                is_dir: md.is_dir(),
                size: if md.is_dir() { 0 } else { md.len() },
                modified_ms,
            });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    fn delete_file(&self, path: &str) -> Result<(), StorageError> {
        match fs::remove_file(self.path(path)?) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(self.io(path, e)),
            _ => Ok(()),
        }
    }

    fn delete_dir_all(&self, dir: &str) -> Result<(), StorageError> {
        match fs::remove_dir_all(self.path(dir)?) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(self.io(dir, e)),
            _ => Ok(()),
        }
    }

    fn create_dir_all(&self, dir: &str) -> Result<(), StorageError> {
        fs::create_dir_all(self.path(dir)?).map_err(|e| self.io(dir, e))
    }
}

/// Files held in memory (tests, and engines that keep small checkpoints in RAM).
#[derive(Debug, Default, Clone)]
pub struct MemoryStorage {
    files: Arc<Mutex<BTreeMap<String, Arc<Vec<u8>>>>>,
}

impl MemoryStorage {
    /// Empty storage.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<Vec<u8>>>> {
        self.files.lock().unwrap_or_else(|p| p.into_inner())
    }
}

struct MemoryWriter {
    storage: MemoryStorage,
    path: String,
    buf: Vec<u8>,
}

impl Write for MemoryWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        let mut n = 0;
        for b in bufs {
            self.buf.extend_from_slice(b);
            n += b.len();
        }
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl StorageWriter for MemoryWriter {
    fn commit(self: Box<Self>) -> Result<u64, StorageError> {
        let len = self.buf.len() as u64;
        self.storage.lock().insert(self.path, Arc::new(self.buf));
        Ok(len)
    }
}

struct SharedBlob(Arc<Vec<u8>>);

impl Blob for SharedBlob {
    fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl Storage for MemoryStorage {
    fn describe(&self, path: &str) -> String {
        format!("memory:/{path}")
    }

    fn create(&self, path: &str) -> Result<Box<dyn StorageWriter>, StorageError> {
        check_path(path)?;
        Ok(Box::new(MemoryWriter {
            storage: self.clone(),
            path: path.to_string(),
            buf: Vec::new(),
        }))
    }

    fn open(&self, path: &str) -> Result<Arc<dyn Blob>, StorageError> {
        check_path(path)?;
        self.lock()
            .get(path)
            .map(|b| Arc::new(SharedBlob(b.clone())) as Arc<dyn Blob>)
            .ok_or_else(|| StorageError::NotFound(self.describe(path)))
    }

    fn exists(&self, path: &str) -> Result<bool, StorageError> {
        check_path(path)?;
        let prefix = format!("{path}/");
        Ok(path.is_empty() || self.lock().keys().any(|k| k == path || k.starts_with(&prefix)))
    }

    fn list(&self, dir: &str) -> Result<Vec<DirEntry>, StorageError> {
        check_path(dir)?;
        let prefix = if dir.is_empty() {
            String::new()
        } else {
            format!("{dir}/")
        };
        let mut out: BTreeMap<String, DirEntry> = BTreeMap::new();
        for (k, v) in self.lock().iter() {
            if let Some(rest) = k.strip_prefix(&prefix) {
                let (name, is_dir) = match rest.split_once('/') {
                    Some((first, _)) => (first, true),
                    None => (rest, false),
                };
                out.entry(name.to_string()).or_insert(DirEntry {
                    name: name.to_string(),
                    is_dir,
                    size: if is_dir { 0 } else { v.len() as u64 },
                    modified_ms: 0,
                });
            }
        }
        Ok(out.into_values().collect())
    }

    fn delete_file(&self, path: &str) -> Result<(), StorageError> {
        check_path(path)?;
        self.lock().remove(path);
        Ok(())
    }

    fn delete_dir_all(&self, dir: &str) -> Result<(), StorageError> {
        check_path(dir)?;
        let prefix = format!("{dir}/");
        self.lock().retain(|k, _| !k.starts_with(&prefix));
        Ok(())
    }

    fn create_dir_all(&self, dir: &str) -> Result<(), StorageError> {
        check_path(dir)
    }
}

/// A view of another storage below a directory: every path is prefixed with `prefix/`.
/// Lets code written for "storage rooted at the snapshot directory" run on any storage.
#[derive(Debug, Clone)]
pub struct SubdirStorage {
    inner: Arc<dyn Storage>,
    prefix: String,
}

impl SubdirStorage {
    /// `inner` seen from `prefix` (a relative directory; `""` means the root itself).
    pub fn new(inner: Arc<dyn Storage>, prefix: &str) -> Result<Self, StorageError> {
        check_path(prefix)?;
        Ok(SubdirStorage {
            inner,
            prefix: prefix.to_string(),
        })
    }

    fn full(&self, path: &str) -> Result<String, StorageError> {
        check_path(path)?;
        Ok(join(&self.prefix, path))
    }
}

impl Storage for SubdirStorage {
    fn describe(&self, path: &str) -> String {
        self.inner.describe(&join(&self.prefix, path))
    }
    fn create(&self, path: &str) -> Result<Box<dyn StorageWriter>, StorageError> {
        self.inner.create(&self.full(path)?)
    }
    fn open(&self, path: &str) -> Result<Arc<dyn Blob>, StorageError> {
        self.inner.open(&self.full(path)?)
    }
    fn open_ranged(&self, path: &str) -> Result<Arc<dyn Blob>, StorageError> {
        self.inner.open_ranged(&self.full(path)?)
    }
    fn download(&self, path: &str, dst: &Path) -> Result<u64, StorageError> {
        self.inner.download(&self.full(path)?, dst)
    }
    fn put_new(&self, path: &str, bytes: &[u8]) -> Result<u64, StorageError> {
        self.inner.put_new(&self.full(path)?, bytes)
    }
    fn put_atomic(&self, path: &str, bytes: &[u8]) -> Result<u64, StorageError> {
        self.inner.put_atomic(&self.full(path)?, bytes)
    }
    fn exists(&self, path: &str) -> Result<bool, StorageError> {
        self.inner.exists(&self.full(path)?)
    }
    fn list(&self, dir: &str) -> Result<Vec<DirEntry>, StorageError> {
        self.inner.list(&self.full(dir)?)
    }
    fn list_reporting(&self, dir: &str, invalid: &mut Vec<String>) -> Result<Vec<DirEntry>, StorageError> {
        self.inner.list_reporting(&self.full(dir)?, invalid)
    }
    fn delete_file(&self, path: &str) -> Result<(), StorageError> {
        self.inner.delete_file(&self.full(path)?)
    }
    fn delete_dir_all(&self, dir: &str) -> Result<(), StorageError> {
        self.inner.delete_dir_all(&self.full(dir)?)
    }
    fn create_dir_all(&self, dir: &str) -> Result<(), StorageError> {
        self.inner.create_dir_all(&self.full(dir)?)
    }
    fn absolute_path(&self, path: &str) -> Option<PathBuf> {
        self.inner.absolute_path(&self.full(path).ok()?)
    }
    fn url(&self, path: &str) -> Option<String> {
        self.inner.url(&self.full(path).ok()?)
    }
    fn prepare(&self, path: &str, size: u64) -> Result<Option<Box<dyn PreparedFile>>, StorageError> {
        self.inner.prepare(&self.full(path)?, size)
    }
}

/// What a [`HookedStorage`] does for the calls it intercepts; each method's default forwards
/// to the wrapped storage. Override only what a test injects or an engine measures: a failing
/// or slow `create`, a crash in the middle of `delete_dir_all`, a count of `open`s.
pub trait StorageHooks: Send + Sync + fmt::Debug {
    /// [`Storage::create`].
    fn create(&self, inner: &dyn Storage, path: &str) -> Result<Box<dyn StorageWriter>, StorageError> {
        inner.create(path)
    }
    /// [`Storage::open`].
    fn open(&self, inner: &dyn Storage, path: &str) -> Result<Arc<dyn Blob>, StorageError> {
        inner.open(path)
    }
    /// [`Storage::list`].
    fn list(&self, inner: &dyn Storage, dir: &str) -> Result<Vec<DirEntry>, StorageError> {
        inner.list(dir)
    }
    /// [`Storage::delete_file`].
    fn delete_file(&self, inner: &dyn Storage, path: &str) -> Result<(), StorageError> {
        inner.delete_file(path)
    }
    /// [`Storage::delete_dir_all`].
    fn delete_dir_all(&self, inner: &dyn Storage, dir: &str) -> Result<(), StorageError> {
        inner.delete_dir_all(dir)
    }
    /// [`Storage::prepare`]. Default: not offered (`Ok(None)`), so every file written through
    /// the hooked storage passes its `create` hook; a hook that forwards to `inner` sees the
    /// prepared files too (and may wrap them).
    fn prepare(
        &self,
        _inner: &dyn Storage,
        _path: &str,
        _size: u64,
    ) -> Result<Option<Box<dyn PreparedFile>>, StorageError> {
        Ok(None)
    }
}

/// A storage whose `create`, `open`, `list`, deletions and `prepare` go through
/// [`StorageHooks`] (fault injection, instrumentation); everything else goes straight to the
/// wrapped storage. By default it offers no prepared files ([`StorageHooks::prepare`]), so
/// every file written through it passes its `create` hook.
#[derive(Debug)]
pub struct HookedStorage<H> {
    inner: Arc<dyn Storage>,
    hooks: H,
}

impl<H: StorageHooks> HookedStorage<H> {
    /// `inner` seen through `hooks`.
    pub fn new(inner: Arc<dyn Storage>, hooks: H) -> Self {
        HookedStorage { inner, hooks }
    }

    /// The hooks (to arm a fault or read a counter).
    pub fn hooks(&self) -> &H {
        &self.hooks
    }

    /// The wrapped storage.
    pub fn inner(&self) -> &Arc<dyn Storage> {
        &self.inner
    }
}

impl<H: StorageHooks> Storage for HookedStorage<H> {
    fn describe(&self, path: &str) -> String {
        self.inner.describe(path)
    }
    fn create(&self, path: &str) -> Result<Box<dyn StorageWriter>, StorageError> {
        self.hooks.create(self.inner.as_ref(), path)
    }
    fn open(&self, path: &str) -> Result<Arc<dyn Blob>, StorageError> {
        self.hooks.open(self.inner.as_ref(), path)
    }
    fn exists(&self, path: &str) -> Result<bool, StorageError> {
        self.inner.exists(path)
    }
    fn list(&self, dir: &str) -> Result<Vec<DirEntry>, StorageError> {
        self.hooks.list(self.inner.as_ref(), dir)
    }
    fn delete_file(&self, path: &str) -> Result<(), StorageError> {
        self.hooks.delete_file(self.inner.as_ref(), path)
    }
    fn delete_dir_all(&self, dir: &str) -> Result<(), StorageError> {
        self.hooks.delete_dir_all(self.inner.as_ref(), dir)
    }
    fn prepare(&self, path: &str, size: u64) -> Result<Option<Box<dyn PreparedFile>>, StorageError> {
        self.hooks.prepare(self.inner.as_ref(), path, size)
    }
    fn create_dir_all(&self, dir: &str) -> Result<(), StorageError> {
        self.inner.create_dir_all(dir)
    }
    fn absolute_path(&self, path: &str) -> Option<PathBuf> {
        self.inner.absolute_path(path)
    }
    fn url(&self, path: &str) -> Option<String> {
        self.inner.url(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exercise(s: &dyn Storage) {
        s.put_atomic("a/b/file", b"hello").expect("put");
        assert_eq!(s.open("a/b/file").expect("open").bytes(), b"hello");
        assert!(s.exists("a/b/file").expect("exists"));
        assert!(s.exists("a").expect("exists"));
        let names: Vec<String> = s.list("a").expect("list").into_iter().map(|e| e.name).collect();
        assert_eq!(names, vec!["b".to_string()]);
        let w = s.create("a/b/pending").expect("create");
        drop(w); // never committed
        assert!(!s.exists("a/b/pending").expect("exists"));
        assert_eq!(s.list("a/b").expect("list").len(), 1, "no temp files left behind");
        s.delete_dir_all("a").expect("delete");
        assert!(matches!(s.open("a/b/file"), Err(StorageError::NotFound(_))));
        assert!(s.open("../x").is_err());
        assert!(s.open("/abs").is_err());
    }

    #[test]
    fn local_storage() {
        let dir = tempfile::tempdir().expect("tempdir");
        exercise(&LocalStorage::new(dir.path()));
    }

    #[cfg(unix)]
    #[test]
    fn prepared_files_are_zeros_under_their_name_then_written_in_place() {
        let dir = tempfile::tempdir().expect("tempdir");
        let local = LocalStorage::new(dir.path());
        local.create_dir_all("d").expect("dir");
        let mut f = local
            .prepare("d/a.skcl", 8192)
            .expect("prepare")
            .expect("local files can");
        assert_eq!(f.capacity(), 8192);
        assert_eq!(local.open("d/a.skcl").expect("open").bytes(), &[0u8; 8192][..]);
        assert!(f.write_at(8000, &[1; 200]).is_err(), "past the capacity");
        std::thread::sleep(std::time::Duration::from_millis(30));
        let old = fs::metadata(dir.path().join("d/a.skcl"))
            .and_then(|m| m.modified())
            .expect("mtime");
        assert!(f.age() >= std::time::Duration::from_millis(30));
        f.refresh().expect("refresh");
        assert!(f.age() < std::time::Duration::from_millis(30));
        let new = fs::metadata(dir.path().join("d/a.skcl"))
            .and_then(|m| m.modified())
            .expect("mtime");
        assert!(new > old, "refresh moves the mtime");
        f.write_at(0, b"hello").expect("write");
        f.commit().expect("commit");
        let got = local.open("d/a.skcl").expect("open");
        assert_eq!(&got.bytes()[..6], b"hello\0");
        assert_eq!(got.bytes().len(), 8192, "the size stays");
        // Dropped uncommitted: deleted. No temporary file is left either way.
        drop(local.prepare("d/b.skcl", 100).expect("prepare"));
        assert!(!local.exists("d/b.skcl").expect("exists"));
        let names: Vec<String> = local.list("d").expect("list").into_iter().map(|e| e.name).collect();
        assert_eq!(names, vec!["a.skcl"]);
        // Deleted before its commit (a garbage collector): the commit says so.
        let mut c = local.prepare("d/c.skcl", 100).expect("prepare").expect("c");
        local.delete_file("d/c.skcl").expect("delete");
        c.write_at(0, b"x").expect("write");
        assert!(matches!(c.commit(), Err(StorageError::NotFound(_))));
        // The directory must exist; other storages cannot prepare.
        assert!(local.prepare("missing/x", 10).is_err());
        assert!(MemoryStorage::new().prepare("x", 10).expect("memory").is_none());
        let hooked = HookedStorage::new(Arc::new(local.clone()), NoHooks);
        assert!(hooked.prepare("d/h", 10).expect("hooked").is_none());
        let sub = SubdirStorage::new(Arc::new(local.clone()), "d").expect("sub");
        assert!(sub
            .prepare("s", 10)
            .expect("subdir forwards")
            .is_some_and(|f| f.capacity() == 10));
    }

    #[derive(Debug)]
    struct NoHooks;
    impl StorageHooks for NoHooks {}

    #[test]
    fn memory_storage() {
        exercise(&MemoryStorage::new());
    }

    #[test]
    fn hooked_storage_forwards_what_it_does_not_intercept() {
        #[derive(Debug, Default)]
        struct CountOpens(AtomicU64);
        impl StorageHooks for CountOpens {
            fn open(&self, inner: &dyn Storage, path: &str) -> Result<Arc<dyn Blob>, StorageError> {
                self.0.fetch_add(1, Ordering::Relaxed);
                inner.open(path)
            }
        }
        let s = HookedStorage::new(Arc::new(MemoryStorage::new()), CountOpens::default());
        exercise(&s);
        assert_eq!(s.hooks().0.load(Ordering::Relaxed), 4, "exercise opens four times");
    }

    #[test]
    fn subdir_storage() {
        let mem: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
        let sub = SubdirStorage::new(mem.clone(), "x/y").expect("subdir");
        exercise(&sub);
        sub.put_atomic("f", b"1").expect("put");
        assert!(mem.exists("x/y/f").expect("exists"));
        assert_eq!(sub.describe("f"), "memory:/x/y/f");
    }

    #[test]
    fn vectored_writes_keep_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let local = LocalStorage::new(dir.path());
        let mem = MemoryStorage::new();
        let big = vec![7u8; (WRITE_BUFFER * 3) / 2];
        for s in [&local as &dyn Storage, &mem] {
            let mut w = s.create("v").expect("create");
            w.write_all(b"head").expect("write");
            let mut bufs = [io::IoSlice::new(b"a"), io::IoSlice::new(&big), io::IoSlice::new(b"bc")];
            let mut left = &mut bufs[..];
            while !left.is_empty() {
                let n = w.write_vectored(left).expect("writev");
                io::IoSlice::advance_slices(&mut left, n);
            }
            w.write_all(b"tail").expect("write");
            assert_eq!(w.commit().expect("commit"), (big.len() + 11) as u64);
            let mut want = b"heada".to_vec();
            want.extend_from_slice(&big);
            want.extend_from_slice(b"bctail");
            assert_eq!(s.open("v").expect("open").bytes(), &want[..]);
        }
    }

    /// Local files of every size around the write buffer's boundaries, written in pieces of
    /// every size (each piece below, at or above the buffer), read back as written.
    #[test]
    fn local_files_of_every_size_read_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let local = LocalStorage::new(dir.path());
        let sizes = [
            0,
            1,
            WRITE_BUFFER - 1,
            WRITE_BUFFER,
            WRITE_BUFFER + 1,
            3 * WRITE_BUFFER + 4097,
        ];
        for (i, &size) in sizes.iter().enumerate() {
            for piece in [1usize, 4095, WRITE_BUFFER, 2 * WRITE_BUFFER + 3] {
                if piece == 1 && size > 4096 {
                    continue;
                }
                let data: Vec<u8> = (0..size).map(|j| (j * 7 + i) as u8).collect();
                let name = format!("f{i}-{piece}");
                let mut w = local.create(&name).expect("create");
                for c in data.chunks(piece) {
                    w.write_all(c).expect("write");
                }
                assert_eq!(w.commit().expect("commit"), size as u64);
                assert_eq!(local.open(&name).expect("open").bytes(), &data[..], "{name}");
            }
        }
    }

    #[test]
    fn empty_file_opens() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = LocalStorage::new(dir.path());
        s.put_atomic("empty", b"").expect("put");
        s.put_new("new/once", b"first").expect("put_new");
        assert!(matches!(
            s.put_new("new/once", b"second"),
            Err(StorageError::AlreadyExists(_))
        ));
        assert_eq!(s.open("new/once").expect("open").bytes(), b"first");
        assert_eq!(s.list("new").expect("list").len(), 1, "no temporary file left");
        assert!(s.open("empty").expect("open").bytes().is_empty());
    }
}
