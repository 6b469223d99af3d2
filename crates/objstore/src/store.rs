//! [`ObjectStorage`]: the [`Storage`] trait over an `object_store` bucket.

use crate::blob::{BytesBlob, RangedBlob};
use crate::error::{client_error, storage_error};
use crate::runtime::block_on;
use crate::writer::ObjectWriter;
use futures::{StreamExt, TryStreamExt};
use object_store::list::{PaginatedListOptions, PaginatedListStore};
use object_store::path::Path as ObjectPath;
use object_store::{GetOptions, GetRange, ObjectMeta, ObjectStore, ObjectStoreExt, PutPayload};
use statekit_core::storage::{check_path, Blob, DirEntry, Storage, StorageError, StorageWriter};
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// How much of a file [`Storage::open_ranged`] reads with its first request (the end of the
/// file: a data file's index and trailer; a smaller file whole).
pub(crate) const FIRST_READ: u64 = 64 * 1024;

/// Counters of the requests a storage made (every `ObjectStorage` of a process shares one
/// per bucket).
#[derive(Debug, Default)]
pub struct RequestStats {
    pub(crate) gets: AtomicU64,
    pub(crate) get_bytes: AtomicU64,
    pub(crate) puts: AtomicU64,
    pub(crate) put_bytes: AtomicU64,
    pub(crate) parts: AtomicU64,
    pub(crate) heads: AtomicU64,
    pub(crate) lists: AtomicU64,
    pub(crate) deletes: AtomicU64,
    pub(crate) aborts: AtomicU64,
}

/// A copy of [`RequestStats`] at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// `GET`s (whole objects and ranges).
    pub gets: u64,
    /// Bytes the store served to them.
    pub get_bytes: u64,
    /// Single-request `PUT`s and completed multipart uploads.
    pub puts: u64,
    /// Bytes uploaded.
    pub put_bytes: u64,
    /// Multipart parts uploaded.
    pub parts: u64,
    /// `HEAD`s.
    pub heads: u64,
    /// Listings.
    pub lists: u64,
    /// Objects deleted.
    pub deletes: u64,
    /// Multipart uploads aborted.
    pub aborts: u64,
}

impl StatsSnapshot {
    /// The counts as a JSON object (one line).
    pub fn to_json(&self) -> String {
        format!(
            "{{\"gets\":{},\"get_bytes\":{},\"puts\":{},\"put_bytes\":{},\"parts\":{},\"heads\":{},\"lists\":{},\"deletes\":{},\"aborts\":{}}}",
            self.gets, self.get_bytes, self.puts, self.put_bytes, self.parts, self.heads, self.lists, self.deletes, self.aborts
        )
    }

    /// The counts of every bucket this process opened, summed.
    pub fn of_process() -> StatsSnapshot {
        let mut t = StatsSnapshot::default();
        for s in crate::location::opened() {
            let x = s.stats();
            t.gets += x.gets;
            t.get_bytes += x.get_bytes;
            t.puts += x.puts;
            t.put_bytes += x.put_bytes;
            t.parts += x.parts;
            t.heads += x.heads;
            t.lists += x.lists;
            t.deletes += x.deletes;
            t.aborts += x.aborts;
        }
        t
    }

    /// Appends [`StatsSnapshot::of_process`] as one JSON line to the file named by
    /// `STATEKIT_OBJECT_STORE_STATS`, when it is set and this process opened a bucket. A
    /// binary calls it before it exits.
    pub fn write_if_requested() {
        let Some(path) = std::env::var_os("STATEKIT_OBJECT_STORE_STATS") else {
            return;
        };
        if crate::location::opened().is_empty() {
            return;
        }
        let line = format!("{}\n", Self::of_process().to_json());
        let r = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = r {
            tracing::warn!(error = %e, "cannot write the object store counters");
        }
    }
}

