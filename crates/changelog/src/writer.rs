//! The log writer of one backend and the upload service shared by all writers of a job
//! (`docs/design/0006-changelog.md`, "Writer and sequence numbers", "Upload").
//!
//! A writer appends records to its *active change set*; [`ChangelogWriter::next_sqn`] closes
//! it (the next append starts a new one). Change sets are handed to the shared
//! [`ChangelogStorage`] either pre-emptively (the active set grew past a threshold) or by
//! [`ChangelogWriter::persist`]; its uploader thread batches the change sets of every writer
//! into one file per upload. Each change set is tracked by sequence number — buffered, in
//! flight, uploaded (file, offset, length) or failed (kept, and uploaded again by the next
//! persist) — so any number of checkpoints can be pending, and one failed upload fails one
//! persist, not every later one.

use crate::error::{ChangelogError, UploadFailure};
use crate::file::{mark_padded, ChangeSetBuffer, IndexEntry, LogCompression, LogFileWriter, LogId, SealedChangeSet};
use crate::record::Change;
use statekit_core::storage::{join, PreparedFile, Storage};
use statekit_core::StateDescriptor;
use statekit_format::{FileRef, FileScope, FormatError};

/// The directory of a job's log files when they live in its checkpoint job directory.
pub const DSTL_DIR: &str = "dstl";
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Settings of the upload service (Flink's `dstl.dfs.*` keys; see
/// [`crate::ChangelogConfig`]).
#[derive(Clone, Debug, PartialEq)]
pub struct UploadConfig {
    /// How long the uploader waits for more change sets after the first one is queued
    /// (`dstl.dfs.batch.persist-delay`, 10 ms).
    pub persist_delay: Duration,
    /// Queued bytes that start an upload at once (`dstl.dfs.batch.persist-size-threshold`,
    /// 10 MiB).
    pub persist_size_threshold: usize,
    /// Bytes queued or being uploaded beyond which appends wait (`dstl.dfs.upload.max-in-flight`,
    /// 100 MiB).
    pub max_in_flight: usize,
    /// An active change set this large is handed to the uploader without waiting for a
    /// checkpoint (`dstl.dfs.preemptive-persist-threshold`, 5 MiB).
    pub preemptive_persist_threshold: usize,
    /// Attempts per upload, the first included (`dstl.dfs.upload.max-attempts`, 3).
    pub max_attempts: u32,
    /// After this long an attempt is considered slow and another one starts beside it
    /// (`dstl.dfs.upload.timeout`, 1 s).
    pub timeout: Duration,
    /// Delay before retrying a failed attempt (`dstl.dfs.upload.next-attempt-delay`, 500 ms).
    pub retry_delay: Duration,
    /// Compression of change sets (`dstl.dfs.compression.enabled`).
    pub compression: LogCompression,
    /// statekit's own (no Flink key): on a storage that can prepare files
    /// ([`Storage::prepare`], the local filesystem), keep two zero-filled log files ready and
    /// write a checkpoint's upload into one in place, so making it durable is one `fdatasync`
    /// that waits for no file system journal commit (`docs/design/0006-changelog.md`,
    /// "Prepared files"). Such a file is padded with zeros after its trailer. Default on.
    pub prepared_files: bool,
}

impl Default for UploadConfig {
    fn default() -> Self {
        UploadConfig {
            persist_delay: Duration::from_millis(10),
            persist_size_threshold: 10 << 20,
            max_in_flight: 100 << 20,
            preemptive_persist_threshold: 5 << 20,
            max_attempts: 3,
            timeout: Duration::from_secs(1),
            retry_delay: Duration::from_millis(500),
            compression: LogCompression::None,
            prepared_files: true,
        }
    }
}

/// A change set in a log file: what a checkpoint's tail lists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogSegment {
    /// The file, relative to the changelog storage.
    pub path: String,
    /// The file's size.
    pub file_size: u64,
    /// Offset of the change set.
    pub offset: u64,
    /// Its length.
    pub length: u64,
    /// Its log.
    pub log: LogId,
    /// Its sequence number.
    pub sqn: u64,
    /// Its records.
    pub records: u32,
}

/// State of one change set of a writer.
#[derive(Debug)]
enum SetState {
    /// Closed, not yet handed to the uploader.
    Buffered(ChangeSetBuffer),
    /// Being uploaded.
    InFlight,
    /// Durable.
    Uploaded(LogSegment),
    /// The upload failed; kept to be uploaded again.
    Failed(ChangeSetBuffer, UploadFailure),
}

/// What a writer shares with the uploader thread.
#[derive(Debug, Default)]
struct WriterShared {
    sets: BTreeMap<u64, SetState>,
    /// Change sets below this were truncated.
    lowest: u64,
}

struct WriterCell {
    state: Mutex<WriterShared>,
    changed: Condvar,
}

