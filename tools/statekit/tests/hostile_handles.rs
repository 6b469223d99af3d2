//! Issue 40, points 2 and 3: file handles of an Apache Flink snapshot that lead outside it.
//!
//! Real Flink 1.20.5 snapshots (`fixtures/flink/flink-1.20.5/`) whose `_metadata` is edited
//! so a handle names `../outside/x`, `/abs/x` or `file:/abs/x` — a real, readable file
//! outside the snapshot. Before the fix `show`, `dump`, `verify`, `export`, `convert` and
//! `query` read it silently (verify said OK, convert copied its bytes, an error message showed
//! its first bytes). Now a savepoint's handles resolve only inside its directory, and a
//! checkpoint's only below its job directory (its job's changelog directory near it
//! included) or a place the user named with `--flink-root`; on S3 the same per bucket and
//! prefix. Every refusal names the handle, and no output holds a byte of the outside file.

mod common;

use common::moto::Moto;
use common::{copy_files, files, run, text};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/flink/flink-1.20.5")
        .join(rel)
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Java `writeUTF` of `s` (ASCII here): a big-endian `u16` length, then the bytes.
fn utf(s: &str) -> Vec<u8> {
    let mut v = u16::try_from(s.len()).expect("short").to_be_bytes().to_vec();
    v.extend_from_slice(s.as_bytes());
    v
}

/// Where `needle` occurs in `hay`.
fn find_all(hay: &[u8], needle: &[u8]) -> Vec<usize> {
    hay.windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .map(|(i, _)| i)
        .collect()
}

/// How an edited handle is written.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// A `RelativeFileStateHandle` (tag 6: path, size) with another path.
    Relative,
    /// A `FileStateHandle` (tag 2: size, path) with this path instead of the relative one.
    Absolute,
}

/// `_metadata` (in `dir`) with its relative handle `old` (a file name) rewritten as `kind`
/// naming `new`.
fn edit_relative(dir: &Path, old: &str, kind: Kind, new: &str) {
    let md = dir.join("_metadata");
    let bytes = std::fs::read(&md).expect("read _metadata");
    let mut pat = vec![6u8];
    pat.extend(utf(old));
    let at = find_all(&bytes, &pat);
    assert_eq!(at.len(), 1, "{old} once in {}", md.display());
    let start = at[0];
    let size_at = start + pat.len();
    let size = &bytes[size_at..size_at + 8];
    let mut handle = Vec::new();
    match kind {
        Kind::Relative => {
            handle.push(6);
            handle.extend(utf(new));
            handle.extend_from_slice(size);
        }
        Kind::Absolute => {
            handle.push(2);
            handle.extend_from_slice(size);
            handle.extend(utf(new));
        }
    }
    let mut out = bytes[..start].to_vec();
    out.extend(handle);
    out.extend_from_slice(&bytes[size_at + 8..]);
    std::fs::write(&md, out).expect("write _metadata");
}

/// `_metadata` (in `dir`) with every string `old` replaced by `new` (both Java UTF).
fn edit_string(dir: &Path, old: &str, new: &str) {
    let md = dir.join("_metadata");
    let bytes = std::fs::read(&md).expect("read _metadata");
    let pat = utf(old);
    let at = find_all(&bytes, &pat);
    assert!(!at.is_empty(), "{old} in {}", md.display());
    let mut out = Vec::new();
    let mut last = 0;
    for i in at {
        out.extend_from_slice(&bytes[last..i]);
        out.extend(utf(new));
        last = i + pat.len();
    }
    out.extend_from_slice(&bytes[last..]);
    std::fs::write(&md, out).expect("write _metadata");
}

/// The word count's keyed stream of subtask 0 (`word-count`, key groups 0..63) in the heap
/// CANONICAL savepoint.
const WORD_COUNT_0: &str = "8506d069-5aaf-4fc5-9286-38f81e6d3661";

