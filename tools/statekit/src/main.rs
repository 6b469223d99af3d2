//! The `statekit` command: run the word-count demo, list, show, dump and verify snapshots,
//! collect garbage in checkpoint directories.
//!
//! Exit codes: 0 success, 1 a check found problems, 2 an error (bad arguments, unreadable
//! input).

use clap::{Parser, Subcommand};
use statekit::{cmd, demo, error_text};
use std::process::ExitCode;

/// Inspect, verify and produce checkpoints and savepoints of keyed stream state.
#[derive(Parser, Debug)]
#[command(name = "statekit", version, about, long_about = None)]
struct Cli {
    /// Colour: on a terminal only (`auto`, and not when `NO_COLOR` is set), `always` or
    /// `never`.
    #[arg(long, global = true, value_enum, default_value_t = statekit::color::ColorChoice::Auto)]
    color: statekit::color::ColorChoice,
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
    Show(cmd::show::ShowArgs),
    /// Browse snapshots, operators, states and entries in a terminal UI.
    Inspect(cmd::inspect::InspectArgs),
    /// Print the decoded entries of one state.
    Dump(cmd::dump::DumpArgs),
    /// Read and check every byte of a snapshot (CRCs, references, sizes, order).
    Verify(cmd::verify::VerifyArgs),
    /// List (and with confirmation delete) files no complete checkpoint references.
    Gc(cmd::gc::GcArgs),
    /// Compare two snapshots: operators, states and keys added, removed or changed (exit 1 if
    /// they differ).
    Diff(cmd::diff::DiffArgs),
    /// Write any readable snapshot (savepoint or checkpoint, canonical, native, incremental or
    /// changelog) as a self-contained savepoint, canonical or native (RocksDB), with any
    /// compression, optionally at a new parallelism.
    Convert(cmd::migrate::ConvertArgs),
    /// Write a savepoint with edits: uids set or renamed, operators and states dropped or
    /// renamed, a new parallelism or max parallelism, TTL-expired data purged, keys kept or
    /// dropped (one streaming pass; the input is only read).
    Rewrite(cmd::migrate::RewriteArgs),
    /// Print a snapshot's state schema (operators, states, kinds, types, TTL); --json writes
    /// the file `check --against` reads.
    Schema(cmd::migrate::SchemaArgs),
    /// Will this snapshot restore into a job that declares this schema (or has this other
    /// snapshot's)? Exit 0 compatible, 1 incompatible (each reason on a line).
    Check(cmd::migrate::CheckArgs),
    /// The final step of a snapshot written by `convert`/`rewrite --shard I/N` tasks: checks
    /// that the shards hold every subtask once and writes `_metadata`.
    FinishShards(cmd::migrate::FinishShardsArgs),
    /// Write a snapshot's state as typed tables (Parquet, Arrow IPC or JSON lines): one
    /// directory per (uid, state), one file per subtask's key groups, and `_tables.json`.
    Export(cmd::table::ExportArgs),
    /// Build a savepoint from tables (as `export` writes them, or any Parquet files with the
    /// right columns), typed by a schema file: the bootstrap of a new job's state.
    Import(cmd::table::ImportArgs),
    /// SQL over a snapshot's states (Apache DataFusion): tables "<uid>"."<state>", states and
    /// operators; a predicate on key or key_group reads only those key groups.
    #[cfg(feature = "query")]
    Query(cmd::query::QueryArgs),
}

/// The arguments of `matches` given on the command line (not defaulted): they win over
/// configuration keys that mean the same.
fn explicit(matches: &clap::ArgMatches) -> Vec<String> {
    matches
        .ids()
        .filter(|id| matches.value_source(id.as_str()) == Some(clap::parser::ValueSource::CommandLine))
        .map(|id| id.as_str().to_string())
        .collect()
}

fn main() -> ExitCode {
    use clap::{CommandFactory, FromArgMatches};
    let matches = Cli::command().get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    statekit::color::init(cli.color);
    let result = match cli.command {
        Command::Demo(demo::DemoCommand::Wordcount(mut args)) => {
            if let Some(m) = matches
                .subcommand_matches("demo")
                .and_then(|m| m.subcommand_matches("wordcount"))
            {
                args.explicit = explicit(m);
            }
            demo::run(demo::DemoCommand::Wordcount(args))
        }
        Command::Ls(args) => cmd::inspect::ls(args),
        Command::Show(args) => cmd::show::show(args),
        Command::Inspect(args) => cmd::inspect::inspect(args),
        Command::Dump(args) => cmd::dump::dump(args),
        Command::Verify(args) => cmd::verify::verify(args),
        Command::Gc(args) => cmd::gc::gc(args),
        Command::Diff(args) => cmd::diff::diff(args),
        Command::Convert(args) => cmd::migrate::convert(args),
        Command::Rewrite(args) => cmd::migrate::rewrite(args),
        Command::Schema(args) => cmd::migrate::schema(args),
        Command::Check(args) => cmd::migrate::check(args),
        Command::FinishShards(args) => cmd::migrate::finish_shards(args),
        Command::Export(args) => cmd::table::export(args),
        Command::Import(args) => cmd::table::import(args),
        #[cfg(feature = "query")]
        Command::Query(args) => cmd::query::query(args),
    };
    // `STATEKIT_OBJECT_STORE_STATS=FILE`: the requests this run made to object stores.
    statekit_objstore::StatsSnapshot::write_if_requested();
    match result {
        Ok(code) => code,
        // The reader went away (`statekit dump … | head`): stop quietly, as `cat` does.
        Err(err) if is_broken_pipe(&err) => ExitCode::from(141),
        Err(err) => {
            use statekit::color::{red, Stream};
            eprintln!("{} {}", red("error:", Stream::Err), error_text(&err));
            ExitCode::from(2)
        }
    }
}

/// Whether `err` comes from writing to a closed pipe.
fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
