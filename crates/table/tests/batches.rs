//! Entries into typed Arrow batches: column types follow the type schemas, lists get their
//! element index, TTL states their expiry, batches are bounded, undecodable bytes are errors
//! naming state, key group, row and column.

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type, TimestampMillisecondType, UInt64Type};
use arrow_array::Array;
use arrow_schema::{DataType, TimeUnit};
use statekit_core::schema::{encode_value, Value};
use statekit_core::{Entry, StateDescriptor, TtlConfig, TypeSchema};
use statekit_table::{arrow_type, state_schema, StateBatches, TableError};

fn enc(schema: &TypeSchema, v: &Value) -> Vec<u8> {
    encode_value(schema, v).expect("encode")
}

fn entry<'a>(key: &'a [u8], ns: &'a [u8], uk: Option<&'a [u8]>, value: &'a [u8], ts: Option<i64>) -> Entry<'a> {
    Entry {
        state: 0,
        key,
        namespace: ns,
        user_key: uk,
        value,
        timestamp: ts,
    }
}

#[test]
fn every_type_maps_to_its_arrow_type() {
    let cases = [
        (TypeSchema::Bytes, DataType::Binary),
        (TypeSchema::Unit, DataType::Null),
        (TypeSchema::Bool, DataType::Boolean),
        (TypeSchema::I32, DataType::Int32),
        (TypeSchema::I64, DataType::Int64),
        (TypeSchema::U64, DataType::UInt64),
        (TypeSchema::F32, DataType::Float32),
        (TypeSchema::F64, DataType::Float64),
        (TypeSchema::Utf8, DataType::Utf8),
    ];
    for (t, want) in cases {
        assert_eq!(arrow_type(&t).0, want, "{t}");
    }
    let (opt, nullable) = arrow_type(&TypeSchema::Option(Box::new(TypeSchema::I64)));
    assert_eq!((opt, nullable), (DataType::Int64, true));
    let (tuple, _) = arrow_type(&TypeSchema::Tuple(vec![TypeSchema::I64, TypeSchema::Utf8]));
    let DataType::Struct(fields) = tuple else {
        panic!("a struct")
    };
    assert_eq!(
        fields.iter().map(|f| f.name().as_str()).collect::<Vec<_>>(),
        ["f0", "f1"]
    );
    let (list, _) = arrow_type(&TypeSchema::List(Box::new(TypeSchema::Utf8)));
    assert!(matches!(list, DataType::List(f) if f.data_type() == &DataType::Utf8));
}

#[test]
fn a_value_state_is_key_group_key_value() {
    let desc = StateDescriptor::value("count", TypeSchema::Utf8, TypeSchema::I64);
    let schema = state_schema(&desc);
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(names, ["key_group", "key", "value"]);
    assert_eq!(
        schema.field(1).metadata().get("statekit.type").map(String::as_str),
        Some("string")
    );
    let mut b = StateBatches::new(&desc, 4);
    let mut batches = Vec::new();
    for i in 0..10i64 {
        let key = format!("k{i}");
        let value = enc(&TypeSchema::I64, &Value::I64(i * 10));
        batches.extend(
            b.push(i as u32, &entry(key.as_bytes(), b"", None, &value, None))
                .expect("push"),
        );
    }
    batches.extend(b.finish().expect("finish"));
    assert_eq!(batches.iter().map(|b| b.num_rows()).collect::<Vec<_>>(), [4, 4, 2]);
    let last = &batches[2];
    assert_eq!(last.column(0).as_primitive::<Int32Type>().value(1), 9);
    assert_eq!(last.column(1).as_string::<i32>().value(1), "k9");
    assert_eq!(last.column(2).as_primitive::<Int64Type>().value(1), 90);
}

