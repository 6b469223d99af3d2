//! `statekit demo …`: jobs that embed the statekit libraries. The word count itself is the
//! library `statekit-wordcount`; here are its flags and the rendering of what it reports.

use anyhow::Result;
use clap::{Args, Subcommand};
use statekit_checkpoint::RestoreMode;
use statekit_wordcount::{BackendKind, CheckpointType, Event, Guarantee, HostError, SavepointFormat, Settings};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// Demo jobs.
#[derive(Subcommand, Debug)]
pub enum DemoCommand {
    /// Count words with checkpoints, a transactional sink and savepoints.
    Wordcount(WordcountArgs),
}

/// Runs a demo.
pub fn run(cmd: DemoCommand) -> Result<ExitCode> {
    match cmd {
        DemoCommand::Wordcount(args) => wordcount(args),
    }
}

/// Arguments of `statekit demo wordcount`.
#[derive(Args, Debug)]
pub struct WordcountArgs {
    /// Print the job's state schema (as `statekit schema --json` writes a snapshot's; the file
    /// `statekit check SNAPSHOT --against` reads) and exit without running.
    #[arg(long)]
    pub print_schema: bool,
    /// Input text file (default: a small built-in text); `-` reads standard input as a
    /// stream, each line processed as it arrives.
    #[arg(long)]
    pub input: Option<PathBuf>,
    /// Read lines from a TCP socket, as Flink's `socketTextStream` (connects to HOST:PORT:
    /// run `nc -lk 9999` first, then type words there), each line processed as it arrives;
    /// checkpoints go on by the interval, SIGTERM stops (with a savepoint if asked).
    #[arg(long, value_name = "HOST:PORT", conflicts_with = "input")]
    pub socket: Option<String>,
    /// Output directory: committed part files are plain files here; pending ones stay in
    /// `.pending/` until their checkpoint completes.
    #[arg(long, default_value = "statekit-data/output")]
    pub output: PathBuf,
    /// Checkpoint base directory (`<dir>/<job-id>/chk-<N>/`).
    #[arg(long, default_value = "statekit-data/checkpoints")]
    pub checkpoint_dir: PathBuf,
    /// Take a checkpoint every N records.
    #[arg(long, default_value_t = 20)]
    pub checkpoint_every: u64,
    /// Also take a checkpoint when this much time passed since the last one (Flink's
    /// `execution.checkpointing.interval`: `10 s`, `1 min`, `500ms`).
    #[arg(long, value_name = "DURATION", value_parser = parse_interval)]
    pub checkpoint_interval: Option<std::time::Duration>,
    /// Completed checkpoints to keep.
    #[arg(long, default_value_t = 3)]
    pub retained_checkpoints: usize,
    /// Parallelism of the counter and sink (`-p` as in `flink run -p`; `parallelism.default`).
    #[arg(long, short = 'p', default_value_t = 2)]
    pub parallelism: u32,
    /// Max parallelism (number of key groups).
    #[arg(long, default_value_t = 128)]
    pub max_parallelism: u32,
    /// Restore from a checkpoint or savepoint (directory or `_metadata`), or `latest`: the
    /// newest complete checkpoint under --checkpoint-dir (none yet: start from scratch).
    /// `-s` as in `flink run -s` (`execution.state-recovery.path`).
    #[arg(long, short = 's', visible_alias = "from-savepoint")]
    pub restore: Option<String>,
    /// Allow a restore that leaves state of the snapshot unrestored: an operator the job
    /// does not have (Flink's `-n`, `--allowNonRestoredState`,
    /// `execution.state-recovery.ignore-unclaimed-state`). Without it such a restore is
    /// refused, as in Flink.
    #[arg(long, short = 'n', visible_alias = "allowNonRestoredState")]
    pub allow_non_restored_state: bool,
    /// Where savepoints go.
    #[arg(long, default_value = "statekit-data/savepoints")]
    pub savepoint_dir: PathBuf,
    /// When the input ends or on SIGTERM, take a savepoint, print its path and exit 0.
    #[arg(long)]
    pub stop_with_savepoint: bool,
    /// Delivery guarantee.
    #[arg(long, value_enum, default_value_t = Guarantee::ExactlyOnce)]
    pub guarantee: Guarantee,
    /// Also print every emitted line to standard output (not transactional).
    #[arg(long)]
    pub echo: bool,
    /// Keyed state backend of the counter.
    #[arg(long, value_enum, default_value_t = BackendKind::Hashmap)]
    pub backend: BackendKind,
    /// Checkpoints: `full` writes the canonical format (any backend); `incremental` uploads
    /// only the RocksDB files new since the last completed checkpoint (needs `--backend
    /// rocksdb`).
    #[arg(long, value_enum, default_value_t = CheckpointType::Full)]
    pub checkpoint_type: CheckpointType,
    /// Savepoints: `canonical` (restores into any backend) or `native` (the RocksDB files,
    /// self-contained; restores into RocksDB only; needs `--backend rocksdb`).
    #[arg(long, value_enum, default_value_t = SavepointFormat::Canonical)]
    pub savepoint_format: SavepointFormat,
    /// Who owns the snapshot given to `--restore`: `claim` (this job deletes it once
    /// subsumed), `no-claim` (never touched, nothing shared with it), `legacy` (never
    /// deleted, its files may be shared).
    #[arg(long, default_value = "no-claim", value_parser = parse_restore_mode)]
    pub restore_mode: RestoreMode,
    /// RocksDB options profile: `default`, `spinning-disk` or `flash-ssd`.
    #[arg(long, default_value = "default")]
    pub rocksdb_profile: String,
    /// Where RocksDB keeps its working databases (default: the system temporary directory).
    #[arg(long)]
    pub rocksdb_dir: Option<PathBuf>,
    /// Turn the changelog on (same as `-D state.changelog.enabled=true`): every state change
    /// is also logged and uploaded continuously, the backend is materialized now and then,
    /// and a checkpoint is the last materialization plus the log since — incremental for
    /// either backend.
    #[arg(long)]
    pub changelog: bool,
    /// A configuration entry under Flink's key names, repeatable, e.g.
    /// `-D state.changelog.periodic-materialize.interval=1min`,
    /// `-D dstl.dfs.upload.max-in-flight=64mb`,
    /// `-D execution.checkpointing.max-concurrent-checkpoints=2`. Wins over --config.
    #[arg(short = 'D', value_name = "KEY=VALUE")]
    pub define: Vec<String>,
    /// A YAML configuration file with Flink's key names (nested maps or flat dotted keys, as
    /// in Flink's `config.yaml`); keys statekit does not use are listed and ignored.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The flags given on the command line (argument ids), which win over the configuration;
    /// filled in by `main` from clap's matches.
    #[arg(skip)]
    pub explicit: Vec<String>,
}

