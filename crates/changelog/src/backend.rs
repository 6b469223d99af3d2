//! [`ChangelogBackend`]: a keyed state backend that applies every mutation to its delegate and
//! logs it (`docs/design/0006-changelog.md`).

use crate::error::ChangelogError;
use crate::file::{LogId, META_KEY_GROUP};
use crate::materialize::{MaterializationPolicy, Materializer};
use crate::record::{Change, Op, ReadKind, Record};
use crate::tail::{walk_tail, LogFiles, TailProblem, TailStats};
use crate::writer::{ChangelogStorage, ChangelogWriter, PendingPersist};
use statekit_core::state::{KeyedStateKind, TtlUpdateType};
use statekit_core::storage::Storage;
use statekit_core::{
    BackendConfig, Clock, KeyGroupAssigner, KeyGroupRange, KeyGroupScheme, KeyedStateBackend, KeyedStateView,
    StateDescriptor, StateError, StateFunctions, StateHandle,
};
use statekit_format::{
    ChangelogKeyedHandle, FileRef, KeyedFileReader, LogSegmentRef, MaterializedPart, ResolvedChangelogHandle,
    ResolvedFile,
};
use std::collections::{BTreeMap, HashMap};
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

/// The clock the delegate of a [`ChangelogBackend`] runs on: pinned by the wrapper to the time
/// of each operation (read from the real clock), so the time a TTL record carries is exactly
/// the time the delegate used — and replay, pinning it to the recorded times, reproduces
/// expiry, purges and read refreshes exactly.
#[derive(Debug)]
pub struct ReplayClock {
    real: Arc<dyn Clock>,
    pinned: AtomicI64,
    following: std::sync::atomic::AtomicBool,
}

impl ReplayClock {
    /// A clock over `real`, pinned to its current reading.
    pub fn new(real: Arc<dyn Clock>) -> Arc<Self> {
        let now = real.now_ms();
        Arc::new(ReplayClock {
            real,
            pinned: AtomicI64::new(now),
            following: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Pins the time (and stops following the real clock).
    pub fn pin(&self, ms: i64) {
        self.pinned.store(ms, Ordering::Relaxed);
        self.following.store(false, Ordering::Relaxed);
    }

    /// Follows the real clock from now on (for a backend without the changelog, after
    /// [`restore_into`] replayed into it).
    pub fn follow(&self) {
        self.following.store(true, Ordering::Relaxed);
    }

    /// Pins the real clock's current reading and returns it.
    pub fn pin_now(&self) -> i64 {
        let now = self.real.now_ms();
        self.pin(now);
        now
    }
}

impl Clock for ReplayClock {
    fn now_ms(&self) -> i64 {
        if self.following.load(Ordering::Relaxed) {
            self.real.now_ms()
        } else {
            self.pinned.load(Ordering::Relaxed)
        }
    }
}

/// One registered state as the wrapper logs it.
#[derive(Debug)]
struct Logged {
    desc: StateDescriptor,
    /// Its metadata record was written in the current log segment.
    meta_written: bool,
    /// Where its keys go: the backend's key-group rule for the state's key type.
    groups: KeyGroupAssigner,
}

impl Logged {
    fn ttl(&self) -> bool {
        self.desc.ttl.is_some()
    }
    fn refresh_on_read(&self) -> bool {
        matches!(self.desc.ttl, Some(t) if t.update_type == TtlUpdateType::OnReadAndWrite)
    }
}

/// A materialization this backend wrote.
#[derive(Clone, Debug)]
pub(crate) struct OwnMaterialization {
    pub(crate) id: u64,
    pub(crate) part: MaterializedPart,
    /// Its path in the materialization storage.
    pub(crate) path: String,
    /// A completed checkpoint references it: the checkpoint store owns the file.
    pub(crate) confirmed: bool,
}

/// What a pending or retained checkpoint uses.
#[derive(Clone, Debug)]
struct CheckpointUse {
    from: u64,
    to: u64,
    materializations: Vec<u64>,
}

/// State restored from snapshots, referenced by every checkpoint until the first own
/// materialization.
#[derive(Clone, Debug, Default)]
struct Inherited {
    materialized: Vec<MaterializedPart>,
    tail: Vec<LogSegmentRef>,
}

/// A keyed state backend that applies every mutation to its delegate (the heap or RocksDB
/// backend) and appends it to a changelog; checkpoints are the last materialization plus the
/// log since ([`ChangelogBackend::checkpoint`]). Savepoints ([`KeyedStateBackend::snapshot`])
/// are the delegate's canonical state.
pub struct ChangelogBackend<D: KeyedStateBackend = Box<dyn KeyedStateBackend>> {
    delegate: D,
    clock: Arc<ReplayClock>,
    writer: ChangelogWriter,
    max_parallelism: u32,
    range: KeyGroupRange,
    states: Vec<Logged>,
    materializer: Materializer,
    materialized_to: u64,
    own: Vec<OwnMaterialization>,
    inherited: Inherited,
    /// The next checkpoint needs a materialization first (after a restore that must share
    /// nothing, or from a snapshot without a changelog).
    needs_materialization: bool,
    checkpoints: BTreeMap<u64, CheckpointUse>,
    buf: Vec<u8>,
}

impl<D: KeyedStateBackend> std::fmt::Debug for ChangelogBackend<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChangelogBackend")
            .field("log", &self.writer.log())
            .field("key_group_range", &self.range)
            .field("materialized_to", &self.materialized_to)
            .finish()
    }
}

/// The synchronous part of a changelog checkpoint; [`ChangelogCut::finish`] (on any thread)
/// waits for the log tail to be durable and returns the handle for `_metadata`.
#[derive(Debug)]
pub struct ChangelogCut {
    checkpoint_id: u64,
    range: KeyGroupRange,
    pending: PendingPersist,
    storage: ChangelogStorage,
    log: LogId,
    materialization_id: u64,
    materialized: Vec<MaterializedPart>,
    inherited_tail: Vec<LogSegmentRef>,
}

impl ChangelogCut {
    /// The checkpoint.
    pub fn checkpoint_id(&self) -> u64 {
        self.checkpoint_id
    }

