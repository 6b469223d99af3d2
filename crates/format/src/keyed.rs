//! Keyed data files: the canonical entry stream of one subtask, one section of blocks per
//! non-empty key group (`docs/format.md` §"Keyed data files").
#![deny(clippy::indexing_slicing)]

use crate::block::{BlockDecoder, BlockHeader, Compression, WriteOptions, BLOCK_HEADER_LEN, CODEC_LZ4, CODEC_NONE};
use crate::container::{self, ContainerWriter, Layout, Section, KEYED};
use crate::error::FormatError;
use crate::error::{EntryRefused, WriteProblem};
use crate::metadata::{FileRef, FileScope};
use crate::pipeline::{self, BlockSink};
use crate::wire::{
    check_state_descriptor, get_state_descriptor, put_state_descriptor, put_u32, put_u64, Cursor, Result,
};
use statekit_core::keygroup::check_max_parallelism;
use statekit_core::schema::{get_varint, put_varint};
use statekit_core::storage::{Blob, Storage};
use statekit_core::stream::{check_entry_shape, check_entry_values};
use statekit_core::{Entry, EntryVisitor, KeyGroupRange, KeyedStateKind, KeyedStateView, StateDescriptor, StateError};
use std::cell::Cell;
use std::cmp::Ordering;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::Arc;

/// Record tag bit: state, key and namespace are those of the previous record of the block.
const REC_SAME_PREFIX: u8 = 1;

/// Where one non-empty key group lies in a keyed data file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyGroupInfo {
    /// The key group.
    pub key_group: u32,
    /// Absolute offset of its first block.
    pub offset: u64,
    /// Bytes of its blocks on disk, block headers included (`offset..offset + stored_bytes`
    /// is everything a reader of this key group touches).
    pub stored_bytes: u64,
    /// Uncompressed record bytes.
    pub raw_bytes: u64,
    /// Entries.
    pub entries: u64,
}

/// Totals of one state in a keyed data file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateStats {
    /// State name.
    pub name: String,
    /// Entries (list elements and map entries count one each).
    pub entries: u64,
    /// Uncompressed record bytes of its entries.
    pub raw_bytes: u64,
}

/// What a keyed data file holds, from its index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyedFileInfo {
    /// The file: scope [`FileScope::Exclusive`], the path as given to the writer or reader,
    /// and its size.
    pub file: FileRef,
    /// Entries in the file.
    pub entries: u64,
    /// Uncompressed record bytes in the file.
    pub raw_bytes: u64,
    /// The non-empty key groups, ascending.
    pub key_groups: Vec<KeyGroupInfo>,
    /// Per-state totals, in the order of the file's state list.
    pub states: Vec<StateStats>,
}

/// The result of [`KeyedFileReader::verify`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// File size.
    pub bytes: u64,
    /// Blocks read (each CRC checked).
    pub blocks: u64,
    /// Entries decoded.
    pub entries: u64,
}

/// How a state's records are shaped, from its descriptor.
#[derive(Clone, Copy, Debug)]
struct Shape {
    is_map: bool,
    is_list: bool,
    ttl: bool,
}

impl Shape {
    fn of(d: &StateDescriptor) -> Self {
        Shape {
            is_map: d.kind == KeyedStateKind::Map,
            is_list: d.kind == KeyedStateKind::List,
            ttl: d.ttl.is_some(),
        }
    }
}

fn header_body(max_parallelism: u32, range: KeyGroupRange, states: &[StateDescriptor]) -> Vec<u8> {
    let mut b = Vec::new();
    put_u32(&mut b, max_parallelism);
    put_u32(&mut b, if range.is_empty() { 0 } else { range.start() });
    put_u32(&mut b, if range.is_empty() { 0 } else { range.end_exclusive() });
    put_varint(&mut b, states.len() as u64);
    for d in states {
        put_state_descriptor(&mut b, d);
    }
    b
}

/// A state list with one name twice.
#[derive(Debug, thiserror::Error)]
#[error("state name {name:?} appears twice")]
struct DuplicateStateName {
    name: String,
}

/// Checks what both writer and reader require of a state list.
fn check_unique_names(states: &[StateDescriptor]) -> std::result::Result<(), DuplicateStateName> {
    for (i, d) in states.iter().enumerate() {
        if states.iter().take(i).any(|o| o.name == d.name) {
            return Err(DuplicateStateName { name: d.name.clone() });
        }
    }
    Ok(())
}

/// Why an entry may not follow the previous one of its key group.
#[derive(Debug, thiserror::Error)]
enum OrderProblem {
    /// Before the previous entry in canonical order.
    #[error("entry out of canonical order")]
    OutOfOrder,
    /// The same cell twice in a state that is not a list.
    #[error("duplicate entry (same state, key, namespace and user key)")]
    Duplicate,
}

/// Why an entry of a keyed file is wrong: its shape or values, or its place.
#[derive(Debug, thiserror::Error)]
enum EntryFault {
    #[error("{0}")]
    Entry(#[from] statekit_core::EntryProblem),
    #[error("{0}")]
    Order(#[from] OrderProblem),
}

/// Streams the view's entries for `range ∩ view.key_group_range()`, key group by key group,
/// into a new keyed data file at `path` (committed atomically through
/// [`Storage::create`] / commit: nothing is visible under `path` unless this returns `Ok`).
///
/// The file header carries the view's max parallelism, the written key-group range and the
/// view's state descriptors; records refer to states by their index in that list. The writer
/// checks what readers check: entries must come in canonical order
/// ([`Entry::canonical_cmp`], no duplicate (state, key, namespace[, user key]) except list
/// elements) and have the shape their state dictates ([`check_entry_shape`]).
///
/// Key groups are visited and encoded on worker threads (up to four, one per core), which
/// also compress and checksum their blocks; the calling thread writes the blocks in
/// key-group order, so the file is the same as a serial write would produce.
pub fn write_keyed_file(
    view: &dyn KeyedStateView,
    range: KeyGroupRange,
    storage: &dyn Storage,
    path: &str,
    opts: &WriteOptions,
) -> std::result::Result<KeyedFileInfo, FormatError> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 4);
    write_keyed_file_with(view, range, storage, path, opts, threads)
}

/// [`write_keyed_file`] with an explicit number of encoder threads (0 = everything on the
/// calling thread).
fn write_keyed_file_with(
    view: &dyn KeyedStateView,
    range: KeyGroupRange,
    storage: &dyn Storage,
    path: &str,
    opts: &WriteOptions,
    threads: usize,
) -> Result<KeyedFileInfo> {
    let states = view.states();
    let max_parallelism = view.max_parallelism();
    let file = storage.describe(path);
    check_max_parallelism(max_parallelism)?;
    let range = range.intersection(&view.key_group_range());
    if range.end_exclusive() > max_parallelism {
        return Err(WriteProblem::KeyGroupsPastMax {
            file: file.to_string(),
            range,
            max_parallelism,
        }
        .into());
    }
    check_states(states, &file)?;
    let shapes: Vec<Shape> = states.iter().map(Shape::of).collect();
    let mut cw = ContainerWriter::create(
        storage,
        path,
        &KEYED,
        &header_body(max_parallelism, range, states),
        opts.compression,
    )?;
    let new_writer = || RecordWriter::new(&file, opts.block_size, states.len());
    let encode = |w: &mut RecordWriter, kg: u32, sink: &mut dyn BlockSink| -> Result<()> {
        // A write error stops the visit (the view's own errors fail it).
        let mut failure: Option<FormatError> = None;
        let visited = view.visit_key_group(kg, &mut |e| match w.push(sink, kg, e, states, &shapes) {
            Ok(()) => Ok(ControlFlow::Continue(())),
            Err(err) => {
                failure = Some(err);
                Ok(ControlFlow::Break(()))
            }
        })?;
        if let Some(f) = failure {
            return Err(f);
        }
        if visited.is_break() {
            return Err(WriteProblem::StoppedEarly { key_group: kg }.into());
        }
        w.end_key_group(sink, kg)
    };
    let mut state_entries = vec![0u64; states.len()];
    let mut state_raw = vec![0u64; states.len()];
    let writers = if threads == 0 || range.is_empty() {
        let mut w = new_writer();
        for kg in range.iter() {
            encode(&mut w, kg, &mut cw)?;
            cw.end_section();
        }
        vec![w]
    } else {
        let kgs: Vec<u32> = range.iter().collect();
        pipeline::encode_parallel(&mut cw, &kgs, threads, opts, new_writer, encode)?
    };
    for w in &writers {
        let totals = state_entries.iter_mut().zip(state_raw.iter_mut());
        for ((te, tr), (e, r)) in totals.zip(w.state_entries.iter().zip(&w.state_raw)) {
            *te += *e;
            *tr += *r;
        }
    }
    let sections: Vec<Section> = cw.sections().to_vec();
    let size = cw.finish(&index_tail(&state_entries, &state_raw))?;
    Ok(build_info(path, size, &sections, states, &state_entries, &state_raw))
}

