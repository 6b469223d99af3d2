//! The log file format (`docs/changelog-format.md`): `header ‖ change sets ‖ index ‖ trailer`,
//! every part covered by a CRC32, every change set compressed on its own so its offset stays
//! seekable, and an index of every change set (log, sequence number, offset, length, records,
//! key groups) so a reader fetches only the change sets of its key-group range.
#![deny(clippy::indexing_slicing)]

use crate::record::{decode_record, encode_change, encode_metadata, Change, Record};
use statekit_core::schema::put_varint;
use statekit_core::storage::{Blob, Storage, StorageWriter};
use statekit_core::{KeyGroupRange, StateDescriptor};
use statekit_format::{le_u32, Cursor, FormatError};
use std::fmt;
use std::io::Write;
use std::ops::ControlFlow;
use std::sync::Arc;

/// Magic of a log file.
pub const FILE_MAGIC: [u8; 4] = *b"SKCL";
/// Magic of a change set.
pub const CHANGE_SET_MAGIC: [u8; 4] = *b"SKCS";
/// Magic at the very end of a log file.
pub const TRAILER_MAGIC: [u8; 4] = *b"SKCE";
/// The log format version this build writes and reads.
pub const LOG_FORMAT_VERSION: u32 = 1;
/// The key group of metadata records (applied to every key-group range).
pub const META_KEY_GROUP: u32 = u32::MAX;

/// Bytes of the file header.
pub const HEADER_LEN: usize = 40;
/// Bytes of a change set's header.
pub const CHANGE_SET_HEADER_LEN: usize = 48;
/// Bytes of the trailer.
pub const TRAILER_LEN: usize = 24;

const CS_HAS_META: u8 = 1;

/// Header flag bit 0: zero bytes follow the trailer up to the end of the file (a file written
/// in place into a prepared, zero-filled file; `docs/changelog-format.md#padding`). The file's
/// logical size — what a checkpoint's reference records — ends at the trailer.
pub const FLAG_PADDED: u32 = 1;

type Result<T> = std::result::Result<T, FormatError>;

/// Identifies one log: the changes of one backend instance (random, 16 bytes).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LogId(pub [u8; 16]);

impl LogId {
    /// A fresh random id.
    pub fn random() -> Self {
        LogId(rand::random())
    }
}

impl fmt::Display for LogId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for LogId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LogId({self})")
    }
}

/// How change sets are compressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LogCompression {
    /// Stored as is.
    #[default]
    None,
    /// LZ4 block format.
    Lz4,
}

impl LogCompression {
    fn code(self) -> u8 {
        match self {
            LogCompression::None => 0,
            LogCompression::Lz4 => 1,
        }
    }
}

/// The records of one change set, grouped by key group as they are appended (each group keeps
/// operation order), so sealing is one copy: no sort, no second pass over the records.
#[derive(Clone, Debug, Default)]
pub struct ChangeSetBuffer {
    /// Data records per key group, in order of first appearance.
    groups: Vec<Group>,
    /// Index into `groups` by key group (`u32::MAX`: none yet); grown on demand.
    slot: Vec<u32>,
    /// Metadata records.
    meta: Group,
    records: u32,
    /// Bytes in every group's `data`.
    bytes: usize,
    scratch: Vec<u8>,
}

/// The records of one key group: `(len: varint ‖ record)*`.
#[derive(Clone, Debug, Default)]
struct Group {
    kg: u32,
    records: u32,
    data: Vec<u8>,
}

impl ChangeSetBuffer {
    /// An empty buffer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records appended.
    pub fn records(&self) -> u32 {
        self.records
    }

    /// Bytes buffered (about what the change set will take uncompressed).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// True when nothing was appended.
    pub fn is_empty(&self) -> bool {
        self.records == 0
    }

    /// The group of data key group `kg` (`slot` indexes `groups` by key group), created on
    /// its first record.
    // `groups[i]` is in bounds: `i` is the index of the group just pushed, or a slot's value,
    // and a slot is only ever set to that (groups are never removed).
    #[allow(clippy::indexing_slicing)]
    #[inline]
    fn group<'g>(groups: &'g mut Vec<Group>, slot: &mut Vec<u32>, kg: u32) -> &'g mut Group {
        let k = kg as usize;
        if k >= slot.len() {
            slot.resize(k + 1, u32::MAX);
        }
        let i = match slot.get(k) {
            Some(&i) if i != u32::MAX => i as usize,
            _ => {
                let i = groups.len();
                groups.push(Group { kg, ..Group::default() });
                if let Some(s) = slot.get_mut(k) {
                    *s = i as u32;
                }
                i
            }
        };
        &mut groups[i]
    }

    /// Moves the record in `scratch` into the group of `kg`.
    fn push_scratch(&mut self, kg: u32) {
        let g = if kg == META_KEY_GROUP {
            &mut self.meta
        } else {
            Self::group(&mut self.groups, &mut self.slot, kg)
        };
        let before = g.data.len();
        put_varint(&mut g.data, self.scratch.len() as u64);
        g.data.extend_from_slice(&self.scratch);
        g.records += 1;
        self.bytes += g.data.len() - before;
        self.records += 1;
    }

    /// Appends a metadata record.
    pub fn push_metadata(&mut self, state: u32, descriptor: &StateDescriptor) {
        self.scratch.clear();
        encode_metadata(&mut self.scratch, state, descriptor);
        self.push_scratch(META_KEY_GROUP);
    }

    /// Appends a data record of key group `kg`.
    pub fn push_change(&mut self, kg: u32, change: &Change<'_>) {
        self.scratch.clear();
        encode_change(&mut self.scratch, change);
        self.push_scratch(kg);
    }

    /// The change set (metadata first, then ascending key groups; the order of records
    /// within a key group is kept). The buffer stays as it is (for a retry).
    pub fn seal(&self, log: LogId, sqn: u64) -> SealedChangeSet {
        let mut order: Vec<&Group> = self.groups.iter().collect();
        order.sort_unstable_by_key(|g| g.kg);
        let has_meta = self.meta.records > 0;
        let mut raw = Vec::with_capacity(self.bytes + 12 * (order.len() + 1));
        let meta = std::iter::once((META_KEY_GROUP, &self.meta)).filter(|_| has_meta);
        for (kg, g) in meta.chain(order.iter().map(|g| (g.kg, *g))) {
            put_varint(&mut raw, u64::from(kg));
            put_varint(&mut raw, u64::from(g.records));
            raw.extend_from_slice(&g.data);
        }
        SealedChangeSet {
            log,
            sqn,
            records: self.records,
            has_meta,
            key_groups: order.iter().map(|g| g.kg).collect(),
            raw,
        }
    }
}