impl std::fmt::Debug for WriterCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WriterCell")
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One change set queued for upload.
struct Task {
    writer: Arc<WriterCell>,
    log: LogId,
    sqn: u64,
    buffer: ChangeSetBuffer,
}

#[derive(Default)]
struct Queue {
    tasks: Vec<Task>,
    queued_bytes: usize,
    first_queued: Option<Instant>,
    in_flight_bytes: usize,
    flush: bool,
    closed: bool,
}

/// Per file: change sets not yet truncated, and whether a completed checkpoint references it
/// (then the checkpoint store owns it).
#[derive(Debug, Default)]
struct FileUse {
    live_sets: usize,
    confirmed: bool,
}

struct StorageInner {
    storage: Arc<dyn Storage>,
    dir: String,
    /// When the storage is a job directory: the prefix of shared references (`dstl`).
    job_prefix: Option<String>,
    config: UploadConfig,
    queue: Mutex<Queue>,
    /// Signals the uploader (work queued) and waiting appenders (capacity freed).
    wake: Condvar,
    files: Mutex<HashMap<String, FileUse>>,
    stats: Mutex<UploadStats>,
    spare: Mutex<Spare>,
}

/// The prepared files the next checkpoints' uploads write into
/// ([`UploadConfig::prepared_files`]).
#[derive(Debug, Default)]
struct Spare {
    /// Files ready, by name (in `dir`), oldest first.
    ready: std::collections::VecDeque<(String, Box<dyn PreparedFile>)>,
    /// Threads preparing one.
    preparing: usize,
    /// The storage cannot prepare files, or preparing failed: no more attempts.
    off: bool,
    /// The size of the last checkpoint's upload (sizes the next spares; 0 before the first).
    recent: u64,
}

/// How many spares are kept ready: checkpoints can follow each other faster than one is
/// prepared.
const SPARES: usize = 2;
/// How long after a spare is used the next one is prepared.
const SPARE_DELAY: Duration = Duration::from_millis(50);
/// A prepared file is never smaller than this.
const SPARE_MIN: u64 = 256 << 10;
/// Spares are refreshed (their mtime) this often, and one not refreshed for twice as long is
/// not used but replaced: `statekit gc` leaves files modified less than its `--min-age`
/// (10 minutes by default) ago alone, and an old spare could be taken for an orphan. (Were it
/// deleted anyway, its commit would notice and the upload would create a file instead.)
const SPARE_REFRESH: Duration = Duration::from_secs(60);
const SPARE_MAX_AGE: Duration = Duration::from_secs(120);

/// Counters of the upload service.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UploadStats {
    /// Files written.
    pub files: u64,
    /// Change sets written.
    pub change_sets: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Attempts that failed (retried or not).
    pub failed_attempts: u64,
    /// Uploads that failed after every attempt.
    pub failed_uploads: u64,
    /// Files deleted because nothing references them.
    pub deleted_files: u64,
    /// The most bytes ever queued or in flight at once (bounded by `max_in_flight` plus one
    /// change set).
    pub peak_pending_bytes: u64,
    /// Files written in place into a prepared file ([`UploadConfig::prepared_files`]).
    pub prepared_files_used: u64,
}

/// The upload service of one job process: one background thread that writes the change sets
/// of every [`ChangelogWriter`] into log files under `dir` of its storage, batching many
/// writers' change sets into one file per upload. Clones share it.
#[derive(Clone)]
pub struct ChangelogStorage {
    inner: Arc<StorageInner>,
    _thread: Arc<UploaderThread>,
}

impl std::fmt::Debug for ChangelogStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChangelogStorage")
            .field("dir", &self.inner.storage.describe(&self.inner.dir))
            .finish()
    }
}

/// Stops and joins the uploader thread when the last clone goes.
struct UploaderThread {
    inner: Arc<StorageInner>,
    handle: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Drop for UploaderThread {
    fn drop(&mut self) {
        {
            let mut q = lock(&self.inner.queue);
            q.closed = true;
        }
        self.inner.wake.notify_all();
        if let Some(h) = lock(&self.handle).take() {
            let _ = h.join();
        }
    }
}

impl ChangelogStorage {
    /// A service writing log files into `<job directory>/dstl/` of a checkpoint store (its
    /// [`job_storage`](https://docs.rs/statekit-checkpoint)): checkpoints reference them as
    /// shared files of the job.
    pub fn for_job(job_storage: Arc<dyn Storage>, config: UploadConfig) -> Result<Self, ChangelogError> {
        Self::build(job_storage, DSTL_DIR, Some(DSTL_DIR.to_string()), config)
    }

    /// A service writing log files into `dir` of `storage` (created when missing), elsewhere
    /// than a job directory (`dstl.dfs.base-path`): checkpoints reference them by absolute path
    /// on the local filesystem, by URL on an object store ([`FileRef::external`]).
    pub fn new(storage: Arc<dyn Storage>, dir: &str, config: UploadConfig) -> Result<Self, ChangelogError> {
        Self::build(storage, dir, None, config)
    }