    /// Waits until the tail is uploaded; the handle lists the materializations and every
    /// change set to replay.
    pub fn finish(self) -> Result<ChangelogKeyedHandle, ChangelogError> {
        let segments = self.pending.wait()?;
        let mut tail = self.inherited_tail;
        for s in &segments {
            tail.push(LogSegmentRef {
                file: self.storage.file_ref(s)?,
                offset: s.offset,
                length: s.length,
                log: s.log.0,
                sqn: s.sqn,
                records: s.records,
                key_groups: self.range,
            });
        }
        Ok(ChangelogKeyedHandle {
            log: self.log.0,
            materialization_id: self.materialization_id,
            materialized: self.materialized,
            tail,
        })
    }
}

#[inline]
fn wrong(e: ChangelogError) -> StateError {
    e.into()
}

impl<D: KeyedStateBackend> ChangelogBackend<D> {
    /// A backend for `config` whose delegate `make_delegate` builds (it gets the config with
    /// the [`ReplayClock`] the wrapper controls), logging through `storage`, materializing
    /// with `materializer`.
    pub fn new(
        config: BackendConfig,
        storage: &ChangelogStorage,
        materializer: Materializer,
        make_delegate: impl FnOnce(BackendConfig) -> Result<D, StateError>,
    ) -> Result<Self, StateError> {
        let clock = ReplayClock::new(config.clock.clone());
        let delegate = make_delegate(config.clone().with_clock(clock.clone()))?;
        Ok(ChangelogBackend {
            max_parallelism: delegate.max_parallelism(),
            range: delegate.key_group_range(),
            delegate,
            clock,
            writer: storage.writer(),
            states: Vec::new(),
            materializer,
            materialized_to: 0,
            own: Vec::new(),
            inherited: Inherited::default(),
            needs_materialization: false,
            checkpoints: BTreeMap::new(),
            buf: Vec::new(),
        })
    }

    /// Declares that the delegate `make_delegate` returned already holds state it restored
    /// by its own means (native RocksDB files, say): the wrapper learns its states, and the
    /// first checkpoint materializes first, since the log does not hold that state.
    pub fn delegate_restored(&mut self) {
        self.clock.pin_now();
        self.sync_states();
        self.needs_materialization = true;
    }

    /// The delegate (reading it directly bypasses the log; writing to it would make the log
    /// incomplete, hence no `&mut`). Its clock follows the real one again, so direct reads
    /// see TTL expiry as of now (each logged operation pins the time it records).
    pub fn delegate(&self) -> &D {
        self.clock.follow();
        &self.delegate
    }

    /// The log's id.
    pub fn log(&self) -> LogId {
        self.writer.log()
    }

    /// The log writer.
    pub fn writer(&self) -> &ChangelogWriter {
        &self.writer
    }

    /// The sequence number the newest materialization covers (changes below it are in it).
    pub fn materialized_to(&self) -> u64 {
        self.materialized_to
    }

    /// Bytes of log not yet materialized (what a restore would replay, restored tails
    /// excluded).
    pub fn tail_bytes(&self) -> u64 {
        let (bytes, _) = self.writer.tail_size();
        bytes
    }

