//! The shared-state registry: which shared files (e.g. incremental SSTs in `<job>/shared/`)
//! each retained checkpoint references, and therefore which may be deleted.
//!
//! It is pure decision logic — no I/O: callers apply the returned deletions to storage, so the
//! rules can be property-tested exhaustively. Files are named by a key (their path relative to
//! the job directory, or an absolute path for files of a restored snapshot).
//!
//! Rules (Flink's, made explicit):
//! * a file is *live* while some retained checkpoint references it, or while an in-flight
//!   (pending) checkpoint that may still complete references it;
//! * when a checkpoint completes, older checkpoints beyond the retained count are subsumed, and
//!   every file no longer live is returned for deletion — except *protected* files;
//! * an aborted checkpoint's files that no retained checkpoint references are returned for
//!   deletion;
//! * restore modes: under [`RestoreMode::Claim`] the restored checkpoint becomes owned — it is
//!   retained like any other and its files are deleted once it is subsumed and no newer
//!   checkpoint references them; under [`RestoreMode::NoClaim`] and [`RestoreMode::Legacy`] the
//!   restored files are protected and never deleted (NO_CLAIM additionally forbids new
//!   checkpoints from referencing them: the first checkpoint after the restore must be full).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// How a job treats the snapshot it was restored from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RestoreMode {
    /// The job owns the snapshot: its files are deleted once no retained checkpoint needs them.
    Claim,
    /// The snapshot is never modified or deleted, and nothing new references its files.
    NoClaim,
    /// The snapshot is never deleted, but new checkpoints may reference its files.
    Legacy,
}

impl RestoreMode {
    /// The command-line spelling (`claim`, `no-claim`, `legacy`).
    pub fn as_str(self) -> &'static str {
        match self {
            RestoreMode::Claim => "claim",
            RestoreMode::NoClaim => "no-claim",
            RestoreMode::Legacy => "legacy",
        }
    }

    /// May checkpoints after the restore reference the restored snapshot's files?
    pub fn may_reference_restored_files(self) -> bool {
        !matches!(self, RestoreMode::NoClaim)
    }
}

impl fmt::Display for RestoreMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for RestoreMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().replace('_', "-").as_str() {
            "claim" => Ok(RestoreMode::Claim),
            "no-claim" => Ok(RestoreMode::NoClaim),
            "legacy" => Ok(RestoreMode::Legacy),
            other => Err(format!(
                "unknown restore mode {other:?} (expected claim, no-claim or legacy)"
            )),
        }
    }
}

/// Why a checkpoint was rejected by the registry.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// A checkpoint id is not newer than the newest completed one.
    #[error("checkpoint {id} is not newer than the latest completed checkpoint {latest}")]
    NotNewer {
        /// The offending id.
        id: u64,
        /// The newest completed id.
        latest: u64,
    },
    /// A checkpoint after a NO_CLAIM restore references a restored file.
    #[error("checkpoint {id} references {file:?} of the snapshot restored in no-claim mode")]
    ReferencesUnclaimed {
        /// The checkpoint.
        id: u64,
        /// The file.
        file: String,
    },
    /// The checkpoint is unknown (never begun, or already completed or aborted).
    #[error("checkpoint {0} is not pending")]
    NotPending(u64),
}

impl RegistryError {
    /// What kind of failure this is (every registry error is a request that does not fit).
    pub fn kind(&self) -> statekit_core::ErrorKind {
        statekit_core::ErrorKind::Caller
    }
}

impl statekit_core::HasErrorKind for RegistryError {
    fn kind(&self) -> statekit_core::ErrorKind {
        RegistryError::kind(self)
    }
}

/// The registry of one job.
#[derive(Clone, Debug, Default)]
pub struct SharedStateRegistry {
    retained_count: usize,
    /// Completed, retained checkpoints → the shared files each references.
    retained: BTreeMap<u64, BTreeSet<String>>,
    /// Pending checkpoints → the shared files each references.
    pending: BTreeMap<u64, BTreeSet<String>>,
    /// Files that must never be deleted (restored in NO_CLAIM or LEGACY mode).
    protected: BTreeSet<String>,
    /// Files of a snapshot restored in NO_CLAIM mode (must not be referenced).
    unclaimed: BTreeSet<String>,
    latest_completed: Option<u64>,
}

/// What the caller must do after an event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Decision {
    /// Checkpoints no longer retained (their exclusive directories may be deleted).
    pub subsumed: Vec<u64>,
    /// Shared files nothing live references any more: delete them.
    pub delete: Vec<String>,
}

impl SharedStateRegistry {
    /// A registry retaining the newest `retained_count` (≥ 1) completed checkpoints.
    pub fn new(retained_count: usize) -> Self {
        SharedStateRegistry {
            retained_count: retained_count.max(1),
            ..Self::default()
        }
    }

