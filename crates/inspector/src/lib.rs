//! # statekit-inspector
//!
//! The terminal inspector (`statekit inspect`, design `docs/design/0008-inspector.md`) as a
//! library: a terminal UI over a savepoint, a checkpoint or a directory of them, that an
//! engine can embed as the `statekit` binary does ([`run`] with [`InspectOptions`]), or drive
//! without a terminal ([`headless`]).
//!
//! input ([`keys`]) → [`app::Action`] → pure [`app::update`] → [`draw::render`]; reads beyond
//! `_metadata` run in the [`worker`] thread and come back as actions.
//!
//! * [`app`]: the [`App`] (the screen shown and the ones under it) and `update`;
//! * [`screens`]: one model per screen and the trait `update` moves, searches, filters and
//!   pages them through;
//! * [`worker`]: every read beyond `_metadata` (entries pages and searches, the comparison of
//!   two snapshots, operator state), on its own thread;
//! * [`draw`]: everything on screen, as a function of the [`App`];
//! * [`headless`]: the inspector on an in-memory terminal, for the benches and tests;
//! * [`open`]: what a path names (a snapshot or a directory of them, local or on an object
//!   store) and opening it, as the `statekit` commands do too.
//!
//! Errors are typed ([`InspectError`], [`OpenError`], and [`ReadError`] for a read the screen
//! shows failed), each with a [`kind`](InspectError::kind).

pub mod app;
pub mod draw;
mod error;
pub mod headless;
pub mod keys;
pub mod open;
pub mod screens;
pub mod worker;

#[cfg(test)]
mod tests;

pub use error::{InspectError, NotOnScreen, OpenError, Problems, ReadError};

use app::{update, Action, App};
use open::probe;
use ratatui::crossterm::event::{self, Event};
use ratatui::Terminal;
use statekit_snapshot::OpenOptions;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;
use worker::Loader;

/// What to inspect, and how to open it (the options of `statekit inspect`).
#[derive(Clone, Debug, Default)]
pub struct InspectOptions {
    /// A snapshot directory, its `_metadata` file, or a directory to search for snapshots (a
    /// local path or an object-store URL).
    pub path: PathBuf,
    /// Open straight into the differences of `path` (old) and this snapshot (new), as
    /// `statekit diff PATH B` finds them.
    pub diff: Option<PathBuf>,
    /// How snapshots open (for Apache Flink snapshots: the job's uids, moved roots).
    pub open: OpenOptions,
}

/// Runs the inspector on the terminal (standard output) until the user quits.
pub fn run(options: &InspectOptions) -> Result<(), InspectError> {
    let a = probe(&options.path)?;
    let title = a.title.clone();
    if let Some(b) = &options.diff {
        if !a.snapshot || !probe(b)?.snapshot {
            return Err(InspectError::DiffNeedsSnapshots);
        }
    }
    if !std::io::stdout().is_terminal() {
        return Err(InspectError::NotATerminal);
    }
    let loader = Loader::spawn_with(options.open.clone()).map_err(|source| InspectError::Setup {
        what: "starting the reader thread",
        source,
    })?;
    let (mut app, first) = new_app(options, &title, !a.snapshot);
    let mut terminal = init_terminal().map_err(|source| InspectError::Setup {
        what: "setting up the terminal",
        source,
    })?;
    let result = event_loop(&mut terminal, &mut app, &loader, first);
    ratatui::restore();
    Ok(result?)
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

fn event_loop(terminal: &mut Term, app: &mut App, loader: &Loader, first: worker::Request) -> std::io::Result<()> {
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

/// The app and its first request: a snapshot or (`dir_mode`) a directory of them, or
/// (`--diff`) a comparison.
fn new_app(options: &InspectOptions, title: &str, dir_mode: bool) -> (App, worker::Request) {
    match &options.diff {
        Some(b) => App::new_diff(&options.path, title, b, &b.display().to_string()),
        None => App::new_at(&options.path, title, dir_mode),
    }
}