/// What a secret outside file starts with, and a phrase of it: neither may appear in any
/// output, nor the first four bytes as hex.
const SECRET: &[u8] = b"\x7fSK!TOP-SECRET-OUTSIDE-CONTENT-4f1d2a";

fn assert_no_leak(what: &str, o: &Output, extra: &[PathBuf]) {
    let mut all = o.stdout.clone();
    all.extend_from_slice(&o.stderr);
    for p in extra {
        for f in if p.is_dir() { files(p) } else { vec![p.clone()] } {
            all.extend(std::fs::read(&f).unwrap_or_default());
        }
    }
    let lower = String::from_utf8_lossy(&all).to_ascii_lowercase();
    for needle in ["top-secret", "7f534b21", "7f 53 4b 21", "sk!top"] {
        assert!(!lower.contains(needle), "{what}: output holds {needle:?}: {}", text(o));
    }
    assert!(
        find_all(&all, &SECRET[..4]).is_empty(),
        "{what}: output holds the secret's first bytes"
    );
}

/// Every reading command on `snapshot`: each must fail, `verify` with exit 1 naming
/// `handle`, the others with an error naming it and the rule; nothing of the outside file
/// shows in any output. `show` reads `_metadata` only: it refuses a handle that is outside by
/// its text (`by_text`), and reads nothing otherwise.
fn assert_every_command_refuses(work: &Path, snapshot: &Path, handle: &str, by_text: bool, flink: &[&str]) {
    let sp = s(snapshot);
    let export_out = work.join("export-out");
    let convert_out = work.join("convert-out");
    let _ = std::fs::remove_dir_all(&export_out);
    let _ = std::fs::remove_dir_all(&convert_out);
    let count = r#"SELECT count(*) AS n FROM "word-count"."count""#;
    let with = |args: &[&str]| {
        let mut v: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        v.extend(flink.iter().map(|a| a.to_string()));
        v
    };
    let cases: Vec<(&str, Vec<String>)> = vec![
        ("show", with(&["show", sp])),
        (
            "dump",
            with(&["dump", sp, "--uid", "word-count", "--state", "count", "--json"]),
        ),
        ("verify", with(&["verify", sp])),
        (
            "export",
            with(&[
                "export",
                sp,
                s(&export_out),
                "--uid",
                "word-count",
                "--state",
                "count",
                "--format",
                "jsonl",
            ]),
        ),
        (
            "convert",
            with(&["convert", sp, s(&convert_out), "--flink-uid", "word-count"]),
        ),
        ("query", with(&["query", sp, count])),
    ];
    for (what, args) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = run(work, &args);
        let t = text(&o);
        if what == "show" && !by_text {
            assert_eq!(o.status.code(), Some(0), "{what} {handle}: reads _metadata only: {t}");
            assert_no_leak(what, &o, &[]);
            continue;
        }
        if what == "verify" {
            assert_eq!(o.status.code(), Some(1), "{what} {handle}: {t}");
            assert!(
                String::from_utf8_lossy(&o.stdout).contains(handle),
                "{what}: names the handle {handle}: {t}"
            );
        } else {
            assert_ne!(o.status.code(), Some(0), "{what} {handle}: {t}");
            assert!(t.contains(handle), "{what}: names the handle {handle}: {t}");
        }
        assert!(t.contains("outside the snapshot"), "{what} {handle}: says why: {t}");
        assert!(!t.contains("panicked"), "{what}: {t}");
        assert_no_leak(what, &o, &[export_out.clone(), convert_out.clone()]);
    }
}

