//! Changelog (DSTL) state: the text of a changelog summary (`show`, `dump`; the library's
//! `statekit_snapshot::describe` computes it from `_metadata` only), the change records
//! `dump --changes` lists (of a checkpoint's tails, in replay order — the walk a restore
//! replays, `statekit_changelog::tail` — or of one log file), and `verify` of a lone log file
//! (the checks are `statekit_changelog::verify`'s).

use crate::render;
use anyhow::{anyhow, bail, Result};
use serde_json::{json, Value as Json};
use statekit_changelog::tail::{walk_tail, LogFiles, TailStats};
use statekit_changelog::verify::LogCheck;
use statekit_changelog::{LogFileReader, LogId, Op, ReadKind, Record, RecordsError};
use statekit_core::{key_group_for_key, KeyGroupRange, StateDescriptor, TypeSchema};
use statekit_format::{FormatError, OperatorMetadata, Problem, SubtaskMetadata};
use statekit_snapshot::describe::ChangelogSummary;
use std::collections::HashMap;
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::Arc;

/// True when `path` is a lone changelog log file (named `*.skcl`, or starting with its magic)
/// rather than a snapshot.
pub fn is_log_file(path: &Path) -> bool {
    if let Ok(l @ statekit_core::location::Location::Stored { .. }) = super::location(path) {
        // An object is not fetched to look at its magic: its name says.
        return l.file_name().is_some_and(|n| n.ends_with(".skcl"));
    }
    if !path.is_file() {
        return false;
    }
    if path.extension().is_some_and(|e| e == "skcl") {
        return true;
    }
    use std::io::Read;
    let mut magic = [0u8; 4];
    statekit_core::storage::open_regular_file(path)
        .ok()
        .is_some_and(|(mut f, _)| f.read_exact(&mut magic).is_ok() && magic == statekit_changelog::file::FILE_MAGIC)
}

/// A format error as one problem line, always naming file, offset and field (the version and
/// magic errors carry no offset of their own: [`Problem`] gives them theirs).
pub fn problem_text(e: &FormatError) -> String {
    Problem::from(e).to_string()
}

/// Maps a log file given on the command line (named in errors as given): mapped, not read,
/// so a huge file that is not a log file costs nothing before its magic is checked.
fn map_lone(path: &Path) -> Result<Arc<dyn statekit_core::storage::Blob>> {
    use statekit_core::storage::Storage as _;
    if let l @ statekit_core::location::Location::Stored { .. } = super::location(path)? {
        let (storage, key) = l.storage_and_path()?;
        return Ok(storage.open(&key)?);
    }
    let (dir, name) = match (path.parent(), path.file_name()) {
        (Some(d), Some(n)) => (if d.as_os_str().is_empty() { Path::new(".") } else { d }, n),
        _ => anyhow::bail!("{}: not a file", path.display()),
    };
    let storage = statekit_core::storage::LocalStorage::new(dir);
    Ok(storage.open(&name.to_string_lossy())?)
}

/// Opens a log file given on the command line (named in errors as given).
fn open_lone(path: &Path) -> Result<LogFileReader> {
    let shown = path.display().to_string();
    LogFileReader::from_blob(map_lone(path)?, &shown, None).map_err(|e| anyhow!(problem_text(&e)))
}

// ----------------------------------------------------------------------------------------
// show

/// The changelog summary of some subtasks (the library's
/// [`ChangelogSummary`]), as `dump` prints it
/// beside a changelog state's entries.
#[derive(Clone, Debug, Default)]
pub struct Summary(pub ChangelogSummary);

impl Summary {
    /// The summary of these subtasks' changelog handles (subtasks without one are skipped).
    pub fn of<'a>(subtasks: impl IntoIterator<Item = &'a SubtaskMetadata>) -> Summary {
        Summary(ChangelogSummary::of(subtasks))
    }

    /// Three indented lines ([`summary_text`]).
    pub fn text(&self, indent: &str) -> String {
        summary_text(&self.0, indent)
    }
}

