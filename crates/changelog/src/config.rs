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
use statekit_core::flink_config::{self as fc, FlinkKey};
/// Flink's value syntax, from the one vocabulary ([`statekit_core::flink_config`]).
pub use statekit_core::flink_config::{edit_distance, parse_bool, parse_duration, parse_size, ValueError};
use std::path::PathBuf;
use std::time::Duration;

/// A configuration problem, naming the key and the value's origin.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{origin}{key}: {problem}")]
pub struct ConfigError {
    /// The key as written.
    pub key: String,
    /// Where it was given (`"-D "`, `"config.yaml: "`, …; may be empty), as a prefix.
    pub origin: String,
    /// What is wrong (boxed: configuration results stay small).
    pub problem: Box<ConfigProblem>,
}

/// What is wrong with one configuration entry (or with the settings together).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigProblem {
    /// A key in the changelog's namespaces that is none of its options.
    #[error("not a changelog option{}", suggestion.map(|s| format!("; did you mean `{s}`?")).unwrap_or_default())]
    UnknownOption {
        /// The current name of the option it is probably a misspelling of.
        suggestion: Option<&'static str>,
    },
    /// The value does not fit the option.
    #[error("`{value}`: {reason}")]
    BadValue {
        /// The value as written.
        value: String,
        /// Why it does not fit.
        reason: ValueProblem,
    },
    /// The option was given under both its names, with different values.
    #[error(
        "`{value}` contradicts `{other_key}: {other_value}`{}, the same option under its other name",
        origin_in_parens(other_origin)
    )]
    Contradiction {
        /// The value given under this name.
        value: String,
        /// The option's other name, as written.
        other_key: String,
        /// The value given under it.
        other_value: String,
        /// Where that was given (may be empty).
        other_origin: String,
    },
    /// The batch size threshold is above the bytes allowed in flight.
    #[error("{threshold} bytes exceeds state.changelog.dstl.dfs.upload.max-in-flight ({max_in_flight} bytes): a batch could never start")]
    BatchAboveInFlight {
        /// `…batch.persist-size-threshold`, in bytes.
        threshold: usize,
        /// `…upload.max-in-flight`, in bytes.
        max_in_flight: usize,
    },
}

/// Why a value does not fit its option.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ValueProblem {
    /// It does not follow Flink's syntax for the option's type.
    #[error(transparent)]
    Syntax(#[from] ValueError),
    /// Not a storage kind.
    #[error("`{value}` is not a storage: use `filesystem` or `memory`")]
    Storage {
        /// The value.
        value: String,
    },
    /// A materialization interval of zero.
    #[error("the interval must be positive (turn periodic materialization off with state.changelog.periodic-materialize.enabled: false)")]
    ZeroInterval,
    /// A tail size trigger of zero.
    #[error("must be positive, or `none` for no size trigger")]
    ZeroTailSize,
    /// An empty base path.
    #[error("an empty path")]
    EmptyPath,
    /// A base path on a file system statekit does not write to.
    #[error("the `{scheme}://` scheme is not supported here: give a local path (or file://), or s3://, gs://, az://")]
    Scheme {
        /// The URL scheme.
        scheme: String,
    },
    /// An upload timeout of zero.
    #[error("the timeout must be positive")]
    ZeroTimeout,
    /// No upload attempt.
    #[error("at least 1 (the first attempt counts)")]
    ZeroAttempts,
    /// Not a retry policy.
    #[error("`{value}` is not a retry policy: use `fixed` or `none`")]
    RetryPolicy {
        /// The value.
        value: String,
    },
    /// A size of zero.
    #[error("must be positive")]
    NotPositive,
    /// A size past this machine's address space.
    #[error("too large for this machine")]
    TooLarge,
}

