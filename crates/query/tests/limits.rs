//! A session's rules and limits: read-only by default (DDL, DML, `COPY`, `SET` refused by
//! name, no file as a table, nothing written), everything with `unrestricted`; a statement
//! past its memory limit fails with `MemoryLimit`, one past its timeout with `Timeout`,
//! both soon and with the session still usable.

use statekit_core::ErrorKind;
use statekit_query::{QueryError, QueryOptions, SnapshotQuery};
use statekit_snapshot::Snapshot;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/v1")
        .join(name)
}

fn session(options: QueryOptions) -> SnapshotQuery {
    let reader = Snapshot::open(fixture("savepoint-basic")).expect("open");
    SnapshotQuery::with_options(reader, options).expect("session")
}

fn rows(q: &SnapshotQuery, sql: &str) -> usize {
    q.sql(sql).expect(sql).iter().map(|b| b.num_rows()).sum()
}

#[test]
fn a_default_session_is_read_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("copied.csv");
    let q = session(QueryOptions::default());
    let refused = [
        (
            format!("COPY (SELECT 1) TO '{}' STORED AS CSV", out.display()),
            "COPY … TO",
        ),
        (
            "CREATE EXTERNAL TABLE t STORED AS CSV LOCATION '/etc/passwd'".to_string(),
            "CREATE EXTERNAL TABLE",
        ),
        ("CREATE VIEW v AS SELECT * FROM operators".to_string(), "CREATE VIEW"),
        ("CREATE TABLE t AS SELECT 1".to_string(), "CREATE MEMORY TABLE"),
        ("DROP TABLE operators".to_string(), "DROP TABLE"),
        ("INSERT INTO operators SELECT * FROM operators".to_string(), "INSERT"),
        ("SET datafusion.runtime.memory_limit = '100G'".to_string(), "SET"),
        (
            format!("EXPLAIN COPY (SELECT 1) TO '{}' STORED AS CSV", out.display()),
            "COPY … TO",
        ),
    ];
    for (sql, what) in &refused {
        match q.sql(sql) {
            Err(e @ QueryError::ReadOnly { .. }) => {
                let text = e.to_string();
                assert!(text.starts_with(what), "{sql}: {text}");
                assert!(text.contains("read-only"), "{sql}: {text}");
                assert_eq!(e.kind(), ErrorKind::Caller, "{sql}");
            }
            other => panic!("{sql}: {other:?}"),
        }
    }
    assert!(!out.exists(), "COPY wrote {}", out.display());
    // A path is no table.
    for sql in [
        "SELECT * FROM '/etc/passwd'",
        "SELECT * FROM 'file:///etc/passwd'",
        "SELECT * FROM read_csv('/etc/passwd')",
    ] {
        let e = q.sql(sql).expect_err(sql);
        assert_eq!(e.kind(), ErrorKind::Caller, "{sql}: {e}");
        assert!(!e.to_string().contains("root:"), "{sql}: {e}");
    }
    // The tables are still there (DROP did nothing) and queries run.
    assert_eq!(rows(&q, "SELECT * FROM operators"), 2);
    assert_eq!(rows(&q, "SELECT * FROM generate_series(1, 10)"), 10);
}

#[test]
fn an_unrestricted_session_reads_and_writes_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("operators.csv");
    let q = session(QueryOptions {
        unrestricted: true,
        ..QueryOptions::default()
    });
    q.sql(&format!(
        "COPY (SELECT uid FROM operators ORDER BY uid) TO '{}' STORED AS CSV",
        out.display()
    ))
    .expect("COPY");
    let text = std::fs::read_to_string(&out).expect("written");
    assert!(text.contains("enricher"), "{text}");
    q.sql(&format!(
        "CREATE EXTERNAL TABLE copied STORED AS CSV LOCATION '{}' OPTIONS ('format.has_header' 'true')",
        out.display()
    ))
    .expect("CREATE EXTERNAL TABLE");
    assert_eq!(rows(&q, "SELECT * FROM copied"), 2);
    assert_eq!(rows(&q, &format!("SELECT * FROM '{}'", out.display())), 2);
}

