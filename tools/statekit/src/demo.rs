//! `statekit demo wordcount`: the classic word count, written the way an engine embeds
//! statekit. It is the worked example of the library API:
//!
//! 1. one [`HashMapBackend`] per subtask of the `counter` operator, owning the key groups
//!    `KeyGroupRange::for_subtask(max_p, p, i)`, with a keyed ValueState, ListState and
//!    MapState registered by descriptor (the schemas make the savepoint self-describing);
//! 2. the `source` operator keeps its read offset as operator list state;
//! 3. every N records: the synchronous snapshot cut of each backend, then the files are
//!    written on background threads with [`SnapshotWriter::write_subtask`] while the job
//!    could go on, then [`CheckpointStore::complete`] commits `_metadata` atomically;
//! 4. `--restore` opens a checkpoint or savepoint with [`SnapshotReader`] and restores every
//!    subtask at the current parallelism (rescaling if it differs).

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use statekit_checkpoint::{new_job_id, CheckpointStore, SnapshotReader, SnapshotWriter};
use statekit_core::storage::{LocalStorage, Storage};
use statekit_core::{
    BackendConfig, Codec, KeyedStateBackend, OperatorStateDescriptor, OperatorStateMode,
    OperatorStateStore, StateDescriptor, StateFunctions, StateHandle, TypeSchema,
};
use statekit_hashmap::HashMapBackend;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

const BUILTIN_INPUT: &str = include_str!("../data/words.txt");
const SOURCE_UID: &str = "source";
const COUNTER_UID: &str = "counter";

/// Demo jobs.
#[derive(Subcommand, Debug)]
pub enum DemoCommand {
    /// Count words; checkpoint periodically; finish with a savepoint.
    Wordcount(WordcountArgs),
}

/// Arguments of `statekit demo wordcount`.
#[derive(Args, Debug)]
pub struct WordcountArgs {
    /// Input text file (default: a built-in text).
    #[arg(long)]
    input: Option<PathBuf>,
    /// Write `(word,count)` lines here instead of standard output.
    #[arg(long)]
    output: Option<PathBuf>,
    /// Checkpoint base directory.
    #[arg(long, default_value = "statekit-data/checkpoints")]
    checkpoint_dir: PathBuf,
    /// Take a checkpoint every N records.
    #[arg(long, default_value_t = 20)]
    checkpoint_every: u64,
    /// Number of completed checkpoints to keep.
    #[arg(long, default_value_t = 3)]
    retained_checkpoints: usize,
    /// Parallelism of the counter operator.
    #[arg(long, default_value_t = 2)]
    parallelism: u32,
    /// Max parallelism (number of key groups).
    #[arg(long, default_value_t = 128)]
    max_parallelism: u32,
    /// Restore from a checkpoint or savepoint path, or `latest` (newest complete checkpoint
    /// under --checkpoint-dir).
    #[arg(long)]
    restore: Option<String>,
    /// Where the final savepoint goes.
    #[arg(long, default_value = "statekit-data/savepoints")]
    savepoint_dir: PathBuf,
    /// Do not take a savepoint at the end.
    #[arg(long)]
    no_savepoint: bool,
}

