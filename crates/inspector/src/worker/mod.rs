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

use crate::error::{Problems, ReadError};
use diff::{DiffPart, DiffSide};
use opstate::OpStateRead;
use statekit_core::text;
use statekit_core::text::utc_time;
use statekit_core::HasErrorKind;
use statekit_core::{KeyGroupRange, StateDescriptor};
use statekit_format::SnapshotMetadata;
use statekit_snapshot::cursor::{CursorError, EntryCursor, EntryFilter, EntryRef, KeyedEntries, Watch};
use statekit_snapshot::describe::{format_label, kind_name};
use statekit_snapshot::{OpenOptions, Snapshot};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One entry, as stored.
pub use statekit_snapshot::cursor::CursorEntry as Row;
/// Which way `n`/`N` go: after the selected entry wrapping to the start, or before it
/// wrapping to the end.
pub use statekit_snapshot::cursor::Direction;
/// The position of an entry: its key group, and its index among the entries of the state
/// (that pass the filter) in that key group.
pub use statekit_snapshot::cursor::Position as Cursor;

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
    pub verified: Option<Result<(), Problems>>,
}

impl SnapshotRow {
    /// `ok`, `BROKEN`, `INCOMPLETE` or `not verified`: the words `statekit ls` uses.
    pub fn status(&self) -> &'static str {
        crate::open::status_word(
            self.complete,
            !self.complete && self.problem.as_deref() != Some(statekit_snapshot::INCOMPLETE),
            self.verified.as_ref(),
        )
    }
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

/// An entry as one line ([`text::entry_line`]: what the entry filter matches).
fn entry_line(desc: &StateDescriptor, e: &EntryRef<'_>, hex: bool) -> String {
    let parts = text::EntryParts {
        key: e.key,
        namespace: e.namespace,
        user_key: e.user_key,
        element: e.element,
        value: e.value,
    };
    text::entry_line(desc, parts, hex)
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
        /// `Err`: its problems.
        result: Result<(), Problems>,
    },
    /// The snapshots under the directory.
    Scanned {
        /// Generation.
        gen: u64,
        /// Found snapshots, in path order.
        snapshots: Vec<SnapshotRow>,
        /// Why the directory could not be listed (an object store that failed), if so.
        error: Option<ReadError>,
    },
    /// A snapshot was opened, or could not be.
    Opened {
        /// Generation.
        gen: u64,
        /// Its metadata, or the error.
        result: Result<Arc<SnapshotMetadata>, ReadError>,
    },
    /// A page of entries.
    Page {
        /// Generation.
        gen: u64,
        /// The page, or the error that stopped reading it.
        result: Result<Page, ReadError>,
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
        result: Result<OpStateRead, ReadError>,
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

/// The reading side: the open snapshot, the views of the operator last read, and the cursor
/// of the entries page shown, held open for the next page.
pub struct Worker {
    latest: Arc<AtomicU64>,
    reader: Option<Snapshot>,
    views: Option<KeyedEntries>,
    /// The cursor of the last page read, with the (uid, state, filter) of its query: its
    /// read ahead continues where that page ended.
    cursor: Option<((String, String, String), EntryCursor)>,
    /// Snapshots to verify in the background (the [`Loader`]'s verifier thread), if any.
    verify: Option<std::sync::mpsc::Sender<PathBuf>>,
    /// Those already asked for.
    verify_asked: std::collections::HashSet<PathBuf>,
    /// How snapshots open (for Apache Flink snapshots: `--flink-uid`, `--flink-root`).
    options: OpenOptions,
}

fn stream_key(q: &Query) -> (String, String, String) {
    (q.uid.clone(), q.state.clone(), q.filter.clone())
}

/// The cursor over `q`'s entries: the one in `slot` when it reads the same query, else a
/// new one over `views` (put in `slot`).
fn cursor_for<'s>(
    slot: &'s mut Option<((String, String, String), EntryCursor)>,
    views: &KeyedEntries,
    q: &Query,
) -> &'s mut EntryCursor {
    let key = stream_key(q);
    if slot.as_ref().is_some_and(|(k, _)| *k != key) {
        *slot = None;
    }
    &mut slot
        .get_or_insert_with(|| {
            let mut filter = EntryFilter::default();
            if !q.filter.is_empty() {
                let text = q.filter.clone();
                filter.matches = Some(Arc::new(move |desc: &StateDescriptor, e: &EntryRef<'_>| {
                    entry_line(desc, e, false).contains(&text)
                }));
            }
            (key, views.cursor(&q.state, filter))
        })
        .1
}

/// Why a read ended without a result.
enum Fail {
    /// A newer request superseded it.
    Cancelled,
    /// An error to show.
    Error(ReadError),
}

impl From<CursorError> for Fail {
    fn from(e: CursorError) -> Self {
        match e {
            CursorError::Cancelled => Fail::Cancelled,
            e => Fail::Error(ReadError::new(e.to_string(), HasErrorKind::kind(&e))),
        }
    }
}

impl Fail {
    /// The message of a failure to show (`None`: cancelled, nothing to show).
    fn message(self) -> Option<ReadError> {
        match self {
            Fail::Cancelled => None,
            Fail::Error(e) => Some(e),
        }
    }
}

/// Progress reporting, at most every 50 ms; a read watched by it stops when a request newer
/// than `gen` arrives.
struct Progress<'a> {
    gen: u64,
    latest: Arc<AtomicU64>,
    what: String,
    total: u64,
    last: Instant,
    out: &'a mut dyn FnMut(Msg),
}

