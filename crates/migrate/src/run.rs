//! Carrying a plan out: every output subtask written (in parallel, from the input's views),
//! `_metadata` committed in a temporary directory beside the output, then the directory
//! renamed into place — a reader, or a SIGKILL, sees no output or a complete one.

use crate::plan::{OperatorPlan, Plan};
use crate::rebucket::SortedEntries;
use crate::view::{MigratedView, SplitView};
use crate::MigrateError;
use statekit_checkpoint::CheckpointError;
use statekit_checkpoint::SnapshotWriter;
use statekit_core::storage::{LocalStorage, Storage};
use statekit_core::{KeyGroupRange, OperatorStateData, OperatorStateMode, OperatorStateSnapshot};
use statekit_format::{
    encode_metadata, read_operator_file, FileRef, FileScope, KeyedFileReader, KeyedStats, SnapshotKind, WriteOptions,
    METADATA_FILE_NAME,
};
use statekit_snapshot::Snapshot;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// How a migration runs.
#[derive(Clone, Debug)]
pub struct MigrateOptions {
    /// Replace an existing output (a snapshot directory, or an empty one).
    pub force: bool,
    /// Subtasks written at once, and threads of a max-parallelism change's sort (0: two
    /// subtasks per core, a sort thread per core).
    pub threads: usize,
    /// `(I, N)`: write only shard `I` of `N` — every `N`th output subtask from the `I`th —
    /// and a shard manifest instead of `_metadata`; [`finish_shards`] then writes
    /// `_metadata` once every shard is done. `None`: the whole snapshot.
    pub shard: Option<(u32, u32)>,
}

impl Default for MigrateOptions {
    /// No `force`, one thread per core.
    fn default() -> Self {
        MigrateOptions {
            shard: None,
            force: false,
            threads: 0,
        }
    }
}

/// How far a migration is, told after every subtask written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// Output subtasks written.
    pub subtasks_done: u64,
    /// Output subtasks in all.
    pub subtasks_total: u64,
    /// Bytes of data files written.
    pub bytes_written: u64,
    /// Keyed entries written.
    pub entries: u64,
}

/// What a migration wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    /// The output directory.
    pub output: PathBuf,
    /// Operators written.
    pub operators: usize,
    /// Subtasks written.
    pub subtasks: u64,
    /// Data files written (plus `_metadata`).
    pub files: u64,
    /// Their bytes, `_metadata` included.
    pub bytes: u64,
    /// Keyed entries written.
    pub entries: u64,
    /// Sorted runs a max-parallelism change spilled to disk (0: it fit in memory).
    pub spilled_runs: usize,
}

/// Carries out `plan` on `snapshot`, opened from `input`, writing a self-contained
/// savepoint at `output` ([`crate::PlanOptions::format`]: canonical, or RocksDB's native
/// files). The input is only read. The output appears complete or not at all: it is written under a temporary name beside it (every file fsynced,
/// `_metadata` last), then renamed into place and the parent directory fsynced. An existing
/// output is refused unless [`MigrateOptions::force`]; the output may not be the input or lie
/// inside it.
pub fn migrate(
    snapshot: &Snapshot,
    input: &Path,
    plan: &Plan,
    output: &Path,
    options: &MigrateOptions,
    progress: &(dyn Fn(&Progress) + Sync),
) -> Result<Summary, MigrateError> {
    check_format_built(plan)?;
    let target = if snapshot.storage().absolute_path("").is_some() {
        OutputTarget::check(input, output, options.force)?
    } else {
        OutputTarget::check_output(output, options.force)?
    };
    let storage: Arc<dyn Storage> = Arc::new(LocalStorage::new(&target.parent));
    let writer = output_writer(storage.clone(), &target.temp_name, plan, input)?;
    let dir = target.parent.join(&target.temp_name);
    let result = write_all(snapshot, plan, &writer, &dir, options, progress);
    let written = match result {
        Ok(w) => w,
        Err(e) => {
            let _ = writer.abort();
            return Err(e);
        }
    };
    let committed = match writer.finish() {
        Ok(m) => m,
        Err(e) => {
            let _ = storage.delete_dir_all(&target.temp_name);
            return Err(e.into());
        }
    };
    target.publish()?;
    let meta_bytes = std::fs::metadata(output.join(METADATA_FILE_NAME)).map_or(0, |m| m.len());
    Ok(Summary::of(
        output.to_path_buf(),
        &committed,
        &written,
        Some(meta_bytes),
    ))
}

