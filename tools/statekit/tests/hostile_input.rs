//! Snapshots crafted as an attacker would (issue 10): CRCs that pass, odd file types, odd paths,
//! implausible counts. Every command ends promptly — no hang, no panic, no memory blow-up, no
//! silent partial result — with a clear error (exit 2) or a listed problem (`verify`, exit 1).
//! Each test here failed before its fix.

mod common;

use common::bounded::{mkfifo, run_bounded, run_cmd, Ran};
use common::{bin, copy_dir, fixture, wordcount_args};
use statekit_format::{decode_metadata, encode_metadata, FileScope, SnapshotMetadata, METADATA_FILE_NAME};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(60);

/// Tells [`inspector_child`] what to open: `PATH`, a tab, `COLSxROWS`, and optionally a tab
/// and `UID/STATE`.
const INSPECT_CHILD: &str = "STATEKIT_INSPECT_CHILD";

/// The inspector as `statekit inspect PATH` opens it, on an in-memory terminal of `size`
/// (`COLSxROWS`): its first complete frame printed, then (`page`: `UID/STATE`) the first page
/// of that keyed state. It runs as a child process — this test binary running only
/// [`inspector_child`] — so that its time and memory are bounded and measured as a command's.
fn inspect_cmd(path: &Path, size: &str, page: Option<&str>) -> Command {
    let mut spec = format!("{}\t{size}", path.display());
    if let Some(p) = page {
        spec.push('\t');
        spec.push_str(p);
    }
    let mut c = Command::new(std::env::current_exe().expect("the test binary"));
    c.args(["--exact", "inspector_child", "--nocapture", "--test-threads", "1"])
        .env(INSPECT_CHILD, spec);
    c
}

/// The child of [`inspect_cmd`] (without its variable: nothing to do). An error ends it as
/// `statekit` ends: `error: …` and exit 2.
#[test]
fn inspector_child() {
    common::inspector_child(INSPECT_CHILD);
}

/// A clean failure: exit 2, no panic, one `error:` line mentioning `needle`.
#[track_caller]
fn assert_error(r: &Ran, what: &str, needle: &str) {
    assert!(!r.stderr.contains("panicked"), "{what} panicked: {}", r.stderr);
    assert_eq!(r.code, Some(2), "{what}: stdout {} stderr {}", r.stdout, r.stderr);
    assert_eq!(r.stderr.lines().count(), 1, "{what}: one error line: {}", r.stderr);
    assert!(r.stderr.starts_with("error: "), "{what}: {}", r.stderr);
    assert!(
        r.stderr.contains(needle),
        "{what}: {:?} does not mention {needle:?}",
        r.stderr
    );
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf8 path")
}

fn read_meta(dir: &Path) -> SnapshotMetadata {
    decode_metadata(&std::fs::read(dir.join(METADATA_FILE_NAME)).expect("read"), "_metadata").expect("decode")
}

/// Rewrites `dir/_metadata` after `edit` (CRC recomputed: the damage passes every checksum).
fn edit_meta(dir: &Path, edit: impl FnOnce(&mut SnapshotMetadata)) {
    let mut m = read_meta(dir);
    edit(&mut m);
    std::fs::write(dir.join(METADATA_FILE_NAME), encode_metadata(&m)).expect("write");
}

/// `demo wordcount` in `dir` with the fresh output directories `{tag}-out`, `{tag}-cp` and
/// `{tag}-sp`, then `more`, within `limit`.
fn wordcount(dir: &Path, tag: &str, more: &[&str], limit: Duration) -> Ran {
    let dirs = format!("--output {tag}-out --checkpoint-dir {tag}-cp --savepoint-dir {tag}-sp");
    let mut args = wordcount_args(&dirs);
    args.extend_from_slice(more);
    run_bounded(dir, &args, limit)
}

/// A word-count savepoint (parallelism 2) under `dir/name`; returns its directory.
fn wordcount_savepoint(dir: &Path, name: &str) -> PathBuf {
    let r = wordcount(dir, name, &["--stop-with-savepoint"], Duration::from_secs(300));
    assert_eq!(r.code, Some(0), "word count: {}", r.stderr);
    dir.join(r.stdout.trim())
}

