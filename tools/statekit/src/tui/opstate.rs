//! The operator state screen: Enter on an `op list`, `op union` or `op broadcast` row of the
//! states screen.
//!
//! The worker ([`run`], called from `Worker::handle`) reads the state of every subtask as
//! `statekit dump` prints it (`SnapshotReader::operator_state` at the operator's own
//! parallelism: list elements stay where they were, a union list goes to every subtask whole,
//! a broadcast map is copied) and answers with at most `keep` rows (the rest are only
//! counted). Operator state is small by design, so the rows are held in memory and moving,
//! `/` and `f` work on them without the worker; [`render`] draws the list and [`detail`] the
//! selected element in the pane.

use super::app::App;
use super::loader::Msg;
use super::view::{highlight, kv, message, title_with_filter};
use crate::render::{self, cell};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph, Row as TRow, Table, TableState};
use ratatui::Frame;
use statekit_checkpoint::SnapshotReader;
use statekit_core::{OperatorStateData, OperatorStateDescriptor, OperatorStateMode, TypeSchema};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Rows of an operator state the inspector keeps; beyond them elements are only counted.
pub const OP_KEEP: usize = 100_000;

/// One element (list, union) or entry (broadcast) of one subtask's operator state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpStateRow {
    /// The subtask that holds it.
    pub subtask: u32,
    /// Its index in that subtask's list, or in its map's key order.
    pub index: u64,
    /// Broadcast key bytes (`None` for list and union elements).
    pub key: Option<Vec<u8>>,
    /// Element or value bytes.
    pub value: Vec<u8>,
    /// The row as typed text, as `statekit dump` prints it (what `/` and `f` match).
    pub line: String,
}

/// What the worker read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpStateRead {
    /// The rows, at most `keep`, in subtask order.
    pub rows: Vec<OpStateRow>,
    /// Rows beyond `keep`, not sent.
    pub not_shown: u64,
    /// Subtasks read (the operator's parallelism).
    pub subtasks: u32,
}

fn key_schema(desc: &OperatorStateDescriptor) -> TypeSchema {
    desc.key_schema.clone().unwrap_or(TypeSchema::Bytes)
}

/// The worker's side: reads state `name` of operator `uid` for every subtask and sends
/// progress (subtasks done / total) and one [`Msg::OpState`] — unless a request newer than
/// `gen` arrives (`latest`), which stops it without an answer.
pub fn run(
    reader: Option<&SnapshotReader>,
    latest: &AtomicU64,
    gen: u64,
    uid: &str,
    name: &str,
    keep: usize,
    out: &mut dyn FnMut(Msg),
) {
    let cancelled = || latest.load(Ordering::SeqCst) > gen;
    match read(reader, &cancelled, gen, uid, name, keep, out) {
        Some(result) if !cancelled() => out(Msg::OpState { gen, result }),
        _ => {}
    }
}

/// The rows, or the error; `None` when cancelled.
fn read(
    reader: Option<&SnapshotReader>,
    cancelled: &dyn Fn() -> bool,
    gen: u64,
    uid: &str,
    name: &str,
    keep: usize,
    out: &mut dyn FnMut(Msg),
) -> Option<Result<OpStateRead, String>> {
    let Some(reader) = reader else {
        return Some(Err("no snapshot is open".into()));
    };
    let op = match reader.operator(uid) {
        Ok(op) => op,
        Err(e) => return Some(Err(e.to_string())),
    };
    let Some(desc) = op.operator_states.iter().find(|d| d.name == name) else {
        return Some(Err(format!("operator {uid:?} has no operator state {name:?}")));
    };
    let (vs, ks) = (desc.value_schema.clone(), key_schema(desc));
    let p = op.parallelism;
    let what = format!("reading {name:?}");
    let mut reported: Option<Instant> = None;
    let mut read = OpStateRead {
        rows: Vec::new(),
        not_shown: 0,
        subtasks: p,
    };
    // Each subtask's file is read once, then redistributed at the operator's own parallelism,
    // as `statekit dump` reads it.
    let mut stored = Vec::with_capacity(p as usize);
    for i in 0..p {
        if cancelled() {
            return None;
        }
        if reported.is_none_or(|t| t.elapsed() >= Duration::from_millis(50)) {
            reported = Some(Instant::now());
            out(Msg::Progress {
                gen,
                what: what.clone(),
                done: u64::from(i),
                total: u64::from(p),
                unit: "subtasks",
            });
        }
        match reader.stored_operator_state(uid, i) {
            Ok(s) => stored.push(s),
            Err(e) => return Some(Err(e.to_string())),
        }
    }
    let subtasks = match statekit_core::redistribute(&stored, p) {
        Ok(s) => s,
        Err(e) => return Some(Err(e.to_string())),
    };
    for (i, snap) in (0u32..).zip(subtasks) {
        if cancelled() {
            return None;
        }
        for (d, data) in snap.states {
            if d.name != name {
                continue;
            }
            match data {
                OperatorStateData::List(items) => {
                    for (j, value) in items.into_iter().enumerate() {
                        if read.rows.len() >= keep {
                            read.not_shown += 1;
                            continue;
                        }
                        let line = render::op_element_line(i, j, &vs, &value);
                        read.rows.push(OpStateRow {
                            subtask: i,
                            index: j as u64,
                            key: None,
                            value,
                            line,
                        });
                    }
                }
                OperatorStateData::Broadcast(map) => {
                    for (j, (key, value)) in map.into_iter().enumerate() {
                        if read.rows.len() >= keep {
                            read.not_shown += 1;
                            continue;
                        }
                        let line = render::op_entry_line(i, &ks, &key, &vs, &value);
                        read.rows.push(OpStateRow {
                            subtask: i,
                            index: j as u64,
                            key: Some(key),
                            value,
                            line,
                        });
                    }
                }
            }
        }
    }
    Some(Ok(read))
}

