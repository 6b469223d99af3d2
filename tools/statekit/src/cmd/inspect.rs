//! `ls`, `show`.

use super::changelog::{self, Summary};
use anyhow::Result;
use clap::Args;
use serde_json::json;
use statekit_checkpoint::has_metadata;
use statekit_core::uid_looks_auto_generated;
use statekit_format::{FileScope, OperatorMetadata, SnapshotFormat, SnapshotKind, SnapshotMetadata};
use statekit_snapshot::find_snapshots;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
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

/// Arguments of `statekit show`.
#[derive(Args, Debug)]
pub struct ShowArgs {
    /// A snapshot directory or its `_metadata` file.
    pub path: PathBuf,
    /// List every key group's size (default: a per-subtask summary).
    #[arg(long)]
    pub key_groups: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Apache Flink snapshots: uids to name operators by, moved roots.
    #[command(flatten)]
    pub flink: FlinkArgs,
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
    /// As the library's options.
    pub fn options(&self) -> statekit_flink::FlinkOpenOptions {
        statekit_flink::FlinkOpenOptions {
            uids: self.uids.clone(),
            roots: self.roots.clone(),
        }
    }
}

fn parse_root(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((a, b)) if !a.is_empty() && !b.is_empty() => Ok((a.to_string(), b.to_string())),
        _ => Err(format!("{s:?}: expected OLD=NEW")),
    }
}

/// Whether `m` was mapped from an Apache Flink snapshot.
fn is_flink(m: &SnapshotMetadata) -> bool {
    m.properties.contains_key(statekit_flink::METADATA_VERSION_PROPERTY)
}

/// `Apache Flink savepoint, _metadata v4, CANONICAL`-style label when `m` is a Flink snapshot.
pub(crate) fn flink_label(m: &SnapshotMetadata) -> Option<String> {
    let v = m.properties.get(statekit_flink::METADATA_VERSION_PROPERTY)?;
    let mut s = format!("Apache Flink _metadata v{v}");
    if let Some(f) = m.properties.get("flink.savepoint_format") {
        s.push_str(&format!(", {f}"));
    }
    if let Some(k) = m.properties.get("flink.keyed_handles") {
        s.push_str(&format!(", keyed state as {k}"));
    }
    Some(s)
}

/// Entries and raw bytes of each keyed state, summed over subtasks (from `_metadata` only).
/// For native subtasks these are RocksDB's estimates (stored keys, table-file bytes); for
/// changelog subtasks what their materializations hold (the tail is not counted).
pub(crate) fn state_totals(o: &OperatorMetadata) -> BTreeMap<String, (u64, u64)> {
    let mut m: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for st in &o.subtasks {
        for s in st.keyed_stats.iter().flat_map(|k| &k.states) {
            let e = m.entry(s.name.clone()).or_default();
            e.0 += s.entries;
            e.1 += s.raw_bytes;
        }
        for s in st.native.iter().flat_map(|n| &n.stats.states) {
            let e = m.entry(s.name.clone()).or_default();
            e.0 += s.estimated_keys;
            e.1 += s.bytes;
        }
    }
    let (materialized, _) = changelog::materialized_state_totals(o);
    for (name, (entries, bytes)) in materialized {
        let e = m.entry(name).or_default();
        e.0 += entries;
        e.1 += bytes;
    }
    m
}

/// `canonical-v1`, or `native-<backend>` when some subtask holds native files.
pub fn format_label(m: &SnapshotMetadata) -> String {
    if is_flink(m) {
        return format!("flink-{}", m.format.as_str());
    }
    match m.format {
        SnapshotFormat::Canonical => "canonical-v1".to_string(),
        SnapshotFormat::Native => {
            let backend = m
                .operators
                .iter()
                .flat_map(|o| &o.subtasks)
                .find_map(|s| s.native.as_ref())
                .map(|n| n.backend.clone())
                .unwrap_or_else(|| "?".into());
            format!("native-{backend}")
        }
        SnapshotFormat::Changelog => "changelog-v1".to_string(),
    }
}