/// A change set grouped by key group, ready to be written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SealedChangeSet {
    /// Its log.
    pub log: LogId,
    /// Its sequence number.
    pub sqn: u64,
    /// Records.
    pub records: u32,
    /// It holds metadata records.
    pub has_meta: bool,
    /// The key groups of its data records, ascending.
    pub key_groups: Vec<u32>,
    /// The grouped payload (`docs/changelog-format.md`, "Change set payload").
    pub raw: Vec<u8>,
}

/// Where a change set was written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexEntry {
    /// Its log.
    pub log: LogId,
    /// Its sequence number.
    pub sqn: u64,
    /// Offset of its header in the file.
    pub offset: u64,
    /// Bytes from its header to its end.
    pub length: u64,
    /// Records.
    pub records: u32,
    /// It holds metadata records.
    pub has_meta: bool,
    /// Key groups of its data records, ascending.
    pub key_groups: Vec<u32>,
}

impl IndexEntry {
    /// True when a reader of `range` needs this change set (metadata, or a key group in it).
    pub fn concerns(&self, range: &KeyGroupRange) -> bool {
        self.has_meta || self.key_groups.iter().any(|kg| range.contains(*kg))
    }
}

fn crc_of(parts: &[&[u8]]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    for p in parts {
        h.update(p);
    }
    h.finalize()
}

/// Where a [`LogFileWriter`] writes.
enum Sink {
    Storage(Box<dyn StorageWriter>),
    Memory(Vec<u8>),
}

impl Sink {
    fn write_all(&mut self, b: &[u8]) -> std::io::Result<()> {
        match self {
            Sink::Storage(w) => w.write_all(b),
            Sink::Memory(v) => {
                v.extend_from_slice(b);
                Ok(())
            }
        }
    }
}

/// The header of a log file.
fn header_bytes(upload_id: &[u8; 16], created_ms: i64, flags: u32) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[0..4].copy_from_slice(&FILE_MAGIC);
    h[4..8].copy_from_slice(&LOG_FORMAT_VERSION.to_le_bytes());
    h[8..12].copy_from_slice(&flags.to_le_bytes());
    h[12..28].copy_from_slice(upload_id);
    h[28..36].copy_from_slice(&created_ms.to_le_bytes());
    let crc = crc32fast::hash(&h[..36]);
    h[36..40].copy_from_slice(&crc.to_le_bytes());
    h
}

/// The largest prepared log file the upload service makes.
pub const MAX_PREPARED_BYTES: u64 = 256 << 20;

/// True for a prepared log file never written: non-empty, at most [`MAX_PREPARED_BYTES`], every
/// byte zero. The upload service keeps such spares ready under final names
/// (`docs/changelog-format.md#padding`); one a crash left behind is an orphan. Not a log file,
/// and not a damaged one. (A larger file of zeros is neither: it is not even read.)
pub fn is_unwritten_prepared(bytes: &[u8]) -> bool {
    !bytes.is_empty() && bytes.len() as u64 <= MAX_PREPARED_BYTES && bytes.iter().all(|&x| x == 0)
}

/// Sets [`FLAG_PADDED`] in the header of an encoded log file (`bytes` from
/// [`LogFileWriter::finish_bytes`]) and renews the header's CRC: the file is about to be
/// written into a larger, zero-filled one. Bytes that do not start with a log file header are
/// left alone.
pub fn mark_padded(bytes: &mut [u8]) {
    let Some(h) = bytes.first_chunk_mut::<HEADER_LEN>() else {
        return;
    };
    if h[..4] != FILE_MAGIC {
        return;
    }
    let flags = u32::from_le_bytes([h[8], h[9], h[10], h[11]]) | FLAG_PADDED;
    h[8..12].copy_from_slice(&flags.to_le_bytes());
    let crc = crc32fast::hash(&h[..36]);
    h[36..40].copy_from_slice(&crc.to_le_bytes());
}

