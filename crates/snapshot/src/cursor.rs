//! [`EntryCursor`]: the entries of one keyed state of an opened snapshot, walked, paged and
//! searched in key-group order, with damage reported per key group.
//!
//! Every entry has a [`Position`]: its key group, and its index among the entries of the
//! state that pass the cursor's [`EntryFilter`] in that key group. A cursor can be placed at
//! any position ([`EntryCursor::seek`]) and reads from there:
//!
//! * [`EntryCursor::walk`] streams every entry up to the end of the cursor's key groups
//!   (what `statekit dump` prints);
//! * [`EntryCursor::next_page`] and [`EntryCursor::page_before`] read pages (what the
//!   inspector shows); the pages forward are read ahead on a thread of their own, so a next
//!   page continues where the last one ended instead of reading its key group again;
//! * [`EntryCursor::find`] and [`EntryCursor::find_key`] search.
//!
//! A key group whose bytes are damaged (an error of kind [`ErrorKind::Corrupt`]) hides only
//! itself: a walk or a page reports it as a [`DamagedKeyGroup`] (its entries read before the
//! damage are kept) and goes on with the next key group. Any other error ends the read.
//!
//! ```no_run
//! use statekit_snapshot::cursor::{EntryCursor, EntryFilter, Walked};
//! use statekit_snapshot::Snapshot;
//! use std::ops::ControlFlow;
//!
//! let snapshot = Snapshot::open("savepoint")?;
//! let mut cursor = EntryCursor::open(&snapshot, "counter", "count", EntryFilter::default())?;
//! cursor.walk(&mut |w| {
//!     match w {
//!         Walked::Entry(e) => println!("kg={} key={:?} value={:?}", e.position.key_group, e.key, e.value),
//!         Walked::Damaged(d) => eprintln!("{d}"),
//!         Walked::KeyGroupDone(_) => {}
//!     }
//!     ControlFlow::Continue(())
//! })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::error::SnapshotError;
use crate::open::Snapshot;
use statekit_core::{
    ErrorKind, KeyGroupRange, KeyGroupScheme, KeyedStateKind, KeyedStateView, StateDescriptor, StateError, TypeSchema,
};
use std::collections::VecDeque;
use std::ops::{ControlFlow, Range};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::sync::Arc;
use std::time::Duration;

/// Where an entry is: its key group, and its index among the entries of the state that pass
/// the filter in that key group.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    /// Key group.
    pub key_group: u32,
    /// Index within the key group.
    pub index: u64,
}

impl Position {
    /// The first entry.
    pub const START: Position = Position { key_group: 0, index: 0 };

    /// The position just after this one in its key group.
    pub fn next(&self) -> Position {
        Position {
            key_group: self.key_group,
            index: self.index.saturating_add(1),
        }
    }
}

/// One entry of the state, its parts as stored (serialized by the state's schemas).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CursorEntry {
    /// Where it is.
    pub position: Position,
    /// Key bytes.
    pub key: Vec<u8>,
    /// Namespace bytes.
    pub namespace: Vec<u8>,
    /// Map user key bytes (map states).
    pub user_key: Option<Vec<u8>>,
    /// Value, list element or map value bytes.
    pub value: Vec<u8>,
    /// TTL timestamp (ms), for states with TTL.
    pub ttl_timestamp: Option<i64>,
    /// A list element's index in its list (list states).
    pub element: Option<u64>,
}

/// One entry as a walk sees it: its parts borrowed from the reader (copy it with
/// [`EntryRef::to_entry`] to keep it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryRef<'a> {
    /// Where it is.
    pub position: Position,
    /// Key bytes.
    pub key: &'a [u8],
    /// Namespace bytes.
    pub namespace: &'a [u8],
    /// Map user key bytes (map states).
    pub user_key: Option<&'a [u8]>,
    /// Value, list element or map value bytes.
    pub value: &'a [u8],
    /// TTL timestamp (ms), for states with TTL.
    pub ttl_timestamp: Option<i64>,
    /// A list element's index in its list (list states).
    pub element: Option<u64>,
}

