//! The open database shared by a backend and its snapshot views.

use rocksdb::{BoundColumnFamily, MultiThreaded, SnapshotWithThreadMode};
use std::sync::Arc;

/// The RocksDB handle type: column families can be created through a shared reference.
pub(crate) type Db = rocksdb::DBWithThreadMode<MultiThreaded>;

/// The database and its working directory. Fields drop in order: the database is closed
/// before the directory is removed.
pub(crate) struct Inner {
    pub(crate) db: Db,
    pub(crate) dir: tempfile::TempDir,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner").field("dir", &self.dir.path()).finish()
    }
}

/// The column-family handles of the registered states, index = state handle.
pub(crate) type CfHandles<'a> = Vec<Arc<BoundColumnFamily<'a>>>;

self_cell::self_cell!(
    /// The backend's database with its cached column-family handles (which borrow it).
    pub(crate) struct DbCfs {
        owner: Arc<Inner>,
        #[covariant]
        dependent: CfHandles,
    }
);

/// A RocksDB snapshot; it borrows the database it keeps alive.
pub(crate) type Snap<'a> = SnapshotWithThreadMode<'a, Db>;

self_cell::self_cell!(
    /// A snapshot owning (a share of) its database, so it outlives the backend if need be.
    pub(crate) struct OwnedSnapshot {
        owner: Arc<Inner>,
        #[covariant]
        dependent: Snap,
    }
);
