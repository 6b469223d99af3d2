//! A state's table written as Parquet and read back with the `parquet` crate's own Arrow
//! reader: the same rows and types, the file's metadata, nothing under the final name on a
//! failure, an unknown state refused.

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use statekit_core::{key_group_for_key, KeyGroupRange, MemoryView, OwnedEntry, StateDescriptor, TypeSchema};
use statekit_table::{write_state_table, TableCompression, TableError, TableFileOptions, TableFormat};

/// A word count: state "count" (utf8 -> i64) of `n` words, and a second state it must skip.
fn word_count(n: u32) -> MemoryView {
    let states = vec![
        StateDescriptor::value("count", TypeSchema::Utf8, TypeSchema::I64),
        StateDescriptor::value("other", TypeSchema::Utf8, TypeSchema::Bytes),
    ];
    let mut entries: Vec<OwnedEntry> = (0..n)
        .flat_map(|i| {
            let key = format!("w{i:04}").into_bytes();
            let kg = key_group_for_key(&key, 128);
            [
                OwnedEntry {
                    key_group: kg,
                    state: 0,
                    key: key.clone(),
                    namespace: vec![],
                    user_key: None,
                    value: i64::from(i % 7).to_be_bytes().to_vec(),
                    timestamp: None,
                },
                OwnedEntry {
                    key_group: kg,
                    state: 1,
                    key,
                    namespace: vec![],
                    user_key: None,
                    value: vec![1],
                    timestamp: None,
                },
            ]
        })
        .collect();
    entries.sort_by(|a, b| {
        a.key_group
            .cmp(&b.key_group)
            .then(a.as_entry().canonical_cmp(&b.as_entry()))
    });
    MemoryView::new(128, KeyGroupRange::all(128), states, entries)
}

#[test]
fn a_state_round_trips_through_parquet_with_its_types_and_metadata() {
    let dir = tempfile::tempdir().expect("tempdir");
    let view = word_count(1000);
    for compression in [TableCompression::Zstd, TableCompression::Snappy, TableCompression::None] {
        let path = dir.path().join(format!("count-{compression:?}.parquet"));
        let options = TableFileOptions {
            compression,
            format: TableFormat::Parquet,
            row_group_rows: 300,
            metadata: vec![("statekit.uid".into(), "counter".into())],
        };
        let rows = write_state_table(&view, "count", KeyGroupRange::all(128), &path, &options, &|_| {}).expect("write");
        assert_eq!(rows, 1000);
        let file = std::fs::File::open(&path).expect("open");
        let builder = ParquetRecordBatchReaderBuilder::try_new(file).expect("a Parquet file");
        let kv = builder
            .metadata()
            .file_metadata()
            .key_value_metadata()
            .cloned()
            .unwrap_or_default();
        assert!(kv
            .iter()
            .any(|k| k.key == "statekit.uid" && k.value.as_deref() == Some("counter")));
        assert_eq!(builder.metadata().num_row_groups(), 4, "row groups of 300 rows");
        let schema = builder.schema().clone();
        assert_eq!(schema.field(1).data_type(), &arrow_schema::DataType::Utf8);
        assert_eq!(schema.field(2).data_type(), &arrow_schema::DataType::Int64);
        let mut got = Vec::new();
        for b in builder.build().expect("reader") {
            let b = b.expect("batch");
            let (k, v) = (b.column(1).as_string::<i32>(), b.column(2).as_primitive::<Int64Type>());
            for i in 0..b.num_rows() {
                got.push((k.value(i).to_string(), v.value(i)));
            }
        }
        got.sort();
        let want: Vec<(String, i64)> = (0..1000).map(|i| (format!("w{i:04}"), i64::from(i % 7))).collect();
        assert_eq!(got, want, "{compression:?}");
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .expect("list")
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty());
    }
}

