//! Library-level tests of offline migration: every fixture kind converts to a canonical
//! savepoint holding the same entries (byte-identical data files when nothing changes);
//! random edit sequences on random state agree with a model after restoring the output at a
//! random parallelism; bad edits and outputs are refused before anything is written.

use proptest::prelude::*;
use statekit_checkpoint::{RestoreMode, SnapshotWriter};
use statekit_core::storage::{LocalStorage, Storage};
use statekit_core::{
    key_group_for_key, BackendConfig, ErrorKind, KeyGroupRange, KeyedStateBackend, KeyedStateView, MemoryView,
    OperatorStateData, OperatorStateDescriptor, OperatorStateMode, OperatorStateSnapshot, OwnedEntry, StateDescriptor,
    TtlConfig, TypeSchema,
};
use statekit_migrate::{migrate, Edit, MigrateError, MigrateOptions, OutputFormat, Plan, PlanOptions};
use statekit_snapshot::Snapshot;
use statekit_snapshot::{open_keyed, BackendChoice, RestoreFrom};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/v1")
        .join(name)
}

/// (state name, key, namespace, user key, value, timestamp) of every keyed entry.
type Row = (String, Vec<u8>, Vec<u8>, Option<Vec<u8>>, Vec<u8>, Option<i64>);

/// Every keyed entry of operator `uid`, by state name, sorted.
fn keyed_rows(reader: &Snapshot, uid: &str) -> Vec<Row> {
    let max_p = reader.operator(uid).expect("operator").max_parallelism;
    let all = KeyGroupRange::all(max_p);
    let mut rows = Vec::new();
    for v in reader.keyed_views(uid, all).expect("views") {
        rows.extend(rows_of(v.as_ref(), all));
    }
    rows.sort();
    rows
}

fn rows_of(v: &dyn KeyedStateView, range: KeyGroupRange) -> Vec<Row> {
    let names: Vec<String> = v.states().iter().map(|d| d.name.clone()).collect();
    MemoryView::collect(v, range)
        .expect("collect")
        .entries()
        .iter()
        .map(|e| {
            (
                names[e.state as usize].clone(),
                e.key.clone(),
                e.namespace.clone(),
                e.user_key.clone(),
                e.value.clone(),
                e.timestamp,
            )
        })
        .collect()
}

/// Every operator-state element of operator `uid` as stored, by state name, sorted.
fn operator_rows(reader: &Snapshot, uid: &str) -> Vec<(String, Vec<u8>, Vec<u8>)> {
    let op = reader.operator(uid).expect("operator");
    let mut rows = Vec::new();
    for i in 0..op.parallelism {
        for (d, data) in reader.stored_operator_state(uid, i).expect("stored").states {
            match data {
                OperatorStateData::List(items) => rows.extend(items.into_iter().map(|v| (d.name.clone(), v, vec![]))),
                // One copy per subtask: compare one.
                OperatorStateData::Broadcast(m) if i == 0 => {
                    rows.extend(m.into_iter().map(|(k, v)| (d.name.clone(), k, v)))
                }
                OperatorStateData::Broadcast(_) => {}
            }
        }
    }
    rows.sort();
    rows
}

fn run(input: &Path, edits: &[Edit], output: &Path) -> Result<statekit_migrate::Summary, MigrateError> {
    let reader = Snapshot::open(input).expect("open");
    let plan = Plan::new(&reader, edits, PlanOptions::default())?;
    migrate(&reader, input, &plan, output, &MigrateOptions::default(), &|_| {})
}

#[test]
fn every_kind_converts_to_a_canonical_savepoint_with_the_same_entries() {
    let mut inputs = vec![
        (fixture("savepoint-basic"), "word-counter"),
        (
            fixture("changelog-checkpoint/c4a9e10f0c4a9e10f0c4a9e10f0c4a9e/chk-3"),
            "word-counter",
        ),
    ];
    if cfg!(feature = "rocksdb") {
        inputs.push((fixture("native-savepoint"), "word-counter"));
    }
    for (input, uid) in inputs {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = dir.path().join("out");
        run(&input, &[], &out).expect("convert");
        let (_, v) = statekit_snapshot::verify_path(&out).expect("verify");
        assert!(v.is_ok(), "{}: {:?}", input.display(), v.problems);
        let a = Snapshot::open(&input).expect("input");
        let b = Snapshot::open(&out).expect("output");
        assert_eq!(b.metadata().format.as_str(), "canonical");
        assert_eq!(keyed_rows(&a, uid), keyed_rows(&b, uid), "{}", input.display());
        assert_eq!(operator_rows(&a, uid), operator_rows(&b, uid), "{}", input.display());
        // Converting back through another parallelism changes nothing either.
        let out2 = dir.path().join("out2");
        let edits = [Edit::Parallelism {
            uid: uid.into(),
            parallelism: 3,
        }];
        run(&out, &edits, &out2).expect("rescale");
        let c = Snapshot::open(&out2).expect("rescaled");
        assert_eq!(keyed_rows(&a, uid), keyed_rows(&c, uid), "{} at 3", input.display());
        assert_eq!(c.operator(uid).expect("op").parallelism, 3);
    }
}

#[test]
fn canonical_to_canonical_with_the_same_options_is_byte_identical() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = dir.path().join("first");
    run(&fixture("savepoint-basic"), &[], &first).expect("convert");
    let second = dir.path().join("second");
    run(&first, &[], &second).expect("convert again");
    let files = |d: &Path| {
        let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(d)
            .expect("read_dir")
            .map(|e| e.expect("entry"))
            .filter(|e| e.file_name() != "_metadata")
            .map(|e| {
                (
                    e.file_name().to_string_lossy().into_owned(),
                    std::fs::read(e.path()).expect("read"),
                )
            })
            .collect();
        v.sort();
        v
    };
    let (a, b) = (files(&first), files(&second));
    assert!(!a.is_empty());
    assert_eq!(
        a, b,
        "the data files of a canonical savepoint converted with the same options"
    );
}

