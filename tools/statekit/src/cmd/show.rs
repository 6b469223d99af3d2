//! `statekit show`: the library's [`Description`] of a snapshot (`statekit_snapshot::describe`),
//! rendered as text, or as JSON by `serde_json` (`--json`).

use super::changelog::{self, summary_text};
use super::inspect::FlinkArgs;
use anyhow::Result;
use clap::Args;
use statekit_format::SnapshotFormat;
use statekit_snapshot::describe::{kind_name, OperatorDescription, SubtaskDescription};
use statekit_snapshot::Description;
use std::path::PathBuf;
use std::process::ExitCode;

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

/// `statekit show`.
pub fn show(args: ShowArgs) -> Result<ExitCode> {
    if changelog::is_log_file(&args.path) {
        anyhow::bail!(
            "{} is a changelog log file, not a snapshot: check it with `statekit verify`, list its records with `statekit dump --changes`",
            args.path.display()
        );
    }
    let reader = super::open_snapshot(&args.path, &args.flink.options())?;
    let d = statekit_snapshot::describe(&reader);
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&d)?);
        return Ok(ExitCode::SUCCESS);
    }
    outln!("{}", header(&d));
    for o in &d.operators {
        operator_text(&d, o, args.key_groups)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The first line: kind, id, job, format, number of operators.
fn header(d: &Description) -> String {
    let format = match (&d.flink, d.snapshot_format) {
        (Some(f), _) => format!("{}; restores into {}", f.label, d.restores_into),
        (None, SnapshotFormat::Canonical) => "format canonical v1".to_string(),
        (None, SnapshotFormat::Native) => format!(
            "format {}: the backend's own files; restores into {} only",
            d.format, d.restores_into
        ),
        (None, SnapshotFormat::Changelog) => format!(
            "format {}: materializations plus a log tail; restores into {}",
            d.format, d.restores_into
        ),
    };
    let job = if d.flink.is_some() && d.job_id.bytes().all(|b| b == b'0') {
        "(not stored in Flink's _metadata)".to_string()
    } else {
        d.job_id.clone()
    };
    format!(
        "{} {} of job {job} ({format}, {} operators)",
        kind_name(d.kind),
        d.checkpoint_id,
        d.operators.len()
    )
}

/// One operator: its line, a uid warning, its states and its subtasks.
fn operator_text(d: &Description, o: &OperatorDescription, key_groups: bool) -> Result<()> {
    outln!(
        "\noperator {:?}  id {}  parallelism {}/{}{}",
        o.uid,
        o.operator_id,
        o.parallelism,
        o.max_parallelism,
        if o.finished { "  FINISHED" } else { "" }
    );
    let uid_not_stored = d
        .flink
        .as_ref()
        .is_some_and(|f| f.operators_without_known_uid.contains(&o.operator_id));
    if uid_not_stored {
        outln!(
            "  uid not stored (Flink before 2.0 keeps operator ids only): name it with --flink-uid UID, or use the id"
        );
    } else if o.uid_looks_generated {
        outln!(
            "  warning: uid {:?} looks auto-generated; set an explicit uid so state survives program changes",
            o.uid
        );
    }
    if o.key_group_scheme.as_deref() == Some("flink") {
        outln!("  key-group scheme flink: keys in the groups Flink's murmurHash(key.hashCode()) % max parallelism gives, kept from the snapshot this was converted from");
    }
    states_text(o)?;
    for s in &o.subtasks {
        subtask_text(s, key_groups)?;
    }
    if let Some(total) = o.changelog.as_ref().filter(|_| o.subtasks.len() > 1) {
        outln!("  changelog total (each file and change set once):");
        outln!("{}", summary_text(total, "      "));
    }
    Ok(())
}

/// The keyed states with their sizes (and for a changelog operator, what the tail adds),
/// then the operator states.
fn states_text(o: &OperatorDescription) -> Result<()> {
    let (entries_word, approx) = match (o.is_native(), o.entries_scaled) {
        (true, _) => ("keys", "~"),
        (false, true) => ("entries", "~"),
        (false, false) => ("entries", ""),
    };
    let (tail_records, tail_bytes) = (o.tail_change_records.unwrap_or(0), o.tail_bytes.unwrap_or(0));
    let tail_mark = if o.changelog.is_some() && tail_records > 0 {
        " + tail"
    } else {
        ""
    };
    if o.changelog.is_some() {
        outln!(
            "  changelog: entries below are the materializations' ({}); the tail adds {} ({tail_bytes} B) of all states, replayed on restore: at most {} entries after replay (estimated: a change may add, update or remove an entry)",
            if approx.is_empty() { "exact" } else { "estimated where a rescale split a part" },
            crate::render::count(tail_records, "change record"),
            o.entries_all_states.saturating_add(tail_records)
        );
    }
    for s in &o.keyed_states {
        let uk = s
            .user_key
            .as_ref()
            .map(|t| format!(" user-key {t}"))
            .unwrap_or_default();
        let ttl = crate::render::ttl_text(s.ttl_ms);
        let (entries, bytes) = (s.entries.unwrap_or(0), s.raw_bytes.unwrap_or(0));
        outln!(
            "  keyed {:<16} {:<11} {approx}{entries:>10} {entries_word} {approx}{bytes:>12} B{tail_mark}  key {} ns {}{uk} value {}{ttl}",
            s.name,
            s.kind,
            s.key,
            s.namespace,
            s.value
        );
    }
    for s in &o.operator_states {
        outln!("  operator-state {:<16} {:<11} value {}", s.name, s.mode, s.value);
    }
    Ok(())
}

/// One subtask's line (sizes and what its keyed state is made of), its changelog summary,
/// and with `key_groups` its size per key group.
fn subtask_text(s: &SubtaskDescription, key_groups: bool) -> Result<()> {
    let ob = s.operator_file.as_ref().map_or(0, |f| f.bytes);
    let kg_summary = match (&s.changelog, &s.native, &s.key_groups_with_data) {
        (Some(c), _, _) => format!("  changelog: log {}, materialization {}", c.log, c.materialization_id),
        (None, Some(n), _) => format!(
            "  native: {} files, {} B uploaded for checkpoint {}, {} files shared with other snapshots",
            n.files, n.uploaded_bytes, n.checkpoint_id, n.shared_files
        ),
        (None, None, Some(groups)) if !groups.is_empty() => {
            let sizes: Vec<u64> = groups.iter().map(|g| g.bytes).collect();
            let max = sizes.iter().copied().max().unwrap_or(0);
            let mean = sizes.iter().copied().fold(0, u64::saturating_add) / sizes.len() as u64;
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
    outln!(
        "  subtask {:>3} key groups {:<12} keyed {:>10} B  operator {ob:>8} B{}{kg_summary}",
        s.index,
        s.key_groups.to_string(),
        s.keyed_bytes,
        if s.finished { "  finished" } else { "" }
    );
    if let Some(c) = s.changelog.as_ref() {
        outln!("{}", summary_text(&c.summary, "      "));
    }
    if key_groups {
        key_groups_text(s)?;
    }
    Ok(())
}

/// `show --key-groups`: a subtask's bytes (and entries) per key group, with bars.
fn key_groups_text(s: &SubtaskDescription) -> Result<()> {
    let bar = |b: u64, max: u64| "#".repeat((b.saturating_mul(40).div_ceil(max)) as usize);
    if let Some(n) = s.native.as_ref() {
        let per = &n.estimated_bytes_per_key_group;
        let max = per.iter().map(|g| g.bytes).max().unwrap_or(1).max(1);
        for g in per {
            outln!(
                "      kg {:>5} ~{:>9} B (estimate)  {}",
                g.key_group,
                g.bytes,
                bar(g.bytes, max)
            );
        }
    }
    if let Some(c) = s.changelog.as_ref() {
        // The tail's key groups are in the log files' indexes, not in `_metadata`.
        let per = &c.materialized_key_groups;
        let max = per.iter().map(|g| g.bytes).max().unwrap_or(1).max(1);
        for g in per {
            outln!(
                "      kg {:>5} {:>10} B {:>8} entries (materialized)  {}",
                g.key_group,
                g.bytes,
                g.entries,
                bar(g.bytes, max)
            );
        }
    }
    if let Some(per) = &s.key_groups_with_data {
        let max = per.iter().map(|g| g.bytes).max().unwrap_or(1).max(1);
        for g in per {
            outln!(
                "      kg {:>5} {:>10} B {:>8} entries  {}",
                g.key_group,
                g.bytes,
                g.entries,
                bar(g.bytes, max)
            );
        }
    }
    Ok(())
}