impl EntryRef<'_> {
    /// The entry, owned.
    pub fn to_entry(&self) -> CursorEntry {
        CursorEntry {
            position: self.position.clone(),
            key: self.key.to_vec(),
            namespace: self.namespace.to_vec(),
            user_key: self.user_key.map(<[u8]>::to_vec),
            value: self.value.to_vec(),
            ttl_timestamp: self.ttl_timestamp,
            element: self.element,
        }
    }
}

/// A test on entries: the state's descriptor (as the file holding the entry describes it)
/// and the entry.
pub type EntryPredicate = Arc<dyn Fn(&StateDescriptor, &EntryRef<'_>) -> bool + Send + Sync>;

/// Which entries of the state a cursor reads. Positions count the entries that pass it.
#[derive(Clone, Default)]
pub struct EntryFilter {
    /// Only these key groups (all of the operator's when `None`).
    pub key_groups: Option<KeyGroupRange>,
    /// Only this key (serialized); [`EntryCursor::open`] reads only its key group.
    pub key: Option<Vec<u8>>,
    /// Only this namespace (serialized).
    pub namespace: Option<Vec<u8>>,
    /// Only entries this accepts.
    pub matches: Option<EntryPredicate>,
}

impl std::fmt::Debug for EntryFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EntryFilter")
            .field("key_groups", &self.key_groups)
            .field("key", &self.key)
            .field("namespace", &self.namespace)
            .field("matches", &self.matches.as_ref().map(|_| "…"))
            .finish()
    }
}

impl EntryFilter {
    fn accepts(&self, desc: &StateDescriptor, e: &EntryRef<'_>) -> bool {
        self.key.as_deref().is_none_or(|k| k == e.key)
            && self.namespace.as_deref().is_none_or(|ns| ns == e.namespace)
            && self.matches.as_ref().is_none_or(|m| m(desc, e))
    }
}

/// A key group that could not be read: its bytes are damaged. Its error names the file,
/// offset and field.
#[derive(Clone, Debug, thiserror::Error)]
#[error("key group {key_group}: {error}")]
pub struct DamagedKeyGroup {
    /// The key group.
    pub key_group: u32,
    /// What is wrong with it.
    #[source]
    pub error: Arc<StateError>,
}

/// What a walk hands out, in key-group order.
#[derive(Debug)]
pub enum Walked<'a> {
    /// An entry.
    Entry(EntryRef<'a>),
    /// A key group could not be read (entries of it before the damage were handed out);
    /// the walk goes on with the next key group.
    Damaged(DamagedKeyGroup),
    /// Every entry of this key group was handed out.
    KeyGroupDone(u32),
}

/// A page of entries.
#[derive(Clone, Debug)]
pub struct EntryPage {
    /// The position of its first entry (of where it was asked to start, when empty).
    pub start: Position,
    /// The entries.
    pub entries: Vec<CursorEntry>,
    /// Whether entries may follow it.
    pub more: bool,
    /// Key groups on the way that could not be read: the page holds the entries around them.
    pub damaged: Vec<DamagedKeyGroup>,
}

/// Which way a search goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// After the position, wrapping to the start.
    Next,
    /// Before the position, wrapping to the end.
    Prev,
}

/// What a search found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// The entry's position.
    pub position: Position,
    /// Whether the search wrapped around (past the end, or before the start).
    pub wrapped: bool,
}

/// Someone waiting for a read: asked whether to go on, told how far it got.
pub trait Watch {
    /// True to stop the read ([`CursorError::Cancelled`]); asked before each key group and
    /// while a page waits for entries.
    fn cancelled(&mut self) -> bool {
        false
    }
    /// `done` key groups of the read are behind it (counted from where it started; for a
    /// page backwards, from its end; for a search, the key group reached).
    fn progress(&mut self, done: u64) {
        let _ = done;
    }
}

