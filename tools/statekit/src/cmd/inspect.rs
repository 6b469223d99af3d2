//! `ls`, `inspect` (the arguments of the `statekit-inspector` crate's terminal UI), and the
//! options `show`, `dump`, `verify`, `convert` and `rewrite` share for Apache Flink snapshots
//! ([`FlinkArgs`]).

use anyhow::Result;
use clap::Args;
use serde_json::json;
use statekit_format::SnapshotKind;
use statekit_snapshot::find_snapshots;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `statekit ls`.
#[derive(Args, Debug)]
pub struct LsArgs {
    /// Directory to search (a checkpoint base directory, a savepoint directory, …).
    pub dir: PathBuf,
    /// Order: `kind` (checkpoints per job by id — chk-8 before chk-10 — then savepoints by
    /// time), `id`, `time` (oldest first) or `path`.
    #[arg(long, value_enum, default_value = "kind")]
    pub sort: LsSort,
    /// Only the snapshots of this job (its 32-hex-digit id, as in `<dir>/<job id>/chk-N`).
    #[arg(long, value_name = "JOB_ID")]
    pub job: Option<String>,
    /// Also read and check every complete snapshot's data (as `statekit verify`): its status
    /// becomes `ok` or `BROKEN` instead of `not verified`; exit 1 if one is broken.
    #[arg(long)]
    pub verify: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// How `statekit ls` orders what it found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LsSort {
    /// Checkpoints per job directory by id, then savepoints by time.
    Kind,
    /// By checkpoint id (a `chk-N` directory without `_metadata` by its N).
    Id,
    /// By the time the snapshot was taken, oldest first (unknown times last).
    Time,
    /// By path.
    Path,
}

/// The checkpoint id of a found snapshot: its metadata's, else the N of its `chk-N` name.
fn found_id(f: &statekit_snapshot::FoundSnapshot) -> Option<u64> {
    f.meta.as_ref().map(|m| m.checkpoint_id).or_else(|| {
        f.path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix("chk-"))
            .and_then(|n| n.parse().ok())
    })
}

/// Orders (and with `job`, filters) what `ls` found.
fn arrange(
    mut found: Vec<statekit_snapshot::FoundSnapshot>,
    sort: LsSort,
    job: Option<&str>,
) -> Vec<statekit_snapshot::FoundSnapshot> {
    if let Some(job) = job {
        found.retain(|f| {
            f.meta.as_ref().is_some_and(|m| m.job_id == job)
                || f.path.components().any(|c| c.as_os_str() == std::ffi::OsStr::new(job))
        });
    }
    let is_savepoint =
        |f: &statekit_snapshot::FoundSnapshot| f.meta.as_ref().is_some_and(|m| m.kind == SnapshotKind::Savepoint);
    let time = |f: &statekit_snapshot::FoundSnapshot| f.meta.as_ref().map_or(i64::MAX, |m| m.timestamp_ms);
    match sort {
        LsSort::Path => found.sort_by(|a, b| a.path.cmp(&b.path)),
        LsSort::Id => found.sort_by_key(|f| (found_id(f).unwrap_or(u64::MAX), f.path.clone())),
        LsSort::Time => found.sort_by_key(|f| (time(f), f.path.clone())),
        LsSort::Kind => found.sort_by_key(|f| {
            if is_savepoint(f) {
                (1, std::path::PathBuf::new(), time(f), 0, f.path.clone())
            } else {
                let job = f.path.parent().map(std::path::Path::to_path_buf).unwrap_or_default();
                (0, job, 0, found_id(f).unwrap_or(u64::MAX), f.path.clone())
            }
        }),
    }
    found
}

/// Options for Apache Flink snapshots.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct FlinkArgs {
    /// A uid of the Flink job (repeatable): Flink before 2.0 stores only operator ids, so an
    /// operator whose id is this uid's hash is shown by it.
    #[arg(long = "flink-uid", value_name = "UID")]
    pub uids: Vec<String>,
    /// Re-root absolute paths of a Flink checkpoint that was moved: `OLD=NEW` prefixes
    /// (repeatable). Files are also looked for beside `_metadata` and in the job directory.
    /// A checkpoint's files are read only below its job directory, its job's changelog
    /// directory (`<job id>/dstl/`) near it, or a `NEW` named here (`/x=/x` names `/x` as
    /// it is); a savepoint's only inside its own directory.
    #[arg(long = "flink-root", value_name = "OLD=NEW", value_parser = parse_root)]
    pub roots: Vec<(String, String)>,
}

