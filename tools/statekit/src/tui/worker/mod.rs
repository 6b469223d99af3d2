//! The worker: every read beyond `_metadata` happens here, off the UI thread.
//!
//! The entries pages and searches are here; the comparison of two snapshots is in [`diff`],
//! the operator state reads in [`opstate`].
//!
//! [`Worker::handle`] answers one [`Request`] with [`Msg`]s (progress, then one result); the
//! [`Loader`] runs a `Worker` on its own thread behind two channels. A request whose
//! generation is no longer the latest is dropped, and a long scan stops as soon as a newer
//! request arrives, so the screen always follows the last key pressed.

pub mod diff;
pub mod opstate;

use crate::cmd::inspect::{format_label, kind_name, utc_time};
use crate::render;
use diff::{DiffPart, DiffSide};
use opstate::OpStateRead;
use statekit_checkpoint::SnapshotReader;
use statekit_core::{key_group_for_key, KeyGroupRange, KeyedStateKind, KeyedStateView, StateDescriptor, StateError};
use statekit_format::SnapshotMetadata;
use std::collections::VecDeque;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A snapshot found under the directory given to `inspect`.
#[derive(Clone, Debug)]
pub struct SnapshotRow {
    /// Its directory.
    pub path: PathBuf,
    /// Its path relative to that directory, as shown.
    pub label: String,
    /// `checkpoint` or `savepoint`.
    pub kind: String,
    /// Checkpoint id (`-` when `_metadata` is unreadable).
    pub id: String,
    /// Format label.
    pub format: String,
    /// Time it was taken (UTC).
    pub time: String,
    /// Bytes of every file it references.
    pub bytes: u64,
    /// Bytes it wrote itself.
    pub own_bytes: u64,
    /// Whether `_metadata` is there and readable.
    pub complete: bool,
    /// Why it is not.
    pub problem: Option<String>,
    /// The outcome of the background verification, once it finished (`Err`: the problems).
    pub verified: Option<Result<(), String>>,
}

impl SnapshotRow {
    /// `ok`, `BROKEN`, `INCOMPLETE` or `not verified`: the words `statekit ls` uses.
    pub fn status(&self) -> &'static str {
        crate::cmd::inspect::status_word(
            self.complete,
            !self.complete && self.problem.as_deref() != Some(statekit_snapshot::INCOMPLETE),
            self.verified.as_ref(),
        )
    }
}

/// The position of an entry: its key group, and its index among the entries of the state
/// (that pass the filter) in that key group.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cursor {
    /// Key group.
    pub key_group: u32,
    /// Index within the key group.
    pub index: u64,
}

impl Cursor {
    /// The first entry.
    pub const START: Cursor = Cursor { key_group: 0, index: 0 };
}

/// One entry, as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// Where it is.
    pub cursor: Cursor,
    /// Key bytes.
    pub key: Vec<u8>,
    /// Namespace bytes.
    pub namespace: Vec<u8>,
    /// Map user key bytes.
    pub user_key: Option<Vec<u8>>,
    /// Value, element or map value bytes.
    pub value: Vec<u8>,
    /// TTL timestamp (ms).
    pub ttl_timestamp: Option<i64>,
    /// Index of a list element in its list.
    pub element: Option<u64>,
}

/// A page of entries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page {
    /// Cursor of its first entry (of where it was asked to start, when empty).
    pub start: Cursor,
    /// The entries.
    pub rows: Vec<Row>,
    /// Whether entries may follow it.
    pub more: bool,
    /// Key groups on the way that could not be read (damaged blocks), each with its file,
    /// offset and field: the page holds the entries around them.
    pub damaged: Vec<String>,
}

/// `row` as one line ([`render::entry_line`]: what the entry filter matches).
pub fn entry_line(desc: &StateDescriptor, row: &Row, hex: bool) -> String {
    let parts = render::EntryParts {
        key: &row.key,
        namespace: &row.namespace,
        user_key: row.user_key.as_deref(),
        element: row.element,
        value: &row.value,
    };
    render::entry_line(desc, parts, hex)
}

