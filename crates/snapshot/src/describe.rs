//! What a snapshot holds, from its `_metadata` alone: [`describe`] gives a [`Description`] —
//! the operators, their keyed and operator states with types and sizes, the subtasks with
//! their key-group ranges and files, the format and what it restores into, the changelog
//! summary and, for an Apache Flink snapshot, what Flink's `_metadata` says.
//!
//! A description is plain data: `statekit show` renders it as text, and its
//! [`serde::Serialize`] form is `show --json` (field names are stable; objects list their
//! fields in alphabetical order). Nothing here reads a data file.
//!
//! The facts a description is made of are functions too, for callers that need one of them
//! for one operator (the inspector): [`state_totals`], [`changelog_tail`], [`format_label`],
//! [`ChangelogSummary::of`], ….

use crate::open::Snapshot;
use serde::{Serialize, Serializer};
use statekit_changelog::LogId;
use statekit_core::{uid_looks_auto_generated, KeyGroupRange};
use statekit_flink::FlinkSnapshot;
use statekit_format::{
    ChangelogKeyedHandle, FileRef, FileScope, KeyedHandle, KeyedStats, LogSegmentRef, NativeKeyedHandle,
    OperatorMetadata, SnapshotFormat, SnapshotKind, SnapshotMetadata, SubtaskMetadata,
};
use std::collections::{BTreeMap, BTreeSet};

/// A snapshot as `statekit show` describes it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Description {
    /// The changelog summary over every operator (files and change sets counted once);
    /// `None` when no operator holds changelog state.
    pub changelog: Option<ChangelogSummary>,
    /// The checkpoint id (savepoints carry one too).
    pub checkpoint_id: u64,
    /// What Apache Flink's `_metadata` says, for a Flink snapshot.
    pub flink: Option<FlinkDescription>,
    /// The format's label ([`format_label`]): `canonical-v1`, `native-rocksdb`, `flink-native`, ….
    pub format: String,
    /// The job, as 32 hex characters (zeros when Flink's `_metadata` does not store it).
    pub job_id: String,
    /// `checkpoint` or `savepoint` ([`kind_name`]).
    #[serde(serialize_with = "kind_json")]
    pub kind: SnapshotKind,
    /// The operators, in `_metadata`'s order.
    pub operators: Vec<OperatorDescription>,
    /// The free-form properties of `_metadata`.
    pub properties: BTreeMap<String, String>,
    /// Which backends it restores into ([`restores_into`]).
    pub restores_into: String,
    /// When it was taken, milliseconds since the epoch.
    pub timestamp_ms: i64,
    /// The data layout.
    #[serde(skip)]
    pub snapshot_format: SnapshotFormat,
}

/// What Apache Flink's own `_metadata` says beyond statekit's model of it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FlinkDescription {
    /// The `_metadata` version (3 to 7).
    pub metadata_version: i32,
    /// The ids of operators whose uid is not known (Flink before 2.0 stores ids only; a
    /// uid given when opening names the operator whose id is its hash).
    pub operators_without_known_uid: Vec<String>,
    /// `CANONICAL` or `NATIVE` for savepoints, when stored.
    pub savepoint_format: Option<String>,
    /// The snapshot type as Flink names it (`Savepoint`, `Full Checkpoint`, …), when stored.
    pub snapshot_type: Option<String>,
    /// `Apache Flink _metadata v4, CANONICAL, keyed state as …` ([`flink_label`]).
    #[serde(skip)]
    pub label: String,
}

/// One operator.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OperatorDescription {
    /// The changelog summary of its subtasks; `None` when it holds no changelog state.
    pub changelog: Option<ChangelogSummary>,
    /// Every subtask had finished.
    pub finished: bool,
    /// The rule its keyed state's keys are in key groups by, when it is not statekit's own
    /// and the snapshot is statekit's: `"flink"` for state converted from Apache Flink (a
    /// Flink snapshot's operators all follow Flink's rule, and say so by being Flink's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_group_scheme: Option<String>,
    /// Its keyed states.
    pub keyed_states: Vec<KeyedStateDescription>,
    /// Its max parallelism (number of key groups).
    pub max_parallelism: u32,
    /// Its id (32 hex digits).
    pub operator_id: String,
    /// Its operator (non-keyed) states.
    pub operator_states: Vec<OperatorStateDescription>,
    /// Its parallelism.
    pub parallelism: u32,
    /// Its subtasks.
    pub subtasks: Vec<SubtaskDescription>,
    /// A changelog operator: the bytes of its tails (`None` for other operators).
    pub tail_bytes: Option<u64>,
    /// A changelog operator: the change records of its tails, over all states (a restore
    /// replays them on top of the materializations; `None` for other operators).
    pub tail_change_records: Option<u64>,
    /// Its uid.
    pub uid: String,
    /// The uid looks generated rather than set by the job (state may not survive program
    /// changes).
    pub uid_looks_generated: bool,
    /// Entries of all states summed (each state's [`KeyedStateDescription::entries`], and
    /// any state `_metadata` has statistics for).
    #[serde(skip)]
    pub entries_all_states: u64,
    /// The entry counts are scaled estimates: a changelog materialization applies to fewer
    /// key groups than its file holds (after a rescale), or has no statistics.
    #[serde(skip)]
    pub entries_scaled: bool,
}

