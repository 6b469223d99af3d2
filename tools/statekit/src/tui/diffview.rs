//! The diff view: `statekit inspect A --diff B`, or `d` on two rows of the snapshot list.
//!
//! The comparison is [`statekit_snapshot::diff::diff_snapshots_with_progress`], run by the worker
//! ([`run`], called from `Worker::handle`): it streams the differences to the UI in batches
//! of rows (one row per line `statekit diff` prints), at most `keep` of them (the rest are
//! only counted), reports key groups done / total, and stops as soon as a newer request
//! arrives. [`DiffView`] holds the rows, grouped by operator → state → key; [`render`] draws
//! the list and [`detail`] the selected difference in the pane.

use super::app::App;
use super::loader::Msg;
use super::view::{highlight, kv, message, title_with_filter};
use crate::cmd::diff::{difference_cell, difference_parts, open_side};
use crate::render::{cell, item_text, list_text};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph, Row as TRow, Table, TableState};
use ratatui::Frame;
use statekit_core::TypeSchema;
use statekit_snapshot::diff::{
    describe_state, diff_snapshots_with_progress, Change, DiffOptions, DiffProgress, DiffSummary, Difference,
    FieldChange, Item, KeyDetail, Side,
};
use std::cell::RefCell;
use std::collections::HashMap;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Rows the inspector keeps of a diff; beyond them differences are only counted.
pub const DIFF_KEEP: usize = 10_000;

/// Rows per message at most.
const BATCH: usize = 256;

/// One side of a comparison.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiffSide {
    /// Its directory or `_metadata` file.
    pub path: PathBuf,
    /// How it is shown (errors name its files by this instead of the path).
    pub label: String,
}

/// A row of the diff list: one line of a difference (a difference, or one map entry or
/// operator-state element of it).
#[derive(Clone, Debug)]
pub struct DiffRow {
    /// The difference (shared by its rows).
    pub diff: Arc<Difference>,
    /// Which of its lines (`cmd::diff::difference_cell`).
    pub part: usize,
    /// The row as typed text (what `f` and `/` match).
    pub line: String,
    seq: u64,
    group: (u32, u32),
}

/// Differences by kind (operators, keyed states, operator states, keys) and change (added,
/// removed, modified); layout-only operator changes are not counted here.
pub type ChangeCounts = [[u64; 3]; 4];

/// How a comparison ended.
#[derive(Clone, Debug)]
pub struct DiffEnd {
    /// The library's summary.
    pub summary: DiffSummary,
    /// Added / removed / modified per kind.
    pub counts: ChangeCounts,
    /// Rows beyond `keep`, not sent.
    pub not_shown: u64,
}

/// A message of a comparison.
#[derive(Clone, Debug)]
pub enum DiffPart {
    /// More rows, in the order the library found them.
    Rows(Vec<DiffRow>),
    /// The end, or the error that stopped it (its files named by the sides' labels).
    Done(Result<DiffEnd, String>),
}

/// `msg` with the sides' paths replaced by their labels.
fn sanitize(msg: &str, sides: &[DiffSide; 2]) -> String {
    let mut pairs: Vec<(String, &str)> = Vec::new();
    for s in sides {
        let mut paths = vec![s.path.clone()];
        if let Ok(c) = s.path.canonicalize() {
            paths.push(c);
        }
        if s.path.is_file() {
            if let Some(p) = s.path.parent() {
                paths.push(p.to_path_buf());
                if let Ok(c) = p.canonicalize() {
                    paths.push(c);
                }
            }
        }
        for p in paths {
            let mut t = p.display().to_string();
            while t.len() > 1 && t.ends_with('/') {
                t.pop();
            }
            pairs.push((t, &s.label));
        }
    }
    pairs.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
    let mut out = msg.to_string();
    for (p, label) in pairs {
        if !p.is_empty() && p != label {
            out = out.replace(&p, label);
        }
    }
    out
}

fn kind_index(d: &Difference) -> usize {
    match d {
        Difference::Operator(_) => 0,
        Difference::State(_) => 1,
        Difference::OperatorState(_) => 2,
        Difference::Key(_) => 3,
    }
}

fn change_index(c: Change) -> usize {
    match c {
        Change::Added => 0,
        Change::Removed => 1,
        Change::Modified => 2,
    }
}

