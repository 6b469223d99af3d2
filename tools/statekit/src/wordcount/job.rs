//! The running word count: its operators ([`Operators`], what the runtime's coordinator
//! checkpoints), the restore, and the record loop.

use super::source::{self, WordSource};
use super::{
    backend_choice, counter_states, job_schema, open_counter, BackendKind, ChangelogContext, CheckpointType, Guarantee,
    SavepointFormat, Settings, WordcountArgs, COUNTER_UID, SINK_UID, SOURCE_UID,
};
use anyhow::{bail, Context, Result};
use statekit_changelog::ChangelogStorage;
use statekit_checkpoint::{new_job_id, CheckpointStore, SnapshotReader, SnapshotWriter};
use statekit_core::{keygroup, BackendConfig, Codec, KeyGroupAssigner, StateFunctions, StateHandle};
use statekit_format::SnapshotKind;
use statekit_runtime::{
    restore_pending_commits, unclaimed_operators, AsyncSnapshot, CheckpointCoordinator, Checkpointed,
    CommittedOffsetFile, FileSink, KeyedCut, KeyedFormat, Next, RuntimeError, SourceOffsets, SubtaskSnapshot,
    TwoPhaseCommitSink,
};
use statekit_snapshot::KeyedBackend;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

struct Counter {
    backend: KeyedBackend,
    count: StateHandle,
    positions: StateHandle,
    followers: StateHandle,
}

/// The job's operators and their state: what a checkpoint snapshots.
pub(super) struct Operators {
    counters: Vec<Counter>,
    sinks: Vec<FileSink>,
    offsets: SourceOffsets,
    parallelism: u32,
    max_parallelism: u32,
    checkpoint_type: CheckpointType,
    savepoint_format: SavepointFormat,
}

impl Checkpointed for Operators {
    /// Sinks pre-commit, backends cut, operator state copied.
    fn snapshot(&mut self, writer: &SnapshotWriter, finished: bool) -> Result<AsyncSnapshot, RuntimeError> {
        let (p, max_p) = (self.parallelism, self.max_parallelism);
        writer.register_operator(SOURCE_UID, 1, max_p)?;
        writer.register_operator(COUNTER_UID, p, max_p)?;
        writer.register_operator(SINK_UID, p, max_p)?;
        let id = writer.checkpoint_id();
        let sinks = self
            .sinks
            .iter_mut()
            .map(|s| s.snapshot_state(id))
            .collect::<Result<Vec<_>, _>>()?;
        let native = if writer.kind() == SnapshotKind::Checkpoint {
            self.checkpoint_type == CheckpointType::Incremental
        } else {
            self.savepoint_format == SavepointFormat::Native
        };
        let format = if native {
            KeyedFormat::Native
        } else {
            KeyedFormat::Canonical
        };
        let mut part = AsyncSnapshot::new();
        for (i, (c, sink)) in self.counters.iter_mut().zip(sinks).enumerate() {
            let cut = KeyedCut::take(&mut c.backend, writer, format)?;
            part.push(SubtaskSnapshot::new(COUNTER_UID, i as u32).keyed(cut));
            part.push(SubtaskSnapshot::new(SINK_UID, i as u32).operator_state(sink));
        }
        part.push(
            SubtaskSnapshot::new(SOURCE_UID, 0)
                .operator_state(self.offsets.snapshot())
                .finished(finished),
        );
        Ok(part)
    }

    fn checkpoint_complete(&mut self, id: u64, subsumed: &[u64]) -> Result<(), RuntimeError> {
        for c in self.counters.iter_mut() {
            let b = c.backend.as_dyn();
            b.notify_checkpoint_complete(id)?;
            for s in subsumed {
                b.notify_checkpoint_subsumed(*s)?;
            }
        }
        for s in self.sinks.iter_mut() {
            for lost in s.commit_up_to(id)? {
                eprintln!("warning: {lost}");
            }
        }
        Ok(())
    }

