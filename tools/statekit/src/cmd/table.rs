//! `statekit export`: a snapshot's keyed state as Parquet tables (`statekit_table`), one
//! directory per (uid, state), for DuckDB, pandas, polars, Spark or Trino.

use anyhow::Result;
use clap::{Args, ValueEnum};
use statekit_checkpoint::SnapshotReader;
use statekit_core::KeyGroupRange;
use statekit_table::{export_snapshot, ExportOptions, ParquetOptions, TableCompression};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

/// The files' format.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ExportFormat {
    /// Apache Parquet (typed columns, compressed, one file per subtask's key groups).
    Parquet,
}

/// Page compression of the Parquet files.
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
    /// The directory to write: `OUT/<uid>/<state>/part-<first>-<last>.parquet` and
    /// `OUT/_tables.json`. It must not exist or be empty. Read one state as one table with
    /// DuckDB: `SELECT * FROM read_parquet('OUT/<uid>/<state>/*.parquet')`.
    pub out: PathBuf,
    /// File format.
    #[arg(long, value_enum, default_value = "parquet")]
    pub format: ExportFormat,
    /// Only this operator.
    #[arg(long)]
    pub uid: Option<String>,
    /// Only this keyed state.
    #[arg(long)]
    pub state: Option<String>,
    /// Only these key groups: N, A..B (B excluded) or A..=B.
    #[arg(long, value_name = "RANGE", value_parser = crate::cmd::dump::parse_key_groups)]
    pub key_group: Option<KeyGroupRange>,
    /// Rows per Parquet row group (and per Arrow batch in memory).
    #[arg(long, value_name = "N", default_value_t = 65_536)]
    pub row_group_size: usize,
    /// Page compression.
    #[arg(long, value_enum, default_value = "zstd")]
    pub compression: ExportCompression,
    /// Print the list of tables written as one JSON document (as `_tables.json`).
    #[arg(long)]
    pub json: bool,
}

/// `statekit export`.
pub fn export(args: ExportArgs) -> Result<ExitCode> {
    let ExportFormat::Parquet = args.format;
    let reader = SnapshotReader::open(&args.snapshot)?;
    let options = ExportOptions {
        uid: args.uid.clone(),
        state: args.state.clone(),
        key_groups: args.key_group,
        parquet: ParquetOptions {
            compression: match args.compression {
                ExportCompression::Zstd => TableCompression::Zstd,
                ExportCompression::Snappy => TableCompression::Snappy,
                ExportCompression::None => TableCompression::None,
            },
            row_group_rows: args.row_group_size.max(1),
            metadata: Vec::new(),
        },
    };
    let bar = std::io::stderr().is_terminal().then(|| {
        let b = indicatif::ProgressBar::new_spinner();
        b.set_message("exporting");
        b
    });
    let summary = export_snapshot(&reader, &args.out, &options, &mut |t| {
        if let Some(b) = &bar {
            b.set_message(format!("{}/{}: {} rows", t.uid, t.state, t.rows));
            b.tick();
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