/// Checks the states a keyed data file `file` is written with: each descriptor writable, no
/// name twice.
fn check_states(states: &[StateDescriptor], file: &str) -> Result<()> {
    for d in states {
        check_state_descriptor(d)?;
    }
    check_unique_names(states).map_err(|m| WriteProblem::DuplicateStateName {
        file: file.to_string(),
        name: m.name,
    })?;
    Ok(())
}

/// Rewrites the keyed data file `reader` at `path` with `opts.compression`, block by block:
/// every block is read (its CRC checked), decompressed and compressed again with the new
/// codec, on encoder threads as in [`write_keyed_file`]; records are not decoded, so this
/// costs a codec round trip, not an entry-by-entry re-encoding. The blocks keep their
/// records and boundaries (`opts.block_size` is not used), so the output holds exactly the
/// input's entries, and transcoding with the input's codec reproduces the input's blocks.
///
/// `states` replaces the header's state list: the same number of states, in the same
/// order, each of the same kind and TTL presence as the file's (a rename changes a name,
/// which records do not carry); anything else is refused as a caller error.
pub fn transcode_keyed_file(
    reader: &KeyedFileReader,
    states: &[StateDescriptor],
    storage: &dyn Storage,
    path: &str,
    opts: &WriteOptions,
) -> std::result::Result<KeyedFileInfo, FormatError> {
    let file = storage.describe(path);
    let same_shape = states.len() == reader.states.len()
        && states.iter().zip(&reader.states).all(|(a, b)| {
            let (x, y) = (Shape::of(a), Shape::of(b));
            a.kind == b.kind && x.ttl == y.ttl
        });
    if !same_shape {
        return Err(WriteProblem::TranscodeStates {
            file: file.to_string(),
            from: reader.file.clone(),
        }
        .into());
    }
    check_states(states, &file)?;
    let mut cw = ContainerWriter::create(
        storage,
        path,
        &KEYED,
        &header_body(reader.max_parallelism, reader.range, states),
        opts.compression,
    )?;
    let sections: Vec<Section> = reader.layout.sections.clone();
    let kgs: Vec<u32> = sections.iter().map(|s| s.id).collect();
    // Blocks whose codec has no level to honour are kept as stored when the output uses the
    // same codec: LZ4 blocks into LZ4 output, uncompressed ones into uncompressed output.
    // zstd blocks are compressed again (the output's level may differ from the input's).
    let kept_codec = match opts.compression {
        Compression::Lz4 => Some(CODEC_LZ4),
        Compression::None => Some(CODEC_NONE),
        Compression::Zstd { .. } => None,
    };
    let copy = |dec: &mut BlockDecoder, kg: u32, sink: &mut dyn BlockSink| -> Result<()> {
        let Some(s) = reader.section(kg) else {
            return Ok(());
        };
        reader.blob.fetch(s.offset, s.stored)?;
        let bytes = reader.blob.bytes();
        let (mut pos, end) = (s.offset, s.end());
        let mut buf = Vec::new();
        while pos < end {
            let (h, raw) = read_section_block(dec, bytes, pos, s, &reader.file)?;
            let stored = (Some(h.codec) == kept_codec)
                .then(|| {
                    let start = usize::try_from(pos).ok()?;
                    let header = bytes.get(start..)?.first_chunk::<BLOCK_HEADER_LEN>()?;
                    let payload = bytes.get(start + BLOCK_HEADER_LEN..start + h.total_len() as usize)?;
                    Some((header, payload))
                })
                .flatten();
            match stored {
                // Checked (CRC, decompressed to its recorded length) and already in the
                // output's codec: stored as it is.
                Some((header, payload)) => sink.block_stored(kg, header, payload, raw, h.entries, &mut buf)?,
                // Compressed again straight from the decoder's buffer (no copy of the records).
                None => sink.block_ref(kg, raw, h.entries, &mut buf)?,
            }
            pos += h.total_len();
        }
        // Read once: keep the resident set at about one key group per thread.
        reader.blob.release(s.offset as usize, (end - s.offset) as usize);
        Ok(())
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 4);
    let result = if kgs.is_empty() {
        Ok(())
    } else {
        pipeline::encode_parallel(&mut cw, &kgs, threads, opts, BlockDecoder::new, copy).map(|_| ())
    };
    if let Err(e) = result {
        statekit_core::storage::check_intact(reader.blob.as_ref(), &reader.file)?;
        return Err(e);
    }
    let written: Vec<Section> = cw.sections().to_vec();
    // The blocks are the input's: its sections' totals must come out again.
    for (a, b) in written.iter().zip(&sections) {
        if (a.id, a.blocks, a.raw, a.entries) != (b.id, b.blocks, b.raw, b.entries) {
            return Err(FormatError::corrupt(
                &reader.file,
                b.offset,
                "index.section",
                format!(
                    "key group {}: the index records {} blocks, {} raw bytes, {} entries; its blocks hold {}, {}, {}",
                    b.id, b.blocks, b.raw, b.entries, a.blocks, a.raw, a.entries
                ),
            ));
        }
    }
    let (state_entries, state_raw): (Vec<u64>, Vec<u64>) =
        reader.info.states.iter().map(|s| (s.entries, s.raw_bytes)).unzip();
    let size = cw.finish(&index_tail(&state_entries, &state_raw))?;
    Ok(build_info(path, size, &written, states, &state_entries, &state_raw))
}

/// The keyed index tail: the state count, then each state's entries and raw bytes.
fn index_tail(state_entries: &[u64], state_raw: &[u64]) -> Vec<u8> {
    let mut tail = Vec::new();
    put_varint(&mut tail, state_entries.len() as u64);
    for (e, r) in state_entries.iter().zip(state_raw) {
        put_u64(&mut tail, *e);
        put_u64(&mut tail, *r);
    }
    tail
}

/// Reads the block at `pos` of section `s` (CRC checked, decompressed) and checks that it
/// belongs to the section.
fn read_section_block<'a>(
    dec: &'a mut BlockDecoder,
    bytes: &'a [u8],
    pos: u64,
    s: &Section,
    file: &str,
) -> Result<(BlockHeader, &'a [u8])> {
    let (h, raw) = dec.read(bytes, pos, s.end(), file)?;
    if h.section != s.id {
        return Err(FormatError::corrupt(
            file,
            pos + 8,
            "block.key_group",
            format!("block of key group {} inside key group {}'s blocks", h.section, s.id),
        ));
    }
    Ok((h, raw))
}

fn build_info(
    path: &str,
    size: u64,
    sections: &[Section],
    states: &[StateDescriptor],
    state_entries: &[u64],
    state_raw: &[u64],
) -> KeyedFileInfo {
    KeyedFileInfo {
        file: FileRef {
            scope: FileScope::Exclusive,
            path: path.to_string(),
            size,
        },
        entries: sections.iter().map(|s| s.entries).sum(),
        raw_bytes: sections.iter().map(|s| s.raw).sum(),
        key_groups: sections
            .iter()
            .map(|s| KeyGroupInfo {
                key_group: s.id,
                offset: s.offset,
                stored_bytes: s.stored,
                raw_bytes: s.raw,
                entries: s.entries,
            })
            .collect(),
        states: states
            .iter()
            .zip(state_entries.iter().zip(state_raw))
            .map(|(d, (e, r))| StateStats {
                name: d.name.clone(),
                entries: *e,
                raw_bytes: *r,
            })
            .collect(),
    }
}

