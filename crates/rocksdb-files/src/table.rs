//! Block-based tables (SST files): footer, metaindex, properties, index (binary search,
//! hash, partitioned two-level, with first keys; plain or delta-encoded values), data and
//! range deletion blocks.

use crate::block::{entries, BlockHandle, BlockReader, ChecksumType, ValueFormat, TRAILER};
use crate::coding::{decode_fixed32, decode_fixed64, Cursor};
use crate::error::{Error, Result};
use crate::{EntryKind, Limits, BYTEWISE_COMPARATOR};
use std::collections::BTreeMap;

/// Magic number of block-based tables (format_version 1 and later).
pub const BLOCK_BASED_MAGIC: u64 = 0x88e2_41b7_85f4_cff7;
/// Magic number of block-based tables with the legacy footer (format_version 0).
pub const LEGACY_BLOCK_BASED_MAGIC: u64 = 0xdb47_7524_8b80_fb57;
const PLAIN_MAGIC: u64 = 0x8242_2296_63bf_9564;
const LEGACY_PLAIN_MAGIC: u64 = 0x4f34_18eb_7a8f_13b8;
const CUCKOO_MAGIC: u64 = 0x9262_8b6c_d5d4_4a4a;
/// Footer length of format_version >= 1.
const FOOTER_LEN: usize = 53;
/// Footer length of format_version 0.
const LEGACY_FOOTER_LEN: usize = 48;
/// The newest format_version read.
pub const MAX_FORMAT_VERSION: u32 = 7;

/// A table's footer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Footer {
    /// `format_version` of the table (0 for the legacy footer).
    pub format_version: u32,
    /// Checksum type of the blocks (and, from format_version 6, of the footer).
    pub checksum: ChecksumType,
    /// The metaindex block.
    pub metaindex: BlockHandle,
    /// The (top-level) index block; from format_version 6 it is in the metaindex.
    pub index: Option<BlockHandle>,
    /// format_version >= 6: mixed with each block's offset into its checksum.
    pub base_context_checksum: u32,
}