fn change_of(d: &Difference) -> Change {
    match d {
        Difference::Operator(o) => o.change,
        Difference::State(s) => s.change,
        Difference::OperatorState(s) => s.change,
        Difference::Key(k) => k.change,
    }
}

struct Outbox<'o> {
    out: &'o mut dyn FnMut(Msg),
    gen: u64,
    buf: Vec<DiffRow>,
    sent: usize,
    not_shown: u64,
    counts: ChangeCounts,
    seq: u64,
    flushed: Instant,
    reported: Option<Instant>,
}

impl Outbox<'_> {
    fn flush(&mut self) {
        if !self.buf.is_empty() {
            let rows = std::mem::take(&mut self.buf);
            (self.out)(Msg::Diff {
                gen: self.gen,
                part: DiffPart::Rows(rows),
            });
        }
        self.flushed = Instant::now();
    }
}

/// The worker's side: compares `sides[0]` (old) with `sides[1]` (new) and sends rows in
/// batches, progress, and one [`DiffPart::Done`] — unless a request newer than `gen`
/// arrives (`latest`), which stops it without an answer.
pub fn run(latest: &AtomicU64, gen: u64, sides: &[DiffSide; 2], keep: usize, out: &mut dyn FnMut(Msg)) {
    let cancelled = || latest.load(Ordering::SeqCst) > gen;
    let done = |out: &mut dyn FnMut(Msg), r: Result<DiffEnd, String>| {
        out(Msg::Diff {
            gen,
            part: DiffPart::Done(r),
        })
    };
    out(Msg::Progress {
        gen,
        what: "opening both snapshots".into(),
        done: 0,
        total: 0,
        unit: "",
    });
    let open = |s: &DiffSide| open_side(&s.path).map_err(|e| sanitize(&format!("{e:#}"), sides));
    let ra = match open(&sides[0]) {
        Ok(r) => r,
        Err(e) => return done(out, Err(e)),
    };
    let rb = match open(&sides[1]) {
        Ok(r) => r,
        Err(e) => return done(out, Err(e)),
    };
    let st = RefCell::new(Outbox {
        out,
        gen,
        buf: Vec::new(),
        sent: 0,
        not_shown: 0,
        counts: [[0; 3]; 4],
        seq: 0,
        flushed: Instant::now(),
        reported: None,
    });
    let mut sink = |d: Difference| -> ControlFlow<()> {
        if cancelled() {
            return ControlFlow::Break(());
        }
        let mut s = st.borrow_mut();
        if d.counts() {
            s.counts[kind_index(&d)][change_index(change_of(&d))] += 1;
        }
        let parts = difference_parts(&d);
        let d = Arc::new(d);
        for part in 0..parts {
            if s.sent >= keep {
                s.not_shown += (parts - part) as u64;
                break;
            }
            let Some(c) = difference_cell(&d, part, false) else {
                break;
            };
            let line = format!("{} {} {} {} {}", c.sign, c.uid, c.state, c.key, c.what);
            let seq = s.seq;
            s.seq += 1;
            s.sent += 1;
            s.buf.push(DiffRow {
                diff: d.clone(),
                part,
                line,
                seq,
                group: (0, 0),
            });
        }
        if s.buf.len() >= BATCH || s.flushed.elapsed() >= Duration::from_millis(100) {
            s.flush();
        }
        ControlFlow::Continue(())
    };
    let mut progress = |p: DiffProgress| -> bool {
        if cancelled() {
            return false;
        }
        let mut s = st.borrow_mut();
        if s.reported.is_none_or(|t| t.elapsed() >= Duration::from_millis(50)) {
            s.reported = Some(Instant::now());
            (s.out)(Msg::Progress {
                gen,
                what: "comparing".into(),
                done: p.done,
                total: p.total,
                unit: "key groups",
            });
        }
        if !s.buf.is_empty() && s.flushed.elapsed() >= Duration::from_millis(100) {
            s.flush();
        }
        true
    };
    let result = diff_snapshots_with_progress(
        Side {
            label: &sides[0].label,
            reader: &ra,
        },
        Side {
            label: &sides[1].label,
            reader: &rb,
        },
        &DiffOptions::default(),
        &mut sink,
        &mut progress,
    );
    let mut s = st.into_inner();
    if cancelled() {
        return;
    }
    s.flush();
    let end = match result {
        Ok(summary) => Ok(DiffEnd {
            summary,
            counts: s.counts,
            not_shown: s.not_shown,
        }),
        Err(e) => Err(sanitize(&crate::error_text(&e.into()), sides)),
    };
    done(s.out, end);
}

