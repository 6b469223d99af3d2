//! Flink's serializer snapshots (`TypeSerializerSnapshot`): what type a state's keys,
//! namespaces and values have, read without user code.
//!
//! A snapshot is `utf class name, i32 version, payload` (at the top level preceded by `i32 2`,
//! the snapshot proxy's version). Payloads have no length, so every class met must be
//! understood; an unknown one is an [`FlinkError::Unsupported`] naming the class, except that a
//! composite serializer of an unknown class (payload starting with Flink's composite magic
//! number) is read by its nested snapshots. Layouts: `docs/flink-format.md`.

use crate::error::FlinkError;
use crate::input::Input;
use statekit_core::TypeSchema;

/// The type a Flink serializer reads and writes, as its snapshot tells.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FlinkType {
    /// `String` (`StringSerializer`: UTF-16 units as varints).
    String,
    /// `Long`.
    Long,
    /// `Integer`.
    Int,
    /// `Short`.
    Short,
    /// `Byte`.
    Byte,
    /// `Boolean`.
    Boolean,
    /// `Double`.
    Double,
    /// `Float`.
    Float,
    /// `Character` (UTF-16 unit).
    Char,
    /// `Void` (no bytes).
    Void,
    /// `byte[]` (`i32` length + bytes).
    ByteArray,
    /// A primitive array other than `byte[]` (`i32` length + elements).
    PrimitiveArray(Box<FlinkType>),
    /// `String[]`.
    StringArray,
    /// The namespace of non-windowed state (one zero byte).
    VoidNamespace,
    /// `TimeWindow` (`i64` start, `i64` end).
    TimeWindow,
    /// `GlobalWindow` (one zero byte).
    GlobalWindow,
    /// `List<T>` (`i32` count + elements), or a list state's element type.
    List(Box<FlinkType>),
    /// `Map<K, V>` (`i32` count × key, null flag, value), or a map state's types.
    Map(Box<FlinkType>, Box<FlinkType>),
    /// A TTL wrapper: `i64` last-access timestamp + the value.
    Ttl(Box<FlinkType>),
    /// A timer: timestamp, key, namespace.
    Timer(Box<FlinkType>, Box<FlinkType>),
    /// A Flink tuple (`Tuple2`…): fields in order, no nulls.
    Tuple {
        /// The tuple class.
        class: String,
        /// Field types.
        fields: Vec<FlinkType>,
    },
    /// A `Row`: a mask (the row kind's 2 bits unless `legacy`, then a null bit per field),
    /// then the fields that are not null.
    Row {
        /// Field types.
        fields: Vec<FlinkType>,
        /// Written without the row kind (Flink before 1.11, or outer snapshot version < 3).
        legacy: bool,
    },
    /// A POJO: a flags byte, then per field a null flag and the value.
    Pojo {
        /// The POJO class.
        class: String,
        /// Fields by name, in the snapshot's order.
        fields: Vec<(String, FlinkType)>,
    },
    /// An enum: `i32` ordinal into the constants.
    Enum {
        /// The enum class.
        class: String,
        /// Its constants in ordinal order.
        constants: Vec<String>,
    },
    /// A nullable wrapper (`NullableSerializer`): a null flag, then the value.
    Nullable(Box<FlinkType>),
    /// `Either<L, R>`: a `bool` (left?), then the side.
    Either(Box<FlinkType>, Box<FlinkType>),
    /// Scala `Option`: a `bool` (present?), then the value.
    Option(Box<FlinkType>),
    /// An array of objects (`GenericArraySerializer`): `i32` length, per element a null flag
    /// and the element.
    ObjectArray {
        /// The component class.
        component: String,
        /// The element type.
        element: Box<FlinkType>,
    },
    /// Anything whose bytes statekit cannot decode without user code (Kryo, Avro, a user's
    /// serializer, SQL rows): kept as bytes with the serializer's class.
    Opaque {
        /// The snapshot's class.
        class: String,
    },
}

