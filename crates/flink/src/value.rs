//! Values in Flink's serializer encodings, decoded without user code and re-encoded in
//! statekit's value encoding (`statekit_core::schema`), by the [`FlinkType`] a serializer
//! snapshot names.
//!
//! A type whose bytes statekit cannot decode (Kryo, Avro, a user's serializer) stays
//! Flink's bytes with schema [`TypeSchema::Bytes`]; so does any composite that holds one,
//! since an opaque part has no length to step over.

use crate::input::Input;
use crate::problem::DecodeProblem;
use crate::serializer::FlinkType;
use statekit_core::limits::{value_budget, VALUE_NODE_BYTES};
use statekit_core::{encode_value, TypeSchema, Value};

/// Nesting bound for decoded values (serializer snapshots are bounded the same way).
pub(crate) const MAX_DEPTH: u32 = 32;

/// Encoded width of a type in Flink's encoding, when fixed.
pub(crate) fn width(t: &FlinkType) -> Option<usize> {
    match t {
        FlinkType::Long | FlinkType::Double => Some(8),
        FlinkType::Int | FlinkType::Float => Some(4),
        FlinkType::Short | FlinkType::Char => Some(2),
        // `VoidSerializer` writes one byte (0) and reads one, like the namespaces.
        FlinkType::Byte | FlinkType::Boolean | FlinkType::Void | FlinkType::VoidNamespace | FlinkType::GlobalWindow => {
            Some(1)
        }
        FlinkType::TimeWindow => Some(16),
        FlinkType::Tuple { fields, .. } => fields.iter().map(width).sum(),
        _ => None,
    }
}

/// The fewest bytes a value of `t` takes in Flink's encoding (0 for an opaque type, whose
/// encoding is unknown, and for the degenerate tuples and legacy rows without fields).
pub(crate) fn min_width(t: &FlinkType) -> usize {
    if let Some(w) = width(t) {
        return w;
    }
    match t {
        // A length or null marker of at least one byte.
        FlinkType::String
        | FlinkType::Pojo { .. }
        | FlinkType::Nullable(_)
        | FlinkType::Option(_)
        | FlinkType::Either(..) => 1,
        // An `i32` count or ordinal.
        FlinkType::ByteArray
        | FlinkType::PrimitiveArray(_)
        | FlinkType::StringArray
        | FlinkType::List(_)
        | FlinkType::Map(..)
        | FlinkType::ObjectArray { .. }
        | FlinkType::Enum { .. } => 4,
        FlinkType::Ttl(v) => 8 + min_width(v),
        FlinkType::Timer(k, n) => 8 + min_width(k) + min_width(n),
        FlinkType::Tuple { fields, .. } => fields.iter().map(min_width).sum(),
        // The mask; every field may be null.
        FlinkType::Row { fields, legacy } => (fields.len() + if *legacy { 0 } else { 2 }).div_ceil(8),
        _ => 0,
    }
}

/// Whether statekit decodes values of `t` (no opaque part anywhere inside).
pub(crate) fn decodable(t: &FlinkType) -> bool {
    match t {
        FlinkType::Opaque { .. } => false,
        FlinkType::PrimitiveArray(e)
        | FlinkType::List(e)
        | FlinkType::Ttl(e)
        | FlinkType::Nullable(e)
        | FlinkType::Option(e)
        | FlinkType::ObjectArray { element: e, .. } => decodable(e),
        FlinkType::Map(k, v) | FlinkType::Timer(k, v) | FlinkType::Either(k, v) => decodable(k) && decodable(v),
        FlinkType::Tuple { fields, .. } | FlinkType::Row { fields, .. } => fields.iter().all(decodable),
        FlinkType::Pojo { fields, .. } => fields.iter().all(|(_, t)| decodable(t)),
        _ => true,
    }
}

/// The statekit schema values of `t` are transcoded to.
pub(crate) fn schema_of(t: &FlinkType) -> TypeSchema {
    if decodable(t) {
        t.schema()
    } else {
        TypeSchema::Bytes
    }
}

