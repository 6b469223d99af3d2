//! The container shared by keyed and operator data files: a checksummed header, sections of
//! blocks, an index of the sections and a fixed-size trailer that points at the index
//! (`docs/format.md` §"Data files").
#![deny(clippy::indexing_slicing)]

use crate::block::{BlockEncoder, Compression, BLOCK_HEADER_LEN};
use crate::error::FormatError;
use crate::wire::{le_u32, le_u64, put_u32, put_u64, Cursor, Result};
use statekit_core::schema::put_varint;
use statekit_core::storage::{Storage, StorageError, StorageWriter};
use std::io::{IoSlice, Write};
use std::ops::Range;

/// The format version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// Which kind of data file.
pub(crate) struct FileKind {
    pub magic: [u8; 4],
    pub what: &'static str,
}

/// Keyed data files.
pub(crate) const KEYED: FileKind = FileKind {
    magic: *b"SKKD",
    what: "keyed data",
};
/// Operator data files.
pub(crate) const OPERATOR: FileKind = FileKind {
    magic: *b"SKOP",
    what: "operator data",
};

/// Magic at the very end of every data file.
pub(crate) const TRAILER_MAGIC: [u8; 4] = *b"SKIX";
/// Size of the trailer.
pub(crate) const TRAILER_LEN: usize = 24;
/// Size of the fixed part of the file header (before its body).
pub(crate) const HEADER_PREFIX_LEN: usize = 16;
/// Size of one section entry in the index.
pub(crate) const SECTION_ENTRY_LEN: usize = 40;

/// One section (a key group, or an operator state) as the index records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Section {
    /// Key group, or operator state index.
    pub id: u32,
    /// Number of blocks.
    pub blocks: u32,
    /// Absolute offset of the first block.
    pub offset: u64,
    /// Bytes of all its blocks, headers included.
    pub stored: u64,
    /// Uncompressed record bytes.
    pub raw: u64,
    /// Records.
    pub entries: u64,
}

impl Section {
    pub(crate) fn end(&self) -> u64 {
        self.offset.saturating_add(self.stored)
    }
}

/// Where the parts of a data file are.
#[derive(Clone, Debug)]
pub(crate) struct Layout {
    /// The header body (after the 16-byte prefix).
    pub header_body: Range<usize>,
    /// Absolute offset of the header body.
    pub header_body_offset: u64,
    /// Offset of the index.
    pub index_offset: u64,
    /// The sections, ascending by id.
    pub sections: Vec<Section>,
    /// The file-kind specific tail of the index.
    pub index_tail: Range<usize>,
    /// File size.
    pub size: u64,
}

impl Layout {
    /// The header body of `bytes` (the file this layout was parsed from).
    pub(crate) fn header_body<'a>(&self, bytes: &'a [u8], file: &str) -> Result<&'a [u8]> {
        bytes.get(self.header_body.clone()).ok_or_else(|| {
            FormatError::corrupt(
                file,
                self.header_body_offset,
                "header",
                "header body is not inside the file",
            )
        })
    }

    /// The file-kind specific tail of the index in `bytes` and its absolute offset.
    pub(crate) fn index_tail<'a>(&self, bytes: &'a [u8], file: &str) -> Result<(&'a [u8], u64)> {
        let offset = self.index_tail.start as u64;
        let tail = bytes
            .get(self.index_tail.clone())
            .ok_or_else(|| FormatError::corrupt(file, offset, "index", "index tail is not inside the file"))?;
        Ok((tail, offset))
    }
}

fn io_err(file: &str, e: std::io::Error) -> FormatError {
    FormatError::Storage(StorageError::Io {
        path: file.to_string(),
        source: e,
    })
}

