//! `statekit dump`: decoded entries of one state.

use crate::render::{self, KeyFormat};
use anyhow::{bail, Result};
use clap::Args;
use serde_json::json;
use statekit_core::{
    KeyGroupRange, KeyedStateKind, OperatorStateData, OperatorStateDescriptor, StateDescriptor, StateError,
    UPPER_BOUND_MAX_PARALLELISM,
};
use statekit_format::OperatorMetadata;
use statekit_snapshot::cursor::{DamagedKeyGroup, EntryCursor, EntryFilter, EntryRef, Walked};
use statekit_snapshot::Snapshot;
use std::io::Write;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `statekit dump`.
#[derive(Args, Debug)]
#[command(after_help = "\
Entries go to standard output (text lines, or with --json one JSON array), the count to
standard error (`10 of 50 entries` when --limit cut it). A damaged block hides only its key
group: every other key group is dumped, then each damaged one is named with its file, offset
and field.

Exit status: 0 done, 1 damaged key groups were left out (the rest was dumped), 2 error.")]
pub struct DumpArgs {
    /// A snapshot directory or its `_metadata` file; with --changes also a log file
    /// (`*.skcl`).
    pub path: PathBuf,
    /// Operator uid (with --changes: only this operator's changes).
    #[arg(long, required_unless_present = "changes")]
    pub uid: Option<String>,
    /// State name (keyed or operator state; with --changes: only this state's records).
    #[arg(long, required_unless_present = "changes")]
    pub state: Option<String>,
    /// Only this key (text for string keys, a number for integer keys, hex for bytes).
    #[arg(long)]
    pub key: Option<String>,
    /// How to read --key.
    #[arg(long, value_enum, default_value_t = KeyFormat::Auto)]
    pub key_format: KeyFormat,
    /// Only these key groups: `N`, `A..B` (B excluded) or `A..=B`.
    #[arg(long, value_parser = parse_key_groups)]
    pub key_group: Option<KeyGroupRange>,
    /// At most this many entries (records with --changes).
    #[arg(long)]
    pub limit: Option<u64>,
    /// List the change records of a changelog checkpoint's tails in replay order (subtask,
    /// file, offset, sequence number, key group, state, operation, decoded key, namespace,
    /// user key and value), or of one log file, instead of the state.
    #[arg(long)]
    pub changes: bool,
    /// Print one JSON document: an array of entries.
    #[arg(long, conflicts_with = "jsonl")]
    pub json: bool,
    /// Print JSON lines: one entry object per line (for streaming into other tools).
    #[arg(long)]
    pub jsonl: bool,
    /// Apache Flink snapshots: uids to name operators by, moved roots (the only places
    /// outside a checkpoint's job directory its handles are read from).
    #[command(flatten)]
    pub flink: super::inspect::FlinkArgs,
}

/// `N`, `A..B` (B excluded) or `A..=B`.
pub(crate) fn parse_key_groups(s: &str) -> std::result::Result<KeyGroupRange, String> {
    let num = |t: &str| -> std::result::Result<u32, String> {
        let n: u32 = t
            .trim()
            .parse()
            .map_err(|_| format!("{s:?}: expected a key group N, A..B or A..=B"))?;
        if n >= UPPER_BOUND_MAX_PARALLELISM {
            return Err(format!("{s:?}: key groups are below {UPPER_BOUND_MAX_PARALLELISM}"));
        }
        Ok(n)
    };
    let r = if let Some((a, b)) = s.split_once("..=") {
        KeyGroupRange::new(num(a)?, num(b)?)
    } else if let Some((a, b)) = s.split_once("..") {
        let (a, b) = (num(a)?, num(b)?);
        if b == 0 {
            KeyGroupRange::EMPTY
        } else {
            KeyGroupRange::new(a, b - 1)
        }
    } else {
        let n = num(s)?;
        KeyGroupRange::new(n, n)
    };
    if r.is_empty() {
        return Err(format!("{s:?}: an empty key-group range"));
    }
    Ok(r)
}