/// Which entries of which state a page or search reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Query {
    /// Operator uid.
    pub uid: String,
    /// Keyed state name.
    pub state: String,
    /// Only entries whose rendered line contains this text (empty: all).
    pub filter: String,
    /// Entries per page.
    pub page_size: usize,
}

/// Where a page starts or ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PageAt {
    /// The page starting at this entry.
    From(Cursor),
    /// The page ending just before this entry.
    Before(Cursor),
    /// The last page.
    Last,
}

/// Which way `n`/`N` go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// After the cursor, wrapping to the start.
    Next,
    /// Before the cursor, wrapping to the end.
    Prev,
}

/// Work for the worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// Find every snapshot under a directory.
    Scan {
        /// Generation.
        gen: u64,
        /// The directory.
        root: PathBuf,
    },
    /// Open a snapshot (reads `_metadata` only).
    Open {
        /// Generation.
        gen: u64,
        /// Its directory or `_metadata` file.
        path: PathBuf,
    },
    /// Read a page of entries.
    Page {
        /// Generation.
        gen: u64,
        /// What to read.
        query: Query,
        /// Where.
        at: PageAt,
        /// Which row of the page to select (`usize::MAX`: the last).
        select: usize,
    },
    /// Find an entry by key.
    Search {
        /// Generation.
        gen: u64,
        /// What to read.
        query: Query,
        /// The text typed after `/`.
        text: String,
        /// Try `text` as an exact key first (only its key group is read).
        exact_first: bool,
        /// The selected entry; the search starts after (or before) it.
        from: Cursor,
        /// Which way.
        direction: Direction,
    },
    /// Compare two snapshots (`diff::diff_snapshots`), streaming the differences.
    Diff {
        /// Generation.
        gen: u64,
        /// The old side and the new side.
        sides: [DiffSide; 2],
        /// Rows to send at most; beyond them differences are only counted.
        keep: usize,
    },
    /// Read one operator state of every subtask (`opstate::run`).
    OpState {
        /// Generation.
        gen: u64,
        /// Operator uid.
        uid: String,
        /// Operator state name.
        state: String,
        /// Rows to keep at most; beyond them elements are only counted.
        keep: usize,
    },
    /// No work: supersedes every older request at once (`Loader::send` only raises the
    /// latest generation, so a running read stops without waiting for a next request).
    Cancel {
        /// Generation.
        gen: u64,
    },
}

impl Request {
    /// The request's generation.
    pub fn gen(&self) -> u64 {
        match self {
            Request::Scan { gen, .. }
            | Request::Open { gen, .. }
            | Request::Page { gen, .. }
            | Request::Search { gen, .. }
            | Request::Diff { gen, .. }
            | Request::OpState { gen, .. }
            | Request::Cancel { gen } => *gen,
        }
    }
}

/// What the worker reports.
#[derive(Clone, Debug)]
pub enum Msg {
    /// Still working: `done` of `total` units of `what`.
    Progress {
        /// Generation.
        gen: u64,
        /// What is being read.
        what: String,
        /// Units done.
        done: u64,
        /// Units in all (0: unknown).
        total: u64,
        /// What the units are (`key groups`, `subtasks`).
        unit: &'static str,
    },
    /// A background verification finished (not tied to a request: applied by path).
    Verified {
        /// The snapshot.
        path: PathBuf,
        /// `Err`: its problems, one per line.
        result: Result<(), String>,
    },
    /// The snapshots under the directory.
    Scanned {
        /// Generation.
        gen: u64,
        /// Found snapshots, in path order.
        snapshots: Vec<SnapshotRow>,
        /// Why the directory could not be listed (an object store that failed), if so.
        error: Option<String>,
    },
    /// A snapshot was opened, or could not be.
    Opened {
        /// Generation.
        gen: u64,
        /// Its metadata, or the error.
        result: Result<Arc<SnapshotMetadata>, String>,
    },
    /// A page of entries.
    Page {
        /// Generation.
        gen: u64,
        /// The page, or the error that stopped reading it.
        result: Result<Page, String>,
        /// Which row to select (`usize::MAX`: the last).
        select: usize,
        /// A note for the status line.
        note: Option<String>,
    },
    /// A search found nothing.
    NotFound {
        /// Generation.
        gen: u64,
        /// What was searched.
        text: String,
    },
    /// Differences of a comparison (in batches), then its end.
    Diff {
        /// Generation.
        gen: u64,
        /// Rows, or the end.
        part: DiffPart,
    },
    /// An operator state's rows, or the error that stopped reading it.
    OpState {
        /// Generation.
        gen: u64,
        /// The rows, or the error.
        result: Result<OpStateRead, String>,
    },
}

