//! `statekit demo wordcount`: the classic word count, written the way an engine embeds
//! statekit — the worked example of the library API.
//!
//! Topology: `source` (parallelism 1, operator list state `offsets` = (input, byte offset))
//! → `counter` (parallelism P, keyed by word: ValueState `count`, ListState
//! `recent-positions`, MapState `followers`) → `sink` (parallelism P, chained to the counter,
//! operator list state `pending-commits` = pre-committed transaction files).
//!
//! A checkpoint N is taken between two records (so state, source offset and sink output are
//! consistent, as with aligned barriers):
//! 1. *synchronous part*: every sink pre-commits its open transaction, every backend freezes a
//!    copy-on-write view ([`KeyedStateBackend::snapshot`]), operator state is copied;
//! 2. *asynchronous part*: the views are written on background threads
//!    ([`SnapshotWriter::write_subtask`]);
//! 3. [`CheckpointStore::complete`] commits `_metadata` atomically — the checkpoint exists;
//! 4. *notify complete*: sinks commit (rename) their transactions up to N.
//!
//! Restore ([`SnapshotReader`]): keyed state into each new subtask's key-group range (any
//! parallelism), operator state redistributed, then the sink commits what the snapshot
//! recorded as pre-committed and aborts every other pending transaction.

mod flink_keys;
mod sink;
mod source;

pub use sink::Guarantee;

use anyhow::{bail, Context, Result};
use clap::Args;
use sink::FileSink;
use source::WordSource;
use statekit_changelog::{ChangelogConfig, ChangelogCut, ChangelogStorage, StorageKind};
use statekit_checkpoint::{new_job_id, CheckpointStore, RestoreMode, SnapshotReader, SnapshotWriter};
use statekit_core::storage::{LocalStorage, Storage};
use statekit_core::{
    decode_value, key_group_for_key, keygroup, BackendConfig, Codec, KeyedStateBackend, OperatorStateDescriptor,
    OperatorStateHandle, OperatorStateMode, OperatorStateSnapshot, OperatorStateStore, StateDescriptor, StateFunctions,
    StateHandle, TypeSchema, Value,
};
use statekit_snapshot::{open_keyed, BackendChoice, ChangelogSetup, KeyedBackend, RestoreFrom, SnapshotError};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
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
    statekit_changelog::config::parse_duration(s)
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

/// The synchronous part of one subtask's keyed snapshot.
enum Cut {
    View(Arc<dyn statekit_core::KeyedStateView>),
    #[cfg(feature = "rocksdb")]
    Native(statekit_rocksdb::NativeCut, Vec<StateDescriptor>),
    Changelog(ChangelogCut, Vec<StateDescriptor>),
}

struct Counter {
    backend: KeyedBackend,
    count: StateHandle,
    positions: StateHandle,
    followers: StateHandle,
}

fn counter_states() -> [StateDescriptor; 3] {
    [
        StateDescriptor::value("count", TypeSchema::Utf8, TypeSchema::I64),
        StateDescriptor::list("recent-positions", TypeSchema::Utf8, TypeSchema::U64),
        StateDescriptor::map("followers", TypeSchema::Utf8, TypeSchema::Utf8, TypeSchema::I64),
    ]
}

fn offsets_descriptor() -> OperatorStateDescriptor {
    OperatorStateDescriptor {
        name: "offsets".into(),
        mode: OperatorStateMode::List,
        value_schema: TypeSchema::Tuple(vec![TypeSchema::Utf8, TypeSchema::U64]),
        key_schema: None,
    }
}

fn pending_commits_descriptor() -> OperatorStateDescriptor {
    OperatorStateDescriptor {
        name: "pending-commits".into(),
        mode: OperatorStateMode::List,
        value_schema: TypeSchema::Utf8,
        key_schema: None,
    }
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
        }
    };
    statekit_migrate::JobSchema {
        operators: vec![
            op(
                SOURCE_UID,
                1,
                vec![],
                vec![OperatorStateSchema::of(&offsets_descriptor())],
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
                vec![OperatorStateSchema::of(&pending_commits_descriptor())],
            ),
        ],
    }
}

fn encode_offset(input: &str, offset: u64) -> Result<Vec<u8>> {
    let v = Value::Tuple(vec![Value::Str(input.to_string()), Value::U64(offset)]);
    Ok(statekit_core::encode_value(&offsets_descriptor().value_schema, &v)?)
}

