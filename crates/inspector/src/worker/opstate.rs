//! The worker's half of the operator state screen (Enter on an `op list`, `op union` or
//! `op broadcast` row of the states screen).
//!
//! The worker ([`run`], called from `Worker::handle`) reads the state of every subtask as
//! `statekit dump` prints it (`Snapshot::operator_state` at the operator's own
//! parallelism: list elements stay where they were, a union list goes to every subtask whole,
//! a broadcast map is copied) and answers with at most `keep` rows (the rest are only
//! counted). Operator state is small by design, so the rows are held in memory and moving,
//! `/` and `f` work on them without the worker
//! ([`crate::screens::opstate::OpStateView`]).

use super::Msg;
use crate::error::ReadError;
use statekit_core::text;
use statekit_core::ErrorKind;
use statekit_core::{OperatorStateData, OperatorStateDescriptor, TypeSchema};
use statekit_snapshot::{Snapshot, SnapshotError};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Rows of an operator state the inspector keeps; beyond them elements are only counted.
pub const OP_KEEP: usize = 100_000;

/// One element (list, union) or entry (broadcast) of one subtask's operator state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpStateRow {
    /// The subtask that holds it.
    pub subtask: u32,
    /// Its index in that subtask's list, or in its map's key order.
    pub index: u64,
    /// Broadcast key bytes (`None` for list and union elements).
    pub key: Option<Vec<u8>>,
    /// Element or value bytes.
    pub value: Vec<u8>,
    /// The row as typed text, as `statekit dump` prints it (what `/` and `f` match).
    pub line: String,
}

/// What the worker read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpStateRead {
    /// The rows, at most `keep`, in subtask order.
    pub rows: Vec<OpStateRow>,
    /// Rows beyond `keep`, not sent.
    pub not_shown: u64,
    /// Subtasks read (the operator's parallelism).
    pub subtasks: u32,
}

/// The key type of a broadcast state's entries (bytes when it names none).
pub fn key_schema(desc: &OperatorStateDescriptor) -> TypeSchema {
    desc.key_schema.clone().unwrap_or(TypeSchema::Bytes)
}

/// The worker's side: reads state `name` of operator `uid` for every subtask and sends
/// progress (subtasks done / total) and one [`Msg::OpState`] — unless a request newer than
/// `gen` arrives (`latest`), which stops it without an answer.
pub fn run(
    reader: Option<&Snapshot>,
    latest: &AtomicU64,
    gen: u64,
    uid: &str,
    name: &str,
    keep: usize,
    out: &mut dyn FnMut(Msg),
) {
    let cancelled = || latest.load(Ordering::SeqCst) > gen;
    match read(reader, &cancelled, gen, uid, name, keep, out) {
        Some(result) if !cancelled() => out(Msg::OpState { gen, result }),
        _ => {}
    }
}

/// The rows, or the error; `None` when cancelled.
fn read(
    reader: Option<&Snapshot>,
    cancelled: &dyn Fn() -> bool,
    gen: u64,
    uid: &str,
    name: &str,
    keep: usize,
    out: &mut dyn FnMut(Msg),
) -> Option<Result<OpStateRead, ReadError>> {
    let failed = |e: SnapshotError| Some(Err(ReadError::new(e.to_string(), e.kind())));
    let Some(reader) = reader else {
        return Some(Err(ReadError::no_snapshot_open()));
    };
    let op = match reader.operator(uid) {
        Ok(op) => op,
        Err(e) => return failed(e),
    };
    let Some(desc) = op.operator_states.iter().find(|d| d.name == name) else {
        let message = format!("operator {uid:?} has no operator state {name:?}");
        return Some(Err(ReadError::new(message, ErrorKind::Caller)));
    };
    let (vs, ks) = (desc.value_schema.clone(), key_schema(desc));
    let p = op.parallelism;
    let what = format!("reading {name:?}");
    let mut reported: Option<Instant> = None;
    let mut read = OpStateRead {
        rows: Vec::new(),
        not_shown: 0,
        subtasks: p,
    };
    // Each subtask's file is read once, then redistributed at the operator's own parallelism,
    // as `statekit dump` reads it.
    let mut stored = Vec::with_capacity(p as usize);
    for i in 0..p {
        if cancelled() {
            return None;
        }
        if reported.is_none_or(|t| t.elapsed() >= Duration::from_millis(50)) {
            reported = Some(Instant::now());
            out(Msg::Progress {
                gen,
                what: what.clone(),
                done: u64::from(i),
                total: u64::from(p),
                unit: "subtasks",
            });
        }
        match reader.stored_operator_state(uid, i) {
            Ok(s) => stored.push(s),
            Err(e) => return failed(e),
        }
    }
    let subtasks = match statekit_core::redistribute(&stored, p) {
        Ok(s) => s,
        Err(e) => return Some(Err(ReadError::new(e.to_string(), e.kind()))),
    };
    for (i, snap) in (0u32..).zip(subtasks) {
        if cancelled() {
            return None;
        }
        for (d, data) in snap.states {
            if d.name != name {
                continue;
            }
            match data {
                OperatorStateData::List(items) => {
                    for (j, value) in items.into_iter().enumerate() {
                        if read.rows.len() >= keep {
                            read.not_shown += 1;
                            continue;
                        }
                        let line = text::op_element_line(i, j, &vs, &value);
                        read.rows.push(OpStateRow {
                            subtask: i,
                            index: j as u64,
                            key: None,
                            value,
                            line,
                        });
                    }
                }
                OperatorStateData::Broadcast(map) => {
                    for (j, (key, value)) in map.into_iter().enumerate() {
                        if read.rows.len() >= keep {
                            read.not_shown += 1;
                            continue;
                        }
                        let line = text::op_entry_line(i, &ks, &key, &vs, &value);
                        read.rows.push(OpStateRow {
                            subtask: i,
                            index: j as u64,
                            key: Some(key),
                            value,
                            line,
                        });
                    }
                }
            }
        }
    }
    Some(Ok(read))
}
