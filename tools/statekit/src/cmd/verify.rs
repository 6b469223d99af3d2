//! `statekit verify`: every byte of a snapshot (or one changelog log file) read and checked
//! (the checks are the library's [`statekit_snapshot::verify`]).

use super::changelog;
use super::inspect::{format_label, FlinkArgs};
use anyhow::Result;
use clap::Args;
use statekit_snapshot::verify::VerifyReport;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `statekit verify`.
#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// A snapshot directory or its `_metadata` file, or a changelog log file (`*.skcl`).
    pub path: PathBuf,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Apache Flink snapshots: uids to name operators by, moved roots (the only places
    /// outside a checkpoint's job directory its handles are read from).
    #[command(flatten)]
    pub flink: FlinkArgs,
}

/// `statekit verify`.
pub fn verify(args: VerifyArgs) -> Result<ExitCode> {
    let report = if changelog::is_log_file(&args.path) {
        verify_log_file(&args)?
    } else {
        // A structurally unsound `_metadata` (which every other command refuses) is still
        // verified: its problems are listed with those of its files, but the state is not
        // decoded further (native databases, changelog replay) from metadata that cannot be
        // trusted.
        let spinner = crate::progress::Progress::spinner(&format!("verifying {}", args.path.display()));
        let (reader, v) =
            statekit_snapshot::verify_location_with(&super::location(&args.path)?, &args.flink.options())?;
        drop(spinner);
        VerifyReport::of_snapshot(args.path.display().to_string(), format_label(reader.metadata()), &v)
    };
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        for line in report_text(&report) {
            outln!("{line}");
        }
    }
    Ok(if report.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `statekit verify <file.skcl>`: one log file, without a checkpoint.
fn verify_log_file(args: &VerifyArgs) -> Result<VerifyReport> {
    let shown = args.path.display().to_string();
    if let Some(bytes) = changelog::unwritten_prepared(&args.path)? {
        return Ok(VerifyReport::of_prepared_log_file(shown, bytes));
    }
    let (log, found) = changelog::verify_log_file(&args.path)?;
    Ok(VerifyReport::of_log_file(shown, &log, &found))
}

/// The report as text: a line per problem, then what was read and the verdict.
fn report_text(r: &VerifyReport) -> Vec<String> {
    let problem = crate::color::red("problem:", crate::color::Stream::Out);
    let mut lines: Vec<String> = r.problems.iter().map(|p| format!("{problem} {}", p.text)).collect();
    let verdict = if r.ok {
        "OK".to_string()
    } else {
        crate::render::count(r.problems.len() as u64, "problem")
    };
    let log = r.changelog.unwrap_or_default();
    lines.push(if r.prepared_unwritten {
        format!(
            "{}: a prepared log file not yet written ({} zero bytes): a running job's changelog keeps such spares; one a crash left behind is an orphan `statekit gc` deletes; OK",
            r.path, r.bytes
        )
    } else if r.is_log_file() {
        format!(
            "{}: log file, {} bytes, {} change sets, {} change records checked; {verdict}",
            r.path, r.bytes, log.change_sets, log.change_records
        )
    } else {
        let log_text = if r.changelog.is_some() {
            format!(
                "; {} log files decoded ({} change sets, {} change records), {} replayed records checked",
                log.log_files, log.change_sets, log.change_records, log.replayed_records
            )
        } else {
            String::new()
        };
        format!(
            "{}: {}, {} bytes, {} checked{log_text}; {verdict}",
            r.path,
            crate::render::count(r.files, "file"),
            r.bytes,
            crate::render::count(r.entries.unwrap_or_default(), "entry"),
        )
    });
    lines
}