/// Decodes the footer at the end of `data`.
pub fn decode_footer(file: &str, data: &[u8]) -> Result<Footer> {
    let len = data.len();
    let Some(magic_at) = len.checked_sub(8) else {
        return Err(Error::corrupt(
            file,
            0,
            "table footer",
            format!("file of {len} bytes is too short for a table"),
        ));
    };
    let magic = data.get(magic_at..).and_then(decode_fixed64).unwrap_or(0);
    let field = "table footer";
    match magic {
        LEGACY_BLOCK_BASED_MAGIC => {
            let start = len.checked_sub(LEGACY_FOOTER_LEN).ok_or_else(|| {
                Error::corrupt(file, 0, field, format!("file of {len} bytes is too short for a table"))
            })?;
            let mut c = Cursor::new(file, data.get(start..).unwrap_or(&[]), start as u64);
            let metaindex = BlockHandle::decode(&mut c, "metaindex handle")?;
            let index = BlockHandle::decode(&mut c, "index handle")?;
            Ok(Footer {
                format_version: 0,
                checksum: ChecksumType::Crc32c,
                metaindex,
                index: Some(index),
                base_context_checksum: 0,
            })
        }
        BLOCK_BASED_MAGIC => {
            let start = len.checked_sub(FOOTER_LEN).ok_or_else(|| {
                Error::corrupt(file, 0, field, format!("file of {len} bytes is too short for a table"))
            })?;
            let footer = data.get(start..).unwrap_or(&[]);
            let mut c = Cursor::new(file, footer, start as u64);
            let ctype = c.u8("footer checksum type")?;
            let version = footer
                .get(FOOTER_LEN - 12..FOOTER_LEN - 8)
                .and_then(decode_fixed32)
                .unwrap_or(u32::MAX);
            let version_at = (start + FOOTER_LEN - 12) as u64;
            if !(1..=MAX_FORMAT_VERSION).contains(&version) {
                return Err(Error::unsupported(
                    file,
                    version_at,
                    "footer format_version",
                    format!("format_version {version}"),
                ));
            }
            let checksum = ChecksumType::from_byte(ctype).ok_or_else(|| {
                Error::corrupt(
                    file,
                    start as u64,
                    "footer checksum type",
                    format!("unknown checksum type {ctype}"),
                )
            })?;
            if version < 6 {
                let metaindex = BlockHandle::decode(&mut c, "metaindex handle")?;
                let index = BlockHandle::decode(&mut c, "index handle")?;
                return Ok(Footer {
                    format_version: version,
                    checksum,
                    metaindex,
                    index: Some(index),
                    base_context_checksum: 0,
                });
            }
            let ext = c.bytes(4, "footer extended magic")?;
            if ext != [0x3e, 0x00, 0x7a, 0x00] {
                return Err(Error::corrupt(
                    file,
                    start as u64 + 1,
                    "footer extended magic",
                    format!("{ext:02x?}"),
                ));
            }
            let stored = c.fixed32("footer checksum")?;
            let base = c.fixed32("footer base context checksum")?;
            let meta_size = c.fixed32("footer metaindex size")?;
            c.bytes(16, "footer reserved bytes")?;
            let reserved = c.fixed64("footer reserved bytes")?;
            if base == 0 {
                return Err(Error::corrupt(
                    file,
                    start as u64 + 9,
                    "footer base context checksum",
                    "zero",
                ));
            }
            if reserved != 0 {
                return Err(Error::unsupported(
                    file,
                    start as u64 + 37,
                    "footer reserved bytes",
                    "a future table feature",
                ));
            }
            if checksum != ChecksumType::None {
                let mut copy = footer.to_vec();
                if let Some(s) = copy.get_mut(5..9) {
                    s.copy_from_slice(&[0; 4]);
                }
                let computed = checksum
                    .compute(&copy)
                    .wrapping_add(crate::block::context_modifier(base, start as u64));
                if computed != stored {
                    return Err(Error::corrupt(
                        file,
                        start as u64 + 5,
                        "footer checksum",
                        format!("stored {stored:#010x}, computed {computed:#010x}"),
                    ));
                }
            }
            let meta_offset = (start as u64)
                .checked_sub(TRAILER)
                .and_then(|e| e.checked_sub(u64::from(meta_size)))
                .ok_or_else(|| {
                    Error::corrupt(
                        file,
                        start as u64 + 13,
                        "footer metaindex size",
                        format!("{meta_size} bytes do not fit before the footer"),
                    )
                })?;
            Ok(Footer {
                format_version: version,
                checksum,
                metaindex: BlockHandle {
                    offset: meta_offset,
                    size: u64::from(meta_size),
                },
                index: None,
                base_context_checksum: base,
            })
        }
        PLAIN_MAGIC | LEGACY_PLAIN_MAGIC | CUCKOO_MAGIC => Err(Error::unsupported(
            file,
            magic_at as u64,
            "table magic number",
            "not a block-based table (plain or cuckoo table)",
        )),
        other => Err(Error::corrupt(
            file,
            magic_at as u64,
            "table magic number",
            format!("{other:#018x} is not a RocksDB table's"),
        )),
    }
}

/// The table properties this reader uses (the `rocksdb.properties` block).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Properties {
    /// `rocksdb.column.family.id`.
    pub column_family_id: Option<u64>,
    /// `rocksdb.column.family.name`.
    pub column_family_name: Option<String>,
    /// `rocksdb.comparator`.
    pub comparator: Option<String>,
    /// `rocksdb.merge.operator`.
    pub merge_operator: Option<String>,
    /// `rocksdb.compression`.
    pub compression: Option<String>,
    /// `rocksdb.num.entries` (point entries and range deletions).
    pub num_entries: Option<u64>,
    /// `rocksdb.num.range-deletions`.
    pub num_range_deletions: Option<u64>,
    /// `rocksdb.block.based.table.index.type`: 0 binary search, 1 hash, 2 two-level
    /// (partitioned), 3 binary search with first keys.
    pub index_type: u32,
    /// `rocksdb.index.key.is.user.key`.
    pub index_key_is_user_key: bool,
    /// `rocksdb.index.value.is.delta.encoded`.
    pub index_value_is_delta_encoded: bool,
    /// `rocksdb.external_sst_file.version` of an ingested (external) file.
    pub external_version: Option<u32>,
    /// `rocksdb.external_sst_file.global_seqno`.
    pub global_seqno: Option<u64>,
}

