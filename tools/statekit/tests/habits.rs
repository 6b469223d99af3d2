//! The tool as a Flink user meets it (issue 16): one test per habit — the savepoint line,
//! at-most-once jobs still stopping with a savepoint, `ls` in checkpoint order, `gc` leaving
//! no empty incomplete checkpoint behind, and English counts.

mod common;

use common::run;
use std::path::Path;
use std::process::Output;

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn ok(dir: &Path, args: &[&str]) -> Output {
    let o = run(dir, args);
    assert_eq!(o.status.code(), Some(0), "{args:?}: {}", text(&o));
    o
}

/// Piped, standard output holds the savepoint's path alone (for `sp=$(…)`), and standard
/// error says `savepoint: PATH` on one line.
#[test]
fn the_savepoint_path_is_one_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::write(d.join("in.txt"), "a b a\n").expect("input");
    let o = ok(d, &["demo", "wordcount", "--input", "in.txt", "--stop-with-savepoint"]);
    let stdout = String::from_utf8_lossy(&o.stdout).to_string();
    let path = stdout.trim();
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    assert!(d.join(path).join("_metadata").is_file(), "{path}");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.lines().any(|l| l == format!("savepoint: {path}")), "{stderr}");
    assert!(!stderr.lines().any(|l| l.trim() == "savepoint:"), "{stderr}");
    // English: three words, one savepoint.
    assert!(stderr.contains("processed 3 words"), "{stderr}");
}

/// `--guarantee at-most-once --stop-with-savepoint` takes the savepoint (a savepoint needs no
/// checkpointing), and a restore from it continues the counts.
#[test]
fn at_most_once_jobs_stop_with_a_savepoint() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::write(d.join("one.txt"), "a b a\n").expect("input");
    std::fs::write(d.join("two.txt"), "a\n").expect("input");
    let o = ok(
        d,
        &[
            "demo",
            "wordcount",
            "--input",
            "one.txt",
            "--output",
            "out1",
            "--guarantee",
            "at-most-once",
            "--stop-with-savepoint",
        ],
    );
    let sp = String::from_utf8_lossy(&o.stdout).trim().to_string();
    assert!(!sp.is_empty(), "{}", text(&o));
    ok(d, &["verify", &sp]);
    ok(
        d,
        &[
            "demo",
            "wordcount",
            "--input",
            "two.txt",
            "--output",
            "out2",
            "--restore",
            &sp,
        ],
    );
    assert_eq!(common::committed_lines(&d.join("out2")), vec!["(a,3)"]);
}

/// `ls` lists a job's checkpoints by id (chk-8 before chk-10), `--sort` and `--job` choose
/// the order and the job.
#[test]
fn ls_orders_checkpoints_by_id() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let words: String = (0..24).map(|i| format!("w{i} ")).collect();
    std::fs::write(d.join("in.txt"), words).expect("input");
    ok(
        d,
        &[
            "demo",
            "wordcount",
            "--input",
            "in.txt",
            "--checkpoint-every",
            "2",
            "--retained-checkpoints",
            "20",
        ],
    );
    let o = ok(d, &["ls", "statekit-data/checkpoints", "--json"]);
    let items: serde_json::Value = serde_json::from_slice(&o.stdout).expect("ls --json");
    let ids: Vec<u64> = items
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|i| i["id"].as_u64())
        .collect();
    assert!(ids.len() >= 11, "{ids:?}");
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    assert_eq!(ids, sorted, "checkpoints by id");
    let job = items[0]["path"]
        .as_str()
        .and_then(|p| Path::new(p).parent())
        .and_then(|p| p.file_name())
        .map(|n| n.to_string_lossy().to_string())
        .expect("a job directory");
    let o = ok(
        d,
        &[
            "ls",
            "statekit-data/checkpoints",
            "--job",
            &job,
            "--sort",
            "time",
            "--json",
        ],
    );
    let same: serde_json::Value = serde_json::from_slice(&o.stdout).expect("ls --json");
    assert_eq!(same.as_array().map(Vec::len), Some(ids.len()));
    let o = ok(d, &["ls", "statekit-data/checkpoints", "--job", "0000", "--json"]);
    let none: serde_json::Value = serde_json::from_slice(&o.stdout).expect("ls --json");
    assert_eq!(none.as_array().map(Vec::len), Some(0));
    // The text table too: chk-8 is listed before chk-10.
    let o = ok(d, &["ls", "statekit-data/checkpoints"]);
    let t = String::from_utf8_lossy(&o.stdout).to_string();
    let at = |name: &str| t.find(&format!("/{name}\n")).unwrap_or(usize::MAX);
    assert!(at("chk-8") < at("chk-10"), "{t}");
}

/// An incomplete checkpoint that never wrote a file leaves an empty `chk-N/`: `gc` removes
/// it (and empty directories inside), so `ls` stops listing it as incomplete.
#[test]
fn gc_removes_empty_incomplete_checkpoints() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::write(d.join("in.txt"), "a b c\n").expect("input");
    ok(d, &["demo", "wordcount", "--input", "in.txt"]);
    let base = d.join("statekit-data/checkpoints");
    let job = std::fs::read_dir(&base)
        .expect("base")
        .flatten()
        .map(|e| e.path())
        .next()
        .expect("a job directory");
    let empty = job.join("chk-99");
    std::fs::create_dir_all(empty.join("op-0")).expect("mkdir");
    let o = ok(d, &["ls", "statekit-data/checkpoints", "--json"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("chk-99"));
    let o = ok(
        d,
        &[
            "gc",
            "statekit-data/checkpoints",
            "--dry-run",
            "--min-age",
            "0s",
            "--json",
        ],
    );
    let plan: serde_json::Value = serde_json::from_slice(&o.stdout).expect("gc --json");
    assert_eq!(plan["empty_dirs"].as_array().map(Vec::len), Some(1), "{plan}");
    assert!(empty.is_dir(), "a dry run deletes nothing");
    // Younger than --min-age: left alone.
    let o = ok(d, &["gc", "statekit-data/checkpoints", "--dry-run", "--json"]);
    let plan: serde_json::Value = serde_json::from_slice(&o.stdout).expect("gc --json");
    assert_eq!(plan["empty_dirs"].as_array().map(Vec::len), Some(0), "{plan}");
    let o = ok(d, &["gc", "statekit-data/checkpoints", "--yes", "--min-age", "0s"]);
    assert!(!empty.exists(), "{}", text(&o));
    let o = ok(d, &["ls", "statekit-data/checkpoints"]);
    let t = String::from_utf8_lossy(&o.stdout);
    assert!(!t.contains("INCOMPLETE"), "{t}");
}
