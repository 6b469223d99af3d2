//! Bad input never panics: every command given a missing path, a non-snapshot directory, a
//! truncated, bit-flipped or wrong-version snapshot prints one clear error line and exits
//! non-zero; hundreds of random corruptions of a fixture never make `show`, `dump` or `verify`
//! panic.

mod common;

use common::{copy_dir, fixture, run, wordcount_args};
use rand::{Rng, SeedableRng};
use std::path::{Path, PathBuf};

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).expect("read_dir") {
        let p = e.expect("entry").path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// Asserts a clean failure: the given exit code and one `error:` line, no panic.
fn assert_clean_error(args: &[&str], code: i32, needle: &str) {
    let cwd = std::env::temp_dir();
    let out = run(&cwd, args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{args:?}: stderr {stderr}");
    assert!(!stderr.contains("panicked"), "{args:?} panicked: {stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{args:?}: expected one error line, got {stderr}");
    assert!(lines[0].starts_with("error: "), "{args:?}: {stderr}");
    assert!(
        stderr.contains(needle),
        "{args:?}: {stderr:?} does not mention {needle:?}"
    );
}

#[test]
fn clear_errors_for_each_kind_of_bad_input() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let missing = tmp.path().join("nope");
    let missing = missing.to_str().expect("utf8");
    let not_snapshot = tmp.path().to_str().expect("utf8");
    // A `_metadata` claiming a future format version.
    let future = tmp.path().join("future");
    copy_dir(&fixture("savepoint-basic"), &future);
    let mut md = std::fs::read(future.join("_metadata")).expect("read");
    md[4..8].copy_from_slice(&99u32.to_le_bytes());
    std::fs::write(future.join("_metadata"), md).expect("write");
    let version = future.to_str().expect("utf8");
    for cmd in [
        ["show"].as_slice(),
        &["verify"],
        &["dump", "--uid", "word-counter", "--state", "count"],
    ] {
        let with = |p: &str| -> Vec<String> {
            let mut v: Vec<String> = vec![cmd[0].to_string(), p.to_string()];
            v.extend(cmd[1..].iter().map(|s| s.to_string()));
            v
        };
        let a = with(missing);
        assert_clean_error(&a.iter().map(String::as_str).collect::<Vec<_>>(), 2, "nope");
        let a = with(not_snapshot);
        assert_clean_error(&a.iter().map(String::as_str).collect::<Vec<_>>(), 2, "no _metadata");
        let a = with(fixture("corrupt-metadata-crc").to_str().expect("utf8"));
        assert_clean_error(&a.iter().map(String::as_str).collect::<Vec<_>>(), 2, "_metadata");
        let a = with(version);
        assert_clean_error(
            &a.iter().map(String::as_str).collect::<Vec<_>>(),
            2,
            "unsupported format version",
        );
    }
    assert_clean_error(&["ls", missing], 2, "nope");
    // A data file of a future version: show reads only _metadata; dump and verify name it.
    let dv = fixture("corrupt-version");
    let dv = dv.to_str().expect("utf8");
    assert_clean_error(
        &["dump", dv, "--uid", "enricher", "--state", "last-seen"],
        2,
        "unsupported format version",
    );
    let out = run(&std::env::temp_dir(), &["verify", dv]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("unsupported format version"));
}

#[test]
fn verify_reports_truncation_and_bit_flips_with_file_and_offset() {
    for (name, needle) in [("corrupt-truncated", "size"), ("corrupt-bitflip", "offset")] {
        let p = fixture(name);
        let out = run(&std::env::temp_dir(), &["verify", p.to_str().expect("utf8")]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{name}: {stdout}");
        assert!(stdout.contains("problem: "), "{name}: {stdout}");
        assert!(stdout.contains(needle), "{name}: {stdout}");
        assert!(
            stdout.contains(".keyed") || stdout.contains(".operator"),
            "{name}: no file named: {stdout}"
        );
    }
    let p = fixture("savepoint-basic");
    let out = run(&std::env::temp_dir(), &["verify", p.to_str().expect("utf8")]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
}

#[test]
fn random_corruptions_never_panic() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(2026);
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut verify_failures = 0;
    let rounds = 150;
    for round in 0..rounds {
        let dir = tmp.path().join(format!("r{round}"));
        copy_dir(&fixture("savepoint-basic"), &dir);
        let files = files_under(&dir);
        let victim = &files[rng.gen_range(0..files.len())];
        let mut bytes = std::fs::read(victim).expect("read");
        match rng.gen_range(0..4) {
            0 if !bytes.is_empty() => {
                let i = rng.gen_range(0..bytes.len());
                bytes[i] ^= 1 << rng.gen_range(0..8);
            }
            1 => {
                let n = rng.gen_range(0..bytes.len().max(1));
                bytes.truncate(n);
            }
            2 if !bytes.is_empty() => {
                let i = rng.gen_range(0..bytes.len());
                let n = rng.gen_range(1..=8).min(bytes.len() - i);
                rng.fill(&mut bytes[i..i + n]);
            }
            _ => bytes.extend((0..rng.gen_range(1..16)).map(|_| rng.gen::<u8>())),
        }
        std::fs::write(victim, &bytes).expect("write");
        let d = dir.to_str().expect("utf8");
        for args in [
            vec!["show", d],
            vec!["show", d, "--json"],
            vec!["dump", d, "--uid", "word-counter", "--state", "per-window"],
            vec!["dump", d, "--uid", "word-counter", "--state", "rules", "--json"],
            vec!["verify", d],
        ] {
            let out = run(tmp.path(), &args);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                matches!(out.status.code(), Some(0..=2)),
                "{args:?} on {} exited {:?}: {stderr}",
                victim.display(),
                out.status.code()
            );
            assert!(!stderr.contains("panicked"), "{args:?} panicked: {stderr}");
            if args[0] == "verify" && out.status.code() != Some(0) {
                verify_failures += 1;
            }
        }
    }
    // Every mutation above changes covered bytes, so verify must notice nearly all of them
    // (appending garbage to a file is caught by the size check too).
    assert!(
        verify_failures >= rounds * 9 / 10,
        "verify noticed only {verify_failures} of {rounds} corruptions"
    );
}

#[test]
fn every_command_has_help() {
    // Every command `--help` lists, and theirs in turn (`demo wordcount`), so a new command
    // is covered without being added here.
    let mut todo: Vec<Vec<String>> = vec![Vec::new()];
    let mut seen: Vec<String> = Vec::new();
    while let Some(path) = todo.pop() {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let out = run(&std::env::temp_dir(), &args);
        assert!(out.status.success(), "{args:?}");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(text.contains("Usage"), "{args:?}: {text}");
        seen.push(path.join(" "));
        let commands = text
            .lines()
            .skip_while(|l| !l.starts_with("Commands:"))
            .skip(1)
            .take_while(|l| l.starts_with("  "))
            .filter_map(|l| l.split_whitespace().next())
            .filter(|c| *c != "help");
        for c in commands {
            let mut sub = path.clone();
            sub.push(c.to_string());
            todo.push(sub);
        }
    }
    // The top level, its 16 commands (convert, rewrite, schema, check, finish-shards among
    // them) and demo's wordcount.
    assert!(seen.len() >= 18, "only these commands have help: {seen:?}");
}

/// A native RocksDB savepoint written by the demo: `show` labels it, `dump` and `verify` read
/// it; a damaged table file makes `verify` exit 1 naming the file and `dump` fail cleanly.
#[cfg(feature = "rocksdb")]
#[test]
fn native_savepoints_are_shown_verified_and_damage_is_reported() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    std::fs::write(d.join("in.txt"), "to be or not to be that is the question ".repeat(200)).expect("input");
    let out = run(
        d,
        &wordcount_args("--input in.txt --backend rocksdb --savepoint-format native --stop-with-savepoint"),
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let sp = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let show = run(d, &["show", &sp]);
    let text = String::from_utf8_lossy(&show.stdout);
    assert!(show.status.success());
    assert!(text.contains("format native-rocksdb"), "{text}");
    assert!(text.contains("restores into rocksdb only"), "{text}");
    let dump = run(
        d,
        &["dump", &sp, "--uid", "counter", "--state", "count", "--key", "question"],
    );
    assert!(dump.status.success(), "{}", String::from_utf8_lossy(&dump.stderr));
    assert!(String::from_utf8_lossy(&dump.stdout).contains("value=200"));
    let verify = run(d, &["verify", &sp]);
    assert!(verify.status.success(), "{}", String::from_utf8_lossy(&verify.stdout));
    // Restoring it into the heap backend is refused with a clear message.
    let heap = run(
        d,
        &wordcount_args(&format!("--input in.txt --restore {sp} --output o2")),
    );
    assert_eq!(heap.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&heap.stderr).contains("--backend rocksdb"));
    // Damage one table file.
    let sst = files_under(&d.join(&sp))
        .into_iter()
        .find(|p| p.extension().is_some_and(|e| e == "sst"))
        .expect("an sst");
    let mut bytes = std::fs::read(&sst).expect("read");
    let i = bytes.len() / 3;
    bytes[i] ^= 0x01;
    std::fs::write(&sst, bytes).expect("write");
    let name = sst.file_name().expect("name").to_string_lossy().to_string();
    let verify = run(d, &["verify", &sp]);
    assert_eq!(verify.status.code(), Some(1));
    let text = String::from_utf8_lossy(&verify.stdout);
    assert!(text.contains(&name) && text.contains("checksum mismatch"), "{text}");
    let dump = run(d, &["dump", &sp, "--uid", "counter", "--state", "count"]);
    assert_eq!(dump.status.code(), Some(2));
    let err = String::from_utf8_lossy(&dump.stderr);
    assert!(!err.contains("panicked") && err.contains(&name), "{err}");
}