impl OperatorDescription {
    /// Whether some subtask holds native (backend) files: entry counts are then the
    /// backend's estimates of keys.
    pub fn is_native(&self) -> bool {
        self.subtasks.iter().any(|s| s.native.is_some())
    }
}

/// One keyed state of an operator, with its size summed over the subtasks ([`state_totals`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct KeyedStateDescription {
    /// Its entries, when `_metadata` has statistics (native: estimated keys; changelog: the
    /// materializations').
    pub entries: Option<u64>,
    /// A changelog operator whose tail holds changes: `entries` do not count them.
    pub entries_estimated: bool,
    /// The key's type.
    pub key: String,
    /// `value`, `list`, `map`, ….
    pub kind: String,
    /// Its name.
    pub name: String,
    /// The namespace's type.
    pub namespace: String,
    /// Its bytes, when `_metadata` has statistics (native: table-file bytes).
    pub raw_bytes: Option<u64>,
    /// Its time to live, when it has one.
    pub ttl_ms: Option<u64>,
    /// A map state's user key type.
    pub user_key: Option<String>,
    /// The value's type.
    pub value: String,
}

/// One operator (non-keyed) state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct OperatorStateDescription {
    /// How it is redistributed on rescale (`split`, `union`, `broadcast`).
    pub mode: String,
    /// Its name.
    pub name: String,
    /// The element's type.
    pub value: String,
}

/// One subtask.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SubtaskDescription {
    /// Its changelog handle, summarized.
    pub changelog: Option<SubtaskChangelog>,
    /// Entries of its canonical keyed file, when it has statistics.
    pub entries: Option<u64>,
    /// It had finished.
    pub finished: bool,
    /// Its index.
    pub index: u32,
    /// Its key groups: `[first, last]` in JSON, `[]` when empty.
    #[serde(serialize_with = "key_groups_json")]
    pub key_groups: KeyGroupRange,
    /// The key groups of its canonical keyed file that hold data, with their sizes.
    pub key_groups_with_data: Option<Vec<KeyGroupSize>>,
    /// Its canonical keyed-state file.
    pub keyed_file: Option<FileSize>,
    /// Its native (backend) files.
    pub native: Option<NativeDescription>,
    /// Its operator-state file.
    pub operator_file: Option<FileSize>,
    /// Bytes of its keyed state: the keyed file's, the native files', or a changelog
    /// handle's materializations plus tail.
    #[serde(skip)]
    pub keyed_bytes: u64,
}

/// A file and its size.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FileSize {
    /// Its size.
    pub bytes: u64,
    /// Its path, as `_metadata` stores it.
    pub path: String,
}

impl From<&FileRef> for FileSize {
    fn from(f: &FileRef) -> Self {
        FileSize {
            bytes: f.size,
            path: f.path.clone(),
        }
    }
}

/// One key group's stored bytes and entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct KeyGroupSize {
    /// Stored bytes.
    pub bytes: u64,
    /// Entries.
    pub entries: u64,
    /// The key group.
    pub key_group: u32,
}

/// One key group's estimated bytes (native files).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct KeyGroupBytes {
    /// Estimated bytes.
    pub bytes: u64,
    /// The key group.
    pub key_group: u32,
}

/// A subtask's native (backend) files.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NativeDescription {
    /// The backend whose files they are.
    pub backend: String,
    /// The backend instance that wrote them.
    pub backend_id: String,
    /// Their bytes.
    pub bytes: u64,
    /// The checkpoint of the backend's upload.
    pub checkpoint_id: u64,
    /// The backend's estimate of bytes per key group.
    pub estimated_bytes_per_key_group: Vec<KeyGroupBytes>,
    /// How many files.
    pub files: usize,
    /// The backend's file layout.
    pub layout: String,
    /// Files shared with other snapshots (not exclusive to this one).
    pub shared_files: usize,
    /// Bytes uploaded for this checkpoint.
    pub uploaded_bytes: u64,
}

