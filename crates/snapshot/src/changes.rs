//! The change records of changelog state, as a report: what `statekit dump --changes` lists.
//!
//! * [`walk_changes`] lists the records of a changelog checkpoint's tails in replay order —
//!   subtask by subtask, each tail in order, each change set's metadata records first, then
//!   its key groups ascending: the walk a restore replays ([`walk_tail`]). Everything is
//!   decoded and checked before the first record is listed: a damaged file is an error, never
//!   a partial list.
//! * [`walk_log_file_changes`] lists those of one lone log file (`*.skcl`), in file order,
//!   after checking the whole file.
//!
//! The caller is given each record a [`ChangeFilter`] keeps as a [`ChangeRecord`]: where it is
//! ([`RecordOrigin`]) and what it says ([`RecordBody`]) — a state's declaration, or a change
//! whose key, namespace, values, user keys and list sources are read by the schemas of the
//! state its log's metadata record declared ([`TypedBytes`]; as bytes when none did). A
//! [`ChangeRecord`] serialises (serde) to one object of `statekit dump --changes --json`, its
//! keys in name order, values in the one JSON shape of [`statekit_core::json`]; no format is
//! chosen here. A tool renders the same record as text.
//!
//! A lone log file is also recognised ([`is_log_file`], [`unwritten_prepared`]), checked whole
//! ([`verify_log_file`]) and asked for a state's key schema ([`declared_key_schema`], to read
//! a key given as text); a snapshot's states are asked the same by [`key_schema`].

use crate::diff::report::StateDescriptorReport;
use crate::error::SnapshotError;
use crate::open::Snapshot;
use serde::{Serialize, Serializer};
use statekit_changelog::file::is_unwritten_prepared;
use statekit_changelog::tail::{walk_tail, LogFiles, TailProblem, TailStats, TailVisitor};
use statekit_changelog::verify::LogCheck;
use statekit_changelog::{Change, LogFileReader, LogId, Op, ReadKind, Record, RecordsError};
use statekit_checkpoint::CheckpointError;
use statekit_core::json::Decoded;
use statekit_core::location::Location;
use statekit_core::storage::{Blob, LocalStorage, Storage as _, StorageError};
use statekit_core::{ErrorKind, HasErrorKind, KeyGroupRange, StateDescriptor, TypeSchema};
use statekit_format::{FormatError, OperatorMetadata, Problem, ResolvedChangelogHandle};
use std::collections::HashMap;
use std::convert::Infallible;
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::Arc;

/// Errors of listing change records and of reading a lone log file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChangesError {
    /// The snapshot could not be read (an unknown operator, a handle that does not resolve).
    #[error(transparent)]
    Snapshot(Box<SnapshotError>),
    /// The log file could not be opened.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// A log file does not open, read or decode, or a tail does not match its log file: the
    /// problem names the file, offset and field.
    #[error("{0}")]
    Unreadable(Problem),
    /// A local path that names no file (no file name, or no directory above it).
    #[error("{path}: not a file")]
    NotAFile {
        /// The path.
        path: String,
    },
    /// No operator of the snapshot (or not the one asked for) holds changelog state.
    #[error("{}", no_changelog_text(uid.as_deref(), format))]
    NoChangelogState {
        /// The operator asked for, when one was.
        uid: Option<String>,
        /// The snapshot's format.
        format: String,
    },
    /// A key-group filter beyond the operator's key groups.
    #[error("key group {key_group} does not exist: operator {uid:?} has {max_parallelism} key groups")]
    NoSuchKeyGroup {
        /// The operator.
        uid: String,
        /// The largest key group asked for.
        key_group: u32,
        /// The operator's max parallelism (its number of key groups).
        max_parallelism: u32,
    },
    /// No metadata record of the log file declares the state.
    #[error("{file}: no metadata record declares a state {state:?}")]
    UndeclaredState {
        /// The log file, as given.
        file: String,
        /// The state asked for.
        state: String,
    },
    /// No operator of the snapshot (or not the one asked for) has a keyed state of that name.
    #[error("no operator has a keyed state {state:?}")]
    NoKeyedState {
        /// The state asked for.
        state: String,
    },
}