impl FlinkType {
    /// The statekit schema a value of this type is shown and exported as. Values are
    /// transcoded into statekit's value encoding when read; opaque ones stay bytes.
    pub fn schema(&self) -> TypeSchema {
        match self {
            FlinkType::String | FlinkType::Char => TypeSchema::Utf8,
            FlinkType::Long => TypeSchema::I64,
            FlinkType::Int | FlinkType::Short | FlinkType::Byte => TypeSchema::I32,
            FlinkType::Boolean => TypeSchema::Bool,
            FlinkType::Double => TypeSchema::F64,
            FlinkType::Float => TypeSchema::F32,
            FlinkType::Void | FlinkType::VoidNamespace | FlinkType::GlobalWindow => TypeSchema::Unit,
            FlinkType::ByteArray | FlinkType::Opaque { .. } => TypeSchema::Bytes,
            FlinkType::PrimitiveArray(t) => TypeSchema::List(Box::new(t.schema())),
            FlinkType::StringArray => TypeSchema::List(Box::new(TypeSchema::Option(Box::new(TypeSchema::Utf8)))),
            FlinkType::TimeWindow => {
                TypeSchema::Struct(vec![("start".into(), TypeSchema::I64), ("end".into(), TypeSchema::I64)])
            }
            FlinkType::List(t) => TypeSchema::List(Box::new(t.schema())),
            FlinkType::Map(k, v) => TypeSchema::List(Box::new(TypeSchema::Tuple(vec![
                k.schema(),
                TypeSchema::Option(Box::new(v.schema())),
            ]))),
            FlinkType::Ttl(t) => t.schema(),
            FlinkType::Timer(k, n) => TypeSchema::Struct(vec![
                ("timestamp".into(), TypeSchema::I64),
                ("key".into(), k.schema()),
                ("namespace".into(), n.schema()),
            ]),
            FlinkType::Tuple { fields, .. } => TypeSchema::Tuple(fields.iter().map(FlinkType::schema).collect()),
            FlinkType::Row { fields, .. } => TypeSchema::Tuple(
                fields
                    .iter()
                    .map(|f| TypeSchema::Option(Box::new(f.schema())))
                    .collect(),
            ),
            FlinkType::Pojo { fields, .. } => TypeSchema::Option(Box::new(TypeSchema::Struct(
                fields
                    .iter()
                    .map(|(n, t)| (n.clone(), TypeSchema::Option(Box::new(t.schema()))))
                    .collect(),
            ))),
            FlinkType::Enum { .. } => TypeSchema::Utf8,
            FlinkType::Nullable(t) | FlinkType::Option(t) => TypeSchema::Option(Box::new(t.schema())),
            FlinkType::Either(l, r) => TypeSchema::Struct(vec![
                ("left".into(), TypeSchema::Option(Box::new(l.schema()))),
                ("right".into(), TypeSchema::Option(Box::new(r.schema()))),
            ]),
            FlinkType::ObjectArray { element, .. } => {
                TypeSchema::List(Box::new(TypeSchema::Option(Box::new(element.schema()))))
            }
        }
    }