impl From<&NativeKeyedHandle> for NativeDescription {
    fn from(n: &NativeKeyedHandle) -> Self {
        NativeDescription {
            backend: n.backend.clone(),
            backend_id: n.backend_id.clone(),
            bytes: n.total_bytes(),
            checkpoint_id: n.checkpoint_id,
            estimated_bytes_per_key_group: n
                .stats
                .key_groups
                .iter()
                .map(|&(key_group, bytes)| KeyGroupBytes { bytes, key_group })
                .collect(),
            files: n.files.len(),
            layout: n.layout.clone(),
            shared_files: n.files.iter().filter(|f| f.file.scope != FileScope::Exclusive).count(),
            uploaded_bytes: n.uploaded_bytes,
        }
    }
}

/// Sizes of the changelog state of one subtask, an operator or a whole checkpoint, from
/// `_metadata` alone. Files and change sets referenced several times (log files are shared by
/// the subtasks of an upload, inherited parts by the subtasks of a rescale) count once; the
/// projected replay counts what each subtask's restore reads.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ChangelogSummary {
    /// The materializations.
    pub materialized: MaterializedSummary,
    /// What a restore replays.
    pub replay: ReplaySummary,
    /// Log bytes per materialized byte, when there is a materialization.
    pub space_amplification: Option<f64>,
    /// The tails.
    pub tail: TailSummary,
}

/// The materialized parts of changelog handles.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MaterializedSummary {
    /// Bytes of the distinct materialization files.
    pub bytes: u64,
    /// Entries a restore loads from them (the key groups each part applies to); `None` when
    /// some part has no statistics.
    pub entries: Option<u64>,
    /// Distinct materialization files.
    pub files: u64,
    /// One subtask's parts (in a [`SubtaskChangelog`] only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub files_list: Option<Vec<MaterializedPartDescription>>,
    /// Materialized parts (entries of the handles).
    pub parts: u64,
}

/// One materialized part of a subtask's changelog handle.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MaterializedPartDescription {
    /// The file's size.
    pub bytes: u64,
    /// Its entries in the key groups the part applies to for this subtask, when it has
    /// statistics.
    pub entries: Option<u64>,
    /// The key groups it applies to: `[first, last]`, `[]` when empty.
    #[serde(serialize_with = "key_groups_json")]
    pub key_groups: KeyGroupRange,
    /// The file, as `_metadata` stores it.
    pub path: String,
    /// `exclusive`, `shared`, `absolute` or `url`.
    pub scope: &'static str,
}

/// The tails of changelog handles.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TailSummary {
    /// Distinct change sets.
    pub change_sets: u64,
    /// One subtask's log files, sorted (in a [`SubtaskChangelog`] only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub files_list: Option<Vec<String>>,
    /// Bytes of the distinct change sets.
    pub log_bytes: u64,
    /// Bytes of the distinct log files (what storage keeps for them).
    pub log_file_bytes: u64,
    /// Distinct log files.
    pub log_files: u64,
    /// Records of the distinct change sets.
    pub records: u64,
    /// Runs of change sets adjacent in one log file (one range read each).
    pub segments: u64,
    /// One subtask's sequence numbers per log (in a [`SubtaskChangelog`] only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sqns: Option<Vec<SqnRange>>,
}

/// The lowest and highest sequence number of a tail's change sets of one log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SqnRange {
    /// The lowest.
    pub from: u64,
    /// The log (32 hex digits).
    pub log: String,
    /// The highest.
    pub to: u64,
}

/// What a restore replays of changelog tails.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ReplaySummary {
    /// Bytes of the change sets read.
    pub bytes: u64,
    /// Change sets a restore reads (per subtask: those whose key groups meet its range).
    pub change_sets: u64,
    /// Their records (after a rescale some belong to other key groups and are skipped).
    pub records: u64,
}

/// One subtask's changelog handle: its log, its materialization and its summary with the
/// files listed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SubtaskChangelog {
    /// The log (32 hex digits).
    pub log: String,
    /// The materialization the handle builds on.
    pub materialization_id: u64,
    /// The summary of this subtask alone, with `files_list` and `sqns`.
    #[serde(flatten)]
    pub summary: ChangelogSummary,
    /// Stored bytes and entries per key group its materializations hold for this subtask
    /// (the tail's key groups are in the log files' indexes, not in `_metadata`).
    #[serde(skip)]
    pub materialized_key_groups: Vec<KeyGroupSize>,
}