/// Writes one log file: the header, the change sets, the index and the trailer, streaming
/// into a storage writer (temp file; visible under its name only once committed) or into
/// memory ([`LogFileWriter::in_memory`]).
pub struct LogFileWriter {
    out: Sink,
    pos: u64,
    index: Vec<IndexEntry>,
    compression: LogCompression,
    buf: Vec<u8>,
}

impl LogFileWriter {
    /// Starts `path` of `storage`; `upload_id` and `created_ms` go into the header.
    pub fn create(
        storage: &dyn Storage,
        path: &str,
        upload_id: [u8; 16],
        created_ms: i64,
        compression: LogCompression,
    ) -> Result<Self> {
        let mut out = storage.create(path)?;
        out.write_all(&header_bytes(&upload_id, created_ms, 0))
            .map_err(|e| io(storage, path, e))?;
        Ok(LogFileWriter {
            out: Sink::Storage(out),
            pos: HEADER_LEN as u64,
            index: Vec::new(),
            compression,
            buf: Vec::new(),
        })
    }

    /// Starts a log file in memory (taken by [`LogFileWriter::finish_bytes`]), for a write in
    /// one piece, e.g. into a prepared file.
    pub fn in_memory(upload_id: [u8; 16], created_ms: i64, compression: LogCompression) -> Self {
        LogFileWriter {
            out: Sink::Memory(header_bytes(&upload_id, created_ms, 0).to_vec()),
            pos: HEADER_LEN as u64,
            index: Vec::new(),
            compression,
            buf: Vec::new(),
        }
    }

    /// Appends a change set; returns where it went.
    pub fn append(&mut self, cs: &SealedChangeSet) -> std::io::Result<IndexEntry> {
        let raw_len = u32::try_from(cs.raw.len()).map_err(|_| std::io::Error::other("a change set over 4 GiB"))?;
        let (codec, stored): (LogCompression, &[u8]) = match self.compression {
            LogCompression::None => (LogCompression::None, &cs.raw),
            LogCompression::Lz4 => {
                self.buf.clear();
                self.buf
                    .resize(lz4_flex::block::get_maximum_output_size(cs.raw.len()), 0);
                let n = lz4_flex::block::compress_into(&cs.raw, &mut self.buf)
                    .map_err(|e| std::io::Error::other(e.to_string()))?;
                self.buf.truncate(n);
                if n < cs.raw.len() {
                    (LogCompression::Lz4, &self.buf)
                } else {
                    (LogCompression::None, &cs.raw)
                }
            }
        };
        let mut h = [0u8; CHANGE_SET_HEADER_LEN];
        h[0..4].copy_from_slice(&CHANGE_SET_MAGIC);
        h[4..20].copy_from_slice(&cs.log.0);
        h[20..28].copy_from_slice(&cs.sqn.to_le_bytes());
        h[28..32].copy_from_slice(&cs.records.to_le_bytes());
        h[32] = codec.code();
        h[33] = if cs.has_meta { CS_HAS_META } else { 0 };
        h[36..40].copy_from_slice(&raw_len.to_le_bytes());
        h[40..44].copy_from_slice(&(stored.len() as u32).to_le_bytes());
        let crc = crc_of(&[&h[..44], stored]);
        h[44..48].copy_from_slice(&crc.to_le_bytes());
        self.out.write_all(&h)?;
        self.out.write_all(stored)?;
        let entry = IndexEntry {
            log: cs.log,
            sqn: cs.sqn,
            offset: self.pos,
            length: (CHANGE_SET_HEADER_LEN + stored.len()) as u64,
            records: cs.records,
            has_meta: cs.has_meta,
            key_groups: cs.key_groups.clone(),
        };
        self.pos += entry.length;
        self.index.push(entry.clone());
        Ok(entry)
    }

    /// Writes index and trailer and commits the file (fsync, rename); returns its size and
    /// the index. A writer [`LogFileWriter::in_memory`] only returns the size it would have.
    pub fn finish(mut self) -> Result<(u64, Vec<IndexEntry>)> {
        self.seal()?;
        let size = match self.out {
            Sink::Storage(w) => w.commit()?,
            Sink::Memory(v) => v.len() as u64,
        };
        Ok((size, self.index))
    }

    /// Writes index and trailer; returns the whole file and its index (for a writer
    /// [`LogFileWriter::in_memory`]; a storage writer is committed and its file read back is
    /// not returned: empty bytes).
    pub fn finish_bytes(mut self) -> Result<(Vec<u8>, Vec<IndexEntry>)> {
        self.seal()?;
        match self.out {
            Sink::Storage(w) => {
                w.commit()?;
                Ok((Vec::new(), self.index))
            }
            Sink::Memory(v) => Ok((v, self.index)),
        }
    }

