//! From statekit's type schemas to Arrow types and table schemas, and from decoded values to
//! Arrow arrays (column by column, recursively: no dynamic builders to downcast).

use arrow_array::{
    ArrayRef, BinaryArray, BooleanArray, Float32Array, Float64Array, Int32Array, Int64Array, ListArray, NullArray,
    StringArray, StructArray, UInt64Array,
};
use arrow_buffer::{NullBuffer, OffsetBuffer};
use arrow_schema::{ArrowError, DataType, Field, Fields, Schema, TimeUnit};
use statekit_core::schema::Value;
use statekit_core::{KeyedStateKind, StateDescriptor, TypeSchema};
use std::sync::Arc;

/// The Arrow type of values of `schema`, and whether they may be null (`Option`).
///
/// | TypeSchema | Arrow |
/// |---|---|
/// | `Bytes` | `Binary` |
/// | `Unit` | `Null` |
/// | `Bool` | `Boolean` |
/// | `I32`, `I64`, `U64` | `Int32`, `Int64`, `UInt64` |
/// | `F32`, `F64` | `Float32`, `Float64` |
/// | `Utf8` | `Utf8` |
/// | `List(t)` | `List` of `t` (element field `item`) |
/// | `Tuple(t…)` | `Struct` with fields `f0`, `f1`, … |
/// | `Struct((name, t)…)` | `Struct` with those names |
/// | `Option(t)` | `t`, nullable |
pub fn arrow_type(schema: &TypeSchema) -> (DataType, bool) {
    match schema {
        TypeSchema::Bytes => (DataType::Binary, false),
        TypeSchema::Unit => (DataType::Null, true),
        TypeSchema::Bool => (DataType::Boolean, false),
        TypeSchema::I32 => (DataType::Int32, false),
        TypeSchema::I64 => (DataType::Int64, false),
        TypeSchema::U64 => (DataType::UInt64, false),
        TypeSchema::F32 => (DataType::Float32, false),
        TypeSchema::F64 => (DataType::Float64, false),
        TypeSchema::Utf8 => (DataType::Utf8, false),
        TypeSchema::List(t) => (DataType::List(Arc::new(field("item", t))), false),
        TypeSchema::Tuple(items) => (
            DataType::Struct(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, t)| field(&format!("f{i}"), t))
                    .collect::<Fields>(),
            ),
            false,
        ),
        TypeSchema::Struct(items) => (
            DataType::Struct(items.iter().map(|(n, t)| field(n, t)).collect::<Fields>()),
            false,
        ),
        TypeSchema::Option(t) => (arrow_type(t).0, true),
    }
}

/// The field `name` of values of `schema`.
pub(crate) fn field(name: &str, schema: &TypeSchema) -> Field {
    let (t, nullable) = arrow_type(schema);
    Field::new(name, t, nullable)
}

/// Which optional columns a state's table has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Columns {
    /// `namespace` (the namespace type is not `Unit`).
    pub namespace: bool,
    /// `user_key` (map state).
    pub user_key: bool,
    /// `index`: the element's position in its list (list state).
    pub index: bool,
    /// `expires_at` (the state has a TTL).
    pub expires_at: bool,
}

impl Columns {
    /// The columns of `desc`'s table.
    pub fn of(desc: &StateDescriptor) -> Self {
        Columns {
            namespace: desc.namespace_schema != TypeSchema::Unit,
            user_key: desc.kind == KeyedStateKind::Map,
            index: desc.kind == KeyedStateKind::List,
            expires_at: desc.ttl.is_some(),
        }
    }
}

/// The Arrow schema of `desc`'s table: `key_group` (Int32), `key`, `namespace` (when not
/// `Unit`), `user_key` (map state), `index` (Int64, list state), `value`, `expires_at`
/// (timestamp in ms, UTC, when the state has a TTL: last update + TTL). Field metadata names
/// the statekit type of each typed column (`statekit.type`).
pub fn state_schema(desc: &StateDescriptor) -> Schema {
    let c = Columns::of(desc);
    let typed = |name: &str, t: &TypeSchema| {
        field(name, t).with_metadata([("statekit.type".to_string(), t.to_string())].into_iter().collect())
    };
    let mut fields = vec![
        Field::new("key_group", DataType::Int32, false),
        typed("key", &desc.key_schema),
    ];
    if c.namespace {
        fields.push(typed("namespace", &desc.namespace_schema));
    }
    if c.user_key {
        fields.push(typed(
            "user_key",
            desc.user_key_schema.as_ref().unwrap_or(&TypeSchema::Bytes),
        ));
    }
    if c.index {
        fields.push(Field::new("index", DataType::Int64, false));
    }
    fields.push(typed("value", &desc.value_schema));
    if c.expires_at {
        fields.push(Field::new(
            "expires_at",
            DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
            false,
        ));
    }
    Schema::new(fields)
}

