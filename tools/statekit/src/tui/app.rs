//! The inspector's state and its pure `update`: no terminal, no threads, no I/O. Reads are
//! asked for by returning a [`Request`]; their results come back as [`Action::Loaded`].

use super::diffview::{DiffPart, DiffSide, DiffView, DIFF_KEEP};
use super::loader::{Direction, Msg, PageAt, Query, Request};
use super::opstate::{OpStateView, OP_KEEP};
use crate::cmd::inspect::state_totals;
use crate::render;
use statekit_core::StateDescriptor;
use statekit_format::{OperatorMetadata, SnapshotMetadata};
use std::path::{Path, PathBuf};
use std::sync::Arc;

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
}

impl Row {
    /// The entry as one line ([`render::entry_line`]: what the entry filter matches).
    pub fn line(&self, desc: &StateDescriptor, hex: bool) -> String {
        let parts = render::EntryParts {
            key: &self.key,
            namespace: &self.namespace,
            user_key: self.user_key.as_deref(),
            element: self.element,
            value: &self.value,
        };
        render::entry_line(desc, parts, hex)
    }
}

/// What the main area shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Screen {
    /// Snapshots under a directory.
    Snapshots,
    /// Operators of the open snapshot.
    Operators,
    /// States of the selected operator.
    States,
    /// Entries of the selected state.
    Entries,
    /// The differences of two snapshots.
    Diff,
    /// The elements (or entries) of the selected operator state.
    OpState,
}

impl Screen {
    /// Index of the screen's filter in [`App::filters`].
    pub fn slot(self) -> usize {
        match self {
            Screen::Snapshots => 0,
            Screen::Operators => 1,
            Screen::States => 2,
            Screen::Entries => 3,
            Screen::Diff => 4,
            Screen::OpState => 5,
        }
    }
}

/// What a prompt is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PromptKind {
    /// `/`: search.
    Search,
    /// `f`: filter.
    Filter,
}

/// A line being typed in the footer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prompt {
    /// What for.
    pub kind: PromptKind,
    /// The text so far.
    pub text: String,
}

/// A read in progress.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loading {
    /// What is read.
    pub what: String,
    /// Units done.
    pub done: u64,
    /// Units in all (0: unknown).
    pub total: u64,
    /// What the units are (`key groups`, `subtasks`).
    pub unit: &'static str,
}

/// Whether the metadata pane shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetaPane {
    /// Beside or under the list when the terminal has room (at least 16 rows), else hidden.
    Auto,
    /// Shown (in place of the list on a small terminal).
    Shown,
    /// Hidden.
    Hidden,
}

/// Rows of a terminal below which the pane does not show by itself.
pub const SMALL_HEIGHT: u16 = 16;

/// The entries screen.
#[derive(Clone, Debug)]
pub struct EntriesView {
    /// Operator uid.
    pub uid: String,
    /// The state.
    pub desc: StateDescriptor,
    /// The page shown.
    pub page: Option<Page>,
    /// Selected row of the page.
    pub sel: usize,
    /// Index of the page's first entry among all (that pass the filter), when known.
    pub first_index: Option<u64>,
    /// Entries of the state per `_metadata`, and whether that is an estimate.
    pub total: Option<(u64, bool)>,
    /// Why the last read failed.
    pub error: Option<String>,
}

impl EntriesView {
    /// The selected entry.
    pub fn selected(&self) -> Option<&Row> {
        self.page.as_ref().and_then(|p| p.rows.get(self.sel))
    }
}

/// What the outstanding request will do with its page.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Pending {
    /// Replace the page; the first index is known when `Some`.
    Fresh(Option<u64>),
    /// The page after the one shown.
    Next,
    /// The page before the one shown.
    Prev,
    /// The last page.
    Last,
}

/// A row of the states list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StateItem {
    /// Keyed state, by index in the operator's keyed states.
    Keyed(usize),
    /// Operator state, by index in the operator's operator states.
    Operator(usize),
}