    /// Writes the index and the trailer.
    fn seal(&mut self) -> Result<()> {
        let mut idx = Vec::new();
        put_varint(&mut idx, self.index.len() as u64);
        for e in &self.index {
            idx.extend_from_slice(&e.log.0);
            put_varint(&mut idx, e.sqn);
            put_varint(&mut idx, e.offset);
            put_varint(&mut idx, e.length);
            put_varint(&mut idx, u64::from(e.records));
            idx.push(u8::from(e.has_meta));
            put_varint(&mut idx, e.key_groups.len() as u64);
            let mut prev: Option<u32> = None;
            for &kg in &e.key_groups {
                put_varint(&mut idx, u64::from(prev.map_or(kg, |p| kg - p - 1)));
                prev = Some(kg);
            }
        }
        let mut t = Vec::with_capacity(TRAILER_LEN);
        t.extend_from_slice(&self.pos.to_le_bytes());
        t.extend_from_slice(&(idx.len() as u32).to_le_bytes());
        t.extend_from_slice(&crc32fast::hash(&idx).to_le_bytes());
        t.extend_from_slice(&(self.index.len() as u32).to_le_bytes());
        t.extend_from_slice(&TRAILER_MAGIC);
        let name = "log file".to_string();
        self.out
            .write_all(&idx)
            .map_err(|e| FormatError::corrupt(&name, self.pos, "index", e.to_string()))?;
        self.out
            .write_all(&t)
            .map_err(|e| FormatError::corrupt(&name, self.pos, "trailer", e.to_string()))?;
        Ok(())
    }
}

fn io(storage: &dyn Storage, path: &str, e: std::io::Error) -> FormatError {
    FormatError::Storage(statekit_core::storage::StorageError::Io {
        path: storage.describe(path),
        source: e,
    })
}

/// The header of a log file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogFileHeader {
    /// The upload that wrote the file.
    pub upload_id: [u8; 16],
    /// When it was written (ms since the epoch).
    pub created_ms: i64,
}

/// An open log file: header and index checked; change sets are read (and their CRCs checked)
/// on demand.
pub struct LogFileReader {
    blob: Arc<dyn Blob>,
    file: String,
    header: LogFileHeader,
    index: Vec<IndexEntry>,
    /// Up to the end of the trailer (a padded file's padding excluded).
    size: u64,
    padded: bool,
}

impl fmt::Debug for LogFileReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogFileReader")
            .field("file", &self.file)
            .field("change_sets", &self.index.len())
            .finish()
    }
}

impl LogFileReader {
    /// Opens `path` of `storage`; `expected_size` (from a checkpoint's reference) is checked
    /// when given.
    pub fn open(storage: &dyn Storage, path: &str, expected_size: Option<u64>) -> Result<Self> {
        let blob = storage.open(path)?;
        Self::from_blob(blob, &storage.describe(path), expected_size)
    }

    /// Parses an in-memory file (`file` names it in errors).
    pub fn from_blob(blob: Arc<dyn Blob>, file: &str, expected_size: Option<u64>) -> Result<Self> {
        let b = blob.bytes();
        let size = b.len() as u64;
        let corrupt = |off: u64, field: &str, why: String| FormatError::corrupt(file, off, field, why);
        let too_short = || corrupt(size, "file size", format!("{size} bytes is too short; truncated?"));
        // An unwritten prepared file says so (the scan stops at the first non-zero byte).
        if is_unwritten_prepared(b) {
            return Err(corrupt(
                0,
                "header",
                format!("all {size} bytes are zero: a prepared log file that was never written (a spare of a running job, or an orphan a crash left)"),
            ));
        }
        if b.get(..4) != Some(&FILE_MAGIC[..]) {
            return Err(FormatError::BadMagic {
                file: file.to_string(),
                what: "changelog",
            });
        }
        let Some(version) = le_u32(b, 4) else {
            return Err(too_short());
        };
        if version != LOG_FORMAT_VERSION {
            return Err(FormatError::UnsupportedVersion {
                file: file.to_string(),
                found: version,
                supported: LOG_FORMAT_VERSION,
            });
        }
        // A padded file (header flag) ends at its trailer; zeros follow. The flag is read here
        // only to find that end: the header's CRC and the flags are checked below.
        let padded = le_u32(b, 8).is_some_and(|f| f & FLAG_PADDED != 0);
        let end = match (expected_size, padded) {
            (Some(want), false) if want != size => {
                return Err(corrupt(
                    size.min(want),
                    "file size",
                    format!(
                        "{size} bytes but the reference records {want} ({})",
                        if size < want { "truncated" } else { "trailing data" }
                    ),
                ));
            }
            (Some(want), true) if want > size => {
                return Err(corrupt(
                    size,
                    "file size",
                    format!("{size} bytes but the reference records {want} before the padding (truncated)"),
                ));
            }
            (Some(want), _) => want,
            // The last byte that is not padding is the trailer magic's last.
            (None, true) => b.iter().rposition(|&x| x != 0).map_or(0, |i| i as u64 + 1),
            (None, false) => size,
        };
        let b = usize::try_from(end)
            .ok()
            .and_then(|e| b.get(..e))
            .ok_or_else(too_short)?;
        // The header and, after it, the trailer.
        let Some((head, trailer)) = b
            .split_first_chunk::<HEADER_LEN>()
            .and_then(|(head, rest)| Some((head, rest.last_chunk::<TRAILER_LEN>()?)))
        else {
            return Err(too_short());
        };
        let mut h = Cursor::new(head, 0, file);
        h.take(8, "header.magic+version")?;
        let flags = h.u32("header.flags")?;
        let upload_id = h.array::<16>("header.upload_id")?;
        let created_ms = h.i64("header.created_ms")?;
        let crc_at = h.offset();
        let stored = h.u32("header.crc32")?;
        let actual = crc32fast::hash(&head[..HEADER_LEN - 4]);
        if stored != actual {
            return Err(corrupt(
                crc_at,
                "header.crc32",
                format!("checksum mismatch: stored {stored:#010x}, computed {actual:#010x}"),
            ));
        }
        if flags & !FLAG_PADDED != 0 {
            return Err(corrupt(8, "header.flags", format!("unknown feature flags {flags:#x}")));
        }
        let header = LogFileHeader { upload_id, created_ms };
        let t = b.len() - TRAILER_LEN;
        let mut tr = Cursor::new(trailer, t as u64, file);
        let index_offset = tr.u64("trailer.index_offset")?;
        let index_len = u64::from(tr.u32("trailer.index_len")?);
        let index_crc = tr.u32("trailer.index_crc32")?;
        let count = tr.u32("trailer.count")?;
        let magic_at = tr.offset();
        if tr.array::<4>("trailer.magic")? != TRAILER_MAGIC {
            return Err(corrupt(
                magic_at,
                "trailer.magic",
                "no trailer: the file is truncated or was not finished".into(),
            ));
        }
        let idx = usize::try_from(index_offset)
            .ok()
            .filter(|_| index_offset >= HEADER_LEN as u64 && index_offset.checked_add(index_len) == Some(t as u64))
            .and_then(|start| b.get(start..t))
            .ok_or_else(|| {
                corrupt(
                    t as u64,
                    "trailer.index_offset",
                    format!("index at {index_offset} of {index_len} bytes does not end at the trailer ({t})"),
                )
            })?;
        let actual = crc32fast::hash(idx);
        if actual != index_crc {
            return Err(corrupt(
                index_offset,
                "index.crc32",
                format!("checksum mismatch: stored {index_crc:#010x}, computed {actual:#010x}"),
            ));
        }
        let index = decode_index(idx, index_offset, file, count)?;
        // Change sets tile [header, index) in order.
        let mut expect = HEADER_LEN as u64;
        for (i, e) in index.iter().enumerate() {
            if e.offset != expect || e.length < CHANGE_SET_HEADER_LEN as u64 {
                return Err(corrupt(
                    index_offset,
                    &format!("index[{i}].offset"),
                    format!(
                        "change set at {} of {} bytes, expected one at {expect}",
                        e.offset, e.length
                    ),
                ));
            }
            expect = e.offset + e.length;
        }
        if expect != index_offset {
            return Err(corrupt(
                index_offset,
                "index",
                format!("change sets end at {expect}, the index starts at {index_offset}"),
            ));
        }
        Ok(LogFileReader {
            blob,
            file: file.to_string(),
            header,
            index,
            size: end,
            padded,
        })
    }

