//! Drawing the name lists (snapshots, operators, states) and the entries table.

use super::{bytes, error_message, highlight, message, operator_bytes, title_with_filter};
use crate::app::App;
use crate::screens::entries::EntriesView;
use crate::screens::{ListModel, StateItem};
use ratatui::layout::{Constraint, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Row as TRow, Table, TableState};
use ratatui::Frame;
use statekit_core::text::cell;
use statekit_core::{KeyedStateKind, TypeSchema};
use statekit_snapshot::describe::{changelog_tail, state_totals};

/// The snapshot list's columns: heading and width.
const SNAPSHOT_COLUMNS: [(&str, Constraint); 6] = [
    ("PATH", Constraint::Min(12)),
    ("KIND", Constraint::Length(10)),
    ("ID", Constraint::Length(3)),
    ("FORMAT", Constraint::Length(14)),
    ("BYTES", Constraint::Length(9)),
    ("STATUS", Constraint::Length(6)),
];

/// The operator list's columns.
const OPERATOR_COLUMNS: [(&str, Constraint); 6] = [
    ("UID", Constraint::Min(12)),
    ("PAR", Constraint::Length(5)),
    ("FINISHED", Constraint::Length(8)),
    ("STATES", Constraint::Length(6)),
    ("BYTES", Constraint::Length(9)),
    ("OPERATOR ID", Constraint::Length(32)),
];

/// The state list's columns.
const STATE_COLUMNS: [(&str, Constraint); 6] = [
    ("NAME", Constraint::Min(10)),
    ("KIND", Constraint::Length(12)),
    ("KEY", Constraint::Length(8)),
    ("VALUE", Constraint::Min(8)),
    ("ENTRIES", Constraint::Length(8)),
    ("BYTES", Constraint::Length(9)),
];

/// A table of `columns` (heading, width); below 60 columns only the columns `narrow` lists
/// (when given).
fn table_keep(
    f: &mut Frame,
    area: Rect,
    title: String,
    columns: &[(&str, Constraint)],
    rows: Vec<Vec<String>>,
    sel: usize,
    narrow: Option<&[usize]>,
) {
    let header: Vec<&str> = columns.iter().map(|c| c.0).collect();
    // A fixed column is as wide as its widest cell of any row (not just those on screen, so
    // widths stay put while the selection moves) or its header, at most 40; the flexible
    // column (the names) takes the rest, so names are cut only when there is no room.
    let widths: Vec<Constraint> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| match c.1 {
            Constraint::Length(_) => {
                let content = rows
                    .iter()
                    .filter_map(|r| r.get(i))
                    .map(|cell| ratatui::text::Span::raw(cell.as_str()).width())
                    .max()
                    .unwrap_or(0);
                Constraint::Length(content.max(c.0.len()).min(40) as u16)
            }
            other => other,
        })
        .collect();
    let (header, rows, widths) = match narrow {
        Some(keep) if area.width < 60 => {
            let pick = |v: &[String]| keep.iter().filter_map(|&i| v.get(i).cloned()).collect::<Vec<_>>();
            (
                keep.iter().filter_map(|&i| header.get(i).copied()).collect(),
                rows.iter().map(|r| pick(r)).collect(),
                keep.iter().filter_map(|&i| widths.get(i).copied()).collect(),
            )
        }
        _ => (header, rows, widths),
    };
    // The flexible column's cells that do not fit lose their middle, not their end: two
    // snapshots under one long directory still read apart (`changelog-…/chk-3`).
    let fixed: u16 = widths
        .iter()
        .map(|w| match w {
            Constraint::Length(n) => *n,
            _ => 0,
        })
        .sum();
    let room = usize::from(
        area.width
            .saturating_sub(2)
            .saturating_sub(fixed)
            .saturating_sub(widths.len().saturating_sub(1) as u16),
    );
    let flexible = widths.iter().position(|w| matches!(w, Constraint::Min(_)));
    let mut rows = rows;
    if let Some(i) = flexible {
        let names: Vec<String> = rows.iter().map(|r| r.get(i).cloned().unwrap_or_default()).collect();
        for (r, shown) in rows.iter_mut().zip(elide_apart(&names, room)) {
            if let Some(cell) = r.get_mut(i) {
                *cell = shown;
            }
        }
    }
    let n = rows.len();
    let rows: Vec<TRow> = rows.into_iter().map(TRow::new).collect();
    let t = Table::new(rows, widths)
        .header(TRow::new(header).style(Style::new().add_modifier(Modifier::BOLD)))
        .block(Block::default().borders(Borders::ALL).title(title))
        .row_highlight_style(highlight())
        .column_spacing(1);
    let mut state = TableState::default();
    if n > 0 {
        state.select(Some(sel.min(n - 1)));
    }
    f.render_stateful_widget(t, area, &mut state);
}

