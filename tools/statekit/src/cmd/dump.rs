//! `statekit dump`: decoded entries of one state.

use crate::render::{self, KeyFormat};
use anyhow::{bail, Result};
use clap::Args;
use serde_json::json;
use statekit_core::{KeyGroupRange, KeyedStateKind, OperatorStateData, StateError, UPPER_BOUND_MAX_PARALLELISM};
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
    let mut reader = super::open_reader(&args.path, &args.flink.options())?;
    reader.load_state_schema()?;
    let op = reader.operator(uid)?.clone();
    let mut out = Out::new(args.json, args.jsonl, args.limit);
    let mut changelog_note: Option<String> = None;
    let mut total: Option<u64> = None;
    let mut damaged: Vec<(u32, String)> = Vec::new();
    let result = if let Some(desc) = op.keyed_states.iter().find(|d| d.name == state) {
        let desc = desc.clone();
        let key = match &args.key {
            Some(k) => Some(render::parse_key(k, &desc.key_schema, args.key_format)?),
            None => None,
        };
        let mut range = KeyGroupRange::all(op.max_parallelism);
        if let Some(kgs) = args.key_group {
            if kgs.end_exclusive() > op.max_parallelism {
                bail!(
                    "key group {} does not exist: operator {:?} has {} key groups",
                    kgs.end_exclusive() - 1,
                    op.uid,
                    op.max_parallelism
                );
            }
            range = kgs;
        }
        if let Some(kg) = key
            .as_ref()
            .and_then(|k| reader.key_group_of(k, &desc.key_schema, op.max_parallelism))
        {
            range = range.intersection(&KeyGroupRange::new(kg, kg));
        }
        if op.subtasks.iter().any(|st| st.changelog.is_some()) {
            // A changelog checkpoint: what the entries are made of, on standard error after
            // them (standard output stays entries only, for scripts and --json).
            let summary = super::changelog::Summary::of(
                op.subtasks
                    .iter()
                    .filter(|st| !st.key_groups.intersection(&range).is_empty()),
            );
            changelog_note = Some(format!(
                "changelog checkpoint: operator {:?} as a restore sees it, materialization + tail replayed:\n{}",
                op.uid,
                summary.text("  ")
            ));
        }
        // The whole state's entry count, when `_metadata` knows it (to say "10 of 50").
        if args.key.is_none() && args.key_group.is_none() {
            total = op
                .subtasks
                .iter()
                .map(|st| {
                    st.keyed_stats
                        .as_ref()
                        .and_then(|s| s.states.iter().find(|x| x.name == desc.name).map(|x| x.entries))
                })
                .sum();
        }
        let mut result = Ok(ControlFlow::Continue(()));
        'files: for file in statekit_snapshot::keyed_views(&reader, uid, range)? {
            let Some(idx) = file.states().iter().position(|d| d.name == desc.name) else {
                continue;
            };
            let idx = idx as u32;
            for kg in file.key_group_range().intersection(&range) {
                let mut element = 0u64;
                let mut last_key: Vec<u8> = Vec::new();
                let mut last_ns: Vec<u8> = Vec::new();
                let r = file.visit_key_group(kg, &mut |e| {
                    if e.state != idx || key.as_deref().is_some_and(|k| k != e.key) {
                        return Ok(ControlFlow::Continue(()));
                    }
                    if e.key != last_key.as_slice() || e.namespace != last_ns.as_slice() {
                        element = 0;
                        last_key = e.key.to_vec();
                        last_ns = e.namespace.to_vec();
                    }
                    let k = render::text(&desc.key_schema, e.key);
                    let ns = render::text(&desc.namespace_schema, e.namespace);
                    let v = render::text(&desc.value_schema, e.value);
                    let ttl = e.timestamp.map(|t| format!(" ttl_ts={t}")).unwrap_or_default();
                    let mut j = json!({
                        "key_group": kg,
                        "key": render::json_of(&desc.key_schema, e.key),
                        "namespace": render::json_of(&desc.namespace_schema, e.namespace),
                        "value": render::json_of(&desc.value_schema, e.value),
                    });
                    if let Some(t) = e.timestamp {
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
                            j["index"] = json!(element);
                            let t = format!("kg={kg} key={k} ns={ns} element[{element}]={v}{ttl}");
                            element += 1;
                            t
                        }
                        _ => format!("kg={kg} key={k} ns={ns} value={v}{ttl}"),
                    };
                    out.emit(text, j)
                });
                match r {
                    Ok(ControlFlow::Continue(())) => {}
                    // Damaged bytes hide only their key group: the rest is read, and the
                    // damage reported after it (exit 1).
                    Err(e) if e.kind() == statekit_core::ErrorKind::Corrupt => {
                        damaged.push((kg, e.to_string()));
                    }
                    r => {
                        result = r;
                        break 'files;
                    }
                }
            }
        }
        result
    } else if let Some(desc) = op.operator_states.iter().find(|d| d.name == state) {
        let desc = desc.clone();
        if args.key.is_some() || args.key_group.is_some() {
            bail!(
                "{:?} is operator state: --key and --key-group apply to keyed state only",
                desc.name
            );
        }
        let mut result = Ok(ControlFlow::Continue(()));
        // What each subtask stored (a union state's elements under the subtask that wrote
        // them, not redistributed); each subtask's file is read once.
        'subtasks: for i in 0..op.parallelism {
            let snap = reader.stored_operator_state(uid, i)?;
            for (d, data) in &snap.states {
                if d.name != desc.name {
                    continue;
                }
                let r = match data {
                    OperatorStateData::List(items) => each(items.iter().enumerate(), |(j, e)| {
                        let vs = &desc.value_schema;
                        out.emit(
                            render::op_element_line(i, j, vs, e),
                            render::op_element_json(i, j, vs, e),
                        )
                    }),
                    OperatorStateData::Broadcast(m) => {
                        let ks = desc.key_schema.clone().unwrap_or(statekit_core::TypeSchema::Bytes);
                        each(m.iter(), |(k, v)| {
                            let vs = &desc.value_schema;
                            out.emit(
                                render::op_entry_line(i, &ks, k, vs, v),
                                render::op_entry_json(i, &ks, k, vs, v),
                            )
                        })
                    }
                };
                if !matches!(r, Ok(ControlFlow::Continue(()))) {
                    result = r;
                    break 'subtasks;
                }
            }
        }
        result
    } else {
        let keyed: Vec<&str> = op.keyed_states.iter().map(|d| d.name.as_str()).collect();
        let opst: Vec<&str> = op.operator_states.iter().map(|d| d.name.as_str()).collect();
        bail!(
            "operator {:?} has no state {:?} (keyed states: {keyed:?}; operator states: {opst:?})",
            op.uid,
            state
        );
    };
    // A break is the limit reached.
    if let Err(e) = result {
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
        for (kg, why) in &damaged {
            eprintln!("  key group {kg}: {why}");
        }
        return Ok(ExitCode::from(1));
    }
    Ok(code)
}
