//! A new max parallelism: every key moves to its key group under the new number of key groups.
//! One pass reads the operator's keyed state (through the same [`MigratedView`] as every
//! migration: renames, drops, filters applied) and sorts the entries by new key group with a
//! bounded buffer, spilling sorted runs to files; each run keeps an index of where each key
//! group's entries start, so the output view reads one key group from every run (positioned
//! reads: any thread, any order) and puts it in canonical order.

use crate::view::MigratedView;
use crate::MigrateError;
use statekit_core::schema::{get_varint, put_varint};
use statekit_core::{
    Entry, EntryVisitor, KeyGroupAssigner, KeyGroupRange, KeyGroupScheme, KeyedStateView, StateDescriptor, StateError,
};
use std::io::Write;
use std::ops::ControlFlow;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// One sorted run: its entries (in memory, or in a spill file), and per key group the byte
/// range they take.
struct Run {
    data: RunData,
    /// (key group, start, end), ascending.
    index: Vec<(u32, u64, u64)>,
}

enum RunData {
    /// The collected records themselves, sorted by slot; the index ranges are slot indices.
    Memory(Collect),
    /// A spill file; the index ranges are byte offsets.
    File(std::fs::File, PathBuf),
}

impl Drop for Run {
    fn drop(&mut self) {
        if let RunData::File(_, path) = &self.data {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// An entry while a run is collected: its new key group, and where its record (as
/// [`encode`] writes it) lies in the run's arena. Records are appended in order of arrival,
/// so the offset orders them as they came (list elements keep their order).
#[derive(Clone, Copy)]
struct Slot {
    key_group: u32,
    offset: u64,
    len: u32,
}

/// Bytes a [`Slot`] takes in the buffer.
const SLOT_BYTES: usize = std::mem::size_of::<Slot>();

/// A run's key group of at most this many records is sorted as decoded entries (a few MiB
/// beside the run); a larger one by decoding records as they are compared.
const SORT_DECODED_MAX: usize = 1 << 15;

/// Appends `e`'s record: its arrival number `seq`, state, key, namespace, value, user key
/// and timestamp.
fn encode(out: &mut Vec<u8>, seq: u64, e: &Entry<'_>) {
    put_varint(out, seq);
    put_varint(out, u64::from(e.state));
    for b in [e.key, e.namespace, e.value] {
        put_varint(out, b.len() as u64);
        out.extend_from_slice(b);
    }
    match e.user_key {
        Some(uk) => {
            put_varint(out, uk.len() as u64 + 1);
            out.extend_from_slice(uk);
        }
        None => put_varint(out, 0),
    }
    match e.timestamp {
        Some(t) => {
            out.push(1);
            out.extend_from_slice(&t.to_le_bytes());
        }
        None => out.push(0),
    }
}

/// Decodes the one record at the start of `buf`: (arrival number, entry borrowing `buf`) and
/// the bytes it takes; `None` when `buf` does not start with a whole record.
fn decode_one(buf: &[u8]) -> Option<((u64, Entry<'_>), usize)> {
    let mut pos = 0;
    let bytes = |pos: &mut usize| -> Option<&[u8]> {
        let n = usize::try_from(get_varint(buf, pos)?).ok()?;
        let s = buf.get(*pos..pos.checked_add(n)?)?;
        *pos += n;
        Some(s)
    };
    let seq = get_varint(buf, &mut pos)?;
    let state = u32::try_from(get_varint(buf, &mut pos)?).ok()?;
    let key = bytes(&mut pos)?;
    let namespace = bytes(&mut pos)?;
    let value = bytes(&mut pos)?;
    let uk_len = usize::try_from(get_varint(buf, &mut pos)?).ok()?;
    let user_key = match uk_len {
        0 => None,
        n => {
            let s = buf.get(pos..pos.checked_add(n - 1)?)?;
            pos += n - 1;
            Some(s)
        }
    };
    let has_ts = *buf.get(pos)?;
    pos += 1;
    let timestamp = if has_ts == 1 {
        let b: [u8; 8] = buf.get(pos..pos.checked_add(8)?)?.try_into().ok()?;
        pos += 8;
        Some(i64::from_le_bytes(b))
    } else {
        None
    };
    Some((
        (
            seq,
            Entry {
                state,
                key,
                namespace,
                user_key,
                value,
                timestamp,
            },
        ),
        pos,
    ))
}

/// The order records leave a run in, and the merge of runs: canonical entry order, then
/// arrival number (a list's elements keep their order).
fn record_cmp(a: &(u64, Entry<'_>), b: &(u64, Entry<'_>)) -> std::cmp::Ordering {
    a.1.canonical_cmp(&b.1).then_with(|| a.0.cmp(&b.0))
}

/// The records of one run being collected: an arena of encoded records and a slot each,
/// both allocated once for the run's share of memory (so no growth ever doubles it).
struct Collect {
    arena: Vec<u8>,
    slots: Vec<Slot>,
}

impl Collect {
    /// A run of at most about `memory` bytes: seven eighths for records, one for slots.
    fn with_memory(memory: usize) -> Self {
        let slots = (memory / 8 / SLOT_BYTES).max(16);
        Collect {
            arena: Vec::with_capacity(memory.saturating_sub(slots * SLOT_BYTES).max(4096)),
            slots: Vec::with_capacity(slots),
        }
    }

    fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Whether a record of about `bytes` still fits without growing the buffers (an empty
    /// run takes any record).
    fn fits(&self, bytes: usize) -> bool {
        self.is_empty()
            || (self.slots.len() < self.slots.capacity() && self.arena.len() + bytes <= self.arena.capacity())
    }

    /// Orders the records by new key group, and within one in canonical order (then arrival):
    /// each run is a sorted stream per key group, so reading a key group merges the runs'
    /// streams and never holds it whole (one hot key of millions of rows stays within memory).
    fn sort(&mut self) {
        self.slots.sort_unstable_by_key(|s| (s.key_group, s.offset));
        let arena = &self.arena;
        let mut start = 0;
        // Small key groups are decoded once and sorted as entries; a large one is sorted by
        // decoding the two records of each comparison (no entry per record held).
        let mut decoded: Vec<((u64, Entry<'_>), Slot)> = Vec::new();
        while start < self.slots.len() {
            let kg = self.slots.get(start).map_or(0, |s| s.key_group);
            let len = self
                .slots
                .get(start..)
                .map_or(0, |rest| rest.iter().take_while(|s| s.key_group == kg).count())
                .max(1);
            let Some(group) = self.slots.get_mut(start..start + len) else {
                break;
            };
            let record = |s: &Slot| {
                let at = usize::try_from(s.offset).ok()?;
                decode_one(arena.get(at..at.checked_add(s.len as usize)?)?).map(|(r, _)| r)
            };
            if len <= SORT_DECODED_MAX {
                decoded.clear();
                decoded.extend(group.iter().filter_map(|s| record(s).map(|r| (r, *s))));
                if decoded.len() == group.len() {
                    decoded.sort_by(|a, b| record_cmp(&a.0, &b.0).then_with(|| a.1.offset.cmp(&b.1.offset)));
                    for (slot, (_, s)) in group.iter_mut().zip(&decoded) {
                        *slot = *s;
                    }
                }
            } else {
                group.sort_by(|a, b| match (record(a), record(b)) {
                    (Some(x), Some(y)) => record_cmp(&x, &y).then_with(|| a.offset.cmp(&b.offset)),
                    _ => a.offset.cmp(&b.offset),
                });
            }
            start += len;
        }
    }

    /// The record of `slot`.
    fn record(&self, slot: &Slot) -> Option<&[u8]> {
        let start = usize::try_from(slot.offset).ok()?;
        self.arena.get(start..start.checked_add(slot.len as usize)?)
    }

    /// The key-group index of the sorted run as slot ranges.
    fn slot_index(&self) -> Vec<(u32, u64, u64)> {
        let mut index: Vec<(u32, u64, u64)> = Vec::new();
        for (i, s) in self.slots.iter().enumerate() {
            match index.last_mut() {
                Some(last) if last.0 == s.key_group => last.2 = i as u64 + 1,
                _ => index.push((s.key_group, i as u64, i as u64 + 1)),
            }
        }
        index
    }

    /// Writes the sorted records to `out` and empties the run (keeping its buffers); returns
    /// the key-group index as byte ranges.
    fn write_run(&mut self, out: &mut impl Write) -> std::io::Result<Vec<(u32, u64, u64)>> {
        let mut index: Vec<(u32, u64, u64)> = Vec::new();
        let mut at = 0u64;
        for s in &self.slots {
            let rec = self
                .record(s)
                .ok_or_else(|| std::io::Error::other("re-bucketing: a record outside its run"))?;
            match index.last_mut() {
                Some(last) if last.0 == s.key_group => {}
                _ => index.push((s.key_group, at, at)),
            }
            out.write_all(rec)?;
            at += rec.len() as u64;
            if let Some(last) = index.last_mut() {
                last.2 = at;
            }
        }
        self.arena.clear();
        self.slots.clear();
        Ok(index)
    }
}

/// Entries that arrive in any order, sorted into key-group order under a max parallelism
/// with bounded memory: records collect in one buffer of about `memory` bytes; a full buffer
/// is sorted by key group and spilled to a run file. [`EntrySorter::finish`] gives the sorted
/// entries, read key group by key group in canonical order ([`SortedEntries::view`]). Used
/// to re-bucket an operator for a new max parallelism and to import tables.
pub struct EntrySorter {
    sorted: SortedEntries,
    /// Per state: its key-group rule at the sorter's max parallelism.
    groups: Vec<KeyGroupAssigner>,
    run: Collect,
    spill_dir: PathBuf,
    tag: String,
}

impl std::fmt::Debug for EntrySorter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EntrySorter")
            .field("max_parallelism", &self.sorted.max_parallelism)
            .field("entries", &self.sorted.entries)
            .field("spilled", &self.sorted.spilled)
            .finish()
    }
}

impl EntrySorter {
    /// A sorter of entries of `states` into `max_parallelism` key groups, holding about
    /// `memory` bytes; run files go to the existing directory `spill_dir`, named
    /// `run-<tag>-<n>` (sorters sharing a directory need distinct tags).
    pub fn new(states: &[StateDescriptor], max_parallelism: u32, memory: usize, spill_dir: &Path, tag: &str) -> Self {
        EntrySorter {
            groups: Self::assigners(states, KeyGroupScheme::Statekit, max_parallelism),
            sorted: SortedEntries {
                max_parallelism,
                scheme: KeyGroupScheme::Statekit,
                states: states.to_vec(),
                runs: Vec::new(),
                entries: 0,
                spilled: 0,
                memory,
            },
            run: Collect::with_memory(memory),
            spill_dir: spill_dir.to_path_buf(),
            tag: tag.to_string(),
        }
    }

    /// The same sorter placing keys by `scheme` (statekit's rule unless set): Apache
    /// Flink's for state that came from Flink.
    pub fn with_key_group_scheme(mut self, scheme: KeyGroupScheme) -> Self {
        self.groups = Self::assigners(&self.sorted.states, scheme, self.sorted.max_parallelism);
        self.sorted.scheme = scheme;
        self
    }

    fn assigners(states: &[StateDescriptor], scheme: KeyGroupScheme, max_parallelism: u32) -> Vec<KeyGroupAssigner> {
        states
            .iter()
            .map(|d| scheme.assigner(&d.key_schema, max_parallelism))
            .collect()
    }

    /// Adds `e` (its key group is that of its key under the sorter's scheme and max
    /// parallelism); `order` breaks ties between entries that sort equal (list elements of
    /// one list).
    pub fn push(&mut self, e: &Entry<'_>, order: u64) -> Result<(), MigrateError> {
        let key_group = self
            .groups
            .get(e.state as usize)
            .ok_or_else(|| MigrateError::State(StateError::UnknownState(e.state.to_string())))?
            .key_group(e.key)
            .map_err(|err| MigrateError::State(StateError::Other(Box::new(err))))?;
        // Varints, tags and a timestamp: at most 48 bytes besides the byte strings.
        let size = 48 + e.key.len() + e.namespace.len() + e.value.len() + e.user_key.map_or(0, <[u8]>::len);
        if !self.run.fits(size) {
            self.spill()?;
        }
        let offset = self.run.arena.len();
        encode(&mut self.run.arena, order, e);
        let len = u32::try_from(self.run.arena.len() - offset).unwrap_or(u32::MAX);
        self.run.slots.push(Slot {
            key_group,
            offset: offset as u64,
            len,
        });
        self.sorted.entries += 1;
        Ok(())
    }

    /// Entries pushed so far.
    pub fn entries(&self) -> u64 {
        self.sorted.entries
    }

    /// The sorted entries. The last run stays in memory when nothing spilled (everything
    /// fit); otherwise it spills too, so the memory bound holds while the output is read.
    pub fn finish(mut self) -> Result<SortedEntries, MigrateError> {
        if self.sorted.spilled > 0 {
            if !self.run.is_empty() {
                self.spill()?;
            }
        } else if !self.run.is_empty() {
            self.run.sort();
            let index = self.run.slot_index();
            let run = std::mem::replace(&mut self.run, Collect::with_memory(0));
            self.sorted.runs.push(Run {
                data: RunData::Memory(run),
                index,
            });
        }
        Ok(self.sorted)
    }

    /// Sorts the collected run and writes it as a run file (emptying it).
    fn spill(&mut self) -> Result<(), MigrateError> {
        let path = self
            .spill_dir
            .join(format!("run-{}-{}", self.tag, self.sorted.runs.len()));
        self.sorted.spill(&mut self.run, &path)
    }
}

/// Entries sorted by key group, as sorted runs (from an [`EntrySorter`]).
pub struct SortedEntries {
    max_parallelism: u32,
    scheme: KeyGroupScheme,
    states: Vec<StateDescriptor>,
    runs: Vec<Run>,
    /// Entries sorted.
    entries: u64,
    /// Runs spilled to files.
    spilled: usize,
    /// The memory the entries were sorted with: spilled runs are read back through buffers
    /// sharing half of it.
    memory: usize,
}

impl std::fmt::Debug for SortedEntries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SortedEntries")
            .field("max_parallelism", &self.max_parallelism)
            .field("entries", &self.entries)
            .field("runs", &self.runs.len())
            .field("spilled", &self.spilled)
            .finish()
    }
}

impl SortedEntries {
    /// Entries sorted.
    pub fn entries(&self) -> u64 {
        self.entries
    }

    /// Runs spilled to files.
    pub fn spilled(&self) -> usize {
        self.spilled
    }

    /// Reads every entry of `input` (all its key groups) and sorts them by key group under
    /// `max_parallelism`, holding at most about `memory` bytes of entries at a time; runs
    /// beyond that go to files in `spill_dir`. `threads` read disjoint ranges of the input's
    /// key groups at once, each with its share of `memory` (a key's entries all come from one
    /// input key group, so each list keeps its order).
    pub(crate) fn rebucket(
        input: &MigratedView,
        max_parallelism: u32,
        memory: usize,
        spill_dir: &Path,
        threads: usize,
    ) -> Result<Self, MigrateError> {
        let all = input.key_group_range();
        let threads = u32::try_from(threads.clamp(1, 64)).unwrap_or(1).min(all.len().max(1));
        let share = (memory / threads as usize).max(1);
        let parts: Vec<Result<SortedEntries, MigrateError>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let chunk = KeyGroupRange::for_subtask(all.len(), threads, t);
                    let range = if chunk.is_empty() {
                        chunk
                    } else {
                        KeyGroupRange::new(all.start() + chunk.start(), all.start() + chunk.end_exclusive() - 1)
                    };
                    s.spawn(move || {
                        let mut sorter =
                            EntrySorter::new(input.states(), max_parallelism, share, spill_dir, &t.to_string())
                                .with_key_group_scheme(input.key_group_scheme());
                        let mut failure: Option<MigrateError> = None;
                        for kg in range {
                            let _ = input.visit_key_group(kg, &mut |e: &Entry<'_>| {
                                // Arrival order: a list's elements keep theirs.
                                let order = sorter.entries();
                                if let Err(err) = sorter.push(e, order) {
                                    failure = Some(err);
                                    return Ok(ControlFlow::Break(()));
                                }
                                Ok(ControlFlow::Continue(()))
                            })?;
                            if let Some(e) = failure.take() {
                                return Err(e);
                            }
                        }
                        sorter.finish()
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(MigrateError::State(StateError::Stream(
                            statekit_core::StreamProblem::ThreadPanicked { what: "a re-bucketing" },
                        )))
                    })
                })
                .collect()
        });
        let mut b = SortedEntries {
            max_parallelism,
            scheme: input.key_group_scheme(),
            states: input.states().to_vec(),
            runs: Vec::new(),
            entries: 0,
            spilled: 0,
            memory,
        };
        for part in parts {
            let mut part = part?;
            b.runs.append(&mut part.runs);
            b.entries += part.entries;
            b.spilled += part.spilled;
        }
        Ok(b)
    }

    /// Sorts `run` and writes it as the run file `path` (emptying it).
    fn spill(&mut self, run: &mut Collect, path: &Path) -> Result<(), MigrateError> {
        run.sort();
        let path = path.to_path_buf();
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| MigrateError::io(&path, e))?;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
        let index = run.write_run(&mut w).map_err(|e| MigrateError::io(&path, e))?;
        let f = w.into_inner().map_err(|e| MigrateError::io(&path, e.into_error()))?;
        self.runs.push(Run {
            data: RunData::File(f, path),
            index,
        });
        self.spilled += 1;
        Ok(())
    }

    /// Calls `visitor` with the entries of key group `kg` (under the new max parallelism),
    /// in canonical order: a merge of the runs' records of `kg` (each run holds them sorted),
    /// their arrival numbers breaking ties. Spilled runs are read through a small buffer each
    /// (positioned reads), so a key group larger than memory — one key with millions of list
    /// elements — streams through without being held.
    fn visit(&self, kg: u32, visitor: &mut EntryVisitor<'_>) -> Result<ControlFlow<()>, StateError> {
        let corrupt = || StateError::Stream(statekit_core::StreamProblem::UndecodableRunRecord { key_group: kg });
        let chunk = (self.memory / 2 / self.runs.len().max(1)).clamp(4 << 10, 256 << 10);
        let mut cursors: Vec<Cursor<'_>> = Vec::new();
        for run in &self.runs {
            let Ok(i) = run.index.binary_search_by_key(&kg, |x| x.0) else {
                continue;
            };
            let Some(&(_, start, end)) = run.index.get(i) else {
                continue;
            };
            cursors.push(match &run.data {
                RunData::Memory(c) => {
                    let slots = usize::try_from(start)
                        .ok()
                        .zip(usize::try_from(end).ok())
                        .and_then(|(s, e)| c.slots.get(s..e))
                        .unwrap_or_default();
                    Cursor::Memory { run: c, slots }
                }
                RunData::File(f, path) => {
                    let mut c = Cursor::File {
                        file: f,
                        path,
                        next: start,
                        end,
                        buf: Vec::new(),
                        at: 0,
                        chunk,
                    };
                    c.fill().map_err(|e| StateError::io(path.display().to_string(), e))?;
                    c
                }
            });
        }
        // Cursors with a record left, ordered by their head records (then run order).
        let cmp = |cursors: &[Cursor<'_>], a: usize, b: usize| -> Result<std::cmp::Ordering, StateError> {
            let x = cursors.get(a).and_then(Cursor::head).ok_or_else(corrupt)?;
            let y = cursors.get(b).and_then(Cursor::head).ok_or_else(corrupt)?;
            Ok(record_cmp(&x, &y).then(a.cmp(&b)))
        };
        let mut live: Vec<usize> = Vec::with_capacity(cursors.len());
        for i in 0..cursors.len() {
            if cursors.get(i).is_some_and(Cursor::has_record) {
                let mut failure = None;
                let at = live.partition_point(|&j| match cmp(&cursors, j, i) {
                    Ok(o) => o.is_lt(),
                    Err(e) => {
                        failure = Some(e);
                        false
                    }
                });
                if let Some(e) = failure {
                    return Err(e);
                }
                live.insert(at, i);
            }
        }
        while let Some(&first) = live.first() {
            let cursor = cursors.get_mut(first).ok_or_else(corrupt)?;
            let (_, e) = cursor.head().ok_or_else(corrupt)?;
            if visitor(&e)?.is_break() {
                return Ok(ControlFlow::Break(()));
            }
            cursor.advance().map_err(|e| StateError::io(cursor.describe(), e))?;
            live.remove(0);
            if cursor.has_record() {
                let mut failure = None;
                let at = live.partition_point(|&j| match cmp(&cursors, j, first) {
                    Ok(o) => o.is_lt(),
                    Err(e) => {
                        failure = Some(e);
                        false
                    }
                });
                if let Some(e) = failure {
                    return Err(e);
                }
                live.insert(at, first);
            }
        }
        Ok(ControlFlow::Continue(()))
    }

    /// The view of key groups `range` (one output subtask's).
    pub fn view(&self, range: KeyGroupRange) -> SortedView<'_> {
        SortedView { inner: self, range }
    }
}