/// ` (origin)`, or nothing.
fn origin_in_parens(origin: &str) -> String {
    if origin.is_empty() {
        String::new()
    } else {
        format!(" ({origin})")
    }
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

/// One option: its names (current and deprecated), and how it is applied.
struct Opt {
    key: FlinkKey,
    apply: fn(&mut Builder, &str) -> Result<(), ValueProblem>,
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
        key: fc::CHANGELOG_ENABLED,
        apply: |b, v| {
            b.cfg.enabled = parse_bool(v)?;
            Ok(())
        },
    },
    Opt {
        key: fc::CHANGELOG_STORAGE,
        apply: |b, v| {
            b.cfg.storage = match v.trim().to_ascii_lowercase().as_str() {
                "filesystem" => StorageKind::Filesystem,
                "memory" => StorageKind::Memory,
                _ => return Err(ValueProblem::Storage { value: v.to_string() }),
            };
            Ok(())
        },
    },
    Opt {
        key: fc::CHANGELOG_MATERIALIZE_INTERVAL,
        apply: |b, v| {
            let d = parse_duration(v)?;
            if d.is_zero() {
                return Err(ValueProblem::ZeroInterval);
            }
            b.interval = Some(d);
            Ok(())
        },
    },
    Opt {
        key: fc::CHANGELOG_MATERIALIZE_ENABLED,
        apply: |b, v| {
            b.periodic_enabled = Some(parse_bool(v)?);
            Ok(())
        },
    },
    Opt {
        key: fc::CHANGELOG_MATERIALIZE_MAX_TAIL_SIZE,
        apply: |b, v| {
            b.cfg.materialization.max_tail_bytes = if v.trim().eq_ignore_ascii_case("none") {
                None
            } else {
                let n = parse_size(v)?;
                if n == 0 {
                    return Err(ValueProblem::ZeroTailSize);
                }
                Some(n)
            };
            Ok(())
        },
    },
    Opt {
        key: fc::CHANGELOG_MAX_FAILURES,
        apply: |b, v| {
            b.cfg.materialization.max_failures = parse_u32(v)?;
            Ok(())
        },
    },
    Opt {
        key: fc::DSTL_BASE_PATH,
        apply: |b, v| {
            let p = v.trim();
            let p = p.strip_prefix("file://").unwrap_or(p);
            if p.is_empty() {
                return Err(ValueProblem::EmptyPath);
            }
            if let Some((scheme, _)) = p.split_once("://") {
                // Object stores are resolved by whoever opens the storage (statekit-objstore).
                if !matches!(scheme, "s3" | "s3a" | "gs" | "az") {
                    return Err(ValueProblem::Scheme {
                        scheme: scheme.to_string(),
                    });
                }
            }
            b.cfg.base_path = Some(PathBuf::from(p));
            Ok(())
        },
    },
    Opt {
        key: fc::DSTL_COMPRESSION,
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
        key: fc::DSTL_PREEMPTIVE_PERSIST_THRESHOLD,
        apply: |b, v| {
            b.cfg.upload.preemptive_persist_threshold = positive_size(v)?;
            Ok(())
        },
    },
    Opt {
        key: fc::DSTL_PERSIST_DELAY,
        apply: |b, v| {
            b.cfg.upload.persist_delay = parse_duration(v)?;
            Ok(())
        },
    },
    Opt {
        key: fc::DSTL_PERSIST_SIZE_THRESHOLD,
        apply: |b, v| {
            b.cfg.upload.persist_size_threshold = positive_size(v)?;
            Ok(())
        },
    },
    Opt {
        key: fc::DSTL_MAX_IN_FLIGHT,
        apply: |b, v| {
            b.cfg.upload.max_in_flight = positive_size(v)?;
            Ok(())
        },
    },
    Opt {
        key: fc::DSTL_UPLOAD_TIMEOUT,
        apply: |b, v| {
            let d = parse_duration(v)?;
            if d.is_zero() {
                return Err(ValueProblem::ZeroTimeout);
            }
            b.cfg.upload.timeout = d;
            Ok(())
        },
    },
    Opt {
        key: fc::DSTL_MAX_ATTEMPTS,
        apply: |b, v| {
            let n = parse_u32(v)?;
            if n == 0 {
                return Err(ValueProblem::ZeroAttempts);
            }
            b.cfg.upload.max_attempts = n;
            Ok(())
        },
    },
    Opt {
        key: fc::DSTL_NEXT_ATTEMPT_DELAY,
        apply: |b, v| {
            b.cfg.upload.retry_delay = parse_duration(v)?;
            Ok(())
        },
    },
    Opt {
        key: fc::DSTL_RETRY_POLICY,
        apply: |b, v| {
            b.retry_none = match v.trim().to_ascii_lowercase().as_str() {
                "fixed" => false,
                "none" => true,
                _ => return Err(ValueProblem::RetryPolicy { value: v.to_string() }),
            };
            Ok(())
        },
    },
    Opt {
        key: fc::DSTL_BUFFER_SIZE,
        apply: |b, v| {
            positive_size(v)?;
            b.note("statekit writes each upload as one buffer; the setting has no effect");
            Ok(())
        },
    },
    Opt {
        key: fc::DSTL_UPLOAD_THREADS,
        apply: |b, v| {
            parse_u32(v)?;
            b.note("statekit uploads on one thread per job (each upload holds many change sets); the setting has no effect");
            Ok(())
        },
    },
    Opt {
        key: fc::DSTL_DISCARD_THREADS,
        apply: |b, v| {
            parse_u32(v)?;
            b.note("statekit deletes files on its upload thread; the setting has no effect");
            Ok(())
        },
    },
    Opt {
        key: fc::DSTL_CACHE_IDLE_TIMEOUT,
        apply: |b, v| {
            parse_duration(v)?;
            b.note("statekit reads only the change sets a restore needs, without a download cache; the setting has no effect");
            Ok(())
        },
    },
];

