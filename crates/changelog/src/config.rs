//! The changelog's configuration under Flink's key names.
//!
//! Flink 1.20 renamed its changelog keys (FLIP-406): `state.backend.changelog.*` became
//! `state.changelog.*` and `dstl.dfs.*` became `state.changelog.dstl.dfs.*`; the old names
//! stay accepted. [`ChangelogConfig::from_entries`] takes flat `key → value` pairs (from
//! `-D key=value` or a YAML file) in either spelling, with Flink's value syntax (durations
//! like `10 min`, `500ms` or a bare number of milliseconds; memory sizes like `5 mb`, `10MB`
//! or a bare number of bytes, in powers of 1024), and validates them: a misspelt key in the
//! changelog's namespaces, a value that does not parse, a key given twice under both
//! spellings with different values, or settings that contradict each other are errors that
//! name the key (and where it came from). Keys outside those namespaces are left to the
//! caller.

use crate::file::LogCompression;
use crate::materialize::MaterializationPolicy;
use crate::writer::UploadConfig;
use std::path::PathBuf;
use std::time::Duration;

/// A configuration problem, naming the key and the value's origin.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{origin}{key}: {message}")]
pub struct ConfigError {
    /// The key as written.
    pub key: String,
    /// Where it was given (`"-D "`, `"config.yaml: "`, …; may be empty), as a prefix.
    pub origin: String,
    /// What is wrong.
    pub message: String,
}

impl ConfigError {
    /// What kind of failure this is (a configuration mistake).
    pub fn kind(&self) -> statekit_core::ErrorKind {
        statekit_core::ErrorKind::Caller
    }
}

impl statekit_core::HasErrorKind for ConfigError {
    fn kind(&self) -> statekit_core::ErrorKind {
        ConfigError::kind(self)
    }
}

/// Where the change log is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum StorageKind {
    /// Files on the local filesystem (`filesystem`, statekit's default).
    #[default]
    Filesystem,
    /// In this process's memory (`memory`): lost when it exits, for tests. (Flink's default;
    /// not ours.)
    Memory,
}

/// A value a key accepts but that changes nothing in statekit, with the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigNote {
    /// The key as written.
    pub key: String,
    /// Why it has no effect.
    pub note: String,
}

/// The changelog's settings: on or off, where the log goes, upload and materialization.
#[derive(Clone, Debug, PartialEq)]
pub struct ChangelogConfig {
    /// The changelog is on (`state.changelog.enabled`, default false).
    pub enabled: bool,
    /// Where the log goes (`state.changelog.storage`, default `filesystem`).
    pub storage: StorageKind,
    /// Base directory of log files (`state.changelog.dstl.dfs.base-path`); none: the job's
    /// checkpoint directory (`<job>/dstl/`), so log files live and are collected with the
    /// checkpoints that use them.
    pub base_path: Option<PathBuf>,
    /// Materialization: interval (`…periodic-materialize.interval` / `.enabled`), consecutive
    /// failures (`…max-failures-allowed`), tail size trigger
    /// (`state.changelog.periodic-materialize.max-tail-size`, statekit's own key).
    pub materialization: MaterializationPolicy,
    /// Uploads: batching, back-pressure, retries, compression (`…dstl.dfs.*`).
    pub upload: UploadConfig,
}

impl Default for ChangelogConfig {
    fn default() -> Self {
        ChangelogConfig {
            enabled: false,
            storage: StorageKind::Filesystem,
            base_path: None,
            materialization: MaterializationPolicy::default(),
            upload: UploadConfig::default(),
        }
    }
}

/// One option: its current name, its deprecated names, and how it is applied.
struct Opt {
    key: &'static str,
    old: &'static [&'static str],
    apply: fn(&mut Builder, &str) -> Result<(), String>,
}

#[derive(Default)]
struct Builder {
    cfg: ChangelogConfig,
    periodic_enabled: Option<bool>,
    interval: Option<Duration>,
    retry_none: bool,
    notes: Vec<(usize, String)>,
    current: usize,
}

impl Builder {
    fn note(&mut self, note: &str) {
        self.notes.push((self.current, note.to_string()));
    }
}