/// Point 2: a savepoint whose handle is `../outside/x`, `/abs/x` or `file:/abs/x` (as a
/// relative handle's path, or as an absolute `FileStateHandle`), naming the real state file
/// moved outside (so a reader that follows it decodes it without complaint) or a secret
/// file: every command refuses it, naming the handle, and nothing of the file shows.
#[test]
fn savepoint_handles_that_leave_its_directory_are_refused_by_every_command() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let work = tmp.path();
    let src = fixture("savepoint-hashmap-canonical/savepoint");
    let outside = work.join("outside");
    std::fs::create_dir_all(&outside).expect("mkdir");
    // The real state file, outside: a reader that follows the handle finds valid state.
    std::fs::copy(src.join(WORD_COUNT_0), outside.join("x")).expect("copy");
    std::fs::write(outside.join("secret"), SECRET).expect("write secret");
    let mut n = 0;
    for target in ["x", "secret"] {
        let abs = outside.join(target);
        let abs = s(&abs).to_string();
        let forms = [
            (Kind::Relative, format!("../outside/{target}")),
            (Kind::Relative, abs.clone()),
            (Kind::Relative, format!("file:{abs}")),
            (Kind::Absolute, abs.clone()),
            (Kind::Absolute, format!("file:{abs}")),
        ];
        for (kind, handle) in forms {
            n += 1;
            let sp = work.join(format!("sp-{n}"));
            copy_files(&src, &sp);
            // The savepoint's own copy is gone: only the outside file could answer.
            std::fs::remove_file(sp.join(WORD_COUNT_0)).expect("rm");
            edit_relative(&sp, WORD_COUNT_0, kind, &handle);
            assert_every_command_refuses(work, &sp, &handle, true, &[]);
        }
    }
}

/// A symlink inside a savepoint that leads outside it counts as outside.
#[test]
fn a_symlink_out_of_a_savepoint_is_outside() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let work = tmp.path();
    let src = fixture("savepoint-hashmap-canonical/savepoint");
    let sp = work.join("sp");
    copy_files(&src, &sp);
    let outside = work.join("elsewhere");
    std::fs::create_dir_all(&outside).expect("mkdir");
    std::fs::rename(sp.join(WORD_COUNT_0), outside.join("state")).expect("move");
    std::os::unix::fs::symlink(outside.join("state"), sp.join(WORD_COUNT_0)).expect("symlink");
    assert_every_command_refuses(work, &sp, WORD_COUNT_0, false, &[]);
}

/// The changelog checkpoint with its materialized part: a copy of the fixture (checkpoints,
/// `dstl/` beside them), its job directory and the `_metadata` of `chk-2`.
fn changelog_checkpoint(work: &Path) -> (PathBuf, PathBuf) {
    let base = work.join("ck");
    copy_files(&fixture("checkpoint-changelog-hashmap-materialized"), &base);
    let job = base.join("checkpoints/5eed5eed000000000000000000000006");
    (base, job)
}

/// Where the fixture's checkpoints were written (the prefix of their absolute handles).
const ORIGINAL_JOB: &str =
    "/data/statekit-oracle/flink-1.20.5/checkpoint-changelog-hashmap-materialized/checkpoints/5eed5eed000000000000000000000006";

/// The materialized keyed stream of `word-count`'s subtask 0 in `chk-2`: a taskowned file
/// `_metadata` names by its absolute path.
const WORD_COUNT_TASKOWNED: &str = "9c35228f-fdb5-4736-8e1a-72e4e71053be";

