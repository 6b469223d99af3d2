//! `statekit query` given hostile SQL: it stays read-only over the snapshot's tables
//! (`COPY … TO` writes nothing, `CREATE EXTERNAL TABLE` and a path as a table read nothing,
//! exit 2 naming what was refused and the flag that allows it); `--unrestricted` allows
//! them; a runaway statement stops at `--memory-limit` (the default too) without the memory
//! it asked for, at `--spill-limit`, and at `--timeout`, exit 1 saying which limit it reached.

mod common;

use common::{fixture, run};
use std::time::{Duration, Instant};

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn snapshot() -> String {
    fixture("savepoint-basic").to_str().expect("utf-8").to_string()
}

/// The largest resident set of the children this process waited for, bytes.
fn children_max_rss() -> u64 {
    // SAFETY: getrusage writes into the zeroed struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    assert_eq!(rc, 0, "getrusage");
    u64::try_from(usage.ru_maxrss).unwrap_or(0) * 1024
}

#[test]
fn copy_to_a_file_is_refused_and_writes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("stolen.csv");
    let sql = format!(
        r#"COPY (SELECT * FROM "word-counter"."count") TO '{}' STORED AS CSV"#,
        out.display()
    );
    for format in ["table", "csv", "json"] {
        let r = run(dir.path(), &["query", &snapshot(), &sql, "--format", format]);
        let err = stderr(&r);
        assert_eq!(r.status.code(), Some(2), "{format}: {err}");
        assert!(err.contains("COPY … TO is refused"), "{format}: {err}");
        assert!(err.contains("read-only"), "{format}: {err}");
        assert!(err.contains("--unrestricted"), "{format}: {err}");
        assert!(!out.exists(), "{format}: COPY wrote {}", out.display());
    }
    // INSERT INTO a table over a file is refused as well (its CREATE is).
    let r = run(
        dir.path(),
        &["query", &snapshot(), "INSERT INTO operators SELECT * FROM operators"],
    );
    assert_eq!(r.status.code(), Some(2), "{}", stderr(&r));
    assert!(stderr(&r).contains("INSERT INTO is refused"), "{}", stderr(&r));
}

#[test]
fn no_statement_reads_a_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let r = run(
        dir.path(),
        &[
            "query",
            &snapshot(),
            "CREATE EXTERNAL TABLE t STORED AS CSV LOCATION '/etc/passwd'",
        ],
    );
    let err = stderr(&r);
    assert_eq!(r.status.code(), Some(2), "{err}");
    assert!(err.contains("CREATE EXTERNAL TABLE is refused"), "{err}");
    assert!(err.contains("--unrestricted"), "{err}");
    for sql in [
        "SELECT * FROM '/etc/passwd'",
        "SELECT * FROM 'file:///etc/passwd'",
        "SELECT * FROM read_csv('/etc/passwd')",
    ] {
        let r = run(dir.path(), &["query", &snapshot(), sql]);
        let (out, err) = (String::from_utf8_lossy(&r.stdout), stderr(&r));
        assert_eq!(r.status.code(), Some(2), "{sql}: {out}{err}");
        assert!(!out.contains("root") && !err.contains("root:"), "{sql}: {out}{err}");
    }
    // SET would lift the memory limit.
    let r = run(
        dir.path(),
        &["query", &snapshot(), "SET datafusion.runtime.memory_limit = '100G'"],
    );
    assert_eq!(r.status.code(), Some(2), "{}", stderr(&r));
    assert!(stderr(&r).contains("SET is refused"), "{}", stderr(&r));
}

#[test]
fn unrestricted_accepts_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("operators.csv");
    let r = run(
        dir.path(),
        &[
            "query",
            &snapshot(),
            "--unrestricted",
            &format!("COPY (SELECT uid FROM operators) TO '{}' STORED AS CSV", out.display()),
        ],
    );
    assert_eq!(r.status.code(), Some(0), "{}", stderr(&r));
    let text = std::fs::read_to_string(&out).expect("COPY wrote the file");
    assert!(text.contains("enricher"), "{text}");
}

#[test]
fn a_runaway_statement_stops_at_the_memory_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A hash join whose build side holds 100 million rows (2 to 3 GB): it cannot spill.
    let join = "SELECT count(*) FROM generate_series(1, 100000000) a \
                JOIN generate_series(1, 100000000) b ON a.value = b.value";
    let started = Instant::now();
    let r = run(dir.path(), &["query", &snapshot(), "--memory-limit", "64MiB", join]);
    let err = stderr(&r);
    assert_eq!(r.status.code(), Some(1), "{err}");
    assert!(err.contains("memory limit of 64 MiB"), "{err}");
    assert!(err.contains("--memory-limit"), "{err}");
    // The default limit (1 GiB) stops it too.
    let r = run(dir.path(), &["query", &snapshot(), join]);
    let err = stderr(&r);
    assert_eq!(r.status.code(), Some(1), "{err}");
    assert!(err.contains("memory limit of 1 GiB"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(120), "{:?}", started.elapsed());
    let rss = children_max_rss();
    assert!(rss < 1536 << 20, "a child's resident set reached {} MiB", rss >> 20);
    // A sort spills past the memory limit, but no further than the spill limit.
    let sort = "SELECT value FROM generate_series(1, 8000000) ORDER BY value DESC";
    let r = run(
        dir.path(),
        &[
            "query",
            &snapshot(),
            "--memory-limit",
            "32MiB",
            "--spill-limit",
            "1MiB",
            "--format",
            "csv",
            sort,
        ],
    );
    let err = stderr(&r);
    assert_eq!(r.status.code(), Some(1), "{err}");
    assert!(
        err.contains("spill limit of 1 MiB") && err.contains("--spill-limit"),
        "{err}"
    );
    // A bad size is bad usage.
    let r = run(
        dir.path(),
        &["query", &snapshot(), "--memory-limit", "lots", "SELECT 1"],
    );
    assert_eq!(r.status.code(), Some(2), "{}", stderr(&r));
}

#[test]
fn a_long_statement_stops_at_the_timeout() {
    let dir = tempfile::tempdir().expect("tempdir");
    let started = Instant::now();
    // A trillion rows counted: hours.
    let r = run(
        dir.path(),
        &[
            "query",
            &snapshot(),
            "--timeout",
            "1s",
            "SELECT count(*) FROM generate_series(1, 1000000000000)",
        ],
    );
    let err = stderr(&r);
    assert_eq!(r.status.code(), Some(1), "{err}");
    assert!(err.contains("reached its timeout of 1s"), "{err}");
    assert!(err.contains("--timeout"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(20), "{:?}", started.elapsed());
    // Also over the snapshot's own table, streamed as CSV.
    let r = run(
        dir.path(),
        &[
            "query",
            &snapshot(),
            "--timeout",
            "1 s",
            "--format",
            "csv",
            r#"SELECT count(*) FROM "word-counter"."count", generate_series(1, 1000000000000)"#,
        ],
    );
    assert_eq!(r.status.code(), Some(1), "{}", stderr(&r));
    assert!(started.elapsed() < Duration::from_secs(40), "{:?}", started.elapsed());
    for bad in ["0s", "soon", "-1s"] {
        let r = run(dir.path(), &["query", &snapshot(), "--timeout", bad, "SELECT 1"]);
        assert_eq!(r.status.code(), Some(2), "{bad}: {}", stderr(&r));
    }
}
