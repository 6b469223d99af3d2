//! The worker's half of the diff screen (`statekit inspect A --diff B`, or `d` on two rows
//! of the snapshot list).
//!
//! The comparison is [`statekit_snapshot::diff::diff_snapshots_with_progress`], run by the
//! worker ([`run`], called from `Worker::handle`): it streams the differences to the UI in
//! batches of rows (one row per line `statekit diff` prints), at most `keep` of them (the rest
//! are only counted), reports key groups done / total, and stops as soon as a newer request
//! arrives. The screen model ([`crate::screens::diff::DiffView`]) groups the rows by
//! operator → state → key; [`crate::draw::diff`] draws them.

use super::Msg;
use crate::error::ReadError;
use crate::open::open_side;
use statekit_snapshot::diff::text::{difference_cell, difference_parts};
use statekit_snapshot::diff::{
    diff_snapshots_with_progress, Change, DiffOptions, DiffProgress, DiffSummary, Difference, Side,
};
use std::cell::RefCell;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Rows the inspector keeps of a diff; beyond them differences are only counted.
pub const DIFF_KEEP: usize = 10_000;

/// Rows per message at most.
const BATCH: usize = 256;

/// One side of a comparison.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiffSide {
    /// Its directory or `_metadata` file.
    pub path: PathBuf,
    /// How it is shown (errors name its files by this instead of the path).
    pub label: String,
}

/// A row of the diff list: one line of a difference (a difference, or one map entry or
/// operator-state element of it).
#[derive(Clone, Debug)]
pub struct DiffRow {
    /// The difference (shared by its rows).
    pub diff: Arc<Difference>,
    /// Which of its lines ([`statekit_snapshot::diff::text::difference_cell`]).
    pub part: usize,
    /// The row as typed text (what `f` and `/` match).
    pub line: String,
    /// Its place in the order the comparison found the rows.
    pub(crate) seq: u64,
    /// (operator, state) ordinals by first appearance: the screen sorts by them.
    pub(crate) group: (u32, u32),
}

/// Differences by kind (operators, keyed states, operator states, keys) and change (added,
/// removed, modified); layout-only operator changes are not counted here.
pub type ChangeCounts = [[u64; 3]; 4];

/// How a comparison ended.
#[derive(Clone, Debug)]
pub struct DiffEnd {
    /// The library's summary.
    pub summary: DiffSummary,
    /// Added / removed / modified per kind.
    pub counts: ChangeCounts,
    /// Rows beyond `keep`, not sent.
    pub not_shown: u64,
}

/// A message of a comparison.
#[derive(Clone, Debug)]
pub enum DiffPart {
    /// More rows, in the order the library found them.
    Rows(Vec<DiffRow>),
    /// The end, or the error that stopped it (its files named by the sides' labels).
    Done(Result<DiffEnd, ReadError>),
}

/// `msg` with the sides' paths replaced by their labels.
fn sanitize(msg: &str, sides: &[DiffSide; 2]) -> String {
    let mut pairs: Vec<(String, &str)> = Vec::new();
    for s in sides {
        let mut paths = vec![s.path.clone()];
        if let Ok(c) = s.path.canonicalize() {
            paths.push(c);
        }
        if s.path.is_file() {
            if let Some(p) = s.path.parent() {
                paths.push(p.to_path_buf());
                if let Ok(c) = p.canonicalize() {
                    paths.push(c);
                }
            }
        }
        for p in paths {
            let mut t = p.display().to_string();
            while t.len() > 1 && t.ends_with('/') {
                t.pop();
            }
            pairs.push((t, &s.label));
        }
    }
    pairs.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
    let mut out = msg.to_string();
    for (p, label) in pairs {
        if !p.is_empty() && p != label {
            out = out.replace(&p, label);
        }
    }
    out
}

fn kind_index(d: &Difference) -> usize {
    match d {
        Difference::Operator(_) => 0,
        Difference::State(_) => 1,
        Difference::OperatorState(_) => 2,
        Difference::Key(_) => 3,
    }
}

fn change_index(c: Change) -> usize {
    match c {
        Change::Added => 0,
        Change::Removed => 1,
        Change::Modified => 2,
    }
}

fn change_of(d: &Difference) -> Change {
    match d {
        Difference::Operator(o) => o.change,
        Difference::State(s) => s.change,
        Difference::OperatorState(s) => s.change,
        Difference::Key(k) => k.change,
    }
}

