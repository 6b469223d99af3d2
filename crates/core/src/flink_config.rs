//! Apache Flink's configuration vocabulary: the key names statekit reads (Flink 1.20's name
//! and the older names Flink still accepts), the other Flink keys in the namespaces statekit
//! shares (known, so not mistaken for typos), Flink's value syntax (booleans, durations,
//! memory sizes), and the one typo rule: a key that is none of these but within
//! [`typo_budget`] edits of one is a misspelling of it ([`suggest`]).
//!
//! Who reads which key: the changelog's options ([`CHANGELOG`], under
//! [`CHANGELOG_NAMESPACES`]) are read by `statekit-changelog`'s `ChangelogConfig`; the job's
//! keys ([`JOB`]: backend, checkpoint and savepoint directories, retention, restore,
//! parallelism) by the word count (`statekit-wordcount`), which asks [`job_key`] what each
//! key it is given is.

use std::time::Duration;

/// One Flink option: its current name and the older names it is still read under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlinkKey {
    /// The name Flink 1.20 documents.
    pub name: &'static str,
    /// Older names of the same option (still accepted, as Flink accepts them).
    pub deprecated: &'static [&'static str],
}

impl FlinkKey {
    /// Whether `key` is this option under any of its names.
    pub fn is(&self, key: &str) -> bool {
        self.name == key || self.deprecated.contains(&key)
    }

    /// Every name of the option: the current one first.
    pub fn spellings(&self) -> impl Iterator<Item = &'static str> {
        std::iter::once(self.name).chain(self.deprecated.iter().copied())
    }
}