/// Reads one value of Flink type `t` from `i` and appends it in statekit's top-level value
/// encoding (the encoding of [`schema_of`]`(t)`). A type statekit does not decode takes the
/// rest of the input as bytes.
pub(crate) fn transcode(t: &FlinkType, i: &mut Input<'_>, out: &mut Vec<u8>) -> Result<(), DecodeProblem> {
    // Top-level scalars straight from bytes to bytes.
    match t {
        FlinkType::String => {
            let s = read_flink_string(i)?.ok_or(DecodeProblem::NullString)?;
            out.extend_from_slice(s.as_bytes());
        }
        FlinkType::Long | FlinkType::Double => out.extend_from_slice(i.take(8, "value")?),
        FlinkType::Int | FlinkType::Float => out.extend_from_slice(i.take(4, "value")?),
        FlinkType::Short => out.extend_from_slice(&i32::from(i.u16("value")? as i16).to_be_bytes()),
        FlinkType::Byte => out.extend_from_slice(&i32::from(i.u8("value")? as i8).to_be_bytes()),
        FlinkType::Boolean => out.push(u8::from(i.bool("value")?)),
        FlinkType::Void => zero_byte(i, "Void")?,
        FlinkType::VoidNamespace | FlinkType::GlobalWindow => zero_byte(i, "namespace")?,
        FlinkType::TimeWindow => out.extend_from_slice(i.take(16, "window")?),
        FlinkType::ByteArray => {
            let n = i.items("length", 1)?;
            out.extend_from_slice(i.take(n, "bytes")?);
        }
        t if !decodable(t) => out.extend_from_slice(i.rest()),
        t => {
            let mut budget = Budget::new(i.remaining());
            let v = read_value(t, i, 0, &mut budget)?;
            let bytes = encode_value(&t.schema(), &v)?;
            out.extend_from_slice(&bytes);
        }
    }
    Ok(())
}

/// [`transcode`] of a part followed by more parts: a type statekit does not decode has no
/// end to find, which is an error saying so (`what` names the part, `why` the layout).
pub(crate) fn transcode_part(
    t: &FlinkType,
    what: &'static str,
    why: &'static str,
    i: &mut Input<'_>,
) -> Result<Vec<u8>, DecodeProblem> {
    if !decodable(t) {
        return Err(DecodeProblem::NoEnd {
            what,
            type_name: t.name(),
            why,
        });
    }
    let mut b = Vec::new();
    transcode(t, i, &mut b)?;
    Ok(b)
}

/// What the value being decoded may still take in memory: `statekit_core`'s bound for
/// decoded values ([`value_budget`] of the bytes it may come from: [`VALUE_NODE_BYTES`] per
/// node plus the bytes of its strings), so counts that claim millions of elements of little
/// or no width in a few bytes are an error, not gigabytes and minutes.
struct Budget {
    left: u64,
    limit: u64,
    encoded: usize,
}

impl Budget {
    /// The budget of a value read from (at most) `encoded` bytes.
    fn new(encoded: usize) -> Self {
        let limit = value_budget(encoded);
        Budget {
            left: limit,
            limit,
            encoded,
        }
    }

    /// Takes `cost`, or says the value is implausibly large.
    fn charge(&mut self, cost: u64) -> Result<(), DecodeProblem> {
        self.check(cost)?;
        self.left -= cost;
        Ok(())
    }

    /// Fails unless `cost` is still available (takes nothing).
    fn check(&self, cost: u64) -> Result<(), DecodeProblem> {
        if cost > self.left {
            return Err(DecodeProblem::TooLarge {
                limit: self.limit,
                encoded: self.encoded,
            });
        }
        Ok(())
    }

    /// A count of `n` elements read at `at`: each a node of the value, so `n` of them must fit.
    fn elements(&self, n: usize, at: usize) -> Result<(), DecodeProblem> {
        self.check((n as u64).saturating_mul(VALUE_NODE_BYTES))
            .map_err(|why| DecodeProblem::Count {
                n,
                at,
                source: Box::new(why),
            })
    }
}

/// A count of elements of at least `min_item` bytes each (at least one), checked against the
/// bytes left and the value's budget.
fn count(i: &mut Input<'_>, field: &str, min_item: usize, budget: &Budget) -> Result<usize, DecodeProblem> {
    let at = i.pos();
    let n = i.items(field, min_item.max(1))?;
    budget.elements(n, at)?;
    Ok(n)
}

