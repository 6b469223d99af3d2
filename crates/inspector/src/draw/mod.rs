//! `render(&App, &mut Frame)`: everything on screen is a function of the [`App`].
//!
//! The frame (header, footer, pane, key-group chart, help overlay) is drawn here, the name
//! lists and the entries table in [`lists`], the diff screen in [`diff`] and the operator
//! state screen in [`opstate`]. The layout functions ([`main_area`], [`entries_rows`]) tell
//! the screen models how many rows a page holds.

pub mod diff;
pub mod lists;
pub mod opstate;

use super::app::App;
use super::app::PromptKind;
use super::keys::HELP;
use super::screens::{Screen, ScreenState, StateItem};
use ratatui::layout::{Alignment, Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Bar, BarChart, BarGroup, Block, Borders, Clear, Paragraph, Wrap};
use ratatui::Frame;
use statekit_core::text::cell;
use statekit_core::TypeSchema;
use statekit_format::{OperatorMetadata, SubtaskMetadata};
use statekit_snapshot::describe::{is_changelog, state_totals, ChangelogSummary};

/// At this many columns or more the metadata pane sits beside the list, else under it.
pub const SIDE_PANE_WIDTH: u16 = 100;

/// Rows of a terminal below which the pane does not show by itself.
pub const SMALL_HEIGHT: u16 = 16;

/// Rows of the header, footer, table border and table header around entries.
const CHROME_ROWS: u16 = 5;

/// Rows of the pane under the list, for a body of `body` rows.
pub fn bottom_pane_height(body: u16) -> u16 {
    body / 2
}

/// The main area (columns, rows) of a screen in a terminal of `size`, as [`render`] lays it
/// out (`meta_visible`: the pane shows).
pub fn main_area(size: (u16, u16), meta_visible: bool) -> (u16, u16) {
    let (w, h) = size;
    let body = h.saturating_sub(2);
    if meta_visible {
        if w >= SIDE_PANE_WIDTH {
            (w - w * 2 / 5, body)
        } else if h >= SMALL_HEIGHT {
            (w, body - bottom_pane_height(body))
        } else {
            (w, body)
        }
    } else {
        (w, body)
    }
}