    /// A short name in Flink's words (`String`, `Long`, `List<String>`, `Tuple2<String, Long>`).
    pub fn name(&self) -> String {
        match self {
            FlinkType::String => "String".into(),
            FlinkType::Long => "Long".into(),
            FlinkType::Int => "Integer".into(),
            FlinkType::Short => "Short".into(),
            FlinkType::Byte => "Byte".into(),
            FlinkType::Boolean => "Boolean".into(),
            FlinkType::Double => "Double".into(),
            FlinkType::Float => "Float".into(),
            FlinkType::Char => "Character".into(),
            FlinkType::Void => "Void".into(),
            FlinkType::ByteArray => "byte[]".into(),
            FlinkType::PrimitiveArray(t) => format!("{}[]", t.name().to_lowercase()),
            FlinkType::StringArray => "String[]".into(),
            FlinkType::VoidNamespace => "VoidNamespace".into(),
            FlinkType::TimeWindow => "TimeWindow".into(),
            FlinkType::GlobalWindow => "GlobalWindow".into(),
            FlinkType::List(t) => format!("List<{}>", t.name()),
            FlinkType::Map(k, v) => format!("Map<{}, {}>", k.name(), v.name()),
            FlinkType::Ttl(t) => format!("Ttl<{}>", t.name()),
            FlinkType::Timer(k, n) => format!("Timer<{}, {}>", k.name(), n.name()),
            FlinkType::Tuple { fields, .. } => format!(
                "Tuple{}<{}>",
                fields.len(),
                fields.iter().map(FlinkType::name).collect::<Vec<_>>().join(", ")
            ),
            FlinkType::Row { fields, .. } => format!(
                "Row<{}>",
                fields.iter().map(FlinkType::name).collect::<Vec<_>>().join(", ")
            ),
            FlinkType::Pojo { class, .. } | FlinkType::Enum { class, .. } => {
                class.rsplit(['.', '$']).next().unwrap_or(class).to_string()
            }
            // The serializer's snapshot class without its package, and the type it names
            // whole (`KryoSerializerSnapshot (java.util.UUID)`).
            FlinkType::Opaque { class } => {
                let (snapshot, rest) = class
                    .split_once(" (")
                    .map_or((class.as_str(), None), |(a, b)| (a, Some(b)));
                let short = snapshot.rsplit(['.', '$']).next().unwrap_or(snapshot);
                rest.map_or_else(|| short.to_string(), |r| format!("{short} ({r}"))
            }
            FlinkType::Nullable(t) => format!("Nullable<{}>", t.name()),
            FlinkType::Either(l, r) => format!("Either<{}, {}>", l.name(), r.name()),
            FlinkType::Option(t) => format!("Option<{}>", t.name()),
            FlinkType::ObjectArray { element, .. } => format!("{}[]", element.name()),
        }
    }
}

/// `CompositeTypeSerializerSnapshot`'s magic number, at the start of a composite's payload.
const COMPOSITE_MAGIC: i32 = 911_108;
/// `NestedSerializersSnapshotDelegate`'s magic number, before the nested snapshots.
const NESTED_MAGIC: i32 = 1_333_245;
/// `LinkedOptionalMapSerializer`'s header.
const LINKED_OPTIONAL_MAP_MAGIC: i64 = 0x04f2_c69a_3d70;
/// Nesting limit for snapshots inside snapshots.
const MAX_DEPTH: u32 = 24;

/// Reads a top-level snapshot: `i32 2`, then a versioned snapshot.
pub(crate) fn read_snapshot(i: &mut Input<'_>, field: &str) -> Result<FlinkType, FlinkError> {
    let at = i.pos();
    let proxy = i.i32(field)?;
    if proxy != 2 {
        return Err(i.unsupported_at(
            at,
            field,
            format!(
                "serializer snapshot proxy version {proxy} (1 = TypeSerializerConfigSnapshot, dropped in Flink 1.17)"
            ),
        ));
    }
    read_versioned(i, field, 0)
}

/// Decodes one top-level serializer snapshot from `bytes` (for tests and fuzzing).
pub fn decode_serializer_snapshot(bytes: &[u8], file: &str) -> Result<FlinkType, FlinkError> {
    let mut i = Input::new(bytes, file);
    read_snapshot(&mut i, "serializer snapshot")
}

/// `utf class, i32 version, payload`.
fn read_versioned(i: &mut Input<'_>, field: &str, depth: u32) -> Result<FlinkType, FlinkError> {
    if depth > MAX_DEPTH {
        return Err(i.corrupt_at(i.pos(), field, "serializer snapshots nested too deeply"));
    }
    let at = i.pos();
    let class = i.utf(field)?;
    let version = i.i32(field)?;
    read_payload(i, field, depth, &class, version, at)
}

