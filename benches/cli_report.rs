//! Figures for the `statekit` command, each beside its anchor from the same run:
//! * `statekit show` wall time and peak memory on a small and a large savepoint (it must not
//!   read data files, so both should be about equal);
//! * `statekit verify` throughput beside `cat <files> > /dev/null`;
//! * `statekit inspect` start to first frame on both savepoints, the first page of entries,
//!   and paging through every entry of the large one (time, peak and anonymous memory);
//! * with `--diff` (or `--diff-only`): `statekit diff` of two savepoints of `--diff-mb` MB of
//!   state each (default 1024) that differ in 1% of their keys, beside `cat` of both
//!   directories and `statekit verify` (full decode) of both.
//!
//! * `statekit convert` of a savepoint of about 1 GB (`--migrate-mb`, default 2048 MB of state)
//!   (canonical → canonical, recompressed lz4 → zstd
//!   and lz4 → lz4; canonical → native and native → canonical), `statekit rewrite
//!   --max-parallelism` (time beside the plain convert, peak RSS) and `rewrite --rename-uid
//!   --link`, each beside `cp -r` of its own input directory followed by `sync` (the
//!   native input for native → canonical; `--migrate-only` runs just this section; rates are
//!   of each line's input bytes);
//! * with `--s3-only` (needs `STATEKIT_MOTO`, the venv's `moto_server`): the large savepoint
//!   uploaded to a real S3 API server on loopback, then `statekit show` (requests: one GET)
//!   and `statekit dump --key` of one key (bytes the store served beside the savepoint's
//!   bytes: target < 1%), each beside the same command on the local copy;
//!
//! The inspector is measured in a child process of this report (`--inspect`, [`inspect_child`]),
//! which drives it through the `statekit` library on an in-memory terminal.
//!
//! ```text
//! cargo build --release -p statekit
//! cargo run --release -p statekit-benches --bin cli_report -- [--small-mb 10] [--large-mb 1024] [--migrate-mb 2048] [--dir DIR]
//! cargo run --release -p statekit-benches --bin cli_report -- --diff-only --diff-mb 50
//! ```

#[path = "../tools/statekit/tests/common/moto.rs"]
#[allow(dead_code)]
mod moto;

use rand::{Rng, SeedableRng};
use statekit_benches as w;
use statekit_benches::arg;
use statekit_checkpoint::SnapshotWriter;
use statekit_core::storage::{LocalStorage, Storage};
use statekit_core::{BackendConfig, KeyedStateBackend};
use statekit_hashmap::HashMapBackend;
use statekit_inspector::app::Action;
use statekit_inspector::headless::Headless;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Writes a savepoint of about `mb` MB of state (`p` subtasks, 496-byte values), with the
/// value of every `changed_every`-th key (0: none) altered, so two calls with the same `mb`
/// differ in exactly those keys; returns its path.
fn make_savepoint_changed(dir: &Path, mb: u64, changed_every: usize, p: u32) -> PathBuf {
    let value_len = 496usize;
    let n = (mb * 1_000_000 / (value_len as u64 + 16)) as usize;
    let storage: Arc<dyn Storage> = Arc::new(LocalStorage::new(dir));
    let writer = SnapshotWriter::new_savepoint(storage, "", "0123456789abcdef0123456789abcdef", 1).expect("writer");
    writer.register_operator("counter", p, 128).expect("register");
    let keys = w::keys(n, 11);
    let mut backends: Vec<HashMapBackend> = (0..p)
        .map(|i| HashMapBackend::new(BackendConfig::for_subtask(128, p, i).expect("cfg")).expect("backend"))
        .collect();
    // Values are opaque bytes (the schema says so: `export` and `query` type them as Binary).
    let handles: Vec<_> = backends
        .iter_mut()
        .map(|b| {
            b.register(
                statekit_core::StateDescriptor::value(
                    "count",
                    statekit_core::TypeSchema::Bytes,
                    statekit_core::TypeSchema::Bytes,
                ),
                statekit_core::StateFunctions::None,
            )
            .expect("register")
        })
        .collect();
    // Half random, half repetitive values, as in the `report` benchmark.
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let mut value = vec![b'a'; value_len];
    for (i, k) in keys.iter().enumerate() {
        rng.fill(&mut value[..value_len / 2]);
        if changed_every > 0 && i % changed_every == 0 {
            value[0] ^= 0xff;
        }
        let kg = statekit_core::key_group_for_key(k, 128);
        let o = statekit_core::keygroup::subtask_for_key_group(128, p, kg) as usize;
        backends[o].put(handles[o], k, &[], &value).expect("put");
    }
    for (i, b) in backends.iter_mut().enumerate() {
        let view = b.snapshot(1).expect("snapshot");
        writer
            .write_subtask("counter", i as u32, Some(view.as_ref()), None, false)
            .expect("write");
    }
    let name = writer.dir().to_string();
    writer.finish().expect("finish");
    dir.join(name)
}

/// Runs a command; returns wall time and peak RSS (KiB) of the child.
fn measure(cmd: &mut Command) -> (Duration, i64) {
    measure_exit(cmd, 0)
}

/// [`measure`], for a command whose success is exit status `expected`.
fn measure_exit(cmd: &mut Command, expected: i32) -> (Duration, i64) {
    let t = Instant::now();
    let child = cmd.spawn().expect("spawn");
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child; `status` and `usage` are valid for writes.
    let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(rc, pid, "wait4 failed");
    let d = t.elapsed();
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == expected,
        "command failed: {cmd:?}"
    );
    std::mem::forget(child);
    (d, usage.ru_maxrss)
}