/// `text` in at most `width` columns: whole when it fits, else its start and its end with
/// `…` between (the end carries what tells similar names apart).
pub fn elide_middle(text: &str, width: usize) -> String {
    let w = |s: &str| ratatui::text::Span::raw(s).width();
    if w(text) <= width || width < 5 {
        return text.to_string();
    }
    let chars: Vec<char> = text.chars().collect();
    let keep = width - 1;
    let tail_len = keep.div_ceil(2);
    let head_len = keep - tail_len;
    let head: String = chars.iter().take(head_len).collect();
    let tail: String = chars.iter().skip(chars.len().saturating_sub(tail_len)).collect();
    format!("{head}…{tail}")
}

/// `names` in at most `width` columns each ([`elide_middle`]), such that names that differ
/// still read differently: where two would look the same, each shows the stretch around its
/// first difference from the others instead of its middle.
pub fn elide_apart(names: &[String], width: usize) -> Vec<String> {
    let first: Vec<String> = names.iter().map(|n| elide_middle(n, width)).collect();
    let mut shown = first.clone();
    for i in 0..names.len() {
        let clash: Vec<usize> = (0..names.len())
            .filter(|&j| j != i && first[j] == first[i] && names[j] != names[i])
            .collect();
        if clash.is_empty() {
            continue;
        }
        let chars: Vec<char> = names[i].chars().collect();
        // Where this name first differs from every name it would be mistaken for.
        let at = clash
            .iter()
            .map(|&j| {
                chars
                    .iter()
                    .zip(names[j].chars())
                    .take_while(|(a, b)| **a == *b)
                    .count()
            })
            .max()
            .unwrap_or(0);
        shown[i] = elide_around(&chars, width, at);
    }
    shown
}

/// `chars` in `width` columns around position `at`: `…` + the stretch around it + `…` + the
/// last few characters.
fn elide_around(chars: &[char], width: usize, at: usize) -> String {
    if chars.len() <= width || width < 8 {
        return chars.iter().collect();
    }
    let keep = width - 2;
    let tail_len = (keep / 3).min(chars.len());
    let window = keep - tail_len;
    let tail_start = chars.len() - tail_len;
    let start = at.saturating_sub(window / 2).min(tail_start.saturating_sub(window));
    let mid: String = chars.iter().skip(start).take(window.min(tail_start - start)).collect();
    let tail: String = chars.iter().skip(tail_start).collect();
    format!("…{mid}…{tail}")
}

/// The snapshot list.
pub fn snapshots(app: &App, list: &ListModel, f: &mut Frame, area: Rect) {
    let title = title_with_filter(app, "snapshots".into());
    if !app.scanned {
        return message(f, area, title, vec![Line::from("scanning for snapshots…")]);
    }
    if app.snapshots.is_empty() {
        return message(
            f,
            area,
            title,
            vec![Line::from(format!("no checkpoints or savepoints under {}", app.title))],
        );
    }
    let rows = list
        .visible
        .iter()
        .map(|&i| {
            let s = &app.snapshots[i];
            vec![
                if app.diff_base == Some(i) {
                    format!("[base] {}", s.label)
                } else {
                    s.label.clone()
                },
                s.kind.clone(),
                s.id.clone(),
                s.format.clone(),
                bytes(s.bytes),
                s.status().into(),
            ]
        })
        .collect();
    table_keep(f, area, title, &SNAPSHOT_COLUMNS, rows, list.sel, Some(&[0, 1, 5]));
}