/// `demo wordcount --restore PATH` with fresh output directories.
fn restore(dir: &Path, tag: &str, path: &Path) -> Ran {
    wordcount(dir, tag, &["--restore", s(path)], LIMIT)
}

/// The keyed data file of subtask `i` of operator `uid`.
fn keyed_file(dir: &Path, uid: &str, i: usize) -> PathBuf {
    let m = read_meta(dir);
    let op = m.operator(uid).expect("operator");
    dir.join(&op.subtasks[i].keyed.canonical().expect("keyed file").path)
}

/// Point 4: a FIFO as `_metadata` or as a data file made `show`, `verify`, `dump`, `diff` and
/// `demo --restore` hang forever in `open()`.
#[test]
fn fifos_are_refused_not_waited_for() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let good = wordcount_savepoint(d, "wc");
    let fifo_md = d.join("fifo-metadata");
    copy_dir(&good, &fifo_md);
    mkfifo(&fifo_md.join(METADATA_FILE_NAME));
    let dump = |p: &Path| run_bounded(d, &["dump", s(p), "--uid", "counter", "--state", "count"], LIMIT);
    for (what, r) in [
        ("show", run_bounded(d, &["show", s(&fifo_md)], LIMIT)),
        ("dump", dump(&fifo_md)),
        ("diff", run_bounded(d, &["diff", s(&good), s(&fifo_md)], LIMIT)),
        ("verify", run_bounded(d, &["verify", s(&fifo_md)], LIMIT)),
        ("restore", restore(d, "r1", &fifo_md)),
    ] {
        assert_error(&r, what, "is a FIFO, not a regular file");
    }
    let fifo_data = d.join("fifo-data");
    copy_dir(&good, &fifo_data);
    mkfifo(&keyed_file(&fifo_data, "counter", 0));
    let v = run_bounded(d, &["verify", s(&fifo_data)], LIMIT);
    assert_eq!(v.code, Some(1), "verify: {} {}", v.stdout, v.stderr);
    assert!(v.stdout.contains("is a FIFO, not a regular file"), "{}", v.stdout);
    for (what, r) in [
        ("dump", dump(&fifo_data)),
        ("diff", run_bounded(d, &["diff", s(&good), s(&fifo_data)], LIMIT)),
        ("restore", restore(d, "r2", &fifo_data)),
    ] {
        assert_error(&r, what, "is a FIFO, not a regular file");
    }
    // Point 12: a directory where a file is expected says so (it said "No such device").
    let dir_data = d.join("dir-data");
    copy_dir(&good, &dir_data);
    let f = keyed_file(&dir_data, "counter", 0);
    std::fs::remove_file(&f).expect("rm");
    std::fs::create_dir(&f).expect("mkdir");
    assert_error(&dump(&dir_data), "dump", "is a directory, not a regular file");
}

/// Point 12: an error and its cause were printed twice (`path: X: X`).
#[test]
fn an_error_is_printed_once() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let sp = d.join("sp");
    copy_dir(&fixture("savepoint-basic"), &sp);
    let m = read_meta(&sp);
    let f = sp.join(
        &m.operator("word-counter").expect("op").subtasks[0]
            .keyed
            .canonical()
            .expect("keyed")
            .path,
    );
    std::fs::remove_file(&f).expect("rm");
    std::os::unix::fs::symlink(&f, &f).expect("a symlink loop");
    let r = run_bounded(d, &["dump", s(&sp), "--uid", "word-counter", "--state", "count"], LIMIT);
    assert_error(&r, "dump", "Too many levels of symbolic links");
    assert_eq!(
        r.stderr.matches("Too many levels of symbolic links").count(),
        1,
        "{}",
        r.stderr
    );
}