struct Outbox<'o> {
    out: &'o mut dyn FnMut(Msg),
    gen: u64,
    buf: Vec<DiffRow>,
    sent: usize,
    not_shown: u64,
    counts: ChangeCounts,
    seq: u64,
    flushed: Instant,
    reported: Option<Instant>,
}

impl Outbox<'_> {
    fn flush(&mut self) {
        if !self.buf.is_empty() {
            let rows = std::mem::take(&mut self.buf);
            (self.out)(Msg::Diff {
                gen: self.gen,
                part: DiffPart::Rows(rows),
            });
        }
        self.flushed = Instant::now();
    }
}

/// The worker's side: compares `sides[0]` (old) with `sides[1]` (new) and sends rows in
/// batches, progress, and one [`DiffPart::Done`] — unless a request newer than `gen`
/// arrives (`latest`), which stops it without an answer.
pub fn run(latest: &AtomicU64, gen: u64, sides: &[DiffSide; 2], keep: usize, out: &mut dyn FnMut(Msg)) {
    let cancelled = || latest.load(Ordering::SeqCst) > gen;
    let done = |out: &mut dyn FnMut(Msg), r: Result<DiffEnd, ReadError>| {
        out(Msg::Diff {
            gen,
            part: DiffPart::Done(r),
        })
    };
    out(Msg::Progress {
        gen,
        what: "opening both snapshots".into(),
        done: 0,
        total: 0,
        unit: "",
    });
    let open = |s: &DiffSide| {
        open_side(&s.path, &Default::default()).map_err(|e| ReadError::new(sanitize(&e.to_string(), sides), e.kind()))
    };
    let ra = match open(&sides[0]) {
        Ok(r) => r,
        Err(e) => return done(out, Err(e)),
    };
    let rb = match open(&sides[1]) {
        Ok(r) => r,
        Err(e) => return done(out, Err(e)),
    };
    let st = RefCell::new(Outbox {
        out,
        gen,
        buf: Vec::new(),
        sent: 0,
        not_shown: 0,
        counts: [[0; 3]; 4],
        seq: 0,
        flushed: Instant::now(),
        reported: None,
    });
    let mut sink = |d: Difference| -> ControlFlow<()> {
        if cancelled() {
            return ControlFlow::Break(());
        }
        let mut s = st.borrow_mut();
        if d.counts() {
            s.counts[kind_index(&d)][change_index(change_of(&d))] += 1;
        }
        let parts = difference_parts(&d);
        let d = Arc::new(d);
        for part in 0..parts {
            if s.sent >= keep {
                s.not_shown += (parts - part) as u64;
                break;
            }
            let Some(c) = difference_cell(&d, part, false) else {
                break;
            };
            let line = format!("{} {} {} {} {}", c.sign, c.uid, c.state, c.key, c.what);
            let seq = s.seq;
            s.seq += 1;
            s.sent += 1;
            s.buf.push(DiffRow {
                diff: d.clone(),
                part,
                line,
                seq,
                group: (0, 0),
            });
        }
        if s.buf.len() >= BATCH || s.flushed.elapsed() >= Duration::from_millis(100) {
            s.flush();
        }
        ControlFlow::Continue(())
    };
    let mut progress = |p: DiffProgress| -> bool {
        if cancelled() {
            return false;
        }
        let mut s = st.borrow_mut();
        if s.reported.is_none_or(|t| t.elapsed() >= Duration::from_millis(50)) {
            s.reported = Some(Instant::now());
            (s.out)(Msg::Progress {
                gen,
                what: "comparing".into(),
                done: p.done,
                total: p.total,
                unit: "key groups",
            });
        }
        if !s.buf.is_empty() && s.flushed.elapsed() >= Duration::from_millis(100) {
            s.flush();
        }
        true
    };
    let result = diff_snapshots_with_progress(
        Side {
            label: &sides[0].label,
            snapshot: &ra,
        },
        Side {
            label: &sides[1].label,
            snapshot: &rb,
        },
        &DiffOptions::default(),
        &mut sink,
        &mut progress,
    );
    let mut s = st.into_inner();
    if cancelled() {
        return;
    }
    s.flush();
    let end = match result {
        Ok(summary) => Ok(DiffEnd {
            summary,
            counts: s.counts,
            not_shown: s.not_shown,
        }),
        Err(e) => Err(ReadError::new(
            sanitize(&statekit_core::text::error_text(&e), sides),
            e.kind(),
        )),
    };
    done(s.out, end);
}
