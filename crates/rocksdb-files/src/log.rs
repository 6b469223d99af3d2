//! RocksDB's log file format (MANIFEST and write-ahead logs): 32 KiB blocks of records,
//! each `masked crc32c (4) | length (2) | type (1) [| log number (4)] | payload`, a logical
//! record split into FIRST / MIDDLE / LAST fragments across blocks.

use crate::block::mask_crc;
use crate::coding::Cursor;
use crate::error::{Error, Result};

const BLOCK: usize = 32 * 1024;

/// The logical records of a log file, each with the offset of its first fragment.
pub fn records(file: &str, data: &[u8]) -> Result<Vec<(u64, Vec<u8>)>> {
    let mut out = Vec::new();
    let mut pending: Option<(u64, Vec<u8>)> = None;
    let mut pos = 0usize;
    while pos < data.len() {
        let in_block = BLOCK - pos % BLOCK;
        let rest = data.len() - pos;
        if in_block < 7 {
            // Trailer of a block: zero filler.
            pos += in_block.min(rest);
            continue;
        }
        let mut c = Cursor::new(file, data.get(pos..).unwrap_or(&[]), pos as u64);
        let header_at = pos as u64;
        if rest < 7 {
            return Err(Error::corrupt(
                file,
                header_at,
                "log record header",
                format!("{rest} bytes left, a header has 7"),
            ));
        }
        let stored = c.fixed32("log record checksum")?;
        let lo = c.u8("log record length")?;
        let hi = c.u8("log record length")?;
        let len = usize::from(u16::from_le_bytes([lo, hi]));
        let t = c.u8("log record type")?;
        if t == 0 && len == 0 && stored == 0 {
            // Preallocated, never written space: the rest of the block is zeros.
            if data
                .get(pos..pos + in_block.min(rest))
                .is_some_and(|b| b.iter().all(|&x| x == 0))
            {
                pos += in_block.min(rest);
                continue;
            }
            return Err(Error::corrupt(
                file,
                header_at,
                "log record type",
                "zero type before data",
            ));
        }
        let (header, kind) = match t {
            1..=4 => (7usize, t),
            5..=8 => (11usize, t - 4),
            _ => {
                return Err(Error::unsupported(
                    file,
                    header_at,
                    "log record type",
                    format!("record type {t}"),
                ));
            }
        };
        if header > in_block {
            return Err(Error::corrupt(
                file,
                header_at,
                "log record header",
                "crosses a block boundary",
            ));
        }
        let total = header + len;
        if total > in_block {
            return Err(Error::corrupt(
                file,
                header_at,
                "log record length",
                format!("{len} bytes do not fit in the {} left in the block", in_block - header),
            ));
        }
        let Some(checked) = data.get(pos + 6..pos + total) else {
            return Err(Error::corrupt(
                file,
                header_at,
                "log record length",
                format!("{len} bytes claimed, the file ends first"),
            ));
        };
        let computed = mask_crc(crc32c::crc32c(checked));
        if computed != stored {
            return Err(Error::corrupt(
                file,
                header_at,
                "log record checksum",
                format!("stored {stored:#010x}, computed {computed:#010x}"),
            ));
        }
        let payload = data.get(pos + header..pos + total).unwrap_or(&[]);
        match (kind, &mut pending) {
            (1, None) => out.push((header_at, payload.to_vec())),
            (2, None) => pending = Some((header_at, payload.to_vec())),
            (3, Some((_, buf))) => buf.extend_from_slice(payload),
            (4, Some(_)) => {
                if let Some(done) = pending.take() {
                    out.push(done);
                }
                if let Some((_, buf)) = out.last_mut() {
                    buf.extend_from_slice(payload);
                }
            }
            _ => {
                return Err(Error::corrupt(
                    file,
                    header_at,
                    "log record type",
                    format!("fragment type {kind} out of sequence"),
                ));
            }
        }
        pos += total;
    }
    if let Some((at, _)) = pending {
        return Err(Error::corrupt(file, at, "log record", "the file ends inside a record"));
    }
    Ok(out)
}