/// [`migrate`] to an output at any [`Location`](statekit_core::location::Location): a local
/// path as [`migrate`]; on an object store the savepoint is written straight under its
/// prefix — data files first, `_metadata` last and only if none is there (an object store
/// has no rename: the output is complete exactly when `_metadata` exists; a failed run
/// deletes what it wrote). An existing output (any object under the prefix) is refused unless
/// [`MigrateOptions::force`], which replaces only a snapshot (its objects are deleted first).
/// Sorting and native scratch space go to a local temporary directory; `--link` is local
/// only.
pub fn migrate_to(
    snapshot: &Snapshot,
    input: &Path,
    plan: &Plan,
    output: &statekit_core::location::Location,
    options: &MigrateOptions,
    progress: &(dyn Fn(&Progress) + Sync),
) -> Result<Summary, MigrateError> {
    use statekit_core::location::Location;
    let (storage, prefix, url) = match output {
        Location::Local(p) if options.shard.is_none() => return migrate(snapshot, input, plan, p, options, progress),
        Location::Local(p) => {
            // Shards write straight into the directory (no temporary name: the tasks share it).
            let (storage, name) = output.storage_and_path().map_err(CheckpointError::from)?;
            (storage, name, p.display().to_string())
        }
        Location::Stored { storage, path, url } => (storage.clone(), path.clone(), url.clone()),
    };
    let shown = PathBuf::from(&url);
    if prefix.is_empty() {
        return Err(MigrateError::io(
            &shown,
            std::io::Error::other("the output needs a key prefix below the bucket"),
        ));
    }
    check_format_built(plan)?;
    if plan.operators.iter().any(|o| o.linked) {
        return Err(MigrateError::NotSupported {
            what: format!("--link to object storage ({url}): files are copied without it"),
        });
    }
    let existing = storage.list(&prefix).map_err(CheckpointError::from)?;
    if let Some((i, n)) = options.shard {
        if n == 0 || i >= n {
            return Err(MigrateError::InvalidShard { shard: i, shards: n });
        }
        if plan
            .operators
            .iter()
            .any(|o| o.max_parallelism != o.source_max_parallelism)
        {
            return Err(MigrateError::NotSupported {
                what: "--shard with a max-parallelism change or a key filter (every shard would sort the whole input)"
                    .into(),
            });
        }
        if existing.iter().any(|e| !e.is_dir && e.name == METADATA_FILE_NAME) {
            return Err(MigrateError::OutputExists { path: shown });
        }
    } else if !existing.is_empty() {
        if !options.force {
            return Err(MigrateError::OutputExists { path: shown });
        }
        crate::check_stored_replaceable(storage.as_ref(), &prefix, &shown)?;
        storage.delete_dir_all(&prefix).map_err(CheckpointError::from)?;
    }
    let scratch = statekit_core::temp::scratch_dir("migrate").map_err(|e| MigrateError::io(std::env::temp_dir(), e))?;
    let mut plan = plan.clone();
    if plan.options.spill_dir.is_none() {
        plan.options.spill_dir = Some(scratch.path().join("spill"));
    }
    let writer = output_writer(storage.clone(), &prefix, &plan, input)?;
    let written = match write_all(snapshot, &plan, &writer, &scratch.path().join("out"), options, progress) {
        Ok(w) => w,
        // A shard leaves its partial files (another run of the shard replaces them; the
        // output is not complete without every manifest); a whole run deletes what it wrote.
        Err(e) if options.shard.is_some() => return Err(e),
        Err(e) => {
            let _ = writer.abort();
            return Err(e);
        }
    };
    if let Some((i, n)) = options.shard {
        // This shard's part of `_metadata`, for `finish_shards`; the data files stay (other
        // shards write beside them).
        let part = writer.partial_metadata()?;
        storage
            .put_atomic(&shard_manifest(&prefix, i, n), &encode_metadata(&part))
            .map_err(CheckpointError::from)?;
        return Ok(Summary::of(shown, &part, &written, None));
    }
    let committed = match writer.finish() {
        Ok(m) => m,
        Err(e) => {
            let _ = storage.delete_dir_all(&prefix);
            return Err(e.into());
        }
    };
    let meta_bytes = encode_metadata(&committed).len() as u64;
    Ok(Summary::of(shown, &committed, &written, Some(meta_bytes)))
}

/// Where shard `i` of `n` records its part of `_metadata`.
fn shard_manifest(prefix: &str, i: u32, n: u32) -> String {
    statekit_core::storage::join(prefix, &format!("{SHARDS_DIR}/{i}-of-{n}"))
}

/// The directory (in the output) of the shard manifests.
pub const SHARDS_DIR: &str = "_shards";

