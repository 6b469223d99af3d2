//! [`RocksDbBackend`]: the keyed state backend over one RocksDB column family per state.

use crate::db::{CfHandles, Db, DbCfs, Inner, OwnedSnapshot};
use crate::error::{db_err, RocksDbError};
use crate::layout::{
    encode_value, prefix_successor, push_add_operand, push_element, push_list_operand, split_value, KeyLayout,
    ListElements,
};
use crate::native::{assemble, check_handle, CutFile, NativeCut, NativeSnapshotView, Reusable, Uploads, DB_DIR};
use crate::options::RocksDbOptions;
use crate::snapshot::RocksDbSnapshot;
use rocksdb::{ColumnFamilyDescriptor, ReadOptions, WriteBatch, WriteOptions};
use statekit_core::keygroup::check_max_parallelism;
use statekit_core::state::KeyedStateKind;
use statekit_core::stream::check_entry_shape;
use statekit_core::{
    BackendConfig, Clock, KeyGroupAssigner, KeyGroupRange, KeyGroupScheme, KeyedStateBackend, KeyedStateView,
    StateDescriptor, StateError, StateFunctions, StateHandle,
};
use statekit_format::{FileRef, NativeStateStats, NativeStats, ResolvedNativeHandle};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::ingest::{Ingest, BATCH_BYTES};
use crate::writeback::WriteBack;

/// One registered state.
struct Registered {
    desc: StateDescriptor,
    functions: StateFunctions,
}

/// TTL context of one operation (shared with the other backends).
pub(crate) use statekit_core::TtlContext as Ttl;

use statekit_core::state::accepts::{ADDABLE, LIST, MAP, MERGEABLE, SINGLE};

/// Flushes the memtables of the column families `cfs` and waits for it.
fn flush_all(db: &Db, cfs: &[Arc<rocksdb::BoundColumnFamily<'_>>]) -> Result<(), StateError> {
    let refs: Vec<&Arc<rocksdb::BoundColumnFamily<'_>>> = cfs.iter().collect();
    if refs.is_empty() {
        return Ok(());
    }
    db.flush_cfs_opt(&refs, &rocksdb::FlushOptions::default())
        .map_err(db_err("flush"))
}

/// Large write-backs of the cache through SST files ([`Store::sync_and_flush`]).
struct FileWriteBack {
    /// Dirty key and value bytes from which a cut's write-back goes into files.
    min_bytes: usize,
    /// Largest write batch of a write-back through the memtables (a quarter memtable).
    batch_bytes: usize,
    /// A file is rolled over at this size.
    file_bytes: u64,
    /// The files' options: the column families', compressed as level 0 is (ingested files
    /// overlapping what is stored land in level 0).
    options: rocksdb::Options,
    /// Write-backs into files so far (names their directories).
    done: Cell<u64>,
}

/// The open database, the column-family handles and the options every call uses.
pub(crate) struct Store {
    cfs: DbCfs,
    pub(crate) cf_options: rocksdb::Options,
    /// How large write-backs of the cache go into SST files ([`Store::sync_and_flush`]).
    file_write_back: FileWriteBack,
    read: ReadOptions,
    write: WriteOptions,
    /// CRC32 of the SST files ingested, taken as they were written.
    pub(crate) written_crcs: crate::ingest::WrittenCrcs,
    /// Point reads and writes in front of RocksDB (`crate::writeback`).
    cache: RefCell<WriteBack>,
}

impl Store {
    /// The database, after writing back what the cache holds: for reading it directly.
    fn inner(&self) -> Result<&Arc<Inner>, StateError> {
        self.sync()?;
        Ok(self.cfs.borrow_owner())
    }

    /// The database without writing the cache back: for properties and paths only.
    fn inner_unsynced(&self) -> &Arc<Inner> {
        self.cfs.borrow_owner()
    }

    /// Writes every dirty cached entry to RocksDB, each state's in key order, in write
    /// batches of about `FileWriteBack::batch_bytes` (so that no memtable grows far past its
    /// size). After it, RocksDB holds the backend's state; the cache keeps its (now clean)
    /// entries.
    pub(crate) fn sync(&self) -> Result<(), StateError> {
        let mut cache = self.cache.borrow_mut();
        if !cache.has_dirty() {
            return Ok(());
        }
        let chunk = self.file_write_back.batch_bytes.max(1);
        self.cfs.with_dependent(|inner, cfs| {
            let write = |batch: WriteBatch| {
                inner
                    .db
                    .write_opt(batch, &self.write)
                    .map_err(db_err("write back cached entries"))
            };
            let mut batch = WriteBatch::default();
            let mut failed = Ok(());
            cache.for_each_dirty(|s, k, v| {
                if failed.is_err() {
                    return;
                }
                if let Some(cf) = cfs.get(s) {
                    match v {
                        Some(v) => batch.put_cf(cf, k, v),
                        None => batch.delete_cf(cf, k),
                    }
                }
                if batch.size_in_bytes() >= chunk {
                    failed = write(std::mem::take(&mut batch));
                }
            });
            failed.and_then(|()| write(batch))
        })?;
        cache.mark_clean();
        Ok(())
    }

    /// Writes the cache back and flushes every memtable: all of the backend's state is then
    /// in table files. A write-back of `FileWriteBack::min_bytes` or more goes into SST
    /// files written while another thread flushes the memtables
    /// ([`sync_to_files`](Self::sync_to_files)); a smaller one into the memtables first.
    pub(crate) fn sync_and_flush(&self) -> Result<(), StateError> {
        let mut cache = self.cache.borrow_mut();
        if cache.dirty_bytes() >= self.file_write_back.min_bytes {
            return self.sync_to_files(&mut cache);
        }
        drop(cache);
        self.sync()?;
        self.flush_memtables()
    }

    /// Writes the dirty entries into sorted SST files (in a new directory of the working
    /// directory, compressed as level 0 is) and ingests them, moved, not copied, while
    /// another thread flushes the memtables. Inserting a write-back of a
    /// memtable's size into the memtables instead fills them, waits for their flushes, and
    /// leaves it all to be flushed again — at a checkpoint's cut, in its synchronous part:
    /// files are written in one sequential pass past the memtables. Ingested files sit above
    /// everything in the database, as the newest writes do (RocksDB flushes memtables that
    /// hold keys in their range first). On error the entries stay dirty and no file is left
    /// behind.
    fn sync_to_files(&self, cache: &mut WriteBack) -> Result<(), StateError> {
        let n = self.file_write_back.done.get() + 1;
        self.file_write_back.done.set(n);
        let dir = self.inner_unsynced().dir.path().join(format!("write-back-{n}"));
        let opts = &self.file_write_back;
        let (flushed, files) = self.cfs.with_dependent(|inner, cfs| {
            std::thread::scope(|scope| {
                let flusher = scope.spawn(|| flush_all(&inner.db, cfs));
                let files = crate::ingest::write_sorted(&opts.options, dir.clone(), opts.file_bytes, |f| {
                    cache.for_each_dirty(|s, k, v| f(s, k, v))
                });
                let flushed = flusher.join().unwrap_or_else(|_| {
                    Err(RocksDbError::ThreadPanicked {
                        thread: "memtable flush",
                    }
                    .into())
                });
                (flushed, files)
            })
        });
        let ingested = files.and_then(|files| {
            flushed?;
            crate::ingest::ingest_files_unsynced(self, files)
        });
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            tracing::warn!(dir = %dir.display(), error = %e, "could not remove a write-back directory");
        }
        ingested?;
        cache.mark_clean();
        Ok(())
    }

    /// Flushes every memtable (not the cache) and waits for it.
    fn flush_memtables(&self) -> Result<(), StateError> {
        self.cfs.with_dependent(|inner, cfs| flush_all(&inner.db, cfs))
    }

    /// [`sync`](Self::sync), then forgets every cached entry: before anything writes to
    /// RocksDB other than through the cache.
    pub(crate) fn sync_and_forget(&self) -> Result<(), StateError> {
        self.sync()?;
        self.cache.borrow_mut().clear();
        Ok(())
    }

    /// Reads `key` of state `s` and passes the value to `f`; `None` when absent.
    #[inline]
    fn get<R>(&self, s: usize, key: &[u8], f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>, StateError> {
        {
            let cache = self.cache.borrow();
            if let Some(slot) = cache.lookup(s, key) {
                return Ok(slot.value.as_deref().map(f));
            }
        }
        self.cfs.with_dependent(|inner, cfs| {
            let v = inner
                .db
                .get_pinned_cf_opt(&cfs[s], key, &self.read)
                .map_err(db_err("get"))?;
            let mut cache = self.cache.borrow_mut();
            if cache.admits(key, v.as_deref()) {
                if cache.has_room(key, v.as_deref()) {
                    cache.set(s, key, v.as_deref(), false);
                } else if cache.missed_while_full() {
                    // The cache no longer holds the working set: start it afresh.
                    drop(cache);
                    self.sync_and_forget()?;
                    self.cache.borrow_mut().set(s, key, v.as_deref(), false);
                }
            }
            Ok(v.map(|v| f(v.as_ref())))
        })
    }

    /// Writes the cache back and empties it when it is over its budget; writes the dirty
    /// entries back (keeping them cached) when they hold more than RocksDB's memtables would.
    #[inline]
    fn evict_if_full(&self) -> Result<(), StateError> {
        let (full, dirty) = {
            let cache = self.cache.borrow();
            (cache.over_budget(), cache.dirty_over_limit())
        };
        if full {
            self.sync_and_forget()?;
        } else if dirty {
            self.sync()?;
        }
        Ok(())
    }

    #[inline]
    fn put(&self, s: usize, key: &[u8], value: &[u8]) -> Result<(), StateError> {
        {
            let mut cache = self.cache.borrow_mut();
            let cached = cache.lookup(s, key).is_some();
            if cache.admits(key, Some(value)) && (cached || cache.has_room(key, Some(value))) {
                cache.set(s, key, Some(value), true);
                drop(cache);
                return self.evict_if_full();
            }
            if cached {
                // Too large to cache now: the cached entry is stale.
                let _ = cache.take(s, key);
            } else if cache.admits(key, Some(value)) && cache.written_while_full() {
                drop(cache);
                self.sync_and_forget()?;
                self.cache.borrow_mut().set(s, key, Some(value), true);
                return Ok(());
            }
        }
        self.db_put(s, key, value)
    }

    /// Puts `key` of state `s` into RocksDB itself, past the cache.
    fn db_put(&self, s: usize, key: &[u8], value: &[u8]) -> Result<(), StateError> {
        self.cfs.with_dependent(|inner, cfs| {
            inner
                .db
                .put_cf_opt(&cfs[s], key, value, &self.write)
                .map_err(db_err("put"))
        })
    }

    /// Deletes `key` of state `s` from RocksDB itself, past the cache.
    fn db_delete(&self, s: usize, key: &[u8]) -> Result<(), StateError> {
        self.cfs.with_dependent(|inner, cfs| {
            inner
                .db
                .delete_cf_opt(&cfs[s], key, &self.write)
                .map_err(db_err("delete"))
        })
    }

    /// Merges `operand` into `key` of state `s` in RocksDB (after writing back and
    /// forgetting the cached entry of that key).
    #[inline]
    fn merge(&self, s: usize, key: &[u8], operand: &[u8]) -> Result<(), StateError> {
        self.write_back_one(s, key)?;
        self.cfs.with_dependent(|inner, cfs| {
            inner
                .db
                .merge_cf_opt(&cfs[s], key, operand, &self.write)
                .map_err(db_err("merge"))
        })
    }

    /// Writes the cached entry of `key` (if dirty) to RocksDB and forgets it.
    fn write_back_one(&self, s: usize, key: &[u8]) -> Result<(), StateError> {
        let slot = self.cache.borrow_mut().take(s, key);
        match slot.filter(|slot| slot.dirty).map(|slot| slot.value) {
            None => Ok(()),
            Some(Some(v)) => self.db_put(s, key, &v),
            Some(None) => self.db_delete(s, key),
        }
    }

    #[inline]
    fn delete(&self, s: usize, key: &[u8]) -> Result<(), StateError> {
        {
            let mut cache = self.cache.borrow_mut();
            if cache.lookup(s, key).is_some() {
                cache.set(s, key, None, true);
                drop(cache);
                return self.evict_if_full();
            }
        }
        self.db_delete(s, key)
    }

    /// Adds writes to `batch` for state `s`.
    pub(crate) fn batch<R>(&self, s: usize, f: impl FnOnce(&dyn BatchCf) -> R) -> R {
        self.cfs.with_dependent(|_, cfs| f(&cfs[s]))
    }

    /// Writes `batch` (made with [`batch`](Self::batch)) after writing the cache back, and
    /// empties the cache (the batch may change what it holds).
    pub(crate) fn write(&self, batch: WriteBatch) -> Result<(), StateError> {
        if batch.is_empty() {
            return Ok(());
        }
        self.sync_and_forget()?;
        self.inner_unsynced()
            .db
            .write_opt(batch, &self.write)
            .map_err(db_err("write batch"))
    }

    /// Ingests the SST files `paths` (non-overlapping, in key order) into state `s`, without
    /// writing the cache back first: a caller whose files may change what the cache holds
    /// calls [`sync_and_forget`](Self::sync_and_forget) before.
    pub(crate) fn ingest(
        &self,
        s: usize,
        opts: &rocksdb::IngestExternalFileOptions,
        paths: Vec<std::path::PathBuf>,
    ) -> Result<(), StateError> {
        self.cfs.with_dependent(|inner, cfs| {
            let cf = cfs
                .get(s)
                .ok_or_else(|| StateError::UnknownState(format!("state {s} has no column family")))?;
            inner
                .db
                .ingest_external_file_cf_opts(cf, opts, paths)
                .map_err(db_err("ingest SST files"))
        })
    }

    /// Whether state `s` stores any key in `[low, high)`.
    pub(crate) fn any_in(&self, s: usize, low: &[u8], high: &[u8]) -> Result<bool, StateError> {
        self.sync()?;
        self.cfs.with_dependent(|inner, cfs| {
            let mut ro = ReadOptions::default();
            ro.set_iterate_upper_bound(high.to_vec());
            let mut it = inner.db.raw_iterator_cf_opt(&cfs[s], ro);
            it.seek(low);
            let found = it.valid();
            it.status().map_err(db_err("scan"))?;
            Ok(found)
        })
    }

    /// Calls `f(stored key, stored value)` for every key of state `s` starting with
    /// `prefix` (every key of the column family when `prefix` is empty), in byte order.
    fn scan(
        &self,
        s: usize,
        prefix: &[u8],
        mut f: impl FnMut(&[u8], &[u8]) -> Result<(), StateError>,
    ) -> Result<(), StateError> {
        self.sync()?;
        self.cfs.with_dependent(|inner, cfs| {
            let mut ro = ReadOptions::default();
            if let Some(upper) = prefix_successor(prefix) {
                ro.set_iterate_upper_bound(upper);
            }
            let mut it = inner.db.raw_iterator_cf_opt(&cfs[s], ro);
            it.seek(prefix);
            while let Some((k, v)) = it.item() {
                f(k, v)?;
                it.next();
            }
            it.status().map_err(db_err("scan"))
        })
    }

    /// Creates (or opens, for `default`) the column family of a new state and caches its
    /// handle at the next index.
    fn add_cf(&mut self, name: &str) -> Result<(), StateError> {
        let opts = &self.cf_options;
        self.cfs.with_dependent_mut(|inner, cfs: &mut CfHandles<'_>| {
            if inner.db.cf_handle(name).is_none() {
                inner
                    .db
                    .create_cf(name, opts)
                    .map_err(db_err(format!("create column family {name:?}")))?;
            }
            let cf = inner.db.cf_handle(name).ok_or_else(|| {
                RocksDbError::from(crate::error::Corruption::ColumnFamilyVanished { name: name.to_string() })
            })?;
            cfs.push(cf);
            Ok(())
        })
    }
}

