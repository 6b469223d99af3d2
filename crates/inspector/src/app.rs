//! The inspector's state and its pure `update`: no terminal, no threads, no I/O. Reads are
//! asked for by returning a [`Request`]; their results come back as [`Action::Loaded`].
//!
//! The [`App`] holds the screen shown (a [`ScreenState`]) and the screens under it that Esc
//! goes back to; `update` hands the keys that move, search, filter and page to the shown
//! screen's [`ScreenModel`] once, and turns what it asks for into requests.

use super::screens::diff::DiffView;
use super::screens::entries::{EntriesView, Pending};
use super::screens::opstate::OpStateView;
use super::screens::{Ctx, ListModel, Outcome, Read, Screen, ScreenModel, ScreenState, StateItem};
use super::worker::diff::{DiffSide, DIFF_KEEP};
use super::worker::opstate::OP_KEEP;
use super::worker::{Direction, Msg, Request, SnapshotRow};
use crate::error::Problems;
use statekit_format::{OperatorMetadata, SnapshotMetadata};
use statekit_snapshot::describe::state_totals;
use std::path::{Path, PathBuf};
use std::sync::Arc;

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

/// Everything the screen shows.
#[derive(Clone, Debug)]
pub struct App {
    /// What was opened, as shown in the header.
    pub title: String,
    /// The path it was opened by.
    pub root: PathBuf,
    /// Whether the root is a directory of snapshots (else one snapshot).
    pub dir_mode: bool,
    /// The screen shown.
    current: ScreenState,
    /// The screens Esc goes back to, the nearest last.
    parents: Vec<ScreenState>,
    /// Snapshots under the root (dir mode).
    pub snapshots: Vec<SnapshotRow>,
    /// Whether the scan finished.
    pub scanned: bool,
    /// The open snapshot: its label and metadata.
    pub snapshot: Option<(String, Arc<SnapshotMetadata>)>,
    /// Why the snapshot could not be opened.
    pub open_error: Option<String>,
    /// Rows of an operator state kept at most.
    pub op_keep: usize,
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
    snapshot_label: Option<String>,
    /// The open snapshot's path (from the list; `root` when one snapshot was opened).
    snapshot_path: Option<PathBuf>,
    /// The open snapshot's background verification, once finished (`Err`: its problems).
    pub verified: Option<Result<(), Problems>>,
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
    /// Ctrl-U in a prompt: clears it.
    PromptClear,
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

impl App {
    /// The state for `path` (shown as `title`) and the first request: scan a directory or
    /// open a snapshot (only its `_metadata`).
    pub fn new(path: &Path, title: &str) -> (App, Request) {
        let is_snapshot = crate::open::is_snapshot_path(path);
        Self::new_at(path, title, path.is_dir() && !is_snapshot)
    }