    fn build(
        storage: Arc<dyn Storage>,
        dir: &str,
        job_prefix: Option<String>,
        config: UploadConfig,
    ) -> Result<Self, ChangelogError> {
        if config.persist_size_threshold > config.max_in_flight {
            return Err(ChangelogError::BatchAboveInFlight {
                threshold: config.persist_size_threshold,
                max_in_flight: config.max_in_flight,
            });
        }
        if config.max_attempts == 0 {
            return Err(ChangelogError::NoUploadAttempts);
        }
        storage.create_dir_all(dir)?;
        let config_prepared = config.prepared_files;
        let inner = Arc::new(StorageInner {
            storage,
            dir: dir.to_string(),
            job_prefix,
            config,
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
            files: Mutex::new(HashMap::new()),
            stats: Mutex::new(UploadStats::default()),
            spare: Mutex::new(Spare {
                off: !config_prepared,
                ..Spare::default()
            }),
        });
        prepare_spare(&inner);
        let worker = inner.clone();
        let handle = std::thread::Builder::new()
            .name("statekit-dstl-upload".into())
            .spawn(move || upload_loop(&worker))
            .map_err(ChangelogError::UploaderThread)?;
        Ok(ChangelogStorage {
            _thread: Arc::new(UploaderThread {
                inner: inner.clone(),
                handle: Mutex::new(Some(handle)),
            }),
            inner,
        })
    }

    /// The storage the files go to.
    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.inner.storage
    }

    /// The directory (relative to [`ChangelogStorage::storage`]) of the log files.
    pub fn dir(&self) -> &str {
        &self.inner.dir
    }

    /// How a checkpoint references the log file of `segment`: a shared file of the job, or an
    /// absolute path.
    pub fn file_ref(&self, segment: &LogSegment) -> Result<FileRef, ChangelogError> {
        match &self.inner.job_prefix {
            Some(prefix) => Ok(FileRef {
                scope: FileScope::Shared,
                path: join(prefix, &segment.path),
                size: segment.file_size,
            }),
            None => {
                let full = join(&self.inner.dir, &segment.path);
                FileRef::external(self.inner.storage.as_ref(), &full, segment.file_size).ok_or_else(|| {
                    ChangelogError::LogOutsideJob {
                        dir: self.inner.storage.describe(&full),
                    }
                })
            }
        }
    }

    /// The log file name a checkpoint reference points to, as the storage tracks it (the
    /// inverse of [`ChangelogStorage::file_ref`] for this storage's own files).
    pub fn own_path(&self, file: &FileRef) -> Option<String> {
        match (&self.inner.job_prefix, file.scope) {
            (Some(prefix), FileScope::Shared) => file
                .path
                .strip_prefix(prefix.as_str())
                .and_then(|p| p.strip_prefix('/'))
                .map(str::to_string),
            (None, FileScope::Absolute) => {
                let base = self.inner.storage.absolute_path(&self.inner.dir)?;
                std::path::Path::new(&file.path)
                    .strip_prefix(base)
                    .ok()
                    .map(|p| p.display().to_string())
            }
            (None, FileScope::Url) => {
                let base = self.inner.storage.url(&self.inner.dir)?;
                file.path
                    .strip_prefix(base.as_str())
                    .and_then(|p| p.strip_prefix('/'))
                    .map(str::to_string)
            }
            _ => None,
        }
    }

    /// The upload settings.
    pub fn config(&self) -> &UploadConfig {
        &self.inner.config
    }

    /// Counters so far.
    pub fn stats(&self) -> UploadStats {
        lock(&self.inner.stats).clone()
    }

    /// A writer for a new log.
    pub fn writer(&self) -> ChangelogWriter {
        ChangelogWriter {
            log: LogId::random(),
            storage: self.clone(),
            active: ChangeSetBuffer::new(),
            active_sqn: 0,
            cell: Arc::new(WriterCell {
                state: Mutex::new(WriterShared::default()),
                changed: Condvar::new(),
            }),
        }
    }

    /// Marks `paths` as referenced by a completed checkpoint: the checkpoint store owns
    /// them now, and truncation no longer deletes them.
    pub fn confirm_files<'a>(&self, paths: impl IntoIterator<Item = &'a str>) {
        let mut files = lock(&self.inner.files);
        for p in paths {
            files.entry(p.to_string()).or_default().confirmed = true;
        }
    }

    /// Queues a change set; waits while the in-flight bound is reached.
    fn enqueue(&self, task: Task) {
        let bytes = task.buffer.bytes().max(1);
        let mut q = lock(&self.inner.queue);
        // Back-pressure: wait for capacity, but always admit into an idle service (so one
        // change set larger than the bound still goes).
        while !q.closed
            && q.in_flight_bytes + q.queued_bytes > 0
            && q.in_flight_bytes + q.queued_bytes + bytes > self.inner.config.max_in_flight
        {
            q = self.inner.wake.wait(q).unwrap_or_else(|p| p.into_inner());
        }
        q.queued_bytes += bytes;
        q.first_queued.get_or_insert_with(Instant::now);
        q.tasks.push(task);
        let pending = (q.queued_bytes + q.in_flight_bytes) as u64;
        drop(q);
        {
            let mut st = lock(&self.inner.stats);
            st.peak_pending_bytes = st.peak_pending_bytes.max(pending);
        }
        self.inner.wake.notify_all();
    }

    /// Asks the uploader to write what is queued now, without waiting for the batching delay.
    fn flush(&self) {
        lock(&self.inner.queue).flush = true;
        self.inner.wake.notify_all();
    }

    /// One change set of a file was truncated: delete the file when none is left and no
    /// completed checkpoint references it.
    fn release(&self, path: &str) {
        release(&self.inner, path);
    }
}

