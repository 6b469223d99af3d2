//! Blocks of a block-based table: reading one through its handle (bounds, trailer checksum,
//! decompression) and walking its entries (prefix-compressed keys, restart array).

use crate::coding::{decode_fixed32, Cursor};
use crate::error::{Error, Result};
use crate::Limits;
use std::borrow::Cow;

/// Size of the trailer after every block: compression type (1 byte) and checksum (4).
pub(crate) const TRAILER: u64 = 5;

/// Where a block is in its file, without its trailer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockHandle {
    /// Offset of the block's first byte.
    pub offset: u64,
    /// Length of the block, trailer excluded.
    pub size: u64,
}

impl BlockHandle {
    pub(crate) fn decode(c: &mut Cursor<'_>, field: &str) -> Result<BlockHandle> {
        let offset = c.varint64(field)?;
        let size = c.varint64(field)?;
        Ok(BlockHandle { offset, size })
    }

    /// First byte after the block's trailer, if it does not overflow.
    pub(crate) fn end(&self) -> Option<u64> {
        self.offset.checked_add(self.size)?.checked_add(TRAILER)
    }
}

/// Checksum types of the footer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChecksumType {
    /// No checksum.
    None,
    /// Masked CRC32C.
    Crc32c,
    /// XXH32, seed 0.
    XxHash,
    /// Lower 32 bits of XXH64, seed 0.
    XxHash64,
    /// Lower 32 bits of XXH3-64 of all but the last byte, mixed with the last byte.
    Xxh3,
}

impl ChecksumType {
    pub(crate) fn from_byte(b: u8) -> Option<ChecksumType> {
        Some(match b {
            0 => ChecksumType::None,
            1 => ChecksumType::Crc32c,
            2 => ChecksumType::XxHash,
            3 => ChecksumType::XxHash64,
            4 => ChecksumType::Xxh3,
            _ => return None,
        })
    }

    /// RocksDB's built-in checksum of `data`.
    pub fn compute(self, data: &[u8]) -> u32 {
        match self {
            ChecksumType::None => 0,
            ChecksumType::Crc32c => mask_crc(crc32c::crc32c(data)),
            ChecksumType::XxHash => xxhash_rust::xxh32::xxh32(data, 0),
            ChecksumType::XxHash64 => xxhash_rust::xxh64::xxh64(data, 0) as u32,
            ChecksumType::Xxh3 => match data.split_last() {
                None => 0,
                Some((last, head)) => {
                    let v = xxhash_rust::xxh3::xxh3_64(head) as u32;
                    v ^ u32::from(*last).wrapping_mul(0x6b90_83d9)
                }
            },
        }
    }
}

/// CRC32C as RocksDB stores it (rotated and offset so CRCs of CRCs stay strong).
pub fn mask_crc(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// The value format_version 6 adds to a block's checksum at `offset` (0 when disabled).
pub(crate) fn context_modifier(base: u32, offset: u64) -> u32 {
    if base == 0 {
        return 0;
    }
    base ^ (offset as u32).wrapping_add((offset >> 32) as u32)
}

/// What a table's blocks are read with.
pub(crate) struct BlockReader<'a> {
    pub file: &'a str,
    pub data: &'a [u8],
    pub checksum: ChecksumType,
    pub base_context: u32,
    pub format_version: u32,
    pub limits: &'a Limits,
    /// Decompressed bytes so far (against `limits.max_table_bytes`).
    pub decoded: std::cell::Cell<u64>,
}

