//! Model-based test of the key-group scheme travelling with the data (issue 41, point 2):
//! for each scheme (statekit's rule, Apache Flink's `murmurHash(hashCode)`) and each key type
//! it places, random keys go into heap backends configured with that scheme, a savepoint is
//! taken, and then through every statekit path — convert (canonical and native), rewrite to
//! a new max parallelism (the split path at ×2 and ×3, the external sort at ×5 and ÷2),
//! export to Parquet and import back (at the same and at another max parallelism), SQL
//! pushdown and a restore through `open_keyed` (into heap backends; native files into
//! RocksDB in the fixed cases) — every entry of every output is in the key group its scheme gives at that
//! output's max parallelism, the output's `_metadata` records the scheme, every key is found
//! by `get` in the subtask its scheme names, and the set of entries is the model's (a
//! `BTreeMap`).

use proptest::prelude::*;
use statekit_checkpoint::{RestoreMode, SnapshotWriter};
use statekit_core::schema::{encode_value, Value};
use statekit_core::storage::{LocalStorage, Storage};
use statekit_core::{
    keygroup::subtask_for_key_group, BackendConfig, KeyGroupRange, KeyGroupScheme, KeyedStateBackend, MemoryView,
    StateDescriptor, StateFunctions, TypeSchema,
};
use statekit_hashmap::HashMapBackend;
use statekit_migrate::{migrate, Edit, JobSchema, MigrateOptions, OutputFormat, Plan, PlanOptions};
use statekit_query::arrow::array::AsArray;
use statekit_query::arrow::datatypes::Int64Type;
use statekit_query::SnapshotQuery;
use statekit_snapshot::Snapshot;
use statekit_snapshot::{open_keyed, BackendChoice, RestoreFrom};
use statekit_table::{export_snapshot, import_tables, ExportOptions, ImportOptions};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const UID: &str = "op";

/// The key types a test case draws keys of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KeyType {
    Utf8,
    I32,
    I64,
    Bool,
    F32,
    F64,
    /// statekit's scheme only.
    Bytes,
    /// statekit's scheme only: `(i32, string)`.
    Tuple,
}

impl KeyType {
    fn schema(self) -> TypeSchema {
        match self {
            KeyType::Utf8 => TypeSchema::Utf8,
            KeyType::I32 => TypeSchema::I32,
            KeyType::I64 => TypeSchema::I64,
            KeyType::Bool => TypeSchema::Bool,
            KeyType::F32 => TypeSchema::F32,
            KeyType::F64 => TypeSchema::F64,
            KeyType::Bytes => TypeSchema::Bytes,
            KeyType::Tuple => TypeSchema::Tuple(vec![TypeSchema::I32, TypeSchema::Utf8]),
        }
    }

    /// Random keys of this type, edge cases (non-ASCII text, NaN with and without sign and
    /// payload, -0.0, infinities, subnormals, `MIN`/`MAX`, values whose high and low halves
    /// fold in `Long.hashCode`) weighted in.
    fn values(self) -> BoxedStrategy<Value> {
        let text = prop_oneof![
            "\\PC{0,12}",
            "[a-c]{1,2}",
            "[éüß日本語🦀Ωж]{1,5}",
            Just(String::new()),
            Just("a".to_string()),
        ];
        match self {
            KeyType::Utf8 => text.prop_map(Value::Str).boxed(),
            KeyType::I32 => prop_oneof![
                any::<i32>(),
                -40i32..40,
                Just(i32::MIN),
                Just(i32::MAX),
                Just(1231),
                Just(1237)
            ]
            .prop_map(Value::I32)
            .boxed(),
            KeyType::I64 => prop_oneof![
                any::<i64>(),
                -40i64..40,
                Just(i64::MIN),
                Just(i64::MAX),
                Just(1i64 << 32),
                Just(-(1i64 << 32)),
                Just((7i64 << 32) | 7),
                (0i64..8).prop_map(|x| x << 32),
            ]
            .prop_map(Value::I64)
            .boxed(),
            KeyType::Bool => any::<bool>().prop_map(Value::Bool).boxed(),
            KeyType::F32 => prop_oneof![
                any::<f32>(),
                Just(f32::NAN),
                Just(-f32::NAN),
                Just(f32::from_bits(0x7fc0_0001)),
                Just(f32::from_bits(0x7f80_0001)),
                Just(0.0f32),
                Just(-0.0f32),
                Just(f32::INFINITY),
                Just(f32::NEG_INFINITY),
                Just(f32::MIN_POSITIVE),
                Just(f32::from_bits(1)),
                (-20i16..20).prop_map(|x| f32::from(x) / 4.0),
            ]
            .prop_map(Value::F32)
            .boxed(),
            KeyType::F64 => prop_oneof![
                any::<f64>(),
                Just(f64::NAN),
                Just(-f64::NAN),
                Just(f64::from_bits(0x7ff8_0000_0000_0001)),
                Just(f64::from_bits(0x7ff0_0000_0000_0001)),
                Just(0.0f64),
                Just(-0.0f64),
                Just(f64::INFINITY),
                Just(f64::NEG_INFINITY),
                Just(f64::MIN_POSITIVE),
                Just(f64::from_bits(1)),
                Just(f64::from_bits(1 << 32)),
                (-20i16..20).prop_map(|x| f64::from(x) / 4.0),
            ]
            .prop_map(Value::F64)
            .boxed(),
            KeyType::Bytes => proptest::collection::vec(any::<u8>(), 0..12)
                .prop_map(Value::Bytes)
                .boxed(),
            KeyType::Tuple => (prop_oneof![any::<i32>(), -3i32..3], text)
                .prop_map(|(i, s)| Value::Tuple(vec![Value::I32(i), Value::Str(s)]))
                .boxed(),
        }
    }