    /// The file, as errors name it.
    pub fn file(&self) -> &str {
        &self.file
    }

    /// The header.
    pub fn header(&self) -> &LogFileHeader {
        &self.header
    }

    /// Every change set, in file order.
    pub fn index(&self) -> &[IndexEntry] {
        &self.index
    }

    /// Size of the file up to the end of its trailer (a padded file's padding excluded): what
    /// a checkpoint's reference records.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// True when the file was written into a prepared file (header flag [`FLAG_PADDED`]):
    /// zeros may follow its trailer.
    pub fn padded(&self) -> bool {
        self.padded
    }

    /// The change set at `offset` (which must be an index entry's), CRC checked and
    /// decompressed.
    pub fn change_set(&self, offset: u64) -> Result<ChangeSetData> {
        let e = self.index.iter().find(|e| e.offset == offset).ok_or_else(|| {
            FormatError::corrupt(&self.file, offset, "offset", "no change set starts here".to_string())
        })?;
        self.read(e)
    }

    /// Reads one change set of the index (a file truncated by another program meanwhile is
    /// reported as such).
    pub fn read(&self, e: &IndexEntry) -> Result<ChangeSetData> {
        let r = self.read_change_set(e);
        if r.is_err() {
            statekit_core::storage::check_intact(self.blob.as_ref(), &self.file).map_err(FormatError::from)?;
        }
        r
    }