fn no_changelog_text(uid: Option<&str>, format: &str) -> String {
    match uid {
        Some(u) => format!("operator {u:?} holds no changelog state (format {format})"),
        None => format!("no operator holds changelog state (format {format})"),
    }
}

impl ChangesError {
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            ChangesError::Snapshot(e) => e.kind(),
            ChangesError::Storage(e) => e.kind(),
            ChangesError::Unreadable(p) => p.kind,
            ChangesError::NotAFile { .. } | ChangesError::NoChangelogState { .. } => ErrorKind::Caller,
            ChangesError::NoSuchKeyGroup { .. } => ErrorKind::Caller,
            ChangesError::UndeclaredState { .. } | ChangesError::NoKeyedState { .. } => ErrorKind::NotFound,
        }
    }
}

impl HasErrorKind for ChangesError {
    fn kind(&self) -> ErrorKind {
        ChangesError::kind(self)
    }
}

impl From<SnapshotError> for ChangesError {
    fn from(e: SnapshotError) -> Self {
        ChangesError::Snapshot(Box::new(e))
    }
}

impl From<CheckpointError> for ChangesError {
    fn from(e: CheckpointError) -> Self {
        SnapshotError::Checkpoint(e).into()
    }
}

/// A format error as the problem it is, naming file, offset and field.
fn unreadable(e: FormatError) -> ChangesError {
    ChangesError::Unreadable(Problem::from(&e))
}

/// Which change records a walk lists.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChangeFilter {
    /// Only these key groups (metadata records are then left out).
    pub key_groups: Option<KeyGroupRange>,
    /// Only this state (by name).
    pub state: Option<String>,
    /// Only this key (stored bytes; metadata records are then left out).
    pub key: Option<Vec<u8>>,
}

impl ChangeFilter {
    /// Whether `rec`, in key group `kg`, of the state `desc` declares (when one does), is listed.
    fn keeps(&self, kg: u32, rec: &Record<'_>, desc: Option<&StateDescriptor>) -> bool {
        if let Some(s) = &self.state {
            let name = match rec {
                Record::Metadata { descriptor, .. } => Some(&descriptor.name),
                Record::Change(_) => desc.map(|d| &d.name),
            };
            if name != Some(s) {
                return false;
            }
        }
        match rec {
            Record::Metadata { .. } => self.key_groups.is_none() && self.key.is_none(),
            Record::Change(c) => {
                self.key_groups.is_none_or(|r| r.contains(kg)) && self.key.as_deref().is_none_or(|k| k == c.key)
            }
        }
    }
}

/// The schema of the parts of a state no metadata record declared.
static BYTES: TypeSchema = TypeSchema::Bytes;

/// Stored bytes with the schema they are read by. Serialises as the [`Decoded`] value (an
/// object with the hex and the reason when the bytes do not decode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TypedBytes<'a> {
    /// The schema: the declared state's, or `bytes` when no metadata record declared it.
    pub schema: &'a TypeSchema,
    /// The bytes as stored.
    pub bytes: &'a [u8],
}

impl TypedBytes<'_> {
    /// The bytes read by the schema.
    pub fn decoded(&self) -> Decoded {
        Decoded::of(self.schema, self.bytes)
    }
}

impl Serialize for TypedBytes<'_> {
    /// [`Decoded`]'s JSON.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.decoded().serialize(s)
    }
}

/// Where a listed record is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordOrigin<'a> {
    /// The subtask whose tail holds it (`None` in a lone log file).
    pub subtask: Option<u32>,
    /// Its log file: as `_metadata` references it, or a lone log file as given.
    pub file: &'a str,
    /// The offset of its change set in the file.
    pub offset: u64,
    /// The log of its change set.
    pub log: LogId,
    /// The sequence number of its change set.
    pub sqn: u64,
}