struct Counter {
    backend: HashMapBackend,
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

fn encode_offset(input: &str, offset: u64) -> Vec<u8> {
    let mut out = Vec::new();
    statekit_core::schema::put_varint(&mut out, input.len() as u64);
    out.extend_from_slice(input.as_bytes());
    out.extend_from_slice(&offset.to_be_bytes());
    out
}

fn decode_offset(bytes: &[u8]) -> Result<(String, u64)> {
    let schema = offsets_descriptor().value_schema;
    match statekit_core::decode_value(&schema, bytes)? {
        statekit_core::Value::Tuple(v) => match v.as_slice() {
            [statekit_core::Value::Str(s), statekit_core::Value::U64(o)] => Ok((s.clone(), *o)),
            _ => bail!("offset element has an unexpected shape"),
        },
        _ => bail!("offset element has an unexpected shape"),
    }
}

/// Finds the newest complete checkpoint under a checkpoint base directory (any job).
fn latest_checkpoint(base: &Path) -> Result<Option<(u64, PathBuf)>> {
    let mut best: Option<(i64, u64, PathBuf)> = None;
    let Ok(rd) = std::fs::read_dir(base) else {
        return Ok(None);
    };
    for job in rd.filter_map(|e| e.ok()).filter(|e| e.path().is_dir()) {
        let job_id = job.file_name().to_string_lossy().to_string();
        let storage: Arc<dyn Storage> = Arc::new(LocalStorage::new(base));
        let store = CheckpointStore::open(storage, &job_id, 1)?;
        if let Some(c) = store.latest_completed()? {
            let key = (c.metadata.timestamp_ms, c.id);
            if best.as_ref().is_none_or(|b| (b.0, b.1) < key) {
                best = Some((key.0, key.1, base.join(&c.dir)));
            }
        }
    }
    Ok(best.map(|(_, id, p)| (id, p)))
}

/// Runs a demo.
pub fn run(cmd: DemoCommand) -> Result<ExitCode> {
    match cmd {
        DemoCommand::Wordcount(args) => wordcount(args),
    }
}

fn wordcount(args: WordcountArgs) -> Result<ExitCode> {
    let (input_name, text) = match &args.input {
        Some(p) => (
            p.display().to_string(),
            std::fs::read_to_string(p).with_context(|| format!("cannot read input {}", p.display()))?,
        ),
        None => ("<built-in>".to_string(), BUILTIN_INPUT.to_string()),
    };
    let words: Vec<String> = text
        .split(|c: char| !c.is_alphanumeric() && c != '\'')
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    let (p, max_p) = (args.parallelism, args.max_parallelism);
    statekit_core::keygroup::check_parallelism(p, max_p)?;
    if args.checkpoint_every == 0 {
        bail!("--checkpoint-every must be at least 1");
    }

    // Operators and their state.
    let mut counters = Vec::new();
    for i in 0..p {
        let mut backend = HashMapBackend::new(BackendConfig::for_subtask(max_p, p, i)?)?;
        let [c, l, m] = counter_states();
        let count = backend.register(c, StateFunctions::None)?;
        let positions = backend.register(l, StateFunctions::None)?;
        let followers = backend.register(m, StateFunctions::None)?;
        counters.push(Counter {
            backend,
            count,
            positions,
            followers,
        });
    }
    let mut source_state = OperatorStateStore::new();

    // Restore.
    if let Some(restore) = &args.restore {
        let path = if restore == "latest" {
            match latest_checkpoint(&args.checkpoint_dir)? {
                Some((id, path)) => {
                    eprintln!("restoring from checkpoint {id} at {}", path.display());
                    Some(path)
                }
                None => {
                    eprintln!(
                        "no complete checkpoint under {}; starting from scratch",
                        args.checkpoint_dir.display()
                    );
                    None
                }
            }
        } else {
            Some(PathBuf::from(restore))
        };
        if let Some(path) = path {
            let reader = SnapshotReader::open(&path).with_context(|| format!("cannot restore from {}", path.display()))?;
            for c in counters.iter_mut() {
                reader.restore_keyed(COUNTER_UID, &mut c.backend)?;
            }
            source_state = OperatorStateStore::from_snapshot(reader.operator_state(SOURCE_UID, 1, 0)?);
            eprintln!(
                "restored {} at parallelism {p} (snapshot parallelism {})",
                path.display(),
                reader.operator(COUNTER_UID)?.parallelism
            );
        }
    }
    let offsets = source_state.register(offsets_descriptor())?;
    let mut start = 0u64;
    for e in source_state.list(offsets)? {
        let (name, off) = decode_offset(e)?;
        if name == input_name {
            start = off;
        }
    }

    let storage: Arc<dyn Storage> = Arc::new(LocalStorage::new(&args.checkpoint_dir));
    let job_id = new_job_id();
    let store = CheckpointStore::open(storage, &job_id, args.retained_checkpoints)?;
    let mut out: Box<dyn Write> = match &args.output {
        Some(p) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("cannot create {}", p.display()))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };

