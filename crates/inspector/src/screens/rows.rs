//! Selection, scrolling and search over an in-memory list of rows (the diff list and the
//! operator state list share them).

use super::{Ctx, Outcome, ScreenModel};
use crate::app::Action;
use crate::worker::Direction;

/// The rows shown of a list held in memory (the diff list, the operator state list): those
/// that pass the filter, the selected one, and the first one shown.
#[derive(Clone, Debug, Default)]
pub struct RowList {
    /// Indexes of the rows that pass the filter.
    pub visible: Vec<usize>,
    /// Selected row (in `visible`).
    pub sel: usize,
    /// First row shown.
    pub top: usize,
    /// The filter (empty: off).
    pub filter: String,
}

impl RowList {
    /// The rows that pass the filter now (the selection stays on a row).
    pub fn set_visible(&mut self, visible: Vec<usize>) {
        self.visible = visible;
        self.sel = self.sel.min(self.visible.len().saturating_sub(1));
    }

    /// Moves the selection to `sel` (clamped) and scrolls so that it shows in `height` rows.
    pub fn select(&mut self, sel: usize, height: usize) {
        self.sel = sel.min(self.visible.len().saturating_sub(1));
        self.scroll(height);
    }

    /// Scrolls so that the selection shows in `height` rows.
    pub fn scroll(&mut self, height: usize) {
        self.top = scroll_top(self.sel, self.top, height);
    }

    /// Moves by `action`, `page` rows to a screen.
    pub fn move_by(&mut self, action: &Action, page: usize) {
        let sel = move_target(action, self.sel, self.visible.len(), page);
        self.select(sel, page);
    }

    /// The next (or previous) visible row for which `matches` holds (given its index among
    /// all rows), wrapping; the selected row itself only when `include_current`.
    pub fn find(&self, forward: bool, include_current: bool, matches: impl Fn(usize) -> bool) -> Option<usize> {
        find_wrapping(self.visible.len(), self.sel, forward, include_current, |i| {
            matches(self.visible[i])
        })
    }

    /// A new filter: from the top (the caller refilters).
    pub fn reset_to(&mut self, filter: String) {
        self.filter = filter;
        self.sel = 0;
        self.top = 0;
    }
}

/// A screen whose rows are held in memory (the diff list, an operator state): `/`, `n`, `N`
/// and `f` match the rows' lines without the worker. Its [`ScreenModel`] follows from this.
pub trait HeldRows {
    /// Filter, selection and scroll.
    fn list(&self) -> &RowList;
    /// Filter, selection and scroll, to change.
    fn list_mut(&mut self) -> &mut RowList;
    /// Rows held.
    fn row_count(&self) -> usize;
    /// Row `i` as typed text (what `/` and `f` match).
    fn line(&self, i: usize) -> &str;
    /// Rows of the screen's table at `ctx` (a page).
    fn table_rows(&self, ctx: &Ctx) -> usize;

    /// Recomputes the rows whose line contains the filter (empty: all).
    fn refilter(&mut self) {
        let filter = self.list().filter.clone();
        let visible = (0..self.row_count())
            .filter(|&i| filter.is_empty() || self.line(i).contains(filter.as_str()))
            .collect();
        self.list_mut().set_visible(visible);
    }
}

impl<T: HeldRows> ScreenModel for T {
    fn move_by(&mut self, action: &Action, ctx: &Ctx) -> Outcome {
        let page = self.page(ctx);
        self.list_mut().move_by(action, page);
        Outcome::Done
    }

    fn search(&mut self, text: &str, direction: Direction, include_current: bool, ctx: &Ctx) -> Outcome {
        let page = self.page(ctx);
        let forward = direction == Direction::Next;
        match self
            .list()
            .find(forward, include_current, |i| self.line(i).contains(text))
        {
            Some(i) => {
                self.list_mut().select(i, page);
                Outcome::Found
            }
            None => Outcome::NotFound,
        }
    }

    fn filter(&self) -> &str {
        &self.list().filter
    }

    fn set_filter(&mut self, text: String, ctx: &Ctx) -> Outcome {
        let page = self.page(ctx);
        self.list_mut().reset_to(text);
        self.refilter();
        self.list_mut().scroll(page);
        Outcome::Done
    }

    fn page(&self, ctx: &Ctx) -> usize {
        self.table_rows(ctx)
    }

    fn resized(&mut self, _: &Ctx, ctx: &Ctx) -> Outcome {
        let page = self.page(ctx);
        self.list_mut().scroll(page);
        Outcome::Done
    }
}

/// Where `action` moves the selection `cur` of a list of `len` rows, `page` rows to a screen
/// (not clamped: [`scroll_top`]'s callers clamp).
pub fn move_target(action: &Action, cur: usize, len: usize, page: usize) -> usize {
    match action {
        Action::Up => cur.saturating_sub(1),
        Action::Down => cur + 1,
        Action::Top => 0,
        Action::Bottom => len.saturating_sub(1),
        Action::PageUp => cur.saturating_sub(page),
        Action::PageDown => cur + page,
        _ => cur,
    }
}

/// The first row shown so that `sel` is visible in `height` rows, scrolling as little as
/// possible from `top`.
pub fn scroll_top(sel: usize, top: usize, height: usize) -> usize {
    let h = height.max(1);
    if sel < top {
        sel
    } else if sel >= top + h {
        sel + 1 - h
    } else {
        top
    }
}

/// The next (or previous, `forward` false) of `n` rows from `cur` for which `matches` holds,
/// wrapping; `cur` itself only when `include_current`.
pub fn find_wrapping(
    n: usize,
    cur: usize,
    forward: bool,
    include_current: bool,
    matches: impl Fn(usize) -> bool,
) -> Option<usize> {
    if n == 0 {
        return None;
    }
    let cur = cur.min(n - 1);
    let start = if include_current { 0 } else { 1 };
    (start..=n).find_map(|step| {
        let i = if forward {
            (cur + step) % n
        } else {
            (cur + n * 2 - step) % n
        };
        matches(i).then_some(i)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moves_scrolls_and_finds() {
        assert_eq!(move_target(&Action::Bottom, 3, 10, 4), 9);
        assert_eq!(move_target(&Action::PageUp, 3, 10, 4), 0);
        assert_eq!(scroll_top(9, 0, 4), 6);
        assert_eq!(scroll_top(2, 5, 4), 2);
        assert_eq!(scroll_top(5, 3, 4), 3);
        let even = |i: usize| i.is_multiple_of(2);
        assert_eq!(find_wrapping(5, 4, true, false, even), Some(0));
        assert_eq!(find_wrapping(5, 0, false, false, even), Some(4));
        assert_eq!(find_wrapping(5, 2, true, true, even), Some(2));
        assert_eq!(find_wrapping(0, 0, true, true, even), None);
    }
}