    /// A SQL literal for `key = …` of this type (`None`: no literal written here).
    fn sql_literal(self, v: &Value) -> Option<String> {
        match v {
            Value::Str(s) => Some(format!("'{}'", s.replace('\'', "''"))),
            Value::I32(i) => Some(i.to_string()),
            // i64::MIN is not a literal (its negation overflows): write it as a cast string.
            Value::I64(i) if *i == i64::MIN => Some(format!("CAST('{i}' AS BIGINT)")),
            Value::I64(i) => Some(i.to_string()),
            Value::Bool(b) => Some(b.to_string()),
            // A NaN with a sign or payload has no literal.
            Value::F32(f) if f.is_nan() && f.to_bits() != f32::NAN.to_bits() => None,
            Value::F32(f) => Some(format!("CAST('{f:?}' AS REAL)")),
            Value::F64(f) if f.is_nan() && f.to_bits() != f64::NAN.to_bits() => None,
            Value::F64(f) => Some(format!("CAST('{f:?}' AS DOUBLE)")),
            Value::Bytes(b) => Some(format!(
                "X'{}'",
                b.iter().map(|x| format!("{x:02X}")).collect::<String>()
            )),
            _ => None,
        }
    }

    /// Whether the query's pushdown computes the key group of a key of this type (the
    /// others scan every key group and filter: DataFusion simplifies `key = true` to `key`
    /// and `key = false` to `NOT key` before the scan sees it, and floats and tuples are not
    /// pruned).
    fn pruned(self) -> bool {
        matches!(self, KeyType::Utf8 | KeyType::I32 | KeyType::I64 | KeyType::Bytes)
    }
}

/// (state, key, user key) → value of every keyed entry.
type Model = BTreeMap<(String, Vec<u8>, Option<Vec<u8>>), Vec<u8>>;

fn descriptors(key: &TypeSchema) -> Vec<StateDescriptor> {
    vec![
        StateDescriptor::value("v", key.clone(), TypeSchema::I64),
        StateDescriptor::map("m", key.clone(), TypeSchema::I32, TypeSchema::I64),
    ]
}

fn i64_bytes(v: i64) -> Vec<u8> {
    v.to_be_bytes().to_vec()
}

/// One test case: a scheme, a key type, keys with their values, the max parallelism and
/// the parallelisms of the savepoint and of the restores.
#[derive(Clone, Debug)]
struct Case {
    scheme: KeyGroupScheme,
    key_type: KeyType,
    keys: Vec<(Value, i64, Vec<i32>)>,
    max_p: u32,
    p: u32,
    restore_p: u32,
}

impl Case {
    fn key_schema(&self) -> TypeSchema {
        self.key_type.schema()
    }

