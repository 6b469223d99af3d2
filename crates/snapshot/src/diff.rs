//! Comparing two snapshots: operators, states, operator state and keyed entries, as a stream
//! of typed [`Difference`] records (design: `docs/design/0007-diff.md`).
//!
//! No printing and no argument parsing here: [`diff_snapshots`] walks both snapshots and calls
//! a sink with each difference; [`KeyGroupDiffer`] compares one key group of two sets of views
//! and is the reusable per-entry merge. Keyed state is read key group by key group in
//! ascending order, whatever the parallelism and format of either side; memory is bounded by
//! one key group per side (one subtask for changelog snapshots, which are replayed).
//!
//! [`report`]: the differences as printed ([`DiffReport`]), serialised by serde; [`text`]: as
//! text lines.

use crate::error::SnapshotError;
use crate::open::Snapshot;
use statekit_core::{
    ErrorKind, KeyGroupRange, KeyedStateKind, KeyedStateView, OperatorStateData, OperatorStateDescriptor,
    OperatorStateMode, StateDescriptor, StateError, TypeSchema,
};
use statekit_format::OperatorMetadata;
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::ops::Range;
use std::sync::Arc;

pub mod report;
pub mod text;
pub use report::{DiffReport, DifferenceReport, SummaryReport};

/// One side of a comparison: a snapshot and how to name it in messages.
#[derive(Clone, Copy)]
pub struct Side<'r> {
    /// Shown in errors (the path the user gave).
    pub label: &'r str,
    /// The open snapshot.
    pub snapshot: &'r Snapshot,
}

/// What to compare.
#[derive(Clone, Debug, Default)]
pub struct DiffOptions {
    /// Only the operator with this uid.
    pub uid: Option<String>,
    /// Only the (keyed or operator) state with this name.
    pub state: Option<String>,
    /// Key differences carry no values ([`KeyDetail::None`]).
    pub keys_only: bool,
}

/// Whether something is new on side b, gone from it, or on both sides but different.
/// Serialises as its [`Change::name`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Change {
    /// Only on side b.
    Added,
    /// Only on side a.
    Removed,
    /// On both sides, different.
    Modified,
}

impl Change {
    /// `+`, `-` or `~`.
    pub fn sign(self) -> char {
        match self {
            Change::Added => '+',
            Change::Removed => '-',
            Change::Modified => '~',
        }
    }

    /// `added`, `removed` or `modified`.
    pub fn name(self) -> &'static str {
        match self {
            Change::Added => "added",
            Change::Removed => "removed",
            Change::Modified => "modified",
        }
    }
}

/// A property of an operator or a state descriptor that a comparison reports. Serialises as
/// its [`Field::as_str`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Field {
    /// The operator's id.
    OperatorId,
    /// The operator's parallelism (a layout property).
    Parallelism,
    /// The operator's max parallelism.
    MaxParallelism,
    /// Whether the operator had finished.
    Finished,
    /// The state's kind.
    Kind,
    /// The key schema.
    Key,
    /// The namespace schema.
    Namespace,
    /// The map user-key schema.
    UserKey,
    /// The value schema.
    Value,
    /// The TTL.
    Ttl,
    /// The operator state's distribution mode.
    Mode,
}

impl Field {
    /// The name as the CLI and JSON print it: `operator_id`, `parallelism`, `max_parallelism`,
    /// `finished`, `kind`, `key`, `namespace`, `user_key`, `value`, `ttl`, `mode`.
    pub fn as_str(self) -> &'static str {
        match self {
            Field::OperatorId => "operator_id",
            Field::Parallelism => "parallelism",
            Field::MaxParallelism => "max_parallelism",
            Field::Finished => "finished",
            Field::Kind => "kind",
            Field::Key => "key",
            Field::Namespace => "namespace",
            Field::UserKey => "user_key",
            Field::Value => "value",
            Field::Ttl => "ttl",
            Field::Mode => "mode",
        }
    }
}

impl std::fmt::Display for Field {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One changed property (of an operator or a state descriptor), rendered as text. Serialises
/// as `{"field", "layout", "new", "old"}` (keys in name order, as `statekit diff` prints them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldChange {
    /// The property.
    pub field: Field,
    /// On side a.
    pub old: String,
    /// On side b.
    pub new: String,
    /// A layout property (parallelism): reported, but not a difference of the state.
    pub layout: bool,
}

impl serde::Serialize for FieldChange {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut m = s.serialize_struct("FieldChange", 4)?;
        m.serialize_field("field", &self.field)?;
        m.serialize_field("layout", &self.layout)?;
        m.serialize_field("new", &self.new)?;
        m.serialize_field("old", &self.old)?;
        m.end()
    }
}

/// An operator only on one side, or with changed properties.
#[derive(Clone, Debug)]
pub struct OperatorDiff {
    /// Its uid.
    pub uid: String,
    /// Added, removed or modified.
    pub change: Change,
    /// The changed properties (modified only).
    pub fields: Vec<FieldChange>,
    /// Why its keyed entries were not compared, when they were not (max parallelism differs).
    pub keyed_not_compared: Option<String>,
}

impl OperatorDiff {
    /// True when only layout properties changed (not counted as a difference).
    pub fn layout_only(&self) -> bool {
        self.change == Change::Modified && self.keyed_not_compared.is_none() && self.fields.iter().all(|f| f.layout)
    }
}

/// A keyed state only on one side, or with a changed descriptor.
#[derive(Clone, Debug)]
pub struct StateDiff {
    /// The operator's uid.
    pub uid: String,
    /// The state's name.
    pub name: String,
    /// Added, removed or modified.
    pub change: Change,
    /// The descriptor on side a.
    pub old: Option<StateDescriptor>,
    /// The descriptor on side b.
    pub new: Option<StateDescriptor>,
    /// The changed properties (modified only).
    pub fields: Vec<FieldChange>,
    /// Whether the entries are compared (kind and every schema equal).
    pub entries_compared: bool,
}

