//! The read commands on a real S3 API server (moto, on 127.0.0.1; `scripts/test.sh` installs
//! it and sets `STATEKIT_MOTO`): the same answers as on local disk, `show` in one GET,
//! `dump --key` reading a small fraction of the savepoint, damage reported by URL and offset,
//! a stopped server and unsupported schemes refused with a clear error (exit 2).
//! Without `STATEKIT_MOTO` (a bare `cargo test`) each test says so and passes.

mod common;

use common::moto::{FaultProxy, Moto};
use common::{bin, copy_files, files, run, text, wordcount_args};
use statekit_core::TypeSchema;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BUCKET: &str = "statekit-test";

/// `statekit args…` in `dir` with the server's environment; the counters file it wrote.
fn run_s3(moto: &Moto, dir: &Path, args: &[&str]) -> (Output, Vec<serde_json::Value>) {
    run_env(moto.env(), dir, args)
}

/// [`run_s3`] with the environment `env` (a [`FaultProxy`]'s).
fn run_env(env: Vec<(&'static str, String)>, dir: &Path, args: &[&str]) -> (Output, Vec<serde_json::Value>) {
    let stats = dir.join(format!("stats-{}.jsonl", rand::random::<u64>()));
    let out = Command::new(bin())
        .current_dir(dir)
        .args(args)
        .envs(env)
        .env("STATEKIT_OBJECT_STORE_STATS", &stats)
        .env("STATEKIT_OBJECT_STORE_RETRIES", "1")
        .env("STATEKIT_OBJECT_STORE_RETRY_TIMEOUT_SECS", "5")
        .output()
        .expect("run statekit");
    let lines = std::fs::read_to_string(&stats)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    (out, lines)
}

/// The S3 server (with the bucket [`BUCKET`]), or `None` where it cannot run.
fn started() -> Option<Moto> {
    let moto = Moto::start()?;
    moto.create_bucket(BUCKET);
    Some(moto)
}

/// The path a savepointing run printed on the last line of its output.
fn printed_savepoint(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .last()
        .expect("a path")
        .to_string()
}

/// A fresh directory with the inputs `one.txt` (`one`) and `two.txt` (`a`).
fn two_inputs(one: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("one.txt"), one).expect("write");
    std::fs::write(dir.path().join("two.txt"), "a\n").expect("write");
    dir
}

/// Uploads the local savepoint `sp` to `s3://BUCKET/PREFIX/NAME` (its own name); returns that
/// URL.
fn upload_savepoint(moto: &Moto, sp: &Path, prefix: &str) -> String {
    let name = sp.file_name().expect("name").to_string_lossy().to_string();
    moto.upload_files(sp, files(sp), BUCKET, &format!("{prefix}/{name}"));
    format!("s3://{BUCKET}/{prefix}/{name}")
}

/// Starts `statekit args…` in `dir` with the server's environment, its output piped (a shard
/// task running beside the others).
fn spawn_s3(moto: &Moto, dir: &Path, args: &[&str]) -> std::process::Child {
    Command::new(bin())
        .current_dir(dir)
        .args(args)
        .envs(moto.env())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("shard")
}

/// `finish-shards OUT --shards 3` before shard `missing` has run: exit 2, naming it.
#[track_caller]
fn finishing_names_the_missing_shard(moto: &Moto, dir: &Path, out: &str, missing: u32) {
    let (o, _) = run_s3(moto, dir, &["finish-shards", out, "--shards", "3"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains(&format!("shard {missing} of 3 has not finished")),
        "{}",
        text(&o)
    );
}

/// [`run_s3`] with exit 0 asserted (naming the run's output otherwise).
#[track_caller]
fn ok_s3(moto: &Moto, dir: &Path, args: &[&str]) -> (Output, Vec<serde_json::Value>) {
    let (o, stats) = run_s3(moto, dir, args);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    (o, stats)
}

/// `statekit ls URL --json` on the server: its items (exit 0 asserted).
fn ls_json(moto: &Moto, dir: &Path, url: &str) -> Vec<serde_json::Value> {
    let (o, _) = ok_s3(moto, dir, &["ls", url, "--json"]);
    serde_json::from_slice::<serde_json::Value>(&o.stdout)
        .expect("ls --json")
        .as_array()
        .cloned()
        .expect("an array")
}

/// The paths of the complete snapshots among `ls --json` items, in their order.
fn complete_paths(items: &[serde_json::Value]) -> Vec<String> {
    items
        .iter()
        .filter(|i| i["complete"] == true)
        .filter_map(|i| i["path"].as_str().map(str::to_string))
        .collect()
}

/// The word count's savepoint of a small text, made locally: (work dir, savepoint dir).
fn wordcount_savepoint() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("words.txt"), "a b\na c\nb a d\n").expect("input");
    let demo = run(
        dir.path(),
        &["demo", "wordcount", "--input", "words.txt", "--stop-with-savepoint"],
    );
    assert_eq!(demo.status.code(), Some(0), "{}", text(&demo));
    let sp = std::fs::read_dir(dir.path().join("statekit-data/savepoints"))
        .expect("savepoints")
        .flatten()
        .map(|e| e.path())
        .next()
        .expect("a savepoint");
    (dir, sp)
}

/// [`wordcount_savepoint`], uploaded to `s3://BUCKET/KEY` too: (work dir, savepoint dir, its
/// URL).
fn savepoint_on_s3(moto: &Moto, key: &str) -> (tempfile::TempDir, PathBuf, String) {
    let (dir, sp) = wordcount_savepoint();
    moto.upload_files(&sp, files(&sp), BUCKET, key);
    (dir, sp, format!("s3://{BUCKET}/{key}"))
}

/// `show --json` without the fields that name where the snapshot is.
fn show_json(o: &Output) -> serde_json::Value {
    let mut v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("show --json is JSON");
    if let Some(m) = v.as_object_mut() {
        m.remove("path");
    }
    v
}