/// Everything the screen shows.
#[derive(Clone, Debug)]
pub struct App {
    /// What was opened, as shown in the header.
    pub title: String,
    /// The path it was opened by.
    pub root: PathBuf,
    /// Whether the root is a directory of snapshots (else one snapshot).
    pub dir_mode: bool,
    /// The screen.
    pub screen: Screen,
    /// Snapshots under the root (dir mode).
    pub snapshots: Vec<SnapshotRow>,
    /// Whether the scan finished.
    pub scanned: bool,
    /// The open snapshot: its label and metadata.
    pub snapshot: Option<(String, Arc<SnapshotMetadata>)>,
    /// Why the snapshot could not be opened.
    pub open_error: Option<String>,
    /// Selected row of the snapshot, operator and state lists (in their filtered rows).
    pub sel: [usize; 3],
    /// Filter text of each screen (by [`Screen::slot`]).
    pub filters: [String; 6],
    /// The entries screen.
    pub entries: Option<EntriesView>,
    /// The operator state screen.
    pub opstate: Option<OpStateView>,
    /// Rows of an operator state kept at most.
    pub op_keep: usize,
    /// The diff screen.
    pub diff: Option<DiffView>,
    /// The snapshot marked with `d` as the old side of a diff (index in `snapshots`).
    pub diff_base: Option<usize>,
    /// Rows of a diff kept at most.
    pub diff_keep: usize,
    /// Show bytes as hex.
    pub hex: bool,
    /// The metadata pane.
    pub meta: MetaPane,
    /// The help overlay.
    pub help: bool,
    /// Lines the help overlay is scrolled by.
    pub help_scroll: u16,
    /// A prompt being typed.
    pub prompt: Option<Prompt>,
    /// The last search.
    pub search: Option<String>,
    /// A message for the status line.
    pub status: Option<String>,
    /// A read in progress.
    pub loading: Option<Loading>,
    /// Generation of the latest request.
    pub gen: u64,
    /// Quit at the next turn of the loop.
    pub quit: bool,
    /// Terminal size (columns, rows).
    pub size: (u16, u16),
    /// Animation counter of the progress spinner.
    pub tick: u64,
    pending: Option<Pending>,
    snapshot_label: Option<String>,
}

/// What the user (or the worker) did.
#[derive(Clone, Debug)]
pub enum Action {
    /// Previous row.
    Up,
    /// Next row.
    Down,
    /// First row.
    Top,
    /// Last row.
    Bottom,
    /// A screen up.
    PageUp,
    /// A screen down.
    PageDown,
    /// Into the selected row.
    Enter,
    /// Out, one level.
    Back,
    /// Leave.
    Quit,
    /// Open the search prompt.
    StartSearch,
    /// Open the filter prompt.
    StartFilter,
    /// Next match of the last search.
    SearchNext,
    /// Previous match.
    SearchPrev,
    /// Typed bytes as hex and back.
    ToggleHex,
    /// The metadata pane on and off.
    ToggleMeta,
    /// `d`: mark the base of a diff, or diff the base with the selected snapshot.
    MarkDiff,
    /// The help overlay on and off.
    ToggleHelp,
    /// A character typed in a prompt.
    PromptInput(char),
    /// Backspace in a prompt.
    PromptBackspace,
    /// Enter in a prompt.
    PromptSubmit,
    /// Esc in a prompt.
    PromptCancel,
    /// The terminal has a new size.
    Resize(u16, u16),
    /// Time passed (animates the spinner).
    Tick,
    /// The worker answered.
    Loaded(Msg),
}

/// Rows of the header, footer, table border and table header around entries.
const CHROME_ROWS: u16 = 5;

impl App {
    /// The state for `path` (shown as `title`) and the first request: scan a directory or
    /// open a snapshot (only its `_metadata`).
    pub fn new(path: &Path, title: &str) -> (App, Request) {
        let is_snapshot = crate::cmd::inspect::is_snapshot_path(path);
        let dir_mode = path.is_dir() && !is_snapshot;
        let mut app = App {
            title: title.to_string(),
            root: path.to_path_buf(),
            dir_mode,
            screen: if dir_mode { Screen::Snapshots } else { Screen::Operators },
            snapshots: Vec::new(),
            scanned: false,
            snapshot: None,
            open_error: None,
            sel: [0; 3],
            filters: Default::default(),
            entries: None,
            opstate: None,
            op_keep: OP_KEEP,
            diff: None,
            diff_base: None,
            diff_keep: DIFF_KEEP,
            hex: false,
            meta: MetaPane::Auto,
            help: false,
            help_scroll: 0,
            prompt: None,
            search: None,
            status: None,
            loading: None,
            gen: 0,
            quit: false,
            size: (80, 24),
            tick: 0,
            pending: None,
            snapshot_label: None,
        };
        let req = if dir_mode {
            let gen = app.next_gen("scanning for snapshots");
            Request::Scan {
                gen,
                root: path.to_path_buf(),
            }
        } else {
            let gen = app.next_gen("reading _metadata");
            Request::Open {
                gen,
                path: path.to_path_buf(),
            }
        };
        (app, req)
    }