fn best(n: usize, mut f: impl FnMut() -> (Duration, i64)) -> (Duration, i64) {
    (0..n).map(|_| f()).min_by_key(|x| x.0).unwrap_or_default()
}

fn dir_bytes(p: &Path) -> (u64, Vec<PathBuf>) {
    let mut files = Vec::new();
    let mut total = 0;
    let mut dirs = vec![p.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir") {
            let e = e.expect("entry");
            let md = e.metadata().expect("md");
            if md.is_dir() {
                dirs.push(e.path());
            } else {
                total += md.len();
                files.push(e.path());
            }
        }
    }
    files.sort();
    (total, files)
}

/// Generates a savepoint in a child process, so this process stays small: a child's peak RSS
/// as reported by `wait4` starts from its parent's at fork time.
fn generate(dir: &Path, mb: u64) -> PathBuf {
    generate_changed(dir, mb, 0, 4)
}

/// [`generate`] of [`make_savepoint_changed`].
fn generate_changed(dir: &Path, mb: u64, changed_every: usize, p: u32) -> PathBuf {
    let exe = std::env::current_exe().expect("exe");
    let out = Command::new(exe)
        .args([
            "--generate",
            &mb.to_string(),
            "--changed-every",
            &changed_every.to_string(),
        ])
        .args(["--parallelism", &p.to_string(), "--dir"])
        .arg(dir)
        .output()
        .expect("spawn generator");
    assert!(
        out.status.success(),
        "generator failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// A memory figure of this process in kB from `/proc/self/status` (Linux): `RssAnon`
/// (anonymous resident memory: heap, not mapped files) or `VmHWM` (peak resident memory).
fn memory_kb(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?;
    line.trim().trim_end_matches("kB").trim().parse().ok()
}

/// `--inspect PATH --first-frame COLSxROWS [--first-page UID/STATE [--page-through]]`: the
/// inspector on an in-memory terminal. Prints its first complete frame (the operators, or the
/// snapshot list) and the time from start to it; with `--first-page`, then opens UID/STATE
/// and times its first page of entries; with `--page-through`, then pages down (PgDn) to the
/// last entry and prints the pages, entries, time and peak memory (VmHWM). An error ends it
/// with `error: …` and exit 2.
fn inspect_child(args: &[String]) -> std::process::ExitCode {
    let after = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1));
    let fail = |e: &dyn std::fmt::Display| {
        eprintln!("error: {e}");
        std::process::ExitCode::from(2)
    };
    let (Some(path), Some(size)) = (after("--inspect"), after("--first-frame")) else {
        return fail(&"--inspect PATH --first-frame COLSxROWS");
    };
    let Some((w, h)) = size
        .split_once('x')
        .and_then(|(w, h)| Some((w.parse::<u16>().ok()?, h.parse::<u16>().ok()?)))
    else {
        return fail(&"--first-frame takes COLSxROWS, e.g. 80x24");
    };
    let t0 = Instant::now();
    let mut inspector = match Headless::open(Path::new(path), None, (w, h)) {
        Ok(i) => i,
        Err(e) => return fail(&format!("{e:#}")),
    };
    let frame = |i: &mut Headless| i.draw().unwrap_or_else(|e| format!("drawing failed: {e:#}"));
    println!("{}", frame(&mut inspector));
    println!("first frame: {:.2} ms", t0.elapsed().as_secs_f64() * 1000.0);
    let Some(spec) = after("--first-page") else {
        return std::process::ExitCode::SUCCESS;
    };
    let Some((uid, state)) = spec.split_once('/') else {
        return fail(&"--first-page takes UID/STATE");
    };
    let t1 = Instant::now();
    if let Err(e) = inspector.open_state(uid, state) {
        return fail(&format!("{e:#}"));
    }
    println!("{}", frame(&mut inspector));
    println!(
        "first page of {uid}/{state}: {:.2} ms",
        t1.elapsed().as_secs_f64() * 1000.0
    );
    if !args.iter().any(|a| a == "--page-through") {
        return std::process::ExitCode::SUCCESS;
    }
    let t2 = Instant::now();
    let (mut pages, mut entries) = (1u64, 0u64);
    let mut anon_peak = memory_kb("RssAnon").unwrap_or(0);
    loop {
        if pages % 256 == 0 {
            anon_peak = anon_peak.max(memory_kb("RssAnon").unwrap_or(0));
        }
        let Some(e) = inspector.app.entries() else { break };
        if let Some(err) = &e.error {
            return fail(&format!("paging {uid}/{state}: {err}"));
        }
        let Some(p) = e.page.as_ref() else { break };
        entries += p.rows.len() as u64;
        if !p.more {
            break;
        }
        match inspector.act(Action::PageDown) {
            Ok(true) => pages += 1,
            Ok(false) => break,
            Err(e) => return fail(&format!("{e:#}")),
        }
    }
    println!("{}", frame(&mut inspector));
    let secs = t2.elapsed().as_secs_f64();
    anon_peak = anon_peak.max(memory_kb("RssAnon").unwrap_or(0));
    println!(
        "paged through {uid}/{state}: {pages} pages, {entries} entries in {secs:.2} s ({:.0} entries/s); peak memory (VmHWM) {}; anonymous memory, sampled peak: {anon_peak} kB",
        entries as f64 / secs.max(1e-9),
        memory_kb("VmHWM").map_or_else(|| "unknown".into(), |kb| format!("{kb} kB"))
    );
    std::process::ExitCode::SUCCESS
}