/// Encodes the records of key groups into blocks; all buffers are reused, so writing
/// allocates nothing per entry. Each encoder thread has one; it carries nothing from one key
/// group to the next but the per-state totals.
struct RecordWriter {
    file: String,
    raw: Vec<u8>,
    block_size: usize,
    block_entries: u32,
    block_has_prev: bool,
    /// The previous entry of the key group, for the order check and the same-prefix tag:
    /// its state, and where its key, namespace and user key are. While its block is being
    /// filled they are ranges of `raw` (nothing is copied per entry); when the block is
    /// handed on they are copied into the `prev_*_buf`s.
    have_prev: bool,
    prev_state: u32,
    prev_in_raw: bool,
    prev_key: (usize, usize),
    prev_ns: (usize, usize),
    prev_uk: (usize, usize),
    prev_key_buf: Vec<u8>,
    prev_ns_buf: Vec<u8>,
    prev_uk_buf: Vec<u8>,
    state_entries: Vec<u64>,
    state_raw: Vec<u64>,
}

/// The bytes of one part of the previous entry (see [`RecordWriter`]); `None` only if the
/// writer lost track of them (a bug, reported as an error rather than a panic).
#[inline(always)]
fn prev_part<'a>(raw: &'a [u8], in_raw: bool, at: (usize, usize), buf: &'a [u8]) -> Option<&'a [u8]> {
    if in_raw {
        raw.get(at.0..at.1)
    } else {
        Some(buf)
    }
}

impl RecordWriter {
    fn new(file: &str, block_size: usize, states: usize) -> Self {
        RecordWriter {
            file: file.to_string(),
            raw: Vec::with_capacity(block_size.min(16 << 20) + 1024),
            block_size,
            block_entries: 0,
            block_has_prev: false,
            have_prev: false,
            prev_state: 0,
            prev_in_raw: false,
            prev_key: (0, 0),
            prev_ns: (0, 0),
            prev_uk: (0, 0),
            prev_key_buf: Vec::new(),
            prev_ns_buf: Vec::new(),
            prev_uk_buf: Vec::new(),
            state_entries: vec![0; states],
            state_raw: vec![0; states],
        }
    }

    #[cold]
    fn bad(&self, kg: u32, reason: EntryRefused) -> FormatError {
        WriteProblem::Entry {
            file: self.file.clone(),
            key_group: kg,
            reason,
        }
        .into()
    }

    #[cold]
    fn lost(file: &str, kg: u32, what: &'static str) -> FormatError {
        WriteProblem::Lost {
            file: file.to_string(),
            key_group: kg,
            what,
        }
        .into()
    }

    #[inline]
    fn push(
        &mut self,
        sink: &mut dyn BlockSink,
        kg: u32,
        e: &Entry<'_>,
        states: &[StateDescriptor],
        shapes: &[Shape],
    ) -> Result<()> {
        let Some(&shape) = shapes.get(e.state as usize) else {
            return Err(self.bad(kg, EntryRefused::Shape(check_entry_shape(states, e).err())));
        };
        if shape.is_map != e.user_key.is_some() || shape.ttl != e.timestamp.is_some() {
            return Err(self.bad(kg, EntryRefused::Shape(check_entry_shape(states, e).err())));
        }
        let mut same_prefix = false;
        if self.have_prev {
            let prev_key = prev_part(&self.raw, self.prev_in_raw, self.prev_key, &self.prev_key_buf)
                .ok_or_else(|| Self::lost(&self.file, kg, "the previous key"))?;
            let prev_ns = prev_part(&self.raw, self.prev_in_raw, self.prev_ns, &self.prev_ns_buf)
                .ok_or_else(|| Self::lost(&self.file, kg, "the previous namespace"))?;
            let ord = e
                .state
                .cmp(&self.prev_state)
                .then_with(|| cmp_bytes(e.key, prev_key))
                .then_with(|| cmp_bytes(e.namespace, prev_ns));
            match ord {
                Ordering::Less => {
                    return Err(self.bad(
                        kg,
                        EntryRefused::OutOfOrder {
                            state: e.state,
                            key: e.key.to_vec(),
                            previous_state: self.prev_state,
                            previous_key: prev_key.to_vec(),
                        },
                    ))
                }
                Ordering::Greater => {}
                Ordering::Equal => {
                    same_prefix = true;
                    let dup = if shape.is_map {
                        let prev_uk = prev_part(&self.raw, self.prev_in_raw, self.prev_uk, &self.prev_uk_buf)
                            .ok_or_else(|| Self::lost(&self.file, kg, "the previous user key"))?;
                        cmp_bytes(e.user_key.unwrap_or_default(), prev_uk) != Ordering::Greater
                    } else {
                        !shape.is_list
                    };
                    if dup {
                        return Err(self.bad(
                            kg,
                            EntryRefused::Duplicate {
                                state: states.get(e.state as usize).map_or("", |d| d.name.as_str()).to_string(),
                                key: e.key.to_vec(),
                            },
                        ));
                    }
                }
            }
        }
        let start = self.raw.len();
        let raw = &mut self.raw;
        if same_prefix && self.block_has_prev {
            // The previous entry's key and namespace are in this block.
            raw.push(REC_SAME_PREFIX);
        } else {
            raw.push(0);
            put_len(raw, e.state as usize);
            put_len(raw, e.key.len());
            let k = raw.len();
            raw.extend_from_slice(e.key);
            put_len(raw, e.namespace.len());
            let n = raw.len();
            raw.extend_from_slice(e.namespace);
            self.prev_key = (k, k + e.key.len());
            self.prev_ns = (n, n + e.namespace.len());
        }
        if let Some(uk) = e.user_key {
            put_len(raw, uk.len());
            let u = raw.len();
            raw.extend_from_slice(uk);
            self.prev_uk = (u, u + uk.len());
        } else {
            self.prev_uk = (start, start);
        }
        put_len(raw, e.value.len());
        raw.extend_from_slice(e.value);
        if let Some(ts) = e.timestamp {
            raw.extend_from_slice(&ts.to_le_bytes());
        }
        let len = (raw.len() - start) as u64;
        self.have_prev = true;
        self.prev_state = e.state;
        self.prev_in_raw = true;
        self.block_has_prev = true;
        self.block_entries += 1;
        // `shapes` has one entry per state, so does each total (looked up above).
        match (
            self.state_entries.get_mut(e.state as usize),
            self.state_raw.get_mut(e.state as usize),
        ) {
            (Some(n), Some(r)) => {
                *n += 1;
                *r += len;
            }
            _ => return Err(self.bad(kg, EntryRefused::NoTotals { state: e.state })),
        }
        if self.raw.len() >= self.block_size {
            self.flush(sink, kg)?;
        }
        Ok(())
    }

    /// Hands the block on (if it has records), keeping a copy of what the next entry of the
    /// key group is compared with.
    fn flush(&mut self, sink: &mut dyn BlockSink, kg: u32) -> Result<()> {
        if self.block_entries > 0 {
            if self.have_prev && self.prev_in_raw {
                for (at, buf) in [
                    (self.prev_key, &mut self.prev_key_buf),
                    (self.prev_ns, &mut self.prev_ns_buf),
                    (self.prev_uk, &mut self.prev_uk_buf),
                ] {
                    let part = self
                        .raw
                        .get(at.0..at.1)
                        .ok_or_else(|| Self::lost(&self.file, kg, "the previous entry"))?;
                    buf.clear();
                    buf.extend_from_slice(part);
                }
                self.prev_in_raw = false;
            }
            sink.block(kg, &mut self.raw, self.block_entries)?;
            self.block_entries = 0;
            self.block_has_prev = false;
        }
        Ok(())
    }

