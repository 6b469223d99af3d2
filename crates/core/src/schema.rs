//! Self-describing type information: a small schema stored with every state, so a tool can
//! decode keys, namespaces and values without the program that wrote them.
//!
//! The byte encoding each schema implies (the *statekit value encoding*) is specified in
//! `docs/format.md` §"Value encoding". In short: fixed-width numbers are big-endian (as Java's
//! `DataOutputStream` writes them), a top-level string or byte string is its raw bytes, and
//! inside a composite every variable-length part carries a LEB128 length or count.
//! [`TypeSchema::Bytes`] keeps state opaque when a program wants that.
#![deny(clippy::indexing_slicing)]

use std::fmt;

/// Upper bound on nesting depth accepted when decoding schemas and values (guards the stack).
pub const MAX_SCHEMA_DEPTH: usize = 32;

/// The type of a key, namespace, value or map user key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum TypeSchema {
    /// Opaque bytes; shown as hex.
    Bytes,
    /// No bytes at all (e.g. the "void" namespace of non-windowed state).
    Unit,
    /// One byte, 0 or 1.
    Bool,
    /// 4-byte big-endian two's complement.
    I32,
    /// 8-byte big-endian two's complement.
    I64,
    /// 8-byte big-endian unsigned.
    U64,
    /// 4-byte big-endian IEEE-754.
    F32,
    /// 8-byte big-endian IEEE-754.
    F64,
    /// UTF-8 text.
    Utf8,
    /// A sequence: LEB128 count, then the elements (nested encoding).
    List(Box<TypeSchema>),
    /// Fields in order, each in nested encoding.
    Tuple(Vec<TypeSchema>),
    /// Named fields in order, each in nested encoding.
    Struct(Vec<(String, TypeSchema)>),
    /// One byte 0 (absent) or 1 followed by the value (nested encoding).
    Option(Box<TypeSchema>),
}

impl TypeSchema {
    /// Fixed encoded width, if the type has one.
    pub fn fixed_width(&self) -> Option<usize> {
        match self {
            TypeSchema::Unit => Some(0),
            TypeSchema::Bool => Some(1),
            TypeSchema::I32 | TypeSchema::F32 => Some(4),
            TypeSchema::I64 | TypeSchema::U64 | TypeSchema::F64 => Some(8),
            TypeSchema::Tuple(items) => items.iter().map(|t| t.fixed_width()).sum(),
            TypeSchema::Struct(items) => items.iter().map(|(_, t)| t.fixed_width()).sum(),
            _ => None,
        }
    }

    /// Nesting depth (a scalar is 1).
    pub fn depth(&self) -> usize {
        match self {
            TypeSchema::List(t) | TypeSchema::Option(t) => 1 + t.depth(),
            TypeSchema::Tuple(items) => 1 + items.iter().map(|t| t.depth()).max().unwrap_or(0),
            TypeSchema::Struct(items) => 1 + items.iter().map(|(_, t)| t.depth()).max().unwrap_or(0),
            _ => 1,
        }
    }
}

impl fmt::Display for TypeSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TypeSchema::Bytes => write!(f, "bytes"),
            TypeSchema::Unit => write!(f, "unit"),
            TypeSchema::Bool => write!(f, "bool"),
            TypeSchema::I32 => write!(f, "i32"),
            TypeSchema::I64 => write!(f, "i64"),
            TypeSchema::U64 => write!(f, "u64"),
            TypeSchema::F32 => write!(f, "f32"),
            TypeSchema::F64 => write!(f, "f64"),
            TypeSchema::Utf8 => write!(f, "string"),
            TypeSchema::List(t) => write!(f, "list<{t}>"),
            TypeSchema::Option(t) => write!(f, "option<{t}>"),
            TypeSchema::Tuple(items) => {
                write!(f, "(")?;
                for (i, t) in items.iter().enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{t}")?;
                }
                write!(f, ")")
            }
            TypeSchema::Struct(items) => {
                write!(f, "{{")?;
                for (i, (n, t)) in items.iter().enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{n}: {t}")?;
                }
                write!(f, "}}")
            }
        }
    }
}

/// A type written as [`TypeSchema`]'s `Display` writes it (`string`, `i64`, `(i64, i64)`,
/// `list<string>`, `option<u64>`, `{name: string, age: i32}`, …) could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("type {text:?}: at byte {offset}: {reason}")]
pub struct TypeParseError {
    /// The text.
    pub text: String,
    /// Where reading stopped.
    pub offset: usize,
    /// Why.
    pub reason: String,
}