    /// Records the snapshot a job was restored from (checkpoint `id` referencing `files`).
    /// Call before any checkpoint begins.
    pub fn restored(&mut self, id: u64, files: impl IntoIterator<Item = String>, mode: RestoreMode) {
        let files: BTreeSet<String> = files.into_iter().collect();
        match mode {
            RestoreMode::Claim => {
                self.retained.insert(id, files);
            }
            RestoreMode::NoClaim => {
                self.protected.extend(files.iter().cloned());
                self.unclaimed.extend(files);
            }
            RestoreMode::Legacy => {
                self.protected.extend(files.iter().cloned());
                // Retained like a checkpoint so its files stay live while referenced, but
                // protected, so they are never deleted.
                self.retained.insert(id, files);
            }
        }
        self.latest_completed = Some(self.latest_completed.map_or(id, |l| l.max(id)));
    }

    /// Protects `files`: they are never deleted (files a restored snapshot references but
    /// did not own, e.g. absolute references into another job's directory).
    pub fn protect(&mut self, files: impl IntoIterator<Item = String>) {
        self.protected.extend(files);
    }

    /// Checkpoint `id` is being written and will reference `files` (new uploads and reused
    /// ones). Reused files stay live even if an older checkpoint is subsumed meanwhile.
    pub fn begin(&mut self, id: u64, files: impl IntoIterator<Item = String>) -> Result<(), RegistryError> {
        if let Some(latest) = self.latest_completed {
            if id <= latest {
                return Err(RegistryError::NotNewer { id, latest });
            }
        }
        let files: BTreeSet<String> = files.into_iter().collect();
        if let Some(f) = files.iter().find(|f| self.unclaimed.contains(*f)) {
            return Err(RegistryError::ReferencesUnclaimed { id, file: f.clone() });
        }
        self.pending.insert(id, files);
        Ok(())
    }

    /// Checkpoint `id` completed: it is retained, older ones beyond the retained count (and
    /// pending ones older than it, which can no longer complete usefully) are dropped.
    pub fn complete(&mut self, id: u64) -> Result<Decision, RegistryError> {
        let files = self.pending.remove(&id).ok_or(RegistryError::NotPending(id))?;
        let mut candidates: BTreeSet<String> = BTreeSet::new();
        self.retained.insert(id, files);
        self.latest_completed = Some(self.latest_completed.map_or(id, |l| l.max(id)));
        let mut decision = Decision::default();
        while self.retained.len() > self.retained_count {
            let Some((&old, _)) = self.retained.iter().next() else {
                break;
            };
            if let Some(f) = self.retained.remove(&old) {
                candidates.extend(f);
            }
            decision.subsumed.push(old);
        }
        let stale: Vec<u64> = self.pending.range(..id).map(|(k, _)| *k).collect();
        for p in stale {
            if let Some(f) = self.pending.remove(&p) {
                candidates.extend(f);
            }
        }
        decision.delete = self.unreferenced(candidates);
        Ok(decision)
    }

    /// Checkpoint `id` was aborted: its files that nothing live references are deleted.
    pub fn abort(&mut self, id: u64) -> Result<Decision, RegistryError> {
        let files = self.pending.remove(&id).ok_or(RegistryError::NotPending(id))?;
        Ok(Decision {
            subsumed: Vec::new(),
            delete: self.unreferenced(files),
        })
    }

    fn unreferenced(&self, candidates: BTreeSet<String>) -> Vec<String> {
        candidates
            .into_iter()
            .filter(|f| !self.protected.contains(f) && !self.is_live(f))
            .collect()
    }

    /// True when a retained or pending checkpoint references `file`.
    pub fn is_live(&self, file: &str) -> bool {
        self.retained
            .values()
            .chain(self.pending.values())
            .any(|s| s.contains(file))
    }

    /// True when `file` must never be deleted.
    pub fn is_protected(&self, file: &str) -> bool {
        self.protected.contains(file)
    }

    /// The retained checkpoint ids, ascending.
    pub fn retained(&self) -> Vec<u64> {
        self.retained.keys().copied().collect()
    }