fn decode_offset(bytes: &[u8]) -> Result<(String, u64)> {
    match decode_value(&offsets_descriptor().value_schema, bytes)? {
        Value::Tuple(v) => match v.as_slice() {
            [Value::Str(s), Value::U64(o)] => Ok((s.clone(), *o)),
            _ => bail!("source offset state has an unexpected shape"),
        },
        _ => bail!("source offset state has an unexpected shape"),
    }
}

struct Job {
    args: WordcountArgs,
    run_id: String,
    counters: Vec<Counter>,
    sinks: Vec<FileSink>,
    source: WordSource,
    source_state: OperatorStateStore,
    offsets: OperatorStateHandle,
    store: Option<CheckpointStore>,
    next_checkpoint: u64,
    checkpoints: u64,
    buf: Vec<u8>,
    /// Checkpoints whose asynchronous part runs, oldest first.
    in_flight: VecDeque<InFlight>,
    max_concurrent: usize,
    /// Keeps the changelog's upload service alive (and reports its figures at the end).
    changelog: Option<ChangelogContext>,
    /// When the last checkpoint was triggered (for `--checkpoint-interval`).
    last_checkpoint: std::time::Instant,
}

/// A checkpoint between its synchronous part and its completion.
struct InFlight {
    id: u64,
    task: std::thread::JoinHandle<(SnapshotWriter, Result<()>)>,
}