const fn key(name: &'static str, deprecated: &'static [&'static str]) -> FlinkKey {
    FlinkKey { name, deprecated }
}

/// `state.changelog.enabled`: the changelog is on.
pub const CHANGELOG_ENABLED: FlinkKey = key("state.changelog.enabled", &["state.backend.changelog.enabled"]);
/// `state.changelog.storage`: where the change log is kept.
pub const CHANGELOG_STORAGE: FlinkKey = key("state.changelog.storage", &["state.backend.changelog.storage"]);
/// `state.changelog.periodic-materialize.interval`.
pub const CHANGELOG_MATERIALIZE_INTERVAL: FlinkKey = key(
    "state.changelog.periodic-materialize.interval",
    &["state.backend.changelog.periodic-materialize.interval"],
);
/// `state.changelog.periodic-materialize.enabled`.
pub const CHANGELOG_MATERIALIZE_ENABLED: FlinkKey = key(
    "state.changelog.periodic-materialize.enabled",
    &["state.backend.changelog.periodic-materialize.enabled"],
);
/// `state.changelog.periodic-materialize.max-tail-size` (statekit's own key).
pub const CHANGELOG_MATERIALIZE_MAX_TAIL_SIZE: FlinkKey =
    key("state.changelog.periodic-materialize.max-tail-size", &[]);
/// `state.changelog.max-failures-allowed`.
pub const CHANGELOG_MAX_FAILURES: FlinkKey = key(
    "state.changelog.max-failures-allowed",
    &[
        "state.backend.changelog.max-failures-allowed",
        "state.backend.changelog.max.failures.allowed",
    ],
);
/// `state.changelog.dstl.dfs.base-path`.
pub const DSTL_BASE_PATH: FlinkKey = key("state.changelog.dstl.dfs.base-path", &["dstl.dfs.base-path"]);
/// `state.changelog.dstl.dfs.compression.enabled`.
pub const DSTL_COMPRESSION: FlinkKey = key(
    "state.changelog.dstl.dfs.compression.enabled",
    &["dstl.dfs.compression.enabled"],
);
/// `state.changelog.dstl.dfs.preemptive-persist-threshold`.
pub const DSTL_PREEMPTIVE_PERSIST_THRESHOLD: FlinkKey = key(
    "state.changelog.dstl.dfs.preemptive-persist-threshold",
    &["dstl.dfs.preemptive-persist-threshold"],
);
/// `state.changelog.dstl.dfs.batch.persist-delay`.
pub const DSTL_PERSIST_DELAY: FlinkKey = key(
    "state.changelog.dstl.dfs.batch.persist-delay",
    &["dstl.dfs.batch.persist-delay"],
);
/// `state.changelog.dstl.dfs.batch.persist-size-threshold`.
pub const DSTL_PERSIST_SIZE_THRESHOLD: FlinkKey = key(
    "state.changelog.dstl.dfs.batch.persist-size-threshold",
    &["dstl.dfs.batch.persist-size-threshold"],
);
/// `state.changelog.dstl.dfs.upload.max-in-flight`.
pub const DSTL_MAX_IN_FLIGHT: FlinkKey = key(
    "state.changelog.dstl.dfs.upload.max-in-flight",
    &["dstl.dfs.upload.max-in-flight"],
);
/// `state.changelog.dstl.dfs.upload.timeout`.
pub const DSTL_UPLOAD_TIMEOUT: FlinkKey = key("state.changelog.dstl.dfs.upload.timeout", &["dstl.dfs.upload.timeout"]);
/// `state.changelog.dstl.dfs.upload.max-attempts`.
pub const DSTL_MAX_ATTEMPTS: FlinkKey = key(
    "state.changelog.dstl.dfs.upload.max-attempts",
    &["dstl.dfs.upload.max-attempts"],
);
/// `state.changelog.dstl.dfs.upload.next-attempt-delay`.
pub const DSTL_NEXT_ATTEMPT_DELAY: FlinkKey = key(
    "state.changelog.dstl.dfs.upload.next-attempt-delay",
    &["dstl.dfs.upload.next-attempt-delay"],
);
/// `state.changelog.dstl.dfs.upload.retry-policy`.
pub const DSTL_RETRY_POLICY: FlinkKey = key(
    "state.changelog.dstl.dfs.upload.retry-policy",
    &["dstl.dfs.upload.retry-policy"],
);
/// `state.changelog.dstl.dfs.upload.buffer-size`.
pub const DSTL_BUFFER_SIZE: FlinkKey = key(
    "state.changelog.dstl.dfs.upload.buffer-size",
    &["dstl.dfs.upload.buffer-size"],
);
/// `state.changelog.dstl.dfs.upload.num-threads`.
pub const DSTL_UPLOAD_THREADS: FlinkKey = key(
    "state.changelog.dstl.dfs.upload.num-threads",
    &["dstl.dfs.upload.num-threads"],
);
/// `state.changelog.dstl.dfs.discard.num-threads`.
pub const DSTL_DISCARD_THREADS: FlinkKey = key(
    "state.changelog.dstl.dfs.discard.num-threads",
    &["dstl.dfs.discard.num-threads"],
);
/// `state.changelog.dstl.dfs.download.local-cache.idle-timeout-ms`.
pub const DSTL_CACHE_IDLE_TIMEOUT: FlinkKey = key(
    "state.changelog.dstl.dfs.download.local-cache.idle-timeout-ms",
    &["dstl.dfs.download.local-cache.idle-timeout-ms"],
);

/// The changelog's options (FLIP-406 renamed `state.backend.changelog.*` to
/// `state.changelog.*` and `dstl.dfs.*` to `state.changelog.dstl.dfs.*` in Flink 1.20).
pub const CHANGELOG: &[FlinkKey] = &[
    CHANGELOG_ENABLED,
    CHANGELOG_STORAGE,
    CHANGELOG_MATERIALIZE_INTERVAL,
    CHANGELOG_MATERIALIZE_ENABLED,
    CHANGELOG_MATERIALIZE_MAX_TAIL_SIZE,
    CHANGELOG_MAX_FAILURES,
    DSTL_BASE_PATH,
    DSTL_COMPRESSION,
    DSTL_PREEMPTIVE_PERSIST_THRESHOLD,
    DSTL_PERSIST_DELAY,
    DSTL_PERSIST_SIZE_THRESHOLD,
    DSTL_MAX_IN_FLIGHT,
    DSTL_UPLOAD_TIMEOUT,
    DSTL_MAX_ATTEMPTS,
    DSTL_NEXT_ATTEMPT_DELAY,
    DSTL_RETRY_POLICY,
    DSTL_BUFFER_SIZE,
    DSTL_UPLOAD_THREADS,
    DSTL_DISCARD_THREADS,
    DSTL_CACHE_IDLE_TIMEOUT,
];

/// The prefixes of the changelog's options: a key under them that is none of [`CHANGELOG`] is
/// an error.
pub const CHANGELOG_NAMESPACES: &[&str] = &["state.changelog.", "state.backend.changelog.", "dstl."];

/// `state.backend.type`: the state backend.
pub const STATE_BACKEND: FlinkKey = key("state.backend.type", &["state.backend"]);
/// `execution.checkpointing.dir`: where checkpoints go.
pub const CHECKPOINT_DIR: FlinkKey = key("execution.checkpointing.dir", &["state.checkpoints.dir"]);
/// `execution.checkpointing.savepoint-dir`: where savepoints go.
pub const SAVEPOINT_DIR: FlinkKey = key("execution.checkpointing.savepoint-dir", &["state.savepoints.dir"]);
/// `execution.checkpointing.num-retained`: completed checkpoints kept.
pub const CHECKPOINTS_RETAINED: FlinkKey = key(
    "execution.checkpointing.num-retained",
    &["state.checkpoints.num-retained"],
);
/// `execution.checkpointing.incremental`: incremental checkpoints.
pub const CHECKPOINT_INCREMENTAL: FlinkKey = key("execution.checkpointing.incremental", &["state.backend.incremental"]);
/// `execution.checkpointing.interval`: time between checkpoints.
pub const CHECKPOINT_INTERVAL: FlinkKey = key("execution.checkpointing.interval", &[]);
/// `execution.state-recovery.path`: the snapshot to restore from.
pub const RESTORE_PATH: FlinkKey = key("execution.state-recovery.path", &["execution.savepoint.path"]);
/// `execution.state-recovery.claim-mode`: CLAIM, NO_CLAIM or LEGACY.
pub const RESTORE_MODE: FlinkKey = key(
    "execution.state-recovery.claim-mode",
    &["execution.savepoint-restore-mode", "execution.savepoint.restore-mode"],
);
/// `execution.state-recovery.ignore-unclaimed-state`: allow state no operator takes.
pub const ALLOW_NON_RESTORED: FlinkKey = key(
    "execution.state-recovery.ignore-unclaimed-state",
    &["execution.savepoint.ignore-unclaimed-state"],
);
/// `parallelism.default`.
pub const PARALLELISM: FlinkKey = key("parallelism.default", &[]);
/// `pipeline.max-parallelism`.
pub const MAX_PARALLELISM: FlinkKey = key("pipeline.max-parallelism", &[]);
/// `execution.checkpointing.max-concurrent-checkpoints`.
pub const MAX_CONCURRENT_CHECKPOINTS: FlinkKey = key("execution.checkpointing.max-concurrent-checkpoints", &[]);

/// A job's keys that statekit reads (the word count maps each to its setting).
pub const JOB: &[FlinkKey] = &[
    STATE_BACKEND,
    CHECKPOINT_DIR,
    SAVEPOINT_DIR,
    CHECKPOINTS_RETAINED,
    CHECKPOINT_INCREMENTAL,
    CHECKPOINT_INTERVAL,
    RESTORE_PATH,
    RESTORE_MODE,
    ALLOW_NON_RESTORED,
    PARALLELISM,
    MAX_PARALLELISM,
    MAX_CONCURRENT_CHECKPOINTS,
];

/// Flink keys in the [`SHARED_NAMESPACES`] that statekit does not read: known, so they are
/// ignored rather than taken for misspellings.
pub const OTHER: &[&str] = &[
    "state.backend.local-recovery",
    "state.backend.async",
    "state.backend.fs.memory-threshold",
    "state.backend.fs.write-buffer-size",
    "state.checkpoint-storage",
    "state.checkpoints.create-subdir",
    "state.storage.fs.memory-threshold",
    "state.storage.fs.write-buffer-size",
    "state.storage.fs.create-checkpoint-subdir",
    "state.ttl.enabled",
    "execution.checkpointing.mode",
    "execution.checkpointing.timeout",
    "execution.checkpointing.min-pause",
    "execution.checkpointing.tolerable-failed-checkpoints",
    "execution.checkpointing.externalized-checkpoint-retention",
    "execution.checkpointing.unaligned",
    "execution.checkpointing.unaligned.enabled",
    "execution.checkpointing.unaligned.forced",
    "execution.checkpointing.aligned-checkpoint-timeout",
    "execution.checkpointing.alignment-timeout",
    "execution.checkpointing.snapshot-compression",
    "execution.checkpointing.storage",
    "execution.checkpointing.local-backup.enabled",
    "execution.checkpointing.local-backup.dirs",
    "execution.checkpointing.cleaner.parallel-mode",
    "execution.checkpointing.checkpoints-after-tasks-finish",
    "execution.checkpointing.checkpoints-after-tasks-finish.enabled",
    "execution.checkpointing.interval-during-backlog",
    "execution.checkpointing.create-subdir",
    "execution.checkpointing.data-inline-threshold",
    "execution.checkpointing.write-buffer-size",
    "execution.checkpointing.file-merging.enabled",
    "execution.checkpointing.recover-without-channel-state.checkpoint-id",
    "execution.checkpointing.approximate-local-recovery.enabled",
    "execution.checkpointing.force",
    "execution.checkpointing.id-of-ignored-in-flight-data",
    "execution.state-recovery.from-local",
    "execution.state-recovery.without-channel-state.checkpoint-id",
    "execution.runtime-mode",
    "execution.buffer-timeout",
    "execution.buffer-timeout.enabled",
    "execution.buffer-timeout.interval",
    "execution.attached",
    "execution.shutdown-on-attached-exit",
    "execution.shutdown-on-application-finish",
    "execution.submit-failed-job-on-application-error",
    "execution.target",
    "execution.batch-shuffle-mode",
    "execution.job-listeners",
    "execution.program-config.enabled",
    "execution.sort-partition.memory",
    "execution.sort-keyed-partition.memory",
    "execution.interruptible-timers.enabled",
    "pipeline.name",
    "pipeline.jars",
    "pipeline.classpaths",
    "pipeline.auto-watermark-interval",
    "pipeline.object-reuse",
    "pipeline.generic-types",
    "pipeline.operator-chaining",
    "pipeline.operator-chaining.enabled",
    "pipeline.operator-chaining.chain-operators-with-different-max-parallelism",
    "pipeline.closure-cleaner-level",
    "pipeline.global-job-parameters",
    "pipeline.auto-generate-uids",
    "pipeline.auto-type-registration",
    "pipeline.vertex-description-mode",
    "pipeline.vertex-name-include-index-prefix",
    "pipeline.force-avro",
    "pipeline.force-kryo",
    "pipeline.force-kryo-avro",
    "pipeline.serialization-config",
    "pipeline.jobvertex-parallelism-overrides",
    "pipeline.cached-files",
    "pipeline.default-kryo-serializers",
    "pipeline.registered-kryo-types",
    "pipeline.registered-pojo-types",
    "pipeline.time-characteristic",
    "pipeline.watermark-alignment.allow-unaligned-source-splits",
];

/// Families of Flink keys known by their prefix (too many to list one by one).
pub const OTHER_FAMILIES: &[&str] = &[
    "state.backend.rocksdb.",
    "state.backend.forst.",
    "state.backend.latency-track.",
    "state.backend.size-track.",
    "state.latency-track.",
    "state.size-track.",
    "state.storage.",
    "pipeline.jobvertex-parallelism-overrides.",
];

/// The namespaces statekit shares with Flink: a key there that is no key of this vocabulary
/// but close to one is taken for a misspelling.
pub const SHARED_NAMESPACES: &[&str] = &["state.", "execution.", "pipeline.", "parallelism."];

/// Whether `key` is one of [`OTHER`] or in one of [`OTHER_FAMILIES`].
pub fn is_other(key: &str) -> bool {
    OTHER.contains(&key) || OTHER_FAMILIES.iter().any(|p| key.starts_with(p))
}

/// The Levenshtein distance of two strings, in characters.
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

/// The typo rule: how many edits a name of `typed.len()` bytes may be away from a known one
/// and still be taken for a misspelling of it — an eighth of its length, at least 2.
pub fn typo_budget(typed: &str) -> usize {
    (typed.len() / 8).max(2)
}

/// Whether `typed` is within [`typo_budget`] edits of `known` (equal included).
pub fn is_close(typed: &str, known: &str) -> bool {
    edit_distance(typed, known) <= typo_budget(typed)
}

/// What a misspelt key probably meant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Suggestion {
    /// The known spelling nearest to the key given (a current or a deprecated name).
    pub nearest: &'static str,
    /// The current name of that option.
    pub current: &'static str,
}

