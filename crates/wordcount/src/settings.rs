//! The job's settings completed from `--config`, `-D` and the flags, and checked.

use crate::{flink_keys, CheckpointType, Event, Guarantee, Host, SavepointFormat, Settings, WordcountError};
use statekit_changelog::{ChangelogConfig, StorageKind};

/// What the configuration sets beyond [`Settings`].
pub(crate) struct Resolved {
    /// The changelog's configuration, when it is on.
    pub(crate) changelog: Option<ChangelogConfig>,
    /// Checkpoints whose asynchronous part may run at once
    /// (`execution.checkpointing.max-concurrent-checkpoints`, default 1).
    pub(crate) max_concurrent: usize,
}

/// The settings from `--config`, `-D` and the flags; Flink's keys that mean a flag set it
/// unless the flag was given ([`flink_keys::apply`]).
pub(crate) fn resolve(args: &mut Settings, host: &mut dyn Host) -> Result<Resolved, WordcountError> {
    let mut entries = crate::config::load(args.config.as_deref(), &args.define)?;
    if args.changelog {
        entries.push(crate::config::Entry {
            key: "state.changelog.enabled".into(),
            value: "true".into(),
            origin: "--changelog".into(),
        });
    }
    let (changelog, notes) = ChangelogConfig::from_entries(
        entries
            .iter()
            .map(|e| (e.key.as_str(), e.value.as_str(), e.origin.as_str())),
    )?;
    for n in &notes {
        host.event(Event::ConfigNote {
            key: &n.key,
            note: &n.note,
        })
        .map_err(WordcountError::Output)?;
    }
    let applied = flink_keys::apply(args, &entries)?;
    if !applied.ignored.is_empty() {
        host.event(Event::IgnoredKeys(&applied.ignored))
            .map_err(WordcountError::Output)?;
    }
    let changelog = changelog.enabled.then_some(changelog);
    if let Some(c) = &changelog {
        if c.storage == StorageKind::Memory {
            return Err(WordcountError::MemoryChangelog);
        }
        if args.checkpoint_type == CheckpointType::Incremental {
            return Err(WordcountError::IncrementalWithChangelog);
        }
        if args.savepoint_format == SavepointFormat::Native {
            return Err(WordcountError::NativeSavepointWithChangelog);
        }
        if args.guarantee == Guarantee::AtMostOnce {
            return Err(WordcountError::ChangelogWithoutCheckpoints);
        }
    }
    Ok(Resolved {
        changelog,
        max_concurrent: applied.max_concurrent,
    })
}