impl FlinkArgs {
    /// As the library's options to open a snapshot with.
    pub fn options(&self) -> statekit_snapshot::OpenOptions {
        statekit_snapshot::OpenOptions {
            uids: self.uids.clone(),
            roots: self.roots.clone(),
            ..Default::default()
        }
    }

    /// As [`FlinkArgs::options`], the states' schemas read while opening (what a Flink
    /// snapshot's state streams declare beyond `_metadata`).
    pub fn with_schema(&self) -> statekit_snapshot::OpenOptions {
        statekit_snapshot::OpenOptions {
            state_schema: true,
            ..self.options()
        }
    }
}

fn parse_root(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((a, b)) if !a.is_empty() && !b.is_empty() => Ok((a.to_string(), b.to_string())),
        _ => Err(format!("{s:?}: expected OLD=NEW")),
    }
}

/// The labels `ls`, `verify` and the inspector show (the library's).
pub use statekit_snapshot::describe::{format_label, kind_name};

/// `YYYY-MM-DDTHH:MM:SSZ` for milliseconds since the epoch (the library's).
pub use statekit_core::text::utc_time;

/// What a path names, and the status words `ls` and the inspector share (the inspector's).
pub(crate) use statekit_inspector::open::{status, status_word, verify_status};
use statekit_inspector::Problems;

/// Arguments of `statekit inspect`.
#[derive(Args, Debug)]
pub struct InspectArgs {
    /// A snapshot directory, its `_metadata` file, or a directory to search for snapshots.
    pub path: PathBuf,
    /// Open straight into the differences of PATH (old) and this snapshot (new), as
    /// `statekit diff PATH B` finds them.
    #[arg(long, value_name = "B")]
    pub diff: Option<PathBuf>,
    /// For Apache Flink snapshots: `--flink-uid` names operators stored by id.
    #[command(flatten)]
    pub flink: FlinkArgs,
}

/// `statekit inspect`: the inspector ([`statekit_inspector::run`]) on this terminal.
pub fn inspect(args: InspectArgs) -> Result<ExitCode> {
    let options = statekit_inspector::InspectOptions {
        path: args.path,
        diff: args.diff,
        open: args.flink.options(),
    };
    statekit_inspector::run(&options)?;
    Ok(ExitCode::SUCCESS)
}

