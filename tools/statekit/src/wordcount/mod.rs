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

mod sink;
mod source;

pub use sink::Guarantee;

use anyhow::{bail, Context, Result};
use clap::Args;
use sink::FileSink;
use source::WordSource;
use statekit_checkpoint::{new_job_id, CheckpointStore, RestoreMode, SnapshotReader, SnapshotWriter};
use statekit_core::storage::{LocalStorage, Storage};
use statekit_core::{
    decode_value, key_group_for_key, keygroup, BackendConfig, Codec, KeyedStateBackend, OperatorStateDescriptor,
    OperatorStateHandle, OperatorStateMode, OperatorStateSnapshot, OperatorStateStore, StateDescriptor, StateFunctions,
    StateHandle, TypeSchema, Value,
};
use statekit_hashmap::HashMapBackend;
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
    /// Input text file (default: a small built-in text).
    #[arg(long)]
    pub input: Option<PathBuf>,
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
    /// Completed checkpoints to keep.
    #[arg(long, default_value_t = 3)]
    pub retained_checkpoints: usize,
    /// Parallelism of the counter and sink.
    #[arg(long, default_value_t = 2)]
    pub parallelism: u32,
    /// Max parallelism (number of key groups).
    #[arg(long, default_value_t = 128)]
    pub max_parallelism: u32,
    /// Restore from a checkpoint or savepoint (directory or `_metadata`), or `latest`: the
    /// newest complete checkpoint under --checkpoint-dir (none yet: start from scratch).
    #[arg(long)]
    pub restore: Option<String>,
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

/// The keyed state backend of one counter subtask.
enum Keyed {
    Heap(HashMapBackend),
    #[cfg(feature = "rocksdb")]
    RocksDb(Box<statekit_rocksdb::RocksDbBackend>),
}

impl Keyed {
    /// A backend of the chosen kind for one subtask. Canonical snapshots restore into either
    /// kind, so a job may switch backends through a savepoint.
    fn new(args: &WordcountArgs, config: BackendConfig) -> Result<Self> {
        Ok(match args.backend {
            BackendKind::Hashmap => Keyed::Heap(HashMapBackend::new(config)?),
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
                Keyed::RocksDb(Box::new(statekit_rocksdb::RocksDbBackend::new(config, options)?))
            }
            #[cfg(not(feature = "rocksdb"))]
            BackendKind::Rocksdb => bail!("this statekit was built without the `rocksdb` feature"),
        })
    }

    fn as_dyn(&mut self) -> &mut dyn KeyedStateBackend {
        match self {
            Keyed::Heap(b) => b,
            #[cfg(feature = "rocksdb")]
            Keyed::RocksDb(b) => b.as_mut(),
        }
    }

    /// Restores operator `uid`'s keyed state from `reader`: native RocksDB files into a
    /// RocksDB backend (reusing them in later incremental checkpoints when `mode` allows),
    /// the canonical format into either kind.
    fn restore(&mut self, reader: &SnapshotReader, uid: &str, mode: RestoreMode) -> Result<()> {
        if reader.is_native(uid)? {
            #[cfg(feature = "rocksdb")]
            if let Keyed::RocksDb(b) = self {
                let handles = reader.native_handles(uid, b.key_group_range())?;
                b.restore_native(&handles, mode.may_reference_restored_files())?;
                return Ok(());
            }
            let _ = mode;
            bail!(
                "{} is a native RocksDB snapshot: restore it with --backend rocksdb (or take a canonical savepoint to switch backends)",
                reader.storage().describe("")
            );
        }
        reader.restore_keyed(uid, self.as_dyn())?;
        Ok(())
    }
}

/// The synchronous part of one subtask's keyed snapshot.
enum Cut {
    View(Arc<dyn statekit_core::KeyedStateView>),
    #[cfg(feature = "rocksdb")]
    Native(statekit_rocksdb::NativeCut, Vec<StateDescriptor>),
}

