//! `statekit convert` and `statekit rewrite` as a user runs them: exit codes, nothing written
//! on a refusal or a dry run, one JSON document, and a SIGKILL at any moment of a conversion
//! or a rewrite leaves no output or a complete one that verifies.

mod common;

use common::{bin, fixture, run, wordcount_args};
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

/// Asserts that a run exited 0 (showing its standard error where it did not).
fn succeeded(out: &std::process::Output) {
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
}

/// The one JSON document a run that must succeed printed.
fn json_of(out: &std::process::Output) -> serde_json::Value {
    succeeded(out);
    serde_json::from_slice(&out.stdout).expect("one JSON document")
}

/// Asserts that `statekit verify PATH`, run in `dir`, finds the snapshot sound.
fn verifies(dir: &Path, path: &str) {
    let v = run(dir, &["verify", path]);
    let report = String::from_utf8_lossy(&v.stdout);
    assert_eq!(v.status.code(), Some(0), "{path}: {report}");
    assert!(report.contains("OK"), "{path}: {report}");
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
        vec!["rewrite", input, "out", "--max-parallelism", "word-counter=0"],
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
    // Keys are kept in keyed state: an operator left with operator state only is refused.
    std::fs::write(keys.path(), "1\n").expect("write");
    let out = run(
        dir.path(),
        &[
            "rewrite",
            input,
            "out",
            "--drop-state",
            "enricher/last-seen",
            "--keep-keys",
            &spec,
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("enricher") && err.contains("no keyed state"), "{err}");
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
    let doc = json_of(&out);
    assert_eq!(doc["dry_run"], true);
    assert_eq!(doc["changes"][0], "rename operator \"word-counter\" to \"counter\"");
    assert!(names(dir.path()).is_empty());
    // A real run: one JSON document; then the output exists and is refused without --force.
    let out = run(dir.path(), &["convert", input, "out", "--json", "--parallelism", "3"]);
    let doc = json_of(&out);
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
    verifies(dir.path(), "out");
    assert_eq!(names(dir.path()), ["out"]);
}

/// Bytes of the data files of operator `uid` of the snapshot at `path`.
fn operator_bytes(path: &Path, uid: &str) -> u64 {
    let r = SnapshotReader::open(path).expect("open");
    let op = r.operator(uid).expect("operator");
    op.subtasks
        .iter()
        .flat_map(|s| s.keyed.canonical().into_iter().chain(s.operator.iter()))
        .map(|f| f.size)
        .sum()
}

/// Every edit flag at once, as a user runs it: the dry run's byte counts are what the run
/// then writes and links, and the output verifies and holds exactly the edited state.
#[test]
fn a_rewrite_with_every_kind_of_edit_runs_from_the_command_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = fixture("savepoint-basic");
    let input_s = input.to_str().expect("utf-8");
    // The renamed operator's files are linked, the other's rewritten (a state is dropped).
    let edits = [
        "rewrite",
        input_s,
        "linked",
        "--rename-uid",
        "enricher=enriched",
        "--drop-state",
        "word-counter/avg",
        "--link",
    ];
    let dry = run(dir.path(), &[&edits[..], &["--dry-run", "--json"]].concat());
    let doc = json_of(&dry);
    let (wc, en) = (
        operator_bytes(&input, "word-counter"),
        operator_bytes(&input, "enricher"),
    );
    assert!(wc > 0 && en > 0);
    assert_eq!(doc["bytes_to_rewrite"], wc, "{doc:#}");
    assert_eq!(
        doc["bytes_to_link"].as_u64().unwrap_or(0) + doc["bytes_to_copy"].as_u64().unwrap_or(0),
        en,
        "{doc:#}"
    );
    assert!(names(dir.path()).is_empty());
    let real = run(dir.path(), &edits);
    succeeded(&real);
    assert_eq!(operator_bytes(&dir.path().join("linked"), "enriched"), en);
    // Everything else: renames, drops, a new parallelism and max parallelism (a spilling
    // sort), TTL purge and a keys file, in one pass.
    std::fs::write(dir.path().join("drop.txt"), "bob\ncarol\n").expect("keys");
    let out = run(
        dir.path(),
        &[
            "rewrite",
            input_s,
            "out",
            "--rename-uid",
            "word-counter=counter",
            "--rename-state",
            "counter/count=n",
            "--drop-state",
            "counter/avg",
            "--drop-operator",
            "enricher",
            "--max-parallelism",
            "counter=12",
            "--parallelism",
            "counter=3",
            "--memory",
            "512",
            "--purge-expired",
            "--now",
            "0",
            "--drop-keys",
            "counter=drop.txt",
            "--json",
        ],
    );
    let doc = json_of(&out);
    assert!(doc["spilled_runs"].as_u64().unwrap_or(0) > 0, "{doc:#}");
    verifies(dir.path(), "out");
    let r = SnapshotReader::open(dir.path().join("out")).expect("open");
    assert!(r.operator("enricher").is_err() && r.operator("word-counter").is_err());
    let op = r.operator("counter").expect("counter");
    assert_eq!((op.parallelism, op.max_parallelism), (3, 12));
    let keyed: Vec<&str> = op.keyed_states.iter().map(|d| d.name.as_str()).collect();
    assert!(
        keyed.contains(&"n") && !keyed.contains(&"count") && !keyed.contains(&"avg"),
        "{keyed:?}"
    );
    // The count state without the dropped keys, every other key as it was.
    let dump = |path: &str, uid: &str, state: &str| -> Vec<String> {
        let out = run(dir.path(), &["dump", path, "--uid", uid, "--state", state]);
        succeeded(&out);
        let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_once(" key=").map(|(_, rest)| rest.to_string()))
            .collect();
        lines.sort();
        lines
    };
    let mut expected = dump(input_s, "word-counter", "count");
    expected.retain(|l| !l.starts_with("\"bob\"") && !l.starts_with("\"carol\""));
    assert!(!expected.is_empty());
    assert_eq!(dump("out", "counter", "n"), expected);
}