const OPTIONS: &[Opt] = &[
    Opt {
        key: "state.changelog.enabled",
        old: &["state.backend.changelog.enabled"],
        apply: |b, v| {
            b.cfg.enabled = parse_bool(v)?;
            Ok(())
        },
    },
    Opt {
        key: "state.changelog.storage",
        old: &["state.backend.changelog.storage"],
        apply: |b, v| {
            b.cfg.storage = match v.trim().to_ascii_lowercase().as_str() {
                "filesystem" => StorageKind::Filesystem,
                "memory" => StorageKind::Memory,
                _ => return Err(format!("`{v}` is not a storage: use `filesystem` or `memory`")),
            };
            Ok(())
        },
    },
    Opt {
        key: "state.changelog.periodic-materialize.interval",
        old: &["state.backend.changelog.periodic-materialize.interval"],
        apply: |b, v| {
            let d = parse_duration(v)?;
            if d.is_zero() {
                return Err("the interval must be positive (turn periodic materialization off with state.changelog.periodic-materialize.enabled: false)".into());
            }
            b.interval = Some(d);
            Ok(())
        },
    },
    Opt {
        key: "state.changelog.periodic-materialize.enabled",
        old: &["state.backend.changelog.periodic-materialize.enabled"],
        apply: |b, v| {
            b.periodic_enabled = Some(parse_bool(v)?);
            Ok(())
        },
    },
    Opt {
        key: "state.changelog.periodic-materialize.max-tail-size",
        old: &[],
        apply: |b, v| {
            b.cfg.materialization.max_tail_bytes = if v.trim().eq_ignore_ascii_case("none") {
                None
            } else {
                let n = parse_size(v)?;
                if n == 0 {
                    return Err("must be positive, or `none` for no size trigger".into());
                }
                Some(n)
            };
            Ok(())
        },
    },
    Opt {
        key: "state.changelog.max-failures-allowed",
        old: &[
            "state.backend.changelog.max-failures-allowed",
            "state.backend.changelog.max.failures.allowed",
        ],
        apply: |b, v| {
            b.cfg.materialization.max_failures = parse_u32(v)?;
            Ok(())
        },
    },
    Opt {
        key: "state.changelog.dstl.dfs.base-path",
        old: &["dstl.dfs.base-path"],
        apply: |b, v| {
            let p = v.trim();
            let p = p.strip_prefix("file://").unwrap_or(p);
            if p.is_empty() {
                return Err("an empty path".into());
            }
            if let Some((scheme, _)) = p.split_once("://") {
                // Object stores are resolved by whoever opens the storage (statekit-objstore).
                if !matches!(scheme, "s3" | "s3a" | "gs" | "az") {
                    return Err(format!(
                        "the `{scheme}://` scheme is not supported here: give a local path (or file://), or s3://, gs://, az://"
                    ));
                }
            }
            b.cfg.base_path = Some(PathBuf::from(p));
            Ok(())
        },
    },
    Opt {
        key: "state.changelog.dstl.dfs.compression.enabled",
        old: &["dstl.dfs.compression.enabled"],
        apply: |b, v| {
            b.cfg.upload.compression = if parse_bool(v)? {
                LogCompression::Lz4
            } else {
                LogCompression::None
            };
            Ok(())
        },
    },
    Opt {
        key: "state.changelog.dstl.dfs.preemptive-persist-threshold",
        old: &["dstl.dfs.preemptive-persist-threshold"],
        apply: |b, v| {
            b.cfg.upload.preemptive_persist_threshold = positive_size(v)?;
            Ok(())
        },
    },
    Opt {
        key: "state.changelog.dstl.dfs.batch.persist-delay",
        old: &["dstl.dfs.batch.persist-delay"],
        apply: |b, v| {
            b.cfg.upload.persist_delay = parse_duration(v)?;
            Ok(())
        },
    },
    Opt {
        key: "state.changelog.dstl.dfs.batch.persist-size-threshold",
        old: &["dstl.dfs.batch.persist-size-threshold"],
        apply: |b, v| {
            b.cfg.upload.persist_size_threshold = positive_size(v)?;
            Ok(())
        },
    },
    Opt {
        key: "state.changelog.dstl.dfs.upload.max-in-flight",
        old: &["dstl.dfs.upload.max-in-flight"],
        apply: |b, v| {
            b.cfg.upload.max_in_flight = positive_size(v)?;
            Ok(())
        },
    },
    Opt {
        key: "state.changelog.dstl.dfs.upload.timeout",
        old: &["dstl.dfs.upload.timeout"],
        apply: |b, v| {
            let d = parse_duration(v)?;
            if d.is_zero() {
                return Err("the timeout must be positive".into());
            }
            b.cfg.upload.timeout = d;
            Ok(())
        },
    },
    Opt {
        key: "state.changelog.dstl.dfs.upload.max-attempts",
        old: &["dstl.dfs.upload.max-attempts"],
        apply: |b, v| {
            let n = parse_u32(v)?;
            if n == 0 {
                return Err("at least 1 (the first attempt counts)".into());
            }
            b.cfg.upload.max_attempts = n;
            Ok(())
        },
    },
    Opt {
        key: "state.changelog.dstl.dfs.upload.next-attempt-delay",
        old: &["dstl.dfs.upload.next-attempt-delay"],
        apply: |b, v| {
            b.cfg.upload.retry_delay = parse_duration(v)?;
            Ok(())
        },
    },
    Opt {
        key: "state.changelog.dstl.dfs.upload.retry-policy",
        old: &["dstl.dfs.upload.retry-policy"],
        apply: |b, v| {
            b.retry_none = match v.trim().to_ascii_lowercase().as_str() {
                "fixed" => false,
                "none" => true,
                _ => return Err(format!("`{v}` is not a retry policy: use `fixed` or `none`")),
            };
            Ok(())
        },
    },
    Opt {
        key: "state.changelog.dstl.dfs.upload.buffer-size",
        old: &["dstl.dfs.upload.buffer-size"],
        apply: |b, v| {
            positive_size(v)?;
            b.note("statekit writes each upload as one buffer; the setting has no effect");
            Ok(())
        },
    },
    Opt {
        key: "state.changelog.dstl.dfs.upload.num-threads",
        old: &["dstl.dfs.upload.num-threads"],
        apply: |b, v| {
            parse_u32(v)?;
            b.note("statekit uploads on one thread per job (each upload holds many change sets); the setting has no effect");
            Ok(())
        },
    },
    Opt {
        key: "state.changelog.dstl.dfs.discard.num-threads",
        old: &["dstl.dfs.discard.num-threads"],
        apply: |b, v| {
            parse_u32(v)?;
            b.note("statekit deletes files on its upload thread; the setting has no effect");
            Ok(())
        },
    },
    Opt {
        key: "state.changelog.dstl.dfs.download.local-cache.idle-timeout-ms",
        old: &["dstl.dfs.download.local-cache.idle-timeout-ms"],
        apply: |b, v| {
            parse_duration(v)?;
            b.note("statekit reads only the change sets a restore needs, without a download cache; the setting has no effect");
            Ok(())
        },
    },
];