impl std::str::FromStr for TypeSchema {
    type Err = TypeParseError;

    /// Reads a type as `Display` writes it: the inverse, so every schema a snapshot records
    /// survives a schema file a user edits. Whitespace between tokens is ignored; nesting is
    /// limited to [`MAX_SCHEMA_DEPTH`].
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let mut p = TypeParser { text, pos: 0 };
        let t = p.parse(0)?;
        p.skip_ws();
        if p.pos < text.len() {
            return Err(p.error("unexpected text after the type"));
        }
        Ok(t)
    }
}

/// A recursive-descent reader of [`TypeSchema`]'s text form.
struct TypeParser<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> TypeParser<'a> {
    fn error(&self, reason: &str) -> TypeParseError {
        TypeParseError {
            text: self.text.to_string(),
            offset: self.pos,
            reason: reason.to_string(),
        }
    }

    fn rest(&self) -> &'a str {
        self.text.get(self.pos..).unwrap_or_default()
    }

    fn skip_ws(&mut self) {
        let rest = self.rest();
        self.pos += rest.len() - rest.trim_start().len();
    }

    /// Consumes `token` (after whitespace) if it comes next.
    fn eat(&mut self, token: &str) -> bool {
        self.skip_ws();
        if self.rest().starts_with(token) {
            self.pos += token.len();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, token: &str) -> Result<(), TypeParseError> {
        if self.eat(token) {
            Ok(())
        } else {
            Err(self.error(&format!("expected {token:?}")))
        }
    }

    fn parse(&mut self, depth: usize) -> Result<TypeSchema, TypeParseError> {
        if depth >= MAX_SCHEMA_DEPTH {
            return Err(self.error("nested too deeply"));
        }
        self.skip_ws();
        if self.eat("(") {
            let mut items = Vec::new();
            if !self.eat(")") {
                loop {
                    items.push(self.parse(depth + 1)?);
                    if self.eat(")") {
                        break;
                    }
                    self.expect(",")?;
                }
            }
            return Ok(TypeSchema::Tuple(items));
        }
        if self.eat("{") {
            let mut fields = Vec::new();
            if !self.eat("}") {
                loop {
                    self.skip_ws();
                    let rest = self.rest();
                    let end = rest
                        .find(':')
                        .ok_or_else(|| self.error("expected a field name and ':'"))?;
                    let name = rest.get(..end).unwrap_or_default().trim().to_string();
                    if name.is_empty() {
                        return Err(self.error("a field without a name"));
                    }
                    self.pos += end + 1;
                    fields.push((name, self.parse(depth + 1)?));
                    if self.eat("}") {
                        break;
                    }
                    self.expect(",")?;
                }
            }
            return Ok(TypeSchema::Struct(fields));
        }
        let rest = self.rest();
        let word_len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let word = rest.get(..word_len).unwrap_or_default();
        let start = self.pos;
        self.pos += word_len;
        let t = match word {
            "bytes" => TypeSchema::Bytes,
            "unit" => TypeSchema::Unit,
            "bool" => TypeSchema::Bool,
            "i32" => TypeSchema::I32,
            "i64" => TypeSchema::I64,
            "u64" => TypeSchema::U64,
            "f32" => TypeSchema::F32,
            "f64" => TypeSchema::F64,
            "string" => TypeSchema::Utf8,
            "list" | "option" => {
                self.expect("<")?;
                let inner = Box::new(self.parse(depth + 1)?);
                self.expect(">")?;
                if word == "list" {
                    TypeSchema::List(inner)
                } else {
                    TypeSchema::Option(inner)
                }
            }
            _ => {
                self.pos = start;
                return Err(self.error(
                    "expected a type: bytes, unit, bool, i32, i64, u64, f32, f64, string, list<T>, option<T>, (T, …) or {name: T, …}",
                ));
            }
        };
        Ok(t)
    }
}

/// A decoded value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// Opaque bytes.
    Bytes(Vec<u8>),
    /// The unit value.
    Unit,
    /// A boolean.
    Bool(bool),
    /// A 32-bit integer.
    I32(i32),
    /// A 64-bit integer.
    I64(i64),
    /// An unsigned 64-bit integer.
    U64(u64),
    /// A 32-bit float.
    F32(f32),
    /// A 64-bit float.
    F64(f64),
    /// Text.
    Str(String),
    /// A list.
    List(Vec<Value>),
    /// A tuple.
    Tuple(Vec<Value>),
    /// A struct: field names and values.
    Struct(Vec<(String, Value)>),
    /// An optional value.
    Option(Option<Box<Value>>),
}

