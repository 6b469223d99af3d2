//! Values as JSON: the one serialisation of decoded state values that every report of the
//! tools shares (`dump --json`, `diff --json`, the changelog's records, `verify`'s problems
//! name their bytes the same way), so that a value reads the same in every document.
//!
//! Why here: [`Value`] and [`TypeSchema`] live in this crate, and a value's JSON shape is a
//! property of the value model (bytes as `"0x…"`, an `f32` as its shortest decimal, a struct
//! as an object), not of one tool. The crate depends on `serde` (the data model only, no
//! format), so [`Value`] and [`Decoded`] implement [`serde::Serialize`]; the report types of
//! `statekit-snapshot` (`DiffReport`, `VerifyReport`) hold them, and a caller picks the format
//! (`serde_json` in the tools).
//!
//! The shapes, as `statekit` has always printed them:
//!
//! | value | JSON |
//! |---|---|
//! | bytes | `"0x0aff"` (lower-case hex) |
//! | unit, `option` none | `null` |
//! | bool, i32, i64, u64 | `true`, `-5`, `18446744073709551615` |
//! | f32 | the shortest decimal that reads back as the `f32` (`0.1`, not `0.10000000149011612`) |
//! | f64 | the shortest decimal that reads back as the `f64`; NaN and infinities `null` |
//! | string | `"text"` |
//! | list, tuple | an array |
//! | struct | an object, its fields in name order (a name given twice: its last value) |
//! | `option` some | the value |
//!
//! Bytes that do not decode by their schema ([`Decoded::Undecodable`]) are
//! `{"error": "<why>", "hex": "<bytes>"}`: a report shows what is there, never fails on it.

use crate::keygroup::KeyGroupRange;
use crate::schema::{decode_value, TypeSchema, Value};
use serde::ser::{SerializeMap, SerializeSeq, Serializer};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;

impl Serialize for Value {
    /// The JSON shapes of the [module documentation](self).
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Value::Bytes(b) => s.serialize_str(&format!("0x{}", hex(b))),
            Value::Unit | Value::Option(None) => s.serialize_unit(),
            Value::Bool(b) => s.serialize_bool(*b),
            Value::I32(x) => s.serialize_i32(*x),
            Value::I64(x) => s.serialize_i64(*x),
            Value::U64(x) => s.serialize_u64(*x),
            // The shortest decimal that reads back as this f32 (not its f64 widening); `{:e}`
            // of NaN and the infinities parses back to them (JSON writes them as null).
            Value::F32(x) => s.serialize_f64(format!("{x:e}").parse::<f64>().unwrap_or(f64::NAN)),
            Value::F64(x) => s.serialize_f64(*x),
            Value::Str(t) => s.serialize_str(t),
            Value::List(items) | Value::Tuple(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for v in items {
                    seq.serialize_element(v)?;
                }
                seq.end()
            }
            Value::Struct(fields) => {
                // Name order; a repeated name keeps its last value.
                let by_name: BTreeMap<&str, &Value> = fields.iter().map(|(k, v)| (k.as_str(), v)).collect();
                let mut map = s.serialize_map(Some(by_name.len()))?;
                for (k, v) in by_name {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
            Value::Option(Some(v)) => v.serialize(s),
        }
    }
}

/// Stored bytes read by their schema, as reports carry them: the [`Value`], or — when the
/// bytes do not decode — the bytes and why (a report shows what is there instead of failing).
#[derive(Clone, Debug, PartialEq)]
pub enum Decoded {
    /// The bytes decode as this value.
    Value(Value),
    /// The bytes do not decode by the schema.
    Undecodable {
        /// The bytes, lower-case hex without `0x`.
        hex: String,
        /// Why they do not decode ([`crate::schema::ValueDecodeError`]'s message).
        error: String,
    },
}

impl Decoded {
    /// `bytes` decoded by `schema` ([`decode_value`]).
    pub fn of(schema: &TypeSchema, bytes: &[u8]) -> Self {
        match decode_value(schema, bytes) {
            Ok(v) => Decoded::Value(v),
            Err(e) => Decoded::Undecodable {
                hex: hex(bytes),
                error: e.to_string(),
            },
        }
    }
}

impl Serialize for Decoded {
    /// The value's JSON, or `{"error": …, "hex": …}`.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Decoded::Value(v) => v.serialize(s),
            Decoded::Undecodable { hex, error } => {
                let mut map = s.serialize_map(Some(2))?;
                map.serialize_entry("error", error)?;
                map.serialize_entry("hex", hex)?;
                map.end()
            }
        }
    }
}

/// A key-group range as JSON: `[first, last]` (both included), `[]` when empty; for
/// `#[serde(serialize_with = "statekit_core::json::key_group_range")]`.
pub fn key_group_range<S: Serializer>(r: &KeyGroupRange, s: S) -> Result<S::Ok, S::Error> {
    match r.end_inclusive() {
        None => s.serialize_seq(Some(0))?.end(),
        Some(last) => [r.start(), last].serialize(s),
    }
}

/// Lower-case hex of `bytes`, without `0x`.
pub fn hex(bytes: &[u8]) -> String {
    let mut t = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(t, "{b:02x}");
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json<T: Serialize>(v: &T) -> String {
        serde_json::to_string(v).expect("serializes")
    }

    #[test]
    fn value_shapes() {
        let v = Value::Struct(vec![
            ("z".into(), Value::F32(0.1)),
            (
                "a".into(),
                Value::List(vec![Value::Bytes(vec![0x0a, 0xff]), Value::Unit]),
            ),
            ("m".into(), Value::Option(Some(Box::new(Value::U64(u64::MAX))))),
            ("a".into(), Value::Tuple(vec![Value::I64(-5), Value::Str("t".into())])),
            ("n".into(), Value::Option(None)),
            ("f".into(), Value::F64(f64::NAN)),
        ]);
        assert_eq!(
            json(&v),
            r#"{"a":[-5,"t"],"f":null,"m":18446744073709551615,"n":null,"z":0.1}"#
        );
        assert_eq!(json(&Value::Bool(true)), "true");
        assert_eq!(json(&Value::I32(-7)), "-7");
    }

    #[test]
    fn undecodable_bytes_keep_their_hex_and_reason() {
        let d = Decoded::of(&TypeSchema::I64, &[1, 2]);
        let Decoded::Undecodable { hex, error } = &d else {
            panic!("{d:?} decoded");
        };
        assert_eq!(hex, "0102");
        assert!(error.starts_with("cannot decode i64"), "{error}");
        assert_eq!(json(&d), format!(r#"{{"error":"{error}","hex":"0102"}}"#));
        assert_eq!(
            Decoded::of(&TypeSchema::I64, &5i64.to_be_bytes()),
            Decoded::Value(Value::I64(5))
        );
    }

    #[test]
    fn key_group_ranges() {
        #[derive(Serialize)]
        struct R(#[serde(serialize_with = "key_group_range")] KeyGroupRange);
        assert_eq!(json(&R(KeyGroupRange::new(4, 7))), "[4,7]");
        assert_eq!(json(&R(KeyGroupRange::new(3, 3))), "[3,3]");
        assert_eq!(json(&R(KeyGroupRange::EMPTY)), "[]");
    }
}