impl<'a> BlockReader<'a> {
    /// The block's bytes: bounds and checksum checked, decompressed.
    pub(crate) fn read(&self, h: BlockHandle, field: &str) -> Result<Cow<'a, [u8]>> {
        let len = self.data.len() as u64;
        let in_file = h.end().filter(|&e| e <= len);
        let (Some(_), Ok(off), Ok(size)) = (in_file, usize::try_from(h.offset), usize::try_from(h.size)) else {
            return Err(Error::corrupt(
                self.file,
                h.offset,
                field,
                format!(
                    "block handle (offset {}, size {}) runs past the end of the file ({len} bytes)",
                    h.offset, h.size
                ),
            ));
        };
        let mut c = Cursor::new(self.file, self.data, 0);
        c.bytes(off, field)?;
        let with_type = c.clone().bytes(size + 1, field)?;
        let raw = c.bytes(size, field)?;
        let ctype = c.u8(field)?;
        let stored = c.fixed32(field)?;
        if self.checksum != ChecksumType::None {
            let computed = self.checksum.compute(with_type);
            let stored = stored.wrapping_sub(context_modifier(self.base_context, h.offset));
            if computed != stored {
                return Err(Error::corrupt(
                    self.file,
                    h.offset,
                    field,
                    format!(
                        "block checksum mismatch (stored {stored:#010x}, computed {computed:#010x}, {:?})",
                        self.checksum
                    ),
                ));
            }
        }
        let out = self.decompress(h, raw, ctype, field)?;
        let total = self.decoded.get().saturating_add(out.len() as u64);
        if total > self.limits.max_table_bytes {
            return Err(Error::unsupported(
                self.file,
                h.offset,
                field,
                format!(
                    "more than {} decoded bytes in one table (Limits::max_table_bytes)",
                    self.limits.max_table_bytes
                ),
            ));
        }
        self.decoded.set(total);
        Ok(out)
    }

    fn check_size(&self, h: BlockHandle, field: &str, n: u64) -> Result<usize> {
        if n > self.limits.max_block_bytes as u64 {
            return Err(Error::unsupported(
                self.file,
                h.offset,
                field,
                format!(
                    "block of {n} uncompressed bytes, more than {} (Limits::max_block_bytes)",
                    self.limits.max_block_bytes
                ),
            ));
        }
        usize::try_from(n).map_err(|_| Error::corrupt(self.file, h.offset, field, "size overflows usize"))
    }

    fn decompress(&self, h: BlockHandle, raw: &'a [u8], ctype: u8, field: &str) -> Result<Cow<'a, [u8]>> {
        let bad = |what: &str, e: String| {
            Error::corrupt(
                self.file,
                h.offset,
                field,
                format!("{what} block does not decompress: {e}"),
            )
        };
        match ctype {
            0 => Ok(Cow::Borrowed(raw)),
            1 => {
                let n = snap::raw::decompress_len(raw).map_err(|e| bad("Snappy", e.to_string()))?;
                self.check_size(h, field, n as u64)?;
                let v = snap::raw::Decoder::new()
                    .decompress_vec(raw)
                    .map_err(|e| bad("Snappy", e.to_string()))?;
                Ok(Cow::Owned(v))
            }
            4 | 5 | 7 | 0x40 if self.format_version < 2 => Err(Error::unsupported(
                self.file,
                h.offset,
                field,
                format!(
                    "compression type {ctype:#04x} in format_version {}",
                    self.format_version
                ),
            )),
            4 | 5 | 7 | 0x40 => {
                // format_version >= 2: varint32 of the uncompressed size, then the raw LZ4 block
                // or the ZSTD frame.
                let mut c = Cursor::new(self.file, raw, h.offset);
                let n = c.varint32(field)?;
                let n = self.check_size(h, field, u64::from(n))?;
                let body = c.rest();
                let v = if ctype == 4 || ctype == 5 {
                    lz4_flex::block::decompress(body, n).map_err(|e| bad("LZ4", e.to_string()))?
                } else {
                    let mut out = vec![0u8; n];
                    let mut dec = ruzstd::decoding::FrameDecoder::new();
                    let got = dec.decode_all(body, &mut out).map_err(|e| bad("ZSTD", e.to_string()))?;
                    out.truncate(got);
                    out
                };
                if v.len() != n {
                    return Err(bad(
                        if ctype == 4 || ctype == 5 { "LZ4" } else { "ZSTD" },
                        format!("{} bytes, {n} declared", v.len()),
                    ));
                }
                Ok(Cow::Owned(v))
            }
            2 => Err(self.unsupported_compression(h, field, "Zlib")),
            3 => Err(self.unsupported_compression(h, field, "BZip2")),
            6 => Err(self.unsupported_compression(h, field, "Xpress")),
            other => Err(Error::corrupt(
                self.file,
                h.offset,
                field,
                format!("unknown compression type {other:#04x}"),
            )),
        }
    }

    fn unsupported_compression(&self, h: BlockHandle, field: &str, name: &str) -> Error {
        Error::unsupported(self.file, h.offset, field, format!("{name} compression"))
    }
}

/// How a block's entries hold their values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ValueFormat {
    /// `<shared><non_shared><value_len>` then key delta and value.
    Plain,
    /// Index blocks with delta-encoded values (format_version >= 4): `<shared><non_shared>`,
    /// key delta, then a block handle (full where `shared == 0`, else a size delta), and the
    /// first key of the data block when `first_key`.
    IndexDelta { first_key: bool },
}

/// One entry of a block: its full key and its value bytes (for [`ValueFormat::IndexDelta`],
/// the encoded index value, decoded by the caller).
pub(crate) struct RawEntry<'b> {
    pub key: Vec<u8>,
    pub value: &'b [u8],
    pub shared: usize,
    /// Absolute offset of the entry (for errors).
    pub offset: u64,
}