/// A value, element or map value with its TTL timestamp.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Item {
    /// The stored bytes.
    pub bytes: Vec<u8>,
    /// Last-update timestamp of TTL'd state.
    pub timestamp: Option<i64>,
}

/// A map entry (or broadcast entry) that differs; `None` = absent on that side.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapEntryDiff {
    /// The stored user key.
    pub user_key: Vec<u8>,
    /// On side a.
    pub old: Option<Item>,
    /// On side b.
    pub new: Option<Item>,
}

/// The values of a key that differs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyDetail {
    /// Not collected (`keys_only`).
    None,
    /// Value, reducing and aggregating state: the value on each side.
    Value {
        /// On side a.
        old: Option<Item>,
        /// On side b.
        new: Option<Item>,
    },
    /// List state: the whole list on each side (empty = absent).
    List {
        /// On side a.
        old: Vec<Item>,
        /// On side b.
        new: Vec<Item>,
    },
    /// Map state: the entries that differ, by user key.
    Map(Vec<MapEntryDiff>),
}

/// A (key, namespace) of a keyed state whose entries differ.
#[derive(Clone, Debug)]
pub struct KeyDiff {
    /// The operator's uid.
    pub uid: Arc<str>,
    /// The state's descriptor (equal on both sides: entries are compared only then).
    pub state: Arc<StateDescriptor>,
    /// The key's key group.
    pub key_group: u32,
    /// The stored key.
    pub key: Vec<u8>,
    /// The stored namespace.
    pub namespace: Vec<u8>,
    /// Added (only on b), removed (only on a) or modified.
    pub change: Change,
    /// The differing values.
    pub detail: KeyDetail,
}

/// An operator state only on one side, with a changed descriptor, or with different contents.
#[derive(Clone, Debug)]
pub struct OperatorStateDiff {
    /// The operator's uid.
    pub uid: String,
    /// The state's name.
    pub name: String,
    /// Added, removed or modified.
    pub change: Change,
    /// The descriptor on side a.
    pub old: Option<OperatorStateDescriptor>,
    /// The descriptor on side b.
    pub new: Option<OperatorStateDescriptor>,
    /// The changed properties.
    pub fields: Vec<FieldChange>,
    /// List and union states: elements only on side a (with multiplicity).
    pub removed_elements: Vec<Vec<u8>>,
    /// List and union states: elements only on side b (with multiplicity).
    pub added_elements: Vec<Vec<u8>>,
    /// Broadcast states: the entries that differ.
    pub entries: Vec<MapEntryDiff>,
}

/// One difference between the snapshots.
#[derive(Clone, Debug)]
pub enum Difference {
    /// An operator added, removed or changed.
    Operator(OperatorDiff),
    /// A keyed state added, removed or changed.
    State(StateDiff),
    /// An operator state added, removed, changed or with other contents.
    OperatorState(OperatorStateDiff),
    /// A key of a keyed state with other entries.
    Key(KeyDiff),
}

impl Difference {
    /// Whether it counts as a difference (everything but a layout-only operator change).
    pub fn counts(&self) -> bool {
        !matches!(self, Difference::Operator(o) if o.layout_only())
    }
}

/// Counts of a comparison.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DiffSummary {
    /// Operators added, removed or changed (layout-only changes not counted).
    pub operators: u64,
    /// Keyed states added, removed or changed.
    pub states: u64,
    /// Operator states added, removed, changed or with other contents.
    pub operator_states: u64,
    /// Keys (key, namespace) whose entries differ.
    pub keys: u64,
    /// Layout-only operator changes (parallelism).
    pub layout: u64,
    /// Keyed entries read on side a and b.
    pub entries: [u64; 2],
    /// Keyed entry bytes (key, namespace, user key, value) read on side a and b.
    pub bytes: [u64; 2],
    /// The sink stopped the walk before the end (a limit).
    pub truncated: bool,
}

impl DiffSummary {
    /// No difference found.
    pub fn identical(&self) -> bool {
        self.operators + self.states + self.operator_states + self.keys == 0
    }
}

/// Receives differences; [`ControlFlow::Break`] refuses this one (it is not counted) and stops
/// the walk (the summary then says `truncated`). A sink that can fail keeps its error and
/// breaks.
pub type DiffSink<'s> = dyn FnMut(Difference) -> ControlFlow<()> + 's;

/// Why a comparison failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DiffError {
    /// `--uid` names an operator neither side has.
    #[error("neither snapshot has an operator with uid {uid:?} (they have {have:?})")]
    NoSuchOperator {
        /// The uid asked for.
        uid: String,
        /// The uids the snapshots have.
        have: Vec<String>,
    },
    /// `--state` names a state no compared operator has.
    #[error("no compared operator has a state named {0:?} in either snapshot")]
    NoSuchState(String),
    /// One side's keyed state could not be opened.
    #[error("{side}: operator {uid:?}: opening the keyed state of key groups {range:?}")]
    OpenKeyed {
        /// The side, as labelled.
        side: String,
        /// The operator.
        uid: String,
        /// The key groups.
        range: KeyGroupRange,
        /// The cause.
        #[source]
        source: Box<SnapshotError>,
    },
    /// One side's operator state could not be read.
    #[error("{side}: operator {uid:?}: reading its operator state")]
    OperatorState {
        /// The side, as labelled.
        side: String,
        /// The operator.
        uid: String,
        /// The cause.
        #[source]
        source: Box<SnapshotError>,
    },
    /// Reading one key group of one side failed.
    #[error("{side}: operator {uid:?}, key group {key_group}")]
    ReadKeyGroup {
        /// The side, as labelled.
        side: String,
        /// The operator.
        uid: String,
        /// The key group.
        key_group: u32,
        /// The cause.
        #[source]
        source: StateError,
    },
}