    /// The state for `statekit inspect A --diff B`: straight into the diff of `a` (old,
    /// shown as `a_label`) and `b`, and the request that compares them.
    pub fn new_diff(a: &Path, a_label: &str, b: &Path, b_label: &str) -> (App, Request) {
        let (mut app, _) = App::new(a, a_label);
        app.dir_mode = false;
        let sides = [
            DiffSide {
                path: a.to_path_buf(),
                label: a_label.to_string(),
            },
            DiffSide {
                path: b.to_path_buf(),
                label: b_label.to_string(),
            },
        ];
        let req = app.diff_request(sides, false);
        (app, req)
    }

    /// Opens the diff screen on `sides` and asks for the comparison.
    fn diff_request(&mut self, sides: [DiffSide; 2], from_list: bool) -> Request {
        self.status = None;
        self.filters[4].clear();
        self.diff = Some(DiffView::new(sides.clone(), from_list));
        self.screen = Screen::Diff;
        let gen = self.next_gen("comparing");
        Request::Diff {
            gen,
            sides,
            keep: self.diff_keep,
        }
    }

    /// `d`: in the snapshot list, marks the selected snapshot as the base, unmarks it, or
    /// diffs the base with the selected one.
    fn mark_diff(&mut self) -> Option<Request> {
        if self.screen != Screen::Snapshots {
            self.status = Some(match self.screen {
                Screen::Diff => "d: this is a diff; Esc goes back".into(),
                _ => "d diffs two snapshots: in the snapshot list (inspect a directory), or `statekit inspect A --diff B`"
                    .into(),
            });
            return None;
        }
        let i = *self.visible_snapshots().get(self.sel[0])?;
        match self.diff_base {
            None => {
                self.diff_base = Some(i);
                self.status = Some(format!(
                    "base: {} · d on another: diff base → it · d/Esc: unmark",
                    self.snapshots[i].label
                ));
                None
            }
            Some(b) if b == i => {
                self.diff_base = None;
                self.status = Some("base unmarked".into());
                None
            }
            Some(b) => {
                let side = |r: &SnapshotRow| DiffSide {
                    path: r.path.clone(),
                    label: r.label.clone(),
                };
                let sides = [side(&self.snapshots[b]), side(&self.snapshots[i])];
                Some(self.diff_request(sides, true))
            }
        }
    }

    /// Moves in the diff list.
    fn diff_move(&mut self, action: &Action) {
        let page = super::diffview::page_rows(self);
        let Some(dv) = self.diff.as_mut() else {
            return;
        };
        let sel = super::rows::move_target(action, dv.sel, dv.visible.len(), page);
        dv.select(sel, page);
    }

    /// `/`, `n`, `N` in the diff list.
    fn diff_search(&mut self, text: &str, forward: bool, include_current: bool) {
        let page = super::diffview::page_rows(self);
        let Some(dv) = self.diff.as_mut() else {
            return;
        };
        match dv.find(text, forward, include_current) {
            Some(i) => {
                dv.select(i, page);
                self.status = None;
            }
            None => self.status = Some(format!("not found: {text}")),
        }
    }

    fn next_gen(&mut self, what: &str) -> u64 {
        self.gen += 1;
        self.loading = Some(Loading {
            what: what.to_string(),
            done: 0,
            total: 0,
            unit: "",
        });
        self.gen
    }

    /// `msg` with the root's path replaced by the title (errors name files by their path).
    pub fn sanitize(&self, msg: &str) -> String {
        let mut out = msg.to_string();
        let mut roots = vec![self.root.display().to_string()];
        if let Ok(c) = self.root.canonicalize() {
            roots.push(c.display().to_string());
        }
        for r in roots.iter_mut() {
            while r.len() > 1 && r.ends_with('/') {
                r.pop();
            }
        }
        roots.sort_by_key(|r| std::cmp::Reverse(r.len()));
        for r in roots {
            if !r.is_empty() && r != self.title {
                out = out.replace(&r, &self.title);
            }
        }
        out
    }

    /// The open snapshot's metadata.
    pub fn metadata(&self) -> Option<&SnapshotMetadata> {
        self.snapshot.as_ref().map(|(_, m)| m.as_ref())
    }

    /// Indexes of the snapshots that pass the filter.
    pub fn visible_snapshots(&self) -> Vec<usize> {
        let f = &self.filters[0];
        (0..self.snapshots.len())
            .filter(|&i| f.is_empty() || self.snapshots[i].label.contains(f.as_str()))
            .collect()
    }