/// Decodes one value of a decodable Flink type into a statekit [`Value`] of `t.schema()`,
/// charging what it builds to `budget`.
fn read_value(t: &FlinkType, i: &mut Input<'_>, depth: u32, budget: &mut Budget) -> Result<Value, DecodeProblem> {
    if depth > MAX_DEPTH {
        return Err(DecodeProblem::TooDeep);
    }
    budget.charge(VALUE_NODE_BYTES)?;
    let d = depth + 1;
    Ok(match t {
        FlinkType::String => {
            let s = read_flink_string(i)?.ok_or(DecodeProblem::NullString)?;
            budget.charge(s.len() as u64)?;
            Value::Str(s)
        }
        FlinkType::Long => Value::I64(i.i64("value")?),
        FlinkType::Int => Value::I32(i.i32("value")?),
        FlinkType::Short => Value::I32(i32::from(i.u16("value")? as i16)),
        FlinkType::Byte => Value::I32(i32::from(i.u8("value")? as i8)),
        FlinkType::Boolean => Value::Bool(i.bool("value")?),
        FlinkType::Double => Value::F64(f64::from_bits(i.u64("value")?)),
        FlinkType::Float => Value::F32(f32::from_bits(i.i32("value")? as u32)),
        FlinkType::Char => Value::Str(String::from_utf16_lossy(&[i.u16("value")?])),
        FlinkType::Void => {
            zero_byte(i, "Void")?;
            Value::Unit
        }
        FlinkType::VoidNamespace | FlinkType::GlobalWindow => {
            zero_byte(i, "namespace")?;
            Value::Unit
        }
        FlinkType::TimeWindow => Value::Struct(vec![
            ("start".into(), Value::I64(i.i64("window start")?)),
            ("end".into(), Value::I64(i.i64("window end")?)),
        ]),
        FlinkType::ByteArray => {
            let n = i.items("length", 1)?;
            budget.charge(n as u64)?;
            Value::Bytes(i.take(n, "bytes")?.to_vec())
        }
        FlinkType::PrimitiveArray(el) => {
            let n = count(i, "array length", min_width(el), budget)?;
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                items.push(read_value(el, i, d, budget)?);
            }
            Value::List(items)
        }
        FlinkType::StringArray => {
            let n = count(i, "array length", 1, budget)?;
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                budget.charge(VALUE_NODE_BYTES)?;
                let s = read_flink_string(i)?;
                budget.charge(s.as_ref().map_or(0, |s| s.len() as u64))?;
                items.push(Value::Option(s.map(|s| Box::new(Value::Str(s)))));
            }
            Value::List(items)
        }
        FlinkType::List(el) => {
            let n = count(i, "list size", min_width(el), budget)?;
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                items.push(read_value(el, i, d, budget)?);
            }
            Value::List(items)
        }
        FlinkType::Map(k, v) => {
            // Each entry: the key, a null flag, the value unless null.
            let n = count(i, "map size", min_width(k) + 1, budget)?;
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                budget.charge(2 * VALUE_NODE_BYTES)?;
                let key = read_value(k, i, d, budget)?;
                let null = i.bool("map value null flag")?;
                let value = if null {
                    None
                } else {
                    Some(Box::new(read_value(v, i, d, budget)?))
                };
                items.push(Value::Tuple(vec![key, Value::Option(value)]));
            }
            Value::List(items)
        }
        FlinkType::Ttl(v) => {
            i.i64("TTL timestamp")?;
            read_value(v, i, d, budget)?
        }
        FlinkType::Timer(k, n) => {
            let ts = i.i64("timer timestamp")? ^ i64::MIN;
            Value::Struct(vec![
                ("timestamp".into(), Value::I64(ts)),
                ("key".into(), read_value(k, i, d, budget)?),
                ("namespace".into(), read_value(n, i, d, budget)?),
            ])
        }
        FlinkType::Tuple { fields, .. } => {
            let mut items = Vec::with_capacity(fields.len());
            for f in fields {
                items.push(read_value(f, i, d, budget)?);
            }
            Value::Tuple(items)
        }
        FlinkType::Row { fields, legacy } => {
            // Mask bits, most significant first: the row kind's two bits (unless legacy),
            // then one "is null" bit per field.
            let offset = if *legacy { 0 } else { 2 };
            let bits = offset + fields.len();
            let mask = i.take(bits.div_ceil(8), "row mask")?;
            let null = |b: usize| mask.get(b / 8).is_some_and(|m| m & (0x80 >> (b % 8)) != 0);
            // A null field costs no budget: at most 8 of them per mask byte.
            let mut items = Vec::with_capacity(fields.len());
            for (n, f) in fields.iter().enumerate() {
                items.push(Value::Option(if null(offset + n) {
                    None
                } else {
                    Some(Box::new(read_value(f, i, d, budget)?))
                }));
            }
            Value::Tuple(items)
        }
        FlinkType::Pojo { class, fields } => {
            // Flags: 1 null, 2 the exact class (fields follow), 4/8 a subclass.
            let flags = i.u8("POJO flags")?;
            if flags & 1 != 0 {
                return Ok(Value::Option(None));
            }
            if flags & 2 == 0 {
                return Err(DecodeProblem::PojoSubclass {
                    class: class.clone(),
                    flags,
                });
            }
            let mut items = Vec::with_capacity(fields.len());
            for (name, f) in fields {
                budget.charge(VALUE_NODE_BYTES)?;
                let null = i.bool("POJO field null flag")?;
                let v = if null {
                    None
                } else {
                    Some(Box::new(read_value(f, i, d, budget)?))
                };
                items.push((name.clone(), Value::Option(v)));
            }
            Value::Option(Some(Box::new(Value::Struct(items))))
        }
        FlinkType::Enum { class, constants } => {
            let at = i.pos();
            let ordinal = i.i32("enum ordinal")?;
            let name = usize::try_from(ordinal)
                .ok()
                .and_then(|o| constants.get(o))
                .ok_or_else(|| DecodeProblem::EnumOrdinal {
                    class: class.clone(),
                    ordinal,
                    at,
                    constants: constants.len(),
                })?;
            budget.charge(name.len() as u64)?;
            Value::Str(name.clone())
        }
        FlinkType::Nullable(v) => {
            let null = i.bool("null flag")?;
            Value::Option(if null {
                None
            } else {
                Some(Box::new(read_value(v, i, d, budget)?))
            })
        }
        FlinkType::Either(l, r) => {
            let left = i.bool("Either side")?;
            budget.charge(2 * VALUE_NODE_BYTES)?;
            let v = Some(Box::new(read_value(if left { l } else { r }, i, d, budget)?));
            if left {
                Value::Struct(vec![
                    ("left".into(), Value::Option(v)),
                    ("right".into(), Value::Option(None)),
                ])
            } else {
                Value::Struct(vec![
                    ("left".into(), Value::Option(None)),
                    ("right".into(), Value::Option(v)),
                ])
            }
        }
        FlinkType::Option(v) => {
            let present = i.bool("Option flag")?;
            Value::Option(if present {
                Some(Box::new(read_value(v, i, d, budget)?))
            } else {
                None
            })
        }
        FlinkType::ObjectArray { element, .. } => {
            // Each element: a presence flag, then the element when present.
            let n = count(i, "array length", 1, budget)?;
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                budget.charge(VALUE_NODE_BYTES)?;
                let present = i.bool("element flag")?;
                items.push(Value::Option(if present {
                    Some(Box::new(read_value(element, i, d, budget)?))
                } else {
                    None
                }));
            }
            Value::List(items)
        }
        FlinkType::Opaque { class } => return Err(DecodeProblem::Opaque { class: class.clone() }),
    })
}