    let mut checkpoint_id = 0u64;
    let mut buf = Vec::new();
    let mut prev: Option<String> = None;
    let mut processed = 0u64;
    for (pos, word) in words.iter().enumerate().skip(start as usize) {
        let key = word.as_bytes();
        let owner = statekit_core::keygroup::subtask_for_key_group(
            max_p,
            p,
            statekit_core::key_group_for_key(key, max_p),
        ) as usize;
        let c = &mut counters[owner];
        let count = if c.backend.get(c.count, key, &[], &mut buf)? {
            i64::decode(&buf)? + 1
        } else {
            1
        };
        c.backend.put(c.count, key, &[], &count.to_bytes())?;
        // Keep the last three positions of the word.
        let mut recent = c.backend.list_get(c.positions, key, &[])?;
        recent.push((pos as u64).to_bytes());
        let keep: Vec<&[u8]> = recent.iter().rev().take(3).rev().map(Vec::as_slice).collect();
        c.backend.list_update(c.positions, key, &[], &keep)?;
        if let Some(prev_word) = &prev {
            let pk = prev_word.as_bytes();
            let po = statekit_core::keygroup::subtask_for_key_group(
                max_p,
                p,
                statekit_core::key_group_for_key(pk, max_p),
            ) as usize;
            let pc = &mut counters[po];
            let n = if pc.backend.map_get(pc.followers, pk, &[], key, &mut buf)? {
                i64::decode(&buf)? + 1
            } else {
                1
            };
            pc.backend.map_put(pc.followers, pk, &[], key, &n.to_bytes())?;
        }
        prev = Some(word.clone());
        writeln!(out, "({word},{count})")?;
        processed += 1;
        let offset = pos as u64 + 1;
        source_state.list_update(offsets, vec![encode_offset(&input_name, offset)])?;
        if processed % args.checkpoint_every == 0 {
            checkpoint_id += 1;
            take_checkpoint(&store, checkpoint_id, &mut counters, &source_state, false, p, max_p)?;
        }
    }
    out.flush()?;
    drop(out);
    // The final checkpoint records the source as finished.
    checkpoint_id += 1;
    take_checkpoint(&store, checkpoint_id, &mut counters, &source_state, true, p, max_p)?;
    eprintln!(
        "processed {processed} words; {checkpoint_id} checkpoints in {}",
        args.checkpoint_dir.join(&job_id).display()
    );
    if !args.no_savepoint {
        std::fs::create_dir_all(&args.savepoint_dir)
            .with_context(|| format!("cannot create {}", args.savepoint_dir.display()))?;
        let sp_storage: Arc<dyn Storage> = Arc::new(LocalStorage::new(&args.savepoint_dir));
        let writer = SnapshotWriter::new_savepoint(sp_storage, "", &job_id, checkpoint_id + 1)?;
        write_operators(&writer, checkpoint_id + 1, &mut counters, &source_state, true, p, max_p)?;
        let dir = writer.dir().to_string();
        writer.finish()?;
        let path = args.savepoint_dir.join(dir);
        eprintln!("savepoint written:");
        println!("{}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

fn write_operators(
    writer: &SnapshotWriter,
    id: u64,
    counters: &mut [Counter],
    source: &OperatorStateStore,
    source_finished: bool,
    p: u32,
    max_p: u32,
) -> Result<()> {
    writer.register_operator(SOURCE_UID, 1, max_p)?;
    writer.register_operator(COUNTER_UID, p, max_p)?;
    // Synchronous part: cut every backend (cheap, copy-on-write).
    let views: Vec<_> = counters
        .iter_mut()
        .map(|c| c.backend.snapshot(id))
        .collect::<Result<_, _>>()?;
    let source_snapshot = source.snapshot();
    // Asynchronous part: write the files on background threads.
    std::thread::scope(|s| -> Result<()> {
        let handles: Vec<_> = views
            .iter()
            .enumerate()
            .map(|(i, v)| s.spawn(move || writer.write_subtask(COUNTER_UID, i as u32, Some(v.as_ref()), None, false)))
            .collect();
        writer.write_subtask(SOURCE_UID, 0, None, Some(&source_snapshot), source_finished)?;
        for h in handles {
            h.join().map_err(|_| anyhow::anyhow!("snapshot thread panicked"))??;
        }
        Ok(())
    })?;
    Ok(())
}

fn take_checkpoint(
    store: &CheckpointStore,
    id: u64,
    counters: &mut [Counter],
    source: &OperatorStateStore,
    source_finished: bool,
    p: u32,
    max_p: u32,
) -> Result<()> {
    let writer = store.begin(id)?;
    write_operators(&writer, id, counters, source, source_finished, p, max_p)?;
    let (done, subsumed) = store.complete(writer)?;
    for c in counters.iter_mut() {
        c.backend.notify_checkpoint_complete(done.id)?;
        for s in &subsumed {
            c.backend.notify_checkpoint_subsumed(*s)?;
        }
    }
    Ok(())
}
