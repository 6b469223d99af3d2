//! Primitive encoders and a bounds-checked decoding cursor shared by every file kind, plus the
//! encodings of [`TypeSchema`] and the state descriptors (`docs/format.md` §"Common encodings").
#![deny(clippy::indexing_slicing)]

use crate::error::FormatError;
use statekit_core::schema::{get_varint, put_varint, MAX_SCHEMA_DEPTH};
use statekit_core::{
    KeyedStateKind, OperatorStateDescriptor, OperatorStateMode, StateDescriptor, TtlConfig, TtlUpdateType, TypeSchema,
};

pub(crate) type Result<T> = std::result::Result<T, FormatError>;

/// Appends a little-endian `u32`.
#[inline]
pub(crate) fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Appends a little-endian `u64`.
#[inline]
pub(crate) fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Appends a LEB128 length followed by the bytes.
#[inline]
pub(crate) fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// Appends a length-prefixed UTF-8 string.
#[inline]
pub(crate) fn put_str(out: &mut Vec<u8>, s: &str) {
    put_bytes(out, s.as_bytes());
}

/// Reads a little-endian `u32` at byte `pos` of `b`; `None` when fewer than 4 bytes are
/// there.
///
/// ```
/// assert_eq!(statekit_format::le_u32(&[9, 1, 0, 0, 0], 1), Some(1));
/// assert_eq!(statekit_format::le_u32(&[1, 0, 0], 0), None);
/// ```
#[inline]
pub fn le_u32(b: &[u8], pos: usize) -> Option<u32> {
    Some(u32::from_le_bytes(*b.get(pos..)?.first_chunk::<4>()?))
}

/// Reads a little-endian `u64` at byte `pos` of `b`; `None` when fewer than 8 bytes are
/// there.
#[inline]
pub fn le_u64(b: &[u8], pos: usize) -> Option<u64> {
    Some(u64::from_le_bytes(*b.get(pos..)?.first_chunk::<8>()?))
}