/// One listed record: where it is and what it says. Serialises to the object
/// `statekit dump --changes --json` prints for it (keys in name order): `file`, `log`,
/// `offset`, `sqn`, `subtask` (`null` in a lone log file), `key_group` (`null` for a
/// metadata record), `op`, `state` (`null` for an undeclared state), `state_id`; a metadata
/// record's `descriptor`; a change's `key`, `namespace` and the parts of its operation
/// (`value`, `element`, `elements`, `user_key`, `sources`, `read`) and `time_ms`.
#[derive(Clone, Debug, PartialEq)]
pub struct ChangeRecord<'a> {
    /// Where it is.
    pub origin: RecordOrigin<'a>,
    /// What it says.
    pub body: RecordBody<'a>,
}

/// What a listed record says.
#[derive(Clone, Debug, PartialEq)]
pub enum RecordBody<'a> {
    /// A metadata record: declares the state the data records of its log name by `state_id`.
    Metadata {
        /// The id the data records use.
        state_id: u32,
        /// The state.
        descriptor: &'a StateDescriptor,
    },
    /// A data record: one state change (or a read that refreshes TTL stamps).
    Change(ListedChange<'a>),
}

/// A data record, read by its state's schemas.
#[derive(Clone, Debug, PartialEq)]
pub struct ListedChange<'a> {
    /// The key group of its key.
    pub key_group: u32,
    /// The state, by the id its metadata record declared.
    pub state_id: u32,
    /// The state's name, when a metadata record of its log declared it.
    pub state: Option<&'a str>,
    /// The key.
    pub key: TypedBytes<'a>,
    /// The namespace.
    pub namespace: TypedBytes<'a>,
    /// The operation's name ([`Op::name`]: `put`, `map-remove`, …).
    pub op_name: &'static str,
    /// The operation.
    pub op: ListedOp<'a>,
    /// The operation's time (ms, on the backend's clock), for states with TTL.
    pub time_ms: Option<i64>,
}