/// Never cancelled, no progress shown.
impl Watch for () {}

/// Errors of opening and reading a cursor.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CursorError {
    /// The snapshot's views could not be opened.
    #[error(transparent)]
    Snapshot(Box<SnapshotError>),
    /// Reading entries failed (not damage: an I/O error, a missing file, …).
    #[error(transparent)]
    State(#[from] StateError),
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
    /// The operator has no keyed state of that name.
    #[error("operator {uid:?} has no keyed state {state:?} (keyed states: {known:?})")]
    NoSuchState {
        /// The operator.
        uid: String,
        /// The state asked for.
        state: String,
        /// Its keyed states.
        known: Vec<String>,
    },
    /// A search ran into a damaged key group.
    #[error(transparent)]
    Damaged(#[from] DamagedKeyGroup),
    /// The [`Watch`] stopped the read.
    #[error("the read was cancelled")]
    Cancelled,
    /// The thread that reads pages ahead could not be started.
    #[error("starting a reader thread: {source}")]
    Thread {
        /// The cause.
        source: std::io::Error,
    },
    /// The thread that reads pages ahead ended without saying why.
    #[error("the reader thread ended unexpectedly")]
    ReaderGone,
}

impl From<SnapshotError> for CursorError {
    fn from(e: SnapshotError) -> Self {
        CursorError::Snapshot(Box::new(e))
    }
}

impl CursorError {
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            CursorError::Snapshot(e) => e.kind(),
            CursorError::State(e) => e.kind(),
            CursorError::NoSuchKeyGroup { .. } => ErrorKind::Caller,
            CursorError::NoSuchState { .. } => ErrorKind::NotFound,
            CursorError::Damaged(_) => ErrorKind::Corrupt,
            CursorError::Cancelled => ErrorKind::Caller,
            CursorError::Thread { source } => ErrorKind::of_io(source),
            CursorError::ReaderGone => ErrorKind::Internal,
        }
    }
}

impl statekit_core::HasErrorKind for CursorError {
    fn kind(&self) -> ErrorKind {
        CursorError::kind(self)
    }
}

/// The key group `key` (serialized as `key_schema` says) is in under `scheme`, the rule the
/// operator's data was placed by (recorded with it: Flink's for state from Apache Flink):
/// the one place the cursor computes a key's key group. `None` when the rule cannot place
/// keys of that type.
fn key_group_of(scheme: KeyGroupScheme, key: &[u8], key_schema: &TypeSchema, max_parallelism: u32) -> Option<u32> {
    scheme.assigner(key_schema, max_parallelism).key_group(key).ok()
}

/// The keyed state of one operator, opened as views (one per subtask, in key-group order):
/// the cursors over its states share them.
#[derive(Clone)]
pub struct KeyedEntries {
    uid: String,
    max_parallelism: u32,
    scheme: KeyGroupScheme,
    range: KeyGroupRange,
    views: Arc<Vec<Box<dyn KeyedStateView>>>,
}

impl std::fmt::Debug for KeyedEntries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedEntries")
            .field("uid", &self.uid)
            .field("max_parallelism", &self.max_parallelism)
            .field("scheme", &self.scheme)
            .field("range", &self.range)
            .field("views", &self.views.len())
            .finish()
    }
}

impl KeyedEntries {
    /// Opens the keyed state of operator `uid` in key groups `range`
    /// ([`Snapshot::keyed_views`]: whatever the family and the form the state is stored in).
    pub fn open(snapshot: &Snapshot, uid: &str, range: KeyGroupRange) -> Result<Self, CursorError> {
        let op = snapshot.operator(uid)?;
        let (max_parallelism, scheme) = (op.max_parallelism, op.key_group_scheme);
        let views = snapshot.keyed_views(uid, range)?;
        Ok(KeyedEntries {
            uid: uid.to_string(),
            max_parallelism,
            scheme,
            range: range.intersection(&KeyGroupRange::all(max_parallelism)),
            views: Arc::new(views),
        })
    }

