//! A keyed backend of the caller's choice, restored from any snapshot kind.

use crate::error::SnapshotError;
use crate::views::{stored_as, StoredAs};
use statekit_changelog::{
    restore_into, ChangelogBackend, ChangelogStorage, MaterializationPolicy, Materializer, ReplayClock,
};
use statekit_checkpoint::{RestoreMode, SnapshotReader};
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
    /// The opened snapshot.
    pub reader: &'a SnapshotReader,
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
    let how = restore.map(|r| stored_as(r.reader, r.uid)).transpose()?;
    // Keys stay in the key groups the snapshot put them in: the backend takes its rule.
    let config = match restore {
        Some(r) => config.with_key_group_scheme(r.reader.operator(r.uid)?.key_group_scheme),
        None => config,
    };
    let Some(setup) = changelog else {
        return Ok(match (restore, how) {
            (Some(r), Some(StoredAs::Changelog)) => {
                let rc = ReplayClock::new(config.clock.clone());
                let mut b = plain_backend(choice, config.with_clock(rc.clone()), None)?;
                let range = b.as_dyn().key_group_range();
                let handles = r.reader.changelog_handles(r.uid, range)?;
                restore_into(b.as_dyn(), Some(&rc), range, &handles)?;
                rc.follow();
                b
            }
            (Some(r), Some(StoredAs::Native)) => {
                plain_backend(choice, config, Some((r, r.mode.may_reference_restored_files())))?
            }
            (Some(r), _) => {
                let mut b = plain_backend(choice, config, None)?;
                r.reader.restore_keyed(r.uid, b.as_dyn())?;
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
            let handles = r.reader.changelog_handles(r.uid, b.key_group_range())?;
            let stats = b.restore_changelog(&handles, r.mode.may_reference_restored_files())?;
            tracing::debug!(uid = r.uid, ?stats, "changelog restored");
        }
        (Some(_), Some(StoredAs::Native)) => b.delegate_restored(),
        (Some(r), _) => r.reader.restore_keyed(r.uid, &mut b)?,
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
                let backend = r
                    .reader
                    .native_handles(r.uid, statekit_core::KeyGroupRange::all(config.max_parallelism))?
                    .first()
                    .map(|h| h.handle.backend.clone())
                    .unwrap_or_else(|| "rocksdb".to_string());
                return Err(SnapshotError::NativeNeedsItsBackend {
                    snapshot: r.reader.storage().describe(""),
                    backend,
                });
            }
            KeyedBackend::Heap(HashMapBackend::new(config)?)
        }
        #[cfg(feature = "rocksdb")]
        BackendChoice::RocksDb(options) => {
            let mut b = statekit_rocksdb::RocksDbBackend::new(config, options.clone())?;
            if let Some((r, reuse)) = native {
                let handles = r.reader.native_handles(r.uid, b.key_group_range())?;
                b.restore_native(&handles, reuse)?;
            }
            KeyedBackend::RocksDb(Box::new(b))
        }
    })
}
