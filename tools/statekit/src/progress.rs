//! Progress on standard error, only when it is a terminal (silent into a pipe, a file or a
//! test): a spinner with what runs and for how long, optionally a count and its rate, or a
//! bar of bytes with an ETA where the total is known. Cleared when done, so the output that
//! stays is the command's own.

use std::io::IsTerminal;
use std::time::Duration;

/// A progress display; does nothing when standard error is not a terminal.
pub struct Progress(Option<indicatif::ProgressBar>);

impl Progress {
    fn on() -> bool {
        std::io::stderr().is_terminal()
    }

    /// A spinner: `what`, the time it has run, and a message ([`Progress::message`]).
    pub fn spinner(what: &str) -> Self {
        Self::styled(None, &format!("{{spinner}} {what} {{elapsed}} {{msg}}"))
    }

    /// A spinner that counts `unit`s (entries, words) and their rate.
    pub fn counter(what: &str, unit: &str) -> Self {
        Self::styled(
            None,
            &format!("{{spinner}} {what}: {{human_pos}} {unit} ({{per_sec}}) {{elapsed}} {{msg}}"),
        )
    }

    /// A bar of `total` bytes with the rate and the time left.
    pub fn bytes(what: &str, total: u64) -> Self {
        Self::styled(
            Some(total),
            &format!("{what} {{bar:30}} {{bytes}}/{{total_bytes}} ({{bytes_per_sec}}, ETA {{eta}}) {{msg}}"),
        )
    }

    fn styled(total: Option<u64>, template: &str) -> Self {
        if !Self::on() {
            return Progress(None);
        }
        let bar = match total {
            Some(t) => indicatif::ProgressBar::new(t),
            None => indicatif::ProgressBar::new_spinner(),
        };
        let style = indicatif::ProgressStyle::with_template(template)
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner());
        bar.set_style(style);
        bar.enable_steady_tick(Duration::from_millis(120));
        Progress(Some(bar))
    }

    /// Adds `n` to the count (or bytes).
    pub fn inc(&self, n: u64) {
        if let Some(b) = &self.0 {
            b.inc(n);
        }
    }

    /// Sets the count (or bytes).
    pub fn set(&self, n: u64) {
        if let Some(b) = &self.0 {
            b.set_position(n);
        }
    }

    /// Sets the message shown after the figures.
    pub fn message(&self, m: impl Into<String>) {
        if let Some(b) = &self.0 {
            b.set_message(m.into());
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(b) = &self.0 {
            b.finish_and_clear();
        }
    }
}
