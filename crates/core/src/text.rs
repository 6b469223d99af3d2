//! Stored bytes as text, and text as key bytes: the one rendering of typed values, entries
//! and operator-state elements that every tool shows (`statekit dump`, `diff`, `show` and the
//! inspector), so that a value reads the same everywhere. The JSON of a value is
//! [`crate::json`]'s.
//!
//! Also the few words and numbers the tools print around values: counts with their noun
//! ([`count`]), times ([`utc_time`]), an error with its causes ([`error_text`]).

use crate::error::{ErrorKind, HasErrorKind};
use crate::json::hex;
use crate::schema::ValueEncodeError;
use crate::{decode_value, encode_value, StateDescriptor, TypeSchema, Value};

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

/// An entry of a broadcast operator state of `subtask` as one line: `subtask=0 key=… value=…`.
pub fn op_entry_line(subtask: u32, ks: &TypeSchema, key: &[u8], vs: &TypeSchema, value: &[u8]) -> String {
    format!("subtask={subtask} key={} value={}", text(ks, key), text(vs, value))
}

/// How [`parse_key`] reads key text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyFormat {
    /// As the key's schema says: a string's text, an integer's digits, hex for bytes.
    Auto,
    /// Hex digits, with or without `0x`.
    Hex,
    /// The text's UTF-8 bytes, whatever the schema.
    Utf8,
}

/// Why key text is not a key ([`parse_key`]). The messages are those of the parsers.
#[derive(Debug, thiserror::Error)]
pub enum KeyParseError {
    /// Hex text of an odd length or with a non-hex digit.
    #[error("{0:?} is not an even number of hex digits")]
    Hex(String),
    /// A key type that has no text form.
    #[error("keys of type {0} cannot be typed as text; use --key-format hex")]
    NoTextForm(TypeSchema),
    /// Not an integer (of the key's width).
    #[error(transparent)]
    Int(#[from] std::num::ParseIntError),
    /// Not a floating-point number.
    #[error(transparent)]
    Float(#[from] std::num::ParseFloatError),
    /// Not `true` or `false`.
    #[error(transparent)]
    Bool(#[from] std::str::ParseBoolError),
    /// The value does not encode as the key's schema.
    #[error(transparent)]
    Encode(#[from] ValueEncodeError),
}

impl HasErrorKind for KeyParseError {
    fn kind(&self) -> ErrorKind {
        ErrorKind::Caller
    }
}

fn parse_hex(s: &str) -> Result<Vec<u8>, KeyParseError> {
    let s = s.strip_prefix("0x").unwrap_or(s);
    if !s.len().is_multiple_of(2) || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(KeyParseError::Hex(s.to_string()));
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2).unwrap_or_default(), 16).map_err(Into::into))
        .collect()
}

/// The stored bytes of a key given as text (a command's `--key`, the inspector's search).
pub fn parse_key(text: &str, schema: &TypeSchema, format: KeyFormat) -> Result<Vec<u8>, KeyParseError> {
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
        other => return Err(KeyParseError::NoTextForm(other.clone())),
    };
    Ok(encode_value(schema, &v)?)
}

/// `YYYY-MM-DDTHH:MM:SSZ` for milliseconds since the epoch.
pub fn utc_time(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The error and its causes on one line, each said once: many errors include their cause's
/// text in their own message (`path: No such device`) and also return it as their source,
/// which printing the whole chain would say a second time.
pub fn error_text(err: &(dyn std::error::Error + 'static)) -> String {
    let mut out = String::new();
    let mut cur = Some(err);
    while let Some(cause) = cur {
        let text = cause.to_string();
        if !text.is_empty() && !out.contains(&text) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&text);
        }
        cur = cause.source();
    }
    out
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
