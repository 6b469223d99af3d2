//! Helpers for tests that run the real `statekit` binary.
#![allow(dead_code)]

pub mod bounded;
pub mod moto;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

/// The binary under test.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_statekit")
}

/// Runs `statekit args…` in `dir`.
pub fn run(dir: &Path, args: &[&str]) -> Output {
    Command::new(bin())
        .current_dir(dir)
        .args(args)
        .output()
        .expect("run statekit")
}

/// Runs `statekit args…` in `dir` with `input` on its standard input.
pub fn run_with_input(dir: &Path, args: &[&str], input: &[u8]) -> Output {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = Command::new(bin())
        .current_dir(dir)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    child.stdin.take().expect("stdin").write_all(input).expect("write");
    child.wait_with_output().expect("wait")
}

/// Every committed output line (files directly in `out`, not in `.pending/`).
pub fn committed_lines(out: &Path) -> Vec<String> {
    let mut files: Vec<_> = match std::fs::read_dir(out) {
        Ok(rd) => rd
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| p.is_file())
            .collect(),
        Err(_) => return Vec::new(),
    };
    files.sort();
    files
        .iter()
        .flat_map(|p| {
            std::fs::read_to_string(p)
                .expect("read part file")
                .lines()
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Parses `(word,count)` lines into word → counts seen (in order).
pub fn counts_by_word(lines: &[String]) -> BTreeMap<String, Vec<i64>> {
    let mut m: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for l in lines {
        let inner = l
            .strip_prefix('(')
            .and_then(|x| x.strip_suffix(')'))
            .unwrap_or_else(|| panic!("malformed line {l:?}"));
        let (w, c) = inner.rsplit_once(',').unwrap_or_else(|| panic!("malformed line {l:?}"));
        m.entry(w.to_string())
            .or_default()
            .push(c.parse().unwrap_or_else(|_| panic!("bad count in {l:?}")));
    }
    m
}

/// Every regular file below `dir` with its size and modification time (to check that a
/// read-only command changed nothing).
#[allow(dead_code)]
pub fn files_under(dir: &Path) -> BTreeMap<std::path::PathBuf, (u64, std::time::SystemTime)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            let Ok(md) = e.metadata() else { continue };
            if md.is_dir() {
                stack.push(p);
            } else {
                out.insert(p, (md.len(), md.modified().unwrap_or(std::time::UNIX_EPOCH)));
            }
        }
    }
    out
}

/// Every regular file below `dir`, sorted.
pub fn files(dir: &Path) -> Vec<std::path::PathBuf> {
    files_under(dir).into_keys().collect()
}

/// Copies every regular file below `from` to the same place below `to` (directories as the
/// files need them; empty ones are not copied).
pub fn copy_files(from: &Path, to: &Path) {
    for p in files(from) {
        let dest = to.join(p.strip_prefix(from).expect("below"));
        std::fs::create_dir_all(dest.parent().expect("parent")).expect("mkdir");
        std::fs::copy(&p, &dest).expect("copy");
    }
}

/// A run's exit code, standard output and standard error, for assertion messages.
pub fn text(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs `statekit args…` in `dir` and asserts exit 0 (naming the run's output otherwise).
pub fn ok(dir: &Path, args: &[&str]) -> Output {
    let o = run(dir, args);
    assert_eq!(o.status.code(), Some(0), "{args:?}: {}", text(&o));
    o
}

/// The paths of a `gc --json` document's orphans, sorted.
pub fn gc_orphan_paths(doc: &serde_json::Value) -> Vec<String> {
    let mut orphans: Vec<String> = doc["orphans"]
        .as_array()
        .expect("orphans")
        .iter()
        .filter_map(|o| o["path"].as_str().map(str::to_string))
        .collect();
    orphans.sort();
    orphans
}

/// The arguments of `statekit demo wordcount ARGS`: `demo`, `wordcount` and `args` split at
/// white space (no argument of the word count holds a space here).
pub fn wordcount_args(args: &str) -> Vec<&str> {
    let mut a = vec!["demo", "wordcount"];
    a.extend(args.split_whitespace());
    a
}

/// A golden fixture directory (`fixtures/v1/<name>`).
pub fn fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/v1")
        .join(name)
}

/// Copies the directory tree `from` to `to`.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read_dir") {
        let e = e.expect("entry");
        let dest = to.join(e.file_name());
        if e.path().is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).expect("copy");
        }
    }
}