    /// The materialization policy.
    pub fn policy(&self) -> &MaterializationPolicy {
        self.materializer.policy()
    }

    fn logged(&mut self, state: StateHandle) -> Result<&mut Logged, StateError> {
        let n = self.states.len();
        self.states
            .get_mut(state.0 as usize)
            .ok_or_else(|| StateError::UnknownState(format!("handle {} of {n}", state.0)))
    }

    /// Appends a change of `state` (writing its metadata record first in every segment).
    fn log_change(&mut self, state: StateHandle, key: &[u8], namespace: &[u8], time: Option<i64>, op: Op<'_>) {
        let i = state.0 as usize;
        let Some(st) = self.states.get_mut(i) else { return };
        if !st.meta_written {
            self.writer.append_metadata(state.0, &st.desc);
            st.meta_written = true;
        }
        // Called only after the delegate accepted the key under this same rule, so the rule
        // places it (a key it cannot place was refused there, and nothing is logged).
        let Ok(kg) = st.groups.key_group(key) else { return };
        self.writer.append(
            kg,
            &Change {
                state: state.0,
                time,
                key,
                namespace,
                op,
            },
        );
    }

    /// Pins the delegate's clock for an operation on `state`; returns the time to record.
    #[inline]
    fn pin(&self, state: StateHandle) -> Option<i64> {
        match self.states.get(state.0 as usize) {
            Some(st) if st.ttl() => Some(self.clock.pin_now()),
            _ => None,
        }
    }

    fn refreshes(&self, state: StateHandle) -> bool {
        self.states.get(state.0 as usize).is_some_and(Logged::refresh_on_read)
    }

    /// Logs a read that found something, when reads refresh the state's TTL (replay must
    /// refresh the same stamps).
    #[allow(clippy::too_many_arguments)]
    fn log_read(
        &mut self,
        found: bool,
        state: StateHandle,
        key: &[u8],
        namespace: &[u8],
        time: Option<i64>,
        kind: ReadKind,
        user_key: &[u8],
    ) {
        if found && self.refreshes(state) {
            self.log_change(state, key, namespace, time, Op::Read { kind, user_key });
        }
    }

    /// Logs the delegate's current value of (key, namespace) — `put` of it, or `clear` when
    /// there is none: how reducing and aggregating changes are logged, so replay needs no
    /// user function.
    fn log_current_value(
        &mut self,
        state: StateHandle,
        key: &[u8],
        namespace: &[u8],
        time: Option<i64>,
    ) -> Result<(), StateError> {
        let mut result = std::mem::take(&mut self.buf);
        let read = self.delegate.get(state, key, namespace, &mut result);
        if let Ok(found) = read {
            let op = if found { Op::Put(&result) } else { Op::Clear };
            self.log_change(state, key, namespace, time, op);
        }
        self.buf = result;
        read.map(|_| ())
    }

    fn kind(&self, state: StateHandle) -> Option<KeyedStateKind> {
        self.states.get(state.0 as usize).map(|s| s.desc.kind)
    }

    /// Registers in the wrapper every state the delegate has that the wrapper does not know
    /// yet (after a restore).
    fn sync_states(&mut self) {
        let scheme = self.delegate.key_group_scheme();
        for d in self.delegate.descriptors().into_iter().skip(self.states.len()) {
            self.states.push(Logged {
                groups: scheme.assigner(&d.key_schema, self.max_parallelism),
                desc: d,
                meta_written: false,
            });
        }
    }

    /// Starts a new log segment: every state logs its metadata again before its next change.
    fn new_segment(&mut self) {
        for s in &mut self.states {
            s.meta_written = false;
        }
    }

    // ------------------------------------------------------------------------------------
    // Materialization

    /// Runs the materialization policy: starts a materialization when it is due (period with
    /// jitter, or the tail is over its size bound) and none is running; applies a finished
    /// one. Fails after more consecutive failures than allowed. Call it regularly (every few
    /// records, and before checkpoints).
    pub fn poll(&mut self) -> Result<(), StateError> {
        self.apply_finished()?;
        let (tail_bytes, _) = self.writer.tail_size();
        if self.materializer.due(tail_bytes) {
            self.start_materialization()?;
        }
        Ok(())
    }

    /// Materializes now and waits for it (tests, forced full checkpoints).
    pub fn materialize_now(&mut self) -> Result<(), StateError> {
        self.materializer.wait_running();
        self.apply_finished()?;
        self.start_materialization()?;
        self.materializer.wait_running();
        self.apply_finished()
    }