    /// The operator.
    pub fn uid(&self) -> &str {
        &self.uid
    }

    /// The operator's max parallelism (its number of key groups).
    pub fn max_parallelism(&self) -> u32 {
        self.max_parallelism
    }

    /// The descriptor of keyed state `state`, as the first file holding it describes it.
    pub fn descriptor(&self, state: &str) -> Option<&StateDescriptor> {
        descriptor(&self.views, state)
    }

    /// A cursor over the entries of `state` that pass `filter`, at the first of them. Its key
    /// groups are those opened, narrowed by the filter's.
    pub fn cursor(&self, state: &str, filter: EntryFilter) -> EntryCursor {
        let range = match filter.key_groups {
            Some(r) => r.intersection(&self.range),
            None => self.range,
        };
        EntryCursor {
            views: self.views.clone(),
            state: state.to_string(),
            filter,
            range,
            max_parallelism: self.max_parallelism,
            scheme: self.scheme,
            next: Position::START,
            stream: None,
        }
    }
}

fn descriptor<'v>(views: &'v [Box<dyn KeyedStateView>], state: &str) -> Option<&'v StateDescriptor> {
    views.iter().flat_map(|v| v.states()).find(|d| d.name == state)
}

/// Rows the read-ahead thread of [`EntryCursor::next_page`] may hold ahead of the pages.
const STREAM_DEPTH: usize = 256;

/// The entries of one keyed state: seekable, filtered, read as a walk, as pages or by search
/// (see the [module docs](self)).
pub struct EntryCursor {
    views: Arc<Vec<Box<dyn KeyedStateView>>>,
    state: String,
    filter: EntryFilter,
    /// The key groups read.
    range: KeyGroupRange,
    max_parallelism: u32,
    /// The rule the operator's keys were placed by.
    scheme: KeyGroupScheme,
    /// Where the next walk or page forward starts.
    next: Position,
    /// The read ahead of the last page forward, held for the next.
    stream: Option<Stream>,
}

impl std::fmt::Debug for EntryCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EntryCursor")
            .field("state", &self.state)
            .field("filter", &self.filter)
            .field("range", &self.range)
            .field("next", &self.next)
            .finish_non_exhaustive()
    }
}

/// A read ahead: a thread visits the key groups in order and hands the entries over a
/// bounded channel; dropping it ends the thread at its next entry.
struct Stream {
    /// The position of the next entry it hands out.
    resume: Position,
    /// An entry received and not yet handed out.
    peeked: Option<CursorEntry>,
    rx: Receiver<Streamed>,
}

/// What the read-ahead thread sends.
enum Streamed {
    Entry(CursorEntry),
    KeyGroup(u32),
    /// The last key group is done.
    End,
    Failed(CursorError),
    Damaged(DamagedKeyGroup),
}

impl EntryCursor {
    /// A cursor over the entries of keyed state `state` of operator `uid` that pass
    /// `filter`, at the first of them. Only the key groups of the filter are opened, and
    /// with a key only the key's key group (as the snapshot places keys).
    pub fn open(snapshot: &Snapshot, uid: &str, state: &str, filter: EntryFilter) -> Result<Self, CursorError> {
        let op = snapshot.operator(uid)?;
        let max_parallelism = op.max_parallelism;
        let Some(desc) = op.keyed_states.iter().find(|d| d.name == state) else {
            return Err(CursorError::NoSuchState {
                uid: op.uid.clone(),
                state: state.to_string(),
                known: op.keyed_states.iter().map(|d| d.name.clone()).collect(),
            });
        };
        let mut range = KeyGroupRange::all(max_parallelism);
        if let Some(kgs) = filter.key_groups {
            if kgs.end_exclusive() > max_parallelism {
                return Err(CursorError::NoSuchKeyGroup {
                    uid: op.uid.clone(),
                    key_group: kgs.end_exclusive().saturating_sub(1),
                    max_parallelism,
                });
            }
            range = kgs;
        }
        if let Some(kg) = filter
            .key
            .as_ref()
            .and_then(|k| key_group_of(op.key_group_scheme, k, &desc.key_schema, max_parallelism))
        {
            range = range.intersection(&KeyGroupRange::new(kg, kg));
        }
        Ok(KeyedEntries::open(snapshot, uid, range)?.cursor(state, filter))
    }

