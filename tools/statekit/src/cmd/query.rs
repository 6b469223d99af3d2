//! `statekit query`: SQL over a snapshot (`statekit_query`, Apache DataFusion). Tables:
//! `"<uid>"."<state>"` per keyed or operator state, `states`, `operators`.

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use statekit_query::arrow::util::pretty::pretty_format_batches;
use statekit_query::{QueryError, SnapshotQuery};
use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

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
}

/// `statekit query`.
pub fn query(args: QueryArgs) -> Result<ExitCode> {
    let mut reader = super::open_reader(&args.snapshot, &Default::default())?;
    reader.load_state_schema()?;
    let q = SnapshotQuery::new(Arc::new(reader))?;
    match args.sql {
        Some(sql) => run(&q, &sql, args.format),
        None if std::io::stdin().is_terminal() => prompt(&q, args.format),
        None => {
            let mut sql = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut sql).context("reading the statement")?;
            run(&q, &sql, args.format)
        }
    }
}

/// Runs one statement and prints its result.
fn run(q: &SnapshotQuery, sql: &str, format: QueryFormat) -> Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    match format {
        QueryFormat::Table => {
            let batches = q.sql(sql)?;
            writeln!(out, "{}", pretty_format_batches(&batches)?)?;
        }
        QueryFormat::Csv => {
            // Streamed: a large result is never held whole.
            let mut writer = statekit_query::arrow::csv::WriterBuilder::new()
                .with_header(true)
                .build(&mut out);
            q.sql_each(sql, |b| writer.write(b).map_err(QueryError::Output))?;
        }
        QueryFormat::Json => {
            let mut w = statekit_query::arrow::json::ArrayWriter::new(Vec::new());
            q.sql_each(sql, |b| w.write(b).map_err(QueryError::Output))?;
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