/// The operator state screen's state.
#[derive(Clone, Debug)]
pub struct OpStateView {
    /// The state.
    pub desc: OperatorStateDescriptor,
    /// The rows read (`None`: still reading).
    pub read: Option<OpStateRead>,
    /// Why reading failed.
    pub error: Option<String>,
    /// Indexes of the rows that pass the filter.
    pub visible: Vec<usize>,
    /// Selected row (in `visible`).
    pub sel: usize,
    /// First row shown.
    pub top: usize,
}

impl OpStateView {
    /// An empty view of state `desc`.
    pub fn new(desc: OperatorStateDescriptor) -> Self {
        OpStateView {
            desc,
            read: None,
            error: None,
            visible: Vec::new(),
            sel: 0,
            top: 0,
        }
    }

    /// The rows read so far (none while reading).
    pub fn rows(&self) -> &[OpStateRow] {
        self.read.as_ref().map_or(&[], |r| r.rows.as_slice())
    }

    /// Recomputes the rows whose line contains `filter` (empty: all).
    pub fn refilter(&mut self, filter: &str) {
        let rows = self.read.as_ref().map_or(&[][..], |r| r.rows.as_slice());
        self.visible = (0..rows.len())
            .filter(|&i| filter.is_empty() || rows[i].line.contains(filter))
            .collect();
        self.sel = self.sel.min(self.visible.len().saturating_sub(1));
    }

    /// The selected row.
    pub fn selected(&self) -> Option<&OpStateRow> {
        self.visible.get(self.sel).and_then(|&i| self.rows().get(i))
    }