/// A decoding position in a byte slice that is itself at absolute offset `base` of `file`:
/// the one way statekit's decoders read bytes.
///
/// Every read is bounds-checked and fails with a [`FormatError::Corrupt`] that names the
/// file, the absolute offset where the field being read starts, and the field; no length read
/// from the bytes is trusted before it has been checked against what remains, so a hostile
/// count or length never drives an allocation.
///
/// ```
/// use statekit_format::{Cursor, FormatError};
///
/// // Bytes 100.. of "f": a u32 and a length-prefixed string.
/// let bytes = [7, 0, 0, 0, 2, b'h', b'i'];
/// let mut c = Cursor::new(&bytes, 100, "f");
/// assert_eq!(c.u32("header.count")?, 7);
/// assert_eq!(c.string("header.name")?, "hi");
/// c.finish("header")?;
///
/// let mut c = Cursor::new(&bytes[..6], 100, "f");
/// c.u32("header.count")?;
/// let e = c.string("header.name").unwrap_err();
/// assert_eq!(e.to_string(), "f: offset 104: header.name: length 2 exceeds the 1 bytes left");
/// # Ok::<(), FormatError>(())
/// ```
#[derive(Clone, Debug)]
pub struct Cursor<'a> {
    buf: &'a [u8],
    /// Invariant: `pos <= buf.len()`.
    pos: usize,
    base: u64,
    file: &'a str,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `buf`, which lies at absolute offset `base` of `file` (the
    /// name errors show).
    #[inline]
    pub fn new(buf: &'a [u8], base: u64, file: &'a str) -> Self {
        Cursor {
            buf,
            pos: 0,
            base,
            file,
        }
    }

    /// The file errors name.
    #[inline]
    pub fn file(&self) -> &'a str {
        self.file
    }

    /// Absolute file offset of the next byte.
    #[inline]
    pub fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// Bytes consumed so far (the position within the slice, not the file).
    #[inline]
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Bytes left.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// True when every byte was consumed.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    /// The bytes left, without consuming them.
    #[inline]
    pub fn rest(&self) -> &'a [u8] {
        self.buf.get(self.pos..).unwrap_or_default()
    }

    /// A [`FormatError::Corrupt`] at the current position.
    #[cold]
    pub fn err(&self, field: &str, reason: impl Into<String>) -> FormatError {
        FormatError::corrupt(self.file, self.offset(), field, reason)
    }

    /// A [`FormatError::Corrupt`] at absolute offset `offset` (typically one
    /// [`Cursor::offset`] returned before a field was read).
    #[cold]
    pub fn err_at(&self, offset: u64, field: &str, reason: impl Into<String>) -> FormatError {
        FormatError::corrupt(self.file, offset, field, reason)
    }

    #[cold]
    #[inline(never)]
    fn short(&self, n: usize, field: &str) -> FormatError {
        self.err(field, format!("needs {n} bytes, only {} left", self.remaining()))
    }

    /// The next `n` bytes.
    #[inline]
    pub fn take(&mut self, n: usize, field: &str) -> std::result::Result<&'a [u8], FormatError> {
        match self.pos.checked_add(n).and_then(|end| self.buf.get(self.pos..end)) {
            Some(s) => {
                self.pos += n;
                Ok(s)
            }
            None => Err(self.short(n, field)),
        }
    }

    /// The next `N` bytes, as an array.
    #[inline]
    pub fn array<const N: usize>(&mut self, field: &str) -> std::result::Result<[u8; N], FormatError> {
        match self.rest().first_chunk::<N>() {
            Some(a) => {
                self.pos += N;
                Ok(*a)
            }
            None => Err(self.short(N, field)),
        }
    }

    /// One byte.
    #[inline]
    pub fn u8(&mut self, field: &str) -> std::result::Result<u8, FormatError> {
        match self.buf.get(self.pos) {
            Some(&b) => {
                self.pos += 1;
                Ok(b)
            }
            None => Err(self.short(1, field)),
        }
    }

    /// A little-endian `u32`.
    #[inline]
    pub fn u32(&mut self, field: &str) -> std::result::Result<u32, FormatError> {
        self.array(field).map(u32::from_le_bytes)
    }

    /// A little-endian `u64`.
    #[inline]
    pub fn u64(&mut self, field: &str) -> std::result::Result<u64, FormatError> {
        self.array(field).map(u64::from_le_bytes)
    }

    /// A little-endian `i64`.
    #[inline]
    pub fn i64(&mut self, field: &str) -> std::result::Result<i64, FormatError> {
        self.array(field).map(i64::from_le_bytes)
    }

    /// A LEB128 varint (at most 10 bytes, no bits beyond 64).
    #[inline]
    pub fn varint(&mut self, field: &str) -> std::result::Result<u64, FormatError> {
        let mut p = self.pos;
        match get_varint(self.buf, &mut p) {
            Some(v) => {
                self.pos = p;
                Ok(v)
            }
            None => Err(self.bad_varint(field)),
        }
    }

    #[cold]
    #[inline(never)]
    fn bad_varint(&self, field: &str) -> FormatError {
        self.err(field, "truncated or overlong LEB128 varint")
    }

    /// A varint used as an element count: every element takes at least one byte, so a count
    /// larger than the bytes left is corrupt (and never drives an allocation).
    #[inline]
    pub fn count(&mut self, field: &str) -> std::result::Result<usize, FormatError> {
        let at = self.offset();
        let n = self.varint(field)?;
        match usize::try_from(n) {
            Ok(n) if n <= self.remaining() => Ok(n),
            _ => Err(self.too_many(at, "count", n, field)),
        }
    }

    #[cold]
    #[inline(never)]
    fn too_many(&self, at: u64, what: &str, n: u64, field: &str) -> FormatError {
        self.err_at(
            at,
            field,
            format!("{what} {n} exceeds the {} bytes left", self.remaining()),
        )
    }

    /// A varint length followed by that many bytes.
    #[inline]
    pub fn bytes(&mut self, field: &str) -> std::result::Result<&'a [u8], FormatError> {
        let at = self.offset();
        let n = self.varint(field)?;
        let end = usize::try_from(n).ok().and_then(|n| self.pos.checked_add(n));
        match end.and_then(|end| self.buf.get(self.pos..end).map(|s| (end, s))) {
            Some((end, s)) => {
                self.pos = end;
                Ok(s)
            }
            None => Err(self.too_many(at, "length", n, field)),
        }
    }

    /// A length-prefixed UTF-8 string.
    pub fn string(&mut self, field: &str) -> std::result::Result<String, FormatError> {
        let at = self.offset();
        let b = self.bytes(field)?;
        match std::str::from_utf8(b) {
            Ok(s) => Ok(s.to_string()),
            Err(e) => Err(self.err_at(
                at,
                field,
                format!("invalid UTF-8 at byte {} of the string", e.valid_up_to()),
            )),
        }
    }

    /// A flags byte with only the bits in `known` allowed.
    pub fn flags(&mut self, known: u8, field: &str) -> std::result::Result<u8, FormatError> {
        let at = self.offset();
        let b = self.u8(field)?;
        if b & !known != 0 {
            return Err(self.err_at(at, field, format!("unknown flag bits {:#04x}", b & !known)));
        }
        Ok(b)
    }

    /// Fails unless every byte was consumed; `what` names the whole being decoded.
    pub fn finish(&self, what: &str) -> std::result::Result<(), FormatError> {
        if self.remaining() != 0 {
            return Err(self.err(what, format!("{} unexpected trailing bytes", self.remaining())));
        }
        Ok(())
    }
}

