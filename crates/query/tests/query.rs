//! SQL over snapshots: the fixture's states, operator states and listings answer as `dump`
//! and `show` do; `EXPLAIN` shows a key or key-group predicate narrowing the scan to those
//! key groups, and a storage that counts what readers read proves a point lookup reads one
//! key group's bytes — under 1% of the snapshot; bad SQL is the caller's error.

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use statekit_checkpoint::SnapshotWriter;
use statekit_core::storage::{Blob, HookedStorage, LocalStorage, Storage, StorageError, StorageHooks};
use statekit_core::{BackendConfig, ErrorKind, KeyedStateBackend, StateDescriptor, StateFunctions, TypeSchema};
use statekit_query::{RecordBatch, SnapshotQuery};
use statekit_snapshot::Snapshot;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/v1")
        .join(name)
}

fn one_i64(batches: &[RecordBatch]) -> i64 {
    let b = batches.iter().find(|b| b.num_rows() > 0).expect("a row");
    b.column(0).as_primitive::<Int64Type>().value(0)
}

fn text(batches: &[RecordBatch]) -> String {
    datafusion::arrow::util::pretty::pretty_format_batches(batches)
        .expect("format")
        .to_string()
}

#[test]
fn the_fixture_answers_sql() {
    let reader = Snapshot::open(fixture("savepoint-basic")).expect("open");
    let q = SnapshotQuery::new(reader).expect("session");
    assert_eq!(
        one_i64(&q.sql(r#"SELECT count(*) FROM "word-counter"."count""#).expect("count")),
        8
    );
    assert_eq!(
        one_i64(&q.sql(r#"SELECT count(*) FROM "word-counter"."recent""#).expect("count")),
        15
    );
    let n = q
        .sql("SELECT count(*) FROM states WHERE scope = 'keyed'")
        .expect("states");
    assert_eq!(one_i64(&n), 6);
    let ops = text(
        &q.sql("SELECT uid, parallelism, max_parallelism, finished FROM operators ORDER BY uid")
            .expect("operators"),
    );
    assert!(
        ops.contains("| enricher     | 3           | 8               | true     |"),
        "{ops}"
    );
    let rules = text(
        &q.sql(r#"SELECT subtask, key, value FROM "word-counter"."rules" ORDER BY subtask, key"#)
            .expect("broadcast"),
    );
    assert!(rules.contains("subtask"), "{rules}");
    // A point lookup equals the full scan filtered.
    let all = text(
        &q.sql(r#"SELECT key, value FROM "word-counter"."count" ORDER BY key"#)
            .expect("all"),
    );
    let first_key = all
        .lines()
        .nth(3)
        .and_then(|l| l.split('|').nth(1))
        .expect("a key")
        .trim()
        .to_string();
    let one = q
        .sql(&format!(
            r#"SELECT key, value FROM "word-counter"."count" WHERE key = '{first_key}'"#
        ))
        .expect("lookup");
    assert_eq!(one.iter().map(RecordBatch::num_rows).sum::<usize>(), 1);
    let e = q.sql("SELECT nope FROM operators").expect_err("unknown column");
    assert_eq!(e.kind(), ErrorKind::Caller, "{e}");
    let e = q.sql("SELEKT 1").expect_err("bad SQL");
    assert_eq!(e.kind(), ErrorKind::Caller, "{e}");
}

/// Counts the bytes readers say they read (each key group's section is released after it
/// is read) and the files opened.
#[derive(Debug, Default)]
struct Counting {
    released: Arc<AtomicU64>,
}

struct CountingBlob {
    inner: Arc<dyn Blob>,
    released: Arc<AtomicU64>,
}

impl Blob for CountingBlob {
    fn bytes(&self) -> &[u8] {
        self.inner.bytes()
    }
    fn release(&self, offset: usize, len: usize) {
        self.released.fetch_add(len as u64, Ordering::Relaxed);
        self.inner.release(offset, len);
    }
    fn truncated(&self) -> bool {
        self.inner.truncated()
    }
}

impl StorageHooks for Counting {
    fn open(&self, inner: &dyn Storage, path: &str) -> Result<Arc<dyn Blob>, StorageError> {
        Ok(Arc::new(CountingBlob {
            inner: inner.open(path)?,
            released: self.released.clone(),
        }))
    }
}

/// A savepoint of 20 000 keys over 128 key groups, 2 subtasks.
fn big_savepoint(dir: &Path) -> String {
    let storage: Arc<dyn Storage> = Arc::new(LocalStorage::new(dir));
    let writer = SnapshotWriter::new_savepoint(storage, "", "00112233445566778899aabbccddeeff", 3).expect("writer");
    writer.register_operator("counter", 2, 128).expect("register");
    for i in 0..2u32 {
        let mut b = statekit_hashmap::HashMapBackend::new(BackendConfig::for_subtask(128, 2, i).expect("cfg"))
            .expect("backend");
        let h = b
            .register(
                StateDescriptor::value("count", TypeSchema::Utf8, TypeSchema::I64),
                StateFunctions::None,
            )
            .expect("register");
        for k in 0..20_000u32 {
            let key = format!("key-{k:05}");
            let kg = statekit_core::key_group_for_key(key.as_bytes(), 128);
            if b.key_group_range().contains(kg) {
                b.put(h, key.as_bytes(), b"", &i64::from(k).to_be_bytes()).expect("put");
            }
        }
        let view = b.snapshot(1).expect("snapshot");
        writer
            .write_subtask("counter", i, Some(view.as_ref()), None, false)
            .expect("write");
    }
    let name = writer.dir().to_string();
    writer.finish().expect("finish");
    name
}

#[test]
fn key_predicates_read_only_their_key_groups() {
    let dir = tempfile::tempdir().expect("tempdir");
    let name = big_savepoint(dir.path());
    let hooks = Counting::default();
    let released = hooks.released.clone();
    let storage: Arc<dyn Storage> = Arc::new(HookedStorage::new(Arc::new(LocalStorage::new(dir.path())), hooks));
    let reader = Snapshot::from_statekit_reader(
        statekit_checkpoint::SnapshotReader::open_in(storage, &name, None).expect("open"),
    );
    let total: u64 = reader
        .metadata()
        .operators
        .iter()
        .flat_map(|o| &o.subtasks)
        .filter_map(|s| s.keyed.canonical())
        .map(|f| f.size)
        .sum();
    let q = SnapshotQuery::new(reader).expect("session");

    // count(*) reads everything.
    assert_eq!(
        one_i64(&q.sql(r#"SELECT count(*) FROM "counter"."count""#).expect("count")),
        20_000
    );
    let full = released.swap(0, Ordering::Relaxed);
    assert!(
        full * 10 > total * 9,
        "a full scan reads (nearly) every byte: {full} of {total}"
    );

    // The point lookup: EXPLAIN names the one key group, and one key group is read.
    let kg = statekit_core::key_group_for_key(b"key-04242", 128);
    let plan = text(
        &q.sql(r#"EXPLAIN SELECT value FROM "counter"."count" WHERE key = 'key-04242'"#)
            .expect("explain"),
    );
    assert!(plan.contains(&format!("key_groups=1 of 128 [{kg}]")), "{plan}");
    let groups_before = q.stats().key_groups();
    let v = q
        .sql(r#"SELECT value FROM "counter"."count" WHERE key = 'key-04242'"#)
        .expect("lookup");
    assert_eq!(one_i64(&v), 4242);
    assert_eq!(q.stats().key_groups() - groups_before, 1);
    let point = released.swap(0, Ordering::Relaxed);
    assert!(
        point > 0 && point * 100 < total,
        "a point lookup reads under 1%: {point} of {total}"
    );

    // key_group predicates: a range, an IN list, combined with OR.
    let plan = text(
        &q.sql(r#"EXPLAIN SELECT count(*) FROM "counter"."count" WHERE key_group BETWEEN 10 AND 12 OR key_group IN (100, 101)"#)
            .expect("explain"),
    );
    assert!(plan.contains("key_groups=5 of 128 [10, 11, 12, 100, 101]"), "{plan}");
    let n = one_i64(
        &q.sql(r#"SELECT count(*) FROM "counter"."count" WHERE key_group < 64"#)
            .expect("half"),
    );
    let want = (0..20_000)
        .filter(|k| statekit_core::key_group_for_key(format!("key-{k:05}").as_bytes(), 128) < 64)
        .count() as i64;
    assert_eq!(n, want);
    // A predicate on the value prunes nothing (and still answers).
    let plan = text(
        &q.sql(r#"EXPLAIN SELECT key FROM "counter"."count" WHERE value = 7"#)
            .expect("explain"),
    );
    assert!(plan.contains("key_groups=128 of 128"), "{plan}");
}