    fn start_materialization(&mut self) -> Result<(), StateError> {
        let upto = self.writer.next_sqn();
        let unchanged = upto == self.materialized_to
            && !self.own.is_empty()
            && self.inherited.tail.is_empty()
            && self.inherited.materialized.is_empty();
        if unchanged && !self.needs_materialization {
            self.materializer.skipped();
            return Ok(());
        }
        self.clock.pin_now();
        let id = self.materializer.next_id();
        let view = self.delegate.snapshot(id)?;
        self.new_segment();
        self.materializer.start(id, upto, view, self.range, self.writer.log());
        Ok(())
    }

    /// Applies a finished materialization, if any.
    fn apply_finished(&mut self) -> Result<(), StateError> {
        let Some(done) = self.materializer.take_finished().map_err(wrong)? else {
            return Ok(());
        };
        tracing::debug!(id = done.own.id, upto = done.upto, "materialization applied");
        self.own.push(done.own);
        self.materialized_to = done.upto;
        self.inherited = Inherited::default();
        self.needs_materialization = false;
        self.cleanup();
        Ok(())
    }

    /// Truncates the log to what no materialization lacks and no checkpoint needs, and
    /// deletes own materializations nothing references.
    fn cleanup(&mut self) {
        let needed = self.checkpoints.values().map(|c| c.from).min().unwrap_or(u64::MAX);
        self.writer.truncate(self.materialized_to.min(needed));
        let current = self.own.last().map(|m| m.id);
        let pending: Vec<u64> = self
            .checkpoints
            .values()
            .flat_map(|c| c.materializations.iter().copied())
            .collect();
        let materializer = &self.materializer;
        self.own.retain(|m| {
            if Some(m.id) == current {
                return true;
            }
            if m.confirmed {
                // Owned by the checkpoint store now.
                return false;
            }
            if pending.contains(&m.id) {
                return true;
            }
            materializer.delete(&m.path);
            false
        });
    }

    // ------------------------------------------------------------------------------------
    // Checkpoints

    /// The synchronous part of checkpoint `checkpoint_id`: the tail since the newest
    /// materialization is handed to the uploader (most of it already is: uploads are
    /// continuous). After a restore that must share nothing with the restored snapshot
    /// (NO_CLAIM, or a snapshot without a changelog), a materialization runs first. Any number
    /// of checkpoints may be pending.
    pub fn checkpoint(&mut self, checkpoint_id: u64) -> Result<ChangelogCut, StateError> {
        self.apply_finished()?;
        if self.needs_materialization {
            self.materialize_now()?;
        }
        let from = self.materialized_to;
        let pending = self.writer.persist(from).map_err(wrong)?;
        let (_, to) = pending.range();
        let (materialization_id, materialized, mats, inherited_tail) = match self.own.last() {
            Some(m) if self.inherited.materialized.is_empty() && self.inherited.tail.is_empty() => {
                (m.id, vec![m.part.clone()], vec![m.id], Vec::new())
            }
            _ => (
                self.materializer.last_id(),
                self.inherited.materialized.clone(),
                Vec::new(),
                self.inherited.tail.clone(),
            ),
        };
        self.checkpoints.insert(
            checkpoint_id,
            CheckpointUse {
                from,
                to,
                materializations: mats,
            },
        );
        Ok(ChangelogCut {
            checkpoint_id,
            range: self.range,
            pending,
            storage: self.writer.storage().clone(),
            log: self.writer.log(),
            materialization_id,
            materialized,
            inherited_tail,
        })
    }

    // ------------------------------------------------------------------------------------
    // Restore

    /// Restores from changelog handles (a fresh backend): the delegate restores the
    /// overlapping materializations, then the tails are replayed in order, filtered to this
    /// backend's key groups (only the change sets that concern them are read). Until its first
    /// own materialization, the backend's checkpoints reference the restored files; with
    /// `share_restored` false (NO_CLAIM) its first checkpoint materializes first, so nothing is
    /// shared.
    pub fn restore_changelog(
        &mut self,
        handles: &[ResolvedChangelogHandle],
        share_restored: bool,
    ) -> Result<ReplayStats, StateError> {
        let stats = restore_into(&mut self.delegate, Some(&self.clock), self.range, handles)?;
        self.clock.pin_now();
        self.sync_states();
        let overlapping = handles
            .iter()
            .filter(|h| !h.key_groups.intersection(&self.range).is_empty());
        let mut inherited = Inherited::default();
        for h in overlapping {
            // What this backend inherits applies to the key groups it takes over only.
            let effective = h.key_groups.intersection(&self.range);
            for (m, file) in h.handle.materialized.iter().zip(&h.materialized) {
                let key_groups = m.key_groups.intersection(&effective);
                if !key_groups.is_empty() {
                    inherited.materialized.push(MaterializedPart {
                        key_groups,
                        file: portable(&m.file, file),
                        ..m.clone()
                    });
                }
            }
            for (t, file) in h.handle.tail.iter().zip(&h.tail) {
                let key_groups = t.key_groups.intersection(&effective);
                if !key_groups.is_empty() {
                    inherited.tail.push(LogSegmentRef {
                        key_groups,
                        file: portable(&t.file, file),
                        ..t.clone()
                    });
                }
            }
            self.materializer.observe_id(h.handle.materialization_id);
        }
        self.inherited = inherited;
        self.needs_materialization = !share_restored;
        Ok(stats)
    }
}

/// What a restore replayed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplayStats {
    /// Materialized files restored.
    pub materialized_files: usize,
    /// Change sets read (those concerning the backend's key groups).
    pub change_sets: usize,
    /// Change sets skipped through the index.
    pub change_sets_skipped: usize,
    /// Records applied.
    pub records: u64,
}