/// See [`ChangelogStorage::release`] (also called by the uploader thread).
fn release(inner: &StorageInner, path: &str) {
    let delete = {
        let mut files = lock(&inner.files);
        match files.get_mut(path) {
            Some(u) => {
                u.live_sets = u.live_sets.saturating_sub(1);
                if u.live_sets == 0 {
                    let confirmed = u.confirmed;
                    files.remove(path);
                    !confirmed
                } else {
                    false
                }
            }
            None => false,
        }
    };
    if delete {
        let full = join(&inner.dir, path);
        match inner.storage.delete_file(&full) {
            Ok(()) => lock(&inner.stats).deleted_files += 1,
            Err(e) => {
                tracing::warn!(file = %inner.storage.describe(&full), error = %e, "could not delete a truncated log file")
            }
        }
    }
}

/// The uploader thread: batches queued change sets into files.
fn upload_loop(inner: &Arc<StorageInner>) {
    let mut refreshed = Instant::now();
    loop {
        if refreshed.elapsed() >= SPARE_REFRESH {
            refresh_spares(inner);
            refreshed = Instant::now();
        }
        let batch = 'take: {
            let mut q = lock(&inner.queue);
            loop {
                if q.tasks.is_empty() {
                    if q.closed {
                        return;
                    }
                    q.flush = false;
                    let (g, waited) = inner
                        .wake
                        .wait_timeout(q, SPARE_REFRESH)
                        .unwrap_or_else(|p| p.into_inner());
                    q = g;
                    if waited.timed_out() && q.tasks.is_empty() {
                        break 'take None;
                    }
                    continue;
                }
                let age = q.first_queued.map(|t| t.elapsed()).unwrap_or_default();
                if q.flush
                    || q.closed
                    || q.queued_bytes >= inner.config.persist_size_threshold
                    || age >= inner.config.persist_delay
                {
                    break;
                }
                let wait = inner.config.persist_delay - age;
                q = inner.wake.wait_timeout(q, wait).unwrap_or_else(|p| p.into_inner()).0;
            }
            let tasks = std::mem::take(&mut q.tasks);
            let bytes = std::mem::take(&mut q.queued_bytes);
            let urgent = q.flush;
            q.first_queued = None;
            q.flush = false;
            q.in_flight_bytes += bytes;
            Some((tasks, bytes, urgent))
        };
        // Idle for a while: time to refresh the spares.
        let Some((tasks, bytes, urgent)) = batch else { continue };
        upload_batch(inner, tasks, urgent);
        lock(&inner.queue).in_flight_bytes -= bytes;
        inner.wake.notify_all();
    }
}

/// Seals the change sets (grouping by key group) and writes them into one file — a
/// checkpoint's (`urgent`) into the prepared spare when one is ready and large enough, else
/// with retries and a hedged second attempt when one is slow; reports every result to its
/// writer.
fn upload_batch(inner: &Arc<StorageInner>, tasks: Vec<Task>, urgent: bool) {
    let sealed: Arc<Vec<SealedChangeSet>> = Arc::new(tasks.iter().map(|t| t.buffer.seal(t.log, t.sqn)).collect());
    let in_place = if urgent { write_prepared(inner, &sealed) } else { None };
    let result = match in_place {
        Some(done) => Ok(done),
        None => write_with_retries(inner, sealed),
    };
    match result {
        Ok((path, size, entries)) => {
            {
                let mut files = lock(&inner.files);
                files.entry(path.clone()).or_default().live_sets += entries.len();
            }
            {
                let mut st = lock(&inner.stats);
                st.files += 1;
                st.change_sets += entries.len() as u64;
                st.bytes += size;
            }
            for (task, e) in tasks.into_iter().zip(entries) {
                let seg = LogSegment {
                    path: path.clone(),
                    file_size: size,
                    offset: e.offset,
                    length: e.length,
                    log: e.log,
                    sqn: e.sqn,
                    records: e.records,
                };
                let stale = {
                    let mut w = lock(&task.writer.state);
                    if task.sqn < w.lowest {
                        true
                    } else {
                        w.sets.insert(task.sqn, SetState::Uploaded(seg));
                        false
                    }
                };
                task.writer.changed.notify_all();
                if stale {
                    // Truncated while in flight: nobody will reference it.
                    release(inner, &path);
                }
            }
        }
        Err(why) => {
            lock(&inner.stats).failed_uploads += 1;
            tracing::warn!(error = %why, change_sets = tasks.len(), "changelog upload failed");
            for task in tasks {
                {
                    let mut w = lock(&task.writer.state);
                    if task.sqn >= w.lowest {
                        w.sets.insert(task.sqn, SetState::Failed(task.buffer, why.clone()));
                    }
                }
                task.writer.changed.notify_all();
            }
        }
    }
}

