//! `statekit query`: SQL over a snapshot (`statekit_query`, Apache DataFusion). Tables:
//! `"<uid>"."<state>"` per keyed or operator state, `states`, `operators`.
//!
//! Read-only unless `--unrestricted`: no statement reads or writes a file or changes the
//! session. `--memory-limit` bounds DataFusion's operators, `--spill-limit` their temporary
//! files, `--timeout` each statement. Exit codes: 0 done; 1 the statement reached one of
//! those limits (it was valid: a higher limit may let it finish); 2 bad SQL, an unknown
//! table, a refused statement, an unreadable snapshot.

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use statekit_query::arrow::util::pretty::pretty_format_batches;
use statekit_query::{QueryError, QueryOptions, SnapshotQuery};
use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// How results are printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum QueryFormat {
    /// An aligned text table.
    Table,
    /// CSV with a header line.
    Csv,
    /// One JSON document: an array of objects, one per row.
    Json,
}

/// Arguments of `statekit query`.
#[derive(Args, Debug)]
pub struct QueryArgs {
    /// The snapshot to query (any kind; never modified).
    pub snapshot: PathBuf,
    /// The SQL statement, e.g. `SELECT * FROM "counter"."count" WHERE key = 'a'` (quote uids
    /// and state names with double quotes). Without it: an interactive prompt when standard
    /// input is a terminal, else the statement read from standard input.
    pub sql: Option<String>,
    /// How results are printed.
    #[arg(long, value_enum, default_value = "table")]
    pub format: QueryFormat,
    /// Memory DataFusion's operators (sorts, aggregates, joins) may hold at once, e.g.
    /// `512MiB`, `4GiB`. A sort or aggregate past it spills to temporary files (up to
    /// --spill-limit); anything else fails (exit 1). The snapshot's scans are not counted:
    /// they hold a few batches each.
    #[arg(long, value_name = "SIZE", default_value = "1GiB", value_parser = crate::cmd::migrate::parse_size)]
    pub memory_limit: usize,
    /// Temporary files (in the system's temporary directory, TMPDIR) sorts and aggregates may
    /// spill when they pass --memory-limit, e.g. `16GiB`; `0`: no spilling.
    #[arg(long, value_name = "SIZE", default_value = "16GiB", value_parser = parse_spill_limit)]
    pub spill_limit: u64,
    /// Stop a statement that runs longer than this, e.g. `30s`, `5 min`, `1h` (exit 1; at the
    /// prompt, the prompt goes on). Default: no limit.
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout)]
    pub timeout: Option<Duration>,
    /// DANGEROUS: accept every statement DataFusion runs, not just queries over the
    /// snapshot's tables: CREATE EXTERNAL TABLE and `SELECT * FROM 'path'` over any file
    /// this user can read, COPY … TO and INSERT INTO any path it can write, CREATE VIEW,
    /// DROP, SET (which can also lift --memory-limit). Never with SQL from someone you would
    /// not give a shell.
    #[arg(long)]
    pub unrestricted: bool,
    /// For Apache Flink snapshots: `--flink-uid` names operators stored by id, so tables are
    /// `"<uid>"."<state>"` as in the job.
    #[command(flatten)]
    pub flink: super::inspect::FlinkArgs,
}

/// A size as `--memory-limit` takes it, or `0`.
fn parse_spill_limit(s: &str) -> std::result::Result<u64, String> {
    if s.trim() == "0" {
        return Ok(0);
    }
    crate::cmd::migrate::parse_size(s)
        .map(|n| n as u64)
        .map_err(|e| e.to_string())
}

/// A positive duration as `--checkpoint-interval` takes it (`30s`, `5 min`, `500ms`; a bare
/// number is milliseconds).
fn parse_timeout(s: &str) -> std::result::Result<Duration, String> {
    let d = statekit_changelog::config::parse_duration(s).map_err(|e| format!("{s:?}: {e} (e.g. 30s, 5 min)"))?;
    if d.is_zero() {
        return Err(format!("{s:?}: must be longer than zero"));
    }
    Ok(d)
}

