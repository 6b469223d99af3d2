//! `statekit demo wordcount`: the classic word count, written the way an engine embeds
//! statekit — the worked example of the library API, running on `statekit-runtime`.
//!
//! Topology: `source` (parallelism 1, operator list state `offsets` = (input, byte offset))
//! → `counter` (parallelism P, keyed by word: ValueState `count`, ListState
//! `recent-positions`, MapState `followers`) → `sink` (parallelism P, chained to the counter,
//! operator list state `pending-commits` = pre-committed transaction files).
//!
//! A checkpoint N is taken between two records (so state, source offset and sink output are
//! consistent, as with aligned barriers) by the runtime's [`CheckpointCoordinator`]:
//! 1. *synchronous part* (`job::Operators`' [`Checkpointed::snapshot`]): every sink
//!    pre-commits its open transaction, every backend freezes a copy-on-write view
//!    ([`statekit_runtime::KeyedCut::take`]), operator state is copied;
//! 2. *asynchronous part*: the views are written on background threads
//!    ([`statekit_runtime::AsyncSnapshot::write`]);
//! 3. [`statekit_checkpoint::CheckpointStore::complete`] commits `_metadata` atomically — the
//!    checkpoint exists;
//! 4. *notify complete*: sinks commit (rename) their transactions up to N.
//!
//! Restore ([`SnapshotReader`]): keyed state into each new subtask's key-group range (any
//! parallelism), operator state redistributed, then the sink commits what the snapshot
//! recorded as pre-committed and aborts every other pending transaction
//! ([`statekit_runtime::FileSink::recover`]).
//!
//! [`CheckpointCoordinator`]: statekit_runtime::CheckpointCoordinator
//! [`Checkpointed::snapshot`]: statekit_runtime::Checkpointed::snapshot

mod flink_keys;
mod job;
mod source;

pub use job::run;

use anyhow::{bail, Result};
use clap::Args;
use statekit_changelog::{ChangelogConfig, ChangelogStorage, StorageKind};
use statekit_checkpoint::{RestoreMode, SnapshotReader};
use statekit_core::storage::Storage;
use statekit_core::{BackendConfig, StateDescriptor, TypeSchema};
use statekit_snapshot::{open_keyed, BackendChoice, ChangelogSetup, KeyedBackend, RestoreFrom, SnapshotError};
use std::path::PathBuf;
use std::sync::Arc;

const SOURCE_UID: &str = "source";
const COUNTER_UID: &str = "counter";
const SINK_UID: &str = "sink";

