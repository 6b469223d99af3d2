//! `statekit verify`: every byte of a snapshot (or one changelog log file) read and checked
//! (the checks are the library's [`statekit_snapshot::verify`]).

use super::changelog;
use super::inspect::{format_label, FlinkArgs};
use anyhow::Result;
use clap::Args;
use serde_json::json;
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
    if changelog::is_log_file(&args.path) {
        return verify_log_file(&args);
    }
    // A structurally unsound `_metadata` (which every other command refuses) is still
    // verified: its problems are listed with those of its files, but the state is not decoded
    // further (native databases, changelog replay) from metadata that cannot be trusted.
    let spinner = crate::progress::Progress::spinner(&format!("verifying {}", args.path.display()));
    let (reader, v) = statekit_snapshot::verify_location_with(&super::location(&args.path)?, &args.flink.options())?;
    drop(spinner);
    let problems: Vec<String> = v.problems.iter().map(ToString::to_string).collect();
    let problems_json: Vec<serde_json::Value> = v.problems.iter().map(crate::render::problem_json).collect();
    let (files, bytes, entries) = (v.files, v.bytes, v.entries);
    let log = v.changelog.unwrap_or_default();
    let is_changelog = v.changelog.is_some();
    let ok = problems.is_empty();
    if args.json {
        let mut doc = json!({
            "path": args.path.display().to_string(),
            "ok": ok,
            "format": format_label(reader.metadata()),
            "files": files,
            "bytes": bytes,
            "entries": entries,
            "problems": problems_json,
        });
        if is_changelog {
            doc["changelog"] = log_json(&log);
        }
        outln!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        for p in &problems {
            outln!("{} {p}", crate::color::red("problem:", crate::color::Stream::Out));
        }
        let log_text = if is_changelog {
            format!(
                "; {} log files decoded ({} change sets, {} change records), {} replayed records checked",
                log.log_files, log.change_sets, log.records, log.replayed
            )
        } else {
            String::new()
        };
        outln!(
            "{}: {}, {bytes} bytes, {} checked{log_text}; {}",
            args.path.display(),
            crate::render::count(files, "file"),
            crate::render::count(entries, "entry"),
            verdict(&problems)
        );
    }
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

fn verdict(problems: &[String]) -> String {
    if problems.is_empty() {
        "OK".to_string()
    } else {
        crate::render::count(problems.len() as u64, "problem")
    }
}

fn log_json(log: &statekit_changelog::verify::LogCheck) -> serde_json::Value {
    json!({
        "log_files": log.log_files,
        "log_bytes": log.bytes,
        "change_sets": log.change_sets,
        "change_records": log.records,
        "replayed_records": log.replayed,
    })
}

/// `statekit verify <file.skcl>`: one log file, without a checkpoint.
fn verify_log_file(args: &VerifyArgs) -> Result<ExitCode> {
    if let Some(bytes) = changelog::unwritten_prepared(&args.path)? {
        if args.json {
            let doc = json!({
                "path": args.path.display().to_string(),
                "ok": true,
                "format": "changelog-log-v1",
                "prepared_unwritten": true,
                "files": 1,
                "bytes": bytes,
                "changelog": log_json(&statekit_changelog::verify::LogCheck::default()),
                "problems": [],
            });
            outln!("{}", serde_json::to_string_pretty(&doc)?);
        } else {
            outln!(
                "{}: a prepared log file not yet written ({bytes} zero bytes): a running job's changelog keeps such spares; one a crash left behind is an orphan `statekit gc` deletes; OK",
                args.path.display()
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    let (log, found) = changelog::verify_log_file(&args.path)?;
    let problems: Vec<String> = found.iter().map(ToString::to_string).collect();
    let problems_json: Vec<serde_json::Value> = found.iter().map(crate::render::problem_json).collect();
    let ok = problems.is_empty();
    if args.json {
        let doc = json!({
            "path": args.path.display().to_string(),
            "ok": ok,
            "format": "changelog-log-v1",
            "files": 1,
            "bytes": log.bytes,
            "changelog": log_json(&log),
            "problems": problems_json,
        });
        outln!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        for p in &problems {
            outln!("{} {p}", crate::color::red("problem:", crate::color::Stream::Out));
        }
        outln!(
            "{}: log file, {} bytes, {} change sets, {} change records checked; {}",
            args.path.display(),
            log.bytes,
            log.change_sets,
            log.records,
            verdict(&problems)
        );
    }
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