/// What a point entry of a table is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableEntry {
    /// The user key.
    pub user_key: Vec<u8>,
    /// Its sequence number (a global one for ingested files).
    pub sequence: u64,
    /// Put, delete, single delete or merge operand.
    pub kind: EntryKind,
    /// The value or merge operand (empty for deletions).
    pub value: Vec<u8>,
}

/// A range deletion: user keys in `[start, end)` older than `sequence` are deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeTombstone {
    /// First user key deleted.
    pub start: Vec<u8>,
    /// First user key after the range.
    pub end: Vec<u8>,
    /// Entries with a smaller sequence number are deleted.
    pub sequence: u64,
}

/// A table read whole.
#[derive(Debug, Clone)]
pub struct Table {
    /// The footer.
    pub footer: Footer,
    /// The properties.
    pub properties: Properties,
    /// Point entries in internal-key order (user key ascending, then newest first).
    pub entries: Vec<TableEntry>,
    /// Range deletions.
    pub range_tombstones: Vec<RangeTombstone>,
}

fn varint_prop(file: &str, offset: u64, name: &str, v: &[u8]) -> Result<u64> {
    let mut c = Cursor::new(file, v, offset);
    c.varint64(name)
}

fn decode_properties(file: &str, block: &[u8], offset: u64) -> Result<Properties> {
    let mut p = Properties::default();
    let mut prev: Option<Vec<u8>> = None;
    entries(file, block, offset, ValueFormat::Plain, "properties block", |e, _| {
        if prev.as_ref().is_some_and(|p| *p >= e.key) {
            return Err(Error::corrupt(file, e.offset, "property name", "names out of order"));
        }
        let text = || String::from_utf8_lossy(e.value).into_owned();
        let at = e.offset;
        match e.key.as_slice() {
            b"rocksdb.column.family.id" => {
                p.column_family_id = Some(varint_prop(file, at, "rocksdb.column.family.id", e.value)?)
            }
            b"rocksdb.column.family.name" => p.column_family_name = Some(text()),
            b"rocksdb.comparator" => p.comparator = Some(text()),
            b"rocksdb.merge.operator" => p.merge_operator = Some(text()),
            b"rocksdb.compression" => p.compression = Some(text()),
            b"rocksdb.num.entries" => p.num_entries = Some(varint_prop(file, at, "rocksdb.num.entries", e.value)?),
            b"rocksdb.num.range-deletions" => {
                p.num_range_deletions = Some(varint_prop(file, at, "rocksdb.num.range-deletions", e.value)?)
            }
            b"rocksdb.index.key.is.user.key" => {
                p.index_key_is_user_key = varint_prop(file, at, "rocksdb.index.key.is.user.key", e.value)? != 0
            }
            b"rocksdb.index.value.is.delta.encoded" => {
                p.index_value_is_delta_encoded =
                    varint_prop(file, at, "rocksdb.index.value.is.delta.encoded", e.value)? != 0
            }
            b"rocksdb.block.based.table.index.type" => {
                p.index_type = decode_fixed32(e.value)
                    .ok_or_else(|| Error::corrupt(file, at, "rocksdb.block.based.table.index.type", "not 4 bytes"))?
            }
            b"rocksdb.external_sst_file.version" => {
                p.external_version = Some(
                    decode_fixed32(e.value)
                        .ok_or_else(|| Error::corrupt(file, at, "rocksdb.external_sst_file.version", "not 4 bytes"))?,
                )
            }
            b"rocksdb.external_sst_file.global_seqno" => {
                p.global_seqno =
                    Some(decode_fixed64(e.value).ok_or_else(|| {
                        Error::corrupt(file, at, "rocksdb.external_sst_file.global_seqno", "not 8 bytes")
                    })?)
            }
            _ => {}
        }
        prev = Some(e.key);
        Ok(())
    })?;
    Ok(p)
}