/// The final step of a snapshot written by `n` shards ([`MigrateOptions::shard`]): reads every
/// shard's manifest, checks that together they hold every subtask of every operator exactly
/// once, writes `_metadata` (only if none is there) and deletes the manifests. A shard that
/// has not finished is named. Cheap: reads `n` small objects and writes one.
pub fn finish_shards(
    output: &statekit_core::location::Location,
    n: u32,
) -> Result<statekit_format::SnapshotMetadata, MigrateError> {
    let (storage, prefix) = output.storage_and_path().map_err(CheckpointError::from)?;
    let shown = PathBuf::from(output.display());
    if n == 0 {
        return Err(MigrateError::InvalidShard { shard: 0, shards: 0 });
    }
    let mut merged: Option<statekit_format::SnapshotMetadata> = None;
    for i in 0..n {
        let path = shard_manifest(&prefix, i, n);
        let blob = match storage.open(&path) {
            Ok(b) => b,
            Err(statekit_core::storage::StorageError::NotFound(_)) => {
                return Err(MigrateError::ShardMissing {
                    output: shown,
                    shard: i,
                    shards: n,
                })
            }
            Err(e) => return Err(CheckpointError::from(e).into()),
        };
        let part =
            statekit_format::decode_metadata(blob.bytes(), &storage.describe(&path)).map_err(CheckpointError::from)?;
        match merged.as_mut() {
            None => merged = Some(part),
            Some(m) => {
                for op in part.operators {
                    let Some(into) = m.operators.iter_mut().find(|o| o.uid == op.uid) else {
                        m.operators.push(op);
                        continue;
                    };
                    for d in op.keyed_states {
                        if !into.keyed_states.iter().any(|x| x.name == d.name) {
                            into.keyed_states.push(d);
                        }
                    }
                    for d in op.operator_states {
                        if !into.operator_states.iter().any(|x| x.name == d.name) {
                            into.operator_states.push(d);
                        }
                    }
                    into.subtasks.extend(op.subtasks);
                }
            }
        }
    }
    let mut meta = merged.ok_or(MigrateError::InvalidShard { shard: 0, shards: n })?;
    for op in &mut meta.operators {
        op.subtasks.sort_by_key(|s| s.index);
        let indices: Vec<u32> = op.subtasks.iter().map(|s| s.index).collect();
        if indices != (0..op.parallelism).collect::<Vec<u32>>() {
            return Err(MigrateError::ShardsIncomplete {
                output: shown,
                uid: op.uid.clone(),
                found: indices,
                parallelism: op.parallelism,
            });
        }
        op.finished = op.subtasks.iter().all(|s| s.finished);
    }
    let bytes = encode_metadata(&meta);
    // The same structural checks every reader applies, before anything is committed.
    statekit_format::check_metadata(&bytes, &output.display()).map_err(CheckpointError::from)?;
    storage
        .put_new(&statekit_core::storage::join(&prefix, METADATA_FILE_NAME), &bytes)
        .map_err(CheckpointError::from)?;
    let _ = storage.delete_dir_all(&statekit_core::storage::join(&prefix, SHARDS_DIR));
    Ok(meta)
}

/// Refuses native output in a build without RocksDB.
fn check_format_built(plan: &Plan) -> Result<(), MigrateError> {
    #[cfg(not(feature = "rocksdb"))]
    if plan.options.format == crate::OutputFormat::Native {
        return Err(MigrateError::NotSupported {
            what: "native output in a build without the `rocksdb` feature".into(),
        });
    }
    let _ = plan;
    Ok(())
}

impl Summary {
    /// What `written` put into the snapshot `meta` describes, at `output`; `metadata_bytes`:
    /// the size of its `_metadata`, counted as one more file (`None`: a shard, which writes
    /// none).
    fn of(
        output: PathBuf,
        meta: &statekit_format::SnapshotMetadata,
        written: &Written,
        metadata_bytes: Option<u64>,
    ) -> Self {
        let files = meta
            .operators
            .iter()
            .flat_map(|o| &o.subtasks)
            .map(|s| {
                u64::from(s.keyed.canonical().is_some())
                    + u64::from(s.operator.is_some())
                    + s.keyed.native().map_or(0, |h| h.files.len() as u64)
            })
            .sum::<u64>();
        Summary {
            output,
            operators: meta.operators.len(),
            subtasks: written.subtasks,
            files: files + u64::from(metadata_bytes.is_some()),
            bytes: written.bytes.saturating_add(metadata_bytes.unwrap_or(0)),
            entries: written.entries,
            spilled_runs: written.spilled,
        }
    }
}