impl DiffError {
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            DiffError::NoSuchOperator { .. } | DiffError::NoSuchState(_) => ErrorKind::Caller,
            DiffError::OpenKeyed { source, .. } => source.kind(),
            DiffError::OperatorState { source, .. } => source.kind(),
            DiffError::ReadKeyGroup { source, .. } => source.kind(),
        }
    }
}

impl statekit_core::HasErrorKind for DiffError {
    fn kind(&self) -> statekit_core::ErrorKind {
        DiffError::kind(self)
    }
}

/// How far a comparison got: key groups walked of those of every operator on both sides
/// (an operator whose keyed state is not compared counts as walked at once).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiffProgress {
    /// Key groups done.
    pub done: u64,
    /// Key groups in all.
    pub total: u64,
}

/// Told the progress after every key group; returns `false` to stop the walk (as a sink
/// refusing a difference does: the summary says `truncated`).
pub type ProgressHook<'p> = dyn FnMut(DiffProgress) -> bool + 'p;

struct Emitter<'s, 'f> {
    sink: &'s mut DiffSink<'f>,
    progress: &'s mut ProgressHook<'f>,
    at: DiffProgress,
    summary: DiffSummary,
    stopped: bool,
}

impl Emitter<'_, '_> {
    /// Reports `done` key groups; false once the hook (or the sink) asked to stop.
    fn tick(&mut self, done: u64) -> bool {
        if self.stopped {
            return false;
        }
        self.at.done = done.min(self.at.total);
        if !(self.progress)(self.at) {
            self.stopped = true;
            self.summary.truncated = true;
        }
        !self.stopped
    }

    /// Passes `d` on; false once the sink asked to stop.
    fn emit(&mut self, d: Difference) -> bool {
        if self.stopped {
            return false;
        }
        let layout = !d.counts();
        let probe = match &d {
            Difference::Operator(_) if layout => 0,
            Difference::Operator(_) => 1,
            Difference::State(_) => 2,
            Difference::OperatorState(_) => 3,
            Difference::Key(_) => 4,
        };
        if (self.sink)(d).is_continue() {
            let s = &mut self.summary;
            *[
                &mut s.layout,
                &mut s.operators,
                &mut s.states,
                &mut s.operator_states,
                &mut s.keys,
            ][probe] += 1;
        } else {
            self.stopped = true;
            self.summary.truncated = true;
        }
        !self.stopped
    }
}

/// Compares snapshot `a` with snapshot `b`, calling `sink` with every difference: per
/// operator (a's order, then b's new ones) its operator record, its keyed-state records, its
/// operator-state records, then its key records in key-group order (within a key group by
/// state, then key and namespace in canonical order).
pub fn diff_snapshots(
    a: Side<'_>,
    b: Side<'_>,
    opts: &DiffOptions,
    sink: &mut DiffSink<'_>,
) -> Result<DiffSummary, DiffError> {
    diff_snapshots_with_progress(a, b, opts, sink, &mut |_| true)
}

/// [`diff_snapshots`], telling `progress` how far it got after every key group (and at the
/// start); `progress` returning false stops the walk there (a cancelled comparison).
pub fn diff_snapshots_with_progress<'f>(
    a: Side<'_>,
    b: Side<'_>,
    opts: &DiffOptions,
    sink: &mut DiffSink<'f>,
    progress: &mut ProgressHook<'f>,
) -> Result<DiffSummary, DiffError> {
    let (ma, mb) = (a.snapshot.metadata(), b.snapshot.metadata());
    let mut uids: Vec<&str> = ma.operators.iter().map(|o| o.uid.as_str()).collect();
    for o in &mb.operators {
        if ma.operator(&o.uid).is_none() {
            uids.push(&o.uid);
        }
    }
    if let Some(u) = &opts.uid {
        if !uids.contains(&u.as_str()) {
            return Err(DiffError::NoSuchOperator {
                uid: u.clone(),
                have: uids.iter().map(|s| s.to_string()).collect(),
            });
        }
        uids.retain(|x| x == u);
    }
    if let Some(s) = &opts.state {
        let has = |o: &OperatorMetadata| {
            o.keyed_states.iter().any(|d| &d.name == s) || o.operator_states.iter().any(|d| &d.name == s)
        };
        // Only the operators that have the state on some side.
        uids.retain(|u| ma.operator(u).is_some_and(has) || mb.operator(u).is_some_and(has));
        if uids.is_empty() {
            return Err(DiffError::NoSuchState(s.clone()));
        }
    }
    let total = uids
        .iter()
        .filter_map(|u| {
            Some(u64::from(
                ma.operator(u)?.max_parallelism.min(mb.operator(u)?.max_parallelism),
            ))
        })
        .sum();
    let mut em = Emitter {
        sink,
        progress,
        at: DiffProgress { done: 0, total },
        summary: DiffSummary::default(),
        stopped: false,
    };
    if !em.tick(0) {
        return Ok(em.summary);
    }
    for uid in uids {
        let (oa, ob) = (ma.operator(uid), mb.operator(uid));
        let base = em.at.done;
        let share = match (oa, ob) {
            (Some(x), Some(y)) => u64::from(x.max_parallelism.min(y.max_parallelism)),
            _ => 0,
        };
        let ok = match (oa, ob) {
            (Some(_), None) => em.emit(Difference::Operator(OperatorDiff {
                uid: uid.to_string(),
                change: Change::Removed,
                fields: Vec::new(),
                keyed_not_compared: None,
            })),
            (None, Some(_)) => em.emit(Difference::Operator(OperatorDiff {
                uid: uid.to_string(),
                change: Change::Added,
                fields: Vec::new(),
                keyed_not_compared: None,
            })),
            (Some(oa), Some(ob)) => diff_operator(a, b, oa, ob, opts, &mut em)?,
            (None, None) => true,
        };
        if !ok || !em.tick(base + share) {
            break;
        }
    }
    Ok(em.summary)
}