    /// [`App::new`] where the caller has found out whether `path` is a directory of snapshots
    /// (`dir_mode`) or one snapshot: `path` may be an object-store URL, which the file system
    /// cannot answer for.
    pub fn new_at(path: &Path, title: &str, dir_mode: bool) -> (App, Request) {
        let mut app = App {
            title: title.to_string(),
            root: path.to_path_buf(),
            dir_mode,
            current: if dir_mode {
                ScreenState::Snapshots(ListModel::new())
            } else {
                ScreenState::Operators(ListModel::new())
            },
            parents: Vec::new(),
            snapshots: Vec::new(),
            scanned: false,
            snapshot: None,
            open_error: None,
            op_keep: OP_KEEP,
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
            snapshot_label: None,
            snapshot_path: None,
            verified: None,
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

    /// Opens the diff screen on `sides` (over the snapshot list when `from_list`, else in
    /// place of everything) and asks for the comparison.
    fn diff_request(&mut self, sides: [DiffSide; 2], from_list: bool) -> Request {
        self.status = None;
        let view = ScreenState::Diff(DiffView::new(sides.clone(), from_list));
        if from_list {
            self.push(view);
        } else {
            self.parents.clear();
            self.current = view;
        }
        let gen = self.next_gen("comparing");
        Request::Diff {
            gen,
            sides,
            keep: self.diff_keep,
        }
    }

    /// Shows `screen` over the current one (Esc comes back).
    fn push(&mut self, screen: ScreenState) {
        let under = std::mem::replace(&mut self.current, screen);
        self.parents.push(under);
    }

    /// Back to the screen under the current one.
    fn pop(&mut self) {
        if let Some(under) = self.parents.pop() {
            self.current = under;
        }
    }

    /// Which screen shows.
    pub fn screen(&self) -> Screen {
        self.current.kind()
    }

    /// The model of the screen shown.
    pub fn current(&self) -> &ScreenState {
        &self.current
    }

    /// The screen shown and the ones under it, the shown one first.
    fn screens(&self) -> impl Iterator<Item = &ScreenState> {
        std::iter::once(&self.current).chain(self.parents.iter().rev())
    }

    /// The nearest screen of `kind` (the shown one, or one under it).
    fn find(&self, kind: Screen) -> Option<&ScreenState> {
        self.screens().find(|s| s.kind() == kind)
    }

    /// The nearest list of `kind`, to change.
    fn find_list_mut(&mut self, kind: Screen) -> Option<&mut ListModel> {
        std::iter::once(&mut self.current)
            .chain(self.parents.iter_mut().rev())
            .find(|s| s.kind() == kind)
            .and_then(ScreenState::list_mut)
    }

    /// The entries screen, when it shows.
    pub fn entries(&self) -> Option<&EntriesView> {
        match &self.current {
            ScreenState::Entries(e) => Some(e),
            _ => None,
        }
    }

    /// The operator state screen, when it shows.
    pub fn opstate(&self) -> Option<&OpStateView> {
        match &self.current {
            ScreenState::OpState(v) => Some(v),
            _ => None,
        }
    }

    /// The diff screen, when it shows.
    pub fn diff(&self) -> Option<&DiffView> {
        match &self.current {
            ScreenState::Diff(d) => Some(d),
            _ => None,
        }
    }

    /// The selected row of the list shown (snapshots, operators, states), among the rows
    /// that pass its filter.
    pub fn sel(&self) -> usize {
        self.current.list().map_or(0, |l| l.sel)
    }

    /// Selects row `sel` of the list shown (among the rows that pass its filter).
    pub fn set_sel(&mut self, sel: usize) {
        if let Some(l) = self.current.list_mut() {
            l.sel = sel;
        }
    }

    /// The filter of the screen shown (empty: off).
    pub fn filter(&self) -> &str {
        self.current.model().filter()
    }

    /// What the models know of the app at its current size.
    pub fn ctx(&self) -> Ctx {
        Ctx {
            size: self.size,
            meta_visible: self.meta_visible(),
            loading: self.loading.is_some(),
        }
    }

    /// Rows a page of the screen shown holds (PgUp/PgDn move by it).
    pub fn page(&self) -> usize {
        self.current.model().page(&self.ctx())
    }

    /// `d`: in the snapshot list, marks the selected snapshot as the base, unmarks it, or
    /// diffs the base with the selected one.
    fn mark_diff(&mut self) -> Option<Request> {
        if self.screen() != Screen::Snapshots {
            self.status = Some(match self.screen() {
                Screen::Diff => "d: this is a diff; Esc goes back".into(),
                _ => "d diffs two snapshots: in the snapshot list (inspect a directory), or `statekit inspect A --diff B`"
                    .into(),
            });
            return None;
        }
        let i = self.current.list()?.selected()?;
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

    /// The open snapshot's status in `statekit ls`'s words: `not verified` until the
    /// background verification finished, then `ok` or `BROKEN`.
    pub fn snapshot_status(&self) -> &'static str {
        crate::open::status_word(true, false, self.verified.as_ref())
    }

    /// Indexes of the operators that pass the filter.
    pub fn visible_operators(&self) -> Vec<usize> {
        self.find(Screen::Operators)
            .and_then(ScreenState::list)
            .map_or_else(Vec::new, |l| l.visible.clone())
    }

    /// The selected operator.
    pub fn operator(&self) -> Option<&OperatorMetadata> {
        let i = self.find(Screen::Operators)?.list()?.selected()?;
        self.metadata().map(|m| &m.operators[i])
    }

    /// States of the selected operator that pass the filter: keyed, then operator state.
    pub fn visible_states(&self) -> Vec<StateItem> {
        let (Some(o), Some(l)) = (self.operator(), self.find(Screen::States).and_then(ScreenState::list)) else {
            return Vec::new();
        };
        let items = StateItem::all(o);
        l.visible.iter().map(|&i| items[i]).collect()
    }

    /// The selected state.
    pub fn state(&self) -> Option<StateItem> {
        let i = self.find(Screen::States)?.list()?.selected()?;
        StateItem::all(self.operator()?).get(i).copied()
    }

    /// Whether the metadata pane shows at the current size.
    pub fn meta_visible(&self) -> bool {
        match self.meta {
            MetaPane::Auto => self.size.1 >= super::draw::SMALL_HEIGHT,
            MetaPane::Shown => true,
            MetaPane::Hidden => false,
        }
    }

    /// Entries per page: the rows the entries table shows at the current size.
    pub fn page_size(&self) -> usize {
        self.ctx().page_size()
    }

    /// The request for what the screen shown asked: a page or a search of the entries, or
    /// the status line's answer to a search.
    fn apply(&mut self, outcome: Outcome, text: &str) -> Option<Request> {
        match outcome {
            Outcome::Done => None,
            Outcome::Found => {
                self.status = None;
                None
            }
            Outcome::NotFound => {
                self.status = Some(format!("not found: {text}"));
                None
            }
            Outcome::Read(read) => self.read_request(read),
        }
    }

    /// The worker request for `read` of the entries screen.
    fn read_request(&mut self, read: Read) -> Option<Request> {
        let page_size = self.page_size();
        let ScreenState::Entries(e) = &self.current else {
            return None;
        };
        let query = e.query(page_size);
        let from = e.selected().map(|r| r.position.clone()).unwrap_or_default();
        let (req, pending) = match read {
            Read::Page { at, select, pending } => {
                let gen = self.next_gen(&format!("reading {:?}", query.state));
                (Request::Page { gen, query, at, select }, pending)
            }
            Read::Search {
                text,
                exact_first,
                direction,
            } => {
                let gen = self.next_gen(&format!("searching {:?}", query.state));
                let req = Request::Search {
                    gen,
                    query,
                    text,
                    exact_first,
                    from,
                    direction,
                };
                (req, Pending::Fresh(None))
            }
        };
        if let ScreenState::Entries(e) = &mut self.current {
            e.pending = Some(pending);
        }
        Some(req)
    }

    fn enter(&mut self) -> Option<Request> {
        match self.screen() {
            Screen::Snapshots => {
                let i = self.current.list()?.selected()?;
                let row = self.snapshots[i].clone();
                self.snapshot = None;
                self.open_error = None;
                self.push(ScreenState::Operators(ListModel::new()));
                let gen = self.next_gen("reading _metadata");
                self.snapshot_label = Some(row.label.clone());
                self.snapshot_path = Some(row.path.clone());
                self.verified = row.verified.clone();
                Some(Request::Open { gen, path: row.path })
            }
            Screen::Operators => {
                let o = self.operator()?;
                let names = StateItem::all(o).into_iter().map(|s| s.name(o).to_string()).collect();
                self.push(ScreenState::States(ListModel::of(names)));
                None
            }
            Screen::States => {
                let o = self.operator()?.clone();
                match self.state()? {
                    StateItem::Keyed(i) => {
                        let desc = o.keyed_states[i].clone();
                        let totals = state_totals(&o);
                        let approx = o
                            .subtasks
                            .iter()
                            .any(|s| s.keyed.native().is_some() || s.keyed.changelog().is_some());
                        let total = totals.get(&desc.name).map(|t| (t.entries, approx));
                        self.push(ScreenState::Entries(EntriesView::new(o.uid.clone(), desc, total)));
                        self.apply(EntriesView::first_page(), "")
                    }
                    StateItem::Operator(i) => {
                        let desc = o.operator_states[i].clone();
                        let state = desc.name.clone();
                        self.push(ScreenState::OpState(OpStateView::new(desc)));
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
        match self.screen() {
            Screen::Diff => {
                if self.diff().is_some_and(|d| d.from_list) {
                    self.pop();
                    return self.cancel_loading();
                }
                self.status = Some("opened with --diff: nothing to go back to (q quits)".into());
            }
            Screen::Snapshots if self.diff_base.is_some() => {
                self.diff_base = None;
                self.status = Some("base unmarked".into());
            }
            Screen::Entries | Screen::OpState => {
                self.pop();
                return self.cancel_loading();
            }
            Screen::States => self.pop(),
            Screen::Operators if self.dir_mode => {
                self.pop();
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
        if let ScreenState::Entries(e) = &mut self.current {
            e.pending = None;
        }
        Some(Request::Cancel { gen: self.gen })
    }

    /// Scrolls the help overlay by `by` lines (clamped to its content at the current size).
    fn help_scroll_by(&mut self, by: i32) {
        let max = super::draw::help_max_scroll(self.size);
        let to = (i32::from(self.help_scroll) + by).clamp(0, i32::from(max));
        self.help_scroll = to as u16;
    }

    fn loaded(&mut self, msg: Msg) -> Option<Request> {
        if let Msg::Verified { path, result } = msg {
            let result = result.map_err(|e| e.map_text(|t| self.sanitize(t)));
            for s in self.snapshots.iter_mut().filter(|s| s.path == path) {
                s.verified = Some(result.clone());
            }
            if path == self.root || self.snapshot_path.as_ref() == Some(&path) {
                self.verified = Some(result);
            }
            return None;
        }
        if msg.gen() != self.gen {
            return None;
        }
        let ctx = self.ctx();
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
                let result = result.map_err(|e| e.map_message(|m| self.sanitize(m)));
                if let ScreenState::OpState(v) = &mut self.current {
                    let page = v.page(&ctx);
                    v.arrived(result, page);
                }
            }
            Msg::Scanned { snapshots, error, .. } => {
                self.loading = None;
                if let Some(e) = error {
                    self.status = Some(format!("cannot list {}: {e}", self.root.display()));
                }
                let names = snapshots.iter().map(|s| s.label.clone()).collect();
                let n = snapshots.len();
                self.snapshots = snapshots;
                self.scanned = true;
                if let Some(l) = self.find_list_mut(Screen::Snapshots) {
                    l.set_names(names);
                    l.sel = l.sel.min(n.saturating_sub(1));
                }
            }
            Msg::Opened { result, .. } => {
                self.loading = None;
                let label = self.snapshot_label.clone().unwrap_or_else(|| self.title.clone());
                match result {
                    Ok(m) => {
                        let names = m.operators.iter().map(|o| o.uid.clone()).collect();
                        if let Some(l) = self.find_list_mut(Screen::Operators) {
                            l.set_names(names);
                        }
                        self.snapshot = Some((label, m));
                    }
                    Err(e) => self.open_error = Some(self.sanitize(e.message())),
                }
            }
            Msg::Page {
                result, select, note, ..
            } => {
                self.loading = None;
                self.status = note.map(|n| self.sanitize(&n));
                let result = result.map_err(|err| err.map_message(|m| self.sanitize(m)));
                if let ScreenState::Entries(e) = &mut self.current {
                    if let Some(s) = e.arrived(result, select) {
                        self.status = Some(s.to_string());
                    }
                }
            }
            Msg::NotFound { text, .. } => {
                self.loading = None;
                if let ScreenState::Entries(e) = &mut self.current {
                    e.pending = None;
                }
                self.status = Some(format!("not found: {text}"));
            }
            // Handled above, whatever the generation.
            Msg::Verified { .. } => {}
            Msg::Diff { part, .. } => {
                let ScreenState::Diff(dv) = &mut self.current else {
                    return None;
                };
                let page = dv.page(&ctx);
                if matches!(part, super::worker::diff::DiffPart::Done(_)) {
                    self.loading = None;
                }
                dv.arrived(part, page);
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
            let before = app.ctx();
            app.size = (w, h);
            app.help_scroll = app.help_scroll.min(super::draw::help_max_scroll(app.size));
            let ctx = app.ctx();
            let outcome = app.current.model_mut().resized(&before, &ctx);
            app.apply(outcome, "")
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
        Action::StartSearch
        | Action::StartFilter
        | Action::PromptInput(_)
        | Action::PromptBackspace
        | Action::PromptClear
        | Action::PromptCancel
        | Action::PromptSubmit => prompt_action(app, action),
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
            let ctx = app.ctx();
            let outcome = app.current.model_mut().search(&text, direction, false, &ctx);
            app.apply(outcome, &text)
        }
        Action::Enter => app.enter(),
        Action::Back => app.back(),
        Action::MarkDiff => app.mark_diff(),
        Action::Up | Action::Down | Action::PageUp | Action::PageDown if app.help => {
            let page = i32::from(super::draw::help_height(app.size).max(1));
            app.help_scroll_by(match action {
                Action::Up => -1,
                Action::Down => 1,
                Action::PageUp => -page,
                _ => page,
            });
            None
        }
        Action::Up | Action::Down | Action::Top | Action::Bottom | Action::PageUp | Action::PageDown => {
            let ctx = app.ctx();
            let outcome = app.current.model_mut().move_by(&action, &ctx);
            app.apply(outcome, "")
        }
    }
}

/// The actions of the search and filter prompt.
fn prompt_action(app: &mut App, action: Action) -> Option<Request> {
    match action {
        Action::StartSearch | Action::StartFilter => {
            let kind = if matches!(action, Action::StartSearch) {
                PromptKind::Search
            } else {
                PromptKind::Filter
            };
            // Opens empty (the filter in force shows in the title; an empty filter clears it).
            app.prompt = Some(Prompt {
                kind,
                text: String::new(),
            });
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
        Action::PromptClear => {
            if let Some(p) = app.prompt.as_mut() {
                p.text.clear();
            }
            None
        }
        Action::PromptCancel => {
            app.prompt = None;
            None
        }
        Action::PromptSubmit => {
            let p = app.prompt.take()?;
            let ctx = app.ctx();
            match p.kind {
                PromptKind::Search => {
                    if p.text.is_empty() {
                        return None;
                    }
                    app.search = Some(p.text.clone());
                    let outcome = app.current.model_mut().search(&p.text, Direction::Next, true, &ctx);
                    app.apply(outcome, &p.text)
                }
                PromptKind::Filter => {
                    app.status = None;
                    let outcome = app.current.model_mut().set_filter(p.text, &ctx);
                    app.apply(outcome, "")
                }
            }
        }
        _ => None,
    }
}