#[test]
fn bad_edits_and_outputs_are_refused_before_anything_is_written() {
    let input = fixture("savepoint-basic");
    let reader = Snapshot::open(&input).expect("open");
    let bad: Vec<(Vec<Edit>, &str)> = vec![
        (vec![Edit::DropOperator { uid: "nope".into() }], "no operator"),
        (
            vec![Edit::DropState {
                uid: "word-counter".into(),
                state: "nope".into(),
            }],
            "no state",
        ),
        (
            vec![Edit::RenameUid {
                from: "word-counter".into(),
                to: "enricher".into(),
            }],
            "exists",
        ),
        (
            vec![Edit::RenameState {
                uid: "word-counter".into(),
                from: "count".into(),
                to: "recent".into(),
            }],
            "exists",
        ),
        (
            vec![Edit::Parallelism {
                uid: "word-counter".into(),
                parallelism: 9,
            }],
            "outside 1..=8",
        ),
        (
            vec![Edit::Parallelism {
                uid: "word-counter".into(),
                parallelism: 0,
            }],
            "outside 1..=8",
        ),
        // Edits compose: after the rename the old uid is gone.
        (
            vec![
                Edit::RenameUid {
                    from: "word-counter".into(),
                    to: "counter".into(),
                },
                Edit::DropState {
                    uid: "word-counter".into(),
                    state: "count".into(),
                },
            ],
            "no operator",
        ),
        // Keys are kept or dropped in keyed state: not in an operator left with operator
        // state only.
        (
            vec![
                Edit::DropState {
                    uid: "enricher".into(),
                    state: "last-seen".into(),
                },
                Edit::KeepKeys {
                    uid: "enricher".into(),
                    keys: Arc::new(std::collections::BTreeSet::from([b"k".to_vec()])),
                },
            ],
            "no keyed state, only operator state (pending)",
        ),
        (
            vec![
                Edit::DropState {
                    uid: "enricher".into(),
                    state: "last-seen".into(),
                },
                Edit::DropKeys {
                    uid: "enricher".into(),
                    keys: Arc::new(std::collections::BTreeSet::new()),
                },
            ],
            "--drop-keys enricher",
        ),
    ];
    for (edits, words) in bad {
        let e = Plan::new(&reader, &edits, PlanOptions::default()).expect_err("refused");
        assert_eq!(e.kind(), ErrorKind::Caller, "{e}");
        assert!(e.to_string().contains(words), "{e}");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    // The output may not be the input, or inside it.
    let e = run(&input, &[], &input.join("out")).expect_err("inside the input");
    assert!(matches!(e, MigrateError::OutputIsInput { .. }), "{e}");
    // An existing output is refused without force; a directory that is not a snapshot is
    // never replaced.
    let out = dir.path().join("out");
    run(&input, &[], &out).expect("first");
    let e = run(&input, &[], &out).expect_err("exists");
    assert!(matches!(e, MigrateError::OutputExists { .. }), "{e}");
    let plan = Plan::new(&reader, &[], PlanOptions::default()).expect("plan");
    let force = MigrateOptions {
        force: true,
        threads: 2,
        shard: None,
    };
    migrate(&reader, &input, &plan, &out, &force, &|_| {}).expect("replaced");
    let other = dir.path().join("other");
    std::fs::create_dir(&other).expect("mkdir");
    std::fs::write(other.join("notes.txt"), b"mine").expect("write");
    let e = migrate(&reader, &input, &plan, &other, &force, &|_| {}).expect_err("not a snapshot");
    assert!(matches!(e, MigrateError::OutputNotReplaceable { .. }), "{e}");
    assert_eq!(std::fs::read(other.join("notes.txt")).expect("kept"), b"mine");
    // Nothing but the outputs themselves was left behind (no temporary directories).
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["other", "out"]);
}

#[test]
fn purge_expired_leaves_out_exactly_the_expired_data() {
    let input = fixture("savepoint-basic");
    let reader = Snapshot::open(&input).expect("open");
    let ttl: BTreeMap<String, TtlConfig> = reader
        .operator("word-counter")
        .expect("op")
        .keyed_states
        .iter()
        .filter_map(|d| Some((d.name.clone(), d.ttl?)))
        .collect();
    assert!(!ttl.is_empty(), "the fixture has TTL'd states");
    let rows = keyed_rows(&reader, "word-counter");
    let stamps: Vec<i64> = rows.iter().filter_map(|r| r.5).collect();
    // A "now" in the middle of the recorded timestamps plus the TTL keeps some, drops some.
    let now = stamps.iter().copied().min().expect("stamps") + 60_000;
    let expected: Vec<Row> = rows
        .iter()
        .filter(|r| match (ttl.get(&r.0), r.5) {
            (Some(t), Some(ts)) => !t.is_expired(ts, now),
            _ => true,
        })
        .cloned()
        .collect();
    assert!(expected.len() < rows.len() && !expected.is_empty());
    for format in output_formats() {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = dir.path().join("out");
        let plan = Plan::new(
            &reader,
            &[Edit::PurgeExpired],
            PlanOptions {
                now_ms: now,
                format,
                ..PlanOptions::default()
            },
        )
        .expect("plan");
        migrate(&reader, &input, &plan, &out, &MigrateOptions::default(), &|_| {}).expect("purge");
        let got = keyed_rows(&Snapshot::open(&out).expect("out"), "word-counter");
        assert_eq!(got, expected, "{format:?}");
    }
}

