//! Flink's configuration keys for the word count: the main ones map to its settings (the
//! same meaning under the same name), the rest of Flink's keys in the namespaces it shares
//! (`state.`, `execution.`, `pipeline.`, `parallelism.`) are known and ignored, and a key
//! there that is none of them but close to one is a misspelling: an error with the key it
//! probably meant. A flag given on the command line wins over the configuration, as in Flink.

use super::{BackendKind, CheckpointType, WordcountArgs};
use crate::config::Entry;
use anyhow::{bail, Result};
use std::path::PathBuf;
use std::time::Duration;

/// A setting of the word count that a Flink key sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Setting {
    Backend,
    CheckpointDir,
    SavepointDir,
    Retained,
    Incremental,
    Interval,
    RestorePath,
    RestoreMode,
    AllowNonRestored,
    Parallelism,
    MaxParallelism,
    MaxConcurrent,
}

/// The mapped keys: Flink 1.20's name first, then its older names; the flag each one is the
/// same as (a flag given on the command line wins).
const MAPPED: &[(&[&str], Setting, &str)] = &[
    (&["state.backend.type", "state.backend"], Setting::Backend, "backend"),
    (
        &["execution.checkpointing.dir", "state.checkpoints.dir"],
        Setting::CheckpointDir,
        "checkpoint_dir",
    ),
    (
        &["execution.checkpointing.savepoint-dir", "state.savepoints.dir"],
        Setting::SavepointDir,
        "savepoint_dir",
    ),
    (
        &["execution.checkpointing.num-retained", "state.checkpoints.num-retained"],
        Setting::Retained,
        "retained_checkpoints",
    ),
    (
        &["execution.checkpointing.incremental", "state.backend.incremental"],
        Setting::Incremental,
        "checkpoint_type",
    ),
    (
        &["execution.checkpointing.interval"],
        Setting::Interval,
        "checkpoint_interval",
    ),
    (
        &["execution.state-recovery.path", "execution.savepoint.path"],
        Setting::RestorePath,
        "restore",
    ),
    (
        &[
            "execution.state-recovery.claim-mode",
            "execution.savepoint-restore-mode",
            "execution.savepoint.restore-mode",
        ],
        Setting::RestoreMode,
        "restore_mode",
    ),
    (
        &[
            "execution.state-recovery.ignore-unclaimed-state",
            "execution.savepoint.ignore-unclaimed-state",
        ],
        Setting::AllowNonRestored,
        "allow_non_restored_state",
    ),
    (&["parallelism.default"], Setting::Parallelism, "parallelism"),
    (
        &["pipeline.max-parallelism"],
        Setting::MaxParallelism,
        "max_parallelism",
    ),
    (
        &["execution.checkpointing.max-concurrent-checkpoints"],
        Setting::MaxConcurrent,
        "",
    ),
];

/// Flink keys in the shared namespaces that the word count does not use (listed and
/// ignored); a key close to one of these or to a mapped one, but none of them, is a
/// misspelling.
const KNOWN: &[&str] = &[
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
    "parallelism.default",
];

/// Families of Flink keys known by their prefix (too many to list one by one).
const KNOWN_PREFIXES: &[&str] = &[
    "state.backend.rocksdb.",
    "state.backend.forst.",
    "state.backend.latency-track.",
    "state.backend.size-track.",
    "state.latency-track.",
    "state.size-track.",
    "state.storage.",
    "pipeline.jobvertex-parallelism-overrides.",
];

/// The namespaces where a key that is no Flink key the word count knows, but close to one, is
/// taken for a misspelling.
const NAMESPACES: &[&str] = &["state.", "execution.", "pipeline.", "parallelism."];

/// What the entries set beyond `args` (settings without a flag).
#[derive(Debug, Default)]
pub(super) struct Applied {
    /// `execution.checkpointing.max-concurrent-checkpoints` (default 1).
    pub max_concurrent: usize,
    /// Keys left alone: (key, why).
    pub ignored: Vec<(String, &'static str)>,
}

fn mapped(key: &str) -> Option<(Setting, &'static str)> {
    MAPPED
        .iter()
        .find(|(keys, _, _)| keys.contains(&key))
        .map(|(keys, s, _)| (*s, keys[0]))
}

fn flag_of(s: Setting) -> &'static str {
    MAPPED.iter().find(|(_, m, _)| *m == s).map_or("", |(_, _, f)| f)
}

/// The known key closest to `key`, when it is close enough to be what was meant.
fn suggest(key: &str) -> Option<&'static str> {
    let all = MAPPED
        .iter()
        .flat_map(|(keys, _, _)| keys.iter().copied())
        .chain(KNOWN.iter().copied());
    let (best, d) = all
        .map(|k| (k, statekit_changelog::config::edit_distance(key, k)))
        .min_by_key(|&(_, d)| d)?;
    (d >= 1 && d <= (key.len() / 8).max(2)).then_some(best)
}