/// Checks the magic and version at the start of a file; shared with `_metadata`.
pub(crate) fn check_magic_and_version(bytes: &[u8], file: &str, magic: &[u8; 4], what: &'static str) -> Result<()> {
    // The first four bytes, or all of a shorter file: a prefix of the magic is a truncated
    // file of this kind, reported below.
    let head = bytes.get(..4).unwrap_or(bytes);
    if head.is_empty() || !magic.starts_with(head) {
        return Err(FormatError::BadMagic {
            file: file.to_string(),
            what,
        });
    }
    if let Some(version) = le_u32(bytes, 4) {
        if version != FORMAT_VERSION {
            return Err(FormatError::UnsupportedVersion {
                file: file.to_string(),
                found: version,
                supported: FORMAT_VERSION,
            });
        }
    }
    Ok(())
}

/// Checks a file's size against the size `_metadata` recorded.
pub(crate) fn check_size(len: u64, expected: Option<u64>, file: &str) -> Result<()> {
    match expected {
        Some(e) if e != len => Err(FormatError::corrupt(
            file,
            len.min(e),
            "file size",
            format!(
                "file has {len} bytes but {e} were recorded ({})",
                if len < e { "truncated" } else { "extended or replaced" }
            ),
        )),
        _ => Ok(()),
    }
}

/// Fetches what [`parse`] reads of a file opened by ranges ([`Storage::open_ranged`]): its
/// header and, through the trailer, its index; the sections are fetched by whoever reads
/// them. Values that do not add up are left for `parse` to report (it sees zeros where
/// nothing was fetched, which fail a checksum).
pub(crate) fn fetch_layout(blob: &dyn statekit_core::storage::Blob) -> std::result::Result<(), StorageError> {
    let size = blob.bytes().len() as u64;
    let prefix = (HEADER_PREFIX_LEN as u64).min(size);
    blob.fetch(0, prefix)?;
    if let Some(body_len) = le_u32(blob.bytes(), 12) {
        let header_end = (HEADER_PREFIX_LEN as u64 + u64::from(body_len) + 4).min(size);
        blob.fetch(0, header_end)?;
    }
    if size >= TRAILER_LEN as u64 {
        let t = size - TRAILER_LEN as u64;
        blob.fetch(t, TRAILER_LEN as u64)?;
        if let Some(index_offset) = blob.bytes().get(t as usize..).and_then(|tr| le_u64(tr, 0)) {
            if index_offset < t {
                blob.fetch(index_offset, t - index_offset)?;
            }
        }
    }
    Ok(())
}

