//! `statekit export`: a snapshot's state as tables (`statekit_table`) — Parquet, Arrow IPC
//! or JSON lines, one directory per (uid, state) — for DuckDB, pandas, polars, Spark or Trino.

use anyhow::Result;
use clap::{Args, ValueEnum};
use statekit_core::KeyGroupRange;
use statekit_table::{ExportOptions, TableCompression, TableFileOptions, TableFormat};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

/// The files' format.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ExportFormat {
    /// Apache Parquet (typed columns, compressed, one file per subtask's key groups).
    Parquet,
    /// The Arrow IPC file format (Feather v2): `pyarrow.ipc.open_file`, polars `read_ipc`.
    Arrow,
    /// JSON lines: one object per row (binary as hex).
    Jsonl,
}

/// Compression of Parquet pages or Arrow IPC buffers.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ExportCompression {
    /// Zstandard, level 1.
    Zstd,
    /// Snappy.
    Snappy,
    /// None.
    None,
}

/// Arguments of `statekit export`.
#[derive(Args, Debug)]
pub struct ExportArgs {
    /// The snapshot to read (any kind; never modified).
    pub snapshot: PathBuf,
    /// The directory to write: `OUT/<uid>/<state>/part-<first>-<last>.parquet` per keyed
    /// state, `OUT/<uid>/<state>/subtasks-0-<n>.parquet` per operator state, and
    /// `OUT/_tables.json`. It must not exist or be empty; it appears complete or not at all.
    /// Read one state as one table with DuckDB:
    /// `SELECT * FROM read_parquet('OUT/<uid>/<state>/*.parquet')`.
    pub out: PathBuf,
    /// File format.
    #[arg(long, value_enum, default_value = "parquet")]
    pub format: ExportFormat,
    /// Only this operator.
    #[arg(long)]
    pub uid: Option<String>,
    /// Only this state (keyed or operator state).
    #[arg(long)]
    pub state: Option<String>,
    /// Only these key groups: N, A..B (B excluded) or A..=B (operator state is then left out).
    #[arg(long, value_name = "RANGE", value_parser = crate::cmd::dump::parse_key_groups)]
    pub key_group: Option<KeyGroupRange>,
    /// Rows per Parquet row group (and per Arrow batch in memory).
    #[arg(long, value_name = "N", default_value_t = 65_536)]
    pub row_group_size: usize,
    /// Compression [default: zstd; none for jsonl]. Snappy is Parquet's only; JSON lines
    /// are not compressed.
    #[arg(long, value_enum)]
    pub compression: Option<ExportCompression>,
    /// Subtasks exported at once [default: one per core].
    #[arg(long, value_name = "N", default_value_t = 0, hide_default_value = true)]
    pub threads: usize,
    /// Write only shard I of N (every Nth subtask's key groups from the Ith; shard 0 also the
    /// operator state) and its manifest, not `_tables.json`: N independent tasks (any batch
    /// scheduler) each run with their own I on the same OUT, then `statekit finish-shards OUT
    /// --shards N` writes `_tables.json`.
    #[arg(long, value_name = "I/N", value_parser = crate::cmd::migrate::parse_shard)]
    pub shard: Option<(u32, u32)>,
    /// Print the list of tables written as one JSON document (as `_tables.json`).
    #[arg(long)]
    pub json: bool,
    /// For Apache Flink snapshots.
    #[command(flatten)]
    pub flink: super::inspect::FlinkArgs,
}