/// `convert --format native` of every kind, with every codec: the output is RocksDB's own
/// files, verifies, holds the input's entries (TTL timestamps too, none expired on the way,
/// though the fixture's are long past), restores into RocksDB backends at another
/// parallelism, and converts back to a canonical savepoint with the same entries.
#[cfg(feature = "rocksdb")]
#[test]
fn every_kind_converts_to_native_and_back_with_the_same_entries() {
    let inputs = [
        (fixture("savepoint-basic"), "word-counter"),
        (
            fixture("changelog-checkpoint/c4a9e10f0c4a9e10f0c4a9e10f0c4a9e/chk-3"),
            "word-counter",
        ),
        (fixture("native-savepoint"), "word-counter"),
    ];
    let codecs = [
        statekit_format::Compression::Lz4,
        statekit_format::Compression::None,
        statekit_format::Compression::Zstd { level: 3 },
    ];
    for ((input, uid), compression) in inputs.iter().zip(codecs) {
        let dir = tempfile::tempdir().expect("tempdir");
        let native = dir.path().join("native");
        let reader = Snapshot::open(input).expect("open");
        let plan = Plan::new(
            &reader,
            &[],
            PlanOptions {
                format: OutputFormat::Native,
                compression,
                ..PlanOptions::default()
            },
        )
        .expect("plan");
        let summary = migrate(&reader, input, &plan, &native, &MigrateOptions::default(), &|_| {}).expect("convert");
        let (_, v) = statekit_snapshot::verify_path(&native).expect("verify");
        assert!(v.is_ok(), "{}: {:?}", input.display(), v.problems);
        let out = Snapshot::open(&native).expect("native output");
        assert_eq!(out.metadata().format.as_str(), "native");
        let op = out.operator(uid).expect("op");
        assert!(op
            .subtasks
            .iter()
            .all(|s| s.keyed.native().is_some() && s.keyed.canonical().is_none()));
        let files = op.subtasks.iter().flat_map(|s| s.keyed.native()).flat_map(|h| &h.files);
        assert!(files.clone().any(|f| f.name.ends_with(".sst")));
        assert!(files
            .clone()
            .all(|f| f.file.scope == statekit_format::FileScope::Exclusive));
        assert!(
            summary.files as usize > files.count(),
            "the summary counts the native files"
        );
        let want = keyed_rows(&reader, uid);
        if input.ends_with("savepoint-basic") {
            let ttl = |name: &str| {
                reader
                    .operator(uid)
                    .ok()?
                    .keyed_states
                    .iter()
                    .find(|d| d.name == name)?
                    .ttl
            };
            let wall = PlanOptions::default().now_ms;
            assert!(
                want.iter()
                    .any(|r| matches!((ttl(&r.0), r.5), (Some(t), Some(ts)) if t.is_expired(ts, wall))),
                "the input has entries expired by the wall clock, which a conversion must keep"
            );
        }
        assert_eq!(keyed_rows(&out, uid), want, "{}", input.display());
        assert_eq!(operator_rows(&out, uid), operator_rows(&reader, uid));
        // Into RocksDB at parallelism 3 (native handles re-sliced by key group).
        let mut restored = Vec::new();
        for i in 0..3 {
            let config = BackendConfig::for_subtask(op.max_parallelism, 3, i).expect("config");
            let from = RestoreFrom {
                snapshot: &out,
                uid,
                mode: RestoreMode::NoClaim,
            };
            let choice = BackendChoice::RocksDb(statekit_rocksdb::RocksDbOptions::default());
            let mut b = open_keyed(&choice, config, None, Some(from)).expect("restore");
            let b = b.as_dyn();
            let range = b.key_group_range();
            let view = b.snapshot(1).expect("snapshot");
            restored.extend(rows_of(view.as_ref(), range));
        }
        restored.sort();
        // The restoring backend expires by its own clock: compare what has no TTL.
        let no_ttl = |rows: &[Row]| rows.iter().filter(|r| r.5.is_none()).cloned().collect::<Vec<_>>();
        assert_eq!(no_ttl(&restored), no_ttl(&want));
        // And back to canonical.
        let back = dir.path().join("back");
        run(&native, &[], &back).expect("back to canonical");
        let back = Snapshot::open(&back).expect("back");
        assert_eq!(back.metadata().format.as_str(), "canonical");
        assert_eq!(keyed_rows(&back, uid), want, "{} back", input.display());
        assert_eq!(operator_rows(&back, uid), operator_rows(&reader, uid));
    }
}

// ---------------------------------------------------------------------------------------
// Random state, random edits, a model.

const MAX_P: u32 = 16;

fn keyed_descs() -> Vec<StateDescriptor> {
    // Namespaces are bytes (the random entries have one-byte namespaces): verify decodes every
    // part by its schema.
    vec![
        StateDescriptor::value("v", TypeSchema::Bytes, TypeSchema::Bytes).with_namespace(TypeSchema::Bytes),
        StateDescriptor::list("l", TypeSchema::Bytes, TypeSchema::Bytes).with_namespace(TypeSchema::Bytes),
        StateDescriptor::map("m", TypeSchema::Bytes, TypeSchema::Bytes, TypeSchema::Bytes)
            .with_namespace(TypeSchema::Bytes),
    ]
}

fn op_descs() -> Vec<OperatorStateDescriptor> {
    let mk = |name: &str, mode| OperatorStateDescriptor {
        name: name.into(),
        mode,
        value_schema: TypeSchema::Bytes,
        key_schema: (mode == OperatorStateMode::Broadcast).then_some(TypeSchema::Bytes),
    };
    vec![
        mk("ol", OperatorStateMode::List),
        mk("ou", OperatorStateMode::Union),
        mk("ob", OperatorStateMode::Broadcast),
    ]
}