/// Entries and bytes of one state summed over subtasks ([`state_totals`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StateTotals {
    /// Entries (native: estimated keys).
    pub entries: u64,
    /// Bytes (native: table-file bytes).
    pub bytes: u64,
}

/// Describes `snapshot`, from its `_metadata` (and for an Apache Flink snapshot, Flink's):
/// [`Snapshot::describe`].
pub fn describe(snapshot: &Snapshot) -> Description {
    snapshot.describe()
}

impl Description {
    /// Describes `m`; `flink` is the Flink snapshot it was mapped from, if it was.
    pub fn of(m: &SnapshotMetadata, flink: Option<&FlinkSnapshot>) -> Description {
        let any_changelog = m.operators.iter().any(is_changelog);
        Description {
            changelog: any_changelog.then(|| ChangelogSummary::of(m.operators.iter().flat_map(|o| &o.subtasks))),
            checkpoint_id: m.checkpoint_id,
            flink: flink.map(|f| FlinkDescription::of(m, f)),
            format: format_label(m),
            job_id: m.job_id.clone(),
            kind: m.kind,
            operators: m
                .operators
                .iter()
                .map(|o| OperatorDescription {
                    key_group_scheme: (flink.is_none()
                        && !o.keyed_states.is_empty()
                        && o.key_group_scheme != statekit_core::KeyGroupScheme::Statekit)
                        .then(|| o.key_group_scheme.name().to_string()),
                    ..OperatorDescription::of(o)
                })
                .collect(),
            properties: m.properties.clone(),
            restores_into: restores_into(m),
            timestamp_ms: m.timestamp_ms,
            snapshot_format: m.format,
        }
    }
}

impl FlinkDescription {
    fn of(m: &SnapshotMetadata, f: &FlinkSnapshot) -> FlinkDescription {
        let fm = f.metadata();
        FlinkDescription {
            metadata_version: fm.version,
            operators_without_known_uid: m
                .operators
                .iter()
                .filter(|o| f.uid(&o.operator_id).is_none())
                .map(|o| o.operator_id.to_string())
                .collect(),
            savepoint_format: fm.properties.as_ref().and_then(|p| p.format.clone()),
            snapshot_type: fm.properties.as_ref().and_then(|p| p.name.clone()),
            label: flink_label(m).unwrap_or_default(),
        }
    }
}

impl OperatorDescription {
    /// Describes one operator.
    pub fn of(o: &OperatorMetadata) -> OperatorDescription {
        let totals = state_totals(o);
        let changelog = is_changelog(o);
        let (tail_records, tail_bytes) = changelog_tail(o);
        OperatorDescription {
            changelog: changelog.then(|| ChangelogSummary::of(&o.subtasks)),
            finished: o.finished,
            key_group_scheme: None,
            keyed_states: o
                .keyed_states
                .iter()
                .map(|s| {
                    let t = totals.get(&s.name);
                    KeyedStateDescription {
                        entries: t.map(|t| t.entries),
                        entries_estimated: changelog && tail_records > 0,
                        key: s.key_schema.to_string(),
                        kind: s.kind.to_string(),
                        name: s.name.clone(),
                        namespace: s.namespace_schema.to_string(),
                        raw_bytes: t.map(|t| t.bytes),
                        ttl_ms: s.ttl.map(|t| t.ttl_ms),
                        user_key: s.user_key_schema.as_ref().map(ToString::to_string),
                        value: s.value_schema.to_string(),
                    }
                })
                .collect(),
            max_parallelism: o.max_parallelism,
            operator_id: o.operator_id.to_string(),
            operator_states: o
                .operator_states
                .iter()
                .map(|s| OperatorStateDescription {
                    mode: s.mode.to_string(),
                    name: s.name.clone(),
                    value: s.value_schema.to_string(),
                })
                .collect(),
            parallelism: o.parallelism,
            subtasks: o.subtasks.iter().map(SubtaskDescription::of).collect(),
            tail_bytes: changelog.then_some(tail_bytes),
            tail_change_records: changelog.then_some(tail_records),
            uid: o.uid.clone(),
            uid_looks_generated: uid_looks_auto_generated(&o.uid),
            entries_all_states: totals.values().map(|t| t.entries).fold(0, u64::saturating_add),
            entries_scaled: materialized_state_totals(o).1,
        }
    }
}