/// The one byte of `Void`, `VoidNamespace` and `GlobalWindow` (`what`), which Flink always
/// writes as 0.
fn zero_byte(i: &mut Input<'_>, what: &'static str) -> Result<(), DecodeProblem> {
    match i.u8(what)? {
        0 => Ok(()),
        byte => Err(DecodeProblem::NonZero { what, byte }),
    }
}

/// Flink's `StringValue` encoding: (UTF-16 length + 1) as a 7-bit varint (0 = null), then
/// each UTF-16 unit as such a varint.
pub(crate) fn read_flink_string(i: &mut Input<'_>) -> Result<Option<String>, DecodeProblem> {
    let len = read_varint(i)?;
    if len == 0 {
        return Ok(None);
    }
    let n = usize::try_from(len - 1).map_err(|_| DecodeProblem::StringLength)?;
    if n > i.remaining() {
        return Err(DecodeProblem::StringTooLong {
            chars: n,
            bytes: i.remaining(),
        });
    }
    let mut units = Vec::with_capacity(n);
    for _ in 0..n {
        let u = read_varint(i)?;
        units.push(u16::try_from(u).map_err(|_| DecodeProblem::NotUtf16 { unit: u })?);
    }
    String::from_utf16(&units)
        .map(Some)
        .map_err(|_| DecodeProblem::UnpairedSurrogate)
}