    /// Closes the key group: writes its last block and forgets its entries.
    fn end_key_group(&mut self, sink: &mut dyn BlockSink, kg: u32) -> Result<()> {
        self.have_prev = false;
        self.flush(sink, kg)
    }
}

/// Appends a LEB128 length, the shortest form (as `put_varint` does), with the one- and
/// two-byte cases inline.
#[inline(always)]
fn put_len(out: &mut Vec<u8>, n: usize) {
    if n < 0x80 {
        out.push(n as u8);
    } else if n < 0x4000 {
        out.extend_from_slice(&[(n as u8) | 0x80, (n >> 7) as u8]);
    } else {
        put_varint(out, n as u64);
    }
}

/// Compares byte strings as unsigned bytes, like `<[u8]>::cmp`, but inline 8 bytes at a time:
/// keys and namespaces are short, and a `memcmp` call per comparison dominated the profile.
#[inline]
fn cmp_bytes(a: &[u8], b: &[u8]) -> Ordering {
    let n = a.len().min(b.len());
    let (Some(a_head), Some(b_head)) = (a.get(..n), b.get(..n)) else {
        return a.cmp(b);
    };
    let (mut ca, mut cb) = (a_head.chunks_exact(8), b_head.chunks_exact(8));
    for (x, y) in (&mut ca).zip(&mut cb) {
        let (x, y) = (u64::from_be_bytes(arr8(x)), u64::from_be_bytes(arr8(y)));
        if x != y {
            return x.cmp(&y);
        }
    }
    for (x, y) in ca.remainder().iter().zip(cb.remainder()) {
        if x != y {
            return x.cmp(y);
        }
    }
    a.len().cmp(&b.len())
}

#[inline]
fn arr8(s: &[u8]) -> [u8; 8] {
    let mut a = [0u8; 8];
    a.copy_from_slice(s);
    a
}

/// Reads a varint length and that many bytes at `*pos`.
#[inline]
fn take_bytes<'a>(raw: &'a [u8], pos: &mut usize) -> Option<&'a [u8]> {
    let n = get_varint(raw, pos)?;
    let n = usize::try_from(n).ok()?;
    let end = pos.checked_add(n)?;
    let s = raw.get(*pos..end)?;
    *pos = end;
    Some(s)
}

/// Decodes the records of one block, calling `f` with each entry and its encoded length.
/// Returns the number of records.
#[inline]
fn decode_records<'a>(
    raw: &'a [u8],
    shapes: &[Shape],
    h: &BlockHeader,
    file: &str,
    mut f: impl FnMut(&Entry<'a>, usize) -> Result<ControlFlow<()>>,
) -> Result<ControlFlow<(), u32>> {
    let err = |pos: usize, field: &str, reason: String| {
        if h.codec == CODEC_NONE {
            FormatError::corrupt(file, h.offset + (BLOCK_HEADER_LEN + pos) as u64, field, reason)
        } else {
            FormatError::corrupt(
                file,
                h.offset,
                field,
                format!("{reason} (at byte {pos} of the decompressed block)"),
            )
        }
    };
    let mut pos = 0usize;
    let mut count = 0u32;
    let mut prev: Option<(u32, Shape, &'a [u8], &'a [u8])> = None;
    while let Some(&tag) = raw.get(pos) {
        let start = pos;
        pos += 1;
        if tag & !REC_SAME_PREFIX != 0 {
            return Err(err(start, "record.tag", format!("unknown tag bits {tag:#04x}")));
        }
        let (state, shape, key, namespace) = if tag & REC_SAME_PREFIX != 0 {
            prev.ok_or_else(|| {
                err(
                    start,
                    "record.tag",
                    "first record of a block reuses a previous prefix".into(),
                )
            })?
        } else {
            let at = pos;
            let (state, shape) = get_varint(raw, &mut pos)
                .and_then(|s| u32::try_from(s).ok())
                .and_then(|s| Some((s, *shapes.get(s as usize)?)))
                .ok_or_else(|| {
                    err(
                        at,
                        "record.state",
                        format!("bad state index (the file has {} states)", shapes.len()),
                    )
                })?;
            let at = pos;
            let key = take_bytes(raw, &mut pos).ok_or_else(|| err(at, "record.key", "bad length".into()))?;
            let at = pos;
            let ns = take_bytes(raw, &mut pos).ok_or_else(|| err(at, "record.namespace", "bad length".into()))?;
            (state, shape, key, ns)
        };
        let user_key = if shape.is_map {
            let at = pos;
            Some(take_bytes(raw, &mut pos).ok_or_else(|| err(at, "record.user_key", "bad length".into()))?)
        } else {
            None
        };
        let at = pos;
        let value = take_bytes(raw, &mut pos).ok_or_else(|| err(at, "record.value", "bad length".into()))?;
        let timestamp = if shape.ttl {
            let ts = raw
                .get(pos..pos + 8)
                .ok_or_else(|| err(pos, "record.timestamp", "truncated".into()))?;
            pos += 8;
            let mut a = [0u8; 8];
            a.copy_from_slice(ts);
            Some(i64::from_le_bytes(a))
        } else {
            None
        };
        prev = Some((state, shape, key, namespace));
        count = count
            .checked_add(1)
            .ok_or_else(|| err(start, "record", "too many records".into()))?;
        let e = Entry {
            state,
            key,
            namespace,
            user_key,
            value,
            timestamp,
        };
        if f(&e, pos - start)?.is_break() {
            return Ok(ControlFlow::Break(()));
        }
    }
    Ok(ControlFlow::Continue(count))
}

thread_local! {
    /// A decoder (buffer and zstd context) reused by visits on this thread. Taken out while in
    /// use, so a visitor that visits again gets a fresh one instead of a borrow conflict.
    static DECODER: Cell<Option<BlockDecoder>> = const { Cell::new(None) };
}

fn with_decoder<R>(f: impl FnOnce(&mut BlockDecoder) -> R) -> R {
    let mut dec = DECODER.with(Cell::take).unwrap_or_default();
    let r = f(&mut dec);
    let buf = dec.into_buffer();
    if buf.capacity() <= 16 << 20 {
        DECODER.with(|c| c.set(Some(BlockDecoder::with_buffer(buf))));
    }
    r
}

/// Totals found while reading a section.
#[derive(Default)]
struct Totals {
    blocks: u64,
    entries: u64,
    raw: u64,
}

/// Checks canonical order across the entries of one key group (owned copies of the previous
/// entry's parts, reused).
#[derive(Default)]
struct OrderChecker {
    have: bool,
    state: u32,
    key: Vec<u8>,
    ns: Vec<u8>,
    uk: Option<Vec<u8>>,
}

impl OrderChecker {
    /// `Err(reason)` when `e` may not follow the previous entry.
    fn check(&mut self, e: &Entry<'_>, shapes: &[Shape]) -> std::result::Result<(), OrderProblem> {
        let (mut key_eq, mut ns_eq) = (false, false);
        if self.have {
            let mut ord = e.state.cmp(&self.state);
            if ord == Ordering::Equal {
                ord = cmp_bytes(e.key, &self.key);
                key_eq = ord == Ordering::Equal;
            }
            if ord == Ordering::Equal {
                ord = cmp_bytes(e.namespace, &self.ns);
                ns_eq = ord == Ordering::Equal;
            }
            if ord == Ordering::Equal {
                ord = match (e.user_key, self.uk.as_deref()) {
                    (None, None) => Ordering::Equal,
                    (None, Some(_)) => Ordering::Less,
                    (Some(_), None) => Ordering::Greater,
                    (Some(a), Some(b)) => cmp_bytes(a, b),
                };
            }
            match ord {
                Ordering::Less => return Err(OrderProblem::OutOfOrder),
                Ordering::Equal if !shapes.get(e.state as usize).is_some_and(|s| s.is_list) => {
                    return Err(OrderProblem::Duplicate)
                }
                _ => {}
            }
        }
        self.have = true;
        self.state = e.state;
        if !key_eq {
            self.key.clear();
            self.key.extend_from_slice(e.key);
        }
        if !ns_eq {
            self.ns.clear();
            self.ns.extend_from_slice(e.namespace);
        }
        match (e.user_key, self.uk.as_mut()) {
            (Some(u), Some(v)) => {
                v.clear();
                v.extend_from_slice(u);
            }
            (Some(u), None) => self.uk = Some(u.to_vec()),
            (None, _) => self.uk = None,
        }
        Ok(())
    }
}