/// The diff screen's state.
#[derive(Clone, Debug)]
pub struct DiffView {
    /// Old and new side.
    pub sides: [DiffSide; 2],
    /// The rows received, grouped by operator → state (in order of appearance) → key.
    pub rows: Vec<DiffRow>,
    /// Indexes of the rows that pass the filter.
    pub visible: Vec<usize>,
    /// Selected row (in `visible`).
    pub sel: usize,
    /// First row shown.
    pub top: usize,
    /// How it ended (`None`: still comparing).
    pub end: Option<Result<DiffEnd, String>>,
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
            visible: Vec::new(),
            sel: 0,
            top: 0,
            end: None,
            from_list,
            ordinals: HashMap::new(),
        }
    }

    fn ordinal(&mut self, key: (String, u8, String)) -> u32 {
        let n = self.ordinals.len() as u32;
        *self.ordinals.entry(key).or_insert(n)
    }

    /// Adds a batch, keeping the selection on its row; `filter` as in [`DiffView::refilter`].
    pub fn push(&mut self, rows: Vec<DiffRow>, filter: &str) {
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
        self.refilter(filter);
        if let Some(seq) = selected {
            if let Some(i) = self.visible.iter().position(|&i| self.rows[i].seq == seq) {
                self.sel = i;
            }
        }
    }

    /// Recomputes the rows that contain `filter` (empty: all).
    pub fn refilter(&mut self, filter: &str) {
        self.visible = (0..self.rows.len())
            .filter(|&i| filter.is_empty() || self.rows[i].line.contains(filter))
            .collect();
        self.sel = self.sel.min(self.visible.len().saturating_sub(1));
    }

    /// The selected row.
    pub fn selected(&self) -> Option<&DiffRow> {
        self.visible.get(self.sel).map(|&i| &self.rows[i])
    }

    /// The next (or previous, `forward` false) visible row containing `text`, wrapping;
    /// the selected row itself only when `include_current`.
    pub fn find(&self, text: &str, forward: bool, include_current: bool) -> Option<usize> {
        super::rows::find_wrapping(self.visible.len(), self.sel, forward, include_current, |i| {
            self.rows[self.visible[i]].line.contains(text)
        })
    }

    /// Moves the selection to `sel` (clamped) and scrolls so that it shows in `height` rows.
    pub fn select(&mut self, sel: usize, height: usize) {
        self.sel = sel.min(self.visible.len().saturating_sub(1));
        self.scroll(height);
    }

    /// Scrolls so that the selection shows in `height` rows.
    pub fn scroll(&mut self, height: usize) {
        self.top = super::rows::scroll_top(self.sel, self.top, height);
    }

    /// Lines above the table, word-wrapped to `width` columns: the summary and, when rows
    /// were dropped, a note. Below 60 columns the summary is short.
    pub fn summary_lines(&self, width: u16) -> Vec<Line<'static>> {
        let short = width < 60;
        let bold = Style::new().add_modifier(Modifier::BOLD);
        let mut out: Vec<(String, Style)> = Vec::new();
        match &self.end {
            None => out.push((format!("comparing… {} rows so far", self.rows.len()), Style::new())),
            Some(Err(_)) => {}
            Some(Ok(end)) => {
                let s = &end.summary;
                let layout = if s.layout > 0 && short {
                    format!("; {} rescaled", s.layout)
                } else if s.layout > 0 {
                    format!(
                        "; {} rescaled {} (layout only)",
                        s.layout,
                        if s.layout == 1 { "operator" } else { "operators" }
                    )
                } else {
                    String::new()
                };
                if s.identical() {
                    let same = if short {
                        ""
                    } else {
                        ": the snapshots hold the same state"
                    };
                    out.push((format!("no differences{same}{layout}"), bold.fg(Color::Green)));
                } else {
                    let head = if short { "" } else { "differences: " };
                    out.push((format!("{head}{}{layout}", counts_text(&end.counts, short)), bold));
                }
                if end.not_shown > 0 {
                    let note = if short {
                        format!("… {} more not shown (statekit diff)", end.not_shown)
                    } else {
                        format!("… {} more differences not shown (use statekit diff)", end.not_shown)
                    };
                    out.push((note, Style::new().fg(Color::Yellow)));
                }
            }
        }
        out.iter()
            .flat_map(|(text, style)| {
                wrap(text, usize::from(width.max(1)))
                    .into_iter()
                    .map(move |l| Line::from(Span::styled(l, *style)))
            })
            .collect()
    }
}