/// A changelog summary as three indented lines: materialized part, tail, projected replay.
pub fn summary_text(s: &ChangelogSummary, indent: &str) -> String {
    let (m, t, r) = (&s.materialized, &s.tail, &s.replay);
    let entries = m
        .entries
        .map_or_else(|| "? entries".to_string(), |n| format!("{n} entries"));
    let amp = s
        .space_amplification
        .map_or_else(|| "n/a (no materialization)".to_string(), |a| format!("{a:.2}"));
    format!(
        "{indent}materialized {} ({} part{}, {} file{}): {} B, {entries}\n\
         {indent}tail         {} change set{} in {} segment{} of {} log file{} ({} B of files): {} B, {} records\n\
         {indent}replay       {} change sets, {} records, {} B; space amplification (log/materialized bytes) {amp}",
        if m.parts == 0 { "none" } else { "yes" },
        m.parts,
        plural(m.parts),
        m.files,
        plural(m.files),
        m.bytes,
        t.change_sets,
        plural(t.change_sets),
        t.segments,
        plural(t.segments),
        t.log_files,
        plural(t.log_files),
        t.log_file_bytes,
        t.log_bytes,
        t.records,
        r.change_sets,
        r.records,
        r.bytes,
    )
}

fn plural(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

// ----------------------------------------------------------------------------------------
// verify

/// Its size when `path` is a prepared log file not yet written (all zeros): a spare of a
/// running job's upload service, or an orphan a crash left (`statekit gc` deletes it).
pub fn unwritten_prepared(path: &Path) -> Result<Option<u64>> {
    let blob = map_lone(path)?;
    let b = blob.bytes();
    Ok(statekit_changelog::file::is_unwritten_prepared(b).then_some(b.len() as u64))
}

/// `statekit verify <file.skcl>`: decodes a lone log file in full.
pub fn verify_log_file(path: &Path) -> Result<(LogCheck, Vec<Problem>)> {
    let shown = path.display().to_string();
    Ok(statekit_changelog::verify::verify_log_file(map_lone(path)?, &shown))
}

// ----------------------------------------------------------------------------------------
// dump --changes

/// What `dump --changes` lists.
pub struct ChangeFilter {
    /// Only these key groups (metadata records are then left out).
    pub key_groups: Option<KeyGroupRange>,
    /// Only this state (by name).
    pub state: Option<String>,
    /// Only this key (stored bytes).
    pub key: Option<Vec<u8>>,
}

impl ChangeFilter {
    fn keeps(&self, kg: u32, rec: &Record<'_>, desc: Option<&StateDescriptor>) -> bool {
        if let Some(s) = &self.state {
            let name = match rec {
                Record::Metadata { descriptor, .. } => Some(&descriptor.name),
                Record::Change(_) => desc.map(|d| &d.name),
            };
            if name != Some(s) {
                return false;
            }
        }
        match rec {
            Record::Metadata { .. } => self.key_groups.is_none() && self.key.is_none(),
            Record::Change(c) => {
                self.key_groups.is_none_or(|r| r.contains(kg)) && self.key.as_deref().is_none_or(|k| k == c.key)
            }
        }
    }
}

/// Where a listed record comes from.
struct Origin<'a> {
    subtask: Option<u32>,
    file: &'a str,
    offset: u64,
    log: LogId,
    sqn: u64,
}