/// `YYYY-MM-DDTHH:MM:SSZ` for milliseconds since the epoch.
pub fn utc_time(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// True when `path` names a snapshot: a directory with `_metadata`, or anything that is not a
/// directory (its `_metadata` file, or what the user meant as one).
pub(crate) fn is_snapshot_path(path: &Path) -> bool {
    has_metadata(path) || std::fs::metadata(path).is_ok_and(|m| !m.is_dir())
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
    let verified: Vec<Option<Result<(), String>>> = found
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
        let items: Vec<_> = found
            .iter()
            .zip(&verified)
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
    } else {
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
        for (f, v) in found.iter().zip(&verified) {
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
        for l in &leftovers {
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
    }
    Ok(if args.verify && any_broken {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// The words `ls` and the inspector use for a snapshot's status.
pub mod status {
    /// A `chk-N` directory without `_metadata`: a checkpoint that never completed.
    pub const INCOMPLETE: &str = "INCOMPLETE";
    /// `_metadata` does not read, or verification found problems.
    pub const BROKEN: &str = "BROKEN";
    /// `_metadata` reads; the data files were not checked (`statekit verify`, `ls --verify`).
    pub const NOT_VERIFIED: &str = "not verified";
    /// Every byte was read and checked.
    pub const OK: &str = "ok";
    /// A temporary a killed statekit run left behind (not a snapshot).
    pub const LEFTOVER: &str = "LEFTOVER";
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

/// The status of a found snapshot: `verified` is the outcome of a verification, when one ran
/// (`Ok(())`: no problem; `Err`: the problems).
pub(crate) fn status_word(complete: bool, broken: bool, verified: Option<&Result<(), String>>) -> &'static str {
    match (complete, broken, verified) {
        (false, true, _) => status::BROKEN,
        (false, false, _) => status::INCOMPLETE,
        (true, _, None) => status::NOT_VERIFIED,
        (true, _, Some(Ok(()))) => status::OK,
        (true, _, Some(Err(_))) => status::BROKEN,
    }
}

/// Verifies the snapshot at `path` (any location): `Ok(())` when every byte checks, else the
/// problems, one per line.
pub(crate) fn verify_status(path: &Path) -> Result<(), String> {
    let location = super::location(path).map_err(|e| format!("{e:#}"))?;
    let (_, v) = statekit_snapshot::verify_location(&location).map_err(|e| e.to_string())?;
    if v.problems.is_empty() {
        Ok(())
    } else {
        Err(v
            .problems
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n"))
    }
}

/// Which backends a snapshot restores into.
fn restores_into(m: &SnapshotMetadata) -> String {
    if is_flink(m) {
        return match m.format {
            SnapshotFormat::Canonical => "any Flink state backend".into(),
            SnapshotFormat::Native => "Flink's RocksDB backend".into(),
            SnapshotFormat::Changelog => "Flink's changelog backend".into(),
        };
    }
    match m.format {
        SnapshotFormat::Canonical => "any backend".into(),
        SnapshotFormat::Native => {
            let backends: std::collections::BTreeSet<&str> = m
                .operators
                .iter()
                .flat_map(|o| &o.subtasks)
                .filter_map(|s| s.native.as_ref().map(|n| n.backend.as_str()))
                .collect();
            backends.into_iter().collect::<Vec<_>>().join(", ")
        }
        SnapshotFormat::Changelog => "any backend (materializations + log replay)".into(),
    }
}

pub(crate) fn kind_name(k: SnapshotKind) -> &'static str {
    match k {
        SnapshotKind::Checkpoint => "checkpoint",
        SnapshotKind::Savepoint => "savepoint",
    }
}

pub(crate) fn is_changelog(o: &OperatorMetadata) -> bool {
    o.subtasks.iter().any(|s| s.changelog.is_some())
}

/// What `_metadata` knows of a changelog operator's state beyond its materializations: the
/// tail's change records and bytes over all states (a restore replays them; they are not
/// split by state in `_metadata`). `(0, 0)` for other operators.
pub(crate) fn changelog_tail(o: &OperatorMetadata) -> (u64, u64) {
    o.subtasks
        .iter()
        .filter_map(|s| s.changelog.as_ref())
        .fold((0, 0), |(r, b), h| (r + h.tail_records(), b + h.tail_bytes()))
}

/// `statekit show`.
pub fn show(args: ShowArgs) -> Result<ExitCode> {
    if changelog::is_log_file(&args.path) {
        anyhow::bail!(
            "{} is a changelog log file, not a snapshot: check it with `statekit verify`, list its records with `statekit dump --changes`",
            args.path.display()
        );
    }
    let reader = super::open_reader(&args.path, &args.flink.options())?;
    let m = reader.metadata();
    let flink = reader.flink();
    if args.json {
        let ops: Vec<_> = m
            .operators
            .iter()
            .map(|o| {
                let totals = state_totals(o);
                json!({
                    "uid": o.uid,
                    "operator_id": o.operator_id.to_string(),
                    "parallelism": o.parallelism,
                    "max_parallelism": o.max_parallelism,
                    "finished": o.finished,
                    "uid_looks_generated": uid_looks_auto_generated(&o.uid),
                    "keyed_states": o.keyed_states.iter().map(|s| json!({
                        "name": s.name, "kind": s.kind.to_string(), "key": s.key_schema.to_string(),
                        "namespace": s.namespace_schema.to_string(), "value": s.value_schema.to_string(),
                        "user_key": s.user_key_schema.as_ref().map(|t| t.to_string()),
                        "ttl_ms": s.ttl.map(|t| t.ttl_ms),
                        "entries": totals.get(&s.name).map(|t| t.0),
                        "raw_bytes": totals.get(&s.name).map(|t| t.1),
                        // A changelog operator: `entries` are the materializations'; the tail's
                        // changes (all states) come on top, so the count is an estimate.
                        "entries_estimated": is_changelog(o) && changelog_tail(o).0 > 0,
                    })).collect::<Vec<_>>(),
                    "tail_change_records": is_changelog(o).then(|| changelog_tail(o).0),
                    "tail_bytes": is_changelog(o).then(|| changelog_tail(o).1),
                    "operator_states": o.operator_states.iter().map(|s| json!({
                        "name": s.name, "mode": s.mode.to_string(), "value": s.value_schema.to_string(),
                    })).collect::<Vec<_>>(),
                    "subtasks": o.subtasks.iter().map(|s| json!({
                        "index": s.index, "key_groups": crate::render::key_groups_json(s.key_groups), "finished": s.finished,
                        "keyed_file": s.keyed.as_ref().map(|f| json!({"path": f.path, "bytes": f.size})),
                        "operator_file": s.operator.as_ref().map(|f| json!({"path": f.path, "bytes": f.size})),
                        "entries": s.keyed_stats.as_ref().map(|k| k.entries),
                        "native": s.native.as_ref().map(|n| json!({
                            "backend": n.backend, "layout": n.layout, "backend_id": n.backend_id,
                            "checkpoint_id": n.checkpoint_id, "files": n.files.len(), "bytes": n.total_bytes(),
                            "uploaded_bytes": n.uploaded_bytes,
                            "shared_files": n.files.iter().filter(|f| f.file.scope != FileScope::Exclusive).count(),
                            "estimated_bytes_per_key_group": n.stats.key_groups.iter().map(|(kg, b)| json!({
                                "key_group": kg, "bytes": b,
                            })).collect::<Vec<_>>(),
                        })),
                        "changelog": s.changelog.as_ref().map(|h| changelog::subtask_json(s, h)),
                        "key_groups_with_data": s.keyed_stats.as_ref().map(|k| k.key_groups.iter().map(|g| json!({
                            "key_group": g.key_group, "bytes": g.stored_bytes, "entries": g.entries,
                        })).collect::<Vec<_>>()),
                    })).collect::<Vec<_>>(),
                    "changelog": is_changelog(o).then(|| Summary::of(&o.subtasks).json()),
                })
            })
            .collect();
        let all = m.operators.iter().flat_map(|o| &o.subtasks);
        let doc = json!({
            "kind": kind_name(m.kind), "checkpoint_id": m.checkpoint_id, "job_id": m.job_id,
            "timestamp_ms": m.timestamp_ms, "format": format_label(m),
            "restores_into": restores_into(m), "properties": m.properties, "operators": ops,
            "flink": flink.map(|f| json!({
                "metadata_version": f.metadata().version,
                "savepoint_format": f.metadata().properties.as_ref().and_then(|p| p.format.clone()),
                "snapshot_type": f.metadata().properties.as_ref().and_then(|p| p.name.clone()),
                "operators_without_known_uid": m.operators.iter()
                    .filter(|o| f.uid(&o.operator_id).is_none())
                    .map(|o| o.operator_id.to_string()).collect::<Vec<_>>(),
            })),
            "changelog": m.operators.iter().any(is_changelog).then(|| Summary::of(all).json()),
        });
        outln!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(ExitCode::SUCCESS);
    }
    let format = match m.format {
        _ if flink.is_some() => format!(
            "{}; restores into {}",
            flink_label(m).unwrap_or_default(),
            restores_into(m)
        ),
        SnapshotFormat::Canonical => "format canonical v1".to_string(),
        SnapshotFormat::Native => format!(
            "format {}: the backend's own files; restores into {} only",
            format_label(m),
            restores_into(m)
        ),
        SnapshotFormat::Changelog => format!(
            "format {}: materializations plus a log tail; restores into {}",
            format_label(m),
            restores_into(m)
        ),
    };
    let job = if flink.is_some() && m.job_id.bytes().all(|b| b == b'0') {
        "(not stored in Flink's _metadata)".to_string()
    } else {
        m.job_id.clone()
    };
    outln!(
        "{} {} of job {job} ({format}, {} operators)",
        kind_name(m.kind),
        m.checkpoint_id,
        m.operators.len()
    );
    for o in &m.operators {
        outln!(
            "\noperator {:?}  id {}  parallelism {}/{}{}",
            o.uid,
            o.operator_id,
            o.parallelism,
            o.max_parallelism,
            if o.finished { "  FINISHED" } else { "" }
        );
        if flink.is_some_and(|f| f.uid(&o.operator_id).is_none()) {
            outln!("  uid not stored (Flink before 2.0 keeps operator ids only): name it with --flink-uid UID, or use the id");
        } else if uid_looks_auto_generated(&o.uid) {
            outln!(
                "  warning: uid {:?} looks auto-generated; set an explicit uid so state survives program changes",
                o.uid
            );
        }
        let totals = state_totals(o);
        let native = o.subtasks.iter().any(|s| s.native.is_some());
        let narrowed = changelog::materialized_state_totals(o).1;
        let (entries_word, approx) = match (native, narrowed) {
            (true, _) => ("keys", "~"),
            (false, true) => ("entries", "~"),
            (false, false) => ("entries", ""),
        };
        let (tail_records, tail_bytes) = changelog_tail(o);
        let tail_mark = if is_changelog(o) && tail_records > 0 {
            " + tail"
        } else {
            ""
        };
        if is_changelog(o) {
            let materialized: u64 = totals.values().map(|t| t.0).sum();
            outln!(
                "  changelog: entries below are the materializations' ({}); the tail adds {} ({tail_bytes} B) of all states, replayed on restore: at most {} entries after replay (estimated: a change may add, update or remove an entry)",
                if approx.is_empty() { "exact" } else { "estimated where a rescale split a part" },
                crate::render::count(tail_records, "change record"),
                materialized + tail_records
            );
        }
        for s in &o.keyed_states {
            let uk = s
                .user_key_schema
                .as_ref()
                .map(|t| format!(" user-key {t}"))
                .unwrap_or_default();
            let ttl = crate::render::ttl_text(s.ttl.map(|t| t.ttl_ms));
            let (entries, bytes) = totals.get(&s.name).copied().unwrap_or_default();
            outln!(
                "  keyed {:<16} {:<11} {approx}{entries:>10} {entries_word} {approx}{bytes:>12} B{tail_mark}  key {} ns {}{uk} value {}{ttl}",
                s.name,
                s.kind.to_string(),
                s.key_schema,
                s.namespace_schema,
                s.value_schema
            );
        }
        for s in &o.operator_states {
            outln!(
                "  operator-state {:<16} {:<11} value {}",
                s.name,
                s.mode.to_string(),
                s.value_schema
            );
        }
        for s in &o.subtasks {
            let kb = s.keyed.as_ref().map_or(0, |f| f.size);
            let ob = s.operator.as_ref().map_or(0, |f| f.size);
            let kg_summary = match &s.keyed_stats {
                Some(k) if !k.key_groups.is_empty() => {
                    let sizes: Vec<u64> = k.key_groups.iter().map(|g| g.stored_bytes).collect();
                    let max = sizes.iter().copied().max().unwrap_or(0);
                    let mean = sizes.iter().sum::<u64>() / sizes.len() as u64;
                    format!(
                        "  {} of {} key groups hold data; bytes per key group min {} mean {mean} max {max}{}",
                        sizes.len(),
                        s.key_groups.len(),
                        sizes.iter().copied().min().unwrap_or(0),
                        if mean > 0 && max > 4 * mean { " (SKEWED)" } else { "" }
                    )
                }
                _ => String::new(),
            };
            let (kb, kg_summary) = match &s.native {
                Some(n) => {
                    let shared = n.files.iter().filter(|f| f.file.scope != FileScope::Exclusive).count();
                    (
                        n.total_bytes(),
                        format!(
                            "  native: {} files, {} B uploaded for checkpoint {}, {shared} files shared with other snapshots",
                            n.files.len(),
                            n.uploaded_bytes,
                            n.checkpoint_id
                        ),
                    )
                }
                None => (kb, kg_summary),
            };
            let (kb, kg_summary) = match &s.changelog {
                Some(h) => (
                    h.materialized_bytes() + h.tail_bytes(),
                    format!(
                        "  changelog: log {}, materialization {}",
                        statekit_changelog::LogId(h.log),
                        h.materialization_id
                    ),
                ),
                None => (kb, kg_summary),
            };
            outln!(
                "  subtask {:>3} key groups {:<12} keyed {kb:>10} B  operator {ob:>8} B{}{kg_summary}",
                s.index,
                s.key_groups.to_string(),
                if s.finished { "  finished" } else { "" }
            );
            if s.changelog.is_some() {
                outln!("{}", Summary::of([s]).text("      "));
            }
            if args.key_groups {
                if let Some(n) = &s.native {
                    let max = n.stats.key_groups.iter().map(|g| g.1).max().unwrap_or(1).max(1);
                    for (kg, b) in &n.stats.key_groups {
                        let bar = "#".repeat(((b * 40).div_ceil(max)) as usize);
                        outln!("      kg {kg:>5} ~{b:>9} B (estimate)  {bar}");
                    }
                }
                if let Some(h) = &s.changelog {
                    changelog_key_groups(s, h)?;
                }
                if let Some(k) = &s.keyed_stats {
                    let max = k.key_groups.iter().map(|g| g.stored_bytes).max().unwrap_or(1).max(1);
                    for g in &k.key_groups {
                        let bar = "#".repeat(((g.stored_bytes * 40).div_ceil(max)) as usize);
                        outln!(
                            "      kg {:>5} {:>10} B {:>8} entries  {bar}",
                            g.key_group,
                            g.stored_bytes,
                            g.entries
                        );
                    }
                }
            }
        }
        if is_changelog(o) && o.subtasks.len() > 1 {
            outln!("  changelog total (each file and change set once):");
            outln!("{}", Summary::of(&o.subtasks).text("      "));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `show --key-groups` of a changelog subtask: entries and bytes per key group its
/// materializations hold (the tail's key groups are in the log files' indexes, not in
/// `_metadata`).
fn changelog_key_groups(s: &statekit_format::SubtaskMetadata, h: &statekit_format::ChangelogKeyedHandle) -> Result<()> {
    let mut per: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    for part in &h.materialized {
        let range = part.key_groups.intersection(&s.key_groups);
        for g in part.stats.iter().flat_map(|st| &st.key_groups) {
            if range.contains(g.key_group) {
                let e = per.entry(g.key_group).or_default();
                e.0 += g.stored_bytes;
                e.1 += g.entries;
            }
        }
    }
    let max = per.values().map(|v| v.0).max().unwrap_or(1).max(1);
    for (kg, (bytes, entries)) in per {
        let bar = "#".repeat(((bytes * 40).div_ceil(max)) as usize);
        outln!("      kg {kg:>5} {bytes:>10} B {entries:>8} entries (materialized)  {bar}");
    }
    Ok(())
}
