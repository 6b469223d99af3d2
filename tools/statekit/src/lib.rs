//! The `statekit` tool as a library: its commands ([`cmd`], [`demo`]), the one place typed
//! values are rendered as text and JSON ([`render`]), and the inspector ([`tui`]). The
//! `statekit` binary is its command line; the benches and tests drive the inspector
//! in-process through [`tui::headless`].

/// `println!` that hands a write error back to the caller instead of panicking: a closed
/// standard output (`statekit ls | head -1`) ends the command quietly with exit 141, as `cat`
/// does (see [`is_broken_pipe`]). Use it for every line the binary prints to standard output.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout(), $($arg)*)?
    }};
}

pub mod cmd;
pub mod color;
mod config;
pub mod demo;
pub mod progress;
pub mod render;
pub mod tui;
mod wordcount;

/// The error and its causes on one line, each said once: many errors include their cause's
/// text in their own message (`path: No such device`) and also return it as their source,
/// which `{:#}` would print a second time.
pub fn error_text(err: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if text.is_empty() || out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}