/// The operators of the open snapshot (or why it did not open).
pub fn operators(app: &App, list: &ListModel, f: &mut Frame, area: Rect) {
    let title = title_with_filter(app, "operators".into());
    if let Some(e) = &app.open_error {
        let verify = "`statekit verify` lists every problem.";
        let hints: &[&str] = if app.dir_mode {
            &[verify, "Esc: back to the snapshot list"]
        } else {
            &[verify]
        };
        return error_message(f, area, title, "cannot open this snapshot:", e, hints);
    }
    let Some(m) = app.metadata() else {
        return message(f, area, title, vec![Line::from("reading _metadata…")]);
    };
    if m.operators.is_empty() {
        return message(
            f,
            area,
            title,
            vec![Line::from(format!(
                "{} {} holds no operators (an empty snapshot)",
                statekit_snapshot::describe::kind_name(m.kind),
                m.checkpoint_id
            ))],
        );
    }
    let rows = list
        .visible
        .iter()
        .map(|&i| {
            let o = &m.operators[i];
            vec![
                o.uid.clone(),
                format!("{}/{}", o.parallelism, o.max_parallelism),
                if o.finished { "yes".into() } else { "no".into() },
                (o.keyed_states.len() + o.operator_states.len()).to_string(),
                bytes(operator_bytes(o)),
                o.operator_id.to_string(),
            ]
        })
        .collect();
    table_keep(f, area, title, &OPERATOR_COLUMNS, rows, list.sel, Some(&[0, 1, 4]));
}

/// The states of the selected operator.
pub fn states(app: &App, list: &ListModel, f: &mut Frame, area: Rect) {
    let title = title_with_filter(app, "states".into());
    let Some(o) = app.operator() else {
        return message(f, area, title, vec![Line::from("no operator")]);
    };
    let totals = state_totals(o);
    let approx = o.subtasks.iter().any(|s| s.keyed.native().is_some());
    let tilde = if approx { "~" } else { "" };
    // A changelog operator: the materializations' counts, plus the tail's changes (of all
    // states, not split by state in `_metadata`) marked as such.
    let (tail, _) = changelog_tail(o);
    let plus = if tail > 0 { "+Δ" } else { "" };
    let items = StateItem::all(o);
    let rows = list
        .visible
        .iter()
        .map(|&i| match items[i] {
            StateItem::Keyed(i) => {
                let d = &o.keyed_states[i];
                let t = totals.get(&d.name).copied().unwrap_or_default();
                let (entries, b) = (t.entries, t.bytes);
                vec![
                    d.name.clone(),
                    d.kind.to_string(),
                    d.key_schema.to_string(),
                    d.value_schema.to_string(),
                    format!("{tilde}{entries}{plus}"),
                    format!("{tilde}{}{plus}", bytes(b)),
                ]
            }
            StateItem::Operator(i) => {
                let d = &o.operator_states[i];
                vec![
                    d.name.clone(),
                    format!("op {}", d.mode),
                    "-".into(),
                    d.value_schema.to_string(),
                    "-".into(),
                    "-".into(),
                ]
            }
        })
        .collect();
    table_keep(f, area, title, &STATE_COLUMNS, rows, list.sel, Some(&[0, 1, 4]));
}