/// Point 3: `list<list<unit>>` with 3-byte inner lists each claiming 2^20 units: a 301-byte
/// value took 7 GB and 17 s in `dump`, `diff` and `inspect`.
#[test]
fn values_cannot_decode_to_more_than_a_bounded_multiple_of_their_size() {
    use statekit_checkpoint::SnapshotWriter;
    use statekit_core::storage::{LocalStorage, Storage};
    use statekit_core::{key_group_for_key, KeyGroupRange, MemoryView, OwnedEntry, StateDescriptor, TypeSchema};
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let schema = TypeSchema::List(Box::new(TypeSchema::List(Box::new(TypeSchema::Unit))));
    let write = |name: &str, outer: u64| -> PathBuf {
        let mut value = Vec::new();
        statekit_core::schema::put_varint(&mut value, outer);
        for _ in 0..outer {
            statekit_core::schema::put_varint(&mut value, 1 << 20);
        }
        let states = vec![StateDescriptor::value("blob", TypeSchema::Utf8, schema.clone())];
        let entry = OwnedEntry {
            key_group: key_group_for_key(b"k", 128),
            state: 0,
            key: b"k".to_vec(),
            namespace: vec![],
            user_key: None,
            value,
            timestamp: None,
        };
        let view = MemoryView::new(128, KeyGroupRange::all(128), states, vec![entry]);
        let storage: std::sync::Arc<dyn Storage> = std::sync::Arc::new(LocalStorage::new(d.join(name)));
        let w = SnapshotWriter::new(storage, "", statekit_format::SnapshotKind::Savepoint, 1, "job").expect("writer");
        w.register_operator("op", 1, 128).expect("register");
        w.write_subtask("op", 0, Some(&view), None, false).expect("write");
        w.finish().expect("finish");
        d.join(name)
    };
    let a = write("a", 100);
    let b = write("b", 99);
    // Under a 4 GB address-space limit: the old decoder needed 7 GB.
    let limited = |cmd: &Command| {
        let mut c = Command::new("sh");
        c.current_dir(d)
            .arg("-c")
            .arg("ulimit -v 4000000; exec \"$0\" \"$@\"")
            .arg(cmd.get_program())
            .args(cmd.get_args())
            .envs(cmd.get_envs().filter_map(|(k, v)| Some((k, v?))));
        let t0 = Instant::now();
        let what: Vec<&str> = cmd.get_args().filter_map(|a| a.to_str()).collect();
        let r = run_cmd(&mut c, &what, LIMIT);
        (r, t0.elapsed())
    };
    let statekit = |args: &[&str]| {
        let mut c = Command::new(bin());
        c.args(args);
        c
    };
    for (args, cmd) in [
        vec!["dump", s(&a), "--uid", "op", "--state", "blob"],
        vec!["diff", s(&a), s(&b)],
        // The inspector's first frame, then the first page of op/blob.
        vec!["inspect", s(&a), "120x30", "op/blob"],
        vec!["verify", s(&a)],
    ]
    .into_iter()
    .map(|args| {
        let cmd = match args[0] {
            "inspect" => inspect_cmd(&a, args[2], Some(args[3])),
            _ => statekit(&args),
        };
        (args, cmd)
    }) {
        let (r, took) = limited(&cmd);
        assert!(!r.stderr.contains("panicked"), "{args:?}: {}", r.stderr);
        assert!(r.code.is_some(), "{args:?} died: {}", r.stderr);
        assert!(took < Duration::from_secs(20), "{args:?} took {took:?}");
        assert!(r.max_rss_kb < 1_000_000, "{args:?}: {} kB", r.max_rss_kb);
        if args[0] == "dump" {
            assert_eq!(r.code, Some(0), "{}", r.stderr);
            assert!(r.stdout.contains("implausible counts"), "{}", r.stdout);
        }
    }
}