/// A bucket (or container) of an object store as a [`Storage`]: paths are object keys.
#[derive(Debug)]
pub struct ObjectStorage {
    pub(crate) store: Arc<dyn ObjectStore>,
    /// `s3://bucket`: what paths are shown under.
    pub(crate) base: String,
    pub(crate) stats: Arc<RequestStats>,
    /// Multipart part size (at least 5 MiB: S3's minimum for all but the last part).
    pub(crate) part_size: usize,
    /// Parts uploaded at once by one writer.
    pub(crate) upload_concurrency: usize,
    /// The same bucket's page-by-page listing (S3, GCS, Azure): what steps over keys that are
    /// not valid paths when a whole listing fails on one.
    pub(crate) paged: Option<PagedList>,
}

/// A bucket's page-by-page listing ([`ObjectStorage::with_paged_listing`]).
#[derive(Clone)]
pub(crate) struct PagedList(Arc<dyn PaginatedListStore>);

impl std::fmt::Debug for PagedList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PagedList")
    }
}

/// Keys a listing page asks for (S3's maximum).
const PAGE_KEYS: usize = 1000;

/// A listing offset (`start-after`) past every key that starts with `prefix`: the prefix
/// followed by the largest character up to S3's 1024-byte key length.
fn after_prefix(prefix: &str) -> String {
    let n = (1024usize.saturating_sub(prefix.len()) / 4).max(1);
    format!("{prefix}{}", "\u{10FFFF}".repeat(n))
}

impl ObjectStorage {
    /// `store`, whose objects are shown as `base/key` (`s3://bucket/key`).
    pub fn new(store: Arc<dyn ObjectStore>, base: String) -> Self {
        ObjectStorage {
            store,
            base: base.trim_end_matches('/').to_string(),
            stats: Arc::default(),
            part_size: 8 * 1024 * 1024,
            upload_concurrency: 4,
            paged: None,
        }
    }

    /// This storage with `paged`, the same bucket's page-by-page listing: a listing that
    /// meets a key which is not a valid path (an empty, `.` or `..` segment) then steps over
    /// it (reported by [`Storage::list_reporting`]) instead of failing whole.
    pub fn with_paged_listing(mut self, paged: Arc<dyn PaginatedListStore>) -> Self {
        self.paged = Some(PagedList(paged));
        self
    }

    /// Everything below the raw key prefix `prefix` (`""` or ending in `/`), page by page:
    /// with `delimited`, the objects right below it and its common prefixes; else every
    /// object below it. A page that fails on a key that is not a valid path is asked again
    /// for fewer keys from the last key listed, down to one: that one key (or every key below
    /// a common prefix that is not a valid path) goes to `invalid` as its URL, and the listing
    /// goes on after it.
    fn list_stepping(
        &self,
        paged: &PagedList,
        prefix: &str,
        delimited: bool,
        invalid: &mut Vec<String>,
    ) -> Result<(Vec<ObjectMeta>, Vec<ObjectPath>), StorageError> {
        let url = self.url(prefix.trim_end_matches('/'));
        let (mut objects, mut dirs) = (Vec::new(), Vec::new());
        // Resume point (exclusive) after a failed page: past everything listed so far.
        let mut resume: Option<String> = None;
        let mut token: Option<String> = None;
        let mut max_keys = PAGE_KEYS;
        loop {
            let opts = PaginatedListOptions {
                offset: if token.is_some() { None } else { resume.clone() },
                delimiter: delimited.then_some(std::borrow::Cow::Borrowed("/")),
                max_keys: (max_keys < PAGE_KEYS).then_some(max_keys),
                page_token: token.clone(),
                ..Default::default()
            };
            let store = paged.0.clone();
            let raw = (!prefix.is_empty()).then(|| prefix.to_string());
            self.stats.lists.fetch_add(1, Ordering::Relaxed);
            let page = block_on(async move { store.list_paginated(raw.as_deref(), opts).await })
                .map_err(|m| client_error(&url, m))?;
            match page {
                Ok(page) => {
                    for p in page.result.common_prefixes {
                        let past = after_prefix(&format!("{p}/"));
                        if resume.as_ref().is_none_or(|r| *r < past) {
                            resume = Some(past);
                        }
                        dirs.push(p);
                    }
                    for o in page.result.objects {
                        let key = o.location.to_string();
                        if resume.as_ref().is_none_or(|r| *r < key) {
                            resume = Some(key);
                        }
                        objects.push(o);
                    }
                    max_keys = (max_keys * 2).min(PAGE_KEYS);
                    token = page.page_token;
                    if token.is_none() {
                        break;
                    }
                }
                Err(object_store::Error::InvalidPath {
                    source:
                        object_store::path::Error::EmptySegment { path: bad }
                        | object_store::path::Error::BadSegment { path: bad, .. },
                }) => {
                    // Go on from the last key listed, by offset (a page token cannot be
                    // resumed part way).
                    token = None;
                    if max_keys > 1 {
                        max_keys = (max_keys / 4).max(1);
                        continue;
                    }
                    // A one-key page failed: its key (or common prefix) is `bad`.
                    let past = if delimited && bad.ends_with('/') {
                        let (below, _) = self.list_stepping(paged, &bad, false, invalid)?;
                        invalid.extend(below.iter().map(|o| self.url(o.location.as_ref())));
                        after_prefix(&bad)
                    } else {
                        invalid.push(self.url(&bad));
                        bad.clone()
                    };
                    if resume.as_ref().is_some_and(|r| *r >= past) {
                        // The store did not honour the offset: no way past the key.
                        return Err(StorageError::InvalidPath(self.url(&bad)));
                    }
                    resume = Some(past);
                }
                Err(e) => return Err(storage_error(&url, e)),
            }
        }
        Ok((objects, dirs))
    }

