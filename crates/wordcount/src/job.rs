//! The running word count: its operators ([`Operators`], what the runtime's coordinator
//! checkpoints), the restore, and the record loop.

use crate::backend::{backend_choice, open_counter, ChangelogContext};
use crate::settings::{resolve, Resolved};
use crate::source::{self, WordSource};
use crate::{
    counter_states, job_schema, BackendKind, CheckpointType, Event, Guarantee, Host, SavepointFormat, Settings,
    WordcountError, COUNTER_UID, SINK_UID, SOURCE_UID,
};
use statekit_changelog::ChangelogStorage;
use statekit_checkpoint::{new_job_id, CheckpointStore, SnapshotWriter};
use statekit_core::location::Location;
use statekit_core::storage::Storage;
use statekit_core::{keygroup, BackendConfig, Codec, KeyGroupAssigner, StateFunctions, StateHandle};
use statekit_format::SnapshotKind;
use statekit_runtime::{
    restore_pending_commits, unclaimed_operators, AsyncSnapshot, CheckpointCoordinator, Checkpointed,
    CommittedOffsetFile, FileSink, KeyedCut, KeyedFormat, LostCommit, Next, RuntimeError, SourceOffsets,
    SubtaskSnapshot, TwoPhaseCommitSink,
};
use statekit_snapshot::{KeyedBackend, Snapshot};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

type Result<T> = std::result::Result<T, WordcountError>;

/// Reports `event` to `host`.
fn emit(host: &mut dyn Host, event: Event<'_>) -> Result<()> {
    host.event(event).map_err(WordcountError::Output)
}

/// The location `path` names: a local path, or an object store's URL.
pub(crate) fn location(path: &Path) -> std::result::Result<Location, statekit_objstore::LocationError> {
    match path.to_str() {
        Some(s) => statekit_objstore::parse_location(s),
        None => Ok(Location::Local(path.to_path_buf())),
    }
}

/// A storage rooted at the directory `location` names (a local directory is created).
fn storage_at(location: &Location) -> Result<Arc<dyn Storage>> {
    if let Location::Local(path) = location {
        std::fs::create_dir_all(path).map_err(|source| WordcountError::CreateDir {
            path: path.clone(),
            source,
        })?;
    }
    Ok(location.storage()?)
}

struct Counter {
    backend: KeyedBackend,
    count: StateHandle,
    positions: StateHandle,
    followers: StateHandle,
}

/// The job's operators and their state: what a checkpoint snapshots.
struct Operators {
    counters: Vec<Counter>,
    sinks: Vec<FileSink>,
    offsets: SourceOffsets,
    parallelism: u32,
    max_parallelism: u32,
    checkpoint_type: CheckpointType,
    savepoint_format: SavepointFormat,
    /// Committed transactions found gone when committing, reported after the coordinator's
    /// call ([`Job::report_lost`]).
    lost: Vec<LostCommit>,
}