/// The known key nearest to `typed`, among `keys` and the plain names `names`, when it is a
/// misspelling of it: at least one and at most [`typo_budget`] edits away (an exact match is
/// no misspelling). On a tie the first candidate wins (`keys` in order, each current name
/// before its deprecated ones, then `names`).
pub fn suggest<'k>(
    typed: &str,
    keys: impl IntoIterator<Item = &'k FlinkKey>,
    names: &[&'static str],
) -> Option<Suggestion> {
    let candidates = keys
        .into_iter()
        .flat_map(|k| k.spellings().map(move |s| (s, k.name)))
        .chain(names.iter().map(|&n| (n, n)));
    let ((nearest, current), d) = candidates
        .map(|c| (c, edit_distance(typed, c.0)))
        .min_by_key(|&(_, d)| d)?;
    (d >= 1 && d <= typo_budget(typed)).then_some(Suggestion { nearest, current })
}

/// What a key of a job's configuration is to a reader of the job's keys ([`JOB`]):
/// [`job_key`]'s answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobKey {
    /// One of [`JOB`], under any of its spellings.
    Read(&'static FlinkKey),
    /// A Flink key statekit knows and does not read ([`is_other`]).
    Known,
    /// A misspelling: a key in one of the [`SHARED_NAMESPACES`] (or in a misspelling of one,
    /// `paralelism.default`) that is no known key but close to one ([`suggest`] over [`JOB`]
    /// and [`OTHER`]).
    Misspelt(Suggestion),
    /// Any other key: not one statekit knows (another system's, or far from every known one).
    Unknown,
}