/// `text` broken at spaces into lines of at most `width` characters (longer words are cut).
pub(super) fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut cur = String::new();
    for word in text.split(' ') {
        let (n, w) = (cur.chars().count(), word.chars().count());
        if n > 0 && n + 1 + w > width {
            lines.push(std::mem::take(&mut cur));
        }
        if !cur.is_empty() {
            cur.push(' ');
        }
        cur.push_str(word);
        while cur.chars().count() > width {
            let head: String = cur.chars().take(width).collect();
            cur = cur.chars().skip(width).collect();
            lines.push(head);
        }
    }
    if !cur.is_empty() || lines.is_empty() {
        lines.push(cur);
    }
    lines
}

/// `2 operators (+1 ~1), 1 keyed state (-1), 5 keys (+2 -1 ~2)`: the kinds that differ
/// (`short`: `2 ops (+1 ~1), 1 state (-1), …`).
pub fn counts_text(c: &ChangeCounts, short: bool) -> String {
    let names = if short {
        [
            ("op", "ops"),
            ("state", "states"),
            ("op state", "op states"),
            ("key", "keys"),
        ]
    } else {
        [
            ("operator", "operators"),
            ("keyed state", "keyed states"),
            ("operator state", "operator states"),
            ("key", "keys"),
        ]
    };
    let parts: Vec<String> = c
        .iter()
        .zip(names)
        .filter(|(n, _)| n.iter().sum::<u64>() > 0)
        .map(|(n, (one, many))| {
            let total: u64 = n.iter().sum();
            let by: Vec<String> = n
                .iter()
                .zip(['+', '-', '~'])
                .filter(|(x, _)| **x > 0)
                .map(|(x, s)| format!("{s}{x}"))
                .collect();
            format!("{total} {} ({})", if total == 1 { one } else { many }, by.join(" "))
        })
        .collect();
    parts.join(", ")
}

/// Rows of the table the diff screen shows in `area` (its block, summary and header off).
fn table_height(dv: &DiffView, area_height: u16, width: u16) -> usize {
    let inner = area_height.saturating_sub(2);
    let summary = summary_height(dv, width.saturating_sub(2));
    usize::from(inner.saturating_sub(summary + 1).max(1))
}

fn summary_height(dv: &DiffView, width: u16) -> u16 {
    (dv.summary_lines(width).len() as u16).min(4)
}

/// The main area (columns, rows) of a screen at the app's size (as `view::render` lays it
/// out).
pub(super) fn main_area(app: &App) -> (u16, u16) {
    let (w, h) = app.size;
    let body = h.saturating_sub(2);
    if app.meta_visible() {
        if w >= super::view::SIDE_PANE_WIDTH {
            (w - w * 2 / 5, body)
        } else if h >= super::app::SMALL_HEIGHT {
            (w, body - super::view::bottom_pane_height(body))
        } else {
            (w, body)
        }
    } else {
        (w, body)
    }
}

/// Rows of the diff table at the app's size (a page for PgUp/PgDn).
pub fn page_rows(app: &App) -> usize {
    let Some(dv) = &app.diff else {
        return 1;
    };
    let (w, h) = main_area(app);
    table_height(dv, h, w)
}

fn sign_style(sign: char) -> Style {
    match sign {
        '+' => Style::new().fg(Color::Green),
        '-' => Style::new().fg(Color::Red),
        '~' => Style::new().fg(Color::Yellow),
        _ => Style::new().fg(Color::DarkGray),
    }
}

