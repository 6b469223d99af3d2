//! `statekit demo …`: jobs that embed the statekit libraries.

use anyhow::Result;
use clap::Subcommand;
use std::process::ExitCode;

/// Demo jobs.
#[derive(Subcommand, Debug)]
pub enum DemoCommand {
    /// Count words with checkpoints, a transactional sink and savepoints.
    Wordcount(crate::wordcount::WordcountArgs),
}

/// Runs a demo.
pub fn run(cmd: DemoCommand) -> Result<ExitCode> {
    match cmd {
        DemoCommand::Wordcount(args) => crate::wordcount::run(args),
    }
}