/// (uid, state name).
type Named = (String, String);
/// An operator-state element (and empty), or a broadcast key and value.
type Pair = (Vec<u8>, Vec<u8>);
/// (key, namespace, user key, value).
type KeyedRow = (Vec<u8>, Vec<u8>, Option<Vec<u8>>, Vec<u8>);

/// The model: per (uid, state name), the keyed rows (key, ns, user key, value) and the
/// operator-state rows, as multisets.
#[derive(Clone, Debug, Default, PartialEq)]
struct Model {
    keyed: BTreeMap<Named, Vec<KeyedRow>>,
    operator: BTreeMap<Named, Vec<Pair>>,
    parallelism: BTreeMap<String, u32>,
    /// The input's operator ids and the uid each operator has now (`SetUid` finds operators
    /// by the id they had in the input, whatever they were renamed to since).
    uids_by_id: BTreeMap<String, String>,
}

impl Model {
    fn normalize(mut self) -> Self {
        self.keyed.values_mut().for_each(|v| v.sort());
        self.operator.values_mut().for_each(|v| v.sort());
        self.keyed.retain(|_, v| !v.is_empty());
        self.operator.retain(|_, v| !v.is_empty());
        self
    }

    fn apply(&mut self, e: &Edit) {
        match e {
            Edit::RenameUid { from, to } => {
                let f = |k: &(String, String)| {
                    Some(if &k.0 == from {
                        (to.clone(), k.1.clone())
                    } else {
                        k.clone()
                    })
                };
                rekey(&mut self.keyed, &f);
                rekey(&mut self.operator, &f);
                if let Some(p) = self.parallelism.remove(from) {
                    self.parallelism.insert(to.clone(), p);
                }
                for u in self.uids_by_id.values_mut().filter(|u| *u == from) {
                    u.clone_from(to);
                }
            }
            Edit::SetUid { operator_id, uid } => {
                if let Some(from) = self.uids_by_id.get(&operator_id.to_ascii_lowercase()).cloned() {
                    self.apply(&Edit::RenameUid { from, to: uid.clone() });
                }
            }
            Edit::DropOperator { uid } => {
                let f = |k: &(String, String)| (&k.0 != uid).then(|| k.clone());
                rekey(&mut self.keyed, &f);
                rekey(&mut self.operator, &f);
                self.parallelism.remove(uid);
                self.uids_by_id.retain(|_, u| u != uid);
            }
            Edit::DropState { uid, state } => {
                let f = |k: &(String, String)| (!(&k.0 == uid && &k.1 == state)).then(|| k.clone());
                rekey(&mut self.keyed, &f);
                rekey(&mut self.operator, &f);
            }
            Edit::RenameState { uid, from, to } => {
                let f = |k: &(String, String)| {
                    Some(if &k.0 == uid && &k.1 == from {
                        (uid.clone(), to.clone())
                    } else {
                        k.clone()
                    })
                };
                rekey(&mut self.keyed, &f);
                rekey(&mut self.operator, &f);
            }
            Edit::Parallelism { uid, parallelism } => {
                self.parallelism.insert(uid.clone(), *parallelism);
            }
            Edit::KeepKeys { uid, keys } => {
                for ((u, _), rows) in self.keyed.iter_mut() {
                    if u == uid {
                        rows.retain(|r| keys.contains(&r.0));
                    }
                }
            }
            Edit::DropKeys { uid, keys } => {
                for ((u, _), rows) in self.keyed.iter_mut() {
                    if u == uid {
                        rows.retain(|r| !keys.contains(&r.0));
                    }
                }
            }
            // The input has no TTL, so a purge keeps everything; max parallelism moves keys
            // between key groups, which the model does not see.
            _ => {}
        }
    }
}

/// Renames (or, `None`, drops) the keys of `m` by `f`.
fn rekey<V>(m: &mut BTreeMap<Named, V>, f: &dyn Fn(&Named) -> Option<Named>) {
    let old = std::mem::take(m);
    for (k, v) in old {
        if let Some(k2) = f(&k) {
            m.insert(k2, v);
        }
    }
}

/// How the proptest's input savepoint is made: by which backend, in which format.
#[derive(Clone, Copy, Debug)]
enum InputKind {
    /// Heap backend, canonical savepoint.
    Heap,
    /// RocksDB backend, canonical savepoint.
    RocksDbCanonical,
    /// RocksDB backend, native savepoint (its own files).
    RocksDbNative,
}

fn output_formats() -> Vec<OutputFormat> {
    if cfg!(feature = "rocksdb") {
        vec![OutputFormat::Canonical, OutputFormat::Native]
    } else {
        vec![OutputFormat::Canonical]
    }
}

fn input_kinds() -> Vec<InputKind> {
    if cfg!(feature = "rocksdb") {
        vec![InputKind::Heap, InputKind::RocksDbCanonical, InputKind::RocksDbNative]
    } else {
        vec![InputKind::Heap]
    }
}

/// The backend an input subtask's state is written into.
enum InputBackend {
    Heap(statekit_hashmap::HashMapBackend),
    RocksDb(Box<statekit_rocksdb::RocksDbBackend>),
}

impl InputBackend {
    /// A backend of `kind` for `config`.
    fn new(kind: InputKind, config: BackendConfig) -> Self {
        match kind {
            InputKind::Heap => InputBackend::Heap(statekit_hashmap::HashMapBackend::new(config).expect("heap")),
            InputKind::RocksDbCanonical | InputKind::RocksDbNative => InputBackend::RocksDb(Box::new(
                statekit_rocksdb::RocksDbBackend::new(config, statekit_rocksdb::RocksDbOptions::default())
                    .expect("rocksdb"),
            )),
        }
    }