/// Point 2, checkpoints: absolute handles below the checkpoint's own job directory (and its
/// job's changelog directory beside the checkpoints) still read, after the checkpoint was
/// moved (re-rooted by its place, or with `--flink-root`); one that leads elsewhere is
/// refused unless `--flink-root` names that place.
#[test]
fn checkpoint_handles_read_below_the_job_directory_or_a_named_root_only() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let work = tmp.path();
    let (base, job) = changelog_checkpoint(work);
    let chk = job.join("chk-2");
    let ok = |args: &[&str]| {
        let o = run(work, args);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", text(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    // The fixture as copied: its handles name /data/statekit-oracle/…, found again below
    // the job directory and in the job's dstl/ beside the checkpoints.
    assert!(ok(&["verify", s(&chk)]).contains("OK"));

    // A taskowned file moved out of the job directory, to a place a reader used to find by
    // the path's tail under an ancestor (`ck/taskowned/`): refused, unless --flink-root
    // names its new place.
    let name = WORD_COUNT_TASKOWNED;
    let moved = base.clone();
    std::fs::create_dir_all(moved.join("taskowned")).expect("mkdir");
    std::fs::rename(job.join("taskowned").join(name), moved.join("taskowned").join(name)).expect("move");
    let handle = format!("file:{ORIGINAL_JOB}/taskowned/{name}");
    let o = run(work, &["verify", s(&chk)]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains(&handle), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("outside the snapshot"),
        "{}",
        text(&o)
    );
    let root = format!("{ORIGINAL_JOB}={}", s(&moved));
    assert!(ok(&["verify", s(&chk), "--flink-root", &root]).contains("OK"));
    let dumped = ok(&[
        "dump",
        s(&chk),
        "--uid",
        "word-count",
        "--state",
        "count",
        "--json",
        "--flink-root",
        &root,
    ]);
    assert!(dumped.starts_with('['), "{dumped}");
    std::fs::rename(moved.join("taskowned").join(name), job.join("taskowned").join(name)).expect("move back");

    // A handle edited to name a real copy of the file at an absolute path elsewhere: refused
    // (verify exit 1 naming it) — every command — unless --flink-root names that place.
    let elsewhere = work.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).expect("mkdir");
    std::fs::copy(job.join("taskowned").join(name), elsewhere.join(name)).expect("copy");
    let hostile = elsewhere.join(name);
    let hostile = format!("file:{}", s(&hostile));
    edit_string(&chk, &handle, &hostile);
    assert_every_command_refuses(work, &chk, &hostile, false, &[]);
    let named = format!("{}={}", s(&elsewhere), s(&elsewhere));
    assert!(ok(&["verify", s(&chk), "--flink-root", &named]).contains("OK"));

    // A handle into a secret file elsewhere: refused, nothing of it shown.
    std::fs::write(elsewhere.join("secret"), SECRET).expect("write");
    let secret = format!("file:{}", s(&elsewhere.join("secret")));
    edit_string(&chk, &hostile, &secret);
    assert_every_command_refuses(work, &chk, &secret, false, &[]);
    // A `..` that climbs out of the job directory is refused as such.
    let climbing = format!(
        "file:{ORIGINAL_JOB}/taskowned/../../../../../../../../{}",
        s(&elsewhere.join("secret"))
    );
    edit_string(&chk, &secret, &climbing);
    assert_every_command_refuses(work, &chk, &climbing, true, &[]);
}

/// Every shipped checkpoint fixture still verifies where it is (absolute handles of another
/// machine re-rooted below its job directory) — guards the rule against refusing Flink's own
/// layout.
#[test]
fn shipped_checkpoints_still_verify() {
    for name in [
        "checkpoint-changelog-hashmap",
        "checkpoint-changelog-hashmap-materialized",
        "checkpoint-rocksdb-incremental",
    ] {
        for p in files(&fixture(name)) {
            if p.file_name().is_some_and(|n| n == "_metadata") {
                let o = run(Path::new("."), &["verify", s(&p)]);
                assert_eq!(o.status.code(), Some(0), "{}: {}", p.display(), text(&o));
            }
        }
    }
}

fn run_s3(moto: &Moto, dir: &Path, args: &[&str]) -> Output {
    Command::new(common::bin())
        .current_dir(dir)
        .args(args)
        .envs(moto.env())
        .env("STATEKIT_OBJECT_STORE_RETRIES", "1")
        .env("STATEKIT_OBJECT_STORE_RETRY_TIMEOUT_SECS", "5")
        .output()
        .expect("run statekit")
}

