//! Turning stored bytes into text, and user text into key bytes: the one place where `dump`,
//! `diff`, `show` and the inspector (`tui`) render typed values, entries and operator-state
//! elements as text, so that a value reads the same everywhere. Their JSON is the library's
//! (`statekit_core::json`: [`Decoded`] and the `Serialize` of `Value`); the few JSON helpers
//! left here are thin wrappers over it for the commands that still build `serde_json` values.

use anyhow::{bail, Result};
use serde_json::{json, Value as Json};
use statekit_core::json::Decoded;
use statekit_core::{decode_value, encode_value, StateDescriptor, TypeSchema, Value};
use statekit_snapshot::diff::Item;

/// `n` and the noun, in English: `1 entry`, `2 entries`, `1 key group`, `0 files`.
pub fn count(n: impl Into<u64>, singular: &str) -> String {
    let n = n.into();
    format!("{n} {}", noun(n, singular))
}

/// The noun for `n` of them: `entry` for 1, `entries` otherwise (regular English plurals:
/// consonant + y → ies; s, x, ch, sh → es; else s).
pub fn noun(n: u64, singular: &str) -> String {
    if n == 1 {
        return singular.to_string();
    }
    let consonant_y = singular.ends_with('y')
        && singular
            .chars()
            .rev()
            .nth(1)
            .is_some_and(|c| !matches!(c, 'a' | 'e' | 'i' | 'o' | 'u'));
    if consonant_y {
        format!("{}ies", &singular[..singular.len() - 1])
    } else if ["s", "x", "ch", "sh"].iter().any(|e| singular.ends_with(e)) {
        format!("{singular}es")
    } else {
        format!("{singular}s")
    }
}

/// A key-group range in JSON: `[first, last]` (numbers, both included), `[]` when empty
/// ([`statekit_core::json::key_group_range`]).
pub fn key_groups_json(r: statekit_core::KeyGroupRange) -> Json {
    statekit_core::json::key_group_range(&r, serde_json::value::Serializer).unwrap_or(Json::Null)
}

/// Lower-case hex.
pub use statekit_core::json::hex;

/// Renders bytes as their schema says; bytes that do not decode are shown as hex with the
/// reason (never an error: a dump must show what is there).
pub fn text(schema: &TypeSchema, bytes: &[u8]) -> String {
    match decode_value(schema, bytes) {
        Ok(v) => v.to_string(),
        Err(e) => format!("0x{} (undecodable as {schema}: {})", hex(bytes), e.reason),
    }
}

/// Bytes typed by `schema` (as `dump` prints them, see [`text`]), or as `0x…` hex.
pub fn cell(schema: &TypeSchema, bytes: &[u8], hex: bool) -> String {
    if hex {
        format!("0x{}", self::hex(bytes))
    } else {
        text(schema, bytes)
    }
}

/// A value with its TTL timestamp: `5 ttl_ts=1700000000000` ([`cell`] for the value).
pub fn item_text(schema: &TypeSchema, it: &Item, hex: bool) -> String {
    let v = cell(schema, &it.bytes, hex);
    match it.timestamp {
        Some(t) => format!("{v} ttl_ts={t}"),
        None => v,
    }
}

/// A list state's elements: `[1, 2, 3]` ([`item_text`] for each).
pub fn list_text(schema: &TypeSchema, items: &[Item], hex: bool) -> String {
    let inner: Vec<String> = items.iter().map(|i| item_text(schema, i, hex)).collect();
    format!("[{}]", inner.join(", "))
}

/// The stored parts of one keyed-state entry, as [`entry_line`] renders them.
#[derive(Clone, Copy, Debug)]
pub struct EntryParts<'a> {
    /// Key bytes.
    pub key: &'a [u8],
    /// Namespace bytes.
    pub namespace: &'a [u8],
    /// Map user key bytes.
    pub user_key: Option<&'a [u8]>,
    /// Index of a list element in its list.
    pub element: Option<u64>,
    /// Value, element or map value bytes.
    pub value: &'a [u8],
}

