//! The inspector without a terminal: the [`App`], its worker thread and an in-memory
//! terminal, driven by actions as the event loop drives them. The benches time the first
//! frame, the first page and paging with it (`benches/cli_report.rs`), and tests bound what
//! the inspector does with hostile input.

use crate::app::{update, Action, App};
use crate::error::{InspectError, NotOnScreen};
use crate::screens::{Screen, StateItem};
use crate::worker::Loader;
use ratatui::backend::TestBackend;
use ratatui::Terminal;
use std::path::Path;
use std::time::Duration;

/// An inspector on an in-memory terminal.
pub struct Headless {
    /// The inspector's state.
    pub app: App,
    loader: Loader,
    terminal: Terminal<TestBackend>,
}

impl Headless {
    /// `statekit inspect PATH` (with `diff`: `--diff B`) on a terminal of `size` (columns,
    /// rows): starts the worker and waits until the first screen is complete (the snapshots
    /// found, `_metadata` read, or the comparison done).
    /// `path` may be an object-store URL, as for `statekit inspect`.
    pub fn open(path: &Path, diff: Option<&Path>, size: (u16, u16)) -> Result<Headless, InspectError> {
        let loader = Loader::spawn().map_err(|source| InspectError::Setup {
            what: "starting the reader thread",
            source,
        })?;
        let title = path.display().to_string();
        let (mut app, first) = match diff {
            Some(b) => App::new_diff(path, &title, b, &b.display().to_string()),
            None => App::new_at(path, &title, !crate::open::probe(path)?.snapshot),
        };
        let _ = update(&mut app, Action::Resize(size.0, size.1));
        loader.send(first);
        let terminal = Terminal::new(TestBackend::new(size.0, size.1))?;
        let mut h = Headless { app, loader, terminal };
        h.settle()?;
        Ok(h)
    }

    /// Feeds the worker's messages to the app until a result (not progress) arrived and the
    /// app asks for nothing more.
    pub fn settle(&mut self) -> Result<(), InspectError> {
        while self.app.loading.is_some() {
            self.apply_next(Duration::from_secs(600), "waiting for the reader")?;
        }
        Ok(())
    }

    /// Waits (at most `timeout`) for the worker's next message and applies it.
    fn apply_next(&mut self, timeout: Duration, what: &'static str) -> Result<(), InspectError> {
        let msg = self
            .loader
            .rx
            .recv_timeout(timeout)
            .map_err(|source| InspectError::NoAnswer { what, source })?;
        if let Some(req) = update(&mut self.app, Action::Loaded(msg)) {
            self.loader.send(req);
        }
        Ok(())
    }

    /// Waits (at most `timeout`) until no snapshot on screen is `not verified` any more: the
    /// background verifications have reported.
    pub fn wait_verified(&mut self, timeout: Duration) -> Result<(), InspectError> {
        let deadline = std::time::Instant::now() + timeout;
        let pending = |app: &App| {
            app.snapshots.iter().any(|s| s.complete && s.verified.is_none())
                || (app.metadata().is_some() && app.verified.is_none())
        };
        while pending(&self.app) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(InspectError::VerifyTimeout(timeout));
            }
            self.apply_next(left, "waiting for the verifier")?;
        }
        Ok(())
    }

    /// Applies `action` and waits for the read it asks for; false when it asked for none.
    pub fn act(&mut self, action: Action) -> Result<bool, InspectError> {
        let Some(req) = update(&mut self.app, action) else {
            return Ok(false);
        };
        self.loader.send(req);
        self.settle()?;
        Ok(true)
    }

    /// Draws a frame; the screen as text.
    pub fn draw(&mut self) -> Result<String, InspectError> {
        self.terminal.draw(|f| crate::draw::render(&self.app, f))?;
        Ok(self.terminal.backend().to_string())
    }

    /// From the operator list: opens keyed state `state` of operator `uid` and waits for its
    /// first page of entries.
    pub fn open_state(&mut self, uid: &str, state: &str) -> Result<(), InspectError> {
        let missing = |n: NotOnScreen| InspectError::NotOnScreen(n);
        if self.app.screen() == Screen::Snapshots {
            return Err(missing(NotOnScreen::NoSnapshotOpen));
        }
        let ops = self.app.visible_operators();
        let m = self.app.metadata().ok_or(missing(NotOnScreen::NotOpened))?;
        let op = ops
            .iter()
            .position(|&i| m.operators[i].uid == uid)
            .ok_or_else(|| missing(NotOnScreen::Operator(uid.to_string())))?;
        self.app.set_sel(op);
        self.act(Action::Enter)?;
        let app = &self.app;
        let st = app
            .visible_states()
            .iter()
            .position(|s| matches!(s, StateItem::Keyed(i) if app.operator().is_some_and(|o| o.keyed_states[*i].name == state)))
            .ok_or_else(|| {
                missing(NotOnScreen::KeyedState {
                    uid: uid.to_string(),
                    state: state.to_string(),
                })
            })?;
        self.app.set_sel(st);
        self.act(Action::Enter)?;
        Ok(())
    }
}
