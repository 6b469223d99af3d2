//! The diff screen's model: the rows of a comparison as they stream in from the worker
//! ([`crate::worker::diff`]), grouped by operator → state → key, filtered and selected in
//! memory.

use super::rows::{HeldRows, RowList};
use super::Ctx;
use crate::draw;
use crate::error::ReadError;
use crate::worker::diff::{DiffEnd, DiffPart, DiffRow, DiffSide};
use statekit_snapshot::diff::Difference;
use std::collections::HashMap;

/// The diff screen's state.
#[derive(Clone, Debug)]
pub struct DiffView {
    /// Old and new side.
    pub sides: [DiffSide; 2],
    /// The rows received, grouped by operator → state (in order of appearance) → key.
    pub rows: Vec<DiffRow>,
    /// The rows shown: filter, selection, scroll.
    pub list: RowList,
    /// How it ended (`None`: still comparing).
    pub end: Option<Result<DiffEnd, ReadError>>,
    /// Whether Esc goes back to the snapshot list (else there is nothing to go back to).
    pub from_list: bool,
    ordinals: HashMap<(String, u8, String), u32>,
}

impl DiffView {
    /// An empty view of `sides`.
    pub fn new(sides: [DiffSide; 2], from_list: bool) -> Self {
        DiffView {
            sides,
            rows: Vec::new(),
            list: RowList::default(),
            end: None,
            from_list,
            ordinals: HashMap::new(),
        }
    }

    fn ordinal(&mut self, key: (String, u8, String)) -> u32 {
        let n = self.ordinals.len() as u32;
        *self.ordinals.entry(key).or_insert(n)
    }

    /// Takes a message of the comparison: more rows, or its end (`page`: the table's rows
    /// before it, which the selection is kept in).
    pub fn arrived(&mut self, part: DiffPart, page: usize) {
        match part {
            DiffPart::Rows(rows) => self.push(rows),
            DiffPart::Done(end) => self.end = Some(end),
        }
        self.list.scroll(page);
    }

    /// Adds a batch, keeping the selection on its row.
    pub fn push(&mut self, rows: Vec<DiffRow>) {
        let selected = self.selected().map(|r| r.seq);
        for mut r in rows {
            let (uid, kind, name) = match r.diff.as_ref() {
                Difference::Operator(o) => (o.uid.as_str(), 0, ""),
                Difference::State(s) => (s.uid.as_str(), 1, s.name.as_str()),
                Difference::OperatorState(s) => (s.uid.as_str(), 2, s.name.as_str()),
                Difference::Key(k) => (&*k.uid, 1, k.state.name.as_str()),
            };
            let op = self.ordinal((uid.to_string(), 0, String::new()));
            let state = if kind == 0 {
                0
            } else {
                1 + self.ordinal((uid.to_string(), kind, name.to_string()))
            };
            r.group = (op, state);
            self.rows.push(r);
        }
        // Stable: within a group the rows stay in the order they were found.
        self.rows.sort_by_key(|r| r.group);
        self.refilter();
        if let Some(seq) = selected {
            if let Some(i) = self.list.visible.iter().position(|&i| self.rows[i].seq == seq) {
                self.list.sel = i;
            }
        }
    }

    /// The selected row.
    pub fn selected(&self) -> Option<&DiffRow> {
        self.list.visible.get(self.list.sel).map(|&i| &self.rows[i])
    }
}

impl HeldRows for DiffView {
    fn list(&self) -> &RowList {
        &self.list
    }

    fn list_mut(&mut self) -> &mut RowList {
        &mut self.list
    }

    fn row_count(&self) -> usize {
        self.rows.len()
    }

    fn line(&self, i: usize) -> &str {
        &self.rows[i].line
    }

    fn table_rows(&self, ctx: &Ctx) -> usize {
        let (w, h) = ctx.main_area();
        draw::diff::table_height(self, h, w)
    }
}