/// Applies the mapped keys of `entries` to `args` (a flag named in `args.explicit` wins),
/// errors on misspelt keys and on conflicting spellings of one key, and says which keys it
/// ignored. Changelog keys (`state.changelog.*`, …) are left to [`statekit_changelog`].
pub(super) fn apply(args: &mut WordcountArgs, entries: &[Entry]) -> Result<Applied> {
    let mut applied = Applied {
        max_concurrent: 1,
        ..Default::default()
    };
    // Later entries win (the file, then -D); one key under two spellings with different
    // values is an error, as for the changelog keys.
    let mut seen: Vec<(Setting, &Entry)> = Vec::new();
    for e in entries {
        if statekit_changelog::ChangelogConfig::owns_key(&e.key) {
            continue;
        }
        if let Some((setting, canonical)) = mapped(&e.key) {
            if let Some((_, prev)) = seen.iter().find(|(s, p)| *s == setting && p.key != e.key) {
                if prev.value.trim() != e.value.trim() {
                    bail!(
                        "{canonical}: set twice with different values: `{}` as {} ({}) and `{}` as {} ({})",
                        prev.value,
                        prev.key,
                        origin(prev),
                        e.value,
                        e.key,
                        origin(e)
                    );
                }
            }
            seen.retain(|(s, _)| *s != setting);
            seen.push((setting, e));
            continue;
        }
        let known = KNOWN.contains(&e.key.as_str()) || KNOWN_PREFIXES.iter().any(|p| e.key.starts_with(p));
        // In a shared namespace, or one misspelt (`paralelism.default`).
        let first = e.key.split('.').next().unwrap_or_default();
        let ours = NAMESPACES.iter().any(|p| {
            e.key.starts_with(p) || statekit_changelog::config::edit_distance(first, p.trim_end_matches('.')) <= 2
        });
        if !known && ours {
            if let Some(s) = suggest(&e.key) {
                bail!(
                    "{}: unknown configuration key `{}`; did you mean `{s}`?",
                    origin(e),
                    e.key
                );
            }
        }
        if !applied.ignored.iter().any(|(k, _)| k == &e.key) {
            let why = if known {
                "not used by the word count"
            } else {
                "not a key statekit knows"
            };
            applied.ignored.push((e.key.clone(), why));
        }
    }
    for (setting, e) in seen {
        let flag = flag_of(setting);
        if !flag.is_empty() && args.explicit.iter().any(|f| f == flag) {
            continue;
        }
        let v = e.value.trim();
        let bad = |expected: &str| anyhow::anyhow!("{}: {}: `{v}`: expected {expected}", origin(e), e.key);
        match setting {
            Setting::Backend => {
                args.backend = match v.to_ascii_lowercase().as_str() {
                    "hashmap" | "filesystem" | "jobmanager" => BackendKind::Hashmap,
                    "rocksdb" => BackendKind::Rocksdb,
                    _ => return Err(bad("hashmap or rocksdb")),
                }
            }
            Setting::CheckpointDir => args.checkpoint_dir = PathBuf::from(v),
            Setting::SavepointDir => args.savepoint_dir = PathBuf::from(v),
            Setting::Retained => {
                args.retained_checkpoints = v
                    .parse()
                    .ok()
                    .filter(|n| *n >= 1)
                    .ok_or_else(|| bad("a whole number ≥ 1"))?
            }
            Setting::Incremental => {
                args.checkpoint_type =
                    match statekit_changelog::config::parse_bool(v).map_err(|_| bad("true or false"))? {
                        true => CheckpointType::Incremental,
                        false => CheckpointType::Full,
                    }
            }
            Setting::Interval => {
                let d = statekit_changelog::config::parse_duration(v)
                    .map_err(|_| bad("a duration (`10 s`, `1 min`, `500ms`)"))?;
                args.checkpoint_interval = (d > Duration::ZERO).then_some(d);
            }
            Setting::RestorePath => args.restore = Some(v.to_string()),
            Setting::RestoreMode => args.restore_mode = v.parse().map_err(|_| bad("CLAIM, NO_CLAIM or LEGACY"))?,
            Setting::AllowNonRestored => {
                args.allow_non_restored_state =
                    statekit_changelog::config::parse_bool(v).map_err(|_| bad("true or false"))?
            }
            Setting::Parallelism => {
                args.parallelism = v
                    .parse()
                    .ok()
                    .filter(|n| *n >= 1)
                    .ok_or_else(|| bad("a whole number ≥ 1"))?
            }
            Setting::MaxParallelism => {
                args.max_parallelism = v
                    .parse()
                    .ok()
                    .filter(|n| *n >= 1)
                    .ok_or_else(|| bad("a whole number ≥ 1"))?
            }
            Setting::MaxConcurrent => {
                applied.max_concurrent = v
                    .parse()
                    .ok()
                    .filter(|n| *n >= 1)
                    .ok_or_else(|| bad("a whole number ≥ 1"))?
            }
        }
    }
    Ok(applied)
}

fn origin(e: &Entry) -> &str {
    if e.origin.is_empty() {
        "configuration"
    } else {
        &e.origin
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn misspellings_are_caught_and_flink_keys_are_known() {
        assert_eq!(
            suggest("execution.checkpointing.max-concurent-checkpoints"),
            Some("execution.checkpointing.max-concurrent-checkpoints")
        );
        assert_eq!(suggest("state.checkpoint.dir"), Some("state.checkpoints.dir"));
        assert_eq!(suggest("paralelism.default"), Some("parallelism.default"));
        assert_eq!(suggest("pipeline.max-paralelism"), Some("pipeline.max-parallelism"));
        assert_eq!(suggest("execution.checkpointing.timeout"), None, "exact: known");
        assert_eq!(suggest("pipeline.something-else-entirely"), None);
        for (keys, _, _) in MAPPED {
            for k in *keys {
                assert!(NAMESPACES.iter().any(|n| k.starts_with(n)), "{k}");
            }
        }
    }
}