// ---- TypeSchema ------------------------------------------------------------------------------

const SCHEMA_BYTES: u8 = 0;
const SCHEMA_UNIT: u8 = 1;
const SCHEMA_BOOL: u8 = 2;
const SCHEMA_I32: u8 = 3;
const SCHEMA_I64: u8 = 4;
const SCHEMA_U64: u8 = 5;
const SCHEMA_F32: u8 = 6;
const SCHEMA_F64: u8 = 7;
const SCHEMA_UTF8: u8 = 8;
const SCHEMA_LIST: u8 = 9;
const SCHEMA_TUPLE: u8 = 10;
const SCHEMA_STRUCT: u8 = 11;
const SCHEMA_OPTION: u8 = 12;

/// Appends the encoding of a schema (a tag byte, then the children).
pub(crate) fn put_schema(out: &mut Vec<u8>, s: &TypeSchema) {
    match s {
        TypeSchema::Bytes => out.push(SCHEMA_BYTES),
        TypeSchema::Unit => out.push(SCHEMA_UNIT),
        TypeSchema::Bool => out.push(SCHEMA_BOOL),
        TypeSchema::I32 => out.push(SCHEMA_I32),
        TypeSchema::I64 => out.push(SCHEMA_I64),
        TypeSchema::U64 => out.push(SCHEMA_U64),
        TypeSchema::F32 => out.push(SCHEMA_F32),
        TypeSchema::F64 => out.push(SCHEMA_F64),
        TypeSchema::Utf8 => out.push(SCHEMA_UTF8),
        TypeSchema::List(t) => {
            out.push(SCHEMA_LIST);
            put_schema(out, t);
        }
        TypeSchema::Tuple(items) => {
            out.push(SCHEMA_TUPLE);
            put_varint(out, items.len() as u64);
            for t in items {
                put_schema(out, t);
            }
        }
        TypeSchema::Struct(fields) => {
            out.push(SCHEMA_STRUCT);
            put_varint(out, fields.len() as u64);
            for (name, t) in fields {
                put_str(out, name);
                put_schema(out, t);
            }
        }
        TypeSchema::Option(t) => {
            out.push(SCHEMA_OPTION);
            put_schema(out, t);
        }
    }
}