#[test]
fn read_commands_answer_as_on_local_disk() {
    let Some(moto) = started() else { return };
    let (dir, sp) = wordcount_savepoint();
    let url = upload_savepoint(&moto, &sp, "savepoints");
    let local = sp.to_string_lossy().to_string();

    // show: the same document, from one GET of _metadata.
    let (remote_show, stats) = ok_s3(&moto, dir.path(), &["show", &url, "--json"]);
    let local_show = run(dir.path(), &["show", &local, "--json"]);
    assert_eq!(show_json(&remote_show), show_json(&local_show));
    assert_eq!(stats.len(), 1, "one counters line: {stats:?}");
    assert_eq!(stats[0]["gets"], 1, "show makes exactly one GET: {stats:?}");
    assert_eq!(stats[0]["puts"], 0, "show writes nothing: {stats:?}");
    // Also by its _metadata object, and as text.
    let (o, _) = ok_s3(&moto, dir.path(), &["show", &format!("{url}/_metadata")]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("counter"), "{}", text(&o));

    // verify: every file read and checked.
    ok_s3(&moto, dir.path(), &["verify", &url]);

    // query (SQL over the snapshot) and ls of the prefix: the same answers.
    let sql = "SELECT key, value FROM \"counter\".\"count\" ORDER BY key";
    let (r, _) = run_s3(&moto, dir.path(), &["query", &url, sql, "--format", "csv"]);
    let l = run(dir.path(), &["query", &local, sql, "--format", "csv"]);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    assert_eq!(r.stdout, l.stdout);
    let items = ls_json(&moto, dir.path(), &format!("s3://{BUCKET}/savepoints"));
    assert_eq!(items.len(), 1, "{items:?}");
    assert_eq!(items[0]["status"], "not verified", "{items:?}");
    let (o, _) = ok_s3(
        &moto,
        dir.path(),
        &["ls", &format!("s3://{BUCKET}/savepoints"), "--verify", "--json"],
    );
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("\"status\": \"ok\""),
        "{}",
        text(&o)
    );

    // schema, diff against the local copy, convert and export read from S3; output is local.
    let (r, _) = run_s3(&moto, dir.path(), &["schema", &url, "--json"]);
    let l = run(dir.path(), &["schema", &local, "--json"]);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    assert_eq!(r.stdout, l.stdout);
    let (o, _) = run_s3(&moto, dir.path(), &["diff", &local, &url]);
    assert_eq!(o.status.code(), Some(0), "no differences: {}", text(&o));
    ok_s3(
        &moto,
        dir.path(),
        &["convert", &url, "converted", "--compression", "zstd"],
    );
    let o = run(dir.path(), &["verify", "converted"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    ok_s3(&moto, dir.path(), &["export", &url, "tables"]);
    assert!(dir.path().join("tables").is_dir());
    // convert and rewrite to S3: _metadata last, the output verifies, an existing output is
    // refused without --force and replaced with it; --link is local only.
    let out = format!("s3://{BUCKET}/converted");
    let (_, stats) = ok_s3(&moto, dir.path(), &["convert", &url, &out, "--format", "native"]);
    assert!(stats[0]["puts"].as_u64().unwrap_or(0) >= 3, "{stats:?}");
    ok_s3(&moto, dir.path(), &["verify", &out]);
    let (o, _) = run_s3(&moto, dir.path(), &["convert", &url, &out]);
    assert_eq!(o.status.code(), Some(2), "exists: {}", text(&o));
    ok_s3(
        &moto,
        dir.path(),
        &["rewrite", &url, &out, "--force", "--rename-uid", "counter=counter-2"],
    );
    let (o, _) = run_s3(&moto, dir.path(), &["show", &out, "--json"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("counter-2"), "{}", text(&o));
    let (o, _) = run_s3(
        &moto,
        dir.path(),
        &["dump", &out, "--uid", "counter-2", "--state", "count", "--json"],
    );
    let l = run(
        dir.path(),
        &["dump", &local, "--uid", "counter", "--state", "count", "--json"],
    );
    assert_eq!(o.stdout, l.stdout, "the rewritten savepoint holds the same counts");
    let (o, _) = run_s3(
        &moto,
        dir.path(),
        &[
            "rewrite",
            &url,
            &format!("{out}-linked"),
            "--link",
            "--rename-uid",
            "counter=c",
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    // export to S3: the same files as the local export, _tables.json last; a second export
    // to the same prefix is refused.
    let (_, stats) = ok_s3(&moto, dir.path(), &["export", &url, &format!("s3://{BUCKET}/tables")]);
    assert!(stats[0]["puts"].as_u64().unwrap_or(0) >= 2, "{stats:?}");
    let tables = dir.path().join("tables");
    for p in files(&tables) {
        let rel = p.strip_prefix(&tables).expect("below").to_string_lossy().to_string();
        let status = moto.request("GET", &format!("/{BUCKET}/tables/{rel}"), b"");
        assert_eq!(status, Some(200), "{rel} uploaded");
    }
    let (o, _) = run_s3(&moto, dir.path(), &["export", &url, &format!("s3://{BUCKET}/tables")]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(!dir.path().join("s3:").exists());

    // dump: the same entries, whole state and one key.
    for args in [
        vec!["dump", "--uid", "counter", "--state", "count", "--json"],
        vec!["dump", "--uid", "counter", "--state", "count", "--key", "a", "--json"],
    ] {
        let mut remote_args = args.clone();
        remote_args.insert(1, &url);
        let mut local_args = args.clone();
        local_args.insert(1, &local);
        let (r, _) = run_s3(&moto, dir.path(), &remote_args);
        let l = run(dir.path(), &local_args);
        assert_eq!(r.status.code(), Some(0), "{}", text(&r));
        assert_eq!(r.stdout, l.stdout, "dump {args:?} differs between S3 and local disk");
    }
}

#[test]
fn damage_missing_snapshots_stopped_servers_and_other_schemes_are_clear_errors() {
    let Some(mut moto) = Moto::start() else { return };
    moto.create_bucket(BUCKET);
    let (dir, sp) = wordcount_savepoint();
    // A copy whose first keyed data file has one byte flipped in the middle.
    let damaged = dir.path().join("damaged");
    copy_files(&sp, &damaged);
    let keyed = find_file(&damaged, |p| p.extension().is_some_and(|e| e == "skd"))
        .or_else(|| find_file(&damaged, |p| p.file_name().is_some_and(|n| n != "_metadata")))
        .expect("a data file");
    let mut bytes = std::fs::read(&keyed).expect("read");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&keyed, bytes).expect("write");
    moto.upload_files(&damaged, files(&damaged), BUCKET, "damaged");
    let (o, _) = run_s3(&moto, dir.path(), &["verify", &format!("s3://{BUCKET}/damaged")]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
    assert!(
        out.contains(&format!("s3://{BUCKET}/damaged/")),
        "names the object: {out}"
    );

    // No snapshot there.
    let (o, _) = run_s3(&moto, dir.path(), &["show", &format!("s3://{BUCKET}/nothing-here")]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no _metadata"),
        "{}",
        text(&o)
    );

    // A scheme statekit does not support is refused, and never becomes a local directory.
    for url in ["hdfs:///flink/savepoints/sp-1", "http://example.invalid/sp"] {
        let (o, _) = run_s3(&moto, dir.path(), &["show", url]);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("is not supported"),
            "{}",
            text(&o)
        );
    }
    assert!(!dir.path().join("hdfs:").exists());
    // file:// works like a path.
    let o = run(dir.path(), &["show", &format!("file://{}", sp.display())]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    // The server gone: a clear error naming the object, exit 2, in bounded time.
    moto.stop();
    let t = std::time::Instant::now();
    let (o, _) = run_s3(&moto, dir.path(), &["show", &format!("s3://{BUCKET}/damaged")]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(&format!("s3://{BUCKET}/damaged/_metadata")), "{err}");
    assert!(
        t.elapsed() < std::time::Duration::from_secs(60),
        "took {:?}",
        t.elapsed()
    );
}

#[test]
fn dump_of_one_key_reads_only_its_key_group() {
    let Some(moto) = started() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    // Max parallelism 1024: one key group is about 0.1% of the state.
    let sp = common::big_savepoint(dir.path(), "big", 200_000, 1024, TypeSchema::Utf8, |i| {
        statekit_core::encode_value(&TypeSchema::Utf8, &statekit_core::Value::Str(format!("key-{i:09}")))
            .expect("encode")
    });
    let total: u64 = files(&sp)
        .iter()
        .map(|p| std::fs::metadata(p).map_or(0, |m| m.len()))
        .sum();
    moto.upload_files(&sp, files(&sp), BUCKET, "big");
    let url = format!("s3://{BUCKET}/big");
    let one_key = ["--uid", "op", "--state", "v", "--key", "key-000012345", "--json"];
    let (o, stats) = ok_s3(&moto, dir.path(), &[&["dump", &url][..], &one_key].concat());
    let local = run(dir.path(), &[&["dump", &sp.to_string_lossy()][..], &one_key].concat());
    assert_eq!(o.stdout, local.stdout);
    assert!(!o.stdout.is_empty());
    let read = stats[0]["get_bytes"].as_u64().expect("get_bytes");
    assert!(
        read * 100 < total,
        "dump --key read {read} of the savepoint's {total} bytes (want < 1%; _metadata is {} bytes): {stats:?}",
        std::fs::metadata(sp.join("_metadata")).map_or(0, |m| m.len())
    );
    // A full verify reads it all, in few requests (read-ahead).
    let (_, stats) = ok_s3(&moto, dir.path(), &["verify", &url]);
    let gets = stats[0]["gets"].as_u64().expect("gets");
    assert!(gets < 200, "verify of {total} bytes took {gets} GETs");
}

fn find_file(dir: &Path, pred: impl Fn(&Path) -> bool) -> Option<PathBuf> {
    files(dir).into_iter().find(|p| pred(p))
}

/// The seed's check with every snapshot on S3: count, stop with a savepoint on S3, restore
/// from it (the count continues), restore the latest checkpoint on S3, and switch backends
/// through the S3 savepoint. Nothing local is made for the URLs.
#[test]
fn wordcount_checkpoints_savepoints_and_restores_on_s3() {
    let Some(moto) = started() else { return };
    let dir = two_inputs("a b\na\n");
    let d = dir.path();
    let ck = format!("s3://{BUCKET}/flink/checkpoints");
    let sp = format!("s3://{BUCKET}/flink/savepoints");
    let (o, stats) = ok_s3(&moto, d, &wordcount_args(&format!("--input one.txt --output out1 --checkpoint-every 1 --checkpoint-dir {ck} --savepoint-dir {sp} --stop-with-savepoint")));
    assert!(stats[0]["puts"].as_u64().unwrap_or(0) > 0, "{stats:?}");
    let savepoint = printed_savepoint(&o);
    assert!(savepoint.starts_with(&format!("{sp}/")), "{savepoint}");
    assert!(!d.join("s3:").exists(), "a URL became a local directory");
    assert_eq!(
        common::committed_lines(&d.join("out1")),
        vec!["(a,1)", "(b,1)", "(a,2)"]
    );

    ok_s3(&moto, d, &["verify", &savepoint]);

    // ls lists the checkpoints and the savepoint by URL, complete.
    let items = ls_json(&moto, d, &format!("s3://{BUCKET}/flink"));
    assert!(items.len() >= 2, "{items:?}");
    assert!(items.iter().all(|i| i["complete"] == true), "{items:?}");
    assert!(
        items
            .iter()
            .any(|i| i["path"] == savepoint.as_str() && i["kind"] == "savepoint"),
        "{items:?}"
    );
    assert!(
        items
            .iter()
            .any(|i| i["kind"] == "checkpoint" && i["path"].as_str().is_some_and(|p| p.starts_with(&ck))),
        "{items:?}"
    );

    // Restores of two.txt ("a"): from the S3 savepoint (the count continues), the same
    // savepoint into the RocksDB backend (backends switch through it), the latest checkpoint
    // on S3, and rescaled (parallelism 3 on the heap backend, 1 on RocksDB).
    let restores: [(&str, Vec<&str>); 5] = [
        ("out2", vec!["--restore", &savepoint]),
        ("out3", vec!["--backend", "rocksdb", "--restore", &savepoint]),
        ("out4", vec!["--checkpoint-dir", &ck, "--restore", "latest"]),
        ("out5", vec!["--parallelism", "3", "--restore", &savepoint]),
        (
            "out6",
            vec!["--backend", "rocksdb", "--parallelism", "1", "--restore", &savepoint],
        ),
    ];
    for (out, extra) in restores {
        let mut args = vec!["demo", "wordcount", "--input", "two.txt", "--output", out];
        args.extend(extra.iter().copied());
        let (o, _) = ok_s3(&moto, d, &args);
        assert_eq!(common::committed_lines(&d.join(out)), vec!["(a,3)"], "{args:?}");
        if out == "out4" {
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(
                err.contains("restoring from checkpoint") && err.contains(&ck),
                "{}",
                text(&o)
            );
        }
    }
}

/// `(word,count)` lines of an uninterrupted word count of `text`.
fn expected_counts(text: &str) -> Vec<String> {
    let mut counts = std::collections::BTreeMap::<&str, u64>::new();
    text.split_whitespace()
        .map(|w| {
            let c = counts.entry(w).or_default();
            *c += 1;
            format!("({w},{c})")
        })
        .collect()
}

/// Output lines as a sorted multiset (subtasks write their own part files).
fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

/// The server answering 503 (or vanishing) at `_metadata` of a checkpoint, for every data
/// file of a savepoint, or for a while only: the snapshot fails cleanly (exit 2, the object
/// and the status named, no `_metadata`, nothing incomplete listed as complete), transient
/// failures are retried through, and after the server is back the job restores the latest
/// checkpoint and its output is exactly once.
#[test]
fn server_failures_fail_snapshots_cleanly_and_the_next_run_restores_exactly_once() {
    let Some(moto) = started() else { return };
    let proxy = FaultProxy::start(moto.port);
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let words = "a b c a b a d e a f g a b c h i a j";
    std::fs::write(d.join("in.txt"), words.replace(' ', "\n")).expect("write");
    let ck = format!("s3://{BUCKET}/faults/checkpoints");
    let sp = format!("s3://{BUCKET}/faults/savepoints");
    let wc = |output: &str, extra: &[&str]| {
        let mut a = vec![
            "demo",
            "wordcount",
            "--input",
            "in.txt",
            "--output",
            output,
            "--checkpoint-every",
            "4",
            "--checkpoint-dir",
            &ck,
            "--savepoint-dir",
            &sp,
        ];
        a.extend_from_slice(extra);
        a.iter().map(|s| s.to_string()).collect::<Vec<String>>()
    };

    // chk-3's _metadata never gets through: the run fails at checkpoint 3.
    proxy.fail("PUT", "/chk-3/_metadata", 503, usize::MAX);
    let a = wc("out", &[]);
    let (o, _) = run_env(proxy.env(&moto), d, &a.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("503") && err.contains("chk-3/_metadata"), "{err}");
    assert!(!proxy.injected.lock().expect("log").is_empty());
    // Checkpoints 1 and 2 are complete; 3 is not listed as complete.
    let items = ls_json(&moto, d, &ck);
    let complete: Vec<u64> = items
        .iter()
        .filter(|i| i["complete"] == true)
        .filter_map(|i| i["id"].as_u64())
        .collect();
    assert_eq!(complete, vec![1, 2], "{items:?}");

    // The server is back: restore the latest checkpoint; the output is exactly once.
    proxy.clear();
    let a = wc("out", &["--restore", "latest"]);
    let (o, _) = run_env(proxy.env(&moto), d, &a.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("restoring from checkpoint 2"),
        "{}",
        text(&o)
    );
    assert_eq!(
        sorted(common::committed_lines(&d.join("out"))),
        sorted(expected_counts(words)),
        "exactly once across the failed run"
    );

    // A few 503s and one dropped connection on the way are retried through.
    proxy.fail("PUT", "_metadata", 503, 2);
    proxy.fail("PUT", ".skd", 0, 1);
    let a = wc("out2", &["--stop-with-savepoint"]);
    let env = proxy.env(&moto);
    let mut cmd = Command::new(bin());
    cmd.current_dir(d)
        .args(&a)
        .envs(env)
        .env("STATEKIT_OBJECT_STORE_RETRIES", "5");
    let o = cmd.output().expect("run");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let savepoint = printed_savepoint(&o);
    ok_s3(&moto, d, &["verify", &savepoint]);

    // Every data file of a savepoint refused: no savepoint appears.
    proxy.fail("PUT", ".skd", 500, usize::MAX);
    let a = wc("out3", &["--stop-with-savepoint"]);
    let (o, _) = run_env(proxy.env(&moto), d, &a.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("500"), "{}", text(&o));
    proxy.clear();
    let items = ls_json(&moto, d, &sp);
    assert_eq!(items.len(), 1, "only the earlier savepoint: {items:?}");
}

/// A data file larger than one part goes up as a multipart upload; a part refused aborts the
/// upload (no parts left behind, nothing appears) and the savepoint fails; without faults the
/// same savepoint verifies.
#[test]
fn multipart_uploads_complete_or_abort() {
    let Some(moto) = started() else { return };
    let proxy = FaultProxy::start(moto.port);
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    // About 9 MB of keyed state in one subtask: more than one 8 MiB part.
    let mut input = String::new();
    let mut x: u64 = 1;
    for _ in 0..20_000 {
        for _ in 0..50 {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            input.push_str(&format!("w{:06} ", (x >> 33) % 100_000));
        }
        input.push('\n');
    }
    std::fs::write(d.join("big.txt"), input).expect("write");
    let sp = format!("s3://{BUCKET}/mp/savepoints");
    let args = [
        "demo",
        "wordcount",
        "--input",
        "big.txt",
        "--parallelism",
        "1",
        "--checkpoint-every",
        "10000000",
        "--savepoint-dir",
        &sp,
        "--stop-with-savepoint",
    ];
    proxy.fail("PUT", "partNumber=2", 503, usize::MAX);
    let (o, stats) = run_env(proxy.env(&moto), d, &args);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(stats[0]["aborts"].as_u64().unwrap_or(0) >= 1, "{stats:?}");
    // No multipart upload is left open, and no savepoint appeared.
    let mut s = TcpStreamGet::new(moto.port);
    let uploads = s.get(&format!("/{BUCKET}?uploads"));
    assert!(uploads.contains("ListMultipartUploadsResult"), "{uploads}");
    assert!(!uploads.contains("<Upload>"), "an upload was left open: {uploads}");
    let items = ls_json(&moto, d, &sp);
    assert!(items.is_empty(), "{items:?}");

    proxy.clear();
    let (o, stats) = run_env(proxy.env(&moto), d, &args);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(stats[0]["parts"].as_u64().unwrap_or(0) >= 2, "{stats:?}");
    let savepoint = printed_savepoint(&o);
    ok_s3(&moto, d, &["verify", &savepoint]);
}

/// A plain HTTP GET of the moto server (its listing of open multipart uploads).
struct TcpStreamGet {
    port: u16,
}

impl TcpStreamGet {
    fn new(port: u16) -> Self {
        TcpStreamGet { port }
    }

    fn get(&mut self, path: &str) -> String {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").expect("write");
        let mut out = String::new();
        s.read_to_string(&mut out).expect("read");
        out
    }
}

/// `gc` on S3: deletes exactly the objects no complete checkpoint references (an orphan in
/// `shared/`, an incomplete checkpoint, a stray object in a complete one), never one younger
/// than `--min-age`; afterwards every checkpoint still verifies and none is incomplete.
#[test]
fn gc_deletes_only_unreferenced_objects() {
    let Some(moto) = started() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::write(d.join("in.txt"), "a b a c a b\n").expect("write");
    let ck = format!("s3://{BUCKET}/gc/ck");
    ok_s3(
        &moto,
        d,
        &wordcount_args(&format!("--input in.txt --checkpoint-every 2 --checkpoint-dir {ck}")),
    );
    let listed = |d: &Path| ls_json(&moto, d, &ck);
    let before = listed(d);
    let first = before[0]["path"].as_str().expect("path").to_string();
    let job_url = first.rsplit_once('/').expect("job/chk").0.to_string();
    let job_key = job_url
        .strip_prefix(&format!("s3://{BUCKET}/"))
        .expect("key")
        .to_string();
    let chk = first.rsplit_once('/').expect("chk").1.to_string();
    moto.put(BUCKET, &format!("{job_key}/shared/orphan.sst"), b"x");
    moto.put(BUCKET, &format!("{job_key}/chk-99/0-keyed.skd"), b"partial");
    moto.put(BUCKET, &format!("{job_key}/{chk}/stray.tmp"), b"stray");
    let mut garbage: Vec<String> = vec![
        format!("{job_url}/chk-99/0-keyed.skd"),
        format!("{job_url}/{chk}/stray.tmp"),
        format!("{job_url}/shared/orphan.sst"),
    ];
    garbage.sort();

    // Young objects are left alone.
    let (o, _) = ok_s3(&moto, d, &["gc", &ck, "--yes", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).expect("gc --json");
    assert_eq!(doc["orphans"].as_array().map(Vec::len), Some(0), "{doc}");
    assert_eq!(doc["too_young"].as_array().map(Vec::len), Some(3), "{doc}");

    let (o, _) = ok_s3(&moto, d, &["gc", &ck, "--dry-run", "--min-age", "0s", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).expect("gc --json");
    let orphans = common::gc_orphan_paths(&doc);
    assert_eq!(orphans, garbage, "{doc}");
    assert_eq!(doc["deleted_files"], serde_json::Value::Null);

    let (o, stats) = ok_s3(&moto, d, &["gc", &ck, "--yes", "--min-age", "0s", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).expect("gc --json");
    assert_eq!(doc["deleted_files"], 3, "{doc}");
    assert_eq!(stats[0]["deletes"], 3, "{stats:?}");
    let after = listed(d);
    assert_eq!(after.len(), before.len(), "{after:?}");
    assert!(after.iter().all(|i| i["complete"] == true), "{after:?}");
    for i in &after {
        ok_s3(&moto, d, &["verify", i["path"].as_str().expect("path")]);
    }
    let (o, _) = run_s3(&moto, d, &["gc", &ck, "--dry-run", "--min-age", "0s", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).expect("gc --json");
    assert_eq!(doc["orphans"].as_array().map(Vec::len), Some(0), "nothing left: {doc}");
}

/// The changelog on S3: its log files in the job directory on S3 (`dstl/`, the default when
/// `dstl.dfs.base-path` is unset), checkpoints on S3; `verify` replays the tail from S3, and a
/// restore of the latest checkpoint continues the counts. With `dstl.dfs.base-path` on S3 the
/// log files live outside the job directory and checkpoints (on S3 or on local disk)
/// reference them by URL.
#[test]
fn changelog_on_s3() {
    let Some(moto) = started() else { return };
    let dir = two_inputs("a b a c a b d a\n");
    let d = dir.path();
    let ck = format!("s3://{BUCKET}/cl/checkpoints");
    let base = [
        "demo",
        "wordcount",
        "--checkpoint-every",
        "2",
        "--checkpoint-dir",
        &ck,
        "--changelog",
    ];
    let mut a: Vec<&str> = base.to_vec();
    a.extend(["--input", "one.txt", "--output", "out1"]);
    ok_s3(&moto, d, &a);
    assert!(!d.join("s3:").exists(), "a URL became a local directory");
    let items = ls_json(&moto, d, &ck);
    let complete = complete_paths(&items);
    assert!(!complete.is_empty(), "{items:?}");
    for c in &complete {
        ok_s3(&moto, d, &["verify", c]);
    }
    let mut a: Vec<&str> = base.to_vec();
    a.extend(["--input", "two.txt", "--output", "out2", "--restore", "latest"]);
    ok_s3(&moto, d, &a);
    assert_eq!(common::committed_lines(&d.join("out2")), vec!["(a,5)"]);

    // Log files under a `dstl.dfs.base-path` on S3, outside the job directory: checkpoints
    // reference them by URL (file scope `url`), on S3 and on local disk alike; `verify` reads
    // them, a restore replays them, `dump --changes` lists them.
    let dstl = format!("state.changelog.dstl.dfs.base-path=s3://{BUCKET}/cl/dstl");
    for (n, ck) in [format!("s3://{BUCKET}/cl/ck-base"), "local-ck".to_string()]
        .iter()
        .enumerate()
    {
        let out = |i: u32| format!("out-base-{n}-{i}");
        let (o1, o2) = (out(1), out(2));
        let run = |input: &str, out: &str, restore: bool| {
            let mut a: Vec<&str> = vec![
                "demo",
                "wordcount",
                "--checkpoint-every",
                "2",
                "--checkpoint-dir",
                ck,
                "--changelog",
                "-D",
                &dstl,
                "--input",
                input,
                "--output",
                out,
            ];
            if restore {
                a.extend(["--restore", "latest"]);
            }
            ok_s3(&moto, d, &a);
        };
        run("one.txt", &o1, false);
        assert!(!d.join("s3:").exists(), "a URL became a local directory");
        let items = ls_json(&moto, d, ck);
        let latest = complete_paths(&items).pop().expect("a complete checkpoint");
        ok_s3(&moto, d, &["verify", &latest]);
        let (o, _) = ok_s3(&moto, d, &["dump", &latest, "--changes", "--json"]);
        let listed = String::from_utf8_lossy(&o.stdout).to_string();
        assert!(
            listed.contains(&format!("s3://{BUCKET}/cl/dstl/")),
            "log files referenced by URL: {listed}"
        );
        run("two.txt", &o2, true);
        assert_eq!(common::committed_lines(&d.join(&o2)), vec!["(a,5)"]);
    }
    // The log objects are under the base path, none in a job directory.
    ok_s3(&moto, d, &["ls", &format!("s3://{BUCKET}/cl/ck-base"), "--json"]);
}

/// `_metadata` is created conditionally on S3 (`If-None-Match: *`): of two writers of one
/// object exactly one succeeds, the other gets `AlreadyExists` and the first's bytes stay.
#[test]
fn conditional_create_on_s3() {
    use statekit_core::storage::{Storage, StorageError};
    let Some(moto) = started() else { return };
    let store = object_store::aws::AmazonS3Builder::new()
        .with_endpoint(moto.endpoint())
        .with_allow_http(true)
        .with_bucket_name(BUCKET)
        .with_region("us-east-1")
        .with_access_key_id("testing")
        .with_secret_access_key("testing")
        .build()
        .expect("client");
    let s = statekit_objstore::ObjectStorage::new(std::sync::Arc::new(store), format!("s3://{BUCKET}"));
    s.put_new("cc/_metadata", b"first").expect("first writer");
    let second = s.put_new("cc/_metadata", b"second");
    assert!(
        matches!(second, Err(StorageError::AlreadyExists(ref u)) if u == &format!("s3://{BUCKET}/cc/_metadata")),
        "{second:?}"
    );
    assert_eq!(s.open("cc/_metadata").expect("open").bytes(), b"first");
    assert_eq!(s.stats().puts, 2);
}

/// A conversion split into independent shard tasks (`--shard I/N`, run at once as separate
/// processes, as a batch scheduler would), each writing its own objects, then
/// `finish-shards` writing `_metadata`: the output is not a snapshot until then, finishing
/// early names the missing shard, and the result verifies and dumps as the input. The same on
/// a local directory.
#[test]
fn sharded_conversion_on_s3_and_local_disk() {
    let Some(moto) = started() else { return };
    let (dir, sp, input) = savepoint_on_s3(&moto, "in");
    let d = dir.path();
    let local_input = sp.to_string_lossy().to_string();
    for (out, from) in [
        (format!("s3://{BUCKET}/sharded"), input.as_str()),
        ("sharded-local".to_string(), local_input.as_str()),
    ] {
        let children: Vec<_> = (0..2)
            .map(|i| {
                let shard = format!("{i}/3");
                spawn_s3(
                    &moto,
                    d,
                    &["convert", from, &out, "--compression", "zstd", "--shard", &shard],
                )
            })
            .collect();
        let children: Vec<Output> = children
            .into_iter()
            .map(|c| c.wait_with_output().expect("wait"))
            .collect();
        for o in &children {
            assert_eq!(o.status.code(), Some(0), "{}", text(o));
        }
        // Shard 2 has not run: not a snapshot yet, and finishing names it.
        let (o, _) = run_s3(&moto, d, &["show", &out]);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        finishing_names_the_missing_shard(&moto, d, &out, 2);
        ok_s3(
            &moto,
            d,
            &["convert", from, &out, "--compression", "zstd", "--shard", "2/3"],
        );
        ok_s3(&moto, d, &["finish-shards", &out, "--shards", "3", "--json"]);
        ok_s3(&moto, d, &["verify", &out]);
        let (r, _) = run_s3(
            &moto,
            d,
            &["dump", &out, "--uid", "counter", "--state", "count", "--json"],
        );
        let l = run(
            d,
            &["dump", &local_input, "--uid", "counter", "--state", "count", "--json"],
        );
        assert_eq!(r.stdout, l.stdout, "{out}");
        // Finished once: a second finish is refused (its manifests are gone).
        let (o, _) = run_s3(&moto, d, &["finish-shards", &out, "--shards", "3"]);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    }
    let (o, _) = run_s3(&moto, d, &["convert", &input, "x", "--shard", "3/3"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

/// Tells [`inspector_child`] what to open: `PATH`, a tab, `COLSxROWS`, and optionally a tab
/// and `UID/STATE`.
const INSPECT_CHILD: &str = "STATEKIT_S3_INSPECT_CHILD";

/// The inspector as `statekit inspect PATH` opens it (`PATH` may be a URL), in a child process
/// (this test binary running only [`inspector_child`]) with the server's environment: its first
/// frame, then the first page of `UID/STATE`. Returns (exit code, stdout, stderr).
fn inspect_frames(moto: &Moto, path: &str, page: Option<&str>) -> (Option<i32>, String, String) {
    let mut spec = format!("{path}\t100x30");
    if let Some(p) = page {
        spec.push('\t');
        spec.push_str(p);
    }
    let o = Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--exact", "inspector_child", "--nocapture", "--test-threads", "1"])
        .envs(moto.env())
        .env(INSPECT_CHILD, spec)
        .output()
        .expect("run the inspector child");
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).to_string(),
        String::from_utf8_lossy(&o.stderr).to_string(),
    )
}

/// The child of [`inspect_frames`] (without its variable: nothing to do).
#[test]
fn inspector_child() {
    common::inspector_child(INSPECT_CHILD);
}

/// `statekit inspect` on S3: a savepoint by URL opens to its operators and pages through a
/// state as the local copy does; a prefix holding snapshots lists them; a prefix holding
/// nothing is a clear error.
#[test]
fn inspector_on_s3() {
    let Some(moto) = started() else { return };
    let (dir, sp) = wordcount_savepoint();
    let url = upload_savepoint(&moto, &sp, "insp/savepoints");
    let name = sp.file_name().expect("name").to_string_lossy().to_string();
    let (code, remote, err) = inspect_frames(&moto, &url, Some("counter/count"));
    assert_eq!(code, Some(0), "{remote}\n{err}");
    let (code, local, err) = inspect_frames(&moto, &sp.display().to_string(), Some("counter/count"));
    assert_eq!(code, Some(0), "{local}\n{err}");
    // The same screens but for the line naming where the snapshot is.
    let without_location = |s: &str, loc: &str| -> Vec<String> {
        // Frame lines only (the harness's own lines carry timings).
        s.lines()
            .filter(|l| l.starts_with('"'))
            .filter(|l| !l.contains(loc) && !l.contains(&name))
            .map(str::to_string)
            .collect()
    };
    assert!(remote.contains("counter"), "{remote}");
    assert!(
        remote.contains("(a") || remote.contains("\"a\"") || remote.contains(" a "),
        "{remote}"
    );
    assert_eq!(
        without_location(&remote, "s3://"),
        without_location(&local, &dir.path().display().to_string())
    );
    let (code, listed, err) = inspect_frames(&moto, &format!("s3://{BUCKET}/insp"), None);
    assert_eq!(code, Some(0), "{listed}\n{err}");
    assert!(
        listed.contains("savepoints/") && listed.contains("kind: savepoint 1"),
        "the snapshot is listed: {listed}"
    );
    let (code, _, err) = inspect_frames(&moto, &format!("s3://{BUCKET}/nothing-here"), None);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("nothing there"), "{err}");
}

/// `import` writes its savepoint to S3 (data files, then `_metadata` only if none is there):
/// the result dumps as the savepoint the tables came from; an existing output is refused
/// without `--force` and replaced with it. `check --against` takes a snapshot or a schema
/// file on S3.
#[test]
fn import_to_and_check_against_s3() {
    let Some(moto) = started() else { return };
    let (dir, sp) = wordcount_savepoint();
    let d = dir.path();
    let sp_s = sp.display().to_string();
    ok_s3(&moto, d, &["export", &sp_s, "tables"]);
    let (o, _) = ok_s3(&moto, d, &["schema", &sp_s, "--json"]);
    std::fs::write(d.join("schema.json"), &o.stdout).expect("schema");
    moto.put(BUCKET, "schemas/job.json", &o.stdout);
    let out = format!("s3://{BUCKET}/imported/sp-1");
    let import = ["import", "tables", &out, "--schema", "schema.json"];
    ok_s3(&moto, d, &import);
    assert!(!d.join("s3:").exists(), "a URL became a local directory");
    let dump = |p: &str| {
        let (o, _) = ok_s3(&moto, d, &["dump", p, "--uid", "counter", "--state", "count", "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("dump --json");
        assert!(v.as_array().is_some_and(|a| !a.is_empty()), "{v}");
        v
    };
    assert_eq!(dump(&out), dump(&sp_s));
    ok_s3(&moto, d, &["verify", &out]);
    let (o, _) = run_s3(&moto, d, &import);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let mut forced = import.to_vec();
    forced.push("--force");
    ok_s3(&moto, d, &forced);
    assert_eq!(dump(&out), dump(&sp_s));

    for against in [out.clone(), format!("s3://{BUCKET}/schemas/job.json")] {
        let (o, _) = run_s3(&moto, d, &["check", &sp_s, "--against", &against, "--json"]);
        assert_eq!(o.status.code(), Some(0), "{against}: {}", text(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("check --json");
        assert_eq!(v["compatible"], true, "{v}");
    }

    // Tables and schema on S3 as well: read through a local working copy, the same savepoint.
    let tables_dir = d.join("tables");
    moto.upload_files(&tables_dir, files(&tables_dir), BUCKET, "tables-1");
    let tables = format!("s3://{BUCKET}/tables-1");
    let schema = format!("s3://{BUCKET}/schemas/job.json");
    ok_s3(&moto, d, &["import", &tables, "from-s3", "--schema", &schema]);
    assert_eq!(dump(&d.join("from-s3").display().to_string()), dump(&sp_s));
    // A damaged table on S3: exit 2, nothing written, the error names its URL.
    let bad = find_file(&tables_dir, |p| {
        p.extension().is_some_and(|e| e == "parquet" || e == "arrow")
    })
    .expect("a table file");
    let rel = bad
        .strip_prefix(&tables_dir)
        .expect("below")
        .to_string_lossy()
        .replace('\\', "/");
    moto.put(BUCKET, &format!("tables-1/{rel}"), b"not a table at all");
    let (o, _) = run_s3(&moto, d, &["import", &tables, "bad-out", "--schema", &schema]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(&format!("{tables}/{rel}")), "{err}");
    assert!(!err.contains(".statekit-import-tables"), "{err}");
    assert!(!d.join("bad-out").exists());
}

/// `export --shard I/N` on S3 and on local disk: shards run at once and late write their
/// files and a manifest, no `_tables.json`; `finish-shards` names a shard that has not run,
/// then lists every table with the files and rows of an export made in one go.
#[test]
fn sharded_export_on_s3_and_local_disk() {
    let Some(moto) = started() else { return };
    let (dir, sp, input) = savepoint_on_s3(&moto, "exp-in");
    let d = dir.path();
    let o = run(d, &["export", &sp.to_string_lossy(), "whole"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let whole: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join("whole/_tables.json")).expect("_tables.json")).expect("json");
    let summary = |doc: &serde_json::Value| -> Vec<(String, serde_json::Value, serde_json::Value)> {
        doc["tables"]
            .as_array()
            .expect("tables")
            .iter()
            .map(|t| {
                (
                    t["path"].as_str().unwrap_or_default().to_string(),
                    t["files"].clone(),
                    t["rows"].clone(),
                )
            })
            .collect()
    };
    for out in [format!("s3://{BUCKET}/exp-sharded"), "exp-sharded-local".to_string()] {
        let shard = |i: u32| spawn_s3(&moto, d, &["export", &input, &out, "--shard", &format!("{i}/3")]);
        let children: Vec<_> = [0, 2].into_iter().map(shard).collect();
        for c in children {
            let o = c.wait_with_output().expect("wait");
            assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        }
        finishing_names_the_missing_shard(&moto, d, &out, 1);
        let o = shard(1).wait_with_output().expect("wait");
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        ok_s3(&moto, d, &["finish-shards", &out, "--shards", "3", "--json"]);
        let listing = match out.strip_prefix(&format!("s3://{BUCKET}/")) {
            Some(key) => moto
                .get(&format!("/{BUCKET}/{key}/_tables.json"))
                .expect("_tables.json on S3"),
            None => std::fs::read(d.join(&out).join("_tables.json")).expect("_tables.json"),
        };
        let sharded: serde_json::Value = serde_json::from_slice(&listing).expect("json");
        assert_eq!(summary(&sharded), summary(&whole), "{out}");
        // Every file listed is there.
        for t in sharded["tables"].as_array().expect("tables") {
            for f in t["files"].as_array().expect("files") {
                let rel = format!(
                    "{}/{}",
                    t["path"].as_str().unwrap_or_default(),
                    f.as_str().unwrap_or_default()
                );
                let there = match out.strip_prefix(&format!("s3://{BUCKET}/")) {
                    Some(key) => moto.request("GET", &format!("/{BUCKET}/{key}/{rel}"), b"") == Some(200),
                    None => d.join(&out).join(&rel).is_file(),
                };
                assert!(there, "{out}: {rel}");
            }
        }
        // The manifests are gone; a second finish is refused.
        let (o, _) = run_s3(&moto, d, &["finish-shards", &out, "--shards", "3"]);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    }
    // The local sharded export imports like the whole one.
    let (o, _) = run_s3(&moto, d, &["schema", &sp.to_string_lossy(), "--json"]);
    std::fs::write(d.join("schema.json"), &o.stdout).expect("schema");
    for tables in ["whole", "exp-sharded-local"] {
        let o = run(
            d,
            &["import", tables, &format!("{tables}-sp"), "--schema", "schema.json"],
        );
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    }
    let dump = |p: &str| run(d, &["dump", p, "--uid", "counter", "--state", "count", "--json"]).stdout;
    assert_eq!(dump("whole-sp"), dump("exp-sharded-local-sp"));
}

/// Apache Flink's own snapshots on S3 (real Flink 1.20.5 output, uploaded as a user would copy
/// it): `show` reads `_metadata` only, `schema`, `dump` of every keyed state and `verify` give
/// the answers they give on the local copy — savepoints of both backends in both formats,
/// and checkpoints whose `_metadata` names absolute local paths (found again by their place
/// under the job directory in the bucket), incremental RocksDB and changelog alike.
#[test]
fn flink_snapshots_on_s3() {
    let Some(moto) = started() else { return };
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/flink/flink-1.20.5");
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let cases = [
        ("savepoint-hashmap-canonical", "savepoint"),
        ("savepoint-hashmap-native", "savepoint"),
        ("savepoint-rocksdb-native", "savepoint"),
        (
            "checkpoint-rocksdb-incremental",
            "checkpoints/5eed5eed000000000000000000000004/chk-2",
        ),
        (
            "checkpoint-changelog-hashmap-materialized",
            "checkpoints/5eed5eed000000000000000000000006/chk-2",
        ),
    ];
    for (name, snapshot) in cases {
        let base = root.join(name);
        moto.upload_files(&base, files(&base), BUCKET, &format!("flink/{name}"));
        let local = base.join(snapshot).display().to_string();
        let url = format!("s3://{BUCKET}/flink/{name}/{snapshot}");
        let (o, stats) = run_s3(&moto, d, &["show", &url, "--json"]);
        assert_eq!(o.status.code(), Some(0), "{name}: {}", text(&o));
        let l = run(d, &["show", &local, "--json"]);
        let strip = |v: serde_json::Value| {
            let mut v = v;
            if let Some(m) = v.as_object_mut() {
                m.remove("path");
                m.remove("taken");
                m.remove("timestamp_ms");
            }
            v
        };
        assert_eq!(strip(show_json(&o)), strip(show_json(&l)), "{name}: show");
        assert_eq!(stats[0]["gets"], 1, "{name}: show reads _metadata only: {stats:?}");
        let (o, _) = run_s3(&moto, d, &["schema", &url, "--json"]);
        assert_eq!(o.status.code(), Some(0), "{name}: {}", text(&o));
        let schema: serde_json::Value = serde_json::from_slice(&o.stdout).expect("schema --json");
        assert_eq!(o.stdout, run(d, &["schema", &local, "--json"]).stdout, "{name}: schema");
        let mut dumped = 0;
        for op in schema["operators"].as_array().expect("operators") {
            let uid = op["uid"].as_str().expect("uid");
            for st in op["keyed_states"].as_array().expect("states") {
                let state = st["name"].as_str().expect("name");
                let args = |p: &str| {
                    vec![
                        "dump".to_string(),
                        p.to_string(),
                        "--uid".into(),
                        uid.into(),
                        "--state".into(),
                        state.into(),
                        "--json".into(),
                    ]
                };
                let ra = args(&url);
                let (r, _) = run_s3(&moto, d, &ra.iter().map(String::as_str).collect::<Vec<_>>());
                let la = args(&local);
                let l = run(d, &la.iter().map(String::as_str).collect::<Vec<_>>());
                assert_eq!(r.status.code(), Some(0), "{name} {uid}/{state}: {}", text(&r));
                assert_eq!(l.status.code(), Some(0), "{name} {uid}/{state}: {}", text(&l));
                assert_eq!(r.stdout, l.stdout, "{name} {uid}/{state}");
                dumped += 1;
            }
        }
        assert!(dumped > 0, "{name}: no keyed state");
        let (o, _) = run_s3(&moto, d, &["verify", &url]);
        assert_eq!(o.status.code(), Some(0), "{name}: {}", text(&o));
    }
}