    fn as_dyn(&mut self) -> &mut dyn KeyedStateBackend {
        match self {
            InputBackend::Heap(b) => b,
            InputBackend::RocksDb(b) => b.as_mut(),
        }
    }
}

/// Writes operators "a" (keyed v, l, m; operator ol, ou, ob) and "b" (keyed v) at
/// parallelism `p` from `entries` (state, key, ns, user key, value) and `elements`: the keyed
/// state is written into backends of `kind` (puts, list adds, map puts), one per subtask, and
/// the savepoint taken from them.
fn write_input(
    dir: &Path,
    p: u32,
    kind: InputKind,
    entries: &[(u32, u16, u8, u8, u8)],
    elements: &[(usize, u8, u8)],
) -> Model {
    let storage: Arc<dyn Storage> = Arc::new(LocalStorage::new(dir));
    let writer =
        SnapshotWriter::new(storage, "in", statekit_format::SnapshotKind::Savepoint, 7, "job").expect("writer");
    let mut model = Model::default();
    let mut owned = Vec::new();
    for &(state, key, ns, uk, v) in entries {
        let state = state % 3;
        let key = key.to_be_bytes().to_vec();
        let user_key = (state == 2).then(|| vec![uk]);
        let e = OwnedEntry {
            key_group: key_group_for_key(&key, MAX_P),
            state,
            key: key.clone(),
            namespace: vec![ns % 2],
            user_key: user_key.clone(),
            value: vec![v],
            timestamp: None,
        };
        owned.push(e);
    }
    // One value per (key, ns) and one map value per user key (the first one given); list
    // elements all kept.
    let mut seen = std::collections::BTreeSet::new();
    owned.retain(|e| e.state == 1 || seen.insert((e.state, e.key.clone(), e.namespace.clone(), e.user_key.clone())));
    let names = ["v", "l", "m"];
    for e in &owned {
        model
            .keyed
            .entry(("a".into(), names[e.state as usize].into()))
            .or_default()
            .push((e.key.clone(), e.namespace.clone(), e.user_key.clone(), e.value.clone()));
        if e.state == 0 {
            model.keyed.entry(("b".into(), "v".into())).or_default().push((
                e.key.clone(),
                e.namespace.clone(),
                None,
                e.value.clone(),
            ));
        }
    }
    writer.register_operator("a", p, MAX_P).expect("register");
    writer.register_operator("b", p, MAX_P).expect("register");
    let mut broadcast = BTreeMap::new();
    for &(s, k, v) in elements.iter().filter(|e| e.0 % 3 == 2) {
        broadcast.insert(vec![k], vec![s as u8, v]);
    }
    for (k, v) in &broadcast {
        model
            .operator
            .entry(("a".into(), "ob".into()))
            .or_default()
            .push((k.clone(), v.clone()));
    }
    for i in 0..p {
        let range = KeyGroupRange::for_subtask(MAX_P, p, i);
        let mut snap = OperatorStateSnapshot::default();
        let descs = op_descs();
        for (si, d) in descs.iter().enumerate().take(2) {
            let items: Vec<Vec<u8>> = elements
                .iter()
                .enumerate()
                .filter(|(j, e)| e.0 % 3 == si && *j as u32 % p == i)
                .map(|(_, e)| vec![e.1, e.2])
                .collect();
            for it in &items {
                model
                    .operator
                    .entry(("a".into(), d.name.clone()))
                    .or_default()
                    .push((it.clone(), vec![]));
            }
            snap.states.push((d.clone(), OperatorStateData::List(items)));
        }
        snap.states
            .push((descs[2].clone(), OperatorStateData::Broadcast(broadcast.clone())));
        for (uid, states) in [("a", 3usize), ("b", 1)] {
            let config = BackendConfig::for_subtask(MAX_P, p, i).expect("config");
            let mut owner = InputBackend::new(kind, config);
            let backend = owner.as_dyn();
            let handles: Vec<_> = keyed_descs()
                .into_iter()
                .take(states)
                .map(|d| {
                    backend
                        .register(d, statekit_core::StateFunctions::None)
                        .expect("register")
                })
                .collect();
            for e in owned
                .iter()
                .filter(|e| range.contains(e.key_group) && (e.state as usize) < states)
            {
                let h = handles[e.state as usize];
                match (e.state, &e.user_key) {
                    (0, _) => backend.put(h, &e.key, &e.namespace, &e.value),
                    (1, _) => backend.add(h, &e.key, &e.namespace, &e.value),
                    (_, Some(uk)) => backend.map_put(h, &e.key, &e.namespace, uk, &e.value),
                    _ => unreachable!("map entries have user keys"),
                }
                .expect("write state");
            }
            let op_state = (uid == "a").then_some(&snap);
            write_backend_subtask(&writer, uid, i, kind, owner, op_state);
        }
    }
    writer.finish().expect("finish");
    for uid in ["a", "b"] {
        model.parallelism.insert(uid.into(), p);
        model
            .uids_by_id
            .insert(statekit_core::OperatorId::from_uid(uid).to_string(), uid.into());
    }
    model
}

/// Records subtask `i` of `uid` from `backend`: its canonical snapshot, or for
/// [`InputKind::RocksDbNative`] its native files.
fn write_backend_subtask(
    writer: &SnapshotWriter,
    uid: &str,
    i: u32,
    kind: InputKind,
    mut backend: InputBackend,
    op_state: Option<&OperatorStateSnapshot>,
) {
    if let (InputKind::RocksDbNative, InputBackend::RocksDb(rocks)) = (kind, &mut backend) {
        let descs = rocks.descriptors();
        let cut = rocks.native_snapshot(7).expect("native cut");
        let handle = cut
            .upload(&writer.native_target(uid, i).expect("target"))
            .expect("upload");
        writer
            .add_native_subtask(uid, i, handle, descs, op_state, false)
            .expect("record native");
    } else {
        let view = backend.as_dyn().snapshot(7).expect("snapshot");
        writer
            .write_subtask(uid, i, Some(view.as_ref()), op_state, false)
            .expect("write");
    }
}