fn read_varint(i: &mut Input<'_>) -> Result<u32, DecodeProblem> {
    let mut v: u32 = 0;
    for shift in [0, 7, 14, 21, 28] {
        let b = i.u8("string")?;
        v |= u32::from(b & 0x7F) << shift;
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(DecodeProblem::VarintTooLong)
}

#[cfg(test)]
mod tests {
    use super::*;
    use statekit_core::decode_value;

    fn flink_str(s: &str) -> Vec<u8> {
        let units: Vec<u16> = s.encode_utf16().collect();
        let mut out = Vec::new();
        let put = |mut v: u32, out: &mut Vec<u8>| {
            while v >= 0x80 {
                out.push((v as u8) | 0x80);
                v >>= 7;
            }
            out.push(v as u8);
        };
        put(units.len() as u32 + 1, &mut out);
        for u in units {
            put(u32::from(u), &mut out);
        }
        out
    }

    fn round(t: &FlinkType, bytes: &[u8]) -> Value {
        let mut i = Input::new(bytes, "test");
        let mut out = Vec::new();
        transcode(t, &mut i, &mut out).expect("transcode");
        assert_eq!(i.remaining(), 0);
        decode_value(&schema_of(t), &out).expect("decode")
    }

    #[test]
    fn tuple_of_string_and_long() {
        let t = FlinkType::Tuple {
            class: "org.apache.flink.api.java.tuple.Tuple2".into(),
            fields: vec![FlinkType::String, FlinkType::Long],
        };
        let mut b = flink_str("grüße");
        b.extend_from_slice(&7i64.to_be_bytes());
        assert_eq!(
            round(&t, &b),
            Value::Tuple(vec![Value::Str("grüße".into()), Value::I64(7)])
        );
    }

    #[test]
    fn row_with_a_null_field() {
        let t = FlinkType::Row {
            fields: vec![FlinkType::String, FlinkType::Int, FlinkType::Long],
            legacy: false,
        };
        // Row kind INSERT (00), fields: not null, null, not null.
        let mut b = vec![0b0001_0000];
        b.extend(flink_str("x"));
        b.extend_from_slice(&9i64.to_be_bytes());
        let some = |v| Value::Option(Some(Box::new(v)));
        assert_eq!(
            round(&t, &b),
            Value::Tuple(vec![
                some(Value::Str("x".into())),
                Value::Option(None),
                some(Value::I64(9))
            ])
        );
    }

    #[test]
    fn map_and_enum_and_either() {
        let t = FlinkType::Map(Box::new(FlinkType::String), Box::new(FlinkType::Int));
        let mut b = 2i32.to_be_bytes().to_vec();
        b.extend(flink_str("a"));
        b.push(0);
        b.extend_from_slice(&1i32.to_be_bytes());
        b.extend(flink_str("b"));
        b.push(1);
        let v = round(&t, &b);
        assert_eq!(v.to_string(), "[(\"a\", 1), (\"b\", null)]");
        let t = FlinkType::Enum {
            class: "E".into(),
            constants: vec!["RED".into(), "GREEN".into()],
        };
        assert_eq!(round(&t, &1i32.to_be_bytes()), Value::Str("GREEN".into()));
        let mut i = Input::new(&[0, 0, 0, 5], "t");
        assert!(transcode(&t, &mut i, &mut Vec::new())
            .expect_err("bad ordinal")
            .contains("ordinal 5"));
        let t = FlinkType::Either(Box::new(FlinkType::String), Box::new(FlinkType::Long));
        let mut b = vec![0];
        b.extend_from_slice(&3i64.to_be_bytes());
        assert_eq!(round(&t, &b).to_string(), "{left: null, right: 3}");
    }

    #[test]
    fn pojo_fields_by_name_and_opaque_parts() {
        let t = FlinkType::Pojo {
            class: "P".into(),
            fields: vec![("count".into(), FlinkType::Int), ("name".into(), FlinkType::String)],
        };
        let mut b = vec![2, 0];
        b.extend_from_slice(&4i32.to_be_bytes());
        b.push(1);
        assert_eq!(round(&t, &b).to_string(), "{count: 4, name: null}");
        let t = FlinkType::Tuple {
            class: "T".into(),
            fields: vec![FlinkType::Long, FlinkType::Opaque { class: "Kryo".into() }],
        };
        assert_eq!(schema_of(&t), TypeSchema::Bytes);
        assert_eq!(round(&t, &[1, 2, 3]), Value::Bytes(vec![1, 2, 3]));
    }

    /// Issue 40 point 7: `VoidSerializer` writes one byte (0) per value and reads one; it
    /// was read as none, so the bytes after a `Void` were misread.
    #[test]
    fn void_is_one_zero_byte_as_flink_writes_it() {
        assert_eq!(width(&FlinkType::Void), Some(1));
        let t = FlinkType::List(Box::new(FlinkType::Void));
        let mut b = 3i32.to_be_bytes().to_vec();
        b.extend([0, 0, 0]);
        assert_eq!(round(&t, &b), Value::List(vec![Value::Unit; 3]));
        let t = FlinkType::Tuple {
            class: "org.apache.flink.api.java.tuple.Tuple2".into(),
            fields: vec![FlinkType::Void, FlinkType::Long],
        };
        let mut b = vec![0];
        b.extend_from_slice(&7i64.to_be_bytes());
        assert_eq!(round(&t, &b), Value::Tuple(vec![Value::Unit, Value::I64(7)]));
        // A top-level Void takes its byte too; one Flink never writes is an error.
        let mut i = Input::new(&[0], "t");
        transcode(&FlinkType::Void, &mut i, &mut Vec::new()).expect("void");
        assert_eq!(i.remaining(), 0);
        let mut i = Input::new(&[0, 0, 0, 1, 7], "t");
        let e = transcode(&FlinkType::List(Box::new(FlinkType::Void)), &mut i, &mut Vec::new()).expect_err("byte 7");
        assert!(e.contains("a Void byte of 0x07"), "{e}");
    }

    /// `S` bytes of `i32` counts: an outer count, then inner lists each claiming every byte
    /// after its count.
    fn nested_counts(s: usize) -> Vec<u8> {
        let mut b = (((s - 4) / 4) as i32).to_be_bytes().to_vec();
        while b.len() + 4 <= s {
            let left = s - b.len() - 4;
            b.extend((left as i32).to_be_bytes());
        }
        b
    }

    /// Issue 40 point 7: a `List<List<Void>>` of S bytes decoded to ~S²/8 elements while
    /// `Void` took no bytes (a 33 KB value aborted at 4 GB). Now each element takes its byte.
    #[test]
    fn nested_lists_of_void_cannot_outgrow_their_bytes() {
        let t = FlinkType::List(Box::new(FlinkType::List(Box::new(FlinkType::Void))));
        let b = nested_counts(8192);
        let started = std::time::Instant::now();
        let mut i = Input::new(&b, "t");
        let e = transcode(&t, &mut i, &mut Vec::new()).expect_err("inner lists claim bytes that are not zeros");
        assert!(e.contains("Void byte"), "{e}");
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }

    /// Defence in depth: elements that really take no bytes (a tuple or legacy row without
    /// fields) are bounded by the value's budget (`statekit_core::limits::value_budget`).
    #[test]
    fn zero_width_elements_are_bounded_by_the_value_budget() {
        for zero in [
            FlinkType::Tuple {
                class: "T0".into(),
                fields: vec![],
            },
            FlinkType::Row {
                fields: vec![],
                legacy: true,
            },
        ] {
            assert_eq!(min_width(&zero), 0);
            let t = FlinkType::List(Box::new(FlinkType::List(Box::new(zero))));
            let b = nested_counts(8192);
            let started = std::time::Instant::now();
            let mut i = Input::new(&b, "t");
            let e = transcode(&t, &mut i, &mut Vec::new()).expect_err("implausible");
            assert!(e.contains("implausible counts"), "{e}");
            assert!(started.elapsed() < std::time::Duration::from_secs(5));
        }
        // Plausible values of many small elements still read.
        let t = FlinkType::List(Box::new(FlinkType::Boolean));
        let mut b = 100_000i32.to_be_bytes().to_vec();
        b.extend(std::iter::repeat_n(1u8, 100_000));
        assert_eq!(round(&t, &b), Value::List(vec![Value::Bool(true); 100_000]));
        let t = FlinkType::List(Box::new(FlinkType::Row {
            fields: vec![FlinkType::Void; 8],
            legacy: true,
        }));
        let mut b = 20_000i32.to_be_bytes().to_vec();
        b.extend(std::iter::repeat_n(0xFFu8, 20_000));
        let nulls = Value::Tuple(vec![Value::Option(None); 8]);
        assert_eq!(round(&t, &b), Value::List(vec![nulls; 20_000]));
    }

    #[test]
    fn truncated_values_are_errors() {
        let t = FlinkType::List(Box::new(FlinkType::Long));
        let mut b = 3i32.to_be_bytes().to_vec();
        b.extend_from_slice(&1i64.to_be_bytes());
        let mut i = Input::new(&b, "t");
        assert!(transcode(&t, &mut i, &mut Vec::new()).is_err());
    }
}