    fn read_change_set(&self, e: &IndexEntry) -> Result<ChangeSetData> {
        let b = self.blob.bytes();
        let at = e.offset;
        let corrupt = |off: u64, field: &str, why: String| FormatError::corrupt(&self.file, off, field, why);
        // The index tiles the file with change sets (checked when it was opened); an entry
        // from elsewhere may not.
        let (h, stored) = usize::try_from(at)
            .ok()
            .zip(usize::try_from(e.length).ok())
            .and_then(|(start, len)| b.get(start..start.checked_add(len)?))
            .and_then(<[u8]>::split_first_chunk::<CHANGE_SET_HEADER_LEN>)
            .ok_or_else(|| {
                corrupt(
                    at,
                    "change_set",
                    format!("{} bytes at {at} are not a change set of the file", e.length),
                )
            })?;
        let mut c = Cursor::new(h, at, &self.file);
        let magic = c.array::<4>("change_set.magic")?;
        let log = c.array::<16>("change_set.log")?;
        let sqn = c.u64("change_set.sqn")?;
        let records = c.u32("change_set.records")?;
        let codec = c.u8("change_set.codec")?;
        let flags = c.u8("change_set.flags")?;
        let reserved = c.array::<2>("change_set.reserved")?;
        let raw_len = c.u32("change_set.raw_len")? as usize;
        let stored_len = c.u32("change_set.stored_len")? as usize;
        let want = c.u32("change_set.crc32")?;
        if magic != CHANGE_SET_MAGIC {
            return Err(corrupt(at, "change_set.magic", "not a change set".into()));
        }
        if stored_len != stored.len() {
            return Err(corrupt(
                at + 40,
                "change_set.stored_len",
                format!("{stored_len} bytes disagree with the index's length {}", e.length),
            ));
        }
        let got = crc_of(&[&h[..CHANGE_SET_HEADER_LEN - 4], stored]);
        if want != got {
            return Err(corrupt(
                at + 44,
                "change_set.crc32",
                format!("checksum mismatch: stored {want:#010x}, computed {got:#010x}"),
            ));
        }
        if LogId(log) != e.log || sqn != e.sqn || records != e.records {
            return Err(corrupt(
                at + 4,
                "change_set",
                "log, sequence number or record count disagree with the index".into(),
            ));
        }
        if flags & !CS_HAS_META != 0 || reserved != [0, 0] {
            return Err(corrupt(
                at + 33,
                "change_set.flags",
                format!("unknown flags {flags:#04x}"),
            ));
        }
        let raw = match codec {
            0 => {
                if raw_len != stored_len {
                    return Err(corrupt(
                        at + 36,
                        "change_set.raw_len",
                        "uncompressed, but the lengths differ".into(),
                    ));
                }
                stored.to_vec()
            }
            1 => {
                if !statekit_core::limits::within_expansion(stored_len as u64, raw_len as u64) {
                    return Err(corrupt(
                        at + 36,
                        "change_set.raw_len",
                        format!(
                            "{raw_len} bytes is more than {}x the {stored_len} stored bytes (LZ4 cannot expand that much)",
                            statekit_core::limits::MAX_EXPANSION
                        ),
                    ));
                }
                let mut out = vec![0u8; raw_len];
                let n = lz4_flex::block::decompress_into(stored, &mut out).map_err(|err| {
                    corrupt(
                        at + CHANGE_SET_HEADER_LEN as u64,
                        "change_set.payload",
                        format!("lz4: {err}"),
                    )
                })?;
                if n != raw_len {
                    return Err(corrupt(
                        at + 36,
                        "change_set.raw_len",
                        format!("decompressed {n} bytes, header says {raw_len}"),
                    ));
                }
                out
            }
            other => return Err(corrupt(at + 32, "change_set.codec", format!("unknown codec {other}"))),
        };
        let data = ChangeSetData {
            file: self.file.clone(),
            offset: e.offset,
            raw,
        };
        // Check the grouping against the index: metadata flag, key groups, record count.
        let mut kgs = Vec::new();
        let mut meta = false;
        let mut n = 0u32;
        data.for_each_group(&mut |kg, count| {
            if kg == META_KEY_GROUP {
                meta = true;
            } else {
                kgs.push(kg);
            }
            n += count;
        })?;
        if meta != e.has_meta || kgs != e.key_groups || n != e.records || (flags & CS_HAS_META != 0) != meta {
            return Err(corrupt(
                at,
                "change_set.payload",
                "key groups or record count disagree with the index".into(),
            ));
        }
        Ok(data)
    }

    /// Reads every change set and decodes every record; returns (change sets, records).
    pub fn verify(&self) -> Result<(u64, u64)> {
        let mut records = 0;
        for e in &self.index {
            let cs = self.read(e)?;
            cs.for_each_record(None, &mut |_, _| Ok(()))?;
            records += u64::from(e.records);
        }
        Ok((self.index.len() as u64, records))
    }
}

fn decode_index(idx: &[u8], base: u64, file: &str, count: u32) -> Result<Vec<IndexEntry>> {
    let mut c = Cursor::new(idx, base, file);
    let n = c.varint("index.count")?;
    if n != u64::from(count) {
        return Err(c.err_at(base, "index.count", "disagrees with the trailer's change-set count"));
    }
    if n > idx.len() as u64 {
        return Err(c.err_at(base, "index.count", "more entries than the index has bytes"));
    }
    let mut out: Vec<IndexEntry> = Vec::with_capacity(n as usize);
    for i in 0..n {
        let f = |s: &str| format!("index[{i}].{s}");
        let log = c.array::<16>(&f("log"))?;
        let sqn = c.varint(&f("sqn"))?;
        let offset = c.varint(&f("offset"))?;
        let length_at = c.offset();
        let length = c.varint(&f("length"))?;
        let at = c.offset();
        let records = c.varint(&f("records"))?;
        let records = u32::try_from(records).map_err(|_| c.err_at(at, &f("records"), "too large"))?;
        let at = c.offset();
        let has_meta = match c.u8(&f("has_meta"))? {
            0 => false,
            1 => true,
            _ => return Err(c.err_at(at, &f("has_meta"), "not 0 or 1")),
        };
        let at = c.offset();
        let k = c.varint(&f("key_groups.count"))?;
        if k > c.remaining() as u64 {
            return Err(c.err_at(at, &f("key_groups.count"), "more key groups than the index has bytes"));
        }
        let mut key_groups = Vec::with_capacity(k as usize);
        let mut prev: Option<u64> = None;
        for _ in 0..k {
            let at = c.offset();
            let d = c.varint(&f("key_groups"))?;
            let kg = match prev {
                None => Some(d),
                Some(p) => (p + 1).checked_add(d),
            };
            let Some(kg) = kg.filter(|&k| k < u64::from(META_KEY_GROUP)) else {
                return Err(c.err_at(at, &f("key_groups"), "key group out of range"));
            };
            key_groups.push(kg as u32);
            prev = Some(kg);
        }
        if offset.checked_add(length).is_none() {
            return Err(c.err_at(length_at, &f("length"), "offset + length overflows"));
        }
        out.push(IndexEntry {
            log: LogId(log),
            sqn,
            offset,
            length,
            records,
            has_meta,
            key_groups,
        });
    }
    c.finish("index")?;
    Ok(out)
}

