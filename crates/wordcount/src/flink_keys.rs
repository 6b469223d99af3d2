//! Flink's configuration keys for the word count: the main ones map to its settings (the
//! same meaning under the same name), the rest of Flink's keys in the namespaces it shares
//! (`state.`, `execution.`, `pipeline.`, `parallelism.`) are known and ignored, and a key
//! there that is none of them but close to one is a misspelling: an error with the key it
//! probably meant. A flag given on the command line wins over the configuration, as in Flink.

use crate::config::Entry;
use crate::{BackendKind, CheckpointType, Contradiction, Settings, WordcountError};
use statekit_core::flink_config::{self as fc, FlinkKey};
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

/// The mapped keys ([`fc::JOB`]) and the flag each one is the same as (a flag given on the
/// command line wins).
const MAPPED: &[(&FlinkKey, Setting, &str)] = &[
    (&fc::STATE_BACKEND, Setting::Backend, "backend"),
    (&fc::CHECKPOINT_DIR, Setting::CheckpointDir, "checkpoint_dir"),
    (&fc::SAVEPOINT_DIR, Setting::SavepointDir, "savepoint_dir"),
    (&fc::CHECKPOINTS_RETAINED, Setting::Retained, "retained_checkpoints"),
    (&fc::CHECKPOINT_INCREMENTAL, Setting::Incremental, "checkpoint_type"),
    (&fc::CHECKPOINT_INTERVAL, Setting::Interval, "checkpoint_interval"),
    (&fc::RESTORE_PATH, Setting::RestorePath, "restore"),
    (&fc::RESTORE_MODE, Setting::RestoreMode, "restore_mode"),
    (
        &fc::ALLOW_NON_RESTORED,
        Setting::AllowNonRestored,
        "allow_non_restored_state",
    ),
    (&fc::PARALLELISM, Setting::Parallelism, "parallelism"),
    (&fc::MAX_PARALLELISM, Setting::MaxParallelism, "max_parallelism"),
    (&fc::MAX_CONCURRENT_CHECKPOINTS, Setting::MaxConcurrent, ""),
];

/// What the entries set beyond [`Settings`] (settings without a flag).
#[derive(Debug, Default)]
pub struct Applied {
    /// `execution.checkpointing.max-concurrent-checkpoints` (default 1).
    pub max_concurrent: usize,
    /// Keys left alone: (key, why).
    pub ignored: Vec<(String, &'static str)>,
}

fn mapped(key: &str) -> Option<(Setting, &'static str)> {
    MAPPED.iter().find(|(k, _, _)| k.is(key)).map(|(k, s, _)| (*s, k.name))
}

fn flag_of(s: Setting) -> &'static str {
    MAPPED.iter().find(|(_, m, _)| *m == s).map_or("", |(_, _, f)| f)
}

/// The known key closest to `key`, when it is close enough to be what was meant
/// ([`fc::suggest`]): the spelling nearest to the one written, old or new.
fn suggest(key: &str) -> Option<&'static str> {
    fc::suggest(key, MAPPED.iter().map(|(k, _, _)| *k), fc::OTHER).map(|s| s.nearest)
}

/// Applies the mapped keys of `entries` to `args` (a setting named in `args.explicit` wins),
/// errors on misspelt keys and on conflicting spellings of one key, and says which keys it
/// ignored. Changelog keys (`state.changelog.*`, …) are left to [`statekit_changelog`].
pub fn apply(args: &mut Settings, entries: &[Entry]) -> Result<Applied, WordcountError> {
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
                    return Err(WordcountError::Contradiction(Box::new(Contradiction {
                        name: canonical,
                        first_value: prev.value.clone(),
                        first_key: prev.key.clone(),
                        first_origin: origin(prev).to_string(),
                        value: e.value.clone(),
                        key: e.key.clone(),
                        origin: origin(e).to_string(),
                    })));
                }
            }
            seen.retain(|(s, _)| *s != setting);
            seen.push((setting, e));
            continue;
        }
        let known = fc::is_other(&e.key);
        // In a shared namespace, or one misspelt (`paralelism.default`).
        let first = e.key.split('.').next().unwrap_or_default();
        let ours = fc::SHARED_NAMESPACES
            .iter()
            .any(|p| e.key.starts_with(p) || fc::is_close(first, p.trim_end_matches('.')));
        if !known && ours {
            if let Some(suggestion) = suggest(&e.key) {
                return Err(WordcountError::UnknownKey {
                    origin: origin(e).to_string(),
                    key: e.key.clone(),
                    suggestion,
                });
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
        let bad = |expected: &'static str| WordcountError::BadValue {
            origin: origin(e).to_string(),
            key: e.key.clone(),
            value: v.to_string(),
            expected,
        };
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
                args.checkpoint_type = match fc::parse_bool(v).map_err(|_| bad("true or false"))? {
                    true => CheckpointType::Incremental,
                    false => CheckpointType::Full,
                }
            }
            Setting::Interval => {
                let d = fc::parse_duration(v).map_err(|_| bad("a duration (`10 s`, `1 min`, `500ms`)"))?;
                args.checkpoint_interval = (d > Duration::ZERO).then_some(d);
            }
            Setting::RestorePath => args.restore = Some(v.to_string()),
            Setting::RestoreMode => args.restore_mode = v.parse().map_err(|_| bad("CLAIM, NO_CLAIM or LEGACY"))?,
            Setting::AllowNonRestored => {
                args.allow_non_restored_state = fc::parse_bool(v).map_err(|_| bad("true or false"))?
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
            for k in keys.spellings() {
                assert!(fc::SHARED_NAMESPACES.iter().any(|n| k.starts_with(n)), "{k}");
            }
        }
    }
}
