//! `statekit inspect`: a terminal UI over a savepoint, a checkpoint or a directory of them
//! (`docs/design/0008-inspector.md`).
//!
//! input ([`keys`]) → [`app::Action`] → pure [`app::update`] → [`draw::render`]; reads beyond
//! `_metadata` run in the [`worker`] thread and come back as actions.
//!
//! * [`app`]: the [`App`] (the screen shown and the ones under it) and `update`;
//! * [`screens`]: one model per screen and the trait `update` moves, searches, filters and
//!   pages them through;
//! * [`worker`]: every read beyond `_metadata` (entries pages and searches, the comparison of
//!   two snapshots, operator state), on its own thread;
//! * [`draw`]: everything on screen, as a function of the [`App`].

pub mod app;
pub mod draw;
pub mod keys;
pub mod screens;
pub mod worker;

#[cfg(test)]
mod tests;

use anyhow::{bail, Context, Result};
use app::{update, Action, App};
use clap::Args;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{self, Event};
use ratatui::Terminal;
use screens::{Screen, StateItem};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use worker::Loader;

/// Arguments of `statekit inspect`.
#[derive(Args, Debug)]
pub struct InspectArgs {
    /// A snapshot directory, its `_metadata` file, or a directory to search for snapshots.
    pub path: PathBuf,
    /// Open straight into the differences of PATH (old) and this snapshot (new), as
    /// `statekit diff PATH B` finds them.
    #[arg(long, value_name = "B")]
    pub diff: Option<PathBuf>,
    /// Measure instead of run: render the first complete frame (the operators, or the
    /// snapshot list) to an in-memory terminal of COLSxROWS, print it and the time it took,
    /// and exit.
    #[arg(long, hide = true, value_name = "COLSxROWS")]
    pub first_frame: Option<String>,
    /// With --first-frame: then also open UID/STATE and time its first page of entries.
    #[arg(long, hide = true, value_name = "UID/STATE", requires = "first_frame")]
    pub first_page: Option<String>,
    /// With --first-page: then page down (PgDn) to the last entry, and print the pages,
    /// entries, time and peak memory (VmHWM).
    #[arg(long, hide = true, requires = "first_page")]
    pub page_through: bool,
}

/// `statekit inspect`.
pub fn inspect(args: InspectArgs) -> Result<ExitCode> {
    if !args.path.exists() {
        bail!("{}: no such file or directory", args.path.display());
    }
    let title = args.path.display().to_string();
    if let Some(b) = &args.diff {
        if !b.exists() {
            bail!("{}: no such file or directory", b.display());
        }
        let is_snapshot = crate::cmd::inspect::is_snapshot_path;
        if !is_snapshot(&args.path) || !is_snapshot(b) {
            bail!("--diff compares two snapshots (directories with a _metadata file, or the files)");
        }
    }
    if let Some(size) = &args.first_frame {
        return first_frame(&args, &title, size);
    }
    if !std::io::stdout().is_terminal() {
        bail!("statekit inspect needs a terminal; in scripts use `statekit show` and `statekit dump`");
    }
    let loader = Loader::spawn().context("starting the reader thread")?;
    let (mut app, first) = new_app(&args, &title);
    let mut terminal = init_terminal().context("setting up the terminal")?;
    let result = event_loop(&mut terminal, &mut app, &loader, first);
    ratatui::restore();
    result?;
    Ok(ExitCode::SUCCESS)
}

/// The terminal the inspector draws on. Output is buffered and written once per frame (ratatui
/// flushes the backend after each draw): a terminal — or tmux, or an SSH link — never receives
/// half a frame, which would flicker (and made screen captures racy).
type Term = Terminal<ratatui::backend::CrosstermBackend<std::io::BufWriter<std::io::Stdout>>>;

/// Raw mode and the alternate screen, as `ratatui::try_init` sets them up, with a panic hook
/// that restores the terminal before the panic message prints.
fn init_terminal() -> std::io::Result<Term> {
    use ratatui::crossterm::{execute, terminal};
    terminal::enable_raw_mode()?;
    if let Err(e) = execute!(std::io::stdout(), terminal::EnterAlternateScreen) {
        ratatui::restore();
        return Err(e);
    }
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        ratatui::restore();
        hook(info);
    }));
    let out = std::io::BufWriter::with_capacity(1 << 20, std::io::stdout());
    Terminal::new(ratatui::backend::CrosstermBackend::new(out)).inspect_err(|_| ratatui::restore())
}

fn event_loop(terminal: &mut Term, app: &mut App, loader: &Loader, first: worker::Request) -> Result<()> {
    let size = terminal.size()?;
    let dispatch = |app: &mut App, action: Action| {
        if let Some(req) = update(app, action) {
            loader.send(req);
        }
    };
    dispatch(app, Action::Resize(size.width, size.height));
    loader.send(first);
    loop {
        terminal.draw(|f| draw::render(app, f))?;
        if app.quit {
            return Ok(());
        }
        // Input first (never blocked by reads: they are on the worker), then whatever the
        // worker has delivered.
        if event::poll(Duration::from_millis(80))? {
            loop {
                match event::read()? {
                    Event::Key(k) => {
                        if let Some(a) = keys::action_for(app, k) {
                            dispatch(app, a);
                        }
                    }
                    Event::Resize(w, h) => dispatch(app, Action::Resize(w, h)),
                    _ => {}
                }
                if app.quit || !event::poll(Duration::ZERO)? {
                    break;
                }
            }
        }
        while let Ok(msg) = loader.rx.try_recv() {
            dispatch(app, Action::Loaded(msg));
        }
        dispatch(app, Action::Tick);
    }
}