/// Runs the job.
pub fn run(mut args: WordcountArgs) -> Result<ExitCode> {
    args.output = crate::cmd::local_only(&args.output, "--output")?;
    if let Some(p) = &args.input {
        if p.as_os_str() != "-" {
            args.input = Some(crate::cmd::local_only(p, "--input")?);
        }
    }
    // Flink's keys from --config and -D set what their flags did not.
    let settings = Settings::resolve(&mut args)?;
    let (p, max_p) = (args.parallelism, args.max_parallelism);
    keygroup::check_parallelism(p, max_p)?;
    if args.print_schema {
        outln!("{}", serde_json::to_string_pretty(&job_schema(p, max_p))?);
        return Ok(ExitCode::SUCCESS);
    }
    if args.checkpoint_every == 0 {
        bail!("--checkpoint-every must be at least 1");
    }
    if args.backend != BackendKind::Rocksdb {
        if args.checkpoint_type == CheckpointType::Incremental {
            bail!("--checkpoint-type incremental needs --backend rocksdb (the heap backend checkpoints in full; or use --changelog)");
        }
        if args.savepoint_format == SavepointFormat::Native {
            bail!("--savepoint-format native needs --backend rocksdb");
        }
    }
    let source = match &args.socket {
        Some(addr) => WordSource::socket(addr)?,
        None => WordSource::open(args.input.as_deref())?,
    };

    let checkpoint_base = crate::cmd::location(&args.checkpoint_dir)?;
    if args.guarantee == Guarantee::AtMostOnce && checkpoint_base.as_local().is_none() {
        bail!(
            "--guarantee at-most-once keeps its committed offset in a local file under --checkpoint-dir: use a local --checkpoint-dir (not {checkpoint_base})"
        );
    }
    let restore_path = match args.restore.as_deref() {
        None => None,
        Some("latest") => match statekit_snapshot::latest_checkpoint_at(&checkpoint_base)? {
            Some((id, location)) => {
                eprintln!("restoring from checkpoint {id}: {location}");
                Some(PathBuf::from(location.display()))
            }
            None => {
                eprintln!("no complete checkpoint under {checkpoint_base}: starting from scratch");
                None
            }
        },
        Some(path) => Some(PathBuf::from(path)),
    };
    let restored_reader = restore_path
        .as_deref()
        .map(|p| crate::cmd::open_reader(p, &Default::default()))
        .transpose()?;
    if let (Some(r), Some(path)) = (&restored_reader, &restore_path) {
        // As in Flink: state of an operator the job does not have would be lost — refused
        // unless the user says so (-n).
        let unclaimed: Vec<&str> = r
            .metadata()
            .operators
            .iter()
            .map(|o| o.uid.as_str())
            .filter(|u| ![SOURCE_UID, COUNTER_UID, SINK_UID].contains(u))
            .collect();
        if !unclaimed.is_empty() {
            let names = unclaimed
                .iter()
                .map(|u| format!("{u:?}"))
                .collect::<Vec<_>>()
                .join(", ");
            if args.allow_non_restored_state {
                eprintln!(
                    "note: not restored: the state of {} {names} (the word count has no such operator; -n)",
                    crate::render::noun(unclaimed.len() as u64, "operator")
                );
            } else {
                bail!(
                    "cannot map the state of {} {names} in {} to the word count, which has no such operator (its uids: {SOURCE_UID}, {COUNTER_UID}, {SINK_UID}): that state would be lost. Restore anyway with -n (--allow-non-restored-state, Flink's --allowNonRestoredState), or rename the uid first (statekit rewrite --rename-uid OLD=NEW)",
                    crate::render::noun(unclaimed.len() as u64, "operator"),
                    path.display()
                );
            }
        }
    }

    // The checkpoint store of this run, and the changelog's upload service in it.
    let run_id = new_job_id();
    let store = if args.guarantee == Guarantee::AtMostOnce {
        None
    } else {
        let storage = crate::cmd::storage_at(&checkpoint_base)?;
        Some(CheckpointStore::open(storage, &run_id, args.retained_checkpoints)?)
    };
    let changelog = match (&settings.changelog, &store) {
        (Some(cfg), Some(store)) => {
            let job = store.job_storage()?;
            let storage = match &cfg.base_path {
                None => ChangelogStorage::for_job(job.clone(), cfg.upload.clone())?,
                Some(base) => {
                    // Log files outside the job directory: referenced by absolute path on
                    // local disk, by URL on an object store (`s3://…`).
                    let location = crate::cmd::location(base).context("state.changelog.dstl.dfs.base-path")?;
                    let storage = crate::cmd::storage_at(&location)?;
                    ChangelogStorage::new(storage, &run_id, cfg.upload.clone())?
                }
            };
            Some(ChangelogContext {
                storage,
                job,
                config: cfg.clone(),
            })
        }
        _ => None,
    };

    // Keyed state: one backend per counter subtask, owning its key-group range, restored.
    let choice = backend_choice(&args)?;
    let mut counters = Vec::new();
    for i in 0..p {
        let config = BackendConfig::for_subtask(max_p, p, i)?;
        let restore = restored_reader.as_ref().map(|r| (r, args.restore_mode));
        counters.push(open_counter(&choice, changelog.as_ref(), config, i, restore)?);
    }

    // Operator state.
    let mut source_state = OperatorStateStore::new();
    let mut restored_pending: Vec<String> = Vec::new();
    let mut restored_id = 0;
    if let (Some(reader), Some(path)) = (&restored_reader, &restore_path) {
        source_state = OperatorStateStore::from_snapshot(reader.operator_state(SOURCE_UID, 1, 0)?);
        if reader.metadata().operator(SINK_UID).is_some() {
            for snap in reader.operator_states(SINK_UID, p)? {
                let mut s = OperatorStateStore::from_snapshot(snap);
                let h = s.register(pending_commits_descriptor())?;
                for e in s.list(h)? {
                    restored_pending.push(String::decode(e)?);
                }
            }
        }
        restored_id = reader.metadata().checkpoint_id;
        eprintln!(
            "restored {} ({} checkpoint {restored_id}, counter parallelism {} -> {p}, {} mode{})",
            path.display(),
            reader.metadata().format.as_str(),
            reader.operator(COUNTER_UID)?.parallelism,
            args.restore_mode,
            if changelog.is_some() { ", changelog on" } else { "" }
        );
        if let Some(store) = &store {
            store.restored(reader, args.restore_mode)?;
        }
    }
    // States are registered after the restore (a native restore needs a fresh backend);
    // registering again only attaches what snapshots do not hold.
    let counters = counters
        .into_iter()
        .map(|mut backend| -> Result<Counter> {
            let [c, l, m] = counter_states();
            let b = backend.as_dyn();
            let count = b.register(c, StateFunctions::None)?;
            let positions = b.register(l, StateFunctions::None)?;
            let followers = b.register(m, StateFunctions::None)?;
            Ok(Counter {
                backend,
                count,
                positions,
                followers,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let offsets = source_state.register(offsets_descriptor())?;

    // The sink's recovery: commit what the snapshot pre-committed, abort everything else.
    if args.guarantee == Guarantee::ExactlyOnce {
        let (committed, aborted) = sink::recover(&args.output, &restored_pending)?;
        if committed + aborted > 0 {
            eprintln!("sink recovery: {committed} transactions committed, {aborted} aborted");
        }
    }

    let mut source = source;
    let mut start = None;
    for e in source_state.list(offsets)? {
        let (name, off) = decode_offset(e)?;
        if name == source.name {
            start = Some(off);
        }
    }
    if start.is_none() && args.guarantee == Guarantee::AtMostOnce {
        start = read_auto_committed_offset(&args.checkpoint_dir, &source.name)?;
    }
    if source.is_stream() {
        if let Some(s) = start {
            eprintln!(
                "note: {} is a stream: it cannot replay what it sent before (restored offset {s}); counting goes on with new input",
                source.name
            );
        }
    }
    source.seek(start.unwrap_or(0));

    let next_checkpoint = restored_id + 1;
    let sinks = (0..p)
        .map(|i| FileSink::new(&args.output, i, &run_id[..6], args.guarantee, next_checkpoint))
        .collect::<Result<Vec<_>>>()?;
    let mut job = Job {
        args,
        run_id,
        counters,
        sinks,
        source,
        source_state,
        offsets,
        store,
        next_checkpoint,
        checkpoints: 0,
        buf: Vec::new(),
        in_flight: VecDeque::new(),
        max_concurrent: settings.max_concurrent,
        last_checkpoint: std::time::Instant::now(),
        changelog,
    };
    let code = job.run_loop()?;
    job.shutdown();
    Ok(code)
}

fn auto_commit_path(base: &Path, input: &str) -> PathBuf {
    let id = statekit_core::OperatorId::from_uid(input);
    base.join("at-most-once").join(format!("{id}.offset"))
}

fn read_auto_committed_offset(base: &Path, input: &str) -> Result<Option<u64>> {
    let p = auto_commit_path(base, input);
    match std::fs::read(&p) {
        Ok(b) => {
            let arr: [u8; 8] = b
                .as_slice()
                .try_into()
                .map_err(|_| anyhow::anyhow!("{}: expected 8 bytes", p.display()))?;
            Ok(Some(u64::from_be_bytes(arr)))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", p.display())),
    }
}

impl Job {
    fn owner(&self, key: &[u8]) -> usize {
        let (p, max_p) = (self.args.parallelism, self.args.max_parallelism);
        keygroup::subtask_for_key_group(max_p, p, key_group_for_key(key, max_p)) as usize
    }

    /// One record through counter and sink.
    fn process(&mut self, word: &str, position: u64) -> Result<()> {
        let key = word.as_bytes();
        let o = self.owner(key);
        let c = &mut self.counters[o];
        let (count_h, positions_h) = (c.count, c.positions);
        let b = c.backend.as_dyn();
        let count = if b.get(count_h, key, &[], &mut self.buf)? {
            i64::decode(&self.buf)? + 1
        } else {
            1
        };
        b.put(count_h, key, &[], &count.to_bytes())?;
        // The last three positions of the word.
        let mut recent = b.list_get(positions_h, key, &[])?;
        recent.push(position.to_bytes());
        let keep: Vec<&[u8]> = recent.iter().rev().take(3).rev().map(Vec::as_slice).collect();
        b.list_update(positions_h, key, &[], &keep)?;
        let line = format!("({word},{count})");
        if self.args.echo {
            outln!("{line}");
        }
        self.sinks[o].write_line(&line)
    }

    /// How often the word `prev` was followed by `word`.
    fn count_follower(&mut self, prev: &str, word: &str) -> Result<()> {
        let pk = prev.as_bytes();
        let o = self.owner(pk);
        let c = &mut self.counters[o];
        let followers = c.followers;
        let b = c.backend.as_dyn();
        let n = if b.map_get(followers, pk, &[], word.as_bytes(), &mut self.buf)? {
            i64::decode(&self.buf)? + 1
        } else {
            1
        };
        b.map_put(followers, pk, &[], word.as_bytes(), &n.to_bytes())?;
        Ok(())
    }

    fn run_loop(&mut self) -> Result<ExitCode> {
        let stop = Arc::new(AtomicBool::new(false));
        signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone())
            .context("cannot install the SIGTERM handler")?;
        // Ctrl-C stops as SIGTERM does (a last checkpoint, or the savepoint); a second one
        // ends the process at once (exit 130).
        signal_hook::flag::register_conditional_shutdown(signal_hook::consts::SIGINT, 130, stop.clone())
            .and_then(|_| signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone()))
            .context("cannot install the SIGINT handler")?;
        let every = self.args.checkpoint_every;
        let mut records = 0u64;
        let mut prev: Option<String> = None;
        let at_most_once = self.args.guarantee == Guarantee::AtMostOnce;
        let mut batch_end = 0u64;
        // A bar of the input's bytes when it is large (standard error, on a terminal only).
        let progress = match self.source.len() {
            Some(n) if n >= 8 << 20 => crate::progress::Progress::bytes("counting words", n),
            Some(_) => crate::progress::Progress::spinner("counting words"),
            None => crate::progress::Progress::counter("counting words from a stream", "words"),
        };
        loop {
            if stop.load(Ordering::SeqCst) {
                drop(progress);
                eprintln!("SIGTERM (or Ctrl-C): stopping");
                break;
            }
            if at_most_once && records == batch_end {
                // Like a consumer with auto-commit: the position after the next batch is
                // committed before the batch is processed.
                self.auto_commit_ahead(every)?;
                batch_end += every;
            }
            let position = self.source.offset();
            let word = match self.source.next(std::time::Duration::from_millis(100))? {
                source::Next::Word(w) => w,
                source::Next::End => break,
                // A stream with nothing new: checkpoints still go by the interval.
                source::Next::Idle => {
                    let due = self
                        .args
                        .checkpoint_interval
                        .is_some_and(|d| self.last_checkpoint.elapsed() >= d);
                    if !at_most_once && due {
                        self.checkpoint(false)?;
                    }
                    self.maintain()?;
                    continue;
                }
            };
            if records.is_multiple_of(4096) {
                match self.source.len() {
                    Some(_) => progress.set(self.source.offset()),
                    None => progress.set(records),
                }
            }
            self.process(&word, position)?;
            if let Some(p) = &prev {
                let p = p.clone();
                self.count_follower(&p, &word)?;
            }
            prev = Some(word);
            records += 1;
            let offset = self.source.offset();
            let name = self.source.name.clone();
            self.source_state
                .list_update(self.offsets, vec![encode_offset(&name, offset)?])?;
            let interval_due = self
                .args
                .checkpoint_interval
                .is_some_and(|d| self.last_checkpoint.elapsed() >= d);
            if !at_most_once && (records.is_multiple_of(every) || interval_due) {
                self.checkpoint(false)?;
            }
            if records.is_multiple_of(64) {
                self.maintain()?;
            }
        }
        // Every checkpoint still running completes before the last snapshot.
        self.drain()?;
        let finished = !stop.load(Ordering::SeqCst);
        let mut savepoint = None;
        if self.args.stop_with_savepoint {
            // A savepoint needs no checkpointing (as in Flink): at-most-once takes one too.
            savepoint = Some(self.savepoint(finished)?);
        } else if at_most_once {
            for s in self.sinks.iter_mut() {
                s.flush()?;
            }
        } else if finished {
            // Final checkpoint: commits the last output; the source is recorded as finished.
            self.checkpoint(true)?;
        } else {
            // SIGTERM without --stop-with-savepoint: a last checkpoint keeps the output.
            self.checkpoint(false)?;
        }
        eprintln!(
            "processed {} from {}; {} under {}; output in {}",
            crate::render::count(records, "word"),
            self.source.name,
            crate::render::count(self.checkpoints, "checkpoint"),
            self.args.checkpoint_dir.join(&self.run_id).display(),
            self.args.output.display()
        );
        if let Some(cl) = &self.changelog {
            let st = cl.storage.stats();
            eprintln!(
                "changelog: {} change sets uploaded in {} files ({} bytes), {} failed attempts, {} unreferenced files deleted",
                st.change_sets, st.files, st.bytes, st.failed_attempts, st.deleted_files
            );
        }
        if let Some(path) = savepoint {
            // One line for a person; for `sp=$(statekit demo wordcount …)` standard output
            // holds the path alone (and standard error still says what it is).
            use std::io::IsTerminal;
            if std::io::stdout().is_terminal() {
                outln!("savepoint: {}", path.display());
            } else {
                eprintln!("savepoint: {}", path.display());
                outln!("{}", path.display());
            }
        }
        Ok(ExitCode::SUCCESS)
    }

    fn auto_commit_ahead(&self, every: u64) -> Result<()> {
        // A stream cannot be read ahead (nor replayed): its position as it is.
        let ahead = if self.source.is_stream() {
            self.source.offset()
        } else {
            let mut probe = WordSource::open(self.args.input.as_deref())?;
            probe.seek(self.source.offset());
            for _ in 0..every {
                if probe.next_word().is_none() {
                    break;
                }
            }
            probe.offset()
        };
        let path = auto_commit_path(&self.args.checkpoint_dir, &self.source.name);
        let dir = path.parent().unwrap_or(Path::new("."));
        let storage = LocalStorage::new(dir);
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default();
        storage.put_atomic(&name, &ahead.to_be_bytes())?;
        Ok(())
    }

    /// Lets changelog backends start a due materialization and apply finished ones; completes
    /// checkpoints whose asynchronous part is done.
    fn maintain(&mut self) -> Result<()> {
        for c in self.counters.iter_mut() {
            if let KeyedBackend::Changelog(b) = &mut c.backend {
                b.poll()?;
            }
        }
        while self.in_flight.front().is_some_and(|f| f.task.is_finished()) {
            self.complete_oldest()?;
        }
        Ok(())
    }

    /// The synchronous part of snapshot `writer` (sinks pre-commit, backends cut, operator
    /// state copied); what it returns writes the rest, on any thread.
    fn sync_part(&mut self, writer: &SnapshotWriter, source_finished: bool) -> Result<AsyncPart> {
        let id = writer.checkpoint_id();
        let (p, max_p) = (self.args.parallelism, self.args.max_parallelism);
        writer.register_operator(SOURCE_UID, 1, max_p)?;
        writer.register_operator(COUNTER_UID, p, max_p)?;
        writer.register_operator(SINK_UID, p, max_p)?;
        let mut sinks = Vec::with_capacity(self.sinks.len());
        for s in self.sinks.iter_mut() {
            let mut st = OperatorStateStore::new();
            let h = st.register(pending_commits_descriptor())?;
            st.list_update(h, s.pre_commit(id)?.iter().map(|n| n.to_bytes()).collect())?;
            sinks.push(st.snapshot());
        }
        let checkpoint = writer.kind() == statekit_format::SnapshotKind::Checkpoint;
        let native = if checkpoint {
            self.args.checkpoint_type == CheckpointType::Incremental
        } else {
            self.args.savepoint_format == SavepointFormat::Native
        };
        let cuts = self
            .counters
            .iter_mut()
            .map(|c| -> Result<Cut> {
                match &mut c.backend {
                    KeyedBackend::Changelog(b) if checkpoint => {
                        let states = b.descriptors();
                        return Ok(Cut::Changelog(b.checkpoint(id)?, states));
                    }
                    #[cfg(feature = "rocksdb")]
                    KeyedBackend::RocksDb(b) if native => {
                        let cut = b.native_snapshot(id)?;
                        return Ok(Cut::Native(cut, b.descriptors()));
                    }
                    _ if native => bail!("native snapshots need the RocksDB backend without the changelog"),
                    _ => {}
                }
                Ok(Cut::View(c.backend.as_dyn().snapshot(id)?))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(AsyncPart {
            cuts,
            sinks,
            source: self.source_state.snapshot(),
            source_finished,
        })
    }

    fn notify_complete(&mut self, id: u64, subsumed: &[u64]) -> Result<()> {
        for c in self.counters.iter_mut() {
            let b = c.backend.as_dyn();
            b.notify_checkpoint_complete(id)?;
            for s in subsumed {
                b.notify_checkpoint_subsumed(*s)?;
            }
        }
        for s in self.sinks.iter_mut() {
            s.commit_up_to(id)?;
        }
        Ok(())
    }

    /// Takes checkpoint N: its synchronous part now, its asynchronous part on a thread of its
    /// own while processing goes on; up to `max_concurrent` may run at once (the oldest is
    /// waited for beyond that). A final checkpoint (`source_finished`) completes before this
    /// returns.
    fn checkpoint(&mut self, source_finished: bool) -> Result<()> {
        while self.in_flight.len() >= self.max_concurrent {
            self.complete_oldest()?;
        }
        let id = self.next_checkpoint;
        self.next_checkpoint += 1;
        self.last_checkpoint = std::time::Instant::now();
        let store = self.store.clone().context("checkpoints are off")?;
        let writer = store.begin(id)?;
        let part = match self.sync_part(&writer, source_finished) {
            Ok(p) => p,
            Err(e) => {
                self.abort(&store, writer, id)?;
                return Err(e.context(format!("checkpoint {id} failed")));
            }
        };
        let task = std::thread::Builder::new()
            .name(format!("checkpoint-{id}"))
            .spawn(move || {
                let r = part.write(&writer);
                (writer, r)
            })
            .context("cannot start a checkpoint thread")?;
        self.in_flight.push_back(InFlight { id, task });
        if source_finished {
            self.drain()?;
        }
        Ok(())
    }

    /// Waits for the oldest running checkpoint and completes it (or aborts it and fails).
    fn complete_oldest(&mut self) -> Result<()> {
        let Some(f) = self.in_flight.pop_front() else {
            return Ok(());
        };
        let store = self.store.clone().context("checkpoints are off")?;
        let (writer, result) = f
            .task
            .join()
            .map_err(|_| anyhow::anyhow!("checkpoint {}: its thread panicked", f.id))?;
        if let Err(e) = result {
            // Nothing of a failed checkpoint stays: its directory and new shared files go.
            self.abort(&store, writer, f.id)?;
            return Err(e.context(format!("checkpoint {} failed", f.id)));
        }
        let (done, subsumed) = store.complete(writer)?;
        self.checkpoints += 1;
        self.notify_complete(done.id, &subsumed)
    }

    /// Completes every running checkpoint.
    fn drain(&mut self) -> Result<()> {
        while !self.in_flight.is_empty() {
            self.complete_oldest()?;
        }
        Ok(())
    }

    fn abort(&mut self, store: &CheckpointStore, writer: SnapshotWriter, id: u64) -> Result<()> {
        store.abort(writer)?;
        for c in self.counters.iter_mut() {
            c.backend.as_dyn().notify_checkpoint_aborted(id)?;
        }
        Ok(())
    }

    /// Releases the backends (a changelog backend waits for a running materialization and
    /// deletes what no completed checkpoint references).
    fn shutdown(&mut self) {
        for c in self.counters.iter_mut() {
            c.backend.as_dyn().dispose();
        }
    }

    fn savepoint(&mut self, source_finished: bool) -> Result<PathBuf> {
        let id = self.next_checkpoint;
        self.next_checkpoint += 1;
        let base = crate::cmd::location(&self.args.savepoint_dir)?;
        let storage = crate::cmd::storage_at(&base)?;
        let writer = SnapshotWriter::new_savepoint(storage, "", &self.run_id, id)?;
        let dir = writer.dir().to_string();
        self.sync_part(&writer, source_finished)?.write(&writer)?;
        writer.finish()?;
        self.notify_complete(id, &[])?;
        Ok(PathBuf::from(base.join(&dir).display()))
    }
}

/// The asynchronous part of a snapshot: writes the cuts and operator state into the writer.
struct AsyncPart {
    cuts: Vec<Cut>,
    sinks: Vec<OperatorStateSnapshot>,
    source: OperatorStateSnapshot,
    source_finished: bool,
}

impl AsyncPart {
    /// Writes every subtask (one thread each) and the source.
    fn write(self, writer: &SnapshotWriter) -> Result<()> {
        let AsyncPart {
            cuts,
            sinks,
            source,
            source_finished,
        } = self;
        std::thread::scope(|scope| -> Result<()> {
            let handles: Vec<_> = cuts
                .into_iter()
                .zip(sinks)
                .enumerate()
                .map(|(i, (cut, sink))| {
                    scope.spawn(move || -> Result<()> {
                        let i = i as u32;
                        match cut {
                            Cut::View(v) => {
                                writer.write_subtask(COUNTER_UID, i, Some(v.as_ref()), None, false)?;
                            }
                            #[cfg(feature = "rocksdb")]
                            Cut::Native(cut, states) => {
                                let handle = cut.upload(&writer.native_target(COUNTER_UID, i)?)?;
                                writer.add_native_subtask(COUNTER_UID, i, handle, states, None, false)?;
                            }
                            Cut::Changelog(cut, states) => {
                                // The tail is mostly uploaded already: this waits for the rest.
                                let handle = cut.finish()?;
                                writer.add_changelog_subtask(COUNTER_UID, i, handle, states, None, false)?;
                            }
                        }
                        writer.write_subtask(SINK_UID, i, None, Some(&sink), false)?;
                        Ok(())
                    })
                })
                .collect();
            writer.write_subtask(SOURCE_UID, 0, None, Some(&source), source_finished)?;
            for h in handles {
                h.join().map_err(|_| anyhow::anyhow!("snapshot thread panicked"))??;
            }
            Ok(())
        })
    }
}