#[test]
fn a_statement_past_its_memory_limit_fails_soon() {
    let q = session(QueryOptions {
        memory_limit: 32 << 20,
        ..QueryOptions::default()
    });
    let started = Instant::now();
    // A hash join's build side of 100 million rows (about 2 GB): it cannot spill.
    let e = q
        .sql(
            "SELECT count(*) FROM generate_series(1, 100000000) a \
             JOIN generate_series(1, 100000000) b ON a.value = b.value",
        )
        .expect_err("over the limit");
    assert!(
        matches!(e, QueryError::MemoryLimit { limit, .. } if limit == 32 << 20),
        "{e:?}"
    );
    let text = e.to_string();
    assert!(text.contains("memory limit of 32 MiB"), "{text}");
    assert_eq!(e.kind(), ErrorKind::Caller);
    assert!(started.elapsed() < Duration::from_secs(60), "{:?}", started.elapsed());
    // Memory came back: the session goes on.
    assert_eq!(rows(&q, "SELECT * FROM operators"), 2);
}

#[test]
fn a_sort_past_the_memory_limit_spills_up_to_the_spill_limit() {
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    let sql = "SELECT value FROM generate_series(1, 8000000) ORDER BY value DESC";
    // 8 million rows (64 MB) sorted in 32 MiB: spilled to temporary files, and right.
    let q = session(QueryOptions {
        memory_limit: 32 << 20,
        ..QueryOptions::default()
    });
    let (mut n, mut last) = (0i64, i64::MAX);
    q.sql_each(sql, |b| {
        for v in b.column(0).as_primitive::<Int64Type>().values().iter() {
            assert!(*v < last, "{v} after {last}");
            last = *v;
            n += 1;
        }
        Ok(())
    })
    .expect("spilled");
    assert_eq!((n, last), (8_000_000, 1));
    // Without spilling, it fails.
    let q = session(QueryOptions {
        memory_limit: 32 << 20,
        spill_limit: 0,
        ..QueryOptions::default()
    });
    let e = q.sql_each(sql, |_| Ok(())).expect_err("no spilling");
    assert!(matches!(e, QueryError::MemoryLimit { .. }), "{e:?}");
    // Spilling more than the spill limit fails, saying so.
    let q = session(QueryOptions {
        memory_limit: 32 << 20,
        spill_limit: 1 << 20,
        ..QueryOptions::default()
    });
    let e = q.sql_each(sql, |_| Ok(())).expect_err("past the spill limit");
    assert!(
        matches!(e, QueryError::SpillLimit { limit } if limit == 1 << 20),
        "{e:?}"
    );
    assert!(e.to_string().contains("spill limit of 1 MiB"), "{e}");
}

#[test]
fn a_statement_past_its_timeout_is_stopped() {
    let q = session(QueryOptions {
        timeout: Some(Duration::from_millis(500)),
        ..QueryOptions::default()
    });
    let started = Instant::now();
    // A trillion rows counted: hours.
    let e = q
        .sql("SELECT count(*) FROM generate_series(1, 1000000000000)")
        .expect_err("stopped");
    assert!(
        matches!(e, QueryError::Timeout(d) if d == Duration::from_millis(500)),
        "{e:?}"
    );
    assert!(e.to_string().contains("timeout of 500ms"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(20), "{:?}", started.elapsed());
    // The same through the streaming path, and a scan of the snapshot itself.
    let e = q
        .sql_each(
            r#"SELECT count(*) FROM "word-counter"."count" a, generate_series(1, 1000000000000)"#,
            |_| Ok(()),
        )
        .expect_err("stopped");
    assert!(matches!(e, QueryError::Timeout(_)), "{e:?}");
    assert!(started.elapsed() < Duration::from_secs(40), "{:?}", started.elapsed());
    assert_eq!(rows(&q, "SELECT * FROM operators"), 2);
}