    fn key_group(&self, key: &[u8], max_p: u32) -> u32 {
        self.scheme
            .key_group(key, &self.key_schema(), max_p)
            .unwrap_or_else(|e| panic!("{:?} places {key:?}: {e}", self.scheme))
    }
}

/// Writes the savepoint of `case` under `dir` (heap backends configured with the case's
/// scheme, each key put into the subtask that owns its key group under that scheme) and
/// returns it with its model.
fn write_savepoint(dir: &Path, case: &Case) -> (PathBuf, Model) {
    let schema = case.key_schema();
    let mut backends: Vec<HashMapBackend> = (0..case.p)
        .map(|i| {
            let cfg = BackendConfig::for_subtask(case.max_p, case.p, i)
                .expect("config")
                .with_key_group_scheme(case.scheme);
            HashMapBackend::new(cfg).expect("backend")
        })
        .collect();
    let handles: Vec<Vec<_>> = backends
        .iter_mut()
        .map(|b| {
            descriptors(&schema)
                .into_iter()
                .map(|d| b.register(d, StateFunctions::None).expect("register"))
                .collect()
        })
        .collect();
    let mut model = Model::new();
    for (key, value, user_keys) in &case.keys {
        let k = encode_value(&schema, key).expect("encode key");
        let kg = case.key_group(&k, case.max_p);
        let o = subtask_for_key_group(case.max_p, case.p, kg) as usize;
        let b = &mut backends[o];
        b.put(handles[o][0], &k, b"", &i64_bytes(*value)).expect("put");
        model.insert(("v".into(), k.clone(), None), i64_bytes(*value));
        for uk in user_keys {
            let ukb = uk.to_be_bytes().to_vec();
            let v = i64_bytes(value.wrapping_add(i64::from(*uk)));
            b.map_put(handles[o][1], &k, b"", &ukb, &v).expect("map put");
            model.insert(("m".into(), k.clone(), Some(ukb)), v);
        }
    }
    let storage: Arc<dyn Storage> = Arc::new(LocalStorage::new(dir));
    let writer = SnapshotWriter::new_savepoint(storage, "", "00112233445566778899aabbccddeeff", 1).expect("writer");
    writer.register_operator(UID, case.p, case.max_p).expect("register");
    for (i, b) in backends.iter_mut().enumerate() {
        let view = b.snapshot(1).expect("snapshot");
        assert_eq!(
            view.key_group_scheme(),
            case.scheme,
            "the backend's view reports its scheme"
        );
        writer
            .write_subtask(UID, i as u32, Some(view.as_ref()), None, false)
            .expect("write subtask");
    }
    let name = writer.dir().to_string();
    writer.finish().expect("finish");
    (dir.join(name), model)
}

/// Checks the snapshot at `path`: its operator records `case`'s scheme and `max_p`, every
/// entry is in the key group the scheme gives at `max_p`, and the entries are `model`'s.
fn check_output(what: &str, path: &Path, case: &Case, max_p: u32, model: &Model) {
    let reader = Snapshot::open(path).unwrap_or_else(|e| panic!("{what}: open: {e}"));
    let op = reader.operator(UID).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(op.key_group_scheme, case.scheme, "{what}: _metadata records the scheme");
    assert_eq!(op.max_parallelism, max_p, "{what}: max parallelism");
    let mut got = Model::new();
    for view in reader
        .keyed_views(UID, KeyGroupRange::all(max_p))
        .unwrap_or_else(|e| panic!("{what}: {e}"))
    {
        assert_eq!(view.key_group_scheme(), case.scheme, "{what}: the view's scheme");
        let names: Vec<String> = view.states().iter().map(|d| d.name.clone()).collect();
        let range = view.key_group_range();
        for e in MemoryView::collect(view.as_ref(), range)
            .unwrap_or_else(|err| panic!("{what}: {err}"))
            .entries()
        {
            assert_eq!(
                e.key_group,
                case.key_group(&e.key, max_p),
                "{what}: key {:?} is in key group {} of {max_p}, its {} key group is another",
                e.key,
                e.key_group,
                case.scheme
            );
            // The operator record and the reader place the key there too.
            let schema = case.key_schema();
            assert_eq!(
                op.key_group_of(&e.key, &schema),
                Ok(e.key_group),
                "{what}: key_group_of"
            );
            assert_eq!(
                reader.key_group_of(UID, &e.key, &schema),
                Some(e.key_group),
                "{what}: Snapshot::key_group_of"
            );
            let slot = (names[e.state as usize].clone(), e.key.clone(), e.user_key.clone());
            assert!(
                got.insert(slot, e.value.clone()).is_none(),
                "{what}: key {:?} twice",
                e.key
            );
        }
    }
    assert_eq!(&got, model, "{what}: the entries");
}