/// Writing to one column family inside a [`WriteBatch`].
pub(crate) trait BatchCf {
    fn put(&self, b: &mut WriteBatch, key: &[u8], value: &[u8]);
    fn delete(&self, b: &mut WriteBatch, key: &[u8]);
    fn merge(&self, b: &mut WriteBatch, key: &[u8], operand: &[u8]);
}

impl BatchCf for Arc<rocksdb::BoundColumnFamily<'_>> {
    fn put(&self, b: &mut WriteBatch, key: &[u8], value: &[u8]) {
        b.put_cf(self, key, value);
    }
    fn delete(&self, b: &mut WriteBatch, key: &[u8]) {
        b.delete_cf(self, key);
    }
    fn merge(&self, b: &mut WriteBatch, key: &[u8], operand: &[u8]) {
        b.merge_cf(self, key, operand);
    }
}

#[inline]
fn live_store(store: &Option<Store>) -> Result<&Store, StateError> {
    store.as_ref().ok_or_else(|| RocksDbError::Disposed.into())
}

/// The RocksDB keyed state backend: one column family per state, keys in key-group order
/// (`docs/rocksdb-layout.md`), snapshots from RocksDB snapshots. Semantics (TTL, merging,
/// restore, errors) are those of the heap backend, `statekit_hashmap::HashMapBackend`.
///
/// ```
/// use statekit_core::{BackendConfig, KeyedStateBackend, StateDescriptor, StateFunctions, TypeSchema};
/// use statekit_rocksdb::{RocksDbBackend, RocksDbOptions};
///
/// let mut backend = RocksDbBackend::new(BackendConfig::for_subtask(128, 1, 0)?, RocksDbOptions::default())?;
/// let count = backend.register(
///     StateDescriptor::value("count", TypeSchema::Utf8, TypeSchema::I64),
///     StateFunctions::None,
/// )?;
/// backend.put(count, b"alice", b"", &7i64.to_be_bytes())?;
/// let mut out = Vec::new();
/// assert!(backend.get(count, b"alice", b"", &mut out)?);
/// assert_eq!(out, 7i64.to_be_bytes());
///
/// // A frozen view; the backend may keep changing while another thread reads it.
/// let view = backend.snapshot(1)?;
/// backend.put(count, b"alice", b"", &8i64.to_be_bytes())?;
/// let copy = statekit_core::MemoryView::collect(view.as_ref(), view.key_group_range())?;
/// assert_eq!(copy.entries()[0].value, 7i64.to_be_bytes());
/// # Ok::<(), statekit_core::StateError>(())
/// ```
pub struct RocksDbBackend {
    max_parallelism: u32,
    /// The key-group rule ([`BackendConfig::key_group_scheme`]).
    scheme: KeyGroupScheme,
    /// The rule fixed to the states' key type (under Flink's rule, when the first state
    /// registers; statekit's rule needs no key type).
    groups: KeyGroupAssigner,
    range: KeyGroupRange,
    clock: Arc<dyn Clock>,
    layout: KeyLayout,
    options: RocksDbOptions,
    states: Vec<Registered>,
    names: HashMap<String, StateHandle>,
    /// `None` once disposed.
    store: Option<Store>,
    /// Scratch buffer for stored keys.
    key: Vec<u8>,
    /// Scratch buffer for stored values.
    val: Vec<u8>,
    /// Identifies this backend instance in native handles (32 hex characters).
    backend_id: String,
    /// Files of native checkpoints, pending and confirmed (for incremental reuse).
    uploads: Arc<Mutex<Uploads>>,
    /// Native cuts taken (names their directories).
    cuts: u64,
    /// Bulk loads done (names their scratch directories).
    ingests: u64,
    /// SST files ingested by restores.
    pub(crate) ingested_files: u64,
    /// Entries written by restores.
    pub(crate) restored_entries: u64,
}

