//! The tool as a Flink user meets it (issue 16): one test per habit — the savepoint line,
//! at-most-once jobs still stopping with a savepoint, `ls` in checkpoint order, `gc` leaving
//! no empty incomplete checkpoint behind, and English counts.

mod common;

use common::{ok, run, text, wordcount_args};
use std::path::{Path, PathBuf};
use std::process::Output;

/// Runs the word count on `input` into `output` (plus `extra` flags) and stops it with a
/// savepoint; returns the savepoint's path (standard output, piped, holds it alone).
fn wordcount_savepoint(d: &Path, input: &str, output: &str, extra: &[&str]) -> String {
    let mut args = vec!["demo", "wordcount", "--input", input, "--output", output];
    args.extend_from_slice(extra);
    args.push("--stop-with-savepoint");
    String::from_utf8_lossy(&ok(d, &args).stdout).trim().to_string()
}

/// The operator `counter` as `show SNAPSHOT --json` describes it (exit 0 asserted).
fn counter_of(d: &Path, snapshot: &str) -> serde_json::Value {
    let show = ok(d, &["show", snapshot, "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&show.stdout).expect("show --json");
    doc["operators"]
        .as_array()
        .and_then(|ops| ops.iter().find(|o| o["uid"] == "counter"))
        .cloned()
        .expect("counter")
}

/// Flips the bits `mask` of the middle byte of the savepoint `sp`'s keyed data file (`.skd`);
/// returns that file.
fn damage_keyed_data(sp: &Path, mask: u8) -> PathBuf {
    let file = std::fs::read_dir(sp)
        .expect("savepoint")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "skd"))
        .expect("a keyed data file");
    let mut bytes = std::fs::read(&file).expect("read");
    let at = bytes.len() / 2;
    bytes[at] ^= mask;
    std::fs::write(&file, &bytes).expect("write");
    file
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
        &wordcount_args("--input one.txt --output out1 --guarantee at-most-once --stop-with-savepoint"),
    );
    let sp = String::from_utf8_lossy(&o.stdout).trim().to_string();
    assert!(!sp.is_empty(), "{}", text(&o));
    ok(d, &["verify", &sp]);
    ok(
        d,
        &wordcount_args(&format!("--input two.txt --output out2 --restore {sp}")),
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
        &wordcount_args("--input in.txt --checkpoint-every 2 --retained-checkpoints 20"),
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

/// A misspelt key in Flink's namespaces is an error with the key it probably meant; Flink's
/// main keys set what their flags set (a flag given wins); `-p`, `-s` and `-n` mean what
/// they mean to `flink run`.
#[test]
fn flink_keys_and_flags() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::write(d.join("one.txt"), "a b a c\n").expect("input");
    std::fs::write(d.join("two.txt"), "a\n").expect("input");
    let wc = |extra: &[&str]| {
        let mut a = vec!["demo", "wordcount"];
        a.extend_from_slice(extra);
        run(d, &a)
    };
    // Misspelt: exit 2, the key named with the one meant.
    let o = wc(&["-D", "execution.checkpointing.max-concurent-checkpoints=2"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("did you mean `execution.checkpointing.max-concurrent-checkpoints`"),
        "{err}"
    );
    let o = wc(&["-D", "paralelism.default=3"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("did you mean `parallelism.default`"));
    // A bad value names the key.
    let o = wc(&["-D", "state.backend.type=leveldb"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("state.backend.type"));

    // Keys set what their flags set: parallelism, directories, backend, incremental.
    let o = ok(d, &wordcount_args("--input one.txt --output out1 --checkpoint-every 1 -D parallelism.default=3 -D pipeline.max-parallelism=64 -D state.checkpoints.dir=ck -D state.savepoints.dir=sp -D state.backend.type=rocksdb -D state.backend.incremental=true --stop-with-savepoint"));
    let sp = String::from_utf8_lossy(&o.stdout).trim().to_string();
    assert!(sp.starts_with("sp/"), "{sp}");
    let counter = counter_of(d, &sp);
    assert_eq!(counter["parallelism"], 3, "{counter}");
    assert_eq!(counter["max_parallelism"], 64, "{counter}");
    let ls = ok(d, &["ls", "ck", "--json"]);
    let items: serde_json::Value = serde_json::from_slice(&ls.stdout).expect("ls");
    assert!(
        items.as_array().is_some_and(|a| !a.is_empty()
            && a.iter()
                .all(|i| i["format"].as_str().is_some_and(|f| f.contains("native")))),
        "incremental RocksDB checkpoints under ck: {items}"
    );
    // A flag given wins over the key.
    let o = ok(
        d,
        &wordcount_args(
            "--input one.txt --output out2 -p 2 -D parallelism.default=3 --savepoint-dir sp2 --stop-with-savepoint",
        ),
    );
    let sp2 = String::from_utf8_lossy(&o.stdout).trim().to_string();
    let counter = counter_of(d, &sp2);
    assert_eq!(counter["parallelism"], 2, "{counter}");

    // -s restores, as does execution.savepoint.path; the count continues.
    ok(d, &wordcount_args(&format!("--input two.txt --output out3 -s {sp2}")));
    assert_eq!(common::committed_lines(&d.join("out3")), vec!["(a,3)"]);
    let key = format!("execution.savepoint.path={sp2}");
    ok(d, &wordcount_args(&format!("--input two.txt --output out4 -D {key}")));
    assert_eq!(common::committed_lines(&d.join("out4")), vec!["(a,3)"]);

    // State of an operator the job lacks: refused without -n, restored (and said) with it.
    ok(d, &["rewrite", &sp2, "renamed", "--rename-uid", "sink=old-sink"]);
    let o = wc(&["--input", "two.txt", "--output", "out5", "-s", "renamed"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("\"old-sink\"") && err.contains("-n"), "{err}");
    let o = ok(d, &wordcount_args("--input two.txt --output out5 -s renamed -n"));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("not restored"),
        "{}",
        text(&o)
    );
    assert_eq!(common::committed_lines(&d.join("out5")), vec!["(a,3)"]);
    let o = ok(
        d,
        &wordcount_args("--input two.txt --output out6 -s renamed -D execution.savepoint.ignore-unclaimed-state=true"),
    );
    assert_eq!(common::committed_lines(&d.join("out6")), vec!["(a,3)"], "{}", text(&o));
}

/// `execution.checkpointing.interval` (and `--checkpoint-interval`) checkpoint by time too,
/// beside the record count.
#[test]
fn checkpoints_by_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let words: String = (0..3000).map(|i| format!("w{} ", i % 50)).collect();
    std::fs::write(d.join("in.txt"), words).expect("input");
    let o = ok(
        d,
        &wordcount_args("--input in.txt --checkpoint-every 1000000 -D execution.checkpointing.interval=1ms"),
    );
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    // "processed 3000 words from in.txt; N checkpoints under …"
    let n: u64 = err
        .split("; ")
        .find_map(|p| p.split_once(" checkpoints under"))
        .and_then(|(n, _)| n.trim().parse().ok())
        .unwrap_or(0);
    assert!(n > 2, "time-based checkpoints: {err}");
}

/// The README's restore into another output directory warns of nothing: the transactions the
/// savepoint recorded were committed where they were written. A warning comes only when that
/// output was really removed.
#[test]
fn restoring_into_another_output_warns_only_of_real_loss() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::write(d.join("one.txt"), "a b a\n").expect("input");
    std::fs::write(d.join("two.txt"), "a\n").expect("input");
    let sp = wordcount_savepoint(d, "one.txt", "out1", &[]);
    let o = ok(
        d,
        &wordcount_args(&format!("--input two.txt --output out2 --restore {sp}")),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("warning"), "{err}");
    assert_eq!(common::committed_lines(&d.join("out2")), vec!["(a,3)"]);
    // Remove out1's committed output: now something was lost, and it is said.
    std::fs::remove_dir_all(d.join("out1")).expect("rm");
    let o = ok(
        d,
        &wordcount_args(&format!("--input two.txt --output out3 --restore {sp}")),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("warning") && err.contains("no longer exists"), "{err}");
}

/// One damaged block hides only its key group: `dump` prints every other one, names the
/// damaged key group with its file and offset, and exits 1. `--limit` says "N of M entries".
#[test]
fn dump_reads_past_a_damaged_block() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let words: String = (0..400).map(|i| format!("w{i} ")).collect();
    std::fs::write(d.join("in.txt"), words).expect("input");
    let o = ok(d, &wordcount_args("--input in.txt --stop-with-savepoint -p 1"));
    let sp = d.join(String::from_utf8_lossy(&o.stdout).trim());
    let dump = |extra: &[&str]| {
        let mut a = vec![
            "dump",
            sp.to_str().expect("utf-8"),
            "--uid",
            "counter",
            "--state",
            "count",
        ];
        a.extend_from_slice(extra);
        run(d, &a)
    };
    let full = dump(&[]);
    assert_eq!(full.status.code(), Some(0), "{}", text(&full));
    let all: Vec<String> = String::from_utf8_lossy(&full.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(all.len(), 400);
    let limited = dump(&["--limit", "10"]);
    assert!(
        String::from_utf8_lossy(&limited.stderr).contains("10 of 400 entries"),
        "{}",
        text(&limited)
    );
    // Damage one byte in the middle of the keyed data file.
    let file = damage_keyed_data(&sp, 0x5a);
    let o = dump(&[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let got: Vec<String> = String::from_utf8_lossy(&o.stdout).lines().map(str::to_string).collect();
    assert!(got.len() >= 300 && got.len() < 400, "{} of 400 entries read", got.len());
    assert!(got.iter().all(|l| all.contains(l)), "only real entries");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("damaged key group") && err.contains("key group "), "{err}");
    assert!(
        err.contains(&file.file_name().expect("name").to_string_lossy().to_string()),
        "{err}"
    );
}

/// `show` of a changelog checkpoint says what is known: the materializations' entries and
/// the tail's change records, and that a count including the tail is an estimate.
#[test]
fn show_of_a_changelog_checkpoint_counts_the_tail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let words: String = (0..3000).map(|i| format!("w{} ", i % 700)).collect();
    std::fs::write(d.join("in.txt"), words).expect("input");
    ok(d, &wordcount_args("--input in.txt --changelog --checkpoint-every 500"));
    let o = ok(d, &["ls", "statekit-data/checkpoints", "--json"]);
    let items: serde_json::Value = serde_json::from_slice(&o.stdout).expect("ls");
    let last = items
        .as_array()
        .and_then(|a| a.last())
        .and_then(|i| i["path"].as_str())
        .expect("a checkpoint")
        .to_string();
    let o = ok(d, &["show", &last]);
    let t = String::from_utf8_lossy(&o.stdout);
    assert!(t.contains("change records") && t.contains("+ tail"), "{t}");
    assert!(!t.contains("not counted"), "{t}");
    let counter = counter_of(d, &last);
    assert!(
        counter["tail_change_records"].as_u64().is_some_and(|n| n > 0),
        "{counter}"
    );
    assert_eq!(counter["keyed_states"][0]["entries_estimated"], true, "{counter}");
}

/// `ls` says `not verified` of a complete snapshot whose data it did not read, and with
/// `--verify` `ok` or `BROKEN` (exit 1) — the inspector's words.
#[test]
fn ls_and_the_inspector_share_their_words() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::write(d.join("in.txt"), "a b c d e f g\n").expect("input");
    let o = ok(d, &wordcount_args("--input in.txt --stop-with-savepoint -p 1"));
    let sp = d.join(String::from_utf8_lossy(&o.stdout).trim());
    let o = ok(d, &["ls", "statekit-data/savepoints"]);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("not verified"),
        "{}",
        text(&o)
    );
    let o = ok(d, &["ls", "statekit-data/savepoints", "--verify", "--json"]);
    let items: serde_json::Value = serde_json::from_slice(&o.stdout).expect("ls");
    assert_eq!(items[0]["status"], "ok", "{items}");
    damage_keyed_data(&sp, 1);
    let o = run(d, &["ls", "statekit-data/savepoints", "--verify"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let t = String::from_utf8_lossy(&o.stdout);
    assert!(t.contains("BROKEN") && t.contains("problem:"), "{t}");
}

/// Colour only on a terminal: piped output has none, `--color always` has it (diff's `+`/`-`
/// lines, the `error:` prefix), `--color never` and `NO_COLOR` none.
#[test]
fn colour_only_when_asked_or_on_a_terminal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::write(d.join("one.txt"), "a b\n").expect("input");
    std::fs::write(d.join("two.txt"), "c\n").expect("input");
    let a = wordcount_savepoint(d, "one.txt", "o1", &[]);
    let b = wordcount_savepoint(d, "two.txt", "o2", &["-s", &a]);
    let esc = |o: &Output| o.stdout.contains(&0x1b) || o.stderr.contains(&0x1b);
    let piped = run(d, &["diff", &a, &b]);
    assert_eq!(piped.status.code(), Some(1), "{}", text(&piped));
    assert!(!esc(&piped), "no colour into a pipe");
    let always = run(d, &["diff", &a, &b, "--color", "always"]);
    assert!(esc(&always), "{}", text(&always));
    let never = run(d, &["--color", "never", "diff", &a, &b]);
    assert!(!esc(&never));
    let err = run(d, &["show", "nope", "--color", "always"]);
    assert_eq!(err.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&err.stderr).starts_with("\u{1b}["),
        "{}",
        text(&err)
    );
    let o = std::process::Command::new(common::bin())
        .current_dir(d)
        .args(["diff", &a, &b])
        .env("NO_COLOR", "1")
        .output()
        .expect("run");
    assert!(!esc(&o));
}