/// A savepoint `dir/name` of one operator `op` with one value state `v` of `n` entries of
/// about 200 bytes (half random-looking, so compression has work to do), at parallelism 4 and
/// max parallelism `max_p`; `key(i)` is entry `i`'s serialized key, of type `key_type`.
pub fn big_savepoint(
    dir: &Path,
    name: &str,
    n: u32,
    max_p: u32,
    key_type: statekit_core::TypeSchema,
    key: impl Fn(u32) -> Vec<u8>,
) -> std::path::PathBuf {
    use statekit_core::storage::{LocalStorage, Storage};
    use statekit_core::{KeyGroupRange, MemoryView, OwnedEntry, StateDescriptor, TypeSchema};
    let storage: std::sync::Arc<dyn Storage> = std::sync::Arc::new(LocalStorage::new(dir));
    let writer =
        statekit_checkpoint::SnapshotWriter::new(storage, name, statekit_format::SnapshotKind::Savepoint, 1, "job")
            .expect("writer");
    let states = vec![StateDescriptor::value("v", key_type, TypeSchema::Bytes)];
    let entries: Vec<OwnedEntry> = (0..n)
        .map(|i| {
            let value = (0..200u32)
                .map(|j| {
                    (i.wrapping_mul(2_654_435_761) ^ j.wrapping_mul(40_503)) as u8
                        & if j % 2 == 0 { 0xff } else { 0x0f }
                })
                .collect();
            OwnedEntry::value(0, key(i), value, max_p)
        })
        .collect();
    let view = MemoryView::new(max_p, KeyGroupRange::all(max_p), states, entries);
    writer.register_operator("op", 4, max_p).expect("register");
    for i in 0..4 {
        let part = MemoryView::collect(&view, KeyGroupRange::for_subtask(max_p, 4, i)).expect("part");
        writer.write_subtask("op", i, Some(&part), None, false).expect("write");
    }
    writer.finish().expect("finish");
    dir.join(name)
}

/// The body of an inspector child test: when the environment variable `var` holds `PATH`, a
/// tab, `COLSxROWS` (and optionally a tab and `UID/STATE`), opens the inspector on an
/// in-memory terminal as `statekit inspect PATH` does, prints its first complete frame (and
/// the first page of that state), and ends as `statekit` ends on an error: `error: …`, exit
/// 2. Without the variable: nothing (the test binary runs it as a plain test too).
pub fn inspector_child(var: &str) {
    let Ok(spec) = std::env::var(var) else {
        return;
    };
    let run = || -> anyhow::Result<()> {
        let mut parts = spec.split('\t');
        let path = std::path::PathBuf::from(parts.next().unwrap_or_default());
        let (w, h) = parts
            .next()
            .and_then(|s| s.split_once('x'))
            .and_then(|(w, h)| Some((w.parse().ok()?, h.parse().ok()?)))
            .ok_or_else(|| anyhow::anyhow!("{var}: no COLSxROWS"))?;
        let mut inspector = statekit_inspector::headless::Headless::open(&path, None, (w, h))?;
        println!("{}", inspector.draw()?);
        if let Some((uid, state)) = parts.next().and_then(|p| p.split_once('/')) {
            inspector.open_state(uid, state)?;
            println!("{}", inspector.draw()?);
        }
        Ok(())
    };
    if let Err(e) = run() {
        eprintln!("error: {e:#}");
        std::process::exit(2);
    }
}
