//! `statekit gc`: files no complete snapshot references.

use anyhow::{bail, Result};
use clap::Args;
use serde_json::json;
use statekit_checkpoint::{apply_gc_at, plan_gc_at, GcPlan, Orphan};
use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Arguments of `statekit gc`.
#[derive(Args, Debug)]
pub struct GcArgs {
    /// Checkpoint base directory (holding `<job-id>/chk-N/`, `<job-id>/shared/`).
    pub dir: PathBuf,
    /// Only list what would be deleted.
    #[arg(long)]
    pub dry_run: bool,
    /// Delete without asking.
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Leave files modified less than this long ago (a running job may be writing them), e.g.
    /// `10m`, `30s`, `0s`, `2h`.
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    pub min_age: Duration,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

fn parse_duration(s: &str) -> std::result::Result<Duration, String> {
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?}: expected a number with a unit (s, m, h, d), e.g. 10m"))?;
    let per: u64 = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        other => return Err(format!("{s:?}: unknown unit {other:?} (use s, m, h or d)")),
    };
    let secs = n
        .checked_mul(per)
        .ok_or_else(|| format!("{s:?}: too large (at most {} seconds)", u64::MAX))?;
    Ok(Duration::from_secs(secs))
}

/// `statekit gc`.
pub fn gc(mut args: GcArgs) -> Result<ExitCode> {
    let base = super::location(&args.dir)?;
    if let Some(p) = base.as_local() {
        args.dir = p.to_path_buf();
    }
    let spinner = crate::progress::Progress::spinner(&format!("looking for garbage under {}", args.dir.display()));
    let plan = plan_gc_at(&base, args.min_age)?;
    drop(spinner);
    let mut deleted = None;
    let nothing = plan.orphans.is_empty() && plan.empty_dirs.is_empty();
    if !args.dry_run && !nothing && confirmed(&args, &plan)? {
        let spinner = crate::progress::Progress::spinner(&format!(
            "deleting {}",
            crate::render::count(plan.orphans.len() as u64, "file")
        ));
        deleted = Some(apply_gc_at(&base, &plan)?);
        drop(spinner);
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&gc_json(&args, &plan, deleted))?);
    } else {
        gc_text(&args, &plan, deleted)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether to delete what `plan` found: `--yes`, or the answer to a prompt on a terminal;
/// anything else is refused.
fn confirmed(args: &GcArgs, plan: &GcPlan) -> Result<bool> {
    if args.yes {
        return Ok(true);
    }
    if !std::io::stdin().is_terminal() {
        bail!("refusing to delete without confirmation: pass --yes (or --dry-run to list)");
    }
    eprint!(
        "delete {} unreferenced {} ({} bytes){} under {}? [y/N] ",
        plan.orphans.len(),
        crate::render::noun(plan.orphans.len() as u64, "file"),
        plan.orphan_bytes(),
        if plan.empty_dirs.is_empty() {
            String::new()
        } else {
            format!(" and {} empty incomplete checkpoint directories", plan.empty_dirs.len())
        },
        args.dir.display()
    );
    std::io::stderr().flush()?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    Ok(matches!(line.trim(), "y" | "Y" | "yes"))
}

/// `gc --json`'s document.
fn gc_json(args: &GcArgs, plan: &GcPlan, deleted: Option<(usize, u64)>) -> serde_json::Value {
    let orphans = |list: &[Orphan]| -> Vec<serde_json::Value> {
        list.iter()
            .map(|o| json!({"path": o.path.display().to_string(), "bytes": o.bytes, "reason": o.reason.as_str()}))
            .collect()
    };
    json!({
        "dir": args.dir.display().to_string(),
        "dry_run": args.dry_run,
        "snapshots": plan.snapshots,
        "referenced_files": plan.referenced,
        "orphans": orphans(&plan.orphans),
        "orphan_bytes": plan.orphan_bytes(),
        "too_young": orphans(&plan.too_young),
        "unreadable": plan.unreadable.iter().map(|(p, e)| json!({"path": p.display().to_string(), "error": e})).collect::<Vec<_>>(),
        "held_back": orphans(&plan.held_back),
        "skipped": plan.skipped.iter().map(|(p, why)| json!({"path": p.display().to_string(), "reason": why})).collect::<Vec<_>>(),
        "empty_dirs": plan.empty_dirs.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
        "deleted_files": deleted.map(|d| d.0),
        "deleted_bytes": deleted.map(|d| d.1),
    })
}

/// `gc`'s text: one line per file found, the warnings, and a summary line.
fn gc_text(args: &GcArgs, plan: &GcPlan, deleted: Option<(usize, u64)>) -> Result<()> {
    let bytes = plan.orphan_bytes();
    for o in &plan.orphans {
        outln!("{:>12} B  {}  ({})", o.bytes, o.path.display(), o.reason.as_str());
    }
    for d in &plan.empty_dirs {
        outln!("{:>12} B  {}/  (empty incomplete checkpoint directory)", 0, d.display());
    }
    for o in &plan.too_young {
        outln!(
            "{:>12} B  {}  ({}; younger than --min-age, left alone)",
            o.bytes,
            o.path.display(),
            o.reason.as_str()
        );
    }
    if !plan.held_back.is_empty() {
        outln!(
            "warning: {} unreferenced shared files left alone while the unreadable snapshots below might reference them",
            plan.held_back.len()
        );
    }
    for (p, why) in &plan.skipped {
        outln!("warning: {}: left alone: {why}", p.display());
    }
    for (p, e) in &plan.unreadable {
        outln!(
            "warning: {}: unreadable _metadata, its directory is left alone: {e}",
            p.display()
        );
    }
    outln!(
        "{} {} {}; {} ({bytes} bytes){}{}",
        crate::render::count(plan.snapshots as u64, "complete snapshot"),
        if plan.snapshots == 1 { "references" } else { "reference" },
        crate::render::count(plan.referenced as u64, "file"),
        crate::render::count(plan.orphans.len() as u64, "unreferenced file"),
        if plan.too_young.is_empty() {
            String::new()
        } else {
            format!(", {} more younger than --min-age", plan.too_young.len())
        },
        match deleted {
            Some((n, b)) => format!(
                "; deleted {} ({b} bytes){}",
                crate::render::count(n as u64, "file"),
                if plan.empty_dirs.is_empty() {
                    String::new()
                } else {
                    format!(
                        " and {}",
                        crate::render::count(plan.empty_dirs.len() as u64, "empty checkpoint directory")
                    )
                }
            ),
            None if args.dry_run => "; dry run, nothing deleted".to_string(),
            None if plan.orphans.is_empty() => String::new(),
            None => "; nothing deleted".to_string(),
        }
    );
    Ok(())
}