    /// The requests made so far.
    pub fn stats(&self) -> StatsSnapshot {
        let s = &self.stats;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        StatsSnapshot {
            gets: l(&s.gets),
            get_bytes: l(&s.get_bytes),
            puts: l(&s.puts),
            put_bytes: l(&s.put_bytes),
            parts: l(&s.parts),
            heads: l(&s.heads),
            lists: l(&s.lists),
            deletes: l(&s.deletes),
            aborts: l(&s.aborts),
        }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        if path.is_empty() {
            self.base.clone()
        } else {
            format!("{}/{path}", self.base)
        }
    }

    pub(crate) fn key(&self, path: &str) -> Result<ObjectPath, StorageError> {
        check_path(path)?;
        ObjectPath::parse(path).map_err(|_| StorageError::InvalidPath(path.to_string()))
    }

    /// Runs a request future, mapping a runtime failure to an error naming `url`.
    pub(crate) fn run<T, F>(&self, url: &str, f: F) -> Result<T, StorageError>
    where
        F: std::future::Future<Output = Result<T, object_store::Error>> + Send,
        T: Send,
    {
        block_on(f)
            .map_err(|m| client_error(url, m))?
            .map_err(|e| storage_error(url, e))
    }

    /// One `GET` of `range` of `path` (suffix, bounded or whole): the bytes and the object's size.
    pub(crate) fn get(
        &self,
        path: &ObjectPath,
        url: &str,
        range: Option<GetRange>,
    ) -> Result<(bytes::Bytes, u64, std::ops::Range<u64>), StorageError> {
        let store = self.store.clone();
        let p = path.clone();
        let r = self.run(url, async move {
            let opts = GetOptions {
                range,
                ..Default::default()
            };
            let res = store.get_opts(&p, opts).await?;
            let size = res.meta.size;
            let range = res.range.clone();
            let bytes = res.bytes().await?;
            Ok((bytes, size, range))
        });
        self.stats.gets.fetch_add(1, Ordering::Relaxed);
        let (bytes, size, range) = r?;
        self.stats.get_bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        crate::error::check_len(url, bytes.len(), &range)?;
        Ok((bytes, size, range))
    }
}

impl Storage for ObjectStorage {
    fn describe(&self, path: &str) -> String {
        self.url(path)
    }

    fn url(&self, path: &str) -> Option<String> {
        Some(ObjectStorage::url(self, path))
    }

    fn create(&self, path: &str) -> Result<Box<dyn StorageWriter>, StorageError> {
        let key = self.key(path)?;
        Ok(Box::new(ObjectWriter::new(self, key, self.url(path))))
    }

