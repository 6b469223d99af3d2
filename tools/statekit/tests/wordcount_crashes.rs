//! The word count killed with SIGKILL at random moments and restarted from the latest
//! completed checkpoint (at a random parallelism each time):
//! * exactly-once: every word's committed lines are exactly (w,1) … (w,n_w), once each;
//! * at-least-once: nothing is lost, but duplicates appear;
//! * at-most-once: lines are lost.

mod common;

use common::{bin, committed_lines, counts_by_word, run, wordcount_args};
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const WORDS: usize = 60_000;
/// The bucket of the S3 runs.
const S3_BUCKET: &str = "statekit-kills";

fn make_input(path: &Path) -> BTreeMap<String, i64> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let mut text = String::new();
    let mut expected: BTreeMap<String, i64> = BTreeMap::new();
    for i in 0..WORDS {
        // A skewed vocabulary: a few very frequent words, many rare ones.
        let w = if rng.gen_bool(0.3) {
            format!("w{}", rng.gen_range(0..10))
        } else {
            format!("w{}", rng.gen_range(0..3000))
        };
        *expected.entry(w.clone()).or_default() += 1;
        text.push_str(&w);
        text.push(if i % 12 == 11 { '\n' } else { ' ' });
    }
    std::fs::write(path, text).expect("write input");
    expected
}

/// Every word's committed lines are exactly (w,1) … (w,n_w), once each.
fn assert_exactly_once(expected: &BTreeMap<String, i64>, out: &Path) {
    let by_word = counts_by_word(&committed_lines(out));
    assert_eq!(by_word.len(), expected.len(), "words missing from the output");
    for (w, n) in expected {
        let mut got = by_word.get(w).cloned().unwrap_or_default();
        got.sort_unstable();
        let want: Vec<i64> = (1..=*n).collect();
        assert_eq!(
            got, want,
            "word {w}: committed counts are not exactly 1..={n} once each"
        );
    }
}

/// Runs the job, killing it `kills` times; returns how many kills hit a running job.
fn run_with_kills(dir: &Path, guarantee: &str, kills: usize, seed: u64) -> usize {
    run_with_kills_on(dir, guarantee, "hashmap", kills, seed)
}

/// [`run_with_kills`] on a chosen backend; each restart picks the backend at random when
/// `backend` is `"mixed"` (restores switch backends through the canonical checkpoints).
fn run_with_kills_on(dir: &Path, guarantee: &str, backend: &str, kills: usize, seed: u64) -> usize {
    run_with_kills_opts(dir, guarantee, backend, "full", "off", kills, seed, None)
}

