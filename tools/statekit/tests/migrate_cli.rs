//! `statekit convert` and `statekit rewrite` as a user runs them: exit codes, nothing written
//! on a refusal or a dry run, one JSON document, and a SIGKILL at any moment of a conversion
//! leaves no output or a complete one that verifies.

mod common;

use common::{bin, fixture, run};
use statekit_checkpoint::SnapshotReader;
use statekit_core::TypeSchema;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn refusals_exit_2_and_write_nothing_dry_runs_exit_0() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = fixture("savepoint-basic");
    let input = input.to_str().expect("utf-8");
    let cases: Vec<Vec<&str>> = vec![
        vec!["rewrite", input, "out", "--drop-operator", "nope"],
        vec!["rewrite", input, "out", "--drop-state", "word-counter/nope"],
        vec!["rewrite", input, "out", "--rename-uid", "word-counter=enricher"],
        vec!["rewrite", input, "out", "--parallelism", "word-counter=9"],
        vec!["rewrite", input, "out", "--parallelism", "word-counter=x"],
        vec!["rewrite", input, "out", "--rename-state", "word-counter/count"],
        vec!["rewrite", input, "out"],
        vec!["convert", input, "out", "--format", "parquet"],
        vec![
            "convert",
            input,
            "out",
            "--compression",
            "lz4",
            "--compression-level",
            "3",
        ],
        vec![
            "convert",
            input,
            "out",
            "--compression",
            "zstd",
            "--compression-level",
            "23",
        ],
        vec!["convert", "/nonexistent/savepoint", "out"],
        vec!["rewrite", input, "out", "--set-uid", "0123=x"],
        vec!["rewrite", input, "out", "--max-parallelism", "word-counter=40000"],
        vec!["rewrite", input, "out", "--max-parallelism", "word-counter=1"],
        vec![
            "rewrite",
            input,
            "out",
            "--max-parallelism",
            "word-counter=64",
            "--memory",
            "12XB",
        ],
        vec!["rewrite", input, "out", "--keep-keys", "/nonexistent/keys.txt"],
    ];
    for args in cases {
        let out = run(dir.path(), &args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stderr).starts_with("error: "), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
        assert!(names(dir.path()).is_empty(), "{args:?} wrote {:?}", names(dir.path()));
    }
    // A keys file with a line that is not a key of the operator: its line number.
    let keys = tempfile::NamedTempFile::new().expect("keys");
    std::fs::write(keys.path(), "1\n2\nnot-a-number\n").expect("write");
    let spec = format!("enricher={}", keys.path().display());
    let out = run(dir.path(), &["rewrite", input, "out", "--keep-keys", &spec]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("line 3") && err.contains("not-a-number") && err.contains("i64"),
        "{err}"
    );
    assert!(names(dir.path()).is_empty());
    // A dry run prints the plan and writes nothing.
    let out = run(
        dir.path(),
        &[
            "rewrite",
            input,
            "out",
            "--rename-uid",
            "word-counter=counter",
            "--dry-run",
            "--json",
        ],
    );
    assert_eq!(out.status.code(), Some(0));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(doc["dry_run"], true);
    assert_eq!(doc["changes"][0], "rename operator \"word-counter\" to \"counter\"");
    assert!(names(dir.path()).is_empty());
    // A real run: one JSON document; then the output exists and is refused without --force.
    let out = run(dir.path(), &["convert", input, "out", "--json", "--parallelism", "3"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(doc["subtasks"], 6);
    assert!(
        out.stderr.is_empty(),
        "no progress bar when standard error is not a terminal"
    );
    let again = run(dir.path(), &["convert", input, "out"]);
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("--force"));
    let forced = run(dir.path(), &["convert", input, "out", "--force"]);
    assert_eq!(forced.status.code(), Some(0));
    let verify = run(dir.path(), &["verify", "out"]);
    assert_eq!(
        verify.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );
    assert_eq!(names(dir.path()), ["out"]);
}

