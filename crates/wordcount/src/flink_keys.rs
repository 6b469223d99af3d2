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

/// The setting `key` (one of [`fc::JOB`]) sets, if the word count has one.
fn setting_of(key: &FlinkKey) -> Option<Setting> {
    MAPPED.iter().find(|(k, _, _)| k.name == key.name).map(|(_, s, _)| *s)
}

fn flag_of(s: Setting) -> &'static str {
    MAPPED.iter().find(|(_, m, _)| *m == s).map_or("", |(_, _, f)| f)
}

/// Applies the mapped keys of `entries` to `args` (a setting named in `args.explicit` wins),
/// errors on misspelt keys and on conflicting spellings of one key, and says which keys it
/// ignored. Which key is which is [`fc::job_key`]'s answer; changelog keys
/// (`state.changelog.*`, …) are left to [`statekit_changelog`].
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
        let why = match fc::job_key(&e.key) {
            fc::JobKey::Read(key) => match setting_of(key) {
                Some(setting) => {
                    check_consistent(&seen, setting, key.name, e)?;
                    seen.retain(|(s, _)| *s != setting);
                    seen.push((setting, e));
                    continue;
                }
                None => "not used by the word count",
            },
            fc::JobKey::Misspelt(s) => {
                return Err(WordcountError::UnknownKey {
                    origin: origin(e).to_string(),
                    key: e.key.clone(),
                    suggestion: s.nearest,
                })
            }
            fc::JobKey::Known => "not used by the word count",
            fc::JobKey::Unknown => "not a key statekit knows",
        };
        if !applied.ignored.iter().any(|(k, _)| k == &e.key) {
            applied.ignored.push((e.key.clone(), why));
        }
    }
    for (setting, e) in seen {
        let flag = flag_of(setting);
        if !flag.is_empty() && args.explicit.iter().any(|f| f == flag) {
            continue;
        }
        set(args, &mut applied, setting, e)?;
    }
    Ok(applied)
}

/// An error when `setting` was set before under another spelling to another value.
fn check_consistent(
    seen: &[(Setting, &Entry)],
    setting: Setting,
    name: &'static str,
    e: &Entry,
) -> Result<(), WordcountError> {
    if let Some((_, prev)) = seen.iter().find(|(s, p)| *s == setting && p.key != e.key) {
        if prev.value.trim() != e.value.trim() {
            return Err(WordcountError::Contradiction(Box::new(Contradiction {
                name,
                first_value: prev.value.clone(),
                first_key: prev.key.clone(),
                first_origin: origin(prev).to_string(),
                value: e.value.clone(),
                key: e.key.clone(),
                origin: origin(e).to_string(),
            })));
        }
    }
    Ok(())
}

/// Sets `setting` from the value of entry `e`.
fn set(args: &mut Settings, applied: &mut Applied, setting: Setting, e: &Entry) -> Result<(), WordcountError> {
    let v = e.value.trim();
    let bad = |expected: &'static str| WordcountError::BadValue {
        origin: origin(e).to_string(),
        key: e.key.clone(),
        value: v.to_string(),
        expected,
    };
    let positive = || bad("a whole number ≥ 1");
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
        Setting::Retained => args.retained_checkpoints = positive_number(v).ok_or_else(positive)?,
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
        Setting::Parallelism => args.parallelism = positive_number(v).ok_or_else(positive)?,
        Setting::MaxParallelism => args.max_parallelism = positive_number(v).ok_or_else(positive)?,
        Setting::MaxConcurrent => applied.max_concurrent = positive_number(v).ok_or_else(positive)?,
    }
    Ok(())
}

/// `v` as a whole number ≥ 1.
fn positive_number<T: std::str::FromStr + PartialOrd + From<u8>>(v: &str) -> Option<T> {
    v.parse().ok().filter(|n| *n >= T::from(1))
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
    fn every_key_the_job_reads_is_a_setting() {
        // The misspelling checks moved to `statekit_core::flink_config` (`job_key`).
        for (keys, _, _) in MAPPED {
            for k in keys.spellings() {
                assert!(fc::SHARED_NAMESPACES.iter().any(|n| k.starts_with(n)), "{k}");
            }
        }
        for k in fc::JOB {
            assert!(setting_of(k).is_some(), "{k:?}");
        }
    }

    #[test]
    fn misspelt_keys_name_the_nearest_spelling() {
        let entry = |key: &str| Entry {
            key: key.into(),
            value: "3".into(),
            origin: "-D".into(),
        };
        let mut settings = crate::tests::settings();
        let e = apply(
            &mut settings,
            &[entry("execution.checkpointing.max-concurent-checkpoints")],
        )
        .expect_err("typo");
        assert_eq!(
            e.to_string(),
            "-D: unknown configuration key `execution.checkpointing.max-concurent-checkpoints`; did you mean `execution.checkpointing.max-concurrent-checkpoints`?"
        );
        let applied = apply(
            &mut settings,
            &[
                entry("parallelism.default"),
                entry("execution.checkpointing.timeout"),
                entry("foo.bar"),
            ],
        )
        .expect("ok");
        assert_eq!(settings.parallelism, 3);
        assert_eq!(
            applied.ignored,
            [
                (
                    "execution.checkpointing.timeout".to_string(),
                    "not used by the word count"
                ),
                ("foo.bar".to_string(), "not a key statekit knows")
            ]
        );
    }
}