/// A fresh working directory `statekit-rocksdb-XXXXXX` under the options' local directory
/// (default: the system temporary directory); the database lives in its `db/`.
pub(crate) fn new_working_dir(options: &RocksDbOptions) -> Result<tempfile::TempDir, StateError> {
    let base = options.local_dir.clone().unwrap_or_else(std::env::temp_dir);
    std::fs::create_dir_all(&base).map_err(|e| StateError::io(format!("create {}", base.display()), e))?;
    tempfile::Builder::new()
        .prefix("statekit-rocksdb-")
        .tempdir_in(&base)
        .map_err(|e| StateError::io(format!("create a working directory in {}", base.display()), e))
}

/// Opens the database in `dir/db`: a new one, or (`existing`) the one already there with
/// all its column families.
fn open_store(options: &RocksDbOptions, dir: tempfile::TempDir, existing: bool) -> Result<Store, StateError> {
    let cache = rocksdb::Cache::new_lru_cache(options.block_cache_bytes);
    let cf_options = options.to_rocksdb(&cache);
    let path = dir.path().join(DB_DIR);
    let names = if existing {
        Db::list_cf(&cf_options, &path).map_err(db_err(format!("list column families of {}", path.display())))?
    } else {
        vec![rocksdb::DEFAULT_COLUMN_FAMILY_NAME.to_string()]
    };
    let db = Db::open_cf_descriptors(
        &cf_options,
        &path,
        names.iter().map(|n| ColumnFamilyDescriptor::new(n, cf_options.clone())),
    )
    .map_err(db_err(format!("open {}", path.display())))?;
    let mut write = WriteOptions::default();
    // The working directory is scratch space; checkpoints make state durable.
    write.disable_wal(true);
    let inner = Arc::new(Inner { db, dir });
    let mut file_options = cf_options.clone();
    let l0 = options.l0_compression.to_rocksdb();
    file_options.set_compression_type(l0);
    file_options.set_compression_per_level(&[]);
    file_options.set_bottommost_compression_type(l0);
    Ok(Store {
        cfs: DbCfs::new(inner, |_| Vec::new()),
        cf_options,
        file_write_back: FileWriteBack {
            // From 1/64 of a memtable (1 MiB by default) a cut writes the cache back into files:
            // measured, a 1 % churn's 10 MB took 15–20 ms that way in most cuts, against
            // 19–66 ms through the memtable and its flush (design 0016). Below, the fixed costs
            // of a file (create, sync, ingestion's `MANIFEST` write) outweigh the inserts.
            min_bytes: options.write_buffer_bytes / 64,
            batch_bytes: options.write_buffer_bytes / 4,
            file_bytes: options.target_file_bytes,
            options: file_options,
            done: Cell::new(0),
        },
        read: ReadOptions::default(),
        write,
        written_crcs: Default::default(),
        cache: RefCell::new(WriteBack::new(
            options.write_back_cache_bytes,
            // No more unwritten data than the memtables hold: the synchronous part of a
            // checkpoint then writes back and flushes at most that much.
            options
                .write_buffer_bytes
                .saturating_mul(usize::try_from(options.max_write_buffers.max(1)).unwrap_or(1)),
        )),
    })
}

/// A random backend instance id: 32 lowercase hex characters.
pub(crate) fn new_backend_id() -> String {
    let v: u128 = rand::random();
    format!("{v:032x}")
}

impl fmt::Debug for RocksDbBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RocksDbBackend")
            .field("max_parallelism", &self.max_parallelism)
            .field("key_group_range", &self.range)
            .field("path", &self.path())
            .field("profile", &self.options.profile)
            .field("states", &self.states.iter().map(|s| &s.desc.name).collect::<Vec<_>>())
            .finish()
    }
}

impl RocksDbBackend {
    /// A backend for `config`, with its database in a fresh working directory (under
    /// `options.local_dir`, else the system temporary directory), removed again when the
    /// backend is disposed of or dropped and no snapshot view uses it any more.
    pub fn new(config: BackendConfig, options: RocksDbOptions) -> Result<Self, StateError> {
        check_max_parallelism(config.max_parallelism)?;
        let range = config.key_group_range;
        if !range.is_empty() && range.end_exclusive() > config.max_parallelism {
            return Err(StateError::InvalidParallelism(
                statekit_core::error::ParallelismError::RangeExceedsMax {
                    range,
                    max_parallelism: config.max_parallelism,
                },
            ));
        }
        let dir = new_working_dir(&options)?;
        let store = open_store(&options, dir, false)?;
        tracing::debug!(
            max_parallelism = config.max_parallelism,
            %range,
            dir = %store.inner_unsynced().db.path().display(),
            profile = %options.profile,
            "new RocksDB keyed state backend"
        );
        Ok(RocksDbBackend {
            max_parallelism: config.max_parallelism,
            scheme: config.key_group_scheme,
            groups: KeyGroupAssigner::statekit(config.max_parallelism),
            range,
            clock: config.clock,
            layout: KeyLayout::for_max_parallelism(config.max_parallelism),
            options,
            states: Vec::new(),
            names: HashMap::new(),
            store: Some(store),
            key: Vec::with_capacity(64),
            val: Vec::with_capacity(64),
            backend_id: new_backend_id(),
            uploads: Arc::new(Mutex::new(Uploads::default())),
            cuts: 0,
            ingests: 0,
            ingested_files: 0,
            restored_entries: 0,
        })
    }

    /// Under Flink's key-group rule, fixes the rule to the first state's key type and checks
    /// every later state has the same (Flink keys all of an operator's states alike).
    fn fix_key_type(&mut self, descriptor: &StateDescriptor) -> Result<(), StateError> {
        if self.scheme == KeyGroupScheme::Statekit {
            return Ok(());
        }
        let assigner = self.scheme.assigner(&descriptor.key_schema, self.max_parallelism);
        if self.states.is_empty() {
            self.groups = assigner;
        } else if self.groups != assigner {
            return Err(StateError::Incompatible(statekit_core::Incompatibility::KeyType {
                state: descriptor.name.clone(),
                key_schema: descriptor.key_schema.clone(),
            }));
        }
        Ok(())
    }

    /// The directory of the working database (`None` once disposed).
    pub fn path(&self) -> Option<&Path> {
        self.store.as_ref().map(|s| s.inner_unsynced().db.path())
    }

    /// Identifies this backend instance in native handles.
    pub fn backend_id(&self) -> &str {
        &self.backend_id
    }

    /// The options the backend was created with.
    pub fn options(&self) -> &RocksDbOptions {
        &self.options
    }

    /// The key layout (key-group prefix width) of this backend.
    pub fn layout(&self) -> KeyLayout {
        self.layout
    }

    /// The clock used for TTL.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Writes the write-back cache back and flushes every memtable to SST files: the
    /// backend's whole state is then in table files. A write-back of 1/64 of a memtable or
    /// more is written into sorted SST files, beside the memtables' flush, and ingested.
    pub fn flush(&self) -> Result<(), StateError> {
        live_store(&self.store)?.sync_and_flush()
    }

    /// Level-0 table files over all column families (each flush adds one per state).
    pub fn level0_files(&self) -> Result<u64, StateError> {
        self.property_sum(&["rocksdb.num-files-at-level0"])
    }

    /// The sum of RocksDB's integer properties `names` over all column families.
    fn property_sum(&self, names: &[&str]) -> Result<u64, StateError> {
        let store = live_store(&self.store)?;
        store.cfs.with_dependent(|inner, cfs| {
            let mut n = 0;
            for cf in cfs.iter() {
                for name in names {
                    n += inner
                        .db
                        .property_int_value_cf(cf, *name)
                        .map_err(db_err("read a property"))?
                        .unwrap_or(0);
                }
            }
            Ok(n)
        })
    }