/// Warns when a source file of the workspace's crates or of the tool is newer than the
/// `statekit` binary the report runs: `cargo run --bin cli_report` does not rebuild it (and
/// `cargo build -p statekit-benches -p statekit --bin cli_report` builds no `statekit` either:
/// `--bin` filters every package), so figures would silently be an older build's.
fn warn_if_stale(statekit: &Path) {
    let Ok(built) = std::fs::metadata(statekit).and_then(|m| m.modified()) else {
        return;
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut dirs: Vec<PathBuf> = vec![root.join("tools/statekit/src")];
    if let Ok(crates) = std::fs::read_dir(root.join("crates")) {
        dirs.extend(crates.flatten().map(|e| e.path().join("src")));
    }
    let mut newer = Vec::new();
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            match e.metadata() {
                Ok(m) if m.is_dir() => dirs.push(path),
                Ok(m) if m.modified().is_ok_and(|t| t > built) => newer.push(path),
                _ => {}
            }
        }
    }
    if let Some(first) = newer.first() {
        eprintln!(
            "warning: {} source files (e.g. {}) changed after {} was built: run `cargo build --release -p statekit` for figures of this source",
            newer.len(),
            first.display(),
            statekit.display()
        );
    }
}

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--inspect") {
        return inspect_child(&args);
    }
    if let Some(i) = args.iter().position(|a| a == "--generate") {
        let mb: u64 = args.get(i + 1).and_then(|s| s.parse().ok()).expect("--generate MB");
        let dir = PathBuf::from(arg("--dir", "."));
        let every: usize = arg("--changed-every", "0").parse().expect("--changed-every");
        let p: u32 = arg("--parallelism", "4").parse().expect("--parallelism");
        println!("{}", make_savepoint_changed(&dir, mb, every, p).display());
        return std::process::ExitCode::SUCCESS;
    }
    let exe = std::env::current_exe().expect("exe");
    let statekit = exe.with_file_name("statekit");
    assert!(
        statekit.is_file(),
        "{} not found: run `cargo build --release -p statekit` first",
        statekit.display()
    );
    warn_if_stale(&statekit);
    let small_mb: u64 = arg("--small-mb", "10").parse().expect("--small-mb");
    let large_mb: u64 = arg("--large-mb", "1024").parse().expect("--large-mb");
    // The migration lines run on a savepoint of about 1 GB (2 GB of state, lz4).
    let migrate_mb: u64 = arg("--migrate-mb", "2048").parse().expect("--migrate-mb");
    let base = arg(
        "--dir",
        &std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "/var/tmp".into()),
    );
    let tmp = tempfile::tempdir_in(base).expect("tempdir");
    println!("statekit command report — release build; each figure beside its anchor from this run");
    let with_diff = args.iter().any(|a| a == "--diff" || a == "--diff-only");
    if args.iter().any(|a| a == "--diff-only") {
        diff_section(&statekit, tmp.path());
        return std::process::ExitCode::SUCCESS;
    }
    if args.iter().any(|a| a == "--migrate-only") {
        let input = generate(tmp.path(), migrate_mb);
        migrate_section(&statekit, tmp.path(), &input);
        return std::process::ExitCode::SUCCESS;
    }
    if args.iter().any(|a| a == "--s3-only") {
        let large = generate(tmp.path(), large_mb);
        s3_section(&statekit, tmp.path(), &large);
        return std::process::ExitCode::SUCCESS;
    }
    if args.iter().any(|a| a == "--tables-only") {
        let large = generate(tmp.path(), large_mb);
        tables_section(&statekit, tmp.path(), &large);
        return std::process::ExitCode::SUCCESS;
    }
    let small = generate(tmp.path(), small_mb);
    let large = generate(tmp.path(), large_mb);
    let (small_bytes, _) = dir_bytes(&small);
    let (large_bytes, large_files) = dir_bytes(&large);
    let raw_mb = |mb: u64| mb as f64;
    println!(
        "savepoints: {:.0} MB of state -> {:.0} MB on disk; {:.0} MB of state -> {:.0} MB on disk (lz4)",
        raw_mb(small_mb),
        small_bytes as f64 / 1e6,
        raw_mb(large_mb),
        large_bytes as f64 / 1e6
    );
    println!(
        "\n== statekit show (reads only _metadata): {:.0} MB vs {:.0} MB savepoint, best of 5 ==",
        small_bytes as f64 / 1e6,
        large_bytes as f64 / 1e6
    );
    let show = |p: &Path| {
        best(5, || {
            measure(
                Command::new(&statekit)
                    .arg("show")
                    .arg(p)
                    .stdout(std::process::Stdio::null()),
            )
        })
    };
    let (ts, ms) = show(&small);
    let (tl, ml) = show(&large);
    println!(
        "  small: {:>7.1} ms, peak RSS {:>6} KiB\n  large: {:>7.1} ms, peak RSS {:>6} KiB\n  ratio large/small: time {:.2}x, memory {:.2}x   (target: within 2x, under 100 ms)",
        ts.as_secs_f64() * 1e3,
        ms,
        tl.as_secs_f64() * 1e3,
        ml,
        tl.as_secs_f64() / ts.as_secs_f64(),
        ml as f64 / ms as f64
    );
    println!(
        "\n== statekit verify vs cat > /dev/null: {:.0} MB savepoint, page cache warm, best of 3 ==",
        large_bytes as f64 / 1e6
    );
    let (tv, mv) = best(3, || {
        measure(
            Command::new(&statekit)
                .arg("verify")
                .arg(&large)
                .stdout(std::process::Stdio::null()),
        )
    });
    let (tc, _) = best(3, || {
        measure(
            Command::new("cat")
                .args(&large_files)
                .stdout(std::fs::File::create("/dev/null").expect("devnull")),
        )
    });
    let v = large_bytes as f64 / tv.as_secs_f64() / 1e6;
    let c = large_bytes as f64 / tc.as_secs_f64() / 1e6;
    println!(
        "  statekit verify {v:>8.0} MB/s (peak RSS {mv} KiB)   cat > /dev/null {c:>8.0} MB/s   ratio {:.2}x",
        v / c
    );
    inspect_section(&exe, &small, &large, small_bytes, large_bytes);
    if migrate_mb == large_mb {
        migrate_section(&statekit, tmp.path(), &large);
    } else {
        let input = generate(tmp.path(), migrate_mb);
        migrate_section(&statekit, tmp.path(), &input);
        let _ = std::fs::remove_dir_all(&input);
    }
    tables_section(&statekit, tmp.path(), &large);
    if with_diff {
        diff_section(&statekit, tmp.path());
    }
    std::process::ExitCode::SUCCESS
}