/// The model of what `dir` holds, read back by restoring every operator at parallelism
/// `restore_p` into heap backends, or (`rocksdb`) RocksDB backends.
fn read_model(dir: &Path, restore_p: u32, rocksdb: bool) -> Model {
    let reader = Snapshot::open(dir).expect("open output");
    let mut model = Model::default();
    for op in &reader.metadata().operators {
        model.parallelism.insert(op.uid.clone(), op.parallelism);
        for i in 0..restore_p {
            let config = BackendConfig::for_subtask(op.max_parallelism, restore_p, i).expect("config");
            let from = RestoreFrom {
                snapshot: &reader,
                uid: &op.uid,
                mode: RestoreMode::NoClaim,
            };
            #[cfg(feature = "rocksdb")]
            let choice = if rocksdb {
                BackendChoice::RocksDb(statekit_rocksdb::RocksDbOptions::default())
            } else {
                BackendChoice::HashMap
            };
            #[cfg(not(feature = "rocksdb"))]
            let choice = {
                assert!(!rocksdb, "a RocksDB restore needs the rocksdb feature");
                BackendChoice::HashMap
            };
            let mut b = open_keyed(&choice, config, None, Some(from)).expect("restore");
            let b = b.as_dyn();
            let range = b.key_group_range();
            let view = b.snapshot(1).expect("snapshot");
            for r in rows_of(view.as_ref(), range) {
                model
                    .keyed
                    .entry((op.uid.clone(), r.0))
                    .or_default()
                    .push((r.1, r.2, r.3, r.4));
            }
        }
        for (name, a, b) in operator_rows(&reader, &op.uid) {
            model.operator.entry((op.uid.clone(), name)).or_default().push((a, b));
        }
    }
    model
}

fn edit_strategy() -> impl Strategy<Value = Edit> {
    let uid = prop::sample::select(vec!["a", "b", "c"]);
    let state = prop::sample::select(vec!["v", "l", "m", "ol", "ou", "ob", "x"]);
    prop_oneof![
        (uid.clone(), uid.clone()).prop_map(|(f, t)| Edit::RenameUid {
            from: f.into(),
            to: t.into()
        }),
        uid.clone().prop_map(|u| Edit::DropOperator { uid: u.into() }),
        (uid.clone(), state.clone()).prop_map(|(u, s)| Edit::DropState {
            uid: u.into(),
            state: s.into()
        }),
        (uid.clone(), state.clone(), state).prop_map(|(u, f, t)| Edit::RenameState {
            uid: u.into(),
            from: f.into(),
            to: t.into()
        }),
        (uid.clone(), 1u32..=MAX_P).prop_map(|(u, p)| Edit::Parallelism {
            uid: u.into(),
            parallelism: p
        }),
        // Multiples of the input's 16 up to 4x split key groups without the sort; 8 and 80
        // take the sort (restores go up to parallelism 6).
        (uid.clone(), prop::sample::select(vec![8u32, 32, 48, 64, 80])).prop_map(|(u, m)| Edit::MaxParallelism {
            uid: u.into(),
            max_parallelism: m
        }),
        // Ids of the input's operators (and of one it does not have), in either case.
        (prop::sample::select(vec!["a", "b", "c"]), uid.clone(), any::<bool>()).prop_map(|(of, u, upper)| {
            let id = statekit_core::OperatorId::from_uid(of).to_string();
            Edit::SetUid {
                operator_id: if upper { id.to_uppercase() } else { id },
                uid: u.into(),
            }
        }),
        Just(Edit::PurgeExpired),
        (uid.clone(), key_set()).prop_map(|(u, keys)| Edit::KeepKeys { uid: u.into(), keys }),
        (uid, key_set()).prop_map(|(u, keys)| Edit::DropKeys { uid: u.into(), keys }),
    ]
}