fn field(field: Field, old: impl ToString, new: impl ToString, layout: bool) -> Option<FieldChange> {
    let (old, new) = (old.to_string(), new.to_string());
    (old != new).then_some(FieldChange {
        field,
        old,
        new,
        layout,
    })
}

fn opt_schema(s: &Option<TypeSchema>) -> String {
    s.as_ref().map(|s| s.to_string()).unwrap_or_else(|| "none".into())
}

/// A TTL as text: `none` or `<ms> ms, <update type>`.
pub fn ttl_text(d: &StateDescriptor) -> String {
    match &d.ttl {
        None => "none".into(),
        Some(t) => format!("{} ms, {:?}", t.ttl_ms, t.update_type),
    }
}

/// The changed properties of two descriptors of one keyed state.
pub fn descriptor_changes(a: &StateDescriptor, b: &StateDescriptor) -> Vec<FieldChange> {
    [
        field(Field::Kind, a.kind, b.kind, false),
        field(Field::Key, &a.key_schema, &b.key_schema, false),
        field(Field::Namespace, &a.namespace_schema, &b.namespace_schema, false),
        field(
            Field::UserKey,
            opt_schema(&a.user_key_schema),
            opt_schema(&b.user_key_schema),
            false,
        ),
        field(Field::Value, &a.value_schema, &b.value_schema, false),
        field(Field::Ttl, ttl_text(a), ttl_text(b), false),
    ]
    .into_iter()
    .flatten()
    .collect()
}