/// One record as a text line and a JSON object, decoded per its state's schemas (as hex when
/// no metadata record declared its state).
fn render_record(o: &Origin<'_>, kg: u32, rec: &Record<'_>, desc: Option<&StateDescriptor>) -> (String, Json) {
    let mut text = String::new();
    if let Some(s) = o.subtask {
        text.push_str(&format!("subtask={s} "));
    }
    text.push_str(&format!("file={} offset={} sqn={} ", o.file, o.offset, o.sqn));
    let mut j = json!({
        "subtask": o.subtask, "file": o.file, "offset": o.offset, "log": o.log.to_string(), "sqn": o.sqn,
    });
    match rec {
        Record::Metadata { state, descriptor: d } => {
            text.push_str(&format!(
                "kg=meta op=metadata state={} id={state} kind={} key {} ns {}{} value {}{}",
                d.name,
                d.kind,
                d.key_schema,
                d.namespace_schema,
                d.user_key_schema
                    .as_ref()
                    .map(|t| format!(" user-key {t}"))
                    .unwrap_or_default(),
                d.value_schema,
                crate::render::ttl_text(d.ttl.map(|t| t.ttl_ms))
            ));
            j["key_group"] = Json::Null;
            j["op"] = json!("metadata");
            j["state"] = json!(d.name);
            j["state_id"] = json!(state);
            j["descriptor"] = json!({
                "kind": d.kind.to_string(), "key": d.key_schema.to_string(),
                "namespace": d.namespace_schema.to_string(), "value": d.value_schema.to_string(),
                "user_key": d.user_key_schema.as_ref().map(|t| t.to_string()),
                "ttl_ms": d.ttl.map(|t| t.ttl_ms),
            });
        }
        Record::Change(c) => {
            let bytes = TypeSchema::Bytes;
            let (ks, ns, vs, uks) = match desc {
                Some(d) => (
                    &d.key_schema,
                    &d.namespace_schema,
                    &d.value_schema,
                    d.user_key_schema.as_ref().unwrap_or(&bytes),
                ),
                None => (&bytes, &bytes, &bytes, &bytes),
            };
            let state = desc.map_or_else(|| format!("#{}", c.state), |d| d.name.clone());
            text.push_str(&format!(
                "kg={kg} state={state} op={} key={} ns={}",
                c.op.name(),
                render::text(ks, c.key),
                render::text(ns, c.namespace)
            ));
            j["key_group"] = json!(kg);
            j["op"] = json!(c.op.name());
            j["state"] = desc.map_or(Json::Null, |d| json!(d.name));
            j["state_id"] = json!(c.state);
            j["key"] = render::json_of(ks, c.key);
            j["namespace"] = render::json_of(ns, c.namespace);
            match &c.op {
                Op::Clear => {}
                Op::Put(v) => {
                    text.push_str(&format!(" value={}", render::text(vs, v)));
                    j["value"] = render::json_of(vs, v);
                }
                Op::AddElement(v) => {
                    text.push_str(&format!(" element={}", render::text(vs, v)));
                    j["element"] = render::json_of(vs, v);
                }
                Op::SetList(items) => {
                    let t: Vec<String> = items.iter().map(|i| render::text(vs, i)).collect();
                    text.push_str(&format!(" elements=[{}]", t.join(", ")));
                    j["elements"] = items.iter().map(|i| render::json_of(vs, i)).collect();
                }
                Op::MapPut { user_key, value } => {
                    text.push_str(&format!(
                        " user_key={} value={}",
                        render::text(uks, user_key),
                        render::text(vs, value)
                    ));
                    j["user_key"] = render::json_of(uks, user_key);
                    j["value"] = render::json_of(vs, value);
                }
                Op::MapRemove(uk) => {
                    text.push_str(&format!(" user_key={}", render::text(uks, uk)));
                    j["user_key"] = render::json_of(uks, uk);
                }
                Op::MergeList(sources) => {
                    let t: Vec<String> = sources.iter().map(|s| render::text(ns, s)).collect();
                    text.push_str(&format!(" sources=[{}]", t.join(", ")));
                    j["sources"] = sources.iter().map(|s| render::json_of(ns, s)).collect();
                }
                Op::Read { kind, user_key } => {
                    text.push_str(&format!(" read={}", kind.name()));
                    j["read"] = json!(kind.name());
                    if *kind == ReadKind::MapEntry {
                        text.push_str(&format!(" user_key={}", render::text(uks, user_key)));
                        j["user_key"] = render::json_of(uks, user_key);
                    }
                }
            }
            if let Some(t) = c.time {
                text.push_str(&format!(" time={t}"));
                j["time_ms"] = json!(t);
            }
        }
    }
    (text, j)
}

