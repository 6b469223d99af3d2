//! The `statekit` tool as a library: its commands ([`cmd`], [`demo`]) and the JSON helpers
//! they render typed values with ([`render`]; the text of values is `statekit_core::text`).
//! The `statekit` binary is its command line; `statekit inspect` runs the inspector of the
//! `statekit-inspector` crate, which the benches and tests also drive in-process
//! (`statekit_inspector::headless`).

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
pub mod demo;
pub mod progress;
pub mod render;

/// The error and its causes on one line, each said once ([`statekit_core::text::error_text`]).
pub fn error_text(err: &anyhow::Error) -> String {
    statekit_core::text::error_text(err.as_ref())
}