/// `statekit convert` and `rewrite --link` of `input` beside `cp -r` + `sync` of it: for each
/// line, 3 rounds of the anchor then the command, interleaved (a disk whose speed drifts
/// weighs on both alike), best of each (outputs deleted between runs; page cache warm).
fn migrate_section(statekit: &Path, tmp: &Path, input: &Path) {
    let (bytes, _) = dir_bytes(input);
    let mb = bytes as f64 / 1e6;
    println!("\n== statekit convert / rewrite vs cp -r + sync: {mb:.0} MB savepoint, best of 3, each line beside its own interleaved anchor ==");
    let out = tmp.join("migrated");
    let clean = || {
        let _ = std::fs::remove_dir_all(&out);
    };
    // The anchor copies the line's own input (the native one for native -> canonical).
    let cp_sync = |from: &Path| {
        clean();
        let r = measure(Command::new("sh").arg("-c").arg(format!(
            "cp -r '{}' '{}' && sync",
            from.display(),
            out.display()
        )));
        clean();
        r
    };
    let uid = statekit_checkpoint::SnapshotReader::open(input)
        .ok()
        .and_then(|r| r.metadata().operators.first().map(|o| o.uid.clone()))
        .unwrap_or_default();
    // The native input of the native -> canonical run, made once (not timed).
    let native_in = tmp.join("native-input");
    let made = Command::new(statekit)
        .arg("convert")
        .arg(input)
        .arg(&native_in)
        .args(["--format", "native", "--force"])
        .stdout(std::process::Stdio::null())
        .status()
        .expect("spawn statekit");
    assert!(made.success(), "making the native input failed");
    let runs: [(&str, &Path, Vec<String>); 8] = [
        ("convert (lz4 -> lz4)", input, vec!["convert".into()]),
        (
            "convert (lz4 -> zstd)",
            input,
            vec!["convert".into(), "--compression".into(), "zstd".into()],
        ),
        (
            "convert (lz4 -> zstd level 3)",
            input,
            vec![
                "convert".into(),
                "--compression".into(),
                "zstd".into(),
                "--compression-level".into(),
                "3".into(),
            ],
        ),
        (
            "convert (lz4 -> zstd level -1)",
            input,
            vec![
                "convert".into(),
                "--compression".into(),
                "zstd".into(),
                "--compression-level=-1".into(),
            ],
        ),
        (
            "convert canonical -> native",
            input,
            vec!["convert".into(), "--format".into(), "native".into()],
        ),
        ("convert native -> canonical", &native_in, vec!["convert".into()]),
        (
            "rewrite --max-parallelism (x2)",
            input,
            vec![
                "rewrite".into(),
                "--max-parallelism".into(),
                format!("{uid}=256"),
                "--memory".into(),
                "256MiB".into(),
            ],
        ),
        (
            "rewrite --rename-uid --link",
            input,
            vec![
                "rewrite".into(),
                "--rename-uid".into(),
                format!("{uid}={uid}-renamed"),
                "--link".into(),
            ],
        ),
    ];
    let mut plain: Option<Duration> = None;
    let mut fastest_cp = Duration::MAX;
    for (what, from, args) in runs {
        let mut anchor_best = Duration::MAX;
        let mut out_bytes = 0;
        let (t, rss) = best(3, || {
            anchor_best = anchor_best.min(cp_sync(from).0);
            clean();
            let (cmd, rest) = args.split_first().expect("a command");
            let r = measure(
                Command::new(statekit)
                    .arg(cmd)
                    .arg(from)
                    .arg(&out)
                    .args(rest)
                    .stdout(std::process::Stdio::null()),
            );
            if what.contains("zstd") {
                out_bytes = dir_bytes(&out).0;
            }
            clean();
            r
        });
        // Rates in MB of the line's input (the ratio is the anchor's time over the line's).
        let line_mb = if from == input {
            mb
        } else {
            dir_bytes(from).0 as f64 / 1e6
        };
        if from == input {
            fastest_cp = fastest_cp.min(anchor_best);
        }
        let anchor = line_mb / anchor_best.as_secs_f64();
        let rate = line_mb / t.as_secs_f64();
        if what == "convert native -> canonical" {
            let _ = std::fs::remove_dir_all(&native_in);
        }
        if what == "convert (lz4 -> lz4)" {
            plain = Some(t);
        }
        // The zstd lines also give the output's size; two of them are only for comparison.
        let output = if what.contains("zstd") {
            format!("; output {:.0} MB", out_bytes as f64 / 1e6)
        } else {
            String::new()
        };
        let comparison = if what.contains("level 3") {
            Some("a slower level")
        } else if what.contains("level -1") {
            Some("zstd's fast mode")
        } else {
            None
        };
        let target = if what.contains("--link") {
            format!(
                "(target: <= 50 ms) {}",
                if t.as_millis() <= 50 { "ok" } else { "ABOVE TARGET" }
            )
        } else if what.contains("--max-parallelism") {
            let vs = plain.map_or(f64::NAN, |p| t.as_secs_f64() / p.as_secs_f64());
            let ok = vs <= 3.0 && rss < 400 * 1024;
            format!(
                "{vs:.2}x the time of the plain convert (target: <= 3x, peak RSS < 400 MB) {}",
                if ok { "ok" } else { "ABOVE TARGET" }
            )
        } else if let Some(kind) = comparison {
            format!("(for comparison: {kind}, no target{output})")
        } else {
            let ratio = rate / anchor;
            format!(
                "(target >= 0.50x) {}{output}",
                if ratio >= 0.5 { "ok" } else { "BELOW TARGET" }
            )
        };
        println!(
            "  {what:<30} {rate:>8.0} MB/s ({:.3} s, peak RSS {rss} KiB)   {:.2}x of cp -r + sync ({anchor:.0} MB/s, {:.2} s)   {target}",
            t.as_secs_f64(),
            rate / anchor,
            anchor_best.as_secs_f64()
        );
    }
    zstd_floor(statekit, input, &out, mb, mb / fastest_cp.as_secs_f64());
}