    /// One `GET` of the whole object.
    fn open(&self, path: &str) -> Result<Arc<dyn Blob>, StorageError> {
        let key = self.key(path)?;
        let url = self.url(path);
        let (bytes, _, _) = self.get(&key, &url, None)?;
        Ok(Arc::new(BytesBlob(bytes)))
    }

    /// One `GET` of the object's last 64 KiB (its size comes with them); the
    /// rest is fetched as the reader asks for it.
    fn open_ranged(&self, path: &str) -> Result<Arc<dyn Blob>, StorageError> {
        let key = self.key(path)?;
        let url = self.url(path);
        let first = match self.get(&key, &url, Some(GetRange::Suffix(FIRST_READ))) {
            Ok(r) => r,
            // An empty object has no suffix to serve (416): read it whole.
            Err(StorageError::Remote { status: Some(416), .. }) => self.get(&key, &url, None)?,
            Err(e) => return Err(e),
        };
        let (bytes, size, range) = first;
        if range.start == 0 && range.end == size {
            return Ok(Arc::new(BytesBlob(bytes)));
        }
        Ok(Arc::new(RangedBlob::new(self, key, url, size, range.start, &bytes)?))
    }

    /// One `GET`, its body streamed into `dst` as it arrives.
    fn download(&self, path: &str, dst: &std::path::Path) -> Result<u64, StorageError> {
        let key = self.key(path)?;
        let url = self.url(path);
        let mut file = std::fs::File::create(dst).map_err(|e| StorageError::Io {
            path: dst.display().to_string(),
            source: e,
        })?;
        let store = self.store.clone();
        let io_path = dst.display().to_string();
        self.stats.gets.fetch_add(1, Ordering::Relaxed);
        let r = self.run(&url, async move {
            let mut body = store.get(&key).await?.into_stream();
            let mut n = 0u64;
            while let Some(chunk) = body.next().await {
                let chunk = chunk?;
                file.write_all(&chunk).map_err(|e| object_store::Error::Generic {
                    store: "local file",
                    source: Box::new(std::io::Error::new(e.kind(), format!("{io_path}: {e}"))),
                })?;
                n += chunk.len() as u64;
            }
            Ok(n)
        });
        if let Ok(n) = &r {
            self.stats.get_bytes.fetch_add(*n, Ordering::Relaxed);
        }
        r
    }