/// A keyed data file opened for reading: a [`KeyedStateView`] over its entries.
///
/// Opening checks the header, the index and the trailer (magic, version, CRCs, sizes) but
/// reads no block; [`KeyedStateView::visit_key_group`] reads only the blocks of that key
/// group; [`KeyedFileReader::verify`] reads them all.
pub struct KeyedFileReader {
    blob: Arc<dyn Blob>,
    file: String,
    max_parallelism: u32,
    range: KeyGroupRange,
    states: Vec<StateDescriptor>,
    shapes: Vec<Shape>,
    layout: Layout,
    info: KeyedFileInfo,
}

impl std::fmt::Debug for KeyedFileReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedFileReader")
            .field("file", &self.file)
            .field("max_parallelism", &self.max_parallelism)
            .field("range", &self.range)
            .field("states", &self.states.len())
            .field("size", &self.layout.size)
            .finish()
    }
}

impl KeyedFileReader {
    /// Opens `path` of `storage` (memory-mapped for local storage). `expected_size` is the
    /// size `_metadata` recorded; a different size is reported as corruption (truncation).
    pub fn open(
        storage: &dyn Storage,
        path: &str,
        expected_size: Option<u64>,
    ) -> std::result::Result<Self, FormatError> {
        // By ranges: on an object store only the header, the index and the key groups a
        // reader visits are fetched.
        let blob = storage.open_ranged(path)?;
        Self::parse(blob, storage.describe(path), path.to_string(), expected_size)
    }

    /// Reads a keyed data file held by `blob`; `file` names it in errors and in
    /// [`KeyedFileInfo::file`].
    pub fn from_blob(blob: Arc<dyn Blob>, file: String) -> std::result::Result<Self, FormatError> {
        Self::parse(blob, file.clone(), file, None)
    }

    fn parse(blob: Arc<dyn Blob>, file: String, path: String, expected: Option<u64>) -> Result<Self> {
        crate::container::fetch_layout(blob.as_ref())?;
        let bytes = blob.bytes();
        let layout = container::parse(bytes, &file, &KEYED, expected)?;
        let mut c = Cursor::new(layout.header_body(bytes, &file)?, layout.header_body_offset, &file);
        let mp_at = c.offset();
        let max_parallelism = c.u32("header.max_parallelism")?;
        if check_max_parallelism(max_parallelism).is_err() {
            return Err(c.err_at(
                mp_at,
                "header.max_parallelism",
                format!("{max_parallelism} is outside 1..=32768"),
            ));
        }
        let range_at = c.offset();
        let start = c.u32("header.key_group_start")?;
        let end = c.u32("header.key_group_end")?;
        let range = if start == 0 && end == 0 {
            KeyGroupRange::EMPTY
        } else if start < end && end <= max_parallelism {
            KeyGroupRange::new(start, end - 1)
        } else {
            return Err(c.err_at(
                range_at,
                "header.key_group_range",
                format!("[{start}, {end}) is not a valid range below max parallelism {max_parallelism}"),
            ));
        };
        let n = c.count("header.state_count")?;
        let mut states = Vec::with_capacity(n);
        for i in 0..n {
            states.push(get_state_descriptor(&mut c, &format!("header.states[{i}]"))?);
        }
        c.finish("header")?;
        check_unique_names(&states)
            .map_err(|m| FormatError::corrupt(&file, layout.header_body_offset, "header.states", m.to_string()))?;
        for s in &layout.sections {
            if !range.contains(s.id) || s.entries == 0 {
                return Err(FormatError::corrupt(
                    &file,
                    layout.index_offset,
                    "index.sections",
                    format!(
                        "key group {} ({} entries) is not a non-empty key group of the file's range {range}",
                        s.id, s.entries
                    ),
                ));
            }
        }
        let (tail, tail_offset) = layout.index_tail(bytes, &file)?;
        let mut t = Cursor::new(tail, tail_offset, &file);
        let count_at = t.offset();
        let n = t.varint("index.state_count")?;
        if n != states.len() as u64 {
            return Err(t.err_at(
                count_at,
                "index.state_count",
                format!("{n} state totals for {} states", states.len()),
            ));
        }
        let mut state_entries = Vec::with_capacity(states.len());
        let mut state_raw = Vec::with_capacity(states.len());
        for _ in 0..states.len() {
            state_entries.push(t.u64("index.state.entries")?);
            state_raw.push(t.u64("index.state.raw_bytes")?);
        }
        t.finish("index")?;
        let total: Option<u64> = state_entries.iter().try_fold(0u64, |a, b| a.checked_add(*b));
        let in_sections: Option<u64> = layout.sections.iter().try_fold(0u64, |a, s| a.checked_add(s.entries));
        if total.is_none() || total != in_sections {
            return Err(FormatError::corrupt(
                &file,
                tail_offset,
                "index.state_totals",
                "per-state entry totals do not add up to the key groups' entries",
            ));
        }
        let raw_states = state_raw.iter().try_fold(0u64, |a, b| a.checked_add(*b));
        let raw_sections = layout.sections.iter().try_fold(0u64, |a, s| a.checked_add(s.raw));
        if raw_states.is_none() || raw_sections.is_none() {
            return Err(FormatError::corrupt(
                &file,
                tail_offset,
                "index.raw_bytes",
                "the raw byte totals add up to more than 2^64: implausible",
            ));
        }
        let info = build_info(
            &path,
            layout.size,
            &layout.sections,
            &states,
            &state_entries,
            &state_raw,
        );
        let shapes = states.iter().map(Shape::of).collect();
        Ok(KeyedFileReader {
            blob,
            file,
            max_parallelism,
            range,
            states,
            shapes,
            layout,
            info,
        })
    }

    /// What the index says the file holds.
    pub fn info(&self) -> &KeyedFileInfo {
        &self.info
    }

    /// The non-empty key groups, ascending.
    pub fn key_groups(&self) -> &[KeyGroupInfo] {
        &self.info.key_groups
    }

    /// The file's name as errors show it.
    pub fn file_name(&self) -> &str {
        &self.file
    }

    /// The byte range (`offset..offset + stored_bytes`) a visit of `key_group` reads, or
    /// `None` when the file has no entries for it.
    pub fn key_group_byte_range(&self, key_group: u32) -> Option<std::ops::Range<u64>> {
        self.section(key_group).map(|s| s.offset..s.end())
    }

    fn section(&self, key_group: u32) -> Option<&Section> {
        let i = self.layout.sections.binary_search_by_key(&key_group, |s| s.id).ok()?;
        self.layout.sections.get(i)
    }