/// `statekit query`.
pub fn query(args: QueryArgs) -> Result<ExitCode> {
    let reader = super::open_snapshot(&args.snapshot, &args.flink.with_schema())?;
    let options = QueryOptions {
        memory_limit: args.memory_limit,
        spill_limit: args.spill_limit,
        timeout: args.timeout,
        unrestricted: args.unrestricted,
    };
    let q = SnapshotQuery::with_options(reader, options)?;
    let result = match args.sql {
        Some(sql) => run(&q, &sql, args.format),
        None if std::io::stdin().is_terminal() => prompt(&q, args.format),
        None => {
            let mut sql = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut sql).context("reading the statement")?;
            run(&q, &sql, args.format)
        }
    };
    match result {
        // A limit reached: the work failed, the request was fine (exit 1, not 2).
        Err(e) if limit_reached(&e) => {
            use crate::color::{red, Stream};
            eprintln!("{} {}", red("error:", Stream::Err), crate::error_text(&e));
            Ok(ExitCode::from(1))
        }
        other => other,
    }
}

/// Whether `e` is a statement stopped by `--memory-limit`, `--spill-limit` or `--timeout`.
fn limit_reached(e: &anyhow::Error) -> bool {
    matches!(
        e.downcast_ref::<QueryError>(),
        Some(QueryError::MemoryLimit { .. } | QueryError::SpillLimit { .. } | QueryError::Timeout(_))
    )
}

/// `e` with the flag that lifts it named: `--memory-limit`, `--spill-limit`, `--timeout`,
/// `--unrestricted`.
fn with_hint(e: QueryError) -> anyhow::Error {
    let hint = match &e {
        QueryError::ReadOnly { .. } => "--unrestricted accepts it (dangerous: see --help)",
        QueryError::MemoryLimit { .. } => "--memory-limit sets the limit",
        QueryError::SpillLimit { .. } => "--spill-limit sets the limit (a larger --memory-limit spills less)",
        QueryError::Timeout(_) => "--timeout sets the limit",
        _ => return e.into(),
    };
    let text = format!("{e}; {hint}");
    anyhow::Error::new(e).context(text)
}

/// Runs one statement and prints its result.
fn run(q: &SnapshotQuery, sql: &str, format: QueryFormat) -> Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    match format {
        QueryFormat::Table => {
            let batches = q.sql(sql).map_err(with_hint)?;
            writeln!(out, "{}", pretty_format_batches(&batches)?)?;
        }
        QueryFormat::Csv => {
            // Streamed: a large result is never held whole.
            let mut writer = statekit_query::arrow::csv::WriterBuilder::new()
                .with_header(true)
                .build(&mut out);
            q.sql_each(sql, |b| writer.write(b).map_err(QueryError::Output))
                .map_err(with_hint)?;
        }
        QueryFormat::Json => {
            let mut w = statekit_query::arrow::json::ArrayWriter::new(Vec::new());
            q.sql_each(sql, |b| w.write(b).map_err(QueryError::Output))
                .map_err(with_hint)?;
            w.finish()?;
            let bytes = w.into_inner();
            if bytes.is_empty() {
                writeln!(out, "[]")?;
            } else {
                out.write_all(&bytes)?;
                writeln!(out)?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The interactive prompt: statements end with `;`; `\q`, `exit` or end of input leave;
/// `\d` lists the tables. An error is printed and the prompt goes on.
fn prompt(q: &SnapshotQuery, format: QueryFormat) -> Result<ExitCode> {
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let mut statement = String::new();
    eprintln!("SQL over the snapshot; end a statement with ';', \\d lists the tables, \\q leaves.");
    loop {
        eprint!(
            "{}",
            if statement.is_empty() {
                "statekit> "
            } else {
                "      ..> "
            }
        );
        std::io::stderr().flush()?;
        let Some(line) = lines.next() else {
            eprintln!();
            return Ok(ExitCode::SUCCESS);
        };
        let line = line?;
        let trimmed = line.trim();
        if statement.is_empty() {
            match trimmed {
                "" => continue,
                "\\q" | "exit" | "quit" => return Ok(ExitCode::SUCCESS),
                "\\d" => {
                    report(run(
                        q,
                        "SELECT uid, state, scope, kind, key, value FROM states ORDER BY uid, state",
                        format,
                    ));
                    continue;
                }
                _ => {}
            }
        }
        statement.push_str(&line);
        statement.push('\n');
        if trimmed.ends_with(';') {
            let sql = std::mem::take(&mut statement);
            report(run(q, sql.trim().trim_end_matches(';'), format));
        }
    }
}

fn report(r: Result<ExitCode>) {
    if let Err(e) = r {
        eprintln!("error: {}", crate::error_text(&e));
    }
}