impl fmt::Display for Value {
    /// A compact JSON-like rendering; bytes print as `0x…` hex.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Bytes(b) => {
                write!(f, "0x")?;
                for x in b {
                    write!(f, "{x:02x}")?;
                }
                Ok(())
            }
            Value::Unit => write!(f, "()"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::I32(v) => write!(f, "{v}"),
            Value::I64(v) => write!(f, "{v}"),
            Value::U64(v) => write!(f, "{v}"),
            Value::F32(v) => write!(f, "{v}"),
            Value::F64(v) => write!(f, "{v}"),
            Value::Str(s) => write!(f, "{s:?}"),
            Value::List(items) => {
                write!(f, "[")?;
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{v}")?;
                }
                write!(f, "]")
            }
            Value::Tuple(items) => {
                write!(f, "(")?;
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{v}")?;
                }
                write!(f, ")")
            }
            Value::Struct(items) => {
                write!(f, "{{")?;
                for (i, (n, v)) in items.iter().enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{n}: {v}")?;
                }
                write!(f, "}}")
            }
            Value::Option(None) => write!(f, "null"),
            Value::Option(Some(v)) => write!(f, "{v}"),
        }
    }
}

/// A value's bytes do not match its schema.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cannot decode {schema} at byte {offset}: {reason}")]
pub struct ValueDecodeError {
    /// The schema (or part of it) being decoded.
    pub schema: String,
    /// Offset within the value's bytes.
    pub offset: usize,
    /// What was wrong.
    pub reason: String,
}

/// A value does not have the shape its schema asks for.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("value does not match schema {schema}")]
pub struct ValueEncodeError {
    /// The schema that was expected.
    pub schema: String,
}

/// Appends `v` as LEB128 (7 bits per byte, low group first, high bit = more).
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads a LEB128 value at `*pos`; `None` when truncated or longer than 10 bytes.
pub fn get_varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut result: u64 = 0;
    let mut shift = 0u32;
    loop {
        let b = *buf.get(*pos)?;
        *pos += 1;
        if shift == 63 && b > 1 {
            return None;
        }
        result |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(result);
        }
        shift += 7;
        if shift > 63 {
            return None;
        }
    }
}

/// Encodes `value` with `schema` at top level.
pub fn encode_value(schema: &TypeSchema, value: &Value) -> Result<Vec<u8>, ValueEncodeError> {
    let mut out = Vec::new();
    encode_into(schema, value, true, &mut out)?;
    Ok(out)
}

fn encode_into(schema: &TypeSchema, value: &Value, top: bool, out: &mut Vec<u8>) -> Result<(), ValueEncodeError> {
    let mismatch = || ValueEncodeError {
        schema: schema.to_string(),
    };
    match (schema, value) {
        (TypeSchema::Bytes, Value::Bytes(b)) => {
            if !top {
                put_varint(out, b.len() as u64);
            }
            out.extend_from_slice(b);
        }
        (TypeSchema::Utf8, Value::Str(s)) => {
            if !top {
                put_varint(out, s.len() as u64);
            }
            out.extend_from_slice(s.as_bytes());
        }
        (TypeSchema::Unit, Value::Unit) => {}
        (TypeSchema::Bool, Value::Bool(b)) => out.push(u8::from(*b)),
        (TypeSchema::I32, Value::I32(v)) => out.extend_from_slice(&v.to_be_bytes()),
        (TypeSchema::I64, Value::I64(v)) => out.extend_from_slice(&v.to_be_bytes()),
        (TypeSchema::U64, Value::U64(v)) => out.extend_from_slice(&v.to_be_bytes()),
        (TypeSchema::F32, Value::F32(v)) => out.extend_from_slice(&v.to_be_bytes()),
        (TypeSchema::F64, Value::F64(v)) => out.extend_from_slice(&v.to_be_bytes()),
        (TypeSchema::List(t), Value::List(items)) => {
            put_varint(out, items.len() as u64);
            for item in items {
                encode_into(t, item, false, out)?;
            }
        }
        (TypeSchema::Tuple(ts), Value::Tuple(items)) if ts.len() == items.len() => {
            for (t, item) in ts.iter().zip(items) {
                encode_into(t, item, false, out)?;
            }
        }
        (TypeSchema::Struct(ts), Value::Struct(items)) if ts.len() == items.len() => {
            for ((name, t), (vname, item)) in ts.iter().zip(items) {
                if name != vname {
                    return Err(mismatch());
                }
                encode_into(t, item, false, out)?;
            }
        }
        (TypeSchema::Option(t), Value::Option(v)) => match v {
            None => out.push(0),
            Some(v) => {
                out.push(1);
                encode_into(t, v, false, out)?;
            }
        },
        _ => return Err(mismatch()),
    }
    Ok(())
}

