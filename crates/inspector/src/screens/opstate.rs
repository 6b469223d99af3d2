//! The operator state screen's model: the rows the worker read
//! ([`crate::worker::opstate`]), held in memory and filtered, searched and selected
//! there.

use super::rows::{HeldRows, RowList};
use super::Ctx;
use crate::draw;
use crate::error::ReadError;
use crate::worker::opstate::{OpStateRead, OpStateRow};
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
    pub fn arrived(&mut self, result: Result<OpStateRead, ReadError>, page: usize) {
        match result {
            Ok(read) => {
                self.read = Some(read);
                self.error = None;
                self.refilter();
                self.list.scroll(page);
            }
            Err(e) => self.error = Some(e.to_string()),
        }
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

impl HeldRows for OpStateView {
    fn list(&self) -> &RowList {
        &self.list
    }

    fn list_mut(&mut self) -> &mut RowList {
        &mut self.list
    }

    fn row_count(&self) -> usize {
        self.rows().len()
    }

    fn line(&self, i: usize) -> &str {
        &self.rows()[i].line
    }

    fn table_rows(&self, ctx: &Ctx) -> usize {
        let (_, h) = ctx.main_area();
        draw::opstate::table_height(self, h)
    }
}