    fn checkpoint_aborted(&mut self, id: u64) -> Result<(), RuntimeError> {
        for c in self.counters.iter_mut() {
            c.backend.as_dyn().notify_checkpoint_aborted(id)?;
        }
        Ok(())
    }
}

struct Job {
    args: WordcountArgs,
    /// Where a word's key group is: the restored state's key-group rule (statekit's for a
    /// fresh run, Flink's for state converted from Flink), for the word's string key.
    groups: KeyGroupAssigner,
    run_id: String,
    ops: Operators,
    source: WordSource,
    coordinator: CheckpointCoordinator,
    buf: Vec<u8>,
    /// Keeps the changelog's upload service alive (and reports its figures at the end).
    changelog: Option<ChangelogContext>,
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
        Some(addr) => source::socket(addr)?,
        None => source::open(args.input.as_deref())?,
    };
    let mut job = Job::start(args, settings, source)?;
    let code = job.run_loop()?;
    job.shutdown();
    Ok(code)
}

/// The snapshot `--restore` names (`latest`: the newest complete checkpoint, if any), opened
/// and checked against the job's operators (state of another operator needs `-n`).
fn open_restore(
    args: &WordcountArgs,
    checkpoint_base: &statekit_core::location::Location,
) -> Result<Option<(PathBuf, SnapshotReader)>> {
    let path = match args.restore.as_deref() {
        None => return Ok(None),
        Some("latest") => match statekit_snapshot::latest_checkpoint_at(checkpoint_base)? {
            Some((id, location)) => {
                eprintln!("restoring from checkpoint {id}: {location}");
                PathBuf::from(location.display())
            }
            None => {
                eprintln!("no complete checkpoint under {checkpoint_base}: starting from scratch");
                return Ok(None);
            }
        },
        Some(path) => PathBuf::from(path),
    };
    let reader = crate::cmd::open_reader(&path, &Default::default())?;
    // As in Flink: state of an operator the job does not have would be lost — refused
    // unless the user says so (-n).
    let unclaimed = unclaimed_operators(&reader, &[SOURCE_UID, COUNTER_UID, SINK_UID]);
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
    Ok(Some((path, reader)))
}

/// The changelog's upload service of this run (when the changelog is on and checkpoints are
/// taken).
fn open_changelog(
    settings: &Settings,
    store: Option<&CheckpointStore>,
    run_id: &str,
) -> Result<Option<ChangelogContext>> {
    let (Some(cfg), Some(store)) = (&settings.changelog, store) else {
        return Ok(None);
    };
    let job = store.job_storage()?;
    let storage = match &cfg.base_path {
        None => ChangelogStorage::for_job(job.clone(), cfg.upload.clone())?,
        Some(base) => {
            // Log files outside the job directory: referenced by absolute path on
            // local disk, by URL on an object store (`s3://…`).
            let location = crate::cmd::location(base).context("state.changelog.dstl.dfs.base-path")?;
            let storage = crate::cmd::storage_at(&location)?;
            ChangelogStorage::new(storage, run_id, cfg.upload.clone())?
        }
    };
    Ok(Some(ChangelogContext {
        storage,
        job,
        config: cfg.clone(),
    }))
}

/// Registers the counter's states on each restored backend (after the restore: a native
/// restore needs a fresh backend; registering again only attaches what snapshots do not
/// hold).
fn register_counters(backends: Vec<KeyedBackend>) -> Result<Vec<Counter>> {
    backends
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
        .collect()
}

