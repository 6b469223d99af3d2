//! Java `DataInputStream` reads over a byte slice, each failure naming the file, the offset
//! and the field being read.

use crate::error::FlinkError;

/// A cursor over big-endian Java-serialized bytes.
pub(crate) struct Input<'a> {
    bytes: &'a [u8],
    pos: usize,
    file: &'a str,
}

impl<'a> Input<'a> {
    pub(crate) fn new(bytes: &'a [u8], file: &'a str) -> Self {
        Input { bytes, pos: 0, file }
    }

    /// The current offset.
    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    /// Moves to `pos` (at most the end).
    pub(crate) fn seek(&mut self, pos: usize) {
        self.pos = pos.min(self.bytes.len());
    }

    /// Bytes left.
    pub(crate) fn remaining(&self) -> usize {
        self.bytes.len().saturating_sub(self.pos)
    }

    /// The bytes from the current offset on, not consumed.
    pub(crate) fn peek_rest(&self) -> &'a [u8] {
        self.bytes.get(self.pos..).unwrap_or(&[])
    }

    /// The bytes from the current offset on, consumed.
    pub(crate) fn rest(&mut self) -> &'a [u8] {
        let r = self.bytes.get(self.pos..).unwrap_or(&[]);
        self.pos = self.bytes.len();
        r
    }

    /// A corruption error at `offset`.
    pub(crate) fn corrupt_at(&self, offset: usize, field: &str, reason: impl Into<String>) -> FlinkError {
        FlinkError::Corrupt {
            file: self.file.to_string(),
            offset: offset as u64,
            field: field.to_string(),
            reason: reason.into(),
        }
    }

    /// An unsupported-feature error at `offset`.
    pub(crate) fn unsupported_at(&self, offset: usize, field: &str, what: impl Into<String>) -> FlinkError {
        FlinkError::Unsupported {
            file: self.file.to_string(),
            offset: offset as u64,
            field: field.to_string(),
            what: what.into(),
        }
    }

    pub(crate) fn take(&mut self, n: usize, field: &str) -> Result<&'a [u8], FlinkError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.bytes.len());
        match end.and_then(|e| self.bytes.get(self.pos..e).map(|s| (s, e))) {
            Some((s, e)) => {
                self.pos = e;
                Ok(s)
            }
            None => Err(self.corrupt_at(
                self.pos,
                field,
                format!("needs {n} bytes, {} left (truncated?)", self.remaining()),
            )),
        }
    }

    fn array<const N: usize>(&mut self, field: &str) -> Result<[u8; N], FlinkError> {
        let s = self.take(N, field)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    pub(crate) fn u8(&mut self, field: &str) -> Result<u8, FlinkError> {
        Ok(self.array::<1>(field)?[0])
    }

    /// Java `readBoolean`: one byte, non-zero is true.
    pub(crate) fn bool(&mut self, field: &str) -> Result<bool, FlinkError> {
        Ok(self.u8(field)? != 0)
    }

    pub(crate) fn u16(&mut self, field: &str) -> Result<u16, FlinkError> {
        Ok(u16::from_be_bytes(self.array(field)?))
    }

    pub(crate) fn i32(&mut self, field: &str) -> Result<i32, FlinkError> {
        Ok(i32::from_be_bytes(self.array(field)?))
    }

    pub(crate) fn i64(&mut self, field: &str) -> Result<i64, FlinkError> {
        Ok(i64::from_be_bytes(self.array(field)?))
    }

    /// An `i32` that must be in `0..=max`.
    pub(crate) fn count(&mut self, field: &str, max: usize) -> Result<usize, FlinkError> {
        let at = self.pos;
        let n = self.i32(field)?;
        usize::try_from(n)
            .ok()
            .filter(|&n| n <= max)
            .ok_or_else(|| self.corrupt_at(at, field, format!("count {n} is negative or larger than {max}")))
    }

    /// A count of items of at least `min_item` bytes each: no larger than the bytes left
    /// allow, so a damaged count cannot make a reader allocate or loop past the input.
    pub(crate) fn items(&mut self, field: &str, min_item: usize) -> Result<usize, FlinkError> {
        let max = self.remaining().saturating_sub(4) / min_item.max(1);
        self.count(field, max)
    }

    /// An `i64` that must not be negative.
    pub(crate) fn u64(&mut self, field: &str) -> Result<u64, FlinkError> {
        let at = self.pos;
        let v = self.i64(field)?;
        u64::try_from(v).map_err(|_| self.corrupt_at(at, field, format!("{v} is negative")))
    }

    /// Java `writeUTF`: a `u16` byte length, then modified UTF-8 (NUL as `C0 80`, characters
    /// outside the BMP as two 3-byte surrogates).
    pub(crate) fn utf(&mut self, field: &str) -> Result<String, FlinkError> {
        let len = usize::from(self.u16(field)?);
        let at = self.pos;
        let bytes = self.take(len, field)?;
        decode_modified_utf8(bytes).map_err(|i| self.corrupt_at(at + i, field, "not modified UTF-8"))
    }
}

/// Decodes Java's modified UTF-8 (also CESU-8); on failure returns the offset of the bad byte.
pub(crate) fn decode_modified_utf8(bytes: &[u8]) -> Result<String, usize> {
    if bytes.is_ascii() {
        return Ok(String::from_utf8_lossy(bytes).into_owned());
    }
    let mut units: Vec<u16> = Vec::with_capacity(bytes.len());
    let mut i = 0;
    let cont = |i: usize| -> Result<u16, usize> {
        match bytes.get(i) {
            Some(&b) if b & 0xC0 == 0x80 => Ok(u16::from(b & 0x3F)),
            _ => Err(i),
        }
    };
    while let Some(&b) = bytes.get(i) {
        match b {
            // Java's reader takes a raw NUL too, although its writer never emits one.
            0x00..=0x7F => {
                units.push(u16::from(b));
                i += 1;
            }
            0xC0..=0xDF => {
                units.push((u16::from(b & 0x1F) << 6) | cont(i + 1)?);
                i += 2;
            }
            0xE0..=0xEF => {
                units.push((u16::from(b & 0x0F) << 12) | (cont(i + 1)? << 6) | cont(i + 2)?);
                i += 3;
            }
            _ => return Err(i),
        }
    }
    String::from_utf16(&units).map_err(|_| bytes.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modified_utf8_nul_and_surrogates() {
        assert_eq!(decode_modified_utf8(b"abc").as_deref(), Ok("abc"));
        assert_eq!(decode_modified_utf8(&[0x61, 0xC0, 0x80]).as_deref(), Ok("a\0"));
        // U+1F600 as two 3-byte surrogates (CESU-8).
        let s = [0xED, 0xA0, 0xBD, 0xED, 0xB8, 0x80];
        assert_eq!(decode_modified_utf8(&s).as_deref(), Ok("😀"));
        assert_eq!(decode_modified_utf8("grüße".as_bytes()).as_deref(), Ok("grüße"));
        assert_eq!(decode_modified_utf8(&[0x00]).as_deref(), Ok("\0"));
        assert!(decode_modified_utf8(&[0xF0, 0x9F, 0x98, 0x80]).is_err());
        assert!(decode_modified_utf8(&[0xC3]).is_err());
    }

    #[test]
    fn truncation_names_the_field_and_offset() {
        let mut i = Input::new(&[0, 0, 0], "f");
        let e = i.i32("count").expect_err("short");
        let s = e.to_string();
        assert!(s.contains("f") && s.contains("offset 0") && s.contains("count"), "{s}");
    }
}