/// The writer of the output savepoint in directory `dir` of `storage`: the input's ids and
/// properties, the plan's compression and block size, and where it was migrated from.
fn output_writer(
    storage: Arc<dyn Storage>,
    dir: &str,
    plan: &Plan,
    input: &Path,
) -> Result<SnapshotWriter, MigrateError> {
    let meta = &plan.input;
    let mut writer = SnapshotWriter::new(storage, dir, SnapshotKind::Savepoint, meta.checkpoint_id, &meta.job_id)?
        .with_options(WriteOptions {
            compression: plan.options.compression,
            block_size: plan.options.block_size,
        });
    for (k, v) in meta.properties.iter().filter(|(k, _)| k.as_str() != "writer") {
        writer.set_property(k, v);
    }
    writer.set_property("migrated-from", &input.display().to_string());
    Ok(writer)
}

/// What [`write_all`] wrote.
struct Written {
    subtasks: u64,
    bytes: u64,
    entries: u64,
    spilled: usize,
}

/// Removes a directory (when it exists) when dropped.
struct RemoveDirOnDrop(Option<PathBuf>);

impl Drop for RemoveDirOnDrop {
    fn drop(&mut self) {
        if let Some(p) = self.0.as_ref().filter(|p| p.exists()) {
            let _ = std::fs::remove_dir_all(p);
        }
    }
}

/// Every subtask of every output operator, on `options.threads` threads.
fn write_all(
    snapshot: &Snapshot,
    plan: &Plan,
    writer: &SnapshotWriter,
    dir: &Path,
    options: &MigrateOptions,
    progress: &(dyn Fn(&Progress) + Sync),
) -> Result<Written, MigrateError> {
    // Operator state is small by design (kept on the heap by the job): redistributed per
    // operator up front, by Flink's rules for the new parallelism.
    let mut work: Vec<(usize, u32)> = Vec::new();
    let mut op_states: Vec<Vec<OperatorStateSnapshot>> = Vec::new();
    let mut rebucketed: Vec<Option<SortedEntries>> = Vec::new();
    // By default the re-bucketing sort runs on every core, and two subtasks per core are
    // written at once: while one waits for the disk, the other encodes.
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let (threads, write_threads) = match options.threads {
        0 => (cores, 2 * cores),
        n => (n, n),
    };
    let spill_dir = plan
        .options
        .spill_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("{}.spill", dir.display())));
    // A spill directory of our own goes on every path out, errors included.
    let _spill_guard = RemoveDirOnDrop(plan.options.spill_dir.is_none().then(|| spill_dir.clone()));
    if plan.options.format == crate::OutputFormat::Native {
        std::fs::create_dir_all(&spill_dir).map_err(|e| MigrateError::io(&spill_dir, e))?;
    }
    for (oi, op) in plan.operators.iter().enumerate() {
        writer.register_operator_with_id(&op.uid, op.output_id(), op.parallelism, op.max_parallelism)?;
        writer.set_key_group_scheme(&op.uid, op.key_group_scheme)?;
        rebucketed.push(
            if op.max_parallelism != op.source_max_parallelism
                && !op.keyed_states.is_empty()
                && !crate::view::splits(op)
            {
                std::fs::create_dir_all(&spill_dir).map_err(|e| MigrateError::io(&spill_dir, e))?;
                let all = KeyGroupRange::all(op.source_max_parallelism);
                let views = snapshot.keyed_views(&op.source_uid, all)?;
                let input = MigratedView::new(op, all, views, plan.purge_expired_at);
                let r = SortedEntries::rebucket(&input, op.max_parallelism, plan.options.memory, &spill_dir, threads)?;
                tracing::debug!(uid = %op.uid, entries = r.entries(), spilled = r.spilled(), "re-bucketed");
                Some(r)
            } else {
                None
            },
        );
        op_states.push(if op.linked {
            Vec::new()
        } else {
            operator_states(snapshot, op)?
        });
        work.extend((0..op.parallelism).map(|i| (oi, i)));
    }
    if let Some((shard, shards)) = options.shard {
        // Every `shards`th subtask of the whole list from the `shard`th: shards get about the
        // same number of subtasks of every operator.
        work = work
            .into_iter()
            .enumerate()
            .filter(|(k, _)| *k as u64 % u64::from(shards) == u64::from(shard))
            .map(|(_, w)| w)
            .collect();
    }
    let total = work.len() as u64;
    let threads = write_threads.clamp(1, work.len().max(1));
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let first_error: Mutex<Option<MigrateError>> = Mutex::new(None);
    let (done, bytes, entries) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                while !failed.load(Ordering::Relaxed) {
                    let Some(&(oi, i)) = work.get(next.fetch_add(1, Ordering::Relaxed)) else {
                        return;
                    };
                    let (Some(op), Some(states)) = (plan.operators.get(oi), op_states.get(oi)) else {
                        return;
                    };
                    let r = if op.linked {
                        link_subtask(snapshot, writer, dir, op, i)
                    } else {
                        let re = rebucketed.get(oi).and_then(Option::as_ref);
                        write_subtask(snapshot, plan, writer, op, i, states.get(i as usize), re, &spill_dir)
                    };
                    match r {
                        Ok((b, n)) => {
                            bytes.fetch_add(b, Ordering::Relaxed);
                            entries.fetch_add(n, Ordering::Relaxed);
                            progress(&Progress {
                                subtasks_done: done.fetch_add(1, Ordering::Relaxed) + 1,
                                subtasks_total: total,
                                bytes_written: bytes.load(Ordering::Relaxed),
                                entries: entries.load(Ordering::Relaxed),
                            });
                        }
                        Err(e) => {
                            failed.store(true, Ordering::Relaxed);
                            let mut slot = first_error.lock().unwrap_or_else(|p| p.into_inner());
                            slot.get_or_insert(e);
                        }
                    }
                }
            });
        }
    });
    let spilled = rebucketed.iter().flatten().map(|r| r.spilled()).sum();
    drop(rebucketed);
    if spill_dir.exists() && plan.options.spill_dir.is_none() {
        let _ = std::fs::remove_dir_all(&spill_dir);
    }
    if let Some(e) = first_error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    Ok(Written {
        spilled,
        subtasks: done.into_inner(),
        bytes: bytes.into_inner(),
        entries: entries.into_inner(),
    })
}