fn diff_operator(
    a: Side<'_>,
    b: Side<'_>,
    oa: &OperatorMetadata,
    ob: &OperatorMetadata,
    opts: &DiffOptions,
    em: &mut Emitter<'_, '_>,
) -> Result<bool, DiffError> {
    let uid = oa.uid.as_str();
    let fields: Vec<FieldChange> = [
        field(Field::OperatorId, oa.operator_id, ob.operator_id, false),
        field(Field::Parallelism, oa.parallelism, ob.parallelism, true),
        field(Field::MaxParallelism, oa.max_parallelism, ob.max_parallelism, false),
        field(Field::Finished, oa.finished, ob.finished, false),
    ]
    .into_iter()
    .flatten()
    .collect();
    let wanted = |name: &str| opts.state.as_deref().is_none_or(|s| s == name);
    let keyed_not_compared = (oa.max_parallelism != ob.max_parallelism
        && (oa.keyed_states.iter().any(|d| wanted(&d.name)) || ob.keyed_states.iter().any(|d| wanted(&d.name))))
    .then(|| {
        format!(
            "max parallelism {} vs {}: the keys are in other key groups",
            oa.max_parallelism, ob.max_parallelism
        )
    });
    if !fields.is_empty()
        && !em.emit(Difference::Operator(OperatorDiff {
            uid: uid.to_string(),
            change: Change::Modified,
            fields,
            keyed_not_compared: keyed_not_compared.clone(),
        }))
    {
        return Ok(false);
    }

    // Keyed states, by name.
    let mut names: Vec<&str> = oa.keyed_states.iter().map(|d| d.name.as_str()).collect();
    for d in &ob.keyed_states {
        if !names.contains(&d.name.as_str()) {
            names.push(&d.name);
        }
    }
    names.retain(|n| wanted(n));
    let mut compared: Vec<StateDescriptor> = Vec::new();
    for name in names {
        let da = oa.keyed_states.iter().find(|d| d.name == name);
        let db = ob.keyed_states.iter().find(|d| d.name == name);
        let (change, fields, entries_compared) = match (da, db) {
            (Some(_), None) => (Change::Removed, Vec::new(), false),
            (None, Some(_)) => (Change::Added, Vec::new(), false),
            (Some(x), Some(y)) => {
                let f = descriptor_changes(x, y);
                let comparable = f.iter().all(|c| c.field == Field::Ttl);
                if comparable {
                    compared.push(y.clone());
                }
                if f.is_empty() {
                    continue;
                }
                (Change::Modified, f, comparable)
            }
            (None, None) => continue,
        };
        let d = Difference::State(StateDiff {
            uid: uid.to_string(),
            name: name.to_string(),
            change,
            old: da.cloned(),
            new: db.cloned(),
            fields,
            entries_compared,
        });
        if !em.emit(d) {
            return Ok(false);
        }
    }

    if !diff_operator_states(a, b, oa, ob, opts, em)? {
        return Ok(false);
    }

    if keyed_not_compared.is_some() || compared.is_empty() {
        return Ok(true);
    }
    let uid_arc: Arc<str> = Arc::from(uid);
    let mut differ = KeyGroupDiffer::new(uid_arc, compared, opts.keys_only);
    let mut ca = Cursor::new(a, oa);
    let mut cb = Cursor::new(b, ob);
    let base = em.at.done;
    for kg in 0..oa.max_parallelism {
        let va = ca.views_for(kg)?;
        let vb = cb.views_for(kg)?;
        let mut stop = false;
        let stats = differ
            .diff_key_group(kg, va, vb, &mut |d| {
                if em.emit(d) {
                    ControlFlow::Continue(())
                } else {
                    stop = true;
                    ControlFlow::Break(())
                }
            })
            .map_err(|e| {
                let (side, source) = match e {
                    SideError::A(e) => (a.label, e),
                    SideError::B(e) => (b.label, e),
                };
                DiffError::ReadKeyGroup {
                    side: side.to_string(),
                    uid: uid.to_string(),
                    key_group: kg,
                    source,
                }
            })?;
        for i in 0..2 {
            em.summary.entries[i] += stats.entries[i];
            em.summary.bytes[i] += stats.bytes[i];
        }
        if stop || em.stopped || !em.tick(base + u64::from(kg) + 1) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Operator states: descriptors, then contents as a parallelism-1 restore sees them.
fn diff_operator_states(
    a: Side<'_>,
    b: Side<'_>,
    oa: &OperatorMetadata,
    ob: &OperatorMetadata,
    opts: &DiffOptions,
    em: &mut Emitter<'_, '_>,
) -> Result<bool, DiffError> {
    let uid = oa.uid.as_str();
    let wanted = |name: &str| opts.state.as_deref().is_none_or(|s| s == name);
    let mut names: Vec<&str> = oa.operator_states.iter().map(|d| d.name.as_str()).collect();
    for d in &ob.operator_states {
        if !names.contains(&d.name.as_str()) {
            names.push(&d.name);
        }
    }
    names.retain(|n| wanted(n));
    if names.is_empty() {
        return Ok(true);
    }
    let read = |s: Side<'_>, o: &OperatorMetadata| -> Result<BTreeMap<String, OperatorStateData>, DiffError> {
        if o.operator_states.is_empty() {
            return Ok(BTreeMap::new());
        }
        let snap = s
            .snapshot
            .operator_state(uid, 1, 0)
            .map_err(|source| DiffError::OperatorState {
                side: s.label.to_string(),
                uid: uid.to_string(),
                source: Box::new(source),
            })?;
        Ok(snap.states.into_iter().map(|(d, data)| (d.name, data)).collect())
    };
    let (sa, sb) = (read(a, oa)?, read(b, ob)?);
    for name in names {
        let da = oa.operator_states.iter().find(|d| d.name == name);
        let db = ob.operator_states.iter().find(|d| d.name == name);
        let mut d = OperatorStateDiff {
            uid: uid.to_string(),
            name: name.to_string(),
            change: Change::Modified,
            old: da.cloned(),
            new: db.cloned(),
            fields: Vec::new(),
            removed_elements: Vec::new(),
            added_elements: Vec::new(),
            entries: Vec::new(),
        };
        match (da, db) {
            (Some(_), None) => d.change = Change::Removed,
            (None, Some(_)) => d.change = Change::Added,
            (Some(x), Some(y)) => {
                d.fields = [
                    field(Field::Mode, x.mode, y.mode, false),
                    field(Field::Key, opt_schema(&x.key_schema), opt_schema(&y.key_schema), false),
                    field(Field::Value, &x.value_schema, &y.value_schema, false),
                ]
                .into_iter()
                .flatten()
                .collect();
                let empty_list = OperatorStateData::List(Vec::new());
                let empty_map = OperatorStateData::Broadcast(BTreeMap::new());
                let empty = if x.mode == OperatorStateMode::Broadcast {
                    &empty_map
                } else {
                    &empty_list
                };
                let ca = sa.get(name).unwrap_or(empty);
                let cb = sb.get(name).unwrap_or(empty);
                if d.fields.is_empty() {
                    operator_state_contents(ca, cb, &mut d);
                } else if ca != cb {
                    // Other types: contents are reported as whole element sets.
                    d.removed_elements = elements(ca);
                    d.added_elements = elements(cb);
                }
                if d.fields.is_empty()
                    && d.removed_elements.is_empty()
                    && d.added_elements.is_empty()
                    && d.entries.is_empty()
                {
                    continue;
                }
            }
            (None, None) => continue,
        }
        if !em.emit(Difference::OperatorState(d)) {
            return Ok(false);
        }
    }
    Ok(true)
}

fn elements(d: &OperatorStateData) -> Vec<Vec<u8>> {
    match d {
        OperatorStateData::List(l) => l.clone(),
        OperatorStateData::Broadcast(m) => m.values().cloned().collect(),
    }
}

/// Fills `d` with the differing contents: list and union as multisets, broadcast as maps.
fn operator_state_contents(a: &OperatorStateData, b: &OperatorStateData, d: &mut OperatorStateDiff) {
    match (a, b) {
        (OperatorStateData::Broadcast(ma), OperatorStateData::Broadcast(mb)) => {
            let item = |v: &Vec<u8>| Item {
                bytes: v.clone(),
                timestamp: None,
            };
            for (k, va) in ma {
                match mb.get(k) {
                    None => d.entries.push(MapEntryDiff {
                        user_key: k.clone(),
                        old: Some(item(va)),
                        new: None,
                    }),
                    Some(vb) if vb != va => d.entries.push(MapEntryDiff {
                        user_key: k.clone(),
                        old: Some(item(va)),
                        new: Some(item(vb)),
                    }),
                    Some(_) => {}
                }
            }
            for (k, vb) in mb {
                if !ma.contains_key(k) {
                    d.entries.push(MapEntryDiff {
                        user_key: k.clone(),
                        old: None,
                        new: Some(item(vb)),
                    });
                }
            }
        }
        _ => {
            let mut ea = elements(a);
            let mut eb = elements(b);
            ea.sort();
            eb.sort();
            let (mut i, mut j) = (0, 0);
            while i < ea.len() || j < eb.len() {
                let ord = match (ea.get(i), eb.get(j)) {
                    (Some(x), Some(y)) => x.cmp(y),
                    (Some(_), None) => Ordering::Less,
                    _ => Ordering::Greater,
                };
                match ord {
                    Ordering::Equal => {
                        i += 1;
                        j += 1;
                    }
                    Ordering::Less => {
                        d.removed_elements.push(ea[i].clone());
                        i += 1;
                    }
                    Ordering::Greater => {
                        d.added_elements.push(eb[j].clone());
                        j += 1;
                    }
                }
            }
        }
    }
}

/// The views of one side's subtask that holds the current key group, opened lazily and
/// dropped when the walk leaves its key-group range.
struct Cursor<'r> {
    side: Side<'r>,
    uid: String,
    /// Subtask key-group ranges, ascending.
    subtasks: Vec<KeyGroupRange>,
    current: KeyGroupRange,
    views: Vec<Box<dyn KeyedStateView>>,
}