/// A page of entries.
pub fn entries(app: &App, e: &EntriesView, f: &mut Frame, area: Rect) {
    let d = &e.desc;
    let page = e.page.as_ref();
    let n = page.map_or(0, |p| p.rows.len());
    let range = match (e.first_index, n) {
        (_, 0) => String::new(),
        (Some(first), n) => format!(" {}-{}", first + 1, first + n as u64),
        (None, n) => format!(" {n} shown"),
    };
    let of = match e.total {
        Some((t, approx)) if e.filter.is_empty() => format!(" of {}{t}", if approx { "~" } else { "" }),
        _ => String::new(),
    };
    let hex = if app.hex { " hex" } else { "" };
    let title = title_with_filter(app, format!("{} {}{hex} · entries{range}{of}", d.name, d.kind));
    if let Some(err) = &e.error {
        let hints = ["Esc: back to the states"];
        return error_message(f, area, title, "cannot read this state:", err, &hints);
    }
    let Some(page) = page else {
        return message(f, area, title, vec![Line::from("reading entries…")]);
    };
    if page.rows.is_empty() {
        let text = if e.filter.is_empty() {
            "no entries"
        } else {
            "no entries match the filter (f, then Enter on an empty line: off)"
        };
        return message(f, area, title, vec![Line::from(text)]);
    }
    let with_ns = d.namespace_schema != TypeSchema::Unit;
    let with_ttl = d.ttl.is_some();
    let mut header = vec!["KG", "KEY"];
    if with_ns {
        header.push("NAMESPACE");
    }
    match d.kind {
        KeyedStateKind::Map => {
            header.push("USER KEY");
        }
        KeyedStateKind::List => {
            header.push("#");
        }
        _ => {}
    }
    header.push("VALUE");
    if with_ttl {
        header.push("TTL TS");
    }
    let uks = d.user_key_schema.clone().unwrap_or(TypeSchema::Bytes);
    let rows: Vec<Vec<String>> = page
        .rows
        .iter()
        .map(|r| {
            let mut c = vec![r.position.key_group.to_string(), cell(&d.key_schema, &r.key, app.hex)];
            if with_ns {
                c.push(cell(&d.namespace_schema, &r.namespace, app.hex));
            }
            match d.kind {
                KeyedStateKind::Map => c.push(r.user_key.as_ref().map_or(String::new(), |u| cell(&uks, u, app.hex))),
                KeyedStateKind::List => c.push(r.element.map_or(String::new(), |i| i.to_string())),
                _ => {}
            }
            c.push(cell(&d.value_schema, &r.value, app.hex));
            if with_ttl {
                c.push(r.ttl_timestamp.map_or("-".into(), |t| t.to_string()));
            }
            c
        })
        .collect();
    // Columns as wide as their widest cell on this page; the value takes what is left.
    let widths: Vec<Constraint> = header
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let w = rows
                .iter()
                .map(|r| r[i].chars().count())
                .chain([h.len()])
                .max()
                .unwrap_or(1) as u16;
            match *h {
                "VALUE" => Constraint::Min(w.min(18)),
                "KG" | "#" | "TTL TS" => Constraint::Length(w),
                _ => Constraint::Max(w),
            }
        })
        .collect();
    let columns: Vec<(&str, Constraint)> = header.into_iter().zip(widths).collect();
    table_keep(f, area, title, &columns, rows, e.sel, None);
}

#[cfg(test)]
mod elide {
    use super::elide_middle;

    #[test]
    fn the_end_survives() {
        assert_eq!(elide_middle("short", 10), "short");
        let a = elide_middle("savepoints/savepoint-0123ab-111111111111", 20);
        let b = elide_middle("savepoints/savepoint-0123ab-222222222222", 20);
        assert_ne!(a, b);
        assert!(a.ends_with("1111") && a.contains('…'), "{a}");
        assert_eq!(a.chars().count(), 20);
    }

    #[test]
    fn names_that_differ_read_differently() {
        let names: Vec<String> = [
            "corrupt-changelog-tail-bitflip/c4a9e10f0c4a9e10f0c4a9e10f0c4a9e/chk-3",
            "corrupt-changelog-tail-truncated/c4a9e10f0c4a9e10f0c4a9e10f0c4a9e/chk-3",
            "short",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let shown = super::elide_apart(&names, 27);
        assert_ne!(shown[0], shown[1], "{shown:?}");
        assert!(shown[0].contains("bit") && shown[1].contains("tru"), "{shown:?}");
        assert!(shown.iter().all(|s| s.chars().count() <= 27), "{shown:?}");
        assert_eq!(shown[2], "short");
    }
}