/// The app and its first request: a snapshot or directory, or (`--diff`) a comparison.
fn new_app(args: &InspectArgs, title: &str) -> (App, worker::Request) {
    match &args.diff {
        Some(b) => App::new_diff(&args.path, title, b, &b.display().to_string()),
        None => App::new(&args.path, title),
    }
}

/// Feeds the worker's messages to `app` until a result (not progress) arrived and the app
/// asks for nothing more.
fn settle(app: &mut App, loader: &Loader) -> Result<()> {
    while app.loading.is_some() {
        let msg = loader
            .rx
            .recv_timeout(Duration::from_secs(600))
            .context("waiting for the reader")?;
        if let Some(req) = update(app, Action::Loaded(msg)) {
            loader.send(req);
        }
    }
    Ok(())
}

/// `--first-frame`: time to the first complete frame (and optionally to a first page).
fn first_frame(args: &InspectArgs, title: &str, size: &str) -> Result<ExitCode> {
    let (w, h) = size
        .split_once('x')
        .and_then(|(w, h)| Some((w.parse::<u16>().ok()?, h.parse::<u16>().ok()?)))
        .context("--first-frame takes COLSxROWS, e.g. 80x24")?;
    let t0 = Instant::now();
    let loader = Loader::spawn()?;
    let (mut app, first) = new_app(args, title);
    let _ = update(&mut app, Action::Resize(w, h));
    loader.send(first);
    settle(&mut app, &loader)?;
    let mut terminal = Terminal::new(TestBackend::new(w, h))?;
    terminal.draw(|f| draw::render(&app, f))?;
    let first_ms = t0.elapsed().as_secs_f64() * 1000.0;
    outln!("{}", terminal.backend());
    outln!("first frame: {first_ms:.2} ms");
    if let Some(spec) = &args.first_page {
        let (uid, state) = spec.split_once('/').context("--first-page takes UID/STATE")?;
        let t1 = Instant::now();
        if app.screen() == Screen::Snapshots {
            bail!("--first-page needs a snapshot, not a directory of them");
        }
        let ops = app.visible_operators();
        let m = app.metadata().context("the snapshot did not open")?;
        let op = ops
            .iter()
            .position(|&i| m.operators[i].uid == uid)
            .with_context(|| format!("no operator {uid:?}"))?;
        app.set_sel(op);
        let _ = update(&mut app, Action::Enter);
        let st = app
            .visible_states()
            .iter()
            .position(|s| matches!(s, StateItem::Keyed(i) if app.operator().is_some_and(|o| o.keyed_states[*i].name == state)))
            .with_context(|| format!("no keyed state {state:?} in {uid:?}"))?;
        app.set_sel(st);
        if let Some(req) = update(&mut app, Action::Enter) {
            loader.send(req);
        }
        settle(&mut app, &loader)?;
        terminal.draw(|f| draw::render(&app, f))?;
        let page_ms = t1.elapsed().as_secs_f64() * 1000.0;
        outln!("{}", terminal.backend());
        outln!("first page of {uid}/{state}: {page_ms:.2} ms");
        if args.page_through {
            let t2 = Instant::now();
            let (mut pages, mut entries) = (1u64, 0u64);
            let mut anon_peak = memory_kb("RssAnon").unwrap_or(0);
            loop {
                if pages % 256 == 0 {
                    anon_peak = anon_peak.max(memory_kb("RssAnon").unwrap_or(0));
                }
                let Some(e) = app.entries() else { break };
                if let Some(err) = &e.error {
                    bail!("paging {uid}/{state}: {err}");
                }
                let Some(p) = e.page.as_ref() else { break };
                entries += p.rows.len() as u64;
                if !p.more {
                    break;
                }
                let Some(req) = update(&mut app, Action::PageDown) else {
                    break;
                };
                loader.send(req);
                settle(&mut app, &loader)?;
                pages += 1;
            }
            terminal.draw(|f| draw::render(&app, f))?;
            let secs = t2.elapsed().as_secs_f64();
            outln!("{}", terminal.backend());
            anon_peak = anon_peak.max(memory_kb("RssAnon").unwrap_or(0));
            outln!(
                "paged through {uid}/{state}: {pages} pages, {entries} entries in {secs:.2} s ({:.0} entries/s); peak memory (VmHWM) {}; anonymous memory, sampled peak: {anon_peak} kB",
                entries as f64 / secs.max(1e-9),
                memory_kb("VmHWM").map_or_else(|| "unknown".into(), |kb| format!("{kb} kB"))
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A memory figure of this process in kB from `/proc/self/status` (Linux): `RssAnon`
/// (anonymous resident memory: heap, not mapped files) or `VmHWM` (peak resident memory).
fn memory_kb(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?;
    line.trim().trim_end_matches("kB").trim().parse().ok()
}