/// The operator state of each output subtask of `op`, with the plan's renames and drops:
/// list state split and broadcast state copied by Flink's rules for the new parallelism;
/// union state kept as stored, input subtask `i`'s elements written by output subtask
/// `i mod parallelism`, so that the union a restore hands every subtask holds each element
/// exactly as often as the input's (redistributed union state would hold it once per subtask).
fn operator_states(snapshot: &Snapshot, op: &OperatorPlan) -> Result<Vec<OperatorStateSnapshot>, MigrateError> {
    let p = op.parallelism as usize;
    if op.operator_states.is_empty() {
        return Ok(vec![OperatorStateSnapshot::default(); p]);
    }
    let old = (0..op.source_parallelism)
        .map(|i| snapshot.stored_operator_state(&op.source_uid, i))
        .collect::<Result<Vec<_>, _>>()?;
    let mut out = statekit_core::redistribute(&old, op.parallelism)?;
    for (j, snap) in out.iter_mut().enumerate() {
        for (d, data) in &mut snap.states {
            if d.mode != OperatorStateMode::Union {
                continue;
            }
            let mut mine = Vec::new();
            for stored in old.iter().skip(j).step_by(p.max(1)) {
                for (sd, sdata) in &stored.states {
                    if let (true, OperatorStateData::List(items)) = (sd.name == d.name, sdata) {
                        mine.extend(items.iter().cloned());
                    }
                }
            }
            *data = OperatorStateData::List(mine);
        }
        snap.states = std::mem::take(&mut snap.states)
            .into_iter()
            .filter_map(|(d, data)| {
                let plan = op.operator_states.iter().find(|s| s.source == d.name)?;
                Some((plan.target.clone(), data))
            })
            .collect();
    }
    Ok(out)
}

/// Writes subtask `i` of `op`; returns the bytes and keyed entries written. Native output
/// builds its databases under `scratch`.
#[allow(clippy::too_many_arguments)]
fn write_subtask(
    snapshot: &Snapshot,
    plan: &Plan,
    writer: &SnapshotWriter,
    op: &OperatorPlan,
    i: u32,
    operator: Option<&OperatorStateSnapshot>,
    rebucketed: Option<&SortedEntries>,
    scratch: &Path,
) -> Result<(u64, u64), MigrateError> {
    let range = KeyGroupRange::for_subtask(op.max_parallelism, op.parallelism, i);
    let finished = subtask_finished(plan, op, i);
    if plan.options.format == crate::OutputFormat::Canonical {
        if let Some((file, states)) = transcodable(snapshot, plan, op, i, range)? {
            let meta = writer.write_subtask_transcoded(&op.uid, i, &file, states, operator, finished)?;
            let entries = meta.keyed_stats.as_ref().map_or(0, |s| s.entries);
            return Ok((file_bytes(&meta), entries));
        }
    }
    let migrated;
    let re;
    let split;
    let view: Option<&dyn statekit_core::KeyedStateView> = if op.keyed_states.is_empty() {
        None
    } else if let Some(r) = rebucketed {
        re = r.view(range);
        Some(&re)
    } else if crate::view::splits(op) {
        // A multiple of the input's max parallelism: each output key group is part of one
        // input key group, streamed without the sort.
        let source = crate::view::split_source(range, op.source_max_parallelism);
        let views = snapshot.keyed_views(&op.source_uid, source)?;
        split = SplitView::new(
            MigratedView::new(op, source, views, plan.purge_expired_at),
            op.max_parallelism,
            range,
        );
        Some(&split)
    } else {
        let views = snapshot.keyed_views(&op.source_uid, range)?;
        migrated = MigratedView::new(op, range, views, plan.purge_expired_at);
        Some(&migrated)
    };
    #[cfg(feature = "rocksdb")]
    if let (Some(view), crate::OutputFormat::Native) = (view, plan.options.format) {
        return write_native_subtask(plan, writer, op, i, range, view, operator, finished, scratch);
    }
    #[cfg(not(feature = "rocksdb"))]
    let _ = scratch;
    let meta = writer.write_subtask(&op.uid, i, view, operator, finished)?;
    let bytes = file_bytes(&meta);
    let entries = meta.keyed_stats.as_ref().map_or(0, |s| s.entries);
    Ok((bytes, entries))
}

