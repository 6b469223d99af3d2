//! `statekit export` as a user runs it: a directory per (uid, state) of Parquet files and
//! `_tables.json`; one JSON document with --json; exit 2 and nothing written for an unknown
//! uid or state, a bad key-group range or a non-empty output.

mod common;

use common::{fixture, run};

#[test]
fn export_writes_tables_and_refuses_bad_requests() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = fixture("savepoint-basic");
    let input = input.to_str().expect("utf-8");
    let out = run(dir.path(), &["export", input, "t", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    let tables = doc["tables"].as_array().expect("tables");
    assert!(!tables.is_empty());
    for t in tables {
        let path = dir.path().join("t").join(t["path"].as_str().expect("path"));
        for f in t["files"].as_array().expect("files") {
            let bytes = std::fs::read(path.join(f.as_str().expect("name"))).expect("file");
            assert_eq!(&bytes[..4], b"PAR1", "a Parquet file");
        }
    }
    assert!(dir.path().join("t/_tables.json").is_file());
    assert!(
        out.stderr.is_empty(),
        "no progress when standard error is not a terminal"
    );
    for args in [
        vec!["export", input, "t"],
        vec!["export", input, "u", "--uid", "nope"],
        vec!["export", input, "u", "--state", "nope"],
        vec!["export", input, "u", "--key-group", "9..3"],
        vec!["export", input, "u", "--format", "csv"],
        vec!["export", input, "u", "--format", "jsonl", "--compression", "zstd"],
        vec!["export", input, "u", "--format", "arrow", "--compression", "snappy"],
    ] {
        let r = run(dir.path(), &args);
        assert_eq!(r.status.code(), Some(2), "{args:?}");
        assert!(String::from_utf8_lossy(&r.stderr).starts_with("error"), "{args:?}");
        assert!(!dir.path().join("u").exists(), "{args:?} wrote something");
    }
}
