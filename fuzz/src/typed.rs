//! Typed decoding of stored bytes by their schema, as `statekit dump` / `inspect` render
//! them, and the schema builder of the `decode_value` target.

use statekit_core::limits::{value_budget, VALUE_NODE_BYTES};
use statekit_core::schema::MAX_SCHEMA_DEPTH;
use statekit_core::{decode_value, encode_value, TypeSchema, Value};

/// Decodes `bytes` by `schema` the way the tools render state (never an error: a dump shows
/// what does not decode as hex), and checks the value codec on what decodes:
///
/// * decoding never panics, and both the value and the error render;
/// * a decoded value stays within the decoder's documented bound,
///   `statekit_core::limits::value_budget(input length)` counted as [`cost`] counts it (no
///   blow-up of memory or time from a few bytes of counts);
/// * a decoded value encodes with its schema; the encoding is the input itself, except that
///   an overlong LEB128 length or count in the input is written canonically, which can only
///   make it shorter;
/// * a shorter encoding decodes to a value that encodes the same (compared as bytes: a NaN
///   float is not equal to itself), or is refused only by the decoder's size budget, which
///   is smaller for fewer bytes.
pub fn check_value(schema: &TypeSchema, bytes: &[u8]) -> Option<Value> {
    let v = match decode_value(schema, bytes) {
        Ok(v) => v,
        Err(e) => {
            std::hint::black_box(e.to_string());
            return None;
        }
    };
    let cost = cost(&v);
    let budget = value_budget(bytes.len());
    assert!(
        cost <= budget,
        "a {schema} of {} bytes decoded to a value costing {cost} > its budget {budget}",
        bytes.len()
    );
    std::hint::black_box(v.to_string());
    let again = encode_value(schema, &v).expect("a decoded value encodes with its schema");
    assert!(
        again == bytes || again.len() < bytes.len(),
        "re-encoding a decoded {schema} changed it: {} bytes in, {} out",
        bytes.len(),
        again.len()
    );
    if again == bytes {
        // The input was canonical: decoding it again is what was just done.
        return Some(v);
    }
    // Shorter: the decoder's size budget scales with the encoded length (`limits::value_budget`),
    // so a value near the budget of the padded input may exceed that of its canonical form.
    let back = match decode_value(schema, &again) {
        Ok(back) => back,
        Err(e) => {
            assert!(
                e.reason.contains("implausible"),
                "a re-encoded {schema} does not decode: {e}"
            );
            return Some(v);
        }
    };
    let third = encode_value(schema, &back).expect("encodes");
    assert_eq!(third, again, "{schema}: encode(decode(encode(v))) != encode(v)");
    Some(v)
}

/// What a decoded value counts against the decoder's budget: [`VALUE_NODE_BYTES`] per node
/// plus the bytes of its strings and byte strings.
pub fn cost(v: &Value) -> u64 {
    VALUE_NODE_BYTES
        + match v {
            Value::Bytes(b) => b.len() as u64,
            Value::Str(s) => s.len() as u64,
            Value::List(items) | Value::Tuple(items) => items.iter().map(cost).sum(),
            Value::Struct(fields) => fields.iter().map(|(_, v)| cost(v)).sum(),
            Value::Option(Some(v)) => cost(v),
            _ => 0,
        }
}

/// Schema tags, the same numbers as the schema encoding of `docs/format.md`.
const TAGS: u8 = 13;
/// Deepest schema [`schema_from`] builds: beyond [`MAX_SCHEMA_DEPTH`], so the decoder's
/// depth guard is exercised, but bounded so building and dropping stay cheap.
pub const MAX_BUILT_DEPTH: usize = MAX_SCHEMA_DEPTH + 8;

/// Builds a schema from the bytes at `*pos` (advancing it): one byte per node, whose low
/// nibble modulo 13 is the tag (`0` bytes, `1` unit, `2` bool, `3` i32, `4` i64, `5` u64,
/// `6` f32, `7` f64, `8` string, `9` list, `10` tuple, `11` struct, `12` option) and whose
/// high nibble is the number of fields of a tuple or struct (fields `f0`, `f1`, …). Once the
/// bytes run out every further node is `unit`.
pub fn schema_from(data: &[u8], pos: &mut usize, depth: usize) -> TypeSchema {
    let Some(&b) = data.get(*pos) else {
        return TypeSchema::Unit;
    };
    *pos += 1;
    let mut tag = (b & 0x0F) % TAGS;
    if depth >= MAX_BUILT_DEPTH && tag >= 9 {
        tag = 1;
    }
    let n = usize::from(b >> 4);
    match tag {
        0 => TypeSchema::Bytes,
        1 => TypeSchema::Unit,
        2 => TypeSchema::Bool,
        3 => TypeSchema::I32,
        4 => TypeSchema::I64,
        5 => TypeSchema::U64,
        6 => TypeSchema::F32,
        7 => TypeSchema::F64,
        8 => TypeSchema::Utf8,
        9 => TypeSchema::List(Box::new(schema_from(data, pos, depth + 1))),
        10 => TypeSchema::Tuple((0..n).map(|_| schema_from(data, pos, depth + 1)).collect()),
        11 => TypeSchema::Struct(
            (0..n)
                .map(|i| (format!("f{i}"), schema_from(data, pos, depth + 1)))
                .collect(),
        ),
        _ => TypeSchema::Option(Box::new(schema_from(data, pos, depth + 1))),
    }
}

/// The bytes [`schema_from`] reads back as `schema` (for seeds). Tuples and structs of more
/// than 15 fields, and struct field names other than `f0`, `f1`, … cannot be expressed.
pub fn schema_bytes(schema: &TypeSchema, out: &mut Vec<u8>) {
    match schema {
        TypeSchema::Bytes => out.push(0),
        TypeSchema::Unit => out.push(1),
        TypeSchema::Bool => out.push(2),
        TypeSchema::I32 => out.push(3),
        TypeSchema::I64 => out.push(4),
        TypeSchema::U64 => out.push(5),
        TypeSchema::F32 => out.push(6),
        TypeSchema::F64 => out.push(7),
        TypeSchema::Utf8 => out.push(8),
        TypeSchema::List(t) => {
            out.push(9);
            schema_bytes(t, out);
        }
        TypeSchema::Tuple(ts) => {
            out.push(10 | ((ts.len().min(15) as u8) << 4));
            for t in ts.iter().take(15) {
                schema_bytes(t, out);
            }
        }
        TypeSchema::Struct(fs) => {
            out.push(11 | ((fs.len().min(15) as u8) << 4));
            for (_, t) in fs.iter().take(15) {
                schema_bytes(t, out);
            }
        }
        TypeSchema::Option(t) => {
            out.push(12);
            schema_bytes(t, out);
        }
    }
}