/// `f` for each item, until it breaks or fails.
fn each<T>(
    items: impl IntoIterator<Item = T>,
    mut f: impl FnMut(T) -> Result<ControlFlow<()>, StateError>,
) -> Result<ControlFlow<()>, StateError> {
    for t in items {
        if f(t)?.is_break() {
            return Ok(ControlFlow::Break(()));
        }
    }
    Ok(ControlFlow::Continue(()))
}

pub(super) struct Out {
    json: bool,
    jsonl: bool,
    /// Entries written so far, on standard error when it is a terminal and standard output is
    /// not (a pipe or a file shows nothing of its own).
    progress: Option<crate::progress::Progress>,
    printed: u64,
    limit: u64,
    /// An entry was left out because of `--limit`.
    limited: bool,
    out: std::io::BufWriter<std::io::StdoutLock<'static>>,
}

impl Out {
    fn new(json: bool, jsonl: bool, limit: Option<u64>) -> Self {
        use std::io::IsTerminal;
        Out {
            json,
            jsonl,
            progress: (!std::io::stdout().is_terminal())
                .then(|| crate::progress::Progress::counter("dumping", "entries")),
            printed: 0,
            limit: limit.unwrap_or(u64::MAX),
            limited: false,
            out: std::io::BufWriter::new(std::io::stdout().lock()),
        }
    }

    /// Prints one entry; breaks once `--limit` entries were printed.
    fn emit(&mut self, text: String, json: serde_json::Value) -> Result<ControlFlow<()>, StateError> {
        if self.printed >= self.limit {
            self.limited = true;
            return Ok(ControlFlow::Break(()));
        }
        // The JSON array opens with its first element, so an error before any output
        // leaves standard output empty.
        let r = if self.jsonl {
            writeln!(self.out, "{json}")
        } else if self.json {
            let sep = if self.printed == 0 { "[\n" } else { ",\n" };
            write!(self.out, "{sep}  {json}")
        } else {
            writeln!(self.out, "{text}")
        };
        r.map_err(|e| StateError::io("standard output", e))?;
        self.printed += 1;
        if let Some(p) = &self.progress {
            p.inc(1);
        }
        Ok(ControlFlow::Continue(()))
    }