    /// Indexes of the operators that pass the filter.
    pub fn visible_operators(&self) -> Vec<usize> {
        let Some(m) = self.metadata() else {
            return Vec::new();
        };
        let f = &self.filters[1];
        (0..m.operators.len())
            .filter(|&i| f.is_empty() || m.operators[i].uid.contains(f.as_str()))
            .collect()
    }

    /// The selected operator.
    pub fn operator(&self) -> Option<&OperatorMetadata> {
        let i = *self.visible_operators().get(self.sel[1])?;
        self.metadata().map(|m| &m.operators[i])
    }

    /// States of the selected operator that pass the filter: keyed, then operator state.
    pub fn visible_states(&self) -> Vec<StateItem> {
        let Some(o) = self.operator() else {
            return Vec::new();
        };
        let f = &self.filters[2];
        let keyed = (0..o.keyed_states.len())
            .filter(|&i| f.is_empty() || o.keyed_states[i].name.contains(f.as_str()))
            .map(StateItem::Keyed);
        let ops = (0..o.operator_states.len())
            .filter(|&i| f.is_empty() || o.operator_states[i].name.contains(f.as_str()))
            .map(StateItem::Operator);
        keyed.chain(ops).collect()
    }

    /// The selected state.
    pub fn state(&self) -> Option<StateItem> {
        self.visible_states().get(self.sel[2]).copied()
    }

    fn list_len(&self) -> usize {
        match self.screen {
            Screen::Snapshots => self.visible_snapshots().len(),
            Screen::Operators => self.visible_operators().len(),
            Screen::States => self.visible_states().len(),
            Screen::Entries => self.page_rows().len(),
            Screen::Diff => self.diff.as_ref().map_or(0, |d| d.visible.len()),
            Screen::OpState => self.opstate.as_ref().map_or(0, |v| v.visible.len()),
        }
    }

    /// Names of the rows of a list screen (what `/` matches there).
    fn list_names(&self) -> Vec<String> {
        match self.screen {
            Screen::Snapshots => self
                .visible_snapshots()
                .into_iter()
                .map(|i| self.snapshots[i].label.clone())
                .collect(),
            Screen::Operators => {
                let m = self.metadata();
                self.visible_operators()
                    .into_iter()
                    .filter_map(|i| m.map(|m| m.operators[i].uid.clone()))
                    .collect()
            }
            Screen::States => {
                let o = self.operator();
                self.visible_states()
                    .into_iter()
                    .filter_map(|s| {
                        o.map(|o| match s {
                            StateItem::Keyed(i) => o.keyed_states[i].name.clone(),
                            StateItem::Operator(i) => o.operator_states[i].name.clone(),
                        })
                    })
                    .collect()
            }
            Screen::Entries | Screen::Diff | Screen::OpState => Vec::new(),
        }
    }

    fn page_rows(&self) -> &[Row] {
        self.entries
            .as_ref()
            .and_then(|e| e.page.as_ref())
            .map_or(&[], |p| p.rows.as_slice())
    }

    /// Whether the metadata pane shows at the current size.
    pub fn meta_visible(&self) -> bool {
        match self.meta {
            MetaPane::Auto => self.size.1 >= SMALL_HEIGHT,
            MetaPane::Shown => true,
            MetaPane::Hidden => false,
        }
    }

    /// Entries per page: the rows the entries table shows at the current size.
    pub fn page_size(&self) -> usize {
        let (w, h) = self.size;
        let body = h.saturating_sub(CHROME_ROWS);
        let rows = if self.meta_visible() && w < super::view::SIDE_PANE_WIDTH && h >= SMALL_HEIGHT {
            body - super::view::bottom_pane_height(h.saturating_sub(2))
        } else {
            body
        };
        usize::from(rows.max(1))
    }

    fn query(&self) -> Option<Query> {
        let e = self.entries.as_ref()?;
        Some(Query {
            uid: e.uid.clone(),
            state: e.desc.name.clone(),
            filter: self.filters[3].clone(),
            page_size: self.page_size(),
        })
    }

    fn page_request(&mut self, at: PageAt, select: usize, pending: Pending) -> Option<Request> {
        let query = self.query()?;
        let gen = self.next_gen(&format!("reading {:?}", query.state));
        self.pending = Some(pending);
        Some(Request::Page { gen, query, at, select })
    }