impl Checkpointed for Operators {
    /// Sinks pre-commit, backends cut, operator state copied.
    fn snapshot(
        &mut self,
        writer: &SnapshotWriter,
        finished: bool,
    ) -> std::result::Result<AsyncSnapshot, RuntimeError> {
        let (p, max_p) = (self.parallelism, self.max_parallelism);
        writer.register_operator(SOURCE_UID, 1, max_p)?;
        writer.register_operator(COUNTER_UID, p, max_p)?;
        writer.register_operator(SINK_UID, p, max_p)?;
        let id = writer.checkpoint_id();
        let sinks = self
            .sinks
            .iter_mut()
            .map(|s| s.snapshot_state(id))
            .collect::<std::result::Result<Vec<_>, _>>()?;
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

    fn checkpoint_complete(&mut self, id: u64, subsumed: &[u64]) -> std::result::Result<(), RuntimeError> {
        for c in self.counters.iter_mut() {
            let b = c.backend.as_dyn();
            b.notify_checkpoint_complete(id)?;
            for s in subsumed {
                b.notify_checkpoint_subsumed(*s)?;
            }
        }
        for s in self.sinks.iter_mut() {
            self.lost.extend(s.commit_up_to(id)?);
        }
        Ok(())
    }

    fn checkpoint_aborted(&mut self, id: u64) -> std::result::Result<(), RuntimeError> {
        for c in self.counters.iter_mut() {
            c.backend.as_dyn().notify_checkpoint_aborted(id)?;
        }
        Ok(())
    }
}

struct Job<'h> {
    args: Settings,
    host: &'h mut dyn Host,
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

/// Runs the job with `settings` ([`Settings`]; Flink's configuration keys complete them),
/// reporting to `host` ([`Event`]s) until the input ends or `host`'s stop flag is set.
pub fn run(mut settings: Settings, host: &mut dyn Host) -> Result<()> {
    let args = &mut settings;
    // Flink's keys from --config and -D set what their flags did not.
    let resolved = resolve(args, host)?;
    let (p, max_p) = (args.parallelism, args.max_parallelism);
    keygroup::check_parallelism(p, max_p)?;
    if args.print_schema {
        return emit(host, Event::Schema(&job_schema(p, max_p)));
    }
    if args.checkpoint_every == 0 {
        return Err(WordcountError::CheckpointEveryZero);
    }
    if args.backend != BackendKind::Rocksdb {
        if args.checkpoint_type == CheckpointType::Incremental {
            return Err(WordcountError::IncrementalNeedsRocksDb);
        }
        if args.savepoint_format == SavepointFormat::Native {
            return Err(WordcountError::NativeSavepointNeedsRocksDb);
        }
    }
    let source = match &args.socket {
        Some(addr) => source::socket(addr)?,
        None => source::open(args.input.as_deref())?,
    };
    let mut job = Job::start(settings, resolved, source, host)?;
    job.run_loop()?;
    job.shutdown();
    Ok(())
}

/// The snapshot `--restore` names (`latest`: the newest complete checkpoint, if any), opened
/// and checked against the job's operators (state of another operator needs `-n`).
fn open_restore(
    args: &Settings,
    checkpoint_base: &Location,
    host: &mut dyn Host,
) -> Result<Option<(PathBuf, Snapshot)>> {
    let path = match args.restore.as_deref() {
        None => return Ok(None),
        Some("latest") => match statekit_snapshot::latest_checkpoint_at(checkpoint_base)? {
            Some((checkpoint_id, location)) => {
                emit(
                    host,
                    Event::RestoringLatest {
                        checkpoint_id,
                        location: &location,
                    },
                )?;
                PathBuf::from(location.display())
            }
            None => {
                emit(host, Event::NoCheckpointYet { checkpoint_base })?;
                return Ok(None);
            }
        },
        Some(path) => PathBuf::from(path),
    };
    let snapshot = host.open_snapshot(&path).map_err(WordcountError::Host)?;
    // As in Flink: state of an operator the job does not have would be lost — refused
    // unless the user says so (-n).
    let unclaimed = unclaimed_operators(&snapshot, &[SOURCE_UID, COUNTER_UID, SINK_UID]);
    if !unclaimed.is_empty() {
        if !args.allow_non_restored_state {
            return Err(WordcountError::UnclaimedState {
                operators: unclaimed.iter().map(|u| u.to_string()).collect(),
                snapshot: path,
            });
        }
        emit(host, Event::NotRestored { operators: &unclaimed })?;
    }
    Ok(Some((path, snapshot)))
}

/// The changelog's upload service of this run (when the changelog is on and checkpoints are
/// taken).
fn open_changelog(
    resolved: &Resolved,
    store: Option<&CheckpointStore>,
    run_id: &str,
) -> Result<Option<ChangelogContext>> {
    let (Some(cfg), Some(store)) = (&resolved.changelog, store) else {
        return Ok(None);
    };
    let job = store.job_storage()?;
    let storage = match &cfg.base_path {
        None => ChangelogStorage::for_job(job.clone(), cfg.upload.clone())?,
        Some(base) => {
            // Log files outside the job directory: referenced by absolute path on
            // local disk, by URL on an object store (`s3://…`).
            let location = location(base).map_err(WordcountError::ChangelogBasePath)?;
            let storage = storage_at(&location)?;
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

/// What a restore brings besides keyed state: the source's offsets, the sink's
/// pre-committed transactions and the restored checkpoint's id.
struct RestoredOperators {
    offsets: SourceOffsets,
    pending: Vec<String>,
    checkpoint_id: u64,
}

/// The operator state of the restored snapshot (if any); reports the restore and hands the
/// snapshot to the checkpoint store (which deletes a claimed one once subsumed).
fn restore_operators(
    args: &Settings,
    restored: Option<&(PathBuf, Snapshot)>,
    store: Option<&CheckpointStore>,
    changelog: bool,
    host: &mut dyn Host,
) -> Result<RestoredOperators> {
    let Some((path, snapshot)) = restored else {
        return Ok(RestoredOperators {
            offsets: SourceOffsets::new()?,
            pending: Vec::new(),
            checkpoint_id: 0,
        });
    };
    let offsets = SourceOffsets::restore(snapshot, SOURCE_UID, 1, 0)?;
    let pending = restore_pending_commits(snapshot, SINK_UID, args.parallelism)?;
    let checkpoint_id = snapshot.metadata().checkpoint_id;
    emit(
        host,
        Event::Restored {
            path,
            format: snapshot.metadata().format.as_str(),
            checkpoint_id,
            from_parallelism: snapshot.operator(COUNTER_UID)?.parallelism,
            parallelism: args.parallelism,
            mode: args.restore_mode,
            changelog,
        },
    )?;
    // statekit's own files are then the store's as the mode says (another family's never).
    if let (Some(store), Some(files)) = (store, snapshot.statekit_files()) {
        store.restored(files, args.restore_mode)?;
    }
    Ok(RestoredOperators {
        offsets,
        pending,
        checkpoint_id,
    })
}

impl<'h> Job<'h> {
    /// Opens the run: its checkpoint store, the restored state (keyed, source offsets, the
    /// sink's recovery), the sinks, and the source at its offset.
    fn start(args: Settings, resolved: Resolved, mut source: WordSource, host: &'h mut dyn Host) -> Result<Job<'h>> {
        let (p, max_p) = (args.parallelism, args.max_parallelism);
        let checkpoint_base = location(&args.checkpoint_dir)?;
        if args.guarantee == Guarantee::AtMostOnce && checkpoint_base.as_local().is_none() {
            return Err(WordcountError::AtMostOnceNeedsLocalDir {
                checkpoint_dir: checkpoint_base.to_string(),
            });
        }
        let restored = open_restore(&args, &checkpoint_base, host)?;
        // The checkpoint store of this run, and the changelog's upload service in it.
        let run_id = new_job_id();
        let store = if args.guarantee == Guarantee::AtMostOnce {
            None
        } else {
            let storage = storage_at(&checkpoint_base)?;
            Some(CheckpointStore::open(storage, &run_id, args.retained_checkpoints)?)
        };
        let changelog = open_changelog(&resolved, store.as_ref(), &run_id)?;

        // Keyed state: one backend per counter subtask, owning its key-group range, restored.
        let choice = backend_choice(&args)?;
        let mut backends = Vec::new();
        for i in 0..p {
            let config = BackendConfig::for_subtask(max_p, p, i)?;
            let restore = restored.as_ref().map(|(_, r)| (r, args.restore_mode));
            backends.push(open_counter(&choice, changelog.as_ref(), config, i, restore)?);
        }

        // Operator state.
        let RestoredOperators {
            mut offsets,
            pending,
            checkpoint_id,
        } = restore_operators(&args, restored.as_ref(), store.as_ref(), changelog.is_some(), host)?;
        let counters = register_counters(backends)?;

        // The sink's recovery: commit what the snapshot pre-committed, abort everything else.
        if args.guarantee == Guarantee::ExactlyOnce {
            let recovery = FileSink::recover(&args.output, &pending)?;
            for lost in &recovery.lost {
                emit(host, Event::LostCommit(lost))?;
            }
            let (committed, aborted) = (recovery.committed, recovery.aborted);
            if committed + aborted > 0 {
                emit(host, Event::SinkRecovery { committed, aborted })?;
            }
        }

        let mut start = offsets.get(source.name())?;
        if start.is_none() && args.guarantee == Guarantee::AtMostOnce {
            start = CommittedOffsetFile::new(&args.checkpoint_dir, source.name()).read()?;
        }
        if source.is_stream() {
            if let Some(offset) = start {
                emit(
                    host,
                    Event::StreamNotReplayed {
                        source: source.name(),
                        offset,
                    },
                )?;
            }
        }
        source.seek(start.unwrap_or(0));

        let next_checkpoint = checkpoint_id + 1;
        let sinks = (0..p)
            .map(|i| FileSink::new(&args.output, i, &run_id[..6], args.guarantee.into(), next_checkpoint))
            .collect::<std::result::Result<Vec<_>, _>>()?;
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
            lost: Vec::new(),
        };
        let scheme = ops
            .counters
            .first_mut()
            .map(|c| c.backend.as_dyn().key_group_scheme())
            .unwrap_or_default();
        Ok(Job {
            groups: scheme.assigner(&statekit_core::TypeSchema::Utf8, max_p),
            args,
            host,
            run_id,
            ops,
            source,
            coordinator: coordinator.with_max_concurrent(resolved.max_concurrent),
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
            emit(self.host, Event::Echo(&line))?;
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

    /// Reports the committed transactions the sinks found gone.
    fn report_lost(&mut self) -> Result<()> {
        for lost in std::mem::take(&mut self.ops.lost) {
            emit(self.host, Event::LostCommit(&lost))?;
        }
        Ok(())
    }

    /// Triggers a checkpoint.
    fn trigger(&mut self) -> Result<()> {
        self.coordinator.trigger(&mut self.ops)?;
        self.report_lost()
    }

    fn run_loop(&mut self) -> Result<()> {
        let stop = self.host.stop_flag().map_err(WordcountError::Host)?;
        let every = self.args.checkpoint_every;
        let mut records = 0u64;
        let mut prev: Option<String> = None;
        let at_most_once = self.args.guarantee == Guarantee::AtMostOnce;
        let mut batch_end = 0u64;
        emit(
            self.host,
            Event::Counting {
                input_len: self.source.len(),
            },
        )?;
        loop {
            if stop.load(Ordering::SeqCst) {
                emit(self.host, Event::Stopping)?;
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
                        self.trigger()?;
                    }
                    self.maintain()?;
                    continue;
                }
            };
            if records.is_multiple_of(4096) {
                let done = match self.source.len() {
                    Some(_) => self.source.offset(),
                    None => records,
                };
                emit(self.host, Event::Progress(done))?;
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
                self.trigger()?;
            }
            if records.is_multiple_of(64) {
                self.maintain()?;
            }
        }
        self.finish(records, &stop)?;
        emit(self.host, Event::Finished)
    }

    /// The end of the run: every running checkpoint completes, then a savepoint (asked
    /// for), a final checkpoint (input ended) or a last one (stopped); the summary.
    fn finish(&mut self, records: u64, stop: &AtomicBool) -> Result<()> {
        // Every checkpoint still running completes before the last snapshot.
        self.coordinator.drain(&mut self.ops)?;
        self.report_lost()?;
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
            self.report_lost()?;
        } else {
            // Stopped without a savepoint asked for: a last checkpoint keeps the output.
            self.trigger()?;
        }
        emit(
            self.host,
            Event::Summary {
                records,
                source: self.source.name(),
                checkpoints: self.coordinator.completed(),
                run_dir: &self.args.checkpoint_dir.join(&self.run_id),
                output: &self.args.output,
            },
        )?;
        if let Some(cl) = &self.changelog {
            emit(self.host, Event::ChangelogUploads(&cl.storage.stats()))?;
        }
        if let Some(path) = savepoint {
            emit(self.host, Event::Savepoint(&path))?;
        }
        Ok(())
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
        self.report_lost()
    }

    /// Releases the backends (a changelog backend waits for a running materialization and
    /// deletes what no completed checkpoint references).
    fn shutdown(&mut self) {
        for c in self.ops.counters.iter_mut() {
            c.backend.as_dyn().dispose();
        }
    }

    fn savepoint(&mut self, source_finished: bool) -> Result<PathBuf> {
        let base = location(&self.args.savepoint_dir)?;
        let storage = storage_at(&base)?;
        let sp = self.coordinator.savepoint(&mut self.ops, storage, source_finished)?;
        self.report_lost()?;
        Ok(PathBuf::from(base.join(&sp.dir).display()))
    }
}