/// Some of the keys `write_input` writes (`u16`s below 200, big-endian).
fn key_set() -> impl Strategy<Value = Arc<std::collections::BTreeSet<Vec<u8>>>> {
    prop::collection::btree_set(0u16..200, 0..150)
        .prop_map(|s| Arc::new(s.into_iter().map(|k| k.to_be_bytes().to_vec()).collect()))
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("MIGRATE_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(24),
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_edits_agree_with_the_model(
        p in 1u32..=5,
        entries in prop::collection::vec((0u32..3, 0u16..200, 0u8..2, 0u8..4, any::<u8>()), 0..300),
        elements in prop::collection::vec((0usize..3, any::<u8>(), any::<u8>()), 0..20),
        edits in prop::collection::vec(edit_strategy(), 0..6),
        restore_p in 1u32..=6,
        memory in prop::sample::select(vec![256usize, 4096, 1 << 20]),
        kind in prop::sample::select(input_kinds()),
        format in prop::sample::select(output_formats()),
        restore_rocksdb in any::<bool>(),
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut model = write_input(dir.path(), p, kind, &entries, &elements);
        let input = dir.path().join("in");
        let reader = Snapshot::open(&input).expect("open");
        // The edits the plan accepts, one by one, are the model's; a refused edit is skipped
        // (and must be refused for a reason the model sees).
        let mut accepted = Vec::new();
        for e in &edits {
            let mut trial = accepted.clone();
            trial.push(e.clone());
            match Plan::new(&reader, &trial, PlanOptions { memory, format, ..PlanOptions::default() }) {
                Ok(_) => {
                    model.apply(e);
                    accepted = trial;
                }
                Err(err) => prop_assert_eq!(err.kind(), ErrorKind::Caller, "{}", err),
            }
        }
        let plan = Plan::new(&reader, &accepted, PlanOptions { memory, format, ..PlanOptions::default() }).expect("plan");
        let out = dir.path().join("out");
        let threads = 1 + (p as usize % 3);
        migrate(&reader, &input, &plan, &out, &MigrateOptions { force: false, threads, shard: None }, &|_| {}).expect("migrate");
        let (_, v) = statekit_snapshot::verify_path(&out).expect("verify");
        prop_assert!(v.is_ok(), "{:?}", v.problems);
        // Native output restores into RocksDB only.
        let rocksdb = (restore_rocksdb && cfg!(feature = "rocksdb")) || format == OutputFormat::Native;
        let got = read_model(&out, restore_p, rocksdb).normalize();
        let want = model.normalize();
        prop_assert_eq!(&got.parallelism, &want.parallelism);
        prop_assert_eq!(&got.keyed, &want.keyed);
        prop_assert_eq!(&got.operator, &want.operator);
    }
}

#[test]
fn link_shares_the_unchanged_files_and_rewrites_the_rest() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let input = dir.path().join("in");
    run(&fixture("savepoint-basic"), &[], &input).expect("convert");
    let reader = Snapshot::open(&input).expect("open");
    let edits = [
        Edit::RenameUid {
            from: "word-counter".into(),
            to: "counter".into(),
        },
        // A changed operator is rewritten even with link.
        Edit::Parallelism {
            uid: "enricher".into(),
            parallelism: 1,
        },
    ];
    let plan = Plan::new(
        &reader,
        &edits,
        PlanOptions {
            link: true,
            ..PlanOptions::default()
        },
    )
    .expect("plan");
    let linked: Vec<(&str, bool)> = plan.operators.iter().map(|o| (o.uid.as_str(), o.linked)).collect();
    assert_eq!(linked, [("counter", true), ("enricher", false)]);
    assert!(plan.linked_bytes() > 0 && plan.input_bytes() > 0);
    let out = dir.path().join("out");
    migrate(&reader, &input, &plan, &out, &MigrateOptions::default(), &|_| {}).expect("migrate");
    let (_, v) = statekit_snapshot::verify_path(&out).expect("verify");
    assert!(v.is_ok(), "{:?}", v.problems);
    let inodes = |d: &Path| -> std::collections::BTreeSet<u64> {
        std::fs::read_dir(d)
            .expect("read_dir")
            .map(|e| e.expect("entry").metadata().expect("metadata").ino())
            .collect()
    };
    let shared = inodes(&input).intersection(&inodes(&out)).count();
    assert_eq!(
        shared, 4,
        "the renamed operator's 2 keyed and 2 operator files are links"
    );
    let b = Snapshot::open(&out).expect("out");
    assert_eq!(keyed_rows(&reader, "word-counter"), keyed_rows(&b, "counter"));
    assert_eq!(operator_rows(&reader, "word-counter"), operator_rows(&b, "counter"));
    assert_eq!(keyed_rows(&reader, "enricher"), keyed_rows(&b, "enricher"));
}

#[test]
fn set_uid_names_an_operator_by_its_id() {
    let input = fixture("savepoint-basic");
    let reader = Snapshot::open(&input).expect("open");
    let id = reader.operator("enricher").expect("op").operator_id.to_string();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out");
    let edits = [Edit::SetUid {
        operator_id: id.to_uppercase(),
        uid: "enrich".into(),
    }];
    run(&input, &edits, &out).expect("set uid");
    let b = Snapshot::open(&out).expect("out");
    assert_eq!(keyed_rows(&reader, "enricher"), keyed_rows(&b, "enrich"));
    assert_eq!(
        b.operator("enrich").expect("renamed").operator_id,
        statekit_core::OperatorId::from_uid("enrich")
    );
    let e = Plan::new(
        &reader,
        &[Edit::SetUid {
            operator_id: "00".into(),
            uid: "x".into(),
        }],
        PlanOptions::default(),
    )
    .expect_err("unknown id");
    assert!(matches!(e, MigrateError::UnknownOperatorId { .. }), "{e}");
    let e = Plan::new(
        &reader,
        &[Edit::SetUid {
            operator_id: id,
            uid: "word-counter".into(),
        }],
        PlanOptions::default(),
    )
    .expect_err("taken");
    assert!(matches!(e, MigrateError::UidTaken { .. }), "{e}");
}