    fn search_request(&mut self, text: String, exact_first: bool, direction: Direction) -> Option<Request> {
        let query = self.query()?;
        let from = self
            .entries
            .as_ref()
            .and_then(|e| e.selected())
            .map(|r| r.cursor.clone())
            .unwrap_or_default();
        let gen = self.next_gen(&format!("searching {:?}", query.state));
        self.pending = Some(Pending::Fresh(None));
        Some(Request::Search {
            gen,
            query,
            text,
            exact_first,
            from,
            direction,
        })
    }

    /// Moves a list selection to the next (or previous) row whose name contains `text`.
    fn list_search(&mut self, text: &str, direction: Direction, include_current: bool) {
        let names = self.list_names();
        let n = names.len();
        if n == 0 {
            return;
        }
        let slot = self.screen.slot();
        let cur = self.sel[slot].min(n - 1);
        let start = if include_current { 0 } else { 1 };
        let hit = (start..=n).find_map(|step| {
            let i = match direction {
                Direction::Next => (cur + step) % n,
                Direction::Prev => (cur + n * 2 - step) % n,
            };
            names[i].contains(text).then_some(i)
        });
        match hit {
            Some(i) => {
                self.sel[slot] = i;
                self.status = None;
            }
            None => self.status = Some(format!("not found: {text}")),
        }
    }

    fn enter(&mut self) -> Option<Request> {
        match self.screen {
            Screen::Snapshots => {
                let i = *self.visible_snapshots().get(self.sel[0])?;
                let row = self.snapshots[i].clone();
                self.snapshot = None;
                self.open_error = None;
                self.sel[1] = 0;
                self.sel[2] = 0;
                self.filters[1].clear();
                self.filters[2].clear();
                self.screen = Screen::Operators;
                let gen = self.next_gen("reading _metadata");
                self.snapshot_label = Some(row.label.clone());
                Some(Request::Open { gen, path: row.path })
            }
            Screen::Operators => {
                self.operator()?;
                self.screen = Screen::States;
                self.sel[2] = 0;
                self.filters[2].clear();
                None
            }
            Screen::States => {
                let o = self.operator()?.clone();
                match self.state()? {
                    StateItem::Keyed(i) => {
                        let desc = o.keyed_states[i].clone();
                        let totals = state_totals(&o);
                        let approx = o.subtasks.iter().any(|s| s.native.is_some() || s.changelog.is_some());
                        self.entries = Some(EntriesView {
                            uid: o.uid.clone(),
                            total: totals.get(&desc.name).map(|t| (t.0, approx)),
                            desc,
                            page: None,
                            sel: 0,
                            first_index: None,
                            error: None,
                        });
                        self.filters[3].clear();
                        self.screen = Screen::Entries;
                        self.page_request(PageAt::From(Cursor::START), 0, Pending::Fresh(Some(0)))
                    }
                    StateItem::Operator(i) => {
                        let desc = o.operator_states[i].clone();
                        let state = desc.name.clone();
                        self.opstate = Some(OpStateView::new(desc));
                        self.filters[5].clear();
                        self.screen = Screen::OpState;
                        let gen = self.next_gen(&format!("reading {state:?}"));
                        Some(Request::OpState {
                            gen,
                            uid: o.uid.clone(),
                            state,
                            keep: self.op_keep,
                        })
                    }
                }
            }
            Screen::Entries | Screen::Diff | Screen::OpState => None,
        }
    }

    /// Out one level; a read in progress is cancelled (the request returned tells the
    /// worker at once).
    fn back(&mut self) -> Option<Request> {
        self.status = None;
        match self.screen {
            Screen::Diff => {
                if self.diff.as_ref().is_some_and(|d| d.from_list) {
                    self.diff = None;
                    self.screen = Screen::Snapshots;
                    return self.cancel_loading();
                }
                self.status = Some("opened with --diff: nothing to go back to (q quits)".into());
            }
            Screen::Snapshots if self.diff_base.is_some() => {
                self.diff_base = None;
                self.status = Some("base unmarked".into());
            }
            Screen::Entries => {
                self.entries = None;
                self.screen = Screen::States;
                return self.cancel_loading();
            }
            Screen::OpState => {
                self.opstate = None;
                self.screen = Screen::States;
                return self.cancel_loading();
            }
            Screen::States => self.screen = Screen::Operators,
            Screen::Operators if self.dir_mode => {
                self.screen = Screen::Snapshots;
                return self.cancel_loading();
            }
            _ => {}
        }
        None
    }

