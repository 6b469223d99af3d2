//! Materialization: writing the delegate's state out now and then, independently of
//! checkpoints, so the log can be truncated and restores replay a bounded tail.

use crate::backend::{delete_quietly, materialization_ref, OwnMaterialization};
use crate::error::{ChangelogError, MaterializationFailure};
use crate::file::LogId;
use statekit_core::storage::{join, Storage};
use statekit_core::{KeyGroupRange, KeyedStateView};
use statekit_format::{write_keyed_file, KeyedStats, MaterializedPart, WriteOptions};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Where materializations go inside the job directory (Flink's task-owned directory).
pub const MATERIALIZATION_DIR: &str = "taskowned";

/// When to materialize (Flink's `state.changelog.periodic-materialize.*` and
/// `max-failures-allowed`, plus a tail-size bound).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MaterializationPolicy {
    /// Materialize this long after the previous materialization finished (default 10 min);
    /// `None` turns periodic materialization off.
    pub interval: Option<Duration>,
    /// Materialize as soon as the log tail holds this many bytes (bounds replay on restore);
    /// `None`: no size trigger.
    pub max_tail_bytes: Option<u64>,
    /// Consecutive failures tolerated; one more fails the backend (default 3).
    pub max_failures: u32,
}

impl Default for MaterializationPolicy {
    fn default() -> Self {
        MaterializationPolicy {
            interval: Some(Duration::from_secs(600)),
            max_tail_bytes: Some(512 << 20),
            max_failures: 3,
        }
    }
}

/// A finished materialization.
#[derive(Debug)]
pub(crate) struct Done {
    pub(crate) own: OwnMaterialization,
    pub(crate) upto: u64,
}

type Job = JoinHandle<Result<Done, MaterializationFailure>>;

/// Runs the materializations of one backend: schedules them (with a per-subtask jitter on the
/// first one), writes them on a background thread as canonical keyed files into
/// `<job>/taskowned/`, counts consecutive failures.
pub struct Materializer {
    storage: Arc<dyn Storage>,
    policy: MaterializationPolicy,
    options: WriteOptions,
    next_due: Option<Instant>,
    failures: u32,
    last_id: u64,
    running: Option<Job>,
    finished: Option<Result<Done, MaterializationFailure>>,
}

impl std::fmt::Debug for Materializer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Materializer")
            .field("policy", &self.policy)
            .field("failures", &self.failures)
            .field("running", &self.running.is_some())
            .finish()
    }
}

impl Materializer {
    /// Materializations into `<job storage>/taskowned/`. `jitter_seed` (e.g. the subtask
    /// index) spreads the first materialization of the subtasks over one interval, so they do
    /// not all materialize at once.
    pub fn new(job_storage: Arc<dyn Storage>, policy: MaterializationPolicy, jitter_seed: u64) -> Self {
        let next_due = policy.interval.map(|i| {
            let ms = i.as_millis().max(1) as u64;
            let jitter = jitter_seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) % ms;
            Instant::now() + i / 2 + Duration::from_millis(jitter / 2)
        });
        Materializer {
            storage: job_storage,
            policy,
            options: WriteOptions::default(),
            next_due,
            failures: 0,
            last_id: 0,
            running: None,
            finished: None,
        }
    }

    /// Sets how materializations are written (compression, block size).
    pub fn with_write_options(mut self, options: WriteOptions) -> Self {
        self.options = options;
        self
    }

    /// The policy.
    pub fn policy(&self) -> &MaterializationPolicy {
        &self.policy
    }

    /// Consecutive failures so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// True when a materialization should start now.
    pub(crate) fn due(&self, tail_bytes: u64) -> bool {
        if self.running.is_some() || self.finished.is_some() {
            return false;
        }
        let by_time = self.next_due.is_some_and(|t| Instant::now() >= t);
        let by_size = self.policy.max_tail_bytes.is_some_and(|m| tail_bytes >= m);
        by_time || by_size
    }

    fn reschedule(&mut self) {
        self.next_due = self.policy.interval.map(|i| Instant::now() + i);
    }

    pub(crate) fn next_id(&mut self) -> u64 {
        self.last_id += 1;
        self.last_id
    }

    pub(crate) fn last_id(&self) -> u64 {
        self.last_id
    }

    /// Continues ids after those of restored handles.
    pub(crate) fn observe_id(&mut self, id: u64) {
        self.last_id = self.last_id.max(id);
    }

    pub(crate) fn skipped(&mut self) {
        tracing::debug!("materialization skipped: nothing changed");
        self.reschedule();
    }

    /// Writes `view` (the delegate's state at sequence number `upto`) on a background thread.
    pub(crate) fn start(
        &mut self,
        id: u64,
        upto: u64,
        view: Arc<dyn KeyedStateView>,
        range: KeyGroupRange,
        log: LogId,
    ) {
        let storage = self.storage.clone();
        let options = self.options;
        let name = format!("mat-{log}-{id}.skd");
        let path = join(MATERIALIZATION_DIR, &name);
        tracing::debug!(id, upto, file = %storage.describe(&path), "materialization started");
        self.running = Some(std::thread::spawn(move || {
            let info = write_keyed_file(view.as_ref(), range, storage.as_ref(), &path, &options)
                .map_err(|source| MaterializationFailure::Write { id, source })?;
            Ok(Done {
                own: OwnMaterialization {
                    id,
                    part: MaterializedPart {
                        file: materialization_ref(MATERIALIZATION_DIR, &name, info.file.size),
                        key_groups: range,
                        stats: Some(KeyedStats::from_info(&info)),
                    },
                    path,
                    confirmed: false,
                },
                upto,
            })
        }));
    }

    /// Waits for the running materialization (its result is kept for `take_finished`).
    pub(crate) fn wait_running(&mut self) {
        if let Some(job) = self.running.take() {
            let r = job.join().unwrap_or_else(|_| Err(MaterializationFailure::Panicked));
            self.finished = Some(r);
        }
    }

    /// The result of a finished materialization, if one finished. Failures are counted; more
    /// consecutive failures than allowed is an error.
    pub(crate) fn take_finished(&mut self) -> Result<Option<Done>, ChangelogError> {
        if self.running.as_ref().is_some_and(|j| j.is_finished()) {
            self.wait_running();
        }
        let Some(r) = self.finished.take() else {
            return Ok(None);
        };
        self.reschedule();
        match r {
            Ok(done) => {
                self.failures = 0;
                Ok(Some(done))
            }
            Err(why) => {
                self.failures += 1;
                tracing::warn!(failures = self.failures, error = %why, "materialization failed");
                if self.failures > self.policy.max_failures {
                    Err(ChangelogError::MaterializationFailures {
                        failures: self.failures,
                        allowed: self.policy.max_failures,
                        last: Box::new(why),
                    })
                } else {
                    Ok(None)
                }
            }
        }
    }

    /// Deletes a materialization file nothing references.
    pub(crate) fn delete(&self, path: &str) {
        delete_quietly(self.storage.as_ref(), path);
    }
}