/// One run's records of one key group, read in order: a slice of an in-memory run's slots,
/// or a byte range of a spill file read through a buffer of about `chunk` bytes (grown only
/// for a record larger than it).
enum Cursor<'r> {
    Memory {
        run: &'r Collect,
        slots: &'r [Slot],
    },
    File {
        file: &'r std::fs::File,
        path: &'r Path,
        /// The next byte of the file to read, and the end of the key group's range.
        next: u64,
        end: u64,
        /// Bytes read and not yet consumed: `buf[at..]`.
        buf: Vec<u8>,
        at: usize,
        chunk: usize,
    },
}

impl Cursor<'_> {
    /// Whether a record is left.
    fn has_record(&self) -> bool {
        match self {
            Cursor::Memory { slots, .. } => !slots.is_empty(),
            Cursor::File { buf, at, .. } => *at < buf.len(),
        }
    }

    /// The current record; `None` when none is left or it does not decode.
    fn head(&self) -> Option<(u64, Entry<'_>)> {
        match self {
            Cursor::Memory { run, slots } => decode_one(run.record(slots.first()?)?).map(|(r, _)| r),
            Cursor::File { buf, at, .. } => decode_one(buf.get(*at..)?).map(|(r, _)| r),
        }
    }

    /// Moves past the current record (and reads on, for a file, until the next is whole).
    fn advance(&mut self) -> std::io::Result<()> {
        match self {
            Cursor::Memory { slots, .. } => {
                *slots = slots.get(1..).unwrap_or_default();
                Ok(())
            }
            Cursor::File { buf, at, .. } => {
                let used = buf
                    .get(*at..)
                    .and_then(decode_one)
                    .map(|(_, n)| n)
                    .ok_or_else(|| std::io::Error::other("a spilled record does not decode"))?;
                *at += used;
                self.fill()
            }
        }
    }

    /// Reads until the buffer starts with a whole record, or the range is read. A range that
    /// ends inside a record is an error.
    fn fill(&mut self) -> std::io::Result<()> {
        let Cursor::File {
            file,
            next,
            end,
            buf,
            at,
            chunk,
            ..
        } = self
        else {
            return Ok(());
        };
        loop {
            let rest = buf.get(*at..).unwrap_or_default();
            if !rest.is_empty() && decode_one(rest).is_some() {
                return Ok(());
            }
            if *next >= *end {
                if rest.is_empty() {
                    return Ok(());
                }
                return Err(std::io::Error::other("a spilled run ends inside a record"));
            }
            // Keep the unconsumed bytes, then read up to a chunk more (more when one record
            // is larger than a chunk).
            buf.drain(..*at);
            *at = 0;
            let want = (*chunk)
                .max(buf.len() * 2)
                .min(usize::try_from(*end - *next).unwrap_or(usize::MAX));
            let old = buf.len();
            buf.resize(old + want, 0);
            let got = buf.get_mut(old..).unwrap_or_default();
            file.read_exact_at(got, *next)?;
            *next += want as u64;
        }
    }

    /// The run, for errors.
    fn describe(&self) -> String {
        match self {
            Cursor::Memory { .. } => "an in-memory sorted run".to_string(),
            Cursor::File { path, .. } => path.display().to_string(),
        }
    }
}