/// An incremental checkpoint (native, its table files shared with the checkpoints before it
/// under `shared/`) converts to a self-contained savepoint in either format: the same
/// entries (`diff` finds none), and the output still verifies once the checkpoints are gone.
#[cfg(feature = "rocksdb")]
#[test]
fn an_incremental_checkpoint_converts_to_a_self_contained_savepoint() {
    let dir = tempfile::tempdir().expect("tempdir");
    let words: String = (0..40_000u32).map(|i| format!("w{} ", i * 7919 % 2500)).collect();
    std::fs::write(dir.path().join("in.txt"), words).expect("input");
    let demo = run(dir.path(), &wordcount_args("--input in.txt --backend rocksdb --checkpoint-type incremental --checkpoint-every 4000 --checkpoint-dir ck --output words"));
    succeeded(&demo);
    // The newest checkpoint, and that it shares table files with older ones.
    let job = std::fs::read_dir(dir.path().join("ck"))
        .expect("ck")
        .map(|e| e.expect("entry").path())
        .find(|p| p.is_dir())
        .expect("job dir");
    let newest = std::fs::read_dir(&job)
        .expect("job")
        .filter_map(|e| {
            let name = e.expect("entry").file_name().to_string_lossy().into_owned();
            name.strip_prefix("chk-").and_then(|n| n.parse::<u64>().ok())
        })
        .max()
        .expect("a checkpoint");
    assert!(newest > 2, "{newest} checkpoints");
    let chk = job.join(format!("chk-{newest}"));
    let meta = std::fs::read(chk.join("_metadata")).expect("_metadata");
    assert!(
        meta.windows(b"shared/".len()).any(|w| w == b"shared/"),
        "the newest checkpoint references shared files"
    );
    let chk = chk.to_str().expect("utf-8");
    for (out, format) in [("conv", "canonical"), ("nat", "native")] {
        let c = run(dir.path(), &["convert", chk, out, "--format", format]);
        succeeded(&c);
        let diff = run(dir.path(), &["diff", chk, out]);
        assert_eq!(
            diff.status.code(),
            Some(0),
            "{format}: {}",
            String::from_utf8_lossy(&diff.stdout)
        );
    }
    std::fs::remove_dir_all(dir.path().join("ck")).expect("remove checkpoints");
    for out in ["conv", "nat"] {
        verifies(dir.path(), out);
    }
}