/// Arguments of `statekit demo wordcount`.
#[derive(Args, Debug)]
pub struct WordcountArgs {
    /// Print the job's state schema (as `statekit schema --json` writes a snapshot's; the file
    /// `statekit check SNAPSHOT --against` reads) and exit without running.
    #[arg(long)]
    pub print_schema: bool,
    /// Input text file (default: a small built-in text); `-` reads standard input as a
    /// stream, each line processed as it arrives.
    #[arg(long)]
    pub input: Option<PathBuf>,
    /// Read lines from a TCP socket, as Flink's `socketTextStream` (connects to HOST:PORT:
    /// run `nc -lk 9999` first, then type words there), each line processed as it arrives;
    /// checkpoints go on by the interval, SIGTERM stops (with a savepoint if asked).
    #[arg(long, value_name = "HOST:PORT", conflicts_with = "input")]
    pub socket: Option<String>,
    /// Output directory: committed part files are plain files here; pending ones stay in
    /// `.pending/` until their checkpoint completes.
    #[arg(long, default_value = "statekit-data/output")]
    pub output: PathBuf,
    /// Checkpoint base directory (`<dir>/<job-id>/chk-<N>/`).
    #[arg(long, default_value = "statekit-data/checkpoints")]
    pub checkpoint_dir: PathBuf,
    /// Take a checkpoint every N records.
    #[arg(long, default_value_t = 20)]
    pub checkpoint_every: u64,
    /// Also take a checkpoint when this much time passed since the last one (Flink's
    /// `execution.checkpointing.interval`: `10 s`, `1 min`, `500ms`).
    #[arg(long, value_name = "DURATION", value_parser = parse_interval)]
    pub checkpoint_interval: Option<std::time::Duration>,
    /// Completed checkpoints to keep.
    #[arg(long, default_value_t = 3)]
    pub retained_checkpoints: usize,
    /// Parallelism of the counter and sink (`-p` as in `flink run -p`; `parallelism.default`).
    #[arg(long, short = 'p', default_value_t = 2)]
    pub parallelism: u32,
    /// Max parallelism (number of key groups).
    #[arg(long, default_value_t = 128)]
    pub max_parallelism: u32,
    /// Restore from a checkpoint or savepoint (directory or `_metadata`), or `latest`: the
    /// newest complete checkpoint under --checkpoint-dir (none yet: start from scratch).
    /// `-s` as in `flink run -s` (`execution.state-recovery.path`).
    #[arg(long, short = 's', visible_alias = "from-savepoint")]
    pub restore: Option<String>,
    /// Allow a restore that leaves state of the snapshot unrestored: an operator the job
    /// does not have (Flink's `-n`, `--allowNonRestoredState`,
    /// `execution.state-recovery.ignore-unclaimed-state`). Without it such a restore is
    /// refused, as in Flink.
    #[arg(long, short = 'n', visible_alias = "allowNonRestoredState")]
    pub allow_non_restored_state: bool,
    /// Where savepoints go.
    #[arg(long, default_value = "statekit-data/savepoints")]
    pub savepoint_dir: PathBuf,
    /// When the input ends or on SIGTERM, take a savepoint, print its path and exit 0.
    #[arg(long)]
    pub stop_with_savepoint: bool,
    /// Delivery guarantee.
    #[arg(long, value_enum, default_value_t = Guarantee::ExactlyOnce)]
    pub guarantee: Guarantee,
    /// Also print every emitted line to standard output (not transactional).
    #[arg(long)]
    pub echo: bool,
    /// Keyed state backend of the counter.
    #[arg(long, value_enum, default_value_t = BackendKind::Hashmap)]
    pub backend: BackendKind,
    /// Checkpoints: `full` writes the canonical format (any backend); `incremental` uploads
    /// only the RocksDB files new since the last completed checkpoint (needs `--backend
    /// rocksdb`).
    #[arg(long, value_enum, default_value_t = CheckpointType::Full)]
    pub checkpoint_type: CheckpointType,
    /// Savepoints: `canonical` (restores into any backend) or `native` (the RocksDB files,
    /// self-contained; restores into RocksDB only; needs `--backend rocksdb`).
    #[arg(long, value_enum, default_value_t = SavepointFormat::Canonical)]
    pub savepoint_format: SavepointFormat,
    /// Who owns the snapshot given to `--restore`: `claim` (this job deletes it once
    /// subsumed), `no-claim` (never touched, nothing shared with it), `legacy` (never
    /// deleted, its files may be shared).
    #[arg(long, default_value = "no-claim", value_parser = parse_restore_mode)]
    pub restore_mode: RestoreMode,
    /// RocksDB options profile: `default`, `spinning-disk` or `flash-ssd`.
    #[arg(long, default_value = "default")]
    pub rocksdb_profile: String,
    /// Where RocksDB keeps its working databases (default: the system temporary directory).
    #[arg(long)]
    pub rocksdb_dir: Option<PathBuf>,
    /// Turn the changelog on (same as `-D state.changelog.enabled=true`): every state change
    /// is also logged and uploaded continuously, the backend is materialized now and then,
    /// and a checkpoint is the last materialization plus the log since — incremental for
    /// either backend.
    #[arg(long)]
    pub changelog: bool,
    /// A configuration entry under Flink's key names, repeatable, e.g.
    /// `-D state.changelog.periodic-materialize.interval=1min`,
    /// `-D dstl.dfs.upload.max-in-flight=64mb`,
    /// `-D execution.checkpointing.max-concurrent-checkpoints=2`. Wins over --config.
    #[arg(short = 'D', value_name = "KEY=VALUE")]
    pub define: Vec<String>,
    /// A YAML configuration file with Flink's key names (nested maps or flat dotted keys, as
    /// in Flink's `config.yaml`); keys statekit does not use are listed and ignored.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The flags given on the command line (argument ids), which win over the configuration;
    /// filled in by `main` from clap's matches.
    #[arg(skip)]
    pub explicit: Vec<String>,
}