/// `convert --format native` and back, as a user runs it: the native output verifies, `show`
/// calls it native, `diff` finds no difference to the input either way, and a native level
/// flag is refused.
#[cfg(feature = "rocksdb")]
#[test]
fn native_round_trip_through_the_command_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = fixture("savepoint-basic");
    let input = input.to_str().expect("utf-8");
    let out = run(dir.path(), &["convert", input, "nat", "--format", "native", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(doc["format"], "native");
    assert_eq!(run(dir.path(), &["verify", "nat"]).status.code(), Some(0));
    let show = run(dir.path(), &["show", "nat"]);
    assert!(String::from_utf8_lossy(&show.stdout).contains("format native"));
    let diff = run(dir.path(), &["diff", input, "nat"]);
    assert_eq!(diff.status.code(), Some(0), "{}", String::from_utf8_lossy(&diff.stdout));
    let back = run(dir.path(), &["convert", "nat", "back", "--compression", "zstd"]);
    assert_eq!(back.status.code(), Some(0), "{}", String::from_utf8_lossy(&back.stderr));
    assert_eq!(run(dir.path(), &["diff", input, "back"]).status.code(), Some(0));
    let refused = run(
        dir.path(),
        &[
            "convert",
            input,
            "n2",
            "--format",
            "native",
            "--compression",
            "zstd",
            "--compression-level",
            "5",
        ],
    );
    assert_eq!(refused.status.code(), Some(2));
    assert!(!dir.path().join("n2").exists());
}

/// A savepoint `dir/in` of one operator with `n` entries of about 200 bytes at parallelism 4.
fn big_savepoint(dir: &Path, n: u32) {
    common::big_savepoint(dir, "in", n, 128, TypeSchema::Bytes, |i| {
        format!("key-{i:09}").into_bytes()
    });
}

#[test]
fn sigkill_at_any_moment_leaves_no_output_or_a_complete_one() {
    sigkill_at_any_moment("canonical");
}

/// The same with `--format native`: scratch databases and uploads are inside the
/// temporary directory too.
#[cfg(feature = "rocksdb")]
#[test]
fn sigkill_at_any_moment_of_a_native_conversion_leaves_no_output_or_a_complete_one() {
    sigkill_at_any_moment("native");
}

fn sigkill_at_any_moment(format: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let n = 300_000;
    big_savepoint(dir.path(), n);
    let args = |out: &str| {
        let mut c = Command::new(bin());
        c.current_dir(dir.path())
            .args([
                "convert",
                "in",
                out,
                "--compression",
                "zstd",
                "--threads",
                "1",
                "--parallelism",
                "7",
                "--format",
                format,
            ])
            .stdout(std::process::Stdio::null());
        c
    };
    // How long a whole conversion takes here.
    let t = Instant::now();
    let status = args("full").status().expect("run");
    assert!(status.success());
    let full = t.elapsed();
    let (mut absent, mut complete) = (0, 0);
    for k in 0..8u32 {
        let out = format!("out{k}");
        let mut child = args(&out).spawn().expect("spawn");
        // From right after the start to past the end, spread over the run; the last one is
        // killed only once it has ended (or after ten runs' time), so one outcome is surely a
        // complete output however loaded the machine is.
        if k == 7 {
            let deadline = Instant::now() + full * 10;
            while child.try_wait().expect("try_wait").is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        } else {
            std::thread::sleep(full.mul_f64(f64::from(k) / 6.0) + Duration::from_millis(u64::from(k) * 3));
        }
        let _ = child.kill();
        let _ = child.wait();
        let path = dir.path().join(&out);
        if !path.exists() {
            absent += 1;
            continue;
        }
        complete += 1;
        let (_, v) = statekit_snapshot::verify_path(&path).expect("verify");
        assert!(v.is_ok(), "{out}: {:?}", v.problems);
        assert_eq!(v.entries, u64::from(n), "{out}");
        let r = SnapshotReader::open(&path).expect("open");
        assert_eq!(r.operator("op").expect("op").parallelism, 7);
        assert_eq!(r.metadata().format.as_str(), format);
    }
    // The input is untouched.
    let (_, v) = statekit_snapshot::verify_path(&dir.path().join("in")).expect("verify input");
    assert!(v.is_ok());
    eprintln!("a {format} conversion takes {full:?}; killed runs: {absent} left no output, {complete} a complete one");
    assert!(absent > 0, "no kill landed before the end ({full:?} a run)");
    assert!(complete > 0, "no run completed before its kill ({full:?} a run)");
    // What the killed runs left (hidden temporary directories) goes with the next run to the
    // same output.
    let leftovers = |k: u32| {
        names(dir.path())
            .into_iter()
            .filter(|n| n.starts_with(&format!(".out{k}.statekit-tmp-")))
            .count()
    };
    let k = (0..8)
        .find(|&k| leftovers(k) > 0)
        .expect("a killed run left its temporary directory");
    let status = args(&format!("out{k}")).arg("--force").status().expect("rerun");
    assert!(status.success());
    assert_eq!(leftovers(k), 0);
}

#[test]
fn check_exits_0_compatible_1_incompatible_2_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = fixture("savepoint-basic");
    let input = input.to_str().expect("utf-8");
    let schema = run(dir.path(), &["schema", input, "--json"]);
    assert_eq!(schema.status.code(), Some(0));
    std::fs::write(dir.path().join("job.json"), &schema.stdout).expect("write");
    let ok = run(dir.path(), &["check", input, "--against", "job.json"]);
    assert_eq!(ok.status.code(), Some(0), "{}", String::from_utf8_lossy(&ok.stdout));
    // Against itself (a snapshot) too.
    assert_eq!(
        run(dir.path(), &["check", input, "--against", input]).status.code(),
        Some(0)
    );
    // The job changed a state's type and dropped an operator.
    let mut doc: serde_json::Value = serde_json::from_slice(&schema.stdout).expect("json");
    doc["operators"][0]["keyed_states"][0]["value"] = "string".into();
    doc["operators"].as_array_mut().expect("operators").truncate(1);
    std::fs::write(dir.path().join("new.json"), serde_json::to_vec(&doc).expect("json")).expect("write");
    let bad = run(dir.path(), &["check", input, "--against", "new.json"]);
    assert_eq!(bad.status.code(), Some(1));
    let text = String::from_utf8_lossy(&bad.stdout);
    assert!(text.contains("incompatible: operator \"word-counter\": state \"count\": value type i64 in the snapshot, string in the job"), "{text}");
    assert!(
        text.contains("incompatible: operator \"enricher\"") && text.contains("--allow-non-restored-state"),
        "{text}"
    );
    assert!(
        text.contains("fix: statekit rewrite IN OUT --drop-operator enricher"),
        "{text}"
    );
    let json = run(dir.path(), &["check", input, "--against", "new.json", "--json"]);
    assert_eq!(json.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&json.stdout).expect("one JSON document");
    assert_eq!(doc["compatible"], false);
    assert_eq!(doc["findings"].as_array().map(Vec::len), Some(2));
    // A schema file that does not parse: exit 2, naming the line.
    std::fs::write(
        dir.path().join("broken.json"),
        "{\n  \"operators\": [\n    {\"uid\": 3}\n  ]\n}\n",
    )
    .expect("write");
    let err = run(dir.path(), &["check", input, "--against", "broken.json"]);
    assert_eq!(err.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&err.stderr).contains("broken.json: line 3"),
        "{}",
        String::from_utf8_lossy(&err.stderr)
    );
    // The word count declares the schema its savepoints have.
    let wc = run(dir.path(), &["demo", "wordcount", "--print-schema"]);
    assert_eq!(wc.status.code(), Some(0));
    let doc: serde_json::Value = serde_json::from_slice(&wc.stdout).expect("json");
    assert_eq!(doc["operators"][1]["uid"], "counter");
}