/// Decodes the bytes of one top-level value; every byte must be consumed.
///
/// The decoded value is bounded by its encoded size ([`crate::limits::value_budget`]): a
/// value whose counts claim more (millions of zero-width elements in a few bytes) is an
/// error, not gigabytes of memory and seconds of work.
pub fn decode_value(schema: &TypeSchema, bytes: &[u8]) -> Result<Value, ValueDecodeError> {
    let mut pos = 0;
    let mut budget = Budget {
        left: crate::limits::value_budget(bytes.len()),
        limit: crate::limits::value_budget(bytes.len()),
        encoded: bytes.len(),
    };
    let v = decode_at(schema, bytes, &mut pos, true, 0, &mut budget)?;
    if pos != bytes.len() {
        return Err(ValueDecodeError {
            schema: schema.to_string(),
            offset: pos,
            reason: format!("{} trailing bytes", bytes.len() - pos),
        });
    }
    Ok(v)
}

/// A value whose counts claim more than its bytes can hold (the reason of a
/// [`ValueDecodeError`]).
#[derive(Debug, thiserror::Error)]
#[error(
    "decodes to more than {limit} bytes ({}x its {encoded} encoded bytes, plus {}): implausible counts",
    crate::limits::MAX_EXPANSION,
    crate::limits::VALUE_BUDGET_SLACK
)]
struct Implausible {
    /// The value's budget.
    limit: u64,
    /// Its encoded bytes.
    encoded: usize,
}

/// What a value being decoded may still take ([`crate::limits::value_budget`]).
struct Budget {
    left: u64,
    limit: u64,
    encoded: usize,
}

impl Budget {
    /// Charges `cost`; the error reason when the budget is exhausted.
    fn charge(&mut self, cost: u64) -> Result<(), Implausible> {
        if cost > self.left {
            return Err(Implausible {
                limit: self.limit,
                encoded: self.encoded,
            });
        }
        self.left -= cost;
        Ok(())
    }
}

