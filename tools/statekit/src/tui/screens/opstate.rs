//! The operator state screen's model: the rows the worker read
//! ([`crate::tui::worker::opstate`]), held in memory and filtered, searched and selected
//! there.

use super::rows::RowList;
use super::{Ctx, Outcome, ScreenModel};
use crate::tui::app::Action;
use crate::tui::draw;
use crate::tui::worker::opstate::{OpStateRead, OpStateRow};
use crate::tui::worker::Direction;
use statekit_core::OperatorStateDescriptor;

/// The operator state screen's state.
#[derive(Clone, Debug)]
pub struct OpStateView {
    /// The state.
    pub desc: OperatorStateDescriptor,
    /// The rows read (`None`: still reading).
    pub read: Option<OpStateRead>,
    /// Why reading failed.
    pub error: Option<String>,
    /// The rows shown: filter, selection, scroll.
    pub list: RowList,
}

impl OpStateView {
    /// An empty view of state `desc`.
    pub fn new(desc: OperatorStateDescriptor) -> Self {
        OpStateView {
            desc,
            read: None,
            error: None,
            list: RowList::default(),
        }
    }

    /// The rows read so far (none while reading).
    pub fn rows(&self) -> &[OpStateRow] {
        self.read.as_ref().map_or(&[], |r| r.rows.as_slice())
    }

    /// Takes the worker's answer (`page`: the table's rows before it, which the selection is
    /// kept in).
    pub fn arrived(&mut self, result: Result<OpStateRead, String>, page: usize) {
        match result {
            Ok(read) => {
                self.read = Some(read);
                self.error = None;
                self.refilter();
                self.list.scroll(page);
            }
            Err(e) => self.error = Some(e),
        }
    }

    /// Recomputes the rows whose line contains the filter (empty: all).
    fn refilter(&mut self) {
        let rows = self.read.as_ref().map_or(&[][..], |r| r.rows.as_slice());
        self.list.refilter(rows.len(), |i, f| rows[i].line.contains(f));
    }

    /// The selected row.
    pub fn selected(&self) -> Option<&OpStateRow> {
        self.list.visible.get(self.list.sel).and_then(|&i| self.rows().get(i))
    }

    /// Rows beyond the limit, counted and not kept.
    pub fn not_shown(&self) -> u64 {
        self.read.as_ref().map_or(0, |r| r.not_shown)
    }
}

impl ScreenModel for OpStateView {
    fn move_by(&mut self, action: &Action, ctx: &Ctx) -> Outcome {
        let page = self.page(ctx);
        self.list.move_by(action, page);
        Outcome::Done
    }

    fn search(&mut self, text: &str, direction: Direction, include_current: bool, ctx: &Ctx) -> Outcome {
        let page = self.page(ctx);
        let rows = self.read.as_ref().map_or(&[][..], |r| r.rows.as_slice());
        let forward = direction == Direction::Next;
        self.list
            .search(forward, include_current, page, |i| rows[i].line.contains(text))
    }

    fn filter(&self) -> &str {
        &self.list.filter
    }

    fn set_filter(&mut self, text: String, ctx: &Ctx) -> Outcome {
        let page = self.page(ctx);
        self.list.reset_to(text);
        self.refilter();
        self.list.scroll(page);
        Outcome::Done
    }

    fn page(&self, ctx: &Ctx) -> usize {
        let (_, h) = ctx.main_area();
        draw::opstate::table_height(self, h)
    }

    fn resized(&mut self, _: &Ctx, ctx: &Ctx) -> Outcome {
        let page = self.page(ctx);
        self.list.scroll(page);
        Outcome::Done
    }
}