/// Decodes a schema; `depth` is the nesting level of this schema (1 at top level), and a
/// schema deeper than [`MAX_SCHEMA_DEPTH`] is rejected.
pub(crate) fn get_schema(c: &mut Cursor<'_>, field: &str, depth: usize) -> Result<TypeSchema> {
    if depth > MAX_SCHEMA_DEPTH {
        return Err(c.err(field, format!("schema nested deeper than {MAX_SCHEMA_DEPTH} levels")));
    }
    let at = c.offset();
    let tag = c.u8(field)?;
    Ok(match tag {
        SCHEMA_BYTES => TypeSchema::Bytes,
        SCHEMA_UNIT => TypeSchema::Unit,
        SCHEMA_BOOL => TypeSchema::Bool,
        SCHEMA_I32 => TypeSchema::I32,
        SCHEMA_I64 => TypeSchema::I64,
        SCHEMA_U64 => TypeSchema::U64,
        SCHEMA_F32 => TypeSchema::F32,
        SCHEMA_F64 => TypeSchema::F64,
        SCHEMA_UTF8 => TypeSchema::Utf8,
        SCHEMA_LIST => TypeSchema::List(Box::new(get_schema(c, field, depth + 1)?)),
        SCHEMA_OPTION => TypeSchema::Option(Box::new(get_schema(c, field, depth + 1)?)),
        SCHEMA_TUPLE => {
            let n = c.count(field)?;
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                items.push(get_schema(c, field, depth + 1)?);
            }
            TypeSchema::Tuple(items)
        }
        SCHEMA_STRUCT => {
            let n = c.count(field)?;
            let mut fields = Vec::with_capacity(n);
            for _ in 0..n {
                let name = c.string(field)?;
                fields.push((name, get_schema(c, field, depth + 1)?));
            }
            TypeSchema::Struct(fields)
        }
        other => return Err(c.err_at(at, field, format!("unknown schema tag {other}"))),
    })
}

// ---- Descriptors -----------------------------------------------------------------------------

const DESC_HAS_USER_KEY: u8 = 1;
const DESC_HAS_TTL: u8 = 2;

/// Appends a keyed state descriptor.
pub(crate) fn put_state_descriptor(out: &mut Vec<u8>, d: &StateDescriptor) {
    put_str(out, &d.name);
    out.push(d.kind.code());
    let mut flags = 0u8;
    if d.user_key_schema.is_some() {
        flags |= DESC_HAS_USER_KEY;
    }
    if d.ttl.is_some() {
        flags |= DESC_HAS_TTL;
    }
    out.push(flags);
    put_schema(out, &d.key_schema);
    put_schema(out, &d.namespace_schema);
    put_schema(out, &d.value_schema);
    if let Some(uk) = &d.user_key_schema {
        put_schema(out, uk);
    }
    if let Some(ttl) = &d.ttl {
        put_u64(out, ttl.ttl_ms);
        out.push(match ttl.update_type {
            TtlUpdateType::OnCreateAndWrite => 0,
            TtlUpdateType::OnReadAndWrite => 1,
        });
    }
}

/// Decodes a keyed state descriptor; `field` names it in errors (e.g. `states[3]`).
pub(crate) fn get_state_descriptor(c: &mut Cursor<'_>, field: &str) -> Result<StateDescriptor> {
    let name = c.string(&format!("{field}.name"))?;
    let at = c.offset();
    let code = c.u8(&format!("{field}.kind"))?;
    let kind = KeyedStateKind::from_code(code)
        .ok_or_else(|| c.err_at(at, &format!("{field}.kind"), format!("unknown keyed state kind {code}")))?;
    let flags = c.flags(DESC_HAS_USER_KEY | DESC_HAS_TTL, &format!("{field}.flags"))?;
    let key_schema = get_schema(c, &format!("{field}.key_schema"), 1)?;
    let namespace_schema = get_schema(c, &format!("{field}.namespace_schema"), 1)?;
    let value_schema = get_schema(c, &format!("{field}.value_schema"), 1)?;
    let user_key_schema = if flags & DESC_HAS_USER_KEY != 0 {
        Some(get_schema(c, &format!("{field}.user_key_schema"), 1)?)
    } else {
        None
    };
    let ttl = if flags & DESC_HAS_TTL != 0 {
        let ttl_ms = c.u64(&format!("{field}.ttl.ttl_ms"))?;
        let at = c.offset();
        let update_type = match c.u8(&format!("{field}.ttl.update_type"))? {
            0 => TtlUpdateType::OnCreateAndWrite,
            1 => TtlUpdateType::OnReadAndWrite,
            other => {
                return Err(c.err_at(
                    at,
                    &format!("{field}.ttl.update_type"),
                    format!("unknown TTL update type {other}"),
                ))
            }
        };
        Some(TtlConfig { ttl_ms, update_type })
    } else {
        None
    };
    Ok(StateDescriptor {
        name,
        kind,
        key_schema,
        namespace_schema,
        value_schema,
        user_key_schema,
        ttl,
    })
}