#[test]
fn an_unknown_state_or_undecodable_rows_write_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let view = word_count(10);
    let path = dir.path().join("x.parquet");
    let e = write_state_table(
        &view,
        "nope",
        KeyGroupRange::all(128),
        &path,
        &TableFileOptions::default(),
        &|_| {},
    )
    .expect_err("unknown state");
    assert!(matches!(e, TableError::UnknownState { .. }), "{e}");
    // "other" claims bytes values but here a view whose i64 values are one byte short.
    let bad = MemoryView::new(
        128,
        KeyGroupRange::all(128),
        vec![StateDescriptor::value("count", TypeSchema::Utf8, TypeSchema::I64)],
        vec![OwnedEntry {
            key_group: key_group_for_key(b"a", 128),
            state: 0,
            key: b"a".to_vec(),
            namespace: vec![],
            user_key: None,
            value: vec![0; 7],
            timestamp: None,
        }],
    );
    let e = write_state_table(
        &bad,
        "count",
        KeyGroupRange::all(128),
        &path,
        &TableFileOptions::default(),
        &|_| {},
    )
    .expect_err("undecodable");
    assert!(matches!(e, TableError::Undecodable { column: "value", .. }), "{e}");
    assert_eq!(
        std::fs::read_dir(dir.path()).expect("list").count(),
        0,
        "nothing written"
    );
}

/// The same table as Arrow IPC (zstd and uncompressed, read back with arrow-ipc's reader,
/// custom metadata included) and as JSON lines (one object per row); a compression a format
/// cannot take is refused before anything is written.
#[test]
fn a_state_round_trips_through_arrow_ipc_and_json_lines() {
    let dir = tempfile::tempdir().expect("tempdir");
    let view = word_count(500);
    let want: Vec<(String, i64)> = (0..500).map(|i| (format!("w{i:04}"), i64::from(i % 7))).collect();
    for compression in [TableCompression::Zstd, TableCompression::None] {
        let path = dir.path().join(format!("count-{compression:?}.arrow"));
        let options = TableFileOptions {
            format: TableFormat::Arrow,
            compression,
            row_group_rows: 128,
            metadata: vec![("statekit.uid".into(), "counter".into())],
        };
        let rows = write_state_table(&view, "count", KeyGroupRange::all(128), &path, &options, &|_| {}).expect("write");
        assert_eq!(rows, 500);
        let reader = arrow_ipc::reader::FileReader::try_new(std::fs::File::open(&path).expect("open"), None)
            .expect("an Arrow IPC file");
        assert_eq!(
            reader.custom_metadata().get("statekit.uid").map(String::as_str),
            Some("counter")
        );
        let mut got = Vec::new();
        for b in reader {
            let b = b.expect("batch");
            assert!(b.num_rows() <= 128);
            let (k, v) = (b.column(1).as_string::<i32>(), b.column(2).as_primitive::<Int64Type>());
            for i in 0..b.num_rows() {
                got.push((k.value(i).to_string(), v.value(i)));
            }
        }
        got.sort();
        assert_eq!(got, want, "{compression:?}");
    }
    let path = dir.path().join("count.jsonl");
    let options = TableFileOptions {
        format: TableFormat::Jsonl,
        compression: TableCompression::None,
        ..TableFileOptions::default()
    };
    write_state_table(&view, "count", KeyGroupRange::all(128), &path, &options, &|_| {}).expect("write");
    let mut got: Vec<(String, i64)> = std::fs::read_to_string(&path)
        .expect("read")
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("one JSON object per line");
            assert!(v["key_group"].is_i64(), "{l}");
            (
                v["key"].as_str().expect("key").to_string(),
                v["value"].as_i64().expect("value"),
            )
        })
        .collect();
    got.sort();
    assert_eq!(got, want);
    for (format, compression) in [
        (TableFormat::Arrow, TableCompression::Snappy),
        (TableFormat::Jsonl, TableCompression::Zstd),
    ] {
        let path = dir.path().join(format!("refused.{format}"));
        let options = TableFileOptions {
            format,
            compression,
            ..TableFileOptions::default()
        };
        let e =
            write_state_table(&view, "count", KeyGroupRange::all(128), &path, &options, &|_| {}).expect_err("refused");
        assert!(matches!(e, TableError::Unsupported { .. }), "{e}");
        assert_eq!(e.kind(), statekit_core::ErrorKind::Caller);
        assert!(!path.exists());
    }
}
