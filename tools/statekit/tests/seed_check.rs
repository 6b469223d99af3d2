//! The seed's check: count `a`, stop with a savepoint, restore and count `a` again → `(a,2)`;
//! without the restore → `(a,1)`.

mod common;

use common::{committed_lines, run, wordcount_args};

#[test]
fn restored_count_continues() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    std::fs::write(d.join("one.txt"), "a\n").expect("write");
    std::fs::write(d.join("two.txt"), "a\n").expect("write");

    let out = run(
        d,
        &wordcount_args("--input one.txt --output out1 --stop-with-savepoint"),
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let savepoint = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .expect("savepoint path")
        .to_string();
    assert!(
        d.join(&savepoint).join("_metadata").is_file(),
        "no savepoint at {savepoint}"
    );
    assert_eq!(committed_lines(&d.join("out1")), vec!["(a,1)"]);

    let out = run(
        d,
        &wordcount_args(&format!("--input two.txt --output out2 --restore {savepoint}")),
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(committed_lines(&d.join("out2")), vec!["(a,2)"]);

    let out = run(d, &["demo", "wordcount", "--input", "two.txt", "--output", "out3"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(committed_lines(&d.join("out3")), vec!["(a,1)"]);
}

#[test]
fn restore_latest_without_checkpoints_starts_from_scratch() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    std::fs::write(d.join("in.txt"), "b b\n").expect("write");
    let out = run(d, &["demo", "wordcount", "--input", "in.txt", "--restore", "latest"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("starting from scratch"));
    assert_eq!(committed_lines(&d.join("statekit-data/output")), vec!["(b,1)", "(b,2)"]);
}
