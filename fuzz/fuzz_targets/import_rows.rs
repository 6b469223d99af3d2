//! The rows of a keyed state table turned into entries, as `statekit import` does it
//! (`statekit_table::keyed_batch_entries`): an arbitrary state (kind, key / namespace / user key
//! / value types, TTL) and an arbitrary Arrow record batch — each column present or not, of the
//! type the state asks for or of any other Arrow type, with arbitrary values and nulls, nested
//! lists and structs too. Invariant: an error or entries, never a panic or a blow-up; and
//! every entry's bytes decode by the state's schema (the savepoint the import writes reads back).
//!
//! Input: byte 0 = kind (bits 0-1: value, list, map), namespace (bit 2), TTL (bit 3); byte 1 =
//! which of the columns `key`, `namespace`, `user_key`, `value`, `key_group`, `index`,
//! `expires_at` are present (bits 0-6); then the schemas (`statekit_fuzz::typed::schema_from`:
//! key, namespace when bit 2, user key for a map, value); then the row count (0-31); then, per
//! present column, a type byte (below 0xC0: the state's own Arrow type; else an arbitrary
//! type built from the next bytes) and its values. Bytes that run out read as zeros.
#![no_main]

use arrow_array::builder::{BooleanBuilder, FixedSizeBinaryBuilder};
use arrow_array::types::{
    Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type, TimestampMillisecondType, UInt16Type,
    UInt32Type, UInt64Type, UInt8Type,
};
use arrow_array::{
    ArrayRef, BinaryArray, BinaryViewArray, LargeBinaryArray, LargeListArray, LargeStringArray, ListArray,
    NullArray, PrimitiveArray, RecordBatch, RecordBatchOptions, StringArray, StringViewArray, StructArray,
};
use arrow_buffer::{NullBuffer, OffsetBuffer};
use arrow_schema::{DataType, Field, Fields, Schema, TimeUnit};
use libfuzzer_sys::fuzz_target;
use statekit_core::schema::decode_value;
use statekit_core::{StateDescriptor, TtlConfig, TypeSchema};
use statekit_fuzz::typed::schema_from;
use statekit_table::{arrow_type, keyed_batch_entries, KeyedTable};
use std::path::Path;
use std::sync::Arc;

/// The fuzz input, read front to back; zeros once it runs out.
struct Src<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Src<'_> {
    fn byte(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }

    fn bytes<const N: usize>(&mut self) -> [u8; N] {
        std::array::from_fn(|_| self.byte())
    }

    /// A short byte string (0-7 bytes).
    fn short(&mut self) -> Vec<u8> {
        let n = usize::from(self.byte() % 8);
        (0..n).map(|_| self.byte()).collect()
    }
}

/// Deepest arbitrary Arrow type built.
const MAX_TYPE_DEPTH: usize = 4;

/// An arbitrary Arrow type (of those a table column could have, and a few it should not).
fn any_type(src: &mut Src<'_>, depth: usize) -> DataType {
    let mut tag = src.byte() % 22;
    if depth >= MAX_TYPE_DEPTH && tag >= 19 {
        tag = 0;
    }
    match tag {
        0 => DataType::Null,
        1 => DataType::Boolean,
        2 => DataType::Int8,
        3 => DataType::Int16,
        4 => DataType::Int32,
        5 => DataType::Int64,
        6 => DataType::UInt8,
        7 => DataType::UInt16,
        8 => DataType::UInt32,
        9 => DataType::UInt64,
        10 => DataType::Float32,
        11 => DataType::Float64,
        12 => DataType::Utf8,
        13 => DataType::LargeUtf8,
        14 => DataType::Utf8View,
        15 => DataType::Binary,
        16 => DataType::LargeBinary,
        17 => DataType::BinaryView,
        18 => match src.byte() % 3 {
            0 => DataType::FixedSizeBinary(i32::from(src.byte() % 5)),
            _ => DataType::Timestamp(TimeUnit::Millisecond, None),
        },
        19 => DataType::List(Arc::new(Field::new("item", any_type(src, depth + 1), true))),
        20 => DataType::LargeList(Arc::new(Field::new("item", any_type(src, depth + 1), true))),
        _ => {
            let n = usize::from(src.byte() % 4);
            let fields: Fields = (0..n)
                .map(|i| Field::new(format!("f{i}"), any_type(src, depth + 1), true))
                .collect();
            DataType::Struct(fields)
        }
    }
}

/// Validity of `n` rows: all valid unless `nullable` and the input says otherwise.
fn validity(src: &mut Src<'_>, n: usize, nullable: bool) -> Vec<bool> {
    let some_null = nullable && src.byte() & 1 == 1;
    (0..n).map(|_| !some_null || src.byte() & 1 == 0).collect()
}