    /// Forgets the outstanding request (its answer will be ignored) and returns a
    /// [`Request::Cancel`] of a newer generation, so that the worker stops it now rather
    /// than at the next request.
    fn cancel_loading(&mut self) -> Option<Request> {
        self.loading.as_ref()?;
        self.gen += 1;
        self.loading = None;
        self.pending = None;
        Some(Request::Cancel { gen: self.gen })
    }

    /// Moves in the operator state list.
    fn opstate_move(&mut self, action: &Action) {
        let page = super::opstate::page_rows(self);
        let Some(v) = self.opstate.as_mut() else {
            return;
        };
        let sel = super::rows::move_target(action, v.sel, v.visible.len(), page);
        v.select(sel, page);
    }

    /// `/`, `n`, `N` in the operator state list.
    fn opstate_search(&mut self, text: &str, forward: bool, include_current: bool) {
        let page = super::opstate::page_rows(self);
        let Some(v) = self.opstate.as_mut() else {
            return;
        };
        match v.find(text, forward, include_current) {
            Some(i) => {
                v.select(i, page);
                self.status = None;
            }
            None => self.status = Some(format!("not found: {text}")),
        }
    }

    /// Scrolls the help overlay by `by` lines (clamped to its content at the current size).
    fn help_scroll_by(&mut self, by: i32) {
        let max = super::view::help_max_scroll(self.size);
        let to = (i32::from(self.help_scroll) + by).clamp(0, i32::from(max));
        self.help_scroll = to as u16;
    }

    fn entries_move(&mut self, action: &Action) -> Option<Request> {
        if self.loading.is_some() {
            return None;
        }
        let e = self.entries.as_ref()?;
        let page = e.page.as_ref();
        let len = page.map_or(0, |p| p.rows.len());
        let more = page.is_some_and(|p| p.more);
        let at_start = page.is_none_or(|p| p.start == Cursor::START) || e.first_index == Some(0);
        let start = page.map(|p| p.start.clone()).unwrap_or_default();
        let next = page
            .and_then(|p| p.rows.last())
            .map(|r| Cursor {
                key_group: r.cursor.key_group,
                index: r.cursor.index + 1,
            })
            .unwrap_or_default();
        let sel = e.sel;
        match action {
            Action::Down if sel + 1 < len => self.set_entry_sel(sel + 1),
            Action::Down if more => return self.page_request(PageAt::From(next), 0, Pending::Next),
            Action::Up if sel > 0 => self.set_entry_sel(sel - 1),
            Action::Up if !at_start => return self.page_request(PageAt::Before(start), usize::MAX, Pending::Prev),
            Action::PageDown if more => return self.page_request(PageAt::From(next), 0, Pending::Next),
            Action::PageDown => self.set_entry_sel(len.saturating_sub(1)),
            Action::PageUp if !at_start => return self.page_request(PageAt::Before(start), 0, Pending::Prev),
            Action::PageUp => self.set_entry_sel(0),
            Action::Top => return self.page_request(PageAt::From(Cursor::START), 0, Pending::Fresh(Some(0))),
            Action::Bottom => return self.page_request(PageAt::Last, usize::MAX, Pending::Last),
            _ => {}
        }
        None
    }

    fn set_entry_sel(&mut self, sel: usize) {
        if let Some(e) = self.entries.as_mut() {
            e.sel = sel;
        }
    }

    fn list_move(&mut self, action: &Action) {
        let len = self.list_len();
        let slot = self.screen.slot();
        let step = usize::from(self.page_size().max(1) as u16);
        let cur = self.sel[slot];
        self.sel[slot] = match action {
            Action::Up => cur.saturating_sub(1),
            Action::Down => cur + 1,
            Action::Top => 0,
            Action::Bottom => len.saturating_sub(1),
            Action::PageUp => cur.saturating_sub(step),
            Action::PageDown => cur + step,
            _ => cur,
        }
        .min(len.saturating_sub(1));
    }

