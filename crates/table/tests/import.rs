//! Tables back into a savepoint: random typed state (value, windowed list with TTL, map) in a
//! heap backend, saved, exported to Parquet and imported again, gives the same entries at any
//! parallelism and byte-identical keyed data files at the same one; operator state comes back
//! redistributed; a table that does not fit the schema is refused naming file, row and
//! column, with nothing written.

use proptest::prelude::*;
use statekit_checkpoint::SnapshotWriter;
use statekit_core::schema::{encode_value, Value};
use statekit_core::storage::{LocalStorage, Storage};
use statekit_core::{
    BackendConfig, KeyGroupRange, KeyedStateBackend, ManualClock, MemoryView, OperatorStateData,
    OperatorStateDescriptor, OperatorStateMode, OperatorStateSnapshot, StateDescriptor, StateFunctions, TtlConfig,
    TypeSchema,
};
use statekit_migrate::JobSchema;
use statekit_snapshot::Snapshot;
use statekit_table::{export_snapshot, import_tables, ExportOptions, ImportOptions, TableError};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn descriptors() -> Vec<StateDescriptor> {
    let mut list = StateDescriptor::list("recent", TypeSchema::Utf8, TypeSchema::Utf8).with_ttl(TtlConfig::new(60_000));
    list.namespace_schema = TypeSchema::I64;
    vec![
        StateDescriptor::value("count", TypeSchema::Utf8, TypeSchema::I64),
        list,
        StateDescriptor::map(
            "pairs",
            TypeSchema::I64,
            TypeSchema::Utf8,
            TypeSchema::Tuple(vec![TypeSchema::I64, TypeSchema::Option(Box::new(TypeSchema::F64))]),
        ),
    ]
}

fn op_desc(name: &str, mode: OperatorStateMode, key: Option<TypeSchema>) -> OperatorStateDescriptor {
    let value_schema = if key.is_some() {
        TypeSchema::Utf8
    } else {
        TypeSchema::I64
    };
    OperatorStateDescriptor {
        name: name.into(),
        mode,
        value_schema,
        key_schema: key,
    }
}

/// One random operation: (key, namespace, value seed).
type Op = (u8, u8, u16);

/// A savepoint of operator "op" (max parallelism 16, parallelism `p`) with list, union and
/// broadcast operator state, holding what `ops` wrote.
fn savepoint(dir: &Path, p: u32, ops: &[Op]) -> PathBuf {
    let storage: Arc<dyn Storage> = Arc::new(LocalStorage::new(dir));
    let writer = SnapshotWriter::new_savepoint(storage, "", "00112233445566778899aabbccddeeff", 7).expect("writer");
    writer.register_operator("op", p, 16).expect("register");
    let clock = ManualClock::new(1_000_000);
    let mut backends: Vec<_> = (0..p)
        .map(|i| {
            let cfg = BackendConfig::for_subtask(16, p, i)
                .expect("cfg")
                .with_clock(clock.clone());
            statekit_hashmap::HashMapBackend::new(cfg).expect("backend")
        })
        .collect();
    let handles: Vec<Vec<_>> = backends
        .iter_mut()
        .map(|b| {
            descriptors()
                .into_iter()
                .map(|d| b.register(d, StateFunctions::None).expect("register"))
                .collect()
        })
        .collect();
    for (n, &(k, ns, v)) in ops.iter().enumerate() {
        clock.set(1_000_000 + n as i64);
        let word = format!("w{}", k % 12);
        let kg = statekit_core::key_group_for_key(word.as_bytes(), 16);
        let o = statekit_core::keygroup::subtask_for_key_group(16, p, kg) as usize;
        let b = &mut backends[o];
        let enc = |t: &TypeSchema, v: &Value| encode_value(t, v).expect("encode");
        b.put(
            handles[o][0],
            word.as_bytes(),
            b"",
            &enc(&TypeSchema::I64, &Value::I64(i64::from(v))),
        )
        .expect("put");
        let nsb = enc(&TypeSchema::I64, &Value::I64(i64::from(ns % 3)));
        b.add(handles[o][1], word.as_bytes(), &nsb, format!("e{v}").as_bytes())
            .expect("add");
        let ik = enc(&TypeSchema::I64, &Value::I64(i64::from(k % 5)));
        let kg = statekit_core::key_group_for_key(&ik, 16);
        let o = statekit_core::keygroup::subtask_for_key_group(16, p, kg) as usize;
        let pair = Value::Tuple(vec![
            Value::I64(i64::from(v)),
            Value::Option((v % 2 == 0).then(|| Box::new(Value::F64(f64::from(v) / 4.0)))),
        ]);
        let t = descriptors()[2].value_schema.clone();
        backends[o]
            .map_put(
                handles[o][2],
                &ik,
                b"",
                format!("u{}", ns % 4).as_bytes(),
                &enc(&t, &pair),
            )
            .expect("map put");
    }
    for (i, b) in backends.iter_mut().enumerate() {
        let view = b.snapshot(1).expect("snapshot");
        let i64b = |x: i64| x.to_be_bytes().to_vec();
        let ops_state = OperatorStateSnapshot {
            states: vec![
                (
                    op_desc("offsets", OperatorStateMode::List, None),
                    OperatorStateData::List((0..=i as i64).map(|x| i64b(x * 10)).collect()),
                ),
                (
                    op_desc("marks", OperatorStateMode::Union, None),
                    OperatorStateData::List(vec![i64b(i as i64)]),
                ),
                (
                    op_desc("rules", OperatorStateMode::Broadcast, Some(TypeSchema::Utf8)),
                    OperatorStateData::Broadcast(BTreeMap::from([(b"r".to_vec(), b"x".to_vec())])),
                ),
            ],
        };
        writer
            .write_subtask("op", i as u32, Some(view.as_ref()), Some(&ops_state), false)
            .expect("write");
    }
    let name = writer.dir().to_string();
    writer.finish().expect("finish");
    dir.join(name)
}