impl<'r> Cursor<'r> {
    fn new(side: Side<'r>, op: &OperatorMetadata) -> Self {
        let mut subtasks: Vec<KeyGroupRange> = op.subtasks.iter().map(|s| s.key_groups).collect();
        subtasks.sort_by_key(|r| r.start());
        Cursor {
            side,
            uid: op.uid.clone(),
            subtasks,
            current: KeyGroupRange::EMPTY,
            views: Vec::new(),
        }
    }

    fn views_for(&mut self, kg: u32) -> Result<&[Box<dyn KeyedStateView>], DiffError> {
        if !self.current.contains(kg) {
            self.views.clear();
            let range = self
                .subtasks
                .iter()
                .find(|r| r.contains(kg))
                .copied()
                .unwrap_or_else(|| KeyGroupRange::new(kg, kg));
            self.views = self
                .side
                .snapshot
                .keyed_views(&self.uid, range)
                .map_err(|source| DiffError::OpenKeyed {
                    side: self.side.label.to_string(),
                    uid: self.uid.clone(),
                    range,
                    source: Box::new(source),
                })?;
            self.current = range;
        }
        Ok(&self.views)
    }
}

/// Why a key-group comparison failed: reading side a or side b.
#[derive(Debug)]
pub enum SideError {
    /// Reading side a failed.
    A(StateError),
    /// Reading side b failed.
    B(StateError),
}

/// Entries and bytes read from each side in one key group.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyGroupStats {
    /// Entries read on side a and b.
    pub entries: [u64; 2],
    /// Key, namespace, user key and value bytes read on side a and b.
    pub bytes: [u64; 2],
}

/// One entry in an [`Arena`]: ranges into its byte buffer.
#[derive(Clone, Debug)]
struct Rec {
    key: Range<usize>,
    ns: Range<usize>,
    uk: Option<Range<usize>>,
    value: Range<usize>,
    ts: Option<i64>,
}

/// One side's entries of one key group, per compared state; reused across key groups.
#[derive(Default)]
struct Arena {
    data: Vec<u8>,
    states: Vec<Vec<Rec>>,
}

impl Arena {
    fn clear(&mut self, states: usize) {
        self.data.clear();
        self.states.resize_with(states, Vec::new);
        for s in &mut self.states {
            s.clear();
        }
    }

    fn push(&mut self, bytes: &[u8]) -> Range<usize> {
        let start = self.data.len();
        self.data.extend_from_slice(bytes);
        start..self.data.len()
    }

    fn bytes(&self, r: &Range<usize>) -> &[u8] {
        &self.data[r.clone()]
    }

    fn item(&self, r: &Rec) -> Item {
        Item {
            bytes: self.bytes(&r.value).to_vec(),
            timestamp: r.ts,
        }
    }

    /// Fills with the entries of `kg` from `views` (those covering it).
    fn fill(&mut self, kg: u32, views: &[Box<dyn KeyedStateView>], names: &[String]) -> Result<u64, StateError> {
        self.clear(names.len());
        let mut sources = 0;
        let mut n = 0u64;
        for v in views {
            if !v.key_group_range().contains(kg) {
                continue;
            }
            sources += 1;
            let map: Vec<Option<usize>> = v
                .states()
                .iter()
                .map(|d| names.iter().position(|n| n == &d.name))
                .collect();
            let _ = v.visit_key_group(kg, &mut |e| {
                n += 1;
                let Some(Some(s)) = map.get(e.state as usize).copied() else {
                    return Ok(ControlFlow::Continue(()));
                };
                let key = self.push(e.key);
                let ns = self.push(e.namespace);
                let uk = e.user_key.map(|u| self.push(u));
                let value = self.push(e.value);
                self.states[s].push(Rec {
                    key,
                    ns,
                    uk,
                    value,
                    ts: e.timestamp,
                });
                Ok(ControlFlow::Continue(()))
            })?;
        }
        if sources > 1 {
            // Several views cover the key group (overlapping subtasks): restore the order.
            let data = std::mem::take(&mut self.data);
            for s in &mut self.states {
                s.sort_by(|x, y| {
                    data[x.key.clone()]
                        .cmp(&data[y.key.clone()])
                        .then_with(|| data[x.ns.clone()].cmp(&data[y.ns.clone()]))
                        .then_with(|| {
                            x.uk.as_ref()
                                .map(|u| &data[u.clone()])
                                .cmp(&y.uk.as_ref().map(|u| &data[u.clone()]))
                        })
                });
            }
            self.data = data;
        }
        Ok(n)
    }

    /// End of the (key, namespace) group starting at `i` in state `s`.
    fn group_end(&self, s: usize, i: usize) -> usize {
        let recs = &self.states[s];
        let (k, ns) = (self.bytes(&recs[i].key), self.bytes(&recs[i].ns));
        let mut j = i + 1;
        while j < recs.len() && self.bytes(&recs[j].key) == k && self.bytes(&recs[j].ns) == ns {
            j += 1;
        }
        j
    }
}

/// Compares key groups of two sets of views, state by state (matched by name), key by key.
/// Bytes of a key group above which the next key group's two sides are read on two threads.
const PARALLEL_FILL_BYTES: usize = 64 * 1024;

/// Reuses its buffers from one key group to the next.
pub struct KeyGroupDiffer {
    uid: Arc<str>,
    states: Vec<Arc<StateDescriptor>>,
    names: Vec<String>,
    keys_only: bool,
    arenas: [Arena; 2],
}