fn simple(class: &str) -> Option<FlinkType> {
    let short = class.rsplit('.').next().unwrap_or(class);
    let base = short.split('$').next().unwrap_or(short);
    Some(match base {
        "StringSerializer" | "StringValueSerializer" => FlinkType::String,
        "LongSerializer" | "LongValueSerializer" => FlinkType::Long,
        "IntSerializer" | "IntValueSerializer" => FlinkType::Int,
        "ShortSerializer" | "ShortValueSerializer" => FlinkType::Short,
        "ByteSerializer" | "ByteValueSerializer" => FlinkType::Byte,
        "BooleanSerializer" | "BooleanValueSerializer" => FlinkType::Boolean,
        "DoubleSerializer" | "DoubleValueSerializer" => FlinkType::Double,
        "FloatSerializer" | "FloatValueSerializer" => FlinkType::Float,
        "CharSerializer" | "CharValueSerializer" => FlinkType::Char,
        "VoidSerializer" => FlinkType::Void,
        "BytePrimitiveArraySerializer" => FlinkType::ByteArray,
        "IntPrimitiveArraySerializer" => FlinkType::PrimitiveArray(Box::new(FlinkType::Int)),
        "LongPrimitiveArraySerializer" => FlinkType::PrimitiveArray(Box::new(FlinkType::Long)),
        "ShortPrimitiveArraySerializer" => FlinkType::PrimitiveArray(Box::new(FlinkType::Short)),
        "BooleanPrimitiveArraySerializer" => FlinkType::PrimitiveArray(Box::new(FlinkType::Boolean)),
        "DoublePrimitiveArraySerializer" => FlinkType::PrimitiveArray(Box::new(FlinkType::Double)),
        "FloatPrimitiveArraySerializer" => FlinkType::PrimitiveArray(Box::new(FlinkType::Float)),
        "CharPrimitiveArraySerializer" => FlinkType::PrimitiveArray(Box::new(FlinkType::Char)),
        "StringArraySerializer" => FlinkType::StringArray,
        "VoidNamespaceSerializer" => FlinkType::VoidNamespace,
        "TimeWindow" => FlinkType::TimeWindow,
        "GlobalWindow" => FlinkType::GlobalWindow,
        // Serializers of java.time, SQL and big numbers: decodable later; bytes until then.
        "BigIntSerializer"
        | "BigDecSerializer"
        | "DateSerializer"
        | "SqlDateSerializer"
        | "SqlTimeSerializer"
        | "SqlTimestampSerializer"
        | "InstantSerializer"
        | "LocalDateSerializer"
        | "LocalTimeSerializer"
        | "LocalDateTimeSerializer"
        | "NullValueSerializer" => FlinkType::Opaque {
            class: class.to_string(),
        },
        _ => return None,
    })
}