/// Plain zstd level 1 on the same records, for the `convert --compression zstd` line: the
/// savepoint's records written uncompressed (`convert --compression none`, not timed), then
/// every 64 KiB block of them compressed by a zstd level-1 context as zstd sets it up (its
/// Huffman coding of literals tried on every block, which `convert` skips while it does not
/// pay) on all cores and nothing else (no reading, decoding or writing), best of 3, beside
/// the fastest `cp -r` + `sync` of the convert lines (`cp_rate`, MB/s).
fn zstd_floor(statekit: &Path, input: &Path, out: &Path, mb: f64, cp_rate: f64) {
    let _ = std::fs::remove_dir_all(out);
    let made = Command::new(statekit)
        .arg("convert")
        .arg(input)
        .arg(out)
        .args(["--compression", "none"])
        .stdout(std::process::Stdio::null())
        .status()
        .expect("spawn statekit");
    assert!(made.success(), "convert --compression none failed");
    let (_, files) = dir_bytes(out);
    let mut raw = Vec::new();
    for f in &files {
        raw.extend_from_slice(&std::fs::read(f).expect("read the uncompressed savepoint"));
    }
    let _ = std::fs::remove_dir_all(out);
    let blocks: Vec<&[u8]> = raw.chunks(64 * 1024).collect();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut best_time = Duration::MAX;
    for _ in 0..3 {
        let next = std::sync::atomic::AtomicUsize::new(0);
        let start = Instant::now();
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    let mut z = zstd::bulk::Compressor::new(1).expect("zstd context");
                    let mut buf = Vec::with_capacity(zstd::zstd_safe::compress_bound(64 * 1024));
                    while let Some(b) = blocks.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)) {
                        buf.clear();
                        z.compress_to_buffer(b, &mut buf).expect("zstd");
                    }
                });
            }
        });
        best_time = best_time.min(start.elapsed());
    }
    println!(
        "  plain zstd level 1 alone, same records {:>8.0} MB/s ({:.3} s on {threads} threads, {:.0} MB uncompressed)   {:.2}x of the fastest cp -r + sync above: the codec alone, coding literals on every block",
        mb / best_time.as_secs_f64(),
        best_time.as_secs_f64(),
        raw.len() as f64 / 1e6,
        mb / best_time.as_secs_f64() / cp_rate
    );
}

/// The figure an [`inspect_child`] run printed after `prefix`.
fn printed(out: &str, prefix: &str) -> String {
    out.lines()
        .rev()
        .find_map(|l| l.strip_prefix(prefix))
        .unwrap_or("?")
        .trim()
        .to_string()
}

/// `statekit inspect`: start to first frame on the small and the large savepoint (the whole
/// process: start, `_metadata`, one frame rendered to an in-memory 80x24 terminal, exit), the
/// first page of entries, and paging through every entry of the large one (bounded memory).
/// Each run is an [`inspect_child`] of this report (`me`).
fn inspect_section(me: &Path, small: &Path, large: &Path, small_bytes: u64, large_bytes: u64) {
    println!(
        "\n== statekit inspect: start to first frame (80x24), {:.0} MB vs {:.0} MB savepoint, best of 5 ==",
        small_bytes as f64 / 1e6,
        large_bytes as f64 / 1e6
    );
    let frame = |p: &Path, page: bool| {
        best(5, || {
            let mut cmd = Command::new(me);
            cmd.arg("--inspect").arg(p).args(["--first-frame", "80x24"]);
            if page {
                cmd.args(["--first-page", "counter/count"]);
            }
            measure(cmd.stdout(std::process::Stdio::null()))
        })
    };
    let (ts, ms) = frame(small, false);
    let (tl, ml) = frame(large, false);
    println!(
        "  small: {:>7.1} ms, peak RSS {:>6} KiB\n  large: {:>7.1} ms, peak RSS {:>6} KiB\n  ratio large/small {:.2}x   (target: under 100 ms, within 2x of the small one)",
        ts.as_secs_f64() * 1e3,
        ms,
        tl.as_secs_f64() * 1e3,
        ml,
        tl.as_secs_f64() / ts.as_secs_f64()
    );
    let (tps, _) = frame(small, true);
    let (tpl, _) = frame(large, true);
    println!(
        "  start to first frame + first page of counter/count: small {:.1} ms, large {:.1} ms",
        tps.as_secs_f64() * 1e3,
        tpl.as_secs_f64() * 1e3
    );
    let t = Instant::now();
    let out = Command::new(me)
        .arg("--inspect")
        .arg(large)
        .args([
            "--first-frame",
            "80x24",
            "--first-page",
            "counter/count",
            "--page-through",
        ])
        .output()
        .expect("spawn the inspector");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = String::from_utf8_lossy(&out.stdout);
    println!(
        "  paging (PgDn) through every entry of the large savepoint's counter/count, {:.1} s in all: {}",
        t.elapsed().as_secs_f64(),
        printed(&out, "paged through counter/count:")
    );
    println!(
        "  (the data files are memory-mapped: pages read count in VmHWM; anonymous memory is what the inspector holds)"
    );
}