/// Whether output subtask `i` of `op` is finished: a subtask that kept its index and range
/// keeps its flag; a rescaled operator's subtasks are finished when the whole operator was.
fn subtask_finished(plan: &Plan, op: &OperatorPlan, i: u32) -> bool {
    op.finished
        || (op.parallelism == op.source_parallelism
            && op.max_parallelism == op.source_max_parallelism
            && plan
                .input
                .operator(&op.source_uid)
                .and_then(|o| o.subtasks.get(i as usize))
                .is_some_and(|s| s.finished))
}

/// The input's keyed data file of subtask `i` and the output's names of its states, when
/// output subtask `i` holds exactly that file's entries — same key groups, every state
/// kept (renames allowed), nothing purged or filtered — so it can be copied block by block
/// instead of entry by entry.
fn transcodable(
    snapshot: &Snapshot,
    plan: &Plan,
    op: &OperatorPlan,
    i: u32,
    range: KeyGroupRange,
) -> Result<Option<(KeyedFileReader, Vec<statekit_core::StateDescriptor>)>, MigrateError> {
    // Only statekit's own files are transcoded as statekit's (never another family's).
    let Some(files) = snapshot.statekit_files() else {
        return Ok(None);
    };
    if plan.purge_expired_at.is_some()
        || !op.keys.keeps_all()
        || op.parallelism != op.source_parallelism
        || op.max_parallelism != op.source_max_parallelism
        || op.keyed_states.is_empty()
    {
        return Ok(None);
    }
    let Some(s) = plan
        .input
        .operator(&op.source_uid)
        .and_then(|o| o.subtasks.get(i as usize))
    else {
        return Ok(None);
    };
    let statekit_format::KeyedHandle::Canonical(f) = &s.keyed else {
        return Ok(None);
    };
    let (storage, path) = files.resolver().resolve(f).map_err(CheckpointError::from)?;
    let file = KeyedFileReader::open(storage.as_ref(), &path, Some(f.size)).map_err(CheckpointError::from)?;
    let names: Vec<&str> = statekit_core::KeyedStateView::states(&file)
        .iter()
        .map(|d| d.name.as_str())
        .collect();
    let sources: Vec<&str> = op.keyed_states.iter().map(|k| k.source.as_str()).collect();
    if names != sources || statekit_core::KeyedStateView::key_group_range(&file) != range {
        return Ok(None);
    }
    let states = op.keyed_states.iter().map(|k| k.target.clone()).collect();
    Ok(Some((file, states)))
}

/// Block size of the SST files of native output.
#[cfg(feature = "rocksdb")]
const NATIVE_BLOCK_SIZE: usize = 16 << 10;

/// LZ4 acceleration of the SST files of native output: compression is most of a
/// conversion's CPU, and at 8 it takes half the time for about 1% more bytes on the
/// benchmark's state (more on highly compressible text; see design note 0011).
#[cfg(feature = "rocksdb")]
const NATIVE_LZ4_ACCELERATION: u32 = 8;

