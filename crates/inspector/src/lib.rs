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
//! * [`draw`]: everything on screen, as a function of the [`App`];
//! * [`headless`]: the inspector on an in-memory terminal, for the benches and tests.

pub mod app;
pub mod draw;
pub mod headless;
pub mod keys;
pub mod screens;
pub mod worker;

#[cfg(test)]
mod tests;

use anyhow::{bail, Context, Result};
use app::{update, Action, App};
use clap::Args;
use ratatui::crossterm::event::{self, Event};
use ratatui::Terminal;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
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
    /// For Apache Flink snapshots: `--flink-uid` names operators stored by id.
    #[command(flatten)]
    pub flink: crate::cmd::inspect::FlinkArgs,
}

/// `statekit inspect`.
pub fn inspect(args: InspectArgs) -> Result<ExitCode> {
    let a = probe(&args.path)?;
    let title = a.title.clone();
    if let Some(b) = &args.diff {
        if !a.snapshot || !probe(b)?.snapshot {
            bail!("--diff compares two snapshots (directories with a _metadata file, or the files)");
        }
    }
    if !std::io::stdout().is_terminal() {
        bail!("statekit inspect needs a terminal; in scripts use `statekit show` and `statekit dump`");
    }
    let loader = Loader::spawn_with(args.flink.options()).context("starting the reader thread")?;
    let (mut app, first) = new_app(&args, &title, !a.snapshot);
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

/// The app and its first request: a snapshot or (`dir_mode`) a directory of them, or
/// (`--diff`) a comparison.
fn new_app(args: &InspectArgs, title: &str, dir_mode: bool) -> (App, worker::Request) {
    match &args.diff {
        Some(b) => App::new_diff(&args.path, title, b, &b.display().to_string()),
        None => App::new_at(&args.path, title, dir_mode),
    }
}

/// What an `inspect` argument names.
pub(crate) struct Probed {
    /// As the user wrote it (a URL stays a URL; the worker opens it by location).
    pub(crate) title: String,
    /// One snapshot (a directory holding `_metadata`, or a file), else a directory to search.
    pub(crate) snapshot: bool,
}

/// Finds out whether `path` (a local path or an object-store URL) is a snapshot or a directory
/// of snapshots; a path that is neither is an error. On an object store this is one `HEAD` of
/// `_metadata`, then one listing.
pub(crate) fn probe(path: &std::path::Path) -> Result<Probed> {
    use statekit_core::location::Location;
    let title = path.display().to_string();
    match crate::cmd::location(path)? {
        Location::Local(p) => {
            if !p.exists() {
                bail!("{}: no such file or directory", p.display());
            }
            Ok(Probed {
                title,
                snapshot: crate::cmd::inspect::is_snapshot_path(&p),
            })
        }
        l => {
            let metadata = statekit_format::METADATA_FILE_NAME;
            if l.file_name().as_deref() == Some(metadata) {
                return Ok(Probed { title, snapshot: true });
            }
            let storage = l.storage()?;
            if storage.exists(metadata)? {
                return Ok(Probed { title, snapshot: true });
            }
            if storage.list("")?.is_empty() {
                bail!("{l}: nothing there (no _metadata, no objects below it)");
            }
            Ok(Probed { title, snapshot: false })
        }
    }
}
