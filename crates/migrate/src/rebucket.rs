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
    key_group_for_key, Entry, EntryVisitor, KeyGroupRange, KeyedStateView, OwnedEntry, StateDescriptor, StateError,
};
use std::cmp::Ordering;
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
    Memory(Vec<u8>),
    File(std::fs::File, PathBuf),
}

impl Drop for Run {
    fn drop(&mut self) {
        if let RunData::File(_, path) = &self.data {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// An entry while sorting: its new key group, its order of arrival (list elements keep their
/// order), and the entry.
struct Sorted {
    key_group: u32,
    seq: u64,
    entry: OwnedEntry,
}

fn cmp_sorted(a: &Sorted, b: &Sorted) -> Ordering {
    a.key_group
        .cmp(&b.key_group)
        .then_with(|| a.entry.as_entry().canonical_cmp(&b.entry.as_entry()))
        .then_with(|| a.seq.cmp(&b.seq))
}

fn encode(out: &mut Vec<u8>, s: &Sorted) {
    let e = &s.entry;
    put_varint(out, s.seq);
    put_varint(out, u64::from(e.state));
    for b in [&e.key, &e.namespace, &e.value] {
        put_varint(out, b.len() as u64);
        out.extend_from_slice(b);
    }
    match &e.user_key {
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

fn decode(buf: &[u8], key_group: u32, out: &mut Vec<(u64, OwnedEntry)>) -> Option<()> {
    let mut pos = 0;
    let bytes = |pos: &mut usize| -> Option<Vec<u8>> {
        let n = usize::try_from(get_varint(buf, pos)?).ok()?;
        let s = buf.get(*pos..pos.checked_add(n)?)?.to_vec();
        *pos += n;
        Some(s)
    };
    while pos < buf.len() {
        let seq = get_varint(buf, &mut pos)?;
        let state = u32::try_from(get_varint(buf, &mut pos)?).ok()?;
        let key = bytes(&mut pos)?;
        let namespace = bytes(&mut pos)?;
        let value = bytes(&mut pos)?;
        let uk_len = usize::try_from(get_varint(buf, &mut pos)?).ok()?;
        let user_key = match uk_len {
            0 => None,
            n => {
                let s = buf.get(pos..pos.checked_add(n - 1)?)?.to_vec();
                pos += n - 1;
                Some(s)
            }
        };
        let has_ts = *buf.get(pos)?;
        pos += 1;
        let timestamp = if has_ts == 1 {
            let b: [u8; 8] = buf.get(pos..pos + 8)?.try_into().ok()?;
            pos += 8;
            Some(i64::from_le_bytes(b))
        } else {
            None
        };
        out.push((
            seq,
            OwnedEntry {
                key_group,
                state,
                key,
                namespace,
                user_key,
                value,
                timestamp,
            },
        ));
    }
    Some(())
}

/// The operator's keyed state re-bucketed for `max_parallelism` key groups, as sorted runs.
pub(crate) struct Rebucketed {
    max_parallelism: u32,
    states: Vec<StateDescriptor>,
    runs: Vec<Run>,
    /// Entries sorted.
    pub(crate) entries: u64,
    /// Runs spilled to files.
    pub(crate) spilled: usize,
}

impl Rebucketed {
    /// Reads every entry of `input` (all its key groups) and sorts them by key group under
    /// `max_parallelism`, holding at most about `memory` bytes of entries at a time; runs
    /// beyond that go to files in `spill_dir`. `threads` read disjoint ranges of the input's
    /// key groups at once, each with its share of `memory` (a key's entries all come from one
    /// input key group, so each list keeps its order).
    pub(crate) fn build(
        input: &MigratedView,
        max_parallelism: u32,
        memory: usize,
        spill_dir: &Path,
        threads: usize,
    ) -> Result<Self, MigrateError> {
        let all = input.key_group_range();
        let threads = u32::try_from(threads.clamp(1, 64)).unwrap_or(1).min(all.len().max(1));
        let share = (memory / threads as usize).max(1);
        let parts: Vec<Result<Rebucketed, MigrateError>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let chunk = KeyGroupRange::for_subtask(all.len(), threads, t);
                    let range = if chunk.is_empty() {
                        chunk
                    } else {
                        KeyGroupRange::new(all.start() + chunk.start(), all.start() + chunk.end_exclusive() - 1)
                    };
                    s.spawn(move || Self::build_part(input, range, max_parallelism, share, spill_dir, t))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(MigrateError::State(StateError::Snapshot(
                            "a re-bucketing thread panicked".into(),
                        )))
                    })
                })
                .collect()
        });
        let mut b = Rebucketed {
            max_parallelism,
            states: input.states().to_vec(),
            runs: Vec::new(),
            entries: 0,
            spilled: 0,
        };
        for part in parts {
            let mut part = part?;
            b.runs.append(&mut part.runs);
            b.entries += part.entries;
            b.spilled += part.spilled;
        }
        Ok(b)
    }

    /// [`Rebucketed::build`] of the input's key groups `range` (runs named after `tag`).
    fn build_part(
        input: &MigratedView,
        range: KeyGroupRange,
        max_parallelism: u32,
        memory: usize,
        spill_dir: &Path,
        tag: u32,
    ) -> Result<Self, MigrateError> {
        let mut b = Rebucketed {
            max_parallelism,
            states: Vec::new(),
            runs: Vec::new(),
            entries: 0,
            spilled: 0,
        };
        let mut buffer: Vec<Sorted> = Vec::new();
        let mut held = 0usize;
        let mut seq = 0u64;
        let mut failure: Option<MigrateError> = None;
        for kg in range {
            let _ = input.visit_key_group(kg, &mut |e: &Entry<'_>| {
                // The entry's bytes, its place in the buffer, and an allocation's overhead for
                // each of its byte strings.
                let size = std::mem::size_of::<Sorted>()
                    + 4 * 16
                    + e.key.len()
                    + e.namespace.len()
                    + e.value.len()
                    + e.user_key.map_or(0, <[u8]>::len);
                buffer.push(Sorted {
                    key_group: key_group_for_key(e.key, max_parallelism),
                    seq,
                    entry: OwnedEntry::from_entry(kg, e),
                });
                seq += 1;
                held += size;
                if held >= memory {
                    if let Err(err) = b.spill(&mut buffer, spill_dir, tag) {
                        failure = Some(err);
                        return Ok(ControlFlow::Break(()));
                    }
                    held = 0;
                }
                Ok(ControlFlow::Continue(()))
            })?;
            if let Some(e) = failure.take() {
                return Err(e);
            }
        }
        b.entries = seq;
        // The last run stays in memory when nothing spilled (everything fit); otherwise it
        // spills too, so the memory bound holds while the output is written.
        if b.spilled > 0 {
            b.spill(&mut buffer, spill_dir, tag)?;
        } else if !buffer.is_empty() {
            buffer.sort_by(cmp_sorted);
            let mut data = Vec::new();
            let index = Self::encode_run(&mut buffer, &mut data).map_err(|e| MigrateError::io(spill_dir, e))?;
            b.runs.push(Run {
                data: RunData::Memory(data),
                index,
            });
        }
        Ok(b)
    }

    /// Encodes the sorted `sorted` into `out`, dropping each entry once written (so memory
    /// is freed as the run is written); returns the run's key-group index.
    fn encode_run(sorted: &mut Vec<Sorted>, out: &mut impl Write) -> std::io::Result<Vec<(u32, u64, u64)>> {
        let mut index: Vec<(u32, u64, u64)> = Vec::new();
        let mut at = 0u64;
        let mut buf = Vec::new();
        for s in sorted.drain(..) {
            buf.clear();
            encode(&mut buf, &s);
            match index.last_mut() {
                Some(last) if last.0 == s.key_group => {}
                _ => index.push((s.key_group, at, at)),
            }
            out.write_all(&buf)?;
            at += buf.len() as u64;
            if let Some(last) = index.last_mut() {
                last.2 = at;
            }
        }
        sorted.shrink_to_fit();
        Ok(index)
    }

    /// Sorts `buffer` and writes it as a run file (emptying it).
    fn spill(&mut self, buffer: &mut Vec<Sorted>, dir: &Path, tag: u32) -> Result<(), MigrateError> {
        buffer.sort_by(cmp_sorted);
        let path = dir.join(format!("run-{tag}-{}", self.runs.len()));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| MigrateError::io(&path, e))?;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
        let index = Self::encode_run(buffer, &mut w).map_err(|e| MigrateError::io(&path, e))?;
        let f = w.into_inner().map_err(|e| MigrateError::io(&path, e.into_error()))?;
        self.runs.push(Run {
            data: RunData::File(f, path),
            index,
        });
        self.spilled += 1;
        Ok(())
    }

    /// The entries of key group `kg` (under the new max parallelism), in canonical order.
    fn key_group(&self, kg: u32) -> Result<Vec<OwnedEntry>, StateError> {
        let mut all: Vec<(u64, OwnedEntry)> = Vec::new();
        for run in &self.runs {
            let Ok(i) = run.index.binary_search_by_key(&kg, |x| x.0) else {
                continue;
            };
            let Some(&(_, start, end)) = run.index.get(i) else {
                continue;
            };
            let owned;
            let bytes: &[u8] = match &run.data {
                RunData::Memory(d) => usize::try_from(start)
                    .ok()
                    .zip(usize::try_from(end).ok())
                    .and_then(|(s, e)| d.get(s..e))
                    .unwrap_or_default(),
                RunData::File(f, path) => {
                    let mut buf = vec![0u8; usize::try_from(end - start).unwrap_or(0)];
                    f.read_exact_at(&mut buf, start)
                        .map_err(|e| StateError::io(path.display().to_string(), e))?;
                    owned = buf;
                    &owned
                }
            };
            decode(bytes, kg, &mut all)
                .ok_or_else(|| StateError::Snapshot(format!("spill run: key group {kg} does not decode")))?;
        }
        all.sort_by(|a, b| {
            a.1.as_entry()
                .canonical_cmp(&b.1.as_entry())
                .then_with(|| a.0.cmp(&b.0))
        });
        Ok(all.into_iter().map(|(_, e)| e).collect())
    }

    /// The view of output key groups `range`.
    pub(crate) fn view(&self, range: KeyGroupRange) -> RebucketedView<'_> {
        RebucketedView { inner: self, range }
    }
}

/// One output subtask's key groups of a [`Rebucketed`] operator.
pub(crate) struct RebucketedView<'r> {
    inner: &'r Rebucketed,
    range: KeyGroupRange,
}

impl KeyedStateView for RebucketedView<'_> {
    fn max_parallelism(&self) -> u32 {
        self.inner.max_parallelism
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
        for e in self.inner.key_group(key_group)? {
            if visitor(&e.as_entry())?.is_break() {
                return Ok(ControlFlow::Break(()));
            }
        }
        Ok(ControlFlow::Continue(()))
    }
}
