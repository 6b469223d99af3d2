//! The screen models: one state per screen, and the one trait ([`ScreenModel`]) through which
//! `update` moves, searches, filters and pages whatever screen is shown.
//!
//! [`ScreenState`] holds the model of one screen; the [`App`](super::app::App) holds the one
//! shown and, under it, the screens Esc goes back to. A model owns its selection, filter and
//! rows; what it needs of the rest of the app (terminal size, whether the pane shows, whether
//! a read is in progress) comes in a [`Ctx`], and reads it needs come back as an
//! [`Outcome::Read`] that the app turns into a worker [`Request`](super::worker::Request).

pub mod diff;
pub mod entries;
pub mod opstate;
pub mod rows;

use super::app::Action;
use super::draw;
use super::worker::{Direction, PageAt};
use diff::DiffView;
use entries::{EntriesView, Pending};
use opstate::OpStateView;
use statekit_format::OperatorMetadata;

/// What the main area shows: the kind of a [`ScreenState`].
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

/// A row of the states list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StateItem {
    /// Keyed state, by index in the operator's keyed states.
    Keyed(usize),
    /// Operator state, by index in the operator's operator states.
    Operator(usize),
}

impl StateItem {
    /// The states of `o` as the states list shows them: keyed, then operator state.
    pub fn all(o: &OperatorMetadata) -> Vec<StateItem> {
        let keyed = (0..o.keyed_states.len()).map(StateItem::Keyed);
        keyed
            .chain((0..o.operator_states.len()).map(StateItem::Operator))
            .collect()
    }

    /// The state's name.
    pub fn name(self, o: &OperatorMetadata) -> &str {
        match self {
            StateItem::Keyed(i) => &o.keyed_states[i].name,
            StateItem::Operator(i) => &o.operator_states[i].name,
        }
    }
}

/// What a model knows of the app around it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ctx {
    /// Terminal size (columns, rows).
    pub size: (u16, u16),
    /// Whether the metadata pane shows.
    pub meta_visible: bool,
    /// Whether a read is in progress.
    pub loading: bool,
}

impl Ctx {
    /// Rows of the entries table (also the step of PgUp/PgDn in the name lists).
    pub fn page_size(&self) -> usize {
        draw::entries_rows(self.size, self.meta_visible)
    }

    /// The main area (columns, rows), as [`draw::render`] lays it out.
    pub fn main_area(&self) -> (u16, u16) {
        draw::main_area(self.size, self.meta_visible)
    }
}

/// A read a model asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Read {
    /// A page of entries.
    Page {
        /// Where.
        at: PageAt,
        /// Which row of it to select (`usize::MAX`: the last).
        select: usize,
        /// What to do with it when it comes.
        pending: Pending,
    },
    /// A search of the entries by key.
    Search {
        /// The text typed after `/`.
        text: String,
        /// Try `text` as an exact key first.
        exact_first: bool,
        /// Which way.
        direction: Direction,
    },
}

/// What a model did with an action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing more to do.
    Done,
    /// A search landed on a row (the status line clears).
    Found,
    /// A search found nothing (the status line says so).
    NotFound,
    /// The model needs the worker.
    Read(Read),
}

/// What every screen does with the keys that move, search, filter and page.
pub trait ScreenModel {
    /// Up, Down, Top, Bottom, PageUp, PageDown.
    fn move_by(&mut self, action: &Action, ctx: &Ctx) -> Outcome;
    /// `/` (`include_current`: the selected row may be the match) and `n` / `N`.
    fn search(&mut self, text: &str, direction: Direction, include_current: bool, ctx: &Ctx) -> Outcome;
    /// The filter (empty: off).
    fn filter(&self) -> &str;
    /// `f`: a new filter.
    fn set_filter(&mut self, text: String, ctx: &Ctx) -> Outcome;
    /// Rows a page of the screen holds (PgUp/PgDn move by it).
    fn page(&self, ctx: &Ctx) -> usize;
    /// The terminal was resized (or the pane toggled) from `before`: keep the selection in
    /// view.
    fn resized(&mut self, before: &Ctx, ctx: &Ctx) -> Outcome;
}

/// One screen's model.
#[derive(Clone, Debug)]
pub enum ScreenState {
    /// The snapshot list (names: their paths).
    Snapshots(ListModel),
    /// The operator list (names: their uids).
    Operators(ListModel),
    /// The states of an operator (names: keyed, then operator states, [`StateItem::all`]).
    States(ListModel),
    /// A page of entries of a keyed state.
    Entries(EntriesView),
    /// The differences of two snapshots.
    Diff(DiffView),
    /// The rows of an operator state.
    OpState(OpStateView),
}