/// The prefixes whose keys this module owns (an unknown key under them is an error).
const NAMESPACES: &[&str] = &["state.changelog.", "state.backend.changelog.", "dstl."];

impl ChangelogConfig {
    /// True when `key` belongs to the changelog's namespaces (known or not).
    pub fn owns_key(key: &str) -> bool {
        NAMESPACES.iter().any(|p| key.starts_with(p))
    }

    /// Every key this module knows, current names first, each with its deprecated names.
    pub fn known_keys() -> impl Iterator<Item = (&'static str, &'static [&'static str])> {
        OPTIONS.iter().map(|o| (o.key, o.old))
    }

    /// Builds the configuration from `(key, value, origin)` entries, where `origin` says
    /// where the entry came from for error messages (`"-D"`, `"flink.yaml"`, or `""`).
    /// Entries are applied in order (a later one wins over an earlier one under the same
    /// spelling); entries whose key is not in the changelog's namespaces are ignored (see
    /// [`ChangelogConfig::owns_key`]). Returns the configuration and notes on accepted keys
    /// that change nothing in statekit.
    pub fn from_entries<'a>(
        entries: impl IntoIterator<Item = (&'a str, &'a str, &'a str)>,
    ) -> Result<(Self, Vec<ConfigNote>), ConfigError> {
        let mut b = Builder::default();
        // The value each option got, and under which spelling (to catch contradictions).
        let mut seen: Vec<Option<(String, String, String)>> = vec![None; OPTIONS.len()];
        let mut keys: Vec<String> = Vec::new();
        for (key, value, origin) in entries {
            let k = key.trim();
            if !Self::owns_key(k) {
                continue;
            }
            let err = |message: String| ConfigError {
                key: k.to_string(),
                origin: if origin.is_empty() {
                    String::new()
                } else {
                    format!("{origin}: ")
                },
                message,
            };
            let Some(i) = OPTIONS.iter().position(|o| o.key == k || o.old.contains(&k)) else {
                let hint = suggest(k).map(|s| format!("; did you mean `{s}`?")).unwrap_or_default();
                return Err(err(format!("not a changelog option{hint}")));
            };
            if let Some((prev_key, prev_value, prev_origin)) = &seen[i] {
                if prev_key != k && prev_value.trim() != value.trim() {
                    let at = if prev_origin.is_empty() {
                        String::new()
                    } else {
                        format!(" ({prev_origin})")
                    };
                    return Err(err(format!(
                        "`{value}` contradicts `{prev_key}: {prev_value}`{at}, the same option under its other name"
                    )));
                }
            }
            seen[i] = Some((k.to_string(), value.to_string(), origin.to_string()));
            b.current = keys.len();
            keys.push(k.to_string());
            (OPTIONS[i].apply)(&mut b, value).map_err(|m| err(format!("`{value}`: {m}")))?;
        }
        let mut cfg = b.cfg;
        // Materialization: `enabled: false` wins; otherwise the interval, or the default.
        cfg.materialization.interval = match b.periodic_enabled {
            Some(false) => None,
            _ => Some(b.interval.unwrap_or(Duration::from_secs(600))),
        };
        if b.retry_none {
            cfg.upload.max_attempts = 1;
        }
        let u = &cfg.upload;
        if u.persist_size_threshold > u.max_in_flight {
            return Err(ConfigError {
                key: "state.changelog.dstl.dfs.batch.persist-size-threshold".into(),
                origin: String::new(),
                message: format!(
                    "{} bytes exceeds state.changelog.dstl.dfs.upload.max-in-flight ({} bytes): a batch could never start",
                    u.persist_size_threshold, u.max_in_flight
                ),
            });
        }
        let notes = b
            .notes
            .into_iter()
            .map(|(i, note)| ConfigNote {
                key: keys.get(i).cloned().unwrap_or_default(),
                note,
            })
            .collect();
        Ok((cfg, notes))
    }
}

/// The known key closest to `key` (edit distance at most a third of its length).
fn suggest(key: &str) -> Option<&'static str> {
    let all = OPTIONS
        .iter()
        .flat_map(|o| std::iter::once(o.key).chain(o.old.iter().copied()));
    let (best, d) = all.map(|k| (k, edit_distance(key, k))).min_by_key(|&(_, d)| d)?;
    let best = OPTIONS
        .iter()
        .find(|o| o.key == best || o.old.contains(&best))
        .map_or(best, |o| o.key);
    (d <= key.len() / 3).then_some(best)
}