/// An entry as one line, as the inspector shows and filters it:
/// `key=… [ns=…] [user_key=…] [element[i]] value=…` (the namespace only when the state has
/// one).
pub fn entry_line(desc: &StateDescriptor, e: EntryParts<'_>, hex: bool) -> String {
    let mut s = format!("key={}", cell(&desc.key_schema, e.key, hex));
    if desc.namespace_schema != TypeSchema::Unit {
        s.push_str(&format!(" ns={}", cell(&desc.namespace_schema, e.namespace, hex)));
    }
    if let Some(uk) = e.user_key {
        let schema = desc.user_key_schema.clone().unwrap_or(TypeSchema::Bytes);
        s.push_str(&format!(" user_key={}", cell(&schema, uk, hex)));
    }
    if let Some(i) = e.element {
        s.push_str(&format!(" element[{i}]"));
    }
    s.push_str(&format!(" value={}", cell(&desc.value_schema, e.value, hex)));
    s
}

/// Element `index` of a list (or union) operator state of `subtask` as one line:
/// `subtask=0 element[3]=…` (what `dump` prints, and what the inspector shows and filters).
pub fn op_element_line(subtask: u32, index: usize, schema: &TypeSchema, bytes: &[u8]) -> String {
    format!("subtask={subtask} element[{index}]={}", text(schema, bytes))
}

/// [`op_element_line`] as JSON (`dump --json`).
pub fn op_element_json(subtask: u32, index: usize, schema: &TypeSchema, bytes: &[u8]) -> Json {
    json!({"subtask": subtask, "index": index, "value": json_of(schema, bytes)})
}

/// An entry of a broadcast operator state of `subtask` as one line: `subtask=0 key=… value=…`.
pub fn op_entry_line(subtask: u32, ks: &TypeSchema, key: &[u8], vs: &TypeSchema, value: &[u8]) -> String {
    format!("subtask={subtask} key={} value={}", text(ks, key), text(vs, value))
}

/// [`op_entry_line`] as JSON (`dump --json`).
pub fn op_entry_json(subtask: u32, ks: &TypeSchema, key: &[u8], vs: &TypeSchema, value: &[u8]) -> Json {
    json!({"subtask": subtask, "key": json_of(ks, key), "value": json_of(vs, value)})
}

/// Bytes as JSON per their schema, or `{"error": …, "hex": …}` when they do not decode: the
/// library's [`Decoded`] as a `serde_json` value.
pub fn json_of(schema: &TypeSchema, bytes: &[u8]) -> Json {
    serde_json::to_value(Decoded::of(schema, bytes)).unwrap_or(Json::Null)
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
    if !s.len().is_multiple_of(2) || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
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

/// A state's TTL as ` ttl 60000ms`; a TTL whose duration the snapshot does not store (an
/// Apache Flink state's: the duration lives in the job) as ` ttl (duration not stored)`.
pub fn ttl_text(ttl_ms: Option<u64>) -> String {
    match ttl_ms {
        None => String::new(),
        Some(statekit_core::TtlConfig::DURATION_NOT_STORED) => " ttl (duration not stored)".to_string(),
        Some(ms) => format!(" ttl {ms}ms"),
    }
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

#[cfg(test)]
mod english {
    use super::{count, noun};

    #[test]
    fn plurals() {
        assert_eq!(count(1u64, "entry"), "1 entry");
        assert_eq!(count(2u64, "entry"), "2 entries");
        assert_eq!(count(0u64, "file"), "0 files");
        assert_eq!(count(1u64, "key group"), "1 key group");
        assert_eq!(count(3u64, "key group"), "3 key groups");
        assert_eq!(noun(2, "day"), "days");
        assert_eq!(noun(2, "match"), "matches");
        assert_eq!(noun(2, "word"), "words");
    }
}
