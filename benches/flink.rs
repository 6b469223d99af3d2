//! `report --flink`: real Apache Flink beside statekit, in the same run, on the same work.
//!
//! Flink's side is the oracle in `../shared/flink-oracle/` (its `StateBench`), run from there
//! with Java 17 and the jars of the PyPI package `apache-flink-libraries`, which
//! `scripts/flink-lib.sh` fetches once into a cache outside the clone. statekit's side repeats
//! exactly StateBench's workload on its heap and RocksDB backends: `Long` keys serialized as
//! Flink's `LongSerializer` does (8 bytes, big-endian), `Long` values, keys `0..N` visited in the
//! permutation `java.util.Random(42)` gives with a Fisher–Yates shuffle, a warm-up on separate
//! states, then the six cases, each the median of three passes over all keys
//! (`value_insert_get_update` is one pass). Only ratios of figures from this run are printed.

use statekit_core::{KeyedStateBackend, StateDescriptor, StateFunctions, StateHandle, TypeSchema};
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// StateBench's cases, in its order, with what each does per key.
pub const CASES: &[(&str, &str)] = &[
    ("value_insert_get_update", "value() miss + update(): first touch"),
    ("value_get_update", "value() + update(v+1)"),
    ("value_get", "value()"),
    ("map_put", "put(r, i): pass r adds user key r"),
    ("map_get", "get(r) of an existing user key"),
    ("map_get_put", "get(0) + put(0, v+1)"),
];

/// The repository's root (the parent of `benches/`).
fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// The oracle's folder: `$STATEKIT_FLINK_ORACLE`, else `../shared/flink-oracle` beside the repository.
pub fn oracle_dir() -> PathBuf {
    match std::env::var_os("STATEKIT_FLINK_ORACLE") {
        Some(d) => PathBuf::from(d),
        None => repo_root().join("../shared/flink-oracle"),
    }
}