struct Counter {
    backend: Keyed,
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

/// The newest complete checkpoint under a checkpoint base directory (any job).
pub fn latest_checkpoint(base: &Path) -> Result<Option<(u64, PathBuf)>> {
    let mut best: Option<(i64, u64, PathBuf)> = None;
    let Ok(rd) = std::fs::read_dir(base) else {
        return Ok(None);
    };
    let storage: Arc<dyn Storage> = Arc::new(LocalStorage::new(base));
    for job in rd.filter_map(|e| e.ok()).filter(|e| e.path().is_dir()) {
        let job_id = job.file_name().to_string_lossy().to_string();
        if job_id.starts_with('.') || job_id == "at-most-once" {
            continue;
        }
        let store = CheckpointStore::open(storage.clone(), &job_id, 1)?;
        if let Some(c) = store.latest_completed()? {
            let key = (c.metadata.timestamp_ms, c.id);
            if best.as_ref().is_none_or(|b| (b.0, b.1) < key) {
                best = Some((key.0, key.1, base.join(&c.dir)));
            }
        }
    }
    Ok(best.map(|(_, id, p)| (id, p)))
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
}

/// Runs the job.
pub fn run(args: WordcountArgs) -> Result<ExitCode> {
    let (p, max_p) = (args.parallelism, args.max_parallelism);
    keygroup::check_parallelism(p, max_p)?;
    if args.checkpoint_every == 0 {
        bail!("--checkpoint-every must be at least 1");
    }
    if args.backend != BackendKind::Rocksdb {
        if args.checkpoint_type == CheckpointType::Incremental {
            bail!("--checkpoint-type incremental needs --backend rocksdb (the heap backend checkpoints in full)");
        }
        if args.savepoint_format == SavepointFormat::Native {
            bail!("--savepoint-format native needs --backend rocksdb");
        }
    }
    let source = WordSource::open(args.input.as_deref())?;

    // Keyed state: one backend per counter subtask, owning its key-group range.
    let mut counters = Vec::new();
    for i in 0..p {
        counters.push(Keyed::new(&args, BackendConfig::for_subtask(max_p, p, i)?)?);
    }

    // Restore, if asked.
    let mut source_state = OperatorStateStore::new();
    let mut restored_pending: Vec<String> = Vec::new();
    let mut restored_id = 0;
    let restore_path = match args.restore.as_deref() {
        None => None,
        Some("latest") => match latest_checkpoint(&args.checkpoint_dir)? {
            Some((id, path)) => {
                eprintln!("restoring from checkpoint {id}: {}", path.display());
                Some(path)
            }
            None => {
                eprintln!(
                    "no complete checkpoint under {}: starting from scratch",
                    args.checkpoint_dir.display()
                );
                None
            }
        },
        Some(path) => Some(PathBuf::from(path)),
    };
    let mut restored_reader = None;
    if let Some(path) = &restore_path {
        let reader = SnapshotReader::open(path)?;
        for c in counters.iter_mut() {
            c.restore(&reader, COUNTER_UID, args.restore_mode)?;
        }
        source_state = OperatorStateStore::from_snapshot(reader.operator_state(SOURCE_UID, 1, 0)?);
        if reader.metadata().operator(SINK_UID).is_some() {
            for i in 0..p {
                let snap = reader.operator_state(SINK_UID, p, i)?;
                let mut s = OperatorStateStore::from_snapshot(snap);
                let h = s.register(pending_commits_descriptor())?;
                for e in s.list(h)? {
                    restored_pending.push(String::decode(e)?);
                }
            }
        }
        restored_id = reader.metadata().checkpoint_id;
        eprintln!(
            "restored {} ({} checkpoint {restored_id}, counter parallelism {} -> {p}, {} mode)",
            path.display(),
            reader.metadata().format.as_str(),
            reader.operator(COUNTER_UID)?.parallelism,
            args.restore_mode
        );
        restored_reader = Some(reader);
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
    source.seek(start.unwrap_or(0));

    let run_id = new_job_id();
    let store = if args.guarantee == Guarantee::AtMostOnce {
        None
    } else {
        let storage: Arc<dyn Storage> = Arc::new(LocalStorage::new(&args.checkpoint_dir));
        let store = CheckpointStore::open(storage, &run_id, args.retained_checkpoints)?;
        if let Some(reader) = &restored_reader {
            store.restored(reader, args.restore_mode)?;
        }
        Some(store)
    };
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
    };
    job.run_loop()
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
            println!("{line}");
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
        let every = self.args.checkpoint_every;
        let mut records = 0u64;
        let mut prev: Option<String> = None;
        let at_most_once = self.args.guarantee == Guarantee::AtMostOnce;
        let mut batch_end = 0u64;
        loop {
            if stop.load(Ordering::SeqCst) {
                eprintln!("SIGTERM: stopping");
                break;
            }
            if at_most_once && records == batch_end {
                // Like a consumer with auto-commit: the position after the next batch is
                // committed before the batch is processed.
                self.auto_commit_ahead(every)?;
                batch_end += every;
            }
            let position = self.source.offset();
            let Some(word) = self.source.next_word() else {
                break;
            };
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
            if !at_most_once && records % every == 0 {
                self.checkpoint(false)?;
            }
        }
        let finished = !stop.load(Ordering::SeqCst);
        let mut savepoint = None;
        if at_most_once {
            for s in self.sinks.iter_mut() {
                s.flush()?;
            }
        } else if self.args.stop_with_savepoint {
            savepoint = Some(self.savepoint(finished)?);
        } else if finished {
            // Final checkpoint: commits the last output; the source is recorded as finished.
            self.checkpoint(true)?;
        } else {
            // SIGTERM without --stop-with-savepoint: a last checkpoint keeps the output.
            self.checkpoint(false)?;
        }
        eprintln!(
            "processed {records} words from {}; {} checkpoints under {}; output in {}",
            self.source.name,
            self.checkpoints,
            self.args.checkpoint_dir.join(&self.run_id).display(),
            self.args.output.display()
        );
        if let Some(path) = savepoint {
            eprintln!("savepoint:");
            println!("{}", path.display());
        }
        Ok(ExitCode::SUCCESS)
    }

