//! `statekit diff`: the differences of two snapshots, printed (the comparison is the
//! library's [`statekit_snapshot::diff`]).

use anyhow::Result;
use clap::Args;
use serde::Serialize;
use statekit_snapshot::diff::{diff_snapshots, DiffOptions, DiffSummary, DifferenceReport, Side, SummaryReport};
use statekit_snapshot::Snapshot;
use std::io::Write;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `statekit diff`.
#[derive(Args, Debug)]
#[command(after_help = "\
Compares snapshot A (old) with snapshot B (new), in any formats (canonical, native RocksDB,
changelog) and at any parallelism: operators by uid (added, removed; changed operator id, max
parallelism, finished), keyed and operator states by name (added, removed; changed kind or
types), and keyed state key by key in key-group order (added, removed, modified, with values
decoded as `statekit dump` prints them; maps per user key, lists whole). A change of
parallelism is shown but is layout, not a difference. Operator state is compared as a
parallelism-1 restore sees it (list and union as multisets of elements, broadcast as a map).

Output lines start with `+` (only in B), `-` (only in A) or `~` (in both, different); a count
goes to standard error. With --json, one JSON document: {\"differences\": [...], \"summary\": {...}},
each difference an object (\"type\": operator, state, operator_state or key; \"change\": added,
removed or modified), written as found (memory stays bounded). With --jsonl, JSON lines: one
object per difference, then the summary object (\"type\": \"summary\").

Memory is bounded by one key group of each snapshot (one subtask of a changelog snapshot).
Exit status: 0 no differences, 1 differences, 2 error.")]
pub struct DiffArgs {
    /// Snapshot A (old): a snapshot directory or its `_metadata` file.
    pub a: PathBuf,
    /// Snapshot B (new): a snapshot directory or its `_metadata` file.
    pub b: PathBuf,
    /// Only the operator with this uid.
    #[arg(long)]
    pub uid: Option<String>,
    /// Only the keyed or operator state with this name.
    #[arg(long)]
    pub state: Option<String>,
    /// Only report which keys differ (and how: +, -, ~), no values.
    #[arg(long)]
    pub keys_only: bool,
    /// Stop after this many differences (exit 1; the summary says so).
    #[arg(long)]
    pub limit: Option<u64>,
    /// One JSON document: {"differences": [...], "summary": {...}}.
    #[arg(long, conflicts_with = "jsonl")]
    pub json: bool,
    /// JSON lines: one object per difference, then a summary object (for streaming).
    #[arg(long)]
    pub jsonl: bool,
    /// For Apache Flink snapshots (either side).
    #[command(flatten)]
    pub flink: super::inspect::FlinkArgs,
}

/// `statekit diff`.
pub fn diff(args: DiffArgs) -> Result<ExitCode> {
    let ra = open_side(&args.a, &args.flink.options())?;
    let rb = open_side(&args.b, &args.flink.options())?;
    let (la, lb) = (args.a.display().to_string(), args.b.display().to_string());
    let opts = DiffOptions {
        uid: args.uid.clone(),
        state: args.state.clone(),
        keys_only: args.keys_only,
    };
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if args.json {
        write!(out, "{{\"differences\": [")?;
    }
    let limit = args.limit.unwrap_or(u64::MAX);
    let mut printed = 0u64;
    let progress = crate::progress::Progress::counter("comparing", "differences");
    let mut write_error: Option<std::io::Error> = None;
    let summary = diff_snapshots(
        Side {
            label: &la,
            snapshot: &ra,
        },
        Side {
            label: &lb,
            snapshot: &rb,
        },
        &opts,
        &mut |d| {
            if printed >= limit {
                return ControlFlow::Break(());
            }
            let written = if args.jsonl {
                write_json(&mut out, &DifferenceReport::from(&d)).and_then(|()| writeln!(out))
            } else if args.json {
                let sep = if printed == 0 { "\n  " } else { ",\n  " };
                write!(out, "{sep}").and_then(|()| write_json(&mut out, &DifferenceReport::from(&d)))
            } else {
                difference_text(&d)
                    .iter()
                    .try_for_each(|line| writeln!(out, "{}", colored_line(line)))
            };
            if let Err(e) = written {
                write_error = Some(e);
                return ControlFlow::Break(());
            }
            printed += 1;
            progress.inc(1);
            ControlFlow::Continue(())
        },
    )?;
    drop(progress);
    if let Some(e) = write_error {
        return Err(e.into());
    }
    if args.jsonl {
        write_json(&mut out, &SummaryReport::from(&summary))?;
        writeln!(out)?;
    } else if args.json {
        let close = if printed == 0 { "" } else { "\n" };
        write!(out, "{close}], \"summary\": ")?;
        write_json(&mut out, &SummaryReport::from(&summary))?;
        writeln!(out, "}}")?;
    }
    out.flush()?;
    drop(out);
    if !args.json && !args.jsonl {
        eprintln!("{}", summary_text(&summary, args.limit));
    }
    Ok(if summary.identical() && !summary.truncated {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// A record of the report as compact JSON (a line of `--jsonl`, an element of `--json`'s
/// document: `{"differences": [` one difference per line `], "summary": {…}}`).
fn write_json(out: &mut impl Write, record: &impl Serialize) -> std::io::Result<()> {
    serde_json::to_writer(out, record).map_err(std::io::Error::from)
}

/// The stderr line: what was found.
pub fn summary_text(s: &DiffSummary, limit: Option<u64>) -> String {
    let mut t = if s.identical() {
        "no differences".to_string()
    } else {
        format!(
            "differences: {} operators, {} keyed states, {} operator states, {} keys",
            s.operators, s.states, s.operator_states, s.keys
        )
    };
    if s.layout > 0 {
        t.push_str(&format!(" ({} operators differ in parallelism only)", s.layout));
    }
    if s.truncated {
        t.push_str(&format!(
            "; stopped at --limit {}: there are more",
            limit.unwrap_or_default()
        ));
    }
    t
}

/// A difference as text: its lines, and each line's columns as the inspector shows them
/// (the library's).
pub use statekit_snapshot::diff::text::{difference_cell, difference_parts, difference_text, fields_text, DiffCells};

/// A difference line coloured by its sign when standard output takes colour: `+` green,
/// `-` red, `~` yellow.
fn colored_line(line: &str) -> String {
    use crate::color::{green, red, yellow, Stream};
    match line.chars().next() {
        Some('+') => green(line, Stream::Out),
        Some('-') => red(line, Stream::Out),
        Some('~') => yellow(line, Stream::Out),
        _ => line.to_string(),
    }
}

/// Opens one side with its state schema; an error names its path.
pub fn open_side(path: &std::path::Path, options: &statekit_snapshot::OpenOptions) -> Result<Snapshot> {
    Ok(statekit_inspector::open::open_side(path, options)?)
}