    /// True while RocksDB has flushes or compactions running or pending (any column family).
    pub fn background_work_pending(&self) -> Result<bool, StateError> {
        let store = live_store(&self.store)?;
        let db = &store.inner_unsynced().db;
        for p in [
            rocksdb::properties::NUM_RUNNING_COMPACTIONS,
            rocksdb::properties::NUM_RUNNING_FLUSHES,
        ] {
            if db
                .property_int_value(p)
                .map_err(db_err("read a property"))?
                .unwrap_or(0)
                > 0
            {
                return Ok(true);
            }
        }
        store.cfs.with_dependent(|inner, cfs| {
            for cf in cfs.iter() {
                for p in [
                    rocksdb::properties::COMPACTION_PENDING,
                    rocksdb::properties::MEM_TABLE_FLUSH_PENDING,
                ] {
                    if inner
                        .db
                        .property_int_value_cf(cf, p)
                        .map_err(db_err("read a property"))?
                        .unwrap_or(0)
                        > 0
                    {
                        return Ok(true);
                    }
                }
            }
            Ok(false)
        })
    }

    /// Compacts every column family completely (merges list operands into their lists, drops
    /// deleted and overwritten data). Native checkpoints taken afterwards share few files
    /// with earlier ones.
    pub fn compact(&self) -> Result<(), StateError> {
        let store = live_store(&self.store)?;
        store.sync()?;
        store.cfs.with_dependent(|inner, cfs| {
            for cf in cfs.iter() {
                inner.db.compact_range_cf(cf, None::<&[u8]>, None::<&[u8]>);
            }
        });
        Ok(())
    }

    /// True when (key, namespace) holds a visible value, list element or map entry. Does not
    /// refresh TTL timestamps.
    pub fn contains(&self, state: StateHandle, key: &[u8], namespace: &[u8]) -> Result<bool, StateError> {
        let (i, kg, ttl) = self.prepare(state, key)?;
        let store = live_store(&self.store)?;
        let mut k = Vec::new();
        self.layout.encode_key_ns(&mut k, kg, key, namespace);
        let stamped = ttl.stamped();
        match self.states[i].desc.kind {
            KeyedStateKind::Map => {
                let mut any = false;
                store.scan(i, &k, |_, v| {
                    any |= ttl.live(split_value(v, stamped)?.0);
                    Ok(())
                })?;
                Ok(any)
            }
            KeyedStateKind::List => store
                .get(i, &k, |v| -> Result<bool, StateError> {
                    for e in ListElements::new(v, stamped) {
                        if ttl.live(e?.0) {
                            return Ok(true);
                        }
                    }
                    Ok(false)
                })?
                .transpose()
                .map(|x| x.unwrap_or(false)),
            _ => store
                .get(i, &k, |v| split_value(v, stamped).map(|(ts, _)| ttl.live(ts)))?
                .transpose()
                .map(|x| x.unwrap_or(false)),
        }
    }

    /// Drops every TTL-expired value, list element and map entry now (a full scan of every
    /// state with TTL). Returns the number of stored RocksDB keys removed entirely.
    pub fn purge_expired(&mut self) -> Result<usize, StateError> {
        let now = self.clock.now_ms();
        let store = live_store(&self.store)?;
        let mut removed = 0;
        for (i, st) in self.states.iter().enumerate() {
            let Some(cfg) = st.desc.ttl else { continue };
            let ttl = Ttl { cfg: Some(cfg), now };
            let kind = st.desc.kind;
            let mut batch = WriteBatch::default();
            let mut rebuilt = Vec::new();
            store.batch(i, |cf| -> Result<(), StateError> {
                store.scan(i, &[], |k, v| {
                    if kind == KeyedStateKind::List {
                        rebuilt.clear();
                        let mut dropped = false;
                        for e in ListElements::new(v, true) {
                            let (ts, e) = e?;
                            if ttl.live(ts) {
                                push_element(&mut rebuilt, Some(ts), e);
                            } else {
                                dropped = true;
                            }
                        }
                        if rebuilt.is_empty() {
                            cf.delete(&mut batch, k);
                            removed += 1;
                        } else if dropped {
                            cf.put(&mut batch, k, &rebuilt);
                        }
                    } else if !ttl.live(split_value(v, true)?.0) {
                        cf.delete(&mut batch, k);
                        removed += 1;
                    }
                    if batch.size_in_bytes() >= BATCH_BYTES {
                        store.write(std::mem::take(&mut batch))?;
                    }
                    Ok(())
                })
            })?;
            store.write(batch)?;
        }
        Ok(removed)
    }

    /// The frozen view [`KeyedStateBackend::snapshot`] returns, as its concrete type.
    pub fn snapshot_view(&self, checkpoint_id: u64) -> Result<RocksDbSnapshot, StateError> {
        let store = live_store(&self.store)?;
        let now = if self.states.iter().any(|s| s.desc.ttl.is_some()) {
            self.clock.now_ms()
        } else {
            0
        };
        let snapshot = OwnedSnapshot::new(Arc::clone(store.inner()?), |inner| inner.db.snapshot());
        Ok(RocksDbSnapshot::new(
            checkpoint_id,
            self.max_parallelism,
            self.range,
            self.layout,
            now,
            self.states.iter().map(|s| s.desc.clone()).collect(),
            snapshot,
        )
        .with_key_group_scheme(self.scheme))
    }

    /// Write-backs of the cache at a flush from `bytes` of dirty entries on go through SST
    /// files (tests: the default is 1/64 of a memtable).
    #[cfg(test)]
    pub(crate) fn write_back_files_from(&mut self, bytes: usize) {
        if let Some(s) = self.store.as_mut() {
            s.file_write_back.min_bytes = bytes;
        }
    }

    /// Write-backs of the cache that went through SST files so far.
    #[cfg(test)]
    pub(crate) fn file_write_backs(&self) -> u64 {
        live_store(&self.store).map_or(0, |s| s.file_write_back.done.get())
    }

    /// Entries in the memtables, active and immutable, over all column families.
    #[cfg(test)]
    pub(crate) fn memtable_entries(&self) -> Result<u64, StateError> {
        self.property_sum(&[
            "rocksdb.num-entries-active-mem-table",
            "rocksdb.num-entries-imm-mem-tables",
        ])
    }

    /// How many ingested files' CRCs the backend remembers.
    #[cfg(test)]
    pub(crate) fn written_crc_count(&self) -> usize {
        live_store(&self.store).map_or(0, |s| s.written_crcs.lock().map_or(0, |m| m.len()))
    }

