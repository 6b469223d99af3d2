//! Writing an object: one `PUT` when it is small, a multipart upload (parts in parallel,
//! bounded) when it grows past one part; aborted when dropped before `commit`.

use crate::error::{client_error, storage_error};
use crate::runtime::{block_on, runtime};
use crate::store::{ObjectStorage, RequestStats};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};
use statekit_core::storage::{StorageError, StorageWriter};
use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;

pub(crate) struct ObjectWriter {
    store: Arc<dyn ObjectStore>,
    stats: Arc<RequestStats>,
    key: ObjectPath,
    url: String,
    part_size: usize,
    concurrency: usize,
    buf: Vec<u8>,
    upload: Option<WriteMultipart>,
    written: u64,
    committed: bool,
}

impl ObjectWriter {
    pub(crate) fn new(storage: &ObjectStorage, key: ObjectPath, url: String) -> Self {
        ObjectWriter {
            store: storage.store.clone(),
            stats: storage.stats.clone(),
            key,
            url,
            part_size: storage.part_size,
            concurrency: storage.upload_concurrency,
            buf: Vec::new(),
            upload: None,
            written: 0,
            committed: false,
        }
    }

    fn io_error(&self, e: StorageError) -> io::Error {
        io::Error::other(e)
    }

    /// Sends the buffer as the next part(s), starting the multipart upload first; waits
    /// while `concurrency` parts are in flight (back pressure on the producer).
    fn send_parts(&mut self) -> Result<(), StorageError> {
        if self.upload.is_none() {
            let store = self.store.clone();
            let key = self.key.clone();
            let up = block_on(async move { store.put_multipart(&key).await })
                .map_err(|m| client_error(&self.url, m))?
                .map_err(|e| storage_error(&self.url, e))?;
            self.upload = Some(WriteMultipart::new_with_chunk_size(up, self.part_size));
        }
        let rt = runtime().ok_or_else(|| client_error(&self.url, "no runtime"))?;
        let data = bytes::Bytes::from(std::mem::take(&mut self.buf));
        let parts = data.len().div_ceil(self.part_size.max(1)) as u64;
        let concurrency = self.concurrency;
        if let Some(up) = self.upload.as_mut() {
            {
                let _guard = rt.enter();
                up.put(data);
            }
            let r = block_on(up.wait_for_capacity(concurrency)).map_err(|m| client_error(&self.url, m))?;
            r.map_err(|e| storage_error(&self.url, e))?;
        }
        self.stats.parts.fetch_add(parts, Ordering::Relaxed);
        Ok(())
    }
}

impl io::Write for ObjectWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(buf);
        self.written += buf.len() as u64;
        if self.buf.len() >= self.part_size {
            // Whole parts go now; the remainder starts the next.
            let whole = self.buf.len() / self.part_size * self.part_size;
            let rest = self.buf.split_off(whole);
            let r = self.send_parts();
            self.buf = rest;
            r.map_err(|e| self.io_error(e))?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl StorageWriter for ObjectWriter {
    fn commit(mut self: Box<Self>) -> Result<u64, StorageError> {
        let url = self.url.clone();
        match self.upload.take() {
            None => {
                let store = self.store.clone();
                let key = self.key.clone();
                let payload = PutPayload::from(bytes::Bytes::from(std::mem::take(&mut self.buf)));
                block_on(async move { store.put(&key, payload).await })
                    .map_err(|m| client_error(&url, m))?
                    .map_err(|e| storage_error(&url, e))?;
            }
            Some(mut up) => {
                let rest = bytes::Bytes::from(std::mem::take(&mut self.buf));
                if !rest.is_empty() {
                    self.stats.parts.fetch_add(1, Ordering::Relaxed);
                }
                let rt = runtime().ok_or_else(|| client_error(&url, "no runtime"))?;
                {
                    let _guard = rt.enter();
                    up.put(rest);
                }
                // `finish` aborts the upload itself when a part or the completion fails.
                let r = block_on(up.finish()).map_err(|m| client_error(&url, m))?;
                if let Err(e) = r {
                    self.stats.aborts.fetch_add(1, Ordering::Relaxed);
                    return Err(storage_error(&url, e));
                }
            }
        }
        self.committed = true;
        self.stats.puts.fetch_add(1, Ordering::Relaxed);
        self.stats.put_bytes.fetch_add(self.written, Ordering::Relaxed);
        Ok(self.written)
    }
}

impl Drop for ObjectWriter {
    /// A writer dropped before `commit` (an error, a panic) aborts its multipart upload, so
    /// no parts are left billed and nothing appears.
    fn drop(&mut self) {
        if let Some(up) = self.upload.take() {
            if !self.committed {
                self.stats.aborts.fetch_add(1, Ordering::Relaxed);
                if let Ok(Err(e)) = block_on(up.abort()) {
                    tracing::warn!(url = %self.url, error = %e, "aborting a multipart upload failed");
                }
            }
        }
    }
}