fn parse_interval(s: &str) -> std::result::Result<std::time::Duration, String> {
    statekit_changelog::config::parse_duration(s).map_err(|e| e.to_string())
}

/// The job's settings from `--config`, `-D` and the flags.
struct Settings {
    /// The changelog's configuration, when it is on.
    changelog: Option<ChangelogConfig>,
    /// Checkpoints whose asynchronous part may run at once
    /// (`execution.checkpointing.max-concurrent-checkpoints`, default 1).
    max_concurrent: usize,
}

impl Settings {
    /// The settings from `--config`, `-D` and the flags; Flink's keys that mean a flag set it
    /// unless the flag was given ([`flink_keys::apply`]).
    fn resolve(args: &mut WordcountArgs) -> Result<Self> {
        let mut entries = crate::config::load(args.config.as_deref(), &args.define)?;
        if args.changelog {
            entries.push(crate::config::Entry {
                key: "state.changelog.enabled".into(),
                value: "true".into(),
                origin: "--changelog".into(),
            });
        }
        let (changelog, notes) = ChangelogConfig::from_entries(
            entries
                .iter()
                .map(|e| (e.key.as_str(), e.value.as_str(), e.origin.as_str())),
        )?;
        for n in notes {
            eprintln!("note: {}: {}", n.key, n.note);
        }
        let applied = flink_keys::apply(args, &entries)?;
        let max_concurrent = applied.max_concurrent;
        if !applied.ignored.is_empty() {
            eprintln!(
                "note: ignored {} the word count does not use: {}",
                crate::render::count(applied.ignored.len() as u64, "configuration key"),
                applied
                    .ignored
                    .iter()
                    .map(|(k, why)| format!("{k} ({why})"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        let changelog = changelog.enabled.then_some(changelog);
        if let Some(c) = &changelog {
            if c.storage == StorageKind::Memory {
                bail!(
                    "state.changelog.storage: memory keeps the log inside this process, so no checkpoint could be restored once it exits; use filesystem (the default)"
                );
            }
            if args.checkpoint_type == CheckpointType::Incremental {
                bail!(
                    "--checkpoint-type incremental and the changelog exclude each other: the changelog already makes checkpoints incremental, for either backend"
                );
            }
            if args.savepoint_format == SavepointFormat::Native {
                bail!(
                    "--savepoint-format native needs the RocksDB backend without the changelog (savepoints of a changelog job are canonical)"
                );
            }
            if args.guarantee == Guarantee::AtMostOnce {
                bail!("the changelog needs checkpoints; at-most-once takes none");
            }
        }
        Ok(Settings {
            changelog,
            max_concurrent,
        })
    }
}

fn parse_restore_mode(s: &str) -> std::result::Result<RestoreMode, String> {
    s.parse()
}

/// How checkpoints store keyed state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CheckpointType {
    /// Every checkpoint holds all state in the canonical format.
    Full,
    /// Native RocksDB checkpoints sharing unchanged files with earlier ones.
    Incremental,
}

/// The format of savepoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SavepointFormat {
    /// Backend-independent.
    Canonical,
    /// The backend's own files.
    Native,
}

/// The keyed state backends the demo can run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendKind {
    /// The heap backend (`statekit-hashmap`).
    Hashmap,
    /// The RocksDB backend (`statekit-rocksdb`; needs the `rocksdb` cargo feature, on by default).
    Rocksdb,
}

/// What the changelog backends of a job share: the upload service and where
/// materializations go.
struct ChangelogContext {
    storage: ChangelogStorage,
    job: Arc<dyn Storage>,
    config: ChangelogConfig,
}

/// The plain backend `--backend` and the `--rocksdb-*` flags choose.
fn backend_choice(args: &WordcountArgs) -> Result<BackendChoice> {
    Ok(match args.backend {
        BackendKind::Hashmap => BackendChoice::HashMap,
        #[cfg(feature = "rocksdb")]
        BackendKind::Rocksdb => {
            let profile: statekit_rocksdb::Profile = args
                .rocksdb_profile
                .parse()
                .map_err(|e: String| anyhow::anyhow!("--rocksdb-profile: {e}"))?;
            let mut options = statekit_rocksdb::RocksDbOptions::profile(profile);
            if let Some(dir) = &args.rocksdb_dir {
                options = options.with_local_dir(dir);
            }
            BackendChoice::RocksDb(options)
        }
        #[cfg(not(feature = "rocksdb"))]
        BackendKind::Rocksdb => bail!("this statekit was built without the `rocksdb` feature"),
    })
}

/// The backend of counter subtask `index` (the library's [`open_keyed`]: any snapshot kind
/// restores into any configuration, except native RocksDB files into the heap backend).
fn open_counter(
    choice: &BackendChoice,
    changelog: Option<&ChangelogContext>,
    config: BackendConfig,
    index: u32,
    restore: Option<(&SnapshotReader, RestoreMode)>,
) -> Result<KeyedBackend> {
    let setup = changelog.map(|ctx| ChangelogSetup {
        storage: &ctx.storage,
        job: ctx.job.clone(),
        materialization: ctx.config.materialization.clone(),
        jitter_seed: u64::from(index),
    });
    let from = restore.map(|(reader, mode)| RestoreFrom {
        reader,
        uid: COUNTER_UID,
        mode,
    });
    open_keyed(choice, config, setup, from).map_err(|e| match e {
        SnapshotError::NativeNeedsItsBackend { snapshot, .. } => anyhow::anyhow!(
            "{snapshot} is a native RocksDB snapshot: restore it with --backend rocksdb (or take a canonical savepoint to switch backends)"
        ),
        other => other.into(),
    })
}

/// The delivery guarantee of a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
#[allow(clippy::enum_variant_names)] // the names are the standard terms
pub enum Guarantee {
    /// Checkpoints + two-phase-commit sink: no loss, no duplicates.
    ExactlyOnce,
    /// Checkpoints, sink writes directly: no loss, duplicates after a failure.
    AtLeastOnce,
    /// No checkpoints; the source commits its position ahead of processing: loss after a failure.
    AtMostOnce,
}

impl From<Guarantee> for statekit_runtime::Guarantee {
    fn from(g: Guarantee) -> Self {
        match g {
            Guarantee::ExactlyOnce => statekit_runtime::Guarantee::ExactlyOnce,
            Guarantee::AtLeastOnce => statekit_runtime::Guarantee::AtLeastOnce,
            Guarantee::AtMostOnce => statekit_runtime::Guarantee::AtMostOnce,
        }
    }
}

fn counter_states() -> [StateDescriptor; 3] {
    [
        StateDescriptor::value("count", TypeSchema::Utf8, TypeSchema::I64),
        StateDescriptor::list("recent-positions", TypeSchema::Utf8, TypeSchema::U64),
        StateDescriptor::map("followers", TypeSchema::Utf8, TypeSchema::Utf8, TypeSchema::I64),
    ]
}

/// The state schema this job declares: its three operators and their states.
fn job_schema(p: u32, max_p: u32) -> statekit_migrate::JobSchema {
    use statekit_migrate::schema::{KeyedStateSchema, OperatorSchema, OperatorStateSchema};
    let op = |uid: &str, parallelism: u32, keyed: Vec<KeyedStateSchema>, operator: Vec<OperatorStateSchema>| {
        OperatorSchema {
            uid: uid.to_string(),
            operator_id: Some(statekit_core::OperatorId::from_uid(uid).to_string()),
            max_parallelism: max_p,
            parallelism: Some(parallelism),
            keyed_states: keyed,
            operator_states: operator,
            key_group_scheme: Default::default(),
        }
    };
    statekit_migrate::JobSchema {
        operators: vec![
            op(
                SOURCE_UID,
                1,
                vec![],
                vec![OperatorStateSchema::of(&statekit_runtime::source::offsets_descriptor())],
            ),
            op(
                COUNTER_UID,
                p,
                counter_states().iter().map(KeyedStateSchema::of).collect(),
                vec![],
            ),
            op(
                SINK_UID,
                p,
                vec![],
                vec![OperatorStateSchema::of(
                    &statekit_runtime::sink::pending_commits_descriptor(),
                )],
            ),
        ],
    }
}