/// Lists the change records of a lone log file, in file order (a prepared spare has none);
/// the file is checked whole first.
fn dump_log_file_changes(
    path: &Path,
    filter: &ChangeFilter,
    emit: &mut dyn FnMut(String, Json) -> Result<bool>,
) -> Result<()> {
    if unwritten_prepared(path)?.is_some() {
        // A spare: no change records (yet).
        return Ok(());
    }
    let reader = open_lone(path)?;
    reader.verify().map_err(|e| anyhow!(problem_text(&e)))?;
    let shown = path.display().to_string();
    let mut declared: HashMap<(LogId, u32), StateDescriptor> = HashMap::new();
    for e in reader.index() {
        let data = reader.read(e).map_err(|e| anyhow!(problem_text(&e)))?;
        let origin = Origin {
            subtask: None,
            file: &shown,
            offset: e.offset,
            log: e.log,
            sqn: e.sqn,
        };
        if !for_each_listed(&data, &origin, filter, &mut declared, emit)? {
            return Ok(());
        }
    }
    Ok(())
}

/// Lists the change records of a snapshot's tails in replay order (subtask by subtask, each
/// tail in order, each change set's metadata first, then its key groups ascending), or of a
/// lone log file in file order. Everything is decoded and checked before the first line is
/// emitted: a damaged file is an error, never partial output.
pub fn dump_changes(
    path: &Path,
    uid: Option<&str>,
    filter: &ChangeFilter,
    emit: &mut dyn FnMut(String, Json) -> Result<bool>,
) -> Result<()> {
    if is_log_file(path) {
        if uid.is_some() {
            bail!("{}: a lone log file has no operators: drop --uid", path.display());
        }
        return dump_log_file_changes(path, filter, emit);
    }
    let reader = super::open_reader(path, &Default::default())?;
    let m = reader.metadata();
    let ops: Vec<&OperatorMetadata> = m
        .operators
        .iter()
        .filter(|o| uid.is_none_or(|u| u == o.uid))
        .filter(|o| o.subtasks.iter().any(|s| s.keyed.changelog().is_some()))
        .collect();
    if ops.is_empty() {
        match uid {
            Some(u) => {
                reader.operator(u)?;
                bail!(
                    "{}: operator {u:?} holds no changelog state (format {}): --changes lists the change records of changelog checkpoints",
                    path.display(),
                    m.format.as_str()
                );
            }
            None => bail!(
                "{}: no operator holds changelog state (format {}): --changes lists the change records of changelog checkpoints and log files",
                path.display(),
                m.format.as_str()
            ),
        }
    }
    let mut all = Vec::new();
    for o in &ops {
        let mut range = KeyGroupRange::all(o.max_parallelism);
        if let Some(r) = filter.key_groups {
            if r.end_exclusive() > o.max_parallelism {
                bail!(
                    "key group {} does not exist: operator {:?} has {} key groups",
                    r.end_exclusive() - 1,
                    o.uid,
                    o.max_parallelism
                );
            }
            range = range.intersection(&r);
        }
        if let Some(k) = &filter.key {
            let kg = key_group_for_key(k, o.max_parallelism);
            range = range.intersection(&KeyGroupRange::new(kg, kg));
        }
        let mut handles = reader.changelog_handles(&o.uid, range)?;
        handles.sort_by_key(|h| h.subtask);
        all.push((o, range, handles));
    }
    // First pass: decode everything a restore would replay (errors before any output).
    let mut files = LogFiles::default();
    for (o, range, handles) in &all {
        for h in handles {
            let _ = walk_tail(
                h,
                &o.uid,
                *range,
                &mut files,
                &mut TailStats::default(),
                &mut |p| Err(anyhow!(p.problem().to_string())),
                &mut |_, _, _| Ok(ControlFlow::Continue(())),
            )?;
        }
    }
    // Second pass: list.
    for (o, range, handles) in &all {
        for h in handles {
            let mut declared: HashMap<(LogId, u32), StateDescriptor> = HashMap::new();
            let listed = walk_tail(
                h,
                &o.uid,
                *range,
                &mut files,
                &mut TailStats::default(),
                &mut |p| Err(anyhow!(p.problem().to_string())),
                &mut |pos, kg, rec| {
                    let origin = Origin {
                        subtask: Some(pos.subtask),
                        file: &pos.segment.file.path,
                        offset: pos.offset(),
                        log: pos.log(),
                        sqn: pos.sqn(),
                    };
                    list(&origin, kg, &rec, filter, &mut declared, emit)
                },
            )?;
            if listed.is_break() {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// Lists one record when `filter` keeps it (declaring its state first when it is a metadata
/// record); breaks when `emit` wants no more.
fn list(
    origin: &Origin<'_>,
    kg: u32,
    rec: &Record<'_>,
    filter: &ChangeFilter,
    declared: &mut HashMap<(LogId, u32), StateDescriptor>,
    emit: &mut dyn FnMut(String, Json) -> Result<bool>,
) -> Result<ControlFlow<()>> {
    if let Record::Metadata { state, descriptor } = rec {
        declared.insert((origin.log, *state), descriptor.clone());
    }
    let desc = match rec {
        Record::Change(c) => declared.get(&(origin.log, c.state)),
        Record::Metadata { .. } => None,
    };
    if filter.keeps(kg, rec, desc) {
        let (t, j) = render_record(origin, kg, rec, desc);
        if !emit(t, j)? {
            return Ok(ControlFlow::Break(()));
        }
    }
    Ok(ControlFlow::Continue(()))
}

/// Lists the records of one change set that `filter` keeps; false when `emit` wants no more.
fn for_each_listed(
    data: &statekit_changelog::ChangeSetData,
    origin: &Origin<'_>,
    filter: &ChangeFilter,
    declared: &mut HashMap<(LogId, u32), StateDescriptor>,
    emit: &mut dyn FnMut(String, Json) -> Result<bool>,
) -> Result<bool> {
    let r = data.visit_records(filter.key_groups.as_ref(), &mut |kg, rec| {
        list(origin, kg, &rec, filter, declared, emit)
    });
    match r {
        Ok(flow) => Ok(flow.is_continue()),
        Err(RecordsError::Visitor(e)) => Err(e),
        Err(RecordsError::Decode(e)) => Err(anyhow!(problem_text(&e))),
    }
}

/// The state names the log file's or snapshot's metadata records declare don't need to be
/// known in advance; but `--key` needs the key's schema: the `--state`'s, looked up in the
/// snapshot's `_metadata` or the log file's metadata records.
pub fn key_schema_for(path: &Path, uid: Option<&str>, state: &str) -> Result<TypeSchema> {
    if is_log_file(path) {
        let reader = open_lone(path)?;
        for e in reader.index().iter().filter(|e| e.has_meta) {
            let data = reader.read(e).map_err(|e| anyhow!(problem_text(&e)))?;
            let mut found = None;
            // An empty range: the metadata records only.
            data.for_each_record(Some(&KeyGroupRange::EMPTY), &mut |_, rec| {
                if let Record::Metadata { descriptor, .. } = rec {
                    if descriptor.name == state && found.is_none() {
                        found = Some(descriptor.key_schema.clone());
                    }
                }
                Ok(())
            })
            .map_err(|e| anyhow!(problem_text(&e)))?;
            if let Some(s) = found {
                return Ok(s);
            }
        }
        bail!("{}: no metadata record declares a state {state:?}", path.display());
    }
    let reader = super::open_reader(path, &Default::default())?;
    let m = reader.metadata();
    let found = m
        .operators
        .iter()
        .filter(|o| uid.is_none_or(|u| u == o.uid))
        .flat_map(|o| &o.keyed_states)
        .find(|d| d.name == state);
    match found {
        Some(d) => Ok(d.key_schema.clone()),
        None => bail!("{}: no operator has a keyed state {state:?}", path.display()),
    }
}