    fn exists(&self, path: &str) -> Result<bool, StorageError> {
        let url = self.url(path);
        if !path.is_empty() {
            let key = self.key(path)?;
            let store = self.store.clone();
            self.stats.heads.fetch_add(1, Ordering::Relaxed);
            match self.run(&url, async move { store.head(&key).await }) {
                Ok(_) => return Ok(true),
                Err(StorageError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        // A "directory": some object below it.
        let prefix = if path.is_empty() { None } else { Some(self.key(path)?) };
        let store = self.store.clone();
        self.stats.lists.fetch_add(1, Ordering::Relaxed);
        let first = self.run(&url, async move {
            let mut s = store.list(prefix.as_ref());
            s.next().await.transpose()
        })?;
        Ok(first.is_some())
    }

    /// One delimited listing of the prefix: objects are files, common prefixes directories.
    /// Keys that are not valid paths are left out (with a warning).
    fn list(&self, dir: &str) -> Result<Vec<DirEntry>, StorageError> {
        let mut invalid = Vec::new();
        let out = self.list_reporting(dir, &mut invalid)?;
        for k in &invalid {
            tracing::warn!(key = %k, "not a valid path (an empty, '.' or '..' segment): left out of the listing");
        }
        Ok(out)
    }

    /// One delimited listing of the prefix; when it fails on a key that is not a valid path,
    /// a listing page by page that steps over such keys and reports them.
    fn list_reporting(&self, dir: &str, invalid: &mut Vec<String>) -> Result<Vec<DirEntry>, StorageError> {
        let url = self.url(dir);
        let prefix = if dir.is_empty() { None } else { Some(self.key(dir)?) };
        let store = self.store.clone();
        self.stats.lists.fetch_add(1, Ordering::Relaxed);
        let listed = block_on(async move { store.list_with_delimiter(prefix.as_ref()).await })
            .map_err(|m| client_error(&url, m))?;
        let res = match (listed, &self.paged) {
            (Ok(res), _) => res,
            (Err(object_store::Error::InvalidPath { .. }), Some(paged)) => {
                let raw = if dir.is_empty() {
                    String::new()
                } else {
                    format!("{dir}/")
                };
                let (objects, common_prefixes) = self.list_stepping(paged, &raw, true, invalid)?;
                object_store::ListResult {
                    common_prefixes,
                    objects,
                    extensions: Default::default(),
                }
            }
            (Err(e), _) => return Err(storage_error(&url, e)),
        };
        let mut out: Vec<DirEntry> = Vec::new();
        for p in res.common_prefixes {
            if let Some(name) = p.filename() {
                out.push(DirEntry {
                    name: name.to_string(),
                    is_dir: true,
                    size: 0,
                    modified_ms: 0,
                });
            }
        }
        for o in res.objects {
            if let Some(name) = o.location.filename() {
                out.push(DirEntry {
                    name: name.to_string(),
                    is_dir: false,
                    size: o.size,
                    modified_ms: o.last_modified.timestamp_millis(),
                });
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    fn delete_file(&self, path: &str) -> Result<(), StorageError> {
        let key = self.key(path)?;
        let store = self.store.clone();
        self.stats.deletes.fetch_add(1, Ordering::Relaxed);
        match self.run(&self.url(path), async move { store.delete(&key).await }) {
            Ok(()) | Err(StorageError::NotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Every object below `dir` (a listing, then batched deletes).
    fn delete_dir_all(&self, dir: &str) -> Result<(), StorageError> {
        let url = self.url(dir);
        let prefix = if dir.is_empty() { None } else { Some(self.key(dir)?) };
        let store = self.store.clone();
        self.stats.lists.fetch_add(1, Ordering::Relaxed);
        let n = self.run(&url, async move {
            let locations = store.list(prefix.as_ref()).map_ok(|m| m.location).boxed();
            let deleted: Vec<ObjectPath> = store.delete_stream(locations).try_collect().await?;
            Ok(deleted.len() as u64)
        })?;
        self.stats.deletes.fetch_add(n, Ordering::Relaxed);
        Ok(())
    }

    /// Nothing to create: a prefix exists when an object does.
    fn create_dir_all(&self, dir: &str) -> Result<(), StorageError> {
        check_path(dir)
    }

    /// One conditional `PUT` (`If-None-Match: *`); a store without conditional writes gets a
    /// check, then a `PUT`.
    fn put_new(&self, path: &str, bytes: &[u8]) -> Result<u64, StorageError> {
        let key = self.key(path)?;
        let url = self.url(path);
        let store = self.store.clone();
        let payload = PutPayload::from(bytes::Bytes::copy_from_slice(bytes));
        let opts = object_store::PutOptions::from(object_store::PutMode::Create);
        let r = crate::runtime::block_on(async move { store.put_opts(&key, payload, opts).await })
            .map_err(|m| client_error(&url, m))?;
        self.stats.puts.fetch_add(1, Ordering::Relaxed);
        match r {
            Ok(_) => {
                self.stats.put_bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                Ok(bytes.len() as u64)
            }
            Err(object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. }) => {
                Err(StorageError::AlreadyExists(url))
            }
            Err(object_store::Error::NotImplemented { .. } | object_store::Error::NotSupported { .. }) => {
                if self.exists(path)? {
                    return Err(StorageError::AlreadyExists(url));
                }
                self.put_atomic(path, bytes)
            }
            Err(e) => Err(storage_error(&url, e)),
        }
    }

    /// One `PUT` (an object appears whole or not at all).
    fn put_atomic(&self, path: &str, bytes: &[u8]) -> Result<u64, StorageError> {
        let key = self.key(path)?;
        let url = self.url(path);
        let store = self.store.clone();
        let payload = PutPayload::from(bytes::Bytes::copy_from_slice(bytes));
        self.run(&url, async move { store.put(&key, payload).await })?;
        self.stats.puts.fetch_add(1, Ordering::Relaxed);
        self.stats.put_bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        Ok(bytes.len() as u64)
    }
}