    /// The next (or previous, `forward` false) visible row containing `text`, wrapping;
    /// the selected row itself only when `include_current`.
    pub fn find(&self, text: &str, forward: bool, include_current: bool) -> Option<usize> {
        let rows = self.rows();
        super::rows::find_wrapping(self.visible.len(), self.sel, forward, include_current, |i| {
            rows[self.visible[i]].line.contains(text)
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

    fn not_shown(&self) -> u64 {
        self.read.as_ref().map_or(0, |r| r.not_shown)
    }
}

/// Rows of the table in a main area of `area_height` rows (borders, header and the
/// "not shown" line off).
fn table_height(v: &OpStateView, area_height: u16) -> usize {
    let note = u16::from(v.not_shown() > 0);
    usize::from(area_height.saturating_sub(3 + note).max(1))
}

/// Rows of the operator state table at the app's size (a page for PgUp/PgDn).
pub fn page_rows(app: &App) -> usize {
    let Some(v) = &app.opstate else {
        return 1;
    };
    let (_, h) = super::diffview::main_area(app);
    table_height(v, h)
}

/// `op list`, `op union`, `op broadcast`.
fn mode_name(d: &OperatorStateDescriptor) -> String {
    format!("op {}", d.mode)
}

/// Draws the operator state list (or the error, or "no elements") in `area`.
pub fn render(app: &App, f: &mut Frame, area: Rect) {
    let Some(v) = &app.opstate else {
        return;
    };
    let d = &v.desc;
    let n = v.visible.len();
    let height = table_height(v, area.height);
    let top = super::rows::scroll_top(v.sel, v.top, height);
    let range = if n == 0 {
        String::new()
    } else {
        format!(" · {}-{} of {n}", top + 1, (top + height).min(n))
    };
    let hex = if app.hex { " hex" } else { "" };
    let title = title_with_filter(app, format!("{} {}{hex}{range}", d.name, mode_name(d)));
    if let Some(err) = &v.error {
        return message(
            f,
            area,
            title,
            vec![
                Line::from(Span::styled(
                    "cannot read this operator state:",
                    Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
                )),
                Line::from(""),
                Line::from(Span::styled(err.clone(), Style::new().fg(Color::Red))),
                Line::from(""),
                Line::from("`statekit verify` lists every problem."),
                Line::from("Esc: back to the states"),
            ],
        );
    }
    let Some(read) = &v.read else {
        return message(f, area, title, vec![Line::from("reading operator state…")]);
    };
    let what = if d.mode == OperatorStateMode::Broadcast {
        "entries"
    } else {
        "elements"
    };
    if read.rows.is_empty() && read.not_shown == 0 {
        let text = format!("no {what} in {} subtasks", read.subtasks);
        return message(f, area, title, vec![Line::from(text)]);
    }
    let block = Block::default().borders(Borders::ALL).title(title);
    let inner = block.inner(area);
    f.render_widget(block, area);
    let note = u16::from(read.not_shown > 0);
    let [table_area, note_area] = Layout::vertical([Constraint::Min(0), Constraint::Length(note)]).areas(inner);
    if read.not_shown > 0 {
        let text = if area.width < 60 {
            format!("… {} more not shown (statekit dump)", read.not_shown)
        } else {
            format!("… {} more {what} not shown (use statekit dump)", read.not_shown)
        };
        f.render_widget(
            Paragraph::new(Span::styled(text, Style::new().fg(Color::Yellow))),
            note_area,
        );
    }
    if n == 0 {
        f.render_widget(
            Paragraph::new(format!(
                "no {what} match the filter (f, then Enter on an empty line: off)"
            )),
            table_area,
        );
        return;
    }
    let (vs, ks) = (&d.value_schema, key_schema(d));
    let broadcast = d.mode == OperatorStateMode::Broadcast;
    let header = if broadcast {
        vec!["SUBTASK", "KEY", "VALUE"]
    } else {
        vec!["SUBTASK", "#", "VALUE"]
    };
    let cells: Vec<Vec<String>> = v.visible[top..(top + height).min(n)]
        .iter()
        .map(|&i| {
            let r = &read.rows[i];
            let second = match &r.key {
                Some(k) => cell(&ks, k, app.hex),
                None => r.index.to_string(),
            };
            vec![r.subtask.to_string(), second, cell(vs, &r.value, app.hex)]
        })
        .collect();
    let widths: Vec<Constraint> = (0..header.len())
        .map(|i| {
            let w = cells
                .iter()
                .map(|r| r[i].chars().count())
                .chain([header[i].len()])
                .max()
                .unwrap_or(1) as u16;
            match i {
                0 => Constraint::Length(w),
                1 if broadcast => Constraint::Max(w.min(if area.width < 60 { 14 } else { 32 })),
                1 => Constraint::Length(w),
                _ => Constraint::Min(w.min(12)),
            }
        })
        .collect();
    let rows: Vec<TRow> = cells.into_iter().map(TRow::new).collect();
    let t = Table::new(rows, widths)
        .header(TRow::new(header).style(Style::new().add_modifier(Modifier::BOLD)))
        .row_highlight_style(highlight())
        .column_spacing(1);
    let mut state = TableState::default();
    state.select(Some(v.sel - top));
    f.render_stateful_widget(t, table_area, &mut state);
}

/// The pane: the state, and the selected element in full, typed and as hex.
pub fn detail(app: &App) -> Vec<Line<'static>> {
    let Some(v) = &app.opstate else {
        return Vec::new();
    };
    let d = &v.desc;
    let mut types = format!("value {}", d.value_schema);
    if let Some(k) = &d.key_schema {
        types = format!("key {k} {types}");
    }
    let mut l = vec![kv("operator state", format!("{} ({}), {types}", d.name, mode_name(d)))];
    let restore = match d.mode {
        OperatorStateMode::List => "each subtask its own elements",
        OperatorStateMode::Union => "every subtask gets all elements",
        OperatorStateMode::Broadcast => "every subtask gets a copy",
    };
    l.push(kv("as restored", restore.to_string()));
    let Some(r) = v.selected() else {
        return l;
    };
    let subtasks = v.read.as_ref().map_or(0, |r| r.subtasks);
    l.push(kv("subtask", format!("{} of {subtasks}", r.subtask)));
    match &r.key {
        Some(k) => {
            let ks = key_schema(d);
            l.push(kv("key", cell(&ks, k, false)));
            l.push(kv("key hex", cell(&ks, k, true)));
        }
        None => l.push(kv("element", r.index.to_string())),
    }
    l.push(kv("value", cell(&d.value_schema, &r.value, false)));
    l.push(kv("value hex", cell(&d.value_schema, &r.value, true)));
    l
}