impl Msg {
    /// The generation of the request this answers.
    pub fn gen(&self) -> u64 {
        match self {
            Msg::Progress { gen, .. }
            | Msg::Scanned { gen, .. }
            | Msg::Opened { gen, .. }
            | Msg::Page { gen, .. }
            | Msg::NotFound { gen, .. }
            | Msg::Diff { gen, .. }
            | Msg::OpState { gen, .. } => *gen,
            // Always current: it answers no request.
            Msg::Verified { .. } => u64::MAX,
        }
    }
}

/// The open views of one operator.
#[derive(Clone)]
struct Views {
    uid: String,
    max_parallelism: u32,
    views: Arc<Vec<Box<dyn KeyedStateView>>>,
}

/// The reading side: the open snapshot, the views of the operator last read, and the read
/// of the entries page shown, held open for the next page.
pub struct Worker {
    latest: Arc<AtomicU64>,
    reader: Option<SnapshotReader>,
    views: Option<Views>,
    stream: Option<Stream>,
    /// Snapshots to verify in the background (the [`Loader`]'s verifier thread), if any.
    verify: Option<std::sync::mpsc::Sender<PathBuf>>,
    /// Those already asked for.
    verify_asked: std::collections::HashSet<PathBuf>,
}

/// Rows a [`Stream`]'s reader thread may have read ahead of the page shown.
const STREAM_DEPTH: usize = 256;

/// A sequential read of one state (and filter), held open between pages: the next page
/// continues where the last one ended, instead of reading its key group again from the
/// start. A thread visits the key groups in order and hands the rows over a bounded channel
/// (at most [`STREAM_DEPTH`] rows wait in it); dropping the stream ends the thread at its
/// next row.
struct Stream {
    views: Arc<Vec<Box<dyn KeyedStateView>>>,
    /// (uid, state, filter) of the query it reads.
    query: (String, String, String),
    /// The cursor of a request that continues the stream.
    resume: Cursor,
    /// A row received and not yet handed out.
    peeked: Option<Row>,
    rx: Receiver<Streamed>,
}

/// What a stream's reader thread sends.
enum Streamed {
    Row(Row),
    /// Key group done.
    KeyGroup(u32),
    /// The last key group is done.
    End,
    Failed(String),
    /// A key group could not be read (damaged bytes); the stream goes on past it.
    Damaged(String),
}

fn stream_key(q: &Query) -> (String, String, String) {
    (q.uid.clone(), q.state.clone(), q.filter.clone())
}

impl Stream {
    /// Starts reading `q` from `from`.
    fn start(views: &Views, q: &Query, from: &Cursor) -> Result<Stream, Fail> {
        let (tx, rx) = std::sync::mpsc::sync_channel(STREAM_DEPTH);
        let (v, query, from) = (views.clone(), q.clone(), from.clone());
        std::thread::Builder::new()
            .name("statekit-inspect-pages".into())
            .spawn(move || {
                for kg in from.key_group..v.max_parallelism {
                    let skip = if kg == from.key_group { from.index } else { 0 };
                    let r = visit(&v, &query, kg, &mut |row| {
                        if row.cursor.index < skip {
                            return Ok(true);
                        }
                        // The page reader is gone: stop.
                        Ok(tx.send(Streamed::Row(row)).is_ok())
                    });
                    let next = match r {
                        Ok(true) => Streamed::KeyGroup(kg),
                        Ok(false) => return,
                        Err(Fail::Cancelled) => return,
                        Err(Fail::Error(e)) => Streamed::Failed(e),
                        Err(Fail::Damaged(e)) => Streamed::Damaged(e),
                    };
                    let failed = matches!(next, Streamed::Failed(_));
                    if tx.send(next).is_err() || failed {
                        return;
                    }
                }
                let _ = tx.send(Streamed::End);
            })
            .map_err(|e| Fail::Error(format!("starting a reader thread: {e}")))?;
        Ok(Stream {
            views: views.views.clone(),
            query: stream_key(q),
            resume: from.clone(),
            peeked: None,
            rx,
        })
    }
}