#[test]
fn max_parallelism_moves_every_key_to_its_key_group_exactly_once_also_when_spilling() {
    let dir = tempfile::tempdir().expect("tempdir");
    let entries: Vec<(u32, u16, u8, u8, u8)> = (0..3000u32)
        .map(|i| {
            (
                i % 3,
                (i * 7 % 2000) as u16,
                (i % 2) as u8,
                (i % 5) as u8,
                (i % 251) as u8,
            )
        })
        .collect();
    let elements: Vec<(usize, u8, u8)> = (0..30u8).map(|i| (usize::from(i % 3), i, i.wrapping_mul(3))).collect();
    write_input(dir.path(), 3, InputKind::Heap, &entries, &elements);
    let input = dir.path().join("in");
    let reader = Snapshot::open(&input).expect("open");
    let before = keyed_rows(&reader, "a");
    // Native output (where built) on the spilling cases: the re-bucketed stream bulk-loaded.
    let native = output_formats().last().copied().unwrap_or_default();
    // 32 and 64 (2x and 4x the input's 16) split each key group without sorting; 128 (8x)
    // and 7 sort.
    // (memory, new max parallelism, output format, whether the sort must spill)
    for (memory, new_max, format, spills) in [
        (1usize << 30, 128u32, OutputFormat::Canonical, Some(false)),
        (2048, 128, native, Some(true)),
        (2048, 32, OutputFormat::Canonical, Some(false)),
        (2048, 64, native, Some(false)),
        (512, 7, OutputFormat::Canonical, Some(true)),
        (4096, 1, native, None),
    ] {
        let spill = dir.path().join(format!("spill-{memory}-{new_max}"));
        std::fs::create_dir(&spill).expect("spill dir");
        let mut edits = vec![Edit::MaxParallelism {
            uid: "a".into(),
            max_parallelism: new_max,
        }];
        if new_max < 3 {
            edits.push(Edit::Parallelism {
                uid: "a".into(),
                parallelism: new_max,
            });
        }
        let plan = Plan::new(
            &reader,
            &edits,
            PlanOptions {
                memory,
                spill_dir: Some(spill.clone()),
                format,
                ..PlanOptions::default()
            },
        )
        .expect("plan");
        let out = dir.path().join(format!("out-{memory}-{new_max}"));
        let summary = migrate(&reader, &input, &plan, &out, &MigrateOptions::default(), &|_| {}).expect("migrate");
        if let Some(spills) = spills {
            assert_eq!(
                summary.spilled_runs > 0,
                spills,
                "memory {memory}, max parallelism {new_max}: {} sorted runs spilled",
                summary.spilled_runs
            );
        }
        assert_eq!(
            std::fs::read_dir(&spill).expect("spill").count(),
            0,
            "spill runs (and native scratch databases) are removed"
        );
        let (_, v) = statekit_snapshot::verify_path(&out).expect("verify");
        assert!(v.is_ok(), "{:?}", v.problems);
        let b = Snapshot::open(&out).expect("out");
        assert_eq!(b.operator("a").expect("a").max_parallelism, new_max);
        // Every key exactly once, in its key group under the new max parallelism.
        assert_eq!(
            keyed_rows(&b, "a"),
            before,
            "memory {memory}, max parallelism {new_max}"
        );
        for view in b.keyed_views("a", KeyGroupRange::all(new_max)).expect("views") {
            let range = view.key_group_range();
            for e in MemoryView::collect(view.as_ref(), range).expect("collect").entries() {
                assert_eq!(e.key_group, key_group_for_key(&e.key, new_max));
            }
        }
        // Operator state is kept as it was; the other operator is untouched.
        assert_eq!(operator_rows(&reader, "a"), operator_rows(&b, "a"));
        assert_eq!(keyed_rows(&reader, "b"), keyed_rows(&b, "b"));
    }
    let e = Plan::new(
        &reader,
        &[Edit::MaxParallelism {
            uid: "a".into(),
            max_parallelism: 2,
        }],
        PlanOptions::default(),
    )
    .expect_err("parallelism 3 > 2");
    assert!(matches!(e, MigrateError::BadParallelism { .. }), "{e}");
    let e = Plan::new(
        &reader,
        &[Edit::MaxParallelism {
            uid: "a".into(),
            max_parallelism: 40_000,
        }],
        PlanOptions::default(),
    )
    .expect_err("too many key groups");
    assert!(matches!(e, MigrateError::BadMaxParallelism { .. }), "{e}");
    let e = Plan::new(
        &reader,
        &[Edit::MaxParallelism {
            uid: "a".into(),
            max_parallelism: 0,
        }],
        PlanOptions::default(),
    )
    .expect_err("no key groups");
    assert!(matches!(e, MigrateError::BadMaxParallelism { .. }), "{e}");
}

#[test]
fn a_key_outside_its_key_group_is_an_error_when_key_groups_split() {
    let dir = tempfile::tempdir().expect("tempdir");
    let storage: Arc<dyn Storage> = Arc::new(LocalStorage::new(dir.path()));
    let writer =
        SnapshotWriter::new(storage, "in", statekit_format::SnapshotKind::Savepoint, 7, "job").expect("writer");
    writer.register_operator("a", 1, MAX_P).expect("register");
    let key = b"misplaced".to_vec();
    let wrong = (key_group_for_key(&key, MAX_P) + 1) % MAX_P;
    let entry = |key: Vec<u8>, key_group: u32| OwnedEntry {
        key_group,
        state: 0,
        key,
        namespace: vec![],
        user_key: None,
        value: vec![1],
        timestamp: None,
    };
    let right = b"placed".to_vec();
    let mut entries = vec![
        entry(key, wrong),
        entry(right.clone(), key_group_for_key(&right, MAX_P)),
    ];
    entries.sort_by_key(|e| e.key_group);
    let states = vec![StateDescriptor::value("v", TypeSchema::Bytes, TypeSchema::Bytes)];
    let view = MemoryView::new(MAX_P, KeyGroupRange::all(MAX_P), states, entries);
    writer.write_subtask("a", 0, Some(&view), None, false).expect("write");
    writer.finish().expect("finish");
    let input = dir.path().join("in");
    let reader = Snapshot::open(&input).expect("open");
    let plan = Plan::new(
        &reader,
        &[Edit::MaxParallelism {
            uid: "a".into(),
            max_parallelism: 2 * MAX_P,
        }],
        PlanOptions::default(),
    )
    .expect("plan");
    let out = dir.path().join("out");
    let e = migrate(&reader, &input, &plan, &out, &MigrateOptions::default(), &|_| {}).expect_err("damaged");
    assert!(e.to_string().contains(&format!("key group {wrong}")), "{e}");
    assert!(e.to_string().contains("damaged"), "{e}");
    assert!(!out.exists(), "nothing written");
}