/// Entries of a block, in order. `offset` is the block's offset in the file (for errors).
pub(crate) fn entries<'b>(
    file: &'b str,
    block: &'b [u8],
    offset: u64,
    format: ValueFormat,
    field: &str,
    mut f: impl FnMut(RawEntry<'b>, &mut Cursor<'b>) -> Result<()>,
) -> Result<()> {
    let corrupt = |reason: String| Error::corrupt(file, offset, field, reason);
    // Block footer: packed u32 = num_restarts | feature bits.
    let Some(split) = block.len().checked_sub(4) else {
        return Err(corrupt(format!("block of {} bytes has no restart count", block.len())));
    };
    let packed = block
        .get(split..)
        .and_then(decode_fixed32)
        .ok_or_else(|| corrupt("block footer".into()))?;
    let mut body = block.get(..split).unwrap_or(&[]);
    let num_restarts = packed & 0x0fff_ffff;
    if packed & (1 << 28 | 1 << 29 | 1 << 30) != 0 {
        return Err(Error::unsupported(
            file,
            offset,
            field,
            format!("block footer feature bits {packed:#010x} (separated values / uniform keys)"),
        ));
    }
    if packed & (1 << 31) != 0 {
        // Data block hash index: buckets, then their count (u16), before the footer.
        let n = body.len();
        let count = n
            .checked_sub(2)
            .and_then(|s| body.get(s..))
            .map(|b| {
                usize::from(u16::from_le_bytes([
                    b.first().copied().unwrap_or(0),
                    b.get(1).copied().unwrap_or(0),
                ]))
            })
            .ok_or_else(|| corrupt("hash index bucket count runs past the block".into()))?;
        let keep = n
            .checked_sub(2)
            .and_then(|s| s.checked_sub(count))
            .ok_or_else(|| corrupt(format!("hash index of {count} buckets is larger than the block")))?;
        body = body.get(..keep).unwrap_or(&[]);
    }
    let restarts_len = usize::try_from(num_restarts)
        .ok()
        .and_then(|n| n.checked_mul(4))
        .filter(|&n| n <= body.len())
        .ok_or_else(|| {
            corrupt(format!(
                "{num_restarts} restart points do not fit in a block of {} bytes",
                block.len()
            ))
        })?;
    let data_end = body.len() - restarts_len;
    let (data, restarts) = body.split_at(data_end);
    if data.is_empty() {
        return Ok(());
    }
    if num_restarts == 0 {
        return Err(corrupt("entries without restart points".into()));
    }
    let mut restart_points = restarts.chunks_exact(4).filter_map(decode_fixed32).map(|r| r as usize);
    let mut next_restart = restart_points.next();
    if let Some(first) = next_restart {
        if first != 0 {
            return Err(corrupt(format!("first restart point at {first}, not 0")));
        }
    }
    let mut c = Cursor::new(file, data, offset);
    let mut key: Vec<u8> = Vec::new();
    while !c.is_empty() {
        let at = c.pos();
        let entry_offset = c.offset();
        let is_restart = next_restart == Some(at);
        if is_restart {
            let prev = at;
            next_restart = restart_points.next();
            if let Some(n) = next_restart {
                if n <= prev || n >= data.len() {
                    return Err(corrupt(format!("restart point {n} out of order or past the entries")));
                }
            }
        } else if next_restart.is_some_and(|n| n < at) {
            return Err(corrupt(format!(
                "restart point {} is not at an entry",
                next_restart.unwrap_or(0)
            )));
        }
        let shared = c.varint_len("entry shared key length")?;
        let non_shared = c.varint_len("entry key length")?;
        let value_len = match format {
            ValueFormat::Plain => Some(c.varint_len("entry value length")?),
            ValueFormat::IndexDelta { .. } => None,
        };
        if is_restart && shared != 0 {
            return Err(c.corrupt("entry shared key length", format!("{shared} at a restart point")));
        }
        if shared > key.len() {
            return Err(c.corrupt(
                "entry shared key length",
                format!("{shared} shared bytes, previous key has {}", key.len()),
            ));
        }
        let delta = c.bytes(non_shared, "entry key")?;
        key.truncate(shared);
        key.extend_from_slice(delta);
        let value = match value_len {
            Some(n) => c.bytes(n, "entry value")?,
            None => &[],
        };
        f(
            RawEntry {
                key: key.clone(),
                value,
                shared,
                offset: entry_offset,
            },
            &mut c,
        )?;
    }
    if let Some(n) = next_restart {
        return Err(corrupt(format!("restart point {n} is not at an entry")));
    }
    Ok(())
}
