//! The log file format (`docs/changelog-format.md`): `header ‖ change sets ‖ index ‖ trailer`,
//! every part covered by a CRC32, every change set compressed on its own so its offset stays
//! seekable, and an index of every change set (log, sequence number, offset, length, records,
//! key groups) so a reader fetches only the change sets of its key-group range.

use crate::record::{decode_record, encode_change, encode_metadata, Change, Record};
use statekit_core::schema::{get_varint, put_varint};
use statekit_core::storage::{Blob, Storage, StorageWriter};
use statekit_core::{KeyGroupRange, StateDescriptor};
use statekit_format::FormatError;
use std::fmt;
use std::io::Write;
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

    /// Moves the record in `scratch` into the group of `kg`.
    fn push_scratch(&mut self, kg: u32) {
        let g = if kg == META_KEY_GROUP {
            &mut self.meta
        } else {
            let k = kg as usize;
            if k >= self.slot.len() {
                self.slot.resize(k + 1, u32::MAX);
            }
            if self.slot[k] == u32::MAX {
                self.slot[k] = self.groups.len() as u32;
                self.groups.push(Group { kg, ..Group::default() });
            }
            &mut self.groups[self.slot[k] as usize]
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

/// Writes one log file: the header, the change sets, the index and the trailer, streaming
/// into a storage writer (temp file; visible under its name only once committed).
pub struct LogFileWriter {
    out: Box<dyn StorageWriter>,
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
        let mut h = Vec::with_capacity(HEADER_LEN);
        h.extend_from_slice(&FILE_MAGIC);
        h.extend_from_slice(&LOG_FORMAT_VERSION.to_le_bytes());
        h.extend_from_slice(&0u32.to_le_bytes());
        h.extend_from_slice(&upload_id);
        h.extend_from_slice(&created_ms.to_le_bytes());
        let crc = crc32fast::hash(&h);
        h.extend_from_slice(&crc.to_le_bytes());
        out.write_all(&h).map_err(|e| io(storage, path, e))?;
        Ok(LogFileWriter {
            out,
            pos: HEADER_LEN as u64,
            index: Vec::new(),
            compression,
            buf: Vec::new(),
        })
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
    /// the index.
    pub fn finish(mut self) -> Result<(u64, Vec<IndexEntry>)> {
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
        let size = self.out.commit()?;
        Ok((size, self.index))
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

fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// An open log file: header and index checked; change sets are read (and their CRCs checked)
/// on demand.
pub struct LogFileReader {
    blob: Arc<dyn Blob>,
    file: String,
    header: LogFileHeader,
    index: Vec<IndexEntry>,
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
        if b.len() < 4 || b[0..4] != FILE_MAGIC {
            return Err(FormatError::BadMagic {
                file: file.to_string(),
                what: "changelog",
            });
        }
        if b.len() < 8 {
            return Err(corrupt(
                size,
                "file size",
                format!("{size} bytes is too short; truncated?"),
            ));
        }
        let version = le_u32(b, 4);
        if version != LOG_FORMAT_VERSION {
            return Err(FormatError::UnsupportedVersion {
                file: file.to_string(),
                found: version,
                supported: LOG_FORMAT_VERSION,
            });
        }
        if let Some(want) = expected_size {
            if want != size {
                return Err(corrupt(
                    size.min(want),
                    "file size",
                    format!(
                        "{size} bytes but the reference records {want} ({})",
                        if size < want { "truncated" } else { "trailing data" }
                    ),
                ));
            }
        }
        if b.len() < HEADER_LEN + TRAILER_LEN {
            return Err(corrupt(
                size,
                "file size",
                format!("{size} bytes is too short; truncated?"),
            ));
        }
        let stored = le_u32(b, 36);
        let actual = crc32fast::hash(&b[..36]);
        if stored != actual {
            return Err(corrupt(
                36,
                "header.crc32",
                format!("checksum mismatch: stored {stored:#010x}, computed {actual:#010x}"),
            ));
        }
        let flags = le_u32(b, 8);
        if flags != 0 {
            return Err(corrupt(8, "header.flags", format!("unknown feature flags {flags:#x}")));
        }
        let mut upload_id = [0u8; 16];
        upload_id.copy_from_slice(&b[12..28]);
        let header = LogFileHeader {
            upload_id,
            created_ms: le_u64(b, 28) as i64,
        };
        let t = b.len() - TRAILER_LEN;
        if b[t + 20..t + 24] != TRAILER_MAGIC {
            return Err(corrupt(
                (t + 20) as u64,
                "trailer.magic",
                "no trailer: the file is truncated or was not finished".into(),
            ));
        }
        let index_offset = le_u64(b, t);
        let index_len = u64::from(le_u32(b, t + 8));
        let index_crc = le_u32(b, t + 12);
        let count = le_u32(b, t + 16);
        if index_offset < HEADER_LEN as u64 || index_offset.checked_add(index_len) != Some(t as u64) {
            return Err(corrupt(
                t as u64,
                "trailer.index_offset",
                format!("index at {index_offset} of {index_len} bytes does not end at the trailer ({t})"),
            ));
        }
        let idx = &b[index_offset as usize..t];
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

    /// Size of the file.
    pub fn size(&self) -> u64 {
        self.blob.bytes().len() as u64
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
        let at = e.offset as usize;
        let end = at + e.length as usize;
        let h = &b[at..at + CHANGE_SET_HEADER_LEN];
        let corrupt = |off: usize, field: &str, why: String| FormatError::corrupt(&self.file, off as u64, field, why);
        if h[0..4] != CHANGE_SET_MAGIC {
            return Err(corrupt(at, "change_set.magic", "not a change set".into()));
        }
        let stored_len = le_u32(h, 40) as usize;
        if CHANGE_SET_HEADER_LEN + stored_len != e.length as usize {
            return Err(corrupt(
                at + 40,
                "change_set.stored_len",
                format!("{stored_len} bytes disagree with the index's length {}", e.length),
            ));
        }
        let stored = &b[at + CHANGE_SET_HEADER_LEN..end];
        let want = le_u32(h, 44);
        let got = crc_of(&[&h[..44], stored]);
        if want != got {
            return Err(corrupt(
                at + 44,
                "change_set.crc32",
                format!("checksum mismatch: stored {want:#010x}, computed {got:#010x}"),
            ));
        }
        let mut log = [0u8; 16];
        log.copy_from_slice(&h[4..20]);
        let sqn = le_u64(h, 20);
        let records = le_u32(h, 28);
        if LogId(log) != e.log || sqn != e.sqn || records != e.records {
            return Err(corrupt(
                at + 4,
                "change_set",
                "log, sequence number or record count disagree with the index".into(),
            ));
        }
        if h[33] & !CS_HAS_META != 0 || h[34] != 0 || h[35] != 0 {
            return Err(corrupt(
                at + 33,
                "change_set.flags",
                format!("unknown flags {:#04x}", h[33]),
            ));
        }
        let raw_len = le_u32(h, 36) as usize;
        let raw = match h[32] {
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
                let n = lz4_flex::block::decompress_into(stored, &mut out)
                    .map_err(|err| corrupt(at + CHANGE_SET_HEADER_LEN, "change_set.payload", format!("lz4: {err}")))?;
                if n != raw_len {
                    return Err(corrupt(
                        at + 36,
                        "change_set.raw_len",
                        format!("decompressed {n} bytes, header says {raw_len}"),
                    ));
                }
                out
            }
            c => return Err(corrupt(at + 32, "change_set.codec", format!("unknown codec {c}"))),
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
        if meta != e.has_meta || kgs != e.key_groups || n != e.records || (h[33] & CS_HAS_META != 0) != meta {
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
    let mut pos = 0usize;
    let err =
        |pos: usize, field: &str, why: &str| FormatError::corrupt(file, base + pos as u64, field, why.to_string());
    let v = |pos: &mut usize, field: &str| -> Result<u64> {
        let at = *pos;
        get_varint(idx, pos).ok_or_else(|| err(at, field, "truncated or overlong varint"))
    };
    let n = v(&mut pos, "index.count")?;
    if n != u64::from(count) {
        return Err(err(0, "index.count", "disagrees with the trailer's change-set count"));
    }
    if n > idx.len() as u64 {
        return Err(err(0, "index.count", "more entries than the index has bytes"));
    }
    let mut out: Vec<IndexEntry> = Vec::with_capacity(n as usize);
    for i in 0..n {
        let f = |s: &str| format!("index[{i}].{s}");
        if idx.len() - pos < 16 {
            return Err(err(pos, &f("log"), "index ends early"));
        }
        let mut log = [0u8; 16];
        log.copy_from_slice(&idx[pos..pos + 16]);
        pos += 16;
        let sqn = v(&mut pos, &f("sqn"))?;
        let offset = v(&mut pos, &f("offset"))?;
        let length = v(&mut pos, &f("length"))?;
        let records = u32::try_from(v(&mut pos, &f("records"))?).map_err(|_| err(pos, &f("records"), "too large"))?;
        let has_meta = match idx.get(pos) {
            Some(0) => false,
            Some(1) => true,
            Some(_) => return Err(err(pos, &f("has_meta"), "not 0 or 1")),
            None => return Err(err(pos, &f("has_meta"), "index ends early")),
        };
        pos += 1;
        let k = v(&mut pos, &f("key_groups.count"))?;
        if k > (idx.len() - pos) as u64 {
            return Err(err(
                pos,
                &f("key_groups.count"),
                "more key groups than the index has bytes",
            ));
        }
        let mut key_groups = Vec::with_capacity(k as usize);
        let mut prev: Option<u64> = None;
        for _ in 0..k {
            let d = v(&mut pos, &f("key_groups"))?;
            let kg = match prev {
                None => Some(d),
                Some(p) => (p + 1).checked_add(d),
            };
            let Some(kg) = kg.filter(|&k| k < u64::from(META_KEY_GROUP)) else {
                return Err(err(pos, &f("key_groups"), "key group out of range"));
            };
            key_groups.push(kg as u32);
            prev = Some(kg);
        }
        if offset.checked_add(length).is_none() {
            return Err(err(pos, &f("length"), "offset + length overflows"));
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
    if pos != idx.len() {
        return Err(err(pos, "index", "trailing bytes"));
    }
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
    fn corrupt(&self, pos: usize, field: &str, why: impl Into<String>) -> FormatError {
        FormatError::corrupt(
            &self.file,
            self.offset,
            field,
            format!("byte {pos} of the decompressed change set: {}", why.into()),
        )
    }

    fn for_each_group(&self, f: &mut dyn FnMut(u32, u32)) -> Result<()> {
        self.walk(|kg, count, _| {
            f(kg, count);
            Ok(())
        })
    }

    /// Walks the groups in order, checking their framing: `f(key group, records, group
    /// bytes)`, where the group bytes are the records, each `len: varint ‖ record`.
    fn walk(&self, mut f: impl FnMut(u32, u32, &[u8]) -> Result<()>) -> Result<()> {
        let r = &self.raw;
        let mut pos = 0usize;
        let mut prev: Option<u32> = None;
        while pos < r.len() {
            let at = pos;
            let kg = get_varint(r, &mut pos).ok_or_else(|| self.corrupt(at, "group.key_group", "truncated varint"))?;
            let kg = u32::try_from(kg).map_err(|_| self.corrupt(at, "group.key_group", "out of range"))?;
            let ordered = match prev {
                None => true,
                Some(META_KEY_GROUP) => kg != META_KEY_GROUP,
                Some(p) => kg != META_KEY_GROUP && kg > p,
            };
            if !ordered {
                return Err(self.corrupt(
                    at,
                    "group.key_group",
                    "groups are not in order (metadata first, then ascending key groups)",
                ));
            }
            prev = Some(kg);
            let at = pos;
            let count = get_varint(r, &mut pos).ok_or_else(|| self.corrupt(at, "group.count", "truncated varint"))?;
            if count == 0 || count > (r.len() - pos) as u64 {
                return Err(self.corrupt(at, "group.count", format!("{count} records cannot fit")));
            }
            let start = pos;
            for _ in 0..count {
                let a = pos;
                let len = get_varint(r, &mut pos).ok_or_else(|| self.corrupt(a, "record.len", "truncated varint"))?;
                if len > (r.len() - pos) as u64 {
                    return Err(self.corrupt(a, "record.len", format!("{len} bytes run past the change set")));
                }
                pos += len as usize;
            }
            f(kg, count as u32, &r[start..pos])?;
        }
        Ok(())
    }

    /// Decodes, in order, the metadata records and the records of the key groups in `range`
    /// (every key group when `None`): `f(key group, record)`, metadata records with
    /// [`META_KEY_GROUP`].
    pub fn for_each_record(
        &self,
        range: Option<&KeyGroupRange>,
        f: &mut dyn FnMut(u32, Record<'_>) -> std::result::Result<(), FormatError>,
    ) -> Result<()> {
        self.walk(|kg, _, group| {
            let is_meta = kg == META_KEY_GROUP;
            if !is_meta && range.is_some_and(|r| !r.contains(kg)) {
                return Ok(());
            }
            let mut p = 0usize;
            while p < group.len() {
                // Framing was checked by `walk`.
                let len = get_varint(group, &mut p).unwrap_or(0) as usize;
                let bytes = &group[p..p + len];
                p += len;
                let rec = decode_record(bytes).map_err(|e| {
                    FormatError::corrupt(&self.file, self.offset, "record", format!("key group {kg}: {e}"))
                })?;
                if matches!(rec, Record::Metadata { .. }) != is_meta {
                    return Err(FormatError::corrupt(
                        &self.file,
                        self.offset,
                        "record",
                        format!(
                            "key group {kg}: a {} record in the wrong group",
                            if is_meta { "data" } else { "metadata" }
                        ),
                    ));
                }
                f(kg, rec)?;
            }
            Ok(())
        })
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