/// The Levenshtein distance of two strings (for did-you-mean suggestions of misspelt keys).
pub fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// `true`/`false` (any case), as Flink reads booleans.
pub fn parse_bool(v: &str) -> Result<bool, String> {
    match v.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err("expected `true` or `false`".into()),
    }
}

fn parse_u32(v: &str) -> Result<u32, String> {
    v.trim()
        .parse::<u32>()
        .map_err(|_| "expected a non-negative whole number".into())
}

fn positive_size(v: &str) -> Result<usize, String> {
    let n = parse_size(v)?;
    if n == 0 {
        return Err("must be positive".into());
    }
    usize::try_from(n).map_err(|_| "too large for this machine".into())
}

/// Splits `"10 min"` / `"10min"` into `(10, "min")`.
fn split_number(v: &str) -> Result<(u64, String), String> {
    let v = v.trim();
    if v.starts_with('-') {
        return Err("negative values are not allowed".into());
    }
    let end = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    if end == 0 {
        return Err("expected a number, optionally followed by a unit".into());
    }
    let n = v[..end]
        .parse::<u64>()
        .map_err(|_| "the number is too large".to_string())?;
    Ok((n, v[end..].trim().to_ascii_lowercase()))
}

/// A duration in Flink's syntax: a number and an optional unit (`ns`, `us`/`µs`, `ms`, `s`,
/// `min`/`m`, `h`, `d`, and their long forms); a bare number is milliseconds.
pub fn parse_duration(v: &str) -> Result<Duration, String> {
    let (n, unit) = split_number(v)?;
    let nanos_per: u128 = match unit.as_str() {
        "ns" | "nano" | "nanos" | "nanosecond" | "nanoseconds" => 1,
        "us" | "µs" | "micro" | "micros" | "microsecond" | "microseconds" => 1_000,
        "" | "ms" | "milli" | "millis" | "millisecond" | "milliseconds" => 1_000_000,
        "s" | "sec" | "secs" | "second" | "seconds" => 1_000_000_000,
        "m" | "min" | "minute" | "minutes" => 60_000_000_000,
        "h" | "hour" | "hours" => 3_600_000_000_000,
        "d" | "day" | "days" => 86_400_000_000_000,
        u => return Err(format!("`{u}` is not a time unit (ms, s, min, h, d, …)")),
    };
    let total = u128::from(n) * nanos_per;
    let secs = u64::try_from(total / 1_000_000_000).map_err(|_| "the duration is too long".to_string())?;
    Ok(Duration::new(secs, (total % 1_000_000_000) as u32))
}