/// Restores `backend` (any keyed backend, with or without the changelog) from changelog
/// handles: their materializations overlapping `range`, then their tails replayed in order,
/// filtered by key group. When the backend runs on a [`ReplayClock`], pass it, so TTL data
/// gets exactly its recorded timestamps (without one, replayed TTL data is stamped "now"),
/// and call [`ReplayClock::follow`] once this returns: the clock is left pinned in the past.
pub fn restore_into(
    backend: &mut dyn KeyedStateBackend,
    clock: Option<&ReplayClock>,
    range: KeyGroupRange,
    handles: &[ResolvedChangelogHandle],
) -> Result<ReplayStats, StateError> {
    let mut stats = ReplayStats::default();
    let overlapping: Vec<&ResolvedChangelogHandle> = handles
        .iter()
        .filter(|h| !h.key_groups.intersection(&range).is_empty())
        .collect();
    // Every state of the operator, registered first (in the operator's order), so the
    // backend knows them even when neither a materialization nor the tail mentions them.
    for h in &overlapping {
        for d in &h.states {
            if backend.handle(&d.name).is_none() {
                backend.register(d.clone(), StateFunctions::None)?;
            }
        }
    }
    // Materializations. A handle is authoritative exactly for its own key groups: after a
    // rescale it may list inherited files and change sets covering more (its predecessor's
    // range), which must not be applied outside them — another handle covers those.
    let mut readers: Vec<(KeyedFileReader, KeyGroupRange)> = Vec::new();
    for h in &overlapping {
        if h.max_parallelism != backend.max_parallelism() {
            return Err(StateError::Restore(
                statekit_core::RestoreError::ChangelogMaxParallelism {
                    subtask: h.subtask,
                    snapshot: h.max_parallelism,
                    backend: backend.max_parallelism(),
                },
            ));
        }
        let effective = h.key_groups.intersection(&range);
        for (part, file) in h.handle.materialized.iter().zip(&h.materialized) {
            let part_range = part.key_groups.intersection(&effective);
            if part_range.is_empty() {
                continue;
            }
            let reader = KeyedFileReader::open(file.storage.as_ref(), &file.path, Some(file.size))
                .map_err(|e| StateError::Other(Box::new(e)))?;
            readers.push((reader, part_range));
        }
    }
    // The materialization is older than the tail: restored "now", entries a tail record
    // still touches (a refreshing read, say) could count as expired and be dropped before
    // the record is replayed. Restore with nothing expired; the replay then runs at the
    // recorded times, and whatever stays untouched expires against the real clock later.
    if let Some(c) = clock {
        c.pin(i64::MIN);
    }
    let clipped: Vec<ClippedView<'_>> = readers
        .iter()
        .map(|(r, rg)| ClippedView { inner: r, range: *rg })
        .collect();
    let views: Vec<&dyn KeyedStateView> = clipped.iter().map(|v| v as &dyn KeyedStateView).collect();
    backend.restore(&views)?;
    stats.materialized_files = readers.len();
    drop(views);
    drop(clipped);
    drop(readers);
    // Tails, walked as the verifier and `dump --changes` walk them; any problem refuses
    // the checkpoint.
    let mut files = LogFiles::new();
    let mut ids: HashMap<([u8; 16], u32), StateHandle> = HashMap::new();
    let mut tail = TailStats::default();
    for h in &overlapping {
        // Nothing here stops the walk but an error.
        let _ = walk_tail(
            h,
            "",
            range,
            &mut files,
            &mut tail,
            &mut |p| {
                Err(match p {
                    TailProblem::Open(e) | TailProblem::Read(e) => StateError::from(e),
                    TailProblem::Mismatch(p) => crate::ChangelogError::TailMismatch(Box::new(p)).into(),
                })
            },
            &mut |pos, kg, rec| {
                apply(backend, clock, &mut ids, pos.segment.log, kg, rec)?;
                Ok(ControlFlow::Continue(()))
            },
        )?;
    }
    stats.change_sets = tail.change_sets;
    stats.change_sets_skipped = tail.change_sets_skipped;
    stats.records = tail.records;
    Ok(stats)
}