impl Watch for Progress<'_> {
    fn cancelled(&mut self) -> bool {
        self.latest.load(Ordering::SeqCst) > self.gen
    }
    fn progress(&mut self, done: u64) {
        self.tick(done);
    }
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
            cursor: None,
            verify: None,
            verify_asked: std::collections::HashSet::new(),
            options: OpenOptions::default(),
        }
    }

    /// The same worker, opening snapshots with `options` (for Apache Flink snapshots: the
    /// job's uids, moved roots).
    pub fn with_options(mut self, options: OpenOptions) -> Self {
        self.options = options;
        self
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
                self.cursor = None;
                self.reader = None;
                // An Apache Flink snapshot's states are in the heads of its state streams.
                // `path` may be an object-store URL: opened by location, as every command does.
                let options = OpenOptions {
                    state_schema: true,
                    ..self.options.clone()
                };
                let result = match crate::open::open_snapshot(&path, &options) {
                    Ok(r) => {
                        let m = Arc::new(r.metadata().clone());
                        self.reader = Some(r);
                        Ok(m)
                    }
                    Err(e) => Err(ReadError::chain(&e, e.kind())),
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
                Err(Fail::Error(e)) => out(Msg::Page {
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
    fn views(&mut self, gen: u64, uid: &str, out: &mut dyn FnMut(Msg)) -> Result<KeyedEntries, Fail> {
        if let Some(v) = self.views.as_ref().filter(|v| v.uid() == uid) {
            return Ok(v.clone());
        }
        self.views = None;
        self.cursor = None;
        let reader = self
            .reader
            .as_ref()
            .ok_or_else(|| Fail::Error(ReadError::no_snapshot_open()))?;
        out(Msg::Progress {
            gen,
            what: format!("opening the state files of {uid:?}"),
            done: 0,
            total: 0,
            unit: "",
        });
        let op = reader
            .operator(uid)
            .map_err(|e| Fail::Error(ReadError::new(e.to_string(), e.kind())))?;
        let views = KeyedEntries::open(reader, uid, KeyGroupRange::all(op.max_parallelism))
            .map_err(|e| Fail::Error(ReadError::new(format!("{e:#}"), HasErrorKind::kind(&e))))?;
        self.views = Some(views.clone());
        Ok(views)
    }

    /// Reads one page.
    fn page(&mut self, gen: u64, q: &Query, at: &PageAt, out: &mut dyn FnMut(Msg)) -> Result<Page, Fail> {
        let views = self.views(gen, &q.uid, out)?;
        let cursor = cursor_for(&mut self.cursor, &views, q);
        let size = q.page_size.max(1);
        let mut progress = Progress {
            gen,
            latest: self.latest.clone(),
            what: format!("reading {:?}", q.state),
            total: u64::from(views.max_parallelism()),
            last: Instant::now(),
            out,
        };
        let page = match at {
            PageAt::From(c) => {
                cursor.seek(c.clone());
                cursor.next_page(size, &mut progress)?
            }
            PageAt::Before(c) => cursor.page_before(Some(c), size, &mut progress)?,
            PageAt::Last => cursor.page_before(None, size, &mut progress)?,
        };
        Ok(Page {
            start: page.start,
            rows: page.entries,
            more: page.more,
            damaged: page.damaged.iter().map(ToString::to_string).collect(),
        })
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
        let views = self.views(gen, &q.uid, out)?;
        let cursor = cursor_for(&mut self.cursor, &views, q);
        let Some(desc) = cursor.descriptor().cloned() else {
            return Ok(None);
        };
        if exact_first {
            if let Ok(key) =
                statekit_core::text::parse_key(text, &desc.key_schema, statekit_core::text::KeyFormat::Auto)
            {
                if let Some(c) = cursor.find_key(&key)? {
                    let kg = c.key_group;
                    return Ok(Some((c, Some(format!("key {text} (key group {kg})")))));
                }
            }
        }
        let matches = |e: &EntryRef<'_>| statekit_core::text::text(&desc.key_schema, e.key).contains(text);
        let mut progress = Progress {
            gen,
            latest: self.latest.clone(),
            what: format!("searching {:?} for {text:?}", q.state),
            total: u64::from(views.max_parallelism()),
            last: Instant::now(),
            out,
        };
        let found = cursor.find(from, direction, &matches, &mut progress)?;
        Ok(found.map(|f| (f.position, f.wrapped.then(|| "search wrapped around".to_string()))))
    }
}

/// The snapshots under `root` (a local directory or an object-store URL), as the snapshot
/// list shows them (paths relative to `root`).
fn scan_dir(root: &Path) -> Result<Vec<SnapshotRow>, ReadError> {
    let location = crate::open::location(root).map_err(|e| ReadError::chain(&e, HasErrorKind::kind(&e)))?;
    let found = statekit_snapshot::find_snapshots_at(&location, 4).map_err(|e| ReadError::chain(&e, e.kind()))?;
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
        Self::spawn_with(Default::default())
    }

    /// Starts the worker thread, opening snapshots with `options` (for Apache Flink
    /// snapshots: the job's uids, moved roots).
    pub fn spawn_with(options: OpenOptions) -> std::io::Result<Self> {
        let latest = Arc::new(AtomicU64::new(0));
        let (tx, req_rx) = std::sync::mpsc::channel::<Request>();
        let (msg_tx, rx) = std::sync::mpsc::channel::<Msg>();
        let mut worker = Worker::new(latest.clone()).with_options(options);
        // Verification reads every byte: on a thread of its own, so pages stay quick.
        let (verify_tx, verify_rx) = std::sync::mpsc::channel::<PathBuf>();
        let verified_tx = msg_tx.clone();
        std::thread::Builder::new()
            .name("statekit-inspect-verify".into())
            .spawn(move || {
                for path in verify_rx {
                    let result = crate::open::verify_status(&path);
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
    pub(crate) fn latest(&self) -> u64 {
        self.latest.load(Ordering::SeqCst)
    }
}
