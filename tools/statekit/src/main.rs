//! The `statekit` command: run the word-count demo, list, show, dump and verify snapshots,
//! collect garbage in checkpoint directories.
//!
//! Exit codes: 0 success, 1 a check found problems, 2 an error (bad arguments, unreadable
//! input).

/// `println!` that hands a write error back to the caller instead of panicking: a closed
/// standard output (`statekit ls | head -1`) ends the command quietly with exit 141, as `cat`
/// does (see [`is_broken_pipe`]). Use it for every line the binary prints to standard output.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout(), $($arg)*)?
    }};
}

mod cmd;
mod config;
mod demo;
mod render;
mod tui;
mod wordcount;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Inspect, verify and produce checkpoints and savepoints of keyed stream state.
#[derive(Parser, Debug)]
#[command(name = "statekit", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a demo job that embeds the statekit libraries.
    #[command(subcommand)]
    Demo(demo::DemoCommand),
    /// List every checkpoint and savepoint under a directory.
    Ls(cmd::inspect::LsArgs),
    /// Show a snapshot's operators, states and sizes.
    Show(cmd::inspect::ShowArgs),
    /// Browse snapshots, operators, states and entries in a terminal UI.
    Inspect(tui::InspectArgs),
    /// Print the decoded entries of one state.
    Dump(cmd::dump::DumpArgs),
    /// Read and check every byte of a snapshot (CRCs, references, sizes, order).
    Verify(cmd::inspect::VerifyArgs),
    /// List (and with confirmation delete) files no complete checkpoint references.
    Gc(cmd::gc::GcArgs),
    /// Compare two snapshots: operators, states and keys added, removed or changed (exit 1 if
    /// they differ).
    Diff(cmd::diff::DiffArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo(cmd) => demo::run(cmd),
        Command::Ls(args) => cmd::inspect::ls(args),
        Command::Show(args) => cmd::inspect::show(args),
        Command::Inspect(args) => tui::inspect(args),
        Command::Dump(args) => cmd::dump::dump(args),
        Command::Verify(args) => cmd::inspect::verify(args),
        Command::Gc(args) => cmd::gc::gc(args),
        Command::Diff(args) => cmd::diff::diff(args),
    };
    match result {
        Ok(code) => code,
        // The reader went away (`statekit dump … | head`): stop quietly, as `cat` does.
        Err(err) if is_broken_pipe(&err) => ExitCode::from(141),
        Err(err) => {
            eprintln!("error: {}", error_text(&err));
            ExitCode::from(2)
        }
    }
}

/// The error and its causes on one line, each said once: many errors include their cause's
/// text in their own message (`path: No such device`) and also return it as their source,
/// which `{:#}` would print a second time.
pub(crate) fn error_text(err: &anyhow::Error) -> String {
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

/// Whether `err` comes from writing to a closed pipe.
fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