/// How a checkpoint of this backend refers to a restored file: by absolute path or URL when it
/// has one (the snapshot may belong to another job, whose `shared` paths would not resolve from
/// this job's directory; the file's identity — its absolute path — stays the same, so the
/// checkpoint store's reference counts and protections apply unchanged), else as restored.
fn portable(original: &FileRef, resolved: &ResolvedFile) -> FileRef {
    FileRef::external(resolved.storage.as_ref(), &resolved.path, original.size).unwrap_or_else(|| original.clone())
}

/// A view restricted to some of its key groups.
struct ClippedView<'a> {
    inner: &'a dyn KeyedStateView,
    range: KeyGroupRange,
}

impl KeyedStateView for ClippedView<'_> {
    fn max_parallelism(&self) -> u32 {
        self.inner.max_parallelism()
    }
    fn key_group_scheme(&self) -> KeyGroupScheme {
        self.inner.key_group_scheme()
    }
    fn key_group_range(&self) -> KeyGroupRange {
        self.inner.key_group_range().intersection(&self.range)
    }
    fn states(&self) -> &[StateDescriptor] {
        self.inner.states()
    }
    fn visit_key_group(
        &self,
        key_group: u32,
        visitor: &mut statekit_core::EntryVisitor<'_>,
    ) -> Result<ControlFlow<()>, StateError> {
        if self.range.contains(key_group) {
            self.inner.visit_key_group(key_group, visitor)
        } else {
            Ok(ControlFlow::Continue(()))
        }
    }
}

/// Applies one record to `backend`.
fn apply(
    backend: &mut dyn KeyedStateBackend,
    clock: Option<&ReplayClock>,
    ids: &mut HashMap<([u8; 16], u32), StateHandle>,
    log: [u8; 16],
    kg: u32,
    rec: Record<'_>,
) -> Result<(), StateError> {
    match rec {
        Record::Metadata { state, descriptor } => {
            let h = match backend.handle(&descriptor.name) {
                Some(h) => {
                    let existing = backend.descriptors().into_iter().nth(h.0 as usize);
                    if let Some(e) = existing {
                        e.check_compatible(&descriptor).map_err(StateError::Incompatible)?;
                    }
                    h
                }
                None => backend.register(descriptor, StateFunctions::None)?,
            };
            ids.insert((log, state), h);
            Ok(())
        }
        Record::Change(c) => {
            debug_assert_ne!(kg, META_KEY_GROUP);
            let h = *ids
                .get(&(log, c.state))
                .ok_or_else(|| StateError::Restore(statekit_core::RestoreError::UndeclaredState { state: c.state }))?;
            if let (Some(clock), Some(t)) = (clock, c.time) {
                clock.pin(t);
            }
            let (k, n) = (c.key, c.namespace);
            match c.op {
                Op::Clear => backend.clear(h, k, n),
                Op::Put(v) => backend.put(h, k, n, v),
                Op::AddElement(v) => backend.add(h, k, n, v),
                Op::SetList(items) => backend.list_update(h, k, n, &items),
                Op::MapPut { user_key, value } => backend.map_put(h, k, n, user_key, value),
                Op::MapRemove(uk) => backend.map_remove(h, k, n, uk).map(|_| ()),
                Op::MergeList(sources) => backend.merge_namespaces(h, k, n, &sources),
                Op::Read { kind, user_key } => {
                    let mut out = Vec::new();
                    match kind {
                        ReadKind::Get => backend.get(h, k, n, &mut out).map(|_| ()),
                        ReadKind::List => backend.list_for_each(h, k, n, &mut |_| {}).map(|_| ()),
                        ReadKind::MapAll => backend.map_for_each(h, k, n, &mut |_, _| {}).map(|_| ()),
                        ReadKind::MapEntry => backend.map_get(h, k, n, user_key, &mut out).map(|_| ()),
                    }
                }
            }
        }
    }
}

impl<D: KeyedStateBackend> KeyedStateBackend for ChangelogBackend<D> {
    fn max_parallelism(&self) -> u32 {
        self.max_parallelism
    }