    fn loaded(&mut self, msg: Msg) -> Option<Request> {
        if msg.gen() != self.gen {
            return None;
        }
        match msg {
            Msg::Progress {
                what,
                done,
                total,
                unit,
                ..
            } => {
                self.loading = Some(Loading {
                    what,
                    done,
                    total,
                    unit,
                });
            }
            Msg::OpState { result, .. } => {
                self.loading = None;
                let result = result.map_err(|e| self.sanitize(&e));
                let page = super::opstate::page_rows(self);
                let filter = self.filters[5].clone();
                let v = self.opstate.as_mut()?;
                match result {
                    Ok(read) => {
                        v.read = Some(read);
                        v.error = None;
                        v.refilter(&filter);
                        v.scroll(page);
                    }
                    Err(e) => v.error = Some(e),
                }
            }
            Msg::Scanned { snapshots, .. } => {
                self.loading = None;
                self.snapshots = snapshots;
                self.scanned = true;
                self.sel[0] = self.sel[0].min(self.snapshots.len().saturating_sub(1));
            }
            Msg::Opened { result, .. } => {
                self.loading = None;
                let label = self.snapshot_label.clone().unwrap_or_else(|| self.title.clone());
                match result {
                    Ok(m) => self.snapshot = Some((label, m)),
                    Err(e) => self.open_error = Some(self.sanitize(&e)),
                }
            }
            Msg::Page {
                result, select, note, ..
            } => {
                self.loading = None;
                let pending = self.pending.take();
                self.status = note;
                let result = result.map_err(|err| self.sanitize(&err));
                let filtered = !self.filters[3].is_empty();
                let e = self.entries.as_mut()?;
                match result {
                    Err(err) => e.error = Some(err),
                    Ok(page) => {
                        e.error = None;
                        let old_first = e.first_index;
                        let old_len = e.page.as_ref().map_or(0, |p| p.rows.len()) as u64;
                        let n = page.rows.len();
                        match pending {
                            Some(Pending::Next) | Some(Pending::Prev) if n == 0 => {
                                if let Some(p) = e.page.as_mut() {
                                    if pending == Some(Pending::Next) {
                                        p.more = false;
                                    }
                                }
                                self.status = Some(if pending == Some(Pending::Next) {
                                    "end of entries".into()
                                } else {
                                    "start of entries".into()
                                });
                                return None;
                            }
                            Some(Pending::Next) => e.first_index = old_first.map(|f| f + old_len),
                            Some(Pending::Prev) => e.first_index = old_first.and_then(|f| f.checked_sub(n as u64)),
                            Some(Pending::Last) => {
                                e.first_index = match e.total {
                                    Some((t, false)) if !filtered => t.checked_sub(n as u64),
                                    _ => None,
                                }
                            }
                            Some(Pending::Fresh(f)) => e.first_index = f,
                            None => {}
                        }
                        if page.start == Cursor::START && pending != Some(Pending::Last) {
                            e.first_index = Some(0);
                        }
                        e.sel = if select == usize::MAX {
                            n.saturating_sub(1)
                        } else {
                            select.min(n.saturating_sub(1))
                        };
                        e.page = Some(page);
                    }
                }
            }
            Msg::NotFound { text, .. } => {
                self.loading = None;
                self.pending = None;
                self.status = Some(format!("not found: {text}"));
            }
            Msg::Diff { part, .. } => {
                let page = super::diffview::page_rows(self);
                let filter = self.filters[4].clone();
                let dv = self.diff.as_mut()?;
                match part {
                    DiffPart::Rows(rows) => dv.push(rows, &filter),
                    DiffPart::Done(end) => {
                        self.loading = None;
                        dv.end = Some(end);
                    }
                }
                dv.scroll(page);
            }
        }
        None
    }
}