fn read_payload(
    i: &mut Input<'_>,
    field: &str,
    depth: u32,
    class: &str,
    version: i32,
    at: usize,
) -> Result<FlinkType, FlinkError> {
    if let Some(t) = simple(class) {
        // SimpleTypeSerializerSnapshot: empty payload from version 3; version 2 wrote the
        // serializer's class name.
        if version < 3 {
            i.utf(field)?;
        }
        return Ok(t);
    }
    let short = class.rsplit('.').next().unwrap_or(class);
    match short {
        "PojoSerializerSnapshot" => return read_pojo(i, field, depth),
        "KryoSerializerSnapshot" => {
            let type_class = i.utf(field)?;
            for _ in 0..3 {
                skip_linked_optional_map(i, field)?;
            }
            return Ok(FlinkType::Opaque {
                class: format!("{class} ({type_class})"),
            });
        }
        "EnumSerializerSnapshot" | "EnumSerializer$EnumSerializerSnapshot" => {
            let enum_class = i.utf(field)?;
            let n = i.items(field, 2)?;
            let mut constants = Vec::with_capacity(n);
            for _ in 0..n {
                constants.push(i.utf(field)?);
            }
            return Ok(FlinkType::Enum {
                class: enum_class,
                constants,
            });
        }
        _ => {}
    }
    // Composite serializers: magic, outer version, outer fields, nested snapshots.
    let payload_at = i.pos();
    let magic = i.i32(field)?;
    if magic != COMPOSITE_MAGIC {
        return Err(i.unsupported_at(
            at,
            field,
            format!(
                "serializer snapshot {class} (version {version}): its payload (at offset {payload_at}) has no length, so it cannot be skipped; this serializer is not read yet"
            ),
        ));
    }
    let outer_version = i.i32(field)?;
    let mut row_legacy = true;
    let outer: Option<String> = match short {
        "TupleSerializerSnapshot"
        | "GenericArraySerializerSnapshot"
        | "ValueSerializer$ValueSerializerSnapshot"
        | "CopyableValueSerializerSnapshot" => Some(i.utf(field)?),
        "ListSerializerSnapshot"
        | "MapSerializerSnapshot"
        | "ArrayListSerializerSnapshot"
        | "HashMapSerializerSnapshot"
        | "TimerSerializerSnapshot"
        | "JavaEitherSerializerSnapshot"
        | "EitherSerializerSnapshot"
        | "ScalaOptionSerializerSnapshot" => None,
        s if s.starts_with("TtlStateFactory$TtlSerializerSnapshot") => None,
        "RowSerializer$RowSerializerSnapshot" | "RowSerializerSnapshot" => {
            // Outer: whether the row kind is serialized (a boolean), from outer version 3;
            // older rows have none (legacy mode).
            if outer_version >= 3 {
                row_legacy = !i.bool(field)?;
            }
            None
        }
        "NullableSerializer$NullableSerializerSnapshot" | "NullableSerializerSnapshot" => {
            // Outer: the null padding length.
            i.i32(field)?;
            None
        }
        _ => {
            // An unknown composite: its outer fields are unknown, but the nested snapshots
            // start with their own magic number. Find it.
            skip_to_nested(i, field, at, class)?;
            None
        }
    };
    let nested = read_nested(i, field, depth)?;
    let one = |n: &[FlinkType], k: usize| -> FlinkType {
        n.get(k).cloned().unwrap_or(FlinkType::Opaque {
            class: "missing nested serializer".into(),
        })
    };
    let want = |n: usize| -> Result<(), FlinkError> {
        if nested.len() == n {
            Ok(())
        } else {
            Err(i.corrupt_at(
                at,
                field,
                format!("{class}: {} nested serializers, {n} expected", nested.len()),
            ))
        }
    };
    Ok(match short {
        "ListSerializerSnapshot" | "ArrayListSerializerSnapshot" => {
            want(1)?;
            FlinkType::List(Box::new(one(&nested, 0)))
        }
        "MapSerializerSnapshot" | "HashMapSerializerSnapshot" => {
            want(2)?;
            FlinkType::Map(Box::new(one(&nested, 0)), Box::new(one(&nested, 1)))
        }
        "TimerSerializerSnapshot" => {
            want(2)?;
            FlinkType::Timer(Box::new(one(&nested, 0)), Box::new(one(&nested, 1)))
        }
        "JavaEitherSerializerSnapshot" | "EitherSerializerSnapshot" => {
            want(2)?;
            FlinkType::Either(Box::new(one(&nested, 0)), Box::new(one(&nested, 1)))
        }
        "ScalaOptionSerializerSnapshot" => {
            want(1)?;
            FlinkType::Option(Box::new(one(&nested, 0)))
        }
        "NullableSerializer$NullableSerializerSnapshot" | "NullableSerializerSnapshot" => {
            want(1)?;
            FlinkType::Nullable(Box::new(one(&nested, 0)))
        }
        s if s.starts_with("TtlStateFactory$TtlSerializerSnapshot") => {
            want(2)?;
            FlinkType::Ttl(Box::new(one(&nested, 1)))
        }
        "TupleSerializerSnapshot" => FlinkType::Tuple {
            class: outer.unwrap_or_default(),
            fields: nested,
        },
        "RowSerializer$RowSerializerSnapshot" | "RowSerializerSnapshot" => FlinkType::Row {
            fields: nested,
            legacy: row_legacy,
        },
        "GenericArraySerializerSnapshot" => {
            want(1)?;
            FlinkType::ObjectArray {
                component: outer.unwrap_or_default(),
                element: Box::new(one(&nested, 0)),
            }
        }
        _ => FlinkType::Opaque {
            class: class.to_string(),
        },
    })
}

