//! Helpers for tests that run the real `statekit` binary.
#![allow(dead_code)]

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