/// [`run_with_kills_on`] with a checkpoint type (`full` or `incremental`) and the changelog
/// (`off`, `on`, or `mixed`: on or off at random in each round); incremental and changelog
/// runs restore in a random restore mode each time (claim, no-claim, legacy). Changelog
/// runs materialize every 100 ms and let two checkpoints run at once.
#[allow(clippy::too_many_arguments)] // one knob per dimension the tests vary
fn run_with_kills_opts(
    dir: &Path,
    guarantee: &str,
    backend: &str,
    checkpoint_type: &str,
    changelog: &str,
    kills: usize,
    seed: u64,
    s3: Option<&common::moto::Moto>,
) -> usize {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    // Checkpoints on a local directory, or on the S3 server.
    let ck = match s3 {
        Some(_) => format!("s3://{S3_BUCKET}/ck"),
        None => "ck".to_string(),
    };
    let env = s3.map(common::moto::Moto::env).unwrap_or_default();
    let mut hit = 0;
    let mut kills = kills;
    let mut round = 0;
    while round <= kills {
        let p = rng.gen_range(1..=4).to_string();
        let b = match backend {
            "mixed" => ["hashmap", "rocksdb"][rng.gen_range(0..2)],
            other => other,
        };
        let mode = match (checkpoint_type, changelog) {
            ("incremental", _) | (_, "on" | "mixed") => ["claim", "no-claim", "legacy"][rng.gen_range(0..3)],
            _ => "no-claim",
        };
        let changelog_on = match changelog {
            "on" => true,
            "mixed" => rng.gen_bool(0.5),
            _ => false,
        };
        let changelog_args: &[&str] = if changelog_on {
            &[
                "--changelog",
                "-D",
                "state.changelog.periodic-materialize.interval=100ms",
                "-D",
                "execution.checkpointing.max-concurrent-checkpoints=2",
            ]
        } else {
            &[]
        };
        let before = auto_committed(dir);
        let mut child = Command::new(bin())
            .current_dir(dir)
            .args(wordcount_args(&format!(
                "--input input.txt --output out --checkpoint-dir {ck} --checkpoint-every 1500 --restore latest \
                 --parallelism {p} --guarantee {guarantee} --backend {b} --checkpoint-type {checkpoint_type} \
                 --restore-mode {mode}"
            )))
            .args(changelog_args)
            .envs(env.iter().cloned())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        if round < kills {
            // A whole uninterrupted run of this input takes well under a second (0.8 s in a
            // debug build here, 0.3 s in a release build), and each restore resumes from the
            // last checkpoint (every 1500 words): a kill must land early for later runs to be
            // hit at all.
            let mut sleep = if cfg!(debug_assertions) {
                rng.gen_range(50..450)
            } else {
                rng.gen_range(15..150)
            };
            if guarantee == "at-most-once" {
                // A kill before this run's first auto-commit loses nothing (it resumes where
                // the last run committed), and on a loaded machine start-up alone can outlast
                // the sleep: the sleep starts once this run has committed ahead, and is short
                // (a whole run without checkpoints takes well under a second).
                wait_for_auto_commit(dir, &before, &mut child);
                sleep /= 10;
            }
            std::thread::sleep(Duration::from_millis(sleep));
            if child.try_wait().expect("try_wait").is_none() {
                // SAFETY: FFI call sending SIGKILL to our own child.
                let rc = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGKILL) };
                assert_eq!(rc, 0);
                hit += 1;
                child.wait().expect("wait");
                // Whether a kill loses anything is up to where it lands (during the offset's
                // fsync it loses nothing): at-most-once runs are killed again, up to 12
                // times, until one has.
                if guarantee == "at-most-once" && kills < 12 && !at_most_once_lost(dir) {
                    kills += 1;
                }
            } else {
                child.wait().expect("wait");
            }
        } else {
            let deadline = Instant::now() + Duration::from_secs(300);
            loop {
                if let Some(st) = child.try_wait().expect("try_wait") {
                    assert!(st.success(), "final run failed: {st}");
                    break;
                }
                assert!(Instant::now() < deadline, "final run did not finish");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        round += 1;
    }
    hit
}

/// Whether at-most-once runs in `dir` have lost a line so far: the output holds fewer lines
/// (one per word) than the input has words before the committed offset.
fn at_most_once_lost(dir: &Path) -> bool {
    let Some(offset) = auto_committed(dir)
        .first()
        .and_then(|b| <[u8; 8]>::try_from(b.as_slice()).ok())
    else {
        return false;
    };
    let input = std::fs::read(dir.join("input.txt")).expect("read input");
    let end = (u64::from_be_bytes(offset) as usize).min(input.len());
    let words = input[..end]
        .split(|b| b.is_ascii_whitespace())
        .filter(|w| !w.is_empty())
        .count();
    committed_lines(&dir.join("out")).len() < words
}

/// The contents of the at-most-once offset files under `dir/ck` (empty before the first).
fn auto_committed(dir: &Path) -> Vec<Vec<u8>> {
    let mut files: Vec<_> = match std::fs::read_dir(dir.join("ck/at-most-once")) {
        Ok(rd) => rd.filter_map(|e| e.ok()).map(|e| e.path()).collect(),
        Err(_) => return Vec::new(),
    };
    files.sort();
    files.iter().filter_map(|p| std::fs::read(p).ok()).collect()
}