/// `statekit ls`.
pub fn ls(args: LsArgs) -> Result<ExitCode> {
    let base = super::location(&args.dir)?;
    let found = match &base {
        statekit_core::location::Location::Local(dir) => {
            if !dir.is_dir() {
                anyhow::bail!("{}: not a directory", dir.display());
            }
            find_snapshots(dir, 4)
        }
        stored => statekit_snapshot::find_snapshots_at(stored, 4)?,
    };
    let found = arrange(found, args.sort, args.job.as_deref());
    // What killed statekit runs (convert, rewrite, import, export) left under the directory.
    let leftovers = match &base {
        statekit_core::location::Location::Local(dir) => statekit_checkpoint::find_dead_leftovers(dir, 4),
        _ => Vec::new(),
    };
    let progress = args
        .verify
        .then(|| crate::progress::Progress::counter("verifying", "snapshots"));
    let verified: Vec<Option<Result<(), Problems>>> = found
        .iter()
        .map(|f| {
            let v = (args.verify && f.complete).then(|| verify_status(&f.path));
            if let Some(p) = &progress {
                p.inc(1);
            }
            v
        })
        .collect();
    drop(progress);
    let any_broken = found
        .iter()
        .zip(&verified)
        .any(|(f, v)| status_word(f.complete, f.is_broken(), v.as_ref()) == status::BROKEN);
    if args.json {
        ls_json(&found, &verified, &leftovers)?;
    } else {
        ls_text(&found, &verified, &leftovers, &base)?;
    }
    Ok(if args.verify && any_broken {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// `ls --json`: one object per snapshot found (with its verification, when one ran), then
/// one per leftover.
fn ls_json(
    found: &[statekit_snapshot::FoundSnapshot],
    verified: &[Option<Result<(), Problems>>],
    leftovers: &[statekit_core::temp::Leftover],
) -> Result<()> {
    let items: Vec<_> = found
        .iter()
        .zip(verified)
        .map(|(f, v)| {
            json!({
                "status": status_word(f.complete, f.is_broken(), v.as_ref()),
                "verified": v.is_some(),
                "verify_problems": v.as_ref().and_then(|r| r.as_ref().err()).map(|e| e.lines().collect::<Vec<_>>()),
                "path": f.path.display().to_string(),
                "kind": f.meta.as_ref().map(|m| kind_name(m.kind)),
                "id": f.meta.as_ref().map(|m| m.checkpoint_id),
                "format": f.meta.as_ref().map(format_label),
                "timestamp_ms": f.meta.as_ref().map(|m| m.timestamp_ms),
                "time": f.meta.as_ref().map(|m| utc_time(m.timestamp_ms)),
                "bytes": f.bytes,
                "own_bytes": f.own_bytes,
                "dir_bytes": f.dir_bytes,
                "complete": f.complete,
                "problem": f.problem,
            })
        })
        .chain(leftovers.iter().map(|l| {
            json!({
                "status": status::LEFTOVER,
                "verified": false,
                "path": l.path.display().to_string(),
                "verify_problems": null,
                "kind": "leftover",
                "id": null,
                "format": null,
                "timestamp_ms": null,
                "time": null,
                "bytes": l.bytes,
                "own_bytes": l.bytes,
                "dir_bytes": l.bytes,
                "complete": false,
                "problem": LEFTOVER_PROBLEM,
            })
        }))
        .collect();
    outln!("{}", serde_json::to_string_pretty(&items)?);
    Ok(())
}

/// `ls`'s table: one row per snapshot found (and its problems), then one per leftover.
fn ls_text(
    found: &[statekit_snapshot::FoundSnapshot],
    verified: &[Option<Result<(), Problems>>],
    leftovers: &[statekit_core::temp::Leftover],
    base: &statekit_core::location::Location,
) -> Result<()> {
    outln!(
        "{:<11} {:>6} {:<15} {:<20} {:>12} {:>12} {:<12} PATH",
        "KIND",
        "ID",
        "FORMAT",
        "TIME (UTC)",
        "BYTES",
        "OWN BYTES",
        "STATUS"
    );
    for (f, v) in found.iter().zip(verified) {
        let (kind, id, time) = match &f.meta {
            Some(m) => (kind_name(m.kind), m.checkpoint_id.to_string(), utc_time(m.timestamp_ms)),
            None => ("checkpoint", "-".to_string(), "-".to_string()),
        };
        let format = f.meta.as_ref().map(format_label).unwrap_or_else(|| "-".into());
        let status = status_word(f.complete, f.is_broken(), v.as_ref());
        let status = status_cell(status);
        outln!(
            "{kind:<11} {id:>6} {format:<15} {time:<20} {:>12} {:>12} {status} {}",
            f.bytes,
            f.own_bytes,
            f.path.display()
        );
        if let Some(p) = &f.problem {
            if f.is_broken() {
                outln!("{:<11} problem: {p}", "");
            }
        }
        if let Some(Err(problems)) = v {
            for p in problems.lines() {
                outln!("{:<11} problem: {p}", "");
            }
        }
    }
    for l in leftovers {
        let status = status_cell(status::LEFTOVER);
        outln!(
            "{:<11} {:>6} {:<15} {:<20} {:>12} {:>12} {status} {}",
            "leftover",
            "-",
            "-",
            "-",
            l.bytes,
            l.bytes,
            l.path.display()
        );
    }
    if !leftovers.is_empty() {
        outln!(
            "{} leftover(s): {LEFTOVER_PROBLEM}; `statekit gc {base}` removes them",
            leftovers.len()
        );
    }
    if found.is_empty() && leftovers.is_empty() {
        outln!("(no checkpoints or savepoints under {base})");
    }
    Ok(())
}

/// `ls`'s STATUS column: the word coloured, then padded by hand (escape codes take no
/// columns).
fn status_cell(word: &str) -> String {
    format!(
        "{}{}",
        crate::color::status(word, crate::color::Stream::Out),
        " ".repeat(12usize.saturating_sub(word.len()))
    )
}

/// What `ls` says of a [`status::LEFTOVER`].
const LEFTOVER_PROBLEM: &str =
    "temporary files of a statekit run (convert, rewrite, import, export) whose process is gone";