/// Largest sequence number RocksDB uses (56 bits).
pub const MAX_SEQUENCE: u64 = (1 << 56) - 1;

/// The sequence number every key of an ingested file has, if any (RocksDB's rules:
/// `rocksdb.external_sst_file.version` 2, the global_seqno property, else the file's largest
/// sequence number from the MANIFEST).
fn global_seqno(file: &str, p: &Properties, largest_seqno: Option<u64>) -> Result<Option<u64>> {
    let Some(version) = p.external_version else {
        if p.global_seqno.is_some() {
            return Err(Error::corrupt(
                file,
                0,
                "rocksdb.external_sst_file.global_seqno",
                "in a table that was not ingested",
            ));
        }
        return Ok(None);
    };
    match version {
        1 => {
            if p.global_seqno.is_some() {
                return Err(Error::corrupt(
                    file,
                    0,
                    "rocksdb.external_sst_file.global_seqno",
                    "in a version 1 external file",
                ));
            }
            Ok(None)
        }
        2 => {
            let mut g = p.global_seqno.unwrap_or(0);
            if let Some(largest) = largest_seqno.filter(|&l| l < MAX_SEQUENCE) {
                if g == 0 {
                    g = largest;
                }
                if g != largest {
                    return Err(Error::corrupt(
                        file,
                        0,
                        "rocksdb.external_sst_file.global_seqno",
                        format!("{g}, but the file's largest sequence number is {largest}"),
                    ));
                }
            }
            if g > MAX_SEQUENCE {
                return Err(Error::corrupt(
                    file,
                    0,
                    "rocksdb.external_sst_file.global_seqno",
                    format!("{g} is too large"),
                ));
            }
            Ok(Some(g))
        }
        v => Err(Error::corrupt(
            file,
            0,
            "rocksdb.external_sst_file.version",
            format!("unknown version {v}"),
        )),
    }
}

/// Splits an internal key into user key and its packed `(sequence << 8) | type`.
fn split_internal_key<'k>(file: &str, offset: u64, field: &str, key: &'k [u8]) -> Result<(&'k [u8], u64, u8)> {
    let Some(split) = key.len().checked_sub(8) else {
        return Err(Error::corrupt(
            file,
            offset,
            field,
            format!("internal key of {} bytes (< 8)", key.len()),
        ));
    };
    let (user, trailer) = key.split_at(split);
    let packed = decode_fixed64(trailer).ok_or_else(|| Error::corrupt(file, offset, field, "internal key trailer"))?;
    Ok((user, packed >> 8, (packed & 0xff) as u8))
}

/// The kind of a stored entry's type byte.
fn entry_kind(file: &str, offset: u64, t: u8) -> Result<EntryKind> {
    Ok(match t {
        0x0 => EntryKind::Delete,
        0x1 => EntryKind::Put,
        0x2 => EntryKind::Merge,
        0x7 => EntryKind::SingleDelete,
        0x11 => {
            return Err(Error::unsupported(
                file,
                offset,
                "entry type",
                "BlobDB blob index (values in blob files)",
            ))
        }
        0x14 => {
            return Err(Error::unsupported(
                file,
                offset,
                "entry type",
                "deletion with user-defined timestamp",
            ))
        }
        0x16 => return Err(Error::unsupported(file, offset, "entry type", "wide-column entity")),
        0x18 => {
            return Err(Error::unsupported(
                file,
                offset,
                "entry type",
                "value with preferred sequence number",
            ))
        }
        other => {
            return Err(Error::corrupt(
                file,
                offset,
                "entry type",
                format!("{other:#04x} is not a table entry's type"),
            ))
        }
    })
}