fn decode_at(
    schema: &TypeSchema,
    buf: &[u8],
    pos: &mut usize,
    top: bool,
    depth: usize,
    budget: &mut Budget,
) -> Result<Value, ValueDecodeError> {
    use crate::limits::VALUE_NODE_BYTES;
    let err = |offset: usize, reason: &str| ValueDecodeError {
        schema: schema.to_string(),
        offset,
        reason: reason.to_string(),
    };
    if depth > MAX_SCHEMA_DEPTH {
        return Err(err(*pos, "schema nested too deeply"));
    }
    budget
        .charge(VALUE_NODE_BYTES)
        .map_err(|why| err(*pos, &why.to_string()))?;
    let take = |pos: &mut usize, n: usize| -> Result<&[u8], ValueDecodeError> {
        let start = *pos;
        let end = start.checked_add(n).filter(|e| *e <= buf.len()).ok_or_else(|| {
            err(
                start,
                &format!("needs {n} bytes, {} left", buf.len().saturating_sub(start)),
            )
        })?;
        *pos = end;
        buf.get(start..end).ok_or_else(|| err(start, "out of bounds"))
    };
    let var_len = |pos: &mut usize| -> Result<usize, ValueDecodeError> {
        let at = *pos;
        let n = get_varint(buf, pos).ok_or_else(|| err(at, "bad length varint"))?;
        let left = buf.len().saturating_sub(*pos);
        usize::try_from(n)
            .ok()
            .filter(|n| *n <= left)
            .ok_or_else(|| err(at, &format!("length {n} exceeds the {left} bytes left")))
    };
    Ok(match schema {
        TypeSchema::Bytes | TypeSchema::Utf8 => {
            let n = if top {
                buf.len().saturating_sub(*pos)
            } else {
                var_len(pos)?
            };
            let at = *pos;
            let raw = take(pos, n)?;
            budget
                .charge(raw.len() as u64)
                .map_err(|why| err(at, &why.to_string()))?;
            if matches!(schema, TypeSchema::Utf8) {
                Value::Str(
                    std::str::from_utf8(raw)
                        .map_err(|e| err(at + e.valid_up_to(), "invalid UTF-8"))?
                        .to_string(),
                )
            } else {
                Value::Bytes(raw.to_vec())
            }
        }
        TypeSchema::Unit => Value::Unit,
        TypeSchema::Bool => {
            let at = *pos;
            match take(pos, 1)?.first() {
                Some(0) => Value::Bool(false),
                Some(1) => Value::Bool(true),
                _ => return Err(err(at, "bool byte is neither 0 nor 1")),
            }
        }
        TypeSchema::I32 => Value::I32(i32::from_be_bytes(arr4(take(pos, 4)?))),
        TypeSchema::F32 => Value::F32(f32::from_be_bytes(arr4(take(pos, 4)?))),
        TypeSchema::I64 => Value::I64(i64::from_be_bytes(arr8(take(pos, 8)?))),
        TypeSchema::U64 => Value::U64(u64::from_be_bytes(arr8(take(pos, 8)?))),
        TypeSchema::F64 => Value::F64(f64::from_be_bytes(arr8(take(pos, 8)?))),
        TypeSchema::List(t) => {
            let at = *pos;
            let n = get_varint(buf, pos).ok_or_else(|| err(at, "bad count varint"))?;
            let left = buf.len().saturating_sub(*pos);
            // Checked before anything is allocated or iterated: every element that is not
            // zero-width takes at least one byte, and every element counts against the budget.
            if t.fixed_width() != Some(0) && n > left as u64 {
                return Err(err(at, &format!("count {n} exceeds the {left} bytes left")));
            }
            let nodes = n.saturating_mul(VALUE_NODE_BYTES);
            if nodes > budget.left {
                let why = budget.charge(nodes).err().map(|e| e.to_string()).unwrap_or_default();
                return Err(err(at, &format!("count {n}: {why}")));
            }
            let cap = usize::try_from(n).unwrap_or(usize::MAX).min(left.max(1));
            let mut items = Vec::with_capacity(cap);
            for _ in 0..n {
                items.push(decode_at(t, buf, pos, false, depth + 1, budget)?);
            }
            Value::List(items)
        }
        TypeSchema::Tuple(ts) => {
            let mut items = Vec::with_capacity(ts.len());
            for t in ts {
                items.push(decode_at(t, buf, pos, false, depth + 1, budget)?);
            }
            Value::Tuple(items)
        }
        TypeSchema::Struct(ts) => {
            let mut items = Vec::with_capacity(ts.len());
            for (name, t) in ts {
                items.push((name.clone(), decode_at(t, buf, pos, false, depth + 1, budget)?));
            }
            Value::Struct(items)
        }
        TypeSchema::Option(t) => {
            let at = *pos;
            match take(pos, 1)?.first() {
                Some(0) => Value::Option(None),
                Some(1) => Value::Option(Some(Box::new(decode_at(t, buf, pos, false, depth + 1, budget)?))),
                _ => return Err(err(at, "option tag is neither 0 nor 1")),
            }
        }
    })
}

fn arr4(b: &[u8]) -> [u8; 4] {
    let mut a = [0u8; 4];
    a.copy_from_slice(b);
    a
}

fn arr8(b: &[u8]) -> [u8; 8] {
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    a
}

/// A Rust type with a [`TypeSchema`] and the matching top-level encoding. Engines use it to
/// read and write state without hand-written byte handling.
pub trait Codec: Sized {
    /// The schema recorded for this type.
    fn schema() -> TypeSchema;
    /// Appends the top-level encoding of `self`.
    fn encode_to(&self, out: &mut Vec<u8>);
    /// Decodes a whole top-level value.
    fn decode(bytes: &[u8]) -> Result<Self, ValueDecodeError>;
    /// The top-level encoding as a new vector.
    fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::new();
        self.encode_to(&mut v);
        v
    }
}

fn fixed<const N: usize>(schema: &TypeSchema, bytes: &[u8]) -> Result<[u8; N], ValueDecodeError> {
    bytes.try_into().map_err(|_| ValueDecodeError {
        schema: schema.to_string(),
        offset: 0,
        reason: format!("expected {N} bytes, got {}", bytes.len()),
    })
}