/// `statekit diff` of two savepoints differing in 1% of their keys (the second at another
/// parallelism, so subtask files do not line up), beside a raw read and a full decode of both.
fn diff_section(statekit: &Path, tmp: &Path) {
    let mb: u64 = arg("--diff-mb", "1024").parse().expect("--diff-mb");
    let a = generate_changed(tmp, mb, 0, 4);
    let b = generate_changed(tmp, mb, 100, 3);
    let (bytes_a, files_a) = dir_bytes(&a);
    let (bytes_b, files_b) = dir_bytes(&b);
    let total = (bytes_a + bytes_b) as f64;
    println!(
        "\n== statekit diff: two savepoints of {mb} MB of state ({:.0} + {:.0} MB on disk, parallelism 4 vs 3), \
         1% of keys modified, page cache warm, best of 3 ==",
        bytes_a as f64 / 1e6,
        bytes_b as f64 / 1e6
    );
    let (td, md) = best(3, || {
        measure_exit(
            Command::new(statekit)
                .arg("diff")
                .args(["--keys-only"])
                .arg(&a)
                .arg(&b)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null()),
            1,
        )
    });
    let (tv, mv) = best(3, || {
        measure(
            Command::new(statekit)
                .arg("diff")
                .arg(&a)
                .arg(&a)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null()),
        )
    });
    let (tvals, _) = best(3, || {
        measure_exit(
            Command::new(statekit)
                .arg("diff")
                .arg(&a)
                .arg(&b)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null()),
            1,
        )
    });
    let (tver, mver) = best(3, || {
        let (t1, m1) = measure(
            Command::new(statekit)
                .arg("verify")
                .arg(&a)
                .stdout(std::process::Stdio::null()),
        );
        let (t2, m2) = measure(
            Command::new(statekit)
                .arg("verify")
                .arg(&b)
                .stdout(std::process::Stdio::null()),
        );
        (t1 + t2, m1.max(m2))
    });
    let (tc, _) = best(3, || {
        measure(
            Command::new("cat")
                .args(&files_a)
                .args(&files_b)
                .stdout(std::fs::File::create("/dev/null").expect("devnull")),
        )
    });
    let rate = |t: Duration| total / t.as_secs_f64() / 1e6;
    let (d, dv, v, c) = (rate(td), rate(tvals), rate(tver), rate(tc));
    let same = 2.0 * bytes_a as f64 / tv.as_secs_f64() / 1e6;
    let changed = (mb * 1_000_000 / 512).div_ceil(100);
    println!(
        "  statekit diff --keys-only {d:>8.0} MB/s ({:.2} s, peak RSS {md} KiB; ~{changed} keys differ)\n  \
         statekit diff (values)    {dv:>8.0} MB/s ({:.2} s)\n  \
         statekit diff a a         {same:>8.0} MB/s (a with itself, peak RSS {mv} KiB)\n  \
         statekit verify a + b     {v:>8.0} MB/s ({:.2} s, peak RSS {mver} KiB)\n  \
         cat a b > /dev/null       {c:>8.0} MB/s ({:.2} s)\n  \
         ratio diff/verify {:.2}x, diff/cat {:.2}x",
        td.as_secs_f64(),
        tvals.as_secs_f64(),
        tver.as_secs_f64(),
        tc.as_secs_f64(),
        d / v,
        d / c
    );
}