/// (state name, key group, key, namespace, user key, value, timestamp).
type Row = (String, u32, Vec<u8>, Vec<u8>, Option<Vec<u8>>, Vec<u8>, Option<i64>);

/// Every keyed entry of "op", by state name, sorted (lists in element order per key).
fn entries(sp: &Path) -> Vec<Row> {
    let reader = Snapshot::open(sp).expect("open");
    let mut out = Vec::new();
    for v in reader.keyed_views("op", KeyGroupRange::all(16)).expect("views") {
        let names: Vec<String> = v.states().iter().map(|d| d.name.clone()).collect();
        for e in MemoryView::collect(v.as_ref(), v.key_group_range())
            .expect("collect")
            .entries()
        {
            out.push((
                names[e.state as usize].clone(),
                e.key_group,
                e.key.clone(),
                e.namespace.clone(),
                e.user_key.clone(),
                e.value.clone(),
                e.timestamp,
            ));
        }
    }
    out.sort();
    out
}

/// The keyed data file bytes of every subtask of "op".
fn keyed_files(sp: &Path) -> Vec<Vec<u8>> {
    let reader = Snapshot::open(sp).expect("open");
    let op = reader.operator("op").expect("op");
    op.subtasks
        .iter()
        .map(|s| {
            s.keyed
                .canonical()
                .map(|f| std::fs::read(sp.join(&f.path)).expect("keyed file"))
                .unwrap_or_default()
        })
        .collect()
}

fn export(sp: &Path, out: &Path) {
    let reader = Snapshot::open(sp).expect("open");
    export_snapshot(&reader, out, &ExportOptions::default(), &|_| {}).expect("export");
}