/// An array of `n` rows of type `dt` from the input (`None` when Arrow refuses what was built).
fn array(src: &mut Src<'_>, dt: &DataType, n: usize, nullable: bool, depth: usize) -> Option<ArrayRef> {
    let valid = validity(src, n, nullable);
    macro_rules! prim {
        ($t:ty, $from:expr) => {{
            let v: PrimitiveArray<$t> = valid
                .iter()
                .map(|&ok| {
                    let x = $from(src);
                    ok.then_some(x)
                })
                .collect();
            Arc::new(v) as ArrayRef
        }};
    }
    let strings = |src: &mut Src<'_>| -> Vec<Option<String>> {
        valid
            .iter()
            .map(|&ok| {
                let s = String::from_utf8_lossy(&src.short()).into_owned();
                ok.then_some(s)
            })
            .collect()
    };
    let binaries = |src: &mut Src<'_>| -> Vec<Option<Vec<u8>>> {
        valid
            .iter()
            .map(|&ok| {
                let s = src.short();
                ok.then_some(s)
            })
            .collect()
    };
    let nulls = NullBuffer::from(valid.clone());
    let nulls = (nulls.null_count() > 0).then_some(nulls);
    Some(match dt {
        DataType::Null => Arc::new(NullArray::new(n)),
        DataType::Boolean => {
            let mut b = BooleanBuilder::new();
            for &ok in &valid {
                let x = src.byte() & 1 == 1;
                b.append_option(ok.then_some(x));
            }
            Arc::new(b.finish())
        }
        DataType::Int8 => prim!(Int8Type, |s: &mut Src<'_>| s.byte() as i8),
        DataType::Int16 => prim!(Int16Type, |s: &mut Src<'_>| i16::from_le_bytes(s.bytes())),
        DataType::Int32 => prim!(Int32Type, |s: &mut Src<'_>| i32::from_le_bytes(s.bytes())),
        DataType::Int64 => prim!(Int64Type, |s: &mut Src<'_>| i64::from_le_bytes(s.bytes())),
        DataType::UInt8 => prim!(UInt8Type, |s: &mut Src<'_>| s.byte()),
        DataType::UInt16 => prim!(UInt16Type, |s: &mut Src<'_>| u16::from_le_bytes(s.bytes())),
        DataType::UInt32 => prim!(UInt32Type, |s: &mut Src<'_>| u32::from_le_bytes(s.bytes())),
        DataType::UInt64 => prim!(UInt64Type, |s: &mut Src<'_>| u64::from_le_bytes(s.bytes())),
        DataType::Float32 => prim!(Float32Type, |s: &mut Src<'_>| f32::from_le_bytes(s.bytes())),
        DataType::Float64 => prim!(Float64Type, |s: &mut Src<'_>| f64::from_le_bytes(s.bytes())),
        DataType::Timestamp(TimeUnit::Millisecond, None) => {
            prim!(TimestampMillisecondType, |s: &mut Src<'_>| i64::from_le_bytes(s.bytes()))
        }
        DataType::Utf8 => Arc::new(StringArray::from(strings(src))),
        DataType::LargeUtf8 => Arc::new(LargeStringArray::from(strings(src))),
        DataType::Utf8View => Arc::new(StringViewArray::from_iter(strings(src))),
        DataType::Binary => Arc::new(BinaryArray::from_iter(binaries(src))),
        DataType::LargeBinary => Arc::new(LargeBinaryArray::from_iter(binaries(src))),
        DataType::BinaryView => Arc::new(BinaryViewArray::from_iter(binaries(src))),
        DataType::FixedSizeBinary(w) => {
            let mut b = FixedSizeBinaryBuilder::with_capacity(n, *w);
            for &ok in &valid {
                let v: Vec<u8> = (0..*w).map(|_| src.byte()).collect();
                if ok {
                    b.append_value(&v).ok()?;
                } else {
                    b.append_null();
                }
            }
            Arc::new(b.finish())
        }
        DataType::List(f) | DataType::LargeList(f) => {
            let lens: Vec<usize> = (0..n).map(|_| usize::from(src.byte() % 4)).collect();
            let total = lens.iter().sum();
            let values = array(src, f.data_type(), total, f.is_nullable(), depth + 1)?;
            if matches!(dt, DataType::List(_)) {
                Arc::new(ListArray::try_new(f.clone(), OffsetBuffer::from_lengths(lens), values, nulls).ok()?)
            } else {
                Arc::new(LargeListArray::try_new(f.clone(), OffsetBuffer::from_lengths(lens), values, nulls).ok()?)
            }
        }
        DataType::Struct(fields) => {
            let children = fields
                .iter()
                .map(|f| array(src, f.data_type(), n, f.is_nullable(), depth + 1))
                .collect::<Option<Vec<_>>>()?;
            if fields.is_empty() {
                Arc::new(StructArray::new_empty_fields(n, nulls))
            } else {
                Arc::new(StructArray::try_new(fields.clone(), children, nulls).ok()?)
            }
        }
        _ => return None,
    })
}

/// `bytes` decode by `schema`, or are refused only by the decoder's size budget or its depth
/// guard (a schema deeper than readers accept: the writer refuses its descriptor).
fn decodes(what: &str, schema: &TypeSchema, bytes: &[u8]) {
    if let Err(e) = decode_value(schema, bytes) {
        assert!(
            e.reason.contains("implausible") || e.reason.contains("nested too deeply"),
            "an imported {what} does not decode as {schema}: {e} ({bytes:02x?})"
        );
    }
}

fuzz_target!(|data: &[u8]| {
    statekit_fuzz::begin(data);
    let mut src = Src { data, pos: 0 };
    let flags = src.byte();
    let present = src.byte();
    let mut pos = src.pos;
    let key = schema_from(data, &mut pos, 1);
    let namespace = if flags & 4 != 0 {
        schema_from(data, &mut pos, 1)
    } else {
        TypeSchema::Unit
    };
    let mut desc = match flags % 4 {
        1 => StateDescriptor::list("s", key, schema_from(data, &mut pos, 1)),
        2 => {
            let uk = schema_from(data, &mut pos, 1);
            StateDescriptor::map("s", key, uk, schema_from(data, &mut pos, 1))
        }
        _ => StateDescriptor::value("s", key, schema_from(data, &mut pos, 1)),
    }
    .with_namespace(namespace);
    if flags & 8 != 0 {
        desc = desc.with_ttl(TtlConfig {
            ttl_ms: 1 + u64::from(flags >> 4) * 1000,
            update_type: statekit_core::TtlUpdateType::OnCreateAndWrite,
        });
    }
    src.pos = pos;
    let rows = usize::from(src.byte() % 32);
    let uk = desc.user_key_schema.clone().unwrap_or(TypeSchema::Bytes);
    let own = |name: &str| -> (DataType, bool) {
        match name {
            "key" => arrow_type(&desc.key_schema),
            "namespace" => arrow_type(&desc.namespace_schema),
            "user_key" => arrow_type(&uk),
            "value" => arrow_type(&desc.value_schema),
            "expires_at" => (DataType::Timestamp(TimeUnit::Millisecond, None), true),
            _ => (DataType::Int64, true),
        }
    };
    let mut fields = Vec::new();
    let mut columns = Vec::new();
    for (i, name) in ["key", "namespace", "user_key", "value", "key_group", "index", "expires_at"]
        .into_iter()
        .enumerate()
    {
        if present & (1 << i) == 0 {
            continue;
        }
        let (dt, nullable) = if src.byte() < 0xC0 {
            own(name)
        } else {
            (any_type(&mut src, 0), true)
        };
        let Some(a) = array(&mut src, &dt, rows, nullable, 0) else {
            return;
        };
        fields.push(Field::new(name, a.data_type().clone(), true));
        columns.push(a);
    }
    let Ok(batch) = RecordBatch::try_new_with_options(
        Arc::new(Schema::new(fields)),
        columns,
        &RecordBatchOptions::new().with_row_count(Some(rows)),
    ) else {
        return;
    };
    let table = KeyedTable {
        path: Path::new("fuzz.parquet"),
        desc: &desc,
        state: 0,
        schema_key_groups: &statekit_core::KeyGroupAssigner::statekit(128),
        now_ms: 1_700_000_000_000,
    };
    let has_ns = desc.namespace_schema != TypeSchema::Unit;
    let mut entries = 0usize;
    let r = keyed_batch_entries(&table, &batch, 0, &mut |e, _order| {
        entries += 1;
        decodes("key", &desc.key_schema, e.key);
        if has_ns {
            decodes("namespace", &desc.namespace_schema, e.namespace);
        } else {
            assert!(e.namespace.is_empty(), "a namespace for a state without one");
        }
        match (&desc.user_key_schema, e.user_key) {
            (Some(s), Some(u)) => decodes("user key", s, u),
            (None, None) => {}
            _ => panic!("a user key for a state that is not a map, or none for a map"),
        }
        decodes("value", &desc.value_schema, e.value);
        assert_eq!(e.timestamp.is_some(), desc.ttl.is_some(), "a timestamp exactly with TTL");
        Ok(())
    });
    match r {
        // Every row of a batch that converts is an entry (a key and a value column exist).
        Ok(()) => assert_eq!(entries, rows, "entries of a batch of {rows} rows"),
        Err(e) => {
            std::hint::black_box(e.to_string());
        }
    }
});
