//! The entries screen's model: one page of a keyed state's entries at a time, read by the
//! worker ([`crate::worker`]) as the selection moves past either end of it.

use super::{Ctx, Outcome, Read, ScreenModel};
use crate::app::Action;
use crate::error::ReadError;
use crate::worker::{Cursor, Direction, Page, PageAt, Query, Row};
use statekit_core::StateDescriptor;

/// What the outstanding request will do with its page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pending {
    /// Replace the page; the first index is known when `Some`.
    Fresh(Option<u64>),
    /// The page after the one shown.
    Next,
    /// The page before the one shown.
    Prev,
    /// The last page.
    Last,
}

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
    /// The filter (empty: off): entries whose line contains it.
    pub filter: String,
    /// What the outstanding read is for.
    pub(crate) pending: Option<Pending>,
}

impl EntriesView {
    /// State `desc` of operator `uid`, nothing read yet.
    pub fn new(uid: String, desc: StateDescriptor, total: Option<(u64, bool)>) -> Self {
        EntriesView {
            uid,
            total,
            desc,
            page: None,
            sel: 0,
            first_index: None,
            error: None,
            filter: String::new(),
            pending: None,
        }
    }

    /// The selected entry.
    pub fn selected(&self) -> Option<&Row> {
        self.page.as_ref().and_then(|p| p.rows.get(self.sel))
    }

    /// What a read of this state reads, `page_size` entries a page.
    pub fn query(&self, page_size: usize) -> Query {
        Query {
            uid: self.uid.clone(),
            state: self.desc.name.clone(),
            filter: self.filter.clone(),
            page_size,
        }
    }

    /// The read of the first page.
    pub fn first_page() -> Outcome {
        page(PageAt::From(Cursor::START), 0, Pending::Fresh(Some(0)))
    }

    /// Takes a page (or the error that stopped reading it), selecting row `select`
    /// (`usize::MAX`: the last); returns a note for the status line when the page was empty
    /// and the one shown stays.
    pub fn arrived(&mut self, result: Result<Page, ReadError>, select: usize) -> Option<&'static str> {
        let pending = self.pending.take();
        let filtered = !self.filter.is_empty();
        match result {
            Err(err) => self.error = Some(err.to_string()),
            Ok(page) => {
                self.error = None;
                let old_first = self.first_index;
                let old_len = self.page.as_ref().map_or(0, |p| p.rows.len()) as u64;
                let n = page.rows.len();
                match pending {
                    Some(Pending::Next) | Some(Pending::Prev) if n == 0 => {
                        if let Some(p) = self.page.as_mut() {
                            if pending == Some(Pending::Next) {
                                p.more = false;
                            }
                        }
                        return Some(if pending == Some(Pending::Next) {
                            "end of entries"
                        } else {
                            "start of entries"
                        });
                    }
                    Some(Pending::Next) => self.first_index = old_first.map(|f| f + old_len),
                    Some(Pending::Prev) => self.first_index = old_first.and_then(|f| f.checked_sub(n as u64)),
                    Some(Pending::Last) => {
                        self.first_index = match self.total {
                            Some((t, false)) if !filtered => t.checked_sub(n as u64),
                            _ => None,
                        }
                    }
                    Some(Pending::Fresh(f)) => self.first_index = f,
                    None => {}
                }
                if page.start == Cursor::START && pending != Some(Pending::Last) {
                    self.first_index = Some(0);
                }
                self.sel = if select == usize::MAX {
                    n.saturating_sub(1)
                } else {
                    select.min(n.saturating_sub(1))
                };
                self.page = Some(page);
            }
        }
        None
    }
}

fn page(at: PageAt, select: usize, pending: Pending) -> Outcome {
    Outcome::Read(Read::Page { at, select, pending })
}

impl ScreenModel for EntriesView {
    fn move_by(&mut self, action: &Action, ctx: &Ctx) -> Outcome {
        if ctx.loading {
            return Outcome::Done;
        }
        let p = self.page.as_ref();
        let len = p.map_or(0, |p| p.rows.len());
        let more = p.is_some_and(|p| p.more);
        let at_start = p.is_none_or(|p| p.start == Cursor::START) || self.first_index == Some(0);
        let start = p.map(|p| p.start.clone()).unwrap_or_default();
        let next = p
            .and_then(|p| p.rows.last())
            .map(|r| Cursor {
                key_group: r.position.key_group,
                index: r.position.index + 1,
            })
            .unwrap_or_default();
        let sel = self.sel;
        match action {
            Action::Down if sel + 1 < len => self.sel = sel + 1,
            Action::Down if more => return page(PageAt::From(next), 0, Pending::Next),
            Action::Up if sel > 0 => self.sel = sel - 1,
            Action::Up if !at_start => return page(PageAt::Before(start), usize::MAX, Pending::Prev),
            Action::PageDown if more => return page(PageAt::From(next), 0, Pending::Next),
            Action::PageDown => self.sel = len.saturating_sub(1),
            Action::PageUp if !at_start => return page(PageAt::Before(start), 0, Pending::Prev),
            Action::PageUp => self.sel = 0,
            Action::Top => return EntriesView::first_page(),
            Action::Bottom => return page(PageAt::Last, usize::MAX, Pending::Last),
            _ => {}
        }
        Outcome::Done
    }

    fn search(&mut self, text: &str, direction: Direction, include_current: bool, ctx: &Ctx) -> Outcome {
        // `n` / `N` wait for the read in progress; a new search supersedes it.
        if !include_current && ctx.loading {
            return Outcome::Done;
        }
        Outcome::Read(Read::Search {
            text: text.to_string(),
            exact_first: include_current,
            direction,
        })
    }

    fn filter(&self) -> &str {
        &self.filter
    }

    fn set_filter(&mut self, text: String, _: &Ctx) -> Outcome {
        self.filter = text;
        EntriesView::first_page()
    }

    fn page(&self, ctx: &Ctx) -> usize {
        ctx.page_size()
    }

    fn resized(&mut self, before: &Ctx, ctx: &Ctx) -> Outcome {
        if self.page(ctx) == self.page(before) || ctx.loading {
            return Outcome::Done;
        }
        let Some(p) = &self.page else {
            return Outcome::Done;
        };
        page(
            PageAt::From(p.start.clone()),
            self.sel,
            Pending::Fresh(self.first_index),
        )
    }
}
