//! A snapshot exported as tables: one directory per (uid, state), one Parquet file per
//! subtask, `_tables.json`; every row of every state is in its table (read back with the
//! `parquet` crate's reader); unknown names and a non-empty output are refused.

use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use statekit_core::{KeyGroupRange, MemoryView};
use statekit_snapshot::Snapshot;
use statekit_table::{export_snapshot, ExportOptions, TableError, TableFormat, TableScope};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/v1")
        .join(name)
}

fn options() -> ExportOptions {
    ExportOptions::default()
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
    let reader = Snapshot::open(&input).expect("open");
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("tables");
    let seen = AtomicU64::new(0);
    let summary = export_snapshot(&reader, &out, &options(), &|rows| {
        seen.fetch_add(rows, Ordering::Relaxed);
    })
    .expect("export");
    assert_eq!(
        seen.into_inner(),
        summary.tables.iter().map(|t| t.rows).sum::<u64>(),
        "progress counts every row"
    );
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
            for v in reader.keyed_views(&op.uid, all).expect("views") {
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
    let s = export_snapshot(&reader, &out2, &o, &|_| {}).expect("export one");
    assert_eq!(s.tables.len(), 1);
    assert!(
        s.tables[0].files.iter().all(|f| f == "part-0-3.parquet"),
        "{:?}",
        s.tables[0].files
    );
}

#[test]
fn unknown_names_and_a_non_empty_output_are_refused() {
    let reader = Snapshot::open(fixture("savepoint-basic")).expect("open");
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("t");
    let bad_uid = ExportOptions {
        uid: Some("nope".into()),
        ..options()
    };
    let e = export_snapshot(&reader, &out, &bad_uid, &|_| {}).expect_err("unknown uid");
    assert!(matches!(e, TableError::Unknown { .. }), "{e}");
    let bad_state = ExportOptions {
        state: Some("nope".into()),
        ..options()
    };
    assert!(matches!(
        export_snapshot(&reader, &out, &bad_state, &|_| {}),
        Err(TableError::Unknown { .. })
    ));
    assert!(!out.exists(), "nothing written");
    std::fs::create_dir_all(&out).expect("mkdir");
    std::fs::write(out.join("x"), b"x").expect("write");
    let e = export_snapshot(&reader, &out, &options(), &|_| {}).expect_err("not empty");
    assert!(matches!(e, TableError::OutputExists { .. }), "{e}");
    assert_eq!(e.kind(), statekit_core::ErrorKind::Caller);
}

/// Operator state (list, union, broadcast) becomes one table per state with a `subtask`
/// column: a row per element (with its `index`) or broadcast entry of every subtask.
#[test]
fn operator_states_become_tables_by_subtask() {
    let reader = Snapshot::open(fixture("savepoint-basic")).expect("open");
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("t");
    let summary = export_snapshot(&reader, &out, &options(), &|_| {}).expect("export");
    for op in &reader.metadata().operators {
        let stored: Vec<_> = (0..op.subtasks.len() as u32)
            .map(|i| reader.stored_operator_state(&op.uid, i).expect("operator state"))
            .collect();
        for desc in &op.operator_states {
            let t = summary
                .tables
                .iter()
                .find(|t| t.uid == op.uid && t.state == desc.name && t.scope == TableScope::Operator)
                .expect("a table per operator state");
            assert_eq!(t.kind, desc.mode.to_string());
            let want: u64 = stored
                .iter()
                .flat_map(|s| s.states.iter().filter(|(d, _)| d.name == desc.name))
                .map(|(_, data)| match data {
                    statekit_core::OperatorStateData::List(l) => l.len() as u64,
                    statekit_core::OperatorStateData::Broadcast(m) => m.len() as u64,
                })
                .sum();
            assert_eq!(t.rows, want, "{}/{}", op.uid, desc.name);
            assert_eq!(t.files, vec![format!("subtasks-0-{}.parquet", op.subtasks.len() - 1)]);
            let (rows, _) = parquet_rows(&out.join(&t.path).join(&t.files[0]));
            assert_eq!(rows, want);
            let names: Vec<&str> = t.columns.iter().map(|c| c.0.as_str()).collect();
            match desc.mode {
                statekit_core::OperatorStateMode::Broadcast => assert_eq!(names, ["subtask", "key", "value"]),
                _ => assert_eq!(names, ["subtask", "index", "value"]),
            }
        }
    }
}

/// Any thread count writes the same files with the same rows; Arrow IPC files are listed
/// with their format; a snapshot that fails to read half-way leaves no output at all.
#[test]
fn parallel_export_is_deterministic_and_a_failure_leaves_nothing() {
    let reader = Snapshot::open(fixture("savepoint-basic")).expect("open");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut lists = Vec::new();
    for threads in [1, 4] {
        let out = dir.path().join(format!("t{threads}"));
        let o = ExportOptions {
            threads,
            file: statekit_table::TableFileOptions {
                format: TableFormat::Arrow,
                ..Default::default()
            },
            ..options()
        };
        let s = export_snapshot(&reader, &out, &o, &|_| {}).expect("export");
        assert!(s.tables.iter().all(|t| t.format == TableFormat::Arrow));
        assert!(s.tables.iter().flat_map(|t| &t.files).all(|f| f.ends_with(".arrow")));
        lists.push(
            s.tables
                .iter()
                .map(|t| (t.path.clone(), t.files.clone(), t.rows))
                .collect::<Vec<_>>(),
        );
    }
    assert_eq!(lists[0], lists[1]);

    let broken = Snapshot::open(fixture("corrupt-bitflip")).expect("open");
    let out = dir.path().join("broken");
    let e = export_snapshot(&broken, &out, &options(), &|_| {}).expect_err("a bad block");
    assert_eq!(e.kind(), statekit_core::ErrorKind::Corrupt, "{e}");
    assert!(!out.exists(), "no output");
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .expect("list")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(left.is_empty(), "no staging directory left: {left:?}");
}