/// Restores operator "op" of `path` into fresh heap backends (`open_keyed`, which takes the
/// snapshot's scheme; the configs say statekit's) at the case's restore parallelism, and
/// reads every key of the model back with `get` from the subtask its scheme puts it in.
fn check_restore(what: &str, path: &Path, case: &Case, max_p: u32, model: &Model) {
    check_restore_into(&BackendChoice::HashMap, what, path, case, max_p, model);
}

/// [`check_restore`] into the backend `choice`.
fn check_restore_into(choice: &BackendChoice, what: &str, path: &Path, case: &Case, max_p: u32, model: &Model) {
    let reader = Snapshot::open(path).expect("open");
    let schema = case.key_schema();
    let mut backends = Vec::new();
    for i in 0..case.restore_p {
        let config = BackendConfig::for_subtask(max_p, case.restore_p, i).expect("config");
        let from = RestoreFrom {
            snapshot: &reader,
            uid: UID,
            mode: RestoreMode::NoClaim,
        };
        let mut b = open_keyed(choice, config, None, Some(from))
            .unwrap_or_else(|e| panic!("{what}: restore subtask {i}: {e}"))
            .into_dyn();
        assert_eq!(
            b.key_group_scheme(),
            case.scheme,
            "{what}: the restored backend's scheme"
        );
        let handles: Vec<_> = descriptors(&schema)
            .into_iter()
            .map(|d| b.register(d, StateFunctions::None).expect("register"))
            .collect();
        backends.push((b, handles));
    }
    let mut out = Vec::new();
    for ((state, key, user_key), value) in model {
        let kg = case.key_group(key, max_p);
        let (b, h) = &mut backends[subtask_for_key_group(max_p, case.restore_p, kg) as usize];
        let found = match user_key {
            None => b.get(h[0], key, b"", &mut out),
            Some(uk) => b.map_get(h[1], key, b"", uk, &mut out),
        }
        .unwrap_or_else(|e| panic!("{what}: get {state} {key:?}: {e}"));
        assert!(found, "{what}: {state} of key {key:?} is not found after the restore");
        assert_eq!(&out, value, "{what}: {state} of key {key:?}");
    }
}

/// Rewrites (or converts, no edits) `input` to `out`.
fn rewrite(input: &Path, out: &Path, edits: &[Edit], options: PlanOptions) -> statekit_migrate::Summary {
    let reader = Snapshot::open(input).expect("open");
    let plan = Plan::new(&reader, edits, options).expect("plan");
    migrate(&reader, input, &plan, out, &MigrateOptions::default(), &|_| {}).expect("migrate")
}