/// Starts threads preparing spares until [`SPARES`] are ready or being prepared (none when
/// the storage cannot prepare files).
fn prepare_spare(inner: &Arc<StorageInner>) {
    loop {
        let size = {
            let mut sp = lock(&inner.spare);
            if sp.off || sp.preparing + sp.ready.len() >= SPARES {
                return;
            }
            sp.preparing += 1;
            // Room for the last checkpoint's upload twice over (before the first: the most
            // one can hold, as the active change sets stay below the pre-emptive threshold),
            // in 64 KiB steps.
            let cap = (inner.config.preemptive_persist_threshold as u64)
                .saturating_add(1 << 20)
                .clamp(SPARE_MIN, crate::file::MAX_PREPARED_BYTES);
            let want = if sp.recent == 0 {
                cap
            } else {
                sp.recent.saturating_mul(2)
            };
            want.clamp(SPARE_MIN, cap).div_ceil(64 << 10) * (64 << 10)
        };
        let worker = inner.clone();
        let spawned = std::thread::Builder::new()
            .name("statekit-dstl-prepare".into())
            .spawn(move || {
                // Not at once: the upload that used the last spare belongs to a checkpoint
                // still completing (its `_metadata` commit next), and this thread's syncs would
                // compete with it.
                std::thread::sleep(SPARE_DELAY);
                let name = new_file_name();
                let made = if lock(&worker.queue).closed {
                    Ok(None)
                } else {
                    worker.storage.prepare(&join(&worker.dir, &name), size)
                };
                let closed = lock(&worker.queue).closed;
                let mut sp = lock(&worker.spare);
                sp.preparing -= 1;
                match made {
                    Ok(Some(file)) if !closed => sp.ready.push_back((name, file)),
                    // Closed meanwhile: dropping the file deletes it.
                    Ok(Some(_)) => {}
                    Ok(None) => sp.off = !closed,
                    Err(e) => {
                        tracing::warn!(error = %e, "could not prepare a log file; checkpoints' uploads create theirs");
                        sp.off = true;
                    }
                }
            });
        if spawned.is_err() {
            let mut sp = lock(&inner.spare);
            sp.preparing -= 1;
            sp.off = true;
            return;
        }
    }
}

/// Refreshes every ready spare's modification time (a spare that cannot be refreshed is
/// dropped, which deletes it; new ones are prepared).
fn refresh_spares(inner: &Arc<StorageInner>) {
    let dropped: Vec<_> = {
        let mut sp = lock(&inner.spare);
        let ready = std::mem::take(&mut sp.ready);
        let (keep, dropped): (Vec<_>, Vec<_>) = ready
            .into_iter()
            .map(|(name, mut f)| {
                let ok = f.refresh().is_ok();
                (ok, (name, f))
            })
            .partition(|(ok, _)| *ok);
        sp.ready = keep.into_iter().map(|(_, x)| x).collect();
        dropped
    };
    if !dropped.is_empty() {
        drop(dropped);
        prepare_spare(inner);
    }
}

/// Writes a checkpoint's upload in place into a spare (`None`: none is ready, or large and
/// young enough, or the write failed — the caller creates a file instead). Spares too small or
/// too old are deleted; new ones are prepared.
fn write_prepared(inner: &Arc<StorageInner>, sets: &[SealedChangeSet]) -> Option<Written> {
    if lock(&inner.spare).ready.is_empty() {
        prepare_spare(inner);
        return None;
    }
    let mut w = LogFileWriter::in_memory(rand::random(), now_ms(), inner.config.compression);
    for cs in sets {
        w.append(cs).ok()?;
    }
    let (mut bytes, entries) = w.finish_bytes().ok()?;
    let size = bytes.len() as u64;
    let (taken, stale) = {
        let mut sp = lock(&inner.spare);
        sp.recent = size;
        let fit = sp
            .ready
            .iter()
            .position(|(_, f)| size <= f.capacity() && f.age() < SPARE_MAX_AGE);
        let taken = fit.and_then(|i| sp.ready.remove(i));
        // What no upload of this size fits, or is too old, is replaced.
        let (keep, stale): (Vec<_>, Vec<_>) = std::mem::take(&mut sp.ready)
            .into_iter()
            .partition(|(_, f)| size <= f.capacity() && f.age() < SPARE_MAX_AGE);
        sp.ready = keep.into();
        (taken, stale)
    };
    drop(stale);
    let Some((name, mut file)) = taken else {
        prepare_spare(inner);
        return None;
    };
    mark_padded(&mut bytes);
    let written = file.write_at(0, &bytes).and_then(|()| file.commit());
    prepare_spare(inner);
    match written {
        Ok(()) => {
            lock(&inner.stats).prepared_files_used += 1;
            Some((name, size, entries))
        }
        Err(e) => {
            tracing::debug!(file = %name, error = %e, "writing into a prepared log file failed; creating one");
            lock(&inner.stats).failed_attempts += 1;
            None
        }
    }
}

