//! What a path the user names is — one snapshot or a directory of them, a local path or an
//! object-store URL (`s3://bucket/key`, `gs://…`, `az://…`) — and opening it. The inspector
//! uses these, and so do the `statekit` commands (the binary re-exports them): a path reads
//! the same in every tool, and a status word means the same in `statekit ls` and the
//! inspector's snapshot list.

use crate::error::{InspectError, OpenError, Problems};
use statekit_checkpoint::has_metadata;
use statekit_core::location::Location;
use statekit_objstore::LocationError;
use statekit_snapshot::{OpenOptions, Snapshot};
use std::path::Path;

/// The location a path names: a local path, a `file://` URL, or a snapshot on an object
/// store. Any other scheme is refused: a URL never becomes a local directory.
pub fn location(path: &Path) -> Result<Location, LocationError> {
    let Some(s) = path.to_str() else {
        return Ok(Location::Local(path.to_path_buf()));
    };
    statekit_objstore::parse_location(s)
}

/// True when `path` names a snapshot: a directory with `_metadata`, or anything that is not a
/// directory (its `_metadata` file, or what the user meant as one).
pub fn is_snapshot_path(path: &Path) -> bool {
    has_metadata(path) || std::fs::metadata(path).is_ok_and(|m| !m.is_dir())
}

/// Opens the snapshot `path` names, wherever it is ([`location`]). A local directory without
/// `_metadata` that holds snapshots is [`OpenError::DirectoryOfSnapshots`] (which says how to
/// list them).
pub fn open_snapshot(path: &Path, options: &OpenOptions) -> Result<Snapshot, OpenError> {
    Ok(match location(path)? {
        Location::Local(p) => match Snapshot::open_with(&p, options) {
            Ok(s) => s,
            // A directory of snapshots (`statekit-data`, a checkpoint base, a job directory)
            // is not one: say which command lists them.
            Err(e) if p.is_dir() && !has_metadata(&p) => {
                let snapshots = statekit_snapshot::find_snapshots(&p, 4).len();
                if snapshots == 0 {
                    return Err(e.into());
                }
                return Err(OpenError::DirectoryOfSnapshots { path: p, snapshots });
            }
            Err(e) => return Err(e.into()),
        },
        l => Snapshot::open_location(&l, options)?,
    })
}

/// Opens one side of a comparison with its state schema read ([`OpenOptions::state_schema`]);
/// the error names its path ([`OpenError::Side`]).
pub fn open_side(path: &Path, options: &OpenOptions) -> Result<Snapshot, OpenError> {
    let options = OpenOptions {
        state_schema: true,
        ..options.clone()
    };
    open_snapshot(path, &options).map_err(|cause| OpenError::Side {
        shown: path.display().to_string(),
        cause: Box::new(cause),
    })
}

/// The words `statekit ls` and the inspector use for a snapshot's status.
pub mod status {
    /// A `chk-N` directory without `_metadata`: a checkpoint that never completed.
    pub const INCOMPLETE: &str = "INCOMPLETE";
    /// `_metadata` does not read, or verification found problems.
    pub const BROKEN: &str = "BROKEN";
    /// `_metadata` reads; the data files were not checked (`statekit verify`, `ls --verify`).
    pub const NOT_VERIFIED: &str = "not verified";
    /// Every byte was read and checked.
    pub const OK: &str = "ok";
    /// A temporary a killed statekit run left behind (not a snapshot).
    pub const LEFTOVER: &str = "LEFTOVER";
}

/// The status of a found snapshot: `verified` is the outcome of a verification, when one ran
/// (`Ok(())`: no problem; `Err`: the problems).
pub fn status_word(complete: bool, broken: bool, verified: Option<&Result<(), Problems>>) -> &'static str {
    match (complete, broken, verified) {
        (false, true, _) => status::BROKEN,
        (false, false, _) => status::INCOMPLETE,
        (true, _, None) => status::NOT_VERIFIED,
        (true, _, Some(Ok(()))) => status::OK,
        (true, _, Some(Err(_))) => status::BROKEN,
    }
}

/// Verifies the snapshot at `path` (any location): `Ok(())` when every byte checks, else the
/// problems (or, as one, why it could not be verified).
pub fn verify_status(path: &Path) -> Result<(), Problems> {
    let location = location(path).map_err(|e| Problems::new([crate::error::chain_text(&e)]))?;
    let (_, v) = statekit_snapshot::verify_location(&location).map_err(|e| Problems::new([e.to_string()]))?;
    if v.problems.is_empty() {
        Ok(())
    } else {
        Err(Problems::new(v.problems.iter().map(ToString::to_string)))
    }
}

/// What a path given to the inspector names.
#[derive(Clone, Debug)]
pub struct Probed {
    /// As the user wrote it (a URL stays a URL; the worker opens it by location).
    pub title: String,
    /// One snapshot (a directory holding `_metadata`, or a file), else a directory to search.
    pub snapshot: bool,
}

/// Finds out whether `path` (a local path or an object-store URL) is a snapshot or a directory
/// of snapshots; a path that is neither is an error. On an object store this is one `HEAD` of
/// `_metadata`, then one listing.
pub fn probe(path: &Path) -> Result<Probed, InspectError> {
    let title = path.display().to_string();
    match location(path).map_err(OpenError::from)? {
        Location::Local(p) => {
            if !p.exists() {
                return Err(InspectError::NoSuchPath(p));
            }
            Ok(Probed {
                title,
                snapshot: is_snapshot_path(&p),
            })
        }
        l => {
            let metadata = statekit_format::METADATA_FILE_NAME;
            if l.file_name().as_deref() == Some(metadata) {
                return Ok(Probed { title, snapshot: true });
            }
            let storage = l.storage()?;
            if storage.exists(metadata)? {
                return Ok(Probed { title, snapshot: true });
            }
            if storage.list("")?.is_empty() {
                return Err(InspectError::NothingThere(l));
            }
            Ok(Probed { title, snapshot: false })
        }
    }
}