#[test]
fn lists_get_their_index_windows_a_struct_namespace_ttl_an_expiry() {
    let ns_schema = TypeSchema::Tuple(vec![TypeSchema::I64, TypeSchema::I64]);
    let mut desc = StateDescriptor::list("recent", TypeSchema::I32, TypeSchema::U64).with_ttl(TtlConfig::new(1_000));
    desc.namespace_schema = ns_schema.clone();
    let schema = state_schema(&desc);
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(names, ["key_group", "key", "namespace", "index", "value", "expires_at"]);
    assert_eq!(
        schema.field(5).data_type(),
        &DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into()))
    );
    let window = enc(&ns_schema, &Value::Tuple(vec![Value::I64(0), Value::I64(60_000)]));
    let mut b = StateBatches::new(&desc, 100);
    let k1 = enc(&TypeSchema::I32, &Value::I32(1));
    let k2 = enc(&TypeSchema::I32, &Value::I32(2));
    for (k, v) in [(&k1, 5u64), (&k1, 6), (&k1, 7), (&k2, 8)] {
        let value = enc(&TypeSchema::U64, &Value::U64(v));
        assert!(b
            .push(3, &entry(k, &window, None, &value, Some(100)))
            .expect("push")
            .is_none());
    }
    let batch = b.finish().expect("finish").expect("rows");
    let index = batch.column(3).as_primitive::<Int64Type>();
    assert_eq!(index.values().to_vec(), [0, 1, 2, 0]);
    assert_eq!(
        batch.column(4).as_primitive::<UInt64Type>().values().to_vec(),
        [5, 6, 7, 8]
    );
    assert_eq!(
        batch.column(5).as_primitive::<TimestampMillisecondType>().value(0),
        1_100
    );
    let ns = batch.column(2).as_struct();
    assert_eq!(ns.column(1).as_primitive::<Int64Type>().value(0), 60_000);
}

#[test]
fn maps_with_nested_values_and_nulls() {
    let value_schema = TypeSchema::Struct(vec![
        ("name".into(), TypeSchema::Utf8),
        ("tags".into(), TypeSchema::List(Box::new(TypeSchema::Utf8))),
        ("score".into(), TypeSchema::Option(Box::new(TypeSchema::F64))),
    ]);
    let desc = StateDescriptor::map("profiles", TypeSchema::Bytes, TypeSchema::Utf8, value_schema.clone());
    let mut b = StateBatches::new(&desc, 100);
    let rows = [("alice", vec!["a", "b"], Some(1.5)), ("bob", vec![], None)];
    for (name, tags, score) in &rows {
        let v = Value::Struct(vec![
            ("name".into(), Value::Str((*name).into())),
            (
                "tags".into(),
                Value::List(tags.iter().map(|t| Value::Str((*t).into())).collect()),
            ),
            ("score".into(), Value::Option(score.map(|s| Box::new(Value::F64(s))))),
        ]);
        let value = enc(&value_schema, &v);
        b.push(0, &entry(b"\x01", b"", Some(name.as_bytes()), &value, None))
            .expect("push");
    }
    let batch = b.finish().expect("finish").expect("rows");
    assert_eq!(batch.schema().field(2).name(), "user_key");
    assert_eq!(batch.column(2).as_string::<i32>().value(1), "bob");
    let v = batch.column(3).as_struct();
    assert_eq!(v.column(0).as_string::<i32>().value(0), "alice");
    let tags = v.column(1).as_list::<i32>();
    assert_eq!(tags.value_length(0), 2);
    assert_eq!(tags.value_length(1), 0);
    let score = v.column(2);
    assert!(score.is_valid(0) && score.is_null(1));
}

#[test]
fn undecodable_bytes_name_the_state_key_group_row_and_column() {
    let desc = StateDescriptor::value("count", TypeSchema::Utf8, TypeSchema::I64);
    let mut b = StateBatches::new(&desc, 100);
    let good = 1i64.to_be_bytes();
    b.push(1, &entry(b"a", b"", None, &good, None)).expect("push");
    let e = b
        .push(2, &entry(b"b", b"", None, b"\x01\x02", None))
        .expect_err("3 bytes short");
    let msg = e.to_string();
    assert!(
        matches!(
            e,
            TableError::Undecodable {
                row: 1,
                column: "value",
                key_group: 2,
                ..
            }
        ),
        "{msg}"
    );
    assert!(
        msg.contains("count") && msg.contains("row 1") && msg.contains("value"),
        "{msg}"
    );
    assert_eq!(e.kind(), statekit_core::ErrorKind::Corrupt);
}
