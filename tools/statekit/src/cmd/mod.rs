//! The inspection commands. Each is a thin layer over library calls; none reads a format by
//! itself.

pub mod changelog;
pub mod diff;
pub mod dump;
pub mod gc;
pub mod inspect;
pub mod migrate;
#[cfg(feature = "query")]
pub mod query;
pub mod show;
pub mod table;
pub mod verify;

use anyhow::Result;
use statekit_core::location::Location;
use statekit_snapshot::Snapshot;
use std::path::Path;

/// The location a command argument names: a local path, a `file://` URL, or a snapshot on an
/// object store (`s3://bucket/key`, `gs://…`, `az://…`); any other scheme is refused
/// ([`statekit_inspector::open::location`]).
pub(crate) fn location(path: &Path) -> Result<Location> {
    Ok(statekit_inspector::open::location(path)?)
}

/// The whole file at `loc` (named `shown` in errors): a local file or an object (a schema
/// file, say).
pub(crate) fn read_whole(loc: Location, shown: &Path) -> Result<Vec<u8>> {
    use anyhow::Context;
    match loc {
        Location::Local(p) => std::fs::read(&p).with_context(|| format!("{}", p.display())),
        stored => {
            let (storage, key) = stored.storage_and_path()?;
            let blob = storage.open(&key).with_context(|| format!("{}", shown.display()))?;
            Ok(blob.bytes().to_vec())
        }
    }
}

/// Opens the snapshot `path` names, wherever it is ([`location`]), by the adapter of its
/// family ([`statekit_inspector::open::open_snapshot`]).
pub(crate) fn open_snapshot(path: &Path, options: &statekit_snapshot::OpenOptions) -> Result<Snapshot> {
    Ok(statekit_inspector::open::open_snapshot(path, options)?)
}

/// `path` as a local path for a command that works on local files only so far (a `file://`
/// URL is turned into its path): an object-store URL is refused with a clear error rather than
/// taken for a local directory named `s3:`.
pub(crate) fn local_only(path: &Path, what: &str) -> Result<std::path::PathBuf> {
    match location(path)? {
        Location::Local(p) => Ok(p),
        l => anyhow::bail!("{what} on object storage ({l}) is not supported yet: use a local path"),
    }
}