/// A data record's operation ([`Op`]), its parts read by the state's schemas.
#[derive(Clone, Debug, PartialEq)]
pub enum ListedOp<'a> {
    /// Remove the entry.
    Clear,
    /// Set the value.
    Put(TypedBytes<'a>),
    /// Append one list element.
    AddElement(TypedBytes<'a>),
    /// Replace the whole list.
    SetList(Vec<TypedBytes<'a>>),
    /// Insert or replace one map entry.
    MapPut {
        /// The user key.
        user_key: TypedBytes<'a>,
        /// The value.
        value: TypedBytes<'a>,
    },
    /// Remove one map entry (its user key).
    MapRemove(TypedBytes<'a>),
    /// Merge the lists of these namespaces (read by the namespace schema) into the record's
    /// namespace.
    MergeList(Vec<TypedBytes<'a>>),
    /// A read that refreshes TTL stamps.
    Read {
        /// Which read.
        kind: ReadKind,
        /// The user key of a [`ReadKind::MapEntry`] read.
        user_key: Option<TypedBytes<'a>>,
    },
}

impl<'a> ListedChange<'a> {
    /// `c`, in key group `kg`, read by the schemas of `desc` (as bytes without one).
    fn of(kg: u32, c: &'a Change<'a>, desc: Option<&'a StateDescriptor>) -> Self {
        let (ks, ns, vs, uks) = match desc {
            Some(d) => (
                &d.key_schema,
                &d.namespace_schema,
                &d.value_schema,
                d.user_key_schema.as_ref().unwrap_or(&BYTES),
            ),
            None => (&BYTES, &BYTES, &BYTES, &BYTES),
        };
        let typed = |schema: &'a TypeSchema, bytes: &'a [u8]| TypedBytes { schema, bytes };
        let op = match &c.op {
            Op::Clear => ListedOp::Clear,
            Op::Put(v) => ListedOp::Put(typed(vs, v)),
            Op::AddElement(v) => ListedOp::AddElement(typed(vs, v)),
            Op::SetList(items) => ListedOp::SetList(items.iter().map(|i| typed(vs, i)).collect()),
            Op::MapPut { user_key, value } => ListedOp::MapPut {
                user_key: typed(uks, user_key),
                value: typed(vs, value),
            },
            Op::MapRemove(uk) => ListedOp::MapRemove(typed(uks, uk)),
            Op::MergeList(sources) => ListedOp::MergeList(sources.iter().map(|s| typed(ns, s)).collect()),
            Op::Read { kind, user_key } => ListedOp::Read {
                kind: *kind,
                user_key: (*kind == ReadKind::MapEntry).then(|| typed(uks, user_key)),
            },
        };
        ListedChange {
            key_group: kg,
            state_id: c.state,
            state: desc.map(|d| d.name.as_str()),
            key: typed(ks, c.key),
            namespace: typed(ns, c.namespace),
            op_name: c.op.name(),
            op,
            time_ms: c.time,
        }
    }
}

impl Serialize for ChangeRecord<'_> {
    /// The object of `statekit dump --changes --json` (see [`ChangeRecord`]).
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        RecordJson::of(self).serialize(s)
    }
}

/// A [`ChangeRecord`]'s JSON object: its keys in name order (as the tool has always printed
/// them); the parts another kind of record has are left out.
#[derive(Default, Serialize)]
struct RecordJson<'r> {
    #[serde(skip_serializing_if = "Option::is_none")]
    descriptor: Option<StateDescriptorReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    element: Option<TypedBytes<'r>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    elements: Option<&'r [TypedBytes<'r>]>,
    file: &'r str,
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<TypedBytes<'r>>,
    key_group: Option<u32>,
    log: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    namespace: Option<TypedBytes<'r>>,
    offset: u64,
    op: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    read: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sources: Option<&'r [TypedBytes<'r>]>,
    sqn: u64,
    state: Option<&'r str>,
    state_id: u32,
    subtask: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    time_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    user_key: Option<TypedBytes<'r>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<TypedBytes<'r>>,
}

impl<'r> RecordJson<'r> {
    fn of(r: &'r ChangeRecord<'r>) -> Self {
        let o = &r.origin;
        let mut j = RecordJson {
            file: o.file,
            log: o.log.to_string(),
            offset: o.offset,
            sqn: o.sqn,
            subtask: o.subtask,
            ..RecordJson::default()
        };
        match &r.body {
            RecordBody::Metadata { state_id, descriptor } => {
                j.descriptor = Some(StateDescriptorReport::from(*descriptor));
                j.op = "metadata";
                j.state = Some(&descriptor.name);
                j.state_id = *state_id;
            }
            RecordBody::Change(c) => {
                j.key_group = Some(c.key_group);
                j.op = c.op_name;
                j.state = c.state;
                j.state_id = c.state_id;
                j.key = Some(c.key);
                j.namespace = Some(c.namespace);
                j.time_ms = c.time_ms;
                match &c.op {
                    ListedOp::Clear => {}
                    ListedOp::Put(value) => j.value = Some(*value),
                    ListedOp::AddElement(element) => j.element = Some(*element),
                    ListedOp::SetList(elements) => j.elements = Some(elements.as_slice()),
                    ListedOp::MapPut { user_key, value } => {
                        j.user_key = Some(*user_key);
                        j.value = Some(*value);
                    }
                    ListedOp::MapRemove(user_key) => j.user_key = Some(*user_key),
                    ListedOp::MergeList(sources) => j.sources = Some(sources.as_slice()),
                    ListedOp::Read { kind, user_key } => {
                        j.read = Some(kind.name());
                        j.user_key = *user_key;
                    }
                }
            }
        }
        j
    }
}

/// A visitor of listed records; [`ControlFlow::Break`] ends the walk (without an error).
pub type ChangeVisitor<'v> = dyn FnMut(&ChangeRecord<'_>) -> ControlFlow<()> + 'v;