/// Flink's `lib/` folder: `$FLINK_LIB`, else what `scripts/flink-lib.sh` prints (fetching the
/// jars once).
pub fn flink_lib() -> Result<PathBuf, String> {
    if let Some(d) = std::env::var_os("FLINK_LIB") {
        return Ok(PathBuf::from(d));
    }
    let script = repo_root().join("scripts/flink-lib.sh");
    let out = Command::new("bash")
        .arg(&script)
        .output()
        .map_err(|e| format!("{}: {e}", script.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} failed: {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// What one run of Flink's StateBench printed.
pub struct FlinkStateBench {
    /// Its header line (Flink and Java versions, keys, passes, memory).
    pub header: String,
    /// Flink's version, from the header.
    pub version: String,
    /// `(backend, case)` → operations per second.
    pub rates: BTreeMap<(String, String), f64>,
}

/// Runs the oracle's `run.sh` with `args` (from its folder's script, with Flink's jars from
/// [`flink_lib`] and the build in a temporary directory) and `env`; its standard output, or
/// an error with the last lines of both outputs. `what` names the program in errors.
pub fn run_oracle(what: &str, args: &[String], env: &[(&str, &OsStr)]) -> Result<String, String> {
    let lib = flink_lib()?;
    let script = oracle_dir().join("run.sh");
    let out = Command::new("bash")
        .arg(&script)
        .args(args)
        .env("FLINK_LIB", &lib)
        .env("BUILD_DIR", std::env::temp_dir().join("statekit-flink-oracle-build"))
        .envs(env.iter().map(|(k, v)| (*k, *v)))
        .output()
        .map_err(|e| format!("{}: {e}", script.display()))?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    if !out.status.success() {
        let tail = |t: &str| t.lines().rev().take(5).collect::<Vec<_>>().join(" | ");
        return Err(format!(
            "Flink's {what} failed ({}): {} | {}",
            out.status,
            tail(&text),
            tail(&String::from_utf8_lossy(&out.stderr))
        ));
    }
    Ok(text)
}

/// Runs the oracle's StateBench for `keys` keys on `backends` (`hashmap`, `rocksdb`).
pub fn run_statebench(keys: usize, backends: &[&str]) -> Result<FlinkStateBench, String> {
    let mut args = vec!["bench".to_string(), keys.to_string()];
    args.extend(backends.iter().map(|b| b.to_string()));
    parse_statebench(&run_oracle("StateBench", &args, &[])?)
}

/// Parses StateBench's output: `# flink V, …` then `<backend> <case> <ops_per_sec>` lines.
pub fn parse_statebench(text: &str) -> Result<FlinkStateBench, String> {
    let header = text
        .lines()
        .find(|l| l.starts_with("# flink "))
        .ok_or_else(|| format!("StateBench printed no header: {text}"))?
        .trim_start_matches("# ")
        .to_string();
    let version = header
        .trim_start_matches("flink ")
        .split(',')
        .next()
        .unwrap_or("?")
        .to_string();
    let mut rates = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if let [backend, case, rate] = f[..] {
            if let Ok(r) = rate.parse::<f64>() {
                rates.insert((backend.to_string(), case.to_string()), r);
            }
        }
        if line.contains("FAILED") {
            return Err(format!("StateBench: {line}"));
        }
    }
    if rates.is_empty() {
        return Err(format!("StateBench printed no results: {text}"));
    }
    Ok(FlinkStateBench { header, version, rates })
}

/// `java.util.Random`: the 48-bit linear congruential generator its documentation specifies.
pub struct JavaRandom(u64);

impl JavaRandom {
    const MULT: u64 = 0x5_DEEC_E66D;
    const MASK: u64 = (1 << 48) - 1;

    /// `new Random(seed)`.
    pub fn new(seed: i64) -> Self {
        JavaRandom((seed as u64 ^ Self::MULT) & Self::MASK)
    }

    fn next(&mut self, bits: u32) -> i32 {
        self.0 = (self.0.wrapping_mul(Self::MULT).wrapping_add(0xB)) & Self::MASK;
        (self.0 >> (48 - bits)) as i64 as i32
    }

    /// `nextInt(bound)`, `bound > 0`.
    pub fn next_int(&mut self, bound: i32) -> i32 {
        if bound & bound.wrapping_neg() == bound {
            return ((bound as i64 * self.next(31) as i64) >> 31) as i32;
        }
        loop {
            let bits = self.next(31);
            let val = bits % bound;
            if bits.wrapping_sub(val).wrapping_add(bound - 1) >= 0 {
                return val;
            }
        }
    }
}

/// StateBench's key order: `0..n` shuffled by Fisher–Yates with `java.util.Random(42)`.
pub fn java_permutation(n: usize) -> Vec<i64> {
    let mut perm: Vec<i64> = (0..n as i64).collect();
    let mut rnd = JavaRandom::new(42);
    for i in (1..n).rev() {
        let j = rnd.next_int(i as i32 + 1) as usize;
        perm.swap(i, j);
    }
    perm
}

fn long_state<B: KeyedStateBackend + ?Sized>(b: &mut B, name: &str) -> StateHandle {
    b.register(
        StateDescriptor::value(name, TypeSchema::I64, TypeSchema::I64),
        StateFunctions::None,
    )
    .expect("register value state")
}

fn long_map_state<B: KeyedStateBackend + ?Sized>(b: &mut B, name: &str) -> StateHandle {
    b.register(
        StateDescriptor::map(name, TypeSchema::I64, TypeSchema::I64, TypeSchema::I64),
        StateFunctions::None,
    )
    .expect("register map state")
}

fn long_of(buf: &[u8]) -> i64 {
    buf.get(..8)
        .and_then(|b| b.try_into().ok())
        .map(i64::from_be_bytes)
        .unwrap_or(0)
}

fn rate(n: usize, t: Instant) -> f64 {
    n as f64 / t.elapsed().as_secs_f64()
}

/// The median of `xs` as StateBench takes it: the middle of the sorted values (the upper
/// middle for an even count; 0 for none).
pub fn median(xs: &[f64]) -> f64 {
    let mut sorted = xs.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted.get(sorted.len() / 2).copied().unwrap_or(0.0)
}

/// The rounds' ratios as the report prints them beside their median: `a / b / c`.
pub fn each_round(ratios: &[f64]) -> String {
    ratios.iter().map(|r| format!("{r:.2}")).collect::<Vec<_>>().join(" / ")
}

/// One case's result: the median pass (what StateBench reports) and every pass in order.
#[derive(Clone, Debug)]
pub struct CaseRate {
    /// The case's name (one of [`CASES`]).
    pub case: &'static str,
    /// Operations per second of the median pass.
    pub median: f64,
    /// Operations per second of each pass, in the order they ran.
    pub passes: Vec<f64>,
}

impl CaseRate {
    /// A case's rates from its passes, in the order they ran; the median is StateBench's
    /// (the middle of the sorted passes).
    pub fn from_passes(case: &'static str, passes: Vec<f64>) -> CaseRate {
        CaseRate {
            case,
            median: median(&passes),
            passes,
        }
    }

    /// Operations per second over all passes together (all operations over all their time):
    /// unlike the median, it counts a slow pass (one that pays a write-back, say) in full.
    pub fn overall(&self) -> f64 {
        let secs: f64 = self.passes.iter().map(|r| 1.0 / r).sum();
        self.passes.len() as f64 / secs
    }
}

/// Runs `pass` `passes` times (at least once) over `n` operations each and times every pass.
fn timed_passes(case: &'static str, passes: usize, n: usize, mut pass: impl FnMut(i64)) -> CaseRate {
    let rates: Vec<f64> = (0..passes.max(1))
        .map(|r| {
            let t = Instant::now();
            pass(r as i64);
            rate(n, t)
        })
        .collect();
    CaseRate::from_passes(case, rates)
}

/// StateBench's workload on a statekit backend: the same keys, order, warm-up, cases and
/// passes. Returns each case's passes, in [`CASES`]' order.
pub fn statebench_ours<B: KeyedStateBackend + ?Sized>(b: &mut B, keys: usize, passes: usize) -> Vec<CaseRate> {
    statebench_on(b, &java_permutation(keys), passes)
}

/// The same workload on `threads` subtasks at once (parallelism `threads`, max parallelism
/// 128), each on a thread of its own with a heap backend of its own and the keys of its key
/// groups (in StateBench's order): case → total operations per second over all threads. A
/// case's rate is all keys over the slowest thread's time, so stragglers count.
pub fn statebench_threads(threads: u32, keys: usize, passes: usize) -> Vec<(&'static str, f64)> {
    let perm = java_permutation(keys);
    let mut parts: Vec<Vec<i64>> = vec![Vec::new(); threads as usize];
    for &k in &perm {
        let kg = statekit_core::key_group_for_key(&k.to_be_bytes(), 128);
        let owner = statekit_core::keygroup::subtask_for_key_group(128, threads, kg) as usize;
        if let Some(part) = parts.get_mut(owner) {
            part.push(k);
        }
    }
    let results: Vec<Vec<(&'static str, f64)>> = std::thread::scope(|s| {
        let handles: Vec<_> = parts
            .iter()
            .enumerate()
            .map(|(i, part)| {
                s.spawn(move || {
                    let config = statekit_core::BackendConfig::for_subtask(128, threads, i as u32).expect("config");
                    let mut b = statekit_hashmap::HashMapBackend::new(config).expect("backend");
                    // Each case's time on this thread.
                    statebench_on(&mut b, part, passes)
                        .into_iter()
                        .map(|c| (c.case, part.len() as f64 / c.median))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("bench thread")).collect()
    });
    CASES
        .iter()
        .map(|&(case, _)| {
            let slowest = results
                .iter()
                .filter_map(|r| r.iter().find(|(c, _)| *c == case).map(|&(_, secs)| secs))
                .fold(0.0, f64::max);
            (case, keys as f64 / slowest)
        })
        .collect()
}

/// StateBench's cases over the keys of `perm`, in that order.
fn statebench_on<B: KeyedStateBackend + ?Sized>(b: &mut B, perm: &[i64], passes: usize) -> Vec<CaseRate> {
    let keys = perm.len();
    let mut buf = Vec::with_capacity(8);
    let mut sink = 0i64;
    // Warm-up on states of their own.
    {
        let wv = long_state(b, "warm-v");
        let wm = long_map_state(b, "warm-m");
        for _ in 0..2 {
            for (i, &k) in perm.iter().take(keys.min(200_000)).enumerate() {
                let key = k.to_be_bytes();
                let v = if b.get(wv, &key, &[], &mut buf).expect("get") {
                    long_of(&buf) + 1
                } else {
                    1
                };
                b.put(wv, &key, &[], &v.to_be_bytes()).expect("put");
                let uk = ((i & 7) as i64).to_be_bytes();
                b.map_put(wm, &key, &[], &uk, &(i as i64).to_be_bytes())
                    .expect("map put");
                b.map_get(wm, &key, &[], &uk, &mut buf).expect("map get");
            }
        }
    }
    let vs = long_state(b, "v");
    let ms = long_map_state(b, "m");
    let mut res = Vec::new();

    let t = Instant::now();
    for &k in perm {
        let key = k.to_be_bytes();
        let v = if b.get(vs, &key, &[], &mut buf).expect("get") {
            long_of(&buf) + 1
        } else {
            1
        };
        b.put(vs, &key, &[], &v.to_be_bytes()).expect("put");
    }
    res.push(CaseRate::from_passes("value_insert_get_update", vec![rate(keys, t)]));

    res.push(timed_passes("value_get_update", passes, keys, |_| {
        for &k in perm {
            let key = k.to_be_bytes();
            b.get(vs, &key, &[], &mut buf).expect("get");
            let v = long_of(&buf) + 1;
            b.put(vs, &key, &[], &v.to_be_bytes()).expect("put");
        }
    }));
    res.push(timed_passes("value_get", passes, keys, |_| {
        for &k in perm {
            b.get(vs, &k.to_be_bytes(), &[], &mut buf).expect("get");
            sink = sink.wrapping_add(long_of(&buf));
        }
    }));
    res.push(timed_passes("map_put", passes, keys, |r| {
        for (i, &k) in perm.iter().enumerate() {
            b.map_put(ms, &k.to_be_bytes(), &[], &r.to_be_bytes(), &(i as i64).to_be_bytes())
                .expect("map put");
        }
    }));
    res.push(timed_passes("map_get", passes, keys, |r| {
        for &k in perm {
            b.map_get(ms, &k.to_be_bytes(), &[], &r.to_be_bytes(), &mut buf)
                .expect("map get");
            sink = sink.wrapping_add(long_of(&buf));
        }
    }));
    res.push(timed_passes("map_get_put", passes, keys, |_| {
        let uk = 0i64.to_be_bytes();
        for &k in perm {
            let key = k.to_be_bytes();
            b.map_get(ms, &key, &[], &uk, &mut buf).expect("map get");
            let v = long_of(&buf) + 1;
            b.map_put(ms, &key, &[], &uk, &v.to_be_bytes()).expect("map put");
        }
    }));
    std::hint::black_box(sink);
    res
}

/// Resident set size of this process in bytes (`/proc/self/statm`), 0 where unknown.
pub fn rss_bytes() -> u64 {
    let page = 4096u64;
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|x| x.parse::<u64>().ok()))
        .map_or(0, |p| p * page)
}

/// Our memory per entry: the RSS growth of `keys` `ValueState<Long>` entries (`Long` keys,
/// values outside any small-value cache) in a fresh heap backend, in this process.
pub fn heap_bytes_per_entry(keys: usize) -> f64 {
    let mut b = statekit_benches::backend();
    let h = long_state(&mut b, "v");
    let before = rss_bytes();
    for k in 0..keys as i64 {
        b.put(h, &k.to_be_bytes(), &[], &(k + 1_000_000).to_be_bytes())
            .expect("put");
    }
    let after = rss_bytes();
    std::hint::black_box(&b);
    after.saturating_sub(before) as f64 / keys as f64
}

/// Runs `benches/flink/footprint.sh keys`: Flink heap backend's heap after GC per entry.
pub fn flink_bytes_per_entry(keys: usize) -> Result<f64, String> {
    let lib = flink_lib()?;
    let script = repo_root().join("benches/flink/footprint.sh");
    let out = Command::new("bash")
        .arg(&script)
        .arg(keys.to_string())
        .env("FLINK_LIB", &lib)
        .output()
        .map_err(|e| format!("{}: {e}", script.display()))?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    text.lines()
        .find_map(|l| l.strip_prefix("flink_heap_bytes_per_entry "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|x| x.parse().ok())
        .ok_or_else(|| {
            format!(
                "{} printed no figure ({}): {}{}",
                script.display(),
                out.status,
                text.trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_random_matches_the_jdk() {
        // new Random(42).nextInt(10) × 5 in a JDK: 0, 3, 8, 4, 0.
        let mut r = JavaRandom::new(42);
        let v: Vec<i32> = (0..5).map(|_| r.next_int(10)).collect();
        assert_eq!(v, vec![0, 3, 8, 4, 0]);
    }

    #[test]
    fn the_key_order_is_statebenchs() {
        // The same shuffle of 0..1000 in a JDK starts 572 653 636 6 892 569 525 905, ends 130.
        let p = java_permutation(1000);
        assert_eq!(p[..8], [572, 653, 636, 6, 892, 569, 525, 905]);
        assert_eq!(p[999], 130);
    }
}