/// Why a read ended without a result.
enum Fail {
    /// A newer request superseded it.
    Cancelled,
    /// An error to show.
    Error(String),
    /// A key group whose bytes are damaged (corrupt data): what is around it stays readable.
    Damaged(String),
}

impl From<StateError> for Fail {
    fn from(e: StateError) -> Self {
        Fail::Error(e.to_string())
    }
}

impl Fail {
    /// The message of a failure to show (`None`: cancelled, nothing to show).
    fn message(self) -> Option<String> {
        match self {
            Fail::Cancelled => None,
            Fail::Error(e) | Fail::Damaged(e) => Some(e),
        }
    }
}

/// Progress reporting, at most every 50 ms.
struct Progress<'a> {
    gen: u64,
    what: String,
    total: u64,
    last: Instant,
    out: &'a mut dyn FnMut(Msg),
}

impl Progress<'_> {
    fn tick(&mut self, done: u64) {
        if self.last.elapsed() >= Duration::from_millis(50) {
            self.last = Instant::now();
            (self.out)(Msg::Progress {
                gen: self.gen,
                what: self.what.clone(),
                done,
                total: self.total,
                unit: "key groups",
            });
        }
    }
}

impl Worker {
    /// A worker; requests older than `latest` are dropped.
    pub fn new(latest: Arc<AtomicU64>) -> Self {
        Worker {
            latest,
            reader: None,
            views: None,
            stream: None,
            verify: None,
            verify_asked: std::collections::HashSet::new(),
        }
    }

    /// Asks the verifier thread (when there is one) to read and check `path`, once.
    fn verify_later(&mut self, path: &Path) {
        if let Some(tx) = &self.verify {
            if self.verify_asked.insert(path.to_path_buf()) {
                let _ = tx.send(path.to_path_buf());
            }
        }
    }

    fn cancelled(&self, gen: u64) -> bool {
        self.latest.load(Ordering::SeqCst) > gen
    }

    /// Answers `req`; `out` receives progress and then exactly one result unless a newer
    /// request superseded this one.
    pub fn handle(&mut self, req: Request, out: &mut dyn FnMut(Msg)) {
        let gen = req.gen();
        if self.cancelled(gen) {
            return;
        }
        match req {
            Request::Scan { gen, root } => {
                out(Msg::Progress {
                    gen,
                    what: "scanning for snapshots".into(),
                    done: 0,
                    total: 0,
                    unit: "",
                });
                let (snapshots, error) = match scan_dir(&root) {
                    Ok(s) => (s, None),
                    Err(e) => (Vec::new(), Some(e)),
                };
                // Every complete snapshot is verified in the background, in list order — asked
                // for once the list is out, so no answer can come before the row it is for.
                let to_verify: Vec<PathBuf> = snapshots
                    .iter()
                    .filter(|s| s.complete)
                    .map(|s| s.path.clone())
                    .collect();
                out(Msg::Scanned { gen, snapshots, error });
                for p in &to_verify {
                    self.verify_later(p);
                }
            }
            Request::Open { gen, path } => {
                self.verify_later(&path);
                self.views = None;
                self.stream = None;
                self.reader = None;
                // An Apache Flink snapshot's states are in the heads of its state streams.
                // `path` may be an object-store URL: opened by location, as every command does.
                let opened = crate::cmd::open_reader(&path, &Default::default())
                    .and_then(|mut r| r.load_state_schema().map(|()| r).map_err(anyhow::Error::from));
                let result = match opened {
                    Ok(r) => {
                        let m = Arc::new(r.metadata().clone());
                        self.reader = Some(r);
                        Ok(m)
                    }
                    Err(e) => Err(format!("{e:#}")),
                };
                out(Msg::Opened { gen, result });
            }
            Request::Page { gen, query, at, select } => {
                let r = self.page(gen, &query, &at, out);
                page_message(gen, r, select, None, out);
            }
            Request::Search {
                gen,
                query,
                text,
                exact_first,
                from,
                direction,
            } => match self.search(gen, &query, &text, exact_first, &from, direction, out) {
                Ok(Some((cursor, note))) => {
                    let r = self.page(gen, &query, &PageAt::From(cursor), out);
                    page_message(gen, r, 0, note, out);
                }
                Ok(None) => out(Msg::NotFound { gen, text }),
                Err(Fail::Cancelled) => {}
                Err(Fail::Error(e) | Fail::Damaged(e)) => out(Msg::Page {
                    gen,
                    result: Err(e),
                    select: 0,
                    note: None,
                }),
            },
            Request::Diff { gen, sides, keep } => diff::run(&self.latest, gen, &sides, keep, out),
            Request::OpState { gen, uid, state, keep } => {
                opstate::run(self.reader.as_ref(), &self.latest, gen, &uid, &state, keep, out)
            }
            Request::Cancel { .. } => {}
        }
    }

