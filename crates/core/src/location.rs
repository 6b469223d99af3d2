//! Where a snapshot or a directory of snapshots is: a local path, or a path inside a
//! [`Storage`] (an object store's bucket, say). Commands and libraries that take "a snapshot
//! path" take a [`Location`]; `statekit-objstore` makes one from a URL (`s3://bucket/key`).

use crate::storage::{join, LocalStorage, Storage, StorageError, SubdirStorage};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A local path, or a directory (or file) inside a storage.
#[derive(Clone, Debug)]
pub enum Location {
    /// A path on the local file system.
    Local(PathBuf),
    /// `path` inside `storage` (relative, `/`-separated, `""` for its root).
    Stored {
        /// The storage, rooted where `url` without `path` points (an object store: the bucket).
        storage: Arc<dyn Storage>,
        /// The path inside it.
        path: String,
        /// The location as the user wrote it, normalized (`s3://bucket/ck/job/chk-3`).
        url: String,
    },
}

impl Location {
    /// The location as a user would type it.
    pub fn display(&self) -> String {
        match self {
            Location::Local(p) => p.display().to_string(),
            Location::Stored { url, .. } => url.clone(),
        }
    }

    /// The local path, when this is one.
    pub fn as_local(&self) -> Option<&Path> {
        match self {
            Location::Local(p) => Some(p),
            Location::Stored { .. } => None,
        }
    }

    /// `name` below this location: one component or a relative `a/b` path (`""`: this
    /// location itself).
    pub fn join(&self, name: &str) -> Location {
        let name = name.trim_matches('/');
        if name.is_empty() {
            return self.clone();
        }
        match self {
            Location::Local(p) => Location::Local(p.join(name)),
            Location::Stored { storage, path, url } => Location::Stored {
                storage: storage.clone(),
                path: join(path, name),
                url: format!("{}/{name}", url.trim_end_matches('/')),
            },
        }
    }

    /// The last component (`chk-3` of `…/job/chk-3`), if any.
    pub fn file_name(&self) -> Option<String> {
        match self {
            Location::Local(p) => p.file_name().map(|n| n.to_string_lossy().to_string()),
            Location::Stored { path, .. } => path.rsplit('/').next().filter(|n| !n.is_empty()).map(str::to_string),
        }
    }

    /// The enclosing directory, if any.
    pub fn parent(&self) -> Option<Location> {
        match self {
            Location::Local(p) => p.parent().map(|q| Location::Local(q.to_path_buf())),
            Location::Stored { storage, path, url } => {
                if path.is_empty() {
                    return None;
                }
                let (parent, name) = path.rsplit_once('/').unwrap_or(("", path.as_str()));
                let url = url
                    .trim_end_matches('/')
                    .strip_suffix(name)
                    .map(|u| u.trim_end_matches('/').to_string())
                    .unwrap_or_else(|| url.clone());
                Some(Location::Stored {
                    storage: storage.clone(),
                    path: parent.to_string(),
                    url,
                })
            }
        }
    }

    /// A storage rooted at this location (a directory; nothing is created).
    pub fn storage(&self) -> Result<Arc<dyn Storage>, StorageError> {
        Ok(match self {
            Location::Local(p) => Arc::new(LocalStorage::new(p)),
            Location::Stored { storage, path, .. } => Arc::new(SubdirStorage::new(storage.clone(), path)?),
        })
    }

    /// A storage and a path inside it for this location: for a local path, the local file
    /// system rooted at its parent and the last component (so the parent, a job directory,
    /// is reachable too).
    pub fn storage_and_path(&self) -> Result<(Arc<dyn Storage>, String), StorageError> {
        match self {
            Location::Local(p) => {
                let abs = std::path::absolute(p).map_err(|e| StorageError::Io {
                    path: p.display().to_string(),
                    source: e,
                })?;
                let parent = abs.parent().unwrap_or(Path::new("/")).to_path_buf();
                let name = abs
                    .file_name()
                    .map(|n| n.to_string_lossy().to_string())
                    .unwrap_or_default();
                Ok((Arc::new(LocalStorage::new(parent)), name))
            }
            Location::Stored { storage, path, .. } => Ok((storage.clone(), path.clone())),
        }
    }
}

/// Turns an object-store URL (`s3://bucket/key`) into a [`Location`]: what lets a snapshot
/// reference a file by URL ([`Storage::url`]) and a reader find it again, without this crate
/// (or any crate below the one implementing it) linking an object-store client. Flink's
/// `FileSystem` plugins play the same part. `statekit-objstore` implements it
/// (`statekit_objstore::install`).
pub trait UrlResolver: Send + Sync {
    /// The location `url` names, or why it cannot be reached.
    fn resolve(&self, url: &str) -> Result<Location, StorageError>;
}

static URL_RESOLVER: std::sync::RwLock<Option<Arc<dyn UrlResolver>>> = std::sync::RwLock::new(None);

/// Installs the process's [`UrlResolver`] (a later call replaces it).
pub fn set_url_resolver(resolver: Arc<dyn UrlResolver>) {
    let mut slot = URL_RESOLVER.write().unwrap_or_else(|p| p.into_inner());
    *slot = Some(resolver);
}

/// The location of a file referenced by URL, through the installed [`UrlResolver`]; without
/// one, an error saying what to install.
pub fn resolve_url(url: &str) -> Result<Location, StorageError> {
    let resolver = URL_RESOLVER.read().unwrap_or_else(|p| p.into_inner()).clone();
    match resolver {
        Some(r) => r.resolve(url),
        None => Err(StorageError::Remote {
            path: url.to_string(),
            status: None,
            transient: false,
            message:
                "no object-store client is installed to resolve this URL (an engine calls statekit_objstore::install())"
                    .into(),
        }),
    }
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::MemoryStorage;

    #[test]
    fn stored_locations_join_and_climb() {
        let s: Arc<dyn Storage> = Arc::new(MemoryStorage::default());
        let l = Location::Stored {
            storage: s,
            path: "ck/job".into(),
            url: "s3://b/ck/job".into(),
        };
        let c = l.join("chk-3");
        assert_eq!(c.display(), "s3://b/ck/job/chk-3");
        assert_eq!(c.file_name().as_deref(), Some("chk-3"));
        let p = c.parent().expect("parent");
        assert_eq!(p.display(), "s3://b/ck/job");
        let root = p.parent().and_then(|p| p.parent()).expect("root");
        assert_eq!(root.display(), "s3://b");
        assert!(root.parent().is_none());
        assert_eq!(root.join("ck/job/chk-3").display(), "s3://b/ck/job/chk-3");
        assert_eq!(c.join("").display(), "s3://b/ck/job/chk-3");
    }
}