/// One output subtask's key groups of [`SortedEntries`].
#[derive(Debug)]
pub struct SortedView<'r> {
    inner: &'r SortedEntries,
    range: KeyGroupRange,
}

impl KeyedStateView for SortedView<'_> {
    fn max_parallelism(&self) -> u32 {
        self.inner.max_parallelism
    }

    fn key_group_scheme(&self) -> KeyGroupScheme {
        self.inner.scheme
    }

    fn key_group_range(&self) -> KeyGroupRange {
        self.range
    }

    fn states(&self) -> &[StateDescriptor] {
        &self.inner.states
    }

    fn visit_key_group(&self, key_group: u32, visitor: &mut EntryVisitor<'_>) -> Result<ControlFlow<()>, StateError> {
        if !self.range.contains(key_group) {
            return Ok(ControlFlow::Continue(()));
        }
        self.inner.visit(key_group, visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use statekit_core::TypeSchema;

    /// The entries of every key group of `sorted`, in visit order: (state, key, value).
    fn visit_all(sorted: &SortedEntries) -> Vec<(u32, u32, Vec<u8>, Vec<u8>)> {
        let view = sorted.view(KeyGroupRange::new(0, sorted.max_parallelism - 1));
        let mut out = Vec::new();
        for kg in 0..sorted.max_parallelism {
            let flow = view
                .visit_key_group(kg, &mut |e| {
                    out.push((kg, e.state, e.key.to_vec(), e.value.to_vec()));
                    Ok(ControlFlow::Continue(()))
                })
                .expect("visit");
            assert!(flow.is_continue());
        }
        out
    }

    /// One key with many list elements beside other keys, sorted with little memory (many
    /// spilled runs): each key group comes back by merging the runs' streams — canonical
    /// order, every entry once, the hot list in arrival order.
    #[test]
    fn a_hot_key_streams_through_the_merge_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let states = vec![
            StateDescriptor::list("l", TypeSchema::I64, TypeSchema::I64),
            StateDescriptor::value("v", TypeSchema::I64, TypeSchema::I64),
        ];
        let mut sorter = EntrySorter::new(&states, 16, 64 << 10, dir.path(), "t");
        let n = 40_000u64;
        let mut others = 0u64;
        for i in 0..n {
            let v = i.to_be_bytes();
            let hot = Entry {
                state: 0,
                key: b"hot",
                namespace: b"",
                user_key: None,
                value: &v,
                timestamp: None,
            };
            sorter.push(&hot, i).expect("push");
            if i % 7 == 0 {
                // Other keys arrive in reverse order, in the same key groups as the hot one.
                let k = (n - i).to_be_bytes();
                let e = Entry {
                    state: (i % 2) as u32,
                    key: &k,
                    ..hot
                };
                sorter.push(&e, i).expect("push");
                others += 1;
            }
        }
        let sorted = sorter.finish().expect("finish");
        assert!(sorted.spilled() > 4, "{sorted:?}");
        let all = visit_all(&sorted);
        assert_eq!(all.len() as u64, n + others);
        for w in all.windows(2) {
            let (a, b) = (&w[0], &w[1]);
            assert!(
                (a.0, a.1, &a.2) <= (b.0, b.1, &b.2),
                "canonical order: {a:?} before {b:?}"
            );
        }
        let hot: Vec<u64> = all
            .iter()
            .filter(|e| e.1 == 0 && e.2 == b"hot")
            .map(|e| u64::from_be_bytes(e.3.as_slice().try_into().expect("8 bytes")))
            .collect();
        assert_eq!(hot, (0..n).collect::<Vec<_>>(), "the list keeps its order");
    }

    /// Nothing spilled: the one in-memory run is sorted in canonical order too.
    #[test]
    fn an_in_memory_run_is_read_in_canonical_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let states = vec![StateDescriptor::value("v", TypeSchema::I64, TypeSchema::I64)];
        let mut sorter = EntrySorter::new(&states, 4, 64 << 20, dir.path(), "t");
        for i in (0..1000u64).rev() {
            let k = i.to_be_bytes();
            let e = Entry {
                state: 0,
                key: &k,
                namespace: b"",
                user_key: None,
                value: b"v",
                timestamp: None,
            };
            sorter.push(&e, 1000 - i).expect("push");
        }
        let sorted = sorter.finish().expect("finish");
        assert_eq!(sorted.spilled(), 0);
        let all = visit_all(&sorted);
        assert_eq!(all.len(), 1000);
        assert!(all.windows(2).all(|w| (w[0].0, &w[0].2) < (w[1].0, &w[1].2)));
    }
}