/// `--link` with the output on another file system (a tmpfs under `/dev/shm`, where the
/// machine has one): the unchanged operator's files are copied instead of linked, the
/// summary says so, and the output stands without its input.
#[test]
fn link_copies_where_the_output_is_on_another_file_system() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let Ok(shm) = tempfile::tempdir_in("/dev/shm") else {
        eprintln!("no /dev/shm here: the copy fallback is not exercised");
        return;
    };
    let dev = |p: &Path| std::fs::metadata(p).expect("metadata").dev();
    if dev(shm.path()) == dev(dir.path()) {
        eprintln!("/dev/shm is on the temporary directory's file system: the copy fallback is not exercised");
        return;
    }
    let fixture = fixture("savepoint-basic");
    let c = run(dir.path(), &["convert", fixture.to_str().expect("utf-8"), "in"]);
    succeeded(&c);
    // Neither operator changes but for a uid: both are copied.
    let both =
        operator_bytes(&dir.path().join("in"), "enricher") + operator_bytes(&dir.path().join("in"), "word-counter");
    let out = shm.path().join("out");
    let out_s = out.to_str().expect("utf-8");
    let r = run(
        dir.path(),
        &[
            "rewrite",
            "in",
            out_s,
            "--rename-uid",
            "enricher=enriched",
            "--link",
            "--json",
        ],
    );
    let doc = json_of(&r);
    assert_eq!(doc["bytes_linked"], 0, "{doc:#}");
    assert_eq!(doc["bytes_copied"], both, "{doc:#}");
    for e in std::fs::read_dir(&out).expect("out") {
        let md = e.expect("entry").metadata().expect("metadata");
        assert_eq!(md.nlink(), 1, "a copy, not a link");
    }
    std::fs::remove_dir_all(dir.path().join("in")).expect("remove input");
    verifies(dir.path(), out_s);
}

/// On a terminal (`script` gives the run a pseudo-terminal) `convert` draws a progress bar
/// on standard error: subtasks done, bytes and entries written, ETA. Piped, it draws nothing
/// (`refusals_exit_2_and_write_nothing_dry_runs_exit_0`).
#[test]
fn a_progress_bar_is_drawn_on_a_terminal() {
    let dir = tempfile::tempdir().expect("tempdir");
    big_savepoint(dir.path(), 100_000);
    let command = format!("{} convert in out --threads 1", bin());
    let out = match Command::new("script")
        .current_dir(dir.path())
        .args(["-qefc", &command, "/dev/null"])
        .stdin(std::process::Stdio::null())
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            eprintln!("no `script` here ({e}): the terminal run is not exercised");
            return;
        }
    };
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let screen = String::from_utf8_lossy(&out.stdout);
    assert!(
        screen.contains("subtasks") && screen.contains("entries") && screen.contains("ETA"),
        "{screen}"
    );
    assert!(dir.path().join("out").join("_metadata").exists());
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
    let doc = json_of(&out);
    assert_eq!(doc["format"], "native");
    verifies(dir.path(), "nat");
    // Built the RocksDB way: every table file was written by `SstFileWriter` and ingested
    // (only such files carry the `rocksdb.external_sst_file.*` properties, found by their
    // stored suffix, since the properties block shares key prefixes; a flushed memtable's
    // files do not), and no write-ahead log holds entries.
    let mut tables = 0;
    for sub in std::fs::read_dir(dir.path().join("nat")).expect("nat") {
        let sub = sub.expect("entry").path();
        if !sub.is_dir() {
            continue;
        }
        for f in std::fs::read_dir(&sub).expect("subtask dir") {
            let f = f.expect("entry").path();
            let name = f
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let bytes = std::fs::read(&f).expect("read");
            if name.ends_with(".sst") {
                tables += 1;
                let prop = b"external_sst_file.global_seqno";
                assert!(
                    bytes.windows(prop.len()).any(|w| w == prop),
                    "{name}: not an ingested file"
                );
            }
            if name.ends_with(".log") {
                assert!(bytes.is_empty(), "{name}: a write-ahead log with entries");
            }
        }
    }
    assert!(tables > 0, "no table files");
    let show = run(dir.path(), &["show", "nat"]);
    assert!(String::from_utf8_lossy(&show.stdout).contains("format native"));
    let diff = run(dir.path(), &["diff", input, "nat"]);
    assert_eq!(diff.status.code(), Some(0), "{}", String::from_utf8_lossy(&diff.stdout));
    let back = run(dir.path(), &["convert", "nat", "back", "--compression", "zstd"]);
    succeeded(&back);
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
    sigkill_at_any_moment(&convert_to("canonical"), &|r| {
        assert_eq!(r.operator("op").expect("op").parallelism, 7);
        assert_eq!(r.metadata().format.as_str(), "canonical");
    });
}