/// Applies `action` to `app`; returns the read it calls for, if any.
pub fn update(app: &mut App, action: Action) -> Option<Request> {
    match action {
        Action::Quit => {
            app.quit = true;
            None
        }
        Action::Loaded(msg) => app.loaded(msg),
        Action::Tick => {
            if app.loading.is_some() {
                app.tick = app.tick.wrapping_add(1);
            }
            None
        }
        Action::Resize(w, h) => {
            let before = app.page_size();
            app.size = (w, h);
            app.help_scroll = app.help_scroll.min(super::view::help_max_scroll(app.size));
            if app.screen == Screen::OpState {
                let page = super::opstate::page_rows(app);
                if let Some(v) = app.opstate.as_mut() {
                    v.scroll(page);
                }
            }
            if app.screen == Screen::Diff {
                let page = super::diffview::page_rows(app);
                if let Some(dv) = app.diff.as_mut() {
                    dv.scroll(page);
                }
            }
            if app.screen == Screen::Entries && app.page_size() != before && app.loading.is_none() {
                let e = app.entries.as_ref()?;
                let start = e.page.as_ref()?.start.clone();
                let first = e.first_index;
                let sel = e.sel;
                return app.page_request(PageAt::From(start), sel, Pending::Fresh(first));
            }
            None
        }
        Action::ToggleHelp => {
            app.help = !app.help;
            app.help_scroll = 0;
            None
        }
        Action::ToggleHex => {
            app.hex = !app.hex;
            None
        }
        Action::ToggleMeta => {
            app.meta = if app.meta_visible() {
                MetaPane::Hidden
            } else {
                MetaPane::Shown
            };
            update(app, Action::Resize(app.size.0, app.size.1))
        }
        Action::StartSearch | Action::StartFilter => {
            let kind = if matches!(action, Action::StartSearch) {
                PromptKind::Search
            } else {
                PromptKind::Filter
            };
            let text = match kind {
                PromptKind::Search => String::new(),
                PromptKind::Filter => app.filters[app.screen.slot()].clone(),
            };
            app.prompt = Some(Prompt { kind, text });
            None
        }
        Action::PromptInput(c) => {
            if let Some(p) = app.prompt.as_mut() {
                p.text.push(c);
            }
            None
        }
        Action::PromptBackspace => {
            if let Some(p) = app.prompt.as_mut() {
                p.text.pop();
            }
            None
        }
        Action::PromptCancel => {
            app.prompt = None;
            None
        }
        Action::PromptSubmit => {
            let p = app.prompt.take()?;
            match p.kind {
                PromptKind::Search => {
                    if p.text.is_empty() {
                        return None;
                    }
                    app.search = Some(p.text.clone());
                    if app.screen == Screen::Diff {
                        app.diff_search(&p.text, true, true);
                        None
                    } else if app.screen == Screen::OpState {
                        app.opstate_search(&p.text, true, true);
                        None
                    } else if app.screen == Screen::Entries {
                        app.search_request(p.text, true, Direction::Next)
                    } else {
                        app.list_search(&p.text, Direction::Next, true);
                        None
                    }
                }
                PromptKind::Filter => {
                    let slot = app.screen.slot();
                    app.filters[slot] = p.text;
                    app.status = None;
                    if app.screen == Screen::Diff {
                        let page = super::diffview::page_rows(app);
                        let filter = app.filters[slot].clone();
                        if let Some(dv) = app.diff.as_mut() {
                            dv.sel = 0;
                            dv.top = 0;
                            dv.refilter(&filter);
                            dv.scroll(page);
                        }
                        None
                    } else if app.screen == Screen::OpState {
                        let page = super::opstate::page_rows(app);
                        let filter = app.filters[slot].clone();
                        if let Some(v) = app.opstate.as_mut() {
                            v.sel = 0;
                            v.top = 0;
                            v.refilter(&filter);
                            v.scroll(page);
                        }
                        None
                    } else if app.screen == Screen::Entries {
                        app.page_request(PageAt::From(Cursor::START), 0, Pending::Fresh(Some(0)))
                    } else {
                        app.sel[slot] = 0;
                        None
                    }
                }
            }
        }
        Action::SearchNext | Action::SearchPrev => {
            let direction = if matches!(action, Action::SearchNext) {
                Direction::Next
            } else {
                Direction::Prev
            };
            let Some(text) = app.search.clone() else {
                app.status = Some("no search yet: press / to search".into());
                return None;
            };
            if app.screen == Screen::Diff {
                app.diff_search(&text, direction == Direction::Next, false);
                None
            } else if app.screen == Screen::OpState {
                app.opstate_search(&text, direction == Direction::Next, false);
                None
            } else if app.screen == Screen::Entries {
                if app.loading.is_some() {
                    return None;
                }
                app.search_request(text, false, direction)
            } else {
                app.list_search(&text, direction, false);
                None
            }
        }
        Action::Enter => app.enter(),
        Action::Back => app.back(),
        Action::MarkDiff => app.mark_diff(),
        Action::Up | Action::Down | Action::PageUp | Action::PageDown if app.help => {
            let page = i32::from(super::view::help_height(app.size).max(1));
            app.help_scroll_by(match action {
                Action::Up => -1,
                Action::Down => 1,
                Action::PageUp => -page,
                _ => page,
            });
            None
        }
        Action::Up | Action::Down | Action::Top | Action::Bottom | Action::PageUp | Action::PageDown => {
            if app.screen == Screen::OpState {
                app.opstate_move(&action);
                None
            } else if app.screen == Screen::Diff {
                app.diff_move(&action);
                None
            } else if app.screen == Screen::Entries {
                app.entries_move(&action)
            } else {
                app.list_move(&action);
                None
            }
        }
    }
}
