//! A snapshot exported as tables: one directory per (uid, state), one Parquet file per
//! subtask, `_tables.json`; every row of every state is in its table (read back with the
//! `parquet` crate's reader); unknown names and a non-empty output are refused.

use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use statekit_checkpoint::SnapshotReader;
use statekit_core::{KeyGroupRange, MemoryView};
use statekit_table::{export_snapshot, ExportOptions, ParquetOptions, TableError};
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/v1")
        .join(name)
}

fn options() -> ExportOptions {
    ExportOptions {
        uid: None,
        state: None,
        key_groups: None,
        parquet: ParquetOptions::default(),
    }
}

fn parquet_rows(path: &Path) -> (u64, Vec<(String, Option<String>)>) {
    let b = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(path).expect("open")).expect("parquet");
    let kv = b
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .map(|k| (k.key, k.value))
        .collect();
    let rows = b
        .build()
        .expect("reader")
        .map(|r| r.expect("batch").num_rows() as u64)
        .sum();
    (rows, kv)
}

#[test]
fn every_state_of_the_savepoint_becomes_a_table_with_all_its_rows() {
    let input = fixture("savepoint-basic");
    let reader = SnapshotReader::open(&input).expect("open");
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("tables");
    let mut seen = 0;
    let summary = export_snapshot(&reader, &out, &options(), &mut |_| seen += 1).expect("export");
    assert_eq!(seen, summary.tables.len());
    let listed: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("_tables.json")).expect("_tables.json")).expect("json");
    assert_eq!(listed["tables"].as_array().map(Vec::len), Some(summary.tables.len()));
    for op in &reader.metadata().operators {
        for desc in &op.keyed_states {
            let t = summary
                .tables
                .iter()
                .find(|t| t.uid == op.uid && t.state == desc.name)
                .expect("a table per state");
            // The entries of this state, through the snapshot layer.
            let all = KeyGroupRange::all(op.max_parallelism);
            let mut want = 0u64;
            for v in statekit_snapshot::keyed_views(&reader, &op.uid, all).expect("views") {
                let Some(i) = v.states().iter().position(|d| d.name == desc.name) else {
                    continue;
                };
                let m = MemoryView::collect(v.as_ref(), v.key_group_range()).expect("collect");
                want += m.entries().iter().filter(|e| e.state as usize == i).count() as u64;
            }
            assert_eq!(t.rows, want, "{}/{}", op.uid, desc.name);
            let mut got = 0;
            for f in &t.files {
                let (rows, kv) = parquet_rows(&out.join(&t.path).join(f));
                got += rows;
                assert!(kv.contains(&("statekit.uid".into(), Some(op.uid.clone()))));
                assert!(kv.contains(&("statekit.state".into(), Some(desc.name.clone()))));
            }
            assert_eq!(got, want, "{}/{} read back", op.uid, desc.name);
        }
    }
    // Only one state, only some key groups.
    let out2 = dir.path().join("one");
    let o = ExportOptions {
        uid: Some("word-counter".into()),
        state: Some("count".into()),
        key_groups: Some(KeyGroupRange::new(0, 3)),
        ..options()
    };
    let s = export_snapshot(&reader, &out2, &o, &mut |_| {}).expect("export one");
    assert_eq!(s.tables.len(), 1);
    assert!(
        s.tables[0].files.iter().all(|f| f == "part-0-3.parquet"),
        "{:?}",
        s.tables[0].files
    );
}

#[test]
fn unknown_names_and_a_non_empty_output_are_refused() {
    let reader = SnapshotReader::open(fixture("savepoint-basic")).expect("open");
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("t");
    let bad_uid = ExportOptions {
        uid: Some("nope".into()),
        ..options()
    };
    let e = export_snapshot(&reader, &out, &bad_uid, &mut |_| {}).expect_err("unknown uid");
    assert!(matches!(e, TableError::Unknown { .. }), "{e}");
    let bad_state = ExportOptions {
        state: Some("nope".into()),
        ..options()
    };
    assert!(matches!(
        export_snapshot(&reader, &out, &bad_state, &mut |_| {}),
        Err(TableError::Unknown { .. })
    ));
    assert!(!out.exists(), "nothing written");
    std::fs::create_dir_all(&out).expect("mkdir");
    std::fs::write(out.join("x"), b"x").expect("write");
    let e = export_snapshot(&reader, &out, &options(), &mut |_| {}).expect_err("not empty");
    assert!(matches!(e, TableError::OutputExists { .. }), "{e}");
    assert_eq!(e.kind(), statekit_core::ErrorKind::Caller);
}
