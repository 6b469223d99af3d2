//! Turning stored bytes into text and JSON, and user text into key bytes.

use anyhow::{bail, Result};
use serde_json::{json, Value as Json};
use statekit_core::{decode_value, encode_value, TypeSchema, Value};
use std::fmt::Write as _;

/// Lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Renders bytes as their schema says; bytes that do not decode are shown as hex with the
/// reason (never an error: a dump must show what is there).
pub fn text(schema: &TypeSchema, bytes: &[u8]) -> String {
    match decode_value(schema, bytes) {
        Ok(v) => v.to_string(),
        Err(e) => format!("0x{} (undecodable as {schema}: {})", hex(bytes), e.reason),
    }
}

/// A decoded value as JSON (bytes as `"0x…"` strings, 64-bit integers as numbers).
pub fn value_json(v: &Value) -> Json {
    match v {
        Value::Bytes(b) => json!(format!("0x{}", hex(b))),
        Value::Unit => Json::Null,
        Value::Bool(b) => json!(b),
        Value::I32(x) => json!(x),
        Value::I64(x) => json!(x),
        Value::U64(x) => json!(x),
        Value::F32(x) => json!(x),
        Value::F64(x) => json!(x),
        Value::Str(s) => json!(s),
        Value::List(items) | Value::Tuple(items) => Json::Array(items.iter().map(value_json).collect()),
        Value::Struct(fields) => Json::Object(fields.iter().map(|(k, v)| (k.clone(), value_json(v))).collect()),
        Value::Option(None) => Json::Null,
        Value::Option(Some(v)) => value_json(v),
    }
}

/// Bytes as JSON per their schema, or `{"hex": …, "error": …}` when they do not decode.
pub fn json_of(schema: &TypeSchema, bytes: &[u8]) -> Json {
    match decode_value(schema, bytes) {
        Ok(v) => value_json(&v),
        Err(e) => json!({"hex": hex(bytes), "error": e.to_string()}),
    }
}

/// How `--key` text is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum KeyFormat {
    /// By the key's schema: text for strings, numbers for integers, hex for bytes.
    Auto,
    /// Hexadecimal bytes (optionally `0x`-prefixed).
    Hex,
    /// The UTF-8 bytes of the text.
    Utf8,
}

fn parse_hex(s: &str) -> Result<Vec<u8>> {
    let s = s.strip_prefix("0x").unwrap_or(s);
    if s.len() % 2 != 0 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        bail!("{s:?} is not an even number of hex digits");
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).map_err(Into::into))
        .collect()
}

/// The stored bytes of a key given on the command line.
pub fn parse_key(text: &str, schema: &TypeSchema, format: KeyFormat) -> Result<Vec<u8>> {
    match format {
        KeyFormat::Hex => return parse_hex(text),
        KeyFormat::Utf8 => return Ok(text.as_bytes().to_vec()),
        KeyFormat::Auto => {}
    }
    let v = match schema {
        TypeSchema::Utf8 => Value::Str(text.to_string()),
        TypeSchema::Bytes => return parse_hex(text),
        TypeSchema::I32 => Value::I32(text.parse()?),
        TypeSchema::I64 => Value::I64(text.parse()?),
        TypeSchema::U64 => Value::U64(text.parse()?),
        TypeSchema::Bool => Value::Bool(text.parse()?),
        TypeSchema::F64 => Value::F64(text.parse()?),
        TypeSchema::F32 => Value::F32(text.parse()?),
        TypeSchema::Unit => Value::Unit,
        other => bail!("keys of type {other} cannot be typed as text; use --key-format hex"),
    };
    Ok(encode_value(schema, &v)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        assert_eq!(
            parse_key("word", &TypeSchema::Utf8, KeyFormat::Auto).expect("utf8"),
            b"word"
        );
        assert_eq!(
            parse_key("5", &TypeSchema::I64, KeyFormat::Auto).expect("i64"),
            5i64.to_be_bytes().to_vec()
        );
        assert_eq!(
            parse_key("0x0aff", &TypeSchema::Bytes, KeyFormat::Auto).expect("hex"),
            vec![10, 255]
        );
        assert!(parse_key("zz", &TypeSchema::Bytes, KeyFormat::Auto).is_err());
        assert!(parse_key("x", &TypeSchema::I64, KeyFormat::Auto).is_err());
        assert!(text(&TypeSchema::I64, &[1, 2]).starts_with("0x0102 (undecodable as i64"));
    }
}