/// Entries per page: the rows the entries table shows in a terminal of `size`.
pub fn entries_rows(size: (u16, u16), meta_visible: bool) -> usize {
    let (w, h) = size;
    let body = h.saturating_sub(CHROME_ROWS);
    let rows = if meta_visible && w < SIDE_PANE_WIDTH && h >= SMALL_HEIGHT {
        body - bottom_pane_height(h.saturating_sub(2))
    } else {
        body
    };
    usize::from(rows.max(1))
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
    (statekit_snapshot::describe::keyed_bytes(s), ob)
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
        if let Some(n) = s.keyed.native() {
            what = "RocksDB estimate";
            for (kg, b) in &n.stats.key_groups {
                if let Some(x) = per.get_mut(*kg as usize) {
                    *x = x.saturating_add(*b);
                }
            }
        }
        if let Some(h) = s.keyed.changelog() {
            what = "materialized";
            for g in statekit_snapshot::describe::materialized_key_groups(s, h) {
                if let Some(b) = per.get_mut(g.key_group as usize) {
                    *b = b.saturating_add(g.bytes);
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
    let screen = app.screen();
    if let ScreenState::Diff(d) = app.current() {
        let what = format!("diff {} → {}", d.sides[0].label, d.sides[1].label);
        if app.dir_mode {
            crumbs.push(what);
        } else {
            crumbs = vec![what];
        }
    } else if screen != Screen::Snapshots {
        if let Some((label, m)) = &app.snapshot {
            let what = format!(
                "{} {} {}",
                statekit_snapshot::describe::kind_name(m.kind),
                m.checkpoint_id,
                statekit_snapshot::describe::format_label(m)
            );
            let what = if screen == Screen::Operators {
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
    if matches!(screen, Screen::States | Screen::Entries | Screen::OpState) {
        if let Some(o) = app.operator() {
            crumbs.push(o.uid.clone());
        }
    }
    match app.current() {
        ScreenState::Entries(e) => crumbs.push(e.desc.name.clone()),
        ScreenState::OpState(v) => crumbs.push(v.desc.name.clone()),
        _ => {}
    }
    // Narrow: the path loses its middle, so where it starts and where you are both show.
    let room = usize::from(area.width).saturating_sub(" statekit inspect ".len());
    let line = Line::from(vec![
        Span::styled(" statekit inspect ", Style::new().add_modifier(Modifier::BOLD)),
        Span::raw(lists::elide_middle(&crumbs.join(" › "), room)),
    ]);
    f.render_widget(
        Paragraph::new(line).style(Style::new().bg(Color::Blue).fg(Color::White)),
        area,
    );
}

fn render_footer(app: &App, f: &mut Frame, area: Rect) {
    let line = if let Some(p) = &app.prompt {
        let label = match p.kind {
            PromptKind::Search => "/",
            PromptKind::Filter => "filter: ",
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
fn title_with_filter(app: &App, title: String) -> String {
    let filter = app.filter();
    if filter.is_empty() {
        format!(" {title} ")
    } else {
        format!(" {title} [filter: {filter}] ")
    }
}

/// A bordered box of text.
fn message(f: &mut Frame, area: Rect, title: String, text: Vec<Line<'static>>) {
    let p = Paragraph::new(text)
        .block(Block::default().borders(Borders::ALL).title(title))
        .wrap(Wrap { trim: false });
    f.render_widget(p, area);
}

/// A bordered box saying what could not be done (`what`, in bold red), the error (red), and
/// then the `hints` (what to do about it), each on a line of its own.
fn error_message(f: &mut Frame, area: Rect, title: String, what: &str, err: &str, hints: &[&str]) {
    let mut lines = vec![
        Line::from(Span::styled(
            what.to_string(),
            Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
        )),
        Line::from(""),
        Line::from(Span::styled(err.to_string(), Style::new().fg(Color::Red))),
        Line::from(""),
    ];
    lines.extend(hints.iter().map(|h| Line::from(h.to_string())));
    message(f, area, title, lines);
}

/// The style of the selected row.
fn highlight() -> Style {
    Style::new().add_modifier(Modifier::REVERSED)
}

fn render_main(app: &App, f: &mut Frame, area: Rect) {
    match app.current() {
        ScreenState::Snapshots(l) => lists::snapshots(app, l, f, area),
        ScreenState::Operators(l) => lists::operators(app, l, f, area),
        ScreenState::States(l) => lists::states(app, l, f, area),
        ScreenState::Entries(e) => lists::entries(app, e, f, area),
        ScreenState::Diff(dv) => diff::render(app, dv, f, area),
        ScreenState::OpState(v) => opstate::render(app, v, f, area),
    }
}

fn render_pane(app: &App, f: &mut Frame, area: Rect) {
    let title = match app.current() {
        ScreenState::Diff(_) => " difference ",
        ScreenState::OpState(v) if v.desc.mode == statekit_core::OperatorStateMode::Broadcast => " entry ",
        ScreenState::OpState(_) => " element ",
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
fn kv(k: &str, v: String) -> Line<'static> {
    Line::from(vec![
        Span::styled(format!("{k}: "), Style::new().fg(Color::Cyan)),
        Span::raw(v),
    ])
}

/// A status word as the metadata pane shows it.
fn status_text(status: &str) -> String {
    status.to_string()
}

fn pane_content(app: &App) -> (Vec<Line<'static>>, Option<Chart>) {
    let screen = app.current();
    match screen {
        ScreenState::Diff(dv) => (diff::detail(app, dv), None),
        ScreenState::OpState(v) => (opstate::detail(v), None),
        ScreenState::Snapshots(list) => {
            let Some(s) = list.selected().map(|i| &app.snapshots[i]) else {
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
                kv("status", status_text(s.status())),
            ];
            if let Some(p) = &s.problem {
                l.push(Line::from(Span::styled(app.sanitize(p), Style::new().fg(Color::Red))));
            }
            if let Some(Err(problems)) = &s.verified {
                for p in problems.lines() {
                    l.push(Line::from(Span::styled(p.to_string(), Style::new().fg(Color::Red))));
                }
            }
            (l, None)
        }
        ScreenState::Operators(_) => {
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
                format!("{}, taken {}", m.job_id, statekit_core::text::utc_time(m.timestamp_ms)),
            ));
            l.push(kv("snapshot", status_text(app.snapshot_status())));
            if let Some(Err(problems)) = &app.verified {
                for p in problems.lines() {
                    l.push(Line::from(Span::styled(p.to_string(), Style::new().fg(Color::Red))));
                }
            }
            let (per, what) = key_group_bytes(o);
            (l, Some((per, what, None)))
        }
        ScreenState::States(_) | ScreenState::Entries(_) => {
            let Some(o) = app.operator() else {
                return (vec![], None);
            };
            let mut l = Vec::new();
            let mut highlight = None;
            if let ScreenState::Entries(e) = screen {
                if let Some(r) = e.selected() {
                    let d = &e.desc;
                    highlight = Some(r.position.key_group);
                    l.push(kv("key group", r.position.key_group.to_string()));
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
                            format!("{t} ({})", statekit_core::text::utc_time(t)),
                        ));
                    }
                }
            } else {
                state_lines(o, app.state(), &mut l);
                operator_lines(o, &mut l);
            }
            let (per, what) = key_group_bytes(o);
            (l, Some((per, what, highlight)))
        }
    }
}

/// What the metadata pane says of the selected state: its kind, size, types and TTL.
fn state_lines(o: &OperatorMetadata, item: Option<StateItem>, l: &mut Vec<Line<'static>>) {
    match item {
        Some(StateItem::Keyed(i)) => {
            let d = &o.keyed_states[i];
            let t = state_totals(o).get(&d.name).copied().unwrap_or_default();
            let (entries, b) = (t.entries, t.bytes);
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
                l.push(kv(
                    "ttl",
                    if t.ttl_ms == statekit_core::TtlConfig::DURATION_NOT_STORED {
                        "duration not stored".to_string()
                    } else {
                        format!("{} ms", t.ttl_ms)
                    },
                ));
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
        let sum = ChangelogSummary::of(&o.subtasks);
        let amp = sum
            .space_amplification
            .map(|a| format!(" (tail/materialized {a:.2}x)"))
            .unwrap_or_default();
        l.push(kv(
            "changelog",
            format!(
                "materialized {}, log tail {} in {} change sets{amp}",
                bytes(sum.materialized.bytes),
                bytes(sum.tail.log_bytes),
                sum.tail.change_sets
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
            for (i, part) in wrap(d, width - key_w - 1).into_iter().enumerate() {
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
            for part in wrap(d, width.saturating_sub(2).max(1)) {
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

/// `text` broken at spaces into lines of at most `width` characters (longer words are cut).
pub fn wrap(text: &str, width: usize) -> Vec<String> {
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