fn parse_interval(s: &str) -> std::result::Result<std::time::Duration, String> {
    statekit_changelog::config::parse_duration(s).map_err(|e| e.to_string())
}

fn parse_restore_mode(s: &str) -> std::result::Result<RestoreMode, String> {
    s.parse()
}

impl WordcountArgs {
    /// The library's settings (the flags' ids are the settings' field names); `--output` and
    /// `--input` must be local.
    fn into_settings(self) -> Result<Settings> {
        let input = match self.input {
            Some(p) if p.as_os_str() != "-" => Some(crate::cmd::local_only(&p, "--input")?),
            other => other,
        };
        Ok(Settings {
            output: crate::cmd::local_only(&self.output, "--output")?,
            input,
            print_schema: self.print_schema,
            socket: self.socket,
            checkpoint_dir: self.checkpoint_dir,
            checkpoint_every: self.checkpoint_every,
            checkpoint_interval: self.checkpoint_interval,
            retained_checkpoints: self.retained_checkpoints,
            parallelism: self.parallelism,
            max_parallelism: self.max_parallelism,
            restore: self.restore,
            allow_non_restored_state: self.allow_non_restored_state,
            savepoint_dir: self.savepoint_dir,
            stop_with_savepoint: self.stop_with_savepoint,
            guarantee: self.guarantee,
            echo: self.echo,
            backend: self.backend,
            checkpoint_type: self.checkpoint_type,
            savepoint_format: self.savepoint_format,
            restore_mode: self.restore_mode,
            rocksdb_profile: self.rocksdb_profile,
            rocksdb_dir: self.rocksdb_dir,
            changelog: self.changelog,
            define: self.define,
            config: self.config,
            explicit: self.explicit,
        })
    }
}

/// `statekit demo wordcount`: the library's job, its reports rendered on standard error
/// (output lines, the schema and the savepoint's path on standard output).
fn wordcount(args: WordcountArgs) -> Result<ExitCode> {
    let settings = args.into_settings()?;
    let mut host = Terminal { progress: None };
    statekit_wordcount::run(settings, &mut host)?;
    Ok(ExitCode::SUCCESS)
}

/// The word count's host on a terminal (or a pipe): renders its events, opens snapshots as
/// every command does, stops on SIGTERM and Ctrl-C.
struct Terminal {
    /// The bar of the record loop (standard error, on a terminal only).
    progress: Option<crate::progress::Progress>,
}

