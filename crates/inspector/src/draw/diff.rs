//! Drawing the diff screen: the summary, the list of differences, and the selected one in
//! full in the pane.

use super::{error_message, highlight, kv, title_with_filter, wrap};
use crate::app::App;
use crate::screens::diff::DiffView;
use crate::screens::rows::scroll_top;
use crate::worker::diff::ChangeCounts;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph, Row as TRow, Table, TableState};
use ratatui::Frame;
use statekit_core::text::cell;
use statekit_core::TypeSchema;
use statekit_snapshot::diff::text::difference_cell;
use statekit_snapshot::diff::text::{item_text, list_text};
use statekit_snapshot::diff::{describe_state, Change, Difference, FieldChange, Item, KeyDetail};

/// Lines above the table, word-wrapped to `width` columns: the summary and, when rows
/// were dropped, a note. Below 60 columns the summary is short.
pub fn summary_lines(dv: &DiffView, width: u16) -> Vec<Line<'static>> {
    let short = width < 60;
    let bold = Style::new().add_modifier(Modifier::BOLD);
    let mut out: Vec<(String, Style)> = Vec::new();
    match &dv.end {
        None => out.push((format!("comparing… {} rows so far", dv.rows.len()), Style::new())),
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
pub fn table_height(dv: &DiffView, area_height: u16, width: u16) -> usize {
    let inner = area_height.saturating_sub(2);
    let summary = summary_height(dv, width.saturating_sub(2));
    usize::from(inner.saturating_sub(summary + 1).max(1))
}

fn summary_height(dv: &DiffView, width: u16) -> u16 {
    (summary_lines(dv, width).len() as u16).min(4)
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
pub fn render(app: &App, dv: &DiffView, f: &mut Frame, area: Rect) {
    let n = dv.list.visible.len();
    let height = table_height(dv, area.height, area.width);
    let top = scroll_top(dv.list.sel, dv.list.top, height);
    let range = if n == 0 {
        String::new()
    } else {
        format!(" · {}-{} of {n}", top + 1, (top + height).min(n))
    };
    let hex = if app.hex { " hex" } else { "" };
    let title = title_with_filter(app, format!("diff{hex}{range}"));
    if let Some(Err(e)) = &dv.end {
        let back = if dv.from_list {
            "Esc: back to the snapshot list"
        } else {
            "q: quit"
        };
        let hints = ["`statekit verify` lists every problem of a snapshot.", back];
        return error_message(f, area, title, "cannot compare these snapshots:", e.message(), &hints);
    }
    let block = Block::default().borders(Borders::ALL).title(title);
    let inner = block.inner(area);
    f.render_widget(block, area);
    let summary = summary_lines(dv, inner.width);
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
    let window = &dv.list.visible[top..(top + height).min(n)];
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
    state.select(Some(dv.list.sel - top));
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
pub fn detail(app: &App, dv: &DiffView) -> Vec<Line<'static>> {
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