/// `statekit export` (Parquet zstd, Arrow IPC) of the large savepoint's state beside `statekit
/// dump --json > /dev/null` of it and a bare `parquet` writer of the same rows already in
/// memory (zstd level 1, the same row groups, written and fsynced: the export's target is
/// at least 0.7x of it); `statekit query` of count(*) and of a point lookup by key (target:
/// the lookup reads under 1% of the snapshot's bytes, counted by a storage that counts what
/// readers read, and answers in under 50 ms). Best of 3 each.
fn tables_section(statekit: &Path, tmp: &Path, input: &Path) {
    use statekit_core::storage::{Blob, HookedStorage, StorageError, StorageHooks};
    use std::sync::atomic::{AtomicU64, Ordering};
    let (bytes, _) = dir_bytes(input);
    let mb = bytes as f64 / 1e6;
    println!(
        "\n== statekit export / query vs dump --json and a bare parquet writer: {mb:.0} MB savepoint, best of 3 =="
    );
    let out = tmp.join("tables");
    let clean = || {
        let _ = std::fs::remove_dir_all(&out);
    };
    let cli = |args: &[&str]| {
        measure(
            Command::new(statekit)
                .args(args)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null()),
        )
    };
    let inp = input.to_str().expect("utf-8 path");
    let outp = out.to_str().expect("utf-8 path");
    // Once: it prints every value as hex JSON (about a minute).
    let (tdump, _) = best(1, || {
        cli(&["dump", inp, "--uid", "counter", "--state", "count", "--json"])
    });

    // The CLI runs first: a child's peak RSS as wait4 reports it starts from this process's
    // at fork time, and the anchor below holds every row in memory.
    let (tpq, rss_pq) = best(3, || {
        clean();
        let r = cli(&["export", inp, outp, "--threads", "1"]);
        clean();
        r
    });
    let (tpq_par, _) = best(3, || {
        clean();
        let r = cli(&["export", inp, outp]);
        clean();
        r
    });
    let (tipc, _) = best(3, || {
        clean();
        let r = cli(&["export", inp, outp, "--format", "arrow"]);
        clean();
        r
    });
    // The anchor: the same rows, already in memory as Arrow batches, written by parquet's
    // ArrowWriter with the export's settings, fsynced.
    let reader = statekit_checkpoint::SnapshotReader::open(input).expect("open");
    let mut batches = Vec::new();
    let mut rows = 0u64;
    for v in statekit_snapshot::keyed_views(&reader, "counter", statekit_core::KeyGroupRange::all(128)).expect("views")
    {
        let range = v.key_group_range();
        rows += statekit_table::visit_state_batches(v.as_ref(), "count", range, 64 << 10, |b| {
            batches.push(b);
            Ok(std::ops::ControlFlow::Continue(()))
        })
        .expect("batches");
    }
    let schema = batches.first().map(|b| b.schema()).expect("rows");
    let (tbare, _) = best(3, || {
        let path = tmp.join("bare.parquet");
        let t = Instant::now();
        let props = parquet::file::properties::WriterProperties::builder()
            .set_compression(parquet::basic::Compression::ZSTD(
                parquet::basic::ZstdLevel::try_new(1).expect("level"),
            ))
            .set_max_row_group_size(64 << 10)
            .build();
        let f = std::fs::File::create(&path).expect("create");
        let mut w = parquet::arrow::ArrowWriter::try_new(f, schema.clone(), Some(props)).expect("writer");
        for b in &batches {
            w.write(b).expect("write");
        }
        w.into_inner().expect("finish").sync_all().expect("sync");
        let d = t.elapsed();
        let _ = std::fs::remove_file(&path);
        (d, 0)
    });
    drop(batches);
    let rate = |t: Duration| rows as f64 / t.as_secs_f64() / 1e6;
    println!(
        "  anchor: bare parquet writer (rows in memory, zstd 1)   {:>6.2} M rows/s ({:.2} s)",
        rate(tbare),
        tbare.as_secs_f64()
    );
    println!(
        "  anchor: statekit dump --json > /dev/null              {:>6.2} M rows/s ({:.2} s)",
        rate(tdump),
        tdump.as_secs_f64()
    );
    let verdict = |t: Duration| {
        let x = tbare.as_secs_f64() / t.as_secs_f64();
        format!(
            "{x:.2}x of the bare writer (target >= 0.70x) {}",
            if x >= 0.7 { "ok" } else { "BELOW TARGET" }
        )
    };
    println!(
        "  export --format parquet, 1 thread          {:>6.2} M rows/s ({:.2} s, peak RSS {rss_pq} KiB)   {}   {:.1}x dump --json",
        rate(tpq),
        tpq.as_secs_f64(),
        verdict(tpq),
        tdump.as_secs_f64() / tpq.as_secs_f64()
    );
    println!(
        "  export --format parquet, all cores         {:>6.2} M rows/s ({:.2} s)   {}",
        rate(tpq_par),
        tpq_par.as_secs_f64(),
        verdict(tpq_par)
    );
    println!(
        "  export --format arrow (IPC, zstd)          {:>6.2} M rows/s ({:.2} s)   {:.2}x of the bare parquet writer",
        rate(tipc),
        tipc.as_secs_f64(),
        tbare.as_secs_f64() / tipc.as_secs_f64()
    );

    // Query: a key present in the snapshot (the first of key group 0's).
    let mut key: Option<Vec<u8>> = None;
    for v in statekit_snapshot::keyed_views(&reader, "counter", statekit_core::KeyGroupRange::new(0, 0)).expect("views")
    {
        let _ = v.visit_key_group(0, &mut |e| {
            key = Some(e.key.to_vec());
            Ok(std::ops::ControlFlow::Break(()))
        });
    }
    let key = key.expect("a key in key group 0");
    let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    let count_sql = r#"SELECT count(*) FROM "counter"."count""#.to_string();
    let point_sql = format!(r#"SELECT value FROM "counter"."count" WHERE key = X'{hex}'"#);
    let (tcount, _) = best(3, || cli(&["query", inp, &count_sql]));
    let (tpoint, _) = best(3, || cli(&["query", inp, &point_sql]));
    // Bytes read, in process, through a storage counting what the readers read.
    #[derive(Debug, Default)]
    struct Counting(Arc<AtomicU64>);
    struct CountingBlob(Arc<dyn Blob>, Arc<AtomicU64>);
    impl Blob for CountingBlob {
        fn bytes(&self) -> &[u8] {
            self.0.bytes()
        }
        fn release(&self, offset: usize, len: usize) {
            self.1.fetch_add(len as u64, Ordering::Relaxed);
            self.0.release(offset, len);
        }
    }
    impl StorageHooks for Counting {
        fn open(&self, inner: &dyn Storage, path: &str) -> Result<Arc<dyn Blob>, StorageError> {
            Ok(Arc::new(CountingBlob(inner.open(path)?, self.0.clone())))
        }
    }
    let counter = Arc::new(AtomicU64::new(0));
    let parent = input.parent().expect("parent");
    let name = input.file_name().expect("name").to_string_lossy().into_owned();
    let storage: Arc<dyn Storage> = Arc::new(HookedStorage::new(
        Arc::new(LocalStorage::new(parent)),
        Counting(counter.clone()),
    ));
    let q = statekit_query::SnapshotQuery::new(statekit_snapshot::Snapshot::from_statekit_reader(
        statekit_checkpoint::SnapshotReader::open_in(storage, &name, None).expect("open"),
    ))
    .expect("session");
    q.sql(&count_sql).expect("count");
    let read_count = counter.swap(0, Ordering::Relaxed);
    let t = Instant::now();
    let found = q.sql(&point_sql).expect("lookup");
    let tpoint_in = t.elapsed();
    let read_point = counter.swap(0, Ordering::Relaxed);
    assert_eq!(found.iter().map(|b| b.num_rows()).sum::<usize>(), 1, "the key is found");
    let share = read_point as f64 / bytes as f64 * 100.0;
    println!(
        "  query count(*)                             {:>7.1} ms (statekit query, whole process); reads {:.0} MB ({:.0}% of the snapshot)",
        tcount.as_secs_f64() * 1e3,
        read_count as f64 / 1e6,
        read_count as f64 / bytes as f64 * 100.0
    );
    println!(
        "  query point lookup by key                  {:>7.1} ms (whole process; {:.1} ms in a warm session); reads {:.2} MB = {share:.3}% of the snapshot (target: < 1%, < 50 ms) {}",
        tpoint.as_secs_f64() * 1e3,
        tpoint_in.as_secs_f64() * 1e3,
        read_point as f64 / 1e6,
        if share < 1.0 && tpoint.as_millis() < 50 { "ok" } else { "ABOVE TARGET" }
    );
}