impl Job {
    /// Opens the run: its checkpoint store, the restored state (keyed, source offsets, the
    /// sink's recovery), the sinks, and the source at its offset.
    fn start(args: WordcountArgs, settings: Settings, mut source: WordSource) -> Result<Job> {
        let (p, max_p) = (args.parallelism, args.max_parallelism);
        let checkpoint_base = crate::cmd::location(&args.checkpoint_dir)?;
        if args.guarantee == Guarantee::AtMostOnce && checkpoint_base.as_local().is_none() {
            bail!(
                "--guarantee at-most-once keeps its committed offset in a local file under --checkpoint-dir: use a local --checkpoint-dir (not {checkpoint_base})"
            );
        }
        let restored = open_restore(&args, &checkpoint_base)?;
        // The checkpoint store of this run, and the changelog's upload service in it.
        let run_id = new_job_id();
        let store = if args.guarantee == Guarantee::AtMostOnce {
            None
        } else {
            let storage = crate::cmd::storage_at(&checkpoint_base)?;
            Some(CheckpointStore::open(storage, &run_id, args.retained_checkpoints)?)
        };
        let changelog = open_changelog(&settings, store.as_ref(), &run_id)?;

        // Keyed state: one backend per counter subtask, owning its key-group range, restored.
        let choice = backend_choice(&args)?;
        let mut backends = Vec::new();
        for i in 0..p {
            let config = BackendConfig::for_subtask(max_p, p, i)?;
            let restore = restored.as_ref().map(|(_, r)| (r, args.restore_mode));
            backends.push(open_counter(&choice, changelog.as_ref(), config, i, restore)?);
        }

        // Operator state.
        let mut offsets = SourceOffsets::new()?;
        let mut restored_pending: Vec<String> = Vec::new();
        let mut restored_id = 0;
        if let Some((path, reader)) = &restored {
            offsets = SourceOffsets::restore(reader, SOURCE_UID, 1, 0)?;
            restored_pending = restore_pending_commits(reader, SINK_UID, p)?;
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
        let counters = register_counters(backends)?;

        // The sink's recovery: commit what the snapshot pre-committed, abort everything else.
        if args.guarantee == Guarantee::ExactlyOnce {
            let recovery = FileSink::recover(&args.output, &restored_pending)?;
            for lost in &recovery.lost {
                eprintln!("warning: {lost}");
            }
            let (committed, aborted) = (recovery.committed, recovery.aborted);
            if committed + aborted > 0 {
                eprintln!("sink recovery: {committed} transactions committed, {aborted} aborted");
            }
        }

        let mut start = offsets.get(source.name())?;
        if start.is_none() && args.guarantee == Guarantee::AtMostOnce {
            start = CommittedOffsetFile::new(&args.checkpoint_dir, source.name()).read()?;
        }
        if source.is_stream() {
            if let Some(s) = start {
                eprintln!(
                    "note: {} is a stream: it cannot replay what it sent before (restored offset {s}); counting goes on with new input",
                    source.name()
                );
            }
        }
        source.seek(start.unwrap_or(0));

        let next_checkpoint = restored_id + 1;
        let sinks = (0..p)
            .map(|i| FileSink::new(&args.output, i, &run_id[..6], args.guarantee.into(), next_checkpoint))
            .collect::<Result<Vec<_>, _>>()?;
        let coordinator = match store {
            Some(store) => CheckpointCoordinator::new(store, next_checkpoint),
            None => CheckpointCoordinator::savepoints_only(&run_id, next_checkpoint),
        };
        let mut ops = Operators {
            counters,
            sinks,
            offsets,
            parallelism: p,
            max_parallelism: max_p,
            checkpoint_type: args.checkpoint_type,
            savepoint_format: args.savepoint_format,
        };
        let scheme = ops
            .counters
            .first_mut()
            .map(|c| c.backend.as_dyn().key_group_scheme())
            .unwrap_or_default();
        Ok(Job {
            groups: scheme.assigner(&statekit_core::TypeSchema::Utf8, max_p),
            args,
            run_id,
            ops,
            source,
            coordinator: coordinator.with_max_concurrent(settings.max_concurrent),
            buf: Vec::new(),
            changelog,
        })
    }

    fn owner(&self, key: &[u8]) -> Result<usize> {
        let (p, max_p) = (self.args.parallelism, self.args.max_parallelism);
        Ok(keygroup::subtask_for_key_group(max_p, p, self.groups.key_group(key)?) as usize)
    }

    /// One record through counter and sink.
    fn process(&mut self, word: &str, position: u64) -> Result<()> {
        let key = word.as_bytes();
        let o = self.owner(key)?;
        let c = &mut self.ops.counters[o];
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
        Ok(self.ops.sinks[o].write_line(&line)?)
    }

    /// How often the word `prev` was followed by `word`.
    fn count_follower(&mut self, prev: &str, word: &str) -> Result<()> {
        let pk = prev.as_bytes();
        let o = self.owner(pk)?;
        let c = &mut self.ops.counters[o];
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

    /// Whether `--checkpoint-interval` has passed since the last checkpoint.
    fn interval_due(&self) -> bool {
        self.args
            .checkpoint_interval
            .is_some_and(|d| self.coordinator.since_last_trigger() >= d)
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
                Next::Word(w) => w,
                Next::End => break,
                // A stream with nothing new: checkpoints still go by the interval.
                Next::Idle => {
                    if !at_most_once && self.interval_due() {
                        self.coordinator.trigger(&mut self.ops)?;
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
            self.ops.offsets.set(self.source.name(), self.source.offset())?;
            if !at_most_once && (records.is_multiple_of(every) || self.interval_due()) {
                self.coordinator.trigger(&mut self.ops)?;
            }
            if records.is_multiple_of(64) {
                self.maintain()?;
            }
        }
        self.finish(records, &stop)
    }

    /// The end of the run: every running checkpoint completes, then a savepoint (asked
    /// for), a final checkpoint (input ended) or a last one (stopped); the summary lines.
    fn finish(&mut self, records: u64, stop: &AtomicBool) -> Result<ExitCode> {
        // Every checkpoint still running completes before the last snapshot.
        self.coordinator.drain(&mut self.ops)?;
        let finished = !stop.load(Ordering::SeqCst);
        let mut savepoint = None;
        if self.args.stop_with_savepoint {
            // A savepoint needs no checkpointing (as in Flink): at-most-once takes one too.
            savepoint = Some(self.savepoint(finished)?);
        } else if self.args.guarantee == Guarantee::AtMostOnce {
            for s in self.ops.sinks.iter_mut() {
                s.flush()?;
            }
        } else if finished {
            // Final checkpoint: commits the last output; the source is recorded as finished.
            self.coordinator.trigger_final(&mut self.ops)?;
        } else {
            // SIGTERM without --stop-with-savepoint: a last checkpoint keeps the output.
            self.coordinator.trigger(&mut self.ops)?;
        }
        eprintln!(
            "processed {} from {}; {} under {}; output in {}",
            crate::render::count(records, "word"),
            self.source.name(),
            crate::render::count(self.coordinator.completed(), "checkpoint"),
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
            let mut probe = source::open(self.args.input.as_deref())?;
            probe.seek(self.source.offset());
            for _ in 0..every {
                if probe.next_word().is_none() {
                    break;
                }
            }
            probe.offset()
        };
        CommittedOffsetFile::new(&self.args.checkpoint_dir, self.source.name()).write(ahead)?;
        Ok(())
    }

    /// Lets changelog backends start a due materialization and apply finished ones; completes
    /// checkpoints whose asynchronous part is done.
    fn maintain(&mut self) -> Result<()> {
        for c in self.ops.counters.iter_mut() {
            if let KeyedBackend::Changelog(b) = &mut c.backend {
                b.poll()?;
            }
        }
        self.coordinator.poll(&mut self.ops)?;
        Ok(())
    }

    /// Releases the backends (a changelog backend waits for a running materialization and
    /// deletes what no completed checkpoint references).
    fn shutdown(&mut self) {
        for c in self.ops.counters.iter_mut() {
            c.backend.as_dyn().dispose();
        }
    }

    fn savepoint(&mut self, source_finished: bool) -> Result<PathBuf> {
        let base = crate::cmd::location(&self.args.savepoint_dir)?;
        let storage = crate::cmd::storage_at(&base)?;
        let sp = self.coordinator.savepoint(&mut self.ops, storage, source_finished)?;
        Ok(PathBuf::from(base.join(&sp.dir).display()))
    }
}
