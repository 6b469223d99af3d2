//! Bounds-checked decoding of RocksDB's primitive encodings (fixed little-endian integers,
//! varints, length-prefixed slices) from untrusted bytes.

use crate::error::{Error, Result};

/// A cursor over bytes of one file: every read is checked against the end, and errors name
/// the file, the absolute offset and the field.
#[derive(Clone)]
pub(crate) struct Cursor<'a> {
    file: &'a str,
    data: &'a [u8],
    pos: usize,
    /// Absolute offset (in the file) of `data[0]`.
    base: u64,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(file: &'a str, data: &'a [u8], base: u64) -> Self {
        Cursor {
            file,
            data,
            pos: 0,
            base,
        }
    }

    /// Absolute offset of the next byte.
    pub(crate) fn offset(&self) -> u64 {
        self.base.saturating_add(self.pos as u64)
    }

    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.pos >= self.data.len()
    }

    pub(crate) fn remaining(&self) -> usize {
        self.data.len().saturating_sub(self.pos)
    }

    pub(crate) fn rest(&self) -> &'a [u8] {
        self.data.get(self.pos..).unwrap_or(&[])
    }

    pub(crate) fn corrupt(&self, field: &str, reason: impl Into<String>) -> Error {
        Error::corrupt(self.file, self.offset(), field, reason)
    }

    pub(crate) fn bytes(&mut self, n: usize, field: &str) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n);
        match end.and_then(|e| self.data.get(self.pos..e)) {
            Some(b) => {
                self.pos += n;
                Ok(b)
            }
            None => Err(self.corrupt(field, format!("{n} bytes claimed, {} left", self.remaining()))),
        }
    }

    pub(crate) fn u8(&mut self, field: &str) -> Result<u8> {
        let b = self.bytes(1, field)?;
        b.first().copied().ok_or_else(|| self.corrupt(field, "truncated"))
    }

    pub(crate) fn fixed32(&mut self, field: &str) -> Result<u32> {
        let b = self.bytes(4, field)?;
        let a: [u8; 4] = b.try_into().map_err(|_| self.corrupt(field, "truncated"))?;
        Ok(u32::from_le_bytes(a))
    }

    pub(crate) fn fixed64(&mut self, field: &str) -> Result<u64> {
        let b = self.bytes(8, field)?;
        let a: [u8; 8] = b.try_into().map_err(|_| self.corrupt(field, "truncated"))?;
        Ok(u64::from_le_bytes(a))
    }

    pub(crate) fn varint64(&mut self, field: &str) -> Result<u64> {
        let start = self.offset();
        let mut v: u64 = 0;
        for i in 0..10u32 {
            let Some(&b) = self.data.get(self.pos) else {
                return Err(Error::corrupt(self.file, start, field, "varint runs past the end"));
            };
            self.pos += 1;
            let bits = u64::from(b & 0x7f);
            if i == 9 && b > 1 {
                return Err(Error::corrupt(self.file, start, field, "varint overflows 64 bits"));
            }
            v |= bits << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(Error::corrupt(self.file, start, field, "varint longer than 10 bytes"))
    }

    pub(crate) fn varint32(&mut self, field: &str) -> Result<u32> {
        let start = self.offset();
        let v = self.varint64(field)?;
        u32::try_from(v).map_err(|_| Error::corrupt(self.file, start, field, format!("{v} overflows 32 bits")))
    }

    /// A varint32 used as a length or count, as `usize`.
    pub(crate) fn varint_len(&mut self, field: &str) -> Result<usize> {
        let v = self.varint32(field)?;
        usize::try_from(v).map_err(|_| self.corrupt(field, "length overflows usize"))
    }

    /// RocksDB's signed varint: zigzag-encoded varint64.
    pub(crate) fn varsigned64(&mut self, field: &str) -> Result<i64> {
        let v = self.varint64(field)?;
        Ok(((v >> 1) as i64) ^ -((v & 1) as i64))
    }

    pub(crate) fn length_prefixed(&mut self, field: &str) -> Result<&'a [u8]> {
        let n = self.varint_len(field)?;
        self.bytes(n, field)
    }
}

/// Lower 64 bits of a key's last 8 bytes, little-endian.
pub(crate) fn decode_fixed64(b: &[u8]) -> Option<u64> {
    let a: [u8; 8] = b.try_into().ok()?;
    Some(u64::from_le_bytes(a))
}

pub(crate) fn decode_fixed32(b: &[u8]) -> Option<u32> {
    let a: [u8; 4] = b.try_into().ok()?;
    Some(u32::from_le_bytes(a))
}
