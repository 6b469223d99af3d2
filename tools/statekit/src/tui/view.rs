//! `render(&App, &mut Frame)`: everything on screen is a function of the [`App`].

use super::app::{App, Screen, StateItem, SMALL_HEIGHT};
use super::keys::HELP;
use crate::cmd::changelog::Summary;
use crate::cmd::inspect::{is_changelog, state_totals};
use crate::render::cell;
use ratatui::layout::{Alignment, Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{
    Bar, BarChart, BarGroup, Block, Borders, Clear, Paragraph, Row as TRow, Table, TableState, Wrap,
};
use ratatui::Frame;
use statekit_core::{KeyedStateKind, TypeSchema};
use statekit_format::{OperatorMetadata, SubtaskMetadata};

/// At this many columns or more the metadata pane sits beside the list, else under it.
pub const SIDE_PANE_WIDTH: u16 = 100;

/// Rows of the pane under the list, for a body of `body` rows.
pub fn bottom_pane_height(body: u16) -> u16 {
    body / 2
}

const SPINNER: [char; 4] = ['|', '/', '-', '\\'];

/// Bytes, short: `812 B`, `10.2 KiB`, `3.5 GiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 10_000 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}

/// (keyed bytes, operator-state bytes) of a subtask, as `show` counts them.
fn subtask_bytes(s: &SubtaskMetadata) -> (u64, u64) {
    let ob = s.operator.as_ref().map_or(0, |f| f.size);
    let kb = if let Some(n) = &s.native {
        n.total_bytes()
    } else if let Some(h) = &s.changelog {
        h.materialized_bytes() + h.tail_bytes()
    } else {
        s.keyed.as_ref().map_or(0, |f| f.size)
    };
    (kb, ob)
}

fn operator_bytes(o: &OperatorMetadata) -> u64 {
    o.subtasks
        .iter()
        .map(|s| {
            let (k, op) = subtask_bytes(s);
            k + op
        })
        .sum()
}

/// Bytes per key group of an operator from `_metadata`, and what they are.
fn key_group_bytes(o: &OperatorMetadata) -> (Vec<u64>, &'static str) {
    // Bounded whatever `_metadata` claims (a reader refuses max parallelism above 32768).
    let n = o.max_parallelism.min(statekit_core::UPPER_BOUND_MAX_PARALLELISM);
    let mut per = vec![0u64; n as usize];
    let mut what = "stored";
    for s in &o.subtasks {
        if let Some(k) = &s.keyed_stats {
            for g in &k.key_groups {
                if let Some(b) = per.get_mut(g.key_group as usize) {
                    *b = b.saturating_add(g.stored_bytes);
                }
            }
        }
        if let Some(n) = &s.native {
            what = "RocksDB estimate";
            for (kg, b) in &n.stats.key_groups {
                if let Some(x) = per.get_mut(*kg as usize) {
                    *x = x.saturating_add(*b);
                }
            }
        }
        if let Some(h) = &s.changelog {
            what = "materialized";
            for part in &h.materialized {
                let range = part.key_groups.intersection(&s.key_groups);
                for g in part.stats.iter().flat_map(|st| &st.key_groups) {
                    if range.contains(g.key_group) {
                        if let Some(b) = per.get_mut(g.key_group as usize) {
                            *b = b.saturating_add(g.stored_bytes);
                        }
                    }
                }
            }
        }
    }
    (per, what)
}

/// Draws the whole screen.
pub fn render(app: &App, f: &mut Frame) {
    let area = f.area();
    let [header, body, footer] =
        Layout::vertical([Constraint::Length(1), Constraint::Min(0), Constraint::Length(1)]).areas(area);
    render_header(app, f, header);
    render_footer(app, f, footer);
    if app.meta_visible() {
        if area.width >= SIDE_PANE_WIDTH {
            let [main, pane] = Layout::horizontal([Constraint::Percentage(60), Constraint::Percentage(40)]).areas(body);
            render_main(app, f, main);
            render_pane(app, f, pane);
        } else if area.height >= SMALL_HEIGHT {
            let [main, pane] =
                Layout::vertical([Constraint::Min(0), Constraint::Length(bottom_pane_height(body.height))]).areas(body);
            render_main(app, f, main);
            render_pane(app, f, pane);
        } else {
            render_pane(app, f, body);
        }
    } else {
        render_main(app, f, body);
    }
    if app.help {
        render_help(app, f, area);
    }
}

fn render_header(app: &App, f: &mut Frame, area: Rect) {
    let mut crumbs = vec![app.title.clone()];
    if let (Screen::Diff, Some(d)) = (app.screen, &app.diff) {
        let what = format!("diff {} → {}", d.sides[0].label, d.sides[1].label);
        if app.dir_mode {
            crumbs.push(what);
        } else {
            crumbs = vec![what];
        }
    } else if app.screen != Screen::Snapshots {
        if let Some((label, m)) = &app.snapshot {
            let what = format!(
                "{} {} {}",
                crate::cmd::inspect::kind_name(m.kind),
                m.checkpoint_id,
                crate::cmd::inspect::format_label(m)
            );
            let what = if app.screen == Screen::Operators {
                format!(" ({what})")
            } else {
                String::new()
            };
            if app.dir_mode {
                crumbs.push(format!("{label}{what}"));
            } else {
                crumbs[0] = format!("{}{what}", crumbs[0]);
            }
        }
    }
    if matches!(app.screen, Screen::States | Screen::Entries | Screen::OpState) {
        if let Some(o) = app.operator() {
            crumbs.push(o.uid.clone());
        }
    }
    if app.screen == Screen::Entries {
        if let Some(e) = &app.entries {
            crumbs.push(e.desc.name.clone());
        }
    }
    if app.screen == Screen::OpState {
        if let Some(v) = &app.opstate {
            crumbs.push(v.desc.name.clone());
        }
    }
    let line = Line::from(vec![
        Span::styled(" statekit inspect ", Style::new().add_modifier(Modifier::BOLD)),
        Span::raw(crumbs.join(" › ")),
    ]);
    f.render_widget(
        Paragraph::new(line).style(Style::new().bg(Color::Blue).fg(Color::White)),
        area,
    );
}

fn render_footer(app: &App, f: &mut Frame, area: Rect) {
    let line = if let Some(p) = &app.prompt {
        let label = match p.kind {
            super::app::PromptKind::Search => "/",
            super::app::PromptKind::Filter => "filter: ",
        };
        Line::from(vec![Span::raw(label), Span::raw(p.text.clone()), Span::raw("_")])
    } else if let Some(l) = &app.loading {
        let spin = SPINNER[(app.tick % 4) as usize];
        let count = if l.total > 0 {
            format!(" ({}/{} {})", l.done, l.total, l.unit)
        } else {
            String::new()
        };
        Line::from(Span::styled(
            format!("{spin} {}…{count}", l.what),
            Style::new().fg(Color::Yellow),
        ))
    } else if let Some(s) = &app.status {
        Line::from(Span::raw(s.clone()))
    } else {
        Line::from(Span::styled(
            "?:help q:quit /:search n/N f:filter x:hex m:pane",
            Style::new().fg(Color::DarkGray),
        ))
    };
    f.render_widget(Paragraph::new(line), area);
}

/// ` title ` with the screen's filter, if any.
pub(super) fn title_with_filter(app: &App, title: String) -> String {
    let filter = &app.filters[app.screen.slot()];
    if filter.is_empty() {
        format!(" {title} ")
    } else {
        format!(" {title} [filter: {filter}] ")
    }
}

/// A bordered box of text.
pub(super) fn message(f: &mut Frame, area: Rect, title: String, text: Vec<Line<'static>>) {
    let p = Paragraph::new(text)
        .block(Block::default().borders(Borders::ALL).title(title))
        .wrap(Wrap { trim: false });
    f.render_widget(p, area);
}

/// The style of the selected row.
pub(super) fn highlight() -> Style {
    Style::new().add_modifier(Modifier::REVERSED)
}

fn table(
    f: &mut Frame,
    area: Rect,
    title: String,
    header: Vec<&str>,
    rows: Vec<Vec<String>>,
    widths: Vec<Constraint>,
    sel: usize,
) {
    table_keep(f, area, title, header, rows, widths, sel, None);
}

/// A table; below 60 columns only the columns `narrow` lists (when given).
#[allow(clippy::too_many_arguments)]
fn table_keep(
    f: &mut Frame,
    area: Rect,
    title: String,
    header: Vec<&str>,
    rows: Vec<Vec<String>>,
    widths: Vec<Constraint>,
    sel: usize,
    narrow: Option<&[usize]>,
) {
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

fn render_main(app: &App, f: &mut Frame, area: Rect) {
    match app.screen {
        Screen::Snapshots => render_snapshots(app, f, area),
        Screen::Operators => render_operators(app, f, area),
        Screen::States => render_states(app, f, area),
        Screen::Entries => render_entries(app, f, area),
        Screen::Diff => super::diffview::render(app, f, area),
        Screen::OpState => super::opstate::render(app, f, area),
    }
}

fn render_snapshots(app: &App, f: &mut Frame, area: Rect) {
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
    let rows = app
        .visible_snapshots()
        .into_iter()
        .map(|i| {
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
                if s.complete { "ok".into() } else { "BROKEN".into() },
            ]
        })
        .collect();
    table_keep(
        f,
        area,
        title,
        vec!["PATH", "KIND", "ID", "FORMAT", "BYTES", "STATUS"],
        rows,
        vec![
            Constraint::Min(12),
            Constraint::Length(10),
            Constraint::Length(3),
            Constraint::Length(14),
            Constraint::Length(9),
            Constraint::Length(6),
        ],
        app.sel[0],
        Some(&[0, 1, 5]),
    );
}

fn render_operators(app: &App, f: &mut Frame, area: Rect) {
    let title = title_with_filter(app, "operators".into());
    if let Some(e) = &app.open_error {
        let mut lines = vec![
            Line::from(Span::styled(
                "cannot open this snapshot:",
                Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
            )),
            Line::from(""),
            Line::from(Span::styled(e.clone(), Style::new().fg(Color::Red))),
            Line::from(""),
            Line::from("`statekit verify` lists every problem."),
        ];
        if app.dir_mode {
            lines.push(Line::from("Esc: back to the snapshot list"));
        }
        return message(f, area, title, lines);
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
                crate::cmd::inspect::kind_name(m.kind),
                m.checkpoint_id
            ))],
        );
    }
    let rows = app
        .visible_operators()
        .into_iter()
        .map(|i| {
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
    table_keep(
        f,
        area,
        title,
        vec!["UID", "PAR", "FINISHED", "STATES", "BYTES", "OPERATOR ID"],
        rows,
        vec![
            Constraint::Min(12),
            Constraint::Length(5),
            Constraint::Length(8),
            Constraint::Length(6),
            Constraint::Length(9),
            Constraint::Length(32),
        ],
        app.sel[1],
        Some(&[0, 1, 4]),
    );
}

fn render_states(app: &App, f: &mut Frame, area: Rect) {
    let title = title_with_filter(app, "states".into());
    let Some(o) = app.operator() else {
        return message(f, area, title, vec![Line::from("no operator")]);
    };
    let totals = state_totals(o);
    let approx = o.subtasks.iter().any(|s| s.native.is_some() || s.changelog.is_some());
    let tilde = if approx { "~" } else { "" };
    let rows = app
        .visible_states()
        .into_iter()
        .map(|s| match s {
            StateItem::Keyed(i) => {
                let d = &o.keyed_states[i];
                let (entries, b) = totals.get(&d.name).copied().unwrap_or_default();
                vec![
                    d.name.clone(),
                    d.kind.to_string(),
                    d.key_schema.to_string(),
                    d.value_schema.to_string(),
                    format!("{tilde}{entries}"),
                    format!("{tilde}{}", bytes(b)),
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
    table_keep(
        f,
        area,
        title,
        vec!["NAME", "KIND", "KEY", "VALUE", "ENTRIES", "BYTES"],
        rows,
        vec![
            Constraint::Min(10),
            Constraint::Length(12),
            Constraint::Length(8),
            Constraint::Min(8),
            Constraint::Length(8),
            Constraint::Length(9),
        ],
        app.sel[2],
        Some(&[0, 1, 4]),
    );
}

fn render_entries(app: &App, f: &mut Frame, area: Rect) {
    let Some(e) = &app.entries else {
        return;
    };
    let d = &e.desc;
    let page = e.page.as_ref();
    let n = page.map_or(0, |p| p.rows.len());
    let range = match (e.first_index, n) {
        (_, 0) => String::new(),
        (Some(first), n) => format!(" {}-{}", first + 1, first + n as u64),
        (None, n) => format!(" {n} shown"),
    };
    let of = match e.total {
        Some((t, approx)) if app.filters[3].is_empty() => format!(" of {}{t}", if approx { "~" } else { "" }),
        _ => String::new(),
    };
    let hex = if app.hex { " hex" } else { "" };
    let title = title_with_filter(app, format!("{} {}{hex} · entries{range}{of}", d.name, d.kind));
    if let Some(err) = &e.error {
        return message(
            f,
            area,
            title,
            vec![
                Line::from(Span::styled(
                    "cannot read this state:",
                    Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
                )),
                Line::from(""),
                Line::from(Span::styled(err.clone(), Style::new().fg(Color::Red))),
                Line::from(""),
                Line::from("Esc: back to the states"),
            ],
        );
    }
    let Some(page) = page else {
        return message(f, area, title, vec![Line::from("reading entries…")]);
    };
    if page.rows.is_empty() {
        let text = if app.filters[3].is_empty() {
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
            let mut c = vec![r.cursor.key_group.to_string(), cell(&d.key_schema, &r.key, app.hex)];
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
    let widths = header
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
    table(f, area, title, header, rows, widths, e.sel);
}

fn render_pane(app: &App, f: &mut Frame, area: Rect) {
    let title = match app.screen {
        Screen::Diff => " difference ",
        Screen::OpState
            if app
                .opstate
                .as_ref()
                .is_some_and(|v| v.desc.mode == statekit_core::OperatorStateMode::Broadcast) =>
        {
            " entry "
        }
        Screen::OpState => " element ",
        _ => " metadata ",
    };
    let block = Block::default().borders(Borders::ALL).title(title);
    let inner = block.inner(area);
    f.render_widget(block, area);
    let (lines, chart) = pane_content(app);
    let Some((per, what, highlight)) = chart else {
        f.render_widget(Paragraph::new(lines).wrap(Wrap { trim: false }), inner);
        return;
    };
    // Text and chart side by side when the pane is wide, else the chart under the text.
    let (text_area, chart_area) = if inner.width >= 60 {
        let [t, c] = Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)])
            .spacing(1)
            .areas(inner);
        (t, c)
    } else {
        let want = lines.len() as u16;
        let chart_rows = if inner.height >= want + 6 {
            inner.height - want
        } else if inner.height >= 9 {
            6
        } else {
            0
        };
        let [t, c] = Layout::vertical([Constraint::Min(0), Constraint::Length(chart_rows)]).areas(inner);
        (t, c)
    };
    f.render_widget(Paragraph::new(lines).wrap(Wrap { trim: false }), text_area);
    render_chart(f, chart_area, &per, what, highlight);
}

type Chart = (Vec<u64>, &'static str, Option<u32>);

/// `key: value`, the key coloured.
pub(super) fn kv(k: &str, v: String) -> Line<'static> {
    Line::from(vec![
        Span::styled(format!("{k}: "), Style::new().fg(Color::Cyan)),
        Span::raw(v),
    ])
}

fn pane_content(app: &App) -> (Vec<Line<'static>>, Option<Chart>) {
    match app.screen {
        Screen::Diff => (super::diffview::detail(app), None),
        Screen::OpState => (super::opstate::detail(app), None),
        Screen::Snapshots => {
            let visible = app.visible_snapshots();
            let Some(s) = visible.get(app.sel[0]).map(|&i| &app.snapshots[i]) else {
                return (vec![], None);
            };
            let mut l = vec![
                kv("path", s.label.clone()),
                kv("kind", format!("{} {} ({})", s.kind, s.id, s.format)),
                kv("taken", s.time.clone()),
                kv(
                    "bytes",
                    format!("{} referenced, {} own", bytes(s.bytes), bytes(s.own_bytes)),
                ),
            ];
            if let Some(p) = &s.problem {
                l.push(Line::from(Span::styled(app.sanitize(p), Style::new().fg(Color::Red))));
            }
            (l, None)
        }
        Screen::Operators => {
            if app.open_error.is_some() {
                return (vec![], None);
            }
            let Some(m) = app.metadata() else {
                return (vec![], None);
            };
            let mut l = Vec::new();
            let Some(o) = app.operator() else {
                return (l, None);
            };
            l.push(kv("operator", o.uid.clone()));
            l.push(kv("id", o.operator_id.to_string()));
            l.push(kv(
                "parallelism",
                format!(
                    "{} of max {}{}",
                    o.parallelism,
                    o.max_parallelism,
                    if o.finished { ", finished" } else { "" }
                ),
            ));
            operator_lines(o, &mut l);
            l.push(kv(
                "job",
                format!("{}, taken {}", m.job_id, crate::cmd::inspect::utc_time(m.timestamp_ms)),
            ));
            let (per, what) = key_group_bytes(o);
            (l, Some((per, what, None)))
        }
        Screen::States | Screen::Entries => {
            let Some(o) = app.operator() else {
                return (vec![], None);
            };
            let mut l = Vec::new();
            let mut highlight = None;
            if app.screen == Screen::Entries {
                if let Some(e) = &app.entries {
                    if let Some(r) = e.selected() {
                        let d = &e.desc;
                        highlight = Some(r.cursor.key_group);
                        l.push(kv("key group", r.cursor.key_group.to_string()));
                        l.push(kv("key", cell(&d.key_schema, &r.key, app.hex)));
                        if d.namespace_schema != TypeSchema::Unit {
                            l.push(kv("namespace", cell(&d.namespace_schema, &r.namespace, app.hex)));
                        }
                        if let Some(uk) = &r.user_key {
                            let s = d.user_key_schema.clone().unwrap_or(TypeSchema::Bytes);
                            l.push(kv("user key", cell(&s, uk, app.hex)));
                        }
                        if let Some(i) = r.element {
                            l.push(kv("element", i.to_string()));
                        }
                        l.push(kv("value", cell(&d.value_schema, &r.value, app.hex)));
                        if !app.hex {
                            l.push(kv("value hex", cell(&d.value_schema, &r.value, true)));
                        }
                        if let Some(t) = r.ttl_timestamp {
                            l.push(kv(
                                "ttl timestamp",
                                format!("{t} ({})", crate::cmd::inspect::utc_time(t)),
                            ));
                        }
                    }
                }
            } else {
                match app.state() {
                    Some(StateItem::Keyed(i)) => {
                        let d = &o.keyed_states[i];
                        let (entries, b) = state_totals(o).get(&d.name).copied().unwrap_or_default();
                        l.push(kv(
                            "state",
                            format!("{} ({}), {entries} entries, {}", d.name, d.kind, bytes(b)),
                        ));
                        let mut types = format!(
                            "key {} ns {} value {}",
                            d.key_schema, d.namespace_schema, d.value_schema
                        );
                        if let Some(u) = &d.user_key_schema {
                            types.push_str(&format!(" user key {u}"));
                        }
                        l.push(kv("types", types));
                        if let Some(t) = d.ttl {
                            l.push(kv("ttl", format!("{} ms", t.ttl_ms)));
                        }
                    }
                    Some(StateItem::Operator(i)) => {
                        let d = &o.operator_states[i];
                        l.push(kv(
                            "operator state",
                            format!("{} ({}), value {}", d.name, d.mode, d.value_schema),
                        ));
                    }
                    None => {}
                }
                operator_lines(o, &mut l);
            }
            let (per, what) = key_group_bytes(o);
            (l, Some((per, what, highlight)))
        }
    }
}

/// Per-subtask sizes and, for changelog operators, materialized vs tail bytes.
fn operator_lines(o: &OperatorMetadata, l: &mut Vec<Line<'static>>) {
    for s in &o.subtasks {
        let (kb, ob) = subtask_bytes(s);
        l.push(Line::from(format!(
            " subtask {} kg {}: {} + op {}{}",
            s.index,
            s.key_groups,
            bytes(kb),
            bytes(ob),
            if s.finished { " fin" } else { "" }
        )));
    }
    if is_changelog(o) {
        let sum = Summary::of(&o.subtasks);
        let amp = sum
            .space_amplification()
            .map(|a| format!(" (tail/materialized {a:.2}x)"))
            .unwrap_or_default();
        l.push(kv(
            "changelog",
            format!(
                "materialized {}, log tail {} in {} change sets{amp}",
                bytes(sum.materialized_bytes),
                bytes(sum.log_bytes),
                sum.change_sets
            ),
        ));
    }
}

/// A bar chart of bytes per key group, bucketed to the width; the bar of `highlight` (a key
/// group) stands out.
fn render_chart(f: &mut Frame, area: Rect, per: &[u64], what: &str, highlight: Option<u32>) {
    if per.is_empty() || area.height < 4 || area.width < 8 {
        return;
    }
    let n = per.len();
    let nonzero: Vec<u64> = per.iter().copied().filter(|&b| b > 0).collect();
    let max = per.iter().copied().max().unwrap_or(0);
    let argmax = per.iter().position(|&b| b == max).unwrap_or(0);
    let mean = if nonzero.is_empty() {
        0
    } else {
        nonzero.iter().sum::<u64>() / nonzero.len() as u64
    };
    let skew = if mean > 0 && max > 4 * mean { " SKEWED" } else { "" };
    let summary = Line::from(vec![
        Span::styled(
            format!("bytes/key group, {what}:"),
            Style::new().add_modifier(Modifier::BOLD),
        ),
        Span::raw(format!(
            " {}/{n} hold data, mean {}, max {} (kg {argmax})",
            nonzero.len(),
            bytes(mean),
            bytes(max)
        )),
        Span::styled(skew, Style::new().fg(Color::Red).add_modifier(Modifier::BOLD)),
    ]);
    let [text, bars] = Layout::vertical([Constraint::Length(2), Constraint::Min(0)]).areas(area);
    f.render_widget(Paragraph::new(summary).wrap(Wrap { trim: true }), text);
    let width = usize::from(bars.width);
    // Bars of 1–4 columns and a gap of 1 when they fit; else 1 column each, and buckets
    // of several key groups (their largest) when even that does not fit.
    let (per_bucket, bar_width, gap) = if n * 2 <= width {
        (1, ((width / n).saturating_sub(1)).clamp(1, 4), 1)
    } else if n <= width {
        (1, 1, 0)
    } else {
        (n.div_ceil(width), 1, 0)
    };
    let labels = bar_width >= 2 || per_bucket == 1 && n <= 10;
    let data: Vec<Bar> = per
        .chunks(per_bucket)
        .enumerate()
        .map(|(i, c)| {
            let first = (i * per_bucket) as u32;
            let v = c.iter().copied().max().unwrap_or(0);
            let hit = highlight.is_some_and(|h| h >= first && h < first + c.len() as u32);
            let mut b = Bar::default().value(v).text_value(String::new());
            if labels {
                b = b.label(Line::from(first.to_string()));
            }
            if hit {
                b = b.style(Style::new().fg(Color::Yellow));
            }
            b
        })
        .collect();
    let chart = BarChart::default()
        .data(BarGroup::default().bars(&data))
        .bar_width(bar_width as u16)
        .bar_gap(gap as u16)
        .max(max.max(1))
        .bar_style(Style::new().fg(Color::Green));
    f.render_widget(chart, bars);
}

/// Where the help overlay goes in a terminal of `area`, and its lines (wrapped to its width).
fn help_layout(area: Rect) -> (Rect, Vec<Line<'static>>) {
    let w = area.width.saturating_sub(2).min(78);
    let lines = help_lines(w.saturating_sub(2));
    let h = area.height.saturating_sub(2).min(lines.len() as u16 + 2);
    let r = Rect {
        x: area.x + (area.width - w) / 2,
        y: area.y + (area.height - h) / 2,
        width: w,
        height: h,
    };
    (r, lines)
}

/// The help's lines at `width` columns: key and description side by side, the description
/// wrapped under itself; on a narrow overlay each key on a line of its own, its description
/// indented under it.
fn help_lines(width: u16) -> Vec<Line<'static>> {
    let width = usize::from(width.max(1));
    let key_w = HELP.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let key_style = Style::new().fg(Color::Cyan);
    let mut out = Vec::new();
    if width >= key_w + 1 + 24 {
        let indent = " ".repeat(key_w + 1);
        for (k, d) in HELP {
            for (i, part) in super::diffview::wrap(d, width - key_w - 1).into_iter().enumerate() {
                let head = if i == 0 {
                    format!("{k:<key_w$} ")
                } else {
                    indent.clone()
                };
                out.push(Line::from(vec![Span::styled(head, key_style), Span::raw(part)]));
            }
        }
    } else {
        for (k, d) in HELP {
            out.push(Line::from(Span::styled(k.to_string(), key_style)));
            for part in super::diffview::wrap(d, width.saturating_sub(2).max(1)) {
                out.push(Line::from(format!("  {part}")));
            }
        }
    }
    out
}

/// Lines of the help the overlay shows at once in a terminal of `size`.
pub fn help_height(size: (u16, u16)) -> u16 {
    let (r, _) = help_layout(Rect::new(0, 0, size.0, size.1));
    r.height.saturating_sub(2)
}

/// How far the help can scroll in a terminal of `size` (0: it fits).
pub fn help_max_scroll(size: (u16, u16)) -> u16 {
    let (r, lines) = help_layout(Rect::new(0, 0, size.0, size.1));
    (lines.len() as u16).saturating_sub(r.height.saturating_sub(2))
}

fn render_help(app: &App, f: &mut Frame, area: Rect) {
    let (r, lines) = help_layout(area);
    let shown = r.height.saturating_sub(2);
    let max = (lines.len() as u16).saturating_sub(shown);
    let top = app.help_scroll.min(max);
    let marker = match (top > 0, top < max) {
        (true, true) => " ↑↓ more ",
        (false, true) => " ↓ more ",
        (true, false) => " ↑ more ",
        (false, false) => "",
    };
    let lines: Vec<Line> = lines
        .into_iter()
        .skip(usize::from(top))
        .take(usize::from(shown))
        .collect();
    f.render_widget(Clear, r);
    let title = if max > 0 {
        " keys (j/k scroll, Esc closes) "
    } else {
        " keys (any key closes) "
    };
    let mut block = Block::default()
        .borders(Borders::ALL)
        .title(title)
        .title_alignment(Alignment::Center);
    if !marker.is_empty() {
        block = block.title_bottom(Line::from(Span::styled(marker, Style::new().fg(Color::Yellow))).right_aligned());
    }
    f.render_widget(Paragraph::new(lines).block(block), r);
}