/// Point 5: `inspect` of a snapshot with max parallelism `u32::MAX` aborted allocating 32 GiB
/// for its key-group chart; point 11: `dump` at max parallelism 0 printed "0 entries", exit 0.
#[test]
fn an_impossible_max_parallelism_is_refused_before_use() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    for (name, max_p) in [("huge", u32::MAX), ("zero", 0)] {
        let sp = d.join(name);
        copy_dir(&fixture("savepoint-basic"), &sp);
        edit_meta(&sp, |m| {
            for op in &mut m.operators {
                op.max_parallelism = max_p;
            }
        });
        for args in [
            vec!["show", s(&sp)],
            vec!["dump", s(&sp), "--uid", "word-counter", "--state", "count"],
            vec!["diff", s(&sp), s(&fixture("savepoint-basic"))],
        ] {
            let r = run_bounded(d, &args, LIMIT);
            assert_error(&r, &format!("{name} {args:?}"), "max_parallelism");
        }
        // The inspector shows the error in its first frame.
        let r = run_cmd(
            inspect_cmd(&sp, "200x30", None).current_dir(d),
            &["inspect", s(&sp)],
            LIMIT,
        );
        assert!(!r.stderr.contains("panicked"), "{name} inspect: {}", r.stderr);
        assert_eq!(r.code, Some(0), "{name} inspect: {}", r.stderr);
        assert!(r.stdout.contains("max_parallelism"), "{name} inspect: {}", r.stdout);
        let v = run_bounded(d, &["verify", s(&sp)], LIMIT);
        assert_eq!(v.code, Some(1), "{name} verify: {} {}", v.stdout, v.stderr);
        assert!(v.stdout.contains("max parallelism"), "{}", v.stdout);
    }
}

/// Point 6: `show`, `ls`, `verify`, `gc` and `demo` panicked on a closed standard output.
#[test]
fn a_closed_stdout_ends_every_command_quietly() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let sp = fixture("savepoint-basic");
    std::fs::create_dir_all(d.join("base/job/shared")).expect("mkdir");
    let closed = |args: &[&str]| {
        let (reader, writer) = std::io::pipe().expect("pipe");
        drop(reader);
        let mut c = Command::new(bin());
        c.current_dir(d).args(args).stdout(writer).stderr(Stdio::piped());
        let out = c.output().expect("run");
        (out.status.code(), String::from_utf8_lossy(&out.stderr).to_string())
    };
    for args in [
        vec!["show", s(&sp)],
        vec!["ls", s(&sp)],
        vec!["verify", s(&sp)],
        vec!["gc", "base", "--dry-run"],
        vec![
            "demo",
            "wordcount",
            "--echo",
            "--output",
            "o",
            "--checkpoint-dir",
            "c",
            "--savepoint-dir",
            "s",
        ],
    ] {
        let (code, stderr) = closed(&args);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_eq!(code, Some(141), "{args:?}: {stderr}");
        assert!(!stderr.contains("error"), "{args:?}: {stderr}");
    }
}

/// Point 7: a lone `.skcl` file was read whole into memory before its magic was checked (a
/// 2 GB sparse file cost 2.1 GB).
#[test]
fn a_huge_file_that_is_not_a_log_costs_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let f = std::fs::File::create(d.join("big.skcl")).expect("create");
    f.set_len(2 << 30).expect("sparse 2 GB");
    for args in [vec!["verify", "big.skcl"], vec!["dump", "big.skcl", "--changes"]] {
        let r = run_bounded(d, &args, LIMIT);
        assert!(!r.stderr.contains("panicked"), "{args:?}: {}", r.stderr);
        assert!(
            matches!(r.code, Some(1) | Some(2)),
            "{args:?}: {} {}",
            r.stdout,
            r.stderr
        );
        assert!(
            format!("{}{}", r.stdout, r.stderr).contains("bad magic"),
            "{args:?}: {} {}",
            r.stdout,
            r.stderr
        );
        assert!(r.max_rss_kb < 200_000, "{args:?}: {} kB", r.max_rss_kb);
    }
}

