//! `statekit diff`: the differences of two snapshots, printed (the comparison is the
//! library's [`statekit_snapshot::diff`]).

use crate::render;
use anyhow::{anyhow, Result};
use clap::Args;
use serde::Serialize;
use statekit_checkpoint::SnapshotReader;
use statekit_core::TypeSchema;
use statekit_snapshot::diff::{
    describe_state, diff_snapshots, Change, DiffOptions, DiffSummary, Difference, DifferenceReport, FieldChange, Item,
    KeyDetail, KeyDiff, MapEntryDiff, OperatorDiff, OperatorStateDiff, Side, StateDiff, SummaryReport,
};
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
            reader: &ra,
        },
        Side {
            label: &lb,
            reader: &rb,
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

/// Changed properties as text: `parallelism 2 -> 3 (layout only), …`.
pub fn fields_text(fields: &[FieldChange]) -> String {
    fields
        .iter()
        .map(|f| {
            format!(
                "{} {} -> {}{}",
                f.field.as_str().replace('_', " "),
                f.old,
                f.new,
                if f.layout { " (layout only)" } else { "" }
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn item_text(schema: &TypeSchema, it: &Item) -> String {
    render::item_text(schema, it, false)
}

fn list_text(schema: &TypeSchema, items: &[Item]) -> String {
    render::list_text(schema, items, false)
}

/// One line of a difference as the inspector's diff list shows it: the columns of a line
/// of [`difference_text`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiffCells {
    /// `+`, `-`, `~`, or `=` for a layout-only change.
    pub sign: char,
    /// Operator uid.
    pub uid: String,
    /// State name (empty for an operator).
    pub state: String,
    /// Key (with namespace and user key), element or broadcast key; empty for descriptors.
    pub key: String,
    /// What changed: `old -> new` values, or the changed properties.
    pub what: String,
}

/// How many lines [`difference_text`] prints for `d` (the rows of the inspector's list).
pub fn difference_parts(d: &Difference) -> usize {
    match d {
        Difference::Operator(_) | Difference::State(_) => 1,
        Difference::OperatorState(s) => 1 + s.removed_elements.len() + s.added_elements.len() + s.entries.len(),
        Difference::Key(k) => match &k.detail {
            KeyDetail::Map(entries) => entries.len().max(1),
            _ => 1,
        },
    }
}

/// Line `part` of `d` as [`DiffCells`] (`None` past the last).
pub fn difference_cell(d: &Difference, part: usize, hex: bool) -> Option<DiffCells> {
    let cells = |sign: char, uid: &str, state: &str, key: String, what: String| DiffCells {
        sign,
        uid: uid.to_string(),
        state: state.to_string(),
        key,
        what,
    };
    if part >= difference_parts(d) {
        return None;
    }
    Some(match d {
        Difference::Operator(o) => {
            let what = match o.change {
                Change::Added => "operator added".to_string(),
                Change::Removed => "operator removed".to_string(),
                Change::Modified => fields_text(&o.fields),
            };
            let sign = if o.layout_only() { '=' } else { o.change.sign() };
            cells(sign, &o.uid, "", String::new(), what + &operator_notes(o))
        }
        Difference::State(s) => {
            let what = match s.change {
                Change::Added | Change::Removed => format!("{}: {}", s.change.name(), state_detail(s)),
                Change::Modified => state_detail(s),
            };
            cells(s.change.sign(), &s.uid, &s.name, String::new(), what)
        }
        Difference::OperatorState(s) => {
            let (vs, ks) = op_schemas(s);
            let (nr, na) = (s.removed_elements.len(), s.added_elements.len());
            if part == 0 {
                let what = op_state_parts(s).unwrap_or_else(|| s.change.name().to_string());
                cells(s.change.sign(), &s.uid, &s.name, String::new(), what)
            } else if part <= nr {
                let e = &s.removed_elements[part - 1];
                cells('-', &s.uid, &s.name, "element".into(), render::cell(&vs, e, hex))
            } else if part <= nr + na {
                let e = &s.added_elements[part - 1 - nr];
                cells('+', &s.uid, &s.name, "element".into(), render::cell(&vs, e, hex))
            } else {
                let e = &s.entries[part - 1 - nr - na];
                let (sign, what) = entry_values(&vs, e, hex);
                let key = format!("key={}", render::cell(&ks, &e.user_key, hex));
                cells(sign, &s.uid, &s.name, key, what)
            }
        }
        Difference::Key(k) => {
            let st = &k.state;
            let mut key = render::cell(&st.key_schema, &k.key, hex);
            if st.namespace_schema != TypeSchema::Unit {
                key.push_str(&format!(
                    " ns={}",
                    render::cell(&st.namespace_schema, &k.namespace, hex)
                ));
            }
            let vs = &st.value_schema;
            let sign = k.change.sign();
            match &k.detail {
                KeyDetail::None => cells(sign, &k.uid, &st.name, key, String::new()),
                KeyDetail::Value { old, new } => {
                    let t = |i: &Item| render::item_text(vs, i, hex);
                    let what = match (old, new) {
                        (Some(o), Some(n)) => format!("{} -> {}", t(o), t(n)),
                        (Some(x), None) | (None, Some(x)) => t(x),
                        (None, None) => String::new(),
                    };
                    cells(sign, &k.uid, &st.name, key, what)
                }
                KeyDetail::List { old, new } => {
                    let what = match k.change {
                        Change::Added => render::list_text(vs, new, hex),
                        Change::Removed => render::list_text(vs, old, hex),
                        Change::Modified => format!(
                            "{} -> {}",
                            render::list_text(vs, old, hex),
                            render::list_text(vs, new, hex)
                        ),
                    };
                    cells(sign, &k.uid, &st.name, key, what)
                }
                KeyDetail::Map(entries) => match entries.get(part) {
                    None => cells(sign, &k.uid, &st.name, key, String::new()),
                    Some(e) => {
                        let uks = st.user_key_schema.clone().unwrap_or(TypeSchema::Bytes);
                        let (sign, what) = entry_values(vs, e, hex);
                        let key = format!("{key} user_key={}", render::cell(&uks, &e.user_key, hex));
                        cells(sign, &k.uid, &st.name, key, what)
                    }
                },
            }
        }
    })
}

/// What an operator difference adds after its changed properties: that only its layout
/// changed, or why its keyed state was not compared.
fn operator_notes(o: &OperatorDiff) -> String {
    let mut t = String::new();
    if o.layout_only() {
        t.push_str(" — not a state difference");
    }
    if let Some(why) = &o.keyed_not_compared {
        t.push_str(&format!("; keyed state not compared ({why})"));
    }
    t
}

/// A keyed-state difference after its name: the descriptor of an added or removed state,
/// the changed properties of a modified one.
fn state_detail(s: &StateDiff) -> String {
    match s.change {
        Change::Added => s.new.as_ref().map(describe_state).unwrap_or_default(),
        Change::Removed => s.old.as_ref().map(describe_state).unwrap_or_default(),
        Change::Modified => format!(
            "{}{}",
            fields_text(&s.fields),
            if s.entries_compared {
                ""
            } else {
                " (entries not compared)"
            }
        ),
    }
}

/// What the header line of an operator-state difference says after the name.
fn op_state_parts(s: &OperatorStateDiff) -> Option<String> {
    let mut parts = Vec::new();
    if !s.fields.is_empty() {
        parts.push(fields_text(&s.fields));
    }
    if !s.removed_elements.is_empty() || !s.added_elements.is_empty() {
        parts.push(format!(
            "{} elements removed, {} added",
            s.removed_elements.len(),
            s.added_elements.len()
        ));
    }
    if !s.entries.is_empty() {
        parts.push(format!("{} entries differ", s.entries.len()));
    }
    if let (Change::Added | Change::Removed, Some(d)) = (s.change, s.new.as_ref().or(s.old.as_ref())) {
        parts.push(format!("{} value {}", d.mode, d.value_schema));
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// The sign and `old -> new` text of a map (or broadcast) entry.
fn entry_values(vs: &TypeSchema, e: &MapEntryDiff, hex: bool) -> (char, String) {
    let t = |i: &Item| render::item_text(vs, i, hex);
    match (&e.old, &e.new) {
        (None, Some(n)) => ('+', t(n)),
        (Some(o), None) => ('-', t(o)),
        (Some(o), Some(n)) => ('~', format!("{} -> {}", t(o), t(n))),
        (None, None) => ('?', String::new()),
    }
}

/// The schemas of an operator state's values and keys (the new side's when it has one).
pub fn op_schemas(d: &OperatorStateDiff) -> (TypeSchema, TypeSchema) {
    let desc = d.new.as_ref().or(d.old.as_ref());
    (
        desc.map(|x| x.value_schema.clone()).unwrap_or(TypeSchema::Bytes),
        desc.and_then(|x| x.key_schema.clone()).unwrap_or(TypeSchema::Bytes),
    )
}

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

/// A difference as text lines (one, or a header and one line per element for operator
/// state).
pub fn difference_text(d: &Difference) -> Vec<String> {
    match d {
        Difference::Operator(o) => {
            let mut t = format!("{} operator {:?}", o.change.sign(), o.uid);
            if o.change == Change::Modified {
                t.push_str(&format!(": {}", fields_text(&o.fields)));
            }
            vec![t + &operator_notes(o)]
        }
        Difference::State(s) => vec![format!(
            "{} state {}/{}: {}",
            s.change.sign(),
            s.uid,
            s.name,
            state_detail(s)
        )],
        Difference::OperatorState(s) => {
            let name = format!("{}/{}", s.uid, s.name);
            let (vs, ks) = op_schemas(s);
            let mut head = format!("{} operator-state {name}", s.change.sign());
            if let Some(parts) = op_state_parts(s) {
                head.push_str(&format!(": {parts}"));
            }
            let mut lines = vec![head];
            for e in &s.removed_elements {
                lines.push(format!("    - element {}", render::text(&vs, e)));
            }
            for e in &s.added_elements {
                lines.push(format!("    + element {}", render::text(&vs, e)));
            }
            for e in &s.entries {
                lines.push(map_entry_text("    ", &ks, &vs, "key", e));
            }
            lines
        }
        Difference::Key(k) => key_text(k),
    }
}

fn map_entry_text(prefix: &str, ks: &TypeSchema, vs: &TypeSchema, key_name: &str, e: &MapEntryDiff) -> String {
    let k = render::text(ks, &e.user_key);
    match (&e.old, &e.new) {
        (None, Some(n)) => format!("{prefix}+ {key_name}={k} value={}", item_text(vs, n)),
        (Some(o), None) => format!("{prefix}- {key_name}={k} value={}", item_text(vs, o)),
        (Some(o), Some(n)) => format!(
            "{prefix}~ {key_name}={k} value={} -> {}",
            item_text(vs, o),
            item_text(vs, n)
        ),
        (None, None) => format!("{prefix}? {key_name}={k}"),
    }
}

fn key_text(k: &KeyDiff) -> Vec<String> {
    let d = &k.state;
    let mut loc = format!(
        "{}/{} kg={} key={}",
        k.uid,
        d.name,
        k.key_group,
        render::text(&d.key_schema, &k.key)
    );
    if d.namespace_schema != TypeSchema::Unit {
        loc.push_str(&format!(" ns={}", render::text(&d.namespace_schema, &k.namespace)));
    }
    let sign = k.change.sign();
    let vs = &d.value_schema;
    match &k.detail {
        KeyDetail::None => vec![format!("{sign} {loc}")],
        KeyDetail::Value { old, new } => vec![match (old, new) {
            (Some(o), Some(n)) => format!("{sign} {loc} value={} -> {}", item_text(vs, o), item_text(vs, n)),
            (Some(o), None) => format!("{sign} {loc} value={}", item_text(vs, o)),
            (None, Some(n)) => format!("{sign} {loc} value={}", item_text(vs, n)),
            (None, None) => format!("{sign} {loc}"),
        }],
        KeyDetail::List { old, new } => vec![match k.change {
            Change::Added => format!("{sign} {loc} list={}", list_text(vs, new)),
            Change::Removed => format!("{sign} {loc} list={}", list_text(vs, old)),
            Change::Modified => format!("{sign} {loc} list={} -> {}", list_text(vs, old), list_text(vs, new)),
        }],
        KeyDetail::Map(entries) => {
            let uks = d.user_key_schema.clone().unwrap_or(TypeSchema::Bytes);
            entries
                .iter()
                .map(|e| {
                    let line = map_entry_text("", &uks, vs, "user_key", e);
                    // "<sign> user_key=…" → "<sign> <loc> user_key=…"
                    let (s, rest) = line.split_at(1);
                    format!("{s} {loc}{rest}")
                })
                .collect()
        }
    }
}

/// Opens one side; an error names its path.
pub fn open_side(path: &std::path::Path, flink: &statekit_flink::FlinkOpenOptions) -> Result<SnapshotReader> {
    super::open_reader(path, flink)
        .and_then(|mut r| r.load_state_schema().map(|()| r).map_err(anyhow::Error::from))
        .map_err(|e| {
            let (shown, msg) = (path.display().to_string(), e.to_string());
            if msg.starts_with(&shown) {
                anyhow!("{msg}")
            } else {
                anyhow!("{shown}: {msg}")
            }
        })
}
