//! Blobs of remote objects: whole ones in memory, and ones read by ranges into a sparse
//! temporary file.

use crate::store::ObjectStorage;
use memmap2::Mmap;
use object_store::path::Path as ObjectPath;
use object_store::GetRange;
use statekit_core::storage::{Blob, StorageError};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

/// A whole object, in memory.
pub(crate) struct BytesBlob(pub bytes::Bytes);

impl Blob for BytesBlob {
    fn bytes(&self) -> &[u8] {
        &self.0
    }
}

/// Ranges are fetched in aligned grains of this size (what is fetched is tracked per grain).
const GRAIN: u64 = 4 * 1024;
/// The largest single range request; longer fetches are split and run concurrently.
const MAX_REQUEST: u64 = 8 * 1024 * 1024;
/// Requests in flight at once for one fetch.
const CONCURRENCY: usize = 8;

/// An object read by ranges. Its bytes live in an unlinked, sparse temporary file of the
/// object's size, mapped read-only: fetched ranges are written into the file (the kernel keeps
/// the map coherent with the page cache), and pages never fetched take no memory or disk.
/// Readers [`Blob::fetch`] a range before they read it. A point lookup fetches just its range
/// (rounded to 4 KiB pages); a reader going through the file in order gets read-ahead that doubles
/// up to 8 MiB per request, so a scan makes few requests.
pub(crate) struct RangedBlob {
    store: Arc<dyn object_store::ObjectStore>,
    stats: Arc<crate::store::RequestStats>,
    key: ObjectPath,
    url: String,
    size: u64,
    /// Where the first read (to the end of the file) began.
    first_at: u64,
    file: File,
    map: Mmap,
    state: Mutex<FetchState>,
}

struct FetchState {
    /// Fetched grains (index = offset / GRAIN).
    fetched: Vec<bool>,
    /// Where the last fetch ended (a fetch starting there is sequential).
    last_end: u64,
    /// Where the last fetch started.
    window_start: u64,
    /// The current read-ahead (0 until reads are sequential).
    ahead: u64,
}

impl RangedBlob {
    /// A blob of the `size`-byte object `key`, whose bytes from `at` (to its end) are `first`.
    pub(crate) fn new(
        storage: &ObjectStorage,
        key: ObjectPath,
        url: String,
        size: u64,
        at: u64,
        first: &[u8],
    ) -> Result<Self, StorageError> {
        let io = |e: std::io::Error| StorageError::Io {
            path: format!("{url} (its local cache in {})", std::env::temp_dir().display()),
            source: e,
        };
        let file = tempfile::tempfile().map_err(io)?;
        file.set_len(size).map_err(io)?;
        file.write_all_at(first, at).map_err(io)?;
        // SAFETY: the file is this blob's own unlinked temporary file; only `fetch` writes it,
        // and only ranges not yet marked fetched (readers read only ranges they fetched; a
        // grain written twice by racing fetches gets the same bytes).
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        let grains = size.div_ceil(GRAIN) as usize;
        let mut fetched = vec![false; grains];
        // Grains wholly inside the first read (the last one may be short: it ends the file).
        for g in fetched.iter_mut().skip(at.div_ceil(GRAIN) as usize) {
            *g = true;
        }
        Ok(RangedBlob {
            store: storage.store.clone(),
            stats: storage.stats.clone(),
            key,
            url,
            size,
            first_at: at,
            file,
            map,
            state: Mutex::new(FetchState {
                fetched,
                last_end: 0,
                window_start: 0,
                ahead: 0,
            }),
        })
    }

    /// The byte ranges of the missing grains in `[from, to)`, merged into runs of at most
    /// [`MAX_REQUEST`] bytes.
    fn missing(&self, st: &FetchState, from: u64, to: u64) -> Vec<std::ops::Range<u64>> {
        let mut ranges: Vec<std::ops::Range<u64>> = Vec::new();
        let (a, b) = ((from / GRAIN) as usize, to.div_ceil(GRAIN) as usize);
        for g in a..b {
            if st.fetched.get(g).copied().unwrap_or(true) {
                continue;
            }
            let start = g as u64 * GRAIN;
            let end = (start + GRAIN).min(self.size);
            match ranges.last_mut() {
                Some(r) if r.end == start && r.end - r.start < MAX_REQUEST => r.end = end,
                _ => ranges.push(start..end),
            }
        }
        ranges
    }

    fn get_ranges(&self, ranges: Vec<std::ops::Range<u64>>) -> Result<(), StorageError> {
        let n = ranges.len() as u64;
        let store = self.store.clone();
        let key = self.key.clone();
        let got = crate::runtime::block_on(async move {
            use futures::StreamExt;
            let fetches = ranges.into_iter().map(|r| {
                let store = store.clone();
                let key = key.clone();
                async move {
                    let opts = object_store::GetOptions {
                        range: Some(GetRange::Bounded(r.clone())),
                        ..Default::default()
                    };
                    let res = store.get_opts(&key, opts).await?;
                    let bytes = res.bytes().await?;
                    Ok::<_, object_store::Error>((r, bytes))
                }
            });
            futures::stream::iter(fetches)
                .buffer_unordered(CONCURRENCY)
                .collect::<Vec<_>>()
                .await
        })
        .map_err(|m| crate::error::client_error(&self.url, m))?;
        self.stats.gets.fetch_add(n, Ordering::Relaxed);
        for r in got {
            let (range, bytes) = r.map_err(|e| crate::error::storage_error(&self.url, e))?;
            self.stats.get_bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
            crate::error::check_len(&self.url, bytes.len(), &range)?;
            self.file
                .write_all_at(&bytes, range.start)
                .map_err(|e| StorageError::Io {
                    path: format!("{} (its local cache)", self.url),
                    source: e,
                })?;
            let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            let (a, b) = ((range.start / GRAIN) as usize, range.end.div_ceil(GRAIN) as usize);
            for g in st.fetched.iter_mut().take(b).skip(a) {
                *g = true;
            }
        }
        Ok(())
    }
}

impl Blob for RangedBlob {
    fn bytes(&self) -> &[u8] {
        &self.map
    }

    fn fetch(&self, offset: u64, len: u64) -> Result<(), StorageError> {
        if len == 0 || offset >= self.size {
            return Ok(());
        }
        let end = offset.saturating_add(len).min(self.size);
        if offset >= self.first_at {
            // Inside the first read (the end of the file).
            return Ok(());
        }
        let ranges = {
            let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            // In the window of a sequential read: extend it (doubling the read-ahead) when the
            // reader nears its end. Anywhere else: fetch exactly what is asked for.
            // Sequential: moving forward inside (or just past) the last window; the same
            // offset again (a header read in two steps) is not.
            let sequential = st.last_end > 0 && offset > st.window_start && offset <= st.last_end;
            let want = if sequential {
                st.window_start = offset;
                if end.saturating_add(st.ahead / 2) >= st.last_end {
                    st.ahead = (st.ahead * 2).clamp(64 * GRAIN, MAX_REQUEST);
                    st.last_end = end.max(st.last_end).saturating_add(st.ahead).min(self.size);
                }
                st.last_end.max(end)
            } else {
                st.ahead = 0;
                st.window_start = offset;
                st.last_end = end;
                end
            };
            self.missing(&st, offset, want)
        };
        if ranges.is_empty() {
            return Ok(());
        }
        self.get_ranges(ranges)
    }
}