impl SubtaskDescription {
    /// Describes one subtask.
    pub fn of(s: &SubtaskMetadata) -> SubtaskDescription {
        SubtaskDescription {
            changelog: s.keyed.changelog().map(|h| SubtaskChangelog::of(s, h)),
            entries: s.keyed_stats.as_ref().map(|k| k.entries),
            finished: s.finished,
            index: s.index,
            key_groups: s.key_groups,
            key_groups_with_data: s.keyed_stats.as_ref().map(|k| {
                k.key_groups
                    .iter()
                    .map(|g| KeyGroupSize {
                        bytes: g.stored_bytes,
                        entries: g.entries,
                        key_group: g.key_group,
                    })
                    .collect()
            }),
            keyed_file: s.keyed.canonical().map(FileSize::from),
            native: s.keyed.native().map(NativeDescription::from),
            operator_file: s.operator.as_ref().map(FileSize::from),
            keyed_bytes: keyed_bytes(s),
        }
    }
}

impl SubtaskChangelog {
    /// Describes the changelog handle `h` of subtask `st`.
    pub fn of(st: &SubtaskMetadata, h: &ChangelogKeyedHandle) -> SubtaskChangelog {
        let mut summary = ChangelogSummary::of([st]);
        summary.materialized.files_list = Some(
            h.materialized
                .iter()
                .map(|p| MaterializedPartDescription {
                    bytes: p.file.size,
                    entries: p
                        .stats
                        .as_ref()
                        .map(|s| entries_in(s, p.key_groups.intersection(&st.key_groups))),
                    key_groups: p.key_groups,
                    path: p.file.path.clone(),
                    scope: p.file.scope.as_str(),
                })
                .collect(),
        );
        let files: BTreeSet<&str> = h.tail.iter().map(|t| t.file.path.as_str()).collect();
        summary.tail.files_list = Some(files.into_iter().map(str::to_string).collect());
        summary.tail.sqns = Some(sqn_ranges(&h.tail));
        SubtaskChangelog {
            log: LogId(h.log).to_string(),
            materialization_id: h.materialization_id,
            summary,
            materialized_key_groups: materialized_key_groups(st, h),
        }
    }
}

/// Bytes of a subtask's keyed state: a changelog handle's materializations plus tail, the
/// native files', or the canonical keyed file's.
pub fn keyed_bytes(s: &SubtaskMetadata) -> u64 {
    match &s.keyed {
        KeyedHandle::Changelog(h) => h.materialized_bytes().saturating_add(h.tail_bytes()),
        KeyedHandle::Native(n) => n.total_bytes(),
        KeyedHandle::Canonical(f) => f.size,
        KeyedHandle::None => 0,
    }
}

/// Stored bytes and entries per key group the materializations of `h` hold for subtask `s`
/// (the tail's key groups are in the log files' indexes, not in `_metadata`).
pub fn materialized_key_groups(s: &SubtaskMetadata, h: &ChangelogKeyedHandle) -> Vec<KeyGroupSize> {
    let mut per: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    for part in &h.materialized {
        let range = part.key_groups.intersection(&s.key_groups);
        for g in part.stats.iter().flat_map(|st| &st.key_groups) {
            if range.contains(g.key_group) {
                let e = per.entry(g.key_group).or_default();
                e.0 = e.0.saturating_add(g.stored_bytes);
                e.1 = e.1.saturating_add(g.entries);
            }
        }
    }
    per.into_iter()
        .map(|(key_group, (bytes, entries))| KeyGroupSize {
            bytes,
            entries,
            key_group,
        })
        .collect()
}

/// Per log, the lowest and highest sequence number of the tail.
fn sqn_ranges(tail: &[LogSegmentRef]) -> Vec<SqnRange> {
    let mut m: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for t in tail {
        let e = m.entry(LogId(t.log).to_string()).or_insert((t.sqn, t.sqn));
        e.0 = e.0.min(t.sqn);
        e.1 = e.1.max(t.sqn);
    }
    m.into_iter()
        .map(|(log, (from, to))| SqnRange { from, log, to })
        .collect()
}