/// `statekit export`.
pub fn export(args: ExportArgs) -> Result<ExitCode> {
    let out = super::location(&args.out)?;
    let format = match args.format {
        ExportFormat::Parquet => TableFormat::Parquet,
        ExportFormat::Arrow => TableFormat::Arrow,
        ExportFormat::Jsonl => TableFormat::Jsonl,
    };
    let compression = match args.compression {
        None => format.default_compression(),
        Some(ExportCompression::Zstd) => TableCompression::Zstd,
        Some(ExportCompression::Snappy) => TableCompression::Snappy,
        Some(ExportCompression::None) => TableCompression::None,
    };
    let reader = super::open_snapshot(&args.snapshot, &args.flink.with_schema())?;
    let options = ExportOptions {
        uid: args.uid.clone(),
        state: args.state.clone(),
        key_groups: args.key_group,
        file: TableFileOptions {
            format,
            compression,
            row_group_rows: args.row_group_size.max(1),
            metadata: Vec::new(),
        },
        threads: args.threads,
        shard: args.shard,
    };
    let summary = with_rows_spinner("exporting", |progress| {
        statekit_table::export_shard_to(&reader, &out, &options, progress)
    })?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&summary)?);
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(sh) = &summary.shard {
        outln!(
            "shard {}/{}: {} of {} files of keyed state{}; when every shard is done: statekit finish-shards {} --shards {}",
            sh.shard,
            sh.shards,
            sh.work.len(),
            sh.work_total,
            if sh.shard == 0 { " and the operator state" } else { "" },
            args.out.display(),
            sh.shards
        );
    }
    for t in &summary.tables {
        outln!(
            "{}  {} rows in {} files  ({})",
            args.out.join(&t.path).display(),
            t.rows,
            t.files.len(),
            t.columns
                .iter()
                .map(|(name, arrow, _)| format!("{name} {arrow}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Arguments of `statekit import`.
#[derive(Args, Debug)]
pub struct ImportArgs {
    /// The tables: a directory laid out as `export` writes it (`<uid>/<state>/*.parquet` or
    /// `*.arrow`; a state without a directory starts empty), a path or a URL (`s3://…`: read
    /// into a local working copy first). Never modified.
    pub tables: PathBuf,
    /// The savepoint directory to write (it must not exist, unless --force).
    pub out: PathBuf,
    /// The state schema (a path or a URL): the file `statekit schema SNAPSHOT --json` prints (operators, max
    /// parallelism, states, kinds, types, TTL), edited as the new job declares it.
    #[arg(long, value_name = "SCHEMA.json")]
    pub schema: PathBuf,
    /// Parallelism of every operator [default: the schema's, else 1].
    #[arg(long, value_name = "N")]
    pub parallelism: Option<u32>,
    /// Max parallelism (key groups) of every operator [default: the schema's]; keys are
    /// assigned to key groups under it.
    #[arg(long, value_name = "M")]
    pub max_parallelism: Option<u32>,
    /// Memory for sorting rows into key-group order before sorted runs spill to disk (however
    /// many rows one key has); also the most operator state held (it is held whole; at least
    /// 64 MiB).
    #[arg(long, value_name = "SIZE", default_value = "256MiB", value_parser = crate::cmd::migrate::parse_size)]
    pub memory: usize,
    /// Block compression of the savepoint's data files.
    #[arg(long, value_enum, default_value = "lz4")]
    pub compression: crate::cmd::migrate::CompressionArg,
    /// A state with TTL whose table has no `expires_at` column counts as written at this
    /// time (milliseconds since the epoch) [default: now].
    #[arg(long, value_name = "MILLIS")]
    pub now: Option<i64>,
    /// Replace OUT if it exists (only a snapshot directory or an empty one is replaced).
    #[arg(long)]
    pub force: bool,
    /// Print the summary as one JSON document.
    #[arg(long)]
    pub json: bool,
}

/// `statekit import`.
pub fn import(mut args: ImportArgs) -> Result<ExitCode> {
    use anyhow::Context;
    use statekit_core::location::Location;
    let out = super::location(&args.out)?;
    // Tables on an object store are read from a local working copy; errors name the URL.
    let shown_tables = args.tables.display().to_string();
    // The working copy (removed on return) and its path as errors would name it.
    let mut scratch: Option<(tempfile::TempDir, String)> = None;
    if let stored @ Location::Stored { .. } = super::location(&args.tables)? {
        let (storage, prefix) = stored.storage_and_path()?;
        let dir = tempfile::Builder::new()
            .prefix(".statekit-import-tables-")
            .tempdir()
            .context("a temporary directory for the tables")?;
        let local = dir.path().join("tables");
        statekit_core::storage::download_tree(storage.as_ref(), &prefix, &local)
            .with_context(|| format!("{shown_tables}: reading the tables"))?;
        scratch = Some((dir, local.display().to_string()));
        args.tables = local;
    }
    let text = super::read_whole(super::location(&args.schema)?, &args.schema)?;
    let schema: statekit_migrate::JobSchema = serde_json::from_slice(&text).with_context(|| {
        format!(
            "{}: not a schema file (see `statekit schema --json`)",
            args.schema.display()
        )
    })?;
    let mut options = statekit_table::ImportOptions {
        parallelism: args.parallelism,
        max_parallelism: args.max_parallelism,
        memory: args.memory,
        force: args.force,
        ..Default::default()
    };
    options.write.compression = args.compression.codec(None)?;
    if let Some(now) = args.now {
        options.now_ms = now;
    }
    let summary = with_rows_spinner("importing", |progress| {
        statekit_table::import_to(&args.tables, &schema, &out, &options, progress)
    })
    .map_err(|e| match &scratch {
        // Name the tables' URL, not the working copy's path.
        Some((_, local)) => anyhow::anyhow!("{}", format!("{e:#}").replace(local.as_str(), &shown_tables)),
        None => e.into(),
    })?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&summary)?);
        return Ok(ExitCode::SUCCESS);
    }
    for s in &summary.states {
        outln!("{}/{}  {} rows from {} files", s.uid, s.state, s.rows, s.files.len());
    }
    outln!(
        "{}: {} keyed entries{}",
        summary.output.display(),
        summary.entries,
        if summary.spilled_runs > 0 {
            format!(" ({} sorted runs spilled)", summary.spilled_runs)
        } else {
            String::new()
        }
    );
    Ok(ExitCode::SUCCESS)
}

/// Runs `work` with a progress callback that counts rows on a spinner on standard error
/// when it is a terminal (silent otherwise), and clears the spinner when it returns.
fn with_rows_spinner<T>(what: &str, work: impl FnOnce(&(dyn Fn(u64) + Sync)) -> T) -> T {
    let bar = std::io::stderr().is_terminal().then(|| {
        let b = indicatif::ProgressBar::new_spinner();
        b.set_style(
            indicatif::ProgressStyle::with_template(&format!(
                "{{spinner}} {what}: {{human_pos}} rows ({{per_sec}}) {{elapsed}}"
            ))
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
        );
        b.enable_steady_tick(std::time::Duration::from_millis(120));
        b
    });
    let out = work(&|rows| {
        if let Some(b) = &bar {
            b.inc(rows);
        }
    });
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    out
}