impl KeyGroupDiffer {
    /// A differ of operator `uid`'s `states` (descriptors whose kind and schemas are equal
    /// on both sides; entries of other states are skipped).
    pub fn new(uid: Arc<str>, states: Vec<StateDescriptor>, keys_only: bool) -> Self {
        let names = states.iter().map(|d| d.name.clone()).collect();
        KeyGroupDiffer {
            uid,
            states: states.into_iter().map(Arc::new).collect(),
            names,
            keys_only,
            arenas: [Arena::default(), Arena::default()],
        }
    }

    /// Compares key group `kg` of views `a` with views `b` (views not covering `kg` are
    /// ignored), calling `sink` with each differing key; stops when it returns false.
    pub fn diff_key_group(
        &mut self,
        kg: u32,
        a: &[Box<dyn KeyedStateView>],
        b: &[Box<dyn KeyedStateView>],
        sink: &mut DiffSink<'_>,
    ) -> Result<KeyGroupStats, SideError> {
        let [aa, ab] = &mut self.arenas;
        let names = &self.names;
        // The two sides are read (decompressed, decoded, copied) at the same time when key
        // groups are big enough to pay for a thread: the previous one of either side held
        // `PARALLEL_FILL_BYTES` (key groups of a state are alike in size; with many tiny key
        // groups a thread per key group would cost more than it saves).
        let parallel = aa.data.len().max(ab.data.len()) >= PARALLEL_FILL_BYTES;
        let (ra, rb) = if parallel {
            std::thread::scope(|scope| {
                let side_a = scope.spawn(|| aa.fill(kg, a, names));
                let rb = ab.fill(kg, b, names);
                let ra = side_a.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
                (ra, rb)
            })
        } else {
            (aa.fill(kg, a, names), ab.fill(kg, b, names))
        };
        let na = ra.map_err(SideError::A)?;
        let nb = rb.map_err(SideError::B)?;
        let stats = KeyGroupStats {
            entries: [na, nb],
            bytes: [aa.data.len() as u64, ab.data.len() as u64],
        };
        let (aa, ab) = (&self.arenas[0], &self.arenas[1]);
        for (s, desc) in self.states.iter().enumerate() {
            let (ra, rb) = (&aa.states[s], &ab.states[s]);
            let (mut i, mut j) = (0, 0);
            while i < ra.len() || j < rb.len() {
                let ord = match (ra.get(i), rb.get(j)) {
                    (Some(x), Some(y)) => aa
                        .bytes(&x.key)
                        .cmp(ab.bytes(&y.key))
                        .then_with(|| aa.bytes(&x.ns).cmp(ab.bytes(&y.ns))),
                    (Some(_), None) => Ordering::Less,
                    _ => Ordering::Greater,
                };
                let ie = if ord != Ordering::Greater {
                    aa.group_end(s, i)
                } else {
                    i
                };
                let je = if ord != Ordering::Less { ab.group_end(s, j) } else { j };
                let ga = &ra[i..ie];
                let gb = &rb[j..je];
                let change = match ord {
                    Ordering::Less => Some(Change::Removed),
                    Ordering::Greater => Some(Change::Added),
                    Ordering::Equal => (!groups_equal(aa, ga, ab, gb)).then_some(Change::Modified),
                };
                if let Some(change) = change {
                    let (arena, first) = if ord == Ordering::Greater {
                        (ab, &gb[0])
                    } else {
                        (aa, &ga[0])
                    };
                    let detail = if self.keys_only {
                        KeyDetail::None
                    } else {
                        detail(desc.kind, aa, ga, ab, gb)
                    };
                    let d = Difference::Key(KeyDiff {
                        uid: self.uid.clone(),
                        state: desc.clone(),
                        key_group: kg,
                        key: arena.bytes(&first.key).to_vec(),
                        namespace: arena.bytes(&first.ns).to_vec(),
                        change,
                        detail,
                    });
                    if sink(d).is_break() {
                        return Ok(stats);
                    }
                }
                i = ie;
                j = je;
            }
        }
        Ok(stats)
    }
}

fn rec_eq(aa: &Arena, x: &Rec, ab: &Arena, y: &Rec) -> bool {
    x.ts == y.ts
        && aa.bytes(&x.value) == ab.bytes(&y.value)
        && x.uk.as_ref().map(|u| aa.bytes(u)) == y.uk.as_ref().map(|u| ab.bytes(u))
}

fn groups_equal(aa: &Arena, ga: &[Rec], ab: &Arena, gb: &[Rec]) -> bool {
    ga.len() == gb.len() && ga.iter().zip(gb).all(|(x, y)| rec_eq(aa, x, ab, y))
}

fn detail(kind: KeyedStateKind, aa: &Arena, ga: &[Rec], ab: &Arena, gb: &[Rec]) -> KeyDetail {
    match kind {
        KeyedStateKind::List => KeyDetail::List {
            old: ga.iter().map(|r| aa.item(r)).collect(),
            new: gb.iter().map(|r| ab.item(r)).collect(),
        },
        KeyedStateKind::Map => {
            let uk = |arena: &Arena, r: &Rec| r.uk.as_ref().map(|u| arena.bytes(u).to_vec()).unwrap_or_default();
            let mut out = Vec::new();
            let (mut i, mut j) = (0, 0);
            while i < ga.len() || j < gb.len() {
                let ord = match (ga.get(i), gb.get(j)) {
                    (Some(x), Some(y)) => uk(aa, x).cmp(&uk(ab, y)),
                    (Some(_), None) => Ordering::Less,
                    _ => Ordering::Greater,
                };
                match ord {
                    Ordering::Less => {
                        out.push(MapEntryDiff {
                            user_key: uk(aa, &ga[i]),
                            old: Some(aa.item(&ga[i])),
                            new: None,
                        });
                        i += 1;
                    }
                    Ordering::Greater => {
                        out.push(MapEntryDiff {
                            user_key: uk(ab, &gb[j]),
                            old: None,
                            new: Some(ab.item(&gb[j])),
                        });
                        j += 1;
                    }
                    Ordering::Equal => {
                        if !rec_eq(aa, &ga[i], ab, &gb[j]) {
                            out.push(MapEntryDiff {
                                user_key: uk(aa, &ga[i]),
                                old: Some(aa.item(&ga[i])),
                                new: Some(ab.item(&gb[j])),
                            });
                        }
                        i += 1;
                        j += 1;
                    }
                }
            }
            KeyDetail::Map(out)
        }
        _ => KeyDetail::Value {
            old: ga.first().map(|r| aa.item(r)),
            new: gb.first().map(|r| ab.item(r)),
        },
    }
}