impl ChangelogSummary {
    /// The summary of these subtasks' changelog handles (subtasks without one are skipped).
    pub fn of<'a>(subtasks: impl IntoIterator<Item = &'a SubtaskMetadata>) -> ChangelogSummary {
        let mut s = ChangelogSummary::default();
        s.materialized.entries = Some(0);
        let mut mat_files: BTreeMap<(u8, &str), u64> = BTreeMap::new();
        let mut log_files: BTreeMap<(u8, &str), u64> = BTreeMap::new();
        let mut sets: BTreeMap<(u8, &str, u64), (u64, u32)> = BTreeMap::new();
        for st in subtasks {
            let Some(h) = st.keyed.changelog() else { continue };
            for part in &h.materialized {
                s.materialized.parts += 1;
                mat_files.insert((scope_code(part.file.scope), &part.file.path), part.file.size);
                let range = part.key_groups.intersection(&st.key_groups);
                s.materialized.entries = match (s.materialized.entries, &part.stats) {
                    (Some(n), Some(stats)) => Some(n.saturating_add(entries_in(stats, range))),
                    _ => None,
                };
            }
            for seg in &h.tail {
                let file = (scope_code(seg.file.scope), seg.file.path.as_str());
                log_files.insert(file, seg.file.size);
                sets.insert((file.0, file.1, seg.offset), (seg.length, seg.records));
                if !seg.key_groups.intersection(&st.key_groups).is_empty() {
                    s.replay.change_sets += 1;
                    s.replay.records = s.replay.records.saturating_add(u64::from(seg.records));
                    s.replay.bytes = s.replay.bytes.saturating_add(seg.length);
                }
            }
        }
        s.materialized.files = mat_files.len() as u64;
        s.materialized.bytes = mat_files.values().copied().fold(0, u64::saturating_add);
        s.tail.log_files = log_files.len() as u64;
        s.tail.log_file_bytes = log_files.values().copied().fold(0, u64::saturating_add);
        s.tail.change_sets = sets.len() as u64;
        let mut prev: Option<(u8, &str, u64)> = None;
        for (&(scope, path, offset), &(length, records)) in &sets {
            s.tail.log_bytes = s.tail.log_bytes.saturating_add(length);
            s.tail.records = s.tail.records.saturating_add(u64::from(records));
            if prev != Some((scope, path, offset)) {
                s.tail.segments += 1;
            }
            prev = Some((scope, path, offset.saturating_add(length)));
        }
        s.space_amplification =
            (s.materialized.bytes > 0).then(|| s.tail.log_bytes as f64 / s.materialized.bytes as f64);
        s
    }
}

fn scope_code(s: FileScope) -> u8 {
    match s {
        FileScope::Exclusive => 0,
        FileScope::Shared => 1,
        FileScope::Absolute => 2,
        FileScope::Url => 3,
    }
}

/// Entries of `stats` in the key groups of `range`.
fn entries_in(stats: &KeyedStats, range: KeyGroupRange) -> u64 {
    stats
        .key_groups
        .iter()
        .filter(|g| range.contains(g.key_group))
        .map(|g| g.entries)
        .fold(0, u64::saturating_add)
}

/// Entries per state a restore of operator `o` loads from its materializations, and whether
/// the figures are estimates (a part applied to fewer key groups than its file holds: its
/// per-state totals are scaled by the share of its entries in those key groups; a part
/// without statistics is left out).
pub fn materialized_state_totals(o: &OperatorMetadata) -> (BTreeMap<String, StateTotals>, bool) {
    let mut m: BTreeMap<String, StateTotals> = BTreeMap::new();
    let mut approx = false;
    for st in &o.subtasks {
        let Some(h) = st.keyed.changelog() else { continue };
        for part in &h.materialized {
            let Some(stats) = &part.stats else {
                approx = true;
                continue;
            };
            let range = part.key_groups.intersection(&st.key_groups);
            let inside = entries_in(stats, range);
            let share = if inside == stats.entries {
                1.0
            } else {
                approx = true;
                if stats.entries == 0 {
                    0.0
                } else {
                    inside as f64 / stats.entries as f64
                }
            };
            for s in &stats.states {
                let e = m.entry(s.name.clone()).or_default();
                e.entries = e.entries.saturating_add((s.entries as f64 * share).round() as u64);
                e.bytes = e.bytes.saturating_add((s.raw_bytes as f64 * share).round() as u64);
            }
        }
    }
    (m, approx)
}

/// Entries and bytes of each keyed state, summed over subtasks (from `_metadata` only).
/// For native subtasks these are RocksDB's estimates (stored keys, table-file bytes); for
/// changelog subtasks what their materializations hold (the tail is not counted).
pub fn state_totals(o: &OperatorMetadata) -> BTreeMap<String, StateTotals> {
    let mut m: BTreeMap<String, StateTotals> = BTreeMap::new();
    for st in &o.subtasks {
        for s in st.keyed_stats.iter().flat_map(|k| &k.states) {
            let e = m.entry(s.name.clone()).or_default();
            e.entries = e.entries.saturating_add(s.entries);
            e.bytes = e.bytes.saturating_add(s.raw_bytes);
        }
        for s in st.keyed.native().into_iter().flat_map(|n| &n.stats.states) {
            let e = m.entry(s.name.clone()).or_default();
            e.entries = e.entries.saturating_add(s.estimated_keys);
            e.bytes = e.bytes.saturating_add(s.bytes);
        }
    }
    let (materialized, _) = materialized_state_totals(o);
    for (name, t) in materialized {
        let e = m.entry(name).or_default();
        e.entries = e.entries.saturating_add(t.entries);
        e.bytes = e.bytes.saturating_add(t.bytes);
    }
    m
}