/// A memory size in Flink's syntax: a number and an optional unit (`b`, `k`/`kb`, `m`/`mb`,
/// `g`/`gb`, `t`/`tb`, and the long forms), powers of 1024; a bare number is bytes.
pub fn parse_size(v: &str) -> Result<u64, String> {
    let (n, unit) = split_number(v)?;
    let shift = match unit.as_str() {
        "" | "b" | "bytes" => 0,
        "k" | "kb" | "kibibytes" => 10,
        "m" | "mb" | "mebibytes" => 20,
        "g" | "gb" | "gibibytes" => 30,
        "t" | "tb" | "tebibytes" => 40,
        u => return Err(format!("`{u}` is not a size unit (b, kb, mb, gb, tb)")),
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| "the size is too large".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(entries: &[(&str, &str)]) -> Result<ChangelogConfig, ConfigError> {
        ChangelogConfig::from_entries(entries.iter().map(|&(k, v)| (k, v, "-D"))).map(|(c, _)| c)
    }

    #[test]
    fn defaults_are_flinks_except_the_storage() {
        let c = cfg(&[]).expect("empty");
        assert!(!c.enabled);
        assert_eq!(c.storage, StorageKind::Filesystem);
        assert_eq!(c.materialization.interval, Some(Duration::from_secs(600)));
        assert_eq!(c.materialization.max_failures, 3);
        assert_eq!(c.upload, UploadConfig::default());
    }

    #[test]
    fn old_and_new_spellings() {
        for (on, base) in [
            ("state.changelog.enabled", "state.changelog.dstl.dfs.base-path"),
            ("state.backend.changelog.enabled", "dstl.dfs.base-path"),
        ] {
            let c = cfg(&[
                (on, "TRUE"),
                (base, "file:///tmp/dstl"),
                ("dstl.dfs.batch.persist-delay", "20 ms"),
                ("state.changelog.dstl.dfs.batch.persist-size-threshold", "2mb"),
                ("dstl.dfs.upload.max-in-flight", "64 MB"),
                ("dstl.dfs.compression.enabled", "true"),
                ("dstl.dfs.upload.timeout", "2s"),
                ("state.changelog.dstl.dfs.upload.max-attempts", "5"),
                ("state.backend.changelog.periodic-materialize.interval", "3 min"),
                ("state.backend.changelog.max-failures-allowed", "7"),
                ("state.backend.changelog.storage", "filesystem"),
            ])
            .expect("valid");
            assert!(c.enabled);
            assert_eq!(c.base_path, Some(PathBuf::from("/tmp/dstl")));
            assert_eq!(c.upload.persist_delay, Duration::from_millis(20));
            assert_eq!(c.upload.persist_size_threshold, 2 << 20);
            assert_eq!(c.upload.max_in_flight, 64 << 20);
            assert_eq!(c.upload.compression, LogCompression::Lz4);
            assert_eq!(c.upload.timeout, Duration::from_secs(2));
            assert_eq!(c.upload.max_attempts, 5);
            assert_eq!(c.materialization.interval, Some(Duration::from_secs(180)));
            assert_eq!(c.materialization.max_failures, 7);
        }
    }

    #[test]
    fn clear_errors_name_the_key() {
        let e = cfg(&[("state.changelog.enabled", "yes")]).expect_err("bad bool");
        assert_eq!(
            e.to_string(),
            "-D: state.changelog.enabled: `yes`: expected `true` or `false`"
        );
        let e = cfg(&[("dstl.dfs.upload.timeout", "5 parsecs")]).expect_err("bad unit");
        assert!(e.to_string().contains("`parsecs` is not a time unit"), "{e}");
        let e = cfg(&[("state.changelog.periodic-materialize.interval", "-1")]).expect_err("negative");
        assert!(e.to_string().contains("negative"), "{e}");
        let e = cfg(&[("state.changelog.storage", "s3")]).expect_err("storage");
        assert!(e.to_string().contains("use `filesystem` or `memory`"), "{e}");
        let e = cfg(&[("dstl.dfs.base-path", "hdfs:///flink/dstl")]).expect_err("scheme");
        assert!(e.to_string().contains("`hdfs://` scheme"), "{e}");
        let c = cfg(&[("dstl.dfs.base-path", "s3://bucket/x")]).expect("s3");
        assert_eq!(c.base_path, Some(PathBuf::from("s3://bucket/x")));
        let e = cfg(&[("dstl.dfs.upload.max-attempts", "0")]).expect_err("attempts");
        assert!(e.to_string().contains("at least 1"), "{e}");
    }

    #[test]
    fn typos_are_caught_with_a_suggestion() {
        let e = cfg(&[("state.changelog.enabeld", "true")]).expect_err("typo");
        assert!(e.to_string().contains("did you mean `state.changelog.enabled`"), "{e}");
        let e = cfg(&[("dstl.dfs.upload.max-inflight", "1mb")]).expect_err("typo");
        assert!(
            e.to_string()
                .contains("did you mean `state.changelog.dstl.dfs.upload.max-in-flight`"),
            "{e}"
        );
        // Keys outside the namespaces are not this module's business.
        cfg(&[("taskmanager.memory.process.size", "4g")]).expect("ignored");
    }

    #[test]
    fn contradictions_between_spellings_and_settings() {
        let e = cfg(&[
            ("state.backend.changelog.enabled", "true"),
            ("state.changelog.enabled", "false"),
        ])
        .expect_err("contradiction");
        assert!(
            e.to_string()
                .contains("contradicts `state.backend.changelog.enabled: true`"),
            "{e}"
        );
        cfg(&[
            ("state.backend.changelog.enabled", "true"),
            ("state.changelog.enabled", "true"),
        ])
        .expect("agree");
        // The same spelling twice: the later one wins.
        let c = cfg(&[
            ("state.changelog.enabled", "true"),
            ("state.changelog.enabled", "false"),
        ])
        .expect("later wins");
        assert!(!c.enabled);
        let e = cfg(&[
            ("dstl.dfs.batch.persist-size-threshold", "200mb"),
            ("dstl.dfs.upload.max-in-flight", "100mb"),
        ])
        .expect_err("threshold above in-flight");
        assert!(e.to_string().contains("exceeds"), "{e}");
    }

    #[test]
    fn periodic_materialization_off_and_tail_trigger() {
        let c = cfg(&[
            ("state.changelog.periodic-materialize.enabled", "false"),
            ("state.changelog.periodic-materialize.interval", "1 min"),
            ("state.changelog.periodic-materialize.max-tail-size", "none"),
        ])
        .expect("valid");
        assert_eq!(c.materialization.interval, None);
        assert_eq!(c.materialization.max_tail_bytes, None);
        let c = cfg(&[("state.changelog.periodic-materialize.max-tail-size", "64mb")]).expect("valid");
        assert_eq!(c.materialization.max_tail_bytes, Some(64 << 20));
        let e = cfg(&[("state.changelog.periodic-materialize.interval", "0")]).expect_err("zero");
        assert!(e.to_string().contains("enabled: false"), "{e}");
    }

    #[test]
    fn accepted_without_effect_is_reported() {
        let (_, notes) = ChangelogConfig::from_entries([
            ("dstl.dfs.upload.num-threads", "5", ""),
            ("dstl.dfs.upload.retry-policy", "none", ""),
        ])
        .expect("valid");
        assert_eq!(notes.len(), 1);
        assert_eq!(notes[0].key, "dstl.dfs.upload.num-threads");
        let (c, _) = ChangelogConfig::from_entries([("dstl.dfs.upload.retry-policy", "none", "")]).expect("valid");
        assert_eq!(c.upload.max_attempts, 1);
    }

    #[test]
    fn flink_value_syntax() {
        assert_eq!(parse_duration("10 min"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("10min"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("500"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1 s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("2 h"), Ok(Duration::from_secs(7200)));
        assert!(parse_duration("").is_err());
        assert!(parse_duration("ms").is_err());
        assert!(parse_duration("99999999999999999999999 d").is_err());
        assert_eq!(parse_size("5 mb"), Ok(5 << 20));
        assert_eq!(parse_size("10MB"), Ok(10 << 20));
        assert_eq!(parse_size("1024"), Ok(1024));
        assert_eq!(parse_size("1 kibibytes"), Ok(1024));
        assert!(parse_size("1 zb").is_err());
        assert!(parse_size("18446744073709551615 tb").is_err());
    }
}