    /// Every file a retained or pending checkpoint references.
    pub fn live_files(&self) -> BTreeSet<String> {
        self.retained
            .values()
            .chain(self.pending.values())
            .flatten()
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn set(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn incremental_files_live_until_unreferenced() {
        let mut r = SharedStateRegistry::new(1);
        r.begin(1, set(&["a", "b"])).expect("begin");
        assert_eq!(r.complete(1).expect("complete"), Decision::default());
        r.begin(2, set(&["b", "c"])).expect("begin");
        let d = r.complete(2).expect("complete");
        assert_eq!(d.subsumed, vec![1]);
        assert_eq!(d.delete, set(&["a"]));
        r.begin(3, set(&["c", "d"])).expect("begin");
        let d = r.abort(3).expect("abort");
        assert_eq!(d.delete, set(&["d"]), "c is still referenced by checkpoint 2");
        assert!(r.begin(2, set(&[])).is_err(), "ids must grow");
    }

    #[test]
    fn restore_modes() {
        // CLAIM: restored files are deleted once subsumed and unreferenced.
        let mut r = SharedStateRegistry::new(1);
        r.restored(10, set(&["old1", "old2"]), RestoreMode::Claim);
        r.begin(11, set(&["old2", "new"])).expect("begin");
        let d = r.complete(11).expect("complete");
        assert_eq!((d.subsumed, d.delete), (vec![10], set(&["old1"])));

        // NO_CLAIM: never deleted, never referenced.
        let mut r = SharedStateRegistry::new(1);
        r.restored(10, set(&["old1"]), RestoreMode::NoClaim);
        assert!(matches!(
            r.begin(11, set(&["old1"])),
            Err(RegistryError::ReferencesUnclaimed { .. })
        ));
        r.begin(11, set(&["new"])).expect("begin");
        assert!(r.complete(11).expect("complete").delete.is_empty());

        // LEGACY: referenced, never deleted.
        let mut r = SharedStateRegistry::new(1);
        r.restored(10, set(&["old1", "old2"]), RestoreMode::Legacy);
        r.begin(11, set(&["old2"])).expect("begin");
        let d = r.complete(11).expect("complete");
        assert!(d.delete.is_empty());
        r.begin(12, set(&["x"])).expect("begin");
        assert!(r.complete(12).expect("complete").delete.is_empty(), "old2 is protected");
    }

    #[derive(Clone, Debug)]
    enum Ev {
        Begin(Vec<u8>),
        Complete(usize),
        Abort(usize),
    }

    proptest! {
        /// Over random schedules: a deleted file is never referenced by a retained or pending
        /// checkpoint, never protected, never deleted twice; and every file that is not live
        /// and not protected at the end has been deleted.
        #[test]
        fn deletions_are_safe_and_complete(
            retained in 1usize..4,
            mode in prop_oneof![Just(None), Just(Some(RestoreMode::Claim)), Just(Some(RestoreMode::NoClaim)), Just(Some(RestoreMode::Legacy))],
            events in proptest::collection::vec(prop_oneof![
                3 => proptest::collection::vec(0u8..12, 0..5).prop_map(Ev::Begin),
                2 => any::<usize>().prop_map(Ev::Complete),
                1 => any::<usize>().prop_map(Ev::Abort),
            ], 0..60),
        ) {
            let mut r = SharedStateRegistry::new(retained);
            let restored: Vec<String> = vec!["r0".into(), "r1".into()];
            let mut next = 1u64;
            if let Some(m) = mode {
                r.restored(0, restored.clone(), m);
            }
            let mut created: BTreeSet<String> = mode.map(|_| restored.iter().cloned().collect()).unwrap_or_default();
            let mut deleted: BTreeSet<String> = BTreeSet::new();
            let mut pending: Vec<u64> = Vec::new();
            for ev in events {
                let d = match ev {
                    Ev::Begin(files) => {
                        let mut names: Vec<String> = files.iter().map(|f| format!("f{f}")).collect();
                        // Reuse a restored file when the mode allows it.
                        if mode.is_some_and(|m| m.may_reference_restored_files()) && files.len() % 2 == 1 {
                            names.push("r1".into());
                        }
                        // A deleted file is never re-referenced (a new upload gets a new name).
                        names.retain(|n| !deleted.contains(n));
                        created.extend(names.iter().cloned());
                        r.begin(next, names).expect("begin");
                        pending.push(next);
                        next += 1;
                        continue;
                    }
                    Ev::Complete(i) if !pending.is_empty() => {
                        let id = pending.remove(i % pending.len());
                        let d = r.complete(id).expect("complete");
                        pending.retain(|p| *p > id);
                        d
                    }
                    Ev::Abort(i) if !pending.is_empty() => {
                        let id = pending.remove(i % pending.len());
                        r.abort(id).expect("abort")
                    }
                    _ => continue,
                };
                for f in d.delete {
                    prop_assert!(!r.is_live(&f), "deleted live file {f}");
                    prop_assert!(!r.is_protected(&f), "deleted protected file {f}");
                    if mode == Some(RestoreMode::NoClaim) || mode == Some(RestoreMode::Legacy) {
                        prop_assert!(!restored.contains(&f), "deleted a restored file in {mode:?}");
                    }
                    prop_assert!(deleted.insert(f.clone()), "deleted {f} twice");
                }
            }
            for p in pending {
                let d = r.abort(p).expect("abort");
                for f in d.delete {
                    prop_assert!(deleted.insert(f));
                }
            }
            let live = r.live_files();
            for f in &created {
                let keep = live.contains(f) || r.is_protected(f);
                prop_assert_eq!(deleted.contains(f), !keep, "file {} deleted={} live/protected={}", f, deleted.contains(f), keep);
            }
        }
    }
}