/// Whether some subtask of `o` holds changelog state.
pub fn is_changelog(o: &OperatorMetadata) -> bool {
    o.subtasks.iter().any(|s| s.keyed.changelog().is_some())
}

/// What `_metadata` knows of a changelog operator's state beyond its materializations: the
/// tail's change records and bytes over all states (a restore replays them; they are not
/// split by state in `_metadata`). `(0, 0)` for other operators.
pub fn changelog_tail(o: &OperatorMetadata) -> (u64, u64) {
    o.subtasks
        .iter()
        .filter_map(|s| s.keyed.changelog())
        .fold((0, 0), |(r, b): (u64, u64), h| {
            (r.saturating_add(h.tail_records()), b.saturating_add(h.tail_bytes()))
        })
}

/// `checkpoint` or `savepoint`.
pub fn kind_name(k: SnapshotKind) -> &'static str {
    match k {
        SnapshotKind::Checkpoint => "checkpoint",
        SnapshotKind::Savepoint => "savepoint",
    }
}

/// Whether `m` was mapped from an Apache Flink snapshot.
fn is_flink(m: &SnapshotMetadata) -> bool {
    m.properties.contains_key(statekit_flink::METADATA_VERSION_PROPERTY)
}

/// `Apache Flink _metadata v4, CANONICAL, keyed state as …` when `m` is a Flink snapshot.
pub fn flink_label(m: &SnapshotMetadata) -> Option<String> {
    let v = m.properties.get(statekit_flink::METADATA_VERSION_PROPERTY)?;
    let mut s = format!("Apache Flink _metadata v{v}");
    if let Some(f) = m.properties.get("flink.savepoint_format") {
        s.push_str(&format!(", {f}"));
    }
    if let Some(k) = m.properties.get("flink.keyed_handles") {
        s.push_str(&format!(", keyed state as {k}"));
    }
    Some(s)
}

/// `canonical-v1`, `changelog-v1`, `native-<backend>` (the backend of the first subtask
/// holding native files), or `flink-<format>` for an Apache Flink snapshot.
pub fn format_label(m: &SnapshotMetadata) -> String {
    if is_flink(m) {
        return format!("flink-{}", m.format.as_str());
    }
    match m.format {
        SnapshotFormat::Canonical => "canonical-v1".to_string(),
        SnapshotFormat::Native => {
            let backend = m
                .operators
                .iter()
                .flat_map(|o| &o.subtasks)
                .find_map(|s| s.keyed.native())
                .map(|n| n.backend.clone())
                .unwrap_or_else(|| "?".into());
            format!("native-{backend}")
        }
        SnapshotFormat::Changelog => "changelog-v1".to_string(),
    }
}

/// Which backends a snapshot restores into, in words.
pub fn restores_into(m: &SnapshotMetadata) -> String {
    if is_flink(m) {
        return match m.format {
            SnapshotFormat::Canonical => "any Flink state backend".into(),
            SnapshotFormat::Native => "Flink's RocksDB backend".into(),
            SnapshotFormat::Changelog => "Flink's changelog backend".into(),
        };
    }
    match m.format {
        SnapshotFormat::Canonical => "any backend".into(),
        SnapshotFormat::Native => {
            let backends: BTreeSet<&str> = m
                .operators
                .iter()
                .flat_map(|o| &o.subtasks)
                .filter_map(|s| s.keyed.native().map(|n| n.backend.as_str()))
                .collect();
            backends.into_iter().collect::<Vec<_>>().join(", ")
        }
        SnapshotFormat::Changelog => "any backend (materializations + log replay)".into(),
    }
}

fn kind_json<S: Serializer>(k: &SnapshotKind, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(kind_name(*k))
}