/// Handles listed by an index block, in order: consecutive, non-overlapping, ascending.
fn index_handles(
    r: &BlockReader<'_>,
    handle: BlockHandle,
    format: ValueFormat,
    first_key: bool,
    field: &str,
) -> Result<(Vec<BlockHandle>, Vec<Vec<u8>>)> {
    let block = r.read(handle, field)?;
    let mut out: Vec<BlockHandle> = Vec::new();
    let mut keys: Vec<Vec<u8>> = Vec::new();
    entries(r.file, &block, handle.offset, format, field, |e, c| {
        let h = match format {
            ValueFormat::Plain => {
                let mut v = Cursor::new(r.file, e.value, e.offset);
                let h = BlockHandle::decode(&mut v, "index entry block handle")?;
                if first_key {
                    v.length_prefixed("index entry first key")?;
                }
                h
            }
            ValueFormat::IndexDelta { first_key } => {
                let h = match (e.shared, out.last()) {
                    (0, _) => BlockHandle::decode(c, "index entry block handle")?,
                    (_, Some(prev)) => {
                        let delta = c.varsigned64("index entry block size delta")?;
                        let offset = prev
                            .end()
                            .ok_or_else(|| c.corrupt("index entry block handle", "offset overflows"))?;
                        let size = prev.size.checked_add_signed(delta).ok_or_else(|| {
                            c.corrupt("index entry block size delta", format!("{delta} from {}", prev.size))
                        })?;
                        BlockHandle { offset, size }
                    }
                    (_, None) => {
                        return Err(c.corrupt("index entry block handle", "size delta without a previous handle"))
                    }
                };
                if first_key {
                    c.length_prefixed("index entry first key")?;
                }
                h
            }
        };
        if let Some(prev) = out.last() {
            if prev.end().is_none_or(|end| h.offset < end) {
                return Err(Error::corrupt(
                    r.file,
                    e.offset,
                    "index entry block handle",
                    format!(
                        "block at {} overlaps or precedes the previous one at {}",
                        h.offset, prev.offset
                    ),
                ));
            }
        }
        if h.end().is_none_or(|end| end > r.data.len() as u64) {
            return Err(Error::corrupt(
                r.file,
                e.offset,
                "index entry block handle",
                format!(
                    "block (offset {}, size {}) runs past the end of the file ({} bytes)",
                    h.offset,
                    h.size,
                    r.data.len()
                ),
            ));
        }
        out.push(h);
        keys.push(e.key);
        Ok(())
    })?;
    Ok((out, keys))
}

/// Compares internal keys as RocksDB's bytewise internal comparator does: user key
/// ascending, then packed `(sequence << 8 | type)` descending.
fn internal_cmp(a: (&[u8], u64), b: (&[u8], u64)) -> std::cmp::Ordering {
    a.0.cmp(b.0).then(b.1.cmp(&a.1))
}

/// Where a table's blocks are: what [`table_layout`] finds before reading any data block.
#[derive(Debug, Clone)]
pub struct TableLayout {
    /// The footer.
    pub footer: Footer,
    /// The properties.
    pub properties: Properties,
    /// The metaindex: meta block names and their handles.
    pub meta_blocks: BTreeMap<Vec<u8>, BlockHandle>,
    /// The data blocks, in key order.
    pub data_blocks: Vec<BlockHandle>,
    /// For each data block, a user key at least as large as its last key and at most its
    /// successor's first (the index's separators).
    pub data_block_bounds: Vec<Vec<u8>>,
}

fn reader<'a>(file: &'a str, data: &'a [u8], footer: &Footer, limits: &'a Limits) -> BlockReader<'a> {
    BlockReader {
        file,
        data,
        checksum: footer.checksum,
        base_context: footer.base_context_checksum,
        format_version: footer.format_version,
        limits,
        decoded: std::cell::Cell::new(0),
    }
}

/// Reads a table's footer, metaindex, properties and index (not its data blocks).
pub fn table_layout(file: &str, data: &[u8], limits: &Limits) -> Result<TableLayout> {
    let footer = decode_footer(file, data)?;
    let r = reader(file, data, &footer, limits);
    layout_with(&r, footer)
}