/// Waits (at most a minute) until the at-most-once offset differs from `before` or the
/// child has exited.
fn wait_for_auto_commit(dir: &Path, before: &[Vec<u8>], child: &mut std::process::Child) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while auto_committed(dir) == before && child.try_wait().expect("try_wait").is_none() {
        assert!(
            Instant::now() < deadline,
            "the at-most-once run committed no offset in a minute"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn exactly_once_survives_sigkill() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let expected = make_input(&d.join("input.txt"));
    let hit = run_with_kills(d, "exactly-once", 5, 1);
    assert!(
        hit >= 3,
        "only {hit} kills hit a running job; the input is too small for this machine"
    );
    assert_exactly_once(&expected, &d.join("out"));
    assert_eq!(
        std::fs::read_dir(d.join("out/.pending")).expect("pending dir").count(),
        0,
        "transactions left pending after a clean finish"
    );
    eprintln!(
        "exactly-once: {hit} SIGKILLs, {} words, every count committed exactly once",
        WORDS
    );
}

#[test]
fn at_least_once_duplicates_and_at_most_once_loses() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let expected = make_input(&d.join("input.txt"));
    let hit = run_with_kills(d, "at-least-once", 4, 2);
    assert!(hit >= 2, "only {hit} kills hit a running job");
    let lines = committed_lines(&d.join("out"));
    let by_word = counts_by_word(&lines);
    let mut duplicates = 0;
    for (w, n) in &expected {
        let got = by_word.get(w).cloned().unwrap_or_default();
        for c in 1..=*n {
            let k = got.iter().filter(|x| **x == c).count();
            assert!(k >= 1, "at-least-once lost ({w},{c})");
            duplicates += k - 1;
        }
    }
    assert!(duplicates > 0, "at-least-once showed no duplicate after {hit} kills");
    eprintln!("at-least-once: {hit} SIGKILLs, no loss, {duplicates} duplicate lines (as expected of at-least-once)");

    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    make_input(&d.join("input.txt"));
    let hit = run_with_kills(d, "at-most-once", 4, 3);
    assert!(hit >= 2, "only {hit} kills hit a running job");
    let lines = committed_lines(&d.join("out"));
    assert!(
        lines.len() < WORDS,
        "at-most-once lost nothing ({} lines for {WORDS} words) after {hit} kills",
        lines.len()
    );
    eprintln!(
        "at-most-once: {hit} SIGKILLs, {} of {WORDS} input words reached the output (loss, as expected)",
        lines.len()
    );
}

#[test]
fn sigterm_stops_with_a_savepoint_and_the_restore_continues_exactly() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let expected = make_input(&d.join("input.txt"));
    let common_args = wordcount_args(
        "--input input.txt --output out --checkpoint-dir ck --checkpoint-every 1500 --savepoint-dir sp \
         --stop-with-savepoint",
    );
    let child = Command::new(bin())
        .current_dir(d)
        .args(&common_args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    // SIGTERM once the first checkpoint committed output (a fixed sleep could land before the
    // handler is installed on a loaded machine, or after the end on a fast one).
    let deadline = Instant::now() + Duration::from_secs(60);
    while committed_lines(&d.join("out")).is_empty() {
        assert!(Instant::now() < deadline, "no checkpoint committed output in a minute");
        std::thread::sleep(Duration::from_millis(5));
    }
    // SAFETY: FFI call sending SIGTERM to our own child.
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    assert_eq!(rc, 0);
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "stop-with-savepoint on SIGTERM must exit 0: {stderr}"
    );
    assert!(
        stderr.contains("SIGTERM"),
        "the job did not see SIGTERM (finished too early?): {stderr}"
    );
    let savepoint = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        d.join(&savepoint).join("_metadata").is_file(),
        "no savepoint at {savepoint:?}"
    );
    let partial = committed_lines(&d.join("out")).len();
    assert!(partial > 0 && partial < WORDS, "{partial} lines before the stop");

    // Resume from the savepoint at another parallelism: the output continues exactly.
    let mut args: Vec<&str> = common_args.to_vec();
    args.retain(|a| *a != "--stop-with-savepoint");
    args.extend(["--restore", &savepoint, "--parallelism", "3"]);
    let out = Command::new(bin()).current_dir(d).args(&args).output().expect("run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_exactly_once(&expected, &d.join("out"));
}

