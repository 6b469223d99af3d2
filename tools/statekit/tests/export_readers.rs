//! The exported word count read by real readers, DuckDB and pyarrow (PyPI), from the venv
//! `scripts/test.sh` makes (`STATEKIT_PYTHON`): `(a, 2)` is there, every column has its type,
//! the Arrow IPC export read by pyarrow and the JSON lines export by DuckDB give `(a, 2)` too;
//! a second test reads a map state and a list state with their columns.
//! Without `STATEKIT_PYTHON` (a bare `cargo test`) the test says so and passes.

mod common;

use common::run;
use std::process::Command;

const MAP_AND_LIST: &str = r#"
import sys, pyarrow.parquet as pq
out = sys.argv[1]
t = pq.read_table(f"{out}/counter/followers")
assert [str(f.type) for f in t.schema] == ["int32", "string", "string", "int64"], t.schema
assert [f.name for f in t.schema] == ["key_group", "key", "user_key", "value"], t.schema
assert t.schema.field("key").metadata[b"statekit.type"] == b"string"
assert t.num_rows > 0
lst = pq.read_table(f"{out}/counter/recent-positions")
assert [f.name for f in lst.schema] == ["key_group", "key", "index", "value"], lst.schema
assert str(lst.schema.field("value").type) == "uint64"
a = sorted((i, v) for k, i, v in zip(lst["key"].to_pylist(), lst["index"].to_pylist(), lst["value"].to_pylist()) if k == "a")
assert [i for i, _ in a] == [0, 1], a
print("ok")
"#;

const CHECK: &str = r#"
import sys, duckdb, pyarrow.parquet as pq
out = sys.argv[1]
count = f"{out}/counter/count/*.parquet"
rows = duckdb.sql(f"SELECT key, value FROM read_parquet('{count}') WHERE key = 'a'").fetchall()
assert rows == [("a", 2)], rows
types = dict((r[0], r[1]) for r in duckdb.sql(f"DESCRIBE SELECT * FROM read_parquet('{count}')").fetchall())
assert types == {"key_group": "INTEGER", "key": "VARCHAR", "value": "BIGINT"}, types
import pyarrow.ipc as ipc, glob
arrow_rows = []
for f in sorted(glob.glob(f"{out}-arrow/counter/count/*.arrow")):
    t = ipc.open_file(f).read_all()
    assert [str(x.type) for x in t.schema] == ["int32", "string", "int64"], t.schema
    arrow_rows += [r for r in zip(t["key"].to_pylist(), t["value"].to_pylist()) if r[0] == "a"]
assert arrow_rows == [("a", 2)], arrow_rows
j = duckdb.sql(f"SELECT key, value FROM read_json_auto('{out}-jsonl/counter/count/*.jsonl') WHERE key = 'a'").fetchall()
assert j == [("a", 2)], j
print("ok", rows)
"#;

/// The word count of "a b\na c" exported in every format under a temporary directory, and
/// the venv's Python (`None`, saying so, without `STATEKIT_PYTHON`).
fn exported() -> Option<(tempfile::TempDir, String)> {
    let Ok(python) = std::env::var("STATEKIT_PYTHON") else {
        eprintln!("skipped: STATEKIT_PYTHON is not set (scripts/test.sh sets it to a venv with duckdb and pyarrow)");
        return None;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("words.txt"), "a b\na c\n").expect("input");
    let demo = run(
        dir.path(),
        &["demo", "wordcount", "--input", "words.txt", "--stop-with-savepoint"],
    );
    assert_eq!(demo.status.code(), Some(0), "{}", String::from_utf8_lossy(&demo.stderr));
    let savepoints = dir.path().join("statekit-data/savepoints");
    let sp = std::fs::read_dir(&savepoints)
        .expect("savepoints")
        .flatten()
        .map(|e| e.path())
        .next()
        .expect("a savepoint");
    for (out, format) in [
        ("tables", "parquet"),
        ("tables-arrow", "arrow"),
        ("tables-jsonl", "jsonl"),
    ] {
        let r = run(
            dir.path(),
            &["export", sp.to_str().expect("utf-8"), out, "--format", format],
        );
        assert_eq!(
            r.status.code(),
            Some(0),
            "{format}: {}",
            String::from_utf8_lossy(&r.stderr)
        );
    }
    Some((dir, python))
}

fn check(python: &str, script: &str, tables: &std::path::Path) {
    let checked = Command::new(python)
        .arg("-c")
        .arg(script)
        .arg(tables)
        .output()
        .expect("run python");
    assert!(
        checked.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
}

#[test]
fn duckdb_and_pyarrow_read_the_exported_word_count() {
    let Some((dir, python)) = exported() else { return };
    check(&python, CHECK, &dir.path().join("tables"));
}

/// pyarrow reads a map state (user_key column) and a list state (index column) with their
/// types, and the list's elements in order.
#[test]
fn pyarrow_reads_a_map_state_and_a_list_state() {
    let Some((dir, python)) = exported() else { return };
    check(&python, MAP_AND_LIST, &dir.path().join("tables"));
}