const OPDESC_HAS_KEY: u8 = 1;

/// Appends an operator state descriptor.
pub(crate) fn put_operator_descriptor(out: &mut Vec<u8>, d: &OperatorStateDescriptor) {
    put_str(out, &d.name);
    out.push(d.mode.code());
    out.push(if d.key_schema.is_some() { OPDESC_HAS_KEY } else { 0 });
    put_schema(out, &d.value_schema);
    if let Some(k) = &d.key_schema {
        put_schema(out, k);
    }
}

/// Decodes an operator state descriptor.
pub(crate) fn get_operator_descriptor(c: &mut Cursor<'_>, field: &str) -> Result<OperatorStateDescriptor> {
    let name = c.string(&format!("{field}.name"))?;
    let at = c.offset();
    let code = c.u8(&format!("{field}.mode"))?;
    let mode = OperatorStateMode::from_code(code).ok_or_else(|| {
        c.err_at(
            at,
            &format!("{field}.mode"),
            format!("unknown operator state mode {code}"),
        )
    })?;
    let flags = c.flags(OPDESC_HAS_KEY, &format!("{field}.flags"))?;
    let value_schema = get_schema(c, &format!("{field}.value_schema"), 1)?;
    let key_schema = if flags & OPDESC_HAS_KEY != 0 {
        Some(get_schema(c, &format!("{field}.key_schema"), 1)?)
    } else {
        None
    };
    Ok(OperatorStateDescriptor {
        name,
        mode,
        value_schema,
        key_schema,
    })
}

/// Checks that every schema of a keyed descriptor is within [`MAX_SCHEMA_DEPTH`] (writers
/// refuse to produce what readers would reject).
pub(crate) fn check_state_descriptor(d: &StateDescriptor) -> Result<()> {
    let schemas = [
        Some(&d.key_schema),
        Some(&d.namespace_schema),
        Some(&d.value_schema),
        d.user_key_schema.as_ref(),
    ];
    for s in schemas.into_iter().flatten() {
        if s.depth() > MAX_SCHEMA_DEPTH {
            return Err(crate::error::WriteProblem::SchemaTooDeep {
                what: "state",
                name: d.name.clone(),
            }
            .into());
        }
    }
    Ok(())
}

/// Operator-state counterpart of [`check_state_descriptor`].
pub(crate) fn check_operator_descriptor(d: &OperatorStateDescriptor) -> Result<()> {
    for s in [Some(&d.value_schema), d.key_schema.as_ref()].into_iter().flatten() {
        if s.depth() > MAX_SCHEMA_DEPTH {
            return Err(crate::error::WriteProblem::SchemaTooDeep {
                what: "operator state",
                name: d.name.clone(),
            }
            .into());
        }
    }
    Ok(())
}

/// Appends the encoding of a keyed state descriptor (the `StateDescriptor` of
/// `docs/format.md`), for other formats that embed descriptors (the changelog's metadata
/// records).
pub fn encode_state_descriptor(out: &mut Vec<u8>, d: &StateDescriptor) {
    put_state_descriptor(out, d);
}