fn layout_with(r: &BlockReader<'_>, footer: Footer) -> Result<TableLayout> {
    let file = r.file;
    let meta_block = r.read(footer.metaindex, "metaindex block")?;
    let mut meta: BTreeMap<Vec<u8>, BlockHandle> = BTreeMap::new();
    entries(
        file,
        &meta_block,
        footer.metaindex.offset,
        ValueFormat::Plain,
        "metaindex block",
        |e, _| {
            let mut v = Cursor::new(file, e.value, e.offset);
            let h = BlockHandle::decode(&mut v, "metaindex entry block handle")?;
            if meta.insert(e.key, h).is_some() {
                return Err(Error::corrupt(file, e.offset, "metaindex entry", "duplicate name"));
            }
            Ok(())
        },
    )?;
    let properties = match meta.get(b"rocksdb.properties".as_slice()) {
        Some(&h) => {
            let b = r.read(h, "properties block")?;
            decode_properties(file, &b, h.offset)?
        }
        None => Properties::default(),
    };
    if let Some(cmp) = &properties.comparator {
        if cmp != BYTEWISE_COMPARATOR {
            return Err(Error::unsupported(
                file,
                0,
                "rocksdb.comparator",
                format!("comparator {cmp:?}"),
            ));
        }
    }
    if meta
        .get(b"rocksdb.compression_dict".as_slice())
        .is_some_and(|h| h.size > 0)
    {
        return Err(Error::unsupported(
            file,
            0,
            "rocksdb.compression_dict",
            "compression with a dictionary",
        ));
    }
    let index = match footer.index {
        Some(h) => h,
        None => *meta.get(b"rocksdb.index".as_slice()).ok_or_else(|| {
            Error::corrupt(
                file,
                footer.metaindex.offset,
                "metaindex block",
                "no rocksdb.index entry",
            )
        })?,
    };
    let first_key = properties.index_type == 3;
    let format = if properties.index_value_is_delta_encoded {
        ValueFormat::IndexDelta { first_key }
    } else {
        ValueFormat::Plain
    };
    let (data_blocks, keys) = match properties.index_type {
        0 | 1 | 3 => index_handles(r, index, format, first_key, "index block")?,
        2 => {
            let (partitions, _) = index_handles(r, index, format, false, "top-level index block")?;
            let mut all: Vec<BlockHandle> = Vec::new();
            let mut all_keys: Vec<Vec<u8>> = Vec::new();
            for p in partitions {
                let (hs, ks) = index_handles(r, p, format, false, "index partition block")?;
                if let (Some(prev), Some(first)) = (all.last(), hs.first()) {
                    if prev.end().is_none_or(|end| first.offset < end) {
                        return Err(Error::corrupt(
                            file,
                            p.offset,
                            "index partition block",
                            "data blocks out of order",
                        ));
                    }
                }
                all.extend(hs);
                all_keys.extend(ks);
            }
            (all, all_keys)
        }
        t => {
            return Err(Error::unsupported(
                file,
                0,
                "rocksdb.block.based.table.index.type",
                format!("index type {t}"),
            ))
        }
    };
    let mut data_block_bounds = Vec::with_capacity(keys.len());
    for mut k in keys {
        if !properties.index_key_is_user_key {
            let Some(n) = k.len().checked_sub(8) else {
                return Err(Error::corrupt(
                    file,
                    0,
                    "index entry key",
                    format!("internal key of {} bytes (< 8)", k.len()),
                ));
            };
            k.truncate(n);
        }
        if data_block_bounds.last().is_some_and(|prev: &Vec<u8>| *prev > k) {
            return Err(Error::corrupt(file, 0, "index entry key", "index keys out of order"));
        }
        data_block_bounds.push(k);
    }
    Ok(TableLayout {
        footer,
        properties,
        meta_blocks: meta,
        data_blocks,
        data_block_bounds,
    })
}

/// Reads a whole table from its bytes. `largest_seqno` is the MANIFEST's largest sequence
/// number of the file (for ingested files' global sequence number), if known.
pub fn read_table(file: &str, data: &[u8], largest_seqno: Option<u64>, limits: &Limits) -> Result<Table> {
    let layout = table_layout(file, data, limits)?;
    let gseq = global_seqno(file, &layout.properties, largest_seqno)?;
    let entries = read_entries(file, data, &layout, gseq, None, limits)?;
    let range_tombstones = read_tombstones(file, data, &layout, gseq, limits)?;
    if let Some(n) = layout.properties.num_entries {
        let got = (entries.len() + range_tombstones.len()) as u64;
        if n != got {
            return Err(Error::corrupt(
                file,
                0,
                "rocksdb.num.entries",
                format!("{n} entries claimed, {got} read"),
            ));
        }
    }
    Ok(Table {
        footer: layout.footer,
        properties: layout.properties,
        entries,
        range_tombstones,
    })
}

