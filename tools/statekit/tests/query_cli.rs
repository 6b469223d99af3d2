//! `statekit query` as a user runs it: a table, CSV and one JSON document; the statement
//! from standard input; EXPLAIN naming the key groups a key predicate reads; bad SQL and an
//! unknown table exit 2.

mod common;

use common::{fixture, run, run_with_input};
use std::io::Write;
use std::process::{Command, Stdio};

#[test]
fn query_prints_tables_csv_and_json_and_refuses_bad_sql() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = fixture("savepoint-basic");
    let input = input.to_str().expect("utf-8");
    let count = r#"SELECT count(*) AS n FROM "word-counter"."count""#;
    let t = run(dir.path(), &["query", input, count]);
    assert_eq!(t.status.code(), Some(0), "{}", String::from_utf8_lossy(&t.stderr));
    let text = String::from_utf8_lossy(&t.stdout);
    assert!(text.contains("| n |") && text.contains("| 8 |"), "{text}");
    let c = run(dir.path(), &["query", input, count, "--format", "csv"]);
    assert_eq!(String::from_utf8_lossy(&c.stdout), "n\n8\n");
    let j = run(
        dir.path(),
        &[
            "query",
            input,
            "SELECT uid, parallelism FROM operators ORDER BY uid",
            "--format",
            "json",
        ],
    );
    let doc: serde_json::Value = serde_json::from_slice(&j.stdout).expect("one JSON document");
    assert_eq!(doc[0]["uid"], "enricher");
    assert_eq!(doc[1]["parallelism"], 2);
    // From standard input.
    let out = run_with_input(
        dir.path(),
        &["query", input, "--format", "csv"],
        b"SELECT count(*) AS n FROM states",
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "n\n10\n");
    // EXPLAIN of a point lookup.
    let e = run(
        dir.path(),
        &[
            "query",
            input,
            r#"EXPLAIN SELECT value FROM "word-counter"."count" WHERE key = 'x'"#,
        ],
    );
    let plan = String::from_utf8_lossy(&e.stdout);
    let kg = statekit_core::key_group_for_key(b"x", 8);
    assert!(plan.contains(&format!("key_groups=1 of 8 [{kg}]")), "{plan}");
    for sql in [
        "SELEKT 1",
        "SELECT * FROM nope",
        r#"SELECT nope FROM "word-counter"."count""#,
    ] {
        let r = run(dir.path(), &["query", input, sql]);
        assert_eq!(r.status.code(), Some(2), "{sql}");
        assert!(String::from_utf8_lossy(&r.stderr).starts_with("error"), "{sql}");
    }
}

/// Without a statement on a terminal, `query` prompts: a statement may span lines and ends
/// with `;`, an error does not end the session, `\q` does. (The terminal is `script`'s pty.)
#[test]
fn query_prompts_on_a_terminal() {
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped: no `script` (util-linux) to make a terminal");
        return;
    }
    let input = fixture("savepoint-basic");
    let cmd = format!("{} query {}", env!("CARGO_BIN_EXE_statekit"), input.display());
    let mut child = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn script");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"SELECT count(*) AS n\nFROM states;\nSELEKT;\n\\q\n")
        .expect("write");
    let out = child.wait_with_output().expect("wait");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("statekit> "), "{text}");
    assert!(text.contains("| 10 |"), "the statement over two lines ran: {text}");
    assert!(text.contains("error"), "the bad statement was reported: {text}");
}