/// Writes subtask `i` of `op` with its keyed state as RocksDB's native files: a database
/// bulk-loaded from `view` (SST files written and ingested) in scratch space beside the
/// output, its files uploaded into the snapshot directory. Returns the bytes and keyed
/// entries written.
#[cfg(feature = "rocksdb")]
#[allow(clippy::too_many_arguments)]
fn write_native_subtask(
    plan: &Plan,
    writer: &SnapshotWriter,
    op: &OperatorPlan,
    i: u32,
    range: KeyGroupRange,
    view: &dyn statekit_core::KeyedStateView,
    operator: Option<&OperatorStateSnapshot>,
    finished: bool,
    scratch: &Path,
) -> Result<(u64, u64), MigrateError> {
    use statekit_rocksdb::{Compression as Sst, RocksDbOptions};
    let compression = match plan.options.compression {
        statekit_format::Compression::None => Sst::None,
        statekit_format::Compression::Lz4 => Sst::Lz4,
        statekit_format::Compression::Zstd { .. } => Sst::Zstd,
    };
    let mut options = RocksDbOptions::default()
        .with_compression(compression)
        .with_auto_compactions(false)
        .with_block_cache_bytes(8 << 20)
        .with_local_dir(scratch);
    // Bulk-built files are read in long scans (restores, conversions) more than by point
    // lookups: 16 KiB blocks (the flash-ssd profile's) compress in a quarter of the calls.
    options.block_size = NATIVE_BLOCK_SIZE;
    options.lz4_acceleration = NATIVE_LZ4_ACCELERATION;
    let target = writer.native_target(&op.uid, i)?;
    // A conversion expires nothing (the restoring job does), unless asked to purge.
    let clock = plan.purge_expired_at.unwrap_or(i64::MIN);
    let written = statekit_rocksdb::write_native(view, range, clock, plan.input.checkpoint_id, &options, &target, 0)?;
    let bytes = written
        .handle
        .files
        .iter()
        .map(|f| f.file.size)
        .fold(0, u64::saturating_add);
    let meta = writer.add_native_subtask(&op.uid, i, written.handle, written.states, operator, finished)?;
    Ok((bytes.saturating_add(file_bytes(&meta)), written.entries))
}

/// Links (or copies) the data files of input subtask `i` of `op` into the output directory
/// `dir` and records them; returns the bytes and keyed entries.
fn link_subtask(
    snapshot: &Snapshot,
    writer: &SnapshotWriter,
    dir: &Path,
    op: &OperatorPlan,
    i: u32,
) -> Result<(u64, u64), MigrateError> {
    let files = snapshot.statekit_files().ok_or_else(|| MigrateError::NotSupported {
        what: format!("--link of operator {:?}: its files are not statekit's", op.source_uid),
    })?;
    let input = snapshot.operator(&op.source_uid)?;
    let s = input
        .subtasks
        .get(i as usize)
        .ok_or_else(|| MigrateError::NotSupported {
            what: format!("operator {:?} without subtask {i} in _metadata", op.source_uid),
        })?;
    let id = statekit_core::OperatorId::from_uid(&op.uid);
    let place = |f: &FileRef, name: String| -> Result<(Arc<dyn Storage>, String, FileRef), MigrateError> {
        let (storage, path) = files.resolver().resolve(f).map_err(CheckpointError::from)?;
        let src = storage.absolute_path(&path).ok_or_else(|| MigrateError::NotSupported {
            what: format!("--link of {} (not on a local file system)", storage.describe(&path)),
        })?;
        link_or_copy(&src, &dir.join(&name))?;
        Ok((
            storage,
            path,
            FileRef {
                scope: FileScope::Exclusive,
                path: name,
                size: f.size,
            },
        ))
    };
    let keyed = match s.keyed.canonical() {
        Some(f) => {
            let (storage, path, placed) = place(f, format!("{id}-{i}-keyed.skd"))?;
            let r = KeyedFileReader::open(storage.as_ref(), &path, Some(f.size)).map_err(CheckpointError::from)?;
            let stats = s.keyed_stats.clone().unwrap_or_else(|| KeyedStats::from_info(r.info()));
            Some((placed, stats, statekit_core::KeyedStateView::states(&r).to_vec()))
        }
        None => None,
    };
    let operator = match &s.operator {
        Some(f) => {
            let (storage, path, placed) = place(f, format!("{id}-{i}-operator.sko"))?;
            let snap = read_operator_file(storage.as_ref(), &path, Some(f.size)).map_err(CheckpointError::from)?;
            Some((placed, snap.states.into_iter().map(|(d, _)| d).collect()))
        }
        None => None,
    };
    let entries = keyed.as_ref().map_or(0, |k| k.1.entries);
    let meta = writer.add_existing_subtask(&op.uid, i, keyed, operator, s.finished)?;
    let bytes = file_bytes(&meta);
    Ok((bytes, entries))
}

/// Bytes of a written subtask's data files.
fn file_bytes(meta: &statekit_format::SubtaskMetadata) -> u64 {
    meta.keyed
        .canonical()
        .into_iter()
        .chain(meta.operator.iter())
        .map(|f| f.size)
        .fold(0, u64::saturating_add)
}

/// A hard link of `src` at `dst`, or, where that cannot be (another file system), a copy,
/// fsynced.
fn link_or_copy(src: &Path, dst: &Path) -> Result<(), MigrateError> {
    if std::fs::hard_link(src, dst).is_ok() {
        return Ok(());
    }
    std::fs::copy(src, dst).map_err(|e| MigrateError::io(src, e))?;
    std::fs::File::open(dst)
        .and_then(|f| f.sync_all())
        .map_err(|e| MigrateError::io(dst, e))
}