impl statekit_wordcount::Host for Terminal {
    fn event(&mut self, event: Event<'_>) -> std::io::Result<()> {
        use crate::render::{count, noun};
        match event {
            Event::Schema(schema) => outln!("{}", serde_json::to_string_pretty(schema)?),
            Event::ConfigNote { key, note } => eprintln!("note: {key}: {note}"),
            Event::IgnoredKeys(keys) => eprintln!(
                "note: ignored {} the word count does not use: {}",
                count(keys.len() as u64, "configuration key"),
                keys.iter()
                    .map(|(k, why)| format!("{k} ({why})"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Event::RestoringLatest {
                checkpoint_id,
                location,
            } => eprintln!("restoring from checkpoint {checkpoint_id}: {location}"),
            Event::NoCheckpointYet { checkpoint_base } => {
                eprintln!("no complete checkpoint under {checkpoint_base}: starting from scratch")
            }
            Event::NotRestored { operators } => eprintln!(
                "note: not restored: the state of {} {} (the word count has no such operator; -n)",
                noun(operators.len() as u64, "operator"),
                operators
                    .iter()
                    .map(|u| format!("{u:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Event::Restored {
                path,
                format,
                checkpoint_id,
                from_parallelism,
                parallelism,
                mode,
                changelog,
            } => eprintln!(
                "restored {} ({format} checkpoint {checkpoint_id}, counter parallelism {from_parallelism} -> {parallelism}, {mode} mode{})",
                path.display(),
                if changelog { ", changelog on" } else { "" }
            ),
            Event::LostCommit(lost) => eprintln!("warning: {lost}"),
            Event::SinkRecovery { committed, aborted } => {
                eprintln!("sink recovery: {committed} transactions committed, {aborted} aborted")
            }
            Event::StreamNotReplayed { source, offset } => eprintln!(
                "note: {source} is a stream: it cannot replay what it sent before (restored offset {offset}); counting goes on with new input"
            ),
            Event::Counting { input_len } => self.progress = Some(progress_of(input_len)),
            Event::Progress(n) => {
                if let Some(p) = &self.progress {
                    p.set(n)
                }
            }
            Event::Stopping => {
                self.progress = None;
                eprintln!("SIGTERM (or Ctrl-C): stopping");
            }
            Event::Echo(line) => outln!("{line}"),
            Event::Summary {
                records,
                source,
                checkpoints,
                run_dir,
                output,
            } => eprintln!(
                "processed {} from {source}; {} under {}; output in {}",
                count(records, "word"),
                count(checkpoints, "checkpoint"),
                run_dir.display(),
                output.display()
            ),
            Event::ChangelogUploads(st) => eprintln!(
                "changelog: {} change sets uploaded in {} files ({} bytes), {} failed attempts, {} unreferenced files deleted",
                st.change_sets, st.files, st.bytes, st.failed_attempts, st.deleted_files
            ),
            Event::Savepoint(path) => savepoint_line(path)?,
            Event::Finished => self.progress = None,
            _ => {}
        }
        Ok(())
    }

    fn open_snapshot(&mut self, path: &Path) -> std::result::Result<statekit_snapshot::Snapshot, HostError> {
        Ok(crate::cmd::open_snapshot(path, &Default::default())?)
    }

    fn stop_flag(&mut self) -> std::result::Result<Arc<AtomicBool>, HostError> {
        use anyhow::Context;
        let stop = Arc::new(AtomicBool::new(false));
        signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone())
            .context("cannot install the SIGTERM handler")?;
        // Ctrl-C stops as SIGTERM does (a last checkpoint, or the savepoint); a second one
        // ends the process at once (exit 130).
        signal_hook::flag::register_conditional_shutdown(signal_hook::consts::SIGINT, 130, stop.clone())
            .and_then(|_| signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone()))
            .context("cannot install the SIGINT handler")?;
        Ok(stop)
    }
}

/// The record loop's bar: of the input's bytes when it is large, a spinner when it is small,
/// a count of words from a stream.
fn progress_of(input_len: Option<u64>) -> crate::progress::Progress {
    match input_len {
        Some(n) if n >= 8 << 20 => crate::progress::Progress::bytes("counting words", n),
        Some(_) => crate::progress::Progress::spinner("counting words"),
        None => crate::progress::Progress::counter("counting words from a stream", "words"),
    }
}

/// The savepoint's path: one line for a person; for `sp=$(statekit demo wordcount …)`
/// standard output holds the path alone (and standard error still says what it is).
fn savepoint_line(path: &Path) -> std::io::Result<()> {
    use std::io::IsTerminal;
    if std::io::stdout().is_terminal() {
        outln!("savepoint: {}", path.display());
    } else {
        eprintln!("savepoint: {}", path.display());
        outln!("{}", path.display());
    }
    Ok(())
}
