//! Changelog (DSTL) state as `statekit` prints it: the text of a changelog summary (`show`,
//! `dump`; the library's `statekit_snapshot::describe` computes it from `_metadata` only), and
//! the change records `dump --changes` lists (the library's `statekit_snapshot::changes` walks
//! them — a checkpoint's tails in replay order, or one log file — and reads them; this renders
//! each as a text line or its JSON), and the lone log file `verify` checks.

use crate::render;
use anyhow::{anyhow, bail, Result};
use serde_json::Value as Json;
use statekit_changelog::verify::LogCheck;
use statekit_core::location::Location;
use statekit_core::TypeSchema;
use statekit_format::{Problem, SubtaskMetadata};
use statekit_snapshot::changes::{self, ChangeRecord, ChangesError, ListedChange, ListedOp, RecordBody, TypedBytes};
use statekit_snapshot::describe::ChangelogSummary;
use std::ops::ControlFlow;
use std::path::Path;

pub use statekit_snapshot::changes::ChangeFilter;

/// Where a lone log file given on the command line is: an object, or the local path as given
/// (named in errors as given).
fn lone_location(path: &Path) -> Result<Location> {
    Ok(match super::location(path)? {
        l @ Location::Stored { .. } => l,
        Location::Local(_) => Location::Local(path.to_path_buf()),
    })
}

/// True when `path` is a lone changelog log file (named `*.skcl`, or starting with its magic)
/// rather than a snapshot ([`changes::is_log_file`]).
pub fn is_log_file(path: &Path) -> bool {
    match super::location(path) {
        Ok(l @ Location::Stored { .. }) => changes::is_log_file(&l),
        _ => changes::is_log_file(&Location::Local(path.to_path_buf())),
    }
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
    Ok(changes::unwritten_prepared(&lone_location(path)?)?)
}

/// `statekit verify <file.skcl>`: decodes a lone log file in full.
pub fn verify_log_file(path: &Path) -> Result<(LogCheck, Vec<Problem>)> {
    let shown = path.display().to_string();
    Ok(changes::verify_log_file(&lone_location(path)?, &shown)?)
}

// ----------------------------------------------------------------------------------------
// dump --changes

/// Lists the change records of a snapshot's tails in replay order, or of a lone log file in
/// file order (the library's walks, [`changes::walk_changes`] and
/// [`changes::walk_log_file_changes`]), each as a text line and its JSON to `emit` (which
/// returns false when it wants no more). Everything is decoded and checked before the first
/// record is emitted: a damaged file is an error, never partial output.
pub fn dump_changes(
    path: &Path,
    uid: Option<&str>,
    filter: &ChangeFilter,
    emit: &mut dyn FnMut(String, Json) -> Result<bool>,
) -> Result<()> {
    let mut failed = None;
    let mut visit = |r: &ChangeRecord<'_>| {
        let listed = serde_json::to_value(r)
            .map_err(anyhow::Error::from)
            .and_then(|json| emit(record_text(r), json));
        match listed {
            Ok(true) => ControlFlow::Continue(()),
            Ok(false) => ControlFlow::Break(()),
            Err(e) => {
                failed = Some(e);
                ControlFlow::Break(())
            }
        }
    };
    if is_log_file(path) {
        if uid.is_some() {
            bail!("{}: a lone log file has no operators: drop --uid", path.display());
        }
        let shown = path.display().to_string();
        changes::walk_log_file_changes(&lone_location(path)?, &shown, filter, &mut visit)?;
    } else {
        let snapshot = super::open_snapshot(path, &Default::default())?;
        changes::walk_changes(&snapshot, uid, filter, &mut visit).map_err(|e| match e {
            ChangesError::NoChangelogState { ref uid, .. } => anyhow!(
                "{}: {e}: --changes lists the change records of changelog checkpoints{}",
                path.display(),
                if uid.is_some() { "" } else { " and log files" }
            ),
            e => e.into(),
        })?;
    }
    failed.map_or(Ok(()), Err)
}

/// A listed record as one line: its origin, then a metadata record's state and schemas, or a
/// change's key group, state, operation, key, namespace and the operation's parts (each read
/// by its state's schemas, [`render::text`]).
fn record_text(r: &ChangeRecord<'_>) -> String {
    let o = &r.origin;
    let mut text = String::new();
    if let Some(s) = o.subtask {
        text.push_str(&format!("subtask={s} "));
    }
    text.push_str(&format!("file={} offset={} sqn={} ", o.file, o.offset, o.sqn));
    match &r.body {
        RecordBody::Metadata {
            state_id,
            descriptor: d,
        } => text.push_str(&format!(
            "kg=meta op=metadata state={} id={state_id} kind={} key {} ns {}{} value {}{}",
            d.name,
            d.kind,
            d.key_schema,
            d.namespace_schema,
            d.user_key_schema
                .as_ref()
                .map(|t| format!(" user-key {t}"))
                .unwrap_or_default(),
            d.value_schema,
            render::ttl_text(d.ttl.map(|t| t.ttl_ms))
        )),
        RecordBody::Change(c) => change_text(c, &mut text),
    }
    text
}

/// A change's part of its line ([`record_text`]).
fn change_text(c: &ListedChange<'_>, text: &mut String) {
    let t = |b: &TypedBytes<'_>| render::text(b.schema, b.bytes);
    let list = |items: &[TypedBytes<'_>]| items.iter().map(t).collect::<Vec<_>>().join(", ");
    let state = c.state.map_or_else(|| format!("#{}", c.state_id), str::to_string);
    text.push_str(&format!(
        "kg={} state={state} op={} key={} ns={}",
        c.key_group,
        c.op_name,
        t(&c.key),
        t(&c.namespace)
    ));
    match &c.op {
        ListedOp::Clear => {}
        ListedOp::Put(value) => text.push_str(&format!(" value={}", t(value))),
        ListedOp::AddElement(element) => text.push_str(&format!(" element={}", t(element))),
        ListedOp::SetList(elements) => text.push_str(&format!(" elements=[{}]", list(elements))),
        ListedOp::MapPut { user_key, value } => {
            text.push_str(&format!(" user_key={} value={}", t(user_key), t(value)));
        }
        ListedOp::MapRemove(user_key) => text.push_str(&format!(" user_key={}", t(user_key))),
        ListedOp::MergeList(sources) => text.push_str(&format!(" sources=[{}]", list(sources))),
        ListedOp::Read { kind, user_key } => {
            text.push_str(&format!(" read={}", kind.name()));
            if let Some(uk) = user_key {
                text.push_str(&format!(" user_key={}", t(uk)));
            }
        }
    }
    if let Some(t) = c.time_ms {
        text.push_str(&format!(" time={t}"));
    }
}

/// The state names the log file's or snapshot's metadata records declare don't need to be
/// known in advance; but `--key` needs the key's schema: the `--state`'s, looked up in the
/// snapshot's `_metadata` or the log file's metadata records.
pub fn key_schema_for(path: &Path, uid: Option<&str>, state: &str) -> Result<TypeSchema> {
    if is_log_file(path) {
        let shown = path.display().to_string();
        return Ok(changes::declared_key_schema(&lone_location(path)?, &shown, state)?);
    }
    let snapshot = super::open_snapshot(path, &Default::default())?;
    changes::key_schema(&snapshot, uid, state).map_err(|e| anyhow!("{}: {e}", path.display()))
}
