//! A keyed backend of the caller's choice, restored from any snapshot kind.

use crate::error::SnapshotError;
use crate::open::Snapshot;
use crate::views::{stored_as, StoredAs};
use statekit_changelog::{
    restore_into, ChangelogBackend, ChangelogStorage, MaterializationPolicy, Materializer, ReplayClock,
};
use statekit_checkpoint::{CheckpointError, InvalidRequest, RestoreMode};
use statekit_core::storage::Storage;
use statekit_core::{BackendConfig, KeyedStateBackend, StateError};
use statekit_hashmap::HashMapBackend;
use std::sync::Arc;

/// Which plain backend holds the keyed state.
#[derive(Clone, Debug)]
pub enum BackendChoice {
    /// The heap backend ([`HashMapBackend`]).
    HashMap,
    /// Embedded RocksDB with these options.
    #[cfg(feature = "rocksdb")]
    RocksDb(statekit_rocksdb::RocksDbOptions),
}

/// The changelog (DSTL) over the plain backend: every change is also logged through
/// `storage`, and the backend is materialized into `job` by `materialization`.
pub struct ChangelogSetup<'a> {
    /// The job's upload service.
    pub storage: &'a ChangelogStorage,
    /// Storage rooted at the job directory (materializations go to its `taskowned/`).
    pub job: Arc<dyn Storage>,
    /// When to materialize.
    pub materialization: MaterializationPolicy,
    /// Seed of the materialization schedule's jitter (the subtask index, so subtasks do not
    /// materialize all at once).
    pub jitter_seed: u64,
}

/// The snapshot to restore from.
#[derive(Clone, Copy)]
pub struct RestoreFrom<'a> {
    /// The opened snapshot, of any family.
    pub snapshot: &'a Snapshot,
    /// The operator whose keyed state to restore.
    pub uid: &'a str,
    /// Who owns the snapshot's files ([`RestoreMode`]).
    pub mode: RestoreMode,
}

/// A keyed backend opened by [`open_keyed`].
pub enum KeyedBackend {
    /// The heap backend.
    Heap(HashMapBackend),
    /// The RocksDB backend.
    #[cfg(feature = "rocksdb")]
    RocksDb(Box<statekit_rocksdb::RocksDbBackend>),
    /// The changelog over a plain backend.
    Changelog(Box<ChangelogBackend>),
}

impl std::fmt::Debug for KeyedBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            KeyedBackend::Heap(_) => "KeyedBackend::Heap",
            #[cfg(feature = "rocksdb")]
            KeyedBackend::RocksDb(_) => "KeyedBackend::RocksDb",
            KeyedBackend::Changelog(_) => "KeyedBackend::Changelog",
        })
    }
}

impl KeyedBackend {
    /// The backend as a trait object.
    pub fn as_dyn(&mut self) -> &mut dyn KeyedStateBackend {
        match self {
            KeyedBackend::Heap(b) => b,
            #[cfg(feature = "rocksdb")]
            KeyedBackend::RocksDb(b) => b.as_mut(),
            KeyedBackend::Changelog(b) => b.as_mut(),
        }
    }

    /// The backend as an owned trait object.
    pub fn into_dyn(self) -> Box<dyn KeyedStateBackend> {
        match self {
            KeyedBackend::Heap(b) => Box::new(b),
            #[cfg(feature = "rocksdb")]
            KeyedBackend::RocksDb(b) => b,
            KeyedBackend::Changelog(b) => b,
        }
    }
}

