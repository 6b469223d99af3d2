//! Changelog configuration (`ChangelogConfig::from_entries` and the value parsers), as read
//! from `flink.yaml` / `-D` options: the input is lines of `key: value` (or `key=value`);
//! parsing never panics and every error renders. `parse_duration`, `parse_size` and
//! `parse_bool` are also run on every value: never panic, and a size or duration that
//! parses re-parses equal from its canonical spelling.
#![no_main]

use libfuzzer_sys::fuzz_target;
use statekit_changelog::config::{parse_bool, parse_duration, parse_size};
use statekit_changelog::ChangelogConfig;

fuzz_target!(|data: &[u8]| {
    statekit_fuzz::begin(data);
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let entries: Vec<(&str, &str, &str)> = text
        .lines()
        .filter_map(|l| l.split_once(':').or_else(|| l.split_once('=')))
        .map(|(k, v)| (k, v, "fuzz"))
        .collect();
    for &(_, v, _) in &entries {
        if let Ok(d) = parse_duration(v) {
            // Its nanoseconds spell it exactly (when they fit the parser's u64).
            if let Ok(ns) = u64::try_from(d.as_nanos()) {
                assert_eq!(parse_duration(&format!("{ns} ns")), Ok(d), "{v:?}");
            }
        }
        if let Ok(n) = parse_size(v) {
            assert_eq!(parse_size(&format!("{n} b")), Ok(n), "{v:?}");
        }
        let _ = parse_bool(v);
    }
    match ChangelogConfig::from_entries(entries.iter().copied()) {
        Ok((cfg, notes)) => {
            std::hint::black_box(format!("{cfg:?} {notes:?}"));
        }
        Err(e) => {
            std::hint::black_box(e.to_string());
        }
    }
    for (k, _, _) in &entries {
        std::hint::black_box(ChangelogConfig::owns_key(k));
    }
});