macro_rules! codec_num {
    ($t:ty, $s:expr) => {
        impl Codec for $t {
            fn schema() -> TypeSchema {
                $s
            }
            fn encode_to(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_be_bytes());
            }
            fn decode(bytes: &[u8]) -> Result<Self, ValueDecodeError> {
                Ok(<$t>::from_be_bytes(fixed(&$s, bytes)?))
            }
        }
    };
}
codec_num!(i32, TypeSchema::I32);
codec_num!(i64, TypeSchema::I64);
codec_num!(u64, TypeSchema::U64);
codec_num!(f32, TypeSchema::F32);
codec_num!(f64, TypeSchema::F64);

impl Codec for bool {
    fn schema() -> TypeSchema {
        TypeSchema::Bool
    }
    fn encode_to(&self, out: &mut Vec<u8>) {
        out.push(u8::from(*self));
    }
    fn decode(bytes: &[u8]) -> Result<Self, ValueDecodeError> {
        match decode_value(&TypeSchema::Bool, bytes)? {
            Value::Bool(b) => Ok(b),
            _ => unreachable!("bool schema decodes to a bool"),
        }
    }
}

impl Codec for () {
    fn schema() -> TypeSchema {
        TypeSchema::Unit
    }
    fn encode_to(&self, _out: &mut Vec<u8>) {}
    fn decode(bytes: &[u8]) -> Result<Self, ValueDecodeError> {
        decode_value(&TypeSchema::Unit, bytes).map(|_| ())
    }
}

impl Codec for String {
    fn schema() -> TypeSchema {
        TypeSchema::Utf8
    }
    fn encode_to(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.as_bytes());
    }
    fn decode(bytes: &[u8]) -> Result<Self, ValueDecodeError> {
        std::str::from_utf8(bytes)
            .map(str::to_string)
            .map_err(|e| ValueDecodeError {
                schema: "string".into(),
                offset: e.valid_up_to(),
                reason: "invalid UTF-8".into(),
            })
    }
}

