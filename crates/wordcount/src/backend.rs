//! The counter's keyed backends: which one the settings choose, the changelog around it, and
//! each subtask's backend opened (and restored).

use crate::{BackendKind, Settings, WordcountError, COUNTER_UID};
use statekit_changelog::{ChangelogConfig, ChangelogStorage};
use statekit_checkpoint::RestoreMode;
use statekit_core::storage::Storage;
use statekit_core::BackendConfig;
use statekit_snapshot::{
    open_keyed, BackendChoice, ChangelogSetup, KeyedBackend, RestoreFrom, Snapshot, SnapshotError,
};
use std::sync::Arc;

/// What the changelog backends of a job share: the upload service and where
/// materializations go.
pub(crate) struct ChangelogContext {
    pub(crate) storage: ChangelogStorage,
    pub(crate) job: Arc<dyn Storage>,
    pub(crate) config: ChangelogConfig,
}

/// The plain backend [`Settings::backend`] and the `rocksdb_*` settings choose.
pub(crate) fn backend_choice(args: &Settings) -> Result<BackendChoice, WordcountError> {
    Ok(match args.backend {
        BackendKind::Hashmap => BackendChoice::HashMap,
        #[cfg(feature = "rocksdb")]
        BackendKind::Rocksdb => {
            let profile: statekit_rocksdb::Profile =
                args.rocksdb_profile.parse().map_err(WordcountError::RocksDbProfile)?;
            let mut options = statekit_rocksdb::RocksDbOptions::profile(profile);
            if let Some(dir) = &args.rocksdb_dir {
                options = options.with_local_dir(dir);
            }
            BackendChoice::RocksDb(options)
        }
        #[cfg(not(feature = "rocksdb"))]
        BackendKind::Rocksdb => return Err(WordcountError::NoRocksDb),
    })
}

/// The backend of counter subtask `index` (the library's [`open_keyed`]: any snapshot kind
/// restores into any configuration, except native RocksDB files into the heap backend).
pub(crate) fn open_counter(
    choice: &BackendChoice,
    changelog: Option<&ChangelogContext>,
    config: BackendConfig,
    index: u32,
    restore: Option<(&Snapshot, RestoreMode)>,
) -> Result<KeyedBackend, WordcountError> {
    let setup = changelog.map(|ctx| ChangelogSetup {
        storage: &ctx.storage,
        job: ctx.job.clone(),
        materialization: ctx.config.materialization.clone(),
        jitter_seed: u64::from(index),
    });
    let from = restore.map(|(snapshot, mode)| RestoreFrom {
        snapshot,
        uid: COUNTER_UID,
        mode,
    });
    open_keyed(choice, config, setup, from).map_err(|e| match e {
        SnapshotError::NativeNeedsItsBackend { snapshot, .. } => WordcountError::NativeNeedsRocksDb { snapshot },
        other => other.into(),
    })
}