    fn key_group_scheme(&self) -> KeyGroupScheme {
        self.delegate.key_group_scheme()
    }

    fn key_group_range(&self) -> KeyGroupRange {
        self.range
    }

    fn register(&mut self, descriptor: StateDescriptor, functions: StateFunctions) -> Result<StateHandle, StateError> {
        let h = self.delegate.register(descriptor, functions)?;
        self.sync_states();
        // A re-registration may change the TTL: log the new descriptor.
        if let Some(d) = self.delegate.descriptors().into_iter().nth(h.0 as usize) {
            let st = self.logged(h)?;
            if st.desc != d {
                st.desc = d;
                st.meta_written = false;
            }
        }
        Ok(h)
    }

    fn handle(&self, name: &str) -> Option<StateHandle> {
        self.delegate.handle(name)
    }

    fn descriptors(&self) -> Vec<StateDescriptor> {
        self.delegate.descriptors()
    }

    fn get(&mut self, state: StateHandle, key: &[u8], namespace: &[u8], out: &mut Vec<u8>) -> Result<bool, StateError> {
        let time = self.pin(state);
        let found = self.delegate.get(state, key, namespace, out)?;
        self.log_read(found, state, key, namespace, time, ReadKind::Get, &[]);
        Ok(found)
    }

    fn put(&mut self, state: StateHandle, key: &[u8], namespace: &[u8], value: &[u8]) -> Result<(), StateError> {
        let time = self.pin(state);
        self.delegate.put(state, key, namespace, value)?;
        self.log_change(state, key, namespace, time, Op::Put(value));
        Ok(())
    }

    fn add(&mut self, state: StateHandle, key: &[u8], namespace: &[u8], value: &[u8]) -> Result<(), StateError> {
        let time = self.pin(state);
        self.delegate.add(state, key, namespace, value)?;
        if self.kind(state) == Some(KeyedStateKind::List) {
            self.log_change(state, key, namespace, time, Op::AddElement(value));
        } else {
            // Reducing / aggregating: log the result, so replay needs no user function.
            self.log_current_value(state, key, namespace, time)?;
        }
        Ok(())
    }

    fn clear(&mut self, state: StateHandle, key: &[u8], namespace: &[u8]) -> Result<(), StateError> {
        let time = self.pin(state);
        self.delegate.clear(state, key, namespace)?;
        self.log_change(state, key, namespace, time, Op::Clear);
        Ok(())
    }