/// Point 3: a savepoint under `s3://hostile-a/sp` whose `_metadata` points into
/// `s3://hostile-b/…` (a real state file there, readable with the caller's credentials) is
/// refused — by `show`, `dump` and `verify` (exit 1, naming the handle) — and so is one into
/// another prefix of its own bucket; its own files still read.
#[test]
fn an_s3_savepoint_pointing_into_another_bucket_or_prefix_is_refused() {
    let Some(moto) = Moto::start() else { return };
    moto.create_bucket("hostile-a");
    moto.create_bucket("hostile-b");
    let tmp = tempfile::tempdir().expect("tempdir");
    let work = tmp.path();
    let src = fixture("savepoint-hashmap-canonical/savepoint");
    let state = std::fs::read(src.join(WORD_COUNT_0)).expect("read");
    moto.put("hostile-b", "secret/x", &state);
    moto.put("hostile-a", "other/x", &state);
    moto.put("hostile-b", "secret/s", SECRET);

    // The untouched savepoint reads on S3 (the rule admits its own files).
    moto.upload_files(&src, files(&src), "hostile-a", "good");
    let o = run_s3(&moto, work, &["verify", "s3://hostile-a/good"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    for (n, handle) in [
        "s3://hostile-b/secret/x",
        "s3a://hostile-b/secret/x",
        "s3://hostile-a/other/x",
        "s3://hostile-b/secret/s",
    ]
    .into_iter()
    .enumerate()
    {
        let sp = work.join(format!("sp-{n}"));
        copy_files(&src, &sp);
        std::fs::remove_file(sp.join(WORD_COUNT_0)).expect("rm");
        edit_relative(&sp, WORD_COUNT_0, Kind::Absolute, handle);
        let prefix = format!("sp-{n}");
        moto.upload_files(&sp, files(&sp), "hostile-a", &prefix);
        let url = format!("s3://hostile-a/{prefix}");
        let cases: [(&str, Vec<&str>); 3] = [
            ("show", vec!["show", &url]),
            (
                "dump",
                vec!["dump", &url, "--uid", "word-count", "--state", "count", "--json"],
            ),
            ("verify", vec!["verify", &url]),
        ];
        for (what, args) in cases {
            let o = run_s3(&moto, work, &args);
            let t = text(&o);
            if what == "verify" {
                assert_eq!(o.status.code(), Some(1), "{what} {handle}: {t}");
            } else {
                assert_ne!(o.status.code(), Some(0), "{what} {handle}: {t}");
            }
            assert!(t.contains(handle), "{what}: names {handle}: {t}");
            assert!(t.contains("outside the snapshot"), "{what} {handle}: {t}");
            assert_no_leak(what, &o, &[]);
        }
    }
}

/// statekit's own snapshot format: its references cannot name `..` or an absolute path in a
/// savepoint (the storage and the structural check refuse them), but a data file replaced by a
/// symlink to a file outside the snapshot was read through it. Now it is refused like a
/// Flink handle: the same rule for both formats.
#[test]
fn a_statekit_savepoint_file_symlinked_outside_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let work = tmp.path();
    let sp = work.join("sp");
    copy_files(&common::fixture("savepoint-basic"), &sp);
    let outside = work.join("outside");
    std::fs::create_dir_all(&outside).expect("mkdir");
    // The real file, moved outside and linked back: a reader that follows it finds valid data.
    std::fs::rename(sp.join("word-counter/0.keyed"), outside.join("0.keyed")).expect("move");
    std::os::unix::fs::symlink(outside.join("0.keyed"), sp.join("word-counter/0.keyed")).expect("symlink");
    let v = run(work, &["verify", s(&sp)]);
    assert_eq!(v.status.code(), Some(1), "{}", text(&v));
    assert!(text(&v).contains("symlink that leads out"), "{}", text(&v));
    let d = run(
        work,
        &["dump", s(&sp), "--uid", "word-counter", "--state", "count", "--json"],
    );
    assert_ne!(d.status.code(), Some(0), "{}", text(&d));
    assert!(text(&d).contains("symlink that leads out"), "{}", text(&d));
}