/// The Arrow array of `values` (each `None` for an absent `Option`), all of `schema`.
pub(crate) fn array_of(schema: &TypeSchema, values: &[Option<&Value>]) -> Result<ArrayRef, ArrowError> {
    let mismatch = |what: &Value| ArrowError::InvalidArgumentError(format!("a {what:?} where {schema} was expected"));
    macro_rules! scalar {
        ($array:ty, $variant:path) => {{
            let mut out = Vec::with_capacity(values.len());
            for v in values {
                out.push(match v {
                    None => None,
                    Some($variant(x)) => Some(x.clone()),
                    Some(other) => return Err(mismatch(other)),
                });
            }
            Arc::new(<$array>::from(out)) as ArrayRef
        }};
    }
    Ok(match schema {
        TypeSchema::Option(inner) => {
            let unwrapped: Vec<Option<&Value>> = values
                .iter()
                .map(|v| match v {
                    Some(Value::Option(Some(x))) => Some(x.as_ref()),
                    _ => None,
                })
                .collect();
            array_of(inner, &unwrapped)?
        }
        TypeSchema::Unit => Arc::new(NullArray::new(values.len())),
        TypeSchema::Bool => scalar!(BooleanArray, Value::Bool),
        TypeSchema::I32 => scalar!(Int32Array, Value::I32),
        TypeSchema::I64 => scalar!(Int64Array, Value::I64),
        TypeSchema::U64 => scalar!(UInt64Array, Value::U64),
        TypeSchema::F32 => scalar!(Float32Array, Value::F32),
        TypeSchema::F64 => scalar!(Float64Array, Value::F64),
        TypeSchema::Utf8 => {
            let mut out: Vec<Option<&str>> = Vec::with_capacity(values.len());
            for v in values {
                out.push(match v {
                    None => None,
                    Some(Value::Str(s)) => Some(s.as_str()),
                    Some(other) => return Err(mismatch(other)),
                });
            }
            Arc::new(StringArray::from(out))
        }
        TypeSchema::Bytes => {
            let mut out: Vec<Option<&[u8]>> = Vec::with_capacity(values.len());
            for v in values {
                out.push(match v {
                    None => None,
                    Some(Value::Bytes(b)) => Some(b.as_slice()),
                    Some(other) => return Err(mismatch(other)),
                });
            }
            Arc::new(BinaryArray::from(out))
        }
        TypeSchema::List(item) => {
            let mut lengths = Vec::with_capacity(values.len());
            let mut children: Vec<Option<&Value>> = Vec::new();
            for v in values {
                match v {
                    None => lengths.push(0),
                    Some(Value::List(items)) => {
                        lengths.push(items.len());
                        children.extend(items.iter().map(Some));
                    }
                    Some(other) => return Err(mismatch(other)),
                }
            }
            let child = array_of(item, &children)?;
            Arc::new(ListArray::try_new(
                Arc::new(field("item", item)),
                OffsetBuffer::from_lengths(lengths),
                child,
                nulls(values),
            )?)
        }
        TypeSchema::Tuple(items) => {
            let fields: Vec<(String, &TypeSchema)> =
                items.iter().enumerate().map(|(i, t)| (format!("f{i}"), t)).collect();
            struct_of(&fields, values, |v| match v {
                Value::Tuple(xs) => Some(xs.iter().collect()),
                _ => None,
            })?
        }
        TypeSchema::Struct(items) => {
            let fields: Vec<(String, &TypeSchema)> = items.iter().map(|(n, t)| (n.clone(), t)).collect();
            struct_of(&fields, values, |v| match v {
                Value::Struct(xs) => Some(xs.iter().map(|(_, x)| x).collect()),
                _ => None,
            })?
        }
    })
}

/// Nulls where `values` has `None` (no buffer when there are none).
fn nulls(values: &[Option<&Value>]) -> Option<NullBuffer> {
    values
        .iter()
        .any(Option::is_none)
        .then(|| NullBuffer::from(values.iter().map(Option::is_some).collect::<Vec<bool>>()))
}

/// A struct array of `fields` from `values`, each split into its fields by `parts`.
fn struct_of(
    fields: &[(String, &TypeSchema)],
    values: &[Option<&Value>],
    parts: impl Fn(&Value) -> Option<Vec<&Value>>,
) -> Result<ArrayRef, ArrowError> {
    let mut columns: Vec<Vec<Option<&Value>>> = vec![Vec::with_capacity(values.len()); fields.len()];
    for v in values {
        match v {
            None => columns.iter_mut().for_each(|c| c.push(None)),
            Some(v) => {
                let xs = parts(v)
                    .filter(|xs| xs.len() == fields.len())
                    .ok_or_else(|| ArrowError::InvalidArgumentError(format!("a {v:?} where a struct was expected")))?;
                for (c, x) in columns.iter_mut().zip(xs) {
                    c.push(Some(x));
                }
            }
        }
    }
    let arrays = fields
        .iter()
        .zip(&columns)
        .map(|((_, t), c)| array_of(t, c))
        .collect::<Result<Vec<_>, _>>()?;
    let arrow_fields: Fields = fields.iter().map(|(n, t)| field(n, t)).collect();
    if fields.is_empty() {
        return Ok(Arc::new(StructArray::new_empty_fields(values.len(), nulls(values))));
    }
    Ok(Arc::new(StructArray::try_new(arrow_fields, arrays, nulls(values))?))
}