/// Whether `key` lies in one of the [`SHARED_NAMESPACES`], or in a namespace that is a
/// misspelling of one ([`is_close`]: `paralelism.default`).
pub fn in_shared_namespace(key: &str) -> bool {
    let first = key.split('.').next().unwrap_or_default();
    SHARED_NAMESPACES
        .iter()
        .any(|p| key.starts_with(p) || is_close(first, p.trim_end_matches('.')))
}

/// What `key` is to a reader of the job's keys: one of [`JOB`] (the option it names), a
/// Flink key statekit does not read, a misspelling of a known key (with the spelling nearest
/// to it), or unknown. The changelog's keys ([`CHANGELOG_NAMESPACES`]) are not the job's:
/// their reader sorts them itself.
pub fn job_key(key: &str) -> JobKey {
    if let Some(k) = JOB.iter().find(|k| k.is(key)) {
        return JobKey::Read(k);
    }
    if is_other(key) {
        return JobKey::Known;
    }
    match in_shared_namespace(key).then(|| suggest(key, JOB, OTHER)).flatten() {
        Some(s) => JobKey::Misspelt(s),
        None => JobKey::Unknown,
    }
}

/// A value that does not follow Flink's syntax for its type.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ValueError {
    /// Not `true` or `false`.
    #[error("expected `true` or `false`")]
    NotABool,
    /// Not a whole number that fits.
    #[error("expected a non-negative whole number")]
    NotAWholeNumber,
    /// A leading minus sign.
    #[error("negative values are not allowed")]
    Negative,
    /// No digits at the start.
    #[error("expected a number, optionally followed by a unit")]
    NoNumber,
    /// More digits than a 64-bit number holds.
    #[error("the number is too large")]
    NumberTooLarge,
    /// A duration's unit that is none of Flink's.
    #[error("`{unit}` is not a time unit (ms, s, min, h, d, …)")]
    TimeUnit {
        /// The unit as written (lower case).
        unit: String,
    },
    /// A duration past what a `Duration` holds.
    #[error("the duration is too long")]
    DurationTooLong,
    /// A memory size's unit that is none of Flink's.
    #[error("`{unit}` is not a size unit (b, kb, mb, gb, tb)")]
    SizeUnit {
        /// The unit as written (lower case).
        unit: String,
    },
    /// A memory size past 2^64 bytes.
    #[error("the size is too large")]
    SizeTooLarge,
}