/// Point 8: `demo --restore` accepted a snapshot `verify` rejects (subtask 1's handle pointing
/// at subtask 0's file) and silently restored half the state; point 9: `verify` passed a
/// savepoint whose keyed files are absolute references outside it.
#[test]
fn restore_and_every_reader_refuse_what_verify_rejects() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let good = wordcount_savepoint(d, "wc");
    let twice = d.join("twice");
    copy_dir(&good, &twice);
    edit_meta(&twice, |m| {
        let op = m.operators.iter_mut().find(|o| o.uid == "counter").expect("counter");
        op.subtasks[1].keyed = op.subtasks[0].keyed.clone();
    });
    let v = run_bounded(d, &["verify", s(&twice)], LIMIT);
    assert_eq!(v.code, Some(1), "{} {}", v.stdout, v.stderr);
    assert!(v.stdout.contains("also referenced by"), "{}", v.stdout);
    for (what, r) in [
        ("restore", restore(d, "r", &twice)),
        (
            "dump",
            run_bounded(d, &["dump", s(&twice), "--uid", "counter", "--state", "count"], LIMIT),
        ),
        ("diff", run_bounded(d, &["diff", s(&good), s(&twice)], LIMIT)),
        ("show", run_bounded(d, &["show", s(&twice)], LIMIT)),
    ] {
        assert_error(&r, what, "also referenced by");
    }
    assert!(!d.join("r-out").exists() || common::committed_lines(&d.join("r-out")).is_empty());

    let absolute = d.join("absolute");
    copy_dir(&good, &absolute);
    let target = keyed_file(&absolute, "counter", 0);
    edit_meta(&absolute, |m| {
        let op = m.operators.iter_mut().find(|o| o.uid == "counter").expect("counter");
        let k = op.subtasks[0].keyed.canonical_mut().expect("keyed");
        k.scope = FileScope::Absolute;
        k.path = s(&target).to_string();
    });
    let v = run_bounded(d, &["verify", s(&absolute)], LIMIT);
    assert_eq!(v.code, Some(1), "{} {}", v.stdout, v.stderr);
    assert!(v.stdout.contains("a savepoint must be self-contained"), "{}", v.stdout);
    assert_error(&restore(d, "r2", &absolute), "restore", "self-contained");
}

/// Point 11: sums wrapped silently (`18446744073709551614 entries` in `show`/`ls`), and a huge
/// `gc --min-age` wrapped.
#[test]
fn implausible_sums_and_durations_are_errors() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let sp = d.join("sp");
    copy_dir(&fixture("savepoint-basic"), &sp);
    edit_meta(&sp, |m| {
        for st in m.operators.iter_mut().flat_map(|o| o.subtasks.iter_mut()) {
            if let Some(k) = st.keyed_stats.as_mut() {
                k.entries = u64::MAX;
            }
        }
    });
    let r = run_bounded(d, &["show", s(&sp)], LIMIT);
    assert_error(&r, "show", "more than 2^64");
    let r = run_bounded(d, &["ls", s(d)], LIMIT);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(!r.stdout.contains("18446744073709551614"), "{}", r.stdout);
    assert!(r.stdout.contains("more than 2^64"), "{}", r.stdout);
    std::fs::create_dir_all(d.join("base")).expect("mkdir");
    let r = run_bounded(
        d,
        &["gc", "base", "--min-age", "999999999999999999d", "--dry-run"],
        LIMIT,
    );
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(r.stderr.contains("too large"), "{}", r.stderr);
}

/// Points 1 and 2 through the command: `gc --yes` followed a directory symlink named like a
/// checkpoint and deleted everything below it.
#[test]
fn gc_never_deletes_through_a_symlink() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let base = d.join("base");
    std::fs::create_dir_all(base.join("job")).expect("mkdir");
    std::fs::create_dir_all(d.join("elsewhere")).expect("mkdir");
    std::fs::write(d.join("elsewhere/precious"), b"keep").expect("write");
    std::os::unix::fs::symlink(d.join("elsewhere"), base.join("job/chk-999")).expect("symlink");
    let r = run_bounded(d, &["gc", "base", "--yes", "--min-age", "0s"], LIMIT);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(r.stdout.contains("left alone: a symlink"), "{}", r.stdout);
    assert_eq!(std::fs::read(d.join("elsewhere/precious")).expect("kept"), b"keep");
}