    fn list_for_each(
        &mut self,
        state: StateHandle,
        key: &[u8],
        namespace: &[u8],
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<usize, StateError> {
        let time = self.pin(state);
        let n = self.delegate.list_for_each(state, key, namespace, f)?;
        self.log_read(n > 0, state, key, namespace, time, ReadKind::List, &[]);
        Ok(n)
    }

    fn list_update(
        &mut self,
        state: StateHandle,
        key: &[u8],
        namespace: &[u8],
        elements: &[&[u8]],
    ) -> Result<(), StateError> {
        let time = self.pin(state);
        self.delegate.list_update(state, key, namespace, elements)?;
        self.log_change(state, key, namespace, time, Op::SetList(elements.to_vec()));
        Ok(())
    }

    fn map_get(
        &mut self,
        state: StateHandle,
        key: &[u8],
        namespace: &[u8],
        user_key: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<bool, StateError> {
        let time = self.pin(state);
        let found = self.delegate.map_get(state, key, namespace, user_key, out)?;
        self.log_read(found, state, key, namespace, time, ReadKind::MapEntry, user_key);
        Ok(found)
    }

    fn map_put(
        &mut self,
        state: StateHandle,
        key: &[u8],
        namespace: &[u8],
        user_key: &[u8],
        value: &[u8],
    ) -> Result<(), StateError> {
        let time = self.pin(state);
        self.delegate.map_put(state, key, namespace, user_key, value)?;
        self.log_change(state, key, namespace, time, Op::MapPut { user_key, value });
        Ok(())
    }

    fn map_remove(
        &mut self,
        state: StateHandle,
        key: &[u8],
        namespace: &[u8],
        user_key: &[u8],
    ) -> Result<bool, StateError> {
        let time = self.pin(state);
        let existed = self.delegate.map_remove(state, key, namespace, user_key)?;
        // Logged even when nothing visible was removed: an expired entry is purged too.
        self.log_change(state, key, namespace, time, Op::MapRemove(user_key));
        Ok(existed)
    }

    fn map_for_each(
        &mut self,
        state: StateHandle,
        key: &[u8],
        namespace: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize, StateError> {
        let time = self.pin(state);
        let n = self.delegate.map_for_each(state, key, namespace, f)?;
        self.log_read(n > 0, state, key, namespace, time, ReadKind::MapAll, &[]);
        Ok(n)
    }

    fn merge_namespaces(
        &mut self,
        state: StateHandle,
        key: &[u8],
        target: &[u8],
        sources: &[&[u8]],
    ) -> Result<(), StateError> {
        let time = self.pin(state);
        if matches!(
            self.kind(state),
            Some(KeyedStateKind::Reducing | KeyedStateKind::Aggregating)
        ) {
            // Reducing / aggregating: a merge without any source value changes nothing (the
            // target keeps its value and TTL stamp), so nothing is logged. Reading a source
            // first is harmless: one that holds a value is removed by the merge.
            let mut probe = std::mem::take(&mut self.buf);
            let mut any = false;
            for s in sources.iter().filter(|s| **s != target) {
                if self.delegate.get(state, key, s, &mut probe)? {
                    any = true;
                    break;
                }
            }
            self.buf = probe;
            if !any {
                return Ok(());
            }
        }
        self.delegate.merge_namespaces(state, key, target, sources)?;
        if self.kind(state) == Some(KeyedStateKind::List) {
            self.log_change(state, key, target, time, Op::MergeList(sources.to_vec()));
        } else {
            // Reducing / aggregating: the merged result, then the cleared sources.
            self.log_current_value(state, key, target, time)?;
            for s in sources {
                if *s != target {
                    self.log_change(state, key, s, time, Op::Clear);
                }
            }
        }
        Ok(())
    }

    fn snapshot(&mut self, checkpoint_id: u64) -> Result<Arc<dyn KeyedStateView>, StateError> {
        self.clock.pin_now();
        self.delegate.snapshot(checkpoint_id)
    }

    fn restore(&mut self, views: &[&dyn KeyedStateView]) -> Result<(), StateError> {
        // A snapshot without a changelog: nothing to reference; the first checkpoint
        // materializes.
        self.clock.pin_now();
        self.delegate.restore(views)?;
        self.sync_states();
        self.needs_materialization = true;
        Ok(())
    }

    fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<(), StateError> {
        if let Some(c) = self.checkpoints.get(&checkpoint_id).cloned() {
            let segs = self.writer.segments(c.from, c.to);
            self.writer
                .storage()
                .confirm_files(segs.iter().map(|s| s.path.as_str()));
            for m in &mut self.own {
                if c.materializations.contains(&m.id) {
                    m.confirmed = true;
                }
            }
        }
        self.apply_finished()?;
        self.cleanup();
        Ok(())
    }

    fn notify_checkpoint_aborted(&mut self, checkpoint_id: u64) -> Result<(), StateError> {
        // Its uploads stay: the next checkpoint references them.
        self.checkpoints.remove(&checkpoint_id);
        self.cleanup();
        Ok(())
    }

    fn notify_checkpoint_subsumed(&mut self, checkpoint_id: u64) -> Result<(), StateError> {
        self.checkpoints.remove(&checkpoint_id);
        self.cleanup();
        Ok(())
    }

    fn dispose(&mut self) {
        self.materializer.wait_running();
        // A checkpoint cut but neither aborted nor subsumed may have completed without this
        // subtask hearing of it (the notification is lost in a failover): its log files and
        // materializations stay, and the checkpoint store owns them. If it did not complete,
        // they are orphans for `statekit gc`; deleting them could break the checkpoint the
        // next run restores from.
        let mut keep = Vec::new();
        for c in self.checkpoints.values() {
            let segs = self.writer.segments(c.from, c.to);
            self.writer
                .storage()
                .confirm_files(segs.iter().map(|s| s.path.as_str()));
            keep.extend(c.materializations.iter().copied());
        }
        // Every other uploaded change set is deleted.
        self.writer.truncate(u64::MAX);
        for m in self.own.drain(..) {
            if !m.confirmed && !keep.contains(&m.id) {
                self.materializer.delete(&m.path);
            }
        }
        self.delegate.dispose();
    }
}

/// The file reference of a materialization at `path` of `storage` seen from the job directory.
pub(crate) fn materialization_ref(prefix: &str, path: &str, size: u64) -> FileRef {
    FileRef {
        scope: statekit_format::FileScope::Shared,
        path: statekit_core::storage::join(prefix, path),
        size,
    }
}

/// Deletes a file, warning on failure (left for `statekit gc`).
pub(crate) fn delete_quietly(storage: &dyn Storage, path: &str) {
    if let Err(e) = storage.delete_file(path) {
        tracing::warn!(file = %storage.describe(path), error = %e, "could not delete an unreferenced materialization");
    }
}