    /// Opens (or reuses) the views of `uid`.
    fn views(&mut self, gen: u64, uid: &str, out: &mut dyn FnMut(Msg)) -> Result<&Views, Fail> {
        let cached = self.views.as_ref().is_some_and(|v| v.uid == uid);
        if !cached {
            self.views = None;
            let reader = self
                .reader
                .as_ref()
                .ok_or_else(|| Fail::Error("no snapshot is open".into()))?;
            out(Msg::Progress {
                gen,
                what: format!("opening the state files of {uid:?}"),
                done: 0,
                total: 0,
                unit: "",
            });
            let op = reader.operator(uid).map_err(|e| Fail::Error(e.to_string()))?;
            let max_parallelism = op.max_parallelism;
            let views = statekit_snapshot::keyed_views(reader, uid, KeyGroupRange::all(max_parallelism))
                .map_err(|e| Fail::Error(format!("{e:#}")))?;
            self.views = Some(Views {
                uid: uid.to_string(),
                max_parallelism,
                views: Arc::new(views),
            });
        }
        self.views.as_ref().ok_or_else(|| Fail::Error("no views".into()))
    }

    /// Reads one page.
    fn page(&mut self, gen: u64, q: &Query, at: &PageAt, out: &mut dyn FnMut(Msg)) -> Result<Page, Fail> {
        let latest = self.latest.clone();
        let views = &self.views(gen, &q.uid, out)?.clone();
        let n = views.max_parallelism;
        let size = q.page_size.max(1);
        let mut progress = Progress {
            gen,
            what: format!("reading {:?}", q.state),
            total: u64::from(n),
            last: Instant::now(),
            out,
        };
        let cancelled = || latest.load(Ordering::SeqCst) > gen;
        match at {
            PageAt::From(c) => {
                let reuse = self.stream.as_ref().is_some_and(|st| {
                    Arc::ptr_eq(&st.views, &views.views) && st.query == stream_key(q) && st.resume == *c
                });
                let mut st = match self.stream.take() {
                    Some(st) if reuse => st,
                    _ => Stream::start(views, q, c)?,
                };
                let mut rows: Vec<Row> = Vec::with_capacity(size);
                rows.extend(st.peeked.take());
                let mut more = false;
                let mut damaged = Vec::new();
                loop {
                    if cancelled() {
                        // The rows taken so far are lost with the stream: the next read
                        // starts afresh.
                        return Err(Fail::Cancelled);
                    }
                    match st.rx.recv_timeout(Duration::from_millis(50)) {
                        Ok(Streamed::Row(r)) if rows.len() == size => {
                            st.peeked = Some(r);
                            more = true;
                            break;
                        }
                        Ok(Streamed::Row(r)) => rows.push(r),
                        Ok(Streamed::KeyGroup(kg)) => progress.tick(u64::from(kg + 1 - c.key_group)),
                        Ok(Streamed::End) => break,
                        Ok(Streamed::Failed(e)) => return Err(Fail::Error(e)),
                        Ok(Streamed::Damaged(e)) => damaged.push(e),
                        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                            return Err(Fail::Error("the reader thread ended unexpectedly".into()))
                        }
                    }
                }
                if more {
                    if let Some(last) = rows.last() {
                        st.resume = Cursor {
                            key_group: last.cursor.key_group,
                            index: last.cursor.index + 1,
                        };
                    }
                    self.stream = Some(st);
                }
                Ok(Page {
                    start: c.clone(),
                    rows,
                    more,
                    damaged,
                })
            }
            PageAt::Before(_) | PageAt::Last => {
                let end = match at {
                    PageAt::Before(c) => c.clone(),
                    _ => Cursor { key_group: n, index: 0 },
                };
                // At most `size` rows are ever held: a ring per key group, then the page.
                let mut acc: VecDeque<Row> = VecDeque::with_capacity(size);
                let mut damaged = Vec::new();
                let mut kg = end.key_group.min(n);
                let first = end.key_group;
                loop {
                    if kg < n {
                        if cancelled() {
                            return Err(Fail::Cancelled);
                        }
                        progress.tick(u64::from(first.min(n) - kg));
                        let limit = if kg == end.key_group { end.index } else { u64::MAX };
                        let mut ring: VecDeque<Row> = VecDeque::new();
                        let want = size - acc.len();
                        let r = visit(views, q, kg, &mut |row| {
                            if row.cursor.index >= limit {
                                return Ok(false);
                            }
                            if ring.len() == want {
                                ring.pop_front();
                            }
                            ring.push_back(row);
                            Ok(true)
                        });
                        match r {
                            Ok(_) => {}
                            // The key group's entries before the damage are kept; it is named.
                            Err(Fail::Damaged(e)) => damaged.push(e),
                            Err(e) => return Err(e),
                        }
                        while let Some(r) = ring.pop_back() {
                            acc.push_front(r);
                        }
                    }
                    if acc.len() == size || kg == 0 {
                        break;
                    }
                    kg -= 1;
                }
                let rows: Vec<Row> = acc.into_iter().collect();
                let start = rows.first().map(|r| r.cursor.clone()).unwrap_or(Cursor::START);
                Ok(Page {
                    start,
                    rows,
                    more: !matches!(at, PageAt::Last),
                    damaged,
                })
            }
        }
    }

    /// Finds the cursor of the entry a search lands on.
    #[allow(clippy::too_many_arguments)]
    fn search(
        &mut self,
        gen: u64,
        q: &Query,
        text: &str,
        exact_first: bool,
        from: &Cursor,
        direction: Direction,
        out: &mut dyn FnMut(Msg),
    ) -> Result<Option<(Cursor, Option<String>)>, Fail> {
        let latest = self.latest.clone();
        let views = self.views(gen, &q.uid, out)?;
        let n = views.max_parallelism;
        let Some(desc) = state_desc(views, &q.state) else {
            return Ok(None);
        };
        if exact_first {
            if let Ok(key) = render::parse_key(text, &desc.key_schema, render::KeyFormat::Auto) {
                let kg = key_group_for_key(&key, n);
                let mut found = None;
                visit(views, q, kg, &mut |row| {
                    if row.key == key {
                        found = Some(row.cursor);
                        return Ok(false);
                    }
                    Ok(true)
                })?;
                if let Some(c) = found {
                    return Ok(Some((c, Some(format!("key {text} (key group {kg})")))));
                }
            }
        }
        let matches = |row: &Row| render::text(&desc.key_schema, &row.key).contains(text);
        let mut progress = Progress {
            gen,
            what: format!("searching {:?} for {text:?}", q.state),
            total: u64::from(n),
            last: Instant::now(),
            out,
        };
        let cancelled = || latest.load(Ordering::SeqCst) > gen;
        // Scans key groups `kgs`, calling `hit` on every matching row with its position
        // relative to `from` (before, at/after); `hit` returns false to stop.
        let scan_kgs = |kgs: std::ops::Range<u32>,
                        hit: &mut dyn FnMut(&Row) -> bool,
                        progress: &mut Progress<'_>|
         -> Result<bool, Fail> {
            for kg in kgs {
                if cancelled() {
                    return Err(Fail::Cancelled);
                }
                progress.tick(u64::from(kg));
                let go = visit(views, q, kg, &mut |row| Ok(!matches(&row) || hit(&row)))?;
                if !go {
                    return Ok(false);
                }
            }
            Ok(true)
        };
        let wrapped = Some("search wrapped around".to_string());
        match direction {
            Direction::Next => {
                let mut found: Option<Cursor> = None;
                scan_kgs(
                    from.key_group..n,
                    &mut |r| {
                        if r.cursor > *from {
                            found = Some(r.cursor.clone());
                            false
                        } else {
                            true
                        }
                    },
                    &mut progress,
                )?;
                if let Some(c) = found {
                    return Ok(Some((c, None)));
                }
                scan_kgs(
                    0..from.key_group.saturating_add(1).min(n),
                    &mut |r| {
                        if r.cursor <= *from {
                            found = Some(r.cursor.clone());
                        }
                        false
                    },
                    &mut progress,
                )?;
                Ok(found.map(|c| (c, wrapped)))
            }
            Direction::Prev => {
                let mut found: Option<Cursor> = None;
                scan_kgs(
                    0..from.key_group.saturating_add(1).min(n),
                    &mut |r| {
                        if r.cursor < *from {
                            found = Some(r.cursor.clone());
                            true
                        } else {
                            false
                        }
                    },
                    &mut progress,
                )?;
                if let Some(c) = found {
                    return Ok(Some((c, None)));
                }
                scan_kgs(
                    from.key_group..n,
                    &mut |r| {
                        if r.cursor >= *from {
                            found = Some(r.cursor.clone());
                        }
                        true
                    },
                    &mut progress,
                )?;
                Ok(found.map(|c| (c, wrapped)))
            }
        }
    }
}