    /// The synchronous part of a native snapshot for `checkpoint_id`: writes the write-back
    /// cache's dirty entries back and flushes the memtables ([`flush`](Self::flush)), then
    /// creates a RocksDB checkpoint (table files hard-linked, `MANIFEST`, `CURRENT`,
    /// `OPTIONS` copied) in a directory beside the database. Its cost is that of writing what
    /// was not yet in table files (at most the memtables and the cache's dirty limit),
    /// whatever the state size; write it out with [`NativeCut::upload`] (on any thread) while
    /// this backend keeps processing. After the upload of a checkpoint, report its completion or abort
    /// ([`KeyedStateBackend::notify_checkpoint_complete`] / `…_aborted`): only files of
    /// completed checkpoints are referenced again by later ones.
    pub fn native_snapshot(&mut self, checkpoint_id: u64) -> Result<NativeCut, StateError> {
        self.flush()?;
        let store = live_store(&self.store)?;
        let inner = Arc::clone(store.inner()?);
        self.cuts += 1;
        let dir = inner.dir.path().join(format!("cut-{checkpoint_id}-{}", self.cuts));
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(|e| StateError::io(format!("remove {}", dir.display()), e))?;
        }
        rocksdb::checkpoint::Checkpoint::new(&inner.db)
            .and_then(|c| c.create_checkpoint(&dir))
            .map_err(db_err(format!("create a RocksDB checkpoint in {}", dir.display())))?;
        let mut files = Vec::new();
        let mut known_crcs = std::collections::HashMap::new();
        let mut written = store.written_crcs.lock().unwrap_or_else(|p| p.into_inner());
        let mut still_live = std::collections::HashMap::new();
        let entries = std::fs::read_dir(&dir).map_err(|e| StateError::io(format!("list {}", dir.display()), e))?;
        for e in entries {
            let e = e.map_err(|e| StateError::io(format!("list {}", dir.display()), e))?;
            let md = e
                .metadata()
                .map_err(|err| StateError::io(format!("stat {}", e.path().display()), err))?;
            if !md.is_file() {
                continue;
            }
            let name = e.file_name().to_string_lossy().into_owned();
            // A file this backend ingested (the checkpoint links it: same identity).
            let id = crate::ingest::FileId::of(&md);
            if let Some(crc) = written.get(&id) {
                known_crcs.insert(name.clone(), *crc);
                still_live.insert(id, *crc);
            }
            files.push(CutFile { name, size: md.len() });
        }
        // A table file gone from the database never comes back.
        *written = still_live;
        drop(written);
        files.sort_by(|a, b| a.name.cmp(&b.name));
        let stats = self.native_stats(store)?;
        let reusable = self.uploads.lock().unwrap_or_else(|p| p.into_inner()).confirmed();
        tracing::debug!(checkpoint_id, files = files.len(), dir = %dir.display(), "native cut");
        Ok(NativeCut {
            checkpoint_id,
            backend_id: self.backend_id.clone(),
            clock_ms: self.clock.now_ms(),
            dir,
            files,
            reusable,
            known_crcs,
            stats,
            uploads: Arc::clone(&self.uploads),
            _inner: inner,
        })
    }

    /// RocksDB's own size estimates per state (its properties) and per key group: each live
    /// table file's size spread evenly over the key groups between its smallest and largest
    /// key, from the file metadata RocksDB keeps in memory. (Asking RocksDB for the size of
    /// every key group's range instead reads index blocks of every file the block cache no
    /// longer holds: 45 ms of a 75 ms incremental checkpoint of 1 GB, measured.)
    fn native_stats(&self, store: &Store) -> Result<NativeStats, StateError> {
        let mut stats = NativeStats::default();
        let mut per_kg: Vec<u64> = vec![0; self.range.len() as usize];
        store.cfs.with_dependent(|inner, cfs| -> Result<(), StateError> {
            for (st, cf) in self.states.iter().zip(cfs.iter()) {
                let bytes = inner
                    .db
                    .property_int_value_cf(cf, rocksdb::properties::TOTAL_SST_FILES_SIZE)
                    .map_err(db_err("read a size property"))?
                    .unwrap_or(0);
                let keys = inner
                    .db
                    .property_int_value_cf(cf, rocksdb::properties::ESTIMATE_NUM_KEYS)
                    .map_err(db_err("read a size property"))?
                    .unwrap_or(0);
                stats.states.push(NativeStateStats {
                    name: st.desc.name.clone(),
                    bytes,
                    estimated_keys: keys,
                });
            }
            if self.range.is_empty() {
                return Ok(());
            }
            let names: std::collections::HashSet<&str> = self.states.iter().map(|s| s.desc.name.as_str()).collect();
            let files = inner.db.live_files().map_err(db_err("list the live table files"))?;
            for f in files.iter().filter(|f| names.contains(f.column_family_name.as_str())) {
                let span = f
                    .start_key
                    .as_deref()
                    .and_then(|s| self.layout.key_group_of(s))
                    .zip(f.end_key.as_deref().and_then(|e| self.layout.key_group_of(e)));
                let Some((first, last)) = span.filter(|(a, b)| a <= b) else {
                    continue;
                };
                let share = f.size as u64 / u64::from(last - first + 1);
                for kg in first.max(self.range.start())..=last.min(self.range.end_exclusive().saturating_sub(1)) {
                    if let Some(slot) = per_kg.get_mut((kg - self.range.start()) as usize) {
                        *slot += share;
                    }
                }
            }
            Ok(())
        })?;
        if !self.range.is_empty() {
            stats.key_groups = self.range.into_iter().zip(per_kg).filter(|(_, b)| *b > 0).collect();
        }
        Ok(stats)
    }

    /// Restores from native handles (a fresh backend only: no state registered yet), at any
    /// parallelism of the same max parallelism: the handle with the largest key-group overlap
    /// becomes the database (its table files hard-linked, the rest copied; the snapshot is
    /// never modified), key groups outside this backend's range are clipped with range
    /// deletes, and the overlapping part of every other handle is copied in key by key.
    ///
    /// `reuse_restored_files`: when true (CLAIM and LEGACY restore modes), the base handle's
    /// table files that live on the local filesystem count as already uploaded, so the next
    /// incremental checkpoint references them (by absolute path) instead of copying them;
    /// when false (NO_CLAIM), the next checkpoint uploads every file anew and shares nothing
    /// with the restored snapshot.
    pub fn restore_native(
        &mut self,
        handles: &[ResolvedNativeHandle],
        reuse_restored_files: bool,
    ) -> Result<(), StateError> {
        if !self.states.is_empty() {
            return Err(StateError::Restore(statekit_core::RestoreError::NotFresh));
        }
        let overlapping: Vec<&ResolvedNativeHandle> = handles
            .iter()
            .filter(|h| !h.key_groups.intersection(&self.range).is_empty())
            .collect();
        for h in &overlapping {
            check_handle(h, self.max_parallelism)?;
        }
        let Some(base) = overlapping
            .iter()
            .copied()
            .max_by_key(|h| h.key_groups.intersection(&self.range).len())
        else {
            return Ok(());
        };
        // Build the new database in a fresh working directory, then swap it in.
        let dir = new_working_dir(&self.options)?;
        let db_path = dir.path().join(DB_DIR);
        let copied = assemble(base, &db_path)?;
        let store = open_store(&self.options, dir, true)?;
        // The old (empty) database goes; views of it keep their share.
        self.store = Some(store);
        let mut descs: Vec<StateDescriptor> = Vec::new();
        for h in &overlapping {
            for d in &h.states {
                if !descs.iter().any(|x| x.name == d.name) {
                    descs.push(d.clone());
                }
            }
        }
        {
            let store = live_store(&self.store)?;
            let names = store.inner_unsynced().db.path().to_path_buf();
            let existing = Db::list_cf(&store.cf_options, &names).map_err(db_err("list column families"))?;
            if let Some(n) = existing
                .iter()
                .find(|n| *n != rocksdb::DEFAULT_COLUMN_FAMILY_NAME && !descs.iter().any(|d| &d.name == *n))
            {
                return Err(RocksDbError::from(crate::error::Corruption::NoDescriptor {
                    subtask: base.subtask,
                    column_family: n.to_string(),
                })
                .into());
            }
        }
        for d in &descs {
            self.register_for_restore(d)?;
        }
        // Clip: drop the base's key groups outside this backend's range.
        let store = live_store(&self.store)?;
        let low = self.layout.key_group_prefix(self.range.start());
        let high = self.layout.key_group_prefix(self.range.end_exclusive());
        store.sync_and_forget()?;
        store.cfs.with_dependent(|inner, cfs| -> Result<(), StateError> {
            for cf in cfs.iter() {
                if base.key_groups.start() < self.range.start() {
                    inner
                        .db
                        .delete_range_cf_opt(cf, [0u8].as_slice(), low.as_slice(), &store.write)
                        .map_err(db_err("clip key groups below the range"))?;
                }
                if base.key_groups.end_exclusive() > self.range.end_exclusive() {
                    inner
                        .db
                        .delete_range_cf_opt(cf, high.as_slice(), [0xFFu8; 3].as_slice(), &store.write)
                        .map_err(db_err("clip key groups above the range"))?;
                }
            }
            Ok(())
        })?;
        // Copy the other handles' part of the range.
        let mut copied_keys = 0u64;
        for h in overlapping.iter().filter(|h| !std::ptr::eq(**h, base)) {
            let view = NativeSnapshotView::open(h, &self.options)?;
            let part = h.key_groups.intersection(&self.range);
            let mut batch = WriteBatch::default();
            let names = &self.names;
            view.for_each_raw(part, |state, k, v| {
                let s = names
                    .get(state)
                    .ok_or_else(|| {
                        StateError::Restore(statekit_core::RestoreError::NotRegistered {
                            state: state.to_string(),
                        })
                    })?
                    .0 as usize;
                store.batch(s, |cf| cf.put(&mut batch, k, v));
                copied_keys += 1;
                if batch.size_in_bytes() >= BATCH_BYTES {
                    store.write(std::mem::take(&mut batch))?;
                }
                Ok(())
            })?;
            store.write(batch)?;
        }
        let reuse: BTreeMap<String, Reusable> = if reuse_restored_files {
            base.files
                .iter()
                .filter(|f| f.file.name.ends_with(".sst"))
                .filter_map(|f| {
                    FileRef::external(f.storage.as_ref(), &f.path, f.file.file.size).map(|file| {
                        (
                            f.file.name.clone(),
                            Reusable {
                                file,
                                crc32: f.file.crc32,
                            },
                        )
                    })
                })
                .collect()
        } else {
            BTreeMap::new()
        };
        tracing::debug!(
            range = %self.range,
            base = base.subtask,
            others = overlapping.len() - 1,
            copied_bytes = copied,
            copied_keys,
            reused = reuse.len(),
            "restored from native handles"
        );
        self.uploads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .set_confirmed(reuse);
        Ok(())
    }

    /// Resolves the handle and the key's key group, and reads the clock for TTL states.
    #[inline]
    fn prepare(&self, h: StateHandle, key: &[u8]) -> Result<(usize, u32, Ttl), StateError> {
        let i = h.0 as usize;
        let Some(st) = self.states.get(i) else {
            return Err(StateError::UnknownState(format!("handle {i}")));
        };
        let kg = self.groups.key_group(key).map_err(|e| StateError::Other(Box::new(e)))?;
        if !self.range.contains(kg) {
            return Err(StateError::KeyGroupOutOfRange {
                key_group: kg,
                range: self.range,
            });
        }
        let cfg = st.desc.ttl;
        let now = if cfg.is_some() { self.clock.now_ms() } else { 0 };
        Ok((i, kg, Ttl { cfg, now }))
    }

    /// Registers a state found in a restored view: existing states are only checked for
    /// compatibility (their TTL and functions are kept).
    fn register_for_restore(&mut self, desc: &StateDescriptor) -> Result<StateHandle, StateError> {
        if let Some(&h) = self.names.get(&desc.name) {
            self.states[h.0 as usize]
                .desc
                .check_compatible(desc)
                .map_err(StateError::Incompatible)?;
            return Ok(h);
        }
        self.register(desc.clone(), StateFunctions::None)
    }

    /// Rewrites every stored value of state `i` with (`stamp = Some(now)`) or without
    /// (`None`) TTL timestamps, when a TTL is added to or removed from a registered state.
    fn restamp(&self, i: usize, stamp: Option<i64>) -> Result<(), StateError> {
        let store = live_store(&self.store)?;
        let kind = self.states[i].desc.kind;
        let was_stamped = self.states[i].desc.ttl.is_some();
        let mut batch = WriteBatch::default();
        let mut value = Vec::new();
        store.batch(i, |cf| {
            store.scan(i, &[], |k, v| {
                value.clear();
                if kind == KeyedStateKind::List {
                    for e in ListElements::new(v, was_stamped) {
                        push_element(&mut value, stamp, e?.1);
                    }
                } else {
                    encode_value(&mut value, stamp, split_value(v, was_stamped)?.1);
                }
                cf.put(&mut batch, k, &value);
                if batch.size_in_bytes() >= BATCH_BYTES {
                    store.write(std::mem::take(&mut batch))?;
                }
                Ok(())
            })
        })?;
        store.write(batch)
    }
}

