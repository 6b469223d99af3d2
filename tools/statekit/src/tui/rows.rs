//! Selection, scrolling and search over an in-memory list of rows (the diff list and the
//! operator state list share them).

use super::app::Action;

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
        let even = |i: usize| i % 2 == 0;
        assert_eq!(find_wrapping(5, 4, true, false, even), Some(0));
        assert_eq!(find_wrapping(5, 0, false, false, even), Some(4));
        assert_eq!(find_wrapping(5, 2, true, true, even), Some(2));
        assert_eq!(find_wrapping(0, 0, true, true, even), None);
    }
}