/// Parses and checks everything but the blocks: magic, version, size, header CRC, trailer,
/// index CRC, and that the sections tile the data area in ascending id order.
pub(crate) fn parse(bytes: &[u8], file: &str, kind: &FileKind, expected_size: Option<u64>) -> Result<Layout> {
    check_magic_and_version(bytes, file, &kind.magic, kind.what)?;
    let size = bytes.len() as u64;
    check_size(size, expected_size, file)?;
    let min = HEADER_PREFIX_LEN + 4 + TRAILER_LEN;
    if bytes.len() < min {
        return Err(FormatError::corrupt(
            file,
            size,
            "file size",
            format!("{size} bytes is shorter than the smallest valid file ({min}); truncated?"),
        ));
    }
    let mut c = Cursor::new(bytes, 0, file);
    c.take(8, "header.magic+version")?;
    let flags_at = c.offset();
    let flags = c.u32("header.flags")?;
    if flags != 0 {
        return Err(c.err_at(flags_at, "header.flags", format!("unknown feature flags {flags:#x}")));
    }
    let body_len_at = c.offset();
    let body_len = u64::from(c.u32("header.body_len")?);
    let header_end = HEADER_PREFIX_LEN as u64 + body_len + 4;
    if header_end > size - TRAILER_LEN as u64 {
        return Err(c.err_at(
            body_len_at,
            "header.body_len",
            format!("header body of {body_len} bytes runs past the end of the file; truncated?"),
        ));
    }
    let crc_pos = HEADER_PREFIX_LEN + body_len as usize;
    // `header_end` lies before the trailer: both parts exist.
    let (covered, after) = bytes.split_at_checked(crc_pos).ok_or_else(|| {
        c.err_at(
            body_len_at,
            "header.body_len",
            "header body runs past the end of the file",
        )
    })?;
    let stored = le_u32(after, 0).unwrap_or(0);
    let actual = crc32fast::hash(covered);
    if stored != actual {
        return Err(FormatError::corrupt(
            file,
            crc_pos as u64,
            "header.crc32",
            format!("checksum mismatch: stored {stored:#010x}, computed {actual:#010x}"),
        ));
    }

    // Trailer.
    let t = bytes.len() - TRAILER_LEN;
    let Some(trailer) = bytes.last_chunk::<TRAILER_LEN>() else {
        return Err(FormatError::corrupt(file, size, "file size", "no room for the trailer"));
    };
    if trailer[20..] != TRAILER_MAGIC {
        return Err(FormatError::corrupt(
            file,
            t as u64 + 20,
            "trailer.magic",
            "missing trailer magic \"SKIX\" (file truncated or not finished)",
        ));
    }
    let trailer_crc = le_u32(trailer, 16).unwrap_or(0);
    let actual = crc32fast::hash(&trailer[..16]);
    if trailer_crc != actual {
        return Err(FormatError::corrupt(
            file,
            t as u64 + 16,
            "trailer.crc32",
            format!("checksum mismatch: stored {trailer_crc:#010x}, computed {actual:#010x}"),
        ));
    }
    let index_offset = le_u64(trailer, 0).unwrap_or(0);
    let index_len = le_u64(trailer, 8).unwrap_or(0);
    if index_offset.checked_add(index_len) != Some(t as u64) || index_offset < header_end || index_len < 5 {
        return Err(FormatError::corrupt(
            file,
            t as u64,
            "trailer.index_offset",
            format!(
                "index at {index_offset} of {index_len} bytes does not lie between the header (ends at {header_end}) and the trailer (at {t})"
            ),
        ));
    }
    // Both are below `t`, so they fit in usize; the index has at least 5 bytes.
    let (io, ie) = (index_offset as usize, t);
    let Some((index, crc)) = bytes.get(io..ie).and_then(<[u8]>::split_last_chunk::<4>) else {
        return Err(FormatError::corrupt(
            file,
            t as u64,
            "trailer.index_offset",
            format!("index at {index_offset} of {index_len} bytes is not inside the file"),
        ));
    };
    let stored = u32::from_le_bytes(*crc);
    let actual = crc32fast::hash(index);
    if stored != actual {
        return Err(FormatError::corrupt(
            file,
            (ie - 4) as u64,
            "index.crc32",
            format!("checksum mismatch: stored {stored:#010x}, computed {actual:#010x}"),
        ));
    }
    let mut ic = Cursor::new(index, index_offset, file);
    let count_at = ic.offset();
    let n = ic.varint("index.section_count")?;
    let n = usize::try_from(n)
        .ok()
        .filter(|n| n.checked_mul(SECTION_ENTRY_LEN).is_some_and(|b| b <= ic.remaining()))
        .ok_or_else(|| {
            ic.err_at(
                count_at,
                "index.section_count",
                format!("{n} sections do not fit in the index"),
            )
        })?;
    let mut sections: Vec<Section> = Vec::with_capacity(n);
    let mut next = header_end;
    for i in 0..n {
        let at = ic.offset();
        let s = Section {
            id: ic.u32("index.section.id")?,
            blocks: ic.u32("index.section.blocks")?,
            offset: ic.u64("index.section.offset")?,
            stored: ic.u64("index.section.stored_bytes")?,
            raw: ic.u64("index.section.raw_bytes")?,
            entries: ic.u64("index.section.entries")?,
        };
        let bad = |reason: String| FormatError::corrupt(file, at, format!("index.sections[{i}]"), reason);
        if let Some(prev) = sections.last() {
            if s.id <= prev.id {
                return Err(bad(format!("section id {} does not follow {}", s.id, prev.id)));
            }
        }
        if s.offset != next {
            return Err(bad(format!(
                "section {} starts at {} but the previous one ends at {next}",
                s.id, s.offset
            )));
        }
        let min_stored = u64::from(s.blocks) * BLOCK_HEADER_LEN as u64;
        if s.stored < min_stored || (s.blocks == 0) != (s.stored == 0) || (s.blocks == 0 && (s.raw | s.entries) != 0) {
            return Err(bad(format!(
                "section {}: {} blocks cannot hold {} stored bytes, {} raw bytes and {} entries",
                s.id, s.blocks, s.stored, s.raw, s.entries
            )));
        }
        next = s
            .offset
            .checked_add(s.stored)
            .filter(|e| *e <= index_offset)
            .ok_or_else(|| {
                bad(format!(
                    "section {} ({} bytes at {}) runs into the index at {index_offset}",
                    s.id, s.stored, s.offset
                ))
            })?;
        sections.push(s);
    }
    if next != index_offset {
        return Err(FormatError::corrupt(
            file,
            index_offset,
            "index",
            format!("sections end at {next} but the index starts at {index_offset}: the index does not cover the data"),
        ));
    }
    let tail_start = io + ic.position();
    Ok(Layout {
        header_body: HEADER_PREFIX_LEN..crc_pos,
        header_body_offset: HEADER_PREFIX_LEN as u64,
        index_offset,
        sections,
        index_tail: tail_start..ie - 4,
        size,
    })
}