/// The decompressed payload of one change set.
#[derive(Clone, Debug)]
pub struct ChangeSetData {
    file: String,
    offset: u64,
    raw: Vec<u8>,
}

impl ChangeSetData {
    #[cold]
    fn corrupt(&self, pos: u64, field: &str, why: impl Into<String>) -> FormatError {
        FormatError::corrupt(
            &self.file,
            self.offset,
            field,
            format!("byte {pos} of the decompressed change set: {}", why.into()),
        )
    }

    /// An error of a cursor over the payload (whose offsets are positions in it) as the
    /// change set's: the offset of the change set, the position in the reason.
    #[cold]
    fn relocate(&self, e: FormatError) -> FormatError {
        match e {
            FormatError::Corrupt {
                offset, field, reason, ..
            } => self.corrupt(offset, &field, reason),
            other => other,
        }
    }

    fn for_each_group(&self, f: &mut dyn FnMut(u32, u32)) -> Result<()> {
        match self.walk::<std::convert::Infallible>(|kg, count, _| {
            f(kg, count);
            Ok(ControlFlow::Continue(()))
        }) {
            Ok(_) => Ok(()),
            Err(RecordsError::Decode(e)) => Err(e),
            Err(RecordsError::Visitor(never)) => match never {},
        }
    }