impl ChangelogConfig {
    /// True when `key` belongs to the changelog's namespaces (known or not).
    pub fn owns_key(key: &str) -> bool {
        fc::CHANGELOG_NAMESPACES.iter().any(|p| key.starts_with(p))
    }

    /// Every key this module knows, current names first, each with its deprecated names.
    pub fn known_keys() -> impl Iterator<Item = (&'static str, &'static [&'static str])> {
        OPTIONS.iter().map(|o| (o.key.name, o.key.deprecated))
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
            let err = |problem: ConfigProblem| ConfigError {
                key: k.to_string(),
                origin: if origin.is_empty() {
                    String::new()
                } else {
                    format!("{origin}: ")
                },
                problem: Box::new(problem),
            };
            let Some(i) = OPTIONS.iter().position(|o| o.key.is(k)) else {
                // The changelog names the option's current name (whichever spelling was near).
                let suggestion = fc::suggest(k, OPTIONS.iter().map(|o| &o.key), &[]).map(|s| s.current);
                return Err(err(ConfigProblem::UnknownOption { suggestion }));
            };
            if let Some((prev_key, prev_value, prev_origin)) = &seen[i] {
                if prev_key != k && prev_value.trim() != value.trim() {
                    return Err(err(ConfigProblem::Contradiction {
                        value: value.to_string(),
                        other_key: prev_key.clone(),
                        other_value: prev_value.clone(),
                        other_origin: prev_origin.clone(),
                    }));
                }
            }
            seen[i] = Some((k.to_string(), value.to_string(), origin.to_string()));
            b.current = keys.len();
            keys.push(k.to_string());
            (OPTIONS[i].apply)(&mut b, value).map_err(|reason| {
                err(ConfigProblem::BadValue {
                    value: value.to_string(),
                    reason,
                })
            })?;
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
                key: fc::DSTL_PERSIST_SIZE_THRESHOLD.name.into(),
                origin: String::new(),
                problem: Box::new(ConfigProblem::BatchAboveInFlight {
                    threshold: u.persist_size_threshold,
                    max_in_flight: u.max_in_flight,
                }),
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

fn parse_u32(v: &str) -> Result<u32, ValueProblem> {
    Ok(fc::parse_u32(v)?)
}

fn positive_size(v: &str) -> Result<usize, ValueProblem> {
    let n = parse_size(v)?;
    if n == 0 {
        return Err(ValueProblem::NotPositive);
    }
    usize::try_from(n).map_err(|_| ValueProblem::TooLarge)
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