/// SQL point lookups on `path`: for sampled keys of the model, `WHERE key = <literal>`
/// returns exactly that key's row, in the scheme's key group, and (for the key types the
/// pushdown prunes) `EXPLAIN` names that one key group.
fn check_query(what: &str, path: &Path, case: &Case, max_p: u32, model: &Model) {
    let reader = Snapshot::open(path).expect("open");
    let q = SnapshotQuery::new(reader).expect("session");
    let values: BTreeMap<Vec<u8>, &Value> = case
        .keys
        .iter()
        .map(|(k, _, _)| (encode_value(&case.key_schema(), k).expect("encode"), k))
        .collect();
    // The first and the last key (two SQL sessions' statements are most of this test's time).
    let sampled = values.iter().take(1).chain(values.iter().skip(1).last());
    for (key, value) in sampled {
        let Some(literal) = case.key_type.sql_literal(value) else {
            continue;
        };
        let want = &model[&("v".to_string(), key.clone(), None)];
        let kg = case.key_group(key, max_p);
        let sql = format!(r#"SELECT value, CAST(key_group AS BIGINT) FROM "{UID}"."v" WHERE key = {literal}"#);
        let batches = q.sql(&sql).unwrap_or_else(|e| panic!("{what}: {sql}: {e}"));
        let rows: Vec<(i64, i64)> = batches
            .iter()
            .flat_map(|b| {
                let (v, g) = (
                    b.column(0).as_primitive::<Int64Type>(),
                    b.column(1).as_primitive::<Int64Type>(),
                );
                (0..b.num_rows()).map(move |i| (v.value(i), g.value(i)))
            })
            .collect();
        let want_value = i64::from_be_bytes(want.as_slice().try_into().expect("8 bytes"));
        assert_eq!(
            rows,
            vec![(want_value, i64::from(kg))],
            "{what}: {sql} returns the key's one row, in its {} key group",
            case.scheme
        );
        if case.key_type.pruned() {
            let plan = q
                .sql(&format!("EXPLAIN {sql}"))
                .unwrap_or_else(|e| panic!("{what}: EXPLAIN {sql}: {e}"));
            let text = statekit_query::arrow::util::pretty::pretty_format_batches(&plan)
                .expect("format")
                .to_string();
            assert!(
                text.contains(&format!("key_groups=1 of {max_p} [{kg}]")),
                "{what}: {sql} reads the one key group {kg} of {max_p}:\n{text}"
            );
        }
    }
}

fn run(case: &Case) {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let (sp, model) = write_savepoint(d, case);
    let m = case.max_p;
    check_output("savepoint", &sp, case, m, &model);
    check_restore("savepoint", &sp, case, m, &model);
    check_query("savepoint", &sp, case, m, &model);

    // convert: canonical, and native RocksDB files.
    let canonical = d.join("canonical");
    rewrite(&sp, &canonical, &[], PlanOptions::default());
    check_output("convert", &canonical, case, m, &model);
    check_restore("convert", &canonical, case, m, &model);
    let native = d.join("native");
    let options = PlanOptions {
        format: OutputFormat::Native,
        ..PlanOptions::default()
    };
    rewrite(&sp, &native, &[], options);
    check_output("convert --format native", &native, case, m, &model);

    // rewrite to a new max parallelism: ×2 and ×3 split each key group; ×5 (past the split
    // factor) and ÷2 re-bucket every key by the external sort (with a one-byte budget: its
    // runs spill once a sort thread holds more than 16 entries).
    for (new_m, memory) in [(2 * m, 256 << 20), (3 * m, 256 << 20), (5 * m, 1), (m / 2, 256 << 20)] {
        let what = format!("rewrite --max-parallelism {new_m}");
        let out = d.join(format!("max-{new_m}"));
        rewrite_max_parallelism(&sp, &out, new_m, memory);
        check_output(&what, &out, case, new_m, &model);
        check_restore(&what, &out, case, new_m, &model);
        if new_m == 3 * m {
            check_query(&what, &out, case, new_m, &model);
        }
    }
}

/// Rewrites operator "op" of `input` to `new_m` key groups, sorting with `memory` bytes.
fn rewrite_max_parallelism(input: &Path, out: &Path, new_m: u32, memory: usize) -> statekit_migrate::Summary {
    let options = PlanOptions {
        memory,
        ..PlanOptions::default()
    };
    let edits = [Edit::MaxParallelism {
        uid: UID.into(),
        max_parallelism: new_m,
    }];
    rewrite(input, out, &edits, options)
}

/// Export to Parquet, the schema through its JSON (`statekit schema --json`), and import at
/// the same and at another max parallelism.
fn run_import(case: &Case) {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let (sp, model) = write_savepoint(d, case);
    let m = case.max_p;
    let tables = d.join("tables");
    let reader = Snapshot::open(&sp).expect("open");
    export_snapshot(&reader, &tables, &ExportOptions::default(), &|_| {}).expect("export");
    let json = serde_json::to_string(&JobSchema::of_snapshot(&reader).expect("schema")).expect("schema json");
    assert_eq!(
        json.contains(r#""key_group_scheme":"flink""#),
        case.scheme == KeyGroupScheme::Flink,
        "the schema names Flink's scheme (statekit's is the default, left out): {json}"
    );
    let schema: JobSchema = serde_json::from_str(&json).expect("schema back");
    assert_eq!(schema.operators[0].key_group_scheme, case.scheme);
    for new_m in [m, 2 * m + 1] {
        let what = format!("import --max-parallelism {new_m}");
        let out = d.join(format!("imported-{new_m}"));
        let options = ImportOptions {
            max_parallelism: Some(new_m),
            ..ImportOptions::default()
        };
        import_tables(&tables, &schema, &out, &options, &|_| {}).unwrap_or_else(|e| panic!("{what}: {e}"));
        check_output(&what, &out, case, new_m, &model);
        check_restore(&what, &out, case, new_m, &model);
    }
}

/// Cases of one scheme and key type: 1..24 distinct-or-not keys with up to two map entries
/// each, max parallelism 8, 16 or 128, parallelism 1..=3, restore parallelism 1..=4.
fn cases(scheme: KeyGroupScheme, key_type: KeyType) -> impl Strategy<Value = Case> {
    let key = (
        key_type.values(),
        any::<i64>(),
        proptest::collection::vec(-3i32..3, 0..3),
    );
    (
        proptest::collection::vec(key, 1..24),
        prop_oneof![Just(8u32), Just(16), Just(128)],
        1u32..=3,
        1u32..=4,
    )
        .prop_map(move |(keys, max_p, p, restore_p)| Case {
            scheme,
            key_type,
            keys,
            max_p,
            p,
            restore_p,
        })
}

/// Per scheme and key type: `$name` through every path but import, `$import` through export
/// and import.
macro_rules! scheme_tests {
    ($($name:ident, $import:ident: $scheme:ident, $key:ident;)*) => {
        proptest! {
            #![proptest_config(ProptestConfig { cases: 2, failure_persistence: None, ..ProptestConfig::default() })]
            $(
                #[test]
                fn $name(case in cases(KeyGroupScheme::$scheme, KeyType::$key)) {
                    run(&case);
                }

                #[test]
                fn $import(case in cases(KeyGroupScheme::$scheme, KeyType::$key)) {
                    run_import(&case);
                }
            )*
        }
    };
}

scheme_tests! {
    flink_utf8, flink_utf8_export_import: Flink, Utf8;
    flink_i32, flink_i32_export_import: Flink, I32;
    flink_i64, flink_i64_export_import: Flink, I64;
    flink_bool, flink_bool_export_import: Flink, Bool;
    flink_f32, flink_f32_export_import: Flink, F32;
    flink_f64, flink_f64_export_import: Flink, F64;
    statekit_utf8, statekit_utf8_export_import: Statekit, Utf8;
    statekit_i32, statekit_i32_export_import: Statekit, I32;
    statekit_i64, statekit_i64_export_import: Statekit, I64;
    statekit_bool, statekit_bool_export_import: Statekit, Bool;
    statekit_f32, statekit_f32_export_import: Statekit, F32;
    statekit_f64, statekit_f64_export_import: Statekit, F64;
    statekit_bytes, statekit_bytes_export_import: Statekit, Bytes;
    statekit_tuple, statekit_tuple_export_import: Statekit, Tuple;
}

/// The example of the issue: the String key "a", which Flink puts in key group 81 of 128
/// (statekit's rule: 50), with a few more keys.
fn key_a_case() -> Case {
    Case {
        scheme: KeyGroupScheme::Flink,
        key_type: KeyType::Utf8,
        keys: ["a", "b", "grüße", "日本", "émoji-😀"]
            .iter()
            .enumerate()
            .map(|(i, k)| (Value::Str(k.to_string()), i as i64 + 2, vec![1]))
            .collect(),
        max_p: 128,
        p: 2,
        restore_p: 3,
    }
}

/// Flink keeps "a" in key group 81 of 128 through convert, rewrite and restore, and the SQL
/// lookup finds it there.
#[test]
fn flink_string_a_stays_in_key_group_81() {
    let case = key_a_case();
    assert_eq!(case.key_group(b"a", 128), 81);
    assert_eq!(
        KeyGroupScheme::Statekit
            .key_group(b"a", &TypeSchema::Utf8, 128)
            .expect("kg"),
        50
    );
    run(&case);
    check_native_restore_into_rocksdb(&case);
}

/// Converts the savepoint of `case` to native RocksDB files and restores them into RocksDB
/// backends, whose lookups place keys by the snapshot's scheme too (slow: a RocksDB
/// instance per subtask, so not in every random case).
fn check_native_restore_into_rocksdb(case: &Case) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (sp, model) = write_savepoint(dir.path(), case);
    let native = dir.path().join("native");
    let options = PlanOptions {
        format: OutputFormat::Native,
        ..PlanOptions::default()
    };
    rewrite(&sp, &native, &[], options);
    let rocksdb = BackendChoice::RocksDb(statekit_rocksdb::RocksDbOptions::default());
    check_restore_into(&rocksdb, "convert --format native", &native, case, case.max_p, &model);
    check_query("convert --format native", &native, case, case.max_p, &model);
}

/// Native files of Flink-keyed integer and float keys restore into RocksDB too.
#[test]
fn flink_native_files_restore_into_rocksdb() {
    for key_type in [KeyType::I64, KeyType::F32] {
        let keys = (-20i32..20)
            .map(|i| {
                let v = match key_type {
                    KeyType::I64 => Value::I64(i64::from(i) << 32 | 5),
                    _ => Value::F32(if i == 0 { -0.0 } else { 1.0 / i as f32 }),
                };
                (v, i64::from(i), vec![i % 2])
            })
            .collect();
        let case = Case {
            scheme: KeyGroupScheme::Flink,
            key_type,
            keys,
            max_p: 32,
            p: 3,
            restore_p: 2,
        };
        check_native_restore_into_rocksdb(&case);
    }
}

/// ... and through export and import (this failed until 589104f: import's `UniqueView`
/// did not forward `KeyedStateView::key_group_scheme`, so the writer, told Flink's scheme,
/// refused its subtasks: "its keys are in flink key groups, but a subtask's are in statekit
/// key groups").
#[test]
fn flink_string_a_stays_in_key_group_81_through_export_and_import() {
    run_import(&key_a_case());
}

/// The external sort of a new max parallelism spills its runs to disk and reads them back
/// merged: with Flink's rule, every key still lands in its Flink key group.
#[test]
fn flink_keys_through_a_spilling_sort() {
    for key_type in [KeyType::Utf8, KeyType::I64, KeyType::F64] {
        let case = Case {
            scheme: KeyGroupScheme::Flink,
            key_type,
            keys: (0..300i32)
                .map(|i| {
                    let v = match key_type {
                        KeyType::Utf8 => Value::Str(format!("k{i}-ü")),
                        KeyType::I64 => Value::I64(i64::from(i) << 31),
                        _ => Value::F64(f64::from(i) / 3.0),
                    };
                    (v, i64::from(i), vec![i % 3])
                })
                .collect(),
            max_p: 16,
            p: 3,
            restore_p: 2,
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let (sp, model) = write_savepoint(dir.path(), &case);
        for new_m in [7, 128] {
            let out = dir.path().join(format!("max-{new_m}"));
            let summary = rewrite_max_parallelism(&sp, &out, new_m, 1);
            assert!(summary.spilled_runs > 0, "{key_type:?} to {new_m}: the sort spills");
            let what = format!("{key_type:?}: rewrite --max-parallelism {new_m}");
            check_output(&what, &out, &case, new_m, &model);
            check_restore(&what, &out, &case, new_m, &model);
        }
    }
}

/// A point lookup of a boolean key reads only that key's key group, as one of a string or
/// integer key does — though DataFusion simplifies `key = true` to `key` and `key = false` to
/// `NOT key` before the filter reaches the scan (it read every key group before the pruning
/// learnt those forms).
#[test]
fn boolean_key_lookup_reads_one_key_group() {
    for scheme in [KeyGroupScheme::Flink, KeyGroupScheme::Statekit] {
        let case = Case {
            scheme,
            key_type: KeyType::Bool,
            keys: vec![(Value::Bool(true), 1, vec![]), (Value::Bool(false), 2, vec![])],
            max_p: 16,
            p: 2,
            restore_p: 1,
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let (sp, _) = write_savepoint(dir.path(), &case);
        let q = SnapshotQuery::new(Snapshot::open(&sp).expect("open")).expect("session");
        for b in [true, false] {
            let kg = case.key_group(&[u8::from(b)], 16);
            let plan = q
                .sql(&format!(r#"EXPLAIN SELECT value FROM "{UID}"."v" WHERE key = {b}"#))
                .expect("explain");
            let text = statekit_query::arrow::util::pretty::pretty_format_batches(&plan)
                .expect("format")
                .to_string();
            assert!(
                text.contains(&format!("key_groups=1 of 16 [{kg}]")),
                "{scheme:?}: key = {b} reads key group {kg} only:\n{text}"
            );
        }
    }
}
