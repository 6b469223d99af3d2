//! The read commands on a real S3 API server (moto, on 127.0.0.1; `scripts/test.sh` installs
//! it and sets `STATEKIT_MOTO`): the same answers as on local disk, `show` in one GET,
//! `dump --key` reading a small fraction of the savepoint, damage reported by URL and offset,
//! a stopped server and unsupported schemes refused with a clear error (exit 2).
//! Without `STATEKIT_MOTO` (a bare `cargo test`) each test says so and passes.

mod common;

use common::moto::Moto;
use common::{bin, run};
use statekit_checkpoint::SnapshotWriter;
use statekit_core::storage::{LocalStorage, Storage};
use statekit_core::{key_group_for_key, KeyGroupRange, MemoryView, OwnedEntry, StateDescriptor, TypeSchema};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

const BUCKET: &str = "statekit-test";

/// `statekit args…` in `dir` with the server's environment; the counters file it wrote.
fn run_s3(moto: &Moto, dir: &Path, args: &[&str]) -> (Output, Vec<serde_json::Value>) {
    let stats = dir.join(format!("stats-{}.jsonl", rand::random::<u64>()));
    let out = Command::new(bin())
        .current_dir(dir)
        .args(args)
        .envs(moto.env())
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

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
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
    let Some(moto) = Moto::start() else { return };
    moto.create_bucket(BUCKET);
    let (dir, sp) = wordcount_savepoint();
    let name = sp.file_name().expect("name").to_string_lossy().to_string();
    moto.upload_dir(&sp, BUCKET, &format!("savepoints/{name}"));
    let url = format!("s3://{BUCKET}/savepoints/{name}");
    let local = sp.to_string_lossy().to_string();

    // show: the same document, from one GET of _metadata.
    let (remote_show, stats) = run_s3(&moto, dir.path(), &["show", &url, "--json"]);
    assert_eq!(remote_show.status.code(), Some(0), "{}", text(&remote_show));
    let local_show = run(dir.path(), &["show", &local, "--json"]);
    assert_eq!(show_json(&remote_show), show_json(&local_show));
    assert_eq!(stats.len(), 1, "one counters line: {stats:?}");
    assert_eq!(stats[0]["gets"], 1, "show makes exactly one GET: {stats:?}");
    assert_eq!(stats[0]["puts"], 0, "show writes nothing: {stats:?}");
    // Also by its _metadata object, and as text.
    let (o, _) = run_s3(&moto, dir.path(), &["show", &format!("{url}/_metadata")]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("counter"), "{}", text(&o));

    // verify: every file read and checked.
    let (o, _) = run_s3(&moto, dir.path(), &["verify", &url]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

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
    copy_dir(&sp, &damaged);
    let keyed = find_file(&damaged, |p| p.extension().is_some_and(|e| e == "keyed"))
        .or_else(|| find_file(&damaged, |p| p.file_name().is_some_and(|n| n != "_metadata")))
        .expect("a data file");
    let mut bytes = std::fs::read(&keyed).expect("read");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&keyed, bytes).expect("write");
    moto.upload_dir(&damaged, BUCKET, "damaged");
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

/// A savepoint of one operator with `n` entries of about 200 bytes, parallelism 4, max
/// parallelism 1024.
fn big_savepoint(dir: &Path, n: u32) -> PathBuf {
    let storage: Arc<dyn Storage> = Arc::new(LocalStorage::new(dir));
    let writer =
        SnapshotWriter::new(storage, "big", statekit_format::SnapshotKind::Savepoint, 1, "job").expect("writer");
    let max_p = 1024;
    let states = vec![StateDescriptor::value("v", TypeSchema::Utf8, TypeSchema::Bytes)];
    let entries: Vec<OwnedEntry> = (0..n)
        .map(|i| {
            let key = statekit_core::encode_value(&TypeSchema::Utf8, &statekit_core::Value::Str(format!("key-{i:09}")))
                .expect("encode");
            OwnedEntry {
                key_group: key_group_for_key(&key, max_p),
                state: 0,
                key,
                namespace: vec![],
                user_key: None,
                value: (0..200u32)
                    .map(|j| (i.wrapping_mul(2_654_435_761) ^ j.wrapping_mul(40_503)) as u8)
                    .collect(),
                timestamp: None,
            }
        })
        .collect();
    let view = MemoryView::new(max_p, KeyGroupRange::all(max_p), states, entries);
    writer.register_operator("op", 4, max_p).expect("register");
    for i in 0..4 {
        let part = MemoryView::collect(&view, KeyGroupRange::for_subtask(max_p, 4, i)).expect("part");
        writer.write_subtask("op", i, Some(&part), None, false).expect("write");
    }
    writer.finish().expect("finish");
    dir.join("big")
}

#[test]
fn dump_of_one_key_reads_only_its_key_group() {
    let Some(moto) = Moto::start() else { return };
    moto.create_bucket(BUCKET);
    let dir = tempfile::tempdir().expect("tempdir");
    let sp = big_savepoint(dir.path(), 200_000);
    let total: u64 = files(&sp)
        .iter()
        .map(|p| std::fs::metadata(p).map_or(0, |m| m.len()))
        .sum();
    moto.upload_dir(&sp, BUCKET, "big");
    let url = format!("s3://{BUCKET}/big");
    let (o, stats) = run_s3(
        &moto,
        dir.path(),
        &[
            "dump",
            &url,
            "--uid",
            "op",
            "--state",
            "v",
            "--key",
            "key-000012345",
            "--json",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let local = run(
        dir.path(),
        &[
            "dump",
            &sp.to_string_lossy(),
            "--uid",
            "op",
            "--state",
            "v",
            "--key",
            "key-000012345",
            "--json",
        ],
    );
    assert_eq!(o.stdout, local.stdout);
    assert!(!o.stdout.is_empty());
    let read = stats[0]["get_bytes"].as_u64().expect("get_bytes");
    assert!(
        read * 100 < total,
        "dump --key read {read} of the savepoint's {total} bytes (want < 1%; _metadata is {} bytes): {stats:?}",
        std::fs::metadata(sp.join("_metadata")).map_or(0, |m| m.len())
    );
    // A full verify reads it all, in few requests (read-ahead).
    let (o, stats) = run_s3(&moto, dir.path(), &["verify", &url]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let gets = stats[0]["gets"].as_u64().expect("gets");
    assert!(gets < 200, "verify of {total} bytes took {gets} GETs");
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read dir").flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

fn find_file(dir: &Path, pred: impl Fn(&Path) -> bool) -> Option<PathBuf> {
    files(dir).into_iter().find(|p| pred(p))
}

fn copy_dir(from: &Path, to: &Path) {
    for p in files(from) {
        let dest = to.join(p.strip_prefix(from).expect("below"));
        std::fs::create_dir_all(dest.parent().expect("parent")).expect("mkdir");
        std::fs::copy(&p, &dest).expect("copy");
    }
}

/// The seed's check with every snapshot on S3: count, stop with a savepoint on S3, restore
/// from it (the count continues), restore the latest checkpoint on S3, and switch backends
/// through the S3 savepoint. Nothing local is made for the URLs.
#[test]
fn wordcount_checkpoints_savepoints_and_restores_on_s3() {
    let Some(moto) = Moto::start() else { return };
    moto.create_bucket(BUCKET);
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::write(d.join("one.txt"), "a b\na\n").expect("write");
    std::fs::write(d.join("two.txt"), "a\n").expect("write");
    let ck = format!("s3://{BUCKET}/flink/checkpoints");
    let sp = format!("s3://{BUCKET}/flink/savepoints");
    let (o, stats) = run_s3(
        &moto,
        d,
        &[
            "demo",
            "wordcount",
            "--input",
            "one.txt",
            "--output",
            "out1",
            "--checkpoint-every",
            "1",
            "--checkpoint-dir",
            &ck,
            "--savepoint-dir",
            &sp,
            "--stop-with-savepoint",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(stats[0]["puts"].as_u64().unwrap_or(0) > 0, "{stats:?}");
    let savepoint = String::from_utf8_lossy(&o.stdout)
        .lines()
        .last()
        .expect("a path")
        .to_string();
    assert!(savepoint.starts_with(&format!("{sp}/")), "{savepoint}");
    assert!(!d.join("s3:").exists(), "a URL became a local directory");
    assert_eq!(
        common::committed_lines(&d.join("out1")),
        vec!["(a,1)", "(b,1)", "(a,2)"]
    );

    let (o, _) = run_s3(&moto, d, &["verify", &savepoint]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    // ls lists the checkpoints and the savepoint by URL, complete.
    let (o, _) = run_s3(&moto, d, &["ls", &format!("s3://{BUCKET}/flink"), "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let items: serde_json::Value = serde_json::from_slice(&o.stdout).expect("ls --json");
    let items = items.as_array().expect("an array");
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

    // Restore from the S3 savepoint: the count continues.
    let (o, _) = run_s3(
        &moto,
        d,
        &[
            "demo",
            "wordcount",
            "--input",
            "two.txt",
            "--output",
            "out2",
            "--restore",
            &savepoint,
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(common::committed_lines(&d.join("out2")), vec!["(a,3)"]);

    // The same savepoint into the RocksDB backend (backends switch through it).
    let (o, _) = run_s3(
        &moto,
        d,
        &[
            "demo",
            "wordcount",
            "--input",
            "two.txt",
            "--output",
            "out3",
            "--backend",
            "rocksdb",
            "--restore",
            &savepoint,
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(common::committed_lines(&d.join("out3")), vec!["(a,3)"]);

    // The latest checkpoint on S3.
    let (o, _) = run_s3(
        &moto,
        d,
        &[
            "demo",
            "wordcount",
            "--input",
            "two.txt",
            "--output",
            "out4",
            "--checkpoint-dir",
            &ck,
            "--restore",
            "latest",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("restoring from checkpoint"),
        "{}",
        text(&o)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains(&ck), "{}", text(&o));
    assert_eq!(common::committed_lines(&d.join("out4")), vec!["(a,3)"]);
}
