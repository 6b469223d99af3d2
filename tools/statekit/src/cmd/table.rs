//! `statekit export`: a snapshot's state as tables (`statekit_table`) — Parquet, Arrow IPC
//! or JSON lines, one directory per (uid, state) — for DuckDB, pandas, polars, Spark or Trino.

use anyhow::Result;
use clap::{Args, ValueEnum};
use statekit_checkpoint::SnapshotReader;
use statekit_core::KeyGroupRange;
use statekit_table::{export_snapshot, ExportOptions, TableCompression, TableFileOptions, TableFormat};
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
    /// Print the list of tables written as one JSON document (as `_tables.json`).
    #[arg(long)]
    pub json: bool,
}

/// `statekit export`.
pub fn export(args: ExportArgs) -> Result<ExitCode> {
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
    let reader = SnapshotReader::open(&args.snapshot)?;
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
    };
    let bar = std::io::stderr().is_terminal().then(|| {
        let b = indicatif::ProgressBar::new_spinner();
        b.set_style(
            indicatif::ProgressStyle::with_template("{spinner} exporting: {human_pos} rows ({per_sec}) {elapsed}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
        );
        b.enable_steady_tick(std::time::Duration::from_millis(120));
        b
    });
    let summary = export_snapshot(&reader, &args.out, &options, &|rows| {
        if let Some(b) = &bar {
            b.inc(rows);
        }
    });
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    let summary = summary?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&summary)?);
        return Ok(ExitCode::SUCCESS);
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