#[cfg(feature = "rocksdb")]
#[test]
fn exactly_once_survives_sigkill_on_rocksdb_and_across_backends() {
    for (backend, seed) in [("rocksdb", 11), ("mixed", 12)] {
        let (_tmp, hit) = exactly_once_after_kills(&format!("{backend}: "), backend, "full", "off", 4, seed);
        eprintln!("exactly-once on {backend}: {hit} SIGKILLs, every count committed exactly once");
    }
}

#[cfg(feature = "rocksdb")]
#[test]
fn exactly_once_survives_sigkill_with_incremental_checkpoints_in_every_restore_mode() {
    let (tmp, hit) = exactly_once_after_kills("", "rocksdb", "incremental", "off", 5, 21);
    let d = tmp.path();
    // Every complete checkpoint left (native, incremental) verifies in full, entries decoded.
    let complete = complete_checkpoints(d);
    for item in &complete {
        assert_eq!(item["format"], "native-rocksdb", "{item}");
        let path = item["path"].as_str().expect("path");
        let out = run(d, &["verify", path]);
        assert!(out.status.success(), "{path}: {}", output(&out));
    }
    assert!(!complete.is_empty());
    // gc --dry-run lists what the killed runs left and deletes nothing.
    let before = common::files_under(&d.join("ck"));
    let out = run(d, &["gc", "ck", "--dry-run", "--min-age", "0s", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).expect("gc json");
    assert!(plan["snapshots"].as_u64().expect("snapshots") >= 1);
    assert_eq!(common::files_under(&d.join("ck")), before, "gc --dry-run changed files");
    // Without --yes and without a terminal to ask on, gc refuses to delete.
    let out = Command::new(bin())
        .current_dir(d)
        .args(["gc", "ck", "--min-age", "0s"])
        .stdin(Stdio::null())
        .output()
        .expect("gc");
    let orphans = plan["orphans"].as_array().expect("orphans").len();
    if orphans > 0 {
        assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(String::from_utf8_lossy(&out.stderr).contains("--yes"));
    }
    assert_eq!(
        common::files_under(&d.join("ck")),
        before,
        "gc without --yes changed files"
    );
    // With --yes it deletes exactly the orphans: every complete checkpoint still verifies,
    // and nothing is left to collect.
    let out = run(d, &["gc", "ck", "--min-age", "0s", "--yes", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let done: serde_json::Value = serde_json::from_slice(&out.stdout).expect("gc json");
    assert_eq!(done["deleted_files"].as_u64().unwrap_or(0) as usize, orphans);
    for item in &complete {
        let path = item["path"].as_str().expect("path");
        let out = run(d, &["verify", path]);
        assert!(
            out.status.success(),
            "{path} broken by gc: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    let out = run(d, &["gc", "ck", "--dry-run", "--min-age", "0s", "--json"]);
    let again: serde_json::Value = serde_json::from_slice(&out.stdout).expect("gc json");
    assert_eq!(again["orphans"].as_array().map(Vec::len), Some(0), "{again}");
    eprintln!(
        "exactly-once with incremental RocksDB checkpoints: {hit} SIGKILLs, every count committed exactly once; gc collected {orphans} orphaned files"
    );
}

/// The changelog on both backends: killed mid-upload and mid-materialization (it
/// materializes every 100 ms and uploads continuously), restored in every restore mode at
/// random parallelisms, with two checkpoints running at once — every count is committed
/// exactly once, and every checkpoint left verifies.
#[test]
fn exactly_once_survives_sigkill_with_the_changelog() {
    let mut backends = vec![("hashmap", 31)];
    if cfg!(feature = "rocksdb") {
        backends.push(("rocksdb", 32));
    }
    for (backend, seed) in backends {
        let (tmp, hit) = exactly_once_after_kills(&format!("{backend}: "), backend, "full", "on", 5, seed);
        verify_every_checkpoint(tmp.path());
        eprintln!("exactly-once with the changelog on {backend}: {hit} SIGKILLs, every count committed exactly once");
    }
}

/// The changelog switched on and off (and the backend changed) at random across restores:
/// the state carries over each time.
#[cfg(feature = "rocksdb")]
#[test]
fn exactly_once_survives_sigkill_switching_the_changelog_and_the_backend() {
    let (tmp, _) = exactly_once_after_kills("", "mixed", "full", "mixed", 6, 33);
    verify_every_checkpoint(tmp.path());
}

/// In a fresh directory (returned with the hits), the exactly-once word count over a new
/// input, killed `kills` times as [`run_with_kills_opts`] does (local checkpoints): at least
/// two kills hit a running job (`what` starts the message otherwise), and every count is
/// committed exactly once.
fn exactly_once_after_kills(
    what: &str,
    backend: &str,
    checkpoint_type: &str,
    changelog: &str,
    kills: usize,
    seed: u64,
) -> (tempfile::TempDir, usize) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let expected = make_input(&d.join("input.txt"));
    let hit = run_with_kills_opts(
        d,
        "exactly-once",
        backend,
        checkpoint_type,
        changelog,
        kills,
        seed,
        None,
    );
    assert!(hit >= 2, "{what}only {hit} kills hit a running job");
    assert_exactly_once(&expected, &d.join("out"));
    (tmp, hit)
}

/// `statekit verify` passes on every complete checkpoint under `<d>/ck`.
fn verify_every_checkpoint(d: &Path) {
    let complete = complete_checkpoints(d);
    for e in &complete {
        let path = e["path"].as_str().expect("path");
        let out = run(d, &["verify", path]);
        assert!(out.status.success(), "verify {path}: {}", output(&out));
    }
    assert!(!complete.is_empty(), "no complete checkpoint left");
}

/// The complete checkpoints `statekit ls ck --json` lists in `d` (exit 0 asserted).
fn complete_checkpoints(d: &Path) -> Vec<serde_json::Value> {
    let out = run(d, &["ls", "ck", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).expect("ls json");
    listed
        .as_array()
        .expect("array")
        .iter()
        .filter(|i| i["complete"] == serde_json::Value::Bool(true))
        .cloned()
        .collect()
}

/// A run's standard output then its standard error.
fn output(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `statekit args…` in `d` with the S3 server's environment.
#[cfg(feature = "rocksdb")]
fn run_s3(moto: &common::moto::Moto, d: &Path, args: &[&str]) -> std::process::Output {
    Command::new(bin())
        .current_dir(d)
        .args(args)
        .envs(moto.env())
        .output()
        .expect("run statekit")
}

/// Exactly-once across SIGKILLs with every checkpoint on a real S3 server (moto): full
/// checkpoints on the heap backend and incremental native ones on RocksDB (SST files uploaded
/// and downloaded), backends switching between restarts. A kill mid-upload leaves no
/// `_metadata`, so it never looks complete; every complete checkpoint left verifies.
#[cfg(feature = "rocksdb")]
#[test]
fn exactly_once_survives_sigkill_with_checkpoints_on_s3() {
    let Some(moto) = common::moto::Moto::start() else {
        return;
    };
    moto.create_bucket(S3_BUCKET);
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let expected = make_input(&d.join("input.txt"));
    let hit = run_with_kills_opts(d, "exactly-once", "mixed", "full", "off", 4, 57, Some(&moto));
    assert!(hit >= 1, "only {hit} kills hit a running job");
    assert_exactly_once(&expected, &d.join("out"));
    let hit = run_with_kills_opts(d, "exactly-once", "rocksdb", "incremental", "off", 3, 58, Some(&moto));
    eprintln!("incremental on S3: {hit} SIGKILLs");
    assert!(!d.join("s3:").exists(), "a URL became a local directory");
    let out = run_s3(&moto, d, &["ls", &format!("s3://{S3_BUCKET}/ck"), "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).expect("ls json");
    let complete: Vec<&str> = listed
        .as_array()
        .expect("array")
        .iter()
        .filter(|i| i["complete"] == true)
        .filter_map(|i| i["path"].as_str())
        .collect();
    assert!(!complete.is_empty(), "{listed}");
    for path in complete {
        let v = run_s3(&moto, d, &["verify", path]);
        assert!(v.status.success(), "{path}: {}", String::from_utf8_lossy(&v.stdout));
    }
}