    /// Closes the JSON array, flushes, reports the count on standard error: `12 entries`,
    /// `10 of 50 entries` when `--limit` cut the output and the total is known (`total`),
    /// `10 entries (--limit reached; more follow)` when it is not.
    fn finish(mut self, what: &str, total: Option<u64>) -> Result<ExitCode> {
        if self.json {
            if self.printed == 0 {
                writeln!(self.out, "[]")?;
            } else {
                writeln!(self.out, "\n]")?;
            }
        }
        self.out.flush()?;
        self.progress = None;
        if !self.json && !self.jsonl {
            let noun = crate::render::noun(total.unwrap_or(self.printed), what);
            match total {
                Some(t) if self.limited && t > self.printed => eprintln!("{} of {t} {noun}", self.printed),
                _ if self.limited => eprintln!("{} {noun} (--limit reached; more follow)", self.printed),
                _ => eprintln!("{} {noun}", self.printed),
            }
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// `statekit dump --changes`.
fn dump_changes(args: &DumpArgs) -> Result<ExitCode> {
    let key = match (&args.key, &args.state) {
        (Some(k), Some(state)) => {
            let schema = super::changelog::key_schema_for(&args.path, args.uid.as_deref(), state)?;
            Some(render::parse_key(k, &schema, args.key_format)?)
        }
        (Some(_), None) => bail!("--key with --changes needs --state (the key is read by that state's key schema)"),
        (None, _) => None,
    };
    let filter = super::changelog::ChangeFilter {
        key_groups: args.key_group,
        state: args.state.clone(),
        key,
    };
    let mut out = Out::new(args.json, args.jsonl, args.limit);
    super::changelog::dump_changes(&args.path, args.uid.as_deref(), &filter, &mut |text, json| {
        Ok(out.emit(text, json)?.is_continue() && out.printed < out.limit)
    })?;
    out.finish("change record", None)
}

/// `statekit dump`.
pub fn dump(args: DumpArgs) -> Result<ExitCode> {
    if args.changes {
        return dump_changes(&args);
    }
    if super::changelog::is_log_file(&args.path) {
        bail!(
            "{} is a changelog log file, not a snapshot: list its records with --changes",
            args.path.display()
        );
    }
    let (Some(uid), Some(state)) = (args.uid.as_deref(), args.state.as_deref()) else {
        bail!("--uid and --state are required (or --changes)");
    };
    let reader = super::open_snapshot(&args.path, &args.flink.with_schema())?;
    let op = reader.operator(uid)?.clone();
    let out = Out::new(args.json, args.jsonl, args.limit);
    if let Some(desc) = op.keyed_states.iter().find(|d| d.name == state) {
        dump_keyed(&args, &reader, uid, &op, desc, out)
    } else if let Some(desc) = op.operator_states.iter().find(|d| d.name == state) {
        dump_operator_state(&args, &reader, uid, &op, desc, out)
    } else {
        let keyed: Vec<&str> = op.keyed_states.iter().map(|d| d.name.as_str()).collect();
        let opst: Vec<&str> = op.operator_states.iter().map(|d| d.name.as_str()).collect();
        bail!(
            "operator {:?} has no state {:?} (keyed states: {keyed:?}; operator states: {opst:?})",
            op.uid,
            state
        );
    }
}

/// `statekit dump` of a keyed state: the entries an [`EntryCursor`] walks, each damaged key
/// group named after them (exit 1).
fn dump_keyed(
    args: &DumpArgs,
    reader: &Snapshot,
    uid: &str,
    op: &OperatorMetadata,
    desc: &StateDescriptor,
    mut out: Out,
) -> Result<ExitCode> {
    let key = match &args.key {
        Some(k) => Some(render::parse_key(k, &desc.key_schema, args.key_format)?),
        None => None,
    };
    let filter = EntryFilter {
        key_groups: args.key_group,
        key,
        ..EntryFilter::default()
    };
    let mut cursor = EntryCursor::open(reader, uid, &desc.name, filter)?;
    let range = cursor.key_groups();
    // A changelog checkpoint: what the entries are made of, on standard error after them
    // (standard output stays entries only, for scripts and --json).
    let changelog_note = op.subtasks.iter().any(|st| st.keyed.changelog().is_some()).then(|| {
        let summary = super::changelog::Summary::of(
            op.subtasks
                .iter()
                .filter(|st| !st.key_groups.intersection(&range).is_empty()),
        );
        format!(
            "changelog checkpoint: operator {:?} as a restore sees it, materialization + tail replayed:\n{}",
            op.uid,
            summary.text("  ")
        )
    });
    // The whole state's entry count, when `_metadata` knows it (to say "10 of 50").
    let total: Option<u64> = if args.key.is_none() && args.key_group.is_none() {
        op.subtasks
            .iter()
            .map(|st| {
                st.keyed_stats
                    .as_ref()
                    .and_then(|s| s.states.iter().find(|x| x.name == desc.name).map(|x| x.entries))
            })
            .sum()
    } else {
        None
    };
    let mut damaged: Vec<DamagedKeyGroup> = Vec::new();
    let mut failed: Option<StateError> = None;
    // A break is the limit reached, or standard output failing (`failed`).
    let _ = cursor.walk(&mut |w| match w {
        Walked::Entry(e) => {
            let (text, json) = entry_out(desc, &e);
            out.emit(text, json).unwrap_or_else(|e| {
                failed = Some(e);
                ControlFlow::Break(())
            })
        }
        // Damaged bytes hide only their key group: the rest is read, and the damage
        // reported after it (exit 1).
        Walked::Damaged(d) => {
            damaged.push(d);
            ControlFlow::Continue(())
        }
        Walked::KeyGroupDone(_) => ControlFlow::Continue(()),
    })?;
    if let Some(e) = failed {
        return Err(e.into());
    }
    let code = out.finish("entry", total)?;
    if let Some(note) = changelog_note {
        eprintln!("{note}");
    }
    if !damaged.is_empty() {
        eprintln!(
            "error: {} could not be read (every other key group was dumped):",
            crate::render::count(damaged.len() as u64, "damaged key group")
        );
        for d in &damaged {
            eprintln!("  key group {}: {}", d.key_group, d.error);
        }
        return Ok(ExitCode::from(1));
    }
    Ok(code)
}

/// One keyed entry as a text line and a JSON object.
fn entry_out(desc: &StateDescriptor, e: &EntryRef<'_>) -> (String, serde_json::Value) {
    let kg = e.position.key_group;
    let k = render::text(&desc.key_schema, e.key);
    let ns = render::text(&desc.namespace_schema, e.namespace);
    let v = render::text(&desc.value_schema, e.value);
    let ttl = e.ttl_timestamp.map(|t| format!(" ttl_ts={t}")).unwrap_or_default();
    let mut j = json!({
        "key_group": kg,
        "key": render::json_of(&desc.key_schema, e.key),
        "namespace": render::json_of(&desc.namespace_schema, e.namespace),
        "value": render::json_of(&desc.value_schema, e.value),
    });
    if let Some(t) = e.ttl_timestamp {
        j["ttl_timestamp_ms"] = json!(t);
    }
    let text = match (desc.kind, e.user_key) {
        (KeyedStateKind::Map, Some(uk)) => {
            let uks = desc.user_key_schema.clone().unwrap_or(statekit_core::TypeSchema::Bytes);
            j["user_key"] = render::json_of(&uks, uk);
            format!(
                "kg={kg} key={k} ns={ns} user_key={} value={v}{ttl}",
                render::text(&uks, uk)
            )
        }
        (KeyedStateKind::List, _) => {
            let element = e.element.unwrap_or_default();
            j["index"] = json!(element);
            format!("kg={kg} key={k} ns={ns} element[{element}]={v}{ttl}")
        }
        _ => format!("kg={kg} key={k} ns={ns} value={v}{ttl}"),
    };
    (text, j)
}

/// `statekit dump` of an operator state: what each subtask stored (a union state's elements
/// under the subtask that wrote them, not redistributed); each subtask's file is read once.
fn dump_operator_state(
    args: &DumpArgs,
    reader: &Snapshot,
    uid: &str,
    op: &OperatorMetadata,
    desc: &OperatorStateDescriptor,
    mut out: Out,
) -> Result<ExitCode> {
    if args.key.is_some() || args.key_group.is_some() {
        bail!(
            "{:?} is operator state: --key and --key-group apply to keyed state only",
            desc.name
        );
    }
    'subtasks: for i in 0..op.parallelism {
        let snap = reader.stored_operator_state(uid, i)?;
        for (d, data) in &snap.states {
            if d.name != desc.name {
                continue;
            }
            let vs = &desc.value_schema;
            let r = match data {
                OperatorStateData::List(items) => each(items.iter().enumerate(), |(j, e)| {
                    out.emit(
                        render::op_element_line(i, j, vs, e),
                        render::op_element_json(i, j, vs, e),
                    )
                }),
                OperatorStateData::Broadcast(m) => {
                    let ks = desc.key_schema.clone().unwrap_or(statekit_core::TypeSchema::Bytes);
                    each(m.iter(), |(k, v)| {
                        out.emit(
                            render::op_entry_line(i, &ks, k, vs, v),
                            render::op_entry_json(i, &ks, k, vs, v),
                        )
                    })
                }
            };
            // A break is the limit reached.
            if r?.is_break() {
                break 'subtasks;
            }
        }
    }
    out.finish("entry", None)
}