/// `show` and `dump --key` of the large savepoint on S3 (moto on loopback), with the bytes and
/// requests the store served, beside the same commands on the local copy.
fn s3_section(statekit: &Path, tmp: &Path, input: &Path) {
    let Some(server) = moto::Moto::start() else {
        println!("\n== S3: skipped (STATEKIT_MOTO is not set) ==");
        return;
    };
    let (bytes, files) = dir_bytes(input);
    println!(
        "\n== statekit on S3 (moto on 127.0.0.1): {:.0} MB savepoint ==",
        bytes as f64 / 1e6
    );
    server.create_bucket("bench");
    let t = Instant::now();
    server.upload_files(input, files, "bench", "sp");
    println!("  (uploaded in {:.1} s)", t.elapsed().as_secs_f64());
    let url = "s3://bench/sp";
    let local = input.to_string_lossy().to_string();
    let first = Command::new(statekit)
        .args([
            "dump", &local, "--uid", "counter", "--state", "count", "--limit", "1", "--json",
        ])
        .output()
        .expect("dump");
    let text = String::from_utf8_lossy(&first.stdout);
    let key = text
        .split("\"key\":\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("a key")
        .to_string();
    let run = |args: &[&str], stats: &Path| -> (Duration, String) {
        let _ = std::fs::remove_file(stats);
        let t = Instant::now();
        let o = Command::new(statekit)
            .args(args)
            .envs(server.env())
            .env("STATEKIT_OBJECT_STORE_STATS", stats)
            .output()
            .expect("statekit");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        (t.elapsed(), std::fs::read_to_string(stats).unwrap_or_default())
    };
    let field = |json: &str, name: &str| -> u64 {
        json.split(&format!("\"{name}\":"))
            .nth(1)
            .and_then(|r| r.split([',', '}']).next())
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    let stats = tmp.join("s3-stats.jsonl");
    let (t_local, _) = run(&["show", &local], &stats);
    let (t_s3, st) = run(&["show", url], &stats);
    println!(
        "  show           S3 {:.3} s, {} GET, {} bytes   local {:.3} s",
        t_s3.as_secs_f64(),
        field(&st, "gets"),
        field(&st, "get_bytes"),
        t_local.as_secs_f64()
    );
    let dump = |at: &str| {
        vec![
            "dump".to_string(),
            at.to_string(),
            "--uid".into(),
            "counter".into(),
            "--state".into(),
            "count".into(),
            "--key".into(),
            key.clone(),
        ]
    };
    let args_local = dump(&local);
    let args_s3 = dump(url);
    let args_local: Vec<&str> = args_local.iter().map(String::as_str).collect();
    let args_s3: Vec<&str> = args_s3.iter().map(String::as_str).collect();
    let (t_local, _) = run(&args_local, &stats);
    let (t_s3, st) = run(&args_s3, &stats);
    let read = field(&st, "get_bytes");
    let share = 100.0 * read as f64 / bytes as f64;
    println!(
        "  dump --key     S3 {:.3} s, {} GETs, {read} of {bytes} bytes = {share:.2}% (target < 1%) {}   local {:.3} s",
        t_s3.as_secs_f64(),
        field(&st, "gets"),
        if share < 1.0 { "ok" } else { "ABOVE TARGET" },
        t_local.as_secs_f64()
    );
}