/// The descriptor of keyed state `name` in any of the views.
fn state_desc<'v>(views: &'v Views, name: &str) -> Option<&'v StateDescriptor> {
    views.views.iter().flat_map(|v| v.states()).find(|d| d.name == name)
}

/// Calls `f` with every entry of state `q.state` in key group `kg` that passes the filter,
/// in canonical order, numbered within the key group; `f` returns false to stop. Returns
/// false when `f` stopped.
fn visit(views: &Views, q: &Query, kg: u32, f: &mut dyn FnMut(Row) -> Result<bool, Fail>) -> Result<bool, Fail> {
    let mut index = 0u64;
    let mut outcome: Result<bool, Fail> = Ok(true);
    for view in views.views.iter().filter(|v| v.key_group_range().contains(kg)) {
        let Some(state) = view.states().iter().position(|d| d.name == q.state) else {
            continue;
        };
        let desc = &view.states()[state];
        let state = state as u32;
        let is_list = desc.kind == KeyedStateKind::List;
        let mut element = 0u64;
        let mut last: Option<(Vec<u8>, Vec<u8>)> = None;
        let r = view.visit_key_group(kg, &mut |e| {
            if e.state != state {
                return Ok(ControlFlow::Continue(()));
            }
            let same = last
                .as_ref()
                .is_some_and(|(k, ns)| k.as_slice() == e.key && ns.as_slice() == e.namespace);
            if !same {
                element = 0;
                last = Some((e.key.to_vec(), e.namespace.to_vec()));
            }
            let row = Row {
                cursor: Cursor { key_group: kg, index },
                key: e.key.to_vec(),
                namespace: e.namespace.to_vec(),
                user_key: e.user_key.map(<[u8]>::to_vec),
                value: e.value.to_vec(),
                ttl_timestamp: e.timestamp,
                element: is_list.then_some(element),
            };
            element += 1;
            if !q.filter.is_empty() && !entry_line(desc, &row, false).contains(&q.filter) {
                return Ok(ControlFlow::Continue(()));
            }
            index += 1;
            match f(row) {
                Ok(true) => Ok(ControlFlow::Continue(())),
                Ok(false) => {
                    outcome = Ok(false);
                    Ok(ControlFlow::Break(()))
                }
                Err(fail) => {
                    outcome = Err(fail);
                    Ok(ControlFlow::Break(()))
                }
            }
        });
        match r {
            Ok(ControlFlow::Break(())) => return outcome,
            Ok(ControlFlow::Continue(())) => {}
            Err(e) if e.kind() == statekit_core::ErrorKind::Corrupt => {
                return Err(Fail::Damaged(format!("key group {kg}: {e}")))
            }
            Err(e) => return Err(e.into()),
        }
    }
    outcome
}