/// Opens a keyed backend for `config` — the plain backend `choice`, under the changelog when
/// `changelog` is given — restored from `restore` when given. Any snapshot kind restores into
/// any configuration, at any parallelism, except native files into another backend
/// ([`SnapshotError::NativeNeedsItsBackend`]):
///
/// * canonical state through the backend's own restore;
/// * native RocksDB files through RocksDB's (also under the changelog, whose first checkpoint
///   then materializes); with [`RestoreMode::may_reference_restored_files`] the restored
///   table files are referenced by the next incremental checkpoint instead of copied;
/// * changelog state by its materializations plus replay of the tail — into a changelog
///   backend (which keeps referencing the restored files until its first materialization,
///   unless `NO_CLAIM`) or, with the changelog off, into the plain backend on a
///   [`ReplayClock`], so TTL data keeps its recorded timestamps.
pub fn open_keyed(
    choice: &BackendChoice,
    config: BackendConfig,
    changelog: Option<ChangelogSetup<'_>>,
    restore: Option<RestoreFrom<'_>>,
) -> Result<KeyedBackend, SnapshotError> {
    let how = restore.map(stored_how).transpose()?;
    // Keys stay in the key groups the snapshot put them in: the backend takes its rule.
    let config = match restore {
        Some(r) => config.with_key_group_scheme(r.snapshot.operator(r.uid)?.key_group_scheme),
        None => config,
    };
    let Some(setup) = changelog else {
        return Ok(match (restore, how) {
            (Some(r), Some(StoredAs::Changelog)) => {
                let rc = ReplayClock::new(config.clock.clone());
                let mut b = plain_backend(choice, config.with_clock(rc.clone()), None)?;
                let range = b.as_dyn().key_group_range();
                let handles = statekit_files(r)?.changelog_handles(r.uid, range)?;
                restore_into(b.as_dyn(), Some(&rc), range, &handles)?;
                rc.follow();
                b
            }
            (Some(r), Some(StoredAs::Native)) => {
                plain_backend(choice, config, Some((r, r.mode.may_reference_restored_files())))?
            }
            (Some(r), _) => {
                let mut b = plain_backend(choice, config, None)?;
                restore_entries(r, b.as_dyn())?;
                b
            }
            (None, _) => plain_backend(choice, config, None)?,
        });
    };
    let materializer = Materializer::new(setup.job.clone(), setup.materialization.clone(), setup.jitter_seed);
    // Native files are restored inside the wrapper (so on its replay clock) and not referenced
    // later: the first checkpoint materializes.
    let native = match (restore, how) {
        (Some(r), Some(StoredAs::Native)) => Some((r, false)),
        _ => None,
    };
    let mut b = ChangelogBackend::new(config, setup.storage, materializer, |c| {
        plain_backend(choice, c, native)
            .map(KeyedBackend::into_dyn)
            .map_err(StateError::from)
    })?;
    match (restore, how) {
        (Some(r), Some(StoredAs::Changelog)) => {
            let handles = statekit_files(r)?.changelog_handles(r.uid, b.key_group_range())?;
            let stats = b.restore_changelog(&handles, r.mode.may_reference_restored_files())?;
            tracing::debug!(uid = r.uid, ?stats, "changelog restored");
        }
        (Some(_), Some(StoredAs::Native)) => b.delegate_restored(),
        (Some(r), _) => restore_entries(r, &mut b)?,
        (None, _) => {}
    }
    Ok(KeyedBackend::Changelog(Box::new(b)))
}

/// A plain backend of the chosen kind, restored natively from `native` (with whether the
/// restored files may be referenced later) when given.
fn plain_backend(
    choice: &BackendChoice,
    config: BackendConfig,
    native: Option<(RestoreFrom<'_>, bool)>,
) -> Result<KeyedBackend, SnapshotError> {
    Ok(match choice {
        BackendChoice::HashMap => {
            if let Some((r, _)) = native {
                let backend = statekit_files(r)?
                    .native_handles(r.uid, statekit_core::KeyGroupRange::all(config.max_parallelism))?
                    .first()
                    .map(|h| h.handle.backend.clone())
                    .unwrap_or_else(|| "rocksdb".to_string());
                return Err(SnapshotError::NativeNeedsItsBackend {
                    snapshot: r.snapshot.storage().describe(""),
                    backend,
                });
            }
            KeyedBackend::Heap(HashMapBackend::new(config)?)
        }
        #[cfg(feature = "rocksdb")]
        BackendChoice::RocksDb(options) => {
            let mut b = statekit_rocksdb::RocksDbBackend::new(config, options.clone())?;
            if let Some((r, reuse)) = native {
                let handles = statekit_files(r)?.native_handles(r.uid, b.key_group_range())?;
                b.restore_native(&handles, reuse)?;
            }
            KeyedBackend::RocksDb(Box::new(b))
        }
    })
}

/// How the snapshot `r` names stores the operator's keyed state: statekit's files say; every
/// other family is read as entries (restored as canonical state is).
fn stored_how(r: RestoreFrom<'_>) -> Result<StoredAs, SnapshotError> {
    match r.snapshot.statekit_files() {
        Some(files) => stored_as(files, r.uid),
        None => Ok(StoredAs::Canonical),
    }
}

/// statekit's reader of the files of `r`'s snapshot, which native and changelog state (kinds
/// only statekit's own family stores) are restored from.
fn statekit_files(r: RestoreFrom<'_>) -> Result<&statekit_checkpoint::SnapshotReader, SnapshotError> {
    r.snapshot
        .statekit_files()
        .ok_or_else(|| SnapshotError::NotStatekitFiles {
            snapshot: r.snapshot.storage().describe(""),
            what: "native and changelog state".into(),
        })
}

/// Restores the operator's keyed state of `r` into `backend` (any key-group range of the
/// same max parallelism): statekit's canonical files through the checkpoint reader; any
/// other family from its entry streams, the narrow waist.
fn restore_entries(r: RestoreFrom<'_>, backend: &mut dyn KeyedStateBackend) -> Result<(), SnapshotError> {
    if let Some(files) = r.snapshot.statekit_files() {
        return Ok(files.restore_keyed(r.uid, backend)?);
    }
    let op = r.snapshot.operator(r.uid)?;
    if backend.max_parallelism() != op.max_parallelism {
        return Err(CheckpointError::from(InvalidRequest::MaxParallelism {
            uid: r.uid.to_string(),
            snapshot: op.max_parallelism,
            backend: backend.max_parallelism(),
        })
        .into());
    }
    let views = r.snapshot.keyed_views(r.uid, backend.key_group_range())?;
    let views: Vec<&dyn statekit_core::KeyedStateView> = views.iter().map(|v| v.as_ref()).collect();
    backend.restore(&views)?;
    Ok(())
}