/// Writes a data file: header, then sections of blocks, then index and trailer.
pub(crate) struct ContainerWriter {
    w: Box<dyn StorageWriter>,
    file: String,
    pos: u64,
    compression: Compression,
    enc: Option<BlockEncoder>,
    sections: Vec<Section>,
    cur: Option<Section>,
}

// The writer may be handed between threads.
const _: () = {
    const fn assert_send<T: Send>() {}
    assert_send::<ContainerWriter>();
};

impl ContainerWriter {
    /// Starts the file and writes its header.
    pub(crate) fn create(
        storage: &dyn Storage,
        path: &str,
        kind: &FileKind,
        header_body: &[u8],
        compression: Compression,
    ) -> Result<Self> {
        let file = storage.describe(path);
        let body_len = u32::try_from(header_body.len())
            .map_err(|_| FormatError::from(crate::error::WriteProblem::HeaderTooLarge { file: file.to_string() }))?;
        let mut w = storage.create(path)?;
        let mut head = Vec::with_capacity(HEADER_PREFIX_LEN + header_body.len() + 4);
        head.extend_from_slice(&kind.magic);
        put_u32(&mut head, FORMAT_VERSION);
        put_u32(&mut head, 0);
        put_u32(&mut head, body_len);
        head.extend_from_slice(header_body);
        let crc = crc32fast::hash(&head);
        put_u32(&mut head, crc);
        w.write_all(&head).map_err(|e| io_err(&file, e))?;
        Ok(ContainerWriter {
            w,
            file,
            pos: head.len() as u64,
            compression,
            enc: None,
            sections: Vec::new(),
            cur: None,
        })
    }

    /// Opens section `id` (ids must ascend); closes any open one.
    pub(crate) fn begin_section(&mut self, id: u32) {
        self.end_section();
        self.cur = Some(Section {
            id,
            blocks: 0,
            offset: self.pos,
            stored: 0,
            raw: 0,
            entries: 0,
        });
    }

    /// The id of the open section, if any.
    pub(crate) fn open_section(&self) -> Option<u32> {
        self.cur.map(|c| c.id)
    }

    /// Encodes and writes one block of the open section.
    pub(crate) fn write_block(&mut self, raw: &[u8], entries: u32) -> Result<()> {
        if self.cur.is_none() {
            return Err(crate::error::WriteProblem::OutsideSection.into());
        }
        let id = self.cur.map_or(0, |c| c.id);
        let enc = match self.enc.as_mut() {
            Some(e) => e,
            None => self.enc.insert(BlockEncoder::new(self.compression)?),
        };
        let b = enc.encode(raw, id, entries)?;
        let (header, payload) = (b.header, b.payload);
        let stored_len = payload.len();
        self.w.write_all(&header).map_err(|e| io_err(&self.file, e))?;
        self.w.write_all(payload).map_err(|e| io_err(&self.file, e))?;
        self.add_block(stored_len, raw.len(), entries)
    }