/// Draws the diff list (or the error, or "no differences") in `area`.
pub fn render(app: &App, f: &mut Frame, area: Rect) {
    let Some(dv) = &app.diff else {
        return;
    };
    let n = dv.visible.len();
    let height = table_height(dv, area.height, area.width);
    let top = super::rows::scroll_top(dv.sel, dv.top, height);
    let range = if n == 0 {
        String::new()
    } else {
        format!(" · {}-{} of {n}", top + 1, (top + height).min(n))
    };
    let hex = if app.hex { " hex" } else { "" };
    let title = title_with_filter(app, format!("diff{hex}{range}"));
    if let Some(Err(e)) = &dv.end {
        return message(
            f,
            area,
            title,
            vec![
                Line::from(Span::styled(
                    "cannot compare these snapshots:",
                    Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
                )),
                Line::from(""),
                Line::from(Span::styled(e.clone(), Style::new().fg(Color::Red))),
                Line::from(""),
                Line::from("`statekit verify` lists every problem of a snapshot."),
                Line::from(if dv.from_list {
                    "Esc: back to the snapshot list"
                } else {
                    "q: quit"
                }),
            ],
        );
    }
    let block = Block::default().borders(Borders::ALL).title(title);
    let inner = block.inner(area);
    f.render_widget(block, area);
    let summary = dv.summary_lines(inner.width);
    let sh = summary_height(dv, inner.width);
    let [sum_area, table_area] = Layout::vertical([Constraint::Length(sh), Constraint::Min(0)]).areas(inner);
    f.render_widget(Paragraph::new(summary), sum_area);
    if dv.rows.is_empty() {
        return;
    }
    if n == 0 {
        f.render_widget(
            Paragraph::new("no differences match the filter (f, then Enter on an empty line: off)"),
            table_area,
        );
        return;
    }
    let narrow = area.width < 60;
    let window = &dv.visible[top..(top + height).min(n)];
    let cells: Vec<(char, Vec<String>)> = window
        .iter()
        .filter_map(|&i| {
            let r = &dv.rows[i];
            let c = difference_cell(&r.diff, r.part, app.hex)?;
            let mut v = vec![c.sign.to_string()];
            if !narrow {
                v.push(c.uid);
            }
            v.extend([c.state, c.key, c.what]);
            Some((c.sign, v))
        })
        .collect();
    let header: Vec<&str> = if narrow {
        vec!["", "STATE", "KEY", "CHANGE"]
    } else {
        vec!["", "UID", "STATE", "KEY", "CHANGE (old -> new)"]
    };
    let last = header.len() - 1;
    let widths: Vec<Constraint> = (0..header.len())
        .map(|i| {
            let w = cells
                .iter()
                .map(|(_, r)| r[i].chars().count())
                .chain([if i == last { 6 } else { header[i].len() }])
                .max()
                .unwrap_or(1) as u16;
            match i {
                0 => Constraint::Length(1),
                _ if i == last => Constraint::Min(w.min(12)),
                _ => Constraint::Max(w.min(if narrow { 12 } else { 24 })),
            }
        })
        .collect();
    let rows: Vec<TRow> = cells
        .into_iter()
        .map(|(sign, v)| TRow::new(v).style(if sign == '=' { sign_style('=') } else { Style::new() }))
        .collect();
    let t = Table::new(rows, widths)
        .header(TRow::new(header).style(Style::new().add_modifier(Modifier::BOLD)))
        .row_highlight_style(highlight())
        .column_spacing(1);
    let mut state = TableState::default();
    state.select(Some(dv.sel - top));
    f.render_stateful_widget(t, table_area, &mut state);
}

fn side_text(s: &TypeSchema, it: &Option<Item>, hex: bool) -> String {
    it.as_ref()
        .map_or_else(|| "(absent)".to_string(), |i| item_text(s, i, hex))
}

fn field_lines(fields: &[FieldChange], l: &mut Vec<Line<'static>>) {
    for f in fields {
        l.push(kv(
            &f.field.as_str().replace('_', " "),
            format!("{} -> {}{}", f.old, f.new, if f.layout { " (layout only)" } else { "" }),
        ));
    }
}