/// `convert in OUT` to `format` at parallelism 7, zstd, one thread.
fn convert_to(format: &str) -> Vec<String> {
    [
        "convert",
        "in",
        "--compression",
        "zstd",
        "--threads",
        "1",
        "--parallelism",
        "7",
        "--format",
        format,
    ]
    .map(String::from)
    .to_vec()
}

/// The same for a `rewrite` that renames the operator and re-buckets every key under a new
/// max parallelism through a sort that spills (64 KiB of memory): the killed runs leave no
/// output or a complete one, and the sorted runs spilled beside the output go with them.
#[test]
fn sigkill_at_any_moment_of_a_spilling_rewrite_leaves_no_output_or_a_complete_one() {
    let args = [
        "rewrite",
        "in",
        "--rename-uid",
        "op=renamed",
        "--max-parallelism",
        "renamed=512",
        "--memory",
        "65536",
        "--threads",
        "1",
    ]
    .map(String::from)
    .to_vec();
    sigkill_at_any_moment(&args, &|r| {
        assert!(r.operator("op").is_err());
        let op = r.operator("renamed").expect("renamed");
        assert_eq!(op.max_parallelism, 512);
        assert_eq!(op.parallelism, 4);
    });
}

/// The same with `--format native`: scratch databases and uploads are inside the
/// temporary directory too.
#[cfg(feature = "rocksdb")]
#[test]
fn sigkill_at_any_moment_of_a_native_conversion_leaves_no_output_or_a_complete_one() {
    sigkill_at_any_moment(&convert_to("native"), &|r| {
        assert_eq!(r.operator("op").expect("op").parallelism, 7);
        assert_eq!(r.metadata().format.as_str(), "native");
    });
}

/// Runs `command` (its input `in`; the output is put after it) on a savepoint of 300 000
/// entries, killing it at moments spread over a run: each killed run leaves no output or a
/// complete one that verifies, holds every entry and passes `check`.
fn sigkill_at_any_moment(command: &[String], check: &dyn Fn(&SnapshotReader)) {
    let dir = tempfile::tempdir().expect("tempdir");
    let n = 300_000;
    big_savepoint(dir.path(), n);
    let what = command.join(" ");
    let args = |out: &str| {
        let mut c = Command::new(bin());
        c.current_dir(dir.path())
            .args(command.iter().take(2))
            .arg(out)
            .args(command.iter().skip(2))
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
        check(&SnapshotReader::open(&path).expect("open"));
    }
    // The input is untouched.
    let (_, v) = statekit_snapshot::verify_path(&dir.path().join("in")).expect("verify input");
    assert!(v.is_ok());
    eprintln!("`{what}` takes {full:?}; killed runs: {absent} left no output, {complete} a complete one");
    assert!(absent > 0, "no kill landed before the end ({full:?} a run)");
    assert!(complete > 0, "no run completed before its kill ({full:?} a run)");
    // What a killed run leaves (hidden, run-tagged temporary directories) goes with the next
    // run writing beside it — to any output: each run above removed the earlier killed runs'
    // leftovers, so none is left now, and one more kill leaves one that the next run removes.
    let leftovers = || {
        names(dir.path())
            .into_iter()
            .filter(|n| n.contains(".statekit-tmp-"))
            .count()
    };
    assert_eq!(leftovers(), 0, "the runs after a kill removed what it left");
    let mut left = false;
    for _ in 0..20u32 {
        // Killed as soon as its temporary directory appears.
        let mut child = args("killed").spawn().expect("spawn");
        let deadline = Instant::now() + full * 10;
        while leftovers() == 0 && child.try_wait().expect("try_wait").is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        let _ = child.kill();
        let _ = child.wait();
        if leftovers() > 0 {
            left = true;
            break;
        }
        let _ = std::fs::remove_dir_all(dir.path().join("killed"));
    }
    assert!(left, "a killed run left its temporary directory");
    let status = args("out0").arg("--force").status().expect("rerun");
    assert!(status.success());
    assert_eq!(leftovers(), 0);
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
