//! The `statekit` command: run the word-count demo, list, show and verify snapshots.
//!
//! Exit codes: 0 success, 1 a check found problems, 2 an error (bad arguments, unreadable
//! input).

mod demo;
mod inspect_cmds;
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
    Ls(inspect_cmds::LsArgs),
    /// Show a snapshot's operators, states and sizes.
    Show(inspect_cmds::ShowArgs),
    /// Read and check every byte of a snapshot (CRCs, references, sizes, order).
    Verify(inspect_cmds::VerifyArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo(cmd) => demo::run(cmd),
        Command::Ls(args) => inspect_cmds::ls(args),
        Command::Show(args) => inspect_cmds::show(args),
        Command::Verify(args) => inspect_cmds::verify(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(2)
        }
    }
}