    /// The key groups the cursor reads.
    pub fn key_groups(&self) -> KeyGroupRange {
        self.range
    }

    /// The state's descriptor, as the first file holding it describes it (`None`: no file
    /// holds the state).
    pub fn descriptor(&self) -> Option<&StateDescriptor> {
        descriptor(&self.views, &self.state)
    }

    /// Where the next walk or page forward starts.
    pub fn position(&self) -> &Position {
        &self.next
    }

    /// Places the cursor at `to` (the entry there is read next). A page read ahead that
    /// ends at `to` is kept.
    pub fn seek(&mut self, to: Position) {
        self.next = to;
    }

    /// Places the cursor at the first entry of `key_group`.
    pub fn seek_key_group(&mut self, key_group: u32) {
        self.seek(Position { key_group, index: 0 });
    }

    /// The key groups at or after `from`, up to `to` (excluded), that the cursor reads.
    fn key_groups_in(&self, from: u32, to: u32) -> Range<u32> {
        key_groups_in(self.range, from, to)
    }

    /// Calls `f` with every entry from the cursor's position to the end of its key groups,
    /// in order, and with each damaged key group (then goes on), until `f` breaks. The
    /// cursor is left after the last entry handed out. Errors other than damage end the walk.
    pub fn walk(&mut self, f: &mut dyn FnMut(Walked<'_>) -> ControlFlow<()>) -> Result<ControlFlow<()>, CursorError> {
        let kgs = self.key_groups_in(self.next.key_group, u32::MAX);
        let mut next = self.next.clone();
        let r = walk_from(&self.views, &self.state, &self.filter, kgs, &self.next, &mut |w| {
            match &w {
                Walked::Entry(e) => next = e.position.next(),
                Walked::KeyGroupDone(kg) => {
                    next = Position {
                        key_group: kg.saturating_add(1),
                        index: 0,
                    }
                }
                Walked::Damaged(_) => {}
            }
            f(w)
        });
        self.next = next;
        r
    }

    /// The page of at most `size` entries starting at the cursor's position; the cursor is
    /// left after it. The entries are read ahead on a thread: the next page, when the cursor
    /// was not moved elsewhere, continues without reading anything again.
    pub fn next_page(&mut self, size: usize, watch: &mut dyn Watch) -> Result<EntryPage, CursorError> {
        let size = size.max(1);
        let from = self.next.clone();
        let mut st = match self.stream.take() {
            Some(st) if st.resume == from => st,
            _ => self.start_stream(&from)?,
        };
        let mut entries: Vec<CursorEntry> = Vec::with_capacity(size);
        entries.extend(st.peeked.take());
        let mut more = false;
        let mut damaged = Vec::new();
        loop {
            if watch.cancelled() {
                // The entries taken so far are lost with the read ahead: the next page
                // starts afresh.
                return Err(CursorError::Cancelled);
            }
            match st.rx.recv_timeout(Duration::from_millis(50)) {
                Ok(Streamed::Entry(e)) if entries.len() == size => {
                    st.peeked = Some(e);
                    more = true;
                    break;
                }
                Ok(Streamed::Entry(e)) => entries.push(e),
                Ok(Streamed::KeyGroup(kg)) => {
                    watch.progress(u64::from(kg.saturating_add(1).saturating_sub(from.key_group)))
                }
                Ok(Streamed::End) => break,
                Ok(Streamed::Failed(e)) => return Err(e),
                Ok(Streamed::Damaged(d)) => damaged.push(d),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return Err(CursorError::ReaderGone),
            }
        }
        if let Some(last) = entries.last() {
            self.next = last.position.next();
        }
        if more {
            st.resume = self.next.clone();
            self.stream = Some(st);
        }
        Ok(EntryPage {
            start: from,
            entries,
            more,
            damaged,
        })
    }

    /// Starts reading ahead from `from`.
    fn start_stream(&self, from: &Position) -> Result<Stream, CursorError> {
        let (tx, rx) = std::sync::mpsc::sync_channel(STREAM_DEPTH);
        let (views, state, filter) = (self.views.clone(), self.state.clone(), self.filter.clone());
        let kgs = self.key_groups_in(from.key_group, u32::MAX);
        let start = from.clone();
        std::thread::Builder::new()
            .name("statekit-entry-cursor".into())
            .spawn(move || read_ahead(&views, &state, &filter, kgs, &start, &tx))
            .map_err(|source| CursorError::Thread { source })?;
        Ok(Stream {
            resume: from.clone(),
            peeked: None,
            rx,
        })
    }

    /// The page of at most `size` entries that ends just before `end` (`None`: the last
    /// page). At most `size` entries are held at any time. The cursor does not move.
    pub fn page_before(
        &mut self,
        end: Option<&Position>,
        size: usize,
        watch: &mut dyn Watch,
    ) -> Result<EntryPage, CursorError> {
        let n = self.max_parallelism;
        let size = size.max(1);
        let end_at = end.cloned().unwrap_or(Position { key_group: n, index: 0 });
        let mut acc: VecDeque<CursorEntry> = VecDeque::with_capacity(size);
        let mut damaged = Vec::new();
        let mut kg = end_at.key_group.min(n);
        loop {
            if kg < n && self.range.contains(kg) {
                if watch.cancelled() {
                    return Err(CursorError::Cancelled);
                }
                watch.progress(u64::from(end_at.key_group.min(n) - kg));
                let limit = if kg == end_at.key_group { end_at.index } else { u64::MAX };
                // A ring of the key group's last entries before `limit`, then the page.
                let mut ring: VecDeque<CursorEntry> = VecDeque::new();
                let want = size - acc.len();
                let r = visit(&self.views, &self.state, &self.filter, kg, &mut |e| {
                    if e.position.index >= limit {
                        return ControlFlow::Break(());
                    }
                    if ring.len() == want {
                        ring.pop_front();
                    }
                    ring.push_back(e.to_entry());
                    ControlFlow::Continue(())
                });
                match r {
                    Ok(_) => {}
                    // The key group's entries before the damage are kept; it is named.
                    Err(CursorError::Damaged(d)) => damaged.push(d),
                    Err(e) => return Err(e),
                }
                while let Some(r) = ring.pop_back() {
                    acc.push_front(r);
                }
            }
            if acc.len() == size || kg == 0 || kg <= self.range.start() {
                break;
            }
            kg -= 1;
        }
        let entries: Vec<CursorEntry> = acc.into_iter().collect();
        let start = entries.first().map(|e| e.position.clone()).unwrap_or(Position::START);
        Ok(EntryPage {
            start,
            entries,
            more: end.is_some(),
            damaged,
        })
    }

    /// The position of the entry of key `key` (serialized), looked up in its key group
    /// only (as the snapshot places keys); `None` when it is not there, or when the
    /// snapshot's rule cannot place keys of the state's key type. A damaged key group is
    /// an error ([`CursorError::Damaged`]).
    pub fn find_key(&mut self, key: &[u8]) -> Result<Option<Position>, CursorError> {
        let Some(desc) = self.descriptor() else {
            return Ok(None);
        };
        let Some(kg) = key_group_of(self.scheme, key, &desc.key_schema, self.max_parallelism) else {
            return Ok(None);
        };
        if !self.range.contains(kg) {
            return Ok(None);
        }
        let mut found = None;
        // Stopped at the key, or the key group ended without it.
        let _ = visit(&self.views, &self.state, &self.filter, kg, &mut |e| {
            if e.key == key {
                found = Some(e.position.clone());
                return ControlFlow::Break(());
            }
            ControlFlow::Continue(())
        })?;
        Ok(found)
    }

    /// The next entry after `from` (or the previous one before it) that `matches` accepts,
    /// wrapping around the cursor's key groups once. A damaged key group on the way is an
    /// error ([`CursorError::Damaged`]). The cursor does not move.
    pub fn find(
        &mut self,
        from: &Position,
        direction: Direction,
        matches: &dyn Fn(&EntryRef<'_>) -> bool,
        watch: &mut dyn Watch,
    ) -> Result<Option<Found>, CursorError> {
        let n = self.max_parallelism;
        let after = self.key_groups_in(from.key_group, n);
        let before = self.key_groups_in(0, from.key_group.saturating_add(1).min(n));
        let mut found: Option<Position> = None;
        // The first scan finds without wrapping; the second wraps.
        let wrapped = match direction {
            Direction::Next => {
                self.scan(after.clone(), matches, watch, &mut |e| {
                    if e.position > *from {
                        found = Some(e.position.clone());
                        false
                    } else {
                        true
                    }
                })?;
                found.is_none() && {
                    self.scan(before, matches, watch, &mut |e| {
                        if e.position <= *from {
                            found = Some(e.position.clone());
                        }
                        false
                    })?;
                    true
                }
            }
            Direction::Prev => {
                self.scan(before, matches, watch, &mut |e| {
                    if e.position < *from {
                        found = Some(e.position.clone());
                        true
                    } else {
                        false
                    }
                })?;
                found.is_none() && {
                    self.scan(after, matches, watch, &mut |e| {
                        if e.position >= *from {
                            found = Some(e.position.clone());
                        }
                        true
                    })?;
                    true
                }
            }
        };
        Ok(found.map(|position| Found { position, wrapped }))
    }

    /// Calls `hit` with every entry of key groups `kgs` that `matches` accepts, until it
    /// returns false (then returns false).
    fn scan(
        &self,
        kgs: Range<u32>,
        matches: &dyn Fn(&EntryRef<'_>) -> bool,
        watch: &mut dyn Watch,
        hit: &mut dyn FnMut(&EntryRef<'_>) -> bool,
    ) -> Result<bool, CursorError> {
        for kg in kgs {
            if watch.cancelled() {
                return Err(CursorError::Cancelled);
            }
            watch.progress(u64::from(kg));
            let r = visit(&self.views, &self.state, &self.filter, kg, &mut |e| {
                if !matches(&e) || hit(&e) {
                    ControlFlow::Continue(())
                } else {
                    ControlFlow::Break(())
                }
            })?;
            if r.is_break() {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// The key groups of `range` at or after `from` and before `to`.
fn key_groups_in(range: KeyGroupRange, from: u32, to: u32) -> Range<u32> {
    if range.is_empty() {
        return 0..0;
    }
    from.max(range.start())..to.min(range.end_exclusive())
}

/// The read-ahead thread: every entry from `start` on, over `tx`, until the receiver is gone.
fn read_ahead(
    views: &[Box<dyn KeyedStateView>],
    state: &str,
    filter: &EntryFilter,
    kgs: Range<u32>,
    start: &Position,
    tx: &SyncSender<Streamed>,
) {
    let r = walk_from(views, state, filter, kgs, start, &mut |w| {
        let msg = match w {
            Walked::Entry(e) => Streamed::Entry(e.to_entry()),
            Walked::Damaged(d) => Streamed::Damaged(d),
            Walked::KeyGroupDone(kg) => Streamed::KeyGroup(kg),
        };
        // The page reader is gone: stop.
        match tx.send(msg) {
            Ok(()) => ControlFlow::Continue(()),
            Err(_) => ControlFlow::Break(()),
        }
    });
    let _ = match r {
        Ok(ControlFlow::Continue(())) => tx.send(Streamed::End),
        Ok(ControlFlow::Break(())) => Ok(()),
        Err(e) => tx.send(Streamed::Failed(e)),
    };
}

/// Walks key groups `kgs` from `start` (entries of `start`'s key group before its index
/// skipped): entries, each key group done, each damaged key group.
fn walk_from(
    views: &[Box<dyn KeyedStateView>],
    state: &str,
    filter: &EntryFilter,
    kgs: Range<u32>,
    start: &Position,
    f: &mut dyn FnMut(Walked<'_>) -> ControlFlow<()>,
) -> Result<ControlFlow<()>, CursorError> {
    for kg in kgs {
        let skip = if kg == start.key_group { start.index } else { 0 };
        let r = visit(views, state, filter, kg, &mut |e| {
            if e.position.index < skip {
                return ControlFlow::Continue(());
            }
            f(Walked::Entry(e))
        });
        let done = match r {
            Ok(ControlFlow::Continue(())) => Walked::KeyGroupDone(kg),
            Ok(ControlFlow::Break(())) => return Ok(ControlFlow::Break(())),
            // Damaged bytes hide only their key group: the walk goes on.
            Err(CursorError::Damaged(d)) => Walked::Damaged(d),
            Err(e) => return Err(e),
        };
        if f(done).is_break() {
            return Ok(ControlFlow::Break(()));
        }
    }
    Ok(ControlFlow::Continue(()))
}

/// Calls `f` with every entry of `state` in key group `kg` that passes `filter`, in
/// canonical order, numbered within the key group, until it breaks. A key group whose bytes
/// are damaged is [`CursorError::Damaged`] (after its entries before the damage).
fn visit(
    views: &[Box<dyn KeyedStateView>],
    state: &str,
    filter: &EntryFilter,
    kg: u32,
    f: &mut dyn FnMut(EntryRef<'_>) -> ControlFlow<()>,
) -> Result<ControlFlow<()>, CursorError> {
    let mut index = 0u64;
    for view in views.iter().filter(|v| v.key_group_range().contains(kg)) {
        let Some((idx, desc)) = view.states().iter().enumerate().find(|(_, d)| d.name == state) else {
            continue;
        };
        let idx = idx as u32;
        let is_list = desc.kind == KeyedStateKind::List;
        let mut element = 0u64;
        let mut last: Option<(Vec<u8>, Vec<u8>)> = None;
        let r = view.visit_key_group(kg, &mut |e| {
            if e.state != idx {
                return Ok(ControlFlow::Continue(()));
            }
            let same = last
                .as_ref()
                .is_some_and(|(k, ns)| k.as_slice() == e.key && ns.as_slice() == e.namespace);
            if !same {
                element = 0;
                last = Some((e.key.to_vec(), e.namespace.to_vec()));
            }
            let entry = EntryRef {
                position: Position { key_group: kg, index },
                key: e.key,
                namespace: e.namespace,
                user_key: e.user_key,
                value: e.value,
                ttl_timestamp: e.timestamp,
                element: is_list.then_some(element),
            };
            element += 1;
            if !filter.accepts(desc, &entry) {
                return Ok(ControlFlow::Continue(()));
            }
            index += 1;
            Ok(f(entry))
        });
        match r {
            Ok(ControlFlow::Continue(())) => {}
            Ok(ControlFlow::Break(())) => return Ok(ControlFlow::Break(())),
            Err(e) if e.kind() == ErrorKind::Corrupt => {
                return Err(CursorError::Damaged(DamagedKeyGroup {
                    key_group: kg,
                    error: Arc::new(e),
                }))
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(ControlFlow::Continue(()))
}