impl Codec for Vec<u8> {
    fn schema() -> TypeSchema {
        TypeSchema::Bytes
    }
    fn encode_to(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self);
    }
    fn decode(bytes: &[u8]) -> Result<Self, ValueDecodeError> {
        Ok(bytes.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn arb_schema() -> impl Strategy<Value = TypeSchema> {
        let leaf = prop_oneof![
            Just(TypeSchema::Bytes),
            Just(TypeSchema::Unit),
            Just(TypeSchema::Bool),
            Just(TypeSchema::I32),
            Just(TypeSchema::I64),
            Just(TypeSchema::U64),
            Just(TypeSchema::F64),
            Just(TypeSchema::Utf8),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                inner.clone().prop_map(|t| TypeSchema::List(Box::new(t))),
                inner.clone().prop_map(|t| TypeSchema::Option(Box::new(t))),
                proptest::collection::vec(inner.clone(), 0..4).prop_map(TypeSchema::Tuple),
                proptest::collection::vec(inner, 0..3).prop_map(|ts| TypeSchema::Struct(
                    ts.into_iter().enumerate().map(|(i, t)| (format!("f{i}"), t)).collect()
                )),
            ]
        })
    }

    fn arb_value(schema: &TypeSchema) -> BoxedStrategy<Value> {
        match schema {
            TypeSchema::Bytes => proptest::collection::vec(any::<u8>(), 0..8)
                .prop_map(Value::Bytes)
                .boxed(),
            TypeSchema::Unit => Just(Value::Unit).boxed(),
            TypeSchema::Bool => any::<bool>().prop_map(Value::Bool).boxed(),
            TypeSchema::I32 => any::<i32>().prop_map(Value::I32).boxed(),
            TypeSchema::I64 => any::<i64>().prop_map(Value::I64).boxed(),
            TypeSchema::U64 => any::<u64>().prop_map(Value::U64).boxed(),
            TypeSchema::F32 => any::<i16>().prop_map(|v| Value::F32(f32::from(v))).boxed(),
            TypeSchema::F64 => any::<i32>().prop_map(|v| Value::F64(f64::from(v))).boxed(),
            TypeSchema::Utf8 => "[a-zé]{0,6}".prop_map(Value::Str).boxed(),
            TypeSchema::List(t) => proptest::collection::vec(arb_value(t), 0..3)
                .prop_map(Value::List)
                .boxed(),
            TypeSchema::Option(t) => proptest::option::of(arb_value(t))
                .prop_map(|v| Value::Option(v.map(Box::new)))
                .boxed(),
            TypeSchema::Tuple(ts) => ts
                .iter()
                .map(arb_value)
                .collect::<Vec<_>>()
                .prop_map(Value::Tuple)
                .boxed(),
            TypeSchema::Struct(ts) => {
                let names: Vec<String> = ts.iter().map(|(n, _)| n.clone()).collect();
                ts.iter()
                    .map(|(_, t)| arb_value(t))
                    .collect::<Vec<_>>()
                    .prop_map(move |vs| Value::Struct(names.iter().cloned().zip(vs).collect()))
                    .boxed()
            }
        }
    }

    proptest! {
        /// Every schema reads back from the text `Display` writes.
        #[test]
        fn type_text_round_trips(schema in arb_schema()) {
            let text = schema.to_string();
            prop_assert_eq!(text.parse::<TypeSchema>(), Ok(schema), "{}", text);
        }
    }

    #[test]
    fn bad_type_text_is_refused_with_its_offset() {
        for (text, offset) in [
            ("strin", 0),
            ("list<i64", 8),
            ("(i64, )", 6),
            ("i64 x", 4),
            ("{: i64}", 1),
        ] {
            let e = text.parse::<TypeSchema>().expect_err(text);
            assert_eq!(e.offset, offset, "{text}: {e}");
        }
        let deep = "list<".repeat(40) + "i64" + &">".repeat(40);
        assert!(deep.parse::<TypeSchema>().is_err());
        assert_eq!(
            " ( i64 ,string ) ".parse::<TypeSchema>(),
            Ok(TypeSchema::Tuple(vec![TypeSchema::I64, TypeSchema::Utf8]))
        );
    }

    proptest! {
        #[test]
        fn encode_decode_round_trip((schema, value) in arb_schema().prop_flat_map(|s| {
            let v = arb_value(&s);
            (Just(s), v)
        })) {
            let bytes = encode_value(&schema, &value).expect("encode");
            prop_assert_eq!(decode_value(&schema, &bytes).expect("decode"), value);
        }

        #[test]
        fn decode_never_panics(schema in arb_schema(), bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode_value(&schema, &bytes);
        }
    }

    #[test]
    fn codec_matches_schema_encoding() {
        assert_eq!(
            decode_value(&i64::schema(), &42i64.to_bytes()).expect("decode"),
            Value::I64(42)
        );
        assert_eq!(String::decode(b"word").expect("decode"), "word");
        assert!(i64::decode(b"short").is_err());
        assert!(String::decode(&[0xff]).is_err());
    }

    /// Regression (issue 10): `list<list<unit>>` whose 3-byte inner lists each claim 2^20
    /// units took 7 GB and 17 s to decode from 301 bytes.
    #[test]
    fn nested_zero_width_counts_are_bounded_by_the_encoded_size() {
        let mut bytes = Vec::new();
        put_varint(&mut bytes, 100);
        for _ in 0..100 {
            put_varint(&mut bytes, 1 << 20);
        }
        assert!(bytes.len() < 310, "{} bytes", bytes.len());
        let s = TypeSchema::List(Box::new(TypeSchema::List(Box::new(TypeSchema::Unit))));
        let t0 = std::time::Instant::now();
        let e = decode_value(&s, &bytes).expect_err("bounded");
        assert!(e.reason.contains("implausible counts"), "{e}");
        assert!(t0.elapsed() < std::time::Duration::from_secs(2));
        // A plausible zero-width list still decodes.
        let mut ok = Vec::new();
        put_varint(&mut ok, 1000);
        let units = TypeSchema::List(Box::new(TypeSchema::Unit));
        assert_eq!(
            decode_value(&units, &ok).expect("decode"),
            Value::List(vec![Value::Unit; 1000])
        );
    }

    #[test]
    fn huge_count_is_rejected_without_allocating() {
        let mut bytes = Vec::new();
        put_varint(&mut bytes, u64::MAX >> 1);
        let s = TypeSchema::List(Box::new(TypeSchema::I64));
        assert!(decode_value(&s, &bytes).is_err());
        let s = TypeSchema::List(Box::new(TypeSchema::Unit));
        assert!(decode_value(&s, &bytes).is_err());
    }
}