    fn auto_commit_ahead(&self, every: u64) -> Result<()> {
        let mut probe = WordSource::open(self.args.input.as_deref())?;
        probe.seek(self.source.offset());
        for _ in 0..every {
            if probe.next_word().is_none() {
                break;
            }
        }
        let path = auto_commit_path(&self.args.checkpoint_dir, &self.source.name);
        let dir = path.parent().unwrap_or(Path::new("."));
        let storage = LocalStorage::new(dir);
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default();
        storage.put_atomic(&name, &probe.offset().to_be_bytes())?;
        Ok(())
    }

    /// The synchronous part and the writing of one snapshot into `writer`.
    fn write_snapshot(&mut self, writer: &SnapshotWriter, source_finished: bool) -> Result<()> {
        let id = writer.checkpoint_id();
        let (p, max_p) = (self.args.parallelism, self.args.max_parallelism);
        writer.register_operator(SOURCE_UID, 1, max_p)?;
        writer.register_operator(COUNTER_UID, p, max_p)?;
        writer.register_operator(SINK_UID, p, max_p)?;
        // Synchronous part: pre-commit sinks, freeze backends, copy operator state.
        let mut sink_states = Vec::with_capacity(self.sinks.len());
        for s in self.sinks.iter_mut() {
            let mut st = OperatorStateStore::new();
            let h = st.register(pending_commits_descriptor())?;
            st.list_update(h, s.pre_commit(id)?.iter().map(|n| n.to_bytes()).collect())?;
            sink_states.push(st.snapshot());
        }
        let native = match writer.kind() {
            statekit_format::SnapshotKind::Checkpoint => self.args.checkpoint_type == CheckpointType::Incremental,
            statekit_format::SnapshotKind::Savepoint => self.args.savepoint_format == SavepointFormat::Native,
        };
        let views = self
            .counters
            .iter_mut()
            .map(|c| -> Result<Cut> {
                #[cfg(feature = "rocksdb")]
                if let (true, Keyed::RocksDb(b)) = (native, &mut c.backend) {
                    let cut = b.native_snapshot(id)?;
                    return Ok(Cut::Native(cut, b.descriptors()));
                }
                if native {
                    bail!("native snapshots need the RocksDB backend");
                }
                Ok(Cut::View(c.backend.as_dyn().snapshot(id)?))
            })
            .collect::<Result<Vec<_>>>()?;
        let source_snapshot: OperatorStateSnapshot = self.source_state.snapshot();
        // Asynchronous part: write files on background threads.
        std::thread::scope(|scope| -> Result<()> {
            let handles: Vec<_> = views
                .iter()
                .zip(&sink_states)
                .enumerate()
                .map(|(i, (v, sink))| {
                    scope.spawn(move || -> Result<()> {
                        let i = i as u32;
                        match v {
                            Cut::View(v) => {
                                writer.write_subtask(COUNTER_UID, i, Some(v.as_ref()), None, false)?;
                            }
                            #[cfg(feature = "rocksdb")]
                            Cut::Native(cut, states) => {
                                let handle = cut.upload(&writer.native_target(COUNTER_UID, i)?)?;
                                writer.add_native_subtask(COUNTER_UID, i, handle, states.clone(), None, false)?;
                            }
                        }
                        writer.write_subtask(SINK_UID, i, None, Some(sink), false)?;
                        Ok(())
                    })
                })
                .collect();
            writer.write_subtask(SOURCE_UID, 0, None, Some(&source_snapshot), source_finished)?;
            for h in handles {
                h.join().map_err(|_| anyhow::anyhow!("snapshot thread panicked"))??;
            }
            Ok(())
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

    fn checkpoint(&mut self, source_finished: bool) -> Result<()> {
        let id = self.next_checkpoint;
        self.next_checkpoint += 1;
        let store = self.store.clone().context("checkpoints are off")?;
        let writer = store.begin(id)?;
        if let Err(e) = self.write_snapshot(&writer, source_finished) {
            // Nothing of a failed checkpoint stays: its directory and new shared files go.
            store.abort(writer)?;
            for c in self.counters.iter_mut() {
                c.backend.as_dyn().notify_checkpoint_aborted(id)?;
            }
            return Err(e.context(format!("checkpoint {id} failed")));
        }
        let (done, subsumed) = store.complete(writer)?;
        self.checkpoints += 1;
        self.notify_complete(done.id, &subsumed)
    }

    fn savepoint(&mut self, source_finished: bool) -> Result<PathBuf> {
        let id = self.next_checkpoint;
        self.next_checkpoint += 1;
        std::fs::create_dir_all(&self.args.savepoint_dir)
            .with_context(|| format!("cannot create {}", self.args.savepoint_dir.display()))?;
        let storage: Arc<dyn Storage> = Arc::new(LocalStorage::new(&self.args.savepoint_dir));
        let writer = SnapshotWriter::new_savepoint(storage, "", &self.run_id, id)?;
        let dir = writer.dir().to_string();
        self.write_snapshot(&writer, source_finished)?;
        writer.finish()?;
        self.notify_complete(id, &[])?;
        Ok(self.args.savepoint_dir.join(dir))
    }
}