/// A state's description for messages: `value<string, i64>` etc.
pub fn describe_state(d: &StateDescriptor) -> String {
    let mut s = format!("{} key {} ns {}", d.kind, d.key_schema, d.namespace_schema);
    if let Some(u) = &d.user_key_schema {
        s.push_str(&format!(" user-key {u}"));
    }
    s.push_str(&format!(" value {}", d.value_schema));
    if d.ttl.is_some() {
        s.push_str(&format!(" ttl {}", ttl_text(d)));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use statekit_core::{MemoryView, OwnedEntry};

    fn e(state: u32, key: &str, uk: Option<&str>, value: &[u8]) -> OwnedEntry {
        OwnedEntry {
            key_group: 0,
            state,
            key: key.as_bytes().to_vec(),
            namespace: Vec::new(),
            user_key: uk.map(|u| u.as_bytes().to_vec()),
            value: value.to_vec(),
            timestamp: None,
        }
    }

    fn view(states: Vec<StateDescriptor>, entries: Vec<OwnedEntry>) -> Box<dyn KeyedStateView> {
        Box::new(MemoryView::new(4, KeyGroupRange::new(0, 3), states, entries))
    }

    fn run(differ: &mut KeyGroupDiffer, a: &[Box<dyn KeyedStateView>], b: &[Box<dyn KeyedStateView>]) -> Vec<KeyDiff> {
        let mut out = Vec::new();
        differ
            .diff_key_group(0, a, b, &mut |d| {
                if let Difference::Key(k) = d {
                    out.push(k);
                }
                ControlFlow::Continue(())
            })
            .map_err(|e| format!("{e:?}"))
            .expect("diff");
        out
    }

    fn descs() -> (StateDescriptor, StateDescriptor) {
        (
            StateDescriptor::value("v", TypeSchema::Utf8, TypeSchema::Bytes),
            StateDescriptor::map("m", TypeSchema::Utf8, TypeSchema::Utf8, TypeSchema::Bytes),
        )
    }

    #[test]
    fn states_match_by_name_whatever_their_index() {
        let (v, m) = descs();
        let a = vec![view(
            vec![v.clone(), m.clone()],
            vec![
                e(0, "k", None, b"1"),
                e(1, "k", Some("u"), b"x"),
                e(1, "k", Some("w"), b"y"),
            ],
        )];
        // b registers the states the other way round; same content but one map entry.
        let b = vec![view(
            vec![m.clone(), v.clone()],
            vec![
                e(1, "k", None, b"1"),
                e(0, "k", Some("u"), b"x"),
                e(0, "k", Some("w"), b"z"),
            ],
        )];
        let mut d = KeyGroupDiffer::new(Arc::from("op"), vec![v, m], false);
        let got = run(&mut d, &a, &b);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].state.name, "m");
        assert_eq!(got[0].change, Change::Modified);
        let item = |b: &[u8]| Item {
            bytes: b.to_vec(),
            timestamp: None,
        };
        assert_eq!(
            got[0].detail,
            KeyDetail::Map(vec![MapEntryDiff {
                user_key: b"w".to_vec(),
                old: Some(item(b"y")),
                new: Some(item(b"z")),
            }])
        );
    }

    #[test]
    fn added_removed_and_keys_only() {
        let (v, _) = descs();
        let a = vec![view(
            vec![v.clone()],
            vec![e(0, "a", None, b"1"), e(0, "b", None, b"2")],
        )];
        let b = vec![view(
            vec![v.clone()],
            vec![e(0, "b", None, b"2"), e(0, "c", None, b"3")],
        )];
        let mut d = KeyGroupDiffer::new(Arc::from("op"), vec![v], true);
        let got: Vec<(Change, Vec<u8>, KeyDetail)> = run(&mut d, &a, &b)
            .into_iter()
            .map(|k| (k.change, k.key, k.detail))
            .collect();
        assert_eq!(
            got,
            vec![
                (Change::Removed, b"a".to_vec(), KeyDetail::None),
                (Change::Added, b"c".to_vec(), KeyDetail::None)
            ]
        );
        // Reused buffers: the same differ on an identical pair finds nothing.
        assert!(run(&mut d, &b, &b).is_empty());
    }

    #[test]
    fn views_not_covering_the_key_group_are_ignored() {
        let (v, _) = descs();
        let far: Box<dyn KeyedStateView> =
            Box::new(MemoryView::new(4, KeyGroupRange::new(2, 3), vec![v.clone()], vec![]));
        let a = vec![far, view(vec![v.clone()], vec![e(0, "a", None, b"1")])];
        let b = vec![view(vec![v.clone()], vec![e(0, "a", None, b"1")])];
        let mut d = KeyGroupDiffer::new(Arc::from("op"), vec![v], false);
        assert!(run(&mut d, &a, &b).is_empty());
    }
}