/// The snapshots under `root` (a local directory or an object-store URL), as the snapshot
/// list shows them (paths relative to `root`).
fn scan_dir(root: &Path) -> Result<Vec<SnapshotRow>, String> {
    let found = crate::cmd::location(root)
        .and_then(|l| Ok(statekit_snapshot::find_snapshots_at(&l, 4)?))
        .map_err(|e| format!("{e:#}"))?;
    Ok(found
        .into_iter()
        .map(|f| {
            let rel = f.path.strip_prefix(root).unwrap_or(&f.path);
            let label = if rel.as_os_str().is_empty() {
                ".".to_string()
            } else {
                rel.display().to_string()
            };
            SnapshotRow {
                label,
                kind: f.meta.as_ref().map_or("checkpoint", |m| kind_name(m.kind)).to_string(),
                id: f.meta.as_ref().map_or("-".into(), |m| m.checkpoint_id.to_string()),
                format: f.meta.as_ref().map_or("-".into(), format_label),
                time: f.meta.as_ref().map_or("-".into(), |m| utc_time(m.timestamp_ms)),
                bytes: f.bytes,
                own_bytes: f.own_bytes,
                complete: f.complete,
                problem: f.problem,
                path: f.path,
                verified: None,
            }
        })
        .collect())
}

/// Reports a page read (`note`: what the status line says with it; a page that skipped
/// damaged key groups says that instead); a cancelled read reports nothing.
fn page_message(gen: u64, r: Result<Page, Fail>, select: usize, note: Option<String>, out: &mut dyn FnMut(Msg)) {
    match r {
        Ok(page) => {
            let note = if page.damaged.is_empty() {
                note
            } else {
                // The key group and where first: a status line is one row.
                Some(format!(
                    "BROKEN, skipped (entries around it shown): {}",
                    page.damaged.join("; ")
                ))
            };
            out(Msg::Page {
                gen,
                result: Ok(page),
                select,
                note,
            })
        }
        Err(fail) => {
            if let Some(e) = fail.message() {
                out(Msg::Page {
                    gen,
                    result: Err(e),
                    select,
                    note: None,
                })
            }
        }
    }
}