/// A random file name.
fn new_file_name() -> String {
    let v: u128 = rand::random();
    format!("{v:032x}.skcl")
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Writes one file with the change sets; returns (name, size, index entries).
fn write_file(
    storage: &dyn Storage,
    dir: &str,
    name: &str,
    sets: &[SealedChangeSet],
    compression: LogCompression,
) -> Result<(u64, Vec<IndexEntry>), UploadFailure> {
    let path = join(dir, name);
    let file = |e: FormatError| UploadFailure::File(Arc::new(e));
    let mut w = LogFileWriter::create(storage, &path, rand::random(), now_ms(), compression).map_err(file)?;
    for cs in sets {
        w.append(cs).map_err(|e| UploadFailure::Append {
            file: storage.describe(&path),
            source: Arc::new(e),
        })?;
    }
    w.finish().map_err(file)
}

type Written = (String, u64, Vec<IndexEntry>);

/// Up to `max_attempts` attempts, `retry_delay` apart after a failure; an attempt slower than
/// `timeout` gets another one started beside it (hedging). The first success wins; files of
/// the other attempts are deleted (those still running, by a background thread when they end).
fn write_with_retries(inner: &Arc<StorageInner>, sets: Arc<Vec<SealedChangeSet>>) -> Result<Written, UploadFailure> {
    let cfg = &inner.config;
    type Outcome = (String, Result<(u64, Vec<IndexEntry>), UploadFailure>);
    let (tx, rx) = std::sync::mpsc::channel::<Outcome>();
    let (mut started, mut running) = (0u32, 0u32);
    let mut last_error = UploadFailure::NoAttempt;
    let mut winner: Option<Written> = None;
    let start = |started: &mut u32, running: &mut u32| {
        let name = new_file_name();
        let (storage, dir, sets, tx) = (inner.storage.clone(), inner.dir.clone(), sets.clone(), tx.clone());
        let compression = cfg.compression;
        *started += 1;
        *running += 1;
        std::thread::spawn(move || {
            let r = write_file(storage.as_ref(), &dir, &name, &sets, compression);
            let _ = tx.send((name, r));
        });
    };
    while winner.is_none() {
        if running == 0 {
            if started >= cfg.max_attempts {
                break;
            }
            if started > 0 {
                std::thread::sleep(cfg.retry_delay);
            }
            start(&mut started, &mut running);
        }
        match rx.recv_timeout(cfg.timeout) {
            Ok((name, Ok((size, entries)))) => {
                running -= 1;
                winner = Some((name, size, entries));
            }
            Ok((name, Err(e))) => {
                running -= 1;
                lock(&inner.stats).failed_attempts += 1;
                tracing::debug!(file = %name, error = %e, "changelog upload attempt failed");
                last_error = e;
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if started < cfg.max_attempts {
                    tracing::debug!(
                        attempt = started + 1,
                        "changelog upload is slow: starting another attempt beside it"
                    );
                    start(&mut started, &mut running);
                } else {
                    last_error = UploadFailure::TimedOut {
                        timeout: cfg.timeout,
                        attempts: cfg.max_attempts,
                    };
                    break;
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    if running > 0 {
        // Attempts still running: whatever they write is not referenced by anyone.
        let (storage, dir) = (inner.storage.clone(), inner.dir.clone());
        std::thread::spawn(move || {
            while let Ok((name, r)) = rx.recv() {
                if r.is_ok() {
                    let _ = storage.delete_file(&join(&dir, &name));
                }
            }
        });
    }
    winner.ok_or(last_error)
}

/// The log of one backend instance. Not thread-safe; lives on the task thread.
#[derive(Debug)]
pub struct ChangelogWriter {
    log: LogId,
    storage: ChangelogStorage,
    active: ChangeSetBuffer,
    active_sqn: u64,
    cell: Arc<WriterCell>,
}

/// The result of [`ChangelogWriter::persist`]: wait for it on any thread.
#[derive(Debug)]
pub struct PendingPersist {
    cell: Arc<WriterCell>,
    from: u64,
    to: u64,
    storage: ChangelogStorage,
}

impl PendingPersist {
    /// The sequence numbers `[from, to)` it makes durable.
    pub fn range(&self) -> (u64, u64) {
        (self.from, self.to)
    }

    /// Waits until every change set of the range is uploaded; returns their segments in
    /// sequence-number order, or the error of the first that failed.
    pub fn wait(self) -> Result<Vec<LogSegment>, ChangelogError> {
        self.storage.flush();
        let mut w = lock(&self.cell.state);
        loop {
            if self.from < w.lowest {
                return Err(ChangelogError::TruncatedBeforePersist {
                    from: self.from,
                    lowest: w.lowest,
                });
            }
            let mut segs = Vec::new();
            let mut pending = false;
            for (sqn, st) in w.sets.range(self.from..self.to) {
                match st {
                    SetState::Uploaded(s) => segs.push(s.clone()),
                    SetState::Failed(_, why) => {
                        return Err(ChangelogError::Upload {
                            sqn: *sqn,
                            reason: why.clone(),
                        });
                    }
                    SetState::Buffered(_) | SetState::InFlight => pending = true,
                }
            }
            if !pending {
                return Ok(segs);
            }
            w = self.cell.changed.wait(w).unwrap_or_else(|p| p.into_inner());
        }
    }
}

impl ChangelogWriter {
    /// The log's id.
    pub fn log(&self) -> LogId {
        self.log
    }

    /// The service it uploads through.
    pub fn storage(&self) -> &ChangelogStorage {
        &self.storage
    }

    /// Appends a metadata record to the active change set.
    pub fn append_metadata(&mut self, state: u32, descriptor: &StateDescriptor) {
        self.active.push_metadata(state, descriptor);
    }

    /// Appends a data record of key group `kg` to the active change set; hands the set to
    /// the uploader once it is larger than the pre-emptive threshold (this may wait for
    /// upload capacity: back-pressure).
    pub fn append(&mut self, kg: u32, change: &Change<'_>) {
        self.active.push_change(kg, change);
        if self.active.bytes() >= self.storage.inner.config.preemptive_persist_threshold {
            self.next_sqn();
            self.upload_from(0);
        }
    }

    /// Records appended to the active change set.
    pub fn active_records(&self) -> u32 {
        self.active.records()
    }

    /// Closes the active change set (when it has records) and returns the sequence number
    /// the next append gets: every append before the call has a smaller one, every append
    /// after it this one or larger.
    pub fn next_sqn(&mut self) -> u64 {
        if !self.active.is_empty() {
            let buf = std::mem::take(&mut self.active);
            lock(&self.cell.state)
                .sets
                .insert(self.active_sqn, SetState::Buffered(buf));
            self.active_sqn += 1;
        }
        self.active_sqn
    }

    /// Queues every buffered or failed change set from `from` for upload.
    fn upload_from(&mut self, from: u64) {
        let tasks: Vec<Task> = {
            let mut w = lock(&self.cell.state);
            let from = from.max(w.lowest);
            let sqns: Vec<u64> = w
                .sets
                .range(from..)
                .filter(|(_, s)| matches!(s, SetState::Buffered(_) | SetState::Failed(..)))
                .map(|(k, _)| *k)
                .collect();
            sqns.into_iter()
                .filter_map(|sqn| match w.sets.insert(sqn, SetState::InFlight) {
                    Some(SetState::Buffered(b)) | Some(SetState::Failed(b, _)) => Some(Task {
                        writer: self.cell.clone(),
                        log: self.log,
                        sqn,
                        buffer: b,
                    }),
                    _ => None,
                })
                .collect()
        };
        for t in tasks {
            self.storage.enqueue(t);
        }
    }

    /// Makes `[from, next)` durable: closes the active change set and uploads every change
    /// set of the range not yet uploaded (change sets whose earlier upload failed are
    /// uploaded again). `from` must not be below the truncation point.
    pub fn persist(&mut self, from: u64) -> Result<PendingPersist, ChangelogError> {
        let to = self.next_sqn();
        let lowest = lock(&self.cell.state).lowest;
        if from < lowest {
            return Err(ChangelogError::PersistBelowTruncation { from, lowest });
        }
        if from > to {
            return Err(ChangelogError::PersistBeyondNext { from, next: to });
        }
        self.upload_from(from);
        Ok(PendingPersist {
            cell: self.cell.clone(),
            from,
            to,
            storage: self.storage.clone(),
        })
    }

    /// Drops every change set below `to` (exclusive): their files are deleted once none of
    /// their change sets is left and no completed checkpoint references them.
    pub fn truncate(&mut self, to: u64) {
        let released: Vec<String> = {
            let mut w = lock(&self.cell.state);
            if to <= w.lowest {
                return;
            }
            w.lowest = to;
            let keep = w.sets.split_off(&to);
            let dropped = std::mem::replace(&mut w.sets, keep);
            dropped
                .into_values()
                .filter_map(|s| match s {
                    SetState::Uploaded(seg) => Some(seg.path),
                    _ => None,
                })
                .collect()
        };
        self.cell.changed.notify_all();
        for p in released {
            self.storage.release(&p);
        }
    }

    /// The uploaded segments of `[from, to)` (those not truncated).
    pub fn segments(&self, from: u64, to: u64) -> Vec<LogSegment> {
        let w = lock(&self.cell.state);
        w.sets
            .range(from..to)
            .filter_map(|(_, s)| match s {
                SetState::Uploaded(seg) => Some(seg.clone()),
                _ => None,
            })
            .collect()
    }

    /// The lowest sequence number not truncated.
    pub fn lowest(&self) -> u64 {
        lock(&self.cell.state).lowest
    }

    /// Bytes and change sets not truncated (the tail a restore would replay), counting the
    /// active change set.
    pub fn tail_size(&self) -> (u64, usize) {
        let w = lock(&self.cell.state);
        let mut bytes = self.active.bytes() as u64;
        for s in w.sets.values() {
            bytes += match s {
                SetState::Buffered(b) | SetState::Failed(b, _) => b.bytes() as u64,
                SetState::Uploaded(seg) => seg.length,
                SetState::InFlight => 0,
            };
        }
        (bytes, w.sets.len() + usize::from(!self.active.is_empty()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::LogFileReader;
    use crate::record::Op;
    use statekit_core::storage::MemoryStorage;

    fn change(v: &[u8]) -> Change<'_> {
        Change {
            state: 0,
            time: None,
            key: b"k",
            namespace: b"",
            op: Op::Put(v),
        }
    }

    fn quick() -> UploadConfig {
        UploadConfig {
            persist_delay: Duration::from_millis(1),
            retry_delay: Duration::from_millis(1),
            ..UploadConfig::default()
        }
    }

    #[test]
    fn sequence_numbers_separate_appends_and_persist_returns_segments_in_order() {
        let mem: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
        let st = ChangelogStorage::new(mem.clone(), "dstl", quick()).expect("storage");
        let mut w = st.writer();
        assert_eq!(w.next_sqn(), 0, "no appends: no change set");
        w.append(1, &change(b"a"));
        w.append(2, &change(b"b"));
        assert_eq!(w.next_sqn(), 1);
        assert_eq!(w.next_sqn(), 1, "empty change sets are not created");
        w.append(1, &change(b"c"));
        let p = w.persist(0).expect("persist");
        assert_eq!(p.range(), (0, 2));
        let segs = p.wait().expect("durable");
        assert_eq!(segs.iter().map(|s| s.sqn).collect::<Vec<_>>(), vec![0, 1]);
        assert_eq!(segs[0].path, segs[1].path, "one upload, one file");
        let r = LogFileReader::open(mem.as_ref(), &join("dstl", &segs[0].path), Some(segs[0].file_size)).expect("open");
        assert_eq!(r.index().len(), 2);
        // Persisting again uploads nothing new.
        let again = w.persist(0).expect("persist").wait().expect("durable");
        assert_eq!(again, segs);
        assert!(w.persist(5).is_err(), "beyond next");
        w.truncate(1);
        assert!(w.persist(0).is_err(), "below the truncation point");
        assert_eq!(w.persist(1).expect("persist").wait().expect("ok").len(), 1);
    }

    #[test]
    fn many_writers_share_one_file_per_upload() {
        let mem: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
        let cfg = UploadConfig {
            persist_delay: Duration::from_millis(200),
            ..quick()
        };
        let st = ChangelogStorage::new(mem, "dstl", cfg).expect("storage");
        let mut writers: Vec<ChangelogWriter> = (0..8).map(|_| st.writer()).collect();
        let mut pending = Vec::new();
        for (i, w) in writers.iter_mut().enumerate() {
            w.append(i as u32, &change(b"x"));
            pending.push(w.persist(0).expect("persist"));
        }
        let paths: std::collections::BTreeSet<String> = pending
            .into_iter()
            .flat_map(|p| p.wait().expect("durable"))
            .map(|s| s.path)
            .collect();
        assert_eq!(paths.len(), 1, "8 writers, one file");
        assert_eq!(st.stats().files, 1);
    }

    #[test]
    fn truncation_deletes_unconfirmed_files_only() {
        let mem: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
        let st = ChangelogStorage::new(mem.clone(), "dstl", quick()).expect("storage");
        let mut w = st.writer();
        w.append(0, &change(b"1"));
        let a = w.persist(0).expect("p").wait().expect("ok");
        w.append(0, &change(b"2"));
        let b = w.persist(1).expect("p").wait().expect("ok");
        st.confirm_files([b[0].path.as_str()]);
        w.truncate(2);
        assert!(
            !mem.exists(&join("dstl", &a[0].path)).expect("exists"),
            "unconfirmed: deleted"
        );
        assert!(
            mem.exists(&join("dstl", &b[0].path)).expect("exists"),
            "confirmed: the store owns it"
        );
    }
}