/// Lists the records a filter keeps, each data record read by the state its log's metadata
/// record declared.
struct Lister<'f, 'v> {
    filter: &'f ChangeFilter,
    /// The states declared so far, by log and id.
    declared: HashMap<(LogId, u32), StateDescriptor>,
    visit: &'f mut ChangeVisitor<'v>,
}

impl Lister<'_, '_> {
    /// Lists `rec`, in key group `kg`, when the filter keeps it (declaring its state first when
    /// it is a metadata record); breaks when the visitor wants no more.
    fn list(&mut self, origin: RecordOrigin<'_>, kg: u32, rec: &Record<'_>) -> ControlFlow<()> {
        if let Record::Metadata { state, descriptor } = rec {
            self.declared.insert((origin.log, *state), descriptor.clone());
        }
        let desc = match rec {
            Record::Change(c) => self.declared.get(&(origin.log, c.state)),
            Record::Metadata { .. } => None,
        };
        if !self.filter.keeps(kg, rec, desc) {
            return ControlFlow::Continue(());
        }
        let body = match rec {
            Record::Metadata { state, descriptor } => RecordBody::Metadata {
                state_id: *state,
                descriptor,
            },
            Record::Change(c) => RecordBody::Change(ListedChange::of(kg, c, desc)),
        };
        (self.visit)(&ChangeRecord { origin, body })
    }
}

/// The tails of one operator a walk lists: the key groups walked, its changelog handles by
/// subtask.
struct OperatorTails<'s> {
    uid: &'s str,
    range: KeyGroupRange,
    handles: Vec<ResolvedChangelogHandle>,
}

/// Walks the tail of `h` as a restore of `t`'s key groups replays it ([`walk_tail`]), ending
/// at the first problem.
fn replay(
    h: &ResolvedChangelogHandle,
    t: &OperatorTails<'_>,
    files: &mut LogFiles,
    f: &mut TailVisitor<'_, ChangesError>,
) -> Result<ControlFlow<()>, ChangesError> {
    let fail = &mut |p: TailProblem| Err(ChangesError::Unreadable(p.problem()));
    walk_tail(h, t.uid, t.range, files, &mut TailStats::default(), fail, f)
}