/// Reads the one stored value at `key` of state `i` (a value, reducing or aggregating state's
/// value, or a map entry) into `out` under TTL: an expired value is deleted and reported
/// absent; an `OnReadAndWrite` TTL re-stamps what it returns (`val` is scratch space).
#[inline]
fn read_single(
    store: &Store,
    i: usize,
    key: &[u8],
    val: &mut Vec<u8>,
    ttl: Ttl,
    out: &mut Vec<u8>,
) -> Result<bool, StateError> {
    let stamped = ttl.stamped();
    let Some(ts) = store
        .get(i, key, |v| -> Result<i64, StateError> {
            let (ts, v) = split_value(v, stamped)?;
            out.extend_from_slice(v);
            Ok(ts)
        })?
        .transpose()?
    else {
        return Ok(false);
    };
    if !stamped {
        return Ok(true);
    }
    if !ttl.live(ts) {
        out.clear();
        store.delete(i, key)?;
        return Ok(false);
    }
    if ttl.refresh_on_read() && ts != ttl.now {
        encode_value(val, Some(ttl.now), out);
        store.put(i, key, val)?;
    }
    Ok(true)
}

/// Collects the live elements of a stored list into `out` (re-encoded), refreshing their
/// timestamps when `refresh`; returns (visible elements, whether anything changed).
fn rebuild_list(raw: &[u8], ttl: Ttl, refresh: bool, out: &mut Vec<u8>) -> Result<(usize, bool), StateError> {
    out.clear();
    let mut visible = 0;
    let mut changed = false;
    for e in ListElements::new(raw, ttl.stamped()) {
        let (ts, e) = e?;
        if ttl.live(ts) {
            visible += 1;
            let ts = if refresh { ttl.now } else { ts };
            push_element(out, ttl.cfg.map(|_| ts), e);
            changed |= refresh && ts != ttl.now;
        } else {
            changed = true;
        }
    }
    Ok((visible, changed))
}

impl KeyedStateBackend for RocksDbBackend {
    statekit_core::keyed_accessors!(max_parallelism, key_group_scheme, key_group_range);

    fn register(&mut self, descriptor: StateDescriptor, functions: StateFunctions) -> Result<StateHandle, StateError> {
        functions.check_fits(&descriptor)?;
        self.fix_key_type(&descriptor)?;
        if let Some(&h) = self.names.get(&descriptor.name) {
            let i = h.0 as usize;
            self.states[i]
                .desc
                .check_compatible(&descriptor)
                .map_err(StateError::Incompatible)?;
            let had_ttl = self.states[i].desc.ttl.is_some();
            if had_ttl != descriptor.ttl.is_some() {
                // Entries written without TTL start living now; removing the TTL strips
                // the timestamps (and makes everything visible again, as on the heap).
                let stamp = descriptor.ttl.map(|_| self.clock.now_ms());
                self.restamp(i, stamp)?;
            }
            self.states[i].desc.ttl = descriptor.ttl;
            if !matches!(functions, StateFunctions::None) {
                self.states[i].functions = functions;
            }
            return Ok(h);
        }
        let h = StateHandle(
            u32::try_from(self.states.len())
                .map_err(|_| StateError::Incompatible(statekit_core::Incompatibility::TooManyStates))?,
        );
        let store = self.store.as_mut().ok_or(RocksDbError::Disposed)?;
        store.add_cf(&descriptor.name)?;
        tracing::debug!(name = %descriptor.name, kind = %descriptor.kind, handle = h.0, "register state");
        self.names.insert(descriptor.name.clone(), h);
        self.states.push(Registered {
            desc: descriptor,
            functions,
        });
        Ok(h)
    }

    fn handle(&self, name: &str) -> Option<StateHandle> {
        self.names.get(name).copied()
    }

    fn descriptors(&self) -> Vec<StateDescriptor> {
        self.states.iter().map(|s| s.desc.clone()).collect()
    }

    fn get(&mut self, state: StateHandle, key: &[u8], namespace: &[u8], out: &mut Vec<u8>) -> Result<bool, StateError> {
        out.clear();
        let (i, kg, ttl) = self.prepare(state, key)?;
        let desc = &self.states[i].desc;
        if !desc.kind.is_single_value() {
            return Err(StateError::wrong_kind(desc, SINGLE));
        }
        let store = live_store(&self.store)?;
        self.layout.encode_key_ns(&mut self.key, kg, key, namespace);
        read_single(store, i, &self.key, &mut self.val, ttl, out)
    }

    fn put(&mut self, state: StateHandle, key: &[u8], namespace: &[u8], value: &[u8]) -> Result<(), StateError> {
        let (i, kg, ttl) = self.prepare(state, key)?;
        let desc = &self.states[i].desc;
        if !desc.kind.is_single_value() {
            return Err(StateError::wrong_kind(desc, SINGLE));
        }
        let store = live_store(&self.store)?;
        self.layout.encode_key_ns(&mut self.key, kg, key, namespace);
        if ttl.stamped() {
            encode_value(&mut self.val, ttl.stamp(), value);
            store.put(i, &self.key, &self.val)
        } else {
            store.put(i, &self.key, value)
        }
    }

    fn add(&mut self, state: StateHandle, key: &[u8], namespace: &[u8], value: &[u8]) -> Result<(), StateError> {
        let (i, kg, ttl) = self.prepare(state, key)?;
        let Registered { desc, functions } = &self.states[i];
        let store = live_store(&self.store)?;
        let stamped = ttl.stamped();
        match desc.kind {
            KeyedStateKind::List => {
                self.layout.encode_key_ns(&mut self.key, kg, key, namespace);
                self.val.clear();
                // Append without reading: the merge operator drops what expired by now
                // (as the heap backend does on add) and appends.
                push_add_operand(&mut self.val, ttl.cfg.map(|c| (ttl.now, c.ttl_ms)), value);
                store.merge(i, &self.key, &self.val)
            }
            KeyedStateKind::Reducing => {
                let StateFunctions::Reduce(reduce) = functions else {
                    return Err(StateError::MissingFunction(desc.name.clone()));
                };
                self.layout.encode_key_ns(&mut self.key, kg, key, namespace);
                let reduced = store
                    .get(i, &self.key, |v| -> Result<Option<Vec<u8>>, StateError> {
                        let (ts, old) = split_value(v, stamped)?;
                        Ok(ttl.live(ts).then(|| reduce(old, value)))
                    })?
                    .transpose()?
                    .flatten();
                encode_value(&mut self.val, ttl.stamp(), reduced.as_deref().unwrap_or(value));
                store.put(i, &self.key, &self.val)
            }
            KeyedStateKind::Aggregating => {
                let StateFunctions::Aggregate(agg) = functions else {
                    return Err(StateError::MissingFunction(desc.name.clone()));
                };
                self.layout.encode_key_ns(&mut self.key, kg, key, namespace);
                let acc = store
                    .get(i, &self.key, |v| -> Result<Option<Vec<u8>>, StateError> {
                        let (ts, old) = split_value(v, stamped)?;
                        Ok(ttl.live(ts).then(|| (agg.add)(Some(old), value)))
                    })?
                    .transpose()?
                    .flatten()
                    .unwrap_or_else(|| (agg.add)(None, value));
                encode_value(&mut self.val, ttl.stamp(), &acc);
                store.put(i, &self.key, &self.val)
            }
            _ => Err(StateError::wrong_kind(desc, ADDABLE)),
        }
    }

    fn clear(&mut self, state: StateHandle, key: &[u8], namespace: &[u8]) -> Result<(), StateError> {
        let (i, kg, _) = self.prepare(state, key)?;
        let store = live_store(&self.store)?;
        self.layout.encode_key_ns(&mut self.key, kg, key, namespace);
        if self.states[i].desc.kind != KeyedStateKind::Map {
            return store.delete(i, &self.key);
        }
        let mut batch = WriteBatch::default();
        store.batch(i, |cf| {
            store.scan(i, &self.key, |k, _| {
                cf.delete(&mut batch, k);
                Ok(())
            })
        })?;
        store.write(batch)
    }