/// The global sequence number of the table of `layout` (see [`read_table`]).
pub(crate) fn table_global_seqno(file: &str, layout: &TableLayout, largest_seqno: Option<u64>) -> Result<Option<u64>> {
    global_seqno(file, &layout.properties, largest_seqno)
}

/// The point entries of a table, all of them or those with user keys in
/// `[lower, upper)` (only the data blocks that may hold such keys are read).
pub(crate) fn read_entries(
    file: &str,
    data: &[u8],
    layout: &TableLayout,
    gseq: Option<u64>,
    range: Option<(&[u8], Option<&[u8]>)>,
    limits: &Limits,
) -> Result<Vec<TableEntry>> {
    // The whole key space is no range: every block is read and checked in order.
    let range = range.filter(|(lower, upper)| !(lower.is_empty() && upper.is_none()));
    let r = reader(file, data, &layout.footer, limits);
    let mut out: Vec<TableEntry> = Vec::new();
    let mut prev: Option<(Vec<u8>, u64)> = None;
    for (i, h) in layout.data_blocks.iter().enumerate() {
        if let Some((lower, upper)) = range {
            // Block i holds user keys in [bound(i - 1), bound(i)].
            if layout.data_block_bounds.get(i).is_some_and(|b| b.as_slice() < lower) {
                continue;
            }
            let from = i.checked_sub(1).and_then(|p| layout.data_block_bounds.get(p));
            if let (Some(from), Some(upper)) = (from, upper) {
                if from.as_slice() >= upper {
                    break;
                }
            }
            prev = None;
        }
        let block = r.read(*h, "data block")?;
        entries(file, &block, h.offset, ValueFormat::Plain, "data block", |e, _| {
            let (user, mut seq, t) = split_internal_key(file, e.offset, "data block entry key", &e.key)?;
            let kind = entry_kind(file, e.offset, t)?;
            if let Some(g) = gseq {
                seq = g;
            }
            let packed = seq << 8 | u64::from(t);
            if let Some((pk, pp)) = &prev {
                if internal_cmp((pk, *pp), (user, packed)) != std::cmp::Ordering::Less {
                    return Err(Error::corrupt(
                        file,
                        e.offset,
                        "data block entry key",
                        "keys out of order",
                    ));
                }
            }
            prev = Some((user.to_vec(), packed));
            if let Some((lower, upper)) = range {
                if user < lower || upper.is_some_and(|u| user >= u) {
                    return Ok(());
                }
            }
            out.push(TableEntry {
                user_key: user.to_vec(),
                sequence: seq,
                kind,
                value: e.value.to_vec(),
            });
            Ok(())
        })?;
    }
    Ok(out)
}

/// The range deletions of a table.
pub(crate) fn read_tombstones(
    file: &str,
    data: &[u8],
    layout: &TableLayout,
    gseq: Option<u64>,
    limits: &Limits,
) -> Result<Vec<RangeTombstone>> {
    let mut out = Vec::new();
    let Some(&h) = layout.meta_blocks.get(b"rocksdb.range_del".as_slice()) else {
        return Ok(out);
    };
    let r = reader(file, data, &layout.footer, limits);
    let block = r.read(h, "range deletion block")?;
    entries(
        file,
        &block,
        h.offset,
        ValueFormat::Plain,
        "range deletion block",
        |e, _| {
            let (user, mut seq, t) = split_internal_key(file, e.offset, "range deletion start key", &e.key)?;
            if t != 0xf {
                return Err(Error::corrupt(
                    file,
                    e.offset,
                    "range deletion start key",
                    format!("type {t:#04x}, not a range deletion"),
                ));
            }
            if let Some(g) = gseq {
                seq = g;
            }
            out.push(RangeTombstone {
                start: user.to_vec(),
                end: e.value.to_vec(),
                sequence: seq,
            });
            Ok(())
        },
    )?;
    Ok(out)
}