    /// Walks the groups in order, checking their framing: `f(key group, records, cursor)`,
    /// where the cursor is at the group's records, each `len: varint ‖ record`.
    fn walk<E>(
        &self,
        mut f: impl FnMut(u32, u32, Cursor<'_>) -> std::result::Result<ControlFlow<()>, RecordsError<E>>,
    ) -> std::result::Result<ControlFlow<()>, RecordsError<E>> {
        let mut c = Cursor::new(&self.raw, 0, &self.file);
        let mut prev: Option<u32> = None;
        while !c.is_empty() {
            let at = c.offset();
            let kg = c.varint("group.key_group").map_err(|e| self.relocate(e))?;
            let kg = u32::try_from(kg).map_err(|_| self.corrupt(at, "group.key_group", "out of range"))?;
            let ordered = match prev {
                None => true,
                Some(META_KEY_GROUP) => kg != META_KEY_GROUP,
                Some(p) => kg != META_KEY_GROUP && kg > p,
            };
            if !ordered {
                return Err(self
                    .corrupt(
                        at,
                        "group.key_group",
                        "groups are not in order (metadata first, then ascending key groups)",
                    )
                    .into());
            }
            prev = Some(kg);
            let at = c.offset();
            let count = c.varint("group.count").map_err(|e| self.relocate(e))?;
            if count == 0 || count > c.remaining() as u64 {
                return Err(self
                    .corrupt(at, "group.count", format!("{count} records cannot fit"))
                    .into());
            }
            let group = c.clone();
            for _ in 0..count {
                c.bytes("record.len").map_err(|e| self.relocate(e))?;
            }
            if f(kg, count as u32, group)?.is_break() {
                return Ok(ControlFlow::Break(()));
            }
        }
        Ok(ControlFlow::Continue(()))
    }

    /// Decodes, in order, the metadata records and the records of the key groups in `range`
    /// (every key group when `None`): `f(key group, record)`, metadata records with
    /// [`META_KEY_GROUP`].
    pub fn for_each_record(
        &self,
        range: Option<&KeyGroupRange>,
        f: &mut dyn FnMut(u32, Record<'_>) -> std::result::Result<(), FormatError>,
    ) -> Result<()> {
        match self.visit_records(range, &mut |kg, rec| f(kg, rec).map(ControlFlow::Continue)) {
            Ok(_) => Ok(()),
            Err(RecordsError::Decode(e) | RecordsError::Visitor(e)) => Err(e),
        }
    }

    /// [`ChangeSetData::for_each_record`] with a visitor that can stop the walk
    /// ([`ControlFlow::Break`], returned as is) or fail with its own error (returned as
    /// [`RecordsError::Visitor`], apart from the change set's own decoding errors).
    pub fn visit_records<E>(
        &self,
        range: Option<&KeyGroupRange>,
        f: &mut RecordVisitor<'_, E>,
    ) -> std::result::Result<ControlFlow<()>, RecordsError<E>> {
        self.walk(|kg, count, mut group| {
            let is_meta = kg == META_KEY_GROUP;
            if !is_meta && range.is_some_and(|r| !r.contains(kg)) {
                return Ok(ControlFlow::Continue(()));
            }
            // Framing was checked by `walk`: the group holds `count` records.
            for _ in 0..count {
                let bytes = group.bytes("record.len").map_err(|e| self.relocate(e))?;
                let rec = decode_record(bytes).map_err(|e| {
                    FormatError::corrupt(&self.file, self.offset, "record", format!("key group {kg}: {e}"))
                })?;
                if matches!(rec, Record::Metadata { .. }) != is_meta {
                    return Err(RecordsError::Decode(FormatError::corrupt(
                        &self.file,
                        self.offset,
                        "record",
                        format!(
                            "key group {kg}: a {} record in the wrong group",
                            if is_meta { "data" } else { "metadata" }
                        ),
                    )));
                }
                if f(kg, rec).map_err(RecordsError::Visitor)?.is_break() {
                    return Ok(ControlFlow::Break(()));
                }
            }
            Ok(ControlFlow::Continue(()))
        })
    }
}

/// A visitor of change records: `(key group, record)`; [`ControlFlow::Break`] stops the walk.
pub type RecordVisitor<'v, E> = dyn FnMut(u32, Record<'_>) -> std::result::Result<ControlFlow<()>, E> + 'v;

/// Why [`ChangeSetData::visit_records`] failed.
#[derive(Debug)]
pub enum RecordsError<E> {
    /// The change set does not decode.
    Decode(FormatError),
    /// The visitor failed.
    Visitor(E),
}

impl<E> From<FormatError> for RecordsError<E> {
    fn from(e: FormatError) -> Self {
        RecordsError::Decode(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use statekit_core::storage::MemoryStorage;

    /// A file of `header ‖ index ‖ trailer` with this index (CRCs right), and the trailer's
    /// index offset replaced by `index_offset` when given.
    fn crafted(index: &[u8], count: u32, index_offset: Option<u64>) -> Vec<u8> {
        let storage = MemoryStorage::new();
        let w = LogFileWriter::create(&storage, "f.skcl", [7; 16], 1, LogCompression::None).expect("create");
        w.finish().expect("finish");
        let mut b = storage.open("f.skcl").expect("open").bytes()[..HEADER_LEN].to_vec();
        b.extend_from_slice(index);
        b.extend_from_slice(&index_offset.unwrap_or(HEADER_LEN as u64).to_le_bytes());
        b.extend_from_slice(&(index.len() as u32).to_le_bytes());
        b.extend_from_slice(&crc32fast::hash(index).to_le_bytes());
        b.extend_from_slice(&count.to_le_bytes());
        b.extend_from_slice(&TRAILER_MAGIC);
        b
    }

    fn open(b: Vec<u8>) -> Result<LogFileReader> {
        LogFileReader::from_blob(Arc::new(b), "f.skcl", None)
    }

    #[test]
    fn index_entries_from_elsewhere_are_errors_not_panics() {
        let storage = MemoryStorage::new();
        let mut w = LogFileWriter::create(&storage, "f.skcl", [7; 16], 1, LogCompression::None).expect("create");
        let mut b = ChangeSetBuffer::new();
        b.push_change(
            3,
            &Change {
                state: 0,
                time: None,
                key: b"k",
                namespace: b"",
                op: crate::record::Op::Put(b"v"),
            },
        );
        w.append(&b.seal(LogId([1; 16]), 0)).expect("append");
        w.finish().expect("finish");
        let r = LogFileReader::open(&storage, "f.skcl", None).expect("open");
        let good = r.index()[0].clone();
        r.read(&good).expect("the real entry");
        for (offset, length) in [
            (good.offset, u64::MAX),
            (u64::MAX, 1),
            (good.offset, 10),
            (1 << 40, CHANGE_SET_HEADER_LEN as u64),
            (good.offset + 1, good.length),
        ] {
            let e = IndexEntry {
                offset,
                length,
                ..good.clone()
            };
            let err = r.read(&e).expect_err("not a change set").to_string();
            assert!(err.starts_with("memory:/f.skcl: offset "), "{offset} {length}: {err}");
        }
    }

    #[test]
    fn crafted_indexes_are_errors_not_panics() {
        // A key-group delta that overflows.
        let mut idx = Vec::new();
        put_varint(&mut idx, 1);
        idx.extend_from_slice(&[1; 16]);
        for v in [0, 40, 48, 1] {
            put_varint(&mut idx, v);
        }
        idx.push(0);
        put_varint(&mut idx, 2);
        put_varint(&mut idx, 5);
        put_varint(&mut idx, u64::MAX);
        let e = open(crafted(&idx, 1, None)).expect_err("overflowing key group");
        assert!(e.to_string().contains("index[0].key_groups"), "{e}");
        // An index offset whose end overflows.
        let mut idx = Vec::new();
        put_varint(&mut idx, 0);
        let e = open(crafted(&idx, 0, Some(u64::MAX - 1))).expect_err("overflowing index offset");
        assert!(e.to_string().contains("trailer.index_offset"), "{e}");
        // The same file, sound.
        open(crafted(&idx, 0, None)).expect("an empty log file");
    }
}