impl ValueError {
    /// What kind of failure this is: always a configuration mistake.
    pub fn kind(&self) -> crate::ErrorKind {
        crate::ErrorKind::Caller
    }
}

impl crate::HasErrorKind for ValueError {
    fn kind(&self) -> crate::ErrorKind {
        crate::ErrorKind::Caller
    }
}

/// `true`/`false` (any case), as Flink reads booleans.
pub fn parse_bool(v: &str) -> Result<bool, ValueError> {
    match v.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(ValueError::NotABool),
    }
}

/// A non-negative whole number that fits in 32 bits.
pub fn parse_u32(v: &str) -> Result<u32, ValueError> {
    v.trim().parse::<u32>().map_err(|_| ValueError::NotAWholeNumber)
}

/// Splits `"10 min"` / `"10min"` into `(10, "min")`.
fn split_number(v: &str) -> Result<(u64, String), ValueError> {
    let v = v.trim();
    if v.starts_with('-') {
        return Err(ValueError::Negative);
    }
    let end = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    if end == 0 {
        return Err(ValueError::NoNumber);
    }
    let n = v[..end].parse::<u64>().map_err(|_| ValueError::NumberTooLarge)?;
    Ok((n, v[end..].trim().to_ascii_lowercase()))
}

/// A duration in Flink's syntax: a number and an optional unit (`ns`, `us`/`µs`, `ms`, `s`,
/// `min`/`m`, `h`, `d`, and their long forms); a bare number is milliseconds.
pub fn parse_duration(v: &str) -> Result<Duration, ValueError> {
    let (n, unit) = split_number(v)?;
    let nanos_per: u128 = match unit.as_str() {
        "ns" | "nano" | "nanos" | "nanosecond" | "nanoseconds" => 1,
        "us" | "µs" | "micro" | "micros" | "microsecond" | "microseconds" => 1_000,
        "" | "ms" | "milli" | "millis" | "millisecond" | "milliseconds" => 1_000_000,
        "s" | "sec" | "secs" | "second" | "seconds" => 1_000_000_000,
        "m" | "min" | "minute" | "minutes" => 60_000_000_000,
        "h" | "hour" | "hours" => 3_600_000_000_000,
        "d" | "day" | "days" => 86_400_000_000_000,
        _ => return Err(ValueError::TimeUnit { unit }),
    };
    let total = u128::from(n) * nanos_per;
    let secs = u64::try_from(total / 1_000_000_000).map_err(|_| ValueError::DurationTooLong)?;
    Ok(Duration::new(secs, (total % 1_000_000_000) as u32))
}