    fn list_for_each(
        &mut self,
        state: StateHandle,
        key: &[u8],
        namespace: &[u8],
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<usize, StateError> {
        let (i, kg, ttl) = self.prepare(state, key)?;
        let desc = &self.states[i].desc;
        if desc.kind != KeyedStateKind::List {
            return Err(StateError::wrong_kind(desc, LIST));
        }
        let store = live_store(&self.store)?;
        self.layout.encode_key_ns(&mut self.key, kg, key, namespace);
        let stamped = ttl.stamped();
        let val = &mut self.val;
        let r = store.get(i, &self.key, |raw| -> Result<(usize, bool), StateError> {
            let mut visible = 0;
            let mut stale = false;
            for e in ListElements::new(raw, stamped) {
                let (ts, e) = e?;
                if ttl.live(ts) {
                    f(e);
                    visible += 1;
                    stale |= ttl.refresh_on_read() && ts != ttl.now;
                } else {
                    stale = true;
                }
            }
            if stale {
                rebuild_list(raw, ttl, ttl.refresh_on_read(), val)?;
            }
            Ok((visible, stale))
        })?;
        let Some((visible, stale)) = r.transpose()? else {
            return Ok(0);
        };
        if stale {
            if visible == 0 {
                store.delete(i, &self.key)?;
            } else {
                store.put(i, &self.key, &self.val)?;
            }
        }
        Ok(visible)
    }

    fn list_update(
        &mut self,
        state: StateHandle,
        key: &[u8],
        namespace: &[u8],
        elements: &[&[u8]],
    ) -> Result<(), StateError> {
        let (i, kg, ttl) = self.prepare(state, key)?;
        let desc = &self.states[i].desc;
        if desc.kind != KeyedStateKind::List {
            return Err(StateError::wrong_kind(desc, LIST));
        }
        let store = live_store(&self.store)?;
        self.layout.encode_key_ns(&mut self.key, kg, key, namespace);
        if elements.is_empty() {
            return store.delete(i, &self.key);
        }
        self.val.clear();
        for e in elements {
            push_element(&mut self.val, ttl.stamp(), e);
        }
        store.put(i, &self.key, &self.val)
    }

    fn map_get(
        &mut self,
        state: StateHandle,
        key: &[u8],
        namespace: &[u8],
        user_key: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<bool, StateError> {
        out.clear();
        let (i, kg, ttl) = self.prepare(state, key)?;
        let desc = &self.states[i].desc;
        if desc.kind != KeyedStateKind::Map {
            return Err(StateError::wrong_kind(desc, MAP));
        }
        let store = live_store(&self.store)?;
        self.layout.encode_map_key(&mut self.key, kg, key, namespace, user_key);
        read_single(store, i, &self.key, &mut self.val, ttl, out)
    }

    fn map_put(
        &mut self,
        state: StateHandle,
        key: &[u8],
        namespace: &[u8],
        user_key: &[u8],
        value: &[u8],
    ) -> Result<(), StateError> {
        let (i, kg, ttl) = self.prepare(state, key)?;
        let desc = &self.states[i].desc;
        if desc.kind != KeyedStateKind::Map {
            return Err(StateError::wrong_kind(desc, MAP));
        }
        let store = live_store(&self.store)?;
        self.layout.encode_map_key(&mut self.key, kg, key, namespace, user_key);
        if ttl.stamped() {
            encode_value(&mut self.val, ttl.stamp(), value);
            store.put(i, &self.key, &self.val)
        } else {
            store.put(i, &self.key, value)
        }
    }

    fn map_remove(
        &mut self,
        state: StateHandle,
        key: &[u8],
        namespace: &[u8],
        user_key: &[u8],
    ) -> Result<bool, StateError> {
        let (i, kg, ttl) = self.prepare(state, key)?;
        let desc = &self.states[i].desc;
        if desc.kind != KeyedStateKind::Map {
            return Err(StateError::wrong_kind(desc, MAP));
        }
        let store = live_store(&self.store)?;
        self.layout.encode_map_key(&mut self.key, kg, key, namespace, user_key);
        let stamped = ttl.stamped();
        let Some(live) = store
            .get(i, &self.key, |v| split_value(v, stamped).map(|(ts, _)| ttl.live(ts)))?
            .transpose()?
        else {
            return Ok(false);
        };
        store.delete(i, &self.key)?;
        Ok(live)
    }

    fn map_for_each(
        &mut self,
        state: StateHandle,
        key: &[u8],
        namespace: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize, StateError> {
        let (i, kg, ttl) = self.prepare(state, key)?;
        let desc = &self.states[i].desc;
        if desc.kind != KeyedStateKind::Map {
            return Err(StateError::wrong_kind(desc, MAP));
        }
        let store = live_store(&self.store)?;
        self.layout.encode_key_ns(&mut self.key, kg, key, namespace);
        let prefix_len = self.key.len();
        let stamped = ttl.stamped();
        let mut visible = 0;
        let mut batch = WriteBatch::default();
        let val = &mut self.val;
        store.batch(i, |cf| {
            store.scan(i, &self.key, |k, v| {
                let (ts, v) = split_value(v, stamped)?;
                if !ttl.live(ts) {
                    cf.delete(&mut batch, k);
                    return Ok(());
                }
                f(&k[prefix_len..], v);
                visible += 1;
                if ttl.refresh_on_read() && ts != ttl.now {
                    encode_value(val, Some(ttl.now), v);
                    cf.put(&mut batch, k, val);
                }
                Ok(())
            })
        })?;
        store.write(batch)?;
        Ok(visible)
    }

    fn merge_namespaces(
        &mut self,
        state: StateHandle,
        key: &[u8],
        target: &[u8],
        sources: &[&[u8]],
    ) -> Result<(), StateError> {
        let (i, kg, ttl) = self.prepare(state, key)?;
        let Registered { desc, functions } = &self.states[i];
        let store = live_store(&self.store)?;
        let stamped = ttl.stamped();
        // Each distinct source once, in order, never the target.
        let mut unique: Vec<&[u8]> = Vec::with_capacity(sources.len());
        for s in sources {
            if *s != target && !unique.contains(s) {
                unique.push(s);
            }
        }
        let mut batch = WriteBatch::default();
        let mut src_key = Vec::new();
        match desc.kind {
            KeyedStateKind::List => {
                let mut moved = Vec::new();
                for src in &unique {
                    self.layout.encode_key_ns(&mut src_key, kg, key, src);
                    let found = store
                        .get(i, &src_key, |raw| -> Result<(), StateError> {
                            for e in ListElements::new(raw, stamped) {
                                let (ts, e) = e?;
                                if ttl.live(ts) {
                                    push_element(&mut moved, ttl.cfg.map(|_| ts), e);
                                }
                            }
                            Ok(())
                        })?
                        .transpose()?;
                    if found.is_some() {
                        store.batch(i, |cf| cf.delete(&mut batch, &src_key));
                    }
                }
                if !moved.is_empty() {
                    self.layout.encode_key_ns(&mut self.key, kg, key, target);
                    // Drop the target's expired elements, then append (as on the heap).
                    self.val.clear();
                    push_list_operand(&mut self.val, stamped, ttl.cfg.map(|c| (ttl.now, c.ttl_ms)), &moved);
                    store.batch(i, |cf| cf.merge(&mut batch, &self.key, &self.val));
                }
                store.write(batch)
            }
            kind @ (KeyedStateKind::Reducing | KeyedStateKind::Aggregating) => {
                type MergeFn = dyn Fn(&[u8], &[u8]) -> Vec<u8> + Send + Sync;
                let merge: &MergeFn = match functions {
                    StateFunctions::Reduce(f) if kind == KeyedStateKind::Reducing => f.as_ref(),
                    StateFunctions::Aggregate(f) if kind == KeyedStateKind::Aggregating => f.merge.as_ref(),
                    _ => return Err(StateError::MissingFunction(desc.name.clone())),
                };
                let mut merged: Option<Vec<u8>> = None;
                for src in &unique {
                    self.layout.encode_key_ns(&mut src_key, kg, key, src);
                    let found = store
                        .get(i, &src_key, |raw| -> Result<(), StateError> {
                            let (ts, v) = split_value(raw, stamped)?;
                            if ttl.live(ts) {
                                merged = Some(match merged.take() {
                                    None => v.to_vec(),
                                    Some(acc) => merge(&acc, v),
                                });
                            }
                            Ok(())
                        })?
                        .transpose()?;
                    if found.is_some() {
                        store.batch(i, |cf| cf.delete(&mut batch, &src_key));
                    }
                }
                if let Some(merged) = merged {
                    self.layout.encode_key_ns(&mut self.key, kg, key, target);
                    let combined = store
                        .get(i, &self.key, |raw| -> Result<Option<Vec<u8>>, StateError> {
                            let (ts, v) = split_value(raw, stamped)?;
                            Ok(ttl.live(ts).then(|| merge(v, &merged)))
                        })?
                        .transpose()?
                        .flatten();
                    encode_value(&mut self.val, ttl.stamp(), combined.as_deref().unwrap_or(&merged));
                    store.batch(i, |cf| cf.put(&mut batch, &self.key, &self.val));
                }
                store.write(batch)
            }
            _ => Err(StateError::wrong_kind(desc, MERGEABLE)),
        }
    }

    fn snapshot(&mut self, checkpoint_id: u64) -> Result<Arc<dyn KeyedStateView>, StateError> {
        let view = self.snapshot_view(checkpoint_id)?;
        tracing::debug!(
            checkpoint_id,
            states = self.states.len(),
            "RocksDB backend snapshot cut"
        );
        Ok(Arc::new(view))
    }

    fn restore(&mut self, views: &[&dyn KeyedStateView]) -> Result<(), StateError> {
        for view in views {
            if view.max_parallelism() != self.max_parallelism {
                return Err(StateError::Restore(statekit_core::RestoreError::MaxParallelism {
                    view: view.max_parallelism(),
                    backend: self.max_parallelism,
                }));
            }
            let view_states = view.states().to_vec();
            let mapping = view_states
                .iter()
                .map(|d| self.register_for_restore(d).map(|h| h.0 as usize))
                .collect::<Result<Vec<_>, _>>()?;
            let now = self.clock.now_ms();
            let range = view.key_group_range().intersection(&self.range);
            let store = live_store(&self.store)?;
            let layout = self.layout;
            let fresh = range.is_empty() || !any_stored(store, layout, range, &mapping)?;
            let loader = Loader::new(self, &view_states, &mapping, now)?;
            self.ingests += 1;
            let scratch = store
                .inner_unsynced()
                .dir
                .path()
                .join(format!("ingest-{}", self.ingests));
            let mut ingest = Ingest::new(store, fresh, scratch, self.options.target_file_bytes);
            for kg in range {
                let _ = view.visit_key_group(kg, &mut |e| {
                    loader.load(&mut ingest, kg, e)?;
                    Ok(ControlFlow::Continue(()))
                })?;
            }
            let count = ingest.count;
            let files = ingest.finish()?;
            self.ingested_files += files;
            self.restored_entries += count as u64;
            tracing::debug!(%range, entries = count, sst_files = files, "restored from view");
        }
        Ok(())
    }

    fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<(), StateError> {
        self.uploads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .complete(checkpoint_id);
        Ok(())
    }

    fn notify_checkpoint_aborted(&mut self, checkpoint_id: u64) -> Result<(), StateError> {
        self.uploads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .abort(checkpoint_id);
        Ok(())
    }

    fn dispose(&mut self) {
        self.states.clear();
        self.names.clear();
        // Snapshot views keep their share of the database; the directory goes with the last.
        self.store = None;
    }
}

/// What one thread of a parallel bulk load wrote: its SST files (state, path) and entries.
type PartLoad = (Vec<crate::ingest::SstFile>, usize);

/// Whether any of the states `mapping` stores a key in the key groups `range`.
fn any_stored(store: &Store, layout: KeyLayout, range: KeyGroupRange, mapping: &[usize]) -> Result<bool, StateError> {
    let (low, high) = (
        layout.key_group_prefix(range.start()),
        layout.key_group_prefix(range.end_exclusive()),
    );
    for &s in mapping {
        if store.any_in(s, &low, &high)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// How the entries of one view are restored: each checked (shape, key group), TTL-expired
/// ones left out, the rest encoded in the layout and handed to an [`Ingest`]. Shared by the
/// threads of a parallel bulk load.
struct Loader<'a> {
    view_states: &'a [StateDescriptor],
    /// Per view state: the backend's state index and its descriptor.
    targets: Vec<(usize, StateDescriptor)>,
    layout: KeyLayout,
    groups: KeyGroupAssigner,
    now: i64,
}

impl<'a> Loader<'a> {
    fn new(
        b: &RocksDbBackend,
        view_states: &'a [StateDescriptor],
        mapping: &[usize],
        now: i64,
    ) -> Result<Self, StateError> {
        let targets = mapping
            .iter()
            .map(|&s| {
                b.states
                    .get(s)
                    .map(|r| (s, r.desc.clone()))
                    .ok_or_else(|| StateError::Restore(statekit_core::RestoreError::IndexNotRegistered { state: s }))
            })
            .collect::<Result<_, _>>()?;
        Ok(Loader {
            view_states,
            targets,
            layout: b.layout,
            groups: b.groups.clone(),
            now,
        })
    }

    /// Restores entry `e` of key group `kg` through `ingest`.
    fn load(&self, ingest: &mut Ingest<'_>, kg: u32, e: &statekit_core::Entry<'_>) -> Result<(), StateError> {
        check_entry_shape(self.view_states, e).map_err(|p| StateError::Restore(p.into()))?;
        // Under Flink's rule for a key type statekit cannot hash, entries keep their groups.
        let actual = if self.groups.places_keys() {
            self.groups
                .key_group(e.key)
                .map_err(|err| StateError::Other(Box::new(err)))?
        } else {
            kg
        };
        if actual != kg {
            return Err(StateError::Restore(statekit_core::RestoreError::ForeignKey {
                key_group: kg,
                actual,
            }));
        }
        let Some((s, desc)) = self.targets.get(e.state as usize) else {
            return Err(StateError::Restore(statekit_core::RestoreError::UnknownEntryState {
                state: e.state,
            }));
        };
        let s = *s;
        let ts = match desc.ttl {
            None => None,
            Some(cfg) => {
                let ts = e.timestamp.unwrap_or(self.now);
                if cfg.is_expired(ts, self.now) {
                    return Ok(());
                }
                Some(ts)
            }
        };
        ingest.count += 1;
        let layout = self.layout;
        match desc.kind {
            KeyedStateKind::List => {
                layout.encode_key_ns(&mut ingest.key, kg, e.key, e.namespace);
                ingest.list_element(s, desc.ttl.is_some(), ts, e.value)
            }
            KeyedStateKind::Map => {
                let user_key = e.user_key.ok_or_else(|| {
                    StateError::Restore(statekit_core::RestoreError::NoUserKey {
                        state: desc.name.clone(),
                    })
                })?;
                layout.encode_map_key(&mut ingest.key, kg, e.key, e.namespace, user_key);
                ingest.put_value(s, ts, e.value)
            }
            _ => {
                layout.encode_key_ns(&mut ingest.key, kg, e.key, e.namespace);
                ingest.put_value(s, ts, e.value)
            }
        }
    }
}

impl RocksDbBackend {
    /// Restores `view` as [`KeyedStateBackend::restore`] does, bulk-loading on `threads`
    /// threads at once when this backend holds nothing yet in the view's key groups: each
    /// thread writes the SST files of a share of the key groups, and all are ingested together
    /// (they do not overlap: keys start with their key group). Otherwise, or with one thread,
    /// a plain restore. Returns the entries written.
    pub(crate) fn bulk_load(&mut self, view: &dyn KeyedStateView, threads: usize) -> Result<u64, StateError> {
        let before = self.restored_entries;
        if view.max_parallelism() != self.max_parallelism {
            return self.restore(&[view]).map(|()| self.restored_entries - before);
        }
        let view_states = view.states().to_vec();
        let mapping = view_states
            .iter()
            .map(|d| self.register_for_restore(d).map(|h| h.0 as usize))
            .collect::<Result<Vec<_>, _>>()?;
        let range = view.key_group_range().intersection(&self.range);
        let store = live_store(&self.store)?;
        let chunks = u32::try_from(threads).unwrap_or(1).clamp(1, 64).min(range.len());
        if chunks <= 1 || any_stored(store, self.layout, range, &mapping)? {
            return self.restore(&[view]).map(|()| self.restored_entries - before);
        }
        let loader = Loader::new(self, &view_states, &mapping, self.clock.now_ms())?;
        self.ingests += 1;
        let scratch = store
            .inner_unsynced()
            .dir
            .path()
            .join(format!("ingest-{}", self.ingests));
        let (opts, file_bytes) = (&store.cf_options, self.options.target_file_bytes);
        let results: Vec<Result<PartLoad, StateError>> = std::thread::scope(|sc| {
            let handles: Vec<_> = (0..chunks)
                .map(|t| {
                    let part = KeyGroupRange::for_subtask(range.len(), chunks, t);
                    let part =
                        KeyGroupRange::new(range.start() + part.start(), range.start() + part.end_exclusive() - 1);
                    let (loader, scratch) = (&loader, scratch.join(format!("part-{t}")));
                    sc.spawn(move || -> Result<PartLoad, StateError> {
                        let mut ingest = Ingest::files_only(opts, scratch, file_bytes)?;
                        for kg in part {
                            let _ = view.visit_key_group(kg, &mut |e| {
                                loader.load(&mut ingest, kg, e)?;
                                Ok(ControlFlow::Continue(()))
                            })?;
                        }
                        let count = ingest.count;
                        Ok((ingest.finish_files()?, count))
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(StateError::Restore(statekit_core::RestoreError::Panicked {
                            thread: "bulk-load",
                        }))
                    })
                })
                .collect()
        });
        let mut files = Vec::new();
        let mut count = 0;
        let mut failure = None;
        for r in results {
            match r {
                Ok((f, n)) => {
                    files.extend(f);
                    count += n;
                }
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
        }
        let result = match failure {
            Some(e) => Err(e),
            None => crate::ingest::ingest_files(store, files),
        };
        if scratch.exists() {
            if let Err(e) = std::fs::remove_dir_all(&scratch) {
                tracing::warn!(dir = %scratch.display(), error = %e, "could not remove an ingestion directory");
            }
        }
        let n = result?;
        self.ingested_files += n;
        self.restored_entries += count as u64;
        tracing::debug!(%range, entries = count, sst_files = n, threads = chunks, "bulk-loaded from view");
        Ok(count as u64)
    }
}

#[cfg(test)]
impl RocksDbBackend {
    /// The raw (stored key, stored value) pairs of a state, for layout tests.
    pub(crate) fn raw_entries(&self, state: StateHandle) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        if let Some(store) = &self.store {
            store
                .scan(state.0 as usize, &[], |k, v| {
                    out.push((k.to_vec(), v.to_vec()));
                    Ok(())
                })
                .expect("scan");
        }
        out
    }
}