/// The pane: the selected difference in full (old and new value on lines of their own).
pub fn detail(app: &App) -> Vec<Line<'static>> {
    let Some(dv) = &app.diff else {
        return Vec::new();
    };
    let mut l = vec![
        kv("old (A)", dv.sides[0].label.clone()),
        kv("new (B)", dv.sides[1].label.clone()),
    ];
    let Some(r) = dv.selected() else {
        return l;
    };
    let hex = app.hex;
    let change = |c: Change| match c {
        Change::Added => "added (only in B)".to_string(),
        Change::Removed => "removed (only in A)".to_string(),
        Change::Modified => "modified".to_string(),
    };
    match r.diff.as_ref() {
        Difference::Operator(o) => {
            l.push(kv(
                "operator",
                format!(
                    "{} {}",
                    o.uid,
                    if o.layout_only() {
                        "(layout only, not a difference)".to_string()
                    } else {
                        change(o.change)
                    }
                ),
            ));
            field_lines(&o.fields, &mut l);
            if let Some(why) = &o.keyed_not_compared {
                l.push(kv("keyed state not compared", why.clone()));
            }
        }
        Difference::State(s) => {
            l.push(kv("operator", s.uid.clone()));
            l.push(kv("keyed state", format!("{} {}", s.name, change(s.change))));
            if let Some(d) = &s.old {
                l.push(kv("old", describe_state(d)));
            }
            if let Some(d) = &s.new {
                l.push(kv("new", describe_state(d)));
            }
            field_lines(&s.fields, &mut l);
            if s.change == Change::Modified && !s.entries_compared {
                l.push(Line::from("entries not compared (other kind or types)"));
            }
        }
        Difference::OperatorState(s) => {
            l.push(kv("operator", s.uid.clone()));
            l.push(kv("operator state", format!("{} {}", s.name, change(s.change))));
            let d = s.new.as_ref().or(s.old.as_ref());
            if let Some(d) = d {
                l.push(kv("mode", format!("{}, value {}", d.mode, d.value_schema)));
            }
            field_lines(&s.fields, &mut l);
            let vs = d.map_or(TypeSchema::Bytes, |d| d.value_schema.clone());
            let ks = d.and_then(|d| d.key_schema.clone()).unwrap_or(TypeSchema::Bytes);
            let (nr, na) = (s.removed_elements.len(), s.added_elements.len());
            let p = r.part;
            if p == 0 {
                l.push(kv(
                    "contents",
                    format!("{nr} elements removed, {na} added, {} entries differ", s.entries.len()),
                ));
            } else if p <= nr {
                l.push(kv("element removed", cell(&vs, &s.removed_elements[p - 1], hex)));
            } else if p <= nr + na {
                l.push(kv("element added", cell(&vs, &s.added_elements[p - 1 - nr], hex)));
            } else if let Some(e) = s.entries.get(p - 1 - nr - na) {
                l.push(kv("key", cell(&ks, &e.user_key, hex)));
                l.push(kv("old", side_text(&vs, &e.old, hex)));
                l.push(kv("new", side_text(&vs, &e.new, hex)));
            }
        }
        Difference::Key(k) => {
            let d = &k.state;
            l.push(kv("operator", k.uid.to_string()));
            l.push(kv("state", format!("{} ({})", d.name, describe_state(d))));
            l.push(kv("change", change(k.change)));
            l.push(kv("key group", k.key_group.to_string()));
            l.push(kv("key", cell(&d.key_schema, &k.key, hex)));
            if d.namespace_schema != TypeSchema::Unit {
                l.push(kv("namespace", cell(&d.namespace_schema, &k.namespace, hex)));
            }
            let vs = &d.value_schema;
            match &k.detail {
                KeyDetail::None => {}
                KeyDetail::Value { old, new } => {
                    l.push(kv("old", side_text(vs, old, hex)));
                    l.push(kv("new", side_text(vs, new, hex)));
                }
                KeyDetail::List { old, new } => {
                    let t = |items: &[Item], absent: bool| {
                        if absent {
                            "(absent)".to_string()
                        } else {
                            list_text(vs, items, hex)
                        }
                    };
                    l.push(kv("old", t(old, k.change == Change::Added)));
                    l.push(kv("new", t(new, k.change == Change::Removed)));
                }
                KeyDetail::Map(entries) => {
                    if let Some(e) = entries.get(r.part) {
                        let uks = d.user_key_schema.clone().unwrap_or(TypeSchema::Bytes);
                        l.push(kv("user key", cell(&uks, &e.user_key, hex)));
                        l.push(kv("old", side_text(vs, &e.old, hex)));
                        l.push(kv("new", side_text(vs, &e.new, hex)));
                    }
                }
            }
        }
    }
    l
}