/// The nested snapshots of a composite: magic, version 1, count, versioned snapshots.
fn read_nested(i: &mut Input<'_>, field: &str, depth: u32) -> Result<Vec<FlinkType>, FlinkError> {
    let at = i.pos();
    let magic = i.i32(field)?;
    if magic != NESTED_MAGIC {
        return Err(i.corrupt_at(
            at,
            field,
            format!("nested serializer snapshots: magic {magic}, {NESTED_MAGIC} expected"),
        ));
    }
    let at = i.pos();
    let version = i.i32(field)?;
    if version != 1 {
        return Err(i.unsupported_at(at, field, format!("nested serializer snapshots version {version}")));
    }
    let n = i.items(field, 6)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(read_versioned(i, field, depth + 1)?);
    }
    Ok(out)
}

/// Moves past an unknown composite's outer fields, to its nested snapshots' magic number.
fn skip_to_nested(i: &mut Input<'_>, field: &str, at: usize, class: &str) -> Result<(), FlinkError> {
    let magic = NESTED_MAGIC.to_be_bytes();
    let start = i.pos();
    let found = i
        .peek_rest()
        .windows(8)
        .position(|w| w.get(..4) == Some(&magic[..]) && w.get(4..) == Some(&1i32.to_be_bytes()[..]));
    match found {
        Some(p) => {
            i.take(p, field)?;
            Ok(())
        }
        _ => Err(i.unsupported_at(
            at,
            field,
            format!("composite serializer snapshot {class}: its nested snapshots were not found after offset {start}"),
        )),
    }
}

/// `PojoSerializerSnapshot`: the class, then three linked optional maps (fields, registered
/// subclasses, non-registered subclasses).
fn read_pojo(i: &mut Input<'_>, field: &str, depth: u32) -> Result<FlinkType, FlinkError> {
    let class = i.utf(field)?;
    let at = i.pos();
    let magic = i.i64(field)?;
    if magic != LINKED_OPTIONAL_MAP_MAGIC {
        return Err(i.corrupt_at(at, field, format!("POJO {class}: field map magic {magic:#x}")));
    }
    let n = i.items(field, 3)?;
    let mut fields = Vec::with_capacity(n);
    for _ in 0..n {
        let name = i.utf(field)?;
        if i.bool(field)? {
            let len = i.items(field, 1)?;
            i.take(len, field)?;
        }
        let ty = if i.bool(field)? {
            let len = i.items(field, 1)?;
            let frame = i.take(len, field)?;
            let mut f = Input::new(frame, "");
            read_versioned(&mut f, field, depth + 1)
                .map_err(|e| i.corrupt_at(at, field, format!("POJO {class} field {name}: {e}")))?
        } else {
            FlinkType::Opaque {
                class: format!("{class}.{name} (serializer missing)"),
            }
        };
        fields.push((name, ty));
    }
    skip_linked_optional_map(i, field)?;
    skip_linked_optional_map(i, field)?;
    Ok(FlinkType::Pojo { class, fields })
}

/// Skips a `LinkedOptionalMap` (every key and value is length-framed).
fn skip_linked_optional_map(i: &mut Input<'_>, field: &str) -> Result<(), FlinkError> {
    let at = i.pos();
    let magic = i.i64(field)?;
    if magic != LINKED_OPTIONAL_MAP_MAGIC {
        return Err(i.corrupt_at(at, field, format!("linked optional map magic {magic:#x}")));
    }
    let n = i.items(field, 3)?;
    for _ in 0..n {
        i.utf(field)?;
        for _ in 0..2 {
            if i.bool(field)? {
                let len = i.items(field, 1)?;
                i.take(len, field)?;
            }
        }
    }
    Ok(())
}
