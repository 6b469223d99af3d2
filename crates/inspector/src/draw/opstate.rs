//! Drawing the operator state screen: the list of elements (or entries), and the selected one
//! in full in the pane.

use super::{error_message, highlight, kv, message, title_with_filter};
use crate::app::App;
use crate::screens::opstate::OpStateView;
use crate::screens::rows::scroll_top;
use crate::worker::opstate::key_schema;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph, Row as TRow, Table, TableState};
use ratatui::Frame;
use statekit_core::text::cell;
use statekit_core::{OperatorStateDescriptor, OperatorStateMode};

/// Rows of the table in a main area of `area_height` rows (borders, header and the
/// "not shown" line off).
pub fn table_height(v: &OpStateView, area_height: u16) -> usize {
    let note = u16::from(v.not_shown() > 0);
    usize::from(area_height.saturating_sub(3 + note).max(1))
}

/// `op list`, `op union`, `op broadcast`.
fn mode_name(d: &OperatorStateDescriptor) -> String {
    format!("op {}", d.mode)
}

/// Draws the operator state list (or the error, or "no elements") in `area`.
pub fn render(app: &App, v: &OpStateView, f: &mut Frame, area: Rect) {
    let d = &v.desc;
    let n = v.list.visible.len();
    let height = table_height(v, area.height);
    let top = scroll_top(v.list.sel, v.list.top, height);
    let range = if n == 0 {
        String::new()
    } else {
        format!(" · {}-{} of {n}", top + 1, (top + height).min(n))
    };
    let hex = if app.hex { " hex" } else { "" };
    let title = title_with_filter(app, format!("{} {}{hex}{range}", d.name, mode_name(d)));
    if let Some(err) = &v.error {
        let hints = ["`statekit verify` lists every problem.", "Esc: back to the states"];
        return error_message(f, area, title, "cannot read this operator state:", err, &hints);
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
    let cells: Vec<Vec<String>> = v.list.visible[top..(top + height).min(n)]
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
    state.select(Some(v.list.sel - top));
    f.render_stateful_widget(t, table_area, &mut state);
}

/// The pane: the state, and the selected element in full, typed and as hex.
pub fn detail(v: &OpStateView) -> Vec<Line<'static>> {
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