/// A [`Worker`] on its own thread.
pub struct Loader {
    latest: Arc<AtomicU64>,
    tx: Sender<Request>,
    /// Messages from the worker.
    pub rx: Receiver<Msg>,
}

impl Loader {
    /// Starts the worker thread.
    pub fn spawn() -> std::io::Result<Self> {
        let latest = Arc::new(AtomicU64::new(0));
        let (tx, req_rx) = std::sync::mpsc::channel::<Request>();
        let (msg_tx, rx) = std::sync::mpsc::channel::<Msg>();
        let mut worker = Worker::new(latest.clone());
        // Verification reads every byte: on a thread of its own, so pages stay quick.
        let (verify_tx, verify_rx) = std::sync::mpsc::channel::<PathBuf>();
        let verified_tx = msg_tx.clone();
        std::thread::Builder::new()
            .name("statekit-inspect-verify".into())
            .spawn(move || {
                for path in verify_rx {
                    let result = crate::cmd::inspect::verify_status(&path);
                    if verified_tx.send(Msg::Verified { path, result }).is_err() {
                        return;
                    }
                }
            })?;
        worker.verify = Some(verify_tx);
        std::thread::Builder::new()
            .name("statekit-inspect-loader".into())
            .spawn(move || {
                while let Ok(req) = req_rx.recv() {
                    worker.handle(req, &mut |m| {
                        let _ = msg_tx.send(m);
                    });
                }
            })?;
        Ok(Loader { latest, tx, rx })
    }

    /// Sends `req`, superseding every older request. [`Request::Cancel`] only raises the
    /// latest generation (the running read sees it at its next check and stops); there is
    /// nothing to send.
    pub fn send(&self, req: Request) {
        self.latest.fetch_max(req.gen(), Ordering::SeqCst);
        if !matches!(req, Request::Cancel { .. }) {
            let _ = self.tx.send(req);
        }
    }

    /// The latest generation sent.
    #[cfg(test)]
    pub(in crate::tui) fn latest(&self) -> u64 {
        self.latest.load(Ordering::SeqCst)
    }
}