/// Lists the change records of `snapshot`'s tails (of operator `uid` only, when given) that
/// `filter` keeps, in replay order: subtask by subtask, each tail in order, each change set's
/// metadata records first, then its key groups ascending. Every tail the walk reads is decoded
/// and checked first: a damaged file is an error before the first record is listed.
pub fn walk_changes(
    snapshot: &Snapshot,
    uid: Option<&str>,
    filter: &ChangeFilter,
    visit: &mut ChangeVisitor<'_>,
) -> Result<(), ChangesError> {
    let tails = changelog_tails(snapshot, uid, filter)?;
    // First pass: decode everything a restore would replay (errors before any record).
    let mut files = LogFiles::default();
    for t in &tails {
        for h in &t.handles {
            let _ = replay(h, t, &mut files, &mut |_, _, _| Ok(ControlFlow::Continue(())))?;
        }
    }
    // Second pass: list.
    let mut lister = Lister {
        filter,
        declared: HashMap::new(),
        visit,
    };
    for t in &tails {
        for h in &t.handles {
            lister.declared.clear();
            let listed = replay(h, t, &mut files, &mut |pos, kg, rec| {
                let origin = RecordOrigin {
                    subtask: Some(pos.subtask),
                    file: &pos.segment.file.path,
                    offset: pos.offset(),
                    log: pos.log(),
                    sqn: pos.sqn(),
                };
                Ok(lister.list(origin, kg, &rec))
            })?;
            if listed.is_break() {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// The operators of `snapshot` whose tails a walk lists (operator `uid` only, when given),
/// each with the key groups `filter` asks for and its changelog handles by subtask.
fn changelog_tails<'s>(
    snapshot: &'s Snapshot,
    uid: Option<&str>,
    filter: &ChangeFilter,
) -> Result<Vec<OperatorTails<'s>>, ChangesError> {
    let m = snapshot.metadata();
    let ops: Vec<&OperatorMetadata> = m
        .operators
        .iter()
        .filter(|o| uid.is_none_or(|u| u == o.uid))
        .filter(|o| o.subtasks.iter().any(|s| s.keyed.changelog().is_some()))
        .collect();
    let none = || ChangesError::NoChangelogState {
        uid: uid.map(str::to_string),
        format: m.format.as_str().to_string(),
    };
    let files = snapshot.statekit_files();
    if ops.is_empty() {
        // An operator that is not there is named as such.
        if let Some(u) = uid {
            match files {
                Some(r) => r.operator(u).map(|_| ())?,
                None => snapshot.operator(u).map(|_| ())?,
            }
        }
        return Err(none());
    }
    let files = files.ok_or_else(none)?;
    ops.into_iter()
        .map(|o| {
            let range = tail_range(o, filter)?;
            let mut handles = files.changelog_handles(&o.uid, range)?;
            handles.sort_by_key(|h| h.subtask);
            Ok(OperatorTails {
                uid: &o.uid,
                range,
                handles,
            })
        })
        .collect()
}

/// The key groups of `o` that `filter` asks for (those of its key, when it names one).
fn tail_range(o: &OperatorMetadata, filter: &ChangeFilter) -> Result<KeyGroupRange, ChangesError> {
    let mut range = KeyGroupRange::all(o.max_parallelism);
    if let Some(r) = filter.key_groups {
        if r.end_exclusive() > o.max_parallelism {
            return Err(ChangesError::NoSuchKeyGroup {
                uid: o.uid.clone(),
                key_group: r.end_exclusive() - 1,
                max_parallelism: o.max_parallelism,
            });
        }
        range = range.intersection(&r);
    }
    if let Some(k) = &filter.key {
        // Placed by the operator's key-group scheme (recorded with its data), read with the
        // state's key schema; a key the scheme cannot place is looked for in every key group.
        let schema = filter
            .state
            .as_deref()
            .and_then(|s| o.keyed_states.iter().find(|d| d.name == s))
            .map_or(&TypeSchema::Bytes, |d| &d.key_schema);
        if let Ok(kg) = o.key_group_scheme.key_group(k, schema, o.max_parallelism) {
            range = range.intersection(&KeyGroupRange::new(kg, kg));
        }
    }
    Ok(range)
}

/// Whether `location` names a lone changelog log file rather than a snapshot: an object named
/// `*.skcl` (not fetched to look at it), or a local regular file named so or starting with a
/// log file's magic.
pub fn is_log_file(location: &Location) -> bool {
    let path = match location {
        Location::Stored { .. } => return location.file_name().is_some_and(|n| n.ends_with(".skcl")),
        Location::Local(path) => path,
    };
    if !path.is_file() {
        return false;
    }
    if path.extension().is_some_and(|e| e == "skcl") {
        return true;
    }
    use std::io::Read;
    let mut magic = [0u8; 4];
    statekit_core::storage::open_regular_file(path)
        .ok()
        .is_some_and(|(mut f, _)| f.read_exact(&mut magic).is_ok() && magic == statekit_changelog::file::FILE_MAGIC)
}

/// Maps the log file at `location`: mapped, not read, so a huge file that is not a log file
/// costs nothing before its magic is checked.
pub fn map_log_file(location: &Location) -> Result<Arc<dyn Blob>, ChangesError> {
    let path = match location {
        Location::Stored { .. } => {
            let (storage, key) = location.storage_and_path()?;
            return Ok(storage.open(&key)?);
        }
        Location::Local(path) => path,
    };
    let (dir, name) = match (path.parent(), path.file_name()) {
        (Some(d), Some(n)) => (if d.as_os_str().is_empty() { Path::new(".") } else { d }, n),
        _ => {
            return Err(ChangesError::NotAFile {
                path: path.display().to_string(),
            })
        }
    };
    Ok(LocalStorage::new(dir).open(&name.to_string_lossy())?)
}

/// Its size when the file at `location` is a prepared log file not yet written (all zeros): a
/// spare of a running job's upload service, or an orphan a crash left.
pub fn unwritten_prepared(location: &Location) -> Result<Option<u64>, ChangesError> {
    let blob = map_log_file(location)?;
    let b = blob.bytes();
    Ok(is_unwritten_prepared(b).then_some(b.len() as u64))
}

/// Decodes the lone log file at `location` (named `shown` in problems) in full: what was read
/// and every problem ([`statekit_changelog::verify::verify_log_file`]).
pub fn verify_log_file(location: &Location, shown: &str) -> Result<(LogCheck, Vec<Problem>), ChangesError> {
    Ok(statekit_changelog::verify::verify_log_file(
        map_log_file(location)?,
        shown,
    ))
}

/// Lists the change records of the lone log file at `location` (named `shown`) that `filter`
/// keeps, in file order; a prepared spare has none. The file is checked whole first.
pub fn walk_log_file_changes(
    location: &Location,
    shown: &str,
    filter: &ChangeFilter,
    visit: &mut ChangeVisitor<'_>,
) -> Result<(), ChangesError> {
    let blob = map_log_file(location)?;
    if is_unwritten_prepared(blob.bytes()) {
        return Ok(());
    }
    let reader = LogFileReader::from_blob(blob, shown, None).map_err(unreadable)?;
    reader.verify().map_err(unreadable)?;
    let mut lister = Lister {
        filter,
        declared: HashMap::new(),
        visit,
    };
    for e in reader.index() {
        let data = reader.read(e).map_err(unreadable)?;
        let origin = RecordOrigin {
            subtask: None,
            file: shown,
            offset: e.offset,
            log: e.log,
            sqn: e.sqn,
        };
        let listed = data.visit_records(filter.key_groups.as_ref(), &mut |kg, rec| {
            Ok::<_, Infallible>(lister.list(origin, kg, &rec))
        });
        match listed {
            Ok(ControlFlow::Continue(())) => {}
            Ok(ControlFlow::Break(())) => return Ok(()),
            Err(RecordsError::Decode(e)) => return Err(unreadable(e)),
            Err(RecordsError::Visitor(never)) => match never {},
        }
    }
    Ok(())
}

/// The key schema of state `state` as the first metadata record of the lone log file at
/// `location` (named `shown`) that declares it says.
pub fn declared_key_schema(location: &Location, shown: &str, state: &str) -> Result<TypeSchema, ChangesError> {
    let reader = LogFileReader::from_blob(map_log_file(location)?, shown, None).map_err(unreadable)?;
    for e in reader.index().iter().filter(|e| e.has_meta) {
        let data = reader.read(e).map_err(unreadable)?;
        let mut found = None;
        // An empty range: the metadata records only.
        data.for_each_record(Some(&KeyGroupRange::EMPTY), &mut |_, rec| {
            if let Record::Metadata { descriptor, .. } = rec {
                if descriptor.name == state && found.is_none() {
                    found = Some(descriptor.key_schema);
                }
            }
            Ok(())
        })
        .map_err(unreadable)?;
        if let Some(s) = found {
            return Ok(s);
        }
    }
    Err(ChangesError::UndeclaredState {
        file: shown.to_string(),
        state: state.to_string(),
    })
}

/// The key schema of keyed state `state` of `snapshot` (of operator `uid` only, when given;
/// the first operator that has one otherwise), as `_metadata` declares it.
pub fn key_schema(snapshot: &Snapshot, uid: Option<&str>, state: &str) -> Result<TypeSchema, ChangesError> {
    snapshot
        .metadata()
        .operators
        .iter()
        .filter(|o| uid.is_none_or(|u| u == o.uid))
        .flat_map(|o| &o.keyed_states)
        .find(|d| d.name == state)
        .map(|d| d.key_schema.clone())
        .ok_or_else(|| ChangesError::NoKeyedState {
            state: state.to_string(),
        })
}