/// A memory size in Flink's syntax: a number and an optional unit (`b`, `k`/`kb`, `m`/`mb`,
/// `g`/`gb`, `t`/`tb`, and the long forms), powers of 1024; a bare number is bytes.
pub fn parse_size(v: &str) -> Result<u64, ValueError> {
    let (n, unit) = split_number(v)?;
    let shift = match unit.as_str() {
        "" | "b" | "bytes" => 0,
        "k" | "kb" | "kibibytes" => 10,
        "m" | "mb" | "mebibytes" => 20,
        "g" | "gb" | "gibibytes" => 30,
        "t" | "tb" | "tebibytes" => 40,
        _ => return Err(ValueError::SizeUnit { unit }),
    };
    n.checked_mul(1u64 << shift).ok_or(ValueError::SizeTooLarge)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_is_known_once() {
        let mut all: Vec<&str> = CHANGELOG.iter().chain(JOB).flat_map(FlinkKey::spellings).collect();
        all.extend(OTHER);
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n, "a name listed twice");
        for k in CHANGELOG {
            assert!(
                k.spellings()
                    .all(|s| CHANGELOG_NAMESPACES.iter().any(|p| s.starts_with(p))),
                "{k:?}"
            );
        }
        for k in JOB {
            assert!(
                k.spellings()
                    .all(|s| SHARED_NAMESPACES.iter().any(|p| s.starts_with(p))),
                "{k:?}"
            );
        }
        assert!(is_other("state.backend.rocksdb.block.cache-size"));
        assert!(is_other("execution.checkpointing.timeout"));
        assert!(!is_other("execution.checkpointing.dir"));
    }

    #[test]
    fn the_typo_rule() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("µs", "us"), 1, "characters, not bytes");
        assert_eq!(typo_budget("paralelism"), 2);
        assert_eq!(typo_budget("execution.checkpointing.max-concurent-checkpoints"), 6);
        assert!(is_close("paralelism", "parallelism"));
        assert!(is_close("state", "state"));
        assert!(!is_close("stats.backend", "state.backends.x"));
    }

    #[test]
    fn suggestions_name_the_nearest_spelling_and_its_current_name() {
        let s = suggest("dstl.dfs.upload.max-inflight", CHANGELOG, &[]).expect("close");
        assert_eq!(s.nearest, "dstl.dfs.upload.max-in-flight");
        assert_eq!(s.current, "state.changelog.dstl.dfs.upload.max-in-flight");
        let s = suggest("state.checkpoint.dir", JOB, OTHER).expect("close");
        assert_eq!(
            (s.nearest, s.current),
            ("state.checkpoints.dir", "execution.checkpointing.dir")
        );
        let s = suggest("state.changelog.enabeld", CHANGELOG, &[]).expect("two edits");
        assert_eq!(s.current, "state.changelog.enabled");
        assert_eq!(
            suggest("execution.checkpointing.timeout", JOB, OTHER),
            None,
            "exact: no typo"
        );
        assert_eq!(suggest("pipeline.something-else-entirely", JOB, OTHER), None, "too far");
        assert_eq!(suggest("x", [], &[]), None, "nothing to suggest");
    }

    #[test]
    fn a_jobs_keys_are_read_known_misspelt_or_unknown() {
        // (Moved from the word count's `flink_keys`, whose `suggest` this replaces.)
        let nearest = |k: &str| match job_key(k) {
            JobKey::Misspelt(s) => Some(s.nearest),
            _ => None,
        };
        assert_eq!(
            nearest("execution.checkpointing.max-concurent-checkpoints"),
            Some("execution.checkpointing.max-concurrent-checkpoints")
        );
        assert_eq!(nearest("state.checkpoint.dir"), Some("state.checkpoints.dir"));
        assert_eq!(nearest("paralelism.default"), Some("parallelism.default"));
        assert_eq!(nearest("pipeline.max-paralelism"), Some("pipeline.max-parallelism"));
        assert_eq!(
            job_key("execution.checkpointing.timeout"),
            JobKey::Known,
            "exact: known"
        );
        assert_eq!(job_key("pipeline.something-else-entirely"), JobKey::Unknown);
        assert_eq!(
            job_key("state.savepoints.dir"),
            JobKey::Read(&SAVEPOINT_DIR),
            "a deprecated spelling"
        );
        assert_eq!(job_key("parallelism.default"), JobKey::Read(&PARALLELISM));
        assert_eq!(
            job_key("paralelism.x"),
            JobKey::Unknown,
            "a misspelt namespace, no key near"
        );
        assert_eq!(job_key("foo.bar"), JobKey::Unknown);
        assert!(in_shared_namespace("paralelism.default"));
        assert!(in_shared_namespace("pipeline.x"));
        assert!(!in_shared_namespace("foo.bar"));
    }

    #[test]
    fn flink_value_syntax() {
        assert_eq!(parse_bool(" TRUE "), Ok(true));
        assert_eq!(parse_bool("yes"), Err(ValueError::NotABool));
        assert_eq!(parse_u32("7"), Ok(7));
        assert_eq!(parse_u32("-1"), Err(ValueError::NotAWholeNumber));
        assert_eq!(parse_duration("10 min"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("500"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("-1"), Err(ValueError::Negative));
        assert_eq!(parse_duration("ms"), Err(ValueError::NoNumber));
        assert_eq!(
            parse_duration("5 parsecs").map_err(|e| e.to_string()),
            Err("`parsecs` is not a time unit (ms, s, min, h, d, …)".to_string())
        );
        assert_eq!(
            parse_duration("99999999999999999999999 d"),
            Err(ValueError::NumberTooLarge)
        );
        assert_eq!(
            parse_duration("18446744073709551615 d"),
            Err(ValueError::DurationTooLong)
        );
        assert_eq!(parse_size("10MB"), Ok(10 << 20));
        assert_eq!(
            parse_size("1 zb").map_err(|e| e.to_string()),
            Err("`zb` is not a size unit (b, kb, mb, gb, tb)".to_string())
        );
        assert_eq!(parse_size("18446744073709551615 tb"), Err(ValueError::SizeTooLarge));
        assert_eq!(ValueError::NotABool.kind(), crate::ErrorKind::Caller);
    }
}
