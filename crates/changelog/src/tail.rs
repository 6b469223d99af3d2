//! The one walk over a changelog handle's tail, as a restore replays it: which change sets
//! apply to which key groups, each checked against the index of its log file, then their
//! records in order. [`crate::restore_into`] applies what it yields, the verifier
//! ([`crate::verify`]) checks it and `statekit dump --changes` lists it, so the three cannot
//! disagree about what a checkpoint replays.

use crate::file::{IndexEntry, LogFileReader, LogId, RecordsError};
use crate::record::Record;
use statekit_core::KeyGroupRange;
use statekit_format::{FormatError, LogSegmentRef, Problem, ResolvedChangelogHandle, ResolvedFile};
use std::collections::HashMap;
use std::ops::ControlFlow;

/// Log files, each opened once (keyed by where it is, as its storage describes it), shared by
/// every handle of a walk: the subtasks of one upload share their log file.
#[derive(Default)]
pub struct LogFiles {
    /// `None`: the file did not open (or, for the verifier, did not verify); its problem was
    /// reported when that was found.
    files: HashMap<String, Option<LogFileReader>>,
}

impl LogFiles {
    /// No file opened yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether `file` was opened (or failed to) already.
    pub fn contains(&self, file: &ResolvedFile) -> bool {
        self.files.contains_key(&file.storage.describe(&file.path))
    }

    /// Records the outcome of opening `file` elsewhere (the verifier decodes each file in
    /// full first): `None` when it failed, so walks skip it without reporting it again.
    pub fn insert(&mut self, file: &ResolvedFile, reader: Option<LogFileReader>) {
        self.files.insert(file.storage.describe(&file.path), reader);
    }

    /// The reader of `file`, opened (header, index and trailer checked against the recorded
    /// size) on first use. `Err(Some(e))` the first time it fails, `Err(None)` after that.
    pub fn open(&mut self, file: &ResolvedFile) -> Result<&LogFileReader, Option<FormatError>> {
        let id = file.storage.describe(&file.path);
        let mut failure = None;
        let entry = self.files.entry(id).or_insert_with(|| {
            match LogFileReader::open(file.storage.as_ref(), &file.path, Some(file.size)) {
                Ok(r) => Some(r),
                Err(e) => {
                    failure = Some(e);
                    None
                }
            }
        });
        entry.as_ref().ok_or(failure)
    }
}

/// Where a replayed record comes from.
#[derive(Clone, Copy, Debug)]
pub struct TailPos<'a> {
    /// The subtask whose handle holds the tail.
    pub subtask: u32,
    /// The index of the segment in the handle's tail.
    pub tail_index: usize,
    /// The segment as `_metadata` references it.
    pub segment: &'a LogSegmentRef,
    /// The log file as errors name it.
    pub shown: &'a str,
    /// The change set's entry in its file's index.
    pub entry: &'a IndexEntry,
}

impl TailPos<'_> {
    /// The log the change set belongs to.
    pub fn log(&self) -> LogId {
        self.entry.log
    }

    /// The change set's sequence number.
    pub fn sqn(&self) -> u64 {
        self.entry.sqn
    }

    /// The change set's offset in its file.
    pub fn offset(&self) -> u64 {
        self.segment.offset
    }
}

/// Something wrong with a segment of a tail. The walk skips the segment after telling it; a
/// restore refuses the checkpoint instead.
#[derive(Debug)]
#[non_exhaustive]
pub enum TailProblem {
    /// A log file does not open (told once per file, whichever handle met it first).
    Open(FormatError),
    /// The change set the tail references is not in its file as referenced (log, sequence
    /// number, length or record count differ, or none starts at the offset): one problem per
    /// field that differs.
    Mismatch(Problem),
    /// The change set does not read or decode (its records before the damage were visited).
    Read(FormatError),
}

impl TailProblem {
    /// The problem as the verifier lists it.
    pub fn problem(&self) -> Problem {
        match self {
            TailProblem::Open(e) | TailProblem::Read(e) => Problem::from(e),
            TailProblem::Mismatch(p) => p.clone(),
        }
    }
}

/// What a walk read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TailStats {
    /// Change sets read (those concerning the walked key groups).
    pub change_sets: usize,
    /// Change sets skipped through the index (none of their key groups walked).
    pub change_sets_skipped: usize,
    /// Records visited.
    pub records: u64,
}

/// A visitor of the records a tail replays: `(position, key group, record)`;
/// [`ControlFlow::Break`] stops the walk.
pub type TailVisitor<'v, E> = dyn FnMut(&TailPos<'_>, u32, Record<'_>) -> Result<ControlFlow<()>, E> + 'v;