/// Where a savepoint written from an input goes, crash-safely: the output's parent, and the
/// hidden temporary name it is written under first (then [`OutputTarget::publish`]ed). A
/// SIGKILL at any moment leaves no output or a complete one; temporary directories of killed
/// runs are removed by the next run.
#[derive(Debug)]
pub struct OutputTarget {
    parent: PathBuf,
    output: PathBuf,
    temp_name: String,
    replace: bool,
}

impl OutputTarget {
    /// The output's parent directory (absolute).
    pub fn parent(&self) -> &Path {
        &self.parent
    }

    /// The temporary directory name (under [`OutputTarget::parent`]) to write into.
    pub fn temp_name(&self) -> &str {
        &self.temp_name
    }

    /// Checks `output` against `input` (neither may lie inside the other) and `force` (an
    /// existing output is refused without it; with it, only a snapshot or an empty directory
    /// is replaced); creates the output's parent.
    pub fn check(input: &Path, output: &Path, force: bool) -> Result<OutputTarget, MigrateError> {
        Self::check_impl(Some(input), output, force)
    }

    /// [`OutputTarget::check`] for an input that is not on the local file system (an object
    /// store's snapshot: the output cannot lie inside it).
    pub fn check_output(output: &Path, force: bool) -> Result<OutputTarget, MigrateError> {
        Self::check_impl(None, output, force)
    }

    fn check_impl(input: Option<&Path>, output: &Path, force: bool) -> Result<OutputTarget, MigrateError> {
        let name = output
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .filter(|n| n != "." && n != "..")
            .ok_or_else(|| MigrateError::io(output, std::io::Error::other("the output needs a directory name")))?;
        let parent = match output.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        std::fs::create_dir_all(&parent).map_err(|e| MigrateError::io(&parent, e))?;
        let parent = parent.canonicalize().map_err(|e| MigrateError::io(&parent, e))?;
        let output_abs = parent.join(&name);
        if let Some(input) = input {
            let input_dir = if input.is_file() {
                input.parent().unwrap_or(Path::new(".")).to_path_buf()
            } else {
                input.to_path_buf()
            };
            let input_abs = input_dir.canonicalize().map_err(|e| MigrateError::io(&input_dir, e))?;
            if output_abs.starts_with(&input_abs) || input_abs.starts_with(&output_abs) {
                return Err(MigrateError::OutputIsInput {
                    output: output.to_path_buf(),
                    input: input.to_path_buf(),
                });
            }
        }
        let replace = match std::fs::symlink_metadata(&output_abs) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => return Err(MigrateError::io(output, e)),
            Ok(_) if !force => {
                return Err(MigrateError::OutputExists {
                    path: output.to_path_buf(),
                })
            }
            Ok(md) if md.is_dir() => {
                // Only an empty directory or a snapshot statekit wrote (and nothing else) is
                // replaced: --force never deletes a directory of something else.
                crate::check_local_replaceable(&output_abs, output)?;
                true
            }
            Ok(md) => {
                return Err(MigrateError::OutputNotReplaceable {
                    path: output.to_path_buf(),
                    reason: format!(
                        "it is {}, not a directory",
                        statekit_core::storage::file_type_name(md.file_type())
                    ),
                })
            }
        };
        // What killed runs left here (any output's temporaries whose process is gone).
        statekit_core::temp::remove_dead_leftovers(&parent);
        let temp_name = statekit_core::temp::temp_name(&name);
        Ok(OutputTarget {
            parent,
            output: output_abs,
            temp_name,
            replace,
        })
    }

    /// Renames the finished temporary directory to the output (moving a replaced output
    /// aside first, deleting it after), then fsyncs the parent.
    pub fn publish(&self) -> Result<(), MigrateError> {
        let temp = self.parent.join(&self.temp_name);
        if self.replace {
            let old = self.parent.join(format!("{}.old", self.temp_name));
            std::fs::rename(&self.output, &old).map_err(|e| MigrateError::io(&self.output, e))?;
            std::fs::rename(&temp, &self.output).map_err(|e| MigrateError::io(&self.output, e))?;
            sync_dir(&self.parent)?;
            std::fs::remove_dir_all(&old).map_err(|e| MigrateError::io(&old, e))?;
        } else {
            std::fs::rename(&temp, &self.output).map_err(|e| MigrateError::io(&self.output, e))?;
        }
        sync_dir(&self.parent)
    }
}

fn sync_dir(dir: &Path) -> Result<(), MigrateError> {
    statekit_core::storage::sync_dir(dir).map_err(|e| MigrateError::io(dir, e))
}