/// Decodes a keyed state descriptor from the start of `bytes`, which sit at absolute offset
/// `base` of `file`; returns it and the bytes it took. Errors name `file`, offset and `field`.
pub fn decode_state_descriptor(
    bytes: &[u8],
    base: u64,
    file: &str,
    field: &str,
) -> std::result::Result<(StateDescriptor, usize), FormatError> {
    let mut c = Cursor::new(bytes, base, file);
    let d = get_state_descriptor(&mut c, field)?;
    Ok((d, c.position()))
}

/// Decodes a keyed state descriptor at the cursor (the counterpart of
/// [`encode_state_descriptor`] for decoders built on [`Cursor`]); `field` names it in errors
/// (its parts are `field.name`, `field.kind`, …).
pub fn read_state_descriptor(c: &mut Cursor<'_>, field: &str) -> std::result::Result<StateDescriptor, FormatError> {
    get_state_descriptor(c, field)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deep_schema_is_rejected() {
        let mut s = TypeSchema::I32;
        for _ in 0..MAX_SCHEMA_DEPTH {
            s = TypeSchema::List(Box::new(s));
        }
        let mut out = Vec::new();
        put_schema(&mut out, &s);
        let mut c = Cursor::new(&out, 100, "f");
        let e = get_schema(&mut c, "schema", 1).expect_err("too deep");
        assert!(e.to_string().starts_with("f: offset 132: schema:"), "{e}");
        // One level less is fine.
        let TypeSchema::List(inner) = s else { unreachable!() };
        out.clear();
        put_schema(&mut out, &inner);
        let mut c = Cursor::new(&out, 0, "f");
        assert_eq!(get_schema(&mut c, "schema", 1).expect("decode"), *inner);
    }

    #[test]
    fn errors_name_the_absolute_offset_where_the_field_starts() {
        let mut out = vec![0xAA, 1, 0, 0, 0];
        put_varint(&mut out, 300);
        out.push(b'x');
        let mut c = Cursor::new(&out, 1000, "f");
        assert_eq!(c.u8("tag").expect("tag"), 0xAA);
        assert_eq!((c.position(), c.offset(), c.remaining()), (1, 1001, out.len() - 1));
        assert_eq!(c.u32("n").expect("n"), 1);
        let before = c.clone();
        let e = c.bytes("payload").expect_err("300 bytes are not there");
        assert_eq!(
            e.to_string(),
            "f: offset 1005: payload: length 300 exceeds the 1 bytes left"
        );
        let mut c = before.clone();
        assert_eq!(c.varint("len").expect("varint"), 300);
        assert_eq!(c.rest(), b"x");
        let e = c.array::<2>("pair").expect_err("one byte left");
        assert_eq!(e.to_string(), "f: offset 1007: pair: needs 2 bytes, only 1 left");
        let e = c.take(usize::MAX, "all").expect_err("no overflow");
        assert!(e.to_string().starts_with("f: offset 1007: all: needs"), "{e}");
        assert!(c.finish("whole").is_err());
        c.u8("x").expect("x");
        assert!(c.is_empty() && c.finish("whole").is_ok());
        assert_eq!(le_u32(&out, 1), Some(1));
        assert_eq!(le_u32(&out, out.len() - 3), None);
        assert_eq!(le_u32(&out, usize::MAX), None);
        assert_eq!(le_u64(&out, 0).map(|v| v & 0xff), Some(0xAA));
        assert_eq!(le_u64(&out, 1), None);
    }

    #[test]
    fn counts_and_lengths_are_bounded() {
        let mut out = Vec::new();
        put_varint(&mut out, u64::MAX >> 1);
        let mut c = Cursor::new(&out, 0, "f");
        assert!(c.count("n").is_err());
        let mut c = Cursor::new(&out, 0, "f");
        assert!(c.bytes("b").is_err());
        let mut c = Cursor::new(&[0x80], 0, "f");
        assert!(c.varint("v").is_err());
    }
}