    /// Records a block of `stored_len` stored bytes in the open section and advances the
    /// position past it. The caller writes the block's bytes, in order, with
    /// [`ContainerWriter::write_all_vectored`] (possibly later, together with others).
    pub(crate) fn add_block(&mut self, stored_len: usize, raw_len: usize, entries: u32) -> Result<()> {
        let Some(cur) = self.cur.as_mut() else {
            return Err(crate::error::WriteProblem::OutsideSection.into());
        };
        let n = (BLOCK_HEADER_LEN + stored_len) as u64;
        self.pos += n;
        cur.stored += n;
        cur.raw += raw_len as u64;
        cur.entries += u64::from(entries);
        cur.blocks = cur
            .blocks
            .checked_add(1)
            .ok_or_else(|| FormatError::from(crate::error::WriteProblem::TooManyBlocks))?;
        Ok(())
    }

    /// Writes all of `bufs`, in order (vectored writes: no copy into a staging buffer when
    /// the storage writes them straight to the file).
    pub(crate) fn write_all_vectored(&mut self, mut bufs: &mut [IoSlice<'_>]) -> Result<()> {
        IoSlice::advance_slices(&mut bufs, 0);
        while !bufs.is_empty() {
            match self.w.write_vectored(bufs) {
                Ok(0) => {
                    return Err(io_err(
                        &self.file,
                        std::io::Error::new(std::io::ErrorKind::WriteZero, "failed to write whole buffer"),
                    ))
                }
                Ok(n) => IoSlice::advance_slices(&mut bufs, n),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_err(&self.file, e)),
            }
        }
        Ok(())
    }

    /// Closes the open section, returning it.
    pub(crate) fn end_section(&mut self) -> Option<Section> {
        let s = self.cur.take()?;
        self.sections.push(s);
        Some(s)
    }

    /// Writes index (with `index_tail`) and trailer and commits the file; returns its size.
    pub(crate) fn finish(mut self, index_tail: &[u8]) -> Result<u64> {
        self.end_section();
        let mut index = Vec::with_capacity(10 + self.sections.len() * SECTION_ENTRY_LEN + index_tail.len() + 4);
        put_varint(&mut index, self.sections.len() as u64);
        for s in &self.sections {
            put_u32(&mut index, s.id);
            put_u32(&mut index, s.blocks);
            put_u64(&mut index, s.offset);
            put_u64(&mut index, s.stored);
            put_u64(&mut index, s.raw);
            put_u64(&mut index, s.entries);
        }
        index.extend_from_slice(index_tail);
        let crc = crc32fast::hash(&index);
        put_u32(&mut index, crc);
        let mut trailer = Vec::with_capacity(TRAILER_LEN);
        put_u64(&mut trailer, self.pos);
        put_u64(&mut trailer, index.len() as u64);
        let crc = crc32fast::hash(&trailer);
        put_u32(&mut trailer, crc);
        trailer.extend_from_slice(&TRAILER_MAGIC);
        self.w.write_all(&index).map_err(|e| io_err(&self.file, e))?;
        self.w.write_all(&trailer).map_err(|e| io_err(&self.file, e))?;
        let expected = self.pos + (index.len() + trailer.len()) as u64;
        let size = self.w.commit()?;
        if size != expected {
            return Err(FormatError::Storage(StorageError::Io {
                path: self.file,
                source: std::io::Error::other(format!("committed {size} bytes, wrote {expected}")),
            }));
        }
        Ok(size)
    }

    /// The sections written so far.
    pub(crate) fn sections(&self) -> &[Section] {
        &self.sections
    }
}