    /// Reads every block of `s`, calling `f` with each entry and its record length, until it
    /// breaks (then the index's counts are not checked: the section was not read to its end).
    /// A file truncated by another program meanwhile is reported as such.
    fn read_section(
        &self,
        s: &Section,
        dec: &mut BlockDecoder,
        f: impl FnMut(&Entry<'_>, usize) -> Result<ControlFlow<()>>,
    ) -> Result<ControlFlow<(), Totals>> {
        let r = self.read_section_blocks(s, dec, f);
        if r.is_err() {
            statekit_core::storage::check_intact(self.blob.as_ref(), &self.file)?;
        }
        r
    }

    fn read_section_blocks(
        &self,
        s: &Section,
        dec: &mut BlockDecoder,
        mut f: impl FnMut(&Entry<'_>, usize) -> Result<ControlFlow<()>>,
    ) -> Result<ControlFlow<(), Totals>> {
        self.blob.fetch(s.offset, s.stored)?;
        let bytes = self.blob.bytes();
        let mut t = Totals::default();
        let mut pos = s.offset;
        let end = s.end();
        while pos < end {
            let (h, raw) = read_section_block(dec, bytes, pos, s, &self.file)?;
            let ControlFlow::Continue(n) = decode_records(raw, &self.shapes, &h, &self.file, &mut f)? else {
                return Ok(ControlFlow::Break(()));
            };
            if n != h.entries {
                return Err(FormatError::corrupt(
                    &self.file,
                    pos + 12,
                    "block.entries",
                    format!("header says {} records, the block holds {n}", h.entries),
                ));
            }
            t.blocks += 1;
            t.entries += u64::from(n);
            t.raw += u64::from(h.raw_len);
            pos += h.total_len();
        }
        self.blob.release(s.offset as usize, (end - s.offset) as usize);
        if t.blocks != u64::from(s.blocks) || t.entries != s.entries || t.raw != s.raw {
            return Err(FormatError::corrupt(
                &self.file,
                s.offset,
                "index.section",
                format!(
                    "key group {}: index says {} blocks, {} entries, {} raw bytes; the blocks hold {}, {}, {}",
                    s.id, s.blocks, s.entries, s.raw, t.blocks, t.entries, t.raw
                ),
            ));
        }
        Ok(ControlFlow::Continue(t))
    }

    /// Reads every block, checks every CRC, decodes every record, checks canonical order and
    /// entry shapes, and checks that the counts agree with the index.
    ///
    /// Large files are checked on several threads (up to four, one per core), key group by
    /// key group; the error reported is the one a front-to-back check meets first.
    pub fn verify(&self) -> std::result::Result<VerifyReport, FormatError> {
        self.verify_with(self.verify_threads(), false)
    }

    /// [`KeyedFileReader::verify`], and every entry's key, namespace, user key and value
    /// decoded by its state's schemas ([`statekit_core::stream::check_entry_values`]), as a
    /// reader that renders values decodes them. The format itself does not need values to
    /// fit their schemas (it stores bytes); a snapshot's verification does.
    pub fn verify_values(&self) -> std::result::Result<VerifyReport, FormatError> {
        self.verify_with(self.verify_threads(), true)
    }

    fn verify_threads(&self) -> usize {
        if self.layout.size < VERIFY_PARALLEL_MIN_BYTES {
            1
        } else {
            std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 4)
        }
    }

    /// [`KeyedFileReader::verify`] on `threads` threads (the caller's included), with the
    /// values decoded when `values`.
    fn verify_with(&self, threads: usize, values: bool) -> Result<VerifyReport> {
        let sections = &self.layout.sections;
        let next = AtomicUsize::new(0);
        // Index of the earliest section found bad so far: sections after it need no check.
        let first_bad = AtomicUsize::new(usize::MAX);
        let run = || {
            let mut totals = VerifyTotals {
                blocks: 0,
                entries: 0,
                state_entries: vec![0; self.states.len()],
                state_raw: vec![0; self.states.len()],
            };
            let mut order = OrderChecker::default();
            let mut dec = BlockDecoder::new();
            loop {
                let i = next.fetch_add(1, AtomicOrdering::Relaxed);
                let Some(section) = sections.get(i).filter(|_| i <= first_bad.load(AtomicOrdering::Relaxed)) else {
                    return (totals, None);
                };
                if let Err(e) = self.verify_section(section, &mut dec, &mut order, &mut totals, values) {
                    first_bad.fetch_min(i, AtomicOrdering::Relaxed);
                    return (totals, Some((i, e)));
                }
            }
        };
        let threads = threads.clamp(1, sections.len().max(1));
        let results = if threads == 1 {
            vec![run()]
        } else {
            std::thread::scope(|s| {
                let helpers: Vec<_> = (1..threads).map(|_| s.spawn(run)).collect();
                let mut results = vec![run()];
                for h in helpers {
                    results.push(h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
                }
                results
            })
        };
        let mut report = VerifyReport {
            bytes: self.layout.size,
            ..VerifyReport::default()
        };
        let mut state_entries = vec![0u64; self.states.len()];
        let mut state_raw = vec![0u64; self.states.len()];
        let mut first_error: Option<(usize, FormatError)> = None;
        for (t, err) in results {
            if let Some((i, e)) = err {
                if first_error.as_ref().is_none_or(|(j, _)| i < *j) {
                    first_error = Some((i, e));
                }
            }
            report.blocks += t.blocks;
            report.entries += t.entries;
            let sums = state_entries.iter_mut().zip(state_raw.iter_mut());
            for ((se, sr), (e, r)) in sums.zip(t.state_entries.iter().zip(&t.state_raw)) {
                *se += e;
                *sr += r;
            }
        }
        if let Some((_, e)) = first_error {
            return Err(e);
        }
        for (st, (&entries, &raw)) in self.info.states.iter().zip(state_entries.iter().zip(&state_raw)) {
            if st.entries != entries || st.raw_bytes != raw {
                return Err(FormatError::corrupt(
                    &self.file,
                    self.layout.index_offset,
                    "index.state_totals",
                    format!(
                        "state {:?}: index says {} entries / {} raw bytes, the blocks hold {} / {}",
                        st.name, st.entries, st.raw_bytes, entries, raw
                    ),
                ));
            }
        }
        Ok(report)
    }

    /// Fully checks one section, adding its counts to `totals`.
    fn verify_section(
        &self,
        s: &Section,
        dec: &mut BlockDecoder,
        order: &mut OrderChecker,
        totals: &mut VerifyTotals,
        values: bool,
    ) -> Result<()> {
        order.have = false;
        let mut index = 0u64;
        let t = self.read_section(s, dec, |e, len| {
            if let Err(m) = check_entry_shape(&self.states, e)
                .map_err(EntryFault::from)
                .and_then(|()| order.check(e, &self.shapes).map_err(EntryFault::from))
                .and_then(|()| {
                    if values {
                        check_entry_values(&self.states, e).map_err(EntryFault::from)
                    } else {
                        Ok(())
                    }
                })
            {
                return Err(FormatError::corrupt(
                    &self.file,
                    s.offset,
                    format!("key group {}", s.id),
                    format!("entry {index}: {m}"),
                ));
            }
            index += 1;
            // `check_entry_shape` found the state in the file's list; a total per state.
            match (
                totals.state_entries.get_mut(e.state as usize),
                totals.state_raw.get_mut(e.state as usize),
            ) {
                (Some(n), Some(r)) => {
                    *n += 1;
                    *r += len as u64;
                }
                _ => {
                    return Err(FormatError::corrupt(
                        &self.file,
                        s.offset,
                        format!("key group {}", s.id),
                        format!("entry {index}: state {} has no totals", e.state),
                    ))
                }
            }
            Ok(ControlFlow::Continue(()))
        })?;
        // The checks above fail; they never stop the walk.
        if let ControlFlow::Continue(t) = t {
            totals.blocks += t.blocks;
            totals.entries += t.entries;
        }
        Ok(())
    }
}

/// Files smaller than this are verified on the calling thread alone.
const VERIFY_PARALLEL_MIN_BYTES: u64 = 4 << 20;

/// What one verifying thread counted.
struct VerifyTotals {
    blocks: u64,
    entries: u64,
    state_entries: Vec<u64>,
    state_raw: Vec<u64>,
}

impl KeyedStateView for KeyedFileReader {
    statekit_core::keyed_accessors!(max_parallelism, key_group_range, states);

    fn visit_key_group(
        &self,
        key_group: u32,
        visitor: &mut EntryVisitor<'_>,
    ) -> std::result::Result<ControlFlow<()>, StateError> {
        let Some(s) = self.section(key_group) else {
            return Ok(ControlFlow::Continue(()));
        };
        match with_decoder(|dec| self.read_section(s, dec, |e, _| visitor(e).map_err(FormatError::State))) {
            Ok(ControlFlow::Continue(_)) => Ok(ControlFlow::Continue(())),
            Ok(ControlFlow::Break(())) => Ok(ControlFlow::Break(())),
            Err(e) => Err(StateError::from(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::Compression;
    use statekit_core::storage::MemoryStorage;
    use statekit_core::{MemoryView, OwnedEntry, TypeSchema};

    /// `n` entries of value state 0: key `i` (big-endian) in key group `i % key_groups`, with
    /// the value `value(i)`.
    fn numbered(n: u32, key_groups: u32, value: impl Fn(u32) -> Vec<u8>) -> Vec<OwnedEntry> {
        (0..n)
            .map(|i| OwnedEntry {
                key_group: i % key_groups,
                state: 0,
                key: i.to_be_bytes().to_vec(),
                namespace: vec![],
                user_key: None,
                value: value(i),
                timestamp: None,
            })
            .collect()
    }

    #[test]
    fn parallel_and_serial_writers_produce_identical_bytes() {
        let states = vec![
            StateDescriptor::value("v", TypeSchema::Bytes, TypeSchema::Bytes),
            StateDescriptor::list("l", TypeSchema::Bytes, TypeSchema::Bytes),
        ];
        // Uneven key groups: key group 3 alone spans hundreds of blocks (more than a thread
        // may have in flight), most others a few, some none.
        let entries = (0..6000u32)
            .map(|i| OwnedEntry {
                key_group: if i % 2 == 0 { 3 } else { (i / 2) % 13 },
                state: i % 2,
                key: (if i % 2 == 0 { i } else { i / 8 }).to_be_bytes().to_vec(),
                namespace: vec![],
                user_key: None,
                value: format!("value {i} {}", i * 7919).into_bytes(),
                timestamp: None,
            })
            .collect();
        let view = MemoryView::new(16, KeyGroupRange::all(16), states, entries);
        for compression in [Compression::None, Compression::Lz4, Compression::Zstd { level: 3 }] {
            for block_size in [64, 512, 1 << 16] {
                let opts = WriteOptions {
                    compression,
                    block_size,
                };
                let storage = MemoryStorage::new();
                let mut files = Vec::new();
                for threads in [0, 1, 2, 3, 16] {
                    let path = format!("w{threads}");
                    let info = write_keyed_file_with(&view, KeyGroupRange::all(16), &storage, &path, &opts, threads)
                        .expect("write");
                    files.push((
                        (
                            info.key_groups,
                            info.states,
                            info.entries,
                            info.raw_bytes,
                            info.file.size,
                        ),
                        storage.open(&path).expect("open").bytes().to_vec(),
                    ));
                }
                assert!(files.windows(2).all(|w| w[0] == w[1]), "{compression:?} {block_size}");
            }
        }
    }

    #[test]
    fn the_first_bad_key_group_is_reported_whatever_the_threads() {
        let states = vec![StateDescriptor::value("v", TypeSchema::Bytes, TypeSchema::Bytes)];
        let mut entries: Vec<OwnedEntry> = numbered(2000, 16, |_| vec![7; 40]);
        // Duplicates in key groups 5 and 11: the writer names key group 5, as a serial
        // write does, even when 11 is found first.
        for kg in [5u32, 11] {
            let mut dup = entries[kg as usize].clone();
            dup.value = vec![8];
            entries.push(dup);
        }
        let view = MemoryView::new(16, KeyGroupRange::all(16), states, entries);
        let opts = WriteOptions {
            compression: Compression::None,
            block_size: 256,
        };
        for threads in [0, 1, 2, 4, 16] {
            let storage = MemoryStorage::new();
            let e = write_keyed_file_with(&view, KeyGroupRange::all(16), &storage, "f", &opts, threads)
                .expect_err("duplicate");
            let msg = e.to_string();
            assert!(
                msg.contains("key group 5:") && msg.contains("duplicate"),
                "{threads}: {msg}"
            );
            assert!(!storage.exists("f").expect("exists"), "nothing committed");
        }
    }

    /// Transcoding keeps every entry and block boundary: lz4 -> zstd -> none -> lz4 gives the
    /// original bytes back; a renamed state list only changes the header; a different shape
    /// is refused; a damaged block is reported, and nothing is committed.
    #[test]
    fn transcoding_recompresses_blocks_and_keeps_every_entry() {
        let states = vec![
            StateDescriptor::value("v", TypeSchema::Bytes, TypeSchema::Bytes),
            StateDescriptor::list("l", TypeSchema::Bytes, TypeSchema::Bytes),
        ];
        let entries: Vec<OwnedEntry> = (0..4000u32)
            .map(|i| OwnedEntry {
                key_group: (i / 2) % 16,
                state: i % 2,
                key: (i / 2).to_be_bytes().to_vec(),
                namespace: vec![],
                user_key: None,
                value: format!("value {i} {}", i % 97).into_bytes(),
                timestamp: None,
            })
            .collect();
        let mut sorted = entries.clone();
        sorted.sort_by(|a, b| (a.key_group, a.state, &a.key).cmp(&(b.key_group, b.state, &b.key)));
        let view = MemoryView::new(16, KeyGroupRange::new(0, 16), states.clone(), sorted);
        let storage = MemoryStorage::new();
        let lz4 = WriteOptions {
            compression: Compression::Lz4,
            block_size: 512,
        };
        write_keyed_file(&view, KeyGroupRange::all(16), &storage, "a", &lz4).expect("write");
        let open = |p: &str| KeyedFileReader::open(&storage, p, None).expect("open");
        let mut from = "a".to_string();
        for (i, compression) in [Compression::Zstd { level: 1 }, Compression::None, Compression::Lz4]
            .into_iter()
            .enumerate()
        {
            let to = format!("t{i}");
            let opts = WriteOptions {
                compression,
                block_size: 1 << 16,
            };
            let info = transcode_keyed_file(&open(&from), &states, &storage, &to, &opts).expect("transcode");
            assert_eq!(info.entries, 4000);
            let r = open(&to);
            assert_eq!(r.verify().expect("verify").entries, 4000);
            let all = |r: &KeyedFileReader| MemoryView::collect(r, KeyGroupRange::all(16)).expect("collect");
            assert_eq!(all(&r).entries(), all(&open("a")).entries());
            from = to;
        }
        let bytes = |p: &str| storage.open(p).expect("open").bytes().to_vec();
        assert_eq!(bytes("t2"), bytes("a"), "back to lz4: the same file");
        // Renamed states: a new header, the same entries.
        let renamed = vec![
            StateDescriptor::value("v2", TypeSchema::Bytes, TypeSchema::Bytes),
            StateDescriptor::list("l2", TypeSchema::Bytes, TypeSchema::Bytes),
        ];
        transcode_keyed_file(&open("a"), &renamed, &storage, "r", &lz4).expect("rename");
        let r = open("r");
        assert_eq!(r.states()[0].name, "v2");
        assert_eq!(r.verify().expect("verify").entries, 4000);
        // Another shape is refused.
        let swapped = vec![states[1].clone(), states[0].clone()];
        let e = transcode_keyed_file(&open("a"), &swapped, &storage, "s", &lz4).expect_err("shape");
        assert!(e.to_string().contains("keeps the states"), "{e}");
        assert!(!storage.exists("s").expect("exists"));
        // A flipped byte inside a block: reported with its offset, nothing committed.
        let mut damaged = bytes("a");
        let at = open("a").key_groups()[3].offset as usize + 30;
        damaged[at] ^= 0x40;
        let transcode_bad = |name: &str, bytes: &[u8], says: &str| {
            let mut w = storage.create(name).expect("create");
            std::io::Write::write_all(&mut w, bytes).expect("write");
            w.commit().expect("commit");
            let e = transcode_keyed_file(&open(name), &states, &storage, "out", &lz4).expect_err(name);
            assert!(e.to_string().contains(says), "{e}");
            assert!(!storage.exists("out").expect("exists"));
        };
        transcode_bad("d", &damaged, "crc32");
        // A block kept as stored (LZ4 into LZ4) is still decompressed and checked: a header
        // whose raw length lies, under a CRC that matches it, is refused.
        let mut lying = bytes("a");
        let at = open("a").key_groups()[3].offset as usize;
        let raw_len = u32::from_le_bytes(lying[at + 4..at + 8].try_into().expect("4 bytes"));
        assert_eq!(lying[at + 16], crate::block::CODEC_LZ4, "the test needs an LZ4 block");
        lying[at + 4..at + 8].copy_from_slice(&(raw_len + 1).to_le_bytes());
        let stored_len = u32::from_le_bytes(lying[at..at + 4].try_into().expect("4 bytes")) as usize;
        let mut h = crc32fast::Hasher::new();
        h.update(&lying[at..at + crate::block::BLOCK_CRC_SCOPE]);
        h.update(&lying[at + BLOCK_HEADER_LEN..at + BLOCK_HEADER_LEN + stored_len]);
        lying[at + 20..at + 24].copy_from_slice(&h.finalize().to_le_bytes());
        transcode_bad("lying", &lying, "raw_len");
    }

    /// A view whose visit of one key group panics.
    struct PanickingView(MemoryView, u32);

    impl KeyedStateView for PanickingView {
        fn max_parallelism(&self) -> u32 {
            self.0.max_parallelism()
        }
        fn key_group_range(&self) -> KeyGroupRange {
            self.0.key_group_range()
        }
        fn states(&self) -> &[StateDescriptor] {
            self.0.states()
        }
        fn visit_key_group(
            &self,
            kg: u32,
            visitor: &mut EntryVisitor<'_>,
        ) -> std::result::Result<ControlFlow<()>, StateError> {
            assert_ne!(kg, self.1, "view panics");
            self.0.visit_key_group(kg, visitor)
        }
    }

    #[test]
    fn a_panicking_view_panics_the_caller_and_commits_nothing() {
        let states = vec![StateDescriptor::value("v", TypeSchema::Bytes, TypeSchema::Bytes)];
        let entries = numbered(500, 16, |_| vec![1; 100]);
        let view = PanickingView(MemoryView::new(16, KeyGroupRange::all(16), states, entries), 6);
        let opts = WriteOptions {
            compression: Compression::Lz4,
            block_size: 128,
        };
        for threads in [0, 2, 4] {
            let storage = MemoryStorage::new();
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                write_keyed_file_with(&view, KeyGroupRange::all(16), &storage, "f", &opts, threads)
            }));
            assert!(r.is_err(), "{threads}: the panic reaches the caller");
            assert!(!storage.exists("f").expect("exists"), "nothing committed");
        }
    }

    #[test]
    fn parallel_verify_reports_what_a_serial_one_does() {
        let states = vec![StateDescriptor::value("v", TypeSchema::Bytes, TypeSchema::Bytes)];
        let entries = numbered(3000, 32, |i| vec![(i % 251) as u8; 30]);
        let view = MemoryView::new(32, KeyGroupRange::all(32), states, entries);
        let opts = WriteOptions {
            compression: Compression::Lz4,
            block_size: 512,
        };
        let storage = MemoryStorage::new();
        let info = write_keyed_file(&view, KeyGroupRange::all(32), &storage, "f", &opts).expect("write");
        let good = storage.open("f").expect("open").bytes().to_vec();
        let verify = |bytes: &[u8], threads: usize| {
            let r = KeyedFileReader::from_blob(Arc::new(bytes.to_vec()), "f".into()).expect("open");
            r.verify_with(threads, false).map_err(|e| e.to_string())
        };
        let serial = verify(&good, 1).expect("verify");
        assert_eq!(serial.entries, 3000);
        for threads in [2, 3, 4, 16] {
            assert_eq!(verify(&good, threads), Ok(serial));
        }
        // Damage a block in key group 7 and one in key group 20: every thread count names
        // the first.
        let mut bad = good.clone();
        for kg in [20usize, 7] {
            let at = info.key_groups[kg].offset as usize + BLOCK_HEADER_LEN + 3;
            bad[at] ^= 0x40;
        }
        let serial = verify(&bad, 1).expect_err("corrupt");
        assert!(
            serial.contains(&format!("offset {}", info.key_groups[7].offset)),
            "{serial}"
        );
        for threads in [2, 3, 4, 16] {
            assert_eq!(verify(&bad, threads), Err(serial.clone()));
        }
    }

    /// A view of one key group yielding the entries exactly as listed.
    struct Listed(Vec<StateDescriptor>, Vec<OwnedEntry>);

    impl KeyedStateView for Listed {
        fn max_parallelism(&self) -> u32 {
            1
        }
        fn key_group_range(&self) -> KeyGroupRange {
            KeyGroupRange::all(1)
        }
        fn states(&self) -> &[StateDescriptor] {
            &self.0
        }
        fn visit_key_group(
            &self,
            _: u32,
            visitor: &mut EntryVisitor<'_>,
        ) -> std::result::Result<ControlFlow<()>, StateError> {
            for e in &self.1 {
                if visitor(&e.as_entry())?.is_break() {
                    return Ok(ControlFlow::Break(()));
                }
            }
            Ok(ControlFlow::Continue(()))
        }
    }

    #[test]
    fn order_checks_hold_across_block_boundaries() {
        let states = vec![
            StateDescriptor::value("v", TypeSchema::Bytes, TypeSchema::Bytes),
            StateDescriptor::list("l", TypeSchema::Bytes, TypeSchema::Bytes),
            StateDescriptor::map("m", TypeSchema::Bytes, TypeSchema::Bytes, TypeSchema::Bytes),
        ];
        let e = |state: u32, key: &[u8], ns: &[u8], uk: Option<&[u8]>| OwnedEntry {
            key_group: 0,
            state,
            key: key.to_vec(),
            namespace: ns.to_vec(),
            user_key: uk.map(<[u8]>::to_vec),
            value: b"value".to_vec(),
            timestamp: None,
        };
        let good = vec![
            e(0, b"a", b"", None),
            e(0, b"a", b"n", None),
            e(0, b"ab", b"", None),
            e(1, b"a", b"", None),
            e(1, b"a", b"", None),
            e(1, b"a", b"", None),
            e(1, b"b", b"x", None),
            e(2, b"a", b"", Some(b"1")),
            e(2, b"a", b"", Some(b"2")),
            e(2, b"a", b"", Some(b"3")),
            e(2, b"c", b"", Some(b"1")),
        ];
        // Each bad list is `good` with one entry changed; the writer must notice wherever
        // the block boundaries fall.
        let mut bad = Vec::new();
        for (i, (state, key, ns, uk)) in [
            (0u32, &b"a"[..], &b""[..], None),
            (0, b"a", b"", None),
            (0, b"z", b"", None),
            (2, b"a", b"", Some(&b"2"[..])),
            (2, b"a", b"", Some(&b"0"[..])),
            (2, b"a", b"", Some(&b"1"[..])),
        ]
        .into_iter()
        .enumerate()
        {
            let at = [1, 2, 5, 9, 8, 10][i];
            let mut v = good.clone();
            v[at] = e(state, key, ns, uk);
            bad.push(v);
        }
        for threads in [0, 2] {
            for block_size in [1, 2, 3, 16, 1 << 16] {
                let opts = WriteOptions {
                    compression: Compression::None,
                    block_size,
                };
                let storage = MemoryStorage::new();
                let view = Listed(states.clone(), good.clone());
                let info = write_keyed_file_with(&view, KeyGroupRange::all(1), &storage, "f", &opts, threads)
                    .expect("in order");
                let r = KeyedFileReader::open(&storage, "f", Some(info.file.size)).expect("open");
                r.verify().expect("verify");
                let mut back = Vec::new();
                let _ = r
                    .visit_key_group(0, &mut |x| {
                        back.push(OwnedEntry {
                            key_group: 0,
                            state: x.state,
                            key: x.key.to_vec(),
                            namespace: x.namespace.to_vec(),
                            user_key: x.user_key.map(<[u8]>::to_vec),
                            value: x.value.to_vec(),
                            timestamp: x.timestamp,
                        });
                        Ok(ControlFlow::Continue(()))
                    })
                    .expect("visit");
                assert_eq!(back, good, "block size {block_size}");
                for (i, entries) in bad.iter().enumerate() {
                    let view = Listed(states.clone(), entries.clone());
                    let r = write_keyed_file_with(&view, KeyGroupRange::all(1), &storage, "g", &opts, threads);
                    assert!(r.is_err(), "bad list {i}, block size {block_size}, {threads} threads");
                }
            }
        }
    }
}
