//! `statekit import` as a user runs it: the fixture's schema and its export give back a
//! savepoint with the same entries (`dump` agrees) that verifies; bad tables and schemas exit
//! 2 naming file, row and column, and write nothing.

mod common;

use common::{fixture, run};

fn dump_all(dir: &std::path::Path, sp: &str) -> Vec<String> {
    let mut lines = Vec::new();
    for state in ["count", "recent", "per-window", "total", "avg"] {
        let out = run(dir, &["dump", sp, "--uid", "word-counter", "--state", state]);
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        let mut l: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect();
        l.sort();
        lines.extend(l);
    }
    lines
}

#[test]
fn import_rebuilds_the_exported_savepoint_and_refuses_bad_tables() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = fixture("savepoint-basic");
    let input = input.to_str().expect("utf-8");
    let schema = run(dir.path(), &["schema", input, "--json"]);
    assert_eq!(schema.status.code(), Some(0));
    std::fs::write(dir.path().join("schema.json"), &schema.stdout).expect("schema");
    let export = run(dir.path(), &["export", input, "tables"]);
    assert_eq!(
        export.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&export.stderr)
    );
    let import = run(
        dir.path(),
        &[
            "import",
            "tables",
            "sp",
            "--schema",
            "schema.json",
            "--json",
            "--now",
            "0",
        ],
    );
    assert_eq!(
        import.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&import.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&import.stdout).expect("one JSON document");
    assert!(doc["entries"].as_u64().is_some_and(|n| n > 0), "{doc}");
    assert!(import.stderr.is_empty(), "no progress bar when not a terminal");
    let verify = run(dir.path(), &["verify", "sp"]);
    assert_eq!(
        verify.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );
    assert_eq!(dump_all(dir.path(), "sp"), dump_all(dir.path(), input));

    // An existing output, a missing schema file, a schema of the wrong type.
    let again = run(dir.path(), &["import", "tables", "sp", "--schema", "schema.json"]);
    assert_eq!(again.status.code(), Some(2));
    let missing = run(dir.path(), &["import", "tables", "sp2", "--schema", "nope.json"]);
    assert_eq!(missing.status.code(), Some(2));
    let text = String::from_utf8_lossy(&schema.stdout).replacen("\"value\": \"i64\"", "\"value\": \"string\"", 1);
    std::fs::write(dir.path().join("bad.json"), text).expect("bad schema");
    let bad = run(dir.path(), &["import", "tables", "sp2", "--schema", "bad.json"]);
    assert_eq!(bad.status.code(), Some(2));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.starts_with("error") && err.contains(".parquet") && err.contains("row 0") && err.contains("column value"),
        "{err}"
    );
    assert!(!dir.path().join("sp2").exists(), "nothing written");
    // Not a Parquet file.
    std::fs::write(dir.path().join("tables/word-counter/count/part-0-3.parquet"), b"nope").expect("clobber");
    let broken = run(dir.path(), &["import", "tables", "sp3", "--schema", "schema.json"]);
    assert_eq!(broken.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&broken.stderr).contains("not a Parquet file"));
    assert!(!dir.path().join("sp3").exists());
}