/// `--input -` reads standard input as a stream: every word counted, the savepoint taken at
/// its end.
#[test]
fn standard_input_is_a_stream() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let args = wordcount_args("--input - --stop-with-savepoint --output out");
    let o = common::run_with_input(d, &args, b"a b a\nc a\n");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("processed 5 words from <stdin>"),
        "{}",
        text(&o)
    );
    let mut lines = common::committed_lines(&d.join("out"));
    lines.sort();
    assert_eq!(lines, ["(a,1)", "(a,2)", "(a,3)", "(b,1)", "(c,1)"]);
}

/// `--socket HOST:PORT` (Flink's `socketTextStream`): lines are counted as they arrive,
/// checkpoints go on by the interval while the socket is quiet, SIGTERM takes a savepoint at
/// any moment, and a job restored from it continues the counts.
#[test]
fn socket_input_as_the_seed_types_it() {
    use std::io::{BufRead, Write};
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    // A job reading from a listener of ours (what `nc -lk 9999` is to the seed); its echoed
    // lines come back over a channel, waited for with a bound.
    let start = |extra: &[&str]| {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
        let addr = listener.local_addr().expect("addr").to_string();
        let mut args = vec![
            "demo",
            "wordcount",
            "--socket",
            &addr,
            "--echo",
            "--checkpoint-interval",
            "200ms",
            "--stop-with-savepoint",
        ];
        args.extend_from_slice(extra);
        let mut child = std::process::Command::new(common::bin())
            .current_dir(d)
            .args(&args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn");
        let (conn, _) = listener.accept().expect("the job connects");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        (child, conn, rx)
    };
    let expect = |rx: &std::sync::mpsc::Receiver<String>, want: &str| -> Vec<String> {
        let mut seen = Vec::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !seen.iter().any(|l: &String| l == want) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok(l) => seen.push(l),
                Err(_) => panic!("no {want} within 30 s; saw {seen:?}"),
            }
        }
        seen
    };
    let (child, mut conn, rx) = start(&["--output", "out1"]);
    conn.write_all(b"a b\n").expect("send");
    expect(&rx, "(b,1)");
    conn.write_all(b"a\n").expect("send");
    expect(&rx, "(a,2)");
    // Quiet for a while: checkpoints go on by the interval (at least one completes).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !has_completed_checkpoint(&d.join("statekit-data/checkpoints")) {
        assert!(
            std::time::Instant::now() < deadline,
            "no interval checkpoint completed within 30 s while quiet"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // SIGTERM while the socket is open and quiet: a savepoint, exit 0.
    // SAFETY: FFI call sending SIGTERM to our own child.
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    assert_eq!(rc, 0);
    let mut savepoint = String::new();
    for l in rx.iter() {
        savepoint = l;
    }
    let o = child.wait_with_output().expect("wait");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(err.contains("SIGTERM"), "{err}");
    let checkpoints: u64 = err
        .split("; ")
        .find_map(|p| p.split_once(" checkpoint"))
        .and_then(|(n, _)| n.trim().parse().ok())
        .unwrap_or(0);
    assert!(checkpoints >= 1, "interval checkpoints while quiet: {err}");
    assert!(
        d.join(&savepoint).join("_metadata").is_file(),
        "savepoint {savepoint:?}: {err}"
    );
    drop(conn);

    // Restored from the savepoint, on a new socket: the count goes on.
    let (child, mut conn, rx) = start(&["--output", "out2", "-s", &savepoint]);
    conn.write_all(b"a\n").expect("send");
    expect(&rx, "(a,3)");
    drop(conn); // the stream ends: a last savepoint, exit 0
    let o = child.wait_with_output().expect("wait");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

/// Whether some `JOB/chk-N/_metadata` exists under `base` (a checkpoint completed).
fn has_completed_checkpoint(base: &std::path::Path) -> bool {
    let dirs = |p: &std::path::Path| -> Vec<std::path::PathBuf> {
        std::fs::read_dir(p)
            .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path()).collect())
            .unwrap_or_default()
    };
    dirs(base).iter().any(|job| {
        dirs(job).iter().any(|c| {
            c.file_name().is_some_and(|n| n.to_string_lossy().starts_with("chk-")) && c.join("_metadata").is_file()
        })
    })
}

/// `show` (and every command taking one snapshot) of a directory of snapshots says so and
/// names `ls`.
#[test]
fn a_directory_of_snapshots_points_to_ls() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    ok(d, &["demo", "wordcount", "--stop-with-savepoint"]);
    let o = run(d, &["show", "statekit-data"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("directory of snapshots") && err.contains("statekit ls statekit-data"),
        "{err}"
    );
}