/// A key-group range as `[first, last]` (both included), `[]` when empty.
fn key_groups_json<S: Serializer>(r: &KeyGroupRange, s: S) -> Result<S::Ok, S::Error> {
    if r.is_empty() {
        [0u32; 0].serialize(s)
    } else {
        [r.start(), r.end_exclusive() - 1].serialize(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn open(rel: &str) -> Snapshot {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../fixtures")
            .join(rel);
        Snapshot::open(&path).unwrap_or_else(|e| panic!("{rel}: {e}"))
    }

    /// `show --json` printed `serde_json::Value`s, whose objects list their fields
    /// alphabetically: the description's own order must be that order, at every level.
    fn assert_fields_sorted(d: &Description) {
        let direct = serde_json::to_string_pretty(d).expect("serializes");
        let value = serde_json::to_value(d).expect("serializes");
        let sorted = serde_json::to_string_pretty(&value).expect("serializes");
        assert_eq!(direct, sorted);
    }

    #[test]
    fn a_canonical_savepoint() {
        let reader = open("v1/savepoint-basic");
        let d = describe(&reader);
        assert_fields_sorted(&d);
        assert_eq!(d.format, "canonical-v1");
        assert_eq!(d.restores_into, "any backend");
        assert!(d.changelog.is_none() && d.flink.is_none());
        let j = serde_json::to_value(&d).expect("serializes");
        assert_eq!(j["kind"], "savepoint");
        for (o, m) in d.operators.iter().zip(&reader.metadata().operators) {
            let totals = state_totals(m);
            for s in &o.keyed_states {
                assert_eq!(s.entries, totals.get(&s.name).map(|t| t.entries));
                assert!(!s.entries_estimated);
            }
            assert_eq!(o.tail_bytes, None);
            for s in &o.subtasks {
                assert_eq!(s.keyed_bytes, s.keyed_file.as_ref().map_or(0, |f| f.bytes));
            }
        }
        let st = &d.operators[0].subtasks[0];
        assert_eq!(
            j["operators"][0]["subtasks"][0]["key_groups"],
            serde_json::json!([st.key_groups.start(), st.key_groups.end_exclusive() - 1])
        );
        assert!(j["operators"][0]["tail_bytes"].is_null());
    }

    #[test]
    fn a_changelog_checkpoint_lists_its_files_per_subtask_only() {
        let d = describe(&open("v1/changelog-checkpoint/c4a9e10f0c4a9e10f0c4a9e10f0c4a9e/chk-3"));
        assert_fields_sorted(&d);
        assert_eq!(d.format, "changelog-v1");
        let all = d.changelog.as_ref().expect("a changelog summary");
        assert!(all.tail.files_list.is_none() && all.tail.sqns.is_none());
        let j = serde_json::to_value(&d).expect("serializes");
        assert!(j["changelog"]["tail"].get("files_list").is_none());
        let op = d
            .operators
            .iter()
            .find(|o| o.changelog.is_some())
            .expect("a changelog operator");
        let tail = op.tail_change_records.expect("tail records");
        assert!(op.keyed_states.iter().all(|s| s.entries_estimated == (tail > 0)));
        let sub = op.subtasks.iter().find_map(|s| s.changelog.as_ref()).expect("a handle");
        assert!(sub.summary.tail.files_list.is_some() && sub.summary.tail.sqns.is_some());
        assert_eq!(sub.log.len(), 32);
        let sj = serde_json::to_value(sub).expect("serializes");
        for k in [
            "log",
            "materialization_id",
            "materialized",
            "replay",
            "space_amplification",
            "tail",
        ] {
            assert!(sj.get(k).is_some(), "{k} in {sj}");
        }
        assert!(sj["materialized"]["files_list"].is_array());
    }

    #[test]
    fn a_native_savepoint() {
        let d = describe(&open("v1/native-savepoint"));
        assert_fields_sorted(&d);
        assert!(d.format.starts_with("native-"), "{}", d.format);
        let op = d.operators.iter().find(|o| o.is_native()).expect("a native operator");
        let n = op
            .subtasks
            .iter()
            .find_map(|s| s.native.as_ref())
            .expect("native files");
        assert!(n.files > 0 && n.bytes > 0);
        assert!(d.restores_into.contains(&n.backend));
    }

    #[test]
    fn an_apache_flink_savepoint() {
        let d = describe(&open("flink/flink-1.20.5/savepoint-hashmap-canonical/savepoint"));
        assert_fields_sorted(&d);
        let f = d.flink.as_ref().expect("a Flink description");
        assert!(f.label.starts_with("Apache Flink _metadata v"), "{}", f.label);
        assert_eq!(d.format, "flink-canonical");
        assert_eq!(d.restores_into, "any Flink state backend");
        // Flink 1.20 stores no uids: every operator is named by its id.
        assert_eq!(f.operators_without_known_uid.len(), d.operators.len());
    }

    #[test]
    fn kind_names() {
        assert_eq!(kind_name(SnapshotKind::Checkpoint), "checkpoint");
        assert_eq!(kind_name(SnapshotKind::Savepoint), "savepoint");
    }
}