fn schema_of(sp: &Path) -> JobSchema {
    JobSchema::of(Snapshot::open(sp).expect("open").metadata())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Export → import gives the same entries at any parallelism, and the same keyed data
    /// files byte for byte at the same parallelism; operator state comes back whole.
    #[test]
    fn export_then_import_gives_the_same_state(
        ops in proptest::collection::vec((any::<u8>(), any::<u8>(), any::<u16>()), 0..80),
        p in 1u32..4,
        p2 in 1u32..5,
        tiny_memory in any::<bool>(),
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let sp = savepoint(dir.path(), p, &ops);
        let tables = dir.path().join("tables");
        export(&sp, &tables);
        let schema = schema_of(&sp);
        let memory = if tiny_memory { 1 } else { 64 << 20 };
        let same = dir.path().join("same");
        let s = import_tables(&tables, &schema, &same, &ImportOptions { memory, ..Default::default() }, &|_| {})
            .expect("import");
        prop_assert_eq!(s.entries as usize, entries(&sp).len());
        // A one-byte budget still holds 16 entries (the sorter's floor): more must spill.
        if tiny_memory && s.entries > 16 {
            prop_assert!(s.spilled_runs > 0);
        }
        prop_assert_eq!(entries(&same), entries(&sp));
        prop_assert_eq!(keyed_files(&same), keyed_files(&sp), "byte-identical keyed data files");
        let other = dir.path().join("other");
        import_tables(&tables, &schema, &other, &ImportOptions { parallelism: Some(p2), ..Default::default() }, &|_| {})
            .expect("import at another parallelism");
        prop_assert_eq!(entries(&other), entries(&sp));
        // Operator state: as stored at the same parallelism; redistributed at another.
        let (orig, same, other) = (
            Snapshot::open(&sp).expect("open"),
            Snapshot::open(&same).expect("open"),
            Snapshot::open(&other).expect("open"),
        );
        for i in 0..p {
            prop_assert_eq!(same.stored_operator_state("op", i).expect("os"), orig.stored_operator_state("op", i).expect("os"));
        }
        prop_assert_eq!(other.operator("op").expect("op").parallelism, p2);
        let want: Vec<_> = if p2 == p {
            (0..p).map(|i| orig.stored_operator_state("op", i).expect("os")).collect()
        } else {
            orig.operator_states("op", p2).expect("redistributed")
        };
        for i in 0..p2 {
            prop_assert_eq!(&other.stored_operator_state("op", i).expect("os"), &want[i as usize]);
        }
    }
}

/// A table that does not fit the schema — a missing column, a column of the wrong type, a
/// key in the wrong key group, two rows for one key — is refused naming the file, the row
/// and the column, and nothing is written; so is a bad schema.
#[test]
fn tables_that_do_not_fit_the_schema_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sp = savepoint(dir.path(), 2, &[(1, 1, 1), (1, 1, 2), (2, 2, 2), (3, 0, 3)]);
    let tables = dir.path().join("tables");
    export(&sp, &tables);
    let good = schema_of(&sp);
    let out = dir.path().join("out");
    let refused = |schema: &JobSchema, want: &str| {
        let e = import_tables(&tables, schema, &out, &ImportOptions::default(), &|_| {}).expect_err(want);
        assert!(e.to_string().contains(want), "{e} (wanted {want:?})");
        assert_eq!(e.kind(), statekit_core::ErrorKind::Caller, "{e}");
        assert!(!out.exists(), "nothing written");
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .expect("list")
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
            .collect();
        assert!(left.is_empty(), "{left:?}");
        e
    };
    // The count table holds i64 values; a schema saying string cannot read them.
    let mut s = good.clone();
    s.operators[0].keyed_states[0].value = "string".into();
    let e = refused(&s, "column value");
    assert!(matches!(e, TableError::BadTable { row: Some(0), .. }), "{e}");
    assert!(e.to_string().contains("part-"), "names the file: {e}");
    // A namespace the table lacks.
    let mut s = good.clone();
    s.operators[0].keyed_states[0].namespace = "i64".into();
    refused(&s, "column namespace");
    // Another max parallelism: every key_group is wrong.
    let mut s = good.clone();
    s.operators[0].max_parallelism = 8;
    refused(&s, "column key_group");
    // A type that does not exist.
    let mut s = good.clone();
    s.operators[0].keyed_states[0].key = "text".into();
    refused(&s, "key");
    // A value state read from a list table: one key, several rows.
    let mut s = good.clone();
    s.operators[0].keyed_states[1].kind = "value".into();
    std::fs::rename(tables.join("op/count"), tables.join("op/count-aside")).expect("move");
    std::fs::rename(tables.join("op/recent"), tables.join("op/count")).expect("move");
    let mut s2 = s.clone();
    s2.operators[0].keyed_states[0].value = "string".into();
    s2.operators[0].keyed_states[0].namespace = "i64".into();
    s2.operators[0].keyed_states[0].ttl_ms = Some(60_000);
    let e = import_tables(&tables, &s2, &out, &ImportOptions::default(), &|_| {}).expect_err("duplicates");
    assert!(e.to_string().contains("two rows for one key"), "{e}");
    assert!(!out.exists());
}