impl ScreenState {
    /// Which screen it is.
    pub fn kind(&self) -> Screen {
        match self {
            ScreenState::Snapshots(_) => Screen::Snapshots,
            ScreenState::Operators(_) => Screen::Operators,
            ScreenState::States(_) => Screen::States,
            ScreenState::Entries(_) => Screen::Entries,
            ScreenState::Diff(_) => Screen::Diff,
            ScreenState::OpState(_) => Screen::OpState,
        }
    }

    /// The model, to dispatch to.
    pub fn model(&self) -> &dyn ScreenModel {
        match self {
            ScreenState::Snapshots(m) | ScreenState::Operators(m) | ScreenState::States(m) => m,
            ScreenState::Entries(m) => m,
            ScreenState::Diff(m) => m,
            ScreenState::OpState(m) => m,
        }
    }

    /// The model, to dispatch to.
    pub fn model_mut(&mut self) -> &mut dyn ScreenModel {
        match self {
            ScreenState::Snapshots(m) | ScreenState::Operators(m) | ScreenState::States(m) => m,
            ScreenState::Entries(m) => m,
            ScreenState::Diff(m) => m,
            ScreenState::OpState(m) => m,
        }
    }

    /// The name list of a list screen.
    pub fn list(&self) -> Option<&ListModel> {
        match self {
            ScreenState::Snapshots(m) | ScreenState::Operators(m) | ScreenState::States(m) => Some(m),
            _ => None,
        }
    }

    /// The name list of a list screen.
    pub fn list_mut(&mut self) -> Option<&mut ListModel> {
        match self {
            ScreenState::Snapshots(m) | ScreenState::Operators(m) | ScreenState::States(m) => Some(m),
            _ => None,
        }
    }
}

/// A list of names (snapshots, operators, states): the rows that contain the filter, and the
/// selected one among them.
#[derive(Clone, Debug, Default)]
pub struct ListModel {
    /// Every row's name (what `/` and `f` match).
    pub names: Vec<String>,
    /// Indexes (in `names`) of the rows that pass the filter.
    pub visible: Vec<usize>,
    /// Selected row (in `visible`).
    pub sel: usize,
    /// The filter (empty: off).
    pub filter: String,
}

impl ListModel {
    /// An empty list (its names come with [`ListModel::set_names`]).
    pub fn new() -> Self {
        ListModel::default()
    }

    /// A list of `names`, unfiltered, the first selected.
    pub fn of(names: Vec<String>) -> Self {
        let mut l = ListModel::new();
        l.set_names(names);
        l
    }

    /// Replaces the rows (the selection stays where it is).
    pub fn set_names(&mut self, names: Vec<String>) {
        self.names = names;
        self.refilter();
    }

    fn refilter(&mut self) {
        let f = self.filter.as_str();
        self.visible = (0..self.names.len())
            .filter(|&i| f.is_empty() || self.names[i].contains(f))
            .collect();
    }

    /// The selected row's index in `names`.
    pub fn selected(&self) -> Option<usize> {
        self.visible.get(self.sel).copied()
    }
}

impl ScreenModel for ListModel {
    fn move_by(&mut self, action: &Action, ctx: &Ctx) -> Outcome {
        let len = self.visible.len();
        let step = self.page(ctx).max(1);
        self.sel = rows::move_target(action, self.sel, len, step).min(len.saturating_sub(1));
        Outcome::Done
    }

    fn search(&mut self, text: &str, direction: Direction, include_current: bool, _: &Ctx) -> Outcome {
        let n = self.visible.len();
        if n == 0 {
            return Outcome::Done;
        }
        let forward = direction == Direction::Next;
        let names = &self.names;
        let visible = &self.visible;
        match rows::find_wrapping(n, self.sel, forward, include_current, |i| {
            names[visible[i]].contains(text)
        }) {
            Some(i) => {
                self.sel = i;
                Outcome::Found
            }
            None => Outcome::NotFound,
        }
    }

    fn filter(&self) -> &str {
        &self.filter
    }

    fn set_filter(&mut self, text: String, _: &Ctx) -> Outcome {
        self.filter = text;
        self.refilter();
        self.sel = 0;
        Outcome::Done
    }

    fn page(&self, ctx: &Ctx) -> usize {
        ctx.page_size()
    }

    fn resized(&mut self, _: &Ctx, _: &Ctx) -> Outcome {
        Outcome::Done
    }
}