/// Walks the tail of `h` as a restore of `range` replays it: each change set whose key groups
/// (the segment's, narrowed to the handle's and to `range`) meet `range`, checked against the
/// index of its file, then its metadata records and the records of those key groups, in
/// order: `f(position, key group, record)`, metadata records with
/// [`crate::META_KEY_GROUP`].
///
/// `problem` is told what is wrong with a segment ([`TailProblem`]); its `Err` ends the walk
/// with that error, its `Ok` skips the segment. `f`'s `Err` ends the walk with its error, its
/// [`ControlFlow::Break`] stops it (returned as is). `uid` names the operator in problems
/// (empty: unknown).
pub fn walk_tail<E>(
    h: &ResolvedChangelogHandle,
    uid: &str,
    range: KeyGroupRange,
    files: &mut LogFiles,
    stats: &mut TailStats,
    problem: &mut dyn FnMut(TailProblem) -> Result<(), E>,
    f: &mut TailVisitor<'_, E>,
) -> Result<ControlFlow<()>, E> {
    let handle_range = h.key_groups.intersection(&range);
    let who = if uid.is_empty() {
        format!("subtask {}", h.subtask)
    } else {
        format!("operator {uid:?}, subtask {}", h.subtask)
    };
    for (k, (seg, file)) in h.handle.tail.iter().zip(&h.tail).enumerate() {
        let effective = seg.key_groups.intersection(&handle_range);
        if effective.is_empty() {
            continue;
        }
        let reader = match files.open(file) {
            Ok(r) => r,
            Err(Some(e)) => {
                problem(TailProblem::Open(e))?;
                continue;
            }
            Err(None) => continue,
        };
        let Some(entry) = find_entry(reader, seg, &format!("{who}, tail[{k}]"), problem)? else {
            continue;
        };
        if !entry.concerns(&effective) {
            stats.change_sets_skipped += 1;
            continue;
        }
        let data = match reader.read(entry) {
            Ok(d) => d,
            Err(e) => {
                problem(TailProblem::Read(e))?;
                continue;
            }
        };
        stats.change_sets += 1;
        let pos = TailPos {
            subtask: h.subtask,
            tail_index: k,
            segment: seg,
            shown: reader.file(),
            entry,
        };
        let r = data.visit_records(Some(&effective), &mut |kg, rec| {
            stats.records += 1;
            f(&pos, kg, rec)
        });
        match r {
            Ok(ControlFlow::Continue(())) => {}
            Ok(ControlFlow::Break(())) => return Ok(ControlFlow::Break(())),
            Err(RecordsError::Visitor(e)) => return Err(e),
            Err(RecordsError::Decode(e)) => problem(TailProblem::Read(e))?,
        }
    }
    Ok(ControlFlow::Continue(()))
}

/// The index entry of the change set tail segment `seg` references, checked against it (log,
/// sequence number, length, records); `None` (after telling `problem` each difference) when
/// it does not match. `who` says which segment of which handle it is.
fn find_entry<'r, E>(
    reader: &'r LogFileReader,
    seg: &LogSegmentRef,
    who: &str,
    problem: &mut dyn FnMut(TailProblem) -> Result<(), E>,
) -> Result<Option<&'r IndexEntry>, E> {
    let file = reader.file();
    let mut mismatch = |field: &str, why: String| {
        problem(TailProblem::Mismatch(
            Problem::corrupt(file, seg.offset, field, why).within(who),
        ))
    };
    let Some(e) = reader.index().iter().find(|e| e.offset == seg.offset) else {
        mismatch(
            "change_set",
            "no change set starts here (the checkpoint references one)".into(),
        )?;
        return Ok(None);
    };
    let mut ok = true;
    if e.log.0 != seg.log {
        mismatch(
            "change_set.log",
            format!(
                "the change set is of log {}, the checkpoint references log {}",
                e.log,
                LogId(seg.log)
            ),
        )?;
        ok = false;
    }
    if e.sqn != seg.sqn {
        mismatch(
            "change_set.sqn",
            format!(
                "the change set has sequence number {}, the checkpoint references {}",
                e.sqn, seg.sqn
            ),
        )?;
        ok = false;
    }
    if e.length != seg.length {
        mismatch(
            "change_set.length",
            format!(
                "the change set is {} bytes, the checkpoint references {}",
                e.length, seg.length
            ),
        )?;
        ok = false;
    }
    if e.records != seg.records {
        mismatch(
            "change_set.records",
            format!(
                "the change set has {} records, the checkpoint references {}",
                e.records, seg.records
            ),
        )?;
        ok = false;
    }
    Ok(ok.then_some(e))
}
